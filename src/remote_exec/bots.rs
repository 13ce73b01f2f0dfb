//! The Remote Workers API (`google.devtools.remoteworkers.v1test2`), the part a bot uses:
//! `CreateBotSession` and `UpdateBotSession`. No crate ships these messages, so they are written
//! here with prost, field numbers as in BuildGrid's `bots.proto` and `worker.proto`.

use bazel_remote_apis::google::protobuf::{Any, Timestamp};
use bazel_remote_apis::google::rpc::Status;
use fixgate_cache::GrpcChannel;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct BotSession {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) bot_id: String,
    #[prost(enumeration = "BotStatus", tag = "3")]
    pub(crate) status: i32,
    #[prost(message, optional, tag = "4")]
    pub(crate) worker: Option<Worker>,
    #[prost(message, repeated, tag = "5")]
    pub(crate) leases: Vec<Lease>,
    #[prost(message, optional, tag = "6")]
    pub(crate) expire_time: Option<Timestamp>,
    #[prost(string, tag = "7")]
    pub(crate) version: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(crate) enum BotStatus {
    Unspecified = 0,
    Ok = 1,
    Unhealthy = 2,
    HostRebooting = 3,
    BotTerminating = 4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub(crate) enum LeaseState {
    Unspecified = 0,
    Pending = 1,
    Active = 2,
    Completed = 4,
    Cancelled = 5,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Lease {
    #[prost(string, tag = "7")]
    pub(crate) id: String,
    /// The work: an `Action`, or the `Digest` of one.
    #[prost(message, optional, tag = "8")]
    pub(crate) payload: Option<Any>,
    /// The outcome: an `ActionResult`.
    #[prost(message, optional, tag = "9")]
    pub(crate) result: Option<Any>,
    #[prost(enumeration = "LeaseState", tag = "2")]
    pub(crate) state: i32,
    #[prost(message, optional, tag = "3")]
    pub(crate) status: Option<Status>,
    #[prost(message, optional, tag = "4")]
    pub(crate) requirements: Option<Worker>,
    #[prost(message, optional, tag = "5")]
    pub(crate) expire_time: Option<Timestamp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Worker {
    #[prost(message, repeated, tag = "1")]
    pub(crate) devices: Vec<Device>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) properties: Vec<Property>,
    #[prost(message, repeated, tag = "3")]
    pub(crate) configs: Vec<Property>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Device {
    #[prost(string, tag = "1")]
    pub(crate) handle: String,
    #[prost(message, repeated, tag = "2")]
    pub(crate) properties: Vec<Property>,
}

/// `Worker.Property`, `Worker.Config` and `Device.Property`: all a key and a value.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Property {
    #[prost(string, tag = "1")]
    pub(crate) key: String,
    #[prost(string, tag = "2")]
    pub(crate) value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CreateBotSessionRequest {
    #[prost(string, tag = "1")]
    pub(crate) parent: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) bot_session: Option<BotSession>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct UpdateBotSessionRequest {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) bot_session: Option<BotSession>,
}

/// The Bots service's two calls a bot makes.
pub(crate) struct BotsClient {
    inner: tonic::client::Grpc<GrpcChannel>,
}

impl BotsClient {
    pub(crate) fn new(channel: GrpcChannel) -> BotsClient {
        BotsClient {
            inner: tonic::client::Grpc::new(channel),
        }
    }

    async fn unary<Q, R>(
        &mut self,
        method: &'static str,
        request: tonic::Request<Q>,
    ) -> Result<R, tonic::Status>
    where
        Q: prost::Message + Send + 'static,
        R: prost::Message + Default + Send + 'static,
    {
        self.inner
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("the Bots service: {e}")))?;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
        let codec = tonic_prost::ProstCodec::<Q, R>::default();
        Ok(self.inner.unary(request, path, codec).await?.into_inner())
    }

    pub(crate) async fn create_bot_session(
        &mut self,
        request: tonic::Request<CreateBotSessionRequest>,
    ) -> Result<BotSession, tonic::Status> {
        self.unary(
            "/google.devtools.remoteworkers.v1test2.Bots/CreateBotSession",
            request,
        )
        .await
    }

    pub(crate) async fn update_bot_session(
        &mut self,
        request: tonic::Request<UpdateBotSessionRequest>,
    ) -> Result<BotSession, tonic::Status> {
        self.unary(
            "/google.devtools.remoteworkers.v1test2.Bots/UpdateBotSession",
            request,
        )
        .await
    }
}

/// The type URL of a message packed in an `Any`.
pub(crate) fn type_url(full_name: &str) -> String {
    format!("type.googleapis.com/{full_name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_lease_uses_buildgrids_field_numbers() {
        // BuildGrid's bots.proto: Lease.id is field 7, state 2 (an enum), payload 8.
        let lease = Lease {
            id: "j".into(),
            state: LeaseState::Completed as i32,
            ..Default::default()
        };
        assert_eq!(lease.encode_to_vec(), [0x10, 0x04, 0x3a, 0x01, b'j']);
    }
}
