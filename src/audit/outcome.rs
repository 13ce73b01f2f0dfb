//! What one audit found, as typed values: the phases' results and the verdict, everything the
//! report is assembled from (`report::assemble`) and nothing the report says in words.

use std::collections::BTreeMap;

use crate::audit::base_suite::SpecReplay;
use crate::audit::budget::{Breach, Limits, Usage};
use crate::audit::collection::Broken;
use crate::audit::edited::Patch;
use crate::audit::finding::Finding;
use crate::audit::findings::PreExisting;
use crate::audit::freeze::Date;
use crate::audit::gates::Gates;
use crate::audit::itemize::HeadCollection;
use crate::audit::nio::Twice;
use crate::audit::order::OrderLabel;
use crate::audit::outside::OutsideWrites;
use crate::audit::pair::Pair;
use crate::audit::replay::FixtureReplay;
use crate::audit::scope::Impact;
use crate::audit::triage::{Evidence, Triage};
use crate::audit::verdict::Decision;
use crate::pytest::events::CollectedItem;
use crate::pytest::result::Outcome;

/// One side of the audit as the user named it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Revision {
    /// What the user named: a revision, or `worktree`.
    pub(crate) rev: String,
    pub(crate) commit: Option<String>,
}

/// One audit's outcome.
pub(crate) struct AuditOutcome {
    pub(crate) strict: bool,
    pub(crate) base: Revision,
    pub(crate) head: Revision,
    /// 0 (file order), then the shuffled orders' seeds.
    pub(crate) seeds: Vec<u64>,
    pub(crate) interpreter: String,
    pub(crate) gates: Gates,
    /// How far the audit went.
    pub(crate) reached: Reached,
    pub(crate) decision: Decision,
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
    pub(crate) breaches: Vec<Breach>,
    pub(crate) proof_runs: u64,
}

/// What the matrix ran: its orders over the selection, what the patch affects, and how the
/// head's collection was made.
pub(crate) struct Ran {
    /// Every order in run order (the nio order last, when it ran).
    pub(crate) orders: Vec<OrderLabel>,
    /// The tests the matrix ran (the head's, less the frozen ones), in collection order.
    pub(crate) selection: Vec<CollectedItem>,
    /// What the patch affects, and what the shuffled orders ran of the selection (or why they
    /// ran all of it).
    pub(crate) impact: Impact,
    /// How a scoped head's collection was made (`None`: every item, unasked).
    pub(crate) head_collection: Option<HeadCollection>,
}

/// Every test's evidence across the orders, and what triage made of it.
pub(crate) struct Tested {
    pub(crate) evidence: BTreeMap<String, Evidence>,
    pub(crate) triaged: BTreeMap<String, Triage>,
    /// Each test's message in the first order where it was not green.
    pub(crate) red_messages: BTreeMap<String, String>,
    /// With the nio order: each test's two runs there.
    pub(crate) twice: Option<BTreeMap<String, Twice>>,
    /// With `--check`: what the fresh runs did not repeat.
    pub(crate) nondeterministic: Vec<Nondeterminism>,
}

/// What every phase after collection found, each phase's part as it handed it on.
pub(crate) struct Judgment {
    pub(crate) ran: Ran,
    pub(crate) tests: Tested,
    /// The polluter search's pairs.
    pub(crate) pairs: Vec<Pair>,
    /// The findings the base showed too.
    pub(crate) pre_existing: PreExisting,
    pub(crate) patch: Patch,
    pub(crate) fixtures: FixtureReplay,
    pub(crate) spec: SpecReplay,
    /// The edited tests whose known order-dependence was replayed with their base version.
    pub(crate) edit_replay: Vec<crate::audit::edit_replay::EditReplay>,
    pub(crate) outside: OutsideWrites,
    /// The findings the verdict weighed, in the order of its dispositions.
    pub(crate) findings: Vec<Finding>,
    pub(crate) budget: BudgetFacts,
    /// The date freeze entries are suggested from.
    pub(crate) today: Date,
}
