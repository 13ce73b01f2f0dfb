//! The canonical key encoding: typed, length-prefixed fields hashed with a domain-separated blake3.
//!
//! Keys are never serde output (whose bytes may change with a serde or format upgrade) nor a
//! `HashMap`'s iteration order: every field is written by hand, with a type tag and, for variable
//! lengths, a length prefix, so no two different field sequences can encode to the same bytes.
//! The domain (`fixgate <kind> v1`) keeps a seed-run key from ever equalling a manifest key even
//! if their fields happen to match. Changing this encoding means bumping [`KEY_ENCODING`].

use std::collections::BTreeMap;

use crate::Digest;

/// Version of this encoding, part of every domain string: bump it when a byte written here changes.
pub const KEY_ENCODING: u32 = 1;

// One tag per field type, so that a string never reads as bytes nor a u64 as a digest.
const TAG_U64: u8 = 1;
const TAG_STR: u8 = 2;
const TAG_BYTES: u8 = 3;
const TAG_DIGEST: u8 = 4;
const TAG_MAP: u8 = 5;
const TAG_LIST: u8 = 6;
const TAG_NONE: u8 = 7;

/// Builds a key from typed fields.
///
/// ```
/// use fixgate_cache::{Digest, KeyWriter};
/// let key: Digest = KeyWriter::new("seed-run").u64(3).str("tests/test_db.py").finish();
/// assert!(key.to_string().starts_with("b3:"));
/// ```
pub struct KeyWriter {
    hasher: blake3::Hasher,
}

impl KeyWriter {
    /// Starts a key in the domain `fixgate <kind> v1`. `kind` names what is keyed (a node kind
    /// such as `seed-run`, or an internal record such as `trace-output`).
    pub fn new(kind: &str) -> KeyWriter {
        let context = format!("fixgate {kind} v{KEY_ENCODING}");
        KeyWriter {
            hasher: blake3::Hasher::new_derive_key(&context),
        }
    }

    fn len(&mut self, len: usize) {
        // usize → u64 never truncates on the platforms Rust supports.
        self.hasher.update(&(len as u64).to_le_bytes());
    }

    /// An unsigned integer (8 bytes, little-endian).
    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.hasher.update(&[TAG_U64]);
        self.hasher.update(&value.to_le_bytes());
        self
    }

    /// A UTF-8 string, length-prefixed.
    pub fn str(&mut self, value: &str) -> &mut Self {
        self.hasher.update(&[TAG_STR]);
        self.len(value.len());
        self.hasher.update(value.as_bytes());
        self
    }

    /// Raw bytes, length-prefixed (a different type from a string of the same bytes).
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.hasher.update(&[TAG_BYTES]);
        self.len(value.len());
        self.hasher.update(value);
        self
    }

    /// A digest (32 bytes).
    pub fn digest(&mut self, value: &Digest) -> &mut Self {
        self.hasher.update(&[TAG_DIGEST]);
        self.hasher.update(value.as_bytes());
        self
    }

    /// A digest or its absence (a file that did not exist is a fact a key can depend on).
    pub fn opt_digest(&mut self, value: Option<&Digest>) -> &mut Self {
        match value {
            Some(d) => self.digest(d),
            None => {
                self.hasher.update(&[TAG_NONE]);
                self
            }
        }
    }

    /// A map in key order: its length, then each key as a string followed by the fields `value`
    /// writes for its value. Taking a `BTreeMap` makes the order canonical by construction.
    pub fn map<V>(
        &mut self,
        map: &BTreeMap<String, V>,
        mut value: impl FnMut(&mut Self, &V),
    ) -> &mut Self {
        self.hasher.update(&[TAG_MAP]);
        self.len(map.len());
        for (k, v) in map {
            self.str(k);
            value(self, v);
        }
        self
    }

    /// A map of names to digests (e.g. the files a node reads).
    pub fn digest_map(&mut self, map: &BTreeMap<String, Digest>) -> &mut Self {
        self.map(map, |w, d| {
            w.digest(d);
        })
    }

    /// A map of names to strings (e.g. an environment allowlist).
    pub fn str_map(&mut self, map: &BTreeMap<String, String>) -> &mut Self {
        self.map(map, |w, s| {
            w.str(s);
        })
    }

    /// A list in the given order: its length, then the fields `item` writes for each element.
    pub fn list<T>(&mut self, items: &[T], mut item: impl FnMut(&mut Self, &T)) -> &mut Self {
        self.hasher.update(&[TAG_LIST]);
        self.len(items.len());
        for it in items {
            item(self, it);
        }
        self
    }

    /// A list of digests in the given order (e.g. the outputs of a node's inputs, in edge order).
    pub fn digests(&mut self, items: &[Digest]) -> &mut Self {
        self.list(items, |w, d| {
            w.digest(d);
        })
    }

    /// The key of everything written so far.
    pub fn finish(&self) -> Digest {
        Digest::from(self.hasher.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_vector_pins_the_encoding() {
        // If this fails, the encoding changed: every cached key is now different. That may be
        // intended, but then bump KEY_ENCODING and update this vector in the same change.
        let files = BTreeMap::from([
            ("tests/fixtures/db.sqlite".to_string(), Digest::of(b"db")),
            ("tests/test_a.py".to_string(), Digest::of(b"a")),
        ]);
        let key = KeyWriter::new("seed-run")
            .str("0.1.0")
            .u64(3)
            .bytes(b"\x00\xff")
            .digest_map(&files)
            .digests(&[Digest::of(b"collect")])
            .opt_digest(None)
            .finish();
        assert_eq!(
            key.to_string(),
            "b3:5bbf044b4e9d12cdd5d7f6b5ad139a475841ec7af57827cf0bc7fc6af7e930ac"
        );
    }

    #[test]
    fn bytes_on_the_wire_are_tagged_and_length_prefixed() {
        // The layout spelled out, so that a change to it is visible in review, not only as a
        // new golden hash.
        let mut wire = Vec::new();
        wire.push(TAG_STR);
        wire.extend_from_slice(&2u64.to_le_bytes());
        wire.extend_from_slice(b"ab");
        wire.push(TAG_U64);
        wire.extend_from_slice(&7u64.to_le_bytes());
        wire.push(TAG_LIST);
        wire.extend_from_slice(&1u64.to_le_bytes());
        wire.push(TAG_DIGEST);
        wire.extend_from_slice(Digest::of(b"d").as_bytes());
        let expected = blake3::Hasher::new_derive_key("fixgate seed-run v1")
            .update(&wire)
            .finalize();
        let key = KeyWriter::new("seed-run")
            .str("ab")
            .u64(7)
            .digests(&[Digest::of(b"d")])
            .finish();
        assert_eq!(key, Digest::from(expected));
    }

    #[test]
    fn string_boundaries_cannot_be_confused() {
        let ab_c = KeyWriter::new("t").str("ab").str("c").finish();
        let a_bc = KeyWriter::new("t").str("a").str("bc").finish();
        let abc = KeyWriter::new("t").str("abc").finish();
        assert_ne!(ab_c, a_bc);
        assert_ne!(ab_c, abc);
        assert_ne!(a_bc, abc);
    }

    #[test]
    fn types_and_domains_cannot_be_confused() {
        assert_ne!(
            KeyWriter::new("t").str("x").finish(),
            KeyWriter::new("t").bytes(b"x").finish()
        );
        assert_ne!(
            KeyWriter::new("seed-run").u64(1).finish(),
            KeyWriter::new("manifest").u64(1).finish()
        );
        // A map entry is not the same as a key string followed by a value string.
        let map = BTreeMap::from([("a".to_string(), "b".to_string())]);
        assert_ne!(
            KeyWriter::new("t").str_map(&map).finish(),
            KeyWriter::new("t").str("a").str("b").finish()
        );
        // Nor is an empty list the same as an empty map.
        assert_ne!(
            KeyWriter::new("t").digests(&[]).finish(),
            KeyWriter::new("t").str_map(&BTreeMap::new()).finish()
        );
    }

    #[test]
    fn same_fields_same_key() {
        let make = || KeyWriter::new("t").u64(7).str("p").finish();
        assert_eq!(make(), make());
    }
}
