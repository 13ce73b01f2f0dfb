//! The findings of an audit, made from its typed evidence: the one place that says which
//! evidence is which finding, whether the patch introduced it, and whether the patch edited a
//! test of it. The verdict weighs what this returns; the report states it.
//!
//! To add a kind of finding, see `audit::verdict`'s module documentation: its variant there,
//! and its rule here (or beside the phase whose evidence it reads, called from here).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::audit::base_suite::{self, SpecReplay};
use crate::audit::collection::Broken;
use crate::audit::edited::Patch;
use crate::audit::finding::{Finding, FindingKind};
use crate::audit::gates::Gates;
use crate::audit::outside::OutsideWrites;
use crate::audit::pair::Pair;
use crate::audit::replay::FixtureReplay;
use crate::audit::scope::Impact;
use crate::audit::source_tamper::{Move, Suspect};
use crate::audit::triage::Triage;
use crate::audit::verdict::UndecidedReplay;

/// The findings the base shows too (checked on the base snapshot with the same evidence).
pub(crate) type PreExisting = BTreeSet<(FindingKind, String)>;

/// Everything findings are made from.
pub(crate) struct Facts<'a> {
    pub(crate) triaged: &'a BTreeMap<String, Triage>,
    pub(crate) pre_existing: &'a PreExisting,
    pub(crate) patch: &'a Patch,
    pub(crate) outside: &'a OutsideWrites,
    pub(crate) fixtures: &'a FixtureReplay,
    pub(crate) spec: &'a SpecReplay,
    /// What the patch did to the freeze ledger and the lock.
    pub(crate) gates: &'a Gates,
    /// The edited tests whose known order-dependence the edit replay kept as the base's
    /// (`crate::audit::edit_replay::kept_as_debt`).
    pub(crate) kept: BTreeSet<String>,
}

impl Facts<'_> {
    /// Whether the patch's edit of `id` makes its finding of `kind` the patch's: it edited the
    /// test, and (for known order-dependence) the edit replay did not show the edit hid nothing.
    fn edited(&self, kind: FindingKind, id: &str) -> bool {
        self.patch.edited.contains(id)
            && !(kind == FindingKind::OrderDependent && self.kept.contains(id))
    }
}

/// The findings the verdict weighs, in the report's order: each test's (from its triage), the
/// writes outside the sandbox, the test-source and fixture replays, then what the patch did to
/// the budget, the ledger and the lock.
pub(crate) fn findings(f: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    for (id, t) in f.triaged {
        for kind in t.finding_kinds() {
            out.push(Finding {
                kind,
                subject: id.clone(),
                introduced: !f.pre_existing.contains(&(kind, id.clone())),
                edited_by_patch: f.edited(kind, id),
            });
        }
    }
    // A test's write is the patch's unless the base's test does it too; one made outside any
    // test (a conftest at import, a session fixture) is the patch's when it changed a conftest.
    let outside = f.outside.subjects(
        |id| {
            f.pre_existing
                .contains(&(FindingKind::OutsideWrite, id.to_string()))
        },
        f.patch.conftests_changed,
    );
    for (subject, introduced) in outside {
        out.push(Finding {
            kind: FindingKind::OutsideWrite,
            edited_by_patch: f.patch.edited.contains(&subject),
            subject,
            introduced,
        });
    }
    // A replay's reading is a finding of its own: the test-source replay's about a test the
    // patch edited, the fixture replay's about a test coupled to the fixtures it changed.
    let replays = (f.spec.source_replay.iter())
        .map(|r| (r.reading.finding(), &r.nodeid, true))
        .chain(f.fixtures.replay.iter().map(|r| {
            let edited = f.patch.edited.contains(&r.nodeid);
            (r.reading.finding(), &r.nodeid, edited)
        }));
    for (kind, nodeid, edited_by_patch) in replays {
        if let Some(kind) = kind {
            out.push(Finding {
                kind,
                subject: nodeid.clone(),
                introduced: true,
                edited_by_patch,
            });
        }
    }
    // What the base's suite, replayed on the head's code, says the patch hid.
    out.extend(base_suite::findings(
        f.spec.base_suite.as_ref(),
        &f.spec.altered,
        f.spec.session_changed,
        &f.patch.edited,
    ));
    let edited = |id: &String| f.patch.edited.contains(id);
    let patch = (f.patch.new_skips.iter())
        .map(|s| (FindingKind::NewSkip, s.nodeid.clone(), edited(&s.nodeid)))
        .chain(
            (f.gates.added_by_patch.iter()).map(|n| (FindingKind::FreezeAdded, n.clone(), false)),
        )
        .chain(
            (f.gates.lock.changed_pins.iter())
                .map(|p| (FindingKind::LockChanged, p.clone(), false)),
        )
        .chain(source_tamper(&f.patch.source_tamper).map(|(k, p)| (k, p, false)));
    for (kind, subject, edited_by_patch) in patch {
        out.push(Finding {
            kind,
            subject,
            introduced: true,
            edited_by_patch,
        });
    }
    out
}

/// The edited tests whose replay could not decide, unless another replay of the same test (the
/// fixture replay's) decided: each makes the verdict `unverified` with its reason.
pub(crate) fn undecided(spec: &SpecReplay, fixtures: &FixtureReplay) -> Vec<UndecidedReplay> {
    let decided: BTreeSet<&str> = (fixtures.replay.iter())
        .filter(|r| r.reading.finding().is_some())
        .map(|r| r.nodeid.as_str())
        .collect();
    (spec.source_replay.iter())
        .filter(|r| !decided.contains(r.nodeid.as_str()))
        .filter_map(|r| {
            Some(UndecidedReplay {
                nodeid: r.nodeid.clone(),
                why: r.undecided.clone()?,
            })
        })
        .collect()
}

/// The source-side warnings: one finding per module and kind, about the module.
fn source_tamper(suspects: &[Suspect]) -> impl Iterator<Item = (FindingKind, String)> {
    suspects
        .iter()
        .map(|s| (source_tamper_kind(&s.how), s.path.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
}

pub(crate) fn source_tamper_kind(how: &Move) -> FindingKind {
    match how {
        Move::SpecialCase { .. } => FindingKind::SpecialCasedInput,
        Move::EqIgnoresArgument => FindingKind::EqIgnoresArgument,
        Move::SwallowedError => FindingKind::SwallowedError,
    }
}

/// The finding of a head whose suite does not collect while the base's does: the patch broke
/// the suite, about the file that broke (or the whole suite when the error names none).
pub(crate) fn collection_error(broken: &Broken) -> Finding {
    Finding {
        kind: FindingKind::CollectionError,
        subject: broken
            .file
            .clone()
            .unwrap_or_else(|| "the head's test suite".to_string()),
        introduced: true,
        edited_by_patch: false,
    }
}

/// The `edited-assertion` findings: a victim of a pair that the base had and the patch edited
/// (a new test is not an edited assertion: only a test the base had can be "fixed"), unless the
/// edit replay showed that its edit hid nothing (`kept`).
pub(crate) fn edited_assertions<'a>(
    pairs: &'a [Pair],
    edited: &'a BTreeSet<String>,
    base_ids: &'a BTreeSet<String>,
    kept: &'a BTreeSet<String>,
) -> impl Iterator<Item = (&'a Pair, Finding)> + 'a {
    pairs
        .iter()
        .filter(|p| edited.contains(&p.victim) && base_ids.contains(&p.victim))
        .filter(|p| !kept.contains(&p.victim))
        .map(|p| {
            (
                p,
                Finding {
                    kind: FindingKind::EditedAssertion,
                    subject: p.victim.clone(),
                    introduced: true,
                    edited_by_patch: true,
                },
            )
        })
}

/// The `leaks-state` findings the base has too: of a test the base has and the patch does not
/// affect, whose code, files and every module it sees are the base's, so that it leaves the
/// same state behind it there (the base's file-order run is not recorded; this is what stands
/// for checking it).
pub(crate) fn base_leaks(
    triaged: &BTreeMap<String, Triage>,
    base_ids: &HashSet<&str>,
    impact: &Impact,
) -> PreExisting {
    triaged
        .iter()
        .filter(|(id, t)| {
            t.finding_kinds().contains(&FindingKind::LeaksState)
                && base_ids.contains(id.as_str())
                && impact.affected.as_ref().is_some_and(|a| !a.contains(*id))
        })
        .map(|(id, _)| (FindingKind::LeaksState, id.clone()))
        .collect()
}

/// Whether a test's findings are the patch's: one of its kinds the base does not show. A test
/// without findings has nothing to be introduced.
pub(crate) fn test_introduced(t: &Triage, nodeid: &str, pre_existing: &PreExisting) -> bool {
    t.finding_kinds()
        .iter()
        .any(|k| !pre_existing.contains(&(*k, nodeid.to_string())))
}
