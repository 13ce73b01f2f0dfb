//! The fixture decision table: how a coupled test's replay on the base's fixture bytes reads.

use crate::audit::finding::FindingKind;
use crate::delta::ChangedFile;
use crate::pytest::result::Outcome;

/// What the fixture replay found: the tests coupled to the delta, how each replayed test reads,
/// and the files in no fixture group that coupling found through the trace (the patch changed
/// them, a test read them).
#[derive(Clone, Debug, Default)]
pub(crate) struct FixtureReplay {
    pub(crate) coupled: Vec<String>,
    pub(crate) replay: Vec<ReplayRead>,
    pub(crate) traced: Vec<ChangedFile>,
}

/// One coupled test replayed on head code with the base's fixture bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplayRead {
    pub(crate) nodeid: String,
    /// Its outcome at head, and on the base's fixture bytes (`None`: not run there, a new test
    /// whose every changed read the patch added (see `crate::engine::replay::to_replay`), or a
    /// test the base's bytes do not make).
    pub(crate) head: Outcome,
    pub(crate) base: Option<Outcome>,
    pub(crate) reading: Reading,
    /// The changed files the test read, whose base bytes the replay ran it on.
    pub(crate) files: Vec<String>,
}

/// How one replayed test reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// A new test that reads only new fixtures, or one the base's fixture bytes do not make (a
    /// case the patch added to a data file): the fixture is reviewed as new code.
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
    /// file it read was added by the patch), and its outcome at head and on the base's bytes
    /// (`None`: the base's bytes do not make it).
    pub(crate) fn of(
        new_test: bool,
        reads_only_added: bool,
        head: Outcome,
        on_base: Option<Outcome>,
    ) -> Reading {
        if new_test && reads_only_added {
            return Reading::Additive;
        }
        match on_base {
            _ if !head.is_green() => Reading::Inconclusive,
            None if new_test => Reading::Additive,
            // A test of the base's that the base's bytes no longer make on the head's code:
            // it exists because of the patch's bytes, as good as red on the base's (else a
            // conftest that drops it from a run on the base's bytes would hide a redefinition).
            None => Reading::Redefined,
            Some(o) if o.is_green() => Reading::Cosmetic,
            Some(_) => Reading::Redefined,
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
        // (new test, reads only added files, at head, on the base's bytes) → reading. Not
        // made by the base's bytes (None): a new case is reviewed as new code, an old test is
        // redefined, one red at head says nothing.
        let table = [
            ((true, true, Failed, None), Reading::Additive),
            ((false, true, Failed, Some(Passed)), Reading::Inconclusive),
            ((false, false, Passed, Some(Passed)), Reading::Cosmetic),
            ((true, false, Passed, Some(Failed)), Reading::Redefined),
            ((false, true, Passed, Some(Failed)), Reading::Redefined),
            ((true, false, Passed, None), Reading::Additive),
            ((false, false, Passed, None), Reading::Redefined),
            ((true, false, Failed, None), Reading::Inconclusive),
        ];
        for ((new, added, head, base), reading) in table {
            assert_eq!(
                Reading::of(new, added, head, base),
                reading,
                "{new} {added} {head:?} {base:?}"
            );
        }
    }
}
