//! The audit as GitHub Actions workflow commands: an annotation per finding, on the test's file
//! and line when the report knows them, and a closing notice with the verdict.
//!
//! Blocking findings are errors and come first, because GitHub shows only the first few
//! annotations of each level per step; everything that does not block is a warning.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::human::finding_counts;
use super::{AuditReport, Finding, TestReport};

/// Renders the workflow commands, one a line.
pub(crate) fn render(r: &AuditReport) -> String {
    let by_id: BTreeMap<&str, &TestReport> =
        r.tests.iter().map(|t| (t.nodeid.as_str(), t)).collect();
    let mut out = String::new();
    for f in r.findings.iter().filter(|f| f.blocking) {
        annotation(&mut out, "error", f, &by_id);
    }
    for f in r.findings.iter().filter(|f| !f.blocking) {
        annotation(&mut out, "warning", f, &by_id);
    }
    let _ = writeln!(out, "::notice::{}", data(&verdict(r)));
    out
}

fn annotation(out: &mut String, level: &str, f: &Finding, by_id: &BTreeMap<&str, &TestReport>) {
    let mut props = Vec::new();
    // The first test of the finding that has a location: for a pair that is the one named first
    // (the victim of an order-dependent finding, the polluter of a polluter finding).
    let located = f
        .tests
        .iter()
        .filter_map(|t| by_id.get(t.as_str()))
        .find(|t| t.file.is_some());
    if let Some(t) = located {
        if let Some(file) = &t.file {
            props.push(format!("file={}", property(file)));
            if let Some(line) = t.line {
                props.push(format!("line={line}"));
            }
        }
    }
    let mut title = format!("fixgate: {}", f.kind);
    if !f.introduced {
        title.push_str(" (pre-existing)");
    }
    props.push(format!("title={}", property(&title)));

    let mut message = f.message.trim().to_owned();
    for t in &f.tests {
        let _ = write!(message, "\ntest: {t}");
    }
    if let Some(repro) = &f.repro {
        let _ = write!(message, "\nrepro: {repro}");
    }
    let _ = writeln!(out, "::{level} {}::{}", props.join(","), data(&message));
}

/// `fixgate verdict: reject (exit 1): 1 order-dependent test, ...`, then the reasons.
fn verdict(r: &AuditReport) -> String {
    let mut s = format!("fixgate verdict: {} (exit {})", r.verdict, r.exit_code);
    let blocking = finding_counts(r.findings.iter().filter(|f| f.blocking));
    let other = finding_counts(r.findings.iter().filter(|f| !f.blocking));
    if !blocking.is_empty() {
        let _ = write!(s, ": {blocking}");
    }
    if !other.is_empty() {
        let _ = write!(s, "; not blocking: {other}");
    }
    for reason in &r.reasons {
        let _ = write!(s, "\n- {reason}");
    }
    s
}

/// Escapes a command's message: GitHub decodes `%25`, `%0D` and `%0A`, so a newline in a test's
/// message cannot end the command and start another one.
fn data(s: &str) -> String {
    escape(s, false)
}

/// Escapes a property value, where `:` and `,` also delimit.
fn property(s: &str) -> String {
    escape(s, true)
}

fn escape(s: &str, in_property: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            ':' if in_property => out.push_str("%3A"),
            ',' if in_property => out.push_str("%2C"),
            // Other control characters would reach the log as they are: show them instead.
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::human::tests::sample;

    #[test]
    fn blocking_findings_are_errors_on_the_test_location() {
        let gh = render(&sample());
        let lines: Vec<&str> = gh.lines().collect();
        assert_eq!(lines.len(), 6);
        assert_eq!(
            lines[0],
            "::error file=tests/test_pricing.py,line=12,title=fixgate%3A order-dependent::\
             fails after tests/test_pricing.py::test_add_item and passes alone; the patch edited \
             its assertion to the polluted value instead of fixing the isolation\
             %0Atest: tests/test_pricing.py::test_tax\
             %0Arepro: python -m pytest -p no:randomly tests/test_pricing.py::test_add_item \
             tests/test_pricing.py::test_tax"
        );
        // A polluter finding sits on the polluter, the first test it names.
        assert!(lines[1]
            .starts_with("::error file=tests/test_pricing.py,line=4,title=fixgate%3A polluter::"));
        // The redefined test has no location in the report: no file property.
        assert!(lines[2]
            .starts_with("::error title=fixgate%3A redefined::passes on head fixtures, fails"));
        assert!(lines[3]
            .starts_with("::error file=tests/test_parse.py,line=30,title=fixgate%3A new-skip::"));
    }

    #[test]
    fn non_blocking_findings_are_warnings_after_the_errors() {
        let gh = render(&sample());
        let lines: Vec<&str> = gh.lines().collect();
        assert_eq!(
            lines[4],
            "::warning file=tests/test_net.py,line=7,title=fixgate%3A flaky (pre-existing)::\
             outcome differs between reruns of order 1,%0Arun 2: \"passed\"\
             %0Atest: tests/test_net.py::test_fetch[a|b]\
             %0Arepro: python -m pytest -p no:randomly 'tests/test_net.py::test_fetch[a|b]'"
        );
    }

    #[test]
    fn the_verdict_is_the_last_notice() {
        let gh = render(&sample());
        let last = gh.lines().last().unwrap();
        assert!(last.starts_with(
            "::notice::fixgate verdict: reject (exit 1): 1 order-dependent \
             test, 1 polluter, 1 redefined test, 1 new skip; not blocking: 1 flaky test\
             %0A- tests/test_pricing.py::test_tax is order-dependent"
        ));
        let pass = AuditReport {
            verdict: crate::audit::verdict::Verdict::Pass,
            ..Default::default()
        };
        assert_eq!(render(&pass), "::notice::fixgate verdict: pass (exit 0)\n");
    }

    #[test]
    fn escaping_follows_the_runner() {
        assert_eq!(data("100% done\r\nnext: a,b"), "100%25 done%0D%0Anext: a,b");
        assert_eq!(property("C:\\x,y%\n"), "C%3A\\x%2Cy%25%0A");
        assert_eq!(data("bell\u{7}"), "bell\\u{7}");
    }

    #[test]
    fn a_message_cannot_inject_a_command() {
        let mut r = sample();
        r.findings[0].message = "boom\n::set-output name=x::y\r\n::error::forged".into();
        r.tests[1].file = Some("tests/odd,name:1.py".into());
        let gh = render(&r);
        for line in gh.lines() {
            assert!(
                line.starts_with("::error ")
                    || line.starts_with("::warning ")
                    || line.starts_with("::notice::"),
                "{line:?}"
            );
        }
        assert!(gh.contains("file=tests/odd%2Cname%3A1.py,line=12,"));
        assert!(gh.contains("boom%0A::set-output name=x::y%0D%0A::error::forged"));
    }
}
