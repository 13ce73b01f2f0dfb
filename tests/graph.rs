//! Issue 4: the build graph and its cache, seen through audits of real small repositories.
//! Node counts come from the JSON report, never from wall times.

mod common;

use fixgate::exit;

use std::path::Path;
use std::process::Command;

use common::TestRepo;
use serde_json::Value;

fn suite() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("README.md", "the suite\n")
        .write("src/calc.py", "def double(x):\n    return 2 * x\n")
        .write("tests/conftest.py", "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'src'))\n")
        .write("tests/fixtures/data/a.json", "{\"a\": 1}\n")
        .write("tests/fixtures/data/unused.json", "{\"u\": 1}\n")
        .write(
            "tests/test_calc.py",
            "import json\nfrom calc import double\n\n\
             def test_double():\n    assert double(2) == 4\n\n\
             def test_reads_fixture():\n    with open('tests/fixtures/data/a.json') as f:\n        assert json.load(f)['a'] >= 1\n\n\
             def test_three():\n    assert double(0) == 0\n",
        );
    repo.commit("base");
    repo
}

fn executed_of_kind(v: &Value, kind: &str) -> usize {
    v["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == kind)
        .count()
}

fn outcomes(v: &Value) -> Vec<(String, Value)> {
    v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["nodeid"].as_str().unwrap().to_string(),
                t["outcomes"].clone(),
            )
        })
        .collect()
}

#[test]
fn an_audit_run_twice_with_nothing_changed_executes_nothing_the_second_time() {
    let repo = suite();
    let first = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert!(first["graph"]["executed"].as_u64().unwrap() > 0);
    assert_eq!(executed_of_kind(&first, "seed-run"), 3);
    let second = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(second["graph"]["executed"], 0, "{:#}", second["graph"]);
    assert_eq!(second["graph"]["nodes"], first["graph"]["nodes"]);
    assert_eq!(second["pytest_processes"], 0);
    assert_eq!(outcomes(&first), outcomes(&second));
}

#[test]
fn a_readme_change_executes_no_seed_run() {
    let repo = suite();
    repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    repo.write("README.md", "the suite, documented\n");
    let v = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(executed_of_kind(&v, "seed-run"), 0, "{:#}", v["graph"]);
    assert_eq!(executed_of_kind(&v, "collect"), 0, "{:#}", v["graph"]);
}

#[test]
fn a_fixture_some_test_reads_reruns_every_seed_run_and_explain_names_it() {
    let repo = suite();
    repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    let old = blake3::hash(b"{\"a\": 1}\n").to_hex().to_string();
    repo.write("tests/fixtures/data/a.json", "{\"a\": 2}\n");
    let v = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(executed_of_kind(&v, "seed-run"), 3, "{:#}", v["graph"]);
    let explain = repo.fixgate(&["explain"]);
    assert_eq!(explain.code, 0, "{explain:?}");
    let line = explain
        .stdout
        .lines()
        .find(|l| l.starts_with("seed-run(0)"))
        .unwrap_or_else(|| panic!("{explain:?}"));
    assert!(
        line.contains("tests/fixtures/data/a.json changed"),
        "{line}"
    );
    let new = blake3::hash(b"{\"a\": 2}\n").to_hex().to_string();
    assert!(
        line.contains(&old[..8]) && line.contains(&new[..8]),
        "both digests in: {line}"
    );
}

#[test]
fn a_fixture_no_test_reads_executes_no_seed_run() {
    let repo = suite();
    repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    repo.write("tests/fixtures/data/unused.json", "{\"u\": 2}\n");
    let v = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(executed_of_kind(&v, "seed-run"), 0, "{:#}", v["graph"]);
}

#[test]
fn a_changed_source_file_that_tests_import_reruns_the_seed_runs() {
    let repo = suite();
    repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    repo.write("src/calc.py", "def double(x):\n    return x + x\n");
    let v = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(executed_of_kind(&v, "seed-run"), 3, "{:#}", v["graph"]);
}

#[test]
fn flipping_a_fixture_and_back_hits_the_cache_the_second_time() {
    let repo = suite();
    repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    repo.write("tests/fixtures/data/a.json", "{\"a\": 5}\n");
    let flipped = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(executed_of_kind(&flipped, "seed-run"), 3);
    repo.write("tests/fixtures/data/a.json", "{\"a\": 1}\n");
    let back = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(
        executed_of_kind(&back, "seed-run"),
        0,
        "{:#}",
        back["graph"]
    );
    repo.write("tests/fixtures/data/a.json", "{\"a\": 5}\n");
    let again = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(
        executed_of_kind(&again, "seed-run"),
        0,
        "{:#}",
        again["graph"]
    );
}

#[test]
fn installing_a_package_into_the_interpreter_reruns_the_seed_runs() {
    let repo = suite();
    let venv = tempfile::tempdir().unwrap();
    let py = common::private_venv(venv.path());
    let py = py.to_str().unwrap();
    let args = [
        "audit", "--base", "HEAD", "--seeds", "1", "--format", "json", "--quiet", "--python", py,
    ];
    let first = repo.fixgate(&args);
    assert_eq!(first.code, 0, "{first:?}");
    let again = repo.fixgate(&args).json();
    assert_eq!(executed_of_kind(&again, "seed-run"), 0);
    let purelib = Command::new(py)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let dist = Path::new(String::from_utf8(purelib.stdout).unwrap().trim())
        .join("fixgate_extra-1.0.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    std::fs::write(
        dist.join("METADATA"),
        "Metadata-Version: 2.1\nName: fixgate-extra\nVersion: 1.0\n",
    )
    .unwrap();
    let after = repo.fixgate(&args).json();
    assert_eq!(
        executed_of_kind(&after, "seed-run"),
        3,
        "{:#}",
        after["graph"]
    );
}

/// Flips bytes at pseudo-random offsets of every file under `dir`, and truncates some.
fn damage(dir: &Path, seed: u64) {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let mut bytes = std::fs::read(&p).unwrap();
            if bytes.is_empty() {
                continue;
            }
            if next() % 3 == 0 {
                bytes.truncate((next() as usize) % bytes.len());
            } else {
                for _ in 0..4 {
                    let i = (next() as usize) % bytes.len();
                    bytes[i] ^= 0x5a;
                }
            }
            std::fs::write(&p, bytes).unwrap();
        }
    }
}

#[test]
fn a_damaged_cache_is_a_miss_never_a_crash_or_a_wrong_answer() {
    let repo = suite();
    let clean = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    for seed in [7u64, 99, 12345] {
        damage(repo.cache.path(), seed);
        let run = repo.fixgate_py(&[
            "audit", "--base", "HEAD", "--seeds", "1", "--format", "json", "--quiet",
        ]);
        assert_eq!(run.code, 0, "seed {seed}: {run:?}");
        assert_eq!(outcomes(&run.json()), outcomes(&clean), "seed {seed}");
        assert_eq!(run.json()["verdict"], clean["verdict"]);
    }
}

#[test]
fn four_audits_at_once_on_one_cache_all_complete_with_identical_outcomes() {
    let repo = suite();
    let py = common::python();
    let children: Vec<_> = (0..4)
        .map(|_| {
            common::fixgate_command()
                .args([
                    "audit", "--base", "HEAD", "--seeds", "1", "--format", "json", "--quiet",
                    "--python",
                ])
                .arg(&py)
                .arg("--cache-dir")
                .arg(repo.cache.path())
                .current_dir(repo.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let results: Vec<Value> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    for r in &results[1..] {
        assert_eq!(outcomes(r), outcomes(&results[0]));
        assert_eq!(r["verdict"], results[0]["verdict"]);
    }
    let after = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(after["graph"]["executed"], 0, "{:#}", after["graph"]);
}

#[test]
fn two_independent_seed_runs_overlap_in_time_with_two_jobs() {
    let repo = suite();
    repo.write(
        "tests/test_slow.py",
        "import time\n\ndef test_slow():\n    time.sleep(1.5)\n",
    );
    repo.commit("slow");
    let v = repo
        .audit_tree("HEAD")
        .seeds(1)
        .args(&["--jobs", "2"])
        .report_exiting(0);
    let runs: Vec<(f64, f64)> = v["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "seed-run")
        .map(|n| (n["start"].as_f64().unwrap(), n["end"].as_f64().unwrap()))
        .collect();
    assert_eq!(runs.len(), 3);
    let overlap = runs
        .iter()
        .enumerate()
        .any(|(i, a)| runs.iter().skip(i + 1).any(|b| a.0 < b.1 && b.0 < a.1));
    assert!(overlap, "no two seed runs overlapped: {runs:?}");
}

#[test]
fn graph_prints_every_node_and_dot_is_graphviz() {
    let repo = suite();
    repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    let g = repo.fixgate(&["graph"]);
    assert_eq!(g.code, 0, "{g:?}");
    assert!(
        g.stdout.contains("seed-run(rev)") && g.stdout.contains("executed"),
        "{g:?}"
    );
    let dot = repo.fixgate(&["graph", "--dot"]);
    assert!(dot.stdout.starts_with("digraph"), "{dot:?}");
    assert!(dot.stdout.contains("manifest(head)"));
}

#[test]
fn no_cache_runs_everything_and_check_compares_with_the_cache() {
    let repo = suite();
    repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    let fresh = repo
        .audit_tree("HEAD")
        .seeds(1)
        .args(&["--no-cache"])
        .report_exiting(0);
    assert_eq!(executed_of_kind(&fresh, "seed-run"), 3);
    let checked = repo
        .audit_tree("HEAD")
        .seeds(1)
        .args(&["--check"])
        .report_exiting(0);
    assert!(checked["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["kind"] != "nondeterministic"));
    assert!(
        checked["pytest_processes"].as_u64().unwrap() >= 3,
        "--check re-executes cached seed runs"
    );
}

#[test]
fn cache_commands_report_and_maintain_the_store() {
    let repo = suite();
    repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    let stats = repo.fixgate(&["cache", "stats", "--format", "json"]);
    assert_eq!(stats.code, 0, "{stats:?}");
    assert!(stats.json()["ac"]["entries"].as_u64().unwrap() > 0);
    let verify = repo.fixgate(&["cache", "verify"]);
    assert_eq!(verify.code, 0, "{verify:?}");
    let gc = repo.fixgate(&["cache", "gc", "--max-size", "1"]);
    assert_eq!(gc.code, 0, "{gc:?}");
    let none = repo.fixgate(&["cache", "gc"]);
    assert_eq!(none.code, exit::ERROR);
    let clear = repo.fixgate(&["cache", "clear"]);
    assert_eq!(clear.code, 0);
    let after = repo.audit_tree("HEAD").seeds(1).report_exiting(0);
    assert_eq!(executed_of_kind(&after, "seed-run"), 3);
}

/// The edges of a DOT picture as (from, to, dashed), by node number, and the node labels.
fn dot_graph(dot: &str) -> (Vec<String>, Vec<(usize, usize, bool)>) {
    let mut labels = Vec::new();
    let mut edges = Vec::new();
    for line in dot.lines().map(str::trim) {
        if let Some((from, rest)) = line.split_once(" -> ") {
            let num = |s: &str| s.trim_start_matches('n').parse::<usize>().unwrap();
            let to = rest.split([';', ' ']).next().unwrap();
            edges.push((num(from), num(to), rest.contains("dashed")));
        } else if line.starts_with('n') && line.contains("[label=\"") {
            let label = line.split("[label=\"").nth(1).unwrap();
            labels.push(label.split("\\n").next().unwrap().to_string());
        }
    }
    (labels, edges)
}

#[test]
fn the_dot_of_one_audit_is_one_connected_dag_from_the_gates_to_the_verdict() {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_pair.py",
        "import os\n\n\
         def test_a_writes():\n    open(os.environ['TMPDIR'] + '/flag', 'w').write('x')\n\n\
         def test_b_reads():\n    assert not os.path.exists(os.environ['TMPDIR'] + '/flag')\n\n\
         def test_c():\n    assert True\n",
    );
    repo.commit("base");
    repo.write("README.md", "a change\n");
    repo.commit("head");
    let run = repo.fixgate_py(&[
        "audit", "--base", "HEAD~1", "--head", "HEAD", "--seeds", "2", "--format", "json",
        "--quiet",
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    let v = run.json();
    assert_eq!(v["pairs"].as_array().unwrap().len(), 1, "{:#}", v["pairs"]);
    let dot = repo.fixgate(&["graph", "--dot"]).stdout;
    let (labels, edges) = dot_graph(&dot);
    for want in [
        "snapshot(base)",
        "lock-check",
        "collect(head)",
        "seed-run(0)",
        "confirm-run",
        "bisect-run",
        "pair(",
        "base-check",
        "triage",
        "budget",
        "verdict",
    ] {
        assert!(
            labels.iter().any(|l| l.starts_with(want)),
            "no {want} node in\n{dot}"
        );
    }
    // Insertion order is topological: every edge points forward.
    assert!(edges.iter().all(|(a, b, _)| a < b), "{dot}");
    // One weakly connected component.
    let mut parent: Vec<usize> = (0..labels.len()).collect();
    fn root(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for &(a, b, _) in &edges {
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        parent[ra] = rb;
    }
    let roots: std::collections::BTreeSet<usize> =
        (0..labels.len()).map(|i| root(&mut parent, i)).collect();
    assert_eq!(roots.len(), 1, "the audit's graph falls apart:\n{dot}");
    // The verdict reads the budget; each bisection step starts after the one before it.
    let index = |l: &str| labels.iter().position(|x| x == l).unwrap();
    assert!(edges.contains(&(index("budget"), index("verdict"), false)));
    let steps: Vec<usize> = (0..labels.len())
        .filter(|&i| labels[i].starts_with("bisect-run"))
        .collect();
    for w in steps.windows(2) {
        assert!(edges.contains(&(w[0], w[1], true)), "{dot}");
    }
    // The same audit again: every node, the pair's answer included, comes from the cache.
    let again = repo.fixgate_py(&[
        "audit", "--base", "HEAD~1", "--head", "HEAD", "--seeds", "2", "--format", "json",
        "--quiet",
    ]);
    let again = again.json();
    assert_eq!(again["graph"]["executed"], 0, "{:#}", again["graph"]);
    assert_eq!(again["pairs"], v["pairs"]);
    // `explain` after --check names the seed runs it checked.
    let checked = repo.fixgate_py(&[
        "audit", "--base", "HEAD~1", "--head", "HEAD", "--seeds", "2", "--check", "--quiet",
    ]);
    assert_eq!(checked.code, 0, "{checked:?}");
    let explain = repo.fixgate(&["explain"]);
    assert!(
        explain
            .stdout
            .contains("seed-run(rev) (seed-run): --check: ran again, same output"),
        "{explain:?}"
    );
}
