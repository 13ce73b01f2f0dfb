//! `fixgate worker`: a bot of the Remote Workers API for small setups and the tests (production
//! services bring their own workers). Here is its session with the service: it takes one lease
//! at a time, runs it on a thread of its own (the bot: `bot.rs`, which materializes the input
//! root beneath an open directory, runs the command in fixgate's own containment and uploads
//! the outputs), heartbeats while it runs, and reports its ActionResult; a service that is busy
//! is asked again, one that restarted or dropped the session gets a new one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use bazel_remote_apis::google::protobuf::Any;
use bazel_remote_apis::google::rpc::Status;
use fixgate_cache::{Backoff, GrpcConnection, RemoteConfig, RemoteError};
use prost::Message;

use crate::contain::Host;
use crate::environment::Environment;
use crate::error::{Error, Result};
use crate::remote_exec::action_dir::Failure;
use crate::remote_exec::bot::{lock, Bot};
use crate::remote_exec::bots::{
    type_url, BotSession, BotStatus, BotsClient, CreateBotSessionRequest, Device, Lease,
    LeaseState, Property, UpdateBotSessionRequest, Worker,
};

/// How a worker is set up (the bot's: it is what runs the leases).
pub(crate) use crate::remote_exec::bot::WorkerConfig;

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

/// A lease being executed on its own thread.
struct Running {
    id: String,
    cancel: Arc<AtomicBool>,
    done: Arc<Mutex<Option<std::result::Result<reapi::ActionResult, Failure>>>>,
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
    let bot = Arc::new(Bot::new(config, conn, env, host));
    let mut bots = BotsClient::new(bot.conn.channel());
    let mut session = BotSession {
        bot_id: bot.config.bot_id.clone(),
        status: BotStatus::Ok as i32,
        worker: Some(worker(&bot.config)),
        ..Default::default()
    };
    session = create_session(&bot, &mut bots, session, &interrupted)?;
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
                running = Some(start(&bot, lease, started));
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
                    worker: Some(worker(&bot.config)),
                    ..Default::default()
                };
                session = create_session(&bot, &mut bots, fresh, &interrupted)?;
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

/// `CreateBotSession`, tried for a minute while the service is unreachable, and for as
/// long as it answers that it is busy.
fn create_session(
    bot: &Bot,
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
            parent: bot.config.instance.clone(),
            bot_session: Some(session.clone()),
        };
        match bot
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
                if start.elapsed() < DOWN_PATIENCE && s.code() != tonic::Code::InvalidArgument =>
            {
                down.pause();
            }
            Err(s) => {
                return Err(Error::Infra(format!(
                    "fixgate worker: CreateBotSession on {} failed: {:?}: {}",
                    bot.config.server,
                    s.code(),
                    s.message()
                )))
            }
        }
    }
}

/// The worker as the service sees it: one device with the declared properties.
fn worker(config: &WorkerConfig) -> Worker {
    Worker {
        devices: vec![Device {
            handle: config.bot_id.clone(),
            properties: config
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

/// Runs `lease` (the bot's `n`th) on a thread of its own.
fn start(bot: &Arc<Bot>, lease: Lease, n: u64) -> Running {
    let cancel = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Mutex::new(None));
    let (bot, c, d) = (bot.clone(), cancel.clone(), done.clone());
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

#[cfg(test)]
mod tests {
    use bazel_remote_apis::google::protobuf::Timestamp;

    use super::*;

    fn expiring_in(secs: i64) -> BotSession {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        BotSession {
            expire_time: Some(Timestamp {
                seconds: now + secs,
                nanos: 0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_running_leases_heartbeat_comes_a_third_of_the_way_to_the_sessions_expiry() {
        let beat = heartbeat(&expiring_in(30));
        assert!(
            beat > Duration::from_secs(9) && beat <= Duration::from_secs(10),
            "{beat:?}"
        );
        assert_eq!(heartbeat(&expiring_in(3600)), Duration::from_secs(30));
        let soon = heartbeat(&expiring_in(1));
        assert!(
            soon >= Duration::from_millis(200) && soon <= Duration::from_millis(334),
            "{soon:?}"
        );
        // Expired, or a service that sends no expiry: as if three seconds were left.
        assert_eq!(heartbeat(&expiring_in(-5)), Duration::from_secs(1));
        assert_eq!(heartbeat(&BotSession::default()), Duration::from_secs(1));
    }

    #[test]
    fn the_worker_offers_one_device_with_its_properties() {
        let config = WorkerConfig {
            server: "grpc://127.0.0.1:1".into(),
            instance: String::new(),
            bot_id: "green".into(),
            properties: vec![("pool".into(), "green".into())],
            work_dir: "/w".into(),
            cache_dir: "/c".into(),
            headers: Vec::new(),
        };
        let w = worker(&config);
        assert_eq!(w.devices.len(), 1);
        assert_eq!(w.devices[0].handle, "green");
        let props: Vec<(&str, &str)> = w.devices[0]
            .properties
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(props, [("pool", "green")]);
    }

    #[test]
    fn a_result_is_packed_as_the_action_result_it_is() {
        let result = reapi::ActionResult {
            exit_code: 3,
            ..Default::default()
        };
        let any = pack(&result);
        assert!(any
            .type_url
            .ends_with("/build.bazel.remote.execution.v2.ActionResult"));
        assert_eq!(reapi::ActionResult::decode(&any.value[..]).unwrap(), result);
    }
}
