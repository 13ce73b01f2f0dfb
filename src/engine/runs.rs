//! pytest runs as traced graph nodes: every run of an audit (seed runs, confirmations, the
//! polluter search, replays, base checks) is a [`Run`] step added through
//! [`Engine::add_run`], so each is cached with a verifying trace and independent runs execute
//! side by side.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fixgate_cache::{Dep, Digest, KeyWriter};
use fixgate_graph::{NodeError, NodeId, Status};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::config::{DepsMode, FixtureGroups};
use crate::engine::digests::TreeDigests;
use crate::engine::exec::{Pytest, RunSpec};
use crate::engine::kind::NodeKind;
use crate::engine::step::{node_error, Computed, Encoding, Engine, Key, Role, Step};
use crate::error::{Error, Result};
use crate::pytest::driver::Record;
use crate::pytest::result::RunResult;
use crate::sandbox::Overlay;

/// One pytest run to make (or find in the cache), with the nodes it starts after.
#[derive(Clone, Debug)]
pub(crate) struct RunRequest {
    /// Unique in its batch and stable across audits, e.g. `seed-run(3)`.
    pub(crate) label: String,
    pub(crate) kind: NodeKind,
    pub(crate) role: Role,
    pub(crate) order: Vec<String>,
    /// Bytes put over the snapshot's (replay: the base's fixture bytes on head code).
    pub(crate) overlay: Overlay,
    /// Nodes whose outputs the run is computed from (the collection its order came from).
    pub(crate) inputs: Vec<NodeId>,
    /// Nodes whose results made this run necessary: it starts after them.
    pub(crate) after: Vec<NodeId>,
    /// Which repetition of the same run this is: repetitions are separate processes and separate
    /// cache entries (0 is the first, keyed as a run that is never repeated).
    pub(crate) repeat: u32,
    /// What the run records besides outcomes and file traces (the file-order and reversed
    /// runs of the matrix, see `crate::audit::scope`).
    pub(crate) record: Record,
}

impl RunRequest {
    /// A run with no edges yet.
    pub(crate) fn new(label: String, kind: NodeKind, role: Role, order: Vec<String>) -> RunRequest {
        RunRequest {
            label,
            kind,
            role,
            order,
            overlay: Vec::new(),
            inputs: Vec::new(),
            after: Vec::new(),
            repeat: 0,
            record: Record::NONE,
        }
    }

    /// The run records `record` too.
    pub(crate) fn record(mut self, record: Record) -> RunRequest {
        self.record = record;
        self
    }

    /// The `k`-th repetition of this run.
    pub(crate) fn repeat(mut self, k: u32) -> RunRequest {
        self.repeat = k;
        self
    }

    pub(crate) fn inputs(mut self, inputs: &[NodeId]) -> RunRequest {
        self.inputs = inputs.to_vec();
        self
    }

    pub(crate) fn after(mut self, after: &[NodeId]) -> RunRequest {
        self.after = after.to_vec();
        self
    }
}

/// The step of one sandboxed pytest run: its result without timings (so identical runs give
/// identical bytes), found again through the files it depended on.
pub(crate) struct Run {
    label: String,
    kind: NodeKind,
    role: Role,
    order: Vec<String>,
    overlay: Overlay,
    repeat: u32,
    record: Record,
    /// The side's digests: the run's tree, and what its trace is checked against.
    side: Arc<TreeDigests>,
    pytest: Arc<dyn Pytest>,
    groups: FixtureGroups,
    deps_mode: DepsMode,
    progress: Option<MultiProgress>,
}

impl Run {
    /// The digest of each overlaid path (`None`: removed), which the trace is checked against.
    fn overlay_digests(&self) -> BTreeMap<String, Option<Digest>> {
        overlay_digests(&self.overlay)
    }
}

/// The digest of each path of an overlay (`None`: the overlay removes it).
pub(crate) fn overlay_digests(overlay: &Overlay) -> BTreeMap<String, Option<Digest>> {
    overlay
        .iter()
        .map(|(p, b)| (p.to_string(), b.as_deref().map(Digest::of)))
        .collect()
}

/// An overlay's part of a key.
pub(crate) fn overlay_key(digests: &BTreeMap<String, Option<Digest>>) -> String {
    let mut key = KeyWriter::new("overlay");
    key.list(&digests.iter().collect::<Vec<_>>(), |w, (p, d)| {
        w.str(p).opt_digest(d.as_ref());
    });
    key.finish().to_string()
}

impl Step for Run {
    type Output = RunResult;
    /// postcard, not JSON: a warm audit decodes every seed run (8 x 2,000 tests is 9 MB of
    /// JSON, a third of its time) and a fresh machine downloads them.
    const ENCODING: Encoding = Encoding::Postcard;

    fn kind(&self) -> NodeKind {
        self.kind
    }

    fn label(&self) -> String {
        self.label.clone()
    }

    fn key(&self, key: &mut Key) {
        let Run {
            // The label names the node; the kind is the key's domain.
            label: _,
            kind: _,
            role,
            order,
            overlay: _,
            repeat,
            record,
            side,
            pytest,
            groups,
            deps_mode,
            // Where the run is drawn on the terminal.
            progress: _,
        } = self;
        let overlay = self.overlay_digests();
        key.param("role", role.as_str())
            .param("order", order.join("\n"))
            .param("overlay", overlay_key(&overlay))
            .param("paths", side.paths_digest().to_string())
            .param("encoding", RUN_ENCODING)
            .param("groups", groups.key())
            .param("deps", format!("{deps_mode:?}"));
        identity_params(key, pytest.as_ref());
        if *repeat > 0 {
            key.param("repeat", repeat.to_string());
        }
        if *record != Record::NONE {
            key.param("record", record.key());
        }
        for (path, digest) in side.startup_files() {
            key.file(path, digest);
        }
        let side = side.clone();
        key.traced(move |path| match overlay.get(path) {
            Some(d) => *d,
            None => side.digest(path),
        });
    }

    fn compute(&self, _inputs: &[&[u8]]) -> std::result::Result<Computed<RunResult>, NodeError> {
        let pb = self.progress.as_ref().map(|mp| {
            let pb = mp.add(ProgressBar::new(self.order.len() as u64));
            pb.set_style(
                ProgressStyle::with_template("{prefix:>18} [{bar:20}] {pos}/{len} {wide_msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            pb.set_prefix(self.label.clone());
            pb
        });
        let spec = RunSpec {
            label: &self.label,
            snapshot: &self.side.snapshot,
            overlay: &self.overlay,
            order: &self.order,
            groups: &self.groups,
            record: self.record,
            repeat: self.repeat,
        };
        let result = self.pytest.run(&spec, pb.as_ref());
        if let Some(pb) = pb {
            pb.finish_and_clear();
        }
        let mut result = result.map_err(node_error)?;
        strip_timing(&mut result);
        let deps = dependencies(
            &result,
            &self.side,
            &self.overlay_digests(),
            &self.groups,
            self.deps_mode,
        );
        Ok(Computed::new(result).reading(deps))
    }
}

/// What the key of every run and collection holds of where it runs (`Pytest::identity`).
pub(crate) fn identity_params(key: &mut Key, pytest: &dyn Pytest) {
    let crate::engine::exec::Identity {
        interpreter,
        plugin,
        env,
        hash_seed,
        timeout,
        limits,
        network,
    } = pytest.identity();
    key.param("interpreter", interpreter.as_str())
        .param("plugin", plugin.as_str())
        .param("env", env.as_str())
        .param("hash-seed", hash_seed.as_str())
        .param("timeout", timeout.as_str())
        .param("limits", limits.as_str())
        .param("network", *network);
}

impl Engine<'_, '_> {
    /// Counts the pytest processes of an executed run: only this machine's (a remote run's
    /// result says how many it took there, the same number as here, for the same bytes).
    pub(crate) fn count_processes(&self, n: u32) {
        if !self.pytest.remote() {
            self.processes.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Adds a run to the audit's graph; it starts as soon as its edges allow.
    pub(crate) fn add_run(&self, req: &RunRequest) -> Result<NodeId> {
        let RunRequest {
            label,
            kind,
            role,
            order,
            overlay,
            inputs,
            after,
            repeat,
            record,
        } = req;
        let run = Run {
            label: label.clone(),
            kind: *kind,
            role: *role,
            order: order.clone(),
            overlay: overlay.clone(),
            repeat: *repeat,
            record: *record,
            side: self.side(*role).clone(),
            pytest: self.pytest.clone(),
            groups: self.groups.clone(),
            deps_mode: self.deps_mode,
            progress: self.progress.clone(),
        };
        self.add(run, inputs, after).map(|added| added.id)
    }

    /// Waits for a run added with [`Engine::add_run`]; a run that failed gives its error.
    pub(crate) fn wait_run(&self, id: NodeId) -> Result<Result<RunResult, String>> {
        self.wait_decoded(id, decode_run)
    }

    /// Waits for a run and decodes it with `decode` (a run read again in this audit is decoded
    /// once: `crate::engine::decoded`); a run that failed gives its error.
    pub(crate) fn wait_decoded<R: Borrow<RunResult>>(
        &self,
        id: NodeId,
        decode: impl FnOnce(&[u8]) -> std::result::Result<R, NodeError>,
    ) -> Result<Result<R, String>> {
        let outcome = self.live.wait(id);
        if self.interrupted() {
            return Err(Error::Interrupted);
        }
        // A run the service could not run ends the audit: judging without it could be wrong.
        if let Some(failure) = self.pytest.failure() {
            return Err(Error::Infra(failure));
        }
        let label = self.live.label(id);
        let result = outcome.into_result().and_then(|bytes| {
            decode(&bytes).map_err(|e| {
                Error::bug(format!("a cached run of {label} does not decode: {e}")).to_string()
            })
        });
        if let Ok(r) = &result {
            if self
                .live
                .report(id)
                .is_some_and(|rep| matches!(rep.status, Status::Executed { .. }))
            {
                self.count_processes(r.borrow().processes);
            }
        }
        Ok(result)
    }

    /// Adds every request, then waits for each: independent runs execute side by side. Returns
    /// one result per request, in order.
    pub(crate) fn run_batch(
        &self,
        requests: &[RunRequest],
    ) -> Result<Vec<Result<RunResult, String>>> {
        let ids = requests
            .iter()
            .map(|r| self.add_run(r))
            .collect::<Result<Vec<_>>>()?;
        ids.into_iter().map(|id| self.wait_run(id)).collect()
    }

    /// Starts warm interpreters of `role`'s snapshot in the background, for runs the audit
    /// will make soon; the returned guard waits for them when dropped. Nothing under remote
    /// execution, where no run forks here, nor when the base and the head are one tree (their
    /// zygotes are the same).
    pub(crate) fn prewarm(&self, role: Role) -> Prewarm {
        if self.pytest.remote() || self.same_sides() {
            return Prewarm(None);
        }
        let (pytest, side) = (self.pytest.clone(), self.side(role).clone());
        // One for each run of a base check's pair (with the culprits, and without).
        let count = pytest.warm_slots().min(2);
        Prewarm(Some(std::thread::spawn(move || {
            pytest.prewarm(&side.snapshot, count)
        })))
    }

    /// Runs one request and gives its result, its failure an infrastructure error.
    pub(crate) fn run_one(&self, req: &RunRequest) -> Result<(NodeId, RunResult)> {
        let id = self.add_run(req)?;
        Ok((id, self.wait_ok(id)?))
    }

    /// Waits for a run added with [`Engine::add_run`]; a run that failed is an infrastructure
    /// error naming it.
    pub(crate) fn wait_ok(&self, id: NodeId) -> Result<RunResult> {
        self.wait_run(id)?
            .map_err(|e| Error::Infra(format!("{} failed: {e}", self.live.label(id))))
    }
}

/// How a run node's output is encoded, part of its key so that entries in another encoding are
/// misses, not decode errors.
const RUN_ENCODING: &str = "postcard 4";

/// A run node's output bytes back into the run.
pub(crate) fn decode_run(bytes: &[u8]) -> std::result::Result<RunResult, NodeError> {
    Run::decode(bytes)
}

/// Wall-clock fields vary between identical runs; they would defeat early cutoff.
pub(crate) fn strip_timing(r: &mut RunResult) {
    for t in &mut r.tests {
        t.start = 0.0;
        t.end = 0.0;
        for p in t.phases.values_mut() {
            p.duration = 0.0;
        }
    }
}

/// What a run depended on: every path it opened, listed, imported or wrote, with its digest in
/// the snapshot. A run that did something the audit hooks cannot see into (a child process, a
/// mapped file) depends on the whole tree; with `deps = "conservative"`, every fixture file is
/// a dependency of every run.
fn dependencies(
    r: &RunResult,
    side: &TreeDigests,
    overlay: &BTreeMap<String, Option<Digest>>,
    groups: &FixtureGroups,
    mode: DepsMode,
) -> Vec<Dep> {
    let mut paths: BTreeSet<String> = BTreeSet::new();
    let mut blind = r.incomplete_trace || !r.session_trace.unknown.is_empty();
    for trace in r.tests.iter().map(|t| &t.trace).chain([&r.session_trace]) {
        blind |= !trace.unknown.is_empty();
        for list in [
            &trace.read,
            &trace.write,
            &trace.list,
            &trace.remove,
            &trace.mkdir,
            &trace.sqlite,
            &trace.import,
        ] {
            paths.extend(list.iter().cloned());
        }
        for (a, b) in &trace.rename {
            paths.insert(a.clone());
            paths.insert(b.clone());
        }
    }
    for t in &r.tests {
        paths.extend(t.changed.iter().map(|c| c.path.clone()));
    }
    for e in &side.snapshot.entries {
        if blind || (mode == DepsMode::Conservative && groups.group_of(&e.path).is_some()) {
            paths.insert(e.path.to_string());
        }
    }
    paths
        .into_iter()
        .map(|p| {
            let d = match overlay.get(&p) {
                Some(d) => *d,
                None => side.digest(&p),
            };
            match d {
                Some(d) => Dep::file(p, d),
                None => Dep::absent(p),
            }
        })
        .collect()
}

/// Warm interpreters being started in the background ([`Engine::prewarm`]); dropping it waits
/// until the start is done, so that the runs after it find the zygote idle and no thread
/// outlives the audit.
pub(crate) struct Prewarm(Option<std::thread::JoinHandle<()>>);

impl Drop for Prewarm {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_result_survives_its_encoding() {
        let json = br#"{"executed":["t.py::a","t.py::b"],"incomplete_trace":true,"order":["t.py::b","t.py::a"],"processes":2,
            "session_trace":{"import":["conftest.py"],"list":[],"mkdir":[],"outside":[{"op":"open","path":"/etc/x"}],"read":["data.json"],"remove":[],"rename":[["a","b"]],"sqlite":[],"unknown":[],"write":[]},
            "tests":[{"changed":[{"change":"modified","path":"data.json"}],"end":0.0,"message":"boom","nodeid":"t.py::a","outcome":"failed",
            "phases":{"call":{"duration":0.0,"message":"assert 1 == 2","outcome":"failed"},"setup":{"duration":0.0,"message":null,"outcome":"passed"}},
            "reruns":1,"skip_reason":null,"start":0.0,"trace":{"import":[],"list":["d"],"mkdir":[],"outside":[],"read":["data.json"],"remove":[],"rename":[],"sqlite":["db"],"unknown":[],"write":[]},
            "violations":[{"files":[{"change":"added","path":"out.txt"}],"group":"db"}],"writes_marker":["db"]},
            {"changed":[],"end":0.0,"message":null,"nodeid":"t.py::a","occurrence":1,"outcome":"passed","phases":{},"reruns":0,"skip_reason":null,"start":0.0,
            "trace":{"import":[],"list":[],"mkdir":[],"outside":[],"read":[],"remove":[],"rename":[],"sqlite":[],"unknown":[],"write":[]},"violations":[],"writes_marker":[]}],
            "warnings":["w"]}"#;
        let run: RunResult = serde_json::from_slice(json).unwrap();
        let bytes = postcard::to_allocvec(&run).unwrap();
        let back = decode_run(&bytes).unwrap();
        // Compared through JSON: RunResult has no PartialEq (see its doc).
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&run).unwrap()
        );
        assert!(decode_run(&bytes[..bytes.len() - 1]).is_err());
        // The second run of a test listed twice (the nio order) keeps its occurrence.
        assert_eq!(back.tests[1].occurrence, 1);
        assert_eq!(back.tests[0].occurrence, 0);
    }
}
