//! The scope phase: the inputs of the scope rule read from the snapshots (the patch's footprint
//! from the changed files and their bytes, the head's imports) and the recorded file-order and
//! reversed runs; the judgment is `crate::audit::scope`. What it reads of the snapshots is read
//! once per audit, by the [`Scoping`] the page makes and hands to the phases that ask.

use std::collections::BTreeSet;

use crate::audit::footprint::{self, Change, Footprint, Imports};
use crate::audit::itemize;
use crate::audit::pysrc::{self, Source};
use crate::audit::reach::Names;
use crate::audit::scope::{self, Full, Impact, ImpactScope, Lines};
use crate::engine::step::Engine;
use crate::pytest::events::CollectedItem;
use crate::pytest::result::RunResult;

/// Whether a file's bytes matter to the footprint (the others count by their path alone).
fn read_bytes(path: &str) -> bool {
    path.ends_with(".py")
        || path.ends_with(".toml")
        || path.ends_with(".ini")
        || path.ends_with(".cfg")
}

/// The files that differ between the base and the head.
fn changes(engine: &Engine) -> Vec<Change> {
    let (base, head) = (&engine.base.snapshot, &engine.head.snapshot);
    let paths: BTreeSet<String> = base
        .entries
        .iter()
        .chain(&head.entries)
        .map(|e| e.path.to_string())
        .collect();
    let mut changes = Vec::new();
    for p in paths {
        if base.same_blob(head, &p) || engine.base.digest(&p) == engine.head.digest(&p) {
            continue;
        }
        let bytes = |s: &crate::snapshot::Snapshot| match read_bytes(&p) {
            true => s.read_path(&p).ok().flatten(),
            false => Some(Vec::new()),
        };
        let (b, h) = (
            base.find(&p.as_str().into()).and_then(|_| bytes(base)),
            head.find(&p.as_str().into()).and_then(|_| bytes(head)),
        );
        changes.push(Change {
            path: p,
            base: b,
            head: h,
        });
    }
    changes
}

/// What the scope rule reads of the two snapshots: the patch's footprint, the head's imports
/// among its Python files, and what their code reaches by name (with the base's versions of
/// the changed files, for code the base's runs numbered).
pub(crate) struct Sources {
    footprint: Footprint,
    imports: Imports,
    names: Names,
    /// The first collection hook the head's files define (path, hook), if any
    /// ([`itemize::COLLECTION_HOOKS`]).
    hook: Option<(String, String)>,
}

/// The first collection hook `files` define, by any def's own name (a conftest's function, a
/// plugin class's method), or named as the `specname` of a def's `hookimpl` (any def that
/// names `specname` and a collection hook anywhere in its text counts).
fn collection_hook(files: &[(String, Source)]) -> Option<(String, String)> {
    files.iter().find_map(|(path, source)| {
        source.defs.iter().find_map(|d| {
            let name = d.key.split('#').next().unwrap_or(&d.key);
            let name = name.rsplit('.').next().unwrap_or(name);
            let specname = d.words.contains("specname");
            itemize::COLLECTION_HOOKS
                .iter()
                .find(|hook| **hook == name || (specname && d.words.contains(**hook)))
                .map(|hook| (path.clone(), hook.to_string()))
        })
    })
}

fn read_sources(engine: &Engine) -> Sources {
    let changes = changes(engine);
    let head = &engine.head.snapshot;
    let git = head.open_git().ok().flatten();
    let files: Vec<(String, Source)> = head
        .entries
        .iter()
        .filter(|e| e.path.to_string().ends_with(".py"))
        .filter_map(|e| {
            let text = head.read(e, git.as_ref()).ok()?;
            Some((
                e.path.to_string(),
                pysrc::parse(&String::from_utf8_lossy(&text)),
            ))
        })
        .collect();
    let base_changed: Vec<(String, Source)> = changes
        .iter()
        .filter(|c| c.path.ends_with(".py"))
        .filter_map(|c| {
            let text = c.base.as_ref()?;
            Some((c.path.clone(), pysrc::parse(&String::from_utf8_lossy(text))))
        })
        .collect();
    Sources {
        footprint: footprint::footprint(&changes),
        imports: Imports::from_parsed(&files),
        hook: collection_hook(&files),
        names: Names::build(files, base_changed),
    }
}

/// What the scope rule reads of the two snapshots, read on first use and kept for the audit.
#[derive(Default)]
pub(crate) struct Scoping {
    sources: std::sync::OnceLock<Sources>,
}

impl Scoping {
    fn sources(&self, engine: &Engine) -> &Sources {
        self.sources.get_or_init(|| read_sources(engine))
    }

    /// What the patch affects and the scope of the shuffled orders of a scoped audit, from runs
    /// whose recorded code is numbered by `lines` (the head's own runs, the base's, or the
    /// head's with tests carried from the base).
    pub(crate) fn impact(
        &self,
        engine: &Engine,
        file: &RunResult,
        reversed: &RunResult,
        edited: &BTreeSet<String>,
        lines: Lines,
    ) -> Impact {
        let sources = self.sources(engine);
        scope::impact(
            file,
            reversed,
            &sources.footprint,
            edited,
            &scope::Reach {
                imports: &sources.imports,
                names: &sources.names,
            },
            lines,
        )
    }

    /// Reads what the scope rule reads of the two snapshots now, so that a later question does
    /// not wait for it.
    pub(crate) fn read_ahead(&self, engine: &Engine) {
        self.sources(engine);
    }

    /// The base's test modules whose items a scoped head's collection takes from the base's
    /// (`scope`: the tests the head's runs run), or why it makes them all.
    pub(crate) fn carried_modules(
        &self,
        engine: &Engine,
        base: &[CollectedItem],
        scope: &BTreeSet<String>,
        listed: &BTreeSet<String>,
    ) -> Result<BTreeSet<String>, itemize::Whole> {
        let sources = self.sources(engine);
        itemize::carried(&itemize::Inputs {
            footprint: &sources.footprint,
            hook: sources.hook.as_ref(),
            imports: &sources.imports,
            base,
            scope,
            listed,
        })
    }
}

/// The impact of an audit that is not scoped: nothing was recorded, every order runs whole
/// (`full`: `--full` said so, else scoping was not asked for).
pub(crate) fn not_scoped(full: bool) -> Impact {
    Impact {
        affected: None,
        scope: ImpactScope::Full(match full {
            true => Full::Asked,
            false => Full::NotAsked,
        }),
        whole: None,
        whole_why: None,
        base_sensitive: None,
    }
}
