//! Coupling: the tests coupled to the fixture delta through their traced reads, and the files
//! outside every declared group that those reads make part of the delta.

use std::collections::HashSet;

use crate::delta::Delta;
use crate::pytest::result::RunResult;

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
