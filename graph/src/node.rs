//! A node of the audit graph: its identity, its parameters and files, how it is cached, and the
//! function that computes it.

use std::collections::BTreeMap;
use std::fmt;

use fixgate_cache::{Dep, Digest};
use serde::Serialize;

use crate::derivation::RESERVED_KINDS;
use crate::Param;

/// What a node computed: the bytes its dependents receive (and the cache stores), and, for a
/// traced node, the dependencies it discovered while running.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// The output. Its digest is what dependents' keys use, so two runs that produce the same
    /// bytes leave everything downstream cached (early cutoff): it must not contain timings,
    /// absolute paths or anything else that varies between identical runs.
    pub bytes: Vec<u8>,
    /// Files the run read or looked for, with their digests at the time. Recorded as the
    /// node's verifying trace; ignored for nodes that are not traced.
    pub reads: Vec<Dep>,
}

impl Output {
    /// An output with no discovered dependencies.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Output {
        Output {
            bytes: bytes.into(),
            reads: Vec::new(),
        }
    }

    /// Adds the dependencies the run discovered.
    pub fn with_reads(mut self, reads: Vec<Dep>) -> Output {
        self.reads = reads;
        self
    }
}

/// Why a node produced no output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "type", content = "message", rename_all = "kebab-case")]
pub enum NodeError {
    /// The inputs are such that this node fails, and will fail again on the same inputs (a
    /// test file that does not collect, say). Cached like an output.
    #[error("{0}")]
    Data(String),
    /// The machinery failed (a sandbox that could not be made, an interpreter that vanished).
    /// Never cached: the next run tries again.
    #[error("{0}")]
    Infra(String),
    /// The graph's caller cancelled the work (Ctrl-C, or a save under `fixgate watch`) and the
    /// node stopped part way, its processes killed: it says nothing about its inputs, so it is
    /// never cached, and its dependents are skipped.
    #[error("cancelled")]
    Cancelled,
}

/// Answers the current digest of a repo-relative path, `None` if it does not exist.
pub type Probe = dyn Fn(&str) -> Option<Digest> + Send + Sync;

/// Computes a node from the outputs of its inputs, in edge order.
pub type Compute = dyn Fn(&[&[u8]]) -> Result<Output, NodeError> + Send + Sync;

/// How a node's result is found again.
pub(crate) enum Caching {
    /// Every dependency is in the derivation: the result is stored under its key.
    Static,
    /// Some dependencies are discovered while it runs: results are found through verifying
    /// traces, checked with the probe.
    Traced(Box<Probe>),
    /// Never cached: it always runs (it reads the world, like a snapshot of the working tree).
    Transient,
}

/// A step of the audit. Built with [`Node::new`] and the builder methods, then added to a
/// [`Graph`](crate::Graph) with its inputs.
pub struct Node {
    pub(crate) label: String,
    pub(crate) kind: &'static str,
    pub(crate) params: BTreeMap<String, Param>,
    pub(crate) files: BTreeMap<String, Digest>,
    pub(crate) caching: Caching,
    pub(crate) compute: Box<Compute>,
}

impl Node {
    /// A node of `kind` (a lowercase name such as `seed-run`, part of every key), identified by
    /// `label` (such as `seed-run(3)`: stable across runs, unique in its graph), computed by
    /// `compute`.
    ///
    /// The label is not part of the key: two nodes with equal derivations share one cached
    /// result (the base's results are shared by every patch that way), so the parameters, files
    /// and inputs must capture everything that makes two nodes compute different things.
    ///
    /// # Panics
    ///
    /// If `kind` is not lowercase ASCII letters, digits and dashes, or is reserved by the graph:
    /// kinds are constants of the program, so this is a bug, not an input error.
    pub fn new(
        label: impl Into<String>,
        kind: &'static str,
        compute: impl Fn(&[&[u8]]) -> Result<Output, NodeError> + Send + Sync + 'static,
    ) -> Node {
        assert!(
            !kind.is_empty()
                && kind
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !RESERVED_KINDS.contains(&kind),
            "invalid node kind {kind:?}"
        );
        Node {
            label: label.into(),
            kind,
            params: BTreeMap::new(),
            files: BTreeMap::new(),
            caching: Caching::Static,
            compute: Box::new(compute),
        }
    }

    /// Adds a parameter (part of the key).
    pub fn param(mut self, name: impl Into<String>, value: impl Into<Param>) -> Node {
        self.params.insert(name.into(), value.into());
        self
    }

    /// Adds a file the node reads, known before it runs, with its digest (part of the key).
    pub fn file(mut self, path: impl Into<String>, digest: Digest) -> Node {
        self.files.insert(path.into(), digest);
        self
    }

    /// Makes the node traced: its result is looked up through verifying traces, each checked by
    /// asking `probe` for the current digest of every recorded dependency. `compute` reports
    /// what it read in [`Output::reads`].
    pub fn traced(
        mut self,
        probe: impl Fn(&str) -> Option<Digest> + Send + Sync + 'static,
    ) -> Node {
        self.caching = Caching::Traced(Box::new(probe));
        self
    }

    /// Makes the node transient: never cached, always run. Its dependents still benefit from
    /// early cutoff when it produces the same output as last time.
    pub fn transient(mut self) -> Node {
        self.caching = Caching::Transient;
        self
    }

    /// The node's label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The node's kind.
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let caching = match self.caching {
            Caching::Static => "static",
            Caching::Traced(_) => "traced",
            Caching::Transient => "transient",
        };
        f.debug_struct("Node")
            .field("label", &self.label)
            .field("kind", &self.kind)
            .field("params", &self.params)
            .field("files", &self.files)
            .field("caching", &caching)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "invalid node kind")]
    fn a_reserved_kind_is_refused() {
        Node::new("x", "last-seen", |_| Ok(Output::default()));
    }

    #[test]
    #[should_panic(expected = "invalid node kind")]
    fn a_kind_with_spaces_is_refused() {
        Node::new("x", "seed run", |_| Ok(Output::default()));
    }
}
