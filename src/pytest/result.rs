//! The model of an ordered run, as the driver builds it from the plugin's events: the run, each
//! test's result and outcome. Cached (postcard) and reported (JSON) as it is.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::pytest::events::{ChangedPath, CodeRan, Phase, StateChange, TestEvent, Trace};
use crate::pytest::lease::Violation;
/// Every run, report and judgment speaks of a test's outcome; it lives below them all.
pub(crate) use crate::test_outcome::Outcome;

/// One ordered run. (No `PartialEq`: the lazily built `index` would make two equal results
/// differ by whether one was looked into.)
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunResult {
    /// The order that executed, as the plugin recorded it.
    pub(crate) executed: Vec<String>,
    /// The plugin hit an internal error while tracing: some accesses may be missing, so the
    /// run must be treated as depending on the whole tree.
    #[serde(default)]
    pub(crate) incomplete_trace: bool,
    /// Node id → position in `tests`, built on first use (audits look tests up thousands of
    /// times).
    #[serde(skip)]
    index: std::sync::OnceLock<HashMap<String, usize>>,
    /// The requested order.
    pub(crate) order: Vec<String>,
    /// How many pytest processes the run took (more than one after a crash or a timeout).
    pub(crate) processes: u32,
    /// Why the code the run was to record is not known, when it is not.
    #[serde(default)]
    pub(crate) recording_error: Option<String>,
    /// The repository's code that ran outside any test, in a run that recorded code (`None`:
    /// not recorded, or not known).
    #[serde(default)]
    pub(crate) session_code: Option<CodeRan>,
    /// File accesses outside any test (collection, session fixtures).
    pub(crate) session_trace: Trace,
    pub(crate) tests: Vec<TestResult>,
    /// Tests of the requested order that the run's tree did not collect, in a run that records
    /// them (`Record::uncollected`: the replay on the base's fixture bytes; any other run
    /// fails): they have no result, and `order` no longer lists them.
    #[serde(default)]
    pub(crate) uncollected: Vec<String>,
    pub(crate) warnings: Vec<String>,
}

impl RunResult {
    /// A run of `order` before any process reported.
    pub(crate) fn empty(order: Vec<String>) -> RunResult {
        RunResult {
            order,
            executed: Vec::new(),
            tests: Vec::new(),
            uncollected: Vec::new(),
            processes: 0,
            recording_error: None,
            session_code: None,
            session_trace: Trace::default(),
            warnings: Vec::new(),
            incomplete_trace: false,
            index: Default::default(),
        }
    }

    /// The same run with other tests, in `order` (a carried run, `crate::engine::carry`):
    /// what executed is the tests' sequence.
    pub(crate) fn with_tests(self, order: Vec<String>, tests: Vec<TestResult>) -> RunResult {
        RunResult {
            executed: tests.iter().map(|t| t.nodeid.clone()).collect(),
            order,
            tests,
            index: Default::default(),
            ..self
        }
    }

    pub(crate) fn outcome_of(&self, nodeid: &str) -> Option<Outcome> {
        self.test(nodeid).map(|t| t.outcome)
    }

    /// The result of one test. Call only once `tests` is final.
    pub(crate) fn test(&self, nodeid: &str) -> Option<&TestResult> {
        self.position(nodeid).map(|i| &self.tests[i])
    }

    /// The second run of a test the order listed twice in a row (the nio order).
    pub(crate) fn again(&self, nodeid: &str) -> Option<&TestResult> {
        let first = self.position(nodeid)?;
        self.tests
            .get(first + 1)
            .filter(|t| t.nodeid == nodeid && t.occurrence == 1)
    }

    /// Where a test's (first) result is in `tests`.
    fn position(&self, nodeid: &str) -> Option<usize> {
        let index = self.index.get_or_init(|| {
            let mut index = HashMap::with_capacity(self.tests.len());
            for (i, t) in self.tests.iter().enumerate() {
                // A test run twice in a row (the nio order) is its first run here; the second
                // is `again`'s.
                index.entry(t.nodeid.clone()).or_insert(i);
            }
            index
        });
        index.get(nodeid).copied()
    }
}

/// One test's result in one run.
///
/// The fields of the types in a run report are declared in sorted order, so that serializing
/// them directly gives sorted keys (see `cmd::run`, where a test pins it).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct TestResult {
    pub(crate) changed: Vec<ChangedPath>,
    /// The repository's code the test ran, in a run that recorded it (`None`: not recorded, or
    /// not known).
    #[serde(default)]
    pub(crate) code: Option<CodeRan>,
    /// Wall-clock seconds since the epoch, like `start`.
    pub(crate) end: f64,
    pub(crate) message: Option<String>,
    pub(crate) nodeid: String,
    /// Which run of the test this is in a run that lists it twice in a row (the nio order): 0
    /// the first, 1 the second. Always written: run outputs are also kept in postcard, which
    /// has no field names and cannot skip one.
    #[serde(default)]
    pub(crate) occurrence: u32,
    pub(crate) outcome: Outcome,
    pub(crate) phases: BTreeMap<String, Phase>,
    /// What pytest's reports claimed when a hook (a conftest's `pytest_runtest_makereport`, a
    /// `pytest_runtest_call` wrapper) made them greener than what the test raised; `outcome` is
    /// what it raised.
    #[serde(default)]
    pub(crate) reported: Option<Outcome>,
    pub(crate) reruns: u32,
    pub(crate) skip_reason: Option<String>,
    /// Wall-clock seconds since the epoch: timing fields, excluded from comparisons.
    pub(crate) start: f64,
    /// Shared state it left changed, in a run that recorded it.
    #[serde(default)]
    pub(crate) state: Vec<StateChange>,
    pub(crate) trace: Trace,
    pub(crate) violations: Vec<Violation>,
    pub(crate) writes_marker: Vec<String>,
}

impl TestResult {
    /// A result for a test whose process died or was killed before it reported.
    pub(crate) fn missing(
        nodeid: &str,
        outcome: Outcome,
        message: String,
        start: f64,
        end: f64,
    ) -> TestResult {
        TestResult {
            nodeid: nodeid.to_owned(),
            occurrence: 0,
            outcome,
            phases: BTreeMap::new(),
            reported: None,
            message: Some(message),
            skip_reason: None,
            reruns: 0,
            writes_marker: Vec::new(),
            start,
            end,
            code: None,
            state: Vec::new(),
            trace: Trace::default(),
            changed: Vec::new(),
            violations: Vec::new(),
        }
    }

    /// The result a test's event reports; its violations are judged later, against the groups.
    pub(crate) fn from_event(t: TestEvent) -> TestResult {
        TestResult {
            outcome: Outcome::parse(&t.outcome),
            nodeid: t.nodeid,
            occurrence: 0,
            phases: t.phases,
            reported: t.reported.as_deref().map(Outcome::parse),
            message: t.message,
            skip_reason: t.skip_reason,
            reruns: t.reruns,
            writes_marker: t.writes_marker,
            start: t.start,
            end: t.end,
            trace: t.trace,
            changed: t.changed,
            code: t.code.filter(|_| !t.code_unknown),
            state: t.state,
            violations: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(tests: &[(&str, u32, Outcome)]) -> RunResult {
        RunResult {
            executed: tests.iter().map(|(id, _, _)| id.to_string()).collect(),
            incomplete_trace: false,
            index: Default::default(),
            order: tests.iter().map(|(id, _, _)| id.to_string()).collect(),
            processes: 1,
            recording_error: None,
            session_code: None,
            session_trace: Trace::default(),
            tests: tests
                .iter()
                .map(|&(id, occurrence, outcome)| TestResult {
                    occurrence,
                    ..TestResult::missing(id, outcome, String::new(), 0.0, 0.0)
                })
                .collect(),
            uncollected: Vec::new(),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_test_run_twice_in_a_row_is_its_first_run_and_its_second_is_again() {
        let r = result(&[
            ("t::a", 0, Outcome::Passed),
            ("t::a", 1, Outcome::Failed),
            ("t::b", 0, Outcome::Passed),
            ("t::b", 1, Outcome::Passed),
        ]);
        assert_eq!(r.outcome_of("t::a"), Some(Outcome::Passed));
        assert_eq!(r.again("t::a").map(|t| t.outcome), Some(Outcome::Failed));
        assert_eq!(r.again("t::b").map(|t| t.outcome), Some(Outcome::Passed));
        // A test that ran once has no second run.
        let once = result(&[("t::a", 0, Outcome::Passed), ("t::b", 0, Outcome::Failed)]);
        assert!(once.again("t::a").is_none() && once.again("t::b").is_none());
        assert!(once.again("t::c").is_none());
    }
}
