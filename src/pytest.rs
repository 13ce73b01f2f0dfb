//! Running pytest: the interpreter, the embedded plugin, orders, the prepared command of a
//! process, the runner (`driver`: what runs share and how a process starts; `collect`, `run`,
//! `follow`), the warm interpreters runs fork from (`forkserver`, `zygote`), the event stream
//! and the run result built from it.

pub(crate) mod collect;
pub(crate) mod command;
pub(crate) mod driver;
pub(crate) mod events;
pub(crate) mod exit_watch;
pub(crate) mod follow;
pub(crate) mod fork_stats;
pub(crate) mod forkserver;
pub(crate) mod ini;
pub(crate) mod interpreter;
pub(crate) mod lease;
pub(crate) mod order;
pub(crate) mod outside;
pub(crate) mod plugin;
pub(crate) mod progress;
pub(crate) mod record;
pub(crate) mod replies;
pub(crate) mod result;
pub(crate) mod rewrites;
pub(crate) mod run;
pub(crate) mod said;
pub(crate) mod stream;
pub(crate) mod zygote;
pub(crate) mod zygote_key;
