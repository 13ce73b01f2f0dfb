//! The edit replay (`crate::audit::edit_replay`): the base's version of an edited test whose
//! order-dependence the base shows too, run on the head's code with the base's bytes of its test
//! file, in the orders where the head's version failed (up to the test itself).

use std::collections::BTreeMap;

use fixgate_graph::NodeId;

use crate::audit::edit_replay::{self, EditReplay, InOrder, Reading};
use crate::audit::finding::FindingKind;
use crate::audit::findings::PreExisting;
use crate::audit::triage::Triage;
use crate::engine::judging::Judging;
use crate::engine::kind::NodeKind;
use crate::engine::matrix::Matrix;
use crate::engine::runs::RunRequest;
use crate::engine::step::{Engine, Role};
use crate::error::Result;
use crate::repo_path::RepoPath;
use crate::testsrc;

/// Replays every edited test whose order-dependence is known debt, after `after`.
pub(crate) fn run(
    engine: &Engine,
    matrix: &Matrix,
    triaged: &BTreeMap<String, Triage>,
    pre_existing: &PreExisting,
    j: &Judging,
    after: &[NodeId],
) -> Result<Vec<EditReplay>> {
    let order_dependent = triaged
        .iter()
        .filter(|(_, t)| t.finding_kinds().contains(&FindingKind::OrderDependent))
        .map(|(id, _)| id);
    let tests = edit_replay::candidates(order_dependent, pre_existing, &j.edited, &j.base_ids);
    let base = &engine.base.snapshot;
    let mut planned: Vec<(String, Vec<InOrder>, Vec<RunRequest>)> = Vec::new();
    for id in tests {
        let file = testsrc::split_nodeid(&id).0.to_string();
        let path = RepoPath::parse_lossless(&file);
        let Ok(Some(bytes)) = base.read_path(&file) else {
            continue;
        };
        // The tests of its file the base's bytes make; every other file is the head's.
        let base_ids = &j.base_ids;
        let keeps =
            |t: &String| testsrc::split_nodeid(t).0 != file || base_ids.contains(t.as_str());
        let failing = matrix
            .outcomes(&id)
            .into_iter()
            .filter(|(_, o)| !o.is_green())
            .take(edit_replay::ORDERS);
        let (mut runs, mut requests) = (Vec::new(), Vec::new());
        for (label, head) in failing {
            let order = matrix.order(label);
            let Some(end) = order.iter().position(|t| t == &id) else {
                continue;
            };
            let prefix: Vec<String> = order[..=end].iter().filter(|t| keeps(t)).cloned().collect();
            let name = NodeKind::EditReplayRun.tagged(&id, label);
            let mut req = RunRequest::new(name, NodeKind::EditReplayRun, Role::Head, prefix);
            req.overlay = vec![(path.clone(), Some(bytes.clone()))];
            requests.push(req.after(after));
            runs.push(InOrder {
                order: label,
                head,
                base_version: None,
            });
        }
        planned.push((id, runs, requests));
    }
    let all: Vec<RunRequest> = planned.iter().flat_map(|p| p.2.iter().cloned()).collect();
    let mut results = engine.run_batch(&all)?.into_iter();
    let mut out = Vec::new();
    for (id, mut runs, _) in planned {
        for r in &mut runs {
            r.base_version = results
                .next()
                .and_then(|res| res.ok())
                .and_then(|res| res.outcome_of(&id));
        }
        let reading = Reading::of(&runs);
        out.push(EditReplay {
            nodeid: id,
            runs,
            reading,
        });
    }
    Ok(out)
}
