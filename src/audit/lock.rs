//! The lock gate's rule: the head's fixtures against the pins of the base's lock, what the patch
//! changed of the pins, and a lock that does not describe its own base.

use crate::delta::Change;
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

/// A fixture file that differs from the lock: the drift gate's reason.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Drifted {
    /// The lock that was read (repo-relative).
    pub(crate) lock: String,
    pub(crate) path: String,
    pub(crate) change: Change,
}
