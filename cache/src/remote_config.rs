//! Where the remote cache is and how to use it: the settings the binary resolves and hands in.

use std::fmt;
use std::time::Duration;

use crate::mac::MacKey;
use crate::wire::RemoteError;

/// How long connecting to the remote may take before the remote counts as down.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one request may take before it counts as failed.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

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

pub(crate) fn bad_url(url: &str, why: &str) -> RemoteError {
    RemoteError::BadUrl {
        url: display_url(url),
        why: why.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
