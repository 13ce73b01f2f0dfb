//! How the runs of one fixgate process were made: forked from a warm interpreter or fresh, and
//! why not forked; counted for the report ([`ForkSummary`]) by every pool of the process.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// How the runs of this fixgate process were made: warm (forked from a zygote) or fresh, and why
/// not warm. Counts are of pytest processes started, so benchmarks can tell the modes apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ForkSummary {
    /// Why runs fell back to fresh processes (sorted, each once).
    pub(crate) fallbacks: Vec<String>,
    /// Runs' processes forked from a zygote.
    pub(crate) forks: u32,
    /// pytest processes started fresh (collections, runs that did not fork).
    pub(crate) fresh_processes: u32,
    /// `fork` when any run forked, else `fresh`.
    pub(crate) mode: String,
    /// Of the zygotes, those started ahead of their runs: the base's, beside the head's search,
    /// for the checks on the base that follow it. (Fields stay in sorted order: the report's
    /// keys are.)
    #[serde(default)]
    pub(crate) prewarmed: u32,
    /// Zygotes started (one per snapshot and job slot at most).
    pub(crate) zygotes: u32,
}

/// The counts behind a [`ForkSummary`]: kept by the context of one fixgate invocation and
/// shared by every pool it makes, so that a report counts the runs of the heads before it too.
#[derive(Debug, Default)]
pub(crate) struct ForkStats {
    forks: AtomicU32,
    fresh: AtomicU32,
    zygotes: AtomicU32,
    prewarmed: AtomicU32,
    fallbacks: Mutex<BTreeSet<String>>,
}

impl ForkStats {
    /// What the runs did so far (for the report).
    pub(crate) fn summary(&self) -> ForkSummary {
        let forks = self.forks.load(Ordering::Relaxed);
        ForkSummary {
            fallbacks: self
                .fallbacks
                .lock()
                .map(|f| f.iter().cloned().collect())
                .unwrap_or_default(),
            forks,
            fresh_processes: self.fresh.load(Ordering::Relaxed),
            mode: if forks > 0 { "fork" } else { "fresh" }.to_owned(),
            prewarmed: self.prewarmed.load(Ordering::Relaxed),
            zygotes: self.zygotes.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_fresh(&self) {
        self.fresh.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fall_back(&self, reason: String) {
        if let Ok(mut f) = self.fallbacks.lock() {
            f.insert(reason);
        }
    }

    /// A run's process forked from a zygote.
    pub(crate) fn count_fork(&self) {
        self.forks.fetch_add(1, Ordering::Relaxed);
    }

    /// A zygote started.
    pub(crate) fn count_zygote(&self) {
        self.zygotes.fetch_add(1, Ordering::Relaxed);
    }

    /// A zygote ready ahead of the runs that will ask for it.
    pub(crate) fn count_prewarmed(&self) {
        self.prewarmed.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_each_kind_of_start_and_names_each_fallback_once_in_order() {
        let stats = ForkStats::default();
        assert_eq!(stats.summary().mode, "fresh");
        stats.count_fresh();
        stats.count_zygote();
        stats.count_zygote();
        stats.count_prewarmed();
        stats.count_fork();
        stats.fall_back("runs with replaced fixture bytes (replay) start fresh".into());
        stats.fall_back("[tool.fixgate] fork = false".into());
        stats.fall_back("runs with replaced fixture bytes (replay) start fresh".into());
        assert_eq!(
            stats.summary(),
            ForkSummary {
                fallbacks: vec![
                    "[tool.fixgate] fork = false".into(),
                    "runs with replaced fixture bytes (replay) start fresh".into(),
                ],
                forks: 1,
                fresh_processes: 1,
                mode: "fork".into(),
                prewarmed: 1,
                zygotes: 2,
            }
        );
    }
}
