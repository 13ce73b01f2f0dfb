//! The blake3 digest every key, blob and file hash in fixgate is written as (`b3:<hex>`).

use std::fmt;
use std::str::FromStr;

/// The text every digest starts with, naming the hash function so that a future change of hash
/// can never be mistaken for a match.
const PREFIX: &str = "b3:";

/// A blake3 hash: of a file, a blob, or the canonical encoding of a key.
///
/// Displayed and serialized (in human-readable formats such as JSON) as `b3:` followed by 64
/// lowercase hex digits; binary formats such as postcard get the 32 raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    /// Wraps 32 raw bytes that already are a blake3 hash.
    pub const fn from_bytes(bytes: [u8; 32]) -> Digest {
        Digest(bytes)
    }

    /// The 32 raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lowercase hex digits, without the `b3:` prefix: the file name in the cache.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(64);
        for byte in self.0 {
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 0xf)] as char);
        }
        out
    }

    /// Parses 64 lowercase hex digits (no prefix), as found in a cache file name.
    pub fn from_hex(hex: &str) -> Result<Digest, ParseDigestError> {
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return Err(ParseDigestError::Length(bytes.len()));
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Ok(Digest(out))
    }
}

fn nibble(c: u8) -> Result<u8, ParseDigestError> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        // Uppercase is refused so that one digest has exactly one spelling, in files and reports.
        _ => Err(ParseDigestError::NotHex(c as char)),
    }
}

impl From<blake3::Hash> for Digest {
    fn from(hash: blake3::Hash) -> Digest {
        Digest(*hash.as_bytes())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}", self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a string is not a digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseDigestError {
    /// The `b3:` prefix is missing.
    #[error("expected a digest starting with \"b3:\"")]
    Prefix,
    /// Not 64 hex digits.
    #[error("expected 64 hex digits after \"b3:\", found {0}")]
    Length(usize),
    /// A character outside `0-9a-f`.
    #[error("expected lowercase hex digits, found {0:?}")]
    NotHex(char),
}

impl FromStr for Digest {
    type Err = ParseDigestError;

    fn from_str(s: &str) -> Result<Digest, ParseDigestError> {
        let hex = s.strip_prefix(PREFIX).ok_or(ParseDigestError::Prefix)?;
        Digest::from_hex(hex)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Digest, D::Error> {
        if deserializer.is_human_readable() {
            let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
            text.parse().map_err(serde::de::Error::custom)
        } else {
            <[u8; 32]>::deserialize(deserializer).map(Digest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let d = Digest::of(b"fixgate");
        let text = d.to_string();
        assert!(text.starts_with("b3:"));
        assert_eq!(text.len(), 67);
        assert_eq!(text.parse::<Digest>().unwrap(), d);
        assert_eq!(Digest::from_hex(&d.to_hex()).unwrap(), d);
    }

    #[test]
    fn empty_input_has_the_blake3_empty_hash() {
        assert_eq!(
            Digest::of(b"").to_string(),
            "b3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn parse_refuses_malformed_text() {
        let hex = Digest::of(b"x").to_hex();
        assert_eq!("".parse::<Digest>(), Err(ParseDigestError::Prefix));
        assert_eq!(hex.parse::<Digest>(), Err(ParseDigestError::Prefix));
        assert_eq!("b3:abc".parse::<Digest>(), Err(ParseDigestError::Length(3)));
        let upper = format!("b3:{}", hex.to_uppercase());
        assert!(matches!(
            upper.parse::<Digest>(),
            Err(ParseDigestError::NotHex(_))
        ));
    }

    #[test]
    fn serde_is_the_string_in_json_and_raw_bytes_in_postcard() {
        let d = Digest::of(b"x");
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{d}\""));
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);

        let bin = postcard::to_stdvec(&d).unwrap();
        assert_eq!(bin.len(), 32);
        assert_eq!(postcard::from_bytes::<Digest>(&bin).unwrap(), d);
    }
}
