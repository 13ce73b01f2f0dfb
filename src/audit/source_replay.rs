//! Test-source replay read as the decision table: a test the patch edited, run with the base's
//! version of its test file on the head's code (in the base-suite replay's runs).

use crate::pytest::events::Outcome;

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
