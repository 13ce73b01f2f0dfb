//! Issue 11 item 6: `--nio` adds the nio order, every test twice in a row in one process. A
//! test that passes and then fails there, and again on every rerun of it twice by itself, is a
//! `non-idempotent` finding with a repro; forked and fresh processes alike.

mod common;

use fixgate::exit;

use std::path::Path;

use common::audit::{findings, test};
use common::{Run, TestRepo};
use serde_json::Value;

/// `fixgate ARGS --python <test python> --cache-dir CACHE` with the fork server on or off.
fn fixgate(repo: &TestRepo, cache: &Path, fork: bool, args: &[&str]) -> Run {
    repo.fixgate_with(cache, &forked(fork), args)
}

/// The fork server on or off.
fn forked(on: bool) -> [(&'static str, &'static str); 1] {
    [("FIXGATE_FORK", if on { "1" } else { "0" })]
}

fn signals(v: &Value, nodeid: &str) -> Vec<String> {
    test(v, nodeid)["signals"]
        .as_array()
        .expect("signals is an array")
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_string())
        .collect()
}

/// The labels of the audit graph's nodes.
fn node_labels(v: &Value) -> Vec<String> {
    v["graph"]["all_nodes"]
        .as_array()
        .expect("graph.all_nodes is an array")
        .iter()
        .map(|n| n["label"].as_str().unwrap_or_default().to_string())
        .collect()
}

const IDEMPOTENT: &str = "\
import unittest

import pytest


@pytest.fixture
def box():
    items = []
    yield items
    items.clear()


def test_fixture_is_fresh(box, tmp_path):
    box.append(1)
    (tmp_path / 'f.txt').write_text('x')
    assert box == [1]
    assert [p.name for p in tmp_path.iterdir()] == ['f.txt']


def test_pure():
    assert sorted([3, 1, 2]) == [1, 2, 3]


@pytest.mark.parametrize('n', [1, 2])
def test_param(n):
    assert n in (1, 2)


@pytest.fixture(scope='class')
def shared():
    return {'setups': 0}


class TestInClass:
    def test_method(self, shared, box):
        shared['setups'] += 1
        box.append(shared['setups'])
        assert len(box) == 1


class TestUnittestStyle(unittest.TestCase):
    def setUp(self):
        self.items = []

    def test_case(self):
        self.items.append(1)
        self.assertEqual(self.items, [1])
";

const SELF_POLLUTING: &str = "\
SEEN = []


def test_seen_once():
    SEEN.append('x')
    assert len(SEEN) == 1
";

const SEEN_ONCE: &str = "tests/test_seen.py::test_seen_once";

/// A base with an idempotent suite; the head adds a test that appends to a module-level list
/// and asserts it has one element.
fn self_polluting_repo() -> (TestRepo, String, String) {
    let repo = TestRepo::new();
    repo.write("tests/test_ok.py", IDEMPOTENT);
    let base = repo.commit("base");
    repo.write("tests/test_seen.py", SELF_POLLUTING);
    let head = repo.commit("head: a test that breaks its own state");
    (repo, base, head)
}

fn assert_non_idempotent_found(run: &Run, v: &Value, fork: bool) {
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(v["verdict"], "reject", "{}", v["reasons"]);
    assert!(
        v["orders"].as_array().unwrap().iter().any(|o| o == "nio"),
        "{}",
        v["orders"]
    );
    let found = findings(v, "non-idempotent");
    assert_eq!(found.len(), 1, "{}", v["findings"]);
    let f = found[0];
    assert_eq!(f["tests"], serde_json::json!([SEEN_ONCE]));
    assert_eq!(f["introduced"], true);
    assert_eq!(f["blocking"], true);
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("fails when run again"),
        "{f}"
    );
    let repro = f["repro"].as_str().unwrap();
    assert_eq!(
        repro.matches(SEEN_ONCE).count(),
        2,
        "the repro lists the test twice: {repro}"
    );
    assert!(repro.contains("fixgate run --order"), "{repro}");
    // Green in every order of the matrix: stable, and the second run is not read as flaky
    // nor as order-dependent.
    let t = test(v, SEEN_ONCE);
    assert_eq!(t["bucket"], "stable", "{t}");
    assert_eq!(t["outcomes"]["nio"], "passed", "{t}");
    assert_eq!(t["outcomes"]["nio#2"], "failed", "{t}");
    let s = signals(v, SEEN_ONCE);
    assert!(s.contains(&"non-idempotent".to_string()), "{s:?}");
    assert!(!s.contains(&"flaky".to_string()), "{s:?}");
    assert!(findings(v, "flaky").is_empty(), "{}", v["findings"]);
    assert!(
        findings(v, "order-dependent").is_empty(),
        "{}",
        v["findings"]
    );
    // The idempotent tests, fixtures and tmp_path included, are stable without findings.
    for id in [
        "tests/test_ok.py::test_fixture_is_fresh",
        "tests/test_ok.py::test_pure",
        "tests/test_ok.py::test_param[2]",
        "tests/test_ok.py::TestInClass::test_method",
        "tests/test_ok.py::TestUnittestStyle::test_case",
    ] {
        assert_eq!(test(v, id)["bucket"], "stable", "{}", test(v, id));
        assert!(!signals(v, id).contains(&"non-idempotent".to_string()));
    }
    // The nio order ran, and the suspect ran twice by itself on each of the proof's reruns.
    let labels = node_labels(v);
    assert!(labels.contains(&"seed-run(nio)".to_string()), "{labels:?}");
    let reruns = labels.iter().filter(|l| l.starts_with("nio-run(")).count();
    assert_eq!(reruns, 3, "{labels:?}");
    assert_eq!(v["budget"]["used"]["proof_reruns"], 3, "{}", v["budget"]);
    if fork {
        assert!(
            v["forkserver"]["forks"].as_u64().unwrap_or(0) > 0,
            "{}",
            v["forkserver"]
        );
    } else {
        assert_eq!(v["forkserver"]["forks"], 0, "{}", v["forkserver"]);
    }
}

#[test]
fn a_test_that_breaks_its_own_state_is_non_idempotent_with_its_repro_forked() {
    let (repo, base, head) = self_polluting_repo();
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(1)
        .env(&forked(true))
        .args(&["--nio"])
        .report();
    assert_non_idempotent_found(&run, &v, true);
}

#[test]
fn a_test_that_breaks_its_own_state_is_non_idempotent_with_its_repro_fresh() {
    let (repo, base, head) = self_polluting_repo();
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(1)
        .env(&forked(false))
        .args(&["--nio"])
        .report();
    assert_non_idempotent_found(&run, &v, false);
}

#[test]
fn the_repro_of_a_non_idempotent_test_passes_then_fails() {
    let (repo, _, _) = self_polluting_repo();
    let order = repo.path().join("nio-order.txt");
    std::fs::write(&order, format!("{SEEN_ONCE}\n{SEEN_ONCE}\n")).unwrap();
    for fork in [true, false] {
        let cache = tempfile::tempdir().unwrap();
        let run = fixgate(
            &repo,
            cache.path(),
            fork,
            &[
                "run",
                "--order",
                order.to_str().unwrap(),
                "--format",
                "json",
            ],
        );
        let v = run.json();
        let tests: Vec<(String, String)> = v["result"]["tests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["nodeid"].as_str().unwrap().to_string(),
                    t["outcome"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            tests,
            [
                (SEEN_ONCE.to_string(), "passed".to_string()),
                (SEEN_ONCE.to_string(), "failed".to_string())
            ],
            "fork {fork}: {run:?}"
        );
        assert_eq!(v["result"]["tests"][1]["occurrence"], 1);
    }
}

#[test]
fn an_order_file_may_list_a_test_twice_only_in_a_row() {
    let (repo, _, _) = self_polluting_repo();
    let order = repo.path().join("order.txt");
    let a = "tests/test_ok.py::test_pure";
    for listed in [[a, SEEN_ONCE, a], [a, a, a]] {
        std::fs::write(&order, listed.join("\n") + "\n").unwrap();
        let run = fixgate(
            &repo,
            repo.cache.path(),
            true,
            &["run", "--order", order.to_str().unwrap()],
        );
        assert_eq!(run.code, exit::ERROR, "{listed:?}: {run:?}");
        assert!(run.stderr.contains("is listed twice"), "{run:?}");
    }
}

#[test]
fn a_pre_existing_non_idempotent_test_is_reported_not_blocking_and_nio_comes_from_the_config() {
    let repo = TestRepo::new();
    repo.write("tests/test_ok.py", IDEMPOTENT)
        .write("tests/test_seen.py", SELF_POLLUTING)
        .write("pyproject.toml", "[tool.fixgate]\nnio = true\n");
    let base = repo.commit("base: the test already breaks its own state");
    repo.write("README.md", "docs only\n");
    let head = repo.commit("head: docs");
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(1)
        .env(&forked(true))
        .report();
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(v["verdict"], "pass");
    let found = findings(&v, "non-idempotent");
    assert_eq!(found.len(), 1, "{}", v["findings"]);
    assert_eq!(found[0]["introduced"], false);
    assert_eq!(found[0]["blocking"], false);
    assert!(
        found[0]["message"]
            .as_str()
            .unwrap()
            .contains("pre-existing"),
        "{}",
        found[0]
    );
    // The base check ran the test twice on the base until it showed it (the first run does).
    let labels = node_labels(&v);
    assert!(
        labels.contains(&format!("base-check(non-idempotent {SEEN_ONCE})")),
        "{labels:?}"
    );
    // --strict makes it the patch's to fix.
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(1)
        .env(&forked(true))
        .args(&["--strict"])
        .report();
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(findings(&v, "non-idempotent")[0]["blocking"], true);
}

#[test]
fn an_idempotent_suite_with_nio_has_no_finding_and_nothing_else_changes() {
    let repo = TestRepo::new();
    repo.write("tests/test_ok.py", IDEMPOTENT);
    let base = repo.commit("base");
    repo.write(
        "tests/test_more.py",
        "def test_more():\n    assert 'a'.upper() == 'A'\n",
    );
    let head = repo.commit("head");
    let (plain_run, plain) = repo
        .audit(&base, &head)
        .seeds(1)
        .env(&forked(true))
        .report();
    let (nio_run, nio) = repo
        .audit(&base, &head)
        .seeds(1)
        .env(&forked(true))
        .args(&["--nio"])
        .report();
    assert_eq!((plain_run.code, nio_run.code), (0, 0), "{nio_run:?}");
    assert_eq!(plain["verdict"], nio["verdict"]);
    assert_eq!(plain["findings"], nio["findings"]);
    // The tests' rows differ only by their two runs in the nio order, both passed.
    let mut rows = nio["tests"].clone();
    for row in rows.as_array_mut().unwrap() {
        let outcomes = row["outcomes"].as_object_mut().unwrap();
        assert_eq!(outcomes.remove("nio"), Some("passed".into()), "{row}");
        assert_eq!(outcomes.remove("nio#2"), Some("passed".into()), "{row}");
    }
    assert_eq!(plain["tests"], rows);
    assert_eq!(plain["pairs"], nio["pairs"]);
    let mut orders = plain["orders"].as_array().unwrap().clone();
    orders.push("nio".into());
    assert_eq!(nio["orders"], Value::Array(orders));
    // Nothing to confirm: the nio order ran and no test ran twice by itself.
    let labels = node_labels(&nio);
    assert!(labels.contains(&"seed-run(nio)".to_string()), "{labels:?}");
    assert!(
        !labels.iter().any(|l| l.starts_with("nio-run(")),
        "{labels:?}"
    );
}

#[test]
fn a_test_that_fails_its_second_run_only_after_other_tests_is_neither_non_idempotent_nor_flaky() {
    // In the nio order test_b runs twice after test_a ran twice and fails its second run; by
    // itself, twice, it passes both times: not reproduced, so not a non-idempotent test; and
    // not flaky either (it is deterministic: the nio order's doubled prefix broke it), so a
    // clean patch is not rejected for it.
    let repo = TestRepo::new();
    repo.write("tests/test_ok.py", IDEMPOTENT)
        .write("state.py", "CALLS = []\n");
    let base = repo.commit("base");
    repo.write(
        "tests/test_pair.py",
        "import state\n\n\n\
         def test_a():\n    state.CALLS.append('a')\n\n\n\
         def test_b():\n    state.CALLS.append('b')\n    \
         assert state.CALLS.count('b') < 2 or 'a' not in state.CALLS\n",
    );
    let head = repo.commit("head");
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(1)
        .env(&forked(true))
        .args(&["--nio"])
        .report();
    let id = "tests/test_pair.py::test_b";
    assert!(
        findings(&v, "non-idempotent").is_empty(),
        "{}",
        v["findings"]
    );
    assert!(findings(&v, "flaky").is_empty(), "{}", v["findings"]);
    assert_eq!(test(&v, id)["bucket"], "stable", "{}", test(&v, id));
    assert_eq!(run.code, 0, "{run:?}");
    let labels = node_labels(&v);
    // It stopped at the first rerun that passed twice.
    let reruns = labels.iter().filter(|l| l.starts_with("nio-run(")).count();
    assert_eq!(reruns, 1, "{labels:?}");
}

/// A doctest reads its module's names; pytest's doctest runner clears a doctest's globals when
/// it ends, so a second run in the same process must start from the first run's globals, not
/// from nothing: an idempotent doctest is no finding, forked or fresh.
#[test]
fn a_doctest_that_uses_its_modules_names_is_idempotent() {
    for fork in [true, false] {
        let repo = TestRepo::new();
        repo.write("tests/test_ok.py", IDEMPOTENT)
            .write(
                "pyproject.toml",
                "[tool.pytest.ini_options]\naddopts = \"--doctest-modules\"\n",
            )
            .write(
                "tests/prices.py",
                "RATE = 2\n\n\ndef double(x):\n    \"\"\"\n    >>> double(RATE)\n    4\n    \"\"\"\n    return x * RATE\n",
            );
        let base = repo.commit("base");
        repo.write("README.md", "docs\n");
        let head = repo.commit("head");
        let (run, v) = repo
            .audit(&base, &head)
            .seeds(1)
            .env(&forked(fork))
            .args(&["--nio"])
            .report();
        let id = "tests/prices.py::prices.double";
        let t = test(&v, id);
        assert_eq!(t["outcomes"]["nio"], "passed", "fork {fork}: {t}");
        assert_eq!(t["outcomes"]["nio#2"], "passed", "fork {fork}: {t}");
        assert!(
            findings(&v, "non-idempotent").is_empty(),
            "{}",
            v["findings"]
        );
        assert_eq!(run.code, 0, "fork {fork}: {run:?}");
    }
}
