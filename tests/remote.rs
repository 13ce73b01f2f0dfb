//! Issue 13: sharing audits across machines through a real nginx (Bazel HTTP cache protocol)
//! and a real BuildGrid (REAPI): hits across cache directories, verified downloads, signed
//! results, a server that goes away, opt-in uploads, `cache push`, and credentials kept out of
//! every output.

mod common;

use fixgate::exit;

use std::path::Path;

use common::audit::{warnings, Audit};
use common::servers::{self, Server};
use common::{files_under, fixgate_py_at, git, TestRepo};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const PRICING: &str = r#""""Prices a cart. The cart is module-level state, shared by every caller."""

CART = []
TAX_RATE = 0.25


def add_item(name, price):
    CART.append((name, price))


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


def test_empty_name_is_allowed():
    assert pricing.subtotal() >= 0
"#;

/// The shared-cart patch: green in file order only because the book test ran first, so the
/// audit rejects it after a polluter search. Returns the repo, base and head.
fn pricing_repo() -> (TestRepo, String, String) {
    let repo = TestRepo::new();
    repo.write("src/pricing.py", PRICING)
        .write("tests/test_pricing.py", PRICING_TESTS);
    let base = repo.commit("pricing");
    repo.write(
        "tests/test_pricing.py",
        PRICING_TESTS.replace("== 25.0", "== 37.5"),
    );
    let head = repo.commit("fix the lamp test");
    (repo, base, head)
}

/// A second machine: a clone of `repo` in another directory, with its own empty cache.
fn clone_of(repo: &TestRepo) -> TestRepo {
    let other = TestRepo::plain();
    let target = other.path().join("repo");
    git(
        other.path(),
        &["clone", "-q", repo.path().to_str().unwrap(), "repo"],
    );
    assert!(target.join("src/pricing.py").exists());
    other
}

/// One machine: a work tree and a cache directory.
struct Machine<'a> {
    dir: &'a Path,
    cache: &'a Path,
}

impl<'a> Machine<'a> {
    /// The machine's audit of `base` to `head`, two shuffled orders.
    fn audit(&self, base: &str, head: &str) -> Audit<'a> {
        Audit::at(self.dir, self.cache).sides(base, head).seeds(2)
    }

    /// The last audit's transfer counters, from `cache stats --format json`.
    fn stats(&self) -> Value {
        let run = fixgate_py_at(
            self.dir,
            self.cache,
            &[],
            &["cache", "stats", "--format", "json"],
        );
        assert_eq!(run.code, 0, "{run:?}");
        run.json()["last_audit"].clone()
    }
}

/// What must not change with where results came from: the verdict and everything it rests on.
fn judgment(v: &Value) -> Value {
    let tests: Vec<Value> = v["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .map(|t| {
            serde_json::json!({
                "nodeid": t["nodeid"],
                "bucket": t["bucket"],
                "outcomes": t["outcomes"],
            })
        })
        .collect();
    serde_json::json!({
        "verdict": v["verdict"],
        "exit_code": v["exit_code"],
        "reasons": v["reasons"],
        "pairs": v["pairs"],
        "findings": v["findings"],
        "tests": tests,
    })
}

fn processes(v: &Value) -> u64 {
    v["pytest_processes"].as_u64().expect("pytest_processes")
}

/// Machine A audits and uploads; machine B, a clone with an empty cache, audits the same pair
/// and must get everything from the remote: the same judgment, no pytest process.
fn hit_across_machines(server: &Server, digest_function: &str) {
    let (repo, base, head) = pricing_repo();
    let a = Machine {
        dir: repo.path(),
        cache: repo.cache.path(),
    };
    let url = server.url.as_str();
    let (run_a, va) = a
        .audit(&base, &head)
        .args(&["--remote-cache", url, "--remote-upload"])
        .report();
    assert_eq!(run_a.code, 1, "{run_a:?}");
    assert_eq!(va["verdict"], "reject");
    assert!(processes(&va) > 0);
    assert!(warnings(&va).is_empty(), "{:?}", warnings(&va));
    let sa = a.stats();
    assert!(sa["uploads"].as_u64().unwrap() > 0, "{sa}");
    assert_eq!(sa["remote_errors"], 0, "{sa}\n{}", server.log());

    let other = clone_of(&repo);
    let b = Machine {
        dir: &other.path().join("repo"),
        cache: other.cache.path(),
    };
    let (run_b, vb) = b
        .audit(&base, &head)
        .args(&["--remote-cache", url])
        .report();
    assert_eq!(run_b.code, 1, "{run_b:?}");
    assert_eq!(judgment(&vb), judgment(&va));
    assert_eq!(processes(&vb), 0, "machine B ran pytest: {run_b:?}");
    assert!(
        vb["graph"]["remote"].as_u64().unwrap() > 0,
        "{:#}",
        vb["graph"]
    );
    let explain = fixgate_py_at(b.dir, b.cache, &[], &["explain"]);
    assert!(
        explain.stdout.contains("came from the remote cache")
            && explain.stdout.contains("seed-run(0)"),
        "{explain:?}"
    );
    assert!(warnings(&vb).is_empty(), "{:?}", warnings(&vb));
    let sb = b.stats();
    assert!(sb["remote_hits"].as_u64().unwrap() > 0, "{sb}");
    assert_eq!(sb["uploads"], 0, "{sb}");
    assert_eq!(sb["remote_rejected"], 0, "{sb}");
    assert_eq!(sb["digest_function"], digest_function, "{sb}");

    // The remote hits were written locally: a third audit on B needs the remote no more.
    let (_, vb2) = b.audit(&base, &head).report();
    assert_eq!(judgment(&vb2), judgment(&va));
    assert_eq!(processes(&vb2), 0);
    let sb2 = b.stats();
    assert_eq!(sb2["local_misses"], 0, "{sb2}");
    assert!(sb2["remote"].is_null(), "{sb2}");
}

// ---------------------------------------------------------------------------------------------
// Hits across machines
// ---------------------------------------------------------------------------------------------

#[test]
fn a_second_cache_directory_gets_every_result_from_nginx() {
    let server = servers::nginx();
    hit_across_machines(&server, "sha256");
    // What went over the wire is the Bazel HTTP layout.
    assert!(!files_under(&server.data.join("ac")).is_empty());
    assert!(!files_under(&server.data.join("cas")).is_empty());
}

#[test]
fn a_second_cache_directory_gets_every_result_from_buildgrid_which_offers_sha256() {
    let server = servers::buildgrid();
    hit_across_machines(&server, "sha256");
}

// ---------------------------------------------------------------------------------------------
// Safe by default
// ---------------------------------------------------------------------------------------------

#[test]
fn nothing_is_uploaded_without_remote_upload() {
    let server = servers::nginx();
    let (repo, base, head) = pricing_repo();
    let a = Machine {
        dir: repo.path(),
        cache: repo.cache.path(),
    };
    // Named by the environment this time, as CI would.
    let (run, _) = a
        .audit(&base, &head)
        .env(&[("FIXGATE_REMOTE_CACHE", &server.url)])
        .report();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        files_under(&server.data).is_empty(),
        "an audit without --remote-upload wrote {:?}",
        files_under(&server.data)
    );
    let s = a.stats();
    assert_eq!(s["uploads"], 0, "{s}");
    assert!(s["remote_misses"].as_u64().unwrap() > 0, "{s}");
}

#[test]
fn a_corrupted_blob_on_the_server_is_a_miss_with_a_warning_and_the_verdict_is_unchanged() {
    let server = servers::nginx();
    let (repo, base, head) = pricing_repo();
    let a = Machine {
        dir: repo.path(),
        cache: repo.cache.path(),
    };
    let (_, va) = a
        .audit(&base, &head)
        .args(&["--remote-cache", &server.url, "--remote-upload"])
        .report();
    // nginx stores what is PUT without looking: damage every blob on its disk.
    let blobs = files_under(&server.data.join("cas"));
    assert!(!blobs.is_empty());
    for blob in &blobs {
        let mut bytes = std::fs::read(blob).unwrap();
        bytes.push(b'!');
        std::fs::write(blob, bytes).unwrap();
    }

    let other = clone_of(&repo);
    let b = Machine {
        dir: &other.path().join("repo"),
        cache: other.cache.path(),
    };
    let (run_b, vb) = b
        .audit(&base, &head)
        .args(&["--remote-cache", &server.url])
        .report();
    assert_eq!(judgment(&vb), judgment(&va), "{run_b:?}");
    assert!(processes(&vb) > 0, "damaged results were used: {run_b:?}");
    let w = warnings(&vb);
    assert!(
        w.iter().any(|w| w.contains("do not hash to its digest")),
        "{w:?}"
    );
    assert!(
        run_b.stderr.contains("do not hash to its digest"),
        "{run_b:?}"
    );
    let s = b.stats();
    assert!(s["remote_rejected"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["remote_hits"], 0, "{s}");
}

#[test]
fn with_a_cache_key_unsigned_results_are_ignored_and_signed_ones_are_used() {
    let server = servers::nginx();
    let (repo, base, head) = pricing_repo();
    let a = Machine {
        dir: repo.path(),
        cache: repo.cache.path(),
    };
    // Someone who can PUT to the cache, but has no key, fills it.
    let (_, va) = a
        .audit(&base, &head)
        .args(&["--remote-cache", &server.url, "--remote-upload"])
        .report();

    let key = [("FIXGATE_CACHE_KEY", "the-team-key")];
    let other = clone_of(&repo);
    let b = Machine {
        dir: &other.path().join("repo"),
        cache: other.cache.path(),
    };
    let (run_b, vb) = b
        .audit(&base, &head)
        .args(&["--remote-cache", &server.url])
        .env(&key)
        .report();
    assert_eq!(judgment(&vb), judgment(&va));
    assert!(processes(&vb) > 0, "unsigned results were used: {run_b:?}");
    let w = warnings(&vb);
    assert_eq!(
        w.iter().filter(|w| w.contains("no valid MAC")).count(),
        1,
        "one warning for all unsigned results: {w:?}"
    );
    assert!(b.stats()["remote_rejected"].as_u64().unwrap() > 0);

    // Signed by a CI run with the key (a fresh cache, so that it uploads everything)...
    let signer = clone_of(&repo);
    let c = Machine {
        dir: &signer.path().join("repo"),
        cache: signer.cache.path(),
    };
    c.audit(&base, &head)
        .args(&["--remote-cache", &server.url, "--remote-upload"])
        .env(&key)
        .report();
    // ... they are used by a machine with the key, and not by one with another key.
    let third = clone_of(&repo);
    let d = Machine {
        dir: &third.path().join("repo"),
        cache: third.cache.path(),
    };
    let (run_d, vd) = d
        .audit(&base, &head)
        .args(&["--remote-cache", &server.url])
        .env(&key)
        .report();
    assert_eq!(judgment(&vd), judgment(&va));
    assert_eq!(processes(&vd), 0, "{run_d:?}");
    let fourth = clone_of(&repo);
    let e = Machine {
        dir: &fourth.path().join("repo"),
        cache: fourth.cache.path(),
    };
    let (_, ve) = e
        .audit(&base, &head)
        .args(&["--remote-cache", &server.url])
        .env(&[("FIXGATE_CACHE_KEY", "a-guessed-key")])
        .report();
    assert_eq!(judgment(&ve), judgment(&va));
    assert!(processes(&ve) > 0);
}

#[test]
fn a_remote_that_is_down_is_one_warning_and_the_same_verdict() {
    let (repo, base, head) = pricing_repo();
    let a = Machine {
        dir: repo.path(),
        cache: repo.cache.path(),
    };
    let (_, reference) = a.audit(&base, &head).report();

    for url in [
        format!("http://127.0.0.1:{}/cache", servers::free_port()),
        format!("grpc://127.0.0.1:{}", servers::free_port()),
    ] {
        let other = clone_of(&repo);
        let b = Machine {
            dir: &other.path().join("repo"),
            cache: other.cache.path(),
        };
        let started = std::time::Instant::now();
        let (run, v) = b
            .audit(&base, &head)
            .args(&["--remote-cache", &url])
            .report();
        assert_eq!(judgment(&v), judgment(&reference), "{url}: {run:?}");
        let w = warnings(&v);
        assert_eq!(w.len(), 1, "{url}: {w:?}");
        assert!(w[0].contains("unavailable"), "{url}: {w:?}");
        assert_eq!(run.stderr.matches("unavailable").count(), 1, "{run:?}");
        assert!(started.elapsed() < std::time::Duration::from_secs(120));
        // Requests already in flight on other threads may fail too; none is made after.
        let errors = b.stats()["remote_errors"].as_u64().unwrap();
        assert!((1..=4).contains(&errors), "{errors}");

        // --remote-required turns the same failure into an error (exit 2), after the audit.
        let (run, _) = b
            .audit(&base, &head)
            .args(&["--remote-cache", &url, "--remote-required"])
            .report();
        assert_eq!(run.code, exit::ERROR, "{url}: {run:?}");
        assert!(run.stderr.contains("--remote-required"), "{run:?}");
    }
}

/// Starts an audit against `server`, stops the server once `ready` says the audit is using it,
/// and checks that the audit ends with one warning and the verdict of an audit without remote.
fn killed_mid_audit(mut server: Server, ready: impl Fn(&Server) -> bool) {
    let (repo, base, head) = pricing_repo();
    let a = Machine {
        dir: repo.path(),
        cache: repo.cache.path(),
    };
    let (_, reference) = a.audit(&base, &head).report();

    let other = clone_of(&repo);
    let dir = other.path().join("repo");
    let cache = other.cache.path().to_owned();
    let url = server.url.clone();
    let (base2, head2) = (base.clone(), head.clone());
    let audit = std::thread::spawn(move || {
        let m = Machine {
            dir: &dir,
            cache: &cache,
        };
        m.audit(&base2, &head2)
            .args(&["--remote-cache", &url])
            .report()
    });
    let start = std::time::Instant::now();
    while !ready(&server) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "the audit never used the server"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    server.stop();
    let (run, v) = audit.join().unwrap();
    assert_eq!(judgment(&v), judgment(&reference), "{run:?}");
    let w = warnings(&v);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("unavailable"), "{w:?}");
    assert_eq!(run.stderr.matches("unavailable").count(), 1, "{run:?}");
}

#[test]
fn nginx_stopped_mid_audit_gives_one_warning_and_the_same_verdict() {
    // Stopped right after it answered the audit's first lookup.
    killed_mid_audit(servers::nginx(), |s| s.requests() > 0);
}

#[test]
fn buildgrid_stopped_mid_audit_gives_one_warning_and_the_same_verdict() {
    // The audit asks for the capabilities when it opens its store; its runs take far longer
    // than this.
    let start = std::time::Instant::now();
    killed_mid_audit(servers::buildgrid(), move |_| {
        start.elapsed() > std::time::Duration::from_millis(1500)
    });
}

// ---------------------------------------------------------------------------------------------
// Cache tooling and credentials
// ---------------------------------------------------------------------------------------------

#[test]
fn cache_push_seeds_the_remote_from_a_local_audit() {
    let server = servers::buildgrid();
    let (repo, base, head) = pricing_repo();
    let a = Machine {
        dir: repo.path(),
        cache: repo.cache.path(),
    };
    let (_, va) = a.audit(&base, &head).report();
    let push = fixgate_py_at(
        repo.path(),
        repo.cache.path(),
        &[],
        &[
            "cache",
            "push",
            "--format",
            "json",
            "--remote-cache",
            &server.url,
        ],
    );
    assert_eq!(push.code, 0, "{push:?}");
    let pushed = push.json();
    assert!(pushed["actions"].as_u64().unwrap() > 0, "{pushed}");
    assert!(pushed["traces"].as_u64().unwrap() > 0, "{pushed}");

    let other = clone_of(&repo);
    let b = Machine {
        dir: &other.path().join("repo"),
        cache: other.cache.path(),
    };
    let (run_b, vb) = b
        .audit(&base, &head)
        .args(&["--remote-cache", &server.url])
        .report();
    assert_eq!(judgment(&vb), judgment(&va));
    assert_eq!(processes(&vb), 0, "{run_b:?}");

    let human = fixgate_py_at(
        other.path(),
        other.cache.path(),
        &[],
        &["cache", "stats", "--repo", "repo"],
    );
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stdout.contains(&server.url), "{human:?}");
    assert!(human.stdout.contains("(sha256)"), "{human:?}");
}

#[test]
fn credentials_appear_in_no_report_log_line_or_cache_file() {
    const TOKEN: &str = "sekrit-token-4f1c";
    const KEY: &str = "sekrit-key-9a7e";
    let server = servers::nginx_requiring("Bearer sekrit-token-4f1c");
    let (repo, base, head) = pricing_repo();
    let env = [
        (
            "FIXGATE_REMOTE_HEADER",
            "Authorization: Bearer sekrit-token-4f1c",
        ),
        ("FIXGATE_CACHE_KEY", KEY),
    ];
    let down = format!("http://127.0.0.1:{}/cache", servers::free_port());
    let mut outputs = Vec::new();
    let a = Machine {
        dir: repo.path(),
        cache: repo.cache.path(),
    };
    let report = repo.cache.path().join("report.json");
    for (url, extra) in [
        (server.url.as_str(), "--remote-upload"),
        (down.as_str(), "--remote-required"),
    ] {
        let run = fixgate_py_at(
            repo.path(),
            repo.cache.path(),
            &env,
            &[
                "audit",
                "--base",
                &base,
                "--head",
                &head,
                "--seeds",
                "1",
                "--remote-cache",
                url,
                extra,
                "--output",
                report.to_str().unwrap(),
                "--format",
                "json",
            ],
        );
        outputs.push(format!("{run:?}"));
        outputs.push(std::fs::read_to_string(&report).unwrap_or_default());
    }
    for args in [
        vec!["cache", "stats"],
        vec!["cache", "stats", "--format", "json"],
        vec!["cache", "push", "--remote-cache", &server.url],
        vec!["cache", "push", "--remote-cache", &down],
    ] {
        outputs.push(format!(
            "{:?}",
            fixgate_py_at(repo.path(), repo.cache.path(), &env, &args)
        ));
    }
    // A malformed header is refused without echoing it.
    let bad = fixgate_py_at(
        repo.path(),
        repo.cache.path(),
        &[("FIXGATE_REMOTE_HEADER", TOKEN)],
        &["cache", "stats", "--remote-cache", &server.url],
    );
    assert_eq!(bad.code, exit::ERROR, "{bad:?}");
    outputs.push(format!("{bad:?}"));
    for file in files_under(repo.cache.path()) {
        if let Ok(text) = std::fs::read_to_string(&file) {
            outputs.push(text);
        }
    }
    for out in &outputs {
        assert!(!out.contains(TOKEN), "the header leaked:\n{out}");
        assert!(!out.contains(KEY), "the key leaked:\n{out}");
    }
    // The header did reach the server: it answers 401 without it, and it stored the uploads.
    let _ = a;
    assert!(
        !files_under(&server.data.join("ac")).is_empty(),
        "{}",
        server.log()
    );
}

// ---------------------------------------------------------------------------------------------
// The store itself, on values larger than one gRPC message
// ---------------------------------------------------------------------------------------------

/// A value of several MiB goes through ByteStream (REAPI) or one PUT (HTTP) and comes back whole.
fn large_value_round_trip(server: &Server) {
    use fixgate_cache::{ActionRecord, Digest, LayeredStore, MemStore, RemoteConfig, Store};

    // Not compressible and not a multiple of any chunk size.
    let mut value = Vec::with_capacity(5 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while value.len() < (5 << 20) + 12_345 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        value.extend_from_slice(&x.to_le_bytes());
    }
    let key = Digest::of(b"a large value");
    let mut config = RemoteConfig::new(server.url.clone());
    config.upload = true;
    let a = LayeredStore::open(MemStore::new(), &config);
    let output = a.put_blob(&value);
    a.put_action(
        &key,
        &ActionRecord {
            output,
            failed: false,
        },
    );
    assert!(a.take_warnings().is_empty(), "{}", server.log());
    // The value travels framed with its entry's kind and key (issue 18): a few bytes more.
    let uploaded = a.stats().bytes_uploaded;
    let len = value.len() as u64;
    assert!(
        (len..len + 64).contains(&uploaded),
        "{uploaded} bytes for {len}"
    );

    config.upload = false;
    let b = LayeredStore::open(MemStore::new(), &config);
    let record = b.get_action(&key).expect("a remote hit");
    assert_eq!(record.output, output);
    assert!(
        b.get_blob(&output).unwrap() == value,
        "the value came back changed"
    );
    assert!(b.take_warnings().is_empty());
}

#[test]
fn a_large_value_goes_through_buildgrid_bytestream_and_back() {
    large_value_round_trip(&servers::buildgrid());
}

#[test]
fn a_large_value_goes_through_nginx_and_back() {
    large_value_round_trip(&servers::nginx());
}

// ---------------------------------------------------------------------------------------------
// Sharded matrices
// ---------------------------------------------------------------------------------------------

/// `--shard K/3` on three machines with their own caches and one remote, then a final audit on
/// a fourth: the final audit executes no seed run, and judges as one unsharded audit does.
#[test]
fn three_shards_then_the_final_audit_runs_no_seed_run_and_judges_as_one_audit() {
    let server = common::servers::nginx();
    let url = server.url.as_str();
    let (repo, base, head) = pricing_repo();
    let mut ran: Vec<String> = Vec::new();
    for k in 1..=3 {
        let machine = clone_of(&repo);
        let m = Machine {
            dir: &machine.path().join("repo"),
            cache: machine.cache.path(),
        };
        let shard = format!("{k}/3");
        let (run, note) = m
            .audit(&base, &head)
            .args(&["--shard", &shard, "--remote-cache", url, "--remote-upload"])
            .report();
        assert_eq!(run.code, 0, "shard {shard}: {run:?}");
        assert_eq!(note["shard"], shard.as_str(), "{note}");
        assert_eq!(note["uploaded"], true);
        assert_eq!(note["cached"], 0, "{note}");
        let orders: Vec<String> = note["orders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap().to_string())
            .collect();
        assert_eq!(note["executed"].as_u64().unwrap() as usize, orders.len());
        ran.extend(orders);
    }
    ran.sort();
    // --seeds 2: file order, reversed, seeds 1 and 2, each in exactly one share.
    assert_eq!(ran, vec!["0", "1", "2", "rev"]);

    let last = clone_of(&repo);
    let final_machine = Machine {
        dir: &last.path().join("repo"),
        cache: last.cache.path(),
    };
    let (run, v) = final_machine
        .audit(&base, &head)
        .args(&["--remote-cache", url])
        .report();
    assert_eq!(run.code, 1, "{run:?}");
    let seed_runs_executed = v["graph"]["executed_nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "seed-run")
        .count();
    assert_eq!(seed_runs_executed, 0, "{:#}", v["graph"]);

    let alone = clone_of(&repo);
    let one = Machine {
        dir: &alone.path().join("repo"),
        cache: alone.cache.path(),
    };
    let (_, unsharded) = one.audit(&base, &head).report();
    assert_eq!(judgment(&v), judgment(&unsharded));
}

#[test]
fn a_shard_must_be_k_of_n() {
    let (repo, base, head) = pricing_repo();
    for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
        let run = fixgate_py_at(
            repo.path(),
            repo.cache.path(),
            &[],
            &["audit", "--base", &base, "--head", &head, "--shard", bad],
        );
        assert_eq!(run.code, exit::ERROR, "{bad}: {run:?}");
        assert!(run.stderr.contains("K/N"), "{bad}: {}", run.stderr);
    }
}
