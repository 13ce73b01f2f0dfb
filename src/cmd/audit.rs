//! `fixgate audit`: the verdict on a patch, with its evidence, in the chosen format. Also keeps
//! the audit's graph for `fixgate graph` and `fixgate explain`.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::audit::budget::Overrides;
use crate::audit::freeze::Date;
use crate::cli::{AuditArgs, DepsArg, Format};
use crate::config::DepsMode;
use crate::context::{to_json, Ctx};
use crate::engine::audit::{self, Options};
use crate::error::{Error, Result};
use crate::report::{self, AuditReport};

pub fn run(ctx: &Ctx, args: &AuditArgs) -> Result<i32> {
    let opts = options(args)?;
    let mut report = audit::audit(ctx, &opts)?;
    report.containment = crate::contain::current().as_str().into();
    emit(ctx, &report)?;
    Ok(report.exit_code)
}

pub fn options(args: &AuditArgs) -> Result<Options> {
    let today = match &args.today {
        Some(d) => Date::parse(d).map_err(|e| Error::Usage(format!("--today: {e}")))?,
        None => today(),
    };
    Ok(Options {
        base: args.base.clone(),
        head: args.head.clone(),
        seeds: args
            .seed_list
            .clone()
            .unwrap_or_else(|| (1..=args.seeds).collect()),
        strict: args.strict,
        cache: !args.no_cache,
        check: args.check,
        deps: args.deps.map(|d| match d {
            DepsArg::Traced => DepsMode::Traced,
            DepsArg::Conservative => DepsMode::Conservative,
        }),
        budget: Overrides {
            max_seconds: args.max_seconds,
            max_tests: args.max_tests,
            max_frozen: args.max_frozen,
            max_new_skips: args.max_new_skips,
            max_reruns: args.max_reruns,
        },
        today,
        sandbox: args.sandbox.clone(),
    })
}

/// Today in UTC.
pub fn today() -> Date {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Date::from_unix_days(secs.div_euclid(86_400))
}

/// Renders the report in the chosen format and keeps its graph for `graph` and `explain`.
pub fn emit(ctx: &Ctx, report: &AuditReport) -> Result<()> {
    for w in &report.warnings {
        ctx.warn(w);
    }
    save_graph(ctx, report);
    let color = ctx.output.is_none()
        && std::env::var_os("NO_COLOR").is_none()
        && std::io::stdout().is_terminal();
    let text = match ctx.format {
        Format::Human => report::human::render(report, color),
        Format::Json => to_json(report),
        Format::Markdown => report::markdown::render(report),
        Format::Junit => report::junit::render(report),
        Format::Github => report::github::render(report),
    };
    ctx.emit(&text)
}

/// Where the last audit of this repository keeps its graph.
pub fn last_audit_dir(ctx: &Ctx) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let scope = blake3::hash(ctx.repo.root.as_os_str().as_bytes()).to_hex();
    ctx.cache_dir.join("last-audit").join(&scope[..32])
}

fn save_graph(ctx: &Ctx, report: &AuditReport) {
    let dir = last_audit_dir(ctx);
    let written = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(dir.join("graph.json"), to_json(&report.graph)))
        .and_then(|_| std::fs::write(dir.join("graph.dot"), &report.graph_dot));
    if let Err(e) = written {
        ctx.warn(&format!(
            "failed to keep the audit's graph under {}: {e}; `fixgate graph` and `fixgate explain` will not see it",
            dir.display()
        ));
    }
}
