//! The delta step: the fixture files added, removed or modified between the two manifests.

use fixgate_graph::NodeError;

use crate::delta::{self, Delta};
use crate::engine::kind::NodeKind;
use crate::engine::manifest::ManifestOf;
use crate::engine::step::{Computed, Key, Step};

/// The delta of the base's and the head's manifests (its inputs, in that order).
pub(crate) struct DeltaOf;

impl Step for DeltaOf {
    type Output = Delta;

    fn kind(&self) -> NodeKind {
        NodeKind::Delta
    }

    fn key(&self, _: &mut Key) {
        // Everything it is computed from is its inputs.
        let DeltaOf = self;
    }

    fn compute(&self, inputs: &[&[u8]]) -> Result<Computed<Delta>, NodeError> {
        let base = ManifestOf::decode(inputs[0])?;
        let head = ManifestOf::decode(inputs[1])?;
        Ok(Computed::new(delta::between(&base, &head)))
    }
}
