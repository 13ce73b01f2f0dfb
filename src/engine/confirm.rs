//! Confirmation: the matrix's disagreeing orders rerun (fresh processes, separate cache
//! entries) to tell order-dependent from flaky, tests red everywhere run alone, and every
//! test's evidence gathered from the matrix and these runs.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use fixgate_graph::NodeId;

use crate::audit::order::OrderLabel;
use crate::audit::triage::{Confirm, Evidence, PROOF_RERUNS};
use crate::engine::judging::Judging;
use crate::engine::kind::{repeat, NodeKind};
use crate::engine::matrix::Matrix;
use crate::engine::runs::RunRequest;
use crate::engine::step::Engine;
use crate::engine::step::Role;
use crate::error::Result;
use crate::pytest::result::Outcome;

/// Reruns of matrix orders (fresh processes, separate cache entries) and runs of single tests.
pub(crate) struct Confirmation {
    /// Each rerun order's runs, in the order they were made: the outcomes of the disagreeing
    /// tests they ran (nothing else is asked of them).
    pub(crate) reruns: BTreeMap<OrderLabel, Vec<BTreeMap<String, Outcome>>>,
    pub(crate) alone: BTreeMap<String, Outcome>,
    /// The nodes of every confirmation run.
    pub(crate) nodes: Vec<NodeId>,
    /// The nodes of each order's reruns.
    pub(crate) rerun_nodes: BTreeMap<OrderLabel, Vec<NodeId>>,
    /// The node that ran each test alone (in a batch of red tests, or by itself).
    pub(crate) alone_nodes: BTreeMap<String, NodeId>,
}

impl Confirmation {
    /// A test's outcomes in the reruns of `label` that ran it.
    pub(crate) fn outcomes(&self, label: OrderLabel, nodeid: &str) -> Vec<Outcome> {
        self.reruns
            .get(&label)
            .into_iter()
            .flatten()
            .filter_map(|r| r.get(nodeid).copied())
            .collect()
    }
}

/// What confirmation found: its runs, the tests it was about, and every test's evidence from the
/// matrix and them.
pub(crate) struct Confirmed {
    pub(crate) confirmation: Confirmation,
    /// The tests green in some order and red in another, and those red in every order.
    pub(crate) disagreeing: Vec<String>,
    pub(crate) always_red: Vec<String>,
    pub(crate) evidence: BTreeMap<String, Evidence>,
}

/// Reruns the disagreeing orders and runs the tests red everywhere alone ([`confirm`]), then
/// gathers every test's evidence.
pub(crate) fn phase(engine: &Engine, matrix: &Matrix, j: &Judging) -> Result<Confirmed> {
    let disagreeing = matrix.disagreeing(&j.nodeids);
    let always_red = matrix.always_red(&j.nodeids);
    let confirmation = confirm(engine, matrix, &disagreeing, &always_red)?;
    let evidence = evidence(matrix, &confirmation, &j.nodeids, &disagreeing, &j.edited);
    Ok(Confirmed {
        confirmation,
        disagreeing,
        always_red,
        evidence,
    })
}

/// Above this many tests red in every order, they first run together in one process and only
/// those that pass there run alone: a change that breaks the whole suite must not start a
/// process per test. A test red in that run too is taken as red alone.
pub(crate) const MANY_RED: usize = 8;

/// The fewest tests worth a run together before their runs alone.
const TOGETHER_FROM: usize = 2;

/// Reruns the failing and the passing order of every disagreeing test, round after round, up to
/// [`PROOF_RERUNS`] times, each only up to the last test still in question (what runs after a
/// test cannot change its outcome); a test leaves the rounds as soon as a rerun disagrees with
/// the order (it is flaky, whatever more reruns would say). Runs red-everywhere tests alone.
///
/// In a scoped audit a rerun runs only the tests of the scope (and those in question) up to that
/// point, as the shuffled orders do ([`Matrix::rerun_order`]). The tests to run alone that the
/// recording names no state writer ([`Matrix::shares`]) first run together, in one process:
/// none of them can change what another sees, so each is green there as it is alone, and a
/// green there is its green alone. One red there (or not run: an earlier test ended the
/// session) runs alone, so that a red alone, which sends a test to the state-setter search, is
/// always its own run. A patch that makes fifty tests of one module read what one setter writes
/// costs one process here, not fifty (issue 21).
pub(crate) fn confirm(
    engine: &Engine,
    matrix: &Matrix,
    disagreeing: &[String],
    always_red: &[String],
) -> Result<Confirmation> {
    let mut out = Confirmation {
        reruns: BTreeMap::new(),
        alone: BTreeMap::new(),
        nodes: Vec::new(),
        rerun_nodes: BTreeMap::new(),
        alone_nodes: BTreeMap::new(),
    };
    let whole_matrix = matrix.node_ids();
    let mut alone: Vec<String> = disagreeing.to_vec();
    if always_red.len() > MANY_RED {
        let req = RunRequest::new(
            NodeKind::RedTogetherRun.label(),
            NodeKind::RedTogetherRun,
            Role::Head,
            always_red.to_vec(),
        )
        .after(&whole_matrix);
        let (node, r) = engine.run_one(&req)?;
        out.nodes.push(node);
        for id in always_red {
            match r.outcome_of(id) {
                Some(o) if !o.is_green() => {
                    out.alone.insert(id.clone(), o);
                    out.alone_nodes.insert(id.clone(), node);
                }
                _ => alone.push(id.clone()),
            }
        }
    } else {
        alone.extend(always_red.iter().cloned());
    }
    // The singles, and the tests that share a process, run beside the first round.
    let (together, alone): (Vec<String>, Vec<String>) =
        alone.into_iter().partition(|id| matrix.shares(id));
    let (together, alone) = match together.len() >= TOGETHER_FROM {
        true => (together, alone),
        false => (Vec::new(), [alone, together].concat()),
    };
    let together_node = match together.is_empty() {
        true => None,
        false => {
            let req = RunRequest::new(
                NodeKind::AloneTogetherRun.label(),
                NodeKind::AloneTogetherRun,
                Role::Head,
                together.clone(),
            )
            .after(&whole_matrix);
            Some(engine.add_run(&req)?)
        }
    };
    let mut singles = Vec::new();
    for id in &alone {
        singles.push((id.clone(), single(engine, id, &whole_matrix)?));
    }
    // Each disagreeing test with its failing and passing order.
    let asked: HashSet<&str> = disagreeing.iter().map(String::as_str).collect();
    let mut live: Vec<(&String, OrderLabel, OrderLabel)> = disagreeing
        .iter()
        .filter_map(|id| Some((id, matrix.first(id, false)?, matrix.first(id, true)?)))
        .collect();
    for k in 0..PROOF_RERUNS as u32 {
        let mut needed: BTreeMap<OrderLabel, usize> = BTreeMap::new();
        for (id, f, p) in &live {
            for label in [*f, *p] {
                if let Some(pos) = matrix.position(label, id) {
                    let end = needed.entry(label).or_insert(0);
                    *end = (*end).max(pos + 1);
                }
            }
        }
        let mut round = Vec::new();
        for (l, end) in &needed {
            // The order the run made (a shuffled order may have run only a scope of the
            // selection), up to the last test in question.
            let order = matrix.rerun_order(*l, *end, &asked);
            let after = match out.rerun_nodes.get(l).and_then(|n| n.last()) {
                Some(previous) => vec![*previous],
                None => vec![matrix.nodes[l]],
            };
            let label = repeat(NodeKind::ConfirmRun.of(l), k);
            let req = RunRequest::new(label, NodeKind::ConfirmRun, Role::Head, order)
                .after(&after)
                .repeat(k);
            round.push((*l, engine.add_run(&req)?));
        }
        for (l, node) in round {
            let r = engine.wait_ok(node)?;
            engine.live.release(node);
            let questioned = disagreeing
                .iter()
                .filter_map(|id| Some((id.clone(), r.outcome_of(id)?)))
                .collect();
            out.reruns.entry(l).or_default().push(questioned);
            out.rerun_nodes.entry(l).or_default().push(node);
            out.nodes.push(node);
        }
        // A passing order that failed once ends nothing while the failing order keeps failing:
        // a flaky test can follow the order too (see `Confirm::fails_every_time_on_one_side`).
        live.retain(|(id, f, _)| out.outcomes(*f, id).iter().all(|o| !o.is_green()));
        if live.is_empty() {
            break;
        }
    }
    if let Some(node) = together_node {
        let r = engine.wait_ok(node)?;
        out.nodes.push(node);
        for id in together {
            match r.outcome_of(&id) {
                Some(o) if o.is_green() => {
                    out.alone.insert(id.clone(), o);
                    out.alone_nodes.insert(id, node);
                }
                _ => {
                    let single = single(engine, &id, &[node])?;
                    singles.push((id, single));
                }
            }
        }
    }
    for (id, node) in singles {
        let r = engine.wait_ok(node)?;
        if let Some(o) = r.outcome_of(&id) {
            out.alone.insert(id.clone(), o);
            out.alone_nodes.insert(id, node);
        }
        out.nodes.push(node);
    }
    Ok(out)
}

/// Adds the run of one test by itself.
fn single(engine: &Engine, id: &str, after: &[NodeId]) -> Result<NodeId> {
    let req = RunRequest::new(
        NodeKind::AloneRun.of(id),
        NodeKind::AloneRun,
        Role::Head,
        vec![id.to_string()],
    )
    .after(after);
    engine.add_run(&req)
}

/// Every test's evidence from the matrix and the confirmation runs (`disagreeing`: the tests
/// whose orders disagreed, which the confirmation reran).
pub(crate) fn evidence(
    matrix: &Matrix,
    confirmation: &Confirmation,
    nodeids: &[String],
    disagreeing: &[String],
    edited: &BTreeSet<String>,
) -> BTreeMap<String, Evidence> {
    let disagreeing: HashSet<&str> = disagreeing.iter().map(String::as_str).collect();
    let mut evidence = BTreeMap::new();
    for id in nodeids {
        let confirm = disagreeing.contains(id.as_str()).then(|| {
            let reruns =
                |l: Option<OrderLabel>| l.map(|l| confirmation.outcomes(l, id)).unwrap_or_default();
            Confirm {
                failing: reruns(matrix.first(id, false)),
                passing: reruns(matrix.first(id, true)),
            }
        });
        evidence.insert(
            id.clone(),
            Evidence {
                outcomes: matrix.outcomes(id),
                confirm,
                alone: confirmation.alone.get(id).copied(),
                dirty_groups: matrix.violations(id).into_iter().collect(),
                polluter_in_pair: false,
                state_setter_in_pair: false,
                edited_by_patch: edited.contains(id),
                reruns: matrix.reruns(id),
                unexplained: false,
                nio: None,
                flaky_too: false,
                leaks: matrix.state(id).into_iter().collect(),
            },
        );
    }
    evidence
}
