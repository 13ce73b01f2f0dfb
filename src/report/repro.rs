//! The one-line commands that reproduce a finding, quoted for a POSIX shell.

use crate::audit::base_suite::{BaseSuiteRead, Replayed};
use crate::audit::bisect::PairKind;
use crate::audit::finding::{Finding, FindingKind};
use crate::audit::outcome::Judgment;
use crate::audit::pair::Pair;

/// The command that reproduces a finding, when there is one: a non-idempotent test's run twice
/// in a row; a hidden failure's (or an edited test's) base test file on the head's code; a test
/// a hook made look green run alone; else the first pair the finding's test is in; else, for a
/// test red everywhere or one that changed what it should not, the test alone, and for an
/// order-dependent test without a pair, the seed order it failed in. A test leaking state
/// without a victim has nothing to show it; the source-side findings are about a module.
pub(crate) fn finding(f: &Finding, j: &Judgment) -> Option<String> {
    let replayed = j.spec.base_suite.as_ref().and_then(|b| {
        Some((
            b,
            b.tests
                .iter()
                .find(|t| t.nodeid == f.subject && !t.edited_candidate)?,
        ))
    });
    match f.kind {
        FindingKind::NonIdempotent => Some(nio(&f.subject)),
        FindingKind::LeaksState => None,
        FindingKind::HookAlteredOutcome if j.spec.altered.iter().any(|a| a.nodeid == f.subject) => {
            Some(format!(
                "python -m pytest -p no:randomly -p no:cacheprovider {}",
                shell_quote(&f.subject)
            ))
        }
        kind if (kind.is_hidden()
            || matches!(
                kind,
                FindingKind::DependsOnNewTest | FindingKind::NewChainStep
            ))
            && replayed.is_some() =>
        {
            let (b, t) = replayed.expect("matched");
            Some(base_suite(b, t))
        }
        // An edited test read by the test-source replay: its base version, from the same runs.
        FindingKind::RedefinedTest => j.spec.base_suite.as_ref().and_then(|b| {
            let r = j
                .spec
                .source_replay
                .iter()
                .find(|r| r.nodeid == f.subject)?;
            let base_id = r.renamed_from.as_deref().unwrap_or(&r.nodeid);
            let t = b.tests.iter().find(|t| t.nodeid == base_id)?;
            Some(base_suite(b, t))
        }),
        _ => (j.pairs.iter().find(|p| p.involves(&f.subject)).map(pair)).or_else(|| fallback(f, j)),
    }
}

/// A reproduction for a finding about one test that no pair shows.
fn fallback(f: &Finding, j: &Judgment) -> Option<String> {
    let alone = format!(
        "python -m pytest -p no:randomly -p no:cacheprovider {}",
        shell_quote(&f.subject)
    );
    match f.kind {
        FindingKind::Failing
        | FindingKind::ErrorBucket
        | FindingKind::Crashed
        | FindingKind::Timeout
        | FindingKind::ResourceLimit => Some(format!("{alone}  # red in every order, alone too")),
        FindingKind::LeaseViolation => Some(format!(
            "{alone} && git status --short  # it changes files of a fixture group it holds no \
             lease on"
        )),
        FindingKind::OutsideWrite => Some(format!(
            "{alone}  # it writes outside its sandbox: run it in a throwaway copy"
        )),
        // A coupled test on the base's bytes of the fixtures it read.
        FindingKind::Redefined => {
            let r = j.fixtures.replay.iter().find(|r| r.nodeid == f.subject)?;
            let base = (j.spec.base_suite.as_ref())
                .and_then(|b| b.base_commit.as_deref())
                .unwrap_or("BASE");
            let files: Vec<String> = r.files.iter().map(|p| shell_quote(p)).collect();
            let head = (j.spec.base_suite.as_ref())
                .and_then(|b| b.head_commit.as_deref())
                .unwrap_or("HEAD");
            Some(format!(
                "git worktree add --detach /tmp/fixgate-fixtures {head} && cd \
                 /tmp/fixgate-fixtures && git checkout {base} -- {} && {alone}  # fails on the \
                 base's fixtures",
                files.join(" ")
            ))
        }
        FindingKind::OrderDependent => {
            let evidence = j.tests.evidence.get(&f.subject)?;
            evidence.outcomes.iter().find_map(|(label, o)| match label {
                crate::audit::order::OrderLabel::Seed(n) if !o.is_green() => Some(format!(
                    "fixgate run --seed {n}  # the order it failed in (no culprit set was found)"
                )),
                _ => None,
            })
        }
        _ => None,
    }
}

/// One line that runs the base's test file (with the conftests and configuration the patch
/// changed) on the head's code, in a worktree of its own.
pub(crate) fn base_suite(read: &BaseSuiteRead, t: &Replayed) -> String {
    let files: Vec<String> = t
        .repro_files
        .iter()
        .filter(|f| !f.is_empty())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|f| shell_quote(f))
        .collect();
    let base = read.base_commit.as_deref().unwrap_or("BASE");
    let run = format!(
        "git checkout {base} -- {} && python -m pytest -p no:randomly -p no:cacheprovider {}",
        files.join(" "),
        shell_quote(&t.nodeid)
    );
    match &read.head_commit {
        Some(head) => format!(
            "git worktree add --detach /tmp/fixgate-spec {head} && cd /tmp/fixgate-spec && {run}"
        ),
        None => format!("cp -a . /tmp/fixgate-spec && cd /tmp/fixgate-spec && {run}"),
    }
}

/// The pair's reproduction: `python -m pytest -p no:randomly CULPRITS VICTIM`, and the victim
/// alone for the other outcome.
pub(crate) fn pair(pair: &Pair) -> String {
    let mut ids: Vec<String> = pair.culprits.iter().map(|c| shell_quote(c)).collect();
    ids.push(shell_quote(&pair.victim));
    let both = format!(
        "python -m pytest -p no:randomly --cache-clear {}",
        ids.join(" ")
    );
    let alone = format!(
        "python -m pytest -p no:randomly --cache-clear {}",
        shell_quote(&pair.victim)
    );
    match pair.kind {
        PairKind::Polluter => format!("{both}  # fails; the victim alone passes: {alone}"),
        PairKind::StateSetter => format!("{both}  # passes; the victim alone fails: {alone}"),
    }
}

/// The command that shows a test breaking itself: `fixgate run` of an order that lists it twice
/// in a row (plain pytest runs a node id given twice only once).
pub(crate) fn nio(nodeid: &str) -> String {
    let id = shell_quote(nodeid);
    format!(
        "printf '%s\\n' {id} {id} > nio-order.txt && fixgate run --order nio-order.txt  \
         # passes, then fails when run again in the same process"
    )
}

/// `s` as one shell word: as it is when it holds only characters no shell treats specially,
/// else in single quotes.
pub(crate) fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._:-=".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nio_repro_lists_the_test_twice_for_fixgate_run() {
        assert_eq!(
            nio("tests/test_a.py::test_x[a b]"),
            "printf '%s\\n' 'tests/test_a.py::test_x[a b]' 'tests/test_a.py::test_x[a b]' > \
             nio-order.txt && fixgate run --order nio-order.txt  # passes, then fails when run \
             again in the same process"
        );
    }

    #[test]
    fn node_ids_are_quoted_only_when_a_shell_would_read_them_otherwise() {
        assert_eq!(shell_quote("tests/t.py::test_a"), "tests/t.py::test_a");
        assert_eq!(shell_quote("t.py::test[it's]"), "'t.py::test[it'\\''s]'");
    }
}
