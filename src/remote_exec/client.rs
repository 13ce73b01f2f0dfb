//! The remote executor: every pytest run of an audit as an `Execute` call on a REAPI service.
//! Its input root goes to the CAS first (only the blobs the service lacks, which for a new head
//! are its changed files and the directories above them); its outputs come back as the same
//! [`RunResult`] a local run gives, through the driver's own reading of the event streams.
//!
//! An action the service could not run (a status that is not OK, a lost worker, outputs that
//! do not read back) is tried once more; a second failure ends the audit (exit 2) with the
//! service's message, and every run after it fails at once. A failing test is data, never that.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use bazel_remote_apis::google::longrunning::{operation, Operation};
use fixgate_cache::{Backoff, DigestFunction, GrpcConnection, RemoteConfig, RemoteDigest};
use indicatif::ProgressBar;
use prost::Message;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::config::{FixtureGroups, RemoteExecConfig};
use crate::error::{Error, Result};
use crate::pytest::driver::{RunEnvPaths, Runner};
use crate::pytest::interpreter::Fingerprint;
use crate::pytest::record::Record;
use crate::pytest::result::RunResult;
use crate::pytest::run::{Recorded, RecordedProcess};
use crate::remote_exec::action::{self, RunSpec};
use crate::remote_exec::merkle::{self, Item, Source, Tree};
use crate::sandbox::Overlay;
use crate::snapshot::{EntryKind, Snapshot};

/// Where runs execute remotely, resolved from the command line and the base's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `grpc://HOST:PORT` or `grpcs://HOST:PORT`.
    pub(crate) url: String,
    pub(crate) instance: String,
    /// The user's platform properties (`--remote-platform KEY=VALUE`).
    pub(crate) platform: Vec<(String, String)>,
    /// Request headers (`FIXGATE_REMOTE_HEADER`). Secret.
    pub(crate) headers: Vec<(String, String)>,
}

/// Remote actions in flight by default: the service's workers, not this machine's cores, are
/// what runs them.
pub(crate) const DEFAULT_JOBS: usize = 32;

/// What the command line asks of remote execution: the three settings (those unset come from
/// the base's `[tool.fixgate]`) and the request headers (`FIXGATE_REMOTE_HEADER`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Asked {
    pub(crate) flags: RemoteExecConfig,
    /// Secret.
    pub(crate) headers: Vec<(String, String)>,
}

/// The settings: the flags, else the base's `[tool.fixgate]`; `None` when no executor is named.
pub(crate) fn resolve(asked: &Asked, base: &RemoteExecConfig) -> Result<Option<Settings>> {
    let args = &asked.flags;
    let url = match &args.executor {
        Some(u) => Some(u.trim().to_owned()).filter(|u| !u.is_empty()),
        None => base.executor.clone(),
    };
    let Some(url) = url else {
        if args.instance.is_some() || !args.platform.is_empty() {
            return Err(Error::Usage(
                "--remote-instance and --remote-platform need --remote-executor URL (or \
                 [tool.fixgate] remote-executor in the base)"
                    .into(),
            ));
        }
        return Ok(None);
    };
    if !(url.starts_with("grpc://") || url.starts_with("grpcs://")) {
        return Err(Error::Usage(format!(
            "--remote-executor {url:?}: expected grpc://HOST:PORT or grpcs://HOST:PORT (REAPI \
             over gRPC), e.g. grpcs://remote.buildbuddy.io"
        )));
    }
    Ok(Some(Settings {
        url: url.trim_end_matches('/').to_owned(),
        instance: args
            .instance
            .clone()
            .or_else(|| base.instance.clone())
            .unwrap_or_default(),
        platform: match args.platform.is_empty() {
            true => base.platform.clone(),
            false => args.platform.clone(),
        },
        headers: asked.headers.clone(),
    }))
}

impl Settings {
    /// The service as the audit's remote cache (never uploaded to: `--remote-upload` goes with
    /// `--remote-cache`).
    pub(crate) fn as_cache(&self) -> crate::engine::store::RemoteSettings {
        crate::engine::store::RemoteSettings {
            config: self.config(fixgate_cache::DEFAULT_REQUEST_TIMEOUT),
            required: false,
        }
    }

    /// The service as a remote cache URL (`grpc://HOST:PORT/INSTANCE`): the ActionCache node
    /// results go to when no `--remote-cache` is set.
    pub(crate) fn cache_url(&self) -> String {
        match self.instance.is_empty() {
            true => self.url.trim_end_matches('/').to_owned(),
            false => format!("{}/{}", self.url.trim_end_matches('/'), self.instance),
        }
    }

    fn config(&self, request_timeout: Duration) -> RemoteConfig {
        let mut c = RemoteConfig::new(self.cache_url());
        c.headers = self.headers.clone();
        c.request_timeout = request_timeout;
        c
    }
}

/// The interpreter a run needs, for its platform: the version, then a digest of the version,
/// pytest and every installed distribution (not the path, which may differ on the worker).
pub(crate) fn interpreter_identity(fp: &Fingerprint) -> String {
    let mut h = blake3::Hasher::new_derive_key("fixgate remote interpreter v1");
    for part in [&fp.version, &fp.pytest] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    for (n, v) in &fp.distributions {
        for part in [n, v] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    let version = fp.version.split_whitespace().next().unwrap_or("unknown");
    format!("{version}-{}", &h.finalize().to_hex()[..32])
}

/// The interpreter's name on the worker: `python3.11` for a 3.11 interpreter.
pub(crate) fn interpreter_name(fp: &Fingerprint) -> String {
    let version = fp.version.split_whitespace().next().unwrap_or("3");
    let minor: Vec<&str> = version.split('.').take(2).collect();
    format!("python{}", minor.join("."))
}

/// Where one run executed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Placement {
    /// The worker the service names in the result.
    pub(crate) worker: String,
    /// The service answered from its ActionCache: an identical action ran before.
    pub(crate) cached: bool,
}

/// What the executor did, for the report.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) executor: String,
    pub(crate) instance: String,
    /// Actions executed (or answered from the service's cache), retries not counted.
    pub(crate) actions: u32,
    /// Of those, answered from the service's ActionCache.
    pub(crate) cached_actions: u32,
    /// Actions tried again after the service could not run them, with why.
    pub(crate) retried: Vec<String>,
    /// Requests the service refused for now (too many at once), each asked again later.
    pub(crate) busy_answers: u32,
    /// The actions allowed at the service at once when the audit ended, once it was busy
    /// (`null`: it never was, and `--jobs` was the bound).
    pub(crate) in_flight_limit: Option<usize>,
    /// Blobs found missing in the CAS and uploaded, and their bytes.
    pub(crate) uploaded_blobs: u64,
    pub(crate) uploaded_bytes: u64,
    /// Of those, the snapshots' files (a new head's: its changed files only).
    pub(crate) uploaded_snapshot_files: u64,
    /// Runs by label, with the worker each ran on.
    pub(crate) runs: BTreeMap<String, Placement>,
    /// pytest runs that ran on this machine (the collections).
    pub(crate) local_runs: Vec<String>,
    /// Where the time of the executed actions went, summed over them.
    pub(crate) stages: Stages,
}

/// Seconds summed over the actions that ran (not those answered from the service's cache):
/// this machine's part (upload, the `Execute` call, read-back) and, from each result's
/// `ExecutedActionMetadata` on the worker's own clock, the worker's. The `Execute` call less
/// the worker's time is the service's: queueing, scheduling, handing the result back.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Stages {
    /// Building the input root and uploading what the CAS lacked.
    pub(crate) upload_seconds: f64,
    /// From `Execute` to its answer.
    pub(crate) execute_seconds: f64,
    /// Fetching the outputs and decoding them into a run result.
    pub(crate) read_back_seconds: f64,
    /// On the worker: materializing the input root.
    pub(crate) worker_input_fetch_seconds: f64,
    /// On the worker: the command itself (the interpreter's start included).
    pub(crate) worker_execution_seconds: f64,
    /// On the worker: uploading the outputs.
    pub(crate) worker_output_upload_seconds: f64,
    /// On the worker, from taking the lease to finishing it.
    pub(crate) worker_total_seconds: f64,
}

impl Stages {
    fn add_worker(&mut self, m: &reapi::ExecutedActionMetadata) {
        use bazel_remote_apis::google::protobuf::Timestamp;
        let span = |a: &Option<Timestamp>, b: &Option<Timestamp>| match (a, b) {
            (Some(a), Some(b)) => {
                let at = |t: &Timestamp| t.seconds as f64 + f64::from(t.nanos) * 1e-9;
                let s = at(b) - at(a);
                s.max(0.0)
            }
            _ => 0.0,
        };
        self.worker_input_fetch_seconds += span(
            &m.input_fetch_start_timestamp,
            &m.input_fetch_completed_timestamp,
        );
        self.worker_execution_seconds += span(
            &m.execution_start_timestamp,
            &m.execution_completed_timestamp,
        );
        self.worker_output_upload_seconds += span(
            &m.output_upload_start_timestamp,
            &m.output_upload_completed_timestamp,
        );
        self.worker_total_seconds += span(&m.worker_start_timestamp, &m.worker_completed_timestamp);
    }
}

/// The launcher's `out/run.json`.
#[derive(Deserialize)]
struct RunFile {
    version: u32,
    root: String,
    processes: Vec<ProcessEntry>,
}

#[derive(Deserialize)]
struct ProcessEntry {
    events: String,
    log: String,
    status: Option<i32>,
    timed_out: bool,
}

/// One run to execute remotely.
pub(crate) struct RemoteRun<'a> {
    pub(crate) label: &'a str,
    pub(crate) snapshot: &'a Arc<Snapshot>,
    pub(crate) overlay: &'a Overlay,
    /// `None`: collection order.
    pub(crate) order: Option<&'a [String]>,
    pub(crate) groups: &'a FixtureGroups,
    /// Which repetition of the same run (see `action::salt`).
    pub(crate) repeat: u32,
    /// What the run records besides outcomes and file traces: it comes back in the run's own
    /// event streams, like everything else the run reports.
    pub(crate) record: Record,
}

pub(crate) struct Executor {
    settings: Settings,
    cas: GrpcConnection,
    exec: GrpcConnection,
    function: DigestFunction,
    output_paths: bool,
    platform: Vec<(String, String)>,
    interpreter: String,
    /// Re-execute even when the service has an identical action's result (`--check`,
    /// `--no-cache`).
    skip_cache_lookup: bool,
    /// The plugin and the launcher, the same in every run.
    tools: Tree,
    /// Blobs the CAS is known to hold (uploaded or found present by this executor).
    present: Mutex<HashSet<RemoteDigest>>,
    /// Held while uploading: runs that start together (the matrix's orders of one snapshot)
    /// need the same blobs, and the second waits for the first instead of sending them again.
    uploading: Mutex<()>,
    /// The tree of each snapshot (by address: both live as long as the audit) and overlay.
    trees: Mutex<HashMap<(usize, fixgate_cache::Digest), Arc<Tree>>>,
    failure: Mutex<Option<String>>,
    summary: Mutex<Summary>,
    /// How many actions are at the service at once (fewer while it answers busy).
    pace: crate::remote_exec::pace::Pace,
}

fn remote(e: fixgate_cache::RemoteError) -> String {
    e.to_string()
}

impl Executor {
    /// Connects and checks that the service executes, with a digest function fixgate has.
    pub(crate) fn connect(
        settings: Settings,
        runner: &Runner,
        skip_cache_lookup: bool,
    ) -> Result<Executor> {
        let fail = |why: String| {
            Error::Infra(format!(
                "cannot use the remote executor {}: {why}",
                settings.url
            ))
        };
        // A service whose threads are all taken refuses even GetCapabilities: asked again, as
        // every request to a busy service is.
        let open = |config: RemoteConfig| {
            crate::remote_exec::patient(|| GrpcConnection::open(&config), || ())
                .map_err(|e| fail(remote(e)))
        };
        let cas = open(settings.config(fixgate_cache::DEFAULT_REQUEST_TIMEOUT))?;
        // Execute streams last as long as the action: their own connection, without the
        // request timeout of the CAS calls.
        let exec = open(settings.config(action::MAX_ACTION_TIMEOUT + Duration::from_secs(600)))?;
        let caps = cas.capabilities();
        let Some(exec_caps) = caps
            .execution_capabilities
            .as_ref()
            .filter(|c| c.exec_enabled)
        else {
            return Err(fail(
                "the service does not execute actions (its capabilities have exec_enabled \
                 false); it may be a cache only: pass it as --remote-cache instead"
                    .into(),
            ));
        };
        let function = cas.function();
        let offered: Vec<i32> = std::iter::once(exec_caps.digest_function)
            .chain(exec_caps.digest_functions.iter().copied())
            .collect();
        if !offered.contains(&function.reapi()) {
            return Err(fail(format!(
                "it executes with digest functions {offered:?}, its cache uses {}",
                function.name()
            )));
        }
        // `output_paths` came with REAPI 2.1.
        let output_paths = caps
            .high_api_version
            .as_ref()
            .is_some_and(|v| (v.major, v.minor) >= (2, 1));
        let fp = &runner.interpreter.fingerprint;
        let mut platform = settings.platform.clone();
        platform.push((
            action::INTERPRETER_PROPERTY.to_owned(),
            interpreter_identity(fp),
        ));
        if runner.allow_network {
            platform.push((action::NETWORK_PROPERTY.to_owned(), "host".to_owned()));
        }
        let mut tool_items: Vec<(Vec<u8>, Item)> = crate::pytest::plugin::files()
            .into_iter()
            .map(|(name, text)| {
                (
                    name.into_bytes(),
                    merkle::bytes_item(function, text.as_bytes(), false),
                )
            })
            .collect();
        tool_items.push((
            action::LAUNCHER.as_bytes().to_vec(),
            merkle::bytes_item(function, action::LAUNCHER_SOURCE.as_bytes(), false),
        ));
        let tools = merkle::build(function, tool_items)
            .map_err(|e| Error::Infra(format!("bug: the plugin's tree: {e}")))?;
        Ok(Executor {
            summary: Mutex::new(Summary {
                executor: settings.url.clone(),
                instance: settings.instance.clone(),
                ..Summary::default()
            }),
            pace: crate::remote_exec::pace::Pace::new(),
            settings,
            cas,
            exec,
            function,
            output_paths,
            platform,
            interpreter: interpreter_name(fp),
            skip_cache_lookup,
            tools,
            present: Mutex::new(HashSet::new()),
            uploading: Mutex::new(()),
            trees: Mutex::new(HashMap::new()),
            failure: Mutex::new(None),
        })
    }

    /// The failure that ended remote execution, once one did.
    pub(crate) fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    pub(crate) fn summary(&self) -> Summary {
        let mut s = lock(&self.summary).clone();
        s.in_flight_limit = self.pace.limit();
        s
    }

    /// Executes one run remotely; its result is the one a local run gives.
    pub(crate) fn run(
        &self,
        runner: &Runner,
        run: &RemoteRun,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        if let Some(f) = self.failure() {
            return Err(Error::Infra(f));
        }
        let tree = self.tree(run.snapshot, run.overlay)?;
        let mut last = String::new();
        let mut attempt = 0;
        let mut busy = Backoff::new(BUSY_FIRST_PAUSE, BUSY_LAST_PAUSE).within(BUSY_PATIENCE);
        while attempt < 2 {
            let slot = self.pace.enter();
            // Another run ended the audit while this one waited for a place.
            if let Some(f) = self.failure() {
                return Err(Error::Infra(f));
            }
            let outcome = self.attempt(runner, run, &tree, progress);
            match &outcome {
                Ok(Attempt::Busy(_)) => self.pace.busy(&slot),
                Ok(Attempt::Done(..)) => self.pace.ran(),
                _ => {}
            }
            drop(slot);
            match outcome {
                Ok(Attempt::Done(result, placement)) => {
                    let mut s = lock(&self.summary);
                    s.actions += 1;
                    s.cached_actions += u32::from(placement.cached);
                    s.runs.insert(run.label.to_owned(), placement);
                    return Ok(*result);
                }
                // A busy service is asked again, with longer pauses, and that is no attempt
                // of the run's: only a service busy for all of BUSY_PATIENCE fails it.
                Ok(Attempt::Busy(why)) => {
                    if let Some(pause) = busy.next_pause() {
                        lock(&self.summary).busy_answers += 1;
                        if let Some(pb) = progress {
                            pb.set_message(format!("remote: the service is busy ({why}); waiting"));
                        }
                        std::thread::sleep(pause);
                        continue;
                    }
                    last = format!(
                        "the service stayed busy for {}s: {why}",
                        busy.paused().as_secs()
                    );
                }
                Ok(Attempt::Failed(why)) => last = why,
                Err(e) => return Err(e),
            }
            attempt += 1;
            if attempt < 2 {
                lock(&self.summary)
                    .retried
                    .push(format!("{}: {last}", run.label));
            }
        }
        let message = format!(
            "the remote executor {} could not run {} (tried twice): {last}",
            self.settings.url, run.label
        );
        lock(&self.failure).get_or_insert(message.clone());
        Err(Error::Infra(message))
    }

    /// The snapshot's tree with the overlay applied, built once per audit.
    fn tree(&self, snapshot: &Arc<Snapshot>, overlay: &Overlay) -> Result<Arc<Tree>> {
        let mut key = fixgate_cache::KeyWriter::new("remote-overlay");
        key.list(overlay, |w, (p, b)| {
            w.str(&p.to_string())
                .opt_digest(b.as_deref().map(fixgate_cache::Digest::of).as_ref());
        });
        let key = (Arc::as_ptr(snapshot) as usize, key.finish());
        if let Some(t) = lock(&self.trees).get(&key) {
            return Ok(t.clone());
        }
        let function = self.function;
        let replaced: HashSet<&[u8]> = overlay.iter().map(|(p, _)| p.as_bytes()).collect();
        let mut items: Vec<(Vec<u8>, Item)> = snapshot
            .entries
            .par_iter()
            .enumerate()
            .filter(|(_, e)| !replaced.contains(e.path.as_bytes()))
            .map_init(
                || snapshot.open_git(),
                |git, (i, entry)| -> Result<(Vec<u8>, Item)> {
                    let git = git.as_ref().map_err(|e| Error::Git(e.to_string()))?;
                    let bytes = snapshot.read(entry, git.as_ref())?;
                    let item = match entry.kind {
                        EntryKind::Symlink => Item::Link {
                            target: String::from_utf8(bytes).map_err(|_| {
                                Error::Infra(format!(
                                    "the link {} has a target that is not UTF-8, which REAPI \
                                     cannot hold; remote execution cannot run this snapshot",
                                    entry.path
                                ))
                            })?,
                        },
                        kind => Item::File {
                            digest: function.digest(&bytes),
                            executable: kind == EntryKind::Executable,
                            source: Source::Entry(i),
                        },
                    };
                    Ok((entry.path.as_bytes().to_vec(), item))
                },
            )
            .collect::<Result<_>>()?;
        for (path, bytes) in overlay {
            if let Some(bytes) = bytes {
                items.push((
                    path.as_bytes().to_vec(),
                    Item::File {
                        digest: function.digest(bytes),
                        executable: false,
                        source: Source::Overlay(bytes.as_slice().into()),
                    },
                ));
            }
        }
        let tree = Arc::new(merkle::build(function, items).map_err(|e| {
            Error::Infra(format!(
                "remote execution cannot send {}: {e}",
                snapshot.rev_label()
            ))
        })?);
        lock(&self.trees).insert(key, tree.clone());
        Ok(tree)
    }

    /// One try: the run's root, its upload, `Execute`, its outputs read back.
    fn attempt(
        &self,
        runner: &Runner,
        run: &RemoteRun,
        tree: &Tree,
        progress: Option<&ProgressBar>,
    ) -> Result<Attempt> {
        let function = self.function;
        let began = Instant::now();
        let watch = serde_json::json!({ "roots": run.groups.watch_roots() }).to_string();
        let mut items: Vec<(Vec<u8>, Item)> = vec![
            (b"tree".to_vec(), Item::Subtree(tree.root)),
            (
                action::TOOLS_DIR.as_bytes().to_vec(),
                Item::Subtree(self.tools.root),
            ),
            (b"home".to_vec(), Item::Dir),
            (b"tmp".to_vec(), Item::Dir),
            (
                action::WATCH_FILE.as_bytes().to_vec(),
                merkle::bytes_item(function, watch.as_bytes(), false),
            ),
        ];
        if let Some(order) = run.order {
            let mut text = order.join("\n");
            text.push('\n');
            items.push((
                action::ORDER_FILE.as_bytes().to_vec(),
                merkle::bytes_item(function, text.as_bytes(), false),
            ));
        }
        let root = merkle::build(function, items)
            .map_err(|e| Error::Infra(format!("bug: a run's input root: {e}")))?;
        let spec = RunSpec {
            interpreter: self.interpreter.clone(),
            pytest_args: {
                let mut args = runner.pytest_options();
                args.extend(run.record.options());
                args
            },
            env: self.env(runner, run.snapshot),
            test_timeout: runner.test_timeout,
            tests: run
                .order
                .map_or(run.snapshot.entries.len(), <[String]>::len),
            ordered: run.order.is_some(),
            repeat: run.repeat,
            platform: self.platform.clone(),
            output_paths: self.output_paths,
        };
        let command = spec.command().encode_to_vec();
        let command_digest = function.digest(&command);
        let action_msg = spec
            .action(&command_digest, &root.root, false)
            .encode_to_vec();
        let action_digest = function.digest(&action_msg);
        let mut own: HashMap<RemoteDigest, Source> = root.blobs.clone();
        own.insert(command_digest, Source::Bytes(command.into()));
        own.insert(action_digest, Source::Bytes(action_msg.into()));
        if let Err(refused) = self.upload(run.snapshot, [&own, &tree.blobs, &self.tools.blobs]) {
            return Ok(refused.into());
        }
        if let Some(pb) = progress {
            pb.set_message(format!("remote: queued at {}", self.settings.url));
        }
        let uploaded = Instant::now();
        let response = match self.execute(&action_digest, progress) {
            Ok(r) => r,
            Err(refused) => return Ok(refused.into()),
        };
        if let Some(s) = response.status.as_ref().filter(|s| s.code != 0) {
            if s.code == tonic::Code::FailedPrecondition as i32 {
                // Blobs the service lost (or never had): the next try checks every one again.
                lock(&self.present).clear();
            }
            let code = tonic::Code::from_i32(s.code);
            return Ok(Attempt::Failed(format!("{code:?}: {}", s.message)));
        }
        let Some(result) = response.result else {
            return Ok(Attempt::Failed("the service sent no ActionResult".into()));
        };
        let executed = Instant::now();
        let placement = Placement {
            worker: result
                .execution_metadata
                .as_ref()
                .map(|m| m.worker.clone())
                .unwrap_or_default(),
            cached: response.cached_result,
        };
        match self.read_back(runner, run, &result) {
            Ok(r) => {
                if !response.cached_result {
                    let mut s = lock(&self.summary);
                    let stages = &mut s.stages;
                    stages.upload_seconds += (uploaded - began).as_secs_f64();
                    stages.execute_seconds += (executed - uploaded).as_secs_f64();
                    stages.read_back_seconds += executed.elapsed().as_secs_f64();
                    if let Some(m) = &result.execution_metadata {
                        stages.add_worker(m);
                    }
                }
                Ok(Attempt::Done(Box::new(r), placement))
            }
            Err(ReadBack::Failed(why)) => Ok(Attempt::Failed(why)),
            Err(ReadBack::Run(e)) => Err(e),
        }
    }

    /// The run's environment, its paths relative to the input root (the launcher makes them
    /// absolute where the worker put it).
    fn env(&self, runner: &Runner, snapshot: &Snapshot) -> Vec<(String, String)> {
        let mut pythonpath = vec!["tree".to_owned()];
        if src_layout(snapshot) {
            pythonpath.push("tree/src".to_owned());
        }
        pythonpath.push(action::TOOLS_DIR.to_owned());
        let paths = RunEnvPaths {
            pythonpath: pythonpath.join(":").into(),
            home: "home".into(),
            tmp: "tmp".into(),
        };
        runner
            .run_env(&paths)
            .into_iter()
            .map(|(k, v)| (k, v.to_string_lossy().into_owned()))
            .collect()
    }

    /// Uploads every blob of `sets` the CAS lacks, counting them.
    fn upload<const N: usize>(
        &self,
        snapshot: &Snapshot,
        sets: [&HashMap<RemoteDigest, Source>; N],
    ) -> std::result::Result<(), Refused> {
        let _one_at_a_time = lock(&self.uploading);
        let wanted: Vec<(RemoteDigest, &Source)> = {
            let present = lock(&self.present);
            let mut seen = HashSet::new();
            sets.iter()
                .flat_map(|s| s.iter())
                .filter(|(d, _)| !present.contains(*d) && seen.insert(**d))
                .map(|(d, s)| (*d, s))
                .collect()
        };
        if wanted.is_empty() {
            return Ok(());
        }
        let digests: Vec<RemoteDigest> = wanted.iter().map(|(d, _)| *d).collect();
        let missing: HashSet<RemoteDigest> = self
            .cas
            .find_missing(&digests)
            .map_err(Refused::from)?
            .into_iter()
            .collect();
        let mut git = None;
        let mut files = 0u64;
        let mut bytes: Vec<(RemoteDigest, Arc<[u8]>)> = Vec::new();
        for (d, source) in wanted.iter().filter(|(d, _)| missing.contains(d)) {
            let b: Arc<[u8]> = match source {
                Source::Bytes(b) => b.clone(),
                Source::Overlay(b) => {
                    files += 1;
                    b.clone()
                }
                Source::Entry(i) => {
                    files += 1;
                    if git.is_none() {
                        git = Some(snapshot.open_git().map_err(|e| e.to_string())?);
                    }
                    let entry = &snapshot.entries[*i];
                    let read = snapshot
                        .read(entry, git.as_ref().and_then(Option::as_ref))
                        .map_err(|e| e.to_string())?;
                    if function_digest(self.function, &read) != *d {
                        return Err(Refused::Failed(format!(
                            "{} changed while the audit ran; audit again",
                            entry.path
                        )));
                    }
                    read.into()
                }
            };
            bytes.push((*d, b));
        }
        let refs: Vec<(RemoteDigest, &[u8])> = bytes.iter().map(|(d, b)| (*d, &b[..])).collect();
        self.cas.put_blobs(&refs).map_err(Refused::from)?;
        {
            let mut s = lock(&self.summary);
            s.uploaded_blobs += refs.len() as u64;
            s.uploaded_bytes += refs.iter().map(|(d, _)| d.size).sum::<u64>();
            s.uploaded_snapshot_files += files;
        }
        lock(&self.present).extend(digests);
        Ok(())
    }

    /// `Execute`, followed to the operation's end (through `WaitExecution` when the stream
    /// breaks): the service's response, or why there is none.
    fn execute(
        &self,
        action: &RemoteDigest,
        progress: Option<&ProgressBar>,
    ) -> std::result::Result<reapi::ExecuteResponse, Refused> {
        use reapi::execution_client::ExecutionClient;
        let request = reapi::ExecuteRequest {
            instance_name: self.exec.instance().to_owned(),
            skip_cache_lookup: self.skip_cache_lookup,
            action_digest: Some(action.to_proto()),
            digest_function: self.function.reapi(),
            ..Default::default()
        };
        let mut name: Option<String> = None;
        let mut executing = false;
        let mut breaks = 0;
        let began = Instant::now();
        let mut busy_pause = Backoff::new(BUSY_FIRST_PAUSE, BUSY_LAST_PAUSE);
        let mut rejoin_pause = Backoff::new(REJOIN_FIRST_PAUSE, REJOIN_LAST_PAUSE);
        loop {
            if began.elapsed() > FOLLOW_PATIENCE {
                if let Some(n) = &name {
                    self.cancel(n);
                }
                return Err(Refused::Failed(format!(
                    "the service did not finish the action within {}s",
                    FOLLOW_PATIENCE.as_secs()
                )));
            }
            let mut client = ExecutionClient::new(self.exec.channel());
            let outcome = self.exec.block_on(async {
                let stream = match &name {
                    None => client.execute(request.clone()).await,
                    Some(n) => {
                        client
                            .wait_execution(reapi::WaitExecutionRequest { name: n.clone() })
                            .await
                    }
                };
                let mut stream = stream?.into_inner();
                // Held for STREAM_HOLD once the operation has a name, then let go.
                let mut until = name
                    .as_ref()
                    .map(|_| tokio::time::Instant::now() + STREAM_HOLD);
                loop {
                    let next = match until {
                        Some(t) => match tokio::time::timeout_at(t, stream.message()).await {
                            Ok(next) => next?,
                            Err(_) => return Ok(Some(Ended::LetGo)),
                        },
                        None => stream.message().await?,
                    };
                    let Some(op) = next else { break };
                    match follow_operation(&op, &mut name, progress) {
                        Followed::Done(done) => return Ok(Some(Ended::Done(done))),
                        Followed::Stage(stage) if stage == Stage::Executing as i32 => {
                            executing = true
                        }
                        // Back in the queue after a worker had it: the worker was lost and the
                        // service runs it again on its own (BuildGrid does, whatever its
                        // max-job-attempts says). That is this try's failure.
                        Followed::Stage(stage) if executing && stage == Stage::Queued as i32 => {
                            return Ok(Some(Ended::Lost))
                        }
                        Followed::Stage(_) => {}
                    }
                    if until.is_none() && name.is_some() {
                        until = Some(tokio::time::Instant::now() + STREAM_HOLD);
                    }
                }
                Ok::<_, tonic::Status>(None)
            });
            match outcome {
                Ok(Some(Ended::Lost)) => {
                    // Withdrawn, so that the next try is an action of its own, not the one the
                    // service would give to yet another worker.
                    if let Some(n) = &name {
                        self.cancel(n);
                    }
                    return Err(Refused::Failed(
                        "the worker running it was lost (the service queued it again)".into(),
                    ));
                }
                Ok(Some(Ended::Done(done))) => return (*done).map_err(Refused::Failed),
                // Let go on purpose: the thread it held is the service's for a moment (its
                // workers report through the same threads), then the operation is asked for by
                // name.
                Ok(Some(Ended::LetGo)) => std::thread::sleep(STREAM_GAP),
                // Busy while the operation runs: asked again later, which is no break of it.
                Err(s) if s.code() == tonic::Code::ResourceExhausted && name.is_some() => {
                    lock(&self.summary).busy_answers += 1;
                    busy_pause.pause();
                }
                // The stream ended before the operation did, or broke: wait on it by name.
                Ok(None) | Err(_) if name.is_some() && breaks < 5 => {
                    breaks += 1;
                    rejoin_pause.pause();
                }
                Ok(None) => {
                    return Err(Refused::Failed(
                        "the service ended the Execute stream early".into(),
                    ))
                }
                // Refused before an operation began: too many requests at once.
                Err(s) if s.code() == tonic::Code::ResourceExhausted && name.is_none() => {
                    return Err(Refused::Busy(s.message().to_owned()))
                }
                Err(s) => return Err(Refused::Failed(format!("{:?}: {}", s.code(), s.message()))),
            }
        }
    }

    /// Asks the service to drop an operation (best effort: a service that cannot lets it run).
    fn cancel(&self, name: &str) {
        use bazel_remote_apis::google::longrunning::operations_client::OperationsClient;
        use bazel_remote_apis::google::longrunning::CancelOperationRequest;
        let mut client = OperationsClient::new(self.exec.channel());
        let _ = self
            .exec
            .block_on(client.cancel_operation(CancelOperationRequest {
                name: name.to_owned(),
            }));
    }

    /// The launcher's outputs, fetched into a temporary folder and read by the driver.
    fn read_back(
        &self,
        runner: &Runner,
        run: &RemoteRun,
        result: &reapi::ActionResult,
    ) -> std::result::Result<RunResult, ReadBack> {
        let failed = |why: String| ReadBack::Failed(why);
        let stderr = || {
            result
                .stderr_digest
                .as_ref()
                .and_then(|d| RemoteDigest::from_proto(d).ok())
                .and_then(|d| self.cas.get_blobs(&[d]).ok())
                .and_then(|mut v| v.pop())
                .and_then(|(_, b)| b)
                .map(|b| tail(&String::from_utf8_lossy(&b)))
                .unwrap_or_default()
        };
        if result.exit_code != 0 {
            return Err(failed(format!(
                "the launcher exited with status {} on worker {:?}{}",
                result.exit_code,
                result
                    .execution_metadata
                    .as_ref()
                    .map(|m| m.worker.as_str())
                    .unwrap_or_default(),
                stderr()
            )));
        }
        let out = result
            .output_directories
            .iter()
            .find(|d| d.path == action::OUT_DIR)
            .and_then(|d| d.tree_digest.as_ref())
            .ok_or_else(|| failed(format!("the result has no {} directory", action::OUT_DIR)))?;
        let out = RemoteDigest::from_proto(out).map_err(|e| failed(e.to_string()))?;
        let tree = self.fetch(&[out]).map_err(failed)?;
        let tree = reapi::Tree::decode(&tree[0][..])
            .map_err(|e| failed(format!("the output tree does not decode: {e}")))?;
        let files: HashMap<String, RemoteDigest> = tree
            .root
            .as_ref()
            .map(|r| r.files.as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|f| {
                Some((
                    f.name.clone(),
                    RemoteDigest::from_proto(f.digest.as_ref()?).ok()?,
                ))
            })
            .collect();
        let digest_of = |name: &str| {
            crate::beneath::dir::component(name.as_bytes())
                .ok()
                .and_then(|_| files.get(name).copied())
                .ok_or_else(|| failed(format!("the run's outputs lack {name}{}", stderr())))
        };
        let run_file = self
            .fetch(&[digest_of(action::RUN_FILE)?])
            .map_err(failed)?;
        let run_file: RunFile = serde_json::from_slice(&run_file[0])
            .map_err(|e| failed(format!("{} does not parse: {e}", action::RUN_FILE)))?;
        if run_file.version != 1 {
            return Err(failed(format!(
                "{} has version {}, this fixgate reads 1",
                action::RUN_FILE,
                run_file.version
            )));
        }
        let mut wanted = Vec::new();
        for p in &run_file.processes {
            wanted.push(digest_of(&p.events)?);
            wanted.push(digest_of(&p.log)?);
        }
        let blobs = self.fetch(&wanted).map_err(failed)?;
        let dir = tempfile::Builder::new()
            .prefix("fixgate-remote-")
            .tempdir_in(&runner.env.temp_dir)
            .map_err(|e| ReadBack::Run(Error::io("create", &runner.env.temp_dir, e)))?;
        let mut processes = Vec::new();
        for (i, p) in run_file.processes.iter().enumerate() {
            let events = dir.path().join(format!("events-{i}.jsonl"));
            let log = dir.path().join(format!("pytest-{i}.log"));
            for (path, bytes) in [(&events, &blobs[2 * i]), (&log, &blobs[2 * i + 1])] {
                std::fs::write(path, bytes)
                    .map_err(|e| ReadBack::Run(Error::io("write", path, e)))?;
            }
            processes.push(RecordedProcess {
                events,
                log,
                status: exit_status(p.status),
                timed_out: p.timed_out,
            });
        }
        let recorded = Recorded {
            root: run_file.root.into(),
            processes,
        };
        runner
            .replay(
                run.snapshot,
                recorded,
                run.order,
                run.groups,
                run.record,
                None,
            )
            .map_err(ReadBack::Run)
    }

    /// The bytes of every digest, in order; a missing one is an error.
    fn fetch(&self, digests: &[RemoteDigest]) -> std::result::Result<Vec<Vec<u8>>, String> {
        crate::remote_exec::patient(
            || self.cas.get_blobs(digests),
            || lock(&self.summary).busy_answers += 1,
        )
        .map_err(remote)?
        .into_iter()
        .map(|(d, b)| b.ok_or_else(|| format!("the CAS lost the output blob {}", d.hex())))
        .collect()
    }
}

fn function_digest(f: DigestFunction, bytes: &[u8]) -> RemoteDigest {
    f.digest(bytes)
}

enum Attempt {
    Done(Box<RunResult>, Placement),
    Failed(String),
    /// The service refused a request for now (too many at once): ask again after a pause.
    Busy(String),
}

/// Why a request to the service gave no answer: it failed, or the service was busy.
enum Refused {
    Failed(String),
    Busy(String),
}

impl From<fixgate_cache::RemoteError> for Refused {
    fn from(e: fixgate_cache::RemoteError) -> Refused {
        match e {
            fixgate_cache::RemoteError::Busy(why) => Refused::Busy(why),
            e => Refused::Failed(e.to_string()),
        }
    }
}

impl From<String> for Refused {
    fn from(why: String) -> Refused {
        Refused::Failed(why)
    }
}

impl From<Refused> for Attempt {
    fn from(r: Refused) -> Attempt {
        match r {
            Refused::Failed(why) => Attempt::Failed(why),
            Refused::Busy(why) => Attempt::Busy(why),
        }
    }
}

/// How long one Execute or WaitExecution stream is held open once its operation has a name.
/// A stream holds one of the service's threads for as long as it is open (BuildGrid's do), and
/// so do the workers' calls: an audit whose streams held every thread while their actions
/// waited in the queue would leave no thread for a worker to take or report one, and wait
/// for as long as it follows an action (FOLLOW_PATIENCE). Let go, the stream's thread serves
/// whoever asks next; the operation is asked for again by name after STREAM_GAP.
const STREAM_HOLD: Duration = Duration::from_secs(5);
const STREAM_GAP: Duration = Duration::from_millis(200);
/// How long an action is followed, queued and running, before the run gives it up: its own
/// longest timeout and ten minutes in the queue.
const FOLLOW_PATIENCE: Duration = Duration::from_secs(action::MAX_ACTION_TIMEOUT.as_secs() + 600);
/// How long, in all, a run waits for a busy service before that counts as a failure of it.
const BUSY_PATIENCE: Duration = Duration::from_secs(120);
/// The pauses between asks of a busy service: doubling from the first to the last.
const BUSY_FIRST_PAUSE: Duration = Duration::from_millis(100);
const BUSY_LAST_PAUSE: Duration = Duration::from_secs(5);
/// The pauses before an operation whose stream broke is asked for again by name (five times at
/// most): doubling from the first to the last.
const REJOIN_FIRST_PAUSE: Duration = Duration::from_millis(200);
const REJOIN_LAST_PAUSE: Duration = Duration::from_secs(1);

enum ReadBack {
    /// The action's outputs are not a launcher's: the service's or the worker's doing.
    Failed(String),
    /// Reading them back failed here, or the run itself is an error (a collection error).
    Run(Error),
}

/// How following an operation ended.
enum Ended {
    Done(Box<std::result::Result<reapi::ExecuteResponse, String>>),
    /// Its worker was lost.
    Lost,
    /// The stream was let go after STREAM_HOLD, the operation not done yet.
    LetGo,
}

type Stage = reapi::execution_stage::Value;

/// Where one operation is.
enum Followed {
    /// Not done: its stage (0 when the service sends none).
    Stage(i32),
    Done(Box<std::result::Result<reapi::ExecuteResponse, String>>),
}

/// Reads one operation of a stream.
fn follow_operation(
    op: &Operation,
    name: &mut Option<String>,
    progress: Option<&ProgressBar>,
) -> Followed {
    if name.is_none() && !op.name.is_empty() {
        *name = Some(op.name.clone());
    }
    let stage = op
        .metadata
        .as_ref()
        .and_then(|meta| reapi::ExecuteOperationMetadata::decode(&meta.value[..]).ok())
        .map_or(0, |m| m.stage);
    if let Some(pb) = progress {
        let what = match Stage::try_from(stage) {
            Ok(Stage::CacheCheck) => "checking the service's cache",
            Ok(Stage::Queued) => "queued",
            Ok(Stage::Executing) => "executing",
            _ => "done",
        };
        pb.set_message(format!("remote: {what}"));
    }
    if !op.done {
        return Followed::Stage(stage);
    }
    Followed::Done(Box::new(match &op.result {
        Some(operation::Result::Response(any)) => reapi::ExecuteResponse::decode(&any.value[..])
            .map_err(|e| format!("the ExecuteResponse does not decode: {e}")),
        Some(operation::Result::Error(s)) => Err(format!(
            "{:?}: {}",
            tonic::Code::from_i32(s.code),
            s.message
        )),
        None => Err("the operation ended without a result".into()),
    }))
}

/// The exit status the launcher recorded: a code, or minus the signal that ended the process.
fn exit_status(status: Option<i32>) -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s < 0 => std::process::ExitStatus::from_raw(-s & 0x7f),
        Some(s) => std::process::ExitStatus::from_raw((s & 0xff) << 8),
        None => std::process::ExitStatus::from_raw(libc::SIGKILL),
    }
}

/// Whether the tree has a `src/` layout (a package or a module directly in `src/`), as the
/// driver's local check decides.
fn src_layout(snapshot: &Snapshot) -> bool {
    snapshot.entries.iter().any(|e| {
        let p = e.path.as_bytes();
        let Some(rest) = p.strip_prefix(b"src/") else {
            return false;
        };
        match rest.iter().position(|&b| b == b'/') {
            None => rest.ends_with(b".py"),
            Some(i) => &rest[i..] == b"/__init__.py",
        }
    })
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(20)..];
    match tail.is_empty() {
        true => String::new(),
        false => format!("; it said:\n{}", tail.join("\n")),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(version: &str, dists: &[(&str, &str)]) -> Fingerprint {
        Fingerprint {
            distributions: dists
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            executable: "/usr/bin/python3".into(),
            pytest: "8.3.0".into(),
            version: version.into(),
        }
    }

    #[test]
    fn the_interpreter_is_named_by_version_and_identified_without_its_path() {
        let a = fp(
            "3.11.2 (main, Mar 13 2023) [GCC 12.2.0]",
            &[("pytest", "8.3.0")],
        );
        assert_eq!(interpreter_name(&a), "python3.11");
        let mut moved = a.clone();
        moved.executable = "/opt/venv/bin/python".into();
        assert_eq!(interpreter_identity(&a), interpreter_identity(&moved));
        assert!(interpreter_identity(&a).starts_with("3.11.2-"));
        let other = fp(
            "3.11.2 (main, Mar 13 2023) [GCC 12.2.0]",
            &[("pytest", "8.2.0")],
        );
        assert_ne!(interpreter_identity(&a), interpreter_identity(&other));
    }

    #[test]
    fn recorded_statuses_read_as_codes_and_signals() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_status(Some(1)).code(), Some(1));
        assert_eq!(exit_status(Some(-9)).signal(), Some(9));
        assert_eq!(exit_status(None).signal(), Some(9));
    }
}
