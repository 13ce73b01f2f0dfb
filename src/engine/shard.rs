//! `--shard K/N`: one share of the matrix, run (or found) and nothing else.

use fixgate_graph::NodeId;

use crate::audit::order::OrderLabel;
use crate::audit::outcome::ShardRun;
use crate::engine::matrix;
use crate::engine::step::Engine;
use crate::error::Result;
use crate::pytest::events::CollectedItem;

/// `--shard K/N`: the K-th (1-based) of N shares of the matrix's orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) k: u32,
    pub(crate) n: u32,
}

/// The orders whose place in the matrix is K-1 modulo N, run (or found) and nothing else. Every
/// share computes the same labels and orders from the same collection, so the shares' runs have
/// exactly the keys the final audit's will.
pub(crate) fn run(
    engine: &Engine,
    shard: Shard,
    labels: &[OrderLabel],
    selection: &[CollectedItem],
    collection: NodeId,
    uploaded: bool,
    scoped: bool,
) -> Result<ShardRun> {
    let mine: Vec<OrderLabel> = labels
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as u32 % shard.n == shard.k - 1)
        .map(|(_, l)| *l)
        .collect();
    // What the runs record is part of their keys: a scoped audit's share records as it does.
    let started = matrix::start(engine, &mine, selection, collection, scoped)?;
    let nodes: Vec<NodeId> = started.nodes.values().copied().collect();
    started.settle(engine)?;
    let executed = nodes
        .iter()
        .filter(|n| {
            engine
                .live
                .report(**n)
                .is_some_and(|r| matches!(r.status, fixgate_graph::Status::Executed { .. }))
        })
        .count();
    Ok(ShardRun {
        k: shard.k,
        n: shard.n,
        orders: mine,
        executed,
        cached: nodes.len() - executed,
        uploaded,
    })
}
