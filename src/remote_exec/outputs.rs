//! A remote run's outputs read back: the launcher's `out/` directory (its `run.json` and each
//! pytest process's event stream and output) fetched from the CAS into a temporary folder, as
//! the recorded run the driver reads with the same code that follows a local run.

use std::collections::HashMap;
use std::path::Path;

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use fixgate_cache::RemoteDigest;
use prost::Message;
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::pytest::result::RunResult;
use crate::pytest::run::{Recorded, RecordedProcess};
use crate::remote_exec::action;

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

/// Why a run's outputs did not read back.
pub(crate) enum ReadBack {
    /// The action's outputs are not a launcher's: the service's or the worker's doing.
    Failed(String),
    /// Reading them back failed here, or the run itself is an error (a collection error).
    Run(Error),
}

/// The blobs of some digests, in order (a missing one is an error).
pub(crate) type Fetch<'a> =
    dyn Fn(&[RemoteDigest]) -> std::result::Result<Vec<Vec<u8>>, String> + 'a;

/// The run an action's `result` holds: its outputs fetched with `fetch` into a temporary folder
/// under `temp_dir`, then read by `replay` (the driver, reading the recorded processes).
pub(crate) fn read_back(
    fetch: &Fetch,
    temp_dir: &Path,
    result: &reapi::ActionResult,
    replay: impl FnOnce(Recorded) -> Result<RunResult>,
) -> std::result::Result<RunResult, ReadBack> {
    let failed = |why: String| ReadBack::Failed(why);
    let stderr = || {
        result
            .stderr_digest
            .as_ref()
            .and_then(|d| RemoteDigest::from_proto(d).ok())
            .and_then(|d| fetch(&[d]).ok())
            .and_then(|mut v| v.pop())
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
    let tree = fetch(&[out]).map_err(failed)?;
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
    let run_file = fetch(&[digest_of(action::RUN_FILE)?]).map_err(failed)?;
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
    let blobs = fetch(&wanted).map_err(failed)?;
    let dir = tempfile::Builder::new()
        .prefix("fixgate-remote-")
        .tempdir_in(temp_dir)
        .map_err(|e| ReadBack::Run(Error::io("create", temp_dir, e)))?;
    let mut processes = Vec::new();
    for (i, p) in run_file.processes.iter().enumerate() {
        let events = dir.path().join(format!("events-{i}.jsonl"));
        let log = dir.path().join(format!("pytest-{i}.log"));
        for (path, bytes) in [(&events, &blobs[2 * i]), (&log, &blobs[2 * i + 1])] {
            std::fs::write(path, bytes).map_err(|e| ReadBack::Run(Error::io("write", path, e)))?;
        }
        processes.push(RecordedProcess {
            events,
            log,
            status: exit_status(p.status),
            timed_out: p.timed_out,
        });
    }
    replay(Recorded {
        root: run_file.root.into(),
        processes,
    })
    .map_err(ReadBack::Run)
}

/// The exit status the launcher recorded: a code, or minus the signal that ended the process.
pub(crate) fn exit_status(status: Option<i32>) -> std::process::ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s < 0 => std::process::ExitStatus::from_raw(-s & 0x7f),
        Some(s) => std::process::ExitStatus::from_raw((s & 0xff) << 8),
        None => std::process::ExitStatus::from_raw(libc::SIGKILL),
    }
}

/// The last lines of what a process wrote, for a message.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(20)..];
    match tail.is_empty() {
        true => String::new(),
        false => format!("; it said:\n{}", tail.join("\n")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use fixgate_cache::DigestFunction;

    use super::*;

    /// What the service holds, and an action result whose `out/` holds `files`.
    struct Service {
        blobs: HashMap<RemoteDigest, Vec<u8>>,
    }

    impl Service {
        fn put(&mut self, bytes: &[u8]) -> RemoteDigest {
            let d = DigestFunction::Sha256.digest(bytes);
            self.blobs.insert(d, bytes.to_vec());
            d
        }

        fn result(&mut self, files: &[(&str, &[u8])]) -> reapi::ActionResult {
            let files = files
                .iter()
                .map(|(name, bytes)| reapi::FileNode {
                    name: name.to_string(),
                    digest: Some(self.put(bytes).to_proto()),
                    ..Default::default()
                })
                .collect();
            let tree = reapi::Tree {
                root: Some(reapi::Directory {
                    files,
                    ..Default::default()
                }),
                children: Vec::new(),
            };
            let tree = self.put(&tree.encode_to_vec());
            reapi::ActionResult {
                output_directories: vec![reapi::OutputDirectory {
                    path: action::OUT_DIR.into(),
                    tree_digest: Some(tree.to_proto()),
                    ..Default::default()
                }],
                stderr_digest: Some(self.put(b"line 1\nthe launcher's last words\n").to_proto()),
                ..Default::default()
            }
        }

        fn fetch(&self, digests: &[RemoteDigest]) -> std::result::Result<Vec<Vec<u8>>, String> {
            digests
                .iter()
                .map(|d| {
                    self.blobs
                        .get(d)
                        .cloned()
                        .ok_or(format!("lost {}", d.hex()))
                })
                .collect()
        }
    }

    fn service() -> Service {
        Service {
            blobs: HashMap::new(),
        }
    }

    /// One recorded process as the test sees it: (events, log, status, timed out).
    type Seen = (String, String, Option<i32>, bool);

    /// Reads `result` back; the recorded run's processes.
    fn read(
        service: &Service,
        result: &reapi::ActionResult,
    ) -> std::result::Result<Vec<Seen>, String> {
        let temp = tempfile::tempdir().unwrap();
        let mut seen = Vec::new();
        let read = read_back(&|d| service.fetch(d), temp.path(), result, |recorded| {
            assert_eq!(recorded.root, Path::new("/work/action-1/root"));
            for p in recorded.processes {
                seen.push((
                    std::fs::read_to_string(&p.events).unwrap(),
                    std::fs::read_to_string(&p.log).unwrap(),
                    p.status.code(),
                    p.timed_out,
                ));
            }
            Ok(RunResult::empty(Vec::new()))
        });
        match read {
            Ok(_) => Ok(seen),
            Err(ReadBack::Failed(why)) => Err(why),
            Err(ReadBack::Run(e)) => panic!("{e}"),
        }
    }

    const RUN_FILE: &[u8] = br#"{"version": 1, "root": "/work/action-1/root", "processes": [
        {"events": "events-0.jsonl", "log": "pytest-0.log", "status": 0, "timed_out": false},
        {"events": "events-1.jsonl", "log": "pytest-1.log", "status": -9, "timed_out": true}]}"#;

    #[test]
    fn each_process_of_the_launcher_comes_back_with_its_stream_output_and_end() {
        let mut s = service();
        let result = s.result(&[
            ("run.json", RUN_FILE),
            ("events-0.jsonl", b"{\"event\":\"start\"}\n"),
            ("pytest-0.log", b"first"),
            ("events-1.jsonl", b""),
            ("pytest-1.log", b"second"),
        ]);
        let processes = read(&s, &result).unwrap();
        assert_eq!(
            processes,
            [
                (
                    "{\"event\":\"start\"}\n".into(),
                    "first".into(),
                    Some(0),
                    false
                ),
                (String::new(), "second".into(), None, true),
            ]
        );
    }

    #[test]
    fn outputs_that_are_not_a_launchers_are_the_services_failure_with_the_launchers_words() {
        let mut s = service();
        let mut result = s.result(&[("run.json", RUN_FILE)]);
        let why = read(&s, &result).unwrap_err();
        assert!(
            why.starts_with("the run's outputs lack events-0.jsonl; it said:\nline 1\n"),
            "{why}"
        );
        result.exit_code = 2;
        let why = read(&s, &result).unwrap_err();
        assert!(
            why.starts_with("the launcher exited with status 2"),
            "{why}"
        );
        assert!(why.ends_with("the launcher's last words"), "{why}");
        let newer = s.result(&[(
            "run.json",
            br#"{"version": 2, "root": "/", "processes": []}"#,
        )]);
        let why = read(&s, &newer).unwrap_err();
        assert_eq!(why, "run.json has version 2, this fixgate reads 1");
        let none = reapi::ActionResult::default();
        assert_eq!(
            read(&s, &none).unwrap_err(),
            "the result has no out directory"
        );
    }

    #[test]
    fn a_run_file_naming_a_path_beyond_its_folder_reads_nothing_there() {
        let mut s = service();
        let escaping = br#"{"version": 1, "root": "/", "processes": [
            {"events": "../../etc/passwd", "log": "pytest-0.log", "status": 0, "timed_out": false}]}"#;
        let result = s.result(&[("run.json", escaping), ("pytest-0.log", b"x")]);
        let why = read(&s, &result).unwrap_err();
        assert!(
            why.starts_with("the run's outputs lack ../../etc/passwd"),
            "{why}"
        );
    }

    #[test]
    fn recorded_statuses_read_as_codes_and_signals() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_status(Some(1)).code(), Some(1));
        assert_eq!(exit_status(Some(-9)).signal(), Some(9));
        assert_eq!(exit_status(None).signal(), Some(9));
    }
}
