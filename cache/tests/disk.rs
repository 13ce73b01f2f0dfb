//! The disk store: round trips, damage of every kind read as a miss with a warning, schema
//! versions, maintenance.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use fixgate_cache::{
    ActionRecord, Dep, Digest, DiskStore, OpenError, Store, TraceEntry, Warning, SCHEMA,
};

fn ac_file(dir: &Path, key: &Digest) -> PathBuf {
    dir.join("ac").join(key.to_hex())
}

fn cas_file(dir: &Path, digest: &Digest) -> PathBuf {
    let hex = digest.to_hex();
    dir.join("cas").join(&hex[..2]).join(hex)
}

/// Bytes that look like nothing in particular, deterministic so failures reproduce.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn truncate(path: &Path, keep: u64) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(keep).unwrap();
}

fn set_mtime(path: &Path, t: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// Damage done to a cache file from outside.
type Harm = fn(&Path);

/// Stores `output` as the result of `key` and returns the blob digest.
fn put_result(store: &dyn Store, key: &Digest, output: &[u8]) -> Digest {
    let blob = store.put_blob(output);
    store.put_action(
        key,
        &ActionRecord {
            output: blob,
            failed: false,
        },
    );
    blob
}

#[test]
fn round_trips_and_survives_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let key = Digest::of(b"key");
    let stable = Digest::of(b"stable");
    let dep = Digest::of(b"fixture v1");
    {
        let store = DiskStore::open(tmp.path()).unwrap();
        let blob = put_result(&store, &key, b"output bytes");
        assert_eq!(store.get_blob(&blob).unwrap(), b"output bytes");
        store.record_trace(
            &stable,
            TraceEntry::new(vec![Dep::file("f.json", dep)], key),
        );
        assert!(store.take_warnings().is_empty());
    }
    let store = DiskStore::open(tmp.path()).unwrap();
    let record = store.get_action(&key).unwrap();
    assert_eq!(store.get_blob(&record.output).unwrap(), b"output bytes");
    let (entry, rec) = store.lookup_trace(&stable, &|_| Some(dep)).unwrap();
    assert_eq!(entry.output, key);
    assert_eq!(rec, record);
    assert!(store.lookup_trace(&stable, &|_| None).is_none());
    assert!(store.take_warnings().is_empty());
    assert_eq!(
        fs::read_to_string(tmp.path().join("VERSION")).unwrap(),
        format!("{SCHEMA}\n")
    );
}

#[test]
fn trace_lookup_hits_both_sides_of_a_flip_flop() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let stable = Digest::of(b"seed-run(1)");
    let (v1, v2) = (Digest::of(b"v1"), Digest::of(b"v2"));
    let (k1, k2) = (Digest::of(b"k1"), Digest::of(b"k2"));
    put_result(&store, &k1, b"with v1");
    store.record_trace(&stable, TraceEntry::new(vec![Dep::file("db.json", v1)], k1));
    put_result(&store, &k2, b"with v2");
    store.record_trace(&stable, TraceEntry::new(vec![Dep::file("db.json", v2)], k2));
    assert_eq!(
        store.lookup_trace(&stable, &|_| Some(v1)).unwrap().0.output,
        k1
    );
    assert_eq!(
        store.lookup_trace(&stable, &|_| Some(v2)).unwrap().0.output,
        k2
    );
    assert_eq!(store.trace_candidates(&stable).len(), 2);
}

#[test]
fn traces_recorded_in_one_batch_equal_traces_recorded_one_by_one() {
    let entries = |n: u8| -> Vec<(Digest, TraceEntry)> {
        (0..n)
            .map(|i| {
                // Two stable keys, so that a batch also pushes onto a key it pushed before.
                let stable = Digest::of(&[i % 2]);
                let dep = Dep::file("f", Digest::of(&[b'd', i]));
                (stable, TraceEntry::new(vec![dep], Digest::of(&[b'k', i])))
            })
            .collect()
    };
    let (one, batch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let one = DiskStore::open(one.path()).unwrap();
    let batch = DiskStore::open(batch.path()).unwrap();
    for (stable, entry) in entries(6) {
        one.record_trace(&stable, entry);
    }
    batch.record_traces(entries(6));
    for stable in [Digest::of(&[0]), Digest::of(&[1])] {
        let got = batch.trace_candidates(&stable);
        assert_eq!(got.len(), 3);
        assert_eq!(got, one.trace_candidates(&stable));
    }
    assert!(batch.take_warnings().is_empty());
}

#[test]
fn damaged_action_records_are_misses_with_warnings() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let damage: [(&str, Harm); 4] = [
        ("random bytes", |p| fs::write(p, noise(80, 1)).unwrap()),
        ("truncated", |p| truncate(p, 20)),
        ("empty", |p| truncate(p, 0)),
        ("one bit", |p| {
            let mut b = fs::read(p).unwrap();
            b[9] ^= 1;
            fs::write(p, b).unwrap();
        }),
    ];
    for (i, (what, harm)) in damage.iter().enumerate() {
        let key = Digest::of(&[i as u8]);
        put_result(&store, &key, what.as_bytes());
        harm(&ac_file(tmp.path(), &key));
        assert_eq!(store.get_action(&key), None, "{what}");
        let warnings = store.take_warnings();
        assert!(
            matches!(warnings.as_slice(), [Warning::CorruptRecord { .. }]),
            "{what}: {warnings:?}"
        );
        assert!(!ac_file(tmp.path(), &key).exists(), "{what}: removed");
        // And the entry can be written again.
        put_result(&store, &key, what.as_bytes());
        assert!(store.get_action(&key).is_some());
    }
}

#[test]
fn damaged_blobs_are_misses_with_warnings() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    for (i, what) in ["random bytes", "truncated"].into_iter().enumerate() {
        let content = noise(4096, i as u64 + 10);
        let blob = store.put_blob(&content);
        let path = cas_file(tmp.path(), &blob);
        if i == 0 {
            fs::write(&path, noise(4096, 99)).unwrap();
        } else {
            truncate(&path, 100);
        }
        assert_eq!(store.get_blob(&blob), None, "{what}");
        assert!(matches!(
            store.take_warnings().as_slice(),
            [Warning::CorruptBlob { .. }]
        ));
        assert!(!path.exists());
        store.put_blob(&content);
        assert_eq!(store.get_blob(&blob).unwrap(), content);
    }
}

#[test]
fn a_truncated_blob_is_rewritten_by_the_next_put() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let blob = store.put_blob(b"0123456789");
    truncate(&cas_file(tmp.path(), &blob), 3);
    store.put_blob(b"0123456789");
    assert_eq!(store.get_blob(&blob).unwrap(), b"0123456789");
}

/// Issue 18: a blob damaged in place (its size unchanged) was taken as present by the next put,
/// so the graph, which reads an output back after letting go of its copy, found it damaged and
/// failed the audit.
#[test]
fn regression_a_blob_damaged_in_place_is_rewritten_by_the_next_put() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let blob = store.put_blob(b"0123456789");
    fs::write(cas_file(tmp.path(), &blob), b"0123456788").unwrap();
    store.put_blob(b"0123456789");
    assert_eq!(store.get_blob(&blob).unwrap(), b"0123456789");
    assert!(store.take_warnings().is_empty());
}

/// Fills the index with enough candidates to span several pages.
fn fill_index(store: &DiskStore, n: u8) -> Vec<(Digest, Digest, Digest)> {
    (0..n)
        .map(|i| {
            let stable = Digest::of(&[b's', i]);
            let key = Digest::of(&[b'k', i]);
            let dep = Digest::of(&[b'd', i]);
            put_result(store, &key, &[i]);
            store.record_trace(&stable, TraceEntry::new(vec![Dep::file("f", dep)], key));
            (stable, key, dep)
        })
        .collect()
}

fn index_damage() -> Vec<(&'static str, Harm)> {
    vec![
        ("random bytes", |p: &Path| {
            fs::write(p, noise(16384, 3)).unwrap()
        }),
        ("truncated to 100 bytes", |p: &Path| truncate(p, 100)),
        ("truncated by half", |p: &Path| {
            let len = fs::metadata(p).unwrap().len();
            truncate(p, len / 2)
        }),
        ("pages overwritten", |p: &Path| {
            let mut b = fs::read(p).unwrap();
            let end = b.len().min(64 * 1024);
            let start = 4096.min(end);
            b[start..end].copy_from_slice(&noise(end - start, 4));
            fs::write(p, b).unwrap();
        }),
    ]
}

#[test]
fn a_damaged_index_is_moved_aside_on_open_and_recreated() {
    for (what, harm) in index_damage() {
        let tmp = tempfile::tempdir().unwrap();
        {
            let store = DiskStore::open(tmp.path()).unwrap();
            fill_index(&store, 12);
        }
        harm(&tmp.path().join("index.redb"));

        let store = DiskStore::open(tmp.path()).unwrap();
        let warnings = store.take_warnings();
        assert!(
            matches!(
                warnings.as_slice(),
                [Warning::CorruptIndex {
                    moved_to: Some(_),
                    ..
                }]
            ),
            "{what}: {warnings:?}"
        );
        assert!(tmp.path().join("index.redb.corrupt").exists(), "{what}");

        // The new index works.
        let traces = fill_index(&store, 3);
        for (stable, key, dep) in traces {
            assert_eq!(
                store
                    .lookup_trace(&stable, &|_| Some(dep))
                    .unwrap()
                    .0
                    .output,
                key
            );
        }
        assert!(store.take_warnings().is_empty(), "{what}");
    }
}

#[test]
fn an_index_damaged_while_a_store_is_open_is_caught_on_the_next_use() {
    for (what, harm) in index_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let store = DiskStore::open(tmp.path()).unwrap();
        let traces = fill_index(&store, 12);
        harm(&tmp.path().join("index.redb"));

        let (stable, _, dep) = traces[0];
        assert!(
            store.lookup_trace(&stable, &|_| Some(dep)).is_none(),
            "{what}"
        );
        assert!(
            store
                .take_warnings()
                .iter()
                .any(|w| matches!(w, Warning::CorruptIndex { .. })),
            "{what}"
        );
        let (stable, key, dep) = fill_index(&store, 1)[0];
        assert_eq!(
            store
                .lookup_trace(&stable, &|_| Some(dep))
                .unwrap()
                .0
                .output,
            key
        );
    }
}

#[test]
fn a_damaged_dependency_set_is_a_miss() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let (stable, _, dep) = fill_index(&store, 1)[0];
    // The dependency-set blob is the one blob that is not a one-byte result.
    for shard in fs::read_dir(tmp.path().join("cas")).unwrap() {
        for f in fs::read_dir(shard.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if fs::metadata(&p).unwrap().len() > 1 {
                fs::write(&p, b"garbage").unwrap();
            }
        }
    }
    assert!(store.lookup_trace(&stable, &|_| Some(dep)).is_none());
    assert!(matches!(
        store.take_warnings().as_slice(),
        [Warning::CorruptBlob { .. }]
    ));
}

#[test]
fn an_older_or_unreadable_schema_is_cleared_with_a_warning() {
    for found in ["0", "not a number"] {
        let tmp = tempfile::tempdir().unwrap();
        let key = Digest::of(b"k");
        {
            let store = DiskStore::open(tmp.path()).unwrap();
            put_result(&store, &key, b"x");
        }
        fs::write(tmp.path().join("VERSION"), found).unwrap();
        let store = DiskStore::open(tmp.path()).unwrap();
        assert!(matches!(
            store.take_warnings().as_slice(),
            [Warning::SchemaCleared { found: f, .. }] if f == found
        ));
        assert_eq!(store.get_action(&key), None);
        assert_eq!(
            fs::read_to_string(tmp.path().join("VERSION")).unwrap(),
            format!("{SCHEMA}\n")
        );
    }
}

#[test]
fn a_newer_schema_is_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let key = Digest::of(b"k");
    {
        let store = DiskStore::open(tmp.path()).unwrap();
        put_result(&store, &key, b"x");
    }
    fs::write(tmp.path().join("VERSION"), format!("{}\n", SCHEMA + 1)).unwrap();
    let err = DiskStore::open(tmp.path()).unwrap_err();
    assert!(matches!(err, OpenError::NewerSchema { found, .. } if found == SCHEMA + 1));
    assert!(ac_file(tmp.path(), &key).exists());
}

#[test]
fn an_unusable_directory_is_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    fs::write(&file, b"").unwrap();
    let err = DiskStore::open(file.join("cache")).unwrap_err();
    assert!(matches!(err, OpenError::Unusable { .. }), "{err}");
    assert!(err.to_string().starts_with("cannot use "), "{err}");
}

#[test]
fn verify_removes_bad_entries_and_keeps_good_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let good = Digest::of(b"good");
    let bad = Digest::of(b"bad");
    put_result(&store, &good, b"good output");
    let bad_blob = put_result(&store, &bad, b"bad output");
    fs::write(ac_file(tmp.path(), &bad), b"junk").unwrap();
    fs::write(cas_file(tmp.path(), &bad_blob), b"junk").unwrap();

    let report = store.verify().unwrap();
    assert_eq!(report.ac_checked, 2);
    assert_eq!(report.cas_checked, 2);
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(store.get_action(&good).is_some());
    assert!(!ac_file(tmp.path(), &bad).exists());
    assert!(!cas_file(tmp.path(), &bad_blob).exists());
    assert!(store.verify().unwrap().problems.is_empty());
}

#[test]
fn stats_count_each_area() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    fill_index(&store, 3);
    let stats = store.stats().unwrap();
    assert_eq!(stats.ac.entries, 3);
    // Three results and three dependency sets.
    assert_eq!(stats.cas.entries, 6);
    assert_eq!(stats.index.entries, 3);
    assert!(stats.index.bytes > 0);
    assert!(stats.ac.bytes > 0 && stats.cas.bytes > 0);
}

#[test]
fn a_hit_renews_the_entry_for_lru() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let key = Digest::of(b"k");
    let blob = put_result(&store, &key, b"x");
    let long_ago = SystemTime::now() - Duration::from_secs(86_400);
    set_mtime(&ac_file(tmp.path(), &key), long_ago);
    set_mtime(&cas_file(tmp.path(), &blob), long_ago);
    store.get_action(&key).unwrap();
    store.get_blob(&blob).unwrap();
    for path in [ac_file(tmp.path(), &key), cas_file(tmp.path(), &blob)] {
        let mtime = fs::metadata(&path).unwrap().modified().unwrap();
        assert!(mtime > long_ago + Duration::from_secs(3600));
    }
}

#[test]
fn gc_by_age_removes_what_was_not_used_recently() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let now = SystemTime::now();
    let old = Digest::of(b"old");
    let fresh = Digest::of(b"fresh");
    let old_blob = put_result(&store, &old, b"old output");
    put_result(&store, &fresh, b"fresh output");
    for p in [ac_file(tmp.path(), &old), cas_file(tmp.path(), &old_blob)] {
        set_mtime(&p, now - Duration::from_secs(10 * 86_400));
    }
    let report = store
        .gc(None, Some(Duration::from_secs(7 * 86_400)), now)
        .unwrap();
    assert_eq!(report.removed.entries, 2);
    assert_eq!(report.kept.entries, 2);
    assert_eq!(store.get_action(&old), None);
    assert!(store.get_action(&fresh).is_some());
}

#[test]
fn gc_by_size_removes_least_recently_used_first_and_prunes_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let traces = fill_index(&store, 10);
    let now = SystemTime::now();
    // Entry i was last used i hours before now: trace 0 is the most recent.
    for (i, (_, key, _)) in traces.iter().enumerate() {
        let t = now - Duration::from_secs(3600 * (i as u64 + 1));
        set_mtime(&ac_file(tmp.path(), key), t);
        let record = store.get_action(key).unwrap();
        set_mtime(&ac_file(tmp.path(), key), t);
        set_mtime(&cas_file(tmp.path(), &record.output), t);
    }
    // Dependency sets: keep them newest so that results go first.
    let before = store.stats().unwrap();
    let budget = before.ac.bytes + before.cas.bytes - 1;
    let report = store.gc(Some(budget), None, now).unwrap();
    assert!(report.removed.entries >= 1);
    let after = store.stats().unwrap();
    assert!(after.ac.bytes + after.cas.bytes <= budget);
    // The least recently used result went first; the most recent is still there.
    let (oldest_stable, oldest_key, oldest_dep) = traces[9];
    assert_eq!(store.get_action(&oldest_key), None);
    assert!(store.get_action(&traces[0].1).is_some());
    assert!(report.index_rows_removed >= 1);
    assert!(store
        .lookup_trace(&oldest_stable, &|_| Some(oldest_dep))
        .is_none());
    assert!(store.trace_candidates(&oldest_stable).is_empty());

    // A budget of zero empties the cache.
    store.gc(Some(0), None, now).unwrap();
    let empty = store.stats().unwrap();
    assert_eq!(empty.ac.entries + empty.cas.entries, 0);
    assert_eq!(empty.index.entries, 0);
}

#[test]
fn gc_removes_temporary_files_left_by_a_killed_process() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let stale = tmp.path().join("ac").join(".fixgate-tmp-left");
    let live = tmp.path().join("ac").join(".fixgate-tmp-live");
    fs::write(&stale, b"half").unwrap();
    fs::write(&live, b"half").unwrap();
    set_mtime(&stale, SystemTime::now() - Duration::from_secs(2 * 3600));
    store.gc(None, None, SystemTime::now()).unwrap();
    assert!(!stale.exists());
    assert!(
        live.exists(),
        "a write in progress elsewhere is not touched"
    );
}

#[test]
fn clear_empties_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let store = DiskStore::open(tmp.path()).unwrap();
    let traces = fill_index(&store, 2);
    store.clear().unwrap();
    let stats = store.stats().unwrap();
    assert_eq!(
        stats.ac.entries + stats.cas.entries + stats.index.entries,
        0
    );
    let (stable, _, dep) = traces[0];
    assert!(store.lookup_trace(&stable, &|_| Some(dep)).is_none());
    // Still usable afterwards.
    let (stable, key, dep) = fill_index(&store, 1)[0];
    assert_eq!(
        store
            .lookup_trace(&stable, &|_| Some(dep))
            .unwrap()
            .0
            .output,
        key
    );
}
