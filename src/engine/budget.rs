//! The budget step: the limits the audit went over (the rule is `audit::budget`).

use fixgate_cache::KeyWriter;
use fixgate_graph::{NodeError, NodeId};

use crate::audit::budget::{self, Breach, Limits, NewSkip, Rerun, Usage};
use crate::audit::outcome::BudgetFacts;
use crate::audit::pair::Pair;
use crate::engine::confirm::Confirmation;
use crate::engine::judging::Judging;
use crate::engine::kind::NodeKind;
use crate::engine::nio::NioRead;
use crate::engine::step::{Computed, Engine, Key, Step};
use crate::error::Result;

/// The budget over what the audit used, after `after`: its limits, the usage, the breaches,
/// and the `proof_runs` fixgate spent proving order dependence (recorded, never held to
/// `--max-reruns`, which limits the suite's own reruns).
pub(crate) fn judge(
    engine: &Engine,
    limits: Limits,
    usage: Usage,
    proof_runs: u64,
    after: &[NodeId],
) -> Result<(NodeId, BudgetFacts)> {
    let step = BudgetOf::new(limits.clone(), usage.clone());
    let (added, breaches) = engine.run_step(step, &[], after)?;
    let facts = BudgetFacts {
        limits,
        usage,
        breaches,
        proof_runs,
    };
    Ok((added.id, facts))
}

/// What the audit used: its wall time since `started`, the tests it ran and froze, the patch's
/// new skips and each test's reruns from its `evidence`.
pub(crate) fn usage(
    started: std::time::Instant,
    j: &Judging,
    new_skips: &[NewSkip],
    evidence: &std::collections::BTreeMap<String, crate::audit::triage::Evidence>,
) -> Usage {
    let seconds = started.elapsed().as_secs_f64();
    let frozen = j.gated.gates.active.len() as u64;
    Usage::of(
        seconds,
        j.selection.len() as u64,
        frozen,
        new_skips.to_vec(),
        evidence,
    )
}

/// The runs fixgate spent proving order dependence: the reruns of orders, the checks of the
/// pairs, and the nio order's runs twice in a row.
pub(crate) fn proof_runs(
    confirmation: &Confirmation,
    pairs: &[Pair],
    nio: Option<&NioRead>,
) -> u64 {
    (confirmation.reruns.values())
        .map(|r| r.len() as u64)
        .sum::<u64>()
        + pairs.iter().map(|p| u64::from(p.verify_runs)).sum::<u64>()
        + nio.map_or(0, |n| n.reruns)
}

/// The breaches of `usage` against `limits`.
pub(crate) struct BudgetOf {
    pub(crate) limits: Limits,
    pub(crate) usage: Usage,
}

impl BudgetOf {
    /// The budget of `usage`, its wall time in tenths of a second, in the key and in the
    /// judgment alike: a key that moved with every microsecond would never be found again, and
    /// the breach line prints tenths anyway.
    pub(crate) fn new(limits: Limits, mut usage: Usage) -> BudgetOf {
        usage.seconds = tenths(usage.seconds) as f64 / 10.0;
        BudgetOf { limits, usage }
    }
}

fn tenths(seconds: f64) -> u64 {
    (seconds * 10.0).round().max(0.0) as u64
}

impl Step for BudgetOf {
    type Output = Vec<Breach>;

    fn kind(&self) -> NodeKind {
        NodeKind::Budget
    }

    fn key(&self, key: &mut Key) {
        let BudgetOf { limits, usage } = self;
        let Limits {
            max_seconds,
            max_tests,
            max_frozen,
            max_new_skips,
            max_reruns,
        } = limits;
        let Usage {
            seconds,
            tests,
            frozen,
            new_skips,
            reruns,
        } = usage;
        let mut w = KeyWriter::new("budget");
        for limit in [
            *max_seconds,
            *max_tests,
            *max_frozen,
            Some(*max_new_skips),
            *max_reruns,
        ] {
            match limit {
                Some(l) => w.u64(l),
                None => w.str("\0none"),
            };
        }
        // The wall time matters only under a limit on it; without one, it stays out of the key
        // so that an unchanged audit finds its budget in the cache.
        match max_seconds {
            Some(_) => w.u64(tenths(*seconds)),
            None => w.str("\0unlimited"),
        };
        w.u64(*tests).u64(*frozen);
        w.list(new_skips, |w, s| {
            let NewSkip {
                nodeid,
                marker,
                reason,
            } = s;
            w.str(nodeid)
                .str(marker)
                .str(reason.as_deref().unwrap_or("\0none"));
        });
        w.list(reruns, |w, r| {
            let Rerun { nodeid, count } = r;
            w.str(nodeid).u64(u64::from(*count));
        });
        key.param("usage", w.finish().to_string());
    }

    fn compute(&self, _: &[&[u8]]) -> Result<Computed<Vec<Breach>>, NodeError> {
        Ok(Computed::new(budget::check(&self.limits, &self.usage)))
    }
}
