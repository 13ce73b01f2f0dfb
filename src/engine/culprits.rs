//! Culprit sets remembered across audits, keyed by the base and the victim: a stream of heads
//! against one base finds the same polluters again and again, and one run that confirms a known
//! set replaces a whole bisection.

use fixgate_cache::{ActionRecord, Digest, KeyWriter, Store};

/// At most this many sets are kept per victim (the newest first): a hint, not a history.
const KEPT: usize = 8;

fn key(base_tree: &Digest, victim: &str) -> Digest {
    KeyWriter::new("culprits v1")
        .digest(base_tree)
        .str(victim)
        .finish()
}

/// The culprit sets remembered for the victims of one base, in the audit's store.
#[derive(Clone, Copy)]
pub(crate) struct Memory<'s> {
    pub(crate) store: &'s dyn Store,
    /// The base's tree digest: what the sets are remembered by.
    pub(crate) base_tree: Digest,
}

impl Memory<'_> {
    /// The sets found for `victim` in earlier audits of the base, newest first.
    pub(crate) fn recall(&self, victim: &str) -> Vec<Vec<String>> {
        recall(self.store, &self.base_tree, victim)
    }

    /// Remembers a set found for `victim`.
    pub(crate) fn remember(&self, victim: &str, set: &[String]) {
        remember(self.store, &self.base_tree, victim, set);
    }
}

/// The culprit sets found for `victim` in earlier audits of the base `base_tree`, newest
/// first. A missing or unreadable record is no sets: it only costs a bisection.
fn recall(store: &dyn Store, base_tree: &Digest, victim: &str) -> Vec<Vec<String>> {
    let Some(record) = store.get_action(&key(base_tree, victim)) else {
        return Vec::new();
    };
    store
        .get_blob(&record.output)
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Remembers a culprit set found for `victim` against the base `base_tree`.
fn remember(store: &dyn Store, base_tree: &Digest, victim: &str, set: &[String]) {
    let mut sets = recall(store, base_tree, victim);
    sets.retain(|s| s != set);
    sets.insert(0, set.to_vec());
    sets.truncate(KEPT);
    // A list of lists of strings always encodes.
    let Ok(bytes) = serde_json::to_vec(&sets) else {
        return;
    };
    let output = store.put_blob(&bytes);
    store.put_action(
        &key(base_tree, victim),
        &ActionRecord {
            output,
            failed: false,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use fixgate_cache::MemStore;

    #[test]
    fn sets_are_kept_per_base_and_victim_newest_first_without_repeats() {
        let store = MemStore::new();
        let (b1, b2) = (Digest::of(b"base 1"), Digest::of(b"base 2"));
        remember(&store, &b1, "t::v", &["t::a".into()]);
        remember(&store, &b1, "t::v", &["t::b".into(), "t::c".into()]);
        remember(&store, &b1, "t::v", &["t::a".into()]);
        assert_eq!(
            recall(&store, &b1, "t::v"),
            vec![vec!["t::a".to_string()], vec!["t::b".into(), "t::c".into()]]
        );
        assert!(recall(&store, &b2, "t::v").is_empty());
        assert!(recall(&store, &b1, "t::other").is_empty());
        for i in 0..20 {
            remember(&store, &b2, "t::v", &[format!("t::{i}")]);
        }
        assert_eq!(recall(&store, &b2, "t::v").len(), KEPT);
    }
}
