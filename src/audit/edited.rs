//! What the patch touched among the tests: the tests whose source it edited, and the tests
//! coupled to the fixture delta through their traced reads.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::delta::Delta;
use crate::pytest::result::RunResult;
use crate::snapshot::Snapshot;
use crate::testsrc::{outside_tests, Around, TestNames};

/// The tests whose outcome the patch's edits to their file decide: their function changed, or
/// what surrounds the tests in the file did (module-level data, helpers, fixtures, a class's
/// `setUp` and attributes). A new test counts as edited. What is a test is what either side
/// collected (`collected`: the base's and the head's node ids), so the suite's own naming rules
/// hold. Each test file is read once per side, and only files that differ are parsed.
pub(crate) fn edited_tests<'a>(
    base: &Snapshot,
    head: &Snapshot,
    nodeids: &[String],
    collected: impl IntoIterator<Item = &'a str> + Clone,
) -> BTreeSet<String> {
    type Sides = (
        Option<String>,
        Option<String>,
        Option<Around>,
        Option<Around>,
    );
    let mut texts: HashMap<String, Sides> = HashMap::new();
    let read = |s: &Snapshot, file: &str| {
        s.read_path(file)
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    let mut edited = BTreeSet::new();
    for id in nodeids {
        let (file, func) = crate::testsrc::split_nodeid(id);
        if base.same_blob(head, file) {
            continue;
        }
        let (b, h, around_b, around_h) = texts.entry(file.to_string()).or_insert_with(|| {
            let (b, h) = (read(base, file), read(head, file));
            let names = TestNames::of(file, collected.clone());
            let around = |t: &Option<String>| t.as_deref().map(|t| outside_tests(t, &names));
            let (around_b, around_h) = (around(&b), around(&h));
            (b, h, around_b, around_h)
        });
        if b == h {
            continue;
        }
        let source = |t: &Option<String>| {
            t.as_deref()
                .and_then(|t| crate::testsrc::function_source(t, func))
        };
        let around = |a: &Option<Around>| a.as_ref().map(|a| a.of_test(id));
        match (source(b), source(h)) {
            (Some(b), Some(h)) if b != h => {
                edited.insert(id.clone());
            }
            (None, Some(_)) => {
                edited.insert(id.clone());
            }
            (Some(_), Some(_)) if around(around_b) != around(around_h) => {
                edited.insert(id.clone());
            }
            _ => {}
        }
    }
    edited
}

/// Tests whose traced reads in the file-order run touch a file of the delta.
pub(crate) fn coupled_tests(run: &RunResult, delta: &Delta) -> Vec<String> {
    let changed: HashSet<String> = delta.changed.iter().map(|c| c.path.to_string()).collect();
    run.tests
        .iter()
        .filter(|t| {
            t.trace
                .read
                .iter()
                .chain(&t.trace.sqlite)
                .chain(&t.trace.list)
                .any(|p| changed.contains(p))
        })
        .map(|t| t.nodeid.clone())
        .collect()
}
