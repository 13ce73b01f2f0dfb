//! Issue 5: `fixgate audit` on real small repositories: every row of the fixture decision table,
//! every bucket, every exit code, the polluter search and its bound, determinism, and the demo.

mod common;

use fixgate::exit;

use common::audit::{bucket, findings, test};
use common::{processes_with, tree_bytes, unique, Run, TestRepo};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn has_test(v: &Value, nodeid: &str) -> bool {
    v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["nodeid"] == nodeid)
}

/// A JSON array of strings as a vector.
fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("not a string: {s}"))
                .to_string()
        })
        .collect()
}

/// The finding of `kind` about `nodeid`.
fn finding<'a>(v: &'a Value, kind: &str, nodeid: &str) -> &'a Value {
    findings(v, kind)
        .into_iter()
        .find(|f| strs(&f["tests"]).iter().any(|t| t == nodeid))
        .unwrap_or_else(|| panic!("no {kind} finding for {nodeid}: {}", v["findings"]))
}

fn outcome(v: &Value, nodeid: &str, label: &str) -> String {
    test(v, nodeid)["outcomes"][label]
        .as_str()
        .unwrap_or_else(|| panic!("{nodeid} has no outcome for order {label}: {v}"))
        .to_string()
}

/// Asserts the exit code and the verdict, printing the whole run when either is off.
#[track_caller]
fn assert_verdict(run: &Run, v: &Value, code: i32, verdict: &str) {
    assert_eq!(
        (run.code, v["verdict"].as_str(), v["exit_code"].as_i64()),
        (code, Some(verdict), Some(code as i64)),
        "{run:?}"
    );
}

/// Writes a SQLite database at `rel` (creating its directory) by running `sql` with the test
/// interpreter.
fn make_sqlite(repo: &TestRepo, rel: &str, sql: &str) {
    let path = repo.path().join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let script = format!(
        "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nc.executescript({sql:?})\nc.commit()\nc.close()\n"
    );
    let ok = std::process::Command::new(common::python())
        .arg("-c")
        .arg(script)
        .arg(&path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "could not create {rel}");
}

// ---------------------------------------------------------------------------------------------
// The shared-cart patch of the demo
// ---------------------------------------------------------------------------------------------

const PRICING: &str = r#""""Prices a cart. The cart is module-level state, shared by every caller."""

CART = []
TAX_RATE = 0.25


def add_item(name, price):
    CART.append((name, price))


def clear():
    CART.clear()


def subtotal():
    return sum(price for _, price in CART)


def total_with_tax():
    return round(subtotal() * (1 + TAX_RATE), 2)
"#;

const PRICING_TESTS: &str = r#"import pricing


def test_add_book():
    pricing.add_item("book", 10.0)
    assert pricing.subtotal() >= 10.0


def test_tax_on_lamp():
    pricing.add_item("lamp", 20.0)
    assert pricing.total_with_tax() == 25.0


def test_discount_free_cart():
    pricing.clear()
    assert pricing.total_with_tax() == 0
"#;

const BOOK: &str = "tests/test_pricing.py::test_add_book";
const LAMP: &str = "tests/test_pricing.py::test_tax_on_lamp";
const DISCOUNT: &str = "tests/test_pricing.py::test_discount_free_cart";

#[test]
fn the_shared_cart_patch_that_matches_the_polluted_total_is_rejected_with_its_pair() {
    let repo = TestRepo::new();
    repo.write("src/pricing.py", PRICING)
        .write("tests/test_pricing.py", PRICING_TESTS);
    let base = repo.commit("pricing: cart, tax and discount");
    repo.write(
        "tests/test_pricing.py",
        PRICING_TESTS.replace(
            "assert pricing.total_with_tax() == 25.0",
            "assert pricing.total_with_tax() == 37.5  # fixed: matches the actual total",
        ),
    );
    let head = repo.commit("fix test_tax_on_lamp");

    let (run, v) = repo.audit(&base, &head).seeds(2).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    assert_eq!(v["schema"], 1);
    assert_eq!(v["base"]["commit"], base.as_str());
    assert_eq!(v["head"]["commit"], head.as_str());

    // In file order the head is green: that is the patch's claim.
    assert_eq!(outcome(&v, LAMP, "0"), "passed");
    assert_eq!(outcome(&v, LAMP, "rev"), "failed");
    let lamp = test(&v, LAMP);
    assert_eq!(lamp["bucket"], "order-dependent", "{lamp}");
    assert_eq!(lamp["edited_by_patch"], true, "{lamp}");
    assert_eq!(lamp["introduced"], true, "{lamp}");
    assert_eq!(test(&v, BOOK)["edited_by_patch"], false);
    assert_eq!(test(&v, DISCOUNT)["edited_by_patch"], false);

    // The lamp test needs the book in the cart: the book test is its state-setter.
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{}", v["pairs"]);
    let pair = &pairs[0];
    assert_eq!(pair["victim"], LAMP);
    assert_eq!(pair["kind"], "state-setter", "{pair}");
    assert_eq!(pair["polluter"], BOOK);
    assert_eq!(strs(&pair["culprits"]), [BOOK]);
    assert!(pair["unexplained"].is_null(), "{pair}");
    let repro = pair["repro"].as_str().unwrap();
    assert!(
        repro.contains(&format!("{BOOK} {LAMP}")),
        "the reproduction runs the book test, then the lamp test: {repro}"
    );

    // The edited assertion is named as such, and it blocks.
    let edited = finding(&v, "edited-assertion", LAMP);
    assert_eq!(edited["blocking"], true, "{edited}");
    assert!(
        edited["message"].as_str().unwrap().contains(BOOK),
        "{edited}"
    );
    assert_eq!(finding(&v, "order-dependent", LAMP)["blocking"], true);
    assert!(
        strs(&v["reasons"]).iter().any(|r| r.contains(LAMP)),
        "{}",
        v["reasons"]
    );
}

#[test]
fn the_demo_runs_and_exits_zero_printing_a_reject_verdict() {
    let repo = TestRepo::plain();
    let run = repo.fixgate_py(&["demo"]);
    assert_eq!(run.code, 0, "{run:?}");
    let first = run.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("REJECT (exit 1)"),
        "the demo's report opens with the reject verdict: {run:?}"
    );
    assert!(run.stdout.contains("test_tax_on_lamp"), "{run:?}");

    let json = repo.fixgate_py(&["demo", "--format", "json", "--quiet"]);
    assert_eq!(json.code, 0, "{json:?}");
    let v = json.json();
    assert_eq!(v["verdict"], "reject");
    assert_eq!(v["exit_code"], exit::REJECT);
    assert!(
        v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["victim"] == LAMP && strs(&p["culprits"]) == [BOOK]),
        "{}",
        v["pairs"]
    );
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

const DB_READER: &str = r#"import sqlite3

DB = "tests/fixtures/db/app.sqlite"


def test_reads_only():
    c = sqlite3.connect(DB)
    assert c.execute("select count(*) from t").fetchone()[0] >= 0
    c.close()
"#;

/// A base with a `db` group holding one SQLite file and a test that only reads it.
fn db_repo() -> (TestRepo, String) {
    let repo = TestRepo::new();
    repo.write("fixtures.manifest", "db: tests/fixtures/db/*.sqlite\n")
        .write("tests/test_db.py", DB_READER);
    make_sqlite(
        &repo,
        "tests/fixtures/db/app.sqlite",
        "create table t(x integer);",
    );
    let base = repo.commit("base");
    (repo, base)
}

fn db_writer(marker: &str) -> String {
    format!(
        "import sqlite3\nimport pytest\n\n\n{marker}def test_inserts_a_row():\n    \
         c = sqlite3.connect(\"tests/fixtures/db/app.sqlite\")\n    \
         c.execute(\"insert into t values (1)\")\n    c.commit()\n    c.close()\n"
    )
}

const WRITER: &str = "tests/test_writer.py::test_inserts_a_row";
const READER: &str = "tests/test_db.py::test_reads_only";

#[test]
fn a_test_writing_a_sqlite_fixture_without_a_lease_is_a_polluter_of_group_db() {
    let (repo, base) = db_repo();
    repo.write("tests/test_writer.py", db_writer(""));
    let head = repo.commit("add a test that writes the db");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let writer = test(&v, WRITER);
    assert_eq!(writer["bucket"], "polluter", "{writer}");
    assert_eq!(strs(&writer["dirty_groups"]), ["db"], "{writer}");
    assert!(
        strs(&writer["signals"]).contains(&"lease-violation:db".to_string()),
        "{writer}"
    );
    assert_eq!(writer["introduced"], true);
    let f = finding(&v, "lease-violation", WRITER);
    assert_eq!(f["blocking"], true, "{f}");
    assert_eq!(f["introduced"], true, "{f}");

    let reader = test(&v, READER);
    assert_eq!(reader["bucket"], "stable", "{reader}");
    assert_eq!(strs(&reader["dirty_groups"]), Vec::<String>::new());
}

/// Issue 50: a lease violation the base has too, under a patch that leaves its test's code
/// alone (it touches requirements.txt, the data file and a comment beside a helper), is known
/// debt: no `polluter` finding without a victim, nothing "introduced by the patch".
#[test]
fn a_pre_existing_lease_violation_under_a_patch_that_leaves_its_test_alone_is_known_debt() {
    let (repo, _) = db_repo();
    repo.write(
        "tests/test_writer.py",
        format!(
            "{}

def helper():
    return 1
",
            db_writer("")
        ),
    )
    .write("requirements.txt", "pytest\n");
    let base = repo.commit("a writer without a lease, already there");
    let text = String::from_utf8(repo.read("tests/test_writer.py")).unwrap();
    repo.write(
        "tests/test_writer.py",
        text.replace(
            "def helper():\n    return 1\n",
            "# def helper():\n#     return 1\n",
        ),
    )
    .write("requirements.txt", "pytest>=7\n");
    make_sqlite(
        &repo,
        "tests/fixtures/db/app.sqlite",
        "insert into t values (7);",
    );
    let head = repo.commit("requirements, the data file, a helper commented out");

    let (run, v) = repo.audit(&base, &head).seeds(0).report();
    assert_verdict(&run, &v, exit::PASS, "pass");
    let f = finding(&v, "lease-violation", WRITER);
    assert_eq!(
        (&f["introduced"], &f["blocking"]),
        (&false.into(), &false.into()),
        "{f}"
    );
    assert!(
        f["message"].as_str().unwrap().contains("pre-existing"),
        "{f}"
    );
    let polluters: Vec<&Value> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "polluter")
        .collect();
    assert!(
        polluters.is_empty(),
        "a polluter without a victim: {polluters:?}"
    );
    // No message ends in an empty list.
    for f in v["findings"].as_array().unwrap() {
        let m = f["message"].as_str().unwrap().trim_end();
        assert!(!m.ends_with(':') && !m.ends_with(": ()"), "{f}");
    }
    let writer = test(&v, WRITER);
    assert_eq!(writer["bucket"], "polluter", "{writer}");
    assert!(
        !strs(&writer["signals"]).contains(&"polluter".to_string()),
        "{writer}"
    );
}

#[test]
fn a_test_holding_the_db_lease_is_stable_and_no_finding() {
    let (repo, base) = db_repo();
    repo.write(
        "tests/test_writer.py",
        db_writer("@pytest.mark.writes(\"db\")\n"),
    );
    let head = repo.commit("add a test that writes the db under its lease");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    let writer = test(&v, WRITER);
    assert_eq!(writer["bucket"], "stable", "{writer}");
    assert_eq!(strs(&writer["dirty_groups"]), Vec::<String>::new());
    let signals = strs(&writer["signals"]);
    assert!(
        !signals
            .iter()
            .any(|s| s.starts_with("lease-violation") || s == "polluter"),
        "{writer}"
    );
    assert_eq!(bucket(&v, READER), "stable");
    assert_eq!(
        v["findings"].as_array().unwrap().len(),
        0,
        "{}",
        v["findings"]
    );
    assert_eq!(v["pairs"].as_array().unwrap().len(), 0);
}

// ---------------------------------------------------------------------------------------------
// The fixture decision table
// ---------------------------------------------------------------------------------------------

const PARSE_V1: &str =
    "def parse(text):\n    key, value = text.split(\"=\")\n    return {key.strip(): int(value)}\n";

const PARSE_TEST: &str = r#"import json
import pathlib

from parse import parse

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "parse"


def test_parse_matches_expected():
    expected = json.loads((FIXTURES / "expected.json").read_text())
    got = {}
    for line in ("a=1", "b=2"):
        got.update(parse(line))
    assert got == expected
"#;

const PARSE_ID: &str = "tests/test_parse.py::test_parse_matches_expected";
const EXPECTED: &str = "tests/fixtures/parse/expected.json";

/// A base with a parser, its test, and the test's expected data under `tests/fixtures/parse/`
/// (a default fixture group named `parse`).
fn parse_repo() -> (TestRepo, String) {
    let repo = TestRepo::new();
    repo.write("src/parse.py", PARSE_V1)
        .write("tests/test_parse.py", PARSE_TEST)
        .write(EXPECTED, "{\"a\": 1, \"b\": 2}\n");
    let base = repo.commit("parser");
    (repo, base)
}

#[test]
fn a_code_only_patch_has_no_fixture_delta_and_the_other_gates_decide() {
    let (repo, _) = parse_repo();
    repo.write(
        "tests/test_skipped.py",
        "import pytest\n\n\n@pytest.mark.skip(reason=\"waiting for the new parser\")\ndef test_later():\n    assert False\n",
    );
    let base = repo.commit("parser with a skipped test");
    // Same behaviour, new spelling, and a new plain test: code only.
    repo.write(
        "src/parse.py",
        "def parse(text):\n    key, _, value = text.partition(\"=\")\n    return {key.strip(): int(value)}\n",
    )
    .write(
        "tests/test_parse_more.py",
        "from parse import parse\n\n\ndef test_spaces():\n    assert parse(\" c =3\") == {\"c\": 3}\n",
    );
    let head = repo.commit("refactor parse");

    let (run, v) = repo.audit(&base, &head).seeds(1).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    assert_eq!(v["fixtures"]["changed"], serde_json::json!([]));
    assert_eq!(v["fixtures"]["coupled"], serde_json::json!([]));
    assert_eq!(v["fixtures"]["replay"], serde_json::json!([]));
    assert_eq!(bucket(&v, PARSE_ID), "stable");
    assert_eq!(
        bucket(&v, "tests/test_parse_more.py::test_spaces"),
        "stable"
    );
    // A skip the base already had is no new skip: the skipped bucket, within budget.
    let later = test(&v, "tests/test_skipped.py::test_later");
    assert_eq!(later["bucket"], "skipped", "{later}");
    assert_eq!(
        outcome(&v, "tests/test_skipped.py::test_later", "0"),
        "skipped"
    );
    assert_eq!(v["budget"]["breaches"], serde_json::json!([]));
    assert_eq!(v["budget"]["used"]["new_skips"], 0);
    assert_eq!(v["seeds"], serde_json::json!([0, 1]));
    assert_eq!(strs(&v["orders"]), ["0", "rev", "1"]);
}

#[test]
fn code_and_its_expected_data_edited_together_is_a_redefined_test_and_rejected() {
    let (repo, base) = parse_repo();
    repo.write(
        "src/parse.py",
        "def parse(text):\n    key, value = text.split(\"=\")\n    return {key.strip(): int(value) * 10}\n",
    )
    .write(EXPECTED, "{\"a\": 10, \"b\": 20}\n");
    let head = repo.commit("parse in tenths");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    assert_eq!(
        v["fixtures"]["changed"],
        serde_json::json!([{"path": EXPECTED, "group": "parse", "change": "modified"}])
    );
    assert_eq!(strs(&v["fixtures"]["coupled"]), [PARSE_ID]);
    let replay = &v["fixtures"]["replay"];
    assert_eq!(
        replay,
        &serde_json::json!([{"nodeid": PARSE_ID, "head": "passed", "base": "failed", "reading": "redefined", "files": [EXPECTED]}])
    );
    // The test itself is green in every order: only the answer key moved.
    assert_eq!(bucket(&v, PARSE_ID), "stable");
    let f = finding(&v, "redefined", PARSE_ID);
    assert_eq!(f["blocking"], true, "{f}");
}

/// The attack on the lenient replay: a conftest the patch adds drops the coupled test from
/// any session whose expected data is still the base's, so the replay on the base's bytes does
/// not run it. A test of the base's that the base's bytes do not make is redefined, not
/// inconclusive.
#[test]
fn a_conftest_that_hides_a_coupled_test_from_the_replay_does_not_hide_the_redefinition() {
    let (repo, base) = parse_repo();
    repo.write(
        "src/parse.py",
        "def parse(text):\n    key, value = text.split(\"=\")\n    return {key.strip(): int(value) * 10}\n",
    )
    .write(EXPECTED, "{\"a\": 10, \"b\": 20}\n")
    .write(
        "tests/conftest.py",
        "import pathlib\n\n\ndef pytest_collection_modifyitems(items):\n    \
         expected = pathlib.Path(__file__).parent / 'fixtures' / 'parse' / 'expected.json'\n    \
         if '10' not in expected.read_text():\n        \
         items[:] = [i for i in items if 'matches_expected' not in i.nodeid]\n",
    );
    let head = repo.commit("parse in tenths, and hide the test from the old answer key");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let replay = &v["fixtures"]["replay"];
    assert_eq!(
        replay,
        &serde_json::json!([{"nodeid": PARSE_ID, "head": "passed", "base": null, "reading": "redefined", "files": [EXPECTED]}])
    );
    let f = finding(&v, "redefined", PARSE_ID);
    assert_eq!(f["blocking"], true, "{f}");
}

#[test]
fn reordering_the_keys_of_a_json_fixture_is_cosmetic_and_passes_flagged() {
    let (repo, base) = parse_repo();
    repo.write(EXPECTED, "{\n  \"b\": 2,\n  \"a\": 1\n}\n");
    let head = repo.commit("reformat expected.json");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    assert_eq!(
        v["fixtures"]["changed"],
        serde_json::json!([{"path": EXPECTED, "group": "parse", "change": "modified"}])
    );
    assert_eq!(strs(&v["fixtures"]["coupled"]), [PARSE_ID]);
    assert_eq!(
        v["fixtures"]["replay"],
        serde_json::json!([{"nodeid": PARSE_ID, "head": "passed", "base": "passed", "reading": "cosmetic", "files": [EXPECTED]}])
    );
    // Passes, but flagged for a one-line justification.
    let f = finding(&v, "cosmetic", PARSE_ID);
    assert_eq!(f["blocking"], false, "{f}");
}

#[test]
fn a_new_test_reading_only_a_new_fixture_is_additive_and_passes() {
    let (repo, base) = parse_repo();
    repo.write("tests/fixtures/parse/negative.json", "{\"n\": -4}\n")
        .write(
            "tests/test_negative.py",
            "import json\nimport pathlib\n\nfrom parse import parse\n\n\n\
             def test_negative_values():\n    \
             p = pathlib.Path(__file__).parent / \"fixtures\" / \"parse\" / \"negative.json\"\n    \
             assert parse(\"n=-4\") == json.loads(p.read_text())\n",
        );
    let head = repo.commit("negative values, with their fixture");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    let new_id = "tests/test_negative.py::test_negative_values";
    assert_eq!(
        v["fixtures"]["changed"],
        serde_json::json!([{"path": "tests/fixtures/parse/negative.json", "group": "parse", "change": "added"}])
    );
    assert_eq!(strs(&v["fixtures"]["coupled"]), [new_id]);
    let replay = v["fixtures"]["replay"].as_array().unwrap();
    assert_eq!(replay.len(), 1, "{}", v["fixtures"]);
    assert_eq!(replay[0]["nodeid"], new_id);
    assert_eq!(replay[0]["head"], "passed");
    assert_eq!(replay[0]["reading"], "additive", "{}", replay[0]);
    assert_eq!(finding(&v, "additive", new_id)["blocking"], false);
    assert_eq!(bucket(&v, new_id), "stable");
    assert_eq!(test(&v, new_id)["edited_by_patch"], true);
}

/// A case the patch adds to a data file its test module parametrizes over is a new test whose
/// node id the base's bytes do not make: the replay on the base's bytes cannot collect it, and
/// its reading is additive (the case exists only with the patch's bytes), not an error.
#[test]
fn a_new_case_of_a_modified_data_file_is_additive_where_the_base_bytes_have_no_such_case() {
    let (repo, base, head) = common::new_case_in_a_data_file();
    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    let replay = v["fixtures"]["replay"].as_array().unwrap();
    let of = |id: &str| {
        replay
            .iter()
            .find(|r| r["nodeid"] == id)
            .unwrap_or_else(|| panic!("{id} not in {}", v["fixtures"]))
    };
    let new = of("tests/test_cases.py::test_case[3]");
    assert_eq!(new["head"], "passed", "{new}");
    assert_eq!(new["base"], Value::Null, "{new}");
    assert_eq!(new["reading"], "additive", "{new}");
    let old = of("tests/test_cases.py::test_case[1]");
    assert_eq!(old["base"], "passed", "{old}");
    assert_eq!(old["reading"], "cosmetic", "{old}");
}

/// A counter file in `/tmp`, shared by every pytest process of one audit: the test fails on its
/// second execution only. With `--jobs 1` the file-order and reversed runs execute first and
/// second, so one matrix order fails; its confirmation rerun (the fourth execution) passes: the
/// same order gives two outcomes.
fn flaky_test_source(counter: &str) -> String {
    format!(
        "COUNTER = {counter:?}\n\n\n\
         def test_sometimes():\n    \
         try:\n        with open(COUNTER) as f:\n            n = int(f.read() or 0)\n    \
         except FileNotFoundError:\n        n = 0\n    \
         with open(COUNTER, \"w\") as f:\n        f.write(str(n + 1))\n    \
         assert n != 1, \"the second execution fails\"\n\n\n\
         def test_steady():\n    assert True\n"
    )
}

#[test]
fn a_pre_existing_flaky_test_is_flaky_gets_a_suggested_freeze_and_does_not_reject() {
    let repo = TestRepo::new();
    let counter = format!(
        "/tmp/fixgate-flaky-{}",
        repo.path().file_name().unwrap().to_string_lossy()
    );
    let _ = std::fs::remove_file(&counter);
    repo.write("tests/test_flaky.py", flaky_test_source(&counter))
        .write("src/util.py", "def double(x):\n    return 2 * x\n");
    let base = repo.commit("base with a flaky test");
    repo.write("src/util.py", "def double(x):\n    return x + x\n");
    let head = repo.commit("unrelated code change");

    // The counter is host state shared between runs, which contained runs cannot write (a
    // write to /tmp is an outside write): this test of flaky detection runs uncontained.
    let out = common::fixgate_command()
        .args([
            "audit", "--base", &base, "--head", &head, "--format", "json", "--quiet",
        ])
        .args(["--seeds", "0", "--jobs", "1", "--python"])
        .arg(common::python())
        .arg("--cache-dir")
        .arg(repo.cache.path())
        .current_dir(repo.path())
        .env("FIXGATE_CONTAINMENT", "none")
        .output()
        .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    let v = run.json();
    let _ = std::fs::remove_file(&counter);
    let id = "tests/test_flaky.py::test_sometimes";
    let t = test(&v, id);
    let outcomes: Vec<&str> = ["0", "rev"]
        .iter()
        .map(|l| t["outcomes"][*l].as_str().unwrap())
        .collect();
    assert!(
        outcomes.contains(&"failed") && outcomes.contains(&"passed"),
        "the counter makes one matrix order fail: {t}"
    );
    assert_eq!(t["bucket"], "flaky", "{t}");
    assert_eq!(t["introduced"], false, "{t}");
    assert_eq!(bucket(&v, "tests/test_flaky.py::test_steady"), "stable");
    // No fixture changed, flaky on repeat: nondeterminism, not drift; pass with a freeze entry
    // suggested.
    assert_verdict(&run, &v, exit::PASS, "pass");
    assert_eq!(v["fixtures"]["changed"], serde_json::json!([]));
    assert_eq!(v["pairs"], serde_json::json!([]));
    let f = finding(&v, "flaky", id);
    assert_eq!(f["blocking"], false, "{f}");
    let suggested = &v["freeze"]["suggested"][id];
    assert!(suggested.is_object(), "{}", v["freeze"]);
    for field in ["frozen_on", "expires", "owner", "reason"] {
        assert!(
            !suggested[field].is_null(),
            "suggested entry lacks {field}: {suggested}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Buckets
// ---------------------------------------------------------------------------------------------

/// A base with one passing test module; the head adds `tests/test_new.py` with `new_tests`.
fn base_plus(new_tests: &str) -> (TestRepo, String, String) {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_ok.py",
        "def test_one():\n    assert 1 + 1 == 2\n",
    );
    let base = repo.commit("base");
    repo.write("tests/test_new.py", new_tests);
    let head = repo.commit("head");
    (repo, base, head)
}

#[test]
fn a_new_test_failing_in_every_order_is_failing_and_rejects() {
    let (repo, base, head) = base_plus(
        "def add(a, b):\n    return a + b\n\n\ndef test_add():\n    assert add(2, 2) == 5\n",
    );
    let (run, v) = repo.audit(&base, &head).seeds(1).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let id = "tests/test_new.py::test_add";
    let t = test(&v, id);
    assert_eq!(t["bucket"], "failing", "{t}");
    for l in ["0", "rev", "1"] {
        assert_eq!(outcome(&v, id, l), "failed");
    }
    assert!(
        t["message"].as_str().unwrap_or("").contains("assert"),
        "{t}"
    );
    assert_eq!(finding(&v, "failing", id)["blocking"], true);
    assert_eq!(bucket(&v, "tests/test_ok.py::test_one"), "stable");
}

#[test]
fn a_test_the_patch_broke_passes_six_base_runs_before_its_failure_is_the_patchs() {
    let repo = TestRepo::new();
    repo.write("app.py", "def add(a, b):\n    return a + b\n")
        .write(
            "tests/test_app.py",
            "from app import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n",
        );
    let base = repo.commit("base");
    repo.write("app.py", "def add(a, b):\n    return a - b\n");
    let head = repo.commit("breaks add");
    let (run, v) = repo.audit(&base, &head).seeds(1).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let id = "tests/test_app.py::test_add";
    assert_eq!(bucket(&v, id), "failing", "{}", test(&v, id));
    let f = finding(&v, "failing", id);
    assert_eq!(f["introduced"], true, "{f}");
    assert_eq!(f["blocking"], true, "{f}");
    // Red in every order of the head and alone: the base runs it alone six times, each green.
    let checks: Vec<&str> = v["graph"]["all_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["label"].as_str())
        .filter(|l| l.starts_with(&format!("base-check(failing {id})")))
        .collect();
    assert_eq!(checks.len(), 6, "{checks:?}");
}

#[test]
fn two_victims_of_one_polluter_the_base_has_too_are_checked_together_and_pre_existing() {
    let repo = TestRepo::new();
    repo.write("state.py", "X = []\n")
        .write(
            "tests/test_a_setter.py",
            "import state\n\n\ndef test_setter():\n    state.X.append(1)\n",
        )
        .write(
            "tests/test_b1.py",
            "import state\n\n\ndef test_v1():\n    assert state.X == []\n",
        )
        .write(
            "tests/test_b2.py",
            "import state\n\n\ndef test_v2():\n    assert state.X == []\n",
        );
    let base = repo.commit("base with a polluter and two victims");
    repo.write("README.md", "docs\n");
    let head = repo.commit("docs only");
    let (run, v) = repo.audit(&base, &head).seeds(2).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    let labels: Vec<&str> = v["graph"]["all_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["label"].as_str())
        .collect();
    assert!(
        labels
            .iter()
            .any(|l| l.starts_with("base-check(pair batch "))
            && labels
                .iter()
                .any(|l| l.starts_with("base-check(alone batch "))
            && !labels.iter().any(|l| l.contains("base-check(base-check(")),
        "{labels:?}"
    );
    for victim in ["tests/test_b1.py::test_v1", "tests/test_b2.py::test_v2"] {
        let f = finding(&v, "order-dependent", victim);
        assert_eq!(f["introduced"], false, "the base has it too: {f}");
    }
}

#[test]
fn a_fixture_that_raises_in_setup_is_the_error_bucket() {
    let (repo, base, head) = base_plus(
        "import pytest\n\n\n@pytest.fixture\ndef database():\n    raise RuntimeError(\"cannot connect\")\n\n\n\
         def test_uses_database(database):\n    assert database\n",
    );
    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let id = "tests/test_new.py::test_uses_database";
    assert_eq!(bucket(&v, id), "error", "{}", test(&v, id));
    assert_eq!(outcome(&v, id, "0"), "error");
    assert_eq!(outcome(&v, id, "rev"), "error");
    assert_eq!(finding(&v, "error", id)["blocking"], true);
}

#[test]
fn a_test_that_exits_the_interpreter_is_crashed_and_the_others_still_run() {
    let (repo, base, head) = base_plus(
        "import os\n\n\ndef test_before():\n    pass\n\n\ndef test_exits():\n    os._exit(3)\n\n\n\
         def test_after():\n    pass\n",
    );
    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let id = "tests/test_new.py::test_exits";
    assert_eq!(bucket(&v, id), "crashed", "{}", test(&v, id));
    assert_eq!(outcome(&v, id, "0"), "crashed");
    assert_eq!(outcome(&v, id, "rev"), "crashed");
    for other in [
        "tests/test_new.py::test_before",
        "tests/test_new.py::test_after",
        "tests/test_ok.py::test_one",
    ] {
        assert_eq!(bucket(&v, other), "stable", "{}", test(&v, other));
    }
    assert_eq!(finding(&v, "crashed", id)["blocking"], true);
}

#[test]
fn a_test_that_outlives_the_test_timeout_is_the_timeout_bucket() {
    let (repo, base, head) = base_plus(
        "import time\n\n\ndef test_sleeps():\n    time.sleep(600)\n\n\ndef test_quick():\n    pass\n",
    );
    let started = std::time::Instant::now();
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(0)
        // The timeout bounds a process outside tests too (its start, its collection): 5 s, not 2,
        // so that a loaded machine's start is not what times out.
        .args(&["--test-timeout", "5"])
        .report_both_ways();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(150),
        "the sleeping test was not killed at its timeout"
    );
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let id = "tests/test_new.py::test_sleeps";
    assert_eq!(bucket(&v, id), "timeout", "{}", test(&v, id));
    assert_eq!(outcome(&v, id, "0"), "timeout");
    assert_eq!(outcome(&v, id, "rev"), "timeout");
    assert_eq!(bucket(&v, "tests/test_new.py::test_quick"), "stable");
    assert_eq!(finding(&v, "timeout", id)["blocking"], true);
}

/// `--timeout` is a hard deadline for the whole audit (issue 54): when it passes, the runs are
/// stopped and their processes gone, the head is reported unverified (exit 4) with the reason,
/// and what finished before it is in the cache, where the next audit finds it.
#[test]
fn the_timeout_stops_the_audit_at_its_deadline_and_keeps_what_finished() {
    let marker = unique("fixgate-deadline");
    let (repo, base, head) = base_plus(&format!(
        "import subprocess\n\n\ndef test_sleeps():\n    \
         subprocess.run(['/bin/sh', '-c', 'sleep 600', '{marker}'])\n"
    ));
    let audit =
        repo.audit(&base, &head)
            .seeds(1)
            .args(&["--timeout", "20s", "--test-timeout", "900"]);
    // Far beyond the deadline, far below the sleep: the bound is what is tested, not a speed.
    let run = audit.run_within(std::time::Duration::from_secs(300), || {
        format!("processes: {:?}", processes_with(&marker))
    });
    let left = processes_with(&marker);
    for pid in &left {
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    assert_eq!(run.code, exit::UNVERIFIED, "{run:?}");
    let v = run.json();
    assert_eq!(v["verdict"], "unverified", "{v}");
    let reason = v["reasons"][0].as_str().unwrap();
    assert!(
        reason.starts_with("the --timeout of 20s passed before its audit finished"),
        "{reason}"
    );
    assert_eq!(v["head"]["rev"], head.as_str());
    assert!(left.is_empty(), "the audit left its runs behind: {left:?}");
    // The human report says the verdict and why, and nothing of an audit that did not end.
    let human = audit.format("human").run();
    assert_eq!(human.code, exit::UNVERIFIED, "{human:?}");
    assert!(human
        .stdout
        .starts_with("UNVERIFIED (exit 4)\n  - the --timeout of 20s"));
    assert!(!human.stdout.contains("graph:"), "{}", human.stdout);

    // The base's steps finished before the deadline: the next audit of the base reads them.
    let (run, v) = repo.audit(&base, &base).seeds(1).report();
    assert_eq!(run.code, 0, "{run:?}");
    assert!(v["graph"]["cached"].as_u64().unwrap() > 0, "{}", v["graph"]);
    let executed: Vec<&str> = v["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["label"].as_str().unwrap())
        .collect();
    assert!(
        !executed.contains(&"collect(base)"),
        "the base's collection ran again: {executed:?}"
    );
}

/// A run the deadline cancels while a later step waits on it (the reversed order hangs only
/// there: the state the first test leaves is missing) is the deadline's doing, not an error: the
/// audit is unverified with the reason, never exit 2 ("seed run rev failed: cancelled", seen on
/// freezegun's history, whose asyncio test hangs in reversed order).
#[test]
fn a_run_cancelled_by_the_timeout_while_waited_on_is_unverified_not_an_error() {
    let marker = unique("fixgate-deadline-rev");
    let (repo, base, head) = base_plus(&format!(
        "import subprocess\n\nSTATE = []\n\n\ndef test_first():\n    STATE.append(1)\n\n\n\
         def test_sleeps_without_it():\n    if not STATE:\n        \
         subprocess.run(['/bin/sh', '-c', 'sleep 600', '{marker}'])\n"
    ));
    let run = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--timeout", "15s", "--test-timeout", "900"])
        .run_within(std::time::Duration::from_secs(300), || {
            format!("processes: {:?}", processes_with(&marker))
        });
    for pid in processes_with(&marker) {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert_eq!(run.code, exit::UNVERIFIED, "{run:?}");
    let v = run.json();
    assert!(
        v["reasons"][0]
            .as_str()
            .unwrap()
            .starts_with("the --timeout of 15s passed before its audit finished"),
        "{v}"
    );
}

#[test]
fn a_timeout_is_a_duration_and_a_wrong_one_says_how_to_write_it() {
    let (repo, base, head) = base_plus("def test_new():\n    pass\n");
    let run = repo.audit(&base, &head).args(&["--timeout", "soon"]).run();
    assert_eq!(run.code, exit::ERROR, "{run:?}");
    assert!(
        run.stderr
            .contains("\"soon\" is not a duration: write a positive duration such as 90s"),
        "{}",
        run.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// Order dependence and the polluter search
// ---------------------------------------------------------------------------------------------

/// Each finding says where it is (the test's file and line) and has an id an agent can track
/// across audits (issue 54): the same patch audited again, from nothing, gives the same ids.
#[test]
fn findings_have_a_place_and_an_id_that_reruns_keep() {
    let repo = TestRepo::new();
    repo.write("settings.txt", "debug=off\n").write(
        "tests/test_b_settings.py",
        "import os\n\n\ndef test_debug_is_off():\n    with open(\"settings.txt\") as f:\n        \
         assert f.read() == \"debug=off\\n\"\n",
    );
    let base = repo.commit("base");
    repo.write(
        "tests/test_a_debug.py",
        "def test_turns_debug_on():\n    with open(\"settings.txt\", \"w\") as f:\n        f.write(\"debug=on\\n\")\n",
    );
    let head = repo.commit("a test that writes settings.txt");
    let ids = |v: &Value| -> Vec<(String, String)> {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["kind"].as_str().unwrap().to_owned(),
                    f["id"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let first = repo
        .audit(&base, &head)
        .seeds(1)
        .report_exiting(exit::REJECT);
    let victim = finding(
        &first,
        "order-dependent",
        "tests/test_b_settings.py::test_debug_is_off",
    );
    assert_eq!(victim["file"], "tests/test_b_settings.py", "{victim}");
    assert_eq!(victim["line"], 4, "{victim}");
    let polluter = finding(
        &first,
        "polluter",
        "tests/test_a_debug.py::test_turns_debug_on",
    );
    assert_eq!(polluter["file"], "tests/test_a_debug.py", "{polluter}");
    assert_eq!(polluter["line"], 1, "{polluter}");
    let found = ids(&first);
    assert!(
        found
            .iter()
            .all(|(kind, id)| id.starts_with(&format!("{kind}-"))),
        "{found:?}"
    );
    let mut unique: Vec<&String> = found.iter().map(|(_, id)| id).collect();
    unique.dedup();
    assert_eq!(
        unique.len(),
        found.len(),
        "two findings share an id: {found:?}"
    );
    let again = repo
        .audit(&base, &head)
        .seeds(1)
        .args(&["--no-cache"])
        .report_exiting(exit::REJECT);
    assert_eq!(ids(&again), found);
}

#[test]
fn a_test_that_writes_a_file_another_test_reads_is_found_as_their_pair() {
    let repo = TestRepo::new();
    repo.write("settings.txt", "debug=off\n").write(
        "tests/test_b_settings.py",
        "def test_debug_is_off():\n    with open(\"settings.txt\") as f:\n        assert f.read() == \"debug=off\\n\"\n",
    );
    let base = repo.commit("base");
    repo.write(
        "tests/test_a_debug.py",
        "def test_turns_debug_on():\n    with open(\"settings.txt\", \"w\") as f:\n        f.write(\"debug=on\\n\")\n",
    );
    let head = repo.commit("a test that writes settings.txt");

    let (run, v) = repo.audit(&base, &head).seeds(1).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let writer = "tests/test_a_debug.py::test_turns_debug_on";
    let reader = "tests/test_b_settings.py::test_debug_is_off";
    assert_eq!(outcome(&v, reader, "0"), "failed");
    assert_eq!(outcome(&v, reader, "rev"), "passed");
    assert_eq!(bucket(&v, reader), "order-dependent");
    assert_eq!(bucket(&v, writer), "polluter");
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{}", v["pairs"]);
    assert_eq!(pairs[0]["kind"], "polluter");
    assert_eq!(pairs[0]["polluter"], writer);
    assert_eq!(pairs[0]["victim"], reader);
    assert_eq!(strs(&pairs[0]["culprits"]), [writer]);
    assert_eq!(pairs[0]["introduced"], true);
    assert!(
        pairs[0]["repro"]
            .as_str()
            .unwrap()
            .contains(&format!("{writer} {reader}")),
        "{}",
        pairs[0]
    );
    assert_eq!(finding(&v, "polluter", writer)["blocking"], true);
}

const TWO_PARTS: &str = r#"SEEN = set()


def test_victim_needs_a_clean_slate():
    assert not {"a", "b"} <= SEEN


def test_filler_1():
    pass


def test_sets_a():
    SEEN.add("a")


def test_filler_2():
    pass


def test_filler_3():
    pass


def test_filler_4():
    pass


def test_sets_b():
    SEEN.add("b")


def test_filler_5():
    pass
"#;

#[test]
fn a_victim_broken_only_by_two_tests_together_gets_the_minimal_set_of_two() {
    let repo = TestRepo::new();
    // The base has the victim and the fillers; the patch adds the two tests that together break it.
    let base_src: String = TWO_PARTS
        .replace("def test_sets_a():\n    SEEN.add(\"a\")\n\n\n", "")
        .replace("def test_sets_b():\n    SEEN.add(\"b\")\n\n\n", "");
    repo.write("tests/test_parts.py", &base_src);
    let base = repo.commit("base");
    repo.write("tests/test_parts.py", TWO_PARTS);
    let head = repo.commit("add two tests that fill SEEN");

    let seeds = [1u64, 2, 3];
    let (run, v) = repo
        .audit(&base, &head)
        .args(&["--seed-list", "1,2,3"])
        .report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let victim = "tests/test_parts.py::test_victim_needs_a_clean_slate";
    let a = "tests/test_parts.py::test_sets_a";
    let b = "tests/test_parts.py::test_sets_b";
    // File order: the victim runs first and passes; reversed: both parts ran before it.
    assert_eq!(outcome(&v, victim, "0"), "passed");
    assert_eq!(outcome(&v, victim, "rev"), "failed");
    // Every shuffled order agrees with the rule "fails iff both parts ran before it".
    for seed in seeds {
        let s = seed.to_string();
        let order = repo.fixgate_py(&["run", "--seed", &s, "--format", "json", "--quiet"]);
        assert_eq!(order.code, 0, "{order:?}");
        let order = strs(&order.json()["result"]["order"]);
        let pos = |id: &str| order.iter().position(|o| o == id).unwrap();
        let expected = if pos(a) < pos(victim) && pos(b) < pos(victim) {
            "failed"
        } else {
            "passed"
        };
        assert_eq!(outcome(&v, victim, &s), expected, "seed {seed}: {order:?}");
    }

    assert_eq!(bucket(&v, victim), "order-dependent");
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{}", v["pairs"]);
    let pair = &pairs[0];
    assert_eq!(pair["victim"], victim);
    assert_eq!(pair["kind"], "polluter");
    assert!(pair["unexplained"].is_null(), "{pair}");
    let mut culprits = strs(&pair["culprits"]);
    culprits.sort();
    assert_eq!(culprits, [a, b], "the minimal set is exactly the two parts");
    assert!(
        [a, b].contains(&pair["polluter"].as_str().unwrap()),
        "{pair}"
    );
    let repro = pair["repro"].as_str().unwrap();
    assert!(
        repro.contains(a) && repro.contains(b) && repro.contains(victim),
        "{repro}"
    );
    assert_eq!(bucket(&v, a), "polluter");
    assert_eq!(bucket(&v, b), "polluter");
    for i in 1..=5 {
        let filler = format!("tests/test_parts.py::test_filler_{i}");
        assert_eq!(bucket(&v, &filler), "stable", "{}", test(&v, &filler));
    }
}

/// The two commands of a pair's `repro`: `CMD  # fails; the victim alone passes: CMD`.
fn repro_commands(repro: &str) -> (Vec<String>, Vec<String>) {
    let (both, rest) = repro
        .split_once("  # ")
        .unwrap_or_else(|| panic!("no comment in {repro}"));
    let alone = rest
        .split_once(": ")
        .unwrap_or_else(|| panic!("no second command in {repro}"))
        .1;
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect();
    (words(both), words(alone))
}

/// Runs a reproduction command in the repository with the test interpreter as `python`.
fn run_repro(repo: &TestRepo, cmd: &[String]) -> Option<i32> {
    assert_eq!(cmd[0], "python", "{cmd:?}");
    std::process::Command::new(common::python())
        .args(&cmd[1..])
        .current_dir(repo.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap()
        .status
        .code()
}

const REGISTRY_TESTS: &str = r#"REGISTRY = {}


def test_registry_starts_empty():
    assert REGISTRY == {}


def test_register_plugin():
    REGISTRY["csv"] = "csv_reader"
    assert "csv" in REGISTRY
"#;

#[test]
fn the_working_tree_is_the_default_head_and_the_audit_leaves_it_untouched() {
    let repo = TestRepo::new();
    repo.write("settings.txt", "debug=off\n").write(
        "tests/test_b_settings.py",
        "def test_debug_is_off():\n    with open(\"settings.txt\") as f:\n        assert f.read() == \"debug=off\\n\"\n",
    );
    let base = repo.commit("base");
    // The patch is not committed: the head is the working tree.
    repo.write(
        "tests/test_a_debug.py",
        "def test_turns_debug_on():\n    with open(\"settings.txt\", \"w\") as f:\n        f.write(\"debug=on\\n\")\n",
    );
    let before = tree_bytes(repo.path());
    let run = repo.fixgate_py(&[
        "audit", "--base", &base, "--seeds", "0", "--format", "json", "--quiet",
    ]);
    let v = run.json();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    assert_eq!(v["head"]["rev"], "worktree");
    assert!(v["head"]["commit"].is_null(), "{}", v["head"]);
    assert_eq!(v["base"]["commit"], base.as_str());
    assert_eq!(
        v["pairs"][0]["polluter"],
        "tests/test_a_debug.py::test_turns_debug_on"
    );
    assert_eq!(
        before,
        tree_bytes(repo.path()),
        "the audit changed the working tree (the writer ran outside its sandbox?)"
    );
}

#[test]
fn an_order_dependent_pair_the_base_already_has_is_known_debt_unless_strict() {
    let repo = TestRepo::new();
    repo.write("tests/test_registry.py", REGISTRY_TESTS)
        .write("src/fmt.py", "def shout(s):\n    return s.upper()\n")
        .write(
            "tests/test_fmt.py",
            "from fmt import shout\n\n\ndef test_shout():\n    assert shout(\"a\") == \"A\"\n",
        );
    let base = repo.commit("base with an order-dependent pair");
    repo.write("src/fmt.py", "def shout(s):\n    return s.upper() + \"\"\n");
    let head = repo.commit("an unrelated patch");
    let victim = "tests/test_registry.py::test_registry_starts_empty";
    let polluter = "tests/test_registry.py::test_register_plugin";

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{}", v["pairs"]);
    assert_eq!(pairs[0]["victim"], victim);
    assert_eq!(pairs[0]["polluter"], polluter);
    assert_eq!(pairs[0]["kind"], "polluter");
    assert_eq!(pairs[0]["introduced"], false, "{}", pairs[0]);
    let t = test(&v, victim);
    assert_eq!(t["bucket"], "order-dependent", "{t}");
    assert_eq!(t["introduced"], false, "{t}");
    assert_eq!(t["edited_by_patch"], false, "{t}");
    let f = finding(&v, "order-dependent", victim);
    assert_eq!(
        (&f["introduced"], &f["blocking"]),
        (&Value::Bool(false), &Value::Bool(false)),
        "{f}"
    );
    assert!(
        v["freeze"]["suggested"][victim].is_object(),
        "known debt comes with a suggested freeze entry: {}",
        v["freeze"]
    );

    // The reproduction is one line that really reproduces: both fail, the victim alone passes.
    let repro = pairs[0]["repro"].as_str().unwrap();
    let (both, alone) = repro_commands(repro);
    assert_eq!(
        both,
        [
            "python",
            "-m",
            "pytest",
            "-p",
            "no:randomly",
            "--cache-clear",
            polluter,
            victim
        ]
    );
    assert_eq!(run_repro(&repo, &both), Some(1), "{repro}");
    assert_eq!(run_repro(&repo, &alone), Some(0), "{repro}");

    let (run, v) = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--strict"])
        .report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    assert_eq!(v["strict"], true);
    assert_eq!(v["pairs"][0]["introduced"], false);
    assert_eq!(finding(&v, "order-dependent", victim)["blocking"], true);

    // A patch that edits the victim, where its base version fails on the head's code in the
    // orders the head's fails in (a message added to the assertion), hid nothing: the debt stays
    // the base's, named as edited (issue 50; tests/tamper.rs has an edit that decides the
    // outcome, which makes it the patch's).
    repo.write(
        "tests/test_registry.py",
        REGISTRY_TESTS.replace(
            "    assert REGISTRY == {}\n",
            "    assert REGISTRY == {}, REGISTRY\n",
        ),
    );
    let edits_victim = repo.commit("touch the victim's assertion");
    let (run, v) = repo.audit(&base, &edits_victim).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    assert_eq!(test(&v, victim)["edited_by_patch"], true);
    let f = finding(&v, "order-dependent", victim);
    assert_eq!(f["blocking"], false, "{f}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("the edit hid nothing"),
        "{f}"
    );
    assert_eq!(
        v["edit_replay"][0]["reading"], "edit-hid-nothing",
        "{}",
        v["edit_replay"]
    );
    assert!(
        findings(&v, "edited-assertion").is_empty(),
        "{}",
        v["findings"]
    );
}

#[test]
fn a_test_that_chdirs_into_a_temp_dir_and_stays_there_is_the_polluter_of_relative_paths() {
    let repo = TestRepo::new();
    let reader = |name: &str| {
        format!(
            "def test_{name}():\n    with open(\"config/app.txt\") as f:\n        assert f.read() == \"ok\\n\"\n"
        )
    };
    repo.write("config/app.txt", "ok\n")
        .write("tests/test_a_config.py", reader("reads_config"));
    let base = repo.commit("base");
    repo.write(
        "tests/test_b_scratch.py",
        "import os\nimport tempfile\n\n\ndef test_works_in_a_scratch_dir():\n    \
         os.chdir(tempfile.mkdtemp())\n    \
         with open(\"scratch.txt\", \"w\") as f:\n        f.write(\"x\")\n    \
         assert os.path.exists(\"scratch.txt\")\n",
    )
    .write("tests/test_c_config.py", reader("reads_config_again"));
    let head = repo.commit("a test that changes directory");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let chdir = "tests/test_b_scratch.py::test_works_in_a_scratch_dir";
    let first = "tests/test_a_config.py::test_reads_config";
    let second = "tests/test_c_config.py::test_reads_config_again";
    // Node ids stay repo-relative even after the working directory moved.
    for t in v["tests"].as_array().unwrap() {
        let id = t["nodeid"].as_str().unwrap();
        assert!(id.starts_with("tests/test_"), "{id}");
        assert_eq!(t["outcomes"].as_object().unwrap().len(), 2, "{t}");
    }
    assert_eq!(v["tests"].as_array().unwrap().len(), 3);
    assert_eq!(bucket(&v, chdir), "polluter", "{}", test(&v, chdir));
    // File order: the second reader runs after the chdir; reversed: the first one does.
    assert_eq!(outcome(&v, second, "0"), "failed");
    assert_eq!(outcome(&v, second, "rev"), "passed");
    assert_eq!(outcome(&v, first, "0"), "passed");
    assert_eq!(outcome(&v, first, "rev"), "failed");
    for victim in [first, second] {
        assert_eq!(
            bucket(&v, victim),
            "order-dependent",
            "{}",
            test(&v, victim)
        );
        let pair = v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["victim"] == victim)
            .unwrap_or_else(|| panic!("no pair for {victim}: {}", v["pairs"]));
        assert_eq!(pair["kind"], "polluter", "{pair}");
        assert_eq!(strs(&pair["culprits"]), [chdir], "{pair}");
        assert!(pair["unexplained"].is_null(), "{pair}");
    }
}

#[test]
fn the_polluter_search_stays_within_its_bound_for_a_prefix_of_64_tests() {
    let repo = TestRepo::new();
    let mut src =
        String::from("STATE = {}\n\n\ndef test_000_polluter():\n    STATE[\"dirty\"] = True\n");
    for i in 1..64 {
        src.push_str(&format!("\n\ndef test_{i:03}_filler():\n    pass\n"));
    }
    src.push_str("\n\ndef test_999_victim():\n    assert STATE == {}\n");
    let base_src = src.replace("    STATE[\"dirty\"] = True\n", "    pass\n");
    repo.write("tests/test_many.py", &base_src);
    let base = repo.commit("base");
    repo.write("tests/test_many.py", &src);
    let head = repo.commit("the first test dirties STATE");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    let victim = "tests/test_many.py::test_999_victim";
    let polluter = "tests/test_many.py::test_000_polluter";
    assert_eq!(v["tests"].as_array().unwrap().len(), 65);
    // File order is where the victim fails, after exactly 64 tests: that prefix is bisected.
    assert_eq!(outcome(&v, victim, "0"), "failed");
    assert_eq!(outcome(&v, victim, "rev"), "passed");
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "{}", v["pairs"]);
    assert_eq!(strs(&pairs[0]["culprits"]), [polluter]);
    let runs = pairs[0]["search_runs"].as_u64().unwrap();
    let bound = 2 * 6 + 2; // 2·⌈log2 64⌉ + 2
    assert!(
        (1..=bound).contains(&runs),
        "the search took {runs} runs for a prefix of 64 (bound {bound})"
    );
    assert_eq!(bucket(&v, polluter), "polluter");
}

// ---------------------------------------------------------------------------------------------
// Budget, freeze and lock gates; exit codes
// ---------------------------------------------------------------------------------------------

#[test]
fn a_new_skip_marker_makes_the_patch_unverified_with_a_budget_breach() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_io.py",
        "import pytest\n\n\ndef test_reads():\n    assert True\n\n\ndef test_writes():\n    assert True\n",
    );
    let base = repo.commit("base");
    repo.write(
        "tests/test_io.py",
        "import pytest\n\n\ndef test_reads():\n    assert True\n\n\n\
         @pytest.mark.skip(reason=\"flaky on CI\")\ndef test_writes():\n    assert True\n",
    );
    let head = repo.commit("skip test_writes");
    let id = "tests/test_io.py::test_writes";

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::UNVERIFIED, "unverified");
    let breaches = strs(&v["budget"]["breaches"]);
    assert!(!breaches.is_empty(), "{}", v["budget"]);
    assert!(breaches.iter().any(|b| b.contains(id)), "{breaches:?}");
    assert_eq!(v["budget"]["limits"]["new_skips"], 0);
    assert_eq!(v["budget"]["used"]["new_skips"], 1);
    assert_eq!(bucket(&v, id), "skipped");
    assert_eq!(outcome(&v, id, "0"), "skipped");
    let f = finding(&v, "new-skip", id);
    assert!(f["message"].as_str().unwrap().contains("skip"), "{f}");

    // A budget set outside the patch that allows one new skip: the same patch passes.
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--max-new-skips", "1"])
        .report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    assert_eq!(v["budget"]["breaches"], serde_json::json!([]));
}

#[test]
fn too_many_tests_for_the_budget_is_unverified() {
    let (repo, base, head) =
        base_plus("def test_two():\n    pass\n\n\ndef test_three():\n    pass\n");
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--max-tests", "2"])
        .report_both_ways();
    assert_verdict(&run, &v, exit::UNVERIFIED, "unverified");
    assert_eq!(v["budget"]["used"]["tests"], 3);
    assert_eq!(v["budget"]["limits"]["tests"], 2);
    assert_eq!(strs(&v["budget"]["breaches"]).len(), 1, "{}", v["budget"]);
}

fn ledger(entries: &[(&str, &str, &str)]) -> String {
    let mut m = serde_json::Map::new();
    for (nodeid, frozen_on, expires) in entries {
        m.insert(
            nodeid.to_string(),
            serde_json::json!({
                "frozen_on": frozen_on,
                "expires": expires,
                "owner": "alice@example.com",
                "reason": "waits for the new parser",
            }),
        );
    }
    serde_json::to_string_pretty(&Value::Object(m)).unwrap()
}

#[test]
fn an_expired_freeze_entry_of_the_base_stops_the_audit_with_exit_5() {
    let repo = TestRepo::new();
    let old = "tests/test_old.py::test_legacy_format";
    repo.write(
        "tests/test_old.py",
        "def test_legacy_format():\n    assert False\n\n\ndef test_current_format():\n    pass\n",
    )
    .write(
        ".fixgate/freeze.json",
        ledger(&[(old, "2024-01-01", "2024-03-31")]),
    );
    let base = repo.commit("base with a freeze entry");
    repo.write("README.md", "docs\n");
    let head = repo.commit("unrelated");

    let (run, v) = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--today", "2024-04-01"])
        .report_both_ways();
    assert_verdict(&run, &v, exit::EXPIRED_FREEZE, "expired-freeze");
    assert_eq!(strs(&v["freeze"]["expired"]), [old]);
    let reasons = strs(&v["reasons"]).join("\n");
    assert!(
        reasons.contains(old)
            && reasons.contains("alice@example.com")
            && reasons.contains("2024-03-31"),
        "the reason names the entry, its owner and its date: {reasons}"
    );
    assert_eq!(v["pytest_processes"], 0, "checked before any test runs");

    // On its last day the entry still holds: the test is deselected and counted.
    let (run, v) = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--today", "2024-03-31"])
        .report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    assert_eq!(strs(&v["freeze"]["active"]), [old]);
    assert_eq!(v["freeze"]["expired"], serde_json::json!([]));
}

#[test]
fn an_unknown_field_in_a_freeze_entry_is_a_warning_in_the_report_and_on_stderr() {
    let repo = TestRepo::new();
    let id = "tests/test_a.py::test_a";
    repo.write("tests/test_a.py", "def test_a():\n    pass\n");
    let base = repo.commit("base");
    let entry = ledger(&[(id, "2024-01-01", "2024-03-31")]).replacen(
        "\"owner\"",
        "\"ticket\": \"JIRA-1\",\n    \"owner\"",
        1,
    );
    assert!(entry.contains("ticket"), "{entry}");
    repo.write(".fixgate/freeze.json", &entry);
    let head = repo.commit("freeze with a typo'd field");
    // Not --quiet: the warning is said on standard error as well.
    let run = repo.fixgate_py(&[
        "audit",
        "--base",
        &base,
        "--head",
        &head,
        "--format",
        "json",
        "--seeds",
        "0",
        "--today",
        "2024-02-01",
    ]);
    let v = run.json();
    assert_verdict(&run, &v, exit::PASS, "pass");
    let warnings = strs(&v["warnings"]).join("\n");
    assert!(
        warnings.contains("unknown field \"ticket\" is ignored"),
        "{warnings}\n{v}"
    );
    assert!(run.stderr.contains("unknown field \"ticket\""), "{run:?}");
}

#[test]
fn active_freeze_entries_deselect_and_count_and_entries_the_patch_adds_are_reported() {
    let repo = TestRepo::new();
    let frozen = "tests/test_parse.py::test_unicode";
    let hidden = "tests/test_parse.py::test_new_emoji";
    repo.write(
        "tests/test_parse.py",
        "def test_ascii():\n    pass\n\n\ndef test_unicode():\n    assert False, \"known bug\"\n",
    )
    .write(
        ".fixgate/freeze.json",
        ledger(&[(frozen, "2025-01-01", "2025-12-31")]),
    );
    let base = repo.commit("base with a frozen test");
    // The patch adds a failing test and freezes it in the same breath.
    repo.write(
        "tests/test_parse.py",
        "def test_ascii():\n    pass\n\n\ndef test_unicode():\n    assert False, \"known bug\"\n\n\n\
         def test_new_emoji():\n    assert False, \"new bug\"\n",
    )
    .write(
        ".fixgate/freeze.json",
        ledger(&[
            (frozen, "2025-01-01", "2025-12-31"),
            (hidden, "2025-06-01", "2025-12-31"),
        ]),
    );
    let head = repo.commit("add test_new_emoji, frozen");

    let (run, v) = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--today", "2025-06-01"])
        .report_both_ways();
    assert_eq!(strs(&v["freeze"]["active"]), [frozen]);
    assert!(
        !has_test(&v, frozen),
        "a frozen test is deselected: {}",
        v["tests"]
    );
    assert_eq!(v["budget"]["used"]["frozen"], 1);
    assert_eq!(v["budget"]["used"]["tests"], 2);
    assert_eq!(strs(&v["freeze"]["added_by_patch"]), [hidden]);
    finding(&v, "freeze-added", hidden);
    // The ledger is read from the base: the patch's own entry hides nothing.
    assert_eq!(bucket(&v, hidden), "failing", "{}", test(&v, hidden));
    assert_verdict(&run, &v, exit::REJECT, "reject");

    // A frozen-count budget of zero is breached by the base's entry (reject still wins).
    let (_, v) = repo
        .audit(&base, &head)
        .seeds(0)
        .args(&["--today", "2025-06-01", "--max-frozen", "0"])
        .report_both_ways();
    assert!(
        strs(&v["budget"]["breaches"])
            .iter()
            .any(|b| b.contains("frozen")),
        "{}",
        v["budget"]
    );
}

/// A base with a fixture group, a test reading it, and a `fixtures.lock` pinning it.
fn locked_repo() -> (TestRepo, String) {
    let repo = TestRepo::new();
    repo.write("tests/fixtures/cfg/settings.json", "{\"level\": 1}\n")
        .write(
            "tests/test_cfg.py",
            "import json\n\n\ndef test_level():\n    \
             with open(\"tests/fixtures/cfg/settings.json\") as f:\n        \
             assert json.load(f)[\"level\"] >= 1\n",
        );
    let lock = repo.fixgate_py(&["lock"]);
    assert_eq!(lock.code, 0, "{lock:?}");
    assert!(repo.path().join("fixtures.lock").exists(), "{lock:?}");
    let base = repo.commit("base with fixtures.lock");
    (repo, base)
}

#[test]
fn a_fixture_modified_without_relocking_is_drift_with_exit_3() {
    let (repo, base) = locked_repo();
    repo.write("tests/fixtures/cfg/settings.json", "{\"level\": 2}\n");
    let head = repo.commit("bump the level, forget the lock");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::DRIFT, "drift");
    assert_eq!(
        v["lock"]["drift"],
        serde_json::json!([{"path": "tests/fixtures/cfg/settings.json", "change": "modified"}])
    );
    assert!(
        strs(&v["reasons"])
            .iter()
            .any(|r| r.contains("tests/fixtures/cfg/settings.json")),
        "{}",
        v["reasons"]
    );
    assert_eq!(v["pytest_processes"], 0, "checked before any test runs");
}

#[test]
fn a_locked_repository_with_an_untouched_fixture_passes_the_lock_gate() {
    let (repo, base) = locked_repo();
    repo.write("README.md", "notes\n");
    let head = repo.commit("docs");
    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::PASS, "pass");
    assert_eq!(v["lock"]["drift"], serde_json::json!([]));
    assert_eq!(v["lock"]["changed_by_patch"], false);
}

#[test]
fn a_patch_that_relocks_a_modified_fixture_reports_the_lock_change_and_no_drift() {
    let (repo, base) = locked_repo();
    repo.write("tests/fixtures/cfg/settings.json", "{\"level\": 2}\n");
    let lock = repo.fixgate_py(&["lock"]);
    assert_eq!(lock.code, 0, "{lock:?}");
    let head = repo.commit("bump the level and re-lock");

    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_eq!(v["lock"]["drift"], serde_json::json!([]), "{run:?}");
    assert_eq!(v["lock"]["changed_by_patch"], true);
    let f = finding(&v, "lock-changed", "tests/fixtures/cfg/settings.json");
    assert_eq!(f["blocking"], false, "{f}");
    // The test accepts any level from 1: the change reads as cosmetic.
    assert_eq!(
        v["fixtures"]["replay"][0]["reading"], "cosmetic",
        "{}",
        v["fixtures"]
    );
    assert_verdict(&run, &v, exit::PASS, "pass");
}

#[test]
fn an_unknown_base_revision_is_an_error_with_exit_2() {
    let repo = TestRepo::new();
    repo.write("tests/test_x.py", "def test_x():\n    pass\n");
    let head = repo.commit("base");
    let run = repo.fixgate_py(&[
        "audit",
        "--base",
        "no-such-revision",
        "--head",
        &head,
        "--format",
        "json",
        "--quiet",
    ]);
    assert_eq!(run.code, exit::ERROR, "{run:?}");
    assert!(run.stderr.contains("no-such-revision"), "{run:?}");
}

/// Pins a bug: `--python` given as a relative path (with a slash) is probed from the working
/// directory but then started from inside the sandbox, where the path means nothing.
#[test]
fn regression_a_relative_python_path_is_resolved_against_the_working_directory() {
    let py = common::python();
    let (Some(bin), true) = (py.parent(), py.is_absolute()) else {
        return; // a bare `python3` from PATH: nothing relative to test
    };
    let venv = bin.parent().unwrap();
    let cwd = venv.parent().unwrap();
    let rel = std::path::Path::new(venv.file_name().unwrap())
        .join("bin")
        .join(py.file_name().unwrap());
    let (repo, base, head) = base_plus("def test_two():\n    pass\n");
    let run = repo.fixgate_in(
        cwd,
        &[
            "audit",
            "--repo",
            repo.path().to_str().unwrap(),
            "--base",
            &base,
            "--head",
            &head,
            "--seeds",
            "0",
            "--format",
            "json",
            "--quiet",
            "--python",
            rel.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["verdict"], "pass");
}

// ---------------------------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------------------------

/// The report without the fields that are allowed to differ between two audits of the same
/// inputs: timings, and what the cache saved.
fn without_timing(v: &Value) -> Value {
    let mut v = v.clone();
    let o = v.as_object_mut().unwrap();
    o.remove("duration_seconds");
    o.remove("graph");
    o.remove("pytest_processes");
    // how runs were made (forked or fresh): like the process count, cached runs make none
    o.remove("forkserver");
    o["budget"]["used"]
        .as_object_mut()
        .unwrap()
        .remove("seconds");
    v
}

#[test]
fn two_audits_of_the_same_inputs_give_the_same_report_apart_from_timing() {
    let (repo, _) = parse_repo();
    repo.write("tests/test_registry.py", REGISTRY_TESTS);
    let base = repo.commit("parser and registry");
    repo.write(EXPECTED, "{\"b\": 2, \"a\": 1}\n").write(
        "tests/test_z_writer.py",
        "def test_writes_settings():\n    with open(\"settings.txt\", \"w\") as f:\n        f.write(\"x\")\n",
    );
    let head = repo.commit("cosmetic fixture edit and a new test");
    let args = ["--seeds", "2", "--today", "2025-06-01"];

    let (run1, first) = repo.audit(&base, &head).args(&args).report_both_ways();
    let (run2, second) = repo.audit(&base, &head).args(&args).report_both_ways();
    assert_eq!(run1.code, run2.code);
    for field in [
        "tests", "pairs", "verdict", "fixtures", "findings", "freeze", "seeds",
    ] {
        assert_eq!(
            first[field], second[field],
            "{field} differs between two audits"
        );
    }
    assert_eq!(without_timing(&first), without_timing(&second));
    assert!(
        !first["pairs"].as_array().unwrap().is_empty(),
        "the suite has a pair to compare: {}",
        first["pairs"]
    );
    assert_eq!(first["fixtures"]["replay"][0]["reading"], "cosmetic");
    // The second audit comes from the cache.
    let executed = |v: &Value| v["graph"]["executed"].as_u64().unwrap();
    assert!(
        executed(&second) < executed(&first),
        "first executed {}, second {}",
        executed(&first),
        executed(&second)
    );
    assert_eq!(second["pytest_processes"], 0, "{}", second["graph"]);

    // And without the cache: every run executes again and gives the same report.
    let mut fresh = args.to_vec();
    fresh.push("--no-cache");
    let (run3, third) = repo.audit(&base, &head).args(&fresh).report_both_ways();
    assert_eq!(run1.code, run3.code);
    assert!(third["pytest_processes"].as_u64().unwrap() > 0, "{run3:?}");
    for field in ["tests", "pairs", "verdict", "fixtures", "findings"] {
        assert_eq!(
            first[field], third[field],
            "{field} differs between a cached and an uncached audit"
        );
    }
    assert_eq!(without_timing(&first), without_timing(&third));
}

// ---------------------------------------------------------------------------------------------
// Regressions found on real suites
// ---------------------------------------------------------------------------------------------

#[test]
fn regression_a_new_unittest_skip_decorator_is_a_new_skip() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_u.py",
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertTrue(True)\n",
    );
    let base = repo.commit("base");
    repo.write(
        "tests/test_u.py",
        "import unittest\n\nclass T(unittest.TestCase):\n    @unittest.skip('TODO: flaky on CI')\n    def test_a(self):\n        self.assertTrue(True)\n",
    );
    let head = repo.commit("skip it");
    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::UNVERIFIED, "unverified");
    assert_eq!(v["budget"]["used"]["new_skips"], 1, "{}", v["budget"]);
}

#[test]
fn regression_a_skip_inside_an_edited_test_body_is_a_new_skip() {
    let repo = TestRepo::new();
    repo.write("tests/test_s.py", "def test_a():\n    assert 1 + 1 == 2\n");
    let base = repo.commit("base");
    repo.write(
        "tests/test_s.py",
        "import pytest\n\ndef test_a():\n    pytest.skip('covered elsewhere')\n    assert 1 + 1 == 2\n",
    );
    let head = repo.commit("skip inside");
    let (run, v) = repo.audit(&base, &head).seeds(0).report_both_ways();
    assert_verdict(&run, &v, exit::UNVERIFIED, "unverified");
    let f = finding(&v, "new-skip", "tests/test_s.py::test_a");
    assert!(
        f["message"].as_str().unwrap().contains("pytest.skip()"),
        "{f}"
    );
}

#[test]
fn regression_a_change_that_breaks_every_test_does_not_start_a_process_per_test() {
    let repo = TestRepo::new();
    repo.write("tests/conftest.py", "");
    for i in 0..12 {
        repo.write(
            &format!("tests/test_{i:02}.py"),
            format!("def test_{i}():\n    assert True\n"),
        );
    }
    let base = repo.commit("base");
    repo.write(
        "tests/conftest.py",
        "import pytest\n\n@pytest.fixture(autouse=True)\ndef broken():\n    raise RuntimeError('the fixture is broken')\n",
    );
    let head = repo.commit("break every test");
    let (run, v) = repo.audit(&base, &head).seeds(1).report_both_ways();
    assert_verdict(&run, &v, exit::REJECT, "reject");
    assert!(
        v["tests"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["bucket"] == "error"),
        "{}",
        v["tests"]
    );
    let processes = v["pytest_processes"].as_u64().unwrap();
    assert!(
        processes <= 10,
        "{processes} pytest processes for 12 broken tests"
    );
}
