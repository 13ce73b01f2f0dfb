//! The audit: the seed matrix, confirmation, polluter search, triage, coupling and replay,
//! budget, freeze ledger and verdict.

pub mod bisect;
pub mod budget;
pub(crate) mod collection;
pub(crate) mod edited;
pub mod freeze;
pub(crate) mod message;
pub(crate) mod replay;
pub(crate) mod source_replay;
pub mod triage;
pub mod verdict;
