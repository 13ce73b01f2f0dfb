//! What `fixgate watch` watches: the directories the working-tree snapshot lists (tracked, or
//! untracked and not ignored), never `.git`, an ignored folder, a virtualenv, a nested
//! repository or fixgate's own cache; and which paths an event may name to count as a change.
//!
//! inotify watches are per directory and limited per user (`fs.inotify.max_user_watches`):
//! a watcher that descends into `node_modules/` or `.venv/` spends the limit on folders no
//! audit reads. So the walk asks before it enters: a directory holding a tracked file is
//! entered (as git lists it even when an ignore rule matches it); any other is entered only
//! when git does not ignore it and it is not a virtualenv or another repository.

use std::path::{Path, PathBuf};

use git2::Repository;

use crate::error::Result;
use crate::repo_path::RepoPath;

/// The repository's watched tree, as the index and the ignore rules say now.
pub(crate) struct WatchScope {
    root: PathBuf,
    git: Option<Repository>,
    /// The index's files, the directories above them, its submodules.
    index: crate::git_index::Tracked,
    /// Folders inside the repository that fixgate writes (its cache directory, the temporary
    /// directory): watching them would make every audit trigger the next.
    own: Vec<PathBuf>,
    /// The stat of the index read (`None`: none), to tell when git changed what it tracks.
    index_stat: Option<crate::statcache::StatKey>,
}

/// Whether a path is part of the watched tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Membership {
    /// A directory to watch, or a file of the snapshot.
    In,
    /// `.git`, ignored, a virtualenv, a nested repository, fixgate's own folder.
    Out,
}

impl WatchScope {
    /// Reads the index of the repository at `root` (none: a plain folder, every directory but
    /// the excluded ones is in). Of `own`, only folders inside the root matter: the temporary
    /// directory above a repository in /tmp leaves the repository watched.
    pub(crate) fn new(root: &Path, own: Vec<PathBuf>) -> Result<WatchScope> {
        let own = own
            .into_iter()
            .filter(|o| o.starts_with(root) && o != root)
            .collect();
        let git = Repository::open(root).ok().filter(|r| {
            r.workdir()
                .and_then(|w| w.canonicalize().ok())
                .is_some_and(|w| w == root)
        });
        let mut scope = WatchScope {
            root: root.to_path_buf(),
            git: None,
            index: crate::git_index::Tracked::default(),
            own,
            index_stat: None,
        };
        if let Some(git) = git {
            scope.index_stat = index_stat(&git);
            scope.index = crate::git_index::tracked(&git)?;
            scope.git = Some(git);
        }
        Ok(scope)
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Whether git's index changed since it was read (an add, a commit, a checkout): what is
    /// tracked, and so what is watched, may have changed with it.
    pub(crate) fn index_changed(&self) -> bool {
        self.git
            .as_ref()
            .is_some_and(|g| index_stat(g) != self.index_stat)
    }

    /// Whether the directory `rel` (repo-relative, `/`-separated; empty for the root) is
    /// watched. Its parent is assumed to be.
    pub(crate) fn directory(&self, rel: &[u8]) -> Membership {
        if rel.is_empty() {
            return Membership::In;
        }
        let path = RepoPath::from_bytes(rel.to_vec());
        let full = self.root.join(path.to_os_path());
        if path.file_name() == b".git"
            || self.index.gitlinks.contains(rel)
            || self.own.iter().any(|o| full.starts_with(o))
        {
            return Membership::Out;
        }
        if self.index.dirs.contains(rel) {
            return Membership::In;
        }
        // Another repository's work tree, or a virtualenv (its marker file, PEP 405), is not
        // the suite's code even when no ignore rule says so.
        if full.join(".git").exists() || full.join("pyvenv.cfg").exists() {
            return Membership::Out;
        }
        match self.ignored(&path) {
            true => Membership::Out,
            false => Membership::In,
        }
    }

    /// Whether the file `rel`, in a watched directory, is part of the snapshot.
    pub(crate) fn file(&self, rel: &RepoPath) -> Membership {
        let full = self.root.join(rel.to_os_path());
        if self.own.iter().any(|o| full.starts_with(o)) {
            return Membership::Out;
        }
        if self.index.files.contains(rel.as_bytes()) || !self.ignored(rel) {
            return Membership::In;
        }
        Membership::Out
    }

    fn ignored(&self, rel: &RepoPath) -> bool {
        // A plain folder has no ignore rules; an error asking git is not a reason to miss a
        // change.
        self.git
            .as_ref()
            .is_some_and(|g| g.is_path_ignored(rel.to_os_path()).unwrap_or(false))
    }

    /// Every watched directory at or below `start` (repo-relative), `start` first; a directory
    /// that cannot be listed (gone, unreadable) is skipped with its subtree.
    pub(crate) fn directories_under(&self, start: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        if self.directory(start) == Membership::Out {
            return out;
        }
        let mut stack = vec![start.to_vec()];
        while let Some(dir) = stack.pop() {
            let full = self
                .root
                .join(RepoPath::from_bytes(dir.clone()).to_os_path());
            let Ok(rd) = std::fs::read_dir(&full) else {
                continue;
            };
            for entry in rd.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let sub = crate::snapshot::child(&dir, &entry.file_name());
                if self.directory(&sub) == Membership::In {
                    stack.push(sub);
                }
            }
            out.push(dir);
        }
        out
    }

    /// The repo-relative path of an absolute path an event named; `None` outside the root.
    pub(crate) fn relative(&self, path: &Path) -> Option<RepoPath> {
        use std::os::unix::ffi::OsStrExt;
        let rel = path.strip_prefix(&self.root).ok()?;
        Some(RepoPath::from_bytes(rel.as_os_str().as_bytes().to_vec()))
    }
}

fn index_stat(git: &Repository) -> Option<crate::statcache::StatKey> {
    let meta = std::fs::metadata(git.path().join("index")).ok()?;
    Some(crate::statcache::StatKey::from_metadata(&meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .unwrap();
        assert!(ok.success());
    }

    #[test]
    fn ignored_folders_virtualenvs_and_git_get_no_watch_and_tracked_ones_do() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in [
            "src/pkg",
            "tests",
            "node_modules/a/b",
            "build/keep",
            "venv/lib",
            "cache",
            "new/deeper",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("venv/pyvenv.cfg"), "home = /usr\n").unwrap();
        std::fs::write(root.join(".gitignore"), "node_modules/\nbuild/\n").unwrap();
        std::fs::write(root.join("src/pkg/a.py"), "").unwrap();
        std::fs::write(root.join("build/keep/tracked.txt"), "").unwrap();
        git(&root, &["init", "-q"]);
        git(&root, &["add", ".gitignore", "src"]);
        git(&root, &["add", "-f", "build/keep/tracked.txt"]);
        let scope = WatchScope::new(&root, vec![root.join("cache")]).unwrap();
        let mut dirs: Vec<String> = scope
            .directories_under(b"")
            .into_iter()
            .map(|d| String::from_utf8(d).unwrap())
            .collect();
        dirs.sort();
        assert_eq!(
            dirs,
            [
                "",
                "build",
                "build/keep",
                "new",
                "new/deeper",
                "src",
                "src/pkg",
                "tests"
            ]
        );
        assert_eq!(
            scope.file(&RepoPath::from("build/keep/tracked.txt")),
            Membership::In
        );
        assert_eq!(
            scope.file(&RepoPath::from("build/other.txt")),
            Membership::Out
        );
        assert_eq!(scope.file(&RepoPath::from("new/x.py")), Membership::In);
        assert_eq!(scope.directory(b"node_modules"), Membership::Out);
    }

    #[test]
    fn a_repository_inside_the_temporary_directory_is_watched() {
        // The first helper's scope treated the temporary directory, an ancestor of a
        // repository in /tmp, as fixgate's own folder: nothing below the root was watched.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::write(root.join("tests/test_a.py"), "").unwrap();
        git(&root, &["init", "-q"]);
        let above = root.parent().unwrap().to_path_buf();
        let scope = WatchScope::new(&root, vec![above]).unwrap();
        assert_eq!(scope.directories_under(b"").len(), 2);
        assert_eq!(
            scope.file(&RepoPath::from("tests/test_a.py")),
            Membership::In
        );
    }
}
