//! When the next audit may start: once the tree has been quiet for a while after a change (an
//! editor's save is several events: a temporary file, a rename, an attribute change), and at
//! the latest some time after the first change, so that a file rewritten without pause still
//! gets audited.

use std::time::{Duration, Instant};

/// The debounce clock of the changes since the last audit started.
#[derive(Debug)]
pub(crate) struct Debounce {
    quiet: Duration,
    longest: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Debounce {
    /// Fires `quiet` after the last change, and no later than `longest` after the first.
    pub(crate) fn new(quiet: Duration, longest: Duration) -> Debounce {
        Debounce {
            quiet,
            longest: longest.max(quiet),
            first: None,
            last: None,
        }
    }

    /// A change at `now`.
    pub(crate) fn touch(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// How long until the changes are due: `None` with no change pending, zero when due.
    pub(crate) fn remaining(&self, now: Instant) -> Option<Duration> {
        let (first, last) = (self.first?, self.last?);
        let due = (last + self.quiet).min(first + self.longest);
        Some(due.saturating_duration_since(now))
    }

    /// Takes the pending changes when they are due.
    pub(crate) fn fire(&mut self, now: Instant) -> bool {
        match self.remaining(now) {
            Some(d) if d.is_zero() => {
                self.first = None;
                self.last = None;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn fires_once_the_tree_is_quiet() {
        let t = Instant::now();
        let mut d = Debounce::new(100 * MS, 2000 * MS);
        assert_eq!(d.remaining(t), None, "nothing pending");
        d.touch(t);
        d.touch(t + 60 * MS);
        assert_eq!(d.remaining(t + 100 * MS), Some(60 * MS));
        assert!(!d.fire(t + 159 * MS));
        assert!(d.fire(t + 160 * MS));
        assert_eq!(d.remaining(t + 200 * MS), None, "taken");
    }

    #[test]
    fn a_file_rewritten_without_pause_is_audited_after_the_longest_wait() {
        let t = Instant::now();
        let mut d = Debounce::new(100 * MS, 500 * MS);
        for i in 0..20 {
            d.touch(t + i * 50 * MS);
            if i * 50 < 500 {
                assert!(!d.fire(t + i * 50 * MS), "at {} ms", i * 50);
            }
        }
        assert!(d.fire(t + 500 * MS));
    }
}
