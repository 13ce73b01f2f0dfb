//! Sandboxes: a fresh materialized copy of a snapshot in a temporary directory, with its own
//! home and temporary directory, so that no run ever touches the user's working tree.
//!
//! Layout of one sandbox: `tree/` (the copy, the root tests run in), `home/`, `tmp/`, and the
//! files fixgate exchanges with the plugin. The folder's name starts with fixgate's pid, so a
//! later fixgate can remove the sandboxes of one that was killed.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::beneath::Root;
use crate::error::{Error, Result};
use crate::repo_path::RepoPath;
use crate::snapshot::{EntryKind, Snapshot};

static NEXT: AtomicU64 = AtomicU64::new(0);

pub(crate) struct Sandbox {
    dir: PathBuf,
}

/// Bytes to put over the snapshot's own: `(path, Some(bytes))` writes, `None` removes. Replay
/// uses this to run head code against the base's fixture bytes.
pub(crate) type Overlay = Vec<(RepoPath, Option<Vec<u8>>)>;

/// Where sandboxes may live: a RAM file system first (creating and removing a few hundred
/// files per run costs a disk file system far more: a measurable share of a run), then the
/// temporary directory (`temp_dir`, from the environment read at start).
fn candidate_roots(temp_dir: &Path) -> [PathBuf; 2] {
    let uid = unsafe { libc::getuid() };
    let name = format!("fixgate-sandboxes-{uid}");
    [PathBuf::from("/dev/shm").join(&name), temp_dir.join(&name)]
}

/// A RAM file system is used only when it has room to spare for any ordinary repository.
const SHM_MIN_FREE: u64 = 4 << 30;

/// The folder that holds every sandbox of this user; `ram`: whether it may be in RAM (the
/// containment says: not where runs may write `/dev/shm`).
pub(crate) fn sandboxes_root(temp_dir: &Path, ram: bool) -> PathBuf {
    let [shm, tmp] = candidate_roots(temp_dir);
    if ram && free_bytes(Path::new("/dev/shm")).is_some_and(|f| f >= SHM_MIN_FREE) {
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
    /// Materializes `snapshot` (with `overlay` applied) into a new sandbox (in RAM where
    /// `ram` allows and there is room).
    pub(crate) fn create(
        snapshot: &Snapshot,
        overlay: &Overlay,
        temp_dir: &Path,
        ram: bool,
    ) -> Result<Sandbox> {
        let mut root = sandboxes_root(temp_dir, ram);
        if std::fs::create_dir_all(&root).is_err() {
            root = candidate_roots(temp_dir)[1].clone();
            std::fs::create_dir_all(&root).map_err(|e| Error::io("create", &root, e))?;
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("{}-{n}-{}", std::process::id(), nonce()));
        let sandbox = Sandbox { dir };
        for sub in ["tree", "home", "tmp"] {
            let p = sandbox.dir.join(sub);
            std::fs::create_dir_all(&p).map_err(|e| {
                Error::Infra(format!("failed to create sandbox {}: {e}", p.display()))
            })?;
        }
        sandbox.materialize(snapshot)?;
        if !overlay.is_empty() {
            let tree = sandbox.root()?;
            for (path, bytes) in overlay {
                sandbox.overlay_one(&tree, path, bytes.as_deref())?;
            }
        }
        Ok(sandbox)
    }

    /// The tree as a [`Root`]: every name below it is checked and created without following
    /// links, so that no name of a snapshot becomes a host path.
    fn root(&self) -> Result<Root> {
        let tree = self.tree();
        Root::open(&tree).map_err(|e| Error::io("open", &tree, e))
    }

    /// Puts one overlay file in place of the snapshot's (or removes it).
    fn overlay_one(&self, tree: &Root, path: &RepoPath, bytes: Option<&[u8]>) -> Result<()> {
        let rel = checked(path)?;
        let full = || tree.display(rel);
        // Remove first: the snapshot may hold a symlink there, and writing through it would
        // change its target instead of the path.
        tree.remove_file(rel)
            .map_err(|e| Error::io("remove", full(), e))?;
        if let Some(bytes) = bytes {
            if let Some(slash) = rel.iter().rposition(|&b| b == b'/') {
                tree.create_dirs(&rel[..slash])
                    .map_err(|e| Error::io("create", full(), e))?;
            }
            tree.write_new(rel, bytes, 0o644)
                .map_err(|e| Error::io("write", full(), e))?;
        }
        Ok(())
    }

    fn materialize(&self, snapshot: &Snapshot) -> Result<()> {
        let tree = self.root()?;
        let mut dirs: Vec<&[u8]> = Vec::new();
        for e in &snapshot.entries {
            let rel = checked(&e.path)?;
            if let Some(slash) = rel.iter().rposition(|&b| b == b'/') {
                dirs.push(&rel[..slash]);
            }
        }
        dirs.sort_unstable();
        dirs.dedup();
        for d in dirs {
            tree.create_dirs(d)
                .map_err(|e| Error::io("create", tree.display(d), e))?;
        }
        snapshot
            .entries
            .par_iter()
            .map_init(
                || snapshot.open_git(),
                |git, entry| -> Result<()> {
                    let rel = entry.path.as_bytes();
                    let dest = || tree.display(rel);
                    let git = git.as_ref().map_err(|e| Error::Git(e.to_string()))?;
                    if entry.blob.is_none() && entry.kind != EntryKind::Symlink {
                        // A working-tree file: copy_file_range, a reflink where the
                        // filesystem has them. Never a hard link: a test that writes its
                        // fixture would write the user's file.
                        let src = snapshot.root.join(entry.path.to_os_path());
                        let mut from =
                            std::fs::File::open(&src).map_err(|e| Error::io("copy", &src, e))?;
                        let mode = if entry.kind == EntryKind::Executable {
                            0o755
                        } else {
                            0o644
                        };
                        let mut to = tree
                            .create_file(rel, mode)
                            .map_err(|e| Error::io("write", dest(), e))?;
                        std::io::copy(&mut from, &mut to)
                            .map_err(|e| Error::io("copy", &src, e))?;
                        return Ok(());
                    }
                    let bytes = snapshot.read(entry, git.as_ref())?;
                    match entry.kind {
                        EntryKind::Symlink => tree
                            .symlink(rel, &bytes)
                            .map_err(|e| Error::io("create link", dest(), e)),
                        EntryKind::File => tree
                            .write_new(rel, &bytes, 0o644)
                            .map_err(|e| Error::io("write", dest(), e)),
                        EntryKind::Executable => tree
                            .write_new(rel, &bytes, 0o755)
                            .map_err(|e| Error::io("write", dest(), e)),
                    }
                },
            )
            .collect::<Result<()>>()
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The copy of the repository: the root pytest runs in.
    pub(crate) fn tree(&self) -> PathBuf {
        self.dir.join("tree")
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    pub(crate) fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// Records the bytes, modes and times of `tree/`, `home/` and `tmp/`, for `restore`.
    pub(crate) fn record(&self) -> std::io::Result<TreeState> {
        let mut state = TreeState::default();
        for sub in SUBTREES {
            record_dir(&self.dir, Path::new(sub), &mut state.nodes)?;
        }
        Ok(state)
    }

    /// Puts `tree/`, `home/` and `tmp/` back as `state` recorded them: files and directories
    /// added since are removed, changed or removed ones written again (in place, so a descriptor
    /// the zygote holds sees the restored bytes), with their modes and modification times.
    pub(crate) fn restore(&self, state: &mut TreeState) -> std::io::Result<()> {
        for sub in SUBTREES {
            remove_extra(&self.dir, Path::new(sub), &state.nodes)?;
        }
        for (rel, node) in state.nodes.iter_mut() {
            restore_node(&self.dir.join(rel), node)?;
        }
        Ok(())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        remove_tree(&self.dir);
    }
}

/// The parts of a sandbox a run may change.
const SUBTREES: [&str; 3] = ["tree", "home", "tmp"];

/// What a sandbox's tree, home and temporary directory held at one moment, by path relative to
/// the sandbox (sorted: a directory comes before what it holds).
#[derive(Default)]
pub(crate) struct TreeState {
    nodes: std::collections::BTreeMap<PathBuf, Node>,
}

impl TreeState {
    /// Whether `other` holds the same paths with the same kinds, bytes, modes and link targets
    /// (times and inodes aside).
    pub(crate) fn same_bytes(&self, other: &TreeState) -> bool {
        self.nodes.len() == other.nodes.len()
            && self
                .nodes
                .iter()
                .zip(&other.nodes)
                .all(|((pa, a), (pb, b))| pa == pb && a.same_bytes(b))
    }

    /// Whether the tree of `sandbox` still holds, at each of `files` (tree-relative), what this
    /// state recorded (or still nothing), and still lists the same names in each of `dirs`.
    pub(crate) fn unchanged<'a>(
        &self,
        sandbox: &Sandbox,
        files: impl IntoIterator<Item = &'a str>,
        dirs: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        let tree = sandbox.tree();
        let files_same = files.into_iter().all(|f| {
            let rel = Path::new("tree").join(f);
            let now = std::fs::symlink_metadata(tree.join(f)).ok();
            match (self.nodes.get(&rel), now) {
                (None, None) => true,
                (Some(Node::File { bytes, mode, .. }), Some(m)) if m.is_file() => {
                    mode_of(&m) == *mode && std::fs::read(tree.join(f)).is_ok_and(|b| b == *bytes)
                }
                (Some(Node::Link { target }), Some(m)) if m.file_type().is_symlink() => {
                    std::fs::read_link(tree.join(f)).is_ok_and(|t| t == *target)
                }
                (Some(Node::Dir { .. }), Some(m)) => m.is_dir(),
                _ => false,
            }
        });
        files_same
            && dirs.into_iter().all(|d| {
                let rel = Path::new("tree").join(d);
                let recorded: std::collections::BTreeSet<std::ffi::OsString> = self
                    .nodes
                    .range(rel.clone()..)
                    .take_while(|(p, _)| p.starts_with(&rel))
                    .filter(|(p, _)| p.parent() == Some(rel.as_path()))
                    .filter_map(|(p, _)| p.file_name().map(|n| n.to_os_string()))
                    .collect();
                let now: Option<std::collections::BTreeSet<std::ffi::OsString>> =
                    std::fs::read_dir(tree.join(d))
                        .ok()
                        .map(|rd| rd.flatten().map(|e| e.file_name()).collect());
                match now {
                    Some(now) => self.nodes.contains_key(&rel) && now == recorded,
                    None => !self.nodes.contains_key(&rel),
                }
            })
    }
}

enum Node {
    Dir {
        mode: u32,
    },
    File {
        bytes: Vec<u8>,
        mode: u32,
        modified: std::time::SystemTime,
        /// Size, modification and change times, inode: any move means the file may differ.
        stat: (u64, i64, i64, i64, i64, u64),
    },
    Link {
        target: PathBuf,
    },
}

impl Node {
    fn same_bytes(&self, other: &Node) -> bool {
        match (self, other) {
            (Node::Dir { mode: a }, Node::Dir { mode: b }) => a == b,
            (Node::Link { target: a }, Node::Link { target: b }) => a == b,
            (
                Node::File {
                    bytes: a, mode: ma, ..
                },
                Node::File {
                    bytes: b, mode: mb, ..
                },
            ) => a == b && ma == mb,
            _ => false,
        }
    }
}

fn file_stat(meta: &std::fs::Metadata) -> (u64, i64, i64, i64, i64, u64) {
    use std::os::unix::fs::MetadataExt;
    (
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
        meta.ino(),
    )
}

fn mode_of(meta: &std::fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

fn record_dir(
    base: &Path,
    rel: &Path,
    nodes: &mut std::collections::BTreeMap<PathBuf, Node>,
) -> std::io::Result<()> {
    let full = base.join(rel);
    let meta = std::fs::symlink_metadata(&full)?;
    nodes.insert(
        rel.to_path_buf(),
        Node::Dir {
            mode: mode_of(&meta),
        },
    );
    for entry in std::fs::read_dir(&full)? {
        let entry = entry?;
        let child = rel.join(entry.file_name());
        let meta = entry.metadata()?;
        if meta.is_dir() {
            record_dir(base, &child, nodes)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            nodes.insert(child, Node::Link { target });
        } else if meta.is_file() {
            let bytes = std::fs::read(entry.path())?;
            nodes.insert(
                child,
                Node::File {
                    bytes,
                    mode: mode_of(&meta),
                    modified: meta.modified()?,
                    stat: file_stat(&meta),
                },
            );
        }
        // sockets and FIFOs a test left are not restored; nothing recorded them
    }
    Ok(())
}

/// Removes what is under `rel` and not in `nodes` (or of another kind).
fn remove_extra(
    base: &Path,
    rel: &Path,
    nodes: &std::collections::BTreeMap<PathBuf, Node>,
) -> std::io::Result<()> {
    let full = base.join(rel);
    let Ok(rd) = std::fs::read_dir(&full) else {
        return Ok(()); // removed: restore_node makes it again
    };
    for entry in rd {
        let entry = entry?;
        let child = rel.join(entry.file_name());
        let ft = entry.file_type()?;
        let keep = match nodes.get(&child) {
            Some(Node::Dir { .. }) => ft.is_dir(),
            Some(Node::File { .. }) => ft.is_file(),
            Some(Node::Link { .. }) => ft.is_symlink(),
            None => false,
        };
        if keep && ft.is_dir() {
            remove_extra(base, &child, nodes)?;
        } else if !keep {
            // A directory a test made read-only still has to go.
            make_writable(&full);
            if ft.is_dir() {
                make_writable(&entry.path());
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
    }
    Ok(())
}

fn restore_node(full: &Path, node: &mut Node) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(full).ok();
    match node {
        Node::Dir { mode } => {
            if meta.is_none() {
                std::fs::create_dir(full)?;
            }
            let now = std::fs::symlink_metadata(full)?;
            if mode_of(&now) != *mode {
                std::fs::set_permissions(full, std::fs::Permissions::from_mode(*mode))?;
            }
        }
        Node::Link { target } => {
            if meta.is_none() || std::fs::read_link(full).ok().as_deref() != Some(target) {
                let _ = std::fs::remove_file(full);
                std::os::unix::fs::symlink(&*target, full)?;
            }
        }
        Node::File {
            bytes,
            mode,
            modified,
            stat,
        } => {
            let same = meta
                .as_ref()
                .is_some_and(|m| file_stat(m) == *stat && mode_of(m) == *mode);
            if same {
                return Ok(());
            }
            if meta.is_some() {
                std::fs::set_permissions(full, std::fs::Permissions::from_mode(0o600))?;
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(full)?;
            std::io::Write::write_all(&mut f, bytes)?;
            f.set_modified(*modified)?;
            f.set_permissions(std::fs::Permissions::from_mode(*mode))?;
            drop(f);
            // The change time moved with the write: remember the new one.
            *stat = file_stat(&std::fs::symlink_metadata(full)?);
        }
    }
    Ok(())
}

/// Removes a sandbox even when a test left read-only directories in it.
pub(crate) fn remove_tree(dir: &Path) {
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
pub(crate) fn remove_stale(temp_dir: &Path) -> usize {
    let mut removed = 0;
    for e in candidate_roots(temp_dir)
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

/// The bytes of a snapshot path that is made of normal components only; anything else is the
/// snapshot's error (a tree no checkout would produce), named with the path.
fn checked(path: &RepoPath) -> Result<&[u8]> {
    crate::beneath::check_path(path.as_bytes()).map_err(|(c, why)| {
        Error::Usage(format!(
            "the snapshot holds the path {path:?}, whose component {:?} is {why}: no such \
             file can be made in a sandbox; remove it from the commit",
            String::from_utf8_lossy(&c)
        ))
    })?;
    Ok(path.as_bytes())
}

fn nonce() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}", t & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn listing(dir: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let meta = std::fs::symlink_metadata(e.path()).unwrap();
                let rel = e.path().strip_prefix(dir).unwrap().to_path_buf();
                let mode = meta.permissions().mode() & 0o7777;
                if meta.is_dir() {
                    stack.push(e.path());
                    out.push((rel, mode, Vec::new()));
                } else if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(e.path()).unwrap();
                    out.push((rel, 0, target.to_string_lossy().as_bytes().to_vec()));
                } else {
                    out.push((rel, mode, std::fs::read(e.path()).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn restore_puts_back_the_recorded_bytes_modes_and_links_and_removes_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let sandbox = Sandbox {
            dir: tmp.path().join("s"),
        };
        for sub in SUBTREES {
            std::fs::create_dir_all(sandbox.dir.join(sub)).unwrap();
        }
        let tree = sandbox.tree();
        std::fs::create_dir_all(tree.join("tests/fixtures")).unwrap();
        std::fs::write(tree.join("tests/fixtures/db.json"), "{}\n").unwrap();
        std::fs::write(tree.join("tests/imported.txt"), "x\n").unwrap();
        std::fs::write(tree.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(tree.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink("tests/imported.txt", tree.join("link")).unwrap();
        std::fs::write(sandbox.home().join(".rc"), "home\n").unwrap();
        let before = listing(&sandbox.dir);
        let mut state = sandbox.record().unwrap();

        for round in 0..2 {
            // what a run may do: rewrite (same size too), remove, add, chmod, relink, lock a dir
            std::fs::write(tree.join("tests/fixtures/db.json"), "[]\n").unwrap();
            std::fs::remove_file(tree.join("tests/imported.txt")).unwrap();
            std::fs::write(tree.join("tests/new.txt"), "new").unwrap();
            std::fs::create_dir_all(tree.join("made/deeper")).unwrap();
            std::fs::write(tree.join("made/deeper/f"), "f").unwrap();
            std::fs::set_permissions(tree.join("made"), std::fs::Permissions::from_mode(0o500))
                .unwrap();
            std::fs::set_permissions(tree.join("run.sh"), std::fs::Permissions::from_mode(0o600))
                .unwrap();
            std::fs::remove_file(tree.join("link")).unwrap();
            std::os::unix::fs::symlink("elsewhere", tree.join("link")).unwrap();
            std::fs::write(sandbox.tmp().join("scratch"), "t").unwrap();
            std::fs::remove_file(sandbox.home().join(".rc")).unwrap();
            std::fs::create_dir(sandbox.home().join(".rc")).unwrap();

            sandbox.restore(&mut state).unwrap();
            assert_eq!(listing(&sandbox.dir), before, "round {round}");
        }
    }
}
