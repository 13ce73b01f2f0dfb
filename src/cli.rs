//! The command line, as clap parses it. `main` resolves it into settings and dispatches.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "fixgate",
    version,
    about = "Audits a patch to a Python repository's pytest suite and says whether its green is real",
    long_about = "Audits a patch to a Python repository's pytest suite and says whether its green \
                  is real: order dependence, tests writing shared fixtures they do not own, \
                  expected-data fixtures edited together with the code, and new skips.\n\n\
                  Exit codes: 0 pass, 1 reject, 2 error (nothing judged), 3 fixture drift \
                  against fixtures.lock, 4 unverified (budget breached), 5 expired freeze entry."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command accepts, before or after the command name.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// The repository to work on [default: the git root above the current directory]
    #[arg(long, global = true, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// Output format
    #[arg(long, global = true, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Write the report to FILE instead of standard output
    #[arg(long, global = true, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Cache directory [default: $FIXGATE_CACHE_DIR, else the user cache directory]
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// No progress and no warnings on standard error
    #[arg(long, short, global = true)]
    pub quiet: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Human,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the fixture manifest: every fixture file with its group, blake3 and size
    Manifest(ManifestArgs),
    /// Write fixtures.lock, or check the fixtures against it (exit 3 on drift)
    Lock(LockArgs),
    /// List fixture files added, removed and modified between two snapshots
    Delta(DeltaArgs),
}

#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// Read the fixtures of this revision from git objects [default: the working tree]
    #[arg(long, value_name = "REV")]
    pub rev: Option<String>,
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// Compare the fixtures with the lock instead of writing it; exit 3 on any drift
    #[arg(long)]
    pub check: bool,
    /// Take the fixtures of this revision [default: the working tree]
    #[arg(long, value_name = "REV")]
    pub rev: Option<String>,
    /// The lock file [default: fixtures.lock at the repository root]
    #[arg(long, value_name = "FILE")]
    pub lock: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DeltaArgs {
    /// The base revision (anything git accepts: HEAD~1, a tag, a sha)
    pub base: String,
    /// The head revision [default: the working tree]
    pub head: Option<String>,
}
