//! The watched tree: the scope, its inotify watches and the file hashes kept in memory, moved
//! along by each event. An event names paths; this says which of them changed the snapshot's
//! content, and keeps the watches on exactly the directories the scope admits as folders
//! come and go.

use std::path::PathBuf;
use std::sync::mpsc::Sender;

use notify::EventKind;

use crate::error::Result;
use crate::fsmonitor::{Refreshed, TreeHashes};
use crate::repo_path::RepoPath;
use crate::snapshot::Repo;
use crate::statcache::StatCache;
use crate::watch::inotify::{FsEvent, FsWatch};
use crate::watch::scope::{Membership, Scope};

pub(crate) struct Tree {
    scope: Scope,
    fs: FsWatch,
    hashes: TreeHashes,
    own: Vec<PathBuf>,
    cache_dir: PathBuf,
}

/// What one event did to the snapshot.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Paths whose content changed, was added or removed.
    pub(crate) paths: Vec<RepoPath>,
    /// Whether a path was added or removed (default fixture groups follow the paths).
    pub(crate) paths_changed: bool,
}

impl Tree {
    /// Watches the repository at `root` and hashes its snapshot (through the stat cache in
    /// `cache_dir`). `own`: folders fixgate writes, never watched.
    pub(crate) fn open(
        root: PathBuf,
        own: Vec<PathBuf>,
        cache_dir: PathBuf,
        events: Sender<FsEvent>,
    ) -> Result<Tree> {
        let scope = Scope::new(&root, own.clone())?;
        let mut fs = FsWatch::new(events)?;
        // Watches first: a change made while the tree is hashed is then not missed.
        fs.add(&scope, scope.directories_under(b""))?;
        let hashes = scan(&root, &cache_dir)?;
        Ok(Tree {
            scope,
            fs,
            hashes,
            own,
            cache_dir,
        })
    }

    pub(crate) fn hashes(&self) -> &TreeHashes {
        &self.hashes
    }

    /// How many directories are watched.
    pub(crate) fn watched(&self) -> usize {
        self.fs.count()
    }

    /// Applies one event.
    pub(crate) fn apply(&mut self, event: FsEvent) -> Result<Changes> {
        let event = match event {
            Ok(e) => e,
            // The event thread lost track (an overflowed queue among them): look again.
            Err(_) => return self.rescan(),
        };
        if event.need_rescan() {
            return self.rescan();
        }
        // Opening and reading change nothing; the audits' own reads come as these too.
        if matches!(event.kind, EventKind::Access(_)) {
            return Ok(Changes::default());
        }
        let mut changes = Changes::default();
        let mut ignore_rules = false;
        for path in &event.paths {
            let Some(rel) = self.scope.relative(path) else {
                continue;
            };
            if rel.as_bytes().is_empty() || rel.as_bytes().split(|&b| b == b'/').any(|c| c == b".git")
            {
                continue;
            }
            self.path(&rel, &mut changes)?;
            ignore_rules |= rel.file_name() == b".gitignore";
        }
        if ignore_rules && !changes.paths.is_empty() {
            // New ignore rules: other folders are in, others out.
            let mut more = self.rescan()?;
            changes.paths.append(&mut more.paths);
            changes.paths_changed |= more.paths_changed;
        }
        changes.paths.sort();
        changes.paths.dedup();
        Ok(changes)
    }

    /// Brings one path up to date: a file is rehashed, a new directory watched and its files
    /// hashed, a vanished one forgotten.
    fn path(&mut self, rel: &RepoPath, changes: &mut Changes) -> Result<()> {
        let listed = self.scope.file(rel) == Membership::In;
        match self.hashes.refresh(rel, listed)? {
            Refreshed::Same => {}
            Refreshed::Modified => changes.paths.push(rel.clone()),
            Refreshed::Added | Refreshed::Removed => {
                changes.paths.push(rel.clone());
                changes.paths_changed = true;
            }
            Refreshed::Directory => {
                if self.scope.directory(rel.as_bytes()) == Membership::In {
                    let dirs = self.scope.directories_under(rel.as_bytes());
                    self.fs.add(&self.scope, dirs.clone())?;
                    for dir in dirs {
                        self.files_of(&dir, changes)?;
                    }
                }
                return Ok(());
            }
        }
        // Gone: it may have been a directory, with watches and files below.
        if !self.root_path(rel).exists() {
            self.fs.remove_under(&self.scope, rel.as_bytes());
            let gone = self.hashes.forget_under(rel);
            changes.paths_changed |= !gone.is_empty();
            changes.paths.extend(gone);
        }
        Ok(())
    }

    /// Hashes the files directly in `dir` (a directory just watched).
    fn files_of(&mut self, dir: &[u8], changes: &mut Changes) -> Result<()> {
        let full = self.root_path(&RepoPath::from_bytes(dir.to_vec()));
        let Ok(rd) = std::fs::read_dir(&full) else {
            return Ok(());
        };
        for entry in rd.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            use std::os::unix::ffi::OsStrExt;
            let mut path = dir.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(entry.file_name().as_bytes());
            let rel = RepoPath::from_bytes(path);
            let listed = self.scope.file(&rel) == Membership::In;
            if self.hashes.refresh(&rel, listed)? != Refreshed::Same {
                changes.paths.push(rel);
                changes.paths_changed = true;
            }
        }
        Ok(())
    }

    /// Reads the index and the ignore rules again, watches what is now in and drops what is
    /// now out, and hashes the snapshot again (through the stat cache).
    pub(crate) fn rescan(&mut self) -> Result<Changes> {
        self.scope = Scope::new(self.scope.root(), self.own.clone())?;
        let dirs = self.scope.directories_under(b"");
        let keep: std::collections::HashSet<&[u8]> = dirs.iter().map(Vec::as_slice).collect();
        for old in self.fs.watched_dirs() {
            if !keep.contains(old.as_slice()) {
                self.fs.remove_under(&self.scope, &old);
            }
        }
        self.fs.add(&self.scope, dirs.clone())?;
        let hashes = scan(self.scope.root(), &self.cache_dir)?;
        let paths = hashes.differences(&self.hashes);
        let paths_changed = !hashes.same_paths(&self.hashes);
        self.hashes = hashes;
        Ok(Changes {
            paths,
            paths_changed,
        })
    }

    fn root_path(&self, rel: &RepoPath) -> PathBuf {
        self.scope.root().join(rel.to_os_path())
    }
}

/// The working tree's snapshot, hashed through the stat cache.
fn scan(root: &std::path::Path, cache_dir: &std::path::Path) -> Result<TreeHashes> {
    let snapshot = Repo::open(Some(root), None)?.snapshot(None)?;
    let mut stat = StatCache::load(cache_dir, &snapshot.root);
    let hashes = TreeHashes::scan(&snapshot, Some(&mut stat))?;
    // The stat cache only saves work: a failure to keep it costs the next scan time.
    let _ = stat.save();
    Ok(hashes)
}
