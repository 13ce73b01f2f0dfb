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
//!
//! Here: the pool of zygotes (which one serves which run, and when a snapshot's runs start
//! fresh instead) and the lease of one to a run. A zygote itself is `zygote.rs`, what it is
//! known by `zygote_key.rs`, the counts for the report `fork_stats.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::pytest::events::{Collection, Trace};
use crate::pytest::zygote::{Launch, Purpose, Zygote};
use crate::pytest::zygote_key::{identity, Key, Keys};
use crate::sandbox::Overlay;
use crate::snapshot::Snapshot;

/// The counts of the runs' starts, which the pools of one invocation share (re-exported: the
/// invocation's context keeps them, the report shows them).
pub(crate) use crate::pytest::fork_stats::{ForkStats, ForkSummary};
/// What a zygote is known by, which the engine names for the collections it asks for.
pub(crate) use crate::pytest::zygote_key::{same_snapshot, Carried};

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
        let keys = Keys::new(snap, launch.carried, launch.record_code);
        let pyproject = snapshot.read_path("pyproject.toml").ok().flatten();
        if pyproject.is_some_and(|b| crate::config::fork_setting(&b) == Some(false)) {
            self.refuse(snap, "[tool.fixgate] fork = false".to_owned());
            return None;
        }
        let idle = idle_keys(launch.purpose, launch.record_code, keys.zygote, snap)
            .into_iter()
            .find_map(|key| self.take_idle(key));
        // A run may fork from a zygote that made only some modules' items when its order is
        // among them, and its collection is one the audit's was checked against (a spare beside
        // a collection that ran fresh after all is not).
        let idle = match (idle, launch.purpose, order) {
            (None, Purpose::Run, Some(order)) => {
                let noted: HashSet<Key> = self.collections.lock().ok()?.keys().copied().collect();
                self.take_idle_where(|z| {
                    z.keys.snapshot == snap
                        && (z.records || !launch.record_code)
                        && noted.contains(&z.keys.collection)
                        && z.makes_all(order)
                })
            }
            (idle, ..) => idle,
        };
        let mut zygote = match idle {
            Some(z) => z,
            None => self.start(launch, snapshot, keys)?,
        };
        let fresh = self
            .collections
            .lock()
            .ok()?
            .get(&zygote.keys.collection)
            .cloned();
        if fresh.is_some_and(|fresh| fresh != zygote.collected) {
            self.retire(zygote);
            self.refuse(
                snap,
                "collection is order-sensitive: the warm interpreter collected other tests, or \
                 another order, than the audit's collection"
                    .to_owned(),
            );
            return None;
        }
        if let Some(order) = order {
            let known: HashSet<&str> = zygote.collected.iter().map(String::as_str).collect();
            if !order.iter().all(|id| known.contains(id.as_str())) {
                // A fresh process reports the unknown ids in its own words.
                self.give_back(zygote);
                return None;
            }
        }
        if let Err(e) = zygote.restore() {
            self.retire(zygote);
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

    /// A new zygote for `launch` in a slot of its own (`None`: every slot busy, or it did not
    /// start; a start that says something about the snapshot refuses it).
    fn start(&self, launch: &Launch, snapshot: &Snapshot, keys: Keys) -> Option<Zygote> {
        if !self.make_room(launch.purpose != Purpose::Prewarm) {
            return None; // every slot busy: this run starts fresh
        }
        match Zygote::start(launch, snapshot, keys, &self.stats) {
            Ok(z) => {
                if launch.purpose == Purpose::Prewarm {
                    self.stats.count_prewarmed();
                }
                Some(z)
            }
            Err(failure) => {
                self.live.fetch_sub(1, Ordering::SeqCst);
                // A cancelled start says nothing about the snapshot: under `fixgate watch` the
                // next audit may fork from it. Nor does a collection's failure: the fresh one
                // after it tells. A collection that did not end in time does: this snapshot's
                // runs start fresh (each bounded alike, with what it did).
                let said = !launch.interrupted.load(Ordering::SeqCst)
                    && launch.purpose != Purpose::Collect;
                if failure.stalled || said {
                    self.refuse(keys.snapshot, failure.reason);
                }
                None
            }
        }
    }

    /// Kills a zygote that serves no more and frees its slot.
    fn retire(&self, zygote: Zygote) {
        drop(zygote);
        self.live.fetch_sub(1, Ordering::SeqCst);
    }

    fn take_idle(&self, key: Key) -> Option<Zygote> {
        self.take_idle_where(|z| z.keys.zygote == key)
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
                Some(z) => self.retire(z),
                None => return false,
            }
        }
    }

    fn give_back(&self, zygote: Zygote) {
        match self.idle.lock() {
            Ok(mut idle) => idle.push(zygote),
            Err(_) => self.retire(zygote),
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
        self.zygote.as_mut()?.take_items()
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
            if z.healthy && !z.busy() {
                self.pool.give_back(z);
            } else {
                self.pool.retire(z);
            }
        }
    }
}

/// The idle zygotes a checkout for `purpose` may take, by key, in order of preference: the
/// zygote of its own key (`key`); for a run or a prewarm that records no code, also one that
/// traced the snapshot's whole collection, which forks plain runs as well (each forked run says
/// what it records), so that a scoped audit's runs share it. A collection and a spare take none:
/// only a new zygote holds its collection described item by item, and a spare is one zygote
/// more than the idle ones.
fn idle_keys(purpose: Purpose, record_code: bool, key: Key, snapshot: Key) -> Vec<Key> {
    match (purpose, record_code) {
        (Purpose::Collect | Purpose::Spare, _) => Vec::new(),
        (Purpose::Run | Purpose::Prewarm, true) => vec![key],
        (Purpose::Run | Purpose::Prewarm, false) => {
            let recorded = Keys::new(snapshot, &Carried::default(), true).zygote;
            vec![key, recorded]
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::pytest::command::PreparedCommand;
    use crate::sandbox::Sandbox;

    fn snapshot_of(dir: &Path) -> Snapshot {
        crate::snapshot::Repo::open(Some(dir), None)
            .and_then(|r| r.snapshot(None))
            .unwrap()
    }

    /// `f` with a launch for `purpose` that must never start a zygote.
    fn refusing<R>(purpose: Purpose, f: impl FnOnce(&Launch) -> R) -> R {
        let env = Arc::new(
            crate::environment::Environment::from_vars(std::iter::empty(), None, None).unwrap(),
        );
        let host = crate::contain::Host::probe(&env, Default::default());
        let interrupted = AtomicBool::new(false);
        let sandbox = |_: &Snapshot| -> crate::error::Result<Sandbox> {
            panic!("a refused checkout made a sandbox")
        };
        let prepare = |_: &Sandbox, _: &Path| -> PreparedCommand {
            panic!("a refused checkout prepared a zygote")
        };
        f(&Launch {
            sandbox: &sandbox,
            interrupted: &interrupted,
            prepare: &prepare,
            host: &host,
            record_code: false,
            purpose,
            carried: &Carried::default(),
            stall_after: std::time::Duration::from_secs(1),
        })
    }

    fn fallbacks(pool: &Pool) -> Vec<String> {
        pool.stats().summary().fallbacks
    }

    #[test]
    fn a_pool_turned_off_forks_nothing_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = snapshot_of(dir.path());
        let stats = Arc::new(ForkStats::default());
        let pool = Pool::new(2, Some("FIXGATE_FORK=0".into()), stats);
        let lease = refusing(Purpose::Run, |l| {
            pool.checkout(l, &snapshot, &Vec::new(), None)
        });
        assert!(lease.is_none());
        assert_eq!(fallbacks(&pool), ["FIXGATE_FORK=0"]);
        assert_eq!(pool.slots(), 2);
    }

    #[test]
    fn a_run_on_replaced_fixture_bytes_starts_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = snapshot_of(dir.path());
        let pool = Pool::new(1, None, Arc::new(ForkStats::default()));
        let overlay: Overlay = vec![(
            crate::repo_path::RepoPath::parse_lossless("tests/data.json"),
            Some(b"{}".to_vec()),
        )];
        let lease = refusing(Purpose::Run, |l| {
            pool.checkout(l, &snapshot, &overlay, None)
        });
        assert!(lease.is_none());
        assert_eq!(
            fallbacks(&pool),
            ["runs with replaced fixture bytes (replay) start fresh"]
        );
    }

    #[test]
    fn a_snapshot_that_says_fork_false_is_refused_for_good() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("pyproject.toml"),
            "[tool.fixgate]\nfork = false\n",
        )
        .unwrap();
        let snapshot = snapshot_of(dir.path());
        let pool = Pool::new(1, None, Arc::new(ForkStats::default()));
        for purpose in [Purpose::Collect, Purpose::Run, Purpose::Prewarm] {
            let lease = refusing(purpose, |l| pool.checkout(l, &snapshot, &Vec::new(), None));
            assert!(lease.is_none(), "{purpose:?}");
        }
        // Refused once, said once.
        assert_eq!(fallbacks(&pool), ["[tool.fixgate] fork = false"]);
        assert_eq!(pool.refused.lock().unwrap().len(), 1);
    }

    #[test]
    fn which_idle_zygote_each_checkout_may_take() {
        let (own, snap) = ([1u8; 32], [2u8; 32]);
        let traced = Keys::new(snap, &Carried::default(), true).zygote;
        assert_eq!(
            idle_keys(Purpose::Collect, false, own, snap),
            Vec::<Key>::new()
        );
        assert_eq!(
            idle_keys(Purpose::Spare, true, own, snap),
            Vec::<Key>::new()
        );
        // A run that records code needs a zygote that traced its collection: its own key.
        assert_eq!(idle_keys(Purpose::Run, true, own, snap), [own]);
        assert_eq!(idle_keys(Purpose::Prewarm, true, own, snap), [own]);
        // One that records none forks from its own, else from the traced whole collection's.
        assert_eq!(idle_keys(Purpose::Run, false, own, snap), [own, traced]);
        assert_eq!(idle_keys(Purpose::Prewarm, false, own, snap), [own, traced]);
    }
}
