//! fixgate's cache: digests, canonical keys, the action cache and content store, verifying traces.
//!
//! - [`Digest`] and [`KeyWriter`]: what keys are and how they are computed.
//! - [`Store`]: the contract the graph caches through, with three implementations:
//!   [`DiskStore`] (a cache directory shared by processes), [`MemStore`] (tests) and
//!   [`NoStore`] (caching off, or the directory was unusable).
//! - [`LayeredStore`]: a local store in front of a remote cache (the Bazel HTTP cache protocol
//!   or REAPI v2 over gRPC), with verified downloads, opt-in uploads and optional signing.
//! - Verifying traces ([`Store::lookup_trace`], [`Store::record_trace`]): a node whose
//!   dependencies are discovered while it runs is found again by checking its recorded
//!   dependency sets against the files as they are now.
//!
//! - [`Backoff`]: the pauses of every loop that waits something out (the index's lock here, a
//!   busy remote service in the binary).
//!
//! Nothing here prints, exits or reads the environment; problems the cache recovers from are
//! returned as [`Warning`]s.

mod backoff;
mod digest;
mod disk;
mod envelope;
mod grpc;
mod http;
mod index;
mod key;
mod layered;
mod mac;
mod maintenance;
mod mem;
mod remote;
mod remote_config;
mod store;
mod wire;

pub use backoff::Backoff;
pub use digest::{Digest, ParseDigestError};
pub use disk::{DiskStore, MaintenanceError, OpenError, DEFAULT_INDEX_WAIT};
pub use grpc::{GrpcChannel, GrpcConnection, Headers};
pub use key::{KeyWriter, KEY_ENCODING};
pub use layered::{LayeredStore, PushReport, Touched, TransferStats};
pub use mac::MacKey;
pub use maintenance::{AreaStats, GcReport, Stats, VerifyReport};
pub use mem::MemStore;
pub use remote_config::{RemoteConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT};
pub use store::{
    ActionRecord, Dep, NoStore, Origin, Store, TraceEntry, Warning, MAX_TRACE_CANDIDATES,
};
pub use wire::{DigestFunction, RemoteDigest, RemoteError};

/// Schema version of a cache directory and of every record in it. Bump it when a stored format
/// changes; directories of an older schema are cleared on open.
pub const SCHEMA: u32 = 1;
