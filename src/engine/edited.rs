//! What the patch did besides the fixtures, read from the two snapshots as steps computed from
//! their trees: the tests whose source it edited (the rule is `audit::edited`), whether it
//! changed any `conftest.py`, and (`engine::source_tamper`) the source-side moves it may make;
//! with the new skips its collections show.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fixgate_graph::NodeError;

use crate::audit::budget;
use crate::audit::edited::Patch;
use crate::audit::triage::Evidence;
use crate::engine::gates::GateNodes;
use crate::engine::judging::Judging;
use crate::engine::kind::NodeKind;
use crate::engine::source_tamper::SourceTamper;
use crate::engine::step::Engine;
use crate::engine::step::Role;
use crate::engine::step::{lines_digest, Computed, Key, Step};
use crate::error::Result;
use crate::pytest::result::RunResult;
use crate::snapshot::Snapshot;

/// The tests of `tests` (node ids of the `of` side's selection) the patch edited. Its inputs
/// are the base's and the head's trees.
pub(crate) struct EditedTests {
    pub(crate) of: Role,
    pub(crate) tests: Vec<String>,
    pub(crate) base: Arc<Snapshot>,
    pub(crate) head: Arc<Snapshot>,
}

impl Step for EditedTests {
    type Output = BTreeSet<String>;

    fn kind(&self) -> NodeKind {
        NodeKind::EditedTests
    }

    fn label(&self) -> String {
        NodeKind::EditedTests.of(self.of.as_str())
    }

    fn key(&self, key: &mut Key) {
        // The snapshots' content is their trees' digests, the step's inputs; which side's
        // selection it is names the node.
        let EditedTests {
            of: _,
            tests,
            base: _,
            head: _,
        } = self;
        key.param("tests", lines_digest(tests));
    }

    fn compute(&self, _: &[&[u8]]) -> Result<Computed<BTreeSet<String>>, NodeError> {
        Ok(Computed::new(crate::audit::edited::edited_tests(
            &self.base,
            &self.head,
            &self.tests,
        )))
    }
}

/// The tests of `tests` (node ids of `of`'s selection) the patch edited: the `edited-tests`
/// step, computed from the two sides' trees.
pub(crate) fn edited_tests(
    engine: &Engine,
    nodes: GateNodes,
    of: Role,
    tests: Vec<String>,
) -> Result<BTreeSet<String>> {
    let step = EditedTests {
        of,
        tests,
        base: engine.base.snapshot.clone(),
        head: engine.head.snapshot.clone(),
    };
    let inputs = [nodes.base_tree, nodes.head_tree];
    engine
        .run_step(step, &inputs, &[])
        .map(|(_, edited)| edited)
}

/// Whether any `conftest.py` differs between the two snapshots (added, removed or changed): what
/// was written outside the sandbox outside any test is the patch's then. Its inputs are the
/// base's and the head's trees.
pub(crate) struct ConftestsDiffer {
    pub(crate) base: Arc<Snapshot>,
    pub(crate) head: Arc<Snapshot>,
}

impl Step for ConftestsDiffer {
    type Output = bool;

    fn kind(&self) -> NodeKind {
        NodeKind::ConftestsDiffer
    }

    fn key(&self, _: &mut Key) {
        // Everything it reads is its input trees.
        let ConftestsDiffer { base: _, head: _ } = self;
    }

    fn compute(&self, _: &[&[u8]]) -> Result<Computed<bool>, NodeError> {
        let conftests = |s: &Snapshot| -> Vec<(String, Option<Vec<u8>>)> {
            let git = s.open_git().ok().flatten();
            s.entries
                .iter()
                .filter(|e| e.path.file_name() == b"conftest.py")
                .map(|e| (e.path.to_string(), s.read(e, git.as_ref()).ok()))
                .collect()
        };
        Ok(Computed::new(
            conftests(&self.base) != conftests(&self.head),
        ))
    }
}

/// What the patch did besides the fixtures, once the tests ran: `evidence` and the head's
/// file-order run `head_run` say which edited tests skip themselves.
pub(crate) fn patch(
    engine: &Engine,
    j: &Judging,
    evidence: &BTreeMap<String, Evidence>,
    head_run: &RunResult,
) -> Result<Patch> {
    let new_skips = budget::patch_skips(
        &j.base.collection,
        &j.head.collection,
        evidence,
        &j.edited,
        &j.base_ids,
        |id| head_run.test(id).and_then(|t| t.skip_reason.clone()),
    );
    let trees = [j.gated.nodes.base_tree, j.gated.nodes.head_tree];
    let (base, head) = (&engine.base.snapshot, &engine.head.snapshot);
    let tamper = SourceTamper {
        base: base.clone(),
        head: head.clone(),
    };
    let tamper = engine.add(tamper, &[trees[0], trees[1], j.base.node, j.head.node], &[])?;
    let conftests = ConftestsDiffer {
        base: base.clone(),
        head: head.clone(),
    };
    let conftests = engine.add(conftests, &trees, &[])?;
    Ok(Patch {
        edited: j.edited.clone(),
        base_ids: j.base_ids.iter().map(|s| s.to_string()).collect(),
        new_skips,
        source_tamper: engine.output(tamper)?,
        conftests_changed: engine.output(conftests)?,
    })
}
