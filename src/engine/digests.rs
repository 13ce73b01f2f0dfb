//! Content digests of a snapshot's files, computed on demand: what verifying traces are checked
//! against, and what makes the keys of the steps that read a whole tree.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fixgate_cache::{Digest, KeyWriter};

use crate::error::{Error, Result};
use crate::repo_path::RepoPath;
use crate::snapshot::{EntryKind, Snapshot};

/// Files whose content pytest reads before the plugin can trace anything (configuration and
/// the conftest files loaded at startup): static dependencies of every run.
pub(crate) fn is_startup_file(path: &RepoPath) -> bool {
    matches!(
        path.file_name(),
        b"conftest.py"
            | b"pytest.ini"
            | b"pyproject.toml"
            | b"setup.cfg"
            | b"tox.ini"
            | b".pytest.ini"
    )
}

pub(crate) struct TreeDigests {
    pub(crate) snapshot: Arc<Snapshot>,
    memo: Mutex<HashMap<Vec<u8>, Option<Digest>>>,
    git: Mutex<Option<Option<git2::Repository>>>,
}

impl TreeDigests {
    pub(crate) fn new(snapshot: Arc<Snapshot>) -> TreeDigests {
        TreeDigests {
            snapshot,
            memo: Mutex::new(HashMap::new()),
            git: Mutex::new(None),
        }
    }

    /// Seeds the memo with digests already computed (a manifest's, say).
    pub(crate) fn prime(&self, known: impl IntoIterator<Item = (RepoPath, Digest)>) {
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        for (p, d) in known {
            memo.insert(p.as_bytes().to_vec(), Some(d));
        }
    }

    /// The digest of a repo-relative path in this snapshot; `None` when it has no such file.
    /// A symlink's digest is its target string's, tagged so it cannot equal a file's.
    pub(crate) fn digest(&self, path: &str) -> Option<Digest> {
        let key = RepoPath::parse_lossless(path);
        if let Some(d) = self
            .memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key.as_bytes())
        {
            return *d;
        }
        let d = self.compute(&key);
        self.memo
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.as_bytes().to_vec(), d);
        d
    }

    fn compute(&self, path: &RepoPath) -> Option<Digest> {
        let entry = self.snapshot.find(path)?;
        // One git handle per side, opened on first use: a run's trace is checked file by file.
        let mut git = self.git.lock().unwrap_or_else(|e| e.into_inner());
        if git.is_none() {
            *git = Some(self.snapshot.open_git().ok()?);
        }
        let bytes = self
            .snapshot
            .read(entry, git.as_ref().and_then(Option::as_ref))
            .ok()?;
        Some(content_digest(entry.kind, &bytes))
    }

    /// The digest of the set of paths (not contents): adding or removing any file changes it.
    /// Audit hooks cannot see `stat`-type reads, so every run depends on it.
    pub(crate) fn paths_digest(&self) -> Digest {
        let mut w = KeyWriter::new("paths");
        w.list(&self.snapshot.entries, |w, e| {
            w.bytes(e.path.as_bytes()).u64(e.kind as u64);
        });
        w.finish()
    }

    /// The digests of the startup files (see [`is_startup_file`]).
    pub(crate) fn startup_files(&self) -> Vec<(String, Digest)> {
        self.snapshot
            .entries
            .iter()
            .filter(|e| is_startup_file(&e.path))
            .filter_map(|e| {
                let p = e.path.to_string();
                self.digest(&p).map(|d| (p, d))
            })
            .collect()
    }
}

pub(crate) fn content_digest(kind: EntryKind, bytes: &[u8]) -> Digest {
    match kind {
        EntryKind::Symlink => {
            let mut w = KeyWriter::new("symlink");
            w.bytes(bytes);
            w.finish()
        }
        _ => Digest::of(bytes),
    }
}

/// The digest that identifies a snapshot's content: the tree id for a commit, a hash over every
/// file's content (through the stat cache) for the working tree.
pub(crate) fn tree_digest(
    snapshot: &Snapshot,
    stat_cache: Option<&mut crate::statcache::StatCache>,
) -> Result<Digest> {
    let mut w = KeyWriter::new("tree");
    if let Some(commit) = snapshot.commit() {
        let git = snapshot
            .open_git()?
            .ok_or_else(|| Error::bug("a commit snapshot without git"))?;
        let tree = git.find_commit(commit)?.tree_id();
        w.str("git-tree").str(&tree.to_string());
        return Ok(w.finish());
    }
    let entries: Vec<&crate::snapshot::Entry> = snapshot.entries.iter().collect();
    let hashes = crate::manifest::hash_entries(snapshot, &entries, stat_cache)?;
    w.str("worktree");
    for (e, (h, _)) in entries.iter().zip(hashes) {
        w.bytes(e.path.as_bytes())
            .u64(e.kind as u64)
            .bytes(h.as_bytes());
    }
    Ok(w.finish())
}
