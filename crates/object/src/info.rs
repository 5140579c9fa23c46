//! What the admin API's `info` call reports: the deployment, its nodes (and whether each answers
//! now), its sets and their drives (online, space), and the internode traffic figures. Gathered
//! on demand by [`crate::ObjectLayer::info`]; nothing here is cached. A cluster node sees its
//! peers through [`ClusterView`], which the node's wiring implements.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use quarry_buf::{BufPoolStats, DataPlaneStats, PeerSnapshot};
use quarry_disk::Drive;
use uuid::Uuid;

use crate::set::ErasureSet;
use crate::topology::Topology;

/// How long one node or drive may take to answer an info call before it counts as offline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

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

/// Asks every drive of every set (and, in a cluster, every peer) at once.
pub(crate) async fn gather(
    sets: &[Arc<ErasureSet>],
    deployment_id: Uuid,
    cluster: Option<&dyn ClusterView>,
) -> ClusterInfo {
    let drives = futures::future::join_all(sets.iter().map(|set| async move {
        futures::future::join_all(set.drives.iter().map(|d| drive_info(d.as_ref()))).await
    }));
    let nodes = async {
        let Some(c) = cluster else { return Vec::new() };
        futures::future::join_all(
            c.topology()
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| node_info(c, i, n)),
        )
        .await
    };
    let (drives, nodes) = futures::join!(drives, nodes);

    let sets = sets
        .iter()
        .zip(drives)
        .enumerate()
        .map(|(s, (set, answers))| SetInfo {
            index: s,
            data: set.data(),
            parity: set.parity(),
            read_quorum: set.set_read_quorum(),
            write_quorum: set.set_write_quorum(),
            drives: answers
                .into_iter()
                .enumerate()
                .map(|(p, mut d)| {
                    d.position = p;
                    d.node = cluster.and_then(|c| {
                        let t = c.topology();
                        let drive = *t.sets.get(s)?.get(p)?;
                        let node = t.drives.get(drive)?.node;
                        t.nodes.get(node).cloned()
                    });
                    d
                })
                .collect(),
        })
        .collect();

    let (data_planes, rpc) = match cluster {
        Some(c) => {
            let plane = c.data_plane();
            (
                vec![DataPlaneInfo {
                    backend: plane.backend.to_owned(),
                    stats: plane.stats,
                }],
                Some(c.rpc_info()),
            )
        }
        None => (Vec::new(), None),
    };
    ClusterInfo {
        deployment_id,
        this_node: cluster.and_then(|c| c.topology().nodes.get(c.local_node()).cloned()),
        nodes,
        sets,
        data_planes,
        rpc,
    }
}

async fn drive_info(d: &dyn Drive) -> DriveInfo {
    let mut info = DriveInfo {
        endpoint: d.endpoint().to_owned(),
        node: None,
        position: 0,
        online: false,
        id: None,
        total_bytes: 0,
        free_bytes: 0,
        error: None,
    };
    match tokio::time::timeout(PROBE_TIMEOUT, d.disk_info()).await {
        Ok(Ok(di)) => {
            info.online = true;
            info.id = di.id;
            info.total_bytes = di.total;
            info.free_bytes = di.free;
        }
        Ok(Err(e)) => info.error = Some(e.to_string()),
        Err(_) => info.error = Some(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
    info
}

async fn node_info(c: &dyn ClusterView, index: usize, address: &str) -> NodeInfo {
    let mut info = NodeInfo {
        address: address.to_owned(),
        local: index == c.local_node(),
        online: false,
        rtt_us: None,
        error: None,
    };
    if info.local {
        info.online = true;
        return info;
    }
    match tokio::time::timeout(PROBE_TIMEOUT, c.ping(address)).await {
        Ok(Ok(rtt)) => {
            info.online = true;
            info.rtt_us = Some(u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX));
        }
        Ok(Err(e)) => info.error = Some(e),
        Err(_) => info.error = Some(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
    info
}
