//! Hidden failures: the base-suite replay read as a table. The base's suite is the spec: what
//! the base's tests demand of the base's code, the head's code must still satisfy, unless the
//! head visibly changed the demand.
//!
//! # The rule
//!
//! Each base test the replay runs is run twice in the same order: with the base's test files,
//! conftests and configuration on the head's code (the *replay*), and on the base (the
//! *control*). A test that fails in the replay and passes in the control is a demand of the base
//! that the head's code no longer meets. When the head's own suite shows that failure (the same
//! test, or what it became, is red at head), other findings say so; when it does not, the patch
//! hid it, and the finding is named after how:
//!
//! | what became of the base test at head | finding |
//! |---|---|
//! | its function is gone, or its row of a parametrization | `deleted-test` (not blocking when its failure is a name the head removed: the feature went with its test) |
//! | collected, then taken out of the session (`-k`, `--deselect`, a `pytest_collection_modifyitems` hook) | `deselected-test` |
//! | not collected while its function is still there, its file unchanged (configuration, `collect_ignore`, `-p no:…`) | `deselected-test` |
//! | not collected while its function is still there, its file changed (`test_x` → `check_x`, `test_m.py` → `m_checks.py`, `__test__ = False`, moved out of `testpaths`) | `uncollected-test` |
//! | skipped (its module too, at collection) | `skipped-test` |
//! | xfailed | `xfailed-test` |
//! | passes, its definition changed (or a helper of the tests did) | `redefined-test` |
//! | passes, its definition the same, a conftest, the configuration or a hook changed | `hook-altered-outcome` |
//!
//! A test that fails in the control too says nothing of the head (it fails on the base in that
//! order); nor does a kept test whose base version fails on a name the head removed (its file
//! imports a function the patch deleted with another test). A base test deleted at head that passes on the head's code is no finding: the report
//! lists it as deleted.
//!
//! Beside the replay, the plugin's own record (see `docs/plugin-protocol.md`) shows a test whose
//! reported outcome a hook made green while the test failed: `hook-altered-outcome` too.

use crate::audit::finding::{Finding, FindingKind};
use crate::pytest::result::Outcome;

/// What became of a base test at head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AtHead {
    /// Collected at head under the same node id, with its outcome there.
    Present(Outcome),
    /// Collected at head under another node id (renamed, moved), with its outcome there.
    Renamed { nodeid: String, outcome: Outcome },
    /// Collected at head, then taken out of the session.
    Deselected,
    /// Not collected at head, its function still in the head's tree at `at` (`file::name`).
    Uncollected { at: String },
    /// Its function is gone from the head's tree.
    Deleted,
}

impl AtHead {
    /// What became of a base test, from what the head's collection and sources say: `present`
    /// its outcome at head when the head collected it under its own id; `renamed` the head
    /// test it became and that one's outcome; `deselected` whether the head's collection
    /// dropped it; `function_at` where its function is in the head's tree.
    pub(crate) fn of(
        present: Option<Outcome>,
        renamed: Option<(String, Outcome)>,
        deselected: bool,
        function_at: Option<String>,
    ) -> AtHead {
        match (present, renamed, deselected, function_at) {
            (Some(o), _, _, _) => AtHead::Present(o),
            (None, Some((nodeid, outcome)), _, _) => AtHead::Renamed { nodeid, outcome },
            (None, None, true, _) => AtHead::Deselected,
            (None, None, false, Some(at)) => AtHead::Uncollected { at },
            (None, None, false, None) => AtHead::Deleted,
        }
    }

    /// The head's outcome of the test (or of what it became), when the head ran it.
    pub(crate) fn outcome(&self) -> Option<Outcome> {
        match self {
            AtHead::Present(o) | AtHead::Renamed { outcome: o, .. } => Some(*o),
            _ => None,
        }
    }
}

/// What the patch changed around a base test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Around {
    /// Its definition changed (see `crate::testsrc`), or the test code it may import did.
    pub(crate) edited: bool,
    /// Its test file differs (or is gone).
    pub(crate) file_changed: bool,
    /// A conftest, the pytest configuration, the plugin list or a `pytest_*` hook changed.
    pub(crate) session_changed: bool,
}

/// How a hidden failure was hidden: the finding's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum How {
    Deleted,
    Deselected,
    Uncollected,
    Skipped,
    Xfailed,
    Redefined,
    HookAltered,
}

impl How {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            How::Deleted => "deleted-test",
            How::Deselected => "deselected-test",
            How::Uncollected => "uncollected-test",
            How::Skipped => "skipped-test",
            How::Xfailed => "xfailed-test",
            How::Redefined => "redefined-test",
            How::HookAltered => "hook-altered-outcome",
        }
    }
}

/// How one replayed base test reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Green on the head's code with the base's test code: the demand holds.
    Holds,
    /// Red there and red at head too: the head's suite shows the failure.
    Shown,
    /// Red in the control too: no demand the base met in this order.
    BaseFails,
    /// Red on the head's code, green on the base, and not shown at head.
    Hidden(How),
    /// A deleted test whose failure is a name the head removed: the feature went with it.
    DeletedWithItsCode,
    /// A test the head kept whose base version fails on a name the head removed (its file
    /// imports it): its demand cannot be read on the head's code, and the head shows it passing.
    CodeRemoved,
    /// Red once, and green on the second replay or red in the second control: flaky, no proof.
    Unconfirmed,
    /// A test whose code, helpers and session the patch left alone, red with the base's file and
    /// green with the head's, and red again in the head's file with the tests the patch added
    /// taken out: its green at head is what the new tests before it leave behind (a serial
    /// chain's new step), not a moved expectation. See [`Reading::may_depend_on_new`].
    /// `serial_chain`: a chain by design, the new test a new step of it (reported, reviewed as
    /// new code): the test and every new test it depends on are marked `serial` (kept in their
    /// places in every order), or all request one fixture wider than a test (a module-scoped
    /// store they build on). Otherwise the dependence is the patch's defect: a test of the base
    /// now needs a new test to run first.
    DependsOnNew { serial_chain: bool },
}

impl Reading {
    /// Reads one test: what became of it at head, what the patch changed around it, its
    /// outcome in the replay, in the control (`None`: not run, since the replay was green), and
    /// whether the replay's failure names something the head removed.
    pub(crate) fn of(
        at_head: &AtHead,
        around: Around,
        replay: Outcome,
        control: Option<Outcome>,
        code_removed: bool,
    ) -> Reading {
        if replay.is_green() {
            return Reading::Holds;
        }
        if !control.is_some_and(Outcome::is_green) {
            return Reading::BaseFails;
        }
        let how = match at_head {
            AtHead::Present(o) | AtHead::Renamed { outcome: o, .. } => match o {
                Outcome::Skipped => How::Skipped,
                Outcome::Xfailed => How::Xfailed,
                Outcome::Passed | Outcome::Xpassed
                    if around.edited || matches!(at_head, AtHead::Renamed { .. }) =>
                {
                    How::Redefined
                }
                Outcome::Passed | Outcome::Xpassed if around.session_changed => How::HookAltered,
                Outcome::Passed | Outcome::Xpassed => How::Redefined,
                _ => return Reading::Shown,
            },
            AtHead::Deselected => How::Deselected,
            AtHead::Uncollected { .. } if around.file_changed => How::Uncollected,
            AtHead::Uncollected { .. } => How::Deselected,
            AtHead::Deleted if code_removed => return Reading::DeletedWithItsCode,
            AtHead::Deleted => How::Deleted,
        };
        // What the base version fails on is gone with the feature: unreadable, not hidden.
        if code_removed && !matches!(how, How::Skipped | How::Xfailed) {
            return Reading::CodeRemoved;
        }
        Reading::Hidden(how)
    }

    /// Whether a reading may be a test's dependence on the patch's new tests rather than a
    /// moved expectation: `redefined-test` for a test present at head whose code, helpers,
    /// data and session the patch left alone (`around`), so that what differs between the
    /// base's file and the head's is other tests. The engine then runs the head's file without
    /// the new tests; [`Reading::after_without_new`] reads it.
    pub(crate) fn may_depend_on_new(self, at_head: &AtHead, around: Around) -> bool {
        self == Reading::Hidden(How::Redefined)
            && matches!(at_head, AtHead::Present(_))
            && !around.edited
            && !around.session_changed
    }

    /// A [`Reading::may_depend_on_new`] test read again after the head's file ran without the
    /// patch's new tests (`without_new`: its outcome there; `None`: not run). Red there: its
    /// green at head needs them, [`Reading::DependsOnNew`]. Green there: the head's own file
    /// makes it pass where the base's fails, and the reading stands. `serial_chain`: it and the
    /// new tests before it are all marked `serial`.
    pub(crate) fn after_without_new(
        self,
        without_new: Option<Outcome>,
        serial_chain: bool,
    ) -> Reading {
        match without_new {
            Some(o) if !o.is_green() => Reading::DependsOnNew { serial_chain },
            _ => self,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reading::Holds => "holds",
            Reading::Shown => "shown-at-head",
            Reading::BaseFails => "fails-on-base",
            Reading::Hidden(how) => how.as_str(),
            Reading::DeletedWithItsCode => "deleted-with-its-code",
            Reading::CodeRemoved => "code-removed",
            Reading::Unconfirmed => "unconfirmed",
            Reading::DependsOnNew { serial_chain: true } => "new-chain-step",
            Reading::DependsOnNew {
                serial_chain: false,
            } => "depends-on-new-test",
        }
    }

    /// The finding this reading is, if any.
    pub(crate) fn finding(self) -> Option<FindingKind> {
        Some(match self {
            Reading::Hidden(How::Deleted) => FindingKind::DeletedTest,
            Reading::Hidden(How::Deselected) => FindingKind::DeselectedTest,
            Reading::Hidden(How::Uncollected) => FindingKind::UncollectedTest,
            Reading::Hidden(How::Skipped) => FindingKind::SkippedTest,
            Reading::Hidden(How::Xfailed) => FindingKind::XfailedTest,
            Reading::Hidden(How::Redefined) => FindingKind::RedefinedTest,
            Reading::Hidden(How::HookAltered) => FindingKind::HookAlteredOutcome,
            Reading::DeletedWithItsCode => FindingKind::DeletedWithItsCode,
            Reading::DependsOnNew { serial_chain: true } => FindingKind::NewChainStep,
            Reading::DependsOnNew {
                serial_chain: false,
            } => FindingKind::DependsOnNewTest,
            _ => return None,
        })
    }
}

impl serde::Serialize for Reading {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl AtHead {
    /// What became of the test, in one word: `present`, `renamed`, `deselected`, `uncollected`
    /// or `deleted`.
    pub(crate) fn word(&self) -> &'static str {
        match self {
            AtHead::Present(_) => "present",
            AtHead::Renamed { .. } => "renamed",
            AtHead::Deselected => "deselected",
            AtHead::Uncollected { .. } => "uncollected",
            AtHead::Deleted => "deleted",
        }
    }

    /// What it became (renamed), or where its function is (uncollected).
    pub(crate) fn where_now(&self) -> Option<&str> {
        match self {
            AtHead::Renamed { nodeid, .. } => Some(nodeid),
            AtHead::Uncollected { at } => Some(at),
            _ => None,
        }
    }
}

/// One base test the base-suite replay ran, read.
#[derive(Clone, Debug)]
pub(crate) struct Replayed {
    pub(crate) nodeid: String,
    pub(crate) at_head: AtHead,
    /// Its outcome with the base's test code on the head's code.
    pub(crate) replay: Outcome,
    /// Its outcome in the control (the same order on the base), when the replay was red.
    pub(crate) control: Option<Outcome>,
    pub(crate) reading: Reading,
    /// The replay's failure, or its file's collection error.
    pub(crate) failure: Option<String>,
    /// The base's lines of the test, for the message.
    pub(crate) base_lines: Vec<String>,
    /// For an uncollected test: the option of the head's configuration its new place misses,
    /// with that option's value.
    pub(crate) missed_rule: Option<(&'static str, Vec<String>)>,
    /// The files its repro checks out from the base: its test file, and the conftests and
    /// configuration the patch changed.
    pub(crate) repro_files: Vec<String>,
    /// An edited test whose reading is the test-source replay's (`redefined-test`,
    /// `test-refactor`): no finding of its own here.
    pub(crate) edited_candidate: bool,
    /// For [`Reading::DependsOnNew`]: the tests the patch added that run before it in its file
    /// at head, in that order.
    pub(crate) depends_on: Vec<String>,
}

/// A test the plugin saw fail while pytest, by a hook's doing, reported it green.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Altered {
    pub(crate) nodeid: String,
    /// What it raised.
    pub(crate) outcome: Outcome,
    /// What pytest's report claimed.
    pub(crate) reported: Outcome,
    pub(crate) message: Option<String>,
}

/// What the base-suite replay and the test-source replay read from its runs found, with the
/// tests a hook made look green.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpecReplay {
    /// The base-suite replay, when the patch touched what the base's tests are made of.
    pub(crate) base_suite: Option<BaseSuiteRead>,
    /// The edited tests run with the base's version of their test code.
    pub(crate) source_replay: Vec<crate::audit::source_replay::SourceRead>,
    pub(crate) altered: Vec<Altered>,
    /// Whether the patch changed what every test runs under (a conftest, the pytest
    /// configuration or plugins, a `pytest_*` hook).
    pub(crate) session_changed: bool,
}

/// What the base-suite replay found.
#[derive(Clone, Debug, Default)]
pub(crate) struct BaseSuiteRead {
    /// It ran the whole base suite.
    pub(crate) whole: bool,
    /// Why it ran.
    pub(crate) reasons: Vec<crate::audit::spec_scope::SpecReason>,
    /// How many base tests it ran.
    pub(crate) ran: usize,
    /// The tests whose reading is not `holds`, and the base tests the head does not have.
    pub(crate) tests: Vec<Replayed>,
    /// The two commits, for the repro (`None`: the working tree, or no commit).
    pub(crate) base_commit: Option<String>,
    pub(crate) head_commit: Option<String>,
}

/// The findings of the replay and of the plugin's record: each hidden failure (a test the
/// test-source replay reads aside), each test deleted with its code, each test a hook made
/// look green (the patch's when it changed what every test runs under or the test).
pub(crate) fn findings(
    read: Option<&BaseSuiteRead>,
    altered: &[Altered],
    session_changed: bool,
    edited: &std::collections::BTreeSet<String>,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = read
        .into_iter()
        .flat_map(|r| &r.tests)
        .filter(|t| !t.edited_candidate)
        .filter_map(|t| {
            Some(Finding {
                kind: t.reading.finding()?,
                subject: t.nodeid.clone(),
                introduced: true,
                edited_by_patch: edited.contains(&t.nodeid),
            })
        })
        .collect();
    out.extend(altered.iter().map(|a| Finding {
        kind: FindingKind::HookAlteredOutcome,
        subject: a.nodeid.clone(),
        introduced: session_changed || edited.contains(&a.nodeid),
        edited_by_patch: edited.contains(&a.nodeid),
    }));
    out
}

/// Whether a hook made a failing test look green: its outcome (what it raised) is red and what
/// pytest's reports claimed is green.
pub(crate) fn hook_altered(outcome: Outcome, reported: Option<Outcome>) -> bool {
    !outcome.is_green() && reported.is_some_and(Outcome::is_green)
}

/// What a failure says is missing: a module, or a name (a function, a class, an attribute).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Missing {
    /// `No module named 'a.b'`: the dotted name.
    Module(String),
    /// `cannot import name 'x'`, `has no attribute 'x'`, `name 'x' is not defined`.
    Name(String),
}

/// What the failure message `message` says is missing, when it says so: Python's own words
/// for an import, an attribute or a name that does not exist.
pub(crate) fn missing(message: &str) -> Option<Missing> {
    let quoted = |after: &str| -> Option<String> {
        let rest = message.split_once(after)?.1.trim_start();
        let q = rest.chars().next().filter(|c| matches!(c, '\'' | '"'))?;
        let inner = &rest[1..];
        Some(inner[..inner.find(q)?].to_string())
    };
    if let Some(m) = quoted("No module named") {
        return Some(Missing::Module(m));
    }
    ["cannot import name", "has no attribute", "name "]
        .iter()
        .filter(|p| **p != "name " || message.contains("is not defined"))
        .find_map(|p| quoted(p))
        .filter(|n| !n.is_empty())
        .map(Missing::Name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Failed, Passed, Skipped, Xfailed};

    const EDITED: Around = Around {
        edited: true,
        file_changed: true,
        session_changed: false,
    };
    const SESSION: Around = Around {
        edited: false,
        file_changed: false,
        session_changed: true,
    };

    fn hidden(at: AtHead, around: Around) -> Reading {
        Reading::of(&at, around, Failed, Some(Passed), false)
    }

    #[test]
    fn a_green_replay_holds_and_a_red_control_says_nothing() {
        for at in [AtHead::Present(Passed), AtHead::Deleted, AtHead::Deselected] {
            assert_eq!(
                Reading::of(&at, EDITED, Passed, None, false),
                Reading::Holds
            );
            assert_eq!(
                Reading::of(&at, EDITED, Failed, Some(Failed), false),
                Reading::BaseFails
            );
            assert_eq!(
                Reading::of(&at, EDITED, Failed, None, false),
                Reading::BaseFails
            );
        }
        // Skipped in the replay (the base's own skip) is no failure either.
        assert_eq!(
            Reading::of(&AtHead::Present(Passed), EDITED, Skipped, None, false),
            Reading::Holds
        );
    }

    #[test]
    fn a_failure_the_head_shows_is_not_hidden() {
        assert_eq!(hidden(AtHead::Present(Failed), EDITED), Reading::Shown);
        let renamed = AtHead::Renamed {
            nodeid: "t.py::test_b".into(),
            outcome: Outcome::Error,
        };
        assert_eq!(hidden(renamed, EDITED), Reading::Shown);
    }

    #[test]
    fn each_way_of_hiding_has_its_name() {
        let h = |at, around| match hidden(at, around) {
            Reading::Hidden(how) => how.as_str(),
            other => panic!("{other:?}"),
        };
        assert_eq!(h(AtHead::Deleted, EDITED), "deleted-test");
        assert_eq!(h(AtHead::Deselected, SESSION), "deselected-test");
        let at = || AtHead::Uncollected {
            at: "t.py::check_x".into(),
        };
        assert_eq!(h(at(), EDITED), "uncollected-test");
        assert_eq!(
            h(at(), SESSION),
            "deselected-test",
            "configuration, collect_ignore"
        );
        assert_eq!(h(AtHead::Present(Skipped), EDITED), "skipped-test");
        assert_eq!(h(AtHead::Present(Skipped), SESSION), "skipped-test");
        assert_eq!(h(AtHead::Present(Xfailed), EDITED), "xfailed-test");
        assert_eq!(h(AtHead::Present(Passed), EDITED), "redefined-test");
        assert_eq!(h(AtHead::Present(Passed), SESSION), "hook-altered-outcome");
        let renamed = AtHead::Renamed {
            nodeid: "t.py::test_b".into(),
            outcome: Passed,
        };
        assert_eq!(h(renamed, SESSION), "redefined-test");
        // A helper of the tests changed: the test's own code is the same, its demand not.
        assert_eq!(
            h(AtHead::Present(Passed), Around::default()),
            "redefined-test"
        );
    }

    #[test]
    fn an_unchanged_test_red_without_the_new_tests_depends_on_them() {
        let present = AtHead::Present(Passed);
        let file_only = Around {
            edited: false,
            file_changed: true,
            session_changed: false,
        };
        let r = hidden(present.clone(), file_only);
        assert!(r.may_depend_on_new(&present, file_only));
        let chain = r.after_without_new(Some(Failed), true);
        assert_eq!(chain, Reading::DependsOnNew { serial_chain: true });
        assert_eq!(chain.finding(), Some(FindingKind::NewChainStep));
        assert!(!FindingKind::NewChainStep.is_defect());
        // Outside a serial chain, a base test that now needs a new test first is a defect.
        let needs = r.after_without_new(Some(Failed), false);
        assert_eq!(needs.finding(), Some(FindingKind::DependsOnNewTest));
        assert!(FindingKind::DependsOnNewTest.is_defect());
        // Green without them: the head's file itself makes it pass; not run: no evidence.
        assert_eq!(r.after_without_new(Some(Passed), true), r);
        assert_eq!(r.after_without_new(None, true), r);
        // An edited test, a changed session, a renamed test: their own readings stand.
        for around in [EDITED, SESSION] {
            let r = hidden(present.clone(), around);
            assert!(!r.may_depend_on_new(&present, around), "{around:?}");
        }
        let renamed = AtHead::Renamed {
            nodeid: "t.py::test_b".into(),
            outcome: Passed,
        };
        assert!(!hidden(renamed.clone(), file_only).may_depend_on_new(&renamed, file_only));
    }

    #[test]
    fn a_test_deleted_with_the_code_it_exercised_does_not_block() {
        assert_eq!(
            Reading::of(&AtHead::Deleted, EDITED, Failed, Some(Passed), true),
            Reading::DeletedWithItsCode
        );
        assert_eq!(
            Reading::DeletedWithItsCode.as_str(),
            "deleted-with-its-code"
        );
        // A kept test whose base file imports the removed code cannot be read; a skipped one
        // is no feature removal.
        assert_eq!(
            Reading::of(&AtHead::Present(Passed), EDITED, Failed, Some(Passed), true),
            Reading::CodeRemoved
        );
        assert_eq!(
            Reading::of(
                &AtHead::Present(Skipped),
                EDITED,
                Failed,
                Some(Passed),
                true
            ),
            Reading::Hidden(How::Skipped)
        );
    }

    #[test]
    fn what_became_of_a_base_test_is_read_in_order() {
        let renamed = Some(("t.py::test_b".to_string(), Passed));
        assert_eq!(
            AtHead::of(Some(Skipped), renamed.clone(), true, None),
            AtHead::Present(Skipped)
        );
        assert_eq!(
            AtHead::of(None, renamed, true, None).outcome(),
            Some(Passed)
        );
        assert_eq!(
            AtHead::of(None, None, true, Some("t.py::test_a".into())),
            AtHead::Deselected
        );
        assert_eq!(
            AtHead::of(None, None, false, Some("t.py::check_a".into())),
            AtHead::Uncollected {
                at: "t.py::check_a".into()
            }
        );
        assert_eq!(AtHead::of(None, None, false, None), AtHead::Deleted);
        assert_eq!(AtHead::Deleted.outcome(), None);
    }

    #[test]
    fn a_hook_that_greens_a_failure_is_an_alteration() {
        assert!(hook_altered(Failed, Some(Passed)));
        assert!(hook_altered(Outcome::Error, Some(Skipped)));
        assert!(!hook_altered(Failed, None));
        assert!(!hook_altered(Outcome::Error, Some(Failed)));
        assert!(!hook_altered(Passed, Some(Failed)));
    }

    #[test]
    fn missing_names_are_read_from_pythons_own_words() {
        let m = |s: &str| missing(s);
        assert_eq!(
            m("ImportError: cannot import name 'slugify' from 'pkg.text' (/x/pkg/text.py)"),
            Some(Missing::Name("slugify".into()))
        );
        assert_eq!(
            m("ModuleNotFoundError: No module named 'pkg.legacy'"),
            Some(Missing::Module("pkg.legacy".into()))
        );
        assert_eq!(
            m("AttributeError: module 'pkg.text' has no attribute 'slugify'"),
            Some(Missing::Name("slugify".into()))
        );
        assert_eq!(
            m("AttributeError: 'Doc' object has no attribute \"toc\""),
            Some(Missing::Name("toc".into()))
        );
        assert_eq!(
            m("NameError: name 'slugify' is not defined"),
            Some(Missing::Name("slugify".into()))
        );
        assert_eq!(m("assert 'a' == 'b'"), None);
        assert_eq!(m("KeyError: 'name'"), None);
    }
}
