//! The kinds of node an audit's graph has, and the labels they go by.
//!
//! A kind is part of every key (the graph hashes it first), so each name here is fixed: renaming
//! one is a new cache. Labels are not part of keys, but `explain` remembers derivations by label
//! and the report lists nodes by it, so the label constructors keep the spelling the labels have
//! always had. Code finds nodes by their id, never by label.

use std::fmt::Display;

/// A kind of node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum NodeKind {
    /// A snapshot's tree digest.
    Snapshot,
    /// A snapshot's fixture manifest.
    Manifest,
    /// The fixtures against the lock.
    LockCheck,
    /// The fixture files that differ between the manifests.
    Delta,
    /// A snapshot's collection.
    Collect,
    /// A scoped head's collection put together from its own items of the modules the patch
    /// or the scope reaches and the base's of the others (`crate::engine::itemize`).
    CarriedCollect,
    /// One order of the matrix.
    SeedRun,
    /// A scoped audit's file-order or reversed run on the head, carried from the base's run
    /// where the patch cannot reach (`crate::engine::carry`).
    CarriedRun,
    /// The matrix read off the seed runs.
    Matrix,
    /// A rerun of an order (confirmation, and the order checks of a pair).
    ConfirmRun,
    /// A test run by itself.
    AloneRun,
    /// Many tests red in every order, run together once before any runs alone.
    RedTogetherRun,
    /// The tests that follow the order and leave no shared state changed (a scoped audit's
    /// recording says so), run together once before any runs alone.
    AloneTogetherRun,
    /// One step of a polluter search.
    BisectRun,
    /// A known culprit set tried before searching.
    ReuseRun,
    /// The culprits then the victim, checking a pair.
    VerifyRun,
    /// A victim's answer: its pair.
    Pair,
    /// The coupled tests on the base's fixture bytes.
    ReplayRun,
    /// The base's tests with the base's test code on the head's code (the base-suite replay).
    BaseSuiteRun,
    /// The base-suite replay's order on the base: its control.
    BaseSuiteControl,
    /// The base's version of an edited, known order-dependent test, on the head's code in an
    /// order where the head's version failed (`crate::audit::edit_replay`).
    EditReplayRun,
    /// A test twice in a row by itself on the head.
    NioRun,
    /// A head finding checked on the base.
    BaseCheck,
    /// The tests whose source the patch edited.
    EditedTests,
    /// Whether the patch changed a `conftest.py`.
    ConftestsDiffer,
    /// The source-side moves of the patch (`crate::audit::source_tamper`).
    SourceTamper,
    /// Every test's bucket and signals.
    Triage,
    /// The budget's breaches.
    Budget,
    /// The verdict.
    Verdict,
}

impl NodeKind {
    /// The version of what a node of the kind computes from its key and of how its output is
    /// encoded: raised when either changes, so that no cached entry of the earlier meaning is
    /// read. It enters the key from version 2 on; version 1 is the keys every node had before
    /// versions were counted.
    ///
    /// - budget 2, verdict 2: the budget's breaches and the verdict's reasons are typed values
    ///   (`audit::budget::Breach`, `audit::verdict::Reason`), no longer the report's lines; the
    ///   verdict's key writes each finding's kind by its ordinal, where its name was ambiguous
    ///   (`deleted-test` is a kind that rejects and one that does not).
    /// - verdict 3: an edited test whose replay could not decide makes the verdict
    ///   `unverified` (`Reason::Undecided`).
    pub(crate) const fn version(self) -> u32 {
        match self {
            NodeKind::Budget => 2,
            NodeKind::Verdict => 3,
            _ => 1,
        }
    }

    /// The kind's name, as keys and reports have it.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            NodeKind::Snapshot => "snapshot",
            NodeKind::Manifest => "manifest",
            NodeKind::LockCheck => "lock-check",
            NodeKind::Delta => "delta",
            NodeKind::Collect => "collect",
            NodeKind::CarriedCollect => "carried-collect",
            NodeKind::SeedRun => "seed-run",
            NodeKind::CarriedRun => "carried-run",
            NodeKind::Matrix => "matrix",
            NodeKind::ConfirmRun => "confirm-run",
            NodeKind::AloneRun => "alone-run",
            NodeKind::RedTogetherRun => "red-together-run",
            NodeKind::AloneTogetherRun => "alone-together-run",
            NodeKind::BisectRun => "bisect-run",
            NodeKind::ReuseRun => "reuse-run",
            NodeKind::VerifyRun => "verify-run",
            NodeKind::Pair => "pair",
            NodeKind::ReplayRun => "replay-run",
            NodeKind::BaseSuiteRun => "base-suite-run",
            NodeKind::BaseSuiteControl => "base-suite-control",
            NodeKind::EditReplayRun => "edit-replay-run",
            NodeKind::NioRun => "nio-run",
            NodeKind::BaseCheck => "base-check",
            NodeKind::EditedTests => "edited-tests",
            NodeKind::ConftestsDiffer => "conftests-differ",
            NodeKind::SourceTamper => "source-tamper",
            NodeKind::Triage => "triage",
            NodeKind::Budget => "budget",
            NodeKind::Verdict => "verdict",
        }
    }

    /// The label of the kind's one node in an audit: `lock-check`, `matrix`, `triage`.
    pub(crate) fn label(self) -> String {
        self.as_str().to_owned()
    }

    /// `kind(subject)`: `seed-run(3)`, `collect(head)`, `pair(tests/t.py::test_x)`.
    pub(crate) fn of(self, subject: impl Display) -> String {
        format!("{}({subject})", self.as_str())
    }

    /// `kind(subject)[tag]`, for runs of one subject told apart by what they run:
    /// `verify-run(tests/t.py::test_x)[3f2a9c01b7de]`.
    pub(crate) fn tagged(self, subject: impl Display, tag: impl Display) -> String {
        format!("{}[{tag}]", self.of(subject))
    }
}

/// The `k`-th repetition of a labelled run: the first keeps the label, the others are
/// `label#k`.
pub(crate) fn repeat(label: String, k: u32) -> String {
    match k {
        0 => label,
        k => format!("{label}#{k}"),
    }
}

/// The label of an order check of a pair: a rerun of one seed order up to the victim
/// (`order-check(victim)[order]`), a node of kind [`NodeKind::ConfirmRun`].
pub(crate) fn order_check(victim: &str, order: impl Display) -> String {
    format!("order-check({victim})[{order}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_keep_the_spelling_they_have_always_had() {
        assert_eq!(NodeKind::Collect.of("head"), "collect(head)");
        assert_eq!(
            repeat(NodeKind::ConfirmRun.of("rev"), 2),
            "confirm-run(rev)#2"
        );
        assert_eq!(repeat(NodeKind::SeedRun.of(3), 0), "seed-run(3)");
        assert_eq!(
            NodeKind::VerifyRun.tagged("t.py::x", "abc"),
            "verify-run(t.py::x)[abc]"
        );
        assert_eq!(order_check("t.py::x", "rev"), "order-check(t.py::x)[rev]");
        assert_eq!(NodeKind::LockCheck.label(), "lock-check");
    }
}
