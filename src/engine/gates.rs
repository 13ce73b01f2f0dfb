//! The gates phase, before any test runs: each side's tree and manifest, the lock check and the
//! fixture delta as steps, and what the gates found of them and of the freeze ledgers.

use fixgate_graph::NodeId;

use crate::audit::freeze::Date;
use crate::audit::gates::Gates;
use crate::delta::Delta;
use crate::engine::delta::DeltaOf;
use crate::engine::lock::LockGate;
use crate::engine::manifest::{ManifestOf, Tree};
use crate::engine::sides::Sides;
use crate::engine::step::Engine;
use crate::engine::step::Role;
use crate::error::{Error, Result};
use crate::manifest;

/// What the gates found, and the nodes the phases after them start from.
pub(crate) struct Gated {
    pub(crate) gates: Gates,
    /// The fixture delta: what coupling and replay read.
    pub(crate) delta: Delta,
    pub(crate) nodes: GateNodes,
}

/// The gates phase's nodes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GateNodes {
    /// Each side's tree: what the steps that read a whole snapshot are computed from.
    pub(crate) base_tree: NodeId,
    pub(crate) head_tree: NodeId,
    /// The lock check: no test runs before it held.
    pub(crate) lock: NodeId,
    /// The delta: what coupling and replay are computed from.
    pub(crate) delta: NodeId,
}

/// Adds the fixture steps, waits for them, and reads the gates. A lock that cannot be used is a
/// usage error.
pub(crate) fn check(engine: &Engine, sides: &Sides, today: Date) -> Result<Gated> {
    let mut trees = Vec::new();
    let mut manifests = Vec::new();
    for (role, side) in [(Role::Base, &sides.base), (Role::Head, &sides.head)] {
        let tree = engine.add(
            Tree {
                role,
                tree: side.tree,
            },
            &[],
            &[],
        )?;
        let manifest = ManifestOf {
            role,
            snapshot: side.snapshot.clone(),
            groups: engine.groups.clone(),
        };
        manifests.push(engine.add(manifest, &[tree.id], &[])?);
        trees.push(tree.id);
    }
    let manifest_ids = [manifests[0].id, manifests[1].id];
    let lock_gate = LockGate {
        path: (sides.lock_path.as_deref())
            .unwrap_or(crate::lock::FILE_NAME)
            .to_string(),
        base_lock: sides.base.lock.clone(),
        head_lock: sides.head.lock.clone(),
        base: sides.base.snapshot.clone(),
        head: sides.head.snapshot.clone(),
    };
    let lock = engine.add(lock_gate, &manifest_ids, &[])?;
    let delta = engine.add(DeltaOf, &manifest_ids, &[])?;
    let (base_manifest, head_manifest) =
        (engine.output(manifests[0])?, engine.output(manifests[1])?);
    // The manifests' hashes are the content digests the run probes ask for.
    for (side, m) in [
        (&engine.base, &base_manifest),
        (&engine.head, &head_manifest),
    ] {
        side.prime(
            m.files
                .iter()
                .filter(|f| f.kind == manifest::FileKind::File)
                .filter_map(|f| {
                    fixgate_cache::Digest::from_hex(&f.blake3)
                        .ok()
                        .map(|d| (f.path.clone(), d))
                }),
        );
    }
    let checked = engine.output(lock)?;
    let delta_value = engine.output(delta)?;
    if let Some(e) = &checked.error {
        return Err(Error::Usage(e.clone()));
    }
    let gates = Gates {
        lock_file: sides.lock_path.clone(),
        lock: checked,
        changed: delta_value.changed.clone(),
        ..Gates::freeze(&sides.base.ledger, &sides.head.ledger, today)
    };
    Ok(Gated {
        gates,
        delta: delta_value,
        nodes: GateNodes {
            base_tree: trees[0],
            head_tree: trees[1],
            lock: lock.id,
            delta: delta.id,
        },
    })
}
