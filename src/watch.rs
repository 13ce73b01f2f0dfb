//! `fixgate watch`: the audit kept warm while someone iterates on fixtures and code. It audits
//! the working tree against the base, waits for a change, and audits again, reusing everything
//! unchanged; a change during an audit cancels it and starts again with the latest bytes.
//!
//! **Cancellation: in this process, through the runner's flag.** Each audit runs on a thread
//! of the watcher with a [`Runner`](crate::pytest::driver::Runner) whose `interrupted` flag is
//! the audit's own (a clone of the watcher's runner, sharing its warm interpreters). The flag
//! is the cancellation token the runner already honoured for Ctrl-C: the driver polls it while
//! it follows a pytest process (every 40 ms), kills the run's process group (or its forked
//! child through the zygote, which reaps whatever the child left) and waits for it, and returns
//! `Error::Interrupted`; the graph maps that to an infrastructure error, which is never
//! cached, so a cancelled run leaves no entry, half-written or wrong (the store writes entries
//! only from completed nodes, by rename). Queued nodes still reach a worker, and the runner
//! starts nothing once the flag is set, so the graph unwinds in one poll interval after the
//! running processes are dead. Under containment every process of a run lives in its PID
//! namespace and dies with it.
//!
//! The other design, one child process per audit killed by its process group, was measured
//! against this one (benches/watch.sh): a child pays what a fresh `fixgate audit` pays (the
//! process, the cache's index, the interpreter's fingerprint, and above all new warm
//! interpreters for both sides, a Python start and a collection each), where the watcher's
//! zygotes of an unchanged snapshot (always the base's) are alive and forked from at once. A
//! child could hand its zygotes nothing across the kill. Measured on the demo (load ~5 on 2
//! cores), a one-test change took 4.6 s through a fresh audit process; see docs/watch.md for
//! the watcher's numbers.
//!
//! **What is reused between audits.** The cache (every node whose inputs are unchanged is a
//! hit, runs by their verifying traces); the runner with its zygotes while the interpreter's
//! fingerprint is the same and no configuration file changed (`pyproject.toml`, `pytest.ini`,
//! `setup.cfg`, `tox.ini`, `fixtures.manifest`, a `conftest.py`: then the zygotes go and
//! collection starts afresh); the base's zygotes across every audit (its snapshot does not
//! change); the working tree's file hashes in memory (src/fsmonitor.rs), refreshed from
//! events, so the lock check after a save reads only what the save touched, and a save that
//! leaves the bytes as they were starts no audit.
//!
//! **What is watched** is in [`scope`]; the events in [`inotify`] and [`tree`]; when the next
//! audit starts in [`debounce`]; what is shown in [`screen`]; the loop in [`session`].

pub(crate) mod debounce;
pub(crate) mod frozen;
pub(crate) mod gate;
pub(crate) mod inotify;
pub(crate) mod scope;
pub(crate) mod screen;
pub(crate) mod session;
pub(crate) mod tree;
