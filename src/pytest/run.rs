//! Running an order: in a warm interpreter's fork or a sandbox of its own, one pytest process
//! after another until every test of the order has a result (a test that killed or hung the
//! interpreter ends its process, and the rest continues in a new one), or reading back the
//! processes of a run that executed elsewhere; then the results in the order's shape.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;

use crate::config::FixtureGroups;
use crate::error::{Error, Result};
use crate::pytest::driver::Runner;
use crate::pytest::events::CodeRan;
use crate::pytest::follow::{now_secs, Follower, Proc, Process};
use crate::pytest::forkserver::Lease;
use crate::pytest::lease::lease_violations;
use crate::pytest::record::Record;
use crate::pytest::result::{Outcome, RunResult, TestResult};
use crate::pytest::said::collect_error;
use crate::pytest::zygote::Purpose;
use crate::pytest::zygote_key::Carried;
use crate::sandbox::{Overlay, Sandbox};
use crate::snapshot::Snapshot;

impl Runner {
    /// Runs `order` in a fresh sandbox of `snapshot` (with `overlay`), continuing in a new
    /// process after a crash or a timeout.
    pub(crate) fn run(
        &self,
        snapshot: &Snapshot,
        overlay: &Overlay,
        order: &[String],
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        self.run_order(snapshot, overlay, Some(order), groups, record, progress)
    }

    /// Runs every test in collection order, collecting in the same process (no separate
    /// collection run): seed 0 costs one pytest start, like plain pytest.
    pub(crate) fn run_collection_order(
        &self,
        snapshot: &Snapshot,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        self.run_order(snapshot, &Overlay::new(), None, groups, record, progress)
    }

    /// Runs the order of `seed` (0: collection order, in one process).
    pub(crate) fn run_seed(
        &self,
        snapshot: &Snapshot,
        seed: u64,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        if seed == 0 {
            return self.run_collection_order(snapshot, groups, record, progress);
        }
        let order = crate::pytest::order::seeded(&self.collect(snapshot)?, seed);
        if let Some(pb) = progress {
            pb.set_length(order.len() as u64);
        }
        self.run(snapshot, &Overlay::new(), &order, groups, record, progress)
    }

    fn run_order(
        &self,
        snapshot: &Snapshot,
        overlay: &Overlay,
        order: Option<&[String]>,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        self.check_interrupted()?;
        let lease = self.with_launch(record.code, Purpose::Run, &Carried::default(), |launch| {
            self.forkserver.checkout(launch, snapshot, overlay, order)
        });
        let place = match lease {
            Some(lease) => Place::Warm(Box::new(lease)),
            None => Place::Own(self.sandbox(snapshot, overlay)?),
        };
        self.drive(place, snapshot, order, groups, record, progress)
    }

    /// The run of `order` (`None`: collection order) that executed elsewhere, one pytest
    /// process after another (remote execution), built from the streams its processes left by
    /// the same code that follows a local run.
    pub(crate) fn replay(
        &self,
        snapshot: &Snapshot,
        recorded: Recorded,
        order: Option<&[String]>,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        let place = Place::Recorded {
            root: recorded.root,
            processes: recorded.processes.into_iter(),
        };
        self.drive(place, snapshot, order, groups, record, progress)
    }

    /// Runs (or reads back) the processes of one run until every test of the order has a
    /// result, then puts the results in the order's shape.
    fn drive(
        &self,
        mut place: Place,
        snapshot: &Snapshot,
        order: Option<&[String]>,
        groups: &FixtureGroups,
        record: Record,
        progress: Option<&ProgressBar>,
    ) -> Result<RunResult> {
        let sandbox_dir = place.dir().to_path_buf();
        let recorded = matches!(place, Place::Recorded { .. });
        let files = RunFiles {
            watch: sandbox_dir.join("watch.json"),
            order: sandbox_dir.join("order.txt"),
        };
        if !recorded {
            let roots = serde_json::json!({ "roots": groups.watch_roots() });
            std::fs::write(&files.watch, roots.to_string())
                .map_err(|e| Error::io("write", &files.watch, e))?;
        }
        let follower = Follower {
            interrupted: &self.interrupted,
            test_timeout: self.test_timeout,
            limits: &self.limits,
        };
        let mut result = RunResult::empty(order.map(<[String]>::to_vec).unwrap_or_default());
        result.session_code = record.code.then(CodeRan::new);
        // The run's disk bound, counted from the sandbox as the run found it.
        let mut disk = crate::limits::DiskWatch::new(
            &sandbox_dir,
            self.limits.disk,
            self.host.shared_scratch(),
        );
        // `None` until the first process has collected, when running in collection order.
        let mut remaining: Option<Vec<String>> = order.map(<[String]>::to_vec);
        if let (None, Place::Warm(lease)) = (&remaining, &mut place) {
            // The zygote collected already: its collection order is the order.
            result.order = lease.zygote().collected.clone();
            if let Some(pb) = progress {
                pb.set_length(result.order.len() as u64);
            }
            remaining = Some(result.order.clone());
        }
        while remaining.as_ref().is_none_or(|r| !r.is_empty()) {
            let mut extra = vec![format!("--fixgate-watch={}", files.watch.display())];
            extra.extend(record.options());
            match &remaining {
                Some(_) if recorded => {}
                Some(ids) => {
                    let mut text = ids.join("\n");
                    text.push('\n');
                    std::fs::write(&files.order, text)
                        .map_err(|e| Error::io("write", &files.order, e))?;
                    extra.push(format!("--fixgate-order={}", files.order.display()));
                }
                None => extra.push("--fixgate-collect".into()),
            }
            // A cancelled audit starts no process (a warm interpreter whose start it
            // cancelled leaves this run a fresh one to make).
            self.check_interrupted()?;
            let k = result.processes;
            result.processes += 1;
            let before = result.tests.len();
            let left = remaining.as_ref().map_or(0, Vec::len);
            let p = self.next_process(&mut place, (k, left), &files, &extra, record, snapshot)?;
            if k > 0 {
                if let Some(d) = disk.as_mut() {
                    d.next_process();
                }
            }
            let given = (remaining.as_deref(), record.uncollected);
            let outcome = follower.follow(p, given, &mut result, progress, &mut disk)?;
            if !outcome.collect_errors.is_empty() {
                return Err(collect_error(snapshot, &outcome.collect_errors));
            }
            if outcome
                .problems
                .iter()
                .any(|p| p.starts_with("order-mismatch"))
            {
                return Err(outcome.failure(
                    "executed the tests in another order than requested (a plugin reorders or \
                     distributes them; fixgate disables pytest-randomly, pytest-random-order and \
                     pytest-xdist, tell us which one this is)",
                    snapshot,
                ));
            }
            if remaining.is_none() {
                let Some(items) = outcome.collected.as_ref() else {
                    return Err(outcome.failure("did not collect the tests", snapshot));
                };
                result.order = items.iter().map(|i| i.nodeid.clone()).collect();
                if let Some(pb) = progress {
                    pb.set_length(result.order.len() as u64);
                }
                remaining = Some(result.order.clone());
            }
            let left = remaining.as_mut().expect("set above");
            match account(&mut result, before, left, outcome.status) {
                Ok(Accounted::Continue) => {}
                Ok(Accounted::Ended) => break,
                Err(what) => return Err(outcome.failure(&what, snapshot)),
            }
        }
        in_order(&mut result);
        scrub_sandbox_paths(&mut result, &sandbox_dir);
        for t in &mut result.tests {
            t.violations = lease_violations(&t.changed, &t.writes_marker, groups);
            self.limits.classify(&mut t.outcome, &mut t.message);
        }
        if self.host.mode() == crate::contain::Mode::Landlock {
            let failures = result.tests.iter().filter_map(|t| {
                let failed = matches!(t.outcome, Outcome::Failed | Outcome::Error);
                Some((t.nodeid.as_str(), t.message.as_deref().filter(|_| failed)?))
            });
            if let Some(sandbox) = place.sandbox() {
                self.prepare(sandbox, &[])
                    .refused_read(&self.host, failures)?;
            }
        }
        result
            .warnings
            .extend(self.editable_install_warnings(&result));
        Ok(result)
    }

    /// The `k`th process of a run (`left` tests still to run): the next one read back, a fork
    /// of the warm interpreter, or a fresh process in the run's sandbox.
    fn next_process<'p>(
        &self,
        place: &'p mut Place,
        (k, left): (u32, usize),
        files: &RunFiles,
        extra: &[String],
        record: Record,
        snapshot: &Snapshot,
    ) -> Result<Process<'p>> {
        match place {
            Place::Recorded { processes, .. } => {
                let Some(r) = processes.next() else {
                    return Err(Error::Infra(format!(
                        "the remote run of {} ended after {k} pytest process(es) with {left} \
                         test(s) not run",
                        snapshot.rev_label()
                    )));
                };
                Ok(Process {
                    proc: Proc::Recorded {
                        status: r.status,
                        timed_out: r.timed_out,
                    },
                    events: r.events,
                    log: r.log,
                })
            }
            // The first process of a run forks. One that continues after a crash or a timeout
            // forks only when a fresh pytest would collect exactly what the zygote did (see
            // `may_continue_forked`): a fresh one imports and collects again in the tree the
            // crashed prefix left, so import-time writes happen again and import-time reads
            // see the prefix's changes.
            Place::Warm(lease) => {
                let forks = lease.healthy() && (k == 0 || lease.may_continue_forked());
                let z = lease.zygote();
                if forks {
                    let events = z.sandbox.dir().join(format!("events-{k}.jsonl"));
                    std::fs::write(&events, b"").map_err(|e| Error::io("create", &events, e))?;
                    // The fork runs as the zygote's uid: what fixgate just wrote or restored
                    // in the sandbox becomes its own.
                    crate::contain::hand_over(&self.host, z.sandbox.dir())?;
                    match z.fork(&events, &files.order, Some(&files.watch), record) {
                        Ok(_) => {
                            return Ok(Process {
                                log: z.log().to_path_buf(),
                                proc: Proc::Forked(z),
                                events,
                            })
                        }
                        // The zygote failed: this run goes on fresh, in its sandbox.
                        Err(reason) => self.forkserver.stats().fall_back(reason),
                    }
                }
                self.spawn(&z.sandbox, k, extra)
            }
            Place::Own(sandbox) => self.spawn(sandbox, k, extra),
        }
    }

    /// Imports of project code from the user's repository instead of the sandbox (an editable
    /// install): the run would test the user's tree, not the snapshot.
    fn editable_install_warnings(&self, result: &RunResult) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let traces = result
            .tests
            .iter()
            .map(|t| &t.trace)
            .chain([&result.session_trace]);
        for trace in traces {
            for o in trace.outside.iter().filter(|o| o.op == "import") {
                if Path::new(&o.path).starts_with(&self.origin_root) {
                    seen.insert(o.path.clone());
                }
            }
        }
        seen.into_iter()
            .map(|p| {
                format!(
                    "a test imported {p} from the original repository, not the sandbox (an \
                     editable install?); the run may test the working tree instead of the snapshot"
                )
            })
            .collect()
    }
}

/// Where a run happens: a sandbox of its own, a warm interpreter's, or elsewhere (remote
/// execution: its processes are read back one after another).
enum Place<'p> {
    Own(Sandbox),
    Warm(Box<Lease<'p>>),
    Recorded {
        /// The input root the run had on its worker (what paths in messages start with).
        root: PathBuf,
        processes: std::vec::IntoIter<RecordedProcess>,
    },
}

impl Place<'_> {
    /// The sandbox folder, whose paths the results lose.
    fn dir(&mut self) -> &Path {
        match self {
            Place::Own(s) => s.dir(),
            Place::Warm(lease) => lease.zygote().sandbox.dir(),
            Place::Recorded { root, .. } => root,
        }
    }

    /// The sandbox on this machine (none for a run that executed elsewhere).
    fn sandbox(&mut self) -> Option<&Sandbox> {
        match self {
            Place::Own(s) => Some(s),
            Place::Warm(lease) => Some(&lease.zygote().sandbox),
            Place::Recorded { .. } => None,
        }
    }
}

/// A run that executed elsewhere: where its sandbox was, and each of its pytest processes.
pub(crate) struct Recorded {
    pub(crate) root: PathBuf,
    pub(crate) processes: Vec<RecordedProcess>,
}

/// One pytest process of a [`Recorded`] run: its event stream and output, copied here, and
/// how it ended.
pub(crate) struct RecordedProcess {
    pub(crate) events: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) status: std::process::ExitStatus,
    /// Killed for running a test past the timeout.
    pub(crate) timed_out: bool,
}

/// The files a run's processes are given, in its sandbox folder (outside the tree).
struct RunFiles {
    /// The fixture roots the lease check watches.
    watch: PathBuf,
    /// The tests still to run, rewritten before each process.
    order: PathBuf,
}

/// What a run does after a process ended, by [`account`].
#[derive(Debug, PartialEq, Eq)]
enum Accounted {
    /// Tests of the order are left: a new process runs them.
    Continue,
    /// Every test of the order has a result.
    Ended,
}

/// Takes the results a process added to `result` (from `before` on) off `left`, the tests it
/// was given; `status` is how it exited. A process that ran none of them because its session
/// ended by its own doing leaves them errors (the run has ended); one that ran none of them
/// otherwise, or reported none of them, failed (`Err`: what it did not do), since the next
/// process would do the same for ever.
fn account(
    result: &mut RunResult,
    before: usize,
    left: &mut Vec<String>,
    status: Option<i32>,
) -> std::result::Result<Accounted, String> {
    left.retain(|id| !result.uncollected.contains(id));
    if result.tests.len() == before && !left.is_empty() {
        // A session that ended by its own doing (a hook returned early, `pytest.exit` between
        // tests, `sys.exit` at session start) before running what it was given: those tests
        // did not pass, they did not run. A process that was killed or that refused its
        // arguments is no judgment of the tests.
        let Some(why) = not_run(status) else {
            return Err(format!("ran none of the {} requested tests", left.len()));
        };
        let now = now_secs();
        for id in left.drain(..) {
            result.executed.push(id.clone());
            result.tests.push(TestResult::missing(
                &id,
                Outcome::Error,
                why.clone(),
                now,
                now,
            ));
        }
        return Ok(Accounted::Ended);
    }
    // Counted, not a set: a test listed twice (the nio order) leaves one place per run.
    let mut done: HashMap<&str, usize> = HashMap::new();
    for t in &result.tests[before..] {
        *done.entry(t.nodeid.as_str()).or_default() += 1;
    }
    let waiting = left.len();
    left.retain(|id| match done.get_mut(id.as_str()) {
        Some(n) if *n > 0 => {
            *n -= 1;
            false
        }
        _ => true,
    });
    // Every result kept is one of the order's (`Progress`): a process that took none of its
    // tests would be started again for ever.
    if left.len() == waiting && !left.is_empty() {
        return Err("reported results for none of the tests it was given".to_owned());
    }
    Ok(match left.is_empty() {
        true => Accounted::Ended,
        false => Accounted::Continue,
    })
}

/// The results in the order's shape: the tests the run did not collect out of its order, each
/// run of a test listed twice in a row numbered in the order they executed, and the results in
/// the requested order, whatever order the processes reported them in.
fn in_order(result: &mut RunResult) {
    if !result.uncollected.is_empty() {
        let gone: HashSet<&String> = result.uncollected.iter().collect();
        result.order.retain(|id| !gone.contains(id));
    }
    let order = &result.order;
    if order.windows(2).any(|w| w[0] == w[1]) {
        let mut runs: HashMap<String, u32> = HashMap::new();
        for t in &mut result.tests {
            let n = runs.entry(t.nodeid.clone()).or_default();
            t.occurrence = *n;
            *n += 1;
        }
    }
    let mut position: HashMap<(&str, u32), usize> = HashMap::with_capacity(order.len());
    let mut listed: HashMap<&str, u32> = HashMap::new();
    for (i, id) in order.iter().enumerate() {
        let n = listed.entry(id.as_str()).or_default();
        position.insert((id.as_str(), *n), i);
        *n += 1;
    }
    result.tests.sort_by_key(|t| {
        position
            .get(&(t.nodeid.as_str(), t.occurrence))
            .copied()
            .unwrap_or(usize::MAX)
    });
}

/// Reports must not depend on where this run's sandbox was: failure messages lose the sandbox
/// tree's prefix (paths become repo-relative), and accesses to the sandbox's own home and
/// temporary directory are not "outside the repository".
fn scrub_sandbox_paths(result: &mut RunResult, sandbox_dir: &Path) {
    let dirs: Vec<String> = [
        Some(sandbox_dir.to_path_buf()),
        sandbox_dir.canonicalize().ok(),
    ]
    .into_iter()
    .flatten()
    .map(|d| d.display().to_string())
    .collect();
    let scrub = |text: &mut Option<String>| {
        if let Some(t) = text {
            for d in &dirs {
                *t = t
                    .replace(&format!("{d}/tree/"), "")
                    .replace(&format!("{d}/"), "");
            }
        }
    };
    let under_sandbox = |p: &str| dirs.iter().any(|d| Path::new(p).starts_with(d));
    for t in &mut result.tests {
        scrub(&mut t.message);
        scrub(&mut t.skip_reason);
        for phase in t.phases.values_mut() {
            scrub(&mut phase.message);
        }
        t.trace.outside.retain(|o| !under_sandbox(&o.path));
    }
    result
        .session_trace
        .outside
        .retain(|o| !under_sandbox(&o.path));
}

/// Why the tests a pytest process was given and did not run count as errors, from its exit
/// status (`None`: killed by a signal); `None` when the process says nothing of them: killed
/// (by us, the kernel), an internal error (3) or a usage error (4, unknown node ids), which
/// are fixgate's to report.
fn not_run(status: Option<i32>) -> Option<String> {
    let code = status?;
    (code != 3 && code != 4).then(|| {
        format!(
            "not run: the pytest session ended (exit status {code}) before running this test; \
             a hook, plugin or `pytest.exit`/`sys.exit` stopped it"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pytest::events::OutsideAccess;

    fn passed(id: &str) -> TestResult {
        TestResult::missing(id, Outcome::Passed, String::new(), 0.0, 0.0)
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tests_a_session_ended_without_running_are_errors_unless_it_was_killed_or_refused() {
        for code in [0, 1, 2, 5, 77] {
            let why = not_run(Some(code)).expect("a session that ended by itself");
            assert!(
                why.starts_with("not run:") && why.contains(&code.to_string()),
                "{why}"
            );
        }
        for status in [None, Some(3), Some(4)] {
            assert_eq!(not_run(status), None, "{status:?}");
        }
    }

    #[test]
    fn a_process_that_ran_some_of_its_tests_leaves_the_rest_to_the_next() {
        let mut result = RunResult::empty(ids(&["a", "b", "c"]));
        let mut left = ids(&["a", "b", "c"]);
        result.tests.push(passed("a"));
        assert_eq!(
            account(&mut result, 0, &mut left, None),
            Ok(Accounted::Continue)
        );
        assert_eq!(left, ids(&["b", "c"]));
        result.tests.extend([passed("b"), passed("c")]);
        assert_eq!(
            account(&mut result, 1, &mut left, Some(0)),
            Ok(Accounted::Ended)
        );
        assert!(left.is_empty());
    }

    #[test]
    fn a_test_listed_twice_in_a_row_needs_two_results() {
        let mut result = RunResult::empty(ids(&["a", "a", "b"]));
        let mut left = ids(&["a", "a", "b"]);
        result.tests.push(passed("a"));
        assert_eq!(
            account(&mut result, 0, &mut left, None),
            Ok(Accounted::Continue)
        );
        assert_eq!(left, ids(&["a", "b"]));
    }

    #[test]
    fn a_session_that_ends_by_itself_before_its_tests_leaves_them_errors_and_the_run_ends() {
        let mut result = RunResult::empty(ids(&["a", "b"]));
        let mut left = ids(&["a", "b"]);
        assert_eq!(
            account(&mut result, 0, &mut left, Some(0)),
            Ok(Accounted::Ended)
        );
        assert!(left.is_empty());
        assert_eq!(result.executed, ids(&["a", "b"]));
        assert!(result.tests.iter().all(|t| t.outcome == Outcome::Error
            && t.message
                .as_deref()
                .is_some_and(|m| m.starts_with("not run:"))));
    }

    #[test]
    fn a_process_that_was_killed_before_its_tests_or_reported_none_of_them_failed() {
        let mut result = RunResult::empty(ids(&["a"]));
        let mut left = ids(&["a"]);
        let what = account(&mut result, 0, &mut left, None).unwrap_err();
        assert_eq!(what, "ran none of the 1 requested tests");
        assert!(result.tests.is_empty(), "no result made up");
        // Results, but none of the tests it was given: it would be started again for ever.
        result.tests.push(passed("z"));
        let what = account(&mut result, 0, &mut left, Some(1)).unwrap_err();
        assert_eq!(what, "reported results for none of the tests it was given");
    }

    #[test]
    fn tests_the_tree_did_not_collect_leave_the_order() {
        let mut result = RunResult::empty(ids(&["a", "new", "b"]));
        result.uncollected = ids(&["new"]);
        let mut left = ids(&["a", "new", "b"]);
        result.tests.extend([passed("a"), passed("b")]);
        assert_eq!(
            account(&mut result, 0, &mut left, Some(0)),
            Ok(Accounted::Ended)
        );
        in_order(&mut result);
        assert_eq!(result.order, ids(&["a", "b"]));
    }

    #[test]
    fn results_take_the_orders_shape_whatever_order_they_came_in() {
        let mut result = RunResult::empty(ids(&["c", "a", "a", "b"]));
        result.tests = ["b", "a", "c", "a"].iter().map(|id| passed(id)).collect();
        result.tests[1].outcome = Outcome::Failed;
        in_order(&mut result);
        let got: Vec<(&str, u32)> = result
            .tests
            .iter()
            .map(|t| (t.nodeid.as_str(), t.occurrence))
            .collect();
        assert_eq!(got, [("c", 0), ("a", 0), ("a", 1), ("b", 0)]);
        // The runs of a test listed twice are numbered in the order they executed.
        assert_eq!(result.tests[1].outcome, Outcome::Failed);
        // An order without repeats numbers nothing; a result not in the order goes last.
        let mut result = RunResult::empty(ids(&["a", "b"]));
        result.tests = ["x", "b", "a"].iter().map(|id| passed(id)).collect();
        in_order(&mut result);
        let got: Vec<&str> = result.tests.iter().map(|t| t.nodeid.as_str()).collect();
        assert_eq!(got, ["a", "b", "x"]);
        assert!(result.tests.iter().all(|t| t.occurrence == 0));
    }

    #[test]
    fn reports_lose_the_sandboxs_paths_and_its_home_is_not_outside() {
        let sandbox = tempfile::tempdir().unwrap();
        let dir = sandbox.path();
        let mut result = RunResult::empty(ids(&["t"]));
        let mut t = TestResult::missing(
            "t",
            Outcome::Failed,
            format!("assert 1 in {}/tree/tests/test_t.py", dir.display()),
            0.0,
            0.0,
        );
        t.skip_reason = Some(format!("{}/home/x", dir.display()));
        t.trace.outside = vec![
            OutsideAccess {
                op: "open".into(),
                path: format!("{}/home/.config", dir.display()),
            },
            OutsideAccess {
                op: "open".into(),
                path: "/etc/hosts".into(),
            },
        ];
        result.tests.push(t);
        result.session_trace.outside = vec![OutsideAccess {
            op: "list".into(),
            path: format!("{}/tmp", dir.display()),
        }];
        scrub_sandbox_paths(&mut result, dir);
        let t = &result.tests[0];
        assert_eq!(t.message.as_deref(), Some("assert 1 in tests/test_t.py"));
        assert_eq!(t.skip_reason.as_deref(), Some("home/x"));
        let outside: Vec<&str> = t.trace.outside.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(outside, ["/etc/hosts"]);
        assert!(result.session_trace.outside.is_empty());
    }
}
