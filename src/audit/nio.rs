//! Non-idempotent tests: the reading of a test run twice in a row in one process (the `nio`
//! order, `--nio`) and of the runs that confirm it. A test that passes and then fails when it
//! runs again pollutes its own state; that is proven only when it does so every time.

use crate::audit::proof::PROOF_RERUNS;
use crate::pytest::result::Outcome;

/// A test's two runs in a row in one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Twice {
    pub(crate) first: Outcome,
    /// `None` when the second run never reported (the first one ended the process).
    pub(crate) second: Option<Outcome>,
}

impl Twice {
    /// Passed the first time and was red the second: it broke its own state.
    pub(crate) fn breaks_itself(self) -> bool {
        self.first == Outcome::Passed && self.second.is_some_and(|o| !o.is_green())
    }
}

/// What the nio order says about a test that broke itself there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Idempotence {
    /// Passed then failed in the nio order and in each of [`PROOF_RERUNS`] runs of the test
    /// twice by itself: `non-idempotent`.
    NonIdempotent,
    /// Passed then failed in the nio order, but not on every rerun by itself: not proven, and
    /// no finding (chance, or the nio order's prefix of tests run twice, broke it there).
    Unreproduced,
}

impl Idempotence {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Idempotence::NonIdempotent => "non-idempotent",
            Idempotence::Unreproduced => "unreproduced",
        }
    }
}

/// Reads a test's runs in the nio order (`nio`) and its reruns twice by itself. `None`: the nio
/// order showed nothing (it did not pass and then fail there).
pub(crate) fn read(nio: Twice, reruns: &[Twice]) -> Option<Idempotence> {
    if !nio.breaks_itself() {
        return None;
    }
    if reruns.len() >= PROOF_RERUNS && reruns.iter().all(|t| t.breaks_itself()) {
        Some(Idempotence::NonIdempotent)
    } else {
        Some(Idempotence::Unreproduced)
    }
}

/// Whether the head's reruns of a suspect are done: one that did not break itself settles it
/// (it is not proven, whatever more reruns would say), and so do [`PROOF_RERUNS`] that did.
pub(crate) fn head_settled(reruns: &[Twice]) -> bool {
    reruns.len() >= PROOF_RERUNS || reruns.iter().any(|t| !t.breaks_itself())
}

/// Whether the base's runs of a non-idempotent test are done: one showed it, or
/// [`PROOF_RERUNS`] did not.
pub(crate) fn base_settled(reruns: &[Twice]) -> bool {
    reruns.len() >= PROOF_RERUNS || base_shows(reruns)
}

/// Whether the base's runs of the test twice show it too: one pass-then-fail is enough to make
/// the finding pre-existing; the base check stops there, or after [`PROOF_RERUNS`] runs.
pub(crate) fn base_shows(reruns: &[Twice]) -> bool {
    reruns.iter().any(|t| t.breaks_itself())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::*;

    fn twice(first: Outcome, second: Outcome) -> Twice {
        Twice {
            first,
            second: Some(second),
        }
    }

    #[test]
    fn only_pass_then_fail_breaks_itself() {
        assert!(twice(Passed, Failed).breaks_itself());
        assert!(twice(Passed, Error).breaks_itself());
        assert!(twice(Passed, Crashed).breaks_itself());
        for (a, b) in [
            (Passed, Passed),
            (Failed, Failed),
            (Failed, Passed),
            (Skipped, Failed),
            (Passed, Skipped),
        ] {
            assert!(!twice(a, b).breaks_itself(), "{a:?} then {b:?}");
        }
        let no_second = Twice {
            first: Passed,
            second: None,
        };
        assert!(!no_second.breaks_itself());
    }

    #[test]
    fn non_idempotent_needs_pass_then_fail_on_every_rerun() {
        let broke = twice(Passed, Failed);
        assert_eq!(
            read(broke, &[broke; PROOF_RERUNS]),
            Some(Idempotence::NonIdempotent)
        );
        // One rerun passed both times: a coin flip, not a test that breaks itself.
        let mut reruns = vec![broke; PROOF_RERUNS];
        reruns[1] = twice(Passed, Passed);
        assert_eq!(read(broke, &reruns), Some(Idempotence::Unreproduced));
        // Agreeing, but fewer reruns than the proof takes.
        assert_eq!(
            read(broke, &[broke; PROOF_RERUNS - 1]),
            Some(Idempotence::Unreproduced)
        );
        assert_eq!(read(broke, &[]), Some(Idempotence::Unreproduced));
    }

    #[test]
    fn a_test_that_did_not_break_itself_in_the_nio_order_reads_as_nothing() {
        let broke = twice(Passed, Failed);
        for nio in [twice(Passed, Passed), twice(Failed, Failed)] {
            assert_eq!(read(nio, &[broke; PROOF_RERUNS]), None);
        }
    }

    #[test]
    fn the_head_stops_at_the_first_rerun_that_disagrees_and_the_base_at_the_first_that_shows_it() {
        let broke = twice(Passed, Failed);
        let clean = twice(Passed, Passed);
        assert!(!head_settled(&[broke]));
        assert!(head_settled(&[broke, clean]));
        assert!(head_settled(&[broke; PROOF_RERUNS]));
        assert!(!base_shows(&[clean, clean]));
        assert!(base_shows(&[clean, broke]));
        assert!(!base_settled(&[clean, clean]));
        assert!(base_settled(&[clean, broke]));
        assert!(base_settled(&[clean; PROOF_RERUNS]));
    }
}
