//! Issue 18: a gate no patch can game. Each test is an attack of the issue, performed on a real
//! small repository with the real binary, and asserts the verdict, the exit code and that the
//! host is unharmed: a forged rewrite-cache entry, forged plugin bytecode, a tree entry that
//! names a host path, a run reading the cache or another sandbox, a host Unix socket, a fork
//! bomb, a memory grab, a disk fill, a swapped remote entry, a damaged local cache.
//!
//! Each attack on a run runs in every condition runs are contained in where users run fixgate
//! (issue 49): namespaces, and a container's seccomp profile as root and as an unprivileged
//! user (Landlock then), see `common::containment`. Without containment a run can write
//! whatever the user can, which docs/threat-model.md says.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::audit::{warnings, Audit};
use common::containment::{Condition, CONTAINED};
use common::servers;
use common::{files_under, git, processes_with, unique, Run, TestRepo};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const PRICE: &str = "def total(items):\n    return sum(items)\n";
const BROKEN_PRICE: &str = "def total(items):\n    return 0\n";
const PRICE_TESTS: &str =
    "from price import total\n\n\ndef test_total():\n    assert total([1, 2]) == 3\n";

/// Runs the binary on `repo` with the test interpreter and the cache `cache`, contained in
/// this thread's condition (`common::containment`), whatever the caller's environment says.
fn fixgate(repo: &TestRepo, cache: &Path, args: &[&str]) -> Run {
    repo.fixgate_with(cache, &IN_CONDITION, args)
}

/// The caller's `FIXGATE_NO_NAMESPACES` cleared: the thread's condition decides alone.
const IN_CONDITION: [(&str, &str); 1] = [("FIXGATE_NO_NAMESPACES", "")];

/// A base with one green test of `price.total`; returns the repo and the base commit.
fn price_repo() -> (TestRepo, String) {
    let repo = TestRepo::new();
    repo.write("src/price.py", PRICE)
        .write("tests/test_price.py", PRICE_TESTS);
    let base = repo.commit("price");
    (repo, base)
}

/// A commit on top of `from` that writes `files`; the work tree is back on `from` after it.
fn patch(repo: &TestRepo, from: &str, message: &str, files: &[(&str, &str)]) -> String {
    git(repo.path(), &["checkout", "-q", "--detach", from]);
    for (path, text) in files {
        repo.write(path, text);
    }
    let head = repo.commit(message);
    git(repo.path(), &["checkout", "-q", "--detach", from]);
    head
}

/// The patch that breaks `total`: its audit must reject.
fn breaking_patch(repo: &TestRepo, base: &str) -> String {
    patch(
        repo,
        base,
        "total returns 0",
        &[("src/price.py", BROKEN_PRICE)],
    )
}

/// Audits `head` against `base` with one seed, in the thread's condition.
fn audit(repo: &TestRepo, cache: &Path, base: &str, head: &str) -> (Run, Value) {
    Audit::at(repo.path(), cache)
        .sides(base, head)
        .seeds(1)
        .env(&IN_CONDITION)
        .report()
}

/// Runs `attack` in each condition of [`CONTAINED`], saying which on failure.
fn each_condition(attack: impl Fn()) {
    for c in CONTAINED {
        c.run(&attack);
    }
}

fn assert_rejected_for_failing_total(run: &Run, v: &Value) {
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(v["verdict"], "reject", "{v}");
    assert_eq!(v["containment"], Condition::current().tier(), "{v}");
    let test = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"] == "tests/test_price.py::test_total")
        .unwrap_or_else(|| panic!("no test_total in {v}"));
    assert!(
        test["outcomes"]
            .as_object()
            .unwrap()
            .values()
            .all(|o| o == "failed"),
        "test_total must fail on the broken code in every order: {test}"
    );
}

/// The files under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|f| std::fs::read(f).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle)))
        .collect()
}

fn outcome_of(v: &Value, test: &str) -> (String, String) {
    let t = v["result"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"].as_str().unwrap().ends_with(test))
        .unwrap_or_else(|| panic!("no {test} in {v}"));
    (
        t["outcome"].as_str().unwrap().to_string(),
        t["message"].as_str().unwrap_or("").to_string(),
    )
}

/// The report of a `fixgate run` of the price suite that ended with exit 0 and its one test
/// passed (`context` says which run).
fn total_passed(run: &common::Run, context: &str) -> Value {
    let v = run.json();
    assert_eq!(run.code, 0, "{context}: {run:?}");
    assert_eq!(
        outcome_of(&v, "tests/test_price.py::test_total").0,
        "passed",
        "{context}: {v}"
    );
    v
}

/// A Python bytes literal of `bytes`.
fn py_bytes(bytes: &[u8]) -> String {
    let mut s = String::from("b'");
    for b in bytes {
        s.push_str(&format!("\\x{b:02x}"));
    }
    s.push('\'');
    s
}

/// The three ways a test writes a file, as the issue found them: plainly (the audit hook sees
/// it), through the plugin's own `_Quiet` helper (it does not), and from a subprocess (nor
/// that). Each swallows its error, as an attacker who wants a green run would.
const WRITERS: &str = r#"
import os, subprocess, sys


def write_plain(path, data):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return True
    except OSError:
        return False


def write_muted(path, data):
    from fixgate_plugin_trace import _Quiet

    with _Quiet():
        return write_plain(path, data)


def write_from_subprocess(path, data):
    script = (
        "import os, sys\n"
        "p = sys.argv[1]\n"
        "os.makedirs(os.path.dirname(p), exist_ok=True)\n"
        "open(p, 'wb').write(bytes.fromhex(sys.argv[2]))\n"
    )
    r = subprocess.run([sys.executable, "-c", script, path, data.hex()], capture_output=True)
    return r.returncode == 0


WRITERS = {"plain": write_plain, "muted": write_muted, "subprocess": write_from_subprocess}


def cache_dirs():
    """Where fixgate's cache is, from everything a run can read: the plugin's own location,
    the environment, the command line and the mount table."""
    import fixgate_plugin_trace

    plugin = os.path.dirname(os.path.abspath(fixgate_plugin_trace.__file__))
    found = {os.path.dirname(os.path.dirname(plugin))}
    try:
        for kv in open("/proc/self/environ", "rb").read().split(b"\0"):
            if kv.startswith(b"FIXGATE_PYC_CACHE="):
                pyc = kv.split(b"=", 1)[1].decode()
                found.add(os.path.dirname(os.path.dirname(pyc)))
    except OSError:
        pass
    try:
        for arg in open("/proc/self/cmdline", "rb").read().split(b"\0"):
            arg = arg.decode("utf-8", "replace")
            if arg.startswith("--fixgate-rewrite="):
                found.add(os.path.dirname(os.path.dirname(arg.split("=", 1)[1])))
    except OSError:
        pass
    try:
        for line in open("/proc/self/mountinfo"):
            point = line.split()[4]
            for part in ("/pyc/", "/plugin/"):
                if part in point:
                    found.add(point.split(part)[0])
    except OSError:
        pass
    return sorted(found), plugin
"#;

// ---------------------------------------------------------------------------------------------
// Nothing a run writes reaches another run
// ---------------------------------------------------------------------------------------------

/// A test module of patch A that forges, three ways, pytest's rewritten module for the bytes
/// of `tests/test_price.py`, so that any later run importing that file gets a `test_total`
/// that always passes. The key is a plain hash of the source: the formula of the plugin that
/// the issue attacked, and the one of today's plugin, are both tried, and every existing entry
/// is overwritten as well.
fn forging_tests() -> String {
    format!(
        r#"{WRITERS}
import hashlib, importlib.util, marshal

VICTIM = {victim}


def forged(marker):
    code = compile("def test_total():\n    assert %r\n" % marker, "tests/test_price.py", "exec")
    body = marshal.dumps(code)
    return hashlib.sha256(body).digest() + body


def keys():
    import pytest

    salt = repr(
        ("fixgate-rewrite-v2", sys.version, importlib.util.MAGIC_NUMBER, pytest.__version__, sys.flags.optimize)
    ).encode("utf-8")
    return [
        hashlib.sha256(salt + repr(False).encode("utf-8") + b"\0" + VICTIM).hexdigest(),
        hashlib.sha256(b"fixgate rewrite v3\0" + VICTIM).hexdigest(),
    ]


def forge(how):
    data = forged("forged-" + how)
    caches, _ = cache_dirs()
    wrote = False
    for cache in caches:
        pyc = os.path.join(cache, "pyc")
        try:
            folders = [os.path.join(pyc, d) for d in os.listdir(pyc)]
        except OSError:
            folders = []
        for folder in folders:
            targets = [os.path.join(folder, k[:2], k[2:] + ".bin") for k in keys()]
            for root, _, files in os.walk(folder):
                targets.extend(os.path.join(root, f) for f in files)
            for t in targets:
                wrote |= WRITERS[how](t, data)
    return wrote


def test_forge_plainly():
    forge("plain")


def test_forge_muted():
    forge("muted")


def test_forge_from_a_subprocess():
    forge("subprocess")
"#,
        victim = py_bytes(PRICE_TESTS.as_bytes())
    )
}

/// A conftest of the patch writes an `uncollected` line naming the failing test into its
/// process's own event stream while collecting, before any test, as the plugin writes one for
/// the fixture replay's lenient order. Each run is a fresh process here, so the line lands in
/// the stream of every run of the audit, none of which asked for a lenient order: the test is
/// still run and still fails in every order.
#[test]
fn a_forged_uncollected_event_hides_no_failing_test() {
    each_condition(|| {
        let (repo, base) = price_repo();
        let forger = patch(
        &repo,
        &base,
        "total returns 0, and say test_total was not collected",
        &[
            ("src/price.py", BROKEN_PRICE),
            (
                "tests/conftest.py",
                "import json\n\n\ndef pytest_collection_modifyitems(config, items):\n    \
                 path = config.getoption('fixgate_events', None)\n    \
                 if path:\n        \
                 line = {'event': 'uncollected', 'nodeids': ['tests/test_price.py::test_total']}\n        \
                 with open(path, 'a') as f:\n            \
                 f.write(json.dumps(line) + '\\n')\n",
            ),
        ],
    );
        let cache = tempfile::tempdir().unwrap();
        let run = repo.fixgate_with(
            cache.path(),
            &[("FIXGATE_NO_NAMESPACES", ""), ("FIXGATE_FORK", "0")],
            &[
                "audit", "--base", &base, "--head", &forger, "--seeds", "1", "--format", "json",
            ],
        );
        let v = run.json();
        assert_rejected_for_failing_total(&run, &v);
    });
}

/// A version manager's launcher (`python3` as a pyenv or asdf shim) picks the interpreter from
/// a `.python-version` in the folder it starts in, and runs start in a snapshot's tree. The
/// patch breaks `total` and adds a `.python-version` naming "other", an interpreter on which
/// its code still sums (here: the same Python, told by the launcher that it is the other one).
/// Runs execute the interpreter the probe found, not the launcher again: the head's runs use
/// the base's interpreter and `test_total` fails in every order.
#[test]
fn a_patchs_python_version_file_does_not_choose_the_interpreter_of_its_runs() {
    each_condition(|| {
        let (repo, base) = price_repo();
        let chooser = patch(
            &repo,
            &base,
            "total returns 0 but on the interpreter the patch names",
            &[
                (
                    "src/price.py",
                    "import os\n\n\ndef total(items):\n    \
                 return sum(items) if os.environ.get('LAUNCHER_CHOSE') == 'other' else 0\n",
                ),
                (".python-version", "other\n"),
            ],
        );
        let real = Command::new(common::python())
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap();
        let real = String::from_utf8(real.stdout).unwrap().trim().to_owned();
        let shims = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        // Any user runs the launcher (an unprivileged condition's fixgate too).
        std::fs::set_permissions(
            shims.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let launcher = shims.path().join("python3");
        std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nif [ -f .python-version ] && [ \"$(cat .python-version)\" = other ]; then\n  \
             export LAUNCHER_CHOSE=other\nfi\nexec '{real}' \"$@\"\n"
        ),
    )
    .unwrap();
        std::fs::set_permissions(
            &launcher,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let cache = tempfile::tempdir().unwrap();
        let run = common::fixgate_at(
            repo.path(),
            cache.path(),
            &[("FIXGATE_NO_NAMESPACES", "")],
            &[
                "audit",
                "--base",
                &base,
                "--head",
                &chooser,
                "--seeds",
                "1",
                "--format",
                "json",
                "--python",
                launcher.to_str().unwrap(),
            ],
        );
        let v = run.json();
        assert_rejected_for_failing_total(&run, &v);
    });
}

#[test]
fn a_forged_rewrite_entry_does_not_change_a_later_audits_verdict() {
    each_condition(|| {
        let (repo, base) = price_repo();
        let forger = patch(
            &repo,
            &base,
            "add tests",
            &[("tests/test_forge.py", &forging_tests())],
        );
        let breaker = breaking_patch(&repo, &base);

        // Patch A forges, then patch B is audited on the same cache.
        let cache = tempfile::tempdir().unwrap();
        let (run_a, _) = audit(&repo, cache.path(), &base, &forger);
        assert!(matches!(run_a.code, 0 | 1), "{run_a:?}");
        for how in ["plain", "muted", "subprocess"] {
            let marker = format!("forged-{how}");
            assert_eq!(
                files_holding(cache.path(), marker.as_bytes()),
                Vec::<PathBuf>::new(),
                "a run wrote a forged rewrite ({how}) into the cache"
            );
        }
        let (run_b, v_b) = audit(&repo, cache.path(), &base, &breaker);
        assert_rejected_for_failing_total(&run_b, &v_b);

        // Both heads in one command, on a fresh cache: pass or reject for A, reject for B.
        let cache = tempfile::tempdir().unwrap();
        let run = fixgate(
            &repo,
            cache.path(),
            &[
                "audit", "--base", &base, "--head", &forger, "--head", &breaker, "--seeds", "1",
                "--format", "json",
            ],
        );
        assert_eq!(run.code, 1, "{run:?}");
        let reports: Vec<Value> = run
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(reports.len(), 2, "{run:?}");
        let b = Run {
            code: reports[1]["exit_code"].as_i64().unwrap() as i32,
            stdout: String::new(),
            stderr: run.stderr.clone(),
        };
        assert_rejected_for_failing_total(&b, &reports[1]);
        for how in ["plain", "muted", "subprocess"] {
            assert!(files_holding(cache.path(), format!("forged-{how}").as_bytes()).is_empty());
        }
    });
}

/// A test module that replaces the plugin's compiled events module with one that reports
/// every failed test as passed, wherever the compiled module may be kept.
fn poisoning_tests() -> String {
    format!(
        r#"{WRITERS}
import hashlib, importlib.util, marshal


def poisoned(source_path):
    text = open(source_path).read()
    text = text.replace(
        "_JSON_STRING(outcome),",
        '_JSON_STRING("passed" if outcome in ("failed", "error") else outcome),',
    ).replace(
        "_OUTCOMES_JSON.get(outcome)",
        '_OUTCOMES_JSON.get("passed" if outcome == "failed" else outcome)',
    )
    # The marker is joined at run time: the attacker's own module, rewritten and cached,
    # must not hold it.
    text += "\nPOISONED = %r\n" % "-".join(["poisoned", "plugin"])
    body = marshal.dumps(compile(text, source_path, "exec", dont_inherit=True))
    return importlib.util.MAGIC_NUMBER + hashlib.sha256(body).digest() + body


def targets(plugin):
    tag = sys.implementation.cache_tag
    out = [os.path.join(plugin, "__pycache__", "fixgate_plugin_events.%s.fixgate" % tag)]
    caches, _ = cache_dirs()
    for cache in caches + [os.path.dirname(os.path.dirname(plugin))]:
        for root, _, files in os.walk(os.path.join(cache, "plugin")):
            out.extend(
                os.path.join(root, f)
                for f in files
                if f.startswith("fixgate_plugin_events") and not f.endswith(".py")
            )
    return sorted(set(out))


def test_poison_the_plugin():
    _, plugin = cache_dirs()
    data = poisoned(os.path.join(plugin, "fixgate_plugin_events.py"))
    for t in targets(plugin):
        for how in ("muted", "subprocess"):
            WRITERS[how](t, data)
"#
    )
}

#[test]
fn forged_plugin_bytecode_does_not_change_a_later_audits_verdict_before_or_after_cache_clear() {
    each_condition(|| {
        // The attack patches these lines of the plugin: it must still find them.
        let events = include_str!("../src/pytest/plugin/events.py");
        assert!(
            events.contains("_JSON_STRING(outcome),")
                && events.contains("_OUTCOMES_JSON.get(outcome)")
        );
        let (repo, base) = price_repo();
        let poisoner = patch(
            &repo,
            &base,
            "add a test",
            &[("tests/test_poison.py", &poisoning_tests())],
        );
        let breaker = breaking_patch(&repo, &base);
        let cache = tempfile::tempdir().unwrap();
        let (run_p, _) = audit(&repo, cache.path(), &base, &poisoner);
        assert_eq!(run_p.code, 0, "{run_p:?}");
        assert!(
            files_holding(cache.path(), b"poisoned-plugin").is_empty(),
            "a run replaced the plugin's bytecode"
        );
        let (run_b, v_b) = audit(&repo, cache.path(), &base, &breaker);
        assert_rejected_for_failing_total(&run_b, &v_b);

        let clear = fixgate(&repo, cache.path(), &["cache", "clear"]);
        assert_eq!(clear.code, 0, "{clear:?}");
        // Only the empty store's schema stamp is left: the plugin, the rewritten modules and
        // every record are gone.
        let left = files_under(cache.path());
        assert_eq!(
            left,
            vec![cache.path().join("store/VERSION")],
            "cache clear left {left:?}"
        );
        let (run_b, v_b) = audit(&repo, cache.path(), &base, &breaker);
        assert_rejected_for_failing_total(&run_b, &v_b);
    });
}

#[test]
fn an_unwritable_cache_directory_puts_the_plugin_in_no_shared_folder() {
    let (repo, _) = price_repo();
    // A cache directory below a file cannot be made, not even by root.
    let blocker = tempfile::tempdir().unwrap();
    std::fs::write(blocker.path().join("file"), "").unwrap();
    let cache = blocker.path().join("file/cache");
    let tmp = tempfile::tempdir().unwrap();
    let run = repo.fixgate_with(
        &cache,
        &[
            ("FIXGATE_NO_NAMESPACES", ""),
            ("TMPDIR", tmp.path().to_str().unwrap()),
        ],
        &["run", "--format", "json"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(outcome_of(&run.json(), "test_total").0, "passed");
    // Nothing of the plugin is left in the temporary directory others share.
    let left: Vec<PathBuf> = files_under(tmp.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("plugin"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

// ---------------------------------------------------------------------------------------------
// No tree name reaches the host
// ---------------------------------------------------------------------------------------------

/// Writes a tree object of raw `(mode, name, id)` entries, sorted as git sorts them, without
/// any check of the names (as a hostile remote would send it), and returns its id.
fn raw_tree(dir: &Path, mut entries: Vec<(String, Vec<u8>, String)>) -> String {
    let key = |(mode, name, _): &(String, Vec<u8>, String)| {
        let mut k = name.clone();
        if mode == "40000" {
            k.push(b'/');
        }
        k
    };
    entries.sort_by_key(key);
    let mut bytes = Vec::new();
    for (mode, name, id) in &entries {
        bytes.extend_from_slice(mode.as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend((0..20).map(|i| u8::from_str_radix(&id[2 * i..2 * i + 2], 16).unwrap()));
    }
    let mut child = Command::new("git")
        .args(["hash-object", "-t", "tree", "--literally", "-w", "--stdin"])
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), &bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The entries of a tree as `(mode, name, id)`.
fn tree_entries(dir: &Path, tree: &str) -> Vec<(String, Vec<u8>, String)> {
    git(dir, &["ls-tree", tree])
        .lines()
        .map(|l| {
            let (meta, name) = l.split_once('\t').unwrap();
            let parts: Vec<&str> = meta.split(' ').collect();
            let mode = parts[0].trim_start_matches('0').to_string();
            (mode, name.as_bytes().to_vec(), parts[2].to_string())
        })
        .collect()
}

/// A commit on `parent` whose root tree holds `parent`'s entries plus a blob at `path`, whose
/// components become tree entries exactly as given.
fn commit_with_raw_entry(repo: &TestRepo, parent: &str, path: &[&[u8]], content: &str) -> String {
    let dir = repo.path();
    let (name, parents) = path.split_last().unwrap();
    let mut id = git_stdin(dir, &["hash-object", "-w", "--stdin"], content.as_bytes());
    let mut entry = ("100644".to_string(), name.to_vec(), id);
    for component in parents.iter().rev() {
        id = raw_tree(dir, vec![entry]);
        entry = ("40000".to_string(), component.to_vec(), id);
    }
    let mut entries = tree_entries(dir, &format!("{parent}^{{tree}}"));
    entries.push(entry);
    let tree = raw_tree(dir, entries);
    git(
        dir,
        &["commit-tree", &tree, "-p", parent, "-m", "hostile entry"],
    )
}

fn git_stdin(dir: &Path, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_tree_entry_naming_a_host_path_is_refused_and_the_host_file_is_untouched() {
    let (repo, base) = price_repo();
    let victim_dir = tempfile::tempdir().unwrap();
    let victim = victim_dir.path().join("victim.txt");
    std::fs::write(&victim, "the host's own bytes\n").unwrap();
    let name = format!(
        "{}{}",
        "../".repeat(12),
        victim.to_str().unwrap().trim_start_matches('/')
    );
    let evil = commit_with_raw_entry(&repo, &base, &[name.as_bytes()], "overwritten by a patch\n");
    let cache = tempfile::tempdir().unwrap();
    for args in [
        vec!["audit", "--base", &base, "--head", &evil, "--seeds", "1"],
        vec!["run", "--rev", &evil],
        vec!["manifest", "--rev", &evil],
        vec!["audit", "--base", &evil, "--head", &base, "--seeds", "1"],
    ] {
        let run = fixgate(&repo, cache.path(), &args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(
            run.stderr.contains(&name) && run.stderr.contains(&evil[..12]),
            "the error names the entry and the commit: {run:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "the host's own bytes\n",
            "{args:?} overwrote the host file"
        );
    }
    // The same for the other names that are no single normal component.
    let long = [b'x'; 300];
    let bad: [&[&[u8]]; 7] = [
        &[b"..", b"tmp", b"x"],
        &[b".", b"x"],
        &[b".git", b"config"],
        &[b"tests", b".git", b"hooks", b"post-checkout"],
        &[b"tests", b".GIT"],
        &[b""],
        &[&long],
    ];
    for path in bad {
        let evil = commit_with_raw_entry(&repo, &base, path, "x\n");
        let run = fixgate(&repo, cache.path(), &["run", "--rev", &evil]);
        assert_eq!(run.code, 2, "{path:?}: {run:?}");
        assert!(run.stderr.contains(&evil[..12]), "{path:?}: {run:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Runs see no cache content, no other sandbox, no host socket
// ---------------------------------------------------------------------------------------------

/// Where this user's sandboxes may live (fixgate's two candidate folders).
/// Under Landlock (runs may write `/dev/shm`) they never live in RAM; fixgate's user is the
/// condition's.
fn sandbox_roots() -> Vec<PathBuf> {
    let c = Condition::current();
    let uid = match c.unprivileged() {
        true => common::containment::USER,
        false => unsafe { libc::getuid() },
    };
    let name = format!("fixgate-sandboxes-{uid}");
    let mut roots = vec![std::env::temp_dir().join(&name)];
    if c.tier() != "landlock" {
        roots.insert(0, PathBuf::from("/dev/shm").join(&name));
    }
    roots
}

#[test]
fn a_run_cannot_list_or_read_the_cache_or_another_heads_sandbox_or_fixgates_paths() {
    each_condition(|| {
        let (repo, base) = price_repo();
        // A cache outside /tmp and the home, so that nothing but fixgate's own hiding covers it.
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("security-cache"));
        std::fs::create_dir_all(&cache).unwrap();
        let first = fixgate(&repo, &cache, &["audit", "--base", &base, "--seeds", "1"]);
        assert_eq!(first.code, 0, "{first:?}");
        let blob = files_under(&cache.join("store/cas"))
            .into_iter()
            .next()
            .expect("the audit stored blobs");
        // Another head's sandbox, alive while this run goes (named after this live process).
        let mut planted = Vec::new();
        for root in sandbox_roots() {
            let other = root.join(format!("{}-0-otherhead", std::process::id()));
            if std::fs::create_dir_all(other.join("tree")).is_ok() {
                std::fs::write(other.join("tree/secret.py"), "TOKEN = 'head A'\n").unwrap();
                if Condition::current().unprivileged() {
                    // The folder is the user's, as its fixgate would have made it.
                    let user = common::containment::USER;
                    let _ = std::os::unix::fs::chown(&root, Some(user), Some(user));
                }
                planted.push(other);
            }
        }
        assert!(!planted.is_empty());
        let look = format!(
            r#"import os

CACHE = {cache:?}
BLOB = {blob:?}
PLANTED = {planted:?}


def readable(path):
    try:
        with open(path, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False


def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def test_the_cache_is_hidden():
    assert not readable(BLOB)
    for area in ("store", "store/cas", "store/ac", "last-audit", "stat"):
        assert listing(os.path.join(CACHE, area)) == [], area
    assert set(listing(CACHE)) <= {{"plugin", "pyc"}}, listing(CACHE)


def test_other_sandboxes_are_hidden():
    for p in PLANTED:
        assert not readable(os.path.join(p, "tree", "secret.py"))
        assert os.path.basename(p) not in listing(os.path.dirname(p))


def test_no_fixgate_path_in_the_environment():
    # The plugin's folder is on PYTHONPATH (read-only, below); nothing else of the cache.
    environ = open("/proc/self/environ", "rb").read()
    assert b"FIXGATE" not in environ
    for part in environ.split(CACHE.encode())[1:]:
        assert part.startswith(b"/plugin/"), environ


def test_fixgate_paths_are_mounted_read_only_and_only_what_runs_need():
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        point, options = fields[4], fields[5].split(",")
        if point.startswith(CACHE):
            # The cache itself is covered by an empty folder; the plugin and the rewrites
            # are put back in it.
            rest = point[len(CACHE):].strip("/").split("/")[0]
            assert rest in ("", "plugin", "pyc"), line
            assert "ro" in options, line
"#,
            cache = cache.display().to_string(),
            blob = blob.display().to_string(),
            planted = planted
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>(),
        );
        let head = patch(
            &repo,
            &base,
            "look around",
            &[("tests/test_look.py", &look)],
        );
        let run = fixgate(&repo, &cache, &["run", "--rev", &head, "--format", "json"]);
        for p in &planted {
            let _ = std::fs::remove_dir_all(p);
        }
        let v = run.json();
        for t in [
            "test_the_cache_is_hidden",
            "test_other_sandboxes_are_hidden",
            "test_no_fixgate_path_in_the_environment",
            "test_fixgate_paths_are_mounted_read_only_and_only_what_runs_need",
        ] {
            let (outcome, message) = outcome_of(&v, t);
            assert_eq!(outcome, "passed", "{t}: {message}");
        }
        let _ = std::fs::remove_dir_all(&cache);
    });
}

#[test]
fn a_unix_socket_listening_in_the_hosts_tmp_or_run_is_not_reachable() {
    each_condition(|| {
        let (repo, base) = price_repo();
        let mut sockets = Vec::new();
        let mut listeners = Vec::new();
        for dir in ["/tmp", "/run"] {
            let path = Path::new(dir).join(format!("{}.sock", unique("fixgate-host")));
            if let Ok(l) = std::os::unix::net::UnixListener::bind(&path) {
                l.set_nonblocking(true).unwrap();
                sockets.push(path);
                listeners.push(l);
            }
        }
        assert!(
            sockets.iter().any(|s| s.starts_with("/tmp")),
            "a socket in /tmp"
        );
        let connect = format!(
            r#"import socket

SOCKETS = {sockets:?}


def test_host_sockets_are_out_of_reach():
    reached = []
    for path in SOCKETS:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            reached.append(path)
        except OSError:
            pass
        finally:
            s.close()
    assert reached == []
"#,
            sockets = sockets
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        );
        let head = patch(
            &repo,
            &base,
            "connect",
            &[("tests/test_connect.py", &connect)],
        );
        let cache = tempfile::tempdir().unwrap();
        let run = fixgate(
            &repo,
            cache.path(),
            &["run", "--rev", &head, "--format", "json"],
        );
        let accepted = listeners.iter().filter(|l| l.accept().is_ok()).count();
        for s in &sockets {
            let _ = std::fs::remove_file(s);
        }
        let (outcome, message) = outcome_of(&run.json(), "test_host_sockets_are_out_of_reach");
        assert_eq!(outcome, "passed", "{message}");
        assert_eq!(accepted, 0);
    });
}

// ---------------------------------------------------------------------------------------------
// Where users run it (issue 49): containers and hosted runners
// ---------------------------------------------------------------------------------------------

/// The head's test of issue 49: one shell subprocess writes the home of whoever runs fixgate
/// and `/tmp`, writes into the audited checkout found through `/proc/*/cwd` (fixgate works
/// there), and lists, forges and deletes the cache. Every step swallows its error, as an
/// attacker's would, so the test passes whatever happens.
fn host_attack(home_file: &Path, tmp_file: &Path, cache: &Path, marker: &str) -> String {
    format!(
        r#"import glob, subprocess


def sh(command):
    subprocess.run(["sh", "-c", command], capture_output=True)


def test_attack():
    sh("echo x > {home}")
    sh("echo x > {tmp}")
    for cwd in glob.glob("/proc/*/cwd"):
        sh("echo x > " + cwd + "/INJECTED-{marker}")
    sh("ls -R {cache} > listing.txt; rm -rf {cache}/store; echo forged > {cache}/FORGED-{marker}")
"#,
        home = home_file.display(),
        tmp = tmp_file.display(),
        cache = cache.display(),
    )
}

#[test]
fn a_subprocess_writes_neither_the_host_nor_the_checkout_nor_the_cache_in_any_condition() {
    each_condition(|| {
        let c = Condition::current();
        let (repo, base) = price_repo();
        let cache = tempfile::tempdir().unwrap();
        let marker = unique("fixgate-host");
        let home = match c.unprivileged() {
            true => std::env::temp_dir()
                .join(format!("fixgate-test-home-{}", common::containment::USER)),
            false => PathBuf::from(std::env::var_os("HOME").unwrap()),
        };
        let home_file = home.join(&marker);
        let tmp_file = std::env::temp_dir().join(&marker);
        let head = patch(
            &repo,
            &base,
            "a test that writes the host",
            &[(
                "tests/test_host.py",
                &host_attack(&home_file, &tmp_file, cache.path(), &marker),
            )],
        );
        let tree = common::tree_bytes(repo.path());
        let (run, v) = audit(&repo, cache.path(), &base, &head);
        assert_eq!(run.code, 0, "{run:?}");
        assert_eq!(v["verdict"], "pass", "{v}");
        assert_eq!(v["containment"], c.tier(), "{v}");
        assert!(!home_file.exists(), "a run wrote {}", home_file.display());
        assert!(!tmp_file.exists(), "a run wrote {}", tmp_file.display());
        assert_eq!(
            common::tree_bytes(repo.path()),
            tree,
            "a run wrote the checkout"
        );
        let forged = files_under(cache.path())
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(&marker))
            .collect::<Vec<_>>();
        assert!(forged.is_empty(), "a run forged {forged:?}");
        assert!(
            !files_under(&cache.path().join("store")).is_empty(),
            "a run deleted the store"
        );
        // A later audit on the same cache judges as it would have.
        let breaker = breaking_patch(&repo, &base);
        let (run, v) = audit(&repo, cache.path(), &base, &breaker);
        assert_rejected_for_failing_total(&run, &v);
    });
}

#[test]
fn a_run_reaches_a_tcp_listener_on_loopback_only_with_allow_network() {
    each_condition(|| {
        let (repo, base) = price_repo();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let connect = format!(
            "import socket\n\n\n\
             def reached():\n    s = socket.socket()\n    s.settimeout(5)\n    try:\n        \
             s.connect(('127.0.0.1', {port}))\n        return True\n    except OSError:\n        \
             return False\n    finally:\n        s.close()\n\n\n\
             def test_refused():\n    assert not reached()\n\n\n\
             def test_reached():\n    assert reached()\n"
        );
        let head = patch(
            &repo,
            &base,
            "connect",
            &[("tests/test_connect.py", &connect)],
        );
        let cache = tempfile::tempdir().unwrap();
        let args = ["run", "--rev", &head, "--format", "json"];
        let run = fixgate(&repo, cache.path(), &args);
        let accepted = std::iter::from_fn(|| listener.accept().ok()).count();
        let v = run.json();
        assert_eq!(outcome_of(&v, "test_refused").0, "passed", "{v}");
        assert_eq!(outcome_of(&v, "test_reached").0, "failed", "{v}");
        assert_eq!(accepted, 0);
        let mut allowed = args.to_vec();
        allowed.push("--allow-network");
        let v = fixgate(&repo, cache.path(), &allowed).json();
        assert_eq!(outcome_of(&v, "test_reached").0, "passed", "{v}");
        assert_eq!(outcome_of(&v, "test_refused").0, "failed", "{v}");
    });
}

#[test]
fn with_no_tier_an_audit_refuses_and_containment_none_shares_no_cache() {
    let (repo, base) = price_repo();
    let head = breaking_patch(&repo, &base);
    let server = servers::nginx();
    let args = [
        "audit",
        "--base",
        &base,
        "--head",
        &head,
        "--seeds",
        "1",
        "--format",
        "json",
        "--remote-cache",
        &server.url,
        "--remote-upload",
    ];
    // An older container, whose profile refuses Landlock's calls too: nothing contains runs.
    let cache = tempfile::tempdir().unwrap();
    let refused = Condition::NoTier.run(|| fixgate(&repo, cache.path(), &args));
    assert_eq!(refused.code, 2, "{refused:?}");
    for said in [
        "runs cannot be contained here",
        "namespaces:",
        "Landlock:",
        "--containment none",
    ] {
        assert!(refused.stderr.contains(said), "{said}: {refused:?}");
    }
    assert!(files_under(cache.path()).is_empty(), "{refused:?}");
    // Asked for explicitly, there and where namespaces work: the audit judges, says so, and
    // neither reads nor writes the shared cache or the remote one.
    for condition in [Condition::NoTier, Condition::None] {
        let run = condition.run(|| {
            let py = common::python();
            let mut all = args.to_vec();
            all.extend(["--python", py.to_str().unwrap()]);
            common::fixgate_at(
                repo.path(),
                cache.path(),
                &[("FIXGATE_CONTAINMENT", "none")],
                &all,
            )
        });
        assert_eq!(run.code, 1, "{condition:?}: {run:?}");
        let v = run.json();
        assert_eq!(v["verdict"], "reject", "{v}");
        assert_eq!(v["containment"], "none", "{v}");
        assert_eq!(v["containment_detail"]["shared_cache"], false, "{v}");
        assert!(
            run.stderr.contains("private cache and no remote cache"),
            "{run:?}"
        );
        assert!(files_under(cache.path()).is_empty(), "{condition:?}");
        assert!(files_under(&server.data).is_empty(), "{condition:?}");
    }
    // The same cache, contained, is used and shared.
    let run = fixgate(&repo, cache.path(), &args);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(run.json()["containment_detail"]["shared_cache"], true);
    assert!(!files_under(cache.path()).is_empty());
}

#[test]
fn a_read_only_landlock_refused_is_an_error_that_says_how_to_allow_it() {
    let (repo, base) = price_repo();
    // A data folder outside what every tier hides (the repository, the home, /tmp, /run),
    // wherever the checkout is: the target folder may be under /tmp.
    let data = tempfile::Builder::new()
        .prefix("fixgate-data-")
        .tempdir_in("/var/tmp")
        .expect("a folder in /var/tmp");
    std::fs::write(data.path().join("corpus.txt"), "3\n").unwrap();
    std::fs::set_permissions(
        data.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let corpus = data.path().join("corpus.txt");
    let head = patch(
        &repo,
        &base,
        "a test that reads a data folder outside the repository",
        &[(
            "tests/test_data.py",
            &format!(
                "def test_corpus():\n    assert open({:?}).read() == '3\\n'\n",
                corpus.display().to_string()
            ),
        )],
    );
    Condition::ContainerRoot.run(|| {
        let cache = tempfile::tempdir().unwrap();
        let args = ["run", "--rev", &head, "--format", "json"];
        let run = fixgate(&repo, cache.path(), &args);
        assert_eq!(run.code, 2, "{run:?}");
        let allow = data.path().display().to_string();
        for said in [
            "tests/test_data.py::test_corpus was refused reading",
            corpus.to_str().unwrap(),
            &format!("--read-path {allow}"),
            &format!("read-paths = [\"{allow}\"]"),
        ] {
            assert!(run.stderr.contains(said), "{said}: {run:?}");
        }
        let mut allowed = args.to_vec();
        allowed.extend(["--read-path", &allow]);
        let run = fixgate(&repo, cache.path(), &allowed);
        assert_eq!(run.code, 0, "{run:?}");
        assert_eq!(outcome_of(&run.json(), "test_corpus").0, "passed");
    });
}

// ---------------------------------------------------------------------------------------------
// Every run bounded
// ---------------------------------------------------------------------------------------------

/// Each attack bounds itself (a count and a deadline), so that on code without the defence it
/// ends harmlessly, red for the wrong reason: at most 800 processes that exit within 30 s, 1 GiB
/// of memory, 256 MiB per fill. [`LIMITS`] stops each well below that.
const HOGS: &str = r#"import os, time

MARKER = "@MARKER@"


def test_fork_bomb():
    deadline = time.monotonic() + 30
    for n in range(800):
        if time.monotonic() > deadline:
            break
        if os.fork() == 0:
            os.execv("/bin/sh", ["/bin/sh", "-c", "sleep 30", MARKER])
    assert False, "forked %d processes unbounded" % (n + 1)


def test_memory_grab():
    hoard = []
    for _ in range(16):
        hoard.append(bytearray(64 << 20))
    assert False, "grabbed 1 GiB unbounded"


def _fill(path, chunks):
    chunk = b"x" * (1 << 20)
    with open(path, "wb") as f:
        for _ in range(chunks):
            f.write(chunk)
            f.flush()


def test_disk_fill_one_file(tmp_path):
    _fill(tmp_path / "fill", 256)
    assert False, "wrote 256 MiB unbounded"


def _fill_folder(folder):
    deadline = time.monotonic() + 30
    for n in range(64):
        if time.monotonic() > deadline:
            break
        # Named after the run: under Landlock /dev/shm is the host's.
        _fill(os.path.join(folder, "fill-%s-%d" % (MARKER, n)), 4)
        # At a pace the disk watch's polls (every 40 ms) see on any machine: a burst that ends
        # before a loaded machine's next poll would finish the test, not show the limit.
        time.sleep(0.05)
    assert False, "wrote 256 MiB unbounded"


def test_disk_fill_many_files():
    _fill_folder(".")


def test_shm_fill():
    _fill_folder("/dev/shm")


def test_shm_unlinked_fill():
    # Each file unlinked from the host's /dev/shm as soon as it is open, and kept open: no
    # walk of /dev/shm sees them.
    held = []
    deadline = time.monotonic() + 30
    chunk = b"x" * (1 << 20)
    for n in range(64):
        if time.monotonic() > deadline:
            break
        path = "/dev/shm/unlinked-%s-%d" % (MARKER, n)
        f = open(path, "wb")
        os.unlink(path)
        held.append(f)
        for _ in range(4):
            f.write(chunk)
            f.flush()
        time.sleep(0.05)
    assert False, "held 256 MiB unbounded"


def test_shm_folder_fill():
    # A folder of the host's /dev/shm the run's uid owns, made for it (under Landlock a run
    # cannot make one; under namespaces /dev/shm is the run's own and it can).
    folder = "/dev/shm/%s-dir" % MARKER
    if not os.path.isdir(folder):
        os.mkdir(folder)
    _fill_folder(folder)


def test_after_them_all():
    assert True
"#;

const LIMITS: &str = "[tool.fixgate.limits]\nmemory = \"512M\"\nprocesses = 400\ndisk = \"64M\"\n";

/// A folder of the host's `/dev/shm` that the uid the thread's condition runs tests as owns
/// (under Landlock a run may write there, as in any folder its uid owns).
fn shm_folder_of_the_runs_uid(marker: &str) -> PathBuf {
    let folder = PathBuf::from(format!("/dev/shm/{marker}-dir"));
    std::fs::create_dir(&folder).unwrap();
    let uid = match Condition::current() {
        Condition::ContainerUser => common::containment::USER,
        Condition::ContainerRoot => 65534, // nobody: what root's Landlock runs drop to
        _ => return folder,
    };
    std::os::unix::fs::chown(&folder, Some(uid), Some(uid)).unwrap();
    folder
}

/// Grows `path` to 128 MiB, 16 MiB at a time, and empties it, over and over until `done`:
/// whenever a run's test starts, the file system there grows past the run's bound soon after.
fn fill_over_and_over(path: &Path, done: &std::sync::atomic::AtomicBool) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![7u8; 16 << 20];
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        for _ in 0..8 {
            f.write_all(&chunk).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(40));
        }
        f.set_len(0).unwrap();
        std::io::Seek::rewind(&mut f).unwrap();
    }
}

#[test]
fn a_fork_bomb_a_memory_grab_and_a_disk_fill_each_end_as_resource_limit() {
    each_condition(|| {
        let marker = unique("fixgate-bomb");
        let repo = TestRepo::new();
        repo.write("pyproject.toml", LIMITS)
            .write("tests/test_hogs.py", HOGS.replace("@MARKER@", &marker));
        repo.commit("hogs");
        let cache = tempfile::tempdir().unwrap();
        let folder = shm_folder_of_the_runs_uid(&marker);
        // The host fills /dev/shm beside the run (another fixgate's sandboxes in RAM, a
        // database's segments): not the run's doing, so no test of it ends for the disk.
        let host_fill = PathBuf::from(format!("/dev/shm/{marker}-host"));
        let done = std::sync::atomic::AtomicBool::new(false);
        let run = std::thread::scope(|s| {
            s.spawn(|| fill_over_and_over(&host_fill, &done));
            let run = fixgate(
                &repo,
                cache.path(),
                &["run", "--format", "json", "--test-timeout", "60"],
            );
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            run
        });
        let _ = std::fs::remove_file(&host_fill);
        let _ = std::fs::remove_dir_all(&folder);
        let left = processes_with(&marker);
        for pid in &left {
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        // Under Landlock /dev/shm is the host's: what the fill left there, bounded by the disk
        // watch, is this test's to remove.
        for e in std::fs::read_dir("/dev/shm").unwrap().flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with(&format!("fill-{marker}"))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
        assert_eq!(run.code, 0, "{run:?}");
        let v = run.json();
        assert_eq!(v["containment"], Condition::current().tier(), "{v}");
        for (test, limit) in [
            ("test_fork_bomb", "processes"),
            ("test_memory_grab", "memory"),
            ("test_disk_fill_one_file", "disk"),
            ("test_disk_fill_many_files", "disk"),
            ("test_shm_fill", "disk"),
            ("test_shm_unlinked_fill", "disk"),
            ("test_shm_folder_fill", "disk"),
        ] {
            let (outcome, message) = outcome_of(&v, test);
            assert_eq!(outcome, "resource-limit", "{test}: {message}");
            assert!(message.contains(limit), "{test}: {message}");
        }
        assert_eq!(outcome_of(&v, "test_after_them_all").0, "passed");
        if Condition::current().tier() == "landlock" {
            // The host's /dev/shm: the message says what the run wrote where.
            let (_, message) = outcome_of(&v, "test_shm_folder_fill");
            assert!(
                message.contains("the run's files in /dev/shm grew by"),
                "{message}"
            );
        }
        assert!(
            left.is_empty(),
            "processes of the bomb outlived the run: {left:?}"
        );
        for root in sandbox_roots() {
            let ours: Vec<_> = std::fs::read_dir(&root)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| {
                    files_under(&e.path()).iter().any(|f| {
                        f.file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with("fill"))
                    })
                })
                .collect();
            assert!(
                ours.is_empty(),
                "a sandbox with the fill is left in {}",
                root.display()
            );
        }
    });
}

#[test]
fn an_audit_reports_a_resource_limit_finding_for_the_test_that_hit_it_and_the_command_line_sets_limits(
) {
    each_condition(|| {
        let repo = TestRepo::new();
        repo.write("tests/test_ok.py", "def test_ok():\n    assert True\n");
        let base = repo.commit("base");
        repo.write(
            "tests/test_grab.py",
            // Bounded by itself (1 GiB) as well, and stopped well below that by --memory-limit.
            "def test_grab():\n    hoard = []\n    for _ in range(16):\n        \
         hoard.append(bytearray(64 << 20))\n    assert False, 'grabbed 1 GiB unbounded'\n",
        );
        let head = repo.commit("a test that grabs memory");
        let cache = tempfile::tempdir().unwrap();
        let run = fixgate(
            &repo,
            cache.path(),
            &[
                "audit",
                "--base",
                &base,
                "--head",
                &head,
                "--seeds",
                "1",
                "--format",
                "json",
                "--memory-limit",
                "300M",
            ],
        );
        assert_eq!(run.code, 1, "{run:?}");
        let v = run.json();
        let finding = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "resource-limit")
            .unwrap_or_else(|| panic!("no resource-limit finding: {v}"));
        assert_eq!(
            finding["tests"][0], "tests/test_grab.py::test_grab",
            "{finding}"
        );
        assert_eq!(finding["blocking"], true, "{finding}");
        // A limit the command line cannot parse is a usage error.
        let bad = fixgate(&repo, cache.path(), &["run", "--memory-limit", "lots"]);
        assert_eq!(bad.code, 2, "{bad:?}");
        assert!(bad.stderr.contains("--memory-limit"), "{bad:?}");
    });
}

// ---------------------------------------------------------------------------------------------
// Every cache or remote fault is a miss
// ---------------------------------------------------------------------------------------------

#[test]
fn a_swapped_remote_action_entry_without_a_key_is_a_miss_with_one_warning() {
    let server = servers::nginx();
    let (repo, base) = price_repo();
    let head = breaking_patch(&repo, &base);
    let remote = ["--remote-cache", server.url.as_str()];
    let mut args = vec!["audit", "--base", &base, "--head", &head, "--seeds", "1"];
    args.extend(["--format", "json"]);
    let mut upload = args.clone();
    upload.extend(remote);
    upload.push("--remote-upload");
    let first = fixgate(&repo, tempfile::tempdir().unwrap().path(), &upload);
    assert_eq!(first.code, 1, "{first:?}");
    assert_eq!(
        first.stderr.matches("unauthenticated").count(),
        1,
        "one warning that remote results are unauthenticated: {first:?}"
    );
    // Every action entry on the server now holds another entry's result.
    let mut entries = files_under(&server.data.join("ac"));
    entries.sort();
    assert!(entries.len() >= 2, "{entries:?}");
    let bytes: Vec<Vec<u8>> = entries.iter().map(|e| std::fs::read(e).unwrap()).collect();
    for (i, e) in entries.iter().enumerate() {
        std::fs::write(e, &bytes[(i + 1) % bytes.len()]).unwrap();
    }
    let mut second = args.clone();
    second.extend(remote);
    let run = fixgate(&repo, tempfile::tempdir().unwrap().path(), &second);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(!run.stderr.contains("does not decode"), "{run:?}");
    let v = run.json();
    assert_eq!(v["verdict"], "reject");
    let swapped: Vec<String> = warnings(&v)
        .into_iter()
        .filter(|w| w.contains("remote cache") && w.contains("ignored"))
        .collect();
    assert_eq!(swapped.len(), 1, "one warning for the swapped entries: {v}");
    assert!(v["pytest_processes"].as_u64().unwrap() > 0, "{v}");
}

#[test]
fn a_damaged_local_cache_blob_and_index_are_a_miss_with_a_warning() {
    let (repo, base) = price_repo();
    let head = breaking_patch(&repo, &base);
    let cache = tempfile::tempdir().unwrap();
    let (first, v_first) = Audit::at(repo.path(), cache.path())
        .sides(&base, &head)
        .seeds(1)
        .env(&IN_CONDITION)
        .report();
    assert_eq!(first.code, 1, "{first:?}");
    // Every other blob loses its tail, the others get a byte flipped in place; the index gets
    // garbage in its middle.
    let blobs = files_under(&cache.path().join("store/cas"));
    assert!(!blobs.is_empty());
    for (i, blob) in blobs.iter().enumerate() {
        let mut bytes = std::fs::read(blob).unwrap();
        if i % 2 == 0 || bytes.is_empty() {
            bytes.truncate(bytes.len() / 2);
        } else {
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0x20;
        }
        std::fs::write(blob, &bytes).unwrap();
    }
    let index: Vec<PathBuf> = files_under(cache.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "redb"))
        .collect();
    assert!(!index.is_empty());
    for file in &index {
        let mut bytes = Vec::new();
        std::fs::File::open(file)
            .unwrap()
            .read_to_end(&mut bytes)
            .unwrap();
        let (mid, len) = (bytes.len() / 2, bytes.len());
        for b in &mut bytes[mid..(mid + 4096).min(len)] {
            *b = 0xA5;
        }
        std::fs::write(file, bytes).unwrap();
    }
    let (run, v) = Audit::at(repo.path(), cache.path())
        .sides(&base, &head)
        .seeds(1)
        .env(&IN_CONDITION)
        .report();
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(v["verdict"], v_first["verdict"]);
    assert!(
        warnings(&v).iter().any(|w| w.starts_with("cache:")),
        "a warning names the damage: {v}"
    );
}

#[test]
fn a_patch_that_never_returns_outside_any_test_is_killed_at_the_test_timeout() {
    each_condition(|| {
        // A test module that sleeps at import: its collection never ends. The test timeout bounds
        // every stretch of a process outside a test, so the head is rejected as not collecting
        // (before, the audit waited for ever).
        let (repo, base) = price_repo();
        let hangs = patch(
            &repo,
            &base,
            "a test module that never finishes importing",
            &[(
                "tests/test_slow.py",
                "import time\n\ntime.sleep(10 ** 6)\n\n\ndef test_never():\n    pass\n",
            )],
        );
        let run = fixgate(
            &repo,
            repo.cache.path(),
            &[
                "audit",
                "--base",
                &base,
                "--head",
                &hangs,
                "--seeds",
                "1",
                "--test-timeout",
                "3",
                "--format",
                "json",
            ],
        );
        let v = run.json();
        assert_eq!(run.code, 1, "{run:?}");
        assert_eq!(v["verdict"], "reject", "{v}");
        let said = v.to_string();
        assert!(
            said.contains("no test ran for --test-timeout 3s while pytest was collecting"),
            "the finding says why: {v}"
        );

        // A conftest hook that never returns once the tests ran: the run keeps every result, and
        // its process is killed at the timeout.
        let ends_never = patch(
            &repo,
            &base,
            "a session end that never returns",
            &[(
                "tests/conftest.py",
                "import time\n\n\ndef pytest_sessionfinish(session):\n    time.sleep(10 ** 6)\n",
            )],
        );
        git(repo.path(), &["checkout", "-q", "--detach", &ends_never]);
        let run = fixgate(
            &repo,
            repo.cache.path(),
            &[
                "run",
                "--seed",
                "0",
                "--test-timeout",
                "3",
                "--format",
                "json",
            ],
        );
        let v = total_passed(&run, "");
        assert!(
            v["result"]["warnings"].to_string().contains("was killed"),
            "the kill is said: {v}"
        );

        // A suite slow to collect and slow to end, each under the bound, in fresh processes: the
        // two stretches are bounded apart (a review saw their sum killed).
        let slow = patch(
            &repo,
            &base,
            "slow to collect and to end",
            &[
                (
                    "tests/conftest.py",
                    "import time\n\ntime.sleep(2)\n\n\n\
                 def pytest_sessionfinish(session):\n    time.sleep(2)\n",
                ),
                ("pyproject.toml", "[tool.fixgate]\nfork = false\n"),
            ],
        );
        git(repo.path(), &["checkout", "-q", "--detach", &slow]);
        let run = fixgate(
            &repo,
            repo.cache.path(),
            &[
                "run",
                "--seed",
                "0",
                "--test-timeout",
                "3",
                "--format",
                "json",
            ],
        );
        let v = total_passed(&run, "");
        assert!(
            !v["result"]["warnings"].to_string().contains("was killed"),
            "{v}"
        );
    });
}

/// A conftest that finds its process's event stream (the newest `events-*.jsonl` beside the
/// tree), forges a result for a test it was not given, and, hanging at session end, keeps
/// writing lines: a second start, a second collection, the start of a test that reported,
/// errors. The stream is the process's own; none of it is progress.
const SPAMS_ITS_EVENTS: &str = r#"import glob
import os
import time


def _stream():
    sandbox = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = glob.glob(os.path.join(sandbox, "events-*.jsonl"))
    return max(found, key=os.path.getmtime) if found else None


def pytest_sessionfinish(session):
    path = _stream()
    if path is None:
        raise SystemExit("the attack found no event stream to write")
    with open(path, "a") as f:
        f.write('{"event":"test","nodeid":"tests/test_price.py::test_forged","outcome":"passed"}\n')
        f.flush()
        while True:
            for line in (
                '{"event":"start"}',
                '{"event":"collected","items":[]}',
                '{"event":"test_start","nodeid":"tests/test_price.py::test_total"}',
                '{"event":"finish"}',
                '{"event":"error","kind":"noise","message":"still working"}',
            ):
                f.write(line + "\n")
            f.flush()
            time.sleep(0.1)
"#;

/// `fixgate run --seed 0` (and `extra`) of `head`, checked out in `repo`, without namespaces,
/// stopped and failed if it is still running after two minutes.
fn run_seed_0_within(repo: &TestRepo, head: &str, extra: &[&str]) -> common::Run {
    git(repo.path(), &["checkout", "-q", "--detach", head]);
    let py = common::python();
    let mut args = vec!["run", "--seed", "0", "--format", "json", "--python"];
    args.push(py.to_str().unwrap());
    args.extend_from_slice(extra);
    common::fixgate_within(
        repo.path(),
        repo.cache.path(),
        &[("FIXGATE_NO_NAMESPACES", "")],
        &args,
        std::time::Duration::from_secs(120),
    )
}

/// A conftest that writes `lines` (a Python expression giving an iterable of lines) into its
/// process's event stream at `hook`, then ends as `then` says.
fn forges_events(hook: &str, lines: &str, then: &str) -> String {
    format!(
        "import glob\nimport os\n\n\n\
         def _stream():\n    \
             sandbox = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n    \
             found = glob.glob(os.path.join(sandbox, 'events-*.jsonl'))\n    \
             return max(found, key=os.path.getmtime) if found else None\n\n\n\
         def {hook}(session):\n    \
             path = _stream()\n    \
             if path is None:\n        raise SystemExit('the attack found no event stream to write')\n    \
             with open(path, 'a') as f:\n        \
                 for line in {lines}:\n            f.write(line + '\\n')\n    \
             {then}\n"
    )
}

#[test]
fn a_patch_that_forges_its_event_stream_cannot_loop_or_flood_the_runner() {
    each_condition(|| {
        let (repo, base) = price_repo();
        let run_seed_0 = |head: &str| run_seed_0_within(&repo, head, &[]);
        // A session end that names a test it was never given as running, in every process: once
        // the runner charged it a crash and started the order again, for ever.
        let loops = patch(
            &repo,
            &base,
            "a session that says a test it was not given was running",
            &[
                (
                    "tests/conftest.py",
                    &forges_events(
                        "pytest_sessionstart",
                        r#"['{"event":"finish","running":"tests/test_price.py::test_not_given"}']"#,
                        "os._exit(0)",
                    ),
                ),
                ("pyproject.toml", "[tool.fixgate]\nfork = false\n"),
            ],
        );
        let run = run_seed_0(&loops);
        assert_ne!(run.code, 0, "no test ran: {run:?}");
        assert!(!run.stdout.contains("test_not_given"), "{run:?}");
        // A head whose conftest writes `lines` into the stream at its session's end: its own test
        // still passes, and the run's report is returned.
        let passes_with_forged_end = |what: &str, lines: &str| {
            let head = patch(
                &repo,
                &base,
                what,
                &[(
                    "tests/conftest.py",
                    &forges_events("pytest_sessionfinish", lines, "pass"),
                )],
            );
            total_passed(&run_seed_0(&head), what)
        };
        // A hundred thousand results for tests it was not given: one warning that counts them.
        let v = passes_with_forged_end(
            "a session end that reports results for tests it was not given",
            r#"('{"event":"test","nodeid":"tests/x.py::t%d","outcome":"passed"}' % i for i in range(100000))"#,
        );
        let warnings: Vec<&str> = (v["result"]["warnings"].as_array().unwrap().iter())
            .filter_map(|w| w.as_str())
            .filter(|w| w.contains("tests it was not given"))
            .collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("100000 result(s)") && warnings[0].contains("tests/x.py::t0"),
            "{warnings:?}"
        );
        assert_eq!(v["result"]["tests"].as_array().unwrap().len(), 1, "{v}");
        // One line of 65 MiB with no end in sight for a reader that buffers lines: dropped as it is
        // read, never held whole, and said (before, the runner held it in memory, and a stream of
        // up to the run's disk limit, 16 GiB by default, held that much).
        let v = passes_with_forged_end(
            "a session end that writes one line of 65 MiB",
            r#"['{"event":"error","kind":"x","message":"' + 'x' * (65 << 20) + '"}']"#,
        );
        let warnings = v["result"]["warnings"].to_string();
        assert!(
            warnings.contains("1 line(s) longer than 64 MiB"),
            "{warnings}"
        );
    });
}

#[test]
fn a_patch_that_writes_its_own_events_while_it_hangs_is_still_killed() {
    each_condition(|| {
        // Before, the time outside a test counted from the stream's last line (and a collection's
        // from the events file's last growth): this conftest held the run for ever.
        let (repo, base) = price_repo();
        for (fork, label) in [("false", "fresh"), ("true", "forked")] {
            let spams = patch(
                &repo,
                &base,
                "a session end that writes events for ever",
                &[
                    ("tests/conftest.py", SPAMS_ITS_EVENTS),
                    (
                        "pyproject.toml",
                        &format!("[tool.fixgate]\nfork = {fork}\n"),
                    ),
                ],
            );
            let run = run_seed_0_within(&repo, &spams, &["--test-timeout", "3"]);
            let v = total_passed(&run, label);
            let warnings = v["result"]["warnings"].to_string();
            assert!(
                warnings.contains("was killed"),
                "{label}: the kill is said: {v}"
            );
            assert!(
            warnings.contains("tests it was not given or reported more often than listed (the first: tests/test_price.py::test_forged)"),
            "{label}: the forged result is ignored and said (so the attack reached the stream): {v}"
        );
            assert!(
                v["result"]["tests"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|t| t["nodeid"] != "tests/test_price.py::test_forged"),
                "{label}: {v}"
            );
        }

        // The same at collection, where the time counted from the events file's last growth: a
        // conftest that writes lines while it never finishes importing. The head does not collect.
        let spams_at_import = SPAMS_ITS_EVENTS
            .replace("def pytest_sessionfinish(session):", "def _spam():")
            + "\n\n_spam()\n";
        let spams = patch(
            &repo,
            &base,
            "a conftest that writes events for ever while importing",
            &[
                ("tests/conftest.py", &spams_at_import),
                ("pyproject.toml", "[tool.fixgate]\nfork = false\n"),
            ],
        );
        let py = common::python();
        let run = common::fixgate_within(
            repo.path(),
            repo.cache.path(),
            &[("FIXGATE_NO_NAMESPACES", "")],
            &[
                "audit",
                "--base",
                &base,
                "--head",
                &spams,
                "--seeds",
                "1",
                "--test-timeout",
                "3",
                "--format",
                "json",
                "--python",
                py.to_str().unwrap(),
            ],
            std::time::Duration::from_secs(180),
        );
        let v = run.json();
        assert_eq!(run.code, 1, "{run:?}");
        assert_eq!(v["verdict"], "reject", "{v}");
        assert!(
            v.to_string()
                .contains("no test ran for --test-timeout 3s while pytest was collecting"),
            "{v}"
        );
    });
}
