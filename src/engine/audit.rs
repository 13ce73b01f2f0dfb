//! The audit as one graph: gates, the seed matrix, confirmation, the polluter search, coupling
//! and replay, base checks, triage, budget and the verdict, each a node of one live graph,
//! added as the results it depends on arrive.
//!
//! This module is the page: [`phases`] calls each phase in the order its inputs become known
//! and hands each the typed values of the phases before it; what they found is collected into
//! an [`AuditOutcome`], from which `report::assemble` writes the report. Each phase lives in its
//! own module, and the judgments are pure functions in `crate::audit`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fixgate_graph::{Live, Mode, RunOptions};

use crate::audit::budget::{self, Limits, Overrides, Usage};
use crate::audit::collection::Broken;
use crate::audit::edited::{coupled_tests, edited_tests};
use crate::audit::findings::{self, Facts};
use crate::audit::freeze::Date;
use crate::audit::gates::Gates;
use crate::audit::order::{self, OrderLabel};
use crate::audit::outcome::{AuditOutcome, BudgetFacts, Judgment, Reached, RunFacts, Side};
use crate::audit::outside::OutsideWrites;
use crate::audit::pair::Pair;
use crate::audit::verdict::Decision;
use crate::config::DepsMode;
use crate::context::{Ctx, SandboxSettings};
use crate::engine::digests::TreeDigests;
use crate::engine::judge::{self, Weighed};
use crate::engine::kind::NodeKind;
use crate::engine::runs::{Engine, Role};
use crate::engine::sides::Sides;
use crate::engine::steps::{Collected, Fixtures};
use crate::engine::{
    base_check, base_suite, carry, check, confirm, impact, itemize, matrix, nio, pairs, replay,
    shard, source_replay, source_tamper, steps,
};
use crate::error::{Error, Result};
use crate::pytest::events::CollectedItem;
use crate::remote_exec::client as remote_exec;
use crate::report::AuditReport;
use crate::snapshot::Snapshot;

#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) base: String,
    /// `None`: the working tree.
    pub(crate) head: Option<String>,
    /// The shuffled orders, after file order and reversed order.
    pub(crate) seeds: Vec<u64>,
    pub(crate) strict: bool,
    /// `--nio`: add the nio order (each test twice in a row); `[tool.fixgate] nio` of the base
    /// turns it on too.
    pub(crate) nio: bool,
    pub(crate) cache: bool,
    /// Re-execute the cached seed runs and compare (the graph's check mode).
    pub(crate) check: bool,
    pub(crate) deps: Option<DepsMode>,
    pub(crate) budget: Overrides,
    pub(crate) today: Date,
    pub(crate) sandbox: SandboxSettings,
    /// Only this share of the matrix, and nothing after it.
    pub(crate) shard: Option<shard::Shard>,
    /// Where the runs execute (`--remote-executor`), as the command line asks.
    pub(crate) remote_exec: remote_exec::Asked,
    /// A runner to use instead of making one: `fixgate watch` keeps one (and its warm
    /// interpreters) between audits, with a cancellation flag of each audit's own.
    pub(crate) runner: Option<Arc<crate::pytest::driver::Runner>>,
    /// The head to audit instead of the live working tree: `fixgate watch`'s frozen copy of
    /// it, which nothing writes while the audit runs (see src/watch/frozen.rs).
    pub(crate) frozen_head: Option<Arc<crate::snapshot::Snapshot>>,
    /// `--full`: every shuffled order over the whole selection, whatever the base's
    /// `[tool.fixgate] scoped` says.
    pub(crate) full: bool,
    /// `--scoped`: an impact-scoped audit (`[tool.fixgate] scoped = true` of the base asks for
    /// it too).
    pub(crate) scoped: bool,
}

/// Whether the audit is impact-scoped: `--scoped` or the base's `[tool.fixgate] scoped`, unless
/// `--full`.
fn scoped(opts: &Options, sides: &Sides) -> bool {
    !opts.full && (opts.scoped || sides.base_config.scoped)
}

/// Runs the whole audit and writes its report.
pub(crate) fn audit(ctx: &Ctx, opts: &Options) -> Result<AuditReport> {
    run(ctx, opts).map(|outcome| crate::report::assemble::assemble(&outcome))
}

/// Runs the whole audit.
pub(crate) fn run(ctx: &Ctx, opts: &Options) -> Result<AuditOutcome> {
    let started = Instant::now();
    if opts.runner.is_none() {
        ctx.prefetch_interpreter();
    }
    let sides = Sides::load(
        ctx,
        &opts.base,
        opts.head.as_deref(),
        opts.frozen_head.clone(),
    )?;
    let runner = match &opts.runner {
        Some(r) => r.clone(),
        None => Arc::new(ctx.runner(&opts.sandbox, &sides.base_config.limits)?),
    };
    let remote = remote_exec::resolve(&opts.remote_exec, &sides.base_config.remote_exec)?;
    let executor = match &remote {
        Some(settings) => Some(Arc::new(remote_exec::Executor::connect(
            settings.clone(),
            &runner,
            opts.check || !opts.cache,
        )?)),
        None => None,
    };
    // Without a remote cache of its own, the executor's ActionCache holds the node results.
    let store_remote = ctx
        .remote
        .clone()
        .or_else(|| remote.as_ref().map(|s| s.as_cache()));
    let (store, warning) = ctx.open_store(opts.cache, store_remote.as_ref());
    if let Some(w) = warning {
        ctx.warn(&w);
    }
    let run_options = RunOptions {
        // Remote actions in flight, not local cores, unless --jobs says otherwise.
        jobs: match (&executor, ctx.jobs_given) {
            (Some(_), false) => remote_exec::DEFAULT_JOBS,
            _ => ctx.jobs,
        },
        mode: if opts.check {
            Mode::Check {
                kinds: [NodeKind::SeedRun.as_str().to_string()].into(),
            }
        } else {
            Mode::Normal
        },
        scope: ctx.repo.root.display().to_string(),
    };
    let (phased, run, _) = Live::scope(
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
                processes: AtomicU32::new(0),
                warnings: Mutex::new(Vec::new()),
                remote: executor.clone(),
                sources: std::sync::OnceLock::new(),
                decoded: Default::default(),
            };
            let phased = phases(&engine, &sides, opts, started, ctx.uploads());
            (phased, engine.processes, engine.warnings)
        },
    )
    .map_err(|e| Error::Infra(format!("failed to run the audit graph: {e}")))?;
    let (phased, processes, engine_warnings) = phased;
    let mut phased = phased?;
    phased.warnings.extend(
        engine_warnings
            .into_inner()
            .unwrap_or_else(|e| e.into_inner()),
    );
    // The ledgers' problems that did not stop the audit (unknown fields), each side's once.
    for w in [&sides.base.ledger, &sides.head.ledger]
        .into_iter()
        .flat_map(|l| l.warnings())
    {
        if !phased.warnings.contains(w) {
            phased.warnings.push(w.clone());
        }
    }
    Ok(AuditOutcome {
        strict: opts.strict,
        base: side_of(&sides.base.snapshot),
        head: side_of(&sides.head.snapshot),
        seeds: std::iter::once(0)
            .chain(opts.seeds.iter().copied())
            .collect(),
        interpreter: runner.interpreter.path.display().to_string(),
        gates: phased.gates,
        reached: phased.reached,
        decision: phased.decision,
        run: RunFacts {
            pytest_processes: processes.into_inner(),
            remote: executor.as_ref().map(|exec| {
                let mut summary = exec.summary();
                // What ran here: the collections the orders come from.
                summary.local_runs = run
                    .report
                    .nodes
                    .iter()
                    .filter(|n| {
                        n.kind == NodeKind::Collect.as_str()
                            && matches!(n.status, fixgate_graph::Status::Executed { .. })
                    })
                    .map(|n| n.label.clone())
                    .collect();
                summary
            }),
            // The warm interpreters' counters are this fixgate process's: with several heads,
            // each report counts the heads before it too.
            forkserver: ctx.fork_stats.summary(),
            containment: runner.host.containment(),
            duration_seconds: started.elapsed().as_secs_f64(),
            warnings: phased.warnings,
            graph: run.report,
        },
    })
}

/// What the phases found, before the run's own facts are added.
struct Phased {
    gates: Gates,
    reached: Reached,
    decision: Decision,
    /// What the runs warned about, each once.
    warnings: Vec<String>,
}

/// The phases, in the order their inputs become known: the gates, collection, then (unless a
/// gate stopped the audit, the head did not collect, or this is one share of the matrix) every
/// phase that judges the tests.
fn phases(
    engine: &Engine,
    sides: &Sides,
    opts: &Options,
    started: Instant,
    uploads: bool,
) -> Result<Phased> {
    // Gates before any test runs.
    let lock_path = sides.lock_path.as_deref().unwrap_or(crate::lock::FILE_NAME);
    let fixtures = steps::prepare_fixtures(
        engine,
        sides.base.tree,
        sides.head.tree,
        lock_path,
        sides.base.lock.clone(),
        sides.head.lock.clone(),
    )?;
    if let Some(e) = &fixtures.lock.error {
        return Err(Error::Usage(e.clone()));
    }
    let gates = Gates {
        lock_file: sides.lock_path.clone(),
        lock: fixtures.lock.clone(),
        changed: fixtures.delta.changed.clone(),
        ..Gates::freeze(&sides.base.ledger, &sides.head.ledger, opts.today)
    };
    if gates.stop() {
        let weighed = Weighed {
            findings: Vec::new(),
            drift: gates.drift_lines(),
            expired: gates.expired_lines(),
            strict: opts.strict,
        };
        let (_, decision) = judge::verdict(engine, weighed, None, &[fixtures.lock_node])?;
        return Ok(Phased {
            gates,
            reached: Reached::Gates,
            decision,
            warnings: Vec::new(),
        });
    }

    let collections = itemize::collect(
        engine,
        fixtures.lock_node,
        scoped(opts, sides),
        &frozen(&gates),
    )?;
    let (base_collected, read) = (collections.base, collections.read);
    let head_collected = match collections.head {
        Ok(c) => c,
        Err(failed) => {
            // The base collects and the head does not: the patch broke the suite, a reject
            // with the file, line and error (exit 2 is for what cannot be judged at all).
            let broken = Broken::read(&failed.why);
            let weighed = Weighed {
                findings: vec![findings::collection_error(&broken)],
                drift: Vec::new(),
                expired: Vec::new(),
                strict: opts.strict,
            };
            let (_, decision) = judge::verdict(engine, weighed, None, &[failed.node])?;
            return Ok(Phased {
                gates,
                reached: Reached::CollectionError(broken),
                decision,
                warnings: Vec::new(),
            });
        }
    };
    // The frozen tests are deselected: the matrix runs the rest.
    let selection = unfrozen(&head_collected.collection.items, &frozen(&gates));
    if let Some(k_of_n) = opts.shard {
        let labels = order::labels(&opts.seeds);
        let share = shard::run(
            engine,
            k_of_n,
            &labels,
            &selection,
            head_collected.node,
            uploads,
            scoped(opts, sides),
        )?;
        return Ok(Phased {
            gates,
            reached: Reached::Shard(share),
            decision: Decision::pass(),
            warnings: Vec::new(),
        });
    }
    let (judgment, decision, warnings) = judged(
        engine,
        sides,
        opts,
        started,
        &fixtures,
        &gates,
        &base_collected,
        &head_collected,
        read,
        selection,
    )?;
    Ok(Phased {
        gates,
        reached: Reached::Judged(Box::new(judgment)),
        decision,
        warnings,
    })
}

/// The tests the gates freeze (deselected from every run).
fn frozen(gates: &Gates) -> HashSet<&str> {
    gates.active.iter().map(|(n, _)| n.as_str()).collect()
}

/// The items the matrix runs: every collected one but the frozen tests.
fn unfrozen(items: &[CollectedItem], frozen: &HashSet<&str>) -> Vec<CollectedItem> {
    items
        .iter()
        .filter(|i| !frozen.contains(i.nodeid.as_str()))
        .cloned()
        .collect()
}

/// The phases that judge the tests: the seed matrix over the selection (the nio order beside
/// it), the fixture and test-source replays as soon as the file-order run says what to replay,
/// confirmation, the polluter search, triage, the base checks, the findings, the budget and
/// the verdict.
#[expect(
    clippy::too_many_arguments,
    reason = "the page hands each phase what the phases before it found"
)]
fn judged(
    engine: &Engine,
    sides: &Sides,
    opts: &Options,
    started: Instant,
    fixtures: &Fixtures,
    gates: &Gates,
    base_collected: &Collected,
    head_collected: &Collected,
    read: itemize::Read,
    selection: Vec<CollectedItem>,
) -> Result<(Judgment, Decision, Vec<String>)> {
    let (base_snapshot, head_snapshot) = (&sides.base.snapshot, &sides.head.snapshot);
    let nodeids: Vec<String> = selection.iter().map(|i| i.nodeid.clone()).collect();
    let base_ids: HashSet<&str> = base_collected.ids().collect();
    let head_ids: HashSet<&str> = head_collected.ids().collect();

    // The nio order (read apart from the matrix, see `audit::nio`), then the matrix. In a scoped
    // audit the file-order and reversed runs come first, carried from the base's recorded runs
    // where the patch cannot reach (`crate::engine::carry`): what they record decides what the
    // shuffled orders run (`crate::audit::scope`).
    let scoped = scoped(opts, sides);
    let mut orders = order::labels(&opts.seeds);
    let (whole, shuffled) = match scoped {
        true => orders.split_at(2),
        false => (orders.as_slice(), &[][..]),
    };
    let (whole, shuffled) = (whole.to_vec(), shuffled.to_vec());
    let started_nio = match opts.nio || sides.base_config.nio {
        true => Some(nio::start(engine, &selection, head_collected.node)?),
        false => None,
    };
    if started_nio.is_some() {
        orders.push(OrderLabel::Twice);
    }
    let edited = edited_tests(base_snapshot, head_snapshot, &nodeids);
    let frozen = frozen(gates);
    let (started_matrix, file_run, scoped_impact) = match scoped {
        true => {
            let base_selection = unfrozen(&base_collected.collection.items, &frozen);
            let inputs = carry::Inputs {
                selection: &selection,
                collection: head_collected.node,
                base_selection: &base_selection,
                base_collection: base_collected.node,
                edited: &edited,
                base_runs: read.base_runs.as_ref(),
            };
            let mut carried = carry::whole_runs(engine, &inputs)?;
            carried.impact.head_collection = read.head_collection;
            let mut started = carried.started;
            started.add_scoped(
                engine,
                &shuffled,
                &selection,
                head_collected.node,
                &carried.impact.scope,
            )?;
            (started, carried.file, Some(carried.impact))
        }
        false => {
            let started = matrix::start(engine, &whole, &selection, head_collected.node, false)?;
            let file = started.wait(engine, OrderLabel::File)?;
            (started, file, None)
        }
    };

    // Replay starts as soon as the file-order run and the delta are known (coupling follows the
    // trace: the files in no group that the tests read count too); the base-suite replay as
    // soon as the file-order run gives the head's order, and the test-source replay reads the
    // edited tests that pass from its runs.
    let file_node = started_matrix.nodes[&OrderLabel::File];
    let delta = replay::with_traced(engine, &fixtures.delta, &file_run);
    let coupled = coupled_tests(&file_run, &delta);
    let to_replay = replay::to_replay(&delta, &coupled, &file_run, &base_ids);
    let replay_node = match to_replay.is_empty() {
        true => None,
        false => Some(replay::start(
            engine,
            base_snapshot,
            &delta,
            &to_replay,
            &[file_node, fixtures.delta_node],
        )?),
    };
    let source_tests = source_replay::candidates(
        &edited,
        &base_ids,
        &head_ids,
        &file_run,
        base_snapshot,
        head_snapshot,
    );
    let spec_plan = base_suite::plan(
        engine,
        base_snapshot,
        head_snapshot,
        &base_collected.collection,
        &head_collected.collection,
        &delta,
        &frozen,
    )?;
    let session_changed = spec_plan.as_ref().is_some_and(|p| p.session_changed());
    let spec_started = match spec_plan {
        Some(plan) => Some(base_suite::start(
            engine,
            plan,
            &file_run.order,
            &[file_node],
        )?),
        None => None,
    };
    let impact = scoped_impact.unwrap_or_else(|| impact::not_scoped(opts.full));
    let matrix = started_matrix.finish(engine, file_run, impact.scope.clone())?;
    let nondeterministic = match opts.check {
        true => check::run(engine, &matrix),
        false => Vec::new(),
    };

    // Confirmation: rerun disagreeing orders; run tests alone that are red everywhere or that
    // follow the order (alone tells a polluter's victim from a test that needs a state-setter).
    let disagreeing = matrix.disagreeing(&nodeids);
    let always_red = matrix.always_red(&nodeids);
    let confirmation = confirm::confirm(engine, &matrix, &disagreeing, &always_red)?;
    // What the head shows of the base's tests is checked on the base after the search: the
    // base's warm interpreters start now, beside the search's runs, which mostly take one core
    // at a time. Not for a test that cannot follow the order on the base: its pairs need no
    // base run (`audit::base_check::settled`).
    let sensitive_on_base =
        |id: &String| (impact.base_sensitive.as_ref()).is_none_or(|s| s.contains(id.as_str()));
    let base_warm = (disagreeing.iter().filter(|id| sensitive_on_base(id)))
        .chain(&always_red)
        .any(|id| base_ids.contains(id.as_str()))
        .then(|| engine.prewarm(Role::Base));
    let mut evidence = confirm::evidence(&matrix, &confirmation, &nodeids, &disagreeing, &edited);
    let nio_read = match &started_nio {
        Some(started) => Some(nio::read(engine, started, &nodeids)?),
        None => None,
    };
    for (id, reading) in nio_read.iter().flat_map(|n| &n.readings) {
        if let Some(e) = evidence.get_mut(id) {
            e.nio = Some(*reading);
        }
    }

    // The polluter search for every order-dependent test, after the runs that showed it; then
    // what the replays read.
    let pair_runs = pairs::search_pairs(engine, &matrix, &confirmation, &mut evidence, &nodeids)?;
    let (pairs, pair_nodes): (Vec<Pair>, Vec<_>) =
        pair_runs.into_iter().map(|p| (p.pair, p.last)).unzip();
    let replayed = match coupled.is_empty() {
        true => Vec::new(),
        false => replay::read(
            engine,
            replay_node,
            &delta,
            &coupled,
            matrix.file_run(),
            &base_ids,
        )?,
    };
    let (base_suite, source_replayed) = match spec_started {
        Some(started) => {
            let cx = base_suite::Context {
                base: base_snapshot,
                head: head_snapshot,
                head_collection: &head_collected.collection,
                head_run: matrix.file_run(),
                candidates: &source_tests,
                edited: &edited,
                delta: &delta,
            };
            let (read, sources) = base_suite::read(engine, started, &cx)?;
            (Some(read), sources)
        }
        None => (None, Vec::new()),
    };
    let altered = base_suite::hook_altered(matrix.file_run());

    // Triage, then each finding checked on the base with the same evidence.
    let mut evidence_nodes = matrix.node_ids();
    evidence_nodes.extend(&confirmation.nodes);
    evidence_nodes.extend(&pair_nodes);
    evidence_nodes.extend(nio_read.iter().flat_map(|n| &n.nodes));
    let (triage_node, triaged) = judge::triage(engine, evidence.clone(), &evidence_nodes)?;
    let outside = OutsideWrites::of(matrix.outside_writes());
    drop(base_warm);
    let mut pre_existing = base_check::run(
        engine,
        &triaged,
        &pairs,
        &matrix,
        base_check::Base {
            ids: &base_ids,
            impact: &impact,
        },
        &outside.writers(),
        &[triage_node],
    )?;
    pre_existing.extend(nio::base_check(engine, &triaged, &base_ids, triage_node)?);
    pre_existing.extend(findings::base_leaks(&triaged, &base_ids, &impact));

    // Findings, the budget and the verdict.
    let new_skips = budget::patch_skips(
        &base_collected.collection,
        &head_collected.collection,
        &evidence,
        &edited,
        &base_ids,
        |id| {
            matrix
                .file_run()
                .test(id)
                .and_then(|t| t.skip_reason.clone())
        },
    );
    let source_tamper = source_tamper::read(
        base_snapshot,
        head_snapshot,
        &base_collected.collection,
        &head_collected.collection,
    );
    let findings = findings::findings(&Facts {
        triaged: &triaged,
        pre_existing: &pre_existing,
        edited: &edited,
        outside: &outside,
        session_code_changed: conftests_differ(base_snapshot, head_snapshot),
        source_replay: &source_replayed,
        replay: &replayed,
        base_suite: base_suite.as_ref(),
        altered: &altered,
        spec_session_changed: session_changed,
        new_skips: &new_skips,
        freeze_added: &gates.added_by_patch,
        lock_changed: &gates.lock.changed_pins,
        source_tamper: &source_tamper,
    });
    let limits = Limits::merge(&opts.budget, &sides.base_config.budget);
    let usage = Usage {
        seconds: started.elapsed().as_secs_f64(),
        tests: selection.len() as u64,
        frozen: gates.active.len() as u64,
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
    let weighed = Weighed {
        findings: findings.clone(),
        drift: Vec::new(),
        expired: Vec::new(),
        strict: opts.strict,
    };
    let (_, decision) = judge::verdict(engine, weighed, Some(budget_node), &[triage_node])?;
    let red_messages: BTreeMap<String, String> = nodeids
        .iter()
        .filter_map(|id| Some((id.clone(), matrix.red_message(id)?.to_owned())))
        .collect();
    let judgment = Judgment {
        orders,
        evidence,
        triaged,
        red_messages,
        twice: nio_read.map(|n| n.twice),
        pairs,
        pre_existing,
        edited,
        base_ids: base_ids
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>(),
        outside,
        coupled,
        replay: replayed,
        source_replay: source_replayed,
        base_suite,
        altered,
        traced: delta
            .changed
            .iter()
            .filter(|c| c.group.is_empty())
            .cloned()
            .collect(),
        new_skips,
        source_tamper,
        nondeterministic,
        findings,
        budget: BudgetFacts {
            limits,
            usage,
            breaches,
            proof_runs,
        },
        today: opts.today,
        selection,
        impact,
    };
    Ok((judgment, decision, matrix.warnings()))
}

/// Whether any `conftest.py` differs between the two snapshots (added, removed or changed).
fn conftests_differ(base: &Snapshot, head: &Snapshot) -> bool {
    let conftests = |s: &Snapshot| -> Vec<(String, Option<Vec<u8>>)> {
        let git = s.open_git().ok().flatten();
        s.entries
            .iter()
            .filter(|e| e.path.file_name() == b"conftest.py")
            .map(|e| (e.path.to_string(), s.read(e, git.as_ref()).ok()))
            .collect()
    };
    conftests(base) != conftests(head)
}

fn side_of(s: &Snapshot) -> Side {
    Side {
        rev: s.rev_label(),
        commit: s.commit().map(|c| c.to_string()),
    }
}
