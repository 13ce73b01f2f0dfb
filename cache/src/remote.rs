//! The remote cache: its settings, the digest functions it may use, how a node's record maps onto
//! a REAPI Action and ActionResult, and the contract the two protocol backends implement.

use std::fmt;
use std::time::Duration;

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use prost::Message;
use sha2::Digest as _;

use crate::mac::MacKey;

/// How long connecting to the remote may take before the remote counts as down.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one request may take before it counts as failed.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The output path a node's value has in its ActionResult.
pub(crate) const VALUE_PATH: &str = "value";

/// Where the remote cache is and how to use it. Built by the binary from flags, the environment
/// and `pyproject.toml`; the cache crate never reads those itself.
#[derive(Clone)]
pub struct RemoteConfig {
    /// `http://`, `https://` (Bazel HTTP cache protocol), `grpc://` or `grpcs://` (REAPI v2).
    /// For gRPC a path names the instance: `grpc://host:8980/main`.
    pub url: String,
    /// Write results to the remote (off by default: an untrusted run must not publish).
    pub upload: bool,
    /// Extra request headers, e.g. `("Authorization", "Bearer …")`. Secret: never displayed.
    pub headers: Vec<(String, String)>,
    /// Sign action results on upload and ignore unsigned or badly signed ones on download.
    pub mac_key: Option<MacKey>,
    /// See [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// See [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
}

impl RemoteConfig {
    /// Settings for `url` with the defaults: no upload, no headers, no signing.
    pub fn new(url: impl Into<String>) -> RemoteConfig {
        RemoteConfig {
            url: url.into(),
            upload: false,
            headers: Vec::new(),
            mac_key: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// The URL as it may be shown: without a query string, which can hold a token, and
    /// without `user:password@`.
    pub fn display_url(&self) -> String {
        display_url(&self.url)
    }
}

impl fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values and the key are credentials: only their presence is shown.
        f.debug_struct("RemoteConfig")
            .field("url", &self.display_url())
            .field("upload", &self.upload)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("signed", &self.mac_key.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

pub(crate) fn display_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    // Credentials in the URL are refused, but the message refusing them must not show them.
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
                None => url.to_owned(),
            }
        }
        None => url.to_owned(),
    }
}

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

/// What a node's entry is in the remote action cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A node's action record: its value blob and whether it is a failure.
    Action,
    /// The candidate traces of a stable key.
    Traces,
}

impl EntryKind {
    fn name(self) -> &'static str {
        match self {
            EntryKind::Action => "action",
            EntryKind::Traces => "traces",
        }
    }
}

/// The Action digest a node's key maps to. The Action names a Command whose arguments carry the
/// fixgate key; its input root is the empty directory. It is never executed, but a REAPI
/// server holds its result like any build output.
pub(crate) fn action_digest(
    function: DigestFunction,
    kind: EntryKind,
    key: &crate::Digest,
) -> RemoteDigest {
    let command = reapi::Command {
        arguments: vec![
            format!("fixgate-cache-v{}", crate::SCHEMA),
            kind.name().to_owned(),
            key.to_string(),
        ],
        output_paths: vec![VALUE_PATH.to_owned()],
        ..Default::default()
    };
    let command_digest = function.digest(&command.encode_to_vec());
    let empty_dir = function.digest(&reapi::Directory::default().encode_to_vec());
    let action = reapi::Action {
        command_digest: Some(command_digest.to_proto()),
        input_root_digest: Some(empty_dir.to_proto()),
        ..Default::default()
    };
    function.digest(&action.encode_to_vec())
}

/// The ActionResult that holds `value` (by digest) for `action`, signed with `key` if given.
pub(crate) fn action_result(
    action: &RemoteDigest,
    value: &RemoteDigest,
    failed: bool,
    key: Option<&MacKey>,
) -> reapi::ActionResult {
    let exit_code = i32::from(failed);
    let auxiliary_metadata = key
        .map(|k| vec![crate::mac::to_any(k.sign(action, value, exit_code))])
        .unwrap_or_default();
    reapi::ActionResult {
        output_files: vec![reapi::OutputFile {
            path: VALUE_PATH.to_owned(),
            digest: Some(value.to_proto()),
            ..Default::default()
        }],
        exit_code,
        execution_metadata: Some(reapi::ExecutedActionMetadata {
            worker: "fixgate".to_owned(),
            auxiliary_metadata,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Why a stored ActionResult was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// It has no value output, or its digest does not parse.
    Malformed(String),
    /// A key is set and the result carries no MAC, or a MAC that does not verify.
    Unsigned,
}

/// The value digest and failure flag of `result`, checking its MAC when `key` is set.
pub(crate) fn read_result(
    action: &RemoteDigest,
    result: &reapi::ActionResult,
    key: Option<&MacKey>,
) -> Result<(RemoteDigest, bool), Rejected> {
    let file = result
        .output_files
        .iter()
        .find(|f| f.path == VALUE_PATH)
        .ok_or_else(|| Rejected::Malformed("no value output".to_owned()))?;
    let digest = file
        .digest
        .as_ref()
        .ok_or_else(|| Rejected::Malformed("value output without a digest".to_owned()))?;
    let value = RemoteDigest::from_proto(digest).map_err(|e| Rejected::Malformed(e.to_string()))?;
    if let Some(key) = key {
        let signed = result
            .execution_metadata
            .as_ref()
            .map(|m| m.auxiliary_metadata.as_slice())
            .unwrap_or_default()
            .iter()
            .any(|any| crate::mac::verify_any(key, any, action, &value, result.exit_code));
        if !signed {
            return Err(Rejected::Unsigned);
        }
    }
    Ok((value, result.exit_code != 0))
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

/// Connects to the server `config` names: for gRPC this asks for its capabilities (and so fails
/// fast when it is down), for HTTP it only builds the client.
pub(crate) fn connect(config: &RemoteConfig) -> Result<Box<dyn Backend>, RemoteError> {
    let (scheme, rest) = split_url(&config.url)?;
    let url = config.url.trim_end_matches('/');
    match scheme {
        "http" | "https" => Ok(Box::new(crate::http::HttpBackend::new(url, config)?)),
        "grpc" | "grpcs" => Ok(Box::new(crate::grpc::GrpcConnection::connect(
            scheme == "grpcs",
            rest,
            config,
        )?)),
        _ => Err(bad_url(
            url,
            "has an unknown scheme; use http://, https://, grpc:// or grpcs://",
        )),
    }
}

/// The scheme and the rest of a remote URL (`host:port[/path]`), refusing credentials in it and
/// a missing host.
pub(crate) fn split_url(url: &str) -> Result<(&str, &str), RemoteError> {
    let url = url.trim_end_matches('/');
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad_url(url, "has no scheme"))?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(bad_url(
            url,
            "carries credentials; put them in FIXGATE_REMOTE_HEADER instead",
        ));
    }
    if authority.is_empty() {
        return Err(bad_url(url, "has no host"));
    }
    Ok((scheme, rest))
}

fn bad_url(url: &str, why: &str) -> RemoteError {
    RemoteError::BadUrl {
        url: display_url(url),
        why: why.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_digests_differ_by_kind_key_and_function() {
        let k = crate::Digest::of(b"k");
        let a = action_digest(DigestFunction::Sha256, EntryKind::Action, &k);
        assert_eq!(
            a,
            action_digest(DigestFunction::Sha256, EntryKind::Action, &k)
        );
        assert_ne!(
            a,
            action_digest(DigestFunction::Sha256, EntryKind::Traces, &k)
        );
        assert_ne!(
            a,
            action_digest(DigestFunction::Blake3, EntryKind::Action, &k)
        );
        assert_ne!(
            a,
            action_digest(
                DigestFunction::Sha256,
                EntryKind::Action,
                &crate::Digest::of(b"j")
            )
        );
    }

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

    #[test]
    fn results_round_trip_and_signatures_are_checked() {
        let f = DigestFunction::Sha256;
        let action = action_digest(f, EntryKind::Action, &crate::Digest::of(b"k"));
        let value = f.digest(b"value bytes");
        let key = MacKey::derive(b"secret");
        let signed = action_result(&action, &value, true, Some(&key));
        assert_eq!(read_result(&action, &signed, Some(&key)), Ok((value, true)));
        let unsigned = action_result(&action, &value, false, None);
        assert_eq!(read_result(&action, &unsigned, None), Ok((value, false)));
        assert_eq!(
            read_result(&action, &unsigned, Some(&key)),
            Err(Rejected::Unsigned)
        );
        // A signature is bound to its action: moving a result to another key breaks it.
        let other = action_digest(f, EntryKind::Action, &crate::Digest::of(b"j"));
        assert_eq!(
            read_result(&other, &signed, Some(&key)),
            Err(Rejected::Unsigned)
        );
        // And to the value and the exit code.
        let mut flipped = signed.clone();
        flipped.exit_code = 0;
        assert_eq!(
            read_result(&action, &flipped, Some(&key)),
            Err(Rejected::Unsigned)
        );
        assert_eq!(
            read_result(&action, &signed, Some(&MacKey::derive(b"other"))),
            Err(Rejected::Unsigned)
        );
    }

    #[test]
    fn urls_with_credentials_or_odd_schemes_are_refused() {
        for url in [
            "https://user:pw@cache.example/",
            "ftp://cache.example/",
            "cache.example",
            "http://",
        ] {
            let err = connect(&RemoteConfig::new(url)).err().unwrap();
            assert!(matches!(err, RemoteError::BadUrl { .. }), "{url}: {err}");
            assert!(!err.to_string().contains("pw"));
        }
    }

    #[test]
    fn debug_never_shows_header_values() {
        let mut c = RemoteConfig::new("https://cache.example/?token=abc");
        c.headers
            .push(("Authorization".into(), "Bearer sekrit".into()));
        let shown = format!("{c:?}");
        assert!(!shown.contains("sekrit"));
        assert!(!shown.contains("abc"));
        assert!(shown.contains("Authorization"));
    }
}
