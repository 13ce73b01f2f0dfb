//! Snapshots: the files of the repository at a revision, read from git objects or from the
//! working tree, never by checking anything out.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};

use crate::error::{Error, Result};
use crate::repo_path::RepoPath;

/// Which revision a snapshot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The working tree: tracked files plus untracked files git does not ignore (or every file,
    /// when the directory is not a git repository).
    Worktree,
    /// A commit, read from git objects. `rev` is what the user typed.
    Commit { rev: String, commit: Oid },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum EntryKind {
    File,
    Executable,
    /// A symbolic link, recorded as its target string and never followed.
    Symlink,
}

/// One file of a snapshot.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) path: RepoPath,
    pub(crate) kind: EntryKind,
    /// The blob id, for commit snapshots.
    pub(crate) blob: Option<Oid>,
    /// The stat data seen while listing a working tree, so hashing need not stat again.
    pub(crate) stat: Option<crate::statcache::StatKey>,
}

/// The set of files of the repository at one revision, sorted by path bytes.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The repository's root directory (the working directory for a git repository).
    pub(crate) root: PathBuf,
    pub(crate) source: Source,
    pub(crate) entries: Vec<Entry>,
    /// The git directory, when the root is a git repository.
    git_dir: Option<PathBuf>,
    /// The handle [`Snapshot::read_path`] reads with, opened on first use: opening a repository
    /// reads the git configuration files, and an audit reads each test file of both sides.
    reader: std::sync::Mutex<Option<GitHandle>>,
}

/// A repository handle kept for reads; git2's `Repository` is `Send` but not `Sync`, hence the
/// mutex around it.
struct GitHandle(Repository);

impl std::fmt::Debug for GitHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GitHandle")
    }
}

/// The repository fixgate works on: its root and, when it is one, the git repository.
pub(crate) struct Repo {
    pub(crate) root: PathBuf,
    git: Option<Repository>,
}

impl Repo {
    /// Opens `dir` (or discovers the git root above `cwd`, the directory fixgate started in,
    /// when `None`).
    pub(crate) fn open(dir: Option<&Path>, cwd: Option<&Path>) -> Result<Repo> {
        match dir {
            Some(dir) => {
                let root = dir.canonicalize().map_err(|e| {
                    Error::Usage(format!(
                        "--repo {}: {e}; pass a directory that exists",
                        dir.display()
                    ))
                })?;
                if !root.is_dir() {
                    return Err(Error::Usage(format!(
                        "--repo {}: not a directory",
                        dir.display()
                    )));
                }
                let opened = Repository::open(&root).ok();
                if opened.as_ref().is_some_and(Repository::is_bare) {
                    return Err(bare(&root));
                }
                // Only a repository whose work tree is exactly this directory counts: a plain
                // folder inside some other repository is audited as a plain folder.
                let git = opened.filter(|r| {
                    r.workdir()
                        .and_then(|w| w.canonicalize().ok())
                        .is_some_and(|w| w == root)
                });
                Ok(Repo { root, git })
            }
            None => {
                let cwd = cwd.ok_or_else(|| {
                    Error::Usage(
                        "the current directory no longer exists; cd to the repository or pass \
                         --repo DIR"
                            .into(),
                    )
                })?;
                match Repository::discover(cwd) {
                    Ok(repo) => {
                        let root = repo
                            .workdir()
                            .ok_or_else(|| bare(repo.path()))?
                            .canonicalize()
                            .map_err(|e| Error::io("resolve", cwd, e))?;
                        Ok(Repo {
                            root,
                            git: Some(repo),
                        })
                    }
                    Err(_) => Ok(Repo {
                        root: cwd
                            .canonicalize()
                            .map_err(|e| Error::io("resolve", cwd, e))?,
                        git: None,
                    }),
                }
            }
        }
    }

    fn git(&self, what: &str) -> Result<&Repository> {
        self.git.as_ref().ok_or_else(|| {
            Error::Usage(format!(
                "{} is not a git repository, so {what} cannot be read; run `git init` there \
                 and commit, or pass --repo with a git working tree",
                self.root.display()
            ))
        })
    }

    /// Resolves anything git accepts (`HEAD~1`, a tag, a sha) to a commit id.
    pub(crate) fn resolve(&self, rev: &str) -> Result<Oid> {
        let git = self.git(&format!("revision {rev:?}"))?;
        if git
            .head()
            .is_err_and(|e| e.code() == git2::ErrorCode::UnbornBranch)
        {
            return Err(Error::Usage(format!(
                "{} has no commit yet, so revision {rev:?} cannot be read; commit the base \
                 first (`git add -A && git commit -m base`), then audit the patch against it",
                self.root.display()
            )));
        }
        let obj = git.revparse_single(rev).map_err(|e| {
            Error::Usage(format!(
                "unknown revision {rev:?}: {}; pass a commit, tag or branch that `git rev-parse` accepts",
                e.message()
            ))
        })?;
        let commit = obj
            .peel_to_commit()
            .map_err(|_| Error::Usage(format!("revision {rev:?} does not name a commit")))?;
        Ok(commit.id())
    }

    /// Takes the snapshot of `rev`, or of the working tree when `None`.
    pub(crate) fn snapshot(&self, rev: Option<&str>) -> Result<Snapshot> {
        match rev {
            None => self.worktree_snapshot(),
            Some(rev) => self.commit_snapshot(rev),
        }
    }

    fn commit_snapshot(&self, rev: &str) -> Result<Snapshot> {
        let oid = self.resolve(rev)?;
        let git = self.git("a revision")?;
        // A tree that does not even parse (a name git cannot read) names the commit too.
        let unreadable = |e: git2::Error| {
            Error::Git(format!(
                "commit {} ({rev}) has a tree git cannot read: {}; audit another commit",
                &oid.to_string()[..12],
                e.message()
            ))
        };
        let tree = git.find_commit(oid)?.tree().map_err(unreadable)?;
        let mut entries = Vec::new();
        let mut refused = None;
        tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
            // Every name, at every depth and of every kind: a tree is data anyone can write,
            // and a name like `../../x` or `.git` must never become a path in a sandbox.
            if let Err(why) = crate::beneath::check_component(entry.name_bytes()) {
                let mut path = dir.as_bytes().to_vec();
                path.extend_from_slice(entry.name_bytes());
                refused = Some((RepoPath::from_bytes(path), why));
                return TreeWalkResult::Abort;
            }
            if entry.kind() != Some(ObjectType::Blob) {
                return TreeWalkResult::Ok;
            }
            let kind = match entry.filemode() {
                0o120000 => EntryKind::Symlink,
                0o100755 => EntryKind::Executable,
                _ => EntryKind::File,
            };
            let mut path = dir.as_bytes().to_vec();
            path.extend_from_slice(entry.name_bytes());
            entries.push(Entry {
                path: RepoPath::from_bytes(path),
                kind,
                blob: Some(entry.id()),
                stat: None,
            });
            TreeWalkResult::Ok
        })
        .or_else(|e| match refused {
            // The walk stopped on purpose.
            Some(_) => Ok(()),
            None => Err(unreadable(e)),
        })?;
        if let Some((path, why)) = refused {
            return Err(Error::Usage(format!(
                "commit {} ({rev}) holds a tree entry {path:?}: {why} is not a single normal \
                 path component, and fixgate makes no file of it; no checkout makes such an \
                 entry, so the commit was written by hand: remove the entry (or audit another \
                 commit)",
                &oid.to_string()[..12]
            )));
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Snapshot {
            root: self.root.clone(),
            source: Source::Commit {
                rev: rev.to_owned(),
                commit: oid,
            },
            entries,
            git_dir: Some(git.path().to_path_buf()),
            reader: std::sync::Mutex::new(None),
        })
    }

    fn worktree_snapshot(&self) -> Result<Snapshot> {
        let mut entries = match &self.git {
            Some(git) => git_worktree_entries(git, &self.root)?,
            None => walk_plain_dir(&self.root)?,
        };
        entries.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        entries.dedup_by(|a, b| a.path == b.path);
        Ok(Snapshot {
            root: self.root.clone(),
            source: Source::Worktree,
            entries,
            git_dir: self.git.as_ref().map(|g| g.path().to_path_buf()),
            reader: std::sync::Mutex::new(None),
        })
    }
}

/// The error for a bare repository: it has no working tree to audit.
fn bare(git_dir: &Path) -> Error {
    let git_dir: PathBuf = git_dir.components().collect();
    Error::Usage(format!(
        "{} is a bare git repository (no working tree), and fixgate audits a working tree; \
         check it out (`git clone {} work`, or `git worktree add ../work`) and pass that with \
         --repo",
        git_dir.display(),
        git_dir.display()
    ))
}

/// Tracked files (from the index) plus untracked files that git does not ignore, each with its
/// stat. One parallel walk lists the work tree and stats every file once, relative to its open
/// directory; libgit2's status would stat every tracked file a second time (and in one thread)
/// only to tell us which files are untracked. Ignore rules are asked only about what the index
/// does not know, and a directory with no tracked file below that git ignores is never entered.
fn git_worktree_entries(git: &Repository, root: &Path) -> Result<Vec<Entry>> {
    let crate::git_index::Tracked {
        files: tracked,
        dirs: tracked_dirs,
        gitlinks,
    } = crate::git_index::tracked(git)?;
    let known = Known {
        tracked: &tracked,
        tracked_dirs: &tracked_dirs,
        gitlinks: &gitlinks,
    };
    let found = Shared::new(Found::default());
    let failure = Shared::new(None);
    rayon::scope(|scope| walk_git_dir(scope, root, Vec::new(), known, &found, &failure));
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let Found {
        mut entries,
        mut untracked_files,
        mut untracked_dirs,
    } = found.into_inner().unwrap_or_else(|p| p.into_inner());
    // Whatever the index does not know is asked about, in this thread (a `Repository` is not
    // shared between threads); usually a handful of paths.
    let ignored = |path: &[u8]| {
        let path = RepoPath::from_bytes(path.to_vec()).to_os_path();
        git.is_path_ignored(&path)
    };
    while let Some(dir) = untracked_dirs.pop() {
        let path = root.join(RepoPath::from_bytes(dir.clone()).to_os_path());
        // A repository nested in the work tree is not ours to list, as for `git status`.
        if ignored(&dir)? || path.join(".git").exists() {
            continue;
        }
        let rd = match std::fs::read_dir(&path) {
            Ok(rd) => rd,
            Err(e) => return Err(Error::io("list", &path, e)),
        };
        for entry in rd {
            let entry = entry.map_err(|e| Error::io("list", &path, e))?;
            let sub = child(&dir, &entry.file_name());
            match entry.file_type() {
                Ok(ft) if ft.is_dir() => untracked_dirs.push(sub),
                Ok(_) => {
                    if let Ok(meta) = entry.metadata() {
                        untracked_files.push((sub, meta));
                    }
                }
                Err(e) => return Err(Error::io("stat", entry.path(), e)),
            }
        }
    }
    for (path, meta) in untracked_files {
        if !ignored(&path)? {
            entries.extend(worktree_entry(RepoPath::from_bytes(path), &meta));
        }
    }
    Ok(entries)
}

/// What the index says about paths, for the work-tree walk.
#[derive(Clone, Copy)]
struct Known<'a> {
    tracked: &'a HashSet<Vec<u8>>,
    /// Every directory with a tracked file somewhere below it.
    tracked_dirs: &'a HashSet<Vec<u8>>,
    gitlinks: &'a HashSet<Vec<u8>>,
}

#[derive(Default)]
struct Found {
    entries: Vec<Entry>,
    untracked_files: Vec<(Vec<u8>, std::fs::Metadata)>,
    untracked_dirs: Vec<Vec<u8>>,
}

/// `prefix/name` as repository path bytes.
pub(crate) fn child(prefix: &[u8], name: &std::ffi::OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut path = prefix.to_vec();
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name.as_bytes());
    path
}

fn walk_git_dir<'s>(
    scope: &rayon::Scope<'s>,
    dir: &Path,
    prefix: Vec<u8>,
    known: Known<'s>,
    found: &'s Shared<Found>,
    failure: &'s Shared<Option<Error>>,
) {
    let fail = |e: Error| {
        failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        // A tracked directory deleted while we list holds no files of the snapshot.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => return fail(Error::io("list", dir, e)),
    };
    let mut local = Found::default();
    for entry in rd {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return fail(Error::io("list", dir, e)),
        };
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let path = child(&prefix, &name);
        match entry.file_type() {
            Ok(ft) if ft.is_dir() => {
                if known.gitlinks.contains(&path) {
                    continue;
                }
                if known.tracked_dirs.contains(&path) {
                    let sub = entry.path();
                    scope
                        .spawn(move |scope| walk_git_dir(scope, &sub, path, known, found, failure));
                } else {
                    local.untracked_dirs.push(path);
                }
            }
            // A tracked file deleted from the work tree, or a file that vanished between the
            // listing and its stat, is simply not part of the snapshot.
            Ok(_) => {
                if let Ok(meta) = entry.metadata() {
                    if known.tracked.contains(&path) {
                        local
                            .entries
                            .extend(worktree_entry(RepoPath::from_bytes(path), &meta));
                    } else {
                        local.untracked_files.push((path, meta));
                    }
                }
            }
            Err(e) => return fail(Error::io("stat", entry.path(), e)),
        }
    }
    let mut all = found.lock().unwrap_or_else(|p| p.into_inner());
    all.entries.append(&mut local.entries);
    all.untracked_files.append(&mut local.untracked_files);
    all.untracked_dirs.append(&mut local.untracked_dirs);
}

/// The snapshot entry for a file with this stat; `None` for what is neither a regular file nor
/// a symlink (a fifo, a socket, a directory).
fn worktree_entry(path: RepoPath, meta: &std::fs::Metadata) -> Option<Entry> {
    let kind = if meta.file_type().is_symlink() {
        EntryKind::Symlink
    } else if meta.is_file() {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 != 0 {
            EntryKind::Executable
        } else {
            EntryKind::File
        }
    } else {
        return None;
    };
    Some(Entry {
        path,
        kind,
        blob: None,
        stat: Some(crate::statcache::StatKey::from_metadata(meta)),
    })
}

/// Every file under `root` except `.git`, with its stat, for a directory that is not a git
/// repository. Directories are listed in parallel, and each file is stat'ed relative to its
/// open directory (`DirEntry::metadata`), which spares the kernel a walk of the full path.
fn walk_plain_dir(root: &Path) -> Result<Vec<Entry>> {
    let found = std::sync::Mutex::new(Vec::new());
    let failure = std::sync::Mutex::new(None);
    rayon::scope(|scope| walk_dir(scope, root, Vec::new(), &found, &failure));
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    Ok(found.into_inner().unwrap_or_else(|p| p.into_inner()))
}

type Shared<T> = std::sync::Mutex<T>;

fn walk_dir<'s>(
    scope: &rayon::Scope<'s>,
    dir: &Path,
    prefix: Vec<u8>,
    found: &'s Shared<Vec<Entry>>,
    failure: &'s Shared<Option<Error>>,
) {
    use std::os::unix::ffi::OsStrExt;
    let fail = |e: Error| {
        failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return fail(Error::io("list", dir, e)),
    };
    let mut files = Vec::new();
    for entry in rd {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return fail(Error::io("list", dir, e)),
        };
        let name = entry.file_name();
        // Git's own folder, or the file a submodule or a linked work tree keeps in its place,
        // is no file of the snapshot (no name `.git` is: see `beneath::check_component`).
        if name == ".git" {
            continue;
        }
        let mut path = prefix.clone();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name.as_bytes());
        match entry.file_type() {
            Ok(ft) if ft.is_dir() => {
                let sub = entry.path();
                scope.spawn(move |scope| walk_dir(scope, &sub, path, found, failure));
            }
            // A file that vanished between the listing and its stat is not part of the
            // snapshot, as for a git work tree.
            Ok(_) => {
                if let Ok(meta) = entry.metadata() {
                    files.extend(worktree_entry(RepoPath::from_bytes(path), &meta));
                }
            }
            Err(e) => return fail(Error::io("stat", entry.path(), e)),
        }
    }
    found
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .append(&mut files);
}

impl Snapshot {
    /// The snapshot's commit, when it is one.
    pub(crate) fn commit(&self) -> Option<Oid> {
        match &self.source {
            Source::Commit { commit, .. } => Some(*commit),
            Source::Worktree => None,
        }
    }

    /// How the user named this snapshot: the rev they typed, or `worktree`.
    pub(crate) fn rev_label(&self) -> String {
        match &self.source {
            Source::Commit { rev, .. } => rev.clone(),
            Source::Worktree => "worktree".into(),
        }
    }

    pub(crate) fn paths(&self) -> Vec<RepoPath> {
        self.entries.iter().map(|e| e.path.clone()).collect()
    }

    pub(crate) fn find(&self, path: &RepoPath) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.path.cmp(path))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Opens the git repository for a reader thread (git2 handles are not shared across threads).
    /// Only a commit's files are read from git: a work-tree snapshot gets `None` and reads the
    /// disk, without the cost of opening the repository (its configuration files) again.
    pub(crate) fn open_git(&self) -> Result<Option<Repository>> {
        match (&self.source, &self.git_dir) {
            (Source::Commit { .. }, Some(dir)) => Ok(Some(Repository::open(dir)?)),
            _ => Ok(None),
        }
    }

    /// The bytes of an entry: file content, or a symlink's target string. `git` is a handle
    /// from [`Snapshot::open_git`], needed for commit snapshots.
    pub(crate) fn read(&self, entry: &Entry, git: Option<&Repository>) -> Result<Vec<u8>> {
        match (entry.blob, git) {
            (Some(oid), Some(git)) => Ok(git.find_blob(oid)?.content().to_vec()),
            (Some(_), None) => Err(Error::bug(format!(
                "reading {} from a commit snapshot without a git handle",
                entry.path
            ))),
            (None, _) => {
                let full = self.root.join(entry.path.to_os_path());
                if entry.kind == EntryKind::Symlink {
                    use std::os::unix::ffi::OsStrExt;
                    let target =
                        std::fs::read_link(&full).map_err(|e| Error::io("read link", &full, e))?;
                    Ok(target.as_os_str().as_bytes().to_vec())
                } else {
                    std::fs::read(&full).map_err(|e| Error::io("read", &full, e))
                }
            }
        }
    }

    /// Reads one file by path, `None` when the snapshot does not have it.
    pub(crate) fn read_path(&self, path: &str) -> Result<Option<Vec<u8>>> {
        let Some(entry) = self.find(&RepoPath::from(path)) else {
            return Ok(None);
        };
        if entry.blob.is_none() {
            return self.read(entry, None).map(Some);
        }
        // A panic while reading cannot leave the handle half-changed.
        let mut reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        if reader.is_none() {
            *reader = self.open_git()?.map(GitHandle);
        }
        self.read(entry, reader.as_ref().map(|h| &h.0)).map(Some)
    }

    /// Whether `path` has the same bytes and kind in both snapshots, known without reading
    /// it: both are commit snapshots naming the same blob. `false` means "unknown or differs".
    pub(crate) fn same_blob(&self, other: &Snapshot, path: &str) -> bool {
        let path = RepoPath::from(path);
        match (self.find(&path), other.find(&path)) {
            (Some(a), Some(b)) => a.blob.is_some() && a.blob == b.blob && a.kind == b.kind,
            _ => false,
        }
    }
}
