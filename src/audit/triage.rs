//! Triage: every test's one primary bucket and its secondary signals, from its outcomes across
//! the seed orders and the confirmation facts the audit gathered.
//!
//! # How outcomes are read
//!
//! Each outcome is *green* or *red*. Green: `passed`, `skipped`, `xfailed` (the expected failure
//! happened). Red: `failed`, `error`, `crashed`, `timeout`, `resource-limit`, and `xpassed`. An unexpected pass is
//! red when comparing orders, because an `xfail` test that passes in one order and fails in another
//! has an order-dependent body, just as a plain test would (a strict xfail already arrives as
//! `failed`). A test that xpasses in every order, though, is `stable` with the signal `xpassed`:
//! pytest itself does not fail a non-strict xpass, and a gate that rejected it would reject the
//! patch that fixed the bug the marker was waiting for. The marker is stale, and the signal says so.
//!
//! # Rules
//!
//! - Red in some orders and green in others: the confirmation reruns decide. The failing order
//!   fails again and the passing order passes again, on every one of at least
//!   [`PROOF_RERUNS`] reruns each way: the outcome follows the order, *order-dependent*. Any
//!   rerun that disagrees: *flaky* (the engine stops rerunning at the first one). Fewer reruns
//!   than that, all agreeing, prove nothing either way: *flaky*, with the signal `unconfirmed`.
//!   Without confirmation at all the evidence is still "the outcome differs by order", so
//!   *order-dependent*, with the signal `unconfirmed`.
//!   One exception: the failing order failing on every one of [`PROOF_RERUNS`] reruns while
//!   the passing order gave both outcomes is *order-dependent* and *flaky* (the signal): a test
//!   that fails every time after its polluters and now and then without them. Its pair decides.
//! - An order-dependent test whose polluter search explained nothing (no culprit, or culprits
//!   that did not reproduce on every rerun) is *flaky*: order dependence is proven by a pair
//!   that reproduces, never guessed. A test whose pair held but which showed the anomaly alone
//!   during the pair's check, or whose outcome in some seed order the pair does not explain
//!   (`flaky_too`), is order-dependent with the signal `flaky`; the signal adds a `flaky`
//!   finding beside the `order-dependent` one.
//! - Red in every order: alone green makes it *order-dependent* (signal `victim`: every order had a
//!   polluter before it); alone red or not run makes it *failing*, or *error* when every red
//!   outcome is a setup/teardown error.
//! - Green in some order and red alone: *order-dependent* with the signal `brittle` (it needs a
//!   state-setter), unless the reruns showed it flaky.
//! - Green in every order: *skipped* when every outcome is `skipped` or `xfailed` (or it never
//!   ran), else *stable*. If it needed reruns (pytest-rerunfailures) to be green, it failed and then
//!   passed in the same order: *flaky*, never folded into a pass.
//! - With `--nio`, a test that passed and then failed when run again in the same process, and
//!   did so on every one of [`PROOF_RERUNS`] reruns of it twice by itself, gets the signal
//!   `non-idempotent` (a finding of its own; the bucket stays what the orders say). One that
//!   did not do it every time gets nothing from the nio order: its prefix (every earlier test
//!   twice) may be what broke it. The nio order's outcomes are never among the outcomes
//!   compared across orders: a second run is not another order.
//! - A test that left shared state changed behind it in the file-order or reversed run (a
//!   module global of the repository, an environment variable, the working directory,
//!   `sys.path` or `sys.modules`, a thread) gets the signal `leaks-state` naming what, and, unless
//!   it is the culprit of a found pair, a finding of its own that does not block: a polluter
//!   without a victim (yet).
//! - A lease violation, or being the polluter of a found pair, puts it in the *polluter* bucket.
//!   Only the culprit of a found pair gets the `polluter` signal and finding (which names its
//!   victims); a lease violation without a victim is its `lease-violation` finding alone, with
//!   that finding's own status (a violation the base has too is known debt, whatever the
//!   bucket). Being the state-setter of a pair is only a signal: the defect is the brittle test
//!   that needs it.
//!
//! # Precedence of the primary bucket
//!
//! `order-dependent > crashed > timeout > resource-limit > polluter > flaky > error > failing >
//! skipped > stable`.
//!
//! Order-dependence comes first because it says the test's own green is not real, which is what
//! fixgate exists to tell; a crash or timeout that follows the order is the order's doing.
//! Crashed, timeout and resource-limit (a bound of the run hit: memory, processes, disk) come
//! next, in any order and even when flaky, because they kill or stall the run and cost every
//! later test its evidence. Polluter ranks above flaky, error and failing:
//! its own result may be honest, but it corrupts the evidence of other tests, and it is a code
//! defect where flaky is an environment one. The lower buckets keep showing as signals, and
//! [`Triage::finding_kinds`] turns every defect among them into a finding, so nothing that
//! rejects is hidden by the choice of one bucket.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

use crate::audit::finding::FindingKind;
use crate::audit::nio::Idempotence;
use crate::audit::order::OrderLabel;
use crate::pytest::events::StateChange;
use crate::pytest::result::Outcome;

/// What the audit knows about one test.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Evidence {
    /// The outcome per order, in the order of the matrix (file, reversed, then the seed list).
    pub(crate) outcomes: Vec<(OrderLabel, Outcome)>,
    /// For a test whose outcome differed across orders: the reruns of a failing and a passing
    /// order.
    pub(crate) confirm: Option<Confirm>,
    /// The test run by itself (for a test red in every order, or from the polluter search's final
    /// check).
    pub(crate) alone: Option<Outcome>,
    /// Fixture groups the test changed without holding their lease.
    pub(crate) dirty_groups: Vec<String>,
    /// The culprit of a found polluter pair.
    pub(crate) polluter_in_pair: bool,
    /// The culprit of a found state-setter pair.
    pub(crate) state_setter_in_pair: bool,
    pub(crate) edited_by_patch: bool,
    /// Reruns by a plugin such as pytest-rerunfailures, summed over the orders.
    pub(crate) reruns: u32,
    /// The polluter (or state-setter) search for it explained nothing: no culprit, or a set that
    /// did not reproduce on every rerun.
    pub(crate) unexplained: bool,
    /// What the nio order (`--nio`) showed, when it showed the test passing and then failing.
    pub(crate) nio: Option<Idempotence>,
    /// It showed an outcome its order does not explain: the anomaly by itself, or in an order
    /// without all its culprits before it (or not after them all). Flaky, as well as
    /// order-dependent when its pair held.
    pub(crate) flaky_too: bool,
    /// The shared state it left changed behind it (the file-order and reversed runs).
    pub(crate) leaks: Vec<StateChange>,
}

pub(crate) use crate::audit::proof::PROOF_RERUNS;

/// The reruns that tell order-dependent from flaky.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Confirm {
    /// The order where the test was red, run again: one outcome per rerun.
    pub(crate) failing: Vec<Outcome>,
    /// An order where the test was green, run again: one outcome per rerun.
    pub(crate) passing: Vec<Outcome>,
}

impl Confirm {
    /// Every rerun agrees with the order: the failing order failed, the passing one passed.
    pub(crate) fn agrees(&self) -> bool {
        self.failing.iter().all(|o| !o.is_green()) && self.passing.iter().all(|o| o.is_green())
    }

    /// Agreement on at least [`PROOF_RERUNS`] reruns each way.
    pub(crate) fn proves(&self) -> bool {
        self.agrees() && self.failing.len() >= PROOF_RERUNS && self.passing.len() >= PROOF_RERUNS
    }

    /// The failing order failed on at least [`PROOF_RERUNS`] reruns, every one, while the passing
    /// order gave both outcomes (it was green in the matrix, so one red rerun is enough, and
    /// red on every rerun is still both): a flaky test that may also follow the order (it fails
    /// every time after its polluters, and now and then without them). Only its pair can tell,
    /// and a flaky victim's pair is held to a harder check (docs/verdicts.md).
    pub(crate) fn fails_every_time_on_one_side(&self) -> bool {
        self.failing.len() >= PROOF_RERUNS
            && self.failing.iter().all(|o| !o.is_green())
            && self.passing.iter().any(|o| !o.is_green())
    }
}

/// The primary bucket. Every test lands in exactly one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Bucket {
    #[default]
    Stable,
    OrderDependent,
    Polluter,
    Flaky,
    Failing,
    Error,
    Skipped,
    Crashed,
    Timeout,
    ResourceLimit,
}

impl Bucket {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Bucket::Stable => "stable",
            Bucket::OrderDependent => "order-dependent",
            Bucket::Polluter => "polluter",
            Bucket::Flaky => "flaky",
            Bucket::Failing => "failing",
            Bucket::Error => "error",
            Bucket::Skipped => "skipped",
            Bucket::Crashed => "crashed",
            Bucket::Timeout => "timeout",
            Bucket::ResourceLimit => "resource-limit",
        }
    }

    /// Where a reader wants the bucket in a report: the defects first, then the rest.
    pub(crate) fn rank(self) -> u8 {
        match self {
            Bucket::OrderDependent => 0,
            Bucket::Polluter => 1,
            Bucket::Failing => 2,
            Bucket::Error => 3,
            Bucket::Crashed => 4,
            Bucket::Timeout => 5,
            Bucket::ResourceLimit => 6,
            Bucket::Flaky => 7,
            Bucket::Skipped => 8,
            Bucket::Stable => 9,
        }
    }
}

impl fmt::Display for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Bucket {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Bucket {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Bucket, D::Error> {
        let name = String::deserialize(deserializer)?;
        BUCKETS
            .iter()
            .copied()
            .find(|b| b.as_str() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown bucket {name:?}")))
    }
}

/// Every bucket.
pub(crate) const BUCKETS: [Bucket; 10] = [
    Bucket::Stable,
    Bucket::OrderDependent,
    Bucket::Polluter,
    Bucket::Flaky,
    Bucket::Failing,
    Bucket::Error,
    Bucket::Skipped,
    Bucket::Crashed,
    Bucket::Timeout,
    Bucket::ResourceLimit,
];

/// A secondary signal. Signals list everything that was seen, including the fact behind the
/// primary bucket, so that "polluter and order-dependent" reads as both.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Signal {
    OrderDependent,
    /// Red in every order, green alone: something before it breaks it.
    Victim,
    /// Green in some order, red alone: it needs a state-setter.
    Brittle,
    Polluter,
    StateSetter,
    /// Changed this fixture group without its lease.
    LeaseViolation(String),
    Flaky,
    /// Red in some orders, green in others, with no confirmation reruns.
    Unconfirmed,
    /// Passes, then fails when run again in the same process, every time (`--nio`).
    NonIdempotent,
    Crashed,
    Timeout,
    ResourceLimit,
    /// Red in every order, and not a victim.
    Failing,
    /// Setup or teardown errors in every order.
    Error,
    /// An unexpected pass of an `xfail` test.
    Xpassed,
    /// A plugin reran it.
    Rerun,
    EditedByPatch,
    /// It left this shared state changed behind it (`leaks-state:env:HOME`, one per change).
    LeaksState(StateChange),
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Signal::LeaseViolation(group) => return write!(f, "lease-violation:{group}"),
            Signal::LeaksState(change) => return write!(f, "leaks-state:{change}"),
            Signal::OrderDependent => "order-dependent",
            Signal::Victim => "victim",
            Signal::Brittle => "brittle",
            Signal::Polluter => "polluter",
            Signal::StateSetter => "state-setter",
            Signal::Flaky => "flaky",
            Signal::Unconfirmed => "unconfirmed",
            Signal::NonIdempotent => "non-idempotent",
            Signal::Crashed => "crashed",
            Signal::Timeout => "timeout",
            Signal::ResourceLimit => "resource-limit",
            Signal::Failing => "failing",
            Signal::Error => "error",
            Signal::Xpassed => "xpassed",
            Signal::Rerun => "rerun",
            Signal::EditedByPatch => "edited-by-patch",
        };
        f.write_str(name)
    }
}

impl Serialize for Signal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Reads the form `Display` writes.
impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Signal, D::Error> {
        let text = String::deserialize(deserializer)?;
        if let Some(group) = text.strip_prefix("lease-violation:") {
            return Ok(Signal::LeaseViolation(group.to_string()));
        }
        if let Some(change) = text.strip_prefix("leaks-state:") {
            return Ok(Signal::LeaksState(StateChange::parse(change)));
        }
        [
            Signal::OrderDependent,
            Signal::Victim,
            Signal::Brittle,
            Signal::Polluter,
            Signal::StateSetter,
            Signal::Flaky,
            Signal::Unconfirmed,
            Signal::NonIdempotent,
            Signal::Crashed,
            Signal::Timeout,
            Signal::ResourceLimit,
            Signal::Failing,
            Signal::Error,
            Signal::Xpassed,
            Signal::Rerun,
            Signal::EditedByPatch,
        ]
        .into_iter()
        .find(|s| s.to_string() == text)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown signal {text:?}")))
    }
}

/// One test's triage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Triage {
    pub(crate) bucket: Bucket,
    /// In a fixed order (the order of [`Signal`]'s variants), without duplicates.
    pub(crate) signals: Vec<Signal>,
}

impl Triage {
    pub(crate) fn has(&self, signal: &Signal) -> bool {
        self.signals.contains(signal)
    }

    /// Whether it is the polluter or the state-setter of a found pair.
    fn is_culprit(&self) -> bool {
        self.signals
            .iter()
            .any(|s| matches!(s, Signal::Polluter | Signal::StateSetter))
    }

    /// The findings this test contributes to the verdict: its bucket's, plus every code defect
    /// and flakiness among the signals that the bucket outranked.
    pub(crate) fn finding_kinds(&self) -> Vec<FindingKind> {
        let mut kinds = Vec::new();
        let mut add = |k: FindingKind| {
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        };
        match self.bucket {
            Bucket::OrderDependent => add(FindingKind::OrderDependent),
            Bucket::Crashed => add(FindingKind::Crashed),
            Bucket::Timeout => add(FindingKind::Timeout),
            Bucket::ResourceLimit => add(FindingKind::ResourceLimit),
            Bucket::Flaky => add(FindingKind::Flaky),
            Bucket::Error => add(FindingKind::ErrorBucket),
            Bucket::Failing => add(FindingKind::Failing),
            // A polluter's kinds come from its signals: a pair, a lease violation, or both.
            Bucket::Polluter | Bucket::Skipped | Bucket::Stable => {}
        }
        for signal in &self.signals {
            match signal {
                Signal::Polluter => add(FindingKind::Polluter),
                Signal::LeaseViolation(_) => add(FindingKind::LeaseViolation),
                Signal::Failing => add(FindingKind::Failing),
                Signal::Error => add(FindingKind::ErrorBucket),
                Signal::Flaky => add(FindingKind::Flaky),
                Signal::NonIdempotent => add(FindingKind::NonIdempotent),
                // A culprit of a found pair has its victim, which the pair's finding names.
                Signal::LeaksState(_) if !self.is_culprit() => add(FindingKind::LeaksState),
                _ => {}
            }
        }
        kinds
    }
}

fn is_skip_like(o: Outcome) -> bool {
    matches!(o, Outcome::Skipped | Outcome::Xfailed)
}

/// Triage of one test. Pure; see the module documentation for the rules and the precedence.
pub(crate) fn triage(e: &Evidence) -> Triage {
    let outcomes: Vec<Outcome> = e.outcomes.iter().map(|(_, o)| *o).collect();
    let some_green = outcomes.iter().any(|o| o.is_green());
    let some_red = outcomes.iter().any(|o| !o.is_green());
    let alone_green = e.alone.map(Outcome::is_green);

    let mut order_dependent = false;
    let mut unconfirmed = false;
    let mut flaky = false;
    let mut victim = false;
    let mut red_everywhere: Option<Bucket> = None;
    let mut skipped = false;

    if some_green && some_red {
        match &e.confirm {
            Some(c) if c.proves() => order_dependent = true,
            Some(c) if c.fails_every_time_on_one_side() => {
                order_dependent = true;
                flaky = true;
            }
            Some(c) if c.agrees() => {
                flaky = true;
                unconfirmed = true;
            }
            Some(_) => flaky = true,
            None => {
                order_dependent = true;
                unconfirmed = true;
            }
        }
    } else if some_red {
        if outcomes.iter().all(|o| *o == Outcome::Xpassed) {
            // Stale xfail marker: see the module documentation.
        } else if alone_green == Some(true) {
            order_dependent = true;
            victim = true;
        } else {
            red_everywhere = failing_kind(&outcomes);
        }
    } else {
        skipped = outcomes.iter().all(|o| is_skip_like(*o));
        if e.reruns > 0 && !outcomes.is_empty() {
            flaky = true;
        }
    }
    flaky |= e.flaky_too;
    let mut brittle = some_green && alone_green == Some(false);
    if brittle && !flaky {
        order_dependent = true;
    }
    if order_dependent && e.unexplained {
        // Proven is reproduced: a search that explained nothing leaves only nondeterminism.
        (order_dependent, victim, brittle, flaky) = (false, false, false, true);
    }
    if order_dependent && alone_green == Some(true) {
        victim = true;
    }
    // Read last, so that it changes nothing of the reading of the orders above.
    // One that did not do it by itself every time says nothing: in the nio order every test
    // before it ran twice too, which its reruns alone do not repeat (that prefix, not chance,
    // may be what broke it), so it is not taken as flakiness either.
    let non_idempotent = e.nio == Some(Idempotence::NonIdempotent);

    let observed = outcomes
        .iter()
        .copied()
        .chain(
            e.confirm
                .iter()
                .flat_map(|c| c.failing.iter().chain(&c.passing).copied()),
        )
        .chain(e.alone);
    let (mut crashed, mut timeout, mut limited) = (false, false, false);
    for o in observed {
        crashed |= o == Outcome::Crashed;
        timeout |= o == Outcome::Timeout;
        limited |= o == Outcome::ResourceLimit;
    }
    let polluter = e.polluter_in_pair || !e.dirty_groups.is_empty();

    let bucket = if order_dependent {
        Bucket::OrderDependent
    } else if crashed {
        Bucket::Crashed
    } else if timeout {
        Bucket::Timeout
    } else if limited {
        Bucket::ResourceLimit
    } else if polluter {
        Bucket::Polluter
    } else if flaky {
        Bucket::Flaky
    } else if let Some(b) = red_everywhere {
        b
    } else if skipped {
        Bucket::Skipped
    } else {
        Bucket::Stable
    };

    let mut groups: Vec<&String> = e.dirty_groups.iter().collect();
    groups.sort();
    groups.dedup();
    let mut signals = Vec::new();
    let mut flag = |on: bool, s: Signal| {
        if on {
            signals.push(s);
        }
    };
    flag(order_dependent, Signal::OrderDependent);
    flag(victim, Signal::Victim);
    flag(brittle, Signal::Brittle);
    flag(e.polluter_in_pair, Signal::Polluter);
    flag(e.state_setter_in_pair, Signal::StateSetter);
    for group in groups {
        flag(true, Signal::LeaseViolation(group.clone()));
    }
    flag(flaky, Signal::Flaky);
    flag(unconfirmed, Signal::Unconfirmed);
    flag(non_idempotent, Signal::NonIdempotent);
    flag(crashed, Signal::Crashed);
    flag(timeout, Signal::Timeout);
    flag(limited, Signal::ResourceLimit);
    flag(red_everywhere == Some(Bucket::Failing), Signal::Failing);
    flag(red_everywhere == Some(Bucket::Error), Signal::Error);
    flag(outcomes.contains(&Outcome::Xpassed), Signal::Xpassed);
    flag(e.reruns > 0, Signal::Rerun);
    flag(e.edited_by_patch, Signal::EditedByPatch);
    let mut leaks = e.leaks.clone();
    leaks.sort();
    leaks.dedup();
    signals.extend(leaks.into_iter().map(Signal::LeaksState));
    Triage { bucket, signals }
}

/// Failing or error for a test red in every order; `None` when its only red outcomes are crashes,
/// timeouts and resource limits (their own buckets).
fn failing_kind(outcomes: &[Outcome]) -> Option<Bucket> {
    let mut reds = outcomes
        .iter()
        .filter(|o| {
            !matches!(
                o,
                Outcome::Crashed | Outcome::Timeout | Outcome::ResourceLimit
            )
        })
        .filter(|o| !o.is_green())
        .peekable();
    reds.peek()?;
    if reds.all(|o| *o == Outcome::Error) {
        Some(Bucket::Error)
    } else {
        Some(Bucket::Failing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Outcome::*;

    const LABELS: [OrderLabel; 4] = [
        OrderLabel::File,
        OrderLabel::Reversed,
        OrderLabel::Seed(1),
        OrderLabel::Seed(2),
    ];

    fn ev(outcomes: &[Outcome]) -> Evidence {
        Evidence {
            outcomes: LABELS.iter().zip(outcomes).map(|(l, o)| (*l, *o)).collect(),
            ..Evidence::default()
        }
    }

    /// Confirmed with [`PROOF_RERUNS`] reruns each way, all giving these outcomes.
    fn confirmed(outcomes: &[Outcome], failing_rerun: Outcome, passing_rerun: Outcome) -> Evidence {
        Evidence {
            confirm: Some(Confirm {
                failing: vec![failing_rerun; PROOF_RERUNS],
                passing: vec![passing_rerun; PROOF_RERUNS],
            }),
            ..ev(outcomes)
        }
    }

    #[test]
    fn order_dependence_needs_every_rerun_to_follow_the_order() {
        let outcomes = [Failed, Passed, Passed, Passed];
        let t = triage(&confirmed(&outcomes, Failed, Passed));
        assert_eq!(t.bucket, Bucket::OrderDependent);
        // One rerun of the failing order passed: the outcome does not follow the order.
        let mut e = confirmed(&outcomes, Failed, Passed);
        e.confirm.as_mut().unwrap().failing[1] = Passed;
        assert_eq!(triage(&e).bucket, Bucket::Flaky);
        // Stopped early on a disagreement: flaky, whatever came before.
        e.confirm.as_mut().unwrap().failing.truncate(2);
        assert_eq!(triage(&e).bucket, Bucket::Flaky);
        // Agreeing, but fewer reruns than the proof takes: not proven.
        let mut e = confirmed(&outcomes, Failed, Passed);
        e.confirm
            .as_mut()
            .unwrap()
            .passing
            .truncate(PROOF_RERUNS - 1);
        let t = triage(&e);
        assert_eq!(t.bucket, Bucket::Flaky);
        assert!(t.has(&Signal::Unconfirmed));
    }

    #[test]
    fn an_unexplained_search_makes_an_order_dependent_test_flaky() {
        let mut e = confirmed(&[Failed, Passed, Passed, Passed], Failed, Passed);
        e.alone = Some(Passed);
        e.unexplained = true;
        let t = triage(&e);
        assert_eq!(t.bucket, Bucket::Flaky);
        assert!(
            !t.has(&Signal::OrderDependent) && !t.has(&Signal::Victim),
            "{t:?}"
        );
        // A victim red in every order whose search found nothing is flaky too.
        let mut e = alone(&[Failed, Failed, Failed, Failed], Passed);
        e.unexplained = true;
        assert_eq!(triage(&e).bucket, Bucket::Flaky);
    }

    #[test]
    fn the_nio_reading_adds_its_finding_and_changes_nothing_of_the_orders() {
        // Green in every order, non-idempotent: still stable, with its own finding, never flaky.
        let mut e = ev(&[Passed, Passed, Passed, Passed]);
        e.nio = Some(Idempotence::NonIdempotent);
        let t = triage(&e);
        assert_eq!(t.bucket, Bucket::Stable);
        assert!(t.has(&Signal::NonIdempotent) && !t.has(&Signal::Flaky));
        assert_eq!(t.finding_kinds(), [FindingKind::NonIdempotent]);
        // A proven order dependence stays what it is.
        let mut e = confirmed(&[Failed, Passed, Passed, Passed], Failed, Passed);
        e.nio = Some(Idempotence::NonIdempotent);
        let t = triage(&e);
        assert_eq!(t.bucket, Bucket::OrderDependent);
        assert_eq!(
            t.finding_kinds(),
            [FindingKind::OrderDependent, FindingKind::NonIdempotent]
        );
        // Pass-then-fail that did not reproduce every time: neither non-idempotent nor flaky
        // (the doubled prefix of the nio order may be what broke it).
        let mut e = ev(&[Passed, Passed, Passed, Passed]);
        e.nio = Some(Idempotence::Unreproduced);
        let t = triage(&e);
        assert_eq!(t.bucket, Bucket::Stable);
        assert!(!t.has(&Signal::NonIdempotent) && !t.has(&Signal::Flaky));
        assert!(t.finding_kinds().is_empty());
        // Round trip of the signal's name.
        let text = serde_json::to_string(&Signal::NonIdempotent).unwrap();
        assert_eq!(text, "\"non-idempotent\"");
        assert_eq!(
            serde_json::from_str::<Signal>(&text).unwrap(),
            Signal::NonIdempotent
        );
    }

    fn alone(outcomes: &[Outcome], alone: Outcome) -> Evidence {
        Evidence {
            alone: Some(alone),
            ..ev(outcomes)
        }
    }

    fn names(t: &Triage) -> Vec<String> {
        t.signals.iter().map(|s| s.to_string()).collect()
    }

    fn check(e: &Evidence, bucket: Bucket, signals: &[&str]) {
        let t = triage(e);
        assert_eq!(
            (t.bucket, names(&t)),
            (bucket, signals.iter().map(|s| (*s).to_owned()).collect()),
            "{e:?}"
        );
    }

    // --- every bucket ---

    #[test]
    fn stable() {
        check(&ev(&[Passed; 4]), Bucket::Stable, &[]);
        check(
            &ev(&[Passed, Skipped, Xfailed, Passed]),
            Bucket::Stable,
            &[],
        );
    }

    #[test]
    fn order_dependent_when_the_outcome_follows_the_order() {
        let e = confirmed(&[Passed, Failed, Passed, Failed], Failed, Passed);
        check(&e, Bucket::OrderDependent, &["order-dependent"]);
    }

    #[test]
    fn order_dependent_victim_red_everywhere_green_alone() {
        check(
            &alone(&[Failed; 4], Passed),
            Bucket::OrderDependent,
            &["order-dependent", "victim"],
        );
        // A victim found by the polluter search (whose final check ran it alone).
        let e = Evidence {
            alone: Some(Passed),
            ..confirmed(&[Passed, Failed, Passed, Passed], Failed, Passed)
        };
        check(&e, Bucket::OrderDependent, &["order-dependent", "victim"]);
    }

    #[test]
    fn order_dependent_brittle_green_in_some_order_red_alone() {
        let e = Evidence {
            alone: Some(Failed),
            ..confirmed(&[Passed, Failed, Passed, Failed], Failed, Passed)
        };
        check(&e, Bucket::OrderDependent, &["order-dependent", "brittle"]);
        // Green in every order but red alone: the state-setter always ran first.
        check(
            &alone(&[Passed; 4], Failed),
            Bucket::OrderDependent,
            &["order-dependent", "brittle"],
        );
    }

    #[test]
    fn unconfirmed_differences_count_as_order_dependent() {
        check(
            &ev(&[Passed, Failed, Passed, Passed]),
            Bucket::OrderDependent,
            &["order-dependent", "unconfirmed"],
        );
    }

    #[test]
    fn flaky_when_the_same_order_disagrees() {
        // The failing order passed on rerun.
        check(
            &confirmed(&[Passed, Failed, Passed, Passed], Passed, Passed),
            Bucket::Flaky,
            &["flaky"],
        );
        // The passing order failed on every rerun, the failing order too: green once in the
        // matrix, red after, it gave both outcomes, and only the pair can tell (a search that
        // explains nothing makes it flaky, below).
        check(
            &confirmed(&[Passed, Failed, Passed, Passed], Failed, Failed),
            Bucket::OrderDependent,
            &["order-dependent", "flaky"],
        );
        let e = Evidence {
            unexplained: true,
            ..confirmed(&[Passed, Failed, Passed, Passed], Failed, Failed)
        };
        check(&e, Bucket::Flaky, &["flaky"]);
        // The passing order failed on rerun while the failing order passed once: flaky.
        let mut e = confirmed(&[Passed, Failed, Passed, Passed], Failed, Failed);
        e.confirm.as_mut().unwrap().failing[2] = Passed;
        check(&e, Bucket::Flaky, &["flaky"]);
        // Brittle-looking but flaky: flaky wins over the alone run.
        let e = Evidence {
            alone: Some(Failed),
            ..confirmed(&[Passed, Failed, Passed, Passed], Passed, Passed)
        };
        check(&e, Bucket::Flaky, &["brittle", "flaky"]);
    }

    #[test]
    fn reruns_are_never_folded_into_a_pass() {
        let e = Evidence {
            reruns: 2,
            ..ev(&[Passed; 4])
        };
        check(&e, Bucket::Flaky, &["flaky", "rerun"]);
        // Reruns that ended red are just reported.
        let e = Evidence {
            reruns: 3,
            ..ev(&[Failed; 4])
        };
        check(&e, Bucket::Failing, &["failing", "rerun"]);
    }

    #[test]
    fn failing_everywhere_and_alone() {
        check(&alone(&[Failed; 4], Failed), Bucket::Failing, &["failing"]);
        // Not run alone: no evidence of order-dependence.
        check(
            &ev(&[Failed, Failed, Error, Failed]),
            Bucket::Failing,
            &["failing"],
        );
        check(
            &ev(&[Xpassed, Failed, Failed, Failed]),
            Bucket::Failing,
            &["failing", "xpassed"],
        );
    }

    #[test]
    fn error_in_every_order() {
        check(&alone(&[Error; 4], Error), Bucket::Error, &["error"]);
    }

    #[test]
    fn skipped_in_every_order() {
        check(&ev(&[Skipped; 4]), Bucket::Skipped, &[]);
        check(
            &ev(&[Skipped, Xfailed, Xfailed, Skipped]),
            Bucket::Skipped,
            &[],
        );
        check(&Evidence::default(), Bucket::Skipped, &[]);
    }

    #[test]
    fn crashed_in_any_order() {
        check(&ev(&[Crashed; 4]), Bucket::Crashed, &["crashed"]);
        check(
            &alone(&[Crashed, Failed, Failed, Failed], Failed),
            Bucket::Crashed,
            &["crashed", "failing"],
        );
        // A crash that the same order does not repeat: crashed outranks flaky.
        check(
            &confirmed(&[Passed, Crashed, Passed, Passed], Passed, Passed),
            Bucket::Crashed,
            &["flaky", "crashed"],
        );
    }

    #[test]
    fn timeout_in_any_order() {
        check(&ev(&[Timeout; 4]), Bucket::Timeout, &["timeout"]);
        check(
            &confirmed(&[Passed, Timeout, Passed, Passed], Passed, Passed),
            Bucket::Timeout,
            &["flaky", "timeout"],
        );
        // Both: crashed first.
        check(
            &ev(&[Timeout, Crashed, Timeout, Timeout]),
            Bucket::Crashed,
            &["crashed", "timeout"],
        );
    }

    #[test]
    fn order_dependent_crash_stays_order_dependent() {
        check(
            &confirmed(&[Passed, Crashed, Passed, Passed], Crashed, Passed),
            Bucket::OrderDependent,
            &["order-dependent", "crashed"],
        );
        check(
            &confirmed(&[Timeout, Passed, Passed, Passed], Timeout, Passed),
            Bucket::OrderDependent,
            &["order-dependent", "timeout"],
        );
    }

    #[test]
    fn polluter_from_a_lease_violation_or_a_pair() {
        let e = Evidence {
            dirty_groups: vec!["db".into(), "golden".into(), "db".into()],
            ..ev(&[Passed; 4])
        };
        // A lease violation without a victim: the bucket, not the polluter's signal or finding
        // (which would name victims it does not have).
        check(
            &e,
            Bucket::Polluter,
            &["lease-violation:db", "lease-violation:golden"],
        );
        assert_eq!(triage(&e).finding_kinds(), [FindingKind::LeaseViolation]);
        let e = Evidence {
            polluter_in_pair: true,
            ..ev(&[Passed; 4])
        };
        check(&e, Bucket::Polluter, &["polluter"]);
    }

    #[test]
    fn a_state_setter_is_only_a_signal() {
        let e = Evidence {
            state_setter_in_pair: true,
            ..ev(&[Passed; 4])
        };
        check(&e, Bucket::Stable, &["state-setter"]);
    }

    // --- precedence ---

    #[test]
    fn precedence_order_dependent_over_polluter() {
        let e = Evidence {
            dirty_groups: vec!["db".into()],
            polluter_in_pair: true,
            ..confirmed(&[Passed, Failed, Passed, Passed], Failed, Passed)
        };
        check(
            &e,
            Bucket::OrderDependent,
            &["order-dependent", "polluter", "lease-violation:db"],
        );
    }

    #[test]
    fn precedence_crashed_and_timeout_over_polluter() {
        let e = Evidence {
            polluter_in_pair: true,
            ..ev(&[Crashed; 4])
        };
        check(&e, Bucket::Crashed, &["polluter", "crashed"]);
        let e = Evidence {
            polluter_in_pair: true,
            ..ev(&[Timeout; 4])
        };
        check(&e, Bucket::Timeout, &["polluter", "timeout"]);
    }

    #[test]
    fn precedence_polluter_over_flaky_error_failing_skipped() {
        let dirty = |e: Evidence| Evidence {
            dirty_groups: vec!["db".into()],
            ..e
        };
        let cases = [
            (
                dirty(confirmed(&[Passed, Failed, Passed, Passed], Passed, Passed)),
                "flaky",
            ),
            (dirty(alone(&[Error; 4], Error)), "error"),
            (dirty(alone(&[Failed; 4], Failed)), "failing"),
            (dirty(ev(&[Skipped; 4])), ""),
        ];
        for (e, lower) in cases {
            let t = triage(&e);
            assert_eq!(t.bucket, Bucket::Polluter, "{e:?}");
            if !lower.is_empty() {
                assert!(names(&t).contains(&lower.to_owned()), "{:?}", t.signals);
            }
        }
    }

    #[test]
    fn precedence_flaky_over_stable_and_skipped() {
        let e = Evidence {
            reruns: 1,
            ..ev(&[Skipped, Passed, Passed, Passed])
        };
        assert_eq!(triage(&e).bucket, Bucket::Flaky);
        let e = Evidence {
            reruns: 1,
            ..ev(&[Skipped; 4])
        };
        assert_eq!(triage(&e).bucket, Bucket::Flaky);
    }

    // --- xfail and xpass ---

    #[test]
    fn xpass_in_every_order_is_a_stale_marker_not_a_failure() {
        check(&ev(&[Xpassed; 4]), Bucket::Stable, &["xpassed"]);
        check(&alone(&[Xpassed; 4], Xpassed), Bucket::Stable, &["xpassed"]);
    }

    #[test]
    fn xfail_that_xpasses_in_some_orders_is_order_dependent() {
        check(
            &confirmed(&[Xfailed, Xpassed, Xfailed, Xfailed], Xpassed, Xfailed),
            Bucket::OrderDependent,
            &["order-dependent", "xpassed"],
        );
    }

    // --- other signals ---

    #[test]
    fn edited_by_patch_and_rerun_signals() {
        let e = Evidence {
            edited_by_patch: true,
            alone: Some(Passed),
            ..confirmed(&[Passed, Failed, Passed, Passed], Failed, Passed)
        };
        check(
            &e,
            Bucket::OrderDependent,
            &["order-dependent", "victim", "edited-by-patch"],
        );
        let e = Evidence {
            edited_by_patch: true,
            ..ev(&[Passed; 4])
        };
        check(&e, Bucket::Stable, &["edited-by-patch"]);
    }

    #[test]
    fn signals_serialize_as_strings() {
        let t = triage(&Evidence {
            dirty_groups: vec!["db".into()],
            polluter_in_pair: true,
            ..ev(&[Passed; 4])
        });
        assert_eq!(
            serde_json::to_string(&t).unwrap_or_default(),
            r#"{"bucket":"polluter","signals":["polluter","lease-violation:db"]}"#
        );
    }

    // --- findings ---

    #[test]
    fn finding_kinds_keep_every_defect_the_bucket_outranked() {
        let t = triage(&Evidence {
            dirty_groups: vec!["db".into()],
            polluter_in_pair: true,
            ..alone(&[Failed; 4], Failed)
        });
        assert_eq!(t.bucket, Bucket::Polluter);
        assert_eq!(
            t.finding_kinds(),
            [
                FindingKind::Polluter,
                FindingKind::LeaseViolation,
                FindingKind::Failing
            ]
        );

        let t = triage(&confirmed(
            &[Passed, Crashed, Passed, Passed],
            Passed,
            Passed,
        ));
        assert_eq!(
            t.finding_kinds(),
            [FindingKind::Crashed, FindingKind::Flaky]
        );

        let t = triage(&alone(&[Error; 4], Error));
        assert_eq!(t.finding_kinds(), [FindingKind::ErrorBucket]);

        let t = triage(&confirmed(
            &[Passed, Failed, Passed, Passed],
            Failed,
            Passed,
        ));
        assert_eq!(t.finding_kinds(), [FindingKind::OrderDependent]);

        assert!(triage(&ev(&[Passed; 4])).finding_kinds().is_empty());
        assert!(triage(&ev(&[Skipped; 4])).finding_kinds().is_empty());
        let t = triage(&Evidence {
            state_setter_in_pair: true,
            ..ev(&[Passed; 4])
        });
        assert!(t.finding_kinds().is_empty());
        assert_eq!(
            triage(&Evidence {
                reruns: 1,
                ..ev(&[Passed; 4])
            })
            .finding_kinds(),
            [FindingKind::Flaky]
        );
    }
    #[test]
    fn a_victim_that_fails_every_time_after_its_polluters_and_sometimes_without_is_both() {
        let mut e = ev(&[Failed, Passed, Passed, Failed]);
        e.confirm = Some(Confirm {
            failing: vec![Failed, Failed, Failed],
            passing: vec![Passed, Failed, Passed],
        });
        e.alone = Some(Passed);
        let t = triage(&e);
        assert_eq!(t.bucket, Bucket::OrderDependent);
        assert!(t.has(&Signal::Flaky) && t.has(&Signal::OrderDependent));
        assert_eq!(
            t.finding_kinds(),
            [FindingKind::OrderDependent, FindingKind::Flaky]
        );
        // Its search explained nothing: flaky only.
        e.unexplained = true;
        assert_eq!(triage(&e).bucket, Bucket::Flaky);
        // The failing order passed once on a rerun: nothing follows the order.
        e.unexplained = false;
        e.confirm = Some(Confirm {
            failing: vec![Failed, Passed],
            passing: vec![Passed, Failed, Passed],
        });
        assert_eq!(triage(&e).bucket, Bucket::Flaky);
        // A pair that held on a victim that failed alone on some run: both, again.
        let mut e = ev(&[Failed, Passed, Passed, Failed]);
        e.confirm = Some(Confirm {
            failing: vec![Failed; 3],
            passing: vec![Passed; 3],
        });
        e.alone = Some(Passed);
        e.flaky_too = true;
        let t = triage(&e);
        assert_eq!(t.bucket, Bucket::OrderDependent);
        assert!(t.has(&Signal::Flaky));
    }
}

#[cfg(test)]
mod serde_tests {
    use super::*;

    #[test]
    fn a_triage_reads_back_what_it_writes() {
        let t = Triage {
            bucket: Bucket::OrderDependent,
            signals: vec![
                Signal::OrderDependent,
                Signal::LeaseViolation("db: one".into()),
                Signal::EditedByPatch,
            ],
        };
        let text = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Triage>(&text).unwrap(), t);
        for b in BUCKETS {
            let text = serde_json::to_string(&b).unwrap();
            assert_eq!(serde_json::from_str::<Bucket>(&text).unwrap(), b);
        }
        assert!(serde_json::from_str::<Signal>("\"nonsense\"").is_err());
    }

    #[test]
    fn a_test_that_leaks_state_keeps_its_bucket_and_gets_one_signal_per_change_and_a_finding() {
        let mut e = Evidence {
            outcomes: vec![
                (OrderLabel::File, Outcome::Passed),
                (OrderLabel::Reversed, Outcome::Passed),
            ],
            ..Evidence::default()
        };
        e.leaks = vec![
            StateChange::Env("HOME".into()),
            StateChange::Global {
                path: "pkg/reg.py".into(),
                name: "REG".into(),
            },
            StateChange::Env("HOME".into()),
        ];
        let t = triage(&e);
        assert_eq!(t.bucket, Bucket::Stable);
        let texts: Vec<String> = t.signals.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            texts,
            ["leaks-state:env:HOME", "leaks-state:global:pkg/reg.py:REG"]
        );
        assert_eq!(t.finding_kinds(), [FindingKind::LeaksState]);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Triage>(&json).unwrap(), t);
    }

    #[test]
    fn the_state_setter_of_a_found_pair_that_leaks_state_has_the_signal_and_no_finding_of_it() {
        let e = Evidence {
            outcomes: vec![
                (OrderLabel::File, Outcome::Passed),
                (OrderLabel::Reversed, Outcome::Passed),
            ],
            state_setter_in_pair: true,
            leaks: vec![StateChange::Global {
                path: "pkg/reg.py".into(),
                name: "REG".into(),
            }],
            ..Evidence::default()
        };
        let t = triage(&e);
        assert!(t.has(&Signal::StateSetter));
        assert!(t.signals.iter().any(|s| matches!(s, Signal::LeaksState(_))));
        assert!(!t.finding_kinds().contains(&FindingKind::LeaksState));
    }
}
