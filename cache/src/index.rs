//! The trace index in redb: stable key → candidate traces, shared safely between processes.
//!
//! redb lets one handle at a time hold a database file open for writing (an exclusive lock on
//! the file; on Linux an open-file-description lock, so two handles in one process exclude each
//! other exactly like two processes do); read-only handles share the file with each other and
//! exclude writers. Several fixgate processes share one cache directory, so no process keeps
//! the index open: every operation opens the file, runs one transaction and closes it again,
//! holding the lock for milliseconds. Lookups use a read-only handle, which commits nothing and
//! opens in microseconds; records use a read-write handle. An open that finds the file locked
//! (`DatabaseAlreadyOpen`) sleeps a short randomized, doubling delay ([`Backoff`], jittered)
//! and tries again, up to a bounded total wait; past it the operation gives up with a warning (a lookup misses, a record
//! is dropped): the cache never blocks a run for long. Threads of one store share a mutex
//! first, so they queue in-process instead of spinning on the file lock.
//!
//! redb recovers by itself from a process killed mid-transaction (the next read-write open
//! repairs the file). Damage from outside redb (random bytes, truncation) is found by redb's
//! integrity check, which runs on the first read-write open of each store and after any
//! failure; a handle that trips over damage without the check (it may panic: the panic is
//! caught) is retried with it. A damaged file is moved aside to `index.redb.corrupt` and a new
//! one is created. The values are framed by [`crate::envelope`], so even bytes that pass redb's
//! checks are refused unless they are ours, never decoded into a wrong answer.

use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, WriteTransaction,
};
use serde::{Deserialize, Serialize};

use crate::envelope::{self, MAGIC_INDEX};
use crate::{Backoff, Digest, Warning, MAX_TRACE_CANDIDATES};

/// stable key (32 bytes) → framed `Vec<Row>`, most recent first.
const TRACES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("traces");

/// redb's page cache for one short-lived handle: the index is small and read once per open.
const PAGE_CACHE: usize = 4 << 20;
/// The first retry delay after finding the index locked; it doubles up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_millis(1);
const MAX_DELAY: Duration = Duration::from_millis(50);

/// One candidate trace as the index stores it: the dependency set lives in the content store
/// (as a framed blob) so that the index stays small, its integrity check cheap and its lock
/// short; the set is loaded and checked after the index is closed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Row {
    /// The dependency-set blob.
    pub(crate) deps: Digest,
    /// The action-cache key of the result.
    pub(crate) output: Digest,
}

/// How an attempt on the index failed.
enum Failure {
    /// Another handle holds the file: retry.
    Busy,
    /// The file is damaged: move it aside.
    Corrupt(String),
    /// Anything else (permissions, disk full): give up on this operation only.
    Io(String),
}

fn classify(err: redb::Error) -> Failure {
    match err {
        redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => Failure::Busy,
        redb::Error::Io(e)
            if !matches!(
                e.kind(),
                io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
            ) =>
        {
            Failure::Io(e.to_string())
        }
        other => Failure::Corrupt(other.to_string()),
    }
}

/// The trace index of one cache directory.
#[derive(Debug)]
pub(crate) struct Index {
    path: PathBuf,
    wait: Duration,
    local: Mutex<()>,
    /// Whether the next read-write open runs the integrity check: on the first open of this
    /// store, and after any failure, so that damage is found by a check rather than a panic.
    check_next: AtomicBool,
}

/// One try at an operation: `check` asks for a read-write open with the integrity check.
type Attempt<'a, T> = dyn FnMut(bool) -> Result<T, redb::Error> + 'a;

impl Index {
    pub(crate) fn new(path: PathBuf, wait: Duration) -> Index {
        Index {
            path,
            wait,
            local: Mutex::new(()),
            check_next: AtomicBool::new(true),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn set_wait(&mut self, wait: Duration) {
        self.wait = wait;
    }

    /// Where a damaged index is moved; one slot, so damage never accumulates files.
    pub(crate) fn corrupt_path(&self) -> PathBuf {
        self.path.with_extension("redb.corrupt")
    }

    fn open_rw(&self, check: bool) -> Result<Database, redb::Error> {
        let check = check || self.check_next.load(Ordering::Relaxed);
        let db = Database::builder()
            .set_cache_size(PAGE_CACHE)
            .set_check_integrity_on_open(check)
            .create(&self.path)?;
        self.check_next.store(false, Ordering::Relaxed);
        Ok(db)
    }

    /// Runs a read: first on a read-only handle, which commits nothing on open or close (so it
    /// costs microseconds, where a read-write open and close cost two commits) and shares the
    /// file with other readers; any trouble other than a busy file is retried on a checked
    /// read-write handle, which repairs what a killed writer left and reports real damage.
    fn read<T: Default>(
        &self,
        warn: &dyn Fn(Warning),
        mut op: impl FnMut(&ReadTransaction) -> Result<T, redb::Error>,
    ) -> Option<T> {
        let mut read_only = true;
        self.with_retries(warn, &mut |check| {
            if read_only && !check {
                if !self.path.exists() {
                    return Ok(T::default());
                }
                let attempt = panic::catch_unwind(AssertUnwindSafe(|| {
                    let db = Database::builder()
                        .set_cache_size(PAGE_CACHE)
                        .open_read_only(&self.path)?;
                    op(&db.begin_read()?)
                }));
                match attempt {
                    Ok(Err(redb::Error::DatabaseAlreadyOpen)) => {
                        return Err(redb::Error::DatabaseAlreadyOpen)
                    }
                    Ok(Err(_)) | Err(_) => read_only = false,
                    Ok(Ok(value)) => return Ok(value),
                }
            }
            let db = self.open_rw(!read_only || check)?;
            let value = op(&db.begin_read()?)?;
            db.close()?;
            Ok(value)
        })
    }

    /// Runs `op` in a write transaction and commits it.
    fn write<T>(
        &self,
        warn: &dyn Fn(Warning),
        mut op: impl FnMut(&WriteTransaction) -> Result<T, redb::Error>,
    ) -> Option<T> {
        self.with_retries(warn, &mut |check| {
            let db = self.open_rw(check)?;
            let txn = db.begin_write()?;
            let value = op(&txn)?;
            txn.commit()?;
            db.close()?;
            Ok(value)
        })
    }

    /// Runs `attempt` until it succeeds, waiting out other handles with a randomized, doubling
    /// delay up to the wait bound, and moving a damaged file aside once. `None` when the
    /// operation could not run; the reason went to `warn`.
    fn with_retries<T>(&self, warn: &dyn Fn(Warning), attempt: &mut Attempt<'_, T>) -> Option<T> {
        let _queue = self.local.lock().unwrap_or_else(PoisonError::into_inner);
        let start = Instant::now();
        let mut pauses = Backoff::new(FIRST_DELAY, MAX_DELAY)
            .jittered()
            .within(self.wait);
        let mut moved_aside = false;
        let mut check = false;
        loop {
            // A read-write open with the check reports damage as an error; catching a panic
            // too keeps a redb bug on some other damage from taking the audit down with it.
            let failure = match panic::catch_unwind(AssertUnwindSafe(|| attempt(check))) {
                Ok(Ok(value)) => return Some(value),
                Ok(Err(err)) => classify(err),
                Err(payload) => Failure::Corrupt(panic_message(&*payload)),
            };
            if !matches!(failure, Failure::Busy) {
                self.check_next.store(true, Ordering::Relaxed);
            }
            match failure {
                Failure::Busy => {
                    if pauses.pause().is_none() {
                        warn(Warning::IndexBusy {
                            path: self.path.clone(),
                            waited: start.elapsed(),
                        });
                        return None;
                    }
                }
                Failure::Io(why) => {
                    warn(Warning::Io {
                        path: self.path.clone(),
                        op: "open trace index".to_string(),
                        why,
                    });
                    return None;
                }
                Failure::Corrupt(_) if !check => {
                    // Confirm with a checked open before destroying anything: the failure may
                    // have been an unchecked handle meeting a file a killed writer left, which
                    // the checked read-write open repairs.
                    check = true;
                }
                Failure::Corrupt(why) if !moved_aside => {
                    moved_aside = true;
                    let to = self.corrupt_path();
                    let moved_to = match std::fs::rename(&self.path, &to) {
                        Ok(()) => Some(to),
                        // Another process moved it first: the fresh file is its.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                        Err(_) => std::fs::remove_file(&self.path).ok().map(|()| to),
                    };
                    warn(Warning::CorruptIndex {
                        path: self.path.clone(),
                        moved_to,
                        why,
                    });
                }
                Failure::Corrupt(why) => {
                    // A new file failed too: this is not damage we can repair by starting over.
                    warn(Warning::Io {
                        path: self.path.clone(),
                        op: "recreate trace index".to_string(),
                        why,
                    });
                    return None;
                }
            }
        }
    }

    /// Opens the index with the integrity check, so that damage is found (and repaired) now
    /// rather than mid-run.
    pub(crate) fn check(&self, warn: &dyn Fn(Warning)) -> bool {
        self.with_retries(warn, &mut |_| {
            let db = self.open_rw(true)?;
            db.close()?;
            Ok(())
        })
        .is_some()
    }

    /// The candidates of `key`, most recent first; empty on any failure.
    pub(crate) fn get(&self, key: &Digest, warn: &dyn Fn(Warning)) -> Vec<Row> {
        let bytes = self.read(warn, |txn| {
            let table = match txn.open_table(TRACES) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let value = table.get(key.as_bytes().as_slice())?;
            Ok(value.map(|v| v.value().to_vec()))
        });
        match bytes.flatten() {
            None => Vec::new(),
            Some(bytes) => self.decode_rows(key, &bytes, warn),
        }
    }

    fn decode_rows(&self, key: &Digest, bytes: &[u8], warn: &dyn Fn(Warning)) -> Vec<Row> {
        envelope::decode(&MAGIC_INDEX, bytes).unwrap_or_else(|e| {
            warn(Warning::CorruptRecord {
                path: self.path.clone(),
                why: format!("entry {key}: {e}"),
            });
            Vec::new()
        })
    }

    /// Puts each row first among the candidates of its key, in order, in one transaction: a
    /// commit syncs the file several times, which a fresh machine taking many traces from the
    /// remote would otherwise pay per trace.
    pub(crate) fn push_many(&self, pushes: &[(Digest, Row)], warn: &dyn Fn(Warning)) {
        if pushes.is_empty() {
            return;
        }
        self.write(warn, |txn| {
            let mut table = txn.open_table(TRACES)?;
            for (key, row) in pushes {
                let old = table
                    .get(key.as_bytes().as_slice())?
                    .map(|v| v.value().to_vec());
                // A damaged value is replaced rather than kept: the new row is good.
                let mut rows: Vec<Row> = old
                    .and_then(|bytes| envelope::decode(&MAGIC_INDEX, &bytes).ok())
                    .unwrap_or_default();
                rows.retain(|r| r.output != row.output);
                rows.insert(0, *row);
                rows.truncate(MAX_TRACE_CANDIDATES);
                let framed = envelope::encode(&MAGIC_INDEX, &rows);
                table.insert(key.as_bytes().as_slice(), framed.as_slice())?;
            }
            Ok(())
        });
    }

    /// How many stable keys the index holds; `None` if it could not be read.
    pub(crate) fn len(&self, warn: &dyn Fn(Warning)) -> Option<u64> {
        self.read(warn, |txn| match txn.open_table(TRACES) {
            Ok(table) => Ok(table.len()?),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(e.into()),
        })
    }

    /// Drops every row `keep` refuses (and keys left without rows); returns how many rows went.
    pub(crate) fn retain(
        &self,
        keep: &dyn Fn(&Row) -> bool,
        warn: &dyn Fn(Warning),
    ) -> Option<u64> {
        self.write(warn, |txn| {
            let mut table = txn.open_table(TRACES)?;
            let mut removed = 0u64;
            let mut updates: Vec<(Vec<u8>, Vec<Row>)> = Vec::new();
            for item in table.iter()? {
                let (k, v) = item?;
                let rows: Vec<Row> = envelope::decode(&MAGIC_INDEX, v.value()).unwrap_or_default();
                let before = rows.len();
                let kept: Vec<Row> = rows.into_iter().filter(|r| keep(r)).collect();
                if kept.len() != before || before == 0 {
                    removed += (before - kept.len()) as u64;
                    updates.push((k.value().to_vec(), kept));
                }
            }
            for (k, rows) in updates {
                if rows.is_empty() {
                    table.remove(k.as_slice())?;
                } else {
                    let framed = envelope::encode(&MAGIC_INDEX, &rows);
                    table.insert(k.as_slice(), framed.as_slice())?;
                }
            }
            Ok(removed)
        })
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    format!("redb panicked: {text}")
}
