//! What the engine's unit tests run on: a fake pytest that answers every run from a rule (the
//! tests that ran before a test in its process decide its outcome), and an engine over two
//! temporary trees, its graph kept in an in-memory store. The phases run as they do in an
//! audit; only pytest is pretended.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use fixgate_cache::{Digest, MemStore};
use fixgate_graph::{Live, Mode, NodeError, NodeId, RunOptions};
use indicatif::ProgressBar;

use crate::audit::gates::Gates;
use crate::config::{ConfigSource, DepsMode, FixtureGroups};
use crate::delta::Delta;
use crate::engine::collect::Collected;
use crate::engine::digests::TreeDigests;
use crate::engine::exec::{Identity, Pytest, RunSpec};
use crate::engine::gates::{GateNodes, Gated};
use crate::engine::judging::Judging;
use crate::engine::kind::NodeKind;
use crate::engine::scope::Scoping;
use crate::engine::step::{Computed, Engine, Key, Role, Step};
use crate::error::Result;
use crate::pytest::driver::{CollectFailure, CollectIn};
use crate::pytest::events::{CodeRan, CollectedItem, Collection, Trace};
use crate::pytest::forkserver::Carried;
use crate::pytest::result::{Outcome, RunResult, TestResult};
use crate::sandbox::Overlay;
use crate::snapshot::{Repo, Snapshot};

/// How a test fares: in `run`, after `before` (the tests before it in its process).
type Rule = dyn Fn(&RunSpec, &str, &[String]) -> Outcome + Send + Sync;

/// A pytest that runs nothing: each test's outcome is its rule's.
pub(crate) struct Fake {
    identity: Identity,
    rule: Box<Rule>,
    /// The code each test runs, for the runs that record it.
    pub(crate) code: BTreeMap<String, CodeRan>,
    /// Each tree's collection, by its root; and the collection of a tree with an overlay.
    pub(crate) collections: Vec<(PathBuf, Collection)>,
    pub(crate) overlaid: Collection,
    /// The root of a tree whose collection fails, with pytest's message.
    pub(crate) broken: Option<(PathBuf, String)>,
    /// Every run made (its label and order), in the order they were made.
    runs: Mutex<Vec<(String, Vec<String>)>>,
}

impl Fake {
    pub(crate) fn new(
        rule: impl Fn(&RunSpec, &str, &[String]) -> Outcome + Send + Sync + 'static,
    ) -> Fake {
        Fake {
            identity: Identity {
                interpreter: "fake".into(),
                plugin: "fake".into(),
                env: "fake".into(),
                hash_seed: "0".into(),
                timeout: "60".into(),
                limits: "fake".into(),
                network: "isolated",
            },
            rule: Box::new(rule),
            code: BTreeMap::new(),
            collections: Vec::new(),
            overlaid: Collection::default(),
            broken: None,
            runs: Mutex::default(),
        }
    }

    /// The labels of the runs made.
    pub(crate) fn ran(&self) -> Vec<String> {
        let runs = self.runs.lock().unwrap();
        runs.iter().map(|(label, _)| label.clone()).collect()
    }

    /// The order of the run labelled `label`, if it was made.
    pub(crate) fn order_of(&self, label: &str) -> Option<Vec<String>> {
        let runs = self.runs.lock().unwrap();
        runs.iter()
            .find(|(l, _)| l == label)
            .map(|(_, o)| o.clone())
    }
}

impl Pytest for Fake {
    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn run(&self, run: &RunSpec, _: Option<&ProgressBar>) -> Result<RunResult> {
        (self.runs.lock().unwrap()).push((run.label.to_string(), run.order.to_vec()));
        let tests = (run.order.iter().enumerate())
            .map(|(i, id)| {
                let outcome = (self.rule)(run, id, &run.order[..i]);
                let mut t = TestResult::missing(id, outcome, format!("{id} {outcome:?}"), 0.0, 0.0);
                if !outcome.is_green() {
                    t.message = Some(format!("{id} failed"));
                }
                if run.record.code {
                    t.code = Some(self.code.get(id).cloned().unwrap_or_default());
                }
                t
            })
            .collect();
        let mut result = RunResult::empty(Vec::new()).with_tests(run.order.to_vec(), tests);
        result.processes = 1;
        if run.record.code {
            result.session_code = Some(CodeRan::new());
        }
        Ok(result)
    }

    fn collect(&self, snapshot: &Snapshot, _: CollectIn) -> Result<(Collection, Trace)> {
        if let Some((_, why)) = (self.broken.iter()).find(|(root, _)| *root == snapshot.root) {
            return Err(crate::error::Error::NotCollected(why.clone()));
        }
        let found = self
            .collections
            .iter()
            .find(|(root, _)| *root == snapshot.root);
        Ok((
            found.map(|(_, c)| c.clone()).unwrap_or_default(),
            Trace::default(),
        ))
    }

    fn collect_overlaid(
        &self,
        _: &Snapshot,
        _: &Overlay,
    ) -> Result<(Collection, Trace, Vec<CollectFailure>)> {
        Ok((self.overlaid.clone(), Trace::default(), Vec::new()))
    }

    fn remote(&self) -> bool {
        false
    }

    fn failure(&self) -> Option<String> {
        None
    }

    fn interrupted(&self) -> bool {
        false
    }

    fn prewarm(&self, _: &Snapshot, _: usize) {}

    fn warm_slots(&self) -> usize {
        1
    }

    fn forget_collection(&self, _: &Snapshot, _: &Carried) {}

    fn note_collection(&self, _: &Snapshot, _: Vec<String>) {}
}

/// A tree of `files` (path, text) in a temporary folder, and its snapshot (the folder is no git
/// repository: every file is in it).
pub(crate) fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, Arc<Snapshot>) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let snapshot = Repo::open(Some(dir.path()), None)
        .unwrap()
        .snapshot(None)
        .unwrap();
    (dir, Arc::new(snapshot))
}

/// Collected items of `ids` (`file::name`), each in its file.
pub(crate) fn items(ids: &[&str]) -> Vec<CollectedItem> {
    (ids.iter())
        .map(|id| CollectedItem {
            nodeid: id.to_string(),
            file: id.split("::").next().map(str::to_owned),
            line: None,
            markers: Vec::new(),
        })
        .collect()
}

/// Runs `f` with an engine over `base` and `head` whose pytest is `fake`, its graph's results
/// in `store` (a second engine over the same store finds them).
pub(crate) fn with_engine<R>(
    store: &MemStore,
    base: &Arc<Snapshot>,
    head: &Arc<Snapshot>,
    fake: Arc<Fake>,
    f: impl FnOnce(&Engine) -> R,
) -> R {
    let options = RunOptions {
        jobs: 2,
        mode: Mode::Normal,
        scope: "engine-tests".into(),
    };
    let (out, _, _) = Live::scope(store, &options, "test", |live| {
        let engine = Engine {
            live,
            pytest: fake,
            groups: FixtureGroups::build(Vec::new(), ConfigSource::Default).unwrap(),
            deps_mode: DepsMode::default(),
            base: Arc::new(TreeDigests::new(base.clone())),
            head: Arc::new(TreeDigests::new(head.clone())),
            progress: None,
            processes: AtomicU32::new(0),
            warnings: Mutex::new(Vec::new()),
        };
        f(&engine)
    })
    .unwrap();
    out
}

/// A node standing for what the steps under test are computed from (a tree, a collection),
/// labelled `name`; its output is the digest of its name.
pub(crate) fn stand_in(engine: &Engine, name: &str) -> NodeId {
    let stand_in = StandIn {
        name: name.to_string(),
    };
    engine.add(stand_in, &[], &[]).unwrap().id
}

struct StandIn {
    name: String,
}

impl Step for StandIn {
    type Output = Digest;

    fn kind(&self) -> NodeKind {
        NodeKind::Snapshot
    }

    fn label(&self) -> String {
        self.name.clone()
    }

    fn key(&self, key: &mut Key) {
        let StandIn { name } = self;
        key.param("stand-in", name.as_str());
    }

    fn compute(&self, _: &[&[u8]]) -> std::result::Result<Computed<Digest>, NodeError> {
        Ok(Computed::new(Digest::of(self.name.as_bytes())))
    }
}

/// What the gates and the collections hand the judgment, with nothing gated: the base's and
/// the head's collections of `base` and `head` (node ids).
pub(crate) struct Before {
    pub(crate) gated: Gated,
    pub(crate) base: Collected,
    pub(crate) head: Collected,
    pub(crate) frozen: HashSet<&'static str>,
    pub(crate) scoping: Scoping,
}

impl Before {
    pub(crate) fn new(engine: &Engine, base: &[&str], head: &[&str]) -> Before {
        let (base_tree, head_tree) = (stand_in(engine, "base tree"), stand_in(engine, "head tree"));
        let collected = |role: Role, ids: &[&str]| Collected {
            node: stand_in(engine, &format!("collect({})", role.as_str())),
            collection: Collection {
                items: items(ids),
                ..Collection::default()
            },
        };
        Before {
            gated: Gated {
                gates: Gates::default(),
                delta: Delta::default(),
                nodes: GateNodes {
                    base_tree,
                    head_tree,
                    lock: base_tree,
                    delta: head_tree,
                },
            },
            base: collected(Role::Base, base),
            head: collected(Role::Head, head),
            frozen: HashSet::new(),
            scoping: Scoping::default(),
        }
    }

    /// What the judgment's phases share, `edited` the tests the patch edited.
    pub(crate) fn judging(&self, edited: &[&str]) -> Judging<'_> {
        let selection = self.head.collection.items.clone();
        Judging {
            gated: &self.gated,
            base: &self.base,
            head: &self.head,
            nodeids: selection.iter().map(|i| i.nodeid.clone()).collect(),
            selection,
            base_ids: self.base.ids().collect(),
            head_ids: self.head.ids().collect(),
            frozen: &self.frozen,
            edited: edited.iter().map(|s| s.to_string()).collect(),
            scoping: &self.scoping,
        }
    }
}
