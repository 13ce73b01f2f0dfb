//! Test-source replay read as the decision table: a test the patch edited, run with the base's
//! version of its test file on the head's code (in the base-suite replay's runs).

use crate::audit::finding::FindingKind;
use crate::pytest::result::Outcome;

/// One edited test run with the base's version of its test file on the head's code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SourceRead {
    pub(crate) nodeid: String,
    /// The base's node id of a test the patch renamed (its base version ran under this name);
    /// `None` for a test edited under its own name.
    pub(crate) renamed_from: Option<String>,
    /// Its outcome at head.
    pub(crate) head: Outcome,
    /// Its outcome with the base's test code; `None` when the base's file did not run it.
    pub(crate) base_test_code: Option<Outcome>,
    pub(crate) reading: Reading,
    /// The lines of the test (or around it) only the base has, and only the head has.
    pub(crate) base_lines: Vec<String>,
    pub(crate) head_lines: Vec<String>,
    /// Why the replay could not decide, for an inconclusive reading of a test green at head.
    pub(crate) undecided: Option<Undecided>,
}

/// Why the replay of an edited test that passes at head could not decide whether the edit moved
/// its expectation. Unless another replay of the test decides, the verdict is `unverified`:
/// an inconclusive replay of an edited test is a hole, not a pass.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Undecided {
    /// The base's file did not run its base version (not collected with the base's file).
    NotRun,
    /// Its base version failed once, and passed on a second run: flaky. (One that fails on the
    /// base too, in the same order, met no demand there and is decided.)
    Unconfirmed,
    /// Its base version fails on a name the head removed or renamed, and its head version
    /// changed besides calling another name.
    NameGone { name: String },
}

impl Undecided {
    /// Why an edited test green at head reads inconclusive: its base version's outcome
    /// (`None`: not run), and the name the head removed or renamed it failed on, if any.
    pub(crate) fn of(base_test_code: Option<Outcome>, gone_name: Option<&str>) -> Undecided {
        match (base_test_code, gone_name) {
            (None, _) => Undecided::NotRun,
            (Some(o), Some(name)) if !o.is_green() => Undecided::NameGone {
                name: name.to_string(),
            },
            _ => Undecided::Unconfirmed,
        }
    }
}

/// How an edited test's replay reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Green with the head's test code, red with the base's on the same code: the expected value
    /// moved with the code, as an answer key would. Rejects.
    Redefined,
    /// Green both ways: the edit did not change what the test demands.
    Refactor,
    /// Red at head, or the base's test did not run (renamed parameters, say): nothing to read.
    Inconclusive,
}

impl Reading {
    /// Reads an edited test: its outcome at head, its base version's outcome on the head's code
    /// (`None`: not run), and whether that red is confirmed (green on the base in the same
    /// order, and red again on a second run): only a confirmed red is the patch's.
    pub(crate) fn of(
        head: Outcome,
        base_test_code: Option<Outcome>,
        confirmed_red: bool,
    ) -> Reading {
        let passes = matches!(head, Outcome::Passed | Outcome::Xpassed);
        match (passes, base_test_code) {
            (true, Some(o)) if o.is_green() => Reading::Refactor,
            (true, Some(_)) if confirmed_red => Reading::Redefined,
            _ => Reading::Inconclusive,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reading::Redefined => "redefined-test",
            Reading::Refactor => "test-refactor",
            Reading::Inconclusive => "inconclusive",
        }
    }

    /// The finding this reading is, if any.
    pub(crate) fn finding(self) -> Option<FindingKind> {
        match self {
            Reading::Redefined => Some(FindingKind::RedefinedTest),
            Reading::Refactor => Some(FindingKind::TestRefactor),
            Reading::Inconclusive => None,
        }
    }
}

impl serde::Serialize for Reading {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Failed, Passed};

    #[test]
    fn the_table() {
        assert_eq!(Reading::of(Passed, Some(Failed), true), Reading::Redefined);
        assert_eq!(Reading::of(Passed, Some(Passed), false), Reading::Refactor);
        assert_eq!(
            Reading::of(Failed, Some(Failed), true),
            Reading::Inconclusive
        );
        assert_eq!(Reading::of(Passed, None, false), Reading::Inconclusive);
        // Red on the base too (or only once): not the patch's.
        assert_eq!(
            Reading::of(Passed, Some(Failed), false),
            Reading::Inconclusive
        );
        // A skipped test does not pass with the head's test code.
        assert_eq!(
            Reading::of(Outcome::Skipped, Some(Failed), true),
            Reading::Inconclusive
        );
    }
}
