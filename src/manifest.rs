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

pub const SCHEMA: u32 = 1;

/// Files at least this large are hashed with blake3's multi-threaded mmap path; smaller ones
/// are spread over threads one file each, which is faster for many small files.
const LARGE_FILE: u64 = 8 << 20;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    /// A symlink: `blake3` hashes its target string, `size` is the target's length.
    Link,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FileEntry {
    pub path: RepoPath,
    pub group: String,
    pub blake3: String,
    pub size: u64,
    pub kind: FileKind,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct GroupSummary {
    pub name: String,
    pub globs: Vec<String>,
    /// Hash over the group's (path, kind, blake3) triples; changes iff a file of it changed.
    pub digest: String,
    pub files: usize,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Manifest {
    pub schema: u32,
    pub groups: Vec<GroupSummary>,
    pub files: Vec<FileEntry>,
}

impl Manifest {
    pub fn find(&self, path: &RepoPath) -> Option<&FileEntry> {
        self.files
            .binary_search_by(|f| f.path.cmp(path))
            .ok()
            .map(|i| &self.files[i])
    }

    pub fn group_digests(&self) -> BTreeMap<&str, &str> {
        self.groups
            .iter()
            .map(|g| (g.name.as_str(), g.digest.as_str()))
            .collect()
    }
}

/// What hashing a snapshot's fixtures needs besides the snapshot: the stat cache, for the
/// working tree.
pub struct Hashing<'a> {
    pub stat_cache: Option<&'a mut StatCache>,
}

/// Builds the manifest of `snapshot` for `groups`.
pub fn build(
    snapshot: &Snapshot,
    groups: &FixtureGroups,
    hashing: Hashing<'_>,
) -> Result<Manifest> {
    let members: Vec<(&Entry, &str)> = snapshot
        .entries
        .iter()
        .filter_map(|e| groups.group_of(&e.path).map(|g| (e, g)))
        .collect();
    let entries: Vec<&Entry> = members.iter().map(|(e, _)| *e).collect();
    let hashes = hash_entries(snapshot, &entries, hashing.stat_cache)?;
    let files: Vec<FileEntry> = members
        .iter()
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
    Ok(Manifest {
        schema: SCHEMA,
        groups: summarize(groups.groups(), &files),
        files,
    })
}

fn summarize(groups: &[Group], files: &[FileEntry]) -> Vec<GroupSummary> {
    groups
        .iter()
        .map(|g| {
            let mut hasher = blake3::Hasher::new_derive_key("fixgate group-digest v1");
            let mut count = 0;
            let mut bytes = 0;
            for f in files.iter().filter(|f| f.group == g.name) {
                let path = f.path.as_bytes();
                hasher.update(&(path.len() as u64).to_le_bytes());
                hasher.update(path);
                hasher.update(&[f.kind as u8]);
                hasher.update(f.blake3.as_bytes());
                count += 1;
                bytes += f.size;
            }
            GroupSummary {
                name: g.name.clone(),
                globs: g.globs.clone(),
                digest: hasher.finalize().to_hex().to_string(),
                files: count,
                bytes,
            }
        })
        .collect()
}

/// Hashes entries in parallel; returns (blake3, size) per entry in the same order.
pub fn hash_entries(
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
    let full = root.join(entry.path.to_os_path());
    let meta = std::fs::symlink_metadata(&full).map_err(|e| Error::io("stat", &full, e))?;
    let key = StatKey::from_metadata(&meta);
    if let Some(hash) = cache.and_then(|c| c.lookup(&entry.path, &key)) {
        return Ok((hash, meta.len(), None));
    }
    if meta.file_type().is_symlink() {
        use std::os::unix::ffi::OsStrExt;
        let target = std::fs::read_link(&full).map_err(|e| Error::io("read link", &full, e))?;
        let bytes = target.as_os_str().as_bytes();
        return Ok((blake3::hash(bytes), bytes.len() as u64, Some(key)));
    }
    let mut hasher = blake3::Hasher::new();
    if meta.len() >= LARGE_FILE {
        hasher
            .update_mmap_rayon(&full)
            .map_err(|e| Error::io("read", &full, e))?;
    } else {
        hasher
            .update_mmap(&full)
            .map_err(|e| Error::io("read", &full, e))?;
    }
    Ok((hasher.finalize(), meta.len(), Some(key)))
}
