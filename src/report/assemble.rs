//! The report, assembled once from an audit's typed outcome: the only writer of an
//! [`AuditReport`]. Every field is a translation of something the phases found; nothing here
//! judges (the rules are in `crate::audit`) and nothing is read back out of a report.

use std::collections::BTreeMap;

use crate::audit::base_check;
use crate::audit::finding::{Finding, FindingKind};
use crate::audit::findings::{self, test_introduced};
use crate::audit::freeze::{self, Date, Entry};
use crate::audit::itemize::HeadCollection;
use crate::audit::order::OrderLabel;
use crate::audit::outcome::{AuditOutcome, Judgment, Reached, Revision};
use crate::audit::scope::{Full, ImpactScope};
use crate::audit::verdict::{self, Disposition, Verdict};
use crate::report::repro;
use crate::report::{self, AuditReport, Column};
use crate::report::{message, reasons};

/// What running the audit took and met.
pub(crate) struct RunFacts {
    /// pytest processes this audit started on this machine (cached and remote runs start
    /// none).
    pub(crate) pytest_processes: u32,
    /// With `--remote-executor`: what the service ran where, what was uploaded.
    pub(crate) remote: Option<crate::remote_exec::client::Summary>,
    pub(crate) forkserver: crate::pytest::forkserver::ForkSummary,
    pub(crate) containment: crate::contain::Containment,
    pub(crate) duration_seconds: f64,
    /// Problems that did not stop the audit, in the order met.
    pub(crate) warnings: Vec<String>,
    /// The audit's graph as it ran.
    pub(crate) graph: fixgate_graph::Report,
}

/// The report of one audit: what it found, and what running it took.
pub(crate) fn assemble(o: &AuditOutcome, run: &RunFacts) -> AuditReport {
    let verdict = o.decision.verdict;
    let mut report = AuditReport {
        schema: report::SCHEMA,
        verdict,
        exit_code: verdict.exit_code(),
        reasons: o.decision.reasons.iter().map(ToString::to_string).collect(),
        base: o.base.clone(),
        head: o.head.clone(),
        seeds: o.seeds.clone(),
        strict: o.strict,
        interpreter: Some(o.interpreter.clone()),
        lock: report::Lock {
            file: o.gates.lock_file.clone(),
            drift: o
                .gates
                .lock
                .drift
                .iter()
                .map(|d| report::Drift {
                    path: d.path.clone(),
                    change: d.change,
                })
                .collect(),
            changed_by_patch: !o.gates.lock.changed_pins.is_empty(),
        },
        fixtures: report::Fixtures {
            changed: o
                .gates
                .changed
                .iter()
                .map(|c| report::ChangedFixture {
                    path: c.path.to_string(),
                    group: c.group.clone(),
                    change: c.change,
                })
                .collect(),
            ..report::Fixtures::default()
        },
        freeze: report::Freeze {
            active: o.gates.active.iter().map(|(n, _)| n.clone()).collect(),
            expired: o.gates.expired.iter().map(|(n, _)| n.clone()).collect(),
            added_by_patch: o.gates.added_by_patch.clone(),
            ..report::Freeze::default()
        },
        graph: report::GraphSummary {
            remote_executed: run.remote.as_ref().map_or(0, |r| r.actions as usize),
            ..graph_summary(&run.graph.nodes)
        },
        graph_dot: run.graph.to_dot(),
        pytest_processes: run.pytest_processes,
        remote_execution: run.remote.clone(),
        forkserver: run.forkserver.clone(),
        containment: Some(run.containment.tier),
        containment_detail: Some(run.containment.clone()),
        duration_seconds: run.duration_seconds,
        warnings: run
            .warnings
            .iter()
            .cloned()
            .chain(run.graph.warnings.iter().map(|w| format!("cache: {w}")))
            .chain(
                run.remote
                    .iter()
                    .flat_map(|r| &r.retried)
                    .map(|r| format!("remote execution: tried again: {r}")),
            )
            .collect(),
        ..AuditReport::default()
    };
    match &o.reached {
        Reached::Gates => {}
        Reached::CollectionError(broken) => {
            let f = findings::collection_error(broken);
            report.findings.push(report::Finding {
                kind: f.kind,
                tests: vec![f.subject.clone()],
                message: message::collection_error(broken),
                repro: Some("python -m pytest --collect-only -q".into()),
                introduced: f.introduced,
                blocking: verdict == Verdict::Reject,
                id: String::new(),
                file: None,
                line: None,
            });
        }
        Reached::Shard(share) => {
            report.orders = share.orders.clone();
            report.shard = Some(report::ShardNote {
                schema: report::SCHEMA,
                shard: format!("{}/{}", share.k, share.n),
                orders: share.orders.clone(),
                executed: share.executed,
                cached: share.cached,
                pytest_processes: run.pytest_processes,
                uploaded: share.uploaded,
            });
        }
        Reached::Judged(j) => add_judgment(&mut report, j, &o.decision.dispositions, o.strict),
    }
    name_and_locate(&mut report);
    report
}

/// Gives each finding its stable id and the file and line of the first of its tests the report
/// locates. The cause in the id is the culprits of the first pair a test of the finding is in:
/// the same victim broken by another test is another finding.
fn name_and_locate(report: &mut AuditReport) {
    let located: BTreeMap<&str, (&Option<String>, Option<u64>)> = report
        .tests
        .iter()
        .filter(|t| t.file.is_some())
        .map(|t| (t.nodeid.as_str(), (&t.file, t.line)))
        .collect();
    for f in &mut report.findings {
        let cause = report
            .pairs
            .iter()
            .find(|p| {
                f.tests
                    .iter()
                    .any(|t| *t == p.victim || p.culprits.contains(t))
            })
            .map(|p| p.culprits.as_slice())
            .unwrap_or_default();
        let mut h = blake3::Hasher::new();
        for part in [f.kind.as_str()]
            .into_iter()
            .chain(f.tests.iter().map(String::as_str))
            .chain([""])
            .chain(cause.iter().map(String::as_str))
        {
            // Each part with its length: no two lists read as the same bytes.
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        f.id = format!("{}-{}", f.kind.as_str(), &h.finalize().to_hex()[..12]);
        if let Some((file, line)) = f.tests.iter().find_map(|id| located.get(id.as_str())) {
            f.file = (*file).clone();
            f.line = *line;
        }
    }
}

/// The parts of the report only an audit that judged the tests has.
fn add_judgment(
    report: &mut AuditReport,
    j: &Judgment,
    dispositions: &[Disposition],
    strict: bool,
) {
    report.orders = j.ran.orders.clone();
    report.scope = Some(scope(j));
    report.fixtures.coupled = j.fixtures.coupled.clone();
    report.fixtures.replay = j
        .fixtures
        .replay
        .iter()
        .map(|r| report::ReplayReport {
            nodeid: r.nodeid.clone(),
            head: r.head,
            base: r.base,
            reading: r.reading,
            files: r.files.clone(),
        })
        .collect();
    report
        .fixtures
        .changed
        .extend(j.fixtures.traced.iter().map(|c| report::ChangedFixture {
            path: c.path.to_string(),
            group: c.group.clone(),
            change: c.change,
        }));
    report.base_suite = j.spec.base_suite.as_ref().map(|b| report::BaseSuiteReport {
        whole: b.whole,
        reasons: reasons::spec_reasons(&b.reasons),
        ran: b.ran,
        tests: b
            .tests
            .iter()
            .map(|t| report::BaseSuiteTest {
                nodeid: t.nodeid.clone(),
                at_head: t.at_head.word(),
                head_nodeid: t.at_head.where_now().map(str::to_string),
                head: t.at_head.outcome(),
                replay: t.replay,
                base: t.control,
                reading: t.reading,
                message: t.failure.clone(),
                depends_on: t.depends_on.clone(),
            })
            .collect(),
    });
    report.source_replay = j
        .spec
        .source_replay
        .iter()
        .map(|r| report::SourceReplay {
            nodeid: r.nodeid.clone(),
            renamed_from: r.renamed_from.clone(),
            head: r.head,
            base_test_code: r.base_test_code,
            reading: r.reading,
            base_lines: r.base_lines.clone(),
            head_lines: r.head_lines.clone(),
        })
        .collect();
    report.edit_replay = j.edit_replay.clone();
    // A replay decided whatever it could tell: a reading, a base version red on the base too,
    // or a test red at head (other findings cover it).
    let decided = (j.spec.source_replay.iter())
        .filter(|r| r.undecided.is_none())
        .count()
        + (j.fixtures.replay.iter())
            .filter(|r| r.reading.finding().is_some())
            .count();
    report.replays = report::ReplayCounts {
        decided: decided as u64,
        undecided: findings::undecided(&j.spec, &j.fixtures).len() as u64,
    };
    // What `--check` found first, then the verdict's findings, then the edited assertions.
    for n in &j.tests.nondeterministic {
        report.findings.push(report::Finding {
            kind: FindingKind::Nondeterministic,
            tests: vec![n.nodeid.clone()],
            message: message::nondeterministic(n),
            repro: None,
            introduced: false,
            blocking: false,
            id: String::new(),
            file: None,
            line: None,
        });
    }
    for (f, d) in j.findings.iter().zip(dispositions) {
        report
            .findings
            .push(finding(f, *d, j, repro::finding(f, j)));
    }
    let kept = crate::audit::edit_replay::kept_as_debt(&j.edit_replay);
    for (p, f) in findings::edited_assertions(&j.pairs, &j.patch.edited, &j.patch.base_ids, &kept) {
        // The headline counts it: the reasons of a reject list it too.
        if report.verdict == Verdict::Reject {
            report
                .reasons
                .extend(verdict::rejection(&f, strict).map(|r| r.to_string()));
        }
        let d = verdict::disposition(&f, strict);
        report
            .findings
            .push(finding(&f, d, j, Some(repro::pair(p))));
    }
    report.freeze.suggested = freeze_suggestions(&j.findings, dispositions, j.today);
    report.pairs = j
        .pairs
        .iter()
        .map(|p| report::PairReport {
            kind: p.kind,
            polluter: p.culprits.first().cloned().unwrap_or_default(),
            victim: p.victim.clone(),
            culprits: p.culprits.clone(),
            repro: repro::pair(p),
            introduced: !j
                .pre_existing
                .contains(&(FindingKind::OrderDependent, p.victim.clone())),
            search_runs: p.search.runs,
            found_by: p.found,
            verify_runs: p.verify_runs,
            unexplained: (!p.search.outcome.explains())
                .then(|| reasons::search_outcome(p.search.outcome)),
        })
        .collect();
    report.tests = j
        .ran
        .selection
        .iter()
        .map(|item| {
            let id = &item.nodeid;
            let t = &j.tests.triaged[id];
            let e = &j.tests.evidence[id];
            let mut outcomes: std::collections::BTreeMap<Column, _> = e
                .outcomes
                .iter()
                .map(|(l, o)| (Column::Order(*l), *o))
                .collect();
            // The nio order's runs, shown beside the orders' outcomes, never judged with them
            // (see `audit::nio`): `nio` the first, `nio#2` the second.
            if let Some(twice) = j.tests.twice.as_ref().and_then(|n| n.get(id)) {
                outcomes.insert(Column::Order(OrderLabel::Twice), twice.first);
                if let Some(second) = twice.second {
                    outcomes.insert(Column::SecondRun, second);
                }
            }
            report::TestReport {
                nodeid: id.clone(),
                bucket: t.bucket,
                signals: t.signals.clone(),
                outcomes,
                dirty_groups: e.dirty_groups.clone(),
                edited_by_patch: j.patch.edited.contains(id),
                introduced: test_introduced(t, id, &j.pre_existing),
                file: item.file.clone(),
                line: item.line,
                message: j.tests.red_messages.get(id).cloned(),
            }
        })
        .collect();
    report.budget = budget_section(&j.budget);
}

fn finding(f: &Finding, d: Disposition, j: &Judgment, repro: Option<String>) -> report::Finding {
    report::Finding {
        kind: f.kind,
        tests: vec![f.subject.clone()],
        message: message::finding_message(f, j),
        repro,
        introduced: f.introduced,
        blocking: matches!(d, Disposition::Rejects | Disposition::Unverifies),
        id: String::new(),
        file: None,
        line: None,
    }
}

/// The freeze entries to suggest: one for each finding that is known debt or flaky, from
/// `today`, the later of two for one test winning.
pub(crate) fn freeze_suggestions(
    findings: &[Finding],
    dispositions: &[Disposition],
    today: Date,
) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for (f, d) in findings.iter().zip(dispositions) {
        if *d == Disposition::KnownDebt || f.kind == FindingKind::Flaky {
            let s = freeze::suggest_entry(
                &f.subject,
                today,
                None,
                &format!("{} found by fixgate", f.kind),
            );
            out.insert(s.nodeid, s.entry);
        }
    }
    out
}

/// The budget section: the limits, what was used, the breach lines. The proof runs are the runs
/// fixgate itself spent proving order dependence (reruns of orders, pair checks): recorded,
/// never hidden, and not held to `--max-reruns`, which limits the suite's own reruns.
fn budget_section(b: &crate::audit::outcome::BudgetFacts) -> report::Budget {
    let (limits, usage) = (&b.limits, &b.usage);
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
            ("proof_reruns", b.proof_runs),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        breaches: b.breaches.iter().map(ToString::to_string).collect(),
    }
}

/// The graph's nodes as the report lists them: each with its status, and the executed ones
/// with their key, the reason and the times.
pub(crate) fn graph_summary(nodes: &[fixgate_graph::NodeReport]) -> report::GraphSummary {
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

/// The report of a head that could not be audited: verdict error, the reason, exit 2.
pub(crate) fn error(head: &str, e: &crate::error::Error) -> AuditReport {
    AuditReport {
        exit_code: e.exit_code(),
        ..unjudged(Verdict::Error, e.to_string(), "", head)
    }
}

/// The report of a head the audit's `--timeout` stopped before it was judged: unverified,
/// with the reason. `started`: whether its audit had begun (else an earlier head used the time).
pub(crate) fn timed_out(
    base: &str,
    head: &str,
    timeout: std::time::Duration,
    started: bool,
) -> AuditReport {
    let how = match started {
        true => "passed before its audit finished",
        false => "had passed before its audit began",
    };
    let reason = format!(
        "the --timeout of {} {how}: the runs were stopped, what finished is in the cache, and \
         an audit with a later deadline starts from it",
        crate::units::show_duration(timeout)
    );
    unjudged(Verdict::Unverified, reason, base, head)
}

/// A report of a verdict reached without an audit, with its one reason.
fn unjudged(verdict: Verdict, reason: String, base: &str, head: &str) -> AuditReport {
    let side = |rev: &str| Revision {
        rev: rev.to_string(),
        commit: None,
    };
    AuditReport {
        schema: report::SCHEMA,
        verdict,
        exit_code: verdict.exit_code(),
        reasons: vec![reason],
        base: side(base),
        head: side(head),
        containment: None,
        containment_detail: None,
        ..AuditReport::default()
    }
}

/// The report's `scope` section: how many tests the patch affected, how many each order ran,
/// the tests the shuffled orders carried (with the outcomes that carried them), or why the
/// orders ran in full.
fn scope(j: &Judgment) -> report::ScopeReport {
    let tests = j.ran.selection.len() as u64;
    let ran = j
        .ran
        .selection
        .iter()
        .filter(|i| j.ran.impact.scope.runs(&i.nodeid))
        .count() as u64;
    let whole = j.ran.impact.whole.as_ref();
    let whole_ran = whole.map_or(tests, |w| {
        j.ran
            .selection
            .iter()
            .filter(|i| w.contains(&i.nodeid))
            .count() as u64
    });
    let from_base = |id: &str| whole.is_some_and(|w| !w.contains(id));
    let runs = j
        .ran
        .orders
        .iter()
        .map(|l| match l {
            OrderLabel::Seed(_) => (*l, ran),
            OrderLabel::File | OrderLabel::Reversed => (*l, whole_ran),
            OrderLabel::Twice => (*l, tests),
        })
        .collect();
    let whole_reason = j.ran.impact.whole_why.as_ref().map(|w| w.to_string());
    let affected = j.ran.impact.affected.as_ref().map(|a| a.len() as u64);
    let settled_on_base: Vec<String> = (j.pairs.iter())
        .filter(|p| base_check::settled(p, &j.ran.impact, |id| j.patch.base_ids.contains(id)))
        .map(|p| p.victim.clone())
        .collect();
    let collection = j.ran.head_collection.as_ref().map(|c| match c {
        HeadCollection::Partial { modules, itemized } => report::CollectionReport {
            modules: *modules as u64,
            itemized: *itemized as u64,
            whole_reason: None,
        },
        HeadCollection::Whole(why) => {
            let modules = crate::audit::itemize::modules(&j.ran.selection) as u64;
            report::CollectionReport {
                modules,
                itemized: modules,
                whole_reason: Some(why.to_string()),
            }
        }
    });
    match &j.ran.impact.scope {
        ImpactScope::Full(why) => report::ScopeReport {
            mode: match why {
                Full::NotAsked => report::ScopeMode::Off,
                _ => report::ScopeMode::Full,
            },
            reason: Some(why.to_string()),
            tests,
            affected,
            writers: Vec::new(),
            runs,
            whole_reason,
            carried: Vec::new(),
            settled_on_base,
            collection,
        },
        ImpactScope::Scoped { run, writers, .. } => report::ScopeReport {
            mode: report::ScopeMode::Scoped,
            reason: None,
            tests,
            affected,
            writers: writers.iter().cloned().collect(),
            runs,
            whole_reason,
            carried: j
                .ran
                .selection
                .iter()
                .filter(|i| !run.contains(&i.nodeid))
                .map(|i| report::Carried {
                    nodeid: i.nodeid.clone(),
                    from: match from_base(&i.nodeid) {
                        true => report::CarriedFrom::Base,
                        false => report::CarriedFrom::Head,
                    },
                    evidence: j.tests.evidence[&i.nodeid]
                        .outcomes
                        .iter()
                        .copied()
                        .collect(),
                })
                .collect(),
            settled_on_base,
            collection,
        },
    }
}
