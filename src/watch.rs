//! `fixgate watch`: the audit kept warm while someone iterates on fixtures and code. It audits
//! the working tree against the base, waits for a change, and audits again, reusing everything
//! unchanged; a change during an audit cancels it and starts again with the latest bytes.
//!
//! **Cancellation: in this process, through the runner's flag.** Each audit runs on a thread
//! of the watcher with a clone of the watcher's [`Runner`](crate::pytest::driver::Runner)
//! whose `interrupted` flag is the audit's own token (the clone shares the warm interpreters).
//! It is the token the runner already honoured for Ctrl-C: the driver polls it while it
//! follows a pytest process (every 40 ms, between pidfd wake-ups), kills the run's process
//! group (a forked run through its zygote, which kills and reaps what the run left, sessions
//! of their own included; a fresh run's supervisor, whose PID namespace dies with it) and
//! waits for it, then returns `Error::Interrupted`, which the run node turns into the typed
//! `NodeError::Cancelled`: never cached, its dependents skipped. The runner starts nothing once
//! the token is set (no sandbox, no zygote, no process), so the queued nodes fail at once and
//! `Live::scope` returns when the last running one has been killed and waited for. The audit's
//! thread returning is therefore the proof that no process of it is left: only then is the
//! cancellation reported and the next audit started.
//!
//! The other design, each audit in a child process killed by its group, was measured against
//! this one (benches/watch.sh, "fresh audit"): a child pays what a fresh `fixgate audit` pays,
//! above all new warm interpreters for both sides (a Python start and a collection each, and
//! the base's are the ones a change never invalidates), plus the process, the cache's index
//! and the interpreter's fingerprint. Zygotes cannot be kept in the watcher for a child either:
//! they serve their parent through pipes, and a child killed mid-command leaves the protocol
//! in an unknown state. Killing a group is faster than unwinding a graph, but both are well
//! under the 2 s budget (the bench reports the save-to-cancelled time); the in-process design
//! is the one that meets it for the report (docs/watch.md has the numbers).
//!
//! **What audits read: a frozen copy** ([`frozen`]). An audit reads the working tree many
//! times (listing, hashing, each sandbox's copy, the digests a run's trace is checked against
//! after the run); a save in between would cache one version's result under another's
//! digests. The watcher copies each changed path into a folder only it writes, only between
//! audits, and audits that copy: one audit, one set of bytes.
//!
//! **What is reused between audits.** The cache (every node whose inputs are unchanged is a
//! hit, runs by their verifying traces); the runner and its zygotes while the interpreter's
//! fingerprint is the same. Zygotes are keyed by the snapshot they collected, so the base's
//! serve every audit, and a changed head (a configuration file or a conftest included) gets
//! new ones, collected afresh from its new bytes. The file hashes of the tree, in memory
//! (src/fsmonitor.rs), refreshed from events: the lock check before each audit reads nothing,
//! and a save that leaves the bytes as they were starts no audit.
//!
//! **What is watched** is in [`scope`]; the events in [`inotify`] and [`tree`]; when the next
//! audit starts in [`debounce`]; the lock check in [`gate`]; what is shown in [`screen`]; the
//! loop in [`session`].

pub(crate) mod debounce;
pub(crate) mod frozen;
pub(crate) mod gate;
pub(crate) mod inotify;
pub(crate) mod scope;
pub(crate) mod screen;
pub(crate) mod session;
pub(crate) mod tree;
