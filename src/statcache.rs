//! The stat cache: like git's index, it remembers each working-tree file's stat data with its
//! hash, so an unchanged tree is re-manifested without reading file contents.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::repo_path::RepoPath;

const VERSION: u32 = 2;

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

type Record = (Vec<u8>, StatKey, [u8; 32]);

#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    /// Sorted by path, so a loaded cache is searched in place rather than rebuilt as a map:
    /// on a warm manifest of a large tree, building a map was a third of the run.
    entries: Vec<Record>,
}

/// The stat cache of one repository root.
pub struct StatCache {
    file: PathBuf,
    /// What was loaded, sorted by path.
    entries: Vec<Record>,
    /// What this run hashed, merged into `entries` when saving.
    fresh: HashMap<Vec<u8>, (StatKey, [u8; 32])>,
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
            // Written sorted; a file that is not (an older writer, a bit flip that postcard
            // still decodes) would make the search miss, so it counts as corrupt.
            .filter(|s| s.entries.windows(2).all(|w| w[0].0 < w[1].0))
            .map(|s| s.entries)
            .unwrap_or_default();
        StatCache {
            file,
            entries,
            fresh: HashMap::new(),
            dirty: false,
        }
    }

    pub fn lookup(&self, path: &RepoPath, key: &StatKey) -> Option<blake3::Hash> {
        let found = match self.fresh.get(path.as_bytes()) {
            Some((k, h)) => Some((k, h)),
            None => self
                .entries
                .binary_search_by(|(p, _, _)| p.as_slice().cmp(path.as_bytes()))
                .ok()
                .map(|i| (&self.entries[i].1, &self.entries[i].2)),
        };
        match found {
            Some((k, h)) if k == key => Some(blake3::Hash::from_bytes(*h)),
            _ => None,
        }
    }

    pub fn insert(&mut self, path: RepoPath, key: StatKey, hash: blake3::Hash) {
        self.fresh
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
        let fresh = std::mem::take(&mut self.fresh);
        let mut entries = std::mem::take(&mut self.entries);
        entries.retain(|(p, _, _)| !fresh.contains_key(p));
        entries.extend(fresh.into_iter().map(|(p, (k, h))| (p, k, h)));
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let stored = Stored {
            version: VERSION,
            entries: entries
                .iter()
                .filter(|(_, k, _)| {
                    k.mtime_ns < now - RACY_WINDOW_NS && k.ctime_ns < now - RACY_WINDOW_NS
                })
                .cloned()
                .collect(),
        };
        self.entries = entries;
        let bytes = postcard::to_stdvec(&stored).map_err(std::io::Error::other)?;
        std::io::Write::write_all(&mut tmp, &bytes)?;
        tmp.persist(&self.file).map_err(|e| e.error)?;
        self.dirty = false;
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.fresh.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stat of a file written long ago, at `mtime_ns`.
    fn old_key(mtime_ns: i128) -> StatKey {
        StatKey {
            size: 1,
            mtime_ns,
            ctime_ns: 1,
            ino: 7,
            dev: 1,
            mode: 0o644,
        }
    }

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
        let key = old_key(1);
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
    fn a_rehashed_entry_replaces_the_loaded_one_and_the_file_stays_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let key = old_key;
        let mut cache = StatCache::load(dir.path(), Path::new("/repo"));
        for name in ["b", "a", "c"] {
            cache.insert(RepoPath::from(name), key(1), blake3::hash(name.as_bytes()));
        }
        cache.save().unwrap();
        let mut again = StatCache::load(dir.path(), Path::new("/repo"));
        again.insert(RepoPath::from("b"), key(2), blake3::hash(b"new"));
        again.insert(RepoPath::from("0"), key(1), blake3::hash(b"0"));
        assert_eq!(
            again.lookup(&RepoPath::from("b"), &key(2)),
            Some(blake3::hash(b"new"))
        );
        again.save().unwrap();
        let third = StatCache::load(dir.path(), Path::new("/repo"));
        let paths: Vec<&[u8]> = third.entries.iter().map(|e| e.0.as_slice()).collect();
        assert_eq!(paths, [&b"0"[..], b"a", b"b", b"c"]);
        assert!(third.lookup(&RepoPath::from("b"), &key(1)).is_none());
        assert_eq!(
            third.lookup(&RepoPath::from("b"), &key(2)),
            Some(blake3::hash(b"new"))
        );
        assert_eq!(
            third.lookup(&RepoPath::from("c"), &key(1)),
            Some(blake3::hash(b"c"))
        );
    }

    #[test]
    fn an_unsorted_cache_file_is_an_empty_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = StatCache::load(dir.path(), Path::new("/repo"));
        let key = old_key(1);
        let stored = Stored {
            version: VERSION,
            entries: vec![(b"b".to_vec(), key, [0; 32]), (b"a".to_vec(), key, [0; 32])],
        };
        std::fs::create_dir_all(cache.file.parent().unwrap()).unwrap();
        std::fs::write(&cache.file, postcard::to_stdvec(&stored).unwrap()).unwrap();
        assert!(StatCache::load(dir.path(), Path::new("/repo")).is_empty());
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
