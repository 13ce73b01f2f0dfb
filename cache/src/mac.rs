//! Signing remote action results with a keyed BLAKE3 MAC, so that whoever can write to the remote
//! cache cannot forge a result without the key.

use std::fmt;

use bazel_remote_apis::google::protobuf::Any;
use prost::Message;

use crate::wire::RemoteDigest;

/// The type URL of the MAC in an ActionResult's `execution_metadata.auxiliary_metadata`.
pub(crate) const MAC_TYPE_URL: &str = "type.googleapis.com/fixgate.cache.v1.Mac";

/// The secret a MAC is computed with, derived from the user's key text.
#[derive(Clone)]
pub struct MacKey([u8; 32]);

impl MacKey {
    /// Derives the MAC key from secret bytes of any length (e.g. `FIXGATE_CACHE_KEY`).
    pub fn derive(secret: &[u8]) -> MacKey {
        MacKey(blake3::derive_key(
            "fixgate cache action-result mac v1",
            secret,
        ))
    }

    /// The MAC over what a result says: the action it answers, its value, its exit code.
    pub(crate) fn sign(
        &self,
        action: &RemoteDigest,
        value: &RemoteDigest,
        exit_code: i32,
    ) -> [u8; 32] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        // Fixed-width fields: no two different results encode alike.
        h.update(&action.hash);
        h.update(&action.size.to_le_bytes());
        h.update(&value.hash);
        h.update(&value.size.to_le_bytes());
        h.update(&exit_code.to_le_bytes());
        *h.finalize().as_bytes()
    }
}

impl fmt::Debug for MacKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MacKey(..)")
    }
}

/// The MAC as an `Any`, wrapped in a `BytesValue`-shaped message (field 1, bytes).
pub(crate) fn to_any(mac: [u8; 32]) -> Any {
    Any {
        type_url: MAC_TYPE_URL.to_owned(),
        value: MacValue { mac: mac.to_vec() }.encode_to_vec(),
    }
}

/// Whether `any` is a MAC of this result made with `key`.
pub(crate) fn verify_any(
    key: &MacKey,
    any: &Any,
    action: &RemoteDigest,
    value: &RemoteDigest,
    exit_code: i32,
) -> bool {
    if any.type_url != MAC_TYPE_URL {
        return false;
    }
    let Ok(decoded) = MacValue::decode(any.value.as_slice()) else {
        return false;
    };
    // blake3::Hash compares in constant time.
    let Ok(found) = <[u8; 32]>::try_from(decoded.mac.as_slice()) else {
        return false;
    };
    blake3::Hash::from_bytes(found) == blake3::Hash::from_bytes(key.sign(action, value, exit_code))
}

#[derive(Clone, PartialEq, prost::Message)]
struct MacValue {
    #[prost(bytes = "vec", tag = "1")]
    mac: Vec<u8>,
}
