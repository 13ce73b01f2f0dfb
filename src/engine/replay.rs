//! Replay: the tests coupled to the fixture delta run on head code with the base's fixture
//! bytes, started as soon as the file-order run and the delta are known.

use std::collections::HashSet;

use fixgate_graph::NodeId;

use crate::audit::edited::traced_reads;
use crate::audit::replay::{Reading, ReplayRead};
use crate::delta::{Change, ChangedFile, Delta};
use crate::engine::kind::NodeKind;
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::{Error, Result};
use crate::pytest::result::{Outcome, RunResult};
use crate::repo_path::RepoPath;
use crate::snapshot::Snapshot;

/// Adds the replay run of `coupled`, after the runs and the delta it was derived from.
pub(crate) fn start(
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
pub(crate) fn read(
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
            files: reads.iter().map(|p| p.to_string()).collect(),
        });
    }
    Ok(out)
}

/// The fixture delta with what coupling follows beyond the declared groups: each file a test
/// of the file-order run read that the patch changed (see [`traced_reads`]), as a change of no
/// group (`group` empty). Only files tests read are compared, each by its digest on both sides.
pub(crate) fn with_traced(engine: &Engine, delta: &Delta, file_run: &RunResult) -> Delta {
    let mut out = delta.clone();
    for path in traced_reads(file_run, delta) {
        let (b, h) = (engine.base.digest(&path), engine.head.digest(&path));
        let change = match (b, h) {
            (Some(b), Some(h)) if b == h => continue,
            (None, None) => continue,
            (Some(_), Some(_)) => Change::Modified,
            (None, Some(_)) => Change::Added,
            (Some(_), None) => Change::Removed,
        };
        out.changed.push(ChangedFile {
            path: RepoPath::parse_lossless(&path),
            group: String::new(),
            change,
            base_blake3: b.map(|d| d.to_string()),
            head_blake3: h.map(|d| d.to_string()),
            renamed_from: None,
        });
    }
    out.changed.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
