//! The audit as a pull-request comment (GitHub-flavored markdown): the verdict, the findings with
//! their reproduction commands, a test × order outcome grid, the fixture delta and the budget.
//!
//! Everything that comes from the tested repository (node ids, messages, paths) is escaped: node
//! ids go into code spans whose fence outruns any backticks inside, `|` is escaped in tables, and
//! free text has its markdown punctuation escaped so a message cannot format, link or mention.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::human::{
    clean, finding_counts, freeze_entry, graph_line, has_context, kinds_in_order, scope_line,
    test_tags, OUTCOME_LEGEND,
};
use super::{AuditReport, Column, Finding, TestReport};
use crate::audit::replay::Reading;
use crate::audit::triage::Bucket;

/// Renders the PR comment.
pub(crate) fn render(r: &AuditReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## fixgate: {} (exit {})\n",
        text(r.verdict.as_str()),
        r.exit_code
    );
    let blocking = finding_counts(r.findings.iter().filter(|f| f.blocking));
    let other = finding_counts(r.findings.iter().filter(|f| !f.blocking));
    let mut counts = Vec::new();
    if !blocking.is_empty() {
        counts.push(format!("**Blocking:** {}", text(&blocking)));
    }
    if !other.is_empty() {
        counts.push(format!("**Not blocking:** {}", text(&other)));
    }
    if !counts.is_empty() {
        let _ = writeln!(out, "{}\n", counts.join(" · "));
    }
    if has_context(r) {
        let _ = writeln!(out, "{}\n", context(r));
    }
    if !r.reasons.is_empty() {
        for reason in &r.reasons {
            let _ = writeln!(out, "- {}", text(reason));
        }
        out.push('\n');
    }
    if !r.ran() {
        return out;
    }

    let (introduced, debt): (Vec<&Finding>, Vec<&Finding>) =
        r.findings.iter().partition(|f| f.introduced);
    if !introduced.is_empty() {
        out.push_str("### Findings\n\n");
        findings_into(&mut out, r, &introduced, true);
    }
    if !debt.is_empty() {
        out.push_str("### Known debt\n\n");
        out.push_str(if r.strict {
            "The base has these too; `--strict` makes them block.\n\n"
        } else {
            "The base has these too; they do not block this patch.\n\n"
        });
        findings_into(&mut out, r, &debt, false);
    }

    grid_into(&mut out, r);
    pairs_into(&mut out, r);
    fixtures_into(&mut out, r);
    budget_into(&mut out, r);
    freeze_into(&mut out, r);

    if let Some(line) = scope_line(r) {
        let _ = writeln!(out, "<sub>{}</sub>\n", text(&line));
    }
    let _ = writeln!(out, "<sub>{}</sub>", text(&graph_line(r)));
    out
}

fn context(r: &AuditReport) -> String {
    let side = |s: &super::Revision| match &s.commit {
        Some(c) => format!(
            "{} ({})",
            code(&s.rev),
            code(&c.chars().take(12).collect::<String>())
        ),
        None => code(&s.rev),
    };
    let mut line = format!("base {} → head {}", side(&r.base), side(&r.head));
    if !r.orders.is_empty() {
        let orders: Vec<String> = r.orders.iter().map(|o| code(&o.to_string())).collect();
        let _ = write!(line, " · orders {}", orders.join(" "));
    }
    if r.strict {
        line.push_str(" · `--strict`");
    }
    line
}

fn findings_into(out: &mut String, r: &AuditReport, findings: &[&Finding], introduced: bool) {
    for kind in kinds_in_order(findings) {
        for f in findings.iter().filter(|f| f.kind == kind) {
            let tests: Vec<String> = f.tests.iter().map(|t| code(t)).collect();
            let mut line = format!("- **{}**", text(kind.as_str()));
            if !tests.is_empty() {
                let _ = write!(line, " {}", tests.join(", "));
            }
            let message = one_line(&f.message);
            if !message.is_empty() {
                let _ = write!(line, ": {}", text(&message));
            }
            if introduced && !f.blocking {
                line.push_str(" *(not blocking)*");
            } else if !introduced && f.blocking {
                line.push_str(" *(blocking)*");
            }
            out.push_str(&line);
            out.push('\n');
            if let Some((base, head)) = r.edit_behind(f) {
                let lines: Vec<String> = (base.iter().map(|l| format!("- {}", clean(l))))
                    .chain(head.iter().map(|l| format!("+ {}", clean(l))))
                    .collect();
                block_into(out, "diff", &lines.join("\n"), "  ");
            }
            match f
                .repro
                .as_deref()
                .map(|repro| (repro, r.pair_proving(repro)))
            {
                Some((_, Some(n))) => {
                    let _ = writeln!(out, "  Proof: pair {n} (its repro is under Pairs).");
                }
                Some((repro, None)) => block_into(out, "sh", &clean(repro), "  "),
                None => {}
            }
            for t in &f.tests {
                if let Some(entry) = r.freeze.suggested.get(t) {
                    out.push_str("  Suggested freeze entry:\n");
                    block_into(out, "json", &freeze_entry(t, entry), "  ");
                }
            }
        }
    }
    out.push('\n');
}

fn grid_into(out: &mut String, r: &AuditReport) {
    let mut rows: Vec<&TestReport> = r
        .tests
        .iter()
        .filter(|t| t.bucket != Bucket::Stable)
        .collect();
    if rows.is_empty() {
        return;
    }
    rows.sort_by_key(|t| t.bucket.rank());
    // Orders the report names first, then any label only a test carries.
    let mut orders: Vec<Column> = r.orders.iter().map(|l| Column::Order(*l)).collect();
    let extra: BTreeSet<Column> = rows
        .iter()
        .flat_map(|t| t.outcomes.keys())
        .filter(|o| !orders.contains(o))
        .copied()
        .collect();
    orders.extend(extra);

    let _ = writeln!(out, "### Outcomes by order\n");
    let _ = writeln!(
        out,
        "{} of {} tests are not stable. {OUTCOME_LEGEND}, - not run.\n",
        rows.len(),
        r.tests.len()
    );
    out.push_str("| test | bucket |");
    for o in &orders {
        let _ = write!(out, " {} |", cell(&o.to_string()));
    }
    out.push_str(" signals |\n|:--|:--|");
    for _ in &orders {
        out.push_str(":-:|");
    }
    out.push_str(":--|\n");
    for t in rows {
        let _ = write!(
            out,
            "| {} | {} |",
            code_cell(&t.nodeid),
            cell(t.bucket.as_str())
        );
        for o in &orders {
            let letter = t.outcomes.get(o).map_or("-", |v| v.letter());
            // Bold marks the cells that are not green, so the pattern reads at a glance.
            if matches!(letter, "P" | "S" | "X" | "-") {
                let _ = write!(out, " {letter} |");
            } else {
                let _ = write!(out, " **{letter}** |");
            }
        }
        let _ = writeln!(out, " {} |", cell(&test_tags(t).join(", ")));
    }
    out.push('\n');
}

fn pairs_into(out: &mut String, r: &AuditReport) {
    if r.pairs.is_empty() {
        return;
    }
    out.push_str("### Pairs\n\n");
    for (n, p) in r.pairs.iter().enumerate() {
        let mut line = format!(
            "{}. {} {} → victim {} ({} search run{})",
            n + 1,
            text(p.kind.as_str()),
            code(&p.polluter),
            code(&p.victim),
            p.search_runs,
            if p.search_runs == 1 { "" } else { "s" }
        );
        if !p.introduced {
            line.push_str(" *(pre-existing)*");
        }
        out.push_str(&line);
        out.push('\n');
        if p.culprits.len() > 1 {
            let culprits: Vec<String> = p.culprits.iter().map(|c| code(c)).collect();
            let _ = writeln!(out, "  Together: {}", culprits.join(", "));
        }
        if let Some(why) = &p.unexplained {
            let _ = writeln!(out, "  Unexplained: {}", text(&one_line(why)));
        }
        if !p.repro.is_empty() {
            block_into(out, "sh", &clean(&p.repro), "  ");
        }
    }
    out.push('\n');
}

fn fixtures_into(out: &mut String, r: &AuditReport) {
    let fx = &r.fixtures;
    if fx.changed.is_empty() && fx.replay.is_empty() && fx.coupled.is_empty() {
        return;
    }
    out.push_str("### Fixtures\n\n");
    if !fx.changed.is_empty() {
        out.push_str("| file | group | change |\n|:--|:--|:--|\n");
        for c in &fx.changed {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                code_cell(&c.path),
                cell(&c.group),
                cell(c.change.as_str())
            );
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "{} coupled test{} (reading a changed fixture).\n",
        fx.coupled.len(),
        if fx.coupled.len() == 1 { "" } else { "s" }
    );
    if !fx.replay.is_empty() {
        out.push_str("Replay on head code with base fixture bytes:\n\n");
        out.push_str("| test | head | base | reading |\n|:--|:--|:--|:--|\n");
        for rp in &fx.replay {
            let reading = if rp.reading == Reading::Redefined {
                format!("**{}**", cell(rp.reading.as_str()))
            } else {
                cell(rp.reading.as_str())
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {reading} |",
                code_cell(&rp.nodeid),
                cell(rp.head.as_str()),
                cell(rp.base.map_or("not replayed", |b| b.as_str()))
            );
        }
        out.push('\n');
    }
}

fn budget_into(out: &mut String, r: &AuditReport) {
    let b = &r.budget;
    if b.breaches.is_empty() {
        return;
    }
    out.push_str("### Budget breached\n\n");
    for breach in &b.breaches {
        let _ = writeln!(out, "- {}", text(&one_line(breach)));
    }
    out.push('\n');
    let names: BTreeSet<&String> = b.limits.keys().chain(b.used.keys()).collect();
    if !names.is_empty() {
        out.push_str("| budget | used | limit |\n|:--|--:|--:|\n");
        for name in names {
            let used = b
                .used
                .get(name)
                .map_or_else(|| "-".to_owned(), u64::to_string);
            let limit = b
                .limits
                .get(name)
                .map_or_else(|| "none".to_owned(), u64::to_string);
            let _ = writeln!(out, "| {} | {used} | {limit} |", cell(name));
        }
        out.push('\n');
    }
}

fn freeze_into(out: &mut String, r: &AuditReport) {
    let f = &r.freeze;
    let l = &r.lock;
    let mut lines = Vec::new();
    for (label, ids) in [
        ("Expired freeze entry", &f.expired),
        ("Freeze entry added by the patch", &f.added_by_patch),
    ] {
        for id in ids {
            lines.push(format!("- {label}: {}", code(id)));
        }
    }
    let lock = code(l.file.as_deref().unwrap_or(crate::lock::FILE_NAME));
    for d in &l.drift {
        lines.push(format!(
            "- Lock drift against {lock}: {} {}",
            text(d.change.as_str()),
            code(&d.path)
        ));
    }
    if l.changed_by_patch {
        lines.push(format!("- The patch changes {lock}."));
    }
    if lines.is_empty() && f.active.is_empty() {
        return;
    }
    out.push_str("### Freeze and lock\n\n");
    if !f.active.is_empty() {
        let _ = writeln!(
            out,
            "{} frozen test{} deselected.\n",
            f.active.len(),
            if f.active.len() == 1 { "" } else { "s" }
        );
    }
    for line in lines {
        out.push_str(&line);
        out.push('\n');
    }
    if !out.ends_with("\n\n") {
        out.push('\n');
    }
}

/// A message folded to one line, cleaned of control characters.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(clean)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Free text with markdown punctuation escaped. Words holding `@` become code spans, because
/// GitHub turns `@name` into a mention even when the `@` is backslash-escaped.
pub(crate) fn text(s: &str) -> String {
    let s = one_line(s);
    let mut out = String::with_capacity(s.len());
    for (i, word) in s.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if word.contains('@') {
            out.push_str(&code(word));
            continue;
        }
        for c in word.chars() {
            // The characters that format, link, start a heading or split a table cell
            // anywhere in a line; `(`, `-` and the like only matter where a word cannot be.
            if matches!(
                c,
                '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '~' | '&'
            ) {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// Text for a table cell: escaped, `|` included.
fn cell(s: &str) -> String {
    text(s)
}

/// An inline code span that holds `s` verbatim, whatever backticks it contains.
pub(crate) fn code(s: &str) -> String {
    let s = one_line(s);
    let longest = longest_run(&s, '`');
    let fence = "`".repeat(longest + 1);
    // A space on each side keeps a leading or trailing backtick from joining the fence; the
    // spaces are stripped again when rendered.
    if longest > 0 || s.starts_with(' ') || s.ends_with(' ') {
        format!("{fence} {s} {fence}")
    } else {
        format!("{fence}{s}{fence}")
    }
}

/// A code span inside a table row: GFM splits cells on `|` before it parses code spans, so
/// the pipe is escaped even there (and renders as a plain `|`).
fn code_cell(s: &str) -> String {
    code(s).replace('|', "\\|")
}

/// A fenced code block, indented to belong to a list item.
fn block_into(out: &mut String, lang: &str, body: &str, indent: &str) {
    let fence = "`".repeat(longest_run(body, '`').max(2) + 1);
    let _ = writeln!(out, "{indent}{fence}{lang}");
    for line in body.lines() {
        let _ = writeln!(out, "{indent}{line}");
    }
    let _ = writeln!(out, "{indent}{fence}");
}

fn longest_run(s: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for ch in s.chars() {
        run = if ch == c { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::human::tests::sample;

    #[test]
    fn heading_and_counts() {
        let md = render(&sample());
        assert!(md.starts_with("## fixgate: reject (exit 1)\n\n"));
        assert!(md.contains(
            "**Blocking:** 1 order-dependent test, 1 polluter, 1 redefined test, 1 new skip \
             · **Not blocking:** 1 flaky test\n\n"
        ));
        for line in md.lines() {
            assert_eq!(line, line.trim_end(), "trailing whitespace: {line:?}");
        }
        assert!(md.contains(
            "base `main` (`1a2b3c4d5e6f`) → head `worktree` · orders `0` `rev` `1` `2`\n"
        ));
    }

    #[test]
    fn findings_with_repro_blocks() {
        let md = render(&sample());
        assert!(md.contains(
            "### Findings\n\n- **order-dependent** `tests/test_pricing.py::test_tax`: fails after"
        ));
        assert!(md.contains(
            "  ```sh\n  python -m pytest -p no:randomly tests/test_pricing.py::test_add_item \
             tests/test_pricing.py::test_tax\n  ```\n"
        ));
        // `@pytest` would be a mention: it goes into a code span.
        assert!(md.contains("limit 0: `@pytest.mark.skip(reason=\"later\")`"));
    }

    #[test]
    fn known_debt_has_the_freeze_entry() {
        let md = render(&sample());
        let debt = md.find("### Known debt").unwrap();
        let flaky = md
            .find("- **flaky** `tests/test_net.py::test_fetch[a|b]`")
            .unwrap();
        assert!(flaky > debt);
        assert!(md.contains("  ```json\n  \"tests/test_net.py::test_fetch[a|b]\": {\"expires\""));
    }

    #[test]
    fn grid_has_a_column_per_order_and_escapes_pipes() {
        let md = render(&sample());
        assert!(md.contains(
            "| test | bucket | 0 | rev | 1 | 2 | signals |\n|:--|:--|:-:|:-:|:-:|:-:|:--|\n"
        ));
        assert!(md.contains(
            "| `tests/test_pricing.py::test_tax` | order-dependent | P | **F** | P | **F** | \
             victim, edited-by-patch |"
        ));
        assert!(md.contains(
            "| `tests/test_net.py::test_fetch[a\\|b]` | flaky | P | P | **F** | P | pre-existing |"
        ));
        assert!(!md.contains("| `tests/test_parse.py::test_parse_total` | stable"));
        assert!(md.contains("P passed, F failed"));
    }

    #[test]
    fn fixtures_and_budget_tables() {
        let md = render(&sample());
        assert!(md.contains("| `tests/fixtures/parse/expected.json` | parse | modified |"));
        assert!(md.contains(
            "| `tests/test_parse.py::test_parse_total` | passed | failed | **redefined** |"
        ));
        assert!(md.contains("### Budget breached\n\n- new-skips: 1 new skip, limit 0\n"));
        assert!(md.contains("| budget | used | limit |\n|:--|--:|--:|\n| new-skips | 1 | 0 |\n"));
        assert!(md
            .ends_with("<sub>graph: 23 nodes, 3 executed, 20 cached; 17 pytest processes</sub>\n"));
    }

    #[test]
    fn node_ids_with_backticks_and_pipes_stay_code() {
        assert_eq!(code("a`b"), "`` a`b ``");
        assert_eq!(code("plain"), "`plain`");
        assert_eq!(code("``x"), "``` ``x ```");
        assert_eq!(code_cell("t[a|b]"), "`t[a\\|b]`");
        assert_eq!(
            text("a|b <c> *d* _e_ [f](g)"),
            "a\\|b \\<c\\> \\*d\\* \\_e\\_ \\[f\\](g)"
        );
        assert_eq!(text("mail me@example.com"), "mail `me@example.com`");
    }

    #[test]
    fn fenced_blocks_outrun_backticks_in_the_body() {
        let mut out = String::new();
        block_into(&mut out, "sh", "echo ````", "");
        assert_eq!(out, "`````sh\necho ````\n`````\n");
    }
}
