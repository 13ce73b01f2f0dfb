//! The working tree as the next audit sees it: a copy that only the watcher writes, and only
//! between audits. An audit of the live tree reads it many times (listing, hashing, each
//! sandbox's copy, the digests a run's trace is checked against, after the run), so a save in
//! the middle would run one version's bytes and cache the result under another's digests: a
//! wrong answer found again later, when the file holds those bytes once more. Against the copy
//! every read of one audit sees the same bytes; a save lands in the live tree, is copied over
//! once the audit it cancelled has ended, and the next audit sees it whole.
//!
//! The copy lives beside the sandboxes (RAM where there is room) under a name that starts
//! with fixgate's pid, so a watcher that was killed has it removed by the next fixgate, and
//! containment hides it from runs as it hides every sandbox. A path from the live tree is
//! written below the copy's root only through real directories: a link or a file where a
//! directory is needed is replaced first, so nothing is ever written through a link.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsmonitor::{known_bytes, Known};
use crate::manifest::FileKind;
use crate::repo_path::RepoPath;
use crate::snapshot::{Repo, Snapshot};

/// The copy of the working tree that audits read.
pub(crate) struct Frozen {
    dir: PathBuf,
}

impl Frozen {
    /// An empty copy in the sandboxes' folder of `temp_dir` (in RAM where `ram` allows).
    pub(crate) fn create(temp_dir: &Path, ram: bool) -> Result<Frozen> {
        let root = crate::sandbox::sandboxes_root(temp_dir, ram);
        std::fs::create_dir_all(&root).map_err(|e| Error::io("create", &root, e))?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-watch-", std::process::id()))
            .tempdir_in(&root)
            .map_err(|e| Error::io("create a folder in", &root, e))?
            .keep();
        let frozen = Frozen { dir };
        let tree = frozen.root();
        std::fs::create_dir(&tree).map_err(|e| Error::io("create", &tree, e))?;
        Ok(frozen)
    }

    /// The copy's root: the root of the snapshots audits get.
    pub(crate) fn root(&self) -> PathBuf {
        self.dir.join("tree")
    }

    /// Copies `path` of the tree at `live` into the copy; `listed`: whether the path belongs
    /// to the snapshot. Returns what the copy holds there now, hashed from the bytes copied
    /// (not read again from the live tree, which may have moved on): `None` when it holds no
    /// file there (removed, a directory, not listed).
    pub(crate) fn copy(&self, live: &Path, path: &RepoPath, listed: bool) -> Result<Option<Known>> {
        let from = live.join(path.to_os_path());
        let to = self.root().join(path.to_os_path());
        let meta = match std::fs::symlink_metadata(&from) {
            Ok(m) if listed => m,
            Ok(_) => {
                remove(&to)?;
                return Ok(None);
            }
            Err(e) if gone(&e) => {
                remove(&to)?;
                return Ok(None);
            }
            Err(e) => return Err(Error::io("stat", &from, e)),
        };
        if meta.is_dir() {
            // Its files come one by one; a file or link the copy has in its place goes.
            if std::fs::symlink_metadata(&to).is_ok_and(|m| !m.is_dir()) {
                remove(&to)?;
            }
            return Ok(None);
        }
        let (bytes, kind, executable) = if meta.file_type().is_symlink() {
            match std::fs::read_link(&from) {
                Ok(t) => (t.as_os_str().as_bytes().to_vec(), FileKind::Link, false),
                Err(e) if gone(&e) => return self.copy(live, path, false),
                Err(e) => return Err(Error::io("read link", &from, e)),
            }
        } else if meta.is_file() {
            match std::fs::read(&from) {
                Ok(b) => (b, FileKind::File, meta.permissions().mode() & 0o111 != 0),
                Err(e) if gone(&e) => return self.copy(live, path, false),
                Err(e) => return Err(Error::io("read", &from, e)),
            }
        } else {
            // A fifo or a socket: not part of a snapshot.
            return self.copy(live, path, false);
        };
        self.parents(path)?;
        let tmp = temporary(&to);
        let _ = std::fs::remove_file(&tmp);
        let written = match kind {
            FileKind::Link => std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&bytes), &tmp),
            FileKind::File => std::fs::write(&tmp, &bytes).and_then(|()| {
                let mode = if executable { 0o755 } else { 0o644 };
                std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
            }),
        };
        written.map_err(|e| Error::io("write", &tmp, e))?;
        if std::fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
            remove(&to)?;
        }
        // A rename replaces a link itself, never what it points to.
        std::fs::rename(&tmp, &to).map_err(|e| Error::io("rename", &tmp, e))?;
        Ok(Some(known_bytes(&bytes, kind, executable)))
    }

    /// The snapshot of the copy as it is now.
    pub(crate) fn snapshot(&self) -> Result<Snapshot> {
        Repo::open(Some(&self.root()), None)?.snapshot(None)
    }

    /// Makes every parent directory of `path` a real directory of the copy.
    fn parents(&self, path: &RepoPath) -> Result<()> {
        let mut dir = self.root();
        let components: Vec<&[u8]> = path.as_bytes().split(|&b| b == b'/').collect();
        for c in &components[..components.len().saturating_sub(1)] {
            dir.push(std::ffi::OsStr::from_bytes(c));
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => continue,
                // A file or a link: removed as such, never a directory another copy made since.
                Ok(_) => match std::fs::remove_file(&dir) {
                    Err(e)
                        if !gone(&e)
                            && !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) =>
                    {
                        return Err(Error::io("remove", &dir, e))
                    }
                    _ => {}
                },
                Err(e) if gone(&e) => {}
                Err(e) => return Err(Error::io("stat", &dir, e)),
            }
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                // Files of one directory are copied side by side: another copy made it first.
                // Only a real directory will do; anything else is checked again next time.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let real = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
                    if !real {
                        return Err(Error::io("create", &dir, e));
                    }
                }
                Err(e) => return Err(Error::io("create", &dir, e)),
            }
        }
        Ok(())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes whatever is at `path` (a file, a link, a directory and what it holds).
fn remove(path: &Path) -> Result<()> {
    let r = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => Err(e),
    };
    r.map_err(|e| Error::io("remove", path, e))
}

/// The name a file is written under before it is renamed into place.
fn temporary(to: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".fixgate-watch-");
    name.push(to.file_name().unwrap_or_default());
    to.with_file_name(name)
}

fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_one_new_directory_copied_side_by_side_all_land() {
        use rayon::prelude::*;
        let live = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..64).map(|i| format!("tests/deep/t{i}.py")).collect();
        std::fs::create_dir_all(live.path().join("tests/deep")).unwrap();
        for n in &names {
            std::fs::write(live.path().join(n), n).unwrap();
        }
        for _ in 0..20 {
            let temp = tempfile::tempdir().unwrap();
            let frozen = Frozen::create(temp.path(), true).unwrap();
            // A file where the directory goes: every copy must replace it, none may fail.
            std::fs::write(frozen.root().join("tests"), "in the way").unwrap();
            names
                .par_iter()
                .map(|n| frozen.copy(live.path(), &RepoPath::from(n.as_str()), true))
                .collect::<Result<Vec<_>>>()
                .expect("every copy lands");
            for n in &names {
                assert_eq!(std::fs::read_to_string(frozen.root().join(n)).unwrap(), *n);
            }
        }
    }

    #[test]
    fn the_copy_follows_files_links_and_modes_and_never_writes_through_a_link() {
        let live = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let temp = tempfile::tempdir().unwrap();
        let frozen = Frozen::create(temp.path(), true).unwrap();
        let copy = |p: &str| frozen.copy(live.path(), &RepoPath::from(p), true).unwrap();
        std::fs::create_dir_all(live.path().join("pkg")).unwrap();
        std::fs::write(live.path().join("pkg/a.py"), "x = 1\n").unwrap();
        std::fs::write(live.path().join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            live.path().join("run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("pkg/a.py", live.path().join("link")).unwrap();
        let a = copy("pkg/a.py").expect("a file");
        assert_eq!(a.hash, blake3::hash(b"x = 1\n"));
        assert!(copy("run.sh").unwrap().executable);
        assert_eq!(copy("link").unwrap().kind, FileKind::Link);
        let snapshot = frozen.snapshot().unwrap();
        let paths: Vec<String> = snapshot
            .entries
            .iter()
            .map(|e| e.path.to_string())
            .collect();
        assert_eq!(paths, ["link", "pkg/a.py", "run.sh"]);
        assert_eq!(
            snapshot.entries[2].kind,
            crate::snapshot::EntryKind::Executable
        );

        // The copy holds a link where the live tree now has a directory: the link goes, and
        // nothing is written where it pointed.
        std::os::unix::fs::symlink(outside.path(), frozen.root().join("dir")).unwrap();
        std::fs::create_dir_all(live.path().join("dir")).unwrap();
        std::fs::write(live.path().join("dir/f.txt"), "inside").unwrap();
        copy("dir/f.txt").expect("copied");
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
        assert_eq!(
            std::fs::read(frozen.root().join("dir/f.txt")).unwrap(),
            b"inside"
        );

        // Removed in the live tree, or no longer listed: gone from the copy.
        std::fs::remove_file(live.path().join("pkg/a.py")).unwrap();
        assert_eq!(copy("pkg/a.py"), None);
        assert_eq!(
            frozen
                .copy(live.path(), &RepoPath::from("run.sh"), false)
                .unwrap(),
            None
        );
        std::fs::remove_dir_all(live.path().join("dir")).unwrap();
        assert_eq!(copy("dir"), None);
        let paths: Vec<String> = frozen
            .snapshot()
            .unwrap()
            .entries
            .iter()
            .map(|e| e.path.to_string())
            .collect();
        assert_eq!(paths, ["link"]);
        let dir = frozen.dir.clone();
        drop(frozen);
        assert!(!dir.exists(), "the copy goes with the watcher");
    }
}
