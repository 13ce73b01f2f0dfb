//! The `fixgate` binary: parse the command line, dispatch, map the outcome to an exit code.

use clap::Parser;

fn main() {
    let cli = fixgate::cli::Cli::parse();
    let code = match fixgate::cmd::run(cli) {
        Ok(code) => code,
        Err(err) => {
            // A closed standard error must not turn the exit code into a panic's 101.
            fixgate::context::stderr_line(&format!("fixgate: error: {err}"));
            err.exit_code()
        }
    };
    std::process::exit(code);
}
