//! fixgate: audits a patch to a Python repository's pytest suite and says whether its green is real.
//!
//! The binary (`src/main.rs`) calls [`main`]; the exit codes are public for the integration
//! tests. Everything else is `pub(crate)`, so the compiler finds what nothing uses.

#![warn(unreachable_pub)]

pub(crate) mod audit;
pub(crate) mod beneath;
pub(crate) mod cli;
pub(crate) mod cmd;
pub(crate) mod config;
pub(crate) mod contain;
pub(crate) mod context;
pub(crate) mod delta;
pub(crate) mod engine;
pub(crate) mod environment;
pub(crate) mod error;
pub mod exit;
pub(crate) mod fsmonitor;
pub(crate) mod git_index;
pub(crate) mod json;
pub(crate) mod limits;
pub(crate) mod lock;
pub(crate) mod manifest;
pub(crate) mod pytest;
pub(crate) mod python;
pub(crate) mod remote_exec;
pub(crate) mod repo_path;
pub(crate) mod report;
pub(crate) mod sandbox;
pub(crate) mod snapshot;
pub(crate) mod statcache;
pub(crate) mod store;
pub(crate) mod test_outcome;
pub(crate) mod testsrc;
pub(crate) mod units;
pub(crate) mod watch;

#[cfg(test)]
mod parse_properties;

/// Parse the command line, dispatch, and map the outcome to an exit code.
pub fn main() -> i32 {
    use clap::Parser;
    let cli = cli::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(err) => {
            // A closed standard error must not turn the exit code into a panic's 101.
            context::stderr_line(&format!("fixgate: error: {err}"));
            err.exit_code()
        }
    }
}
