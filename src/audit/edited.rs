//! What the patch touched among the tests: the tests whose source it edited, the tests coupled
//! to the fixture delta through their traced reads, and the files outside every declared group
//! that those reads make part of the delta.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::delta::Delta;
use crate::pytest::result::RunResult;
use crate::snapshot::Snapshot;
use crate::testsrc::SourceFile;

/// The tests the patch edited: a new test, or one whose
/// [`Definition`](crate::testsrc::Definition) differs between the two
/// snapshots (see [`crate::testsrc`]: its function, decorators and marks, its class's set-up,
/// the fixtures, helpers and data of its file that it reads, what runs at import). Comments,
/// formatting, imports that resolve as before and edits of other tests are no edit of it. A
/// test whose function cannot be found (a doctest, an inherited or generated test) is edited
/// when its file's tokens differ. Each file is read and parsed once per side, and only files
/// that differ are read at all.
pub(crate) fn edited_tests(
    base: &Snapshot,
    head: &Snapshot,
    nodeids: &[String],
) -> BTreeSet<String> {
    // Per file: nothing when the sides hold the same blob, else each side's outline.
    let mut files: HashMap<String, Option<Sides>> = HashMap::new();
    let read = |s: &Snapshot, file: &str| {
        s.read_path(file)
            .ok()
            .flatten()
            .map(|b| SourceFile::parse(&String::from_utf8_lossy(&b)))
    };
    let mut edited = BTreeSet::new();
    for id in nodeids {
        let (file, _) = crate::testsrc::split_nodeid(id);
        let sides = files.entry(file.to_string()).or_insert_with(|| {
            (!base.same_blob(head, file)).then(|| (read(base, file), read(head, file)))
        });
        let Some((b, h)) = sides else {
            continue;
        };
        let is_edited = match (b, h) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(b), Some(h)) => match (b.definition(id), h.definition(id)) {
                (Some(bd), Some(hd)) => bd != hd,
                (None, Some(_)) => true,
                (_, None) => b.all_tokens() != h.all_tokens(),
            },
        };
        if is_edited {
            edited.insert(id.clone());
        }
    }
    edited
}

/// A test file's outline on each side (`None`: the side has no such file).
type Sides = (Option<SourceFile>, Option<SourceFile>);

/// Tests whose traced reads in the file-order run touch a file of the delta.
pub(crate) fn coupled_tests(run: &RunResult, delta: &Delta) -> Vec<String> {
    let changed: HashSet<String> = delta.changed.iter().map(|c| c.path.to_string()).collect();
    run.tests
        .iter()
        .filter(|t| {
            t.trace
                .read
                .iter()
                .chain(&t.trace.sqlite)
                .chain(&t.trace.list)
                .any(|p| changed.contains(p))
        })
        .map(|t| t.nodeid.clone())
        .collect()
}

/// The files the tests of `run` read (opened, or connected to with SQLite) that are in no
/// declared group: candidates for the delta, which the patch may have changed. Coupling follows
/// the trace: a test's expected data is its answer key wherever it lives. Source files are not
/// (a module a test imports is code under test, not data: `.py` and compiled modules, and
/// whatever any test or the session imported), nor the configuration and conftests pytest reads
/// before any test (the base-suite replay's).
pub(crate) fn traced_reads(run: &RunResult, delta: &Delta) -> Vec<String> {
    let in_delta: HashSet<String> = delta.changed.iter().map(|c| c.path.to_string()).collect();
    let imported: HashSet<&str> = run
        .tests
        .iter()
        .flat_map(|t| &t.trace.import)
        .chain(&run.session_trace.import)
        .map(String::as_str)
        .collect();
    let source = |p: &str| {
        [".py", ".pyc", ".pyi", ".pyd", ".so"]
            .iter()
            .any(|ext| p.ends_with(ext))
            || imported.contains(p)
            || {
                let name = p.rsplit('/').next().unwrap_or(p);
                name == "conftest.py" || crate::pytest::ini::FILES.contains(&name)
            }
    };
    let read: std::collections::BTreeSet<&str> = run
        .tests
        .iter()
        .flat_map(|t| t.trace.read.iter().chain(&t.trace.sqlite))
        .map(String::as_str)
        .filter(|p| !p.is_empty() && !in_delta.contains(*p) && !source(p))
        .collect();
    read.into_iter().map(str::to_string).collect()
}
