//! Repo-relative paths: raw bytes, `/`-separated, sorted bytewise, never resolved against a root.

use std::fmt;

use serde::{Serialize, Serializer};

/// A path relative to the repository root, as git stores it: `/`-separated bytes that need not
/// be UTF-8. Manifests, traces and reports all use this type, so two sides can never disagree
/// because one was resolved and the other was not.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RepoPath(Vec<u8>);

impl RepoPath {
    /// Wraps bytes that are already repo-relative and `/`-separated.
    pub(crate) fn from_bytes(bytes: impl Into<Vec<u8>>) -> RepoPath {
        RepoPath(bytes.into())
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The path as UTF-8 when it is; `None` for the rare non-UTF-8 name.
    #[cfg(test)]
    pub(crate) fn to_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The path on this platform, for joining onto a root directory.
    pub(crate) fn to_os_path(&self) -> std::path::PathBuf {
        use std::os::unix::ffi::OsStrExt;
        std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&self.0))
    }

    /// The file name: the part after the last `/`.
    pub(crate) fn file_name(&self) -> &[u8] {
        match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => &self.0[i + 1..],
            None => &self.0,
        }
    }

    /// A lossless text form: UTF-8 stays as it is, every byte that is not valid UTF-8 becomes
    /// `\xNN`, and a literal backslash becomes `\\` only when the path also has such a byte,
    /// so that ordinary paths read naturally and odd ones stay distinct.
    pub(crate) fn display_lossless(&self) -> String {
        match std::str::from_utf8(&self.0) {
            Ok(s) => s.to_owned(),
            Err(_) => {
                let mut out = String::new();
                for chunk in self.0.utf8_chunks() {
                    out.push_str(&chunk.valid().replace('\\', "\\\\"));
                    for b in chunk.invalid() {
                        out.push_str(&format!("\\x{b:02X}"));
                    }
                }
                out
            }
        }
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display_lossless())
    }
}

impl fmt::Debug for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.display_lossless())
    }
}

impl Serialize for RepoPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.display_lossless())
    }
}

impl<'de> serde::Deserialize<'de> for RepoPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RepoPath, D::Error> {
        let s = String::deserialize(d)?;
        Ok(RepoPath::parse_lossless(&s))
    }
}

impl RepoPath {
    /// Reverses [`RepoPath::display_lossless`]. A string with no `\xNN` escape of a byte at or
    /// above 0x80 is taken literally, so ordinary paths (backslashes included) round-trip.
    pub(crate) fn parse_lossless(s: &str) -> RepoPath {
        let bytes = s.as_bytes();
        let escaped = bytes.windows(4).any(|w| {
            w[0] == b'\\'
                && w[1] == b'x'
                && matches!(w[2], b'8'..=b'9' | b'A'..=b'F')
                && w[3].is_ascii_hexdigit()
        });
        if !escaped {
            return RepoPath(bytes.to_vec());
        }
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'\\') {
                out.push(b'\\');
                i += 2;
            } else if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'x') {
                let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
                match (hex(bytes.get(i + 2)), hex(bytes.get(i + 3))) {
                    (Some(hi), Some(lo)) => {
                        out.push((hi * 16 + lo) as u8);
                        i += 4;
                    }
                    _ => {
                        out.push(bytes[i]);
                        i += 1;
                    }
                }
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        RepoPath(out)
    }
}

impl From<&str> for RepoPath {
    fn from(s: &str) -> RepoPath {
        RepoPath(s.as_bytes().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_utf8_bytes_are_escaped_not_lost() {
        let p = RepoPath::from_bytes(b"tests/fixtures/caf\xe9.json".to_vec());
        assert_eq!(p.to_string(), "tests/fixtures/caf\\xE9.json");
        assert_eq!(p.to_str(), None);
        assert_eq!(RepoPath::parse_lossless(&p.to_string()), p);
        let plain = RepoPath::from("dir\\x/file.txt");
        assert_eq!(RepoPath::parse_lossless(&plain.to_string()), plain);
    }
}
