//! One `fixgate watch` session: audit, wait for a change, audit again; cancel an audit that a
//! change overtakes and start again with the latest bytes; on Ctrl-C or SIGTERM stop the
//! running audit, kill the warm interpreters and return. The design (why audits run in this
//! process, what is kept between them) is in `crate::watch`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use git2::Oid;

use crate::audit::freeze::Date;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::fsmonitor::TreeHashes;
use crate::pytest::driver::Runner;
use crate::pytest::forkserver::ForkSummary;
use crate::pytest::interpreter;
use crate::repo_path::RepoPath;
use crate::report::AuditReport;
use crate::watch::debounce::Debounce;
use crate::watch::gate::Gate;
use crate::watch::inotify::FsEvent;
use crate::watch::screen::{Screen, Shown};
use crate::watch::tree::{Changes, Tree};

/// What `fixgate watch` was asked for, resolved by `cmd::watch`.
pub(crate) struct Settings {
    pub(crate) base: String,
    /// Every audit's options (its base and head, runner and frozen tree set per audit).
    pub(crate) options: crate::engine::audit::Options,
    /// The date freeze entries are judged against; `None`: the day each audit starts (a
    /// session can outlive a day).
    pub(crate) today: Option<Date>,
    pub(crate) debounce: Duration,
}

/// What wakes the session.
pub(crate) enum Wake {
    /// A file event.
    Fs(FsEvent),
    /// The running audit's thread has returned.
    Finished,
}

/// How often the loop looks at the signal flag when nothing else wakes it.
const TICK: Duration = Duration::from_millis(200);

/// How often, while idle, the base revision is resolved again: a commit or a checkout moves
/// it without touching a watched file (`.git` is not watched).
const BASE_POLL: Duration = Duration::from_secs(1);

/// The longest a stream of changes holds the next audit back.
const LONGEST_WAIT: Duration = Duration::from_secs(2);

/// The warm runner kept between audits, and what it is valid for.
struct Warm {
    runner: Arc<Runner>,
    /// The interpreter's fingerprint digest: another interpreter, another runner.
    interpreter: String,
    /// The base's run limits it was made with.
    limits: crate::config::LimitsConfig,
}

/// What an audit ran on: the frozen tree's digest and the base commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Inputs {
    tree: blake3::Hash,
    /// `None`: the base did not resolve (the audit failed before it began).
    base: Option<Oid>,
}

/// An audit running on its own thread, with the context it took.
struct Running {
    audit: u64,
    changed: Vec<String>,
    inputs: Inputs,
    cancel: Arc<AtomicBool>,
    /// What the audit was cancelled for.
    cancelled_by: Option<Vec<String>>,
    first_change: Option<Instant>,
    /// The process's fork counts when the audit started: a report counts its own.
    forks_before: ForkSummary,
    thread: JoinHandle<(Ctx, Result<AuditReport>)>,
}

struct Session {
    settings: Settings,
    screen: Screen,
    tree: Tree,
    /// The context, while no audit holds it.
    ctx: Option<Ctx>,
    signal: Arc<AtomicBool>,
    wake: Sender<Wake>,
    warm: Option<Warm>,
    gate: Option<Gate>,
    running: Option<Running>,
    debounce: Debounce,
    /// The tree as the last audit started with it: what a save changed is told against it.
    frozen: Option<TreeHashes>,
    /// When the first change since the last audit started came.
    first_change: Option<Instant>,
    /// An audit is owed: the first one, or one after a cancelled audit or a change.
    owed: bool,
    /// The gate must be loaded again (configuration or the set of paths changed).
    reload_gate: bool,
    /// What the last audit that was not cancelled ran on.
    audited: Option<Inputs>,
    base_checked: Instant,
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
    // The base is a revision: a folder that is not a git repository has none, and a typo is
    // better told now than after every save.
    ctx.repo.resolve(&settings.base)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let events = tx.clone();
    // The copy lives beside the sandboxes: in RAM only where the runs' containment allows.
    let ram = ctx
        .host(settings.options.sandbox.containment)
        .sandboxes_in_ram();
    let tree = Tree::open(
        ctx.repo.root.clone(),
        own_folders(&ctx),
        ctx.cache_dir.clone(),
        (&ctx.env.temp_dir, ram),
        move |e| {
            let _ = events.send(Wake::Fs(e));
        },
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
        wake: tx,
        warm: None,
        gate: None,
        running: None,
        frozen: None,
        first_change: None,
        owed: true,
        reload_gate: true,
        audited: None,
        base_checked: Instant::now(),
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
    fn run(&mut self, wake: &Receiver<Wake>) -> Result<()> {
        loop {
            if self.signal.load(Ordering::SeqCst) {
                return Ok(());
            }
            if self
                .running
                .as_ref()
                .is_some_and(|r| r.thread.is_finished())
            {
                self.finish()?;
            }
            if self.running.is_none() && !self.owed {
                self.poll_base();
            }
            let now = Instant::now();
            let fired = self.debounce.fire(now);
            let quiet = self.debounce.remaining(now).is_none();
            if self.running.is_none() && self.owed && (fired || quiet) {
                self.start()?;
            }
            let wait = self
                .debounce
                .remaining(Instant::now())
                .map_or(TICK, |d| d.min(TICK));
            match wake.recv_timeout(wait) {
                Ok(first) => {
                    self.wake(first)?;
                    while let Ok(more) = wake.try_recv() {
                        self.wake(more)?;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::bug(
                        "the watcher's channel closed while the session runs",
                    ))
                }
            }
        }
    }

    fn wake(&mut self, wake: Wake) -> Result<()> {
        match wake {
            Wake::Fs(event) => self.event(event),
            // Taken at the top of the loop.
            Wake::Finished => Ok(()),
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
        let tree = self.tree.hashes().digest();
        // Back to the bytes the running (or last) audit saw: nothing more to do.
        let reference = self.running.as_ref().map(|r| r.inputs).or(self.audited);
        self.owed |= reference.is_none_or(|r| r.tree != tree);
        let overtaken = self
            .running
            .as_ref()
            .is_some_and(|r| r.inputs.tree != tree && r.cancelled_by.is_none());
        if overtaken {
            let changed = self.changed();
            if let Some(r) = &mut self.running {
                r.cancel.store(true, Ordering::SeqCst);
                r.cancelled_by = Some(changed);
            }
        }
        Ok(())
    }

    /// While idle: an audit is owed when the base revision now names another commit.
    fn poll_base(&mut self) {
        if self.base_checked.elapsed() < BASE_POLL {
            return;
        }
        self.base_checked = Instant::now();
        let (Some(ctx), Some(audited)) = (&self.ctx, self.audited) else {
            return;
        };
        if ctx
            .repo
            .resolve(&self.settings.base)
            .is_ok_and(|b| Some(b) != audited.base)
        {
            self.owed = true;
            self.reload_gate = true;
        }
    }

    /// Freezes the tree and starts the next audit on its own thread.
    fn start(&mut self) -> Result<()> {
        let Some(ctx) = self.ctx.take() else {
            return Err(Error::bug("an audit started while one runs"));
        };
        self.owed = false;
        self.audits += 1;
        let audit = self.audits;
        let first_change = self.first_change.take();
        let cancel = Arc::new(AtomicBool::new(false));
        let (opts, inputs, changed) = match self.prepare(&ctx, audit, cancel.clone()) {
            Ok(prepared) => prepared,
            Err(e) => {
                let tree = self.tree.hashes().digest();
                let base = ctx.repo.resolve(&self.settings.base).ok();
                self.ctx = Some(ctx);
                self.audited = Some(Inputs { tree, base });
                return self.screen.show(&Shown::Failed {
                    audit,
                    message: &e.to_string(),
                });
            }
        };
        let wake = self.wake.clone();
        let forks_before = ctx.fork_stats.summary();
        let thread = std::thread::Builder::new()
            .name(format!("fixgate-watch-audit-{audit}"))
            .spawn(move || {
                let result = crate::engine::audit::audit(&ctx, &opts);
                let _ = wake.send(Wake::Finished);
                (ctx, result)
            })
            .map_err(|e| Error::Infra(format!("failed to start the audit's thread: {e}")))?;
        self.running = Some(Running {
            audit,
            changed,
            inputs,
            cancel,
            cancelled_by: None,
            first_change,
            forks_before,
            thread,
        });
        Ok(())
    }

    /// The frozen tree, the lock check from memory, the warm runner, the audit's options, and
    /// the paths changed since the last audit started.
    fn prepare(
        &mut self,
        ctx: &Ctx,
        audit: u64,
        cancel: Arc<AtomicBool>,
    ) -> Result<(crate::engine::audit::Options, Inputs, Vec<String>)> {
        let head = Arc::new(self.tree.freeze()?);
        let changed = self.changed();
        self.frozen = Some(self.tree.hashes().clone());
        let base = ctx.repo.resolve(&self.settings.base)?;
        let inputs = Inputs {
            tree: self.tree.hashes().digest(),
            base: Some(base),
        };
        if self.reload_gate || !self.gate.as_ref().is_some_and(|g| g.is_for(base)) {
            self.gate = Some(Gate::load(ctx, &self.settings.base, &head)?);
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
            changed: &changed,
            drift: &drift,
            microseconds,
        })?;
        let limits = self
            .gate
            .as_ref()
            .map(|g| g.limits().clone())
            .unwrap_or_default();
        let runner = self.runner(ctx, &limits)?;
        let mut opts = self.settings.options.clone();
        opts.today = self.settings.today.unwrap_or_else(crate::context::today);
        // The runner's clone shares the warm interpreters; its flag is this audit's own.
        let mut own = (*runner).clone();
        own.interrupted = cancel;
        opts.runner = Some(Arc::new(own));
        opts.frozen_head = Some(head);
        Ok((opts, inputs, changed))
    }

    /// The paths whose content differs from the last audit's start (none before the first):
    /// a temporary file an editor made and removed in between is not among them.
    fn changed(&self) -> Vec<String> {
        match &self.frozen {
            Some(before) => self
                .tree
                .hashes()
                .differences(before)
                .iter()
                .map(RepoPath::display_lossless)
                .collect(),
            None => Vec::new(),
        }
    }

    /// The warm runner, kept while the interpreter is the same: its zygotes are keyed by the
    /// snapshot they collected (every path with its stat data), so the base's serve every
    /// audit and a changed head gets new ones, collected from its new bytes. New run limits in
    /// the base make a new runner too.
    fn runner(&mut self, ctx: &Ctx, limits: &crate::config::LimitsConfig) -> Result<Arc<Runner>> {
        let path = interpreter::choose(ctx.python.as_deref(), &ctx.repo.root, &ctx.env);
        let fingerprint = interpreter::probe_cached(&path, &ctx.cache_dir, &ctx.env)?
            .fingerprint
            .digest();
        match &self.warm {
            Some(w) if w.interpreter == fingerprint && &w.limits == limits => Ok(w.runner.clone()),
            _ => {
                // The old zygotes die here (the pool kills and reaps them when dropped).
                self.warm = None;
                let runner = Arc::new(ctx.runner(&self.settings.options.sandbox, limits)?);
                self.warm = Some(Warm {
                    runner: runner.clone(),
                    interpreter: fingerprint,
                    limits: limits.clone(),
                });
                Ok(runner)
            }
        }
    }

    /// Takes the finished audit's outcome and shows it.
    fn finish(&mut self) -> Result<()> {
        let Some(r) = self.running.take() else {
            return Ok(());
        };
        let (ctx, result) = r
            .thread
            .join()
            .map_err(|panic| Error::panicked("the audit's thread", &*panic))?;
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
                self.audited = Some(r.inputs);
                self.screen.show(&Shown::Failed {
                    audit: r.audit,
                    message: &e.to_string(),
                })
            }
            (None, Ok(mut report)) => {
                self.audited = Some(r.inputs);
                own_forks(&mut report.forkserver, &r.forks_before);
                for w in &report.warnings {
                    ctx.warn_once(w);
                }
                ctx.save_graph(&report);
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
    /// interpreters; the frozen copy goes with the tree.
    fn shut_down(&mut self) {
        if let Some(r) = self.running.take() {
            r.cancel.store(true, Ordering::SeqCst);
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

/// The counts of the process since `before`: the fork server's counters are the process's,
/// and a watcher's process runs many audits.
fn own_forks(now: &mut ForkSummary, before: &ForkSummary) {
    now.forks -= before.forks.min(now.forks);
    now.fresh_processes -= before.fresh_processes.min(now.fresh_processes);
    now.zygotes -= before.zygotes.min(now.zygotes);
    now.prewarmed -= before.prewarmed.min(now.prewarmed);
    now.mode = if now.forks > 0 { "fork" } else { "fresh" }.to_owned();
}

/// Files whose change changes how the suite is collected or configured, or which fixture
/// groups there are: the lock gate is loaded again.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_files_reload_the_gate_and_others_do_not() {
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

    #[test]
    fn a_report_counts_the_forks_of_its_own_audit() {
        let before = ForkSummary {
            forks: 20,
            fresh_processes: 3,
            zygotes: 2,
            prewarmed: 1,
            mode: "fork".into(),
            ..ForkSummary::default()
        };
        let mut now = ForkSummary {
            forks: 20,
            fresh_processes: 4,
            zygotes: 2,
            prewarmed: 1,
            mode: "fork".into(),
            ..ForkSummary::default()
        };
        own_forks(&mut now, &before);
        assert_eq!(
            (now.forks, now.fresh_processes, now.zygotes, now.prewarmed),
            (0, 1, 0, 0)
        );
        assert_eq!(now.mode, "fresh", "a fully cached audit forked nothing");
    }
}
