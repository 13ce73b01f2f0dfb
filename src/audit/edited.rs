//! What the patch touched among the tests: the tests whose source it edited, and the tests
//! coupled to the fixture delta through their traced reads.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::delta::Delta;
use crate::pytest::driver::RunResult;
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
