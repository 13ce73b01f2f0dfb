//! Issue 10: audits built for streams of patches: culprit sets reused within an audit and across
//! audits of one base, and many heads audited against one base in one invocation.

mod common;

use fixgate::exit;

use common::TestRepo;
use serde_json::Value;

/// A base with a shared module and three victims in three files, each asserting the shared
/// state is empty; `tests/test_a_pollute.py` (added by the head) leaves state behind.
fn polluted() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/shared.py", "STATE = {}\n")
        .write(
            "tests/conftest.py",
            "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n",
        );
    for v in ["v1", "v2", "v3"] {
        repo.write(
            &format!("tests/test_{v}.py"),
            format!("from pkg import shared\n\ndef test_{v}():\n    assert shared.STATE == {{}}\n"),
        );
    }
    repo.write(
        "tests/test_clean.py",
        "def test_one():\n    assert 1\n\ndef test_two():\n    assert 2\n",
    );
    repo.commit("base");
    repo.write(
        "tests/test_a_pollute.py",
        "from pkg import shared\n\ndef test_pollute():\n    shared.STATE['x'] = 1\n",
    );
    repo.commit("head adds a polluter");
    repo
}

fn pairs_by_victim(v: &Value) -> Vec<(String, String, u64, Vec<String>)> {
    let mut out: Vec<_> = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["victim"].as_str().unwrap().to_string(),
                p["found_by"].as_str().unwrap().to_string(),
                p["search_runs"].as_u64().unwrap(),
                p["culprits"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_polluter_found_for_one_victim_is_reused_for_the_others_and_by_the_next_audit() {
    let repo = polluted();
    let v = repo.audit("HEAD~1", "HEAD").seeds(2).report_exiting(1);
    let pairs = pairs_by_victim(&v);
    assert_eq!(pairs.len(), 3, "{:#}", v["pairs"]);
    let polluter = vec!["tests/test_a_pollute.py::test_pollute".to_string()];
    let searched: Vec<_> = pairs.iter().filter(|p| p.1 == "search").collect();
    assert_eq!(searched.len(), 1, "{pairs:?}");
    for p in &pairs {
        assert_eq!(p.3, polluter, "{pairs:?}");
        if p.1 != "search" {
            assert_eq!(p.1, "reused-from-this-audit");
            assert_eq!(p.2, 0, "the two others share one batched proof: {pairs:?}");
        }
    }
    // The runs the graph made agree with the report: the set is proven for the three victims
    // together (three runs with it, three without), the searched one among them, not by a reuse
    // run each nor by a check of the searched victim's own before the batch (issue 21).
    assert_eq!(executed(&v, "reuse-run"), 0, "{:#}", v["graph"]);
    assert_eq!(executed(&v, "batch-run"), 6, "{:#}", v["graph"]);
    assert_eq!(executed(&v, "verify-run"), 0, "{:#}", v["graph"]);

    // The same audit again: every answer is cached, and its check is the cached batched proof
    // (before, each cached answer was checked on its own, runs the first audit never made).
    let same = repo.audit("HEAD~1", "HEAD").seeds(2).report_exiting(1);
    assert_eq!(pairs_by_victim(&same), pairs, "{:#}", same["pairs"]);
    assert_eq!(same["pytest_processes"], 0, "{:#}", same["graph"]);

    // A later head of the same base, whose runs all execute again (a new test file changes
    // every order): the victims find their culprits remembered from the first audit, proven
    // for the three in one batch (no reuse run and check each, no search).
    repo.write("tests/test_more.py", "def test_more():\n    assert True\n");
    repo.commit("another head");
    let again = repo.audit("HEAD~2", "HEAD").seeds(2).report_exiting(1);
    let pairs = pairs_by_victim(&again);
    assert_eq!(pairs.len(), 3, "{:#}", again["pairs"]);
    assert!(
        pairs
            .iter()
            .all(|p| p.1 == "reused-from-an-earlier-audit" && p.2 == 0 && p.3 == polluter),
        "{pairs:?}"
    );
    assert_eq!(executed(&again, "batch-run"), 6, "{:#}", again["graph"]);
    for kind in ["reuse-run", "verify-run", "bisect-run"] {
        assert_eq!(executed(&again, kind), 0, "{kind}: {:#}", again["graph"]);
    }
}

/// How many nodes the audit executed whose label starts with `label`.
fn executed(v: &Value, label: &str) -> usize {
    v["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["label"].as_str().is_some_and(|l| l.starts_with(label)))
        .count()
}

/// A victim whose remembered culprits no longer reproduce, while other victims' still do: the
/// set those victims establish is not tried for it a second time (the same runs under the same
/// labels), and it is searched instead.
#[test]
fn a_remembered_set_that_no_longer_holds_for_one_victim_is_not_tried_twice() {
    let repo = polluted();
    let first = repo.audit("HEAD~1", "HEAD").seeds(2).report_exiting(1);
    assert_eq!(pairs_by_victim(&first).len(), 3, "{:#}", first["pairs"]);
    // The next head of the same base: test_v1 now reads another value, which another test
    // pollutes; test_pollute still breaks v2 and v3.
    repo.write("pkg/other.py", "VALUE = []\n")
        .write(
            "tests/test_v1.py",
            "from pkg import other\n\ndef test_v1():\n    assert other.VALUE == []\n",
        )
        .write(
            "tests/test_a_other.py",
            "from pkg import other\n\ndef test_other():\n    other.VALUE.append(1)\n",
        );
    repo.commit("v1 has another polluter now");
    let again = repo.audit("HEAD~2", "HEAD").seeds(2).report_exiting(1);
    let pairs = pairs_by_victim(&again);
    assert_eq!(pairs.len(), 3, "{:#}", again["pairs"]);
    let v1 = pairs
        .iter()
        .find(|p| p.0 == "tests/test_v1.py::test_v1")
        .unwrap();
    assert_eq!(v1.1, "search", "{pairs:?}");
    assert_eq!(v1.3, ["tests/test_a_other.py::test_other"], "{pairs:?}");
    for p in pairs.iter().filter(|p| p.0 != v1.0) {
        assert_eq!(p.1, "reused-from-an-earlier-audit", "{pairs:?}");
        assert_eq!(p.3, ["tests/test_a_pollute.py::test_pollute"], "{pairs:?}");
    }
}

/// A report without what depends on the cache's history or the clock: the graph's statuses,
/// processes started (and forked), wall time, and where a pair's culprits came from.
fn judged(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    for k in [
        "graph",
        "pytest_processes",
        "duration_seconds",
        "forkserver",
    ] {
        o.remove(k);
    }
    let used = o["budget"]["used"].as_object_mut().unwrap();
    used.remove("seconds");
    // Proof runs made for a pair found by search, not for one reused from an earlier audit.
    used.remove("proof_reruns");
    for p in o["pairs"].as_array_mut().unwrap() {
        let p = p.as_object_mut().unwrap();
        p.remove("found_by");
        p.remove("search_runs");
        p.remove("verify_runs");
    }
    v
}

#[test]
fn many_heads_against_one_base_give_each_head_its_own_report_and_the_worst_exit_code() {
    let repo = polluted();
    let base = common::git(repo.path(), &["rev-parse", "HEAD~1"]);
    let polluting = common::git(repo.path(), &["rev-parse", "HEAD"]);
    common::git(repo.path(), &["checkout", "-q", "-b", "docs", &base]);
    repo.write("README.md", "documented\n");
    let docs = repo.commit("a docs-only head");
    common::git(repo.path(), &["checkout", "-q", "main"]);

    let both = repo.fixgate_py(&[
        "audit", "--base", &base, "--head", &polluting, "--head", &docs, "--seeds", "2",
        "--format", "json", "--quiet",
    ]);
    assert_eq!(both.code, 1, "the worst of reject and pass: {both:?}");
    let lines: Vec<Value> = both
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "one JSON line per head: {both:?}");
    assert_eq!(lines[0]["verdict"], "reject");
    assert_eq!(lines[1]["verdict"], "pass");
    // Proof costs runs only where a test disagrees between orders.
    assert!(lines[0]["budget"]["used"]["proof_reruns"].as_u64().unwrap() > 0);
    assert_eq!(
        lines[1]["budget"]["used"]["proof_reruns"], 0,
        "{:#}",
        lines[1]["budget"]
    );
    assert_eq!(lines[0]["head"]["commit"], polluting.as_str());
    assert_eq!(lines[1]["head"]["commit"], docs.as_str());
    // The docs head found every base step in the cache the first head filled.
    let base_steps_executed = lines[1]["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["label"] == "collect(base)" || n["label"] == "snapshot(base)")
        .count();
    assert_eq!(base_steps_executed, 0, "{:#}", lines[1]["graph"]);

    // Each head alone, from a cold cache of its own, judges the same.
    for (head, together) in [(&polluting, &lines[0]), (&docs, &lines[1])] {
        let cache = tempfile::tempdir().unwrap();
        let run = repo.fixgate_with(
            cache.path(),
            &[],
            &[
                "audit", "--base", &base, "--head", head, "--seeds", "2", "--format", "json",
                "--quiet",
            ],
        );
        let v = run.json();
        assert_eq!(judged(v), judged(together.clone()), "{head}");
    }

    // --heads-from and --output DIR: one file per head; a bad revision is that head's error.
    let list = repo.path().join("heads.txt");
    std::fs::write(&list, format!("# the queue\n{docs}\n\nno-such-revision\n")).unwrap();
    // A folder of the repository, which the suite's condition's user is given.
    let out = repo.path().join("reports");
    let run = repo.fixgate_py(&[
        "audit",
        "--base",
        &base,
        "--heads-from",
        list.to_str().unwrap(),
        "--seeds",
        "2",
        "--format",
        "json",
        "--quiet",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.code, exit::ERROR, "an error outranks a pass: {run:?}");
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        vec![
            format!("01-{docs}.json"),
            "02-no-such-revision.json".to_string()
        ]
    );
    let bad: Value = serde_json::from_slice(&std::fs::read(out.join(&files[1])).unwrap()).unwrap();
    assert_eq!(bad["verdict"], "error");
    assert!(
        bad["reasons"][0]
            .as_str()
            .unwrap()
            .contains("no-such-revision"),
        "{bad:#}"
    );
}

/// Issue 11: a test that fails a third of the time in any order, whatever ran before it, is
/// never order-dependent and never rejects a clean patch, over many audits with cold caches.
/// (With five seeds, seven orders and the alone run, each audit calls it failing and
/// introduced with probability (1/3)^8 (2/3)^6 = 1.3 × 10⁻⁵: see `engine/base_check.rs`.)
#[test]
fn a_test_flaky_in_every_order_never_rejects_a_clean_patch_over_twenty_cold_audits() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_flaky.py",
        "import os\n\ndef test_coin():\n    assert os.urandom(1)[0] % 3 != 0\n",
    )
    .write(
        "tests/test_other.py",
        "def test_a():\n    assert True\n\ndef test_b():\n    assert True\n",
    );
    let base = repo.commit("base with a flaky test");
    repo.write("README.md", "a clean patch\n");
    let head = repo.commit("docs");
    let mut flaky = 0;
    for round in 0..20 {
        let cache = tempfile::tempdir().unwrap();
        let seeds: Vec<String> = (1..=5).map(|k| (5 * round + k).to_string()).collect();
        let seeds = seeds.join(",");
        let run = repo.fixgate_with(
            cache.path(),
            &[],
            &[
                "audit",
                "--base",
                &base,
                "--head",
                &head,
                "--seed-list",
                &seeds,
                // The coin touches nothing of the patch and leaves nothing behind: a scoped
                // audit carries it from the file-order and reversed runs (docs/impact.md,
                // "Soundness"). What this pins is how the verdict reads a coin that shows both
                // faces, which takes it in all five orders.
                "--full",
                "--format",
                "json",
                "--quiet",
            ],
        );
        let v: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("round {round}: {e}: {run:?}"));
        assert_eq!(run.code, 0, "round {round}: {v:#}");
        assert_eq!(v["pairs"], serde_json::json!([]), "round {round}");
        let coin = v["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["nodeid"] == "tests/test_flaky.py::test_coin")
            .unwrap();
        let bucket = coin["bucket"].as_str().unwrap();
        let outcomes: Vec<&str> = coin["outcomes"]
            .as_object()
            .unwrap()
            .values()
            .map(|o| o.as_str().unwrap())
            .collect();
        let mixed = outcomes.contains(&"passed") && outcomes.contains(&"failed");
        if mixed {
            // It showed both faces: flaky, whatever the reruns happened to say.
            assert_eq!(bucket, "flaky", "round {round}: {coin:#}");
            flaky += 1;
        } else {
            assert!(
                ["stable", "failing", "flaky"].contains(&bucket),
                "round {round}: {coin:#}"
            );
        }
    }
    // Five orders: the coin shows both faces in about 87% of the audits.
    assert!(flaky >= 10, "both faces in only {flaky} of 20 audits");
}

/// Issue 11: a patch that breaks collection is a reject naming the file and line, not an error
/// that CI would retry.
#[test]
fn a_head_that_does_not_collect_is_a_reject_naming_the_file_and_line() {
    for (file, text, line, error) in [
        (
            "tests/test_ok.py",
            "def test_ok():\n    assert True\n\ndef test_broken(:\n    pass\n",
            4,
            "SyntaxError",
        ),
        (
            "tests/conftest.py",
            "import os\nraise RuntimeError('no database configured')\n",
            2,
            "RuntimeError: no database configured",
        ),
    ] {
        let repo = TestRepo::new();
        repo.write("tests/test_ok.py", "def test_ok():\n    assert True\n");
        let base = repo.commit("base");
        repo.write(file, text);
        let head = repo.commit("breaks collection");
        let run = repo.fixgate_py(&[
            "audit", "--base", &base, "--head", &head, "--seeds", "1", "--format", "json",
            "--quiet",
        ]);
        assert_eq!(run.code, 1, "{file}: {run:?}");
        let v = run.json();
        assert_eq!(v["verdict"], "reject");
        let f = &v["findings"][0];
        assert_eq!(f["kind"], "collection-error", "{v:#}");
        assert_eq!(f["tests"][0], file);
        let message = f["message"].as_str().unwrap();
        assert!(message.contains(&format!("{file}:{line}:")), "{message}");
        assert!(message.contains(error), "{message}");
        assert!(v["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("collection-error"));
    }
}

/// A base with `test_total` expecting 8.0 from `total(5)`; the head has `head_code` as
/// `pkg/price.py` and `head_test` as the test file.
fn price_repo(head_code: &str, head_test: &str) -> (TestRepo, String, String) {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/price.py", "def total(x):\n    return x * 1.6\n")
        .write(
            "tests/conftest.py",
            "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n",
        )
        .write(
            "tests/test_price.py",
            "from pkg.price import total\n\n\
             def test_total():\n    assert round(total(5), 1) == 8.0\n\n\
             def test_zero():\n    assert total(0) == 0\n",
        );
    let base = repo.commit("base");
    repo.write("pkg/price.py", head_code)
        .write("tests/test_price.py", head_test);
    let head = repo.commit("the patch");
    (repo, base, head)
}

#[test]
fn a_renamed_test_whose_expected_value_moved_is_a_redefined_test() {
    // The rename was the way out: the base has no `test_total_price` to replay.
    let (repo, base, head) = price_repo(
        "def total(x):\n    return x * 1.44\n",
        "from pkg.price import total\n\n\
         def test_total_price():\n    assert round(total(5), 1) == 7.2\n\n\
         def test_zero():\n    assert total(0) == 0\n",
    );
    let run = repo.fixgate_py(&[
        "audit", "--base", &base, "--head", &head, "--seeds", "1", "--format", "json", "--quiet",
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    let v = run.json();
    let replays = v["source_replay"].as_array().unwrap();
    assert_eq!(replays.len(), 1, "{v:#}");
    let r = &replays[0];
    assert_eq!(
        r["nodeid"], "tests/test_price.py::test_total_price",
        "{r:#}"
    );
    assert_eq!(r["renamed_from"], "tests/test_price.py::test_total");
    assert_eq!(r["reading"], "redefined-test");
    assert_eq!(r["head"], "passed");
    assert_eq!(r["base_test_code"], "failed");
    assert_eq!(
        r["base_lines"],
        serde_json::json!(["assert round(total(5), 1) == 8.0"])
    );
    assert_eq!(
        r["head_lines"],
        serde_json::json!(["assert round(total(5), 1) == 7.2"])
    );
    let finding = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "redefined-test")
        .unwrap_or_else(|| panic!("no redefined-test finding: {v:#}"));
    assert_eq!(finding["blocking"], true);
    let message = finding["message"].as_str().unwrap();
    assert!(
        message.contains("renamed from tests/test_price.py::test_total")
            && message.contains("== 8.0")
            && message.contains("== 7.2"),
        "{message}"
    );
}

#[test]
fn a_renamed_and_reformatted_test_with_the_same_expectations_is_a_refactor() {
    // Renamed, split over lines, commented, a trailing comma; the code reformatted too.
    let (repo, base, head) = price_repo(
        "def total(x):\n    # the unit price\n    return x * 1.6\n",
        "from pkg.price import total\n\n\
         def test_total_of_five():\n    # five items\n    assert round(\n        total(5),\n        1,\n    ) == 8.0\n\n\
         def test_zero():\n    assert total(0) == 0\n",
    );
    let run = repo.fixgate_py(&[
        "audit", "--base", &base, "--head", &head, "--seeds", "1", "--format", "json", "--quiet",
    ]);
    let v = run.json();
    let replays = v["source_replay"].as_array().unwrap();
    let r = replays
        .iter()
        .find(|r| r["nodeid"] == "tests/test_price.py::test_total_of_five")
        .unwrap_or_else(|| panic!("the renamed test was not replayed: {v:#}"));
    assert_eq!(
        r["renamed_from"], "tests/test_price.py::test_total",
        "{r:#}"
    );
    assert_eq!(r["reading"], "test-refactor");
    assert_eq!(r["head"], "passed");
    assert_eq!(r["base_test_code"], "passed");
    // Only the renamed test was edited.
    assert_eq!(replays.len(), 1, "{v:#}");
    let finding = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "test-refactor")
        .unwrap_or_else(|| panic!("no test-refactor finding: {v:#}"));
    assert_eq!(finding["blocking"], false);
    assert_eq!(run.code, 0, "{run:?}");
}

/// Issue 11: the answer key written in the test itself. An edited assertion that moves the
/// expected value with the code is `redefined-test` (reject, both lines shown); a rewritten
/// test that demands the same is `test-refactor` (pass).
#[test]
fn an_edited_expected_value_is_a_redefined_test_and_a_reformatted_test_a_refactor() {
    // The agent's patch: the code changes, and the expected value moves with it.
    let (repo, base, head) = price_repo(
        "def total(x):\n    return x * 1.44\n",
        "from pkg.price import total\n\n\
         def test_total():\n    assert round(total(5), 1) == 7.2\n\n\
         def test_zero():\n    zero = total( 0 )\n    assert zero == 0  # refactored\n",
    );
    let run = repo.fixgate_py(&[
        "audit", "--base", &base, "--head", &head, "--seeds", "1", "--format", "json", "--quiet",
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    let v = run.json();
    let replays = v["source_replay"].as_array().unwrap();
    let by_id = |id: &str| {
        replays
            .iter()
            .find(|r| r["nodeid"] == id)
            .unwrap_or_else(|| panic!("{id} not replayed: {v:#}"))
    };
    let total = by_id("tests/test_price.py::test_total");
    assert_eq!(total["reading"], "redefined-test", "{total:#}");
    assert_eq!(total["head"], "passed");
    assert_eq!(total["base_test_code"], "failed");
    assert_eq!(
        total["base_lines"],
        serde_json::json!(["assert round(total(5), 1) == 8.0"])
    );
    assert_eq!(
        total["head_lines"],
        serde_json::json!(["assert round(total(5), 1) == 7.2"])
    );
    assert_eq!(
        by_id("tests/test_price.py::test_zero")["reading"],
        "test-refactor"
    );
    let finding = |kind: &str| {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} finding: {v:#}"))
            .clone()
    };
    let redefined = finding("redefined-test");
    assert_eq!(redefined["blocking"], true);
    let message = redefined["message"].as_str().unwrap();
    assert!(
        message.contains("== 8.0") && message.contains("== 7.2"),
        "{message}"
    );
    assert_eq!(finding("test-refactor")["blocking"], false);
    // A stable test without findings introduces nothing.
    let zero = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"] == "tests/test_price.py::test_zero")
        .unwrap();
    assert_eq!(zero["introduced"], false, "{zero}");
}

/// A base with two tests that each set one half of a shared state (`pkg/state.py`'s `A` and
/// `B`), in files 2 and 4, among plain tests in files 1, 3 and 5; the heads add a victim in
/// file 6. Returns the repository and the base's commit.
fn two_halves() -> (TestRepo, String) {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("pkg/state.py", "A = False\nB = False\n")
        .write(
            "tests/conftest.py",
            "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n",
        );
    for f in [1, 3, 5] {
        repo.write(
            &format!("tests/test_{f}_plain.py"),
            format!(
                "def test_plain_{f}_x():\n    assert True\n\n\ndef test_plain_{f}_y():\n    assert True\n"
            ),
        );
    }
    repo.write(
        "tests/test_2_half_a.py",
        "from pkg import state\n\n\ndef test_sets_a():\n    state.A = True\n",
    )
    .write(
        "tests/test_4_half_b.py",
        "from pkg import state\n\n\ndef test_sets_b():\n    state.B = True\n",
    );
    let base = repo.commit("base");
    (repo, base)
}

/// Issue 11: a victim that fails when both halves of a shared state were set before it (a
/// two-test polluter), and also fails at random 20% of the time whatever ran before it. The
/// seed list is chosen so that most orders do not run both halves before it: those are where
/// its flakiness can show.
#[test]
fn a_two_test_polluter_of_a_victim_that_is_also_flaky_is_found_and_the_flakiness_reported() {
    let (repo, base) = two_halves();
    repo.write(
        "tests/test_6_victim.py",
        "import os\n\nfrom pkg import state\n\n\n\
         def test_victim():\n\
         \x20   assert not (state.A and state.B)\n\
         \x20   assert int.from_bytes(os.urandom(2), \"big\") >= int(0.2 * 65536)\n",
    );
    let head = repo.commit("adds a flaky, order-dependent test");
    // Seeds whose orders do not run both halves before the victim (file order does).
    let seeds = "4,7,9,13,14,15,16,17,19,20,21,22,23,24,25,26,27,28,30,32";
    let run = repo.fixgate_py(&[
        "audit",
        "--base",
        &base,
        "--head",
        &head,
        "--seed-list",
        seeds,
        "--format",
        "json",
        "--quiet",
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    let v = run.json();
    let victim = "tests/test_6_victim.py::test_victim";
    let pair = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["victim"] == victim)
        .unwrap_or_else(|| panic!("no pair for the victim: {v:#}"));
    assert_eq!(pair["kind"], "polluter", "{pair:#}");
    assert_eq!(
        pair["culprits"],
        serde_json::json!([
            "tests/test_2_half_a.py::test_sets_a",
            "tests/test_4_half_b.py::test_sets_b"
        ]),
        "{pair:#}"
    );
    let row = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"] == victim)
        .unwrap();
    assert_eq!(row["bucket"], "order-dependent", "{row:#}");
    let signals: Vec<&str> = row["signals"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(signals.contains(&"flaky"), "{row:#}");
    let kinds: Vec<(&str, &str)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap(), f["tests"][0].as_str().unwrap()))
        .collect();
    for kind in ["order-dependent", "flaky"] {
        assert!(
            kinds.contains(&(kind, victim)),
            "no {kind} finding: {kinds:?}"
        );
    }
    for half in [
        "tests/test_2_half_a.py::test_sets_a",
        "tests/test_4_half_b.py::test_sets_b",
    ] {
        assert!(kinds.contains(&("polluter", half)), "{half}: {kinds:?}");
    }
}

/// A victim two tests break each on its own ([`two_halves`]): `test_sets_a` or `test_sets_b`
/// before it. The search
/// of its first failing order finds `{test_sets_a}`; seed 17 runs `test_sets_b` before it without
/// `test_sets_a` (seed 7 the other way round, seed 4 neither), so an order of the matrix showed
/// the anomaly without the found set, and the set gets a flaky victim's check (twelve runs of the
/// pair, the victim alone until eleven are normal) even though nothing here is flaky. It holds,
/// and the victim is not called flaky. Without seed 17 the same set gets the usual check.
#[test]
fn a_victim_failing_in_an_order_without_the_found_set_gets_the_strict_check_and_is_not_called_flaky(
) {
    let (repo, base) = two_halves();
    repo.write(
        "tests/test_6_victim.py",
        "from pkg import state\n\n\ndef test_victim():\n    assert not state.A\n    assert not state.B\n",
    );
    let head = repo.commit("adds a test either setter breaks");
    let victim = "tests/test_6_victim.py::test_victim";
    let audit_with = |seeds: &str| {
        // Each audit with its own cache: the second must not reuse the first's pair.
        let cache = tempfile::tempdir().unwrap();
        let out = common::fixgate_command()
            .args([
                "audit",
                "--base",
                &base,
                "--head",
                &head,
                "--seed-list",
                seeds,
            ])
            .args(["--format", "json", "--quiet", "--python"])
            .arg(common::python())
            .arg("--cache-dir")
            .arg(cache.path())
            .current_dir(repo.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(exit::REJECT), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let pair = v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["victim"] == victim)
            .unwrap_or_else(|| panic!("no pair for the victim: {v:#}"))
            .clone();
        let row = v["tests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["nodeid"] == victim)
            .unwrap()
            .clone();
        (pair, row)
    };
    for (seeds, strict) in [("4,7", false), ("4,7,17", true)] {
        let (pair, row) = audit_with(seeds);
        assert_eq!(pair["kind"], "polluter", "{pair:#}");
        assert_eq!(
            pair["culprits"],
            serde_json::json!(["tests/test_2_half_a.py::test_sets_a"]),
            "{pair:#}"
        );
        assert_eq!(row["bucket"], "order-dependent", "{row:#}");
        let signals: Vec<&str> = row["signals"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(!signals.contains(&"flaky"), "seeds {seeds}: {row:#}");
        let runs = pair["verify_runs"].as_u64().unwrap();
        match strict {
            // Twelve runs of the pair and at least eight more of the victim alone (eleven
            // normal, some of which the confirmation made).
            true => {
                assert_eq!(row["outcomes"]["17"], "failed", "{row:#}");
                assert!(runs >= 20, "seeds {seeds}: {runs} check runs: {pair:#}");
            }
            false => assert!(runs <= 6, "seeds {seeds}: {runs} check runs: {pair:#}"),
        }
    }
}
