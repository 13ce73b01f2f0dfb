//! The fixture decision table: how a coupled test's replay on the base's fixture bytes reads.

use crate::audit::verdict::FindingKind;
use crate::pytest::result::Outcome;

/// One coupled test replayed on head code with the base's fixture bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplayRead {
    pub(crate) nodeid: String,
    /// Its outcome at head, and on the base's fixture bytes (`None`: not replayed, a new test
    /// whose every changed read the patch added: see `crate::engine::replay::to_replay`).
    pub(crate) head: Outcome,
    pub(crate) base: Option<Outcome>,
    pub(crate) reading: Reading,
    /// The changed files the test read, whose base bytes the replay ran it on.
    pub(crate) files: Vec<String>,
}

/// How one replayed test reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// A new test that reads only new fixtures: the fixture is reviewed as new code.
    Additive,
    /// Red at head: the replay says nothing (other findings cover the test).
    Inconclusive,
    /// Green on both fixture versions: the change is cosmetic.
    Cosmetic,
    /// Green on the head's fixtures, red on the base's: the patch redefined the test.
    Redefined,
}

impl Reading {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reading::Additive => "additive",
            Reading::Inconclusive => "inconclusive",
            Reading::Cosmetic => "cosmetic",
            Reading::Redefined => "redefined",
        }
    }

    /// The finding this reading is, if any.
    pub(crate) fn finding(self) -> Option<FindingKind> {
        match self {
            Reading::Redefined => Some(FindingKind::Redefined),
            Reading::Cosmetic => Some(FindingKind::Cosmetic),
            Reading::Additive => Some(FindingKind::Additive),
            Reading::Inconclusive => None,
        }
    }

    /// Reads a replay: `new_test` (the base has no such test), `reads_only_added` (every delta
    /// file it read was added by the patch), and its outcome at head and on the base's bytes.
    pub(crate) fn of(
        new_test: bool,
        reads_only_added: bool,
        head: Outcome,
        on_base: Outcome,
    ) -> Reading {
        if new_test && reads_only_added {
            Reading::Additive
        } else if !head.is_green() {
            Reading::Inconclusive
        } else if on_base.is_green() {
            Reading::Cosmetic
        } else {
            Reading::Redefined
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
    fn the_decision_table() {
        assert_eq!(Reading::of(true, true, Failed, Failed), Reading::Additive);
        assert_eq!(
            Reading::of(false, true, Failed, Passed),
            Reading::Inconclusive
        );
        assert_eq!(Reading::of(false, false, Passed, Passed), Reading::Cosmetic);
        assert_eq!(Reading::of(true, false, Passed, Failed), Reading::Redefined);
        assert_eq!(Reading::of(false, true, Passed, Failed), Reading::Redefined);
    }
}
