//! Cluster mode of `quarry server`: one port for S3 and the internode RPC, the node service, and
//! joining the cluster.
//!
//! A node listens on one address, as MinIO does: an accepted connection whose first bytes are the
//! internode handshake magic goes to the RPC server, any other to the S3 server. Nothing is read
//! to decide: the bytes are peeked, so each server sees the connection from its first byte.
//! Connections whose first bytes have not come yet take one of a fixed number of slots (carved
//! out of `--max-connections`) for at most [`SNIFF_TIMEOUT`]; when all are taken the oldest is
//! closed, so connections that send nothing (or one byte) neither pile up nor keep a peer's
//! handshake from being seen. Waiting for more bytes is a readiness event, never a timer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use quarry_disk::{Drive, LocalDrive};
use quarry_net::rdma::{choose_backend, Backend, RdmaMode, RdmaSettings};
use quarry_net::rpc::{LogThrottle, PreAuth};
use quarry_net::{ClusterSecret, DriveServer, Identity, RpcClient, RpcConfig, RpcServer};
use quarry_node::dsync::{DistLockerConfig, LockServer, DEFAULT_MAX_ENTRIES};
use quarry_node::{cluster_id, open_cluster, ClusterSpec, NodeService};
use quarry_object::topology::Topology;
use quarry_object::{ErasureServer, ObjectConfig};
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::cli::SecretSource;

/// How long a new connection may stay silent (or show only part of the magic) before it is
/// taken for S3, whose server then applies its own limit and timeouts. An internode peer sends
/// its hello at once, and an HTTP client its request line.
pub const SNIFF_TIMEOUT: Duration = Duration::from_secs(2);
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

/// Accepts on `listener` and hands each connection to the RPC or the S3 side by its first bytes;
/// at most `sniff_slots` connections wait for theirs at once (see the module doc).
fn split_port(
    listener: TcpListener,
    sniff_slots: usize,
) -> std::io::Result<(HttpIncoming, mpsc::Receiver<(TcpStream, SocketAddr)>)> {
    let local = listener.local_addr()?;
    let (http_tx, http_rx) = mpsc::channel(HANDOFF_QUEUE);
    let (rpc_tx, rpc_rx) = mpsc::channel(HANDOFF_QUEUE);
    let sniffing = PreAuth::new(sniff_slots);
    let throttle = LogThrottle::new(Duration::from_secs(10));
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    if let Some(held) = throttle.allow() {
                        tracing::warn!(error = %e, held_back = held, "accept failed");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (slot, cut) = sniffing.admit();
            if cut {
                if let Some(held) = throttle.allow() {
                    tracing::warn!(
                        held_back = held,
                        "{sniff_slots} connections have not sent their first bytes; closing the oldest"
                    );
                }
            }
            let (http_tx, rpc_tx) = (http_tx.clone(), rpc_tx.clone());
            tokio::spawn(async move {
                let Some(sniffed) = slot
                    .run(tokio::time::timeout(
                        SNIFF_TIMEOUT,
                        starts_with_magic(&stream),
                    ))
                    .await
                else {
                    // Cut to make room for a newer connection: dropping it closes it.
                    return;
                };
                let tx = if matches!(sniffed, Ok(Ok(true))) {
                    rpc_tx
                } else {
                    http_tx
                };
                let _ = tx.send((stream, peer)).await;
            });
        }
    });
    Ok((HttpIncoming { rx: http_rx, local }, rpc_rx))
}

/// What the first bytes of a connection say: `Some(true)` the internode magic, `Some(false)`
/// anything else (or the end of the stream), `None` a prefix of the magic so far.
fn classify(first: &[u8]) -> Option<bool> {
    let magic = quarry_net::auth::HS_MAGIC;
    let n = first.len().min(magic.len());
    if n == 0 || first[..n] != magic[..n] {
        Some(false)
    } else if n == magic.len() {
        Some(true)
    } else {
        None
    }
}

/// Whether the connection's first bytes are the internode handshake magic (peeked, not read).
/// While only a prefix of it has come, the task sleeps until the socket's next readiness event
/// (more bytes or the end of the stream): `try_io` clears the readiness it saw when the peek
/// says "not enough yet", and `readable` waits for a newer one.
async fn starts_with_magic(stream: &TcpStream) -> std::io::Result<bool> {
    loop {
        stream.readable().await?;
        let peeked = stream.try_io(Interest::READABLE, || {
            let mut buf = [0u8; 4];
            let (n, _) = rustix::net::recv(stream, &mut buf[..], rustix::net::RecvFlags::PEEK)?;
            classify(&buf[..n]).ok_or_else(|| std::io::ErrorKind::WouldBlock.into())
        });
        match peeked {
            Ok(internode) => return Ok(internode),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Where the node's cluster secret came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretOrigin {
    /// `--cluster-secret` / `QUARRY_CLUSTER_SECRET` / `cluster_secret`.
    Given,
    /// `--cluster-secret-file` / `QUARRY_CLUSTER_SECRET_FILE` / `cluster_secret_file`.
    File,
    /// Derived from the root credentials: how clusters did it before a cluster secret existed.
    Legacy,
}

/// The cluster secret: the one configured (a value or a file), else derived from the root
/// credentials as earlier versions did, so a cluster started before the setting existed keeps
/// working until its operator sets one on every node.
pub fn cluster_secret(
    configured: Option<&SecretSource>,
    root: (&str, &str),
) -> anyhow::Result<(ClusterSecret, SecretOrigin)> {
    let weak = |what: &str| {
        format!("{what} is too short: a cluster secret has at least {} bytes (e.g. `openssl rand -hex 32`)", quarry_net::auth::MIN_SECRET_LEN)
    };
    match configured {
        Some(SecretSource::Value(v)) => Ok((
            ClusterSecret::new(v.trim().as_bytes())
                .with_context(|| weak("--cluster-secret (QUARRY_CLUSTER_SECRET)"))?,
            SecretOrigin::Given,
        )),
        Some(SecretSource::File(path)) => {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!("cannot read the cluster secret file {}", path.display())
            })?;
            #[cfg(unix)]
            if let Ok(meta) = std::fs::metadata(path) {
                use std::os::unix::fs::PermissionsExt;
                if meta.permissions().mode() & 0o077 != 0 {
                    tracing::warn!(
                        file = %path.display(),
                        "the cluster secret file can be read by other users: chmod 600 it"
                    );
                }
            }
            Ok((
                ClusterSecret::new(text.trim().as_bytes())
                    .with_context(|| weak(&format!("the cluster secret in {}", path.display())))?,
                SecretOrigin::File,
            ))
        }
        None => Ok((legacy_secret(root.0, root.1)?, SecretOrigin::Legacy)),
    }
}

/// The secret earlier versions derived from the root credentials (kept bit for bit: nodes that
/// have no cluster secret yet must agree with each other).
fn legacy_secret(access_key: &str, secret_key: &str) -> anyhow::Result<ClusterSecret> {
    Ok(ClusterSecret::new(legacy_key(access_key, secret_key))?)
}

fn legacy_key(access_key: &str, secret_key: &str) -> [u8; 32] {
    let mut material = Vec::new();
    material.extend_from_slice(access_key.as_bytes());
    material.push(0);
    material.extend_from_slice(secret_key.as_bytes());
    blake3::derive_key("quarry cluster secret v1", &material)
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
    secret: ClusterSecret,
    cfg: ObjectConfig,
    rdma: &RdmaSettings,
    sniff_slots: usize,
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
        let ld = LocalDrive::open_with_sweep(path.clone(), cfg.orphan_sweep)
            .await
            .with_context(|| format!("cannot open drive {}", path.display()))?;
        local_drives.push(ld);
    }

    let identity = Identity {
        deployment_id: cluster_id(&topology),
        node_id: node.clone(),
        secret,
    };
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let local = listener.local_addr()?;
    let (http, rpc_rx) = split_port(listener, sniff_slots)?;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_are_classified() {
        assert_eq!(classify(b"QHSK\x01"), Some(true));
        assert_eq!(classify(b"QHSK"), Some(true));
        assert_eq!(classify(b"QH"), None);
        assert_eq!(classify(b"Q"), None);
        assert_eq!(classify(b""), Some(false));
        assert_eq!(classify(b"GET "), Some(false));
        assert_eq!(classify(b"QX"), Some(false));
    }

    #[test]
    fn the_cluster_secret_is_the_configured_one_and_never_the_root_credentials() {
        let root = ("quarrytestadmin", "quarry-test-secret-key-0123456789");
        let (_, origin) = cluster_secret(None, root).unwrap();
        assert_eq!(origin, SecretOrigin::Legacy);
        // The derivation clusters already run with, pinned: changing it would split them.
        let hex: String = legacy_key(root.0, root.1)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "ef61acf69a2fcc8985d586329b65fe56dcb2fb5b0987ff3a51a85bdc1022925f"
        );

        let (_, origin) = cluster_secret(
            Some(&SecretSource::Value("0123456789abcdef-cluster".into())),
            root,
        )
        .unwrap();
        assert_eq!(origin, SecretOrigin::Given);
        let e = cluster_secret(Some(&SecretSource::Value("short".into())), root).unwrap_err();
        assert!(format!("{e:#}").contains("at least 16 bytes"), "{e:#}");

        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("cluster.secret");
        std::fs::write(&f, "0123456789abcdef-from-a-file\n").unwrap();
        let (_, origin) = cluster_secret(Some(&SecretSource::File(f.clone())), root).unwrap();
        assert_eq!(origin, SecretOrigin::File);
        std::fs::write(&f, "  short \n").unwrap();
        let e = cluster_secret(Some(&SecretSource::File(f.clone())), root).unwrap_err();
        assert!(format!("{e:#}").contains("too short"), "{e:#}");
        let missing = dir.path().join("nope");
        let e = cluster_secret(Some(&SecretSource::File(missing)), root).unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot read the cluster secret file"),
            "{e:#}"
        );
    }
}
