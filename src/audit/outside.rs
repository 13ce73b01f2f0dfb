//! Writes outside the sandbox, read as findings: who made them (a test, or the session:
//! collection, conftest imports, session fixtures) and whether they are the patch's.

use std::collections::{BTreeMap, BTreeSet};

use crate::pytest::outside::OutsideWrite;

/// The subject of what was done outside any test: collection, conftest imports, session fixtures.
pub(crate) const SESSION: &str = "(collection and session fixtures)";

/// What each test (`None`: outside any test) did outside its sandbox, as `op path` lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OutsideWrites(BTreeMap<Option<String>, BTreeSet<String>>);

impl OutsideWrites {
    pub(crate) fn of<'a>(writes: impl IntoIterator<Item = &'a OutsideWrite>) -> OutsideWrites {
        let mut out: BTreeMap<Option<String>, BTreeSet<String>> = BTreeMap::new();
        for w in writes {
            out.entry(w.nodeid.clone())
                .or_default()
                .insert(format!("{} {}", w.op, w.path));
        }
        OutsideWrites(out)
    }

    /// The tests that wrote outside their sandbox (what the base is checked for).
    pub(crate) fn writers(&self) -> Vec<String> {
        self.0.keys().flatten().cloned().collect()
    }

    /// Each finding's subject ([`SESSION`] first, then the tests, sorted) and whether it is the
    /// patch's: a test's is unless the base's test does it too (`pre_existing`); the session's
    /// is when the patch changed a conftest.py.
    pub(crate) fn subjects(
        &self,
        pre_existing: impl Fn(&str) -> bool,
        session_code_changed: bool,
    ) -> Vec<(String, bool)> {
        self.0
            .keys()
            .map(|nodeid| match nodeid {
                Some(id) => (id.clone(), !pre_existing(id)),
                None => (SESSION.to_string(), session_code_changed),
            })
            .collect()
    }

    /// The `op path` lines of a finding's subject (a test, or [`SESSION`]).
    pub(crate) fn of_subject(&self, subject: &str) -> Vec<&str> {
        let key = (subject != SESSION).then(|| subject.to_string());
        self.0
            .get(&key)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect()
    }
}
