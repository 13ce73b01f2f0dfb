//! The seed matrix and what is read off it: outcomes per order, confirmation of disagreeing
//! tests, and runs of single tests alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use fixgate_graph::{Node, NodeError, NodeId, Output};

use crate::audit::nio::Twice;
use crate::audit::scope::Scope;
use crate::audit::triage::PROOF_RERUNS;
use crate::contain::OutsideWrite;
use crate::engine::compact::{CompactRun, TestIds};
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::{Error, Result};
use crate::pytest::driver::{Record, RunResult};
use crate::pytest::events::{CollectedItem, Outcome, StateChange};
use crate::pytest::order;

/// An order of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OrderLabel {
    /// Collection order.
    File,
    /// Collection order reversed (serial tests keep their places).
    Reversed,
    /// A shuffle of the non-serial tests by a portable RNG.
    Seed(u64),
    /// Collection order with each test run twice in a row in the same process (`--nio`): read
    /// only for idempotence, never as one more order of the matrix.
    Twice,
}

impl OrderLabel {
    /// The order this label gives over the collected items.
    pub fn order(self, items: &[CollectedItem]) -> Vec<String> {
        match self {
            OrderLabel::File => order::seeded(items, 0),
            OrderLabel::Reversed => order::reversed(items),
            OrderLabel::Seed(s) => order::seeded(items, s),
            OrderLabel::Twice => order::twice(items),
        }
    }
}

impl OrderLabel {
    /// What the run of this order records: the file-order run the code each test ran and the
    /// state it left changed, the reversed run the state (each test after other neighbours),
    /// the others nothing (see `crate::audit::scope`).
    pub fn record(self) -> Record {
        match self {
            OrderLabel::File => Record::ALL,
            OrderLabel::Reversed => Record {
                code: false,
                state: true,
            },
            OrderLabel::Seed(_) | OrderLabel::Twice => Record::NONE,
        }
    }
}

/// As the report and node labels spell it: `0`, `rev`, the seed, or `nio`.
impl fmt::Display for OrderLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderLabel::File => f.write_str("0"),
            OrderLabel::Reversed => f.write_str("rev"),
            OrderLabel::Seed(s) => write!(f, "{s}"),
            OrderLabel::Twice => f.write_str("nio"),
        }
    }
}

/// The matrix's orders: file order, reversed, then the seeds.
pub fn labels(seeds: &[u64]) -> Vec<OrderLabel> {
    let mut out = vec![OrderLabel::File, OrderLabel::Reversed];
    out.extend(seeds.iter().map(|&s| OrderLabel::Seed(s)));
    out
}

/// The seed runs of the matrix, one per order label, with their nodes. Each run is kept
/// compact once read (see [`crate::engine::compact`]), except the file-order run, whose traces
/// and skip reasons later steps read.
pub struct Matrix {
    pub labels: Vec<OrderLabel>,
    ids: TestIds,
    runs: BTreeMap<OrderLabel, CompactRun>,
    file: RunResult,
    pub nodes: BTreeMap<OrderLabel, NodeId>,
}

/// The matrix's runs added to the graph and not yet waited for.
pub struct Started {
    labels: Vec<OrderLabel>,
    pub nodes: BTreeMap<OrderLabel, NodeId>,
}

/// Adds one seed run per label, each computed from the collection it orders; a shuffled order
/// runs only the tests of `scope` (file order and reversed always run whole).
pub fn start(
    engine: &Engine,
    labels: &[OrderLabel],
    items: &[CollectedItem],
    collection: NodeId,
    scope: &Scope,
) -> Result<Started> {
    let mut started = Started {
        labels: Vec::new(),
        nodes: BTreeMap::new(),
    };
    started.add(engine, labels, items, collection, scope)?;
    Ok(started)
}

impl Started {
    /// Adds the runs of more labels (the shuffled orders, once the scope is known).
    pub fn add(
        &mut self,
        engine: &Engine,
        labels: &[OrderLabel],
        items: &[CollectedItem],
        collection: NodeId,
        scope: &Scope,
    ) -> Result<()> {
        for &l in labels {
            let mut order = l.order(items);
            if matches!(l, OrderLabel::Seed(_)) {
                order.retain(|id| scope.runs(id));
            }
            let req = RunRequest::new(format!("seed-run({l})"), "seed-run", Role::Head, order)
                .inputs(&[collection])
                .record(l.record());
            self.nodes.insert(l, engine.add_run(&req)?);
            self.labels.push(l);
        }
        Ok(())
    }

    /// Waits for the run of one order.
    pub fn wait(&self, engine: &Engine, label: OrderLabel) -> Result<RunResult> {
        let id = self.nodes[&label];
        engine
            .wait_run(id)?
            .map_err(|e| Error::Infra(format!("seed run {label} failed: {e}")))
    }

    /// Waits for every run, keeping nothing of them (a shard's share: the runs are in the
    /// cache for the audit that reads them).
    pub fn settle(&self, engine: &Engine) -> Result<()> {
        for &l in &self.labels {
            self.wait(engine, l)?;
            engine.live.release(self.nodes[&l]);
        }
        Ok(())
    }

    /// Waits for every run and reads them through one `matrix` node, computed from the runs:
    /// each kept compact (see [`crate::engine::compact`]). A warm audit finds the node in the
    /// cache and decodes no run but the file-order one, which the caller waited for already and
    /// hands over. The runs' bytes are released from the graph.
    pub fn finish(self, engine: &Engine, file: RunResult) -> Result<Matrix> {
        let inputs: Vec<NodeId> = self.labels.iter().map(|l| self.nodes[l]).collect();
        for (l, &id) in self.labels.iter().zip(&inputs) {
            if let Err(e) = engine.live.wait(id).into_result() {
                return Err(Error::Infra(format!("seed run {l} failed: {e}")));
            }
        }
        let node = Node::new("matrix", "matrix", |runs: &[&[u8]]| {
            let mut ids = TestIds::default();
            let mut compact = Vec::with_capacity(runs.len());
            for bytes in runs {
                let run = crate::engine::runs::decode_run(bytes).map_err(|e| {
                    NodeError::Infra(format!("bug: a seed run does not decode: {e}"))
                })?;
                compact.push(CompactRun::of(&run, &mut ids));
            }
            postcard::to_allocvec(&(ids.names(), compact))
                .map(Output::new)
                .map_err(|e| NodeError::Infra(format!("bug: the matrix does not encode: {e}")))
        })
        .param("encoding", "postcard-2");
        let id = engine
            .live
            .add(node, &inputs)
            .map_err(|e| Error::Infra(format!("bug: {e}")))?;
        let bytes = engine
            .live
            .wait(id)
            .into_result()
            .map_err(|e| Error::Infra(format!("the matrix failed: {e}")))?;
        if engine
            .runner
            .interrupted
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(Error::Interrupted);
        }
        let (names, compact): (Vec<String>, Vec<CompactRun>) = postcard::from_bytes(&bytes)
            .map_err(|e| Error::Infra(format!("bug: a cached matrix does not decode: {e}")))?;
        engine.live.release(id);
        let mut runs = BTreeMap::new();
        for ((l, node), run) in self.labels.iter().zip(&inputs).zip(compact) {
            // The file-order run's processes were counted when the caller waited for it.
            let executed = engine
                .live
                .report(*node)
                .is_some_and(|r| matches!(r.status, fixgate_graph::Status::Executed { .. }));
            if executed && *l != OrderLabel::File {
                engine
                    .processes
                    .fetch_add(run.processes, std::sync::atomic::Ordering::Relaxed);
            }
            engine.live.release(*node);
            runs.insert(*l, run);
        }
        Ok(Matrix {
            labels: self.labels,
            ids: TestIds::from_names(names),
            runs,
            file,
            nodes: self.nodes,
        })
    }
}

impl Matrix {
    /// The outcomes of one test, in label order.
    pub fn outcomes(&self, nodeid: &str) -> Vec<(OrderLabel, Outcome)> {
        let Some(i) = self.ids.get(nodeid) else {
            return Vec::new();
        };
        self.labels
            .iter()
            .filter_map(|l| self.runs[l].outcome(i).map(|o| (*l, o)))
            .collect()
    }

    /// The outcome of one test in the run of `label`.
    pub fn outcome(&self, label: OrderLabel, nodeid: &str) -> Option<Outcome> {
        self.runs.get(&label)?.outcome(self.ids.get(nodeid)?)
    }

    /// The order the run of `label` was asked to run.
    pub fn order(&self, label: OrderLabel) -> Vec<String> {
        self.runs
            .get(&label)
            .map(|r| r.order(&self.ids))
            .unwrap_or_default()
    }

    /// Where the test stands in the order of `label`.
    pub fn position(&self, label: OrderLabel, nodeid: &str) -> Option<usize> {
        self.runs.get(&label)?.position(self.ids.get(nodeid)?)
    }

    /// The test's message in the first order (in label order) where it was not green.
    pub fn red_message(&self, nodeid: &str) -> Option<&str> {
        let i = self.ids.get(nodeid)?;
        self.labels.iter().find_map(|l| self.runs[l].message(i))
    }

    /// The fixture groups the test changed without their lease, in any order.
    pub fn violations(&self, nodeid: &str) -> BTreeSet<String> {
        let Some(i) = self.ids.get(nodeid) else {
            return BTreeSet::new();
        };
        self.runs
            .values()
            .flat_map(|r| r.violations(i).iter().cloned())
            .collect()
    }

    /// The shared state the test left changed in the runs that recorded it (file order and
    /// reversed), each change once.
    pub fn state(&self, nodeid: &str) -> BTreeSet<StateChange> {
        let Some(i) = self.ids.get(nodeid) else {
            return BTreeSet::new();
        };
        self.runs
            .values()
            .flat_map(|r| r.state(i).iter().cloned())
            .collect()
    }

    /// Whether the test left shared state changed or wrote a file of the tree in the runs that
    /// recorded it: it may change what a later test sees.
    pub fn writes(&self, nodeid: &str) -> bool {
        !self.state(nodeid).is_empty()
            || self.file.test(nodeid).is_some_and(|t| {
                let tr = &t.trace;
                !(tr.write.is_empty()
                    && tr.remove.is_empty()
                    && tr.mkdir.is_empty()
                    && tr.rename.is_empty()
                    && t.changed.is_empty())
            })
    }

    /// The most reruns the suite itself gave the test in one order.
    pub fn reruns(&self, nodeid: &str) -> u32 {
        self.ids.get(nodeid).map_or(0, |i| {
            self.runs.values().map(|r| r.reruns(i)).max().unwrap_or(0)
        })
    }

    /// The orders as [`crate::engine::search::order_check`] reads them: label, the order up to
    /// and with the test, its outcome there.
    pub fn seed_orders(&self, nodeid: &str) -> Vec<(String, Vec<String>, Outcome)> {
        let Some(i) = self.ids.get(nodeid) else {
            return Vec::new();
        };
        self.runs
            .iter()
            .filter_map(|(label, run)| {
                let pos = run.position(i)?;
                let outcome = run.outcome(i)?;
                let mut order = run.order(&self.ids);
                order.truncate(pos + 1);
                Some((label.to_string(), order, outcome))
            })
            .collect()
    }

    /// Every run's warnings, each once, sorted.
    pub fn warnings(&self) -> Vec<String> {
        let all: BTreeSet<String> = self
            .runs
            .values()
            .flat_map(|r| r.warnings.iter().cloned())
            .collect();
        all.into_iter().collect()
    }

    /// What the runs wrote outside their sandboxes.
    pub fn outside_writes(&self) -> impl Iterator<Item = &OutsideWrite> {
        self.runs.values().flat_map(|r| r.outside.iter())
    }

    /// Tests green in some order and red in another.
    pub fn disagreeing(&self, nodeids: &[String]) -> Vec<String> {
        nodeids
            .iter()
            .filter(|id| {
                let o = self.outcomes(id);
                o.iter().any(|(_, o)| o.is_green()) && o.iter().any(|(_, o)| !o.is_green())
            })
            .cloned()
            .collect()
    }

    /// Tests red in every order.
    pub fn always_red(&self, nodeids: &[String]) -> Vec<String> {
        nodeids
            .iter()
            .filter(|id| {
                let o = self.outcomes(id);
                !o.is_empty() && o.iter().all(|(_, o)| !o.is_green())
            })
            .cloned()
            .collect()
    }

    /// The first order in which the test was green (or red).
    pub fn first(&self, nodeid: &str, green: bool) -> Option<OrderLabel> {
        self.outcomes(nodeid)
            .into_iter()
            .find(|(_, o)| o.is_green() == green)
            .map(|(l, _)| l)
    }

    /// The file-order run, whole.
    pub fn file_run(&self) -> &RunResult {
        &self.file
    }

    /// Every seed-run node.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.values().copied().collect()
    }
}

/// Reruns of matrix orders (fresh processes, separate cache entries) and runs of single tests.
pub struct Confirmation {
    /// Each rerun order's runs, in the order they were made: the outcomes of the disagreeing
    /// tests they ran (nothing else is asked of them).
    pub reruns: BTreeMap<OrderLabel, Vec<BTreeMap<String, Outcome>>>,
    pub alone: BTreeMap<String, Outcome>,
    /// The nodes of every confirmation run.
    pub nodes: Vec<NodeId>,
    /// The nodes of each order's reruns.
    pub rerun_nodes: BTreeMap<OrderLabel, Vec<NodeId>>,
    /// The node that ran each test alone (in a batch of red tests, or by itself).
    pub alone_nodes: BTreeMap<String, NodeId>,
}

impl Confirmation {
    /// A test's outcomes in the reruns of `label` that ran it.
    pub fn outcomes(&self, label: OrderLabel, nodeid: &str) -> Vec<Outcome> {
        self.reruns
            .get(&label)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get(nodeid).copied())
            .collect()
    }
}

/// Above this many tests red in every order, they first run together in one process and only
/// those that pass there run alone: a change that breaks the whole suite must not start a
/// process per test. A test red in that run too is taken as red alone.
pub const MANY_RED: usize = 8;

/// Reruns the failing and the passing order of every disagreeing test, round after round, up to
/// [`PROOF_RERUNS`] times, each only up to the last test still in question (what runs after a
/// test cannot change its outcome); a test leaves the rounds as soon as a rerun disagrees with
/// the order (it is flaky, whatever more reruns would say). Runs red-everywhere tests alone.
pub fn confirm(
    engine: &Engine,
    matrix: &Matrix,
    disagreeing: &[String],
    always_red: &[String],
) -> Result<Confirmation> {
    let mut out = Confirmation {
        reruns: BTreeMap::new(),
        alone: BTreeMap::new(),
        nodes: Vec::new(),
        rerun_nodes: BTreeMap::new(),
        alone_nodes: BTreeMap::new(),
    };
    let whole_matrix = matrix.node_ids();
    let mut alone: Vec<String> = disagreeing.to_vec();
    if always_red.len() > MANY_RED {
        let req = RunRequest::new(
            "red-together-run".into(),
            "red-together-run",
            Role::Head,
            always_red.to_vec(),
        )
        .after(&whole_matrix);
        let (node, r) = engine.run_one(&req)?;
        out.nodes.push(node);
        for id in always_red {
            match r.outcome_of(id) {
                Some(o) if !o.is_green() => {
                    out.alone.insert(id.clone(), o);
                    out.alone_nodes.insert(id.clone(), node);
                }
                _ => alone.push(id.clone()),
            }
        }
    } else {
        alone.extend(always_red.iter().cloned());
    }
    // The singles run beside the first round.
    let mut singles = Vec::new();
    for id in &alone {
        let req = RunRequest::new(
            format!("alone-run({id})"),
            "alone-run",
            Role::Head,
            vec![id.clone()],
        )
        .after(&whole_matrix);
        singles.push((id, engine.add_run(&req)?));
    }
    // Each disagreeing test with its failing and passing order.
    let mut live: Vec<(&String, OrderLabel, OrderLabel)> = disagreeing
        .iter()
        .filter_map(|id| Some((id, matrix.first(id, false)?, matrix.first(id, true)?)))
        .collect();
    for k in 0..PROOF_RERUNS as u32 {
        let mut needed: BTreeMap<OrderLabel, usize> = BTreeMap::new();
        for (id, f, p) in &live {
            for label in [*f, *p] {
                if let Some(pos) = matrix.position(label, id) {
                    let end = needed.entry(label).or_insert(0);
                    *end = (*end).max(pos + 1);
                }
            }
        }
        let mut round = Vec::new();
        for (l, end) in &needed {
            // The order the run made (a shuffled order may have run only a scope of the
            // selection).
            let mut order = matrix.order(*l);
            order.truncate(*end);
            let after = match out.rerun_nodes.get(l).and_then(|n| n.last()) {
                Some(previous) => vec![*previous],
                None => vec![matrix.nodes[l]],
            };
            let label = match k {
                0 => format!("confirm-run({l})"),
                k => format!("confirm-run({l})#{k}"),
            };
            let req = RunRequest::new(label, "confirm-run", Role::Head, order)
                .after(&after)
                .repeat(k);
            round.push((*l, engine.add_run(&req)?));
        }
        for (l, node) in round {
            let r = engine
                .wait_run(node)?
                .map_err(|e| Error::Infra(format!("confirm-run({l}) failed: {e}")))?;
            engine.live.release(node);
            let questioned = disagreeing
                .iter()
                .filter_map(|id| Some((id.clone(), r.outcome_of(id)?)))
                .collect();
            out.reruns.entry(l).or_default().push(questioned);
            out.rerun_nodes.entry(l).or_default().push(node);
            out.nodes.push(node);
        }
        // A passing order that failed once ends nothing while the failing order keeps failing:
        // a flaky test can follow the order too (see `Confirm::fails_every_time_on_one_side`).
        live.retain(|(id, f, _)| out.outcomes(*f, id).iter().all(|o| !o.is_green()));
        if live.is_empty() {
            break;
        }
    }
    for (id, node) in singles {
        let r = engine
            .wait_run(node)?
            .map_err(|e| Error::Infra(format!("alone-run({id}) failed: {e}")))?;
        if let Some(o) = r.outcome_of(id) {
            out.alone.insert(id.clone(), o);
            out.alone_nodes.insert(id.clone(), node);
        }
        out.nodes.push(node);
    }
    Ok(out)
}

/// A test's two runs in a run that listed it twice in a row; `None` when it did not run.
pub fn twice_of(run: &RunResult, nodeid: &str) -> Option<Twice> {
    Some(Twice {
        first: run.outcome_of(nodeid)?,
        second: run.again(nodeid).map(|t| t.outcome),
    })
}

/// The runs of tests twice in a row by themselves.
pub struct TwiceRuns {
    /// Each test's runs, in the order they were made.
    pub runs: BTreeMap<String, Vec<Twice>>,
    /// The node of every run.
    pub nodes: Vec<NodeId>,
}

/// Runs each of `ids` twice in a row by itself (a process of its own per run), round after
/// round, up to [`PROOF_RERUNS`] times, until `settled` says its runs so far decide it. The
/// `kind` names the nodes (`nio-run` on the head, `base-check` on the base).
pub fn run_twice(
    engine: &Engine,
    role: Role,
    kind: &'static str,
    ids: &[String],
    settled: fn(&[Twice]) -> bool,
    after: &[NodeId],
) -> Result<TwiceRuns> {
    let mut runs: BTreeMap<String, Vec<Twice>> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut pending: Vec<&String> = ids.iter().collect();
    for k in 0..PROOF_RERUNS as u32 {
        if pending.is_empty() {
            break;
        }
        let mut round = Vec::new();
        for id in &pending {
            let label = match (role, k) {
                (Role::Head, 0) => format!("{kind}({id})"),
                (Role::Head, k) => format!("{kind}({id})#{k}"),
                (Role::Base, 0) => format!("{kind}(non-idempotent {id})"),
                (Role::Base, k) => format!("{kind}(non-idempotent {id})#{k}"),
            };
            let req = RunRequest::new(label, kind, role, vec![(*id).clone(), (*id).clone()])
                .after(after)
                .repeat(k);
            round.push((*id, engine.add_run(&req)?));
        }
        for (id, node) in round {
            let r = engine
                .wait_run(node)?
                .map_err(|e| Error::Infra(format!("{} failed: {e}", engine.live.label(node))))?;
            nodes.push(node);
            let entry = runs.entry(id.clone()).or_default();
            // A run that could not run the test at all shows nothing, and counts as a run
            // that did not break it.
            entry.push(twice_of(&r, id).unwrap_or(Twice {
                first: Outcome::Error,
                second: None,
            }));
        }
        pending.retain(|id| !settled(&runs[*id]));
    }
    Ok(TwiceRuns { runs, nodes })
}
