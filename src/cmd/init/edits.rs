//! The files `fixgate init` proposes to change, edited in memory: each file's text before and
//! after, read from the working tree the first time it is touched.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::snapshot::Snapshot;

/// The files the proposal changes: path → (content before, content after).
pub(super) struct Edits<'s> {
    snapshot: &'s Snapshot,
    files: BTreeMap<String, (Option<String>, String)>,
}

impl<'s> Edits<'s> {
    pub(super) fn new(snapshot: &'s Snapshot) -> Edits<'s> {
        Edits {
            snapshot,
            files: BTreeMap::new(),
        }
    }

    /// The current text of `path`: as edited so far, else the working tree's.
    pub(super) fn text(&self, path: &str) -> Result<Option<String>> {
        if let Some((_, new)) = self.files.get(path) {
            return Ok(Some(new.clone()));
        }
        match self.snapshot.read_path(path)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
                Error::Usage(format!(
                    "failed to edit {path}: it is not valid UTF-8; save it as UTF-8, or make \
                     the change shown by `fixgate init` by hand"
                ))
            }),
        }
    }

    pub(super) fn set(&mut self, path: &str, text: String) -> Result<()> {
        let before = match self.files.remove(path) {
            Some((before, _)) => before,
            None => self.text(path)?,
        };
        self.files.insert(path.to_owned(), (before, text));
        Ok(())
    }

    /// The files whose text differs from before, sorted by path.
    pub(super) fn changes(&self) -> Vec<(String, Option<String>, String)> {
        self.files
            .iter()
            .filter(|(_, (old, new))| old.as_deref() != Some(new.as_str()))
            .map(|(p, (old, new))| (p.clone(), old.clone(), new.clone()))
            .collect()
    }
}
