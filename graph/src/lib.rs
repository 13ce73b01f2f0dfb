//! fixgate's audit engine: derivations, the DAG, the parallel scheduler, early cutoff, explain.
//!
//! An audit is a [`Graph`] of [`Node`]s, each added with the nodes it depends on. A graph can
//! grow while it runs ([`Live`]): nodes added from earlier results start as soon as their
//! inputs exist. A node's
//! [`Derivation`] (kind, fixgate version, parameters, the files it reads, the output digests
//! of its inputs) gives its cache key; [`Graph::run`] finds each node in a
//! [`Store`](fixgate_cache::Store) or computes it, on a pool of `jobs` threads, and returns a
//! [`Report`] saying for every node whether it was cached, executed and why ([`Reason`]),
//! failed or skipped.
//!
//! Because keys use the *output digests* of inputs, a node that re-runs and produces the same
//! bytes leaves its dependents cached (early cutoff). A node whose dependencies are discovered
//! while it runs (a pytest run) is [traced](Node::traced): its result is found again through
//! verifying traces, valid while every file it read still has the digest it had.
//!
//! Nothing here prints, exits or reads the environment.

mod derivation;
mod explain;
mod graph;
mod live;
mod node;
mod report;
mod run;

pub use derivation::{Derivation, Param};
pub use explain::Reason;
pub use graph::{Graph, GraphError, NodeId};
pub use live::{Live, Outcome};
pub use node::{Compute, Node, NodeError, Output, Probe};
pub use report::{Check, Counts, NodeReport, Report, Status};
pub use run::{Mode, Run, RunError, RunOptions};
