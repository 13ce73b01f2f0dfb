//! `--check`: the seed runs that came from the cache ran again (the graph's check mode); every
//! test whose outcome differs from the cached one is nondeterminism the cache had hidden.

use std::sync::atomic::Ordering;

use crate::audit::outcome::Nondeterminism;
use crate::engine::matrix::Matrix;
use crate::engine::step::Engine;

/// The outcomes the fresh runs of the matrix's cached orders did not repeat.
pub(crate) fn run(engine: &Engine, matrix: &Matrix) -> Vec<Nondeterminism> {
    let mut out = Vec::new();
    for (label, &node) in &matrix.nodes {
        let Some(fresh) = engine.live.fresh_output(node) else {
            continue;
        };
        let Ok(fresh) = crate::engine::runs::decode_run(&fresh) else {
            continue;
        };
        engine
            .processes
            .fetch_add(fresh.processes, Ordering::Relaxed);
        for t in &fresh.tests {
            let cached = matrix.outcome(*label, &t.nodeid);
            if cached != Some(t.outcome) {
                out.push(Nondeterminism {
                    nodeid: t.nodeid.clone(),
                    order: *label,
                    cached,
                    fresh: t.outcome,
                });
            }
        }
    }
    out
}
