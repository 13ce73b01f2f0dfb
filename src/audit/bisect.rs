//! The polluter search: which tests of the prefix that preceded a victim make its outcome
//! anomalous. Bisection when one test is responsible, delta debugging (ddmin) when it takes
//! several together, and an honest report when neither explains the anomaly.
//!
//! The search is pure: the caller's oracle runs "these prefix tests (in their original order),
//! then the victim" in a fresh process and says whether the anomaly reproduced (the victim
//! failed, for a polluter search; the victim passed, for a state-setter search). Every oracle call
//! is one pytest process, so every call is counted and none is repeated.
//!
//! Cost: with one responsible test among `n`, at most `2·⌈log2 n⌉ + 2` calls ([`run_bound`]):
//! one to confirm that the whole prefix reproduces, at most two per halving, and one final check
//! that the victim alone does not reproduce (the second half of the reproduction command: "`A V`
//! fails, `V` passes").

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// A reasonable cap on ddmin's oracle calls: enough for a pair among a few hundred tests.
pub(crate) const DEFAULT_DDMIN_CAP: u32 = 64;

/// What the responsible tests do to the victim, as the report's pair `kind` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum PairKind {
    /// The victim fails after it and passes alone.
    Polluter,
    /// The victim passes after it and fails alone: the victim needs its leftover state.
    StateSetter,
}

impl PairKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PairKind::Polluter => "polluter",
            PairKind::StateSetter => "state-setter",
        }
    }

    /// Whether a victim's outcome (`green` or not) is the anomaly this kind of culprit causes:
    /// a polluter's victim fails, a state-setter's passes. The one rule for the search, the
    /// reuse of known sets, every check of a pair and the base checks.
    pub(crate) fn anomaly(self, green: bool) -> bool {
        match self {
            PairKind::Polluter => !green,
            PairKind::StateSetter => green,
        }
    }

    /// The finding a culprit of this kind is: a polluter is one; a state-setter is no defect of
    /// its own (the brittle test that needs it is), so it shares the victim's order dependence.
    pub(crate) fn culprit_finding(self) -> crate::audit::finding::FindingKind {
        match self {
            PairKind::Polluter => crate::audit::finding::FindingKind::Polluter,
            PairKind::StateSetter => crate::audit::finding::FindingKind::OrderDependent,
        }
    }
}

/// How the culprits were narrowed down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Method {
    /// Halving found a single responsible test (or stopped before narrowing anything).
    Bisection,
    /// Neither half reproduced on its own, and one culprit was found in each half by bisecting
    /// it with the other half kept: a pair that breaks the victim only together.
    SplitBisection,
    /// Neither half reproduced on its own, so the remaining candidates went through ddmin.
    DeltaDebugging,
    /// A culprit set already known (from another victim of this audit, or an earlier audit of
    /// the same base) reproduced the anomaly in one run: no search.
    Reused,
}

/// How the search ended. Everything but [`SearchOutcome::Found`] names the assumption that did
/// not hold, so that a report never presents an unexplained anomaly as explained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub(crate) enum SearchOutcome {
    /// The culprits (with the victim after them) reproduce the anomaly, the victim alone does
    /// not, and removing any one culprit makes it vanish (1-minimal).
    Found,
    /// The victim did not show the anomaly after its whole prefix: the run that showed it cannot
    /// be reproduced (a flaky test, or state from outside the prefix). No culprits.
    NotReproduced,
    /// The victim shows the anomaly with no prefix test before it: the prefix is not the cause
    /// (the victim fails by itself, or is flaky). No culprits.
    ReproducesAlone,
    /// ddmin used its whole budget of oracle calls. The culprits reproduce the anomaly and the
    /// victim alone does not, but the set may not be minimal.
    CapReached { cap: u32 },
    /// The culprits were found, but the pair did not hold on every rerun: the set then the
    /// victim showed the anomaly `reproduced` times out of `of`, or the victim alone showed it
    /// too. Not proven: the test is flaky.
    Unstable { reproduced: u32, of: u32 },
}

impl SearchOutcome {
    pub(crate) fn is_found(self) -> bool {
        self == SearchOutcome::Found
    }

    /// Culprits were found that reproduce the anomaly (minimal or not).
    pub(crate) fn explains(self) -> bool {
        matches!(
            self,
            SearchOutcome::Found | SearchOutcome::CapReached { .. }
        )
    }
}

/// The result of one search.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Search {
    /// Indices into the prefix, ascending (the order they ran in). Empty unless the outcome is
    /// [`SearchOutcome::Found`] or [`SearchOutcome::CapReached`].
    pub(crate) culprits: Vec<usize>,
    /// Oracle calls made, each a pytest process.
    pub(crate) runs: u32,
    pub(crate) method: Method,
    pub(crate) outcome: SearchOutcome,
}

/// The most oracle calls a search over `prefix_len` tests makes when one test is responsible:
/// `2·⌈log2 n⌉ + 2`.
#[cfg(test)]
pub(crate) fn run_bound(prefix_len: usize) -> u32 {
    let levels = match prefix_len {
        0 | 1 => 0,
        n => usize::BITS - (n - 1).leading_zeros(),
    };
    2 * levels + 2
}

/// Searches the `prefix_len` tests that preceded the victim for the ones responsible for its
/// anomaly. `ddmin_cap` bounds the oracle calls of the delta-debugging fallback. An oracle error
/// stops the search at once and is returned: it means nothing was judged.
#[cfg(test)]
pub(crate) fn search<E, F>(prefix_len: usize, ddmin_cap: u32, oracle: F) -> Result<Search, E>
where
    F: FnMut(&[usize]) -> Result<bool, E>,
{
    search_from(prefix_len, ddmin_cap, false, oracle)
}

/// [`search`], told whether the whole prefix is already known to reproduce (a confirmation run of
/// the same order showed it): then that run is not made again, and the bound drops by one.
pub(crate) fn search_from<E, F>(
    prefix_len: usize,
    ddmin_cap: u32,
    whole_reproduces: bool,
    oracle: F,
) -> Result<Search, E>
where
    F: FnMut(&[usize]) -> Result<bool, E>,
{
    let mut probe = Probe {
        oracle,
        runs: 0,
        seen: HashMap::new(),
    };
    if whole_reproduces {
        probe.seen.insert((0..prefix_len).collect(), true);
    }
    let done = |probe: &Probe<F>, culprits, method, outcome| Search {
        culprits,
        runs: probe.runs,
        method,
        outcome,
    };

    let mut candidates: Vec<usize> = (0..prefix_len).collect();
    if !probe.test(&candidates)? {
        return Ok(done(
            &probe,
            Vec::new(),
            Method::Bisection,
            SearchOutcome::NotReproduced,
        ));
    }
    if candidates.is_empty() {
        return Ok(done(
            &probe,
            Vec::new(),
            Method::Bisection,
            SearchOutcome::ReproducesAlone,
        ));
    }

    // Invariant of the loop: `candidates` (then the victim) reproduces.
    let mut method = Method::Bisection;
    let mut capped = false;
    while candidates.len() > 1 {
        // The second half gets the odd one out, so no half exceeds ⌈len/2⌉.
        let (first, second) = candidates.split_at(candidates.len() / 2);
        if probe.test(first)? {
            candidates = first.to_vec();
        } else if probe.test(second)? {
            candidates = second.to_vec();
        } else {
            // Each half holds a culprit. The common case is one in each (a pair that only
            // breaks the victim together): bisect each half with the other kept whole, which
            // costs about as much as one bisection of the whole prefix. A set that is not
            // confirmed that way goes through ddmin.
            let pair = split_pair(&mut probe, first, second)?;
            if let Some(pair) = pair {
                method = Method::SplitBisection;
                candidates = pair;
            } else {
                method = Method::DeltaDebugging;
                let start = probe.runs;
                (candidates, capped) = ddmin(&mut probe, candidates, start, ddmin_cap)?;
            }
            break;
        }
    }

    if probe.test(&[])? {
        return Ok(done(
            &probe,
            Vec::new(),
            method,
            SearchOutcome::ReproducesAlone,
        ));
    }
    let outcome = if capped {
        SearchOutcome::CapReached { cap: ddmin_cap }
    } else {
        SearchOutcome::Found
    };
    Ok(done(&probe, candidates, method, outcome))
}

/// The oracle with a run counter and a memo: a set already run is never run again, so ddmin
/// reuses the answers the halving already paid for.
struct Probe<F> {
    oracle: F,
    runs: u32,
    seen: HashMap<Vec<usize>, bool>,
}

impl<F> Probe<F> {
    fn test<E>(&mut self, set: &[usize]) -> Result<bool, E>
    where
        F: FnMut(&[usize]) -> Result<bool, E>,
    {
        if let Some(&known) = self.seen.get(set) {
            return Ok(known);
        }
        self.runs = self.runs.saturating_add(1);
        let reproduced = (self.oracle)(set)?;
        self.seen.insert(set.to_vec(), reproduced);
        Ok(reproduced)
    }

    /// `None` when answering would need a new run beyond the cap.
    fn test_capped<E>(&mut self, set: &[usize], start: u32, cap: u32) -> Result<Option<bool>, E>
    where
        F: FnMut(&[usize]) -> Result<bool, E>,
    {
        if !self.seen.contains_key(set) && self.runs.saturating_sub(start) >= cap {
            return Ok(None);
        }
        self.test(set).map(Some)
    }
}

/// One culprit in each half, neither reproducing alone: finds the first half's culprit by
/// bisecting it with the whole second half after it, then the second half's with that culprit
/// kept. Each step takes the half that reproduces and infers the other when it does not, so
/// one culprit among `m` costs `⌈log2 m⌉` runs; the pair found is then run once. It is
/// 1-minimal because neither half reproduced without the other, and each culprit lies in one
/// of them (leftover state does not vanish when other tests are left out: the assumption
/// bisection itself rests on). `None` when the pair does not reproduce (more than one culprit in
/// a half, or one that needs company): the caller falls back to ddmin.
///
/// Cost, with the whole prefix known to reproduce: 2 runs for the halves, `⌈log2 ⌈n/2⌉⌉` for each
/// culprit, 1 for the pair and 1 for the victim alone: within `2·⌈log2 n⌉ + 2`.
fn split_pair<E, F>(
    probe: &mut Probe<F>,
    first: &[usize],
    second: &[usize],
) -> Result<Option<Vec<usize>>, E>
where
    F: FnMut(&[usize]) -> Result<bool, E>,
{
    let a = one_of(probe, first, second, false)?;
    let b = one_of(probe, second, &[a], true)?;
    let pair = [a, b];
    Ok(probe.test(&pair)?.then(|| pair.to_vec()))
}

/// Bisects `candidates` for the one test that, together with `kept` (run before the candidates
/// when `kept_first`, after them otherwise), reproduces the anomaly.
fn one_of<E, F>(
    probe: &mut Probe<F>,
    candidates: &[usize],
    kept: &[usize],
    kept_first: bool,
) -> Result<usize, E>
where
    F: FnMut(&[usize]) -> Result<bool, E>,
{
    let mut candidates = candidates.to_vec();
    while candidates.len() > 1 {
        let (low, high) = candidates.split_at(candidates.len() / 2);
        let set: Vec<usize> = if kept_first {
            kept.iter().chain(low).copied().collect()
        } else {
            low.iter().chain(kept).copied().collect()
        };
        candidates = if probe.test(&set)? {
            low.to_vec()
        } else {
            high.to_vec()
        };
    }
    Ok(candidates[0])
}

/// Zeller's ddmin over `candidates` (which reproduce), preserving order. Returns a 1-minimal
/// reproducing subset, or, with `true`, the smallest reproducing subset found when the cap hit.
fn ddmin<E, F>(
    probe: &mut Probe<F>,
    mut candidates: Vec<usize>,
    start: u32,
    cap: u32,
) -> Result<(Vec<usize>, bool), E>
where
    F: FnMut(&[usize]) -> Result<bool, E>,
{
    let mut granularity = 2;
    while candidates.len() >= 2 {
        let chunks = split(&candidates, granularity);
        let mut reduced = None;
        for chunk in &chunks {
            match probe.test_capped(chunk, start, cap)? {
                None => return Ok((candidates, true)),
                Some(true) => {
                    reduced = Some((chunk.clone(), 2));
                    break;
                }
                Some(false) => {}
            }
        }
        // With two chunks each complement is the other chunk, already tested.
        if reduced.is_none() && chunks.len() > 2 {
            for skip in 0..chunks.len() {
                let complement: Vec<usize> = chunks
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != skip)
                    .flat_map(|(_, c)| c.iter().copied())
                    .collect();
                match probe.test_capped(&complement, start, cap)? {
                    None => return Ok((candidates, true)),
                    Some(true) => {
                        reduced = Some((complement, (granularity - 1).max(2)));
                        break;
                    }
                    Some(false) => {}
                }
            }
        }
        match reduced {
            Some((smaller, next)) => {
                candidates = smaller;
                granularity = next.min(candidates.len()).max(2);
            }
            None if granularity >= candidates.len() => break,
            None => granularity = (granularity * 2).min(candidates.len()),
        }
    }
    Ok((candidates, false))
}

/// `items` cut into `parts` contiguous, non-empty chunks whose sizes differ by at most one.
fn split(items: &[usize], parts: usize) -> Vec<Vec<usize>> {
    let parts = parts.clamp(1, items.len().max(1));
    let (size, extra) = (items.len() / parts, items.len() % parts);
    let mut chunks = Vec::with_capacity(parts);
    let mut at = 0;
    for i in 0..parts {
        let len = size + usize::from(i < extra);
        chunks.push(items[at..at + len].to_vec());
        at += len;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::convert::Infallible;

    use super::*;

    /// What a simulated test does to the shared state.
    #[derive(Clone, Copy, PartialEq)]
    enum Act {
        Nothing,
        /// Dirties the state.
        Pollute,
        /// Restores the state.
        Clean,
        /// Sets up what a brittle victim needs.
        Set,
        /// One of several tests whose effects only together break the victim.
        Part(u32),
    }

    #[derive(Default)]
    struct State {
        dirty: bool,
        set: bool,
        parts: u32,
    }

    /// Runs the prefix tests in `order`, then returns whether the victim passes.
    fn victim_passes(acts: &[Act], order: &[usize], needs_parts: u32, brittle: bool) -> bool {
        let mut s = State::default();
        for &i in order {
            match acts[i] {
                Act::Nothing => {}
                Act::Pollute => s.dirty = true,
                Act::Clean => s.dirty = false,
                Act::Set => s.set = true,
                Act::Part(bit) => s.parts |= 1 << bit,
            }
        }
        let broken = s.dirty || (needs_parts != 0 && s.parts & needs_parts == needs_parts);
        !broken && (!brittle || s.set)
    }

    fn acts(n: usize, placed: &[(usize, Act)]) -> Vec<Act> {
        let mut v = vec![Act::Nothing; n];
        for &(i, a) in placed {
            v[i] = a;
        }
        v
    }

    /// Runs a polluter search (the anomaly: the victim fails) and checks every call's argument.
    fn polluter_search(acts: &[Act], needs_parts: u32, cap: u32) -> Search {
        let ok: Result<Search, Infallible> = search(acts.len(), cap, |set| {
            assert!(
                set.windows(2).all(|w| w[0] < w[1]),
                "order preserved: {set:?}"
            );
            assert!(set.iter().all(|&i| i < acts.len()));
            Ok(!victim_passes(acts, set, needs_parts, false))
        });
        match ok {
            Ok(s) => s,
            Err(never) => match never {},
        }
    }

    #[test]
    fn run_bound_values() {
        assert_eq!(run_bound(0), 2);
        assert_eq!(run_bound(1), 2);
        assert_eq!(run_bound(2), 4);
        assert_eq!(run_bound(3), 6);
        assert_eq!(run_bound(4), 6);
        assert_eq!(run_bound(5), 8);
        assert_eq!(run_bound(64), 14);
        assert_eq!(run_bound(65), 16);
    }

    #[test]
    fn single_polluter_at_every_position_among_64_within_the_bound() {
        for p in 0..64 {
            let s = polluter_search(&acts(64, &[(p, Act::Pollute)]), 0, DEFAULT_DDMIN_CAP);
            assert_eq!(s.outcome, SearchOutcome::Found, "position {p}");
            assert_eq!(s.culprits, [p]);
            assert_eq!(s.method, Method::Bisection);
            assert!(s.runs <= 14, "position {p}: {} runs", s.runs);
        }
    }

    #[test]
    fn single_polluter_within_the_bound_for_every_size() {
        for n in 1..=70 {
            for p in 0..n {
                let s = polluter_search(&acts(n, &[(p, Act::Pollute)]), 0, DEFAULT_DDMIN_CAP);
                assert_eq!(
                    (s.outcome, s.culprits.as_slice()),
                    (SearchOutcome::Found, &[p][..])
                );
                assert!(s.runs <= run_bound(n), "n={n} p={p}: {} runs", s.runs);
            }
        }
    }

    /// A state-setter search: the anomaly is that the brittle victim passes.
    fn setter_search(acts: &[Act]) -> Search {
        let ok: Result<Search, Infallible> = search(acts.len(), DEFAULT_DDMIN_CAP, |set| {
            Ok(victim_passes(acts, set, 0, true))
        });
        match ok {
            Ok(s) => s,
            Err(never) => match never {},
        }
    }

    #[test]
    fn state_setter() {
        for p in 0..64 {
            let s = setter_search(&acts(64, &[(p, Act::Set)]));
            assert_eq!(
                (s.outcome, s.culprits.as_slice()),
                (SearchOutcome::Found, &[p][..])
            );
            assert!(s.runs <= 14, "position {p}: {} runs", s.runs);
        }
        // A prefix without the setter cannot make the victim pass.
        let s = setter_search(&acts(20, &[]));
        assert_eq!(s.outcome, SearchOutcome::NotReproduced);
        // A polluter that something cleans up before the setter runs is not part of the answer.
        let s = setter_search(&acts(
            20,
            &[(2, Act::Pollute), (5, Act::Clean), (9, Act::Set)],
        ));
        assert_eq!((s.outcome, s.culprits), (SearchOutcome::Found, vec![9]));
    }

    #[test]
    fn a_pair_needed_together_is_found_by_bisecting_each_half() {
        let acts = acts(64, &[(10, Act::Part(0)), (50, Act::Part(1))]);
        let s = polluter_search(&acts, 0b11, DEFAULT_DDMIN_CAP);
        assert_eq!(s.outcome, SearchOutcome::Found);
        assert_eq!(s.method, Method::SplitBisection);
        assert_eq!(s.culprits, [10, 50]);
        // Without the whole prefix known, one run more than the bound at most.
        assert!(s.runs <= run_bound(64) + 1, "{} runs", s.runs);
    }

    #[test]
    fn a_pair_anywhere_across_the_halves_within_the_bound_when_the_prefix_is_known() {
        for n in [2, 3, 5, 17, 64, 100] {
            for a in 0..n / 2 {
                for b in n / 2..n {
                    let acts = acts(n, &[(a, Act::Part(0)), (b, Act::Part(1))]);
                    let s = match search_from(n, DEFAULT_DDMIN_CAP, true, |set: &[usize]| {
                        assert!(set.windows(2).all(|w| w[0] < w[1]), "{set:?}");
                        Ok::<bool, Infallible>(!victim_passes(&acts, set, 0b11, false))
                    }) {
                        Ok(s) => s,
                        Err(never) => match never {},
                    };
                    assert_eq!(
                        (s.outcome, &s.culprits[..]),
                        (SearchOutcome::Found, &[a, b][..]),
                        "n={n} a={a} b={b}"
                    );
                    assert!(s.runs <= run_bound(n), "n={n} a={a} b={b}: {} runs", s.runs);
                }
            }
        }
    }

    #[test]
    fn a_known_reproducing_prefix_is_not_run_again() {
        let acts = acts(64, &[(9, Act::Pollute)]);
        let calls = Cell::new(0);
        let s = search_from(64, DEFAULT_DDMIN_CAP, true, |set: &[usize]| {
            assert_ne!(set.len(), 64, "the whole prefix ran again");
            calls.set(calls.get() + 1);
            Ok::<bool, Infallible>(!victim_passes(&acts, set, 0, false))
        });
        let s = match s {
            Ok(s) => s,
            Err(never) => match never {},
        };
        assert_eq!((s.outcome, s.culprits), (SearchOutcome::Found, vec![9]));
        assert_eq!(s.runs, calls.get());
        assert!(s.runs < run_bound(64));
    }

    #[test]
    fn three_needed_together() {
        let acts = acts(
            40,
            &[(3, Act::Part(0)), (4, Act::Part(1)), (39, Act::Part(2))],
        );
        let s = polluter_search(&acts, 0b111, DEFAULT_DDMIN_CAP);
        assert_eq!(
            (s.outcome, s.culprits),
            (SearchOutcome::Found, vec![3, 4, 39])
        );
    }

    #[test]
    fn a_pair_in_the_same_half_still_needs_ddmin_deeper_down() {
        let acts = acts(64, &[(1, Act::Part(0)), (2, Act::Part(1))]);
        let s = polluter_search(&acts, 0b11, DEFAULT_DDMIN_CAP);
        assert_eq!((s.outcome, s.culprits), (SearchOutcome::Found, vec![1, 2]));
    }

    #[test]
    fn a_cleaner_masking_a_polluter_in_one_half() {
        // 40 pollutes, 45 cleans up after it, 50 pollutes again: the half holding 40 and 45 is
        // clean, so the search must follow 50.
        let acts = acts(
            64,
            &[(40, Act::Pollute), (45, Act::Clean), (50, Act::Pollute)],
        );
        let s = polluter_search(&acts, 0, DEFAULT_DDMIN_CAP);
        assert_eq!(
            (s.outcome, s.culprits.clone()),
            (SearchOutcome::Found, vec![50])
        );
        assert!(s.runs <= 14);

        // Within eight tests: 1 pollutes, 2 cleans, 6 pollutes.
        let acts = self::acts(8, &[(1, Act::Pollute), (2, Act::Clean), (6, Act::Pollute)]);
        let s = polluter_search(&acts, 0, DEFAULT_DDMIN_CAP);
        assert_eq!((s.outcome, s.culprits), (SearchOutcome::Found, vec![6]));
    }

    #[test]
    fn a_cleaner_after_the_polluter_means_nothing_reproduces() {
        let acts = acts(16, &[(3, Act::Pollute), (9, Act::Clean)]);
        let s = polluter_search(&acts, 0, DEFAULT_DDMIN_CAP);
        assert_eq!(s.outcome, SearchOutcome::NotReproduced);
        assert!(s.culprits.is_empty());
        assert_eq!(s.runs, 1);
    }

    #[test]
    fn a_prefix_that_does_not_reproduce() {
        let s = polluter_search(&acts(64, &[]), 0, DEFAULT_DDMIN_CAP);
        assert_eq!(s.outcome, SearchOutcome::NotReproduced);
        assert!(s.culprits.is_empty());
        assert_eq!(s.runs, 1);
    }

    #[test]
    fn a_victim_that_reproduces_alone_is_not_blamed_on_the_prefix() {
        let calls = Cell::new(0u32);
        let s: Result<Search, Infallible> = search(64, DEFAULT_DDMIN_CAP, |_| {
            calls.set(calls.get() + 1);
            Ok(true)
        });
        let s = s.ok();
        assert_eq!(
            s.as_ref().map(|s| (s.outcome, s.culprits.is_empty())),
            Some((SearchOutcome::ReproducesAlone, true))
        );
        assert_eq!(s.map(|s| s.runs), Some(calls.get()));
        assert_eq!(calls.get(), 1 + 6 + 1);
    }

    #[test]
    fn an_empty_prefix() {
        let s: Result<Search, Infallible> = search(0, 8, |set| {
            assert!(set.is_empty());
            Ok(true)
        });
        assert_eq!(
            s.ok().map(|s| (s.outcome, s.runs)),
            Some((SearchOutcome::ReproducesAlone, 1))
        );
        let s: Result<Search, Infallible> = search(0, 8, |_| Ok(false));
        assert_eq!(
            s.ok().map(|s| (s.outcome, s.runs)),
            Some((SearchOutcome::NotReproduced, 1))
        );
    }

    #[test]
    fn a_prefix_of_one() {
        let s = polluter_search(&[Act::Pollute], 0, DEFAULT_DDMIN_CAP);
        assert_eq!(
            (s.outcome, s.culprits, s.runs),
            (SearchOutcome::Found, vec![0], 2)
        );
    }

    #[test]
    fn an_oracle_error_stops_the_search() {
        let calls = Cell::new(0u32);
        let r: Result<Search, String> = search(64, DEFAULT_DDMIN_CAP, |set| {
            calls.set(calls.get() + 1);
            if calls.get() == 3 {
                Err(format!("sandbox failed on {} tests", set.len()))
            } else {
                Ok(true)
            }
        });
        assert_eq!(r, Err("sandbox failed on 16 tests".to_owned()));
        assert_eq!(calls.get(), 3);

        // An error inside ddmin, too.
        let acts = acts(64, &[(10, Act::Part(0)), (50, Act::Part(1))]);
        let calls = Cell::new(0u32);
        let r: Result<Search, &str> = search(64, DEFAULT_DDMIN_CAP, |set| {
            calls.set(calls.get() + 1);
            if calls.get() > 5 {
                return Err("interpreter vanished");
            }
            Ok(!victim_passes(&acts, set, 0b11, false))
        });
        assert_eq!(r, Err("interpreter vanished"));
        assert_eq!(calls.get(), 6);
    }

    #[test]
    fn the_ddmin_cap_reports_a_partial_result() {
        let acts = acts(
            64,
            &[(10, Act::Part(0)), (11, Act::Part(2)), (50, Act::Part(1))],
        );
        let s = polluter_search(&acts, 0b111, 6);
        assert_eq!(s.outcome, SearchOutcome::CapReached { cap: 6 });
        assert_eq!(s.method, Method::DeltaDebugging);
        // Honest: what is reported still reproduces and holds every culprit.
        assert!(!victim_passes(&acts, &s.culprits, 0b111, false));
        assert!([10, 11, 50].iter().all(|c| s.culprits.contains(c)));
        assert!(s.culprits.len() < 64);
        // initial + two halves + the split bisection (two of ⌈log2 32⌉ and the pair) + at most
        // six ddmin runs + the final check
        assert!(s.runs <= 1 + 2 + 11 + 6 + 1, "{} runs", s.runs);
        assert!(matches!(s.outcome, SearchOutcome::CapReached { .. }));

        let s = polluter_search(&acts, 0b111, 0);
        assert_eq!(s.outcome, SearchOutcome::CapReached { cap: 0 });
        assert_eq!(s.culprits.len(), 64);
        // initial + two halves + the split bisection (5 + 5 + the pair) + the final check
        assert_eq!(s.runs, 1 + 2 + 11 + 1);
    }

    #[test]
    fn split_is_even_and_complete() {
        assert_eq!(split(&[1, 2, 3, 4, 5], 2), vec![vec![1, 2, 3], vec![4, 5]]);
        assert_eq!(split(&[1, 2, 3], 3), vec![vec![1], vec![2], vec![3]]);
        assert_eq!(split(&[1, 2], 5), vec![vec![1], vec![2]]);
        assert_eq!(split(&[], 2), vec![Vec::<usize>::new()]);
    }

    #[test]
    fn serializes_for_the_report() {
        let s = Search {
            culprits: vec![3],
            runs: 9,
            method: Method::Bisection,
            outcome: SearchOutcome::CapReached { cap: 64 },
        };
        assert_eq!(
            serde_json::to_string(&s).unwrap_or_default(),
            r#"{"culprits":[3],"runs":9,"method":"bisection","outcome":{"status":"cap-reached","cap":64}}"#
        );
        assert_eq!(PairKind::StateSetter.as_str(), "state-setter");
    }
}
