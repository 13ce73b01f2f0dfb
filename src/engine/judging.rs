//! What the phases that judge the tests share: the collections they start from, the selection
//! the matrix runs, the tests of each side, the tests the patch edited, the frozen tests and the
//! gates' findings. The page (`engine::audit`) makes it once; each phase reads what it needs.

use std::collections::{BTreeSet, HashSet};

use crate::engine::collect::Collected;
use crate::engine::gates::Gated;
use crate::engine::scope::Scoping;
use crate::pytest::events::CollectedItem;

/// See the module documentation.
pub(crate) struct Judging<'a> {
    pub(crate) gated: &'a Gated,
    pub(crate) base: &'a Collected,
    pub(crate) head: &'a Collected,
    /// The tests the matrix runs (the head's, less the frozen ones), and their node ids.
    pub(crate) selection: Vec<CollectedItem>,
    pub(crate) nodeids: Vec<String>,
    /// The node ids each side collected.
    pub(crate) base_ids: HashSet<&'a str>,
    pub(crate) head_ids: HashSet<&'a str>,
    /// The tests the gates freeze (deselected from every run).
    pub(crate) frozen: &'a HashSet<&'a str>,
    /// The tests the patch edited or added.
    pub(crate) edited: BTreeSet<String>,
    /// What the scope rule reads of the snapshots.
    pub(crate) scoping: &'a Scoping,
}
