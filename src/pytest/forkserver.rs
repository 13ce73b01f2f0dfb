//! The fork server: per job slot, a warm interpreter (a zygote) that has imported pytest and the
//! plugin and collected a snapshot's suite once; each ordered run is a fork of it that runs its
//! order as a fresh process would after collection. The protocol with the zygote is in
//! `src/pytest/plugin/forkserver.py` and `docs/plugin-protocol.md`.
//!
//! A run forks only when the result would be the same as a fresh process's: the zygote's sandbox
//! is restored to its post-collection bytes before each run, and snapshots fall back to fresh
//! processes (the reason recorded) when the zygote has threads after collection (each named;
//! pytest-rerunfailures' idle status server for xdist workers is let through, see
//! plugin/forkserver.py), when its collection differs from the audit's (collection is
//! order-sensitive), when `[tool.fixgate] fork = false` or `FIXGATE_FORK=0` says so, or when the
//! zygote fails in any way.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::pytest::command::PreparedCommand;
use crate::pytest::events::{CollectedItem, Collection, Event, Trace, Unitemized};
use crate::sandbox::{Overlay, Sandbox, TreeState};
use crate::snapshot::Snapshot;

/// How long a poll of the zygote's replies sleeps at most: the driver checks on the test timeout
/// and Ctrl-C between polls.
const POLL_MS: i32 = 40;

/// How long a killed child's exit may take to be reported before the zygote counts as dead.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// How the runs of this fixgate process were made: warm (forked from a zygote) or fresh, and why
/// not warm. Counts are of pytest processes started, so benchmarks can tell the modes apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkSummary {
    /// Why runs fell back to fresh processes (sorted, each once).
    pub(crate) fallbacks: Vec<String>,
    /// Runs' processes forked from a zygote.
    pub(crate) forks: u32,
    /// pytest processes started fresh (collections, runs that did not fork).
    pub(crate) fresh_processes: u32,
    /// `fork` when any run forked, else `fresh`.
    pub(crate) mode: String,
    /// Of the zygotes, those started ahead of their runs: the base's, beside the head's search,
    /// for the checks on the base that follow it. (Fields stay in sorted order: the report's
    /// keys are.)
    #[serde(default)]
    pub(crate) prewarmed: u32,
    /// Zygotes started (one per snapshot and job slot at most).
    pub(crate) zygotes: u32,
}

/// The counts behind a [`ForkSummary`]: kept by the context of one fixgate invocation and
/// shared by every pool it makes, so that a report counts the runs of the heads before it too.
#[derive(Debug, Default)]
pub(crate) struct ForkStats {
    forks: AtomicU32,
    fresh: AtomicU32,
    zygotes: AtomicU32,
    prewarmed: AtomicU32,
    fallbacks: Mutex<BTreeSet<String>>,
}

impl ForkStats {
    /// What the runs did so far (for the report).
    pub(crate) fn summary(&self) -> ForkSummary {
        let forks = self.forks.load(Ordering::Relaxed);
        ForkSummary {
            fallbacks: self
                .fallbacks
                .lock()
                .map(|f| f.iter().cloned().collect())
                .unwrap_or_default(),
            forks,
            fresh_processes: self.fresh.load(Ordering::Relaxed),
            mode: if forks > 0 { "fork" } else { "fresh" }.to_owned(),
            prewarmed: self.prewarmed.load(Ordering::Relaxed),
            zygotes: self.zygotes.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_fresh(&self) {
        self.fresh.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fall_back(&self, reason: String) {
        if let Ok(mut f) = self.fallbacks.lock() {
            f.insert(reason);
        }
    }
}

/// A snapshot's identity: its root and every entry with its blob or stat data.
type Key = [u8; 32];

fn identity(snapshot: &Snapshot) -> Key {
    let mut h = blake3::Hasher::new_derive_key("fixgate zygote snapshot v1");
    let root = snapshot.root.display().to_string();
    h.update(&(root.len() as u64).to_le_bytes());
    h.update(root.as_bytes());
    for e in &snapshot.entries {
        let text = format!("{}\0{:?}\0{:?}\0{:?}", e.path, e.kind, e.blob, e.stat);
        h.update(&(text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    *h.finalize().as_bytes()
}

/// Whether two snapshots are the same tree at the same root (one zygote serves both).
pub(crate) fn same_snapshot(a: &Snapshot, b: &Snapshot) -> bool {
    identity(a) == identity(b)
}

/// The test modules a zygote imports without making their items, by node id (a head's
/// collection whose other items are the base's: `crate::audit::itemize`). Empty: it makes every
/// item, as pytest does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Carried(pub(crate) BTreeSet<String>);

impl Carried {
    /// Whether every module makes its items.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A digest of the modules, for the key of a collection that makes no items of them.
    pub(crate) fn digest(&self) -> String {
        let mut h = blake3::Hasher::new_derive_key("fixgate carried modules v1");
        for m in &self.0 {
            h.update(&(m.len() as u64).to_le_bytes());
            h.update(m.as_bytes());
        }
        h.finalize().to_hex().to_string()
    }

    /// What its collection is known by beside the snapshot: a snapshot's collection and its
    /// collection without some modules' items are two collections.
    fn collection_key(&self, snapshot: &Key) -> Key {
        if self.is_empty() {
            return *snapshot;
        }
        let mut h = blake3::Hasher::new_derive_key("fixgate carried collection v1");
        h.update(snapshot);
        h.update(self.digest().as_bytes());
        *h.finalize().as_bytes()
    }
}

/// The key of a zygote: its collection's (the snapshot's identity, and the modules it made no
/// items of), and whether it traced its collection.
fn zygote_key(collection: &Key, record_code: bool) -> Key {
    let mut h = blake3::Hasher::new_derive_key("fixgate zygote v1");
    h.update(collection);
    h.update(&[u8::from(record_code)]);
    *h.finalize().as_bytes()
}

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
struct StartFailure {
    reason: String,
    stalled: bool,
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

/// The warm interpreters of one runner: per job slot at most two alive (an audit alternates
/// between the base and the head; with one per slot, every switch would kill a zygote and
/// collect again), idle ones kept for the next run of their snapshot. Dropping the pool kills
/// them.
pub(crate) struct Pool {
    /// `Some(reason)`: never fork (`FIXGATE_FORK=0`).
    disabled: Option<String>,
    /// How many zygotes may be alive at once.
    capacity: usize,
    live: AtomicUsize,
    idle: Mutex<Vec<Zygote>>,
    /// Snapshots that run fresh, with the reason.
    refused: Mutex<HashMap<Key, String>>,
    /// The node ids the audit's collection of each snapshot listed (a fresh process's or the
    /// first zygote's), in order.
    collections: Mutex<HashMap<Key, Vec<String>>>,
    stats: Arc<ForkStats>,
}

impl Pool {
    /// A pool for `slots` job slots; `disabled` (`FIXGATE_FORK=0`, with the reason to report)
    /// turns the fork server off for every run of this process.
    pub(crate) fn new(slots: usize, disabled: Option<String>, stats: Arc<ForkStats>) -> Pool {
        Pool {
            disabled,
            capacity: 2 * slots.max(1),
            live: AtomicUsize::new(0),
            idle: Mutex::new(Vec::new()),
            refused: Mutex::new(HashMap::new()),
            collections: Mutex::new(HashMap::new()),
            stats,
        }
    }

    /// How many job slots it serves.
    pub(crate) fn slots(&self) -> usize {
        self.capacity / 2
    }

    /// Where this pool counts what its runs did.
    pub(crate) fn stats(&self) -> &ForkStats {
        &self.stats
    }

    /// Remembers what the audit's collection of `snapshot` listed (without the items of the
    /// `carried` modules), to check zygotes of the same collection against.
    pub(crate) fn note_collection(&self, snapshot: &Snapshot, carried: &Carried, ids: Vec<String>) {
        if let Ok(mut c) = self.collections.lock() {
            c.insert(carried.collection_key(&identity(snapshot)), ids);
        }
    }

    /// Forgets what a collection of `snapshot` without the `carried` modules' items listed: the
    /// audit did not take it, and no run forks from a zygote of it.
    pub(crate) fn forget_collection(&self, snapshot: &Snapshot, carried: &Carried) {
        if let Ok(mut c) = self.collections.lock() {
            c.remove(&carried.collection_key(&identity(snapshot)));
        }
    }

    fn refuse(&self, key: Key, reason: String) {
        self.stats.fall_back(reason.clone());
        if let Ok(mut r) = self.refused.lock() {
            r.insert(key, reason);
        }
    }

    /// A zygote of `snapshot` for a run of `order` (`None`: collection order), its sandbox
    /// restored; `None` when this run must use fresh processes.
    pub(crate) fn checkout(
        &self,
        launch: &Launch,
        snapshot: &Snapshot,
        overlay: &Overlay,
        order: Option<&[String]>,
    ) -> Option<Lease<'_>> {
        if let Some(reason) = &self.disabled {
            self.stats.fall_back(reason.clone());
            return None;
        }
        if !overlay.is_empty() {
            // Replay runs put other bytes into the tree than the zygote collected from.
            self.stats
                .fall_back("runs with replaced fixture bytes (replay) start fresh".to_owned());
            return None;
        }
        let snap = identity(snapshot);
        if self.refused.lock().ok()?.contains_key(&snap) {
            return None;
        }
        let collection = launch.carried.collection_key(&snap);
        let key = zygote_key(&collection, launch.record_code);
        let pyproject = snapshot.read_path("pyproject.toml").ok().flatten();
        if pyproject.is_some_and(|b| crate::config::fork_setting(&b) == Some(false)) {
            self.refuse(snap, "[tool.fixgate] fork = false".to_owned());
            return None;
        }
        // A zygote that recorded its collection forks runs that record nothing as well as a
        // plain one (each forked run says what it records): a scoped audit's runs share them.
        let recorded = zygote_key(&snap, true);
        let idle = match (launch.purpose, launch.record_code) {
            // Only a new zygote holds its collection described item by item, and a spare
            // is a zygote more than the idle ones.
            (Purpose::Collect | Purpose::Spare, _) => None,
            (Purpose::Run, true) => self.take_idle(key),
            (Purpose::Run | Purpose::Prewarm, false) => {
                self.take_idle(key).or_else(|| self.take_idle(recorded))
            }
            (Purpose::Prewarm, true) => self.take_idle(key),
        };
        // A run may fork from a zygote that made only some modules' items when its order is
        // among them, and its collection is one the audit's was checked against (a spare beside
        // a collection that ran fresh after all is not).
        let idle = match (idle, launch.purpose, order) {
            (None, Purpose::Run, Some(order)) => {
                let noted: HashSet<Key> = self.collections.lock().ok()?.keys().copied().collect();
                self.take_idle_where(|z| {
                    z.snapshot == snap
                        && (z.records || !launch.record_code)
                        && noted.contains(&z.collection_key)
                        && z.makes_all(order)
                })
            }
            (idle, ..) => idle,
        };
        let mut zygote = match idle {
            Some(z) => z,
            None => {
                if !self.make_room(launch.purpose != Purpose::Prewarm) {
                    return None; // every slot busy: this run starts fresh
                }
                match Zygote::start(launch, snapshot, (snap, collection, key), &self.stats) {
                    Ok(z) => {
                        if launch.purpose == Purpose::Prewarm {
                            self.stats.prewarmed.fetch_add(1, Ordering::Relaxed);
                        }
                        z
                    }
                    Err(failure) => {
                        self.live.fetch_sub(1, Ordering::SeqCst);
                        // A cancelled start says nothing about the snapshot: under `fixgate
                        // watch` the next audit may fork from it. Nor does a collection's
                        // failure: the fresh one after it tells. A collection that did not end
                        // in time does: this snapshot's runs start fresh (each bounded alike,
                        // with what it did).
                        let said = !launch.interrupted.load(Ordering::SeqCst)
                            && launch.purpose != Purpose::Collect;
                        if failure.stalled || said {
                            self.refuse(snap, failure.reason);
                        }
                        return None;
                    }
                }
            }
        };
        let fresh = self
            .collections
            .lock()
            .ok()?
            .get(&zygote.collection_key)
            .cloned();
        if let Some(fresh) = fresh {
            if fresh != zygote.collected {
                drop(zygote);
                self.live.fetch_sub(1, Ordering::SeqCst);
                self.refuse(
                    snap,
                    "collection is order-sensitive: the warm interpreter collected other tests, \
                     or another order, than the audit's collection"
                        .to_owned(),
                );
                return None;
            }
        }
        if let Some(order) = order {
            let known: HashSet<&str> = zygote.collected.iter().map(String::as_str).collect();
            if !order.iter().all(|id| known.contains(id.as_str())) {
                // A fresh process reports the unknown ids in its own words.
                self.give_back(zygote);
                return None;
            }
        }
        if let Err(e) = zygote.sandbox.restore(&mut zygote.pristine) {
            drop(zygote);
            self.live.fetch_sub(1, Ordering::SeqCst);
            self.refuse(
                snap,
                format!("the warm interpreter's sandbox could not be restored: {e}"),
            );
            return None;
        }
        Some(Lease {
            pool: self,
            zygote: Some(zygote),
        })
    }

    fn take_idle(&self, key: Key) -> Option<Zygote> {
        self.take_idle_where(|z| z.key == key)
    }

    fn take_idle_where(&self, f: impl Fn(&Zygote) -> bool) -> Option<Zygote> {
        let mut idle = self.idle.lock().ok()?;
        let i = idle.iter().position(f)?;
        Some(idle.swap_remove(i))
    }

    /// Reserves a slot for a new zygote, evicting an idle one of another snapshot if need be
    /// and `evict` allows.
    fn make_room(&self, evict: bool) -> bool {
        loop {
            let live = self.live.load(Ordering::SeqCst);
            if live < self.capacity {
                if self
                    .live
                    .compare_exchange(live, live + 1, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            if !evict {
                return false;
            }
            let evicted = self.idle.lock().ok().and_then(|mut i| i.pop());
            match evicted {
                Some(z) => {
                    drop(z);
                    self.live.fetch_sub(1, Ordering::SeqCst);
                }
                None => return false,
            }
        }
    }

    fn give_back(&self, zygote: Zygote) {
        match self.idle.lock() {
            Ok(mut idle) => idle.push(zygote),
            Err(_) => {
                drop(zygote);
                self.live.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// A zygote checked out for one run; back to the pool when dropped, unless it failed.
pub(crate) struct Lease<'p> {
    pool: &'p Pool,
    zygote: Option<Zygote>,
}

impl Lease<'_> {
    /// The collection of a zygote started for one ([`Purpose::Collect`]): what it
    /// collected, described as a fresh `--collect-only` run describes it, and what collection
    /// read, imported and listed; `None` once taken, or when it did not say.
    pub(crate) fn take_collection(&mut self) -> Option<(Collection, Trace)> {
        self.zygote.as_mut()?.items.take()
    }

    /// Whether the zygote can still fork (it has not failed during this run).
    pub(crate) fn healthy(&self) -> bool {
        self.zygote.as_ref().is_some_and(|z| z.healthy)
    }

    /// See `Zygote::may_continue_forked`.
    pub(crate) fn may_continue_forked(&self) -> bool {
        self.zygote
            .as_ref()
            .is_some_and(Zygote::may_continue_forked)
    }

    pub(crate) fn zygote(&mut self) -> &mut Zygote {
        self.zygote
            .as_mut()
            .expect("a lease holds its zygote until dropped")
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(z) = self.zygote.take() {
            if z.healthy && z.running.is_none() {
                self.pool.give_back(z);
            } else {
                drop(z);
                self.pool.live.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// One warm interpreter: a pytest process that collected in `sandbox` and waits for commands.
pub(crate) struct Zygote {
    key: Key,
    /// Its snapshot's identity and its collection's ([`Carried::collection_key`]).
    snapshot: Key,
    collection_key: Key,
    /// Whether it traced its collection.
    records: bool,
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

impl Zygote {
    fn start(
        launch: &Launch,
        snapshot: &Snapshot,
        (snap, collection, key): (Key, Key, Key),
        stats: &Arc<ForkStats>,
    ) -> Result<Zygote, StartFailure> {
        let why = |e: String| format!("the warm interpreter could not start: {e}");
        let sandbox = (launch.sandbox)(snapshot).map_err(|e| why(e.to_string()))?;
        let materialized = sandbox
            .record()
            .map_err(|e| why(format!("recording its sandbox: {e}")))?;
        let events = sandbox.dir().join("zygote-events.jsonl");
        let log = sandbox.dir().join("zygote.log");
        std::fs::write(&events, b"").map_err(|e| why(e.to_string()))?;
        let (read, write) = pipe().map_err(|e| why(e.to_string()))?;
        let (command_read, command_write) = pipe().map_err(|e| why(e.to_string()))?;
        let mut prepared = (launch.prepare)(&sandbox, &events);
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
            let bytes = serde_json::to_vec(&list).map_err(|e| why(e.to_string()))?;
            std::fs::write(&path, bytes).map_err(|e| why(e.to_string()))?;
            prepared
                .args
                .push(format!("--fixgate-carry-modules={}", path.display()));
        }
        let log_file = std::fs::File::create(&log).map_err(|e| why(e.to_string()))?;
        let log_err = log_file.try_clone().map_err(|e| why(e.to_string()))?;
        let mut cmd = prepared
            .command(launch.host)
            .map_err(|e| why(e.to_string()))?;
        let write_fd = write.as_raw_fd();
        let command_fd = command_read.as_raw_fd();
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
        cmd.stdin(Stdio::null()).stdout(log_file).stderr(log_err);
        let process = spawn_steadily(cmd).map_err(|e| why(e.to_string()))?;
        drop(write);
        drop(command_read);
        stats.zygotes.fetch_add(1, Ordering::Relaxed);
        let commands = std::fs::File::from(command_write);
        let mut zygote = Zygote {
            key,
            snapshot: snap,
            collection_key: collection,
            records: launch.record_code,
            partial: !launch.carried.is_empty(),
            process,
            commands,
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
        let started = Instant::now();
        let reply = loop {
            if launch.interrupted.load(Ordering::SeqCst) {
                return Err("interrupted while the warm interpreter collected"
                    .to_owned()
                    .into());
            }
            match zygote.replies.line(POLL_MS) {
                Ok(Some(line)) => break line,
                // Dropping the zygote kills it.
                Ok(None) if started.elapsed() > launch.stall_after => {
                    return Err(StartFailure {
                        reason: crate::pytest::driver::stalled(
                            "collecting the suite",
                            launch.stall_after,
                        ),
                        stalled: true,
                    });
                }
                Ok(None) => continue,
                Err(()) => {
                    let status = zygote.process.wait().ok();
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
        let mut collection = None;
        let mut described = None;
        let mut skipped_collectors = Vec::new();
        // A collection that made only some modules' items and did not say where the others
        // go cannot be put together: its items are not known to be in order.
        let mut unitemized = (!launch.carried.is_empty()).then(Unitemized::default);
        let mut complete = false;
        let (events, dropped) =
            crate::pytest::stream::read_events(&events).map_err(|e| why(e.to_string()))?;
        // A collection whose stream was cut is not described whole: a fresh one is.
        if let Some(dropped) = dropped {
            return Err(why(format!("the warm interpreter's collection: {dropped}")).into());
        }
        for ev in events {
            match ev {
                Event::Collected { items, deselected } => {
                    zygote.collected = items.iter().map(|i| i.nodeid.clone()).collect();
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
            zygote.items = Some((described, trace.clone()));
        }
        let collection = collection.filter(|_| complete);
        zygote.pristine = zygote
            .sandbox
            .record()
            .map_err(|e| why(format!("recording its sandbox: {e}")))?;
        let sandbox_dir = zygote.sandbox.dir().to_path_buf();
        zygote.collection = collection.filter(|t| {
            t.write.is_empty()
                && t.remove.is_empty()
                && t.mkdir.is_empty()
                && t.rename.is_empty()
                && t.unknown.is_empty()
                && !t
                    .outside
                    .iter()
                    .any(|o| Path::new(&o.path).starts_with(&sandbox_dir))
                && materialized.same_bytes(&zygote.pristine)
        });
        zygote.healthy = true;
        Ok(zygote)
    }

    /// Forks a child that runs `order` (an order file) writing `events`; its pid.
    pub(crate) fn fork(
        &mut self,
        events: &Path,
        order: &Path,
        watch: Option<&Path>,
        record: crate::pytest::driver::Record,
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
                            self.stats.forks.fetch_add(1, Ordering::Relaxed);
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
    fn makes_all(&self, order: &[String]) -> bool {
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

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors into a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: descriptors the kernel just returned, owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The zygote's replies: lines read from a pipe without blocking longer than asked.
struct Replies {
    fd: OwnedFd,
    buf: Vec<u8>,
    eof: bool,
}

impl Replies {
    fn new(fd: OwnedFd) -> Replies {
        Replies {
            fd,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Waits up to `ms` for the pipe to be readable.
    fn wait(&self, ms: i32) -> bool {
        if self.eof || self.buf.contains(&b'\n') {
            return true;
        }
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) > 0 }
    }

    /// The next complete line, waiting up to `ms`; `Ok(None)` when none came, `Err` at the end
    /// of the stream (the zygote is gone).
    fn line(&mut self, ms: i32) -> Result<Option<String>, ()> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(
                    String::from_utf8_lossy(&line[..i]).trim_end().to_owned(),
                ));
            }
            if self.eof {
                return Err(());
            }
            if !self.wait(ms) {
                return Ok(None);
            }
            let mut chunk = [0u8; 4096];
            // SAFETY: reads into a buffer of the given length.
            let n =
                unsafe { libc::read(self.fd.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
            match n {
                0 => self.eof = true,
                n if n > 0 => self.buf.extend_from_slice(&chunk[..n as usize]),
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        self.eof = true;
                    }
                }
            }
        }
    }
}

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
    fn replies_come_line_by_line_and_the_end_is_an_error() {
        let (read, write) = pipe().unwrap();
        let mut replies = Replies::new(read);
        assert_eq!(replies.line(0), Ok(None));
        let mut w = std::fs::File::from(write);
        w.write_all(b"ready\nforked 12\nexit 1").unwrap();
        assert_eq!(replies.line(10), Ok(Some("ready".to_owned())));
        assert_eq!(replies.line(10), Ok(Some("forked 12".to_owned())));
        assert_eq!(replies.line(0), Ok(None), "a partial line waits");
        drop(w);
        assert_eq!(replies.line(10), Err(()));
    }
}
