//! [`NodeView`]: the object layer's [`ClusterView`] of a cluster node, over the node's control-RPC
//! client (pings, its counters) and the data plane it carries (figures, reset).

use std::time::Duration;

use async_trait::async_trait;
use quarry_net::RpcClient;
use quarry_object::topology::Topology;
use quarry_object::{ClusterView, DataPlaneSnapshot, RpcInfo};

/// A node's view of its cluster: the topology, which node it is, and its RPC client.
#[derive(Clone)]
pub struct NodeView {
    topology: Topology,
    local_node: usize,
    rpc: RpcClient,
}

impl NodeView {
    /// `local_node` is this node's index in `topology.nodes`.
    pub fn new(topology: Topology, local_node: usize, rpc: RpcClient) -> NodeView {
        NodeView {
            topology,
            local_node,
            rpc,
        }
    }
}

impl std::fmt::Debug for NodeView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeView")
            .field("nodes", &self.topology.nodes)
            .field("local_node", &self.local_node)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ClusterView for NodeView {
    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn local_node(&self) -> usize {
        self.local_node
    }

    async fn ping(&self, node: &str) -> Result<Duration, String> {
        self.rpc.ping(node).await.map_err(|e| e.to_string())
    }

    fn rpc_info(&self) -> RpcInfo {
        let s = self.rpc.stats();
        RpcInfo {
            calls: s.calls,
            timeouts: s.timeouts,
            connects: s.connects,
            connect_failures: s.connect_failures,
            fast_failures: s.fast_failures,
        }
    }

    fn data_plane(&self) -> DataPlaneSnapshot {
        let plane = self.rpc.data_plane();
        DataPlaneSnapshot {
            backend: plane.name(),
            stats: plane.stats(),
            peers: plane.peer_stats(),
            holder: plane.holder_stats(),
            pools: plane.pools(),
        }
    }

    fn reset_data_plane(&self, peer: Option<&str>) -> usize {
        self.rpc.data_plane().reset(peer)
    }
}
