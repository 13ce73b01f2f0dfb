//! The audit's first steps as graph nodes: snapshots, manifests, the lock check, the delta and
//! the collections of both sides.

use std::sync::Arc;

use fixgate_cache::{Dep, Digest};
use fixgate_graph::{Node, NodeError, NodeId, Output};

use crate::audit::gates::LockCheck;
use crate::delta::{self, Delta};
use crate::engine::digests::TreeDigests;
use crate::engine::kind::NodeKind;
use crate::engine::runs::{node_bug, Engine, Role};
use crate::error::{Error, Result};
use crate::manifest::{self, Hashing, Manifest};
use crate::pytest::driver::CollectIn;
use crate::pytest::events::Collection;

/// What the fixture steps found.
pub(crate) struct Fixtures {
    /// The delta's node: what coupling and replay are computed from.
    pub(crate) delta_node: NodeId,
    /// The lock check's node: the gates come after it.
    pub(crate) lock_node: NodeId,
    pub(crate) lock: LockCheck,
    pub(crate) delta: Delta,
}

fn json<T: serde::Serialize>(v: &T) -> std::result::Result<Output, NodeError> {
    serde_json::to_vec(v)
        .map(Output::new)
        .map_err(|e| node_bug(format!("an output does not encode: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, NodeError> {
    serde_json::from_slice(bytes).map_err(|e| node_bug(format!("an input does not decode: {e}")))
}

fn add(engine: &Engine, node: Node, inputs: &[NodeId]) -> Result<NodeId> {
    engine
        .live
        .add(node, inputs)
        .map_err(|e| Error::bug(e.to_string()))
}

/// Waits for each of `want` in the audit's graph and returns its output (an error names a node
/// that failed).
pub(crate) fn outputs(engine: &Engine, want: &[NodeId]) -> Result<Vec<std::sync::Arc<[u8]>>> {
    want.iter()
        .map(|&id| {
            let out = engine.live.wait(id);
            if engine
                .runner
                .interrupted
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                return Err(Error::Interrupted);
            }
            out.into_result()
                .map_err(|why| Error::Infra(format!("{} failed: {why}", engine.live.label(id))))
        })
        .collect()
}

/// Snapshots, manifests, the lock check and the delta.
pub(crate) fn prepare_fixtures(
    engine: &Engine,
    base_tree: Digest,
    head_tree: Digest,
    lock_path: &str,
    base_lock: Option<Vec<u8>>,
    head_lock: Option<Vec<u8>>,
) -> Result<Fixtures> {
    let mut manifest_ids = Vec::new();
    for (role, side, tree) in [
        ("base", &engine.base, base_tree),
        ("head", &engine.head, head_tree),
    ] {
        let snap = add(
            engine,
            Node::new(
                NodeKind::Snapshot.of(role),
                NodeKind::Snapshot.as_str(),
                move |_| Ok(Output::new(tree.as_bytes().to_vec())),
            )
            .param("tree", tree.to_string()),
            &[],
        )?;
        let snapshot = side.snapshot.clone();
        let groups = engine.groups.clone();
        let m = add(
            engine,
            Node::new(
                NodeKind::Manifest.of(role),
                NodeKind::Manifest.as_str(),
                move |_| {
                    let m = manifest::build(&snapshot, &groups, Hashing { stat_cache: None })
                        .map_err(|e| NodeError::Infra(e.to_string()))?;
                    json(&m)
                },
            )
            .param("groups", engine.groups.key()),
            &[snap],
        )?;
        manifest_ids.push(m);
    }
    let lock_node = {
        let (bl, hl) = (base_lock.clone(), head_lock.clone());
        let digest = |l: &Option<Vec<u8>>| {
            l.as_deref()
                .map(Digest::of)
                .map(|d| d.to_string())
                .unwrap_or_default()
        };
        let (base_snapshot, head_snapshot) =
            (engine.base.snapshot.clone(), engine.head.snapshot.clone());
        let path = lock_path.to_string();
        let kind = NodeKind::LockCheck;
        let n = Node::new(kind.label(), kind.as_str(), move |inputs| {
            let base: Manifest = parse(inputs[0])?;
            let head: Manifest = parse(inputs[1])?;
            // SHA-256 pins (teams' own locks) are checked against each side's bytes.
            let reader =
                |s| crate::lock::snapshot_reader(s).map_err(|e| NodeError::Infra(e.to_string()));
            let (mut read_base, mut read_head) = (reader(&base_snapshot)?, reader(&head_snapshot)?);
            json(&crate::audit::gates::check_lock(
                &path,
                bl.as_deref(),
                hl.as_deref(),
                (&base, &mut read_base),
                (&head, &mut read_head),
            ))
        })
        .param("path", lock_path)
        .param("base-lock", digest(&base_lock))
        .param("head-lock", digest(&head_lock));
        add(engine, n, &[manifest_ids[0], manifest_ids[1]])?
    };
    let delta_node = add(
        engine,
        Node::new(
            NodeKind::Delta.label(),
            NodeKind::Delta.as_str(),
            |inputs| {
                let base: Manifest = parse(inputs[0])?;
                let head: Manifest = parse(inputs[1])?;
                json(&delta::between(&base, &head))
            },
        ),
        &[manifest_ids[0], manifest_ids[1]],
    )?;
    let out = outputs(
        engine,
        &[manifest_ids[0], manifest_ids[1], lock_node, delta_node],
    )?;
    let base_manifest: Manifest = decode(&out[0])?;
    let head_manifest: Manifest = decode(&out[1])?;
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
                    Digest::from_hex(&f.blake3)
                        .ok()
                        .map(|d| (f.path.clone(), d))
                }),
        );
    }
    Ok(Fixtures {
        delta_node,
        lock_node,
        lock: decode(&out[2])?,
        delta: decode(&out[3])?,
    })
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
    let same =
        crate::pytest::forkserver::same_snapshot(&engine.base.snapshot, &engine.head.snapshot);
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
    match engine.remote {
        Some(_) => CollectIn::Fresh,
        None => CollectIn::Warm {
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
) -> Result<NodeId> {
    let side = engine.side(role);
    engine
        .live
        .add_after(collect_node(engine, role, side.clone(), how), &[], &[gate])
        .map_err(|e| Error::bug(e.to_string()))
}

/// A collection that must be had: the base's (else nothing can be judged), or one put together
/// from others.
pub(crate) fn wait_collected(engine: &Engine, node: NodeId) -> Result<Collected> {
    let bytes = outputs(engine, &[node])?;
    Ok(Collected {
        node,
        collection: decode(&bytes[0])?,
    })
}

/// The head's collection, or, when its own code failed to collect (the patch's doing), its
/// error text.
pub(crate) fn wait_head(
    engine: &Engine,
    h: NodeId,
) -> Result<std::result::Result<Collected, Failed>> {
    let head = engine.live.wait(h);
    if engine
        .runner
        .interrupted
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        return Err(Error::Interrupted);
    }
    Ok(match head {
        fixgate_graph::Outcome::Output(bytes) => Ok(Collected {
            node: h,
            collection: decode(&bytes)?,
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

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::bug(format!("a step's output does not decode: {e}")))
}

/// Collection as a traced node: it depends on the files pytest imported and read while
/// collecting (plus the startup files and the set of paths), so a README change re-collects
/// nothing. Where it collects (`how`) is not part of its key: a warm interpreter reports
/// the collection a fresh `--collect-only` process does.
fn collect_node(engine: &Engine, role: Role, side: Arc<TreeDigests>, how: CollectIn) -> Node {
    let runner = engine.runner.clone();
    let compute_side = side.clone();
    let kind = NodeKind::Collect;
    let name = role.as_str();
    // A collection that makes only some modules' items is another node, and says so.
    let carried = match &how {
        CollectIn::Warm { carried, .. } if !carried.is_empty() => Some(carried.clone()),
        _ => None,
    };
    let label = match &carried {
        Some(_) => kind.tagged(name, "carried"),
        None => kind.of(name),
    };
    let mut node = Node::new(label, kind.as_str(), move |_| {
        let (items, trace) = runner
            .collect_traced(&compute_side.snapshot, how.clone())
            .map_err(|e| match e {
                // The suite's own failure (a file that does not import, a conftest that
                // raises: pytest ran and exited with its code) is data; a process that
                // could not start or was killed is not.
                Error::NotCollected(m) => NodeError::Data(m),
                e => crate::engine::runs::node_error(e),
            })?;
        let deps = collection_deps(&trace, &compute_side.snapshot, |p| compute_side.digest(p));
        Ok(json(&items)?.with_reads(deps))
    })
    .param("role", name)
    .param("paths", side.paths_digest().to_string())
    .param(
        "interpreter",
        engine.runner.interpreter.fingerprint.digest(),
    )
    .param("plugin", crate::pytest::plugin::digest())
    .param("limits", engine.runner.limits.key());
    if let Some(carried) = carried {
        node = node.param("carried", carried.digest());
    }
    for (path, digest) in side.startup_files() {
        node = node.file(path, digest);
    }
    let probe = side.clone();
    node.traced(move |p| probe.digest(p))
}

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
