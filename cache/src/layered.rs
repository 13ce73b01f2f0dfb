//! The layered store: the local store first, then the remote cache; a remote hit is verified and
//! written locally, uploads happen only when enabled, and a remote that fails is dropped for the
//! rest of the process with one warning.
//!
//! Every value blob on the remote is framed with the kind and key of the entry it belongs to, so
//! that an entry that holds another entry's result (swapped on the server, or written for
//! another key) is a miss, even without a signing key: the bytes of a `collect` output read as a
//! seed run's would be a wrong answer, not a miss. Without a key the frame is not authentic (a
//! server can write any frame), which is what the unsigned-results warning says.

use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::mac::MacKey;
use crate::remote::{self, EntryKind};
use crate::remote_config::RemoteConfig;
use crate::store::push_candidate;
use crate::wire::{Backend, DigestFunction, RemoteError};
use crate::{ActionRecord, Digest, Origin, Store, TraceEntry, Warning};

/// Hits, misses and bytes moved by one [`LayeredStore`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferStats {
    /// The remote cache's URL (without a query), `None` when there is none.
    pub remote: Option<String>,
    /// The digest function the remote uses.
    pub digest_function: Option<DigestFunction>,
    /// Lookups answered by the local store.
    pub local_hits: u64,
    /// Lookups the local store could not answer.
    pub local_misses: u64,
    /// Local misses the remote answered (verified, then written locally).
    pub remote_hits: u64,
    /// Local misses the remote could not answer (or was not asked, being down).
    pub remote_misses: u64,
    /// Remote entries refused: a blob that does not hash to its digest, a result without a
    /// valid MAC, a malformed result.
    pub remote_rejected: u64,
    /// Remote requests that failed (the first one turns the remote off).
    pub remote_errors: u64,
    /// Entries written to the remote.
    pub uploads: u64,
    /// Blob bytes read from the remote.
    pub bytes_downloaded: u64,
    /// Blob bytes written to the remote.
    pub bytes_uploaded: u64,
}

/// The keys one store was asked about or given: what `fixgate cache push` uploads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Touched {
    /// Action keys.
    pub actions: Vec<Digest>,
    /// Stable keys of verifying traces.
    pub traces: Vec<Digest>,
}

/// What `push` uploaded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PushReport {
    /// Action records uploaded.
    pub actions: u64,
    /// Trace candidate lists uploaded.
    pub traces: u64,
    /// Keys the local store no longer has (evicted since), skipped.
    pub missing: u64,
    /// Blob bytes uploaded.
    pub bytes: u64,
}

#[derive(Default)]
struct Counters {
    local_hits: AtomicU64,
    local_misses: AtomicU64,
    remote_hits: AtomicU64,
    remote_misses: AtomicU64,
    remote_rejected: AtomicU64,
    remote_errors: AtomicU64,
    uploads: AtomicU64,
    bytes_downloaded: AtomicU64,
    bytes_uploaded: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

struct Remote {
    backend: Box<dyn Backend>,
    url: String,
    upload: bool,
    mac: Option<MacKey>,
    /// Set by the first failure: a remote that went away is not asked again, so that a down
    /// server costs one timeout, not one per node.
    down: AtomicBool,
    /// Unsigned results are warned about once, not once per entry.
    warned_unsigned: AtomicBool,
    /// Values framed for another entry, likewise.
    warned_misplaced: AtomicBool,
}

/// The frame of a value blob: magic, the entry's kind, its key, then the value.
const FRAME_MAGIC: [u8; 4] = *b"FGrv";
const FRAME_HEADER: usize = 4 + 1 + 32;

fn kind_tag(kind: EntryKind) -> u8 {
    match kind {
        EntryKind::Action => 1,
        EntryKind::Traces => 2,
    }
}

/// `value` framed as the value of `(kind, key)`.
fn frame(kind: EntryKind, key: &Digest, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + value.len());
    out.extend_from_slice(&FRAME_MAGIC);
    out.push(kind_tag(kind));
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(value);
    out
}

/// The value of a blob framed for `(kind, key)`, or `None` when it was framed for anything else.
fn unframe<'b>(kind: EntryKind, key: &Digest, blob: &'b [u8]) -> Option<&'b [u8]> {
    let rest = blob.strip_prefix(&FRAME_MAGIC[..])?;
    let rest = rest.strip_prefix(&[kind_tag(kind)][..])?;
    rest.strip_prefix(&key.as_bytes()[..])
}

/// A [`Store`] over a local store and an optional remote cache.
pub struct LayeredStore<L> {
    local: L,
    remote: Option<Remote>,
    /// The URL of a remote that could not be connected to, for the stats.
    unreachable: Option<String>,
    first_error: Mutex<Option<RemoteError>>,
    counters: Counters,
    /// Action keys whose record this process fetched from the remote.
    from_remote: Mutex<HashSet<Digest>>,
    touched: Mutex<(BTreeSet<Digest>, BTreeSet<Digest>)>,
    warnings: Mutex<Vec<Warning>>,
    /// Traces taken from the remote, recorded locally by [`LayeredStore::flush`] in one write:
    /// one commit per trace costs a fresh machine more than the downloads.
    pending_traces: Mutex<Vec<(Digest, TraceEntry)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is one insert or take; a panic elsewhere cannot leave it torn.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<L: Store> LayeredStore<L> {
    /// `local` alone: counts hits and misses, nothing else.
    pub fn local_only(local: L) -> LayeredStore<L> {
        LayeredStore {
            local,
            remote: None,
            unreachable: None,
            first_error: Mutex::new(None),
            counters: Counters::default(),
            from_remote: Mutex::new(HashSet::new()),
            touched: Mutex::new((BTreeSet::new(), BTreeSet::new())),
            warnings: Mutex::new(Vec::new()),
            pending_traces: Mutex::new(Vec::new()),
        }
    }

    /// Records locally the traces taken from the remote so far. Call it when done with the
    /// store; until then they are answered from memory.
    pub fn flush(&self) {
        let pending = std::mem::take(&mut *lock(&self.pending_traces));
        self.local.record_traces(pending);
    }

    /// A trace taken from the remote in this process and not yet flushed, still valid.
    fn pending_trace(
        &self,
        stable_key: &Digest,
        current: &dyn Fn(&str) -> Option<Digest>,
    ) -> Option<(TraceEntry, ActionRecord)> {
        let candidates: Vec<TraceEntry> = lock(&self.pending_traces)
            .iter()
            .rev()
            .filter(|(key, _)| key == stable_key)
            .map(|(_, entry)| entry.clone())
            .collect();
        candidates
            .into_iter()
            .filter(|entry| entry.first_changed(current).is_none())
            .find_map(|entry| {
                let record = self.local.get_action(&entry.output)?;
                Some((entry, record))
            })
    }

    /// `local` in front of the remote `config` names. A remote that cannot be connected to
    /// leaves the store local-only with one warning; [`LayeredStore::remote_error`] tells.
    pub fn open(local: L, config: &RemoteConfig) -> LayeredStore<L> {
        match remote::connect(config) {
            Ok(backend) => LayeredStore::with_backend(local, backend, config),
            Err(e) => {
                let mut store = LayeredStore::local_only(local);
                store.unreachable = Some(config.display_url());
                store.fail(&config.display_url(), e);
                store
            }
        }
    }

    fn with_backend(local: L, backend: Box<dyn Backend>, config: &RemoteConfig) -> LayeredStore<L> {
        let mut store = LayeredStore::local_only(local);
        store.remote = Some(Remote {
            backend,
            url: config.display_url(),
            upload: config.upload,
            mac: config.mac_key.clone(),
            down: AtomicBool::new(false),
            warned_unsigned: AtomicBool::new(false),
            warned_misplaced: AtomicBool::new(false),
        });
        store
    }

    /// Asks the remote for an entry that does not exist, so that a remote that is down is
    /// known (and warned about) now rather than at the first local miss.
    pub fn probe(&self) {
        let probe = Digest::of(b"fixgate remote probe");
        if self.live_remote().is_some() {
            let _ = self.fetch(EntryKind::Action, &probe);
        }
    }

    /// The local store.
    pub fn local(&self) -> &L {
        &self.local
    }

    /// The first remote failure, if any: what `--remote-required` turns into an error.
    pub fn remote_error(&self) -> Option<RemoteError> {
        lock(&self.first_error).clone()
    }

    /// Counters so far.
    pub fn stats(&self) -> TransferStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TransferStats {
            remote: self
                .remote
                .as_ref()
                .map(|r| r.url.clone())
                .or_else(|| self.unreachable.clone()),
            digest_function: self.remote.as_ref().map(|r| r.backend.digest_function()),
            local_hits: get(&c.local_hits),
            local_misses: get(&c.local_misses),
            remote_hits: get(&c.remote_hits),
            remote_misses: get(&c.remote_misses),
            remote_rejected: get(&c.remote_rejected),
            remote_errors: get(&c.remote_errors),
            uploads: get(&c.uploads),
            bytes_downloaded: get(&c.bytes_downloaded),
            bytes_uploaded: get(&c.bytes_uploaded),
        }
    }

    /// The keys asked about or written so far.
    pub fn touched(&self) -> Touched {
        let t = lock(&self.touched);
        Touched {
            actions: t.0.iter().copied().collect(),
            traces: t.1.iter().copied().collect(),
        }
    }

    /// Uploads what the local store holds for `touched`, whether or not uploads are enabled
    /// (pushing is an explicit request). Fails on the first remote error.
    pub fn push(&self, touched: &Touched) -> Result<PushReport, RemoteError> {
        let remote = self.live_remote().ok_or_else(|| {
            self.remote_error().unwrap_or_else(|| {
                RemoteError::Transport("no remote cache is configured".to_owned())
            })
        })?;
        let mut report = PushReport::default();
        for key in &touched.actions {
            let Some(record) = self.local.get_action(key) else {
                report.missing += 1;
                continue;
            };
            let Some(bytes) = self.local.get_blob(&record.output) else {
                report.missing += 1;
                continue;
            };
            self.upload(remote, EntryKind::Action, key, &bytes, record.failed)?;
            report.actions += 1;
            report.bytes += bytes.len() as u64;
        }
        for key in &touched.traces {
            let candidates = self.local.trace_candidates(key);
            if candidates.is_empty() {
                report.missing += 1;
                continue;
            }
            let bytes = self.merged_traces(key, candidates);
            self.upload(remote, EntryKind::Traces, key, &bytes, false)?;
            report.traces += 1;
            report.bytes += bytes.len() as u64;
        }
        Ok(report)
    }

    fn live_remote(&self) -> Option<&Remote> {
        self.remote
            .as_ref()
            .filter(|r| !r.down.load(Ordering::Relaxed))
    }

    /// Records a remote failure: the first one warns and turns the remote off.
    fn fail(&self, url: &str, e: RemoteError) {
        bump(&self.counters.remote_errors, 1);
        if let Some(r) = &self.remote {
            r.down.store(true, Ordering::Relaxed);
        }
        let mut first = lock(&self.first_error);
        if first.is_none() {
            lock(&self.warnings).push(Warning::RemoteUnavailable {
                url: url.to_owned(),
                why: e.to_string(),
            });
            *first = Some(e);
        }
    }

    fn reject(&self, remote: &Remote, what: String, why: &str) {
        bump(&self.counters.remote_rejected, 1);
        lock(&self.warnings).push(Warning::RemoteRejected {
            url: remote.url.clone(),
            what,
            why: why.to_owned(),
        });
    }

    /// The verified value bytes and failure flag the remote holds for `(kind, key)`.
    fn fetch(&self, kind: EntryKind, key: &Digest) -> Option<(Vec<u8>, bool)> {
        let remote = self.live_remote()?;
        let function = remote.backend.digest_function();
        let action = remote::action_digest(function, kind, key);
        let result = match remote.backend.get_action_result(&action) {
            Ok(Some(r)) => r,
            Ok(None) => return None,
            Err(e) => {
                self.fail(&remote.url, e);
                return None;
            }
        };
        let (value, failed) = match remote::read_result(&action, &result, remote.mac.as_ref()) {
            Ok(v) => v,
            Err(remote::Rejected::Unsigned) => {
                bump(&self.counters.remote_rejected, 1);
                if !remote.warned_unsigned.swap(true, Ordering::Relaxed) {
                    lock(&self.warnings).push(Warning::RemoteRejected {
                        url: remote.url.clone(),
                        what: format!("action result {}", action.hex()),
                        why: "it has no valid MAC for FIXGATE_CACHE_KEY (further ones are \
                              ignored silently)"
                            .to_owned(),
                    });
                }
                return None;
            }
            Err(remote::Rejected::Malformed(why)) => {
                self.reject(remote, format!("action result {}", action.hex()), &why);
                return None;
            }
        };
        let bytes = match remote.backend.get_blob(&value) {
            Ok(Some(b)) => b,
            Ok(None) => return None,
            Err(e) => {
                self.fail(&remote.url, e);
                return None;
            }
        };
        bump(&self.counters.bytes_downloaded, bytes.len() as u64);
        if !value.matches(function, &bytes) {
            self.reject(
                remote,
                format!("blob {}", value.hex()),
                "its bytes do not hash to its digest",
            );
            return None;
        }
        let Some(unframed) = unframe(kind, key, &bytes) else {
            bump(&self.counters.remote_rejected, 1);
            if !remote.warned_misplaced.swap(true, Ordering::Relaxed) {
                lock(&self.warnings).push(Warning::RemoteRejected {
                    url: remote.url.clone(),
                    what: format!("action result {}", action.hex()),
                    why: "its value belongs to another entry (swapped or damaged on the server; \
                          further ones are ignored silently)"
                        .to_owned(),
                });
            }
            return None;
        };
        Some((unframed.to_vec(), failed))
    }

    fn upload(
        &self,
        remote: &Remote,
        kind: EntryKind,
        key: &Digest,
        bytes: &[u8],
        failed: bool,
    ) -> Result<(), RemoteError> {
        let function = remote.backend.digest_function();
        let action = remote::action_digest(function, kind, key);
        let bytes = &frame(kind, key, bytes)[..];
        let value = function.digest(bytes);
        remote.backend.put_blob(&value, bytes)?;
        let result = remote::action_result(&action, &value, failed, remote.mac.as_ref());
        remote.backend.put_action_result(&action, &result)?;
        bump(&self.counters.uploads, 1);
        bump(&self.counters.bytes_uploaded, bytes.len() as u64);
        Ok(())
    }

    fn upload_or_fail(&self, kind: EntryKind, key: &Digest, bytes: &[u8], failed: bool) {
        let Some(remote) = self.live_remote().filter(|r| r.upload) else {
            return;
        };
        if let Err(e) = self.upload(remote, kind, key, bytes, failed) {
            self.fail(&remote.url, e);
        }
    }

    /// The remote's candidate list for `stable_key`, if it has a valid one.
    fn remote_traces(&self, stable_key: &Digest) -> Vec<TraceEntry> {
        let Some((bytes, _)) = self.fetch(EntryKind::Traces, stable_key) else {
            return Vec::new();
        };
        match postcard::from_bytes::<TraceList>(&bytes) {
            Ok(list) if list.schema == crate::SCHEMA => list.entries,
            Ok(list) => {
                self.reject_traces(stable_key, &format!("schema {}", list.schema));
                Vec::new()
            }
            Err(e) => {
                self.reject_traces(stable_key, &e.to_string());
                Vec::new()
            }
        }
    }

    fn reject_traces(&self, stable_key: &Digest, why: &str) {
        if let Some(remote) = &self.remote {
            self.reject(remote, format!("trace list of {stable_key}"), why);
        }
    }

    /// `local` candidates in front of the remote's, encoded for upload.
    fn merged_traces(&self, key: &Digest, local: Vec<TraceEntry>) -> Vec<u8> {
        let mut entries = self.remote_traces(key);
        for entry in local.into_iter().rev() {
            push_candidate(&mut entries, entry);
        }
        // Encoding a Vec of plain structs into memory cannot fail.
        postcard::to_allocvec(&TraceList {
            schema: crate::SCHEMA,
            entries,
        })
        .unwrap_or_default()
    }

    /// A local lookup, then the remote; `count` is false for lookups made on behalf of a trace
    /// lookup already counted.
    fn get_action_counted(&self, key: &Digest, count: bool) -> Option<ActionRecord> {
        lock(&self.touched).0.insert(*key);
        if let Some(record) = self.local.get_action(key) {
            if count {
                bump(&self.counters.local_hits, 1);
            }
            return Some(record);
        }
        if count {
            bump(&self.counters.local_misses, 1);
        }
        let Some((bytes, failed)) = self.fetch(EntryKind::Action, key) else {
            if count && self.remote.is_some() {
                bump(&self.counters.remote_misses, 1);
            }
            return None;
        };
        let record = ActionRecord {
            output: self.local.put_blob(&bytes),
            failed,
        };
        self.local.put_action(key, &record);
        lock(&self.from_remote).insert(*key);
        if count {
            bump(&self.counters.remote_hits, 1);
        }
        Some(record)
    }
}

/// What a trace-list blob holds: versioned, since another fixgate may have written it.
#[derive(Serialize, Deserialize)]
struct TraceList {
    schema: u32,
    entries: Vec<TraceEntry>,
}

impl<L: Store> Store for LayeredStore<L> {
    fn get_action(&self, key: &Digest) -> Option<ActionRecord> {
        self.get_action_counted(key, true)
    }

    fn put_action(&self, key: &Digest, record: &ActionRecord) {
        self.local.put_action(key, record);
        lock(&self.touched).0.insert(*key);
        if self.live_remote().is_some_and(|r| r.upload) {
            if let Some(bytes) = self.local.get_blob(&record.output) {
                self.upload_or_fail(EntryKind::Action, key, &bytes, record.failed);
            }
        }
    }

    fn get_blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        // Blobs are fetched from the remote with the record that names them (by the remote's
        // digest, which is not this one unless the remote uses BLAKE3).
        self.local.get_blob(digest)
    }

    fn put_blob(&self, bytes: &[u8]) -> Digest {
        self.local.put_blob(bytes)
    }

    fn has_blob(&self, digest: &Digest) -> bool {
        self.local.has_blob(digest)
    }

    fn trace_candidates(&self, stable_key: &Digest) -> Vec<TraceEntry> {
        self.local.trace_candidates(stable_key)
    }

    fn record_trace(&self, stable_key: &Digest, entry: TraceEntry) {
        self.local.record_trace(stable_key, entry);
        lock(&self.touched).1.insert(*stable_key);
        if self.live_remote().is_some_and(|r| r.upload) {
            let local = self.local.trace_candidates(stable_key);
            let bytes = self.merged_traces(stable_key, local);
            self.upload_or_fail(EntryKind::Traces, stable_key, &bytes, false);
        }
    }

    fn take_warnings(&self) -> Vec<Warning> {
        let mut out = self.local.take_warnings();
        out.append(&mut lock(&self.warnings));
        out
    }

    fn lookup_trace(
        &self,
        stable_key: &Digest,
        current: &dyn Fn(&str) -> Option<Digest>,
    ) -> Option<(TraceEntry, ActionRecord)> {
        lock(&self.touched).1.insert(*stable_key);
        if let Some(hit) = self
            .local
            .lookup_trace(stable_key, current)
            .or_else(|| self.pending_trace(stable_key, current))
        {
            bump(&self.counters.local_hits, 1);
            lock(&self.touched).0.insert(hit.0.output);
            return Some(hit);
        }
        bump(&self.counters.local_misses, 1);
        if self.live_remote().is_none() {
            if self.remote.is_some() {
                bump(&self.counters.remote_misses, 1);
            }
            return None;
        }
        let found = self
            .remote_traces(stable_key)
            .into_iter()
            .filter(|entry| entry.first_changed(current).is_none())
            .find_map(|entry| {
                let record = self.get_action_counted(&entry.output, false)?;
                Some((entry, record))
            });
        match &found {
            Some((entry, _)) => {
                bump(&self.counters.remote_hits, 1);
                lock(&self.pending_traces).push((*stable_key, entry.clone()));
            }
            None => bump(&self.counters.remote_misses, 1),
        }
        found
    }

    fn origin(&self, action_key: &Digest) -> Origin {
        if lock(&self.from_remote).contains(action_key) {
            Origin::Remote
        } else {
            Origin::Local
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;
    use crate::wire::RemoteDigest;
    use crate::{Dep, MemStore};
    use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;

    /// A remote held in memory, shared between stores as a server is between machines.
    #[derive(Clone)]
    struct MemRemote {
        function: DigestFunction,
        ac: Arc<Mutex<HashMap<RemoteDigest, reapi::ActionResult>>>,
        cas: Arc<Mutex<HashMap<RemoteDigest, Vec<u8>>>>,
    }

    impl Default for MemRemote {
        fn default() -> MemRemote {
            MemRemote::with(DigestFunction::Sha256)
        }
    }

    impl MemRemote {
        fn with(function: DigestFunction) -> MemRemote {
            MemRemote {
                function,
                ac: Arc::default(),
                cas: Arc::default(),
            }
        }
    }

    impl Backend for MemRemote {
        fn digest_function(&self) -> DigestFunction {
            self.function
        }

        fn get_action_result(
            &self,
            action: &RemoteDigest,
        ) -> Result<Option<reapi::ActionResult>, RemoteError> {
            Ok(lock(&self.ac).get(action).cloned())
        }

        fn put_action_result(
            &self,
            action: &RemoteDigest,
            result: &reapi::ActionResult,
        ) -> Result<(), RemoteError> {
            lock(&self.ac).insert(*action, result.clone());
            Ok(())
        }

        fn get_blob(&self, digest: &RemoteDigest) -> Result<Option<Vec<u8>>, RemoteError> {
            Ok(lock(&self.cas).get(digest).cloned())
        }

        fn put_blob(&self, digest: &RemoteDigest, bytes: &[u8]) -> Result<(), RemoteError> {
            lock(&self.cas).insert(*digest, bytes.to_vec());
            Ok(())
        }
    }

    fn machine(remote: &MemRemote, upload: bool, key: Option<&str>) -> LayeredStore<MemStore> {
        let mut config = RemoteConfig::new("http://mem.invalid/");
        config.upload = upload;
        config.mac_key = key.map(|k| MacKey::derive(k.as_bytes()));
        LayeredStore::with_backend(MemStore::new(), Box::new(remote.clone()), &config)
    }

    fn put(store: &impl Store, key: &Digest, value: &[u8], failed: bool) {
        let output = store.put_blob(value);
        store.put_action(key, &ActionRecord { output, failed });
    }

    #[test]
    fn a_remote_hit_is_written_locally_and_its_origin_is_remote() {
        for function in [DigestFunction::Sha256, DigestFunction::Blake3] {
            remote_hit_with(function);
        }
    }

    fn remote_hit_with(function: DigestFunction) {
        let remote = MemRemote::with(function);
        let k = Digest::of(b"k");
        put(&machine(&remote, true, None), &k, b"value", true);

        let b = machine(&remote, false, None);
        let record = b.get_action(&k).expect("a remote hit");
        assert!(record.failed);
        assert_eq!(b.get_blob(&record.output).unwrap(), b"value");
        assert_eq!(b.origin(&k), Origin::Remote);
        assert_eq!(b.local().get_action(&k), Some(record));
        let st = b.stats();
        // The value travels framed with its entry's kind and key.
        let framed = frame(EntryKind::Action, &k, b"value");
        assert_eq!(
            (st.remote_hits, st.bytes_downloaded),
            (1, framed.len() as u64)
        );
        assert_eq!(st.digest_function, Some(function));
        assert!(b.take_warnings().is_empty());
        // Blobs are named with the remote's function.
        let named = lock(&remote.cas).keys().copied().collect::<Vec<_>>();
        assert_eq!(named, vec![function.digest(&framed)]);
    }

    #[test]
    fn without_upload_nothing_reaches_the_remote() {
        let remote = MemRemote::default();
        let a = machine(&remote, false, None);
        put(&a, &Digest::of(b"k"), b"value", false);
        a.record_trace(&Digest::of(b"s"), TraceEntry::new(vec![], Digest::of(b"k")));
        assert!(lock(&remote.ac).is_empty() && lock(&remote.cas).is_empty());
        // Until it is pushed.
        let pushed = a.push(&a.touched()).unwrap();
        assert_eq!((pushed.actions, pushed.traces), (1, 1));
        assert_eq!(lock(&remote.ac).len(), 2);
    }

    #[test]
    fn a_blob_that_does_not_hash_to_its_digest_is_a_miss_with_a_warning() {
        let remote = MemRemote::default();
        let k = Digest::of(b"k");
        put(&machine(&remote, true, None), &k, b"value", false);
        for bytes in lock(&remote.cas).values_mut() {
            bytes.push(b'!');
        }
        let b = machine(&remote, false, None);
        assert!(b.get_action(&k).is_none());
        let w = b.take_warnings();
        assert!(
            matches!(&w[..], [Warning::RemoteRejected { why, .. }] if why.contains("hash")),
            "{w:?}"
        );
        assert_eq!(b.stats().remote_rejected, 1);
    }

    #[test]
    fn with_a_key_only_results_signed_with_it_are_used() {
        let remote = MemRemote::default();
        let (signed, unsigned) = (Digest::of(b"signed"), Digest::of(b"unsigned"));
        put(&machine(&remote, true, Some("team")), &signed, b"a", false);
        put(&machine(&remote, true, None), &unsigned, b"b", false);

        let b = machine(&remote, false, Some("team"));
        assert!(b.get_action(&signed).is_some());
        assert!(b.get_action(&unsigned).is_none());
        assert!(b.get_action(&unsigned).is_none());
        let w = b.take_warnings();
        assert_eq!(w.len(), 1, "one warning for unsigned results: {w:?}");
        assert!(machine(&remote, false, Some("guess"))
            .get_action(&signed)
            .is_none());
        // Without a key, signatures are not looked at.
        assert!(machine(&remote, false, None).get_action(&signed).is_some());
    }

    #[test]
    fn an_entry_that_holds_another_entrys_value_is_a_miss_with_one_warning() {
        let remote = MemRemote::default();
        let a = machine(&remote, true, None);
        let keys: Vec<Digest> = (0..3u8).map(|i| Digest::of(&[i])).collect();
        for (i, k) in keys.iter().enumerate() {
            put(&a, k, format!("value {i}").as_bytes(), false);
        }
        // Every action result now names the next one's value.
        {
            let mut ac = lock(&remote.ac);
            let mut entries: Vec<_> = ac.iter().map(|(k, v)| (*k, v.clone())).collect();
            entries.sort_by_key(|(k, _)| k.hex());
            let n = entries.len();
            for i in 0..n {
                ac.insert(entries[i].0, entries[(i + 1) % n].1.clone());
            }
        }
        let b = machine(&remote, false, None);
        for k in &keys {
            assert!(b.get_action(k).is_none());
        }
        let w = b.take_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].to_string().contains("belongs to another entry"),
            "{w:?}"
        );
        assert_eq!(b.stats().remote_rejected, 3);
        // The entries as written are hits.
        let c = machine(&MemRemote::default(), true, None);
        put(&c, &keys[0], b"v", false);
        assert_eq!(
            frame(EntryKind::Action, &keys[0], b"v").len(),
            FRAME_HEADER + 1
        );
        assert_eq!(
            unframe(
                EntryKind::Traces,
                &keys[0],
                &frame(EntryKind::Action, &keys[0], b"v")
            ),
            None
        );
    }

    #[test]
    fn traces_found_on_the_remote_are_checked_against_the_files_and_kept_locally() {
        let remote = MemRemote::default();
        let (stable, out) = (Digest::of(b"stable"), Digest::of(b"out"));
        let a = machine(&remote, true, None);
        put(&a, &out, b"run result", false);
        let f = Digest::of(b"fixture v1");
        a.record_trace(
            &stable,
            TraceEntry::new(vec![Dep::file("data.json", f)], out),
        );

        let b = machine(&remote, false, None);
        let changed = Digest::of(b"fixture v2");
        assert!(b.lookup_trace(&stable, &|_| Some(changed)).is_none());
        let (entry, record) = b.lookup_trace(&stable, &|_| Some(f)).expect("a remote hit");
        assert_eq!(entry.output, out);
        assert_eq!(b.get_blob(&record.output).unwrap(), b"run result");
        assert_eq!(b.origin(&out), Origin::Remote);
        // Kept in memory (a second lookup is a local hit) until flushed, then recorded locally.
        assert!(b.local().trace_candidates(&stable).is_empty());
        assert!(b.lookup_trace(&stable, &|_| Some(f)).is_some());
        assert_eq!(b.stats().local_hits, 1);
        b.flush();
        assert_eq!(b.local().trace_candidates(&stable), vec![entry]);

        // A second uploader's trace is added in front of the first, not in its place.
        let out2 = Digest::of(b"out2");
        let c = machine(&remote, true, None);
        put(&c, &out2, b"other", false);
        c.record_trace(
            &stable,
            TraceEntry::new(vec![Dep::file("data.json", changed)], out2),
        );
        let d = machine(&remote, false, None);
        assert_eq!(d.remote_traces(&stable).len(), 2);
    }

    #[test]
    fn a_local_only_store_counts_and_remembers_keys() {
        let s = LayeredStore::local_only(MemStore::new());
        let k = Digest::of(b"k");
        assert!(s.get_action(&k).is_none());
        let output = s.put_blob(b"v");
        s.put_action(
            &k,
            &ActionRecord {
                output,
                failed: false,
            },
        );
        assert!(s.get_action(&k).is_some());
        let st = s.stats();
        assert_eq!((st.local_hits, st.local_misses), (1, 1));
        assert_eq!((st.remote_hits, st.remote_misses), (0, 0));
        assert_eq!(st.remote, None);
        assert_eq!(s.touched().actions, vec![k]);
        assert_eq!(s.origin(&k), Origin::Local);
    }

    #[test]
    fn an_unreachable_remote_is_one_warning_and_local_only() {
        let mut c = RemoteConfig::new("http://127.0.0.1:9/");
        c.connect_timeout = std::time::Duration::from_millis(500);
        let s = LayeredStore::open(MemStore::new(), &c);
        let k = Digest::of(b"k");
        // HTTP connects lazily: the first request finds the server down.
        assert!(s.get_action(&k).is_none());
        assert!(s.get_action(&Digest::of(b"j")).is_none());
        let w = s.take_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(matches!(w[0], Warning::RemoteUnavailable { .. }));
        assert!(s.remote_error().is_some());
        assert_eq!(s.stats().remote_errors, 1);
    }
}
