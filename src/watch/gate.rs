//! The lock check under `fixgate watch`: the base's lock and the fixture groups, loaded when
//! they may have changed (the first audit, a configuration change, a file added or removed,
//! the base moving), and checked after every save against the hashes kept in memory, so the
//! check reads nothing the save did not touch.

use std::path::PathBuf;

use git2::Oid;

use crate::config::FixtureGroups;
use crate::context::Ctx;
use crate::error::Result;
use crate::fsmonitor::TreeHashes;
use crate::lock::{Drift, Lock};
use crate::snapshot::Snapshot;

pub(crate) struct Gate {
    base: Oid,
    groups: FixtureGroups,
    /// The base's lock; `None`: the base has none, so there is no lock gate.
    lock: Option<Lock>,
    /// The frozen copy's root, where SHA-256 pins read fixture bytes.
    root: PathBuf,
    /// The base's `[tool.fixgate.limits]`: every run's bounds, as the audit takes them.
    limits: crate::config::LimitsConfig,
}

impl Gate {
    /// Loads the groups both sides are judged with and the base's lock, as the audit of
    /// `head` (the frozen copy of the working tree) does.
    pub(crate) fn load(ctx: &Ctx, base: &str, head: &Snapshot) -> Result<Gate> {
        let base_snapshot = ctx.repo.snapshot(Some(base))?;
        let config = ctx.pair_config(&base_snapshot, head)?;
        let base_config = ctx.config(&base_snapshot)?;
        let lock = match crate::lock::locate(&base_snapshot, &base_config)? {
            Some(found) => Some(Lock::parse(&found.bytes, &found.path)?),
            None => None,
        };
        Ok(Gate {
            base: ctx.repo.resolve(base)?,
            groups: config.groups,
            lock,
            root: head.root.clone(),
            limits: base_config.limits,
        })
    }

    /// The base's run limits.
    pub(crate) fn limits(&self) -> &crate::config::LimitsConfig {
        &self.limits
    }

    /// Whether the gate still holds for `base` (the revision may have moved).
    pub(crate) fn is_for(&self, base: Oid) -> bool {
        self.base == base
    }

    /// The drift of the tree as known in memory.
    pub(crate) fn check(&self, hashes: &TreeHashes) -> Vec<Drift> {
        let Some(lock) = &self.lock else {
            return Vec::new();
        };
        let mut read =
            |p: &crate::repo_path::RepoPath| std::fs::read(self.root.join(p.to_os_path())).ok();
        hashes.check_lock(&self.groups, lock, &mut read)
    }
}
