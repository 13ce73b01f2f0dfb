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

    /// A thread of fixgate's that panicked (`payload`: what its join gave), described as
    /// `what` panicked, with the panic's message when it said one in words.
    pub(crate) fn panicked(what: &str, payload: &(dyn std::any::Any + Send)) -> Error {
        let message = (payload.downcast_ref::<&str>().copied())
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        match message {
            Some(m) => Error::Bug(format!("{what} panicked: {m}")),
            None => Error::Bug(format!("{what} panicked")),
        }
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

#[cfg(test)]
mod tests {
    use super::Error;

    /// What a joined thread's panic gives, as `std::thread::Scope::spawn(..).join()` does.
    fn join_panic(f: impl FnOnce() + Send) -> Box<dyn std::any::Any + Send> {
        std::thread::scope(|s| s.spawn(f).join().expect_err("the thread panics"))
    }

    #[test]
    fn a_panic_is_a_bug_that_says_what_panicked_and_its_message() {
        // (The threads' panic messages go to the test's captured output.)
        let literal = join_panic(|| panic!("a literal"));
        let formatted = join_panic(|| panic!("formatted {}", 7));
        let other = join_panic(|| std::panic::panic_any(42_u8));
        let said = |payload: &Box<dyn std::any::Any + Send>| {
            Error::panicked("the wait for the base's rev run", &**payload).to_string()
        };
        let literal = said(&literal);
        assert!(
            literal.contains("bug: the wait for the base's rev run panicked: a literal ("),
            "{literal}"
        );
        assert!(said(&formatted).contains("run panicked: formatted 7 ("));
        // A payload that is not words: what panicked, and nothing made up.
        let other = said(&other);
        assert!(
            other.contains("run panicked (this is a bug in fixgate"),
            "{other}"
        );
    }
}
