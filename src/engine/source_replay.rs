//! Test-source replay: every test the patch edited (not added) that passes at head runs again
//! with the base's version of its test file, and of the conftest files above it, on the head's
//! code. The answer key written in the test itself is caught like the one in fixtures.

use std::collections::{BTreeMap, BTreeSet};

use fixgate_graph::NodeId;

use crate::audit::source_replay::Reading;
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::{Error, Result};
use crate::pytest::driver::RunResult;
use crate::repo_path::RepoPath;
use crate::report;
use crate::snapshot::Snapshot;

/// The edited tests worth replaying: the base has them and they pass at head.
pub fn candidates(
    edited: &BTreeSet<String>,
    base_ids: &std::collections::HashSet<&str>,
    head_run: &RunResult,
) -> Vec<String> {
    edited
        .iter()
        .filter(|id| base_ids.contains(id.as_str()))
        .filter(|id| head_run.outcome_of(id).is_some_and(|o| o.is_green()))
        .cloned()
        .collect()
}

/// Adds the replay run: the head's tree with the base's bytes of each candidate's test file and
/// of every `conftest.py` on its way up that differs, running the head's file order (less the
/// tests the base's files do not have), so each candidate runs after what ran before it when
/// it passed at head: the same evidence but for the test code.
pub fn start(
    engine: &Engine,
    base: &Snapshot,
    head: &Snapshot,
    tests: &[String],
    file_order: &[String],
    base_ids: &std::collections::HashSet<&str>,
    after: &[NodeId],
) -> Result<NodeId> {
    let mut files: BTreeSet<String> = BTreeSet::new();
    for id in tests {
        let (file, _) = crate::testsrc::split_nodeid(id);
        files.insert(file.to_string());
        let mut dir = file;
        while let Some((parent, _)) = dir.rsplit_once('/') {
            files.insert(format!("{parent}/conftest.py"));
            dir = parent;
        }
        files.insert("conftest.py".to_string());
    }
    let mut overlay = Vec::new();
    let mut replaced: BTreeSet<&str> = BTreeSet::new();
    for f in &files {
        let (b, h) = (base.read_path(f)?, head.read_path(f)?);
        if b != h {
            replaced.insert(f.as_str());
            overlay.push((RepoPath::from(f.as_str()), b));
        }
    }
    // A replaced test file holds the base's tests only.
    let order: Vec<String> = file_order
        .iter()
        .filter(|id| {
            let (file, _) = crate::testsrc::split_nodeid(id);
            !replaced.contains(file) || base_ids.contains(id.as_str())
        })
        .cloned()
        .collect();
    let mut req = RunRequest::new(
        "source-replay-run".into(),
        "source-replay-run",
        Role::Head,
        order,
    )
    .after(after);
    req.overlay = overlay;
    engine.add_run(&req)
}

/// Waits for the replay and reads each test, with the lines the patch changed in it.
pub fn read(
    engine: &Engine,
    node: NodeId,
    tests: &[String],
    head_run: &RunResult,
    base: &Snapshot,
    head: &Snapshot,
) -> Result<Vec<report::SourceReplay>> {
    let result = engine
        .wait_run(node)?
        .map_err(|e| Error::Infra(format!("the test-source replay failed: {e}")))?;
    let mut texts: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut out = Vec::new();
    for id in tests {
        let (file, func) = crate::testsrc::split_nodeid(id);
        if !texts.contains_key(file) {
            let text = |s: &Snapshot| {
                s.read_path(file)
                    .ok()
                    .flatten()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            };
            texts.insert(file.to_string(), (text(base), text(head)));
        }
        let (b, h) = &texts[file];
        let source = |t: &str| crate::testsrc::function_source(t, func).unwrap_or_default();
        let (mut base_lines, mut head_lines) =
            crate::testsrc::changed_lines(&source(b), &source(h));
        if base_lines.is_empty() && head_lines.is_empty() {
            // The test's own lines are the same: the edit is around it.
            (base_lines, head_lines) = crate::testsrc::changed_lines(
                &crate::testsrc::outside_tests(b),
                &crate::testsrc::outside_tests(h),
            );
        }
        let head_outcome = head_run
            .outcome_of(id)
            .unwrap_or(crate::pytest::events::Outcome::Error);
        let on_base = result.outcome_of(id);
        out.push(report::SourceReplay {
            nodeid: id.clone(),
            head: head_outcome.as_str().into(),
            base_test_code: on_base.map(|o| o.as_str().to_string()),
            reading: Reading::of(head_outcome, on_base).as_str().into(),
            base_lines,
            head_lines,
        });
    }
    Ok(out)
}
