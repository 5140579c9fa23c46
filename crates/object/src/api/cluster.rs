//! The types of the `info` call of [`crate::ObjectLayer`], and [`ClusterView`], how a cluster node
//! lets the object layer see its peers.

use std::time::Duration;

use async_trait::async_trait;
use quarry_buf::{BufPoolStats, DataPlaneStats, PeerSnapshot};
use uuid::Uuid;

use crate::topology::Topology;

/// The cluster this server is a node of, as the object layer sees it: the topology, which node
/// it is, whether a peer answers, and what the internode paths moved. The node's wiring
/// (`quarry-node`) implements it over the control RPC and the data plane; the object layer never
/// sees either.
#[async_trait]
pub trait ClusterView: Send + Sync + std::fmt::Debug {
    fn topology(&self) -> &Topology;
    /// This node's index in `topology().nodes`.
    fn local_node(&self) -> usize;
    /// Round trip of a ping to `node` (`host:port`), or why it did not answer.
    async fn ping(&self, node: &str) -> std::result::Result<Duration, String>;
    /// Counters of this node's control-RPC client.
    fn rpc_info(&self) -> RpcInfo;
    /// What this node's data plane has moved, now.
    fn data_plane(&self) -> DataPlaneSnapshot;
    /// Drops the data connections to `peer` (every peer with `None`), as a failure would:
    /// transfers in flight on them fail, the next transfer connects anew. Returns how many.
    fn reset_data_plane(&self, peer: Option<&str>) -> usize;
}

/// What a node's data plane reports (see [`ClusterView::data_plane`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DataPlaneSnapshot {
    /// `tcp` or `verbs`.
    pub backend: &'static str,
    pub stats: DataPlaneStats,
    /// Per backend and peer (of every backend this one uses, e.g. verbs and its TCP fallback).
    pub peers: Vec<PeerSnapshot>,
    /// What the node's holder side moved for its peers (verbs only).
    pub holder: Option<DataPlaneStats>,
    /// The buffer pools of the node's data path, by name (`data`; `holder` with verbs).
    pub pools: Vec<(&'static str, BufPoolStats)>,
}

/// The deployment as one node sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterInfo {
    pub deployment_id: Uuid,
    /// `host:port` of the node that answered; `None` for a single-node server.
    pub this_node: Option<String>,
    /// Every node of the cluster, in topology order; empty for a single-node server.
    pub nodes: Vec<NodeInfo>,
    pub sets: Vec<SetInfo>,
    /// Internode data-plane counters, one entry per backend (empty on a single node).
    pub data_planes: Vec<DataPlaneInfo>,
    /// Counters of this node's control-RPC client (`None` on a single node).
    pub rpc: Option<RpcInfo>,
}

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// `host:port`.
    pub address: String,
    /// Whether this is the node that answered.
    pub local: bool,
    /// Whether it answered a ping just now (the local node always does).
    pub online: bool,
    /// Round trip of the ping, in microseconds.
    pub rtt_us: Option<u64>,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// One erasure set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetInfo {
    pub index: usize,
    pub data: usize,
    pub parity: usize,
    /// Drives that must answer for a read, and for a write.
    pub read_quorum: usize,
    pub write_quorum: usize,
    /// In set position order.
    pub drives: Vec<DriveInfo>,
}

/// One drive, as its `disk_info` answered just now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveInfo {
    pub endpoint: String,
    /// The node that holds it (`host:port`); `None` on a single-node server.
    pub node: Option<String>,
    /// Position in its set.
    pub position: usize,
    pub online: bool,
    /// The drive id of its format, when it answered.
    pub id: Option<Uuid>,
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// Counters of one data-plane backend of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPlaneInfo {
    /// `tcp` or `verbs`.
    pub backend: String,
    pub stats: DataPlaneStats,
}

/// Counters of this node's control-RPC client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpcInfo {
    pub calls: u64,
    pub timeouts: u64,
    pub connects: u64,
    pub connect_failures: u64,
    pub fast_failures: u64,
}
