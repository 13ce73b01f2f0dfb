//! The inputs of the two sides, each loaded once: snapshot, configuration, lock bytes, freeze
//! ledger and tree digest.

use std::sync::Arc;

use fixgate_cache::Digest;

use crate::audit::freeze::{self, Ledger};
use crate::audit::outcome::Revision;
use crate::config::Config;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::snapshot::Snapshot;

/// One side of the audit.
pub(crate) struct Side {
    pub(crate) snapshot: Arc<Snapshot>,
    pub(crate) ledger: Ledger,
    pub(crate) lock: Option<Vec<u8>>,
    pub(crate) tree: Digest,
}

/// Both sides, and the configuration the audit runs under.
pub(crate) struct Sides {
    pub(crate) base: Side,
    pub(crate) head: Side,
    /// The base's configuration: budget, dependency tracking (a patch cannot loosen them).
    pub(crate) base_config: Config,
    /// The fixture groups both sides are judged with (the base's explicit groups win).
    pub(crate) config: Config,
    /// Where the lock is: found in the base (by its configuration, so a patch cannot move it),
    /// and read at the same path in the head.
    pub(crate) lock_path: Option<String>,
}

impl Sides {
    /// Loads `base` and `head` (`None`: the working tree, or `frozen`, a copy of it).
    pub(crate) fn load(
        ctx: &Ctx,
        base: &str,
        head: Option<&str>,
        frozen: Option<Arc<Snapshot>>,
    ) -> Result<Sides> {
        let base = Arc::new(ctx.repo.snapshot(Some(base))?);
        let head = match frozen {
            Some(s) => s,
            None => Arc::new(ctx.repo.snapshot(head)?),
        };
        let base_config = ctx.config(&base)?;
        let config = ctx.pair_config(&base, &head)?;
        let mut stat = crate::statcache::StatCache::load(&ctx.cache_dir, &head.root);
        let head_tree = crate::engine::digests::tree_digest(&head, Some(&mut stat))?;
        let base_tree = crate::engine::digests::tree_digest(&base, None)?;
        if let Err(e) = stat.save() {
            ctx.warn(&format!("failed to save the stat cache: {e}"));
        }
        let found = crate::lock::locate(&base, &base_config)?;
        let head_lock = match &found {
            Some(l) => head.read_path(&l.path)?,
            None => None,
        };
        let lock_path = found.as_ref().map(|l| l.path.clone());
        Ok(Sides {
            base: Side::new(base, base_tree, found.map(|l| l.bytes))?,
            head: Side::new(head, head_tree, head_lock)?,
            base_config,
            config,
            lock_path,
        })
    }
}

impl Side {
    fn new(snapshot: Arc<Snapshot>, tree: Digest, lock: Option<Vec<u8>>) -> Result<Side> {
        Ok(Side {
            ledger: read_ledger(&snapshot)?,
            lock,
            snapshot,
            tree,
        })
    }
}

fn read_ledger(s: &Snapshot) -> Result<Ledger> {
    match s.read_path(freeze::FILE_NAME)? {
        None => Ok(Ledger::default()),
        Some(bytes) => freeze::parse(
            &bytes,
            &format!("{} of {}", freeze::FILE_NAME, s.rev_label()),
        )
        .map_err(|e| Error::Usage(e.to_string())),
    }
}

/// A snapshot as the user named it, for the report.
pub(crate) fn revision(s: &Snapshot) -> Revision {
    Revision {
        rev: s.rev_label(),
        commit: s.commit().map(|c| c.to_string()),
    }
}
