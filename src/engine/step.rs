//! A step of the audit: every node of its graph is one. A step is its kind, its typed input (the
//! step's own fields), the key written from that input, and its typed output with the one
//! encoding its dependents decode it from.
//!
//! The key is written by destructuring the input, every field named (`let Triage { evidence } =
//! self;`, never `..`): a field added to a step does not compile until its `key` writes it or
//! says why it need not (a handle the output does not depend on, a value its input nodes'
//! digests already carry). The graph hashes the kind, fixgate's version, what `key` wrote and
//! the output digests of the step's input nodes (`fixgate_graph::Derivation`).
//!
//! Every node is made by [`node`] (through [`Engine::add`]): what every step's key holds besides
//! its own input (the kind's [`NodeKind::version`] today; the project of a repository of several
//! pytest projects tomorrow) is written there once. [`Engine`] is what the steps of one audit
//! share: its graph, where pytest runs, the two sides' digests, and nothing of any one phase.

use std::marker::PhantomData;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use fixgate_cache::{Dep, Digest};
use fixgate_graph::{Live, Node, NodeError, NodeId, Output, Param};
use indicatif::MultiProgress;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::config::{DepsMode, FixtureGroups};
use crate::engine::digests::TreeDigests;
use crate::engine::exec::Pytest;
use crate::engine::kind::NodeKind;
use crate::error::{Error, Result};

/// Which side of the audit a step is of (the snapshot a run executes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Base,
    Head,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Base => "base",
            Role::Head => "head",
        }
    }
}

/// What the steps of one audit share: its one live graph among them.
pub(crate) struct Engine<'l, 'a> {
    pub(crate) live: &'l Live<'a>,
    /// Where pytest runs.
    pub(crate) pytest: Arc<dyn Pytest>,
    /// The fixture groups both sides are judged with (manifests and leases depend on them).
    pub(crate) groups: FixtureGroups,
    /// How a run's dependencies are tracked.
    pub(crate) deps_mode: DepsMode,
    pub(crate) base: Arc<TreeDigests>,
    pub(crate) head: Arc<TreeDigests>,
    pub(crate) progress: Option<MultiProgress>,
    /// pytest processes started (cached runs start none).
    pub(crate) processes: AtomicU32,
    pub(crate) warnings: Mutex<Vec<String>>,
}

impl Engine<'_, '_> {
    pub(crate) fn side(&self, role: Role) -> &Arc<TreeDigests> {
        match role {
            Role::Base => &self.base,
            Role::Head => &self.head,
        }
    }

    /// Whether the audit was cancelled.
    pub(crate) fn interrupted(&self) -> bool {
        self.pytest.interrupted()
    }

    /// Whether the base and the head are one tree.
    pub(crate) fn same_sides(&self) -> bool {
        crate::pytest::forkserver::same_snapshot(&self.base.snapshot, &self.head.snapshot)
    }
}

/// A failure of pytest's side as a node's error: a cancelled run is [`NodeError::Cancelled`]
/// (a partial run is never a result), anything else an infrastructure error. Neither is cached.
pub(crate) fn node_error(e: Error) -> NodeError {
    match e {
        Error::Interrupted => NodeError::Cancelled,
        e => NodeError::Infra(e.to_string()),
    }
}

/// A broken invariant inside a node's computation: the node fails with [`Error::Bug`]'s
/// message.
pub(crate) fn node_bug(what: impl Into<String>) -> NodeError {
    NodeError::Infra(Error::bug(what).to_string())
}

/// A node of the audit's graph.
pub(crate) trait Step: Send + Sync + Sized + 'static {
    /// What its dependents read.
    type Output: Serialize + DeserializeOwned;

    /// How the output is encoded (part of no key: a change of it is a [`NodeKind::version`]).
    const ENCODING: Encoding = Encoding::Json;

    /// The node's kind.
    fn kind(&self) -> NodeKind;

    /// The node's label: stable across audits, unique in one (`manifest(base)`); the kind's
    /// name for the kinds an audit has one node of.
    fn label(&self) -> String {
        self.kind().label()
    }

    /// Writes the key: every field of the step, destructured.
    fn key(&self, key: &mut Key);

    /// Computes the output from the outputs of the step's input nodes, in edge order.
    fn compute(&self, inputs: &[&[u8]]) -> std::result::Result<Computed<Self::Output>, NodeError>;

    /// What becomes of the output once encoded: dropped, unless the step keeps it for the
    /// readers of its bytes in this audit (a large run, decoded once: `crate::engine::decoded`).
    fn keep(&self, output: Self::Output, bytes: &[u8]) {
        let _ = (output, bytes);
    }

    /// The output's bytes.
    fn encode(output: &Self::Output) -> std::result::Result<Vec<u8>, NodeError> {
        Self::ENCODING.encode(output)
    }

    /// The output back from its bytes (a cached one, or a dependency's input).
    fn decode(bytes: &[u8]) -> std::result::Result<Self::Output, NodeError> {
        Self::ENCODING.decode(bytes)
    }
}

/// How a step's output is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// JSON: small outputs, readable in the cache.
    Json,
    /// postcard: the large ones (a run of 20,000 tests, the matrix), decoded many times.
    Postcard,
}

impl Encoding {
    pub(crate) fn encode<T: Serialize>(self, value: &T) -> std::result::Result<Vec<u8>, NodeError> {
        match self {
            Encoding::Json => serde_json::to_vec(value).map_err(|e| e.to_string()),
            Encoding::Postcard => postcard::to_allocvec(value).map_err(|e| e.to_string()),
        }
        .map_err(|e| node_bug(format!("an output does not encode: {e}")))
    }

    pub(crate) fn decode<T: DeserializeOwned>(
        self,
        bytes: &[u8],
    ) -> std::result::Result<T, NodeError> {
        match self {
            Encoding::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
            Encoding::Postcard => postcard::from_bytes(bytes).map_err(|e| e.to_string()),
        }
        .map_err(|e| node_bug(format!("an output does not decode: {e}")))
    }
}

/// What a step computed, and for a traced step the files it read while it ran.
pub(crate) struct Computed<T> {
    pub(crate) output: T,
    pub(crate) reads: Vec<Dep>,
}

impl<T> Computed<T> {
    /// An output with no discovered dependencies.
    pub(crate) fn new(output: T) -> Computed<T> {
        Computed {
            output,
            reads: Vec::new(),
        }
    }

    /// Adds the dependencies the step discovered while it ran.
    pub(crate) fn reading(mut self, reads: Vec<Dep>) -> Computed<T> {
        self.reads = reads;
        self
    }
}

/// What a step's key holds besides its input nodes' digests: named parameters, the files it
/// reads known up front, and how its result is found again.
#[derive(Default)]
pub(crate) struct Key {
    params: Vec<(&'static str, Param)>,
    files: Vec<(String, Digest)>,
    probe: Option<Box<fixgate_graph::Probe>>,
}

impl Key {
    /// A parameter.
    pub(crate) fn param(&mut self, name: &'static str, value: impl Into<Param>) -> &mut Key {
        self.params.push((name, value.into()));
        self
    }

    /// A file the step reads, known before it runs, with its digest.
    pub(crate) fn file(&mut self, path: String, digest: Digest) -> &mut Key {
        self.files.push((path, digest));
        self
    }

    /// The step discovers what it depends on while it runs (a pytest process): its result is
    /// found again through verifying traces, each dependency's digest asked of `probe`.
    pub(crate) fn traced(
        &mut self,
        probe: impl Fn(&str) -> Option<Digest> + Send + Sync + 'static,
    ) -> &mut Key {
        self.probe = Some(Box::new(probe));
        self
    }
}

/// A digest of node ids, one per line, for a key.
pub(crate) fn lines_digest<'a>(ids: impl IntoIterator<Item = &'a String>) -> String {
    let mut h = blake3::Hasher::new();
    for id in ids {
        h.update(id.as_bytes());
        h.update(b"\n");
    }
    h.finalize().to_hex().to_string()
}

/// The graph node of a step: its key written, its computation encoding what the step computes.
pub(crate) fn node<S: Step>(step: S) -> Node {
    let kind = step.kind();
    let mut key = Key::default();
    step.key(&mut key);
    // Version 1 is every key written before versions were counted, and stays as it was.
    if kind.version() > 1 {
        key.param("version", kind.version().to_string());
    }
    let label = step.label();
    let step = Arc::new(step);
    let mut node = Node::new(label, kind.as_str(), move |inputs| {
        let Computed { output, reads } = step.compute(inputs)?;
        let bytes = S::encode(&output)?;
        step.keep(output, &bytes);
        Ok(Output::new(bytes).with_reads(reads))
    });
    let Key {
        params,
        files,
        probe,
    } = key;
    for (name, value) in params {
        node = node.param(name, value);
    }
    for (path, digest) in files {
        node = node.file(path, digest);
    }
    match probe {
        Some(probe) => node.traced(probe),
        None => node,
    }
}

/// A step added to the audit's graph: its node, typed by what it outputs.
pub(crate) struct Added<S> {
    pub(crate) id: NodeId,
    step: PhantomData<fn() -> S>,
}

impl<S> Clone for Added<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Added<S> {}

impl<S: Step> Added<S> {
    pub(crate) fn new(id: NodeId) -> Added<S> {
        Added {
            id,
            step: PhantomData,
        }
    }
}

impl Engine<'_, '_> {
    /// Adds `step`, computed from the outputs of `inputs` (in this order) and started after
    /// `after` too: it starts as soon as they have finished.
    pub(crate) fn add<S: Step>(
        &self,
        step: S,
        inputs: &[NodeId],
        after: &[NodeId],
    ) -> Result<Added<S>> {
        self.live
            .add_after(node(step), inputs, after)
            .map(Added::new)
            .map_err(|e| Error::bug(e.to_string()))
    }

    /// Waits for a step's output; a step that failed is an infrastructure error naming it.
    pub(crate) fn output<S: Step>(&self, added: Added<S>) -> Result<S::Output> {
        let bytes = self.bytes(added.id)?;
        S::decode(&bytes).map_err(|e| {
            Error::bug(format!(
                "the output of {} does not decode: {e}",
                self.live.label(added.id)
            ))
        })
    }

    /// Adds `step` and waits for its output.
    pub(crate) fn run_step<S: Step>(
        &self,
        step: S,
        inputs: &[NodeId],
        after: &[NodeId],
    ) -> Result<(Added<S>, S::Output)> {
        let added = self.add(step, inputs, after)?;
        Ok((added, self.output(added)?))
    }

    /// The cached output `step` would have with `inputs`, without adding or computing it
    /// ([`fixgate_graph::Live::lookup`]).
    pub(crate) fn lookup<S: Step>(&self, step: S, inputs: &[NodeId]) -> Option<S::Output> {
        let bytes = self.live.lookup(&node(step), inputs)?;
        S::decode(&bytes).ok()
    }

    /// Waits for a node's output bytes; a node that failed is an infrastructure error naming
    /// it, and a cancelled audit is [`Error::Interrupted`].
    pub(crate) fn bytes(&self, id: NodeId) -> Result<Arc<[u8]>> {
        let out = self.live.wait(id);
        if self.interrupted() {
            return Err(Error::Interrupted);
        }
        out.into_result()
            .map_err(|why| Error::Infra(format!("{} failed: {why}", self.live.label(id))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_encoding_reads_back_what_it_writes_and_refuses_what_it_did_not() {
        let value = vec![("a".to_string(), 1u32), ("b".to_string(), 2)];
        for encoding in [Encoding::Json, Encoding::Postcard] {
            let bytes = encoding.encode(&value).unwrap();
            let back: Vec<(String, u32)> = encoding.decode(&bytes).unwrap();
            assert_eq!(back, value);
            let cut: std::result::Result<Vec<(String, u32)>, _> =
                encoding.decode(&bytes[..bytes.len() - 1]);
            assert!(cut.is_err(), "{encoding:?}");
        }
    }
}
