//! Input roots as REAPI Merkle trees: files, executables and links by path become `Directory`
//! messages, each named by its digest, so that two trees sharing a subtree share its blobs and a
//! head that changes one file uploads that file and the directories above it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use fixgate_cache::{DigestFunction, RemoteDigest};
use prost::Message;

use crate::beneath::dir::component;

/// Where the bytes of a file blob are when it must be uploaded.
#[derive(Clone, Debug)]
pub(crate) enum Source {
    /// Held in memory (directories, the plugin, a run's own files).
    Bytes(Arc<[u8]>),
    /// The `n`-th entry of the snapshot the tree was built from, read again on upload: a tree
    /// keeps the digests of a repository's files, not their bytes.
    Entry(usize),
    /// A file of the run's overlay (the other side's bytes of a fixture), held in memory: a
    /// snapshot file too, as far as what a head uploads is counted.
    Overlay(Arc<[u8]>),
}

/// One thing to put in a tree.
pub(crate) enum Item {
    File {
        digest: RemoteDigest,
        executable: bool,
        source: Source,
    },
    Link {
        target: String,
    },
    /// A directory that must exist even when empty (`home/`, `tmp/`).
    Dir,
    /// A directory built before (the snapshot's tree under every run's root): its blobs are
    /// that tree's.
    Subtree(RemoteDigest),
}

/// A built tree: its root directory's digest and every blob below it.
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    pub(crate) root: RemoteDigest,
    pub(crate) blobs: HashMap<RemoteDigest, Source>,
}

/// Why a tree cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TreeError {
    #[error("the path {0:?} has {1}")]
    BadName(String, crate::beneath::NameError),
    #[error("the path {0:?} is not UTF-8, which REAPI names cannot hold")]
    NotUtf8(String),
    #[error("the path {0:?} is both a file and a directory")]
    Clash(String),
}

#[derive(Default)]
struct DirNode {
    dirs: BTreeMap<String, DirNode>,
    built: BTreeMap<String, RemoteDigest>,
    files: BTreeMap<String, (RemoteDigest, bool)>,
    links: BTreeMap<String, String>,
}

/// Builds a tree from `items` by path (`/`-separated, relative). Every component must be one
/// normal name; names are sorted by their bytes, as REAPI requires.
pub(crate) fn build(
    function: DigestFunction,
    items: impl IntoIterator<Item = (Vec<u8>, Item)>,
) -> Result<Tree, TreeError> {
    let mut root = DirNode::default();
    let mut blobs: HashMap<RemoteDigest, Source> = HashMap::new();
    for (path, item) in items {
        let shown = String::from_utf8_lossy(&path).into_owned();
        let text = String::from_utf8(path).map_err(|_| TreeError::NotUtf8(shown.clone()))?;
        let parts: Vec<&str> = text.split('/').collect();
        for p in &parts {
            component(p.as_bytes()).map_err(|e| TreeError::BadName(shown.clone(), e))?;
        }
        let (leaf, dirs) = parts.split_last().expect("split yields one part at least");
        let mut node = &mut root;
        for d in dirs {
            if node.files.contains_key(*d)
                || node.links.contains_key(*d)
                || node.built.contains_key(*d)
            {
                return Err(TreeError::Clash(shown));
            }
            node = node.dirs.entry((*d).to_owned()).or_default();
        }
        if node.built.contains_key(*leaf) {
            return Err(TreeError::Clash(shown));
        }
        let taken = node.dirs.contains_key(*leaf)
            || node.files.contains_key(*leaf)
            || node.links.contains_key(*leaf);
        match item {
            Item::Dir => {
                if node.files.contains_key(*leaf) || node.links.contains_key(*leaf) {
                    return Err(TreeError::Clash(shown));
                }
                node.dirs.entry((*leaf).to_owned()).or_default();
            }
            _ if taken => return Err(TreeError::Clash(shown)),
            Item::File {
                digest,
                executable,
                source,
            } => {
                node.files.insert((*leaf).to_owned(), (digest, executable));
                blobs.entry(digest).or_insert(source);
            }
            Item::Link { target } => {
                node.links.insert((*leaf).to_owned(), target);
            }
            Item::Subtree(digest) => {
                node.built.insert((*leaf).to_owned(), digest);
            }
        }
    }
    let root = encode(function, &root, &mut blobs);
    Ok(Tree { root, blobs })
}

/// Encodes `node` and everything below it, leaves first; returns its digest.
fn encode(
    function: DigestFunction,
    node: &DirNode,
    blobs: &mut HashMap<RemoteDigest, Source>,
) -> RemoteDigest {
    let mut directories: Vec<reapi::DirectoryNode> = node
        .dirs
        .iter()
        .map(|(name, child)| reapi::DirectoryNode {
            name: name.clone(),
            digest: Some(encode(function, child, blobs).to_proto()),
        })
        .chain(node.built.iter().map(|(name, d)| reapi::DirectoryNode {
            name: name.clone(),
            digest: Some(d.to_proto()),
        }))
        .collect();
    directories.sort_by(|a, b| a.name.cmp(&b.name));
    let files = node
        .files
        .iter()
        .map(|(name, (digest, executable))| reapi::FileNode {
            name: name.clone(),
            digest: Some(digest.to_proto()),
            is_executable: *executable,
            ..Default::default()
        })
        .collect();
    let symlinks = node
        .links
        .iter()
        .map(|(name, target)| reapi::SymlinkNode {
            name: name.clone(),
            target: target.clone(),
            ..Default::default()
        })
        .collect();
    let bytes = reapi::Directory {
        files,
        directories,
        symlinks,
        ..Default::default()
    }
    .encode_to_vec();
    let digest = function.digest(&bytes);
    blobs.insert(digest, Source::Bytes(bytes.into()));
    digest
}

/// A file of bytes held in memory, as an item.
pub(crate) fn bytes_item(function: DigestFunction, bytes: &[u8], executable: bool) -> Item {
    Item::File {
        digest: function.digest(bytes),
        executable,
        source: Source::Bytes(bytes.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: DigestFunction = DigestFunction::Sha256;

    fn file(text: &str) -> Item {
        bytes_item(F, text.as_bytes(), false)
    }

    fn tree(items: Vec<(&str, Item)>) -> Result<Tree, TreeError> {
        build(
            F,
            items.into_iter().map(|(p, i)| (p.as_bytes().to_vec(), i)),
        )
    }

    fn decode(t: &Tree, d: &RemoteDigest) -> reapi::Directory {
        match &t.blobs[d] {
            Source::Bytes(b) => reapi::Directory::decode(&b[..]).unwrap(),
            Source::Entry(_) | Source::Overlay(_) => panic!("a directory is held in memory"),
        }
    }

    #[test]
    fn the_same_files_give_the_same_root_in_any_order() {
        let a = tree(vec![
            ("b/x.py", file("x")),
            ("a.py", file("a")),
            ("b/c/y", file("y")),
        ])
        .unwrap();
        let b = tree(vec![
            ("b/c/y", file("y")),
            ("a.py", file("a")),
            ("b/x.py", file("x")),
        ])
        .unwrap();
        assert_eq!(a.root, b.root);
        let root = decode(&a, &a.root);
        assert_eq!(root.files.len(), 1);
        assert_eq!(root.directories[0].name, "b");
    }

    #[test]
    fn one_changed_file_changes_only_the_directories_above_it() {
        let base = tree(vec![
            ("src/a.py", file("a")),
            ("tests/t.py", file("t")),
            ("tests/data/d.json", file("{}")),
        ])
        .unwrap();
        let head = tree(vec![
            ("src/a.py", file("a")),
            ("tests/t.py", file("t")),
            ("tests/data/d.json", file("{\"x\": 1}")),
        ])
        .unwrap();
        let new: Vec<_> = head
            .blobs
            .keys()
            .filter(|d| !base.blobs.contains_key(d))
            .collect();
        // The file, tests/data/, tests/ and the root.
        assert_eq!(new.len(), 4, "{new:?}");
    }

    #[test]
    fn names_that_are_not_one_component_are_refused() {
        for bad in ["../x", "a//b", "./a", "/abs", "a/../b"] {
            let err = tree(vec![(bad, file("x"))]).unwrap_err();
            assert!(matches!(err, TreeError::BadName(..)), "{bad}: {err}");
        }
        let clash = tree(vec![("a", file("x")), ("a/b", file("y"))]).unwrap_err();
        assert!(matches!(clash, TreeError::Clash(_)));
        let not_utf8 = build(F, [(vec![0xff], file("x"))]).unwrap_err();
        assert!(matches!(not_utf8, TreeError::NotUtf8(_)));
    }

    #[test]
    fn links_and_empty_directories_are_kept() {
        let t = tree(vec![
            ("home", Item::Dir),
            (
                "tree/l",
                Item::Link {
                    target: "../x".into(),
                },
            ),
        ])
        .unwrap();
        let root = decode(&t, &t.root);
        assert_eq!(root.directories.len(), 2);
        let tree_dir = decode(
            &t,
            &RemoteDigest::from_proto(root.directories[1].digest.as_ref().unwrap()).unwrap(),
        );
        assert_eq!(tree_dir.symlinks[0].target, "../x");
    }
}
