//! The paths and modes of git's index file (`.git/index`), read directly for the work-tree
//! snapshot; anything this reader does not handle is left to libgit2.
//!
//! libgit2 verifies the index's SHA-1 trailer (with collision detection) and builds a map of
//! every entry on each open, a few milliseconds on a tree of thousands of files and all of it on
//! the path of a warm `lock --check`; git itself skips that verification on read
//! (`index.skipHash`, `verify_index_checksum` off). The snapshot needs only paths and modes.

use std::collections::HashSet;

/// What a work-tree walk needs of the index: the tracked files, the directories above them, the
/// gitlinks.
#[derive(Default)]
pub(crate) struct Tracked {
    pub(crate) files: HashSet<Vec<u8>>,
    /// Every directory with a tracked file somewhere below it.
    pub(crate) dirs: HashSet<Vec<u8>>,
    /// Submodules: another repository's tree, not files here; nothing below them is walked.
    pub(crate) gitlinks: HashSet<Vec<u8>>,
}

/// Reads the index of `git`: directly, or through libgit2 when there is none yet or the direct
/// reader leaves it to libgit2.
pub(crate) fn tracked(git: &git2::Repository) -> crate::error::Result<Tracked> {
    let index = match std::fs::read(git.path().join("index"))
        .ok()
        .and_then(|bytes| entries(&bytes))
    {
        Some(entries) => entries,
        None => git
            .index()?
            .iter()
            .map(|e| IndexEntry {
                path: e.path,
                mode: e.mode,
            })
            .collect(),
    };
    let mut t = Tracked::default();
    for e in index {
        let mut end = e.path.len();
        while let Some(slash) = e.path[..end].iter().rposition(|&b| b == b'/') {
            if !t.dirs.insert(e.path[..slash].to_vec()) {
                break;
            }
            end = slash;
        }
        if (e.mode & 0o170000) == 0o160000 {
            t.gitlinks.insert(e.path);
        } else {
            t.files.insert(e.path);
        }
    }
    Ok(t)
}

/// One entry of the index: its path and mode (`0o160000` is a gitlink).
pub(crate) struct IndexEntry {
    pub(crate) path: Vec<u8>,
    pub(crate) mode: u32,
}

/// The entries of index file bytes, or `None` for what this reader leaves to libgit2: an
/// unknown version, a split index (its entries live in another file), a sparse index (directory
/// entries), or bytes that do not parse.
pub(crate) fn entries(bytes: &[u8]) -> Option<Vec<IndexEntry>> {
    let (header, mut rest) = bytes.split_at_checked(12)?;
    if &header[..4] != b"DIRC" {
        return None;
    }
    let version = be32(&header[4..8])?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(&header[8..12])? as usize;
    let mut out: Vec<IndexEntry> = Vec::with_capacity(count.min(bytes.len() / 62));
    let mut previous: Vec<u8> = Vec::new();
    for _ in 0..count {
        // ctime, mtime (8 each), dev, ino, mode, uid, gid, size (4 each), the object id, flags.
        let fixed = rest.get(..62)?;
        let mode = be32(&fixed[24..28])?;
        let flags = u16::from_be_bytes([fixed[60], fixed[61]]);
        let mut at = 62;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return None;
            }
            at += 2;
        }
        // A directory entry only appears in a sparse index.
        if mode & 0o170000 == 0o040000 {
            return None;
        }
        let path = if version == 4 {
            // The path is the previous one less `strip` trailing bytes, plus a suffix.
            let (strip, used) = varint(rest.get(at..)?)?;
            at += used;
            let suffix_len = rest.get(at..)?.iter().position(|&b| b == 0)?;
            let keep = previous.len().checked_sub(usize::try_from(strip).ok()?)?;
            let mut path = previous[..keep].to_vec();
            path.extend_from_slice(&rest[at..at + suffix_len]);
            at += suffix_len + 1;
            path
        } else {
            let len = rest.get(at..)?.iter().position(|&b| b == 0)?;
            let path = rest[at..at + len].to_vec();
            // NUL padding to a multiple of eight bytes, at least one.
            at = (at + len + 8) & !7;
            path
        };
        rest = rest.get(at..)?;
        previous.clone_from(&path);
        out.push(IndexEntry { path, mode });
    }
    // Extensions, then the 20-byte trailer. A split index's entries are elsewhere.
    while rest.len() > 20 {
        let (signature, size) = (rest.get(..4)?, be32(rest.get(4..8)?)? as usize);
        if signature == b"link" || signature == b"sdir" {
            return None;
        }
        rest = rest.get(8 + size..)?;
    }
    Some(out)
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// git's offset varint (`decode_varint`): big-endian groups of seven bits, each continuation
/// adding one. Returns the value and the bytes it used.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut used = 0;
    let mut c = *b.first()?;
    let mut value = u64::from(c & 0x7f);
    while c & 0x80 != 0 {
        used += 1;
        c = *b.get(used)?;
        value = value.checked_add(1)?.checked_mul(128)? | u64::from(c & 0x7f);
    }
    Some((value, used + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &std::path::Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .status()
            .expect("git runs")
            .success();
        assert!(ok, "git {args:?} failed");
    }

    /// Every index version git writes reads back as libgit2 reads it.
    #[test]
    fn versions_2_3_and_4_read_as_libgit2_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q"]);
        let names = [
            "a.txt",
            "dir/b.bin",
            "dir/sub/c with space.txt",
            "dir/sub/d",
            "dir2/e.py",
            "z/\u{e9}t\u{e9}.txt",
            "long/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.txt",
        ];
        for n in names {
            let p = root.join(n);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, n).unwrap();
        }
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "base"]);
        git(root, &["add", "-N", "dir/sub/d"]);
        std::fs::write(root.join("new.txt"), "intent").unwrap();
        // Intent-to-add sets the extended flags, so version 3 is exercised too.
        git(root, &["add", "-N", "new.txt"]);
        for version in ["4", "2"] {
            git(root, &["update-index", "--index-version", version]);
            let bytes = std::fs::read(root.join(".git/index")).unwrap();
            let ours: Vec<(Vec<u8>, u32)> = entries(&bytes)
                .unwrap_or_else(|| panic!("version {version} parses"))
                .into_iter()
                .map(|e| (e.path, e.mode))
                .collect();
            let repo = git2::Repository::open(root).unwrap();
            let theirs: Vec<(Vec<u8>, u32)> = repo
                .index()
                .unwrap()
                .iter()
                .map(|e| (e.path, e.mode))
                .collect();
            assert_eq!(ours, theirs, "index version {version}");
            assert_eq!(ours.len(), names.len() + 1);
        }
    }

    #[test]
    fn what_it_does_not_read_is_none() {
        assert!(entries(b"").is_none());
        assert!(entries(b"DIRC\0\0\0\x05\0\0\0\0").is_none());
        // One entry announced, none there.
        assert!(entries(b"DIRC\0\0\0\x02\0\0\0\x01").is_none());
        assert!(entries(b"DIRC\0\0\0\x02\0\0\0\0").is_some_and(|e| e.is_empty()));
    }
}
