//! The one-line commands that reproduce a finding, quoted for a POSIX shell.

use crate::audit::bisect::PairKind;
use crate::audit::pair::Pair;
use crate::audit::verdict::{Finding, FindingKind};

/// The command that reproduces a finding, when there is one: a non-idempotent test's run twice
/// in a row, else the first pair the finding's test is in (a test leaking state without a
/// victim has no pair to show it).
pub(crate) fn finding(f: &Finding, pairs: &[Pair]) -> Option<String> {
    match f.kind {
        FindingKind::NonIdempotent => Some(nio(&f.subject)),
        FindingKind::LeaksState => None,
        _ => pairs.iter().find(|p| p.involves(&f.subject)).map(pair),
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
