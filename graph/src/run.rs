//! The scheduler: runs every node whose inputs are ready on a bounded rayon pool, through the
//! cache, with early cutoff, and records what happened.

use std::any::Any;
use std::collections::{BTreeSet, VecDeque};
use std::panic::{self, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fixgate_cache::{ActionRecord, Dep, Digest, Store, TraceEntry, Warning};
use petgraph::graph::NodeIndex;
use petgraph::Direction;

use crate::derivation::trace_output_key;
use crate::explain::{explain, LastSeen};
use crate::node::Caching;
use crate::{
    Check, Derivation, Graph, NodeError, NodeId, NodeReport, Output, Reason, Report, Status,
};

/// Whether cached results are used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Mode {
    /// Use every valid cached result.
    #[default]
    Normal,
    /// Re-execute every node (and store the new results).
    Forced,
    /// Re-execute the cached nodes of these kinds and compare with the cached output
    /// (`nix build --check`); dependents still get the cached output.
    Check {
        /// Node kinds to check, e.g. `seed-run`.
        kinds: BTreeSet<String>,
    },
}

/// How to run a graph.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// How many nodes may run at once (at least 1; the binary resolves its default).
    pub jobs: usize,
    /// Whether cached results are used.
    pub mode: Mode,
    /// Names whose graph this is (e.g. the repository), so that the last-seen derivations
    /// that explain misses are not mixed up between repositories sharing a cache. Not part of
    /// any cache key.
    pub scope: String,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            jobs: 1,
            mode: Mode::Normal,
            scope: String::new(),
        }
    }
}

/// A graph that could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The worker threads could not be started.
    #[error("cannot start {jobs} worker threads: {source}")]
    Pool {
        /// The number asked for.
        jobs: usize,
        /// rayon's error.
        #[source]
        source: rayon::ThreadPoolBuildError,
    },
}

/// The result of a run: the report and every output that was produced.
#[derive(Debug)]
pub struct Run {
    /// What happened to each node.
    pub report: Report,
    outputs: Vec<Option<Arc<[u8]>>>,
}

impl Run {
    /// The output of node `id`; `None` if it failed or was skipped.
    pub fn output(&self, id: NodeId) -> Option<&[u8]> {
        self.outputs.get(id.0.index())?.as_deref()
    }
}

/// A node's output and its digest, as dependents receive it.
type Produced = (Digest, Arc<[u8]>);

/// What finishing a node produced.
struct Done {
    report: NodeReport,
    output: Option<Produced>,
}

/// A result found in the cache.
struct Hit {
    key: Digest,
    record: ActionRecord,
    bytes: Vec<u8>,
    deps: Vec<Dep>,
}

impl Graph {
    /// Runs every node, through `store`.
    pub fn run(&self, store: &dyn Store, options: &RunOptions) -> Result<Run, RunError> {
        let jobs = options.jobs.max(1);
        // num_threads(0) would let rayon pick from the environment; the caller decides.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs)
            .thread_name(|i| format!("fixgate-graph-{i}"))
            .build()
            .map_err(|source| RunError::Pool { jobs, source })?;
        let exec = Exec {
            graph: self,
            store,
            options,
            start: Instant::now(),
            warnings: Mutex::new(Vec::new()),
        };
        let n = self.dag.node_count();
        let mut done: Vec<Option<Done>> = (0..n).map(|_| None).collect();
        let mut waiting: Vec<usize> = self.inputs.iter().map(Vec::len).collect();
        let mut ready: VecDeque<NodeIndex> = (0..n)
            .filter(|&i| waiting[i] == 0)
            .map(NodeIndex::new)
            .collect();
        let (tx, rx) = mpsc::channel::<(NodeIndex, Done)>();

        // The caller's thread dispatches and collects; the pool's threads do the work.
        pool.in_place_scope(|scope| {
            let mut running = 0usize;
            loop {
                while let Some(i) = ready.pop_front() {
                    let inputs: Vec<(NodeIndex, Option<&Produced>)> = self.inputs[i.index()]
                        .iter()
                        .map(|j| (*j, done[j.index()].as_ref().and_then(|d| d.output.as_ref())))
                        .collect();
                    if let Some(failed) = inputs.iter().find(|(_, out)| out.is_none()) {
                        let because =
                            match &done[failed.0.index()].as_ref().map(|d| &d.report.status) {
                                Some(Status::Skipped { because }) => because.clone(),
                                _ => self.dag[failed.0].label.clone(),
                            };
                        let finished = exec.skipped(i, because);
                        finish(self, &mut done, &mut waiting, &mut ready, i, finished);
                        continue;
                    }
                    let inputs: Vec<Produced> = inputs
                        .into_iter()
                        .filter_map(|(_, out)| out.cloned())
                        .collect();
                    let (tx, exec) = (tx.clone(), &exec);
                    running += 1;
                    scope.spawn(move |_| {
                        // Node code's panics are caught inside; this catches a bug of our own
                        // (or of a store), so that the node still reports back and the
                        // dispatcher is never left waiting for it.
                        let finished =
                            panic::catch_unwind(AssertUnwindSafe(|| exec.node(i, &inputs)))
                                .unwrap_or_else(|payload| exec.crashed(i, &*payload));
                        // A send fails only if the receiver is gone, i.e. the run already
                        // unwound; nothing is left to tell.
                        let _ = tx.send((i, finished));
                    });
                }
                if running == 0 {
                    break;
                }
                // Every spawned job sends exactly once (panics are caught), and
                // this thread holds a sender, so the channel cannot close while jobs run.
                let (i, finished) = rx.recv().expect("a running node reports back");
                running -= 1;
                finish(self, &mut done, &mut waiting, &mut ready, i, finished);
            }
        });

        let mut warnings = exec
            .warnings
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        warnings.extend(store.take_warnings());
        let mut nodes = Vec::with_capacity(n);
        let mut outputs = Vec::with_capacity(n);
        for d in done {
            // Every node is dispatched once its inputs are done, and insertion order is
            // topological, so every node is done when the loop ends.
            let d = d.expect("every node finishes");
            outputs.push(d.output.map(|(_, bytes)| bytes));
            nodes.push(d.report);
        }
        Ok(Run {
            report: Report {
                nodes,
                warnings,
                elapsed: exec.start.elapsed(),
            },
            outputs,
        })
    }
}

/// Records a finished node and queues the dependents it was the last missing input of.
fn finish(
    graph: &Graph,
    done: &mut [Option<Done>],
    waiting: &mut [usize],
    ready: &mut VecDeque<NodeIndex>,
    i: NodeIndex,
    finished: Done,
) {
    done[i.index()] = Some(finished);
    // petgraph lists edges newest first; sorting keeps dispatch in insertion order.
    let mut dependents: Vec<NodeIndex> = graph
        .dag
        .neighbors_directed(i, Direction::Outgoing)
        .collect();
    dependents.sort();
    dependents.dedup();
    for d in dependents {
        // A node that takes the same input twice has one edge per use.
        let uses = graph.inputs[d.index()].iter().filter(|j| **j == i).count();
        waiting[d.index()] -= uses;
        if waiting[d.index()] == 0 {
            ready.push_back(d);
        }
    }
}

/// What every node's work shares.
struct Exec<'a> {
    graph: &'a Graph,
    store: &'a dyn Store,
    options: &'a RunOptions,
    start: Instant,
    warnings: Mutex<Vec<Warning>>,
}

impl Exec<'_> {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn report(&self, i: NodeIndex, status: Status) -> NodeReport {
        let node = &self.graph.dag[i];
        NodeReport {
            label: node.label.clone(),
            kind: node.kind.to_string(),
            inputs: self.graph.input_labels(i),
            key: None,
            output: None,
            status,
            started: None,
            finished: None,
        }
    }

    fn skipped(&self, i: NodeIndex, because: String) -> Done {
        Done {
            report: self.report(i, Status::Skipped { because }),
            output: None,
        }
    }

    fn crashed(&self, i: NodeIndex, payload: &(dyn Any + Send)) -> Done {
        let message = format!("fixgate bug: panicked: {}", panic_message(payload));
        Done {
            report: self.report(
                i,
                Status::Failed {
                    error: NodeError::Infra(message),
                    cached: false,
                },
            ),
            output: None,
        }
    }

    fn warn(&self, mut more: Vec<Warning>) {
        if !more.is_empty() {
            self.warnings
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .append(&mut more);
        }
    }

    /// Finds, or computes, node `i` from its inputs' outputs.
    fn node(&self, i: NodeIndex, inputs: &[Produced]) -> Done {
        let started = self.now();
        let mut done = self.node_inner(i, inputs);
        done.report.started = Some(started);
        done.report.finished = Some(self.now());
        done
    }

    fn node_inner(&self, i: NodeIndex, inputs: &[Produced]) -> Done {
        let node = &self.graph.dag[i];
        let derivation = Derivation {
            kind: node.kind.to_string(),
            version: self.graph.version.clone(),
            params: node.params.clone(),
            files: node.files.clone(),
            inputs: inputs.iter().map(|(d, _)| *d).collect(),
        };
        let input_labels = self.graph.input_labels(i);
        let scope = self.options.scope.as_str();
        // A traced node checks its static files against the derivation, everything else
        // against the probe.
        let current = |path: &str| match &node.caching {
            _ if derivation.files.contains_key(path) => derivation.files.get(path).copied(),
            Caching::Traced(probe) => probe(path),
            _ => None,
        };
        let mut warnings = Vec::new();
        let last = match node.caching {
            Caching::Transient => None,
            _ => LastSeen::load(self.store, scope, &node.label, &mut warnings),
        };
        self.warn(warnings);

        let checking = match &self.options.mode {
            Mode::Check { kinds } => kinds.contains(node.kind),
            _ => false,
        };
        let hit = match (&self.options.mode, &node.caching) {
            (Mode::Forced, _) | (_, Caching::Transient) => None,
            (_, Caching::Static) => self.static_hit(&derivation),
            (_, Caching::Traced(_)) => self.trace_hit(&derivation, &current),
        };

        let mut report = self.report(i, Status::Cached);
        if let Some(hit) = hit {
            LastSeen::new(&derivation, &input_labels, &hit.deps).save(
                self.store,
                scope,
                &node.label,
                last.as_ref(),
            );
            report.key = Some(hit.key);
            if checking {
                report.status = Status::Checked {
                    check: self.check(i, inputs, &hit),
                };
            }
            if hit.record.failed {
                if !checking {
                    report.status = Status::Failed {
                        error: NodeError::Data(String::from_utf8_lossy(&hit.bytes).into_owned()),
                        cached: true,
                    };
                }
                return Done {
                    report,
                    output: None,
                };
            }
            report.output = Some(hit.record.output);
            return Done {
                report,
                output: Some((hit.record.output, Arc::from(hit.bytes))),
            };
        }

        let reason = match (&self.options.mode, &node.caching) {
            (Mode::Forced, _) => Reason::Forced,
            (_, Caching::Transient) => Reason::Transient,
            (_, Caching::Static) => explain(last.as_ref(), &derivation, &input_labels, None),
            (_, Caching::Traced(_)) => {
                explain(last.as_ref(), &derivation, &input_labels, Some(&current))
            }
        };
        match self.compute(i, inputs) {
            Ok(output) => self.store_output(i, &derivation, &input_labels, last, output, reason),
            Err(error) => {
                // Only a static node's data failure is cached: a traced node's failure carries
                // no dependency set to check it against next time.
                if let (NodeError::Data(message), Caching::Static) = (&error, &node.caching) {
                    let key = derivation.key();
                    let output = self.store.put_blob(message.as_bytes());
                    self.store.put_action(
                        &key,
                        &ActionRecord {
                            output,
                            failed: true,
                        },
                    );
                    LastSeen::new(&derivation, &input_labels, &[]).save(
                        self.store,
                        scope,
                        &node.label,
                        last.as_ref(),
                    );
                    report.key = Some(key);
                }
                report.status = Status::Failed {
                    error,
                    cached: false,
                };
                Done {
                    report,
                    output: None,
                }
            }
        }
    }

    fn static_hit(&self, derivation: &Derivation) -> Option<Hit> {
        let key = derivation.key();
        let record = self.store.get_action(&key)?;
        let bytes = self.store.get_blob(&record.output)?;
        Some(Hit {
            key,
            record,
            bytes,
            deps: Vec::new(),
        })
    }

    fn trace_hit(
        &self,
        derivation: &Derivation,
        current: &dyn Fn(&str) -> Option<Digest>,
    ) -> Option<Hit> {
        let (entry, record) = self.store.lookup_trace(&derivation.stable_key(), current)?;
        let bytes = self.store.get_blob(&record.output)?;
        Some(Hit {
            key: entry.output,
            record,
            bytes,
            deps: entry.deps,
        })
    }

    /// Runs the node's compute function; a panic in it is an infrastructure failure of this
    /// node, not of the run.
    fn compute(&self, i: NodeIndex, inputs: &[Produced]) -> Result<Output, NodeError> {
        let slices: Vec<&[u8]> = inputs.iter().map(|(_, b)| &b[..]).collect();
        let compute = &self.graph.dag[i].compute;
        match panic::catch_unwind(AssertUnwindSafe(|| compute(&slices))) {
            Ok(result) => result,
            Err(payload) => Err(NodeError::Infra(format!(
                "panicked: {}",
                panic_message(&*payload)
            ))),
        }
    }

    /// Re-executes a cached node and compares.
    fn check(&self, i: NodeIndex, inputs: &[Produced], hit: &Hit) -> Check {
        match (self.compute(i, inputs), hit.record.failed) {
            (Ok(out), false) => {
                let fresh = Digest::of(&out.bytes);
                if fresh == hit.record.output {
                    Check::Same
                } else {
                    Check::Diverged { fresh }
                }
            }
            (Err(NodeError::Data(m)), true) if m.as_bytes() == hit.bytes => Check::Same,
            (Ok(_), true) => Check::Errored {
                message: "succeeded where the cached run failed".to_string(),
            },
            (Err(e), _) => Check::Errored {
                message: e.to_string(),
            },
        }
    }

    /// Stores a fresh output (unless the node is transient) and reports it.
    fn store_output(
        &self,
        i: NodeIndex,
        derivation: &Derivation,
        input_labels: &[String],
        last: Option<LastSeen>,
        output: Output,
        reason: Reason,
    ) -> Done {
        let node = &self.graph.dag[i];
        let scope = self.options.scope.as_str();
        let mut report = self.report(i, Status::Executed { reason });
        let digest = match node.caching {
            Caching::Transient => Digest::of(&output.bytes),
            _ => self.store.put_blob(&output.bytes),
        };
        let record = ActionRecord {
            output: digest,
            failed: false,
        };
        let key = match &node.caching {
            Caching::Transient => derivation.key(),
            Caching::Static => {
                let key = derivation.key();
                self.store.put_action(&key, &record);
                LastSeen::new(derivation, input_labels, &[]).save(
                    self.store,
                    scope,
                    &node.label,
                    last.as_ref(),
                );
                key
            }
            Caching::Traced(_) => {
                // The static files are dependencies too, at the digests the key was made with.
                let mut deps: Vec<Dep> = derivation
                    .files
                    .iter()
                    .map(|(p, d)| Dep::file(p.clone(), *d))
                    .collect();
                deps.extend(output.reads);
                let stable = derivation.stable_key();
                let entry = TraceEntry::new(deps, Digest::of(b""));
                let key = trace_output_key(&stable, &entry.deps);
                // The result first, so that an index entry never points at nothing.
                self.store.put_action(&key, &record);
                LastSeen::new(derivation, input_labels, &entry.deps).save(
                    self.store,
                    scope,
                    &node.label,
                    last.as_ref(),
                );
                self.store.record_trace(
                    &stable,
                    TraceEntry {
                        output: key,
                        ..entry
                    },
                );
                key
            }
        };
        report.key = Some(key);
        report.output = Some(digest);
        Done {
            report,
            output: Some((digest, Arc::from(output.bytes))),
        }
    }
}

/// The text a panic was raised with.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}
