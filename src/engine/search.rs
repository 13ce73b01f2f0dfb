//! The polluter search on real runs: every oracle call of the bisection is a cached run of
//! "these prefix tests, then the victim" in a fresh sandbox.

use std::cell::Cell;

use fixgate_graph::NodeId;

use crate::audit::bisect::{self, PairKind, Search};
use crate::audit::order::OrderLabel;
use crate::audit::pair::{Found, Pair};
use crate::audit::triage::PROOF_RERUNS;
use crate::engine::kind::{self, repeat, NodeKind};
use crate::engine::runs::RunRequest;
use crate::engine::step::Engine;
use crate::engine::step::Role;
use crate::error::Error;
use crate::pytest::result::Outcome;

/// What a pair node records: the answer to "who makes this victim misbehave in this run".
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Answer {
    pub(crate) kind: PairKind,
    pub(crate) culprits: Vec<String>,
    pub(crate) search: Search,
    pub(crate) found: Found,
    /// Runs that checked the pair holds (culprits then victim, and the victim alone).
    pub(crate) verify_runs: u32,
    /// The victim showed its anomaly alone: flaky, and order-dependent too when the pair holds.
    #[serde(default)]
    pub(crate) victim_flaky: bool,
}

/// What [`verify`] established.
pub(crate) struct Verified {
    /// The outcome to record: the search's, or [`bisect::SearchOutcome::Unstable`].
    pub(crate) outcome: bisect::SearchOutcome,
    pub(crate) runs: u32,
    /// The last run's node.
    pub(crate) last: NodeId,
    /// The victim showed the anomaly alone on some run: it is flaky, whether or not the pair
    /// also holds.
    pub(crate) victim_flaky: bool,
}

/// Runs in a row that each step of a second search must show the anomaly on, when the first
/// search's answer did not hold. A victim that also fails by chance one time in five sends a
/// step of the first search the wrong way now and then; the second search reuses that run, so
/// the same step goes wrong again only after five more chance failures in a row (1 in 3,125),
/// where three in all needed two more (1 in 25; docs/verdicts.md has the measurement).
pub(crate) const SEARCH_AGAIN_REPEATS: u32 = 6;

/// Runs "the culprits then the victim" made of a flaky victim (one that showed the anomaly
/// alone): every one must show the anomaly.
pub(crate) const FLAKY_PAIR_RUNS: u32 = 12;
/// Runs of a flaky victim alone, of which at least [`FLAKY_ALONE_NORMAL`] must be normal.
pub(crate) const FLAKY_ALONE_RUNS: u32 = 20;
pub(crate) const FLAKY_ALONE_NORMAL: u32 = 11;

/// What the matrix and the confirmation said of a victim before its pair's check.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Prior {
    /// It gave both outcomes in one order (its confirmation or its first runs alone): it is
    /// reported flaky whatever its check says, and its check is a flaky victim's.
    pub(crate) flaky: bool,
    /// An order of the matrix showed its anomaly without every culprit before it: a chance
    /// anomaly (a flaky victim whose flakiness did not show again) or another cause. Its check
    /// is a flaky victim's, so that a set a chance anomaly sent the search to does not hold on
    /// three runs that fail by chance too; it is reported flaky only when its runs show it.
    pub(crate) unexplained: bool,
}

impl Prior {
    /// `flaky`, and whether any of `orders` (label, the order up to and with the victim, its
    /// outcome, as [`order_check`] takes them) showed the anomaly without every culprit.
    pub(crate) fn of(
        flaky: bool,
        kind: PairKind,
        culprits: &[String],
        orders: &[(OrderLabel, Vec<String>, Outcome)],
    ) -> Prior {
        let unexplained = orders.iter().any(|(_, order, seen)| {
            kind.anomaly(seen.is_green()) && !culprits.iter().all(|c| order.contains(c))
        });
        Prior { flaky, unexplained }
    }
}

/// Checks a pair [`PROOF_RERUNS`] times each way: the culprits then the victim show the anomaly,
/// the victim alone does not (`alone`: whether each alone run made so far was green, see
/// [`settle_alone`]; they count among the alone runs).
/// Reads the runs up to the first that disagrees; they are made side by side
/// ([`Check::runs_side_by_side`]), since a check that holds needs every one.
///
/// A victim that shows the anomaly alone (or is known flaky, [`Prior::flaky`]) is flaky, but it
/// can be order-dependent too: its anomaly may follow the culprits every time and show alone
/// only now and then. Then, and when an order showed the anomaly without the culprits
/// ([`Prior::unexplained`]), the check goes on: the culprits then the victim must show the
/// anomaly on all [`FLAKY_PAIR_RUNS`], and the victim alone must be normal on at least
/// [`FLAKY_ALONE_NORMAL`] of [`FLAKY_ALONE_RUNS`].
/// A test that flakes with probability `p` whatever ran before it passes that (with the three
/// reruns of its failing order that made it a candidate) with probability at most
/// `p^15 · P(Binomial(20, 1-p) ≥ 11)`, 8.6 × 10⁻⁵ at its worst `p` (docs/verdicts.md, "How sure a
/// reject is"); a victim that flakes alone one time in five is still found 99.7% of the time.
pub(crate) fn verify(
    engine: &Engine,
    victim: &str,
    kind: PairKind,
    culprits: &[String],
    alone: &[bool],
    prior: Prior,
    after: NodeId,
) -> Result<Verified, Error> {
    let mut order = culprits.to_vec();
    order.push(victim.to_string());
    // Labels name the set: a second search's check is another node (its runs of the victim
    // alone, the same params, come from the cache).
    let tag = blake3::hash(order.join("\n").as_bytes()).to_hex()[..12].to_string();
    let mut c = Check {
        engine,
        victim,
        tag,
        kind,
        order,
        last: after,
        runs: 0,
        pair_runs: 0,
        pair_broke: false,
        normal_alone: 0,
        anomalous_alone: 0,
    };
    for &green in alone {
        c.count_alone(green);
    }
    // The pair's runs and the victim's runs alone side by side: a check that holds needs
    // every one of them.
    c.runs_side_by_side(PROOF_RERUNS as u32, PROOF_RERUNS as u32)?;
    let victim_flaky = prior.flaky || c.anomalous_alone > 0;
    let strict = victim_flaky || prior.unexplained;
    if !c.pair_broke && strict {
        c.runs_side_by_side(FLAKY_PAIR_RUNS, 0)?;
        while !c.pair_broke
            && c.normal_alone < FLAKY_ALONE_NORMAL
            && c.anomalous_alone <= FLAKY_ALONE_RUNS - FLAKY_ALONE_NORMAL
        {
            c.alone()?;
        }
    }
    let holds = !c.pair_broke && (!strict || c.normal_alone >= FLAKY_ALONE_NORMAL);
    let outcome = match holds {
        true => bisect::SearchOutcome::Found,
        false => bisect::SearchOutcome::Unstable {
            reproduced: c.pair_runs - u32::from(c.pair_broke),
            of: c.pair_runs,
        },
    };
    Ok(Verified {
        outcome,
        runs: c.runs,
        last: c.last,
        victim_flaky,
    })
}

/// The runs of one [`verify`]: each batch of them after the one before it.
struct Check<'e, 'l, 'a> {
    engine: &'e Engine<'l, 'a>,
    victim: &'e str,
    tag: String,
    kind: PairKind,
    /// The culprits then the victim.
    order: Vec<String>,
    last: NodeId,
    runs: u32,
    pair_runs: u32,
    /// A run of the pair was normal.
    pair_broke: bool,
    normal_alone: u32,
    anomalous_alone: u32,
}

impl Check<'_, '_, '_> {
    fn anomaly(&self, green: bool) -> bool {
        self.kind.anomaly(green)
    }

    fn alone_runs(&self) -> u32 {
        self.normal_alone + self.anomalous_alone
    }

    /// Adds a run of this check, or finds the one this audit already made under its label: a
    /// check's labels name its victim, its set and the repetition, so a second check of the
    /// same set for the same victim (its cached answer checked, and then the same set found by
    /// its search) is the same runs, read again.
    fn add(&self, req: &RunRequest) -> Result<NodeId, Error> {
        match self.engine.live.find(&req.label) {
            Some(node) => Ok(node),
            None => self.engine.add_run(req),
        }
    }

    fn pair_request(&self, k: u32) -> RunRequest {
        RunRequest::new(
            repeat(NodeKind::VerifyRun.tagged(self.victim, &self.tag), k),
            NodeKind::VerifyRun,
            Role::Head,
            self.order.clone(),
        )
        .after(&[self.last])
        .repeat(k)
    }

    fn alone_request(&self, k: u32) -> RunRequest {
        RunRequest::new(
            format!("{}#{k}", NodeKind::AloneRun.tagged(self.victim, &self.tag)),
            NodeKind::AloneRun,
            Role::Head,
            vec![self.victim.to_string()],
        )
        .after(&[self.last])
        .repeat(k)
    }

    /// Runs the pair until `pair_upto` runs in all (while none was normal) and the victim alone
    /// until `alone_upto` (while none was anomalous), all side by side, then reads them as the
    /// same runs one after another would have been read: the pair's up to its first normal
    /// outcome (the runs after it are made but do not count, and no later one is asked for),
    /// every run alone. The outcomes that decide are the ones a run-by-run check would see, so
    /// the bound on a false reject is the same; the price is the runs that check would not
    /// have made once the pair broke.
    fn runs_side_by_side(&mut self, pair_upto: u32, alone_upto: u32) -> Result<(), Error> {
        let pair: Vec<u32> = match self.pair_broke {
            true => Vec::new(),
            false => (self.pair_runs..pair_upto).collect(),
        };
        let alone: Vec<u32> = match self.anomalous_alone > 0 {
            true => Vec::new(),
            false => (self.alone_runs()..alone_upto).collect(),
        };
        let mut pair_nodes = Vec::new();
        for k in pair {
            pair_nodes.push(self.add(&self.pair_request(k))?);
        }
        let mut alone_nodes = Vec::new();
        for k in alone {
            alone_nodes.push(self.add(&self.alone_request(k))?);
        }
        for &node in &pair_nodes {
            let result = self.engine.wait_ok(node)?;
            self.runs += 1;
            if !self.pair_broke {
                self.pair_runs += 1;
                self.pair_broke = !self.anomaly(outcome(&result, self.victim).is_green());
            }
        }
        for &node in &alone_nodes {
            let result = self.engine.wait_ok(node)?;
            self.runs += 1;
            self.count_alone(outcome(&result, self.victim).is_green());
        }
        if let Some(&node) = alone_nodes.last().or(pair_nodes.last()) {
            self.last = node;
        }
        Ok(())
    }

    /// One more run of the victim alone.
    fn alone(&mut self) -> Result<(), Error> {
        let node = self.add(&self.alone_request(self.alone_runs()))?;
        let result = self.engine.wait_ok(node)?;
        (self.runs, self.last) = (self.runs + 1, node);
        self.count_alone(outcome(&result, self.victim).is_green());
        Ok(())
    }

    /// Counts a run of the victim alone that was `green`.
    fn count_alone(&mut self, green: bool) {
        match self.anomaly(green) {
            true => self.anomalous_alone += 1,
            false => self.normal_alone += 1,
        }
    }
}

/// The victim's runs alone that decide which search it gets: the confirmation's (`first`), and
/// while they are all red, more, up to [`PROOF_RERUNS`] in all. Red on every one:
/// the victim needs a state-setter. Green on some: it has a polluter, and the red ones say it is
/// flaky too (a test that fails now and then alone would otherwise be searched for a
/// state-setter on one unlucky run). Returns each run's outcome and the nodes it added.
pub(crate) fn settle_alone(
    engine: &Engine,
    victim: &str,
    first: Option<Outcome>,
    after: &[NodeId],
) -> Result<(Vec<Outcome>, Vec<NodeId>), Error> {
    let Some(first) = first else {
        return Ok((Vec::new(), Vec::new()));
    };
    let (mut seen, mut nodes) = (vec![first], Vec::new());
    while seen.iter().all(|o| !o.is_green()) && seen.len() < PROOF_RERUNS {
        let k = seen.len() as u32;
        let req = RunRequest::new(
            repeat(NodeKind::AloneRun.of(victim), k),
            NodeKind::AloneRun,
            Role::Head,
            vec![victim.to_string()],
        )
        .after(nodes.last().map_or(after, std::slice::from_ref))
        .repeat(k);
        let (node, result) = engine.run_one(&req)?;
        seen.push(outcome(&result, victim));
        nodes.push(node);
    }
    Ok((seen, nodes))
}

/// Whether a victim with a proven pair is flaky too, from its seed orders (`orders`: label, the
/// order up to and with the victim, its outcome): an order the pair does not explain (the
/// anomaly without all the culprits before the victim, or the normal outcome after them all)
/// runs once more. Another outcome in the same order is flakiness; the same one is not (another
/// polluter, or a test that cleans up between, explains it). Returns the answer and the last
/// node.
pub(crate) fn order_check(
    engine: &Engine,
    victim: &str,
    kind: PairKind,
    culprits: &[String],
    orders: &[(OrderLabel, Vec<String>, Outcome)],
    after: NodeId,
) -> Result<(bool, NodeId), Error> {
    let anomaly = |o: Outcome| kind.anomaly(o.is_green());
    let mut last = after;
    for (label, order, seen) in orders {
        let after_all = culprits.iter().all(|c| order.contains(c));
        if anomaly(*seen) == after_all {
            continue;
        }
        let req = RunRequest::new(
            kind::order_check(victim, label),
            NodeKind::ConfirmRun,
            Role::Head,
            order.clone(),
        )
        .after(&[last]);
        let (node, result) = engine.run_one(&req)?;
        last = node;
        if anomaly(outcome(&result, victim)) != anomaly(*seen) {
            return Ok((true, last));
        }
    }
    Ok((false, last))
}

/// A found (or unexplained) pair, and the last node of the runs that found it (each step of a
/// search starts after the one before it; what comes next starts after the last).
pub(crate) struct PairRun {
    pub(crate) pair: Pair,
    pub(crate) last: NodeId,
}

/// A known culprit set to try before searching, and where it is known from.
pub(crate) struct Known {
    pub(crate) culprits: Vec<String>,
    pub(crate) from: Found,
}

/// Tries each known set that ran before the victim in `prefix`: one run of "the set, then the
/// victim". A set reproduces when that run shows the anomaly and the victim alone (`alone`, known
/// from confirmation) does not. Returns the first set that reproduces, `None` when none does
/// (then the caller searches). Each try starts after the one before it.
pub(crate) fn reuse(
    engine: &Engine,
    victim: &str,
    prefix: &[String],
    kind: PairKind,
    alone: Option<bool>,
    known: &[Known],
    after: &[NodeId],
) -> Result<Option<PairRun>, Error> {
    // The victim alone must show the normal outcome, or no set can be its culprits.
    let normal_alone = alone.is_some_and(|green| !kind.anomaly(green));
    if !normal_alone {
        return Ok(None);
    }
    let mut previous = after.to_vec();
    let mut runs = 0;
    let mut tried: Vec<&Vec<String>> = Vec::new();
    for k in known {
        let indices: Option<Vec<usize>> = k
            .culprits
            .iter()
            .map(|c| prefix.iter().position(|p| p == c))
            .collect();
        let Some(mut indices) = indices else { continue };
        if indices.is_empty() || tried.contains(&&k.culprits) {
            continue;
        }
        tried.push(&k.culprits);
        indices.sort_unstable();
        let mut order: Vec<String> = indices.iter().map(|&i| prefix[i].clone()).collect();
        order.push(victim.to_string());
        let key = blake3::hash(order.join("\n").as_bytes()).to_hex();
        let req = RunRequest::new(
            NodeKind::ReuseRun.tagged(victim, &key[..12]),
            NodeKind::ReuseRun,
            Role::Head,
            order,
        )
        .after(&previous);
        let (node, result) = engine.run_one(&req)?;
        runs += 1;
        previous = vec![node];
        if kind.anomaly(outcome(&result, victim).is_green()) {
            return Ok(Some(PairRun {
                pair: Pair {
                    kind,
                    victim: victim.to_string(),
                    culprits: indices.iter().map(|&i| prefix[i].clone()).collect(),
                    search: Search {
                        culprits: indices,
                        runs,
                        method: bisect::Method::Reused,
                        outcome: bisect::SearchOutcome::Found,
                    },
                    found: k.from,
                    verify_runs: 0,
                },
                last: node,
            }));
        }
    }
    Ok(None)
}

/// What one search looks for: the tests responsible for `victim`'s anomaly (`kind`: a polluter
/// makes it fail, a state-setter makes it pass) among `prefix`, the tests that ran before it in
/// the order where it misbehaved. `whole_reproduces`: a confirmation run of the same order
/// already showed the anomaly after the whole prefix. `repeats`: how many runs in a row a step
/// must show the anomaly to count as showing it (1, or more for a victim known to show it now
/// and then by itself: a step that shows it by chance would send the search the wrong way).
pub(crate) struct Hunt<'a> {
    pub(crate) victim: &'a str,
    pub(crate) prefix: &'a [String],
    pub(crate) kind: PairKind,
    pub(crate) whole_reproduces: bool,
    pub(crate) repeats: u32,
}

/// Searches the head for what `hunt` looks for. The first step starts after `after` (the runs
/// that showed the anomaly), every other after the step before it: one chain in the audit's
/// graph.
pub(crate) fn find(engine: &Engine, hunt: &Hunt, after: &[NodeId]) -> Result<PairRun, Error> {
    let Hunt {
        victim,
        prefix,
        kind,
        whole_reproduces,
        repeats,
    } = *hunt;
    let role = Role::Head;
    let first = after.to_vec();
    let last: Cell<Option<NodeId>> = Cell::new(None);
    let repeated = Cell::new(0u32);
    let mut search = bisect::search_from(
        prefix.len(),
        bisect::DEFAULT_DDMIN_CAP,
        whole_reproduces,
        |subset: &[usize]| {
            let mut order: Vec<String> = subset.iter().map(|&i| prefix[i].clone()).collect();
            order.push(victim.to_string());
            let key = blake3::hash(order.join("\n").as_bytes()).to_hex();
            for k in 0..repeats.max(1) {
                let previous = match last.get() {
                    Some(id) => vec![id],
                    None => first.clone(),
                };
                // A search with repeats follows one without (same kind, order and repeat: the
                // run already made is found in the cache), under labels of its own.
                let step = NodeKind::BisectRun.tagged(victim, &key[..12]);
                let req = RunRequest::new(
                    match repeats {
                        0 | 1 => step,
                        r => repeat(format!("{step}x{r}"), k),
                    },
                    NodeKind::BisectRun,
                    role,
                    order.clone(),
                )
                .after(&previous)
                .repeat(k);
                let (node, result) = engine.run_one(&req)?;
                last.set(Some(node));
                repeated.set(repeated.get() + u32::from(k > 0));
                if !kind.anomaly(outcome(&result, victim).is_green()) {
                    return Ok(false);
                }
            }
            Ok::<bool, Error>(true)
        },
    )?;
    // The report counts processes: a repeated step is several.
    search.runs += repeated.get();
    let last = last.get().or(first.first().copied()).ok_or_else(|| {
        Error::bug(format!(
            "the search for {victim} has no node to start after"
        ))
    })?;
    Ok(PairRun {
        pair: Pair {
            kind,
            victim: victim.to_string(),
            culprits: search.culprits.iter().map(|&i| prefix[i].clone()).collect(),
            search,
            found: Found::Searched,
            verify_runs: 0,
        },
        last,
    })
}

/// The victim's outcome in a run; one that never ran (an earlier test ended the session with
/// `pytest.exit()`, say) is red: its green is not real. One rule for the search, the reuse and
/// the checks.
fn outcome(result: &crate::pytest::result::RunResult, victim: &str) -> Outcome {
    result.outcome_of(victim).unwrap_or(Outcome::Error)
}

/// What [`verify_batch`] established for each victim of a batch.
pub(crate) struct BatchProof {
    /// The victims the set is proven for, each with its culprits' places in its own prefix.
    pub(crate) proven: Vec<String>,
    /// Runs the batch made (each one process, shared by every victim of the batch).
    pub(crate) runs: u32,
    /// The node of the last round's run without the culprits (both of that round's runs are
    /// done when the proof returns).
    pub(crate) last: NodeId,
}

/// Proves one culprit set for many victims at once: [`PROOF_RERUNS`] runs of "the culprits,
/// then every victim" must each show every victim's anomaly, and [`PROOF_RERUNS`] runs of "every
/// victim, without the culprits" must each show every victim normal. Each victim gets the
/// evidence [`verify`] asks of one (three runs each way), so a victim that flakes with
/// probability `p` whatever ran before it passes with probability at most `(1-p)^3 p^3`, the
/// per-victim bound (docs/verdicts.md, "How sure a reject is"). The victims should not change
/// each other's outcome: the caller batches only victims that wrote no file of the tree and, in
/// a scoped audit, left no shared state changed in the recorded runs (`crate::audit::scope`).
/// A whole audit records no state, so a victim that changes what another sees is not kept out
/// there: each victim's anomaly still shows only in the runs with the culprits, but its pair may
/// then name fewer tests than its whole cause. A victim a run does not bear out leaves the
/// batch (the caller proves it alone); the runs go on with the others, stopping when none is
/// left. The two runs of a round (with and without the culprits) run side by side.
pub(crate) fn verify_batch(
    engine: &Engine,
    kind: PairKind,
    culprits: &[String],
    victims: &[String],
    after: NodeId,
) -> Result<BatchProof, Error> {
    let anomaly = |o: Outcome| match kind {
        PairKind::Polluter => !o.is_green(),
        PairKind::StateSetter => o.is_green(),
    };
    let tag = blake3::hash(culprits.join("\n").as_bytes()).to_hex()[..12].to_string();
    let mut open: Vec<String> = victims.to_vec();
    let (mut runs, mut last) = (0u32, vec![after]);
    for k in 0..PROOF_RERUNS as u32 {
        if open.is_empty() {
            break;
        }
        // The round's two runs do not depend on each other: they run side by side, and a
        // victim either one does not bear out leaves the batch before the next round.
        let set = blake3::hash(open.join("\n").as_bytes()).to_hex()[..12].to_string();
        let mut round = Vec::new();
        for with_culprits in [true, false] {
            let mut order = if with_culprits {
                culprits.to_vec()
            } else {
                Vec::new()
            };
            order.extend(open.iter().cloned());
            let what = if with_culprits { "pair" } else { "alone" };
            let req = RunRequest::new(
                repeat(format!("batch-run({what} {tag})[{set}]"), k),
                NodeKind::VerifyRun,
                Role::Head,
                order,
            )
            .after(&last)
            .repeat(k);
            round.push((with_culprits, engine.add_run(&req)?));
        }
        last.clear();
        for (with_culprits, node) in round {
            let result = engine.wait_ok(node)?;
            runs += 1;
            last.push(node);
            open.retain(|v| anomaly(outcome(&result, v)) == with_culprits);
        }
    }
    Ok(BatchProof {
        proven: open,
        runs,
        last: last.last().copied().unwrap_or(after),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn an_anomaly_without_every_culprit_before_it_is_unexplained_and_a_normal_outcome_is_not() {
        let set = ids(&["a", "b"]);
        let orders = [
            (OrderLabel::File, ids(&["a", "b", "v"]), Outcome::Failed),
            (OrderLabel::Reversed, ids(&["v"]), Outcome::Passed),
            // Only half of the set before it, and green: says nothing.
            (OrderLabel::Seed(1), ids(&["b", "v"]), Outcome::Passed),
        ];
        let p = Prior::of(false, PairKind::Polluter, &set, &orders);
        assert!(!p.unexplained && !p.flaky, "{p:?}");

        // Red with only half of the set before it: a chance failure or another cause.
        let mut more = orders.to_vec();
        more.push((OrderLabel::Seed(2), ids(&["x", "a", "v"]), Outcome::Failed));
        let p = Prior::of(true, PairKind::Polluter, &set, &more);
        assert!(p.unexplained && p.flaky, "{p:?}");

        // A state-setter's anomaly is a pass: green without the setter is unexplained.
        let setter = ids(&["s"]);
        let orders = [
            (OrderLabel::File, ids(&["s", "v"]), Outcome::Passed),
            (OrderLabel::Seed(3), ids(&["v"]), Outcome::Failed),
        ];
        assert!(!Prior::of(false, PairKind::StateSetter, &setter, &orders).unexplained);
        let mut more = orders.to_vec();
        more.push((OrderLabel::Seed(4), ids(&["x", "v"]), Outcome::Passed));
        assert!(Prior::of(false, PairKind::StateSetter, &setter, &more).unexplained);
    }
}
