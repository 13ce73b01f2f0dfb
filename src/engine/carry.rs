//! The head's file-order and reversed runs of a scoped audit, carried from the base where the
//! patch cannot reach (docs/impact.md).
//!
//! The base's own file-order and reversed runs record what each test ran, read, wrote and left
//! changed; they are keyed by the base's bytes alone, so every head audited against one base
//! finds them in the cache after the first. From them and the patch's footprint
//! (`crate::audit::scope`) the head's two runs need only the affected tests, the state writers,
//! their readers and the tests the base does not have; every other test keeps the base's result
//! in that order. What the head's runs record is then checked again: when the scope read off the
//! merged runs asks for a test the head's runs carried (a patched test now writes what a carried
//! test reads), or the base's recording cannot decide, both runs are made over the whole
//! selection instead, as in an audit without a base recording.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use fixgate_graph::{NodeError, NodeId};

use crate::audit::order::OrderLabel;
use crate::audit::scope::{Impact, ImpactScope, Lines, WholeWhy};
use crate::engine::collect::unfrozen;
use crate::engine::decoded::Decoded;
use crate::engine::judging::Judging;
use crate::engine::kind::NodeKind;
use crate::engine::matrix::{self, Started};
use crate::engine::runs::{decode_run, Run, RunRequest};
use crate::engine::scope::Scoping;
use crate::engine::step::Role;
use crate::engine::step::{lines_digest, node_bug, Computed, Encoding, Engine, Key, Step};
use crate::error::{Error, Result};
use crate::pytest::events::CollectedItem;
use crate::pytest::result::{RunResult, TestResult};

/// The two whole orders.
const WHOLE: [OrderLabel; 2] = [OrderLabel::File, OrderLabel::Reversed];

/// What a scoped audit's file-order and reversed runs came to: the matrix with those two runs in
/// (merged or whole), the file-order run, and the impact read off them.
pub(crate) struct Whole {
    pub(crate) started: Started,
    pub(crate) file: Arc<RunResult>,
    pub(crate) impact: Impact,
}

/// What the matrix's whole orders read: what the judgment's phases share (the head's selection
/// and collection, the base's, the edited tests, what the scope rule reads of the snapshots),
/// and the base's recorded runs when the head's collection read them already.
struct Inputs<'a> {
    judging: &'a Judging<'a>,
    base_runs: Option<&'a std::result::Result<BaseRuns, WholeWhy>>,
    scoping: &'a Scoping,
}

/// The matrix's orders under way (`labels`: file order, reversed, the seeds), with the
/// file-order run and what the patch affects. A scoped audit's whole orders are carried from the
/// base's runs where the patch cannot reach ([`whole_runs`]), and its shuffled orders added over
/// the scope their recording gives; any other audit runs every order over the whole selection
/// (`full`: because `--full` said so).
pub(crate) fn orders(
    engine: &Engine,
    j: &Judging,
    base_runs: Option<&std::result::Result<BaseRuns, WholeWhy>>,
    labels: &[OrderLabel],
    scoped: bool,
    full: bool,
) -> Result<Whole> {
    let inputs = &Inputs {
        judging: j,
        base_runs,
        scoping: j.scoping,
    };
    if !scoped {
        let started = matrix::start(engine, labels, &j.selection, j.head.node, false)?;
        let file = started.wait(engine, OrderLabel::File)?;
        let impact = crate::engine::scope::not_scoped(full);
        return Ok(Whole {
            started,
            file,
            impact,
        });
    }
    let mut whole = whole_runs(engine, inputs)?;
    let shuffled = labels.get(WHOLE.len()..).unwrap_or_default();
    let scope = &whole.impact.scope;
    (whole.started).add_scoped(engine, shuffled, &j.selection, j.head.node, scope)?;
    Ok(whole)
}

/// The base's recorded file-order and reversed runs over its selection: what the head's runs
/// carry tests from.
pub(crate) struct BaseRuns {
    nodes: BTreeMap<OrderLabel, NodeId>,
    runs: BTreeMap<OrderLabel, RunResult>,
    /// The impact last read off them, with the edited tests it was read for (the head's
    /// collection and its runs each ask, most often for the same).
    read: std::sync::Mutex<Option<(BTreeSet<String>, Impact)>>,
}

impl BaseRuns {
    /// The impact the base's recording gives (`edited`: the tests the patch edited or added).
    pub(crate) fn impact(
        &self,
        engine: &Engine,
        scoping: &Scoping,
        edited: &BTreeSet<String>,
    ) -> Impact {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((for_edited, impact)) = read.as_ref() {
            if for_edited == edited {
                return impact.clone();
            }
        }
        let impact = scoping.impact(
            engine,
            &self.runs[&OrderLabel::File],
            &self.runs[&OrderLabel::Reversed],
            edited,
            Lines::Base,
        );
        *read = Some((edited.clone(), impact.clone()));
        impact
    }

    /// The directories the suite's code listed outside any test (while the base collected, or
    /// in a session fixture), as its runs' sessions traced it: not pytest's own walk.
    pub(crate) fn listed_at_collection(&self) -> BTreeSet<String> {
        self.runs
            .values()
            .flat_map(|r| r.session_trace.list_code.iter().cloned())
            .collect()
    }
}

impl Drop for BaseRuns {
    fn drop(&mut self) {
        crate::engine::decoded::free_aside(std::mem::take(&mut self.runs));
    }
}

/// Runs (or finds cached) the base's recorded runs of the two whole orders over `selection`;
/// why they cannot carry when one failed.
pub(crate) fn base_runs(
    engine: &Engine,
    selection: &[CollectedItem],
    collection: NodeId,
) -> Result<std::result::Result<BaseRuns, WholeWhy>> {
    let mut nodes = BTreeMap::new();
    for l in WHOLE {
        let req = RunRequest::new(
            NodeKind::SeedRun.tagged(l, "base"),
            NodeKind::SeedRun,
            Role::Base,
            l.order(selection),
        )
        .inputs(&[collection])
        .record(matrix::record(l, true));
        nodes.insert(l, engine.add_run(&req)?);
    }
    // Each decoded on a thread of its own (a large suite's take tens of milliseconds each), and
    // every thread joined before any result is read.
    let joined: Vec<_> = std::thread::scope(|s| {
        let waits: Vec<_> = (nodes.iter())
            .map(|(l, id)| (*l, s.spawn(|| engine.wait_run(*id))))
            .collect();
        (waits.into_iter())
            .map(|(l, wait)| (l, wait.join()))
            .collect()
    });
    let mut runs = BTreeMap::new();
    for (l, joined) in joined {
        let waited = joined.map_err(|panic| {
            Error::panicked(&format!("the wait for the base's {l} run"), &*panic)
        })??;
        match waited {
            Ok(run) => {
                runs.insert(l, run);
            }
            Err(error) => {
                return Ok(Err(WholeWhy::BaseRunFailed {
                    order: l.to_string(),
                    error,
                }));
            }
        }
    }
    Ok(Ok(BaseRuns {
        nodes,
        runs,
        read: Default::default(),
    }))
}

/// Runs the head's file-order and reversed runs of a scoped audit, carrying from the base what
/// the patch cannot reach, and reads the impact off them.
fn whole_runs(engine: &Engine, inputs: &Inputs) -> Result<Whole> {
    match carried_runs(engine, inputs)? {
        Ok(whole) => Ok(whole),
        Err(why) => {
            let mut whole = whole_head_runs(engine, inputs)?;
            whole.impact.whole_why = Some(why);
            Ok(whole)
        }
    }
}

/// The runs over the whole head selection, as before any base recording.
fn whole_head_runs(engine: &Engine, inputs: &Inputs) -> Result<Whole> {
    let j = inputs.judging;
    let started = matrix::start(engine, &WHOLE, &j.selection, j.head.node, true)?;
    let file = started.wait(engine, OrderLabel::File)?;
    let reversed = started.wait(engine, OrderLabel::Reversed)?;
    let impact = (inputs.scoping).impact(engine, &file, &reversed, &j.edited, Lines::Head);
    Ok(Whole {
        started,
        file,
        impact,
    })
}

/// The carried runs, or why the head's runs must be whole.
fn carried_runs(engine: &Engine, inputs: &Inputs) -> Result<std::result::Result<Whole, WholeWhy>> {
    // The base's recorded runs, over the base's selection in its own orders.
    let read;
    let base = match inputs.base_runs {
        Some(base) => base,
        None => {
            let base = inputs.judging.base;
            let selection = unfrozen(&base.collection.items, inputs.judging.frozen);
            read = base_runs(engine, &selection, base.node)?;
            &read
        }
    };
    let base = match base {
        Ok(base) => base,
        Err(why) => return Ok(Err(why.clone())),
    };
    let j = inputs.judging;
    let base_impact = base.impact(engine, inputs.scoping, &j.edited);
    let scope = match &base_impact.scope {
        ImpactScope::Scoped { run, .. } => run,
        ImpactScope::Full(why) => return Ok(Err(WholeWhy::Base(why.clone()))),
    };
    // The head's runs: the scope, and every test the base's file-order run does not have.
    let in_base = |id: &str| base.runs[&OrderLabel::File].test(id).is_some();
    let keep: BTreeSet<String> = j
        .selection
        .iter()
        .map(|i| i.nodeid.clone())
        .filter(|id| scope.contains(id) || !in_base(id))
        .collect();
    let mut started = matrix::start_within(engine, &WHOLE, &j.selection, j.head.node, &keep)?;
    for l in WHOLE {
        let carried = CarriedRun {
            label: l,
            order: l.order(&j.selection),
            keep: keep.clone(),
            decoded: started.decoded.clone(),
        };
        let merged = engine.add(carried, &[started.nodes[&l], base.nodes[&l]], &[])?;
        started.nodes.insert(l, merged.id);
    }
    let file = started.wait(engine, OrderLabel::File)?;
    let reversed = started.wait(engine, OrderLabel::Reversed)?;
    let carried: BTreeSet<String> = j
        .selection
        .iter()
        .map(|i| i.nodeid.clone())
        .filter(|id| !keep.contains(id))
        .collect();
    let mut impact = inputs.scoping.impact(
        engine,
        &file,
        &reversed,
        &j.edited,
        Lines::Carried(&carried),
    );
    // Sound only when what the head's runs recorded asks for nothing they carried.
    match &impact.scope {
        ImpactScope::Scoped { run, .. } => {
            if let Some(id) = run.iter().find(|id| !keep.contains(*id)) {
                return Ok(Err(WholeWhy::Carried(id.clone())));
            }
        }
        ImpactScope::Full(why) => return Ok(Err(WholeWhy::Head(why.clone()))),
    }
    impact.whole = Some(keep);
    impact.base_sensitive = base_impact.scope.sensitive();
    Ok(Ok(Whole {
        started,
        file,
        impact,
    }))
}

/// The run of `label` put together from the head's run over `keep` and the base's run of the
/// same order (its inputs, in that order): every test of `order` (the head's whole order) with
/// the head's result when the head ran it, else the base's. The session's fields (its trace,
/// code, warnings, processes) are the head's.
pub(crate) struct CarriedRun {
    label: OrderLabel,
    order: Vec<String>,
    keep: BTreeSet<String>,
    /// Where the merged run is left decoded for the scope, the replays and the matrix.
    decoded: Arc<Decoded>,
}

impl Step for CarriedRun {
    type Output = RunResult;
    const ENCODING: Encoding = Run::ENCODING;

    fn kind(&self) -> NodeKind {
        NodeKind::CarriedRun
    }

    fn label(&self) -> String {
        NodeKind::CarriedRun.of(self.label)
    }

    fn key(&self, key: &mut Key) {
        // The label names the node (the order is in the key); the decoded runs are a cache.
        let CarriedRun {
            label: _,
            order,
            keep,
            decoded: _,
        } = self;
        key.param("order", lines_digest(order))
            .param("keep", lines_digest(keep));
    }

    fn compute(&self, runs: &[&[u8]]) -> std::result::Result<Computed<RunResult>, NodeError> {
        let [head, base] = runs else {
            return Err(node_bug("a carried run has two inputs"));
        };
        let head = decode_run(head)
            .map_err(|e| node_bug(format!("the head's run does not decode: {e}")))?;
        let base = decode_run(base)
            .map_err(|e| node_bug(format!("the base's run does not decode: {e}")))?;
        Ok(Computed::new(merge(head, base, &self.order)))
    }

    /// Left decoded: read next by the scope, the replays and the matrix, none decodes it
    /// again.
    fn keep(&self, merged: RunResult, bytes: &[u8]) {
        self.decoded.keep(bytes, &Arc::new(merged));
    }
}

/// The merged run: see [`CarriedRun`]. When the head's run had nothing to run (no process
/// started), the session's fields are the base's: the head's collection is the base's where
/// nothing the patch changed is in any test's reach.
fn merge(mut head: RunResult, mut base: RunResult, order: &[String]) -> RunResult {
    // Where each test of the order first stands, and the base's result there: the order's
    // strings are the keys (a large suite's base run has tens of thousands of tests).
    let mut position: HashMap<&str, usize> = HashMap::with_capacity(order.len());
    for (i, id) in order.iter().enumerate() {
        position.entry(id.as_str()).or_insert(i);
    }
    let mut base_tests: Vec<Option<TestResult>> = (0..order.len()).map(|_| None).collect();
    for t in std::mem::take(&mut base.tests) {
        if let Some(&i) = position
            .get(t.nodeid.as_str())
            .filter(|_| t.occurrence == 0)
        {
            base_tests[i] = Some(t);
        }
    }
    let mut head_tests: HashMap<String, Vec<_>> = HashMap::new();
    for t in std::mem::take(&mut head.tests) {
        head_tests.entry(t.nodeid.clone()).or_default().push(t);
    }
    let mut tests = Vec::with_capacity(order.len());
    for id in order {
        match head_tests.remove(id) {
            Some(ts) => {
                // An order that lists it again takes nothing of the base's for it.
                base_tests[position[id.as_str()]] = None;
                tests.extend(ts)
            }
            None => tests.extend(base_tests[position[id.as_str()]].take()),
        }
    }
    let session = match head.processes == 0 && head.executed.is_empty() {
        true => {
            base.processes = 0;
            base
        }
        false => head,
    };
    session.with_tests(order.to_vec(), tests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::exec::RunSpec;
    use crate::engine::testing::{tree, with_engine, Before, Fake};
    use crate::pytest::result::Outcome;

    fn test(id: &str, outcome: Outcome, occurrence: u32) -> TestResult {
        let mut t = TestResult::missing(id, outcome, String::new(), 0.0, 0.0);
        t.occurrence = occurrence;
        t
    }

    fn run(tests: Vec<TestResult>, processes: u32, warning: &str) -> RunResult {
        let order = tests.iter().map(|t| t.nodeid.clone()).collect();
        let mut r = RunResult::empty(Vec::new()).with_tests(order, tests);
        r.processes = processes;
        r.warnings.push(warning.to_owned());
        r
    }

    fn ids(order: &[&str]) -> Vec<String> {
        order.iter().map(|s| s.to_string()).collect()
    }

    fn outcomes(run: &RunResult) -> Vec<(&str, Outcome, u32)> {
        (run.tests.iter())
            .map(|t| (t.nodeid.as_str(), t.outcome, t.occurrence))
            .collect()
    }

    #[test]
    fn the_heads_results_replace_the_bases_in_the_heads_order() {
        let base = run(
            vec![
                test("a", Outcome::Passed, 0),
                test("b", Outcome::Passed, 0),
                test("c", Outcome::Passed, 0),
                test("c", Outcome::Failed, 1),
                test("d", Outcome::Failed, 1),
                test("gone", Outcome::Passed, 0),
            ],
            1,
            "base",
        );
        let head = run(
            vec![test("b", Outcome::Failed, 0), test("b", Outcome::Passed, 1)],
            2,
            "head",
        );
        let merged = merge(head, base, &ids(&["c", "b", "new", "d", "a"]));
        // Both of the head's b, the base's first c and a; nothing of a test only a second
        // occurrence of the base's has (d), nor of a test neither ran (new), nor of one the
        // order does not list (gone).
        assert_eq!(
            outcomes(&merged),
            [
                ("c", Outcome::Passed, 0),
                ("b", Outcome::Failed, 0),
                ("b", Outcome::Passed, 1),
                ("a", Outcome::Passed, 0),
            ]
        );
        assert_eq!(merged.executed, ids(&["c", "b", "b", "a"]));
        assert_eq!(merged.order, ids(&["c", "b", "new", "d", "a"]));
        // The session is the head's, which ran.
        assert_eq!(
            (merged.processes, &merged.warnings[..]),
            (2, &ids(&["head"])[..])
        );
    }

    #[test]
    fn the_bases_last_result_of_a_test_counts_and_a_test_listed_again_takes_nothing_more() {
        let base = run(
            vec![
                test("a", Outcome::Failed, 0),
                test("a", Outcome::Passed, 0),
                test("x", Outcome::Passed, 0),
            ],
            1,
            "base",
        );
        let head = run(vec![test("x", Outcome::Failed, 0)], 1, "head");
        let merged = merge(head, base, &ids(&["a", "x", "a", "x"]));
        assert_eq!(
            outcomes(&merged),
            [("a", Outcome::Passed, 0), ("x", Outcome::Failed, 0)]
        );
    }

    #[test]
    fn a_head_that_ran_nothing_keeps_the_bases_session_with_no_process() {
        let base = run(vec![test("a", Outcome::Passed, 0)], 3, "base");
        let head = run(Vec::new(), 0, "head");
        let merged = merge(head, base, &ids(&["a"]));
        assert_eq!(outcomes(&merged), [("a", Outcome::Passed, 0)]);
        assert_eq!(
            (merged.processes, &merged.warnings[..]),
            (0, &ids(&["base"])[..])
        );
    }

    const BASE_M: &str = "def f():\n    return 1\n\n\ndef g():\n    return 2\n";
    const HEAD_M: &str = "def f():\n    return 1\n\n\ndef g():\n    return 1 + 1\n";
    const TESTS: &str = "from pkg.m import f, g\n\n\ndef test_f():\n    assert f() == 1\n\n\n\
                         def test_g():\n    assert g() == 2\n";

    /// A scoped audit: the base's recorded runs say which tests ran the changed function, the
    /// head's file-order and reversed runs run those and carry the others from the base, and
    /// the shuffled orders run only them.
    #[test]
    fn a_scoped_audits_orders_run_what_the_patch_reaches_and_carry_the_rest() {
        let ((_b, base), (_h, head)) = (
            tree(&[("pkg/m.py", BASE_M), ("tests/test_m.py", TESTS)]),
            tree(&[("pkg/m.py", HEAD_M), ("tests/test_m.py", TESTS)]),
        );
        let (f, g) = ("tests/test_m.py::test_f", "tests/test_m.py::test_g");
        let mut fake = Fake::new(|_: &RunSpec, _: &str, _: &[String]| Outcome::Passed);
        // Each test ran its own function of pkg/m.py (numbered by its first line: the same on
        // both sides) and its own body.
        fake.code = [(f, 1, 4), (g, 5, 8)]
            .into_iter()
            .map(|(id, m, t)| {
                let code = [
                    ("pkg/m.py".to_string(), vec![m]),
                    ("tests/test_m.py".to_string(), vec![t]),
                ];
                (id.to_string(), code.into_iter().collect())
            })
            .collect();
        let fake = Arc::new(fake);
        let labels = [OrderLabel::File, OrderLabel::Reversed, OrderLabel::Seed(1)];
        let (impact, file) = with_engine(
            &fixgate_cache::MemStore::new(),
            &base,
            &head,
            fake.clone(),
            |engine| {
                let before = Before::new(engine, &[f, g], &[f, g]);
                let j = before.judging(&[]);
                let whole = orders(engine, &j, None, &labels, true, false).unwrap();
                (whole.impact, whole.file)
            },
        );
        let only_g: BTreeSet<String> = [g.to_string()].into();
        match &impact.scope {
            ImpactScope::Scoped { run, writers, .. } => {
                assert_eq!(run, &only_g);
                assert!(writers.is_empty());
            }
            ImpactScope::Full(why) => panic!("not scoped: {why:?}"),
        }
        assert_eq!(impact.whole.as_ref(), Some(&only_g));
        assert_eq!(impact.affected.as_ref(), Some(&only_g));
        // The carried file-order run has both tests, the head's own run of it only test_g.
        assert_eq!(
            (file.tests.iter())
                .map(|t| t.nodeid.as_str())
                .collect::<Vec<_>>(),
            [f, g]
        );
        let order = |label: &str| fake.order_of(label).unwrap_or_default();
        assert_eq!(order("seed-run(0)[base]"), [f, g]);
        assert_eq!(order("seed-run(0)[within]"), [g]);
        assert_eq!(order("seed-run(1)"), [g]);
    }
}
