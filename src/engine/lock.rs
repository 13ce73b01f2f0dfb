//! The lock step: the head's fixtures against the pins of the base's lock, checked before any
//! test runs (the rule is `audit::lock`).

use std::sync::Arc;

use fixgate_cache::Digest;
use fixgate_graph::NodeError;

use crate::audit::lock::{self, LockCheck};
use crate::engine::kind::NodeKind;
use crate::engine::manifest::ManifestOf;
use crate::engine::step::{Computed, Key, Step};
use crate::snapshot::Snapshot;

/// The lock gate over the two manifests (its inputs: the base's, then the head's).
pub(crate) struct LockGate {
    /// Where the lock is (found in the base), and its bytes on each side.
    pub(crate) path: String,
    pub(crate) base_lock: Option<Vec<u8>>,
    pub(crate) head_lock: Option<Vec<u8>>,
    /// SHA-256 pins (teams' own locks) are checked against each side's bytes.
    pub(crate) base: Arc<Snapshot>,
    pub(crate) head: Arc<Snapshot>,
}

impl Step for LockGate {
    type Output = LockCheck;

    fn kind(&self) -> NodeKind {
        NodeKind::LockCheck
    }

    fn key(&self, key: &mut Key) {
        // The snapshots' bytes are their manifests', the step's inputs.
        let LockGate {
            path,
            base_lock,
            head_lock,
            base: _,
            head: _,
        } = self;
        let digest = |l: &Option<Vec<u8>>| {
            l.as_deref()
                .map(Digest::of)
                .map(|d| d.to_string())
                .unwrap_or_default()
        };
        key.param("path", path.as_str())
            .param("base-lock", digest(base_lock))
            .param("head-lock", digest(head_lock));
    }

    fn compute(&self, inputs: &[&[u8]]) -> Result<Computed<LockCheck>, NodeError> {
        let base = ManifestOf::decode(inputs[0])?;
        let head = ManifestOf::decode(inputs[1])?;
        let reader =
            |s| crate::lock::snapshot_reader(s).map_err(|e| NodeError::Infra(e.to_string()));
        let (mut read_base, mut read_head) = (reader(&self.base)?, reader(&self.head)?);
        Ok(Computed::new(lock::check_lock(
            &self.path,
            self.base_lock.as_deref(),
            self.head_lock.as_deref(),
            (&base, &mut read_base),
            (&head, &mut read_head),
        )))
    }
}
