//! The on-disk store: Bazel-remote-cache layout (`ac/`, `cas/`) plus the redb trace index.
//!
//! ```text
//! <dir>/VERSION           schema version of everything below
//! <dir>/ac/<key hex>      action cache: framed postcard ActionRecord
//! <dir>/cas/<aa>/<hex>    content store: the blob whose blake3 is <aa><hex...>
//! <dir>/index.redb        trace index (see `index`)
//! ```
//!
//! Every file is written to a temporary file in its own directory and renamed into place, so a
//! reader (or a process killed mid-write) sees the old file or the new one, never half of one.
//! Nothing is fsynced: a torn file after a power loss fails the read-side verification (blob
//! hash, record checksum) and is a miss, which is all a disposable cache needs.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use crate::envelope::{self, MAGIC_ACTION, MAGIC_DEPS};
use crate::index::{Index, Row};
use crate::{ActionRecord, Dep, Digest, Store, TraceEntry, Warning, SCHEMA};

/// Prefix of the temporary files; anything starting with it is never an entry.
pub(crate) const TMP_PREFIX: &str = ".fixgate-tmp-";
/// How long another process may hold the trace index before an operation gives up on it.
pub const DEFAULT_INDEX_WAIT: Duration = Duration::from_secs(5);

/// Why a cache directory cannot be used. The caller reports it and runs uncached ([`NoStore`]).
///
/// [`NoStore`]: crate::NoStore
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory cannot be created, or written.
    #[error("cannot use {} as a cache directory: {source}", path.display())]
    Unusable {
        /// The directory or file that failed.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A newer fixgate owns the directory; clearing it would destroy that one's cache.
    #[error(
        "cache {} has schema version {found}, newer than this fixgate's {SCHEMA}: \
         use another cache directory or upgrade fixgate",
        dir.display()
    )]
    NewerSchema {
        /// The cache directory.
        dir: PathBuf,
        /// The version its `VERSION` file names.
        found: u32,
    },
}

/// A maintenance command (`stats`, `verify`, `gc`, `clear`) failed to list or change the cache.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {}: {source}", path.display())]
pub struct MaintenanceError {
    /// What was being done, e.g. "list".
    pub op: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: io::Error,
}

/// A [`Store`] in a cache directory, shareable between threads and between processes.
#[derive(Debug)]
pub struct DiskStore {
    dir: PathBuf,
    index: Index,
    warnings: Mutex<Vec<Warning>>,
}

impl DiskStore {
    /// Opens (creating if needed) the cache in `dir`.
    ///
    /// A directory of an older or unreadable schema is cleared (with a warning); one of a newer
    /// schema, or one that cannot be created or written, is an error the caller turns into an
    /// uncached run. A damaged index is repaired here, with a warning.
    pub fn open(dir: impl Into<PathBuf>) -> Result<DiskStore, OpenError> {
        let dir = dir.into();
        let store = DiskStore {
            index: Index::new(dir.join("index.redb"), DEFAULT_INDEX_WAIT),
            dir,
            warnings: Mutex::new(Vec::new()),
        };
        store.ensure_layout()?;
        store.check_version()?;
        // Proves the directory is writable now rather than by a stream of warnings later.
        tempfile::Builder::new()
            .prefix(TMP_PREFIX)
            .tempfile_in(&store.dir)
            .map_err(|source| OpenError::Unusable {
                path: store.dir.clone(),
                source,
            })?;
        store.index.check(&|w| store.warn(w));
        Ok(store)
    }

    /// Sets how long an operation waits for other processes to release the trace index
    /// (default [`DEFAULT_INDEX_WAIT`]).
    pub fn with_index_wait(mut self, wait: Duration) -> DiskStore {
        self.index.set_wait(wait);
        self
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ac_dir(&self) -> PathBuf {
        self.dir.join("ac")
    }

    fn cas_dir(&self) -> PathBuf {
        self.dir.join("cas")
    }

    pub(crate) fn ac_path(&self, key: &Digest) -> PathBuf {
        self.ac_dir().join(key.to_hex())
    }

    pub(crate) fn cas_path(&self, digest: &Digest) -> PathBuf {
        let hex = digest.to_hex();
        self.cas_dir().join(&hex[..2]).join(hex)
    }

    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    pub(crate) fn warn(&self, warning: Warning) {
        self.warnings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(warning);
    }

    fn ensure_layout(&self) -> Result<(), OpenError> {
        for d in [self.dir.clone(), self.ac_dir(), self.cas_dir()] {
            fs::create_dir_all(&d).map_err(|source| OpenError::Unusable { path: d, source })?;
        }
        Ok(())
    }

    fn check_version(&self) -> Result<(), OpenError> {
        let path = self.dir.join("VERSION");
        let found = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return self.write_version(&path);
            }
            Err(source) => return Err(OpenError::Unusable { path, source }),
        };
        match found.trim().parse::<u32>() {
            Ok(v) if v == SCHEMA => Ok(()),
            Ok(v) if v > SCHEMA => Err(OpenError::NewerSchema {
                dir: self.dir.clone(),
                found: v,
            }),
            // Older or unreadable: nothing in it can be trusted by this version.
            _ => {
                self.clear().map_err(|e| OpenError::Unusable {
                    path: e.path,
                    source: e.source,
                })?;
                self.warn(Warning::SchemaCleared {
                    dir: self.dir.clone(),
                    found: found.trim().to_string(),
                });
                self.write_version(&path)
            }
        }
    }

    fn write_version(&self, path: &Path) -> Result<(), OpenError> {
        write_atomic(path, format!("{SCHEMA}\n").as_bytes()).map_err(|source| OpenError::Unusable {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Reads and checks the action record at `path`; a bad one is removed and reported.
    pub(crate) fn read_action(&self, path: &Path, warn: &dyn Fn(Warning)) -> Option<ActionRecord> {
        let bytes = read_entry(path, "read action record", warn)?;
        match envelope::decode::<ActionRecord>(&MAGIC_ACTION, &bytes) {
            Ok(record) => Some(record),
            Err(e) => {
                let _ = fs::remove_file(path);
                warn(Warning::CorruptRecord {
                    path: path.to_path_buf(),
                    why: e.to_string(),
                });
                None
            }
        }
    }

    /// Reads the blob at `path` and checks it hashes to `digest`; a bad one is removed and
    /// reported.
    pub(crate) fn read_blob(
        &self,
        path: &Path,
        digest: &Digest,
        warn: &dyn Fn(Warning),
    ) -> Option<Vec<u8>> {
        let bytes = read_entry(path, "read blob", warn)?;
        if Digest::of(&bytes) != *digest {
            let _ = fs::remove_file(path);
            warn(Warning::CorruptBlob {
                path: path.to_path_buf(),
            });
            return None;
        }
        Some(bytes)
    }

    fn load_deps(&self, digest: &Digest) -> Option<Vec<Dep>> {
        let bytes = self.get_blob(digest)?;
        // The blob matched its digest, so a decode failure means it is not a dependency set
        // (a digest collision with another blob is not a practical concern).
        match envelope::decode(&MAGIC_DEPS, &bytes) {
            Ok(deps) => Some(deps),
            Err(e) => {
                self.warn(Warning::CorruptRecord {
                    path: self.cas_path(digest),
                    why: e.to_string(),
                });
                None
            }
        }
    }
}

/// Reads a cache file; a missing one is a silent miss, an unreadable one a miss with a warning.
fn read_entry(path: &Path, op: &str, warn: &dyn Fn(Warning)) -> Option<Vec<u8>> {
    match fs::read(path) {
        Ok(bytes) => {
            touch(path);
            Some(bytes)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            warn(Warning::Io {
                path: path.to_path_buf(),
                op: op.to_string(),
                why: e.to_string(),
            });
            None
        }
    }
}

/// Marks an entry as used, for least-recently-used eviction. Best effort: a read-only cache
/// still serves hits.
fn touch(path: &Path) {
    if let Ok(file) = File::options().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(TMP_PREFIX)
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

impl Store for DiskStore {
    fn get_action(&self, key: &Digest) -> Option<ActionRecord> {
        self.read_action(&self.ac_path(key), &|w| self.warn(w))
    }

    fn put_action(&self, key: &Digest, record: &ActionRecord) {
        let path = self.ac_path(key);
        if let Err(e) = write_atomic(&path, &envelope::encode(&MAGIC_ACTION, record)) {
            self.warn(Warning::Io {
                path,
                op: "write action record".to_string(),
                why: e.to_string(),
            });
        }
    }

    fn get_blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.read_blob(&self.cas_path(digest), digest, &|w| self.warn(w))
    }

    fn has_blob(&self, digest: &Digest) -> bool {
        // A damaged file is found when it is read (a miss and a warning), like any other.
        self.cas_path(digest).is_file()
    }

    fn put_blob(&self, bytes: &[u8]) -> Digest {
        let digest = Digest::of(bytes);
        let path = self.cas_path(&digest);
        // Content-addressed: a file that holds these bytes is the blob. One of the right size
        // is read to be sure: a damaged file kept here would be the next read's miss, and
        // the graph reads an output back once it has let go of its own copy.
        if fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64)
            && fs::read(&path).is_ok_and(|held| held == bytes)
        {
            touch(&path);
            return digest;
        }
        let written = path
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| write_atomic(&path, bytes));
        if let Err(e) = written {
            self.warn(Warning::Io {
                path,
                op: "write blob".to_string(),
                why: e.to_string(),
            });
        }
        digest
    }

    fn trace_candidates(&self, stable_key: &Digest) -> Vec<TraceEntry> {
        let rows = self.index.get(stable_key, &|w| self.warn(w));
        // The dependency sets are loaded after the index is closed again, off its lock.
        rows.into_iter()
            .filter_map(|row| {
                Some(TraceEntry {
                    deps: self.load_deps(&row.deps)?,
                    output: row.output,
                })
            })
            .collect()
    }

    fn record_trace(&self, stable_key: &Digest, entry: TraceEntry) {
        self.record_traces(vec![(*stable_key, entry)]);
    }

    fn record_traces(&self, entries: Vec<(Digest, TraceEntry)>) {
        let rows: Vec<(Digest, Row)> = entries
            .into_iter()
            .map(|(stable_key, entry)| {
                let deps = self.put_blob(&envelope::encode(&MAGIC_DEPS, &entry.deps));
                let row = Row {
                    deps,
                    output: entry.output,
                };
                (stable_key, row)
            })
            .collect();
        self.index.push_many(&rows, &|w| self.warn(w));
    }

    fn take_warnings(&self) -> Vec<Warning> {
        std::mem::take(&mut *self.warnings.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
