//! Opening the cache: the disk store under the cache directory, or no store at all.

use std::path::Path;
use std::sync::Arc;

use fixgate_cache::{DiskStore, NoStore, Store};

/// The store for `cache_dir`, or `NoStore` (with the warning to print) when the cache is
/// disabled or cannot be opened: the audit still runs, uncached.
pub fn open(cache_dir: &Path, enabled: bool) -> (Arc<dyn Store>, Option<String>) {
    if !enabled {
        return (Arc::new(NoStore), None);
    }
    let dir = cache_dir.join("store");
    match DiskStore::open(&dir) {
        Ok(store) => (Arc::new(store), None),
        Err(e) => (
            Arc::new(NoStore),
            Some(format!(
                "the cache at {} cannot be used ({e}); running uncached. Pass --cache-dir with a \
                 writable directory, or run `fixgate cache clear`",
                dir.display()
            )),
        ),
    }
}
