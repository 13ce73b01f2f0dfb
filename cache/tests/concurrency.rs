//! Several stores and processes on one cache directory, and processes killed mid-write.
//!
//! The process tests run this test binary again as the child, selecting the `child_writer`
//! test and passing its orders in environment variables (without them it has nothing to do).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use fixgate_cache::{ActionRecord, Dep, Digest, DiskStore, Store, TraceEntry, Warning};

/// Long enough that a loaded CI machine does not make a store give up on the index; giving up
/// is allowed behaviour, but these tests check that nothing is lost when nobody gives up.
const PATIENT: Duration = Duration::from_secs(120);

fn names(writer: u32, i: u32) -> (Digest, Digest, Digest) {
    let stable = Digest::of(format!("stable {writer} {i}").as_bytes());
    let key = Digest::of(format!("key {writer} {i}").as_bytes());
    let dep = Digest::of(format!("dep {writer} {i}").as_bytes());
    (stable, key, dep)
}

/// One unit of work: a result, its trace, and a lookup of it.
fn write_one(store: &DiskStore, writer: u32, i: u32) {
    let (stable, key, dep) = names(writer, i);
    let blob = store.put_blob(format!("output {writer} {i}").as_bytes());
    store.put_action(
        &key,
        &ActionRecord {
            output: blob,
            failed: false,
        },
    );
    store.record_trace(&stable, TraceEntry::new(vec![Dep::file("f", dep)], key));
}

fn assert_all_present(dir: &Path, writers: u32, per_writer: u32) {
    let store = DiskStore::open(dir).unwrap().with_index_wait(PATIENT);
    for w in 0..writers {
        for i in 0..per_writer {
            let (stable, key, dep) = names(w, i);
            let (entry, record) = store
                .lookup_trace(&stable, &|_| Some(dep))
                .unwrap_or_else(|| panic!("trace {w}/{i} lost"));
            assert_eq!(entry.output, key);
            assert_eq!(
                store.get_blob(&record.output).unwrap(),
                format!("output {w} {i}").as_bytes()
            );
        }
    }
    assert!(store.take_warnings().is_empty());
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn threads_with_their_own_stores_share_one_directory() {
    // Each thread opens its own store, so each holds its own redb handle: they contend for the
    // file lock exactly as processes do (redb refuses a second handle in one process too).
    const THREADS: u32 = 8;
    const EACH: u32 = 12;
    let tmp = tempfile::tempdir().unwrap();
    DiskStore::open(tmp.path()).unwrap();
    let start = Barrier::new(THREADS as usize);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (dir, start) = (tmp.path(), &start);
            s.spawn(move || {
                let store = DiskStore::open(dir).unwrap().with_index_wait(PATIENT);
                start.wait();
                for i in 0..EACH {
                    write_one(&store, t, i);
                    // Read someone else's work while they write.
                    let (stable, _, dep) = names((t + 1) % THREADS, i / 2);
                    let _ = store.lookup_trace(&stable, &|_| Some(dep));
                }
                let warnings = store.take_warnings();
                assert!(warnings.is_empty(), "thread {t}: {warnings:?}");
            });
        }
    });
    assert_all_present(tmp.path(), THREADS, EACH);
}

#[test]
fn one_store_shared_by_many_threads_queues_in_process() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path())
        .unwrap()
        .with_index_wait(PATIENT);
    thread::scope(|s| {
        for t in 0..4 {
            let store = &store;
            s.spawn(move || (0..8).for_each(|i| write_one(store, t, i)));
        }
    });
    assert!(store.take_warnings().is_empty());
    assert_all_present(tmp.path(), 4, 8);
}

#[test]
fn a_store_that_waits_too_long_gives_up_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path())
        .unwrap()
        .with_index_wait(Duration::from_millis(50));
    let (stable, key, dep) = names(0, 0);
    write_one(&store, 0, 0);
    // Another handle holds the index (as another process would, for too long).
    let held = redb::Database::create(tmp.path().join("index.redb")).unwrap();
    assert!(store.lookup_trace(&stable, &|_| Some(dep)).is_none());
    store.record_trace(&stable, TraceEntry::new(vec![], key));
    let warnings = store.take_warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings
        .iter()
        .all(|w| matches!(w, Warning::IndexBusy { .. })));
    drop(held);
    assert!(store.lookup_trace(&stable, &|_| Some(dep)).is_some());
}

fn spawn_child(dir: &Path, writer: u32, count: u32) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["child_writer", "--exact", "--nocapture"])
        .args(["--test-threads", "1"])
        .env("FIXGATE_TEST_CHILD_DIR", dir)
        .env("FIXGATE_TEST_CHILD_WRITER", writer.to_string())
        .env("FIXGATE_TEST_CHILD_COUNT", count.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The child side of the process tests: writes `COUNT` units (0 = until killed), printing
/// `recorded <i>` after each one returns. Run by the harness itself, it returns at once.
#[test]
fn child_writer() {
    let Ok(dir) = std::env::var("FIXGATE_TEST_CHILD_DIR") else {
        return;
    };
    let writer: u32 = std::env::var("FIXGATE_TEST_CHILD_WRITER")
        .unwrap()
        .parse()
        .unwrap();
    let count: u32 = std::env::var("FIXGATE_TEST_CHILD_COUNT")
        .unwrap()
        .parse()
        .unwrap();
    let store = DiskStore::open(dir).unwrap().with_index_wait(PATIENT);
    let mut i = 0;
    while count == 0 || i < count {
        write_one(&store, writer, i);
        let warnings = store.take_warnings();
        assert!(warnings.is_empty(), "{warnings:?}");
        println!("recorded {i}");
        i += 1;
    }
}

/// The `<i>` of a `recorded <i>` line (libtest may print `test child_writer ... ` before it).
fn parse_recorded(line: &str) -> Option<u32> {
    line.split("recorded ").nth(1)?.trim().parse().ok()
}

/// Reads a child's `recorded <i>` lines until it exits.
fn recorded(child: &mut Child) -> BTreeSet<u32> {
    let out = child.stdout.take().unwrap();
    BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| parse_recorded(&l))
        .collect()
}

#[test]
fn processes_share_one_directory() {
    const CHILDREN: u32 = 4;
    const EACH: u32 = 10;
    let tmp = tempfile::tempdir().unwrap();
    DiskStore::open(tmp.path()).unwrap();
    let mut children: Vec<Child> = (0..CHILDREN)
        .map(|w| spawn_child(tmp.path(), w, EACH))
        .collect();
    // The parent reads while they write.
    let reader = DiskStore::open(tmp.path())
        .unwrap()
        .with_index_wait(PATIENT);
    for i in 0..EACH {
        let (stable, _, dep) = names(i % CHILDREN, i);
        let _ = reader.lookup_trace(&stable, &|_| Some(dep));
    }
    for (w, child) in children.iter_mut().enumerate() {
        let done = recorded(child);
        assert!(child.wait().unwrap().success(), "child {w} failed");
        assert_eq!(done.len() as u32, EACH, "child {w}");
    }
    assert!(reader.take_warnings().is_empty());
    assert_all_present(tmp.path(), CHILDREN, EACH);
}

#[test]
fn a_process_killed_at_any_moment_leaves_the_cache_usable() {
    let tmp = tempfile::tempdir().unwrap();
    DiskStore::open(tmp.path()).unwrap();
    for round in 0..6u32 {
        let mut child = spawn_child(tmp.path(), 100 + round, 0);
        let out = child.stdout.take().unwrap();
        // Read progress on a thread so the kill lands while the child is mid-write.
        let progress = thread::spawn(move || {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| parse_recorded(&l))
                .collect::<BTreeSet<u32>>()
        });
        thread::sleep(Duration::from_millis(150 + u64::from(round) * 37));
        child.kill().unwrap();
        child.wait().unwrap();
        let done = progress.join().unwrap();

        // Everything the child finished is there; the cache works and verifies clean.
        let store = DiskStore::open(tmp.path())
            .unwrap()
            .with_index_wait(PATIENT);
        for &i in &done {
            let (stable, key, dep) = names(100 + round, i);
            let (entry, _) = store
                .lookup_trace(&stable, &|_| Some(dep))
                .unwrap_or_else(|| panic!("round {round}: trace {i} lost"));
            assert_eq!(entry.output, key);
        }
        write_one(&store, 999, round);
        let (stable, key, dep) = names(999, round);
        assert_eq!(
            store
                .lookup_trace(&stable, &|_| Some(dep))
                .unwrap()
                .0
                .output,
            key
        );
        let warnings = store.take_warnings();
        assert!(warnings.is_empty(), "round {round}: {warnings:?}");
        let report = store.verify().unwrap();
        assert!(
            report.problems.is_empty(),
            "round {round}: {:?}",
            report.problems
        );
    }
}
