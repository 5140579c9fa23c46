//! `quarry-net`: how Quarry nodes talk to each other.
//!
//! What it is for:
//! - [`wire`]: the control plane's frames, as pure encode/decode functions (no IO), versioned and
//!   authenticated per frame with the connection's session key;
//! - [`auth`]: the connection handshake, in which both ends prove they know the cluster secret and
//!   derive the session keys; nothing is served on a connection before it succeeds;
//! - [`rpc`]: the control RPC over TCP, [`RpcClient`] (pooled connections per peer, multiplexed
//!   calls, a timeout on every call, back-off for unreachable peers) and [`RpcServer`] (dispatch to a
//!   [`Handler`], bounded connections and requests);
//! - [`bufpool`]: the [`BufPool`] of aligned buffers carved from a few slabs, shared by the data
//!   plane, the decoder and HTTP bodies (DESIGN.md, "Buffers");
//! - [`data`]: bulk frames over TCP, read straight into and written out of pooled buffers;
//! - [`dataplane`]: the [`DataPlane`] trait through which shard bytes move between nodes, and its
//!   TCP backend [`TcpDataPlane`]; [`verbs_dataplane`] (feature `verbs`, on by default) is the
//!   RDMA backend for GET reads, [`rdma`] the `QUARRY_RDMA` settings and start-up probe;
//! - the `Drive` trait's remote side: [`drive_proto`] (its messages, pure encode/decode),
//!   [`RemoteDrive`] (the trait over [`RpcClient`]) and [`DriveServer`] (the [`Handler`] that serves
//!   a node's own drives to its peers).
//!
//! What it is not: it knows nothing of objects, erasure sets or S3; of drives it knows only the
//! `Drive` trait of `quarry-disk`. The FFI of the verbs backend lives in `crates/verbs`, the only
//! crate with `unsafe`.
//! There is no TLS: frames are authenticated, not encrypted, so internode traffic belongs on a trusted
//! network.
#![forbid(unsafe_code)]

pub mod auth;
mod backoff;
pub mod bufpool;
pub mod data;
pub mod dataplane;
pub mod drive_proto;
pub mod drive_server;
pub mod rdma;
pub mod remote_drive;
pub mod rpc;
#[cfg(feature = "verbs")]
pub mod verbs_dataplane;
pub mod wire;

pub use auth::{ClusterSecret, Identity};
pub use bufpool::{BufPool, BufPoolConfig, BufPoolStats, PooledBuf};
pub use dataplane::{
    DataPlane, DataPlaneError, DataPlaneStats, PeerSnapshot, ShardData, ShardRange, TcpDataPlane,
    TcpDataPlaneConfig, DEFAULT_BUF_SIZE, LATENCY_BUCKETS,
};
pub use drive_server::{DriveServer, DriveServerConfig};
pub use remote_drive::{RemoteDrive, RemoteDriveConfig};
pub use rpc::{Handler, RpcClient, RpcConfig, RpcError, RpcServer};
#[cfg(feature = "verbs")]
pub use verbs_dataplane::{VerbsConfig, VerbsDataPlane, VerbsDevice, VerbsResponder};
