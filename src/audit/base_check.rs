//! How a run on the base reads: whether it shows a head finding too (then the finding is
//! pre-existing). Which run checks which finding is the engine's; what counts as showing it is
//! here.

use crate::audit::bisect::PairKind;
use crate::audit::finding::FindingKind;
use crate::audit::pair::Pair;
use crate::audit::scope::Impact;
use crate::pytest::result::{Outcome, RunResult};

/// Whether the base check of `pair` (its victim and culprits the base's tests) needs no run:
/// its victim gives the same outcome in every order of the base, by the base's recording
/// (`Impact::base_sensitive`), so no culprit set shows an anomaly of it there: what the head
/// shows of it is the patch's. The premise is the scoped audit's own: a test that reads no
/// state another test leaves behind cannot follow the order (where the recording could not
/// tell, nothing is known and the check runs).
pub(crate) fn settled(pair: &Pair, impact: &Impact, in_base: impl Fn(&str) -> bool) -> bool {
    pair.search.outcome.explains()
        && in_base(&pair.victim)
        && pair.culprits.iter().all(|c| in_base(c))
        && impact
            .base_sensitive
            .as_ref()
            .is_some_and(|s| !s.contains(&pair.victim))
}

/// Whether a finding of `kind` is checked by running its test alone on the base.
pub(crate) fn checked_alone(kind: FindingKind) -> bool {
    matches!(
        kind,
        FindingKind::LeaseViolation
            | FindingKind::OutsideWrite
            | FindingKind::Failing
            | FindingKind::Crashed
            | FindingKind::Timeout
            | FindingKind::ResourceLimit
            | FindingKind::ErrorBucket
    )
}

/// Whether a finding of `kind` is red-test evidence, which many tests at once share one base
/// run for (a lease violation's test may well pass).
pub(crate) fn is_red(kind: FindingKind) -> bool {
    checked_alone(kind) && kind != FindingKind::LeaseViolation
}

/// Whether a run on the base shows the finding `kind` for `nodeid`.
pub(crate) fn shows(r: &RunResult, nodeid: &str, kind: FindingKind) -> bool {
    let t = r.test(nodeid);
    match kind {
        FindingKind::LeaseViolation => t.is_some_and(|t| !t.violations.is_empty()),
        FindingKind::OutsideWrite => crate::pytest::outside::outside_writes(r)
            .iter()
            .any(|w| w.nodeid.as_deref() == Some(nodeid)),
        FindingKind::Crashed => t.is_some_and(|t| t.outcome == Outcome::Crashed),
        FindingKind::Timeout => t.is_some_and(|t| t.outcome == Outcome::Timeout),
        FindingKind::ResourceLimit => t.is_some_and(|t| t.outcome == Outcome::ResourceLimit),
        FindingKind::ErrorBucket => t.is_some_and(|t| t.outcome == Outcome::Error),
        _ => t.is_some_and(|t| !t.outcome.is_green()),
    }
}

/// Whether the base shows a pair: the victim's outcome after the culprits (`after`: green or
/// not, `None` when it did not run) is the anomaly, and alone it is not.
pub(crate) fn pair_shows(kind: PairKind, after: Option<bool>, alone: Option<bool>) -> bool {
    after.is_some_and(|g| kind.anomaly(g)) && alone.is_some_and(|g| !kind.anomaly(g))
}

/// Whether the base's run of an unexplained order-dependent test's failing order shows it red.
pub(crate) fn red_in_order(r: &RunResult, nodeid: &str) -> bool {
    r.outcome_of(nodeid).is_some_and(|o| !o.is_green())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_shows_on_the_base_when_after_is_the_anomaly_and_alone_is_not() {
        use PairKind::*;
        assert!(pair_shows(Polluter, Some(false), Some(true)));
        assert!(pair_shows(StateSetter, Some(true), Some(false)));
        for (after, alone) in [
            (Some(false), Some(false)),
            (Some(true), Some(true)),
            (None, Some(true)),
            (Some(false), None),
        ] {
            assert!(!pair_shows(Polluter, after, alone), "{after:?} {alone:?}");
        }
        assert!(!pair_shows(StateSetter, Some(false), Some(true)));
    }

    #[test]
    fn a_pair_is_settled_only_when_the_base_says_its_victim_cannot_follow_the_order() {
        use crate::audit::bisect::{Method, Search, SearchOutcome};
        use crate::audit::pair::Found;
        use crate::audit::scope::{Full, ImpactScope};
        let pair = |victim: &str, outcome| Pair {
            kind: PairKind::Polluter,
            victim: victim.into(),
            culprits: vec!["t.py::setter".into()],
            search: Search {
                culprits: vec![0],
                runs: 1,
                method: Method::Bisection,
                outcome,
            },
            found: Found::Searched,
            verify_runs: 6,
        };
        let impact = |sensitive: Option<&[&str]>| Impact {
            affected: Some(Default::default()),
            scope: ImpactScope::Full(Full::Asked),
            whole: None,
            whole_why: None,
            base_sensitive: sensitive.map(|s| s.iter().map(|id| id.to_string()).collect()),
        };
        let base = |id: &str| id != "t.py::new";
        let sensitive = impact(Some(&["t.py::setter", "t.py::reader"]));
        assert!(settled(
            &pair("t.py::victim", SearchOutcome::Found),
            &sensitive,
            base
        ));
        // A reader on the base, an unexplained pair, a new victim, nothing known: checked.
        assert!(!settled(
            &pair("t.py::reader", SearchOutcome::Found),
            &sensitive,
            base
        ));
        let unexplained = pair("t.py::victim", SearchOutcome::NotReproduced);
        assert!(!settled(&unexplained, &sensitive, base));
        assert!(!settled(
            &pair("t.py::new", SearchOutcome::Found),
            &sensitive,
            base
        ));
        assert!(!settled(
            &pair("t.py::victim", SearchOutcome::Found),
            &impact(None),
            base
        ));
    }
}
