//! The engine: the audit's steps as nodes of the build graph, run through the cache.

pub mod audit;
pub mod digests;
pub mod matrix;
pub mod runs;
pub mod search;
pub mod steps;
pub mod store;
