//! The inputs of the scope rule read from the snapshots (the changed files with their bytes, the
//! head's imports), and the report's `scope` section: the judgment is `crate::audit::scope`.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::footprint::{self, Change, Footprint, Imports};
use crate::audit::scope::{self, Full, Scope};
use crate::engine::matrix::Matrix;
use crate::engine::runs::Engine;
use crate::pytest::driver::RunResult;
use crate::report;

/// Whether a file's bytes matter to the footprint (the others count by their path alone).
fn read_bytes(path: &str) -> bool {
    path.ends_with(".py")
        || path.ends_with(".toml")
        || path.ends_with(".ini")
        || path.ends_with(".cfg")
}

/// The files that differ between the base and the head.
pub(crate) fn footprint(engine: &Engine) -> Footprint {
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
    footprint::footprint(&changes)
}

/// The head's imports among its Python files.
fn imports(engine: &Engine) -> Imports {
    let head = &engine.head.snapshot;
    let git = head.open_git().ok().flatten();
    let files: Vec<(String, String)> = head
        .entries
        .iter()
        .filter(|e| e.path.to_string().ends_with(".py"))
        .filter_map(|e| {
            let text = head.read(e, git.as_ref()).ok()?;
            Some((
                e.path.to_string(),
                String::from_utf8_lossy(&text).into_owned(),
            ))
        })
        .collect();
    Imports::build(&files)
}

/// The scope of the shuffled orders (`full`: `--full`).
pub(crate) fn scope(
    engine: &Engine,
    full: bool,
    footprint: &Footprint,
    file: &RunResult,
    reversed: &RunResult,
    edited: &BTreeSet<String>,
) -> Scope {
    if full {
        return Scope::Full(Full::Asked);
    }
    scope::scope(file, reversed, footprint, edited, &imports(engine))
}

/// The report's `scope` section: how many tests the patch affected, how many each order ran,
/// the tests the shuffled orders carried (with the outcomes that carried them), or why the
/// orders ran in full.
pub(crate) fn section(scope: &Scope, matrix: &Matrix, selection: usize) -> report::ScopeReport {
    let runs: BTreeMap<String, u64> = matrix
        .labels
        .iter()
        .map(|l| (l.to_string(), matrix.order(*l).len() as u64))
        .collect();
    match scope {
        Scope::Full(why) => report::ScopeReport {
            mode: "full".into(),
            reason: Some(why.to_string()),
            affected: None,
            writers: Vec::new(),
            runs,
            carried: Vec::new(),
            tests: selection as u64,
        },
        Scope::Scoped {
            run,
            affected,
            writers,
        } => {
            let carried = matrix
                .order(crate::engine::matrix::OrderLabel::File)
                .into_iter()
                .filter(|id| !run.contains(id))
                .map(|id| report::Carried {
                    evidence: matrix
                        .outcomes(&id)
                        .into_iter()
                        .map(|(l, o)| (l.to_string(), o.as_str().to_string()))
                        .collect(),
                    nodeid: id,
                })
                .collect();
            report::ScopeReport {
                mode: "scoped".into(),
                reason: None,
                affected: Some(affected.len() as u64),
                writers: writers.iter().cloned().collect(),
                runs,
                carried,
                tests: selection as u64,
            }
        }
    }
}
