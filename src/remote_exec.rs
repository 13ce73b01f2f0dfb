//! Remote execution: an audit's pytest runs as REAPI actions on an existing service (BuildGrid,
//! Buildbarn, BuildBuddy, EngFlow, NativeLink), and `fixgate worker`, a bot for small setups
//! and the tests. See docs/remote-execution.md.

pub(crate) mod action;
pub(crate) mod bots;
pub(crate) mod client;
pub(crate) mod merkle;
pub(crate) mod worker;
