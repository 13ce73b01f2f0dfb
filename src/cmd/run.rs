//! `fixgate run`: one ordered run of the suite in a sandbox, with every test's outcome.

use std::fmt::Write;

use serde::Serialize;

use crate::cli::RunArgs;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::pytest::driver::{RunResult, ENV_ALLOWLIST, HASH_SEED};
use crate::pytest::events::{CollectedItem, Outcome};
use crate::pytest::interpreter::Fingerprint;

#[derive(Serialize)]
pub struct RunReport<'a> {
    pub schema: u32,
    pub snapshot: SnapshotInfo,
    pub seed: Option<u64>,
    pub interpreter: &'a Fingerprint,
    pub python_hash_seed: &'static str,
    pub env_allowlist: Vec<String>,
    pub result: &'a RunResult,
}

#[derive(Serialize)]
pub struct SnapshotInfo {
    pub rev: String,
    pub commit: Option<String>,
}

pub fn run(ctx: &Ctx, args: &RunArgs) -> Result<i32> {
    let snapshot = ctx.repo.snapshot(args.rev.as_deref())?;
    let config = ctx.config(&snapshot)?;
    let runner = ctx.runner(&args.sandbox)?;
    let pb = ctx.progress(0, "run");
    let (result, seed) = match &args.order {
        Some(file) => {
            let order = read_order_file(file, &runner.collect(&snapshot)?)?;
            if let Some(pb) = &pb {
                pb.set_length(order.len() as u64);
            }
            let overlay = Default::default();
            (
                runner.run(&snapshot, &overlay, &order, &config.groups, pb.as_ref()),
                None,
            )
        }
        None => (
            runner.run_seed(&snapshot, args.seed, &config.groups, pb.as_ref()),
            Some(args.seed),
        ),
    };
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    let result = result?;
    for w in &result.warnings {
        ctx.warn(w);
    }
    let report = RunReport {
        schema: 1,
        snapshot: SnapshotInfo {
            rev: snapshot.rev_label(),
            commit: snapshot.commit().map(|c| c.to_string()),
        },
        seed,
        interpreter: &runner.interpreter.fingerprint,
        python_hash_seed: HASH_SEED,
        env_allowlist: ENV_ALLOWLIST
            .iter()
            .map(|s| s.to_string())
            .chain(args.sandbox.pass_env.iter().cloned())
            .collect(),
        result: &result,
    };
    ctx.emit_report(&report, || {
        let fp = &runner.interpreter.fingerprint;
        format!(
            "{}python {} ({}), pytest {}, PYTHONHASHSEED={HASH_SEED}\n",
            render(&result, seed),
            fp.executable,
            fp.version.lines().next().unwrap_or(""),
            fp.pytest
        )
    })?;
    Ok(exit::PASS)
}

/// Reads an order file: one node id per line, blank lines and `#` comments ignored; every id
/// must be one the suite collects.
pub fn read_order_file(file: &std::path::Path, items: &[CollectedItem]) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(file).map_err(|e| Error::io("read", file, e))?;
    let known: std::collections::HashSet<&str> = items.iter().map(|i| i.nodeid.as_str()).collect();
    let mut order = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let id = line.trim();
        if id.is_empty() || id.starts_with('#') {
            continue;
        }
        if !known.contains(id) {
            return Err(Error::Usage(format!(
                "failed to read {} line {}: {id:?} is not a test this suite collects; list node \
                 ids as `python -m pytest --collect-only -q` prints them",
                file.display(),
                i + 1
            )));
        }
        if order.iter().any(|o| o == id) {
            return Err(Error::Usage(format!(
                "failed to read {} line {}: {id:?} is listed twice",
                file.display(),
                i + 1
            )));
        }
        order.push(id.to_owned());
    }
    Ok(order)
}

fn render(result: &RunResult, seed: Option<u64>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} test{} in {}, {} pytest process{}",
        result.tests.len(),
        if result.tests.len() == 1 { "" } else { "s" },
        match seed {
            Some(0) => "file order (seed 0)".to_string(),
            Some(s) => format!("the order of seed {s}"),
            None => "the given order".to_string(),
        },
        result.processes,
        if result.processes == 1 { "" } else { "es" }
    );
    for t in &result.tests {
        let _ = write!(
            out,
            "{:<8} {:>7.3}s  {}",
            t.outcome.as_str(),
            (t.end - t.start).max(0.0),
            t.nodeid
        );
        if let Some(m) = t.message.as_deref().or(t.skip_reason.as_deref()) {
            if t.outcome != Outcome::Passed {
                let _ = write!(out, "  — {}", m.lines().next().unwrap_or(""));
            }
        }
        out.push('\n');
        for v in &t.violations {
            let files: Vec<&str> = v.files.iter().map(|f| f.path.as_str()).collect();
            let _ = writeln!(
                out,
                "         lease violation: wrote group {:?} without @pytest.mark.writes({:?}): {}",
                v.group,
                v.group,
                files.join(", ")
            );
        }
    }
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for t in &result.tests {
        *counts.entry(t.outcome.as_str()).or_default() += 1;
    }
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(out, "summary: {}", summary.join(", "));
    out
}
