//! `fixgate cache` maintenance on a disk store: stats, verify, garbage collection, clear.

use std::cell::RefCell;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::disk::{MaintenanceError, TMP_PREFIX};
use crate::{Digest, DiskStore, Warning};

/// A temporary file older than this was left by a killed process and is garbage.
const TMP_GRACE: Duration = Duration::from_secs(3600);

/// Entries and bytes of one area of the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AreaStats {
    /// How many entries.
    pub entries: u64,
    /// Their total size in bytes.
    pub bytes: u64,
}

impl AreaStats {
    fn add(&mut self, bytes: u64) {
        self.entries += 1;
        self.bytes += bytes;
    }
}

/// What a cache directory holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Action records.
    pub ac: AreaStats,
    /// Content-store blobs.
    pub cas: AreaStats,
    /// The trace index: `entries` counts stable keys (0 if the index was busy), `bytes` is the
    /// file size.
    pub index: AreaStats,
}

/// What `verify` checked and what it removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Action records read.
    pub ac_checked: u64,
    /// Blobs read.
    pub cas_checked: u64,
    /// Each bad entry found (and removed), and any trouble with the index.
    pub problems: Vec<Warning>,
}

/// What `gc` removed and what it kept (action records and blobs together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Entries removed.
    pub removed: AreaStats,
    /// Entries kept.
    pub kept: AreaStats,
    /// Index candidates dropped because their result or dependency set is gone.
    pub index_rows_removed: u64,
}

/// One entry file, for eviction.
struct Entry {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> MaintenanceError + 'a {
    move |source| MaintenanceError {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn is_tmp(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(TMP_PREFIX))
}

/// The files directly in `dir` (none if it does not exist).
fn files_in(dir: &Path) -> Result<Vec<(PathBuf, fs::Metadata)>, MaintenanceError> {
    let read = match fs::read_dir(dir) {
        Ok(read) => read,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", dir)(e)),
    };
    let mut out = Vec::new();
    for item in read {
        let item = item.map_err(io_err("list", dir))?;
        // Entries removed by another process between the listing and here are skipped.
        let Ok(meta) = item.metadata() else { continue };
        if meta.is_file() {
            out.push((item.path(), meta));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The shard directories of the content store.
fn shards(cas: &Path) -> Result<Vec<PathBuf>, MaintenanceError> {
    let read = match fs::read_dir(cas) {
        Ok(read) => read,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", cas)(e)),
    };
    let mut out = Vec::new();
    for item in read {
        let item = item.map_err(io_err("list", cas))?;
        if item.file_type().is_ok_and(|t| t.is_dir()) {
            out.push(item.path());
        }
    }
    out.sort();
    Ok(out)
}

impl DiskStore {
    /// Every action-record and blob file (temporary files excluded).
    fn entry_files(&self) -> Result<Vec<(PathBuf, fs::Metadata)>, MaintenanceError> {
        let mut out = files_in(&self.dir().join("ac"))?;
        for shard in shards(&self.dir().join("cas"))? {
            out.extend(files_in(&shard)?);
        }
        out.retain(|(p, _)| !is_tmp(p));
        Ok(out)
    }

    /// Counts the entries and bytes of each area.
    pub fn stats(&self) -> Result<Stats, MaintenanceError> {
        let mut stats = Stats::default();
        for (path, meta) in files_in(&self.dir().join("ac"))? {
            if !is_tmp(&path) {
                stats.ac.add(meta.len());
            }
        }
        for shard in shards(&self.dir().join("cas"))? {
            for (path, meta) in files_in(&shard)? {
                if !is_tmp(&path) {
                    stats.cas.add(meta.len());
                }
            }
        }
        stats.index.entries = self.index().len(&|w| self.warn(w)).unwrap_or(0);
        stats.index.bytes = fs::metadata(self.index().path()).map_or(0, |m| m.len());
        Ok(stats)
    }

    /// Reads every action record and blob, removing each one that fails its check, and checks
    /// the index (a damaged one is moved aside and recreated).
    pub fn verify(&self) -> Result<VerifyReport, MaintenanceError> {
        let problems = RefCell::new(Vec::new());
        let sink = |w: Warning| problems.borrow_mut().push(w);
        let mut report = VerifyReport::default();
        for (path, _) in files_in(&self.dir().join("ac"))? {
            if is_tmp(&path) {
                continue;
            }
            report.ac_checked += 1;
            if Digest::from_hex(&file_name(&path)).is_err() {
                let _ = fs::remove_file(&path);
                sink(Warning::CorruptRecord {
                    path,
                    why: "the file name is not a key".to_string(),
                });
                continue;
            }
            self.read_action(&path, &sink);
        }
        for shard in shards(&self.dir().join("cas"))? {
            for (path, _) in files_in(&shard)? {
                if is_tmp(&path) {
                    continue;
                }
                report.cas_checked += 1;
                match Digest::from_hex(&file_name(&path)) {
                    Ok(digest) => {
                        self.read_blob(&path, &digest, &sink);
                    }
                    Err(_) => {
                        let _ = fs::remove_file(&path);
                        sink(Warning::CorruptBlob { path });
                    }
                }
            }
        }
        self.index().check(&sink);
        report.problems = problems.into_inner();
        Ok(report)
    }

    /// Evicts entries, least recently used first (by modification time, which a hit renews):
    /// every entry unused for longer than `max_age`, then the oldest until action records and
    /// blobs together fit in `max_size` bytes. Drops the index candidates left dangling, and
    /// temporary files a killed process left behind. `now` is the time ages are measured from.
    pub fn gc(
        &self,
        max_size: Option<u64>,
        max_age: Option<Duration>,
        now: SystemTime,
    ) -> Result<GcReport, MaintenanceError> {
        let mut report = GcReport::default();
        let age = |t: SystemTime| now.duration_since(t).unwrap_or(Duration::ZERO);

        self.remove_stale_tmp(now)?;

        let mut entries: Vec<Entry> = self
            .entry_files()?
            .into_iter()
            .map(|(path, meta)| Entry {
                bytes: meta.len(),
                used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                path,
            })
            .collect();
        // Oldest first; the path breaks ties so that eviction is deterministic.
        entries.sort_by(|a, b| a.used.cmp(&b.used).then_with(|| a.path.cmp(&b.path)));

        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        for entry in entries {
            let too_old = max_age.is_some_and(|max| age(entry.used) > max);
            let too_big = max_size.is_some_and(|max| total > max);
            if (too_old || too_big) && remove_entry(&entry.path) {
                report.removed.add(entry.bytes);
                total -= entry.bytes;
            } else {
                report.kept.add(entry.bytes);
            }
        }

        if report.removed.entries > 0 {
            let keep = |row: &crate::index::Row| {
                self.ac_path(&row.output).exists() && self.cas_path(&row.deps).exists()
            };
            report.index_rows_removed = self.index().retain(&keep, &|w| self.warn(w)).unwrap_or(0);
        }
        Ok(report)
    }

    fn remove_stale_tmp(&self, now: SystemTime) -> Result<(), MaintenanceError> {
        let mut dirs = vec![self.dir().to_path_buf(), self.dir().join("ac")];
        dirs.extend(shards(&self.dir().join("cas"))?);
        for dir in dirs {
            for (path, meta) in files_in(&dir)? {
                let stale = meta
                    .modified()
                    .ok()
                    .and_then(|t| now.duration_since(t).ok())
                    .is_some_and(|a| a > TMP_GRACE);
                if is_tmp(&path) && stale {
                    let _ = fs::remove_file(&path);
                }
            }
        }
        Ok(())
    }

    /// Removes every entry and the index, keeping the (empty) layout.
    pub fn clear(&self) -> Result<(), MaintenanceError> {
        for area in ["ac", "cas"] {
            let path = self.dir().join(area);
            match fs::remove_dir_all(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove", &path)(e)),
            }
            fs::create_dir_all(&path).map_err(io_err("create", &path))?;
        }
        for path in [
            self.index().path().to_path_buf(),
            self.index().corrupt_path(),
        ] {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove", &path)(e)),
            }
        }
        Ok(())
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Removes one entry; `false` if it could not be removed (it then counts as kept). One that
/// another process removed already counts as removed.
fn remove_entry(path: &Path) -> bool {
    match fs::remove_file(path) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}
