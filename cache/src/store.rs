//! The `Store` contract the graph caches through, its records, and the warnings a store reports.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Digest;

/// How many candidate traces the index keeps per stable key, most recent first. A fixture that
/// flips between a few contents keeps hitting; a long tail of one-off dependency sets does not
/// grow the index.
pub const MAX_TRACE_CANDIDATES: usize = 8;

/// What the action cache holds for a key: where the output is, and whether it is a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// The output blob in the content store.
    pub output: Digest,
    /// The output is a failure that is data (cached like a pass): the blob holds its message.
    pub failed: bool,
}

/// One dependency a run discovered: a repo-relative path and its content digest, or `None` when
/// the run looked for the file and it did not exist (an import probe that missed is a dependency
/// too: creating that file must invalidate the trace).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Dep {
    /// Repo-relative path, `/`-separated.
    pub path: String,
    /// The content digest when the run read it, `None` if it did not exist.
    pub digest: Option<Digest>,
}

impl Dep {
    /// A file that existed with this content.
    pub fn file(path: impl Into<String>, digest: Digest) -> Dep {
        Dep {
            path: path.into(),
            digest: Some(digest),
        }
    }

    /// A file the run looked for and did not find.
    pub fn absent(path: impl Into<String>) -> Dep {
        Dep {
            path: path.into(),
            digest: None,
        }
    }
}

/// A verifying trace: the dependency set of one execution and the action-cache key of its
/// result. It stays valid while every dependency still has its recorded digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// Every dependency, sorted by path, without duplicates.
    pub deps: Vec<Dep>,
    /// The action-cache key the result is stored under.
    pub output: Digest,
}

impl TraceEntry {
    /// Builds an entry, sorting and deduplicating `deps` (the first digest seen for a path wins).
    pub fn new(mut deps: Vec<Dep>, output: Digest) -> TraceEntry {
        // A stable sort keeps the caller's order among equal paths, so dedup keeps the first.
        deps.sort_by(|a, b| a.path.cmp(&b.path));
        deps.dedup_by(|later, first| later.path == first.path);
        TraceEntry { deps, output }
    }

    /// The first dependency whose current digest differs from the recorded one, as
    /// `(dep, current)`; `None` when the trace still holds.
    pub fn first_changed(
        &self,
        current: &dyn Fn(&str) -> Option<Digest>,
    ) -> Option<(&Dep, Option<Digest>)> {
        self.deps.iter().find_map(|dep| {
            let now = current(&dep.path);
            (now != dep.digest).then_some((dep, now))
        })
    }
}

/// Something a store noticed and recovered from. Never fatal: the cache is disposable, so the
/// worst outcome of any of these is a miss or an entry not written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Warning {
    /// A content-store blob did not hash to its name; it was removed and read as a miss.
    CorruptBlob {
        /// The blob's file.
        path: PathBuf,
    },
    /// An action record failed to decode (truncated, foreign schema, bad checksum); it was
    /// removed and read as a miss.
    CorruptRecord {
        /// The record's file.
        path: PathBuf,
        /// What was wrong with it.
        why: String,
    },
    /// The trace index could not be opened or read; it was moved aside and a new one created.
    CorruptIndex {
        /// The index file.
        path: PathBuf,
        /// Where the bad file went, if moving it succeeded.
        moved_to: Option<PathBuf>,
        /// The error that revealed the damage.
        why: String,
    },
    /// Other processes held the trace index for longer than the wait bound: the lookup missed,
    /// or the trace was not recorded.
    IndexBusy {
        /// The index file.
        path: PathBuf,
        /// How long this process waited.
        waited: Duration,
    },
    /// The cache directory was written by another schema version and was cleared.
    SchemaCleared {
        /// The cache directory.
        dir: PathBuf,
        /// What its `VERSION` file said.
        found: String,
    },
    /// Reading or writing a cache file failed for another reason (permissions, disk full); the
    /// entry was treated as a miss or not written.
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done, e.g. "write action record".
        op: String,
        /// The I/O error.
        why: String,
    },
    /// The remote cache failed (unreachable, timed out, answered an error); it is not asked
    /// again in this process, and every lookup it would have answered is a miss.
    RemoteUnavailable {
        /// The remote's URL, without a query.
        url: String,
        /// What went wrong. Never holds a credential.
        why: String,
    },
    /// An entry from the remote cache was refused (a blob that does not hash to its digest, a
    /// result without a valid MAC) and read as a miss.
    RemoteRejected {
        /// The remote's URL, without a query.
        url: String,
        /// What was refused, e.g. "blob <hex>".
        what: String,
        /// Why.
        why: String,
    },
    /// A value stored by the graph (not by the store) failed to decode and was ignored.
    CorruptValue {
        /// What the value was, e.g. "last derivation of seed-run(3)".
        what: String,
        /// The decode error.
        why: String,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::CorruptBlob { path } => write!(
                f,
                "cache blob {} does not match its digest; removed it",
                path.display()
            ),
            Warning::CorruptRecord { path, why } => {
                write!(
                    f,
                    "cache record {} is corrupt ({why}); removed it",
                    path.display()
                )
            }
            Warning::CorruptIndex {
                path,
                moved_to: Some(to),
                why,
            } => write!(
                f,
                "cache index {} is corrupt ({why}); moved it to {} and started a new one",
                path.display(),
                to.display()
            ),
            Warning::CorruptIndex {
                path,
                moved_to: None,
                why,
            } => write!(f, "cache index {} is corrupt ({why})", path.display()),
            Warning::IndexBusy { path, waited } => write!(
                f,
                "cache index {} stayed locked by other processes for {} ms; continued without it",
                path.display(),
                waited.as_millis()
            ),
            Warning::SchemaCleared { dir, found } => write!(
                f,
                "cache {} has schema version {found:?}, not {}; cleared it",
                dir.display(),
                crate::SCHEMA
            ),
            Warning::Io { path, op, why } => {
                write!(
                    f,
                    "cannot {op} {}: {why}; continued without it",
                    path.display()
                )
            }
            Warning::RemoteUnavailable { url, why } => write!(
                f,
                "remote cache {url} is unavailable ({why}); continued with the local cache only"
            ),
            Warning::RemoteRejected { url, what, why } => {
                write!(f, "remote cache {url}: ignored {what}: {why}")
            }
            Warning::CorruptValue { what, why } => {
                write!(f, "cached {what} does not decode ({why}); ignored it")
            }
        }
    }
}

/// Where an action record a store returned came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// This machine's cache (or nothing is known of it).
    Local,
    /// The remote cache, fetched by this process.
    Remote,
}

/// A cache the graph reads and writes through. Every method is infallible by design: a failure
/// is a miss (reads) or a skipped write, with a [`Warning`] the caller collects from
/// [`Store::take_warnings`]. Implementations are shared between the scheduler's threads.
pub trait Store: Send + Sync {
    /// The action record stored under `key`.
    fn get_action(&self, key: &Digest) -> Option<ActionRecord>;

    /// Stores `record` under `key`, replacing any previous one.
    fn put_action(&self, key: &Digest, record: &ActionRecord);

    /// The blob with digest `digest`, verified.
    fn get_blob(&self, digest: &Digest) -> Option<Vec<u8>>;

    /// Stores `bytes` and returns their digest.
    fn put_blob(&self, bytes: &[u8]) -> Digest;

    /// Whether the blob is kept here, so that a caller may drop its copy and read it back
    /// later. Cheaper than [`Store::get_blob`] where the store can tell without reading.
    fn has_blob(&self, digest: &Digest) -> bool {
        self.get_blob(digest).is_some()
    }

    /// The candidate traces recorded for `stable_key`, most recent first.
    fn trace_candidates(&self, stable_key: &Digest) -> Vec<TraceEntry>;

    /// Records `entry` as the most recent candidate of `stable_key`, keeping at most
    /// [`MAX_TRACE_CANDIDATES`]; an entry with the same output key moves to the front.
    fn record_trace(&self, stable_key: &Digest, entry: TraceEntry);

    /// [`Store::record_trace`] for each of `entries`, in order; a store whose writes commit
    /// (the disk store's index) makes it one commit.
    fn record_traces(&self, entries: Vec<(Digest, TraceEntry)>) {
        for (stable_key, entry) in entries {
            self.record_trace(&stable_key, entry);
        }
    }

    /// Drains the warnings noticed since the last call.
    fn take_warnings(&self) -> Vec<Warning>;

    /// Where the record under `action_key` (as returned by [`Store::get_action`] or
    /// [`Store::lookup_trace`]) came from: `explain` says when a node came from the remote.
    fn origin(&self, _action_key: &Digest) -> Origin {
        Origin::Local
    }

    /// The most recent candidate of `stable_key` whose every dependency still has its recorded
    /// digest according to `current` (`None` = the file does not exist), together with its
    /// action record. A candidate whose record is gone (evicted) is passed over.
    fn lookup_trace(
        &self,
        stable_key: &Digest,
        current: &dyn Fn(&str) -> Option<Digest>,
    ) -> Option<(TraceEntry, ActionRecord)> {
        self.trace_candidates(stable_key)
            .into_iter()
            .filter(|entry| entry.first_changed(current).is_none())
            .find_map(|entry| {
                let record = self.get_action(&entry.output)?;
                Some((entry, record))
            })
    }
}

/// Puts `entry` at the front of `candidates`, dropping an older entry with the same output and
/// anything past the bound. Shared by the stores so that they agree on the order.
pub(crate) fn push_candidate(candidates: &mut Vec<TraceEntry>, entry: TraceEntry) {
    candidates.retain(|c| c.output != entry.output);
    candidates.insert(0, entry);
    candidates.truncate(MAX_TRACE_CANDIDATES);
}

/// A store that holds nothing: every read misses, every write is dropped. What a run uses when
/// the cache directory cannot be opened (after reporting why) or caching is turned off.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoStore;

impl Store for NoStore {
    fn get_action(&self, _key: &Digest) -> Option<ActionRecord> {
        None
    }

    fn put_action(&self, _key: &Digest, _record: &ActionRecord) {}

    fn has_blob(&self, _digest: &Digest) -> bool {
        false
    }

    fn get_blob(&self, _digest: &Digest) -> Option<Vec<u8>> {
        None
    }

    fn put_blob(&self, bytes: &[u8]) -> Digest {
        Digest::of(bytes)
    }

    fn trace_candidates(&self, _stable_key: &Digest) -> Vec<TraceEntry> {
        Vec::new()
    }

    fn record_trace(&self, _stable_key: &Digest, _entry: TraceEntry) {}

    fn take_warnings(&self) -> Vec<Warning> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_entry_sorts_and_keeps_the_first_digest_of_a_path() {
        let a = Digest::of(b"a");
        let b = Digest::of(b"b");
        let e = TraceEntry::new(
            vec![Dep::file("z", a), Dep::file("m", a), Dep::file("z", b)],
            a,
        );
        assert_eq!(e.deps, vec![Dep::file("m", a), Dep::file("z", a)]);
    }

    #[test]
    fn first_changed_sees_a_created_file() {
        let e = TraceEntry::new(vec![Dep::absent("pkg/mod.py")], Digest::of(b"o"));
        assert!(e.first_changed(&|_| None).is_none());
        let now = Digest::of(b"new");
        let (dep, current) = e.first_changed(&|_| Some(now)).unwrap();
        assert_eq!(dep.path, "pkg/mod.py");
        assert_eq!(current, Some(now));
    }

    #[test]
    fn candidates_are_bounded_and_deduplicated() {
        let mut c = Vec::new();
        for i in 0..20u8 {
            push_candidate(&mut c, TraceEntry::new(vec![], Digest::of(&[i])));
        }
        assert_eq!(c.len(), MAX_TRACE_CANDIDATES);
        assert_eq!(c[0].output, Digest::of(&[19]));
        push_candidate(&mut c, TraceEntry::new(vec![], Digest::of(&[15])));
        assert_eq!(c.len(), MAX_TRACE_CANDIDATES);
        assert_eq!(c[0].output, Digest::of(&[15]));
        assert_eq!(
            c.iter().filter(|e| e.output == Digest::of(&[15])).count(),
            1
        );
    }

    #[test]
    fn no_store_misses_everything() {
        let s = NoStore;
        let d = s.put_blob(b"x");
        assert_eq!(d, Digest::of(b"x"));
        assert!(s.get_blob(&d).is_none());
        s.put_action(
            &d,
            &ActionRecord {
                output: d,
                failed: false,
            },
        );
        assert!(s.get_action(&d).is_none());
        s.record_trace(&d, TraceEntry::new(vec![], d));
        assert!(s.lookup_trace(&d, &|_| None).is_none());
    }
}
