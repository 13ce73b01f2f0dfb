//! The audit as one graph: gates, the seed matrix, confirmation, the polluter search, coupling
//! and replay, base checks, triage, budget and the verdict, each a node of one live graph,
//! added as the results it depends on arrive. This module orders the phases; each phase lives
//! in its own module, and the judgments are pure functions in `crate::audit`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fixgate_graph::{Live, Mode, NodeId, RunOptions};

use crate::audit::budget::{self, Limits, Overrides, Usage};
use crate::audit::edited::{coupled_tests, edited_tests};
use crate::audit::freeze::{self, Date};
use crate::audit::nio::{self, Idempotence, Twice};
use crate::audit::scope::{Full, Scope};
use crate::audit::triage::{Confirm, Evidence, Signal};
use crate::audit::verdict::{self, FindingKind};
use crate::cli::SandboxArgs;
use crate::config::DepsMode;
use crate::context::Ctx;
use crate::engine::assemble::{self, side_of, Judged};
use crate::engine::digests::TreeDigests;
use crate::engine::judge::{self, Weighed};
use crate::engine::matrix::{self, Confirmation, Matrix, OrderLabel};
use crate::engine::runs::{Engine, Role};
use crate::engine::sides::Sides;
use crate::engine::{base_check, impact, pairs, replay, source_replay, steps};
use crate::error::{Error, Result};
use crate::pytest::events::{CollectedItem, Collection, Outcome};
use crate::report::{self, AuditReport};

pub struct Options {
    pub base: String,
    /// `None`: the working tree.
    pub head: Option<String>,
    /// The shuffled orders, after file order and reversed order.
    pub seeds: Vec<u64>,
    pub strict: bool,
    /// `--nio`: add the nio order (each test twice in a row); `[tool.fixgate] nio` of the base
    /// turns it on too.
    pub nio: bool,
    pub cache: bool,
    /// Re-execute the cached seed runs and compare (the graph's check mode).
    pub check: bool,
    pub deps: Option<DepsMode>,
    pub budget: Overrides,
    pub today: Date,
    pub sandbox: SandboxArgs,
    /// Only this share of the matrix, and nothing after it.
    pub shard: Option<crate::cli::Shard>,
    /// `--full`: every shuffled order over the whole selection.
    pub full: bool,
}

/// Runs the whole audit.
pub fn audit(ctx: &Ctx, opts: &Options) -> Result<AuditReport> {
    let started = Instant::now();
    ctx.prefetch_interpreter();
    let sides = Sides::load(ctx, &opts.base, opts.head.as_deref())?;
    let runner = Arc::new(ctx.runner(&opts.sandbox)?);
    let (store, warning) = crate::engine::store::open(&ctx.cache_dir, opts.cache);
    if let Some(w) = warning {
        ctx.warn(&w);
    }
    let run_options = RunOptions {
        jobs: ctx.jobs,
        mode: if opts.check {
            Mode::Check {
                kinds: ["seed-run".to_string()].into(),
            }
        } else {
            Mode::Normal
        },
        scope: ctx.repo.root.display().to_string(),
    };
    let mut report = AuditReport {
        schema: report::SCHEMA,
        strict: opts.strict,
        base: side_of(&sides.base.snapshot),
        head: side_of(&sides.head.snapshot),
        seeds: std::iter::once(0)
            .chain(opts.seeds.iter().copied())
            .collect(),
        interpreter: Some(runner.interpreter.path.display().to_string()),
        ..AuditReport::default()
    };
    let processes = AtomicU32::new(0);
    let warnings = Mutex::new(Vec::new());
    let (judged, run, _) = Live::scope(
        store.as_ref(),
        &run_options,
        env!("CARGO_PKG_VERSION"),
        |live| {
            let engine = Engine {
                live,
                store: store.as_ref(),
                base_tree: sides.base.tree,
                runner: runner.clone(),
                groups: sides.config.groups.clone(),
                deps_mode: opts.deps.unwrap_or(sides.base_config.deps),
                base: Arc::new(TreeDigests::new(sides.base.snapshot.clone())),
                head: Arc::new(TreeDigests::new(sides.head.snapshot.clone())),
                progress: (!ctx.quiet).then(indicatif::MultiProgress::new),
                processes,
                warnings,
            };
            let judged = phases(&engine, &sides, opts, started, &mut report);
            (judged, engine.processes, engine.warnings)
        },
    )
    .map_err(|e| Error::Infra(format!("failed to run the audit graph: {e}")))?;
    let (judged, processes, warnings) = judged;
    let decision = judged?;
    report.verdict = decision.verdict.as_str().into();
    report.exit_code = decision.verdict.exit_code();
    report.reasons = decision.reasons;
    assemble::graph(&mut report, &run);
    report.pytest_processes = processes.into_inner();
    report
        .warnings
        .extend(warnings.into_inner().unwrap_or_else(|e| e.into_inner()));
    report
        .warnings
        .extend(run.report.warnings.iter().map(|w| format!("cache: {w}")));
    // The warm interpreters' counters are this fixgate process's: with several heads, each
    // report counts the heads before it too.
    if let Some(note) = &mut report.shard {
        note.pytest_processes = report.pytest_processes;
    }
    report.forkserver = crate::pytest::forkserver::summary();
    report.containment = crate::contain::current().as_str().into();
    report.duration_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The phases, in the order their inputs become known. Fills `report` and returns the verdict.
fn phases(
    engine: &Engine,
    sides: &Sides,
    opts: &Options,
    started: Instant,
    report: &mut AuditReport,
) -> Result<verdict::Decision> {
    // Gates before any test runs.
    let fixtures = steps::prepare_fixtures(
        engine,
        sides.base.tree,
        sides.head.tree,
        sides.lock_path.as_deref().unwrap_or(crate::lock::FILE_NAME),
        sides.base.lock.clone(),
        sides.head.lock.clone(),
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
    let (base_ledger, head_ledger) = (&sides.base.ledger, &sides.head.ledger);
    let active = base_ledger.active(opts.today);
    let expired = base_ledger.expired(opts.today);
    report.freeze.active = active.iter().map(|(n, _)| n.clone()).collect();
    report.freeze.expired = expired.iter().map(|(n, _)| n.clone()).collect();
    report.freeze.added_by_patch = freeze::added_by(base_ledger, head_ledger);
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
        let weighed = Weighed {
            findings: Vec::new(),
            drift,
            expired: expired_text,
            strict: opts.strict,
        };
        let (_, decision) = judge::verdict(engine, weighed, None, &[fixtures.lock_node])?;
        return Ok(decision);
    }

    // Collection, then the seed matrix over the selection (frozen tests deselected). Replay
    // starts as soon as the file-order run and the delta are known.
    let (base_collected, head_collected) = steps::collect_both(engine, fixtures.lock_node)?;
    let head_collected = match head_collected {
        Ok(c) => c,
        Err(why) => return collection_error(engine, report, opts, &why),
    };
    let (base_items, head_items) = (
        &base_collected.collection.items,
        &head_collected.collection.items,
    );
    let frozen: HashSet<&str> = active.iter().map(|(n, _)| n.as_str()).collect();
    let selection: Vec<CollectedItem> = head_items
        .iter()
        .filter(|i| !frozen.contains(i.nodeid.as_str()))
        .cloned()
        .collect();
    let nodeids: Vec<String> = selection.iter().map(|i| i.nodeid.clone()).collect();
    let base_ids: HashSet<&str> = base_items.iter().map(|i| i.nodeid.as_str()).collect();
    let labels = matrix::labels(&opts.seeds);
    report.orders = labels.iter().map(|l| l.to_string()).collect();
    let nio = opts.nio || sides.base_config.nio;
    if let Some(shard) = opts.shard {
        return run_shard(
            engine,
            report,
            shard,
            &labels,
            &selection,
            head_collected.node,
        );
    }
    // The file-order and reversed runs first: what they record decides what the shuffled
    // orders run (`crate::audit::scope`).
    let mut started_matrix = matrix::start(
        engine,
        &labels[..2],
        &selection,
        head_collected.node,
        &Scope::Full(Full::Asked),
    )?;
    // The nio order runs beside the matrix, read apart from it (see `audit::nio`).
    let started_nio = match nio {
        true => {
            report.orders.push(OrderLabel::Twice.to_string());
            let twice = [OrderLabel::Twice];
            Some(matrix::start(
                engine,
                &twice,
                &selection,
                head_collected.node,
                &Scope::Full(Full::Asked),
            )?)
        }
        false => None,
    };
    let file_run = started_matrix.wait(engine, OrderLabel::File)?;
    let coupled = coupled_tests(&file_run, &fixtures.delta);
    report.fixtures.coupled = coupled.clone();
    let replay_node = match coupled.is_empty() {
        true => None,
        false => Some(replay::start(
            engine,
            &sides.base.snapshot,
            &fixtures.delta,
            &coupled,
            &[started_matrix.nodes[&OrderLabel::File], fixtures.delta_node],
        )?),
    };
    // Test-source replay starts as soon as the file-order run says which edited tests pass.
    let edited = edited_tests(&sides.base.snapshot, &sides.head.snapshot, &nodeids);
    let head_ids: HashSet<&str> = head_items.iter().map(|i| i.nodeid.as_str()).collect();
    let source_tests = source_replay::candidates(
        &edited,
        &base_ids,
        &head_ids,
        &file_run,
        &sides.base.snapshot,
        &sides.head.snapshot,
    );
    let source_node = match source_tests.is_empty() {
        true => None,
        false => Some(source_replay::start(
            engine,
            &sides.base.snapshot,
            &sides.head.snapshot,
            &source_tests,
            &file_run.order,
            &base_ids,
            &[started_matrix.nodes[&OrderLabel::File]],
        )?),
    };
    let reversed_run = started_matrix.wait(engine, OrderLabel::Reversed)?;
    let footprint = impact::footprint(engine);
    let scope = impact::scope(
        engine,
        opts.full,
        &footprint,
        &file_run,
        &reversed_run,
        &edited,
    );
    drop(reversed_run);
    started_matrix.add(
        engine,
        &labels[2..],
        &selection,
        head_collected.node,
        &scope,
    )?;
    let matrix = started_matrix.finish(engine, file_run)?;
    report.scope = Some(impact::section(&scope, &matrix, selection.len()));
    let file_run = matrix.file_run();
    report.warnings.extend(matrix.warnings());
    if opts.check {
        check_findings(engine, &matrix, report);
    }

    // Confirmation: rerun disagreeing orders; run tests alone that are red everywhere or that
    // follow the order (alone tells a polluter's victim from a test that needs a state-setter).
    let disagreeing = matrix.disagreeing(&nodeids);
    let always_red = matrix.always_red(&nodeids);
    let confirmation = matrix::confirm(engine, &matrix, &disagreeing, &always_red)?;
    let mut evidence = gather(&matrix, &confirmation, &nodeids, &disagreeing, &edited);
    let nio_read = match &started_nio {
        Some(started) => Some(read_nio(engine, started, &nodeids)?),
        None => None,
    };
    for (id, reading) in nio_read.iter().flat_map(|n| &n.readings) {
        if let Some(e) = evidence.get_mut(id) {
            e.nio = Some(*reading);
        }
    }

    // The polluter search for every order-dependent test, after the runs that showed it.
    let pairs = pairs::search_pairs(engine, &matrix, &confirmation, &mut evidence, &nodeids)?;
    if let Some(node) = replay_node {
        report.fixtures.replay =
            replay::read(engine, node, &fixtures.delta, &coupled, file_run, &base_ids)?;
    }
    if let Some(node) = source_node {
        report.source_replay = source_replay::read(
            engine,
            node,
            &source_tests,
            file_run,
            &sides.base.snapshot,
            &sides.head.snapshot,
        )?;
    }

    // Triage, then each finding checked on the base with the same evidence.
    let mut evidence_nodes = matrix.node_ids();
    evidence_nodes.extend(&confirmation.nodes);
    evidence_nodes.extend(pairs.iter().map(|p| p.last));
    evidence_nodes.extend(nio_read.iter().flat_map(|n| &n.nodes));
    let (triage_node, triaged) = judge::triage(engine, evidence.clone(), &evidence_nodes)?;
    let outside = outside_writes(&matrix);
    let writers: Vec<String> = outside.keys().flatten().cloned().collect();
    let mut pre_existing = base_check::run(
        engine,
        &triaged,
        &pairs,
        &matrix,
        &base_ids,
        &writers,
        &[triage_node],
    )?;
    pre_existing.extend(nio_base_check(engine, &triaged, &base_ids, triage_node)?);

    // Findings, the budget and the verdict.
    let mut findings: Vec<verdict::Finding> = Vec::new();
    for (id, t) in &triaged {
        for kind in t.finding_kinds() {
            findings.push(verdict::Finding {
                kind,
                subject: id.clone(),
                introduced: !pre_existing.contains(&(kind, id.clone())),
                edited_by_patch: edited.contains(id),
            });
        }
    }
    // Writes outside the sandbox: a test's is the patch's unless the base's test does it too;
    // one made outside any test (a conftest at import, a session fixture) is the patch's when
    // it changed a conftest.py.
    let session_code_changed = conftests_differ(&sides.base.snapshot, &sides.head.snapshot);
    for nodeid in outside.keys() {
        let (subject, introduced) = match nodeid {
            Some(id) => (
                id.clone(),
                !pre_existing.contains(&(FindingKind::OutsideWrite, id.clone())),
            ),
            None => (SESSION.to_string(), session_code_changed),
        };
        findings.push(verdict::Finding {
            kind: FindingKind::OutsideWrite,
            edited_by_patch: edited.contains(&subject),
            subject,
            introduced,
        });
    }
    for r in &report.source_replay {
        let kind = match r.reading.as_str() {
            "redefined-test" => FindingKind::RedefinedTest,
            "test-refactor" => FindingKind::TestRefactor,
            _ => continue,
        };
        findings.push(verdict::Finding {
            kind,
            subject: r.nodeid.clone(),
            introduced: true,
            edited_by_patch: true,
        });
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
    let new_skips = new_skips(
        &base_collected.collection,
        &head_collected.collection,
        &evidence,
        &edited,
        &base_ids,
        &matrix,
    );
    let patch_findings = new_skips
        .iter()
        .map(|s| {
            (
                FindingKind::NewSkip,
                s.nodeid.clone(),
                edited.contains(&s.nodeid),
            )
        })
        .chain(
            report
                .freeze
                .added_by_patch
                .iter()
                .map(|n| (FindingKind::FreezeAdded, n.clone(), false)),
        )
        .chain(
            fixtures
                .lock
                .changed_pins
                .iter()
                .map(|p| (FindingKind::LockChanged, p.clone(), false)),
        );
    for (kind, subject, edited_by_patch) in patch_findings {
        findings.push(verdict::Finding {
            kind,
            subject,
            introduced: true,
            edited_by_patch,
        });
    }

    let limits = Limits::merge(&opts.budget, &sides.base_config.budget);
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
    let (budget_node, breaches) =
        judge::budget(engine, limits.clone(), usage.clone(), &[triage_node])?;
    let proof_runs = confirmation
        .reruns
        .values()
        .map(|r| r.len() as u64)
        .sum::<u64>()
        + pairs.iter().map(|p| u64::from(p.verify_runs)).sum::<u64>()
        + nio_read.as_ref().map_or(0, |n| n.reruns);
    report.budget = assemble::budget_section(&limits, &usage, &breaches, proof_runs);
    let weighed = Weighed {
        findings: findings.clone(),
        drift: Vec::new(),
        expired: Vec::new(),
        strict: opts.strict,
    };
    let (_, decision) = judge::verdict(engine, weighed, Some(budget_node), &[triage_node])?;
    assemble::fill(
        report,
        &Judged {
            findings: &findings,
            decision: &decision,
            triaged: &triaged,
            evidence: &evidence,
            pairs: &pairs,
            pre_existing: &pre_existing,
            new_skips: &new_skips,
            edited: &edited,
            base_ids: &base_ids,
            matrix: &matrix,
            selection: &selection,
            today: opts.today,
            outside: &outside,
            nio: nio_read.as_ref().map(|n| &n.twice),
        },
    );
    Ok(decision)
}

/// `--shard K/N`: the orders whose place in the matrix is K-1 modulo N, run (or found) and
/// nothing else. Every share computes the same labels and orders from the same collection, so
/// the shares' runs have exactly the keys the final audit's will.
fn run_shard(
    engine: &Engine,
    report: &mut AuditReport,
    shard: crate::cli::Shard,
    labels: &[OrderLabel],
    selection: &[CollectedItem],
    collection: NodeId,
) -> Result<verdict::Decision> {
    let mine: Vec<OrderLabel> = labels
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as u32 % shard.n == shard.k - 1)
        .map(|(_, l)| *l)
        .collect();
    // A share cannot see the file-order run another share makes: its orders run in full.
    let started = matrix::start(
        engine,
        &mine,
        selection,
        collection,
        &Scope::Full(Full::Sharded),
    )?;
    let nodes: Vec<NodeId> = started.nodes.values().copied().collect();
    started.settle(engine)?;
    let executed = nodes
        .iter()
        .filter(|n| {
            engine
                .live
                .report(**n)
                .is_some_and(|r| matches!(r.status, fixgate_graph::Status::Executed { .. }))
        })
        .count();
    report.shard = Some(report::ShardNote {
        schema: report::SCHEMA,
        shard: format!("{}/{}", shard.k, shard.n),
        orders: mine.iter().map(|l| l.to_string()).collect(),
        executed,
        cached: nodes.len() - executed,
        pytest_processes: 0,
        uploaded: crate::engine::store::uploads(),
    });
    Ok(verdict::Decision {
        verdict: verdict::Verdict::Pass,
        reasons: Vec::new(),
        dispositions: Vec::new(),
    })
}

/// The base collects and the head does not: the patch broke the suite, a reject with the file,
/// line and error (exit 2 is for what cannot be judged at all).
fn collection_error(
    engine: &Engine,
    report: &mut AuditReport,
    opts: &Options,
    why: &str,
) -> Result<verdict::Decision> {
    let broken = crate::audit::collection::Broken::read(why);
    let subject = broken
        .file
        .clone()
        .unwrap_or_else(|| "the head's test suite".to_string());
    let at = match (&broken.file, broken.line) {
        (Some(f), Some(l)) => format!("{f}:{l}: "),
        (Some(f), None) => format!("{f}: "),
        _ => String::new(),
    };
    let finding = verdict::Finding {
        kind: FindingKind::CollectionError,
        subject: subject.clone(),
        introduced: true,
        edited_by_patch: false,
    };
    let weighed = Weighed {
        findings: vec![finding],
        drift: Vec::new(),
        expired: Vec::new(),
        strict: opts.strict,
    };
    let after: Vec<NodeId> = engine.live.find("collect(head)").into_iter().collect();
    let (_, decision) = judge::verdict(engine, weighed, None, &after)?;
    report.findings.push(report::Finding {
        kind: FindingKind::CollectionError.as_str().into(),
        tests: vec![subject],
        message: format!(
            "the head's suite does not collect while the base's does: {at}{}",
            broken.error
        ),
        repro: Some("python -m pytest --collect-only -q".into()),
        introduced: true,
        blocking: decision.verdict == verdict::Verdict::Reject,
    });
    Ok(decision)
}

/// The subject of what was done outside any test: collection, conftest imports, session fixtures.
pub(crate) const SESSION: &str = "(collection and session fixtures)";

/// What each test (`None`: outside any test) did outside its sandbox, over the matrix.
fn outside_writes(matrix: &Matrix) -> BTreeMap<Option<String>, BTreeSet<String>> {
    let mut out: BTreeMap<Option<String>, BTreeSet<String>> = BTreeMap::new();
    for w in matrix.outside_writes() {
        out.entry(w.nodeid.clone())
            .or_default()
            .insert(format!("{} {}", w.op, w.path));
    }
    out
}

/// Whether any `conftest.py` differs between the two snapshots (added, removed or changed).
fn conftests_differ(base: &crate::snapshot::Snapshot, head: &crate::snapshot::Snapshot) -> bool {
    let conftests = |s: &crate::snapshot::Snapshot| -> Vec<(String, Option<Vec<u8>>)> {
        let git = s.open_git().ok().flatten();
        s.entries
            .iter()
            .filter(|e| e.path.file_name() == b"conftest.py")
            .map(|e| (e.path.to_string(), s.read(e, git.as_ref()).ok()))
            .collect()
    };
    conftests(base) != conftests(head)
}

/// Every test's evidence from the matrix and the confirmation runs.
fn gather(
    matrix: &Matrix,
    confirmation: &Confirmation,
    nodeids: &[String],
    disagreeing: &[String],
    edited: &BTreeSet<String>,
) -> BTreeMap<String, Evidence> {
    let disagreeing: HashSet<&str> = disagreeing.iter().map(String::as_str).collect();
    let mut evidence = BTreeMap::new();
    for id in nodeids {
        let outcomes = matrix
            .outcomes(id)
            .into_iter()
            .map(|(l, o)| (l.to_string(), o))
            .collect();
        let confirm = disagreeing.contains(id.as_str()).then(|| {
            let reruns =
                |l: Option<OrderLabel>| l.map(|l| confirmation.outcomes(l, id)).unwrap_or_default();
            Confirm {
                failing: reruns(matrix.first(id, false)),
                passing: reruns(matrix.first(id, true)),
            }
        });
        evidence.insert(
            id.clone(),
            Evidence {
                outcomes,
                confirm,
                alone: confirmation.alone.get(id).copied(),
                dirty_groups: matrix.violations(id).into_iter().collect(),
                polluter_in_pair: false,
                state_setter_in_pair: false,
                edited_by_patch: edited.contains(id),
                reruns: matrix.reruns(id),
                unexplained: false,
                nio: None,
                flaky_too: false,
                leaks: matrix.state(id).into_iter().collect(),
            },
        );
    }
    evidence
}

/// What the nio order and its confirmation runs showed.
struct NioRead {
    /// Every test's two runs in the nio order, for the report.
    twice: BTreeMap<String, Twice>,
    /// Each test that passed and then failed in the nio order, read.
    readings: BTreeMap<String, Idempotence>,
    /// The nio run's node and its confirmation runs' nodes.
    nodes: Vec<NodeId>,
    /// How many confirmation runs were made.
    reruns: u64,
}

/// Waits for the nio run; each test that passed and then failed there runs twice in a row by
/// itself, up to [`PROOF_RERUNS`](crate::audit::triage::PROOF_RERUNS) times, stopping at the
/// first run that does not show it.
fn read_nio(engine: &Engine, started: &matrix::Started, nodeids: &[String]) -> Result<NioRead> {
    let run = started.wait(engine, OrderLabel::Twice)?;
    let node = started.nodes[&OrderLabel::Twice];
    engine.live.release(node);
    let twice: BTreeMap<String, Twice> = nodeids
        .iter()
        .filter_map(|id| Some((id.clone(), matrix::twice_of(&run, id)?)))
        .collect();
    let suspects: Vec<(String, Twice)> = twice
        .iter()
        .filter(|(_, t)| t.breaks_itself())
        .map(|(id, t)| (id.clone(), *t))
        .collect();
    let ids: Vec<String> = suspects.iter().map(|(id, _)| id.clone()).collect();
    let matrix::TwiceRuns {
        runs: reruns,
        mut nodes,
    } = matrix::run_twice(
        engine,
        Role::Head,
        "nio-run",
        &ids,
        nio::head_settled,
        &[node],
    )?;
    let readings = suspects
        .iter()
        .filter_map(|(id, t)| {
            let r = reruns.get(id).map(Vec::as_slice).unwrap_or_default();
            Some((id.clone(), nio::read(*t, r)?))
        })
        .collect();
    let count = nodes.len() as u64;
    nodes.push(node);
    Ok(NioRead {
        twice,
        readings,
        nodes,
        reruns: count,
    })
}

/// The base's runs of each non-idempotent test twice in a row: a finding the base shows on any
/// of up to [`PROOF_RERUNS`](crate::audit::triage::PROOF_RERUNS) runs is pre-existing.
fn nio_base_check(
    engine: &Engine,
    triaged: &BTreeMap<String, crate::audit::triage::Triage>,
    base_ids: &HashSet<&str>,
    triage_node: NodeId,
) -> Result<Vec<(FindingKind, String)>> {
    let ids: Vec<String> = triaged
        .iter()
        .filter(|(id, t)| t.has(&Signal::NonIdempotent) && base_ids.contains(id.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let runs = matrix::run_twice(
        engine,
        Role::Base,
        "base-check",
        &ids,
        nio::base_settled,
        &[triage_node],
    )?;
    Ok(runs
        .runs
        .into_iter()
        .filter(|(_, r)| nio::base_shows(r))
        .map(|(id, _)| (FindingKind::NonIdempotent, id))
        .collect())
}

/// New skip markers, and skips inside the body of a test the patch edited.
fn new_skips(
    base: &Collection,
    head: &Collection,
    evidence: &BTreeMap<String, Evidence>,
    edited: &BTreeSet<String>,
    base_ids: &HashSet<&str>,
    matrix: &Matrix,
) -> Vec<budget::NewSkip> {
    let with_skipped = |c: &Collection| {
        c.items
            .iter()
            .chain(&c.skipped_collectors)
            .cloned()
            .collect::<Vec<_>>()
    };
    let mut new_skips = budget::new_skips(&with_skipped(base), &with_skipped(head));
    // A skip inside the test body (`pytest.skip(...)`) is no marker: a test the base had, edited
    // by the patch and skipped in every order, counts too.
    for (id, e) in evidence {
        let skipped =
            !e.outcomes.is_empty() && e.outcomes.iter().all(|(_, o)| *o == Outcome::Skipped);
        let counted = new_skips.iter().any(|s| &s.nodeid == id);
        if skipped && edited.contains(id) && base_ids.contains(id.as_str()) && !counted {
            let reason = matrix
                .file_run()
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
    new_skips
}

/// `--check`: the seed runs that came from the cache ran again (the graph's check mode); every
/// test whose outcome differs from the cached one is a finding.
fn check_findings(engine: &Engine, matrix: &Matrix, report: &mut AuditReport) {
    for (label, &node) in &matrix.nodes {
        let Some(fresh) = engine.live.fresh_output(node) else {
            continue;
        };
        let Ok(fresh) = crate::engine::runs::decode_run(&fresh) else {
            continue;
        };
        engine
            .processes
            .fetch_add(fresh.processes, Ordering::Relaxed);
        for t in &fresh.tests {
            let cached = matrix.outcome(*label, &t.nodeid);
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
}
