//! Test-source replay read as the decision table: a test the patch edited, run with the base's
//! version of its test file on the head's code.

use crate::pytest::result::Outcome;

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
    pub(crate) fn of(head: Outcome, base_test_code: Option<Outcome>) -> Reading {
        match (head.is_green(), base_test_code) {
            (true, Some(o)) if o.is_green() => Reading::Refactor,
            (true, Some(_)) => Reading::Redefined,
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
        assert_eq!(Reading::of(Passed, Some(Failed)), Reading::Redefined);
        assert_eq!(Reading::of(Passed, Some(Passed)), Reading::Refactor);
        assert_eq!(Reading::of(Failed, Some(Failed)), Reading::Inconclusive);
        assert_eq!(Reading::of(Passed, None), Reading::Inconclusive);
    }
}
