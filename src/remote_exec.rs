//! Remote execution: an audit's pytest runs as REAPI actions on an existing service (BuildGrid,
//! Buildbarn, BuildBuddy, EngFlow, NativeLink), and `fixgate worker`, a bot for small setups
//! and the tests. See docs/remote-execution.md.

use std::time::{Duration, Instant};

pub(crate) mod action;
pub(crate) mod bots;
pub(crate) mod client;
pub(crate) mod merkle;
pub(crate) mod pace;
pub(crate) mod worker;

/// How long a CAS request is asked again while the service is busy (more requests than it
/// takes at once: BuildGrid's Execute calls hold its threads while their actions run), before
/// it fails.
const BUSY_PATIENCE: Duration = Duration::from_secs(120);

/// `request`, asked again with growing pauses while the service answers that it is busy
/// (`on_busy` hears each such answer).
pub(crate) fn patient<T>(
    mut request: impl FnMut() -> std::result::Result<T, fixgate_cache::RemoteError>,
    mut on_busy: impl FnMut(),
) -> std::result::Result<T, fixgate_cache::RemoteError> {
    let started = Instant::now();
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        match request() {
            Err(fixgate_cache::RemoteError::Busy(_)) if started.elapsed() < BUSY_PATIENCE => {
                on_busy();
                backoff.sleep();
            }
            other => return other,
        }
    }
}

/// Pauses that double from `first` up to `last`: how a busy service is asked again.
pub(crate) struct Backoff {
    pause: Duration,
    last: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, last: Duration) -> Backoff {
        Backoff { pause: first, last }
    }

    /// Sleeps the next pause and says how long it was.
    pub(crate) fn sleep(&mut self) -> Duration {
        let pause = self.pause;
        std::thread::sleep(pause);
        self.pause = (pause * 2).min(self.last);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_pauses_double_up_to_the_last() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(1), ms(4));
        let pauses: Vec<Duration> = (0..5).map(|_| b.sleep()).collect();
        assert_eq!(pauses, [ms(1), ms(2), ms(4), ms(4), ms(4)]);
    }
}
