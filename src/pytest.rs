//! Running pytest: the interpreter, the embedded plugin, orders, and the driver.

pub mod driver;
pub mod events;
pub mod exit_watch;
pub mod forkserver;
pub mod interpreter;
pub mod order;
pub mod plugin;
