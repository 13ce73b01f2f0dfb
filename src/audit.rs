//! The audit: the seed matrix, confirmation, polluter search, triage, coupling and replay,
//! budget, freeze ledger and verdict.

pub(crate) mod bisect;
pub(crate) mod budget;
pub(crate) mod collection;
pub(crate) mod edited;
pub(crate) mod footprint;
pub mod freeze;
pub(crate) mod message;
pub(crate) mod nio;
pub(crate) mod pysrc;
pub(crate) mod renamed;
pub(crate) mod replay;
pub(crate) mod scope;
pub(crate) mod source_replay;
pub(crate) mod triage;
pub(crate) mod verdict;
