//! The polluter search on real runs: every oracle call of the bisection is a cached run of
//! "these prefix tests, then the victim" in a fresh sandbox.

use std::cell::Cell;

use fixgate_graph::NodeId;

use crate::audit::bisect::{self, PairKind, Search};
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::Error;

/// A found (or unexplained) pair.
pub struct Pair {
    pub kind: PairKind,
    pub victim: String,
    pub culprits: Vec<String>,
    pub search: Search,
    /// The last node of the search (each step starts after the one before it).
    pub last: NodeId,
}

/// Searches `prefix` (the tests that ran before `victim` in the order where it misbehaved) for
/// the tests responsible. `kind` says which anomaly: a polluter makes the victim fail, a
/// state-setter makes it pass. The first step starts after `after` (the runs that showed the
/// anomaly), every other after the step before it: one chain in the audit's graph.
pub fn find(
    engine: &Engine,
    role: Role,
    victim: &str,
    prefix: &[String],
    kind: PairKind,
    after: &[NodeId],
) -> Result<Pair, Error> {
    let first = after.to_vec();
    let last: Cell<Option<NodeId>> = Cell::new(None);
    let search = bisect::search(
        prefix.len(),
        bisect::DEFAULT_DDMIN_CAP,
        |subset: &[usize]| {
            let mut order: Vec<String> = subset.iter().map(|&i| prefix[i].clone()).collect();
            order.push(victim.to_string());
            let key = blake3::hash(order.join("\n").as_bytes()).to_hex();
            let previous = match last.get() {
                Some(id) => vec![id],
                None => first.clone(),
            };
            let req = RunRequest::new(
                format!("bisect-run({victim})[{}]", &key[..12]),
                "bisect-run",
                role,
                order,
            )
            .after(&previous);
            let (node, result) = engine.run_one(&req)?;
            last.set(Some(node));
            let outcome = result
                .outcome_of(victim)
                .ok_or_else(|| Error::Infra(format!("{} has no result for {victim}", req.label)))?;
            Ok::<bool, Error>(match kind {
                PairKind::Polluter => !outcome.is_green(),
                PairKind::StateSetter => outcome.is_green(),
            })
        },
    )?;
    Ok(Pair {
        kind,
        victim: victim.to_string(),
        culprits: search.culprits.iter().map(|&i| prefix[i].clone()).collect(),
        search,
        last: last.get().or(first.first().copied()).ok_or_else(|| {
            Error::Infra(format!(
                "bug: the search for {victim} has no node to start after"
            ))
        })?,
    })
}

/// The one-line reproduction: `python -m pytest -p no:randomly CULPRITS VICTIM`.
pub fn repro(pair: &Pair) -> String {
    let mut ids: Vec<String> = pair.culprits.iter().map(|c| shell_quote(c)).collect();
    ids.push(shell_quote(&pair.victim));
    let both = format!(
        "python -m pytest -p no:randomly -p no:cacheprovider {}",
        ids.join(" ")
    );
    let alone = format!(
        "python -m pytest -p no:randomly -p no:cacheprovider {}",
        shell_quote(&pair.victim)
    );
    match pair.kind {
        PairKind::Polluter => format!("{both}  # fails; the victim alone passes: {alone}"),
        PairKind::StateSetter => format!("{both}  # passes; the victim alone fails: {alone}"),
    }
}

fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._:-=".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
