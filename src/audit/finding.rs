//! What a finding is: its kind (its name in the report, its noun, whether it is a code
//! defect) and what it is about. The rules that make findings are `audit::findings`; what each
//! does to the verdict is `audit::verdict`.

use std::fmt;

use serde::{Serialize, Serializer};

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum FindingKind {
    /// A test whose outcome is a function of the order (a victim or a brittle test).
    OrderDependent,
    /// The culprit of a found pair: a test that breaks another.
    Polluter,
    /// A test that changed a fixture group it holds no lease on.
    LeaseViolation,
    /// A coupled test that passes on head fixtures and fails on base fixtures: the patch moved
    /// the answer key.
    Redefined,
    /// Fails in every order (and alone).
    Failing,
    Crashed,
    Timeout,
    /// A test hit a bound of its run (memory, processes, disk): a fork bomb, a memory grab, a
    /// disk fill, or a test that needs more than the run allows.
    ResourceLimit,
    /// Setup or teardown errors in every order (the `error` bucket).
    ErrorBucket,
    /// Differs between reruns of the same order: an environment defect, for the ledger.
    Flaky,
    /// A fixture change that every coupled test passes on both corpora.
    Cosmetic,
    /// A new test that reads only new fixtures.
    Additive,
    /// A new skip or xfail marker; the budget judges it, not this finding.
    NewSkip,
    /// A freeze entry the patch adds or extends; the ledger is read from the base, so it has no
    /// effect on this audit.
    FreezeAdded,
    /// A change the patch makes to `fixtures.lock`; the lock is read from the base.
    LockChanged,
    /// A test wrote (or removed, renamed, made a folder) outside its run's sandbox: in the user's
    /// repository, their home, `/tmp`. Blocked where runs are contained, a defect either way.
    OutsideWrite,
    /// The head's suite does not collect while the base's does (a syntax error, a conftest that
    /// raises): the patch broke the suite.
    CollectionError,
    /// An edited test that passes with the head's test code and fails with the base's on the
    /// same code: the expected value moved with the code.
    RedefinedTest,
    /// An edited test that passes with both versions of its test code.
    TestRefactor,
    /// A test that passes, then fails when run again in the same process (`--nio`): it
    /// pollutes its own state.
    NonIdempotent,
    /// The patch edited the assertion of an order-dependent test the base had: it changed the
    /// test instead of isolating it. Reported beside the victim's `order-dependent` finding,
    /// which is what the verdict weighs.
    EditedAssertion,
    /// `--check`: a cached run's outcome differs from a fresh run of the same order. Reported
    /// only: what it says is that a cache entry was a coin flip.
    Nondeterministic,
    /// A base test the patch deleted that fails on the head's code (`audit::base_suite`).
    DeletedTest,
    /// A base test the patch deleted with the code it exercised: reported (`deleted-test`, not
    /// blocking).
    DeletedWithItsCode,
    /// A base test the head's collection or configuration drops, that fails on the head's code.
    DeselectedTest,
    /// A base test renamed or moved out of what pytest collects, that fails on the head's code.
    UncollectedTest,
    /// A base test the patch skips, that fails on the head's code.
    SkippedTest,
    /// A base test the patch marks as an expected failure, that fails on the head's code.
    XfailedTest,
    /// A test whose outcome a hook, a conftest or the configuration made green: the plugin saw
    /// it fail, or it fails on the head's code with the base's conftests and configuration.
    HookAlteredOutcome,
    /// A condition the patch added to the code on a literal a test file holds: the code may
    /// special-case the test's input (`audit::source_tamper`). A warning: the base's tests
    /// pass on such code, and an honest fix may test the very input it handles.
    SpecialCasedInput,
    /// An `__eq__` or `__ne__` the patch added or changed that never reads what it compares
    /// with: every equality assertion on the class passes. A warning, like the above.
    EqIgnoresArgument,
    /// A test that left shared state changed behind it (a module global, an environment
    /// variable...): a polluter without a victim, reported, never blocking by itself.
    LeaksState,
    /// A base test whose code the patch left alone that passes at head only after tests the
    /// patch added run before it in its file: the base's file fails on the head's code, and so
    /// does the head's file without the new tests (`audit::base_suite`). A defect: a base test
    /// now needs a new test to run first.
    DependsOnNewTest,
    /// The same, in a chain marked `serial` (the test and the new tests it needs keep their
    /// places in every order): the patch added a step to the chain. Reported, the new step
    /// reviewed as new code.
    NewChainStep,
    /// A `try` the patch added whose handler catches every error and returns or assigns a
    /// constant (`audit::source_tamper`): a failure turned into a made-up answer. A warning.
    SwallowedError,
}

impl FindingKind {
    /// Every kind, in declaration order.
    pub(crate) const ALL: [FindingKind; 35] = [
        FindingKind::OrderDependent,
        FindingKind::Polluter,
        FindingKind::LeaseViolation,
        FindingKind::Redefined,
        FindingKind::Failing,
        FindingKind::Crashed,
        FindingKind::Timeout,
        FindingKind::ResourceLimit,
        FindingKind::ErrorBucket,
        FindingKind::Flaky,
        FindingKind::Cosmetic,
        FindingKind::Additive,
        FindingKind::NewSkip,
        FindingKind::FreezeAdded,
        FindingKind::LockChanged,
        FindingKind::OutsideWrite,
        FindingKind::CollectionError,
        FindingKind::RedefinedTest,
        FindingKind::TestRefactor,
        FindingKind::NonIdempotent,
        FindingKind::EditedAssertion,
        FindingKind::Nondeterministic,
        FindingKind::DeletedTest,
        FindingKind::DeletedWithItsCode,
        FindingKind::DeselectedTest,
        FindingKind::UncollectedTest,
        FindingKind::SkippedTest,
        FindingKind::XfailedTest,
        FindingKind::HookAlteredOutcome,
        FindingKind::SpecialCasedInput,
        FindingKind::EqIgnoresArgument,
        FindingKind::LeaksState,
        FindingKind::DependsOnNewTest,
        FindingKind::NewChainStep,
        FindingKind::SwallowedError,
    ];

    /// Its place among the kinds (declaration order, [`FindingKind::ALL`]'s): one number per
    /// kind, where the report's names are not (`deleted-test` is two kinds).
    pub(crate) fn ordinal(self) -> u32 {
        self as u32
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FindingKind::OrderDependent => "order-dependent",
            FindingKind::Polluter => "polluter",
            FindingKind::LeaseViolation => "lease-violation",
            FindingKind::Redefined => "redefined",
            FindingKind::Failing => "failing",
            FindingKind::Crashed => "crashed",
            FindingKind::Timeout => "timeout",
            FindingKind::ResourceLimit => "resource-limit",
            FindingKind::ErrorBucket => "error",
            FindingKind::Flaky => "flaky",
            FindingKind::Cosmetic => "cosmetic",
            FindingKind::Additive => "additive",
            FindingKind::NewSkip => "new-skip",
            FindingKind::FreezeAdded => "freeze-added",
            FindingKind::LockChanged => "lock-changed",
            FindingKind::OutsideWrite => "outside-write",
            FindingKind::CollectionError => "collection-error",
            FindingKind::RedefinedTest => "redefined-test",
            FindingKind::TestRefactor => "test-refactor",
            FindingKind::NonIdempotent => "non-idempotent",
            FindingKind::DeletedTest | FindingKind::DeletedWithItsCode => "deleted-test",
            FindingKind::DeselectedTest => "deselected-test",
            FindingKind::UncollectedTest => "uncollected-test",
            FindingKind::SkippedTest => "skipped-test",
            FindingKind::XfailedTest => "xfailed-test",
            FindingKind::HookAlteredOutcome => "hook-altered-outcome",
            FindingKind::SpecialCasedInput => "special-cased-input",
            FindingKind::EqIgnoresArgument => "eq-ignores-argument",
            FindingKind::EditedAssertion => "edited-assertion",
            FindingKind::Nondeterministic => "nondeterministic",
            FindingKind::LeaksState => "leaks-state",
            FindingKind::DependsOnNewTest => "depends-on-new-test",
            FindingKind::NewChainStep => "new-chain-step",
            FindingKind::SwallowedError => "swallowed-error",
        }
    }

    /// What one finding of the kind is called in a sentence, singular and plural.
    pub(crate) fn noun(self) -> (&'static str, &'static str) {
        match self {
            FindingKind::OrderDependent => ("order-dependent test", "order-dependent tests"),
            FindingKind::Polluter => ("polluter", "polluters"),
            FindingKind::LeaseViolation => ("lease violation", "lease violations"),
            FindingKind::Redefined => ("redefined test", "redefined tests"),
            FindingKind::Cosmetic => ("cosmetic fixture change", "cosmetic fixture changes"),
            FindingKind::Additive => ("additive fixture", "additive fixtures"),
            FindingKind::Failing => ("failing test", "failing tests"),
            FindingKind::Crashed => ("crashed test", "crashed tests"),
            FindingKind::Timeout => ("timed-out test", "timed-out tests"),
            FindingKind::ResourceLimit => ("test over a run's limit", "tests over a run's limits"),
            FindingKind::ErrorBucket => ("test error", "test errors"),
            FindingKind::Flaky => ("flaky test", "flaky tests"),
            FindingKind::NewSkip => ("new skip", "new skips"),
            FindingKind::FreezeAdded => ("freeze entry added", "freeze entries added"),
            FindingKind::LockChanged => ("lock change", "lock changes"),
            FindingKind::EditedAssertion => ("edited assertion", "edited assertions"),
            FindingKind::NonIdempotent => ("non-idempotent test", "non-idempotent tests"),
            FindingKind::LeaksState => ("test leaking state", "tests leaking state"),
            FindingKind::DependsOnNewTest => (
                "test depending on a new test",
                "tests depending on new tests",
            ),
            FindingKind::NewChainStep => {
                ("new step of a serial chain", "new steps of serial chains")
            }
            FindingKind::SwallowedError => ("swallowed error", "swallowed errors"),
            FindingKind::OutsideWrite => ("outside-write finding", "outside-write findings"),
            FindingKind::CollectionError => {
                ("collection-error finding", "collection-error findings")
            }
            FindingKind::RedefinedTest => ("redefined-test finding", "redefined-test findings"),
            FindingKind::TestRefactor => ("test-refactor finding", "test-refactor findings"),
            FindingKind::Nondeterministic => {
                ("nondeterministic finding", "nondeterministic findings")
            }
            FindingKind::DeletedTest | FindingKind::DeletedWithItsCode => {
                ("deleted test", "deleted tests")
            }
            FindingKind::DeselectedTest => ("deselected test", "deselected tests"),
            FindingKind::UncollectedTest => ("uncollected test", "uncollected tests"),
            FindingKind::SkippedTest => ("skipped test", "skipped tests"),
            FindingKind::XfailedTest => ("xfailed test", "xfailed tests"),
            FindingKind::HookAlteredOutcome => ("hook-altered outcome", "hook-altered outcomes"),
            FindingKind::SpecialCasedInput => ("special-cased input", "special-cased inputs"),
            FindingKind::EqIgnoresArgument => (
                "equality that ignores its argument",
                "equalities that ignore their argument",
            ),
        }
    }

    /// A failure of a base test on the head's code that the patch hid (`audit::base_suite`), or a
    /// test deleted with its code.
    pub(crate) fn is_hidden(self) -> bool {
        matches!(
            self,
            FindingKind::DeletedTest
                | FindingKind::DeletedWithItsCode
                | FindingKind::DeselectedTest
                | FindingKind::UncollectedTest
                | FindingKind::SkippedTest
                | FindingKind::XfailedTest
                | FindingKind::RedefinedTest
                | FindingKind::HookAlteredOutcome
        )
    }

    /// A finding read from the patch's source rather than from a run (`audit::source_tamper`):
    /// a warning, or unverified under `--strict-source`.
    pub(crate) fn is_source_check(self) -> bool {
        matches!(
            self,
            FindingKind::SpecialCasedInput
                | FindingKind::EqIgnoresArgument
                | FindingKind::SwallowedError
        )
    }

    /// A code defect: rejects the patch when the patch owns it.
    pub(crate) fn is_defect(self) -> bool {
        matches!(
            self,
            FindingKind::OrderDependent
                | FindingKind::Polluter
                | FindingKind::LeaseViolation
                | FindingKind::Redefined
                | FindingKind::Failing
                | FindingKind::Crashed
                | FindingKind::Timeout
                | FindingKind::ResourceLimit
                | FindingKind::ErrorBucket
                | FindingKind::OutsideWrite
                | FindingKind::CollectionError
                | FindingKind::RedefinedTest
                | FindingKind::NonIdempotent
                | FindingKind::EditedAssertion
                | FindingKind::DeletedTest
                | FindingKind::DeselectedTest
                | FindingKind::UncollectedTest
                | FindingKind::SkippedTest
                | FindingKind::XfailedTest
                | FindingKind::HookAlteredOutcome
                | FindingKind::DependsOnNewTest
        )
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FindingKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One thing the audit found, as the verdict needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    pub(crate) kind: FindingKind,
    /// What it is about, for the reasons: a nodeid, or `"POLLUTER -> VICTIM"` for a pair.
    pub(crate) subject: String,
    /// The base does not show it (checked on the base snapshot with the same evidence).
    pub(crate) introduced: bool,
    /// The patch edited a test of the finding (either test of a pair).
    pub(crate) edited_by_patch: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_at_its_own_place() {
        for (i, kind) in FindingKind::ALL.iter().enumerate() {
            assert_eq!(kind.ordinal() as usize, i, "{kind:?}");
        }
        assert_eq!(
            FindingKind::SwallowedError.ordinal() as usize,
            FindingKind::ALL.len() - 1,
            "the last kind declared is the last listed"
        );
    }
}
