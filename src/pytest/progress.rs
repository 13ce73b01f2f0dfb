//! What counts as progress of one pytest process, which moves the clocks that bound it: its
//! start, its collection, each test of its order starting and reporting, its session's end; each
//! at most once (a test listed twice, twice). The event stream is written by the run's own
//! process, so it is untrusted: a line repeated, a test it was not given or a second collection
//! moves no clock, and a process that writes without working is still killed at the bound. A
//! process is therefore bounded by its tests times the test timeout, plus a few stretches of it.

use std::collections::HashMap;
use std::time::Duration;

/// Why a process was killed outside any test: it spent longer than the test timeout `doing`
/// something that is no test (an import or a hook that never returns would hold the audit
/// forever).
pub(crate) fn stalled(doing: &str, timeout: Duration) -> String {
    format!(
        "no test ran for --test-timeout {}s while pytest was {doing} (an import, a fixture or a \
         hook that does not return?); killed. Raise --test-timeout if the suite needs longer",
        timeout.as_secs()
    )
}

/// The tests one process is to run and what it has shown of them so far.
pub(crate) struct Progress {
    /// The order, to tell which test follows a finished one (`None` until the process has
    /// collected, when it runs its own collection's order).
    ids: Option<Vec<String>>,
    /// Each test of the order.
    tests: HashMap<String, Listed>,
    started: bool,
    collected: bool,
    finished: bool,
    /// Whether the process said which tests it did not collect.
    uncollected: bool,
}

/// One test of a process's order.
#[derive(Default)]
struct Listed {
    /// Its places in the order (a test listed twice has two).
    places: Vec<usize>,
    /// How many more results it may report, and how many more times it may start.
    results: usize,
    starts: usize,
}

/// A session event that counts once per process.
#[derive(Clone, Copy)]
pub(crate) enum Once {
    Start,
    Collected,
    Finish,
}

impl Progress {
    /// A process given `order`, or (`None`) one that runs what it collects.
    pub(crate) fn new(order: Option<&[String]>) -> Progress {
        let mut p = Progress {
            ids: None,
            tests: HashMap::new(),
            started: false,
            collected: false,
            finished: false,
            uncollected: false,
        };
        if let Some(order) = order {
            p.expect(order.to_vec());
        }
        p
    }

    fn expect(&mut self, order: Vec<String>) {
        for (i, id) in order.iter().enumerate() {
            let t = self.tests.entry(id.clone()).or_default();
            t.places.push(i);
            t.results += 1;
            t.starts += 1;
        }
        self.ids = Some(order);
    }

    /// The session started, collected or ended: progress the first time only.
    pub(crate) fn once(&mut self, what: Once) -> bool {
        let seen = match what {
            Once::Start => &mut self.started,
            Once::Collected => &mut self.collected,
            Once::Finish => &mut self.finished,
        };
        !std::mem::replace(seen, true)
    }

    /// The process collected `ids`: progress the first time only. A process that runs its own
    /// collection's order is expected to run these; one given an order still runs that one.
    pub(crate) fn collected<'a>(&mut self, ids: impl Iterator<Item = &'a str>) -> bool {
        if !self.once(Once::Collected) {
            return false;
        }
        if self.ids.is_none() {
            self.expect(ids.map(str::to_owned).collect());
        }
        true
    }

    /// The process says it did not collect `ids` (a lenient order): the tests of its order
    /// among them, left out of it; none once any test started or reported, and none a second
    /// time. What it says moves no clock.
    pub(crate) fn uncollected(&mut self, ids: &[String]) -> Vec<String> {
        let Some(order) = &self.ids else {
            return Vec::new();
        };
        let untouched = self
            .tests
            .values()
            .all(|t| t.results == t.places.len() && t.starts == t.places.len());
        if !untouched || self.uncollected {
            return Vec::new();
        }
        self.uncollected = true;
        let gone: Vec<String> = ids
            .iter()
            .filter(|id| self.tests.contains_key(*id))
            .cloned()
            .collect();
        if !gone.is_empty() {
            let left: Vec<String> = order
                .iter()
                .filter(|id| !gone.contains(id))
                .cloned()
                .collect();
            self.tests.clear();
            self.expect(left);
        }
        gone
    }

    /// `nodeid` starts: progress when it is a test of the order that has not started as often as
    /// it is listed.
    pub(crate) fn start(&mut self, nodeid: &str) -> bool {
        match self.tests.get_mut(nodeid) {
            Some(t) if t.starts > 0 => {
                t.starts -= 1;
                true
            }
            _ => false,
        }
    }

    /// `nodeid` reported its result: `false` for a test that is not in the order or reported as
    /// often as it is listed already (the result is then no result of this run).
    pub(crate) fn result(&mut self, nodeid: &str) -> bool {
        match self.tests.get_mut(nodeid) {
            Some(t) if t.results > 0 => {
                t.results -= 1;
                // A result implies its start, announced or not.
                t.starts = t.starts.min(t.results);
                true
            }
            _ => false,
        }
    }

    /// Whether `nodeid` is a test of the order still to report: what a session's end may say
    /// was running.
    pub(crate) fn pending(&self, nodeid: &str) -> bool {
        self.tests.get(nodeid).is_some_and(|t| t.results > 0)
    }

    /// The test that follows the last reported run of `nodeid` in the order, when it is still
    /// to run.
    pub(crate) fn after(&self, nodeid: &str) -> Option<&str> {
        let t = self.tests.get(nodeid)?;
        let reported = t.places.len() - t.results;
        let i = t.places.get(reported.checked_sub(1)?)?;
        let next = self.ids.as_ref()?.get(i + 1)?;
        (self.tests.get(next).is_some_and(|n| n.starts > 0)).then_some(next.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_test_of_the_order_progresses_as_often_as_it_is_listed_and_nothing_else_does() {
        let mut p = Progress::new(Some(&ids(&["a", "b", "a"])));
        assert!(p.once(Once::Start));
        assert!(!p.once(Once::Start), "a second start is no progress");
        assert!(p.start("a"));
        assert!(p.result("a"));
        assert_eq!(p.after("a"), Some("b"));
        assert!(!p.result("x"), "a test not given is no result");
        assert!(!p.pending("x") && p.pending("b"));
        assert!(p.result("b"));
        assert_eq!(p.after("b"), Some("a"));
        assert!(p.start("a"), "listed twice: starts twice");
        assert!(!p.start("a"));
        assert!(p.result("a"));
        assert_eq!(p.after("a"), None, "the last of the order");
        assert!(
            !p.result("a"),
            "listed twice: reports twice, not three times"
        );
        assert!(!p.start("b"), "a test that reported does not start again");
        assert!(p.once(Once::Finish));
        assert!(!p.once(Once::Finish));
    }

    #[test]
    fn tests_said_uncollected_leave_the_order_only_before_any_test_and_once() {
        let mut p = Progress::new(Some(&ids(&["a", "x", "b"])));
        assert_eq!(p.uncollected(&ids(&["x", "nope"])), ids(&["x"]));
        assert!(!p.pending("x"));
        assert!(!p.start("x"), "left out: it does not start");
        assert!(p.result("a"));
        assert_eq!(p.after("a"), Some("b"), "the order is what is left");
        assert!(p.uncollected(&ids(&["b"])).is_empty(), "said once");
        let mut late = Progress::new(Some(&ids(&["a", "b"])));
        assert!(late.start("a"));
        assert!(
            late.uncollected(&ids(&["b"])).is_empty(),
            "after a test started, it is no collection's"
        );
        assert!(late.pending("b"));
    }

    #[test]
    fn a_process_that_collects_expects_its_first_collection_only() {
        let mut p = Progress::new(None);
        assert!(!p.start("a"), "nothing is expected before the collection");
        assert!(p.collected(["a", "b"].into_iter()));
        assert!(
            !p.collected(["a", "b", "c"].into_iter()),
            "a second collection"
        );
        assert!(!p.result("c"));
        assert!(p.result("a"));
        assert!(!p.start("a"), "a result implies the start");
        assert_eq!(p.after("a"), Some("b"));
        assert!(p.result("b"));
        assert_eq!(p.after("a"), None, "b reported: it does not run next");
    }

    #[test]
    fn a_process_given_an_order_keeps_it_whatever_it_collects() {
        let mut p = Progress::new(Some(&ids(&["b"])));
        assert!(p.collected(["a", "b"].into_iter()));
        assert!(!p.result("a"));
        assert!(p.result("b"));
    }
}
