//! Fixture locks: fixgate's `fixtures.lock` and the locks teams already keep (flat SHA-256 maps,
//! `{"schema": 1, "files": {path: {"sha256", "bytes"}}}` manifests), where to find them, and the
//! drift check against any of them.

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

pub const FILE_NAME: &str = "fixtures.lock";
pub const SCHEMA: u32 = 1;

/// Where fixgate looks for a lock when neither `--lock` nor `[tool.fixgate] lock` names one, in
/// this order: its own file, then the name teams' scripts commonly use.
pub const DEFAULT_LOCATIONS: [&str; 2] = [FILE_NAME, "tests/fixtures.lock.json"];

/// The formats [`Lock::parse`] reads, for the error naming them.
const FORMATS_ACCEPTED: &str = "fixgate's lock ({\"schema\": 1, \"files\": {path: blake3}}), a \
     flat JSON map of file name or path to SHA-256 (64 hex, or cut to 16), or a manifest \
     ({\"schema\": 1, \"files\": {path: {\"sha256\": ..., \"bytes\": ...}}})";

/// The format a lock was read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockFormat {
    /// fixgate's own: `{"schema": 1, "files": {path: blake3}}`.
    #[default]
    Fixgate,
    /// `{name-or-path: sha256}`, written by a team's script.
    FlatSha256,
    /// `{"schema": 1, "files": {path: {"sha256": ..., "bytes": ...}}}`.
    Sha256Manifest,
}

impl LockFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LockFormat::Fixgate => "fixgate",
            LockFormat::FlatSha256 => "flat-sha256",
            LockFormat::Sha256Manifest => "sha256-manifest",
        }
    }
}

/// How one pin's digest was computed, detected from the lock's format and the digest's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// fixgate's lock: the manifest's blake3, compared without reading the file again.
    Blake3,
    /// SHA-256 of the file bytes, the first `len` hex characters of it (64 when full).
    Sha256 { len: usize },
}

/// A lock in fixgate's form, whatever format it was read from. `files` keys are repo paths in
/// fixgate's lock and in the manifest format; in a flat map they may also be bare file names,
/// matched against the fixture files by name (see [`Lock::check_with`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Lock {
    pub schema: u32,
    /// Pin key → digest (hex): blake3 in fixgate's lock, SHA-256 (full or prefix) otherwise.
    pub files: BTreeMap<RepoPath, String>,
    /// The format it was read from; not written, since [`Lock::to_json`] is fixgate's format.
    #[serde(skip)]
    pub format: LockFormat,
    /// Sizes the manifest format pins beside its digests.
    #[serde(skip)]
    pub sizes: BTreeMap<RepoPath, u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Drift {
    pub path: RepoPath,
    pub change: Change,
    pub group: Option<String>,
    pub locked: Option<String>,
    pub actual: Option<String>,
}

/// Where a lock was found: its repo-relative path and its bytes.
#[derive(Clone, Debug)]
pub struct Located {
    pub path: String,
    pub bytes: Vec<u8>,
}

/// Finds the lock of `snapshot`: `[tool.fixgate] lock` when the configuration sets it, else the
/// first of [`DEFAULT_LOCATIONS`] that the snapshot has. `None` when there is no lock, which is
/// not an error: a repository without one simply has no lock gate. The `--lock` flag of `fixgate
/// lock` names a file outside any snapshot, so that command checks it before calling this.
pub fn locate(snapshot: &Snapshot, config: &Config) -> Result<Option<Located>> {
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
pub fn lookup_order(config: &Config) -> Vec<&str> {
    match &config.lock {
        Some(path) => vec![path.as_str()],
        None => DEFAULT_LOCATIONS.to_vec(),
    }
}

/// A reader for [`Lock::check_with`] over one snapshot: a fixture file's bytes, `None` when the
/// snapshot does not have it or it cannot be read (which the check reports as drift).
pub fn snapshot_reader(
    snapshot: &Snapshot,
) -> Result<impl FnMut(&RepoPath) -> Option<Vec<u8>> + '_> {
    let git = snapshot.open_git()?;
    Ok(move |path: &RepoPath| {
        let entry = snapshot.find(path)?;
        snapshot.read(entry, git.as_ref()).ok()
    })
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
            format: LockFormat::Fixgate,
            sizes: BTreeMap::new(),
        }
    }

    /// Parses a lock's bytes in any of the accepted formats; `origin` names it in errors.
    pub fn parse(bytes: &[u8], origin: &str) -> Result<Lock> {
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
            if let Some(extra) = top.keys().find(|k| *k != "schema" && *k != "files") {
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
            return if files.values().all(Value::is_string) {
                Ok(parse_fixgate(files))
            } else {
                parse_sha256_manifest(files, origin)
            };
        }
        parse_flat(&top, origin)
    }

    /// Sorted, pretty JSON with a trailing newline, so the committed file diffs cleanly. Always
    /// fixgate's format: this is how `lock --migrate` rewrites a foreign lock.
    pub fn to_json(&self) -> String {
        crate::json::to_json(self)
    }

    /// How the pin `digest` was computed.
    pub fn algorithm(&self, digest: &str) -> Algorithm {
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
    pub fn check(&self, manifest: &Manifest) -> Vec<Drift> {
        self.check_with(manifest, &mut |_| None)
    }

    /// Every difference between the pins and `manifest`; `read` gives a fixture file's bytes
    /// (from the same snapshot the manifest was built from), needed for SHA-256 pins only.
    ///
    /// A pin key is the repo path of a fixture file, or, when no file has that path, the unique
    /// fixture path ending in `/key` (a file name or a path relative to a fixtures directory, as
    /// teams' scripts write them). When several files end that way, the pin holds if any of them
    /// has its digest. Fixture files no pin names are added.
    pub fn check_with(
        &self,
        manifest: &Manifest,
        read: &mut dyn FnMut(&RepoPath) -> Option<Vec<u8>>,
    ) -> Vec<Drift> {
        let mut drift = Vec::new();
        let mut pinned: std::collections::BTreeSet<&RepoPath> = Default::default();
        for (key, locked) in &self.files {
            let candidates = self.candidates(key, manifest);
            if candidates.is_empty() {
                drift.push(Drift {
                    path: key.clone(),
                    change: Change::Removed,
                    group: None,
                    locked: Some(locked.clone()),
                    actual: None,
                });
                continue;
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
        drift
    }

    /// The fixture files a pin key names: its exact path, else every path ending in `/key`.
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
}
