//! Issue 10: the warm interpreter. Runs forked from a zygote give the same results as fresh
//! pytest processes, and the fork server steps aside (saying why) where it cannot promise that.

mod common;

use std::path::Path;

use common::{Run, TestRepo};
use serde_json::Value;

/// Runs fixgate with the fork server on or off (each mode with its own cache, so both run).
fn fixgate(repo: &TestRepo, cache: &Path, fork: bool, args: &[&str]) -> Run {
    repo.fixgate_with(
        cache,
        &[("FIXGATE_FORK", if fork { "1" } else { "0" })],
        args,
    )
}

/// A JSON value without its timing fields (test and phase clocks, durations, graph node
/// times), which differ between any two runs.
fn untimed(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for key in ["start", "end", "duration", "duration_seconds", "seconds"] {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

/// Runs `args` (a `--format json` command) forked and fresh; asserts the two `field`s are
/// identical but for timing, and returns both reports.
fn same_both_ways(repo: &TestRepo, args: &[&str], field: &str) -> (Value, Value) {
    let fresh_cache = tempfile::tempdir().unwrap();
    let forked = fixgate(repo, repo.cache.path(), true, args);
    let fresh = fixgate(repo, fresh_cache.path(), false, args);
    assert_eq!(forked.code, fresh.code, "{forked:?}\n{fresh:?}");
    let (a, b) = (forked.json(), fresh.json());
    let (fa, fb) = (untimed(a[field].clone()), untimed(b[field].clone()));
    if fa != fb {
        panic!(
            "{args:?}: forked and fresh differ\n--- forked\n{}\n--- fresh\n{}",
            serde_json::to_string_pretty(&fa).unwrap(),
            serde_json::to_string_pretty(&fb).unwrap()
        );
    }
    assert_eq!(b["forkserver"]["forks"], 0, "{b}");
    assert_eq!(
        b["forkserver"]["fallbacks"],
        serde_json::json!(["FIXGATE_FORK=0"])
    );
    (a, b)
}

fn outcome<'v>(v: &'v Value, name: &str) -> &'v str {
    v["result"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("{name} in {v}"))["outcome"]
        .as_str()
        .unwrap()
}

/// A suite with something of every kind the runner handles.
fn mixed_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("fixtures.manifest", "db: tests/fixtures/db/*\n")
        .write("tests/fixtures/db/rows.txt", "a\n")
        .write("tests/data.txt", "data\n")
        .write(
            "tests/conftest.py",
            "import os, pytest\n\n\
             # an import-time write: a fresh process makes it once, so must the zygote\n\
             with open(os.path.join(os.path.dirname(__file__), 'imported.txt'), 'a') as f:\n    \
                 f.write('x\\n')\n\n\
             SETUPS = {'session': 0, 'module': 0}\n\n\
             @pytest.fixture(scope='session')\n\
             def session_thing():\n    SETUPS['session'] += 1\n    yield SETUPS['session']\n\n\
             @pytest.fixture(scope='module')\n\
             def module_thing():\n    SETUPS['module'] += 1\n    yield SETUPS['module']\n",
        )
        .write(
            "tests/test_kinds.py",
            "import os, unittest, pytest\n\n\
             def test_imported_once():\n    \
                 assert open('tests/imported.txt').read() == 'x\\n'\n\n\
             def test_reads_data():\n    assert open('tests/data.txt').read() == 'data\\n'\n\n\
             def test_writes_without_lease():\n    \
                 open('tests/fixtures/db/rows.txt', 'a').write('b\\n')\n\n\
             @pytest.mark.writes('db')\n\
             def test_writes_with_lease():\n    \
                 open('tests/fixtures/db/rows.txt', 'a').write('c\\n')\n\n\
             def test_leaves_a_file():\n    \
                 open('tests/left_behind.txt', 'x').write('here')\n\n\
             @pytest.mark.xfail(reason='known')\n\
             def test_xfail():\n    assert False\n\n\
             def test_session_fixture(session_thing):\n    assert session_thing == 1\n\n\
             def test_module_fixture(module_thing):\n    assert module_thing >= 1\n\n\
             class TestSub(unittest.TestCase):\n    \
                 def test_subtests(self):\n        \
                     for i in range(3):\n            \
                         with self.subTest(i=i):\n                \
                             self.assertNotEqual(i, 1)\n",
        )
        .write(
            "tests/test_more.py",
            "import os\n\n\
             def test_session_fixture_again(session_thing):\n    assert session_thing == 1\n\n\
             def test_sees_no_left_file():\n    assert not os.path.exists('tests/left_behind.txt')\n\n\
             def test_exits():\n    os._exit(7)\n\n\
             def test_segfaults():\n    import ctypes\n    ctypes.string_at(0)\n\n\
             def test_after_the_crashes():\n    pass\n",
        );
    repo.commit("base");
    repo
}

#[test]
fn forked_runs_equal_fresh_ones_with_crashes_leases_traces_subtests_xfail_and_scoped_fixtures() {
    let repo = mixed_repo();
    for seed in ["0", "3", "8"] {
        let (forked, _) = same_both_ways(
            &repo,
            &["run", "--seed", seed, "--format", "json"],
            "result",
        );
        let fs = &forked["forkserver"];
        assert_eq!(fs["mode"], "fork", "seed {seed}: {fs}");
        assert_eq!(fs["fallbacks"], serde_json::json!([]), "seed {seed}: {fs}");
        // the run forks once; after each crash it continues in a fresh process, which imports
        // the conftest again (test_imported_once sees its writes, as in a fresh run)
        assert_eq!(fs["forks"], 1, "seed {seed}: {fs}");
        assert_eq!(fs["zygotes"], 1, "seed {seed}: {fs}");
        assert_eq!(forked["result"]["processes"], 3, "seed {seed}");
        for (name, want) in [
            ("test_exits", "crashed"),
            ("test_segfaults", "crashed"),
            ("test_after_the_crashes", "passed"),
            ("test_xfail", "xfailed"),
            ("test_subtests", "failed"),
            ("test_session_fixture", "passed"),
        ] {
            assert_eq!(outcome(&forked, name), want, "seed {seed}: {name}");
        }
        let tests = forked["result"]["tests"].as_array().unwrap();
        let by = |n: &str| {
            tests
                .iter()
                .find(|t| t["nodeid"].as_str().unwrap().ends_with(n))
        };
        let violation = &by("test_writes_without_lease").unwrap()["violations"];
        assert_eq!(violation[0]["group"], "db", "seed {seed}: {violation}");
        assert_eq!(
            by("test_writes_with_lease").unwrap()["violations"],
            serde_json::json!([])
        );
        let reads = &by("test_reads_data").unwrap()["trace"]["read"];
        assert_eq!(reads, &serde_json::json!(["tests/data.txt"]), "seed {seed}");
    }
}

#[test]
fn the_heap_collection_made_is_frozen_in_every_run_unless_the_repository_watches_the_collector() {
    // Every run freezes what collection made (gc.freeze), forked or fresh: a test that looks
    // for it (without naming the gc module) sees it frozen both ways.
    let frozen = TestRepo::new();
    frozen.write(
        "tests/test_frozen.py",
        "import sys\n\n\
         def test_the_collected_heap_is_frozen():\n    \
             collector = sys.modules['g' + 'c']\n    \
             assert collector.get_freeze_count() > 0\n",
    );
    frozen.commit("base");
    let (forked, _) = same_both_ways(
        &frozen,
        &["run", "--seed", "0", "--format", "json"],
        "result",
    );
    assert_eq!(forked["forkserver"]["forks"], 1, "{}", forked["forkserver"]);
    assert_eq!(
        outcome(&forked, "test_the_collected_heap_is_frozen"),
        "passed"
    );

    // A repository whose code names the gc module gets plain pytest's collector: a cycle made
    // at import and dropped by a test is collected, as without fixgate.
    let watching = TestRepo::new();
    watching.write(
        "tests/test_collector.py",
        "import gc, weakref\n\n\
         class Node:\n    pass\n\n\
         HOLDER = {}\n\n\
         def _cycle():\n    \
             node = Node()\n    node.me = node\n    HOLDER['node'] = node\n    \
             return weakref.ref(node)\n\n\
         REF = _cycle()\n\n\
         def test_a_dropped_cycle_is_collected():\n    \
             del HOLDER['node']\n    gc.collect()\n    assert REF() is None\n\n\
         def test_nothing_is_frozen():\n    assert gc.get_freeze_count() == 0\n",
    );
    watching.commit("base");
    let (forked, _) = same_both_ways(
        &watching,
        &["run", "--seed", "0", "--format", "json"],
        "result",
    );
    assert_eq!(forked["forkserver"]["forks"], 1, "{}", forked["forkserver"]);
    for name in [
        "test_a_dropped_cycle_is_collected",
        "test_nothing_is_frozen",
    ] {
        assert_eq!(outcome(&forked, name), "passed", "{name}");
    }
}

#[test]
fn the_freeze_reads_no_module_attribute_and_no_file_that_is_not_a_regular_one() {
    // The freeze looks through sys.modules for repository files that name gc. A hostile test
    // module puts there a module whose attribute reads run its code (and record that they
    // ran), and one whose __file__ is a FIFO of the tree that nobody writes: opened to be read
    // as files are, it would block the run before its first test. Neither may be touched.
    let repo = TestRepo::new();
    repo.write(
        "tests/test_hostile.py",
        "import os, sys, types\n\n\
         TOUCHED = []\n\n\
         class Lazy(types.ModuleType):\n    \
             def __getattribute__(self, name):\n        \
                 TOUCHED.append(name)\n        \
                 return types.ModuleType.__getattribute__(self, name)\n\n    \
             def __getattr__(self, name):\n        \
                 TOUCHED.append(name)\n        \
                 raise AttributeError(name)\n\n\
         sys.modules['lazy_mod'] = Lazy('lazy_mod')\n\n\
         FIFO = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fifo_mod.py')\n\
         if not os.path.exists(FIFO):\n    os.mkfifo(FIFO)\n\
         PIPE = types.ModuleType('fifo_mod')\n\
         PIPE.__file__ = FIFO\n\
         sys.modules['fifo_mod'] = PIPE\n\n\
         def test_no_attribute_of_the_lazy_module_was_read():\n    \
             assert TOUCHED == []\n\n\
         def test_the_fifo_was_not_read_so_nothing_was_frozen():\n    \
             collector = sys.modules['g' + 'c']\n    \
             assert collector.get_freeze_count() == 0\n",
    );
    repo.commit("base");
    let (forked, _) = same_both_ways(
        &repo,
        &[
            "run",
            "--seed",
            "0",
            "--test-timeout",
            "20",
            "--format",
            "json",
        ],
        "result",
    );
    for name in [
        "test_no_attribute_of_the_lazy_module_was_read",
        "test_the_fifo_was_not_read_so_nothing_was_frozen",
    ] {
        assert_eq!(outcome(&forked, name), "passed", "{name}: {forked}");
    }
}

#[test]
fn a_test_past_the_timeout_is_killed_in_a_forked_run_as_in_a_fresh_one() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_hang.py",
        "import time, subprocess, sys\n\ndef test_before():\n    pass\n\n\
         def test_hangs():\n    \
             subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n    \
             time.sleep(600)\n\n\
         def test_after():\n    pass\n",
    );
    repo.commit("base");
    let (forked, _) = same_both_ways(
        &repo,
        &[
            "run",
            "--seed",
            "0",
            "--test-timeout",
            "2",
            "--format",
            "json",
        ],
        "result",
    );
    assert_eq!(outcome(&forked, "test_hangs"), "timeout");
    assert_eq!(outcome(&forked, "test_after"), "passed");
    // collection read nothing the killed test changed: the rest runs in a second fork
    assert_eq!(forked["forkserver"]["forks"], 2, "{}", forked["forkserver"]);
}

#[test]
fn an_audit_gives_the_same_report_forked_or_fresh_and_restores_the_sandbox_between_runs() {
    // Every test here fails when it finds what an earlier run left in the sandbox (a file it
    // creates, a tracked file it rewrites, its home and temporary directory), so an audit of
    // several orders from one zygote passes only if each run starts from the restored bytes.
    let repo = TestRepo::new();
    repo.write("tests/fixtures/cfg.json", "{}\n")
        .write(
            "tests/conftest.py",
            "import os\n\n\
             with open(os.path.join(os.path.dirname(__file__), 'imported.txt'), 'a') as f:\n    \
                 f.write('x\\n')\n",
        )
        .write(
            "tests/test_state.py",
            "import os, tempfile, pytest\n\n\
             def test_import_write_survives_once():\n    \
                 assert open('tests/imported.txt').read() == 'x\\n'\n    \
                 open('tests/imported.txt', 'a').write('more\\n')\n\n\
             def test_new_file():\n    open('tests/new.txt', 'x').write('1')\n\n\
             @pytest.mark.writes('fixtures')\n\
             def test_tracked_file_rewritten():\n    \
                 assert open('tests/fixtures/cfg.json').read() == '{}\\n'\n    \
                 os.remove('tests/fixtures/cfg.json')\n\n\
             def test_home_and_tmp():\n    \
                 home = os.path.join(os.environ['HOME'], 'mark')\n    \
                 open(home, 'x').write('1')\n    \
                 open(os.path.join(tempfile.gettempdir(), 'mark'), 'x').write('1')\n    \
                 os.makedirs('tests/made/deeper')\n",
        );
    let base = repo.commit("base");
    repo.write("tests/test_new.py", "def test_added():\n    pass\n");
    repo.commit("head");
    let args = [
        "audit", "--base", &base, "--head", "HEAD", "--seeds", "3", "--format", "json", "--quiet",
    ];
    let (forked, fresh) = same_both_ways(&repo, &args, "tests");
    for field in ["verdict", "findings", "pairs", "orders", "pytest_processes"] {
        assert_eq!(forked[field], fresh[field], "{field}");
    }
    assert_eq!(forked["verdict"], "pass", "{forked}");
    for t in forked["tests"].as_array().unwrap() {
        assert_eq!(t["bucket"], "stable", "{t}");
    }
    let fs = &forked["forkserver"];
    assert_eq!(fs["mode"], "fork", "{fs}");
    assert!(fs["forks"].as_u64().unwrap() >= 5, "{fs}");
    assert_eq!(fs["fallbacks"], serde_json::json!([]), "{fs}");
}

#[test]
fn a_conftest_that_starts_a_thread_falls_back_to_fresh_processes_and_says_why() {
    let repo = TestRepo::new();
    repo.write(
        "tests/conftest.py",
        "import threading, time\n\n\
         threading.Thread(target=time.sleep, args=(600,), name='poller', daemon=True).start()\n",
    )
    .write(
        "tests/test_t.py",
        "def test_a():\n    pass\n\ndef test_b():\n    pass\n",
    );
    repo.commit("base");
    let (forked, _) = same_both_ways(&repo, &["run", "--seed", "2", "--format", "json"], "result");
    let fs = &forked["forkserver"];
    assert_eq!(fs["mode"], "fresh", "{fs}");
    assert_eq!(fs["forks"], 0, "{fs}");
    let reasons = fs["fallbacks"].as_array().unwrap();
    assert!(
        reasons.iter().any(|r| {
            let r = r.as_str().unwrap();
            r.contains("threads alive after collection")
                && r.contains("'poller' running time.sleep")
        }),
        "{fs}"
    );
}

#[test]
fn fork_false_in_pyproject_runs_every_order_in_a_fresh_interpreter() {
    let repo = TestRepo::new();
    repo.write("pyproject.toml", "[tool.fixgate]\nfork = false\n")
        .write("tests/test_a.py", "def test_a():\n    pass\n");
    repo.commit("base");
    let run = fixgate(
        &repo,
        repo.cache.path(),
        true,
        &["run", "--seed", "1", "--format", "json"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("unknown key"), "{run:?}");
    let fs = &run.json()["forkserver"];
    assert_eq!(fs["forks"], 0, "{fs}");
    assert_eq!(fs["zygotes"], 0, "{fs}");
    assert_eq!(
        fs["fallbacks"],
        serde_json::json!(["[tool.fixgate] fork = false"])
    );
}

#[test]
fn an_order_sensitive_collection_falls_back_to_fresh_processes_and_says_why() {
    // The conftest shuffles the collected items with an unseeded RNG: the zygote's collection
    // differs from the fresh one fixgate made, so forks could not promise the same session.
    let repo = TestRepo::new();
    repo.write(
        "tests/conftest.py",
        "import random\n\n\
         def pytest_collection_modifyitems(items):\n    \
             random.SystemRandom().shuffle(items)\n",
    );
    let mut body = String::new();
    for i in 0..12 {
        body.push_str(&format!("def test_{i}():\n    pass\n\n"));
    }
    repo.write("tests/test_many.py", body);
    repo.commit("base");
    let run = fixgate(
        &repo,
        repo.cache.path(),
        true,
        &["run", "--seed", "4", "--format", "json"],
    );
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    let fs = &v["forkserver"];
    assert_eq!(fs["forks"], 0, "{fs}");
    assert!(
        fs["fallbacks"][0]
            .as_str()
            .unwrap()
            .starts_with("collection is order-sensitive"),
        "{fs}"
    );
    assert_eq!(v["result"]["tests"].as_array().unwrap().len(), 12);
}

#[test]
fn an_audit_with_confirmation_and_bisection_reuses_its_zygotes_and_none_outlives_fixgate() {
    // The head adds a victim that passes only after the state-setter ran: the audit confirms
    // and bisects in later batches of the graph, each on worker threads of its own. The zygotes
    // must outlive those threads (and not fixgate).
    let repo = TestRepo::new();
    repo.write(
        "src/cart.py",
        "CART = {}\n\ndef add(name, price):\n    CART[name] = price\n\n\
         def total():\n    return sum(CART.values())\n",
    )
    .write(
        "tests/test_cart.py",
        "from cart import add, total\n\n\
         def test_add_item():\n    add('apple', 3)\n    assert total() >= 3\n",
    );
    for i in 0..4 {
        repo.write(
            &format!("tests/test_other_{i}.py"),
            format!("def test_other_{i}():\n    pass\n"),
        );
    }
    let base = repo.commit("base");
    repo.write(
        "tests/test_total.py",
        "from cart import total\n\ndef test_total_after_apple():\n    assert total() == 3\n",
    );
    repo.commit("head");
    let args = [
        "audit", "--base", &base, "--head", "HEAD", "--seeds", "4", "--jobs", "2", "--format",
        "json", "--quiet",
    ];
    let (forked, fresh) = same_both_ways(&repo, &args, "tests");
    for field in ["verdict", "findings", "pairs", "orders", "pytest_processes"] {
        assert_eq!(
            untimed(forked[field].clone()),
            untimed(fresh[field].clone()),
            "{field}"
        );
    }
    assert_eq!(forked["verdict"], "reject", "{forked}");
    assert!(!forked["pairs"].as_array().unwrap().is_empty(), "{forked}");
    let fs = &forked["forkserver"];
    assert_eq!(fs["fallbacks"], serde_json::json!([]), "{fs}");
    // Each snapshot is collected once, by the zygote its runs then fork from, and no run
    // starts a process of its own: the base's zygote and at most one per job slot for the
    // head (4 processes before the collections were the zygotes').
    assert_eq!(fs["fresh_processes"], 0, "{fs}");
    assert!(fs["zygotes"].as_u64().unwrap() <= 3, "{fs}");
    assert!(fs["forks"].as_u64().unwrap() > 8, "{fs}");

    // Every process that had this repository's plugin directory on its path is gone (the
    // kernel reaps a killed process group a moment after fixgate exits: a loaded machine's
    // moment).
    let cache = repo.cache.path().display().to_string();
    let survivors = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .filter(|e| {
                std::fs::read(e.path().join("environ"))
                    .is_ok_and(|env| String::from_utf8_lossy(&env).contains(&cache))
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !survivors().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let survivors = survivors();
    assert!(
        survivors.is_empty(),
        "processes outlived fixgate: {survivors:?}"
    );
}

#[test]
fn regression_a_process_a_test_left_running_does_not_write_into_the_next_forked_run() {
    // The test starts a helper that keeps writing a file into the tree. A fresh run's helper
    // only ever sees its own sandbox; a forked run's would write into the sandbox the next run
    // forks into, unless the child's process group dies with it.
    let repo = TestRepo::new();
    repo.write(
        "tests/test_daemon.py",
        "import os, subprocess, sys, time\n\n\
         HELPER = '''\n\
import os, time\n\
for _ in range(500):\n    \
    try:\n        \
        open('tests/late.txt', 'w').write('x')\n    \
    except OSError:\n        \
        break\n    \
    time.sleep(0.02)\n\
'''\n\n\
         def test_starts_a_helper():\n    \
             subprocess.Popen([sys.executable, '-c', HELPER])\n    \
             while not os.path.exists('tests/late.txt'):\n        \
                 time.sleep(0.01)\n",
    )
    .write(
        "tests/test_z_check.py",
        "import os\n\ndef test_no_late_file():\n    assert not os.path.exists('tests/late.txt')\n",
    );
    let base = repo.commit("base");
    repo.write("tests/test_new.py", "def test_added():\n    pass\n");
    repo.commit("head");
    let args = [
        "audit", "--base", &base, "--head", "HEAD", "--seeds", "3", "--format", "json", "--quiet",
    ];
    let (forked, fresh) = same_both_ways(&repo, &args, "tests");
    assert_eq!(forked["verdict"], fresh["verdict"]);
    assert_eq!(
        forked["forkserver"]["mode"], "fork",
        "{}",
        forked["forkserver"]
    );
}

#[test]
fn a_crashed_run_continues_in_a_fork_only_when_a_fresh_collection_would_see_the_same_tree() {
    // The test module reads a file at import; the first test rewrites it, the second kills the
    // interpreter. A fresh process continuing the run imports the module again and sees the
    // new bytes; a fork of the zygote would hold the old ones, so the rest must run fresh.
    let repo = TestRepo::new();
    let module = |rewrite: bool| {
        format!(
            "import os\n\nSETTING = open('tests/setting.txt').read()\n\n\
             def test_1():\n    {}\n\n\
             def test_2_exits():\n    os._exit(3)\n\n\
             def test_3_sees_what_a_fresh_import_reads():\n    \
                 assert SETTING == {:?}\n",
            if rewrite {
                "open('tests/setting.txt', 'w').write('new\\n')"
            } else {
                "pass"
            },
            if rewrite { "new\n" } else { "old\n" },
        )
    };
    repo.write("tests/setting.txt", "old\n")
        .write("tests/test_crash.py", module(true));
    repo.commit("base");
    let (forked, _) = same_both_ways(&repo, &["run", "--seed", "0", "--format", "json"], "result");
    assert_eq!(outcome(&forked, "test_2_exits"), "crashed");
    assert_eq!(
        outcome(&forked, "test_3_sees_what_a_fresh_import_reads"),
        "passed"
    );
    assert_eq!(forked["forkserver"]["forks"], 1, "{}", forked["forkserver"]);

    // Without the rewrite nothing collection read changed: the run goes on in a second fork.
    repo.write("tests/test_crash.py", module(false));
    repo.commit("no rewrite");
    let (forked, _) = same_both_ways(&repo, &["run", "--seed", "0", "--format", "json"], "result");
    assert_eq!(
        outcome(&forked, "test_3_sees_what_a_fresh_import_reads"),
        "passed"
    );
    assert_eq!(forked["forkserver"]["forks"], 2, "{}", forked["forkserver"]);
    assert_eq!(forked["result"]["processes"], 2);

    // A conftest.py pytest imports before the plugin's hook can see it may have read anything:
    // the rest of a crashed run starts fresh.
    repo.write("tests/conftest.py", "X = 1\n");
    repo.commit("a conftest");
    let (forked, _) = same_both_ways(&repo, &["run", "--seed", "0", "--format", "json"], "result");
    assert_eq!(forked["forkserver"]["forks"], 1, "{}", forked["forkserver"]);
}

#[test]
fn an_audit_collects_in_the_interpreter_its_runs_fork_from_and_finds_what_a_fresh_collection_does()
{
    // One collection per snapshot: the warm interpreter's, described item by item as a fresh
    // `--collect-only` run describes it. The head adds skips of every kind fixgate counts (a
    // marker, a unittest skip, a module skipped at collection) and a test a conftest hook
    // deselects; the root conftest is imported before the plugin traces (a partial trace).
    let repo = TestRepo::new();
    repo.write(
        "conftest.py",
        "def pytest_collection_modifyitems(config, items):\n    \
             gone = [i for i in items if i.name == 'test_dropped']\n    \
             items[:] = [i for i in items if i.name != 'test_dropped']\n    \
             config.hook.pytest_deselected(items=gone)\n",
    )
    .write("src/calc.py", "def double(x):\n    return 2 * x\n")
    .write(
        "tests/test_calc.py",
        "import pytest\nfrom calc import double\n\n\
         @pytest.mark.parametrize('x', [1, 2])\n\
         def test_double(x):\n    assert double(x) == 2 * x\n",
    );
    let base = repo.commit("base");
    repo.write(
        "tests/test_new.py",
        "import unittest, pytest\nfrom calc import double\n\n\
         @pytest.mark.skip(reason='later')\n\
         def test_marked():\n    assert double(3) == 5\n\n\
         def test_dropped():\n    assert False\n\n\
         class TestOld(unittest.TestCase):\n    \
             @unittest.skip('flaky')\n    \
             def test_old(self):\n        self.fail()\n",
    )
    .write(
        "tests/test_later.py",
        "import pytest\npytest.skip('not yet', allow_module_level=True)\n\n\
         def test_never():\n    pass\n",
    );
    repo.commit("head");
    let args = [
        "audit", "--base", &base, "--head", "HEAD", "--seeds", "2", "--format", "json", "--quiet",
    ];
    let (forked, fresh) = same_both_ways(&repo, &args, "tests");
    for field in ["verdict", "findings", "budget", "orders"] {
        assert_eq!(
            untimed(forked[field].clone()),
            untimed(fresh[field].clone()),
            "{field}"
        );
    }
    // The three skips count against the budget; the deselected test is not a test at all.
    let reasons = forked["reasons"].to_string();
    assert!(
        reasons.contains("3 new skips")
            && [
                "test_new.py::TestOld::test_old",
                "test_new.py::test_marked",
                "test_later.py"
            ]
            .iter()
            .all(|s| reasons.contains(s)),
        "{reasons}"
    );
    let ids = forked["tests"].to_string();
    assert!(
        !ids.contains("test_dropped") && ids.contains("test_double[2]"),
        "{ids}"
    );
    let fs = &forked["forkserver"];
    assert_eq!(
        fs["fresh_processes"], 0,
        "no process collects on its own: {fs}"
    );
    assert_eq!(fs["fallbacks"], serde_json::json!([]), "{fs}");
    assert!(fresh["forkserver"]["fresh_processes"].as_u64().unwrap() >= 2);
}

#[test]
fn an_audit_whose_collecting_zygote_saw_a_conftest_first_continues_a_crashed_run_fresh() {
    // The audit's collection is the zygote's, which then sends its trace even when a conftest
    // was imported before the plugin could trace it, marked partial. A partial trace must not
    // let the rest of a crashed run fork (the conftest may have read anything): it runs
    // fresh. Without the conftest nothing collection read changed, and the rest forks. One job
    // slot: every run forks from the collecting zygote (no spare).
    let audit = |conftest: bool| {
        let repo = TestRepo::new();
        repo.write("tests/test_ok.py", "def test_ok():\n    pass\n");
        if conftest {
            repo.write("tests/conftest.py", "X = 1\n");
        }
        let base = repo.commit("base");
        repo.write(
            "tests/test_crash.py",
            "import os\n\ndef test_1():\n    pass\n\n\
             def test_2_exits():\n    os._exit(3)\n\ndef test_3():\n    pass\n",
        );
        repo.commit("head");
        let run = repo.fixgate(&[
            "audit", "--base", &base, "--head", "HEAD", "--seeds", "0", "--jobs", "1", "--format",
            "json", "--quiet",
        ]);
        let v = run.json();
        let after_the_crash = v["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["nodeid"] == "tests/test_crash.py::test_3")
            .unwrap_or_else(|| panic!("test_3 in {v}"));
        assert_eq!(after_the_crash["outcomes"]["0"], "passed", "{v}");
        v["forkserver"].clone()
    };
    let plain = audit(false);
    assert_eq!(plain["fresh_processes"], 0, "{plain}");
    let with_conftest = audit(true);
    assert!(
        with_conftest["fresh_processes"].as_u64().unwrap() >= 1,
        "{with_conftest}"
    );
}

#[test]
fn the_base_s_zygotes_start_beside_the_head_s_search_and_its_checks_fork_from_them() {
    // The head makes three tests of the base read what the setter, also the base's, leaves
    // behind: each is checked on the base after the search. The base's runs come from the cache
    // (its audit ran first), so no base zygote is alive when the head's search begins: the
    // audit starts them then (one per job slot, at most two: a check's pair and its run alone
    // go side by side), and the checks fork from them. A new test that is the victim asks
    // nothing of the base: nothing is started for it.
    let repo = TestRepo::new();
    repo.write("src/reg.py", "REGISTRY = {}\n")
        .write("src/calc.py", "def scale(x):\n    return x * 2\n")
        .write(
            "tests/test_setter.py",
            "from reg import REGISTRY\n\ndef test_sets_factor():\n    REGISTRY['factor'] = 3\n",
        );
    let mut calc = String::from("from calc import scale\n");
    for k in 0..3 {
        calc.push_str(&format!(
            "\ndef test_scale_{k}():\n    assert scale({k} + 1) == 2 * ({k} + 1)\n"
        ));
    }
    repo.write("tests/test_calc.py", calc);
    for i in 0..3 {
        repo.write(
            &format!("tests/test_other_{i}.py"),
            format!("def test_other_{i}():\n    pass\n"),
        );
    }
    let base = repo.commit("base");
    repo.write(
        "src/calc.py",
        "from reg import REGISTRY\n\ndef scale(x):\n    return x * REGISTRY.get('factor', 2)\n",
    );
    let head = repo.commit("head: scale reads the registry");
    let audit = |cache: &Path, head: &str, jobs: &str| {
        repo.fixgate_with(
            cache,
            &[],
            &[
                "audit", "--base", &base, "--head", head, "--seeds", "6", "--jobs", jobs,
                "--format", "json", "--quiet",
            ],
        )
        .json()
    };
    for (jobs, zygotes) in [("2", 4), ("1", 2)] {
        let cache = tempfile::tempdir().unwrap();
        audit(cache.path(), &base, jobs);
        let v = audit(cache.path(), &head, jobs);
        assert_eq!(v["verdict"], "reject", "{v}");
        let pairs = v["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 3, "{v}");
        for p in pairs {
            assert_eq!(p["introduced"], true, "{p}");
        }
        let fs = &v["forkserver"];
        assert_eq!(fs["fallbacks"], serde_json::json!([]), "{fs}");
        assert_eq!(fs["fresh_processes"], 0, "{fs}");
        // One per job slot for the head (its collection's and a spare), and the prewarmed
        // base's: the checks started none of their own, and none was evicted to make room.
        assert!(
            fs["zygotes"].as_u64().unwrap() <= zygotes,
            "jobs {jobs}: {fs}"
        );
        let slots: u64 = jobs.parse().unwrap();
        assert_eq!(fs["prewarmed"].as_u64().unwrap(), slots.min(2), "{fs}");
    }

    // A new victim of the setter: the head's own test, which the base cannot check.
    repo.write(
        "src/calc.py",
        "def scale(x):\n    return x * 2\n",
    )
    .write(
        "tests/test_factor.py",
        "from reg import REGISTRY\n\ndef test_default_factor():\n    assert 'factor' not in REGISTRY\n",
    );
    let new_victim = repo.commit("head: a test that fails after the setter");
    let cache = tempfile::tempdir().unwrap();
    audit(cache.path(), &base, "2");
    let v = audit(cache.path(), &new_victim, "2");
    assert_eq!(v["verdict"], "reject", "{v}");
    assert_eq!(v["forkserver"]["prewarmed"], 0, "{}", v["forkserver"]);
}

/// A forked run skips the interpreter's teardown at its exit, but not what a fresh process runs
/// there: the suite's atexit callbacks still run (here one writes outside the sandbox, which
/// only an uncontained run can), and the run's exit status is the session's (a `pytest.exit`
/// with its own status ends the process, and the runner continues after it from that status
/// alike forked and fresh). What is skipped shows in a module global's finalizer, which the
/// interpreter's teardown (clearing every module) runs in the process that ran the tests when
/// it is fresh, and never in a forked one, even after a failed test.
#[test]
fn a_forked_run_runs_the_suites_exit_callbacks_and_ends_with_the_sessions_status() {
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("atexit-ran");
    let ran = outside.path().join("tests-ran");
    let finalized = outside.path().join("finalized");
    let repo = TestRepo::new();
    repo.write(
        "tests/test_a_exit.py",
        format!(
            "import atexit, os\n\n\
             def _mark():\n    \
                 with open({marker:?}, 'a') as f:\n        \
                     f.write('%d\\n' % os.getpid())\n\n\
             class Finalized:\n    \
                 def __del__(self, open=open, getpid=os.getpid):\n        \
                     with open({finalized:?}, 'a') as f:\n            \
                         f.write('%d\\n' % getpid())\n\n\
             KEPT = Finalized()\n\n\
             def test_registers():\n    \
                 atexit.register(_mark)\n    \
                 with open({ran:?}, 'a') as f:\n        \
                     f.write('%d\\n' % os.getpid())\n\n\
             def test_fails():\n    \
                 assert False\n",
            marker = marker.display().to_string(),
            finalized = finalized.display().to_string(),
            ran = ran.display().to_string(),
        ),
    )
    .write(
        "tests/test_b_stop.py",
        "import pytest\n\n\
         def test_stops():\n    \
             pytest.exit('enough', returncode=3)\n\n\
         def test_never():\n    \
             pass\n",
    );
    repo.commit("base");
    let run = |fork: bool| {
        let cache = tempfile::tempdir().unwrap();
        let run = repo.fixgate_with(
            cache.path(),
            &[
                ("FIXGATE_FORK", if fork { "1" } else { "0" }),
                ("FIXGATE_CONTAINMENT", "none"),
            ],
            &["run", "--seed", "0", "--format", "json"],
        );
        let read = |path: &std::path::Path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            std::fs::remove_file(path).ok();
            text
        };
        let written = read(&marker);
        let (ran, finalized) = (read(&ran), read(&finalized));
        assert_eq!(
            ran.lines().count(),
            1,
            "test_registers ran once: {ran:?}\n{run:?}"
        );
        let pid = ran.trim().to_string();
        let finalized_there = finalized.lines().any(|l| l == pid);
        (run, written, finalized_there)
    };
    let (forked, forked_marks, forked_finalized) = run(true);
    let (fresh, fresh_marks, fresh_finalized) = run(false);
    assert!(
        fresh_finalized,
        "a fresh process's teardown runs the module global's finalizer"
    );
    assert!(
        !forked_finalized,
        "a forked run ran the interpreter's teardown at its exit"
    );
    assert_eq!(forked.code, fresh.code, "{forked:?}\n{fresh:?}");
    let (a, b) = (forked.json(), fresh.json());
    assert_eq!(a["forkserver"]["mode"], "fork", "{}", a["forkserver"]);
    assert!(
        a["forkserver"]["forks"].as_u64().unwrap() >= 1,
        "{}",
        a["forkserver"]
    );
    assert_eq!(untimed(a["result"].clone()), untimed(b["result"].clone()));
    assert_eq!(outcome(&a, "test_fails"), "failed");
    assert_eq!(forked_marks.lines().count(), 1, "forked: {forked_marks:?}");
    assert_eq!(fresh_marks.lines().count(), 1, "fresh: {fresh_marks:?}");
}
