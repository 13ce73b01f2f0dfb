//! The Bazel HTTP remote cache protocol: `GET`/`PUT {base}/ac/{hash}` hold serialized
//! ActionResults, `{base}/cas/{hash}` hold blobs; SHA-256 digests (what bazel-remote checks and
//! what nginx with WebDAV stores without looking).

use std::collections::HashMap;
use std::sync::Mutex;

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use prost::Message;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

use crate::remote_config::RemoteConfig;
use crate::wire::{Backend, DigestFunction, RemoteDigest, RemoteError};

/// Answers larger than this are refused rather than read into memory.
const MAX_BODY: u64 = 1 << 30;

pub(crate) struct HttpBackend {
    agent: ureq::Agent,
    base: String,
    headers: Vec<(String, String)>,
}

impl HttpBackend {
    pub(crate) fn new(base: &str, config: &RemoteConfig) -> Result<HttpBackend, RemoteError> {
        let agent_config = ureq::Agent::config_builder()
            .timeout_connect(Some(config.connect_timeout))
            .timeout_global(Some(config.request_timeout))
            // Statuses are answers the protocol gives meaning to (404 is a miss), not errors.
            .http_status_as_error(false)
            // ureq would read HTTP_PROXY and friends itself; this crate takes no input from the
            // environment, and no proxy is the same on every machine.
            .proxy(None)
            .user_agent(concat!("fixgate/", env!("CARGO_PKG_VERSION")))
            .build();
        let agent = ureq::Agent::with_parts(
            agent_config,
            DefaultConnector::new(),
            OnceResolver::default(),
        );
        Ok(HttpBackend {
            agent,
            base: base.trim_end_matches('/').to_owned(),
            headers: config.headers.clone(),
        })
    }

    fn url(&self, area: &str, digest: &RemoteDigest) -> String {
        format!("{}/{area}/{}", self.base, digest.hex())
    }

    fn get(&self, url: &str) -> Result<Option<Vec<u8>>, RemoteError> {
        let mut req = self.agent.get(url);
        for (name, value) in &self.headers {
            req = req.header(name, value);
        }
        let resp = req.call().map_err(transport)?;
        match resp.status().as_u16() {
            200 => resp
                .into_body()
                .with_config()
                .limit(MAX_BODY)
                .read_to_vec()
                .map(Some)
                .map_err(transport),
            404 => Ok(None),
            429 => Err(RemoteError::Busy(format!("HTTP 429 to GET {url}"))),
            other => Err(RemoteError::Status(format!("HTTP {other} to GET {url}"))),
        }
    }

    fn put(&self, url: &str, bytes: &[u8]) -> Result<(), RemoteError> {
        let mut req = self.agent.put(url);
        for (name, value) in &self.headers {
            req = req.header(name, value);
        }
        let resp = req.send(bytes).map_err(transport)?;
        match resp.status().as_u16() {
            200..=299 => Ok(()),
            429 => Err(RemoteError::Busy(format!("HTTP 429 to PUT {url}"))),
            other => Err(RemoteError::Status(format!("HTTP {other} to PUT {url}"))),
        }
    }
}

/// Resolves each host once per process. ureq resolves a request's host before it looks for a
/// pooled connection, so without this every request, even on a kept-alive connection, pays a
/// name lookup, and with a timeout set a thread to run it in. A failed lookup is not kept.
#[derive(Debug, Default)]
struct OnceResolver {
    inner: DefaultResolver,
    known: Mutex<HashMap<String, ResolvedSocketAddrs>>,
}

impl Resolver for OnceResolver {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or_default(),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        );
        // A lookup is one insert or clone: a panic elsewhere cannot leave the map torn.
        if let Some(addrs) = self
            .known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&host)
        {
            return Ok(addrs.clone());
        }
        let addrs = self.inner.resolve(uri, config, timeout)?;
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(host, addrs.clone());
        Ok(addrs)
    }
}

fn transport(e: ureq::Error) -> RemoteError {
    RemoteError::Transport(e.to_string())
}

impl Backend for HttpBackend {
    fn digest_function(&self) -> DigestFunction {
        DigestFunction::Sha256
    }

    fn get_action_result(
        &self,
        action: &RemoteDigest,
    ) -> Result<Option<reapi::ActionResult>, RemoteError> {
        let Some(bytes) = self.get(&self.url("ac", action))? else {
            return Ok(None);
        };
        reapi::ActionResult::decode(bytes.as_slice())
            .map(Some)
            .map_err(|e| RemoteError::Protocol(format!("action result {}: {e}", action.hex())))
    }

    fn put_action_result(
        &self,
        action: &RemoteDigest,
        result: &reapi::ActionResult,
    ) -> Result<(), RemoteError> {
        self.put(&self.url("ac", action), &result.encode_to_vec())
    }

    fn get_blob(&self, digest: &RemoteDigest) -> Result<Option<Vec<u8>>, RemoteError> {
        self.get(&self.url("cas", digest))
    }

    fn put_blob(&self, digest: &RemoteDigest, bytes: &[u8]) -> Result<(), RemoteError> {
        self.put(&self.url("cas", digest), bytes)
    }
}
