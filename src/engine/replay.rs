//! Replay: the tests coupled to the fixture delta run on head code with the base's fixture
//! bytes, started as soon as the file-order run and the delta are known.

use std::collections::HashSet;

use fixgate_graph::NodeId;

use crate::audit::replay::{Reading, ReplayRead};
use crate::delta::{Change, Delta};
use crate::engine::kind::NodeKind;
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::{Error, Result};
use crate::pytest::result::{Outcome, RunResult};
use crate::snapshot::Snapshot;

/// Adds the replay run of `coupled`, after the runs and the delta it was derived from.
pub fn start(
    engine: &Engine,
    base: &Snapshot,
    delta: &Delta,
    coupled: &[String],
    after: &[NodeId],
) -> Result<NodeId> {
    let git = base.open_git()?;
    let mut overlay = Vec::new();
    for c in &delta.changed {
        let bytes = match c.change {
            Change::Added => None,
            Change::Removed | Change::Modified => {
                let entry = base
                    .find(&c.path)
                    .ok_or_else(|| Error::bug(format!("{} is not in the base", c.path)))?;
                Some(base.read(entry, git.as_ref())?)
            }
        };
        overlay.push((c.path.clone(), bytes));
    }
    let mut req = RunRequest::new(
        NodeKind::ReplayRun.label(),
        NodeKind::ReplayRun,
        Role::Head,
        coupled.to_vec(),
    )
    .after(after);
    req.overlay = overlay;
    engine.add_run(&req)
}

/// Waits for the replay and reads each coupled test per the decision table.
pub fn read(
    engine: &Engine,
    node: NodeId,
    delta: &Delta,
    coupled: &[String],
    head_run: &RunResult,
    base_ids: &HashSet<&str>,
) -> Result<Vec<ReplayRead>> {
    let result = engine
        .wait_run(node)?
        .map_err(|e| Error::Infra(format!("the replay failed: {e}")))?;
    let added: HashSet<String> = delta
        .changed
        .iter()
        .filter(|c| c.change == Change::Added)
        .map(|c| c.path.to_string())
        .collect();
    let changed: HashSet<String> = delta.changed.iter().map(|c| c.path.to_string()).collect();
    let mut out = Vec::new();
    for id in coupled {
        let head = head_run.outcome_of(id).unwrap_or(Outcome::Error);
        let on_base = result.outcome_of(id).unwrap_or(Outcome::Error);
        let reads: Vec<&String> = head_run
            .test(id)
            .map(|t| {
                t.trace
                    .read
                    .iter()
                    .chain(&t.trace.sqlite)
                    .filter(|p| changed.contains(*p))
                    .collect()
            })
            .unwrap_or_default();
        let reading = Reading::of(
            !base_ids.contains(id.as_str()),
            !reads.is_empty() && reads.iter().all(|p| added.contains(*p)),
            head,
            on_base,
        );
        out.push(ReplayRead {
            nodeid: id.clone(),
            head,
            base: on_base,
            reading,
        });
    }
    Ok(out)
}
