//! The seed matrix and what is read off it: outcomes per order, confirmation of disagreeing
//! tests, and runs of single tests alone.

use std::collections::BTreeMap;
use std::fmt;

use fixgate_graph::NodeId;

use crate::audit::triage::PROOF_RERUNS;
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::{Error, Result};
use crate::pytest::driver::RunResult;
use crate::pytest::events::{CollectedItem, Outcome};
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
}

impl OrderLabel {
    /// The order this label gives over the collected items.
    pub fn order(self, items: &[CollectedItem]) -> Vec<String> {
        match self {
            OrderLabel::File => order::seeded(items, 0),
            OrderLabel::Reversed => order::reversed(items),
            OrderLabel::Seed(s) => order::seeded(items, s),
        }
    }
}

/// As the report and node labels spell it: `0`, `rev`, or the seed.
impl fmt::Display for OrderLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderLabel::File => f.write_str("0"),
            OrderLabel::Reversed => f.write_str("rev"),
            OrderLabel::Seed(s) => write!(f, "{s}"),
        }
    }
}

/// The matrix's orders: file order, reversed, then the seeds.
pub fn labels(seeds: &[u64]) -> Vec<OrderLabel> {
    let mut out = vec![OrderLabel::File, OrderLabel::Reversed];
    out.extend(seeds.iter().map(|&s| OrderLabel::Seed(s)));
    out
}

/// The seed runs of the matrix, one per order label, with their nodes.
pub struct Matrix {
    pub labels: Vec<OrderLabel>,
    pub runs: BTreeMap<OrderLabel, RunResult>,
    pub nodes: BTreeMap<OrderLabel, NodeId>,
}

/// The matrix's runs added to the graph and not yet waited for.
pub struct Started {
    labels: Vec<OrderLabel>,
    pub nodes: BTreeMap<OrderLabel, NodeId>,
}

/// Adds one seed run per label, each computed from the collection it orders.
pub fn start(
    engine: &Engine,
    labels: &[OrderLabel],
    items: &[CollectedItem],
    collection: NodeId,
) -> Result<Started> {
    let mut nodes = BTreeMap::new();
    for &l in labels {
        let req = RunRequest::new(
            format!("seed-run({l})"),
            "seed-run",
            Role::Head,
            l.order(items),
        )
        .inputs(&[collection]);
        nodes.insert(l, engine.add_run(&req)?);
    }
    Ok(Started {
        labels: labels.to_vec(),
        nodes,
    })
}

impl Started {
    /// Waits for the run of one order.
    pub fn wait(&self, engine: &Engine, label: OrderLabel) -> Result<RunResult> {
        let id = self.nodes[&label];
        engine
            .wait_run(id)?
            .map_err(|e| Error::Infra(format!("seed run {label} failed: {e}")))
    }

    /// Waits for every run.
    pub fn finish(self, engine: &Engine) -> Result<Matrix> {
        let mut runs = BTreeMap::new();
        for &l in &self.labels {
            runs.insert(l, self.wait(engine, l)?);
        }
        Ok(Matrix {
            labels: self.labels,
            runs,
            nodes: self.nodes,
        })
    }
}

impl Matrix {
    /// The outcomes of one test, in label order.
    pub fn outcomes(&self, nodeid: &str) -> Vec<(OrderLabel, Outcome)> {
        self.labels
            .iter()
            .filter_map(|l| self.runs[l].outcome_of(nodeid).map(|o| (*l, o)))
            .collect()
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

    /// The file-order run.
    pub fn file_run(&self) -> &RunResult {
        &self.runs[&OrderLabel::File]
    }

    /// Every seed-run node.
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.values().copied().collect()
    }
}

/// Reruns of matrix orders (fresh processes, separate cache entries) and runs of single tests.
pub struct Confirmation {
    /// Each rerun order's runs, in the order they were made.
    pub reruns: BTreeMap<OrderLabel, Vec<RunResult>>,
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
            .filter_map(|r| r.outcome_of(nodeid))
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
    items: &[CollectedItem],
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
                if let Some(pos) = matrix.runs[&label].order.iter().position(|o| o == *id) {
                    let end = needed.entry(label).or_insert(0);
                    *end = (*end).max(pos + 1);
                }
            }
        }
        let mut round = Vec::new();
        for (l, end) in &needed {
            let mut order = l.order(items);
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
            out.reruns.entry(l).or_default().push(r);
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
