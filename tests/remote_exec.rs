//! Remote execution against a real BuildGrid 0.4.4 (execution service, PostgreSQL scheduler)
//! with `fixgate worker` bots, all on loopback: remote audits judge as local ones do, a head
//! uploads only its changed files, platform properties reach the workers, and an action the
//! service cannot run is tried once more, then ends the audit with exit 2.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::audit::Audit;
use common::servers::{self, Server, Worker};
use common::{git, Run, TestRepo};

/// What a verdict rests on: the verdict, every test's bucket, every pair.
fn essence(v: &serde_json::Value) -> (String, Vec<(String, String)>, Vec<String>) {
    let mut buckets: Vec<(String, String)> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["nodeid"].as_str().unwrap().to_owned(),
                t["bucket"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    buckets.sort();
    let mut pairs: Vec<String> = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{} <- {}", p["victim"], p["culprits"]))
        .collect();
    pairs.sort();
    (v["verdict"].as_str().unwrap().to_owned(), buckets, pairs)
}

/// The client's PATH: the tests' interpreter's directory first. An action names its interpreter
/// (`python3.11`) and carries the client's PATH, where the worker looks for it first: with the
/// tests' venv off PATH, the worker would find another `python3.11` and refuse every action.
fn client_path() -> String {
    let python = common::python();
    let mut dirs: Vec<std::path::PathBuf> = python
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .into_iter()
        .collect();
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap().into_string().unwrap()
}

/// The audit these tests run: the last commit in `dir` against the one before, two shuffled
/// orders unless `extra` says how many, with the client's PATH.
fn audit<'a>(dir: &'a Path, cache: &'a Path, extra: &[&str]) -> Audit<'a> {
    let seeds: &[&str] = match extra.contains(&"--seeds") {
        true => &[],
        false => &["--seeds", "2"],
    };
    Audit::at(dir, cache)
        .quiet()
        .sides("HEAD~1", "HEAD")
        .args(&["--test-timeout", "120"])
        .args(seeds)
        .args(extra)
        .env(&[("PATH", &client_path())])
}

/// `audit`, stopped by PID if it is not done within `limit`: a hang fails the test with what
/// the audit and the service printed, instead of holding the suite until CI's clock runs out.
fn audit_within(
    dir: &Path,
    cache: &Path,
    extra: &[&str],
    limit: Duration,
    service: &Server,
) -> Run {
    audit(dir, cache, extra).run_within(limit, || format!("BuildGrid said:\n{}", service.log()))
}

/// A local audit and a remote one of the repository in `dir` agree; the remote one ran its
/// runs on the workers and started no pytest process here. Returns the remote report.
fn assert_same_as_local(
    dir: &Path,
    service: &Server,
    workers: &[&Worker],
    extra: &[&str],
) -> serde_json::Value {
    let local = audit(dir, tempfile::tempdir().unwrap().path(), extra).run();
    let mut args = vec!["--remote-executor", service.url.as_str()];
    args.extend_from_slice(extra);
    let remote = audit_within(
        dir,
        tempfile::tempdir().unwrap().path(),
        &args,
        Duration::from_secs(900),
        service,
    );
    assert_eq!(remote.code, local.code, "{remote:?}\n--- local:\n{local:?}");
    let (l, r) = (local.json(), remote.json());
    assert_eq!(essence(&r), essence(&l), "{remote:?}");
    assert!(
        r["graph"]["remote_executed"].as_u64().unwrap() > 0,
        "{remote:?}"
    );
    assert_eq!(r["pytest_processes"], 0, "{remote:?}");
    assert!(l["pytest_processes"].as_u64().unwrap() > 0);
    let runs = r["remote_execution"]["runs"].as_object().unwrap();
    let names: Vec<&str> = workers.iter().map(|w| w.bot_id.as_str()).collect();
    assert!(
        runs.values()
            .all(|p| names.contains(&p["worker"].as_str().unwrap())),
        "every run names the worker it ran on: {runs:?}"
    );
    // Where the time went: the worker's stages, inside the Execute call that waited for them
    // (one clock on loopback).
    let stages = &r["remote_execution"]["stages"];
    let secs = |k: &str| {
        stages[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k}: {stages}"))
    };
    if r["remote_execution"]["cached_actions"] != r["remote_execution"]["actions"] {
        assert!(secs("worker_execution_seconds") > 0.0, "{stages}");
        assert!(secs("worker_input_fetch_seconds") > 0.0, "{stages}");
        assert!(
            secs("worker_execution_seconds") <= secs("worker_total_seconds")
                && secs("worker_total_seconds") <= secs("execute_seconds") + 0.05,
            "{stages}"
        );
    }
    // Only collections stay local: the base's and the head's, and the base-suite replay's
    // collection (the base's tests over the head's code) when the head changed the tests.
    let local: Vec<&str> = r["remote_execution"]["local_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        local.starts_with(&["collect(base)", "collect(head)"])
            && local[2..].iter().all(|l| *l == "collect(base-suite)"),
        "only collections run locally: {local:?}"
    );
    r
}

/// The demo's shared cart, a generated polluter suite, then a head changing one file (only
/// that file is uploaded), then platform properties (a pool only one worker has; an image no
/// worker can provide).
#[test]
fn remote_audits_judge_as_local_ones_and_upload_only_what_changed() {
    let pg = servers::postgres();
    let service = servers::buildgrid_execution(&pg, 5, None);
    let blue = servers::worker(&service, "blue", &["pool=blue"]);
    let green = servers::worker(&service, "green", &["pool=green"]);

    // The demo repository (an agent's patch matching the polluted total).
    let demo = tempfile::tempdir().unwrap();
    let made = common::fixgate_at(
        demo.path(),
        tempfile::tempdir().unwrap().path(),
        &[],
        &[
            "--quiet",
            "--python",
            common::python().to_str().unwrap(),
            "demo",
            "--keep",
            demo.path().join("repo").to_str().unwrap(),
        ],
    );
    assert_eq!(made.code, 0, "the demo ran: {made:?}");
    let r = assert_same_as_local(&demo.path().join("repo"), &service, &[&blue, &green], &[]);
    assert_eq!(r["verdict"], "reject");

    // A polluter suite: one polluter, three victims in other files.
    let suite = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/gen_pollution.py"))
        .arg(suite.path())
        .args([
            "--tests",
            "40",
            "--modules",
            "2",
            "--polluters",
            "1",
            "--victims",
            "3",
        ])
        .args(["--heads", "1"])
        .status()
        .unwrap();
    assert!(status.success());
    git(suite.path(), &["checkout", "-q", "head-0"]);
    let r = assert_same_as_local(suite.path(), &service, &[&blue, &green], &[]);
    assert_eq!(r["pairs"].as_array().unwrap().len(), 3, "{r}");

    // A case the head adds to a data file: the fixture replay on the workers runs on the
    // base's bytes, which do not make that case, and says so instead of failing.
    let (cases, _, _) = common::new_case_in_a_data_file();
    let r = assert_same_as_local(cases.path(), &service, &[&blue, &green], &[]);
    let replay = r["fixtures"]["replay"].as_array().unwrap();
    let new = replay
        .iter()
        .find(|t| t["nodeid"] == "tests/test_cases.py::test_case[3]")
        .unwrap_or_else(|| panic!("{}", r["fixtures"]));
    assert_eq!(
        (&new["base"], &new["reading"]),
        (&serde_json::Value::Null, &serde_json::json!("additive")),
        "{new}"
    );

    // A head that changes one file uploads that file and no other of the snapshot's. Its
    // test_escape tries to write beside its action's folder on the worker, where the other
    // actions live (the tree is root/tree/ in the action's folder).
    let escape = "def test_escape():\n    for p in ['../../../escaped', '../../../../escaped']:\n\
                  \x20       try:\n            open(p, 'w').write('x')\n        except OSError:\n\
                  \x20           pass\n";
    let repo = TestRepo::new();
    repo.write(
        "tests/test_a.py",
        "import json, pathlib\n\ndef test_a():\n    assert json.loads(pathlib.Path('tests/data/a.json').read_text())['v'] >= 1\n",
    )
    .write("tests/data/a.json", "{\"v\": 1, \"of\": \"the upload count\"}\n")
    .write("tests/test_b.py", "def test_b():\n    assert 'the upload count'\n")
    .write("tests/test_escape.py", escape)
    .write("src/pkg/__init__.py", "# the upload count\n")
    .write("README.md", "The upload count.\n");
    repo.commit("base");
    repo.write(
        "tests/data/a.json",
        "{\"v\": 2, \"of\": \"the upload count\"}\n",
    );
    repo.commit("head");
    let first = audit(
        repo.path(),
        tempfile::tempdir().unwrap().path(),
        &["--remote-executor", &service.url],
    )
    .run();
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(
        first.json()["containment"],
        "namespaces",
        "the workers contain their actions with namespaces (as root, or with unprivileged \
         user namespaces enabled)"
    );
    for w in [&blue, &green] {
        for dir in [w.work_dir(), w.work_dir().join("..")] {
            assert!(
                !dir.join("escaped").exists(),
                "a run wrote outside its action's folder on {}: {}",
                w.bot_id,
                dir.display()
            );
        }
    }
    let first = first.json();
    // Six files, one of them in two versions (none of them in the service's CAS before: the
    // audits above uploaded other bytes).
    assert_eq!(
        first["remote_execution"]["uploaded_snapshot_files"], 7,
        "{first}"
    );
    repo.write(
        "tests/test_b.py",
        "def test_b():\n    assert 'the upload count, again'\n",
    );
    repo.commit("next head");
    let second = audit(
        repo.path(),
        tempfile::tempdir().unwrap().path(),
        &["--remote-executor", &service.url],
    )
    .run();
    assert_eq!(second.code, 0, "{second:?}");
    let second = second.json();
    let exec = &second["remote_execution"];
    assert_eq!(
        exec["uploaded_snapshot_files"], 1,
        "only test_b.py is new: {exec}"
    );
    assert!(
        exec["uploaded_blobs"].as_u64() < first["remote_execution"]["uploaded_blobs"].as_u64(),
        "{exec}"
    );

    // Platform properties reach the scheduler and the workers: a pool only green has.
    let before = blue.leases();
    let pooled = audit(
        repo.path(),
        tempfile::tempdir().unwrap().path(),
        &[
            "--remote-executor",
            &service.url,
            "--remote-platform",
            "pool=green",
            "--no-cache",
        ],
    )
    .run();
    assert_eq!(pooled.code, 0, "{pooled:?}");
    let pooled = pooled.json();
    let runs = pooled["remote_execution"]["runs"].as_object().unwrap();
    assert!(!runs.is_empty());
    assert!(
        runs.values().all(|p| p["worker"] == "green"),
        "pool=green runs only on green: {runs:?}"
    );
    assert_eq!(blue.leases(), before, "blue took no lease:\n{}", blue.log());
    // An image no worker here can provide: the worker refuses, the audit ends with exit 2.
    let imaged = audit(
        repo.path(),
        tempfile::tempdir().unwrap().path(),
        &[
            "--remote-executor",
            &service.url,
            "--remote-platform",
            "container-image=docker://python:3.12",
            "--no-cache",
        ],
    )
    .run();
    assert_eq!(imaged.code, 2, "{imaged:?}");
    assert!(
        imaged.stderr.contains("container-image") && imaged.stderr.contains("tried twice"),
        "{imaged:?}"
    );
}

/// Waits until `worker` starts a lease, then kills it.
fn kill_at_first_lease(worker: &mut Worker, limit: Duration) {
    let start = Instant::now();
    while worker.leases() == 0 {
        assert!(
            start.elapsed() < limit,
            "no lease within {limit:?}:\n{}",
            worker.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    worker.kill();
}

/// One victim of one polluter: small, so that a lost worker costs little.
fn small_polluter() -> TestRepo {
    let repo = TestRepo::new();
    repo.write(
        "tests/test_state.py",
        "STATE = {}\n\ndef test_reader():\n    assert 'x' not in STATE\n\ndef test_plain():\n    assert True\n",
    );
    repo.commit("base");
    // The patch adds the polluter: its finding is the patch's.
    repo.write(
        "tests/test_state.py",
        "STATE = {}\n\ndef test_setter():\n    STATE['x'] = 1\n\ndef test_reader():\n    assert 'x' not in STATE\n\ndef test_plain():\n    assert True\n",
    );
    repo.commit("head");
    repo
}

/// A remote audit with one action in flight, on its own thread (the test kills workers).
fn audit_in_background(
    repo: &TestRepo,
    service: &Server,
    extra: &'static [&'static str],
) -> std::thread::JoinHandle<Run> {
    let dir = repo.path().to_path_buf();
    let url = service.url.clone();
    std::thread::spawn(move || {
        let cache = tempfile::tempdir().unwrap();
        let mut args = vec!["--remote-executor", url.as_str(), "--jobs", "1"];
        args.extend_from_slice(extra);
        audit(&dir, cache.path(), &args).run()
    })
}

#[test]
fn a_worker_lost_mid_action_is_retried_once_then_the_audit_ends_with_exit_2() {
    let pg = servers::postgres();
    // BuildGrid long-polls only when 80% of the keepalive is at least its 3 s network timeout.
    let service = servers::buildgrid_execution(&pg, 4, None);
    let repo = small_polluter();

    // The first worker dies with the first action; the second runs it again and the rest.
    let mut doomed = servers::worker(&service, "doomed", &[]);
    let running = audit_in_background(&repo, &service, &[]);
    kill_at_first_lease(&mut doomed, Duration::from_secs(120));
    let survivor = servers::worker(&service, "survivor", &[]);
    let recovered = running.join().unwrap();
    assert_eq!(recovered.code, 1, "the polluter rejects: {recovered:?}");
    let r = recovered.json();
    let local = audit(repo.path(), tempfile::tempdir().unwrap().path(), &[]).run();
    assert_eq!(essence(&r), essence(&local.json()));
    let retried = r["remote_execution"]["retried"].as_array().unwrap();
    assert_eq!(
        retried.len(),
        1,
        "{}\n--- doomed:\n{}\n--- survivor:\n{}\n--- BuildGrid:\n{}",
        r["remote_execution"],
        doomed.log(),
        survivor.log(),
        service
            .log()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("etr"))
            .take(40)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(survivor.leases() > 0);
    drop(survivor);

    // Both tries lost: exit 2, with what the service said, and no verdict.
    let mut first = servers::worker(&service, "first", &[]);
    let running = audit_in_background(&repo, &service, &["--no-cache"]);
    kill_at_first_lease(&mut first, Duration::from_secs(120));
    let mut second = servers::worker(&service, "second", &[]);
    kill_at_first_lease(&mut second, Duration::from_secs(120));
    let failed = running.join().unwrap();
    assert_eq!(failed.code, 2, "{failed:?}");
    assert!(
        failed.stderr.contains("could not run") && failed.stderr.contains("tried twice"),
        "{failed:?}"
    );
    assert!(
        failed.stdout.is_empty(),
        "no report is a verdict: {failed:?}"
    );
}

/// A service that takes few requests at once (BuildGrid with the fewest threads it allows: five
/// RPCs at once, one held by the worker's long poll) refuses some of an audit's actions in
/// flight with RESOURCE_EXHAUSTED: each is asked again after a pause, not counted as the
/// action's failure, and the audit judges as a local one (before, it ended with exit 2
/// "Concurrent RPC limit exceeded" on a 2-core machine's default BuildGrid). Twelve shuffled
/// orders make fourteen order runs ready at once after the collections, each an Execute held
/// open while the one worker runs the actions one by one: more than the service's five, whatever
/// the machine's timing (with the default three, the four order runs could fit, and a CI run
/// saw no busy answer).
#[test]
fn a_busy_service_is_asked_again_and_the_audit_judges_as_a_local_one() {
    let pg = servers::postgres();
    // A worker is lost after BuildGrid's usual 30 s of silence: a worker kept waiting by the
    // busy service is not lost.
    let service = servers::buildgrid_execution(&pg, 30, Some(5));
    let worker = servers::worker(&service, "lone", &[]);
    let repo = small_polluter();
    let r = assert_same_as_local(repo.path(), &service, &[&worker], &["--seeds", "12"]);
    assert_eq!(r["verdict"], "reject", "{r}");
    let summary = &r["remote_execution"];
    assert!(
        summary["busy_answers"].as_u64().unwrap() > 0,
        "the service refused some requests: {summary}"
    );
    assert_eq!(summary["retried"], serde_json::json!([]), "{summary}");
}

/// A worker that comes to a service the audit already keeps busy (BuildGrid's fewest threads,
/// five, and fifteen actions sent at once, queued with no worker until the scheduler holds as
/// many as the service takes RPCs at once: twelve shuffled orders, file and reversed order, the
/// base's suite run; with the tests' two shuffled orders the five actions could fit, and a CI
/// run saw no busy answer): it must connect, start its
/// session and take its leases through threads the audit's streams compete for, and the audit
/// ends as the local one does, with nothing tried twice, in bounded time. Before the worker
/// asked again when its first request (GetCapabilities) was answered busy, it exited there in
/// 3 runs of 4, and the audit waited past the test's 400 s. (The build before the streams were
/// let go passed this too, here: the hang it mends, a worker giving up its session after a
/// minute of busy answers, was not reproduced.)
#[test]
fn a_worker_that_comes_to_a_service_the_audit_keeps_busy_gets_its_turn() {
    /// BuildGrid's fewest threads: the RPCs it takes at once.
    const THREADS: u32 = 5;
    let pg = servers::postgres();
    let service = servers::buildgrid_execution(&pg, 30, Some(THREADS));
    let repo = small_polluter();
    let local = audit(
        repo.path(),
        tempfile::tempdir().unwrap().path(),
        &["--seeds", "12"],
    )
    .run();
    let cache = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        let remote = s.spawn(|| {
            audit_within(
                repo.path(),
                cache.path(),
                &["--remote-executor", service.url.as_str(), "--seeds", "12"],
                Duration::from_secs(400),
                &service,
            )
        });
        // The audit's actions fill the service's threads while there is no worker: as many
        // queued as it takes RPCs at once, each followed by an Execute stream (BuildGrid's
        // jobs table keeps REAPI's stage: 2 is QUEUED).
        let queued = || {
            pg.select("SELECT count(*) FROM jobs WHERE stage = 2")
                .parse::<u32>()
                .unwrap_or(0)
        };
        // As many as it takes RPCs at once, or as many as the service's threads let through
        // when the count stops growing: one may be held by another of the audit's streams, or
        // two Executes may share one job (CI runs waited 300 s at four, then at three). The
        // busy answers asserted below show the service was full when the worker came.
        let start = Instant::now();
        let (mut last, mut since) = (0, Instant::now());
        loop {
            let n = queued();
            if n != last {
                (last, since) = (n, Instant::now());
            }
            if n >= THREADS || (n > 0 && since.elapsed() >= Duration::from_secs(15)) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "the audit's queue did not settle within 300 s ({n} queued):\n{}",
                service.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let worker = servers::worker(&service, "late", &[]);
        let remote = remote.join().unwrap();
        assert_eq!(remote.code, local.code, "{remote:?}\n{}", worker.log());
        let r = remote.json();
        assert_eq!(essence(&r), essence(&local.json()), "{remote:?}");
        assert_eq!(r["verdict"], "reject", "{r}");
        let summary = &r["remote_execution"];
        assert!(
            summary["busy_answers"].as_u64().unwrap() > 0,
            "the service refused some requests: {summary}"
        );
        assert!(summary["actions"].as_u64().unwrap() > 0, "{summary}");
        assert_eq!(summary["retried"], serde_json::json!([]), "{summary}");
    });
}
