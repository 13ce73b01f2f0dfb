//! Running pytest: the interpreter, the embedded plugin, orders, and the driver.

pub(crate) mod driver;
pub mod events;
pub(crate) mod exit_watch;
pub(crate) mod forkserver;
pub(crate) mod interpreter;
pub(crate) mod order;
pub(crate) mod plugin;
pub(crate) mod rewrites;
