//! Remote execution: an audit's pytest runs as REAPI actions on an existing service (BuildGrid,
//! Buildbarn, BuildBuddy, EngFlow, NativeLink), and `fixgate worker`, a bot for small setups
//! and the tests. See docs/remote-execution.md.

use std::time::Duration;

use fixgate_cache::{Backoff, RemoteError};

pub(crate) mod action;
pub(crate) mod action_dir;
pub(crate) mod bot;
pub(crate) mod bots;
pub(crate) mod client;
pub(crate) mod merkle;
pub(crate) mod operation;
pub(crate) mod outputs;
pub(crate) mod pace;
pub(crate) mod settings;
pub(crate) mod summary;
pub(crate) mod worker;

/// How long a CAS request is asked again while the service is busy (more requests than it
/// takes at once: BuildGrid's Execute calls hold its threads while their actions run), before
/// it fails.
const BUSY_PATIENCE: Duration = Duration::from_secs(120);

/// `request`, asked again with growing pauses (50 ms doubling up to 2 s, for up to
/// [`BUSY_PATIENCE`] of them) while the service answers that it is busy (`on_busy` hears each
/// such answer).
pub(crate) fn patient<T>(
    request: impl FnMut() -> std::result::Result<T, RemoteError>,
    mut on_busy: impl FnMut(),
) -> std::result::Result<T, RemoteError> {
    Backoff::new(Duration::from_millis(50), Duration::from_secs(2))
        .within(BUSY_PATIENCE)
        .retry(request, |e| {
            let busy = matches!(e, RemoteError::Busy(_));
            if busy {
                on_busy();
            }
            busy
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_answer_is_heard_and_asked_again_and_any_other_answer_is_final() {
        let mut answers = vec![
            Err(RemoteError::Busy("RESOURCE_EXHAUSTED".into())),
            Err(RemoteError::Busy("RESOURCE_EXHAUSTED".into())),
            Ok(7),
        ]
        .into_iter();
        let mut heard = 0;
        let got = patient(
            || answers.next().expect("asked once too often"),
            || heard += 1,
        );
        assert_eq!((got.ok(), heard), (Some(7), 2));
        let mut asked = 0;
        let got: std::result::Result<(), RemoteError> = patient(
            || {
                asked += 1;
                Err(RemoteError::Transport("connection refused".into()))
            },
            || panic!("not busy"),
        );
        assert!(matches!(got, Err(RemoteError::Transport(_))));
        assert_eq!(asked, 1);
    }
}
