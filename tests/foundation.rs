//! Issue 2: manifests, configuration errors, the lock and the delta, on real git repositories.

mod common;

use fixgate::exit;

use common::{git, TestRepo};
use serde_json::Value;

fn fixture_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("README.md", "demo\n")
        .write("src/app.py", "X = 1\n")
        .write("tests/test_app.py", "def test_x():\n    assert True\n")
        .write("tests/fixtures/db/app.sqlite", b"SQLite format 3\0rows")
        .write("tests/fixtures/config/settings.json", "{\"a\": 1}\n")
        .write("tests/fixtures/top.txt", "root file\n")
        .write("tests/data/golden/out.txt", "expected\n");
    repo.commit("base");
    repo
}

fn paths(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn manifest_of_worktree_and_of_its_commit_are_byte_identical() {
    let repo = fixture_repo();
    let a = repo.fixgate(&["manifest", "--format", "json"]);
    let b = repo.fixgate(&["manifest", "--format", "json"]);
    let c = repo.fixgate(&["manifest", "--format", "json", "--rev", "HEAD"]);
    let d = repo.fixgate(&["--format", "json", "manifest", "--rev", "main"]);
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(a.stdout, c.stdout);
    assert_eq!(a.stdout, d.stdout);
    let v = a.json();
    assert_eq!(v["schema"], 1);
    assert_eq!(
        paths(&v, "files"),
        [
            "tests/data/golden/out.txt",
            "tests/fixtures/config/settings.json",
            "tests/fixtures/db/app.sqlite",
            "tests/fixtures/top.txt"
        ]
    );
    let groups: Vec<&str> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["config", "db", "fixtures", "golden"]);
    let db = &v["files"][2];
    assert_eq!(db["group"], "db");
    assert_eq!(db["size"], 20);
    assert_eq!(
        db["blake3"],
        blake3::hash(b"SQLite format 3\0rows").to_hex().as_str()
    );
}

#[test]
fn a_manifest_of_a_clean_checkout_matches_the_manifest_read_from_git_objects() {
    let repo = fixture_repo();
    let from_git = repo.fixgate(&["manifest", "--format", "json", "--rev", "HEAD"]);
    let clone = tempfile::tempdir().unwrap();
    git(
        clone.path(),
        &["clone", "-q", repo.path().to_str().unwrap(), "c"],
    );
    let checkout = repo.fixgate(&[
        "--repo",
        clone.path().join("c").to_str().unwrap(),
        "manifest",
        "--format",
        "json",
    ]);
    assert_eq!(from_git.stdout, checkout.stdout);
}

#[test]
fn the_stat_cache_notices_a_same_size_rewrite() {
    let repo = fixture_repo();
    let first = repo.fixgate(&["manifest", "--format", "json"]).json();
    // Same size, new content, written right away: the racy case.
    repo.write("tests/fixtures/top.txt", "ROOT FILE\n");
    let second = repo.fixgate(&["manifest", "--format", "json"]).json();
    assert_ne!(first["files"][3]["blake3"], second["files"][3]["blake3"]);
    assert_eq!(
        second["files"][3]["blake3"],
        blake3::hash(b"ROOT FILE\n").to_hex().as_str()
    );
}

#[test]
fn explicit_groups_from_the_manifest_file_and_pyproject() {
    let repo = fixture_repo();
    repo.write(
        "fixtures.manifest",
        "# groups\n\ndb: tests/fixtures/db/*.sqlite\nall_json: tests/**/*.json\n",
    )
    .write(
        "pyproject.toml",
        "[tool.fixgate.groups]\ngolden = [\"tests/data/**\"]\n",
    );
    let v = repo.fixgate(&["manifest", "--format", "json"]).json();
    let groups: Vec<&str> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["all_json", "db", "golden"]);
    assert_eq!(
        paths(&v, "files"),
        [
            "tests/data/golden/out.txt",
            "tests/fixtures/config/settings.json",
            "tests/fixtures/db/app.sqlite"
        ]
    );
}

fn config_error(manifest: Option<&str>, pyproject: Option<&str>, expect: &[&str]) {
    let repo = fixture_repo();
    if let Some(m) = manifest {
        repo.write("fixtures.manifest", m);
    }
    if let Some(p) = pyproject {
        repo.write("pyproject.toml", p);
    }
    let run = repo.fixgate(&["manifest"]);
    assert_eq!(run.code, exit::ERROR, "{run:?}");
    for e in expect {
        assert!(run.stderr.contains(e), "expected {e:?} in:\n{}", run.stderr);
    }
}

#[test]
fn config_error_line_without_colon() {
    config_error(
        Some("# c\ndb: tests/fixtures/db/*\nconfig\n"),
        None,
        &["fixtures.manifest", "line 3", "name: glob"],
    );
}

#[test]
fn config_error_empty_name() {
    config_error(
        Some(": tests/fixtures/*\n"),
        None,
        &["fixtures.manifest", "line 1", "name"],
    );
}

#[test]
fn config_error_duplicate_in_both_files() {
    config_error(
        Some("db: tests/fixtures/db/*\n"),
        Some("[tool.fixgate.groups]\ndb = [\"tests/fixtures/db/*.sqlite\"]\n"),
        &["db", "fixtures.manifest", "line 1", "pyproject.toml"],
    );
}

#[test]
fn config_error_invalid_glob() {
    config_error(
        Some("db: tests/fixtures/[db\n"),
        None,
        &["fixtures.manifest", "line 1", "glob"],
    );
}

#[test]
fn config_error_glob_escapes_the_repo() {
    config_error(
        Some("\ndb: ../outside/*\n"),
        None,
        &["fixtures.manifest", "line 2", ".."],
    );
    config_error(
        None,
        Some("[tool.fixgate.groups]\ndb = [\"/etc/*\"]\n"),
        &["pyproject.toml", "db"],
    );
}

#[test]
fn config_error_bad_toml_names_the_line() {
    config_error(
        None,
        Some("[tool.fixgate.groups]\ndb = [\"x\"\n"),
        &["pyproject.toml", "line"],
    );
}

#[test]
fn lock_check_reports_every_drift_kind_with_exit_3() {
    let repo = fixture_repo();
    let w = repo.fixgate(&["lock"]);
    assert_eq!(w.code, 0, "{w:?}");
    assert!(repo.path().join("fixtures.lock").exists());
    let ok = repo.fixgate(&["lock", "--check"]);
    assert_eq!(ok.code, 0, "{ok:?}");

    repo.write("tests/fixtures/db/app.sqlite", b"SQLite format 3\0ROWS!")
        .write("tests/fixtures/db/new.sqlite", b"new")
        .remove("tests/fixtures/top.txt");
    let human = repo.fixgate(&["lock", "--check"]);
    assert_eq!(human.code, exit::DRIFT, "{human:?}");
    assert!(
        human.stdout.contains("modified") && human.stdout.contains("tests/fixtures/db/app.sqlite")
    );
    let json = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(json.code, exit::DRIFT);
    let drift: Vec<(String, String)> = json.json()["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().into(),
                d["change"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        drift,
        [
            (
                "tests/fixtures/db/app.sqlite".to_string(),
                "modified".to_string()
            ),
            ("tests/fixtures/db/new.sqlite".into(), "added".into()),
            ("tests/fixtures/top.txt".into(), "removed".into()),
        ]
    );
    // The committed revision still matches the lock.
    assert_eq!(repo.fixgate(&["lock", "--check", "--rev", "HEAD"]).code, 0);
}

#[test]
fn lock_check_without_a_lock_is_a_usage_error_with_a_hint() {
    let repo = fixture_repo();
    let r = repo.fixgate(&["lock", "--check"]);
    assert_eq!(r.code, exit::ERROR);
    assert!(r.stderr.contains("fixgate lock"), "{r:?}");
}

#[test]
fn delta_across_commits_with_rename_deletion_symlink_and_non_utf8_name() {
    let repo = fixture_repo();
    let base = git(repo.path(), &["rev-parse", "HEAD"]);
    git(
        repo.path(),
        &[
            "mv",
            "tests/fixtures/config/settings.json",
            "tests/fixtures/config/app.json",
        ],
    );
    repo.remove("tests/data/golden/out.txt");
    repo.write(
        "tests/fixtures/db/app.sqlite",
        b"SQLite format 3\0more rows",
    );
    std::os::unix::fs::symlink(
        "../db/app.sqlite",
        repo.path().join("tests/fixtures/config/link.sqlite"),
    )
    .unwrap();
    {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"tests/fixtures/db/caf\xe9.bin");
        std::fs::write(repo.path().join(name), b"bytes").unwrap();
    }
    repo.commit("head");

    let v = repo.fixgate(&["delta", &base, "HEAD", "--format", "json"]);
    assert_eq!(v.code, 0, "{v:?}");
    let v = v.json();
    let changes: Vec<(String, String)> = v["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().into(),
                c["change"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            (
                "tests/data/golden/out.txt".to_string(),
                "removed".to_string()
            ),
            ("tests/fixtures/config/app.json".into(), "added".into()),
            ("tests/fixtures/config/link.sqlite".into(), "added".into()),
            (
                "tests/fixtures/config/settings.json".into(),
                "removed".into()
            ),
            ("tests/fixtures/db/app.sqlite".into(), "modified".into()),
            ("tests/fixtures/db/caf\\xE9.bin".into(), "added".into()),
        ]
    );
    assert_eq!(
        v["changed"][1]["renamed_from"],
        "tests/fixtures/config/settings.json"
    );
    // The symlink is recorded as its target string, never followed.
    assert_eq!(
        v["changed"][2]["head_blake3"],
        blake3::hash(b"../db/app.sqlite").to_hex().as_str()
    );
    let groups: Vec<&str> = v["groups_changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["config", "db", "golden"]);

    // The working tree (the default head) equals HEAD here.
    let wt = repo.fixgate(&["delta", &base, "--format", "json"]).json();
    assert_eq!(wt["changed"], v["changed"]);
    // And the symlink reads the same from the work tree as from git objects.
    let m1 = repo.fixgate(&["manifest", "--format", "json"]);
    let m2 = repo.fixgate(&["manifest", "--format", "json", "--rev", "HEAD"]);
    assert_eq!(m1.stdout, m2.stdout);
}

#[test]
fn a_repo_without_fixture_roots_has_an_empty_manifest() {
    let repo = TestRepo::new();
    repo.write("src/a.py", "A = 1\n")
        .write("tests/test_a.py", "def test_a():\n    pass\n");
    repo.commit("base");
    let r = repo.fixgate(&["manifest", "--format", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["files"].as_array().unwrap().len(), 0);
    assert_eq!(v["groups"].as_array().unwrap().len(), 0);
    let h = repo.fixgate(&["manifest"]);
    assert!(h.stdout.contains("no fixture groups"), "{h:?}");
}

#[test]
fn a_directory_that_is_not_a_git_repository() {
    let repo = TestRepo::plain();
    repo.write("tests/fixtures/db/app.sqlite", "rows");
    let m = repo.fixgate(&["manifest", "--format", "json"]);
    assert_eq!(m.code, 0, "{m:?}");
    assert_eq!(paths(&m.json(), "files"), ["tests/fixtures/db/app.sqlite"]);
    let rev = repo.fixgate(&["manifest", "--rev", "HEAD"]);
    assert_eq!(rev.code, exit::ERROR);
    assert!(rev.stderr.contains("not a git repository"), "{rev:?}");
    let delta = repo.fixgate(&["delta", "HEAD~1"]);
    assert_eq!(delta.code, exit::ERROR);
    assert!(delta.stderr.contains("not a git repository"), "{delta:?}");
}

#[test]
fn an_unknown_revision_is_a_clear_error() {
    let repo = fixture_repo();
    let r = repo.fixgate(&["manifest", "--rev", "no-such-branch"]);
    assert_eq!(r.code, exit::ERROR);
    assert!(
        r.stderr.contains("unknown revision \"no-such-branch\""),
        "{r:?}"
    );
}

#[test]
fn untracked_files_count_and_ignored_files_do_not() {
    let repo = fixture_repo();
    repo.write(".gitignore", "*.tmp\n")
        .write("tests/fixtures/db/scratch.tmp", "ignored")
        .write("tests/fixtures/db/extra.sqlite", "untracked");
    let v = repo.fixgate(&["manifest", "--format", "json"]).json();
    let files = paths(&v, "files");
    assert!(files.contains(&"tests/fixtures/db/extra.sqlite".to_string()));
    assert!(!files.iter().any(|f| f.ends_with(".tmp")));
}

/// The work-tree snapshot lists its own files (one parallel walk) instead of asking libgit2's
/// status, so it is held to git's own answer: `git ls-files --cached --others --exclude-standard`.
#[test]
fn worktree_snapshot_lists_the_files_git_lists() {
    let repo = TestRepo::new();
    repo.write("pyproject.toml", "[tool.fixgate.groups]\nall = [\"**\"]\n")
        .write(".gitignore", "*.tmp\nbuild/\nscratch\n")
        .write("tests/fixtures/db/app.sqlite", "rows")
        .write("tests/fixtures/db/kept.tmp", "tracked though ignored")
        .write("build/keep.txt", "tracked in an ignored directory")
        .write("gone.txt", "deleted below");
    common::git(
        repo.path(),
        &["add", "-f", "tests/fixtures/db/kept.tmp", "build/keep.txt"],
    );
    repo.commit("base");
    repo.remove("gone.txt")
        .write("tests/fixtures/db/extra.sqlite", "untracked")
        .write("tests/fixtures/db/scratch.tmp", "ignored")
        .write("build/out.bin", "ignored, beside a tracked file")
        .write(
            "new/deep/er/file.txt",
            "untracked, three new directories down",
        )
        .write("new/deep/.gitignore", "*.log\n")
        .write("new/deep/er/noise.log", "ignored by a nested .gitignore")
        .write("scratch/a.txt", "ignored directory named without a slash")
        .write("other/x/y.txt", "untracked");
    let nested = repo.path().join("vendored");
    std::fs::create_dir_all(&nested).unwrap();
    common::git(&nested, &["init", "-q"]);
    std::fs::write(nested.join("inner.txt"), "a nested repository's file").unwrap();

    let v = repo.fixgate(&["manifest", "--format", "json"]).json();
    let mut ours = paths(&v, "files");
    ours.sort();
    let listed = common::git(
        repo.path(),
        &["ls-files", "--cached", "--others", "--exclude-standard"],
    );
    let mut git: Vec<String> = listed
        .lines()
        .filter(|l| !l.ends_with('/') && *l != "gone.txt")
        .map(str::to_owned)
        .collect();
    git.sort();
    git.dedup();
    assert_eq!(ours, git);
    assert!(ours.contains(&"build/keep.txt".to_string()));
    assert!(ours.contains(&"new/deep/er/file.txt".to_string()));
    assert!(!ours.iter().any(|p| p.starts_with("vendored")));
}

#[test]
fn output_flag_writes_the_report_to_a_file() {
    let repo = fixture_repo();
    let out = repo
        .path()
        .join("..")
        .join(format!("m-{}.json", std::process::id()));
    let r = repo.fixgate(&[
        "manifest",
        "--format",
        "json",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.is_empty());
    let text = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    assert!(text.contains("\"schema\": 1"));
}

#[test]
fn repo_defaults_to_the_git_root_above_the_current_directory() {
    let repo = fixture_repo();
    let a = repo.fixgate(&["manifest", "--format", "json"]);
    let b = repo.fixgate_in(
        &repo.path().join("tests/fixtures"),
        &["manifest", "--format", "json"],
    );
    assert_eq!(a.stdout, b.stdout);
}
