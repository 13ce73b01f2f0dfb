//! The verdict step: computed from the budget step's breaches and what the verdict weighs (the
//! rule is `audit::verdict`).

use fixgate_cache::KeyWriter;
use fixgate_graph::{NodeError, NodeId};

use crate::audit::finding::Finding;
use crate::audit::gates::Expired;
use crate::audit::lock::Drifted;
use crate::audit::source_replay::Undecided;
use crate::audit::verdict::{self, Decision, UndecidedReplay, Weighed};
use crate::engine::budget::BudgetOf;
use crate::engine::kind::NodeKind;
use crate::engine::step::{Computed, Engine, Key, Step};
use crate::error::Result;

/// The verdict over `weighed` and the breaches of the budget step `budget` (none: no budget
/// was judged, as when a gate stopped the audit), after `after`.
pub(crate) fn decide(
    engine: &Engine,
    weighed: Weighed,
    budget: Option<NodeId>,
    after: &[NodeId],
) -> Result<Decision> {
    let inputs: Vec<NodeId> = budget.into_iter().collect();
    let (_, decision) = engine.run_step(VerdictOf { weighed }, &inputs, after)?;
    Ok(decision)
}

/// The verdict over `weighed` and the breaches of its input, the budget step (none: no budget
/// was judged, as when a gate stopped the audit).
pub(crate) struct VerdictOf {
    pub(crate) weighed: Weighed,
}

impl Step for VerdictOf {
    type Output = Decision;

    fn kind(&self) -> NodeKind {
        NodeKind::Verdict
    }

    fn key(&self, key: &mut Key) {
        let VerdictOf { weighed } = self;
        let Weighed {
            findings,
            drift,
            expired,
            undecided,
            strict,
            strict_source,
        } = weighed;
        let mut w = KeyWriter::new("verdict");
        w.list(findings, |w, f| {
            let Finding {
                kind,
                subject,
                introduced,
                edited_by_patch,
            } = f;
            // By ordinal: `deleted-test` names two kinds, one that rejects and one that does not.
            w.u64(u64::from(kind.ordinal()))
                .str(subject)
                .u64(u64::from(*introduced))
                .u64(u64::from(*edited_by_patch));
        });
        w.list(drift, |w, d| {
            let Drifted { lock, path, change } = d;
            w.str(lock).str(path).str(change.as_str());
        });
        w.list(expired, |w, e| {
            let Expired {
                nodeid,
                owner,
                expires,
            } = e;
            w.str(nodeid).str(owner).str(expires);
        });
        w.list(undecided, |w, u| {
            let UndecidedReplay { nodeid, why } = u;
            w.str(nodeid);
            match why {
                Undecided::NotRun => w.str("not-run"),
                Undecided::Unconfirmed => w.str("unconfirmed"),
                Undecided::NameGone { name } => w.str("name-gone").str(name),
            };
        });
        w.u64(u64::from(*strict)).u64(u64::from(*strict_source));
        key.param("weighed", w.finish().to_string());
    }

    fn compute(&self, inputs: &[&[u8]]) -> Result<Computed<Decision>, NodeError> {
        let breaches = match inputs.first() {
            Some(bytes) => BudgetOf::decode(bytes)?,
            None => Vec::new(),
        };
        Ok(Computed::new(verdict::decide(&self.weighed, &breaches)))
    }
}
