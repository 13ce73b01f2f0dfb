//! The remote cache: how a node's record maps onto a REAPI Action and ActionResult, and which
//! protocol backend a URL names.

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use prost::Message;

use crate::mac::MacKey;
use crate::remote_config::{bad_url, split_url, RemoteConfig};
use crate::wire::{Backend, DigestFunction, RemoteDigest, RemoteError};

/// The output path a node's value has in its ActionResult.
pub(crate) const VALUE_PATH: &str = "value";

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
}
