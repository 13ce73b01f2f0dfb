//! The scheduler: runs every node whose inputs are ready on a bounded rayon pool, through the
//! cache, with early cutoff, and records what happened.

use std::any::Any;
use std::collections::BTreeSet;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fixgate_cache::{ActionRecord, Dep, Digest, Store, TraceEntry, Warning};

use crate::derivation::trace_output_key;
use crate::explain::{explain, LastSeen};
use crate::node::Caching;
use crate::{
    Check, Derivation, Node, NodeError, NodeId, NodeReport, Output, Reason, Report, Status,
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
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// The result of a run: the report and every output that was produced.
#[derive(Debug)]
pub struct Run {
    /// What happened to each node.
    pub report: Report,
    pub(crate) outputs: Vec<Option<Arc<[u8]>>>,
    pub(crate) fresh: Vec<Option<Arc<[u8]>>>,
}

impl Run {
    /// The output of node `id`; `None` if it failed, was skipped, or was released from a live
    /// graph ([`crate::Live::release`]).
    pub fn output(&self, id: NodeId) -> Option<&[u8]> {
        self.outputs.get(id.index())?.as_deref()
    }

    /// In check mode, the output a cached node gave when it ran again (which dependents did
    /// not see: they got the cached one).
    pub fn fresh_output(&self, id: NodeId) -> Option<&[u8]> {
        self.fresh.get(id.index())?.as_deref()
    }
}

/// A node's output and its digest, as dependents receive it.
pub(crate) type Produced = (Digest, Arc<[u8]>);

/// What finishing a node produced.
pub(crate) struct Done {
    pub(crate) report: NodeReport,
    pub(crate) output: Option<Produced>,
    /// Check mode: the output of the re-execution, when it ran.
    pub(crate) fresh: Option<Arc<[u8]>>,
}

/// A node about to be found or computed, with the labels of its edges.
pub(crate) struct Job {
    pub(crate) node: Arc<Node>,
    pub(crate) inputs: Vec<String>,
    pub(crate) after: Vec<String>,
}

/// A result found in the cache.
struct Hit {
    key: Digest,
    record: ActionRecord,
    bytes: Vec<u8>,
    deps: Vec<Dep>,
}

/// What every node's work shares.
pub(crate) struct Exec<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) options: &'a RunOptions,
    pub(crate) version: &'a str,
    pub(crate) start: Instant,
    pub(crate) warnings: Mutex<Vec<Warning>>,
}

impl Exec<'_> {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn report(&self, job: &Job, status: Status) -> NodeReport {
        NodeReport {
            label: job.node.label.clone(),
            kind: job.node.kind.to_string(),
            inputs: job.inputs.clone(),
            after: job.after.clone(),
            remote: false,
            key: None,
            output: None,
            status,
            started: None,
            finished: None,
        }
    }

    pub(crate) fn skipped(&self, job: &Job, because: String) -> Done {
        Done {
            report: self.report(job, Status::Skipped { because }),
            output: None,
            fresh: None,
        }
    }

    pub(crate) fn crashed(&self, job: &Job, payload: &(dyn Any + Send)) -> Done {
        let message = format!("fixgate bug: panicked: {}", panic_message(payload));
        self.failed(job, NodeError::Infra(message))
    }

    /// A node that could not start: `error` says why.
    pub(crate) fn failed(&self, job: &Job, error: NodeError) -> Done {
        Done {
            report: self.report(
                job,
                Status::Failed {
                    error,
                    cached: false,
                },
            ),
            output: None,
            fresh: None,
        }
    }

    pub(crate) fn warn(&self, mut more: Vec<Warning>) {
        if !more.is_empty() {
            self.warnings
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .append(&mut more);
        }
    }

    /// Finds, or computes, a node from its inputs' outputs.
    pub(crate) fn node(&self, job: &Job, inputs: &[Produced]) -> Done {
        let started = self.now();
        let mut done = self.node_inner(job, inputs);
        done.report.started = Some(started);
        done.report.finished = Some(self.now());
        done
    }

    fn node_inner(&self, job: &Job, inputs: &[Produced]) -> Done {
        let node = &*job.node;
        let derivation = Derivation {
            kind: node.kind.to_string(),
            version: self.version.to_string(),
            params: node.params.clone(),
            files: node.files.clone(),
            inputs: inputs.iter().map(|(d, _)| *d).collect(),
        };
        let input_labels = &job.inputs;
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

        let mut report = self.report(job, Status::Cached);
        if let Some(hit) = hit {
            LastSeen::new(&derivation, input_labels, &hit.deps).save(
                self.store,
                scope,
                &node.label,
                last.as_ref(),
            );
            report.key = Some(hit.key);
            report.remote = self.store.origin(&hit.key) == fixgate_cache::Origin::Remote;
            let mut fresh = None;
            if checking {
                let (check, bytes) = self.check(node, inputs, &hit);
                fresh = bytes;
                report.status = Status::Checked { check };
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
                    fresh,
                };
            }
            report.output = Some(hit.record.output);
            return Done {
                report,
                output: Some((hit.record.output, Arc::from(hit.bytes))),
                fresh,
            };
        }

        let reason = match (&self.options.mode, &node.caching) {
            (Mode::Forced, _) => Reason::Forced,
            (_, Caching::Transient) => Reason::Transient,
            (_, Caching::Static) => explain(last.as_ref(), &derivation, input_labels, None),
            (_, Caching::Traced(_)) => {
                explain(last.as_ref(), &derivation, input_labels, Some(&current))
            }
        };
        match self.compute(node, inputs) {
            Ok(output) => self.store_output(job, &derivation, last, output, reason),
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
                    LastSeen::new(&derivation, input_labels, &[]).save(
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
                    fresh: None,
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
    fn compute(&self, node: &Node, inputs: &[Produced]) -> Result<Output, NodeError> {
        let slices: Vec<&[u8]> = inputs.iter().map(|(_, b)| &b[..]).collect();
        let compute = &node.compute;
        match panic::catch_unwind(AssertUnwindSafe(|| compute(&slices))) {
            Ok(result) => result,
            Err(payload) => Err(NodeError::Infra(format!(
                "panicked: {}",
                panic_message(&*payload)
            ))),
        }
    }

    /// Re-executes a cached node and compares; also gives the fresh output, when there is one.
    fn check(&self, node: &Node, inputs: &[Produced], hit: &Hit) -> (Check, Option<Arc<[u8]>>) {
        match (self.compute(node, inputs), hit.record.failed) {
            (Ok(out), false) => {
                let fresh = Digest::of(&out.bytes);
                let check = if fresh == hit.record.output {
                    Check::Same
                } else {
                    Check::Diverged { fresh }
                };
                (check, Some(Arc::from(out.bytes)))
            }
            (Err(NodeError::Data(m)), true) if m.as_bytes() == hit.bytes => (Check::Same, None),
            (Ok(out), true) => (
                Check::Errored {
                    message: "succeeded where the cached run failed".to_string(),
                },
                Some(Arc::from(out.bytes)),
            ),
            (Err(e), _) => (
                Check::Errored {
                    message: e.to_string(),
                },
                None,
            ),
        }
    }

    /// Stores a fresh output (unless the node is transient) and reports it.
    fn store_output(
        &self,
        job: &Job,
        derivation: &Derivation,
        last: Option<LastSeen>,
        output: Output,
        reason: Reason,
    ) -> Done {
        let node = &*job.node;
        let input_labels = &job.inputs;
        let scope = self.options.scope.as_str();
        let mut report = self.report(job, Status::Executed { reason });
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
            fresh: None,
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
