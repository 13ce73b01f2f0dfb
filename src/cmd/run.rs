//! `fixgate run`: one ordered run of the suite in a sandbox, with every test's outcome.

use std::fmt::Write;

use serde::Serialize;

use crate::cli::RunArgs;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::pytest::driver::{Record, ENV_ALLOWLIST, HASH_SEED};
use crate::pytest::events::CollectedItem;
use crate::pytest::interpreter::Fingerprint;
use crate::pytest::result::{Outcome, RunResult};

#[derive(Serialize)]
pub(crate) struct RunReport<'a> {
    /// `namespaces`, `landlock` or `none` (see `contain`).
    pub(crate) containment: &'static str,
    /// What the containment held exactly (see docs/json-report.md).
    pub(crate) containment_detail: crate::contain::Containment,
    pub(crate) env_allowlist: Vec<String>,
    /// Whether the run's processes were forked from a warm interpreter, or why not.
    pub(crate) forkserver: crate::pytest::forkserver::ForkSummary,
    pub(crate) interpreter: &'a Fingerprint,
    /// Writes the run attempted outside its sandbox (each a reason to reject the patch).
    pub(crate) outside_writes: Vec<crate::pytest::outside::OutsideWrite>,
    pub(crate) python_hash_seed: &'static str,
    pub(crate) result: &'a RunResult,
    pub(crate) schema: u32,
    pub(crate) seed: Option<u64>,
    pub(crate) snapshot: SnapshotInfo,
}

impl RunReport<'_> {
    /// Sorted, pretty JSON with a trailing newline: the same text as `context::to_json`, written
    /// directly because every type in the report declares its fields in sorted order (a test
    /// pins it). Going through `serde_json::Value` cost a run of 2,000 tests 60 ms.
    pub(crate) fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a run report always serializes");
        s.push('\n');
        s
    }
}

#[derive(Serialize)]
pub(crate) struct SnapshotInfo {
    pub(crate) commit: Option<String>,
    pub(crate) rev: String,
}

pub(crate) fn run(ctx: &Ctx, args: &RunArgs) -> Result<i32> {
    let snapshot = ctx.repo.snapshot(args.rev.as_deref())?;
    let config = ctx.config(&snapshot)?;
    let runner = ctx.runner(
        &crate::cmd::settings::sandbox(&args.sandbox),
        &config.limits,
    )?;
    let record = match args.record {
        true => Record::ALL,
        false => Record::NONE,
    };
    let pb = ctx.progress(0, "run");
    let (result, seed) = match &args.order {
        Some(file) => {
            let order = read_order_file(file, &runner.collect(&snapshot)?)?;
            if let Some(pb) = &pb {
                pb.set_length(order.len() as u64);
            }
            let overlay = Default::default();
            (
                runner.run(
                    &snapshot,
                    &overlay,
                    &order,
                    &config.groups,
                    record,
                    pb.as_ref(),
                ),
                None,
            )
        }
        None => (
            runner.run_seed(&snapshot, args.seed, &config.groups, record, pb.as_ref()),
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
    let outside_writes = crate::pytest::outside::outside_writes(&result);
    for w in &outside_writes {
        ctx.warn(&format!(
            "{} tried to {} {} outside its sandbox",
            w.nodeid.as_deref().unwrap_or("the session"),
            if w.op == "read-only" { "write" } else { &w.op },
            w.path
        ));
    }
    let report = RunReport {
        containment: runner.host.mode().as_str(),
        containment_detail: runner.host.containment(),
        outside_writes,
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
        forkserver: ctx.fork_stats.summary(),
    };
    if ctx.format == crate::report::Format::Json {
        return ctx.emit(&report.to_json()).map(|_| exit::PASS);
    }
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
pub(crate) fn read_order_file(
    file: &std::path::Path,
    items: &[CollectedItem],
) -> Result<Vec<String>> {
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
        // Twice in a row runs the test again in the same process (the nio order's repro).
        let again = order.last().is_some_and(|o| o == id)
            && (order.len() < 2 || order[order.len() - 2] != id);
        if !again && order.iter().any(|o| o == id) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_json_has_the_same_sorted_keys_as_the_generic_path() {
        // Every field of every nested type is present and non-empty, so a field declared out
        // of order anywhere shows up as a difference.
        let trace = serde_json::json!({
            "read": ["a"], "write": ["b"], "list": [""], "remove": ["c"],
            "rename": [["d", "e"]], "mkdir": ["f"], "sqlite": ["g"], "import": ["h.py"],
            "outside": [{"path": "/tmp/x", "op": "write"}], "unknown": ["subprocess"]
        });
        let result: RunResult = serde_json::from_value(serde_json::json!({
            "order": ["t::a"], "executed": ["t::a"], "processes": 1,
            "session_trace": trace, "warnings": ["w"], "incomplete_trace": true,
            "tests": [{
                "nodeid": "t::a", "outcome": "failed",
                "phases": {"call": {"outcome": "failed", "duration": 0.5, "message": "boom"}},
                "message": "boom", "skip_reason": "s", "reruns": 1, "writes_marker": ["db"],
                "start": 1.0, "end": 2.0, "trace": trace,
                "changed": [{"path": "p", "change": "modified"}],
                "violations": [{"group": "db", "files": [{"path": "p", "change": "modified"}]}]
            }]
        }))
        .unwrap();
        let fingerprint = Fingerprint {
            executable: "/usr/bin/python3".into(),
            version: "3.11".into(),
            pytest: "9.0".into(),
            distributions: vec![("pytest".into(), "9.0".into())],
        };
        let report = RunReport {
            schema: 1,
            snapshot: SnapshotInfo {
                rev: "HEAD".into(),
                commit: Some("abc".into()),
            },
            seed: Some(3),
            interpreter: &fingerprint,
            python_hash_seed: HASH_SEED,
            env_allowlist: vec!["PATH".into()],
            result: &result,
            forkserver: crate::pytest::forkserver::ForkSummary {
                fallbacks: vec!["FIXGATE_FORK=0".into()],
                fresh_processes: 2,
                mode: "fresh".into(),
                ..Default::default()
            },
            containment: "namespaces",
            containment_detail: crate::contain::Containment {
                landlock_abi: Some(7),
                notes: vec!["namespaces not used: FIXGATE_NO_NAMESPACES is set".into()],
                run_as: Some("65534:65534".into()),
                shared_cache: true,
                tier: crate::contain::Mode::Landlock,
                unenforced: vec!["UDP bind and send".into()],
            },
            outside_writes: vec![crate::pytest::outside::OutsideWrite {
                nodeid: Some("t.py::test_a".into()),
                op: "write".into(),
                path: "/tmp/x".into(),
            }],
        };
        assert_eq!(report.to_json(), crate::context::to_json(&report));
    }
}
