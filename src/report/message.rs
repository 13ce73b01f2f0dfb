//! The one-line message of each finding, as the report prints it, from the typed evidence it
//! rests on. A kind without a case here gets the default line, `<subject>: <kind>`.

use crate::audit::base_suite::{AtHead, Replayed};
use crate::audit::bisect::PairKind;
use crate::audit::collection::Broken;
use crate::audit::finding::{Finding, FindingKind};
use crate::audit::findings;
use crate::audit::outcome::{Judgment, Nondeterminism};
use crate::audit::pair::Pair;
use crate::audit::source_tamper::{Move, Suspect};
use crate::audit::triage::Signal;
use crate::report::reasons;

/// The message of a finding the verdict weighed (or of an `edited-assertion`).
pub(crate) fn finding_message(f: &Finding, j: &Judgment) -> String {
    let (triaged, pairs, replay, new_skips, outside, source_replay) = (
        &j.tests.triaged,
        &j.pairs,
        &j.fixtures.replay,
        &j.patch.new_skips,
        &j.outside,
        &j.spec.source_replay,
    );
    let id = &f.subject;
    let replayed = j.spec.base_suite.as_ref().and_then(|b| {
        b.tests
            .iter()
            .find(|t| &t.nodeid == id && !t.edited_candidate)
    });
    let base = match f.kind {
        FindingKind::HookAlteredOutcome if j.spec.altered.iter().any(|a| &a.nodeid == id) => {
            let a = j
                .spec
                .altered
                .iter()
                .find(|a| &a.nodeid == id)
                .expect("found above");
            format!(
                "{id} {} ({}), but a hook made pytest report it as {}: fixgate's plugin records \
                 what the test raised before any conftest can rewrite the report",
                a.outcome.as_str(),
                a.message.as_deref().unwrap_or("no message"),
                a.reported.as_str()
            )
        }
        FindingKind::DependsOnNewTest | FindingKind::NewChainStep if replayed.is_some() => {
            let t = replayed.expect("matched");
            let what = match f.kind {
                FindingKind::NewChainStep => {
                    "a chain by design (marked serial, or built on a fixture wider than a \
                     test), and the patch added a step to it: the new step is reviewed as new code"
                }
                _ => {
                    "a test of the base that now needs a new test to run first (mark the chain \
                     serial if it is one, or make the test set up what it needs)"
                }
            };
            format!(
                "{id} passes at head only after the tests the patch added before it run ({}): \
                 with the base's file, and in the head's file without them, it fails on the \
                 head's code ({}). Its code is the base's, so this is no changed expectation \
                 but {what}",
                t.depends_on.join(", "),
                t.failure.as_deref().unwrap_or("no message")
            )
        }
        kind if replayed.is_some() && kind.is_hidden() => {
            let spec = j.spec.base_suite.as_ref().map(|b| b.reasons.as_slice());
            hidden(
                kind,
                replayed.expect("matched"),
                &reasons::spec_reasons(spec.unwrap_or_default()),
            )
        }
        FindingKind::OrderDependent => match pairs.iter().find(|p| &p.victim == id) {
            Some(p) if p.search.outcome.is_found() => format!(
                "{id} {} when {} ran before it",
                if p.kind == PairKind::Polluter {
                    "fails"
                } else {
                    "passes only"
                },
                p.culprits.join(" and ")
            ),
            Some(p) => format!(
                "{id}'s outcome follows the order; {}",
                reasons::search_outcome(p.search.outcome)
            ),
            None => format!("{id}'s outcome follows the order"),
        },
        FindingKind::Polluter => {
            let victims: Vec<&str> = (pairs.iter())
                .filter(|p| p.culprits.contains(id))
                .map(|p| p.victim.as_str())
                .collect();
            match victims.is_empty() {
                false => format!(
                    "{id} leaves state behind that changes another test's outcome: {}",
                    victims.join(", ")
                ),
                // Triage gives the finding only to a pair's culprit; a report without the
                // pair says so rather than end in an empty list.
                true => format!(
                    "{id} leaves state behind that changes another test's outcome (its pair is not in this report)"
                ),
            }
        }
        FindingKind::LeaseViolation => format!(
            "{id} changed fixture groups it does not hold a lease on: {}",
            triaged
                .get(id)
                .map(|t| t
                    .signals
                    .iter()
                    .filter_map(|s| match s {
                        Signal::LeaseViolation(g) => Some(g.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        ),
        FindingKind::Redefined | FindingKind::Cosmetic | FindingKind::Additive => {
            let r = replay.iter().find(|r| &r.nodeid == id);
            let (h, b) = r
                .map(|r| {
                    (
                        r.head.as_str(),
                        r.base.map_or("not replayed", |b| b.as_str()),
                    )
                })
                .unwrap_or(("?", "?"));
            let files = r.map(|r| r.files.join(", ")).unwrap_or_default();
            match f.kind {
                FindingKind::Redefined => format!("{id} passes on the head's fixtures ({h}) and fails on the base's ({b}): the patch redefined the test by changing {files}, which it reads"),
                FindingKind::Cosmetic => format!("{id} passes on both fixture versions: the fixture change is cosmetic; justify it in one line"),
                _ => format!("{id} is new and reads only new fixtures: review the fixture as new code"),
            }
        }
        FindingKind::NewSkip => match new_skips.iter().find(|s| &s.nodeid == id) {
            Some(s) => {
                let reason = s
                    .reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                match s.marker.as_str() {
                    "pytest.skip()" => format!("{id} now skips itself with pytest.skip(){reason}"),
                    m if m.starts_with(['a', 'e', 'i', 'o', 'u', 'x']) => {
                        format!("{id} gained an {m} marker{reason}")
                    }
                    m => format!("{id} gained a {m} marker{reason}"),
                }
            }
            None => format!("{id} is newly skipped"),
        },
        FindingKind::Flaky => {
            format!("{id} gives different outcomes in the same order: nondeterminism, not drift")
        }
        FindingKind::NonIdempotent => format!(
            "{id} passes, then fails when run again in the same process (every time): it leaves \
             behind state that breaks its own next run"
        ),
        FindingKind::LeaksState => {
            let what: Vec<String> = triaged
                .get(id)
                .into_iter()
                .flat_map(|t| &t.signals)
                .filter_map(|s| match s {
                    Signal::LeaksState(change) => Some(reasons::describe_leak(change)),
                    _ => None,
                })
                .collect();
            format!(
                "{id} leaves shared state changed behind it: {}; a later test that reads it \
                 depends on the order (no victim seen)",
                what.join(", ")
            )
        }
        FindingKind::FreezeAdded => format!(
            "the patch adds or extends the freeze entry of {id}; the ledger is read from the base"
        ),
        FindingKind::LockChanged => format!("the patch changes the pin of {id} in fixtures.lock"),
        FindingKind::SpecialCasedInput
        | FindingKind::EqIgnoresArgument
        | FindingKind::SwallowedError => source_tamper(f.kind, id, &j.patch.source_tamper),
        FindingKind::RedefinedTest | FindingKind::TestRefactor => {
            let r = source_replay.iter().find(|r| &r.nodeid == id);
            let lines = |l: Option<&Vec<String>>| {
                l.filter(|l| !l.is_empty())
                    .map(|l| l.join(" / "))
                    .unwrap_or_else(|| "(none)".into())
            };
            let (b, h) = (
                lines(r.map(|r| &r.base_lines)),
                lines(r.map(|r| &r.head_lines)),
            );
            let id = match r.and_then(|r| r.renamed_from.as_deref()) {
                Some(old) => format!("{id} (renamed from {old})"),
                None => id.clone(),
            };
            match f.kind {
                FindingKind::RedefinedTest => format!(
                    "{id} passes with the head's test code and fails with the base's on the same \
                     code: the patch changed what the test expects. base: {b}; head: {h}"
                ),
                _ => format!("{id} passes with both versions of its test code: a refactor. base: {b}; head: {h}"),
            }
        }
        FindingKind::EditedAssertion => match pairs.iter().find(|p| &p.victim == id) {
            Some(p) => edited_assertion(p),
            None => format!("{id}: {}", f.kind.as_str()),
        },
        FindingKind::OutsideWrite => {
            let what: Vec<&str> = outside.of_subject(id);
            let shown = what.iter().take(5).copied().collect::<Vec<_>>().join(", ");
            let more = match what.len() {
                n if n > 5 => format!(" and {} more", n - 5),
                _ => String::new(),
            };
            format!("{id} wrote outside its sandbox: {shown}{more}")
        }
        k => format!("{id}: {}", k.as_str()),
    };
    let kept = f.kind == FindingKind::OrderDependent
        && (j.edit_replay.iter()).any(|r| {
            &r.nodeid == id && r.reading == crate::audit::edit_replay::Reading::HidNothing
        });
    match (f.introduced, kept) {
        (true, _) => base,
        (false, true) => format!(
            "{base} (pre-existing: the base has it too; the patch edited the test, and its base \
             version fails on the head's code in the orders where the head's failed, so the edit \
             hid nothing)"
        ),
        (false, false) => format!("{base} (pre-existing: the base has it too)"),
    }
}

/// What the patch did to hide a base test's failure on the head's code, with the base's lines of
/// the test.
fn hidden(kind: FindingKind, t: &Replayed, reasons: &[String]) -> String {
    let id = &t.nodeid;
    let failure = t.failure.as_deref().unwrap_or("no message");
    let what = match (kind, &t.at_head) {
        (FindingKind::DeletedTest, _) => {
            format!("the patch deleted {id}, which fails on the head's code: {failure}")
        }
        (FindingKind::DeletedWithItsCode, _) => format!(
            "the patch deleted {id} together with the code it exercised ({failure}): not blocking"
        ),
        (FindingKind::DeselectedTest, AtHead::Deselected) => format!(
            "the patch deselected {id} (its collection drops it: -k, -m, --deselect or a \
             pytest_collection_modifyitems hook), which fails on the head's code: {failure}"
        ),
        (FindingKind::DeselectedTest, _) => format!(
            "the patch stopped pytest collecting {id} ({}), which fails on the head's code: \
             {failure}",
            reasons.join("; ")
        ),
        (FindingKind::UncollectedTest, AtHead::Uncollected { at }) => {
            let rule = t
                .missed_rule
                .as_ref()
                .map(|(name, value)| format!(": {name} is {}", value.join(" ")))
                .unwrap_or_default();
            format!(
                "the patch took {id} out of collection (its function is now {at}, which pytest \
                 does not collect{rule}), and it fails on the head's code: {failure}"
            )
        }
        (FindingKind::SkippedTest, _) => format!(
            "the patch added a skip to {id}, a test that fails on the head's code: {failure}"
        ),
        (FindingKind::XfailedTest, _) => format!(
            "the patch marked {id} as an expected failure, a test that fails on the head's code: \
             {failure}"
        ),
        (FindingKind::HookAlteredOutcome, _) => format!(
            "{id} passes at head, but with the base's conftests and configuration it fails on the \
             head's code ({}): {failure}",
            reasons.join("; ")
        ),
        _ => {
            let now = match &t.at_head {
                AtHead::Renamed { nodeid, .. } => format!(" (now {nodeid})"),
                _ => String::new(),
            };
            format!(
                "{id}{now} passes at head, and its base version fails on the head's code: the \
                 patch changed what the test expects: {failure}"
            )
        }
    };
    match t.base_lines.is_empty() {
        true => what,
        false => format!("{what}. base: {}", t.base_lines.join(" / ")),
    }
}

/// The message of a source-side warning about module `path`: each line the patch added there.
fn source_tamper(kind: FindingKind, path: &str, suspects: &[Suspect]) -> String {
    let of_kind = suspects
        .iter()
        .filter(|s| s.path == path && findings::source_tamper_kind(&s.how) == kind);
    let lines: Vec<String> = of_kind
        .map(|s| match &s.how {
            Move::SpecialCase { literal, test_file } => {
                format!("`{}` ({literal} is in {test_file})", s.line)
            }
            Move::EqIgnoresArgument | Move::SwallowedError => format!("`{}`", s.line),
        })
        .collect();
    let lines = lines.join(", ");
    match kind {
        FindingKind::SpecialCasedInput => format!(
            "the patch added conditions to {path} on literals the tests hold: {lines}; the code \
             may special-case the tests' input, which the base's tests cannot see: review it"
        ),
        FindingKind::SwallowedError => format!(
            "the patch added to {path} handlers that catch every error and return or assign a \
             made-up value: {lines}; a failure on that path turns into a plausible answer, which \
             the base's tests cannot see: review it"
        ),
        _ => format!(
            "the patch added to {path} an equality, hash or truth method that never reads what \
             it compares with or returns a constant: {lines}; every assertion on it passes, \
             which the base's tests cannot see: review it"
        ),
    }
}

/// The `edited-assertion` message of a pair's victim. It is never pre-existing: the patch edited
/// the test.
fn edited_assertion(p: &Pair) -> String {
    format!(
        "the patch edited {}, whose outcome depends on {} ({}): it changed the test instead of \
         isolating it",
        p.victim,
        p.culprits.join(", "),
        p.kind.as_str()
    )
}

/// The message of a head whose suite does not collect: where, and pytest's error.
pub(crate) fn collection_error(broken: &Broken) -> String {
    let at = match (&broken.file, broken.line) {
        (Some(f), Some(l)) => format!("{f}:{l}: "),
        (Some(f), None) => format!("{f}: "),
        _ => String::new(),
    };
    format!(
        "the head's suite does not collect while the base's does: {at}{}",
        broken.error
    )
}

/// The message of an outcome a fresh run (`--check`) did not repeat.
pub(crate) fn nondeterministic(n: &Nondeterminism) -> String {
    format!(
        "--check: {} was {} in the cached run of order {} and {} now",
        n.nodeid,
        n.cached.map(|o| o.as_str()).unwrap_or("absent"),
        n.order,
        n.fresh.as_str()
    )
}
