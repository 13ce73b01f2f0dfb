//! The source-tamper step: the code's Python modules the head added or changed, and the suite's
//! test files, read from the two snapshots and handed to `audit::source_tamper`'s rules.
//! Nothing runs: the base's tests pass on such code, so only the patch's text can show them.

use std::collections::BTreeSet;
use std::sync::Arc;

use fixgate_graph::NodeError;

use crate::audit::source_tamper::{self, Suspect};
use crate::engine::base_suite::{in_test_dir, text};
use crate::engine::collect::Collect;
use crate::engine::kind::NodeKind;
use crate::engine::step::{Computed, Key, Step};
use crate::pytest::events::Collection;
use crate::pytest::ini::PytestIni;
use crate::snapshot::Snapshot;

/// The suspects of the patch from `base` to `head`. Its inputs: the base's and the head's
/// trees, then their collections (which say what the test files are).
pub(crate) struct SourceTamper {
    pub(crate) base: Arc<Snapshot>,
    pub(crate) head: Arc<Snapshot>,
}

impl Step for SourceTamper {
    type Output = Vec<Suspect>;

    fn kind(&self) -> NodeKind {
        NodeKind::SourceTamper
    }

    fn key(&self, _: &mut Key) {
        // Everything it reads is its inputs: the trees and the collections.
        let SourceTamper { base: _, head: _ } = self;
    }

    fn compute(&self, inputs: &[&[u8]]) -> Result<Computed<Vec<Suspect>>, NodeError> {
        let base_collection = Collect::decode(inputs[2])?;
        let head_collection = Collect::decode(inputs[3])?;
        Ok(Computed::new(read(
            &self.base,
            &self.head,
            &base_collection,
            &head_collection,
        )))
    }
}

/// The suspects of the patch from `base` to `head`. A test file is a file either side collected
/// or one the base's `python_files` names; a module of the code is any other `.py` file outside
/// the test directories, and no `conftest.py`.
fn read(
    base: &Snapshot,
    head: &Snapshot,
    base_collection: &Collection,
    head_collection: &Collection,
) -> Vec<Suspect> {
    let ini = PytestIni::find(|f| text(base, f));
    let test_files: BTreeSet<&str> = base_collection
        .items
        .iter()
        .chain(&head_collection.items)
        .filter_map(|i| i.file.as_deref())
        .collect();
    let is_test = |p: &str| {
        test_files.contains(p)
            || ini.is_test_file(p)
            || in_test_dir(p)
            || p.rsplit('/').next() == Some("conftest.py")
    };
    let modules: Vec<(String, Option<String>, String)> = head
        .entries
        .iter()
        .map(|e| e.path.to_string())
        .filter(|p| p.ends_with(".py") && !is_test(p) && !base.same_blob(head, p))
        .filter_map(|p| {
            let now = text(head, &p)?;
            let before = text(base, &p);
            (before.as_deref() != Some(now.as_str())).then_some((p, before, now))
        })
        .collect();
    source_tamper::suspects(&modules, || {
        test_files
            .iter()
            .filter_map(|p| Some((p.to_string(), text(head, p).or_else(|| text(base, p))?)))
            .collect()
    })
}
