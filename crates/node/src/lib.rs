//! `quarry-node`: one node of a cluster, wired together.
//!
//! What it is for: the object layer (`quarry-object`) sees drives only as `Drive`, locks only as
//! `Locker` and its cluster only as `ClusterView`; the internode plumbing (`quarry-net`) knows
//! drives, RPC and data planes but nothing of objects. This crate is where the two meet:
//! - [`cluster`]: the start-up that finds the peers, formats a fresh deployment once, checks that
//!   everyone agrees on it, and opens the erasure sets over local drives and `RemoteDrive`s
//!   ([`open_cluster`]); and [`NodeService`], what the node answers its peers (its drives, its
//!   lock table, its identity);
//! - [`dsync`]: per-object write locks granted by a quorum of the set's nodes ([`DistLocker`], a
//!   `Locker`) over the control RPC, and the lock table that grants them ([`LockServer`]);
//! - [`view`]: the object layer's `ClusterView` over the node's RPC client and data plane.
//!
//! What it is not: no S3, no sockets of its own (the binary binds and sniffs the port), no verbs.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod dsync;
pub mod view;

pub use cluster::{cluster_id, open_cluster, ClusterSpec, NodeService};
pub use dsync::{DistLocker, DistLockerConfig, LockServer};
pub use view::NodeView;
