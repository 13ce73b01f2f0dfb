//! Adopting fixgate on an existing repository: `fixgate init`, the SHA-256 locks teams already
//! keep (checked, migrated, and as the audit's gate), completions, the man page and `--version`.

mod common;

use fixgate::exit;

use std::process::Command;

use common::{tree_bytes, Run, TestRepo};

const TEST_SHOP: &str = "import json\n\n\n\
def test_prices():\n    with open(\"tests/golden/prices.json\") as f:\n        \
assert json.load(f)[\"apple\"] == 3\n\n\n\
def test_users():\n    with open(\"tests/seeds/users.csv\") as f:\n        \
assert \"ana\" in f.read()\n\n\n\
def test_counter():\n    with open(\"tests/seeds/counter.txt\", \"w\") as f:\n        \
f.write(\"1\\n\")\n";

/// Two fixture directories outside the default roots, read by two tests, and one test that
/// writes a file of one of them without a `writes` marker.
fn shop_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write(
        "pyproject.toml",
        "[project]\nname = \"shop\"\nversion = \"0.1\"\n",
    )
    .write("tests/golden/prices.json", "{\"apple\": 3}\n")
    .write("tests/seeds/users.csv", "name\nana\n")
    .write("tests/seeds/counter.txt", "0\n")
    .write("tests/test_shop.py", TEST_SHOP);
    repo.commit("base");
    repo
}

/// Issue 54: the programs fixgate starts for itself (git, the interpreter's probe) say nothing
/// on the user's terminal. On a machine whose git has no settings (no `init.defaultBranch`: a
/// `git init` there prints a "hint:" block about the initial branch's name), `fixgate init`
/// prints its proposal and nothing of another program's, and so does `fixgate demo`, which makes
/// a git repository of its own.
#[test]
fn init_and_the_demo_print_nothing_of_git_where_git_has_no_settings() {
    let home = tempfile::tempdir().unwrap();
    let gitconfig = home.path().join(".gitconfig");
    std::fs::write(&gitconfig, "").unwrap();
    let env = [
        ("HOME", home.path().to_str().unwrap()),
        ("XDG_CONFIG_HOME", home.path().to_str().unwrap()),
        ("GIT_CONFIG_GLOBAL", gitconfig.to_str().unwrap()),
        ("GIT_CONFIG_NOSYSTEM", "1"),
    ];
    // The machine is as said: a git init there hints.
    let probe = tempfile::tempdir().unwrap();
    let hinted = Command::new("git")
        .arg("init")
        .current_dir(probe.path())
        .envs(env)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&hinted.stderr).contains("hint:"),
        "git gives no hint here, so the test below proves nothing: {hinted:?}"
    );

    let repo = shop_repo();
    let init = common::fixgate_py_at(repo.path(), repo.cache.path(), &env, &["init"]);
    assert_eq!(init.code, 0, "{init:?}");
    assert!(
        init.stdout.starts_with("group golden: tests/golden/**"),
        "{init:?}"
    );
    let demo_dir = TestRepo::plain();
    let demo = common::fixgate_py_at(demo_dir.path(), demo_dir.cache.path(), &env, &["demo"]);
    assert_eq!(demo.code, 0, "{demo:?}");
    // What git says on its own: hints, warnings, a new repository, a commit's summary.
    let gits = [
        "hint:",
        "warning:",
        "error:",
        "fatal:",
        "Initialized empty Git repository",
        "Reinitialized existing Git repository",
        "[main",
        "[master",
        " create mode",
    ];
    for run in [&init, &demo] {
        let foreign: Vec<&str> = run
            .stdout
            .lines()
            .chain(run.stderr.lines())
            .filter(|l| gits.iter().any(|g| l.starts_with(g)))
            .collect();
        assert!(foreign.is_empty(), "{foreign:?} in {run:?}");
    }
}

fn text(repo: &TestRepo, rel: &str) -> String {
    String::from_utf8(repo.read(rel)).unwrap()
}

#[test]
fn init_proposes_groups_markers_registration_and_lock_without_writing() {
    let repo = shop_repo();
    let before = tree_bytes(repo.path());
    let r = repo.fixgate_py(&["init", "--format", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(
        v["groups"],
        serde_json::json!([
            {"name": "golden", "globs": ["tests/golden/**"]},
            {"name": "seeds", "globs": ["tests/seeds/**"]},
        ])
    );
    assert_eq!(
        v["markers"],
        serde_json::json!([
            {"nodeid": "tests/test_shop.py::test_counter", "groups": ["seeds"], "placed": true}
        ])
    );
    assert_eq!(v["groups_file"], "fixtures.manifest");
    assert_eq!(v["registration"], "pyproject.toml");
    assert_eq!(v["lock"], "fixtures.lock");
    assert_eq!(v["applied"], false);
    let diff = v["diff"].as_str().unwrap();
    assert!(
        diff.contains("+++ b/tests/test_shop.py")
            && diff.contains("+import pytest\n")
            && diff.contains("+@pytest.mark.writes(\"seeds\")\n def test_counter():"),
        "{diff}"
    );
    assert!(
        diff.contains("--- /dev/null\n+++ b/fixtures.manifest"),
        "{diff}"
    );
    assert_eq!(
        tree_bytes(repo.path()),
        before,
        "init without --apply wrote"
    );
}

#[test]
fn init_apply_sets_up_the_repository_idempotently_and_the_audit_passes() {
    let repo = shop_repo();
    let applied = repo.fixgate_py(&["init", "--apply"]);
    assert_eq!(applied.code, 0, "{applied:?}");
    assert!(
        applied.stdout.contains("applied: 4 file(s) written"),
        "{applied:?}"
    );

    assert_eq!(
        text(&repo, "fixtures.manifest"),
        "# Fixture groups (name: glob), proposed by `fixgate init` from the files tests read.\n\
         golden: tests/golden/**\nseeds: tests/seeds/**\n"
    );
    let module = text(&repo, "tests/test_shop.py");
    assert!(
        module.starts_with("import pytest\nimport json\n"),
        "{module}"
    );
    assert!(
        module.contains("\n@pytest.mark.writes(\"seeds\")\ndef test_counter():\n"),
        "{module}"
    );
    let pyproject = text(&repo, "pyproject.toml");
    assert!(
        pyproject.contains("[tool.pytest.ini_options]\nmarkers = [\n    \"writes(*groups)"),
        "{pyproject}"
    );
    assert_eq!(repo.fixgate_py(&["lock", "--check"]).code, 0);

    // A second init on the set-up repository changes nothing and says so.
    let before = tree_bytes(repo.path());
    let again = repo.fixgate_py(&["init", "--apply"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert!(
        again
            .stdout
            .starts_with("already set up: nothing to change"),
        "{again:?}"
    );
    assert_eq!(tree_bytes(repo.path()), before);
    let json = repo.fixgate_py(&["init", "--format", "json"]).json();
    assert_eq!(json["changed"], false, "{json}");

    // Plain pytest accepts the markers under --strict-markers.
    let pytest = Command::new(common::python())
        .args([
            "-m",
            "pytest",
            "-q",
            "--strict-markers",
            "-p",
            "no:cacheprovider",
        ])
        .current_dir(repo.path())
        .output()
        .unwrap();
    assert!(
        pytest.status.success(),
        "{}",
        String::from_utf8_lossy(&pytest.stdout)
    );
    // Plain pytest ran in the tree itself, and test_counter wrote its fixture: put it back.
    repo.write("tests/seeds/counter.txt", "0\n");

    let base = repo.commit("set up fixgate");
    repo.write("README.md", "shop\n");
    let head = repo.commit("docs");
    let audit = repo.fixgate_py(&[
        "audit", "--base", &base, "--head", &head, "--seeds", "2", "--format", "json",
    ]);
    assert_eq!(audit.code, 0, "{audit:?}");
    assert_eq!(audit.json()["verdict"], "pass");
}

fn sha256(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, bytes).unwrap();
    let out = Command::new("sha256sum").arg(&p).output().unwrap();
    assert!(out.status.success(), "sha256sum is needed (coreutils)");
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// A repository with default fixture groups under tests/fixtures and tests/data.
fn fixture_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("tests/fixtures/users.json", "[\"ana\"]\n")
        .write("tests/data/golden/total.txt", "42\n")
        .write(
            "tests/test_app.py",
            "def test_users():\n    \
             assert open(\"tests/fixtures/users.json\").read() == '[\"ana\"]\\n'\n\n\n\
             def test_total():\n    \
             assert open(\"tests/data/golden/total.txt\").read() == \"42\\n\"\n",
        );
    repo
}

/// A flat map as a team's script writes it: file names for some files, a path for another,
/// digests cut to 16 hex characters.
fn flat_lock(repo: &TestRepo) -> String {
    let users = sha256(&repo.read("tests/fixtures/users.json"));
    let total = sha256(&repo.read("tests/data/golden/total.txt"));
    format!(
        "{{\n  \"users.json\": \"{}\",\n  \"golden/total.txt\": \"{}\"\n}}\n",
        &users[..16],
        &total[..16]
    )
}

/// The files-manifest format with full digests and sizes.
fn manifest_lock(repo: &TestRepo) -> String {
    let entry = |rel: &str| {
        let bytes = repo.read(rel);
        format!(
            "\"{rel}\": {{\"sha256\": \"{}\", \"bytes\": {}}}",
            sha256(&bytes),
            bytes.len()
        )
    };
    format!(
        "{{\"schema\": 1, \"files\": {{{}, {}}}}}\n",
        entry("tests/fixtures/users.json"),
        entry("tests/data/golden/total.txt")
    )
}

fn drift_of(r: &Run) -> Vec<(String, String)> {
    r.json()["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().to_owned(),
                d["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn lock_check_reads_a_flat_sha256_map_by_name_and_prefix() {
    let repo = fixture_repo();
    let lock = flat_lock(&repo);
    repo.write("tests/fixtures.lock.json", &lock);
    let ok = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    assert_eq!(ok.json()["format"], "flat-sha256");
    assert!(ok.json()["lock"]
        .as_str()
        .unwrap()
        .ends_with("tests/fixtures.lock.json"));

    repo.write("tests/fixtures/users.json", "[\"ana\", \"bo\"]\n");
    let drift = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(drift.code, exit::DRIFT, "{drift:?}");
    assert_eq!(
        drift_of(&drift),
        [(
            "tests/fixtures/users.json".to_owned(),
            "modified".to_owned()
        )]
    );
    let human = repo.fixgate(&["lock", "--check"]);
    assert_eq!(human.code, exit::DRIFT);
    assert!(
        human.stdout.contains("modified  tests/fixtures/users.json"),
        "{human:?}"
    );
}

#[test]
fn lock_check_reads_a_sha256_files_manifest_with_sizes() {
    let repo = fixture_repo();
    repo.write("fixtures.lock", manifest_lock(&repo));
    let ok = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    assert_eq!(ok.json()["format"], "sha256-manifest");

    repo.write("tests/data/golden/total.txt", "43\n")
        .write("tests/fixtures/extra.json", "{}\n");
    let drift = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(drift.code, exit::DRIFT, "{drift:?}");
    assert_eq!(
        drift_of(&drift),
        [
            (
                "tests/data/golden/total.txt".to_owned(),
                "modified".to_owned()
            ),
            ("tests/fixtures/extra.json".to_owned(), "added".to_owned()),
        ]
    );
}

#[test]
fn the_lock_path_comes_from_pyproject_or_the_flag() {
    let repo = fixture_repo();
    repo.write("locks/pins.json", flat_lock(&repo)).write(
        "pyproject.toml",
        "[tool.fixgate]\nlock = \"locks/pins.json\"\n",
    );
    let ok = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    assert!(ok.json()["lock"]
        .as_str()
        .unwrap()
        .ends_with("locks/pins.json"));

    repo.write("tests/fixtures/users.json", "[]\n");
    assert_eq!(repo.fixgate(&["lock", "--check"]).code, 3);
    let elsewhere = repo.path().join("other.json");
    std::fs::write(&elsewhere, "{}\n").unwrap();
    let flag = repo.fixgate(&["lock", "--check", "--lock", elsewhere.to_str().unwrap()]);
    assert_eq!(flag.code, exit::DRIFT, "{flag:?}");
    assert!(flag.stdout.contains("added"), "{flag:?}");
}

#[test]
fn migrate_rewrites_a_foreign_lock_in_fixgates_format_only_without_drift() {
    let repo = fixture_repo();
    let lock = flat_lock(&repo);
    repo.write("tests/fixtures.lock.json", &lock)
        .write("tests/fixtures/users.json", "[\"eve\"]\n");
    let refused = repo.fixgate(&["lock", "--migrate"]);
    assert_eq!(refused.code, exit::DRIFT, "{refused:?}");
    assert!(refused.stdout.contains("not migrated"), "{refused:?}");
    assert_eq!(text(&repo, "tests/fixtures.lock.json"), lock);

    repo.write("tests/fixtures/users.json", "[\"ana\"]\n");
    let migrated = repo.fixgate(&["lock", "--migrate", "--format", "json"]);
    assert_eq!(migrated.code, 0, "{migrated:?}");
    assert_eq!(migrated.json()["from"], "flat-sha256");
    assert_eq!(migrated.json()["changed"], true);
    let ours: serde_json::Value =
        serde_json::from_slice(&repo.read("tests/fixtures.lock.json")).unwrap();
    assert_eq!(ours["schema"], 1);
    let files = ours["files"].as_object().unwrap();
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        ["tests/data/golden/total.txt", "tests/fixtures/users.json"]
    );
    assert!(files.values().all(|d| d.as_str().unwrap().len() == 64));
    let check = repo.fixgate(&["lock", "--check", "--format", "json"]);
    assert_eq!(check.code, 0, "{check:?}");
    assert_eq!(check.json()["format"], "fixgate");
    let again = repo.fixgate(&["lock", "--migrate"]);
    assert_eq!(again.code, 0);
    assert!(
        again.stdout.contains("already in fixgate's format"),
        "{again:?}"
    );
}

#[test]
fn writing_fixgates_lock_over_a_foreign_one_is_refused_with_the_way_out() {
    let repo = fixture_repo();
    let lock = flat_lock(&repo);
    repo.write("tests/fixtures.lock.json", &lock);
    let r = repo.fixgate(&["lock"]);
    assert_eq!(r.code, exit::ERROR, "{r:?}");
    assert!(r.stderr.contains("--migrate"), "{r:?}");
    assert_eq!(text(&repo, "tests/fixtures.lock.json"), lock);
}

#[test]
fn an_unknown_lock_format_is_an_error_naming_the_formats_accepted() {
    let repo = fixture_repo();
    repo.write("fixtures.lock", "{\"version\": 2, \"pins\": [1, 2]}\n");
    let r = repo.fixgate(&["lock", "--check"]);
    assert_eq!(r.code, exit::ERROR, "{r:?}");
    assert!(
        r.stderr.contains("unknown lock format")
            && r.stderr.contains("flat JSON map")
            && r.stderr.contains("\"sha256\""),
        "{r:?}"
    );
}

#[test]
fn completions_man_page_and_version_need_no_repository() {
    let repo = TestRepo::plain();
    for shell in ["bash", "zsh", "fish"] {
        let r = repo.fixgate(&["completions", shell]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(
            r.stdout.contains("fixgate") && r.stdout.contains("audit"),
            "{shell}"
        );
    }
    let man = repo.fixgate(&["man"]);
    assert_eq!(man.code, 0, "{man:?}");
    assert!(man.stdout.contains(".TH fixgate 1"), "{man:?}");
    assert!(man.stdout.contains("init"), "{man:?}");

    let out = common::fixgate_command().arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&out.stdout);
    let commit = version
        .trim_end()
        .strip_prefix(&format!("fixgate {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected --version: {version}"));
    // Built from a git checkout, build.rs records the commit (12 hex characters).
    assert!(
        commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{version}"
    );
}

#[test]
fn init_keeps_an_existing_lock_and_warns_when_the_new_groups_make_it_differ() {
    let repo = fixture_repo();
    repo.write("tests/data/old/unread.txt", "nobody reads this\n");
    assert_eq!(repo.fixgate(&["lock"]).code, 0);
    let lock = repo.read("fixtures.lock");
    let r = repo.fixgate_py(&["init", "--apply", "--format", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["lock"], serde_json::Value::Null, "{v}");
    assert_eq!(
        v["groups"],
        serde_json::json!([
            {"name": "golden", "globs": ["tests/data/golden/**"]},
            {"name": "fixtures", "globs": ["tests/fixtures/**"]},
        ])
    );
    assert!(
        r.stderr
            .contains("fixtures.lock differs from the fixtures under these groups in 1 file"),
        "{r:?}"
    );
    assert_eq!(repo.read("fixtures.lock"), lock, "init rewrote the lock");
}

#[test]
fn init_writes_groups_where_the_repository_declares_them_and_registers_in_pytest_ini() {
    let repo = TestRepo::new();
    repo.write(
        "pyproject.toml",
        "[project]\nname = \"shop\"\n\n[tool.fixgate.groups]\ngolden = [\"tests/golden/**\"]\n",
    )
    .write("pytest.ini", "[pytest]\nmarkers =\n    slow: slow tests\n")
    .write("tests/golden/prices.json", "{\"apple\": 3}\n")
    .write("tests/seeds/users.csv", "name\nana\n")
    .write(
        "tests/test_seeds.py",
        "\"\"\"Seed data tests.\"\"\"\nimport pathlib\n\n\n\
         class TestSeeds:\n    def test_read(self):\n        \
         assert \"ana\" in pathlib.Path(\"tests/seeds/users.csv\").read_text()\n\n    \
         def test_append(self):\n        \
         with open(\"tests/seeds/users.csv\", \"a\") as f:\n            f.write(\"bo\\n\")\n\n\n\
         def test_prices():\n    assert pathlib.Path(\"tests/golden/prices.json\").exists()\n    \
         assert open(\"tests/golden/prices.json\").read()\n",
    );
    repo.commit("base");
    let r = repo.fixgate_py(&["init", "--apply", "--format", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["groups_file"], "pyproject.toml");
    assert_eq!(
        v["groups"],
        serde_json::json!([{"name": "seeds", "globs": ["tests/seeds/**"]}])
    );
    assert_eq!(
        v["markers"],
        serde_json::json!([{"nodeid": "tests/test_seeds.py::TestSeeds::test_append",
                            "groups": ["seeds"], "placed": true}])
    );
    assert_eq!(v["registration"], "pytest.ini");
    assert_eq!(
        text(&repo, "pyproject.toml"),
        "[project]\nname = \"shop\"\n\n[tool.fixgate.groups]\ngolden = [\"tests/golden/**\"]\n\
         seeds = [\"tests/seeds/**\"]\n"
    );
    assert_eq!(
        text(&repo, "pytest.ini"),
        "[pytest]\nmarkers =\n    slow: slow tests\n    \
         writes(*groups): the fixture groups this test may change (fixgate lease).\n    \
         serial: keep this test in collection order; fixgate never shuffles it.\n"
    );
    let module = text(&repo, "tests/test_seeds.py");
    assert!(
        module.starts_with("\"\"\"Seed data tests.\"\"\"\nimport pytest\nimport pathlib\n"),
        "{module}"
    );
    assert!(
        module.contains("    @pytest.mark.writes(\"seeds\")\n    def test_append(self):\n"),
        "{module}"
    );
    let again = repo.fixgate_py(&["init", "--format", "json"]).json();
    assert_eq!(again["changed"], false, "{again}");
}

fn foreign_locked_repo(at: &str, lock: fn(&TestRepo) -> String) -> (TestRepo, String) {
    let repo = fixture_repo();
    let text = lock(&repo);
    repo.write(at, text);
    let base = repo.commit("base with a team's lock");
    (repo, base)
}

fn audit_json(repo: &TestRepo, base: &str, head: &str) -> (Run, serde_json::Value) {
    let r = repo.fixgate_py(&[
        "audit", "--base", base, "--head", head, "--seeds", "0", "--format", "json",
    ]);
    let v = r.json();
    (r, v)
}

#[test]
fn the_audit_gate_passes_an_untouched_fixture_against_a_foreign_lock() {
    for (at, lock) in [
        ("fixtures.lock", manifest_lock as fn(&TestRepo) -> String),
        ("tests/fixtures.lock.json", flat_lock),
    ] {
        let (repo, base) = foreign_locked_repo(at, lock);
        repo.write("README.md", "notes\n");
        let head = repo.commit("docs");
        let (r, v) = audit_json(&repo, &base, &head);
        assert_eq!(r.code, 0, "{at}: {r:?}");
        assert_eq!(v["lock"]["drift"], serde_json::json!([]), "{at}");
    }
}

#[test]
fn the_audit_gate_is_drift_with_exit_3_against_a_foreign_lock_of_the_base() {
    for (at, lock) in [
        ("fixtures.lock", manifest_lock as fn(&TestRepo) -> String),
        ("tests/fixtures.lock.json", flat_lock),
    ] {
        let (repo, base) = foreign_locked_repo(at, lock);
        repo.write("tests/data/golden/total.txt", "41\n");
        let head = repo.commit("change the golden total, keep the lock");
        let (r, v) = audit_json(&repo, &base, &head);
        assert_eq!(r.code, exit::DRIFT, "{at}: {r:?}");
        assert_eq!(v["verdict"], "drift", "{at}");
        assert_eq!(
            v["lock"]["drift"],
            serde_json::json!([{"path": "tests/data/golden/total.txt", "change": "modified"}]),
            "{at}"
        );
        assert_eq!(v["pytest_processes"], 0, "{at}");
    }
}
