//! `fixgate watch`: audits the working tree against a base after every save, until Ctrl-C or
//! SIGTERM (exit 0 after a clean shutdown).

use crate::cli::WatchArgs;
use crate::context::Ctx;
use crate::error::Result;
use crate::watch::session::{self, Settings};

/// Runs the session; the context is the session's (each audit's thread takes it in turn).
pub(crate) fn run(ctx: Ctx, args: WatchArgs) -> Result<i32> {
    let options = crate::cmd::audit::options(&args.base, &args.options, None, None, &ctx.env)?;
    let today = args.options.today.is_some().then_some(options.today);
    let failure = ctx.remote_failure.clone();
    let code = session::run(
        ctx,
        Settings {
            base: args.base,
            options,
            today,
            debounce: std::time::Duration::from_millis(args.debounce),
        },
    )?;
    failure.check()?;
    Ok(code)
}
