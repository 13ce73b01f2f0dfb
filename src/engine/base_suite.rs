//! Base-suite replay: the base's suite is the spec. Whenever the patch touches what the base's
//! tests are made of (a test file, a helper of the tests, a conftest, the pytest configuration
//! or plugin list, a `pytest_*` hook) or removes a base test, the base tests it reaches run
//! with the base's test files, conftests, configuration and test data on the head's code, in
//! the head's file order; the whole base suite when what every test runs under changed. A test
//! red there runs again in a control, the same order on the base, and one red on the head's
//! code and green on the base that the head's suite does not show is a hidden failure, read by
//! `audit::base_suite`. The test-source replay's readings (`redefined-test`, `test-refactor`) come
//! from the same runs.
//!
//! Every run is a node of the audit's graph, cached like the others: the control depends on
//! nothing of the head but the order, so heads against one base share it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use fixgate_graph::NodeId;

use crate::audit::base_suite::{
    self as rule, Altered, Around, AtHead, BaseSuiteRead, Missing, Reading, Replayed, SpecReplay,
};
use crate::audit::renamed::{likeness, Likeness};
use crate::audit::source_replay::{self, SourceRead};
use crate::audit::spec_scope::{self, Changed, SpecRole, SpecScope};
use crate::delta::Delta;
use crate::engine::judging::Judging;
use crate::engine::kind::NodeKind;
use crate::engine::runs::RunRequest;
use crate::engine::source_replay::Candidate;
use crate::engine::step::{Engine, Role};
use crate::error::{Error, Result};
use crate::pytest::events::Collection;
use crate::pytest::ini::{self, PytestIni};
use crate::pytest::result::{Outcome, RunResult};
use crate::repo_path::RepoPath;
use crate::sandbox::Overlay;
use crate::snapshot::Snapshot;
use crate::testsrc::{self, SourceFile};

/// What the replay runs and over what tree, derived from the diff and the two collections.
struct Plan {
    scope: SpecScope,
    /// The base's test code over the head's tree: base bytes, or `None` for what the head added.
    overlay: Overlay,
    /// What the patch changed that the suite is made of.
    changed: Vec<Changed>,
    /// The non-test Python modules the patch changed (removed, added): where a deleted test's
    /// code may have gone.
    sources: Vec<String>,
    /// Each base test's file, by node id.
    files: BTreeMap<String, String>,
}

/// Directory names that hold tests: a `.py` below one is test code, anything else test data.
const TEST_DIRS: [&str; 3] = ["tests", "test", "testing"];

pub(crate) fn in_test_dir(path: &str) -> bool {
    let mut parts: Vec<&str> = path.split('/').collect();
    parts.pop();
    parts.iter().any(|p| TEST_DIRS.contains(p))
}

pub(crate) fn text(s: &Snapshot, path: &str) -> Option<String> {
    s.read_path(path)
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The replay's plan: `None` when the patch touched nothing the base's tests are made of and
/// removed none (a patch touching no tests pays nothing). `delta` is the fixture delta with the
/// traced files: their base bytes are the base tests' data.
fn plan(
    engine: &Engine,
    base: &Snapshot,
    head: &Snapshot,
    base_collection: &Collection,
    head_collection: &Collection,
    delta: &Delta,
    frozen: &HashSet<&str>,
) -> Result<Option<Plan>> {
    let base_ini = PytestIni::find(|f| text(base, f));
    let config_changed = base_ini != PytestIni::find(|f| text(head, f));
    let test_files: HashSet<&str> = base_collection
        .items
        .iter()
        .chain(&head_collection.items)
        .filter_map(|i| i.file.as_deref())
        .collect();
    let mut paths: BTreeSet<String> = BTreeSet::new();
    for s in [base, head] {
        paths.extend(s.entries.iter().map(|e| e.path.to_string()));
    }
    let differs =
        |p: &str| !base.same_blob(head, p) && engine.base.digest(p) != engine.head.digest(p);
    let base_bytes = |p: &str| base.read_path(p);
    let mut changed = Vec::new();
    let mut sources = Vec::new();
    let mut overlay: Overlay = Vec::new();
    for p in &paths {
        let name = p.rsplit('/').next().unwrap_or(p);
        let py = p.ends_with(".py");
        let role = if name == "conftest.py" {
            Some(SpecRole::Conftest)
        } else if !p.contains('/') && ini::FILES.contains(&name) {
            if !config_changed {
                continue;
            }
            Some(SpecRole::Config)
        } else if test_files.contains(p.as_str()) || (py && base_ini.is_test_file(p)) {
            Some(SpecRole::TestFile)
        } else if py && in_test_dir(p) {
            Some(SpecRole::TestCode)
        } else if py || in_test_dir(p) {
            None // a module of the code under test, or test data: looked at below
        } else {
            continue;
        };
        if !differs(p) {
            continue;
        }
        match role {
            Some(role) => {
                // A test module that patches what it imports reaches every test.
                let patches = |s: &Snapshot| {
                    SourceFile::parse(&text(s, p).unwrap_or_default()).import_time_patches()
                };
                if role == SpecRole::TestFile && py && !patches(head).is_subset(&patches(base)) {
                    changed.push(Changed {
                        path: p.clone(),
                        role: SpecRole::ImportPatch,
                    });
                }
                changed.push(Changed {
                    path: p.clone(),
                    role,
                });
                overlay.push((RepoPath::parse_lossless(p), base_bytes(p)?));
            }
            None if py => {
                sources.push(p.clone());
                let hooks = |s: &Snapshot| testsrc::pytest_hooks(&text(s, p).unwrap_or_default());
                if !hooks(head).is_subset(&hooks(base)) {
                    changed.push(Changed {
                        path: p.clone(),
                        role: SpecRole::Hook,
                    });
                }
            }
            // Test data the base's tests read as the base has it.
            None => overlay.push((RepoPath::parse_lossless(p), base_bytes(p)?)),
        }
    }
    // The data files the tests read, wherever they are (coupling follows the trace).
    for c in &delta.changed {
        if !overlay.iter().any(|(p, _)| p == &c.path) {
            overlay.push((c.path.clone(), base_bytes(&c.path.to_string())?));
        }
    }
    overlay.sort_by(|a, b| a.0.cmp(&b.0));
    let base_tests: Vec<(String, String)> = base_collection
        .items
        .iter()
        .filter(|i| !frozen.contains(i.nodeid.as_str()))
        .map(|i| {
            let file = i
                .file
                .clone()
                .unwrap_or_else(|| testsrc::split_nodeid(&i.nodeid).0.to_string());
            (i.nodeid.clone(), file)
        })
        .collect();
    let head_ids: HashSet<&str> = head_collection
        .items
        .iter()
        .map(|i| i.nodeid.as_str())
        .collect();
    let Some(scope) = spec_scope::scope(&changed, &base_tests, &head_ids) else {
        return Ok(None);
    };
    Ok(Some(Plan {
        scope,
        overlay,
        changed,
        sources,
        files: base_tests.into_iter().collect(),
    }))
}

impl Plan {
    /// Whether the patch changed what every test runs under: a conftest, the configuration or
    /// plugin list, a `pytest_*` hook.
    pub(crate) fn session_changed(&self) -> bool {
        self.changed.iter().any(|c| {
            matches!(
                c.role,
                SpecRole::Conftest | SpecRole::Config | SpecRole::Hook | SpecRole::ImportPatch
            )
        })
    }
}

/// The replay under way: its collection is known, its run added.
struct Replaying {
    plan: Plan,
    /// The order the replay and the control run.
    order: Vec<String>,
    /// The run's overlay: the plan's, less the test files that do not collect on the head's
    /// code (pytest would stop at them).
    run_overlay: Overlay,
    node: Option<NodeId>,
    /// Base tests of the scope the replay's collection did not give, with why: their file's
    /// collection error, or that the id was not collected.
    not_collected: BTreeMap<String, String>,
}

/// Collects the replay's tree (waiting for it), then adds the replay run in the head's file
/// order, after `after`.
fn start(
    engine: &Engine,
    plan: Plan,
    head_order: &[String],
    after: &[NodeId],
) -> Result<Replaying> {
    let (collection, errors) = collect(engine, &plan.overlay, after)?;
    let collected: HashSet<&str> = collection.items.iter().map(|i| i.nodeid.as_str()).collect();
    let broken: BTreeMap<&str, &str> = errors
        .iter()
        .map(|(f, m)| (f.as_str(), m.as_str()))
        .collect();
    let order = spec_scope::in_head_order(&plan.scope.tests, head_order);
    let mut not_collected = BTreeMap::new();
    for id in &order {
        if collected.contains(id.as_str()) {
            continue;
        }
        let file = plan.files.get(id).map(String::as_str).unwrap_or_default();
        let why = match broken.get(file) {
            Some(m) => format!("its file does not collect on the head's code: {m}"),
            None => "not collected on the head's code with the base's test files".to_string(),
        };
        not_collected.insert(id.clone(), why);
    }
    let mut run_overlay = plan.overlay.clone();
    for (file, _) in &errors {
        let path = RepoPath::parse_lossless(file);
        run_overlay.retain(|(p, _)| p != &path);
        run_overlay.push((path, None));
    }
    run_overlay.sort_by(|a, b| a.0.cmp(&b.0));
    let runnable: Vec<String> = order
        .iter()
        .filter(|id| !not_collected.contains_key(*id))
        .cloned()
        .collect();
    let node = match runnable.is_empty() {
        true => None,
        false => Some(engine.add_run(&replay_request(runnable, &run_overlay, 0).after(after))?),
    };
    Ok(Replaying {
        plan,
        order,
        run_overlay,
        node,
        not_collected,
    })
}

fn replay_request(order: Vec<String>, overlay: &Overlay, repeat: u32) -> RunRequest {
    let label = crate::engine::kind::repeat(NodeKind::BaseSuiteRun.label(), repeat);
    let mut req = RunRequest::new(label, NodeKind::BaseSuiteRun, Role::Head, order).repeat(repeat);
    req.overlay = overlay.clone();
    req
}

/// Whether the tests of `chain` (of one file, at head) all request one fixture wider than a test
/// (module, class, package or session scope) that their file or a conftest above it defines:
/// a chain built on shared state by design.
fn shares_wide_fixture(head: &Snapshot, chain: &[&String]) -> bool {
    let Some(first) = chain.first() else {
        return false;
    };
    let file = testsrc::split_nodeid(first).0;
    let parse = |p: &str| text(head, p).map(|t| SourceFile::parse(&t));
    let mut wide: BTreeSet<String> = BTreeSet::new();
    let mut dir = file.rsplit_once('/').map(|(d, _)| d.to_string());
    let mut files = vec![file.to_string()];
    while let Some(d) = dir {
        files.push(format!("{d}/conftest.py"));
        dir = d.rsplit_once('/').map(|(p, _)| p.to_string());
    }
    files.push("conftest.py".to_string());
    for f in &files {
        if let Some(source) = parse(f) {
            wide.extend(source.wide_fixtures());
        }
    }
    let Some(source) = parse(file) else {
        return false;
    };
    let requests = |id: &str| -> BTreeSet<String> {
        let func = testsrc::split_nodeid(id).1;
        source
            .parameters(func)
            .intersection(&wide)
            .cloned()
            .collect()
    };
    let mut common = requests(first);
    for t in &chain[1..] {
        common = common.intersection(&requests(t)).cloned().collect();
    }
    !common.is_empty()
}

/// What the head did with a name a base test's failure says is missing.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Gone {
    Kept,
    /// Removed with the feature (`name`: a name, not a module).
    Removed {
        name: Option<String>,
    },
    /// The same function under another name (`old`: the name the base test fails on).
    Renamed {
        old: String,
    },
}

impl Gone {
    /// Whether a test whose base version fails on the missing name cannot be read on the head's
    /// code: a deleted test only when the feature went with it (a test deleted beside a rename
    /// is a deleted test, else renaming a function would excuse deleting its test), a test the
    /// head kept when the name is gone either way (its head version calls the new name).
    fn unreadable(&self, at_head: &AtHead) -> bool {
        match (self, at_head) {
            (Gone::Kept, _) => false,
            (Gone::Removed { .. }, _) => true,
            (Gone::Renamed { .. }, AtHead::Deleted) => false,
            (Gone::Renamed { .. }, _) => true,
        }
    }
}

/// The tests the patch added (the base has no such id) that run before `id` in its file in the
/// head's file order `head_order`; `base_files` maps each base test to its file.
fn new_before(
    head_order: &[String],
    id: &str,
    base_files: &BTreeMap<String, String>,
) -> Vec<String> {
    let file = testsrc::split_nodeid(id).0;
    head_order
        .iter()
        .take_while(|h| h.as_str() != id)
        .filter(|h| testsrc::split_nodeid(h).0 == file && !base_files.contains_key(h.as_str()))
        .cloned()
        .collect()
}

/// The head's file order over the files of the tests in `may_depend`, less the tests the patch
/// added (those the base does not have): a run of the head's own files, on the head's code,
/// without what the new tests leave behind.
fn without_new_request(
    head_order: &[String],
    may_depend: &BTreeMap<String, Vec<String>>,
    base_files: &BTreeMap<String, String>,
) -> RunRequest {
    let files: HashSet<&str> = may_depend
        .keys()
        .map(|id| testsrc::split_nodeid(id).0)
        .collect();
    let order: Vec<String> = head_order
        .iter()
        .filter(|h| {
            files.contains(testsrc::split_nodeid(h).0) && base_files.contains_key(h.as_str())
        })
        .cloned()
        .collect();
    let label = NodeKind::BaseSuiteRun.of("without the new tests");
    RunRequest::new(label, NodeKind::BaseSuiteRun, Role::Head, order)
}

fn control_request(order: Vec<String>, repeat: u32) -> RunRequest {
    let label = crate::engine::kind::repeat(NodeKind::BaseSuiteControl.label(), repeat);
    RunRequest::new(label, NodeKind::BaseSuiteControl, Role::Base, order).repeat(repeat)
}

/// The replay's tree collected, after `after`.
fn collect(
    engine: &Engine,
    overlay: &Overlay,
    after: &[NodeId],
) -> Result<(Collection, Vec<crate::pytest::driver::CollectFailure>)> {
    let step = crate::engine::collect::CollectOverlaid {
        side: engine.head.clone(),
        overlay: overlay.clone(),
        pytest: engine.pytest.clone(),
    };
    engine.run_step(step, &[], after).map(|(_, out)| out)
}

/// What the audit knows when it reads the replay.
struct Context<'a> {
    pub(crate) base: &'a Snapshot,
    pub(crate) head: &'a Snapshot,
    pub(crate) head_collection: &'a Collection,
    pub(crate) head_run: &'a RunResult,
    /// The edited tests to read as the test-source replay did.
    pub(crate) candidates: &'a [Candidate],
    /// The tests the patch edited (head node ids).
    pub(crate) edited: &'a BTreeSet<String>,
    /// The delta with the traced files: what each test read that changed.
    pub(crate) delta: &'a Delta,
}

/// Waits for the replay, runs the control (and a confirmation of each) when the replay has red
/// tests, and reads every test; with the test-source replay's readings of the edited tests.
fn read(
    engine: &Engine,
    started: Replaying,
    cx: &Context,
) -> Result<(BaseSuiteRead, Vec<SourceRead>)> {
    let Replaying {
        plan,
        order,
        run_overlay,
        node,
        not_collected,
    } = started;
    let replay = match node {
        Some(n) => Some(wait(engine, n, "the base-suite replay")?),
        None => None,
    };
    let replay_outcome = |id: &str| -> Outcome {
        match (not_collected.contains_key(id), &replay) {
            (true, _) | (false, None) => Outcome::Error,
            (false, Some(r)) => r.outcome_of(id).unwrap_or(Outcome::Error),
        }
    };
    let red: Vec<&String> = order
        .iter()
        .filter(|id| !replay_outcome(id).is_green())
        .collect();
    // The control: the same order on the base, when anything is red.
    let control = match red.is_empty() {
        true => None,
        false => {
            let (_, r) = engine.run_one(&control_request(order.clone(), 0))?;
            Some(r)
        }
    };
    let control_outcome = |id: &str| control.as_ref().and_then(|c| c.outcome_of(id));
    let session_changed = plan.session_changed();
    let test_code_changed = plan.changed.iter().any(|c| c.role == SpecRole::TestCode);
    let changed_files: HashSet<&str> = plan.changed.iter().map(|c| c.path.as_str()).collect();
    let changed_data: HashSet<String> = cx
        .delta
        .changed
        .iter()
        .map(|c| c.path.to_string())
        .collect();
    let head_ids: HashSet<&str> = cx
        .head_collection
        .items
        .iter()
        .map(|i| i.nodeid.as_str())
        .collect();
    let deselected: HashSet<&str> = cx
        .head_collection
        .deselected
        .iter()
        .map(String::as_str)
        .collect();
    let skipped_modules: HashSet<&str> = cx
        .head_collection
        .skipped_collectors
        .iter()
        .filter_map(|c| c.file.as_deref())
        .collect();
    let mut sources = ParsedSources::new(cx.base, cx.head);
    // Where a gone test may be: the Python files the patch changed.
    let python: Vec<String> = plan
        .changed
        .iter()
        .map(|c| c.path.clone())
        .filter(|p| p.ends_with(".py"))
        .chain(plan.sources.iter().cloned())
        .collect();
    let source_bases: HashSet<&str> = cx
        .candidates
        .iter()
        .map(|c| c.base_nodeid.as_str())
        .collect();

    let mut readings: Vec<(String, AtHead, Outcome, Option<Outcome>, Reading)> = Vec::new();
    // The tests that may owe their green to the patch's new tests, with those tests.
    let mut may_depend: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // The tests whose base version fails on a name the head removed or renamed.
    let mut gone_names: BTreeMap<String, String> = BTreeMap::new();
    for id in &order {
        let replayed = replay_outcome(id);
        let file = plan.files.get(id).map(String::as_str).unwrap_or_default();
        let present = match head_ids.contains(id.as_str()) {
            true => Some(cx.head_run.outcome_of(id).unwrap_or(Outcome::Error)),
            // A module skipped at collection has no items: its tests are skipped.
            false => skipped_modules.contains(file).then_some(Outcome::Skipped),
        };
        let at_head = if present.is_some() {
            AtHead::of(present, None, false, None)
        } else {
            // A parametrization row the head removed, its function kept: a deleted test.
            let row_removed = id.split_once('[').is_some_and(|(function, _)| {
                let prefix = format!("{function}[");
                head_ids.iter().any(|h| h.starts_with(&prefix))
            });
            let found = match row_removed {
                true => None,
                false => sources.find(id, file, &python),
            };
            let renamed = found
                .as_ref()
                .filter(|h| head_ids.contains(h.as_str()))
                .map(|h| {
                    (
                        h.clone(),
                        cx.head_run.outcome_of(h).unwrap_or(Outcome::Error),
                    )
                });
            let at = found.map(|h| h.split('[').next().unwrap_or(&h).to_string());
            AtHead::of(None, renamed, deselected.contains(id.as_str()), at)
        };
        let head_id = match &at_head {
            AtHead::Renamed { nodeid, .. } => nodeid.clone(),
            _ => id.clone(),
        };
        let reads_changed = cx.head_run.test(&head_id).is_some_and(|t| {
            t.trace
                .read
                .iter()
                .chain(&t.trace.sqlite)
                .any(|p| changed_data.contains(p))
        });
        let around = Around {
            edited: cx.edited.contains(&head_id) || test_code_changed || reads_changed,
            file_changed: changed_files.contains(file),
            session_changed,
        };
        let control = (!replayed.is_green())
            .then(|| control_outcome(id))
            .flatten();
        let failure = not_collected.get(id).cloned().or_else(|| {
            replay
                .as_ref()
                .and_then(|r| r.test(id))
                .and_then(|t| t.message.clone())
        });
        let gone = match replayed.is_green() {
            true => Gone::Kept,
            false => (failure.as_deref().and_then(rule::missing))
                .map_or(Gone::Kept, |m| sources.gone(&m, &plan.sources)),
        };
        let code_removed = gone.unreadable(&at_head);
        if let Gone::Renamed { old: name, .. } | Gone::Removed { name: Some(name) } = gone {
            gone_names.insert(id.clone(), name);
        }
        let reading = Reading::of(&at_head, around, replayed, control, code_removed);
        if reading.may_depend_on_new(&at_head, around) {
            let new = new_before(&cx.head_run.order, id, &plan.files);
            if !new.is_empty() {
                may_depend.insert(id.clone(), new);
            }
        }
        readings.push((id.clone(), at_head, replayed, control, reading));
    }

    // A hidden failure is confirmed by a second replay and control of the same order, so that
    // a flaky test is never called hidden on one run.
    let suspects: Vec<&String> = readings
        .iter()
        .filter(|r| matches!(r.4, Reading::Hidden(_)) && !not_collected.contains_key(&r.0))
        .map(|r| &r.0)
        .collect();
    // Beside them, the head's own file order over the files of the tests that may depend on
    // the patch's new tests, with the new tests taken out.
    let mut unconfirmed: HashSet<String> = HashSet::new();
    let mut without_new: Option<RunResult> = None;
    if !suspects.is_empty() {
        let runnable: Vec<String> = order
            .iter()
            .filter(|id| !not_collected.contains_key(*id))
            .cloned()
            .collect();
        let mut batch = vec![
            replay_request(runnable, &run_overlay, 1),
            control_request(order.clone(), 1),
        ];
        if !may_depend.is_empty() {
            batch.push(without_new_request(
                &cx.head_run.order,
                &may_depend,
                &plan.files,
            ));
        }
        let mut again = engine.run_batch(&batch)?;
        if batch.len() == 3 {
            without_new = again.pop().and_then(|r| r.ok());
        }
        let (r2, c2) = (&again[0], &again[1]);
        for id in suspects {
            let red = r2
                .as_ref()
                .ok()
                .and_then(|r| r.outcome_of(id))
                .is_some_and(|o| !o.is_green());
            let green = c2
                .as_ref()
                .ok()
                .and_then(|r| r.outcome_of(id))
                .is_some_and(Outcome::is_green);
            if !(red && green) {
                unconfirmed.insert(id.clone());
            }
        }
    }

    let serial: HashSet<&str> = (cx.head_collection.items.iter())
        .filter(|i| i.has_marker("serial"))
        .map(|i| i.nodeid.as_str())
        .collect();
    let head_ini = PytestIni::find(|f| text(cx.head, f));
    // What a repro checks out from the base besides the test's own file.
    let repro_files: Vec<String> = plan
        .changed
        .iter()
        .filter(|c| c.role != SpecRole::TestFile && c.role != SpecRole::Hook)
        .map(|c| c.path.clone())
        .collect();
    let mut out = BaseSuiteRead {
        whole: plan.scope.whole,
        reasons: plan.scope.reasons.clone(),
        ran: order.len(),
        tests: Vec::new(),
        base_commit: cx.base.commit().map(|c| c.to_string()),
        head_commit: cx.head.commit().map(|c| c.to_string()),
    };
    for (id, at_head, replayed, control, reading) in readings {
        let reading = match unconfirmed.contains(&id) {
            true => Reading::Unconfirmed,
            false if may_depend.contains_key(&id) => {
                let chain: Vec<&String> = std::iter::once(&id).chain(&may_depend[&id]).collect();
                let serial_chain = chain.iter().all(|t| serial.contains(t.as_str()))
                    || shares_wide_fixture(cx.head, &chain);
                let without = without_new.as_ref().and_then(|r| r.outcome_of(&id));
                reading.after_without_new(without, serial_chain)
            }
            false => reading,
        };
        let depends_on = match reading {
            Reading::DependsOnNew { .. } => may_depend.remove(&id).unwrap_or_default(),
            _ => Vec::new(),
        };
        if reading == Reading::Holds && matches!(at_head, AtHead::Present(_)) {
            continue;
        }
        let file = plan.files.get(&id).cloned().unwrap_or_default();
        let failure = not_collected.get(&id).cloned().or_else(|| {
            replay
                .as_ref()
                .and_then(|r| r.test(&id))
                .and_then(|t| t.message.clone())
        });
        let missed_rule = match &at_head {
            AtHead::Uncollected { at } => missed_rule(&head_ini, at),
            _ => None,
        };
        let mut files = vec![file.clone()];
        files.extend(repro_files.iter().cloned());
        out.tests.push(Replayed {
            base_lines: base_lines(cx.base, &file, &id),
            edited_candidate: source_bases.contains(id.as_str()),
            nodeid: id,
            at_head,
            replay: replayed,
            control,
            reading,
            failure,
            missed_rule,
            repro_files: files,
            depends_on,
        });
    }

    // The test-source replay's readings, from the same runs.
    let mut sources = Vec::new();
    for c in cx.candidates {
        let head_outcome = cx.head_run.outcome_of(&c.nodeid).unwrap_or(Outcome::Error);
        let on_base = order
            .contains(&c.base_nodeid)
            .then(|| replay_outcome(&c.base_nodeid));
        let confirmed_red = on_base.is_some_and(|o| !o.is_green())
            && control_outcome(&c.base_nodeid).is_some_and(Outcome::is_green)
            && !unconfirmed.contains(&c.base_nodeid);
        let mut reading = source_replay::Reading::of(head_outcome, on_base, confirmed_red);
        // Its base version fails on a name the head removed or renamed: the head's test makes
        // the base's demand if it is the base's test calling another name and nothing else
        // changed; if not, nothing reads the demand.
        let gone_name = gone_names.get(&c.base_nodeid);
        if let (false, Some(old)) = (on_base.is_some_and(Outcome::is_green), gone_name) {
            let follows = crate::engine::source_replay::follows_rename(cx.base, cx.head, c, old);
            reading = match (follows, head_outcome.is_green()) {
                (true, true) => source_replay::Reading::Refactor,
                _ => source_replay::Reading::Inconclusive,
            };
        }
        // A base version red on the base too, in the same order, met no demand there: as the
        // base-suite replay reads it (`fails-on-base`), nothing the base met is lost, and the
        // replay has decided that much.
        let fails_on_base = gone_name.is_none()
            && on_base.is_some_and(|o| !o.is_green())
            && control_outcome(&c.base_nodeid).is_some_and(|o| !o.is_green());
        let undecided = (reading == source_replay::Reading::Inconclusive
            && head_outcome.is_green()
            && !fails_on_base)
            .then(|| source_replay::Undecided::of(on_base, gone_name.map(String::as_str)));
        let mut read = crate::engine::source_replay::report_of(
            c,
            head_outcome,
            on_base,
            reading,
            cx.base,
            cx.head,
        );
        read.undecided = undecided;
        sources.push(read);
    }
    Ok((out, sources))
}

/// The base-suite replay under way (when the patch touched what the base's tests are made of),
/// and the edited tests the test-source replay reads from its runs.
pub(crate) struct Begun {
    started: Option<Replaying>,
    candidates: Vec<Candidate>,
    session_changed: bool,
}

/// Plans the replay and starts it in the head's file order, after the file-order run
/// (`file_node`) gave that order; finds the edited tests the test-source replay reads. `delta`:
/// the fixture delta with the traced files.
pub(crate) fn begin(
    engine: &Engine,
    j: &Judging,
    delta: &Delta,
    file_run: &RunResult,
    file_node: NodeId,
) -> Result<Begun> {
    let (base, head) = (&engine.base.snapshot, &engine.head.snapshot);
    let candidates = crate::engine::source_replay::candidates(
        &j.edited,
        &j.base_ids,
        &j.head_ids,
        file_run,
        base,
        head,
    );
    let (base_collection, head_collection) = (&j.base.collection, &j.head.collection);
    let plan = plan(
        engine,
        base,
        head,
        base_collection,
        head_collection,
        delta,
        j.frozen,
    )?;
    let session_changed = plan.as_ref().is_some_and(Plan::session_changed);
    let started = match plan {
        Some(plan) => Some(start(engine, plan, &file_run.order, &[file_node])?),
        None => None,
    };
    Ok(Begun {
        started,
        candidates,
        session_changed,
    })
}

/// Reads the replay and the test-source replay from its runs, and what hooks made of the
/// head's file-order run (`head_run`).
pub(crate) fn finish(
    engine: &Engine,
    begun: Begun,
    j: &Judging,
    delta: &Delta,
    head_run: &RunResult,
) -> Result<SpecReplay> {
    let (base_suite, source_replay) = match begun.started {
        Some(started) => {
            let cx = Context {
                base: &engine.base.snapshot,
                head: &engine.head.snapshot,
                head_collection: &j.head.collection,
                head_run,
                candidates: &begun.candidates,
                edited: &j.edited,
                delta,
            };
            let (read, sources) = read(engine, started, &cx)?;
            (Some(read), sources)
        }
        None => (None, Vec::new()),
    };
    Ok(SpecReplay {
        base_suite,
        source_replay,
        altered: hook_altered(head_run),
        session_changed: begun.session_changed,
    })
}

/// The tests of the head's run that a hook made look green: the plugin's own record says they
/// failed (see `docs/plugin-protocol.md`).
fn hook_altered(head_run: &RunResult) -> Vec<Altered> {
    head_run
        .tests
        .iter()
        .filter(|t| rule::hook_altered(t.outcome, t.reported))
        .map(|t| Altered {
            nodeid: t.nodeid.clone(),
            outcome: t.outcome,
            reported: t.reported.unwrap_or(Outcome::Passed),
            message: t.message.clone(),
        })
        .collect()
}

fn wait(engine: &Engine, node: NodeId, what: &str) -> Result<RunResult> {
    engine
        .wait_run(node)?
        .map_err(|e| Error::Infra(format!("{what} failed: {e}")))
}

/// Which of the head's collection rules the test at `at` (`file::Class::name`) misses, with
/// that option's value; `None` when its place matches them all (`__test__ = False`,
/// `norecursedirs`).
fn missed_rule(ini: &PytestIni, at: &str) -> Option<(&'static str, Vec<String>)> {
    let (file, func) = testsrc::split_nodeid(at);
    let mut classes: Vec<&str> = at.split("::").skip(1).collect();
    classes.pop();
    let testpaths = ini.testpaths();
    let under = |t: &String| {
        let t = t.trim_end_matches('/');
        file == t || file.starts_with(&format!("{t}/"))
    };
    if !ini.is_test_file(file) {
        Some(("python_files", ini.python_files()))
    } else if !testpaths.is_empty() && !testpaths.iter().any(under) {
        Some(("testpaths", testpaths))
    } else if !ini.is_test_function(func) {
        Some(("python_functions", ini.python_functions()))
    } else if classes.iter().any(|c| !ini.is_test_class(c)) {
        Some(("python_classes", ini.python_classes()))
    } else {
        None
    }
}

/// The base's lines of a test (its function), for the message.
fn base_lines(base: &Snapshot, file: &str, id: &str) -> Vec<String> {
    let (_, func) = testsrc::split_nodeid(id);
    text(base, file)
        .and_then(|t| testsrc::function_source(&t, func))
        .map(|s| {
            s.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .take(6)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The two sides' Python sources, parsed on demand: where a gone test's function went, and
/// whether what a failure says is missing was removed by the head.
struct ParsedSources<'a> {
    base: &'a Snapshot,
    head: &'a Snapshot,
    parsed: HashMap<(bool, String), Option<(String, SourceFile)>>,
}

impl<'a> ParsedSources<'a> {
    fn new(base: &'a Snapshot, head: &'a Snapshot) -> ParsedSources<'a> {
        ParsedSources {
            base,
            head,
            parsed: HashMap::new(),
        }
    }

    fn get(&mut self, head: bool, path: &str) -> Option<&(String, SourceFile)> {
        let snapshot = if head { self.head } else { self.base };
        self.parsed
            .entry((head, path.to_string()))
            .or_insert_with(|| {
                let t = text(snapshot, path)?;
                let f = SourceFile::parse(&t);
                Some((t, f))
            })
            .as_ref()
    }

    /// Where the base test `id` (of `file`) is in the head's tree, as the node id it would have
    /// there: its own file and name, or the function with its body (the same tokens, or the
    /// same but for expected values) in its file or in a changed module.
    fn find(&mut self, id: &str, file: &str, changed: &[String]) -> Option<String> {
        let (_, func) = testsrc::split_nodeid(id);
        let base_source = {
            let (t, _) = self.get(false, file)?;
            testsrc::function_source(t, func)?
        };
        if self
            .get(true, file)
            .is_some_and(|(_, f)| f.definition(id).is_some())
        {
            return Some(id.to_string());
        }
        let mut files: Vec<String> = vec![file.to_string()];
        files.extend(changed.iter().filter(|p| p.as_str() != file).cloned());
        for f in files {
            let Some((t, outline)) = self.get(true, &f) else {
                continue;
            };
            for name in outline.functions() {
                let Some(source) = testsrc::function_source(t, &name) else {
                    continue;
                };
                if likeness(&base_source, &source).is_some_and(|l| l <= Likeness::AssertLiterals) {
                    let suffix = id.split_once("::").map_or("", |(_, s)| s);
                    let renamed = suffix.replacen(func, &name, 1);
                    return Some(format!("{f}::{renamed}"));
                }
            }
        }
        None
    }

    /// What the head did with what `missing` names: removed it (a module the base has and the
    /// head does not, or a name a changed base module binds that no head module among `changed`
    /// binds, nor holds under another name), renamed it (a head module holds the same function
    /// under another name), or kept it.
    fn gone(&mut self, missing: &Missing, changed: &[String]) -> Gone {
        match missing {
            Missing::Module(m) => {
                let tail = m.replace('.', "/");
                let is_module = |p: &str| {
                    p.ends_with(&format!("{tail}.py"))
                        || p.ends_with(&format!("{tail}/__init__.py"))
                };
                let had = self
                    .base
                    .entries
                    .iter()
                    .any(|e| is_module(&e.path.to_string()));
                let has = self
                    .head
                    .entries
                    .iter()
                    .any(|e| is_module(&e.path.to_string()));
                match had && !has {
                    true => Gone::Removed { name: None },
                    false => Gone::Kept,
                }
            }
            Missing::Name(n) => {
                let mut base_source = None;
                for p in changed {
                    if let Some((t, f)) = self.get(false, p) {
                        if f.binds(n) {
                            base_source = Some(testsrc::function_source(t, n).unwrap_or_default());
                            break;
                        }
                    }
                }
                let Some(base_source) = base_source else {
                    return Gone::Kept;
                };
                for p in changed {
                    let Some((t, f)) = self.get(true, p) else {
                        continue;
                    };
                    if f.binds(n) {
                        return Gone::Kept;
                    }
                    let moved = (!base_source.is_empty())
                        .then(|| {
                            f.functions().into_iter().find(|g| {
                                testsrc::function_source(t, g).is_some_and(|s| {
                                    likeness(&base_source, &s) == Some(Likeness::Same)
                                })
                            })
                        })
                        .flatten();
                    if moved.is_some() {
                        return Gone::Renamed { old: n.clone() };
                    }
                }
                Gone::Removed {
                    name: Some(n.clone()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use fixgate_cache::MemStore;

    use super::*;
    use crate::audit::base_suite::How;
    use crate::engine::exec::RunSpec;
    use crate::engine::testing::{items, stand_in, tree, with_engine, Before, Fake};

    const TEST_A: &str =
        "def test_1():\n    assert f() == 1\n\n\ndef test_2():\n    assert g() == 2\n";

    /// The plan of the patch from `base` to `head` (both (path, text) trees), whose collections
    /// are the node ids given.
    fn plan_of(
        base: &[(&str, &str)],
        head: &[(&str, &str)],
        base_ids: &[&str],
        head_ids: &[&str],
    ) -> Option<Plan> {
        let ((_b, base), (_h, head)) = (tree(base), tree(head));
        let fake = Arc::new(Fake::new(|_: &RunSpec, _: &str, _: &[String]| {
            Outcome::Passed
        }));
        with_engine(&MemStore::new(), &base, &head, fake, |engine| {
            let collection = |ids: &[&str]| Collection {
                items: items(ids),
                ..Collection::default()
            };
            let (b, h) = (collection(base_ids), collection(head_ids));
            plan(
                engine,
                &base,
                &head,
                &b,
                &h,
                &Delta::default(),
                &HashSet::new(),
            )
            .unwrap()
        })
    }

    #[test]
    fn a_patch_that_leaves_the_tests_alone_replays_nothing() {
        let base = [("pkg/m.py", "X = 1\n"), ("tests/test_a.py", TEST_A)];
        let head = [("pkg/m.py", "X = 2\n"), ("tests/test_a.py", TEST_A)];
        let ids = ["tests/test_a.py::test_1", "tests/test_a.py::test_2"];
        assert!(plan_of(&base, &head, &ids, &ids).is_none());
    }

    #[test]
    fn an_edited_test_file_replays_its_base_tests_with_its_base_bytes() {
        let edited = TEST_A.replace("== 2", "== 3");
        let base = [
            ("tests/test_a.py", TEST_A),
            ("tests/test_b.py", "def test_3():\n    pass\n"),
        ];
        let head = [
            ("tests/test_a.py", edited.as_str()),
            ("tests/test_b.py", "def test_3():\n    pass\n"),
        ];
        let ids = [
            "tests/test_a.py::test_1",
            "tests/test_a.py::test_2",
            "tests/test_b.py::test_3",
        ];
        let plan = plan_of(&base, &head, &ids, &ids).unwrap();
        assert!(!plan.scope.whole && !plan.session_changed());
        assert_eq!(plan.scope.tests, ids[..2]);
        let overlaid: Vec<(String, Option<&[u8]>)> = (plan.overlay.iter())
            .map(|(p, b)| (p.to_string(), b.as_deref()))
            .collect();
        assert_eq!(
            overlaid,
            [("tests/test_a.py".to_string(), Some(TEST_A.as_bytes()))]
        );
    }

    #[test]
    fn a_changed_conftest_replays_the_whole_base_suite() {
        let base = [("conftest.py", ""), ("tests/test_a.py", TEST_A)];
        let head = [("conftest.py", "import os\n"), ("tests/test_a.py", TEST_A)];
        let ids = ["tests/test_a.py::test_1", "tests/test_a.py::test_2"];
        let plan = plan_of(&base, &head, &ids, &ids).unwrap();
        assert!(plan.scope.whole && plan.session_changed());
        assert_eq!(plan.scope.tests, ids);
    }

    #[test]
    fn a_deleted_test_that_fails_on_the_heads_code_is_a_hidden_failure_confirmed_twice() {
        // The head deleted test_2, whose base version fails on the head's code (the replay, on
        // the head's side) and passes on the base's (the control).
        let head_a = "def test_1():\n    assert f() == 1\n";
        let ((_b, base), (_h, head)) = (
            tree(&[("tests/test_a.py", TEST_A)]),
            tree(&[("tests/test_a.py", head_a)]),
        );
        let rule = |run: &RunSpec, id: &str, _: &[String]| {
            let on_head = run.label.starts_with("base-suite-run");
            match (id, on_head) {
                ("tests/test_a.py::test_2", true) => Outcome::Failed,
                _ => Outcome::Passed,
            }
        };
        let mut fake = Fake::new(rule);
        fake.overlaid = Collection {
            items: items(&["tests/test_a.py::test_1", "tests/test_a.py::test_2"]),
            ..Collection::default()
        };
        let fake = Arc::new(fake);
        let spec = with_engine(&MemStore::new(), &base, &head, fake.clone(), |engine| {
            let before = Before::new(
                engine,
                &["tests/test_a.py::test_1", "tests/test_a.py::test_2"],
                &["tests/test_a.py::test_1"],
            );
            let j = before.judging(&[]);
            let head_run = RunResult::empty(Vec::new()).with_tests(
                vec!["tests/test_a.py::test_1".into()],
                vec![crate::pytest::result::TestResult::missing(
                    "tests/test_a.py::test_1",
                    Outcome::Passed,
                    String::new(),
                    0.0,
                    0.0,
                )],
            );
            let file_node = stand_in(engine, "file-order run");
            let delta = Delta::default();
            let begun = begin(engine, &j, &delta, &head_run, file_node).unwrap();
            finish(engine, begun, &j, &delta, &head_run).unwrap()
        });
        let read = spec.base_suite.expect("the patch removed a base test");
        assert!(!read.whole);
        let found: Vec<(&str, &AtHead, Reading)> = (read.tests.iter())
            .map(|t| (t.nodeid.as_str(), &t.at_head, t.reading))
            .collect();
        assert_eq!(
            found,
            [(
                "tests/test_a.py::test_2",
                &AtHead::Deleted,
                Reading::Hidden(How::Deleted)
            )]
        );
        // The replay and its control, then both again to confirm the hidden failure.
        let mut ran = fake.ran();
        ran.sort();
        assert_eq!(
            ran,
            [
                "base-suite-control",
                "base-suite-control#1",
                "base-suite-run",
                "base-suite-run#1"
            ]
        );
        assert!(spec.source_replay.is_empty() && spec.altered.is_empty());
    }

    #[test]
    fn a_test_out_of_collection_names_the_rule_it_misses() {
        let ini = PytestIni::find(|f| {
            (f == "pytest.ini").then(|| "[pytest]\npython_functions = check_*\n".to_string())
        });
        assert_eq!(
            missed_rule(&ini, "tests/test_a.py::test_1"),
            Some(("python_functions", vec!["check_*".to_string()]))
        );
        assert_eq!(
            missed_rule(&ini, "tests/helpers.py::check_1"),
            Some(("python_files", ini.python_files()))
        );
        assert_eq!(missed_rule(&ini, "tests/test_a.py::check_1"), None);
        assert!(in_test_dir("tests/unit/test_a.py") && !in_test_dir("pkg/tests.py"));
    }
}
