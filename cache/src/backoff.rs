//! Pauses between tries: the one retry policy of fixgate's loops that wait something out (the
//! trace index locked by another process, a remote service that answers busy, a worker's
//! session). Each pause doubles from a first to a last; jittered, it is drawn from half to one
//! and a half times that, so that processes that collided do not collide again in step; within
//! a patience, the pauses add up to at most it (the last one cut to what is left) and then stop.
//!
//! The patience counts the pauses, not the clock: a loop whose tries themselves take long (an
//! action that ran for minutes before the service answered busy) is not charged for them. A
//! loop that is bounded by the clock says so where it decides what it tries again.
//!
//! Written here rather than taken from `backon`: its jitter adds up to one more pause (the
//! trace index has always drawn from half to one and a half), and its retry combinator wants
//! the loop to be "call until it works", where fixgate's loops also count answers, change their
//! messages and follow a stream between tries; they use the pauses alone.

use std::time::Duration;

/// The pauses of one retry loop (see the module documentation).
#[derive(Clone, Debug)]
pub struct Backoff {
    /// The nominal length of the next pause.
    next: Duration,
    last: Duration,
    jitter: bool,
    /// What the pauses may still add up to (`None`: no bound).
    left: Option<Duration>,
    /// The pauses given so far, added up.
    paused: Duration,
}

impl Backoff {
    /// Pauses that double from `first` up to `last`, without end.
    pub fn new(first: Duration, last: Duration) -> Backoff {
        Backoff {
            next: first,
            last: last.max(first),
            jitter: false,
            left: None,
            paused: Duration::ZERO,
        }
    }

    /// Each pause drawn from half to one and a half times its nominal length.
    pub fn jittered(mut self) -> Backoff {
        self.jitter = true;
        self
    }

    /// Pauses that add up to at most `patience`: the last one is cut to what is left, and none
    /// follows it.
    pub fn within(mut self, patience: Duration) -> Backoff {
        self.left = Some(patience);
        self
    }

    /// The next pause, without sleeping it; `None` once the patience is spent.
    pub fn next_pause(&mut self) -> Option<Duration> {
        let nominal = self.next;
        self.next = (nominal * 2).min(self.last);
        let mut pause = match self.jitter {
            true => nominal.mul_f64(0.5 + fastrand::f64()),
            false => nominal,
        };
        if let Some(left) = &mut self.left {
            if left.is_zero() {
                return None;
            }
            pause = pause.min(*left);
            *left -= pause;
        }
        self.paused += pause;
        Some(pause)
    }

    /// Sleeps the next pause and says how long it was; `None`, without sleeping, once the
    /// patience is spent.
    pub fn pause(&mut self) -> Option<Duration> {
        let pause = self.next_pause()?;
        std::thread::sleep(pause);
        Some(pause)
    }

    /// The pauses given so far, added up.
    pub fn paused(&self) -> Duration {
        self.paused
    }

    /// `attempt` until it succeeds or fails in a way `again` does not try again, pausing
    /// between tries; once the patience is spent, the last failure.
    pub fn retry<T, E>(
        mut self,
        mut attempt: impl FnMut() -> Result<T, E>,
        mut again: impl FnMut(&E) -> bool,
    ) -> Result<T, E> {
        loop {
            match attempt() {
                Err(e) if again(&e) && self.pause().is_some() => {}
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn pauses_double_from_the_first_up_to_the_last_without_end() {
        let mut b = Backoff::new(ms(1), ms(4));
        let pauses: Vec<Duration> = (0..6).map(|_| b.next_pause().unwrap()).collect();
        assert_eq!(pauses, [ms(1), ms(2), ms(4), ms(4), ms(4), ms(4)]);
        assert_eq!(b.paused(), ms(19));
        let mut constant = Backoff::new(ms(50), ms(50));
        assert_eq!(constant.next_pause(), Some(ms(50)));
        assert_eq!(constant.next_pause(), Some(ms(50)));
    }

    #[test]
    fn within_a_patience_the_pauses_add_up_to_it_and_stop() {
        let mut b = Backoff::new(ms(100), ms(400)).within(ms(1000));
        let mut pauses = Vec::new();
        while let Some(p) = b.next_pause() {
            pauses.push(p);
        }
        // 100 + 200 + 400, then 300 of the next 400.
        assert_eq!(pauses, [ms(100), ms(200), ms(400), ms(300)]);
        assert_eq!(b.paused(), ms(1000));
        assert_eq!(b.next_pause(), None, "spent stays spent");
        assert_eq!(
            Backoff::new(ms(1), ms(1))
                .within(Duration::ZERO)
                .next_pause(),
            None
        );
    }

    #[test]
    fn a_jittered_pause_is_half_to_one_and_a_half_times_its_nominal_length() {
        let mut b = Backoff::new(ms(100), ms(100)).jittered();
        let pauses: Vec<Duration> = (0..200).map(|_| b.next_pause().unwrap()).collect();
        assert!(
            pauses.iter().all(|p| *p >= ms(50) && *p < ms(150)),
            "{pauses:?}"
        );
        assert!(
            pauses.iter().any(|p| *p != pauses[0]),
            "jitter varies: {pauses:?}"
        );
        let total: Duration = pauses.iter().sum();
        assert_eq!(b.paused(), total);
        // Cut to the patience like any other pause.
        let mut b = Backoff::new(ms(100), ms(100)).jittered().within(ms(120));
        let pauses: Vec<Duration> = std::iter::from_fn(|| b.next_pause()).collect();
        assert!((1..=3).contains(&pauses.len()), "{pauses:?}");
        assert_eq!(pauses.iter().sum::<Duration>(), ms(120), "{pauses:?}");
    }

    #[test]
    fn retry_tries_again_only_what_it_is_told_and_gives_the_last_failure_once_patient_enough() {
        // Succeeds on the third try.
        let mut tries = 0;
        let got: Result<u32, &str> = Backoff::new(ms(1), ms(1)).retry(
            || {
                tries += 1;
                if tries < 3 {
                    Err("busy")
                } else {
                    Ok(tries)
                }
            },
            |e| *e == "busy",
        );
        assert_eq!(got, Ok(3));
        // A failure it is not told to try again ends it at once.
        let mut tries = 0;
        let got: Result<(), &str> = Backoff::new(ms(1), ms(1)).retry(
            || {
                tries += 1;
                Err("broken")
            },
            |e| *e == "busy",
        );
        assert_eq!((got, tries), (Err("broken"), 1));
        // Busy for ever: the tries its patience allows (pauses of 1, 2, 2 ms: four tries).
        let mut tries = 0;
        let got: Result<(), &str> = Backoff::new(ms(1), ms(2)).within(ms(5)).retry(
            || {
                tries += 1;
                Err("busy")
            },
            |e| *e == "busy",
        );
        assert_eq!((got, tries), (Err("busy"), 4));
    }
}
