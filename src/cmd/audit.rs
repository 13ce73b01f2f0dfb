//! `fixgate audit`: the verdict on a patch, with its evidence, in the chosen format; or on many
//! heads against one base, one report per head. Also keeps the audit's graph for `fixgate
//! graph` and `fixgate explain`.

use std::io::{IsTerminal, Write};

use crate::audit::budget::Overrides;
use crate::audit::freeze::Date;
use crate::audit::verdict::Verdict;
use crate::cli::{AuditArgs, AuditOptionArgs, DepsArg};
use crate::config::DepsMode;
use crate::context::{to_json, Ctx};
use crate::engine::audit::{self, Options};
use crate::environment::Environment;
use crate::error::{Error, Result};
use crate::report::{self, AuditReport, Format};

pub(crate) fn run(ctx: &Ctx, args: &AuditArgs) -> Result<i32> {
    let heads = heads(args)?;
    if args.shard.is_some() && heads.len() > 1 {
        return Err(Error::Usage(
            "--shard runs one share of one head's matrix; give one --head".into(),
        ));
    }
    let deadline = args
        .timeout
        .map(|after| Deadline::start(after, ctx.interrupted.clone()));
    if heads.len() <= 1 {
        let head = heads.into_iter().next();
        let label = head.clone().unwrap_or_else(|| "worktree".into());
        let opts = options(&args.base, &args.options, head, args.shard, &ctx.env)?;
        // Past the deadline, whatever the audit ended with is the deadline's doing: a run it
        // cancelled reads as "failed: cancelled" to the step that waited on it.
        let report = match audit::audit(ctx, &opts) {
            Err(_) if deadline.as_ref().is_some_and(Deadline::passed) => {
                report::assemble::timed_out(&args.base, &label, deadline.unwrap().after, true)
            }
            r => r?,
        };
        emit(ctx, &report)?;
        also(args, &report, None)?;
        return Ok(report.exit_code);
    }
    many(ctx, args, &heads, deadline.as_ref())
}

/// Writes the `--report FORMAT:FILE` renderings of `report`; `head`: its place and revision
/// among several heads, when FILE is a folder of one report per head.
fn also(args: &AuditArgs, report: &AuditReport, head: Option<(usize, &str)>) -> Result<()> {
    if report.shard.is_some() {
        return Ok(()); // a share's note is its only output
    }
    for (format, file) in &args.reports {
        let format = crate::cmd::settings::format(*format);
        let path = match head {
            None => file.clone(),
            Some((i, head)) => {
                std::fs::create_dir_all(file).map_err(|e| {
                    Error::Usage(format!(
                        "failed to create the report folder {} ({e}); with several heads, \
                         --report FORMAT:DIR names a folder that gets one report per head",
                        file.display()
                    ))
                })?;
                file.join(report_name(i, head, format))
            }
        };
        let text = render(format, false, report, true, false);
        std::fs::write(&path, text).map_err(|e| Error::io("write", &path, e))?;
    }
    Ok(())
}

/// `--timeout`: when the deadline passes before the command ends, the audit is stopped as
/// Ctrl-C stops it (runs killed, sandboxes removed, the steps that finished kept in the cache).
struct Deadline {
    after: std::time::Duration,
    passed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Dropped when the command ends: the watching thread then ends too.
    _ended: std::sync::mpsc::Sender<()>,
}

impl Deadline {
    fn start(
        after: std::time::Duration,
        interrupted: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> Deadline {
        use std::sync::atomic::Ordering;
        let passed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ended, watch) = std::sync::mpsc::channel::<()>();
        let flag = passed.clone();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(after) {
                flag.store(true, Ordering::SeqCst);
                interrupted.store(true, Ordering::SeqCst);
            }
        });
        Deadline {
            after,
            passed,
            _ended: ended,
        }
    }

    fn passed(&self) -> bool {
        self.passed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The heads to audit: every `--head`, then every line of `--heads-from`. None: the working
/// tree.
fn heads(args: &AuditArgs) -> Result<Vec<String>> {
    let mut heads = args.head.clone();
    if let Some(file) = &args.heads_from {
        let text = std::fs::read_to_string(file).map_err(|e| {
            Error::Usage(format!(
                "failed to read --heads-from {}: {e}; give a file with one revision per line",
                file.display()
            ))
        })?;
        heads.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string),
        );
        if heads.is_empty() {
            return Err(Error::Usage(format!(
                "--heads-from {} lists no revision",
                file.display()
            )));
        }
    }
    Ok(heads)
}

/// Audits every head against one base, one after another through one cache: every base step
/// (snapshot, collection, base checks, remembered culprit sets) runs once and is found by the
/// heads after it. A head that cannot be audited gets an error report; the others go on.
fn many(ctx: &Ctx, args: &AuditArgs, heads: &[String], deadline: Option<&Deadline>) -> Result<i32> {
    if let Some(dir) = &ctx.output {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::Usage(format!(
                "failed to create the report folder {} ({e}); with several heads, --output \
                 names a folder that gets one report per head",
                dir.display()
            ))
        })?;
    }
    let mut worst = Verdict::Pass;
    for (i, head) in heads.iter().enumerate() {
        let opts = options(
            &args.base,
            &args.options,
            Some(head.clone()),
            args.shard,
            &ctx.env,
        )?;
        let passed = || deadline.filter(|d| d.passed());
        let report = match passed() {
            Some(d) => report::assemble::timed_out(&args.base, head, d.after, false),
            None => match audit::audit(ctx, &opts) {
                Ok(r) => r,
                Err(e) => match (passed(), e) {
                    (Some(d), _) => report::assemble::timed_out(&args.base, head, d.after, true),
                    (None, Error::Interrupted) => return Err(Error::Interrupted),
                    (None, e) => report::assemble::error(head, &e),
                },
            },
        };
        worst = worst.max(report.verdict);
        for w in &report.warnings {
            ctx.warn(&format!("{head}: {w}"));
        }
        ctx.save_graph(&report);
        also(args, &report, Some((i, head)))?;
        let stream = ctx.output.is_none();
        let text = render(
            ctx.format,
            color(ctx),
            &report,
            i + 1 == heads.len(),
            stream,
        );
        match &ctx.output {
            Some(dir) => {
                let path = dir.join(report_name(i, head, ctx.format));
                std::fs::write(&path, text).map_err(|e| Error::io("write", &path, e))?;
            }
            None => write_stdout(&text)?,
        }
    }
    Ok(worst.exit_code())
}

/// `03-feature_x.json`: the head's place in the list, then its revision with every character a
/// file name should not hold replaced.
fn report_name(index: usize, head: &str, format: Format) -> String {
    let safe: String = head
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .collect();
    let ext = match format {
        Format::Human => "txt",
        Format::Json => "json",
        Format::Markdown => "md",
        Format::Junit => "xml",
        Format::Github => "txt",
        Format::Sarif => "sarif",
    };
    format!("{:02}-{safe}.{ext}", index + 1)
}

fn write_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::io("write", "standard output", e))
        }
        _ => Ok(()),
    }
}

/// The engine's options for an audit of `head` (`None`: the working tree) against `base`.
pub(crate) fn options(
    base: &str,
    args: &AuditOptionArgs,
    head: Option<String>,
    shard: Option<crate::cli::Shard>,
    env: &Environment,
) -> Result<Options> {
    let today = match &args.today {
        Some(d) => Date::parse(d).map_err(|e| Error::Usage(format!("--today: {e}")))?,
        None => crate::context::today(),
    };
    Ok(Options {
        base: base.to_owned(),
        head,
        seeds: args
            .seed_list
            .clone()
            .unwrap_or_else(|| (1..=args.seeds).collect()),
        strict: args.strict,
        strict_source: args.strict_source,
        nio: args.nio,
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
        sandbox: crate::cmd::settings::sandbox(&args.sandbox),
        shard: shard.map(|s| crate::engine::shard::Shard { k: s.k, n: s.n }),
        runner: None,
        frozen_head: None,
        remote_exec: crate::cmd::settings::remote_exec(&args.remote_exec, env)?,
        full: args.full,
        scoped: args.scoped,
    })
}

/// The report in the chosen format. JSON is one line per report when several go to one
/// stream (JSON Lines), sorted and pretty otherwise; other formats are separated by a blank
/// line.
/// Whether the report on standard output is coloured.
fn color(ctx: &Ctx) -> bool {
    ctx.output.is_none() && !ctx.env.no_color && std::io::stdout().is_terminal()
}

fn render(format: Format, color: bool, report: &AuditReport, last: bool, stream: bool) -> String {
    match format {
        Format::Json if stream => {
            // Through `Value`, so keys come out sorted as in the single report.
            let value = serde_json::to_value(report).unwrap_or_default();
            let mut line = value.to_string();
            line.push('\n');
            line
        }
        Format::Json => to_json(report),
        Format::Human => {
            let mut text = report::human::render(report, color);
            if stream && !last {
                text.push('\n');
            }
            text
        }
        Format::Markdown => report::markdown::render(report),
        Format::Junit => report::junit::render(report),
        Format::Github => report::github::render(report),
        Format::Sarif => report::sarif::render(report),
    }
}

/// Renders the report in the chosen format and keeps its graph for `graph` and `explain`.
pub(crate) fn emit(ctx: &Ctx, report: &AuditReport) -> Result<()> {
    for w in &report.warnings {
        ctx.warn(w);
    }
    if let Some(note) = &report.shard {
        // A share judges nothing: its note says what it ran, whatever the format.
        return ctx.emit(&to_json(note));
    }
    ctx.save_graph(report);
    ctx.emit(&render(ctx.format, color(ctx), report, true, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_names_keep_their_place_and_drop_odd_characters() {
        assert_eq!(report_name(0, "HEAD~1", Format::Json), "01-HEAD_1.json");
        assert_eq!(
            report_name(11, "feature/x y", Format::Markdown),
            "12-feature_x_y.md"
        );
    }
}
