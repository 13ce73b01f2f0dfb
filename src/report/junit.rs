//! The audit as JUnit XML, for CI dashboards: one testcase per test in the `fixgate` suite, its
//! bucket as the result, and the findings in a second suite so that a reject shows up red even
//! when every test passed (a redefined test passes on head, by definition).
//!
//! Flaky tests follow nextest and Maven Surefire: the testcase passes and carries a
//! `<flakyFailure>` with the outcomes per order, repeated in its `<system-out>` for readers that
//! ignore the element.

use std::fmt::Write as _;

use super::human::columns;
use super::{AuditReport, Finding, TestReport};
use crate::audit::triage::Bucket;

/// Renders the JUnit document.
pub(crate) fn render(r: &AuditReport) -> String {
    let tests: Vec<Case> = r.tests.iter().map(|t| test_case(r, t)).collect();
    let findings: Vec<Case> = r
        .findings
        .iter()
        .enumerate()
        .map(|(i, f)| finding_case(i, f))
        .collect();

    let mut suites = vec![Suite {
        name: "fixgate",
        cases: tests,
        properties: properties(r),
    }];
    if !findings.is_empty() {
        suites.push(Suite {
            name: "fixgate.findings",
            cases: findings,
            properties: Vec::new(),
        });
    }

    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let total = Counts::of(suites.iter().flat_map(|s| &s.cases));
    let _ = writeln!(
        out,
        "<testsuites name=\"fixgate\" {} time=\"{:.3}\">",
        total.attrs(),
        r.duration_seconds.max(0.0)
    );
    for suite in &suites {
        suite.write(&mut out);
    }
    out.push_str("</testsuites>\n");
    out
}

struct Suite {
    name: &'static str,
    cases: Vec<Case>,
    properties: Vec<(String, String)>,
}

impl Suite {
    fn write(&self, out: &mut String) {
        let counts = Counts::of(&self.cases);
        let _ = writeln!(
            out,
            "    <testsuite name=\"{}\" {}>",
            attr(self.name),
            counts.attrs()
        );
        if !self.properties.is_empty() {
            out.push_str("        <properties>\n");
            for (name, value) in &self.properties {
                let _ = writeln!(
                    out,
                    "            <property name=\"{}\" value=\"{}\"/>",
                    attr(name),
                    attr(value)
                );
            }
            out.push_str("        </properties>\n");
        }
        for case in &self.cases {
            case.write(out);
        }
        out.push_str("    </testsuite>\n");
    }
}

/// What a testcase reports besides passing.
enum CaseResult {
    Passed,
    Failure {
        message: String,
        kind: String,
        text: String,
    },
    Error {
        message: String,
        kind: String,
        text: String,
    },
    Skipped {
        message: Option<String>,
    },
    Flaky {
        message: String,
        text: String,
    },
}

struct Case {
    classname: String,
    name: String,
    file: Option<String>,
    line: Option<u64>,
    result: CaseResult,
    system_out: Option<String>,
}

impl Case {
    fn write(&self, out: &mut String) {
        let _ = write!(
            out,
            "        <testcase classname=\"{}\" name=\"{}\"",
            attr(&self.classname),
            attr(&self.name)
        );
        if let Some(file) = &self.file {
            let _ = write!(out, " file=\"{}\"", attr(file));
        }
        if let Some(line) = self.line {
            let _ = write!(out, " line=\"{line}\"");
        }
        if matches!(self.result, CaseResult::Passed) && self.system_out.is_none() {
            out.push_str("/>\n");
            return;
        }
        out.push_str(">\n");
        let element = |out: &mut String, tag: &str, message: &str, kind: &str, body: &str| {
            let _ = writeln!(
                out,
                "            <{tag} message=\"{}\" type=\"{}\">{}</{tag}>",
                attr(message),
                attr(kind),
                text(body)
            );
        };
        match &self.result {
            CaseResult::Passed => {}
            CaseResult::Failure {
                message,
                kind,
                text,
            } => element(out, "failure", message, kind, text),
            CaseResult::Error {
                message,
                kind,
                text,
            } => element(out, "error", message, kind, text),
            CaseResult::Skipped { message: Some(m) } => {
                let _ = writeln!(out, "            <skipped message=\"{}\"/>", attr(m));
            }
            CaseResult::Skipped { message: None } => out.push_str("            <skipped/>\n"),
            CaseResult::Flaky {
                message,
                text: body,
            } => {
                let _ = writeln!(
                    out,
                    "            <flakyFailure message=\"{}\" type=\"flaky\">\n                \
                     <system-out>{}</system-out>\n            </flakyFailure>",
                    attr(message),
                    text(body)
                );
            }
        }
        if let Some(body) = &self.system_out {
            let _ = writeln!(out, "            <system-out>{}</system-out>", text(body));
        }
        out.push_str("        </testcase>\n");
    }
}

#[derive(Default)]
struct Counts {
    tests: usize,
    failures: usize,
    errors: usize,
    skipped: usize,
}

impl Counts {
    fn of<'a>(cases: impl IntoIterator<Item = &'a Case>) -> Counts {
        let mut c = Counts::default();
        for case in cases {
            c.tests += 1;
            match case.result {
                CaseResult::Failure { .. } => c.failures += 1,
                CaseResult::Error { .. } => c.errors += 1,
                CaseResult::Skipped { .. } => c.skipped += 1,
                CaseResult::Passed | CaseResult::Flaky { .. } => {}
            }
        }
        c
    }

    fn attrs(&self) -> String {
        format!(
            "tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\"",
            self.tests, self.failures, self.errors, self.skipped
        )
    }
}

fn properties(r: &AuditReport) -> Vec<(String, String)> {
    let mut p = vec![
        ("fixgate.verdict".to_owned(), r.verdict.as_str().to_owned()),
        ("fixgate.exit-code".to_owned(), r.exit_code.to_string()),
        ("fixgate.base".to_owned(), r.base.rev.clone()),
    ];
    if let Some(c) = &r.base.commit {
        p.push(("fixgate.base-commit".to_owned(), c.clone()));
    }
    p.push(("fixgate.head".to_owned(), r.head.rev.clone()));
    if let Some(c) = &r.head.commit {
        p.push(("fixgate.head-commit".to_owned(), c.clone()));
    }
    let orders: Vec<String> = r.orders.iter().map(|o| o.to_string()).collect();
    p.push(("fixgate.orders".to_owned(), orders.join(" ")));
    p.push(("fixgate.strict".to_owned(), r.strict.to_string()));
    for reason in &r.reasons {
        p.push(("fixgate.reason".to_owned(), reason.clone()));
    }
    p
}

/// `tests/unit/test_cart.py::TestCart::test_add[x]` → (`tests.unit.test_cart`,
/// `TestCart::test_add[x]`).
fn split_nodeid(nodeid: &str) -> (String, String) {
    let (path, rest) = nodeid.split_once("::").unwrap_or((nodeid, nodeid));
    let module = path.strip_suffix(".py").unwrap_or(path);
    (module.replace(['/', '\\'], "."), rest.to_owned())
}

fn test_case(r: &AuditReport, t: &TestReport) -> Case {
    let (classname, name) = split_nodeid(&t.nodeid);
    let file = t
        .file
        .clone()
        .or_else(|| t.nodeid.split_once("::").map(|(p, _)| p.to_owned()));
    let message = format!("bucket: {}", t.bucket);
    let details = || evidence(r, t);
    let (result, system_out) = match t.bucket {
        Bucket::Stable => (CaseResult::Passed, None),
        Bucket::Flaky => (
            CaseResult::Flaky {
                message,
                text: details(),
            },
            Some(details()),
        ),
        Bucket::Skipped => (
            CaseResult::Skipped {
                message: t.message.clone(),
            },
            None,
        ),
        Bucket::Error => (
            CaseResult::Error {
                message,
                kind: t.bucket.as_str().to_owned(),
                text: details(),
            },
            None,
        ),
        Bucket::OrderDependent
        | Bucket::Polluter
        | Bucket::Failing
        | Bucket::Crashed
        | Bucket::Timeout
        | Bucket::ResourceLimit => (
            CaseResult::Failure {
                message,
                kind: t.bucket.as_str().to_owned(),
                text: details(),
            },
            None,
        ),
    };
    Case {
        classname,
        name,
        file,
        line: t.line,
        result,
        system_out,
    }
}

/// The evidence of a test's bucket, one fact a line.
fn evidence(r: &AuditReport, t: &TestReport) -> String {
    let mut s = format!("bucket: {}\noutcomes:", t.bucket);
    for column in columns(r, t) {
        let _ = write!(s, " {column}={}", t.outcomes[&column].as_str());
    }
    if !t.signals.is_empty() {
        let signals: Vec<String> = t.signals.iter().map(|s| s.to_string()).collect();
        let _ = write!(s, "\nsignals: {}", signals.join(", "));
    }
    if !t.dirty_groups.is_empty() {
        let _ = write!(
            s,
            "\nchanged without a lease: {}",
            t.dirty_groups.join(", ")
        );
    }
    if t.edited_by_patch {
        s.push_str("\nthe patch edited this test");
    }
    if !t.introduced {
        s.push_str("\npre-existing: the base has this too");
    }
    for p in r
        .pairs
        .iter()
        .filter(|p| p.victim == t.nodeid || p.polluter == t.nodeid)
    {
        let _ = write!(
            s,
            "\n{} {} -> victim {}\nrepro: {}",
            p.kind.as_str(),
            p.polluter,
            p.victim,
            p.repro
        );
    }
    if let Some(m) = &t.message {
        let _ = write!(s, "\n\n{m}");
    }
    s
}

fn finding_case(index: usize, f: &Finding) -> Case {
    let subject = if f.tests.is_empty() {
        // Findings without tests (a budget, a lock change) are told apart by their position.
        format!("#{}", index + 1)
    } else {
        f.tests.join(" ")
    };
    let mut body = f.message.clone();
    for t in &f.tests {
        let _ = write!(body, "\ntest: {t}");
    }
    if let Some(repro) = &f.repro {
        let _ = write!(body, "\nrepro: {repro}");
    }
    if !f.introduced {
        body.push_str("\npre-existing: the base has this too");
    }
    let (result, system_out) = if f.blocking {
        let message = f.message.lines().next().unwrap_or("").to_owned();
        (
            CaseResult::Failure {
                message,
                kind: f.kind.as_str().to_owned(),
                text: body,
            },
            None,
        )
    } else {
        (CaseResult::Passed, Some(format!("not blocking: {body}")))
    };
    Case {
        classname: "fixgate.findings".to_owned(),
        name: format!("{}: {subject}", f.kind),
        file: None,
        line: None,
        result,
        system_out,
    }
}

/// Whether XML 1.0 allows the character at all; the others are dropped, as no escape exists.
fn allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
        || c >= '\u{10000}'
}

fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().filter(|c| allowed(*c)) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            // A bare CR would be normalized away by the parser.
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
    out
}

/// Attribute values also escape quotes and the whitespace that attribute normalization would
/// otherwise turn into spaces.
fn attr(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().filter(|c| allowed(*c)) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::human::tests::sample;

    /// A deliberately small checker: balanced tags, one root, quoted attributes, and no raw `<`
    /// or stray `&` in text or attribute values.
    fn check_well_formed(xml: &str) -> Result<(), String> {
        let body = xml
            .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
            .ok_or("no declaration")?;
        let mut stack: Vec<&str> = Vec::new();
        let mut roots = 0;
        let mut rest = body;
        while !rest.is_empty() {
            let lt = rest.find('<').unwrap_or(rest.len());
            check_text(&rest[..lt])?;
            if stack.is_empty() && !rest[..lt].trim().is_empty() {
                return Err(format!("text outside the root: {:?}", &rest[..lt]));
            }
            rest = &rest[lt..];
            if rest.is_empty() {
                break;
            }
            let gt = rest.find('>').ok_or("unclosed tag")?;
            let tag = &rest[1..gt];
            rest = &rest[gt + 1..];
            if tag.contains('<') {
                return Err(format!("`<` inside a tag: {tag:?}"));
            }
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().ok_or_else(|| format!("unexpected </{name}>"))?;
                if open != name {
                    return Err(format!("</{name}> closes <{open}>"));
                }
                continue;
            }
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let (name, attrs) = tag.split_once(' ').unwrap_or((tag, ""));
            check_attrs(attrs)?;
            if stack.is_empty() {
                roots += 1;
            }
            if !self_closing {
                stack.push(name);
            }
        }
        if !stack.is_empty() {
            return Err(format!("unclosed: {stack:?}"));
        }
        if roots != 1 {
            return Err(format!("{roots} roots"));
        }
        Ok(())
    }

    fn check_text(s: &str) -> Result<(), String> {
        let mut rest = s;
        while let Some(i) = rest.find('&') {
            rest = &rest[i + 1..];
            let end = rest.find(';').ok_or("`&` without `;`")?;
            let entity = &rest[..end];
            let numeric = entity
                .strip_prefix('#')
                .is_some_and(|d| d.chars().all(|c| c.is_ascii_digit()));
            if !numeric && !["amp", "lt", "gt", "quot", "apos"].contains(&entity) {
                return Err(format!("bad entity &{entity};"));
            }
        }
        if s.chars().any(|c| !allowed(c)) {
            return Err(format!("invalid character in {s:?}"));
        }
        Ok(())
    }

    fn check_attrs(mut attrs: &str) -> Result<(), String> {
        loop {
            attrs = attrs.trim_start();
            if attrs.is_empty() {
                return Ok(());
            }
            let eq = attrs
                .find("=\"")
                .ok_or_else(|| format!("unquoted attribute in {attrs:?}"))?;
            let value_and_rest = &attrs[eq + 2..];
            let close = value_and_rest.find('"').ok_or("unterminated attribute")?;
            let value = &value_and_rest[..close];
            check_text(value)?;
            if value.contains(['\n', '\t', '\'']) {
                return Err(format!("unescaped whitespace or quote in {value:?}"));
            }
            attrs = &value_and_rest[close + 1..];
        }
    }

    #[test]
    fn sample_is_well_formed() {
        let xml = render(&sample());
        check_well_formed(&xml).unwrap();
    }

    #[test]
    fn the_checker_catches_broken_documents() {
        let decl = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
        assert!(check_well_formed(&format!("{decl}<a><b></a></b>")).is_err());
        assert!(check_well_formed(&format!("{decl}<a>1 < 2</a>")).is_err());
        assert!(check_well_formed(&format!("{decl}<a>R&D</a>")).is_err());
        assert!(check_well_formed(&format!("{decl}<a x=\"1\"/><b/>")).is_err());
        assert!(check_well_formed(&format!("{decl}<a x=\"&lt;\">&amp;</a>")).is_ok());
    }

    #[test]
    fn suites_counts_and_properties() {
        let xml = render(&sample());
        // 5 tests: 2 failures (order-dependent, polluter), 1 skipped, 1 flaky (passes).
        assert!(xml.contains(
            "<testsuite name=\"fixgate\" tests=\"5\" failures=\"2\" errors=\"0\" skipped=\"1\">"
        ));
        // 5 findings, 4 of them blocking.
        assert!(xml.contains(
            "<testsuite name=\"fixgate.findings\" tests=\"5\" failures=\"4\" errors=\"0\" skipped=\"0\">"
        ));
        assert!(xml.contains(
            "<testsuites name=\"fixgate\" tests=\"10\" failures=\"6\" errors=\"0\" skipped=\"1\" time=\"12.500\">"
        ));
        assert!(xml.contains("<property name=\"fixgate.verdict\" value=\"reject\"/>"));
        assert!(xml.contains("<property name=\"fixgate.exit-code\" value=\"1\"/>"));
    }

    #[test]
    fn testcases_by_bucket() {
        let xml = render(&sample());
        assert!(xml.contains(
            "<testcase classname=\"tests.test_pricing\" name=\"test_tax\" \
             file=\"tests/test_pricing.py\" line=\"12\">\n            \
             <failure message=\"bucket: order-dependent\" type=\"order-dependent\">\
             bucket: order-dependent\noutcomes: 0=passed rev=failed 1=passed 2=failed\n\
             signals: victim, edited-by-patch\nthe patch edited this test\n"
        ));
        assert!(xml.contains(
            "<testcase classname=\"tests.test_parse\" name=\"test_parse_total\" file=\"tests/test_parse.py\"/>"
        ));
        assert!(xml.contains("name=\"test_new_format\" file=\"tests/test_parse.py\" line=\"30\">\n            <skipped/>"));
        // Flaky: no failure, a flakyFailure and the same evidence in system-out.
        let flaky = xml.find("name=\"test_fetch[a|b]\"").unwrap();
        let case = &xml[flaky..flaky + xml[flaky..].find("</testcase>").unwrap()];
        assert!(!case.contains("<failure"));
        assert!(case.contains("<flakyFailure message=\"bucket: flaky\" type=\"flaky\">"));
        assert!(case.contains(
            "<system-out>bucket: flaky\noutcomes: 0=passed rev=passed 1=failed 2=passed\n"
        ));
        assert!(case.contains("ConnectionError: &lt;urlopen error&gt; &amp; `timeout`"));
    }

    #[test]
    fn error_bucket_is_an_error() {
        let mut r = sample();
        r.tests[3].bucket = crate::audit::triage::Bucket::Error;
        let xml = render(&r);
        assert!(xml.contains("<error message=\"bucket: error\" type=\"error\">"));
        assert!(xml.contains("errors=\"1\""));
        check_well_formed(&xml).unwrap();
    }

    #[test]
    fn hostile_text_is_escaped_and_invalid_characters_dropped() {
        let mut r = sample();
        r.tests[1].message = Some("</failure><x a=\"1\">\u{1}\u{1b}[31m\u{fffe}]]>&".into());
        r.tests[1].nodeid = "tests/x.py::test_q[\"'<&>\n]".into();
        r.reasons.push("quote \" and\nnewline".into());
        let xml = render(&r);
        check_well_formed(&xml).unwrap();
        assert!(xml.contains("&lt;/failure&gt;&lt;x a=\"1\"&gt;[31m]]&gt;&amp;"));
        assert!(xml.contains("name=\"test_q[&quot;&apos;&lt;&amp;&gt;&#10;]\""));
        assert!(xml.contains("value=\"quote &quot; and&#10;newline\""));
        assert!(!xml.contains('\u{1b}'));
    }

    #[test]
    fn nodeids_split_into_classname_and_name() {
        assert_eq!(
            split_nodeid("tests/unit/test_cart.py::TestCart::test_add[x::y]"),
            (
                "tests.unit.test_cart".to_owned(),
                "TestCart::test_add[x::y]".to_owned()
            )
        );
        assert_eq!(
            split_nodeid("test_doc.txt"),
            ("test_doc.txt".to_owned(), "test_doc.txt".to_owned())
        );
    }
}
