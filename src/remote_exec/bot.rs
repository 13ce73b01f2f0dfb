//! The worker's bot: one lease executed start to end. The action and its command are read from
//! the CAS (input blobs kept in memory between actions, as they repeat), its platform checked
//! against what this worker honours, its input root materialized, its command run in fixgate's
//! own containment within its timeout, and its outputs uploaded.
//!
//! It honours the platform properties it knows: its own `--property` pairs (which must match),
//! `fixgate-interpreter` (its interpreter must have that identity) and `fixgate-network`; an
//! action asking for anything else fails with FAILED_PRECONDITION, saying what it asked.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use bazel_remote_apis::google::protobuf::Timestamp;
use fixgate_cache::{DigestFunction, GrpcConnection, RemoteDigest};
use prost::Message;

use crate::beneath::dir::Dir;
use crate::contain::Host;
use crate::environment::Environment;
use crate::pytest::command::PreparedCommand;
use crate::remote_exec::action::{INTERPRETER_PROPERTY, NETWORK_PROPERTY};
use crate::remote_exec::action_dir::{self, internal, relative, Failure};
use crate::remote_exec::bots::Lease;

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

/// The most bytes of input blobs kept in memory between actions (they repeat: the same tree).
const BLOB_CACHE_BYTES: usize = 256 << 20;

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

/// The worker's shared state: what every lease it runs uses.
pub(crate) struct Bot {
    pub(crate) config: WorkerConfig,
    /// The service: its CAS for the actions' blobs (the session loop's Bots calls too).
    pub(crate) conn: GrpcConnection,
    env: Arc<Environment>,
    /// How actions are contained on this machine.
    host: Arc<Host>,
    cache: Mutex<BlobCache>,
    /// Interpreter identities by resolved path, with the interpreter's `sys.path` folders
    /// (readable by its actions wherever they are).
    identities: Mutex<HashMap<PathBuf, (String, Vec<PathBuf>)>>,
}

impl Bot {
    pub(crate) fn new(
        config: WorkerConfig,
        conn: GrpcConnection,
        env: Arc<Environment>,
        host: Arc<Host>,
    ) -> Bot {
        Bot {
            config,
            conn,
            env,
            host,
            cache: Mutex::new(BlobCache::default()),
            identities: Mutex::new(HashMap::new()),
        }
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
    pub(crate) fn execute(
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
        let wants = check_platform(&self.config, &platform)?;
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
        action_dir::materialize(&root, input, &|digests| self.blobs(digests))?;
        let fetched = now();
        let cwd = relative(&root_path, &command.working_directory)?;
        let program = program(&command, &cwd, &self.env, &self.config.bot_id)?;
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
        let mut result =
            self.upload(action_dir::outputs(&root, &command, dir, self.function())?)?;
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
        let id = crate::remote_exec::action::interpreter_identity(&interpreter.fingerprint);
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
            // A worker's runs read nothing beyond what any run reads.
            read_paths: Vec::new(),
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
            .map_err(|e| {
                Failure::new(
                    tonic::Code::FailedPrecondition,
                    format!("worker {}: {e}", self.config.bot_id),
                )
            })?
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

    /// Uploads the blobs of `outputs` the CAS lacks; the result.
    fn upload(
        &self,
        (result, blobs): (reapi::ActionResult, HashMap<RemoteDigest, Vec<u8>>),
    ) -> std::result::Result<reapi::ActionResult, Failure> {
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

/// The program to start: a path inside the input root, an absolute path, or a name found
/// on the command's PATH (else the worker's).
fn program(
    command: &reapi::Command,
    cwd: &Path,
    env: &Environment,
    bot_id: &str,
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
        .or_else(|| env.which(Path::new(first)))
        .ok_or_else(|| {
            Failure::new(
                tonic::Code::FailedPrecondition,
                format!(
                    "worker {}: {first} is not on the command's PATH nor the worker's; \
                     install it (a remote run needs the interpreter the client has)",
                    bot_id
                ),
            )
        })
}

/// What an action's platform asks of the worker.
#[derive(Debug, Default)]
struct Wants {
    interpreter: Option<String>,
    network: bool,
}

/// What the platform asks that this worker honours; anything else is refused.
fn check_platform(
    config: &WorkerConfig,
    platform: &reapi::Platform,
) -> std::result::Result<Wants, Failure> {
    let mut wants = Wants::default();
    let mut declared: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, v) in &config.properties {
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
                        config.bot_id,
                        p.value,
                        if config.properties.is_empty() {
                            "no properties of its own".to_owned()
                        } else {
                            config
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(properties: &[(&str, &str)]) -> WorkerConfig {
        WorkerConfig {
            server: "grpc://127.0.0.1:1".into(),
            instance: String::new(),
            bot_id: "blue".into(),
            properties: properties
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            work_dir: "/w".into(),
            cache_dir: "/c".into(),
            headers: Vec::new(),
        }
    }

    fn platform(pairs: &[(&str, &str)]) -> reapi::Platform {
        reapi::Platform {
            properties: pairs
                .iter()
                .map(|(k, v)| reapi::platform::Property {
                    name: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_worker_honours_its_own_properties_the_interpreter_and_the_network_and_nothing_else() {
        let blue = config(&[("pool", "blue"), ("pool", "any")]);
        let wants = check_platform(
            &blue,
            &platform(&[
                ("pool", "any"),
                (INTERPRETER_PROPERTY, "3.11.2-abc"),
                (NETWORK_PROPERTY, "host"),
            ]),
        )
        .unwrap();
        assert_eq!(wants.interpreter.as_deref(), Some("3.11.2-abc"));
        assert!(wants.network);
        let plain = check_platform(&blue, &platform(&[])).unwrap();
        assert!(plain.interpreter.is_none() && !plain.network);
        for asked in [
            ("pool", "green"),
            ("container-image", "docker://python:3.12"),
        ] {
            let f = check_platform(&blue, &platform(&[asked])).unwrap_err();
            assert_eq!(f.code, tonic::Code::FailedPrecondition);
            assert!(
                f.message.contains(&format!("{}={:?}", asked.0, asked.1))
                    && f.message.contains("it offers pool=blue, pool=any"),
                "{}",
                f.message
            );
        }
        let bare = check_platform(&config(&[]), &platform(&[("pool", "blue")])).unwrap_err();
        assert!(
            bare.message.contains("no properties of its own"),
            "{}",
            bare.message
        );
        // Only `host` asks for the network.
        let other = check_platform(&blue, &platform(&[(NETWORK_PROPERTY, "none")]));
        assert!(other.is_err());
    }

    #[test]
    fn blobs_kept_between_actions_are_bounded_and_the_oldest_go_first() {
        let mut cache = BlobCache::default();
        let f = DigestFunction::Sha256;
        let blob = |n: u8, len: usize| -> (RemoteDigest, Arc<[u8]>) {
            let bytes = vec![n; len];
            (f.digest(&bytes), bytes.into())
        };
        // A blob larger than an eighth of the bound is never kept.
        let (big, b) = blob(0, BLOB_CACHE_BYTES / 8 + 1);
        cache.put(big, b);
        assert!(cache.get(&big).is_none());
        let quarter = BLOB_CACHE_BYTES / 8;
        let blobs: Vec<_> = (1..=9).map(|n| blob(n, quarter)).collect();
        for (d, b) in &blobs {
            cache.put(*d, b.clone());
        }
        assert!(cache.bytes <= BLOB_CACHE_BYTES);
        assert!(cache.get(&blobs[0].0).is_none(), "the oldest went");
        assert!(blobs[1..].iter().all(|(d, _)| cache.get(d).is_some()));
    }

    #[test]
    fn the_program_is_a_path_in_the_root_an_absolute_one_or_found_on_the_commands_path() {
        let bin = tempfile::tempdir().unwrap();
        std::fs::write(bin.path().join("python3.11"), "").unwrap();
        let env = Environment::from_vars(std::iter::empty(), None, None).unwrap();
        let command = |first: &str, path: Option<&Path>| reapi::Command {
            arguments: vec![first.into(), "-m".into()],
            environment_variables: path
                .map(|p| reapi::command::EnvironmentVariable {
                    name: "PATH".into(),
                    value: p.display().to_string(),
                })
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let cwd = Path::new("/w/1/root");
        let found = |c: &reapi::Command| program(c, cwd, &env, "blue");
        assert_eq!(
            found(&command("/usr/bin/python3", None)).unwrap(),
            Path::new("/usr/bin/python3")
        );
        assert_eq!(
            found(&command(".fixgate/launch.py", None)).unwrap(),
            cwd.join(".fixgate/launch.py")
        );
        assert_eq!(
            found(&command("python3.11", Some(bin.path()))).unwrap(),
            bin.path().join("python3.11")
        );
        let missing = found(&command("python9.9", Some(bin.path()))).unwrap_err();
        assert_eq!(missing.code, tonic::Code::FailedPrecondition);
        assert!(
            missing
                .message
                .starts_with("worker blue: python9.9 is not on the command's PATH"),
            "{}",
            missing.message
        );
        let none = found(&reapi::Command::default()).unwrap_err();
        assert_eq!(none.code, tonic::Code::InvalidArgument);
    }
}
