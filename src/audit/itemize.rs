//! Which test modules a scoped audit's head collection makes items of (docs/impact.md, "The
//! head's collection").
//!
//! Of pytest's collection, importing the test modules is the small part; making their items is
//! most of it. A head whose patch cannot change what an untouched module's items are needs
//! only the items of the modules its runs run (the scope's) and of the modules the patch
//! reaches; every other module is imported as always, in collection order (what one module's
//! import does, the next one's sees), and its items are the base's. That holds when:
//!
//! - no Python file changed at module level, was added or removed (`Footprint::modules`):
//!   module-level code runs at import, and what it computes can be what another file's items
//!   are made of (a list an untouched file parametrizes over);
//! - no changed function has other decorators or another signature: those run at import, in
//!   the module's code (`@register("x")` becoming `@register("y")`);
//! - no file of the repository defines a hook that sees the whole item list, or makes items
//!   or collectors (a conftest's `pytest_collection_modifyitems`): with only some modules'
//!   items it would see another list;
//! - a module that imports a changed file, directly or through others, makes its items: its
//!   items can be made of the changed file's objects (a mixin's tests, a test function
//!   imported from it, its lines).
//!
//! What still changes an untouched module's items is code that ran while the suite was
//! collected: a changed function that ran there, or a changed file read there, sends the
//! scope rule to full orders already (`crate::audit::scope::Full::RanAtCollection`), and a
//! scoped head is all this asks for.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::footprint::{Footprint, Imports};
use crate::pytest::events::{CollectedItem, Collection, UnitemizedModule};

/// The hooks that see the whole item list or make items and collectors: a repository that
/// defines one collects whole.
pub(crate) const COLLECTION_HOOKS: &[&str] = &[
    "pytest_collection",
    "pytest_collection_modifyitems",
    "pytest_collection_finish",
    "pytest_deselected",
    "pytest_ignore_collect",
    "pytest_collect_directory",
    "pytest_collect_file",
    "pytest_pycollect_makemodule",
    "pytest_pycollect_makeitem",
    "pytest_make_collect_report",
    "pytest_collectstart",
    "pytest_collectreport",
];

/// Why a scoped head's collection made every module's items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Whole {
    /// The base's recording does not scope the head's runs: why the shuffled orders run in
    /// full.
    NotScoped(Box<crate::audit::scope::Full>),
    /// The base's recorded runs cannot be read.
    BaseRuns(Box<crate::audit::scope::WholeWhy>),
    /// A Python file changed at module level, or was added or removed.
    ModuleLevel(String),
    /// A file was added or removed in a directory the base's collection listed (a
    /// parametrization over a folder's files).
    Listed { path: String, dir: String },
    /// A changed function of this file has other decorators or another signature.
    Signature(String),
    /// A file of the repository defines a collection hook.
    Hook { path: String, hook: String },
    /// Every test module of the base is the patch's or the scope's.
    NothingCarried,
    /// The collection's items are not in the order they were collected, or some were taken
    /// out (a plugin's hook), so where the carried modules' items go is not known.
    Unordered,
    /// The collection did not name, in order, exactly the modules it was asked to carry.
    Unnamed,
    /// Put together, the collection would list this node id twice.
    Twice(String),
    /// The head's collection was made by a fresh process, which makes every item (no warm
    /// interpreter could be had when it was made: forking is off, or refused this tree).
    Fresh,
}

/// How a scoped head's collection was made: of the base's test modules, how many made their
/// items (the others' are the base's), or why all did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeadCollection {
    Partial { modules: usize, itemized: usize },
    Whole(Whole),
}

/// What the rule reads besides the footprint.
pub(crate) struct Inputs<'a> {
    pub(crate) footprint: &'a Footprint,
    /// A collection hook defined in the head's files (path, hook), if any.
    pub(crate) hook: Option<&'a (String, String)>,
    pub(crate) imports: &'a Imports,
    /// The base's collection.
    pub(crate) base: &'a [CollectedItem],
    /// The tests the head's runs run: the scope's, as the base's recording gives it.
    pub(crate) scope: &'a BTreeSet<String>,
    /// The directories the base's collection listed (`""`: the root).
    pub(crate) listed: &'a BTreeSet<String>,
}

/// The module node id of an item (`tests/test_x.py` of `tests/test_x.py::TestA::test_b`).
fn module_of(nodeid: &str) -> &str {
    crate::testsrc::split_nodeid(nodeid).0
}

/// How many modules `items` come from.
pub(crate) fn modules(items: &[CollectedItem]) -> usize {
    items
        .iter()
        .map(|i| module_of(&i.nodeid))
        .collect::<BTreeSet<_>>()
        .len()
}

/// The base's test modules whose items the head's collection may take from the base (by
/// module node id), or why it makes every item.
pub(crate) fn carried(inputs: &Inputs) -> Result<BTreeSet<String>, Whole> {
    let footprint = inputs.footprint;
    if let Some(path) = footprint.modules.iter().next() {
        return Err(Whole::ModuleLevel(path.clone()));
    }
    if let Some(path) = footprint.signatures.iter().next() {
        return Err(Whole::Signature(path.clone()));
    }
    for path in &footprint.added_or_removed {
        let under = |d: &String| {
            d.is_empty()
                || path
                    .strip_prefix(d.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        };
        if let Some(dir) = inputs.listed.iter().find(|d| under(d)) {
            return Err(Whole::Listed {
                path: path.clone(),
                dir: dir.clone(),
            });
        }
    }
    if let Some((path, hook)) = inputs.hook {
        return Err(Whole::Hook {
            path: path.clone(),
            hook: hook.clone(),
        });
    }
    // Every changed file, and every file that imports one (directly or not).
    let changed: BTreeSet<String> = footprint
        .functions
        .keys()
        .chain(&footprint.files)
        .cloned()
        .collect();
    let reached = inputs.imports.importers(&changed);
    // Each base module with the repository file its items name.
    let mut modules: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for item in inputs.base {
        let file = modules.entry(module_of(&item.nodeid)).or_default();
        if file.is_none() {
            *file = item.file.as_deref();
        }
    }
    let needed: BTreeSet<&str> = inputs.scope.iter().map(|id| module_of(id)).collect();
    let carried: BTreeSet<String> = modules
        .iter()
        .filter(|(module, file)| {
            // A module whose file is not known is made whole.
            file.is_some_and(|f| !changed.contains(f) && !reached.contains(f))
                && !needed.contains(*module)
        })
        .map(|(module, _)| module.to_string())
        .collect();
    match carried.is_empty() {
        true => Err(Whole::NothingCarried),
        false => Ok(carried),
    }
}

/// Whether the base's items of the modules `head` imported without making them have a place
/// in it: it says where each goes, in order, its items are in the order they were collected,
/// and the modules it names are among the `carried` ones it was asked for, and every carried
/// one it does not name is one it made items of (its own word is not taken for more, nor for
/// fewer: with no file added or removed and the same configuration, collection reaches each
/// module the base's did), and no node id would be listed twice. A collection that made every
/// item (a fresh one, where no warm interpreter could be had) needs none.
fn placeable(head: &Collection, carried: &BTreeSet<String>) -> Result<(), Whole> {
    let Some(unitemized) = &head.unitemized else {
        return Ok(());
    };
    if !unitemized.in_order {
        return Err(Whole::Unordered);
    }
    let mut at = 0;
    let mut seen = BTreeSet::new();
    for m in &unitemized.modules {
        let fits = carried.contains(&m.nodeid) && m.at >= at && m.at <= head.items.len();
        if !fits || !seen.insert(m.nodeid.as_str()) {
            return Err(Whole::Unnamed);
        }
        at = m.at;
    }
    // A carried module the collection does not name is one it made items of (a file collected
    // as a doctest module, or by a plugin's collector: not a plain module), or fixgate
    // collects whole.
    let made: BTreeSet<&str> = head.items.iter().map(|i| module_of(&i.nodeid)).collect();
    match carried
        .iter()
        .all(|m| seen.contains(m.as_str()) || made.contains(m.as_str()))
    {
        true => Ok(()),
        false => Err(Whole::Unnamed),
    }
}

/// The head's collection put together: its own items, with the base's items of each module it
/// imported without making them put where that module stands. `carried`: the modules it was
/// asked to make no items of (the collection's own word is not taken for more).
pub(crate) fn merge(
    base: &Collection,
    head: Collection,
    carried: &BTreeSet<String>,
) -> Result<Collection, Whole> {
    placeable(&head, carried)?;
    let Some(unitemized) = &head.unitemized else {
        return Ok(head);
    };
    let mut by_module: BTreeMap<&str, Vec<&CollectedItem>> = BTreeMap::new();
    for item in &base.items {
        by_module
            .entry(module_of(&item.nodeid))
            .or_default()
            .push(item);
    }
    let seen: BTreeSet<&str> = unitemized
        .modules
        .iter()
        .map(|m| m.nodeid.as_str())
        .collect();
    let mut items = Vec::with_capacity(head.items.len() + base.items.len());
    let mut next = unitemized.modules.iter().peekable();
    // A module's items the head made all the same (a doctest module of the same file, which
    // is not a plain module) are the head's.
    let made: BTreeSet<&str> = head.items.iter().map(|i| i.nodeid.as_str()).collect();
    let base_items = |m: &UnitemizedModule| -> Vec<CollectedItem> {
        let of = by_module.get(m.nodeid.as_str());
        of.into_iter()
            .flatten()
            .filter(|i| !made.contains(i.nodeid.as_str()))
            .map(|&i| i.clone())
            .collect()
    };
    for (i, item) in head.items.iter().enumerate() {
        while let Some(m) = next.next_if(|m| m.at == i) {
            items.extend(base_items(m));
        }
        items.push(item.clone());
    }
    // Those after the last item made.
    for m in next {
        items.extend(base_items(m));
    }
    let mut deselected = head.deselected.clone();
    deselected.extend(
        base.deselected
            .iter()
            .filter(|id| seen.contains(module_of(id)))
            .cloned(),
    );
    // The collectors inside a carried module that the base's collection skipped (a class with
    // a skip marker) were not reached in the head's.
    let mut skipped_collectors = head.skipped_collectors.clone();
    let skipped: BTreeSet<String> = skipped_collectors
        .iter()
        .map(|c| c.nodeid.clone())
        .collect();
    skipped_collectors.extend(
        base.skipped_collectors
            .iter()
            .filter(|c| seen.contains(module_of(&c.nodeid)) && !skipped.contains(&c.nodeid))
            .cloned(),
    );
    let mut unique: BTreeSet<&str> = BTreeSet::new();
    if let Some(twice) = items.iter().find(|i| !unique.insert(i.nodeid.as_str())) {
        return Err(Whole::Twice(twice.nodeid.clone()));
    }
    Ok(Collection {
        items,
        skipped_collectors,
        deselected,
        unitemized: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::footprint::{footprint, Change};
    use crate::pytest::events::Unitemized;

    fn item(nodeid: &str) -> CollectedItem {
        CollectedItem {
            nodeid: nodeid.into(),
            file: Some(module_of(nodeid).into()),
            line: Some(1),
            markers: Vec::new(),
        }
    }

    fn change(path: &str, base: &str, head: &str) -> Change {
        Change {
            path: path.into(),
            base: Some(base.as_bytes().to_vec()),
            head: Some(head.as_bytes().to_vec()),
        }
    }

    const M7: &str = "OFFSET = 7\n\n\ndef add(x):\n    return x + OFFSET\n";

    fn suite() -> (Vec<CollectedItem>, Imports) {
        let base = vec![
            item("tests/test_a.py::test_1"),
            item("tests/test_a.py::test_2"),
            item("tests/test_m7.py::test_1"),
            item("tests/test_via.py::test_1"),
            item("tests/test_z.py::test_1"),
        ];
        let imports = Imports::build(&[
            ("pkg/m7.py".into(), M7.into()),
            ("pkg/helper.py".into(), "from pkg import m7\n".into()),
            ("tests/test_a.py".into(), "import os\n".into()),
            ("tests/test_m7.py".into(), "from pkg import m7\n".into()),
            (
                "tests/test_via.py".into(),
                "from pkg import helper\n".into(),
            ),
            ("tests/test_z.py".into(), "import os\n".into()),
        ]);
        (base, imports)
    }

    #[test]
    fn a_body_change_carries_the_modules_that_neither_import_it_nor_run_in_the_scope() {
        let (base, imports) = suite();
        let fp = footprint(&[change(
            "pkg/m7.py",
            M7,
            "OFFSET = 7\n\n\ndef add(x):\n    return OFFSET + x\n",
        )]);
        let scope: BTreeSet<String> = ["tests/test_z.py::test_1".to_string()].into();
        let carried = carried(&Inputs {
            footprint: &fp,
            hook: None,
            imports: &imports,
            base: &base,
            scope: &scope,
            listed: &BTreeSet::new(),
        });
        // test_m7 imports the file, test_via through helper, test_z is in the scope.
        assert_eq!(carried, Ok(["tests/test_a.py".to_string()].into()));
    }

    #[test]
    fn module_level_and_signature_changes_and_collection_hooks_collect_whole() {
        let (base, imports) = suite();
        let scope = BTreeSet::new();
        let listed: BTreeSet<String> = ["tests/data".to_string()].into();
        let run = |fp: &Footprint, hook| {
            carried(&Inputs {
                footprint: fp,
                hook,
                imports: &imports,
                base: &base,
                scope: &scope,
                listed: &listed,
            })
        };
        // (base, head, why): a module-level line, a default, a decorator's argument.
        let decorated = |arg: &str| {
            format!("OFFSET = 7\n\n\n@register('{arg}')\ndef add(x):\n    return x + OFFSET\n")
        };
        let cases = [
            (
                M7.to_owned(),
                M7.replace("OFFSET = 7", "OFFSET = 8"),
                Whole::ModuleLevel("pkg/m7.py".into()),
            ),
            (
                M7.to_owned(),
                M7.replace("add(x)", "add(x=1)"),
                Whole::Signature("pkg/m7.py".into()),
            ),
            (
                decorated("a"),
                decorated("b"),
                Whole::Signature("pkg/m7.py".into()),
            ),
        ];
        for (base_text, head_text, why) in cases {
            let fp = footprint(&[change("pkg/m7.py", &base_text, &head_text)]);
            assert_eq!(run(&fp, None), Err(why), "{head_text}");
        }
        let body = footprint(&[change(
            "pkg/m7.py",
            M7,
            "OFFSET = 7\n\n\ndef add(x):\n    return OFFSET + x\n",
        )]);
        let hook = (
            "conftest.py".to_string(),
            "pytest_collection_modifyitems".to_string(),
        );
        assert_eq!(
            run(&body, Some(&hook)),
            Err(Whole::Hook {
                path: "conftest.py".into(),
                hook: "pytest_collection_modifyitems".into()
            })
        );
        // A data file added where collection lists the files (a parametrization over them);
        // one added elsewhere changes no item.
        let added = |path: &str| {
            let mut changes = vec![change(
                "pkg/m7.py",
                M7,
                &M7.replace("x + OFFSET", "OFFSET + x"),
            )];
            changes.push(Change {
                path: path.into(),
                base: None,
                head: Some(Vec::new()),
            });
            footprint(&changes)
        };
        assert_eq!(
            run(&added("tests/data/b.txt"), None),
            Err(Whole::Listed {
                path: "tests/data/b.txt".into(),
                dir: "tests/data".into()
            })
        );
        assert!(run(&added("docs/b.txt"), None).is_ok());
    }

    fn unitemized(modules: &[(&str, usize)], in_order: bool) -> Option<Unitemized> {
        Some(Unitemized {
            modules: modules
                .iter()
                .map(|(m, at)| UnitemizedModule {
                    nodeid: m.to_string(),
                    at: *at,
                })
                .collect(),
            in_order,
        })
    }

    #[test]
    fn the_base_items_of_each_carried_module_go_where_it_was_imported() {
        let (base_items, _) = suite();
        let base = Collection {
            items: base_items.clone(),
            deselected: vec!["tests/test_a.py::test_3".into()],
            ..Collection::default()
        };
        let carried: BTreeSet<String> = ["tests/test_a.py", "tests/test_z.py"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let head = Collection {
            items: vec![
                item("tests/test_m7.py::test_1"),
                item("tests/test_via.py::test_1"),
            ],
            unitemized: unitemized(&[("tests/test_a.py", 0), ("tests/test_z.py", 2)], true),
            ..Collection::default()
        };
        let merged = merge(&base, head.clone(), &carried).expect("merged");
        assert_eq!(merged.items, base_items);
        assert_eq!(merged.deselected, ["tests/test_a.py::test_3"]);
        assert_eq!(merged.unitemized, None);
        // Out of order, or a module it was not asked to carry: no merge.
        let unordered = Collection {
            unitemized: unitemized(&[("tests/test_a.py", 0)], false),
            ..head.clone()
        };
        assert_eq!(merge(&base, unordered, &carried), Err(Whole::Unordered));
        let forged = Collection {
            unitemized: unitemized(&[("tests/test_m7.py", 0)], true),
            ..head.clone()
        };
        assert_eq!(merge(&base, forged, &carried), Err(Whole::Unnamed));
        // Nor for fewer: a module it was asked to carry and does not name would lose its tests.
        let fewer = Collection {
            unitemized: unitemized(&[("tests/test_a.py", 0)], true),
            ..head.clone()
        };
        assert_eq!(merge(&base, fewer, &carried), Err(Whole::Unnamed));
        // An item the head made of a carried module's file (a doctest module's) is not the
        // base's again.
        let doctest = item("tests/test_a.py::test_a.helper");
        let base_with_doctest = Collection {
            items: [vec![doctest.clone()], base_items.clone()].concat(),
            ..base.clone()
        };
        let head_for_twice = head.clone();
        let head_with_doctest = Collection {
            items: [vec![doctest.clone()], head.items.clone()].concat(),
            unitemized: unitemized(&[("tests/test_a.py", 1), ("tests/test_z.py", 3)], true),
            ..head
        };
        let merged = merge(&base_with_doctest, head_with_doctest, &carried).expect("merged");
        assert_eq!(merged.items, [vec![doctest], base_items.clone()].concat());
        // A node id the merge would list twice is refused.
        let twice = Collection {
            items: [base_items.clone(), vec![item("tests/test_a.py::test_1")]].concat(),
            ..base.clone()
        };
        assert_eq!(
            merge(&twice, head_for_twice, &carried),
            Err(Whole::Twice("tests/test_a.py::test_1".into()))
        );
    }
}
