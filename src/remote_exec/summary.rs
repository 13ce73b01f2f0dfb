//! What the remote executor did, for the report: where each run executed, how many actions ran
//! or came from the service's cache, what was retried or answered busy, what was uploaded, and
//! where the time of the executed actions went.

use std::collections::BTreeMap;

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use serde::Serialize;

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
    /// Adds the worker's stages of one executed action, from its result's metadata.
    pub(crate) fn add_worker(&mut self, m: &reapi::ExecutedActionMetadata) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use bazel_remote_apis::google::protobuf::Timestamp;

    fn at(seconds: i64, nanos: i32) -> Option<Timestamp> {
        Some(Timestamp { seconds, nanos })
    }

    #[test]
    fn the_workers_stages_add_up_over_actions_and_a_missing_or_backward_one_counts_nothing() {
        let mut stages = Stages::default();
        let m = reapi::ExecutedActionMetadata {
            worker_start_timestamp: at(10, 0),
            input_fetch_start_timestamp: at(10, 0),
            input_fetch_completed_timestamp: at(10, 500_000_000),
            execution_start_timestamp: at(10, 500_000_000),
            execution_completed_timestamp: at(12, 0),
            output_upload_start_timestamp: at(12, 0),
            // Backward: the worker's clock is its own.
            output_upload_completed_timestamp: at(11, 0),
            worker_completed_timestamp: None,
            ..Default::default()
        };
        stages.add_worker(&m);
        stages.add_worker(&m);
        assert_eq!(stages.worker_input_fetch_seconds, 1.0);
        assert_eq!(stages.worker_execution_seconds, 3.0);
        assert_eq!(stages.worker_output_upload_seconds, 0.0);
        assert_eq!(stages.worker_total_seconds, 0.0);
    }
}
