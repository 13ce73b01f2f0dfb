//! The verdict: what every finding means for the patch, and the one answer with its exit code,
//! following DESIGN.md's triage policy and precedence
//! (error > drift > expired-freeze > reject > unverified > pass), which is [`Verdict`]'s order.
//!
//! # Adding a finding kind
//!
//! A new kind of finding is one variant of [`FindingKind`] (its name, its noun, whether it is a
//! code defect, all in this file) and one rule that produces it from typed evidence (in
//! `audit::findings`, or beside the phase whose evidence it reads). Its message is
//! `audit::message`'s default line (`<subject>: <kind>`) until that module gives it one of its
//! own; the renderers, the verdict and the report need nothing else.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::exit;

/// The audit's answer, ordered by precedence: the greater of two verdicts wins (one audit's
/// gates, or the reports of several heads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verdict {
    Pass,
    Unverified,
    Reject,
    ExpiredFreeze,
    Drift,
    /// Nothing was judged (also what a report that knows nothing else says).
    #[default]
    Error,
}

impl Verdict {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Reject => "reject",
            Verdict::Unverified => "unverified",
            Verdict::Drift => "drift",
            Verdict::ExpiredFreeze => "expired-freeze",
            Verdict::Error => "error",
        }
    }

    pub(crate) fn exit_code(self) -> i32 {
        match self {
            Verdict::Pass => exit::PASS,
            Verdict::Reject => exit::REJECT,
            Verdict::Unverified => exit::UNVERIFIED,
            Verdict::Drift => exit::DRIFT,
            Verdict::ExpiredFreeze => exit::EXPIRED_FREEZE,
            Verdict::Error => exit::ERROR,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Verdict {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Verdict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Verdict, D::Error> {
        let name = String::deserialize(deserializer)?;
        [
            Verdict::Pass,
            Verdict::Reject,
            Verdict::Unverified,
            Verdict::Drift,
            Verdict::ExpiredFreeze,
            Verdict::Error,
        ]
        .into_iter()
        .find(|v| v.as_str() == name)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown verdict {name:?}")))
    }
}

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
    /// A base test the patch deleted that fails on the head's code (`audit::hidden`).
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
}

impl FindingKind {
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

    /// A failure of a base test on the head's code that the patch hid (`audit::hidden`), or a
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

/// What a finding does to the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Disposition {
    /// Rejects the patch.
    Rejects,
    /// A pre-existing defect: reported as known debt with a suggested freeze entry.
    KnownDebt,
    /// Flaky: not the patch's defect; suggest a freeze entry with owner and expiry.
    Ledger,
    /// Cosmetic fixture change: passes, flagged for a one-line justification.
    Justify,
    /// Additive fixture: passes; the fixture is reviewed as new code.
    Review,
    /// Reported only (new skips go through the budget; ledger and lock edits have no effect).
    Report,
}

/// Decides one finding. A defect rejects when the patch introduced it, when the patch edited a
/// test of it (then it is the patch's, even if the base has it too), or under `--strict`.
/// Flaky never rejects, not even under `--strict`: it is an environment defect.
pub(crate) fn disposition(finding: &Finding, strict: bool) -> Disposition {
    match finding.kind {
        kind if kind.is_defect() => {
            if finding.introduced || finding.edited_by_patch || strict {
                Disposition::Rejects
            } else {
                Disposition::KnownDebt
            }
        }
        // Nondeterminism is the environment's defect, for the ledger; but a test the patch
        // wrote or edited is the patch's, and a flaky new test is no green at all.
        FindingKind::Flaky if finding.introduced || finding.edited_by_patch => Disposition::Rejects,
        FindingKind::Flaky => Disposition::Ledger,
        FindingKind::Cosmetic => Disposition::Justify,
        FindingKind::Additive => Disposition::Review,
        _ => Disposition::Report,
    }
}

/// Everything the verdict weighs. Each string is one reason line, ready for the report.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Gates<'a> {
    /// Infrastructure failures: nothing was judged.
    pub(crate) errors: &'a [String],
    /// Fixture files that differ from the lock (checked before any test runs), each
    /// `<lock file>: <path> (<change>)`.
    pub(crate) drift: &'a [String],
    /// Expired freeze entries (checked before any test runs).
    pub(crate) expired: &'a [String],
    pub(crate) findings: &'a [Finding],
    /// The budget's breach lines.
    pub(crate) breaches: &'a [String],
    pub(crate) strict: bool,
}

/// The verdict, the reasons for it, and each finding's disposition (same order as the input).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Decision {
    pub(crate) verdict: Verdict,
    /// Why this verdict: the lines of its own gate only (empty for pass).
    pub(crate) reasons: Vec<String>,
    pub(crate) dispositions: Vec<Disposition>,
}

impl Decision {
    /// A pass with nothing weighed (a share of a sharded matrix judges nothing).
    pub(crate) fn pass() -> Decision {
        Decision {
            verdict: Verdict::Pass,
            reasons: Vec::new(),
            dispositions: Vec::new(),
        }
    }
}

/// Applies the precedence error > drift > expired-freeze > reject > unverified > pass.
pub(crate) fn decide(gates: &Gates) -> Decision {
    let dispositions: Vec<Disposition> = gates
        .findings
        .iter()
        .map(|f| disposition(f, gates.strict))
        .collect();
    let line = |prefix: &str, lines: &[String]| -> Vec<String> {
        lines.iter().map(|l| format!("{prefix}{l}")).collect()
    };
    let rejects: Vec<String> = gates
        .findings
        .iter()
        .zip(&dispositions)
        .filter(|(_, d)| **d == Disposition::Rejects)
        .map(|(f, _)| format!("{} {}: {}", f.kind, f.subject, why_rejects(f)))
        .collect();
    // Every gate that has something to say, the verdict of the gravest: `Verdict`'s order is
    // the precedence.
    let (verdict, reasons) = [
        (Verdict::Error, gates.errors.to_vec()),
        (Verdict::Drift, line("fixture differs from ", gates.drift)),
        (
            Verdict::ExpiredFreeze,
            line("freeze entry expired: ", gates.expired),
        ),
        (Verdict::Reject, rejects),
        (Verdict::Unverified, line("over budget: ", gates.breaches)),
    ]
    .into_iter()
    .filter(|(_, reasons)| !reasons.is_empty())
    .max_by_key(|(v, _)| *v)
    .unwrap_or((Verdict::Pass, Vec::new()));
    Decision {
        verdict,
        reasons,
        dispositions,
    }
}

fn why_rejects(finding: &Finding) -> &'static str {
    if finding.introduced {
        "introduced by the patch"
    } else if finding.edited_by_patch {
        "the base has it too, but the patch edited its test"
    } else {
        "the base has it too; rejected under --strict"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::budget::{Breach, NewSkip};

    fn finding(kind: FindingKind, introduced: bool, edited: bool) -> Finding {
        Finding {
            kind,
            subject: "tests/t.py::test_x".into(),
            introduced,
            edited_by_patch: edited,
        }
    }

    fn verdict(findings: &[Finding], strict: bool) -> Verdict {
        decide(&Gates {
            findings,
            strict,
            ..Gates::default()
        })
        .verdict
    }

    fn new_skip() -> Breach {
        Breach::NewSkips {
            skips: vec![NewSkip {
                nodeid: "tests/t.py::test_s".into(),
                marker: "skip".into(),
                reason: None,
            }],
            limit: 0,
        }
    }

    const DEFECTS: [FindingKind; 10] = [
        FindingKind::OrderDependent,
        FindingKind::Polluter,
        FindingKind::LeaseViolation,
        FindingKind::Redefined,
        FindingKind::Failing,
        FindingKind::Crashed,
        FindingKind::Timeout,
        FindingKind::ResourceLimit,
        FindingKind::ErrorBucket,
        FindingKind::NonIdempotent,
    ];

    #[test]
    fn the_order_of_verdicts_is_their_precedence() {
        let mut all = [
            Verdict::Error,
            Verdict::Pass,
            Verdict::Drift,
            Verdict::Unverified,
            Verdict::ExpiredFreeze,
            Verdict::Reject,
        ];
        all.sort();
        assert_eq!(
            all.map(Verdict::exit_code),
            [
                exit::PASS,
                exit::UNVERIFIED,
                exit::REJECT,
                exit::EXPIRED_FREEZE,
                exit::DRIFT,
                exit::ERROR
            ]
        );
    }

    #[test]
    fn names_and_exit_codes() {
        let all = [
            (Verdict::Pass, "pass", 0),
            (Verdict::Reject, "reject", 1),
            (Verdict::Error, "error", 2),
            (Verdict::Drift, "drift", 3),
            (Verdict::Unverified, "unverified", 4),
            (Verdict::ExpiredFreeze, "expired-freeze", 5),
        ];
        for (v, name, code) in all {
            assert_eq!((v.as_str(), v.exit_code()), (name, code));
            assert_eq!(
                serde_json::to_string(&v).unwrap_or_default(),
                format!("\"{name}\"")
            );
        }
    }

    #[test]
    fn nothing_found_passes() {
        let d = decide(&Gates::default());
        assert_eq!(
            (d.verdict, d.reasons.len(), d.verdict.exit_code()),
            (Verdict::Pass, 0, 0)
        );
    }

    #[test]
    fn introduced_defects_reject() {
        for kind in DEFECTS {
            assert_eq!(
                verdict(&[finding(kind, true, false)], false),
                Verdict::Reject,
                "{kind}"
            );
        }
    }

    #[test]
    fn pre_existing_defects_are_known_debt() {
        for kind in DEFECTS {
            let f = [finding(kind, false, false)];
            assert_eq!(verdict(&f, false), Verdict::Pass, "{kind}");
            assert_eq!(disposition(&f[0], false), Disposition::KnownDebt);
        }
    }

    #[test]
    fn pre_existing_defects_reject_when_the_patch_edited_the_test() {
        let f = [finding(FindingKind::OrderDependent, false, true)];
        let d = decide(&Gates {
            findings: &f,
            ..Gates::default()
        });
        assert_eq!(d.verdict, Verdict::Reject);
        assert_eq!(
            d.reasons,
            [
                "order-dependent tests/t.py::test_x: the base has it too, but the patch edited \
              its test"
            ]
        );
    }

    #[test]
    fn strict_rejects_pre_existing_defects() {
        for kind in DEFECTS {
            let f = [finding(kind, false, false)];
            let d = decide(&Gates {
                findings: &f,
                strict: true,
                ..Gates::default()
            });
            assert_eq!(d.verdict, Verdict::Reject, "{kind}");
            assert!(
                d.reasons[0].ends_with("rejected under --strict"),
                "{:?}",
                d.reasons
            );
        }
    }

    #[test]
    fn flaky_rejects_only_a_test_the_patch_wrote_or_edited() {
        // A test the base has, untouched: the ledger, even under --strict.
        for strict in [false, true] {
            let f = [finding(FindingKind::Flaky, false, false)];
            assert_eq!(verdict(&f, strict), Verdict::Pass);
            assert_eq!(disposition(&f[0], strict), Disposition::Ledger);
        }
        for (introduced, edited) in [(true, false), (false, true), (true, true)] {
            let f = [finding(FindingKind::Flaky, introduced, edited)];
            assert_eq!(verdict(&f, false), Verdict::Reject);
            assert_eq!(disposition(&f[0], false), Disposition::Rejects);
        }
    }

    #[test]
    fn cosmetic_and_additive_pass_with_their_flags() {
        let f = [
            finding(FindingKind::Cosmetic, true, false),
            finding(FindingKind::Additive, true, false),
            finding(FindingKind::NewSkip, true, false),
            finding(FindingKind::FreezeAdded, true, false),
            finding(FindingKind::LockChanged, true, false),
        ];
        let d = decide(&Gates {
            findings: &f,
            strict: true,
            ..Gates::default()
        });
        assert_eq!(d.verdict, Verdict::Pass);
        assert_eq!(
            d.dispositions,
            [
                Disposition::Justify,
                Disposition::Review,
                Disposition::Report,
                Disposition::Report,
                Disposition::Report
            ]
        );
    }

    #[test]
    fn a_budget_breach_is_unverified() {
        let breaches = [new_skip().to_string()];
        let d = decide(&Gates {
            breaches: &breaches,
            ..Gates::default()
        });
        assert_eq!(d.verdict, Verdict::Unverified);
        assert_eq!(d.verdict.exit_code(), 4);
        assert_eq!(
            d.reasons,
            ["over budget: 1 new skip (limit 0): tests/t.py::test_s"]
        );
    }

    #[test]
    fn precedence_error_drift_expired_reject_unverified_pass() {
        let errors = ["failed to create a sandbox".to_owned()];
        let drift = ["tests/fixtures.lock.json: tests/fixtures/a.json (modified)".to_owned()];
        let expired = ["tests/t.py::test_y (owner ana, expired 2024-03-01)".to_owned()];
        let findings = [
            finding(FindingKind::Polluter, true, false),
            finding(FindingKind::Flaky, true, false),
        ];
        let breaches = [new_skip().to_string()];
        let mut gates = Gates {
            errors: &errors,
            drift: &drift,
            expired: &expired,
            findings: &findings,
            breaches: &breaches,
            strict: false,
        };
        let mut seen = Vec::new();
        loop {
            let d = decide(&gates);
            seen.push((d.verdict, d.reasons.first().cloned().unwrap_or_default()));
            if !gates.errors.is_empty() {
                gates.errors = &[];
            } else if !gates.drift.is_empty() {
                gates.drift = &[];
            } else if !gates.expired.is_empty() {
                gates.expired = &[];
            } else if !gates.findings.is_empty() {
                gates.findings = &[];
            } else if !gates.breaches.is_empty() {
                gates.breaches = &[];
            } else {
                break;
            }
        }
        assert_eq!(
            seen,
            [
                (Verdict::Error, "failed to create a sandbox".to_owned()),
                (
                    Verdict::Drift,
                    "fixture differs from tests/fixtures.lock.json: tests/fixtures/a.json (modified)"
                        .to_owned()
                ),
                (
                    Verdict::ExpiredFreeze,
                    "freeze entry expired: tests/t.py::test_y (owner ana, expired 2024-03-01)"
                        .to_owned()
                ),
                (
                    Verdict::Reject,
                    "polluter tests/t.py::test_x: introduced by the patch".to_owned()
                ),
                (
                    Verdict::Unverified,
                    "over budget: 1 new skip (limit 0): tests/t.py::test_s".to_owned()
                ),
                (Verdict::Pass, String::new()),
            ]
        );
    }

    #[test]
    fn reject_reasons_list_only_the_rejecting_findings() {
        let findings = [
            Finding {
                kind: FindingKind::Redefined,
                subject: "tests/t.py::test_parse".into(),
                introduced: true,
                edited_by_patch: false,
            },
            finding(FindingKind::OrderDependent, false, false),
            finding(FindingKind::Flaky, false, false),
            finding(FindingKind::Cosmetic, true, false),
        ];
        let d = decide(&Gates {
            findings: &findings,
            ..Gates::default()
        });
        assert_eq!(d.verdict, Verdict::Reject);
        assert_eq!(
            d.reasons,
            ["redefined tests/t.py::test_parse: introduced by the patch"]
        );
        assert_eq!(
            d.dispositions,
            [
                Disposition::Rejects,
                Disposition::KnownDebt,
                Disposition::Ledger,
                Disposition::Justify
            ]
        );
    }

    #[test]
    fn findings_are_disposed_even_when_a_gate_stops_the_audit() {
        let drift = ["x".to_owned()];
        let findings = [finding(FindingKind::Failing, true, false)];
        let d = decide(&Gates {
            drift: &drift,
            findings: &findings,
            ..Gates::default()
        });
        assert_eq!(d.verdict, Verdict::Drift);
        assert_eq!(d.dispositions, [Disposition::Rejects]);
    }
}
