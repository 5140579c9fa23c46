//! Cluster mode of `quarry server`: one port for S3 and the internode RPC, the node service, and
//! joining the cluster.
//!
//! A node listens on one address, as MinIO does, and each accepted connection goes to the RPC
//! server or to the S3 server by its first bytes, peeked, never read, so each server sees the
//! connection from its first byte:
//! - the internode handshake magic: a plain internode connection, served when the drive URLs are
//!   `http://`, closed at once (with a log line) when they are `https://`;
//! - a TLS ClientHello that offers the ALPN protocol `quarry-internode/2`: an internode TLS
//!   connection, served (the RPC server then requires a client certificate of the cluster's CA)
//!   when the drive URLs are `https://`, closed at once otherwise;
//! - anything else: S3 (HTTP, or HTTPS with the S3 certificates, whose ALPN is http/1.1).
//!
//! Connections whose first bytes have not come yet take one of a fixed number of slots (carved
//! out of `--max-connections`) for at most [`SNIFF_TIMEOUT`]; when all are taken the oldest is
//! closed, so connections that send nothing (or a part) neither pile up nor keep a peer's
//! handshake from being seen. Waiting for more bytes is a readiness event, never a timer.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use quarry_disk::{Drive, LocalDrive};
use quarry_net::rdma::{choose_backend, Backend, RdmaMode, RdmaSettings};
use quarry_net::rpc::{LogThrottle, PreAuth};
use quarry_net::{
    ClusterSecret, DriveServer, Identity, InternodeTls, RpcClient, RpcConfig, RpcServer,
};
use quarry_node::dsync::{DistLockerConfig, LockServer, DEFAULT_MAX_ENTRIES};
use quarry_node::{cluster_id, open_cluster, ClusterSpec, NodeService};
use quarry_object::topology::Topology;
use quarry_object::{ErasureServer, ObjectConfig};
use quarry_tls::CertStore;
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

/// Where the shared port sends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    S3,
    Internode,
    /// Closed at once: internode traffic of the other scheme (plain to a TLS cluster, or TLS
    /// to a plain one).
    Refuse(&'static str),
}

/// Accepts on `listener` and hands each connection to the RPC or the S3 side by its first bytes;
/// at most `sniff_slots` connections wait for theirs at once (see the module doc).
/// `internode_tls`: the drive URLs are `https://`.
fn split_port(
    listener: TcpListener,
    sniff_slots: usize,
    internode_tls: bool,
) -> std::io::Result<(HttpIncoming, mpsc::Receiver<(TcpStream, SocketAddr)>)> {
    let local = listener.local_addr()?;
    let (http_tx, http_rx) = mpsc::channel(HANDOFF_QUEUE);
    let (rpc_tx, rpc_rx) = mpsc::channel(HANDOFF_QUEUE);
    let sniffing = PreAuth::new(sniff_slots);
    let throttle = LogThrottle::new(Duration::from_secs(10));
    let refusals = Arc::new(LogThrottle::new(Duration::from_secs(10)));
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
            let refusals = refusals.clone();
            tokio::spawn(async move {
                let Some(sniffed) = slot
                    .run(tokio::time::timeout(
                        SNIFF_TIMEOUT,
                        route(&stream, internode_tls),
                    ))
                    .await
                else {
                    // Cut to make room for a newer connection: dropping it closes it.
                    return;
                };
                let tx = match sniffed {
                    Ok(Ok(Route::Internode)) => rpc_tx,
                    Ok(Ok(Route::Refuse(why))) => {
                        if let Some(held) = refusals.allow() {
                            tracing::warn!(%peer, held_back = held, "internode connection refused: {why}");
                        }
                        return;
                    }
                    _ => http_tx,
                };
                let _ = tx.send((stream, peer)).await;
            });
        }
    });
    Ok((HttpIncoming { rx: http_rx, local }, rpc_rx))
}

/// What the first bytes of a connection are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    /// The internode handshake magic.
    Magic,
    /// A TLS handshake record (content type 22, version 3.x).
    Tls,
    /// Anything else, or the end of the stream.
    Other,
}

/// What the first bytes of a connection say; `None` while they are a prefix of the magic or of
/// a TLS record header.
fn classify(first: &[u8]) -> Option<First> {
    let magic = quarry_net::auth::HS_MAGIC;
    match first {
        [] => Some(First::Other),
        [0x16] => None,
        [0x16, 0x03, ..] => Some(First::Tls),
        _ => {
            let n = first.len().min(magic.len());
            if first[..n] != magic[..n] {
                Some(First::Other)
            } else if n == magic.len() {
                Some(First::Magic)
            } else {
                None
            }
        }
    }
}

/// Bytes of a TLS ClientHello looked at, at most: the largest handshake record a client sends
/// (16 KiB of payload and its header). A hello that does not fit is not a Quarry node's.
const MAX_HELLO: usize = 16 * 1024 + 5;

/// Whether `bytes` (the start of a TLS connection) hold a ClientHello offering the internode
/// ALPN protocol; `None` while the hello is not complete. Parsed by rustls itself.
fn offers_internode(bytes: &[u8]) -> Option<bool> {
    let mut acceptor = quarry_tls::rustls::server::Acceptor::default();
    let mut rd = bytes;
    while !rd.is_empty() {
        match acceptor.read_tls(&mut rd) {
            Ok(0) => break,
            Ok(_) => {}
            // More than a hello's worth of records: not a node's hello.
            Err(_) => return Some(false),
        }
    }
    match acceptor.accept() {
        Ok(Some(accepted)) => Some(
            accepted
                .client_hello()
                .alpn()
                .is_some_and(|mut protocols| protocols.any(|p| p == quarry_tls::ALPN_INTERNODE)),
        ),
        Ok(None) if bytes.len() < MAX_HELLO => None,
        Ok(None) | Err(_) => Some(false),
    }
}

/// Where a connection goes, from its first bytes (peeked, not read). While they do not decide
/// yet, the task sleeps until the socket's next readiness event (more bytes or the end of the
/// stream): `try_io` clears the readiness it saw when the peek says "not enough yet", and
/// `readable` waits for a newer one.
async fn route(stream: &TcpStream, internode_tls: bool) -> std::io::Result<Route> {
    let mut buf = vec![0u8; 8];
    loop {
        stream.readable().await?;
        let peeked = stream.try_io(Interest::READABLE, || {
            let (n, _) = rustix::net::recv(stream, &mut buf[..], rustix::net::RecvFlags::PEEK)?;
            let first = &buf[..n];
            let decided = match classify(first) {
                None => None,
                Some(First::Other) => Some(Route::S3),
                Some(First::Magic) if internode_tls => Some(Route::Refuse(
                    "a plain internode connection, but this node's drive URLs are https:// (internode TLS): start every node with the same drive URLs",
                )),
                Some(First::Magic) => Some(Route::Internode),
                Some(First::Tls) => match offers_internode(first) {
                    // Peek more: the whole hello (it grows past 8 bytes at once).
                    None if n == buf.len() && buf.len() < MAX_HELLO => {
                        return Ok(None);
                    }
                    None => None,
                    Some(false) => Some(Route::S3),
                    Some(true) if internode_tls => Some(Route::Internode),
                    Some(true) => Some(Route::Refuse(
                        "a peer asks for internode TLS, but this node's drive URLs are http://: start every node with the same drive URLs",
                    )),
                },
            };
            decided
                .map(Some)
                .ok_or_else(|| std::io::ErrorKind::WouldBlock.into())
        });
        match peeked {
            Ok(Some(route)) => return Ok(route),
            // The buffer was full: peek again at once with room for the whole hello.
            Ok(None) => buf.resize(MAX_HELLO, 0),
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
    /// S3 over RDMA to clients, when the node's data plane is verbs.
    pub client_rdma: quarry_s3::rdma::ClientRdmaHandle,
}

/// Internode TLS for `https://` drive URLs: the node's certificate and the cluster's CA from the
/// certificate directory, or the reason it cannot run. `None` for `http://` URLs.
pub fn internode_tls(
    topology: &Topology,
    certs: Option<&Arc<CertStore>>,
    certs_dir: Option<&std::path::Path>,
) -> anyhow::Result<Option<InternodeTls>> {
    if !topology.tls {
        return Ok(None);
    }
    let dir = certs_dir.map_or_else(|| "--certs-dir".to_owned(), |d| d.display().to_string());
    let Some(store) = certs else {
        bail!(
            "the drive URLs are https://, which turns on internode TLS, but there is no certificate in {dir}: put the node's certificate (public.crt, private.key; it must cover this node's host name in the drive URLs) and the cluster's CA certificate (CAs/ca.crt) there, or use http:// drive URLs on a trusted network (see the README, \"TLS between nodes\")"
        );
    };
    let tls = InternodeTls::from_store(store.clone()).with_context(|| {
        format!("the drive URLs are https://, which turns on internode TLS: peers are verified against the cluster's CA in {dir}/CAs")
    })?;
    Ok(Some(tls))
}

/// Binds the node's address, starts its internode service and joins the cluster. `tls`: internode
/// TLS ([`internode_tls`]).
pub async fn start(
    topology: Topology,
    address: &str,
    secret: ClusterSecret,
    cfg: ObjectConfig,
    rdma: &RdmaSettings,
    sniff_slots: usize,
    tls: Option<InternodeTls>,
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
    if tls.is_some() {
        match &backend {
            Backend::Verbs(d) => tracing::warn!(
                device = %d.device,
                "internode TLS is on (https:// drive URLs), but shard bytes between nodes go over RDMA verbs, which TLS cannot wrap: they cross the RDMA network unencrypted. Keep that network isolated (as every RDMA storage system requires), or set QUARRY_RDMA=off to send them over TLS"
            ),
            Backend::Tcp { .. } => tracing::info!(
                "internode TLS: control RPC and data plane over mutual TLS with the cluster's CA"
            ),
        }
    }
    let rpc_config = RpcConfig {
        tls: tls.clone(),
        ..RpcConfig::default()
    };
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
    let (http, rpc_rx) = split_port(listener, sniff_slots, tls.is_some())?;

    let served: Vec<Arc<dyn Drive>> = local_drives
        .iter()
        .map(|d| Arc::new(d.clone()) as Arc<dyn Drive>)
        .collect();
    let rpc = RpcClient::new(identity.clone(), rpc_config.clone());
    let (drive_server, client_rdma) = verbs::wire(
        &backend,
        rdma,
        &identity,
        &rpc,
        &rpc_config,
        DriveServer::new(served),
    )?;
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
        rpc_config,
        Arc::new(service),
    );
    tracing::info!(
        node = %node,
        nodes = topology.nodes.len(),
        drives = topology.drives.len(),
        set_size = topology.set_size(),
        layout = %topology.fingerprint_hex(),
        data_plane = backend.name(),
        internode_tls = tls.is_some(),
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
        client_rdma,
    })
}

/// The verbs data plane of a node: the holder side in its drive server, the requester side as
/// the data plane of its RPC client (so every remote drive reads and writes shards over verbs).
mod verbs {
    use std::sync::Arc;

    use anyhow::Context;
    use quarry_buf::{BufPool, BufPoolConfig, DEFAULT_BUF_SIZE};
    use quarry_net::rdma::{Backend, RdmaMode, RdmaSettings};
    use quarry_net::verbs_dataplane::{
        holder_access, requester_access, ClientPlane, ClientPlaneConfig, ClientPlaneError,
        ResponderConfig, CLIENT_STAGING_BYTES,
    };
    use quarry_net::{
        DriveServer, Identity, RpcClient, RpcConfig, TcpDataPlane, TcpDataPlaneConfig, VerbsConfig,
        VerbsDataPlane, VerbsDevice, VerbsResponder,
    };
    use quarry_s3::rdma::{
        ClientRdma, ClientRdmaFigures, ClientRdmaHandle, Delivered, RdmaConnection, RdmaRefusal,
        RemoteSpan,
    };
    use quarry_verbs::{Access, RemoteBuf};

    /// Registers the node's two pools once (the requester's: GET stripes and PUT chunks, shared
    /// with the TCP fallback and the object layer; the holder's: drive reads and fetched
    /// appends), and wires both sides; and S3 over RDMA to clients on the same device (its
    /// staging pool registered beside them; GET bodies in the requester's pool go as they are).
    pub fn wire(
        backend: &Backend,
        rdma: &RdmaSettings,
        identity: &Identity,
        rpc: &RpcClient,
        config: &RpcConfig,
        server: DriveServer,
    ) -> anyhow::Result<(DriveServer, ClientRdmaHandle)> {
        let Backend::Verbs(d) = backend else {
            return Ok((server, ClientRdmaHandle::default()));
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
        let staging = BufPool::registered(
            BufPoolConfig::with_bytes(DEFAULT_BUF_SIZE, CLIENT_STAGING_BYTES),
            dev.pd(),
            Access::LOCAL_WRITE,
        )
        .context("RDMA: cannot register the client staging pool")?;
        let clients = ClientPlane::new(
            dev.clone(),
            requester_pool.clone(),
            staging,
            ClientPlaneConfig {
                idle: rdma.client_idle,
                ..ClientPlaneConfig::default()
            },
        );
        let config = config.clone();
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
        Ok((
            server.with_pool(holder_pool).with_verbs(holder),
            ClientRdmaHandle(Some(Arc::new(ClientRdmaPlane(clients)))),
        ))
    }

    /// quarry-net's client plane as the S3 front end's [`ClientRdma`].
    struct ClientRdmaPlane(ClientPlane);

    fn refusal(e: ClientPlaneError) -> RdmaRefusal {
        match e {
            ClientPlaneError::UnknownConnection => RdmaRefusal::UnknownConnection,
            ClientPlaneError::NotOwner => RdmaRefusal::NotOwner,
            ClientPlaneError::TooMany(m) => RdmaRefusal::TooMany(m),
            ClientPlaneError::BadEndpoint(m) => RdmaRefusal::BadEndpoint(m),
            ClientPlaneError::Device(m) => RdmaRefusal::Device(m),
        }
    }

    fn remote(s: RemoteSpan) -> RemoteBuf {
        RemoteBuf {
            addr: s.addr,
            rkey: s.rkey,
            len: s.len,
        }
    }

    #[async_trait::async_trait]
    impl ClientRdma for ClientRdmaPlane {
        fn connect(&self, owner: &str, client: &[u8]) -> Result<RdmaConnection, RdmaRefusal> {
            let c = self.0.connect(owner, client).map_err(refusal)?;
            Ok(RdmaConnection {
                id: c.id,
                endpoint: c.endpoint.to_vec(),
                key: c.key,
                max_transfer: 5 << 40,
            })
        }

        fn disconnect(&self, owner: &str, id: u64) -> Result<(), RdmaRefusal> {
            self.0.disconnect(owner, id).map_err(refusal)
        }

        fn connection(&self, id: u64) -> Option<(String, [u8; quarry_s3::rdma::KEY_LEN])> {
            self.0.connection(id)
        }

        async fn write(
            &self,
            id: u64,
            to: RemoteSpan,
            data: quarry_object::ByteStream,
        ) -> Delivered {
            let o = self.0.write(id, remote(to), data).await;
            Delivered {
                written: o.written,
                error: o.error,
            }
        }

        fn read(
            &self,
            id: u64,
            from: RemoteSpan,
        ) -> Result<quarry_object::ByteStream, RdmaRefusal> {
            self.0.read(id, remote(from)).map_err(refusal)
        }

        fn figures(&self) -> ClientRdmaFigures {
            self.0.figures()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_bytes_are_classified() {
        assert_eq!(classify(b"QHSK\x01"), Some(First::Magic));
        assert_eq!(classify(b"QHSK"), Some(First::Magic));
        assert_eq!(classify(b"QH"), None);
        assert_eq!(classify(b"Q"), None);
        assert_eq!(classify(b""), Some(First::Other));
        assert_eq!(classify(b"GET "), Some(First::Other));
        assert_eq!(classify(b"QX"), Some(First::Other));
        assert_eq!(classify(b"\x16"), None);
        assert_eq!(classify(b"\x16\x03\x01\x02\x00"), Some(First::Tls));
        assert_eq!(classify(b"\x16\x04"), Some(First::Other));
    }

    /// The first bytes a rustls client sends with `alpn`.
    fn client_hello(alpn: &[&[u8]]) -> Vec<u8> {
        let ca =
            quarry_tls::generate::Ca::new("t", quarry_tls::generate::Validity::days(1)).unwrap();
        let mut cfg = quarry_tls::client_config_trusting(ca.pem().cert.as_bytes()).unwrap();
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let name = quarry_tls::rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut c = quarry_tls::rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
        let mut out = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut out).unwrap();
        }
        out
    }

    #[test]
    fn a_client_hello_is_routed_by_its_alpn() {
        let node = client_hello(&[quarry_tls::ALPN_INTERNODE]);
        assert!(node.len() > 1000, "a post-quantum hello spans segments");
        assert_eq!(offers_internode(&node), Some(true));
        // Cut anywhere: not complete yet.
        assert_eq!(offers_internode(&node[..node.len() / 2]), None);
        assert_eq!(offers_internode(&client_hello(&[b"http/1.1"])), Some(false));
        assert_eq!(offers_internode(&client_hello(&[])), Some(false));
        assert_eq!(offers_internode(b"\x16\x03\x01\x00\x05hello"), Some(false));
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
