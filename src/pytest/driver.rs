//! The runner: prepares the command of each pytest process, starts it fresh or forks it from a
//! warm interpreter, follows it to its end (the test timeout, Ctrl-C), continues the order in a
//! new process after a test that killed or hung the interpreter, and assembles the run's result.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::config::FixtureGroups;
use crate::error::{Error, Result};
use crate::pytest::command::PreparedCommand;
use crate::pytest::events::{CodeRan, CollectedItem, Collection, Event, Trace};
use crate::pytest::exit_watch::ExitWatch;
use crate::pytest::forkserver::{Carried, Launch, Lease, Pool, Purpose, Zygote};
use crate::pytest::interpreter::Interpreter;
use crate::pytest::lease::lease_violations;
use crate::pytest::progress::{Once, Progress};
use crate::pytest::result::{Outcome, RunResult, TestResult};
use crate::pytest::stream::EventReader;
use crate::sandbox::{Overlay, Sandbox};
use crate::snapshot::Snapshot;

/// `PYTHONHASHSEED` of every run: fixed, so that set and dict orders repeat, and recorded.
pub(crate) const HASH_SEED: &str = "0";

/// pytest's cache directory in a run's sandbox, under `tmp/`.
const PYTEST_CACHE: &str = "pytest-cache";

/// Variables a run may see from the caller's environment (besides `--pass-env` names). Nothing
/// that holds credentials: tokens, keys and cloud settings stay out.
pub(crate) const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_COLLATE",
];

/// How runs are made: shared by every run of one fixgate invocation.
#[derive(Clone)]
pub(crate) struct Runner {
    pub(crate) interpreter: Interpreter,
    /// The plugin, compiled (read-only to runs).
    pub(crate) plugin: Arc<crate::pytest::plugin::Installed>,
    /// pytest's rewritten test modules, made by fixgate before the runs that import them (see
    /// src/pytest/rewrites.rs): sandboxes are fresh and write no bytecode, so without them
    /// every run would rewrite and compile every test module again.
    pub(crate) rewrites: Arc<crate::pytest::rewrites::Rewrites>,
    /// The cache directory, hidden from runs (but for the plugin and the rewrites).
    pub(crate) cache_dir: PathBuf,
    /// Every run's bounds.
    pub(crate) limits: crate::limits::Limits,
    /// Extra variable names passed through (`--pass-env`).
    pub(crate) pass_env: Vec<String>,
    pub(crate) test_timeout: Duration,
    /// The user's repository root, to spot imports of project code from outside the sandbox.
    pub(crate) origin_root: PathBuf,
    /// Set by Ctrl-C: stop, kill the child, clean up.
    pub(crate) interrupted: Arc<AtomicBool>,
    /// Leave the network alone (`--allow-network`); by default runs get a network namespace
    /// of their own with only loopback, where the platform permits it.
    pub(crate) allow_network: bool,
    /// Paths outside the repository runs may read (`read-paths`, `--read-path`).
    pub(crate) read_paths: Arc<Vec<PathBuf>>,
    /// Warm interpreters that ordered runs fork from (shared by the clones of this Runner).
    pub(crate) forkserver: Arc<Pool>,
    /// How runs are contained on this machine.
    pub(crate) host: Arc<crate::contain::Host>,
    /// The process environment read at start: the variables a run may see, the temporary
    /// directory sandboxes go to.
    pub(crate) env: Arc<crate::environment::Environment>,
}

/// Where a collection runs ([`Runner::collect_traced`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CollectIn {
    /// A pytest process of its own (`--collect-only`).
    Fresh,
    /// A new warm interpreter of the snapshot, which the runs after it fork from: one
    /// collection per snapshot instead of two. `record_code`: one that traced its collection,
    /// as a run that records the code each test ran needs. `spare`: with two job slots or
    /// more, a second (plain) one is started beside it for the other slot's runs, which
    /// would otherwise start theirs only once the collection is done. A fresh process
    /// collects when no warm interpreter can be had. `carried`: the test modules it imports
    /// without making their items (the collection then says where their items go:
    /// [`Collection::unitemized`]); a fresh process makes every item.
    Warm {
        record_code: bool,
        spare: bool,
        carried: Arc<Carried>,
    },
}

/// What a run records besides outcomes and file traces (`--fixgate-record`, the plugin's
/// `record.py`): the repository's code each test ran, and the shared state it left changed.
/// The audit asks it of its file-order run (both) and its reversed run (state). And, for the
/// replay on the base's fixture bytes, where a new case of a changed data file does not exist,
/// the tests of its order that its tree does not collect (`--fixgate-order-lenient`,
/// [`RunResult::uncollected`]), where any other run fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) code: bool,
    pub(crate) state: bool,
    pub(crate) uncollected: bool,
}

impl Record {
    pub(crate) const NONE: Record = Record {
        code: false,
        state: false,
        uncollected: false,
    };
    pub(crate) const ALL: Record = Record {
        code: true,
        state: true,
        uncollected: false,
    };
    /// The replay's: only the tests not collected.
    pub(crate) const UNCOLLECTED: Record = Record {
        uncollected: true,
        ..Record::NONE
    };

    /// The plugin's options for it.
    pub(crate) fn options(self) -> Vec<String> {
        let mut out = Vec::new();
        if self.code || self.state {
            out.push(format!("--fixgate-record={}", self.arg()));
        }
        if self.uncollected {
            out.push("--fixgate-order-lenient".into());
        }
        out
    }

    /// What it is in a run's key.
    pub(crate) fn key(self) -> String {
        let mut key = self.arg();
        if self.uncollected {
            key.push_str("+uncollected");
        }
        key
    }

    /// The option's value: what the plugin records per test.
    pub(crate) fn arg(self) -> String {
        let mut parts = Vec::new();
        if self.code {
            parts.push("code");
        }
        if self.state {
            parts.push("state");
        }
        parts.join(",")
    }
}

struct Process<'z> {
    proc: Proc<'z>,
    events: PathBuf,
    log: PathBuf,
}

/// Where a run's environment points: its import path, home, temporary directory and the
/// rewrite cache (host paths for a local run, input-root-relative ones for a remote run).
pub(crate) struct RunEnvPaths {
    pub(crate) pythonpath: OsString,
    pub(crate) home: OsString,
    pub(crate) tmp: OsString,
}

/// A pytest process of fixgate's own, or a child forked by a warm interpreter (whose exit the
/// zygote reports).
enum Proc<'z> {
    Fresh(Child, ExitWatch),
    Forked(&'z mut Zygote),
    /// A process that ran elsewhere and has ended: its stream is complete.
    Recorded {
        status: std::process::ExitStatus,
        timed_out: bool,
    },
}

impl Process<'_> {
    fn try_wait(&mut self) -> Result<Option<std::process::ExitStatus>> {
        match &mut self.proc {
            Proc::Fresh(child, _) => child
                .try_wait()
                .map_err(|e| Error::Infra(format!("failed to wait for pytest: {e}"))),
            Proc::Forked(z) => Ok(z.try_wait()),
            Proc::Recorded { status, .. } => Ok(Some(*status)),
        }
    }

    fn pause(&mut self) {
        match &mut self.proc {
            Proc::Fresh(_, exit) => exit.pause(),
            Proc::Forked(z) => z.pause(),
            Proc::Recorded { .. } => {}
        }
    }

    /// Kills the process and its group (the test timeout); its exit comes through `try_wait`.
    fn kill(&mut self) {
        match &mut self.proc {
            Proc::Fresh(child, _) => kill_group(child),
            Proc::Forked(z) => z.kill_child(),
            Proc::Recorded { .. } => {}
        }
    }

    /// Kills the process and waits for it (Ctrl-C).
    fn abort(&mut self) {
        match &mut self.proc {
            Proc::Fresh(child, _) => kill_group(child),
            Proc::Forked(z) => z.kill_and_reap(),
            Proc::Recorded { .. } => {}
        }
    }
}

impl Runner {
    /// The command of a pytest process in `sandbox` with pytest's `args`: the interpreter, the
    /// environment (the allowlist, then the sandbox's own settings) and what containment needs.
    fn prepare(&self, sandbox: &Sandbox, args: &[String]) -> PreparedCommand {
        let tree = sandbox.tree();
        let mut pythonpath = vec![tree.clone()];
        if is_src_layout(&tree) {
            pythonpath.push(tree.join("src"));
        }
        pythonpath.push(self.plugin.dir.clone());
        let env = self.run_env(&RunEnvPaths {
            pythonpath: std::env::join_paths(pythonpath).unwrap_or_default(),
            home: sandbox.home().into(),
            tmp: sandbox.tmp().into(),
        });
        let mut all_args = vec!["-m".to_owned(), "pytest".to_owned()];
        all_args.extend_from_slice(args);
        PreparedCommand {
            program: self.interpreter.program(),
            args: all_args,
            env,
            cwd: tree,
            sandbox: sandbox.dir().to_path_buf(),
            cache_dir: self.cache_dir.clone(),
            plugin_dir: self.plugin.dir.clone(),
            rewrite_cache: self.rewrites.dir().to_path_buf(),
            origin_root: self.origin_root.clone(),
            // Not the launcher the user named: runs never start it.
            interpreter: vec![self.interpreter.program()],
            libraries: self.interpreter.sys_path.clone(),
            read_paths: self.read_paths.to_vec(),
            allow_network: self.allow_network,
            limits: self.limits,
        }
    }

    /// Every variable a run sees, given where its paths are: the allowlist and `--pass-env`
    /// names from the caller's environment, then the run's own settings (which win).
    pub(crate) fn run_env(&self, paths: &RunEnvPaths) -> BTreeMap<String, OsString> {
        let mut env: BTreeMap<String, OsString> = BTreeMap::new();
        for name in ENV_ALLOWLIST
            .iter()
            .copied()
            .chain(self.pass_env.iter().map(String::as_str))
        {
            if let Some(v) = self.env.var(name) {
                env.insert(name.to_owned(), v.to_owned());
            }
        }
        let mut set = |name: &str, value: OsString| {
            env.insert(name.to_owned(), value);
        };
        set("PYTHONPATH", paths.pythonpath.clone());
        set("HOME", paths.home.clone());
        set("TMPDIR", paths.tmp.clone());
        set("TEMP", paths.tmp.clone());
        set("TMP", paths.tmp.clone());
        set("PYTHONHASHSEED", HASH_SEED.into());
        set("PYTHONDONTWRITEBYTECODE", "1".into());
        set("PYTHONUNBUFFERED", "1".into());
        set("TZ", "UTC".into());
        set("NO_COLOR", "1".into());
        // The user's site directory (`~/.local`) is the caller's, not the snapshot's: off,
        // unless the caller passes the variable on purpose.
        if !self.pass_env.iter().any(|n| n == "PYTHONNOUSERSITE") {
            set("PYTHONNOUSERSITE", "1".into());
        }
        env
    }

    /// A new sandbox of `snapshot` (with `overlay`), its test modules' rewrites made first.
    pub(crate) fn sandbox(&self, snapshot: &Snapshot, overlay: &Overlay) -> Result<Sandbox> {
        self.rewrites.prepare(snapshot, overlay);
        Sandbox::create(
            snapshot,
            overlay,
            &self.env.temp_dir,
            self.host.sandboxes_in_ram(),
        )
    }

    pub(crate) fn base_args(&self, sandbox: &Sandbox, events: &Path) -> Vec<String> {
        let mut args = self.pytest_options();
        // pytest's cache works as usual, in a directory of the run's own under the sandbox's
        // `tmp/`: it is empty when the run starts (a fresh sandbox, or a warm one restored), so
        // nothing of it reaches another run.
        args.push("-o".into());
        args.push(format!(
            "cache_dir={}",
            sandbox.tmp().join(PYTEST_CACHE).display()
        ));
        args.push(format!("--fixgate-events={}", events.display()));
        args.push(format!(
            "--fixgate-rewrite={}",
            self.rewrites.dir().display()
        ));
        args.push(format!("--fixgate-root={}", sandbox.tree().display()));
        args
    }

    /// The options of every pytest process of a run, without the paths of its sandbox.
    /// pytest-randomly and pytest-random-order are disabled (fixgate owns the order); the
    /// suite's own options that claim the order, the selection or one run per test are
    /// neutralised by the plugin (plugin/options.py), which keeps the plugins that own them
    /// loaded, so the suite's `addopts` still parse.
    pub(crate) fn pytest_options(&self) -> Vec<String> {
        [
            "-p",
            crate::pytest::plugin::MODULE,
            "-p",
            "no:randomly",
            "-p",
            "no:random_order",
            "--maxfail=2147483647",
            "-q",
            "-rN",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// A cancelled audit (Ctrl-C, or a save under `fixgate watch`) starts nothing more: its
    /// queued nodes still reach a worker, and each would make a sandbox and start pytest only
    /// to kill it.
    fn check_interrupted(&self) -> Result<()> {
        match self.interrupted.load(Ordering::SeqCst) {
            true => Err(Error::Interrupted),
            false => Ok(()),
        }
    }

    fn spawn(&self, sandbox: &Sandbox, k: u32, extra: &[String]) -> Result<Process<'static>> {
        let events = sandbox.dir().join(format!("events-{k}.jsonl"));
        let log = sandbox.dir().join(format!("pytest-{k}.log"));
        std::fs::write(&events, b"").map_err(|e| Error::io("create", &events, e))?;
        let mut args = self.base_args(sandbox, &events);
        args.extend_from_slice(extra);
        let log_file = std::fs::File::create(&log).map_err(|e| Error::io("create", &log, e))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| Error::io("open", &log, e))?;
        let child = self
            .prepare(sandbox, &args)
            .command(&self.host)?
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|e| {
                Error::Infra(format!(
                    "failed to start {}: {e}",
                    self.interpreter.path.display()
                ))
            })?;
        self.forkserver.stats().count_fresh();
        let exit = ExitWatch::new(&child);
        Ok(Process {
            proc: Proc::Fresh(child, exit),
            events,
            log,
        })
    }

    /// Collects the snapshot's tests: node ids, files, lines and markers.
    pub(crate) fn collect(&self, snapshot: &Snapshot) -> Result<Vec<CollectedItem>> {
        self.collect_traced(snapshot, CollectIn::Fresh)
            .map(|(c, _)| c.items)
    }

    /// Collects, and returns what collection read and imported (its dependencies).
    pub(crate) fn collect_traced(
        &self,
        snapshot: &Snapshot,
        how: CollectIn,
    ) -> Result<(Collection, Trace)> {
        if let CollectIn::Warm {
            record_code,
            spare,
            carried,
        } = how
        {
            self.check_interrupted()?;
            let spare = spare && self.forkserver.slots() >= 2;
            if let Some(found) = self.collect_warm(snapshot, record_code, spare, &carried) {
                return Ok(found);
            }
        }
        let (collection, trace, errors) = self.collect_overlaid(snapshot, &Overlay::new())?;
        if !errors.is_empty() {
            return Err(collect_error(snapshot, &errors));
        }
        Ok((collection, trace))
    }

    /// The collection of a new warm interpreter of `snapshot`, left idle for the runs that
    /// fork from it; `None` when there is none to be had (forking is off, every slot is busy,
    /// the interpreter would not start or collection failed there): a fresh process collects.
    fn collect_warm(
        &self,
        snapshot: &Snapshot,
        record_code: bool,
        spare: bool,
        carried: &Carried,
    ) -> Option<(Collection, Trace)> {
        let (collection, trace) = std::thread::scope(|scope| {
            let spare = spare.then(|| {
                scope.spawn(|| {
                    self.with_launch(false, Purpose::Spare, carried, |launch| {
                        // Left idle, for the first run that asks.
                        drop(
                            self.forkserver
                                .checkout(launch, snapshot, &Overlay::new(), None),
                        )
                    })
                })
            });
            let found = self.with_launch(record_code, Purpose::Collect, carried, |launch| {
                let mut lease =
                    self.forkserver
                        .checkout(launch, snapshot, &Overlay::new(), None)?;
                lease.take_collection()
            });
            if let Some(spare) = spare {
                let _ = spare.join();
            }
            found
        })?;
        self.forkserver.note_collection(
            snapshot,
            carried,
            collection.items.iter().map(|i| i.nodeid.clone()).collect(),
        );
        Some((collection, trace))
    }

    /// Makes `count` warm interpreters of `snapshot` idle for the runs that will ask for them
    /// ([`Purpose::Prewarm`]): idle ones count, the others start side by side; fewer when
    /// forking is off or no slot is free. A zygote that does not start refuses the snapshot as
    /// a run's would: its runs start fresh, as they would have.
    pub(crate) fn prewarm(&self, snapshot: &Snapshot, count: usize) {
        if self.check_interrupted().is_err() {
            return;
        }
        std::thread::scope(|scope| {
            let starts: Vec<_> = (0..count)
                .map(|_| {
                    scope.spawn(|| {
                        self.with_launch(false, Purpose::Prewarm, &Carried::default(), |launch| {
                            self.forkserver
                                .checkout(launch, snapshot, &Overlay::new(), None)
                        })
                    })
                })
                .collect();
            // Each holds its zygote until all are done, so that no two count the same one.
            let leases: Vec<_> = starts
                .into_iter()
                .map(|s| s.join().ok().flatten())
                .collect();
            drop(leases);
        });
    }

    /// `f` with what starting a warm interpreter of this runner takes.
    fn with_launch<R>(
        &self,
        record_code: bool,
        purpose: Purpose,
        carried: &Carried,
        f: impl FnOnce(&Launch) -> R,
    ) -> R {
        // A warm interpreter's sandbox (restored to its post-collection bytes), or a new one.
        let prepare = |sandbox: &Sandbox, events: &Path| {
            self.prepare(sandbox, &self.base_args(sandbox, events))
        };
        let fresh = |snapshot: &Snapshot| self.sandbox(snapshot, &Overlay::new());
        f(&Launch {
            sandbox: &fresh,
            interrupted: &self.interrupted,
            prepare: &prepare,
            host: &self.host,
            record_code,
            purpose,
            carried,
            stall_after: self.test_timeout,
        })
    }

    /// Collects `snapshot` with `overlay` over it: what collected, what collection read and
    /// imported, and the files that did not collect with pytest's message for each (the
    /// base's test files on the head's code may import what the head removed).
    pub(crate) fn collect_overlaid(
        &self,
        snapshot: &Snapshot,
        overlay: &Overlay,
    ) -> Result<(Collection, Trace, Vec<CollectFailure>)> {
        self.check_interrupted()?;
        let sandbox = self.sandbox(snapshot, overlay)?;
        let mut p = self.spawn(
            &sandbox,
            0,
            &["--collect-only".into(), "--fixgate-collect".into()],
        )?;
        let Some((status, events, dropped)) =
            wait_interruptibly(&mut p, &self.interrupted, self.test_timeout)?
        else {
            return Err(Error::NotCollected(format!(
                "pytest could not collect {}: {}",
                snapshot.rev_label(),
                stalled("collecting the suite", self.test_timeout)
            )));
        };
        let mut items = None;
        let mut deselected = Vec::new();
        let mut skipped_collectors = Vec::new();
        let mut trace = Trace::default();
        let mut errors = Vec::new();
        let mut problems = Vec::new();
        // A cut stream does not say everything the collection read: it depends on every file.
        if let Some(why) = dropped {
            trace.unknown.push(why.clone());
            problems.push(why);
        }
        for ev in events {
            match ev {
                // The first collection counts, as when following a run.
                Event::Collected {
                    items: i,
                    deselected: d,
                } if items.is_none() => {
                    items = Some(i);
                    deselected = d;
                }
                Event::SessionTrace { trace: t, .. } => trace.merge(*t),
                Event::CollectSkip { nodeid, reason } => {
                    skipped_collectors.push(CollectedItem::skipped_collector(nodeid, reason))
                }
                Event::CollectError {
                    nodeid,
                    message,
                    longrepr,
                } => errors.push((nodeid, with_location(message, &longrepr))),
                Event::Error { kind, message } => problems.push(format!("{kind}: {message}")),
                _ => {}
            }
        }
        // Every file failed: nothing was collected, which is data too.
        if items.is_none() && !errors.is_empty() {
            items = Some(Vec::new());
        }
        let Some(items) = items else {
            let problems = if problems.is_empty() {
                String::new()
            } else {
                format!("\n  {}", problems.join("\n  "))
            };
            let log = log_tail(&p.log);
            return Err(match status.code() {
                // pytest ran and stopped with its own error (its usage, a conftest): the
                // suite's doing, in pytest's words first.
                Some(code) => Error::NotCollected(format!(
                    "{} (pytest stopped before collecting {}, exit status {code}){problems}\n{log}",
                    pytest_said(&log, Some(&sandbox.tree()))
                        .unwrap_or_else(|| "pytest stopped before collecting".to_owned()),
                    snapshot.rev_label(),
                )),
                None => Error::Infra(format!(
                    "pytest collection failed in a sandbox of {} ({}){problems}\n{log}",
                    snapshot.rev_label(),
                    describe_exit(&status),
                )),
            });
        };
        if overlay.is_empty() && errors.is_empty() {
            self.forkserver.note_collection(
                snapshot,
                &Carried::default(),
                items.iter().map(|i| i.nodeid.clone()).collect(),
            );
        }
        let collection = Collection {
            items,
            skipped_collectors,
            deselected,
            unitemized: None,
        };
        Ok((collection, trace, errors))
    }

    /// Runs `order` in a fresh sandbox of `snapshot` (with `overlay`), continuing in a new
    /// process after a crash or a timeout.
    pub(crate) fn run(
        &self,
        snapshot: &Snapshot,
        overlay: &Overlay,
        order: &[String],
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        self.run_order(snapshot, overlay, Some(order), groups, record, progress)
    }

    /// Runs every test in collection order, collecting in the same process (no separate
    /// collection run): seed 0 costs one pytest start, like plain pytest.
    pub(crate) fn run_collection_order(
        &self,
        snapshot: &Snapshot,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        self.run_order(snapshot, &Overlay::new(), None, groups, record, progress)
    }

    /// Runs the order of `seed` (0: collection order, in one process).
    pub(crate) fn run_seed(
        &self,
        snapshot: &Snapshot,
        seed: u64,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        if seed == 0 {
            return self.run_collection_order(snapshot, groups, record, progress);
        }
        let order = crate::pytest::order::seeded(&self.collect(snapshot)?, seed);
        if let Some(pb) = progress {
            pb.set_length(order.len() as u64);
        }
        self.run(snapshot, &Overlay::new(), &order, groups, record, progress)
    }

    fn run_order(
        &self,
        snapshot: &Snapshot,
        overlay: &Overlay,
        order: Option<&[String]>,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        self.check_interrupted()?;
        let lease = self.with_launch(record.code, Purpose::Run, &Carried::default(), |launch| {
            self.forkserver.checkout(launch, snapshot, overlay, order)
        });
        let place = match lease {
            Some(lease) => Place::Warm(Box::new(lease)),
            None => Place::Own(self.sandbox(snapshot, overlay)?),
        };
        self.drive(place, snapshot, order, groups, record, progress)
    }

    /// The run of `order` (`None`: collection order) that executed elsewhere, one pytest
    /// process after another (remote execution), built from the streams its processes left by
    /// the same code that follows a local run.
    pub(crate) fn replay(
        &self,
        snapshot: &Snapshot,
        recorded: Recorded,
        order: Option<&[String]>,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        let place = Place::Recorded {
            root: recorded.root,
            processes: recorded.processes.into_iter(),
        };
        self.drive(place, snapshot, order, groups, record, progress)
    }

    /// Runs (or reads back) the processes of one run until every test of the order has a
    /// result, then puts the results in the order's shape.
    fn drive(
        &self,
        mut place: Place,
        snapshot: &Snapshot,
        order: Option<&[String]>,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        let sandbox_dir = place.dir().to_path_buf();
        let recorded = matches!(place, Place::Recorded { .. });
        let watch = sandbox_dir.join("watch.json");
        if !recorded {
            let roots = serde_json::json!({ "roots": groups.watch_roots() });
            std::fs::write(&watch, roots.to_string()).map_err(|e| Error::io("write", &watch, e))?;
        }
        let order_file = sandbox_dir.join("order.txt");

        let mut result = RunResult::empty(order.map(<[String]>::to_vec).unwrap_or_default());
        result.session_code = record.code.then(CodeRan::new);
        // The run's disk bound, counted from the sandbox as the run found it.
        let mut disk = crate::limits::DiskWatch::new(
            &sandbox_dir,
            self.limits.disk,
            self.host.shared_scratch(),
        );
        // `None` until the first process has collected, when running in collection order.
        let mut remaining: Option<Vec<String>> = order.map(<[String]>::to_vec);
        if let (None, Place::Warm(lease)) = (&remaining, &mut place) {
            // The zygote collected already: its collection order is the order.
            result.order = lease.zygote().collected.clone();
            if let Some(pb) = progress {
                pb.set_length(result.order.len() as u64);
            }
            remaining = Some(result.order.clone());
        }
        while remaining.as_ref().is_none_or(|r| !r.is_empty()) {
            let mut extra = vec![format!("--fixgate-watch={}", watch.display())];
            extra.extend(record.options());
            match &remaining {
                Some(_) if recorded => {}
                Some(ids) => {
                    let mut text = ids.join("\n");
                    text.push('\n');
                    std::fs::write(&order_file, text)
                        .map_err(|e| Error::io("write", &order_file, e))?;
                    extra.push(format!("--fixgate-order={}", order_file.display()));
                }
                None => extra.push("--fixgate-collect".into()),
            }
            // A cancelled audit starts no process (a warm interpreter whose start it
            // cancelled leaves this run a fresh one to make).
            self.check_interrupted()?;
            let k = result.processes;
            result.processes += 1;
            let before = result.tests.len();
            let p = match &mut place {
                Place::Recorded { processes, .. } => {
                    let left = remaining.as_ref().map_or(0, Vec::len);
                    let Some(r) = processes.next() else {
                        return Err(Error::Infra(format!(
                            "the remote run of {} ended after {k} pytest process(es) with {left} \
                             test(s) not run",
                            snapshot.rev_label()
                        )));
                    };
                    Process {
                        proc: Proc::Recorded {
                            status: r.status,
                            timed_out: r.timed_out,
                        },
                        events: r.events,
                        log: r.log,
                    }
                }
                // The first process of a run forks. One that continues after a crash or a
                // timeout forks only when a fresh pytest would collect exactly what the zygote
                // did (see `may_continue_forked`): a fresh one imports and collects again in the
                // tree the crashed prefix left, so import-time writes happen again and
                // import-time reads see the prefix's changes.
                Place::Warm(lease)
                    if lease.healthy() && (k == 0 || lease.may_continue_forked()) =>
                {
                    let z = lease.zygote();
                    let events = sandbox_dir.join(format!("events-{k}.jsonl"));
                    std::fs::write(&events, b"").map_err(|e| Error::io("create", &events, e))?;
                    // The fork runs as the zygote's uid: what fixgate just wrote or restored
                    // in the sandbox becomes its own.
                    crate::contain::hand_over(&self.host, &sandbox_dir)?;
                    match z.fork(&events, &order_file, Some(&watch), record) {
                        Ok(_) => Process {
                            log: z.log().to_path_buf(),
                            proc: Proc::Forked(z),
                            events,
                        },
                        Err(reason) => {
                            // The zygote failed: this run goes on fresh, in its sandbox.
                            self.forkserver.stats().fall_back(reason);
                            self.spawn(&z.sandbox, k, &extra)?
                        }
                    }
                }
                Place::Warm(lease) => self.spawn(&lease.zygote().sandbox, k, &extra)?,
                Place::Own(sandbox) => self.spawn(sandbox, k, &extra)?,
            };
            if k > 0 {
                if let Some(d) = disk.as_mut() {
                    d.next_process();
                }
            }
            let given = (remaining.as_deref(), record.uncollected);
            let outcome = self.follow(p, given, &mut result, progress, &mut disk)?;
            if !outcome.collect_errors.is_empty() {
                return Err(collect_error(snapshot, &outcome.collect_errors));
            }
            if outcome
                .problems
                .iter()
                .any(|p| p.starts_with("order-mismatch"))
            {
                return Err(outcome.failure(
                    "executed the tests in another order than requested (a plugin reorders or \
                     distributes them; fixgate disables pytest-randomly, pytest-random-order and \
                     pytest-xdist, tell us which one this is)",
                    snapshot,
                ));
            }
            if remaining.is_none() {
                let Some(items) = outcome.collected.as_ref() else {
                    return Err(outcome.failure("did not collect the tests", snapshot));
                };
                result.order = items.iter().map(|i| i.nodeid.clone()).collect();
                if let Some(pb) = progress {
                    pb.set_length(result.order.len() as u64);
                }
                remaining = Some(result.order.clone());
            }
            let left = remaining.as_mut().expect("set above");
            left.retain(|id| !result.uncollected.contains(id));
            if result.tests.len() == before && !left.is_empty() {
                // A session that ended by its own doing (a hook returned early, `pytest.exit`
                // between tests, `sys.exit` at session start) before running what it was given:
                // those tests did not pass, they did not run. A process that was killed or that
                // refused its arguments is no judgment of the tests.
                let Some(why) = not_run(outcome.status) else {
                    let what = format!("ran none of the {} requested tests", left.len());
                    return Err(outcome.failure(&what, snapshot));
                };
                let now = now_secs();
                for id in left.drain(..) {
                    result.executed.push(id.clone());
                    result.tests.push(TestResult::missing(
                        &id,
                        Outcome::Error,
                        why.clone(),
                        now,
                        now,
                    ));
                }
                break;
            }
            // Counted, not a set: a test listed twice (the nio order) leaves one place per run.
            let mut done: HashMap<&str, usize> = HashMap::new();
            for t in &result.tests[before..] {
                *done.entry(t.nodeid.as_str()).or_default() += 1;
            }
            let waiting = left.len();
            left.retain(|id| match done.get_mut(id.as_str()) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    false
                }
                _ => true,
            });
            // Every result kept is one of the order's (`Progress`): a process that took none of
            // its tests would be started again for ever.
            if left.len() == waiting && !left.is_empty() {
                return Err(outcome.failure(
                    "reported results for none of the tests it was given",
                    snapshot,
                ));
            }
        }
        if !result.uncollected.is_empty() {
            let gone: HashSet<&String> = result.uncollected.iter().collect();
            result.order.retain(|id| !gone.contains(id));
        }
        let order = result.order.clone();
        scrub_sandbox_paths(&mut result, &sandbox_dir);
        // Each run of a test listed twice in a row, numbered in the order they executed.
        if order.windows(2).any(|w| w[0] == w[1]) {
            let mut runs: HashMap<String, u32> = HashMap::new();
            for t in &mut result.tests {
                let n = runs.entry(t.nodeid.clone()).or_default();
                t.occurrence = *n;
                *n += 1;
            }
        }
        // Results in the requested order, whatever order the processes reported them in.
        let mut position: HashMap<(&str, u32), usize> = HashMap::with_capacity(order.len());
        let mut listed: HashMap<&str, u32> = HashMap::new();
        for (i, id) in order.iter().enumerate() {
            let n = listed.entry(id.as_str()).or_default();
            position.insert((id.as_str(), *n), i);
            *n += 1;
        }
        result.tests.sort_by_key(|t| {
            position
                .get(&(t.nodeid.as_str(), t.occurrence))
                .copied()
                .unwrap_or(usize::MAX)
        });
        for t in &mut result.tests {
            t.violations = lease_violations(&t.changed, &t.writes_marker, groups);
            self.limits.classify(&mut t.outcome, &mut t.message);
        }
        if self.host.mode() == crate::contain::Mode::Landlock {
            let failures = result.tests.iter().filter_map(|t| {
                let failed = matches!(t.outcome, Outcome::Failed | Outcome::Error);
                Some((t.nodeid.as_str(), t.message.as_deref().filter(|_| failed)?))
            });
            if let Some(sandbox) = place.sandbox() {
                self.prepare(sandbox, &[])
                    .refused_read(&self.host, failures)?;
            }
        }
        result
            .warnings
            .extend(self.editable_install_warnings(&result));
        Ok(result)
    }

    /// Follows one process until it exits; records results, crashes and timeouts. `order` is
    /// the order the process was given (`None`: it announces its collection order), and
    /// whether it may leave out what it does not collect (`Record::uncollected`).
    fn follow(
        &self,
        mut p: Process,
        (order, lenient): (Option<&[String]>, bool),
        result: &mut RunResult,
        progress: Option<&ProgressBar>,
        disk: &mut Option<crate::limits::DiskWatch>,
    ) -> Result<ProcessOutcome> {
        let mut reader = EventReader::open(&p.events)?;
        // The test running now: named by `test_start`, or, after a result, the next one in the
        // order (the plugin writes `test_start` only when that would be wrong).
        let mut current: Option<(String, Instant, f64)> = None;
        let mut progress_of = Progress::new(order);
        let mut problems = Vec::new();
        let mut collected = None;
        let mut collect_errors = Vec::new();
        // A process that ran elsewhere was killed there for the timeout, or not.
        let mut timed_out = matches!(
            p.proc,
            Proc::Recorded {
                timed_out: true,
                ..
            }
        );
        let mut filled = None;
        // Since when no test runs (collection, the session's start and end): bounded by the
        // test timeout too, else a hook or an import that never returns holds the run. It counts
        // from the last progress (see `Progress`), not from the last line: the process writes
        // its own stream.
        let mut outside = Instant::now();
        let before = result.tests.len();
        let mut stalled_at = None;
        // Results for tests the process was not given (or reported too often): the first one's
        // id and how many.
        let mut dropped: Option<(String, usize)> = None;
        let mut exited = None;
        let status = loop {
            if exited.is_none() {
                exited = p.try_wait()?;
            }
            // The stream is read a batch at a time, so that the clocks are looked at between
            // batches however fast the process writes, and an exited one's rest is not held
            // whole in memory.
            let batch = reader.read_new()?;
            for ev in batch {
                match ev {
                    Event::TestStart { nodeid } => {
                        if !progress_of.start(&nodeid) {
                            continue;
                        }
                        outside = Instant::now();
                        if let Some(pb) = progress {
                            pb.set_message(nodeid.clone());
                        }
                        // The test inferred to run next keeps its clock.
                        if current.as_ref().is_none_or(|c| c.0 != nodeid) {
                            current = Some((nodeid, Instant::now(), now_secs()));
                        }
                    }
                    Event::Test(t) => {
                        if !progress_of.result(&t.nodeid) {
                            dropped.get_or_insert_with(|| (t.nodeid.clone(), 0)).1 += 1;
                            continue;
                        }
                        outside = Instant::now();
                        current = progress_of
                            .after(&t.nodeid)
                            .map(|next| (next.to_owned(), Instant::now(), now_secs()));
                        if let (Some(pb), Some((next, _, _))) = (progress, &current) {
                            pb.set_message(next.clone());
                        }
                        result.executed.push(t.nodeid.clone());
                        result.tests.push(TestResult::from_event(*t));
                        if let Some(pb) = progress {
                            pb.inc(1);
                        }
                    }
                    Event::SessionTrace { trace, .. } => result.session_trace.merge(*trace),
                    Event::SessionCode { code, unknown } => match (code, unknown) {
                        (Some(code), None) => {
                            if let Some(all) = &mut result.session_code {
                                for (path, lines) in code {
                                    let known = all.entry(path).or_default();
                                    known.extend(lines);
                                    known.sort_unstable();
                                    known.dedup();
                                }
                            }
                        }
                        (_, why) => {
                            result.session_code = None;
                            result.recording_error.get_or_insert(
                                why.unwrap_or_else(|| "the plugin did not say why".into()),
                            );
                        }
                    },
                    // The session ended cleanly: the test it names was running, and a test
                    // inferred to follow the last result never started (a plugin or conftest
                    // stopped the session between tests).
                    Event::Finish { running, .. } => {
                        if !progress_of.once(Once::Finish) {
                            continue;
                        }
                        outside = Instant::now();
                        // Only a test of the order still to report can have been running.
                        current = running.filter(|id| progress_of.pending(id)).map(|id| {
                            match current.take() {
                                Some(c) if c.0 == id => c,
                                _ => (id, Instant::now(), now_secs()),
                            }
                        });
                    }
                    Event::Uncollected { nodeids } if lenient => {
                        let gone = progress_of.uncollected(&nodeids);
                        if let Some(pb) = progress {
                            let len = pb.length().unwrap_or(0);
                            pb.set_length(len.saturating_sub(gone.len() as u64));
                        }
                        result.uncollected.extend(gone);
                    }
                    Event::Collected { items, .. } => {
                        if !progress_of.collected(items.iter().map(|i| i.nodeid.as_str())) {
                            continue;
                        }
                        outside = Instant::now();
                        collected = Some(items)
                    }
                    Event::CollectError {
                        nodeid,
                        message,
                        longrepr,
                    } => collect_errors.push((nodeid, with_location(message, &longrepr))),
                    Event::Start { neutralised, .. } => {
                        if !progress_of.once(Once::Start) {
                            continue;
                        }
                        outside = Instant::now();
                        for n in neutralised {
                            let w = n.warning();
                            if !result.warnings.contains(&w) {
                                result.warnings.push(w);
                            }
                        }
                    }
                    Event::Error { kind, message } => {
                        result.incomplete_trace |= kind == "internal";
                        problems.push(format!("{kind}: {message}"));
                    }
                    _ => {}
                }
            }
            if let Some(status) = exited {
                if reader.drained() {
                    break status;
                }
                continue;
            }
            if self.interrupted.load(Ordering::SeqCst) {
                p.abort();
                return Err(Error::Interrupted);
            }
            match &current {
                Some((_, started, _)) => {
                    if started.elapsed() > self.test_timeout && !timed_out {
                        p.kill();
                        timed_out = true;
                    }
                }
                None => {
                    if outside.elapsed() > self.test_timeout && stalled_at.is_none() && !timed_out {
                        p.kill();
                        stalled_at = Some(match result.tests.len() == before {
                            true => "collecting the suite or starting its session",
                            false => "ending its session",
                        });
                    }
                }
            }
            if filled.is_none() {
                filled = disk.as_mut().and_then(crate::limits::DiskWatch::over);
                if filled.is_some() {
                    p.kill();
                }
            }
            p.pause();
        };
        // Lines no plugin writes were dropped: what the process reported is incomplete.
        if let Some(why) = reader.dropped() {
            result
                .warnings
                .push(format!("a pytest process wrote too much: {why}"));
            result.incomplete_trace = true;
        }
        if let Some((first, n)) = dropped {
            result.warnings.push(format!(
                "a pytest process reported {n} result(s) for tests it was not given or reported \
                 more often than listed (the first: {first}): ignored"
            ));
        }
        // A test that started just as the process was killed for stalling outside a test is
        // not charged with it: the next process runs it again.
        if stalled_at.is_some() && !timed_out {
            current = None;
        }
        // A test that started and never reported: it killed the interpreter, or we did.
        if let Some((nodeid, _, start)) = current {
            let (outcome, message) = if let Some(size) = filled {
                (
                    Outcome::ResourceLimit,
                    self.limits.message(
                        crate::limits::Hit::Disk,
                        &format!(
                            "the run's sandbox grew by {}",
                            crate::units::show_size(size)
                        ),
                    ),
                )
            } else if timed_out {
                (
                    Outcome::Timeout,
                    format!(
                        "killed after --test-timeout {}s",
                        self.test_timeout.as_secs()
                    ),
                )
            } else {
                (Outcome::Crashed, describe_exit(&status))
            };
            result.executed.push(nodeid.clone());
            result.tests.push(TestResult::missing(
                &nodeid,
                outcome,
                message,
                start,
                now_secs(),
            ));
            if let Some(pb) = progress {
                pb.inc(1);
            }
        }
        if let Some(doing) = stalled_at {
            let why = stalled(doing, self.test_timeout);
            // What the session reports at its end (the code and the files of collection and
            // session fixtures) never came: nothing may be judged from its absence.
            result.incomplete_trace = true;
            if result.session_code.is_some() {
                result.session_code = None;
                result
                    .recording_error
                    .get_or_insert_with(|| format!("a pytest process was killed: {why}"));
            }
            let warning = format!("a pytest process was killed: {why}");
            if !result.warnings.contains(&warning) {
                result.warnings.push(warning);
            }
            problems.push(format!("stalled: {why}"));
        }
        Ok(ProcessOutcome {
            status: status.code(),
            collected,
            collect_errors,
            problems,
            log_tail: log_tail(&p.log),
        })
    }

    /// Imports of project code from the user's repository instead of the sandbox (an editable
    /// install): the run would test the user's tree, not the snapshot.
    fn editable_install_warnings(&self, result: &RunResult) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let traces = result
            .tests
            .iter()
            .map(|t| &t.trace)
            .chain([&result.session_trace]);
        for trace in traces {
            for o in trace.outside.iter().filter(|o| o.op == "import") {
                if Path::new(&o.path).starts_with(&self.origin_root) {
                    seen.insert(o.path.clone());
                }
            }
        }
        seen.into_iter()
            .map(|p| {
                format!(
                    "a test imported {p} from the original repository, not the sandbox (an \
                     editable install?); the run may test the working tree instead of the snapshot"
                )
            })
            .collect()
    }
}

/// Where a run happens: a sandbox of its own, a warm interpreter's, or elsewhere (remote
/// execution: its processes are read back one after another).
enum Place<'p> {
    Own(Sandbox),
    Warm(Box<Lease<'p>>),
    Recorded {
        /// The input root the run had on its worker (what paths in messages start with).
        root: PathBuf,
        processes: std::vec::IntoIter<RecordedProcess>,
    },
}

impl Place<'_> {
    /// The sandbox folder, whose paths the results lose.
    fn dir(&mut self) -> &Path {
        match self {
            Place::Own(s) => s.dir(),
            Place::Warm(lease) => lease.zygote().sandbox.dir(),
            Place::Recorded { root, .. } => root,
        }
    }

    /// The sandbox on this machine (none for a run that executed elsewhere).
    fn sandbox(&mut self) -> Option<&Sandbox> {
        match self {
            Place::Own(s) => Some(s),
            Place::Warm(lease) => Some(&lease.zygote().sandbox),
            Place::Recorded { .. } => None,
        }
    }
}

/// A run that executed elsewhere: where its sandbox was, and each of its pytest processes.
pub(crate) struct Recorded {
    pub(crate) root: PathBuf,
    pub(crate) processes: Vec<RecordedProcess>,
}

/// One pytest process of a [`Recorded`] run: its event stream and output, copied here, and
/// how it ended.
pub(crate) struct RecordedProcess {
    pub(crate) events: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) status: std::process::ExitStatus,
    /// Killed for running a test past the timeout.
    pub(crate) timed_out: bool,
}

/// A file pytest could not collect: its node id and pytest's message with where it broke.
pub(crate) type CollectFailure = (String, String);

/// The error for test files pytest could not collect, with pytest's own messages.
/// A collection error's message, with the lines of pytest's report that say where it broke
/// (a traceback's `File "…", line N` or a `path.py:N:` line, and the offending source line).
fn with_location(message: String, longrepr: &str) -> String {
    let lines: Vec<&str> = longrepr.lines().collect();
    let located = lines.iter().rposition(|l| {
        l.contains("\", line ")
            || l.trim_start()
                .split_once(".py:")
                .is_some_and(|(p, _)| !p.contains(' '))
    });
    match located {
        Some(i) => {
            let end = (i + 3).min(lines.len());
            let context = lines[i..end].join("\n");
            format!("{message}\n{context}")
        }
        None => message,
    }
}

fn collect_error(snapshot: &Snapshot, errors: &[(String, String)]) -> Error {
    let mut msg = format!(
        "pytest could not collect {} file{} of {}:\n",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" },
        snapshot.rev_label()
    );
    for (nodeid, message) in errors {
        msg.push_str(&format!("--- {nodeid}\n{}\n", message.trim_end()));
    }
    msg.push_str("fix the test files so that `python -m pytest --collect-only` succeeds");
    Error::NotCollected(msg)
}

impl ProcessOutcome {
    /// The error for a pytest process that did not do `what` it was started for, with the
    /// plugin's complaints and the end of pytest's own output.
    fn failure(&self, what: &str, snapshot: &Snapshot) -> Error {
        let status = match self.status {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".to_owned(),
        };
        let said = pytest_said(&self.log_tail, None)
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        Error::Infra(format!(
            "pytest {what} in a sandbox of {}{said} ({status}){}\n{}",
            snapshot.rev_label(),
            self.problems
                .iter()
                .map(|p| format!("\n  {p}"))
                .collect::<String>(),
            self.log_tail
        ))
    }
}

struct ProcessOutcome {
    status: Option<i32>,
    collected: Option<Vec<CollectedItem>>,
    collect_errors: Vec<(String, String)>,
    problems: Vec<String>,
    log_tail: String,
}

/// Reports must not depend on where this run's sandbox was: failure messages lose the sandbox
/// tree's prefix (paths become repo-relative), and accesses to the sandbox's own home and
/// temporary directory are not "outside the repository".
fn scrub_sandbox_paths(result: &mut RunResult, sandbox_dir: &Path) {
    let dirs: Vec<String> = [
        Some(sandbox_dir.to_path_buf()),
        sandbox_dir.canonicalize().ok(),
    ]
    .into_iter()
    .flatten()
    .map(|d| d.display().to_string())
    .collect();
    let scrub = |text: &mut Option<String>| {
        if let Some(t) = text {
            for d in &dirs {
                *t = t
                    .replace(&format!("{d}/tree/"), "")
                    .replace(&format!("{d}/"), "");
            }
        }
    };
    let under_sandbox = |p: &str| dirs.iter().any(|d| Path::new(p).starts_with(d));
    for t in &mut result.tests {
        scrub(&mut t.message);
        scrub(&mut t.skip_reason);
        for phase in t.phases.values_mut() {
            scrub(&mut phase.message);
        }
        t.trace.outside.retain(|o| !under_sandbox(&o.path));
    }
    result
        .session_trace
        .outside
        .retain(|o| !under_sandbox(&o.path));
}

/// Why the tests a pytest process was given and did not run count as errors, from its exit
/// status (`None`: killed by a signal); `None` when the process says nothing of them: killed
/// (by us, the kernel), an internal error (3) or a usage error (4, unknown node ids), which
/// are fixgate's to report.
fn not_run(status: Option<i32>) -> Option<String> {
    let code = status?;
    (code != 3 && code != 4).then(|| {
        format!(
            "not run: the pytest session ended (exit status {code}) before running this test; \
             a hook, plugin or `pytest.exit`/`sys.exit` stopped it"
        )
    })
}

fn describe_exit(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("the interpreter exited with status {c} during the test"),
        (None, Some(s)) => format!("the interpreter died of signal {s} during the test"),
        _ => "the interpreter died during the test".into(),
    }
}

fn kill_group(child: &mut Child) {
    let pgid = child.id() as i32;
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A process waited for to its end: its exit, its events, and what its stream dropped
/// ([`EventReader::dropped`]).
type Waited = (std::process::ExitStatus, Vec<Event>, Option<String>);

/// The process's exit, its events and what its stream dropped ([`Waited`]), or
/// `None` once it has gone `limit` without exiting or
/// progressing (then killed): collecting, then ending its session, each gets the whole bound.
/// Lines that are no progress (see [`Progress`]) do not move the clock: the process writes them.
fn wait_interruptibly(
    p: &mut Process,
    interrupted: &AtomicBool,
    limit: Duration,
) -> Result<Option<Waited>> {
    let mut since = Instant::now();
    let mut reader = EventReader::open(&p.events)?;
    let mut events = Vec::new();
    let mut progress = Progress::new(None);
    let mut exited = None;
    loop {
        if exited.is_none() {
            exited = p.try_wait()?;
        }
        for ev in reader.read_new()? {
            let moved = match &ev {
                Event::Start { .. } => progress.once(Once::Start),
                Event::Finish { .. } => progress.once(Once::Finish),
                Event::Collected { .. } => progress.once(Once::Collected),
                _ => false,
            };
            if moved {
                since = Instant::now();
            }
            // What a collection says; no more of it than a suite writes (a file per error).
            let kept = matches!(
                ev,
                Event::Collected { .. }
                    | Event::SessionTrace { .. }
                    | Event::CollectSkip { .. }
                    | Event::CollectError { .. }
                    | Event::Error { .. }
            );
            if kept {
                if events.len() >= COLLECTION_EVENTS {
                    p.abort();
                    return Err(Error::NotCollected(format!(
                        "pytest wrote more than {COLLECTION_EVENTS} events while collecting (a \
                         conftest writing the plugin's stream?)"
                    )));
                }
                events.push(ev);
            }
        }
        if let Some(s) = exited {
            if reader.drained() {
                return Ok(Some((s, events, reader.dropped())));
            }
            continue;
        }
        if interrupted.load(Ordering::SeqCst) {
            p.abort();
            return Err(Error::Interrupted);
        }
        if since.elapsed() > limit {
            p.abort();
            return Ok(None);
        }
        p.pause();
    }
}

/// The most events a collection may report: its items, its traces, a skip or an error per
/// file.
const COLLECTION_EVENTS: usize = 1_000_000;

/// Why a process was killed outside any test: it spent longer than the test timeout `doing`
/// something that is no test (an import or a hook that never returns would hold the audit
/// forever).
pub(crate) fn stalled(doing: &str, timeout: Duration) -> String {
    format!(
        "no test ran for --test-timeout {}s while pytest was {doing} (an import, a fixture or a \
         hook that does not return?); killed. Raise --test-timeout if the suite needs longer",
        timeout.as_secs()
    )
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn is_src_layout(tree: &Path) -> bool {
    let src = tree.join("src");
    std::fs::read_dir(&src).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            let p = e.path();
            p.join("__init__.py").exists() || p.extension().is_some_and(|x| x == "py")
        })
    })
}

/// pytest's own account of why it stopped before running anything, from its output: argparse's
/// `error:` line (an option the configuration passes that pytest does not know), an `ERROR:`
/// line (a `pytest.UsageError`), the exception of an `INTERNALERROR>` traceback, or the last
/// `E   ` line of a report (a conftest that does not import). Paths lose the sandbox's tree.
fn pytest_said(log: &str, tree: Option<&Path>) -> Option<String> {
    let lines: Vec<&str> = log.lines().map(str::trim_end).collect();
    let argparse = lines
        .iter()
        .find_map(|l| l.split_once(": error: ").map(|(_, m)| m));
    let usage = || {
        lines
            .iter()
            .find_map(|l| l.strip_prefix("ERROR: "))
            .filter(|m| !m.starts_with("usage:"))
    };
    let internal = || {
        lines
            .iter()
            .rev()
            .filter_map(|l| l.strip_prefix("INTERNALERROR> "))
            .find(|l| !l.starts_with(' '))
    };
    let reported = || {
        lines
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("E   "))
            .map(str::trim)
    };
    let said = argparse
        .or_else(usage)
        .or_else(internal)
        .or_else(reported)?;
    Some(match tree {
        Some(tree) => said.replace(&format!("{}/", tree.display()), ""),
        None => said.to_owned(),
    })
}

/// The last lines of pytest's own output, for error messages.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(25)..];
    if tail.is_empty() {
        return String::new();
    }
    format!("pytest said:\n{}", tail.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tests_a_session_ended_without_running_are_errors_unless_it_was_killed_or_refused() {
        for code in [0, 1, 2, 5, 77] {
            let why = not_run(Some(code)).expect("a session that ended by itself");
            assert!(
                why.starts_with("not run:") && why.contains(&code.to_string()),
                "{why}"
            );
        }
        for status in [None, Some(3), Some(4)] {
            assert_eq!(not_run(status), None, "{status:?}");
        }
    }

    #[test]
    fn a_collection_that_stops_early_is_told_in_pytests_own_words() {
        let tree = Path::new("/s/1/tree");
        let argparse = "ERROR: usage: python -m pytest [options] [file_or_dir] [...]\n\
                        python -m pytest: error: unrecognized arguments: --frobnicate\n  \
                        inifile: /s/1/tree/pytest.ini\n  rootdir: /s/1/tree\n";
        assert_eq!(
            pytest_said(argparse, Some(tree)).as_deref(),
            Some("unrecognized arguments: --frobnicate")
        );
        let usage = "ERROR: no database at /s/1/tree/db.sqlite\n";
        assert_eq!(
            pytest_said(usage, Some(tree)).as_deref(),
            Some("no database at db.sqlite")
        );
        let internal = "INTERNALERROR> Traceback (most recent call last):\n\
                        INTERNALERROR>   File \"/s/1/tree/tests/conftest.py\", line 2, in x\n\
                        INTERNALERROR>     raise RuntimeError(\"boom\")\n\
                        INTERNALERROR> RuntimeError: boom\n";
        assert_eq!(
            pytest_said(internal, None).as_deref(),
            Some("RuntimeError: boom")
        );
        let conftest = "ImportError while loading conftest '/s/1/tree/tests/conftest.py'.\n\
                        tests/conftest.py:1: in <module>\n    raise RuntimeError('x')\n\
                        E   RuntimeError: x\n";
        assert_eq!(
            pytest_said(conftest, None).as_deref(),
            Some("RuntimeError: x")
        );
        assert_eq!(pytest_said("no tests ran in 0.01s\n", None), None);
    }
}
