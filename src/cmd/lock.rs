//! `fixgate lock`: write fixtures.lock, or check the fixtures against it.

use std::fmt::Write;

use serde::Serialize;

use crate::cli::LockArgs;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::lock::{self, Drift, Lock};

#[derive(Serialize)]
struct CheckReport<'a> {
    schema: u32,
    lock: String,
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

pub fn run(ctx: &Ctx, args: &LockArgs) -> Result<i32> {
    let lock_path = args
        .lock
        .clone()
        .unwrap_or_else(|| ctx.repo.root.join(lock::FILE_NAME));
    let snapshot = ctx.repo.snapshot(args.rev.as_deref())?;
    let config = ctx.config(&snapshot)?;
    let manifest = ctx.manifest(&snapshot, &config)?;
    let shown = lock_path.display().to_string();

    if args.check {
        let bytes = std::fs::read(&lock_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Usage(format!(
                "no lock at {shown}; create it with `fixgate lock` and commit it"
            )),
            _ => Error::io("read", &lock_path, e),
        })?;
        let pinned = Lock::parse(&bytes, &shown)?;
        let drift = pinned.check(&manifest);
        let report = CheckReport {
            schema: 1,
            lock: shown.clone(),
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

    let new = Lock::from_manifest(&manifest);
    let text = new.to_json();
    let old = std::fs::read(&lock_path).ok();
    let changed = old.as_deref() != Some(text.as_bytes());
    if changed {
        write_atomically(&lock_path, text.as_bytes())?;
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

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).map_err(|e| Error::io("create a file in", dir, e))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| Error::io("write", tmp.path(), e))?;
    tmp.persist(path)
        .map_err(|e| Error::io("write", path, e.error))?;
    Ok(())
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
    out.push_str(
        "if the change is intended, run `fixgate lock` and commit fixtures.lock with it\n",
    );
    out
}
