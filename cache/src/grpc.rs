//! The REAPI v2 backend: ActionCache, ContentAddressableStorage and ByteStream over gRPC, with
//! the digest function the server advertises in `GetCapabilities`. The same connection is what
//! remote execution builds on ([`GrpcConnection`]: its channel, its blob calls in batches).

use std::sync::Arc;

use bazel_remote_apis::build::bazel::remote::execution::v2 as reapi;
use bazel_remote_apis::google::bytestream;
use reapi::action_cache_client::ActionCacheClient;
use reapi::capabilities_client::CapabilitiesClient;
use reapi::content_addressable_storage_client::ContentAddressableStorageClient;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::remote_config::RemoteConfig;
use crate::wire::{Backend, DigestFunction, RemoteDigest, RemoteError};

/// Blobs up to this size go through the batch calls; larger ones through ByteStream, in chunks
/// of this size. It stays under gRPC's common 4 MiB message limit.
const BATCH_LIMIT: u64 = 2 << 20;

/// Blobs by digest, `None` for those the server does not hold.
pub type Fetched = Vec<(RemoteDigest, Option<Vec<u8>>)>;

/// The channel every call of a [`GrpcConnection`] goes through: the configured headers added.
pub type GrpcChannel = InterceptedService<Channel, Headers>;
type Chan = GrpcChannel;

/// Adds the configured headers to every call.
#[derive(Clone)]
pub struct Headers(Arc<Vec<(AsciiMetadataKey, AsciiMetadataValue)>>);

impl tonic::service::Interceptor for Headers {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        for (k, v) in self.0.iter() {
            req.metadata_mut().insert(k.clone(), v.clone());
        }
        Ok(req)
    }
}

/// Where blobs are in ByteStream resource names: the instance and the digest function.
struct Layout {
    instance: String,
    function: DigestFunction,
}

impl Layout {
    /// `{instance}/blobs/[blake3/]{hash}/{size}`, the instance part left out when empty.
    fn blob(&self, digest: &RemoteDigest) -> String {
        format!("{}blobs/{}", self.prefix(), self.tail(digest))
    }

    /// `{instance}/uploads/{uuid}/blobs/[blake3/]{hash}/{size}`.
    fn upload(&self, digest: &RemoteDigest) -> String {
        let id = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        format!("{}uploads/{id}/blobs/{}", self.prefix(), self.tail(digest))
    }

    fn prefix(&self) -> String {
        if self.instance.is_empty() {
            String::new()
        } else {
            format!("{}/", self.instance)
        }
    }

    fn tail(&self, digest: &RemoteDigest) -> String {
        let function = match self.function {
            DigestFunction::Sha256 => "",
            DigestFunction::Blake3 => "blake3/",
        };
        format!("{function}{}/{}", digest.hex(), digest.size)
    }
}

/// A connection to a REAPI v2 server: the remote cache's backend, and what remote execution
/// sends its blobs and actions through.
pub struct GrpcConnection {
    // The runtime only drives this connection's requests; callers block on them, so the store
    // stays a plain synchronous `Store`.
    runtime: tokio::runtime::Runtime,
    channel: Chan,
    instance: String,
    function: DigestFunction,
    layout: Layout,
    batch_limit: u64,
    capabilities: reapi::ServerCapabilities,
}

impl GrpcConnection {
    /// Connects to the `grpc://` or `grpcs://` URL of `config` (`host:port[/instance]`, the
    /// instance also from the path) and negotiates the digest function.
    pub fn open(config: &RemoteConfig) -> Result<GrpcConnection, RemoteError> {
        let (scheme, rest) = crate::remote_config::split_url(&config.url)?;
        match scheme {
            "grpc" | "grpcs" => GrpcConnection::connect(scheme == "grpcs", rest, config),
            _ => Err(RemoteError::BadUrl {
                url: config.display_url(),
                why: "is not a gRPC address; use grpc://HOST:PORT or grpcs://HOST:PORT".to_owned(),
            }),
        }
    }

    /// Connects to `rest` (`host:port[/instance]`) and negotiates the digest function.
    pub(crate) fn connect(
        tls: bool,
        rest: &str,
        config: &RemoteConfig,
    ) -> Result<GrpcConnection, RemoteError> {
        let (authority, instance) = rest.split_once('/').unwrap_or((rest, ""));
        let scheme = if tls { "https" } else { "http" };
        let headers = config
            .headers
            .iter()
            .map(|(name, value)| {
                let bad = || RemoteError::BadHeader { name: name.clone() };
                Ok((
                    AsciiMetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
                        .map_err(|_| bad())?,
                    AsciiMetadataValue::try_from(value.as_str()).map_err(|_| bad())?,
                ))
            })
            .collect::<Result<Vec<_>, RemoteError>>()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fixgate-grpc")
            .enable_all()
            .build()
            .map_err(|e| RemoteError::Transport(format!("cannot start the gRPC runtime: {e}")))?;
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{authority}"))
            .map_err(|e| RemoteError::BadUrl {
                url: config.display_url(),
                why: format!("is not a valid gRPC address ({e})"),
            })?
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout);
        if tls {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().with_webpki_roots())
                .map_err(|e| RemoteError::Transport(format!("TLS set-up: {e}")))?;
        }
        let channel = runtime
            .block_on(endpoint.connect())
            .map_err(|e| RemoteError::Transport(error_chain(&e)))?;
        let channel = InterceptedService::new(channel, Headers(Arc::new(headers)));
        let caps = runtime
            .block_on(CapabilitiesClient::new(channel.clone()).get_capabilities(
                reapi::GetCapabilitiesRequest {
                    instance_name: instance.to_owned(),
                },
            ))
            .map_err(status)?
            .into_inner();
        let cache = caps.cache_capabilities.clone().ok_or_else(|| {
            RemoteError::Protocol("the server has no cache capabilities".to_owned())
        })?;
        let function = DigestFunction::choose(&cache.digest_functions).ok_or_else(|| {
            RemoteError::Protocol(format!(
                "the server offers neither BLAKE3 nor SHA-256 (it offers {:?})",
                cache.digest_functions
            ))
        })?;
        let batch_limit = match u64::try_from(cache.max_batch_total_size_bytes) {
            // Leave room for the request's own fields.
            Ok(n) if n > 0 => BATCH_LIMIT.min(n.saturating_sub(1024)),
            _ => BATCH_LIMIT,
        };
        Ok(GrpcConnection {
            runtime,
            channel,
            instance: instance.to_owned(),
            function,
            layout: Layout {
                instance: instance.to_owned(),
                function,
            },
            batch_limit,
            capabilities: caps,
        })
    }

    /// The channel, for clients of other REAPI services (Execution, the Remote Workers API).
    pub fn channel(&self) -> GrpcChannel {
        self.channel.clone()
    }

    /// Runs one request of such a client to its end.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The instance name every request carries.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The digest function blobs and actions are computed with on this server.
    pub fn function(&self) -> DigestFunction {
        self.function
    }

    /// What the server said it offers, asked once at connection.
    pub fn capabilities(&self) -> &reapi::ServerCapabilities {
        &self.capabilities
    }

    /// Of `digests`, those the server's CAS does not hold.
    pub fn find_missing(&self, digests: &[RemoteDigest]) -> Result<Vec<RemoteDigest>, RemoteError> {
        let mut missing = Vec::new();
        // The empty blob is never missing (REAPI: servers need not store it, clients need not
        // send it); some servers report it all the same.
        let digests: Vec<RemoteDigest> = digests
            .iter()
            .copied()
            .filter(|d| !self.is_empty_blob(d))
            .collect();
        // A request holds 100 bytes or so per digest: stay far under the message limit.
        for chunk in digests.chunks(10_000) {
            let mut client = ContentAddressableStorageClient::new(self.channel.clone());
            let request = reapi::FindMissingBlobsRequest {
                instance_name: self.instance.clone(),
                blob_digests: chunk.iter().map(|d| d.to_proto()).collect(),
                digest_function: self.function.reapi(),
            };
            let response = self
                .runtime
                .block_on(client.find_missing_blobs(request))
                .map_err(status)?
                .into_inner();
            for d in &response.missing_blob_digests {
                missing.push(RemoteDigest::from_proto(d)?);
            }
        }
        Ok(missing)
    }

    /// Whether `d` names the empty blob, which REAPI lets both sides take as present.
    fn is_empty_blob(&self, d: &RemoteDigest) -> bool {
        d.size == 0 && *d == self.function.digest(b"")
    }

    /// Stores every blob: the small ones in batches, the large ones through ByteStream.
    pub fn put_blobs(&self, blobs: &[(RemoteDigest, &[u8])]) -> Result<(), RemoteError> {
        let mut batch: Vec<reapi::batch_update_blobs_request::Request> = Vec::new();
        let mut size = 0u64;
        for (digest, bytes) in blobs {
            if self.is_empty_blob(digest) {
                continue;
            }
            if digest.size > self.batch_limit {
                self.write_stream(digest, bytes)?;
                continue;
            }
            if size + digest.size > self.batch_limit {
                self.update_batch(std::mem::take(&mut batch))?;
                size = 0;
            }
            size += digest.size;
            batch.push(reapi::batch_update_blobs_request::Request {
                digest: Some(digest.to_proto()),
                data: bytes.to_vec(),
                ..Default::default()
            });
        }
        self.update_batch(batch)
    }

    fn update_batch(
        &self,
        requests: Vec<reapi::batch_update_blobs_request::Request>,
    ) -> Result<(), RemoteError> {
        if requests.is_empty() {
            return Ok(());
        }
        let mut client = ContentAddressableStorageClient::new(self.channel.clone());
        let request = reapi::BatchUpdateBlobsRequest {
            instance_name: self.instance.clone(),
            requests,
            digest_function: self.function.reapi(),
        };
        let response = self
            .runtime
            .block_on(client.batch_update_blobs(request))
            .map_err(status)?
            .into_inner();
        match response
            .responses
            .iter()
            .find_map(|r| r.status.as_ref().filter(|s| s.code != 0))
        {
            Some(s) => Err(RemoteError::Status(format!(
                "code {} storing a blob: {}",
                s.code, s.message
            ))),
            None => Ok(()),
        }
    }

    /// The bytes of every digest, verified against it (`None`: the server does not hold it):
    /// the small ones in batches, the large ones through ByteStream.
    pub fn get_blobs(&self, digests: &[RemoteDigest]) -> Result<Fetched, RemoteError> {
        let mut out = Vec::with_capacity(digests.len());
        let mut batch: Vec<RemoteDigest> = Vec::new();
        let mut size = 0u64;
        let flush = |batch: &mut Vec<RemoteDigest>, out: &mut Vec<_>| {
            if !batch.is_empty() {
                out.extend(self.read_batch(std::mem::take(batch))?);
            }
            Ok::<(), RemoteError>(())
        };
        for d in digests {
            if self.is_empty_blob(d) {
                // Never asked for: a server may answer NOT_FOUND for it (BuildGrid does).
                out.push((*d, Some(Vec::new())));
                continue;
            }
            if d.size > self.batch_limit {
                out.push((*d, self.read_stream(d)?));
                continue;
            }
            if size + d.size > self.batch_limit {
                flush(&mut batch, &mut out)?;
                size = 0;
            }
            size += d.size;
            batch.push(*d);
        }
        flush(&mut batch, &mut out)?;
        for (d, bytes) in &out {
            if let Some(b) = bytes {
                if !d.matches(self.function, b) {
                    return Err(RemoteError::Protocol(format!(
                        "blob {}/{} does not have the bytes its digest names",
                        d.hex(),
                        d.size
                    )));
                }
            }
        }
        Ok(out)
    }

    fn read_batch(&self, digests: Vec<RemoteDigest>) -> Result<Fetched, RemoteError> {
        let mut client = ContentAddressableStorageClient::new(self.channel.clone());
        let request = reapi::BatchReadBlobsRequest {
            instance_name: self.instance.clone(),
            digests: digests.iter().map(|d| d.to_proto()).collect(),
            digest_function: self.function.reapi(),
            ..Default::default()
        };
        let response = self
            .runtime
            .block_on(client.batch_read_blobs(request))
            .map_err(status)?
            .into_inner();
        let mut by_digest = std::collections::HashMap::new();
        for r in response.responses {
            let Some(d) = r.digest.as_ref() else { continue };
            let d = RemoteDigest::from_proto(d)?;
            match r.status {
                Some(s) if s.code == tonic::Code::NotFound as i32 => {}
                Some(s) if s.code != 0 => {
                    return Err(RemoteError::Status(format!(
                        "code {} reading a blob: {}",
                        s.code, s.message
                    )))
                }
                _ => {
                    by_digest.insert(d, r.data);
                }
            }
        }
        Ok(digests
            .into_iter()
            .map(|d| {
                let bytes = by_digest.get(&d).cloned();
                (d, bytes)
            })
            .collect())
    }

    fn read_stream(&self, digest: &RemoteDigest) -> Result<Option<Vec<u8>>, RemoteError> {
        let mut client =
            bytestream::byte_stream_client::ByteStreamClient::new(self.channel.clone());
        let request = bytestream::ReadRequest {
            resource_name: self.layout.blob(digest),
            read_offset: 0,
            read_limit: 0,
        };
        self.runtime.block_on(async {
            let mut stream = match client.read(request).await {
                Ok(r) => r.into_inner(),
                Err(s) if s.code() == tonic::Code::NotFound => return Ok(None),
                Err(s) => return Err(status(s)),
            };
            let mut out = Vec::with_capacity(usize::try_from(digest.size).unwrap_or(0));
            loop {
                match stream.message().await {
                    Ok(Some(chunk)) => out.extend_from_slice(&chunk.data),
                    Ok(None) => return Ok(Some(out)),
                    Err(s) if s.code() == tonic::Code::NotFound => return Ok(None),
                    Err(s) => return Err(status(s)),
                }
            }
        })
    }

    fn write_stream(&self, digest: &RemoteDigest, bytes: &[u8]) -> Result<(), RemoteError> {
        let mut client =
            bytestream::byte_stream_client::ByteStreamClient::new(self.channel.clone());
        let resource_name = self.layout.upload(digest);
        let chunk = usize::try_from(BATCH_LIMIT).unwrap_or(1 << 20);
        let total = bytes.chunks(chunk).count();
        let requests: Vec<bytestream::WriteRequest> = bytes
            .chunks(chunk)
            .enumerate()
            .map(|(i, data)| bytestream::WriteRequest {
                // Only the first request must name the resource.
                resource_name: if i == 0 {
                    resource_name.clone()
                } else {
                    String::new()
                },
                write_offset: i64::try_from(i * chunk).unwrap_or(i64::MAX),
                finish_write: i + 1 == total,
                data: data.to_vec(),
            })
            .collect();
        self.runtime
            .block_on(client.write(tokio_stream::iter(requests)))
            .map_err(status)?;
        Ok(())
    }
}

fn status(s: tonic::Status) -> RemoteError {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            RemoteError::Transport(format!("{:?}: {}", s.code(), s.message()))
        }
        tonic::Code::ResourceExhausted => RemoteError::Busy(s.message().to_owned()),
        code => RemoteError::Status(format!("{code:?}: {}", s.message())),
    }
}

/// The error and its sources, since tonic's transport error alone says only "transport error".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

impl Backend for GrpcConnection {
    fn digest_function(&self) -> DigestFunction {
        self.function
    }

    fn get_action_result(
        &self,
        action: &RemoteDigest,
    ) -> Result<Option<reapi::ActionResult>, RemoteError> {
        let mut client = ActionCacheClient::new(self.channel.clone());
        let request = reapi::GetActionResultRequest {
            instance_name: self.instance.clone(),
            action_digest: Some(action.to_proto()),
            digest_function: self.function.reapi(),
            ..Default::default()
        };
        match self.runtime.block_on(client.get_action_result(request)) {
            Ok(r) => Ok(Some(r.into_inner())),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(status(s)),
        }
    }

    fn put_action_result(
        &self,
        action: &RemoteDigest,
        result: &reapi::ActionResult,
    ) -> Result<(), RemoteError> {
        let mut client = ActionCacheClient::new(self.channel.clone());
        let request = reapi::UpdateActionResultRequest {
            instance_name: self.instance.clone(),
            action_digest: Some(action.to_proto()),
            action_result: Some(result.clone()),
            digest_function: self.function.reapi(),
            ..Default::default()
        };
        self.runtime
            .block_on(client.update_action_result(request))
            .map_err(status)?;
        Ok(())
    }

    fn get_blob(&self, digest: &RemoteDigest) -> Result<Option<Vec<u8>>, RemoteError> {
        // Unverified: the layered store checks what it gets, and says so when it differs.
        if digest.size > self.batch_limit {
            return self.read_stream(digest);
        }
        Ok(self
            .read_batch(vec![*digest])?
            .pop()
            .and_then(|(_, bytes)| bytes))
    }

    fn put_blob(&self, digest: &RemoteDigest, bytes: &[u8]) -> Result<(), RemoteError> {
        self.put_blobs(&[(*digest, bytes)])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn upload_resources_follow_the_bytestream_layout() {
        let d = crate::wire::DigestFunction::Sha256.digest(b"x");
        let layout = |instance: &str, function| {
            let l = super::Layout {
                instance: instance.to_owned(),
                function,
            };
            (l.blob(&d), l.upload(&d))
        };
        let (read, write) = layout("", crate::wire::DigestFunction::Sha256);
        assert_eq!(read, format!("blobs/{}/1", d.hex()));
        assert!(write.starts_with("uploads/"));
        assert!(write.ends_with(&format!("/blobs/{}/1", d.hex())));
        let (read, write) = layout("main", crate::wire::DigestFunction::Blake3);
        assert_eq!(read, format!("main/blobs/blake3/{}/1", d.hex()));
        assert!(write.starts_with("main/uploads/"));
        assert!(write.ends_with(&format!("/blobs/blake3/{}/1", d.hex())));
    }
}
