//! What every command shares: the repository, the output settings, the cache directory and its
//! remote, and the steps that load a snapshot's configuration and manifest. Everything here is
//! resolved settings (`cmd::settings` makes them from the command line): no clap type reaches
//! this module or the engine below it.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::config::{self, Config};
use crate::environment::Environment;
use crate::error::{Error, Result};
pub(crate) use crate::json::to_json;
use crate::manifest::{self, Hashing, Manifest};
use crate::pytest::driver::Runner;
use crate::pytest::{interpreter, plugin};
use crate::report::Format;
use crate::snapshot::{Repo, Snapshot};
use crate::statcache::StatCache;
use crate::store::{RemoteFailure, RemoteSettings};

/// The options every command shares, resolved.
pub(crate) struct Settings {
    pub(crate) repo: Option<PathBuf>,
    pub(crate) format: Format,
    pub(crate) output: Option<PathBuf>,
    pub(crate) cache_dir: Option<PathBuf>,
    pub(crate) quiet: bool,
    pub(crate) python: Option<PathBuf>,
    /// `None`: one per core.
    pub(crate) jobs: Option<usize>,
}

/// How a pytest process is set up.
#[derive(Clone, Debug)]
pub(crate) struct SandboxSettings {
    /// Variables passed into the runs beside the allowlist.
    pub(crate) pass_env: Vec<String>,
    /// A test that runs longer is killed and recorded as timeout.
    pub(crate) test_timeout: Duration,
    /// Leave the network alone instead of giving each run a loopback-only namespace.
    pub(crate) allow_network: bool,
    /// What containment the user accepts (`--containment`).
    pub(crate) containment: crate::contain::Choice,
    /// Paths outside the repository runs may read (`--read-path`), beside the base's
    /// `[tool.fixgate] read-paths`.
    pub(crate) read_paths: Vec<PathBuf>,
    /// The bounds the command line sets.
    pub(crate) limits: crate::limits::LimitArgs,
}

pub(crate) struct Ctx {
    pub(crate) repo: Repo,
    pub(crate) format: Format,
    pub(crate) output: Option<PathBuf>,
    pub(crate) cache_dir: PathBuf,
    pub(crate) quiet: bool,
    pub(crate) python: Option<PathBuf>,
    pub(crate) jobs: usize,
    /// Whether `--jobs` was given (a remote executor has a default of its own).
    pub(crate) jobs_given: bool,
    /// Set by Ctrl-C or SIGTERM; long work checks it, kills its children and cleans up.
    pub(crate) interrupted: Arc<AtomicBool>,
    /// The process environment, read once at start.
    pub(crate) env: Arc<Environment>,
    /// The remote cache behind the local one, when one is configured.
    pub(crate) remote: Option<RemoteSettings>,
    /// Where a store records that a required remote failed.
    pub(crate) remote_failure: RemoteFailure,
    /// How runs are contained on this machine, probed once (by the first runner).
    host: Arc<OnceLock<Arc<crate::contain::Host>>>,
    /// How this process's runs were made (forked or fresh), over every runner it makes.
    pub(crate) fork_stats: Arc<crate::pytest::forkserver::ForkStats>,
    /// The warnings [`Ctx::warn_once`] printed.
    warned: Arc<Mutex<Vec<String>>>,
    /// With `--containment none`: the cache of this process alone, removed when it ends.
    private_cache: Option<Arc<tempfile::TempDir>>,
}

impl Ctx {
    pub(crate) fn new(args: &Settings, env: Environment) -> Result<Ctx> {
        let ctx = Ctx::open(args, Arc::new(env))?;
        for w in &ctx.env.warnings {
            ctx.warn(w);
        }
        // Every command, not only those that run tests: sandboxes (and, without namespaces,
        // processes) of a fixgate that was killed go at the next start of any command.
        let removed = crate::sandbox::remove_stale(&ctx.env.temp_dir);
        if removed > 0 {
            ctx.warn(&format!(
                "removed {removed} sandbox(es) left by a fixgate that was killed"
            ));
        }
        Ok(ctx)
    }

    fn open(args: &Settings, env: Arc<Environment>) -> Result<Ctx> {
        Ok(Ctx {
            repo: Repo::open(args.repo.as_deref(), env.cwd.as_deref())?,
            format: args.format,
            output: args.output.clone(),
            cache_dir: absolute(
                resolve_cache_dir(args.cache_dir.as_deref(), &env),
                env.cwd.as_deref(),
            ),
            quiet: args.quiet,
            python: args.python.clone(),
            jobs: match args.jobs {
                Some(0) => return Err(Error::Usage("--jobs must be at least 1".into())),
                Some(n) => n,
                None => std::thread::available_parallelism().map_or(1, |n| n.get()),
            },
            jobs_given: args.jobs.is_some(),
            interrupted: interrupt_flag()?,
            env,
            remote: None,
            remote_failure: RemoteFailure::default(),
            host: Arc::default(),
            fork_stats: Arc::default(),
            warned: Arc::default(),
            private_cache: None,
        })
    }

    /// Uses a cache of this process's own, removed when it ends, and no remote cache: for
    /// audits whose runs are not contained, which could forge what later audits read.
    pub(crate) fn isolate_cache(&mut self) -> Result<()> {
        let dir = tempfile::Builder::new()
            .prefix("fixgate-private-cache-")
            .tempdir_in(&self.env.temp_dir)
            .map_err(|e| Error::io("create a private cache in", &self.env.temp_dir, e))?;
        self.cache_dir = dir.path().to_path_buf();
        self.private_cache = Some(Arc::new(dir));
        self.remote = None;
        Ok(())
    }

    /// How runs are contained on this machine, probed once per process (with the first
    /// command's choice; a process makes one command's runs).
    pub(crate) fn host(&self, choice: crate::contain::Choice) -> Arc<crate::contain::Host> {
        self.host
            .get_or_init(|| Arc::new(crate::contain::Host::probe(&self.env, choice)))
            .clone()
    }

    /// This context on another repository, with another interpreter (the demo's): everything
    /// else, the cache and what was probed and counted included, shared.
    pub(crate) fn on(&self, repo: Repo, python: PathBuf) -> Ctx {
        Ctx {
            repo,
            format: self.format,
            output: self.output.clone(),
            cache_dir: self.cache_dir.clone(),
            quiet: self.quiet,
            python: Some(python),
            jobs: self.jobs,
            jobs_given: self.jobs_given,
            interrupted: self.interrupted.clone(),
            env: self.env.clone(),
            remote: self.remote.clone(),
            remote_failure: self.remote_failure.clone(),
            host: self.host.clone(),
            fork_stats: self.fork_stats.clone(),
            warned: self.warned.clone(),
            private_cache: self.private_cache.clone(),
        }
    }

    /// The store for the cache directory, with `remote` behind it (the remote cache, else a
    /// remote executor's ActionCache; see [`crate::store::open`]). A remote without a
    /// signing key is said once.
    pub(crate) fn open_store(
        &self,
        enabled: bool,
        remote: Option<&RemoteSettings>,
    ) -> (Arc<dyn fixgate_cache::Store>, Option<String>) {
        if let Some(why) = remote
            .filter(|_| enabled)
            .and_then(crate::store::unauthenticated)
        {
            self.warn_once(&why);
        }
        crate::store::open(&self.cache_dir, enabled, remote, &self.remote_failure)
    }

    /// Whether results go to the remote cache (`--remote-upload` with a remote).
    pub(crate) fn uploads(&self) -> bool {
        self.remote.as_ref().is_some_and(|r| r.config.upload)
    }

    /// Starts fingerprinting the interpreter [`Ctx::runner`] will use, on another thread.
    pub(crate) fn prefetch_interpreter(&self) {
        let path = interpreter::choose(self.python.as_deref(), &self.repo.root, &self.env);
        interpreter::prefetch(path, self.cache_dir.clone(), self.env.clone());
    }

    /// Everything a pytest run needs: the interpreter (fingerprinted once), the plugin on disk,
    /// the environment policy, the containment (settled once per process).
    /// `limits` is the `[tool.fixgate.limits]` of the configuration that governs the runs: the
    /// base's for an audit (a patch does not raise its own bounds).
    pub(crate) fn runner(
        &self,
        args: &SandboxSettings,
        limits: &crate::config::LimitsConfig,
    ) -> Result<Runner> {
        let host = self.host(args.containment);
        if let Some(why) = host.check()? {
            self.warn_once(&why);
        }
        let path = interpreter::choose(self.python.as_deref(), &self.repo.root, &self.env);
        let interpreter = interpreter::probe_cached(&path, &self.cache_dir, &self.env)?;
        // One folder per interpreter and installed set: a plugin that changes rewriting comes
        // with a distribution, and a new one starts a new folder.
        let fingerprint = interpreter.fingerprint.digest();
        let executable = PathBuf::from(&interpreter.fingerprint.executable);
        let rewrites = crate::pytest::rewrites::Rewrites::new(
            self.cache_dir.join(REWRITE_CACHE).join(&fingerprint[..16]),
            executable.clone(),
            self.env.temp_dir.clone(),
            self.jobs,
        );
        let plugin = plugin::install(
            &self.cache_dir,
            &self.env.temp_dir,
            &executable,
            &fingerprint,
        )?;
        let mut read_paths = limits.read_paths.clone();
        read_paths.extend(args.read_paths.iter().cloned());
        let limits = crate::limits::Limits::resolve(
            &args.limits,
            limits,
            self.jobs,
            &crate::sandbox::sandboxes_root(&self.env.temp_dir, host.sandboxes_in_ram()),
        );
        crate::limits::check(&limits)?;
        Ok(Runner {
            interpreter,
            plugin: Arc::new(plugin),
            rewrites: Arc::new(rewrites),
            cache_dir: self.cache_dir.clone(),
            limits,
            pass_env: args.pass_env.clone(),
            test_timeout: args.test_timeout,
            origin_root: self.repo.root.clone(),
            interrupted: self.interrupted.clone(),
            allow_network: args.allow_network,
            read_paths: Arc::new(read_paths),
            forkserver: Arc::new(crate::pytest::forkserver::Pool::new(
                self.jobs,
                (!self.env.fork).then(|| "FIXGATE_FORK=0".to_owned()),
                self.fork_stats.clone(),
            )),
            host,
            env: self.env.clone(),
        })
    }

    /// A progress bar on standard error, or none with `--quiet` (indicatif hides it by itself
    /// when standard error is not a terminal).
    pub(crate) fn progress(&self, len: u64, prefix: &str) -> Option<ProgressBar> {
        if self.quiet {
            return None;
        }
        let pb = ProgressBar::new(len);
        pb.set_style(
            ProgressStyle::with_template(
                "{prefix:>10} [{bar:25}] {pos}/{len} {elapsed} {wide_msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        pb.set_prefix(prefix.to_owned());
        Some(pb)
    }

    /// A warning printed once per fixgate process, however often it comes up.
    pub(crate) fn warn_once(&self, message: &str) {
        let mut seen = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.iter().any(|m| m == message) {
            seen.push(message.to_owned());
            self.warn(message);
        }
    }

    pub(crate) fn warn(&self, message: &str) {
        if !self.quiet {
            stderr_line(&format!("fixgate: warning: {message}"));
        }
    }

    /// Writes a report to `--output` or standard output. A closed pipe (`fixgate ... | head`)
    /// is not an error.
    pub(crate) fn emit(&self, text: &str) -> Result<()> {
        match &self.output {
            Some(path) => std::fs::write(path, text).map_err(|e| Error::io("write", path, e)),
            None => {
                let mut out = std::io::stdout().lock();
                match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                    Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                        Err(Error::io("write", "standard output", e))
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    /// Emits `value` as sorted, pretty JSON, or `human` rendered by the caller.
    pub(crate) fn emit_report<T: Serialize>(
        &self,
        value: &T,
        human: impl FnOnce() -> String,
    ) -> Result<()> {
        match self.format {
            Format::Json => self.emit(&to_json(value)),
            Format::Human => self.emit(&human()),
            f => Err(Error::Usage(format!(
                "--format {} is only for `fixgate audit`; use human or json here",
                format!("{f:?}").to_lowercase()
            ))),
        }
    }

    /// The fixture groups both sides are read with. A patch must not be able to hide a change by
    /// redefining the groups, so the base's explicit groups win; default groups are derived from
    /// both sides' paths, so a new fixture directory in the head is still seen.
    pub(crate) fn pair_config(&self, base: &Snapshot, head: &Snapshot) -> Result<Config> {
        let base_config = self.config(base)?;
        let head_config = self.config(head)?;
        if base_config.groups.source() != crate::config::ConfigSource::Default {
            if head_config
                .groups
                .groups()
                .iter()
                .map(|g| (&g.name, &g.globs))
                .ne(base_config
                    .groups
                    .groups()
                    .iter()
                    .map(|g| (&g.name, &g.globs)))
            {
                self.warn(
                    "the head redefines the fixture groups; the delta uses the base's groups",
                );
            }
            return Ok(base_config);
        }
        if head_config.groups.source() != crate::config::ConfigSource::Default {
            return Ok(head_config);
        }
        let mut paths = base.paths();
        paths.extend(head.paths());
        paths.sort();
        paths.dedup();
        Ok(crate::config::load(&crate::config::ConfigInputs {
            manifest_file: None,
            pyproject: None,
            paths: &paths,
        })?)
    }

    /// The configuration of a snapshot, with its warnings printed.
    pub(crate) fn config(&self, snapshot: &Snapshot) -> Result<Config> {
        let manifest_file = snapshot.read_path("fixtures.manifest")?;
        let pyproject = snapshot.read_path("pyproject.toml")?;
        let paths = snapshot.paths();
        let config = config::load(&config::ConfigInputs {
            manifest_file: manifest_file.as_deref(),
            pyproject: pyproject.as_deref(),
            paths: &paths,
        })?;
        for w in &config.warnings {
            self.warn(w);
        }
        Ok(config)
    }

    /// The manifest of a snapshot; the working tree's reuses the stat cache.
    pub(crate) fn manifest(&self, snapshot: &Snapshot, config: &Config) -> Result<Manifest> {
        if snapshot.commit().is_some() {
            return manifest::build(snapshot, &config.groups, Hashing { stat_cache: None });
        }
        let mut cache = StatCache::load(&self.cache_dir, &snapshot.root);
        let m = manifest::build(
            snapshot,
            &config.groups,
            Hashing {
                stat_cache: Some(&mut cache),
            },
        )?;
        if let Err(e) = cache.save() {
            self.warn(&format!(
                "failed to save the stat cache under {}: {e}; the next manifest will rehash",
                self.cache_dir.display()
            ));
        }
        Ok(m)
    }
}

/// Writes one line to standard error. Standard error is for people: when it is closed
/// (`fixgate ... 2>&1 >report.json | head -1`) the line is dropped, and the report and the exit
/// code are unaffected (`eprintln!` would panic and exit 101).
pub(crate) fn stderr_line(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(text.as_bytes())
        .and_then(|()| err.write_all(b"\n"))
        .and_then(|()| err.flush());
}

/// The folder of the cache directory that holds pytest's rewritten test modules.
pub(crate) const REWRITE_CACHE: &str = "pyc";

/// The cache directory is handed to pytest processes that run elsewhere (in sandboxes), so a
/// relative one is made absolute against the directory fixgate started in.
fn absolute(dir: PathBuf, cwd: Option<&Path>) -> PathBuf {
    match cwd {
        Some(cwd) if dir.is_relative() => cwd.join(dir),
        _ => dir,
    }
}

/// `--cache-dir`, else `$FIXGATE_CACHE_DIR`, else `$XDG_CACHE_HOME/fixgate`, else
/// `~/.cache/fixgate`, else a folder in the system temporary directory.
fn resolve_cache_dir(flag: Option<&Path>, env: &Environment) -> PathBuf {
    if let Some(dir) = flag {
        return dir.to_path_buf();
    }
    if let Some(dir) = &env.cache_dir {
        return dir.clone();
    }
    if let Some(dir) = &env.xdg_cache_home {
        return dir.join("fixgate");
    }
    if let Some(home) = &env.home {
        return home.join(".cache").join("fixgate");
    }
    env.temp_dir.join("fixgate-cache")
}

/// Ctrl-C and SIGTERM set a flag instead of killing fixgate at once, so that running children are
/// killed and sandboxes removed on the way out.
fn interrupt_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| Error::Infra(format!("failed to install a signal handler: {e}")))?;
    }
    Ok(flag)
}

impl Ctx {
    /// Where the last audit of this repository keeps its graph.
    pub(crate) fn last_audit_dir(&self) -> PathBuf {
        use std::os::unix::ffi::OsStrExt;
        let scope = blake3::hash(self.repo.root.as_os_str().as_bytes()).to_hex();
        self.cache_dir.join("last-audit").join(&scope[..32])
    }

    /// Keeps the audit's graph for `fixgate graph` and `fixgate explain`.
    pub(crate) fn save_graph(&self, report: &crate::report::AuditReport) {
        if report.graph_dot.is_empty() {
            return;
        }
        let dir = self.last_audit_dir();
        let written = std::fs::create_dir_all(&dir)
            .and_then(|_| std::fs::write(dir.join("graph.json"), to_json(&report.graph)))
            .and_then(|_| std::fs::write(dir.join("graph.dot"), &report.graph_dot));
        if let Err(e) = written {
            self.warn(&format!(
                "failed to keep the audit's graph under {}: {e}; `fixgate graph` and `fixgate explain` will not see it",
                dir.display()
            ));
        }
    }
}

/// Today in UTC.
pub(crate) fn today() -> crate::audit::freeze::Date {
    let now = jiff::tz::TimeZone::UTC.to_datetime(jiff::Timestamp::now());
    crate::audit::freeze::Date::from_civil(now.date())
}
