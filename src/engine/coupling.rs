//! Coupling: the tests of the file-order run whose traced reads touch a file of the fixture
//! delta, with the files in no group they read that the patch changed (the rule is
//! `audit::coupling`).

use crate::audit::coupling::{coupled_tests, traced_reads};
use crate::delta::{Change, ChangedFile, Delta};
use crate::engine::step::Engine;
use crate::pytest::result::RunResult;
use crate::repo_path::RepoPath;

/// The delta with what coupling follows beyond the declared groups, and the tests coupled to it.
pub(crate) struct Coupled {
    pub(crate) delta: Delta,
    pub(crate) coupled: Vec<String>,
}

/// The tests of `file_run` coupled to `delta` and to the files the tests read that the patch
/// changed.
pub(crate) fn couple(engine: &Engine, delta: &Delta, file_run: &RunResult) -> Coupled {
    let delta = with_traced(engine, delta, file_run);
    let coupled = coupled_tests(file_run, &delta);
    Coupled { delta, coupled }
}

/// The fixture delta with what coupling follows beyond the declared groups: each file a test
/// of the file-order run read that the patch changed (see [`traced_reads`]), as a change of no
/// group (`group` empty). Only files tests read are compared, each by its digest on both sides.
fn with_traced(engine: &Engine, delta: &Delta, file_run: &RunResult) -> Delta {
    let mut out = delta.clone();
    for path in traced_reads(file_run, delta) {
        let (b, h) = (engine.base.digest(&path), engine.head.digest(&path));
        let change = match (b, h) {
            (Some(b), Some(h)) if b == h => continue,
            (None, None) => continue,
            (Some(_), Some(_)) => Change::Modified,
            (None, Some(_)) => Change::Added,
            (Some(_), None) => Change::Removed,
        };
        out.changed.push(ChangedFile {
            path: RepoPath::parse_lossless(&path),
            group: String::new(),
            change,
            base_blake3: b.map(|d| d.to_string()),
            head_blake3: h.map(|d| d.to_string()),
            renamed_from: None,
        });
    }
    out.changed.sort_by(|a, b| a.path.cmp(&b.path));
    out
}
