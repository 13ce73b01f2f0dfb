//! Test helpers: small git repositories in temp dirs, and the real `fixgate` binary run on them.
#![allow(dead_code)] // each integration test binary uses a different subset

pub mod audit;
pub mod containment;
pub mod servers;

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
    /// Standard output as JSON; an audit report is checked against docs/json-report.schema.json
    /// first (issue 54: the schema holds for every report the tests see).
    pub fn json(&self) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        });
        if ["schema", "verdict", "findings"]
            .iter()
            .all(|k| v.get(k).is_some())
        {
            report_matches_schema(&self.stdout);
        }
        v
    }
}

/// Checks an audit report against docs/json-report.schema.json, once per distinct report.
pub fn report_matches_schema(report: &str) {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static CHECKED: Mutex<Option<HashSet<[u8; 32]>>> = Mutex::new(None);
    let digest = *blake3::hash(report.as_bytes()).as_bytes();
    if CHECKED
        .lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .contains(&digest)
    {
        return;
    }
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json-report.schema.json");
    assert_matches_schema(report, &schema);
    // Every blocking finding about a test has a way to reproduce it (the source-side findings
    // are about a module's text, which the message quotes).
    let v: serde_json::Value = serde_json::from_str(report).expect("a JSON report");
    for f in v["findings"].as_array().into_iter().flatten() {
        let about_source = matches!(
            f["kind"].as_str(),
            Some("special-cased-input" | "eq-ignores-argument" | "swallowed-error")
        );
        assert!(
            f["blocking"] != true || about_source || f["repro"].is_string(),
            "a blocking finding without a repro: {f:#}"
        );
    }
    CHECKED
        .lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(digest);
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
    // A condition of `containment` may have given the repository to another user.
    let out = Command::new("git")
        .args(["-c", "safe.directory=*"])
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
        let mut cmd = fixgate_owning(cwd, self.path(), self.cache.path(), &[], args);
        let out = cmd.output().expect("fixgate runs");
        dumped(Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs the binary on this repository with the test interpreter, the cache directory
    /// `cache` and the variables `env` set.
    pub fn fixgate_with(&self, cache: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
        fixgate_py_at(self.path(), cache, env, args)
    }
}

/// The real binary, with none of the caller's `FIXGATE_*` variables: a developer's
/// `FIXGATE_REMOTE_CACHE` or `FIXGATE_FORK=0` must not reach a test that did not ask for it.
/// `FIXGATE_TEST_NO_NAMESPACES=1` runs every test without namespaces (the Landlock tier) but
/// those that set `FIXGATE_NO_NAMESPACES` themselves: the suite must hold in both modes. The
/// condition of `FIXGATE_TEST_CONTAINMENT` ([`containment::Condition`]) is applied by
/// [`fixgate_at_command`], which knows the folders the condition's user must own.
pub fn fixgate_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fixgate"));
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"FIXGATE_") {
            cmd.env_remove(name);
        }
    }
    if std::env::var_os("FIXGATE_TEST_NO_NAMESPACES").is_some_and(|v| v == "1") {
        cmd.env("FIXGATE_NO_NAMESPACES", "1");
    }
    cmd
}

/// The command `fixgate_at` runs, for a caller that spawns it itself.
pub fn fixgate_at_command(
    cwd: &Path,
    cache: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> Command {
    fixgate_owning(cwd, &containment::repository_of(cwd), cache, env, args)
}

/// [`fixgate_at_command`] for a run whose repository is `repo`, not the one around `cwd`: the
/// condition's user is given `repo` and the cache.
fn fixgate_owning(
    cwd: &Path,
    repo: &Path,
    cache: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> Command {
    let mut cmd = fixgate_command();
    cmd.args(args)
        .arg("--cache-dir")
        .arg(cache)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied());
    containment::Condition::current().configure(&mut cmd, &[repo, cache]);
    cmd
}

/// Runs the real binary in `cwd` with the cache directory `cache` and the variables `env` (and
/// none of the caller's `FIXGATE_*`).
pub fn fixgate_at(cwd: &Path, cache: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let out = fixgate_at_command(cwd, cache, env, args)
        .output()
        .expect("fixgate runs");
    dumped(Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// [`fixgate_at`] with the test interpreter (`--python`).
pub fn fixgate_py_at(cwd: &Path, cache: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let py = python();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--python", py.to_str().expect("a UTF-8 interpreter path")]);
    fixgate_at(cwd, cache, env, &all)
}

/// With `FIXGATE_TEST_DUMP_DIR` set, every run's standard output is also written there, named
/// after the test (the harness names each test's thread after it) and the run's place in it:
/// two builds' reports can then be compared run by run (a restructure must not change them).
fn dumped(run: Run) -> Run {
    use std::cell::Cell;
    thread_local!(static SEQ: Cell<u32> = const { Cell::new(0) });
    if let Some(dir) = std::env::var_os("FIXGATE_TEST_DUMP_DIR") {
        let seq = SEQ.with(|s| {
            s.set(s.get() + 1);
            s.get()
        });
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("main").replace("::", ".");
        // The test binary's name without cargo's hash: `audit-3f2a…` is `audit`.
        let exe = std::env::args().next().unwrap_or_default();
        let name = Path::new(&exe).file_name().unwrap_or_default();
        let binary = name
            .to_string_lossy()
            .split('-')
            .next()
            .unwrap_or("")
            .to_owned();
        let dir = Path::new(&dir);
        let _ = std::fs::create_dir_all(dir);
        let _ = std::fs::write(
            dir.join(format!("{binary}.{test}.{seq:03}.out")),
            format!("exit {}\n{}", run.code, run.stdout),
        );
    }
    run
}

/// Like [`fixgate_at`], for a run that must end by itself: killed, and the test failed with
/// what it wrote, once it has run `limit`.
pub fn fixgate_within(
    cwd: &Path,
    cache: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    limit: std::time::Duration,
) -> Run {
    fixgate_within_telling(cwd, cache, env, args, limit, String::new)
}

/// [`fixgate_within`], whose failure also says what `context` gives then (a server's log).
pub fn fixgate_within_telling(
    cwd: &Path,
    cache: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    limit: std::time::Duration,
    context: impl Fn() -> String,
) -> Run {
    let out = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
    let mut child = fixgate_at_command(cwd, cache, env, args)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("fixgate runs");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "fixgate {args:?} was still running after {}s (stopped):\n{}\n{}",
                limit.as_secs(),
                std::fs::read_to_string(&stderr).unwrap_or_default(),
                context()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    dumped(Run {
        code: status.code().unwrap_or(-1),
        stdout: std::fs::read_to_string(&stdout).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr).unwrap_or_default(),
    })
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

/// Every file under `dir`, and none when it cannot be read.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A name no other test (or run of this test) uses: `prefix`, this process and the time.
pub fn unique(prefix: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{t}", std::process::id())
}

/// The processes whose command line holds `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        {
            out.push(pid);
        }
    }
    out
}

/// A Python interpreter that can import pytest: `$FIXGATE_TEST_PYTHON`, else `python3` when it
/// has pytest, else a virtualenv under `target/` made once (under a file lock, since test
/// binaries may run at once) with `pip install pytest`.
pub fn python() -> PathBuf {
    if containment::Condition::current().unprivileged() {
        return containment::shared_python();
    }
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(find_or_make_python).clone()
}

fn has_pytest(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import pytest"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn find_or_make_python() -> PathBuf {
    if let Some(p) = std::env::var_os("FIXGATE_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("..")
        .join("test-venv");
    let venv_python = venv.join("bin").join("python");
    if has_pytest(&venv_python) {
        return venv_python;
    }
    if has_pytest(Path::new("python3")) {
        return PathBuf::from("python3");
    }
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lock = exclusive(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-venv.lock"));
    if !has_pytest(&venv_python) {
        install_venv(&venv, &["pytest>=7.4"]);
    }
    drop(lock);
    venv_python
}

/// An exclusive lock on the file at `path`, held until the file is dropped: test binaries and
/// threads may make the same venv at once.
pub fn exclusive(path: &Path) -> std::fs::File {
    use std::os::unix::io::AsRawFd;
    let lock = std::fs::File::create(path).unwrap();
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    lock
}

/// Makes the virtualenv `venv` afresh with `packages` from PyPI; fails saying what to install
/// when it cannot.
pub fn install_venv(venv: &Path, packages: &[&str]) {
    install_venv_from(Path::new("python3"), venv, packages)
}

/// The interpreter of `target/NAME` with `packages` (pinned) installed, made on first use under
/// a file lock (test binaries and threads may ask at once), reused while its recorded
/// requirements are these.
pub fn pinned_venv(name: &str, packages: &[&str]) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("..");
    let venv = target.join(name);
    let py = venv.join("bin").join("python");
    let stamp = venv.join("fixgate-requirements.txt");
    let wanted = packages.join("\n") + "\n";
    let ready = || std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) && py.exists();
    if !ready() {
        std::fs::create_dir_all(&target).unwrap();
        let _lock = exclusive(&target.join(format!("{name}.lock")));
        if !ready() {
            install_venv(&venv, packages);
            std::fs::write(&stamp, &wanted).unwrap();
        }
    }
    py
}

/// An interpreter with `jsonschema`, for the tests that check output against a published
/// schema.
pub fn jsonschema_python() -> PathBuf {
    pinned_venv("jsonschema-venv", &["jsonschema==4.26.0"])
}

/// Checks `document` against the JSON Schema in `schema` (its own draft), failing with every
/// error the validator found.
pub fn assert_matches_schema(document: &str, schema: &Path) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(&mut file, document.as_bytes()).unwrap();
    let out = Command::new(jsonschema_python())
        .args([
            "-c",
            "import json, sys, jsonschema\n\
             schema = json.load(open(sys.argv[1]))\n\
             doc = json.load(open(sys.argv[2]))\n\
             cls = jsonschema.validators.validator_for(schema)\n\
             cls.check_schema(schema)\n\
             errors = sorted(cls(schema).iter_errors(doc), key=lambda e: list(e.path))\n\
             for e in errors:\n    print('/'.join(map(str, e.path)), e.message)\n\
             sys.exit(1 if errors else 0)\n",
        ])
        .arg(schema)
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "not valid against {}:\n{}{}",
        schema.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`install_venv`] from the interpreter `base`.
pub fn install_venv_from(base: &Path, venv: &Path, packages: &[&str]) {
    let made = Command::new(base)
        .args(["-m", "venv", "--clear"])
        .arg(venv)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        made,
        "{} -m venv {} failed: the tests need Python 3 with the venv module",
        base.display(),
        venv.display()
    );
    let py = venv.join("bin").join("python");
    let out = Command::new(&py)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pip could not install into {}: install these from PyPI there (`{} -m pip install {}`), \
         then run the tests again\n{}",
        venv.display(),
        py.display(),
        packages.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestRepo {
    /// Runs the binary with the test interpreter (`--python`).
    pub fn fixgate_py(&self, args: &[&str]) -> Run {
        fixgate_py_at(self.path(), self.cache.path(), &[], args)
    }
}

/// The JSON of `fixgate run`: outcome per node id.
/// Asserts a run's (node id, outcome) list, in order.
pub fn assert_outcomes(v: &serde_json::Value, expected: &[(&str, &str)]) {
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(id, o)| (id.to_string(), o.to_string()))
        .collect();
    assert_eq!(outcomes(v), expected, "{v}");
}

pub fn outcomes(v: &serde_json::Value) -> Vec<(String, String)> {
    v["result"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["nodeid"].as_str().unwrap().to_string(),
                t["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A virtualenv that sees the test interpreter's packages through a `.pth` file, so that a
/// fake distribution can be "installed" into it without touching the shared interpreter.
pub fn private_venv(dir: &Path) -> std::path::PathBuf {
    let py = python();
    let site = Command::new(&py)
        .args([
            "-c",
            "import os, pytest; print(os.path.dirname(os.path.dirname(pytest.__file__)))",
        ])
        .output()
        .unwrap();
    let site = String::from_utf8(site.stdout).unwrap().trim().to_string();
    // From the test interpreter, so that its base is one the condition's user can run.
    let ok = Command::new(&py)
        .args(["-m", "venv", "--without-pip"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(ok.success());
    let venv_python = dir.join("bin/python");
    let own_site = purelib(&venv_python);
    std::fs::create_dir_all(&own_site).unwrap();
    std::fs::write(own_site.join("test_interpreter.pth"), format!("{site}\n")).unwrap();
    venv_python
}

/// The site-packages folder of the interpreter `py` (where a `.pth` file takes effect).
pub fn purelib(py: &Path) -> std::path::PathBuf {
    let out = Command::new(py)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A test module parametrized over the lines of a data file, and a head that adds a case to
/// the file: the new case's node id does not exist on the base's bytes. The repository, the
/// base and the head.
pub fn new_case_in_a_data_file() -> (TestRepo, String, String) {
    let repo = TestRepo::new();
    repo.write("tests/data/cases.txt", "1\n2\n").write(
        "tests/test_cases.py",
        "import pathlib\n\nimport pytest\n\n\
         DATA = pathlib.Path(__file__).parent / 'data' / 'cases.txt'\n\n\n\
         @pytest.mark.parametrize('case', DATA.read_text().split())\ndef test_case(case):\n    \
         assert case in DATA.read_text().split()\n",
    );
    let base = repo.commit("base: two cases");
    repo.write("tests/data/cases.txt", "1\n2\n3\n");
    let head = repo.commit("head: a third case");
    (repo, base, head)
}
