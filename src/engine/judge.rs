//! Triage, budget and the verdict as nodes of the audit's graph: pure, cheap, cached, and
//! visible in `graph` and `explain`. Each one's key is a canonical digest of the typed values it
//! judges; it starts after the nodes those values came from.

use std::collections::BTreeMap;
use std::sync::Arc;

use fixgate_cache::KeyWriter;
use fixgate_graph::{Node, NodeError, NodeId, Output};

use crate::audit::budget::{self, Breach, Limits, Usage};
use crate::audit::triage::{self, Evidence, Triage};
use crate::audit::verdict::{self, Decision, Weighed};
use crate::engine::kind::NodeKind;
use crate::engine::runs::{node_bug, Engine};
use crate::error::{Error, Result};

fn json<T: serde::Serialize>(v: &T) -> std::result::Result<Output, NodeError> {
    serde_json::to_vec(v)
        .map(Output::new)
        .map_err(|e| node_bug(format!("a judgment does not encode: {e}")))
}

/// Adds `node` after `after` and waits for its output, decoded.
fn judge<T: serde::de::DeserializeOwned>(
    engine: &Engine,
    node: Node,
    inputs: &[NodeId],
    after: &[NodeId],
) -> Result<(NodeId, T)> {
    let id = engine
        .live
        .add_after(node, inputs, after)
        .map_err(|e| Error::bug(e.to_string()))?;
    let label = engine.live.label(id);
    let bytes = engine
        .live
        .wait(id)
        .into_result()
        .map_err(|e| Error::Infra(format!("{label} failed: {e}")))?;
    let value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::bug(format!("the output of {label} does not decode: {e}")))?;
    Ok((id, value))
}

/// The canonical key of the evidence of every test.
fn evidence_key(evidence: &BTreeMap<String, Evidence>) -> String {
    let mut w = KeyWriter::new("evidence");
    w.u64(evidence.len() as u64);
    for (id, e) in evidence {
        w.str(id);
        w.list(&e.outcomes, |w, (label, o)| {
            w.str(&label.to_string()).str(o.as_str());
        });
        match &e.confirm {
            Some(c) => {
                for reruns in [&c.failing, &c.passing] {
                    w.list(reruns, |w, o| {
                        w.str(o.as_str());
                    });
                }
            }
            None => {
                w.str("\0none");
            }
        };
        w.str(e.alone.map(|o| o.as_str()).unwrap_or("\0none"));
        w.list(&e.dirty_groups, |w, g| {
            w.str(g);
        });
        w.u64(u64::from(e.polluter_in_pair))
            .u64(u64::from(e.state_setter_in_pair))
            .u64(u64::from(e.edited_by_patch))
            .u64(u64::from(e.reruns))
            .u64(u64::from(e.unexplained))
            .str(e.nio.map(|n| n.as_str()).unwrap_or("\0none"))
            .u64(u64::from(e.flaky_too));
        w.list(&e.leaks, |w, change| {
            w.str(&change.to_string());
        });
    }
    w.finish().to_string()
}

/// The triage node: every test's bucket and signals from its evidence.
pub(crate) fn triage(
    engine: &Engine,
    evidence: BTreeMap<String, Evidence>,
    after: &[NodeId],
) -> Result<(NodeId, BTreeMap<String, Triage>)> {
    let key = evidence_key(&evidence);
    let evidence = Arc::new(evidence);
    let kind = NodeKind::Triage;
    let node = Node::new(kind.label(), kind.as_str(), move |_| {
        let triaged: BTreeMap<&String, Triage> = evidence
            .iter()
            .map(|(id, e)| (id, triage::triage(e)))
            .collect();
        json(&triaged)
    })
    .param("evidence", key);
    judge(engine, node, &[], after)
}

/// The budget node: the breach lines of `usage` against `limits`.
pub(crate) fn budget(
    engine: &Engine,
    limits: Limits,
    mut usage: Usage,
    after: &[NodeId],
) -> Result<(NodeId, Vec<Breach>)> {
    // Tenths of a second, in the key and in the judgment alike: a key that moved with every
    // microsecond would never be found again, and the breach line prints tenths anyway.
    let tenths = (usage.seconds * 10.0).round().max(0.0) as u64;
    usage.seconds = tenths as f64 / 10.0;
    let mut w = KeyWriter::new("budget");
    for limit in [
        limits.max_seconds,
        limits.max_tests,
        limits.max_frozen,
        Some(limits.max_new_skips),
        limits.max_reruns,
    ] {
        match limit {
            Some(l) => w.u64(l),
            None => w.str("\0none"),
        };
    }
    // The wall time matters only under a limit on it; without one, it stays out of the key so
    // that an unchanged audit finds its budget in the cache.
    match limits.max_seconds {
        Some(_) => w.u64(tenths),
        None => w.str("\0unlimited"),
    };
    w.u64(usage.tests).u64(usage.frozen);
    w.list(&usage.new_skips, |w, s| {
        w.str(&s.nodeid)
            .str(&s.marker)
            .str(s.reason.as_deref().unwrap_or("\0none"));
    });
    w.list(&usage.reruns, |w, r| {
        w.str(&r.nodeid).u64(u64::from(r.count));
    });
    let kind = NodeKind::Budget;
    let node = Node::new(kind.label(), kind.as_str(), move |_| {
        json(&budget::check(&limits, &usage))
    })
    .param("usage", w.finish().to_string())
    .param("version", kind.version().to_string());
    judge(engine, node, &[], after)
}

/// The verdict node: computed from the budget node's output and the findings.
pub(crate) fn verdict(
    engine: &Engine,
    weighed: Weighed,
    budget: Option<NodeId>,
    after: &[NodeId],
) -> Result<(NodeId, Decision)> {
    let mut w = KeyWriter::new("verdict");
    w.list(&weighed.findings, |w, f| {
        w.str(f.kind.as_str())
            .str(&f.subject)
            .u64(u64::from(f.introduced))
            .u64(u64::from(f.edited_by_patch));
    });
    w.list(&weighed.drift, |w, d| {
        w.str(&d.lock).str(&d.path).str(d.change.as_str());
    });
    w.list(&weighed.expired, |w, e| {
        w.str(&e.nodeid).str(&e.owner).str(&e.expires);
    });
    w.u64(u64::from(weighed.strict));
    let weighed = Arc::new(weighed);
    let kind = NodeKind::Verdict;
    let node = Node::new(kind.label(), kind.as_str(), move |inputs| {
        let breaches: Vec<Breach> = match inputs.first() {
            Some(bytes) => serde_json::from_slice(bytes)
                .map_err(|e| node_bug(format!("the budget's output does not decode: {e}")))?,
            None => Vec::new(),
        };
        json(&verdict::decide(&weighed, &breaches))
    })
    .param("weighed", w.finish().to_string())
    .param("version", kind.version().to_string());
    let inputs: Vec<NodeId> = budget.into_iter().collect();
    judge(engine, node, &inputs, after)
}
