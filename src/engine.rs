//! The engine: the audit's steps as nodes of one live build graph, run through the cache.

pub(crate) mod audit;
mod base_check;
mod base_suite;
mod carry;
mod check;
mod compact;
mod confirm;
mod culprits;
mod decoded;
pub(crate) mod digests;
mod impact;
mod itemize;
mod judge;
pub(crate) mod kind;
pub(crate) mod matrix;
mod nio;
mod pairs;
mod replay;
pub(crate) mod runs;
pub(crate) mod search;
pub(crate) mod shard;
pub(crate) mod sides;
mod source_replay;
mod source_tamper;
pub(crate) mod steps;
