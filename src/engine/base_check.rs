//! Base checks: each head finding checked on the base snapshot with the same evidence. What the
//! base shows too is pre-existing. Base runs depend on nothing of the head, so every head
//! audited against the same base shares them through the cache.

use std::collections::{BTreeMap, HashSet};

use fixgate_graph::NodeId;

use crate::audit::base_check::{checked_alone, is_red, pair_shows, red_in_order, settled, shows};
use crate::audit::bisect::PairKind;
use crate::audit::finding::FindingKind;
use crate::audit::findings::PreExisting;
use crate::audit::pair::Pair;
use crate::audit::scope::Impact;
use crate::audit::triage::{self, PROOF_RERUNS};
use crate::engine::confirm::{Confirmed, MANY_RED};
use crate::engine::kind::{repeat, NodeKind};
use crate::engine::matrix::Matrix;
use crate::engine::runs::{Prewarm, RunRequest};
use crate::engine::step::Engine;
use crate::engine::step::Role;
use crate::error::Result;
use crate::pytest::result::Outcome;

/// What the checks know of the base: its tests, and (in the impact) which of them can follow
/// the order there.
#[derive(Clone, Copy)]
pub(crate) struct Base<'a> {
    pub(crate) ids: &'a HashSet<&'a str>,
    pub(crate) impact: &'a Impact,
}

impl<'a> Base<'a> {
    pub(crate) fn new(ids: &'a HashSet<&'a str>, impact: &'a Impact) -> Base<'a> {
        Base { ids, impact }
    }
}

/// What the checks are of: the head's triage, its pairs and matrix, the tests that wrote outside
/// their sandbox, and the triage's node (the checks start after it).
pub(crate) struct Checks<'a> {
    pub(crate) triaged: &'a BTreeMap<String, triage::Triage>,
    pub(crate) pairs: &'a [Pair],
    pub(crate) matrix: &'a Matrix,
    pub(crate) outside_writers: &'a [String],
    pub(crate) triage: NodeId,
}

impl<'a> Checks<'a> {
    pub(crate) fn new(
        triaged: &'a BTreeMap<String, triage::Triage>,
        pairs: &'a [Pair],
        matrix: &'a Matrix,
        outside_writers: &'a [String],
        triage: NodeId,
    ) -> Checks<'a> {
        Checks {
            triaged,
            pairs,
            matrix,
            outside_writers,
            triage,
        }
    }
}

/// The findings the base shows too: each head finding checked on the base snapshot with the
/// same evidence ([`run`]), the non-idempotent tests twice in a row there, and the state a base
/// test the patch does not affect leaks there as it does here.
pub(crate) fn pre_existing(engine: &Engine, checks: &Checks, base: Base) -> Result<PreExisting> {
    let (ids, impact) = (base.ids, base.impact);
    let mut pre = run(engine, checks, base)?;
    pre.extend(crate::engine::nio::base_check(
        engine,
        checks.triaged,
        ids,
        checks.triage,
    )?);
    pre.extend(crate::audit::findings::base_leaks(
        checks.triaged,
        ids,
        impact,
    ));
    Ok(pre)
}

/// Starts the base's warm interpreters when the base will be asked what the head shows of its
/// tests, beside the search's runs, which mostly take one core at a time; the guard waits for
/// them when dropped. Not for a test that cannot follow the order on the base: its pairs need
/// no base run (`audit::base_check::settled`).
pub(crate) fn prewarm(engine: &Engine, confirmed: &Confirmed, base: Base) -> Option<Prewarm> {
    let sensitive_on_base =
        |id: &String| (base.impact.base_sensitive.as_ref()).is_none_or(|s| s.contains(id.as_str()));
    (confirmed
        .disagreeing
        .iter()
        .filter(|id| sensitive_on_base(id)))
    .chain(&confirmed.always_red)
    .any(|id| base.ids.contains(id.as_str()))
    .then(|| engine.prewarm(Role::Base))
}

/// Checks each head finding on the base snapshot with the same evidence; returns the
/// `(kind, test)` findings the base has too (pre-existing). The runs start after the triage
/// that named the findings.
fn run(engine: &Engine, checks: &Checks, base: Base) -> Result<PreExisting> {
    let Checks {
        triaged,
        pairs,
        matrix,
        outside_writers,
        triage: triage_node,
    } = *checks;
    let after = &[triage_node];
    let base_ids = base.ids;
    let mut requests: Vec<BaseCheck> = Vec::new();
    // A pair whose victim cannot follow the order on the base is the patch's, without a run.
    let in_base = |id: &str| base_ids.contains(id);
    let checked: Vec<&Pair> = pairs
        .iter()
        .filter(|p| !settled(p, base.impact, in_base))
        .collect();
    // Victims of one culprit set that change nothing others see are checked together (the
    // set, then every victim; every victim without it), as the head proved them.
    let mut batches: BTreeMap<(&'static str, Vec<String>), Victims> = BTreeMap::new();
    for p in checked.iter().copied() {
        if p.search.outcome.explains()
            && base_ids.contains(p.victim.as_str())
            && p.culprits.iter().all(|c| base_ids.contains(c.as_str()))
            && !matrix.writes(&p.victim)
        {
            batches
                .entry((p.kind.as_str(), p.culprits.clone()))
                .or_insert_with(|| (p.kind, Vec::new()))
                .1
                .push(p.victim.clone());
        }
    }
    batches.retain(|_, (_, victims)| victims.len() > 1);
    for ((_, culprits), (kind, victims)) in &batches {
        let tag = blake3::hash(culprits.join("\n").as_bytes()).to_hex()[..12].to_string();
        let alone_what = format!("alone batch {tag}");
        // The label the alone run gets, which the pair batch reads it by.
        let alone = NodeKind::BaseCheck.of(alone_what.clone());
        let mut order = culprits.clone();
        order.extend(victims.iter().cloned());
        let culprit_kind = if *kind == PairKind::Polluter {
            FindingKind::Polluter
        } else {
            FindingKind::OrderDependent
        };
        requests.push(BaseCheck {
            request: base_request(format!("pair batch {tag}"), order),
            findings: culprits.iter().map(|c| (culprit_kind, c.clone())).collect(),
            check: Check::PairBatch {
                victims: victims.clone(),
                kind: *kind,
                alone: alone.clone(),
            },
        });
        requests.push(BaseCheck {
            request: base_request(alone_what, victims.clone()),
            findings: Vec::new(),
            check: Check::Nothing,
        });
    }
    let batched = |p: &Pair| {
        batches
            .get(&(p.kind.as_str(), p.culprits.clone()))
            .is_some_and(|(_, v)| v.contains(&p.victim))
    };
    for p in checked.iter().copied() {
        if batched(p) {
            continue;
        }
        // A pair that did not hold on the head has nothing to show on the base.
        if !p.search.outcome.explains() {
            continue;
        }
        if !base_ids.contains(p.victim.as_str())
            || p.culprits.iter().any(|c| !base_ids.contains(c.as_str()))
        {
            continue;
        }
        let mut order = p.culprits.clone();
        order.push(p.victim.clone());
        let culprit_kind = p.kind.culprit_finding();
        let mut kinds = vec![(FindingKind::OrderDependent, p.victim.clone())];
        kinds.extend(p.culprits.iter().map(|c| (culprit_kind, c.clone())));
        requests.push(BaseCheck {
            request: base_request(format!("pair {}", p.victim), order),
            findings: kinds,
            check: Check::Pair {
                victim: p.victim.clone(),
                kind: p.kind,
                alone: NodeKind::BaseCheck.of(format!("alone {}", p.victim)),
            },
        });
        requests.push(BaseCheck {
            request: base_request(format!("alone {}", p.victim), vec![p.victim.clone()]),
            findings: Vec::new(),
            check: Check::Nothing,
        });
    }
    let outside = outside_writers
        .iter()
        .map(|id| (id, FindingKind::OutsideWrite));
    let kinds = triaged
        .iter()
        .flat_map(|(id, t)| t.finding_kinds().into_iter().map(move |k| (id, k)))
        .chain(outside);
    for (id, kind) in kinds {
        if !base_ids.contains(id.as_str()) {
            continue;
        }
        {
            match kind {
                kind if checked_alone(kind) => {
                    requests.push(BaseCheck {
                        request: base_request(format!("{} {id}", kind.as_str()), vec![id.clone()]),
                        findings: vec![(kind, id.clone())],
                        check: Check::Alone {
                            nodeid: id.clone(),
                            kind,
                        },
                    });
                }
                FindingKind::Flaky => {
                    // Flaky never rejects; it is the patch's only when the base lacks the test.
                }
                FindingKind::OrderDependent if !pairs.iter().any(|p| &p.victim == id) => {
                    // Unexplained order dependence: the failing order, restricted to the base.
                    if let Some(l) = matrix.first(id, false) {
                        let order: Vec<String> = matrix
                            .order(l)
                            .into_iter()
                            .filter(|o| base_ids.contains(o.as_str()))
                            .collect();
                        requests.push(BaseCheck {
                            request: base_request(format!("order {id}"), order),
                            findings: vec![(kind, id.clone())],
                            check: Check::Red { nodeid: id.clone() },
                        });
                    }
                }
                _ => {}
            }
        }
    }
    // A change that breaks the whole suite must not start a base process per test: red tests
    // beyond a handful are checked together.
    let red = |c: &BaseCheck| matches!(&c.check, Check::Alone { kind, .. } if is_red(*kind));
    if requests.iter().filter(|c| red(c)).count() > MANY_RED {
        let mut items = Vec::new();
        requests.retain(|c| match &c.check {
            Check::Alone { nodeid, kind } if red(c) => {
                items.push((nodeid.clone(), *kind));
                false
            }
            _ => true,
        });
        // A test with several findings is listed once (an order file rejects duplicates).
        let mut seen = HashSet::new();
        let order: Vec<String> = items
            .iter()
            .filter(|(n, _)| seen.insert(n.as_str()))
            .map(|(n, _)| n.clone())
            .collect();
        requests.push(BaseCheck {
            request: base_request("red tests".into(), order),
            findings: Vec::new(),
            check: Check::Batch(items),
        });
    }
    let mut pre = PreExisting::new();
    for (id, t) in triaged {
        if t.finding_kinds().contains(&FindingKind::Flaky) && base_ids.contains(id.as_str()) {
            pre.insert((FindingKind::Flaky, id.clone()));
        }
    }
    if requests.is_empty() {
        return Ok(pre);
    }
    // Introduced means reproduced: a check the base does not show is repeated, up to its
    // number of runs, stopping at the first that shows it. (A batch of red tests runs once:
    // each of them was red in every order of the head.)
    let alone_of = |label: &str| requests.iter().position(|c| c.request.label == label);
    let mut pending: Vec<usize> = (0..requests.len())
        .filter(|&i| !matches!(requests[i].check, Check::Nothing))
        .collect();
    for k in 0..RED_BASE_RUNS {
        pending.retain(|&i| k < requests[i].check.runs());
        if pending.is_empty() {
            break;
        }
        // This round's runs: the pending checks and the alone runs their pair checks read.
        let mut round: Vec<usize> = pending.clone();
        for &i in &pending {
            if let Check::Pair { alone, .. } | Check::PairBatch { alone, .. } = &requests[i].check {
                round.extend(alone_of(alone));
            }
        }
        round.sort_unstable();
        round.dedup();
        let batch: Vec<RunRequest> = round
            .iter()
            .map(|&i| {
                let mut r = requests[i].request.clone().after(after).repeat(k);
                r.label = repeat(r.label, k);
                r
            })
            .collect();
        let results = engine.run_batch(&batch)?;
        let result = |i: usize| {
            round
                .iter()
                .position(|&j| j == i)
                .and_then(|p| results[p].as_ref().ok())
        };
        let mut held = Vec::new();
        for &i in &pending {
            let Some(r) = result(i) else { continue };
            let c = &requests[i];
            let holds = match &c.check {
                Check::Nothing => false,
                Check::Pair {
                    victim,
                    kind,
                    alone,
                } => {
                    let after = r.outcome_of(victim).map(Outcome::is_green);
                    let alone = alone_of(alone)
                        .and_then(result)
                        .and_then(|a| a.outcome_of(victim))
                        .map(Outcome::is_green);
                    pair_shows(*kind, after, alone)
                }
                Check::PairBatch {
                    victims,
                    kind,
                    alone,
                } => {
                    let alone = alone_of(alone).and_then(result);
                    let mut all = true;
                    for v in victims {
                        let after = r.outcome_of(v).map(Outcome::is_green);
                        let by_itself = alone.and_then(|a| a.outcome_of(v)).map(Outcome::is_green);
                        let holds = pair_shows(*kind, after, by_itself);
                        if holds {
                            pre.insert((FindingKind::OrderDependent, v.clone()));
                        }
                        all &= holds;
                    }
                    all
                }
                Check::Red { nodeid } => red_in_order(r, nodeid),
                Check::Alone { nodeid, kind } => shows(r, nodeid, *kind),
                Check::Batch(items) => {
                    for (nodeid, kind) in items {
                        if shows(r, nodeid, *kind) {
                            pre.insert((*kind, nodeid.clone()));
                        }
                    }
                    true
                }
            };
            if holds {
                pre.extend(c.findings.iter().cloned());
                held.push(i);
            }
        }
        pending.retain(|i| !held.contains(i));
    }
    Ok(pre)
}

/// How many base runs a test red alone gets before its failure counts as introduced. The head
/// showed it red in every order and alone, so a test that fails at random with probability `p`
/// whatever the patch did reaches the base check with probability `p^n` (`n` head runs); its
/// failure is then called introduced with probability `p^n (1-p)^RED_BASE_RUNS`: at most
/// 2.4 × 10⁻⁴ with three seeds (five orders and alone, `n` = 6) and 1.6 × 10⁻⁵ with the
/// default eight (`n` = 11); see docs/verdicts.md. A test the patch really broke passes on the
/// base every time; its runs are the base's, shared by every head through the cache.
const RED_BASE_RUNS: u32 = 2 * PROOF_RERUNS as u32;

/// The victims of one culprit set, with the set's kind.
type Victims = (PairKind, Vec<String>);

/// One run on the base, the findings it can show to be pre-existing, and how to read it.
struct BaseCheck {
    request: RunRequest,
    findings: Vec<(FindingKind, String)>,
    check: Check,
}

impl Check {
    /// Runs on the base before what it checks counts as introduced.
    fn runs(&self) -> u32 {
        match self {
            Check::Nothing | Check::Batch(_) => 1,
            Check::Alone { kind, .. } if is_red(*kind) => RED_BASE_RUNS,
            Check::Pair { .. }
            | Check::PairBatch { .. }
            | Check::Red { .. }
            | Check::Alone { .. } => PROOF_RERUNS as u32,
        }
    }
}

enum Check {
    Nothing,
    /// Many red tests at once, checked in one run on the base (see `matrix::MANY_RED`).
    Batch(Vec<(String, FindingKind)>),
    /// Several victims of one set: the set then every victim, and (`alone`, a label of the
    /// same batch) every victim without it. Each victim that shows it is pre-existing; the
    /// culprits' findings when every one does.
    PairBatch {
        victims: Vec<String>,
        kind: PairKind,
        alone: String,
    },
    /// `alone` is the label of the victim-alone run of the same batch.
    Pair {
        victim: String,
        kind: PairKind,
        alone: String,
    },
    Red {
        nodeid: String,
    },
    Alone {
        nodeid: String,
        kind: FindingKind,
    },
}

/// A run on the base, labelled `base-check(what)`.
fn base_request(what: String, order: Vec<String>) -> RunRequest {
    RunRequest::new(
        NodeKind::BaseCheck.of(what),
        NodeKind::BaseCheck,
        Role::Base,
        order,
    )
}
