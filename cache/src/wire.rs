//! The vocabulary the remote protocols share: digests of the negotiated function, the errors a
//! remote gives, and the contract the two protocol backends implement.

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use sha2::Digest as _;

/// Why the remote could not be used. Messages never contain header values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The URL is not one fixgate can use.
    #[error("remote cache URL {url:?} {why}")]
    BadUrl {
        /// The URL, without its query.
        url: String,
        /// What is wrong, as a fragment after the URL.
        why: String,
    },
    /// A header from `FIXGATE_REMOTE_HEADER` is malformed.
    #[error("remote cache header {name:?} is not a valid header (expected \"Name: value\")")]
    BadHeader {
        /// The header's name (never its value).
        name: String,
    },
    /// Connecting, a timeout, or a broken connection.
    #[error("cannot reach the remote cache: {0}")]
    Transport(String),
    /// The server answered with an error.
    #[error("the remote cache answered {0}")]
    Status(String),
    /// The server refused the request for now (gRPC `RESOURCE_EXHAUSTED`, HTTP 429): more
    /// requests than it takes at once. Worth asking again later; it says nothing of the data.
    #[error("the remote service is busy: {0}")]
    Busy(String),
    /// The server answered something that is not what the protocol says.
    #[error("the remote cache sent an invalid answer: {0}")]
    Protocol(String),
}

/// The hash function remote digests are computed with: what the server offers, BLAKE3 first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DigestFunction {
    /// SHA-256, what every REAPI server and Bazel HTTP cache understands.
    Sha256,
    /// BLAKE3, fixgate's own hash, when the server offers it.
    Blake3,
}

impl DigestFunction {
    /// `sha256` or `blake3`.
    pub fn name(self) -> &'static str {
        match self {
            DigestFunction::Sha256 => "sha256",
            DigestFunction::Blake3 => "blake3",
        }
    }

    /// The digest of `bytes`.
    pub fn digest(self, bytes: &[u8]) -> RemoteDigest {
        let hash: [u8; 32] = match self {
            DigestFunction::Sha256 => sha2::Sha256::digest(bytes).into(),
            DigestFunction::Blake3 => *blake3::hash(bytes).as_bytes(),
        };
        RemoteDigest {
            hash,
            size: bytes.len() as u64,
        }
    }

    /// The REAPI enum value.
    pub fn reapi(self) -> i32 {
        match self {
            DigestFunction::Sha256 => reapi::digest_function::Value::Sha256 as i32,
            DigestFunction::Blake3 => reapi::digest_function::Value::Blake3 as i32,
        }
    }

    /// BLAKE3 when `offered` has it, else SHA-256 when it has that, else `None`.
    pub(crate) fn choose(offered: &[i32]) -> Option<DigestFunction> {
        [DigestFunction::Blake3, DigestFunction::Sha256]
            .into_iter()
            .find(|f| offered.contains(&f.reapi()))
    }
}

/// A REAPI digest: a hash of the negotiated function and the size of what it hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RemoteDigest {
    /// The hash, of the negotiated function.
    pub hash: [u8; 32],
    /// The size of what it hashes, in bytes.
    pub size: u64,
}

impl RemoteDigest {
    /// The hash as 64 lowercase hex digits, as REAPI writes it.
    pub fn hex(&self) -> String {
        crate::Digest::from_bytes(self.hash).to_hex()
    }

    /// The REAPI message.
    pub fn to_proto(self) -> reapi::Digest {
        reapi::Digest {
            hash: self.hex(),
            size_bytes: i64::try_from(self.size).unwrap_or(i64::MAX),
        }
    }

    /// Reads a REAPI message, refusing a hash that is not 64 lowercase hex digits or a negative
    /// size.
    pub fn from_proto(d: &reapi::Digest) -> Result<RemoteDigest, RemoteError> {
        let hash = crate::Digest::from_hex(&d.hash)
            .map_err(|e| RemoteError::Protocol(format!("digest {:?}: {e}", d.hash)))?;
        let size = u64::try_from(d.size_bytes)
            .map_err(|_| RemoteError::Protocol(format!("negative size {}", d.size_bytes)))?;
        Ok(RemoteDigest {
            hash: *hash.as_bytes(),
            size,
        })
    }

    /// Whether `bytes` are what this digest names.
    pub fn matches(&self, function: DigestFunction, bytes: &[u8]) -> bool {
        function.digest(bytes) == *self
    }
}

/// One remote cache protocol. Every call is one request (or one short exchange); a missing
/// entry is `Ok(None)`, anything else that goes wrong is an error.
pub(crate) trait Backend: Send + Sync {
    /// The digest function keys and blobs are computed with on this server.
    fn digest_function(&self) -> DigestFunction;

    fn get_action_result(
        &self,
        action: &RemoteDigest,
    ) -> Result<Option<reapi::ActionResult>, RemoteError>;

    fn put_action_result(
        &self,
        action: &RemoteDigest,
        result: &reapi::ActionResult,
    ) -> Result<(), RemoteError>;

    fn get_blob(&self, digest: &RemoteDigest) -> Result<Option<Vec<u8>>, RemoteError>;

    fn put_blob(&self, digest: &RemoteDigest, bytes: &[u8]) -> Result<(), RemoteError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_digest_is_the_standard_one() {
        let d = DigestFunction::Sha256.digest(b"abc");
        assert_eq!(
            d.hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(d.size, 3);
    }

    #[test]
    fn blake3_is_preferred_when_offered() {
        let sha = DigestFunction::Sha256.reapi();
        let b3 = DigestFunction::Blake3.reapi();
        assert_eq!(
            DigestFunction::choose(&[sha, b3]),
            Some(DigestFunction::Blake3)
        );
        assert_eq!(DigestFunction::choose(&[sha]), Some(DigestFunction::Sha256));
        assert_eq!(DigestFunction::choose(&[]), None);
    }
}
