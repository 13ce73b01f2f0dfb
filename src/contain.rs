//! Containment of the patch's untrusted test code, in tiers (docs/containment.md):
//!
//! - **namespaces** (`namespaces`): each run in its own user, mount, PID and network
//!   namespaces, a read-only world but for its sandbox, the repository, the home, the cache and
//!   the other sandboxes covered;
//! - **Landlock** (`landlock`): where a container or the distribution refuses namespaces,
//!   Landlock's file system and network rules, a seccomp filter, no_new_privs, and for root an
//!   unprivileged uid;
//! - **none**, only on request (`--containment none`), with a private cache.
//!
//! [`apply`] turns any `Command` into a contained one; everything it does in the child happens
//! between fork and exec, so it is system calls on data prepared beforehand (no allocation, no
//! locks). The process tree of one run:
//!
//! ```text
//! fixgate ── supervisor (pdeathsig) ── reaper (PID 1 of the run) ── pytest (PID 2) ── ...
//! ```
//!
//! The supervisor is the child fixgate waits for: it exits as pytest did (code or signal). In
//! the namespaces tier the reaper is PID 1 of the run's PID namespace: when pytest exits it
//! exits, and the kernel kills every other process of the namespace. Each dies when its parent
//! does (`PR_SET_PDEATHSIG`), so a SIGKILL of fixgate takes the whole run with it. In the other
//! tiers the supervisor is a child subreaper instead: after pytest exits it kills every
//! descendant left; pytest's side is restricted (Landlock, seccomp, uid) just before exec, so
//! the supervisor keeps what it needs to sweep.
//!
//! A forking zygote (one warm interpreter per job slot, a fork per run) spawned through
//! `PreparedCommand::command` gets all of this once, for itself, and its forks inherit it:
//! the same namespaces, or the same Landlock domain, filter and uid. Each fork writes only the
//! zygote's sandbox, which fixgate restores between runs (and hands back to the run's uid).

mod host;
mod landlock;
mod namespaces;
mod plan;
mod probe;
mod process;
mod reads;
mod seccomp;
mod sys;
mod uid;

pub(crate) use host::{Choice, Containment, Host, Mode};
pub(crate) use plan::{apply, hand_over, refused_read};
pub(crate) use reads::RunPaths;
