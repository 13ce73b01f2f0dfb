//! The report of one real audit, in every format, against snapshots (insta) taken through a
//! redactor: durations, paths, commit ids, keys and temp dirs become placeholders, so that what
//! is left is what fixgate decided and how it says it. A change to a report's bytes shows as a
//! snapshot diff (`cargo insta review`), never silently.
//!
//! The JSON snapshot is the schema-1 contract: the report types may move and change shape, but
//! the bytes an audit writes stay these.

mod common;

use std::path::Path;

use common::TestRepo;
use serde_json::Value;

const PRICING: &str = "CART = []\nTAX_RATE = 0.25\n\n\ndef add_item(name, price):\n    \
CART.append((name, price))\n\n\ndef clear():\n    CART.clear()\n\n\ndef subtotal():\n    \
return sum(price for _, price in CART)\n\n\ndef total_with_tax():\n    \
return round(subtotal() * (1 + TAX_RATE), 2)\n";

const PRICING_TESTS: &str = "import pricing\n\n\ndef test_add_book():\n    \
pricing.add_item(\"book\", 10.0)\n    assert pricing.subtotal() >= 10.0\n\n\n\
def test_tax_on_lamp():\n    pricing.add_item(\"lamp\", 20.0)\n    \
assert pricing.total_with_tax() == 25.0\n\n\n\
def test_discount_free_cart():\n    pricing.clear()\n    assert pricing.total_with_tax() == 0\n";

const PARSE: &str =
    "def parse(text):\n    key, value = text.split(\"=\")\n    return {key.strip(): int(value)}\n";

const PARSE_TESTS: &str = "import json\nimport pathlib\n\nfrom parse import parse\n\n\
FIXTURES = pathlib.Path(__file__).parent / \"fixtures\" / \"parse\"\n\n\n\
def test_parse_matches_expected():\n    \
expected = json.loads((FIXTURES / \"expected.json\").read_text())\n    got = {}\n    \
for line in (\"a=1\", \"b=2\"):\n        got.update(parse(line))\n    assert got == expected\n";

const LATER: &str = "def test_soon():\n    assert True\n";

/// A patch with one of most things a report can say: a victim whose assertion was edited to
/// match its state-setter's leftovers (a pair, an edited assertion, a redefined test), code and
/// its expected data changed together (a fixture delta, a coupled test, a redefined replay) and
/// a new skip (a budget breach).
fn repo() -> (TestRepo, String, String) {
    let repo = TestRepo::new();
    repo.write("src/pricing.py", PRICING)
        .write("tests/test_pricing.py", PRICING_TESTS)
        .write("src/parse.py", PARSE)
        .write("tests/test_parse.py", PARSE_TESTS)
        .write(
            "tests/fixtures/parse/expected.json",
            "{\"a\": 1, \"b\": 2}\n",
        )
        .write("tests/test_later.py", LATER);
    let base = repo.commit("pricing and parsing");
    repo.write(
        "tests/test_pricing.py",
        PRICING_TESTS.replace("== 25.0", "== 37.5"),
    )
    .write(
        "src/parse.py",
        PARSE.replace("int(value)}", "int(value) * 10}"),
    )
    .write(
        "tests/fixtures/parse/expected.json",
        "{\"a\": 10, \"b\": 20}\n",
    )
    .write(
        "tests/test_later.py",
        format!("import pytest\n\n\n@pytest.mark.skip(reason=\"later\")\n{LATER}"),
    );
    let head = repo.commit("fix the lamp test, parse in tenths, skip the slow one");
    (repo, base, head)
}

/// Replaces what differs between machines and runs with placeholders.
struct Redactor {
    pairs: Vec<(String, String)>,
}

impl Redactor {
    fn new(repo: &TestRepo, base: &str, head: &str) -> Redactor {
        let python = common::python();
        let mut pairs = vec![
            (base.to_string(), "[BASE]".to_string()),
            (base[..12].to_string(), "[BASE]".to_string()),
            (head.to_string(), "[HEAD]".to_string()),
            (head[..12].to_string(), "[HEAD]".to_string()),
            (python.display().to_string(), "[PYTHON]".to_string()),
        ];
        for dir in [repo.path(), repo.cache.path()] {
            let shown = dir.display().to_string();
            if let Ok(real) = dir.canonicalize() {
                pairs.push((real.display().to_string(), "[TMP]".to_string()));
            }
            pairs.push((shown, "[TMP]".to_string()));
        }
        // The longest first, so that a path is replaced before a prefix of it.
        pairs.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        Redactor { pairs }
    }

    fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (from, to) in &self.pairs {
            out = out.replace(from.as_str(), to);
        }
        seconds_used(&hex_runs(&out))
    }

    /// The JSON report with its timing fields (and what the cache saved, which depends on what
    /// ran before) set to placeholders, then the text redacted.
    fn json(&self, v: &Value) -> String {
        let mut v = v.clone();
        let o = v.as_object_mut().expect("the report is an object");
        o.insert("duration_seconds".into(), "[SECONDS]".into());
        o["budget"]["used"]["seconds"] = "[SECONDS]".into();
        // How many runs were forked and how many warm interpreters served them depends on
        // which job slot was free when: the mode and the fallback reasons are kept.
        for count in ["forks", "fresh_processes", "prewarmed", "zygotes"] {
            o["forkserver"][count] = "[COUNT]".into();
        }
        for node in o["graph"]["executed_nodes"]
            .as_array_mut()
            .expect("executed nodes")
        {
            node["start"] = "[SECONDS]".into();
            node["end"] = "[SECONDS]".into();
        }
        let mut text = serde_json::to_string_pretty(&v).expect("JSON");
        text.push('\n');
        self.text(&text)
    }
}

/// Runs of 16 or more hex digits (keys, digests) become `[HASH]`.
fn hex_runs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 16 {
            out.push_str("[HASH]");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// The budget's wall seconds, in the human table (`seconds  used 3,`) and the markdown one
/// (`| seconds | 3 |`).
fn seconds_used(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let redacted = if let Some(rest) = trimmed.strip_prefix("seconds ") {
            let rest = rest.trim_start();
            rest.strip_prefix("used ").map(|after| {
                let digits = after.chars().take_while(char::is_ascii_digit).count();
                let indent = &line[..line.len() - trimmed.len()];
                let pad = &trimmed["seconds ".len()..trimmed.len() - rest.len()];
                format!("{indent}seconds {pad}used [SECONDS]{}", &after[digits..])
            })
        } else if let Some(rest) = line.strip_prefix("| seconds | ") {
            let digits = rest.chars().take_while(char::is_ascii_digit).count();
            Some(format!("| seconds | [SECONDS]{}", &rest[digits..]))
        } else {
            None
        };
        out.push_str(redacted.as_deref().unwrap_or(line));
    }
    out
}

/// JUnit's `time` attributes are durations.
fn junit_times(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(" time=\"") {
        let (before, after) = rest.split_at(i + 7);
        out.push_str(before);
        let end = after.find('"').unwrap_or(0);
        out.push_str("[SECONDS]");
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The keys of the nodes whose derivation holds nothing of the machine (no interpreter, no
/// plugin digest): what this audit's cache entries are found by, on any machine, as main's
/// binary computed them before the audit became typed phases. A change here is a new cache for
/// every user: make it on purpose (a new fixgate version changes them all). The triage key
/// moved on purpose with the impact-scoped audit (issue 21): a test's evidence holds the shared
/// state it left changed, and its `flaky_too`, which the key had left out. The budget and verdict
/// keys moved on purpose with the engine's steps (both kinds at version 2: the budget's breaches
/// and the verdict's reasons are typed values, and the verdict's key writes a finding's kind by
/// its ordinal, where `deleted-test` named two kinds).
const PINNED_KEYS: [(&str, &str); 9] = [
    (
        "snapshot(base)",
        "b3:cd9c88e59963f2d3a7f03f2df2be8d497cfb6681bf21a1b2c9ae5e66f5667059",
    ),
    (
        "manifest(base)",
        "b3:4e78f132dbb378637c2a003e645509bcc6fe83647c8b4c1314323723ad388ac4",
    ),
    (
        "snapshot(head)",
        "b3:a3f36b40fc860e7ad90d41d54fdf9468805c94047eef1e26c100d005704daeb7",
    ),
    (
        "manifest(head)",
        "b3:0560b78181d1f1125583e900a493325431d49727dfe1eae1fb18b328d48a35f2",
    ),
    (
        "lock-check",
        "b3:53c6f0ebc8e788818f44160b39347dce2df666980b7ade0d35f7f16edf0f520a",
    ),
    (
        "delta",
        "b3:bf44a4b99d7ac030d7ad59f3a27b6f50f0ee8fa0d2da6190a8652ca8748d9cbb",
    ),
    (
        "triage",
        "b3:df9c32d9b0bfac85ab3f12f2a2a8deca7e99fdc9dcbeee4a5541e9d5f176b1f0",
    ),
    (
        "budget",
        "b3:419b81b22636ab18cbd0f7cc153518836b2e965d6bb0ad0c72910f32eb025afb",
    ),
    (
        "verdict",
        "b3:a25cf6aa2c81fef88e4f04c802e9b17327a91b5fe25b90310dd1e73e7cb2be35",
    ),
];

#[test]
fn one_audit_in_every_format_matches_its_snapshots() {
    // The snapshots name the containment: namespaces, whatever the suite's condition is.
    common::containment::Condition::Namespaces.run(one_audit_in_every_format);
}

fn one_audit_in_every_format() {
    let (repo, base, head) = repo();
    let redact = Redactor::new(&repo, &base, &head);
    let audit = repo
        .audit(&base, &head)
        .seeds(2)
        .args(&["--today", "2025-06-01", "--jobs", "2"])
        .env(&[("FIXGATE_NO_NAMESPACES", "")]);
    let json = audit.run();
    assert_eq!(json.code, fixgate::exit::REJECT, "{json:?}");
    let v = json.json();
    let keys: Vec<(&str, &str)> = v["graph"]["executed_nodes"]
        .as_array()
        .expect("executed nodes")
        .iter()
        .filter_map(|n| Some((n["label"].as_str()?, n["key"].as_str()?)))
        .filter(|(label, _)| PINNED_KEYS.iter().any(|(l, _)| l == label))
        .collect();
    assert_eq!(
        keys, PINNED_KEYS,
        "the cache keys of machine-independent nodes moved"
    );
    insta::assert_snapshot!("audit.json", redact.json(&v));
    // The other formats render the same audit, from the cache.
    for (format, name) in [
        ("human", "audit.txt"),
        ("markdown", "audit.md"),
        ("junit", "audit.xml"),
        ("github", "audit.github"),
    ] {
        let run = audit.clone().format(format).run();
        assert_eq!(run.code, fixgate::exit::REJECT, "{run:?}");
        insta::assert_snapshot!(name, junit_times(&redact.text(&run.stdout)));
    }
}

/// `--format sarif` is a SARIF 2.1.0 log the standard's schema accepts (issue 54), with a rule
/// per finding kind, a result per finding on its test's file and line, and the finding's id as
/// its fingerprint.
#[test]
fn the_sarif_report_is_valid_sarif_with_a_result_per_finding() {
    let (repo, base, head) = repo();
    let (run, v) = repo.audit(&base, &head).seeds(1).report();
    assert_eq!(run.code, fixgate::exit::REJECT, "{run:?}");
    let sarif = repo.audit(&base, &head).seeds(1).format("sarif").run();
    assert_eq!(sarif.code, fixgate::exit::REJECT, "{sarif:?}");
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemas/sarif-2.1.0-rtm.5.json");
    common::assert_matches_schema(&sarif.stdout, &schema);
    let log: Value = serde_json::from_str(&sarif.stdout).unwrap();
    let run0 = &log["runs"][0];
    assert_eq!(run0["tool"]["driver"]["name"], "fixgate");
    assert_eq!(run0["properties"]["verdict"], "reject");
    let results = run0["results"].as_array().unwrap();
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(results.len(), findings.len());
    for (r, f) in results.iter().zip(findings) {
        assert_eq!(r["ruleId"], f["kind"]);
        assert_eq!(r["partialFingerprints"]["fixgateFindingId/v1"], f["id"]);
        let rule = &run0["tool"]["driver"]["rules"][r["ruleIndex"].as_u64().unwrap() as usize];
        assert_eq!(rule["id"], f["kind"]);
        let level = match (f["blocking"].as_bool(), f["introduced"].as_bool()) {
            (Some(true), _) => "error",
            (_, Some(true)) => "warning",
            _ => "note",
        };
        assert_eq!(r["level"], level, "{r}");
        if let Some(file) = f["file"].as_str() {
            let at = &r["locations"][0]["physicalLocation"];
            assert_eq!(at["artifactLocation"]["uri"], file);
            assert_eq!(at["region"]["startLine"], f["line"]);
        }
    }
}

/// `--report FORMAT:FILE` writes other formats from the same audit (issue 54: a CI job does
/// not run the audit once per format): each file is the audit that wrote the JSON, not a second
/// one read from the cache.
#[test]
fn one_audit_writes_several_formats() {
    let (repo, base, head) = repo();
    // In the repository, which the suite's condition's user is given (the audit reads the
    // commits, not the work tree).
    let out = repo.path().join("reports");
    std::fs::create_dir(&out).unwrap();
    let file = |name: &str| out.join(name);
    let arg = |format: &str, name: &str| format!("{format}:{}", file(name).display());
    let (human, markdown, junit) = (
        arg("human", "r.txt"),
        arg("markdown", "r.md"),
        arg("junit", "r.xml"),
    );
    let run = repo
        .audit(&base, &head)
        .seeds(1)
        .args(&[
            "--report", &human, "--report", &markdown, "--report", &junit,
        ])
        .run();
    assert_eq!(run.code, fixgate::exit::REJECT, "{run:?}");
    let v = run.json();
    let read = |name: &str| std::fs::read_to_string(file(name)).unwrap();
    let graph = format!(
        "graph: {} nodes, {} executed, {} cached; {} pytest processes",
        v["graph"]["nodes"], v["graph"]["executed"], v["graph"]["cached"], v["pytest_processes"]
    );
    assert!(
        v["pytest_processes"].as_u64().unwrap() > 0,
        "{}",
        v["graph"]
    );
    let text = read("r.txt");
    assert!(text.starts_with("REJECT (exit 1)"), "{text}");
    assert!(
        text.contains(&graph),
        "not the audit of the JSON ({graph}):\n{text}"
    );
    assert!(!text.contains("\x1b["), "a file gets no colour");
    let md = read("r.md");
    assert!(md.starts_with("## fixgate: reject (exit 1)"), "{md}");
    let xml = read("r.xml");
    assert!(
        xml.starts_with("<?xml") && xml.contains("<testsuite"),
        "{xml}"
    );

    // With several heads, FILE is a folder of one report per head.
    let folder = out.join("heads");
    let many = format!("markdown:{}", folder.display());
    let run = repo
        .audit(&base, &head)
        .seeds(1)
        .args(&["--head", &base, "--report", &many])
        .run();
    assert_eq!(run.code, fixgate::exit::REJECT, "{run:?}");
    let mut names: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [format!("01-{head}.md"), format!("02-{base}.md")]);

    // A wrong value says how to write one.
    for (bad, says) in [
        ("pdf:r.pdf", "\"pdf\" is not a report format"),
        ("junit", "names no file"),
        ("junit:", "names no file"),
    ] {
        let run = repo.audit(&base, &head).args(&["--report", bad]).run();
        assert_eq!(run.code, fixgate::exit::ERROR, "{run:?}");
        assert!(run.stderr.contains(says), "{bad}: {}", run.stderr);
        assert!(
            run.stderr.contains("e.g. junit:fixgate.xml"),
            "{}",
            run.stderr
        );
    }
}

/// Test ids are the suite's own text: pytest takes the ids a parametrization gives as they are. Ones that
/// would be markup, references or a CDATA end in XML, quotes, whitespace and a 5,000-character
/// id come out of the JUnit report, read back by an XML parser, exactly as the JSON report
/// gives them.
#[test]
fn hostile_test_ids_read_back_from_the_junit_report_as_the_json_gives_them() {
    use quick_xml::events::Event;

    let repo = TestRepo::new();
    repo.write(
        "tests/test_plain.py",
        "def test_plain():\n    assert True\n",
    );
    let base = repo.commit("base");
    let long = "x".repeat(5_000);
    repo.write(
        "tests/test_hostile.py",
        format!(
            "import pytest\n\n\nIDS = [\n    '<script>alert(1)</script>',\n    \
             '\"double\" \\'single\\'',\n    ']]>&amp;&#60;<![CDATA[x',\n    'tab\\there\\nline',\n    \
             '{long}',\n]\n\n\n@pytest.mark.parametrize('v', IDS, ids=IDS)\ndef test_hostile(v):\n    \
             assert v\n"
        ),
    );
    let head = repo.commit("hostile ids");
    let audit = repo.audit(&base, &head).seeds(1);
    let (run, v) = audit.report();
    assert_eq!(run.code, 0, "{run:?}");
    let mut ids: Vec<String> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| {
            t["nodeid"]
                .as_str()?
                .split_once("::")
                .map(|(_, n)| n.to_owned())
        })
        .collect();
    assert_eq!(ids.len(), 6, "{ids:?}");
    assert!(
        ids.iter().any(|id| id.contains("<script>")) && ids.iter().any(|id| id.len() > 5_000),
        "pytest kept the ids: {ids:?}"
    );

    let junit = audit.clone().format("junit").run();
    assert_eq!(junit.code, 0, "{junit:?}");
    let mut reader = quick_xml::Reader::from_str(&junit.stdout);
    let mut names = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) if e.name().as_ref() == b"testcase" => {
                let name = e
                    .try_get_attribute("name")
                    .unwrap()
                    .expect("a testcase has a name");
                let value = name
                    .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                    .unwrap_or_else(|e| panic!("{e}: {}", junit.stdout));
                names.push(value.into_owned());
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("the JUnit report is not XML ({e}):\n{}", junit.stdout),
        }
    }
    ids.sort();
    names.sort();
    assert_eq!(names, ids);
}
