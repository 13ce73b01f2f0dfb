//! The audit: the seed matrix, confirmation, polluter search, triage, coupling and replay,
//! budget, freeze ledger and verdict.

pub(crate) mod bisect;
pub(crate) mod budget;
pub(crate) mod collection;
pub(crate) mod edited;
pub mod freeze;
pub(crate) mod hidden;
pub(crate) mod message;
pub(crate) mod nio;
pub(crate) mod renamed;
pub(crate) mod replay;
pub(crate) mod source_replay;
pub(crate) mod spec_scope;
pub(crate) mod triage;
pub(crate) mod verdict;
