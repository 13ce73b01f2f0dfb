//! Sandboxes: a fresh materialized copy of a snapshot in a temporary directory, with its own
//! home and temporary directory, so that no run ever touches the user's working tree.
//!
//! Layout of one sandbox: `tree/` (the copy, the root tests run in), `home/`, `tmp/`, and the
//! files fixgate exchanges with the plugin. The folder's name starts with fixgate's pid, so a
//! later fixgate can remove the sandboxes of one that was killed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::repo_path::RepoPath;
use crate::snapshot::{EntryKind, Snapshot};

static NEXT: AtomicU64 = AtomicU64::new(0);

pub struct Sandbox {
    dir: PathBuf,
    keep: bool,
}

/// Bytes to put over the snapshot's own: `(path, Some(bytes))` writes, `None` removes. Replay
/// uses this to run head code against the base's fixture bytes.
pub type Overlay = Vec<(RepoPath, Option<Vec<u8>>)>;

/// Where sandboxes may live: a RAM file system first (creating and removing a few hundred
/// files per run costs a disk file system far more: a measurable share of a run), then the
/// temporary directory.
fn candidate_roots() -> [PathBuf; 2] {
    let uid = unsafe { libc::getuid() };
    let name = format!("fixgate-sandboxes-{uid}");
    [
        PathBuf::from("/dev/shm").join(&name),
        std::env::temp_dir().join(&name),
    ]
}

/// A RAM file system is used only when it has room to spare for any ordinary repository.
const SHM_MIN_FREE: u64 = 4 << 30;

/// The folder that holds every sandbox of this user.
pub fn sandboxes_root() -> PathBuf {
    let [shm, tmp] = candidate_roots();
    if free_bytes(Path::new("/dev/shm")).is_some_and(|f| f >= SHM_MIN_FREE) {
        return shm;
    }
    tmp
}

fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid C string and `s` a properly sized out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail as u64 * s.f_frsize as u64)
}

impl Sandbox {
    /// Materializes `snapshot` (with `overlay` applied) into a new sandbox.
    pub fn create(snapshot: &Snapshot, overlay: &Overlay) -> Result<Sandbox> {
        let mut root = sandboxes_root();
        if std::fs::create_dir_all(&root).is_err() {
            root = candidate_roots()[1].clone();
            std::fs::create_dir_all(&root).map_err(|e| Error::io("create", &root, e))?;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("{}-{n}-{}", std::process::id(), nonce()));
        let sandbox = Sandbox { dir, keep: false };
        for sub in ["tree", "home", "tmp"] {
            let p = sandbox.dir.join(sub);
            std::fs::create_dir_all(&p).map_err(|e| {
                Error::Infra(format!("failed to create sandbox {}: {e}", p.display()))
            })?;
        }
        sandbox.materialize(snapshot)?;
        for (path, bytes) in overlay {
            let full = sandbox.tree().join(path.to_os_path());
            // Remove first: the snapshot may hold a symlink there, and writing through it
            // would change its target instead of the path.
            let _ = std::fs::remove_file(&full);
            if let Some(bytes) = bytes {
                if let Some(parent) = full.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
                }
                std::fs::write(&full, bytes).map_err(|e| Error::io("write", &full, e))?;
            }
        }
        Ok(sandbox)
    }

    fn materialize(&self, snapshot: &Snapshot) -> Result<()> {
        let tree = self.tree();
        let mut dirs: Vec<PathBuf> = snapshot
            .entries
            .iter()
            .filter_map(|e| {
                tree.join(e.path.to_os_path())
                    .parent()
                    .map(Path::to_path_buf)
            })
            .collect();
        dirs.sort();
        dirs.dedup();
        for d in &dirs {
            std::fs::create_dir_all(d).map_err(|e| Error::io("create", d, e))?;
        }
        snapshot
            .entries
            .par_iter()
            .map_init(
                || snapshot.open_git(),
                |git, entry| -> Result<()> {
                    let dest = tree.join(entry.path.to_os_path());
                    let git = git.as_ref().map_err(|e| Error::Git(e.to_string()))?;
                    if entry.blob.is_none() && entry.kind != EntryKind::Symlink {
                        // A working-tree file: copy_file_range, a reflink where the
                        // filesystem has them. Never a hard link: a test that writes its
                        // fixture would write the user's file.
                        let src = snapshot.root.join(entry.path.to_os_path());
                        std::fs::copy(&src, &dest).map_err(|e| Error::io("copy", &src, e))?;
                        return Ok(());
                    }
                    let bytes = snapshot.read(entry, git.as_ref())?;
                    match entry.kind {
                        EntryKind::Symlink => {
                            use std::os::unix::ffi::OsStrExt;
                            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&bytes), &dest)
                                .map_err(|e| Error::io("create link", &dest, e))
                        }
                        EntryKind::File | EntryKind::Executable => {
                            std::fs::write(&dest, &bytes)
                                .map_err(|e| Error::io("write", &dest, e))?;
                            if entry.kind == EntryKind::Executable {
                                use std::os::unix::fs::PermissionsExt;
                                std::fs::set_permissions(
                                    &dest,
                                    std::fs::Permissions::from_mode(0o755),
                                )
                                .map_err(|e| Error::io("chmod", &dest, e))?;
                            }
                            Ok(())
                        }
                    }
                },
            )
            .collect::<Result<()>>()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The copy of the repository: the root pytest runs in.
    pub fn tree(&self) -> PathBuf {
        self.dir.join("tree")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    pub fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// Keeps the sandbox on disk after this value is dropped (for debugging a run).
    pub fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if !self.keep {
            remove_tree(&self.dir);
        }
    }
}

/// Removes a sandbox even when a test left read-only directories in it.
fn remove_tree(dir: &Path) {
    if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
        return;
    }
    make_writable(dir);
    let _ = std::fs::remove_dir_all(dir);
}

fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&e.path());
            }
        }
    }
}

/// Removes the sandboxes of fixgate processes that no longer run (killed before they could
/// clean up). Returns how many were removed.
pub fn remove_stale() -> usize {
    let mut removed = 0;
    for e in candidate_roots()
        .iter()
        .filter_map(|r| std::fs::read_dir(r).ok())
        .flat_map(|rd| rd.flatten())
    {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() as i32 && !process_alive(pid) {
            kill_processes_in(&e.path());
            remove_tree(&e.path());
            removed += 1;
        }
    }
    removed
}

/// Kills the processes still working in a dead fixgate's sandbox (their working directory is
/// in it). Contained runs never leave any (their PID namespace died with them); runs where
/// namespaces were refused can leave daemons that escaped the supervisor's sweep.
fn kill_processes_in(sandbox: &Path) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(sandbox)) {
            // SAFETY: kill(2) with a pid read from /proc; a pid reused meanwhile by a process
            // in the same folder is the same run's.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

fn process_alive(pid: i32) -> bool {
    // Signal 0 checks existence; EPERM means it exists but belongs to someone else.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn nonce() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}", t & 0xffff_ffff)
}
