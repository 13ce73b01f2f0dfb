//! The stat cache: like git's index, it remembers each working-tree file's stat data with its
//! hash, so an unchanged tree is re-manifested without reading file contents.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::repo_path::RepoPath;

const VERSION: u32 = 3;

/// A file whose mtime is this close to the moment the cache is written may still change within
/// the filesystem's timestamp granularity without its stat changing ("racily clean", in git's
/// words). Such entries are not stored, so the next run hashes them again.
const RACY_WINDOW_NS: i128 = 2_000_000_000;

/// The stat fields whose change means the content may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StatKey {
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ctime_ns: i128,
    pub(crate) ino: u64,
    pub(crate) dev: u64,
    pub(crate) mode: u32,
}

impl StatKey {
    pub(crate) fn from_metadata(meta: &Metadata) -> StatKey {
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

/// The file: `MAGIC`, the version, the record count, the records sorted by path (so a loaded
/// cache is searched in place rather than rebuilt as a map: on a warm manifest of a large
/// tree, building a map was a third of the run), and the blake3 of everything before it, so a
/// damaged file is an empty cache rather than a wrong hash. Fixed-width little-endian fields:
/// decoding 10,000 records through serde cost more than reading the file.
const MAGIC: &[u8; 4] = b"FGSC";

fn encode(records: &[&Record]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + records.len() * 128);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(records.len() as u64).to_le_bytes());
    for (path, k, hash) in records {
        out.extend_from_slice(&(path.len() as u32).to_le_bytes());
        out.extend_from_slice(path);
        out.extend_from_slice(&k.size.to_le_bytes());
        out.extend_from_slice(&k.mtime_ns.to_le_bytes());
        out.extend_from_slice(&k.ctime_ns.to_le_bytes());
        out.extend_from_slice(&k.ino.to_le_bytes());
        out.extend_from_slice(&k.dev.to_le_bytes());
        out.extend_from_slice(&k.mode.to_le_bytes());
        out.extend_from_slice(hash);
    }
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    out
}

/// The records of a file written by [`encode`]; `None` for anything else.
fn decode(bytes: &[u8]) -> Option<Vec<Record>> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if blake3::hash(body).as_bytes() != sum {
        return None;
    }
    let mut r = Reader(body);
    if r.take(4)? != MAGIC || u32::from_le_bytes(r.array()?) != VERSION {
        return None;
    }
    let count = u64::from_le_bytes(r.array()?) as usize;
    let mut records = Vec::with_capacity(count.min(body.len() / 32));
    for _ in 0..count {
        let len = u32::from_le_bytes(r.array()?) as usize;
        let path = r.take(len)?.to_vec();
        let key = StatKey {
            size: u64::from_le_bytes(r.array()?),
            mtime_ns: i128::from_le_bytes(r.array()?),
            ctime_ns: i128::from_le_bytes(r.array()?),
            ino: u64::from_le_bytes(r.array()?),
            dev: u64::from_le_bytes(r.array()?),
            mode: u32::from_le_bytes(r.array()?),
        };
        records.push((path, key, r.array()?));
    }
    // Sorted, or the binary search would miss: anything else is not our file.
    let sorted = records.windows(2).all(|w| w[0].0 < w[1].0);
    (r.0.is_empty() && sorted).then_some(records)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
}

/// The stat cache of one repository root.
pub(crate) struct StatCache {
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
    pub(crate) fn load(cache_dir: &Path, repo_root: &Path) -> StatCache {
        use std::os::unix::ffi::OsStrExt;
        let name = blake3::hash(repo_root.as_os_str().as_bytes()).to_hex();
        let file = cache_dir.join("stat").join(format!("{}.bin", &name[..32]));
        let entries = std::fs::read(&file)
            .ok()
            .and_then(|bytes| decode(&bytes))
            .unwrap_or_default();
        StatCache {
            file,
            entries,
            fresh: HashMap::new(),
            dirty: false,
        }
    }

    pub(crate) fn lookup(&self, path: &RepoPath, key: &StatKey) -> Option<blake3::Hash> {
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

    pub(crate) fn insert(&mut self, path: RepoPath, key: StatKey, hash: blake3::Hash) {
        self.fresh
            .insert(path.as_bytes().to_vec(), (key, *hash.as_bytes()));
        self.dirty = true;
    }

    /// Writes the cache (temporary file, then rename). Failing to save costs only speed, so the
    /// error is returned for a warning, never for a failure.
    pub(crate) fn save(&mut self) -> std::io::Result<()> {
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
        let settled: Vec<&Record> = entries
            .iter()
            .filter(|(_, k, _)| {
                k.mtime_ns < now - RACY_WINDOW_NS && k.ctime_ns < now - RACY_WINDOW_NS
            })
            .collect();
        let bytes = encode(&settled);
        self.entries = entries;
        std::io::Write::write_all(&mut tmp, &bytes)?;
        tmp.persist(&self.file).map_err(|e| e.error)?;
        self.dirty = false;
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
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
        let (b, a) = ((b"b".to_vec(), key, [0; 32]), (b"a".to_vec(), key, [0; 32]));
        std::fs::create_dir_all(cache.file.parent().unwrap()).unwrap();
        std::fs::write(&cache.file, encode(&[&b, &a])).unwrap();
        assert!(StatCache::load(dir.path(), Path::new("/repo")).is_empty());
        std::fs::write(&cache.file, encode(&[&a, &b])).unwrap();
        assert!(!StatCache::load(dir.path(), Path::new("/repo")).is_empty());
    }

    #[test]
    fn every_damaged_byte_or_truncation_is_an_empty_cache() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = StatCache::load(dir.path(), Path::new("/repo"));
        cache.insert(
            RepoPath::from("tests/data/a.json"),
            old_key(1),
            blake3::hash(b"a"),
        );
        cache.save().unwrap();
        let good = std::fs::read(&cache.file).unwrap();
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            std::fs::write(&cache.file, &bad).unwrap();
            assert!(
                StatCache::load(dir.path(), Path::new("/repo")).is_empty(),
                "byte {i}"
            );
            std::fs::write(&cache.file, &good[..i]).unwrap();
            assert!(
                StatCache::load(dir.path(), Path::new("/repo")).is_empty(),
                "cut {i}"
            );
        }
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
