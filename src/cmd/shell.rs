//! `fixgate completions SHELL` and `fixgate man`: the command line described for shells and man.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::error::{Error, Result};
use crate::exit;

/// Prints the completion script for `shell`.
pub(crate) fn completions(shell: clap_complete::Shell) -> Result<i32> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "fixgate", &mut buf);
    write_stdout(&buf)
}

/// Prints the man page in roff, for `fixgate man > fixgate.1`.
pub(crate) fn man() -> Result<i32> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut buf)
        .map_err(|e| Error::io("render", "the man page", e))?;
    write_stdout(&buf)
}

/// A closed pipe (`fixgate man | head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<i32> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::io("write", "standard output", e))
        }
        _ => Ok(exit::PASS),
    }
}
