//! Issue 24: the suites people have, with plain pytest: the cache plugin and the options of a
//! suite's `addopts`, a collection error in pytest's own words, a file name that is not UTF-8,
//! the locks teams keep, and the rough edges a newcomer meets (a bare or empty repository,
//! negative counts, the `cargo run` warning). The plugins themselves are in tests/plugins.rs.

mod common;

use std::process::Command;

use common::audit::warnings;
use common::{Run, TestRepo};
use serde_json::Value;

#[track_caller]
fn assert_verdict(run: &Run, v: &Value, code: i32, verdict: &str) {
    assert_eq!(
        (run.code, v["verdict"].as_str()),
        (code, Some(verdict)),
        "{run:?}"
    );
}

/// The (polluter, victim) of each pair.
fn pairs(v: &Value) -> Vec<(String, String)> {
    v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["polluter"].as_str().unwrap_or_default().to_owned(),
                p["victim"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// pytest's cache and the suite's own options
// ---------------------------------------------------------------------------------------------

const CACHE_TESTS: &str = r#"def test_the_cache_starts_empty_in_every_run(cache):
    # Set in every run: a cache that reached another run would hold it already.
    assert cache.get("fixgate/probe", None) is None
    cache.set("fixgate/probe", 1)


def test_request_config_cache(request):
    assert request.config.cache.get("fixgate/other", None) is None
    assert request.config.cache.mkdir("scratch").is_dir()
"#;

#[test]
fn addopts_lf_and_the_cache_fixture_work_in_fixgates_runs() {
    let repo = TestRepo::new();
    repo.write("pytest.ini", "[pytest]\naddopts = --lf --ff -x\n")
        .write("tests/test_cache.py", CACHE_TESTS);
    let base = repo.commit("base: a suite that uses pytest's cache");
    // Honest: a new test of its own.
    repo.write(
        "tests/test_more.py",
        "def test_more(cache):\n    assert cache.get('fixgate/more', 'unset') == 'unset'\n",
    );
    let honest = repo.commit("honest head");
    let (run, v) = repo.audit(&base, &honest).seeds(2).report();
    assert_verdict(&run, &v, 0, "pass");
    for t in v["tests"].as_array().unwrap() {
        assert_eq!(t["bucket"], "stable", "{t}");
    }
    let w = warnings(&v);
    for option in ["`--lf`", "`--ff`", "`-x`"] {
        assert!(w.iter().any(|w| w.contains(option)), "{option}: {w:?}");
    }
    assert!(
        !repo.path().join(".pytest_cache").exists(),
        "the user's tree got a cache"
    );

    // Order-dependent through the cache: the reader needs what the writer stored.
    repo.write(
        "tests/test_token.py",
        "def test_writer(cache):\n    cache.set('app/token', 'abc')\n\n\n\
         def test_reader(request):\n    assert request.config.cache.get('app/token', None) == 'abc'\n",
    );
    let buggy = repo.commit("buggy head: a test reads what another left in the cache");
    let (run, v) = repo.audit(&honest, &buggy).seeds(2).report();
    assert_verdict(&run, &v, 1, "reject");
    assert_eq!(
        pairs(&v),
        [(
            "tests/test_token.py::test_writer".to_owned(),
            "tests/test_token.py::test_reader".to_owned()
        )],
        "{}",
        v["pairs"]
    );
}

#[test]
fn a_collection_error_finding_carries_pytests_own_message() {
    let repo = TestRepo::new();
    repo.write("tests/test_a.py", "def test_a():\n    pass\n");
    let base = repo.commit("base");
    repo.write("pytest.ini", "[pytest]\naddopts = --frobnicate\n");
    let head = repo.commit("head: an option pytest does not know");
    let (run, v) = repo.audit(&base, &head).seeds(0).report();
    assert_verdict(&run, &v, 1, "reject");
    let finding = &v["findings"][0];
    assert_eq!(finding["kind"], "collection-error", "{finding}");
    let message = finding["message"].as_str().unwrap();
    assert!(
        message.contains("unrecognized arguments: --frobnicate"),
        "{message}"
    );
    assert!(!message.contains("Some("), "{message}");
}

// ---------------------------------------------------------------------------------------------
// The suite's own test names
// ---------------------------------------------------------------------------------------------

#[test]
fn a_new_check_function_or_test_class_does_not_edit_the_files_other_tests() {
    // python_functions = check_*: the collection says what is a test, not a `test` prefix.
    let repo = TestRepo::new();
    repo.write(
        "pytest.ini",
        "[pytest]\npython_functions = check_*\npython_classes = Check*\n",
    )
    .write(
        "tests/test_cart.py",
        "CART = []\n\n\ndef check_fill():\n    CART.append('book')\n\n\n\
         def check_holds_the_book():\n    assert CART == ['book']\n",
    );
    let base = repo.commit("base: a pre-existing pair, in check_* functions");
    repo.write(
        "tests/test_cart.py",
        "CART = []\n\n\ndef check_fill():\n    CART.append('book')\n\n\n\
         def check_holds_the_book():\n    assert CART == ['book']\n\n\n\
         def check_new():\n    assert isinstance(CART, list)\n\n\n\
         class CheckShelf:\n    SIZE = 3\n\n    def check_size(self):\n        assert self.SIZE == 3\n",
    );
    let head = repo.commit("head: a new check function and a new check class");
    let (run, v) = repo.audit(&base, &head).seeds(2).report();
    let edited: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["edited_by_patch"] == true)
        .map(|t| t["nodeid"].as_str().unwrap())
        .collect();
    assert_eq!(
        edited,
        [
            "tests/test_cart.py::check_new",
            "tests/test_cart.py::CheckShelf::check_size"
        ],
        "{run:?}"
    );
    let kinds: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert!(
        !kinds.contains(&"test-refactor") && !kinds.contains(&"edited-assertion"),
        "{kinds:?}"
    );
    // The pre-existing pair is the base's, not the patch's: the head passes.
    assert_verdict(&run, &v, 0, "pass");
}

// ---------------------------------------------------------------------------------------------
// A test file whose name is not UTF-8
// ---------------------------------------------------------------------------------------------

#[test]
fn a_test_file_with_a_non_utf8_name_is_audited_and_its_pair_found() {
    use std::os::unix::ffi::OsStrExt;
    let repo = TestRepo::new();
    let name = std::ffi::OsStr::from_bytes(b"tests/test_\xff\xfecart.py");
    let cart = "CART = []\n\n\ndef test_add():\n    CART.append(1)\n    assert CART\n\n\n\
                def test_total():\n    assert len(CART) == 0\n";
    repo.write("tests/test_ok.py", "def test_ok():\n    pass\n");
    std::fs::write(repo.path().join(name), cart.replace("== 0", ">= 0")).unwrap();
    let base = repo.commit("base");
    std::fs::write(repo.path().join(name), cart).unwrap();
    let head = repo.commit("head: the total test needs an empty cart");
    let (run, v) = repo.audit(&base, &head).seeds(2).report();
    assert_verdict(&run, &v, 1, "reject");
    assert_eq!(
        pairs(&v),
        [(
            "tests/test_\\xFF\\xFEcart.py::test_add".to_owned(),
            "tests/test_\\xFF\\xFEcart.py::test_total".to_owned()
        )],
        "{}",
        v["pairs"]
    );
}

// ---------------------------------------------------------------------------------------------
// The locks teams keep
// ---------------------------------------------------------------------------------------------

fn sha256(bytes: &[u8]) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn locked_suite() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("tests/fixtures/users.json", "[\"ana\"]\n")
        .write("tests/fixtures/db/rates.csv", "eur,1\n")
        .write(
            "tests/test_app.py",
            "def test_users():\n    assert open('tests/fixtures/users.json').read()\n",
        );
    repo
}

/// The common fixture-manifest script's output, written on a CI machine whose checkout was at
/// /builds/ci/app: absolute resolved keys, the roots it walked.
fn absolute_manifest(repo: &TestRepo) -> String {
    let entry = |rel: &str| {
        let bytes = repo.read(rel);
        format!(
            "\"/builds/ci/app/{rel}\": {{\"sha256\": \"{}\", \"bytes\": {}}}",
            sha256(&bytes),
            bytes.len()
        )
    };
    format!(
        "{{\"schema\": 1, \"roots\": [\"/builds/ci/app/tests/fixtures\"], \"files\": {{{}, {}}}}}\n",
        entry("tests/fixtures/users.json"),
        entry("tests/fixtures/db/rates.csv")
    )
}

#[test]
fn a_fixture_manifest_with_roots_and_absolute_keys_is_a_lock_with_and_without_drift() {
    let repo = locked_suite();
    let lock = absolute_manifest(&repo);
    repo.write("fixtures.manifest.json", &lock).write(
        "pyproject.toml",
        "[tool.fixgate]\nlock = \"fixtures.manifest.json\"\n",
    );
    let base = repo.commit("base with the team's manifest");
    let ok = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    assert_eq!(ok.json()["format"], "sha256-manifest");

    repo.write("tests/fixtures/db/rates.csv", "eur,2\n");
    repo.remove("tests/fixtures/users.json");
    let head = repo.commit("change a rate, drop the users");
    let check = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(check.code, 3, "{check:?}");
    let drift = check.json()["drift"].clone();
    let paths: Vec<(&str, &str)> = drift
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["path"].as_str().unwrap(), d["change"].as_str().unwrap()))
        .collect();
    // Repository paths, not the other machine's.
    assert_eq!(
        paths,
        [
            ("tests/fixtures/db/rates.csv", "modified"),
            ("tests/fixtures/users.json", "removed")
        ]
    );
    let (run, v) = repo.audit(&base, &head).seeds(0).report();
    assert_verdict(&run, &v, 3, "drift");
    assert_eq!(v["lock"]["file"], "fixtures.manifest.json");
    let reasons = v["reasons"].to_string();
    assert!(
        reasons
            .contains("fixture differs from fixtures.manifest.json: tests/fixtures/db/rates.csv"),
        "{reasons}"
    );
}

#[test]
fn drift_against_the_name_map_names_the_lock_that_was_read() {
    let repo = locked_suite();
    let users = sha256(&repo.read("tests/fixtures/users.json"));
    let rates = sha256(&repo.read("tests/fixtures/db/rates.csv"));
    repo.write(
        "tests/fixtures.lock.json",
        format!(
            "{{\"users.json\": \"{}\", \"rates.csv\": \"{}\"}}\n",
            &users[..16],
            &rates[..16]
        ),
    );
    let base = repo.commit("base with a name map");
    repo.write("tests/fixtures/users.json", "[\"bo\"]\n");
    let head = repo.commit("edit the users");
    let (run, v) = repo.audit(&base, &head).seeds(0).report();
    assert_verdict(&run, &v, 3, "drift");
    let reasons = v["reasons"].to_string();
    assert!(
        reasons.contains("differs from tests/fixtures.lock.json: tests/fixtures/users.json"),
        "{reasons}"
    );
    assert!(!reasons.contains("fixtures.lock:"), "{reasons}");
}

#[test]
fn a_lock_that_does_not_match_its_own_base_says_so_and_which_digest_would() {
    let repo = locked_suite();
    repo.commit("fixtures");
    // BLAKE3 digests (fixgate's manifest) in a flat map, which is read as SHA-256.
    let manifest = repo.fixgate(&["manifest", "--format", "json"]).json();
    let pins: Vec<String> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name = f["path"].as_str().unwrap().rsplit('/').next().unwrap();
            format!("\"{name}\": \"{}\"", f["blake3"].as_str().unwrap())
        })
        .collect();
    repo.write(
        "tests/fixtures.lock.json",
        format!("{{{}}}\n", pins.join(", ")),
    );
    let base = repo.commit("base with a lock of the wrong digest");
    repo.write("README.md", "notes\n");
    let head = repo.commit("docs");
    let run = repo.fixgate_py(&["audit", "--base", &base, "--head", &head, "--seeds", "0"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("tests/fixtures.lock.json does not match its own base"),
        "{run:?}"
    );
    assert!(run.stderr.contains("are the BLAKE3"), "{run:?}");
    let check = repo.fixgate(&["lock", "--check"]);
    assert_eq!(check.code, 2, "{check:?}");
    assert!(check
        .stderr
        .contains("does not match the fixtures of the working tree"));
}

// ---------------------------------------------------------------------------------------------
// Rough edges
// ---------------------------------------------------------------------------------------------

#[test]
fn a_bare_repository_says_it_is_bare_and_how_to_get_a_working_tree() {
    let bare = TestRepo::plain();
    common::git(bare.path(), &["init", "-q", "--bare"]);
    let by_flag = common::fixgate_at(
        std::path::Path::new("/"),
        bare.cache.path(),
        &[],
        &[
            "--repo",
            bare.path().to_str().unwrap(),
            "audit",
            "--base",
            "HEAD",
        ],
    );
    let inside = bare.fixgate(&["audit", "--base", "HEAD"]);
    for run in [by_flag, inside] {
        assert_eq!(run.code, 2, "{run:?}");
        assert!(run.stderr.contains("is a bare git repository"), "{run:?}");
        assert!(run.stderr.contains("git worktree add"), "{run:?}");
        assert!(!run.stderr.contains("not a git repository"), "{run:?}");
    }
}

#[test]
fn an_empty_repository_says_there_is_no_commit_yet() {
    let repo = TestRepo::new();
    repo.write("tests/test_a.py", "def test_a():\n    pass\n");
    let run = repo.fixgate_py(&["audit", "--base", "HEAD"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("has no commit yet"), "{run:?}");
    assert!(run.stderr.contains("git commit"), "{run:?}");
    assert!(!run.stderr.contains("revspec"), "{run:?}");
}

#[test]
fn negative_seeds_and_jobs_are_told_the_value_must_be_positive() {
    let repo = TestRepo::new();
    for args in [
        &["audit", "--base", "HEAD", "--seeds", "-3"][..],
        &["--jobs", "-1", "run"],
        &["run", "--seed", "-2"],
    ] {
        let run = repo.fixgate(args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(
            run.stderr.contains("is negative: the value must be"),
            "{run:?}"
        );
        assert!(!run.stderr.contains("unexpected argument"), "{run:?}");
    }
}

/// The README's first set-up command: cargo hands the program every variable the build script
/// sets with `cargo:rustc-env`, and fixgate warns about `FIXGATE_*` variables it does not read.
/// The build script's directives for this very build are in `OUT_DIR/../output`; the binary is
/// run with the variables `cargo run` would give it.
#[test]
fn cargo_run_gives_fixgate_no_variable_it_warns_about() {
    let output = std::path::Path::new(env!("OUT_DIR")).join("../output");
    let directives = std::fs::read_to_string(&output)
        .unwrap_or_else(|e| panic!("the build script's output {}: {e}", output.display()));
    let vars: Vec<(String, String)> = directives
        .lines()
        .filter_map(|l| {
            l.strip_prefix("cargo:rustc-env=")
                .or_else(|| l.strip_prefix("cargo::rustc-env="))
        })
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let repo = TestRepo::plain();
    let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let run = common::fixgate_at(repo.path(), repo.cache.path(), &env, &["manifest"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        !run.stderr.contains("is not a variable fixgate reads"),
        "{vars:?}: {run:?}"
    );
    let version = common::fixgate_at(repo.path(), repo.cache.path(), &[], &["--version"]);
    assert!(version.stdout.contains("(commit "), "{version:?}");
}
