//! What `fixgate watch` shows: in a terminal, one compact screen per audit (the verdict, what
//! changed since the last report: new and resolved findings), clearing the previous one; with
//! `--format json`, one JSON line per event on standard output:
//!
//! - `{"type": "started", "audit": N, "changed": [paths], "lock": {"drift": [...],
//!   "microseconds": T}}`: an audit started, after the changed paths; the lock check of the
//!   working tree from the hashes kept in memory (src/fsmonitor.rs), done before it.
//! - `{"type": "report", "audit": N, "changed": [...], "new": [findings], "resolved":
//!   [findings], "seconds_since_change": S, "data": <the audit's JSON report>}`: an audit
//!   finished; `new` and `resolved` compare its findings with the last report's.
//! - `{"type": "cancelled", "audit": N, "changed": [paths]}`: a change came during audit N,
//!   which was stopped (every process of it killed and waited for); the next one follows.
//! - `{"type": "error", "audit": N, "message": M}`: audit N could not run (the watcher goes
//!   on and tries again after the next change).

use std::io::{IsTerminal, Write};

use serde::Serialize;

use crate::audit::verdict::Verdict;
use crate::error::{Error, Result};
use crate::lock::Drift;
use crate::report::{AuditReport, Finding, Format};

/// A finding's identity between two reports: its kind and its tests.
fn same(a: &Finding, b: &Finding) -> bool {
    a.kind == b.kind && a.tests == b.tests
}

/// The findings of `now` that `before` did not have, and those of `before` that `now` lacks.
pub(crate) fn diff<'a>(
    before: &'a [Finding],
    now: &'a [Finding],
) -> (Vec<&'a Finding>, Vec<&'a Finding>) {
    let new = now
        .iter()
        .filter(|f| !before.iter().any(|b| same(b, f)))
        .collect();
    let resolved = before
        .iter()
        .filter(|b| !now.iter().any(|f| same(b, f)))
        .collect();
    (new, resolved)
}

/// One thing to show.
pub(crate) enum Shown<'a> {
    Started {
        audit: u64,
        changed: &'a [String],
        drift: &'a [Drift],
        microseconds: u128,
    },
    Report {
        audit: u64,
        changed: &'a [String],
        report: &'a AuditReport,
        previous: Option<&'a AuditReport>,
        seconds_since_change: Option<f64>,
        watched: usize,
    },
    Cancelled {
        audit: u64,
        changed: &'a [String],
    },
    Failed {
        audit: u64,
        message: &'a str,
    },
}

#[derive(Serialize)]
struct LockLine<'a> {
    drift: &'a [Drift],
    microseconds: u128,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line<'a> {
    Started {
        audit: u64,
        changed: &'a [String],
        lock: LockLine<'a>,
    },
    Report {
        audit: u64,
        changed: &'a [String],
        new: Vec<&'a Finding>,
        resolved: Vec<&'a Finding>,
        seconds_since_change: Option<f64>,
        data: &'a AuditReport,
    },
    Cancelled {
        audit: u64,
        changed: &'a [String],
    },
    Error {
        audit: u64,
        message: &'a str,
    },
}

/// Where the screens go: standard output, as JSON Lines or as text for people.
pub(crate) struct Screen {
    json: bool,
    /// Standard output is a terminal: each report replaces the previous screen.
    terminal: bool,
    color: bool,
}

impl Screen {
    pub(crate) fn new(format: Format, no_color: bool) -> Result<Screen> {
        let json = match format {
            Format::Json => true,
            Format::Human => false,
            f => {
                return Err(Error::Usage(format!(
                    "--format {} is not for `fixgate watch`; use human or json",
                    format!("{f:?}").to_lowercase()
                )))
            }
        };
        let terminal = std::io::stdout().is_terminal();
        Ok(Screen {
            json,
            terminal,
            color: terminal && !no_color,
        })
    }

    pub(crate) fn show(&self, shown: &Shown) -> Result<()> {
        let text = match self.json {
            true => json_line(shown),
            false => self.human(shown),
        };
        if text.is_empty() {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(Error::io("write", "standard output", e))
            }
            _ => Ok(()),
        }
    }

    fn human(&self, shown: &Shown) -> String {
        match shown {
            // People see progress on standard error; the screen changes once per report.
            Shown::Started {
                audit,
                changed,
                drift,
                microseconds,
            } => {
                let lock = match drift.len() {
                    0 => String::new(),
                    n => format!("; {n} fixture file(s) differ from the lock"),
                };
                crate::context::stderr_line(&format!(
                    "fixgate watch: audit {audit} ({}){lock}, lock checked from memory in \
                     {microseconds} µs",
                    describe_changes(changed)
                ));
                String::new()
            }
            Shown::Cancelled { audit, changed } => {
                crate::context::stderr_line(&format!(
                    "fixgate watch: audit {audit} cancelled ({}); starting again",
                    describe_changes(changed)
                ));
                String::new()
            }
            Shown::Failed { audit, message } => {
                let mut s = self.clear();
                s.push_str(&format!(
                    "fixgate watch · audit {audit} · error\n\n{message}\n\nwaiting for \
                     changes (Ctrl-C to stop)\n"
                ));
                s
            }
            Shown::Report {
                audit,
                changed,
                report,
                previous,
                seconds_since_change,
                watched,
            } => {
                let mut s = self.clear();
                s.push_str(&compact(
                    *audit,
                    changed,
                    report,
                    *previous,
                    *seconds_since_change,
                    *watched,
                    self.color,
                ));
                s
            }
        }
    }

    fn clear(&self) -> String {
        match self.terminal {
            // Home, then clear the screen and the scrollback of the previous screens.
            true => "\x1b[H\x1b[2J\x1b[3J".to_owned(),
            false => "\n".to_owned(),
        }
    }
}

fn json_line(shown: &Shown) -> String {
    let line = match shown {
        Shown::Started {
            audit,
            changed,
            drift,
            microseconds,
        } => Line::Started {
            audit: *audit,
            changed,
            lock: LockLine {
                drift,
                microseconds: *microseconds,
            },
        },
        Shown::Report {
            audit,
            changed,
            report,
            previous,
            seconds_since_change,
            ..
        } => {
            let (new, resolved) = diff(previous.map_or(&[], |p| &p.findings), &report.findings);
            Line::Report {
                audit: *audit,
                changed,
                new,
                resolved,
                seconds_since_change: *seconds_since_change,
                data: report,
            }
        }
        Shown::Cancelled { audit, changed } => Line::Cancelled {
            audit: *audit,
            changed,
        },
        Shown::Failed { audit, message } => Line::Error {
            audit: *audit,
            message,
        },
    };
    // Through `Value`, so keys come out sorted as in `fixgate audit`'s reports.
    let mut text = serde_json::to_value(&line)
        .map(|v| v.to_string())
        .unwrap_or_default();
    text.push('\n');
    text
}

fn describe_changes(changed: &[String]) -> String {
    match changed {
        [] => "the working tree".to_owned(),
        [one] => format!("changed: {one}"),
        [one, rest @ ..] => format!("changed: {one} and {} more", rest.len()),
    }
}

/// The screen of one report: a header, the verdict and its reasons, the findings marked new
/// or resolved against the previous report.
fn compact(
    audit: u64,
    changed: &[String],
    report: &AuditReport,
    previous: Option<&AuditReport>,
    seconds_since_change: Option<f64>,
    watched: usize,
    color: bool,
) -> String {
    let paint = |code: &str, text: &str| match color {
        true => format!("\x1b[{code}m{text}\x1b[0m"),
        false => text.to_owned(),
    };
    let verdict_color = match report.verdict {
        Verdict::Pass => "1;32",
        Verdict::Reject | Verdict::Error => "1;31",
        _ => "1;33",
    };
    let base = report
        .base
        .commit
        .as_deref()
        .map(|c| format!("{} ({})", report.base.rev, &c[..c.len().min(10)]))
        .unwrap_or_else(|| report.base.rev.clone());
    let mut s = format!("fixgate watch · audit {audit} · base {base}");
    match seconds_since_change {
        Some(t) => s.push_str(&format!(" · {t:.1} s after the save\n")),
        None => s.push_str(&format!(" · {:.1} s\n", report.duration_seconds)),
    }
    s.push_str(&format!("{}\n\n", describe_changes(changed)));
    s.push_str(&format!(
        "{}  exit {}\n",
        paint(verdict_color, &report.verdict.as_str().to_uppercase()),
        report.exit_code
    ));
    for r in &report.reasons {
        s.push_str(&format!("  {r}\n"));
    }
    let (new, resolved) = diff(previous.map_or(&[], |p| &p.findings), &report.findings);
    if !report.findings.is_empty() || !resolved.is_empty() {
        s.push('\n');
    }
    for f in &report.findings {
        let mark = match new.iter().any(|n| same(n, f)) && previous.is_some() {
            true => paint("1", " new"),
            false => String::new(),
        };
        let blocking = if f.blocking { "" } else { " (not blocking)" };
        s.push_str(&format!(
            "  {} {}{blocking}{mark}\n",
            f.kind,
            f.tests.join(", ")
        ));
        if let Some(repro) = &f.repro {
            s.push_str(&format!("      {repro}\n"));
        }
    }
    for f in resolved {
        s.push_str(&format!(
            "  {} {} {}\n",
            paint("2", "resolved:"),
            f.kind,
            f.tests.join(", ")
        ));
    }
    s.push_str(&format!(
        "\n{} tests, {} pytest processes, {} of {} steps cached; watching {watched} \
         directories (Ctrl-C to stop)\n",
        report.tests.len(),
        report.pytest_processes,
        report.graph.cached,
        report.graph.nodes,
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::finding::FindingKind;

    fn finding(kind: FindingKind, test: &str) -> Finding {
        Finding {
            kind,
            tests: vec![test.into()],
            message: String::new(),
            repro: None,
            introduced: true,
            blocking: true,
            id: String::new(),
            file: None,
            line: None,
        }
    }

    #[test]
    fn new_and_resolved_findings_compare_kind_and_tests() {
        let before = [
            finding(FindingKind::OrderDependent, "t::a"),
            finding(FindingKind::Polluter, "t::b"),
        ];
        let now = [
            finding(FindingKind::OrderDependent, "t::a"),
            finding(FindingKind::OrderDependent, "t::b"),
        ];
        let (new, resolved) = diff(&before, &now);
        assert_eq!(new.len(), 1);
        assert_eq!(
            (new[0].kind, new[0].tests[0].as_str()),
            (FindingKind::OrderDependent, "t::b")
        );
        assert_eq!(resolved.len(), 1);
        assert_eq!(resolved[0].kind, FindingKind::Polluter);
    }

    #[test]
    fn a_report_line_carries_the_diff_and_the_report() {
        let previous = AuditReport {
            findings: vec![finding(FindingKind::OrderDependent, "t::a")],
            ..AuditReport::default()
        };
        let report = AuditReport {
            verdict: Verdict::Pass,
            ..AuditReport::default()
        };
        let changed = ["tests/test_a.py".to_owned()];
        let line = json_line(&Shown::Report {
            audit: 2,
            changed: &changed,
            report: &report,
            previous: Some(&previous),
            seconds_since_change: Some(0.5),
            watched: 3,
        });
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["type"], "report");
        assert_eq!(v["audit"], 2);
        assert_eq!(v["data"]["verdict"], "pass");
        assert_eq!(v["resolved"][0]["tests"][0], "t::a");
        assert_eq!(v["new"].as_array().unwrap().len(), 0);
        let text = compact(2, &changed, &report, Some(&previous), None, 3, false);
        assert!(text.contains("PASS  exit 0"), "{text}");
        assert!(text.contains("resolved: order-dependent t::a"), "{text}");
    }

    #[test]
    fn in_a_terminal_each_report_clears_the_previous_screen_and_elsewhere_it_does_not() {
        let report = AuditReport {
            verdict: Verdict::Reject,
            exit_code: 1,
            findings: vec![finding(FindingKind::Polluter, "t::b")],
            ..AuditReport::default()
        };
        let shown = Shown::Report {
            audit: 3,
            changed: &[],
            report: &report,
            previous: None,
            seconds_since_change: Some(1.5),
            watched: 2,
        };
        let terminal = Screen {
            json: false,
            terminal: true,
            color: false,
        };
        let text = terminal.human(&shown);
        assert!(text.starts_with("\x1b[H\x1b[2J\x1b[3J"), "{text:?}");
        assert!(text.contains("audit 3"), "{text}");
        assert!(text.contains("1.5 s after the save"), "{text}");
        assert!(text.contains("REJECT  exit 1"), "{text}");
        assert!(text.contains("polluter t::b"), "{text}");
        let piped = Screen {
            terminal: false,
            ..terminal
        };
        let text = piped.human(&shown);
        assert!(
            !text.contains('\x1b'),
            "no escapes when not a terminal: {text:?}"
        );
    }
}
