//! `fixgate watch` driven for real: a watcher on a copy of the demo's repository (or on a tiny
//! one, for the tests of the watching itself), saves made to its working tree, and the JSON
//! Lines it writes read back. No assertion is on time: each test waits (generously) for the
//! next line of a kind and asserts on its content, and on /proc for the processes an audit
//! left.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The demo's audit: its base, two shuffled orders.
const DEMO: &[&str] = &["--base", "HEAD~1", "--seeds", "2"];

const LAMP: &str = "tests/test_pricing.py::test_tax_on_lamp";
const BOOK: &str = "tests/test_pricing.py::test_add_book";

/// How long a test waits for the watcher's next line: a cold audit on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(600);

/// The demo's repository (`fixgate demo --keep`: the shared cart; the head "fixes" the tax test
/// by expecting the polluted 37.5) and the cache its audit filled, made once per test binary;
/// each test gets copies of both.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        // Templates of earlier runs of this binary go (a pid names each).
        for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("watch-template-")
                .and_then(|p| p.parse().ok());
            if pid.is_some_and(|pid: i32| unsafe { libc::kill(pid, 0) } != 0) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let dir = tmp.join(format!("watch-template-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let py = common::python();
        let demo = common::fixgate_at(
            &dir,
            &dir.join("cache"),
            &[],
            &[
                "demo",
                "--keep",
                dir.join("repo").to_str().unwrap(),
                "--format",
                "json",
                "--quiet",
                "--python",
                py.to_str().unwrap(),
            ],
        );
        assert_eq!(demo.code, 0, "{demo:?}");
        dir
    })
}

/// A repository to watch and its cache directory.
struct Watched {
    dir: tempfile::TempDir,
}

impl Watched {
    /// A copy of the demo's repository and cache: the working tree holds the head.
    fn demo() -> Watched {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["repo", "cache"] {
            let ok = Command::new("cp")
                .arg("-a")
                .arg(template().join(sub))
                .arg(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "cp -a {sub}");
        }
        Watched { dir }
    }

    /// A repository of one passing test, committed: the base, and the working tree. For the
    /// tests of the watching itself, whose audits need not find anything.
    fn tiny() -> Watched {
        Watched::committed(&[("tests/test_ok.py", "def test_ok():\n    pass\n")])
    }

    /// A repository of `files`, committed.
    fn committed(files: &[(&str, &str)]) -> Watched {
        let repo = Watched {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir(repo.repo()).unwrap();
        for (path, text) in files {
            repo.write(path, text);
        }
        common::git(&repo.repo(), &["init", "-q", "-b", "main"]);
        common::git(&repo.repo(), &["add", "-A"]);
        common::git(&repo.repo(), &["commit", "-q", "-m", "one test"]);
        repo
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// Saves `rel` at once, as an editor that renames a finished file into place does: the
    /// watcher never sees it empty or half written, however slow this machine.
    fn write(&self, rel: &str, text: &str) {
        let path = self.repo().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let staged = self.dir.path().join("staged");
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, path).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.repo().join(rel)).unwrap()
    }

    /// Starts `fixgate watch --format json` with `args` on the repository.
    fn watch(&self, args: &[&str]) -> Watcher {
        let py = common::python();
        let stderr = self.dir.path().join("watch.stderr");
        let mut child = common::fixgate_command()
            .args(["watch", "--format", "json", "--debounce", "50"])
            .args(args)
            .arg("--python")
            .arg(&py)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .current_dir(self.repo())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("fixgate runs");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Watcher {
            child,
            lines: rx,
            seen: Vec::new(),
            stderr,
        }
    }
}

/// A running watcher and the lines it wrote.
struct Watcher {
    child: Child,
    lines: Receiver<Value>,
    /// Every line read so far, in order.
    seen: Vec<Value>,
    stderr: PathBuf,
}

impl Watcher {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The next line of type `kind`, the lines before it kept in `seen`.
    fn next(&mut self, kind: &str) -> Value {
        self.next_of(&[kind])
    }

    /// The next line of one of the types `kinds`, the lines before it kept in `seen`.
    fn next_of(&mut self, kinds: &[&str]) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if kinds.iter().any(|k| v["type"] == *k) {
                        return v;
                    }
                    assert_ne!(
                        v["type"],
                        "error",
                        "the watcher failed: {v}\n{}",
                        self.log()
                    );
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no {kinds:?} line in {PATIENCE:?}; seen: {:#?}\n{}",
                    self.seen,
                    self.log()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "the watcher exited before a {kinds:?} line; seen: {:#?}\n{}",
                    self.seen,
                    self.log()
                ),
            }
        }
    }

    /// The next report, with the `started` line of its audit. A save this machine made in
    /// two steps may start an audit that the second step cancels: the report is the latest
    /// audit's.
    fn report(&mut self) -> (Value, Value) {
        let mut started = self.next("started");
        loop {
            let line = self.next_of(&["started", "report"]);
            if line["type"] == "started" {
                started = line;
                continue;
            }
            assert_eq!(line["audit"], started["audit"], "{line}");
            return (started, line);
        }
    }

    fn log(&self) -> String {
        format!(
            "--- stderr\n{}",
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }

    /// Sends `signal` and waits for the exit code.
    fn stop(&mut self, signal: i32) -> i32 {
        unsafe {
            libc::kill(self.pid(), signal);
        }
        let status = self.child.wait().unwrap();
        status
            .code()
            .unwrap_or_else(|| panic!("killed: {status:?}\n{}", self.log()))
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // A failed test's watcher: SIGKILL takes its runs with it (containment's pdeathsig).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn findings(v: &Value) -> BTreeSet<(String, String)> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_owned(),
                f["tests"][0].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn has(set: &BTreeSet<(String, String)>, kind: &str, test: &str) -> bool {
    set.contains(&(kind.to_owned(), test.to_owned()))
}

fn tests_of(report: &Value) -> BTreeSet<String> {
    report["data"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["nodeid"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_first_report_is_the_audit_of_the_working_tree_against_the_base() {
    let demo = Watched::demo();
    let mut w = demo.watch(DEMO);
    let (started, report) = w.report();
    assert_eq!(started["audit"], 1);
    assert_eq!(started["changed"], serde_json::json!([]));
    assert_eq!(started["lock"]["drift"], serde_json::json!([]), "{started}");
    let data = &report["data"];
    assert_eq!(data["verdict"], "reject", "{report}");
    assert_eq!(data["head"]["rev"], "worktree");
    assert_eq!(data["base"]["rev"], "HEAD~1");
    let all = findings(&data["findings"]);
    assert!(has(&all, "order-dependent", LAMP), "{all:?}");
    assert!(has(&all, "edited-assertion", LAMP), "{all:?}");
    // The first report's findings are all new.
    assert_eq!(findings(&report["new"]), all);
    assert_eq!(report["resolved"], serde_json::json!([]));
    let pair = &data["pairs"][0];
    assert_eq!(pair["victim"], LAMP, "{pair}");
    assert_eq!(pair["polluter"], BOOK, "{pair}");
    assert_eq!(w.stop(libc::SIGINT), 0, "{}", w.log());
}

#[test]
fn a_save_that_restores_the_expectation_passes_and_resolves_the_findings() {
    let demo = Watched::demo();
    let mut w = demo.watch(DEMO);
    let (_, first) = w.report();
    assert_eq!(first["data"]["verdict"], "reject");
    let fixed = demo
        .read("tests/test_pricing.py")
        .replace("== 37.5  # fixed: matches the actual total", "== 25.0");
    demo.write("tests/test_pricing.py", &fixed);
    let (started, report) = w.report();
    assert_eq!(started["audit"], 2);
    assert_eq!(
        started["changed"],
        serde_json::json!(["tests/test_pricing.py"])
    );
    let data = &report["data"];
    assert_eq!(data["verdict"], "pass", "{report}");
    assert_eq!(data["exit_code"], 0);
    let resolved = findings(&report["resolved"]);
    assert!(has(&resolved, "edited-assertion", LAMP), "{resolved:?}");
    // No redefined-test to resolve: the base fails the victim in the same order (issue 20's
    // base-suite replay), so the edited assertion and the order dependence say it.
    assert!(!has(&resolved, "redefined-test", LAMP), "{resolved:?}");
    // The base's own order dependence is still there, as known debt that does not block.
    for f in data["findings"].as_array().unwrap() {
        assert_eq!(f["blocking"], false, "{f}");
    }
    assert_eq!(w.stop(libc::SIGTERM), 0, "{}", w.log());
}

const SETTINGS: &str = r#""""Settings shared by every caller."""

SETTINGS = {"mode": "safe"}
"#;

/// A victim that runs first in file order (so the suite is green), and the polluter after it.
const SETTINGS_TESTS: &str = r#"import settings


def test_default_mode_is_safe():
    assert settings.SETTINGS["mode"] == "safe"


def test_fast_mode():
    settings.SETTINGS["mode"] = "fast"
    assert settings.SETTINGS["mode"] == "fast"
"#;

#[test]
fn a_save_that_adds_a_polluter_and_its_victim_rejects_with_them_as_new_findings() {
    let demo = Watched::demo();
    // From the fixed patch: its report passes.
    let fixed = demo
        .read("tests/test_pricing.py")
        .replace("== 37.5  # fixed: matches the actual total", "== 25.0");
    demo.write("tests/test_pricing.py", &fixed);
    let mut w = demo.watch(DEMO);
    let (_, first) = w.report();
    assert_eq!(first["data"]["verdict"], "pass", "{first}");
    demo.write("src/settings.py", SETTINGS);
    demo.write("tests/test_settings.py", SETTINGS_TESTS);
    let (started, report) = w.report();
    let changed: Vec<&str> = started["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(changed.contains(&"tests/test_settings.py"), "{started}");
    let data = &report["data"];
    assert_eq!(data["verdict"], "reject", "{report}");
    let victim = "tests/test_settings.py::test_default_mode_is_safe";
    let polluter = "tests/test_settings.py::test_fast_mode";
    let new = findings(&report["new"]);
    assert!(has(&new, "order-dependent", victim), "{new:?}");
    assert!(
        data["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["victim"] == victim && p["polluter"] == polluter),
        "{}",
        data["pairs"]
    );
    assert_eq!(w.stop(libc::SIGTERM), 0, "{}", w.log());
}

/// A test that starts a child (in a session of its own, out of the run's process group)
/// named by `marker`, and waits for it: its audit runs until it is cancelled.
fn slow_test(marker: &str) -> String {
    format!(
        "import subprocess, sys\n\n\ndef test_slow():\n    child = subprocess.Popen(\n        \
         [sys.executable, '-c', 'import time; time.sleep(900)', '{marker}'],\n        \
         start_new_session=True,\n    )\n    child.wait()\n"
    )
}

/// One process as /proc shows it.
#[derive(Clone, Debug)]
struct Proc {
    pid: i32,
    ppid: i32,
    /// Clock ticks since boot at its start: a pid and this name one process.
    start: u64,
    cmdline: String,
}

fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        // pid (comm) state ppid ... starttime is field 22: the 20th after the comm.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        out.push(Proc {
            pid,
            ppid: fields[1].parse().unwrap(),
            start: fields[19].parse().unwrap(),
            cmdline: String::from_utf8_lossy(&cmdline).replace('\0', " "),
        });
    }
    out
}

fn alive(p: &Proc) -> bool {
    processes()
        .iter()
        .any(|q| q.pid == p.pid && q.start == p.start)
}

/// Waits until a process whose command line holds `marker` runs; returns it.
fn wait_for_process(marker: &str, w: &Watcher) -> Proc {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(p) = processes().into_iter().find(|p| p.cmdline.contains(marker)) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "no process {marker} in {PATIENCE:?}\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes of the run that started `leaf`: it and its ancestors below the watcher,
/// or, for a run forked from a warm interpreter (kept between audits), below that.
fn run_of(leaf: &Proc, watcher: i32) -> Vec<Proc> {
    let all = processes();
    let by_pid = |pid: i32| all.iter().find(|p| p.pid == pid).cloned();
    let zygote = |p: &Proc| {
        p.cmdline.contains("--fixgate-forkserver")
            && !by_pid(p.ppid).is_some_and(|q| q.cmdline.contains("--fixgate-forkserver"))
    };
    let mut run = vec![leaf.clone()];
    let mut at = by_pid(leaf.ppid);
    while let Some(p) = at {
        if p.pid == watcher || zygote(&p) {
            break;
        }
        at = by_pid(p.ppid);
        run.push(p);
    }
    assert!(
        run.len() >= 2 && run.iter().all(|p| p.pid != watcher),
        "the marker's run: {run:#?}"
    );
    run
}

/// Every process below `root`.
fn descendants(root: i32) -> Vec<Proc> {
    let all = processes();
    let mut out = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for p in all.iter().filter(|p| p.ppid == parent) {
            parents.push(p.pid);
            out.push(p.clone());
        }
    }
    out
}

/// Waits (generously) until none of `procs` runs any more; panics naming those left.
fn assert_gone(procs: &[Proc], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<&Proc> = procs.iter().filter(|p| alive(p)).collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still running {left:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_save_during_an_audit_cancels_it_with_no_process_left_and_the_next_report_has_the_latest_bytes()
{
    let repo = Watched::tiny();
    let mut w = repo.watch(&["--seeds", "0", "--test-timeout", "900"]);
    w.report();
    let marker = format!("fixgate-watch-marker-{}", std::process::id());
    repo.write("tests/test_slow.py", &slow_test(&marker));
    let started = w.next("started");
    let sleeper = wait_for_process(&marker, &w);
    let run = run_of(&sleeper, w.pid());
    // The save that overtakes the audit: the slow test goes, another one comes.
    std::fs::remove_file(repo.repo().join("tests/test_slow.py")).unwrap();
    repo.write("tests/test_latest.py", "def test_latest():\n    pass\n");
    let cancelled = w.next("cancelled");
    assert_eq!(cancelled["audit"], started["audit"], "{cancelled}");
    // Written once the audit's thread returned: every process of its run was killed and
    // waited for, the one in a session of its own too (a fresh run's is killed with its PID
    // namespace, which the kernel empties as its first process dies: hence the wait).
    assert_gone(&run, "processes of the cancelled audit");
    assert!(
        !processes().iter().any(|p| p.cmdline.contains(&marker)),
        "the marker process outlived its audit"
    );
    let (_, report) = w.report();
    let tests = tests_of(&report);
    assert!(
        tests.contains("tests/test_latest.py::test_latest"),
        "{tests:?}"
    );
    assert!(!tests.iter().any(|t| t.contains("test_slow")), "{tests:?}");
    assert_eq!(w.stop(libc::SIGTERM), 0, "{}", w.log());
}

#[test]
fn sigterm_during_an_audit_exits_zero_with_nothing_left_running() {
    let repo = Watched::tiny();
    let mut w = repo.watch(&["--seeds", "0", "--test-timeout", "900"]);
    w.report();
    let marker = format!("fixgate-watch-sigterm-{}", std::process::id());
    repo.write("tests/test_slow.py", &slow_test(&marker));
    w.next("started");
    let sleeper = wait_for_process(&marker, &w);
    let mut everything = descendants(w.pid());
    everything.push(sleeper);
    assert!(
        everything
            .iter()
            .any(|p| p.cmdline.contains("--fixgate-forkserver")),
        "warm interpreters run: {everything:#?}"
    );
    assert_eq!(w.stop(libc::SIGTERM), 0, "{}", w.log());
    assert!(w.log().contains("fixgate watch: stopped"), "{}", w.log());
    assert_gone(&everything, "after SIGTERM");
    // Nothing of the watcher's is left on disk either: its sandboxes and its frozen copy of
    // the tree go.
    let folder = format!("fixgate-sandboxes-{}", unsafe { libc::getuid() });
    let mine = format!("{}-", w.pid());
    let left: Vec<String> = [PathBuf::from("/dev/shm"), std::env::temp_dir()]
        .iter()
        .filter_map(|d| std::fs::read_dir(d.join(&folder)).ok())
        .flat_map(|rd| rd.flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&mine))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The inotify watches of process `pid`, from the fdinfo of its inotify descriptors.
fn inotify_watches(pid: i32) -> usize {
    let mut n = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let is_inotify =
            std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().contains("inotify"));
        if is_inotify {
            let info = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .unwrap();
            n += info
                .lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count();
        }
    }
    n
}

#[test]
fn a_change_under_an_ignored_folder_triggers_nothing() {
    let repo = Watched::tiny();
    repo.write(".gitignore", "build/\n.venv/\n");
    repo.write("build/out.txt", "0");
    let mut w = repo.watch(&["--seeds", "0"]);
    w.report();
    // Changes where nothing is audited: an ignored folder, a new one under it, a virtualenv.
    repo.write("build/out.txt", "1");
    repo.write("build/lib/new.py", "x = 1\n");
    repo.write(".venv/lib/site.py", "x = 1\n");
    // Then a save that counts: the next audit names it alone.
    repo.write("README.md", "A tiny pricing module, watched.\n");
    let (started, _) = w.report();
    assert_eq!(started["audit"], 2, "{:#?}", w.seen);
    assert_eq!(started["changed"], serde_json::json!(["README.md"]));
    assert_eq!(w.stop(libc::SIGTERM), 0, "{}", w.log());
}

#[test]
fn an_ignored_folder_of_ten_thousand_directories_gets_no_watch() {
    let repo = Watched::tiny();
    repo.write(".gitignore", "node_modules/\n");
    for i in 0..100 {
        for j in 0..100 {
            std::fs::create_dir_all(repo.repo().join(format!("node_modules/p{i}/d{j}"))).unwrap();
        }
    }
    let mut w = repo.watch(&["--seeds", "0"]);
    w.report();
    // The root and tests/: the watches are set before the first audit starts.
    assert_eq!(inotify_watches(w.pid()), 2, "{}", w.log());
    assert!(w.log().contains("watching 2 directories"), "{}", w.log());
    // A directory made under the ignored folder gets none either; one made in the tree does.
    std::fs::create_dir_all(repo.repo().join("node_modules/p0/new")).unwrap();
    repo.write("tests/unit/test_more.py", "def test_more():\n    pass\n");
    let (started, _) = w.report();
    assert_eq!(
        started["changed"],
        serde_json::json!(["tests/unit/test_more.py"])
    );
    assert_eq!(inotify_watches(w.pid()), 3, "{}", w.log());
    assert_eq!(w.stop(libc::SIGTERM), 0, "{}", w.log());
}

#[test]
fn the_inotify_watch_limit_is_an_error_that_names_the_sysctl_to_raise() {
    // A user namespace of its own that allows one inotify watch (limits are counted per user
    // namespace since Linux 5.11, the lowest up the tree winning): the root takes it, tests/
    // finds none left.
    let repo = Watched::tiny();
    let out = Command::new("unshare")
        .args(["-Ur", "sh", "-c"])
        .arg("echo 1 > /proc/sys/user/max_inotify_watches && exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_fixgate"))
        .args(["watch", "--format", "json", "--cache-dir"])
        .arg(repo.dir.path().join("cache"))
        .current_dir(repo.repo())
        .env_remove("FIXGATE_CACHE_DIR")
        .output()
        .expect("unshare (util-linux) runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("unshare failed") && !stderr.contains("Permission denied"),
        "this test needs unshare from util-linux and unprivileged user namespaces \
         (sysctl user.max_user_namespaces > 0): {stderr}"
    );
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("inotify watch limit is reached"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sudo sysctl fs.inotify.max_user_watches="),
        "{stderr}"
    );
    assert!(stderr.contains("user.max_inotify_watches"), "{stderr}");
    assert!(out.stdout.is_empty(), "no audit ran");
}

#[test]
fn a_save_that_drifts_a_locked_fixture_is_told_from_memory_and_the_audit_stops_at_the_lock() {
    let rates = "tests/fixtures/rates.json";
    let repo = Watched::committed(&[
        ("fixtures.manifest", "rates: tests/fixtures/*.json\n"),
        (rates, "{\"tax\": 0.25}\n"),
        ("tests/test_ok.py", "def test_ok():\n    pass\n"),
    ]);
    let lock = common::fixgate_at(
        &repo.repo(),
        &repo.dir.path().join("cache"),
        &[],
        &["lock", "--quiet"],
    );
    assert_eq!(lock.code, 0, "{lock:?}");
    common::git(&repo.repo(), &["add", "fixtures.lock"]);
    common::git(&repo.repo(), &["commit", "-q", "-m", "lock"]);
    let mut w = repo.watch(&["--seeds", "0"]);
    let (started, report) = w.report();
    assert_eq!(started["lock"]["drift"], serde_json::json!([]), "{started}");
    assert_eq!(report["data"]["verdict"], "pass", "{report}");

    repo.write(rates, "{\"tax\": 0.3}\n");
    let (started, report) = w.report();
    let drift = started["lock"]["drift"].as_array().unwrap();
    assert_eq!(drift.len(), 1, "{started}");
    assert_eq!(drift[0]["path"], rates, "{started}");
    assert!(started["lock"]["microseconds"].is_u64(), "{started}");
    assert_eq!(report["data"]["verdict"], "drift", "{report}");
    assert_eq!(report["data"]["exit_code"], 3);

    // Back to the locked bytes: the check from memory agrees, and so does the audit.
    repo.write(rates, "{\"tax\": 0.25}\n");
    let (started, report) = w.report();
    assert_eq!(started["lock"]["drift"], serde_json::json!([]), "{started}");
    assert_eq!(started["changed"], serde_json::json!([rates]));
    assert_eq!(report["data"]["verdict"], "pass", "{report}");
    assert_eq!(w.stop(libc::SIGTERM), 0, "{}", w.log());
}

#[test]
fn a_change_of_configuration_collects_again_with_the_new_settings() {
    let repo = Watched::committed(&[
        (
            "tests/test_a.py",
            "def test_a():\n    pass\n\n\ndef check_a():\n    pass\n",
        ),
        ("tests/test_b.py", "def test_b():\n    pass\n"),
    ]);
    let mut w = repo.watch(&["--seeds", "0"]);
    let (_, report) = w.report();
    let first = tests_of(&report);
    assert!(first.contains("tests/test_b.py::test_b"), "{first:?}");
    assert!(!first.iter().any(|t| t.ends_with("check_a")), "{first:?}");

    // A conftest that drops a file from collection: the next audit's collection follows it.
    repo.write("tests/conftest.py", "collect_ignore = [\"test_b.py\"]\n");
    let (started, report) = w.report();
    assert_eq!(started["changed"], serde_json::json!(["tests/conftest.py"]));
    let tests = tests_of(&report);
    assert!(tests.contains("tests/test_a.py::test_a"), "{tests:?}");
    assert!(!tests.iter().any(|t| t.contains("test_b")), "{tests:?}");

    // pytest's own settings in pyproject.toml: another kind of test function is collected.
    repo.write(
        "pyproject.toml",
        "[tool.pytest.ini_options]\npython_functions = [\"test_*\", \"check_*\"]\n",
    );
    let (started, report) = w.report();
    assert_eq!(started["changed"], serde_json::json!(["pyproject.toml"]));
    let tests = tests_of(&report);
    assert!(tests.contains("tests/test_a.py::check_a"), "{tests:?}");
    assert_eq!(report["data"]["verdict"], "pass", "{report}");

    // Ctrl-C, as SIGTERM: exit 0 with nothing of the watcher's left running.
    let everything = descendants(w.pid());
    assert_eq!(w.stop(libc::SIGINT), 0, "{}", w.log());
    assert_gone(&everything, "after SIGINT");
}
