//! The seed matrix and what is read off it: every test's outcome in every order, where it stood,
//! its message, its lease violations and the writes outside the sandbox.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use fixgate_graph::{NodeError, NodeId};

use crate::audit::order::OrderLabel;
use crate::audit::scope::ImpactScope;
use crate::engine::compact::{CompactRun, TestIds};
use crate::engine::decoded::Decoded;
use crate::engine::kind::NodeKind;
use crate::engine::runs::RunRequest;
use crate::engine::step::Role;
use crate::engine::step::{node_bug, Computed, Encoding, Engine, Key, Step};
use crate::error::{Error, Result};
use crate::pytest::driver::Record;
use crate::pytest::events::{CollectedItem, StateChange};
use crate::pytest::outside::OutsideWrite;
use crate::pytest::result::Outcome;
use crate::pytest::result::RunResult;

/// What the run of an order records in a scoped audit: the file-order run the code each test
/// ran and the state it left changed, the reversed run the state (each test after other
/// neighbours), the others nothing (see `crate::audit::scope`). An audit that is not scoped
/// records nothing: the recording costs more than the target allows (docs/performance.md).
pub(crate) fn record(label: OrderLabel, scoped: bool) -> Record {
    match label {
        _ if !scoped => Record::NONE,
        OrderLabel::File => Record::ALL,
        OrderLabel::Reversed => Record {
            state: true,
            ..Record::NONE
        },
        OrderLabel::Seed(_) | OrderLabel::Twice => Record::NONE,
    }
}

/// The seed runs of the matrix, one per order label, with their nodes. Each run is kept
/// compact once read (see [`crate::engine::compact`]), except the file-order run, whose traces
/// and skip reasons later steps read.
pub(crate) struct Matrix {
    pub(crate) labels: Vec<OrderLabel>,
    ids: TestIds,
    runs: BTreeMap<OrderLabel, CompactRun>,
    file: Arc<RunResult>,
    pub(crate) nodes: BTreeMap<OrderLabel, NodeId>,
    /// The tests the shuffled orders ran (a scoped audit's, or every test).
    scope: ImpactScope,
}

/// The matrix's runs added to the graph and not yet waited for.
pub(crate) struct Started {
    labels: Vec<OrderLabel>,
    pub(crate) nodes: BTreeMap<OrderLabel, NodeId>,
    /// The orders whose runs the caller waited for, their processes counted then.
    waited: std::sync::Mutex<BTreeSet<OrderLabel>>,
    /// Whether the runs record what a scoped audit needs (see [`record`]).
    scoped: bool,
    /// Whether its whole orders run part of the selection (see [`start_within`]).
    within: bool,
    /// The large runs of its orders, decoded once for the audit.
    pub(crate) decoded: Arc<Decoded>,
}

/// Adds one seed run per label over the whole selection, each computed from the collection it
/// orders (every order of an audit that is not scoped; a scoped audit's file-order and reversed
/// runs; the nio order; a share's orders).
pub(crate) fn start(
    engine: &Engine,
    labels: &[OrderLabel],
    items: &[CollectedItem],
    collection: NodeId,
    scoped: bool,
) -> Result<Started> {
    let mut started = Started {
        labels: Vec::new(),
        nodes: BTreeMap::new(),
        waited: Default::default(),
        scoped,
        within: false,
        decoded: Arc::default(),
    };
    started.add(engine, labels, items, collection, |_| true)?;
    Ok(started)
}

/// Adds the recording runs of `labels` over only the tests of `keep` (a scoped audit's
/// file-order and reversed runs on the head, the rest carried from the base's runs:
/// `crate::engine::carry`).
pub(crate) fn start_within(
    engine: &Engine,
    labels: &[OrderLabel],
    items: &[CollectedItem],
    collection: NodeId,
    keep: &BTreeSet<String>,
) -> Result<Started> {
    let mut started = Started {
        labels: Vec::new(),
        nodes: BTreeMap::new(),
        waited: Default::default(),
        scoped: true,
        within: true,
        decoded: Arc::default(),
    };
    started.add(engine, labels, items, collection, |id| keep.contains(id))?;
    Ok(started)
}

impl Started {
    /// Adds the runs of the shuffled orders once the scope is known: each runs only the tests
    /// of `scope`, in its own sequence.
    pub(crate) fn add_scoped(
        &mut self,
        engine: &Engine,
        labels: &[OrderLabel],
        items: &[CollectedItem],
        collection: NodeId,
        scope: &ImpactScope,
    ) -> Result<()> {
        self.add(engine, labels, items, collection, |id| scope.runs(id))
    }

    fn add(
        &mut self,
        engine: &Engine,
        labels: &[OrderLabel],
        items: &[CollectedItem],
        collection: NodeId,
        runs: impl Fn(&str) -> bool,
    ) -> Result<()> {
        for &l in labels {
            let mut order = l.order(items);
            order.retain(|id| runs(id));
            // A run of a whole order over part of the selection (carried from the base) has a
            // label of its own: the whole run may follow it in the same audit.
            let label = match self.within && matches!(l, OrderLabel::File | OrderLabel::Reversed) {
                true => NodeKind::SeedRun.tagged(l, "within"),
                false => NodeKind::SeedRun.of(l),
            };
            let req = RunRequest::new(label, NodeKind::SeedRun, Role::Head, order)
                .inputs(&[collection])
                .record(record(l, self.scoped));
            self.nodes.insert(l, engine.add_run(&req)?);
            self.labels.push(l);
        }
        Ok(())
    }

    /// Waits for the run of one order (a whole order's is decoded once for the audit, see
    /// [`crate::engine::decoded`]: only it is read again).
    pub(crate) fn wait(&self, engine: &Engine, label: OrderLabel) -> Result<Arc<RunResult>> {
        let whole = matches!(label, OrderLabel::File | OrderLabel::Reversed);
        self.wait_keeping(engine, label, whole)
    }

    fn wait_keeping(
        &self,
        engine: &Engine,
        label: OrderLabel,
        keep: bool,
    ) -> Result<Arc<RunResult>> {
        let id = self.nodes[&label];
        self.waited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(label);
        let waited = match keep {
            true => engine.wait_decoded(id, |bytes| self.decoded.decode_kept(bytes))?,
            false => engine.wait_run(id)?.map(Arc::new),
        };
        waited.map_err(|e| Error::Infra(format!("seed run {label} failed: {e}")))
    }

    /// Waits for every run, keeping nothing of them (a shard's share: the runs are in the
    /// cache for the audit that reads them).
    pub(crate) fn settle(&self, engine: &Engine) -> Result<()> {
        for &l in &self.labels {
            self.wait_keeping(engine, l, false)?;
            engine.live.release(self.nodes[&l]);
        }
        Ok(())
    }

    /// Waits for every run and reads them through one `matrix` node, computed from the runs:
    /// each kept compact (see [`crate::engine::compact`]). A warm audit finds the node in the
    /// cache and decodes no run but the file-order one, which the caller waited for already and
    /// hands over. The runs' bytes are released from the graph.
    pub(crate) fn finish(
        self,
        engine: &Engine,
        file: Arc<RunResult>,
        scope: ImpactScope,
    ) -> Result<Matrix> {
        let inputs: Vec<NodeId> = self.labels.iter().map(|l| self.nodes[l]).collect();
        for (l, &id) in self.labels.iter().zip(&inputs) {
            if let Err(e) = engine.live.wait(id).into_result() {
                return Err(Error::Infra(format!("seed run {l} failed: {e}")));
            }
        }
        let step = MatrixOf {
            decoded: self.decoded.clone(),
        };
        let (matrix, (names, compact)) = engine.run_step(step, &inputs, &[])?;
        let id = matrix.id;
        engine.live.release(id);
        let mut runs = BTreeMap::new();
        let waited = self.waited.into_inner().unwrap_or_else(|e| e.into_inner());
        for ((l, node), run) in self.labels.iter().zip(&inputs).zip(compact) {
            // The processes of the runs the caller waited for (the file-order and reversed
            // runs) were counted then.
            let executed = engine
                .live
                .report(*node)
                .is_some_and(|r| matches!(r.status, fixgate_graph::Status::Executed { .. }));
            if executed && !waited.contains(l) {
                engine.count_processes(run.processes);
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
            scope,
        })
    }
}

/// The matrix read off the seed runs (its inputs): each kept compact, the tests' names once.
/// A warm audit finds it in the cache and decodes no run.
struct MatrixOf {
    decoded: Arc<Decoded>,
}

impl Step for MatrixOf {
    type Output = (Vec<String>, Vec<CompactRun>);
    const ENCODING: Encoding = Encoding::Postcard;

    fn kind(&self) -> NodeKind {
        NodeKind::Matrix
    }

    fn key(&self, key: &mut Key) {
        // The decoded runs are a cache of its inputs.
        let MatrixOf { decoded: _ } = self;
        key.param("encoding", "postcard-2");
    }

    fn compute(&self, runs: &[&[u8]]) -> std::result::Result<Computed<Self::Output>, NodeError> {
        let mut ids = TestIds::default();
        let mut compact = Vec::with_capacity(runs.len());
        for bytes in runs {
            let run = self
                .decoded
                .decode(bytes)
                .map_err(|e| node_bug(format!("a seed run does not decode: {e}")))?;
            compact.push(CompactRun::of(&run, &mut ids));
        }
        let names = ids.names().into_iter().map(str::to_owned).collect();
        Ok(Computed::new((names, compact)))
    }
}

impl Matrix {
    /// The outcomes of one test, in label order.
    pub(crate) fn outcomes(&self, nodeid: &str) -> Vec<(OrderLabel, Outcome)> {
        let Some(i) = self.ids.get(nodeid) else {
            return Vec::new();
        };
        self.labels
            .iter()
            .filter_map(|l| self.runs[l].outcome(i).map(|o| (*l, o)))
            .collect()
    }

    /// The outcome of one test in the run of `label`.
    pub(crate) fn outcome(&self, label: OrderLabel, nodeid: &str) -> Option<Outcome> {
        self.runs.get(&label)?.outcome(self.ids.get(nodeid)?)
    }

    /// The order the run of `label` was asked to run.
    pub(crate) fn order(&self, label: OrderLabel) -> Vec<String> {
        self.runs
            .get(&label)
            .map(|r| r.order(&self.ids))
            .unwrap_or_default()
    }

    /// The tests of the order of `label` up to `end` (not included) that a rerun of it needs:
    /// those of the scope and those of `asked` (a scoped audit's file-order and reversed runs
    /// cover the whole selection, carried tests included, and a test outside the scope writes
    /// nothing that could change another's outcome, as in the shuffled orders), or all of them.
    pub(crate) fn rerun_order(
        &self,
        label: OrderLabel,
        end: usize,
        asked: &HashSet<&str>,
    ) -> Vec<String> {
        let Some(run) = self.runs.get(&label) else {
            return Vec::new();
        };
        run.prefix(end, &self.ids)
            .filter(|id| self.scope.runs(id) || asked.contains(id))
            .map(str::to_owned)
            .collect()
    }

    /// Whether a scoped audit's recording names the test a state writer (never when the orders
    /// run in full: nothing is known then).
    pub(crate) fn writer(&self, nodeid: &str) -> bool {
        matches!(&self.scope, ImpactScope::Scoped { writers, .. } if writers.contains(nodeid))
    }

    /// Whether the test may share a process with others in place of a run by itself
    /// ([`ImpactScope::shares`]).
    pub(crate) fn shares(&self, nodeid: &str) -> bool {
        self.scope.shares(nodeid)
    }

    /// Where the test stands in the order of `label`.
    pub(crate) fn position(&self, label: OrderLabel, nodeid: &str) -> Option<usize> {
        self.runs.get(&label)?.position(self.ids.get(nodeid)?)
    }

    /// The test's message in the first order (in label order) where it was not green.
    pub(crate) fn red_message(&self, nodeid: &str) -> Option<&str> {
        let i = self.ids.get(nodeid)?;
        self.labels.iter().find_map(|l| self.runs[l].message(i))
    }

    /// Each test's message in the first order where it was not green.
    pub(crate) fn red_messages(&self, nodeids: &[String]) -> BTreeMap<String, String> {
        (nodeids.iter())
            .filter_map(|id| Some((id.clone(), self.red_message(id)?.to_owned())))
            .collect()
    }

    /// The fixture groups the test changed without their lease, in any order.
    pub(crate) fn violations(&self, nodeid: &str) -> BTreeSet<String> {
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
    pub(crate) fn state(&self, nodeid: &str) -> BTreeSet<StateChange> {
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
    pub(crate) fn writes(&self, nodeid: &str) -> bool {
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
    pub(crate) fn reruns(&self, nodeid: &str) -> u32 {
        self.ids.get(nodeid).map_or(0, |i| {
            self.runs.values().map(|r| r.reruns(i)).max().unwrap_or(0)
        })
    }

    /// A green outcome of the test in an order that ran it first of its process: as good as a
    /// green run alone (the same collection, nothing before it). First of the requested order
    /// only: in a scoped audit the file-order and reversed runs may run tests outside the
    /// scope before it, whose state the recording need not see.
    pub(crate) fn green_first(&self, nodeid: &str) -> Option<Outcome> {
        let i = self.ids.get(nodeid)?;
        self.runs.values().find_map(|run| {
            let outcome = run.outcome(i).filter(|o| o.is_green())?;
            (run.position(i)? == 0).then_some(outcome)
        })
    }

    /// The orders as [`crate::engine::search::order_check`] reads them: label, the order up to
    /// and with the test (of the scope's tests, as [`Matrix::rerun_order`]), its outcome there.
    pub(crate) fn seed_orders(&self, nodeid: &str) -> Vec<(OrderLabel, Vec<String>, Outcome)> {
        let Some(i) = self.ids.get(nodeid) else {
            return Vec::new();
        };
        self.runs
            .iter()
            .filter_map(|(label, run)| {
                let pos = run.position(i)?;
                let outcome = run.outcome(i)?;
                // Only the tests the order needs become strings: a whole order of a scoped
                // audit holds every test of the suite, and each victim asks for every order.
                let order = run
                    .prefix(pos + 1, &self.ids)
                    .filter(|id| *id == nodeid || self.scope.runs(id))
                    .map(str::to_owned)
                    .collect();
                Some((*label, order, outcome))
            })
            .collect()
    }

    /// Every run's warnings, each once, sorted.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let all: BTreeSet<String> = self
            .runs
            .values()
            .flat_map(|r| r.warnings.iter().cloned())
            .collect();
        all.into_iter().collect()
    }

    /// What the runs wrote outside their sandboxes.
    pub(crate) fn outside_writes(&self) -> impl Iterator<Item = &OutsideWrite> {
        self.runs.values().flat_map(|r| r.outside.iter())
    }

    /// Tests green in some order and red in another.
    pub(crate) fn disagreeing(&self, nodeids: &[String]) -> Vec<String> {
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
    pub(crate) fn always_red(&self, nodeids: &[String]) -> Vec<String> {
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
    pub(crate) fn first(&self, nodeid: &str, green: bool) -> Option<OrderLabel> {
        self.outcomes(nodeid)
            .into_iter()
            .find(|(_, o)| o.is_green() == green)
            .map(|(l, _)| l)
    }

    /// The file-order run, whole.
    pub(crate) fn file_run(&self) -> &RunResult {
        &self.file
    }

    /// Every seed-run node.
    pub(crate) fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.values().copied().collect()
    }
}
