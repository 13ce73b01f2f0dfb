//! The audit's report, assembled from the judgments: findings with messages and repros, per
//! test rows, pairs, the budget section, and the picture of the graph.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::audit::budget::{self, Limits, Usage};
use crate::audit::freeze::{self, Date};
use crate::audit::message::finding_message;
use crate::audit::triage::{self, Evidence};
use crate::audit::verdict::{self, Decision, Disposition, FindingKind};
use crate::engine::matrix::Matrix;
use crate::engine::search::{self, Pair};
use crate::pytest::events::CollectedItem;
use crate::report::{self, AuditReport};
use crate::snapshot::Snapshot;

/// Everything the report is made of, judged.
pub struct Judged<'a> {
    pub findings: &'a [verdict::Finding],
    pub decision: &'a Decision,
    pub triaged: &'a BTreeMap<String, triage::Triage>,
    pub evidence: &'a BTreeMap<String, Evidence>,
    pub pairs: &'a [Pair],
    pub pre_existing: &'a HashSet<(FindingKind, String)>,
    pub new_skips: &'a [budget::NewSkip],
    pub edited: &'a BTreeSet<String>,
    pub base_ids: &'a HashSet<&'a str>,
    pub matrix: &'a Matrix,
    pub selection: &'a [CollectedItem],
    pub today: Date,
    /// What each test (`None`: outside any test) did outside its sandbox.
    pub outside: &'a BTreeMap<Option<String>, BTreeSet<String>>,
    /// With `--nio`: each test's two runs in the nio order.
    pub nio: Option<&'a BTreeMap<String, crate::audit::nio::Twice>>,
    /// The base-suite replay's messages and repros, by (kind, subject).
    pub spec: &'a crate::engine::base_suite::Messages,
}

/// Fills the findings, freeze suggestions, pairs and per-test rows of `report`.
pub fn fill(report: &mut AuditReport, j: &Judged) {
    let mut report_findings = Vec::new();
    for (f, d) in j.findings.iter().zip(&j.decision.dispositions) {
        if let Some((message, repro)) = j.spec.get(&(f.kind, f.subject.clone())) {
            report_findings.push(report::Finding {
                kind: f.kind.as_str().into(),
                tests: vec![f.subject.clone()],
                message: message.clone(),
                repro: repro.clone(),
                introduced: f.introduced,
                blocking: *d == Disposition::Rejects,
            });
            continue;
        }
        report_findings.push(report::Finding {
            kind: f.kind.as_str().into(),
            tests: vec![f.subject.clone()],
            message: finding_message(
                f,
                j.triaged,
                j.pairs,
                &report.fixtures.replay,
                j.new_skips,
                j.outside,
                &report.source_replay,
            ),
            repro: match f.kind {
                FindingKind::NonIdempotent => Some(crate::audit::nio::repro(&f.subject)),
                _ => j
                    .pairs
                    .iter()
                    .find(|p| p.victim == f.subject || p.culprits.contains(&f.subject))
                    .map(search::repro),
            },
            introduced: f.introduced,
            blocking: *d == Disposition::Rejects,
        });
        if *d == Disposition::KnownDebt || f.kind == FindingKind::Flaky {
            let s = freeze::suggest_entry(
                &f.subject,
                j.today,
                None,
                &format!("{} found by fixgate", f.kind),
            );
            report.freeze.suggested.insert(
                s.nodeid.clone(),
                serde_json::to_value(&s.entry).unwrap_or_default(),
            );
        }
    }
    for p in j.pairs {
        // A new test is not an edited assertion: only a test the base had can be "fixed".
        if j.edited.contains(&p.victim) && j.base_ids.contains(p.victim.as_str()) {
            report_findings.push(report::Finding {
                kind: "edited-assertion".into(),
                tests: vec![p.victim.clone()],
                message: format!(
                    "the patch edited {}, whose outcome depends on {} ({}): it changed the test \
                     instead of isolating it",
                    p.victim,
                    p.culprits.join(", "),
                    p.kind.as_str()
                ),
                repro: Some(search::repro(p)),
                introduced: true,
                blocking: true,
            });
        }
    }
    report.findings.extend(report_findings);
    report.pairs = j
        .pairs
        .iter()
        .map(|p| report::PairReport {
            kind: p.kind.as_str().into(),
            polluter: p.culprits.first().cloned().unwrap_or_default(),
            victim: p.victim.clone(),
            culprits: p.culprits.clone(),
            repro: search::repro(p),
            introduced: !j
                .pre_existing
                .contains(&(FindingKind::OrderDependent, p.victim.clone())),
            search_runs: p.search.runs,
            found_by: p.found.as_str().into(),
            verify_runs: p.verify_runs,
            unexplained: (!p.search.outcome.explains()).then(|| p.search.outcome.describe()),
        })
        .collect();
    let items_by_id: HashMap<&str, &CollectedItem> =
        j.selection.iter().map(|i| (i.nodeid.as_str(), i)).collect();
    report.tests = j
        .selection
        .iter()
        .map(|item| {
            let id = &item.nodeid;
            let t = &j.triaged[id];
            let e = &j.evidence[id];
            let item = items_by_id.get(id.as_str()).copied();
            let kinds = t.finding_kinds();
            report::TestReport {
                nodeid: id.clone(),
                bucket: t.bucket.as_str().into(),
                signals: t.signals.iter().map(|s| s.to_string()).collect(),
                outcomes: e
                    .outcomes
                    .iter()
                    .map(|(l, o)| (l.clone(), o.as_str().to_string()))
                    .chain(nio_outcomes(j.nio.and_then(|n| n.get(id))))
                    .collect(),
                dirty_groups: e.dirty_groups.clone(),
                edited_by_patch: j.edited.contains(id),
                // A test without findings has nothing to be introduced.
                introduced: kinds
                    .iter()
                    .any(|k| !j.pre_existing.contains(&(*k, id.clone()))),
                file: item.and_then(|i| i.file.clone()),
                line: item.and_then(|i| i.line),
                message: j.matrix.red_message(id).map(str::to_owned),
            }
        })
        .collect();
}

/// A test's runs in the nio order as report outcomes: `nio` the first, `nio#2` the second. Shown
/// beside the orders' outcomes, never judged with them (see `audit::nio`).
fn nio_outcomes(twice: Option<&crate::audit::nio::Twice>) -> Vec<(String, String)> {
    let Some(t) = twice else {
        return Vec::new();
    };
    let label = crate::engine::matrix::OrderLabel::Twice.to_string();
    let mut out = vec![(label.clone(), t.first.as_str().to_string())];
    if let Some(second) = t.second {
        out.push((format!("{label}#2"), second.as_str().to_string()));
    }
    out
}

/// The budget section: the limits, what was used, the breach lines. `proof_runs` are the runs
/// fixgate itself spent proving order dependence (reruns of orders, pair checks): recorded,
/// never hidden, and not held to `--max-reruns`, which limits the suite's own reruns.
pub fn budget_section(
    limits: &Limits,
    usage: &Usage,
    breaches: &[String],
    proof_runs: u64,
) -> report::Budget {
    report::Budget {
        limits: [
            ("seconds", limits.max_seconds),
            ("tests", limits.max_tests),
            ("frozen", limits.max_frozen),
            ("new_skips", Some(limits.max_new_skips)),
            ("reruns", limits.max_reruns),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
        .collect(),
        used: [
            ("seconds", usage.seconds.round() as u64),
            ("tests", usage.tests),
            ("frozen", usage.frozen),
            ("new_skips", usage.new_skips.len() as u64),
            ("reruns", usage.rerun_total()),
            ("proof_reruns", proof_runs),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        breaches: breaches.to_vec(),
    }
}

/// The audit's graph in the report: the summary, and the DOT picture.
pub fn graph(report: &mut AuditReport, run: &fixgate_graph::Run) {
    report.graph = graph_summary(&run.report.nodes);
    report.graph_dot = run.report.to_dot();
}

pub fn graph_summary(nodes: &[fixgate_graph::NodeReport]) -> report::GraphSummary {
    use fixgate_graph::Status;
    let mut g = report::GraphSummary {
        nodes: nodes.len(),
        ..Default::default()
    };
    for n in nodes {
        g.all_nodes.push(report::NodeStatus {
            label: n.label.clone(),
            kind: n.kind.clone(),
            status: match &n.status {
                Status::Cached if n.remote => "cached (remote)".into(),
                Status::Cached => "cached".into(),
                Status::Executed { reason } => format!("executed: {reason}"),
                Status::Checked { check } => format!("checked: {check:?}"),
                Status::Failed { error, .. } => format!("failed: {error}"),
                Status::Skipped { because } => format!("skipped: {because} failed"),
            },
        });
        let ran = |reason: String| report::ExecutedNode {
            label: n.label.clone(),
            kind: n.kind.clone(),
            key: n.key.map(|k| k.to_string()).unwrap_or_default(),
            reason,
            start: n.started.map(|d| d.as_secs_f64()).unwrap_or(0.0),
            end: n.finished.map(|d| d.as_secs_f64()).unwrap_or(0.0),
        };
        match &n.status {
            Status::Checked { check } => {
                // It came from the cache and ran again: `explain` says what the check found.
                g.cached += 1;
                g.executed_nodes.push(ran(match check {
                    fixgate_graph::Check::Same => {
                        "--check: ran again, same output as the cached result".to_string()
                    }
                    fixgate_graph::Check::Diverged { fresh } => {
                        format!("--check: ran again, output {fresh} differs from the cached result")
                    }
                    fixgate_graph::Check::Errored { message } => {
                        format!("--check: ran again and failed: {message}")
                    }
                }));
            }
            Status::Cached => {
                g.cached += 1;
                g.remote += usize::from(n.remote);
            }
            Status::Executed { reason } => {
                g.executed += 1;
                g.executed_nodes.push(ran(reason.to_string()));
            }
            Status::Failed { .. } | Status::Skipped { .. } => {}
        }
    }
    g
}

pub fn side_of(s: &Snapshot) -> report::Side {
    report::Side {
        rev: s.rev_label(),
        commit: s.commit().map(|c| c.to_string()),
    }
}
