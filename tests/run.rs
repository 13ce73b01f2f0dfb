//! Issue 3: real pytest suites run in sandboxes; orders, outcomes, the trace and leases.

mod common;

use fixgate::exit;

use common::{assert_outcomes, outcomes, tree_bytes, TestRepo};

fn cart_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("src/cart.py", "CART = {}\n\ndef add(name, price):\n    CART[name] = price\n\ndef total():\n    return sum(CART.values())\n")
        .write("tests/conftest.py", "")
        .write(
            "tests/test_cart.py",
            "from cart import CART, add, total\n\n\
             def test_empty_cart_totals_zero():\n    assert total() == 0\n\n\
             def test_add_item():\n    add('apple', 3)\n    assert CART['apple'] == 3\n",
        );
    for i in 0..6 {
        repo.write(
            &format!("tests/test_other_{i}.py"),
            format!("def test_other_{i}():\n    assert {i} == {i}\n"),
        );
    }
    repo.commit("base");
    repo
}

#[test]
fn a_seed_means_one_order_and_a_mutated_module_dict_fails_the_victim_in_some_order() {
    let repo = cart_repo();
    let before = tree_bytes(repo.path());
    let file_order = repo.fixgate_py(&["run", "--format", "json"]);
    assert_eq!(file_order.code, 0, "{file_order:?}");
    let fo = outcomes(&file_order.json());
    assert_eq!(fo.len(), 8);
    assert!(fo.iter().all(|(_, o)| o == "passed"), "{fo:?}");

    let mut failing_seed = None;
    for seed in 1..=12u64 {
        let s = seed.to_string();
        let a = repo
            .fixgate_py(&["run", "--seed", &s, "--format", "json"])
            .json();
        let b = repo
            .fixgate_py(&["run", "--seed", &s, "--format", "json"])
            .json();
        assert_eq!(
            a["result"]["order"], b["result"]["order"],
            "seed {seed} gave two orders"
        );
        assert_eq!(outcomes(&a), outcomes(&b), "seed {seed} gave two outcomes");
        assert_eq!(a["result"]["order"], a["result"]["executed"]);
        let victim = outcomes(&a)
            .into_iter()
            .find(|(id, _)| id.ends_with("test_empty_cart_totals_zero"))
            .unwrap();
        if victim.1 == "failed" {
            failing_seed = Some(seed);
            break;
        }
    }
    assert!(
        failing_seed.is_some(),
        "no seed in 1..=12 put the polluter first"
    );
    assert_eq!(before, tree_bytes(repo.path()), "the working tree changed");
}

#[test]
fn a_sqlite_fixture_written_without_a_lease_is_a_violation_and_with_one_is_not() {
    let repo = TestRepo::new();
    repo.write("fixtures.manifest", "db: tests/fixtures/db/*.sqlite\n")
        .write(
            "tests/test_db.py",
            "import sqlite3, pytest\n\n\
             DB = 'tests/fixtures/db/app.sqlite'\n\n\
             def _insert():\n    c = sqlite3.connect(DB)\n    c.execute('insert into t values (1)')\n    c.commit()\n    c.close()\n\n\
             def test_writes_without_lease():\n    _insert()\n\n\
             @pytest.mark.writes('db')\n\
             def test_writes_with_lease():\n    _insert()\n\n\
             def test_reads_only():\n    c = sqlite3.connect(DB)\n    assert c.execute('select count(*) from t').fetchone()[0] >= 0\n",
        );
    std::fs::create_dir_all(repo.path().join("tests/fixtures/db")).unwrap();
    let made = std::process::Command::new(common::python())
        .args(["-c", "import sqlite3; c = sqlite3.connect('tests/fixtures/db/app.sqlite'); c.execute('create table t(x)'); c.commit()"])
        .current_dir(repo.path())
        .status()
        .unwrap();
    assert!(made.success());
    repo.commit("base");
    let before = tree_bytes(repo.path());
    let run = repo.fixgate_py(&["run", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    let tests = v["result"]["tests"].as_array().unwrap();
    let by_name = |n: &str| {
        tests
            .iter()
            .find(|t| t["nodeid"].as_str().unwrap().ends_with(n))
            .unwrap()
    };
    let bad = by_name("test_writes_without_lease");
    assert_eq!(bad["violations"][0]["group"], "db", "{bad}");
    assert_eq!(
        bad["violations"][0]["files"][0]["path"],
        "tests/fixtures/db/app.sqlite"
    );
    assert_eq!(
        by_name("test_writes_with_lease")["violations"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        by_name("test_reads_only")["violations"]
            .as_array()
            .unwrap()
            .len(),
        0
    );

    let trace = repo.fixgate_py(&["trace"]);
    assert!(
        trace.stdout.contains("LEASE VIOLATION") && trace.stdout.contains("\"db\""),
        "{trace:?}"
    );
    assert_eq!(before, tree_bytes(repo.path()), "the working tree changed");
}

#[test]
fn reads_through_open_pathlib_and_sqlite_are_traced_with_repo_relative_paths() {
    let repo = TestRepo::new();
    repo.write("tests/fixtures/cfg/a.json", "{\"a\": 1}\n")
        .write("tests/fixtures/cfg/b.json", "{\"b\": 2}\n")
        .write("tests/fixtures/db/app.sqlite", "")
        .write(
            "tests/test_reads.py",
            "import json, pathlib, sqlite3, os\n\n\
             def test_open():\n    with open('tests/fixtures/cfg/a.json') as f:\n        assert json.load(f)['a'] == 1\n\n\
             def test_pathlib():\n    p = pathlib.Path(__file__).parent / 'fixtures' / 'cfg' / 'b.json'\n    assert json.loads(p.read_text())['b'] == 2\n\n\
             def test_sqlite():\n    sqlite3.connect(os.path.abspath('tests/fixtures/db/app.sqlite')).close()\n\n\
             def test_outside():\n    with open('/tmp/fixgate-outside-%d.txt' % os.getpid(), 'w') as f:\n        f.write('x')\n",
        );
    repo.commit("base");
    let v = repo.fixgate_py(&["trace", "--format", "json"]);
    assert_eq!(v.code, 0, "{v:?}");
    let v = v.json();
    let tests = v["tests"].as_array().unwrap();
    let by_name = |n: &str| {
        tests
            .iter()
            .find(|t| t["nodeid"].as_str().unwrap().ends_with(n))
            .unwrap()
    };
    let paths = |t: &serde_json::Value, k: &str| -> Vec<String> {
        t[k].as_array()
            .unwrap()
            .iter()
            .map(|a| a["path"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(paths(by_name("test_open"), "reads").contains(&"tests/fixtures/cfg/a.json".to_string()));
    assert!(
        paths(by_name("test_pathlib"), "reads").contains(&"tests/fixtures/cfg/b.json".to_string())
    );
    assert_eq!(
        paths(by_name("test_sqlite"), "sqlite"),
        ["tests/fixtures/db/app.sqlite"]
    );
    assert_eq!(by_name("test_open")["reads"][0]["group"], "cfg");
    let outside = by_name("test_outside")["outside"].as_array().unwrap();
    assert!(
        outside.iter().any(|o| o["path"]
            .as_str()
            .unwrap()
            .starts_with("/tmp/fixgate-outside-")
            && o["op"] == "write"),
        "{outside:?}"
    );
}

#[test]
fn a_test_that_exits_the_interpreter_is_crashed_and_the_rest_still_runs() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_crash.py",
        "import os\n\ndef test_1():\n    pass\n\ndef test_2_exits():\n    os._exit(3)\n\ndef test_3():\n    pass\n\ndef test_4():\n    assert False\n",
    );
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    assert_outcomes(
        &v,
        &[
            ("tests/test_crash.py::test_1", "passed"),
            ("tests/test_crash.py::test_2_exits", "crashed"),
            ("tests/test_crash.py::test_3", "passed"),
            ("tests/test_crash.py::test_4", "failed"),
        ],
    );
    assert_eq!(v["result"]["processes"], 2);
}

#[test]
fn a_test_that_hangs_past_the_timeout_is_killed_and_the_run_finishes() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_hang.py",
        "import time, subprocess, sys\n\ndef test_before():\n    pass\n\n\
         def test_hangs():\n    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n    time.sleep(600)\n\n\
         def test_after():\n    pass\n",
    );
    repo.commit("base");
    // The timeout bounds a process outside tests too (its start, its collection): 5 s, not 2,
    // so that a loaded machine's start is not what times out.
    let run = repo.fixgate_py(&["run", "--test-timeout", "5", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_outcomes(
        &run.json(),
        &[
            ("tests/test_hang.py::test_before", "passed"),
            ("tests/test_hang.py::test_hangs", "timeout"),
            ("tests/test_hang.py::test_after", "passed"),
        ],
    );
}

#[test]
fn an_interpreter_without_pytest_is_exit_2_with_the_install_hint() {
    let repo = cart_repo();
    // In the repository (which the condition's user is given), from an interpreter that user
    // can run.
    let venv = repo.path().join(".venv-without-pytest");
    let ok = std::process::Command::new(common::containment::Condition::current().real_python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(ok.success());
    let py = venv.join("bin/python");
    let run = repo.fixgate(&["run", "--python", py.to_str().unwrap()]);
    assert_eq!(run.code, exit::ERROR, "{run:?}");
    assert!(run.stderr.contains("-m pip install pytest"), "{run:?}");
    assert!(run.stderr.contains(py.to_str().unwrap()), "{run:?}");
}

#[test]
fn a_syntax_error_in_a_test_file_is_a_clear_error_with_pytests_message() {
    let repo = TestRepo::new();
    repo.write("tests/test_ok.py", "def test_ok():\n    pass\n")
        .write("tests/test_broken.py", "def test_broken(:\n    pass\n");
    repo.commit("base");
    let run = repo.fixgate_py(&["run"]);
    assert_eq!(run.code, exit::ERROR, "{run:?}");
    assert!(run.stderr.contains("tests/test_broken.py"), "{run:?}");
    assert!(
        run.stderr.contains("SyntaxError") || run.stderr.contains("invalid syntax"),
        "{run:?}"
    );
}

#[test]
fn an_order_file_runs_exactly_that_order_and_rejects_unknown_ids() {
    let repo = cart_repo();
    let order = repo
        .path()
        .join("..")
        .join(format!("order-{}.txt", std::process::id()));
    std::fs::write(
        &order,
        "tests/test_cart.py::test_add_item\ntests/test_cart.py::test_empty_cart_totals_zero\n",
    )
    .unwrap();
    let run = repo.fixgate_py(&[
        "run",
        "--order",
        order.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_outcomes(
        &run.json(),
        &[
            ("tests/test_cart.py::test_add_item", "passed"),
            ("tests/test_cart.py::test_empty_cart_totals_zero", "failed"),
        ],
    );
    std::fs::write(&order, "tests/test_cart.py::test_nope\n").unwrap();
    let bad = repo.fixgate_py(&["run", "--order", order.to_str().unwrap()]);
    std::fs::remove_file(&order).unwrap();
    assert_eq!(bad.code, exit::ERROR);
    assert!(
        bad.stderr.contains("line 1") && bad.stderr.contains("test_nope"),
        "{bad:?}"
    );
}

#[test]
fn runs_of_a_revision_use_its_code_not_the_working_tree() {
    let repo = cart_repo();
    repo.write(
        "tests/test_cart.py",
        "def test_only_in_worktree():\n    assert False\n",
    );
    let head = repo
        .fixgate_py(&["run", "--rev", "HEAD", "--format", "json"])
        .json();
    assert_eq!(outcomes(&head).len(), 8);
    let wt = repo.fixgate_py(&["run", "--format", "json"]).json();
    assert!(outcomes(&wt)
        .iter()
        .any(|(id, o)| id.ends_with("test_only_in_worktree") && o == "failed"));
}

#[test]
fn the_environment_is_scrubbed_and_home_is_inside_the_sandbox() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_env.py",
        "import os, tempfile\n\n\
         def test_env():\n    assert 'SECRET_TOKEN' not in os.environ\n    assert os.environ['PYTHONHASHSEED'] == '0'\n    assert os.environ['TZ'] == 'UTC'\n    assert os.path.realpath(os.environ['HOME']).startswith(os.path.realpath(os.path.dirname(os.getcwd())))\n    assert os.path.realpath(tempfile.gettempdir()).startswith(os.path.realpath(os.path.dirname(os.getcwd())))\n\n\
         def test_pass_env():\n    assert os.environ.get('FIXGATE_PASSED') == 'yes'\n",
    );
    repo.commit("base");
    let py = common::python();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fixgate"))
        .args([
            "run",
            "--format",
            "json",
            "--pass-env",
            "FIXGATE_PASSED",
            "--python",
        ])
        .arg(&py)
        .arg("--cache-dir")
        .arg(repo.cache.path())
        .current_dir(repo.path())
        .env("SECRET_TOKEN", "hunter2")
        .env("FIXGATE_PASSED", "yes")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(outcomes(&v).iter().all(|(_, o)| o == "passed"), "{v}");
}

#[test]
fn runs_get_loopback_but_no_other_network_where_namespaces_are_permitted() {
    // Creating a network namespace needs privilege; elsewhere runs keep the host network.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    // What it checks is the namespaces tier's, whatever the suite's condition (under Landlock
    // runs get no TCP at all: tests/contain.rs).
    common::containment::Condition::Namespaces.run(loopback_only);
}

fn loopback_only() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_net.py",
        "import os, socket\n\n\
         def test_loopback_server():\n    s = socket.socket()\n    s.bind(('127.0.0.1', 0))\n    s.listen(1)\n    c = socket.create_connection(s.getsockname(), timeout=2)\n    a, _ = s.accept()\n    c.sendall(b'x')\n    assert a.recv(1) == b'x'\n\n\
         def test_only_loopback():\n    assert [n for _, n in socket.if_nameindex()] == ['lo']\n",
    );
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--format", "json"]);
    assert!(
        outcomes(&run.json()).iter().all(|(_, o)| o == "passed"),
        "{run:?}"
    );
    let open = repo.fixgate_py(&["run", "--allow-network", "--format", "json"]);
    let o = outcomes(&open.json());
    assert_eq!(o[0].1, "passed");
}

#[test]
fn regression_a_failing_subtest_fails_its_test() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_sub.py",
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_subs(self):\n        for i in range(3):\n            with self.subTest(i=i):\n                self.assertNotEqual(i, 1)\n\n    def test_ok(self):\n        with self.subTest(i=0):\n            self.assertTrue(True)\n",
    );
    repo.commit("base");
    let v = repo.fixgate_py(&["run", "--format", "json"]).json();
    assert_outcomes(
        &v,
        &[
            ("tests/test_sub.py::T::test_ok", "passed"),
            ("tests/test_sub.py::T::test_subs", "failed"),
        ],
    );
}

#[test]
fn regression_messages_and_traces_do_not_name_the_sandbox() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_where.py",
        "import os, tempfile\n\ndef test_names_its_file():\n    with open(os.path.join(tempfile.gettempdir(), 'scratch'), 'w') as f:\n        f.write('x')\n    raise AssertionError('failed in ' + os.path.abspath(__file__))\n",
    );
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--format", "json"]);
    let v = run.json();
    let t = &v["result"]["tests"][0];
    assert_eq!(
        t["message"], "AssertionError: failed in tests/test_where.py",
        "{t}"
    );
    assert_eq!(t["trace"]["outside"].as_array().unwrap().len(), 0, "{t}");
    assert!(!run.stdout.contains("fixgate-sandboxes"), "{}", run.stdout);
}

#[test]
fn a_test_importing_project_code_from_the_original_repository_is_warned_about() {
    let repo = TestRepo::new();
    repo.write("src/shop/__init__.py", "NAME = 'shop'\n").write(
        "tests/test_shop.py",
        "import shop\n\ndef test_name():\n    assert shop.NAME == 'shop'\n",
    );
    repo.commit("base");
    // An editable install: the interpreter finds `shop` in the user's tree, first on sys.path.
    let venv = tempfile::tempdir().unwrap();
    let py = common::private_venv(venv.path());
    let purelib = std::process::Command::new(&py)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let purelib = std::path::PathBuf::from(String::from_utf8(purelib.stdout).unwrap().trim());
    std::fs::write(
        purelib.join("_editable_shop.pth"),
        "import sys; sys.path.insert(0, '",
    )
    .unwrap();
    let mut pth = std::fs::OpenOptions::new()
        .append(true)
        .open(purelib.join("_editable_shop.pth"))
        .unwrap();
    std::io::Write::write_all(
        &mut pth,
        format!("{}')\n", repo.path().join("src").display()).as_bytes(),
    )
    .unwrap();
    // Contained runs cannot see the user's repository at all (tests/contain.rs); the warning
    // is for platforms where runs are not contained.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fixgate"))
        .args(["run", "--python", py.to_str().unwrap(), "--cache-dir"])
        .arg(repo.cache.path())
        .current_dir(repo.path())
        .env("FIXGATE_CONTAINMENT", "none")
        .env_remove("FIXGATE_CACHE_DIR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("from the original repository"), "{stderr}");
    assert!(stderr.contains("shop/__init__.py"), "{stderr}");
}

#[test]
fn regression_a_relative_cache_dir_still_finds_the_plugin_inside_sandboxes() {
    // The plugin lives in the cache directory and pytest runs in a sandbox elsewhere, so a
    // relative --cache-dir once made every run fail to import the plugin.
    let repo = cart_repo();
    let cwd = repo.cache.path();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fixgate"))
        .args(["--repo"])
        .arg(repo.path())
        .args([
            "--cache-dir",
            "relative-cache",
            "run",
            "--format",
            "json",
            "--python",
        ])
        .arg(common::python())
        .current_dir(cwd)
        .env_remove("FIXGATE_CACHE_DIR")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(outcomes(&v).iter().all(|(_, o)| o == "passed"), "{v}");
    assert!(cwd.join("relative-cache").is_dir());
}

#[test]
fn rewritten_test_modules_come_from_the_cache_with_the_same_results() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_rw.py",
        "import os\n\n\
         def test_introspection():\n    x = 2\n    assert x * 2 == 5\n\n\
         def test_code_names_this_sandbox():\n    assert os.path.exists(test_code_names_this_sandbox.__code__.co_filename)\n",
    );
    repo.commit("base");
    let first = repo.fixgate_py(&["run", "--format", "json"]).json();
    let cached = tree_bytes(&repo.cache.path().join("pyc")).len();
    assert!(cached > 0, "the first run stores its rewritten modules");
    let second = repo.fixgate_py(&["run", "--format", "json"]).json();
    for v in [&first, &second] {
        let tests = v["result"]["tests"].as_array().unwrap();
        assert_eq!(tests[0]["outcome"], "failed", "{v}");
        assert!(
            tests[0]["message"]
                .as_str()
                .unwrap()
                .contains("assert (2 * 2) == 5")
                || tests[0]["message"]
                    .as_str()
                    .unwrap()
                    .contains("assert 4 == 5"),
            "assertion rewriting applies: {v}"
        );
        assert_eq!(tests[1]["outcome"], "passed", "{v}");
    }
    assert_eq!(
        first["result"]["tests"][0]["message"],
        second["result"]["tests"][0]["message"]
    );
}

#[test]
fn many_test_modules_are_rewritten_by_interpreters_side_by_side_each_once() {
    // 24 modules with two jobs: three shares of eight would do, two interpreters rewrite them.
    let repo = TestRepo::new();
    for i in 0..24 {
        repo.write(
            &format!("tests/test_m{i:02}.py"),
            format!(
                "def test_ok():\n    assert {i} + 1 == {}\n\n\
                 def test_introspection():\n    x = {i}\n    assert x * 2 == -1\n",
                i + 1
            ),
        );
    }
    repo.commit("base");
    let v = repo
        .fixgate_py(&["run", "--jobs", "2", "--format", "json"])
        .json();
    let bins: Vec<_> = tree_bytes(&repo.cache.path().join("pyc"))
        .into_iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    assert_eq!(bins.len(), 24, "every module rewritten once: {bins:?}");
    let tests = v["result"]["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 48, "{v}");
    for t in tests {
        let id = t["nodeid"].as_str().unwrap();
        if id.ends_with("::test_ok") {
            assert_eq!(t["outcome"], "passed", "{t}");
        } else {
            // pytest's assertion rewriting applies to every module, whichever interpreter
            // rewrote it.
            assert_eq!(t["outcome"], "failed", "{t}");
            let message = t["message"].as_str().unwrap();
            assert!(message.contains("== -1"), "{t}");
        }
    }
}

#[test]
fn node_ids_and_messages_with_quotes_backslashes_and_unicode_come_through_whole() {
    // The plugin writes the test event by hand: every string in it must be escaped as JSON.
    let repo = TestRepo::new();
    repo.write(
        "tests/test_odd.py",
        r#"import pytest

@pytest.mark.parametrize("v", ['q"uote', "back\\slash", "tab\there", "caf\u00e9"], ids=['q"uote', "back\\slash", "tab\there", "caf\u00e9"])
def test_ids(v):
    assert v != 'q"uote', 'no "quotes" \u2603 allowed'

@pytest.mark.skip(reason='sk\u00efp "this"')
def test_skip():
    pass
"#,
    );
    repo.commit("base");
    let v = repo.fixgate_py(&["run", "--format", "json"]).json();
    let tests = v["result"]["tests"].as_array().unwrap();
    let by_id = |id: &str| {
        tests
            .iter()
            .find(|t| t["nodeid"] == id)
            .unwrap_or_else(|| panic!("{id} in {v}"))
    };
    // pytest itself escapes non-ASCII and control characters in parametrize ids
    let quote = by_id("tests/test_odd.py::test_ids[q\"uote]");
    assert_eq!(quote["outcome"], "failed");
    assert!(
        quote["message"]
            .as_str()
            .unwrap()
            .starts_with("AssertionError: no \"quotes\" \u{2603} allowed"),
        "{quote}"
    );
    for id in [
        "tests/test_odd.py::test_ids[back\\\\slash]",
        "tests/test_odd.py::test_ids[tab\\there]",
        "tests/test_odd.py::test_ids[caf\\xe9]",
    ] {
        assert_eq!(by_id(id)["outcome"], "passed", "{id}");
    }
    let skip = by_id("tests/test_odd.py::test_skip");
    assert_eq!(skip["skip_reason"], "sk\u{ef}p \"this\"", "{skip}");
    // the phases are written by hand too
    assert_eq!(skip["phases"]["setup"]["outcome"], "skipped", "{skip}");
    assert_eq!(
        skip["phases"]["setup"]["message"], "sk\u{ef}p \"this\"",
        "{skip}"
    );
    assert_eq!(quote["phases"]["call"]["outcome"], "failed", "{quote}");
    assert!(
        quote["phases"]["call"]["message"]
            .as_str()
            .unwrap()
            .contains("\"quotes\" \u{2603}"),
        "{quote}"
    );
    assert!(quote["phases"]["call"]["duration"].as_f64().unwrap() >= 0.0);
}

#[test]
fn the_plugin_runs_from_its_checked_compiled_copy_not_rewritten_by_pytest() {
    // pytest rewrites (parses and compiles) every module named with -p, on every run when
    // bytecode is off: the module named is a loader, which keeps the plugin compiled beside it.
    // The plugin's modules are the `.py` files of its folder (its tests are a folder below).
    let mut modules: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/pytest/plugin"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter_map(|n| n.strip_suffix(".py").map(str::to_owned))
            .collect();
    modules.sort();
    assert!(modules.len() >= 13, "{modules:?}");
    let repo = TestRepo::new();
    repo.write(
        "tests/test_loader.py",
        format!(
            "import sys\n\n\
             def test_plugin_module_not_loaded_by_pytests_rewrite():\n    \
                 for name in {modules:?}:\n        \
                     mod = sys.modules['fixgate_plugin_' + name]\n        \
                     assert mod.__file__.endswith('fixgate_plugin_%s.py' % name)\n        \
                     assert type(getattr(mod, '__loader__', None)).__name__ != 'AssertionRewritingHook'\n"
        ),
    );
    repo.commit("base");
    let passes = |what: &str| {
        let v = repo.fixgate_py(&["run", "--format", "json"]).json();
        assert_eq!(v["result"]["tests"][0]["outcome"], "passed", "{what}: {v}");
    };
    passes("first run");
    let compiled = || -> Vec<_> {
        tree_bytes(&repo.cache.path().join("plugin"))
            .into_iter()
            .filter(|(p, _)| p.to_string_lossy().ends_with(".fixgate"))
            .collect()
    };
    let first = compiled();
    assert_eq!(
        first.len(),
        modules.len(),
        "each module compiled once, beside it"
    );
    passes("second run");
    assert_eq!(compiled(), first, "read, not written again");
    // a damaged copy is compiled again, never run (the hooks module: the one whose code
    // differs most visibly if a damaged copy ran)
    let (path, mut bytes) = first
        .iter()
        .find(|(p, _)| p.to_string_lossy().contains("fixgate_plugin_hooks."))
        .cloned()
        .expect("the hooks module's copy");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    passes("damaged copy");
    assert_eq!(compiled(), first, "the damaged copy is replaced");
    std::fs::write(&path, &bytes[..40]).unwrap();
    passes("truncated copy");
    assert_eq!(compiled(), first);
}

#[test]
fn a_rewrite_warning_is_seen_on_every_run_not_only_the_first() {
    // pytest warns while rewriting `assert (x, "msg")`; under filterwarnings=error that fails
    // collection. A cached rewrite must not make the second run quietly pass.
    let repo = TestRepo::new();
    repo.write(
        "pyproject.toml",
        "[tool.pytest.ini_options]\nfilterwarnings = [\"error\"]\n",
    )
    .write(
        "tests/test_tuple.py",
        "def test_always_true():\n    assert (1 == 2, 'never fails')\n",
    );
    repo.commit("base");
    let first = repo.fixgate_py(&["run", "--format", "json"]);
    let second = repo.fixgate_py(&["run", "--format", "json"]);
    assert_eq!(first.code, second.code, "{first:?}\n{second:?}");
    assert_eq!(first.code, exit::ERROR, "{first:?}");
    assert!(
        second.stderr.contains("assertion is always true"),
        "{second:?}"
    );
}

#[test]
fn a_crash_in_a_shuffled_order_is_pinned_on_the_test_that_crashed() {
    // After the first test, the plugin names the running test only when it is not the next one
    // in the order fixgate gave it; the crash must still land on the right test.
    let repo = TestRepo::new();
    let mut body = String::from("import os\n\ndef test_exits():\n    os._exit(7)\n");
    for i in 0..8 {
        body.push_str(&format!("\ndef test_ok_{i}():\n    pass\n"));
    }
    repo.write("tests/test_mixed.py", body);
    repo.commit("base");
    for seed in ["3", "11"] {
        let run = repo.fixgate_py(&["run", "--seed", seed, "--format", "json"]);
        assert_eq!(run.code, 0, "{run:?}");
        let o = outcomes(&run.json());
        assert_eq!(o.len(), 9, "{o:?}");
        for (id, outcome) in &o {
            let want = if id.ends_with("test_exits") {
                "crashed"
            } else {
                "passed"
            };
            assert_eq!(outcome, want, "seed {seed}: {o:?}");
        }
    }
}

#[test]
fn regression_a_session_stopped_between_tests_crashes_no_test() {
    // A conftest or plugin may end the session cleanly between two tests; the test after the
    // last result never started, so it must run in a new process, not be recorded as crashed.
    let repo = TestRepo::new();
    repo.write(
        "tests/test_stop.py",
        "def test_a(request):\n    request.session.shouldstop = 'enough'\n\n\
         def test_b():\n    pass\n\n\
         def test_c():\n    pass\n",
    );
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    assert_outcomes(
        &v,
        &[
            ("tests/test_stop.py::test_a", "passed"),
            ("tests/test_stop.py::test_b", "passed"),
            ("tests/test_stop.py::test_c", "passed"),
        ],
    );
    assert_eq!(v["result"]["processes"], 2, "{v}");
}

/// Issue 20: a conftest cannot rewrite what a test did. Each phase's outcome is recorded from
/// the call's own exception before any other `pytest_runtest_makereport` implementation sees the
/// report, and from the test's own `runtest` before a `pytest_runtest_call` wrapper can catch
/// it; the test's result is what it raised, with what pytest's reports claimed beside it.
#[test]
fn a_conftest_hook_that_turns_failures_into_passes_is_recorded_as_the_failure_it_hid() {
    let v = file_order_run(
        "import pytest\n\n\
         @pytest.hookimpl(hookwrapper=True)\n\
         def pytest_runtest_makereport(item, call):\n    \
             outcome = yield\n    \
             rep = outcome.get_result()\n    \
             if rep.failed and 'flip' in item.name:\n        \
                 rep.outcome = 'passed'\n        \
                 rep.longrepr = None\n\n\
         @pytest.hookimpl(hookwrapper=True)\n\
         def pytest_runtest_call(item):\n    \
             outcome = yield\n    \
             if 'swallow' in item.name:\n        \
                 outcome.force_result(None)\n\n\
         @pytest.hookimpl(hookwrapper=True)\n\
         def pytest_runtest_setup(item):\n    \
             outcome = yield\n    \
             if 'swallowed_setup' in item.name:\n        \
                 outcome.force_result(None)\n",
        "tests/test_hidden.py",
        "import unittest\nimport pytest\n\n\
         def test_flip():\n    assert 1 == 2\n\n\
         def test_swallow():\n    assert 1 == 3\n\n\
         @pytest.fixture\ndef broken():\n    raise RuntimeError('setup boom')\n\n\
         def test_swallowed_setup(broken):\n    pass\n\n\
         def test_honest():\n    pass\n\n\
         @pytest.mark.xfail(reason='known')\ndef test_expected():\n    assert 1 == 4\n\n\
         class TestUnit(unittest.TestCase):\n    \
             def test_flip_unit(self):\n        self.assertEqual(1, 2)\n",
    );
    let test = |name: &str| test_ending(&v, name);
    for (name, outcome, message) in [
        ("::test_flip", "failed", "assert 1 == 2"),
        ("::test_swallow", "failed", "assert 1 == 3"),
        ("::test_swallowed_setup", "error", "setup boom"),
        ("::TestUnit::test_flip_unit", "failed", "1 != 2"),
    ] {
        let t = test(name);
        assert_eq!(t["outcome"], outcome, "{t}");
        assert_eq!(t["reported"], "passed", "{t}");
        assert!(t["message"].as_str().unwrap().contains(message), "{t}");
    }
    // What no hook touched reads as pytest reports it: pytest's own xfail is no alteration.
    assert_eq!(test("::test_honest")["outcome"], "passed");
    assert!(test("::test_honest")["reported"].is_null());
    assert_eq!(test("::test_expected")["outcome"], "xfailed");
    assert!(test("::test_expected")["reported"].is_null());
}

/// A failed test's message is pytest's crash line whatever the suite's traceback style, for
/// the failures whose tracebacks pytest filters (fixgate makes the report in the line style and
/// keeps the last entry instead of walking all of them): a helper that hides its frame, a
/// chained exception, a recursion a thousand frames deep, a teardown's error, and many failures
/// in one run (pytest's summary of them is made in the line style too). In each style the
/// messages are those of a run where a conftest's `pytest_runtest_logreport` keeps fixgate from
/// touching the report (pytest's own filter and style then).
#[test]
fn a_failures_message_is_pytests_crash_line_in_any_traceback_style() {
    let tests = "import pytest\n\n\
         def helper(x):\n    __tracebackhide__ = True\n    assert x == 2\n\n\
         def test_hidden_helper():\n    helper(1)\n\n\
         def test_chained():\n    \
             try:\n        raise ValueError('inner')\n    \
             except ValueError as e:\n        raise RuntimeError('outer') from e\n\n\
         def down(n):\n    return down(n + 1)\n\n\
         def test_recursion():\n    down(0)\n\n\
         @pytest.fixture\ndef torn():\n    yield\n    raise OSError('teardown boom')\n\n\
         def test_teardown(torn):\n    pass\n\n\
         @pytest.mark.parametrize('i', range(300))\n\
         def test_many(i):\n    assert i == -1\n";
    let messages = |v: &serde_json::Value| -> Vec<(String, String, String)> {
        v["result"]["tests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let text = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                (text("nodeid"), text("outcome"), text("message"))
            })
            .collect()
    };
    for style in ["long", "short", "native", "auto"] {
        let conftest =
            format!("def pytest_configure(config):\n    config.option.tbstyle = {style:?}\n");
        let v = file_order_run(&conftest, "tests/test_styles.py", tests);
        let untouched = file_order_run(
            &format!("{conftest}\ndef pytest_runtest_logreport(report):\n    pass\n"),
            "tests/test_styles.py",
            tests,
        );
        assert_eq!(messages(&v), messages(&untouched), "--tb={style}");
        let test = |name: &str| test_ending(&v, name);
        for (name, outcome, message) in [
            ("::test_hidden_helper", "failed", "assert 1 == 2"),
            ("::test_chained", "failed", "RuntimeError: outer"),
            (
                "::test_recursion",
                "failed",
                "RecursionError: maximum recursion depth exceeded",
            ),
            ("::test_teardown", "error", "OSError: teardown boom"),
            ("::test_many[0]", "failed", "assert 0 == -1"),
            ("::test_many[299]", "failed", "assert 299 == -1"),
        ] {
            let t = test(name);
            assert_eq!(t["outcome"], outcome, "--tb={style}: {t}");
            let got = t["message"].as_str().unwrap();
            assert!(
                got.starts_with(message),
                "--tb={style}: {name}: {got:?}, want {message:?}"
            );
        }
        let all = messages(&v);
        assert_eq!(all.len(), 304, "{v}");
        assert_eq!(all.iter().filter(|t| t.1 == "failed").count(), 303, "{v}");
    }
}

/// The test of a run's report whose node id ends with `name`.
fn test_ending<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["result"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("no {name}: {v}"))
}

/// `fixgate run`'s report of a repository holding `conftest` as `tests/conftest.py` and one test
/// file, in file order.
fn file_order_run(conftest: &str, file: &str, tests: &str) -> serde_json::Value {
    let repo = TestRepo::new();
    repo.write("tests/conftest.py", conftest).write(file, tests);
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    run.json()
}

/// Issue 20: a session that ends before running the tests it was given (a hook that runs
/// nothing, `pytest.exit` between tests, `sys.exit` in a test) is never a pass.
#[test]
fn a_session_that_stops_before_its_tests_leaves_them_errors_never_passes() {
    let v = file_order_run(
        "import pytest\n\n\
         def pytest_runtestloop(session):\n    \
             return True  # runs nothing, reports nothing\n",
        "tests/test_stop.py",
        "def test_a():\n    assert False\n\ndef test_b():\n    pass\n",
    );
    assert_outcomes(
        &v,
        &[
            ("tests/test_stop.py::test_a", "error"),
            ("tests/test_stop.py::test_b", "error"),
        ],
    );
    let message = v["result"]["tests"][0]["message"].as_str().unwrap();
    assert!(message.starts_with("not run: "), "{message}");

    // pytest.exit(0) as the first test finishes, sys.exit in a test, os._exit in a session
    // fixture's teardown: none of them a pass.
    let v = file_order_run(
        "import os, pytest\n\n\
         def pytest_runtest_logfinish(nodeid, location):\n    \
             if nodeid.endswith('test_first'):\n        \
                 pytest.exit('enough', returncode=0)\n\n\
         @pytest.fixture(scope='session')\ndef ends_hard():\n    yield\n    os._exit(0)\n",
        "tests/test_exits.py",
        "import sys\n\n\
         def test_first():\n    pass\n\n\
         def test_exits():\n    sys.exit(0)\n\n\
         def test_last(ends_hard):\n    pass\n",
    );
    assert_outcomes(
        &v,
        &[
            // interrupted inside its protocol (logfinish): no result of its own
            ("tests/test_exits.py::test_first", "crashed"),
            ("tests/test_exits.py::test_exits", "failed"),
            ("tests/test_exits.py::test_last", "crashed"),
        ],
    );
}

/// The plugin's Python has pytest tests of its own (`src/pytest/plugin/tests/`: the outcome
/// table, the state fingerprint, the process settings, the order file, the phases): run by the
/// interpreter the tests use, with pytest's output when they fail.
#[test]
fn the_plugins_own_python_tests_pass() {
    let tests = concat!(env!("CARGO_MANIFEST_DIR"), "/src/pytest/plugin/tests");
    let out = std::process::Command::new(common::python())
        // No bytecode beside the sources, whoever runs the suite.
        .args(["-B", "-m", "pytest", "-q", "-p", "no:cacheprovider", tests])
        .env_remove("PYTEST_ADDOPTS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pytest {tests} ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
