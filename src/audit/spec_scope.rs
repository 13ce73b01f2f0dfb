//! What the base-suite replay runs: nothing when the patch leaves alone what the base's tests
//! are made of; the base tests it touched when it changed test files or removed tests; the
//! whole base suite when it changed what every test runs under (a conftest, the pytest
//! configuration or plugin list, a `pytest_*` hook, a helper module of the tests).

use std::collections::{BTreeSet, HashSet};

/// What a path the patch changed (added, removed or modified) is to the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SpecRole {
    /// A `conftest.py`.
    Conftest,
    /// A root configuration file whose pytest options (or installed plugins) differ.
    Config,
    /// A `.py` file that gained a `pytest_*` function: a hook, wherever it is loaded from.
    Hook,
    /// A Python module among the tests that is no test file (a helper they import).
    TestCode,
    /// A test module that changes, at import, what it imports (`unittest.TestCase.assertEqual =
    /// …`): it acts on every test of the session.
    ImportPatch,
    /// A test file, of either side.
    TestFile,
}

impl SpecRole {
    /// Whether a change of this role reaches every test.
    fn reaches_all(self) -> bool {
        !matches!(self, SpecRole::TestFile)
    }
}

/// A path the patch changed, with its role.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Changed {
    pub(crate) path: String,
    pub(crate) role: SpecRole,
}

/// Why the replay runs what it runs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SpecReason {
    /// The patch changed this path, of this role.
    Changed(Changed),
    /// This many base tests are not collected at head.
    Gone(usize),
}

/// The base tests to replay, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpecScope {
    /// The whole base suite runs.
    pub(crate) whole: bool,
    /// Why, each once.
    pub(crate) reasons: Vec<SpecReason>,
    /// The base's node ids to run, in the base's collection order.
    pub(crate) tests: Vec<String>,
}

/// The scope of the replay: `changed` the paths the patch changed that matter to the suite,
/// `base_tests` the base's collection (node id, file) in order, `head_ids` the head's. `None`:
/// nothing to replay.
pub(crate) fn scope(
    changed: &[Changed],
    base_tests: &[(String, String)],
    head_ids: &HashSet<&str>,
) -> Option<SpecScope> {
    let mut reasons: BTreeSet<SpecReason> = BTreeSet::new();
    let mut whole = false;
    for c in changed {
        whole |= c.role.reaches_all();
        reasons.insert(SpecReason::Changed(c.clone()));
    }
    let changed_files: HashSet<&str> = changed
        .iter()
        .filter(|c| c.role == SpecRole::TestFile)
        .map(|c| c.path.as_str())
        .collect();
    let mut gone = 0;
    let tests: Vec<String> = base_tests
        .iter()
        .filter(|(id, file)| {
            let absent = !head_ids.contains(id.as_str());
            gone += usize::from(absent);
            whole || absent || changed_files.contains(file.as_str())
        })
        .map(|(id, _)| id.clone())
        .collect();
    if gone > 0 {
        reasons.insert(SpecReason::Gone(gone));
    }
    (!tests.is_empty()).then(|| SpecScope {
        whole,
        reasons: reasons.into_iter().collect(),
        tests,
    })
}

/// `tests` (base node ids, in the base's order) in the head's file order `head_order`: each test
/// the head also runs at its place there, each other one right after the base test before it,
/// so that every test runs after what ran before it at head.
pub(crate) fn in_head_order(tests: &[String], head_order: &[String]) -> Vec<String> {
    let position: std::collections::HashMap<&str, usize> = head_order
        .iter()
        .enumerate()
        .map(|(i, id)| (id.as_str(), i))
        .collect();
    let mut keyed: Vec<((usize, usize), &String)> = Vec::with_capacity(tests.len());
    let mut last = 0;
    for (i, id) in tests.iter().enumerate() {
        if let Some(&p) = position.get(id.as_str()) {
            last = p;
        }
        keyed.push(((last, i), id));
    }
    keyed.sort();
    keyed.into_iter().map(|(_, id)| id.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Vec<(String, String)> {
        [
            ("tests/test_a.py::test_1", "tests/test_a.py"),
            ("tests/test_a.py::test_2", "tests/test_a.py"),
            ("tests/test_b.py::test_3", "tests/test_b.py"),
        ]
        .iter()
        .map(|(i, f)| (i.to_string(), f.to_string()))
        .collect()
    }

    fn changed(path: &str, role: SpecRole) -> Changed {
        Changed {
            path: path.into(),
            role,
        }
    }

    #[test]
    fn a_patch_touching_no_tests_replays_nothing() {
        let ids = base();
        let head: HashSet<&str> = ids.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(scope(&[], &ids, &head), None);
    }

    #[test]
    fn a_test_file_replays_its_tests_and_a_removed_test_itself() {
        let ids = base();
        let mut head: HashSet<&str> = ids.iter().map(|(i, _)| i.as_str()).collect();
        let s = scope(
            &[changed("tests/test_a.py", SpecRole::TestFile)],
            &ids,
            &head,
        )
        .unwrap();
        assert!(!s.whole);
        assert_eq!(
            s.tests,
            ["tests/test_a.py::test_1", "tests/test_a.py::test_2"]
        );
        assert_eq!(
            s.reasons,
            [SpecReason::Changed(changed(
                "tests/test_a.py",
                SpecRole::TestFile
            ))]
        );
        head.remove("tests/test_b.py::test_3");
        let s = scope(&[], &ids, &head).unwrap();
        assert_eq!(s.tests, ["tests/test_b.py::test_3"]);
        assert_eq!(s.reasons, [SpecReason::Gone(1)]);
    }

    #[test]
    fn the_replay_keeps_the_heads_file_order_and_places_the_gone_tests_after_their_neighbour() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // The head reversed two files and dropped c; c runs after b, its base predecessor.
        let tests = s(&["a", "b", "c", "d"]);
        let head = s(&["d", "a", "b", "x"]);
        assert_eq!(in_head_order(&tests, &head), s(&["d", "a", "b", "c"]));
        assert_eq!(in_head_order(&tests, &[]), tests);
    }

    #[test]
    fn what_every_test_runs_under_replays_the_whole_suite() {
        let ids = base();
        let head: HashSet<&str> = ids.iter().map(|(i, _)| i.as_str()).collect();
        for role in [
            SpecRole::Conftest,
            SpecRole::Config,
            SpecRole::Hook,
            SpecRole::TestCode,
            SpecRole::ImportPatch,
        ] {
            let s = scope(&[changed("x", role)], &ids, &head).unwrap();
            assert!(s.whole, "{role:?}");
            assert_eq!(s.tests.len(), 3);
        }
    }
}
