//! `fixgate lock`: write fixtures.lock, check the fixtures against a lock (fixgate's or a
//! team's SHA-256 lock), or migrate a SHA-256 lock to fixgate's format.

use std::fmt::Write;
use std::path::PathBuf;

use serde::Serialize;

use crate::cli::LockArgs;
use crate::cmd::atomic;
use crate::config::Config;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::lock::{self, Drift, Lock, LockFormat};
use crate::manifest::Manifest;

#[derive(Serialize)]
struct CheckReport<'a> {
    schema: u32,
    lock: String,
    format: LockFormat,
    snapshot: String,
    ok: bool,
    drift: &'a [Drift],
}

#[derive(Serialize)]
struct WriteReport {
    schema: u32,
    lock: String,
    files: usize,
    changed: bool,
}

#[derive(Serialize)]
struct MigrateReport<'a> {
    schema: u32,
    lock: String,
    from: LockFormat,
    files: usize,
    changed: bool,
    drift: &'a [Drift],
}

pub(crate) fn run(ctx: &Ctx, args: &LockArgs) -> Result<i32> {
    let snapshot = ctx.repo.snapshot(args.rev.as_deref())?;
    let config = ctx.config(&snapshot)?;
    let manifest = ctx.manifest(&snapshot, &config)?;
    let lock_path = lock_path(ctx, args, &config);
    let shown = lock_path.display().to_string();

    if args.check || args.migrate {
        let bytes = std::fs::read(&lock_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Usage(format!(
                "no lock at {shown}; create it with `fixgate lock` and commit it, or name yours \
                 with --lock or `[tool.fixgate] lock = \"...\"` in pyproject.toml"
            )),
            _ => Error::io("read", &lock_path, e),
        })?;
        let pinned = Lock::parse(&bytes, &shown)?;
        // A lock that names none of these files, or whose pins are another digest than its
        // format's, is not drift of every file: say what is wrong with the lock.
        let mut read = lock::snapshot_reader(&snapshot)?;
        match pinned.mismatch(&manifest, &mut read) {
            Some(m @ lock::Mismatch::NamesNoFile { .. })
            | Some(m @ lock::Mismatch::NoPinHolds { would: Some(_), .. }) => {
                let of = match args.rev.as_deref() {
                    Some(rev) => format!("the fixtures of {rev}"),
                    None => "the fixtures of the working tree".to_owned(),
                };
                return Err(Error::Usage(m.message(&shown, &of)));
            }
            _ => {}
        }
        let drift = pinned.check_with(&manifest, &mut read);
        if args.migrate {
            return migrate(ctx, &lock_path, &pinned, &drift, &manifest);
        }
        let report = CheckReport {
            schema: 1,
            lock: shown.clone(),
            format: pinned.format,
            snapshot: snapshot.rev_label(),
            ok: drift.is_empty(),
            drift: &drift,
        };
        ctx.emit_report(&report, || render_check(&shown, &drift))?;
        return Ok(if drift.is_empty() {
            exit::PASS
        } else {
            exit::DRIFT
        });
    }

    let old = std::fs::read(&lock_path).ok();
    if let Some(old) = &old {
        // Overwriting a team's lock in another format would break the script that maintains
        // it; that is a decision `--migrate` makes explicit.
        if let Ok(existing) = Lock::parse(old, &shown) {
            if existing.format != LockFormat::Fixgate {
                return Err(Error::Usage(format!(
                    "{shown} is a {} lock, not fixgate's; check it with `fixgate lock --check`, \
                     rewrite it in fixgate's format with `fixgate lock --migrate`, or write \
                     fixgate's lock elsewhere with --lock FILE",
                    existing.format.as_str()
                )));
            }
        }
    }
    let new = Lock::from_manifest(&manifest);
    let text = new.to_json();
    let changed = old.as_deref() != Some(text.as_bytes());
    if changed {
        atomic::write(&ctx.repo.root, &lock_path, text.as_bytes())?;
    }
    let report = WriteReport {
        schema: 1,
        lock: shown.clone(),
        files: new.files.len(),
        changed,
    };
    ctx.emit_report(&report, || {
        format!(
            "{} {shown}: {} fixture file{} pinned\n",
            if changed { "wrote" } else { "unchanged" },
            new.files.len(),
            if new.files.len() == 1 { "" } else { "s" }
        )
    })?;
    Ok(exit::PASS)
}

/// `--lock`, else the first lock that exists in the lookup order, else where a new one goes:
/// `[tool.fixgate] lock` or fixtures.lock at the root. The lock is read from the working tree
/// (even with `--rev`): it is the user's file, being edited next to the fixtures.
fn lock_path(ctx: &Ctx, args: &LockArgs, config: &Config) -> PathBuf {
    if let Some(path) = &args.lock {
        return path.clone();
    }
    let order = lock::lookup_order(config);
    order
        .iter()
        .map(|p| ctx.repo.root.join(p))
        .find(|p| p.exists())
        .unwrap_or_else(|| ctx.repo.root.join(order[0]))
}

/// Rewrites `pinned` in fixgate's format in place, only when the fixtures match it: migrating
/// over drift would pin bytes nobody reviewed.
fn migrate(
    ctx: &Ctx,
    path: &std::path::Path,
    pinned: &Lock,
    drift: &[Drift],
    manifest: &Manifest,
) -> Result<i32> {
    let shown = path.display().to_string();
    let new = Lock::from_manifest(manifest);
    let ok = drift.is_empty();
    let changed = ok && pinned.format != LockFormat::Fixgate;
    if changed {
        atomic::write(&ctx.repo.root, path, new.to_json().as_bytes())?;
    }
    let report = MigrateReport {
        schema: 1,
        lock: shown.clone(),
        from: pinned.format,
        files: new.files.len(),
        changed,
        drift,
    };
    ctx.emit_report(&report, || {
        if !ok {
            let mut out = render_check(&shown, drift);
            out.push_str("not migrated: make the fixtures match the lock first\n");
            out
        } else if changed {
            format!(
                "migrated {shown} from {} to fixgate's format: {} fixture file{} pinned\n",
                pinned.format.as_str(),
                new.files.len(),
                if new.files.len() == 1 { "" } else { "s" }
            )
        } else {
            format!("unchanged {shown}: already in fixgate's format\n")
        }
    })?;
    Ok(if ok { exit::PASS } else { exit::DRIFT })
}

fn render_check(lock: &str, drift: &[Drift]) -> String {
    if drift.is_empty() {
        return format!("ok: the fixtures match {lock}\n");
    }
    let mut out = format!(
        "drift: {} fixture file{} differ from {lock}\n",
        drift.len(),
        if drift.len() == 1 { "" } else { "s" }
    );
    for d in drift {
        let _ = writeln!(
            out,
            "  {:<8}  {}{}",
            d.change.as_str(),
            d.path,
            d.group
                .as_deref()
                .map(|g| format!("  [{g}]"))
                .unwrap_or_default()
        );
    }
    out.push_str("if the change is intended, re-pin the lock and commit it with the change\n");
    out
}
