//! Opening the cache: the disk store under the cache directory, with the remote cache behind it
//! when one is configured, or no store at all; and the record of what the last audit moved.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fixgate_cache::{
    ActionRecord, Digest, DiskStore, LayeredStore, NoStore, Origin, RemoteConfig, Store, Touched,
    TraceEntry, TransferStats, Warning,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The file under the cache directory that holds the last audit's [`LastTransfer`].
pub(crate) const LAST_TRANSFER: &str = "last-transfer.json";

/// The resolved remote cache settings.
#[derive(Clone, Debug)]
pub(crate) struct RemoteSettings {
    pub(crate) config: RemoteConfig,
    /// `--remote-required`: a remote failure fails the command.
    pub(crate) required: bool,
}

/// What the last audit's store did: the counters for `cache stats`, the keys for `cache push`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct LastTransfer {
    pub(crate) schema: u32,
    pub(crate) stats: TransferStats,
    pub(crate) touched: Touched,
}

const LAST_TRANSFER_SCHEMA: u32 = 1;

/// Where a store records that a required remote failed (`--remote-required`), for the command
/// to fail at its end: the store writes it down when the audit is done with it (dropped).
#[derive(Clone, Debug, Default)]
pub(crate) struct RemoteFailure(Arc<Mutex<Option<String>>>);

impl RemoteFailure {
    fn set(&self, why: String) {
        *lock(&self.0) = Some(why);
    }

    /// Fails when the remote was required and a store found it unusable.
    pub(crate) fn check(&self) -> Result<()> {
        match lock(&self.0).take() {
            Some(why) => Err(Error::Infra(format!(
                "the remote cache failed and --remote-required is set: {why}"
            ))),
            None => Ok(()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What to say about a remote used without a signing key (the context says it once).
pub(crate) fn unauthenticated(settings: &RemoteSettings) -> Option<String> {
    if settings.config.mac_key.is_some() {
        return None;
    }
    Some(format!(
        "the remote cache {} is used without FIXGATE_CACHE_KEY: its results are \
         unauthenticated, so whoever can write to it decides what this audit reads; set the same \
         FIXGATE_CACHE_KEY on every machine that shares it to sign and check them",
        settings.config.display_url()
    ))
}

/// The store for `cache_dir` with `remote` behind it, or `NoStore` (with the warning to print)
/// when the cache is disabled or cannot be opened: the audit still runs, uncached. A required
/// remote that fails is recorded in `failure`.
pub(crate) fn open(
    cache_dir: &Path,
    enabled: bool,
    remote: Option<&RemoteSettings>,
    failure: &RemoteFailure,
) -> (Arc<dyn Store>, Option<String>) {
    if !enabled {
        return (Arc::new(NoStore), None);
    }
    let dir = cache_dir.join("store");
    match DiskStore::open(&dir) {
        Ok(disk) => {
            let store = match remote {
                Some(r) => LayeredStore::open(disk, &r.config),
                None => LayeredStore::local_only(disk),
            };
            if remote.is_some_and(|r| r.required) {
                // A required remote must be checked even when every lookup hits locally.
                store.probe();
            }
            let recorded = Recorded {
                store,
                path: cache_dir.join(LAST_TRANSFER),
                failure: remote.filter(|r| r.required).map(|_| failure.clone()),
            };
            (Arc::new(recorded), None)
        }
        Err(e) => (
            Arc::new(NoStore),
            Some(format!(
                "the cache at {} cannot be used ({e}); running uncached. Pass --cache-dir with a \
                 writable directory, or run `fixgate cache clear`",
                dir.display()
            )),
        ),
    }
}

/// Reads the last audit's record, `None` when no audit has written one.
pub(crate) fn last_transfer(cache_dir: &Path) -> Result<Option<LastTransfer>> {
    let path = cache_dir.join(LAST_TRANSFER);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read", path, e)),
    };
    match serde_json::from_slice::<LastTransfer>(&bytes) {
        Ok(t) if t.schema == LAST_TRANSFER_SCHEMA => Ok(Some(t)),
        // Another version's record, or a damaged one: as if there were none.
        _ => Ok(None),
    }
}

/// The audit's store: counts what it moves and, when the audit is done with it (dropped),
/// writes that down for `cache stats` and `cache push`.
struct Recorded {
    store: LayeredStore<DiskStore>,
    path: PathBuf,
    /// With a required remote: where to record that it failed.
    failure: Option<RemoteFailure>,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.store.flush();
        if let Some(failure) = &self.failure {
            if let Some(e) = self.store.remote_error() {
                failure.set(e.to_string());
            }
        }
        let record = LastTransfer {
            schema: LAST_TRANSFER_SCHEMA,
            stats: self.store.stats(),
            touched: self.store.touched(),
        };
        // The record is a convenience: failing to write it loses `cache stats`, not the audit.
        if let Ok(json) = serde_json::to_vec(&record) {
            let tmp = self
                .path
                .with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, json).is_ok() && std::fs::rename(&tmp, &self.path).is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
}

impl Store for Recorded {
    fn get_action(&self, key: &Digest) -> Option<ActionRecord> {
        self.store.get_action(key)
    }

    fn put_action(&self, key: &Digest, record: &ActionRecord) {
        self.store.put_action(key, record);
    }

    fn get_blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        self.store.get_blob(digest)
    }

    fn put_blob(&self, bytes: &[u8]) -> Digest {
        self.store.put_blob(bytes)
    }

    fn has_blob(&self, digest: &Digest) -> bool {
        self.store.has_blob(digest)
    }

    fn trace_candidates(&self, stable_key: &Digest) -> Vec<TraceEntry> {
        self.store.trace_candidates(stable_key)
    }

    fn record_trace(&self, stable_key: &Digest, entry: TraceEntry) {
        self.store.record_trace(stable_key, entry);
    }

    fn take_warnings(&self) -> Vec<Warning> {
        self.store.take_warnings()
    }

    fn lookup_trace(
        &self,
        stable_key: &Digest,
        current: &dyn Fn(&str) -> Option<Digest>,
    ) -> Option<(TraceEntry, ActionRecord)> {
        self.store.lookup_trace(stable_key, current)
    }

    fn origin(&self, action_key: &Digest) -> Origin {
        self.store.origin(action_key)
    }
}
