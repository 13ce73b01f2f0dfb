//! The verdict: what every finding means for the patch, and the one answer with its exit code,
//! following DESIGN.md's triage policy and precedence
//! (error > drift > expired-freeze > reject > unverified > pass), which is [`Verdict`]'s order.
//!
//! # Adding a finding kind
//!
//! A new kind of finding is one variant of [`FindingKind`] (its name, its noun, whether it is a
//! code defect, all in `audit::finding`) and one rule that produces it from typed evidence (in
//! `audit::findings`, or beside the phase whose evidence it reads). Its message is
//! `report::message`'s default line (`<subject>: <kind>`) until that module gives it one of its
//! own; the renderers, the verdict and the report need nothing else. The verdict's reasons are
//! typed ([`Reason`]); `report::reasons` says them.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::audit::budget::Breach;
use crate::audit::finding::{Finding, FindingKind};
use crate::audit::gates::Expired;
use crate::audit::lock::Drifted;
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
    /// Every verdict.
    pub(crate) const ALL: [Verdict; 6] = [
        Verdict::Pass,
        Verdict::Reject,
        Verdict::Unverified,
        Verdict::Drift,
        Verdict::ExpiredFreeze,
        Verdict::Error,
    ];

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
        Verdict::ALL
            .into_iter()
            .find(|v| v.as_str() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown verdict {name:?}")))
    }
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
    /// A source-side finding under `--strict-source`: the verdict is unverified.
    Unverifies,
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
        FindingKind::Additive | FindingKind::NewChainStep => Disposition::Review,
        _ => Disposition::Report,
    }
}

/// Everything the verdict weighs besides the budget's breaches, which the budget step gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Weighed {
    pub(crate) findings: Vec<Finding>,
    /// Fixture files that differ from the lock (checked before any test runs).
    pub(crate) drift: Vec<Drifted>,
    /// Freeze entries past their date (checked before any test runs).
    pub(crate) expired: Vec<Expired>,
    /// Edited tests whose replay could not decide whether the edit moved their expectation.
    pub(crate) undecided: Vec<UndecidedReplay>,
    pub(crate) strict: bool,
    /// The source-side findings make the verdict unverified (`--strict-source`).
    pub(crate) strict_source: bool,
}

/// An edited test whose replay could not decide, and why (`audit::source_replay`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UndecidedReplay {
    pub(crate) nodeid: String,
    pub(crate) why: crate::audit::source_replay::Undecided,
}

impl Weighed {
    /// The findings of an audit that judged its tests (no gate stopped it).
    pub(crate) fn findings(findings: Vec<Finding>, strict: bool) -> Weighed {
        Weighed {
            findings,
            strict,
            ..Weighed::default()
        }
    }
}

/// Why the verdict is what it is: one reason per thing its gate found. The report says each in
/// words (`report::reasons`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Reason {
    /// A fixture file differs from the lock.
    Drift(Drifted),
    /// A freeze entry is past its date.
    Expired(Expired),
    /// A finding rejects the patch.
    Rejects {
        #[serde(with = "kind_index")]
        kind: FindingKind,
        subject: String,
        because: Because,
    },
    /// The audit went over a limit of its budget.
    OverBudget(Breach),
    /// The replay of an edited test could not decide whether the edit moved its expectation.
    Undecided(UndecidedReplay),
    /// A source-side finding, under `--strict-source`.
    SourceCheck {
        #[serde(with = "kind_index")]
        kind: FindingKind,
        subject: String,
    },
}

/// Why a finding rejects the patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Because {
    /// The base does not show it.
    Introduced,
    /// The base shows it too, but the patch edited its test.
    EditedItsTest,
    /// The base shows it too, and `--strict` rejects what the base has.
    Strict,
}

/// The verdict, the reasons for it, and each finding's disposition (same order as the input).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Decision {
    pub(crate) verdict: Verdict,
    /// Why this verdict: what its own gate found only (empty for pass).
    pub(crate) reasons: Vec<Reason>,
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

/// Applies the precedence drift > expired-freeze > reject > unverified > pass (an error is
/// what an audit that judged nothing reports, never decided here).
pub(crate) fn decide(weighed: &Weighed, breaches: &[Breach]) -> Decision {
    let dispositions: Vec<Disposition> = (weighed.findings.iter())
        .map(
            |f| match weighed.strict_source && f.kind.is_source_check() {
                true => Disposition::Unverifies,
                false => disposition(f, weighed.strict),
            },
        )
        .collect();
    let source: Vec<Reason> = (weighed.findings.iter().zip(&dispositions))
        .filter(|(_, d)| **d == Disposition::Unverifies)
        .map(|(f, _)| Reason::SourceCheck {
            kind: f.kind,
            subject: f.subject.clone(),
        })
        .collect();
    let rejects: Vec<Reason> = weighed
        .findings
        .iter()
        .zip(&dispositions)
        .filter(|(_, d)| **d == Disposition::Rejects)
        .map(|(f, _)| Reason::Rejects {
            kind: f.kind,
            subject: f.subject.clone(),
            because: because(f),
        })
        .collect();
    // Every gate that has something to say, the verdict of the gravest: `Verdict`'s order is
    // the precedence.
    let (verdict, reasons) = [
        (
            Verdict::Drift,
            weighed.drift.iter().cloned().map(Reason::Drift).collect(),
        ),
        (
            Verdict::ExpiredFreeze,
            weighed
                .expired
                .iter()
                .cloned()
                .map(Reason::Expired)
                .collect(),
        ),
        (Verdict::Reject, rejects),
        (
            Verdict::Unverified,
            (breaches.iter().cloned().map(Reason::OverBudget))
                .chain(weighed.undecided.iter().cloned().map(Reason::Undecided))
                .chain(source)
                .collect(),
        ),
    ]
    .into_iter()
    .filter(|(_, reasons): &(Verdict, Vec<Reason>)| !reasons.is_empty())
    .max_by_key(|(v, _)| *v)
    .unwrap_or((Verdict::Pass, Vec::new()));
    Decision {
        verdict,
        reasons,
        dispositions,
    }
}

/// The reason a finding judged beside the verdict's (an edited assertion, reported beside
/// the victim's order-dependence the verdict weighs) gives, when it rejects.
pub(crate) fn rejection(finding: &Finding, strict: bool) -> Option<Reason> {
    (disposition(finding, strict) == Disposition::Rejects).then(|| Reason::Rejects {
        kind: finding.kind,
        subject: finding.subject.clone(),
        because: because(finding),
    })
}

fn because(finding: &Finding) -> Because {
    if finding.introduced {
        Because::Introduced
    } else if finding.edited_by_patch {
        Because::EditedItsTest
    } else {
        Because::Strict
    }
}

/// A [`FindingKind`] in a cached decision, by its place in [`FindingKind::ALL`]: its report name
/// is not one to one (`deleted-test` is two kinds).
mod kind_index {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::FindingKind;

    pub(super) fn serialize<S: Serializer>(kind: &FindingKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(kind.ordinal())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<FindingKind, D::Error> {
        let at = u32::deserialize(d)? as usize;
        FindingKind::ALL
            .get(at)
            .copied()
            .ok_or_else(|| serde::de::Error::custom(format!("no finding kind {at}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::budget::NewSkip;
    use crate::delta::Change;

    fn finding(kind: FindingKind, introduced: bool, edited: bool) -> Finding {
        Finding {
            kind,
            subject: "tests/t.py::test_x".into(),
            introduced,
            edited_by_patch: edited,
        }
    }

    fn weighed(findings: &[Finding], strict: bool) -> Weighed {
        Weighed {
            findings: findings.to_vec(),
            strict,
            ..Weighed::default()
        }
    }

    fn verdict(findings: &[Finding], strict: bool) -> Verdict {
        decide(&weighed(findings, strict), &[]).verdict
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

    fn rejects(kind: FindingKind, subject: &str, because: Because) -> Reason {
        Reason::Rejects {
            kind,
            subject: subject.into(),
            because,
        }
    }

    #[test]
    fn a_finding_judged_beside_the_verdict_gives_its_reason_when_it_rejects() {
        let edited = |introduced, strict| {
            let f = Finding {
                kind: FindingKind::EditedAssertion,
                subject: "tests/t.py::test_v".into(),
                introduced,
                edited_by_patch: true,
            };
            rejection(&f, strict)
        };
        assert_eq!(
            edited(true, false),
            Some(rejects(
                FindingKind::EditedAssertion,
                "tests/t.py::test_v",
                Because::Introduced
            ))
        );
        assert_eq!(
            edited(false, false),
            Some(rejects(
                FindingKind::EditedAssertion,
                "tests/t.py::test_v",
                Because::EditedItsTest
            ))
        );
        let flaky = Finding {
            kind: FindingKind::Flaky,
            subject: "tests/t.py::test_f".into(),
            introduced: false,
            edited_by_patch: false,
        };
        assert_eq!(rejection(&flaky, true), None);
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
        let d = decide(&Weighed::default(), &[]);
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
        let d = decide(&weighed(&f, false), &[]);
        assert_eq!(d.verdict, Verdict::Reject);
        assert_eq!(
            d.reasons,
            [rejects(
                FindingKind::OrderDependent,
                "tests/t.py::test_x",
                Because::EditedItsTest
            )]
        );
    }

    #[test]
    fn strict_rejects_pre_existing_defects() {
        for kind in DEFECTS {
            let f = [finding(kind, false, false)];
            let d = decide(&weighed(&f, true), &[]);
            assert_eq!(d.verdict, Verdict::Reject, "{kind}");
            assert_eq!(
                d.reasons,
                [rejects(kind, "tests/t.py::test_x", Because::Strict)]
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
        let d = decide(&weighed(&f, true), &[]);
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
    fn an_undecided_replay_is_unverified_and_a_reject_outranks_it() {
        let undecided = UndecidedReplay {
            nodeid: "t.py::a".into(),
            why: crate::audit::source_replay::Undecided::NotRun,
        };
        let w = Weighed {
            undecided: vec![undecided.clone()],
            ..Weighed::default()
        };
        let d = decide(&w, &[]);
        assert_eq!(d.verdict, Verdict::Unverified);
        assert_eq!(d.reasons, [Reason::Undecided(undecided.clone())]);
        let w = Weighed {
            findings: vec![finding(FindingKind::Failing, true, false)],
            undecided: vec![undecided],
            ..Weighed::default()
        };
        assert_eq!(decide(&w, &[]).verdict, Verdict::Reject);
    }

    #[test]
    fn a_budget_breach_is_unverified() {
        let d = decide(&Weighed::default(), &[new_skip()]);
        assert_eq!(d.verdict, Verdict::Unverified);
        assert_eq!(d.verdict.exit_code(), 4);
        assert_eq!(d.reasons, [Reason::OverBudget(new_skip())]);
    }

    #[test]
    fn precedence_drift_expired_reject_unverified_pass() {
        let drift = Drifted {
            lock: "tests/fixtures.lock.json".into(),
            path: "tests/fixtures/a.json".into(),
            change: Change::Modified,
        };
        let expired = Expired {
            nodeid: "tests/t.py::test_y".into(),
            owner: "ana".into(),
            expires: "2024-03-01".into(),
        };
        let mut w = Weighed {
            findings: vec![
                finding(FindingKind::Polluter, true, false),
                finding(FindingKind::Flaky, true, false),
            ],
            drift: vec![drift.clone()],
            expired: vec![expired.clone()],
            undecided: Vec::new(),
            strict: false,
            strict_source: false,
        };
        let mut breaches = vec![new_skip()];
        let mut seen = Vec::new();
        loop {
            let d = decide(&w, &breaches);
            seen.push((d.verdict, d.reasons.first().cloned()));
            if !w.drift.is_empty() {
                w.drift.clear();
            } else if !w.expired.is_empty() {
                w.expired.clear();
            } else if !w.findings.is_empty() {
                w.findings.clear();
            } else if !breaches.is_empty() {
                breaches.clear();
            } else {
                break;
            }
        }
        assert_eq!(
            seen,
            [
                (Verdict::Drift, Some(Reason::Drift(drift))),
                (Verdict::ExpiredFreeze, Some(Reason::Expired(expired))),
                (
                    Verdict::Reject,
                    Some(rejects(
                        FindingKind::Polluter,
                        "tests/t.py::test_x",
                        Because::Introduced
                    ))
                ),
                (Verdict::Unverified, Some(Reason::OverBudget(new_skip()))),
                (Verdict::Pass, None),
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
        let d = decide(&weighed(&findings, false), &[]);
        assert_eq!(d.verdict, Verdict::Reject);
        assert_eq!(
            d.reasons,
            [rejects(
                FindingKind::Redefined,
                "tests/t.py::test_parse",
                Because::Introduced
            )]
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
        let w = Weighed {
            findings: vec![finding(FindingKind::Failing, true, false)],
            drift: vec![Drifted {
                lock: "fixtures.lock".into(),
                path: "x".into(),
                change: Change::Added,
            }],
            ..Weighed::default()
        };
        let d = decide(&w, &[]);
        assert_eq!(d.verdict, Verdict::Drift);
        assert_eq!(d.dispositions, [Disposition::Rejects]);
    }

    #[test]
    fn a_decision_reads_back_what_it_writes_each_kind_its_own() {
        let d = Decision {
            verdict: Verdict::Reject,
            reasons: vec![
                rejects(FindingKind::DeletedTest, "t::a", Because::Introduced),
                rejects(FindingKind::DeletedWithItsCode, "t::b", Because::Strict),
                Reason::OverBudget(Breach::Seconds {
                    used: 300.4,
                    limit: 300,
                }),
            ],
            dispositions: vec![Disposition::Rejects],
        };
        let json = serde_json::to_vec(&d).unwrap();
        assert_eq!(serde_json::from_slice::<Decision>(&json).unwrap(), d);
    }
}
