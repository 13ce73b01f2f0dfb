//! One warm interpreter (a zygote): a pytest process that imported pytest and the plugin and
//! collected a snapshot's suite once, then forks a child for each run. Here: what starting one
//! takes ([`Launch`]), its start and the collection it reports, the protocol that forks a child
//! and reports its exit (the other side is `src/pytest/plugin/forkserver.py`), killing a child
//! by its host pid, and the thread that spawns zygotes so that they outlive the graph's workers.
//! Which zygote serves which run is the pool's (`forkserver.rs`).

use std::collections::HashSet;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::pytest::command::PreparedCommand;
use crate::pytest::events::{CollectedItem, Collection, Event, Trace, Unitemized};
use crate::pytest::fork_stats::ForkStats;
use crate::pytest::progress::stalled;
use crate::pytest::record::Record;
use crate::pytest::replies::{pipe, Replies};
use crate::pytest::zygote_key::{Carried, Keys};
use crate::sandbox::{Sandbox, TreeState};
use crate::snapshot::Snapshot;

/// How long a poll of the zygote's replies sleeps at most: the driver checks on the test timeout
/// and Ctrl-C between polls.
const POLL_MS: i32 = 40;

/// How long a killed child's exit may take to be reported before the zygote counts as dead.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// What starting a zygote takes from the runner; used only when a zygote is started.
pub(crate) struct Launch<'a> {
    /// A new sandbox of a snapshot, made as the runner makes every run's (its test modules'
    /// rewrites first).
    pub(crate) sandbox: &'a dyn Fn(&Snapshot) -> crate::error::Result<Sandbox>,
    /// Set by Ctrl-C: stop waiting for the zygote's collection.
    pub(crate) interrupted: &'a AtomicBool,
    /// The command of a pytest process in a sandbox, writing the given event file, as the
    /// runner prepares every run; the zygote adds the flags of its own protocol.
    pub(crate) prepare: &'a dyn Fn(&Sandbox, &Path) -> PreparedCommand,
    /// What this machine permits: how the zygote is contained.
    pub(crate) host: &'a crate::contain::Host,
    /// Whether the run records the code each test ran: only a zygote that traced its
    /// collection can fork it (tracing the collection is most of what recording costs on
    /// Python 3.9-3.11, so the other runs fork from a zygote that did not).
    pub(crate) record_code: bool,
    /// What the zygote is checked out for.
    pub(crate) purpose: Purpose,
    /// The test modules a new zygote imports without making their items (only a collection's
    /// and its spare's: a run forks from one whose items hold every test of its order).
    pub(crate) carried: &'a Carried,
    /// How long its collection may take (the test timeout: outside any test a process is
    /// bounded by it too), after which it is killed and its snapshot's runs start fresh.
    pub(crate) stall_after: Duration,
}

/// Why a zygote did not start: the reason to report, and whether it was killed for taking
/// longer than [`Launch::stall_after`] to collect.
pub(crate) struct StartFailure {
    pub(crate) reason: String,
    pub(crate) stalled: bool,
}

impl From<String> for StartFailure {
    fn from(reason: String) -> StartFailure {
        StartFailure {
            reason,
            stalled: false,
        }
    }
}

/// What a zygote is checked out for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A run: an idle zygote of its snapshot when there is one, else a new one.
    Run,
    /// A collection (see [`Lease::take_collection`]): a new zygote, which describes each item
    /// as a fresh `--collect-only` run does. One that cannot start is not held against its
    /// snapshot: the fresh collection that follows says why, in the suite's words, and the
    /// runs try a zygote again.
    Collect,
    /// A second zygote started beside a collection's, for the runs of the other job slot,
    /// which would otherwise start theirs only once the collection is done: always new.
    Spare,
    /// A zygote started ahead of the runs that will ask for it (the base's, while the head's
    /// search leaves a core free): an idle one of its snapshot is enough, and a new one only
    /// starts in a free slot, never in place of another's idle zygote.
    Prewarm,
}

/// One warm interpreter: a pytest process that collected in `sandbox` and waits for commands.
pub(crate) struct Zygote {
    /// What it is known by.
    pub(crate) keys: Keys,
    /// Whether it traced its collection.
    pub(crate) records: bool,
    /// Whether it made only some modules' items (see [`Zygote::makes_all`]).
    partial: bool,
    process: Child,
    commands: std::fs::File,
    replies: Replies,
    /// The pid of the child running now.
    running: Option<i32>,
    /// False once the zygote misbehaved or died: it is not reused.
    pub(crate) healthy: bool,
    pub(crate) collected: Vec<String>,
    pub(crate) sandbox: Sandbox,
    pristine: TreeState,
    /// What collection read, imported and listed (`None`: collection wrote, ran untraced code
    /// or touched home or tmp, so a run never continues in a fork after a crash).
    collection: Option<Trace>,
    /// Its collection as a fresh `--collect-only` run reports it, when it was started for one
    /// ([`Purpose::Collect`]) and until taken.
    items: Option<(Collection, Trace)>,
    log: PathBuf,
    /// Where its forks are counted.
    stats: Arc<ForkStats>,
}

/// Why a zygote did not start, in words.
fn why(e: impl std::fmt::Display) -> String {
    format!("the warm interpreter could not start: {e}")
}

impl Zygote {
    /// Starts a zygote of `snapshot` known by `keys` and waits for its collection.
    pub(crate) fn start(
        launch: &Launch,
        snapshot: &Snapshot,
        keys: Keys,
        stats: &Arc<ForkStats>,
    ) -> Result<Zygote, StartFailure> {
        let sandbox = (launch.sandbox)(snapshot).map_err(why)?;
        let materialized = sandbox
            .record()
            .map_err(|e| why(format!("recording its sandbox: {e}")))?;
        let events = sandbox.dir().join("zygote-events.jsonl");
        let log = sandbox.dir().join("zygote.log");
        std::fs::write(&events, b"").map_err(why)?;
        let (read, write) = pipe().map_err(why)?;
        let (command_read, command_write) = pipe().map_err(why)?;
        let mut cmd = command(
            launch,
            &sandbox,
            &events,
            (write.as_raw_fd(), command_read.as_raw_fd()),
        )?;
        let log_file = std::fs::File::create(&log).map_err(why)?;
        let log_err = log_file.try_clone().map_err(why)?;
        cmd.stdin(Stdio::null()).stdout(log_file).stderr(log_err);
        let process = spawn_steadily(cmd).map_err(why)?;
        drop(write);
        drop(command_read);
        stats.count_zygote();
        let mut zygote = Zygote {
            keys,
            records: launch.record_code,
            partial: !launch.carried.is_empty(),
            process,
            commands: std::fs::File::from(command_write),
            replies: Replies::new(read),
            running: None,
            healthy: false,
            collected: Vec::new(),
            sandbox,
            pristine: TreeState::default(),
            collection: None,
            items: None,
            log,
            stats: stats.clone(),
        };
        zygote.wait_ready(launch)?;
        zygote.read_collection(launch, &events)?;
        zygote.pristine = zygote
            .sandbox
            .record()
            .map_err(|e| why(format!("recording its sandbox: {e}")))?;
        // A run continues in a fork after a crash only when collection wrote nothing: not in
        // the tree, not in the sandbox's home or tmp, and the tree holds what was materialized.
        let sandbox_dir = zygote.sandbox.dir().to_path_buf();
        let wrote_nothing = |t: &Trace| {
            t.write.is_empty()
                && t.remove.is_empty()
                && t.mkdir.is_empty()
                && t.rename.is_empty()
                && t.unknown.is_empty()
                && !t
                    .outside
                    .iter()
                    .any(|o| Path::new(&o.path).starts_with(&sandbox_dir))
        };
        let untouched = materialized.same_bytes(&zygote.pristine);
        zygote.collection = zygote
            .collection
            .take()
            .filter(|t| untouched && wrote_nothing(t));
        zygote.healthy = true;
        Ok(zygote)
    }

    /// Waits for the zygote to say it collected and is ready (dropping it on the way out
    /// kills it): it falls back on its own, stalls past the launch's bound, exits, or is
    /// interrupted.
    fn wait_ready(&mut self, launch: &Launch) -> Result<(), StartFailure> {
        let started = Instant::now();
        let reply = loop {
            if launch.interrupted.load(Ordering::SeqCst) {
                return Err("interrupted while the warm interpreter collected"
                    .to_owned()
                    .into());
            }
            match self.replies.line(POLL_MS) {
                Ok(Some(line)) => break line,
                Ok(None) if started.elapsed() > launch.stall_after => {
                    return Err(StartFailure {
                        reason: stalled("collecting the suite", launch.stall_after),
                        stalled: true,
                    });
                }
                Ok(None) => continue,
                Err(()) => {
                    let status = self.process.wait().ok();
                    return Err(format!(
                        "the warm interpreter exited during collection ({})",
                        status.map_or("no status".to_owned(), |s| s.to_string())
                    )
                    .into());
                }
            }
        };
        if let Some(reason) = reply.strip_prefix("fallback ") {
            return Err(reason.to_owned().into());
        }
        if reply != "ready" {
            return Err(format!("the warm interpreter said {reply:?}, not ready").into());
        }
        Ok(())
    }

    /// Reads what the zygote's collection reported in `events`: the node ids it collected,
    /// what collection read (kept only when the trace is complete), and, for a collection's
    /// zygote, the collection described item by item.
    fn read_collection(&mut self, launch: &Launch, events: &Path) -> Result<(), StartFailure> {
        let mut collection = None;
        let mut described = None;
        let mut skipped_collectors = Vec::new();
        // A collection that made only some modules' items and did not say where the others
        // go cannot be put together: its items are not known to be in order.
        let mut unitemized = (!launch.carried.is_empty()).then(Unitemized::default);
        let mut complete = false;
        let (events, dropped) = crate::pytest::stream::read_events(events).map_err(why)?;
        // A collection whose stream was cut is not described whole: a fresh one is.
        if let Some(dropped) = dropped {
            return Err(why(format!("the warm interpreter's collection: {dropped}")).into());
        }
        for ev in events {
            match ev {
                Event::Collected { items, deselected } => {
                    self.collected = items.iter().map(|i| i.nodeid.clone()).collect();
                    described = Some((items, deselected));
                }
                Event::CollectSkip { nodeid, reason } => {
                    skipped_collectors.push(CollectedItem::skipped_collector(nodeid, reason))
                }
                Event::Unitemized(u) if unitemized.is_some() => unitemized = Some(u),
                Event::SessionTrace { trace, partial } => {
                    complete = !partial;
                    collection = Some(*trace);
                }
                _ => {}
            }
        }
        if let (Purpose::Collect, Some((items, deselected)), Some(trace)) =
            (launch.purpose, described, &collection)
        {
            let described = Collection {
                items,
                skipped_collectors,
                deselected,
                unitemized,
            };
            self.items = Some((described, trace.clone()));
        }
        self.collection = collection.filter(|_| complete);
        Ok(())
    }

    /// Forks a child that runs `order` (an order file) writing `events`; its pid.
    pub(crate) fn fork(
        &mut self,
        events: &Path,
        order: &Path,
        watch: Option<&Path>,
        record: Record,
    ) -> Result<i32, String> {
        let command = serde_json::json!({
            "events": events.display().to_string(),
            "order": order.display().to_string(),
            "watch": watch.map(|w| w.display().to_string()),
            "record": record.arg(),
            "lenient": record.uncollected,
        });
        let sent = writeln!(self.commands, "{command}").and_then(|_| self.commands.flush());
        if let Err(e) = sent {
            self.healthy = false;
            return Err(format!(
                "the warm interpreter stopped reading commands: {e}"
            ));
        }
        let deadline = Instant::now() + KILL_GRACE;
        loop {
            match self.replies.line(POLL_MS) {
                Ok(Some(line)) => {
                    let pid = line
                        .strip_prefix("forked ")
                        .and_then(|p| p.parse::<i32>().ok());
                    match pid {
                        Some(pid) => {
                            self.running = Some(pid);
                            self.stats.count_fork();
                            return Ok(pid);
                        }
                        None => {
                            self.healthy = false;
                            return Err(format!("the warm interpreter said {line:?}"));
                        }
                    }
                }
                Ok(None) if Instant::now() < deadline => continue,
                _ => {
                    self.healthy = false;
                    return Err("the warm interpreter did not fork".to_owned());
                }
            }
        }
    }

    /// The running child's exit status once the zygote has reaped it. A zygote that died takes
    /// its child with it: reported as killed.
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        let pid = self.running?;
        loop {
            match self.replies.line(0) {
                Ok(Some(line)) => {
                    let mut parts = line.split(' ');
                    let fields = (parts.next(), parts.next(), parts.next());
                    if let (Some("exit"), Some(p), Some(s)) = fields {
                        if p.parse() == Ok(pid) {
                            if let Ok(raw) = s.parse::<i32>() {
                                self.running = None;
                                // What the child left running is the zygote's to kill: it is a
                                // child subreaper and reaps every leftover before it reports
                                // the exit. (The pid is the zygote's view, which under
                                // containment is not a host pid: never signal it from here.)
                                return Some(ExitStatus::from_raw(raw));
                            }
                        }
                    }
                    self.healthy = false;
                }
                Ok(None) => return None,
                Err(()) => {
                    self.healthy = false;
                    self.running = None;
                    return Some(ExitStatus::from_raw(libc::SIGKILL));
                }
            }
        }
    }

    /// Sleeps until the zygote reports something or the next check is due.
    pub(crate) fn pause(&mut self) {
        self.replies.wait(POLL_MS);
    }

    /// Kills the running child and its process group; its exit comes through `try_wait`.
    pub(crate) fn kill_child(&mut self) {
        let Some(pid) = self.running else {
            return;
        };
        let spawned = self.process.id() as i32;
        // The pid the zygote reported is its own view: in a contained run it lives in a PID
        // namespace of its own, and the host pid is found through /proc's NSpid.
        // Uncontained, the zygote is the spawned process or its descendant (a supervisor sits
        // between them) and reports host pids; contained, its pids are its namespace's.
        let host = if parent_of(pid).is_some_and(|p| descends_from(p, spawned)) {
            Some(pid)
        } else {
            host_pid(pid, spawned)
        };
        match host {
            // SAFETY: kill takes a pid and a signal; the child leads its own process group.
            Some(pid) => unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            },
            None => {
                // The child cannot be told apart (it is gone, or /proc says nothing): kill the
                // zygote instead, which takes the child with it (PR_SET_PDEATHSIG), and reuse
                // it no more.
                self.healthy = false;
                // SAFETY: kill takes a pid and a signal; the zygote leads its own process group.
                unsafe {
                    libc::kill(-spawned, libc::SIGKILL);
                }
            }
        }
    }

    /// Kills the child and waits for its exit to be reported (for an interrupted run).
    pub(crate) fn kill_and_reap(&mut self) {
        self.kill_child();
        let deadline = Instant::now() + KILL_GRACE;
        while self.running.is_some() && Instant::now() < deadline {
            if self.try_wait().is_none() {
                self.pause();
            }
        }
        if self.running.is_some() {
            self.healthy = false;
        }
    }

    /// Whether its items hold every test of `order` (a zygote that made every module's
    /// items holds what the audit's collection does).
    pub(crate) fn makes_all(&self, order: &[String]) -> bool {
        if !self.partial {
            return true;
        }
        let known: HashSet<&str> = self.collected.iter().map(String::as_str).collect();
        order.iter().all(|id| known.contains(id.as_str()))
    }

    /// Whether a run that crashed (or timed out) may continue in a forked child: only when a
    /// fresh pytest would collect exactly what the zygote collected, because collection wrote
    /// nothing and nothing it read, imported or listed has changed in the tree since.
    pub(crate) fn may_continue_forked(&self) -> bool {
        let Some(t) = &self.collection else {
            return false;
        };
        let files = t.read.iter().chain(&t.import).chain(&t.sqlite);
        self.pristine.unchanged(
            &self.sandbox,
            files.map(String::as_str),
            t.list.iter().map(String::as_str),
        )
    }

    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// Puts its sandbox back to the bytes its collection left, for the next run.
    pub(crate) fn restore(&mut self) -> std::io::Result<()> {
        self.sandbox.restore(&mut self.pristine)
    }

    /// Its collection as a fresh `--collect-only` run describes it (see
    /// [`Purpose::Collect`]), once.
    pub(crate) fn take_items(&mut self) -> Option<(Collection, Trace)> {
        self.items.take()
    }

    /// Whether a child of it is still running.
    pub(crate) fn busy(&self) -> bool {
        self.running.is_some()
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        self.kill_child();
        let pid = self.process.id() as i32;
        // SAFETY: kill takes a pid and a signal; the zygote leads its own process group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
/// The zygote's command: the runner's, with the flags of the fork server's protocol, its
/// replies on [`REPLY_FD`] and its commands on the next descriptor (`fds`: the pipes' ends it
/// gets there), dying with fixgate.
fn command(
    launch: &Launch,
    sandbox: &Sandbox,
    events: &Path,
    (write_fd, command_fd): (i32, i32),
) -> Result<Command, StartFailure> {
    let mut prepared = (launch.prepare)(sandbox, events);
    prepared.args.push("--fixgate-collect".into());
    prepared
        .args
        .push(format!("--fixgate-forkserver={REPLY_FD}"));
    // The code collection runs is recorded for the runs that will ask (an empty list: what
    // each forked run records per test, it says itself).
    if launch.record_code {
        prepared.args.push("--fixgate-record=".into());
    }
    if launch.purpose == Purpose::Collect {
        prepared.args.push("--fixgate-collect-items".into());
    }
    // The modules whose items it does not make, in a file beside its events (fixgate's,
    // outside the tree; the plugin reads it before any test module is imported).
    if !launch.carried.is_empty() {
        let path = sandbox.dir().join("carried-modules.json");
        let list: Vec<&String> = launch.carried.0.iter().collect();
        let bytes = serde_json::to_vec(&list).map_err(why)?;
        std::fs::write(&path, bytes).map_err(why)?;
        prepared
            .args
            .push(format!("--fixgate-carry-modules={}", path.display()));
    }
    let mut cmd = prepared.command(launch.host).map_err(why)?;
    // SAFETY: the closure runs between fork and exec and only makes system calls (dup,
    // dup2, fcntl, prctl), which are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            // Both ends out of the way of the targets first (one may sit on the other's).
            let (w, c) = (libc::dup(write_fd), libc::dup(command_fd));
            if w < 0 || c < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // dup2 leaves the new descriptors without close-on-exec
            if libc::dup2(w, REPLY_FD) < 0 || libc::dup2(c, REPLY_FD + 1) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The zygote dies with fixgate (its children die with it in turn).
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        });
    }
    Ok(cmd)
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `cmd` from a thread that lives as long as fixgate. PR_SET_PDEATHSIG fires when the
/// *thread* that forked the process ends, and the graph's worker threads end with every batch:
/// a zygote they spawned would die with them.
fn spawn_steadily(cmd: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        // Without the thread, requests fail below and the caller falls back to fresh runs.
        let _ = std::thread::Builder::new()
            .name("fixgate-zygote-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            });
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    let sent = spawner
        .lock()
        .map_err(|_| std::io::Error::other("the spawner's lock is poisoned"))?
        .send((cmd, reply));
    if sent.is_err() {
        return Err(std::io::Error::other("the spawner thread is gone"));
    }
    answer
        .recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// The parent pid of `pid`, from `/proc/<pid>/stat` (the field after the parenthesised name).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is `ancestor` or one of its descendants, walking parent pids up.
fn descends_from(mut pid: i32, ancestor: i32) -> bool {
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        match parent_of(pid) {
            Some(p) if p > 1 => pid = p,
            _ => return false,
        }
    }
    false
}

/// The host pid of the process a contained zygote knows as `ns_pid`: the descendant of
/// `ancestor` whose innermost pid (the last of /proc's `NSpid` line) is `ns_pid`.
fn host_pid(ns_pid: i32, ancestor: i32) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let inner = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|p| p.parse::<i32>().ok());
        if inner == Some(ns_pid) && pid != ns_pid && descends_from(pid, ancestor) {
            return Some(pid);
        }
    }
    None
}

/// The descriptor the zygote writes its replies to; it reads commands from the next one.
const REPLY_FD: i32 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_of_a_child_is_this_process() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id() as i32;
        assert_eq!(parent_of(pid), Some(std::process::id() as i32));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(parent_of(pid), None, "a reaped child has no /proc entry");
    }

    #[test]
    fn a_grandchild_descends_from_this_process_and_this_process_not_from_it() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 5 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let me = std::process::id() as i32;
        assert!(descends_from(grandchild, me));
        assert!(descends_from(grandchild, child.id() as i32));
        assert!(descends_from(me, me), "a process is its own descendant");
        assert!(!descends_from(me, grandchild));
        // Uncontained, a pid's innermost NSpid is itself: no other host pid claims it.
        assert_eq!(host_pid(grandchild, me), None);
        unsafe { libc::kill(grandchild, libc::SIGKILL) };
        child.wait().unwrap();
    }
}
