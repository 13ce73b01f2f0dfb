//! The audit as JUnit XML, for CI dashboards: one testcase per test in the `fixgate` suite, its
//! bucket as the result, and the findings in a second suite so that a reject shows up red even
//! when every test passed (a redefined test passes on head, by definition).
//!
//! Flaky tests follow nextest and Maven Surefire: the testcase passes and carries a
//! `<flakyFailure>` with the outcomes per order, repeated in its `<system-out>` for readers that
//! ignore the element.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;

use quick_xml::escape::{escape, partial_escape};
use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesDecl, BytesText, Event};
use quick_xml::name::QName;
use quick_xml::Writer;

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

    let total = Counts::of(suites.iter().flat_map(|s| &s.cases));
    let time = format!("{:.3}", r.duration_seconds.max(0.0));
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 4);
    let written = w
        .write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))
        .and_then(|()| {
            w.create_element("testsuites")
                .with_attribute(attr("name", "fixgate"))
                .with_attributes(total.attrs())
                .with_attribute(attr("time", &time))
                .write_inner_content(|w| suites.iter().try_for_each(|s| s.write(w)))
        });
    written.expect("a Vec takes every write");
    // The writer's escapes keep it UTF-8, as the report's strings were.
    let mut out = String::from_utf8_lossy(&w.into_inner()).into_owned();
    out.push('\n');
    out
}

struct Suite {
    name: &'static str,
    cases: Vec<Case>,
    properties: Vec<(String, String)>,
}

impl Suite {
    fn write(&self, w: &mut Writer<Vec<u8>>) -> io::Result<()> {
        w.create_element("testsuite")
            .with_attribute(attr("name", self.name))
            .with_attributes(Counts::of(&self.cases).attrs())
            .write_inner_content(|w| {
                if !self.properties.is_empty() {
                    w.create_element("properties").write_inner_content(|w| {
                        self.properties.iter().try_for_each(|(name, value)| {
                            w.create_element("property")
                                .with_attribute(attr("name", name))
                                .with_attribute(attr("value", value))
                                .write_empty()
                                .map(|_| ())
                        })
                    })?;
                }
                self.cases.iter().try_for_each(|case| case.write(w))
            })
            .map(|_| ())
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
    fn write(&self, w: &mut Writer<Vec<u8>>) -> io::Result<()> {
        let line = self.line.map(|l| l.to_string());
        let element = w
            .create_element("testcase")
            .with_attribute(attr("classname", &self.classname))
            .with_attribute(attr("name", &self.name))
            .with_attributes(self.file.as_deref().map(|f| attr("file", f)))
            .with_attributes(line.as_deref().map(|l| attr("line", l)));
        if matches!(self.result, CaseResult::Passed) && self.system_out.is_none() {
            return element.write_empty().map(|_| ());
        }
        element
            .write_inner_content(|w| {
                let outcome = |w: &mut Writer<Vec<u8>>, tag, message: &str, kind: &str, body| {
                    w.create_element(tag)
                        .with_attribute(attr("message", message))
                        .with_attribute(attr("type", kind))
                        .write_text_content(text(body))
                        .map(|_| ())
                };
                match &self.result {
                    CaseResult::Passed => {}
                    CaseResult::Failure {
                        message,
                        kind,
                        text,
                    } => outcome(w, "failure", message, kind, text)?,
                    CaseResult::Error {
                        message,
                        kind,
                        text,
                    } => outcome(w, "error", message, kind, text)?,
                    CaseResult::Skipped { message } => {
                        w.create_element("skipped")
                            .with_attributes(message.as_deref().map(|m| attr("message", m)))
                            .write_empty()?;
                    }
                    CaseResult::Flaky {
                        message,
                        text: body,
                    } => {
                        w.create_element("flakyFailure")
                            .with_attribute(attr("message", message))
                            .with_attribute(attr("type", "flaky"))
                            .write_inner_content(|w| {
                                w.create_element("system-out")
                                    .write_text_content(text(body))
                                    .map(|_| ())
                            })?;
                    }
                }
                if let Some(body) = &self.system_out {
                    w.create_element("system-out")
                        .write_text_content(text(body))?;
                }
                Ok(())
            })
            .map(|_| ())
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

    fn attrs(&self) -> [Attribute<'static>; 4] {
        [
            ("tests", self.tests),
            ("failures", self.failures),
            ("errors", self.errors),
            ("skipped", self.skipped),
        ]
        .map(|(key, n)| attr(key, &n.to_string()))
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

/// `s` without the characters XML 1.0 cannot hold.
fn xml_chars(s: &str) -> Cow<'_, str> {
    match s.chars().all(allowed) {
        true => Cow::Borrowed(s),
        false => Cow::Owned(s.chars().filter(|c| allowed(*c)).collect()),
    }
}

/// Text content, escaped by quick-xml; a carriage return as a character reference, since a
/// parser turns a bare one into a line feed.
fn text(s: &str) -> BytesText<'static> {
    let escaped = partial_escape(xml_chars(s)).replace('\r', "&#13;");
    BytesText::from_escaped(escaped)
}

/// An attribute, its value escaped by quick-xml (markup and quotes); the whitespace that
/// attribute-value normalization would turn into spaces is written as character references.
fn attr<'a>(key: &'a str, value: &str) -> Attribute<'a> {
    let escaped = escape(xml_chars(value))
        .replace('\n', "&#10;")
        .replace('\r', "&#13;")
        .replace('\t', "&#9;");
    Attribute {
        key: QName(key.as_bytes()),
        value: Cow::Owned(escaped.into_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::human::tests::sample;

    /// An element as a parser reads it back: its name, its attributes' values and its text,
    /// with every reference resolved and attribute values normalized as XML 1.0 says.
    #[derive(Debug)]
    struct Read {
        name: String,
        attrs: Vec<(String, String)>,
        text: String,
    }

    /// The document's elements, in order, as quick-xml's reader reads them; an error where it
    /// is not well-formed XML 1.0 (tags, references, characters, one root) with one declaration.
    fn read_back(xml: &str) -> Result<Vec<Read>, String> {
        use quick_xml::events::BytesRef;
        use quick_xml::XmlVersion;
        let err = |e: &dyn std::fmt::Display| e.to_string();
        if let Some(c) = xml.chars().find(|c| !allowed(*c)) {
            return Err(format!("{c:?} is not an XML 1.0 character"));
        }
        let reference = |r: &BytesRef| -> Result<String, String> {
            if let Some(c) = r.resolve_char_ref().map_err(|e| err(&e))? {
                return Ok(c.to_string());
            }
            let name = r.decode().map_err(|e| err(&e))?;
            quick_xml::escape::resolve_predefined_entity(&name)
                .map(str::to_owned)
                .ok_or(format!("undefined entity &{name};"))
        };
        let mut reader = quick_xml::Reader::from_str(xml);
        let (mut out, mut open, mut roots, mut decls) = (Vec::<Read>::new(), Vec::new(), 0, 0);
        loop {
            let event = reader.read_event().map_err(|e| err(&e))?;
            let element = |e: &quick_xml::events::BytesStart| -> Result<Read, String> {
                let attrs = e
                    .attributes()
                    .map(|a| {
                        let a = a.map_err(|e| err(&e))?;
                        let value = a
                            .normalized_value(XmlVersion::Implicit1_0)
                            .map_err(|e| err(&e))?;
                        Ok((String::from_utf8_lossy(a.key.0).into_owned(), value.into()))
                    })
                    .collect::<Result<_, String>>()?;
                Ok(Read {
                    name: String::from_utf8_lossy(e.name().0).into_owned(),
                    attrs,
                    text: String::new(),
                })
            };
            match event {
                Event::Decl(_) => decls += 1,
                Event::Start(e) | Event::Empty(e) if open.is_empty() && roots > 0 => {
                    return Err(format!("a second root: {:?}", e.name()));
                }
                Event::Start(e) => {
                    roots += usize::from(open.is_empty());
                    open.push(out.len());
                    out.push(element(&e)?);
                }
                Event::Empty(e) => {
                    roots += usize::from(open.is_empty());
                    out.push(element(&e)?);
                }
                Event::End(_) => {
                    open.pop();
                }
                Event::Text(t) => {
                    let t = t.xml10_content().map_err(|e| err(&e))?;
                    match open.last() {
                        Some(&i) => out[i].text.push_str(&t),
                        None if t.trim().is_empty() => {}
                        None => return Err(format!("text outside the root: {t:?}")),
                    }
                }
                Event::GeneralRef(r) => {
                    let i = *open.last().ok_or("a reference outside the root")?;
                    out[i].text.push_str(&reference(&r)?);
                }
                Event::Eof => break,
                other => return Err(format!("unexpected {other:?}")),
            }
        }
        match (decls, roots) {
            (1, 1) => Ok(out),
            _ => Err(format!("{decls} declarations and {roots} roots")),
        }
    }

    fn attr_of<'a>(e: &'a Read, key: &str) -> Option<&'a str> {
        e.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn sample_reads_back() {
        let read = read_back(&render(&sample())).unwrap();
        assert_eq!(read[0].name, "testsuites");
        let cases = read.iter().filter(|e| e.name == "testcase").count();
        assert_eq!(cases, 10);
    }

    #[test]
    fn the_reader_rejects_broken_documents() {
        let decl = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
        for broken in [
            "<a><b></a></b>",
            "<a>1 < 2</a>",
            "<a>R&D</a>",
            "<a x=\"1\"/><b/>",
            "<a x=\"1\" x=\"2\"/>",
            "<a>\u{1}</a>",
            "<a>&bogus;</a>",
        ] {
            assert!(read_back(&format!("{decl}{broken}")).is_err(), "{broken}");
        }
        let ok = read_back(&format!("{decl}<a x=\"&lt;&#10;\">&amp;&#13;</a>")).unwrap();
        assert_eq!(attr_of(&ok[0], "x"), Some("<\n"));
        assert_eq!(ok[0].text, "&\r");
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
        read_back(&xml).unwrap();
    }

    #[test]
    fn hostile_text_is_escaped_and_invalid_characters_dropped() {
        let mut r = sample();
        r.tests[1].message = Some("</failure><x a=\"1\">\u{1}\u{1b}[31m\u{fffe}]]>&".into());
        r.tests[1].nodeid = "tests/x.py::test_q[\"'<&>\n]".into();
        r.reasons.push("quote \" and\nnewline".into());
        let xml = render(&r);
        read_back(&xml).unwrap();
        assert!(xml.contains("&lt;/failure&gt;&lt;x a=\"1\"&gt;[31m]]&gt;&amp;"));
        assert!(xml.contains("name=\"test_q[&quot;&apos;&lt;&amp;&gt;&#10;]\""));
        assert!(xml.contains("value=\"quote &quot; and&#10;newline\""));
        assert!(!xml.contains('\u{1b}'));
    }

    /// Test ids a suite can hold (pytest ids are any text) read back as they were, but for the
    /// characters XML cannot hold, in every place they appear: the testcase's name, the
    /// evidence, a finding's name and body, a property.
    #[test]
    fn hostile_test_ids_read_back_as_text() {
        let long = format!("test_long[{}]", "x".repeat(100_000));
        let ids = [
            "test_script[<script>alert(1)</script>]".to_owned(),
            "test_quotes[\"double\" 'single' `back`]".to_owned(),
            "test_cdata[]]>]]]]><![CDATA[x]]>]".to_owned(),
            "test_refs[&amp; &#60; &lt &]".to_owned(),
            "test_space[tab\there\r\nline\rcr  two]".to_owned(),
            "test_controls[\u{0}\u{1}\u{8}\u{b}\u{c}\u{1f}\u{fffe}\u{ffff}]".to_owned(),
            "test_unicode[é😀\u{10ffff}\u{2028}]".to_owned(),
            long,
        ];
        let mut r = sample();
        while r.tests.len() < ids.len() {
            r.tests.push(r.tests[0].clone());
        }
        for (t, id) in r.tests.iter_mut().zip(&ids) {
            t.nodeid = format!("tests/test_h.py::{id}");
            t.message = Some(format!("message about {id}"));
            // Its evidence, the message last, is the failure's text.
            t.bucket = Bucket::Failing;
        }
        r.findings[0].tests = vec![format!("tests/test_h.py::{}", ids[0])];
        r.findings[0].message = format!("finding about {}", ids[2]);
        r.reasons.push(ids[4].clone());
        let xml = render(&r);
        let read = read_back(&xml).unwrap_or_else(|e| panic!("{e}"));
        let kept = |s: &str| s.chars().filter(|c| allowed(*c)).collect::<String>();
        let names: Vec<&str> = read
            .iter()
            .filter(|e| e.name == "testcase")
            .filter_map(|e| attr_of(e, "name"))
            .collect();
        for id in &ids {
            assert!(
                names.contains(&kept(id).as_str()),
                "{id:?} not in {names:?}"
            );
            let message = format!("message about {}", kept(id));
            assert!(
                read.iter().any(|e| e.text.ends_with(&message)),
                "the evidence of {id:?}"
            );
        }
        assert!(names.contains(&"test_controls[]"), "{names:?}");
        let finding = read
            .iter()
            .find(|e| e.name == "testcase" && attr_of(e, "classname") == Some("fixgate.findings"))
            .unwrap();
        assert!(attr_of(finding, "name").unwrap().ends_with(&ids[0]));
        assert!(read
            .iter()
            .any(|e| e.text.starts_with(&format!("finding about {}", ids[2]))));
        assert!(read
            .iter()
            .any(|e| e.name == "property" && attr_of(e, "value") == Some(ids[4].as_str())));
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
