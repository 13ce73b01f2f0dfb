//! Fixture manifests: every fixture file of a snapshot with its group, blake3 and size, plus one
//! digest per group. Sorted, no timestamps, byte-identical when nothing changed.

use std::collections::BTreeMap;
use std::path::Path;

use rayon::prelude::*;
use serde::Serialize;

use crate::config::{FixtureGroups, Group};
use crate::error::{Error, Result};
use crate::repo_path::RepoPath;
use crate::snapshot::{Entry, EntryKind, Snapshot};
use crate::statcache::{StatCache, StatKey};

pub(crate) const SCHEMA: u32 = 1;

/// Files at least this large are hashed with blake3's multi-threaded mmap path; smaller ones
/// are spread over threads one file each, which is faster for many small files.
const LARGE_FILE: u64 = 8 << 20;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FileKind {
    File,
    /// A symlink: `blake3` hashes its target string, `size` is the target's length.
    Link,
}

// The fields of the manifest's types are declared in sorted order, so that serializing them
// directly gives sorted keys without building a `serde_json::Value` (a test pins it): the warm
// manifest of a large tree is mostly output.

#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub(crate) struct FileEntry {
    pub(crate) blake3: String,
    pub(crate) group: String,
    pub(crate) kind: FileKind,
    pub(crate) path: RepoPath,
    pub(crate) size: u64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub(crate) struct GroupSummary {
    pub(crate) bytes: u64,
    /// Hash over the group's (path, kind, blake3) triples; changes iff a file of it changed.
    pub(crate) digest: String,
    pub(crate) files: usize,
    pub(crate) globs: Vec<String>,
    pub(crate) name: String,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub(crate) struct Manifest {
    pub(crate) files: Vec<FileEntry>,
    pub(crate) groups: Vec<GroupSummary>,
    pub(crate) schema: u32,
}

impl Manifest {
    /// Sorted, pretty JSON with a trailing newline (see the note on field order above).
    pub(crate) fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a manifest always serializes");
        s.push('\n');
        s
    }

    pub(crate) fn find(&self, path: &RepoPath) -> Option<&FileEntry> {
        self.files
            .binary_search_by(|f| f.path.cmp(path))
            .ok()
            .map(|i| &self.files[i])
    }

    pub(crate) fn group_digests(&self) -> BTreeMap<&str, &str> {
        self.groups
            .iter()
            .map(|g| (g.name.as_str(), g.digest.as_str()))
            .collect()
    }
}

/// What hashing a snapshot's fixtures needs besides the snapshot: the stat cache, for the
/// working tree.
pub(crate) struct Hashing<'a> {
    pub(crate) stat_cache: Option<&'a mut StatCache>,
}

/// Builds the manifest of `snapshot` for `groups`.
pub(crate) fn build(
    snapshot: &Snapshot,
    groups: &FixtureGroups,
    hashing: Hashing<'_>,
) -> Result<Manifest> {
    let members: Vec<(&Entry, &str)> = snapshot
        .entries
        .par_iter()
        .filter_map(|e| groups.group_of(&e.path).map(|g| (e, g)))
        .collect();
    let entries: Vec<&Entry> = members.iter().map(|(e, _)| *e).collect();
    let hashes = hash_entries(snapshot, &entries, hashing.stat_cache)?;
    let files: Vec<FileEntry> = members
        .par_iter()
        .zip(hashes)
        .map(|((entry, group), (hash, size))| FileEntry {
            path: entry.path.clone(),
            group: (*group).to_owned(),
            blake3: hash.to_hex().to_string(),
            size,
            kind: if entry.kind == EntryKind::Symlink {
                FileKind::Link
            } else {
                FileKind::File
            },
        })
        .collect();
    Ok(Manifest::from_files(groups, files))
}

impl Manifest {
    /// The manifest of `files` (sorted by path), with each group's summary.
    pub(crate) fn from_files(groups: &FixtureGroups, files: Vec<FileEntry>) -> Manifest {
        Manifest {
            groups: summarize(groups.groups(), &files),
            files,
            schema: SCHEMA,
        }
    }
}

fn summarize(groups: &[Group], files: &[FileEntry]) -> Vec<GroupSummary> {
    let mut sums: Vec<(blake3::Hasher, usize, u64)> = groups
        .iter()
        .map(|_| {
            (
                blake3::Hasher::new_derive_key("fixgate group-digest v1"),
                0,
                0,
            )
        })
        .collect();
    // One pass over the files, in path order; groups are few and sorted by name.
    let mut last = 0;
    for f in files {
        if groups.get(last).is_none_or(|g| g.name != f.group) {
            match groups.binary_search_by(|g| g.name.as_str().cmp(&f.group)) {
                Ok(i) => last = i,
                Err(_) => continue,
            }
        }
        let (hasher, count, bytes) = &mut sums[last];
        let path = f.path.as_bytes();
        hasher.update(&(path.len() as u64).to_le_bytes());
        hasher.update(path);
        hasher.update(&[f.kind as u8]);
        hasher.update(f.blake3.as_bytes());
        *count += 1;
        *bytes += f.size;
    }
    groups
        .iter()
        .zip(sums)
        .map(|(g, (hasher, files, bytes))| GroupSummary {
            name: g.name.clone(),
            globs: g.globs.clone(),
            digest: hasher.finalize().to_hex().to_string(),
            files,
            bytes,
        })
        .collect()
}

/// Hashes entries in parallel; returns (blake3, size) per entry in the same order.
pub(crate) fn hash_entries(
    snapshot: &Snapshot,
    entries: &[&Entry],
    stat_cache: Option<&mut StatCache>,
) -> Result<Vec<(blake3::Hash, u64)>> {
    if snapshot.commit().is_some() {
        return entries
            .par_iter()
            .map_init(
                || snapshot.open_git(),
                |git, entry| {
                    let git = git.as_ref().map_err(|e| Error::Git(e.to_string()))?;
                    let bytes = snapshot.read(entry, git.as_ref())?;
                    Ok((blake3::hash(&bytes), bytes.len() as u64))
                },
            )
            .collect();
    }
    let cache = stat_cache.as_deref();
    let results: Vec<Result<(blake3::Hash, u64, Option<StatKey>)>> = entries
        .par_iter()
        .map(|entry| hash_worktree_file(&snapshot.root, entry, cache))
        .collect();
    // The cache is only read during the parallel pass and written after it, which keeps the
    // parallel closure free of locks.
    let mut out = Vec::with_capacity(results.len());
    let mut fresh = Vec::new();
    for (entry, r) in entries.iter().zip(results) {
        let (hash, size, key) = r?;
        if let Some(key) = key {
            fresh.push((entry.path.clone(), key, hash));
        }
        out.push((hash, size));
    }
    if let Some(cache) = stat_cache {
        for (path, key, hash) in fresh {
            cache.insert(path, key, hash);
        }
    }
    Ok(out)
}

/// Hashes one working-tree file, reusing the stat cache when the file's stat is unchanged.
/// Returns the stat key when the hash was freshly computed (so the caller can record it).
fn hash_worktree_file(
    root: &Path,
    entry: &Entry,
    cache: Option<&StatCache>,
) -> Result<(blake3::Hash, u64, Option<StatKey>)> {
    let full = || root.join(entry.path.to_os_path());
    let key = match entry.stat {
        Some(key) => key,
        None => StatKey::from_metadata(
            &std::fs::symlink_metadata(full()).map_err(|e| Error::io("stat", full(), e))?,
        ),
    };
    if let Some(hash) = cache.and_then(|c| c.lookup(&entry.path, &key)) {
        return Ok((hash, key.size, None));
    }
    let full = full();
    if entry.kind == EntryKind::Symlink {
        use std::os::unix::ffi::OsStrExt;
        let target = std::fs::read_link(&full).map_err(|e| Error::io("read link", &full, e))?;
        let bytes = target.as_os_str().as_bytes();
        return Ok((blake3::hash(bytes), bytes.len() as u64, Some(key)));
    }
    let mut hasher = blake3::Hasher::new();
    if key.size >= LARGE_FILE {
        hasher
            .update_mmap_rayon(&full)
            .map_err(|e| Error::io("read", &full, e))?;
    } else {
        // Small files are read into a per-thread buffer: an mmap and munmap per file cost
        // more than the copy (measured: a third of a cold 10,000-file manifest).
        read_into(&full, &mut hasher).map_err(|e| Error::io("read", &full, e))?;
    }
    Ok((hasher.finalize(), key.size, Some(key)))
}

fn read_into(path: &Path, hasher: &mut blake3::Hasher) -> std::io::Result<()> {
    use std::io::Read;
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 256 << 10]);
    }
    let mut file = std::fs::File::open(path)?;
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        loop {
            match file.read(&mut buf[..]) {
                Ok(0) => return Ok(()),
                Ok(n) => {
                    hasher.update(&buf[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_json_has_the_same_sorted_keys_as_the_generic_path() {
        let file = |path: &[u8]| FileEntry {
            blake3: "ab".into(),
            group: "db".into(),
            kind: FileKind::Link,
            path: RepoPath::from_bytes(path),
            size: 3,
        };
        let mut m = Manifest {
            files: vec![
                file(b"tests/fixtures/db/a"),
                file(b"tests/fixtures/db/line\nbreak \"q\""),
                file(b"tests/fixtures/db/caf\xe9"),
            ],
            groups: vec![GroupSummary {
                bytes: 3,
                digest: "cd".into(),
                files: 1,
                globs: vec!["tests/fixtures/db/**".into()],
                name: "db".into(),
            }],
            schema: SCHEMA,
        };
        assert_eq!(m.to_json(), crate::context::to_json(&m));
        m.files.clear();
        assert_eq!(m.to_json(), crate::context::to_json(&m));
        m.groups.clear();
        assert_eq!(m.to_json(), crate::context::to_json(&m));
    }
}
