//! What the patch touched among the tests: the tests whose source it edited (the rule), and
//! everything the patch did besides the fixtures ([`Patch`]).

use std::collections::{BTreeSet, HashMap};

use crate::audit::budget::NewSkip;
use crate::audit::source_tamper::Suspect;
use crate::snapshot::Snapshot;
use crate::testsrc::SourceFile;

/// What the patch did to the tests and the code, besides the fixtures.
#[derive(Clone, Debug, Default)]
pub(crate) struct Patch {
    /// The tests the patch edited or added (head node ids).
    pub(crate) edited: BTreeSet<String>,
    /// The base's tests.
    pub(crate) base_ids: BTreeSet<String>,
    pub(crate) new_skips: Vec<NewSkip>,
    /// The source-side moves the head's code may make (`audit::source_tamper`).
    pub(crate) source_tamper: Vec<Suspect>,
    /// Whether any `conftest.py` differs between the snapshots: what was written outside the
    /// sandbox outside any test is the patch's then.
    pub(crate) conftests_changed: bool,
}

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
