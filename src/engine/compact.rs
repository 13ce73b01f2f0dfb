//! Runs as the audit keeps them once read: each test a small integer, each outcome a byte, and
//! only the few details later steps ask for. A cold audit of 8,000 tests reads ten or more runs
//! of 8,000 results each (traces, phases, timings); holding them whole would cost tens of
//! megabytes for answers that fit in a few hundred kilobytes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::pytest::events::StateChange;
use crate::pytest::outside::OutsideWrite;
use crate::pytest::result::{Outcome, RunResult};

/// Test node ids, each stored once and named by its index.
#[derive(Default)]
pub(crate) struct TestIds {
    ids: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
}

impl TestIds {
    /// The index of `nodeid`, adding it when new.
    pub(crate) fn intern(&mut self, nodeid: &str) -> u32 {
        if let Some(&i) = self.index.get(nodeid) {
            return i;
        }
        let i = u32::try_from(self.ids.len()).expect("fewer than 4 billion tests");
        let id: Arc<str> = Arc::from(nodeid);
        self.ids.push(id.clone());
        self.index.insert(id, i);
        i
    }

    /// The index of `nodeid`, if it was ever interned.
    pub(crate) fn get(&self, nodeid: &str) -> Option<u32> {
        self.index.get(nodeid).copied()
    }

    /// The node id at `i`.
    pub(crate) fn name(&self, i: u32) -> &str {
        &self.ids[i as usize]
    }

    /// Every node id, by index.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.ids.iter().map(|s| &**s).collect()
    }

    /// The table whose [`TestIds::names`] are `names`.
    pub(crate) fn from_names(names: Vec<String>) -> TestIds {
        let mut ids = TestIds::default();
        for n in names {
            ids.intern(&n);
        }
        ids
    }
}

/// What the audit keeps of one run. (Ordered maps: the bytes of a cached matrix node must be
/// the same for the same runs.)
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct CompactRun {
    /// The requested order.
    order: Vec<u32>,
    /// Per test index, its outcome in this run (`None`: not run).
    outcomes: Vec<Option<Outcome>>,
    /// The message of each test that was not green.
    messages: BTreeMap<u32, String>,
    /// The fixture groups each test changed without holding their lease.
    violations: BTreeMap<u32, Vec<String>>,
    /// The suite's own reruns of each test that had any (pytest-rerunfailures and the like).
    reruns: BTreeMap<u32, u32>,
    /// The shared state each test left changed, in a run that recorded it.
    state: BTreeMap<u32, Vec<StateChange>>,
    pub(crate) warnings: Vec<String>,
    /// pytest processes the run took.
    pub(crate) processes: u32,
    /// What the run's tests (and its session) wrote outside the sandbox.
    pub(crate) outside: Vec<OutsideWrite>,
}

impl CompactRun {
    /// Keeps what the audit reads of `run`, its node ids interned in `ids`.
    pub(crate) fn of(run: &RunResult, ids: &mut TestIds) -> CompactRun {
        let mut out = CompactRun {
            order: run.order.iter().map(|id| ids.intern(id)).collect(),
            warnings: run.warnings.clone(),
            processes: run.processes,
            outside: crate::pytest::outside::outside_writes(run),
            ..CompactRun::default()
        };
        for t in &run.tests {
            let i = ids.intern(&t.nodeid);
            let slot = i as usize;
            if out.outcomes.len() <= slot {
                out.outcomes.resize(slot + 1, None);
            }
            // A test listed twice keeps its first result, as `RunResult::test` reads it.
            if out.outcomes[slot].is_some() {
                continue;
            }
            out.outcomes[slot] = Some(t.outcome);
            if !t.outcome.is_green() {
                if let Some(m) = &t.message {
                    out.messages.insert(i, m.clone());
                }
            }
            if !t.violations.is_empty() {
                out.violations
                    .insert(i, t.violations.iter().map(|v| v.group.clone()).collect());
            }
            if t.reruns > 0 {
                out.reruns.insert(i, t.reruns);
            }
            if !t.state.is_empty() {
                out.state.insert(i, t.state.clone());
            }
        }
        out
    }

    /// The outcome of test `i`, if it ran.
    pub(crate) fn outcome(&self, i: u32) -> Option<Outcome> {
        self.outcomes.get(i as usize).copied().flatten()
    }

    /// The requested order, as node ids.
    pub(crate) fn order(&self, ids: &TestIds) -> Vec<String> {
        self.order.iter().map(|&i| ids.name(i).to_owned()).collect()
    }

    /// The first `end` tests of the requested order, as node ids (all of them when it is
    /// shorter).
    pub(crate) fn prefix<'a>(
        &'a self,
        end: usize,
        ids: &'a TestIds,
    ) -> impl Iterator<Item = &'a str> {
        self.order[..end.min(self.order.len())]
            .iter()
            .map(|&i| ids.name(i))
    }

    /// Where test `i` stands in the requested order.
    pub(crate) fn position(&self, i: u32) -> Option<usize> {
        self.order.iter().position(|&o| o == i)
    }

    pub(crate) fn message(&self, i: u32) -> Option<&str> {
        self.messages.get(&i).map(String::as_str)
    }

    pub(crate) fn violations(&self, i: u32) -> &[String] {
        self.violations.get(&i).map_or(&[], Vec::as_slice)
    }

    pub(crate) fn reruns(&self, i: u32) -> u32 {
        self.reruns.get(&i).copied().unwrap_or(0)
    }

    pub(crate) fn state(&self, i: u32) -> &[StateChange] {
        self.state.get(&i).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pytest::lease::Violation;
    use crate::pytest::result::TestResult;

    fn result(nodeid: &str, outcome: Outcome) -> TestResult {
        TestResult::missing(nodeid, outcome, format!("{nodeid} said so"), 0.0, 0.0)
    }

    #[test]
    fn a_compact_run_answers_what_the_whole_run_did() {
        let mut passed = result("t.py::a", Outcome::Passed);
        passed.reruns = 2;
        let mut failed = result("t.py::b", Outcome::Failed);
        failed.violations.push(Violation {
            files: Vec::new(),
            group: "data".into(),
        });
        let run: RunResult = serde_json::from_value(serde_json::json!({
            "executed": ["t.py::b", "t.py::a"],
            "order": ["t.py::b", "t.py::a", "t.py::c"],
            "processes": 1,
            "session_trace": {},
            "tests": [failed, passed],
            "warnings": ["w"],
        }))
        .unwrap();
        let mut ids = TestIds::default();
        let before = ids.intern("t.py::a");
        let c = CompactRun::of(&run, &mut ids);
        assert_eq!(ids.get("t.py::a"), Some(before));
        let (a, b, c_id) = (
            before,
            ids.get("t.py::b").unwrap(),
            ids.get("t.py::c").unwrap(),
        );
        assert_eq!(c.outcome(a), Some(Outcome::Passed));
        assert_eq!(c.outcome(b), Some(Outcome::Failed));
        assert_eq!(c.outcome(c_id), None, "ordered but never reported");
        assert_eq!(c.order(&ids), ["t.py::b", "t.py::a", "t.py::c"]);
        assert_eq!(c.position(a), Some(1));
        // Only a red test's message is kept.
        assert_eq!(c.message(b), Some("t.py::b said so"));
        assert_eq!(c.message(a), None);
        assert_eq!(c.violations(b), ["data".to_string()]);
        assert!(c.violations(a).is_empty());
        assert_eq!((c.reruns(a), c.reruns(b)), (2, 0));
        assert_eq!(c.warnings, ["w"]);
    }
}
