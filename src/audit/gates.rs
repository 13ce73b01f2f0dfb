//! The gates checked before any test runs: the fixtures against the lock, and the freeze
//! ledger's dates. What each gate found, and what of it stops the audit.

use crate::audit::freeze::{Date, Entry, Ledger};
use crate::delta::{Change, ChangedFile};
use crate::lock::{Drift, Lock};
use crate::manifest::Manifest;

/// What the lock gate found (the output of the `lock-check` node).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct LockCheck {
    /// Whether the base has a lock at all (no lock: no lock gate).
    pub(crate) present: bool,
    /// Fixture files that differ from the lock the head carries.
    pub(crate) drift: Vec<DriftEntry>,
    /// Pins the patch changed in fixtures.lock.
    pub(crate) changed_pins: Vec<String>,
    /// A lock file that does not parse.
    pub(crate) error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct DriftEntry {
    pub(crate) path: String,
    pub(crate) change: Change,
}

/// A snapshot's manifest and a reader of its fixture bytes.
pub(crate) type LockSide<'a> = (
    &'a Manifest,
    &'a mut dyn FnMut(&crate::repo_path::RepoPath) -> Option<Vec<u8>>,
);

/// The lock gate. The pins are the base's; a patch that re-locks shows as changed pins (a
/// finding of its own), and drift is any fixture that differs from the lock the head carries.
/// A base lock that does not describe the base at all (no pin holds) is an error saying so,
/// not drift of every file.
pub(crate) fn check_lock(
    path: &str,
    base: Option<&[u8]>,
    head: Option<&[u8]>,
    (base_manifest, read_base): LockSide,
    (head_manifest, read): LockSide,
) -> LockCheck {
    let Some(base) = base else {
        return LockCheck::default();
    };
    let unusable = |e: &dyn std::fmt::Display| LockCheck {
        present: true,
        error: Some(e.to_string()),
        ..LockCheck::default()
    };
    let parsed_base = match Lock::parse(base, &format!("{path} of the base")) {
        Ok(l) => l,
        Err(e) => return unusable(&e),
    };
    if let Some(m) = parsed_base.mismatch(base_manifest, read_base) {
        return unusable(&m.message(path, "its own base"));
    }
    let effective = match head.map(|h| Lock::parse(h, &format!("{path} of the head"))) {
        Some(Ok(l)) => l,
        Some(Err(e)) => return unusable(&e),
        // The patch deleted the lock: the base's pins still hold.
        None => parsed_base.clone(),
    };
    let mut changed_pins: Vec<String> = parsed_base
        .files
        .iter()
        .filter(|(p, h)| effective.files.get(*p) != Some(h))
        .map(|(p, _)| p.to_string())
        .chain(
            effective
                .files
                .keys()
                .filter(|p| !parsed_base.files.contains_key(*p))
                .map(|p| p.to_string()),
        )
        .collect();
    changed_pins.sort();
    changed_pins.dedup();
    let drift: Vec<Drift> = effective.check_with(head_manifest, read);
    LockCheck {
        present: true,
        drift: drift
            .iter()
            .map(|d| DriftEntry {
                path: d.path.to_string(),
                change: d.change,
            })
            .collect(),
        changed_pins,
        error: None,
    }
}

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

    /// Whether a gate stops the audit before any test runs.
    pub(crate) fn stop(&self) -> bool {
        !self.lock.drift.is_empty() || !self.expired.is_empty()
    }
}

/// A fixture file that differs from the lock: the drift gate's reason.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Drifted {
    /// The lock that was read (repo-relative).
    pub(crate) lock: String,
    pub(crate) path: String,
    pub(crate) change: Change,
}

/// A freeze entry past its date: the expired-freeze gate's reason.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Expired {
    pub(crate) nodeid: String,
    pub(crate) owner: String,
    /// The day it expired, `YYYY-MM-DD`.
    pub(crate) expires: String,
}
