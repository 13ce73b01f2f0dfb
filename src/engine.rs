//! The engine: the audit's steps as nodes of one live build graph, run through the cache.

mod assemble;
pub(crate) mod audit;
mod base_check;
mod compact;
mod culprits;
pub(crate) mod digests;
mod impact;
mod judge;
pub(crate) mod matrix;
mod pairs;
mod replay;
pub(crate) mod runs;
pub(crate) mod search;
mod sides;
mod source_replay;
pub(crate) mod steps;
pub(crate) mod store;
