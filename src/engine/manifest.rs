//! The manifest step: a snapshot's fixture files, each with its digest; and the snapshot step
//! it is computed from, whose output is the tree's digest, so that a manifest is made again
//! only when its tree changed.

use std::sync::Arc;

use fixgate_cache::Digest;
use fixgate_graph::NodeError;

use crate::config::FixtureGroups;
use crate::engine::kind::NodeKind;
use crate::engine::step::Role;
use crate::engine::step::{node_bug, Computed, Key, Step};
use crate::manifest::{self, Hashing, Manifest};
use crate::snapshot::Snapshot;

/// A side's tree: its digest, which the steps that read the tree are computed from.
pub(crate) struct Tree {
    pub(crate) role: Role,
    pub(crate) tree: Digest,
}

impl Step for Tree {
    type Output = Digest;

    fn kind(&self) -> NodeKind {
        NodeKind::Snapshot
    }

    fn label(&self) -> String {
        NodeKind::Snapshot.of(self.role.as_str())
    }

    fn key(&self, key: &mut Key) {
        // The role names the node: two sides of one tree are one entry.
        let Tree { role: _, tree } = self;
        key.param("tree", tree.to_string());
    }

    fn compute(&self, _: &[&[u8]]) -> Result<Computed<Digest>, NodeError> {
        Ok(Computed::new(self.tree))
    }

    /// The digest's 32 bytes, as the snapshot node has always given them.
    fn encode(tree: &Digest) -> Result<Vec<u8>, NodeError> {
        Ok(tree.as_bytes().to_vec())
    }

    fn decode(bytes: &[u8]) -> Result<Digest, NodeError> {
        <[u8; 32]>::try_from(bytes)
            .map(Digest::from_bytes)
            .map_err(|_| node_bug("a tree digest is not 32 bytes"))
    }
}

/// A side's fixture manifest, computed from its [`Tree`].
pub(crate) struct ManifestOf {
    pub(crate) role: Role,
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) groups: FixtureGroups,
}

impl Step for ManifestOf {
    type Output = Manifest;

    fn kind(&self) -> NodeKind {
        NodeKind::Manifest
    }

    fn label(&self) -> String {
        NodeKind::Manifest.of(self.role.as_str())
    }

    fn key(&self, key: &mut Key) {
        // The snapshot's content is its tree's digest, the step's input.
        let ManifestOf {
            role: _,
            snapshot: _,
            groups,
        } = self;
        key.param("groups", groups.key());
    }

    fn compute(&self, _: &[&[u8]]) -> Result<Computed<Manifest>, NodeError> {
        manifest::build(&self.snapshot, &self.groups, Hashing { stat_cache: None })
            .map(Computed::new)
            .map_err(|e| NodeError::Infra(e.to_string()))
    }
}
