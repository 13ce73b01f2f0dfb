//! When known order-dependence becomes the patch's: the edit replay read as a table.
//!
//! A test the base has that is order-dependent on the base too is known debt. When the patch
//! edits it, the edit may hide part of that debt (an assertion loosened for the orders that
//! broke it) or have nothing to do with it (two assertions about a new function, a `tmp_path`
//! turned into `str(...)`). The base's version of the test is run on the head's code in the
//! orders where the head's version failed, with the base's bytes of its test file:
//!
//! | the base's version, in those orders | reading | the order-dependence is |
//! |---|---|---|
//! | red in every one | `edit-hid-nothing` | known debt, named as edited |
//! | green in one | `edit-changed-the-outcome` | the patch's: its edit decides the outcome there |
//! | not run, or an error (renamed, its base file not importing on the head's code) | `unread` | the patch's, as before |
//!
//! Only a run that shows the base's version failing where the head's fails lets the debt stay
//! the base's; anything less keeps today's rule (the patch edited it, so it is the patch's).

use std::collections::{BTreeSet, HashSet};

use serde::Serialize;

use crate::audit::finding::FindingKind;
use crate::audit::findings::PreExisting;
use crate::audit::order::OrderLabel;
use crate::pytest::result::Outcome;

/// How many of the head's failing orders the base's version runs in.
pub(crate) const ORDERS: usize = 4;

/// The edited tests whose order-dependence the base shows too: the tests the edit replay runs.
/// `order_dependent` the tests with an `order-dependent` finding; `edited` the tests the patch
/// edited; `base_ids` the base's tests (a renamed test is left to today's rule).
pub(crate) fn candidates<'a>(
    order_dependent: impl IntoIterator<Item = &'a String>,
    pre_existing: &PreExisting,
    edited: &BTreeSet<String>,
    base_ids: &HashSet<&str>,
) -> Vec<String> {
    order_dependent
        .into_iter()
        .filter(|id| edited.contains(*id) && base_ids.contains(id.as_str()))
        .filter(|id| pre_existing.contains(&(FindingKind::OrderDependent, (*id).clone())))
        .cloned()
        .collect()
}

/// One order the base's version ran in, where the head's version failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct InOrder {
    pub(crate) order: OrderLabel,
    /// The head's version's outcome there.
    pub(crate) head: Outcome,
    /// The base's version's outcome on the head's code (`None`: it did not run).
    pub(crate) base_version: Option<Outcome>,
}

/// How an edit replay reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// The base's version fails in every order the head's failed in: the edit hid nothing.
    HidNothing,
    /// The base's version passes in one of them: the edit decides the outcome there.
    ChangedTheOutcome,
    /// Nothing ran that could tell.
    Unread,
}

impl Reading {
    /// Reads the base version's outcomes in the head's failing orders. An error says nothing
    /// (its base file may not even import on the head's code, after a rename): only a run that
    /// failed or passed counts.
    pub(crate) fn of(runs: &[InOrder]) -> Reading {
        let ran: Vec<Outcome> = (runs.iter().filter_map(|r| r.base_version))
            .filter(|o| *o != Outcome::Error)
            .collect();
        if ran.is_empty() {
            Reading::Unread
        } else if ran.iter().all(|o| !o.is_green()) {
            Reading::HidNothing
        } else {
            Reading::ChangedTheOutcome
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reading::HidNothing => "edit-hid-nothing",
            Reading::ChangedTheOutcome => "edit-changed-the-outcome",
            Reading::Unread => "unread",
        }
    }
}

impl Serialize for Reading {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One edited test's replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct EditReplay {
    pub(crate) nodeid: String,
    pub(crate) runs: Vec<InOrder>,
    pub(crate) reading: Reading,
}

/// The edited tests whose known order-dependence stays the base's: their edit hid nothing.
pub(crate) fn kept_as_debt(replays: &[EditReplay]) -> BTreeSet<String> {
    replays
        .iter()
        .filter(|r| r.reading == Reading::HidNothing)
        .map(|r| r.nodeid.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::{Failed, Passed};

    fn runs(base: &[Option<Outcome>]) -> Vec<InOrder> {
        base.iter()
            .enumerate()
            .map(|(i, b)| InOrder {
                order: OrderLabel::Seed(i as u64 + 1),
                head: Failed,
                base_version: *b,
            })
            .collect()
    }

    #[test]
    fn the_decision_table() {
        let table = [
            (vec![Some(Failed)], Reading::HidNothing),
            (
                vec![Some(Failed), Some(Outcome::Error)],
                Reading::HidNothing,
            ),
            (vec![Some(Failed), None], Reading::HidNothing),
            (vec![Some(Outcome::Error)], Reading::Unread),
            (vec![Some(Failed), Some(Passed)], Reading::ChangedTheOutcome),
            (vec![Some(Passed)], Reading::ChangedTheOutcome),
            (vec![None], Reading::Unread),
            (vec![], Reading::Unread),
        ];
        for (base, reading) in table {
            assert_eq!(Reading::of(&runs(&base)), reading, "{base:?}");
        }
    }

    #[test]
    fn only_an_edited_base_test_whose_order_dependence_the_base_shows_is_replayed() {
        let ids: Vec<String> = ["t.py::a", "t.py::b", "t.py::c", "t.py::new"]
            .map(String::from)
            .to_vec();
        let pre: PreExisting = ["t.py::a", "t.py::b", "t.py::new"]
            .map(|id| (FindingKind::OrderDependent, id.to_string()))
            .into();
        let edited: BTreeSet<String> = ["t.py::a", "t.py::c", "t.py::new"].map(String::from).into();
        let base: HashSet<&str> = ["t.py::a", "t.py::b", "t.py::c"].into();
        // b is not edited, c's order-dependence is new, new is no base test.
        assert_eq!(candidates(&ids, &pre, &edited, &base), ["t.py::a"]);
    }

    #[test]
    fn only_an_edit_that_hid_nothing_keeps_the_debt() {
        let replay = |id: &str, reading| EditReplay {
            nodeid: id.into(),
            runs: Vec::new(),
            reading,
        };
        let kept = kept_as_debt(&[
            replay("t.py::a", Reading::HidNothing),
            replay("t.py::b", Reading::ChangedTheOutcome),
            replay("t.py::c", Reading::Unread),
        ]);
        assert_eq!(kept, ["t.py::a".to_string()].into());
    }
}
