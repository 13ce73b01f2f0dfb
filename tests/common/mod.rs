//! Test helpers: small git repositories in temp dirs, and the real `fixgate` binary run on them.
#![allow(dead_code)] // each integration test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct TestRepo {
    pub dir: tempfile::TempDir,
    pub cache: tempfile::TempDir,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl TestRepo {
    /// An empty git repository.
    pub fn new() -> TestRepo {
        let repo = TestRepo::plain();
        git(repo.path(), &["init", "-q", "-b", "main"]);
        git(repo.path(), &["config", "core.autocrlf", "false"]);
        repo
    }

    /// A directory that is not a git repository.
    pub fn plain() -> TestRepo {
        TestRepo {
            dir: tempfile::tempdir().unwrap(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> &TestRepo {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
        self
    }

    pub fn remove(&self, rel: &str) -> &TestRepo {
        std::fs::remove_file(self.path().join(rel)).unwrap();
        self
    }

    pub fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.path().join(rel)).unwrap()
    }

    /// Commits everything in the work tree; returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        git(self.path(), &["add", "-A"]);
        git(
            self.path(),
            &["commit", "-q", "--allow-empty", "-m", message],
        );
        git(self.path(), &["rev-parse", "HEAD"])
    }

    /// Runs the real binary on this repository with its own cache directory.
    pub fn fixgate(&self, args: &[&str]) -> Run {
        self.fixgate_in(self.path(), args)
    }

    pub fn fixgate_in(&self, cwd: &Path, args: &[&str]) -> Run {
        let out = Command::new(env!("CARGO_BIN_EXE_fixgate"))
            .args(args)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .current_dir(cwd)
            .env_remove("FIXGATE_CACHE_DIR")
            .env("NO_COLOR", "1")
            .output()
            .expect("fixgate runs");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Every file under `dir` (except `.git`) with its bytes, for "the tree is unchanged" checks.
pub fn tree_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                if e.file_name() != ".git" {
                    stack.push(e.path());
                }
            } else if ft.is_symlink() {
                let t = std::fs::read_link(e.path()).unwrap();
                out.push((e.path(), t.to_string_lossy().as_bytes().to_vec()));
            } else {
                out.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}
