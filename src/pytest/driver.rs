//! The runner: what every run of one fixgate invocation shares (the interpreter, the plugin, the
//! bounds, the warm interpreters), and how it starts a pytest process: the command, the
//! environment, a fresh process in a sandbox or a warm interpreter's launch. Collecting is in
//! `collect.rs`, running an order in `run.rs`, following a process to its end in `follow.rs`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::pytest::command::PreparedCommand;
use crate::pytest::exit_watch::ExitWatch;
use crate::pytest::follow::{Proc, Process};
use crate::pytest::forkserver::Pool;
use crate::pytest::interpreter::Interpreter;
use crate::pytest::zygote::{Launch, Purpose};
use crate::pytest::zygote_key::Carried;
use crate::sandbox::{Overlay, Sandbox};
use crate::snapshot::Snapshot;

/// What a run records, which the runner's callers name with it.
pub(crate) use crate::pytest::record::Record;
/// A file that did not collect, as the runner's collections report it.
pub(crate) use crate::pytest::said::CollectFailure;

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
    /// [`Collection::unitemized`](crate::pytest::events::Collection::unitemized)); a fresh process makes every item.
    Warm {
        record_code: bool,
        spare: bool,
        carried: Arc<Carried>,
    },
}

/// Where a run's environment points: its import path, home, temporary directory and the
/// rewrite cache (host paths for a local run, input-root-relative ones for a remote run).
pub(crate) struct RunEnvPaths {
    pub(crate) pythonpath: OsString,
    pub(crate) home: OsString,
    pub(crate) tmp: OsString,
}

impl Runner {
    /// The command of a pytest process in `sandbox` with pytest's `args`: the interpreter, the
    /// environment (the allowlist, then the sandbox's own settings) and what containment needs.
    pub(super) fn prepare(&self, sandbox: &Sandbox, args: &[String]) -> PreparedCommand {
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
    pub(crate) fn check_interrupted(&self) -> Result<()> {
        match self.interrupted.load(Ordering::SeqCst) {
            true => Err(Error::Interrupted),
            false => Ok(()),
        }
    }

    /// A fresh pytest process in `sandbox`, the `k`th of its run, with fixgate's arguments and
    /// `extra`: its events and its output go beside the tree.
    pub(crate) fn spawn(
        &self,
        sandbox: &Sandbox,
        k: u32,
        extra: &[String],
    ) -> Result<Process<'static>> {
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

    /// `f` with what starting a warm interpreter of this runner takes.
    pub(crate) fn with_launch<R>(
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
}

/// Whether the tree keeps its code in `src/` (a package or a module directly in it): then that
/// is on the import path too.
fn is_src_layout(tree: &Path) -> bool {
    let src = tree.join("src");
    std::fs::read_dir(&src).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            let p = e.path();
            p.join("__init__.py").exists() || p.extension().is_some_and(|x| x == "py")
        })
    })
}
