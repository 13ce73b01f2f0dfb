//! Running pytest: the interpreter, the embedded plugin, orders, the prepared command of a process,
//! the runner (`driver`), the event stream it follows and the run result it builds.

pub(crate) mod command;
pub(crate) mod driver;
pub(crate) mod events;
pub(crate) mod exit_watch;
pub(crate) mod forkserver;
pub(crate) mod ini;
pub(crate) mod interpreter;
pub(crate) mod lease;
pub(crate) mod order;
pub(crate) mod outside;
pub(crate) mod plugin;
pub(crate) mod progress;
pub(crate) mod result;
pub(crate) mod rewrites;
pub(crate) mod stream;
