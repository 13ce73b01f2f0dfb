//! The engine: the audit's steps as nodes of the build graph, run through the cache.

pub mod digests;
pub mod runs;
pub mod store;
pub mod steps;
pub mod audit;
pub mod matrix;
pub mod search;
