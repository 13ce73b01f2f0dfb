//! The seed matrix and what is read off it: outcomes per order, confirmation of disagreeing
//! tests, and runs of single tests alone.

use std::collections::BTreeMap;

use crate::engine::runs::{Engine, Role, RunRequest};
use crate::error::{Error, Result};
use crate::pytest::driver::RunResult;
use crate::pytest::events::{CollectedItem, Outcome};
use crate::pytest::order;

/// An order of the matrix: `0` (file order), `rev` (reversed file order) or a seed.
pub fn order_of(label: &str, items: &[CollectedItem]) -> Vec<String> {
    match label {
        "rev" => order::reversed(items),
        s => order::seeded(items, s.parse().unwrap_or(0)),
    }
}

pub fn is_green(o: Outcome) -> bool {
    matches!(o, Outcome::Passed | Outcome::Skipped | Outcome::Xfailed)
}

/// The seed runs of the matrix, one per order label.
pub struct Matrix {
    pub labels: Vec<String>,
    pub runs: BTreeMap<String, RunResult>,
}

impl Matrix {
    pub fn run(engine: &Engine, labels: &[String], items: &[CollectedItem]) -> Result<Matrix> {
        let requests: Vec<RunRequest> = labels
            .iter()
            .map(|l| RunRequest {
                label: format!("seed-run({l})"),
                kind: "seed-run",
                role: Role::Head,
                order: order_of(l, items),
                overlay: Vec::new(),
            })
            .collect();
        let results = engine.run_batch(&requests)?;
        let mut runs = BTreeMap::new();
        for (l, r) in labels.iter().zip(results) {
            let r = r.map_err(|e| Error::Infra(format!("seed run {l} failed: {e}")))?;
            runs.insert(l.clone(), r);
        }
        Ok(Matrix {
            labels: labels.to_vec(),
            runs,
        })
    }

    /// The outcomes of one test, in label order.
    pub fn outcomes(&self, nodeid: &str) -> Vec<(String, Outcome)> {
        self.labels
            .iter()
            .filter_map(|l| self.runs[l].outcome_of(nodeid).map(|o| (l.clone(), o)))
            .collect()
    }

    /// Tests green in some order and red in another.
    pub fn disagreeing(&self, nodeids: &[String]) -> Vec<String> {
        nodeids
            .iter()
            .filter(|id| {
                let o = self.outcomes(id);
                o.iter().any(|(_, o)| is_green(*o)) && o.iter().any(|(_, o)| !is_green(*o))
            })
            .cloned()
            .collect()
    }

    /// Tests red in every order.
    pub fn always_red(&self, nodeids: &[String]) -> Vec<String> {
        nodeids
            .iter()
            .filter(|id| {
                let o = self.outcomes(id);
                !o.is_empty() && o.iter().all(|(_, o)| !is_green(*o))
            })
            .cloned()
            .collect()
    }

    pub fn first(&self, nodeid: &str, green: bool) -> Option<String> {
        self.outcomes(nodeid)
            .into_iter()
            .find(|(_, o)| is_green(*o) == green)
            .map(|(l, _)| l)
    }
}

/// Reruns of matrix orders (a fresh process, a separate cache entry) and runs of single tests.
pub struct Confirmation {
    pub reruns: BTreeMap<String, RunResult>,
    pub alone: BTreeMap<String, Outcome>,
}

/// Above this many tests red in every order, they first run together in one process and only
/// those that pass there run alone: a change that breaks the whole suite must not start a
/// process per test. A test red in that run too is taken as red alone.
pub const MANY_RED: usize = 8;

pub fn confirm(
    engine: &Engine,
    matrix: &Matrix,
    items: &[CollectedItem],
    disagreeing: &[String],
    always_red: &[String],
) -> Result<Confirmation> {
    // Each disagreeing test needs its failing and its passing order rerun, but only up to the
    // test itself: what runs after it cannot change its outcome.
    let mut needed: BTreeMap<String, usize> = BTreeMap::new();
    for id in disagreeing {
        for label in [matrix.first(id, false), matrix.first(id, true)]
            .into_iter()
            .flatten()
        {
            if let Some(pos) = matrix.runs[&label].order.iter().position(|o| o == id) {
                let end = needed.entry(label).or_insert(0);
                *end = (*end).max(pos + 1);
            }
        }
    }
    let mut out = Confirmation {
        reruns: BTreeMap::new(),
        alone: BTreeMap::new(),
    };
    let mut alone: Vec<String> = disagreeing.to_vec();
    if always_red.len() > MANY_RED {
        let req = RunRequest {
            label: "red-together-run".into(),
            kind: "red-together-run",
            role: Role::Head,
            order: always_red.to_vec(),
            overlay: Vec::new(),
        };
        let r = engine
            .run_batch(std::slice::from_ref(&req))?
            .pop()
            .expect("one result per request")
            .map_err(|e| Error::Infra(format!("{} failed: {e}", req.label)))?;
        for id in always_red {
            match r.outcome_of(id) {
                Some(o) if !is_green(o) => {
                    out.alone.insert(id.clone(), o);
                }
                _ => alone.push(id.clone()),
            }
        }
    } else {
        alone.extend(always_red.iter().cloned());
    }
    let mut requests: Vec<RunRequest> = needed
        .iter()
        .map(|(l, end)| {
            let mut order = order_of(l, items);
            order.truncate(*end);
            RunRequest {
                label: format!("confirm-run({l})"),
                kind: "confirm-run",
                role: Role::Head,
                order,
                overlay: Vec::new(),
            }
        })
        .collect();
    requests.extend(alone.iter().map(|id| RunRequest {
        label: format!("alone-run({id})"),
        kind: "alone-run",
        role: Role::Head,
        order: vec![id.clone()],
        overlay: Vec::new(),
    }));
    let results = engine.run_batch(&requests)?;
    for (req, r) in requests.iter().zip(results) {
        let r = r.map_err(|e| Error::Infra(format!("{} failed: {e}", req.label)))?;
        if req.kind == "alone-run" {
            if let Some(o) = r.outcome_of(&req.order[0]) {
                out.alone.insert(req.order[0].clone(), o);
            }
        } else {
            let label = req
                .label
                .trim_start_matches("confirm-run(")
                .trim_end_matches(')');
            out.reruns.insert(label.to_string(), r);
        }
    }
    Ok(out)
}
