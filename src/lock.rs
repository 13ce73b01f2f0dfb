//! `fixtures.lock`: committed pins of fixture hashes, and the drift check against them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::delta::Change;
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::repo_path::RepoPath;

pub const FILE_NAME: &str = "fixtures.lock";
pub const SCHEMA: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub schema: u32,
    /// Repo-relative path → blake3 (hex).
    pub files: BTreeMap<RepoPath, String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Drift {
    pub path: RepoPath,
    pub change: Change,
    pub group: Option<String>,
    pub locked: Option<String>,
    pub actual: Option<String>,
}

impl Lock {
    pub fn from_manifest(m: &Manifest) -> Lock {
        Lock {
            schema: SCHEMA,
            files: m
                .files
                .iter()
                .map(|f| (f.path.clone(), f.blake3.clone()))
                .collect(),
        }
    }

    /// Parses a lock file's bytes; `origin` names it in errors.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<Lock> {
        let lock: Lock = serde_json::from_slice(bytes).map_err(|e| {
            Error::Usage(format!(
                "failed to read {origin} line {}: {e}; regenerate it with `fixgate lock`",
                e.line()
            ))
        })?;
        if lock.schema != SCHEMA {
            return Err(Error::Usage(format!(
                "{origin} has schema {} but this fixgate reads schema {SCHEMA}; regenerate it \
                 with `fixgate lock`",
                lock.schema
            )));
        }
        Ok(lock)
    }

    /// Sorted, pretty JSON with a trailing newline, so the committed file diffs cleanly.
    pub fn to_json(&self) -> String {
        crate::context::to_json(self)
    }

    /// Every difference between the pins and `manifest`.
    pub fn check(&self, manifest: &Manifest) -> Vec<Drift> {
        let mut drift = Vec::new();
        for (path, locked) in &self.files {
            match manifest.find(path) {
                None => drift.push(Drift {
                    path: path.clone(),
                    change: Change::Removed,
                    group: None,
                    locked: Some(locked.clone()),
                    actual: None,
                }),
                Some(f) if &f.blake3 != locked => drift.push(Drift {
                    path: path.clone(),
                    change: Change::Modified,
                    group: Some(f.group.clone()),
                    locked: Some(locked.clone()),
                    actual: Some(f.blake3.clone()),
                }),
                Some(_) => {}
            }
        }
        for f in &manifest.files {
            if !self.files.contains_key(&f.path) {
                drift.push(Drift {
                    path: f.path.clone(),
                    change: Change::Added,
                    group: Some(f.group.clone()),
                    locked: None,
                    actual: Some(f.blake3.clone()),
                });
            }
        }
        drift.sort_by(|a, b| a.path.cmp(&b.path));
        drift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage_with_a_line() {
        let mut files = BTreeMap::new();
        files.insert(RepoPath::from("tests/fixtures/a.json"), "ab".to_string());
        let lock = Lock {
            schema: SCHEMA,
            files,
        };
        assert_eq!(Lock::parse(lock.to_json().as_bytes(), "x").unwrap(), lock);
        let err = Lock::parse(b"{\n\"schema\": 1,\n\"files\": [}", "fixtures.lock").unwrap_err();
        assert!(err.to_string().contains("fixtures.lock line 3"), "{err}");
    }
}
