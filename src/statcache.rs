//! The stat cache: like git's index, it remembers each working-tree file's stat data with its
//! hash, so an unchanged tree is re-manifested without reading file contents.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::repo_path::RepoPath;

const VERSION: u32 = 1;

/// A file whose mtime is this close to the moment the cache is written may still change within
/// the filesystem's timestamp granularity without its stat changing ("racily clean", in git's
/// words). Such entries are not stored, so the next run hashes them again.
const RACY_WINDOW_NS: i128 = 2_000_000_000;

/// The stat fields whose change means the content may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatKey {
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub ino: u64,
    pub dev: u64,
    pub mode: u32,
}

impl StatKey {
    pub fn from_metadata(meta: &Metadata) -> StatKey {
        StatKey {
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
            ino: meta.ino(),
            dev: meta.dev(),
            mode: meta.mode(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    entries: Vec<(Vec<u8>, StatKey, [u8; 32])>,
}

/// The stat cache of one repository root.
pub struct StatCache {
    file: PathBuf,
    entries: HashMap<Vec<u8>, (StatKey, [u8; 32])>,
    dirty: bool,
}

impl StatCache {
    /// Loads the cache for `repo_root` from `cache_dir`. A missing, corrupt or outdated file is
    /// an empty cache: it only ever saves work, it never decides an answer.
    pub fn load(cache_dir: &Path, repo_root: &Path) -> StatCache {
        use std::os::unix::ffi::OsStrExt;
        let name = blake3::hash(repo_root.as_os_str().as_bytes()).to_hex();
        let file = cache_dir.join("stat").join(format!("{}.bin", &name[..32]));
        let entries = std::fs::read(&file)
            .ok()
            .and_then(|bytes| postcard::from_bytes::<Stored>(&bytes).ok())
            .filter(|s| s.version == VERSION)
            .map(|s| s.entries.into_iter().map(|(p, k, h)| (p, (k, h))).collect())
            .unwrap_or_default();
        StatCache {
            file,
            entries,
            dirty: false,
        }
    }

    pub fn lookup(&self, path: &RepoPath, key: &StatKey) -> Option<blake3::Hash> {
        match self.entries.get(path.as_bytes()) {
            Some((k, h)) if k == key => Some(blake3::Hash::from_bytes(*h)),
            _ => None,
        }
    }

    pub fn insert(&mut self, path: RepoPath, key: StatKey, hash: blake3::Hash) {
        self.entries
            .insert(path.as_bytes().to_vec(), (key, *hash.as_bytes()));
        self.dirty = true;
    }

    /// Writes the cache (temporary file, then rename). Failing to save costs only speed, so the
    /// error is returned for a warning, never for a failure.
    pub fn save(&mut self) -> std::io::Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let dir = self.file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        // The reference time is the filesystem's own clock, read off the file we are writing,
        // so that a skew between the system clock and the filesystem cannot hide a racy entry.
        let now = StatKey::from_metadata(&tmp.as_file().metadata()?).mtime_ns;
        let stored = Stored {
            version: VERSION,
            entries: self
                .entries
                .iter()
                .filter(|(_, (k, _))| {
                    k.mtime_ns < now - RACY_WINDOW_NS && k.ctime_ns < now - RACY_WINDOW_NS
                })
                .map(|(p, (k, h))| (p.clone(), *k, *h))
                .collect(),
        };
        let bytes = postcard::to_stdvec(&stored).map_err(std::io::Error::other)?;
        std::io::Write::write_all(&mut tmp, &bytes)?;
        tmp.persist(&self.file).map_err(|e| e.error)?;
        self.dirty = false;
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racily_clean_entries_are_not_saved() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let key = StatKey::from_metadata(&std::fs::metadata(&file).unwrap());
        let mut cache = StatCache::load(dir.path(), Path::new("/repo"));
        cache.insert(RepoPath::from("f"), key, blake3::hash(b"x"));
        cache.save().unwrap();
        // The file was written just now: its entry must not survive the save, or a change
        // within the timestamp granularity would go unseen.
        let again = StatCache::load(dir.path(), Path::new("/repo"));
        assert!(again.lookup(&RepoPath::from("f"), &key).is_none());
    }

    #[test]
    fn old_entries_round_trip_and_a_changed_stat_misses() {
        let dir = tempfile::tempdir().unwrap();
        let key = StatKey {
            size: 1,
            mtime_ns: 1,
            ctime_ns: 1,
            ino: 7,
            dev: 1,
            mode: 0o644,
        };
        let mut cache = StatCache::load(dir.path(), Path::new("/repo"));
        cache.insert(RepoPath::from("f"), key, blake3::hash(b"x"));
        cache.save().unwrap();
        let again = StatCache::load(dir.path(), Path::new("/repo"));
        assert_eq!(
            again.lookup(&RepoPath::from("f"), &key),
            Some(blake3::hash(b"x"))
        );
        let moved = StatKey { mtime_ns: 2, ..key };
        assert!(again.lookup(&RepoPath::from("f"), &moved).is_none());
    }

    #[test]
    fn a_corrupt_cache_file_is_an_empty_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = StatCache::load(dir.path(), Path::new("/repo"));
        std::fs::create_dir_all(cache.file.parent().unwrap()).unwrap();
        std::fs::write(&cache.file, b"\xff\xff garbage").unwrap();
        assert!(StatCache::load(dir.path(), Path::new("/repo")).is_empty());
    }
}
