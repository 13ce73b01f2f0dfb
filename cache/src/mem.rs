//! An in-memory store, for unit tests and for runs that should not outlive the process.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::store::push_candidate;
use crate::{ActionRecord, Digest, Store, TraceEntry, Warning};

/// A [`Store`] held in memory. It never warns: nothing in it can be corrupted from outside.
#[derive(Debug, Default)]
pub struct MemStore {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ac: HashMap<Digest, ActionRecord>,
    cas: HashMap<Digest, Vec<u8>>,
    traces: HashMap<Digest, Vec<TraceEntry>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> MemStore {
        MemStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a map half-updated (each operation is one
        // insert or get), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many action records it holds.
    pub fn action_count(&self) -> usize {
        self.lock().ac.len()
    }

    /// Forgets the action record under `key`, as an eviction would.
    pub fn evict_action(&self, key: &Digest) {
        self.lock().ac.remove(key);
    }
}

impl Store for MemStore {
    fn get_action(&self, key: &Digest) -> Option<ActionRecord> {
        self.lock().ac.get(key).copied()
    }

    fn put_action(&self, key: &Digest, record: &ActionRecord) {
        self.lock().ac.insert(*key, *record);
    }

    fn get_blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.lock().cas.get(digest).cloned()
    }

    fn has_blob(&self, digest: &Digest) -> bool {
        self.lock().cas.contains_key(digest)
    }

    fn put_blob(&self, bytes: &[u8]) -> Digest {
        let digest = Digest::of(bytes);
        self.lock()
            .cas
            .entry(digest)
            .or_insert_with(|| bytes.to_vec());
        digest
    }

    fn trace_candidates(&self, stable_key: &Digest) -> Vec<TraceEntry> {
        self.lock()
            .traces
            .get(stable_key)
            .cloned()
            .unwrap_or_default()
    }

    fn record_trace(&self, stable_key: &Digest, entry: TraceEntry) {
        push_candidate(self.lock().traces.entry(*stable_key).or_default(), entry);
    }

    fn take_warnings(&self) -> Vec<Warning> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dep;

    #[test]
    fn round_trips() {
        let s = MemStore::new();
        let blob = s.put_blob(b"output");
        assert_eq!(s.get_blob(&blob).as_deref(), Some(&b"output"[..]));
        let key = Digest::of(b"key");
        let rec = ActionRecord {
            output: blob,
            failed: false,
        };
        s.put_action(&key, &rec);
        assert_eq!(s.get_action(&key), Some(rec));
    }

    #[test]
    fn trace_lookup_hits_after_a_flip_flop() {
        let s = MemStore::new();
        let stable = Digest::of(b"seed-run(1)");
        let (v1, v2) = (Digest::of(b"v1"), Digest::of(b"v2"));
        for (content, out) in [(v1, b"o1"), (v2, b"o2")] {
            let key = Digest::of(out);
            let blob = s.put_blob(out);
            s.put_action(
                &key,
                &ActionRecord {
                    output: blob,
                    failed: false,
                },
            );
            s.record_trace(&stable, TraceEntry::new(vec![Dep::file("f", content)], key));
        }
        let (hit, rec) = s.lookup_trace(&stable, &|_| Some(v1)).unwrap();
        assert_eq!(hit.output, Digest::of(b"o1"));
        assert_eq!(s.get_blob(&rec.output).unwrap(), b"o1");
        let (hit, _) = s.lookup_trace(&stable, &|_| Some(v2)).unwrap();
        assert_eq!(hit.output, Digest::of(b"o2"));
        assert!(s.lookup_trace(&stable, &|_| None).is_none());

        // An evicted result makes its candidate a miss rather than a wrong answer.
        s.evict_action(&Digest::of(b"o1"));
        assert!(s.lookup_trace(&stable, &|_| Some(v1)).is_none());
    }
}
