//! The fixture delta: files added, removed and modified between two manifests, and the groups
//! whose digest changed.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::manifest::Manifest;
use crate::repo_path::RepoPath;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Change {
    Added,
    Removed,
    Modified,
}

impl Change {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Modified => "modified",
        }
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub(crate) struct ChangedFile {
    pub(crate) path: RepoPath,
    pub(crate) group: String,
    pub(crate) change: Change,
    pub(crate) base_blake3: Option<String>,
    pub(crate) head_blake3: Option<String>,
    /// For an added file whose content equals a removed file's: where it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) renamed_from: Option<RepoPath>,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub(crate) struct GroupChange {
    pub(crate) name: String,
    pub(crate) base_digest: Option<String>,
    pub(crate) head_digest: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub(crate) struct Delta {
    pub(crate) changed: Vec<ChangedFile>,
    pub(crate) groups_changed: Vec<GroupChange>,
}

impl Delta {
    pub(crate) fn is_empty(&self) -> bool {
        self.changed.is_empty()
    }

    pub(crate) fn count(&self, change: Change) -> usize {
        self.changed.iter().filter(|c| c.change == change).count()
    }
}

/// Compares two manifests built with the same fixture groups.
pub(crate) fn between(base: &Manifest, head: &Manifest) -> Delta {
    let base_files: BTreeMap<&RepoPath, _> = base.files.iter().map(|f| (&f.path, f)).collect();
    let head_files: BTreeMap<&RepoPath, _> = head.files.iter().map(|f| (&f.path, f)).collect();
    let mut changed = Vec::new();
    for (path, b) in &base_files {
        match head_files.get(path) {
            None => changed.push(ChangedFile {
                path: (*path).clone(),
                group: b.group.clone(),
                change: Change::Removed,
                base_blake3: Some(b.blake3.clone()),
                head_blake3: None,
                renamed_from: None,
            }),
            Some(h) if h.blake3 != b.blake3 || h.kind != b.kind => changed.push(ChangedFile {
                path: (*path).clone(),
                group: h.group.clone(),
                change: Change::Modified,
                base_blake3: Some(b.blake3.clone()),
                head_blake3: Some(h.blake3.clone()),
                renamed_from: None,
            }),
            Some(_) => {}
        }
    }
    // Renames are reported as a removal plus an addition (what a test that reads the old path
    // sees), with the addition pointing at its source so a reviewer sees the move.
    let removed_by_hash: BTreeMap<&str, &RepoPath> = changed
        .iter()
        .filter(|c| c.change == Change::Removed)
        .filter_map(|c| c.base_blake3.as_deref().map(|h| (h, &c.path)))
        .collect();
    let mut added = Vec::new();
    for (path, h) in &head_files {
        if !base_files.contains_key(path) {
            added.push(ChangedFile {
                path: (*path).clone(),
                group: h.group.clone(),
                change: Change::Added,
                base_blake3: None,
                head_blake3: Some(h.blake3.clone()),
                renamed_from: removed_by_hash.get(h.blake3.as_str()).map(|p| (*p).clone()),
            });
        }
    }
    changed.extend(added);
    changed.sort_by(|a, b| a.path.cmp(&b.path));

    let base_groups = base.group_digests();
    let head_groups = head.group_digests();
    let mut names: Vec<&str> = base_groups
        .keys()
        .chain(head_groups.keys())
        .copied()
        .collect();
    names.sort_unstable();
    names.dedup();
    let groups_changed = names
        .into_iter()
        .filter(|n| base_groups.get(n) != head_groups.get(n))
        .map(|n| GroupChange {
            name: n.to_owned(),
            base_digest: base_groups.get(n).map(|d| (*d).to_owned()),
            head_digest: head_groups.get(n).map(|d| (*d).to_owned()),
        })
        .collect();
    Delta {
        changed,
        groups_changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::{FileEntry, FileKind, GroupSummary, SCHEMA};

    fn manifest(files: &[(&str, &str)]) -> Manifest {
        Manifest {
            schema: SCHEMA,
            groups: vec![GroupSummary {
                name: "db".into(),
                globs: vec![],
                digest: files.iter().map(|f| f.1).collect::<String>(),
                files: files.len(),
                bytes: 0,
            }],
            files: files
                .iter()
                .map(|(p, h)| FileEntry {
                    path: RepoPath::from(*p),
                    group: "db".into(),
                    blake3: (*h).into(),
                    size: 1,
                    kind: FileKind::File,
                })
                .collect(),
        }
    }

    #[test]
    fn classifies_each_change_and_links_renames() {
        let base = manifest(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let head = manifest(&[("a", "1"), ("b", "9"), ("d", "3")]);
        let d = between(&base, &head);
        let got: Vec<(String, Change)> = d
            .changed
            .iter()
            .map(|c| (c.path.to_string(), c.change))
            .collect();
        assert_eq!(
            got,
            vec![
                ("b".into(), Change::Modified),
                ("c".into(), Change::Removed),
                ("d".into(), Change::Added)
            ]
        );
        assert_eq!(d.changed[2].renamed_from, Some(RepoPath::from("c")));
        assert_eq!(d.groups_changed.len(), 1);
    }

    #[test]
    fn identical_manifests_have_an_empty_delta() {
        let m = manifest(&[("a", "1")]);
        let d = between(&m, &m);
        assert!(d.is_empty() && d.groups_changed.is_empty());
    }
}
