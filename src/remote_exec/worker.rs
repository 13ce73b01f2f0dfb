//! `fixgate worker`: a bot of the Remote Workers API for small setups and the tests (production
//! services bring their own workers). It takes one lease at a time, materializes the input root
//! beneath an open directory (every name one normal component, no link followed), runs the
//! command in fixgate's own containment, uploads the outputs and reports the ActionResult.
//!
//! It honours the platform properties it knows: its own `--property` pairs (which must match),
//! `fixgate-interpreter` (its interpreter must have that identity) and `fixgate-network`; an
//! action asking for anything else fails with FAILED_PRECONDITION, saying what it asked.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use bazel_remote_apis::google::protobuf::{Any, Timestamp};
use bazel_remote_apis::google::rpc::Status;
use fixgate_cache::{
    Backoff, DigestFunction, GrpcConnection, RemoteConfig, RemoteDigest, RemoteError,
};
use prost::Message;

use crate::beneath::dir::{component, Dir, Kind};
use crate::contain::Host;
use crate::environment::Environment;
use crate::error::{Error, Result};
use crate::pytest::command::PreparedCommand;
use crate::remote_exec::action::{INTERPRETER_PROPERTY, NETWORK_PROPERTY};
use crate::remote_exec::bots::{
    type_url, BotSession, BotStatus, BotsClient, CreateBotSessionRequest, Device, Lease,
    LeaseState, Property, UpdateBotSessionRequest, Worker,
};

/// How a worker is set up.
pub(crate) struct WorkerConfig {
    /// `grpc://HOST:PORT` or `grpcs://HOST:PORT`.
    pub(crate) server: String,
    pub(crate) instance: String,
    pub(crate) bot_id: String,
    /// What this worker offers, matched against actions' platforms.
    pub(crate) properties: Vec<(String, String)>,
    /// Where actions are materialized, one folder each.
    pub(crate) work_dir: PathBuf,
    /// Where interpreter fingerprints are remembered.
    pub(crate) cache_dir: PathBuf,
    pub(crate) headers: Vec<(String, String)>,
}

/// The most bytes one action's outputs may hold: a run cannot make the worker upload a disk.
const MAX_OUTPUT_BYTES: u64 = 1 << 30;
/// The most files, folders and links one action's inputs or outputs may name, and how deep
/// they may nest: a run (or a client) cannot make the worker hold a million names in memory or
/// recurse without end.
const MAX_ENTRIES: u32 = 1_000_000;
const MAX_DEPTH: u32 = 128;
/// The most bytes of input blobs kept in memory between actions (they repeat: the same tree).
const BLOB_CACHE_BYTES: usize = 256 << 20;
/// How long one long poll for work may wait.
const POLL: Duration = Duration::from_secs(20);
/// How often an idle bot asks a service that does not hold its poll open.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How long a bot waits before asking a busy service again.
const BUSY_PAUSE: Duration = Duration::from_millis(50);
/// How long a bot that cannot start its session (the service is down or restarting) waits
/// before it asks again, and for how long it asks.
const DOWN_PAUSE: Duration = Duration::from_secs(1);
const DOWN_PATIENCE: Duration = Duration::from_secs(60);

/// Why an action failed before or around its command: the status reported for the lease.
struct Failure {
    code: tonic::Code,
    message: String,
}

impl Failure {
    fn new(code: tonic::Code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

fn internal(e: impl std::fmt::Display) -> Failure {
    Failure::new(tonic::Code::Internal, e.to_string())
}

/// Blobs fetched for earlier actions, least recently used out first.
#[derive(Default)]
struct BlobCache {
    blobs: HashMap<RemoteDigest, Arc<[u8]>>,
    order: VecDeque<RemoteDigest>,
    bytes: usize,
}

impl BlobCache {
    fn get(&self, d: &RemoteDigest) -> Option<Arc<[u8]>> {
        self.blobs.get(d).cloned()
    }

    fn put(&mut self, d: RemoteDigest, b: Arc<[u8]>) {
        if b.len() > BLOB_CACHE_BYTES / 8 || self.blobs.contains_key(&d) {
            return;
        }
        self.bytes += b.len();
        self.blobs.insert(d, b);
        self.order.push_back(d);
        while self.bytes > BLOB_CACHE_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(b) = self.blobs.remove(&old) {
                self.bytes -= b.len();
            }
        }
    }
}

/// A lease being executed on its own thread.
struct Running {
    id: String,
    cancel: Arc<AtomicBool>,
    done: Arc<Mutex<Option<std::result::Result<reapi::ActionResult, Failure>>>>,
}

/// The worker's shared state.
struct Bot {
    config: WorkerConfig,
    conn: GrpcConnection,
    env: Arc<Environment>,
    /// How actions are contained on this machine.
    host: Arc<Host>,
    cache: Mutex<BlobCache>,
    /// Interpreter identities by resolved path, with the interpreter's `sys.path` folders
    /// (readable by its actions wherever they are).
    identities: Mutex<HashMap<PathBuf, (String, Vec<PathBuf>)>>,
}

/// Serves leases until `interrupted` is set; `log` gets one line per lease.
pub(crate) fn serve(
    config: WorkerConfig,
    env: Arc<Environment>,
    host: Arc<Host>,
    interrupted: Arc<AtomicBool>,
    log: &dyn Fn(&str),
) -> Result<()> {
    let mut remote = RemoteConfig::new(match config.instance.is_empty() {
        true => config.server.clone(),
        false => format!(
            "{}/{}",
            config.server.trim_end_matches('/'),
            config.instance
        ),
    });
    remote.headers = config.headers.clone();
    remote.request_timeout = POLL + Duration::from_secs(30);
    remote.connect_timeout = Duration::from_secs(10);
    let conn = open_when_free(&remote, &config.server, &interrupted)?;
    std::fs::create_dir_all(&config.work_dir)
        .map_err(|e| Error::io("create", &config.work_dir, e))?;
    let bot = Arc::new(Bot {
        config,
        conn,
        env,
        host,
        cache: Mutex::new(BlobCache::default()),
        identities: Mutex::new(HashMap::new()),
    });
    let mut bots = BotsClient::new(bot.conn.channel());
    let mut session = BotSession {
        bot_id: bot.config.bot_id.clone(),
        status: BotStatus::Ok as i32,
        worker: Some(bot.worker()),
        ..Default::default()
    };
    session = bot.create_session(&mut bots, session, &interrupted)?;
    log(&format!(
        "session {} at {}",
        session.name, bot.config.server
    ));
    let mut running: Option<Running> = None;
    let mut started = 0u64;
    let mut busy = Backoff::new(BUSY_PAUSE, BUSY_PAUSE);
    loop {
        if interrupted.load(Ordering::SeqCst) {
            if let Some(r) = &running {
                r.cancel.store(true, Ordering::SeqCst);
            }
            return Err(Error::Interrupted);
        }
        // A lease to start.
        if running.is_none() {
            if let Some(lease) = session
                .leases
                .iter()
                .find(|l| {
                    l.state == LeaseState::Active as i32 || l.state == LeaseState::Pending as i32
                })
                .cloned()
            {
                started += 1;
                log(&format!("running lease {}", lease.id));
                running = Some(bot.start(lease, started));
                for l in &mut session.leases {
                    if l.state == LeaseState::Pending as i32 {
                        l.state = LeaseState::Active as i32;
                    }
                }
            }
        }
        // A lease that finished is reported with its result.
        let mut wait = POLL;
        if let Some(r) = &running {
            let finished = lock(&r.done).take();
            match finished {
                Some(outcome) => {
                    let (status, result) = match outcome {
                        Ok(result) => {
                            log(&format!("lease {} done: exit {}", r.id, result.exit_code));
                            (Status::default(), Some(pack(&result)))
                        }
                        Err(f) => {
                            log(&format!(
                                "lease {} failed: {:?}: {}",
                                r.id, f.code, f.message
                            ));
                            (
                                Status {
                                    code: f.code as i32,
                                    message: f.message,
                                    details: Vec::new(),
                                },
                                None,
                            )
                        }
                    };
                    for l in session.leases.iter_mut().filter(|l| l.id == r.id) {
                        l.state = LeaseState::Completed as i32;
                        l.status = Some(status.clone());
                        l.result = result.clone();
                    }
                    running = None;
                }
                // Still running: a heartbeat, well within the session's expiry.
                None => wait = heartbeat(&session),
            }
        }
        let request = UpdateBotSessionRequest {
            name: session.name.clone(),
            bot_session: Some(session.clone()),
        };
        let asked = Instant::now();
        match bot
            .conn
            .block_on(bots.update_bot_session(timed(request, wait)))
        {
            Ok(s) => {
                session = s;
                // A service that answers an idle bot at once (it does not long-poll, or its
                // keepalive is too short to): poll gently.
                if running.is_none() && session.leases.is_empty() && asked.elapsed() < IDLE_POLL {
                    std::thread::sleep(IDLE_POLL);
                }
                if let Some(r) = &running {
                    // The service took the lease back (cancelled, or given to another bot).
                    if !session.leases.iter().any(|l| l.id == r.id) {
                        log(&format!("lease {} withdrawn by the service", r.id));
                        r.cancel.store(true, Ordering::SeqCst);
                        running = None;
                    }
                }
            }
            // A long poll that found no work in time: the same session, polled again (a
            // completed lease in it is reported again; the service skips what it has).
            Err(s) if s.code() == tonic::Code::DeadlineExceeded => {}
            // The service is busy (more RPCs than it takes at once): the same session, and the
            // lease running in it, asked again shortly; the lease is not given up for that.
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                busy.pause();
            }
            // The service restarted or dropped the session: a new one (a lease this worker
            // was running is the service's to hand out again).
            Err(s) => {
                log(&format!(
                    "UpdateBotSession failed ({:?}: {}); starting a new session",
                    s.code(),
                    s.message()
                ));
                if let Some(r) = running.take() {
                    r.cancel.store(true, Ordering::SeqCst);
                }
                let fresh = BotSession {
                    bot_id: bot.config.bot_id.clone(),
                    status: BotStatus::Ok as i32,
                    worker: Some(bot.worker()),
                    ..Default::default()
                };
                session = bot.create_session(&mut bots, fresh, &interrupted)?;
                log(&format!(
                    "session {} at {}",
                    session.name, bot.config.server
                ));
            }
        }
        if running.is_some() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How long to wait before the next heartbeat of a session that runs a lease: a third of what
/// is left before it expires, between 0.2 and 30 seconds.
fn heartbeat(session: &BotSession) -> Duration {
    let left = session
        .expire_time
        .as_ref()
        .and_then(|t| {
            let at = SystemTime::UNIX_EPOCH
                + Duration::new(u64::try_from(t.seconds).ok()?, u32::try_from(t.nanos).ok()?);
            at.duration_since(SystemTime::now()).ok()
        })
        .unwrap_or(Duration::from_secs(3));
    (left / 3).clamp(Duration::from_millis(200), Duration::from_secs(30))
}

/// A request with a deadline the server sees (BuildGrid long-polls for work up to it).
fn timed<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.set_timeout(timeout);
    r
}

fn pack(result: &reapi::ActionResult) -> Any {
    Any {
        type_url: type_url("build.bazel.remote.execution.v2.ActionResult"),
        value: result.encode_to_vec(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now() -> Timestamp {
    let d = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(0),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The connection, asked for again for as long as the service answers that it is busy (its
/// `GetCapabilities` refused: clients' streams hold every thread), as `CreateBotSession` is: a
/// worker that gave up there would leave the queue that keeps the service busy without one.
fn open_when_free(
    remote: &RemoteConfig,
    server: &str,
    interrupted: &AtomicBool,
) -> Result<GrpcConnection> {
    let opened = Backoff::new(BUSY_PAUSE, Duration::from_secs(1)).retry(
        || GrpcConnection::open(remote),
        |e| matches!(e, RemoteError::Busy(_)) && !interrupted.load(Ordering::SeqCst),
    );
    match opened {
        // Busy is asked again without end: busy still, it was interrupted.
        Err(RemoteError::Busy(_)) => Err(Error::Interrupted),
        other => {
            other.map_err(|e| Error::Infra(format!("fixgate worker cannot reach {server}: {e}")))
        }
    }
}

impl Bot {
    /// `CreateBotSession`, tried for a minute while the service is unreachable, and for as
    /// long as it answers that it is busy.
    fn create_session(
        &self,
        bots: &mut BotsClient,
        session: BotSession,
        interrupted: &AtomicBool,
    ) -> Result<BotSession> {
        let start = Instant::now();
        let mut busy = Backoff::new(BUSY_PAUSE, BUSY_PAUSE);
        let mut down = Backoff::new(DOWN_PAUSE, DOWN_PAUSE);
        loop {
            if interrupted.load(Ordering::SeqCst) {
                return Err(Error::Interrupted);
            }
            let request = CreateBotSessionRequest {
                parent: self.config.instance.clone(),
                bot_session: Some(session.clone()),
            };
            match self
                .conn
                .block_on(bots.create_bot_session(timed(request, POLL)))
            {
                Ok(s) => return Ok(s),
                // Busy is an answer: the service is up and its threads are taken (by clients'
                // streams too), so the bot asks again soon, for as long as it stays busy. A
                // bot that gave up there would leave the queue it serves without a worker.
                Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                    busy.pause();
                }
                Err(s)
                    if start.elapsed() < DOWN_PATIENCE
                        && s.code() != tonic::Code::InvalidArgument =>
                {
                    down.pause();
                }
                Err(s) => {
                    return Err(Error::Infra(format!(
                        "fixgate worker: CreateBotSession on {} failed: {:?}: {}",
                        self.config.server,
                        s.code(),
                        s.message()
                    )))
                }
            }
        }
    }

    /// The worker as the service sees it: one device with the declared properties.
    fn worker(&self) -> Worker {
        Worker {
            devices: vec![Device {
                handle: self.config.bot_id.clone(),
                properties: self
                    .config
                    .properties
                    .iter()
                    .map(|(key, value)| Property {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
            }],
            ..Default::default()
        }
    }

    fn start(self: &Arc<Bot>, lease: Lease, n: u64) -> Running {
        let cancel = Arc::new(AtomicBool::new(false));
        let done = Arc::new(Mutex::new(None));
        let (bot, c, d) = (self.clone(), cancel.clone(), done.clone());
        let id = lease.id.clone();
        std::thread::spawn(move || {
            let dir = bot
                .config
                .work_dir
                .join(format!("{}-{n}", std::process::id()));
            let outcome = bot.execute(&lease, &dir, &c);
            crate::sandbox::remove_tree(&dir);
            *lock(&d) = Some(outcome);
        });
        Running { id, cancel, done }
    }

    fn function(&self) -> DigestFunction {
        self.conn.function()
    }

    /// Blobs by digest, from memory or the CAS; a missing one is FAILED_PRECONDITION, as
    /// REAPI asks, so that the client uploads it again.
    fn blobs(&self, digests: &[RemoteDigest]) -> std::result::Result<Vec<Arc<[u8]>>, Failure> {
        let mut out: Vec<Option<Arc<[u8]>>> = {
            let cache = lock(&self.cache);
            digests.iter().map(|d| cache.get(d)).collect()
        };
        // Each digest once: files with the same bytes (two empty ones) share a blob.
        let mut seen = std::collections::HashSet::new();
        let wanted: Vec<RemoteDigest> = digests
            .iter()
            .zip(&out)
            .filter(|(d, b)| b.is_none() && seen.insert(**d))
            .map(|(d, _)| *d)
            .collect();
        if !wanted.is_empty() {
            let got: HashMap<RemoteDigest, Arc<[u8]>> =
                crate::remote_exec::patient(|| self.conn.get_blobs(&wanted), || ())
                    .map_err(internal)?
                    .into_iter()
                    .filter_map(|(d, b)| Some((d, Arc::from(b?))))
                    .collect();
            let mut cache = lock(&self.cache);
            for (d, slot) in digests.iter().zip(out.iter_mut()) {
                if slot.is_some() {
                    continue;
                }
                let Some(bytes) = got.get(d) else {
                    return Err(Failure::new(
                        tonic::Code::FailedPrecondition,
                        format!("the CAS lacks the blob {}/{}", d.hex(), d.size),
                    ));
                };
                cache.put(*d, bytes.clone());
                *slot = Some(bytes.clone());
            }
        }
        Ok(out.into_iter().map(|b| b.expect("filled above")).collect())
    }

    fn message<M: Message + Default>(
        &self,
        digest: Option<&reapi::Digest>,
        what: &str,
    ) -> std::result::Result<M, Failure> {
        let d = digest.ok_or_else(|| {
            Failure::new(
                tonic::Code::InvalidArgument,
                format!("the action has no {what}"),
            )
        })?;
        let d = RemoteDigest::from_proto(d)
            .map_err(|e| Failure::new(tonic::Code::InvalidArgument, e.to_string()))?;
        let bytes = self.blobs(&[d])?;
        M::decode(&bytes[0][..])
            .map_err(|e| Failure::new(tonic::Code::InvalidArgument, format!("the {what}: {e}")))
    }

    /// One lease, start to end.
    fn execute(
        &self,
        lease: &Lease,
        dir: &Path,
        cancel: &AtomicBool,
    ) -> std::result::Result<reapi::ActionResult, Failure> {
        let started = now();
        let payload = lease.payload.as_ref().ok_or_else(|| {
            Failure::new(tonic::Code::InvalidArgument, "the lease carries no action")
        })?;
        let action: reapi::Action = if payload
            .type_url
            .ends_with("/build.bazel.remote.execution.v2.Action")
        {
            reapi::Action::decode(&payload.value[..])
                .map_err(|e| Failure::new(tonic::Code::InvalidArgument, e.to_string()))?
        } else if payload
            .type_url
            .ends_with("/build.bazel.remote.execution.v2.Digest")
        {
            let d = reapi::Digest::decode(&payload.value[..])
                .map_err(|e| Failure::new(tonic::Code::InvalidArgument, e.to_string()))?;
            self.message(Some(&d), "action")?
        } else {
            return Err(Failure::new(
                tonic::Code::InvalidArgument,
                format!("the lease carries a {}, not an action", payload.type_url),
            ));
        };
        let command: reapi::Command = self.message(action.command_digest.as_ref(), "command")?;
        #[expect(
            deprecated,
            reason = "servers before REAPI 2.2 send the platform in the Command"
        )]
        let platform = action
            .platform
            .clone()
            .or_else(|| command.platform.clone())
            .unwrap_or_default();
        let wants = self.check_platform(&platform)?;
        std::fs::create_dir_all(dir).map_err(internal)?;
        let root_path = dir.join("root");
        std::fs::create_dir(&root_path).map_err(internal)?;
        let root = Dir::open(&root_path).map_err(internal)?;
        let input = action.input_root_digest.as_ref().ok_or_else(|| {
            Failure::new(tonic::Code::InvalidArgument, "the action has no input root")
        })?;
        let input = RemoteDigest::from_proto(input)
            .map_err(|e| Failure::new(tonic::Code::InvalidArgument, e.to_string()))?;
        let fetch_started = now();
        self.materialize(&root, input)?;
        let fetched = now();
        let cwd = relative(&root_path, &command.working_directory)?;
        let program = self.program(&command, &cwd)?;
        if let Some(want) = &wants.interpreter {
            let have = self.identity(&program)?;
            if &have != want {
                return Err(Failure::new(
                    tonic::Code::FailedPrecondition,
                    format!(
                        "worker {}: {} is the interpreter {have}, the action needs {want}: give \
                         the worker the interpreter and the suite's dependencies the client has",
                        self.config.bot_id,
                        program.display()
                    ),
                ));
            }
        }
        let timeout = action
            .timeout
            .as_ref()
            .map(|t| Duration::from_secs(u64::try_from(t.seconds).unwrap_or(0)))
            .filter(|t| !t.is_zero())
            .unwrap_or(crate::remote_exec::action::MAX_ACTION_TIMEOUT);
        let execution_started = now();
        let (exit_code, timed_out) = self.run_command(
            &command,
            &program,
            dir,
            &cwd,
            wants.network,
            timeout,
            cancel,
        )?;
        let executed = now();
        let mut result = self.outputs(&root, &command, dir)?;
        let uploaded = now();
        result.exit_code = exit_code;
        result.execution_metadata = Some(reapi::ExecutedActionMetadata {
            worker: self.config.bot_id.clone(),
            worker_start_timestamp: Some(started),
            input_fetch_start_timestamp: Some(fetch_started),
            input_fetch_completed_timestamp: Some(fetched),
            execution_start_timestamp: Some(execution_started),
            execution_completed_timestamp: Some(executed),
            output_upload_start_timestamp: Some(executed),
            output_upload_completed_timestamp: Some(uploaded),
            worker_completed_timestamp: Some(uploaded),
            ..Default::default()
        });
        if timed_out {
            return Err(Failure::new(
                tonic::Code::DeadlineExceeded,
                format!(
                    "worker {}: the action ran past its timeout of {}s",
                    self.config.bot_id,
                    timeout.as_secs()
                ),
            ));
        }
        Ok(result)
    }

    /// What the platform asks that this worker honours; anything else is refused.
    fn check_platform(&self, platform: &reapi::Platform) -> std::result::Result<Wants, Failure> {
        let mut wants = Wants::default();
        let mut declared: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (k, v) in &self.config.properties {
            declared.entry(k).or_default().push(v);
        }
        for p in &platform.properties {
            match p.name.as_str() {
                INTERPRETER_PROPERTY => wants.interpreter = Some(p.value.clone()),
                NETWORK_PROPERTY if p.value == "host" => wants.network = true,
                name if declared
                    .get(name)
                    .is_some_and(|vs| vs.contains(&p.value.as_str())) => {}
                name => {
                    return Err(Failure::new(
                        tonic::Code::FailedPrecondition,
                        format!(
                            "worker {} cannot honour the platform property {name}={:?} (it \
                             offers {}, {INTERPRETER_PROPERTY} and {NETWORK_PROPERTY}=host); a \
                             production service's workers honour container images and pools",
                            self.config.bot_id,
                            p.value,
                            if self.config.properties.is_empty() {
                                "no properties of its own".to_owned()
                            } else {
                                self.config
                                    .properties
                                    .iter()
                                    .map(|(k, v)| format!("{k}={v}"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        ),
                    ))
                }
            }
        }
        Ok(wants)
    }

    /// Writes the input root below `root`, every directory's names checked.
    fn materialize(&self, root: &Dir, digest: RemoteDigest) -> std::result::Result<(), Failure> {
        let bad = |e: String| Failure::new(tonic::Code::InvalidArgument, e);
        // Breadth first, one batch of blobs per level.
        let mut level: Vec<(Dir, RemoteDigest)> =
            vec![(root.try_clone().map_err(internal)?, digest)];
        let mut total = 0u64;
        let mut entries = 0u64;
        let mut depth = 0u32;
        while !level.is_empty() {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(bad(format!(
                    "the input root nests deeper than {MAX_DEPTH} folders"
                )));
            }
            let digests: Vec<RemoteDigest> = level.iter().map(|(_, d)| *d).collect();
            let blobs = self.blobs(&digests)?;
            let mut next = Vec::new();
            let mut files: Vec<(usize, String, RemoteDigest, bool)> = Vec::new();
            let dirs: Vec<Dir> = level.into_iter().map(|(d, _)| d).collect();
            for (i, bytes) in blobs.iter().enumerate() {
                let directory = reapi::Directory::decode(&bytes[..])
                    .map_err(|e| bad(format!("a Directory does not decode: {e}")))?;
                // Counted before anything is made: one Directory named twice is two folders.
                entries += (directory.files.len()
                    + directory.symlinks.len()
                    + directory.directories.len()) as u64;
                if entries > u64::from(MAX_ENTRIES) {
                    return Err(bad(format!(
                        "the input root names more than {MAX_ENTRIES} entries"
                    )));
                }
                for f in &directory.files {
                    name(&f.name)?;
                    let d = f
                        .digest
                        .as_ref()
                        .ok_or_else(|| bad(format!("{} has no digest", f.name)))
                        .and_then(|d| {
                            RemoteDigest::from_proto(d).map_err(|e| bad(e.to_string()))
                        })?;
                    total += d.size;
                    files.push((i, f.name.clone(), d, f.is_executable));
                }
                for l in &directory.symlinks {
                    name(&l.name)?;
                    dirs[i]
                        .symlink(OsStr::new(&l.name), l.target.as_bytes())
                        .map_err(|e| bad(format!("the link {}: {e}", l.name)))?;
                }
                for d in &directory.directories {
                    name(&d.name)?;
                    let digest = d
                        .digest
                        .as_ref()
                        .ok_or_else(|| bad(format!("{} has no digest", d.name)))
                        .and_then(|d| {
                            RemoteDigest::from_proto(d).map_err(|e| bad(e.to_string()))
                        })?;
                    let child = dirs[i]
                        .create_dir(OsStr::new(&d.name))
                        .map_err(|e| bad(format!("the directory {}: {e}", d.name)))?;
                    next.push((child, digest));
                }
            }
            if total > 16 * MAX_OUTPUT_BYTES {
                return Err(bad(format!("the input root holds {total} bytes, too many")));
            }
            let contents = self.blobs(&files.iter().map(|f| f.2).collect::<Vec<_>>())?;
            for ((i, file, _, executable), bytes) in files.iter().zip(contents) {
                dirs[*i]
                    .write_file(OsStr::new(file), &bytes, *executable)
                    .map_err(|e| bad(format!("the file {file}: {e}")))?;
            }
            level = next;
        }
        Ok(())
    }

    /// The program to start: a path inside the input root, an absolute path, or a name found
    /// on the command's PATH (else the worker's).
    fn program(
        &self,
        command: &reapi::Command,
        cwd: &Path,
    ) -> std::result::Result<PathBuf, Failure> {
        let first = command.arguments.first().ok_or_else(|| {
            Failure::new(tonic::Code::InvalidArgument, "the command has no arguments")
        })?;
        if first.starts_with('/') {
            return Ok(PathBuf::from(first));
        }
        if first.contains('/') {
            return Ok(cwd.join(first));
        }
        let path = command
            .environment_variables
            .iter()
            .find(|v| v.name == "PATH")
            .map(|v| std::env::split_paths(&v.value).collect::<Vec<_>>())
            .unwrap_or_default();
        path.iter()
            .map(|d| d.join(first))
            .find(|p| p.is_file())
            .or_else(|| self.env.which(Path::new(first)))
            .ok_or_else(|| {
                Failure::new(
                    tonic::Code::FailedPrecondition,
                    format!(
                        "worker {}: {first} is not on the command's PATH nor the worker's; \
                         install it (a remote run needs the interpreter the client has)",
                        self.config.bot_id
                    ),
                )
            })
    }

    /// The identity of the interpreter at `program`, probed once per path.
    fn identity(&self, program: &Path) -> std::result::Result<String, Failure> {
        if let Some((id, _)) = lock(&self.identities).get(program) {
            return Ok(id.clone());
        }
        let interpreter =
            crate::pytest::interpreter::probe_cached(program, &self.config.cache_dir, &self.env)
                .map_err(|e| {
                    Failure::new(
                        tonic::Code::FailedPrecondition,
                        format!("worker {}: {e}", self.config.bot_id),
                    )
                })?;
        let id = crate::remote_exec::client::interpreter_identity(&interpreter.fingerprint);
        lock(&self.identities).insert(
            program.to_path_buf(),
            (id.clone(), interpreter.sys_path.clone()),
        );
        Ok(id)
    }

    /// Runs the command contained; its exit code (128 + the signal that killed it), and
    /// whether the timeout killed it.
    #[expect(
        clippy::too_many_arguments,
        reason = "one call site, each a different part"
    )]
    fn run_command(
        &self,
        command: &reapi::Command,
        program: &Path,
        dir: &Path,
        cwd: &Path,
        network: bool,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> std::result::Result<(i32, bool), Failure> {
        let stdout = std::fs::File::create(dir.join("stdout")).map_err(internal)?;
        let stderr = std::fs::File::create(dir.join("stderr")).map_err(internal)?;
        // Contained as a local run is: the action's folder writable, the worker's other
        // actions hidden.
        let prepared = PreparedCommand {
            program: program.to_path_buf(),
            args: command.arguments.iter().skip(1).cloned().collect(),
            env: command
                .environment_variables
                .iter()
                .map(|v| (v.name.clone(), OsString::from(&v.value)))
                .collect(),
            cwd: cwd.to_path_buf(),
            sandbox: dir.to_path_buf(),
            plugin_dir: dir.to_path_buf(),
            rewrite_cache: dir.join("pyc"),
            origin_root: self.config.work_dir.clone(),
            interpreter: vec![program.to_path_buf()],
            // Known once the interpreter was identified (an action that names it).
            libraries: lock(&self.identities)
                .get(program)
                .map(|(_, l)| l.clone())
                .unwrap_or_default(),
            allow_network: network,
            // The worker's own folder of fingerprints is hidden from the action.
            cache_dir: self.config.cache_dir.clone(),
            // The defaults a local run has, for one action at a time on this machine.
            limits: crate::limits::Limits::resolve(
                &Default::default(),
                &Default::default(),
                1,
                dir,
            ),
        };
        let mut child = prepared
            .command(&self.host)
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| {
                Failure::new(
                    tonic::Code::FailedPrecondition,
                    format!(
                        "worker {}: cannot start {}: {e}",
                        self.config.bot_id,
                        program.display()
                    ),
                )
            })?;
        let start = Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = child.try_wait().map_err(internal)? {
                break s;
            }
            if cancel.load(Ordering::SeqCst) || (!timed_out && start.elapsed() > timeout) {
                timed_out = !cancel.load(Ordering::SeqCst);
                // SAFETY: a signal to the child's own process group.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.kill();
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if cancel.load(Ordering::SeqCst) {
            return Err(Failure::new(
                tonic::Code::Cancelled,
                "the lease was withdrawn",
            ));
        }
        use std::os::unix::process::ExitStatusExt;
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        Ok((code, timed_out))
    }

    /// Uploads the declared outputs, stdout and stderr; the result without its exit code.
    fn outputs(
        &self,
        root: &Dir,
        command: &reapi::Command,
        dir: &Path,
    ) -> std::result::Result<reapi::ActionResult, Failure> {
        let f = self.function();
        let mut blobs: HashMap<RemoteDigest, Vec<u8>> = HashMap::new();
        let mut result = reapi::ActionResult::default();
        let mut budget = Allowance::new();
        let mut wd = root.try_clone().map_err(internal)?;
        for part in command
            .working_directory
            .split('/')
            .filter(|p| !p.is_empty())
        {
            name(part)?;
            wd = wd.open_dir(OsStr::new(part)).map_err(internal)?;
        }
        #[expect(deprecated, reason = "clients before REAPI 2.1 name outputs this way")]
        let declared: Vec<&String> = if command.output_paths.is_empty() {
            command
                .output_files
                .iter()
                .chain(&command.output_directories)
                .collect()
        } else {
            command.output_paths.iter().collect()
        };
        for path in declared {
            let parts: Vec<&str> = path.split('/').collect();
            let (leaf, parents) = parts.split_last().expect("split gives a part");
            let mut at = wd.try_clone().map_err(internal)?;
            let mut reachable = true;
            for p in parents {
                name(p)?;
                match at.open_dir(OsStr::new(p)) {
                    Ok(d) => at = d,
                    Err(_) => {
                        reachable = false;
                        break;
                    }
                }
            }
            name(leaf)?;
            if !reachable {
                continue;
            }
            match at.kind(OsStr::new(leaf)).map_err(internal)? {
                Some(Kind::File { executable }) => {
                    budget.entry(0)?;
                    let bytes = read_bounded(&at, leaf, &mut budget)?;
                    let d = f.digest(&bytes);
                    blobs.insert(d, bytes);
                    result.output_files.push(reapi::OutputFile {
                        path: path.clone(),
                        digest: Some(d.to_proto()),
                        is_executable: executable,
                        ..Default::default()
                    });
                }
                Some(Kind::Dir) => {
                    let sub = at.open_dir(OsStr::new(leaf)).map_err(internal)?;
                    let mut children = Vec::new();
                    budget.entry(0)?;
                    let top = tree_of(f, &sub, &mut blobs, &mut children, &mut budget, 1)?;
                    let tree = reapi::Tree {
                        root: Some(top),
                        children,
                    }
                    .encode_to_vec();
                    let d = f.digest(&tree);
                    blobs.insert(d, tree);
                    result.output_directories.push(reapi::OutputDirectory {
                        path: path.clone(),
                        tree_digest: Some(d.to_proto()),
                        ..Default::default()
                    });
                }
                // A link or nothing: REAPI leaves out what is not a file or a directory.
                _ => {}
            }
        }
        for (which, slot) in [
            ("stdout", &mut result.stdout_digest),
            ("stderr", &mut result.stderr_digest),
        ] {
            let mut bytes = Vec::new();
            std::fs::File::open(dir.join(which))
                .and_then(|f| f.take(1 << 20).read_to_end(&mut bytes))
                .map_err(internal)?;
            let d = f.digest(&bytes);
            blobs.insert(d, bytes);
            *slot = Some(d.to_proto());
        }
        let digests: Vec<RemoteDigest> = blobs.keys().copied().collect();
        let missing = crate::remote_exec::patient(|| self.conn.find_missing(&digests), || ())
            .map_err(internal)?;
        let upload: Vec<(RemoteDigest, &[u8])> = missing
            .iter()
            .filter_map(|d| blobs.get(d).map(|b| (*d, &b[..])))
            .collect();
        crate::remote_exec::patient(|| self.conn.put_blobs(&upload), || ()).map_err(internal)?;
        Ok(result)
    }
}

/// What an action's platform asks of the worker.
#[derive(Default)]
struct Wants {
    interpreter: Option<String>,
    network: bool,
}

fn name(n: &str) -> std::result::Result<(), Failure> {
    component(n.as_bytes())
        .map(|_| ())
        .map_err(|e| Failure::new(tonic::Code::InvalidArgument, format!("the input names {e}")))
}

/// `rel` (from the command) below `base`, each component checked.
fn relative(base: &Path, rel: &str) -> std::result::Result<PathBuf, Failure> {
    let mut out = base.to_path_buf();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        name(part)?;
        out.push(part);
    }
    Ok(out)
}

/// What an action's outputs may still take.
struct Allowance {
    bytes: u64,
    entries: u32,
}

impl Allowance {
    fn new() -> Allowance {
        Allowance {
            bytes: MAX_OUTPUT_BYTES,
            entries: MAX_ENTRIES,
        }
    }

    /// One more entry, `depth` folders below an output folder.
    fn entry(&mut self, depth: u32) -> std::result::Result<(), Failure> {
        if self.entries == 0 || depth > MAX_DEPTH {
            return Err(Failure::new(
                tonic::Code::ResourceExhausted,
                format!(
                    "the action's outputs name more than {MAX_ENTRIES} entries or nest deeper \
                     than {MAX_DEPTH} folders"
                ),
            ));
        }
        self.entries -= 1;
        Ok(())
    }
}

fn read_bounded(
    dir: &Dir,
    leaf: &str,
    budget: &mut Allowance,
) -> std::result::Result<Vec<u8>, Failure> {
    let file = dir.open_file(OsStr::new(leaf)).map_err(internal)?;
    let mut bytes = Vec::new();
    file.take(budget.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(internal)?;
    if bytes.len() as u64 > budget.bytes {
        return Err(Failure::new(
            tonic::Code::ResourceExhausted,
            format!("the action's outputs exceed {MAX_OUTPUT_BYTES} bytes"),
        ));
    }
    budget.bytes -= bytes.len() as u64;
    Ok(bytes)
}

/// The `Directory` of `dir` (its subdirectories' go to `children`), blobs into `blobs`.
fn tree_of(
    f: DigestFunction,
    dir: &Dir,
    blobs: &mut HashMap<RemoteDigest, Vec<u8>>,
    children: &mut Vec<reapi::Directory>,
    budget: &mut Allowance,
    depth: u32,
) -> std::result::Result<reapi::Directory, Failure> {
    let mut out = reapi::Directory::default();
    for n in dir.names().map_err(internal)? {
        let Some(text) = n.to_str() else { continue };
        budget.entry(depth)?;
        match dir.kind(&n).map_err(internal)? {
            Some(Kind::File { executable }) => {
                let bytes = read_bounded(dir, text, budget)?;
                let d = f.digest(&bytes);
                blobs.insert(d, bytes);
                out.files.push(reapi::FileNode {
                    name: text.to_owned(),
                    digest: Some(d.to_proto()),
                    is_executable: executable,
                    ..Default::default()
                });
            }
            Some(Kind::Dir) => {
                let sub = dir.open_dir(&n).map_err(internal)?;
                let child = tree_of(f, &sub, blobs, children, budget, depth + 1)?;
                let d = f.digest(&child.encode_to_vec());
                children.push(child);
                out.directories.push(reapi::DirectoryNode {
                    name: text.to_owned(),
                    digest: Some(d.to_proto()),
                });
            }
            Some(Kind::Link) => {
                let target = dir.read_link(&n).map_err(internal)?;
                out.symlinks.push(reapi::SymlinkNode {
                    name: text.to_owned(),
                    target: String::from_utf8_lossy(&target).into_owned(),
                    ..Default::default()
                });
            }
            _ => {}
        }
    }
    Ok(out)
}
