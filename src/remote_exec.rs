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
    let mut pause = Duration::from_millis(50);
    loop {
        match request() {
            Err(fixgate_cache::RemoteError::Busy(_)) if started.elapsed() < BUSY_PATIENCE => {
                on_busy();
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}
