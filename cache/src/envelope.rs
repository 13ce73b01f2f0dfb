//! The framing of every value the disk store decodes: magic, schema version, postcard, checksum.
//!
//! A record read back is trusted only if its trailing blake3 checksum matches, its magic names the
//! record type expected and its schema is ours; anything else (a torn write, a file from another
//! fixgate, a flipped bit) is reported as a miss, never decoded into a wrong answer.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::SCHEMA;

/// Magic of an action-cache record.
pub(crate) const MAGIC_ACTION: [u8; 4] = *b"FGac";
/// Magic of a trace-index value (the candidates of one stable key).
pub(crate) const MAGIC_INDEX: [u8; 4] = *b"FGix";
/// Magic of a dependency-set blob in the content store.
pub(crate) const MAGIC_DEPS: [u8; 4] = *b"FGdp";

const HEADER: usize = 8;
const CHECKSUM: usize = 32;

/// Why a stored value was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EnvelopeError {
    #[error("{0} bytes is too short for a record")]
    TooShort(usize),
    #[error("checksum mismatch")]
    Checksum,
    #[error("not a {expected} record")]
    Magic { expected: &'static str },
    #[error("schema version {0}, expected {SCHEMA}")]
    Schema(u32),
    #[error("payload does not decode: {0}")]
    Postcard(#[from] postcard::Error),
    #[error("{0} unexpected bytes after the payload")]
    Trailing(usize),
}

fn name(magic: &[u8; 4]) -> &'static str {
    match *magic {
        MAGIC_ACTION => "action",
        MAGIC_INDEX => "trace index",
        MAGIC_DEPS => "dependency set",
        _ => "fixgate",
    }
}

/// Frames `value` for storage.
pub(crate) fn encode<T: Serialize>(magic: &[u8; 4], value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(magic);
    out.extend_from_slice(&SCHEMA.to_le_bytes());
    // Serializing our own plain structs into a Vec cannot fail: postcard errors only on
    // unsupported types or a full fixed buffer, neither of which occurs here.
    let mut out =
        postcard::to_extend(value, out).expect("postcard encodes plain structs into a Vec");
    let checksum = blake3::hash(&out);
    out.extend_from_slice(checksum.as_bytes());
    out
}

/// Checks and decodes a value framed by [`encode`].
pub(crate) fn decode<T: DeserializeOwned>(
    magic: &[u8; 4],
    bytes: &[u8],
) -> Result<T, EnvelopeError> {
    if bytes.len() < HEADER + CHECKSUM {
        return Err(EnvelopeError::TooShort(bytes.len()));
    }
    let (body, checksum) = bytes.split_at(bytes.len() - CHECKSUM);
    if blake3::hash(body).as_bytes() != checksum {
        return Err(EnvelopeError::Checksum);
    }
    if body[..4] != magic[..] {
        return Err(EnvelopeError::Magic {
            expected: name(magic),
        });
    }
    let schema = u32::from_le_bytes([body[4], body[5], body[6], body[7]]);
    if schema != SCHEMA {
        return Err(EnvelopeError::Schema(schema));
    }
    let (value, rest) = postcard::take_from_bytes(&body[HEADER..])?;
    if !rest.is_empty() {
        return Err(EnvelopeError::Trailing(rest.len()));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ActionRecord, Digest};

    fn record() -> ActionRecord {
        ActionRecord {
            output: Digest::of(b"out"),
            failed: true,
        }
    }

    #[test]
    fn round_trips() {
        let bytes = encode(&MAGIC_ACTION, &record());
        assert_eq!(
            decode::<ActionRecord>(&MAGIC_ACTION, &bytes).unwrap(),
            record()
        );
    }

    #[test]
    fn refuses_every_truncation_and_every_flipped_byte() {
        let bytes = encode(&MAGIC_ACTION, &record());
        for len in 0..bytes.len() {
            assert!(decode::<ActionRecord>(&MAGIC_ACTION, &bytes[..len]).is_err());
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(
                decode::<ActionRecord>(&MAGIC_ACTION, &bad).is_err(),
                "byte {i}"
            );
        }
    }

    #[test]
    fn refuses_another_record_type_and_another_schema() {
        let bytes = encode(&MAGIC_ACTION, &record());
        assert!(matches!(
            decode::<ActionRecord>(&MAGIC_INDEX, &bytes),
            Err(EnvelopeError::Magic { .. })
        ));

        let mut other = bytes[..bytes.len() - CHECKSUM].to_vec();
        other[4..8].copy_from_slice(&(SCHEMA + 1).to_le_bytes());
        let sum = blake3::hash(&other);
        other.extend_from_slice(sum.as_bytes());
        assert!(matches!(
            decode::<ActionRecord>(&MAGIC_ACTION, &other),
            Err(EnvelopeError::Schema(_))
        ));
    }
}
