//! Leases: a test may change only the fixture groups its `@pytest.mark.writes` names. The
//! plugin's `lease.py` sees what changed around each test; this judges it against the groups.

use serde::{Deserialize, Serialize};

use crate::config::FixtureGroups;
use crate::pytest::events::ChangedPath;
use crate::repo_path::RepoPath;

/// A fixture group changed by a test that does not hold its lease.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) files: Vec<ChangedPath>,
    pub(crate) group: String,
}

/// A group changed by a test that does not hold its lease.
pub(crate) fn lease_violations(
    changed: &[ChangedPath],
    writes: &[String],
    groups: &FixtureGroups,
) -> Vec<Violation> {
    let mut out: Vec<Violation> = Vec::new();
    for c in changed {
        let Some(group) = groups.group_of(&RepoPath::parse_lossless(&c.path)) else {
            continue;
        };
        if writes.iter().any(|w| w == group) {
            continue;
        }
        match out.iter_mut().find(|v| v.group == group) {
            Some(v) => v.files.push(c.clone()),
            None => out.push(Violation {
                group: group.to_owned(),
                files: vec![c.clone()],
            }),
        }
    }
    out.sort_by(|a, b| a.group.cmp(&b.group));
    out
}
