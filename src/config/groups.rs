//! Fixture groups compiled: which group a path belongs to, which directories a watcher must
//! cover, and the one set of rules for group names and globs that every source is checked by.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Serialize;

use crate::config::model::{ConfigError, ConfigSource, Group};
use crate::repo_path::RepoPath;

pub(super) const NAME_RULE: &str = "use only letters, digits, '_', '.' and '-'";

/// The fixture groups of a snapshot with their globs compiled. Cloning is cheap (shared).
#[derive(Clone, Debug)]
pub(crate) struct FixtureGroups {
    inner: Arc<GroupsInner>,
}

#[derive(Debug)]
struct GroupsInner {
    /// Sorted by name.
    groups: Vec<Group>,
    /// Every glob of every group, added in group order, so a lower match index is an earlier
    /// group by name.
    set: GlobSet,
    /// For each glob in `set`, the index of its group in `groups`.
    owners: Vec<usize>,
    source: ConfigSource,
}

impl FixtureGroups {
    /// Compiles `groups` (already validated); sorts them by name.
    pub(crate) fn build(
        mut groups: Vec<Group>,
        source: ConfigSource,
    ) -> Result<FixtureGroups, ConfigError> {
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        let mut builder = GlobSetBuilder::new();
        let mut owners = Vec::new();
        for (index, group) in groups.iter().enumerate() {
            for glob in &group.globs {
                builder.add(compile_glob(glob).map_err(|e| ConfigError::GlobSet(e.to_string()))?);
                owners.push(index);
            }
        }
        let set = builder
            .build()
            .map_err(|e| ConfigError::GlobSet(e.to_string()))?;
        Ok(FixtureGroups {
            inner: Arc::new(GroupsInner {
                groups,
                set,
                owners,
                source,
            }),
        })
    }

    /// The groups, sorted by name; each group's globs in declaration order.
    pub(crate) fn groups(&self) -> &[Group] {
        &self.inner.groups
    }

    /// The groups' part of a cache key: manifests and leases depend on them.
    pub(crate) fn key(&self) -> String {
        let mut w = fixgate_cache::KeyWriter::new("groups");
        w.list(self.groups(), |w, g| {
            w.str(&g.name).list(&g.globs, |w, glob| {
                w.str(glob);
            });
        });
        w.finish().to_string()
    }

    /// The group called `name`, if there is one.
    #[cfg(test)]
    pub(crate) fn get(&self, name: &str) -> Option<&Group> {
        let groups = &self.inner.groups;
        groups
            .binary_search_by(|g| g.name.as_str().cmp(name))
            .ok()
            .and_then(|i| groups.get(i))
    }

    pub(crate) fn source(&self) -> ConfigSource {
        self.inner.source
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.inner.groups.is_empty()
    }

    /// The first group, by name, with a glob that matches `path`. Matching is on the raw bytes,
    /// so a non-UTF-8 file name belongs to a group like any other.
    pub(crate) fn group_of(&self, path: &RepoPath) -> Option<&str> {
        let candidate = Candidate::new(Path::new(OsStr::from_bytes(path.as_bytes())));
        let inner = &*self.inner;
        // Globs were added in group order, so the smallest owner is the first group by name.
        inner
            .set
            .matches_candidate(&candidate)
            .into_iter()
            .filter_map(|i| inner.owners.get(i).copied())
            .min()
            .and_then(|g| inner.groups.get(g))
            .map(|g| g.name.as_str())
    }

    /// The directories a watcher must cover to see every file the globs can match: for each glob,
    /// its leading components without glob metacharacters (the last component is a file name,
    /// so it never counts). Sorted, deduplicated, and without roots nested inside another root;
    /// `""` is the repository root.
    pub(crate) fn watch_roots(&self) -> Vec<String> {
        let all: BTreeSet<String> = self
            .inner
            .groups
            .iter()
            .flat_map(|g| g.globs.iter())
            .map(|glob| literal_dir_prefix(glob))
            .collect();
        let mut roots: Vec<String> = Vec::new();
        for root in all {
            let nested = roots.iter().any(|r| {
                r.is_empty()
                    || root
                        .strip_prefix(r.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            });
            if !nested {
                roots.push(root);
            }
        }
        roots
    }
}

impl Serialize for FixtureGroups {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            source: ConfigSource,
            groups: &'a [Group],
        }
        View {
            source: self.source(),
            groups: self.groups(),
        }
        .serialize(s)
    }
}

/// The leading directory components of `glob` that hold no glob metacharacter. A backslash
/// counts as one too: it escapes the next character, so the component is not literal text.
fn literal_dir_prefix(glob: &str) -> String {
    let mut parts: Vec<&str> = glob.split('/').collect();
    parts.pop();
    parts
        .into_iter()
        .take_while(|c| !c.contains(['*', '?', '[', '{', '\\']))
        .collect::<Vec<_>>()
        .join("/")
}

/// The one place globs are compiled, so validation and matching can never disagree:
/// `*` stays within one directory, `**` crosses directories.
fn compile_glob(glob: &str) -> Result<globset::Glob, globset::Error> {
    GlobBuilder::new(glob).literal_separator(true).build()
}

/// A group as one file declares it, with the line that first declares it.
#[derive(Debug)]
pub(super) struct Declared {
    pub(super) line: usize,
    pub(super) globs: Vec<String>,
}

impl Declared {
    pub(super) fn add(&mut self, glob: &str) {
        if !self.globs.iter().any(|g| g == glob) {
            self.globs.push(glob.to_owned());
        }
    }
}

pub(super) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!(
            "the group name is empty; name the group ({NAME_RULE})"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(format!("group name {name:?} is not valid; {NAME_RULE}"));
    }
    Ok(())
}

/// Checks one glob; the message names the glob and says how to fix it.
pub(super) fn check_glob(glob: &str) -> Result<(), String> {
    if glob.is_empty() {
        return Err(
            "the glob is empty; write a pattern relative to the repository root, for \
                    example \"tests/fixtures/db/*.sqlite\""
                .to_owned(),
        );
    }
    if glob.starts_with('/') {
        return Err(format!(
            "glob {glob:?} is absolute; write it relative to the repository root, for example \
             \"tests/fixtures/db/*.sqlite\""
        ));
    }
    let parts: Vec<&str> = glob.split('/').collect();
    if parts.contains(&"..") {
        return Err(format!(
            "glob {glob:?} escapes the repository through \"..\"; fixture globs can only name \
             files inside the repository, relative to its root"
        ));
    }
    if glob.ends_with('/') {
        // Paths are files, so a trailing slash would silently match nothing.
        return Err(format!(
            "glob {glob:?} ends with \"/\" and would match no file; write \"{glob}**\" for \
             everything under that directory"
        ));
    }
    if parts.iter().any(|p| p.is_empty() || *p == ".") {
        // Snapshot paths are normalized, so "./x" or "a//b" would silently match nothing.
        return Err(format!(
            "glob {glob:?} has an empty or \".\" component and would match no file; write it \
             relative to the repository root without \"./\" or \"//\""
        ));
    }
    compile_glob(glob).map_err(|e| {
        format!(
            "invalid glob {glob:?}: {}; fix the pattern (* matches within one directory, ** \
             across directories)",
            e.kind()
        )
    })?;
    Ok(())
}
