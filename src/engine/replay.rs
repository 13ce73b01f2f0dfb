//! Replay: the tests coupled to the fixture delta run on head code with the base's fixture
//! bytes, started as soon as the file-order run and the delta are known.

use std::collections::HashSet;

use fixgate_graph::NodeId;

use crate::audit::replay::{FixtureReplay, Reading, ReplayRead};
use crate::delta::{Change, Delta};
use crate::engine::coupling::Coupled;
use crate::engine::judging::Judging;
use crate::engine::kind::NodeKind;
use crate::engine::runs::RunRequest;
use crate::engine::step::Engine;
use crate::engine::step::Role;
use crate::error::{Error, Result};
use crate::pytest::driver::Record;
use crate::pytest::result::{Outcome, RunResult};
use crate::snapshot::Snapshot;

/// Adds the replay run of `coupled`, after the runs and the delta it was derived from.
fn start(
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
    .after(after)
    // A new test's id may not exist on the base's bytes: a case the patch added to a data
    // file its test parametrizes over.
    .record(Record::UNCOLLECTED);
    req.overlay = overlay;
    engine.add_run(&req)
}

/// The changed files (of `delta`) a test of `run` read.
fn changed_reads<'r>(run: &'r RunResult, id: &str, changed: &HashSet<String>) -> Vec<&'r String> {
    run.test(id)
        .map(|t| {
            t.trace
                .read
                .iter()
                .chain(&t.trace.sqlite)
                .filter(|p| changed.contains(*p))
                .collect()
        })
        .unwrap_or_default()
}

/// Each coupled test, whether it is new (the base has no such test), whether every changed
/// file it read is one the patch added, and those files.
fn kinds<'c, 'r>(
    delta: &Delta,
    coupled: &'c [String],
    head_run: &'r RunResult,
    base_ids: &HashSet<&str>,
) -> Vec<(&'c String, bool, bool, Vec<&'r String>)> {
    let added: HashSet<String> = delta
        .changed
        .iter()
        .filter(|c| c.change == Change::Added)
        .map(|c| c.path.to_string())
        .collect();
    let changed: HashSet<String> = delta.changed.iter().map(|c| c.path.to_string()).collect();
    coupled
        .iter()
        .map(|id| {
            let reads = changed_reads(head_run, id, &changed);
            let only_added = !reads.is_empty() && reads.iter().all(|p| added.contains(*p));
            (id, !base_ids.contains(id.as_str()), only_added, reads)
        })
        .collect()
}

/// The coupled tests the replay runs: not a new test whose every changed read the patch added.
/// Its reading is additive whatever the base's bytes give, and its node id may not exist on
/// them (a case made of a file the patch added to a folder the test lists).
fn to_replay(
    delta: &Delta,
    coupled: &[String],
    head_run: &RunResult,
    base_ids: &HashSet<&str>,
) -> Vec<String> {
    kinds(delta, coupled, head_run, base_ids)
        .into_iter()
        .filter(|(_, new, only_added, _)| !(*new && *only_added))
        .map(|(id, ..)| id.clone())
        .collect()
}

/// Waits for the replay (`node`: none when no coupled test needed one) and reads each coupled
/// test per the decision table.
fn read(
    engine: &Engine,
    node: Option<NodeId>,
    delta: &Delta,
    coupled: &[String],
    head_run: &RunResult,
    base_ids: &HashSet<&str>,
) -> Result<Vec<ReplayRead>> {
    let result = match node {
        Some(node) => Some(
            engine
                .wait_run(node)?
                .map_err(|e| Error::Infra(format!("the replay failed: {e}")))?,
        ),
        None => None,
    };
    let mut out = Vec::new();
    for (id, new, only_added, reads) in kinds(delta, coupled, head_run, base_ids) {
        let head = head_run.outcome_of(id).unwrap_or(Outcome::Error);
        let replayed = !(new && only_added);
        // Not run on the base's bytes: not replayed, or not collected there.
        let on_base = match &result {
            _ if !replayed => None,
            Some(r) if r.uncollected.contains(id) => None,
            Some(r) => Some(r.outcome_of(id).unwrap_or(Outcome::Error)),
            None => Some(Outcome::Error),
        };
        let reading = Reading::of(new, only_added, head, on_base);
        out.push(ReplayRead {
            nodeid: id.clone(),
            head,
            base: on_base,
            reading,
            files: reads.into_iter().cloned().collect(),
        });
    }
    Ok(out)
}

/// Starts the replay of the coupled tests that need one (none: nothing to replay), after the
/// file-order run `head_run` (its node `file_node`) and the delta they were derived from.
pub(crate) fn begin(
    engine: &Engine,
    j: &Judging,
    coupled: &Coupled,
    head_run: &RunResult,
    file_node: NodeId,
) -> Result<Option<NodeId>> {
    let to_replay = to_replay(&coupled.delta, &coupled.coupled, head_run, &j.base_ids);
    let after = [file_node, j.gated.nodes.delta];
    match to_replay.is_empty() {
        true => Ok(None),
        false => start(
            engine,
            &engine.base.snapshot,
            &coupled.delta,
            &to_replay,
            &after,
        )
        .map(Some),
    }
}

/// Waits for the replay and reads each coupled test: what the fixture replay found.
pub(crate) fn finish(
    engine: &Engine,
    node: Option<NodeId>,
    coupled: &Coupled,
    head_run: &RunResult,
    base_ids: &HashSet<&str>,
) -> Result<FixtureReplay> {
    let replay = match coupled.coupled.is_empty() {
        true => Vec::new(),
        false => read(
            engine,
            node,
            &coupled.delta,
            &coupled.coupled,
            head_run,
            base_ids,
        )?,
    };
    Ok(FixtureReplay {
        coupled: coupled.coupled.clone(),
        replay,
        traced: (coupled.delta.changed.iter())
            .filter(|c| c.group.is_empty())
            .cloned()
            .collect(),
    })
}
