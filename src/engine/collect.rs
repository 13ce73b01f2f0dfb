//! The collection steps: each side's collection, a traced node that depends on the files pytest
//! imported and read while collecting (plus the startup files and the set of paths), so that a
//! README change collects nothing again.

use std::collections::HashSet;
use std::sync::Arc;

use fixgate_cache::{Dep, Digest};
use fixgate_graph::{NodeError, NodeId};

use crate::engine::digests::TreeDigests;
use crate::engine::exec::Pytest;
use crate::engine::kind::NodeKind;
use crate::engine::runs::{overlay_digests, overlay_key};
use crate::engine::step::{node_error, Added, Computed, Engine, Key, Role, Step};
use crate::error::{Error, Result};
use crate::pytest::driver::CollectIn;
use crate::pytest::events::{CollectedItem, Collection};
use crate::sandbox::Overlay;

/// A side's collection. Where it collects (`how`) is not part of its key: a warm interpreter
/// reports the collection a fresh `--collect-only` process does. One that makes only some
/// modules' items is another node, and says so.
pub(crate) struct Collect {
    pub(crate) role: Role,
    pub(crate) side: Arc<TreeDigests>,
    pub(crate) how: CollectIn,
    pub(crate) pytest: Arc<dyn Pytest>,
}

impl Collect {
    /// The modules whose items it does not make, when there are any.
    fn carried(&self) -> Option<&crate::pytest::forkserver::Carried> {
        match &self.how {
            CollectIn::Warm { carried, .. } if !carried.is_empty() => Some(carried),
            _ => None,
        }
    }
}

impl Step for Collect {
    type Output = Collection;

    fn kind(&self) -> NodeKind {
        NodeKind::Collect
    }

    fn label(&self) -> String {
        let name = self.role.as_str();
        match self.carried() {
            Some(_) => NodeKind::Collect.tagged(name, "carried"),
            None => NodeKind::Collect.of(name),
        }
    }

    fn key(&self, key: &mut Key) {
        // Where it collects is not what it collects (but for the carried modules, below).
        let Collect {
            role,
            side,
            how: _,
            pytest,
        } = self;
        let identity = pytest.identity();
        key.param("role", role.as_str())
            .param("paths", side.paths_digest().to_string())
            .param("interpreter", identity.interpreter.as_str())
            .param("plugin", identity.plugin.as_str())
            .param("limits", identity.limits.as_str());
        if let Some(carried) = self.carried() {
            key.param("carried", carried.digest());
        }
        for (path, digest) in side.startup_files() {
            key.file(path, digest);
        }
        let probe = side.clone();
        key.traced(move |p| probe.digest(p));
    }

    fn compute(&self, _: &[&[u8]]) -> std::result::Result<Computed<Collection>, NodeError> {
        let (items, trace) = (self.pytest)
            .collect(&self.side.snapshot, self.how.clone())
            .map_err(|e| match e {
                // The suite's own failure (a file that does not import, a conftest that
                // raises: pytest ran and exited with its code) is data; a process that
                // could not start or was killed is not.
                Error::NotCollected(m) => NodeError::Data(m),
                e => node_error(e),
            })?;
        let deps = collection_deps(&trace, &self.side.snapshot, |p| self.side.digest(p));
        Ok(Computed::new(items).reading(deps))
    }
}

/// The replay's tree collected (kind `collect`): the head's tree with the base's test code over
/// it, its collection errors data.
pub(crate) struct CollectOverlaid {
    pub(crate) side: Arc<TreeDigests>,
    pub(crate) overlay: Overlay,
    pub(crate) pytest: Arc<dyn Pytest>,
}

impl Step for CollectOverlaid {
    type Output = (Collection, Vec<crate::pytest::driver::CollectFailure>);

    fn kind(&self) -> NodeKind {
        NodeKind::Collect
    }

    fn label(&self) -> String {
        NodeKind::Collect.of("base-suite")
    }

    fn key(&self, key: &mut Key) {
        let CollectOverlaid {
            side,
            overlay,
            pytest,
        } = self;
        let digests = overlay_digests(overlay);
        let identity = pytest.identity();
        key.param("role", "base-suite")
            .param("overlay", overlay_key(&digests))
            .param("paths", side.paths_digest().to_string())
            .param("interpreter", identity.interpreter.as_str())
            .param("plugin", identity.plugin.as_str());
        for (path, digest) in side.startup_files() {
            let digest = match digests.get(&path) {
                Some(Some(d)) => *d,
                Some(None) => continue,
                None => digest,
            };
            key.file(path, digest);
        }
        let side = side.clone();
        key.traced(move |p| match digests.get(p) {
            Some(d) => *d,
            None => side.digest(p),
        });
    }

    fn compute(&self, _: &[&[u8]]) -> std::result::Result<Computed<Self::Output>, NodeError> {
        let (collection, trace, errors) = (self.pytest)
            .collect_overlaid(&self.side.snapshot, &self.overlay)
            .map_err(|e| NodeError::Infra(e.to_string()))?;
        let digests = overlay_digests(&self.overlay);
        let probe = |p: &str| match digests.get(p) {
            Some(d) => *d,
            None => self.side.digest(p),
        };
        let deps = collection_deps(&trace, &self.side.snapshot, probe);
        Ok(Computed::new((collection, errors)).reading(deps))
    }
}

/// The items the matrix runs of a collection: every one but the frozen tests.
pub(crate) fn unfrozen(items: &[CollectedItem], frozen: &HashSet<&str>) -> Vec<CollectedItem> {
    items
        .iter()
        .filter(|i| !frozen.contains(i.nodeid.as_str()))
        .cloned()
        .collect()
}

/// A side's collection and its node (what the orders of its runs are computed from).
pub(crate) struct Collected {
    pub(crate) node: NodeId,
    pub(crate) collection: Collection,
}

impl Collected {
    /// The node ids collected.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &str> {
        self.collection.items.iter().map(|i| i.nodeid.as_str())
    }
}

/// A head whose suite did not collect: its collection's node, and pytest's error text.
pub(crate) struct Failed {
    pub(crate) node: NodeId,
    pub(crate) why: String,
}

/// Adds the collections of the base and the head, after `gate` (the lock check: no test runs
/// before the gates held), and waits for both. The base must collect (else nothing can be
/// judged); a head that does not is the patch's doing, and comes back as its error text.
/// `scoped`: the runs of a scoped audit record, and collect in a warm interpreter that traced
/// its collection (see [`CollectIn`]).
pub(crate) fn collect_both(
    engine: &Engine,
    gate: NodeId,
    scoped: bool,
) -> Result<(Collected, std::result::Result<Collected, Failed>)> {
    // The runs fork from the interpreter that collected, unless they run elsewhere. The base
    // runs two orders side by side only in a scoped audit (its recording). A head that is the
    // base's tree shares its zygotes: the two collecting ones serve both, no spare.
    let same = engine.same_sides();
    let b = add_collection(
        engine,
        gate,
        Role::Base,
        how(engine, scoped, scoped && !same),
    )?;
    let h = add_collection(engine, gate, Role::Head, how(engine, scoped, !same))?;
    let base = wait_collected(engine, b)?;
    let head = wait_head(engine, h)?;
    Ok((base, head))
}

/// Where a side's collection runs: a warm interpreter here (which traced its collection in a
/// scoped audit, with a `spare` beside it), a fresh process when the runs execute elsewhere.
pub(crate) fn how(engine: &Engine, scoped: bool, spare: bool) -> CollectIn {
    match engine.pytest.remote() {
        true => CollectIn::Fresh,
        false => CollectIn::Warm {
            record_code: scoped,
            spare,
            carried: Default::default(),
        },
    }
}

/// Adds a side's collection after `gate` (the lock check: no test runs before the gates held).
pub(crate) fn add_collection(
    engine: &Engine,
    gate: NodeId,
    role: Role,
    how: CollectIn,
) -> Result<Added<Collect>> {
    let collect = Collect {
        role,
        side: engine.side(role).clone(),
        how,
        pytest: engine.pytest.clone(),
    };
    engine.add(collect, &[], &[gate])
}

/// A collection that must be had: the base's (else nothing can be judged).
pub(crate) fn wait_collected(engine: &Engine, added: Added<Collect>) -> Result<Collected> {
    Ok(Collected {
        node: added.id,
        collection: engine.output(added)?,
    })
}

/// The head's collection, or, when its own code failed to collect (the patch's doing), its
/// error text.
pub(crate) fn wait_head(
    engine: &Engine,
    added: Added<Collect>,
) -> Result<std::result::Result<Collected, Failed>> {
    let h = added.id;
    let head = engine.live.wait(h);
    if engine.interrupted() {
        return Err(Error::Interrupted);
    }
    Ok(match head {
        fixgate_graph::Outcome::Output(bytes) => Ok(Collected {
            node: h,
            collection: Collect::decode(&bytes).map_err(|e| Error::bug(e.to_string()))?,
        }),
        fixgate_graph::Outcome::Missing(fixgate_graph::Status::Failed {
            error: NodeError::Data(why),
            ..
        }) => Err(Failed { node: h, why }),
        other => {
            let why = other.into_result().err().unwrap_or_default();
            return Err(Error::Infra(format!(
                "{} failed: {why}",
                engine.live.label(h)
            )));
        }
    })
}

/// What a collection depended on: every file it read, imported or listed, with its digest
/// (`probe`); the whole tree when it did something the audit hooks cannot see into.
pub(crate) fn collection_deps(
    trace: &crate::pytest::events::Trace,
    snapshot: &crate::snapshot::Snapshot,
    probe: impl Fn(&str) -> Option<Digest>,
) -> Vec<Dep> {
    let mut paths: Vec<String> = trace
        .read
        .iter()
        .chain(&trace.import)
        .chain(&trace.list)
        .cloned()
        .collect();
    if !trace.unknown.is_empty() {
        paths.extend(snapshot.entries.iter().map(|e| e.path.to_string()));
    }
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .map(|p| match probe(&p) {
            Some(d) => Dep::file(p, d),
            None => Dep::absent(p),
        })
        .collect()
}
