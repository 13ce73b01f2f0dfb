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

use fixgate_graph::{Node, NodeId, Output};

use crate::audit::order::OrderLabel;
use crate::audit::scope::{Impact, ImpactScope, Lines, WholeWhy};
use crate::engine::impact;
use crate::engine::kind::NodeKind;
use crate::engine::matrix::{self, Started};
use crate::engine::runs::{decode_run, node_bug, Engine, Role, RunRequest};
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

/// The sides a scoped audit's whole runs read.
pub(crate) struct Inputs<'a> {
    /// The head's selection and collection node.
    pub(crate) selection: &'a [CollectedItem],
    pub(crate) collection: NodeId,
    /// The base's selection (its collection less the frozen tests) and collection node.
    pub(crate) base_selection: &'a [CollectedItem],
    pub(crate) base_collection: NodeId,
    /// The tests the patch edited or added.
    pub(crate) edited: &'a BTreeSet<String>,
    /// The base's recorded runs, when the head's collection read them already.
    pub(crate) base_runs: Option<&'a std::result::Result<BaseRuns, WholeWhy>>,
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
    pub(crate) fn impact(&self, engine: &Engine, edited: &BTreeSet<String>) -> Impact {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((for_edited, impact)) = read.as_ref() {
            if for_edited == edited {
                return impact.clone();
            }
        }
        let impact = impact::impact(
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
pub(crate) fn whole_runs(engine: &Engine, inputs: &Inputs) -> Result<Whole> {
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
    let started = matrix::start(engine, &WHOLE, inputs.selection, inputs.collection, true)?;
    let file = started.wait(engine, OrderLabel::File)?;
    let reversed = started.wait(engine, OrderLabel::Reversed)?;
    let impact = impact::impact(engine, &file, &reversed, inputs.edited, Lines::Head);
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
            read = base_runs(engine, inputs.base_selection, inputs.base_collection)?;
            &read
        }
    };
    let base = match base {
        Ok(base) => base,
        Err(why) => return Ok(Err(why.clone())),
    };
    let base_impact = base.impact(engine, inputs.edited);
    let scope = match &base_impact.scope {
        ImpactScope::Scoped { run, .. } => run,
        ImpactScope::Full(why) => return Ok(Err(WholeWhy::Base(why.clone()))),
    };
    // The head's runs: the scope, and every test the base's file-order run does not have.
    let in_base = |id: &str| base.runs[&OrderLabel::File].test(id).is_some();
    let keep: BTreeSet<String> = inputs
        .selection
        .iter()
        .map(|i| i.nodeid.clone())
        .filter(|id| scope.contains(id) || !in_base(id))
        .collect();
    let mut started =
        matrix::start_within(engine, &WHOLE, inputs.selection, inputs.collection, &keep)?;
    for l in WHOLE {
        let merged = merge_node(
            engine,
            l,
            started.nodes[&l],
            base.nodes[&l],
            &l.order(inputs.selection),
            &keep,
        )?;
        started.nodes.insert(l, merged);
    }
    let file = started.wait(engine, OrderLabel::File)?;
    let reversed = started.wait(engine, OrderLabel::Reversed)?;
    let carried: BTreeSet<String> = inputs
        .selection
        .iter()
        .map(|i| i.nodeid.clone())
        .filter(|id| !keep.contains(id))
        .collect();
    let mut impact = impact::impact(
        engine,
        &file,
        &reversed,
        inputs.edited,
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

/// A node that merges the head's run of `label` over `keep` with the base's run of the same
/// order: every test of `order` (the head's whole order) with the head's result when the head
/// ran it, else the base's. The session's fields (its trace, code, warnings, processes) are the
/// head's.
fn merge_node(
    engine: &Engine,
    label: OrderLabel,
    head: NodeId,
    base: NodeId,
    order: &[String],
    keep: &BTreeSet<String>,
) -> Result<NodeId> {
    let order_key = lines_digest(order);
    let order = order.to_vec();
    let kind = NodeKind::CarriedRun;
    let decoded = engine.decoded.clone();
    let node = Node::new(kind.of(label), kind.as_str(), move |runs: &[&[u8]]| {
        let [head, base] = runs else {
            return Err(node_bug("a carried run has two inputs"));
        };
        let head = decode_run(head)
            .map_err(|e| node_bug(format!("the head's run does not decode: {e}")))?;
        let base = decode_run(base)
            .map_err(|e| node_bug(format!("the base's run does not decode: {e}")))?;
        let merged = Arc::new(merge(head, base, &order));
        let bytes = postcard::to_allocvec(&*merged)
            .map_err(|e| node_bug(format!("a carried run does not encode: {e}")))?;
        // Read next by the scope, the replays and the matrix: none decodes it again.
        decoded.keep(&bytes, &merged);
        Ok(Output::new(bytes))
    })
    .param("order", order_key)
    .param("keep", lines_digest(keep));
    engine
        .live
        .add(node, &[head, base])
        .map_err(|e| Error::bug(e.to_string()))
}

/// A digest of node ids, one per line, for a key.
fn lines_digest<'a>(ids: impl IntoIterator<Item = &'a String>) -> String {
    let mut h = blake3::Hasher::new();
    for id in ids {
        h.update(id.as_bytes());
        h.update(b"\n");
    }
    h.finalize().to_hex().to_string()
}

/// The merged run: see [`merge_node`]. When the head's run had nothing to run (no process
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
}
