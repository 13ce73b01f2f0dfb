//! The audit report: one typed structure, rendered as JSON (the versioned contract in
//! docs/json-report.md), human text, markdown, JUnit XML and GitHub workflow annotations.

//!
//! The report is written once, by [`assemble`], from an audit's typed outcome; its fields are
//! the audit's own enums, which serialise to the schema's strings (`"order-dependent"`,
//! `"rev"`, ...) and carry the renderers' words (`FindingKind::noun`, `Bucket::rank`), so no
//! renderer or reader ever turns a string back into a kind.

pub(crate) mod assemble;
pub(crate) mod github;
pub(crate) mod human;
pub(crate) mod junit;
pub(crate) mod markdown;
pub(crate) mod message;
pub(crate) mod reasons;
pub(crate) mod repro;
pub(crate) mod sarif;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::audit::bisect::PairKind;
use crate::audit::finding::FindingKind;
use crate::audit::freeze::Entry;
use crate::audit::order::OrderLabel;
pub(crate) use crate::audit::outcome::Revision;
use crate::audit::pair::Found;
use crate::audit::triage::{Bucket, Signal};
use crate::audit::verdict::Verdict;
use crate::audit::{replay, source_replay};
use crate::delta::Change;
use crate::pytest::result::Outcome;

pub(crate) const SCHEMA: u32 = 1;

/// What a command's report is rendered as (`--format`); every command has human and JSON, only
/// `fixgate audit` the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Human,
    Json,
    /// A pull-request comment.
    Markdown,
    /// JUnit XML.
    Junit,
    /// GitHub workflow annotations.
    Github,
    /// SARIF 2.1.0, for code-scanning UIs.
    Sarif,
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
pub(crate) struct TestReport {
    pub(crate) nodeid: String,
    /// `stable`, `order-dependent`, `polluter`, `flaky`, `failing`, `error`, `skipped`,
    /// `crashed`, `timeout` or `resource-limit`.
    pub(crate) bucket: Bucket,
    pub(crate) signals: Vec<Signal>,
    /// Order label (`0`, `rev`, `1`, ...) → outcome.
    pub(crate) outcomes: BTreeMap<Column, Outcome>,
    /// Fixture groups this test changed without holding their lease.
    pub(crate) dirty_groups: Vec<String>,
    pub(crate) edited_by_patch: bool,
    /// Whether the patch introduced this test's finding (false: the base has it too).
    pub(crate) introduced: bool,
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u64>,
    /// The first failure message seen, if any.
    pub(crate) message: Option<String>,
}

/// A polluter (or state-setter) and its victim, with a command that reproduces it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PairReport {
    /// `polluter` or `state-setter`.
    pub(crate) kind: PairKind,
    /// The responsible test; with several tests responsible together, the first of them.
    pub(crate) polluter: String,
    pub(crate) victim: String,
    /// Every test of the minimal responsible set, in order (one element in the common case).
    pub(crate) culprits: Vec<String>,
    pub(crate) repro: String,
    pub(crate) introduced: bool,
    /// pytest processes the search started.
    pub(crate) search_runs: u32,
    /// `search` (bisection or delta debugging), `reused-from-this-audit` (another victim's
    /// culprits, confirmed in one run) or `reused-from-an-earlier-audit` (a set remembered for
    /// this victim and base, confirmed in one run).
    #[serde(serialize_with = "found_by")]
    pub(crate) found_by: Found,
    /// pytest processes that checked the pair holds on every rerun (culprits then victim, the
    /// victim alone).
    pub(crate) verify_runs: u32,
    /// Set when the search could not explain the failure: which invariant broke.
    pub(crate) unexplained: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct ChangedFixture {
    pub(crate) path: String,
    pub(crate) group: String,
    pub(crate) change: Change,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct ReplayReport {
    pub(crate) nodeid: String,
    pub(crate) head: Outcome,
    /// `null`: not replayed (a new test that reads only files the patch added is additive
    /// whatever the base's bytes give, and may not exist on them).
    pub(crate) base: Option<Outcome>,
    /// `redefined`, `cosmetic`, `additive` or `inconclusive`.
    pub(crate) reading: replay::Reading,
    /// The changed files the test read, whose base bytes the replay ran it on.
    pub(crate) files: Vec<String>,
}

/// What one share of a sharded matrix ran (`fixgate audit --shard K/N`).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ShardNote {
    pub(crate) schema: u32,
    /// `K/N`.
    pub(crate) shard: String,
    /// The order labels of this share.
    pub(crate) orders: Vec<OrderLabel>,
    /// Of its seed runs, how many executed here and how many came from a cache.
    pub(crate) executed: usize,
    pub(crate) cached: usize,
    pub(crate) pytest_processes: u32,
    /// Whether results were written to the remote cache (`--remote-upload`).
    pub(crate) uploaded: bool,
}

/// One edited test run with the base's version of its test file on the head's code.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct SourceReplay {
    pub(crate) nodeid: String,
    /// The base's node id of a test the patch renamed (its base version ran under this name);
    /// `None` for a test edited under its own name.
    pub(crate) renamed_from: Option<String>,
    /// Its outcome at head.
    pub(crate) head: Outcome,
    /// Its outcome with the base's test code; `None` when the base's file did not run it.
    pub(crate) base_test_code: Option<Outcome>,
    /// `redefined-test`, `test-refactor` or `inconclusive`.
    pub(crate) reading: source_replay::Reading,
    /// The lines of the test (or around it) only the base has, and only the head has.
    pub(crate) base_lines: Vec<String>,
    pub(crate) head_lines: Vec<String>,
}

/// The base-suite replay: the base's tests with the base's test code on the head's code.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct BaseSuiteReport {
    /// The whole base suite ran (a conftest, the configuration or a hook changed).
    pub(crate) whole: bool,
    /// Why the replay ran.
    pub(crate) reasons: Vec<String>,
    /// How many base tests it ran.
    pub(crate) ran: usize,
    /// The tests whose reading is not `holds`, and the base tests the head does not have.
    pub(crate) tests: Vec<BaseSuiteTest>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct BaseSuiteTest {
    pub(crate) nodeid: String,
    /// `present`, `renamed`, `deselected`, `uncollected` or `deleted`.
    pub(crate) at_head: &'static str,
    /// What it became at head (renamed), or where its function is (uncollected).
    pub(crate) head_nodeid: Option<String>,
    /// Its outcome (or what it became's) in the head's file-order run.
    pub(crate) head: Option<Outcome>,
    /// Its outcome with the base's test code on the head's code.
    pub(crate) replay: Outcome,
    /// Its outcome in the same order on the base (run only when the replay is red).
    pub(crate) base: Option<Outcome>,
    /// `holds`, `shown-at-head`, `fails-on-base`, `unconfirmed`, `code-removed`,
    /// `deleted-with-its-code` or the finding's kind.
    pub(crate) reading: crate::audit::base_suite::Reading,
    /// The replay's failure.
    pub(crate) message: Option<String>,
    /// For `depends-on-new-test`: the tests the patch added that run before it in its file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) depends_on: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Fixtures {
    pub(crate) changed: Vec<ChangedFixture>,
    pub(crate) coupled: Vec<String>,
    pub(crate) replay: Vec<ReplayReport>,
}

/// How many replays decided and how many could not.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ReplayCounts {
    pub(crate) decided: u64,
    pub(crate) undecided: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Budget {
    pub(crate) limits: BTreeMap<String, u64>,
    pub(crate) used: BTreeMap<String, u64>,
    pub(crate) breaches: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Freeze {
    pub(crate) active: Vec<String>,
    pub(crate) expired: Vec<String>,
    pub(crate) added_by_patch: Vec<String>,
    /// Suggested ledger entries for flaky and pre-existing findings.
    pub(crate) suggested: BTreeMap<String, Entry>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Drift {
    pub(crate) path: String,
    pub(crate) change: Change,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Lock {
    /// The lock read (repo-relative, from the base): `fixtures.lock`, `tests/fixtures.lock.json`
    /// or `[tool.fixgate] lock`; `None` when the base has none.
    #[serde(default)]
    pub(crate) file: Option<String>,
    pub(crate) drift: Vec<Drift>,
    /// Whether the patch changes the lock itself.
    pub(crate) changed_by_patch: bool,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub(crate) struct ExecutedNode {
    pub(crate) label: String,
    pub(crate) kind: String,
    pub(crate) key: String,
    pub(crate) reason: String,
    /// Seconds since the epoch: timing fields.
    pub(crate) start: f64,
    pub(crate) end: f64,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub(crate) struct GraphSummary {
    pub(crate) nodes: usize,
    pub(crate) executed: usize,
    pub(crate) cached: usize,
    /// Of the cached nodes, those whose result came from the remote cache.
    #[serde(default)]
    pub(crate) remote: usize,
    /// Of the executed nodes, the pytest runs a remote executor ran (`--remote-executor`).
    #[serde(default)]
    pub(crate) remote_executed: usize,
    pub(crate) executed_nodes: Vec<ExecutedNode>,
    /// Every node with its status, in the order the audit ran them.
    pub(crate) all_nodes: Vec<NodeStatus>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub(crate) struct NodeStatus {
    pub(crate) label: String,
    pub(crate) kind: String,
    /// `cached`, `executed: <why>`, `failed: <why>`, ...
    pub(crate) status: String,
}

/// A finding: something the verdict rests on, with its evidence.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Finding {
    /// The same finding's id in every audit that makes it: its kind, then a digest of its tests
    /// and cause (the culprits of the pair that proves it), e.g. `order-dependent-3f2a9c1b7d4e`.
    pub(crate) id: String,
    /// `order-dependent`, `polluter`, `lease-violation`, `redefined`, `cosmetic`, `additive`,
    /// `failing`, `crashed`, `timeout`, `error`, `flaky`, `new-skip`, `freeze-added`,
    /// `lock-changed`, `edited-assertion`, ... (every [`FindingKind`]).
    pub(crate) kind: FindingKind,
    pub(crate) tests: Vec<String>,
    pub(crate) message: String,
    /// A command that reproduces it, when there is one.
    pub(crate) repro: Option<String>,
    pub(crate) introduced: bool,
    /// Whether this finding counts against the patch (rejects or makes it unverified).
    pub(crate) blocking: bool,
    /// The file (from the repository's root) and line of the test it is about, when known.
    pub(crate) file: Option<String>,
    pub(crate) line: Option<u64>,
}

/// What the shuffled orders ran (`crate::audit::scope`, docs/impact.md).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ScopeReport {
    pub(crate) mode: ScopeMode,
    /// Why the orders ran in full.
    pub(crate) reason: Option<String>,
    /// The tests of the selection.
    pub(crate) tests: u64,
    /// How many tests the patch affected (new or edited, or reached by its footprint); `None`:
    /// every test (the footprint is everything).
    pub(crate) affected: Option<u64>,
    /// The tests that left shared state changed (run in every order with their readers).
    pub(crate) writers: Vec<String>,
    /// How many tests each order ran on the head (the file-order and reversed runs carry the
    /// rest from the base's runs of the same orders when the base's recording allows it).
    pub(crate) runs: BTreeMap<OrderLabel, u64>,
    /// Why a scoped audit's file-order and reversed runs ran the whole selection on the head.
    pub(crate) whole_reason: Option<String>,
    /// The tests the shuffled orders did not run, each with the outcomes that stand for them.
    pub(crate) carried: Vec<Carried>,
    /// The victims of pairs whose base check needed no run: the base's recording says they
    /// give the same outcome in every order of the base, so their pairs are the patch's.
    pub(crate) settled_on_base: Vec<String>,
    /// How the head's collection was made, in a scoped audit of a head against another base
    /// (docs/impact.md, "The head's collection").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) collection: Option<CollectionReport>,
}

/// Of the base's test modules, how many the head's collection made the items of (the others'
/// items are the base's: the patch cannot change them), or why it made them all.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct CollectionReport {
    pub(crate) modules: u64,
    pub(crate) itemized: u64,
    pub(crate) whole_reason: Option<String>,
}

/// Whether the shuffled orders ran a scope of the selection or all of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ScopeMode {
    /// The shuffled orders ran what the patch can affect.
    Scoped,
    /// A scoped audit whose shuffled orders ran the whole selection (`reason` says why).
    Full,
    /// Not a scoped audit (neither `--scoped` nor `[tool.fixgate] scoped`): nothing was
    /// recorded, every order ran the whole selection.
    #[default]
    Off,
}

/// A test the shuffled orders carried: its outcome cannot follow the order, and these are its
/// outcomes in the file-order and reversed runs, on the head or, where the head's runs carried
/// it too, on the base (`from`).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Carried {
    pub(crate) nodeid: String,
    pub(crate) from: CarriedFrom,
    pub(crate) evidence: BTreeMap<OrderLabel, Outcome>,
}

/// Which side's file-order and reversed runs a carried test's outcomes come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CarriedFrom {
    /// The head ran it in those orders.
    #[default]
    Head,
    /// The head's runs carried it from the base's runs of the same orders.
    Base,
}

#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct AuditReport {
    pub(crate) schema: u32,
    pub(crate) verdict: Verdict,
    pub(crate) exit_code: i32,
    pub(crate) reasons: Vec<String>,
    pub(crate) base: Revision,
    pub(crate) head: Revision,
    pub(crate) seeds: Vec<u64>,
    /// Every order label in run order: `0` (file order), `rev` (reversed), then the seeds.
    pub(crate) orders: Vec<OrderLabel>,
    /// What the shuffled orders ran; `None` when the audit stopped before them.
    pub(crate) scope: Option<ScopeReport>,
    pub(crate) tests: Vec<TestReport>,
    pub(crate) pairs: Vec<PairReport>,
    pub(crate) findings: Vec<Finding>,
    pub(crate) fixtures: Fixtures,
    /// The tests the patch edited, replayed with the base's test code (see `engine::source_replay`).
    pub(crate) source_replay: Vec<SourceReplay>,
    /// The base-suite replay, when the patch touched the tests (`null` when it ran nothing).
    pub(crate) base_suite: Option<BaseSuiteReport>,
    /// How many replays of edited and coupled tests decided, and how many edited tests' replays
    /// could not (each of those makes the verdict `unverified`).
    pub(crate) replays: ReplayCounts,
    /// The edited tests whose order-dependence the base has too, each run in its base version
    /// where the head's failed (`crate::audit::edit_replay`).
    pub(crate) edit_replay: Vec<crate::audit::edit_replay::EditReplay>,
    pub(crate) budget: Budget,
    pub(crate) freeze: Freeze,
    pub(crate) lock: Lock,
    pub(crate) graph: GraphSummary,
    /// pytest processes this audit started on this machine (cached runs and remote runs
    /// start none).
    pub(crate) pytest_processes: u32,
    /// With `--remote-executor`: the service, what it ran where, what was uploaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) remote_execution: Option<crate::remote_exec::client::Summary>,
    /// Whether runs were forked from warm interpreters, how many, and why not where they were
    /// not (the fork server's fallback reasons).
    pub(crate) forkserver: crate::pytest::forkserver::ForkSummary,
    /// Wall seconds of the audit: a timing field.
    pub(crate) duration_seconds: f64,
    pub(crate) strict: bool,
    /// How the runs were contained: `namespaces`, `landlock` or `none` (see
    /// docs/containment.md); empty in the report of a head that could not be audited.
    #[serde(serialize_with = "containment")]
    pub(crate) containment: Option<crate::contain::Mode>,
    /// What the containment held exactly: Landlock's ABI, the rules not enforced here, the
    /// uid runs dropped to, whether the shared cache was used; `null` where `containment` is
    /// empty.
    pub(crate) containment_detail: Option<crate::contain::Containment>,
    pub(crate) interpreter: Option<String>,
    /// Problems around the audit that did not stop it (an editable install, a damaged cache
    /// entry): also printed on standard error.
    pub(crate) warnings: Vec<String>,
    /// The graph in Graphviz DOT (kept for `fixgate graph --dot`, not part of the JSON).
    #[serde(skip)]
    pub(crate) graph_dot: String,
    /// With `--shard K/N`: what this share ran (the report is then only this note).
    #[serde(skip)]
    pub(crate) shard: Option<ShardNote>,
}

impl AuditReport {
    /// Whether the audit ran at all (an error before it began, or a `--timeout` that stopped
    /// it, leaves nothing but the verdict and its reasons to show).
    pub(crate) fn ran(&self) -> bool {
        self.graph.nodes > 0
    }

    /// The number (from 1, in the report's order) of the pair whose repro is `repro`: a finding
    /// that a pair proves points to it instead of repeating its commands.
    pub(crate) fn pair_proving(&self, repro: &str) -> Option<usize> {
        self.pairs
            .iter()
            .position(|p| !p.repro.is_empty() && p.repro == repro)
            .map(|i| i + 1)
    }

    /// The lines the patch changed in a test a finding is about (base's, then head's), for the
    /// findings whose cause is that edit.
    pub(crate) fn edit_behind(&self, f: &Finding) -> Option<(&[String], &[String])> {
        use crate::audit::finding::FindingKind as K;
        if !matches!(
            f.kind,
            K::EditedAssertion | K::RedefinedTest | K::TestRefactor
        ) {
            return None;
        }
        self.source_replay
            .iter()
            .find(|s| f.tests.contains(&s.nodeid))
            .filter(|s| !s.base_lines.is_empty() || !s.head_lines.is_empty())
            .map(|s| (s.base_lines.as_slice(), s.head_lines.as_slice()))
    }
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

#[cfg(test)]
mod tests {
    use crate::audit::finding::FindingKind;
    use crate::audit::triage::{Bucket, BUCKETS};
    use crate::audit::verdict::Verdict;
    use crate::test_outcome::Outcome;

    /// docs/json-report.schema.json names every value the report's enumerations take, and no
    /// other: a new finding kind, bucket, outcome or verdict must enter the schema.
    #[test]
    fn the_report_schemas_enumerations_are_the_codes() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../docs/json-report.schema.json"))
                .expect("the schema is JSON");
        let listed = |name: &str| -> Vec<String> {
            let mut v: Vec<String> = schema["$defs"][name]["enum"]
                .as_array()
                .unwrap_or_else(|| panic!("no enum {name}"))
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect();
            v.sort();
            v
        };
        let sorted = |mut v: Vec<&str>| {
            v.sort();
            v.dedup();
            v.into_iter().map(str::to_owned).collect::<Vec<_>>()
        };
        let kinds = FindingKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(listed("findingKind"), sorted(kinds));
        let names = |all: &[&'static str]| sorted(all.to_vec());
        assert_eq!(listed("bucket"), names(&BUCKETS.map(Bucket::as_str)));
        assert_eq!(listed("outcome"), names(&Outcome::ALL.map(Outcome::as_str)));
        assert_eq!(listed("verdict"), names(&Verdict::ALL.map(Verdict::as_str)));
    }
}
