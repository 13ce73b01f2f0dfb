//! `fixgate watch`: audits the working tree against a base after every save, until Ctrl-C or
//! SIGTERM (exit 0 after a clean shutdown).

use crate::cli::WatchArgs;
use crate::context::Ctx;
use crate::error::Result;
use crate::watch::session::{self, Settings};

pub fn run(ctx: Ctx, args: WatchArgs) -> Result<i32> {
    session::run(
        ctx,
        Settings {
            base: args.base,
            options: args.options,
            debounce: std::time::Duration::from_millis(args.debounce),
        },
    )
}
