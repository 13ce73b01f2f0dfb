//! The live graph: nodes are added while the graph runs, each started as soon as its inputs
//! exist, on a bounded set of worker threads. This is how one audit is one graph even though
//! most of its nodes are known only from earlier results (a monadic build): confirmation after
//! the matrix, each bisection step after the one before it.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use fixgate_cache::{Digest, Store};
use petgraph::graph::NodeIndex;

use crate::run::{Done, Exec, Job, Produced};
use crate::{
    Graph, GraphError, Node, NodeError, NodeId, Report, Run, RunError, RunOptions, Status,
};

/// A graph that is running. Add nodes with [`Live::add`]; wait for one with [`Live::wait`].
/// Made by [`Live::scope`], which returns once every added node has finished.
pub struct Live<'a> {
    exec: Exec<'a>,
    state: Mutex<State>,
    /// Signalled whenever a node finishes, becomes ready, or the scope ends.
    changed: Condvar,
}

struct State {
    graph: Graph,
    done: Vec<Option<Done>>,
    /// Per node, how many of its edges wait on an unfinished node.
    waiting: Vec<usize>,
    ready: VecDeque<NodeIndex>,
    /// Per node, the digest of an output the caller released (see [`Live::release`]): the
    /// bytes are gone from memory and read back from the store when asked for again.
    released: Vec<Option<Digest>>,
    running: usize,
    closing: bool,
}

/// What waiting for a node gives: its output, or how it ended without one.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Its output.
    Output(Arc<[u8]>),
    /// It failed or was skipped; the status says which.
    Missing(Status),
}

impl Outcome {
    /// The output, if there is one.
    pub fn output(&self) -> Option<&[u8]> {
        match self {
            Outcome::Output(b) => Some(b),
            Outcome::Missing(_) => None,
        }
    }

    /// The output, or the failure as text.
    pub fn into_result(self) -> Result<Arc<[u8]>, String> {
        match self {
            Outcome::Output(b) => Ok(b),
            Outcome::Missing(Status::Failed { error, .. }) => Err(error.to_string()),
            Outcome::Missing(Status::Skipped { because }) => {
                Err(format!("skipped because {because} failed"))
            }
            Outcome::Missing(_) => Err("the node produced no output".into()),
        }
    }
}

impl<'a> Live<'a> {
    /// Runs `build` with a live graph whose nodes `jobs` workers find in `store` or compute, and
    /// returns what `build` returned with the record of every node it added. `build` adds nodes
    /// and may wait for them from any thread it starts; the workers never wait.
    pub fn scope<R>(
        store: &'a dyn Store,
        options: &'a RunOptions,
        version: &'a str,
        build: impl FnOnce(&Live<'a>) -> R,
    ) -> Result<(R, Run, Graph), RunError> {
        let jobs = options.jobs.max(1);
        let live = Live {
            exec: Exec {
                store,
                options,
                version,
                start: Instant::now(),
                warnings: Mutex::new(Vec::new()),
            },
            state: Mutex::new(State {
                graph: Graph::new(version),
                done: Vec::new(),
                waiting: Vec::new(),
                ready: VecDeque::new(),
                released: Vec::new(),
                running: 0,
                closing: false,
            }),
            changed: Condvar::new(),
        };
        let result = std::thread::scope(|s| {
            // Closes the graph however `build` ends (a panic included), so the workers stop
            // and the scope can join them.
            struct Close<'l, 'a>(&'l Live<'a>);
            impl Drop for Close<'_, '_> {
                fn drop(&mut self) {
                    self.0.close();
                }
            }
            let mut started = 0;
            for i in 0..jobs {
                let spawned = std::thread::Builder::new()
                    .name(format!("fixgate-graph-{i}"))
                    .spawn_scoped(s, || live.work());
                match spawned {
                    Ok(_) => started += 1,
                    Err(source) if started == 0 => {
                        return Err(RunError::Pool { jobs, source });
                    }
                    // Fewer workers than asked: slower, still correct.
                    Err(_) => break,
                }
            }
            let close = Close(&live);
            let r = build(&live);
            live.settle();
            drop(close);
            Ok(r)
        })?;
        let (run, graph) = live.finish_run();
        Ok((result, run, graph))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `node`, computed from the outputs of `inputs` (in this order): it starts as soon as
    /// they have finished.
    pub fn add(&self, node: Node, inputs: &[NodeId]) -> Result<NodeId, GraphError> {
        self.add_after(node, inputs, &[])
    }

    /// Adds `node` with its inputs and nodes it starts after without reading their output
    /// (its derivation holds everything it computes from).
    pub fn add_after(
        &self,
        node: Node,
        inputs: &[NodeId],
        after: &[NodeId],
    ) -> Result<NodeId, GraphError> {
        self.insert(Arc::new(node), inputs, after)
    }

    pub(crate) fn insert(
        &self,
        node: Arc<Node>,
        inputs: &[NodeId],
        after: &[NodeId],
    ) -> Result<NodeId, GraphError> {
        let mut st = self.lock();
        let id = st.graph.insert(node, inputs, after)?;
        let pending = inputs
            .iter()
            .chain(after)
            .filter(|i| st.done[i.index()].is_none())
            .count();
        st.done.push(None);
        st.released.push(None);
        st.waiting.push(pending);
        if pending == 0 {
            st.ready.push_back(id.0);
            self.changed.notify_all();
        }
        Ok(id)
    }

    /// The cached output `node` would have with these inputs, without adding or computing it:
    /// for a step whose answer is worked out by the caller (over many nodes) and recorded as a
    /// node, so that the caller asks the cache before working. Only for static nodes whose
    /// inputs have finished; `None` otherwise, on a miss, or for a cached failure.
    pub fn lookup(&self, node: &Node, inputs: &[NodeId]) -> Option<Arc<[u8]>> {
        if !matches!(node.caching, crate::node::Caching::Static)
            || matches!(self.exec.options.mode, crate::Mode::Forced)
        {
            return None;
        }
        let digests = {
            let st = self.lock();
            inputs
                .iter()
                .map(|i| st.digest(i.index()))
                .collect::<Option<Vec<_>>>()?
        };
        let derivation = crate::Derivation {
            kind: node.kind.to_string(),
            version: self.exec.version.to_string(),
            params: node.params.clone(),
            files: node.files.clone(),
            inputs: digests,
        };
        let record = self.exec.store.get_action(&derivation.key())?;
        if record.failed {
            return None;
        }
        self.exec.store.get_blob(&record.output).map(Arc::from)
    }

    /// Waits until node `id` has finished. Call it from the thread that builds the graph (or
    /// one it started), never from a node's compute function.
    pub fn wait(&self, id: NodeId) -> Outcome {
        let mut st = self.lock();
        loop {
            if let Some(Some(d)) = st.done.get(id.index()) {
                return match (&d.output, st.released[id.index()]) {
                    (Some((_, bytes)), _) => Outcome::Output(bytes.clone()),
                    (None, Some(digest)) => {
                        drop(st);
                        self.reread(id.index(), &digest).map_or_else(
                            |error| {
                                Outcome::Missing(Status::Failed {
                                    error,
                                    cached: false,
                                })
                            },
                            Outcome::Output,
                        )
                    }
                    (None, None) => Outcome::Missing(d.report.status.clone()),
                };
            }
            if st.done.len() <= id.index() {
                // Not a node of this graph: nothing will ever finish it.
                return Outcome::Missing(Status::Failed {
                    error: NodeError::Infra(format!(
                        "bug: node {} is not in the graph",
                        id.index()
                    )),
                    cached: false,
                });
            }
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The label of node `id`.
    pub fn label(&self, id: NodeId) -> String {
        self.lock().graph.node(id).label.clone()
    }

    /// The node labelled `label`, if added.
    pub fn find(&self, label: &str) -> Option<NodeId> {
        self.lock().graph.find(label)
    }

    /// The report of node `id`, once it has finished.
    pub fn report(&self, id: NodeId) -> Option<crate::NodeReport> {
        let st = self.lock();
        st.done.get(id.index())?.as_ref().map(|d| d.report.clone())
    }

    /// Check mode: the output node `id` gave when it ran again, if it did.
    pub fn fresh_output(&self, id: NodeId) -> Option<Arc<[u8]>> {
        let st = self.lock();
        st.done.get(id.index())?.as_ref()?.fresh.clone()
    }

    /// Drops the output bytes of node `id`, which the caller has read and keeps what it needs
    /// of: a graph of thousands of runs must not hold every run's report in memory. The node
    /// keeps its digest; a node added later with it as input, or a later [`Live::wait`], reads
    /// the bytes back from the store. A node whose output the store does not keep (transient
    /// nodes, a store that keeps nothing) keeps its bytes.
    pub fn release(&self, id: NodeId) {
        let i = id.index();
        let digest = {
            let st = self.lock();
            if matches!(
                st.graph.dag.node_weight(id.0).map(|n| &n.caching),
                Some(crate::node::Caching::Transient) | None
            ) {
                return;
            }
            match st.digest(i) {
                Some(d) => d,
                None => return,
            }
        };
        // A store that keeps nothing (`--no-cache`), or could not write the blob, cannot give
        // it back: the graph keeps the bytes then. (Asked without the lock: it may stat a file.)
        if !self.exec.store.has_blob(&digest) {
            return;
        }
        let mut st = self.lock();
        if let Some(Some(done)) = st.done.get_mut(i) {
            done.output = None;
            st.released[i] = Some(digest);
        }
    }

    /// The bytes of a released output, from the store.
    fn reread(&self, i: usize, digest: &Digest) -> Result<Arc<[u8]>, NodeError> {
        self.exec
            .store
            .get_blob(digest)
            .map(Arc::from)
            .ok_or_else(|| {
                let label = self.lock().graph.dag[NodeIndex::new(i)].label.clone();
                NodeError::Infra(format!(
                    "the output of {label} ({digest}) was kept only in the cache, and the cache \
                 no longer has it (cleared or damaged while the audit ran): run the audit again"
                ))
            })
    }

    /// Waits until nothing is ready or running.
    fn settle(&self) {
        let mut st = self.lock();
        while st.running > 0 || !st.ready.is_empty() {
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn close(&self) {
        self.lock().closing = true;
        self.changed.notify_all();
    }

    /// A worker: takes ready nodes until the graph closes.
    fn work(&self) {
        let mut st = self.lock();
        loop {
            let Some(i) = st.ready.pop_front() else {
                if st.closing {
                    return;
                }
                st = self
                    .changed
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            let job = Job {
                node: st.graph.dag[i].clone(),
                inputs: st.graph.input_labels(i),
                after: st.graph.after_labels(i),
            };
            let inputs: Vec<(NodeIndex, Held)> = st.graph.inputs[i.index()]
                .iter()
                .map(|j| (*j, st.held(j.index())))
                .collect();
            if let Some((failed, _)) = inputs.iter().find(|(_, held)| matches!(held, Held::None)) {
                let because = match st.done[failed.index()].as_ref().map(|d| &d.report.status) {
                    Some(Status::Skipped { because }) => because.clone(),
                    _ => st.graph.dag[*failed].label.clone(),
                };
                let finished = self.exec.skipped(&job, because);
                self.finish(&mut st, i, finished);
                continue;
            }
            st.running += 1;
            drop(st);
            let inputs: Result<Vec<Produced>, NodeError> = inputs
                .into_iter()
                .map(|(j, held)| match held {
                    Held::Bytes(p) => Ok(p),
                    Held::Stored(d) => self.reread(j.index(), &d).map(|b| (d, b)),
                    Held::None => unreachable!("inputs without output were skipped above"),
                })
                .collect();
            // Node code's panics are caught inside; this catches a bug of our own (or of a
            // store), so that the node still finishes and nobody waits for it forever.
            let finished = match inputs {
                Ok(inputs) => {
                    panic::catch_unwind(AssertUnwindSafe(|| self.exec.node(&job, &inputs)))
                        .unwrap_or_else(|payload| self.exec.crashed(&job, &*payload))
                }
                Err(error) => self.exec.failed(&job, error),
            };
            st = self.lock();
            st.running -= 1;
            self.finish(&mut st, i, finished);
        }
    }

    /// Records a finished node and readies the dependents it was the last missing edge of.
    fn finish(&self, st: &mut State, i: NodeIndex, finished: Done) {
        st.done[i.index()] = Some(finished);
        for d in st.graph.dependents(i) {
            let uses = st.graph.uses(d, i);
            st.waiting[d.index()] -= uses;
            if st.waiting[d.index()] == 0 {
                st.ready.push_back(d);
            }
        }
        self.changed.notify_all();
    }

    fn finish_run(self) -> (Run, Graph) {
        let st = self
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let mut warnings = self
            .exec
            .warnings
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        warnings.extend(self.exec.store.take_warnings());
        let n = st.done.len();
        let mut nodes = Vec::with_capacity(n);
        let mut outputs = Vec::with_capacity(n);
        let mut fresh = Vec::with_capacity(n);
        for d in st.done {
            // Settled: every added node has finished (its inputs existed when it was added,
            // so it became ready once they finished).
            let d = d.expect("every node finishes");
            outputs.push(d.output.map(|(_, bytes)| bytes));
            fresh.push(d.fresh);
            nodes.push(d.report);
        }
        (
            Run {
                report: Report {
                    nodes,
                    warnings,
                    elapsed: self.exec.start.elapsed(),
                },
                outputs,
                fresh,
            },
            st.graph,
        )
    }
}

/// What the graph holds of a finished node's output.
enum Held {
    Bytes(Produced),
    /// Released: in the store under this digest.
    Stored(Digest),
    /// Failed or skipped (or not finished).
    None,
}

impl State {
    fn held(&self, i: usize) -> Held {
        match (
            self.done[i].as_ref().and_then(|d| d.output.clone()),
            self.released[i],
        ) {
            (Some(p), _) => Held::Bytes(p),
            (None, Some(d)) => Held::Stored(d),
            (None, None) => Held::None,
        }
    }

    fn digest(&self, i: usize) -> Option<Digest> {
        match self.held(i) {
            Held::Bytes((d, _)) | Held::Stored(d) => Some(d),
            Held::None => None,
        }
    }
}

impl Graph {
    /// Runs every node, through `store`.
    pub fn run(&self, store: &dyn Store, options: &RunOptions) -> Result<Run, RunError> {
        let (added, run, _) = Live::scope(store, options, &self.version, |live| {
            for i in 0..self.len() {
                let ids = |list: &[NodeIndex]| list.iter().map(|j| NodeId(*j)).collect::<Vec<_>>();
                let node = self.dag[NodeIndex::new(i)].clone();
                live.insert(node, &ids(&self.inputs[i]), &ids(&self.after[i]))?;
            }
            Ok::<(), GraphError>(())
        })?;
        // The nodes come from a graph that accepted them in this order, so they are accepted
        // again.
        added.expect("a built graph's nodes are valid");
        Ok(run)
    }
}
