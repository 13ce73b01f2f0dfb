//! The polluter search on real runs: every oracle call of the bisection is a cached run of
//! "these prefix tests, then the victim" in a fresh sandbox.

use std::cell::Cell;

use fixgate_graph::NodeId;

use crate::audit::bisect::{self, PairKind, Search};
use crate::audit::triage::PROOF_RERUNS;
use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::Error;

/// Where a pair's culprits came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Found {
    /// Bisection or delta debugging over the prefix.
    Searched,
    /// The culprits of another victim of this audit, confirmed in one run.
    ReusedThisAudit,
    /// A set found for this victim in an earlier audit of the same base, confirmed in one run.
    ReusedEarlierAudit,
}

impl Found {
    pub fn as_str(self) -> &'static str {
        match self {
            Found::Searched => "search",
            Found::ReusedThisAudit => "reused-from-this-audit",
            Found::ReusedEarlierAudit => "reused-from-an-earlier-audit",
        }
    }
}

/// What a pair node records: the answer to "who makes this victim misbehave in this run".
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Answer {
    pub kind: PairKind,
    pub culprits: Vec<String>,
    pub search: Search,
    pub found: Found,
    /// Runs that checked the pair holds (culprits then victim, and the victim alone).
    pub verify_runs: u32,
}

/// Checks a pair [`PROOF_RERUNS`] times each way: the culprits then the victim show the anomaly,
/// the victim alone does not (`alone`: what confirmation already saw, one of the reruns). The
/// two kinds of run are independent, so each round runs one of each side by side (the next
/// round starts after both); the rounds stop at the first run that disagrees. Returns the
/// outcome to record (the search's, or [`bisect::SearchOutcome::Unstable`]), the runs made, and
/// the last round's nodes.
pub fn verify(
    engine: &Engine,
    victim: &str,
    kind: PairKind,
    culprits: &[String],
    alone: Option<bool>,
    after: NodeId,
) -> Result<(bisect::SearchOutcome, u32, Vec<NodeId>), Error> {
    let anomaly = |green: bool| match kind {
        PairKind::Polluter => !green,
        PairKind::StateSetter => green,
    };
    let mut order = culprits.to_vec();
    order.push(victim.to_string());
    let mut last = vec![after];
    let (mut runs, mut reproduced, mut of) = (0, 0, 0);
    let mut alone_normal = alone.map(|g| !anomaly(g)).unwrap_or(true);
    let mut alone_seen = u32::from(alone.is_some());
    for k in 0..PROOF_RERUNS as u32 {
        let both = RunRequest::new(
            match k {
                0 => format!("verify-run({victim})"),
                k => format!("verify-run({victim})#{k}"),
            },
            "verify-run",
            Role::Head,
            order.clone(),
        )
        .after(&last)
        .repeat(k);
        let mut requests = vec![both];
        let alone_run = alone_normal && (alone_seen as usize) < PROOF_RERUNS;
        if alone_run {
            let k = alone_seen;
            requests.push(
                RunRequest::new(
                    format!("alone-run({victim})#{k}"),
                    "alone-run",
                    Role::Head,
                    vec![victim.to_string()],
                )
                .after(&last)
                .repeat(k),
            );
        }
        let nodes = requests
            .iter()
            .map(|r| engine.add_run(r))
            .collect::<Result<Vec<_>, _>>()?;
        let mut results = Vec::with_capacity(nodes.len());
        for (req, &node) in requests.iter().zip(&nodes) {
            let result = engine
                .wait_run(node)?
                .map_err(|e| Error::Infra(format!("{} failed: {e}", req.label)))?;
            engine.live.release(node);
            results.push(outcome(&result, victim));
        }
        (runs, of, last) = (runs + nodes.len() as u32, of + 1, nodes);
        if alone_run {
            alone_seen += 1;
            alone_normal = !anomaly(results[1].is_green());
        }
        if !anomaly(results[0].is_green()) {
            break;
        }
        reproduced += 1;
        if !alone_normal {
            break;
        }
    }
    let outcome = if reproduced as usize == PROOF_RERUNS && alone_normal {
        bisect::SearchOutcome::Found
    } else {
        bisect::SearchOutcome::Unstable { reproduced, of }
    };
    Ok((outcome, runs, last))
}

/// A found (or unexplained) pair.
pub struct Pair {
    pub kind: PairKind,
    pub victim: String,
    pub culprits: Vec<String>,
    pub search: Search,
    /// The last node of the search (each step starts after the one before it).
    pub last: NodeId,
    pub found: Found,
    /// Runs that checked the pair holds on every rerun.
    pub verify_runs: u32,
}

/// A known culprit set to try before searching, and where it is known from.
pub struct Known {
    pub culprits: Vec<String>,
    pub from: Found,
}

/// Tries each known set that ran before the victim in `prefix`: one run of "the set, then the
/// victim". A set reproduces when that run shows the anomaly and the victim alone (`alone`, known
/// from confirmation) does not. Returns the first set that reproduces, `None` when none does
/// (then the caller searches). Each try starts after the one before it.
pub fn reuse(
    engine: &Engine,
    victim: &str,
    prefix: &[String],
    kind: PairKind,
    alone: Option<bool>,
    known: &[Known],
    after: &[NodeId],
) -> Result<Option<Pair>, Error> {
    // The victim alone must show the normal outcome, or no set can be its culprits.
    let normal_alone = match kind {
        PairKind::Polluter => alone == Some(true),
        PairKind::StateSetter => alone == Some(false),
    };
    if !normal_alone {
        return Ok(None);
    }
    let mut previous = after.to_vec();
    let mut runs = 0;
    let mut tried: Vec<&Vec<String>> = Vec::new();
    for k in known {
        let indices: Option<Vec<usize>> = k
            .culprits
            .iter()
            .map(|c| prefix.iter().position(|p| p == c))
            .collect();
        let Some(mut indices) = indices else { continue };
        if indices.is_empty() || tried.contains(&&k.culprits) {
            continue;
        }
        tried.push(&k.culprits);
        indices.sort_unstable();
        let mut order: Vec<String> = indices.iter().map(|&i| prefix[i].clone()).collect();
        order.push(victim.to_string());
        let key = blake3::hash(order.join("\n").as_bytes()).to_hex();
        let req = RunRequest::new(
            format!("reuse-run({victim})[{}]", &key[..12]),
            "reuse-run",
            Role::Head,
            order,
        )
        .after(&previous);
        let (node, result) = engine.run_one(&req)?;
        runs += 1;
        previous = vec![node];
        let reproduced = Some(outcome(&result, victim)).is_some_and(|o| match kind {
            PairKind::Polluter => !o.is_green(),
            PairKind::StateSetter => o.is_green(),
        });
        if reproduced {
            return Ok(Some(Pair {
                kind,
                victim: victim.to_string(),
                culprits: indices.iter().map(|&i| prefix[i].clone()).collect(),
                search: Search {
                    culprits: indices,
                    runs,
                    method: bisect::Method::Reused,
                    outcome: bisect::SearchOutcome::Found,
                },
                last: node,
                found: k.from,
                verify_runs: 0,
            }));
        }
    }
    Ok(None)
}

/// Searches `prefix` (the tests that ran before `victim` in the order where it misbehaved) for
/// the tests responsible. `kind` says which anomaly: a polluter makes the victim fail, a
/// state-setter makes it pass. `whole_reproduces`: a confirmation run of the same order already
/// showed the anomaly after the whole prefix. The first step starts after `after` (the runs
/// that showed the anomaly), every other after the step before it: one chain in the audit's
/// graph.
pub fn find(
    engine: &Engine,
    role: Role,
    victim: &str,
    prefix: &[String],
    kind: PairKind,
    whole_reproduces: bool,
    after: &[NodeId],
) -> Result<Pair, Error> {
    let first = after.to_vec();
    let last: Cell<Option<NodeId>> = Cell::new(None);
    let search = bisect::search_from(
        prefix.len(),
        bisect::DEFAULT_DDMIN_CAP,
        whole_reproduces,
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
            let outcome = outcome(&result, victim);
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
        found: Found::Searched,
        verify_runs: 0,
    })
}

/// The victim's outcome in a run; one that never ran (an earlier test ended the session with
/// `pytest.exit()`, say) is red: its green is not real. One rule for the search, the reuse and
/// the checks.
fn outcome(
    result: &crate::pytest::driver::RunResult,
    victim: &str,
) -> crate::pytest::events::Outcome {
    result
        .outcome_of(victim)
        .unwrap_or(crate::pytest::events::Outcome::Error)
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

pub(crate) fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._:-=".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
