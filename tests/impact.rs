//! Impact-scoped audits (issue 21): what the file-order run records per test (the repository's
//! code it ran, the shared state it left changed), the `leaks-state` finding, and audits whose
//! shuffled orders run only what the patch can affect, checked against `--full`.

mod common;

use common::audit::{bucket, findings, judgment, Audit};
use common::TestRepo;
use serde_json::Value;

/// A small package with a registry, a cached function and tests that touch each.
fn recording_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/reg.py",
            "REG = {}\n\n\ndef put(k, v):\n    REG[k] = v\n\n\ndef get(k):\n    return REG.get(k)\n",
        )
        .write("pkg/calc.py", "def add(x):\n    return x + 1\n")
        .write(
            "tests/test_a.py",
            "import os\nfrom pkg import reg, calc\n\n\ndef test_put():\n    reg.put('a', 1)\n\n\n\
             def test_env():\n    os.environ['FIXGATE_T'] = '1'\n\n\n\
             def test_add():\n    assert calc.add(1) == 2\n",
        );
    repo.commit("base");
    repo
}

fn run_test<'a>(v: &'a Value, nodeid: &str) -> &'a Value {
    v["result"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"] == nodeid)
        .unwrap_or_else(|| panic!("{nodeid} is not in the run: {v}"))
}

#[test]
fn the_file_order_run_records_the_code_each_test_ran_and_the_state_it_left_changed() {
    let repo = recording_repo();
    let run = repo.fixgate_py(&["run", "--seed", "0", "--record", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    let put = run_test(&v, "tests/test_a.py::test_put");
    assert_eq!(put["code"]["pkg/reg.py"], serde_json::json!([4]), "{put}");
    assert_eq!(put["code"]["tests/test_a.py"], serde_json::json!([5]));
    assert_eq!(put["state"], serde_json::json!(["global:pkg/reg.py:REG"]));
    let env = run_test(&v, "tests/test_a.py::test_env");
    assert_eq!(env["state"], serde_json::json!(["env:FIXGATE_T"]));
    let add = run_test(&v, "tests/test_a.py::test_add");
    assert_eq!(add["code"]["pkg/calc.py"], serde_json::json!([1]));
    assert!(add["code"].get("pkg/reg.py").is_none(), "{add}");
    assert_eq!(add["state"], serde_json::json!([]));
    // Module bodies ran while collecting: outside any test.
    let session = &v["result"]["session_code"];
    assert_eq!(session["pkg/reg.py"], serde_json::json!([0]), "{session}");
}

/// A package whose code runs from a fixture (setup and teardown), a thread, and a test that
/// profiles itself.
fn phases_repo(conftest_hook: bool) -> TestRepo {
    let repo = TestRepo::new();
    let mut conftest = String::from(
        "import pytest\nfrom pkg import work\n\n\n@pytest.fixture\ndef res():\n    \
         work.open_it()\n    yield 1\n    work.close_it()\n",
    );
    if conftest_hook {
        conftest.push_str("\n\ndef pytest_runtest_makereport(item, call):\n    work.hooked()\n");
    }
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/work.py",
            "def open_it():\n    return 1\n\n\ndef close_it():\n    return 2\n\n\n\
             def job(out):\n    out.append(1)\n\n\ndef hooked():\n    return 3\n",
        )
        .write("conftest.py", &conftest)
        .write(
            "tests/test_p.py",
            "import cProfile\nimport threading\nfrom pkg import work\n\n\n\
             def test_fixture(res):\n    assert res == 1\n\n\n\
             def test_thread():\n    out = []\n    t = threading.Thread(target=work.job, args=(out,))\n    \
             t.start()\n    t.join()\n    assert out == [1]\n\n\n\
             def test_profiles_itself():\n    p = cProfile.Profile()\n    p.enable()\n    \
             work.job([])\n    p.disable()\n\n\n\
             def test_pauses_the_profiler():\n    import sys\n    prev = sys.getprofile()\n    \
             if prev:\n        sys.setprofile(None)\n    work.job([])\n    \
             if prev:\n        sys.setprofile(prev)\n    assert work.hooked() == 3\n\n\n\
             def test_after_the_pause():\n    assert work.open_it() == 1\n",
        );
    repo.commit("base");
    repo
}

#[test]
fn the_recording_sees_fixture_setup_and_teardown_threads_and_a_test_that_profiles_itself() {
    let repo = phases_repo(false);
    let run = repo.fixgate_py(&["run", "--seed", "0", "--record", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    // The fixture's body before and after its yield (open_it on line 1, close_it on line 5).
    let fixture = run_test(&v, "tests/test_p.py::test_fixture");
    assert_eq!(
        fixture["code"]["pkg/work.py"],
        serde_json::json!([1, 5]),
        "{fixture}"
    );
    assert_eq!(
        fixture["code"]["conftest.py"],
        serde_json::json!([5]),
        "{fixture}"
    );
    // The thread the test started ran job (line 9).
    let thread = run_test(&v, "tests/test_p.py::test_thread");
    assert_eq!(
        thread["code"]["pkg/work.py"],
        serde_json::json!([9]),
        "{thread}"
    );
    // A test that turned its own profiler on and off: what ran is not known, which the scope
    // falls back on; the tests after it are recorded again.
    let own = run_test(&v, "tests/test_p.py::test_profiles_itself");
    assert!(own["code"].is_null(), "{own}");
    // A test that pauses the profiler and hands sys.setprofile back what sys.getprofile gave
    // (pytest-benchmark does, around what it times) still passes; on 3.9-3.11, where the
    // recorder is that profiler, what ran during the pause is not known. The next test is
    // recorded again.
    let paused = run_test(&v, "tests/test_p.py::test_pauses_the_profiler");
    assert_eq!(paused["outcome"], "passed", "{paused}");
    let after = run_test(&v, "tests/test_p.py::test_after_the_pause");
    assert_eq!(
        after["code"]["pkg/work.py"],
        serde_json::json!([1]),
        "{after}"
    );
    let version = std::process::Command::new(common::python())
        .args(["-c", "import sys; print(sys.version_info >= (3, 12))"])
        .output()
        .unwrap();
    if String::from_utf8_lossy(&version.stdout).trim() == "False" {
        assert!(paused["code"].is_null(), "{paused}");
    } else {
        assert_eq!(
            paused["code"]["pkg/work.py"],
            serde_json::json!([9, 13]),
            "{paused}"
        );
    }
    // Nothing ran the hook here: no conftest hook runs between the phases.
    for t in [fixture, thread] {
        assert!(
            !t["code"]["pkg/work.py"]
                .as_array()
                .unwrap()
                .contains(&13.into()),
            "{t}"
        );
    }
}

#[test]
fn a_unittest_class_running_its_tests_leaves_no_state_changed() {
    // unittest's class set-up and clean-ups set attributes on the class at its first and last
    // test: bookkeeping, not a leak (more-itertools flagged every TestCase class before).
    let repo = TestRepo::new();
    repo.write(
        "tests/test_u.py",
        "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n\n    \
         def test_b(self):\n        pass\n\n    def test_c(self):\n        pass\n\n\n\
         class W(unittest.TestCase):\n    def test_w(self):\n        W.seen = 1\n",
    );
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--seed", "0", "--record", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    for t in ["test_a", "test_b", "test_c"] {
        let t = run_test(&v, &format!("tests/test_u.py::T::{t}"));
        assert_eq!(t["state"], serde_json::json!([]), "{t}");
    }
    // A test that really sets a class attribute is still seen.
    let w = run_test(&v, "tests/test_u.py::W::test_w");
    assert_eq!(
        w["state"],
        serde_json::json!(["global:tests/test_u.py:W"]),
        "{w}"
    );
}

#[test]
fn a_conftest_hook_between_the_phases_is_recorded_for_every_test() {
    // pytest_runtest_makereport runs after each phase, outside the phases' windows: the whole
    // protocol is recorded, so the code the hook runs (hooked, line 13) counts for each test.
    let repo = phases_repo(true);
    let run = repo.fixgate_py(&["run", "--seed", "0", "--record", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    for id in [
        "tests/test_p.py::test_fixture",
        "tests/test_p.py::test_thread",
    ] {
        let t = run_test(&v, id);
        let lines = t["code"]["pkg/work.py"].as_array().unwrap();
        assert!(lines.contains(&13.into()), "{t}");
    }
    let thread = run_test(&v, "tests/test_p.py::test_thread");
    assert!(
        thread["code"]["pkg/work.py"]
            .as_array()
            .unwrap()
            .contains(&9.into()),
        "{thread}"
    );
}

#[test]
fn leaks_state_names_the_test_that_mutates_a_module_global_and_the_one_that_sets_an_env_var() {
    let repo = recording_repo();
    repo.write("README.md", "docs\n");
    repo.commit("head: docs only");
    let audit = Audit::at(repo.path(), repo.cache.path())
        .sides("HEAD~1", "HEAD")
        .seeds(1)
        .args(&["--jobs", "2"]);
    // Not scoped (the default): nothing is recorded, and the report says so.
    let (run, v) = audit.report();
    assert_eq!(run.code, 0, "{run:?}");
    assert!(findings(&v, "leaks-state").is_empty(), "{v}");
    assert_eq!(v["scope"]["mode"], "off", "{v}");
    assert!(
        v["scope"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("not scoped")),
        "{v}"
    );
    let (run, v) = audit.args(&["--scoped"]).report();
    assert_eq!(run.code, 0, "{run:?}");
    let leaks = findings(&v, "leaks-state");
    let message = |id: &str| -> String {
        leaks
            .iter()
            .find(|f| f["tests"][0] == id)
            .unwrap_or_else(|| panic!("no leaks-state finding for {id}: {v}"))["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let put = message("tests/test_a.py::test_put");
    assert!(put.contains("the module global REG of pkg/reg.py"), "{put}");
    let env = message("tests/test_a.py::test_env");
    assert!(env.contains("the environment variable FIXGATE_T"), "{env}");
    assert_eq!(leaks.len(), 2, "{v}");
    assert!(leaks.iter().all(|f| f["blocking"] == false), "{v}");
    assert_eq!(v["verdict"], "pass");
}

/// The session's own fixtures: one every test needs (autouse, in the root's conftest.py) that
/// sets a global and an environment variable up before the first test and takes them away after
/// the last; one only a test asks for; one a subdirectory's tests need; and a function-scoped
/// fixture of the last test that leaves a global behind in its teardown.
#[test]
fn what_the_session_sets_up_before_the_first_test_and_tears_down_after_the_last_is_no_tests() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/conf.py",
            "MODE = 'dev'\nSERVER = None\nSUB = None\nLEFT = None\n",
        )
        .write(
            "conftest.py",
            "import os\n\nimport pytest\n\nfrom pkg import conf\n\n\n\
             @pytest.fixture(scope='session', autouse=True)\ndef environment():\n    \
             conf.MODE = 'test'\n    os.environ['FIXGATE_MODE'] = 'test'\n    yield\n    \
             conf.MODE = 'done'\n    del os.environ['FIXGATE_MODE']\n\n\n\
             @pytest.fixture(scope='session')\ndef server():\n    conf.SERVER = 'up'\n    \
             yield\n    conf.SERVER = 'down'\n\n\n\
             @pytest.fixture\ndef leaky():\n    yield\n    conf.LEFT = 1\n",
        )
        .write(
            "tests/test_0.py",
            "import pytest\n\n\n@pytest.mark.skip(reason='sets nothing up')\n\
             def test_skipped():\n    pass\n",
        )
        .write(
            "tests/test_a.py",
            "from pkg import conf\n\n\ndef test_first():\n    assert conf.MODE == 'test'\n\n\n\
             def test_uses_server(server):\n    assert conf.SERVER == 'up'\n",
        )
        .write(
            "tests/zz/conftest.py",
            "import pytest\n\nfrom pkg import conf\n\n\n\
             @pytest.fixture(scope='session', autouse=True)\ndef sub():\n    conf.SUB = 1\n    \
             yield\n    conf.SUB = 2\n",
        )
        .write(
            "tests/zz/test_b.py",
            "from pkg import conf\n\n\ndef test_in_sub():\n    assert conf.SUB == 1\n\n\n\
             def test_last(leaky):\n    assert conf.MODE == 'test'\n",
        );
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--seed", "0", "--record", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    let state = |id: &str| run_test(&v, id)["state"].clone();
    // Set up before the first test that sets fixtures up (a skipped one sets none up), in any
    // order, torn down after the last: nobody's.
    for id in [
        "tests/test_0.py::test_skipped",
        "tests/test_a.py::test_first",
    ] {
        assert_eq!(state(id), serde_json::json!([]), "{id}: {v}");
    }
    // Set up by the test that asks for it: the tests before it see the global unset.
    assert_eq!(
        state("tests/test_a.py::test_uses_server"),
        serde_json::json!(["global:pkg/conf.py:SERVER"])
    );
    // Set up by the first test of the directory, whichever that is.
    assert_eq!(
        state("tests/zz/test_b.py::test_in_sub"),
        serde_json::json!(["global:pkg/conf.py:SUB"])
    );
    // The last test's own teardown is still its own; the session's after it is not.
    assert_eq!(
        state("tests/zz/test_b.py::test_last"),
        serde_json::json!(["global:pkg/conf.py:LEFT"])
    );
}

/// A repository global whose `__dict__` raises, first imported by the last test: the look at
/// the state after the session's teardown fails, and the test stays as pytest reports it.
#[test]
fn a_global_the_state_look_cannot_read_leaves_the_last_tests_outcome_alone() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/weird.py",
            "class Proxy:\n    @property\n    def __dict__(self):\n        \
             raise RuntimeError('working outside of the context')\n\n\nOBJ = Proxy()\n",
        )
        .write(
            "tests/test_w.py",
            "def test_first():\n    pass\n\n\ndef test_last():\n    import pkg.weird\n",
        );
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--seed", "0", "--record", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    for id in ["tests/test_w.py::test_first", "tests/test_w.py::test_last"] {
        assert_eq!(run_test(&v, id)["outcome"], "passed", "{v}");
    }
}

/// A library global rebound to an equal copy, then that copy changed in place by another
/// test: neither is a rebinding of it for good (contents outside the repository are not
/// compared); the same once a module holds a key that is not a str (listed beside its value),
/// where a global rebound for good is still named.
#[test]
fn a_library_global_rebound_to_an_equal_copy_then_filled_in_place_is_nobodys_leak() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_k.py",
        "import keyword\n\n\ndef test_copy():\n    keyword.kwlist = list(keyword.kwlist)\n\n\n\
         def test_fill():\n    keyword.kwlist.append('zz')\n\n\n\
         def test_odd_key():\n    vars(keyword)[1] = 'one'\n\n\n\
         def test_rebind():\n    keyword.iskeyword = len\n\n\n\
         def test_copy_again():\n    keyword.kwlist = list(keyword.kwlist)\n\n\n\
         def test_fill_again():\n    keyword.kwlist.append('yy')\n",
    );
    repo.commit("base");
    let run = repo.fixgate_py(&["run", "--seed", "0", "--record", "--format", "json"]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    for (id, state) in [
        ("test_copy", vec![]),
        ("test_fill", vec![]),
        ("test_odd_key", vec![]),
        ("test_rebind", vec!["outside:keyword:iskeyword"]),
        ("test_copy_again", vec![]),
        ("test_fill_again", vec![]),
    ] {
        let id = format!("tests/test_k.py::{id}");
        assert_eq!(
            run_test(&v, &id)["state"],
            serde_json::json!(state),
            "{id}: {v}"
        );
    }
}

/// Three source modules and their tests; the first test file also sets a value in a shared
/// registry that one test of the last file reads.
/// The registry's own function that fills it at import runs while the suite is collected and
/// names what the setter writes: it hands nothing to a test (what it computed is the module's
/// global), so the registry is not read by every test for it.
fn registry_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/registry.py",
            "VALUES = {}\n\n\ndef _defaults():\n    VALUES.setdefault('seeded', True)\n\n\n_defaults()\n",
        )
        .write("pyproject.toml", "[tool.pytest.ini_options]\n");
    for k in 0..3 {
        repo.write(
            &format!("pkg/m{k}.py"),
            format!("def add(x):\n    return x + {k}\n"),
        );
        let mut tests = format!("from pkg import m{k}\n");
        if k == 0 {
            tests.push_str(
                "from pkg import registry\n\n\ndef test_setter():\n    registry.VALUES['offset'] = 5\n",
            );
        }
        if k == 2 {
            tests.push_str(
                "from pkg import registry\n\n\ndef test_reader():\n    assert registry.VALUES.get('offset') in (None, 5)\n",
            );
        }
        for t in 0..3 {
            tests.push_str(&format!(
                "\n\ndef test_{t}():\n    assert m{k}.add({t}) == {}\n",
                t + k
            ));
        }
        repo.write(&format!("tests/test_m{k}.py"), tests);
    }
    repo.commit("base");
    repo
}

/// The head that rewrites m1 of the registry suites equivalently.
fn rewrite_m1(repo: &TestRepo) {
    repo.write(
        "pkg/m1.py",
        "def add(x):\n    # the same sum\n    return 1 + x\n",
    );
    repo.commit("head: m1 rewritten");
}

/// The scoped audit of the last commit, checked against whole orders.
fn scoped_audit(repo: &TestRepo) -> Value {
    let audit = repo.audit("HEAD~1", "HEAD").seeds(2).args(&["--scoped"]);
    audit.report_both_ways().1
}

#[test]
fn an_equivalent_rewrite_runs_its_tests_with_the_writers_and_readers_and_carries_the_rest() {
    let repo = registry_repo();
    rewrite_m1(&repo);
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "pass", "{v}");
    let scope = &v["scope"];
    assert_eq!(scope["mode"], "scoped", "{scope}");
    assert_eq!(scope["affected"], 3, "{scope}");
    assert_eq!(
        scope["writers"],
        serde_json::json!(["tests/test_m0.py::test_setter"])
    );
    // m1's three tests, the setter, and the two files that import the registry it writes.
    // m1's three tests, the setter and the one test whose code names the registry; the other
    // tests of the two files that import it name only their own module.
    assert_eq!(scope["runs"]["0"], 5, "{scope}");
    assert_eq!(scope["runs"]["rev"], 5, "{scope}");
    assert_eq!(scope["runs"]["1"], 3 + 1 + 1, "{scope}");
    let mut plain: Vec<String> = ["m0", "m2"]
        .iter()
        .flat_map(|m| (0..3).map(move |t| format!("tests/test_{m}.py::test_{t}")))
        .collect();
    plain.sort();
    assert_eq!(carried(scope), plain, "{scope}");
}

/// The tests a scoped audit carried, sorted.
/// A rejecting scoped audit in which each of `victims` is order-dependent, polluted by `setter`
/// alone.
fn assert_polluted(v: &Value, victims: &[&str], setter: &str) {
    assert_eq!(v["verdict"], "reject", "{v}");
    assert_eq!(v["scope"]["mode"], "scoped", "{}", v["scope"]);
    for victim in victims {
        assert_eq!(bucket(v, victim), "order-dependent", "{victim}: {v}");
        assert_eq!(
            pair_of(v, victim)["culprits"],
            serde_json::json!([setter]),
            "{victim}"
        );
    }
}

fn carried(scope: &Value) -> Vec<String> {
    let mut out: Vec<String> = scope["carried"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["nodeid"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// A test reads what a writer wrote when its code names the module or one of its globals,
/// wherever the name is: another global that holds the written object (`CFG`, an instance of
/// the class whose attribute the setter sets), a helper of another module, a class body the
/// test reaches through `self`, or dynamic access (`importlib`), which falls back to what the
/// test's file imports. A patched setter that now breaks each of them is caught by the scoped
/// audit as by the whole orders; the tests that name none of it are carried.
#[test]
fn every_way_a_test_reaches_a_written_global_puts_it_in_the_scope() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/registry.py",
            "VALUES = {}\n\n\nclass Config:\n    debug = None\n\n\nCFG = Config()\n",
        )
        .write(
            "pkg/helpers.py",
            "from pkg import registry\n\n\ndef offset():\n    return registry.VALUES.get('offset', 0)\n",
        )
        .write("pkg/m.py", "def add(x):\n    return x + 1\n")
        .write("pyproject.toml", "[tool.pytest.ini_options]\n");
    let setter = |offset: u32, debug: &str| {
        format!(
            "from pkg import registry\nfrom pkg import m\n\n\ndef test_setter():\n    \
             registry.VALUES['offset'] = {offset}\n    registry.Config.debug = {debug}\n\n\n\
             def test_0():\n    assert m.add(0) == 1\n"
        )
    };
    repo.write("tests/test_a.py", setter(0, "False"));
    repo.write(
        "tests/test_b.py",
        "import importlib\n\nfrom pkg import helpers, m, registry\nfrom pkg.registry import CFG\n\n\n\
         def test_cfg():\n    assert not CFG.debug\n\n\n\
         def test_helper():\n    assert helpers.offset() == 0\n\n\n\
         def test_dynamic():\n    mod = importlib.import_module('pkg.registry')\n    \
         assert mod.VALUES.get('offset', 0) == 0\n\n\n\
         class TestHeld:\n    values = registry.VALUES\n\n    \
         def test_held(self):\n        assert self.values.get('offset', 0) == 0\n\n\n\
         def test_0():\n    assert m.add(1) == 2\n",
    );
    repo.write(
        "tests/test_c.py",
        "from pkg import m\n\n\ndef test_0():\n    assert m.add(2) == 3\n",
    );
    repo.commit("base");
    repo.write("tests/test_a.py", setter(5, "True"));
    repo.commit("head: the setter writes what breaks its readers");
    let v = scoped_audit(&repo);
    assert_polluted(
        &v,
        &[
            "tests/test_b.py::test_cfg",
            "tests/test_b.py::test_helper",
            "tests/test_b.py::test_dynamic",
            "tests/test_b.py::TestHeld::test_held",
        ],
        "tests/test_a.py::test_setter",
    );
    assert_eq!(
        carried(&v["scope"]),
        [
            "tests/test_a.py::test_0",
            "tests/test_b.py::test_0",
            "tests/test_c.py::test_0"
        ],
        "{}",
        v["scope"]
    );
}

/// A test method reads what its class can give it through `self`: what its class's text
/// names (a `setUpClass` ran in the class's first test only, yet set the attribute every test
/// of the class reads) and what the repository's classes it derives from name (the middle test
/// of `TestInherits` is no writer in either recorded order: only its base's `setUpClass` names
/// the registry; only `TestHeldByBase`'s base holds it). Methods whose class and bases name
/// nothing written are carried, unittest's and pytest's alike; before the class rule they
/// read all their file imports. Without the bases, `TestHeldByBase` was carried and the scoped
/// audit missed it.
#[test]
fn a_test_method_reads_what_its_class_and_its_bases_name() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/registry.py", "VALUES = {}\n")
        .write("pkg/m.py", "def add(x):\n    return x + 1\n")
        .write("pyproject.toml", "[tool.pytest.ini_options]\n")
        .write(
            "tests/cases.py",
            "import unittest\n\nfrom pkg import registry\n\n\n\
             class RegistryCase(unittest.TestCase):\n    @classmethod\n    \
             def setUpClass(cls):\n        cls.values = registry.VALUES\n\n\n\
             class HeldCase(unittest.TestCase):\n    values = registry.VALUES\n",
        );
    let setter = |offset: u32| {
        format!(
            "from pkg import m, registry\n\n\ndef test_setter():\n    \
             registry.VALUES['offset'] = {offset}\n\n\ndef test_0():\n    assert m.add(0) == 1\n"
        )
    };
    repo.write("tests/test_a.py", setter(0));
    repo.write(
        "tests/test_b.py",
        "import unittest\n\nfrom cases import RegistryCase\nfrom pkg import registry\n\n\n\
         class TestInherits(RegistryCase):\n    def test_one(self):\n        \
         assert self.values.get('offset', 0) == 0\n\n    def test_two(self):\n        \
         assert self.values.get('offset', 0) == 0\n\n    def test_three(self):\n        \
         assert self.values.get('offset', 0) == 0\n\n\n\
         class TestOwn(unittest.TestCase):\n    @classmethod\n    def setUpClass(cls):\n        \
         cls.values = registry.VALUES\n\n    def test_first(self):\n        \
         assert self.values is not None\n\n    def test_second(self):\n        \
         assert self.values.get('offset', 0) == 0\n",
    );
    // The file imports the registry, but its classes do not name it: they are carried (by
    // what the file imports they would all read it).
    repo.write(
        "tests/test_c.py",
        "import unittest\n\nfrom cases import HeldCase\nfrom pkg import m, registry\n\n\n\
         def test_reader():\n    assert registry.VALUES.get('offset', 0) == 0\n\n\n\
         class TestHeldByBase(HeldCase):\n    def test_held(self):\n        \
         assert self.values.get('offset', 0) == 0\n\n\n\
         class TestPlain(unittest.TestCase):\n    def test_add(self):\n        \
         assert m.add(1) == 2\n\n\n\
         class TestPlainPy:\n    def test_add(self):\n        assert m.add(2) == 3\n",
    );
    repo.commit("base");
    repo.write("tests/test_a.py", setter(5));
    repo.commit("head: the setter writes what breaks the classes' readers");
    let v = scoped_audit(&repo);
    assert_polluted(
        &v,
        &[
            "tests/test_b.py::TestInherits::test_one",
            "tests/test_b.py::TestInherits::test_two",
            "tests/test_b.py::TestInherits::test_three",
            "tests/test_b.py::TestOwn::test_second",
            "tests/test_c.py::test_reader",
            "tests/test_c.py::TestHeldByBase::test_held",
        ],
        "tests/test_a.py::test_setter",
    );
    assert_eq!(
        carried(&v["scope"]),
        [
            "tests/test_a.py::test_0",
            "tests/test_c.py::TestPlain::test_add",
            "tests/test_c.py::TestPlainPy::test_add",
        ],
        "{}",
        v["scope"]
    );
}

/// A name reaches what was written only when it may hold it: a test that names `mean` as a
/// local is no reader of a module whose dataclass has that field, nor one that names the
/// module's sentinel, when nothing written is held there; a test that reads `size` from an
/// instance of a written class, held by another module under another name, is one, and so
/// is one that calls the module's function that hands out the filled cache.
#[test]
fn a_class_field_is_read_through_a_written_class_and_a_local_of_the_same_name_is_not() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/recipes.py",
            "import functools\nfrom dataclasses import dataclass\n\n\n\
             @functools.lru_cache(maxsize=None)\ndef shift(n):\n    return [n + 1]\n\n\n\
             @dataclass\nclass Stats:\n    size: int\n    mean: float\n\n\n\
             class Config:\n    size = 0\n\n\nDEFAULT = Config()\n_marker = object()\n\n\n\
             def cached():\n    return shift\n",
        )
        .write(
            "pkg/other.py",
            "from pkg.recipes import DEFAULT as HOLDER\n",
        )
        .write("pyproject.toml", "[tool.pytest.ini_options]\n");
    let setter = |size: u32| {
        format!(
            "from pkg import recipes\n\n\ndef test_cache():\n    assert recipes.shift(3) == [4]\n\n\n\
             def test_setter():\n    recipes.Config.size = {size}\n"
        )
    };
    repo.write("tests/test_a.py", setter(0));
    repo.write(
        "tests/test_b.py",
        "from pkg.other import HOLDER\nfrom pkg.recipes import _marker, cached\n\n\n\
         def test_default_size():\n    assert HOLDER.size == 0\n\n\n\
         def test_local_mean():\n    mean = 2\n    assert mean * 2 == 4\n\n\n\
         def test_sentinel():\n    assert _marker is not None\n\n\n\
         def test_the_cache():\n    assert cached()(1) == [2]\n",
    );
    repo.commit("base");
    repo.write("tests/test_a.py", setter(5));
    repo.commit("head: the setter leaves the class field changed");
    let v = scoped_audit(&repo);
    assert_polluted(
        &v,
        &["tests/test_b.py::test_default_size"],
        "tests/test_a.py::test_setter",
    );
    // A local named like a field, and a sentinel, hold nothing written; a function that
    // hands out the filled cache does (a cache of lists: one of frozen values filled by a
    // pure function is no written state).
    assert_eq!(
        carried(&v["scope"]),
        [
            "tests/test_b.py::test_local_mean",
            "tests/test_b.py::test_sentinel"
        ],
        "{}",
        v["scope"]
    );
}

/// A name the module fills by a statement that binds nothing (`ALIASES.setdefault(...)`, a
/// function called at import) holds what it was filled with: a test that reads the registry
/// only through it is a reader (a review found it carried, and the scoped audit passing what
/// the whole one rejects).
#[test]
fn a_name_filled_with_the_registry_at_import_reads_what_the_writer_changed() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/reg.py",
            "_REG = {'mode': 'fast'}\nALIASES = {}\nALIASES.setdefault('default', _REG)\n\
             TABLE = {}\n\n\ndef _init():\n    TABLE['main'] = _REG\n\n\n_init()\n",
        )
        .write("pyproject.toml", "[tool.pytest.ini_options]\n");
    let writer = |mode: &str| {
        format!("from pkg import reg\n\n\ndef test_writer():\n    reg._REG['mode'] = '{mode}'\n")
    };
    repo.write("tests/test_a.py", writer("fast"));
    repo.write(
        "tests/test_b.py",
        "from pkg.reg import ALIASES, TABLE\n\n\n\
         def test_alias():\n    assert ALIASES['default']['mode'] == 'fast'\n\n\n\
         def test_table():\n    assert TABLE['main']['mode'] == 'fast'\n\n\n\
         def test_other():\n    assert 1 + 1 == 2\n",
    );
    repo.commit("base");
    repo.write("tests/test_a.py", writer("slow"));
    repo.commit("head: the writer leaves the registry changed");
    let v = scoped_audit(&repo);
    assert_polluted(
        &v,
        &["tests/test_b.py::test_alias", "tests/test_b.py::test_table"],
        "tests/test_a.py::test_writer",
    );
}

/// Two readers whose code names nothing the writer wrote: a test that gets the registry from a
/// session fixture set up in an earlier test (its recorded code is the fixture's, which names
/// only the module's plain function that returns the registry), and a method that reads a
/// class attribute its class's other test set (`type(self).cache`), naming only its class.
#[test]
fn a_registry_a_fixture_handed_out_earlier_and_a_class_its_own_test_wrote_are_read() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/reg.py",
            "_REG = {}\n\n\ndef get_registry():\n    return _REG\n",
        )
        .write("pyproject.toml", "[tool.pytest.ini_options]\n")
        .write(
            "tests/conftest.py",
            "import pytest\n\nfrom pkg.reg import get_registry\n\n\n\
             @pytest.fixture(scope='session')\ndef registry():\n    return get_registry()\n",
        )
        .write(
            "tests/test_b.py",
            "def test_first(registry):\n    assert registry.get('offset', 0) == 0\n\n\n\
             def test_second(registry):\n    assert registry.get('offset', 0) == 0\n",
        );
    let write = |offset: u32| {
        repo.write(
            "tests/test_a.py",
            format!(
                "from pkg import reg\n\n\ndef test_setter():\n    reg._REG['offset'] = {offset}\n"
            ),
        )
        .write(
            "tests/test_c.py",
            format!(
                "class TestCounter:\n    def test_set(self):\n        \
                 type(self).cache = [{offset}]\n\n    def test_mid(self):\n        pass\n\n    \
                 def test_use(self):\n        assert getattr(type(self), 'cache', [0]) == [0]\n"
            ),
        );
    };
    write(0);
    repo.commit("base");
    write(5);
    repo.commit("head: both writers write what breaks their readers");
    let v = scoped_audit(&repo);
    assert_polluted(
        &v,
        &[
            "tests/test_b.py::test_first",
            "tests/test_b.py::test_second",
        ],
        "tests/test_a.py::test_setter",
    );
    assert_polluted(
        &v,
        &["tests/test_c.py::TestCounter::test_use"],
        "tests/test_c.py::TestCounter::test_set",
    );
}

/// A written object a `pytest_generate_tests` hook hands a test as a parameter: the hook ran
/// while the suite was collected and the test's code names only the parameter, so a module
/// that code names is read by every test (what it computed may be anyone's).
#[test]
fn a_parameter_a_collection_hook_takes_from_a_written_module_makes_every_test_its_reader() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/registry.py", "VALUES = {}\n")
        .write("pkg/m.py", "def add(x):\n    return x + 1\n")
        .write("pyproject.toml", "[tool.pytest.ini_options]\n")
        .write(
            "tests/conftest.py",
            "from pkg import registry\n\n\ndef pytest_generate_tests(metafunc):\n    \
             if 'held' in metafunc.fixturenames:\n        \
             metafunc.parametrize('held', [registry.VALUES])\n",
        );
    let setter = |offset: u32| {
        format!(
            "from pkg import registry\n\n\ndef test_setter():\n    \
             registry.VALUES['offset'] = {offset}\n"
        )
    };
    repo.write("tests/test_a.py", setter(0));
    repo.write(
        "tests/test_b.py",
        "from pkg import m\n\n\ndef test_held(held):\n    assert held.get('offset', 0) == 0\n\n\n\
         def test_0():\n    assert m.add(1) == 2\n",
    );
    repo.commit("base");
    repo.write("tests/test_a.py", setter(5));
    repo.commit("head: the setter writes what breaks the parameter's reader");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "reject", "{v}");
    assert_eq!(v["scope"]["mode"], "scoped", "{}", v["scope"]);
    let victim = "tests/test_b.py::test_held[held0]";
    assert_eq!(bucket(&v, victim), "order-dependent", "{v}");
    assert_eq!(
        pair_of(&v, victim)["culprits"],
        serde_json::json!(["tests/test_a.py::test_setter"])
    );
    assert_eq!(carried(&v["scope"]), Vec::<String>::new(), "{}", v["scope"]);
}

#[test]
fn a_rewrite_that_makes_a_module_read_the_registry_is_order_dependent_and_introduced() {
    let repo = registry_repo();
    repo.write(
        "pkg/m1.py",
        "from pkg import registry\n\n\ndef add(x):\n    return x + 1 + registry.VALUES.get('offset', 0)\n",
    );
    repo.commit("head: m1 reads the registry");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "reject", "{v}");
    assert_eq!(v["scope"]["mode"], "scoped", "{}", v["scope"]);
    for t in 0..3 {
        let victim = format!("tests/test_m1.py::test_{t}");
        assert_eq!(bucket(&v, &victim), "order-dependent", "{v}");
        let pair = pair_of(&v, &victim);
        assert_eq!(
            pair["culprits"],
            serde_json::json!(["tests/test_m0.py::test_setter"])
        );
        assert_eq!(pair["introduced"], true);
    }
    // On the base, the victims read nothing any test leaves changed (the base's recording
    // says so): their pairs are the patch's without a run on the base, and the base's warm
    // interpreters are not started for them.
    assert_eq!(
        v["scope"]["settled_on_base"],
        serde_json::json!([
            "tests/test_m1.py::test_0",
            "tests/test_m1.py::test_1",
            "tests/test_m1.py::test_2"
        ]),
        "{}",
        v["scope"]
    );
    assert_eq!(base_checks(&v), 0, "{:#}", v["graph"]);
    assert_eq!(v["forkserver"]["prewarmed"], 0, "{}", v["forkserver"]);
    // The one victim searched had its search over the state writers before it first: the
    // setter alone, then the setter with the victim (the full audit bisects every test before).
    let searched: Vec<&Value> = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["found_by"] == "search")
        .collect();
    assert_eq!(searched.len(), 1, "{:#}", v["pairs"]);
    assert!(
        searched[0]["search_runs"].as_u64().unwrap() <= 2,
        "{:#}",
        searched[0]
    );
    // The three victims leave nothing changed: the confirmation runs them alone together, in
    // one process, not one each (the full audit that `scoped_audit` compares with does).
    assert_eq!(executed(&v, "alone-together-run"), 1, "{:#}", v["graph"]);
    for t in 0..3 {
        let single = format!("alone-run(tests/test_m1.py::test_{t})");
        assert_eq!(executed(&v, &single), 0, "{:#}", v["graph"]);
    }
}

/// Asserts that the head's file-order and reversed runs were made whole (`tests` tests each)
/// for a reason that names each of `why`, and that the audit rejects.
fn assert_whole_and_rejected(v: &Value, why: &[&str], tests: u64) {
    let scope = &v["scope"];
    let reason = scope["whole_reason"].as_str().unwrap_or_default();
    for part in why {
        assert!(reason.contains(part), "no {part:?} in the reason: {scope}");
    }
    assert_eq!(scope["runs"]["0"], tests, "{scope}");
    assert_eq!(scope["runs"]["rev"], tests, "{scope}");
    assert_eq!(v["verdict"], "reject", "{v}");
}

/// The report's pair of `victim`.
fn pair_of<'a>(v: &'a Value, victim: &str) -> &'a Value {
    v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["victim"] == victim)
        .unwrap_or_else(|| panic!("no pair for {victim}: {v}"))
}

/// How many base checks the audit ran.
fn base_checks(v: &Value) -> usize {
    v["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "base-check")
        .count()
}

/// A pair the base has too: its victim reads what the setter writes on the base, so the base's
/// recording settles nothing, the check runs on the base and finds the pair there.
#[test]
fn a_pair_whose_victim_reads_the_written_state_on_the_base_is_checked_there_and_pre_existing() {
    let repo = registry_repo();
    repo.write(
        "tests/test_m2.py",
        "from pkg import m2, registry\n\n\ndef test_reader():\n    \
         assert registry.VALUES.get('offset') is None\n\n\n\
         def test_0():\n    assert m2.add(0) == 2\n",
    );
    repo.commit("base: a reader the setter breaks");
    rewrite_m1(&repo);
    let v = scoped_audit(&repo);
    assert_eq!(v["scope"]["mode"], "scoped", "{}", v["scope"]);
    let victim = "tests/test_m2.py::test_reader";
    assert_eq!(bucket(&v, victim), "order-dependent", "{v}");
    let pair = pair_of(&v, victim);
    assert_eq!(
        pair["culprits"],
        serde_json::json!(["tests/test_m0.py::test_setter"])
    );
    assert_eq!(pair["introduced"], false, "{pair}");
    assert_eq!(
        v["scope"]["settled_on_base"],
        serde_json::json!([]),
        "{}",
        v["scope"]
    );
    assert!(base_checks(&v) > 0, "{:#}", v["graph"]);
}

/// How many nodes the audit executed whose label is `label` exactly.
fn executed(v: &Value, label: &str) -> usize {
    v["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["label"] == label)
        .count()
}

#[test]
fn victims_red_when_run_together_run_alone_and_get_the_state_setter_search() {
    let repo = registry_repo();
    // m1's tests now pass only after the setter: red alone, red together, green after it.
    repo.write(
        "pkg/m1.py",
        "from pkg import registry\n\n\ndef add(x):\n    return x + 1 + registry.VALUES.get('offset', 0)\n",
    );
    repo.write(
        "tests/test_m1.py",
        "from pkg import m1\n\n\ndef test_0():\n    assert m1.add(0) == 6\n\n\ndef test_1():\n    assert m1.add(1) == 7\n\n\ndef test_2():\n    assert m1.add(2) == 8\n",
    );
    repo.commit("head: m1 needs the registry's offset");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "reject", "{v}");
    assert_eq!(v["scope"]["mode"], "scoped", "{}", v["scope"]);
    assert_eq!(executed(&v, "alone-together-run"), 1, "{:#}", v["graph"]);
    for t in 0..3 {
        let victim = format!("tests/test_m1.py::test_{t}");
        assert_eq!(bucket(&v, &victim), "order-dependent", "{v}");
        // Red together is not taken for red alone: each runs by itself before its search.
        let single = format!("alone-run({victim})");
        assert_eq!(executed(&v, &single), 1, "{:#}", v["graph"]);
        let pair = pair_of(&v, &victim);
        assert_eq!(pair["kind"], "state-setter", "{pair}");
        assert_eq!(
            pair["culprits"],
            serde_json::json!(["tests/test_m0.py::test_setter"])
        );
    }
}

#[test]
fn a_conftest_change_falls_back_to_full_orders_and_says_why() {
    let repo = registry_repo();
    repo.write("tests/conftest.py", "import pytest\n");
    repo.commit("head: a conftest");
    let v = scoped_audit(&repo);
    let scope = &v["scope"];
    assert_eq!(scope["mode"], "full", "{scope}");
    assert_eq!(
        scope["reason"],
        "the patch changes tests/conftest.py, which runs around every test"
    );
    assert_eq!(scope["runs"]["1"], 11);
}

/// A test that fills the `lru_cache` of a function reading nothing but its arguments, with
/// values nothing changes in place, leaves no state another test can tell (more-itertools'
/// `_shift_to_odd`): it is no writer. One whose function reads a global, or whose cache hands
/// out a list a caller may change, stays a writer, and so do their readers.
#[test]
fn a_test_that_fills_a_pure_functions_cache_with_frozen_values_is_no_writer() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pyproject.toml", "[tool.pytest.ini_options]\n")
        .write(
            "pkg/cached.py",
            "from functools import lru_cache\n\nFACTOR = 3\n\n\n\
             @lru_cache\ndef _shift(n):\n    'Return s, d such that 2**s * d == n'\n    \
             s = ((n - 1) ^ n).bit_length() - 1\n    d = n >> s\n    return s, d\n\n\n\
             def odd_part(n):\n    return _shift(n)[1]\n\n\n\
             @lru_cache(maxsize=None)\ndef parts(n):\n    return [n, n + 1]\n\n\n\
             @lru_cache\ndef scaled(n):\n    return n * FACTOR\n",
        )
        .write(
            "tests/test_pure.py",
            "from pkg.cached import odd_part\n\n\n\
             def test_pure():\n    assert odd_part(12) == 3\n",
        )
        .write(
            "tests/test_cached.py",
            "from pkg.cached import parts, scaled\n\n\n\
             def test_list():\n    assert parts(1) == [1, 2]\n\n\n\
             def test_scaled():\n    assert scaled(2) == 6\n",
        )
        .write("pkg/m.py", "def add(x):\n    return x + 1\n")
        .write(
            "tests/test_m.py",
            "from pkg import m\n\n\ndef test_add():\n    assert m.add(1) == 2\n",
        );
    repo.commit("base");
    repo.write("pkg/m.py", "def add(x):\n    return 1 + x\n");
    repo.commit("head: m rewritten");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "pass", "{v}");
    let scope = &v["scope"];
    assert_eq!(scope["mode"], "scoped", "{scope}");
    assert_eq!(
        scope["writers"],
        serde_json::json!([
            "tests/test_cached.py::test_list",
            "tests/test_cached.py::test_scaled"
        ]),
        "{scope}"
    );
    assert!(
        carried(scope).contains(&"tests/test_pure.py::test_pure".to_string()),
        "{scope}"
    );
    // The fill is still said, by what it is.
    let leaks = findings(&v, "leaks-state");
    assert!(
        leaks
            .iter()
            .any(|f| f.to_string().contains("lru_cache of _shift")),
        "{leaks:?}"
    );
}

/// The cache of a function that reads nothing but its arguments, handing out a list: a test
/// that changes the list it got changes what the next caller gets. The plugin sees the list
/// among the cache's results, so the test is a writer and its reader is found as by the whole
/// orders (the code alone would call the function pure).
#[test]
fn a_pure_functions_cache_that_hands_out_a_list_a_test_changes_is_written_state() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pyproject.toml", "[tool.pytest.ini_options]\n")
        .write(
            "pkg/cached.py",
            "from functools import lru_cache\n\n\n\
             @lru_cache(maxsize=None)\ndef parts(n):\n    return [n, n + 1]\n",
        )
        .write(
            "tests/test_reads.py",
            "from pkg import cached\n\n\ndef test_reads():\n    assert cached.parts(5) == [5, 6]\n",
        );
    let filler = |body: &str| format!("from pkg import cached\n\n\ndef test_fill():\n    {body}\n");
    repo.write(
        "tests/test_fill.py",
        filler("assert cached.parts(5)[0] == 5"),
    );
    repo.commit("base");
    repo.write("tests/test_fill.py", filler("cached.parts(5).append(0)"));
    repo.commit("head: the filler changes the list the cache hands out");
    let v = scoped_audit(&repo);
    assert_polluted(
        &v,
        &["tests/test_reads.py::test_reads"],
        "tests/test_fill.py::test_fill",
    );
}

/// A cache of a function that reads a global, filled while a test had the global patched, then
/// read through another module's alias of it: the filler writes the alias's module too, and a
/// test that names only the alias is its reader (a review found the alias lost when the fill
/// was named by the function's own module alone).
#[test]
fn a_cache_filled_under_a_patched_global_is_read_through_an_alias() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pyproject.toml", "[tool.pytest.ini_options]\n")
        .write(
            "pkg/a.py",
            "from functools import lru_cache\n\nFACTOR = 3\n\n\n\
             @lru_cache\ndef scaled(n):\n    return n * FACTOR\n",
        )
        .write("pkg/b.py", "from pkg.a import scaled as times\n")
        .write(
            "tests/test_reader.py",
            "from pkg.b import times\n\n\ndef test_times():\n    assert times(2) == 6\n",
        );
    let filler = |factor: u32| {
        format!(
            "from pkg import a\n\n\ndef test_fill(monkeypatch):\n    \
             monkeypatch.setattr(a, 'FACTOR', {factor})\n    assert a.scaled(2) == {}\n",
            2 * factor
        )
    };
    repo.write("tests/test_fill.py", filler(3));
    repo.commit("base");
    repo.write("tests/test_fill.py", filler(10));
    repo.commit("head: the filler fills the cache under another factor");
    let v = scoped_audit(&repo);
    assert_polluted(
        &v,
        &["tests/test_reader.py::test_times"],
        "tests/test_fill.py::test_fill",
    );
}

#[test]
fn tests_nothing_reaches_are_carried_with_their_outcomes_in_the_orders_that_ran_them() {
    // No registry this time: a test of one module touches nothing of the others.
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "");
    for k in 0..2 {
        repo.write(
            &format!("pkg/m{k}.py"),
            format!("def add(x):\n    return x + {k}\n"),
        )
        .write(
            &format!("tests/test_m{k}.py"),
            format!(
                "from pkg import m{k}\n\n\ndef test_add():\n    assert m{k}.add(1) == {}\n",
                1 + k
            ),
        );
    }
    repo.commit("base");
    repo.write("pkg/m1.py", "def add(x):\n    return 1 + x\n");
    repo.commit("head");
    let v = scoped_audit(&repo);
    let scope = &v["scope"];
    assert_eq!(scope["mode"], "scoped", "{scope}");
    assert_eq!(scope["affected"], 1);
    assert_eq!(scope["runs"]["1"], 1);
    // The head's file-order and reversed runs ran the affected test alone too: the other one
    // keeps the base's outcomes, from the base's recorded runs.
    assert_eq!(scope["runs"]["0"], 1, "{scope}");
    assert_eq!(scope["runs"]["rev"], 1, "{scope}");
    assert!(scope["whole_reason"].is_null(), "{scope}");
    assert_eq!(
        scope["carried"],
        serde_json::json!([{"nodeid": "tests/test_m0.py::test_add", "from": "base", "evidence": {"0": "passed", "rev": "passed"}}])
    );
    assert_eq!(bucket(&v, "tests/test_m0.py::test_add"), "stable");
}

#[test]
fn a_changed_function_that_moved_down_is_found_in_the_base_recording() {
    // The base's recording numbers code by the base's lines. The patch grows e(), so g() starts
    // five lines lower in the head, and breaks g(): test_g ran g() on the base at a line the
    // head gives to p(), which did not change. It must not be carried with its green base result.
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/m.py",
            "def e():\n    return 1\n\n\ndef p():\n    return 2\n\n\ndef g():\n    return 3\n",
        )
        .write(
            "tests/test_m.py",
            "from pkg import m\n\n\ndef test_p():\n    assert m.p() == 2\n\n\n\
             def test_g():\n    assert m.g() == 3\n",
        );
    repo.commit("base");
    repo.write(
        "pkg/m.py",
        "def e():\n    x = 1\n    x += 0\n    x += 0\n    x += 0\n    x += 0\n    return x\n\n\n\
         def p():\n    return 2\n\n\ndef g():\n    return 4\n",
    );
    repo.commit("head");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "reject", "{v}");
    assert_ne!(bucket(&v, "tests/test_m.py::test_g"), "stable", "{v}");
    let carried: Vec<&str> = v["scope"]["carried"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["nodeid"].as_str().unwrap())
        .collect();
    assert!(!carried.contains(&"tests/test_m.py::test_g"), "{v}");
}

/// A scoped audit of the head after the base's change, checked against whole orders by
/// `scoped_audit`; the tests named must not be carried from the base.
fn not_carried(v: &Value, ids: &[&str]) {
    let carried: Vec<&str> = v["scope"]["carried"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["nodeid"].as_str()).collect())
        .unwrap_or_default();
    for id in ids {
        assert!(!carried.contains(id), "{id} was carried: {}", v["scope"]);
    }
}

#[test]
fn a_test_that_gets_a_changed_session_fixture_from_the_cache_is_not_carried() {
    // test_b gets the session fixture's value from pytest's cache (test_a set it up): it ran
    // none of the fixture's code in its own phases, but the patch changes what it gets.
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write(
            "pkg/fixtures.py",
            "import pytest\n\n\n@pytest.fixture(scope='session')\ndef value():\n    return 1\n",
        )
        .write("conftest.py", "pytest_plugins = ['pkg.fixtures']\n")
        .write(
            "tests/test_a.py",
            "def test_a(value):\n    assert value == 1\n",
        )
        .write(
            "tests/test_b.py",
            "def test_b(value):\n    assert value == 1\n",
        );
    repo.commit("base");
    repo.write(
        "pkg/fixtures.py",
        "import pytest\n\n\n@pytest.fixture(scope='session')\ndef value():\n    return 2\n",
    );
    repo.commit("head");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "reject", "{v}");
    not_carried(&v, &["tests/test_b.py::test_b"]);
}

#[test]
fn a_data_file_read_while_collecting_makes_the_runs_whole() {
    // The cases come from a file read at import; the patch changes one case's value, not its id.
    let repo = TestRepo::new();
    repo.write("tests/cases.json", "[1, 2]\n").write(
        "tests/test_c.py",
        "import json, pathlib\nimport pytest\n\n\
         CASES = json.loads((pathlib.Path(__file__).parent / 'cases.json').read_text())\n\n\n\
         @pytest.mark.parametrize('c', CASES, ids=['a', 'b'])\ndef test_c(c):\n    assert c < 10\n",
    );
    repo.commit("base");
    repo.write("tests/cases.json", "[1, 20]\n");
    repo.commit("head");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "reject", "{v}");
    not_carried(&v, &["tests/test_c.py::test_c[b]"]);
}

#[test]
fn a_value_a_module_computes_at_its_first_import_in_a_test_is_not_carried() {
    // test_a imports pkg.data first (in the test), which computes T with calc.f; test_b reads
    // the same T from the imported module and runs none of calc's code itself.
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/calc.py", "def f():\n    return 1\n")
        .write("pkg/data.py", "from pkg import calc\n\nT = calc.f()\n")
        .write(
            "tests/test_a.py",
            "def test_a():\n    from pkg import data\n\n    assert data.T == 1\n",
        )
        .write(
            "tests/test_b.py",
            "def test_b():\n    from pkg import data\n\n    assert data.T == 1\n",
        );
    repo.commit("base");
    repo.write("pkg/calc.py", "def f():\n    return 2\n");
    repo.commit("head");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "reject", "{v}");
    not_carried(&v, &["tests/test_b.py::test_b"]);
}

#[test]
fn a_patched_test_that_now_writes_what_a_carried_test_reads_makes_the_whole_runs_whole() {
    // On the base nothing writes the registry, so the head's file-order and reversed runs would
    // carry test_read from the base. The patch makes touch() write it: what the head's runs
    // record puts test_read back in the scope, so both runs are made whole again, and the
    // reversed order (test_touch first) shows test_read failing after it.
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/reg.py", "REG = {}\n")
        .write(
            "pkg/w.py",
            "from pkg import reg\n\n\ndef touch():\n    return 1\n",
        )
        .write(
            "tests/test_r.py",
            "from pkg import reg\n\n\ndef test_read():\n    assert reg.REG.get('k') is None\n",
        )
        .write(
            "tests/test_w.py",
            "from pkg import w\n\n\ndef test_touch():\n    assert w.touch() == 1\n",
        );
    repo.commit("base");
    repo.write(
        "pkg/w.py",
        "from pkg import reg\n\n\ndef touch():\n    reg.REG['k'] = 1\n    return 1\n",
    );
    repo.commit("head");
    let v = scoped_audit(&repo);
    assert_whole_and_rejected(
        &v,
        &["tests/test_r.py::test_read", "carried from the base"],
        2,
    );
    assert_eq!(bucket(&v, "tests/test_r.py::test_read"), "order-dependent");
}

/// A library's object changed in place (the root logger's level), which no global's identity
/// shows: the head's recording names the setting, so the runs are made whole and the test that
/// reads the level is found with the new test as its polluter, as a whole audit finds it.
#[test]
fn a_new_test_that_changes_the_root_loggers_level_makes_the_whole_runs_whole() {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/m.py", "def add(x):\n    return x + 1\n")
        .write(
            "tests/test_log.py",
            "import logging\n\n\ndef test_warnings_are_on():\n    \
             assert logging.getLogger().isEnabledFor(logging.WARNING)\n",
        )
        .write(
            "tests/test_m.py",
            "from pkg import m\n\n\ndef test_add():\n    assert m.add(1) == 2\n",
        );
    repo.commit("base");
    repo.write(
        "tests/test_m.py",
        "import logging\n\nfrom pkg import m\n\n\ndef test_add():\n    assert m.add(1) == 2\n\n\n\
         def test_silence():\n    logging.getLogger().setLevel(logging.CRITICAL)\n    \
         assert m.add(0) == 1\n",
    );
    repo.commit("head: a test that silences logging for good");
    let v = scoped_audit(&repo);
    assert_whole_and_rejected(&v, &["tests/test_m.py::test_silence", "logging.root"], 3);
    let reader = "tests/test_log.py::test_warnings_are_on";
    assert_eq!(bucket(&v, reader), "order-dependent");
    assert_eq!(
        pair_of(&v, reader)["culprits"],
        serde_json::json!(["tests/test_m.py::test_silence"])
    );
}

#[test]
fn a_new_test_that_replaces_a_library_function_for_good_makes_the_whole_runs_whole() {
    // test_dumps reads nothing of the repository's and nothing writes what it reads on the
    // base, so the head's file-order and reversed runs would carry it from the base. The patch
    // adds a test that replaces json.dumps for good: in the reversed order test_dumps runs after
    // it and fails. The head's recording sees the rebinding, which any test may read, so both
    // runs are made whole, and the scoped audit rejects as the whole one does.
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/m.py", "def add(x):\n    return x + 1\n")
        .write(
            "tests/test_fmt.py",
            "import json\n\n\ndef test_dumps():\n    assert json.dumps({'a': 1}) == '{\"a\": 1}'\n",
        )
        .write(
            "tests/test_m.py",
            "from pkg import m\n\n\ndef test_add():\n    assert m.add(1) == 2\n",
        );
    repo.commit("base");
    repo.write(
        "tests/test_m.py",
        "import json\n\nfrom pkg import m\n\n\ndef test_add():\n    assert m.add(1) == 2\n\n\n\
         def test_quiet():\n    json.dumps = lambda *a, **k: ''\n    assert m.add(0) == 1\n",
    );
    repo.commit("head: a test that silences json for good");
    let v = scoped_audit(&repo);
    assert_whole_and_rejected(&v, &["tests/test_m.py::test_quiet", "json.dumps"], 3);
    assert_eq!(
        bucket(&v, "tests/test_fmt.py::test_dumps"),
        "order-dependent"
    );
    // The polluter's own finding says more than leaks-state would; the signal names the global.
    let quiet = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"] == "tests/test_m.py::test_quiet")
        .unwrap();
    assert_eq!(quiet["bucket"], "polluter", "{quiet}");
    assert!(
        quiet["signals"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("leaks-state:outside:json:dumps")),
        "{quiet}"
    );
}

/// The registry suite with two more modules nothing of the patches below reaches: a class
/// with a parametrized and a skipped test, and plain tests.
fn wider_registry_repo() -> TestRepo {
    let repo = registry_repo();
    repo.write("pkg/m3.py", "def mul(x):\n    return 3 * x\n")
        .write(
            "tests/test_m3.py",
            "import pytest\n\nfrom pkg import m3\n\n\nclass TestM3:\n    \
             @pytest.mark.parametrize('x', [1, 2])\n    def test_mul(self, x):\n        \
             assert m3.mul(x) == 3 * x\n\n    @pytest.mark.skip(reason='not yet')\n    \
             def test_later(self):\n        assert False\n",
        )
        .write("pkg/m4.py", "def neg(x):\n    return -x\n")
        .write(
            "tests/test_m4.py",
            "from pkg import m4\n\n\ndef test_neg():\n    assert m4.neg(1) == -1\n",
        );
    repo.commit("base: two more modules");
    repo
}

/// The head's collection of a scoped audit makes the items of the modules the patch or the
/// scope reaches (m1's tests, the setter's file, the reader's file), imports the others without
/// making theirs, and takes their items from the base's collection, in their place: the same
/// tests, buckets and verdict as the whole orders (which collect whole).
#[test]
fn a_head_collection_makes_only_the_items_of_the_modules_the_patch_or_the_scope_reaches() {
    let repo = wider_registry_repo();
    rewrite_m1(&repo);
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "pass", "{v}");
    let scope = &v["scope"];
    assert_eq!(
        scope["collection"],
        serde_json::json!({"modules": 5, "itemized": 3, "whole_reason": null}),
        "{scope}"
    );
    assert_eq!(
        bucket(&v, "tests/test_m3.py::TestM3::test_mul[2]"),
        "stable"
    );
    assert_eq!(
        bucket(&v, "tests/test_m3.py::TestM3::test_later"),
        "skipped"
    );
    assert_eq!(bucket(&v, "tests/test_m4.py::test_neg"), "stable");
    assert_eq!(v["tests"].as_array().unwrap().len(), 11 + 3 + 1, "{v}");
    // In the order a whole collection gives (the file order's).
    let ids = |v: &Value| -> Vec<String> {
        v["tests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["nodeid"].as_str().unwrap().to_string())
            .collect()
    };
    let run = repo.fixgate_py(&[
        "audit", "--base", "HEAD~1", "--head", "HEAD", "--format", "json", "--quiet", "--seeds",
        "2",
    ]);
    let whole: Value = serde_json::from_str(&run.stdout).expect("the report is JSON");
    assert_eq!(ids(&v), ids(&whole));
    // Without warm interpreters (a fresh cache, forking off) a fresh process collects every
    // item, and the report says so.
    let cache = tempfile::tempdir().unwrap();
    let run = repo.fixgate_with(
        cache.path(),
        &[("FIXGATE_FORK", "0")],
        &[
            "audit", "--base", "HEAD~1", "--head", "HEAD", "--format", "json", "--quiet",
            "--seeds", "2", "--scoped",
        ],
    );
    let fresh: Value = serde_json::from_str(&run.stdout).expect("the report is JSON");
    assert_eq!(judgment(&fresh), judgment(&v));
    let collection = &fresh["scope"]["collection"];
    assert_eq!(collection["itemized"], 5, "{collection}");
    assert!(
        collection["whole_reason"]
            .as_str()
            .is_some_and(|r| r.contains("fresh pytest process")),
        "{collection}"
    );
}

/// Where an untouched module's items may be other in the head, the head's collection makes
/// every item and the report says why: a change at module level (its import may change what
/// another module's items are made of), a changed signature (defaults run at import), a
/// collection hook of the repository (it would see only some items), and a changed function
/// that ran while the suite was collected (it computed a parametrization).
#[test]
fn a_head_collection_is_whole_where_an_untouched_modules_items_may_change_and_says_why() {
    let whole = |repo: &TestRepo, why: &str| {
        let v = scoped_audit(repo);
        let collection = &v["scope"]["collection"];
        assert_eq!(
            collection["itemized"], collection["modules"],
            "{collection}"
        );
        let reason = collection["whole_reason"].as_str().unwrap_or_default();
        assert!(reason.contains(why), "{why:?} not in {collection}");
        v
    };
    let repo = wider_registry_repo();
    repo.write(
        "pkg/m1.py",
        "LIMIT = 3\n\n\ndef add(x):\n    return x + 1\n",
    );
    repo.commit("head: a module-level line");
    whole(&repo, "pkg/m1.py changed at module level");

    let repo = wider_registry_repo();
    repo.write("pkg/m1.py", "def add(x, y=0):\n    return x + 1 + y\n");
    repo.commit("head: another signature");
    whole(
        &repo,
        "a changed function of pkg/m1.py has other decorators or another signature",
    );

    let repo = wider_registry_repo();
    repo.write(
        "tests/conftest.py",
        "def pytest_collection_modifyitems(items):\n    items.sort(key=lambda i: i.nodeid)\n",
    );
    repo.commit("base: a conftest that sorts the items");
    rewrite_m1(&repo);
    whole(
        &repo,
        "tests/conftest.py defines pytest_collection_modifyitems",
    );

    // The same hook under another name, as pluggy allows.
    let repo = wider_registry_repo();
    repo.write(
        "tests/conftest.py",
        "import pytest\n\n\n@pytest.hookimpl(specname='pytest_collection_modifyitems')\n\
         def sort_them(items):\n    items.sort(key=lambda i: i.nodeid)\n",
    );
    repo.commit("base: a conftest that sorts the items, by specname");
    rewrite_m1(&repo);
    whole(
        &repo,
        "tests/conftest.py defines pytest_collection_modifyitems",
    );

    let repo = wider_registry_repo();
    repo.write("pkg/cases.py", "def values():\n    return [1, 2]\n")
        .write(
            "tests/test_m4.py",
            "import pytest\n\nfrom pkg import cases, m4\n\n\n\
             @pytest.mark.parametrize('v', cases.values())\ndef test_neg(v):\n    \
             assert m4.neg(v) == -v\n",
        );
    repo.commit("base: cases computed at import");
    repo.write("pkg/cases.py", "def values():\n    return [1, 2, 3]\n");
    repo.commit("head: one more case");
    let v = whole(&repo, "ran while the suite was collected");
    assert_eq!(bucket(&v, "tests/test_m4.py::test_neg[3]"), "stable", "{v}");
}

/// A test module that parametrizes over the files of a folder gets another item for a file the
/// patch adds there, though the module itself is untouched: the base's collection listed the
/// folder, so the head's collection makes every item, and the new case runs (and fails).
#[test]
fn a_file_added_where_collection_lists_a_folder_makes_the_head_collection_whole() {
    let repo = wider_registry_repo();
    repo.write("tests/data/a.txt", "ok\n").write(
        "tests/test_data.py",
        "import glob\nimport os\n\nimport pytest\n\nHERE = os.path.dirname(__file__)\n\
         CASES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(HERE, 'data', '*.txt')))\n\n\n\
         @pytest.mark.parametrize('name', CASES)\ndef test_case(name):\n    \
         with open(os.path.join(HERE, 'data', name)) as f:\n        \
         assert f.read().strip() == 'ok'\n",
    );
    repo.commit("base: cases from a folder");
    repo.write("tests/data/b.txt", "not ok\n")
        .write("pkg/m1.py", "def add(x):\n    return 1 + x\n");
    repo.commit("head: a case and m1 rewritten");
    let v = scoped_audit(&repo);
    let collection = &v["scope"]["collection"];
    assert!(
        collection["whole_reason"]
            .as_str()
            .is_some_and(|r| r.contains("tests/data/b.txt was added or removed")),
        "{collection}"
    );
    assert_eq!(v["verdict"], "reject", "{v}");
    assert_ne!(bucket(&v, "tests/test_data.py::test_case[b.txt]"), "stable");
    // A new case read off an added file is additive without a replay on the base's bytes,
    // where it does not exist.
    let replay = &v["fixtures"]["replay"];
    let case = replay
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["nodeid"] == "tests/test_data.py::test_case[b.txt]")
        .unwrap_or_else(|| panic!("{replay}"));
    assert_eq!(case["reading"], "additive", "{case}");
    assert_eq!(case["base"], Value::Null, "{case}");
}

/// With `--doctest-modules`, a test file is collected twice, as a module and as a doctest
/// module of the same node id: the head's collection makes the doctest items of a carried
/// file all the same, and the merge takes only the base's module items beside them.
#[test]
fn a_carried_file_with_doctests_is_listed_once() {
    let repo = wider_registry_repo();
    repo.write(
        "pyproject.toml",
        "[tool.pytest.ini_options]\naddopts = \"--doctest-modules\"\n",
    )
    .write(
        "tests/test_m4.py",
        "from pkg import m4\n\n\ndef helper(x):\n    \"\"\"\n    >>> helper(2)\n    -2\n    \"\"\"\n    \
         return m4.neg(x)\n\n\ndef test_neg():\n    assert m4.neg(1) == -1\n",
    )
    .write("tests/test_notes.txt", ">>> 1 + 1\n2\n");
    repo.commit("base: doctests");
    rewrite_m1(&repo);
    let v = scoped_audit(&repo);
    let ids: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["nodeid"].as_str().unwrap())
        .collect();
    let unique: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    assert!(ids.contains(&"tests/test_m4.py::test_m4.helper"), "{ids:?}");
    assert!(ids.contains(&"tests/test_m4.py::test_neg"), "{ids:?}");
    assert!(
        ids.contains(&"tests/test_notes.txt::test_notes.txt"),
        "{ids:?}"
    );
    // Two of the 6 modules (a doctest text file is one) are carried: a doctest file is never
    // (the head makes its items), the doctests of a carried test module are the head's.
    assert_eq!(
        v["scope"]["collection"],
        serde_json::json!({"modules": 6, "itemized": 4, "whole_reason": null})
    );
}

/// A file the patch adds that no code of the suite lists while collecting (only pytest's own
/// walk of the tree sees it, which makes items of Python files alone) leaves the head's
/// collection partial.
#[test]
fn a_file_added_where_only_pytests_walk_lists_keeps_the_head_collection_partial() {
    let repo = wider_registry_repo();
    repo.write("docs/notes.txt", "m1 is spelled the other way round\n")
        .write("tests/notes.txt", "nothing reads this\n")
        .write("pkg/m1.py", "def add(x):\n    return 1 + x\n");
    repo.commit("head: m1 rewritten, and notes");
    let v = scoped_audit(&repo);
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_eq!(
        v["scope"]["collection"],
        serde_json::json!({"modules": 5, "itemized": 3, "whole_reason": null})
    );
}

/// The recorded runs do not depend on where the cache is: a cache copied elsewhere (a CI cache
/// restored under another path, one reached through a link) re-executes every run to the same
/// bytes under `--check`. The plugin's compiled code named the folder it was compiled in, and
/// the trace, which tells the plugin's own frames from the suite's by file name, took pytest's
/// walk of the tree for a listing by the suite's code when the folder had moved.
#[test]
fn a_cache_copied_elsewhere_re_executes_every_recorded_run_to_the_same_bytes() {
    let repo = registry_repo();
    rewrite_m1(&repo);
    let args = [
        "audit", "--base", "HEAD~1", "--head", "HEAD", "--format", "json", "--quiet", "--seeds",
        "2", "--scoped",
    ];
    let first = repo.fixgate_py(&args);
    assert_eq!(first.code, 0, "{first:?}");
    let moved = tempfile::tempdir().unwrap();
    let copy = moved.path().join("elsewhere");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(repo.cache.path())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let py = common::python();
    let mut checked = args.to_vec();
    checked.extend(["--check", "--python", py.to_str().unwrap()]);
    let run = common::fixgate_at(repo.path(), &copy, &[], &checked);
    let v = run.json();
    let reasons: Vec<String> = v["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| format!("{}: {}", n["label"], n["reason"]))
        .filter(|r| r.contains("--check"))
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("[base]")),
        "the base's recorded runs were not checked: {reasons:?}"
    );
    let diverged: Vec<&String> = reasons
        .iter()
        .filter(|r| !r.contains("same output"))
        .collect();
    assert!(
        diverged.is_empty(),
        "diverged in the moved cache: {diverged:?}"
    );
}
