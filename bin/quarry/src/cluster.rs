//! Cluster mode of `quarry server`: one port for S3 and the internode RPC, the node service, and
//! joining the cluster.
//!
//! A node listens on one address, as MinIO does: an accepted connection whose first bytes are the
//! internode handshake magic goes to the RPC server, any other to the S3 server. Nothing is read
//! to decide: the bytes are peeked, so each server sees the connection from its first byte.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use quarry_disk::{Drive, LocalDrive};
use quarry_net::rdma::{choose_backend, Backend, RdmaMode, RdmaSettings};
use quarry_net::{ClusterSecret, DriveServer, Identity, RpcClient, RpcConfig, RpcServer};
use quarry_node::dsync::{DistLockerConfig, LockServer, DEFAULT_MAX_ENTRIES};
use quarry_node::{cluster_id, open_cluster, ClusterSpec, NodeService};
use quarry_object::topology::Topology;
use quarry_object::{ErasureServer, ObjectConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How long a new connection may stay silent before it is taken for S3 (whose server then
/// applies its own timeouts).
const SNIFF_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections waiting to be taken by either server.
const HANDOFF_QUEUE: usize = 1024;

/// The S3 side of the shared port, as an axum listener.
pub struct HttpIncoming {
    rx: mpsc::Receiver<(TcpStream, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for HttpIncoming {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The acceptor ended: no more connections.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Accepts on `listener` and hands each connection to the RPC or the S3 side by its first bytes.
fn split_port(
    listener: TcpListener,
) -> std::io::Result<(HttpIncoming, mpsc::Receiver<(TcpStream, SocketAddr)>)> {
    let local = listener.local_addr()?;
    let (http_tx, http_rx) = mpsc::channel(HANDOFF_QUEUE);
    let (rpc_tx, rpc_rx) = mpsc::channel(HANDOFF_QUEUE);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (http_tx, rpc_tx) = (http_tx.clone(), rpc_tx.clone());
            tokio::spawn(async move {
                let internode = matches!(
                    tokio::time::timeout(SNIFF_TIMEOUT, starts_with_magic(&stream)).await,
                    Ok(Ok(true))
                );
                let tx = if internode { rpc_tx } else { http_tx };
                let _ = tx.send((stream, peer)).await;
            });
        }
    });
    Ok((HttpIncoming { rx: http_rx, local }, rpc_rx))
}

/// Whether the connection's first bytes are the internode handshake magic (peeked, not read).
async fn starts_with_magic(stream: &TcpStream) -> std::io::Result<bool> {
    let magic = quarry_net::auth::HS_MAGIC;
    let mut buf = [0u8; 4];
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 {
            return Ok(false);
        }
        if buf[..n] != magic[..n] {
            return Ok(false);
        }
        if n == magic.len() {
            return Ok(true);
        }
        // A prefix of the magic so far: wait for more bytes.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The cluster secret: `QUARRY_CLUSTER_SECRET` if set, else derived from the root credentials
/// (which every node must share anyway).
fn cluster_secret(access_key: &str, secret_key: &str) -> anyhow::Result<ClusterSecret> {
    if let Ok(s) = std::env::var("QUARRY_CLUSTER_SECRET") {
        return ClusterSecret::new(s.as_bytes())
            .context("QUARRY_CLUSTER_SECRET is too weak (at least 16 bytes)");
    }
    let mut material = Vec::new();
    material.extend_from_slice(access_key.as_bytes());
    material.push(0);
    material.extend_from_slice(secret_key.as_bytes());
    let key = blake3::derive_key("quarry cluster secret v1", &material);
    Ok(ClusterSecret::new(key)?)
}

/// The data-plane backend for `QUARRY_RDMA` (see [`quarry_net::rdma`]), with one log line that
/// says which and why; `on` without usable verbs is an error.
fn choose_data_plane(rdma: &RdmaSettings, address: &str) -> anyhow::Result<Backend> {
    // The GID to use is the one of the node's own address (several nodes may share a device).
    let addr = address
        .parse::<SocketAddr>()
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_unspecified());
    let mode = rdma.mode;
    let backend = choose_backend(rdma, addr).map_err(|e| {
        anyhow::anyhow!(
            "QUARRY_RDMA=on but RDMA cannot be used: {e} (set QUARRY_RDMA=auto to fall back to TCP, or off)"
        )
    })?;
    match &backend {
        Backend::Tcp { reason } if mode == RdmaMode::Off => {
            tracing::info!("RDMA: off ({reason}); data plane over TCP")
        }
        Backend::Tcp { reason } => tracing::info!("RDMA: {reason}; data plane over TCP"),
        Backend::Verbs(d) => tracing::info!(
            device = %d.device,
            port = d.port,
            gid_index = d.gid_index,
            gid = %d.gid_addr,
            mtu = d.mtu,
            qp_per_peer = rdma.qp_per_peer,
            pool_bytes = rdma.pool_bytes,
            "RDMA: using device {} (mode {mode}); shard reads and writes between nodes go over verbs{}",
            d.device,
            if mode == RdmaMode::Auto { ", TCP for a peer where verbs fails" } else { "" }
        ),
    }
    Ok(backend)
}

/// A started cluster node: its object layer and the S3 side of its port.
pub struct Node {
    pub layer: Arc<ErasureServer>,
    pub http: HttpIncoming,
    pub local: SocketAddr,
    pub node: String,
    /// Kept for the life of the process: dropping it stops the internode service.
    pub _rpc: RpcServer,
}

/// Binds the node's address, starts its internode service and joins the cluster.
pub async fn start(
    topology: Topology,
    address: &str,
    root: (&str, &str),
    cfg: ObjectConfig,
    rdma: &RdmaSettings,
) -> anyhow::Result<Node> {
    let hostname = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string());
    let Some(me) = topology.node_of_address(address, hostname.as_deref()) else {
        bail!(
            "this node listens on {address}, which is none of the cluster's nodes ({}): start each node with --address set to its own HOST:PORT from the drive list",
            topology.nodes.join(", ")
        );
    };
    let node = topology.nodes[me].clone();
    let backend = choose_data_plane(rdma, address)?;
    // Each node scans its share of the sets, not all of them.
    let cfg = ObjectConfig {
        scan_share: Some((me, topology.nodes.len())),
        ..cfg
    };
    let mut local_drives = Vec::new();
    for d in topology.drives_of(me) {
        let path: PathBuf = topology.drives[d].path.clone();
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create drive directory {}", path.display()))?;
        let ld = LocalDrive::open(path.clone())
            .await
            .with_context(|| format!("cannot open drive {}", path.display()))?;
        local_drives.push(ld);
    }

    let identity = Identity {
        deployment_id: cluster_id(&topology),
        node_id: node.clone(),
        secret: cluster_secret(root.0, root.1)?,
    };
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let local = listener.local_addr()?;
    let (http, rpc_rx) = split_port(listener)?;

    let served: Vec<Arc<dyn Drive>> = local_drives
        .iter()
        .map(|d| Arc::new(d.clone()) as Arc<dyn Drive>)
        .collect();
    let rpc = RpcClient::new(identity.clone(), RpcConfig::default());
    let drive_server = verbs::wire(&backend, rdma, &identity, &rpc, DriveServer::new(served))?;
    let service = NodeService::new(
        Arc::new(drive_server),
        Arc::new(LockServer::new(DEFAULT_MAX_ENTRIES)),
        &topology,
        me,
    );
    let rpc_server = RpcServer::serve_incoming(
        rpc_rx,
        local,
        identity.clone(),
        RpcConfig::default(),
        Arc::new(service),
    );
    tracing::info!(
        node = %node,
        nodes = topology.nodes.len(),
        drives = topology.drives.len(),
        set_size = topology.set_size(),
        layout = %topology.fingerprint_hex(),
        data_plane = backend.name(),
        "joining the cluster"
    );
    let spec = ClusterSpec {
        topology,
        local_node: me,
        local_drives,
        rpc,
        locks: DistLockerConfig::default(),
    };
    let layer = open_cluster(spec, cfg)
        .await
        .context("cannot join the cluster")?;
    Ok(Node {
        layer,
        http,
        local,
        node,
        _rpc: rpc_server,
    })
}

/// The verbs data plane of a node: the holder side in its drive server, the requester side as
/// the data plane of its RPC client (so every remote drive reads and writes shards over verbs).
mod verbs {
    use std::sync::Arc;

    use anyhow::Context;
    use quarry_buf::{BufPool, BufPoolConfig, DEFAULT_BUF_SIZE};
    use quarry_net::rdma::{Backend, RdmaMode, RdmaSettings};
    use quarry_net::verbs_dataplane::{holder_access, requester_access, ResponderConfig};
    use quarry_net::{
        DriveServer, Identity, RpcClient, RpcConfig, TcpDataPlane, TcpDataPlaneConfig, VerbsConfig,
        VerbsDataPlane, VerbsDevice, VerbsResponder,
    };

    /// Registers the node's two pools once (the requester's: GET stripes and PUT chunks, shared
    /// with the TCP fallback and the object layer; the holder's: drive reads and fetched
    /// appends), and wires both sides.
    pub fn wire(
        backend: &Backend,
        rdma: &RdmaSettings,
        identity: &Identity,
        rpc: &RpcClient,
        server: DriveServer,
    ) -> anyhow::Result<DriveServer> {
        let Backend::Verbs(d) = backend else {
            return Ok(server);
        };
        let dev = VerbsDevice::open(Some(&d.device), Some(d.gid_addr), rdma.gid_index)
            .context("RDMA: cannot open the device")?;
        let requester_pool = BufPool::registered(
            BufPoolConfig::with_bytes(DEFAULT_BUF_SIZE, rdma.requester_bytes()),
            dev.pd(),
            requester_access(),
        )
        .context("RDMA: cannot register the data pool")?;
        let holder_pool = BufPool::registered(
            BufPoolConfig::with_bytes(DEFAULT_BUF_SIZE, rdma.holder_bytes()),
            dev.pd(),
            holder_access(),
        )
        .context("RDMA: cannot register the holder pool")?;
        tracing::info!(
            registered_bytes =
                requester_pool.stats().registered_bytes + holder_pool.stats().registered_bytes,
            data_buffers = requester_pool.stats().capacity,
            holder_buffers = holder_pool.stats().capacity,
            "RDMA: buffer pools registered"
        );
        let holder = Arc::new(
            VerbsResponder::new(
                dev.clone(),
                holder_pool.clone(),
                ResponderConfig {
                    max_connections: rdma.max_connections,
                    ..ResponderConfig::default()
                },
            )
            .map_err(anyhow::Error::msg)
            .context("RDMA: cannot set up the holder side of the verbs data plane")?,
        );
        let config = RpcConfig::default();
        // Its own control connections (no cycle through the client that holds the plane).
        let control = RpcClient::new(identity.clone(), config.clone());
        let tcp = TcpDataPlane::with_pool(
            identity.clone(),
            TcpDataPlaneConfig::from_rpc(&config),
            requester_pool.clone(),
        );
        let plane = VerbsDataPlane::new(
            dev,
            control,
            Arc::new(tcp),
            requester_pool,
            VerbsConfig {
                fallback: rdma.mode == RdmaMode::Auto,
                qp_per_peer: rdma.qp_per_peer,
                ..VerbsConfig::default()
            },
        )
        .map_err(anyhow::Error::msg)
        .context("RDMA: cannot set up the verbs data plane")?
        .with_holder(holder.clone());
        if rpc.set_data_plane(Arc::new(plane)).is_err() {
            anyhow::bail!("RDMA: the RPC client already had a data plane");
        }
        Ok(server.with_pool(holder_pool).with_verbs(holder))
    }
}
