//! The collection phase: the base's and the head's collections. In a scoped audit of a head
//! against another base, the base's recorded file-order and reversed runs come first: from
//! them and the patch the rule of `crate::audit::itemize` gives the test modules whose items
//! the head's collection takes from the base's (it imports them, and makes no items of them),
//! and the head's collection is put together from the two.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use fixgate_graph::{NodeError, NodeId};

use crate::audit::itemize::{self, HeadCollection, Whole};
use crate::audit::scope::{ImpactScope, WholeWhy};
use crate::engine::carry::{self, BaseRuns};
use crate::engine::collect::{self, Collected, Failed};
use crate::engine::edited::edited_tests;
use crate::engine::gates::GateNodes;
use crate::engine::kind::NodeKind;
use crate::engine::scope::Scoping;
use crate::engine::step::Role;
use crate::engine::step::{Computed, Engine, Key, Step};
use crate::error::Result;
use crate::pytest::driver::CollectIn;
use crate::pytest::events::Collection;
use crate::pytest::forkserver::Carried;

/// What the collection phase hands on.
pub(crate) struct Collections {
    pub(crate) base: Collected,
    /// The head's collection, or why it did not collect (the patch's doing).
    pub(crate) head: std::result::Result<Collected, Failed>,
    pub(crate) read: Read,
}

/// What the collection phase read for the head's collection, which the phases after it use.
#[derive(Default)]
pub(crate) struct Read {
    /// The base's recorded runs (the carried runs start from them).
    pub(crate) base_runs: Option<std::result::Result<BaseRuns, WholeWhy>>,
    /// How a scoped head's collection was made (`None`: not asked, as when the audit is not
    /// scoped, the head is the base, or the runs execute elsewhere).
    pub(crate) head_collection: Option<HeadCollection>,
}

/// Collects both sides, after the gates. `frozen`: the tests the gates deselect; `scoping`:
/// what the scope rule reads of the snapshots, which a scoped head's collection asks.
pub(crate) fn collect(
    engine: &Engine,
    nodes: GateNodes,
    scoped: bool,
    frozen: &HashSet<&str>,
    scoping: &Scoping,
) -> Result<Collections> {
    let gate = nodes.lock;
    if !scoped || engine.same_sides() || engine.pytest.remote() {
        let (base, head) = collect::collect_both(engine, gate, scoped)?;
        return Ok(Collections {
            base,
            head,
            read: Read::default(),
        });
    }
    let b = collect::add_collection(engine, gate, Role::Base, collect::how(engine, true, true))?;
    let base = collect::wait_collected(engine, b)?;
    let base_selection = collect::unfrozen(&base.collection.items, frozen);
    // The sources the rule reads are parsed while the base's runs are read.
    let base_runs = std::thread::scope(|s| {
        s.spawn(|| scoping.read_ahead(engine));
        carry::base_runs(engine, &base_selection, base.node)
    })?;
    let carried = match &base_runs {
        Ok(runs) => {
            let ids: Vec<String> = base_selection.iter().map(|i| i.nodeid.clone()).collect();
            let edited = edited_tests(engine, nodes, Role::Base, ids)?;
            match runs.impact(engine, scoping, &edited).scope {
                ImpactScope::Scoped { run, .. } => {
                    let listed = runs.listed_at_collection();
                    scoping.carried_modules(engine, &base.collection.items, &run, &listed)
                }
                ImpactScope::Full(why) => Err(Whole::NotScoped(Box::new(why))),
            }
        }
        Err(why) => Err(Whole::BaseRuns(Box::new(why.clone()))),
    };
    let (head, head_collection) = match carried {
        Ok(carried) => head_carrying(engine, gate, &base, carried)?,
        Err(why) => (whole_head(engine, gate)?, HeadCollection::Whole(why)),
    };
    Ok(Collections {
        base,
        head,
        read: Read {
            base_runs: Some(base_runs),
            head_collection: Some(head_collection),
        },
    })
}

/// The head's collection over every module.
fn whole_head(engine: &Engine, gate: NodeId) -> Result<std::result::Result<Collected, Failed>> {
    let h = collect::add_collection(engine, gate, Role::Head, collect::how(engine, true, true))?;
    collect::wait_head(engine, h)
}

/// The head's collection without the items of the `carried` modules, put together with the
/// base's items of them; over every module when it cannot be.
fn head_carrying(
    engine: &Engine,
    gate: NodeId,
    base: &Collected,
    carried: BTreeSet<String>,
) -> Result<(std::result::Result<Collected, Failed>, HeadCollection)> {
    let modules = itemize::modules(&base.collection.items);
    let carried = Arc::new(Carried(carried));
    let how = CollectIn::Warm {
        record_code: true,
        spare: true,
        carried: carried.clone(),
    };
    let h = collect::add_collection(engine, gate, Role::Head, how)?;
    let planned = HeadCollection::Partial {
        modules,
        itemized: modules.saturating_sub(carried.0.len()),
    };
    let head = match collect::wait_head(engine, h)? {
        Ok(head) => head,
        // What does not import fails the same way whichever items are made.
        Err(failed) => return Ok((Err(failed), planned)),
    };
    let Some(unitemized) = &head.collection.unitemized else {
        return Ok((Ok(head), HeadCollection::Whole(Whole::Fresh)));
    };
    let unitemized = unitemized.modules.len();
    // What cannot be put together (out of order, a module unnamed, a node id twice) is
    // collected whole instead.
    let merged = match itemize::merge(&base.collection, head.collection, &carried.0) {
        Ok(merged) => merged,
        Err(why) => {
            (engine.pytest).forget_collection(&engine.head.snapshot, &carried);
            return Ok((whole_head(engine, gate)?, HeadCollection::Whole(why)));
        }
    };
    let step = CarriedCollect {
        carried: carried.clone(),
        merged: merged.clone(),
    };
    let merged = Collected {
        node: engine.add(step, &[base.node, h.id], &[])?.id,
        collection: merged,
    };
    // A warm interpreter of the head that makes every item (a run outside the scope's needs
    // one) must collect what was put together, or its runs start fresh.
    (engine.pytest).note_collection(
        &engine.head.snapshot,
        merged.ids().map(str::to_owned).collect(),
    );
    Ok((
        Ok(merged),
        HeadCollection::Partial {
            modules,
            itemized: modules.saturating_sub(unitemized),
        },
    ))
}

/// The head's collection put together (`merged`), which its inputs determine: the base's
/// collection and the head's without the `carried` modules' items. The node the head's runs
/// depend on.
struct CarriedCollect {
    carried: Arc<Carried>,
    merged: Collection,
}

impl Step for CarriedCollect {
    type Output = Collection;

    fn kind(&self) -> NodeKind {
        NodeKind::CarriedCollect
    }

    fn label(&self) -> String {
        NodeKind::CarriedCollect.of("head")
    }

    fn key(&self, key: &mut Key) {
        // What was put together is what its inputs and the carried modules make.
        let CarriedCollect { carried, merged: _ } = self;
        key.param("carried", carried.digest());
    }

    fn compute(&self, _: &[&[u8]]) -> std::result::Result<Computed<Collection>, NodeError> {
        Ok(Computed::new(self.merged.clone()))
    }
}
