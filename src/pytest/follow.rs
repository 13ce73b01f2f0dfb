//! Following one pytest process to its end: the process (fresh, forked from a warm interpreter,
//! or one that ran elsewhere), its event stream read while it is written, the clocks that bound
//! it (the test timeout per test and outside tests, the run's disk bound, Ctrl-C), and what it
//! reported: each test's result, a test that killed or hung the interpreter, what it collected
//! and what went wrong.

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use crate::error::{Error, Result};
use crate::limits::{DiskWatch, Grew, Hit, Limits};
use crate::pytest::events::{CollectedItem, Event};
use crate::pytest::exit_watch::ExitWatch;
use crate::pytest::progress::{stalled, Once, Progress};
use crate::pytest::result::{Outcome, RunResult, TestResult};
use crate::pytest::said::{describe_exit, log_tail, pytest_said, with_location, CollectFailure};
use crate::pytest::stream::EventReader;
use crate::pytest::zygote::Zygote;
use crate::snapshot::Snapshot;

/// A pytest process being followed, and where it writes its events and its output.
pub(crate) struct Process<'z> {
    pub(crate) proc: Proc<'z>,
    pub(crate) events: std::path::PathBuf,
    pub(crate) log: std::path::PathBuf,
}

/// A pytest process of fixgate's own, or a child forked by a warm interpreter (whose exit the
/// zygote reports).
pub(crate) enum Proc<'z> {
    Fresh(Child, ExitWatch),
    Forked(&'z mut Zygote),
    /// A process that ran elsewhere and has ended: its stream is complete.
    Recorded {
        status: std::process::ExitStatus,
        timed_out: bool,
    },
}

impl Process<'_> {
    pub(crate) fn try_wait(&mut self) -> Result<Option<std::process::ExitStatus>> {
        match &mut self.proc {
            Proc::Fresh(child, _) => child
                .try_wait()
                .map_err(|e| Error::Infra(format!("failed to wait for pytest: {e}"))),
            Proc::Forked(z) => Ok(z.try_wait()),
            Proc::Recorded { status, .. } => Ok(Some(*status)),
        }
    }

    pub(crate) fn pause(&mut self) {
        match &mut self.proc {
            Proc::Fresh(_, exit) => exit.pause(),
            Proc::Forked(z) => z.pause(),
            Proc::Recorded { .. } => {}
        }
    }

    /// Kills the process and its group (the test timeout); its exit comes through `try_wait`.
    pub(crate) fn kill(&mut self) {
        match &mut self.proc {
            Proc::Fresh(child, _) => kill_group(child),
            Proc::Forked(z) => z.kill_child(),
            Proc::Recorded { .. } => {}
        }
    }

    /// Kills the process and waits for it (Ctrl-C).
    pub(crate) fn abort(&mut self) {
        match &mut self.proc {
            Proc::Fresh(child, _) => kill_group(child),
            Proc::Forked(z) => z.kill_and_reap(),
            Proc::Recorded { .. } => {}
        }
    }
}

/// Kills a fresh process and its group, and reaps it.
fn kill_group(child: &mut Child) {
    let pgid = child.id() as i32;
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// What a followed process did besides its tests' results (which went into the run's result).
pub(crate) struct ProcessOutcome {
    /// Its exit status (`None`: killed by a signal).
    pub(crate) status: Option<i32>,
    /// What it collected, when it announced its collection order.
    pub(crate) collected: Option<Vec<CollectedItem>>,
    pub(crate) collect_errors: Vec<CollectFailure>,
    /// What went wrong, one line each (the plugin's complaints, a stall).
    pub(crate) problems: Vec<String>,
    /// The end of pytest's own output.
    pub(crate) log_tail: String,
}

impl ProcessOutcome {
    /// The error for a pytest process that did not do `what` it was started for, with the
    /// plugin's complaints and the end of pytest's own output.
    pub(crate) fn failure(&self, what: &str, snapshot: &Snapshot) -> Error {
        let status = match self.status {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".to_owned(),
        };
        let said = pytest_said(&self.log_tail, None)
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        Error::Infra(format!(
            "pytest {what} in a sandbox of {}{said} ({status}){}\n{}",
            snapshot.rev_label(),
            self.problems
                .iter()
                .map(|p| format!("\n  {p}"))
                .collect::<String>(),
            self.log_tail
        ))
    }
}

/// What bounds a followed process: the test timeout (per test, and outside tests), the run's
/// bounds (what a test that filled the disk is told), and Ctrl-C.
pub(crate) struct Follower<'a> {
    pub(crate) interrupted: &'a AtomicBool,
    pub(crate) test_timeout: Duration,
    pub(crate) limits: &'a Limits,
}

impl Follower<'_> {
    /// Follows one process until it exits; records results, crashes and timeouts. `order` is
    /// the order the process was given (`None`: it announces its collection order), and
    /// whether it may leave out what it does not collect (`Record::uncollected`).
    pub(crate) fn follow(
        &self,
        mut p: Process,
        (order, lenient): (Option<&[String]>, bool),
        result: &mut RunResult,
        progress: Option<&ProgressBar>,
        disk: &mut Option<DiskWatch>,
    ) -> Result<ProcessOutcome> {
        let mut reader = EventReader::open(&p.events)?;
        // The test running now: named by `test_start`, or, after a result, the next one in the
        // order (the plugin writes `test_start` only when that would be wrong).
        let mut current: Option<(String, Instant, f64)> = None;
        let mut progress_of = Progress::new(order);
        let mut problems = Vec::new();
        let mut collected = None;
        let mut collect_errors = Vec::new();
        // A process that ran elsewhere was killed there for the timeout, or not.
        let mut timed_out = matches!(
            p.proc,
            Proc::Recorded {
                timed_out: true,
                ..
            }
        );
        let mut filled = None;
        // Since when no test runs (collection, the session's start and end): bounded by the
        // test timeout too, else a hook or an import that never returns holds the run. It counts
        // from the last progress (see `Progress`), not from the last line: the process writes
        // its own stream.
        let mut outside = Instant::now();
        let before = result.tests.len();
        let mut stalled_at = None;
        // Results for tests the process was not given (or reported too often): the first one's
        // id and how many.
        let mut dropped: Option<(String, usize)> = None;
        let mut exited = None;
        let status = loop {
            if exited.is_none() {
                exited = p.try_wait()?;
            }
            // The stream is read a batch at a time, so that the clocks are looked at between
            // batches however fast the process writes, and an exited one's rest is not held
            // whole in memory.
            let batch = reader.read_new()?;
            for ev in batch {
                match ev {
                    Event::TestStart { nodeid } => {
                        if !progress_of.start(&nodeid) {
                            continue;
                        }
                        outside = Instant::now();
                        if let Some(pb) = progress {
                            pb.set_message(nodeid.clone());
                        }
                        // The test inferred to run next keeps its clock.
                        if current.as_ref().is_none_or(|c| c.0 != nodeid) {
                            current = Some((nodeid, Instant::now(), now_secs()));
                        }
                    }
                    Event::Test(t) => {
                        if !progress_of.result(&t.nodeid) {
                            dropped.get_or_insert_with(|| (t.nodeid.clone(), 0)).1 += 1;
                            continue;
                        }
                        outside = Instant::now();
                        current = progress_of
                            .after(&t.nodeid)
                            .map(|next| (next.to_owned(), Instant::now(), now_secs()));
                        if let (Some(pb), Some((next, _, _))) = (progress, &current) {
                            pb.set_message(next.clone());
                        }
                        result.executed.push(t.nodeid.clone());
                        result.tests.push(TestResult::from_event(*t));
                        if let Some(pb) = progress {
                            pb.inc(1);
                        }
                    }
                    Event::SessionTrace { trace, .. } => result.session_trace.merge(*trace),
                    Event::SessionCode { code, unknown } => match (code, unknown) {
                        (Some(code), None) => {
                            if let Some(all) = &mut result.session_code {
                                for (path, lines) in code {
                                    let known = all.entry(path).or_default();
                                    known.extend(lines);
                                    known.sort_unstable();
                                    known.dedup();
                                }
                            }
                        }
                        (_, why) => {
                            result.session_code = None;
                            result.recording_error.get_or_insert(
                                why.unwrap_or_else(|| "the plugin did not say why".into()),
                            );
                        }
                    },
                    // The session ended cleanly: the test it names was running, and a test
                    // inferred to follow the last result never started (a plugin or conftest
                    // stopped the session between tests).
                    Event::Finish { running, .. } => {
                        if !progress_of.once(Once::Finish) {
                            continue;
                        }
                        outside = Instant::now();
                        // Only a test of the order still to report can have been running.
                        current = running.filter(|id| progress_of.pending(id)).map(|id| {
                            match current.take() {
                                Some(c) if c.0 == id => c,
                                _ => (id, Instant::now(), now_secs()),
                            }
                        });
                    }
                    Event::Uncollected { nodeids } if lenient => {
                        let gone = progress_of.uncollected(&nodeids);
                        if let Some(pb) = progress {
                            let len = pb.length().unwrap_or(0);
                            pb.set_length(len.saturating_sub(gone.len() as u64));
                        }
                        result.uncollected.extend(gone);
                    }
                    Event::Collected { items, .. } => {
                        if !progress_of.collected(items.iter().map(|i| i.nodeid.as_str())) {
                            continue;
                        }
                        outside = Instant::now();
                        collected = Some(items)
                    }
                    Event::CollectError {
                        nodeid,
                        message,
                        longrepr,
                    } => collect_errors.push((nodeid, with_location(message, &longrepr))),
                    Event::Start { neutralised, .. } => {
                        if !progress_of.once(Once::Start) {
                            continue;
                        }
                        outside = Instant::now();
                        for n in neutralised {
                            let w = n.warning();
                            if !result.warnings.contains(&w) {
                                result.warnings.push(w);
                            }
                        }
                    }
                    Event::Error { kind, message } => {
                        result.incomplete_trace |= kind == "internal";
                        problems.push(format!("{kind}: {message}"));
                    }
                    _ => {}
                }
            }
            if let Some(status) = exited {
                if reader.drained() {
                    break status;
                }
                continue;
            }
            if self.interrupted.load(Ordering::SeqCst) {
                p.abort();
                return Err(Error::Interrupted);
            }
            match &current {
                Some((_, started, _)) => {
                    if started.elapsed() > self.test_timeout && !timed_out {
                        p.kill();
                        timed_out = true;
                    }
                }
                None => {
                    if outside.elapsed() > self.test_timeout && stalled_at.is_none() && !timed_out {
                        p.kill();
                        stalled_at = Some(match result.tests.len() == before {
                            true => "collecting the suite or starting its session",
                            false => "ending its session",
                        });
                    }
                }
            }
            if filled.is_none() {
                filled = disk.as_mut().and_then(DiskWatch::over);
                if filled.is_some() {
                    p.kill();
                }
            }
            p.pause();
        };
        // Lines no plugin writes were dropped: what the process reported is incomplete.
        if let Some(why) = reader.dropped() {
            result
                .warnings
                .push(format!("a pytest process wrote too much: {why}"));
            result.incomplete_trace = true;
        }
        if let Some((first, n)) = dropped {
            result.warnings.push(format!(
                "a pytest process reported {n} result(s) for tests it was not given or reported \
                 more often than listed (the first: {first}): ignored"
            ));
        }
        // A test that started just as the process was killed for stalling outside a test is
        // not charged with it: the next process runs it again.
        if stalled_at.is_some() && !timed_out {
            current = None;
        }
        // A test that started and never reported: it killed the interpreter, or we did.
        if let Some((nodeid, _, start)) = current {
            let (outcome, message) = if let Some(grew) = &filled {
                let what = match grew {
                    Grew::Sandbox(_) => "the run's sandbox".to_owned(),
                    Grew::Shared(dir, _) => format!("the run's files in {}", dir.display()),
                };
                let size = crate::units::show_size(grew.bytes());
                (
                    Outcome::ResourceLimit,
                    self.limits
                        .message(Hit::Disk, &format!("{what} grew by {size}")),
                )
            } else if timed_out {
                (
                    Outcome::Timeout,
                    format!(
                        "killed after --test-timeout {}s",
                        self.test_timeout.as_secs()
                    ),
                )
            } else {
                (Outcome::Crashed, describe_exit(&status))
            };
            result.executed.push(nodeid.clone());
            result.tests.push(TestResult::missing(
                &nodeid,
                outcome,
                message,
                start,
                now_secs(),
            ));
            if let Some(pb) = progress {
                pb.inc(1);
            }
        }
        if let Some(doing) = stalled_at {
            let why = stalled(doing, self.test_timeout);
            // What the session reports at its end (the code and the files of collection and
            // session fixtures) never came: nothing may be judged from its absence.
            result.incomplete_trace = true;
            if result.session_code.is_some() {
                result.session_code = None;
                result
                    .recording_error
                    .get_or_insert_with(|| format!("a pytest process was killed: {why}"));
            }
            let warning = format!("a pytest process was killed: {why}");
            if !result.warnings.contains(&warning) {
                result.warnings.push(warning);
            }
            problems.push(format!("stalled: {why}"));
        }
        Ok(ProcessOutcome {
            status: status.code(),
            collected,
            collect_errors,
            problems,
            log_tail: log_tail(&p.log),
        })
    }
}

/// A process waited for to its end: its exit, its events, and what its stream dropped
/// ([`EventReader::dropped`]).
pub(crate) type Waited = (std::process::ExitStatus, Vec<Event>, Option<String>);

/// The process's exit, its events and what its stream dropped ([`Waited`]), or
/// `None` once it has gone `limit` without exiting or
/// progressing (then killed): collecting, then ending its session, each gets the whole bound.
/// Lines that are no progress (see [`Progress`]) do not move the clock: the process writes them.
pub(crate) fn wait_interruptibly(
    p: &mut Process,
    interrupted: &AtomicBool,
    limit: Duration,
) -> Result<Option<Waited>> {
    let mut since = Instant::now();
    let mut reader = EventReader::open(&p.events)?;
    let mut events = Vec::new();
    let mut progress = Progress::new(None);
    let mut exited = None;
    loop {
        if exited.is_none() {
            exited = p.try_wait()?;
        }
        for ev in reader.read_new()? {
            let moved = match &ev {
                Event::Start { .. } => progress.once(Once::Start),
                Event::Finish { .. } => progress.once(Once::Finish),
                Event::Collected { .. } => progress.once(Once::Collected),
                _ => false,
            };
            if moved {
                since = Instant::now();
            }
            // What a collection says; no more of it than a suite writes (a file per error).
            let kept = matches!(
                ev,
                Event::Collected { .. }
                    | Event::SessionTrace { .. }
                    | Event::CollectSkip { .. }
                    | Event::CollectError { .. }
                    | Event::Error { .. }
            );
            if kept {
                if events.len() >= COLLECTION_EVENTS {
                    p.abort();
                    return Err(Error::NotCollected(format!(
                        "pytest wrote more than {COLLECTION_EVENTS} events while collecting (a \
                         conftest writing the plugin's stream?)"
                    )));
                }
                events.push(ev);
            }
        }
        if let Some(s) = exited {
            if reader.drained() {
                return Ok(Some((s, events, reader.dropped())));
            }
            continue;
        }
        if interrupted.load(Ordering::SeqCst) {
            p.abort();
            return Err(Error::Interrupted);
        }
        if since.elapsed() > limit {
            p.abort();
            return Ok(None);
        }
        p.pause();
    }
}

/// The most events a collection may report: its items, its traces, a skip or an error per
/// file.
const COLLECTION_EVENTS: usize = 1_000_000;

pub(crate) fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::path::Path;

    use super::*;

    const ORDER: [&str; 3] = ["t.py::a", "t.py::b", "t.py::c"];

    fn order() -> Vec<String> {
        ORDER.iter().map(|s| s.to_string()).collect()
    }

    fn limits(dir: &Path) -> Limits {
        Limits::resolve(&Default::default(), &Default::default(), 1, dir)
    }

    /// The stream of a process: its event lines, and its output.
    fn stream(dir: &Path, lines: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
        let events = dir.join("events.jsonl");
        let log = dir.join("pytest.log");
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(&events, text).unwrap();
        std::fs::write(&log, "pytest's own output\n").unwrap();
        (events, log)
    }

    /// A process that ran elsewhere and ended with `status` (a raw wait status), its stream
    /// `lines`.
    fn recorded<'z>(dir: &Path, lines: &[&str], status: i32, timed_out: bool) -> Process<'z> {
        let (events, log) = stream(dir, lines);
        Process {
            proc: Proc::Recorded {
                status: std::process::ExitStatus::from_raw(status),
                timed_out,
            },
            events,
            log,
        }
    }

    /// A live process that does nothing for a minute (its own process group), its stream
    /// `lines`.
    fn sleeping<'z>(dir: &Path, lines: &[&str]) -> Process<'z> {
        let (events, log) = stream(dir, lines);
        let child = std::process::Command::new("sleep")
            .arg("60")
            .process_group(0)
            .spawn()
            .unwrap();
        let exit = ExitWatch::new(&child);
        Process {
            proc: Proc::Fresh(child, exit),
            events,
            log,
        }
    }

    /// Follows `p`, given the three tests of [`ORDER`], with the test timeout `timeout`.
    fn follow(
        p: Process,
        timeout: Duration,
        interrupted: bool,
    ) -> (Result<ProcessOutcome>, RunResult) {
        let dir = tempfile::tempdir().unwrap();
        let limits = limits(dir.path());
        let interrupted = AtomicBool::new(interrupted);
        let follower = Follower {
            interrupted: &interrupted,
            test_timeout: timeout,
            limits: &limits,
        };
        let order = order();
        let mut result = RunResult::empty(order.clone());
        let outcome = follower.follow(p, (Some(&order), true), &mut result, None, &mut None);
        (outcome, result)
    }

    fn outcomes(result: &RunResult) -> Vec<(&str, Outcome, Option<&str>)> {
        result
            .tests
            .iter()
            .map(|t| (t.nodeid.as_str(), t.outcome, t.message.as_deref()))
            .collect()
    }

    const START: &str = r#"{"event":"start","pid":1}"#;
    const A_PASSED: &str = r#"{"event":"test","nodeid":"t.py::a","outcome":"passed"}"#;

    #[test]
    fn the_test_after_the_last_result_crashed_with_the_interpreter() {
        let dir = tempfile::tempdir().unwrap();
        let p = recorded(dir.path(), &[START, A_PASSED], libc::SIGSEGV, false);
        let (outcome, result) = follow(p, Duration::from_secs(60), false);
        let outcome = outcome.unwrap();
        assert_eq!(outcome.status, None, "killed by a signal");
        assert_eq!(
            outcomes(&result),
            [
                ("t.py::a", Outcome::Passed, None),
                (
                    "t.py::b",
                    Outcome::Crashed,
                    Some("the interpreter died of signal 11 during the test")
                ),
            ]
        );
        assert_eq!(result.executed, ["t.py::a", "t.py::b"]);
        assert_eq!(outcome.log_tail, "pytest said:\npytest's own output");
    }

    #[test]
    fn a_test_named_by_test_start_that_ran_past_the_timeout_elsewhere_timed_out() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [START, r#"{"event":"test_start","nodeid":"t.py::c"}"#];
        let p = recorded(dir.path(), &lines, libc::SIGKILL, true);
        let (outcome, result) = follow(p, Duration::from_secs(7), false);
        outcome.unwrap();
        assert_eq!(
            outcomes(&result),
            [(
                "t.py::c",
                Outcome::Timeout,
                Some("killed after --test-timeout 7s")
            )]
        );
    }

    #[test]
    fn a_session_that_ended_between_tests_charges_no_test() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [START, A_PASSED, r#"{"event":"finish","running":null}"#];
        let p = recorded(dir.path(), &lines, 0, false);
        let (outcome, result) = follow(p, Duration::from_secs(60), false);
        assert_eq!(outcome.unwrap().status, Some(0));
        assert_eq!(outcomes(&result), [("t.py::a", Outcome::Passed, None)]);
        // One that ended in a test (pytest.exit inside it) leaves that test crashed.
        let lines = [START, A_PASSED, r#"{"event":"finish","running":"t.py::b"}"#];
        let p = recorded(dir.path(), &lines, 2 << 8, false);
        let (_, result) = follow(p, Duration::from_secs(60), false);
        assert_eq!(result.tests[1].nodeid, "t.py::b");
        assert_eq!(result.tests[1].outcome, Outcome::Crashed);
    }

    #[test]
    fn results_for_tests_it_was_not_given_are_ignored_and_said() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            START,
            A_PASSED,
            A_PASSED,
            r#"{"event":"test","nodeid":"t.py::zz","outcome":"failed"}"#,
            r#"{"event":"error","kind":"internal","message":"trace failed"}"#,
            r#"{"event":"finish"}"#,
        ];
        let p = recorded(dir.path(), &lines, 0, false);
        let (outcome, result) = follow(p, Duration::from_secs(60), false);
        let outcome = outcome.unwrap();
        assert_eq!(outcomes(&result), [("t.py::a", Outcome::Passed, None)]);
        assert_eq!(
            result.warnings,
            [
                "a pytest process reported 2 result(s) for tests it was not given or reported \
              more often than listed (the first: t.py::a): ignored"
            ]
        );
        // The plugin's own trouble: the traces may miss accesses.
        assert!(result.incomplete_trace);
        assert_eq!(outcome.problems, ["internal: trace failed"]);
    }

    #[test]
    fn tests_the_tree_did_not_collect_are_said_and_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            START,
            r#"{"event":"uncollected","nodeids":["t.py::b","t.py::nope"]}"#,
            A_PASSED,
            r#"{"event":"test","nodeid":"t.py::c","outcome":"passed"}"#,
            r#"{"event":"finish"}"#,
        ];
        let p = recorded(dir.path(), &lines, 0, false);
        let (outcome, result) = follow(p, Duration::from_secs(60), false);
        outcome.unwrap();
        assert_eq!(result.uncollected, ["t.py::b"], "only tests of its order");
        assert_eq!(result.executed, ["t.py::a", "t.py::c"]);
    }

    #[test]
    fn a_collection_error_keeps_where_it_broke() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            START,
            r#"{"event":"collect_error","nodeid":"t.py","message":"boom","longrepr":"t.py:1: in <module>\n    x\nE   boom"}"#,
        ];
        let p = recorded(dir.path(), &lines, 2 << 8, false);
        let (outcome, _) = follow(p, Duration::from_secs(60), false);
        let outcome = outcome.unwrap();
        assert_eq!(
            outcome.collect_errors,
            [(
                "t.py".to_owned(),
                "boom\nt.py:1: in <module>\n    x\nE   boom".to_owned()
            )]
        );
    }

    #[test]
    fn a_live_test_past_the_timeout_is_killed_and_timed_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = sleeping(
            dir.path(),
            &[START, r#"{"event":"test_start","nodeid":"t.py::a"}"#],
        );
        let began = Instant::now();
        let (outcome, result) = follow(p, Duration::from_millis(300), false);
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "killed at the bound"
        );
        assert_eq!(outcome.unwrap().status, None);
        assert_eq!(
            outcomes(&result),
            [(
                "t.py::a",
                Outcome::Timeout,
                Some("killed after --test-timeout 0s")
            )]
        );
    }

    #[test]
    fn a_live_process_that_runs_no_test_is_killed_as_stalled_and_charges_no_test() {
        let dir = tempfile::tempdir().unwrap();
        let p = sleeping(dir.path(), &[START]);
        let (outcome, result) = follow(p, Duration::from_millis(300), false);
        let outcome = outcome.unwrap();
        assert!(result.tests.is_empty(), "{:?}", outcomes(&result));
        let why = stalled(
            "collecting the suite or starting its session",
            Duration::from_millis(300),
        );
        assert_eq!(outcome.problems, [format!("stalled: {why}")]);
        assert_eq!(
            result.warnings,
            [format!("a pytest process was killed: {why}")]
        );
        assert!(result.incomplete_trace, "its session's traces never came");
    }

    #[test]
    fn an_interrupted_follow_kills_the_process_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let p = sleeping(dir.path(), &[START]);
        let (outcome, _) = follow(p, Duration::from_secs(60), true);
        assert!(matches!(outcome, Err(Error::Interrupted)));
    }

    #[test]
    fn a_collection_is_waited_for_with_what_it_said_and_a_stalled_one_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let lines = [
            START,
            r#"{"event":"collected","items":[{"nodeid":"t.py::a"}]}"#,
            A_PASSED,
            r#"{"event":"session_trace","trace":{"read":["t.py"]}}"#,
        ];
        let mut p = recorded(dir.path(), &lines, 0, false);
        let interrupted = AtomicBool::new(false);
        let (status, events, dropped) =
            wait_interruptibly(&mut p, &interrupted, Duration::from_secs(60))
                .unwrap()
                .expect("it exited");
        assert!(status.success());
        assert_eq!(dropped, None);
        // Only what a collection says is kept.
        assert!(matches!(
            events.as_slice(),
            [Event::Collected { .. }, Event::SessionTrace { .. }]
        ));
        let mut p = sleeping(dir.path(), &[START]);
        let waited = wait_interruptibly(&mut p, &interrupted, Duration::from_millis(300)).unwrap();
        assert!(waited.is_none(), "stalled");
    }
}
