//! The audit report: one typed structure, rendered as JSON (the versioned contract in the
//! README), human text, markdown, JUnit XML and GitHub workflow annotations.

//!
//! The report is written once, by [`assemble`], from an audit's typed outcome; its fields are
//! the audit's own enums, which serialise to the schema's strings (`"order-dependent"`,
//! `"rev"`, ...) and carry the renderers' words (`FindingKind::noun`, `Bucket::rank`), so no
//! renderer or reader ever turns a string back into a kind.

pub(crate) mod assemble;
pub mod github;
pub mod human;
pub mod junit;
pub mod markdown;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::audit::bisect::PairKind;
use crate::audit::freeze::Entry;
use crate::audit::order::OrderLabel;
pub(crate) use crate::audit::outcome::Side;
use crate::audit::pair::Found;
use crate::audit::triage::{Bucket, Signal};
use crate::audit::verdict::{FindingKind, Verdict};
use crate::audit::{replay, source_replay};
use crate::delta::Change;
use crate::pytest::result::Outcome;

pub const SCHEMA: u32 = 1;

/// What a command's report is rendered as (`--format`); every command has human and JSON, only
/// `fixgate audit` the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
    /// A pull-request comment.
    Markdown,
    /// JUnit XML.
    Junit,
    /// GitHub workflow annotations.
    Github,
}

/// A column of a test's outcomes: an order of the matrix (or the nio order), or the second run
/// of each test in the nio order (`nio#2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Column {
    Order(OrderLabel),
    SecondRun,
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Column::Order(l) => l.fmt(f),
            Column::SecondRun => write!(f, "{}#2", OrderLabel::Twice),
        }
    }
}

impl Serialize for Column {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One test of the head, with its outcome in every order and its bucket.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TestReport {
    pub nodeid: String,
    /// `stable`, `order-dependent`, `polluter`, `flaky`, `failing`, `error`, `skipped`,
    /// `crashed`, `timeout` or `resource-limit`.
    pub bucket: Bucket,
    pub signals: Vec<Signal>,
    /// Order label (`0`, `rev`, `1`, ...) → outcome.
    pub(crate) outcomes: BTreeMap<Column, Outcome>,
    /// Fixture groups this test changed without holding their lease.
    pub dirty_groups: Vec<String>,
    pub edited_by_patch: bool,
    /// Whether the patch introduced this test's finding (false: the base has it too).
    pub introduced: bool,
    pub file: Option<String>,
    pub line: Option<u64>,
    /// The first failure message seen, if any.
    pub message: Option<String>,
}

/// A polluter (or state-setter) and its victim, with a command that reproduces it.
#[derive(Clone, Debug, Serialize)]
pub struct PairReport {
    /// `polluter` or `state-setter`.
    pub kind: PairKind,
    /// The responsible test; with several tests responsible together, the first of them.
    pub polluter: String,
    pub victim: String,
    /// Every test of the minimal responsible set, in order (one element in the common case).
    pub culprits: Vec<String>,
    pub repro: String,
    pub introduced: bool,
    /// pytest processes the search started.
    pub search_runs: u32,
    /// `search` (bisection or delta debugging), `reused-from-this-audit` (another victim's
    /// culprits, confirmed in one run) or `reused-from-an-earlier-audit` (a set remembered for
    /// this victim and base, confirmed in one run).
    #[serde(serialize_with = "found_by")]
    pub(crate) found_by: Found,
    /// pytest processes that checked the pair holds on every rerun (culprits then victim, the
    /// victim alone).
    pub verify_runs: u32,
    /// Set when the search could not explain the failure: which invariant broke.
    pub unexplained: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChangedFixture {
    pub path: String,
    pub group: String,
    pub change: Change,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    pub nodeid: String,
    pub head: Outcome,
    pub base: Outcome,
    /// `redefined`, `cosmetic`, `additive` or `inconclusive`.
    pub(crate) reading: replay::Reading,
}

/// What one share of a sharded matrix ran (`fixgate audit --shard K/N`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ShardNote {
    pub schema: u32,
    /// `K/N`.
    pub shard: String,
    /// The order labels of this share.
    pub(crate) orders: Vec<OrderLabel>,
    /// Of its seed runs, how many executed here and how many came from a cache.
    pub executed: usize,
    pub cached: usize,
    pub pytest_processes: u32,
    /// Whether results were written to the remote cache (`--remote-upload`).
    pub uploaded: bool,
}

/// One edited test run with the base's version of its test file on the head's code.
#[derive(Clone, Debug, Serialize)]
pub struct SourceReplay {
    pub nodeid: String,
    /// The base's node id of a test the patch renamed (its base version ran under this name);
    /// `None` for a test edited under its own name.
    pub renamed_from: Option<String>,
    /// Its outcome at head.
    pub head: Outcome,
    /// Its outcome with the base's test code; `None` when the base's file did not run it.
    pub base_test_code: Option<Outcome>,
    /// `redefined-test`, `test-refactor` or `inconclusive`.
    pub(crate) reading: source_replay::Reading,
    /// The lines of the test (or around it) only the base has, and only the head has.
    pub base_lines: Vec<String>,
    pub head_lines: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Fixtures {
    pub changed: Vec<ChangedFixture>,
    pub coupled: Vec<String>,
    pub replay: Vec<ReplayReport>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Budget {
    pub limits: BTreeMap<String, u64>,
    pub used: BTreeMap<String, u64>,
    pub breaches: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Freeze {
    pub active: Vec<String>,
    pub expired: Vec<String>,
    pub added_by_patch: Vec<String>,
    /// Suggested ledger entries for flaky and pre-existing findings.
    pub suggested: BTreeMap<String, Entry>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Drift {
    pub path: String,
    pub change: Change,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Lock {
    /// The lock read (repo-relative, from the base): `fixtures.lock`, `tests/fixtures.lock.json`
    /// or `[tool.fixgate] lock`; `None` when the base has none.
    #[serde(default)]
    pub file: Option<String>,
    pub drift: Vec<Drift>,
    /// Whether the patch changes the lock itself.
    pub changed_by_patch: bool,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct ExecutedNode {
    pub label: String,
    pub kind: String,
    pub key: String,
    pub reason: String,
    /// Seconds since the epoch: timing fields.
    pub start: f64,
    pub end: f64,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct GraphSummary {
    pub nodes: usize,
    pub executed: usize,
    pub cached: usize,
    /// Of the cached nodes, those whose result came from the remote cache.
    #[serde(default)]
    pub remote: usize,
    pub executed_nodes: Vec<ExecutedNode>,
    /// Every node with its status, in the order the audit ran them.
    pub all_nodes: Vec<NodeStatus>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct NodeStatus {
    pub label: String,
    pub kind: String,
    /// `cached`, `executed: <why>`, `failed: <why>`, ...
    pub status: String,
}

/// A finding: something the verdict rests on, with its evidence.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// `order-dependent`, `polluter`, `lease-violation`, `redefined`, `cosmetic`, `additive`,
    /// `failing`, `crashed`, `timeout`, `error`, `flaky`, `new-skip`, `freeze-added`,
    /// `lock-changed`, `edited-assertion`, ... (every [`FindingKind`]).
    pub kind: FindingKind,
    pub tests: Vec<String>,
    pub message: String,
    /// A command that reproduces it, when there is one.
    pub repro: Option<String>,
    pub introduced: bool,
    /// Whether this finding counts against the patch (rejects or makes it unverified).
    pub blocking: bool,
}

/// What the shuffled orders ran (`crate::audit::scope`, docs/impact.md).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScopeReport {
    pub mode: ScopeMode,
    /// Why the orders ran in full.
    pub reason: Option<String>,
    /// The tests of the selection.
    pub tests: u64,
    /// How many tests the patch affected (new or edited, or reached by its footprint); `None`:
    /// every test (the footprint is everything).
    pub affected: Option<u64>,
    /// The tests that left shared state changed (run in every order with their readers).
    pub writers: Vec<String>,
    /// How many tests each order ran.
    pub runs: BTreeMap<OrderLabel, u64>,
    /// The tests the shuffled orders did not run, each with the outcomes that stand for them.
    pub carried: Vec<Carried>,
}

/// Whether the shuffled orders ran a scope of the selection or all of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScopeMode {
    /// The shuffled orders ran what the patch can affect.
    Scoped,
    /// The whole selection.
    #[default]
    Full,
}

/// A test the shuffled orders carried: its outcome cannot follow the order, and these are its
/// outcomes in the orders that ran it (file order and reversed, on the head).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Carried {
    pub nodeid: String,
    pub evidence: BTreeMap<OrderLabel, Outcome>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AuditReport {
    pub schema: u32,
    pub verdict: Verdict,
    pub exit_code: i32,
    pub reasons: Vec<String>,
    pub base: Side,
    pub head: Side,
    pub seeds: Vec<u64>,
    /// Every order label in run order: `0` (file order), `rev` (reversed), then the seeds.
    pub(crate) orders: Vec<OrderLabel>,
    /// What the shuffled orders ran; `None` when the audit stopped before them.
    pub scope: Option<ScopeReport>,
    pub tests: Vec<TestReport>,
    pub pairs: Vec<PairReport>,
    pub findings: Vec<Finding>,
    pub fixtures: Fixtures,
    /// The tests the patch edited, replayed with the base's test code (see `engine::source_replay`).
    pub source_replay: Vec<SourceReplay>,
    pub budget: Budget,
    pub freeze: Freeze,
    pub lock: Lock,
    pub graph: GraphSummary,
    /// pytest processes this audit started (cached runs start none).
    pub pytest_processes: u32,
    /// Whether runs were forked from warm interpreters, how many, and why not where they were
    /// not (the fork server's fallback reasons).
    pub forkserver: crate::pytest::forkserver::ForkSummary,
    /// Wall seconds of the audit: a timing field.
    pub duration_seconds: f64,
    pub strict: bool,
    /// How the runs were contained: `namespaces` (a read-only world, no survivors) or `none`
    /// (the platform refused namespaces; see README, Containment); empty in the report of a
    /// head that could not be audited.
    #[serde(serialize_with = "containment")]
    pub containment: Option<crate::contain::Mode>,
    pub interpreter: Option<String>,
    /// Problems around the audit that did not stop it (an editable install, a damaged cache
    /// entry): also printed on standard error.
    pub warnings: Vec<String>,
    /// The graph in Graphviz DOT (kept for `fixgate graph --dot`, not part of the JSON).
    #[serde(skip)]
    pub graph_dot: String,
    /// With `--shard K/N`: what this share ran (the report is then only this note).
    #[serde(skip)]
    pub shard: Option<ShardNote>,
}

fn found_by<S: Serializer>(found: &Found, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(found.as_str())
}

fn containment<S: Serializer>(
    mode: &Option<crate::contain::Mode>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(mode.map_or("", |m| m.as_str()))
}
