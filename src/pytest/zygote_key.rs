//! What a warm interpreter is known by: its snapshot's identity (the root and every entry), the
//! test modules it imports without making their items ([`Carried`]), and whether it traced its
//! collection. A zygote serves a run only under the keys the run would give it.

use std::collections::BTreeSet;

use crate::snapshot::Snapshot;

/// A snapshot's identity: its root and every entry with its blob or stat data.
pub(crate) type Key = [u8; 32];

pub(crate) fn identity(snapshot: &Snapshot) -> Key {
    let mut h = blake3::Hasher::new_derive_key("fixgate zygote snapshot v1");
    let root = snapshot.root.display().to_string();
    h.update(&(root.len() as u64).to_le_bytes());
    h.update(root.as_bytes());
    for e in &snapshot.entries {
        let text = format!("{}\0{:?}\0{:?}\0{:?}", e.path, e.kind, e.blob, e.stat);
        h.update(&(text.len() as u64).to_le_bytes());
        h.update(text.as_bytes());
    }
    *h.finalize().as_bytes()
}

/// Whether two snapshots are the same tree at the same root (one zygote serves both).
pub(crate) fn same_snapshot(a: &Snapshot, b: &Snapshot) -> bool {
    identity(a) == identity(b)
}

/// The test modules a zygote imports without making their items, by node id (a head's
/// collection whose other items are the base's: `crate::audit::itemize`). Empty: it makes every
/// item, as pytest does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Carried(pub(crate) BTreeSet<String>);

impl Carried {
    /// Whether every module makes its items.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A digest of the modules, for the key of a collection that makes no items of them.
    pub(crate) fn digest(&self) -> String {
        let mut h = blake3::Hasher::new_derive_key("fixgate carried modules v1");
        for m in &self.0 {
            h.update(&(m.len() as u64).to_le_bytes());
            h.update(m.as_bytes());
        }
        h.finalize().to_hex().to_string()
    }

    /// What its collection is known by beside the snapshot: a snapshot's collection and its
    /// collection without some modules' items are two collections.
    pub(crate) fn collection_key(&self, snapshot: &Key) -> Key {
        if self.is_empty() {
            return *snapshot;
        }
        let mut h = blake3::Hasher::new_derive_key("fixgate carried collection v1");
        h.update(snapshot);
        h.update(self.digest().as_bytes());
        *h.finalize().as_bytes()
    }
}

/// The key of a zygote: its collection's (the snapshot's identity, and the modules it made no
/// items of), and whether it traced its collection.
pub(crate) fn zygote_key(collection: &Key, record_code: bool) -> Key {
    let mut h = blake3::Hasher::new_derive_key("fixgate zygote v1");
    h.update(collection);
    h.update(&[u8::from(record_code)]);
    *h.finalize().as_bytes()
}

/// The keys of one zygote: its snapshot's identity, its collection's, and its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    pub(crate) snapshot: Key,
    pub(crate) collection: Key,
    pub(crate) zygote: Key,
}

impl Keys {
    /// The keys of a zygote of the snapshot known by `snapshot` that makes no items of
    /// `carried` and traced its collection or not.
    pub(crate) fn new(snapshot: Key, carried: &Carried, record_code: bool) -> Keys {
        let collection = carried.collection_key(&snapshot);
        Keys {
            snapshot,
            collection,
            zygote: zygote_key(&collection, record_code),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot_of(dir: &std::path::Path) -> Snapshot {
        crate::snapshot::Repo::open(Some(dir), None)
            .and_then(|r| r.snapshot(None))
            .unwrap()
    }

    fn carried(modules: &[&str]) -> Carried {
        Carried(modules.iter().map(|m| m.to_string()).collect())
    }

    #[test]
    fn a_snapshot_is_known_by_its_root_and_every_entry() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("test_a.py"), "def test_a():\n    pass\n").unwrap();
        let a = snapshot_of(dir.path());
        assert!(
            same_snapshot(&a, &snapshot_of(dir.path())),
            "the same tree twice"
        );
        std::fs::write(dir.path().join("test_b.py"), "").unwrap();
        assert!(!same_snapshot(&a, &snapshot_of(dir.path())), "a file more");
        // The same files under another root: a zygote's sandbox paths would differ.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("test_a.py"), "def test_a():\n    pass\n").unwrap();
        assert!(!same_snapshot(&a, &snapshot_of(other.path())));
    }

    #[test]
    fn a_collection_without_some_modules_items_and_a_traced_one_are_other_zygotes() {
        let snap = [7u8; 32];
        let whole = Keys::new(snap, &Carried::default(), false);
        // A collection that makes every item is the snapshot's own.
        assert_eq!(whole.collection, snap);
        assert_eq!(whole.snapshot, snap);
        let traced = Keys::new(snap, &Carried::default(), true);
        assert_eq!(traced.collection, whole.collection);
        assert_ne!(traced.zygote, whole.zygote, "traced or not");
        let some = Keys::new(snap, &carried(&["tests/test_a.py"]), false);
        let others = Keys::new(snap, &carried(&["tests/test_b.py"]), false);
        assert_ne!(some.collection, whole.collection);
        assert_ne!(some.collection, others.collection);
        assert_ne!(some.zygote, whole.zygote);
        // The modules' names are delimited: ["ab"] is not ["a", "b"].
        assert_ne!(carried(&["ab"]).digest(), carried(&["a", "b"]).digest());
        assert_eq!(
            Keys::new(snap, &carried(&["a", "b"]), true),
            Keys::new(snap, &carried(&["b", "a"]), true)
        );
    }
}
