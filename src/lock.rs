//! Fixture locks: fixgate's `fixtures.lock` and the locks teams already keep (flat SHA-256 maps
//! of path or file name, `{"schema": 1, "roots": [...], "files": {path: {"sha256", "bytes"}}}`
//! manifests whose keys are often absolute paths of the machine that wrote them), where to find
//! them, the drift check against any of them, and the check that a lock matches its own
//! snapshot at all (docs/locks.md).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::config::Config;
use crate::delta::Change;
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::repo_path::RepoPath;
use crate::snapshot::Snapshot;

pub(crate) const FILE_NAME: &str = "fixtures.lock";
pub(crate) const SCHEMA: u32 = 1;

/// Where fixgate looks for a lock when neither `--lock` nor `[tool.fixgate] lock` names one, in
/// this order: its own file, then the name teams' scripts commonly use.
pub(crate) const DEFAULT_LOCATIONS: [&str; 2] = [FILE_NAME, "tests/fixtures.lock.json"];

/// The formats [`Lock::parse`] reads, for the error naming them.
const FORMATS_ACCEPTED: &str = "fixgate's lock ({\"schema\": 1, \"files\": {path: blake3}}), a \
     flat JSON map of file name or path to SHA-256 (64 hex, or cut to 16), or a manifest \
     ({\"schema\": 1, \"roots\": [dir, ...], \"files\": {path: {\"sha256\": ..., \"bytes\": \
     ...}}}, \"roots\" optional, paths relative or absolute)";

/// The format a lock was read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum LockFormat {
    /// fixgate's own: `{"schema": 1, "files": {path: blake3}}`.
    #[default]
    Fixgate,
    /// `{name-or-path: sha256}`, written by a team's script.
    FlatSha256,
    /// `{"schema": 1, "roots": [...], "files": {path: {"sha256": ..., "bytes": ...}}}`.
    Sha256Manifest,
}

impl LockFormat {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LockFormat::Fixgate => "fixgate",
            LockFormat::FlatSha256 => "flat-sha256",
            LockFormat::Sha256Manifest => "sha256-manifest",
        }
    }
}

/// How one pin's digest was computed, detected from the lock's format and the digest's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algorithm {
    /// fixgate's lock: the manifest's blake3, compared without reading the file again.
    Blake3,
    /// SHA-256 of the file bytes, the first `len` hex characters of it (64 when full).
    Sha256 { len: usize },
}

/// A lock in fixgate's form, whatever format it was read from. `files` keys are repo paths in
/// fixgate's lock and in the manifest format; in a flat map they may also be bare file names,
/// matched against the fixture files by name (see [`Lock::check_with`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Lock {
    pub(crate) schema: u32,
    /// Pin key → digest (hex): blake3 in fixgate's lock, SHA-256 (full or prefix) otherwise.
    pub(crate) files: BTreeMap<RepoPath, String>,
    /// The format it was read from; not written, since [`Lock::to_json`] is fixgate's format.
    #[serde(skip)]
    pub(crate) format: LockFormat,
    /// Sizes the manifest format pins beside its digests.
    #[serde(skip)]
    pub(crate) sizes: BTreeMap<RepoPath, u64>,
    /// The directories the manifest format says its files were found under, as written (often
    /// absolute paths of another machine).
    #[serde(skip)]
    pub(crate) roots: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Drift {
    pub(crate) path: RepoPath,
    pub(crate) change: Change,
    pub(crate) group: Option<String>,
    pub(crate) locked: Option<String>,
    pub(crate) actual: Option<String>,
}

/// Where a lock was found: its repo-relative path and its bytes.
#[derive(Clone, Debug)]
pub(crate) struct Located {
    pub(crate) path: String,
    pub(crate) bytes: Vec<u8>,
}

/// Finds the lock of `snapshot`: `[tool.fixgate] lock` when the configuration sets it, else the
/// first of [`DEFAULT_LOCATIONS`] that the snapshot has. `None` when there is no lock, which is
/// not an error: a repository without one simply has no lock gate. The `--lock` flag of `fixgate
/// lock` names a file outside any snapshot, so that command checks it before calling this.
pub(crate) fn locate(snapshot: &Snapshot, config: &Config) -> Result<Option<Located>> {
    for path in lookup_order(config) {
        if let Some(bytes) = snapshot.read_path(path)? {
            return Ok(Some(Located {
                path: path.to_owned(),
                bytes,
            }));
        }
    }
    Ok(None)
}

/// The repo-relative paths a lock is looked for at, in order.
pub(crate) fn lookup_order(config: &Config) -> Vec<&str> {
    match &config.lock {
        Some(path) => vec![path.as_str()],
        None => DEFAULT_LOCATIONS.to_vec(),
    }
}

/// A reader for [`Lock::check_with`] over one snapshot: a fixture file's bytes, `None` when the
/// snapshot does not have it or it cannot be read (which the check reports as drift).
pub(crate) fn snapshot_reader(
    snapshot: &Snapshot,
) -> Result<impl FnMut(&RepoPath) -> Option<Vec<u8>> + '_> {
    let git = snapshot.open_git()?;
    Ok(move |path: &RepoPath| {
        let entry = snapshot.find(path)?;
        snapshot.read(entry, git.as_ref()).ok()
    })
}

impl Lock {
    pub(crate) fn from_manifest(m: &Manifest) -> Lock {
        Lock {
            schema: SCHEMA,
            files: m
                .files
                .iter()
                .map(|f| (f.path.clone(), f.blake3.clone()))
                .collect(),
            format: LockFormat::Fixgate,
            sizes: BTreeMap::new(),
            roots: Vec::new(),
        }
    }

    /// Parses a lock's bytes in any of the accepted formats; `origin` names it in errors.
    pub(crate) fn parse(bytes: &[u8], origin: &str) -> Result<Lock> {
        // fixgate's own lock, straight into its types: the general path below builds a JSON
        // tree of every pin first, most of a warm `lock --check`'s parsing time. Anything else
        // (another format, an error to explain) takes that path.
        if let Ok(own) = serde_json::from_slice::<OwnLock>(bytes) {
            if own.schema == SCHEMA {
                return Ok(Lock {
                    schema: SCHEMA,
                    files: own
                        .files
                        .into_iter()
                        .map(|(path, digest)| (RepoPath::from(path.as_str()), digest))
                        .collect(),
                    format: LockFormat::Fixgate,
                    sizes: BTreeMap::new(),
                    roots: Vec::new(),
                });
            }
        }
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            Error::Usage(format!(
                "failed to read {origin} line {}: {e}; regenerate it with `fixgate lock`",
                e.line()
            ))
        })?;
        let Value::Object(top) = value else {
            return Err(unknown_format(origin, "the top level is not a JSON object"));
        };
        // fixgate's lock and the manifest format share the envelope; the pin values tell them
        // apart (a digest string or an object with "sha256").
        if let Some(files) = top.get("files") {
            let schema = match top.get("schema") {
                Some(Value::Number(n)) => n.as_u64(),
                _ => None,
            };
            let Some(schema) = schema else {
                return Err(unknown_format(
                    origin,
                    "\"files\" without a numeric \"schema\"",
                ));
            };
            if let Some(extra) = top
                .keys()
                .find(|k| !matches!(k.as_str(), "schema" | "files" | "roots"))
            {
                return Err(unknown_format(origin, &format!("unknown field {extra:?}")));
            }
            if schema != u64::from(SCHEMA) {
                return Err(Error::Usage(format!(
                    "{origin} has schema {schema} but this fixgate reads schema {SCHEMA}; \
                     regenerate it with `fixgate lock`"
                )));
            }
            let Value::Object(files) = files else {
                return Err(unknown_format(origin, "\"files\" is not an object"));
            };
            let roots = match top.get("roots") {
                None => Vec::new(),
                Some(Value::Array(roots)) => roots
                    .iter()
                    .map(|r| r.as_str().map(str::to_owned))
                    .collect::<Option<Vec<String>>>()
                    .ok_or_else(|| unknown_format(origin, "\"roots\" holds a non-string"))?,
                Some(_) => return Err(unknown_format(origin, "\"roots\" is not a list")),
            };
            return if files.values().all(Value::is_string) && roots.is_empty() {
                Ok(parse_fixgate(files))
            } else {
                let mut lock = parse_sha256_manifest(files, origin)?;
                lock.roots = roots;
                Ok(lock)
            };
        }
        parse_flat(&top, origin)
    }

    /// Sorted, pretty JSON with a trailing newline, so the committed file diffs cleanly. Always
    /// fixgate's format: this is how `lock --migrate` rewrites a foreign lock.
    pub(crate) fn to_json(&self) -> String {
        crate::json::to_json(self)
    }

    /// How the pin `digest` was computed.
    pub(crate) fn algorithm(&self, digest: &str) -> Algorithm {
        match self.format {
            LockFormat::Fixgate => Algorithm::Blake3,
            LockFormat::FlatSha256 | LockFormat::Sha256Manifest => {
                Algorithm::Sha256 { len: digest.len() }
            }
        }
    }

    /// Every difference between the pins and `manifest`, for a lock whose pins are all blake3.
    ///
    /// A SHA-256 pin cannot be compared without the file's bytes; here it counts as modified
    /// (with no actual digest), so a gate that was not handed a reader fails closed instead of
    /// passing what it did not check. Use [`Lock::check_with`] for foreign locks.
    #[cfg(test)]
    pub(crate) fn check(&self, manifest: &Manifest) -> Vec<Drift> {
        self.check_with(manifest, &mut |_| None)
    }

    /// Every difference between the pins and `manifest`; `read` gives a fixture file's bytes
    /// (from the same snapshot the manifest was built from), needed for SHA-256 pins only.
    ///
    /// A pin names a fixture file (see [`Lock::candidates`]) by its repo path; in a foreign lock
    /// also by a path relative to one of the lock's relative `roots`, by the unique fixture path
    /// ending in `/key` (a file name or a path relative to a fixtures directory, as teams'
    /// scripts write them), or, for an absolute key written on another machine, by the longest
    /// fixture path the key ends with. When several files end that way, the pin holds if any of
    /// them has its digest. Fixture files no pin names are added.
    pub(crate) fn check_with(
        &self,
        manifest: &Manifest,
        read: &mut dyn FnMut(&RepoPath) -> Option<Vec<u8>>,
    ) -> Vec<Drift> {
        self.judge(manifest, read).drift
    }

    fn judge(
        &self,
        manifest: &Manifest,
        read: &mut dyn FnMut(&RepoPath) -> Option<Vec<u8>>,
    ) -> Judged {
        let mut drift = Vec::new();
        let mut pinned: std::collections::BTreeSet<&RepoPath> = Default::default();
        let (mut held_count, mut named) = (0, 0);
        // What the machine that wrote absolute keys had before the repository's paths, learnt
        // from the keys that name a file, to show the others as repository paths.
        let mut foreign_prefixes: Vec<Vec<u8>> = Vec::new();
        let mut unnamed = Vec::new();
        for (key, locked) in &self.files {
            let candidates = self.candidates(key, manifest);
            if candidates.is_empty() {
                unnamed.push((key, locked));
                continue;
            }
            named += 1;
            if is_absolute(key) {
                let key = normal_separators(key);
                let prefix = key[..key.len() - candidates[0].path.as_bytes().len()].to_vec();
                if !foreign_prefixes.contains(&prefix) {
                    foreign_prefixes.push(prefix);
                }
            }
            let mut first_actual = None;
            let mut held = None;
            for f in &candidates {
                let actual = self.actual(locked, f, read);
                // The manifest format pins the size too; both must hold.
                let size_holds = self.sizes.get(key).is_none_or(|&s| s == f.size);
                if size_holds && actual.as_deref() == Some(locked.as_str()) {
                    held = Some(*f);
                    break;
                }
                first_actual.get_or_insert(actual);
            }
            match held {
                Some(f) => {
                    held_count += 1;
                    pinned.insert(&f.path);
                }
                None => {
                    let f = candidates[0];
                    // Every candidate is accounted for, so none of them shows again as added.
                    pinned.extend(candidates.iter().map(|c| &c.path));
                    drift.push(Drift {
                        path: f.path.clone(),
                        change: Change::Modified,
                        group: Some(f.group.clone()),
                        locked: Some(locked.clone()),
                        actual: first_actual.flatten(),
                    });
                }
            }
        }
        for (key, locked) in unnamed {
            drift.push(Drift {
                path: repo_path_of(key, &foreign_prefixes),
                change: Change::Removed,
                group: None,
                locked: Some(locked.clone()),
                actual: None,
            });
        }
        for f in &manifest.files {
            if !pinned.contains(&f.path) {
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
        Judged {
            drift,
            held: held_count,
            named,
        }
    }

    /// Whether the lock describes `manifest`'s snapshot at all. A lock of which not one pin
    /// holds was not written from these bytes, or not with the digest its format implies (a
    /// BLAKE3 in a flat map read as SHA-256, say): reporting every file as drift would hide
    /// that. `Some` says how it fails to match, and which digest would have matched.
    pub(crate) fn mismatch(
        &self,
        manifest: &Manifest,
        read: &mut dyn FnMut(&RepoPath) -> Option<Vec<u8>>,
    ) -> Option<Mismatch> {
        if self.files.is_empty() || manifest.files.is_empty() {
            return None;
        }
        let judged = self.judge(manifest, read);
        if judged.held > 0 {
            return None;
        }
        if judged.named == 0 {
            let example = self.files.keys().next().map(RepoPath::to_string);
            return Some(Mismatch::NamesNoFile {
                pins: self.files.len(),
                example: example.unwrap_or_default(),
            });
        }
        let expected = self.algorithm_name();
        let mut matches: BTreeMap<&'static str, usize> = BTreeMap::new();
        for (key, locked) in &self.files {
            let candidates = self.candidates(key, manifest);
            let mut matched = std::collections::BTreeSet::new();
            for f in candidates {
                let Some(bytes) = read(&f.path) else { continue };
                for (name, digest) in digests(&bytes) {
                    if digest.get(..locked.len()) == Some(locked.as_str()) {
                        matched.insert(name);
                    }
                }
            }
            for name in matched {
                *matches.entry(name).or_default() += 1;
            }
        }
        let would = matches
            .into_iter()
            .filter(|(name, _)| *name != expected)
            .max_by_key(|(_, n)| *n);
        Some(Mismatch::NoPinHolds {
            pins: self.files.len(),
            format: self.format,
            expected,
            would: would.map(|(name, _)| name),
            would_hold: would.map_or(0, |(_, n)| n),
        })
    }

    /// The digest this lock's pins are read as.
    fn algorithm_name(&self) -> &'static str {
        match self.format {
            LockFormat::Fixgate => "BLAKE3",
            LockFormat::FlatSha256 | LockFormat::Sha256Manifest => "SHA-256",
        }
    }

    /// The fixture files a pin key names (see [`Lock::check_with`]).
    fn candidates<'m>(
        &self,
        key: &RepoPath,
        manifest: &'m Manifest,
    ) -> Vec<&'m crate::manifest::FileEntry> {
        if let Some(f) = manifest.find(key) {
            return vec![f];
        }
        if self.format == LockFormat::Fixgate {
            return Vec::new();
        }
        if is_absolute(key) {
            // The longest repository path the key ends with, at a component boundary: the
            // machine that wrote it had the repository somewhere else.
            let key = normal_separators(key);
            return manifest
                .files
                .iter()
                .filter(|f| {
                    let p = f.path.as_bytes();
                    key.len() > p.len() && key.ends_with(p) && key[key.len() - p.len() - 1] == b'/'
                })
                .max_by_key(|f| f.path.as_bytes().len())
                .into_iter()
                .collect();
        }
        for root in self.roots.iter().filter(|r| !r.starts_with('/')) {
            let joined = format!("{}/{}", root.trim_end_matches('/'), key);
            if let Some(f) = manifest.find(&RepoPath::from(joined.trim_start_matches("./"))) {
                return vec![f];
            }
        }
        let mut suffix = b"/".to_vec();
        suffix.extend_from_slice(key.as_bytes());
        manifest
            .files
            .iter()
            .filter(|f| f.path.as_bytes().ends_with(&suffix))
            .collect()
    }

    /// The digest of `f` in the pin's algorithm, cut to the pin's length; `None` when its bytes
    /// could not be read.
    fn actual(
        &self,
        locked: &str,
        f: &crate::manifest::FileEntry,
        read: &mut dyn FnMut(&RepoPath) -> Option<Vec<u8>>,
    ) -> Option<String> {
        match self.algorithm(locked) {
            Algorithm::Blake3 => Some(f.blake3.clone()),
            Algorithm::Sha256 { len } => {
                let bytes = read(&f.path)?;
                let full = hex(&Sha256::digest(&bytes));
                Some(full[..len.min(full.len())].to_owned())
            }
        }
    }
}

/// What [`Lock::check_with`] found, and how much of the lock held.
struct Judged {
    drift: Vec<Drift>,
    /// Pins that hold.
    held: usize,
    /// Pins that name a fixture file.
    named: usize,
}

/// How a lock fails to describe its own snapshot (see [`Lock::mismatch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mismatch {
    /// No pin names a fixture file of the snapshot.
    NamesNoFile { pins: usize, example: String },
    /// Pins name files, and not one of their digests holds.
    NoPinHolds {
        pins: usize,
        format: LockFormat,
        /// The digest the format's pins are read as.
        expected: &'static str,
        /// Another digest that the pins are, when one matches some of them.
        would: Option<&'static str>,
        /// How many pins hold in that digest.
        would_hold: usize,
    },
}

impl Mismatch {
    /// The error for the lock `lock` (as named to the user) of `snapshot` (e.g. "its own base").
    pub(crate) fn message(&self, lock: &str, snapshot: &str) -> String {
        match self {
            Mismatch::NamesNoFile { pins, example } => format!(
                "{lock} does not match {snapshot}: none of its {pins} pins names a fixture file \
                 there (keys such as {example:?}); a pin names a file by its repository path, \
                 by a path ending in one, or by its file name, so write the lock again from \
                 these fixtures, or declare the fixture groups its files are in"
            ),
            Mismatch::NoPinHolds {
                pins,
                format,
                expected,
                would: Some(would),
                would_hold,
            } => format!(
                "{lock} does not match {snapshot}: none of its {pins} pins holds as {expected}, \
                 the digest a {} lock is read as, while {would_hold} of them are the {would} of \
                 the files they name; write the pins as {expected}, or replace the lock with \
                 fixgate's own (`fixgate lock`)",
                format.as_str()
            ),
            Mismatch::NoPinHolds {
                pins,
                expected,
                would: None,
                ..
            } => format!(
                "{lock} does not match {snapshot}: none of its {pins} pins holds, as {expected} \
                 or as any of {}: the lock was written from other bytes; write it again from \
                 these fixtures",
                DIGESTS.join(", ")
            ),
        }
    }
}

/// The digests [`Lock::mismatch`] tries a lock's pins as.
const DIGESTS: [&str; 3] = ["BLAKE3", "SHA-256", "SHA-512"];

/// `bytes` under each of [`DIGESTS`], in hex.
fn digests(bytes: &[u8]) -> [(&'static str, String); 3] {
    [
        (DIGESTS[0], blake3::hash(bytes).to_hex().to_string()),
        (DIGESTS[1], hex(&Sha256::digest(bytes))),
        (DIGESTS[2], hex(&sha2::Sha512::digest(bytes))),
    ]
}

/// An absolute path of the machine that wrote the lock: `/…`, `C:\…`, `C:/…` or `\\server\…`.
fn is_absolute(key: &RepoPath) -> bool {
    let k = key.as_bytes();
    k.first() == Some(&b'/')
        || k.starts_with(b"\\\\")
        || (k.len() > 2
            && k[0].is_ascii_alphabetic()
            && k[1] == b':'
            && matches!(k[2], b'/' | b'\\'))
}

/// An absolute key with `/` separators (a Windows path's `\` made `/`).
fn normal_separators(key: &RepoPath) -> Vec<u8> {
    key.as_bytes()
        .iter()
        .map(|&b| if b == b'\\' { b'/' } else { b })
        .collect()
}

/// A pin key as a repository path: an absolute key loses the prefix of the machine that wrote
/// it, when another key showed what that was; any other key stays as it is.
fn repo_path_of(key: &RepoPath, foreign_prefixes: &[Vec<u8>]) -> RepoPath {
    if !is_absolute(key) {
        return key.clone();
    }
    let normal = normal_separators(key);
    foreign_prefixes
        .iter()
        .filter(|p| normal.starts_with(p) && normal.len() > p.len())
        .max_by_key(|p| p.len())
        .map_or_else(|| key.clone(), |p| RepoPath::from_bytes(&normal[p.len()..]))
}

fn unknown_format(origin: &str, why: &str) -> Error {
    Error::Usage(format!(
        "failed to read {origin}: unknown lock format ({why}); fixgate reads {FORMATS_ACCEPTED}"
    ))
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A SHA-256 digest as teams write it: 64 hex characters, or the first 16; lowercased so that
/// it compares with ours.
fn sha256_pin(origin: &str, key: &str, value: &str) -> Result<String> {
    if (value.len() == 64 || value.len() == 16) && is_hex(value) {
        return Ok(value.to_ascii_lowercase());
    }
    Err(Error::Usage(format!(
        "failed to read {origin}, {key:?}: expected a SHA-256 digest of 64 hex characters or its \
         first 16, found {value:?}; regenerate the pin with the script that wrote the lock"
    )))
}

/// fixgate's lock file as written by [`Lock::to_json`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnLock {
    schema: u32,
    files: BTreeMap<String, String>,
}

fn parse_fixgate(files: &serde_json::Map<String, Value>) -> Lock {
    // A pin that is not a blake3 of ours (hand-edited, say) simply never matches: drift, which
    // is what it is.
    let files = files
        .iter()
        .map(|(path, digest)| {
            (
                RepoPath::from(path.as_str()),
                digest.as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    Lock {
        schema: SCHEMA,
        files,
        format: LockFormat::Fixgate,
        sizes: BTreeMap::new(),
        roots: Vec::new(),
    }
}

fn parse_sha256_manifest(files: &serde_json::Map<String, Value>, origin: &str) -> Result<Lock> {
    let mut out = BTreeMap::new();
    let mut sizes = BTreeMap::new();
    for (path, entry) in files {
        let Value::Object(entry) = entry else {
            return Err(unknown_format(
                origin,
                &format!("{path:?} is neither a digest nor an object"),
            ));
        };
        let Some(Value::String(sha)) = entry.get("sha256") else {
            return Err(unknown_format(
                origin,
                &format!("{path:?} has no \"sha256\" string"),
            ));
        };
        let key = RepoPath::from(path.as_str());
        out.insert(key.clone(), sha256_pin(origin, path, sha)?);
        match entry.get("bytes") {
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                sizes.insert(key, n.as_u64().unwrap_or_default());
            }
            None => {}
            Some(other) => {
                return Err(Error::Usage(format!(
                    "failed to read {origin}, {path:?}: \"bytes\" must be a whole number, found \
                     {other}"
                )))
            }
        }
        if let Some(extra) = entry.keys().find(|k| *k != "sha256" && *k != "bytes") {
            return Err(unknown_format(
                origin,
                &format!("{path:?} has unknown field {extra:?}"),
            ));
        }
    }
    Ok(Lock {
        schema: SCHEMA,
        files: out,
        format: LockFormat::Sha256Manifest,
        sizes,
        roots: Vec::new(),
    })
}

fn parse_flat(top: &serde_json::Map<String, Value>, origin: &str) -> Result<Lock> {
    let mut out = BTreeMap::new();
    for (key, value) in top {
        let Value::String(digest) = value else {
            return Err(unknown_format(
                origin,
                &format!("{key:?} maps to {value}, not a digest string"),
            ));
        };
        let key_path = key.trim_start_matches("./");
        out.insert(RepoPath::from(key_path), sha256_pin(origin, key, digest)?);
    }
    Ok(Lock {
        schema: SCHEMA,
        files: out,
        format: LockFormat::FlatSha256,
        sizes: BTreeMap::new(),
        roots: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const B3: &str = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262";

    #[test]
    fn round_trips_and_rejects_garbage_with_a_line() {
        let mut files = BTreeMap::new();
        files.insert(RepoPath::from("tests/fixtures/a.json"), B3.to_string());
        let lock = Lock {
            schema: SCHEMA,
            files,
            format: LockFormat::Fixgate,
            sizes: BTreeMap::new(),
            roots: Vec::new(),
        };
        assert_eq!(Lock::parse(lock.to_json().as_bytes(), "x").unwrap(), lock);
        let err = Lock::parse(b"{\n\"schema\": 1,\n\"files\": [}", "fixtures.lock").unwrap_err();
        assert!(err.to_string().contains("fixtures.lock line 3"), "{err}");
    }

    #[test]
    fn detects_each_format_and_its_digest_algorithm() {
        let sha = "a".repeat(64);
        let flat = format!(r#"{{"users.json": "{sha}", "db/x.sqlite": "0123456789ABCDEF"}}"#);
        let lock = Lock::parse(flat.as_bytes(), "flat").unwrap();
        assert_eq!(lock.format, LockFormat::FlatSha256);
        assert_eq!(lock.algorithm(&sha), Algorithm::Sha256 { len: 64 });
        assert_eq!(
            lock.files
                .get(&RepoPath::from("db/x.sqlite"))
                .map(String::as_str),
            Some("0123456789abcdef")
        );

        let man =
            format!(r#"{{"schema": 1, "files": {{"a/b": {{"sha256": "{sha}", "bytes": 3}}}}}}"#);
        let lock = Lock::parse(man.as_bytes(), "man").unwrap();
        assert_eq!(lock.format, LockFormat::Sha256Manifest);
        assert_eq!(lock.sizes.get(&RepoPath::from("a/b")), Some(&3));

        let ours = format!(r#"{{"schema": 1, "files": {{"a/b": "{B3}"}}}}"#);
        let lock = Lock::parse(ours.as_bytes(), "ours").unwrap();
        assert_eq!(lock.algorithm(B3), Algorithm::Blake3);
    }

    #[test]
    fn unknown_formats_name_the_formats_accepted() {
        for bad in [
            "[1, 2]",
            r#"{"a": 3}"#,
            r#"{"schema": 1, "files": {}, "extra": 1}"#,
            r#"{"schema": 1, "files": {"a": {"md5": "x"}}}"#,
        ] {
            let err = Lock::parse(bad.as_bytes(), "lock.json")
                .unwrap_err()
                .to_string();
            assert!(err.contains("unknown lock format"), "{bad}: {err}");
            assert!(err.contains("flat JSON map"), "{bad}: {err}");
        }
        let err = Lock::parse(br#"{"a": "abc"}"#, "lock.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("64 hex characters or its first 16"), "{err}");
    }

    fn manifest_of(files: &[(&str, &[u8])]) -> (Manifest, BTreeMap<RepoPath, Vec<u8>>) {
        let entries = files
            .iter()
            .map(|(p, b)| crate::manifest::FileEntry {
                blake3: blake3::hash(b).to_hex().to_string(),
                group: "g".into(),
                kind: crate::manifest::FileKind::File,
                path: RepoPath::from(*p),
                size: b.len() as u64,
            })
            .collect();
        let bytes = files
            .iter()
            .map(|(p, b)| (RepoPath::from(*p), b.to_vec()))
            .collect();
        let m = Manifest {
            files: entries,
            groups: Vec::new(),
            schema: 1,
        };
        (m, bytes)
    }

    fn changes(lock: &Lock, m: &Manifest, bytes: &BTreeMap<RepoPath, Vec<u8>>) -> Vec<String> {
        lock.check_with(m, &mut |p| bytes.get(p).cloned())
            .iter()
            .map(|d| format!("{} {}", d.change.as_str(), d.path))
            .collect()
    }

    #[test]
    fn sha256_pins_match_by_name_prefix_and_size() {
        let (m, bytes) = manifest_of(&[
            ("tests/data/a/users.json", b"[1]"),
            ("tests/data/b/users.json", b"[2]"),
            ("tests/data/c.txt", b"c"),
        ]);
        let sha = |b: &[u8]| hex(&Sha256::digest(b));
        // A bare name matching two files holds when one of them has the digest; the other is
        // then unpinned, so added.
        let flat = format!(
            r#"{{"users.json": "{}", "c.txt": "{}"}}"#,
            &sha(b"[2]")[..16],
            sha(b"c")
        );
        let lock = Lock::parse(flat.as_bytes(), "flat").unwrap();
        assert_eq!(
            changes(&lock, &m, &bytes),
            ["added tests/data/a/users.json"]
        );

        // Right digest, wrong size: modified. Without a reader: modified (fails closed).
        let man = format!(
            r#"{{"schema": 1, "files": {{"tests/data/c.txt": {{"sha256": "{}", "bytes": 9}}}}}}"#,
            sha(b"c")
        );
        let lock = Lock::parse(man.as_bytes(), "man").unwrap();
        let c_only = manifest_of(&[("tests/data/c.txt", b"c")]);
        assert_eq!(
            changes(&lock, &c_only.0, &c_only.1),
            ["modified tests/data/c.txt"]
        );
        let flat = Lock::parse(format!(r#"{{"c.txt": "{}"}}"#, sha(b"c")).as_bytes(), "f").unwrap();
        assert!(changes(&flat, &c_only.0, &c_only.1).is_empty());
        assert_eq!(
            flat.check(&c_only.0).len(),
            1,
            "no reader: the pin cannot hold"
        );
    }

    #[test]
    fn a_manifest_of_another_machines_absolute_paths_maps_them_by_suffix() {
        let (m, bytes) = manifest_of(&[
            ("tests/fixtures/users.json", b"[1]"),
            ("tests/fixtures/db/x.sqlite", b"db"),
            ("users.json", b"other"),
        ]);
        let sha = |b: &[u8]| hex(&Sha256::digest(b));
        let text = format!(
            r#"{{"schema": 1, "roots": ["/home/ci/work/app/tests/fixtures"], "files": {{
                "/home/ci/work/app/tests/fixtures/users.json": {{"sha256": "{}", "bytes": 3}},
                "/home/ci/work/app/tests/fixtures/db/x.sqlite": {{"sha256": "{}", "bytes": 2}},
                "/home/ci/work/app/tests/fixtures/gone.json": {{"sha256": "{}", "bytes": 1}}
            }}}}"#,
            sha(b"[1]"),
            sha(b"changed"),
            sha(b"g")
        );
        let lock = Lock::parse(text.as_bytes(), "fixtures.manifest.json").unwrap();
        assert_eq!(lock.format, LockFormat::Sha256Manifest);
        assert_eq!(lock.roots, ["/home/ci/work/app/tests/fixtures"]);
        // The longest repository path the key ends with: tests/fixtures/users.json, not the
        // users.json at the root; a removed file is shown as a repository path too.
        assert_eq!(
            changes(&lock, &m, &bytes),
            [
                "modified tests/fixtures/db/x.sqlite",
                "removed tests/fixtures/gone.json",
                "added users.json"
            ]
        );
        // Windows keys, relative keys under a relative root.
        let text = format!(
            r#"{{"schema": 1, "roots": ["tests/fixtures"], "files": {{
                "C:\\ci\\app\\tests\\fixtures\\users.json": {{"sha256": "{}"}},
                "db/x.sqlite": {{"sha256": "{}"}}
            }}}}"#,
            sha(b"[1]"),
            sha(b"db")
        );
        let lock = Lock::parse(text.as_bytes(), "m").unwrap();
        assert_eq!(changes(&lock, &m, &bytes), ["added users.json"]);
    }

    #[test]
    fn a_lock_of_which_no_pin_holds_says_so_and_which_digest_would() {
        let (m, bytes) = manifest_of(&[
            ("tests/fixtures/a.json", b"a"),
            ("tests/fixtures/b.json", b"b"),
        ]);
        let mut read = |p: &RepoPath| bytes.get(p).cloned();
        // A name map of BLAKE3 prefixes, read as SHA-256.
        let b3 = |b: &[u8]| blake3::hash(b).to_hex()[..16].to_string();
        let flat = format!(r#"{{"a.json": "{}", "b.json": "{}"}}"#, b3(b"a"), b3(b"b"));
        let lock = Lock::parse(flat.as_bytes(), "tests/fixtures.lock.json").unwrap();
        let m_ = lock.mismatch(&m, &mut read).expect("no pin holds");
        let text = m_.message("tests/fixtures.lock.json", "its own base");
        assert!(
            text.starts_with("tests/fixtures.lock.json does not match its own base"),
            "{text}"
        );
        assert!(
            text.contains("as SHA-256") && text.contains("2 of them are the BLAKE3"),
            "{text}"
        );
        // One pin holding is enough: the rest is drift.
        let sha = |b: &[u8]| hex(&Sha256::digest(b))[..16].to_string();
        let flat = format!(r#"{{"a.json": "{}", "b.json": "{}"}}"#, sha(b"a"), b3(b"b"));
        let lock = Lock::parse(flat.as_bytes(), "x").unwrap();
        assert_eq!(lock.mismatch(&m, &mut read), None);
        // Pins of other bytes altogether, and pins that name no file.
        let flat = format!(r#"{{"a.json": "{}"}}"#, sha(b"zzz"));
        let lock = Lock::parse(flat.as_bytes(), "x").unwrap();
        let text = lock
            .mismatch(&m, &mut read)
            .unwrap()
            .message("x", "the base");
        assert!(text.contains("written from other bytes"), "{text}");
        let flat = format!(r#"{{"nothere.json": "{}"}}"#, sha(b"a"));
        let lock = Lock::parse(flat.as_bytes(), "x").unwrap();
        let text = lock
            .mismatch(&m, &mut read)
            .unwrap()
            .message("x", "the base");
        assert!(text.contains("names a fixture file"), "{text}");
    }
}
