//! `fixgate init`: runs the suite once with the trace and proposes the set-up a repository needs
//! (fixture groups from the directories tests read, `writes` markers for the tests that write
//! them, the markers registered in the pytest configuration, a first lock) as a unified diff;
//! `--apply` writes it. The one command that may modify the user's tree, and only when asked.

mod diff;
mod edits;
mod propose;
mod pyedit;
mod pytest_config;
mod toml_file;

use std::fmt::Write as _;

use serde::Serialize;

use crate::cli::InitArgs;
use crate::cmd::atomic;
use crate::cmd::init::diff::unified_diff;
use crate::cmd::init::edits::Edits;
use crate::cmd::init::propose::{
    propose_groups, propose_markers, reload, ProposedGroup, ProposedMarker,
};
use crate::cmd::init::pytest_config::propose_registration;
use crate::config::Config;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::lock::{self, Lock};
use crate::manifest::{self, Hashing};
use crate::snapshot::Snapshot;

#[derive(Serialize)]
struct Report {
    schema: u32,
    groups_file: String,
    groups: Vec<ProposedGroup>,
    markers: Vec<ProposedMarker>,
    /// The pytest configuration file the markers are registered in; `None` when they are.
    registration: Option<String>,
    /// The lock to create; `None` when the repository has one.
    lock: Option<String>,
    /// Every file the proposal changes.
    files: Vec<String>,
    diff: String,
    applied: bool,
    changed: bool,
    tests: usize,
}

pub(crate) fn run(ctx: &Ctx, args: &InitArgs) -> Result<i32> {
    let snapshot = ctx.repo.snapshot(None)?;
    let config = ctx.config(&snapshot)?;
    let runner = ctx.runner(
        &crate::cmd::settings::sandbox(&args.sandbox),
        &config.limits,
    )?;
    let pb = ctx.progress(0, "init");
    let result = runner.run_seed(
        &snapshot,
        0,
        &config.groups,
        crate::pytest::driver::Record::NONE,
        pb.as_ref(),
    );
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let result = result?;
    for w in &result.warnings {
        ctx.warn(w);
    }

    let mut edits = Edits::new(&snapshot);
    let (groups_file, groups) = propose_groups(&snapshot, &config, &result, &mut edits)?;
    let new_config = reload(&edits, &snapshot)?;
    let markers = propose_markers(&result, &new_config.groups, &mut edits)?;
    let registration = propose_registration(&mut edits)?;
    let lock = propose_lock(&snapshot, &new_config, &mut edits)?;
    if lock.is_none() {
        warn_stale_lock(ctx, &snapshot, &new_config)?;
    }

    let changes = edits.changes();
    let diff: String = changes
        .iter()
        .map(|(path, old, new)| unified_diff(path, old.as_deref(), new))
        .collect();
    if args.apply {
        // The paths name test files the run reported: each is checked to be a path below the
        // repository, and written there without following a link.
        let root = crate::beneath::Root::open(&ctx.repo.root)
            .map_err(|e| Error::io("open", &ctx.repo.root, e))?;
        for (path, _, new) in &changes {
            atomic::write_below(&root, path.as_bytes(), new.as_bytes())?;
        }
    }
    let report = Report {
        schema: 1,
        groups_file,
        groups,
        markers,
        registration,
        lock,
        files: changes.iter().map(|(p, _, _)| p.clone()).collect(),
        changed: !changes.is_empty(),
        applied: args.apply && !changes.is_empty(),
        diff,
        tests: result.tests.len(),
    };
    ctx.emit_report(&report, || render(&report))?;
    Ok(exit::PASS)
}

/// A first lock when the repository has none, under the new groups.
fn propose_lock(snapshot: &Snapshot, config: &Config, edits: &mut Edits) -> Result<Option<String>> {
    if lock::locate(snapshot, config)?.is_some() {
        return Ok(None);
    }
    let path = lock::lookup_order(config)[0].to_owned();
    let manifest = manifest::build(snapshot, &config.groups, Hashing { stat_cache: None })?;
    if manifest.files.is_empty() {
        return Ok(None);
    }
    edits.set(&path, Lock::from_manifest(&manifest).to_json())?;
    Ok(Some(path))
}

/// An existing lock is never rewritten by `init` (re-pinning could accept a changed fixture
/// nobody reviewed), but when the proposed groups make it differ, the user is told.
fn warn_stale_lock(ctx: &Ctx, snapshot: &Snapshot, config: &Config) -> Result<()> {
    let Some(found) = lock::locate(snapshot, config)? else {
        return Ok(());
    };
    let Ok(pinned) = Lock::parse(&found.bytes, &found.path) else {
        return Ok(());
    };
    let manifest = manifest::build(snapshot, &config.groups, Hashing { stat_cache: None })?;
    let mut read = lock::snapshot_reader(snapshot)?;
    let drift = pinned.check_with(&manifest, &mut read);
    if !drift.is_empty() {
        ctx.warn(&format!(
            "{} differs from the fixtures under these groups in {} file(s); review it with \
             `fixgate lock --check` and re-pin with `fixgate lock` if the change is intended",
            found.path,
            drift.len()
        ));
    }
    Ok(())
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    if !r.changed {
        let _ = writeln!(
            out,
            "already set up: nothing to change ({} tests traced; every file they read is in a \
             group, every writing test holds its lease, the markers are registered)",
            r.tests
        );
        for m in r.markers.iter().filter(|m| !m.placed) {
            let _ = writeln!(
                out,
                "add by hand: @pytest.mark.writes({}) on {}",
                m.groups.join(", "),
                m.nodeid
            );
        }
        return out;
    }
    for g in &r.groups {
        let _ = writeln!(
            out,
            "group {}: {}  ({})",
            g.name,
            g.globs.join(" "),
            r.groups_file
        );
    }
    for m in &r.markers {
        let _ = writeln!(
            out,
            "{} @pytest.mark.writes({}) on {}",
            if m.placed { "marker" } else { "add by hand:" },
            m.groups
                .iter()
                .map(|g| format!("{g:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            m.nodeid
        );
    }
    if let Some(f) = &r.registration {
        let _ = writeln!(out, "register the markers in {f}");
    }
    if let Some(l) = &r.lock {
        let _ = writeln!(out, "first lock: {l}");
    }
    out.push('\n');
    out.push_str(&r.diff);
    out.push('\n');
    if r.applied {
        let _ = writeln!(out, "applied: {} file(s) written", r.files.len());
    } else {
        out.push_str("nothing was written; run `fixgate init --apply` to apply this\n");
    }
    out
}
