//! Which tests the shuffled orders run: the rule that makes an audit cost what the patch can
//! affect (docs/impact.md).
//!
//! The file-order and reversed runs record, per test, the repository's code it ran, the files it
//! read and wrote, and the shared state it left changed (`crate::pytest::driver::Record`): the
//! base's over its whole selection, the head's over what this rule gives from the base's
//! recording and the footprint, the rest carried from the base (`crate::engine::carry`), or over
//! the whole selection where that cannot be decided. A test's outcome can follow the order only
//! through state another test leaves behind, so the shuffled orders need:
//!
//! - the *affected* tests: new or edited tests, tests that ran a code object of the footprint,
//!   read one of its files, or see a module changed at module level (ran its code, or their
//!   file, or a file whose code they ran, imports it): what the patch may have made flaky or
//!   order-dependent;
//! - the *state writers*: tests that left a module global of the repository changed, or wrote
//!   a file of the tree, in the file-order or reversed run;
//! - the tests that *read* what the writers write: whose code names the written module or one
//!   of its globals (`crate::audit::reach`; where the names cannot tell, that see it), or whose
//!   traces read, list or import the written file.
//!
//! Every other test keeps, in each shuffled order, the outcome the file-order and reversed runs
//! gave it: its outcome cannot depend on the order. The orders run in full instead when the
//! recording cannot tell: the footprint is everything, a changed function ran outside any test
//! (what it computed may be held anywhere), a test left state changed that any test may read
//! (the environment, the working directory, the import system, a global of a module outside
//! the repository, a process setting, a thread), or a trace is incomplete (a subprocess, the
//! network, a C extension of the repository, a run whose recording failed). `--full` asks for
//! full orders too.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::footprint::{Footprint, Imports};
use crate::audit::reach::Names;
use crate::pytest::events::StateChange;
use crate::pytest::result::{RunResult, TestResult};

/// Why the shuffled orders run the whole selection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// `--full`.
    Asked,
    /// Neither `--scoped` nor `[tool.fixgate] scoped = true`: the default.
    NotAsked,
    /// The footprint is everything (`None`: what it is made of is not known).
    Footprint(Option<crate::audit::footprint::Everything>),
    /// A changed function ran outside any test.
    RanAtCollection { path: String, line: u32 },
    /// A changed file was read outside any test (while the suite was collected).
    ReadAtCollection(String),
    /// A test left state changed that any test may read.
    SharedState { test: String, change: StateChange },
    /// What a test (`None`: the session) did is not fully known.
    Incomplete { subject: Option<String>, gap: Gap },
}

/// What a recording does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Gap {
    /// The recording failed, with what it said.
    Recording(String),
    /// The code that ran outside tests.
    SessionCode,
    /// The plugin hit an internal error while tracing.
    PluginError,
    /// It used what the trace cannot follow (a subprocess, a mapped file).
    Untraced(String),
    /// It used the network.
    Network(String),
    /// It imported a C extension of the repository, whose state is not seen.
    Extension(String),
    /// The code a test ran.
    Code,
}

/// What the patch can affect, and what the shuffled orders run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Impact {
    /// The tests the patch affects: new or edited, or reached by its footprint (`None`: every
    /// test, the footprint is everything).
    pub(crate) affected: Option<BTreeSet<String>>,
    pub(crate) scope: ImpactScope,
    /// The tests the head's file-order and reversed runs ran, every other one carried from the
    /// base's runs of the same orders (`None`: they ran the whole selection).
    pub(crate) whole: Option<BTreeSet<String>>,
    /// Why a scoped audit's file-order and reversed runs ran the whole selection.
    pub(crate) whole_why: Option<WholeWhy>,
    /// The base's tests whose outcome can follow the order on the base, by the base's own
    /// recording: its state writers and their readers ([`ImpactScope::sensitive`] of the scope read
    /// off it; `None`: not known). Any other base test gives the same outcome in every order of
    /// the base, which settles the base check of its pairs without a run
    /// (`crate::audit::base_check::settled`).
    pub(crate) base_sensitive: Option<BTreeSet<String>>,
}

/// Why a scoped audit's file-order and reversed runs on the head could not carry tests from the
/// base (`crate::engine::carry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WholeWhy {
    /// The base's run of an order failed.
    BaseRunFailed { order: String, error: String },
    /// The base's recording cannot scope the head's runs.
    Base(Full),
    /// What the head's runs recorded cannot be scoped.
    Head(Full),
    /// A test the head's runs carried is in the scope their recording gives (a patched test now
    /// writes what it reads).
    Carried(String),
}

/// What the shuffled orders run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ImpactScope {
    Full(Full),
    Scoped {
        /// The tests each shuffled order runs (in the order's own sequence): the affected
        /// tests, the state writers and their readers.
        run: BTreeSet<String>,
        /// The state writers among them.
        writers: BTreeSet<String>,
        /// The tests that read what the writers write (affected or not).
        readers: BTreeSet<String>,
    },
}

impl ImpactScope {
    /// Whether a shuffled order runs `nodeid`.
    pub(crate) fn runs(&self, nodeid: &str) -> bool {
        match self {
            ImpactScope::Full(_) => true,
            ImpactScope::Scoped { run, .. } => run.contains(nodeid),
        }
    }

    /// The tests whose outcome can follow the order, whatever the patch affects: the state
    /// writers and their readers (`None`: the recording cannot tell).
    pub(crate) fn sensitive(&self) -> Option<BTreeSet<String>> {
        match self {
            ImpactScope::Full(_) => None,
            ImpactScope::Scoped {
                writers, readers, ..
            } => Some(writers.union(readers).cloned().collect()),
        }
    }

    /// Whether `nodeid` may share a process with others of its kind in place of a run by
    /// itself: the recording names it no state writer, so that it changes nothing another test
    /// sees (never, when the orders run in full: nothing says so).
    pub(crate) fn shares(&self, nodeid: &str) -> bool {
        match self {
            ImpactScope::Full(_) => false,
            ImpactScope::Scoped { run, writers, .. } => {
                run.contains(nodeid) && !writers.contains(nodeid)
            }
        }
    }
}

/// The files a test wrote in the tree (it may have left them changed for the next test).
fn written(t: &TestResult) -> impl Iterator<Item = &String> {
    let trace = &t.trace;
    trace
        .write
        .iter()
        .chain(&trace.remove)
        .chain(&trace.mkdir)
        .chain(trace.rename.iter().flat_map(|(a, b)| [a, b]))
        .chain(t.changed.iter().map(|c| &c.path))
}

/// Whether a test's traces read `path` (or list a directory holding it).
fn reads_file(t: &TestResult, path: &str) -> bool {
    let trace = &t.trace;
    trace
        .read
        .iter()
        .chain(&trace.sqlite)
        .chain(&trace.import)
        .chain(&trace.write)
        .any(|p| p == path)
        || trace.list.iter().any(|d| {
            d.is_empty()
                || path
                    .strip_prefix(d.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
}

/// What a test sees of the repository's modules: the files whose code it ran, its own file,
/// and everything those import.
fn sees(t: &TestResult, imports: &Imports) -> BTreeSet<String> {
    let own = t.nodeid.split("::").next().unwrap_or(&t.nodeid).to_string();
    let mut files: BTreeSet<String> = t.code.iter().flat_map(|c| c.keys().cloned()).collect();
    files.insert(own);
    let mut out = files.clone();
    for f in &files {
        out.extend(imports.of(f).cloned());
    }
    out
}

/// What the rule reads of the sources: the head's imports, and what code reaches by name.
pub(crate) struct Reach<'a> {
    pub(crate) imports: &'a Imports,
    pub(crate) names: &'a Names,
}

/// Whose lines the code a run recorded is numbered by: a function below a changed one starts
/// on another line in the head than in the base.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lines<'a> {
    /// The head's: its own runs.
    Head,
    /// The base's: the base's own runs.
    Base,
    /// The head's runs, with these tests carried from the base's runs (their code is the
    /// base's; the session's is the head's).
    Carried(&'a BTreeSet<String>),
}

impl Lines<'_> {
    fn base_test(&self, nodeid: &str) -> bool {
        match self {
            Lines::Head => false,
            Lines::Base => true,
            Lines::Carried(ids) => ids.contains(nodeid),
        }
    }

    /// The changed functions' spans as the session's recorded code numbers them.
    fn session_spans<'f>(&self, footprint: &'f Footprint) -> &'f BTreeMap<String, Vec<(u32, u32)>> {
        match self {
            Lines::Base => &footprint.base_functions,
            Lines::Head | Lines::Carried(_) => &footprint.functions,
        }
    }
}

/// What the patch affects and the scope of the shuffled orders, from the recorded file-order
/// and reversed runs (whose code is numbered by `lines`), the patch's footprint and the new or
/// edited tests.
pub(crate) fn impact(
    file: &RunResult,
    reversed: &RunResult,
    footprint: &Footprint,
    edited: &BTreeSet<String>,
    reach: &Reach,
    lines: Lines,
) -> Impact {
    let affected = affected(file, footprint, edited, reach.imports, lines);
    let scope = match &affected {
        None => ImpactScope::Full(Full::Footprint(footprint.everything.clone())),
        Some(affected) => scope(file, reversed, footprint, affected, reach, lines),
    };
    Impact {
        affected,
        scope,
        whole: None,
        whole_why: None,
        base_sensitive: None,
    }
}

/// The tests the patch affects: the new and edited tests, the tests that ran a code object of
/// the footprint, read one of its files, or see a module changed at module level, and the tests
/// whose code is not known. `None` when the footprint is everything.
fn affected(
    file: &RunResult,
    footprint: &Footprint,
    edited: &BTreeSet<String>,
    imports: &Imports,
    lines: Lines,
) -> Option<BTreeSet<String>> {
    if footprint.everything.is_some() {
        return None;
    }
    let touched = |t: &TestResult| {
        let Some(code) = &t.code else {
            return true;
        };
        let base = lines.base_test(&t.nodeid);
        let has = |path: &str, l: u32| match base {
            true => footprint.has_base_code(path, l),
            false => footprint.has_code(path, l),
        };
        edited.contains(&t.nodeid)
            || code
                .iter()
                .any(|(path, firsts)| firsts.iter().any(|&l| has(path, l)))
            || footprint.files.iter().any(|f| reads_file(t, f))
            || (!footprint.modules.is_empty() && {
                let seen = sees(t, imports);
                footprint.modules.iter().any(|m| seen.contains(m))
            })
    };
    let mut out: BTreeSet<String> = file
        .tests
        .iter()
        .filter(|t| touched(t))
        .map(|t| t.nodeid.clone())
        .collect();
    // A new or edited test the file-order run did not report is affected too.
    out.extend(edited.iter().cloned());
    Some(out)
}

/// The scope of the shuffled orders, given the affected tests.
fn scope(
    file: &RunResult,
    reversed: &RunResult,
    footprint: &Footprint,
    affected: &BTreeSet<String>,
    reach: &Reach,
    lines: Lines,
) -> ImpactScope {
    if let Some(why) = incomplete(file, reversed) {
        return ImpactScope::Full(why);
    }
    let session = file.session_code.as_ref().expect("checked by incomplete");
    let spans = lines.session_spans(footprint);
    for (path, firsts) in session {
        if let Some(&line) = firsts.iter().find(|&&l| {
            spans
                .get(path)
                .is_some_and(|spans| spans.iter().any(|&(a, b)| a <= l && l <= b))
        }) {
            return ImpactScope::Full(Full::RanAtCollection {
                path: path.clone(),
                line,
            });
        }
    }
    let session_read = file
        .session_trace
        .read
        .iter()
        .chain(&file.session_trace.sqlite)
        .chain(&file.session_trace.import);
    for p in session_read {
        if footprint.files.contains(p) {
            return ImpactScope::Full(Full::ReadAtCollection(p.clone()));
        }
    }
    let reversed_state: BTreeMap<&str, &[StateChange]> = reversed
        .tests
        .iter()
        .map(|t| (t.nodeid.as_str(), t.state.as_slice()))
        .collect();
    let mut writers = BTreeSet::new();
    // Each written module with the globals the writers changed.
    let mut written_modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut written_files: BTreeSet<&String> = BTreeSet::new();
    for t in &file.tests {
        let id = t.nodeid.as_str();
        let state = t
            .state
            .iter()
            .chain(reversed_state.get(id).copied().unwrap_or_default());
        for change in state {
            if change.read_by_anyone() {
                return ImpactScope::Full(Full::SharedState {
                    test: id.to_string(),
                    change: change.clone(),
                });
            }
            // A pure function's cache holding frozen values: what a later call gets from it is
            // what it would compute (see `Names::pure_function`).
            if let StateChange::Cache { home, function, .. } = change {
                if reach.names.pure_function(home, function) {
                    continue;
                }
            }
            if let StateChange::Global { path, name } | StateChange::Cache { path, name, .. } =
                change
            {
                written_modules
                    .entry(path.clone())
                    .or_default()
                    .insert(name.clone());
                writers.insert(id.to_string());
            }
        }
        for f in written(t) {
            written_files.insert(f);
            writers.insert(id.to_string());
        }
        // A module first imported during the test (its body, line 0, ran there): the test set
        // every value the module computes at import, for every later test.
        for (path, firsts) in t.code.iter().flatten() {
            if firsts.contains(&0) {
                written_modules.entry(path.clone()).or_default();
                writers.insert(id.to_string());
            }
        }
    }
    for t in &reversed.tests {
        for f in written(t) {
            written_files.insert(f);
            writers.insert(t.nodeid.clone());
        }
    }
    // The names through which code reaches each written module's globals (`None`: not known).
    let reaching: BTreeMap<&String, Option<BTreeSet<String>>> = written_modules
        .iter()
        .map(|(m, names)| {
            let names = names.iter().map(String::as_str);
            (m, reach.names.reaching(m, names))
        })
        .collect();
    // A written module the functions run while collecting name: what they computed (a
    // `pytest_generate_tests` hook's parameters) may be held by any test, which reads it then.
    // Where their names cannot tell, every test is read by what it sees.
    let collection = reach
        .names
        .of_collection(session, matches!(lines, Lines::Base));
    let read_at_collection = |m: &String| match (&collection, &reaching[m]) {
        (Some(collection), Some(names)) => collection.names(m, names),
        _ => false,
    };
    let mut readers = BTreeSet::new();
    for t in &file.tests {
        let id = t.nodeid.as_str();
        // What the test's code names, where that tells what it reaches (reach.rs).
        let words = (t.code.as_ref())
            .filter(|_| !written_modules.is_empty() && collection.is_some())
            .and_then(|code| reach.names.of_test(id, code, lines.base_test(id)));
        // What it sees, only where the names cannot tell (a large suite's tests each see
        // a few files: worth not listing for every test).
        let seen = std::cell::OnceCell::new();
        let reads_module = |m: &String| match (&words, &reaching[m]) {
            _ if read_at_collection(m) => true,
            (Some(words), Some(names)) => words.iter().any(|w| names.contains(*w)),
            _ => seen.get_or_init(|| sees(t, reach.imports)).contains(m),
        };
        let reads = written_modules.keys().any(reads_module)
            || written_files.iter().any(|f| reads_file(t, f));
        if reads {
            readers.insert(id.to_string());
        }
    }
    let run = (affected.iter().chain(&writers).chain(&readers))
        .cloned()
        .collect();
    ImpactScope::Scoped {
        run,
        writers,
        readers,
    }
}

/// Why the recording cannot decide, if it cannot.
fn incomplete(file: &RunResult, reversed: &RunResult) -> Option<Full> {
    let session = |gap: Gap| Full::Incomplete { subject: None, gap };
    if let Some(why) = &file.recording_error {
        return Some(session(Gap::Recording(why.clone())));
    }
    if file.session_code.is_none() {
        return Some(session(Gap::SessionCode));
    }
    if file.incomplete_trace || reversed.incomplete_trace {
        return Some(session(Gap::PluginError));
    }
    for trace in [&file.session_trace, &reversed.session_trace] {
        if let Some(u) = trace.unknown.first() {
            return Some(session(Gap::Untraced(u.clone())));
        }
        if let Some(n) = trace.network.first() {
            return Some(session(Gap::Network(n.clone())));
        }
    }
    for t in file.tests.iter().chain(&reversed.tests) {
        let test = |gap: Gap| Full::Incomplete {
            subject: Some(t.nodeid.clone()),
            gap,
        };
        if let Some(u) = t.trace.unknown.first() {
            return Some(test(Gap::Untraced(u.clone())));
        }
        if let Some(n) = t.trace.network.first() {
            return Some(test(Gap::Network(n.clone())));
        }
        if let Some(StateChange::Extension(path)) = t
            .state
            .iter()
            .find(|s| matches!(s, StateChange::Extension(_)))
        {
            return Some(test(Gap::Extension(path.clone())));
        }
    }
    if let Some(t) = file.tests.iter().find(|t| t.code.is_none()) {
        return Some(Full::Incomplete {
            subject: Some(t.nodeid.clone()),
            gap: Gap::Code,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::footprint::Everything;

    /// A passing test that ran `code` (each file with the first lines of what ran in it).
    fn test(nodeid: &str, code: &[(&str, &[u32])]) -> TestResult {
        let mut t = TestResult::missing(
            nodeid,
            crate::pytest::result::Outcome::Passed,
            "".into(),
            0.0,
            0.0,
        );
        t.code = Some(
            code.iter()
                .map(|(f, l)| (f.to_string(), l.to_vec()))
                .collect(),
        );
        t
    }

    /// A run of `tests` that recorded the session's code (none of it the patch's).
    fn run(tests: Vec<TestResult>) -> RunResult {
        let order = tests.iter().map(|t| t.nodeid.clone()).collect();
        let mut r = RunResult::empty(Vec::new()).with_tests(order, tests);
        r.session_code = Some(BTreeMap::new());
        r
    }

    /// The impact of a patch changing `app.py`'s lines 10 to 20 on the head's `file` run (the
    /// reversed run the same tests).
    fn impact_of(file: &RunResult, footprint: &Footprint) -> Impact {
        let (imports, names) = (Imports::default(), Names::default());
        let reach = Reach {
            imports: &imports,
            names: &names,
        };
        let edited = BTreeSet::new();
        impact(file, file, footprint, &edited, &reach, Lines::Head)
    }

    fn app_changed() -> Footprint {
        Footprint {
            functions: [("app.py".to_string(), vec![(10, 20)])].into(),
            ..Footprint::default()
        }
    }

    fn ids(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_test_that_ran_the_changed_code_is_affected_and_one_that_did_not_keeps_its_outcome() {
        let file = run(vec![
            test("t.py::test_app", &[("app.py", &[12])]),
            test(
                "t.py::test_other",
                &[("other.py", &[12]), ("app.py", &[30])],
            ),
        ]);
        let impact = impact_of(&file, &app_changed());
        assert_eq!(impact.affected, Some(ids(&["t.py::test_app"])));
        let scope = impact.scope;
        assert!(scope.runs("t.py::test_app") && !scope.runs("t.py::test_other"));
        assert_eq!(scope.sensitive(), Some(BTreeSet::new()));
        assert!(scope.shares("t.py::test_app"), "it writes nothing");
    }

    #[test]
    fn a_writer_of_a_global_brings_the_tests_that_see_its_module_and_shares_no_process() {
        let mut writer = test("t.py::test_writer", &[("other.py", &[1])]);
        writer.state = vec![StateChange::Global {
            path: "state.py".into(),
            name: "CACHE".into(),
        }];
        let reader = test("t.py::test_reader", &[("state.py", &[3])]);
        let bystander = test("t.py::test_bystander", &[("other.py", &[1])]);
        let file = run(vec![writer, reader, bystander]);
        let ImpactScope::Scoped {
            run,
            writers,
            readers,
        } = impact_of(&file, &app_changed()).scope
        else {
            panic!("a global of the repository scopes the orders")
        };
        assert_eq!(run, ids(&["t.py::test_reader", "t.py::test_writer"]));
        assert_eq!(writers, ids(&["t.py::test_writer"]));
        assert_eq!(readers, ids(&["t.py::test_reader"]));
        let scope = ImpactScope::Scoped {
            run,
            writers,
            readers,
        };
        assert!(!scope.shares("t.py::test_writer") && scope.shares("t.py::test_reader"));
    }

    #[test]
    fn a_file_written_by_one_test_brings_the_test_that_reads_it() {
        let mut writer = test("t.py::test_writer", &[("other.py", &[1])]);
        writer.trace.write = vec!["data/out.json".into()];
        let mut reader = test("t.py::test_reader", &[("other.py", &[1])]);
        reader.trace.read = vec!["data/out.json".into()];
        let file = run(vec![writer, reader, test("t.py::test_c", &[])]);
        let scope = impact_of(&file, &app_changed()).scope;
        assert_eq!(
            scope.sensitive(),
            Some(ids(&["t.py::test_reader", "t.py::test_writer"]))
        );
        assert!(!scope.runs("t.py::test_c"));
    }

    #[test]
    fn state_any_test_may_read_runs_the_whole_selection() {
        let mut t = test("t.py::test_env", &[]);
        t.state = vec![StateChange::Env("TZ".into())];
        let scope = impact_of(&run(vec![t]), &app_changed()).scope;
        assert_eq!(
            scope,
            ImpactScope::Full(Full::SharedState {
                test: "t.py::test_env".into(),
                change: StateChange::Env("TZ".into()),
            })
        );
        assert!(scope.runs("t.py::anything") && scope.sensitive().is_none());
    }

    #[test]
    fn what_the_recording_does_not_know_runs_the_whole_selection_and_says_whose_gap_it_is() {
        let mut online = test("t.py::test_online", &[]);
        online.trace.network = vec!["127.0.0.1:80".into()];
        assert_eq!(
            impact_of(&run(vec![online]), &app_changed()).scope,
            ImpactScope::Full(Full::Incomplete {
                subject: Some("t.py::test_online".into()),
                gap: Gap::Network("127.0.0.1:80".into()),
            })
        );
        let mut unrecorded = run(vec![test("t.py::test_a", &[])]);
        unrecorded.session_code = None;
        assert_eq!(
            impact_of(&unrecorded, &app_changed()).scope,
            ImpactScope::Full(Full::Incomplete {
                subject: None,
                gap: Gap::SessionCode,
            })
        );
        let mut session = run(vec![test("t.py::test_a", &[])]);
        session.session_code = Some([("app.py".to_string(), vec![15])].into());
        assert_eq!(
            impact_of(&session, &app_changed()).scope,
            ImpactScope::Full(Full::RanAtCollection {
                path: "app.py".into(),
                line: 15,
            })
        );
    }

    #[test]
    fn a_footprint_of_everything_affects_every_test() {
        let footprint = Footprint {
            everything: Some(Everything::Conftest("conftest.py".into())),
            ..Footprint::default()
        };
        let impact = impact_of(&run(vec![test("t.py::test_a", &[])]), &footprint);
        assert_eq!(impact.affected, None);
        assert_eq!(
            impact.scope,
            ImpactScope::Full(Full::Footprint(footprint.everything))
        );
    }
}
