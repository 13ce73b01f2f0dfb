//! The audit's first steps as graph nodes: snapshots, manifests, the lock check, the delta and
//! the collections of both sides.

use std::sync::Arc;

use fixgate_cache::{Dep, Digest, KeyWriter};
use fixgate_graph::{Node, NodeError, NodeId, Output};

use crate::config::FixtureGroups;
use crate::delta::{self, Delta};
use crate::engine::digests::TreeDigests;
use crate::engine::runs::Engine;
use crate::error::{Error, Result};
use crate::lock::{Drift, Lock};
use crate::manifest::{self, Hashing, Manifest};
use crate::pytest::events::Collection;
use crate::snapshot::Snapshot;

/// What the fixture steps found.
pub struct Fixtures {
    /// The delta's node: what coupling and replay are computed from.
    pub delta_node: NodeId,
    /// The lock check's node: the gates come after it.
    pub lock_node: NodeId,
    pub lock: LockCheck,
    pub delta: Delta,
}

#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LockCheck {
    /// Whether the base has a lock at all (no lock: no lock gate).
    pub present: bool,
    /// Fixture files that differ from the lock the head carries.
    pub drift: Vec<DriftEntry>,
    /// Pins the patch changed in fixtures.lock.
    pub changed_pins: Vec<String>,
    /// A lock file that does not parse.
    pub error: Option<String>,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DriftEntry {
    pub path: String,
    pub change: String,
}

/// The digest that identifies a snapshot's content: the tree id for a commit, a hash over every
/// file's content (through the stat cache) for the working tree.
pub fn tree_digest(
    snapshot: &Snapshot,
    stat_cache: Option<&mut crate::statcache::StatCache>,
) -> Result<Digest> {
    let mut w = KeyWriter::new("tree");
    if let Some(commit) = snapshot.commit() {
        let git = snapshot
            .open_git()?
            .ok_or_else(|| Error::Infra("bug: a commit snapshot without git".into()))?;
        let tree = git.find_commit(commit)?.tree_id();
        w.str("git-tree").str(&tree.to_string());
        return Ok(w.finish());
    }
    let entries: Vec<&crate::snapshot::Entry> = snapshot.entries.iter().collect();
    let hashes = manifest::hash_entries(snapshot, &entries, stat_cache)?;
    w.str("worktree");
    for (e, (h, _)) in entries.iter().zip(hashes) {
        w.bytes(e.path.as_bytes())
            .u64(e.kind as u64)
            .bytes(h.as_bytes());
    }
    Ok(w.finish())
}

fn json<T: serde::Serialize>(v: &T) -> std::result::Result<Output, NodeError> {
    serde_json::to_vec(v)
        .map(Output::new)
        .map_err(|e| NodeError::Infra(format!("bug: an output does not encode: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> std::result::Result<T, NodeError> {
    serde_json::from_slice(bytes)
        .map_err(|e| NodeError::Infra(format!("bug: an input does not decode: {e}")))
}

fn add(engine: &Engine, node: Node, inputs: &[NodeId]) -> Result<NodeId> {
    engine
        .live
        .add(node, inputs)
        .map_err(|e| Error::Infra(format!("bug: {e}")))
}

/// Waits for each of `want` in the audit's graph and returns its output (an error names a node
/// that failed).
fn outputs(engine: &Engine, want: &[NodeId]) -> Result<Vec<std::sync::Arc<[u8]>>> {
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
pub fn prepare_fixtures(
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
            Node::new(format!("snapshot({role})"), "snapshot", move |_| {
                Ok(Output::new(tree.as_bytes().to_vec()))
            })
            .param("tree", tree.to_string()),
            &[],
        )?;
        let snapshot = side.snapshot.clone();
        let groups = engine.groups.clone();
        let m = add(
            engine,
            Node::new(format!("manifest({role})"), "manifest", move |_| {
                let m = manifest::build(&snapshot, &groups, Hashing { stat_cache: None })
                    .map_err(|e| NodeError::Infra(e.to_string()))?;
                json(&m)
            })
            .param("groups", groups_key(&engine.groups)),
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
        let n = Node::new("lock-check", "lock-check", move |inputs| {
            let base: Manifest = parse(inputs[0])?;
            let head: Manifest = parse(inputs[1])?;
            // SHA-256 pins (teams' own locks) are checked against each side's bytes.
            let reader =
                |s| crate::lock::snapshot_reader(s).map_err(|e| NodeError::Infra(e.to_string()));
            let (mut read_base, mut read_head) = (reader(&base_snapshot)?, reader(&head_snapshot)?);
            json(&check_lock(
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
        Node::new("delta", "delta", |inputs| {
            let base: Manifest = parse(inputs[0])?;
            let head: Manifest = parse(inputs[1])?;
            json(&delta::between(&base, &head))
        }),
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
pub struct Collected {
    pub node: NodeId,
    pub collection: Collection,
}

/// Adds the collections of the base and the head, after `gate` (the lock check: no test runs
/// before the gates held), and waits for both. The base must collect (else nothing can be
/// judged); a head that does not is the patch's doing, and comes back as its error text.
pub fn collect_both(
    engine: &Engine,
    gate: NodeId,
) -> Result<(Collected, std::result::Result<Collected, String>)> {
    let add_side = |role, side: &std::sync::Arc<TreeDigests>| {
        engine
            .live
            .add_after(collect_node(engine, role, side.clone()), &[], &[gate])
            .map_err(|e| Error::Infra(format!("bug: {e}")))
    };
    let b = add_side("base", &engine.base)?;
    let h = add_side("head", &engine.head)?;
    let base = outputs(engine, &[b])?;
    let base = Collected {
        node: b,
        collection: decode(&base[0])?,
    };
    let head = engine.live.wait(h);
    if engine
        .runner
        .interrupted
        .load(std::sync::atomic::Ordering::SeqCst)
    {
        return Err(Error::Interrupted);
    }
    let head = match head {
        fixgate_graph::Outcome::Output(bytes) => Ok(Collected {
            node: h,
            collection: decode(&bytes)?,
        }),
        // The head's own code failed to collect: the patch's doing.
        fixgate_graph::Outcome::Missing(fixgate_graph::Status::Failed {
            error: NodeError::Data(why),
            ..
        }) => Err(why),
        other => {
            let why = other.into_result().err().unwrap_or_default();
            return Err(Error::Infra(format!("collect(head) failed: {why}")));
        }
    };
    Ok((base, head))
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| Error::Infra(format!("bug: a step's output does not decode: {e}")))
}

/// The key of the fixture groups: leases and manifests depend on them.
pub(crate) fn groups_key(groups: &FixtureGroups) -> String {
    let mut w = KeyWriter::new("groups");
    w.list(groups.groups(), |w, g| {
        w.str(&g.name).list(&g.globs, |w, glob| {
            w.str(glob);
        });
    });
    w.finish().to_string()
}

/// Collection as a traced node: it depends on the files pytest imported and read while
/// collecting (plus the startup files and the set of paths), so a README change re-collects
/// nothing.
fn collect_node(engine: &Engine, role: &'static str, side: Arc<TreeDigests>) -> Node {
    let runner = engine.runner.clone();
    let compute_side = side.clone();
    let mut node = Node::new(format!("collect({role})"), "collect", move |_| {
        let (items, trace) =
            runner
                .collect_traced(&compute_side.snapshot)
                .map_err(|e| match e {
                    // The suite's own failure (a file that does not import, a conftest that
                    // raises: pytest ran and exited with its code) is data; a process that
                    // could not start or was killed is not.
                    Error::Suite(m) => NodeError::Data(m),
                    e => NodeError::Infra(e.to_string()),
                })?;
        let mut paths: Vec<String> = trace
            .read
            .iter()
            .chain(&trace.import)
            .chain(&trace.list)
            .cloned()
            .collect();
        if !trace.unknown.is_empty() {
            paths.extend(
                compute_side
                    .snapshot
                    .entries
                    .iter()
                    .map(|e| e.path.to_string()),
            );
        }
        paths.sort();
        paths.dedup();
        let deps = paths
            .into_iter()
            .map(|p| match compute_side.digest(&p) {
                Some(d) => Dep::file(p, d),
                None => Dep::absent(p),
            })
            .collect();
        Ok(json(&items)?.with_reads(deps))
    })
    .param("role", role)
    .param("paths", side.paths_digest().to_string())
    .param(
        "interpreter",
        engine.runner.interpreter.fingerprint.digest(),
    )
    .param("plugin", crate::pytest::plugin::digest());
    for (path, digest) in side.startup_files() {
        node = node.file(path, digest);
    }
    let probe = side.clone();
    node.traced(move |p| probe.digest(p))
}

/// A snapshot's manifest and a reader of its fixture bytes.
type Side<'a> = (
    &'a Manifest,
    &'a mut dyn FnMut(&crate::repo_path::RepoPath) -> Option<Vec<u8>>,
);

/// The lock gate. The pins are the base's; a patch that re-locks shows as changed pins (a
/// finding of its own), and drift is any fixture that differs from the lock the head carries.
/// A base lock that does not describe the base at all (no pin holds) is an error saying so,
/// not drift of every file.
pub fn check_lock(
    path: &str,
    base: Option<&[u8]>,
    head: Option<&[u8]>,
    (base_manifest, read_base): Side,
    (head_manifest, read): Side,
) -> LockCheck {
    let Some(base) = base else {
        return LockCheck::default();
    };
    let parsed_base = match Lock::parse(base, &format!("{path} of the base")) {
        Ok(l) => l,
        Err(e) => {
            return LockCheck {
                present: true,
                error: Some(e.to_string()),
                ..LockCheck::default()
            }
        }
    };
    if let Some(m) = parsed_base.mismatch(base_manifest, read_base) {
        return LockCheck {
            present: true,
            error: Some(m.message(path, "its own base")),
            ..LockCheck::default()
        };
    }
    let effective = match head.map(|h| Lock::parse(h, &format!("{path} of the head"))) {
        Some(Ok(l)) => l,
        Some(Err(e)) => {
            return LockCheck {
                present: true,
                error: Some(e.to_string()),
                ..LockCheck::default()
            }
        }
        // The patch deleted the lock: the base's pins still hold.
        None => parsed_base.clone(),
    };
    let mut changed_pins: Vec<String> = parsed_base
        .files
        .iter()
        .filter(|(p, h)| effective.files.get(*p) != Some(h))
        .map(|(p, _)| p.to_string())
        .chain(
            effective
                .files
                .keys()
                .filter(|p| !parsed_base.files.contains_key(*p))
                .map(|p| p.to_string()),
        )
        .collect();
    changed_pins.sort();
    changed_pins.dedup();
    let drift: Vec<Drift> = effective.check_with(head_manifest, read);
    LockCheck {
        present: true,
        drift: drift
            .iter()
            .map(|d| DriftEntry {
                path: d.path.to_string(),
                change: d.change.as_str().to_string(),
            })
            .collect(),
        changed_pins,
        error: None,
    }
}
