//! The binary's one error type. Every variant is "nothing was judged" and maps to exit 2 (or
//! 130 when interrupted); verdicts (drift, reject, ...) are results, not errors, and never
//! travel through here. A broken invariant is [`Error::Bug`]: fixgate's fault, not the input's,
//! and its message says so.

use std::path::PathBuf;

use crate::exit;

#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The command line or an input named on it is unusable. The message says how to fix it.
    #[error("{0}")]
    Usage(String),
    #[error("failed to {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Git(String),
    /// Something around the run broke (an interpreter, a sandbox, a child process).
    #[error("{0}")]
    Infra(String),
    /// pytest ran and the suite did not collect (a file that does not import, an option its
    /// configuration passes that pytest rejects, a conftest that raises): the suite's own
    /// failure, told in pytest's words, which an audit judges (the head's `collection-error`),
    /// where every other error means nothing could be judged.
    #[error("{0}")]
    NotCollected(String),
    /// Ctrl-C or SIGTERM: the children were killed and the sandboxes removed.
    #[error("interrupted")]
    Interrupted,
    /// An invariant of fixgate's own broke (an output that does not decode, a node that cannot
    /// be added): not the repository's fault, and nothing the user can fix but report.
    #[error("bug: {0} (this is a bug in fixgate, not in the repository: please report it, with the command that showed it)")]
    Bug(String),
}

impl Error {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Error {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A broken invariant, described as what was found broken.
    pub(crate) fn bug(what: impl Into<String>) -> Error {
        Error::Bug(what.into())
    }

    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Error::Interrupted => exit::INTERRUPTED,
            _ => exit::ERROR,
        }
    }
}

impl From<git2::Error> for Error {
    fn from(e: git2::Error) -> Error {
        Error::Git(format!("git: {}", e.message()))
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
