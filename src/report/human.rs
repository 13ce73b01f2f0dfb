//! The terminal summary of an audit: the verdict first, then the evidence a reviewer acts on.
//!
//! The helpers that count findings and lay out outcomes live here and are shared by the other
//! renderers, so that every format says the same thing in the same words; the words themselves
//! are the report's enums' (`FindingKind::noun`, `Bucket::rank`, `Outcome::letter`).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::{AuditReport, Column, Finding, ScopeMode, TestReport};
use crate::audit::finding::FindingKind;
use crate::audit::freeze::Entry;
use crate::audit::triage::{Bucket, Signal};
use crate::audit::verdict::Verdict;

/// Lines are wrapped to this width where the text allows it (node ids and commands are not cut).
const WIDTH: usize = 100;

/// Renders the human summary; `color` adds ANSI colors (the caller decides from `NO_COLOR` and
/// whether stdout is a terminal).
pub(crate) fn render(r: &AuditReport, color: bool) -> String {
    let paint = Paint(color);
    let mut out = String::new();

    // The verdict is one line when it fits, else the non-blocking part goes on its own line.
    let (head, other) = verdict_parts(r);
    let line = verdict_line(r);
    if line.chars().count() <= WIDTH || other.is_empty() {
        out.push_str(&paint.verdict(r.verdict, &line));
    } else {
        out.push_str(&paint.verdict(r.verdict, &head));
        out.push_str("\n  ");
        out.push_str(&paint.verdict(r.verdict, &format!("not blocking: {other}")));
    }
    out.push('\n');
    for reason in &r.reasons {
        wrap_into(&mut out, reason, "  - ", "    ");
    }
    if has_context(r) {
        out.push_str(&context_line(r));
        out.push('\n');
    }
    if !r.ran() {
        return trim_trailing(&out);
    }

    let (introduced, debt): (Vec<&Finding>, Vec<&Finding>) =
        r.findings.iter().partition(|f| f.introduced);
    if !introduced.is_empty() {
        section(&mut out, &paint, "findings");
        findings_into(&mut out, r, &introduced, true);
    }
    if !debt.is_empty() {
        let title = if r.strict {
            "known debt (the base has these too; --strict makes them block)"
        } else {
            "known debt (the base has these too; not blocking)"
        };
        section(&mut out, &paint, title);
        findings_into(&mut out, r, &debt, false);
    }

    tests_into(&mut out, &paint, r);
    pairs_into(&mut out, &paint, r);
    fixtures_into(&mut out, &paint, r);
    budget_into(&mut out, &paint, r);
    // Freeze, lock and cache close the report as one block of short lines.
    out.push('\n');
    freeze_into(&mut out, r);
    lock_into(&mut out, r);
    if let Some(line) = scope_line(r) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&graph_line(r));
    out.push('\n');
    trim_trailing(&out)
}

/// `REJECT (exit 1): 1 order-dependent test, 1 polluter; not blocking: 1 flaky test`.
pub(crate) fn verdict_line(r: &AuditReport) -> String {
    let (mut line, other) = verdict_parts(r);
    if !other.is_empty() {
        let _ = write!(line, "; not blocking: {other}");
    }
    line
}

/// The verdict with its blocking findings, and the counts of the non-blocking ones.
fn verdict_parts(r: &AuditReport) -> (String, String) {
    let mut line = format!(
        "{} (exit {})",
        r.verdict.as_str().to_uppercase(),
        r.exit_code
    );
    let blocking = finding_counts(r.findings.iter().filter(|f| f.blocking));
    if !blocking.is_empty() {
        let _ = write!(line, ": {blocking}");
    }
    (
        line,
        finding_counts(r.findings.iter().filter(|f| !f.blocking)),
    )
}

/// What the shuffled orders of a scoped audit ran: `scope: the shuffled orders ran 60 of 2000
/// tests (50 affected by the patch, 1 state writer), 1940 carried; the file-order and reversed
/// runs 60, the rest from the base`, or `scope: full orders, 2000 tests, all affected by the
/// patch (REASON)`; nothing for an audit that is not scoped.
pub(crate) fn scope_line(r: &AuditReport) -> Option<String> {
    let s = r.scope.as_ref()?;
    if r.seeds.len() < 2 {
        return None;
    }
    let affected = match s.affected {
        Some(n) => format!("{n} affected by the patch"),
        None => "all affected by the patch".to_string(),
    };
    let whole = s.runs.get(&crate::audit::order::OrderLabel::File).copied();
    let whole = match whole {
        Some(n) if n < s.tests => {
            format!("; the file-order and reversed runs {n}, the rest from the base")
        }
        _ => String::new(),
    };
    Some(match s.mode {
        ScopeMode::Off => return None,
        ScopeMode::Full => format!(
            "scope: full orders, {}, {affected} ({})",
            plural(s.tests, "test", "tests"),
            s.reason.as_deref().unwrap_or("--full")
        ),
        ScopeMode::Scoped => format!(
            "scope: the shuffled orders ran {} of {} ({affected}, {}), {} carried{whole}",
            s.tests - s.carried.len() as u64,
            plural(s.tests, "test", "tests"),
            plural(s.writers.len() as u64, "state writer", "state writers"),
            s.carried.len()
        ),
    })
}

/// `graph: 23 nodes, 3 executed, 20 cached; 17 pytest processes`.
pub(crate) fn graph_line(r: &AuditReport) -> String {
    format!(
        "graph: {} nodes, {} executed, {} cached; {}",
        r.graph.nodes,
        r.graph.executed,
        r.graph.cached,
        plural(
            u64::from(r.pytest_processes),
            "pytest process",
            "pytest processes"
        )
    )
}

/// The legend of [`crate::pytest::result::Outcome::letter`].
pub(crate) const OUTCOME_LEGEND: &str =
    "P passed, F failed, E error, S skipped, C crashed, T timeout, L limit, X xfailed/xpassed";

/// A test's outcomes in run order, `0:P rev:F 1:P 2:F`; orders the test did not run in are left
/// out, and outcomes under labels missing from `orders` follow in label order.
pub(crate) fn outcomes_compact(r: &AuditReport, t: &TestReport) -> String {
    columns(r, t)
        .into_iter()
        .map(|c| format!("{c}:{}", t.outcomes[&c].letter()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The columns a test has outcomes in: the report's orders in run order, then any column only
/// the test has (the nio order's second runs).
pub(crate) fn columns(r: &AuditReport, t: &TestReport) -> Vec<Column> {
    let mut out: Vec<Column> = r
        .orders
        .iter()
        .map(|l| Column::Order(*l))
        .filter(|c| t.outcomes.contains_key(c))
        .collect();
    let extra: Vec<Column> = t
        .outcomes
        .keys()
        .filter(|c| !out.contains(c))
        .copied()
        .collect();
    out.extend(extra);
    out
}

/// Finding kinds in order of first appearance, so that grouping keeps the audit's ordering.
pub(crate) fn kinds_in_order(findings: &[&Finding]) -> Vec<FindingKind> {
    let mut kinds: Vec<FindingKind> = Vec::new();
    for f in findings {
        if !kinds.contains(&f.kind) {
            kinds.push(f.kind);
        }
    }
    kinds
}

/// `1 order-dependent test, 2 polluters` for the given findings, by kind in order of appearance.
pub(crate) fn finding_counts<'a>(findings: impl Iterator<Item = &'a Finding>) -> String {
    let findings: Vec<&Finding> = findings.collect();
    kinds_in_order(&findings)
        .into_iter()
        .map(|kind| {
            let n = findings.iter().filter(|f| f.kind == kind).count() as u64;
            let (one, many) = kind.noun();
            plural(n, one, many)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Replaces control characters so that a test's message cannot move the cursor, color the
/// terminal or break a line-based format; tabs become spaces.
pub(crate) fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\t' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// The first non-empty line of a message, cleaned and cut to `max` characters.
pub(crate) fn first_line(s: &str, max: usize) -> String {
    let line = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line = clean(line);
    let more = s.lines().filter(|l| !l.trim().is_empty()).count() > 1;
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{}…", cut.trim_end())
    } else if more {
        format!("{line} …")
    } else {
        line
    }
}

struct Paint(bool);

impl Paint {
    fn verdict(&self, verdict: Verdict, text: &str) -> String {
        if !self.0 {
            return text.to_owned();
        }
        // Green for a pass, yellow when nothing could be judged on the merits (a breached
        // budget, drifted inputs), red when the patch or the ledger is at fault.
        let code = match verdict {
            Verdict::Pass => "32",
            Verdict::Unverified | Verdict::Drift => "33",
            Verdict::Reject | Verdict::ExpiredFreeze | Verdict::Error => "31",
        };
        format!("\x1b[1;{code}m{text}\x1b[0m")
    }

    fn bold(&self, text: &str) -> String {
        if self.0 {
            format!("\x1b[1m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn warn(&self, text: &str) -> String {
        if self.0 {
            format!("\x1b[33m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

fn section(out: &mut String, paint: &Paint, title: &str) {
    out.push('\n');
    out.push_str(&paint.bold(title));
    out.push('\n');
}

/// Whether the report names what was compared; a usage error stops before it knows.
pub(crate) fn has_context(r: &AuditReport) -> bool {
    !(r.base.rev.is_empty() && r.head.rev.is_empty() && r.orders.is_empty())
}

fn context_line(r: &AuditReport) -> String {
    let side = |s: &super::Revision| match &s.commit {
        Some(c) => format!(
            "{} ({})",
            clean(&s.rev),
            clean(&c.chars().take(12).collect::<String>())
        ),
        None => clean(&s.rev),
    };
    let orders: Vec<String> = r.orders.iter().map(|o| o.to_string()).collect();
    let mut line = format!("base {} → head {}", side(&r.base), side(&r.head));
    if !orders.is_empty() {
        let _ = write!(line, "; orders {}", orders.join(" "));
    }
    if r.strict {
        line.push_str("; --strict");
    }
    if let Some(python) = &r.interpreter {
        let _ = write!(line, "; python {}", clean(python));
    }
    if let Some(c) = &r.containment_detail {
        let _ = write!(line, "; contained by {}", clean(&c.summary()));
    }
    line
}

fn findings_into(out: &mut String, r: &AuditReport, findings: &[&Finding], introduced: bool) {
    for kind in kinds_in_order(findings) {
        let _ = writeln!(out, "  {kind}");
        for f in findings.iter().filter(|f| f.kind == kind) {
            for t in &f.tests {
                let _ = writeln!(out, "    {}", clean(t));
            }
            // Without tests the message is the finding's headline; with them it is evidence.
            let (first, rest) = if f.tests.is_empty() {
                ("    ", "      ")
            } else {
                ("      ", "      ")
            };
            let mut message = clean_lines(&f.message);
            if introduced && !f.blocking {
                message.push_str(" (not blocking)");
            } else if !introduced && f.blocking {
                message.push_str(" (blocking)");
            }
            wrap_into(out, message.trim(), first, rest);
            if let Some((base, head)) = r.edit_behind(f) {
                let _ = writeln!(out, "{rest}edited:");
                for (sign, line) in base
                    .iter()
                    .map(|l| ('-', l))
                    .chain(head.iter().map(|l| ('+', l)))
                {
                    let _ = writeln!(out, "{rest}  {sign} {}", clean(line));
                }
            }
            match f
                .repro
                .as_deref()
                .map(|repro| (repro, r.pair_proving(repro)))
            {
                Some((_, Some(n))) => {
                    let _ = writeln!(out, "{rest}proof: pair {n} (its repro is under pairs)");
                }
                Some((repro, None)) => {
                    let _ = writeln!(out, "{rest}repro: {}", clean(repro));
                }
                None => {}
            }
            for t in &f.tests {
                if let Some(entry) = r.freeze.suggested.get(t) {
                    let _ = writeln!(
                        out,
                        "{rest}suggested freeze entry: {}",
                        freeze_entry(t, entry)
                    );
                }
            }
        }
    }
}

/// A ledger entry as it would be pasted into `.fixgate/freeze.json` (keys sorted, as the
/// ledger writes them).
pub(crate) fn freeze_entry(nodeid: &str, entry: &Entry) -> String {
    let key = serde_json::Value::String(nodeid.to_owned());
    let entry = serde_json::to_value(entry).unwrap_or_default();
    clean(&format!("{key}: {entry}"))
}

fn tests_into(out: &mut String, paint: &Paint, r: &AuditReport) {
    if r.tests.is_empty() {
        return;
    }
    let mut counts: Vec<(&str, usize)> = Vec::new();
    let mut buckets: Vec<Bucket> = r.tests.iter().map(|t| t.bucket).collect();
    buckets.sort_by_key(|b| b.rank());
    buckets.dedup();
    for b in buckets {
        counts.push((b.as_str(), r.tests.iter().filter(|t| t.bucket == b).count()));
    }
    section(out, paint, &format!("tests: {}", r.tests.len()));
    let width = counts
        .iter()
        .map(|(b, _)| b.chars().count())
        .max()
        .unwrap_or(0);
    let nw = counts
        .iter()
        .map(|(_, n)| n.to_string().len())
        .max()
        .unwrap_or(1);
    for (bucket, n) in &counts {
        let _ = writeln!(out, "  {bucket:<width$}  {n:>nw$}");
    }

    let mut unstable: Vec<&TestReport> = r
        .tests
        .iter()
        .filter(|t| t.bucket != Bucket::Stable)
        .collect();
    if unstable.is_empty() {
        return;
    }
    unstable.sort_by_key(|t| t.bucket.rank());
    let rows: Vec<(&str, String, &TestReport)> = unstable
        .iter()
        .map(|t| (t.bucket.as_str(), outcomes_compact(r, t), *t))
        .collect();
    let bw = rows
        .iter()
        .map(|(b, _, _)| b.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    let ow = rows
        .iter()
        .map(|(_, o, _)| o.chars().count())
        .max()
        .unwrap_or(0)
        .max(8);
    let indent = " ".repeat(2 + bw + 2 + ow + 2);
    out.push('\n');
    let _ = writeln!(out, "  {:<bw$}  {:<ow$}  test", "bucket", "outcomes");
    for (bucket, outcomes, t) in rows {
        let _ = writeln!(
            out,
            "  {bucket:<bw$}  {outcomes:<ow$}  {}",
            clean(&t.nodeid)
        );
        let tags = test_tags(t);
        if !tags.is_empty() {
            wrap_into(out, &tags.join(", "), &indent, &indent);
        }
        if let Some(message) = &t.message {
            let room = WIDTH.saturating_sub(indent.len()).max(40);
            let _ = writeln!(out, "{indent}{}", first_line(message, room));
        }
    }
    let _ = writeln!(out, "  ({OUTCOME_LEGEND})");
}

/// The signals of a test, plus the facts the report carries beside them when the signals do not
/// already name them.
pub(crate) fn test_tags(t: &TestReport) -> Vec<String> {
    let mut tags: Vec<String> = t.signals.iter().map(|s| clean(&s.to_string())).collect();
    for g in &t.dirty_groups {
        if !t.signals.contains(&Signal::LeaseViolation(g.clone())) {
            tags.push(format!("dirty group {}", clean(g)));
        }
    }
    if t.edited_by_patch && !t.signals.contains(&Signal::EditedByPatch) {
        tags.push("edited by the patch".to_owned());
    }
    if !t.introduced {
        tags.push("pre-existing".to_owned());
    }
    tags
}

fn pairs_into(out: &mut String, paint: &Paint, r: &AuditReport) {
    if r.pairs.is_empty() {
        return;
    }
    section(out, paint, "pairs");
    for (n, p) in r.pairs.iter().enumerate() {
        let mut head = format!(
            "  {}. {}  {} → {}",
            n + 1,
            p.kind.as_str(),
            clean(&p.polluter),
            clean(&p.victim)
        );
        let _ = write!(
            head,
            " ({})",
            plural(u64::from(p.search_runs), "search run", "search runs")
        );
        if !p.introduced {
            head.push_str(" (pre-existing)");
        }
        out.push_str(&head);
        out.push('\n');
        if p.culprits.len() > 1 {
            let culprits: Vec<String> = p.culprits.iter().map(|c| clean(c)).collect();
            wrap_into(
                out,
                &format!("together: {}", culprits.join(", ")),
                "    ",
                "      ",
            );
        }
        if let Some(why) = &p.unexplained {
            wrap_into(
                out,
                &format!("unexplained: {}", clean_lines(why)),
                "    ",
                "      ",
            );
        }
        if !p.repro.is_empty() {
            let _ = writeln!(out, "    repro: {}", clean(&p.repro));
        }
    }
}

fn fixtures_into(out: &mut String, paint: &Paint, r: &AuditReport) {
    let fx = &r.fixtures;
    if fx.changed.is_empty() && fx.coupled.is_empty() && fx.replay.is_empty() {
        section(out, paint, "fixtures: unchanged");
        return;
    }
    section(
        out,
        paint,
        &format!(
            "fixtures: {} changed, {} coupled",
            fx.changed.len(),
            plural(fx.coupled.len() as u64, "test", "tests")
        ),
    );
    let cw = fx
        .changed
        .iter()
        .map(|c| c.change.as_str().len())
        .max()
        .unwrap_or(0);
    for c in &fx.changed {
        let _ = writeln!(
            out,
            "  {:<cw$}  {}  (group {})",
            c.change.as_str(),
            clean(&c.path),
            clean(&c.group)
        );
    }
    if !fx.replay.is_empty() {
        out.push_str("  replay on base fixtures\n");
        for rp in &fx.replay {
            let _ = writeln!(
                out,
                "    {}: head {}, base {} → {}",
                clean(&rp.nodeid),
                rp.head.as_str(),
                rp.base.map_or("not replayed", |b| b.as_str()),
                rp.reading.as_str()
            );
        }
    }
}

fn budget_into(out: &mut String, paint: &Paint, r: &AuditReport) {
    let b = &r.budget;
    let names: BTreeSet<&String> = b.limits.keys().chain(b.used.keys()).collect();
    if names.is_empty() && b.breaches.is_empty() {
        return;
    }
    let title = match b.breaches.len() {
        0 => "budget: within limits".to_owned(),
        n => format!("budget: {}", plural(n as u64, "breach", "breaches")),
    };
    section(out, paint, &title);
    let nw = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    for name in names {
        let used = b
            .used
            .get(name)
            .map_or_else(|| "-".to_owned(), u64::to_string);
        let limit = b
            .limits
            .get(name)
            .map_or_else(|| "none".to_owned(), u64::to_string);
        let _ = writeln!(out, "  {:<nw$}  used {used}, limit {limit}", clean(name));
    }
    for breach in &b.breaches {
        let mut text = String::new();
        wrap_into(&mut text, &clean_lines(breach), "  breach: ", "    ");
        out.push_str(&paint.warn(text.trim_end()));
        out.push('\n');
    }
}

fn freeze_into(out: &mut String, r: &AuditReport) {
    let f = &r.freeze;
    let _ = writeln!(
        out,
        "freeze: {} active, {} expired, {} added by the patch",
        f.active.len(),
        f.expired.len(),
        f.added_by_patch.len()
    );
    for (label, ids) in [
        ("expired", &f.expired),
        ("added by the patch", &f.added_by_patch),
        ("active", &f.active),
    ] {
        for id in ids {
            let _ = writeln!(out, "  {label}: {}", clean(id));
        }
    }
    // Suggestions for tests that no finding names would otherwise never be shown.
    let shown: BTreeSet<&String> = r.findings.iter().flat_map(|f| &f.tests).collect();
    for (id, entry) in &f.suggested {
        if !shown.contains(id) {
            let _ = writeln!(out, "  suggested: {}", freeze_entry(id, entry));
        }
    }
}

fn lock_into(out: &mut String, r: &AuditReport) {
    let l = &r.lock;
    let name = l.file.as_deref().map(clean);
    let lock = match &name {
        Some(name) => format!("lock {name}"),
        None => "lock".to_owned(),
    };
    let mut title = match l.drift.len() {
        0 => format!("{lock}: no drift"),
        n => format!(
            "{lock}: {}",
            plural(n as u64, "drifted file", "drifted files")
        ),
    };
    if l.changed_by_patch {
        title.push_str(&format!(
            "; {} changed by the patch",
            name.as_deref().unwrap_or("the lock")
        ));
    }
    out.push_str(&title);
    out.push('\n');
    let cw = l
        .drift
        .iter()
        .map(|d| d.change.as_str().len())
        .max()
        .unwrap_or(0);
    for d in &l.drift {
        let _ = writeln!(out, "  {:<cw$}  {}", d.change.as_str(), clean(&d.path));
    }
}

/// Joins the lines of a multi-line text with spaces, cleaned.
fn clean_lines(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(clean)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Word-wraps `text` to [`WIDTH`], the first line after `first`, the others after `rest`.
/// Words longer than a line (node ids, paths) stay whole.
fn wrap_into(out: &mut String, text: &str, first: &str, rest: &str) {
    let text = clean_lines(text);
    let mut line = first.to_owned();
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = line.chars().count();
        if !empty && len + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = rest.to_owned();
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
}

fn trim_trailing(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for line in s.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::audit::bisect::PairKind;
    use crate::audit::freeze::Date;
    use crate::audit::order::OrderLabel;
    use crate::audit::pair::Found;
    use crate::audit::replay::Reading;
    use crate::delta::Change;
    use crate::pytest::result::Outcome::{self, Failed, Passed, Skipped};
    use crate::report::{
        Budget, ChangedFixture, Fixtures, Freeze, GraphSummary, PairReport, ReplayReport, Revision,
    };

    const ORDERS: [OrderLabel; 4] = [
        OrderLabel::File,
        OrderLabel::Reversed,
        OrderLabel::Seed(1),
        OrderLabel::Seed(2),
    ];

    fn outcomes(outcomes: [Outcome; 4]) -> BTreeMap<Column, Outcome> {
        ORDERS
            .iter()
            .zip(outcomes)
            .map(|(l, o)| (Column::Order(*l), o))
            .collect()
    }

    fn date(text: &str) -> Date {
        Date::parse(text).expect("a date")
    }

    /// A reject: an order-dependent victim whose assertion the patch edited and its polluter, a
    /// pre-existing flaky test, a redefined replay and a new-skip budget breach.
    pub(crate) fn sample() -> AuditReport {
        let cart = "tests/test_pricing.py";
        let victim = format!("{cart}::test_tax");
        let polluter = format!("{cart}::test_add_item");
        let flaky = "tests/test_net.py::test_fetch[a|b]".to_owned();
        let parse = "tests/test_parse.py::test_parse_total".to_owned();
        let repro = format!("python -m pytest -p no:randomly {polluter} {victim}");
        let mut suggested = BTreeMap::new();
        suggested.insert(
            flaky.clone(),
            Entry {
                frozen_on: date("2026-04-01"),
                expires: date("2026-05-01"),
                owner: "TODO".into(),
                reason: "flaky: outcome differs between reruns of order 1".into(),
            },
        );
        AuditReport {
            schema: crate::report::SCHEMA,
            verdict: Verdict::Reject,
            exit_code: 1,
            reasons: vec![
                format!("{victim} is order-dependent and the patch edited its assertion"),
                format!("{parse} was redefined: it passes on head fixtures and fails on base ones"),
                "the budget was breached: 1 new skip (limit 0)".into(),
            ],
            base: Revision {
                rev: "main".into(),
                commit: Some("1a2b3c4d5e6f7a8b9c0d".into()),
            },
            head: Revision {
                rev: "worktree".into(),
                commit: None,
            },
            seeds: vec![1, 2],
            orders: ORDERS.to_vec(),
            tests: vec![
                TestReport {
                    nodeid: polluter.clone(),
                    bucket: Bucket::Polluter,
                    signals: vec![Signal::Polluter],
                    outcomes: outcomes([Passed; 4]),
                    introduced: true,
                    file: Some(cart.into()),
                    line: Some(4),
                    ..Default::default()
                },
                TestReport {
                    nodeid: victim.clone(),
                    bucket: Bucket::OrderDependent,
                    signals: vec![Signal::Victim, Signal::EditedByPatch],
                    outcomes: outcomes([Passed, Failed, Passed, Failed]),
                    edited_by_patch: true,
                    introduced: true,
                    file: Some(cart.into()),
                    line: Some(12),
                    message: Some("assert 10.8 == 10.0\n +  where 10.8 = total()".into()),
                    ..Default::default()
                },
                TestReport {
                    nodeid: flaky.clone(),
                    bucket: Bucket::Flaky,
                    outcomes: outcomes([Passed, Passed, Failed, Passed]),
                    introduced: false,
                    file: Some("tests/test_net.py".into()),
                    line: Some(7),
                    message: Some("ConnectionError: <urlopen error> & `timeout`".into()),
                    ..Default::default()
                },
                TestReport {
                    nodeid: parse.clone(),
                    bucket: Bucket::Stable,
                    outcomes: outcomes([Passed; 4]),
                    introduced: true,
                    ..Default::default()
                },
                TestReport {
                    nodeid: "tests/test_parse.py::test_new_format".into(),
                    bucket: Bucket::Skipped,
                    signals: Vec::new(),
                    outcomes: outcomes([Skipped; 4]),
                    introduced: true,
                    file: Some("tests/test_parse.py".into()),
                    line: Some(30),
                    ..Default::default()
                },
            ],
            pairs: vec![PairReport {
                kind: PairKind::Polluter,
                polluter: polluter.clone(),
                victim: victim.clone(),
                culprits: vec![polluter.clone()],
                repro: repro.clone(),
                introduced: true,
                search_runs: 4,
                found_by: Found::Searched,
                verify_runs: 5,
                unexplained: None,
            }],
            findings: vec![
                Finding {
                    kind: FindingKind::OrderDependent,
                    tests: vec![victim.clone()],
                    message: format!(
                        "fails after {polluter} and passes alone; the patch edited its \
                         assertion to the polluted value instead of fixing the isolation"
                    ),
                    repro: Some(repro.clone()),
                    introduced: true,
                    blocking: true,
                    id: String::new(),
                    file: None,
                    line: None,
                },
                Finding {
                    kind: FindingKind::Polluter,
                    tests: vec![polluter.clone(), victim.clone()],
                    message: "leaves the module-level cart non-empty".into(),
                    repro: Some(repro),
                    introduced: true,
                    blocking: true,
                    id: String::new(),
                    file: None,
                    line: None,
                },
                Finding {
                    kind: FindingKind::Redefined,
                    tests: vec![parse.clone()],
                    message: "passes on head fixtures, fails on base fixtures: the patch moved \
                              the answer key (tests/fixtures/parse/expected.json)"
                        .into(),
                    repro: None,
                    introduced: true,
                    blocking: true,
                    id: String::new(),
                    file: None,
                    line: None,
                },
                Finding {
                    kind: FindingKind::NewSkip,
                    tests: vec!["tests/test_parse.py::test_new_format".into()],
                    message: "1 new skip, limit 0: @pytest.mark.skip(reason=\"later\")".into(),
                    repro: None,
                    introduced: true,
                    blocking: true,
                    id: String::new(),
                    file: None,
                    line: None,
                },
                Finding {
                    kind: FindingKind::Flaky,
                    tests: vec![flaky.clone()],
                    message: "outcome differs between reruns of order 1,\nrun 2: \"passed\"".into(),
                    repro: Some(format!("python -m pytest -p no:randomly '{flaky}'")),
                    introduced: false,
                    blocking: false,
                    id: String::new(),
                    file: None,
                    line: None,
                },
            ],
            fixtures: Fixtures {
                changed: vec![ChangedFixture {
                    path: "tests/fixtures/parse/expected.json".into(),
                    group: "parse".into(),
                    change: Change::Modified,
                }],
                coupled: vec![parse.clone()],
                replay: vec![ReplayReport {
                    nodeid: parse,
                    head: Passed,
                    base: Some(Failed),
                    reading: Reading::Redefined,
                    files: Vec::new(),
                }],
            },
            budget: Budget {
                limits: [("new-skips".to_owned(), 0), ("seconds".to_owned(), 600)].into(),
                used: [("new-skips".to_owned(), 1), ("seconds".to_owned(), 12)].into(),
                breaches: vec!["new-skips: 1 new skip, limit 0".into()],
            },
            freeze: Freeze {
                suggested,
                ..Default::default()
            },
            graph: GraphSummary {
                nodes: 23,
                executed: 3,
                cached: 20,
                ..Default::default()
            },
            pytest_processes: 17,
            duration_seconds: 12.5,
            ..Default::default()
        }
    }

    #[test]
    fn verdict_line_counts_blocking_and_other_findings() {
        let r = sample();
        assert_eq!(
            verdict_line(&r),
            "REJECT (exit 1): 1 order-dependent test, 1 polluter, 1 redefined test, \
             1 new skip; not blocking: 1 flaky test"
        );
        // Too wide for one line: the non-blocking part moves to the next.
        let text = render(&r, false);
        assert!(text.starts_with(
            "REJECT (exit 1): 1 order-dependent test, 1 polluter, 1 redefined test, \
             1 new skip\n  not blocking: 1 flaky test\n"
        ));
    }

    #[test]
    fn pass_without_findings_is_a_bare_verdict() {
        let r = AuditReport {
            verdict: Verdict::Pass,
            graph: crate::report::GraphSummary {
                nodes: 12,
                ..Default::default()
            },
            ..Default::default()
        };
        let text = render(&r, false);
        assert!(
            text.starts_with("PASS (exit 0)\n\nfixtures: unchanged\n"),
            "{text}"
        );
        // An audit that never ran (an error before it, a --timeout) is its verdict and reasons.
        let stopped =
            crate::report::assemble::timed_out("main", "HEAD", Duration::from_secs(90), true);
        assert_eq!(
            render(&stopped, false),
            "UNVERIFIED (exit 4)\n  - the --timeout of 1m30s passed before its audit finished: the \
             runs were stopped, what finished is\n    in the cache, and an audit with a later \
             deadline starts from it\nbase main → head HEAD\n"
        );
    }

    #[test]
    fn findings_carry_evidence_and_repro() {
        let text = render(&sample(), false);
        assert!(
            text.contains("\nfindings\n  order-dependent\n    tests/test_pricing.py::test_tax\n")
        );
        // The pair that proves it has the repro; the finding points to it, once.
        assert!(text.contains("      proof: pair 1 (its repro is under pairs)\n"));
        assert_eq!(
            text.matches(
                "repro: python -m pytest -p no:randomly tests/test_pricing.py::test_add_item"
            )
            .count(),
            1,
            "{text}"
        );
    }

    /// A finding about an edited test leads with the edit (issue 54): the lines only the base
    /// has, then the lines only the head has.
    #[test]
    fn an_edited_test_finding_shows_the_edited_lines() {
        let mut r = sample();
        let id = "tests/test_pricing.py::test_tax";
        r.findings.push(Finding {
            kind: FindingKind::RedefinedTest,
            tests: vec![id.into()],
            message: "passes with the head's test code and fails with the base's".into(),
            repro: None,
            introduced: true,
            blocking: true,
            id: String::new(),
            file: None,
            line: None,
        });
        r.source_replay.push(crate::report::SourceReplay {
            nodeid: id.into(),
            renamed_from: None,
            head: Passed,
            base_test_code: Some(Outcome::Failed),
            reading: crate::audit::source_replay::Reading::Redefined,
            base_lines: vec!["assert total() == 10.0".into()],
            head_lines: vec!["assert total() == 10.8".into()],
        });
        let text = render(&r, false);
        assert!(
            text.contains(
                "the base's\n      edited:\n        - assert total() == 10.0\n        + \
                 assert total() == 10.8\n"
            ),
            "{text}"
        );
        // Only the finding whose cause is the edit shows it.
        assert_eq!(text.matches("edited:").count(), 1, "{text}");
    }

    #[test]
    fn pre_existing_findings_are_known_debt_with_a_freeze_entry() {
        let text = render(&sample(), false);
        let debt = text.find("known debt").expect("a known debt section");
        let flaky = text.find("  flaky\n").unwrap();
        assert!(flaky > debt);
        assert!(text.contains(
            "      suggested freeze entry: \"tests/test_net.py::test_fetch[a|b]\": {\"expires\""
        ));
        // Multi-line messages are folded into one wrapped paragraph.
        assert!(text.contains("reruns of order 1, run 2: \"passed\""));
    }

    #[test]
    fn bucket_table_lists_unstable_tests_with_outcomes() {
        let text = render(&sample(), false);
        assert!(text.contains("\ntests: 5\n"));
        assert!(text.contains("  stable           1\n"));
        assert!(text
            .contains("  order-dependent  0:P rev:F 1:P 2:F  tests/test_pricing.py::test_tax\n"));
        assert!(text.contains("victim, edited-by-patch\n"));
        assert!(text.contains("assert 10.8 == 10.0 …\n"));
        assert!(text.contains(
            "  flaky            0:P rev:P 1:F 2:P  tests/test_net.py::test_fetch[a|b]\n"
        ));
        assert!(text.contains("pre-existing\n"));
        assert!(!text.contains("  stable           0:P"));
    }

    #[test]
    fn pairs_fixtures_budget_freeze_lock_and_graph() {
        let text = render(&sample(), false);
        assert!(text.contains(
            "\npairs\n  1. polluter  tests/test_pricing.py::test_add_item → \
             tests/test_pricing.py::test_tax (4 search runs)\n    repro: python -m pytest"
        ));
        assert!(text.contains("fixtures: 1 changed, 1 test coupled\n"));
        assert!(text.contains("  modified  tests/fixtures/parse/expected.json  (group parse)\n"));
        assert!(text.contains(
            "    tests/test_parse.py::test_parse_total: head passed, base failed → redefined\n"
        ));
        assert!(text.contains("budget: 1 breach\n  new-skips  used 1, limit 0\n"));
        assert!(text.contains("  breach: new-skips: 1 new skip, limit 0\n"));
        assert!(text.ends_with(
            "\n\nfreeze: 0 active, 0 expired, 0 added by the patch\nlock: no drift\n\
             graph: 23 nodes, 3 executed, 20 cached; 17 pytest processes\n"
        ));
    }

    #[test]
    fn plain_output_is_clean_and_fits() {
        let text = render(&sample(), false);
        assert!(!text.contains('\x1b'));
        for line in text.lines() {
            assert_eq!(line, line.trim_end(), "trailing whitespace: {line:?}");
            // Only unbreakable node ids and commands may run past the width.
            if line.chars().count() > WIDTH {
                assert!(
                    line.contains("::") || line.contains("pytest"),
                    "too wide: {line:?}"
                );
            }
        }
    }

    #[test]
    fn color_paints_the_verdict_line() {
        let text = render(&sample(), true);
        assert!(text.starts_with("\x1b[1;31mREJECT (exit 1)"));
        let pass = AuditReport {
            verdict: Verdict::Pass,
            ..Default::default()
        };
        assert!(render(&pass, true).starts_with("\x1b[1;32mPASS (exit 0)\x1b[0m\n"));
        let unverified = AuditReport {
            verdict: Verdict::Unverified,
            exit_code: 4,
            ..Default::default()
        };
        assert!(render(&unverified, true).starts_with("\x1b[1;33mUNVERIFIED (exit 4)"));
    }

    #[test]
    fn control_characters_in_messages_are_neutralised() {
        let mut r = sample();
        r.tests[1].message = Some("\x1b[2Jgone".into());
        let text = render(&r, false);
        assert!(!text.contains('\x1b'));
        assert!(text.contains("\\u{1b}[2Jgone"));
    }
}
