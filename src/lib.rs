//! fixgate: audits a patch to a Python repository's pytest suite and says whether its green is real.
//!
//! The binary (`src/main.rs`) parses the command line and dispatches into these modules.

pub mod audit;
pub(crate) mod beneath;
pub mod cli;
pub mod cmd;
pub mod config;
pub(crate) mod contain;
pub mod context;
pub(crate) mod delta;
pub(crate) mod engine;
pub mod environment;
pub mod error;
pub mod exit;
pub(crate) mod fsmonitor;
pub(crate) mod git_index;
pub(crate) mod json;
pub(crate) mod limits;
pub mod lock;
pub(crate) mod manifest;
pub mod pytest;
pub mod repo_path;
pub(crate) mod report;
pub(crate) mod sandbox;
pub(crate) mod snapshot;
pub(crate) mod statcache;
pub(crate) mod testsrc;
pub(crate) mod units;
pub(crate) mod watch;
