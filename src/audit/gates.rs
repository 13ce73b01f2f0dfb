//! The gates checked before any test runs: the fixtures against the lock (`audit::lock`), and
//! the freeze ledger's dates. What each gate found, and what of it stops the audit.

use crate::audit::freeze::{Date, Entry, Ledger};
use crate::audit::lock::{Drifted, LockCheck};
use crate::delta::ChangedFile;

/// What the gates found: the lock check, the fixture delta and the freeze ledger read against
/// today.
#[derive(Clone, Debug, Default)]
pub(crate) struct Gates {
    /// The lock read (repo-relative, from the base), `None` when the base has none.
    pub(crate) lock_file: Option<String>,
    pub(crate) lock: LockCheck,
    /// The fixture files the patch added, removed or modified.
    pub(crate) changed: Vec<ChangedFile>,
    /// The base's freeze entries still in force, and those past their date.
    pub(crate) active: Vec<(String, Entry)>,
    pub(crate) expired: Vec<(String, Entry)>,
    /// Entries the patch adds or extends (the ledger is read from the base).
    pub(crate) added_by_patch: Vec<String>,
}

impl Gates {
    /// The freeze part of the gates: the base's ledger against `today`, and what the head's adds.
    pub(crate) fn freeze(base: &Ledger, head: &Ledger, today: Date) -> Gates {
        Gates {
            active: base.active(today),
            expired: base.expired(today),
            added_by_patch: crate::audit::freeze::added_by(base, head),
            ..Gates::default()
        }
    }

    /// The fixture files that differ from the lock, each with the lock that was read.
    pub(crate) fn drifted(&self) -> Vec<Drifted> {
        let lock = self.lock_file.as_deref().unwrap_or(crate::lock::FILE_NAME);
        self.lock
            .drift
            .iter()
            .map(|d| Drifted {
                lock: lock.to_string(),
                path: d.path.clone(),
                change: d.change,
            })
            .collect()
    }

    /// The freeze entries past their date.
    pub(crate) fn expired_entries(&self) -> Vec<Expired> {
        self.expired
            .iter()
            .map(|(n, e)| Expired {
                nodeid: n.clone(),
                owner: e.owner.clone(),
                expires: e.expires.to_string(),
            })
            .collect()
    }

    /// The tests the freeze entries in force deselect from every run.
    pub(crate) fn frozen(&self) -> std::collections::HashSet<&str> {
        self.active.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Whether a gate stops the audit before any test runs.
    pub(crate) fn stop(&self) -> bool {
        !self.lock.drift.is_empty() || !self.expired.is_empty()
    }
}

/// A freeze entry past its date: the expired-freeze gate's reason.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Expired {
    pub(crate) nodeid: String,
    pub(crate) owner: String,
    /// The day it expired, `YYYY-MM-DD`.
    pub(crate) expires: String,
}
