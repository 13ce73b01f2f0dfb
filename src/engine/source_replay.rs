//! Test-source replay: every test the patch edited (not added) that passes at head is read from
//! the base-suite replay (`engine::base_suite`), where the base's version of its test file,
//! and the base's conftests, ran on the head's code. The answer key written in the test itself
//! is caught like the one in fixtures.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::audit::source_replay::{Reading, SourceRead};
use crate::pytest::result::{Outcome, RunResult};
use crate::snapshot::Snapshot;
use crate::testsrc::SourceFile;

/// A test to replay: its head node id, and the node id of the base's version of it (the same,
/// unless the patch renamed the test).
pub(crate) struct Candidate {
    pub(crate) nodeid: String,
    pub(crate) base_nodeid: String,
}

impl Candidate {
    fn renamed(&self) -> bool {
        self.nodeid != self.base_nodeid
    }
}

/// The edited tests worth replaying: they pass at head, and the base has them, by name or as a
/// test the patch renamed ([`crate::audit::renamed`]: a head test new by name whose body matches
/// a base test of the same file that is gone at head).
pub(crate) fn candidates(
    edited: &BTreeSet<String>,
    base_ids: &HashSet<&str>,
    head_ids: &HashSet<&str>,
    head_run: &RunResult,
    base: &Snapshot,
    head: &Snapshot,
) -> Vec<Candidate> {
    // A skipped or xfailed test does not pass with the head's test code: what it hides is the
    // base-suite replay's (`skipped-test`, `xfailed-test`).
    let green = |id: &str| {
        head_run
            .outcome_of(id)
            .is_some_and(|o| matches!(o, Outcome::Passed | Outcome::Xpassed))
    };
    let renamed = renamed_tests(edited, base_ids, head_ids, base, head);
    edited
        .iter()
        .filter(|id| green(id))
        .filter_map(|id| {
            let base_nodeid = match base_ids.contains(id.as_str()) {
                true => id.clone(),
                false => renamed.get(id.as_str())?.clone(),
            };
            Some(Candidate {
                nodeid: id.clone(),
                base_nodeid,
            })
        })
        .collect()
}

/// The new head tests (edited, unknown to the base) that are renamed base tests, with the base's
/// node id of each. A file is read only when it has tests on both sides of the rename.
fn renamed_tests(
    edited: &BTreeSet<String>,
    base_ids: &HashSet<&str>,
    head_ids: &HashSet<&str>,
    base: &Snapshot,
    head: &Snapshot,
) -> BTreeMap<String, String> {
    let mut new: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for id in edited.iter().filter(|id| !base_ids.contains(id.as_str())) {
        let (file, func) = crate::testsrc::split_nodeid(id);
        new.entry(file).or_default().insert(func);
    }
    let mut gone: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for id in base_ids.iter().filter(|id| !head_ids.contains(*id)) {
        let (file, func) = crate::testsrc::split_nodeid(id);
        if new.contains_key(file) {
            gone.entry(file).or_default().insert(func);
        }
    }
    let mut out = BTreeMap::new();
    for (file, gone_funcs) in &gone {
        let text = |s: &Snapshot| {
            s.read_path(file)
                .ok()
                .flatten()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
        };
        let (Some(b), Some(h)) = (text(base), text(head)) else {
            continue;
        };
        let sources = |text: &str, funcs: &BTreeSet<&str>| -> Vec<(String, String)> {
            funcs
                .iter()
                .filter_map(|f| {
                    let source = crate::testsrc::function_source(text, f)?;
                    Some((f.to_string(), source))
                })
                .collect()
        };
        // A name still defined at head is not gone (a parameter changed, say), and a new name
        // the base defines is not new.
        let gone_funcs: BTreeSet<&str> = gone_funcs
            .iter()
            .copied()
            .filter(|f| crate::testsrc::function_source(&h, f).is_none())
            .collect();
        let new_funcs: BTreeSet<&str> = new[file]
            .iter()
            .copied()
            .filter(|f| crate::testsrc::function_source(&b, f).is_none())
            .collect();
        let (gone_src, new_src) = (sources(&b, &gone_funcs), sources(&h, &new_funcs));
        for (new_name, old_name) in crate::audit::renamed::pair(&gone_src, &new_src) {
            for id in edited.iter() {
                let (f, func) = crate::testsrc::split_nodeid(id);
                if f != *file || func != new_name {
                    continue;
                }
                let old = crate::audit::renamed::renamed_nodeid(id, new_name, old_name);
                if let Some(old) = old.filter(|o| base_ids.contains(o.as_str())) {
                    out.insert(id.clone(), old);
                }
            }
        }
    }
    out
}

/// A test file's text on one side, and its outline.
type TestFile = (String, SourceFile);

/// The lines the patch changed in what defines a test (its function, or what around it it
/// reads), its base version `base_id` in `base`, its head version `head_id` in `head`; a renamed
/// test's own name is no change.
fn edited_lines(
    base: &TestFile,
    head: &TestFile,
    base_id: &str,
    head_id: &str,
) -> (Vec<String>, Vec<String>) {
    let ((base, b), (head, h)) = (base, head);
    let (_, base_func) = crate::testsrc::split_nodeid(base_id);
    let (_, func) = crate::testsrc::split_nodeid(head_id);
    if let (Some(bd), Some(hd)) = (b.definition(base_id), h.definition(head_id)) {
        let (b, h) = crate::testsrc::edit_lines((b, &bd), (h, &hd));
        let renamed =
            |l: &String| l.replacen(&format!("def {base_func}("), &format!("def {func}("), 1);
        let b: Vec<String> = b.iter().map(renamed).collect();
        return crate::testsrc::changed_lines(&b.join("\n"), &h.join("\n"));
    }
    let source = |t: &str, f: &str| crate::testsrc::function_source(t, f).unwrap_or_default();
    let base_source =
        source(base, base_func).replacen(&format!("def {base_func}"), &format!("def {func}"), 1);
    crate::testsrc::changed_lines(&base_source, &source(head, func))
}

/// Whether the head's version of candidate `c` is its base version with the name `old` (which
/// the head removed or renamed) replaced by another and nothing else changed
/// ([`crate::audit::renamed::follows_rename`]).
pub(crate) fn follows_rename(base: &Snapshot, head: &Snapshot, c: &Candidate, old: &str) -> bool {
    let source = |s: &Snapshot, id: &str| {
        let (file, func) = crate::testsrc::split_nodeid(id);
        let text = s.read_path(file).ok().flatten()?;
        crate::testsrc::function_source(&String::from_utf8_lossy(&text), func)
    };
    match (source(base, &c.base_nodeid), source(head, &c.nodeid)) {
        (Some(b), Some(h)) => crate::audit::renamed::follows_rename(&b, &h, old),
        _ => false,
    }
}

/// The report of one edited test: its outcomes, its reading and the lines the patch changed.
pub(crate) fn report_of(
    c: &Candidate,
    head_outcome: Outcome,
    on_base: Option<Outcome>,
    reading: Reading,
    base: &Snapshot,
    head: &Snapshot,
) -> SourceRead {
    let side = |s: &Snapshot, id: &str| -> TestFile {
        let (file, _) = crate::testsrc::split_nodeid(id);
        let text = s
            .read_path(file)
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let outline = SourceFile::parse(&text);
        (text, outline)
    };
    let (base_lines, head_lines) = edited_lines(
        &side(base, &c.base_nodeid),
        &side(head, &c.nodeid),
        &c.base_nodeid,
        &c.nodeid,
    );
    SourceRead {
        nodeid: c.nodeid.clone(),
        renamed_from: c.renamed().then(|| c.base_nodeid.clone()),
        head: head_outcome,
        base_test_code: on_base,
        reading,
        base_lines,
        head_lines,
        undecided: None,
    }
}
