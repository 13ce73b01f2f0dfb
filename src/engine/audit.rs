//! The audit as one graph: gates, the seed matrix, confirmation, the polluter search, coupling
//! and replay, base checks, triage, budget and the verdict, each a node of one live graph,
//! added as the results it depends on arrive.
//!
//! This module is the page, on two sides: [`phases`] calls the gates, the collection and (unless
//! they stop the audit) [`judge`], which calls each phase that judges the tests, in the order its
//! inputs become known, each handed the typed values of the phases before it. What they found is
//! an [`AuditOutcome`] (its [`Judgment`] made of the phases' own values), from which
//! `report::assemble` writes the report. Each phase lives in its own module, every node is a
//! step (`engine::step`), and the judgments are pure functions in `crate::audit`.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fixgate_graph::{Live, Mode, NodeId, RunOptions};

use crate::audit::budget::{Limits, Overrides};
use crate::audit::collection::Broken;
use crate::audit::findings::{self, Facts};
use crate::audit::freeze::Date;
use crate::audit::gates::Gates;
use crate::audit::order::{self, OrderLabel};
use crate::audit::outcome::{AuditOutcome, Judgment, Ran, Reached, Tested};
use crate::audit::outside::OutsideWrites;
use crate::audit::pair::Pair;
use crate::audit::verdict::{Decision, Weighed};
use crate::config::DepsMode;
use crate::context::{Ctx, SandboxSettings};
use crate::engine::collect::unfrozen;
use crate::engine::culprits::Memory;
use crate::engine::digests::TreeDigests;
use crate::engine::exec::Local;
use crate::engine::judging::Judging;
use crate::engine::kind::NodeKind;
use crate::engine::pairs::Searching;
use crate::engine::scope::Scoping;
use crate::engine::sides::{revision, Sides};
use crate::engine::step::Engine;
use crate::engine::step::Role;
use crate::engine::{
    base_check, base_suite, budget, carry, check, confirm, coupling, edit_replay, edited, gates,
    itemize, matrix, nio, pairs, replay, shard, triage, verdict,
};
use crate::error::{Error, Result};
use crate::remote_exec::client as remote_exec;
use crate::report::assemble::RunFacts;
use crate::report::AuditReport;

#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) base: String,
    /// `None`: the working tree.
    pub(crate) head: Option<String>,
    /// The shuffled orders, after file order and reversed order.
    pub(crate) seeds: Vec<u64>,
    pub(crate) strict: bool,
    /// `--strict-source`: the source-side findings make the verdict unverified
    /// (`[tool.fixgate] source-checks = "block"` of the base asks for it too).
    pub(crate) strict_source: bool,
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
    run(ctx, opts).map(|(outcome, facts)| crate::report::assemble::assemble(&outcome, &facts))
}

/// Runs the whole audit: what it found, and what running it took.
pub(crate) fn run(ctx: &Ctx, opts: &Options) -> Result<(AuditOutcome, RunFacts)> {
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
    let memory = Memory {
        store: store.as_ref(),
        base_tree: sides.base.tree,
    };
    let (phased, run, _) = Live::scope(
        store.as_ref(),
        &run_options,
        env!("CARGO_PKG_VERSION"),
        |live| {
            let engine = Engine {
                live,
                pytest: Arc::new(Local::new(runner.clone(), executor.clone())),
                groups: sides.config.groups.clone(),
                deps_mode: opts.deps.unwrap_or(sides.base_config.deps),
                base: Arc::new(TreeDigests::new(sides.base.snapshot.clone())),
                head: Arc::new(TreeDigests::new(sides.head.snapshot.clone())),
                progress: (!ctx.quiet).then(indicatif::MultiProgress::new),
                processes: AtomicU32::new(0),
                warnings: Mutex::new(Vec::new()),
            };
            let asked = Asked {
                sides: &sides,
                opts,
                started,
                uploads: ctx.uploads(),
                memory,
            };
            let phased = phases(&engine, &asked);
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
    let outcome = AuditOutcome {
        strict: opts.strict,
        base: revision(&sides.base.snapshot),
        head: revision(&sides.head.snapshot),
        seeds: std::iter::once(0)
            .chain(opts.seeds.iter().copied())
            .collect(),
        interpreter: runner.interpreter.path.display().to_string(),
        gates: phased.gates,
        reached: phased.reached,
        decision: phased.decision,
    };
    let facts = RunFacts {
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
    };
    Ok((outcome, facts))
}

/// What the audit was asked, and what it keeps across its phases.
struct Asked<'s> {
    sides: &'s Sides,
    opts: &'s Options,
    started: Instant,
    /// Whether results go to the remote cache.
    uploads: bool,
    /// The culprit sets remembered for the base's victims.
    memory: Memory<'s>,
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
fn phases(engine: &Engine, asked: &Asked) -> Result<Phased> {
    let (sides, opts) = (asked.sides, asked.opts);
    // Gates before any test runs.
    let gated = gates::check(engine, sides, opts.today)?;
    let stopped = |reached, decision| Phased {
        gates: gated.gates.clone(),
        reached,
        decision,
        warnings: Vec::new(),
    };
    if gated.gates.stop() {
        let weighed = Weighed {
            drift: gated.gates.drifted(),
            expired: gated.gates.expired_entries(),
            strict: opts.strict,
            ..Weighed::default()
        };
        let decision = verdict::decide(engine, weighed, None, &[gated.nodes.lock])?;
        return Ok(stopped(Reached::Gates, decision));
    }

    let frozen = gated.gates.frozen();
    let scoping = Scoping::default();
    let scoped = scoped(opts, sides);
    let collections = itemize::collect(engine, gated.nodes, scoped, &frozen, &scoping)?;
    let head = match &collections.head {
        Ok(c) => c,
        Err(failed) => {
            // The base collects and the head does not: the patch broke the suite, a reject
            // with the file, line and error (exit 2 is for what cannot be judged at all).
            let broken = Broken::read(&failed.why);
            let weighed = Weighed {
                findings: vec![findings::collection_error(&broken)],
                strict: opts.strict,
                ..Weighed::default()
            };
            let decision = verdict::decide(engine, weighed, None, &[failed.node])?;
            return Ok(stopped(Reached::CollectionError(broken), decision));
        }
    };
    // The frozen tests are deselected: the matrix runs the rest.
    let selection = unfrozen(&head.collection.items, &frozen);
    if let Some(k_of_n) = opts.shard {
        let labels = order::labels(&opts.seeds);
        let share = shard::run(
            engine,
            k_of_n,
            &labels,
            &selection,
            head.node,
            asked.uploads,
            scoped,
        )?;
        return Ok(stopped(Reached::Shard(share), Decision::pass()));
    }
    // The nio order (read apart from the matrix, see `audit::nio`) beside the matrix, and the
    // tests the patch edited.
    let nio = nio::begin(
        engine,
        opts.nio || sides.base_config.nio,
        &selection,
        head.node,
    )?;
    let nodeids: Vec<String> = selection.iter().map(|i| i.nodeid.clone()).collect();
    let edited = edited::edited_tests(engine, gated.nodes, Role::Head, nodeids.clone())?;
    let j = Judging {
        gated: &gated,
        base: &collections.base,
        head,
        selection,
        nodeids,
        base_ids: collections.base.ids().collect(),
        head_ids: head.ids().collect(),
        frozen: &frozen,
        edited,
        scoping: &scoping,
    };
    let (judgment, decision, warnings) = judge(engine, asked, j, collections.read, nio)?;
    Ok(Phased {
        gates: gated.gates,
        reached: Reached::Judged(Box::new(judgment)),
        decision,
        warnings,
    })
}

/// The phases that judge the tests: the seed matrix over the selection (`nio`: the nio order
/// beside it), the fixture and base-suite replays as soon as the file-order run says what to
/// replay, confirmation, the polluter search, triage, the base checks, the findings, the budget
/// and the verdict. `read`: what the collection read for the head's collection.
fn judge(
    engine: &Engine,
    asked: &Asked,
    j: Judging,
    read: itemize::Read,
    nio: Option<matrix::Started>,
) -> Result<(Judgment, Decision, Vec<String>)> {
    let (sides, opts) = (asked.sides, asked.opts);
    // The orders: in a scoped audit the file-order and reversed runs first, carried from the
    // base's recorded runs where the patch cannot reach (`crate::engine::carry`), what they
    // record deciding what the shuffled orders run (`crate::audit::scope`).
    let labels = order::labels(&opts.seeds);
    let (base_runs, scoped) = (read.base_runs.as_ref(), scoped(opts, sides));
    let whole = carry::orders(engine, &j, base_runs, &labels, scoped, opts.full)?;

    // The replays start as soon as the file-order run and the delta are known: the fixture
    // replay of the tests coupled to the delta, the base-suite replay in the head's file order
    // (the test-source replay reads the edited tests that pass from its runs).
    let file_node = whole.started.nodes[&OrderLabel::File];
    let coupled = coupling::couple(engine, &j.gated.delta, &whole.file);
    let replay_node = replay::begin(engine, &j, &coupled, &whole.file, file_node)?;
    let spec = base_suite::begin(engine, &j, &coupled.delta, &whole.file, file_node)?;
    let impact = whole.impact;
    let matrix = (whole.started).finish(engine, whole.file, impact.scope.clone())?;
    let nondeterministic = match opts.check {
        true => check::run(engine, &matrix),
        false => Vec::new(),
    };

    // Confirmation: rerun disagreeing orders; run tests alone that are red everywhere or that
    // follow the order (alone tells a polluter's victim from a test that needs a state-setter).
    // What the head shows of the base's tests is checked on the base after the search: the
    // base's warm interpreters start now.
    let mut confirmed = confirm::phase(engine, &matrix, &j)?;
    let on_base = base_check::Base::new(&j.base_ids, &impact);
    let base_warm = base_check::prewarm(engine, &confirmed, on_base);
    let nio_read = nio::read_into(engine, nio.as_ref(), &j.nodeids, &mut confirmed.evidence)?;

    // The polluter search for every order-dependent test, after the runs that showed it; then
    // what the replays read.
    let confirmation = &confirmed.confirmation;
    let searching = Searching::new(engine, &matrix, confirmation, asked.memory);
    let pair_runs = pairs::search_pairs(&searching, &mut confirmed.evidence, &j.nodeids)?;
    let (pairs, pair_nodes): (Vec<Pair>, Vec<NodeId>) =
        pair_runs.into_iter().map(|p| (p.pair, p.last)).unzip();
    let fixtures = replay::finish(
        engine,
        replay_node,
        &coupled,
        matrix.file_run(),
        &j.base_ids,
    )?;
    let spec = base_suite::finish(engine, spec, &j, &coupled.delta, matrix.file_run())?;

    // Triage, then each finding checked on the base with the same evidence.
    let mut evidence_nodes = matrix.node_ids();
    evidence_nodes.extend(confirmation.nodes.iter().chain(&pair_nodes));
    evidence_nodes.extend(nio_read.iter().flat_map(|n| &n.nodes));
    let evidence = confirmed.evidence.clone();
    let (triage_node, triaged) = triage::triage(engine, evidence, &evidence_nodes)?;
    let outside = OutsideWrites::of(matrix.outside_writes());
    drop(base_warm);
    let writers = outside.writers();
    let checks = base_check::Checks::new(&triaged, &pairs, &matrix, &writers, triage_node);
    let pre_existing = base_check::pre_existing(engine, &checks, on_base)?;
    // The edited tests whose order-dependence the base has too: their base version in the
    // orders where the head's failed says whether the edit hid anything.
    let edit_replay =
        edit_replay::run(engine, &matrix, &triaged, &pre_existing, &j, &[triage_node])?;

    // Findings, the budget and the verdict.
    let patch = edited::patch(engine, &j, &confirmed.evidence, matrix.file_run())?;
    let gates = &j.gated.gates;
    let facts = Facts {
        triaged: &triaged,
        pre_existing: &pre_existing,
        patch: &patch,
        outside: &outside,
        fixtures: &fixtures,
        spec: &spec,
        gates,
        kept: crate::audit::edit_replay::kept_as_debt(&edit_replay),
    };
    let findings = findings::findings(&facts);
    let limits = Limits::merge(&opts.budget, &sides.base_config.budget);
    let usage = budget::usage(asked.started, &j, &patch.new_skips, &confirmed.evidence);
    let proof_runs = budget::proof_runs(confirmation, &pairs, nio_read.as_ref());
    let (budget_node, budget) = budget::judge(engine, limits, usage, proof_runs, &[triage_node])?;
    let weighed = Weighed {
        undecided: findings::undecided(&spec, &fixtures),
        strict_source: opts.strict_source || sides.base_config.source_checks_block,
        ..Weighed::findings(findings.clone(), opts.strict)
    };
    let decision = verdict::decide(engine, weighed, Some(budget_node), &[triage_node])?;

    let mut orders = labels;
    orders.extend(nio.is_some().then_some(OrderLabel::Twice));
    let tests = Tested {
        evidence: confirmed.evidence,
        triaged,
        red_messages: matrix.red_messages(&j.nodeids),
        twice: nio_read.map(|n| n.twice),
        nondeterministic,
    };
    let ran = Ran {
        orders,
        selection: j.selection,
        impact,
        head_collection: read.head_collection,
    };
    let judgment = Judgment {
        ran,
        tests,
        pairs,
        pre_existing,
        patch,
        fixtures,
        spec,
        edit_replay,
        outside,
        findings,
        budget,
        today: opts.today,
    };
    Ok((judgment, decision, matrix.warnings()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fixgate_cache::{Digest, MemStore};

    use super::*;
    use crate::audit::finding::FindingKind;
    use crate::audit::freeze::Ledger;
    use crate::audit::verdict::{Because, Reason, Verdict};
    use crate::engine::exec::RunSpec;
    use crate::engine::sides::Side;
    use crate::engine::testing::{items, tree, with_engine, Fake};
    use crate::pytest::events::Collection;
    use crate::pytest::result::Outcome;
    use crate::snapshot::Snapshot;

    fn options() -> Options {
        Options {
            base: "base".into(),
            head: None,
            seeds: Vec::new(),
            strict: false,
            strict_source: false,
            nio: false,
            cache: true,
            check: false,
            deps: None,
            budget: Overrides::default(),
            today: Date::parse("2025-06-01").unwrap(),
            sandbox: SandboxSettings {
                pass_env: Vec::new(),
                test_timeout: Duration::from_secs(60),
                allow_network: false,
                containment: Default::default(),
                read_paths: Vec::new(),
                limits: Default::default(),
            },
            shard: None,
            remote_exec: Default::default(),
            runner: None,
            frozen_head: None,
            full: false,
            scoped: false,
        }
    }

    fn side(snapshot: &Arc<Snapshot>, tree: &str) -> Side {
        Side {
            snapshot: snapshot.clone(),
            ledger: Ledger::default(),
            lock: None,
            tree: Digest::of(tree.as_bytes()),
        }
    }

    /// The phases of an audit of `head` against `base` (each collecting `tests`) whose pytest is
    /// `fake`.
    fn audit(base: &Arc<Snapshot>, head: &Arc<Snapshot>, fake: Fake, tests: &[&str]) -> Phased {
        let mut fake = fake;
        for s in [base, head] {
            let collection = Collection {
                items: items(tests),
                ..Collection::default()
            };
            fake.collections.push((s.root.clone(), collection));
        }
        let config = crate::config::load(&crate::config::ConfigInputs {
            manifest_file: None,
            pyproject: None,
            paths: &[],
        })
        .unwrap();
        let sides = Sides {
            base: side(base, "base"),
            head: side(head, "head"),
            base_config: config.clone(),
            config,
            lock_path: None,
        };
        let (opts, store) = (options(), MemStore::new());
        let memory = Memory {
            store: &store,
            base_tree: sides.base.tree,
        };
        with_engine(&store, base, head, Arc::new(fake), |engine| {
            let asked = Asked {
                sides: &sides,
                opts: &opts,
                started: Instant::now(),
                uploads: false,
                memory,
            };
            phases(engine, &asked).unwrap()
        })
    }

    #[test]
    fn a_victim_the_patch_made_follow_a_polluter_rejects_it_with_the_pair() {
        let ((_b, base), (_h, head)) = (tree(&[("t.py", "")]), tree(&[("t.py", "")]));
        // On the head, v fails after a; on the base, nothing fails.
        let head_root = head.root.clone();
        let rule = move |run: &RunSpec, id: &str, before: &[String]| {
            let polluted = before.iter().any(|b| b == "t.py::a");
            match run.snapshot.root == head_root && id == "t.py::v" && polluted {
                true => Outcome::Failed,
                false => Outcome::Passed,
            }
        };
        let phased = audit(&base, &head, Fake::new(rule), &["t.py::a", "t.py::v"]);
        let Reached::Judged(j) = &phased.reached else {
            panic!("the audit stopped before judging");
        };
        assert_eq!(phased.decision.verdict, Verdict::Reject);
        let rejects = |kind, subject: &str| Reason::Rejects {
            kind,
            subject: subject.into(),
            because: Because::Introduced,
        };
        assert_eq!(
            phased.decision.reasons,
            [
                rejects(FindingKind::Polluter, "t.py::a"),
                rejects(FindingKind::OrderDependent, "t.py::v"),
            ]
        );
        assert_eq!(j.pairs.len(), 1);
        assert_eq!(
            (j.pairs[0].victim.as_str(), &j.pairs[0].culprits[..]),
            ("t.py::v", &["t.py::a".to_string()][..])
        );
        assert_eq!(j.ran.orders, [OrderLabel::File, OrderLabel::Reversed]);
        assert!(j.pre_existing.is_empty());
        assert!(j.patch.edited.is_empty() && !j.patch.conftests_changed);
    }

    #[test]
    fn a_head_that_does_not_collect_is_rejected_before_any_test_runs() {
        let ((_b, base), (_h, head)) = (tree(&[("t.py", "")]), tree(&[("t.py", "")]));
        let mut fake = Fake::new(|_: &RunSpec, _: &str, _: &[String]| Outcome::Passed);
        fake.broken = Some((head.root.clone(), "--- t.py\nSyntaxError".into()));
        let phased = audit(&base, &head, fake, &["t.py::a"]);
        let Reached::CollectionError(broken) = &phased.reached else {
            panic!("the head's collection error was not read");
        };
        assert_eq!(broken.file.as_deref(), Some("t.py"));
        assert_eq!(phased.decision.verdict, Verdict::Reject);
        assert_eq!(
            phased.decision.reasons,
            [Reason::Rejects {
                kind: FindingKind::CollectionError,
                subject: "t.py".into(),
                because: Because::Introduced,
            }]
        );
    }
}
