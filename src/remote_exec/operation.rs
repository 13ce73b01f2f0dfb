//! One action's `Execute` call, followed to its operation's end: the stream held a few seconds
//! at a time and the operation asked for again by name (`WaitExecution`), so that the
//! service's threads also serve its workers; a lost worker (the action back in the queue) and
//! an operation followed for too long are failures of the try, a busy service is asked again.

use std::time::{Duration, Instant};

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use bazel_remote_apis::google::longrunning::{operation, Operation};
use fixgate_cache::{Backoff, DigestFunction, GrpcConnection, RemoteDigest};
use indicatif::ProgressBar;
use prost::Message;

use crate::remote_exec::action;

/// Why a request to the service gave no answer: it failed, or the service was busy.
pub(crate) enum Refused {
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
/// The pauses between asks of a busy service: doubling from the first to the last.
pub(crate) const BUSY_FIRST_PAUSE: Duration = Duration::from_millis(100);
pub(crate) const BUSY_LAST_PAUSE: Duration = Duration::from_secs(5);
/// The pauses before an operation whose stream broke is asked for again by name (five times at
/// most): doubling from the first to the last.
const REJOIN_FIRST_PAUSE: Duration = Duration::from_millis(200);
const REJOIN_LAST_PAUSE: Duration = Duration::from_secs(1);

/// An action's `Execute` on a service.
pub(crate) struct Execution<'a> {
    /// The connection for `Execute` streams (no request timeout: they last as long as the
    /// action).
    pub(crate) exec: &'a GrpcConnection,
    pub(crate) function: DigestFunction,
    /// Re-execute even when the service has an identical action's result.
    pub(crate) skip_cache_lookup: bool,
    /// Hears each busy answer while the operation runs.
    pub(crate) on_busy: &'a dyn Fn(),
}

impl Execution<'_> {
    /// `Execute`, followed to the operation's end (through `WaitExecution` when the stream
    /// breaks): the service's response, or why there is none.
    pub(crate) fn execute(
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
                    (self.on_busy)();
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
