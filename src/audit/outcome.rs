//! What one audit found, as typed values: the phases' results and the verdict, everything the
//! report is assembled from (`report::assemble`) and nothing the report says in words.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::budget::{Limits, NewSkip, Usage};
use crate::audit::collection::Broken;
use crate::audit::findings::PreExisting;
use crate::audit::freeze::Date;
use crate::audit::gates::Gates;
use crate::audit::hidden::{Altered, BaseSuiteRead};
use crate::audit::nio::Twice;
use crate::audit::order::OrderLabel;
use crate::audit::outside::OutsideWrites;
use crate::audit::pair::Pair;
use crate::audit::replay::ReplayRead;
use crate::audit::scope::Impact;
use crate::audit::source_replay::SourceRead;
use crate::audit::source_tamper::Suspect;
use crate::audit::triage::{Evidence, Triage};
use crate::audit::verdict::{Decision, Finding};
use crate::delta::ChangedFile;
use crate::pytest::events::CollectedItem;
use crate::pytest::result::Outcome;

/// One side of the audit as the user named it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Side {
    /// What the user named: a revision, or `worktree`.
    pub(crate) rev: String,
    pub(crate) commit: Option<String>,
}

/// One audit's outcome.
pub(crate) struct AuditOutcome {
    pub(crate) strict: bool,
    pub(crate) base: Side,
    pub(crate) head: Side,
    /// 0 (file order), then the shuffled orders' seeds.
    pub(crate) seeds: Vec<u64>,
    pub(crate) interpreter: String,
    pub(crate) gates: Gates,
    /// How far the audit went.
    pub(crate) reached: Reached,
    pub(crate) decision: Decision,
    /// What running the audit took and met.
    pub(crate) run: RunFacts,
}

/// How far an audit went.
pub(crate) enum Reached {
    /// A gate stopped it before any test ran (drift, an expired freeze entry).
    Gates,
    /// The head's suite does not collect while the base's does.
    CollectionError(Broken),
    /// `--shard K/N`: one share of the matrix ran, and nothing after it.
    Shard(ShardRun),
    /// Every phase ran.
    Judged(Box<Judgment>),
}

/// What one share of a sharded matrix ran.
pub(crate) struct ShardRun {
    pub(crate) k: u32,
    pub(crate) n: u32,
    pub(crate) orders: Vec<OrderLabel>,
    /// Of its seed runs, how many executed here and how many came from a cache.
    pub(crate) executed: usize,
    pub(crate) cached: usize,
    /// Whether results went to the remote cache.
    pub(crate) uploaded: bool,
}

/// A cached run's outcome that a fresh run of the same order (`--check`) did not repeat.
pub(crate) struct Nondeterminism {
    pub(crate) nodeid: String,
    pub(crate) order: OrderLabel,
    /// `None`: the cached run did not run the test.
    pub(crate) cached: Option<Outcome>,
    pub(crate) fresh: Outcome,
}

/// The budget: its limits, what the audit used, the breach lines, and the runs fixgate spent
/// proving order dependence (recorded, never held to `--max-reruns`).
pub(crate) struct BudgetFacts {
    pub(crate) limits: Limits,
    pub(crate) usage: Usage,
    pub(crate) breaches: Vec<String>,
    pub(crate) proof_runs: u64,
}

/// What every phase after collection found.
pub(crate) struct Judgment {
    /// Every order in run order (the nio order last, when it ran).
    pub(crate) orders: Vec<OrderLabel>,
    /// The tests the matrix ran (the head's, less the frozen ones), in collection order.
    pub(crate) selection: Vec<CollectedItem>,
    /// What the patch affects, and what the shuffled orders ran of the selection (or why they
    /// ran all of it).
    pub(crate) impact: Impact,
    pub(crate) evidence: BTreeMap<String, Evidence>,
    pub(crate) triaged: BTreeMap<String, Triage>,
    /// Each test's message in the first order where it was not green.
    pub(crate) red_messages: BTreeMap<String, String>,
    /// With the nio order: each test's two runs there.
    pub(crate) twice: Option<BTreeMap<String, Twice>>,
    pub(crate) pairs: Vec<Pair>,
    pub(crate) pre_existing: PreExisting,
    /// The tests the patch edited, and the base's tests.
    pub(crate) edited: BTreeSet<String>,
    pub(crate) base_ids: BTreeSet<String>,
    pub(crate) outside: OutsideWrites,
    pub(crate) coupled: Vec<String>,
    pub(crate) replay: Vec<ReplayRead>,
    pub(crate) source_replay: Vec<SourceRead>,
    /// The base-suite replay, when the patch touched the tests; the tests a hook made look
    /// green.
    pub(crate) base_suite: Option<BaseSuiteRead>,
    pub(crate) altered: Vec<Altered>,
    /// The files in no fixture group that coupling found through the trace (the patch changed
    /// them, a test read them).
    pub(crate) traced: Vec<ChangedFile>,
    pub(crate) new_skips: Vec<NewSkip>,
    /// The source-side moves the head's code may make (`audit::source_tamper`).
    pub(crate) source_tamper: Vec<Suspect>,
    /// With `--check`: what the fresh runs did not repeat.
    pub(crate) nondeterministic: Vec<Nondeterminism>,
    /// The findings the verdict weighed, in the order of its dispositions.
    pub(crate) findings: Vec<Finding>,
    pub(crate) budget: BudgetFacts,
    /// The date freeze entries are suggested from.
    pub(crate) today: Date,
}

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
