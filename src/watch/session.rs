//! One `fixgate watch` session: audit, wait for a change, audit again; cancel an audit that a
//! change overtakes and start again with the latest bytes; on Ctrl-C or SIGTERM stop the
//! running audit, kill the warm interpreters and return. The design (why audits run in this
//! process, what is kept between them) is in `crate::watch`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cli::AuditOptionArgs;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::pytest::driver::Runner;
use crate::pytest::interpreter;
use crate::report::AuditReport;
use crate::repo_path::RepoPath;
use crate::watch::debounce::Debounce;
use crate::watch::gate::Gate;
use crate::watch::inotify::FsEvent;
use crate::watch::screen::{Screen, Shown};
use crate::watch::tree::{Changes, Tree};

/// What `fixgate watch` was asked for.
pub(crate) struct Settings {
    pub(crate) base: String,
    pub(crate) options: AuditOptionArgs,
    pub(crate) debounce: Duration,
}

/// How often the loop looks at the signal flag and the running audit when no event comes.
const TICK: Duration = Duration::from_millis(200);

/// The longest a stream of changes holds the next audit back.
const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// The warm runner kept between audits, and what it is valid for.
struct Warm {
    runner: Arc<Runner>,
    /// The interpreter's fingerprint digest: another interpreter, another runner.
    interpreter: String,
}

/// An audit running on its own thread, with the context it took.
struct Running {
    audit: u64,
    changed: Vec<String>,
    /// The tree the audit started from: a change that leaves it different cancels the audit.
    digest: blake3::Hash,
    cancel: Arc<AtomicBool>,
    /// What the audit was cancelled for.
    cancelled_by: Option<Vec<String>>,
    first_change: Option<Instant>,
    thread: JoinHandle<(Ctx, Result<AuditReport>)>,
}

struct Session {
    settings: Settings,
    screen: Screen,
    tree: Tree,
    /// The context, while no audit holds it.
    ctx: Option<Ctx>,
    signal: Arc<AtomicBool>,
    warm: Option<Warm>,
    gate: Option<Gate>,
    running: Option<Running>,
    debounce: Debounce,
    /// Changed paths since the last audit started.
    pending: BTreeSet<RepoPath>,
    /// When the first of them changed.
    first_change: Option<Instant>,
    /// An audit is owed: the first one, or one after a cancelled audit or a change.
    owed: bool,
    /// The next audit starts with new warm interpreters (configuration changed).
    restart_collection: bool,
    /// The gate must be loaded again (configuration or the set of paths changed).
    reload_gate: bool,
    /// The tree the last completed audit saw.
    audited: Option<blake3::Hash>,
    audits: u64,
    previous: Option<AuditReport>,
}

/// Runs the session until Ctrl-C or SIGTERM.
pub(crate) fn run(ctx: Ctx, settings: Settings) -> Result<i32> {
    if ctx.output.is_some() {
        return Err(Error::Usage(
            "--output is not for `fixgate watch`, which writes a report per audit; redirect \
             standard output instead (with --format json, one JSON line per event)"
                .into(),
        ));
    }
    let screen = Screen::new(ctx.format, ctx.env.no_color)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let tree = Tree::open(
        ctx.repo.root.clone(),
        own_folders(&ctx),
        ctx.cache_dir.clone(),
        tx,
    )?;
    if !ctx.quiet {
        crate::context::stderr_line(&format!(
            "fixgate watch: watching {} directories of {} ({} files); Ctrl-C to stop",
            tree.watched(),
            ctx.repo.root.display(),
            tree.hashes().len()
        ));
    }
    let mut session = Session {
        debounce: Debounce::new(settings.debounce, LONGEST_WAIT.max(settings.debounce)),
        settings,
        screen,
        tree,
        signal: ctx.interrupted.clone(),
        ctx: Some(ctx),
        warm: None,
        gate: None,
        running: None,
        pending: BTreeSet::new(),
        first_change: None,
        owed: true,
        restart_collection: false,
        reload_gate: true,
        audited: None,
        audits: 0,
        previous: None,
    };
    let outcome = session.run(&rx);
    session.shut_down();
    outcome.map(|()| crate::exit::PASS)
}

/// Folders fixgate itself writes, which must never trigger an audit.
fn own_folders(ctx: &Ctx) -> Vec<PathBuf> {
    [&ctx.cache_dir, &ctx.env.temp_dir]
        .into_iter()
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .collect()
}

impl Session {
    fn run(&mut self, events: &Receiver<FsEvent>) -> Result<()> {
        loop {
            if self.signal.load(Ordering::SeqCst) {
                return Ok(());
            }
            if self.running.as_ref().is_some_and(|r| r.thread.is_finished()) {
                self.finish()?;
            }
            let now = Instant::now();
            let fired = self.debounce.fire(now);
            if self.running.is_none() && self.owed && (fired || self.debounce.remaining(now).is_none())
            {
                self.start()?;
            }
            let wait = self
                .debounce
                .remaining(Instant::now())
                .map_or(TICK, |d| d.min(TICK));
            match events.recv_timeout(wait) {
                Ok(event) => {
                    self.event(event)?;
                    while let Ok(event) = events.try_recv() {
                        self.event(event)?;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::Infra(
                        "the file watcher stopped; start `fixgate watch` again".into(),
                    ))
                }
            }
        }
    }

    /// One file event: the paths it changed join the next audit, and cancel the running one
    /// when the tree now differs from what it started with.
    fn event(&mut self, event: FsEvent) -> Result<()> {
        let Changes {
            paths,
            paths_changed,
        } = self.tree.apply(event)?;
        if paths.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        self.debounce.touch(now);
        self.first_change.get_or_insert(now);
        self.reload_gate |= paths_changed || paths.iter().any(is_configuration);
        self.restart_collection |= paths.iter().any(is_configuration);
        self.pending.extend(paths);
        let digest = self.tree.hashes().digest();
        // Back to the bytes the running (or last) audit saw: nothing more to do.
        let reference = self.running.as_ref().map(|r| r.digest).or(self.audited);
        self.owed |= reference != Some(digest);
        if let Some(r) = &mut self.running {
            if r.digest != digest && r.cancelled_by.is_none() {
                r.cancel.store(true, Ordering::SeqCst);
                r.cancelled_by = Some(shown_paths(&self.pending));
            }
        }
        Ok(())
    }

    /// Starts the next audit on its own thread.
    fn start(&mut self) -> Result<()> {
        let Some(ctx) = self.ctx.take() else {
            return Err(Error::Infra("bug: an audit started while one runs".into()));
        };
        self.owed = false;
        self.audits += 1;
        let audit = self.audits;
        let changed = shown_paths(&self.pending);
        self.pending.clear();
        let first_change = self.first_change.take();
        let digest = self.tree.hashes().digest();
        let cancel = Arc::new(AtomicBool::new(false));
        let prepared = self.prepare(&ctx, &changed, audit, cancel.clone());
        let opts = match prepared {
            Ok(opts) => opts,
            Err(e) => {
                self.ctx = Some(ctx);
                self.audited = Some(digest);
                return self.screen.show(&Shown::Failed {
                    audit,
                    message: &e.to_string(),
                });
            }
        };
        let thread = std::thread::Builder::new()
            .name(format!("fixgate-watch-audit-{audit}"))
            .spawn(move || {
                let result = crate::engine::audit::audit(&ctx, &opts);
                (ctx, result)
            })
            .map_err(|e| Error::Infra(format!("failed to start the audit's thread: {e}")))?;
        self.running = Some(Running {
            audit,
            changed,
            digest,
            cancel,
            cancelled_by: None,
            first_change,
            thread,
        });
        Ok(())
    }

    /// The lock check from memory, the warm runner, the audit's options.
    fn prepare(
        &mut self,
        ctx: &Ctx,
        changed: &[String],
        audit: u64,
        cancel: Arc<AtomicBool>,
    ) -> Result<crate::engine::audit::Options> {
        let base = ctx.repo.resolve(&self.settings.base)?;
        if self.reload_gate || !self.gate.as_ref().is_some_and(|g| g.is_for(base)) {
            self.gate = Some(Gate::load(ctx, &self.settings.base)?);
            self.reload_gate = false;
        }
        let checked = Instant::now();
        let drift = self
            .gate
            .as_ref()
            .map(|g| g.check(self.tree.hashes()))
            .unwrap_or_default();
        let microseconds = checked.elapsed().as_micros();
        self.screen.show(&Shown::Started {
            audit,
            changed,
            drift: &drift,
            microseconds,
        })?;
        let runner = self.runner(ctx)?;
        let mut opts =
            crate::cmd::audit::options(&self.settings.base, &self.settings.options, None, None)?;
        let mut own = (*runner).clone();
        own.interrupted = cancel;
        opts.runner = Some(Arc::new(own));
        Ok(opts)
    }

    /// The warm runner: kept while the interpreter is the same and no configuration changed
    /// (then its zygotes collected from inputs that no longer hold: they go, and collection
    /// starts again).
    fn runner(&mut self, ctx: &Ctx) -> Result<Arc<Runner>> {
        let path = interpreter::choose(ctx.python.as_deref(), &ctx.repo.root, &ctx.env);
        let fingerprint = interpreter::probe_cached(&path, &ctx.cache_dir, &ctx.env)?
            .fingerprint
            .digest();
        let keep = !self.restart_collection
            && self
                .warm
                .as_ref()
                .is_some_and(|w| w.interpreter == fingerprint);
        if !keep {
            // The old zygotes die here (the pool kills and reaps them when dropped).
            self.warm = None;
            self.warm = Some(Warm {
                runner: Arc::new(ctx.runner(&self.settings.options.sandbox)?),
                interpreter: fingerprint,
            });
            self.restart_collection = false;
        }
        Ok(self.warm.as_ref().map(|w| w.runner.clone()).expect("set above"))
    }

    /// Takes the finished audit's outcome and shows it.
    fn finish(&mut self) -> Result<()> {
        let Some(r) = self.running.take() else {
            return Ok(());
        };
        let (ctx, result) = r
            .thread
            .join()
            .map_err(|_| Error::Infra("bug: the audit's thread panicked".into()))?;
        let shown = match (&r.cancelled_by, result) {
            // Cancelled, or finished before it noticed: either way the tree moved on.
            (Some(changed), _) => {
                self.owed = true;
                self.screen.show(&Shown::Cancelled {
                    audit: r.audit,
                    changed,
                })
            }
            (None, Err(Error::Interrupted)) => Ok(()),
            (None, Err(e)) => {
                self.audited = Some(r.digest);
                self.screen.show(&Shown::Failed {
                    audit: r.audit,
                    message: &e.to_string(),
                })
            }
            (None, Ok(report)) => {
                self.audited = Some(r.digest);
                for w in &report.warnings {
                    ctx.warn_once(w);
                }
                crate::cmd::audit::save_graph(&ctx, &report);
                let shown = self.screen.show(&Shown::Report {
                    audit: r.audit,
                    changed: &r.changed,
                    report: &report,
                    previous: self.previous.as_ref(),
                    seconds_since_change: r.first_change.map(|t| t.elapsed().as_secs_f64()),
                    watched: self.tree.watched(),
                });
                self.previous = Some(report);
                shown
            }
        };
        self.ctx = Some(ctx);
        shown
    }

    /// Stops the running audit (its processes killed and waited for) and the warm
    /// interpreters.
    fn shut_down(&mut self) {
        if let Some(r) = &self.running {
            r.cancel.store(true, Ordering::SeqCst);
        }
        if let Some(r) = self.running.take() {
            if let Ok((ctx, _)) = r.thread.join() {
                self.ctx = Some(ctx);
            }
        }
        self.warm = None;
        if let Some(ctx) = &self.ctx {
            if !ctx.quiet {
                crate::context::stderr_line("fixgate watch: stopped");
            }
        }
    }
}

/// Files whose change changes how the suite is collected or configured: the warm
/// interpreters collected under the old ones.
fn is_configuration(path: &RepoPath) -> bool {
    let name = path.file_name();
    let at_root = !path.as_bytes().contains(&b'/');
    name == b"conftest.py"
        || (at_root
            && [
                &b"pyproject.toml"[..],
                b"pytest.ini",
                b"setup.cfg",
                b"tox.ini",
                b"fixtures.manifest",
            ]
            .contains(&name))
}

fn shown_paths(paths: &BTreeSet<RepoPath>) -> Vec<String> {
    paths.iter().map(RepoPath::display_lossless).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_files_restart_collection_and_others_do_not() {
        for p in [
            "pyproject.toml",
            "pytest.ini",
            "tox.ini",
            "setup.cfg",
            "fixtures.manifest",
            "conftest.py",
            "tests/unit/conftest.py",
        ] {
            assert!(is_configuration(&RepoPath::from(p)), "{p}");
        }
        for p in [
            "tests/test_a.py",
            "src/pyproject.toml",
            "tests/fixtures/rates.json",
        ] {
            assert!(!is_configuration(&RepoPath::from(p)), "{p}");
        }
    }
}
