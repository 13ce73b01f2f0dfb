//! `fixgate trace`: which tests read and wrote which fixture files, and every lease violation.

use std::fmt::Write;

use serde::Serialize;

use crate::cli::TraceArgs;
use crate::config::FixtureGroups;
use crate::context::Ctx;
use crate::error::Result;
use crate::exit;
use crate::pytest::events::OutsideAccess;
use crate::pytest::lease::Violation;
use crate::pytest::result::TestResult;
use crate::repo_path::RepoPath;

#[derive(Serialize)]
struct Access {
    path: String,
    group: Option<String>,
}

#[derive(Serialize)]
struct TestTrace<'a> {
    nodeid: &'a str,
    outcome: &'static str,
    reads: Vec<Access>,
    writes: Vec<Access>,
    lists: Vec<Access>,
    sqlite: Vec<Access>,
    outside: &'a [OutsideAccess],
    unknown: &'a [String],
    writes_marker: &'a [String],
    violations: &'a [Violation],
}

#[derive(Serialize)]
struct Report<'a> {
    schema: u32,
    rev: String,
    seed: u64,
    tests: Vec<TestTrace<'a>>,
    violations: usize,
}

pub(crate) fn run(ctx: &Ctx, args: &TraceArgs) -> Result<i32> {
    let snapshot = ctx.repo.snapshot(args.rev.as_deref())?;
    let config = ctx.config(&snapshot)?;
    let runner = ctx.runner(
        &crate::cmd::settings::sandbox(&args.sandbox),
        &config.limits,
    )?;
    let pb = ctx.progress(0, "trace");
    let result = runner.run_seed(
        &snapshot,
        args.seed,
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
    let tests: Vec<TestTrace> = result
        .tests
        .iter()
        .map(|t| trace_of(t, &config.groups))
        .collect();
    let report = Report {
        schema: 1,
        rev: snapshot.rev_label(),
        seed: args.seed,
        violations: tests.iter().map(|t| t.violations.len()).sum(),
        tests,
    };
    ctx.emit_report(&report, || render(&report))?;
    Ok(exit::PASS)
}

fn accesses(paths: &[String], groups: &FixtureGroups) -> Vec<Access> {
    paths
        .iter()
        .map(|p| Access {
            path: p.clone(),
            group: groups
                .group_of(&RepoPath::parse_lossless(p))
                .map(str::to_owned),
        })
        .collect()
}

fn trace_of<'a>(t: &'a TestResult, groups: &FixtureGroups) -> TestTrace<'a> {
    TestTrace {
        nodeid: &t.nodeid,
        outcome: t.outcome.as_str(),
        reads: accesses(&t.trace.read, groups),
        writes: accesses(&t.trace.write, groups),
        lists: accesses(&t.trace.list, groups),
        sqlite: accesses(&t.trace.sqlite, groups),
        outside: &t.trace.outside,
        unknown: &t.trace.unknown,
        writes_marker: &t.writes_marker,
        violations: &t.violations,
    }
}

fn render(r: &Report) -> String {
    let mut out = String::new();
    for t in &r.tests {
        let fixture = |a: &&Access| a.group.is_some();
        let lines: Vec<String> = [
            ("reads", &t.reads),
            ("writes", &t.writes),
            ("lists", &t.lists),
            ("sqlite", &t.sqlite),
        ]
        .iter()
        .flat_map(|(verb, list)| {
            list.iter().filter(fixture).map(move |a| {
                format!(
                    "  {verb:<7} {} [{}]",
                    a.path,
                    a.group.as_deref().unwrap_or("")
                )
            })
        })
        .chain(
            t.outside
                .iter()
                .map(|o| format!("  outside {} {}", o.op, o.path)),
        )
        .chain(t.violations.iter().map(|v| {
            format!(
                "  LEASE VIOLATION: changed group {:?} without @pytest.mark.writes({:?}): {}",
                v.group,
                v.group,
                v.files
                    .iter()
                    .map(|f| format!("{} ({})", f.path, f.change))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }))
        .collect();
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{} [{}]", t.nodeid, t.outcome);
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
    if out.is_empty() {
        out.push_str("no test touched a fixture file\n");
    }
    let _ = writeln!(
        out,
        "{} lease violation{}",
        r.violations,
        if r.violations == 1 { "" } else { "s" }
    );
    out
}
