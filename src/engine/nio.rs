//! The nio order (`--nio`): every test twice in a row in one process, read apart from the
//! matrix (see `audit::nio`); each test that broke itself there run twice by itself until it is
//! proven or not, and each proven one checked on the base.

use std::collections::{BTreeMap, HashSet};

use fixgate_graph::NodeId;

use crate::audit::finding::FindingKind;
use crate::audit::findings::PreExisting;
use crate::audit::nio::{self, Idempotence, Twice};
use crate::audit::order::OrderLabel;
use crate::audit::triage::{Evidence, Signal, Triage, PROOF_RERUNS};
use crate::engine::kind::{repeat, NodeKind};
use crate::engine::matrix;
use crate::engine::runs::RunRequest;
use crate::engine::step::Engine;
use crate::engine::step::Role;
use crate::error::Result;
use crate::pytest::events::CollectedItem;
use crate::pytest::result::Outcome;
use crate::pytest::result::RunResult;

/// Adds the nio order's run beside the matrix, when it is `asked` (`--nio`, or the base's
/// `[tool.fixgate] nio`).
pub(crate) fn begin(
    engine: &Engine,
    asked: bool,
    selection: &[CollectedItem],
    collection: NodeId,
) -> Result<Option<matrix::Started>> {
    match asked {
        true => matrix::start(engine, &[OrderLabel::Twice], selection, collection, false).map(Some),
        false => Ok(None),
    }
}

/// Waits for the nio order's runs (when it ran) and marks what they proved in each test's
/// evidence.
pub(crate) fn read_into(
    engine: &Engine,
    started: Option<&matrix::Started>,
    nodeids: &[String],
    evidence: &mut BTreeMap<String, Evidence>,
) -> Result<Option<NioRead>> {
    let Some(started) = started else {
        return Ok(None);
    };
    let read = read(engine, started, nodeids)?;
    for (id, reading) in &read.readings {
        if let Some(e) = evidence.get_mut(id) {
            e.nio = Some(*reading);
        }
    }
    Ok(Some(read))
}

/// What the nio order and its confirmation runs showed.
pub(crate) struct NioRead {
    /// Every test's two runs in the nio order, for the report.
    pub(crate) twice: BTreeMap<String, Twice>,
    /// Each test that passed and then failed in the nio order, read.
    pub(crate) readings: BTreeMap<String, Idempotence>,
    /// The nio run's node and its confirmation runs' nodes.
    pub(crate) nodes: Vec<NodeId>,
    /// How many confirmation runs were made.
    pub(crate) reruns: u64,
}

/// Waits for the nio run; each test that passed and then failed there runs twice in a row by
/// itself, up to [`PROOF_RERUNS`](crate::audit::triage::PROOF_RERUNS) times, stopping at the
/// first run that does not show it.
fn read(engine: &Engine, started: &matrix::Started, nodeids: &[String]) -> Result<NioRead> {
    let run = started.wait(engine, OrderLabel::Twice)?;
    let node = started.nodes[&OrderLabel::Twice];
    engine.live.release(node);
    let twice: BTreeMap<String, Twice> = nodeids
        .iter()
        .filter_map(|id| Some((id.clone(), twice_of(&run, id)?)))
        .collect();
    let suspects: Vec<(String, Twice)> = twice
        .iter()
        .filter(|(_, t)| t.breaks_itself())
        .map(|(id, t)| (id.clone(), *t))
        .collect();
    let ids: Vec<String> = suspects.iter().map(|(id, _)| id.clone()).collect();
    let TwiceRuns {
        runs: reruns,
        mut nodes,
    } = run_twice(
        engine,
        Role::Head,
        NodeKind::NioRun,
        &ids,
        nio::head_settled,
        &[node],
    )?;
    let readings = suspects
        .iter()
        .filter_map(|(id, t)| {
            let r = reruns.get(id).map(Vec::as_slice).unwrap_or_default();
            Some((id.clone(), nio::read(*t, r)?))
        })
        .collect();
    let count = nodes.len() as u64;
    nodes.push(node);
    Ok(NioRead {
        twice,
        readings,
        nodes,
        reruns: count,
    })
}

/// The base's runs of each non-idempotent test twice in a row: a finding the base shows on any
/// of up to [`PROOF_RERUNS`](crate::audit::triage::PROOF_RERUNS) runs is pre-existing.
pub(crate) fn base_check(
    engine: &Engine,
    triaged: &BTreeMap<String, Triage>,
    base_ids: &HashSet<&str>,
    triage_node: NodeId,
) -> Result<PreExisting> {
    let ids: Vec<String> = triaged
        .iter()
        .filter(|(id, t)| t.has(&Signal::NonIdempotent) && base_ids.contains(id.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    if ids.is_empty() {
        return Ok(PreExisting::new());
    }
    let runs = run_twice(
        engine,
        Role::Base,
        NodeKind::BaseCheck,
        &ids,
        nio::base_settled,
        &[triage_node],
    )?;
    Ok(runs
        .runs
        .into_iter()
        .filter(|(_, r)| nio::base_shows(r))
        .map(|(id, _)| (FindingKind::NonIdempotent, id))
        .collect())
}

/// A test's two runs in a run that listed it twice in a row; `None` when it did not run.
pub(crate) fn twice_of(run: &RunResult, nodeid: &str) -> Option<Twice> {
    Some(Twice {
        first: run.outcome_of(nodeid)?,
        second: run.again(nodeid).map(|t| t.outcome),
    })
}

/// The runs of tests twice in a row by themselves.
pub(crate) struct TwiceRuns {
    /// Each test's runs, in the order they were made.
    pub(crate) runs: BTreeMap<String, Vec<Twice>>,
    /// The node of every run.
    pub(crate) nodes: Vec<NodeId>,
}

/// Runs each of `ids` twice in a row by itself (a process of its own per run), round after
/// round, up to [`PROOF_RERUNS`] times, until `settled` says its runs so far decide it. The
/// `kind` names the nodes (`nio-run` on the head, `base-check` on the base).
pub(crate) fn run_twice(
    engine: &Engine,
    role: Role,
    kind: NodeKind,
    ids: &[String],
    settled: fn(&[Twice]) -> bool,
    after: &[NodeId],
) -> Result<TwiceRuns> {
    let mut runs: BTreeMap<String, Vec<Twice>> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut pending: Vec<&String> = ids.iter().collect();
    for k in 0..PROOF_RERUNS as u32 {
        if pending.is_empty() {
            break;
        }
        let mut round = Vec::new();
        for id in &pending {
            let subject = match role {
                Role::Head => kind.of(id),
                Role::Base => kind.of(format!("non-idempotent {id}")),
            };
            let label = repeat(subject, k);
            let req = RunRequest::new(label, kind, role, vec![(*id).clone(), (*id).clone()])
                .after(after)
                .repeat(k);
            round.push((*id, engine.add_run(&req)?));
        }
        for (id, node) in round {
            let r = engine.wait_ok(node)?;
            nodes.push(node);
            let entry = runs.entry(id.clone()).or_default();
            // A run that could not run the test at all shows nothing, and counts as a run
            // that did not break it.
            entry.push(twice_of(&r, id).unwrap_or(Twice {
                first: Outcome::Error,
                second: None,
            }));
        }
        pending.retain(|id| !settled(&runs[*id]));
    }
    Ok(TwiceRuns { runs, nodes })
}
