//! Where the audit's pytest work is done: this machine's runner (its warm interpreters), with the
//! runs sent to a remote executor when one is asked for; or, in the engine's unit tests, a fake
//! that answers from a rule. The engine's steps ask nothing else of it.

use std::sync::Arc;

use fixgate_cache::KeyWriter;
use indicatif::ProgressBar;

use crate::config::FixtureGroups;
use crate::error::Result;
use crate::pytest::driver::{CollectFailure, CollectIn, Record, Runner, ENV_ALLOWLIST, HASH_SEED};
use crate::pytest::events::{Collection, Trace};
use crate::pytest::forkserver::Carried;
use crate::pytest::result::RunResult;
use crate::remote_exec::client::{Executor, RemoteRun};
use crate::sandbox::Overlay;
use crate::snapshot::Snapshot;

/// One pytest run to make.
pub(crate) struct RunSpec<'a> {
    pub(crate) label: &'a str,
    pub(crate) snapshot: &'a Arc<Snapshot>,
    pub(crate) overlay: &'a Overlay,
    pub(crate) order: &'a [String],
    pub(crate) groups: &'a FixtureGroups,
    pub(crate) record: Record,
    /// Which repetition of the same run this is.
    pub(crate) repeat: u32,
}

/// What does the audit's pytest work.
pub(crate) trait Pytest: Send + Sync {
    /// What the key of every run and collection holds of where it runs.
    fn identity(&self) -> &Identity;

    /// Makes one run.
    fn run(&self, run: &RunSpec, progress: Option<&ProgressBar>) -> Result<RunResult>;

    /// Collects a snapshot, with what collection read and imported; `how` says where.
    fn collect(&self, snapshot: &Snapshot, how: CollectIn) -> Result<(Collection, Trace)>;

    /// Collects a snapshot with `overlay` over it, with the files that did not collect.
    fn collect_overlaid(
        &self,
        snapshot: &Snapshot,
        overlay: &Overlay,
    ) -> Result<(Collection, Trace, Vec<CollectFailure>)>;

    /// Whether the runs execute elsewhere (collections stay here, in fresh processes).
    fn remote(&self) -> bool;

    /// Why the runs can no longer be made elsewhere, once the remote executor gave up.
    fn failure(&self) -> Option<String>;

    /// Whether the audit was cancelled (Ctrl-C, or a save under `fixgate watch`).
    fn interrupted(&self) -> bool;

    /// Starts warm interpreters of the snapshot for the runs soon to come: one for each of at
    /// most `count` slots. Blocks until they are up.
    fn prewarm(&self, snapshot: &Snapshot, count: usize);

    /// How many runs side by side the warm interpreters serve.
    fn warm_slots(&self) -> usize;

    /// The warm interpreter of `snapshot` that collected without `carried`'s items is of no
    /// use: the collection was not put together.
    fn forget_collection(&self, snapshot: &Snapshot, carried: &Carried);

    /// The collection a warm interpreter of `snapshot` that makes every item must give.
    fn note_collection(&self, snapshot: &Snapshot, ids: Vec<String>);
}

/// What the key of every run and collection holds of where it runs: the interpreter, the plugin,
/// the environment the runs see, the hash seed, the timeout, the bounds and the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) interpreter: String,
    pub(crate) plugin: String,
    pub(crate) env: String,
    pub(crate) hash_seed: String,
    pub(crate) timeout: String,
    pub(crate) limits: String,
    pub(crate) network: &'static str,
}

impl Identity {
    /// What `runner` runs with.
    fn of(runner: &Runner) -> Identity {
        let mut env = KeyWriter::new("run-env");
        let mut names: Vec<&str> = ENV_ALLOWLIST.to_vec();
        names.extend(runner.pass_env.iter().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        env.list(&names, |w, n| {
            w.str(n);
            match runner.env.var(n) {
                Some(v) => w.bytes(v.as_encoded_bytes()),
                None => w.str("\0unset"),
            };
        });
        Identity {
            interpreter: runner.interpreter.fingerprint.digest(),
            plugin: crate::pytest::plugin::digest(),
            env: env.finish().to_string(),
            hash_seed: HASH_SEED.to_string(),
            timeout: runner.test_timeout.as_secs().to_string(),
            limits: runner.limits.key(),
            network: match runner.allow_network {
                true => "host",
                false => "isolated",
            },
        }
    }
}

/// This machine's runner, with the runs sent to `remote` when there is one.
pub(crate) struct Local {
    runner: Arc<Runner>,
    remote: Option<Arc<Executor>>,
    identity: Identity,
}

impl Local {
    pub(crate) fn new(runner: Arc<Runner>, remote: Option<Arc<Executor>>) -> Local {
        Local {
            identity: Identity::of(&runner),
            runner,
            remote,
        }
    }
}

impl Pytest for Local {
    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn run(&self, run: &RunSpec, progress: Option<&ProgressBar>) -> Result<RunResult> {
        match &self.remote {
            Some(exec) => {
                let remote = RemoteRun {
                    label: run.label,
                    snapshot: run.snapshot,
                    overlay: run.overlay,
                    order: Some(run.order),
                    groups: run.groups,
                    repeat: run.repeat,
                    record: run.record,
                };
                exec.run(&self.runner, &remote, progress)
            }
            None => self.runner.run(
                run.snapshot,
                run.overlay,
                run.order,
                run.groups,
                run.record,
                progress,
            ),
        }
    }

    fn collect(&self, snapshot: &Snapshot, how: CollectIn) -> Result<(Collection, Trace)> {
        self.runner.collect_traced(snapshot, how)
    }

    fn collect_overlaid(
        &self,
        snapshot: &Snapshot,
        overlay: &Overlay,
    ) -> Result<(Collection, Trace, Vec<CollectFailure>)> {
        self.runner.collect_overlaid(snapshot, overlay)
    }

    fn remote(&self) -> bool {
        self.remote.is_some()
    }

    fn failure(&self) -> Option<String> {
        self.remote.as_ref().and_then(|r| r.failure())
    }

    fn interrupted(&self) -> bool {
        self.runner
            .interrupted
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    fn prewarm(&self, snapshot: &Snapshot, count: usize) {
        self.runner.prewarm(snapshot, count);
    }

    fn warm_slots(&self) -> usize {
        self.runner.forkserver.slots()
    }

    fn forget_collection(&self, snapshot: &Snapshot, carried: &Carried) {
        self.runner.forkserver.forget_collection(snapshot, carried);
    }

    fn note_collection(&self, snapshot: &Snapshot, ids: Vec<String>) {
        self.runner
            .forkserver
            .note_collection(snapshot, &Carried::default(), ids);
    }
}
