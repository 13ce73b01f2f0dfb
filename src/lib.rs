//! fixgate: audits a patch to a Python repository's pytest suite and says whether its green is real.
//!
//! The binary (`src/main.rs`) parses the command line and dispatches into these modules.

pub mod audit;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod contain;
pub mod context;
pub mod delta;
pub mod engine;
pub mod error;
pub mod exit;
pub mod lock;
pub mod manifest;
pub mod pytest;
pub mod repo_path;
pub mod report;
pub mod sandbox;
pub mod snapshot;
pub mod statcache;
pub mod testsrc;
