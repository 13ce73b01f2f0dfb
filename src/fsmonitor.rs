//! The working tree's file hashes kept in memory and refreshed from file events (git's
//! fsmonitor idea): under `fixgate watch`, a file no event named has not changed, so the lock
//! check after a save reads only the files the save touched, where `fixgate lock --check` stats
//! every fixture file and rehashes what the stat cache cannot vouch for (src/statcache.rs).
//!
//! A path an event names is always read again, never trusted by its stat: two writes inside
//! one timestamp tick leave size, mtime and ctime equal (git's "racily clean" entries).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::FixtureGroups;
use crate::error::{Error, Result};
use crate::lock::{Drift, Lock};
use crate::manifest::{FileEntry, FileKind, Manifest};
use crate::repo_path::RepoPath;
use crate::snapshot::{EntryKind, Snapshot};
use crate::statcache::StatCache;

/// What is known of one file of the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Known {
    hash: blake3::Hash,
    size: u64,
    kind: FileKind,
}

/// Every file of a working-tree snapshot with its content hash.
pub(crate) struct TreeHashes {
    root: PathBuf,
    files: BTreeMap<RepoPath, Known>,
}

/// What [`TreeHashes::refresh`] found at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refreshed {
    /// The file's bytes (or link target) are the ones already known.
    Same,
    /// A new file of the snapshot.
    Added,
    /// A file of the snapshot is gone (removed, or now ignored).
    Removed,
    /// Other bytes.
    Modified,
    /// A directory: the caller lists it (its files are refreshed one by one).
    Directory,
}

impl TreeHashes {
    /// Hashes every file of `snapshot` (a working tree), through the stat cache when given.
    pub(crate) fn scan(snapshot: &Snapshot, stat_cache: Option<&mut StatCache>) -> Result<Self> {
        let entries: Vec<&crate::snapshot::Entry> = snapshot.entries.iter().collect();
        let hashes = crate::manifest::hash_entries(snapshot, &entries, stat_cache)?;
        let files = entries
            .iter()
            .zip(hashes)
            .map(|(e, (hash, size))| {
                let kind = match e.kind {
                    EntryKind::Symlink => FileKind::Link,
                    _ => FileKind::File,
                };
                (e.path.clone(), Known { hash, size, kind })
            })
            .collect();
        Ok(TreeHashes {
            root: snapshot.root.clone(),
            files,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }

    /// Brings one path named by an event up to date. `listed` says whether the path belongs to
    /// the snapshot (tracked, or untracked and not ignored); one that does not is forgotten.
    pub(crate) fn refresh(&mut self, path: &RepoPath, listed: bool) -> Result<Refreshed> {
        let full = self.root.join(path.to_os_path());
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            // A file that vanished into a directory that vanished: gone too.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => None,
            Err(e) => return Err(Error::io("stat", &full, e)),
        };
        let now = match meta {
            Some(m) if m.is_dir() => {
                // A file replaced by a directory is gone as a file.
                self.files.remove(path);
                return Ok(Refreshed::Directory);
            }
            Some(m) if listed && (m.is_file() || m.file_type().is_symlink()) => {
                read_known(&full, &m)?
            }
            // Gone, ignored, or neither a file nor a link (a fifo, a socket).
            _ => None,
        };
        let before = match now {
            Some(k) => self.files.insert(path.clone(), k),
            None => self.files.remove(path),
        };
        Ok(match (before, now) {
            (None, Some(_)) => Refreshed::Added,
            (Some(_), None) => Refreshed::Removed,
            (b, n) if b == n => Refreshed::Same,
            _ => Refreshed::Modified,
        })
    }

    /// Forgets every file under `dir` (a directory that was removed or moved away); returns
    /// the paths forgotten.
    pub(crate) fn forget_under(&mut self, dir: &RepoPath) -> Vec<RepoPath> {
        let gone = self.paths_under(dir);
        for p in &gone {
            self.files.remove(p);
        }
        gone
    }

    /// One digest of every path with its content: equal digests, equal trees.
    pub(crate) fn digest(&self) -> blake3::Hash {
        let mut h = blake3::Hasher::new_derive_key("fixgate watched tree v1");
        for (path, k) in &self.files {
            h.update(&(path.as_bytes().len() as u64).to_le_bytes());
            h.update(path.as_bytes());
            h.update(&[k.kind as u8]);
            h.update(k.hash.as_bytes());
        }
        h.finalize()
    }

    /// Whether both know the same paths.
    pub(crate) fn same_paths(&self, other: &TreeHashes) -> bool {
        self.files.keys().eq(other.files.keys())
    }

    /// The paths whose content differs between `self` and `other` (added, removed, modified).
    pub(crate) fn differences(&self, other: &TreeHashes) -> Vec<RepoPath> {
        let mut out: Vec<RepoPath> = self
            .files
            .iter()
            .filter(|(p, k)| other.files.get(*p) != Some(*k))
            .map(|(p, _)| p.clone())
            .collect();
        out.extend(
            other
                .files
                .keys()
                .filter(|p| !self.files.contains_key(*p))
                .cloned(),
        );
        out.sort();
        out
    }

    /// The paths known under `dir` (every path for the root, `dir` empty).
    pub(crate) fn paths_under(&self, dir: &RepoPath) -> Vec<RepoPath> {
        let mut prefix = dir.as_bytes().to_vec();
        if !prefix.is_empty() {
            prefix.push(b'/');
        }
        self.files
            .keys()
            .filter(|p| p.as_bytes().starts_with(&prefix))
            .cloned()
            .collect()
    }

    /// The fixture manifest of the tree as known, without touching the disk.
    pub(crate) fn manifest(&self, groups: &FixtureGroups) -> Manifest {
        let files = self
            .files
            .iter()
            .filter_map(|(path, k)| {
                groups.group_of(path).map(|g| FileEntry {
                    blake3: k.hash.to_hex().to_string(),
                    group: g.to_owned(),
                    kind: k.kind,
                    path: path.clone(),
                    size: k.size,
                })
            })
            .collect();
        Manifest::from_files(groups, files)
    }

    /// The drift of the tree as known against `lock`. Only SHA-256 pins (teams' own locks)
    /// read fixture bytes, since the tree's hashes are blake3.
    pub(crate) fn check_lock(&self, groups: &FixtureGroups, lock: &Lock) -> Vec<Drift> {
        let manifest = self.manifest(groups);
        let root = self.root.clone();
        let mut read = move |p: &RepoPath| std::fs::read(root.join(p.to_os_path())).ok();
        lock.check_with(&manifest, &mut read)
    }
}

/// Hashes a file or a link's target; `None` when it vanished in between.
fn read_known(full: &Path, meta: &std::fs::Metadata) -> Result<Option<Known>> {
    use std::os::unix::ffi::OsStrExt;
    if meta.file_type().is_symlink() {
        return Ok(match std::fs::read_link(full) {
            Ok(target) => {
                let bytes = target.as_os_str().as_bytes();
                Some(Known {
                    hash: blake3::hash(bytes),
                    size: bytes.len() as u64,
                    kind: FileKind::Link,
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("read link", full, e)),
        });
    }
    let mut hasher = blake3::Hasher::new();
    match hasher.update_mmap(full) {
        Ok(_) => Ok(Some(Known {
            size: hasher.count(),
            hash: hasher.finalize(),
            kind: FileKind::File,
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", full, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, TreeHashes) {
        let dir = tempfile::tempdir().unwrap();
        for (p, text) in files {
            let full = dir.path().join(p);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        let repo = crate::snapshot::Repo::open(Some(dir.path()), None).unwrap();
        let snapshot = repo.snapshot(None).unwrap();
        let hashes = TreeHashes::scan(&snapshot, None).unwrap();
        (dir, hashes)
    }

    fn groups(paths: &[&str]) -> FixtureGroups {
        let manifest = "data: tests/fixtures/**\n";
        let paths: Vec<RepoPath> = paths.iter().map(|p| RepoPath::from(*p)).collect();
        crate::config::load(&crate::config::ConfigInputs {
            manifest_file: Some(manifest.as_bytes()),
            pyproject: None,
            paths: &paths,
        })
        .unwrap()
        .groups
    }

    #[test]
    fn a_rewrite_with_the_same_bytes_is_no_change_and_new_bytes_are() {
        let (dir, mut hashes) = tree(&[("a.py", "x = 1\n")]);
        let a = RepoPath::from("a.py");
        std::fs::write(dir.path().join("a.py"), "x = 1\n").unwrap();
        assert_eq!(hashes.refresh(&a, true).unwrap(), Refreshed::Same);
        // Same size, written at once: a stat could not tell, the bytes do.
        std::fs::write(dir.path().join("a.py"), "x = 2\n").unwrap();
        assert_eq!(hashes.refresh(&a, true).unwrap(), Refreshed::Modified);
        assert_eq!(hashes.refresh(&a, true).unwrap(), Refreshed::Same);
    }

    #[test]
    fn removed_ignored_and_new_files_and_directories() {
        let (dir, mut hashes) = tree(&[("a.py", "1"), ("pkg/b.py", "2")]);
        let before = TreeHashes {
            root: hashes.root.clone(),
            files: hashes.files.clone(),
        };
        std::fs::remove_file(dir.path().join("a.py")).unwrap();
        assert_eq!(
            hashes.refresh(&RepoPath::from("a.py"), true).unwrap(),
            Refreshed::Removed
        );
        assert_eq!(
            hashes.refresh(&RepoPath::from("a.py"), true).unwrap(),
            Refreshed::Same,
            "gone and still gone"
        );
        std::fs::write(dir.path().join("new.py"), "3").unwrap();
        assert_eq!(
            hashes.refresh(&RepoPath::from("new.py"), false).unwrap(),
            Refreshed::Same,
            "an ignored file is not part of the tree"
        );
        assert_eq!(
            hashes.refresh(&RepoPath::from("new.py"), true).unwrap(),
            Refreshed::Added
        );
        assert_eq!(
            hashes.differences(&before),
            [RepoPath::from("a.py"), RepoPath::from("new.py")]
        );
        assert_ne!(hashes.digest(), before.digest());
        assert_eq!(
            hashes.refresh(&RepoPath::from("pkg"), true).unwrap(),
            Refreshed::Directory
        );
        assert_eq!(hashes.paths_under(&RepoPath::from("pkg")).len(), 1);
        assert_eq!(
            hashes.forget_under(&RepoPath::from("pkg")),
            [RepoPath::from("pkg/b.py")]
        );
        assert_eq!(hashes.len(), 1, "new.py is left");
    }

    #[test]
    fn the_lock_check_from_memory_matches_the_lock_written_from_disk() {
        let files = [
            ("tests/fixtures/rates.json", "{\"tax\": 0.25}\n"),
            ("tests/test_a.py", "def test_a(): pass\n"),
        ];
        let (dir, mut hashes) = tree(&files);
        let groups = groups(&files.map(|f| f.0));
        let lock = Lock::from_manifest(&hashes.manifest(&groups));
        assert!(hashes.check_lock(&groups, &lock).is_empty());
        let rates = RepoPath::from("tests/fixtures/rates.json");
        std::fs::write(dir.path().join("tests/fixtures/rates.json"), "{}\n").unwrap();
        assert!(
            hashes.check_lock(&groups, &lock).is_empty(),
            "no event, no change: nothing is read"
        );
        hashes.refresh(&rates, true).unwrap();
        let drift = hashes.check_lock(&groups, &lock);
        assert_eq!(drift.len(), 1, "{drift:?}");
        assert_eq!(drift[0].path, rates);
    }
}
