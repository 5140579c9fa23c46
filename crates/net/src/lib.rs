//! `quarry-net`: how Quarry nodes talk to each other.
//!
//! What it is for:
//! - [`codec`]: the one encoding of every internode message ([`codec::Codec`]: one byte order, one
//!   framing of strings, byte strings and lists, one error type);
//! - [`wire`]: the control plane's frames, as pure encode/decode functions (no IO), versioned and
//!   authenticated per frame with the connection's session key;
//! - [`auth`]: the connection handshake, in which both ends prove they know the cluster secret and
//!   derive the session keys; nothing is served on a connection before it succeeds;
//! - [`rpc`]: the control RPC over TCP, [`RpcClient`] (pooled connections per peer, multiplexed
//!   calls, a timeout on every call, back-off for unreachable peers) and [`RpcServer`] (dispatch to a
//!   [`Handler`], bounded connections and requests);
//! - [`data`]: bulk frames over TCP, read straight into and written out of pooled buffers;
//! - [`dataplane`]: the [`DataPlane`] trait through which shard bytes move between nodes, and its
//!   TCP backend [`TcpDataPlane`]; [`verbs_dataplane`] (feature `verbs`, on by default) is the
//!   RDMA backend (GET by the holder's RDMA WRITE, PUT by its RDMA READ), [`rdma`] the
//!   `QUARRY_RDMA` settings and start-up probe. Both move bytes in and out of the pooled buffers
//!   of `quarry-buf`;
//! - the `Drive` trait's remote side: [`drive_proto`] (its messages, pure encode/decode),
//!   [`RemoteDrive`] (the trait over [`RpcClient`]) and [`DriveServer`] (the [`Handler`] that serves
//!   a node's own drives to its peers).
//!
//! What it is not: it knows nothing of objects, erasure sets or S3 (`quarry-node` wires it to the
//! object layer); of drives it knows only the `Drive` trait of `quarry-disk`. The FFI of the verbs backend lives in `crates/verbs`, the only
//! crate with `unsafe`.
//! [`transport`] opens and accepts every internode connection: plain TCP, or (a cluster with
//! `https://` drive URLs) mutual TLS with the cluster's CA, under the same handshake and frames.
//! The verbs data plane is never inside TLS: it needs an isolated RDMA network.
#![forbid(unsafe_code)]

pub mod auth;
mod backoff;
pub mod codec;
pub mod data;
pub mod dataplane;
pub mod drive_proto;
pub mod drive_server;
pub mod methods;
pub mod rdma;
pub mod remote_drive;
pub mod rpc;
pub mod transport;
#[cfg(feature = "verbs")]
pub mod verbs_dataplane;
pub mod wire;

/// Locks `m`, taking the data of a poisoned mutex as it is: no critical section in this crate
/// leaves its data half-changed across a point that can panic.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub use auth::{ClusterSecret, Identity};
pub use dataplane::{
    DataPlane, DataPlaneError, ShardData, ShardRange, TcpDataPlane, TcpDataPlaneConfig,
};
pub use drive_server::{DriveServer, DriveServerConfig};
/// The figures the data planes report (defined on the ground floor, so the object layer and the
/// front end can carry them without this crate).
pub use quarry_buf::{DataPlaneStats, PeerSnapshot, LATENCY_BUCKETS};
pub use remote_drive::{RemoteDrive, RemoteDriveConfig};
pub use rpc::{Handler, Region, RpcClient, RpcConfig, RpcError, RpcServer};
pub use transport::{InternodeStream, InternodeTls};
#[cfg(feature = "verbs")]
pub use verbs_dataplane::{VerbsConfig, VerbsDataPlane, VerbsDevice, VerbsResponder};
