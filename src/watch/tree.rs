//! The watched tree: the scope, its inotify watches, the file hashes kept in memory and the
//! frozen copy audits read, moved along by each event. An event names paths; this says which
//! of them changed the snapshot's content, keeps the watches on exactly the directories the
//! scope admits as folders come and go, and, when the next audit starts, copies what changed
//! into the frozen copy.

use std::collections::BTreeSet;
use std::path::PathBuf;

use notify::EventKind;
use rayon::prelude::*;

use crate::error::Result;
use crate::fsmonitor::{Known, Refreshed, TreeHashes};
use crate::manifest::FileKind;
use crate::repo_path::RepoPath;
use crate::snapshot::{Entry, EntryKind, Repo, Snapshot};
use crate::statcache::StatCache;
use crate::watch::frozen::Frozen;
use crate::watch::inotify::{FsEvent, FsWatch};
use crate::watch::scope::{Membership, WatchScope};

pub(crate) struct Tree {
    scope: WatchScope,
    fs: FsWatch,
    /// The live tree's files as the events say; for paths not in `dirty`, also the copy's.
    hashes: TreeHashes,
    frozen: Frozen,
    /// Paths that changed in the live tree since they were last copied.
    dirty: BTreeSet<RepoPath>,
    own: Vec<PathBuf>,
    /// Where the live tree's stat cache is (a rescan hashes only what changed).
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
    /// Watches the repository at `root` and copies its snapshot into a frozen copy beside the
    /// sandboxes of `temp_dir` (in RAM where `ram` allows). `own`: folders fixgate writes, never watched; `cache_dir`:
    /// fixgate's cache, where the live tree's stat cache is.
    pub(crate) fn open(
        root: PathBuf,
        own: Vec<PathBuf>,
        cache_dir: PathBuf,
        (temp_dir, ram): (&std::path::Path, bool),
        events: impl FnMut(FsEvent) + Send + 'static,
    ) -> Result<Tree> {
        let scope = WatchScope::new(&root, own.clone())?;
        let mut fs = FsWatch::new(events)?;
        // Watches first: a change made while the tree is copied is then not missed.
        fs.add(&scope, scope.directories_under(b""))?;
        let frozen = Frozen::create(temp_dir, ram)?;
        let mut tree = Tree {
            scope,
            fs,
            hashes: TreeHashes::default(),
            frozen,
            dirty: BTreeSet::new(),
            own,
            cache_dir,
        };
        tree.dirty = live_paths(&root)?.into_iter().collect();
        tree.freeze()?;
        Ok(tree)
    }

    pub(crate) fn hashes(&self) -> &TreeHashes {
        &self.hashes
    }

    /// How many directories are watched.
    pub(crate) fn watched(&self) -> usize {
        self.fs.count()
    }

    /// Brings the frozen copy up to date with every path changed since it was last copied,
    /// and returns its snapshot. Only between audits: an audit reads the copy.
    pub(crate) fn freeze(&mut self) -> Result<Snapshot> {
        if self.scope.index_changed() {
            // Files git now tracks or no longer tracks, under ignore rules or not.
            self.rescan()?;
        }
        let dirty: Vec<RepoPath> = std::mem::take(&mut self.dirty).into_iter().collect();
        let root = self.scope.root().to_path_buf();
        let scope = &self.scope;
        let frozen = &self.frozen;
        // Parents sort before what they hold, so a directory that went is removed before a
        // file of a new one by that name is written; in parallel within one depth only.
        let mut by_depth: Vec<Vec<RepoPath>> = Vec::new();
        for p in dirty {
            let depth = p.as_bytes().iter().filter(|&&b| b == b'/').count();
            if by_depth.len() <= depth {
                by_depth.resize_with(depth + 1, Vec::new);
            }
            by_depth[depth].push(p);
        }
        for paths in by_depth {
            // Asked here: the scope's git handle stays on this thread.
            let listed: Vec<(RepoPath, bool)> = paths
                .into_iter()
                .map(|p| {
                    let listed = scope.file(&p) == Membership::In;
                    (p, listed)
                })
                .collect();
            let copied = listed
                .par_iter()
                .map(|(p, listed)| frozen.copy(&root, p, *listed).map(|k| (p, k)))
                .collect::<Result<Vec<_>>>()?;
            for (p, known) in copied {
                // What was copied is what the audit reads; a later write comes as an event.
                self.hashes.set(p, known);
            }
        }
        self.frozen.snapshot()
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
            if rel.as_bytes().is_empty()
                || rel.as_bytes().split(|&b| b == b'/').any(|c| c == b".git")
            {
                continue;
            }
            ignore_rules |= rel.file_name() == b".gitignore";
            self.path(&rel, &mut changes)?;
        }
        if ignore_rules {
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
    /// hashed, a vanished one forgotten with its watches.
    fn path(&mut self, rel: &RepoPath, changes: &mut Changes) -> Result<()> {
        let listed = self.scope.file(rel) == Membership::In;
        let root = self.scope.root().to_path_buf();
        let was_file = self.hashes.contains(rel);
        match self.hashes.refresh(&root, rel, listed)? {
            Refreshed::Same => return Ok(()),
            Refreshed::Modified => changes.paths.push(rel.clone()),
            Refreshed::Added | Refreshed::Removed => {
                changes.paths.push(rel.clone());
                changes.paths_changed = true;
            }
            Refreshed::Directory => {
                if was_file {
                    // A file replaced by a directory: the copy drops the file.
                    self.dirty.insert(rel.clone());
                    changes.paths.push(rel.clone());
                    changes.paths_changed = true;
                }
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
        self.dirty.insert(rel.clone());
        // Gone: it may have been a directory, with watches and files below.
        if !root.join(rel.to_os_path()).exists() {
            self.fs.remove_under(&self.scope, rel.as_bytes());
            let gone = self.hashes.forget_under(rel);
            changes.paths_changed |= !gone.is_empty();
            self.dirty.extend(gone.iter().cloned());
            changes.paths.extend(gone);
        }
        Ok(())
    }

    /// Hashes the files directly in `dir` (a directory just watched).
    fn files_of(&mut self, dir: &[u8], changes: &mut Changes) -> Result<()> {
        let root = self.scope.root().to_path_buf();
        let full = root.join(RepoPath::from_bytes(dir.to_vec()).to_os_path());
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
            if self.hashes.refresh(&root, &rel, listed)? != Refreshed::Same {
                self.dirty.insert(rel.clone());
                changes.paths.push(rel);
                changes.paths_changed = true;
            }
        }
        Ok(())
    }

    /// Reads the index and the ignore rules again, watches what is now in and drops what is
    /// now out, and hashes the live tree again.
    pub(crate) fn rescan(&mut self) -> Result<Changes> {
        self.scope = WatchScope::new(self.scope.root(), self.own.clone())?;
        let dirs = self.scope.directories_under(b"");
        let keep: std::collections::HashSet<&[u8]> = dirs.iter().map(Vec::as_slice).collect();
        for old in self.fs.watched_dirs() {
            if !keep.contains(old.as_slice()) {
                self.fs.remove_under(&self.scope, &old);
            }
        }
        self.fs.add(&self.scope, dirs.clone())?;
        let now = hash_live(self.scope.root(), &self.cache_dir)?;
        let paths = now.differences(&self.hashes);
        let paths_changed = paths
            .iter()
            .any(|p| now.contains(p) != self.hashes.contains(p));
        self.dirty.extend(paths.iter().cloned());
        self.hashes = now;
        Ok(Changes {
            paths,
            paths_changed,
        })
    }
}

/// The paths of the live tree's snapshot (tracked, and untracked not ignored).
fn live_paths(root: &std::path::Path) -> Result<Vec<RepoPath>> {
    Ok(Repo::open(Some(root), None)?.snapshot(None)?.paths())
}

/// Every file of the live tree's snapshot with its hash, through the stat cache `fixgate
/// manifest` and `lock --check` keep for it (a rescan need not read what did not change).
fn hash_live(root: &std::path::Path, cache_dir: &std::path::Path) -> Result<TreeHashes> {
    let snapshot = Repo::open(Some(root), None)?.snapshot(None)?;
    let mut stat = StatCache::load(cache_dir, &snapshot.root);
    let entries: Vec<&Entry> = snapshot.entries.iter().collect();
    let hashes = crate::manifest::hash_entries(&snapshot, &entries, Some(&mut stat))?;
    // The stat cache only saves work: failing to keep it costs the next rescan time.
    let _ = stat.save();
    let mut tree = TreeHashes::default();
    for (e, (hash, size)) in entries.iter().zip(hashes) {
        let kind = match e.kind {
            EntryKind::Symlink => FileKind::Link,
            EntryKind::File | EntryKind::Executable => FileKind::File,
        };
        let known = Known {
            hash,
            size,
            kind,
            executable: e.kind == EntryKind::Executable,
        };
        tree.set(&e.path, Some(known));
    }
    Ok(tree)
}
