//! What counts as progress of one pytest process, which moves the clocks that bound it: its
//! start, its collection, each test of its order starting and reporting, its session's end; each
//! at most once (a test listed twice, twice). The event stream is written by the run's own
//! process, so it is untrusted: a line repeated, a test it was not given or a second collection
//! moves no clock, and a process that writes without working is still killed at the bound. A
//! process is therefore bounded by its tests times the test timeout, plus a few stretches of it.

use std::collections::HashMap;

/// The tests one process is to run and what it has shown of them so far.
pub(crate) struct Progress {
    /// The order, to tell which test follows a finished one (`None` until the process has
    /// collected, when it runs its own collection's order).
    ids: Option<Vec<String>>,
    /// Where each id stands in `ids` (every place, for an id listed twice).
    places: HashMap<String, Vec<usize>>,
    /// How many more results each test may report.
    results: HashMap<String, usize>,
    /// How many more times each test may start.
    starts: HashMap<String, usize>,
    started: bool,
    collected: bool,
    finished: bool,
}

/// A session event that counts once per process.
#[derive(Clone, Copy)]
pub(crate) enum Once {
    Start,
    Finish,
}

impl Progress {
    /// A process given `order`, or (`None`) one that runs what it collects.
    pub(crate) fn new(order: Option<&[String]>) -> Progress {
        let mut p = Progress {
            ids: None,
            places: HashMap::new(),
            results: HashMap::new(),
            starts: HashMap::new(),
            started: false,
            collected: false,
            finished: false,
        };
        if let Some(order) = order {
            p.expect(order);
        }
        p
    }

    fn expect(&mut self, order: &[String]) {
        for (i, id) in order.iter().enumerate() {
            self.places.entry(id.clone()).or_default().push(i);
            *self.results.entry(id.clone()).or_default() += 1;
        }
        self.starts = self.results.clone();
        self.ids = Some(order.to_vec());
    }

    /// The session started or ended: progress the first time only.
    pub(crate) fn once(&mut self, what: Once) -> bool {
        let seen = match what {
            Once::Start => &mut self.started,
            Once::Finish => &mut self.finished,
        };
        !std::mem::replace(seen, true)
    }

    /// The process collected `ids`: progress the first time only. A process that runs its own
    /// collection's order is expected to run these; one given an order still runs that one.
    pub(crate) fn collected(&mut self, ids: &[String]) -> bool {
        if std::mem::replace(&mut self.collected, true) {
            return false;
        }
        if self.ids.is_none() {
            self.expect(ids);
        }
        true
    }

    /// `nodeid` starts: progress when it is a test of the order that has not started as often as
    /// it is listed.
    pub(crate) fn start(&mut self, nodeid: &str) -> bool {
        take(&mut self.starts, nodeid)
    }

    /// `nodeid` reported its result: `false` for a test that is not in the order or reported as
    /// often as it is listed already (the result is then no result of this run).
    pub(crate) fn result(&mut self, nodeid: &str) -> bool {
        if !take(&mut self.results, nodeid) {
            return false;
        }
        // A result implies its start, announced or not.
        let left = self.results[nodeid];
        if let Some(s) = self.starts.get_mut(nodeid) {
            *s = (*s).min(left);
        }
        true
    }

    /// Whether `nodeid` is a test of the order still to report: what a session's end may say
    /// was running.
    pub(crate) fn pending(&self, nodeid: &str) -> bool {
        self.results.get(nodeid).is_some_and(|n| *n > 0)
    }

    /// The test that follows the last reported run of `nodeid` in the order, when it is still
    /// to run.
    pub(crate) fn after(&self, nodeid: &str) -> Option<&str> {
        let places = self.places.get(nodeid)?;
        let reported = places.len() - self.results.get(nodeid).copied().unwrap_or(0);
        let i = places.get(reported.checked_sub(1)?)?;
        let next = self.ids.as_ref()?.get(i + 1)?;
        (self.starts.get(next).copied().unwrap_or(0) > 0).then_some(next.as_str())
    }
}

/// Takes one from `id`'s count: `false` when none is left.
fn take(counts: &mut HashMap<String, usize>, id: &str) -> bool {
    match counts.get_mut(id) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
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
    fn a_process_that_collects_expects_its_first_collection_only() {
        let mut p = Progress::new(None);
        assert!(!p.start("a"), "nothing is expected before the collection");
        assert!(p.collected(&ids(&["a", "b"])));
        assert!(!p.collected(&ids(&["a", "b", "c"])), "a second collection");
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
        assert!(p.collected(&ids(&["a", "b"])));
        assert!(!p.result("a"));
        assert!(p.result("b"));
    }
}
