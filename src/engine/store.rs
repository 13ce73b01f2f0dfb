//! Opening the cache: the disk store under the cache directory, with the remote cache behind it
//! when one is configured, or no store at all; and the record of what the last audit moved.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use fixgate_cache::{
    ActionRecord, Digest, DiskStore, LayeredStore, MacKey, NoStore, Origin, RemoteConfig, Store,
    Touched, TraceEntry, TransferStats, Warning,
};
use serde::{Deserialize, Serialize};

use crate::cli::RemoteArgs;
use crate::error::{Error, Result};

/// The file under the cache directory that holds the last audit's [`LastTransfer`].
pub const LAST_TRANSFER: &str = "last-transfer.json";

/// Request headers for the remote, `Name: value`, one a line. Secret.
const HEADER_ENV: &str = "FIXGATE_REMOTE_HEADER";

/// The resolved remote cache settings.
#[derive(Clone, Debug)]
pub struct RemoteSettings {
    pub config: RemoteConfig,
    /// `--remote-required`: a remote failure fails the command.
    pub required: bool,
}

/// What the last audit's store did: the counters for `cache stats`, the keys for `cache push`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct LastTransfer {
    pub schema: u32,
    pub stats: TransferStats,
    pub touched: Touched,
}

const LAST_TRANSFER_SCHEMA: u32 = 1;

// `audit()` opens its store with `open(cache_dir, enabled)`; the remote settings reach it from
// the command line through here, so the engine needs no new argument.
static REMOTE: OnceLock<Option<RemoteSettings>> = OnceLock::new();
static REQUIRED_FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// Resolves the remote settings: `--remote-cache` or `FIXGATE_REMOTE_CACHE`, else
/// `[tool.fixgate] remote-cache` in the working tree's `pyproject.toml`; headers from
/// `FIXGATE_REMOTE_HEADER`, the signing key from `FIXGATE_CACHE_KEY`.
pub fn resolve(
    args: &RemoteArgs,
    repo_root: &Path,
    env: &crate::environment::Environment,
) -> Result<Option<RemoteSettings>> {
    let url = match &args.remote_cache {
        Some(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        Some(_) => None,
        None => {
            let path = repo_root.join(crate::config::PYPROJECT_FILE);
            // A pyproject.toml that does not parse is reported by the commands that load the
            // configuration; here it only means no remote cache is named.
            std::fs::read(&path)
                .ok()
                .and_then(|bytes| crate::config::remote_cache(&bytes).ok().flatten())
        }
    };
    let Some(url) = url else {
        if args.remote_upload || args.remote_required {
            return Err(Error::Usage(
                "--remote-upload and --remote-required need a remote cache: pass --remote-cache \
                 URL, set FIXGATE_REMOTE_CACHE, or set [tool.fixgate] remote-cache"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let mut config = RemoteConfig::new(url);
    config.upload = args.remote_upload;
    if let Some(text) = &env.remote_header {
        config.headers = parse_headers(text)?;
    }
    if let Some(key) = &env.cache_key {
        config.mac_key = Some(MacKey::derive(key.as_bytes()));
    }
    Ok(Some(RemoteSettings {
        config,
        required: args.remote_required,
    }))
}

/// `Name: value` lines; errors name the line, never its value.
pub(crate) fn parse_headers(text: &str) -> Result<Vec<(String, String)>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let (name, value) = line.split_once(':').unwrap_or(("", ""));
            let name = name.trim();
            let valid = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid || value.trim().is_empty() {
                return Err(Error::Usage(format!(
                    "{HEADER_ENV} line {} is not a header; write \"Name: value\", e.g. \
                     \"Authorization: Bearer <token>\"",
                    i + 1
                )));
            }
            Ok((name.to_owned(), value.trim().to_owned()))
        })
        .collect()
}

/// Makes `settings` the remote every later [`open`] uses. Called once, before the command.
pub fn configure(settings: Option<RemoteSettings>) {
    // A second call (never made by the binary) keeps the first settings.
    let _ = REMOTE.set(settings);
}

/// The settings [`configure`] was given.
pub fn configured() -> Option<&'static RemoteSettings> {
    REMOTE.get().and_then(Option::as_ref)
}

/// Whether results go to a remote cache (`--remote-upload` with a remote).
pub fn uploads() -> bool {
    configured().is_some_and(|s| s.config.upload)
}

/// Fails when the remote was required and a store found it unusable.
pub fn finish() -> Result<()> {
    match lock(&REQUIRED_FAILURE).take() {
        Some(why) => Err(Error::Infra(format!(
            "the remote cache failed and --remote-required is set: {why}"
        ))),
        None => Ok(()),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The store for `cache_dir` with `remote` behind it (the configured remote cache, or a remote
/// executor's ActionCache), or `NoStore` (with the warning to print) when the cache is disabled
/// or cannot be opened: the audit still runs, uncached.
pub fn open_with(
    cache_dir: &Path,
    enabled: bool,
    remote: Option<&RemoteSettings>,
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
                required: remote.is_some_and(|r| r.required),
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
pub fn last_transfer(cache_dir: &Path) -> Result<Option<LastTransfer>> {
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
    required: bool,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.store.flush();
        if self.required {
            if let Some(e) = self.store.remote_error() {
                *lock(&REQUIRED_FAILURE) = Some(e.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_and_errors_never_show_values() {
        assert_eq!(
            parse_headers("Authorization: Bearer abc\n\nX-Team: infra\n").unwrap(),
            vec![
                ("Authorization".to_owned(), "Bearer abc".to_owned()),
                ("X-Team".to_owned(), "infra".to_owned())
            ]
        );
        let err = parse_headers("Bearer sekrit").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        assert!(!err.contains("sekrit"), "{err}");
    }
}
