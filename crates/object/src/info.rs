//! What the admin API's `info` call reports: the deployment, its nodes (and whether each answers
//! now), its sets and their drives (online, space), and the internode traffic figures. Gathered
//! on demand by [`crate::ObjectLayer::info`]; nothing here is cached. A cluster node sees its
//! peers through [`ClusterView`], which the node's wiring implements.

use std::sync::Arc;
use std::time::Duration;

use quarry_disk::Drive;
use uuid::Uuid;

use crate::api::{ClusterInfo, ClusterView, DataPlaneInfo, DriveInfo, NodeInfo, SetInfo};
use crate::set::ErasureSet;

/// How long one node or drive may take to answer an info call before it counts as offline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

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
