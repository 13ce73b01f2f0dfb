//! The commands: each resolves its arguments, calls into the library and renders a report.

pub(crate) mod atomic;
pub(crate) mod audit;
pub(crate) mod cache;
pub(crate) mod delta;
pub(crate) mod demo;
pub(crate) mod graph;
pub(crate) mod init;
pub(crate) mod lock;
pub(crate) mod manifest;
pub(crate) mod run;
pub(crate) mod settings;
pub(crate) mod shell;
pub(crate) mod trace;
pub(crate) mod watch;
pub(crate) mod worker;

use crate::cli::{Cli, Command};
use crate::context::Ctx;
use crate::error::Result;

/// Runs one command and returns its exit code.
pub(crate) fn run(cli: Cli) -> Result<i32> {
    // These two need no repository: they describe the command line itself.
    match &cli.command {
        Command::Completions(args) => return shell::completions(args.shell),
        Command::Man => return shell::man(),
        _ => {}
    }
    // The one read of the process environment; everything below gets typed values from it.
    let env = crate::environment::Environment::read()?;
    // A worker serves a service, not a repository.
    if let Command::Worker(args) = &cli.command {
        return worker::run(args, env);
    }
    let mut ctx = Ctx::new(&settings::global(&cli.global), env)?;
    ctx.remote = settings::remote(&cli.global.remote, &ctx.repo.root, &ctx.env)?;
    // Uncontained runs can write whatever fixgate can: they get a cache of their own, which no
    // other audit reads, and no remote.
    if cli.command.containment() == Some(crate::cli::ContainmentArg::None) {
        ctx.isolate_cache()?;
    }
    let code = match cli.command {
        Command::Manifest(args) => manifest::run(&ctx, &args),
        Command::Lock(args) => lock::run(&ctx, &args),
        Command::Delta(args) => delta::run(&ctx, &args),
        Command::Run(args) => run::run(&ctx, &args),
        Command::Trace(args) => trace::run(&ctx, &args),
        Command::Audit(args) => audit::run(&ctx, &args),
        // The session owns the context and checks the remote itself.
        Command::Watch(args) => return watch::run(ctx, args),
        Command::Graph(args) => graph::graph(&ctx, &args),
        Command::Explain => graph::explain(&ctx),
        Command::Cache(args) => cache::run(&ctx, &args),
        Command::Demo(args) => demo::run(&ctx, &args),
        Command::Init(args) => init::run(&ctx, &args),
        Command::Completions(args) => shell::completions(args.shell),
        Command::Man => shell::man(),
        Command::Worker(_) => unreachable!("dispatched before the repository is opened"),
    }?;
    ctx.remote_failure.check()?;
    Ok(code)
}
