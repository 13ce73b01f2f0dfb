//! `fixgate cache stats|verify|gc|clear|push`: look after the cache directory, and share it.

use std::time::{Duration, SystemTime};

use fixgate_cache::{DiskStore, LayeredStore, Store, TransferStats};

use crate::cli::{CacheAction, CacheArgs};
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::store;

#[derive(serde::Serialize)]
struct StatsReport<'a> {
    // Flattened: the store's areas stay where `cache stats --format json` always had them.
    #[serde(flatten)]
    store: &'a fixgate_cache::Stats,
    /// What the last audit's store read and wrote, local and remote.
    last_audit: Option<&'a TransferStats>,
}

fn render_transfer(t: Option<&TransferStats>) -> String {
    let Some(t) = t else {
        return "last audit: none recorded\n".to_owned();
    };
    let mut out = format!(
        "last audit\n  local           {:>8} hits    {:>8} misses\n",
        t.local_hits, t.local_misses
    );
    match &t.remote {
        Some(url) => out.push_str(&format!(
            "  remote {url}{}\n                  {:>8} hits    {:>8} misses  {:>6} rejected {:>6} errors\n                  {:>8} uploads {:>12} bytes down {:>12} bytes up\n",
            t.digest_function
                .map(|f| format!(" ({})", f.name()))
                .unwrap_or_default(),
            t.remote_hits,
            t.remote_misses,
            t.remote_rejected,
            t.remote_errors,
            t.uploads,
            t.bytes_downloaded,
            t.bytes_uploaded
        )),
        None => out.push_str("  remote          none configured\n"),
    }
    out
}

pub(crate) fn run(ctx: &Ctx, args: &CacheArgs) -> Result<i32> {
    let dir = ctx.cache_dir.join("store");
    let store = DiskStore::open(&dir)
        .map_err(|e| Error::Usage(format!("cannot open the cache at {}: {e}", dir.display())))?;
    let fail = |e: fixgate_cache::MaintenanceError| Error::Infra(e.to_string());
    match &args.action {
        CacheAction::Stats => {
            let s = store.stats().map_err(fail)?;
            let last = store::last_transfer(&ctx.cache_dir)?.map(|t| t.stats);
            let report = StatsReport {
                store: &s,
                last_audit: last.as_ref(),
            };
            ctx.emit_report(&report, || {
                let mut out = format!(
                    "cache at {}\n  action records  {:>8} entries {:>12} bytes\n  content store   {:>8} entries {:>12} bytes\n  trace index     {:>8} keys    {:>12} bytes\n",
                    dir.display(),
                    s.ac.entries,
                    s.ac.bytes,
                    s.cas.entries,
                    s.cas.bytes,
                    s.index.entries,
                    s.index.bytes
                );
                out.push_str(&render_transfer(last.as_ref()));
                out
            })?;
        }
        CacheAction::Push => {
            let settings = ctx.remote.as_ref().ok_or_else(|| {
                Error::Usage(
                    "cache push needs a remote cache: pass --remote-cache URL, set \
                     FIXGATE_REMOTE_CACHE, or set [tool.fixgate] remote-cache"
                        .into(),
                )
            })?;
            let last = store::last_transfer(&ctx.cache_dir)?.ok_or_else(|| {
                Error::Usage(format!(
                    "no audit has used the cache at {} yet; run `fixgate audit` first",
                    ctx.cache_dir.display()
                ))
            })?;
            if let Some(w) = store::unauthenticated(settings) {
                ctx.warn(&w);
            }
            let layered = LayeredStore::open(store, &settings.config);
            let pushed = layered.push(&last.touched).map_err(|e| {
                Error::Infra(format!(
                    "failed to push to the remote cache {}: {e}",
                    settings.config.display_url()
                ))
            })?;
            for w in layered.take_warnings() {
                ctx.warn(&w.to_string());
            }
            ctx.emit_report(&pushed, || {
                format!(
                    "pushed {} action records and {} trace lists ({} bytes) to {}; {} no longer \
                     in the local cache\n",
                    pushed.actions,
                    pushed.traces,
                    pushed.bytes,
                    settings.config.display_url(),
                    pushed.missing
                )
            })?;
        }
        CacheAction::Verify => {
            let r = store.verify().map_err(fail)?;
            ctx.emit_report(&r, || {
                let mut out = format!(
                    "checked {} action records and {} blobs: {} problem{}\n",
                    r.ac_checked,
                    r.cas_checked,
                    r.problems.len(),
                    if r.problems.len() == 1 { "" } else { "s" }
                );
                for p in &r.problems {
                    out.push_str(&format!("  {p} (removed)\n"));
                }
                out
            })?;
        }
        CacheAction::Gc { max_size, max_age } => {
            if max_size.is_none() && max_age.is_none() {
                return Err(Error::Usage(
                    "cache gc needs --max-size SIZE (e.g. 500M) and/or --max-age DAYS".into(),
                ));
            }
            let size = max_size.as_deref().map(parse_size).transpose()?;
            let age = max_age.map(|d| Duration::from_secs(d * 86_400));
            let r = store.gc(size, age, SystemTime::now()).map_err(fail)?;
            if let Some(age) = age {
                prune_older(&ctx.cache_dir.join(crate::context::REWRITE_CACHE), age);
            }
            ctx.emit_report(&r, || {
                format!(
                    "removed {} entries ({} bytes); kept {} entries ({} bytes)\n",
                    r.removed.entries, r.removed.bytes, r.kept.entries, r.kept.bytes
                )
            })?;
        }
        CacheAction::Clear => {
            store.clear().map_err(fail)?;
            let _ = std::fs::remove_file(ctx.cache_dir.join(store::LAST_TRANSFER));
            // Everything else fixgate keeps here: the plugin (whatever wrote it, it is every
            // run's code), the rewritten test modules, the stat cache, the last audits'
            // graphs, the interpreters' fingerprints, the demo's virtualenv.
            for sub in [
                "plugin",
                crate::context::REWRITE_CACHE,
                "stat",
                "last-audit",
                "interpreters",
                "demo-venv",
            ] {
                let _ = std::fs::remove_dir_all(ctx.cache_dir.join(sub));
            }
            ctx.emit_report(
                &serde_json::json!({"cleared": dir.display().to_string()}),
                || format!("cleared {}\n", ctx.cache_dir.display()),
            )?;
        }
    }
    Ok(exit::PASS)
}

/// Removes the files under `dir` (at any depth) not modified for `age`: the rewritten test
/// modules, which are small, rebuilt on a miss, and never read by anything but the plugin.
fn prune_older(dir: &std::path::Path, age: Duration) {
    let now = SystemTime::now();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
                continue;
            }
            let old = meta
                .modified()
                .is_ok_and(|t| now.duration_since(t).is_ok_and(|d| d > age));
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// `500M`, `2G`, `1.5G`, `800K` or plain bytes.
pub(crate) fn parse_size(s: &str) -> Result<u64> {
    crate::units::parse_size(s).ok_or_else(|| {
        Error::Usage(format!(
            "--max-size {s:?}: expected a size such as 500M, 2G or 1048576"
        ))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::parse_size("500M").unwrap(), 500 << 20);
        assert_eq!(super::parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(super::parse_size("1024").unwrap(), 1024);
        assert!(super::parse_size("lots").is_err());
    }
}
