//! How many actions an audit has at the service at once: as many as `--jobs` sends while the
//! service takes them; when it answers that it is busy (RESOURCE_EXHAUSTED: BuildGrid takes five
//! RPCs per core at once, and an Execute holds one for as long as its action runs), half of
//! those in flight, then one more for every `limit` actions it ran (additive increase,
//! multiplicative decrease, as TCP paces a connection). A service that is asked less often
//! keeps answering its workers, whose missed keepalives would make it give their actions up.

use std::sync::{Condvar, Mutex, MutexGuard};

pub(crate) struct Pace {
    state: Mutex<State>,
    freed: Condvar,
}

struct State {
    /// Actions allowed at the service at once.
    limit: usize,
    /// Actions at the service now.
    in_flight: usize,
    /// Actions run since the limit last grew.
    ran: usize,
    /// Counts the halvings: a busy answer halves the limit only for an action that entered
    /// after the last halving, so one crowd's answers halve it once.
    generation: u64,
}

/// One action's place at the service (with the generation it entered in), given back when
/// dropped.
pub(crate) struct Slot<'a>(&'a Pace, u64);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.lock().in_flight -= 1;
        self.0.freed.notify_one();
    }
}

/// More than any `--jobs`: the engine's own bound is the one that holds until the service is
/// busy.
const UNBOUNDED: usize = 1 << 20;

impl Pace {
    pub(crate) fn new() -> Pace {
        Pace {
            state: Mutex::new(State {
                limit: UNBOUNDED,
                in_flight: 0,
                ran: 0,
                generation: 0,
            }),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a place at the service.
    pub(crate) fn enter(&self) -> Slot<'_> {
        let mut s = self.lock();
        while s.in_flight >= s.limit {
            s = self.freed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.in_flight += 1;
        Slot(self, s.generation)
    }

    /// The service said it is busy to the action holding `slot`: half of those in flight, once
    /// for the crowd it entered with (their other answers find the limit already halved).
    pub(crate) fn busy(&self, slot: &Slot<'_>) {
        let mut s = self.lock();
        if slot.1 == s.generation {
            s.limit = s.limit.min((s.in_flight / 2).max(1));
            s.generation += 1;
        }
    }

    /// The service ran an action: after `limit` of them, one more may go at once.
    pub(crate) fn ran(&self) {
        let mut s = self.lock();
        s.ran += 1;
        if s.limit < UNBOUNDED && s.ran >= s.limit {
            s.limit += 1;
            s.ran = 0;
        }
        drop(s);
        self.freed.notify_one();
    }

    /// Actions allowed at once now (for the report: `None` while the service was never busy).
    pub(crate) fn limit(&self) -> Option<usize> {
        let s = self.lock();
        (s.limit < UNBOUNDED).then_some(s.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_answer_halves_the_crowd_and_each_limit_of_ran_actions_lets_one_more_go() {
        let pace = Pace::new();
        let slots: Vec<Slot<'_>> = (0..16).map(|_| pace.enter()).collect();
        assert_eq!(pace.limit(), None);
        // Every one of the crowd hears "busy", each leaving as it hears it: halved once.
        for slot in slots {
            pace.busy(&slot);
            drop(slot);
        }
        assert_eq!(pace.limit(), Some(8));
        for _ in 0..7 {
            pace.ran();
        }
        assert_eq!(pace.limit(), Some(8));
        pace.ran();
        assert_eq!(pace.limit(), Some(9));
        // At most `limit` enter at once.
        let held: Vec<Slot<'_>> = (0..9).map(|_| pace.enter()).collect();
        let waiter = std::thread::scope(|scope| {
            let t = scope.spawn(|| {
                let _slot = pace.enter();
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            let waiting = !t.is_finished();
            drop(held);
            t.join().unwrap();
            waiting
        });
        assert!(waiter, "the tenth waited for a place");
        // Busy with one in flight never stops the audit.
        let one = pace.enter();
        pace.busy(&one);
        assert_eq!(pace.limit(), Some(1));
        drop(one);
        let _again = pace.enter();
    }
}
