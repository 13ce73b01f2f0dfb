//! pytest runs as traced graph nodes: every run of an audit (seed runs, confirmations, the
//! polluter search, replays, base checks) goes through [`Engine::run_batch`], so each is cached
//! with a verifying trace and independent runs execute side by side.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use fixgate_cache::{Dep, Digest, KeyWriter};
use fixgate_graph::{Live, Node, NodeError, NodeId, Output, Status};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::config::{DepsMode, FixtureGroups};
use crate::engine::digests::TreeDigests;
use crate::engine::kind::NodeKind;
use crate::error::{Error, Result};
use crate::pytest::driver::{Record, Runner, ENV_ALLOWLIST, HASH_SEED};
use crate::pytest::plugin;
use crate::pytest::result::RunResult;
use crate::remote_exec::client::{Executor, RemoteRun};
use crate::sandbox::Overlay;

/// Which snapshot a run executes.
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

/// One pytest run to make (or find in the cache).
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

/// Everything runs share within one audit: the audit's one live graph among them.
pub(crate) struct Engine<'l, 'a> {
    pub(crate) live: &'l Live<'a>,
    /// The store behind the graph, for what is remembered beside node results (culprit sets).
    pub(crate) store: &'a dyn fixgate_cache::Store,
    /// The base's tree digest: what remembered culprit sets are keyed by.
    pub(crate) base_tree: Digest,
    pub(crate) runner: Arc<Runner>,
    pub(crate) groups: FixtureGroups,
    pub(crate) deps_mode: DepsMode,
    pub(crate) base: Arc<TreeDigests>,
    pub(crate) head: Arc<TreeDigests>,
    pub(crate) progress: Option<MultiProgress>,
    /// pytest processes started (cached runs start none).
    pub(crate) processes: AtomicU32,
    pub(crate) warnings: Mutex<Vec<String>>,
    /// Where runs execute when not here (`--remote-executor`).
    pub(crate) remote: Option<Arc<Executor>>,
    /// What the scope rule reads of the two snapshots, read once per audit.
    pub(crate) sources: std::sync::OnceLock<crate::engine::impact::Sources>,
    /// Large runs decoded once per audit.
    pub(crate) decoded: Arc<crate::engine::decoded::Decoded>,
}

impl Engine<'_, '_> {
    pub(crate) fn side(&self, role: Role) -> &Arc<TreeDigests> {
        match role {
            Role::Base => &self.base,
            Role::Head => &self.head,
        }
    }

    /// The parameters every run's key includes: the interpreter, the plugin, the environment,
    /// the fixture groups (leases depend on them) and how dependencies are tracked.
    fn common_params(&self) -> Vec<(&'static str, String)> {
        let mut env = KeyWriter::new("run-env");
        let mut names: Vec<&str> = ENV_ALLOWLIST.to_vec();
        names.extend(self.runner.pass_env.iter().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        env.list(&names, |w, n| {
            w.str(n);
            match self.runner.env.var(n) {
                Some(v) => w.bytes(v.as_encoded_bytes()),
                None => w.str("\0unset"),
            };
        });
        vec![
            ("interpreter", self.runner.interpreter.fingerprint.digest()),
            ("plugin", plugin::digest()),
            ("env", env.finish().to_string()),
            ("hash-seed", HASH_SEED.to_string()),
            ("timeout", self.runner.test_timeout.as_secs().to_string()),
            ("limits", self.runner.limits.key()),
            ("groups", self.groups.key()),
            ("deps", format!("{:?}", self.deps_mode)),
            (
                "network",
                if self.runner.allow_network {
                    "host"
                } else {
                    "isolated"
                }
                .to_string(),
            ),
        ]
    }

    /// Counts the pytest processes of an executed run: only this machine's (a remote run's
    /// result says how many it took there, the same number as here, for the same bytes).
    pub(crate) fn count_processes(&self, n: u32) {
        if self.remote.is_none() {
            self.processes.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Adds a run to the audit's graph; it starts as soon as its edges allow.
    pub(crate) fn add_run(&self, req: &RunRequest) -> Result<NodeId> {
        let side = self.side(req.role).clone();
        let overlay: Arc<BTreeMap<String, Option<Digest>>> = Arc::new(
            req.overlay
                .iter()
                .map(|(p, b)| (p.to_string(), b.as_deref().map(Digest::of)))
                .collect(),
        );
        let mut overlay_key = KeyWriter::new("overlay");
        overlay_key.list(&overlay.iter().collect::<Vec<_>>(), |w, (p, d)| {
            w.str(p).opt_digest(d.as_ref());
        });
        let mut node = Node::new(
            req.label.clone(),
            req.kind.as_str(),
            self.compute(req, side.clone(), overlay.clone()),
        )
        .param("role", req.role.as_str())
        .param("order", req.order.join("\n"))
        .param("overlay", overlay_key.finish().to_string())
        .param("paths", side.paths_digest().to_string())
        .param("encoding", RUN_ENCODING);
        for (name, value) in self.common_params() {
            node = node.param(name, value);
        }
        if req.repeat > 0 {
            node = node.param("repeat", req.repeat.to_string());
        }
        if req.record != Record::NONE {
            node = node.param("record", req.record.key());
        }
        for (path, digest) in side.startup_files() {
            node = node.file(path, digest);
        }
        let probe_side = side.clone();
        node = node.traced(move |path| match overlay.get(path) {
            Some(d) => *d,
            None => probe_side.digest(path),
        });
        self.live
            .add_after(node, &req.inputs, &req.after)
            .map_err(|e| Error::bug(e.to_string()))
    }

    /// Waits for a run added with [`Engine::add_run`]; a run that failed gives its error.
    pub(crate) fn wait_run(&self, id: NodeId) -> Result<Result<RunResult, String>> {
        self.wait_decoded(id, decode_run)
    }

    /// [`Engine::wait_run`] for a run that may have many tests and be read again in this audit
    /// (a whole order): decoded once ([`crate::engine::decoded`]).
    pub(crate) fn wait_run_shared(&self, id: NodeId) -> Result<Result<Arc<RunResult>, String>> {
        self.wait_decoded(id, |bytes| self.decoded.decode_kept(bytes))
    }

    fn wait_decoded<R: Borrow<RunResult>>(
        &self,
        id: NodeId,
        decode: impl FnOnce(&[u8]) -> std::result::Result<R, postcard::Error>,
    ) -> Result<Result<R, String>> {
        let outcome = self.live.wait(id);
        if self.runner.interrupted.load(Ordering::SeqCst) {
            return Err(Error::Interrupted);
        }
        // A run the service could not run ends the audit: judging without it could be wrong.
        if let Some(failure) = self.remote.as_ref().and_then(|r| r.failure()) {
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
    /// will make soon ([`crate::pytest::driver::Runner::prewarm`]); the returned guard waits
    /// for them when dropped. Nothing under remote execution, where no run forks here, nor
    /// when the base and the head are one tree (their zygotes are the same).
    pub(crate) fn prewarm(&self, role: Role) -> Prewarm {
        if self.remote.is_some()
            || crate::pytest::forkserver::same_snapshot(&self.base.snapshot, &self.head.snapshot)
        {
            return Prewarm(None);
        }
        let (runner, side) = (self.runner.clone(), self.side(role).clone());
        // One for each run of a base check's pair (with the culprits, and without).
        let count = runner.forkserver.slots().min(2);
        Prewarm(Some(std::thread::spawn(move || {
            runner.prewarm(&side.snapshot, count)
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

    /// The node's compute function: one sandboxed pytest run, its result without timings (so
    /// identical runs give identical bytes) and the files it depended on.
    fn compute(
        &self,
        req: &RunRequest,
        side: Arc<TreeDigests>,
        overlay: Arc<BTreeMap<String, Option<Digest>>>,
    ) -> impl Fn(&[&[u8]]) -> Result<Output, NodeError> + Send + Sync + 'static {
        let runner = self.runner.clone();
        let groups = self.groups.clone();
        let deps_mode = self.deps_mode;
        let order = req.order.clone();
        let record = req.record;
        let overlay_bytes = req.overlay.clone();
        let label = req.label.clone();
        let progress = self.progress.clone();
        let remote = self.remote.clone();
        let repeat = req.repeat;
        move |_inputs| {
            let pb = progress.as_ref().map(|mp| {
                let pb = mp.add(ProgressBar::new(order.len() as u64));
                pb.set_style(
                    ProgressStyle::with_template("{prefix:>18} [{bar:20}] {pos}/{len} {wide_msg}")
                        .expect("a valid template")
                        .progress_chars("=> "),
                );
                pb.set_prefix(label.clone());
                pb
            });
            let result = match &remote {
                Some(exec) => {
                    let run = RemoteRun {
                        label: &label,
                        snapshot: &side.snapshot,
                        overlay: &overlay_bytes,
                        order: Some(&order),
                        groups: &groups,
                        repeat,
                        record,
                    };
                    exec.run(&runner, &run, pb.as_ref())
                }
                None => runner.run(
                    &side.snapshot,
                    &overlay_bytes,
                    &order,
                    &groups,
                    record,
                    pb.as_ref(),
                ),
            };
            if let Some(pb) = pb {
                pb.finish_and_clear();
            }
            let mut result = result.map_err(node_error)?;
            strip_timing(&mut result);
            let deps = dependencies(&result, &side, &overlay, &groups, deps_mode);
            let bytes = postcard::to_allocvec(&result)
                .map_err(|e| node_bug(format!("a run result does not encode: {e}")))?;
            Ok(Output::new(bytes).with_reads(deps))
        }
    }
}

/// A failure of the runner as a node's error: a cancelled run is [`NodeError::Cancelled`] (a
/// partial run is never a result), anything else an infrastructure error. Neither is cached.
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

/// How a run node's output is encoded, part of its key so that entries in another encoding are
/// misses, not decode errors. postcard, not JSON: a warm audit decodes every seed run (8 x 2,000
/// tests is 9 MB of JSON, a third of its time) and a fresh machine downloads them.
const RUN_ENCODING: &str = "postcard 4";

/// A run node's output bytes back into the run.
pub(crate) fn decode_run(bytes: &[u8]) -> std::result::Result<RunResult, postcard::Error> {
    postcard::from_bytes(bytes)
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
