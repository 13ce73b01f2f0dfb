//! The polluter search on real runs: every oracle call of the bisection is a cached run of
//! "these prefix tests, then the victim" in a fresh sandbox.

use crate::audit::bisect::{self, PairKind, Search};
use crate::engine::matrix::is_green;
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::Error;

/// A found (or unexplained) pair.
pub struct Pair {
    pub kind: PairKind,
    pub victim: String,
    pub culprits: Vec<String>,
    pub search: Search,
}

/// Searches `prefix` (the tests that ran before `victim` in the order where it misbehaved) for
/// the tests responsible. `kind` says which anomaly: a polluter makes the victim fail, a
/// state-setter makes it pass.
pub fn find(
    engine: &Engine,
    role: Role,
    victim: &str,
    prefix: &[String],
    kind: PairKind,
) -> Result<Pair, Error> {
    let search = bisect::search(
        prefix.len(),
        bisect::DEFAULT_DDMIN_CAP,
        |subset: &[usize]| {
            let mut order: Vec<String> = subset.iter().map(|&i| prefix[i].clone()).collect();
            order.push(victim.to_string());
            let key = blake3::hash(order.join("\n").as_bytes()).to_hex();
            let req = RunRequest {
                label: format!("bisect-run({victim})[{}]", &key[..12]),
                kind: "bisect-run",
                role,
                order,
                overlay: Vec::new(),
            };
            let result = engine
                .run_batch(std::slice::from_ref(&req))?
                .pop()
                .expect("one result per request")
                .map_err(|e| Error::Infra(format!("{} failed: {e}", req.label)))?;
            let outcome = result
                .outcome_of(victim)
                .ok_or_else(|| Error::Infra(format!("{} has no result for {victim}", req.label)))?;
            Ok::<bool, Error>(match kind {
                PairKind::Polluter => !is_green(outcome),
                PairKind::StateSetter => is_green(outcome),
            })
        },
    )?;
    Ok(Pair {
        kind,
        victim: victim.to_string(),
        culprits: search.culprits.iter().map(|&i| prefix[i].clone()).collect(),
        search,
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
