//! The remote executor: every pytest run of an audit as an `Execute` call on a REAPI service.
//! Its input root goes to the CAS first (only the blobs the service lacks, which for a new head
//! are its changed files and the directories above them); its outputs come back as the same
//! [`RunResult`] a local run gives, through the driver's own reading of the event streams.
//!
//! An action the service could not run (a status that is not OK, a lost worker, outputs that
//! do not read back) is tried once more; a second failure ends the audit (exit 2) with the
//! service's message, and every run after it fails at once. A failing test is data, never that.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fixgate_cache::{Backoff, DigestFunction, GrpcConnection, RemoteConfig, RemoteDigest};
use indicatif::ProgressBar;
use prost::Message;
use rayon::prelude::*;

use crate::config::FixtureGroups;
use crate::error::{Error, Result};
use crate::pytest::driver::{RunEnvPaths, Runner};
use crate::pytest::record::Record;
use crate::pytest::result::RunResult;
use crate::remote_exec::action::{self, interpreter_identity, interpreter_name, RunSpec};
use crate::remote_exec::merkle::{self, Item, Source, Tree};
use crate::remote_exec::operation::{Execution, Refused, BUSY_FIRST_PAUSE, BUSY_LAST_PAUSE};
use crate::remote_exec::outputs::{read_back, ReadBack};
use crate::remote_exec::summary::Placement;
use crate::sandbox::Overlay;
use crate::snapshot::{EntryKind, Snapshot};

/// Where runs execute and what they did, which the engine and the report name from here.
pub(crate) use crate::remote_exec::settings::{resolve, Asked, Settings, DEFAULT_JOBS};
pub(crate) use crate::remote_exec::summary::Summary;

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
        let execution = Execution {
            exec: &self.exec,
            function,
            skip_cache_lookup: self.skip_cache_lookup,
            on_busy: &|| lock(&self.summary).busy_answers += 1,
        };
        let response = match execution.execute(&action_digest, progress) {
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
        let replay = |recorded| {
            runner.replay(
                run.snapshot,
                recorded,
                run.order,
                run.groups,
                run.record,
                None,
            )
        };
        let fetch = |digests: &[RemoteDigest]| self.fetch(digests);
        match read_back(&fetch, &runner.env.temp_dir, &result, replay) {
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
                    if self.function.digest(&read) != *d {
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

enum Attempt {
    Done(Box<RunResult>, Placement),
    Failed(String),
    /// The service refused a request for now (too many at once): ask again after a pause.
    Busy(String),
}

impl From<Refused> for Attempt {
    fn from(r: Refused) -> Attempt {
        match r {
            Refused::Failed(why) => Attempt::Failed(why),
            Refused::Busy(why) => Attempt::Busy(why),
        }
    }
}

/// How long, in all, a run waits for a busy service before that counts as a failure of it.
const BUSY_PATIENCE: Duration = Duration::from_secs(120);

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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
