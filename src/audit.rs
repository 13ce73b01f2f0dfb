//! The audit: the seed matrix, confirmation, polluter search, triage, coupling and replay,
//! budget, freeze ledger and verdict.

pub mod bisect;
pub mod budget;
pub mod freeze;
pub mod triage;
pub mod verdict;
