//! The engine: the audit's steps as nodes of one live build graph, run through the cache.

mod assemble;
pub mod audit;
mod base_check;
mod culprits;
pub mod digests;
mod judge;
pub mod matrix;
mod replay;
pub mod runs;
pub mod search;
mod sides;
mod source_replay;
pub mod steps;
pub mod store;
