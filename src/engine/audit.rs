//! The audit pipeline: gates, the seed matrix, confirmation, the polluter search, coupling and
//! replay, base checks, triage, budget and the verdict, assembled into the report.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::audit::bisect::PairKind;
use crate::audit::budget::{self, Limits, Overrides, Usage};
use crate::audit::freeze::{self, Date, Ledger};
use crate::audit::triage::{self, Bucket, Confirm, Evidence, Signal};
use crate::audit::verdict::{self, Disposition, FindingKind, Gates};
use crate::config::DepsMode;
use crate::context::Ctx;
use crate::delta::Change;
use crate::engine::digests::TreeDigests;
use crate::engine::matrix::{self, is_green, Matrix};
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::engine::search::{self, Pair};
use crate::engine::steps;
use crate::error::{Error, Result};
use crate::pytest::driver::RunResult;
use crate::pytest::events::{CollectedItem, Outcome};
use crate::report::{self, AuditReport};
use crate::snapshot::Snapshot;

pub const FREEZE_LEDGER: &str = ".fixgate/freeze.json";

pub struct Options {
    pub base: String,
    /// `None`: the working tree.
    pub head: Option<String>,
    /// The shuffled orders, after file order and reversed order.
    pub seeds: Vec<u64>,
    pub strict: bool,
    pub cache: bool,
    pub check: bool,
    pub deps: Option<DepsMode>,
    pub budget: Overrides,
    pub today: Date,
    pub sandbox: crate::cli::SandboxArgs,
}

/// Runs the whole audit.
pub fn audit(ctx: &Ctx, opts: &Options) -> Result<AuditReport> {
    let started = Instant::now();
    let base = Arc::new(ctx.repo.snapshot(Some(&opts.base))?);
    let head = Arc::new(ctx.repo.snapshot(opts.head.as_deref())?);
    let base_config = ctx.config(&base)?;
    let config = crate::cmd::delta::pair_config(ctx, &base, &head)?;
    let deps_mode = opts.deps.unwrap_or(base_config.deps);

    let base_ledger = read_ledger(&base)?;
    let head_ledger = read_ledger(&head)?;

    let mut stat = crate::statcache::StatCache::load(&ctx.cache_dir, &head.root);
    let head_tree = steps::tree_digest(&head, Some(&mut stat))?;
    let base_tree = steps::tree_digest(&base, None)?;
    if let Err(e) = stat.save() {
        ctx.warn(&format!("failed to save the stat cache: {e}"));
    }
    let runner = ctx.runner(&opts.sandbox)?;
    let (store, warning) = crate::engine::store::open(&ctx.cache_dir, opts.cache);
    if let Some(w) = warning {
        ctx.warn(&w);
    }
    let engine = Engine {
        store,
        runner: Arc::new(runner),
        groups: config.groups.clone(),
        deps_mode,
        base: Arc::new(TreeDigests::new(base.clone())),
        head: Arc::new(TreeDigests::new(head.clone())),
        jobs: ctx.jobs,
        force: false,
        scope: ctx.repo.root.display().to_string(),
        progress: (!ctx.quiet).then(indicatif::MultiProgress::new),
        reports: Mutex::new(Vec::new()),
        processes: AtomicU32::new(0),
        warnings: Mutex::new(Vec::new()),
    };

    let mut report = AuditReport {
        schema: report::SCHEMA,
        strict: opts.strict,
        base: side_of(&base),
        head: side_of(&head),
        seeds: std::iter::once(0)
            .chain(opts.seeds.iter().copied())
            .collect(),
        interpreter: Some(engine.runner.interpreter.path.display().to_string()),
        ..AuditReport::default()
    };

    // Gates before any test runs.
    let fixtures = steps::prepare_fixtures(
        &engine,
        base_tree,
        head_tree,
        base.read_path(crate::lock::FILE_NAME)?,
        head.read_path(crate::lock::FILE_NAME)?,
    )?;
    if let Some(e) = &fixtures.lock.error {
        return Err(Error::Usage(e.clone()));
    }
    report.lock.drift = fixtures
        .lock
        .drift
        .iter()
        .map(|d| report::Drift {
            path: d.path.clone(),
            change: d.change.clone(),
        })
        .collect();
    report.lock.changed_by_patch = !fixtures.lock.changed_pins.is_empty();
    report.fixtures.changed = fixtures
        .delta
        .changed
        .iter()
        .map(|c| report::ChangedFixture {
            path: c.path.to_string(),
            group: c.group.clone(),
            change: c.change.as_str().into(),
        })
        .collect();
    let active: Vec<(String, freeze::Entry)> = base_ledger.active(opts.today);
    let expired: Vec<(String, freeze::Entry)> = base_ledger.expired(opts.today);
    report.freeze.active = active.iter().map(|(n, _)| n.clone()).collect();
    report.freeze.expired = expired.iter().map(|(n, _)| n.clone()).collect();
    report.freeze.added_by_patch = freeze::added_by(&base_ledger, &head_ledger);

    let drift: Vec<String> = report
        .lock
        .drift
        .iter()
        .map(|d| format!("{} ({})", d.path, d.change))
        .collect();
    let expired_text: Vec<String> = expired
        .iter()
        .map(|(n, e)| format!("{n} (owner {}, expired {})", e.owner, e.expires))
        .collect();
    if !drift.is_empty() || !expired_text.is_empty() {
        let decision = verdict::decide(&Gates {
            drift: &drift,
            expired: &expired_text,
            strict: opts.strict,
            ..Gates::default()
        });
        finish(
            &mut report,
            &engine,
            decision.verdict,
            decision.reasons,
            started,
        );
        return Ok(report);
    }

    // Collection, then the seed matrix over the selection (frozen tests deselected).
    let (base_collection, head_collection) = steps::collect_both(&engine)?;
    let (base_items, head_items) = (&base_collection.items, &head_collection.items);
    let frozen: HashSet<&str> = active.iter().map(|(n, _)| n.as_str()).collect();
    let selection: Vec<CollectedItem> = head_items
        .iter()
        .filter(|i| !frozen.contains(i.nodeid.as_str()))
        .cloned()
        .collect();
    let nodeids: Vec<String> = selection.iter().map(|i| i.nodeid.clone()).collect();
    let mut labels = vec!["0".to_string(), "rev".to_string()];
    labels.extend(opts.seeds.iter().map(|s| s.to_string()));
    report.orders = labels.clone();
    let matrix = Matrix::run(&engine, &labels, &selection)?;
    let mut run_warnings: Vec<String> = matrix
        .runs
        .values()
        .flat_map(|r| r.warnings.clone())
        .collect();
    run_warnings.sort();
    run_warnings.dedup();
    report.warnings.extend(run_warnings);
    if opts.check {
        check_cached_runs(&engine, &matrix, &selection, &mut report)?;
    }

    // Confirmation: rerun disagreeing orders; run tests alone that are red everywhere or that
    // follow the order (alone tells a polluter's victim from a test that needs a state-setter).
    let disagreeing = matrix.disagreeing(&nodeids);
    let always_red = matrix.always_red(&nodeids);
    let confirmation = matrix::confirm(&engine, &matrix, &selection, &disagreeing, &always_red)?;

    // What the patch edited.
    let edited = edited_tests(&base, &head, &nodeids);

    // First triage, to know which tests are order-dependent.
    let mut evidence: BTreeMap<String, Evidence> = BTreeMap::new();
    for id in &nodeids {
        let outcomes = matrix.outcomes(id);
        let confirm = disagreeing.contains(&id.to_string()).then(|| {
            let f = matrix.first(id, false).unwrap_or_default();
            let p = matrix.first(id, true).unwrap_or_default();
            let rerun = |l: &str| {
                confirmation
                    .reruns
                    .get(l)
                    .and_then(|r| r.outcome_of(id))
                    .unwrap_or(Outcome::Error)
            };
            Confirm {
                failing_rerun: rerun(&f),
                passing_rerun: rerun(&p),
            }
        });
        let mut dirty: BTreeSet<String> = BTreeSet::new();
        let mut reruns = 0;
        for r in matrix.runs.values() {
            if let Some(t) = r.test(id) {
                dirty.extend(t.violations.iter().map(|v| v.group.clone()));
                reruns = reruns.max(t.reruns);
            }
        }
        evidence.insert(
            id.clone(),
            Evidence {
                outcomes,
                confirm,
                alone: confirmation.alone.get(id).copied(),
                dirty_groups: dirty.into_iter().collect(),
                polluter_in_pair: false,
                state_setter_in_pair: false,
                edited_by_patch: edited.contains(id),
                reruns,
            },
        );
    }

    // The polluter search for every order-dependent test.
    let mut pairs: Vec<Pair> = Vec::new();
    for id in &nodeids {
        let t = triage::triage(&evidence[id]);
        if t.bucket != Bucket::OrderDependent && !t.has(&Signal::OrderDependent) {
            continue;
        }
        let alone_green = evidence[id].alone.map(is_green).unwrap_or(true);
        let (kind, label) = if alone_green {
            (PairKind::Polluter, matrix.first(id, false))
        } else {
            (PairKind::StateSetter, matrix.first(id, true))
        };
        let Some(label) = label else { continue };
        let order = &matrix.runs[&label].order;
        let pos = order.iter().position(|o| o == id).unwrap_or(0);
        let pair = search::find(&engine, Role::Head, id, &order[..pos], kind)?;
        for c in &pair.culprits {
            if let Some(e) = evidence.get_mut(c) {
                match kind {
                    PairKind::Polluter => e.polluter_in_pair = true,
                    PairKind::StateSetter => e.state_setter_in_pair = true,
                }
            }
        }
        pairs.push(pair);
    }

    // Coupling and replay: tests whose reads touch the fixture delta, rerun on head code with
    // the base's fixture bytes.
    let coupled = coupled_tests(&matrix.runs["0"], &fixtures.delta);
    report.fixtures.coupled = coupled.clone();
    if !coupled.is_empty() {
        report.fixtures.replay = replay(
            &engine,
            &base,
            &fixtures.delta,
            &coupled,
            &matrix.runs["0"],
            base_items,
        )?;
    }

    // Triage, then check each finding on the base with the same evidence.
    let triaged: BTreeMap<String, triage::Triage> = evidence
        .iter()
        .map(|(id, e)| (id.clone(), triage::triage(e)))
        .collect();
    let base_ids: HashSet<&str> = base_items.iter().map(|i| i.nodeid.as_str()).collect();
    let pre_existing = base_checks(&engine, &triaged, &pairs, &matrix, &base_ids)?;

    // Findings and the verdict.
    let mut findings: Vec<verdict::Finding> = Vec::new();
    let mut report_findings: Vec<report::Finding> = Vec::new();
    for (id, t) in &triaged {
        for kind in t.finding_kinds() {
            let introduced = !pre_existing.contains(&(kind, id.clone()));
            findings.push(verdict::Finding {
                kind,
                subject: id.clone(),
                introduced,
                edited_by_patch: edited.contains(id),
            });
        }
    }
    for r in &report.fixtures.replay {
        let kind = match r.reading.as_str() {
            "redefined" => FindingKind::Redefined,
            "cosmetic" => FindingKind::Cosmetic,
            "additive" => FindingKind::Additive,
            _ => continue,
        };
        findings.push(verdict::Finding {
            kind,
            subject: r.nodeid.clone(),
            introduced: true,
            edited_by_patch: edited.contains(&r.nodeid),
        });
    }
    let with_skipped = |c: &crate::pytest::events::Collection| {
        c.items
            .iter()
            .chain(&c.skipped_collectors)
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut new_skips = budget::new_skips(
        &with_skipped(&base_collection),
        &with_skipped(&head_collection),
    );
    // A skip inside the test body (`pytest.skip(...)`) is no marker: a test the base had, edited
    // by the patch and skipped in every order, counts too.
    for id in &nodeids {
        let outcomes = &evidence[id].outcomes;
        let skipped = !outcomes.is_empty() && outcomes.iter().all(|(_, o)| *o == Outcome::Skipped);
        let counted = new_skips.iter().any(|s| &s.nodeid == id);
        if skipped && edited.contains(id) && base_ids.contains(id.as_str()) && !counted {
            let reason = matrix.runs["0"]
                .test(id)
                .and_then(|t| t.skip_reason.clone());
            new_skips.push(budget::NewSkip {
                nodeid: id.clone(),
                marker: "pytest.skip()".into(),
                reason,
            });
        }
    }
    new_skips.sort_by(|a, b| a.nodeid.cmp(&b.nodeid));
    for s in &new_skips {
        findings.push(verdict::Finding {
            kind: FindingKind::NewSkip,
            subject: s.nodeid.clone(),
            introduced: true,
            edited_by_patch: edited.contains(&s.nodeid),
        });
    }
    for n in &report.freeze.added_by_patch {
        findings.push(verdict::Finding {
            kind: FindingKind::FreezeAdded,
            subject: n.clone(),
            introduced: true,
            edited_by_patch: false,
        });
    }
    for p in &fixtures.lock.changed_pins {
        findings.push(verdict::Finding {
            kind: FindingKind::LockChanged,
            subject: p.clone(),
            introduced: true,
            edited_by_patch: false,
        });
    }

    let limits = Limits::merge(&opts.budget, &base_config.budget);
    let usage = Usage {
        seconds: started.elapsed().as_secs_f64(),
        tests: selection.len() as u64,
        frozen: active.len() as u64,
        new_skips: new_skips.clone(),
        reruns: evidence
            .iter()
            .filter(|(_, e)| e.reruns > 0)
            .map(|(id, e)| budget::Rerun {
                nodeid: id.clone(),
                count: e.reruns,
            })
            .collect(),
    };
    let breaches = budget::check(&limits, &usage);
    let decision = verdict::decide(&Gates {
        findings: &findings,
        breaches: &breaches,
        strict: opts.strict,
        ..Gates::default()
    });

    // The report.
    for (f, d) in findings.iter().zip(&decision.dispositions) {
        report_findings.push(report::Finding {
            kind: f.kind.as_str().into(),
            tests: vec![f.subject.clone()],
            message: finding_message(f, &triaged, &pairs, &report.fixtures.replay, &new_skips),
            repro: pairs
                .iter()
                .find(|p| p.victim == f.subject || p.culprits.contains(&f.subject))
                .map(search::repro),
            introduced: f.introduced,
            blocking: *d == Disposition::Rejects,
        });
        if *d == Disposition::KnownDebt || f.kind == FindingKind::Flaky {
            let s = freeze::suggest_entry(
                &f.subject,
                opts.today,
                None,
                &format!("{} found by fixgate", f.kind),
            );
            report.freeze.suggested.insert(
                s.nodeid.clone(),
                serde_json::to_value(&s.entry).unwrap_or_default(),
            );
        }
    }
    for p in &pairs {
        // A new test is not an edited assertion: only a test the base had can be "fixed".
        if edited.contains(&p.victim) && base_ids.contains(p.victim.as_str()) {
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
    report.findings = report_findings;
    report.pairs = pairs
        .iter()
        .map(|p| report::PairReport {
            kind: p.kind.as_str().into(),
            polluter: p.culprits.first().cloned().unwrap_or_default(),
            victim: p.victim.clone(),
            culprits: p.culprits.clone(),
            repro: search::repro(p),
            introduced: !pre_existing.contains(&(FindingKind::OrderDependent, p.victim.clone())),
            search_runs: p.search.runs,
            unexplained: (!p.search.outcome.is_found()).then(|| p.search.outcome.describe()),
        })
        .collect();
    let items_by_id: HashMap<&str, &CollectedItem> =
        selection.iter().map(|i| (i.nodeid.as_str(), i)).collect();
    report.tests = nodeids
        .iter()
        .map(|id| {
            let t = &triaged[id];
            let item = items_by_id.get(id.as_str()).copied();
            let kinds = t.finding_kinds();
            report::TestReport {
                nodeid: id.clone(),
                bucket: t.bucket.as_str().into(),
                signals: t.signals.iter().map(|s| s.to_string()).collect(),
                outcomes: evidence[id]
                    .outcomes
                    .iter()
                    .map(|(l, o)| (l.clone(), o.as_str().to_string()))
                    .collect(),
                dirty_groups: evidence[id].dirty_groups.clone(),
                edited_by_patch: edited.contains(id),
                introduced: kinds.is_empty()
                    || kinds
                        .iter()
                        .any(|k| !pre_existing.contains(&(*k, id.clone()))),
                file: item.and_then(|i| i.file.clone()),
                line: item.and_then(|i| i.line),
                message: matrix
                    .runs
                    .values()
                    .filter_map(|r| r.test(id))
                    .find_map(|t| (!is_green(t.outcome)).then(|| t.message.clone()).flatten()),
            }
        })
        .collect();
    report.budget = report::Budget {
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
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        breaches: breaches.iter().map(|b| b.to_string()).collect(),
    };
    finish(
        &mut report,
        &engine,
        decision.verdict,
        decision.reasons,
        started,
    );
    Ok(report)
}

fn finish(
    report: &mut AuditReport,
    engine: &Engine,
    verdict: verdict::Verdict,
    reasons: Vec<String>,
    started: Instant,
) {
    report.verdict = verdict.as_str().into();
    report.exit_code = verdict.exit_code();
    report.reasons = reasons;
    let nodes = engine
        .reports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    report.graph = graph_summary(&nodes);
    report.graph_dot = fixgate_graph::Report {
        nodes,
        warnings: Vec::new(),
        elapsed: started.elapsed(),
    }
    .to_dot();
    report.pytest_processes = engine.processes.load(Ordering::Relaxed);
    report.warnings.extend(
        engine
            .warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned(),
    );
    report.duration_seconds = started.elapsed().as_secs_f64();
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
                Status::Cached => "cached".into(),
                Status::Executed { reason } => format!("executed: {reason}"),
                Status::Checked { check } => format!("checked: {check:?}"),
                Status::Failed { error, .. } => format!("failed: {error}"),
                Status::Skipped { because } => format!("skipped: {because} failed"),
            },
        });
        match &n.status {
            Status::Cached | Status::Checked { .. } => g.cached += 1,
            Status::Executed { reason } => {
                g.executed += 1;
                g.executed_nodes.push(report::ExecutedNode {
                    label: n.label.clone(),
                    kind: n.kind.clone(),
                    key: n.key.map(|k| k.to_string()).unwrap_or_default(),
                    reason: reason.to_string(),
                    start: n.started.map(|d| d.as_secs_f64()).unwrap_or(0.0),
                    end: n.finished.map(|d| d.as_secs_f64()).unwrap_or(0.0),
                });
            }
            Status::Failed { .. } | Status::Skipped { .. } => {}
        }
    }
    g
}

fn side_of(s: &Snapshot) -> report::Side {
    report::Side {
        rev: s.rev_label(),
        commit: s.commit().map(|c| c.to_string()),
    }
}

fn read_ledger(s: &Snapshot) -> Result<Ledger> {
    match s.read_path(FREEZE_LEDGER)? {
        None => Ok(Ledger::default()),
        Some(bytes) => freeze::parse(&bytes, &format!("{FREEZE_LEDGER} of {}", s.rev_label()))
            .map_err(|e| Error::Usage(e.to_string())),
    }
}

/// The tests whose function source the patch changed (a new test counts as edited). Each test
/// file is read once per side, and only files that differ are parsed.
fn edited_tests(base: &Snapshot, head: &Snapshot, nodeids: &[String]) -> BTreeSet<String> {
    let mut texts: HashMap<String, (Option<String>, Option<String>)> = HashMap::new();
    let read = |s: &Snapshot, file: &str| {
        s.read_path(file)
            .ok()
            .flatten()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    let mut edited = BTreeSet::new();
    for id in nodeids {
        let (file, func) = crate::testsrc::split_nodeid(id);
        let (b, h) = texts
            .entry(file.to_string())
            .or_insert_with(|| (read(base, file), read(head, file)));
        if b == h {
            continue;
        }
        let source = |t: &Option<String>| {
            t.as_deref()
                .and_then(|t| crate::testsrc::function_source(t, func))
        };
        match (source(b), source(h)) {
            (Some(b), Some(h)) if b != h => {
                edited.insert(id.clone());
            }
            (None, Some(_)) => {
                edited.insert(id.clone());
            }
            _ => {}
        }
    }
    edited
}

/// Tests whose traced reads in the file-order run touch a file of the delta.
fn coupled_tests(run: &RunResult, delta: &crate::delta::Delta) -> Vec<String> {
    let changed: HashSet<String> = delta.changed.iter().map(|c| c.path.to_string()).collect();
    run.tests
        .iter()
        .filter(|t| {
            t.trace
                .read
                .iter()
                .chain(&t.trace.sqlite)
                .chain(&t.trace.list)
                .any(|p| changed.contains(p))
        })
        .map(|t| t.nodeid.clone())
        .collect()
}

/// Replays the coupled tests on head code with the base's fixture bytes, and reads each per the
/// decision table.
fn replay(
    engine: &Engine,
    base: &Snapshot,
    delta: &crate::delta::Delta,
    coupled: &[String],
    head_run: &RunResult,
    base_items: &[CollectedItem],
) -> Result<Vec<report::ReplayReport>> {
    let git = base.open_git()?;
    let mut overlay = Vec::new();
    for c in &delta.changed {
        let bytes = match c.change {
            Change::Added => None,
            Change::Removed | Change::Modified => {
                let entry = base
                    .find(&c.path)
                    .ok_or_else(|| Error::Infra(format!("bug: {} is not in the base", c.path)))?;
                Some(base.read(entry, git.as_ref())?)
            }
        };
        overlay.push((c.path.clone(), bytes));
    }
    let base_ids: HashSet<&str> = base_items.iter().map(|i| i.nodeid.as_str()).collect();
    let added: HashSet<String> = delta
        .changed
        .iter()
        .filter(|c| c.change == Change::Added)
        .map(|c| c.path.to_string())
        .collect();
    let changed: HashSet<String> = delta.changed.iter().map(|c| c.path.to_string()).collect();
    let req = RunRequest {
        label: "replay-run".into(),
        kind: "replay-run",
        role: Role::Head,
        order: coupled.to_vec(),
        overlay,
    };
    let result = engine
        .run_batch(std::slice::from_ref(&req))?
        .pop()
        .expect("one result per request")
        .map_err(|e| Error::Infra(format!("the replay failed: {e}")))?;
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
        let reading = if !base_ids.contains(id.as_str())
            && !reads.is_empty()
            && reads.iter().all(|p| added.contains(*p))
        {
            "additive"
        } else if !is_green(head) {
            "inconclusive"
        } else if is_green(on_base) {
            "cosmetic"
        } else {
            "redefined"
        };
        out.push(report::ReplayReport {
            nodeid: id.clone(),
            head: head.as_str().into(),
            base: on_base.as_str().into(),
            reading: reading.into(),
        });
    }
    Ok(out)
}

/// Checks each head finding on the base snapshot with the same evidence; returns the
/// `(kind, test)` findings the base has too (pre-existing).
fn base_checks(
    engine: &Engine,
    triaged: &BTreeMap<String, triage::Triage>,
    pairs: &[Pair],
    matrix: &Matrix,
    base_ids: &HashSet<&str>,
) -> Result<HashSet<(FindingKind, String)>> {
    let mut requests: Vec<BaseCheck> = Vec::new();
    for p in pairs {
        if !base_ids.contains(p.victim.as_str())
            || p.culprits.iter().any(|c| !base_ids.contains(c.as_str()))
        {
            continue;
        }
        let mut order = p.culprits.clone();
        order.push(p.victim.clone());
        let culprit_kind = if p.kind == PairKind::Polluter {
            FindingKind::Polluter
        } else {
            FindingKind::OrderDependent
        };
        let mut kinds = vec![(FindingKind::OrderDependent, p.victim.clone())];
        kinds.extend(p.culprits.iter().map(|c| (culprit_kind, c.clone())));
        requests.push(BaseCheck {
            request: base_request(format!("base-check(pair {})", p.victim), order),
            findings: kinds,
            check: Check::Pair {
                victim: p.victim.clone(),
                kind: p.kind,
                alone: format!("base-check(alone {})", p.victim),
            },
        });
        requests.push(BaseCheck {
            request: base_request(
                format!("base-check(alone {})", p.victim),
                vec![p.victim.clone()],
            ),
            findings: Vec::new(),
            check: Check::Nothing,
        });
    }
    for (id, t) in triaged {
        if !base_ids.contains(id.as_str()) {
            continue;
        }
        for kind in t.finding_kinds() {
            match kind {
                FindingKind::LeaseViolation
                | FindingKind::Failing
                | FindingKind::Crashed
                | FindingKind::Timeout
                | FindingKind::ErrorBucket => {
                    requests.push(BaseCheck {
                        request: base_request(
                            format!("base-check({} {id})", kind.as_str()),
                            vec![id.clone()],
                        ),
                        findings: vec![(kind, id.clone())],
                        check: Check::Alone {
                            nodeid: id.clone(),
                            kind,
                        },
                    });
                }
                FindingKind::Flaky => {
                    // Flaky never rejects; it is the patch's only when the base lacks the test.
                }
                FindingKind::OrderDependent if !pairs.iter().any(|p| &p.victim == id) => {
                    // Unexplained order dependence: the failing order, restricted to the base.
                    if let Some(l) = matrix.first(id, false) {
                        let order: Vec<String> = matrix.runs[&l]
                            .order
                            .iter()
                            .filter(|o| base_ids.contains(o.as_str()))
                            .cloned()
                            .collect();
                        requests.push(BaseCheck {
                            request: base_request(format!("base-check(order {id})"), order),
                            findings: vec![(kind, id.clone())],
                            check: Check::Red { nodeid: id.clone() },
                        });
                    }
                }
                _ => {}
            }
        }
    }
    // A change that breaks the whole suite must not start a base process per test: red tests
    // beyond a handful are checked together.
    let red = |c: &BaseCheck| matches!(&c.check, Check::Alone { kind, .. } if *kind != FindingKind::LeaseViolation);
    if requests.iter().filter(|c| red(c)).count() > matrix::MANY_RED {
        let mut items = Vec::new();
        requests.retain(|c| match &c.check {
            Check::Alone { nodeid, kind } if red(c) => {
                items.push((nodeid.clone(), *kind));
                false
            }
            _ => true,
        });
        // A test with several findings is listed once (an order file rejects duplicates).
        let mut seen = HashSet::new();
        let order: Vec<String> = items
            .iter()
            .filter(|(n, _)| seen.insert(n.as_str()))
            .map(|(n, _)| n.clone())
            .collect();
        requests.push(BaseCheck {
            request: base_request("base-check(red tests)".into(), order),
            findings: Vec::new(),
            check: Check::Batch(items),
        });
    }
    let mut pre = HashSet::new();
    for (id, t) in triaged {
        if t.finding_kinds().contains(&FindingKind::Flaky) && base_ids.contains(id.as_str()) {
            pre.insert((FindingKind::Flaky, id.clone()));
        }
    }
    if requests.is_empty() {
        return Ok(pre);
    }
    let batch: Vec<RunRequest> = requests.iter().map(|c| c.request.clone()).collect();
    let results = engine.run_batch(&batch)?;
    for (i, c) in requests.iter().enumerate() {
        let Ok(r) = &results[i] else { continue };
        let holds = match &c.check {
            Check::Nothing => false,
            Check::Pair {
                victim,
                kind,
                alone,
            } => {
                let after = r.outcome_of(victim).map(is_green);
                let alone = requests
                    .iter()
                    .position(|c| &c.request.label == alone)
                    .and_then(|j| results[j].as_ref().ok())
                    .and_then(|a| a.outcome_of(victim))
                    .map(is_green);
                match kind {
                    PairKind::Polluter => after == Some(false) && alone == Some(true),
                    PairKind::StateSetter => after == Some(true) && alone == Some(false),
                }
            }
            Check::Red { nodeid } => r.outcome_of(nodeid).is_some_and(|o| !is_green(o)),
            Check::Alone { nodeid, kind } => alone_holds(r, nodeid, *kind),
            Check::Batch(items) => {
                for (nodeid, kind) in items {
                    if alone_holds(r, nodeid, *kind) {
                        pre.insert((*kind, nodeid.clone()));
                    }
                }
                false
            }
        };
        if holds {
            pre.extend(c.findings.iter().cloned());
        }
    }
    Ok(pre)
}

/// One run on the base, the findings it can show to be pre-existing, and how to read it.
struct BaseCheck {
    request: RunRequest,
    findings: Vec<(FindingKind, String)>,
    check: Check,
}

/// Whether a run on the base shows the finding `kind` for `nodeid`.
fn alone_holds(r: &RunResult, nodeid: &str, kind: FindingKind) -> bool {
    let t = r.test(nodeid);
    match kind {
        FindingKind::LeaseViolation => t.is_some_and(|t| !t.violations.is_empty()),
        FindingKind::Crashed => t.is_some_and(|t| t.outcome == Outcome::Crashed),
        FindingKind::Timeout => t.is_some_and(|t| t.outcome == Outcome::Timeout),
        FindingKind::ErrorBucket => t.is_some_and(|t| t.outcome == Outcome::Error),
        _ => t.is_some_and(|t| !is_green(t.outcome)),
    }
}

enum Check {
    Nothing,
    /// Many red tests at once, checked in one run on the base (see `matrix::MANY_RED`).
    Batch(Vec<(String, FindingKind)>),
    /// `alone` is the label of the victim-alone run of the same batch.
    Pair {
        victim: String,
        kind: PairKind,
        alone: String,
    },
    Red {
        nodeid: String,
    },
    Alone {
        nodeid: String,
        kind: FindingKind,
    },
}

fn base_request(label: String, order: Vec<String>) -> RunRequest {
    RunRequest {
        label,
        kind: "base-check",
        role: Role::Base,
        order,
        overlay: Vec::new(),
    }
}

fn finding_message(
    f: &verdict::Finding,
    triaged: &BTreeMap<String, triage::Triage>,
    pairs: &[Pair],
    replay: &[report::ReplayReport],
    new_skips: &[budget::NewSkip],
) -> String {
    let id = &f.subject;
    let base = match f.kind {
        FindingKind::OrderDependent => match pairs.iter().find(|p| &p.victim == id) {
            Some(p) if p.search.outcome.is_found() => format!(
                "{id} {} when {} ran before it",
                if p.kind == PairKind::Polluter {
                    "fails"
                } else {
                    "passes only"
                },
                p.culprits.join(" and ")
            ),
            Some(p) => format!(
                "{id}'s outcome follows the order; {}",
                p.search.outcome.describe()
            ),
            None => format!("{id}'s outcome follows the order"),
        },
        FindingKind::Polluter => format!(
            "{id} leaves state behind that changes another test's outcome: {}",
            pairs
                .iter()
                .filter(|p| p.culprits.contains(id))
                .map(|p| p.victim.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        FindingKind::LeaseViolation => format!(
            "{id} changed fixture groups it does not hold a lease on: {}",
            triaged
                .get(id)
                .map(|t| t
                    .signals
                    .iter()
                    .filter_map(|s| match s {
                        Signal::LeaseViolation(g) => Some(g.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        ),
        FindingKind::Redefined | FindingKind::Cosmetic | FindingKind::Additive => {
            let r = replay.iter().find(|r| &r.nodeid == id);
            let (h, b) = r
                .map(|r| (r.head.as_str(), r.base.as_str()))
                .unwrap_or(("?", "?"));
            match f.kind {
                FindingKind::Redefined => format!("{id} passes on the head's fixtures ({h}) and fails on the base's ({b}): the patch redefined the test"),
                FindingKind::Cosmetic => format!("{id} passes on both fixture versions: the fixture change is cosmetic; justify it in one line"),
                _ => format!("{id} is new and reads only new fixtures: review the fixture as new code"),
            }
        }
        FindingKind::NewSkip => match new_skips.iter().find(|s| &s.nodeid == id) {
            Some(s) => {
                let reason = s
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                match s.marker.as_str() {
                    "pytest.skip()" => format!("{id} now skips itself with pytest.skip(){reason}"),
                    m if m.starts_with(['a', 'e', 'i', 'o', 'u', 'x']) => {
                        format!("{id} gained an {m} marker{reason}")
                    }
                    m => format!("{id} gained a {m} marker{reason}"),
                }
            }
            None => format!("{id} is newly skipped"),
        },
        FindingKind::Flaky => {
            format!("{id} gives different outcomes in the same order: nondeterminism, not drift")
        }
        FindingKind::FreezeAdded => format!(
            "the patch adds or extends the freeze entry of {id}; the ledger is read from the base"
        ),
        FindingKind::LockChanged => format!("the patch changes the pin of {id} in fixtures.lock"),
        k => format!("{id}: {}", k.as_str()),
    };
    if f.introduced {
        base
    } else {
        format!("{base} (pre-existing: the base has it too)")
    }
}

/// `--check`: re-executes every seed run that came from the cache and lists each test whose
/// outcome differs from the cached one.
fn check_cached_runs(
    engine: &Engine,
    matrix: &Matrix,
    selection: &[CollectedItem],
    report: &mut AuditReport,
) -> Result<()> {
    let cached: Vec<String> = engine
        .reports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|n| n.kind == "seed-run" && matches!(n.status, fixgate_graph::Status::Cached))
        .map(|n| {
            n.label
                .trim_start_matches("seed-run(")
                .trim_end_matches(')')
                .to_string()
        })
        .collect();
    for label in cached {
        let order = matrix::order_of(&label, selection);
        engine.processes.fetch_add(1, Ordering::Relaxed);
        let fresh = engine.runner.run(
            &engine.head.snapshot,
            &Vec::new(),
            &order,
            &engine.groups,
            None,
        )?;
        for t in &fresh.tests {
            let cached = matrix.runs[&label].outcome_of(&t.nodeid);
            if cached != Some(t.outcome) {
                report.findings.push(report::Finding {
                    kind: "nondeterministic".into(),
                    tests: vec![t.nodeid.clone()],
                    message: format!(
                        "--check: {} was {} in the cached run of order {label} and {} now",
                        t.nodeid,
                        cached.map(|o| o.as_str()).unwrap_or("absent"),
                        t.outcome.as_str()
                    ),
                    repro: None,
                    introduced: false,
                    blocking: false,
                });
            }
        }
    }
    Ok(())
}
