//! Impact-scoped audits (issue 21): what the file-order run records per test (the repository's
//! code it ran, the shared state it left changed), the `leaks-state` finding, and audits whose
//! shuffled orders run only what the patch can affect, checked against `--full`.

mod common;

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
    let run = repo.fixgate_py(&["run", "--seed", "0", "--format", "json"]);
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
    assert_eq!(session["pkg/reg.py"], serde_json::json!([1]), "{session}");
}

/// Runs `fixgate audit` with the test interpreter and the repository's own cache.
fn audit(repo: &TestRepo, args: &[&str]) -> (common::Run, Value) {
    let mut all = vec!["audit", "--format", "json", "--jobs", "2"];
    all.extend_from_slice(args);
    let run = repo.fixgate_py(&all);
    let v: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("the report is not JSON ({e}): {run:?}"));
    (run, v)
}

fn findings<'a>(v: &'a Value, kind: &str) -> Vec<&'a Value> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

#[test]
fn leaks_state_names_the_test_that_mutates_a_module_global_and_the_one_that_sets_an_env_var() {
    let repo = recording_repo();
    repo.write("README.md", "docs\n");
    repo.commit("head: docs only");
    let (run, v) = audit(
        &repo,
        &["--base", "HEAD~1", "--head", "HEAD", "--seeds", "1"],
    );
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
