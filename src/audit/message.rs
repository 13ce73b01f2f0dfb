//! The one-line message of each finding, as the report prints it, from the typed evidence it
//! rests on. A kind without a case here gets the default line, `<subject>: <kind>`.

use crate::audit::bisect::PairKind;
use crate::audit::collection::Broken;
use crate::audit::outcome::{Judgment, Nondeterminism};
use crate::audit::pair::Pair;
use crate::audit::triage::Signal;
use crate::audit::verdict::{self, FindingKind};
use crate::pytest::events::StateChange;

/// The message of a finding the verdict weighed (or of an `edited-assertion`).
pub(crate) fn finding_message(f: &verdict::Finding, j: &Judgment) -> String {
    let (triaged, pairs, replay, new_skips, outside, source_replay) = (
        &j.triaged,
        &j.pairs,
        &j.replay,
        &j.new_skips,
        &j.outside,
        &j.source_replay,
    );
    let id = &f.subject;
    let base = match f.kind {
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
                p.search.outcome.describe()
            ),
            None => format!("{id}'s outcome follows the order"),
        },
        FindingKind::Polluter => format!(
            "{id} leaves state behind that changes another test's outcome: {}",
            pairs
                .iter()
                .filter(|p| p.culprits.contains(id))
                .map(|p| p.victim.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
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
                .map(|r| (r.head.as_str(), r.base.as_str()))
                .unwrap_or(("?", "?"));
            match f.kind {
                FindingKind::Redefined => format!("{id} passes on the head's fixtures ({h}) and fails on the base's ({b}): the patch redefined the test"),
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
                    Signal::LeaksState(change) => Some(describe_leak(change)),
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
    if f.introduced {
        base
    } else {
        format!("{base} (pre-existing: the base has it too)")
    }
}

/// One change of shared state, as a finding names it.
pub(crate) fn describe_leak(change: &StateChange) -> String {
    match change {
        StateChange::Env(name) => format!("the environment variable {name}"),
        StateChange::Cwd => "the working directory".into(),
        StateChange::SysPath => "sys.path".into(),
        StateChange::SysModules(name) => format!("the module {name} in sys.modules"),
        StateChange::Global { path, name } => format!("the module global {name} of {path}"),
        StateChange::Threads(n) => match n {
            1 => "a thread left running".into(),
            n => format!("{n} threads left running"),
        },
        StateChange::Extension(path) => {
            format!("the C extension {path}, whose state fixgate cannot see")
        }
        StateChange::Other(text) => text.clone(),
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
