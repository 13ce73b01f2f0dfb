//! The working tree's file hashes kept in memory and refreshed from file events (git's
//! fsmonitor idea): under `fixgate watch`, a file no event named has not changed, so the lock
//! check after a save reads only the files the save touched, where `fixgate lock --check` stats
//! every fixture file and rehashes what the stat cache cannot vouch for (src/statcache.rs).
//!
//! A path an event names is always read again, never trusted by its stat: two writes inside
//! one timestamp tick leave size, mtime and ctime equal (git's "racily clean" entries).

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::FixtureGroups;
use crate::error::{Error, Result};
use crate::lock::{Drift, Lock};
use crate::manifest::{FileEntry, FileKind, Manifest};
use crate::repo_path::RepoPath;

/// What is known of one file: its content hash, size, and whether it is a link or an
/// executable (a mode change is a change of the snapshot, though not of a manifest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Known {
    pub(crate) hash: blake3::Hash,
    pub(crate) size: u64,
    pub(crate) kind: FileKind,
    pub(crate) executable: bool,
}

/// Every file of a working-tree snapshot with its content hash.
#[derive(Clone, Debug, Default)]
pub(crate) struct TreeHashes {
    files: BTreeMap<RepoPath, Known>,
}

/// What [`TreeHashes::refresh`] or [`TreeHashes::set`] found at a path.
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
    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether `path` is a file of the tree.
    pub(crate) fn contains(&self, path: &RepoPath) -> bool {
        self.files.contains_key(path)
    }

    /// Brings one path named by an event up to date from the tree at `root`. `listed` says
    /// whether the path belongs to the snapshot (tracked, or untracked and not ignored); one
    /// that does not is forgotten.
    pub(crate) fn refresh(
        &mut self,
        root: &Path,
        path: &RepoPath,
        listed: bool,
    ) -> Result<Refreshed> {
        let full = root.join(path.to_os_path());
        match read_known(&full)? {
            Found::Directory => {
                // A file replaced by a directory is gone as a file.
                self.files.remove(path);
                Ok(Refreshed::Directory)
            }
            Found::File(k) if listed => Ok(self.set(path, Some(k))),
            Found::File(_) | Found::Nothing => Ok(self.set(path, None)),
        }
    }

    /// Records what `path` holds now (`None`: nothing of the snapshot).
    pub(crate) fn set(&mut self, path: &RepoPath, now: Option<Known>) -> Refreshed {
        let before = match now {
            Some(k) => self.files.insert(path.clone(), k),
            None => self.files.remove(path),
        };
        match (before, now) {
            (None, Some(_)) => Refreshed::Added,
            (Some(_), None) => Refreshed::Removed,
            (b, n) if b == n => Refreshed::Same,
            _ => Refreshed::Modified,
        }
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
            h.update(&[k.kind as u8, k.executable as u8]);
            h.update(k.hash.as_bytes());
        }
        h.finalize()
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
    /// read fixture bytes, through `read`, since the tree's hashes are blake3.
    pub(crate) fn check_lock(
        &self,
        groups: &FixtureGroups,
        lock: &Lock,
        read: &mut dyn FnMut(&RepoPath) -> Option<Vec<u8>>,
    ) -> Vec<Drift> {
        lock.check_with(&self.manifest(groups), read)
    }
}

/// What is at a path.
pub(crate) enum Found {
    /// A regular file or a link, with its hash.
    File(Known),
    Directory,
    /// Nothing, or neither a file, a link nor a directory (a fifo, a socket).
    Nothing,
}

/// Hashes a file or a link's target.
pub(crate) fn read_known(full: &Path) -> Result<Found> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::symlink_metadata(full) {
        Ok(m) => m,
        Err(e) if gone(&e) => return Ok(Found::Nothing),
        Err(e) => return Err(Error::io("stat", full, e)),
    };
    if meta.is_dir() {
        return Ok(Found::Directory);
    }
    if meta.file_type().is_symlink() {
        return match std::fs::read_link(full) {
            Ok(target) => Ok(Found::File(known_bytes(
                target.as_os_str().as_bytes(),
                FileKind::Link,
                false,
            ))),
            Err(e) if gone(&e) => Ok(Found::Nothing),
            Err(e) => Err(Error::io("read link", full, e)),
        };
    }
    if !meta.is_file() {
        return Ok(Found::Nothing);
    }
    let executable = meta.permissions().mode() & 0o111 != 0;
    let mut hasher = blake3::Hasher::new();
    match hasher.update_mmap(full) {
        Ok(_) => Ok(Found::File(Known {
            size: hasher.count(),
            hash: hasher.finalize(),
            kind: FileKind::File,
            executable,
        })),
        Err(e) if gone(&e) => Ok(Found::Nothing),
        Err(e) => Err(Error::io("read", full, e)),
    }
}

/// What is known of these bytes.
pub(crate) fn known_bytes(bytes: &[u8], kind: FileKind, executable: bool) -> Known {
    Known {
        hash: blake3::hash(bytes),
        size: bytes.len() as u64,
        kind,
        executable,
    }
}

/// A path that vanished, or whose directory vanished or became a file, in between.
fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files under `dir` as an event-driven tree would know them.
    fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, TreeHashes) {
        let dir = tempfile::tempdir().unwrap();
        let mut hashes = TreeHashes::default();
        for (p, text) in files {
            let full = dir.path().join(p);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
            hashes
                .refresh(dir.path(), &RepoPath::from(*p), true)
                .unwrap();
        }
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
        assert_eq!(
            hashes.refresh(dir.path(), &a, true).unwrap(),
            Refreshed::Same
        );
        // Same size, written at once: a stat could not tell, the bytes do.
        std::fs::write(dir.path().join("a.py"), "x = 2\n").unwrap();
        assert_eq!(
            hashes.refresh(dir.path(), &a, true).unwrap(),
            Refreshed::Modified
        );
        assert_eq!(
            hashes.refresh(dir.path(), &a, true).unwrap(),
            Refreshed::Same
        );
        // A mode change is a change of the snapshot.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.path().join("a.py"), mode).unwrap();
        assert_eq!(
            hashes.refresh(dir.path(), &a, true).unwrap(),
            Refreshed::Modified
        );
    }

    #[test]
    fn removed_ignored_and_new_files_and_directories() {
        let (dir, mut hashes) = tree(&[("a.py", "1"), ("pkg/b.py", "2")]);
        let root = dir.path();
        let before = hashes.clone();
        std::fs::remove_file(root.join("a.py")).unwrap();
        let a = RepoPath::from("a.py");
        assert_eq!(hashes.refresh(root, &a, true).unwrap(), Refreshed::Removed);
        assert_eq!(
            hashes.refresh(root, &a, true).unwrap(),
            Refreshed::Same,
            "gone and still gone"
        );
        std::fs::write(root.join("new.py"), "3").unwrap();
        let new = RepoPath::from("new.py");
        assert_eq!(
            hashes.refresh(root, &new, false).unwrap(),
            Refreshed::Same,
            "an ignored file is not part of the tree"
        );
        assert_eq!(hashes.refresh(root, &new, true).unwrap(), Refreshed::Added);
        assert_eq!(hashes.differences(&before), [a, new]);
        assert_ne!(hashes.digest(), before.digest());
        let pkg = RepoPath::from("pkg");
        assert_eq!(
            hashes.refresh(root, &pkg, true).unwrap(),
            Refreshed::Directory
        );
        assert_eq!(hashes.paths_under(&pkg).len(), 1);
        assert_eq!(hashes.forget_under(&pkg), [RepoPath::from("pkg/b.py")]);
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
        let mut read = |_: &RepoPath| None;
        assert!(hashes.check_lock(&groups, &lock, &mut read).is_empty());
        let rates = RepoPath::from("tests/fixtures/rates.json");
        std::fs::write(dir.path().join("tests/fixtures/rates.json"), "{}\n").unwrap();
        assert!(
            hashes.check_lock(&groups, &lock, &mut read).is_empty(),
            "no event, no change: nothing is read"
        );
        hashes.refresh(dir.path(), &rates, true).unwrap();
        let drift = hashes.check_lock(&groups, &lock, &mut read);
        assert_eq!(drift.len(), 1, "{drift:?}");
        assert_eq!(drift[0].path, rates);
    }
}
