//! The calling side: per-peer connection pools, request multiplexing, timeouts and back-off.
//!
//! Each peer has `connections_per_peer` slots, used round-robin; a slot connects lazily (TCP with
//! `TCP_NODELAY`, TLS if configured, then the handshake) and its connection is reused by every call until it breaks. On
//! one connection any number of calls are in flight at once, told apart by request id: a reader task
//! hands each response to the call waiting for its id, a writer task seals and writes requests.
//!
//! Every call is bounded by a timeout (connecting included). A call that times out stops waiting and
//! forgets its id, so its late response, if any, is discarded (and counted). When connecting to a peer
//! fails, the peer is marked down for a back-off delay (doubling per consecutive failure up to a cap,
//! jittered to 50–100 % so a cluster does not retry in lockstep); calls in that window fail at once
//! with [`RpcError::PeerDown`] instead of waiting on a dead address. A connection on which nothing at
//! all arrived while a call waited out its timeout is presumed dead and closed (a vanished host leaves
//! TCP connections open for minutes), so the next call reconnects or finds the peer down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{read_frame, write_loop, Outgoing, RpcConfig, RpcError};
use crate::auth::{self, AuthError, Identity};
use crate::backoff::PeerBackoff;
use crate::dataplane::{DataPlane, TcpDataPlane, TcpDataPlaneConfig};
use crate::lock;
use crate::transport::{self, OpenError};
use crate::wire::{self, Frame, FrameKind};

/// Counters of a client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    pub calls: u64,
    pub timeouts: u64,
    /// Responses that arrived after their call had given up.
    pub late_responses: u64,
    /// Connections established (handshake done).
    pub connects: u64,
    pub connect_failures: u64,
    /// Calls refused at once because their peer was marked down.
    pub fast_failures: u64,
}

#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    timeouts: AtomicU64,
    late_responses: AtomicU64,
    connects: AtomicU64,
    connect_failures: AtomicU64,
    fast_failures: AtomicU64,
}

/// What a client knows about a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerStatus {
    /// Never called.
    Unknown,
    /// The last connection attempt succeeded (or none has failed since).
    Up,
    /// Connecting failed; calls fail fast until the back-off delay ends.
    Down {
        retry_in: Duration,
        consecutive_failures: u32,
        last_error: String,
    },
}

/// A client of the control RPC of all peers. Cheap to clone (shared).
#[derive(Clone)]
pub struct RpcClient {
    shared: Arc<Shared>,
}

struct Shared {
    identity: Identity,
    config: RpcConfig,
    peers: Mutex<HashMap<String, Arc<Peer>>>,
    counters: Arc<Counters>,
    /// The TCP data plane of this client's identity, built on first use and shared by every
    /// [`crate::RemoteDrive`] made from this client (one pool, one set of data connections).
    data_plane: std::sync::OnceLock<Arc<dyn DataPlane>>,
}

impl RpcClient {
    pub fn new(identity: Identity, config: RpcConfig) -> RpcClient {
        RpcClient {
            shared: Arc::new(Shared {
                identity,
                config,
                peers: Mutex::new(HashMap::new()),
                counters: Arc::new(Counters::default()),
                data_plane: std::sync::OnceLock::new(),
            }),
        }
    }

    pub fn config(&self) -> &RpcConfig {
        &self.shared.config
    }

    /// This node's identity, as proved in every handshake.
    pub fn identity(&self) -> &Identity {
        &self.shared.identity
    }

    /// Makes `plane` the data plane of this client (e.g. the verbs backend), for every
    /// [`crate::RemoteDrive`] made from it afterwards. Only before the first
    /// [`RpcClient::data_plane`] call; `Err(plane)` after it.
    pub fn set_data_plane(&self, plane: Arc<dyn DataPlane>) -> Result<(), Arc<dyn DataPlane>> {
        self.shared.data_plane.set(plane)
    }

    /// The data plane that goes with this client: a [`TcpDataPlane`] with the client's identity,
    /// timeouts and back-off ([`TcpDataPlaneConfig::from_rpc`]), built on first use and shared by
    /// all clones of this client.
    pub fn data_plane(&self) -> Arc<dyn DataPlane> {
        self.shared
            .data_plane
            .get_or_init(|| {
                let config = TcpDataPlaneConfig::from_rpc(&self.shared.config);
                let plane = TcpDataPlane::new(self.shared.identity.clone(), config)
                    .expect("the default data-plane pool shape is valid");
                Arc::new(plane)
            })
            .clone()
    }

    /// Calls `method` on `peer` (`host:port`) with the configured timeout.
    pub async fn call(&self, peer: &str, method: u16, payload: Bytes) -> Result<Bytes, RpcError> {
        self.call_with_timeout(peer, method, payload, self.shared.config.call_timeout)
            .await
    }

    /// Calls `method` on `peer` with an explicit timeout.
    pub async fn call_with_timeout(
        &self,
        peer: &str,
        method: u16,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, RpcError> {
        let max = self.shared.config.max_frame;
        if payload.len() as u64 > max as u64 {
            return Err(RpcError::TooLarge {
                len: payload.len(),
                max,
            });
        }
        self.round_trip(peer, FrameKind::Request, method, payload, timeout)
            .await
    }

    /// Checks that `peer` answers; returns the round-trip time.
    pub async fn ping(&self, peer: &str) -> Result<Duration, RpcError> {
        let start = Instant::now();
        self.round_trip(
            peer,
            FrameKind::Ping,
            0,
            Bytes::new(),
            self.shared.config.call_timeout,
        )
        .await?;
        Ok(start.elapsed())
    }

    async fn round_trip(
        &self,
        peer: &str,
        kind: FrameKind,
        method: u16,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, RpcError> {
        let counters = &self.shared.counters;
        counters.calls.fetch_add(1, Ordering::Relaxed);
        let p = self.peer(peer);
        let start = Instant::now();
        let used = std::sync::OnceLock::new();
        let call = async {
            let conn = p.conn(&self.shared).await?;
            let _ = used.set(conn.clone());
            conn.call(kind, method, payload).await
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_) => {
                counters.timeouts.fetch_add(1, Ordering::Relaxed);
                if let Some(conn) = used.get() {
                    conn.close_if_silent_since(start, timeout);
                }
                Err(RpcError::Timeout {
                    peer: peer.to_owned(),
                    after: timeout,
                })
            }
        }
    }

    fn peer(&self, addr: &str) -> Arc<Peer> {
        let mut peers = lock(&self.shared.peers);
        if let Some(p) = peers.get(addr) {
            return p.clone();
        }
        let n = self.shared.config.connections_per_peer.max(1);
        let p = Arc::new(Peer {
            addr: addr.to_owned(),
            slots: (0..n).map(|_| tokio::sync::Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            health: Mutex::new(Health::default()),
        });
        peers.insert(addr.to_owned(), p.clone());
        p
    }

    /// What this client knows about `peer`.
    pub fn peer_status(&self, peer: &str) -> PeerStatus {
        let Some(p) = lock(&self.shared.peers).get(peer).cloned() else {
            return PeerStatus::Unknown;
        };
        let h = lock(&p.health);
        match h.backoff.down(Instant::now()) {
            Some(d) => PeerStatus::Down {
                retry_in: d.retry_in,
                consecutive_failures: d.failures,
                last_error: d.last_error.to_owned(),
            },
            None if h.backoff.failures() == 0 && !h.ever_up => PeerStatus::Unknown,
            None => PeerStatus::Up,
        }
    }

    pub fn stats(&self) -> ClientStats {
        let c = &self.shared.counters;
        ClientStats {
            calls: c.calls.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            late_responses: c.late_responses.load(Ordering::Relaxed),
            connects: c.connects.load(Ordering::Relaxed),
            connect_failures: c.connect_failures.load(Ordering::Relaxed),
            fast_failures: c.fast_failures.load(Ordering::Relaxed),
        }
    }
}

#[derive(Default)]
struct Health {
    backoff: PeerBackoff,
    ever_up: bool,
}

struct Peer {
    addr: String,
    slots: Vec<tokio::sync::Mutex<Option<Arc<Conn>>>>,
    next: AtomicUsize,
    health: Mutex<Health>,
}

impl Peer {
    /// A live connection: the next slot's, or a new one.
    async fn conn(&self, client: &Shared) -> Result<Arc<Conn>, RpcError> {
        if let Some(err) = self.down_error() {
            // While the peer is marked down, only an already-open connection is used.
            for slot in &self.slots {
                if let Ok(slot) = slot.try_lock() {
                    if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
                        return Ok(c.clone());
                    }
                }
            }
            client
                .counters
                .fast_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(err);
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut slot = self.slots[i].lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        *slot = None;
        // Another call may have found the peer down while this one waited for the slot.
        if let Some(err) = self.down_error() {
            client
                .counters
                .fast_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(err);
        }
        match connect(&self.addr, client).await {
            Ok(c) => {
                client.counters.connects.fetch_add(1, Ordering::Relaxed);
                let mut h = lock(&self.health);
                h.backoff.succeeded();
                h.ever_up = true;
                drop(h);
                let c = Arc::new(c);
                *slot = Some(c.clone());
                Ok(c)
            }
            Err(e) => {
                client
                    .counters
                    .connect_failures
                    .fetch_add(1, Ordering::Relaxed);
                self.mark_failed(&e, &client.config);
                Err(e)
            }
        }
    }

    fn down_error(&self) -> Option<RpcError> {
        let h = lock(&self.health);
        let d = h.backoff.down(Instant::now())?;
        Some(RpcError::PeerDown {
            peer: self.addr.clone(),
            retry_in: d.retry_in,
            last_error: d.last_error.to_owned(),
        })
    }

    fn mark_failed(&self, e: &RpcError, config: &RpcConfig) {
        let mut h = lock(&self.health);
        let delay = h
            .backoff
            .failed(config.backoff_initial, config.backoff_max, e);
        tracing::warn!(peer = %self.addr, failures = h.backoff.failures(), retry_in = ?delay, error = %e, "peer unreachable");
    }
}

async fn connect(addr: &str, client: &Shared) -> Result<Conn, RpcError> {
    let config = &client.config;
    let peer = || addr.to_owned();
    let mut stream = match transport::open(
        addr,
        config.tls.as_ref(),
        config.connect_timeout,
        config.handshake_timeout,
    )
    .await
    {
        Ok(s) => s,
        Err(OpenError::Connect(source)) => {
            return Err(RpcError::Connect {
                peer: peer(),
                source,
            })
        }
        Err(OpenError::Tls(reason)) => {
            return Err(RpcError::Tls {
                peer: peer(),
                reason,
            })
        }
    };
    let handshake = auth::client_handshake(&mut stream, &client.identity, config.max_clock_skew);
    let session = match tokio::time::timeout(config.handshake_timeout, handshake).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => {
            if let Some(reason) = transport::tls_failure(&source) {
                return Err(RpcError::Tls {
                    peer: peer(),
                    reason,
                });
            }
            if let AuthError::UnsupportedVersion { .. } = source {
                // Not a passing fault: said once per attempt, which the back-off spaces out.
                tracing::warn!(peer = %addr, error = %source, "internode handshake refused");
            }
            return Err(RpcError::Handshake {
                peer: peer(),
                source,
            });
        }
        Err(_) => {
            let source = AuthError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no handshake within {:?}", config.handshake_timeout),
            ));
            return Err(RpcError::Handshake {
                peer: peer(),
                source,
            });
        }
    };
    tracing::debug!(peer = %addr, node = ?session.peer_node_id, "internode connection established");
    let sealer = session.sealer(config.max_frame);
    let bulk = session.bulk_sender();
    let mut opener = session.opener(config.max_frame);
    let (mut rd, wr) = tokio::io::split(stream);
    let shared = Arc::new(ConnShared {
        peer: peer(),
        opened: Instant::now(),
        last_rx_ms: AtomicU64::new(0),
        pending: Mutex::new(Pending {
            closed: None,
            map: HashMap::new(),
        }),
        next_id: AtomicU64::new(1),
        counters: client.counters.clone(),
    });
    let (tx, rx) = mpsc::channel(256);
    let w_shared = shared.clone();
    let writer = tokio::spawn(async move {
        if let Err(e) = write_loop(wr, sealer, bulk, rx, None).await {
            w_shared.close(format!("write failed: {e}"));
        }
    });
    let r_shared = shared.clone();
    let reader = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(16 << 10);
        let reason = loop {
            let frame = match read_frame(&mut rd, &mut opener, &mut buf).await {
                Ok(Some(f)) => f,
                Ok(None) => break "closed by the peer".to_owned(),
                Err(e) => break e.to_string(),
            };
            let since_open = r_shared.opened.elapsed().as_millis() as u64;
            r_shared.last_rx_ms.store(since_open + 1, Ordering::Relaxed);
            if frame.flags & wire::FLAG_BULK != 0 {
                // This client never asks for bulk answers (the data plane has its own connections).
                break "the peer sent a bulk answer on a control connection".to_owned();
            }
            let result = match frame.kind {
                FrameKind::Response | FrameKind::Pong => Ok(frame.payload),
                FrameKind::Error => match wire::decode_error(&frame.payload) {
                    Ok((code, message)) => Err(RpcError::Remote { code, message }),
                    Err(e) => break e.to_string(),
                },
                FrameKind::Request | FrameKind::Ping => {
                    break "the peer sent a request on a client connection".to_owned()
                }
            };
            let waiter = lock(&r_shared.pending).map.remove(&frame.request_id);
            match waiter {
                // The call may have given up just now: then the send fails, which is fine.
                Some(w) => drop(w.send(result)),
                None => {
                    r_shared
                        .counters
                        .late_responses
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(peer = %r_shared.peer, id = frame.request_id, "late response discarded");
                }
            }
        };
        r_shared.close(reason);
    });
    Ok(Conn {
        shared,
        tx,
        tasks: [reader, writer],
    })
}

/// One authenticated connection to a peer.
struct Conn {
    shared: Arc<ConnShared>,
    tx: mpsc::Sender<Outgoing>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct ConnShared {
    peer: String,
    /// When the connection was opened.
    opened: Instant,
    /// One more than the milliseconds after `opened` at which the last frame arrived; 0: none yet.
    last_rx_ms: AtomicU64,
    pending: Mutex<Pending>,
    next_id: AtomicU64,
    counters: Arc<Counters>,
}

type Waiter = oneshot::Sender<Result<Bytes, RpcError>>;

struct Pending {
    /// Why the connection closed, once it has.
    closed: Option<String>,
    map: HashMap<u64, Waiter>,
}

impl ConnShared {
    fn closed_error(&self, reason: &str) -> RpcError {
        RpcError::ConnectionClosed {
            peer: self.peer.clone(),
            reason: reason.to_owned(),
        }
    }

    /// Marks the connection closed and fails every call waiting on it.
    fn close(&self, reason: String) {
        let waiters = {
            let mut p = lock(&self.pending);
            if p.closed.is_some() {
                return;
            }
            tracing::debug!(peer = %self.peer, %reason, "internode connection closed");
            p.closed = Some(reason.clone());
            std::mem::take(&mut p.map)
        };
        for (_, w) in waiters {
            let _ = w.send(Err(self.closed_error(&reason)));
        }
    }
}

/// Removes a call's id from the pending map when the call ends in any way (answer, error, timeout,
/// or its future being dropped), so a late response finds nobody.
struct PendingGuard<'a> {
    shared: &'a ConnShared,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.pending).map.remove(&self.id);
    }
}

impl Conn {
    /// After a call timed out: if nothing at all arrived on this connection while the call waited, the
    /// peer or the path to it is presumed dead (a vanished host leaves a TCP connection open for many
    /// minutes), so the connection is closed and the next call reconnects, or finds the peer down.
    /// A connection on which other answers keep arriving is kept: only the one call was slow.
    fn close_if_silent_since(&self, start: Instant, waited: Duration) {
        let silent = match self.shared.last_rx_ms.load(Ordering::Relaxed) {
            0 => true,
            ms => self.shared.opened + Duration::from_millis(ms - 1) < start,
        };
        if silent {
            self.shared.close(format!(
                "nothing received for {waited:?}: connection presumed dead"
            ));
        }
    }

    fn is_closed(&self) -> bool {
        lock(&self.shared.pending).closed.is_some()
    }

    async fn call(&self, kind: FrameKind, method: u16, payload: Bytes) -> Result<Bytes, RpcError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&self.shared.pending);
            if let Some(reason) = &p.closed {
                return Err(self.shared.closed_error(reason));
            }
            p.map.insert(id, tx);
        }
        let _guard = PendingGuard {
            shared: &self.shared,
            id,
        };
        let frame = Frame {
            kind,
            flags: 0,
            request_id: id,
            method,
            payload,
        };
        if self.tx.send(Outgoing::Frame(frame)).await.is_err() {
            return Err(self.shared.closed_error("writer stopped"));
        }
        match rx.await {
            Ok(result) => result,
            Err(_) => {
                let reason = lock(&self.shared.pending)
                    .closed
                    .clone()
                    .unwrap_or_default();
                Err(self.shared.closed_error(&reason))
            }
        }
    }
}
