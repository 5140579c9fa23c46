//! A node of a cluster: the service it answers its peers with ([`NodeService`]: its drives, its
//! lock table, its identity), and the start-up that finds the peers, formats a fresh deployment
//! once, checks everyone agrees on it, and opens the erasure sets over local and remote drives
//! ([`open_cluster`]).
//!
//! Formatting without a race: only the first node of the topology formats a fresh deployment,
//! and only once it can reach every drive and finds none formatted. Every other node waits until
//! the formats appear. A drive found unformatted in a formatted deployment (a replaced drive) is
//! formatted into its position by the node that owns it, marked healing
//! (`quarry_object::drive_heal`) and healed in full in the background by that node.
//!
//! Agreement on the layout: a node's RPC identity carries a cluster id derived from the layout
//! fingerprint (the expanded drive list and set size), so a node started with another layout
//! fails every handshake with its peers; when most of its peers refuse it so, it stops with a
//! clear message. Each drive's `format.json` then names the deployment and the drive's
//! position, which must match the topology.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_disk::{Drive, DriveError, FormatV1, LocalDrive};
use quarry_net::auth::{AuthError, RejectReason};
use quarry_net::codec::{self, CodecError};
use quarry_net::methods::Service;
use quarry_net::{DriveServer, Handler, Region, RemoteDrive, RpcClient, RpcError};
use tracing::{info, warn};
use uuid::Uuid;

use quarry_object::topology::Topology;
use quarry_object::{ErasureServer, Error, Locker, ObjectConfig, Result};

use crate::dsync::{DistLocker, DistLockerConfig, LockServer};
use crate::view::NodeView;

/// `NODE_INFO`: answers the node's index and layout fingerprint (see `quarry_net::methods`).
pub use quarry_net::methods::NODE_INFO as METHOD_NODE_INFO;
/// Version of the node-info answer (2: the one internode codec).
const NODE_INFO_VERSION: u8 = 2;

/// Who a node is, as it answers `NODE_INFO`: `version | node index (u16) | layout fingerprint
/// (32 bytes)`, in the internode codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's index in the topology's node list.
    pub node: u16,
    /// [`Topology::fingerprint`] of the layout it runs with.
    pub fingerprint: [u8; 32],
}
quarry_net::codec_struct!(NodeInfo { node, fingerprint });

/// The bytes of a node-info answer.
pub fn encode_node_info(info: &NodeInfo) -> Bytes {
    codec::versioned(NODE_INFO_VERSION, info)
}

/// Decodes a node-info answer.
pub fn decode_node_info(b: &[u8]) -> std::result::Result<NodeInfo, CodecError> {
    codec::from_versioned("node info", NODE_INFO_VERSION, b)
}

/// The cluster id a node's RPC identity carries: derived from the layout fingerprint, so nodes
/// with different layouts refuse each other's handshakes.
pub fn cluster_id(topology: &Topology) -> Uuid {
    let f = topology.fingerprint();
    let mut b = [0u8; 16];
    b.copy_from_slice(&f[..16]);
    Uuid::from_bytes(b)
}

/// Everything a node answers its peers: drive calls, lock calls and node info.
pub struct NodeService {
    drives: Arc<DriveServer>,
    locks: Arc<LockServer>,
    node: u16,
    fingerprint: [u8; 32],
}

impl NodeService {
    pub fn new(
        drives: Arc<DriveServer>,
        locks: Arc<LockServer>,
        topology: &Topology,
        node: usize,
    ) -> NodeService {
        NodeService {
            drives,
            locks,
            node: node as u16,
            fingerprint: topology.fingerprint(),
        }
    }
}

impl Handler for NodeService {
    async fn handle(&self, method: u16, payload: Bytes) -> std::result::Result<Bytes, RpcError> {
        match Service::of(method) {
            // The verbs data plane's requests are served next to the drives they read.
            Some(Service::Drive | Service::Verbs) => self.drives.handle(method, payload).await,
            Some(Service::Lock) => self.locks.handle(method, payload).await,
            Some(Service::NodeInfo) => Ok(encode_node_info(&NodeInfo {
                node: self.node,
                fingerprint: self.fingerprint,
            })),
            None => Err(RpcError::unknown_method(method)),
        }
    }

    async fn handle_region(
        &self,
        method: u16,
        payload: Bytes,
    ) -> std::result::Result<Option<Region>, RpcError> {
        match Service::of(method) {
            Some(Service::Drive) => self.drives.handle_region(method, payload).await,
            _ => Ok(None),
        }
    }
}

/// How a node joins its cluster.
pub struct ClusterSpec {
    pub topology: Topology,
    /// This node's index in `topology.nodes`.
    pub local_node: usize,
    /// This node's drives, opened, in the order of `topology.drives_of(local_node)`.
    pub local_drives: Vec<LocalDrive>,
    /// The RPC client of this node (its identity carries [`cluster_id`]).
    pub rpc: RpcClient,
    pub locks: DistLockerConfig,
}

/// Whether a failed call means the peer refused us: another layout (cluster id) or secret.
fn refused_us(e: &RpcError) -> bool {
    matches!(
        e,
        RpcError::Handshake {
            source: AuthError::DeploymentMismatch { .. }
                | AuthError::BadProof
                | AuthError::Rejected(RejectReason::DeploymentMismatch | RejectReason::BadProof),
            ..
        }
    )
}

/// Whether a failed call means the peer speaks another internode protocol version (either side
/// refused the handshake for it).
fn other_version(e: &RpcError) -> bool {
    matches!(
        e,
        RpcError::Handshake {
            source: AuthError::UnsupportedVersion { .. }
                | AuthError::Rejected(RejectReason::UnsupportedVersion),
            ..
        }
    )
}

/// Asks every peer who it is. Fails when most peers refuse this node, or a peer answers with
/// another layout fingerprint (a peer of another build); returns which peers answered.
async fn check_peers(t: &Topology, me: usize, rpc: &RpcClient) -> Result<Vec<bool>> {
    let peers: Vec<usize> = (0..t.nodes.len()).filter(|&n| n != me).collect();
    let answers = futures::future::join_all(
        peers
            .iter()
            .map(|&n| rpc.call(&t.nodes[n], METHOD_NODE_INFO, Bytes::new())),
    )
    .await;
    let mut up = vec![false; t.nodes.len()];
    up[me] = true;
    let mut refusing = Vec::new();
    let mut other_versions = Vec::new();
    for (&n, a) in peers.iter().zip(answers) {
        match a {
            Ok(b) => {
                let NodeInfo {
                    node: index,
                    fingerprint: fp,
                } = decode_node_info(&b).map_err(|e| {
                    Error::Internal(format!("node {} answered oddly: {e}", t.nodes[n]))
                })?;
                if fp != t.fingerprint() || index as usize != n {
                    return Err(Error::Internal(format!(
                        "node {} runs with another layout (it is node {index} of its list): start every node with the same drive arguments and --set-size",
                        t.nodes[n]
                    )));
                }
                up[n] = true;
            }
            Err(e) if other_version(&e) => {
                warn!(peer = %t.nodes[n], error = %e, "peer speaks another internode protocol version");
                other_versions.push(n);
            }
            Err(e) if refused_us(&e) => {
                warn!(peer = %t.nodes[n], error = %e, "peer refuses this node");
                refusing.push(n);
            }
            Err(_) => {}
        }
    }
    let names = |nodes: &[usize]| {
        nodes
            .iter()
            .map(|&n| t.nodes[n].as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !peers.is_empty() && other_versions.len() * 2 > peers.len() {
        return Err(Error::Internal(format!(
            "the other nodes ({}) speak another internode protocol version than this node's {}:              run the same Quarry release on every node (upgrade them together)",
            names(&other_versions),
            quarry_net::auth::HS_VERSION
        )));
    }
    if !peers.is_empty() && refusing.len() * 2 > peers.len() {
        return Err(Error::Internal(format!(
            "the other nodes ({}) refuse this node: it was started with another layout \
             (drive list or set size; ours has fingerprint {}) or another cluster secret. \
             Start every node with the same drive arguments, --set-size and credentials",
            refusing
                .iter()
                .map(|&n| t.nodes[n].as_str())
                .collect::<Vec<_>>()
                .join(", "),
            t.fingerprint_hex()
        )));
    }
    Ok(up)
}

/// Joins the cluster: waits for the peers, formats a fresh deployment (first node only), checks
/// every drive's format against the topology, and opens the sets. Waits as long as it takes for
/// enough drives, logging what it waits for; fails at once on a layout or deployment conflict.
pub async fn open_cluster(spec: ClusterSpec, cfg: ObjectConfig) -> Result<Arc<ErasureServer>> {
    let t = &spec.topology;
    let mine = t.drives_of(spec.local_node);
    if mine.len() != spec.local_drives.len() {
        return Err(Error::Internal(format!(
            "node {} has {} drives in the topology but {} were opened",
            t.nodes[spec.local_node],
            mine.len(),
            spec.local_drives.len()
        )));
    }
    let mut local: Vec<Option<LocalDrive>> = (0..t.drives.len()).map(|_| None).collect();
    for (d, ld) in mine.iter().zip(spec.local_drives) {
        local[*d] = Some(ld);
    }
    let drives: Vec<Arc<dyn Drive>> = t
        .drives
        .iter()
        .enumerate()
        .map(|(i, d)| match local[i].take() {
            Some(ld) => Arc::new(ld) as Arc<dyn Drive>,
            None => Arc::new(RemoteDrive::new(
                spec.rpc.clone(),
                t.nodes[d.node].clone(),
                d.index_on_node as u16,
                d.url.clone(),
            )) as Arc<dyn Drive>,
        })
        .collect();

    let started = Instant::now();
    let mut last_log = Instant::now() - Duration::from_secs(60);
    let deployment_id = loop {
        let up = check_peers(t, spec.local_node, &spec.rpc).await?;
        match settle_formats(t, spec.local_node, &drives, &up).await? {
            Settled::Ready(id) => break id,
            Settled::Waiting(why) => {
                if last_log.elapsed() >= Duration::from_secs(5) {
                    info!(
                        waited_s = started.elapsed().as_secs(),
                        "waiting for the cluster: {why}"
                    );
                    last_log = Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };

    let rpc = Arc::new(spec.rpc.clone());
    let mut sets = Vec::with_capacity(t.sets.len());
    for (s, set) in t.sets.iter().enumerate() {
        let set_drives: Vec<Arc<dyn Drive>> = set.iter().map(|&d| drives[d].clone()).collect();
        let nodes: Vec<String> = t
            .nodes_of_set(s)
            .into_iter()
            .map(|n| t.nodes[n].clone())
            .collect();
        let locker = DistLocker::new(nodes, rpc.clone(), spec.locks.clone())
            .map_err(|e| Error::Internal(format!("lock settings: {e}")))?;
        sets.push((set_drives, Some(Arc::new(locker) as Arc<dyn Locker>)));
    }
    info!(
        %deployment_id,
        nodes = t.nodes.len(),
        sets = t.sets.len(),
        set_size = t.set_size(),
        node = %t.nodes[spec.local_node],
        "joined the cluster"
    );
    // Stripes and chunks live in the data plane's pool (registered with the device over verbs).
    let buffers = spec.rpc.data_plane().pool().clone();
    let server = ErasureServer::open_sets_with_buffers(deployment_id, sets, cfg, buffers)?;
    server.set_cluster_view(Arc::new(NodeView::new(
        spec.topology.clone(),
        spec.local_node,
        spec.rpc.clone(),
    )));
    let local: Vec<(usize, usize, std::path::PathBuf)> = t
        .drives_of(spec.local_node)
        .into_iter()
        .map(|d| {
            let (s, p) = t.position_of(d);
            (s, p, t.drives[d].path.clone())
        })
        .collect();
    server.resume_drive_heals(&local);
    Ok(server)
}

enum Settled {
    Ready(Uuid),
    Waiting(String),
}

/// One round of start-up: reads every drive's format and decides.
async fn settle_formats(
    t: &Topology,
    me: usize,
    drives: &[Arc<dyn Drive>],
    up: &[bool],
) -> Result<Settled> {
    // Drives of nodes that did not answer are not asked (each would wait for its timeout).
    let formats: Vec<std::result::Result<Option<FormatV1>, DriveError>> =
        futures::future::join_all(drives.iter().enumerate().map(|(i, d)| {
            let reachable = up[t.drives[i].node];
            async move {
                if reachable {
                    d.read_format().await
                } else {
                    Err(DriveError::Unusable(format!(
                        "{} is not reachable",
                        d.endpoint()
                    )))
                }
            }
        }))
        .await;

    let found: Vec<(usize, &FormatV1)> = formats
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.as_ref().ok().and_then(|f| f.as_ref()).map(|f| (i, f)))
        .collect();
    let unreachable = formats.iter().filter(|f| f.is_err()).count();

    if found.is_empty() {
        if unreachable > 0 {
            let first_err = formats
                .iter()
                .enumerate()
                .find_map(|(i, f)| f.as_ref().err().map(|e| (i, e.to_string())))
                .map(|(i, e)| format!("; e.g. {}: {e}", t.drives[i].url))
                .unwrap_or_default();
            return Ok(Settled::Waiting(format!(
                "{unreachable} of {} drives unreachable before the first format{first_err}",
                drives.len()
            )));
        }
        if me != 0 {
            return Ok(Settled::Waiting(format!(
                "the first node ({}) formats the new deployment",
                t.nodes[0]
            )));
        }
        // The first node, every drive reachable and blank: format the deployment.
        let deployment_id = Uuid::new_v4();
        let ids: Vec<Vec<Uuid>> = t
            .sets
            .iter()
            .map(|s| s.iter().map(|_| Uuid::new_v4()).collect())
            .collect();
        for (d, drive) in drives.iter().enumerate() {
            let (s, p) = t.position_of(d);
            let f = FormatV1::new(deployment_id, ids[s][p], ids.clone());
            drive.write_format(&f).await.map_err(|e| {
                Error::Internal(format!("cannot format drive {}: {e}", t.drives[d].url))
            })?;
        }
        info!(%deployment_id, drives = drives.len(), sets = t.sets.len(), "formatted a new deployment");
        return Ok(Settled::Ready(deployment_id));
    }

    // The reference: the deployment and layout most formatted drives agree on.
    let mut groups: Vec<(&FormatV1, usize)> = Vec::new();
    for (_, f) in &found {
        match groups.iter_mut().find(|(g, _)| g.same_deployment(f)) {
            Some(g) => g.1 += 1,
            None => groups.push((f, 1)),
        }
    }
    groups.sort_by_key(|g| std::cmp::Reverse(g.1));
    let reference = groups[0].0.clone();
    let shape: Vec<usize> = reference.sets.iter().map(|s| s.len()).collect();
    let want: Vec<usize> = t.sets.iter().map(|s| s.len()).collect();
    if shape != want {
        return Err(Error::Internal(format!(
            "the drives were formatted as {} set(s) of {} drives, but this node was started with {} set(s) of {}: start it with the deployment's drive arguments and --set-size",
            shape.len(),
            shape.first().copied().unwrap_or(0),
            want.len(),
            want.first().copied().unwrap_or(0)
        )));
    }
    for (d, f) in &found {
        if !f.same_deployment(&reference) {
            return Err(Error::Internal(format!(
                "drive {} belongs to deployment {}, the others to {}: refusing to mix them",
                t.drives[*d].url, f.deployment_id, reference.deployment_id
            )));
        }
        let (s, p) = t.position_of(*d);
        if reference.sets[s][p] != f.drive_id {
            return Err(Error::Internal(format!(
                "drive {} holds the drive of another position (set {s}, position {p} expects id {}, found {}): were drives moved between directories or nodes?",
                t.drives[*d].url, reference.sets[s][p], f.drive_id
            )));
        }
    }
    // This node's blank drives were replaced: format them into their positions.
    for &d in &t.drives_of(me) {
        if matches!(formats[d], Ok(None)) {
            let (s, p) = t.position_of(d);
            let f = FormatV1::new(
                reference.deployment_id,
                reference.sets[s][p],
                reference.sets.clone(),
            );
            // The checkpoint first: a drive is never formatted without it.
            quarry_object::drive_heal::mark_fresh_drive(&t.drives[d].path, s, p)?;
            drives[d].write_format(&f).await.map_err(|e| {
                Error::Internal(format!("cannot format drive {}: {e}", t.drives[d].url))
            })?;
            warn!(drive = %t.drives[d].url, set = s, position = p, "formatted a fresh drive into the deployment; it is healed in the background");
        }
    }
    // Enough formatted drives in every set to read: serve; the rest join as they come back.
    for (s, set) in t.sets.iter().enumerate() {
        let ok = set
            .iter()
            .filter(|&&d| matches!(formats[d], Ok(Some(_))) || t.drives[d].node == me)
            .count();
        let parity = quarry_erasure::default_parity(set.len());
        let data = set.len() - parity;
        if ok < data {
            return Ok(Settled::Waiting(format!(
                "set {s} has {ok} formatted drives reachable, {data} needed"
            )));
        }
    }
    Ok(Settled::Ready(reference.deployment_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_info_round_trips_and_refuses_garbage() {
        let info = NodeInfo {
            node: 0x0102,
            fingerprint: [9; 32],
        };
        let enc = encode_node_info(&info);
        assert_eq!(enc.len(), 35);
        assert_eq!(&enc[..3], &[NODE_INFO_VERSION, 1, 2]);
        assert_eq!(decode_node_info(&enc), Ok(info));
        for cut in 0..enc.len() {
            assert!(
                matches!(
                    decode_node_info(&enc[..cut]),
                    Err(CodecError::Truncated { .. })
                ),
                "{cut}"
            );
        }
        let mut long = enc.to_vec();
        long.push(0);
        assert_eq!(decode_node_info(&long), Err(CodecError::Trailing(1)));
        // An answer of the last version (1) is refused by name.
        let mut old = enc.to_vec();
        old[0] = 1;
        assert_eq!(
            decode_node_info(&old),
            Err(CodecError::UnsupportedVersion {
                what: "node info",
                got: 1,
                supported: NODE_INFO_VERSION
            })
        );
    }

    /// A frame read of a local shard is answered from its file (`sendfile`) through the node's
    /// service, not only through a bare `DriveServer`: a service that does not pass
    /// `handle_region` on answers every frame read from memory.
    #[tokio::test]
    async fn frame_reads_reach_the_drive_server_as_file_answers() {
        use quarry_net::drive_proto::{encode_request, Request};
        let dir = tempfile::tempdir().unwrap();
        let local = LocalDrive::open(dir.path().join("d1")).await.unwrap();
        local.make_volume("b").await.unwrap();
        let dd = Uuid::new_v4();
        let shard = local.root().join("b/k").join(dd.to_string());
        std::fs::create_dir_all(&shard).unwrap();
        std::fs::write(shard.join("part.1"), vec![7u8; 4096]).unwrap();
        let topology =
            Topology::from_args(&["http://n{1...2}:9000/srv/d{1...2}".to_owned()], None).unwrap();
        let service = NodeService::new(
            Arc::new(DriveServer::new(vec![Arc::new(local) as Arc<dyn Drive>])),
            Arc::new(LockServer::new(crate::dsync::DEFAULT_MAX_ENTRIES)),
            &topology,
            0,
        );
        let read = |len| {
            encode_request(
                0,
                &Request::ReadShardData {
                    bucket: "b".into(),
                    key: "k".into(),
                    data_dir: dd,
                    part: 1,
                    offset: 0,
                    len,
                },
            )
        };
        let (method, payload) = read(4096);
        let region = service
            .handle_region(method, payload)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (region.hash.len(), region.offset, region.len),
            (32, 32, 4064)
        );
        // Not a frame (shorter than its hash): left to `handle`, which refuses it.
        let (method, payload) = read(31);
        assert!(service
            .handle_region(method, payload)
            .await
            .unwrap()
            .is_none());
        // Lock calls are never file answers.
        let lock_method = (0..=u16::MAX)
            .find(|m| Service::of(*m) == Some(Service::Lock))
            .unwrap();
        assert!(service
            .handle_region(lock_method, Bytes::new())
            .await
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_peer_of_another_protocol_version_is_told_apart_from_a_refusal() {
        let handshake = |source| RpcError::Handshake {
            peer: "n2".into(),
            source,
        };
        let e = handshake(AuthError::UnsupportedVersion { got: 1 });
        assert!(other_version(&e) && !refused_us(&e));
        let e = handshake(AuthError::Rejected(RejectReason::UnsupportedVersion));
        assert!(other_version(&e) && !refused_us(&e));
        let e = handshake(AuthError::BadProof);
        assert!(!other_version(&e) && refused_us(&e));
    }
}
