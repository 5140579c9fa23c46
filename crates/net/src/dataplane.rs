//! The data plane: how shard bytes move between nodes, behind one trait ([`DataPlane`]) with two
//! backends, TCP ([`TcpDataPlane`], here) and verbs (RDMA, `crate::verbs_dataplane`) (DESIGN.md,
//! "Data plane").
//!
//! The control plane ([`crate::rpc`]) carries small messages, in frames that are read into a
//! connection's own buffer and authenticated with HMAC-SHA256. Shard bytes must not go that way:
//! they land in pooled buffers ([`BufPool`]) that the decoder and then the HTTP body use in place, so
//! the healthy inter-node GET copies nothing. A [`DataPlane`] reads a shard range of a peer's drive
//! into such buffers.
//!
//! # The TCP backend, and why it is built this way
//!
//! A [`TcpDataPlane`] keeps a few **dedicated data connections** per peer
//! ([`TcpDataPlaneConfig::connections_per_peer`]), separate from the control connections of the
//! [`crate::RpcClient`]. Each is an ordinary internode connection: same port, same TLS when the
//! cluster uses it ([`crate::transport`]), same handshake magic and handshake ([`crate::auth`]), same [`crate::RpcServer`] and [`crate::Handler`] on the peer,
//! so a node that shares one port between S3 and the internode RPC needs no new wiring, and nothing
//! is read from a data connection before it is authenticated. What makes it a data connection is
//! only how it is used:
//!
//! - one transfer at a time per connection, so a connection's bytes after a request are exactly
//!   that request's answers, and the reader can read them with exact reads, straight into the
//!   destination buffer (no read-ahead buffer, so no intermediate copy);
//! - a request is an ordinary control frame (method [`drive_proto::Method::ReadShardData`])
//!   carrying the flag [`wire::FLAG_BULK`]; the server's handler ([`crate::DriveServer`]) answers
//!   the raw shard bytes and the RPC server sends them as a short response header (flag set,
//!   payload: the length) followed by a bulk frame ([`crate::data`]: header, payload, keyed-BLAKE3
//!   tag with a key derived from the session). The client checks the header (request id, length
//!   against what it asked for and against the buffer) before it reads a payload byte into the
//!   pooled buffer, then the tag; an error answer is an ordinary error frame. A GET's read of one
//!   bitrot frame ([`DataPlane::read_frame_into`]) also carries [`wire::FLAG_BULK_FRAME`] and is
//!   answered as a frame answer, whose tag covers the frame's hash only ([`crate::data`]).
//!
//! Dedicated connections rather than bulk answers multiplexed on the control connections: on a
//! multiplexed connection the reader must read ahead to find frame boundaries, so the start of a
//! payload would land in the reader's buffer and need a copy, and a 1 MiB shard would hold up every
//! small control answer queued behind it (lock refreshes, metadata reads). Dedicated connections
//! keep control latency independent of bulk traffic, bound the transfers in flight per peer by
//! their number, and mirror the verbs backend, whose queue pairs are also separate from the control
//! channel.
//!
//! A range larger than one buffer is asked for in pieces of one buffer each, written in windows of
//! up to 16 on one connection (pipelined); the peer answers them as they complete, each into its
//! own buffer.
//!
//! Every transfer is bounded by [`TcpDataPlaneConfig::transfer_timeout`], from waiting for buffers
//! and a connection to the last byte. A connection is returned to the idle set only after a
//! transfer that ended cleanly (including a clean error answer); a timeout, a dropped future, or a
//! broken stream drops it, so a half-read answer can never be mistaken for the next one. A
//! transfer that fails on a reused idle connection before any byte of the answer arrived (the peer
//! restarted since) is retried once on a fresh connection. When connecting fails the peer is
//! marked down for a jittered, doubling back-off, and transfers fail at once in that window.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::auth::{self, AuthError, Identity};
use crate::backoff::PeerBackoff;
use crate::data::{BulkReceiver, BulkSender, DataError};
use crate::drive_proto::{self, Request};
use crate::lock;
use crate::rpc::RpcConfig;
use crate::transport::{self, InternodeStream, InternodeTls, OpenError};
use crate::wire::{self, Frame, FrameKind, Header, Opener, Sealer, WireError};
use quarry_buf::{BufPool, BufPoolConfig, BufPoolError, PooledBuf, DEFAULT_BUF_SIZE};
/// The figures this module counts (plain types of the ground floor: see `quarry_buf::figures`).
pub use quarry_buf::{DataPlaneStats, PeerSnapshot, LATENCY_BUCKETS};

/// A range of one shard file on a peer's drive: `len` bytes at `offset` of
/// `<bucket>/<key>/<data_dir>/part.<part>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRange<'a> {
    pub bucket: &'a str,
    pub key: &'a str,
    pub data_dir: Uuid,
    pub part: u32,
    pub offset: u64,
    pub len: usize,
}

/// Shard bytes that landed in pooled buffers, in order: every buffer is full except the last.
#[derive(Debug)]
pub struct ShardData {
    bufs: Vec<PooledBuf>,
    len: usize,
}

impl ShardData {
    /// The bytes in `bufs` (filled, in order), `len` in all.
    pub fn from_buffers(bufs: Vec<PooledBuf>, len: usize) -> ShardData {
        ShardData { bufs, len }
    }

    /// Bytes in all buffers.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffers, in order.
    pub fn buffers(&self) -> &[PooledBuf] {
        &self.bufs
    }

    /// Whether [`ShardData::into_bytes`] is free (no copy): the bytes are in at most one buffer.
    pub fn is_contiguous(&self) -> bool {
        self.bufs.len() <= 1
    }

    /// The bytes as one `Bytes`. In one buffer (the normal case: a shard chunk fits a buffer) this is
    /// the buffer itself ([`PooledBuf::into_bytes`]), which returns to the pool when the last clone is
    /// dropped: no copy. Spread over several buffers, they are copied into one allocation.
    pub fn into_bytes(self) -> Bytes {
        if self.len == 0 {
            // No buffer is kept alive for nothing.
            return Bytes::new();
        }
        self.into_buf().into_bytes()
    }

    /// The bytes as one pooled buffer: in one buffer (the normal case) the buffer itself, no copy;
    /// spread over several, copied into a stand-alone buffer (the caller sees by its address that
    /// the bytes did not land where it asked).
    pub fn into_buf(mut self) -> PooledBuf {
        if self.bufs.len() == 1 {
            if let Some(b) = self.bufs.pop() {
                return b;
            }
        }
        let mut out = PooledBuf::heap(self.len);
        for b in &self.bufs {
            out.extend_from_slice(b);
        }
        out
    }
}

/// The pieces of `range` that land in `dst`: one `(offset, len)` per buffer, in order, each
/// filling its buffer but the last, as many as the range needs (at least one).
pub(crate) fn plan_pieces(
    range: &ShardRange<'_>,
    dst: &[PooledBuf],
) -> Result<Vec<(u64, usize)>, DataPlaneError> {
    let mut pieces: Vec<(u64, usize)> = Vec::with_capacity(dst.len());
    let mut at = 0usize;
    for b in dst {
        if at == range.len && !pieces.is_empty() {
            break;
        }
        let n = (range.len - at).min(b.capacity());
        if n == 0 && range.len > 0 {
            return Err(DataPlaneError::TooLarge {
                len: range.len,
                reason: "a destination buffer has no capacity".into(),
            });
        }
        let offset =
            range
                .offset
                .checked_add(at as u64)
                .ok_or_else(|| DataPlaneError::TooLarge {
                    len: range.len,
                    reason: format!("the range at offset {} overflows", range.offset),
                })?;
        pieces.push((offset, n));
        at += n;
    }
    if at < range.len || pieces.is_empty() {
        return Err(DataPlaneError::TooLarge {
            len: range.len,
            reason: format!("the destination buffers hold only {at} bytes"),
        });
    }
    Ok(pieces)
}

/// Every way a data-plane transfer can fail.
#[derive(Debug, thiserror::Error)]
pub enum DataPlaneError {
    #[error("data-plane transfer with {peer} timed out after {after:?}")]
    Timeout { peer: String, after: Duration },
    #[error("peer {peer} is marked down on the data plane (next attempt in {retry_in:?}); last error: {last_error}")]
    PeerDown {
        peer: String,
        retry_in: Duration,
        last_error: String,
    },
    #[error("cannot open a data connection to {peer}: {source}")]
    Connect {
        peer: String,
        source: std::io::Error,
    },
    #[error("data-connection handshake with {peer} failed: {source}")]
    Handshake { peer: String, source: AuthError },
    /// The TLS handshake of a data connection failed (see [`crate::RpcError::Tls`]).
    #[error("data-connection TLS with {peer} failed: {reason}")]
    Tls { peer: String, reason: String },
    /// The connection broke or closed mid-transfer (e.g. the peer died).
    #[error("data connection to {peer} broke: {source}")]
    ConnectionLost {
        peer: String,
        source: std::io::Error,
    },
    /// A control frame on the data connection was invalid (bad MAC, unknown kind, ...).
    #[error("data connection to {peer}: bad frame: {source}")]
    Wire { peer: String, source: WireError },
    /// A bulk frame was invalid (bad tag, wrong length or transfer id).
    #[error("data connection to {peer}: bad bulk frame: {source}")]
    Bulk { peer: String, source: DataError },
    #[error("data connection to {peer}: protocol error: {reason}")]
    Protocol { peer: String, reason: String },
    /// The peer answered with an error (e.g. the drive's `FileNotFound`), code per
    /// [`crate::rpc::codes`] and [`drive_proto::codes`].
    #[error("peer {peer} refused the transfer ({code}): {message}")]
    Remote {
        peer: String,
        code: u16,
        message: String,
    },
    #[error("a transfer of {len} bytes cannot be done: {reason}")]
    TooLarge { len: usize, reason: String },
    /// The verbs (RDMA) path to the peer failed: a completion error, a QP in error (its reads in
    /// flight fail with this), a failed connection set-up.
    #[error("RDMA transfer with {peer} failed: {reason}")]
    Verbs { peer: String, reason: String },
    /// The peer had no registered memory free for the transfer and touched nothing (the verbs
    /// backend moves it over TCP instead).
    #[error("peer {peer} is busy: {reason}")]
    Busy { peer: String, reason: String },
}

impl DataPlaneError {
    /// Whether the peer could not be reached or the transfer could not complete on the way (as
    /// opposed to the peer answering with an error or sending garbage).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            DataPlaneError::Timeout { .. }
                | DataPlaneError::PeerDown { .. }
                | DataPlaneError::Connect { .. }
                | DataPlaneError::Handshake { .. }
                | DataPlaneError::Tls { .. }
                | DataPlaneError::ConnectionLost { .. }
        )
    }

    /// A short name of the kind of error, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            DataPlaneError::Timeout { .. } => "timeout",
            DataPlaneError::PeerDown { .. } => "peer_down",
            DataPlaneError::Connect { .. } => "connect",
            DataPlaneError::Handshake { .. } => "handshake",
            DataPlaneError::Tls { .. } => "tls",
            DataPlaneError::ConnectionLost { .. } => "connection_lost",
            DataPlaneError::Wire { .. } => "wire",
            DataPlaneError::Bulk { .. } => "bulk",
            DataPlaneError::Protocol { .. } => "protocol",
            DataPlaneError::Remote { .. } => "remote",
            DataPlaneError::TooLarge { .. } => "too_large",
            DataPlaneError::Verbs { .. } => "verbs",
            DataPlaneError::Busy { .. } => "busy",
        }
    }
}

/// What a transfer did, for the per-peer metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// Shard bytes received from the peer (a GET's chunk).
    Read,
    /// Shard bytes sent to the peer (a PUT's chunk).
    Append,
}

/// Counters of one backend's traffic with one peer.
#[derive(Debug, Default)]
pub struct PeerCounters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    appends: AtomicU64,
    append_bytes: AtomicU64,
    /// Connections (or queue pairs) made, and of those the ones that replaced a broken one.
    pub connects: AtomicU64,
    pub reconnects: AtomicU64,
    /// Times this peer was switched to the TCP backend (verbs only).
    pub fallbacks: AtomicU64,
    /// Transfers the peer answered busy (no registered buffer free), moved over TCP instead
    /// (verbs only).
    pub shed: AtomicU64,
    /// Connections open now.
    pub active: AtomicU64,
    errors: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    latency: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    latency_sum_ns: AtomicU64,
}

impl PeerCounters {
    /// Counts a transfer of `bytes` that took `elapsed`.
    pub fn record(&self, what: Transfer, bytes: usize, elapsed: Duration) {
        let (ops, total) = match what {
            Transfer::Read => (&self.reads, &self.read_bytes),
            Transfer::Append => (&self.appends, &self.append_bytes),
        };
        ops.fetch_add(1, Ordering::Relaxed);
        total.fetch_add(bytes as u64, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.latency[i].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_ns.fetch_add(
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Counts a failed transfer by the kind of its error ([`DataPlaneError::kind`]).
    pub fn error(&self, kind: &'static str) {
        *lock(&self.errors).entry(kind).or_default() += 1;
    }
}

/// The counters of every peer of one backend.
#[derive(Debug)]
pub struct PeerMetrics {
    backend: &'static str,
    peers: Mutex<HashMap<String, Arc<PeerCounters>>>,
}

impl PeerMetrics {
    pub fn new(backend: &'static str) -> PeerMetrics {
        PeerMetrics {
            backend,
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// The counters of `peer` (made on first use).
    pub fn peer(&self, peer: &str) -> Arc<PeerCounters> {
        lock(&self.peers)
            .entry(peer.to_owned())
            .or_default()
            .clone()
    }

    /// A copy of every peer's figures, sorted by peer.
    pub fn snapshot(&self) -> Vec<PeerSnapshot> {
        let peers: Vec<(String, Arc<PeerCounters>)> = lock(&self.peers)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out: Vec<PeerSnapshot> = peers
            .into_iter()
            .map(|(peer, c)| {
                let mut cumulative = 0;
                let latency_buckets = c
                    .latency
                    .iter()
                    .map(|b| {
                        cumulative += g(b);
                        cumulative
                    })
                    .collect();
                PeerSnapshot {
                    backend: self.backend,
                    peer,
                    reads: g(&c.reads),
                    read_bytes: g(&c.read_bytes),
                    appends: g(&c.appends),
                    append_bytes: g(&c.append_bytes),
                    connects: g(&c.connects),
                    reconnects: g(&c.reconnects),
                    fallbacks: g(&c.fallbacks),
                    shed: g(&c.shed),
                    active_connections: g(&c.active),
                    errors: lock(&c.errors).iter().map(|(k, v)| (*k, *v)).collect(),
                    latency_buckets,
                    latency_sum_seconds: g(&c.latency_sum_ns) as f64 / 1e9,
                }
            })
            .collect();
        out.sort_by(|a, b| a.peer.cmp(&b.peer));
        out
    }
}

/// Moves shard bytes between nodes. Object-safe: used as `Arc<dyn DataPlane>`.
///
/// # Contract
///
/// A read lands the bytes of a [`ShardRange`] of drive `drive` of `peer` in pooled buffers, in
/// order, each buffer filled to its capacity except the last; errors of the peer's drive come back
/// as [`DataPlaneError::Remote`] with the drive protocol's codes, so the caller can rebuild the
/// exact [`quarry_disk::DriveError`]. Every transfer is bounded in time and the transfers in flight
/// to one peer are bounded in number; a future that is dropped leaves no transfer behind that can
/// still write into a buffer that went back to the pool.
///
/// # The verbs backend
///
/// [`crate::verbs_dataplane`]: [`DataPlane::pool`] is registered with the device; a read into a
/// registered buffer is the server-push GET (the holder RDMA-WRITEs the range into it), an append
/// of `Bytes` that lie in the registered pool is fetched by the holder with RDMA READ; anything
/// else goes over its TCP backend. Cancellation: a dropped transfer leaves its memory lent until
/// the QP is drained, so nothing the peer may still touch returns to the pool early.
#[async_trait]
pub trait DataPlane: Send + Sync + fmt::Debug {
    /// The backend's name for logs and metrics (`"tcp"`, `"verbs"`).
    fn name(&self) -> &'static str;

    /// The pool the backend reads into (registered with the device, for verbs).
    fn pool(&self) -> &BufPool;

    fn stats(&self) -> DataPlaneStats;

    /// Per-peer figures (of every backend this one uses, e.g. verbs and its TCP fallback).
    fn peer_stats(&self) -> Vec<PeerSnapshot> {
        Vec::new()
    }

    /// Drops the connections to `peer` (every peer with `None`), as a failure would: transfers in
    /// flight on them fail, the next transfer connects anew. Returns how many were dropped.
    fn reset(&self, _peer: Option<&str>) -> usize {
        0
    }

    /// The buffer pools of the node's data path, by name: `data` (this backend's pool), and for
    /// verbs also `holder` (the pool the node serves its peers from).
    fn pools(&self) -> Vec<(&'static str, quarry_buf::BufPoolStats)> {
        vec![("data", self.pool().stats())]
    }

    /// What the node's holder side (serving its peers' transfers) moved, when this backend has
    /// one of its own (verbs: bytes RDMA-WRITTEN to peers are `bytes_out`, appends RDMA-READ from
    /// them `bytes_in`).
    fn holder_stats(&self) -> Option<DataPlaneStats> {
        None
    }

    /// Reads `range` of drive `drive` of `peer` (`host:port`) into buffers taken from
    /// [`DataPlane::pool`].
    async fn read_shard(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
    ) -> Result<ShardData, DataPlaneError>;

    /// Like [`DataPlane::read_shard`], into the caller's buffers, which must hold `range.len`
    /// bytes in all (buffers beyond those needed are returned to their pool). For the verbs
    /// backend they must come from [`DataPlane::pool`].
    async fn read_shard_into(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: Vec<PooledBuf>,
    ) -> Result<ShardData, DataPlaneError>;

    /// Reads `range`, exactly one bitrot frame `[hash | chunk]` of the shard, into `dst` (a buffer
    /// that holds it). The chunk is **not** checked against the hash, and a backend may
    /// authenticate only the hash on the way (the TCP backend's frame answers, [`crate::data`]):
    /// the caller must check the chunk before it uses a byte, and a frame that fails the check may
    /// have been changed on the way; [`DataPlane::read_shard_into`] authenticates every byte. The
    /// default is `read_shard_into`.
    async fn read_frame_into(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: PooledBuf,
    ) -> Result<ShardData, DataPlaneError> {
        self.read_shard_into(peer, drive, range, vec![dst]).await
    }

    /// Appends `data` as append number `seq` of shard writer `writer`, opened on drive `drive` of
    /// `peer` over the control RPC. Appends may be in flight at once and arrive in any order; the
    /// peer writes them in `seq` order (within its window).
    async fn append_shard(
        &self,
        peer: &str,
        drive: u16,
        writer: Uuid,
        seq: u64,
        data: Bytes,
    ) -> Result<(), DataPlaneError>;
}

/// Settings of a [`TcpDataPlane`].
#[derive(Debug, Clone)]
pub struct TcpDataPlaneConfig {
    /// Data connections kept to each peer, which is also the bound on transfers in flight to it.
    pub connections_per_peer: usize,
    /// Bound on each transfer: waiting for buffers and a connection, connecting, the answer.
    pub transfer_timeout: Duration,
    pub connect_timeout: Duration,
    pub handshake_timeout: Duration,
    pub max_clock_skew: Duration,
    /// Largest control frame accepted on a data connection (error answers).
    pub max_frame: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Bytes of each pooled buffer (a multiple of 4096).
    pub buf_size: usize,
    /// Buffers in the pool.
    pub buffers: usize,
    /// Internode mutual TLS: data connections are TLS connections (see [`crate::transport`]).
    pub tls: Option<InternodeTls>,
}

impl TcpDataPlaneConfig {
    /// Timeouts, back-off, frame size and TLS of `rpc`; four connections per peer; a pool of 256
    /// buffers of [`DEFAULT_BUF_SIZE`] (its memory becomes resident only as buffers are used).
    pub fn from_rpc(rpc: &RpcConfig) -> TcpDataPlaneConfig {
        TcpDataPlaneConfig {
            connections_per_peer: 4,
            transfer_timeout: rpc.call_timeout,
            connect_timeout: rpc.connect_timeout,
            handshake_timeout: rpc.handshake_timeout,
            max_clock_skew: rpc.max_clock_skew,
            max_frame: rpc.max_frame,
            backoff_initial: rpc.backoff_initial,
            backoff_max: rpc.backoff_max,
            buf_size: DEFAULT_BUF_SIZE,
            buffers: 256,
            tls: rpc.tls.clone(),
        }
    }
}

#[derive(Default)]
struct Counters {
    transfers: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    connects: AtomicU64,
    connect_failures: AtomicU64,
    fast_failures: AtomicU64,
    retries: AtomicU64,
}

/// The TCP backend of the data plane (see the module docs). Share it as `Arc<dyn DataPlane>`.
pub struct TcpDataPlane {
    identity: Identity,
    config: TcpDataPlaneConfig,
    pool: BufPool,
    /// Serialises taking several buffers for one transfer, so two large transfers cannot each hold
    /// part of the pool while waiting for the rest.
    multi_get: tokio::sync::Mutex<()>,
    peers: Mutex<HashMap<String, Arc<PeerConns>>>,
    counters: Counters,
    metrics: PeerMetrics,
}

impl fmt::Debug for TcpDataPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpDataPlane")
            .field("node", &self.identity.node_id)
            .field("pool", &self.pool)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The data connections to one peer.
struct PeerConns {
    /// One permit per connection: the bound on transfers in flight to this peer.
    permits: Semaphore,
    idle: Mutex<Vec<DataConn>>,
    health: Mutex<PeerBackoff>,
}

impl TcpDataPlane {
    /// A data plane with its own pool, shaped by `config`.
    pub fn new(
        identity: Identity,
        config: TcpDataPlaneConfig,
    ) -> Result<TcpDataPlane, BufPoolError> {
        let pool = BufPool::new(BufPoolConfig::new(config.buf_size, config.buffers))?;
        Ok(TcpDataPlane::with_pool(identity, config, pool))
    }

    /// A data plane reading into `pool` (`config.buf_size` and `config.buffers` are ignored).
    pub fn with_pool(
        identity: Identity,
        config: TcpDataPlaneConfig,
        pool: BufPool,
    ) -> TcpDataPlane {
        TcpDataPlane {
            identity,
            config,
            pool,
            multi_get: tokio::sync::Mutex::new(()),
            peers: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            metrics: PeerMetrics::new("tcp"),
        }
    }

    pub fn config(&self) -> &TcpDataPlaneConfig {
        &self.config
    }

    /// Data connections to `peer` open and idle now.
    pub fn idle_connections(&self, peer: &str) -> usize {
        lock(&self.peers)
            .get(peer)
            .map_or(0, |p| lock(&p.idle).len())
    }

    fn peer(&self, addr: &str) -> Arc<PeerConns> {
        let mut peers = lock(&self.peers);
        if let Some(p) = peers.get(addr) {
            return p.clone();
        }
        let p = Arc::new(PeerConns {
            permits: Semaphore::new(self.config.connections_per_peer.max(1)),
            idle: Mutex::new(Vec::new()),
            health: Mutex::new(PeerBackoff::default()),
        });
        peers.insert(addr.to_owned(), p.clone());
        p
    }

    /// Buffers for `len` bytes from the pool (at least one, for a 0-byte read).
    async fn buffers_for(&self, len: usize) -> Result<Vec<PooledBuf>, DataPlaneError> {
        let size = self.pool.buf_size();
        let n = len.div_ceil(size).max(1);
        let capacity = self.pool.stats().capacity;
        if n > capacity {
            return Err(DataPlaneError::TooLarge {
                len,
                reason: format!("it needs {n} buffers of {size} bytes and the pool has {capacity}"),
            });
        }
        if n == 1 {
            return Ok(vec![self.pool.get().await]);
        }
        let _one_at_a_time = self.multi_get.lock().await;
        let mut bufs = Vec::with_capacity(n);
        for _ in 0..n {
            bufs.push(self.pool.get().await);
        }
        Ok(bufs)
    }

    async fn transfer(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: Option<Vec<PooledBuf>>,
        frame: bool,
    ) -> Result<ShardData, DataPlaneError> {
        let mut dst = match dst {
            Some(d) => d,
            None => self.buffers_for(range.len).await?,
        };
        let pieces = plan_pieces(range, &dst)?;
        // Buffers beyond those needed go back to the pool now.
        dst.truncate(pieces.len());

        self.on_connection(
            peer,
            Op::Read {
                drive,
                range,
                pieces: &pieces,
                dst: &mut dst,
                // A frame answer's tag covers the hash at the front of the frame: only a frame
                // read in one piece has it.
                frame: frame && pieces.len() == 1,
            },
        )
        .await?;
        Ok(ShardData::from_buffers(dst, range.len))
    }

    /// Runs `op` on a data connection to `peer`: an idle one or a new one, at most
    /// `connections_per_peer` at once. A connection goes back to the idle set only when the
    /// exchange ended cleanly; one that fails on a reused connection before any answer byte
    /// arrived is retried once on a fresh connection.
    async fn on_connection(&self, peer: &str, mut op: Op<'_>) -> Result<(), DataPlaneError> {
        let p = self.peer(peer);
        // The semaphore is never closed.
        let _permit = p
            .permits
            .acquire()
            .await
            .map_err(|_| DataPlaneError::Protocol {
                peer: peer.to_owned(),
                reason: "data plane shut down".into(),
            })?;
        let mut retried = false;
        loop {
            let reused = lock(&p.idle).pop();
            let (mut conn, was_reused) = match reused {
                Some(c) => (c, true),
                None => (self.connect(peer, &p).await?, false),
            };
            let r = match &mut op {
                Op::Read {
                    drive,
                    range,
                    pieces,
                    dst,
                    frame,
                } => conn.read(peer, *drive, range, pieces, dst, *frame).await,
                Op::Append {
                    drive,
                    writer,
                    seq,
                    data,
                } => conn.append(peer, *drive, *writer, *seq, data).await,
            };
            match r {
                Ok(()) => {
                    lock(&p.idle).push(conn);
                    return Ok(());
                }
                Err(ConnFailure { error, clean }) => {
                    if clean {
                        // The answer was read to its end: the connection is in step.
                        lock(&p.idle).push(conn);
                    } else if was_reused && !conn.received_any && !retried {
                        // An idle connection that died while unused (e.g. the peer restarted):
                        // nothing came back, so try once more on a fresh one. (An append the peer
                        // did apply before it went silent is refused as a duplicate by its
                        // sequence number.) The other idle connections to this peer were
                        // opened before the same restart: they go too, so the retry is on a
                        // new connection rather than on the next dead one.
                        retried = true;
                        lock(&p.idle).clear();
                        self.counters.retries.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%peer, error = %error, "stale data connection; reconnecting");
                        continue;
                    }
                    return Err(error);
                }
            }
        }
    }

    /// Opens and authenticates a data connection, or fails fast while the peer is marked down.
    async fn connect(&self, addr: &str, p: &PeerConns) -> Result<DataConn, DataPlaneError> {
        {
            let h = lock(&p.health);
            if let Some(d) = h.down(Instant::now()) {
                self.counters.fast_failures.fetch_add(1, Ordering::Relaxed);
                return Err(DataPlaneError::PeerDown {
                    peer: addr.to_owned(),
                    retry_in: d.retry_in,
                    last_error: d.last_error.to_owned(),
                });
            }
        }
        match self.open(addr).await {
            Ok(mut c) => {
                self.counters.connects.fetch_add(1, Ordering::Relaxed);
                let m = self.metrics.peer(addr);
                m.connects.fetch_add(1, Ordering::Relaxed);
                m.active.fetch_add(1, Ordering::Relaxed);
                c.open = Some(OpenGuard(m));
                lock(&p.health).succeeded();
                Ok(c)
            }
            Err(e) => {
                self.counters
                    .connect_failures
                    .fetch_add(1, Ordering::Relaxed);
                let mut h = lock(&p.health);
                let delay = h.failed(self.config.backoff_initial, self.config.backoff_max, &e);
                tracing::warn!(peer = %addr, failures = h.failures(), retry_in = ?delay, error = %e, "data plane: peer unreachable");
                Err(e)
            }
        }
    }

    async fn open(&self, addr: &str) -> Result<DataConn, DataPlaneError> {
        let c = &self.config;
        let peer = || addr.to_owned();
        let mut stream =
            match transport::open(addr, c.tls.as_ref(), c.connect_timeout, c.handshake_timeout)
                .await
            {
                Ok(s) => s,
                Err(OpenError::Connect(source)) => {
                    return Err(DataPlaneError::Connect {
                        peer: peer(),
                        source,
                    })
                }
                Err(OpenError::Tls(reason)) => {
                    return Err(DataPlaneError::Tls {
                        peer: peer(),
                        reason,
                    })
                }
            };
        let handshake = auth::client_handshake(&mut stream, &self.identity, c.max_clock_skew);
        let session = match tokio::time::timeout(c.handshake_timeout, handshake).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => {
                if let Some(reason) = transport::tls_failure(&source) {
                    return Err(DataPlaneError::Tls {
                        peer: peer(),
                        reason,
                    });
                }
                return Err(DataPlaneError::Handshake {
                    peer: peer(),
                    source,
                });
            }
            Err(_) => {
                return Err(DataPlaneError::Handshake {
                    peer: peer(),
                    source: AuthError::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no handshake within {:?}", c.handshake_timeout),
                    )),
                })
            }
        };
        tracing::debug!(peer = %addr, node = %session.peer_node_id, "data connection established");
        Ok(DataConn {
            sealer: session.sealer(c.max_frame),
            opener: session.opener(c.max_frame),
            bulk: session.bulk_receiver(),
            bulk_tx: session.bulk_sender(),
            stream,
            next_id: 1,
            max_frame: c.max_frame,
            received_any: false,
            open: None,
        })
    }

    async fn timed(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: Option<Vec<PooledBuf>>,
        frame: bool,
    ) -> Result<ShardData, DataPlaneError> {
        self.counters.transfers.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let after = self.config.transfer_timeout;
        let result = match tokio::time::timeout(
            after,
            self.transfer(peer, drive, range, dst, frame),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(DataPlaneError::Timeout {
                    peer: peer.to_owned(),
                    after,
                })
            }
        };
        let m = self.metrics.peer(peer);
        match &result {
            Ok(d) => {
                self.counters
                    .bytes_in
                    .fetch_add(d.len() as u64, Ordering::Relaxed);
                m.record(Transfer::Read, d.len(), started.elapsed());
            }
            Err(e) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                m.error(e.kind());
            }
        }
        result
    }
}

#[async_trait]
impl DataPlane for TcpDataPlane {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn pool(&self) -> &BufPool {
        &self.pool
    }

    fn stats(&self) -> DataPlaneStats {
        let c = &self.counters;
        DataPlaneStats {
            transfers: c.transfers.load(Ordering::Relaxed),
            bytes_in: c.bytes_in.load(Ordering::Relaxed),
            bytes_out: c.bytes_out.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            connects: c.connects.load(Ordering::Relaxed),
            connect_failures: c.connect_failures.load(Ordering::Relaxed),
            fast_failures: c.fast_failures.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
        }
    }

    async fn read_shard(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
    ) -> Result<ShardData, DataPlaneError> {
        self.timed(peer, drive, range, None, false).await
    }

    async fn read_shard_into(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: Vec<PooledBuf>,
    ) -> Result<ShardData, DataPlaneError> {
        self.timed(peer, drive, range, Some(dst), false).await
    }

    /// A frame answer ([`crate::data`]): the peer tags only the frame's hash, and the frame's
    /// bytes are hashed once, by the caller's bitrot check.
    async fn read_frame_into(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: PooledBuf,
    ) -> Result<ShardData, DataPlaneError> {
        self.timed(peer, drive, range, Some(vec![dst]), true).await
    }

    async fn append_shard(
        &self,
        peer: &str,
        drive: u16,
        writer: Uuid,
        seq: u64,
        data: Bytes,
    ) -> Result<(), DataPlaneError> {
        self.counters.transfers.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let after = self.config.transfer_timeout;
        let len = data.len();
        let op = Op::Append {
            drive,
            writer,
            seq,
            data,
        };
        let result = match tokio::time::timeout(after, self.on_connection(peer, op)).await {
            Ok(r) => r,
            Err(_) => {
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(DataPlaneError::Timeout {
                    peer: peer.to_owned(),
                    after,
                })
            }
        };
        let m = self.metrics.peer(peer);
        match &result {
            Ok(()) => {
                self.counters
                    .bytes_out
                    .fetch_add(len as u64, Ordering::Relaxed);
                m.record(Transfer::Append, len, started.elapsed());
            }
            Err(e) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                m.error(e.kind());
            }
        }
        result
    }

    fn peer_stats(&self) -> Vec<PeerSnapshot> {
        self.metrics.snapshot()
    }

    fn reset(&self, peer: Option<&str>) -> usize {
        let peers: Vec<Arc<PeerConns>> = lock(&self.peers)
            .iter()
            .filter(|(k, _)| peer.is_none_or(|p| p == k.as_str()))
            .map(|(_, v)| v.clone())
            .collect();
        // Busy connections are not in the idle set: they finish their transfer and are dropped
        // or kept as usual. Only idle ones can be dropped without failing anything mid-way.
        peers
            .iter()
            .map(|p| std::mem::take(&mut *lock(&p.idle)).len())
            .sum()
    }
}

/// One exchange on a data connection.
enum Op<'a> {
    Read {
        drive: u16,
        range: &'a ShardRange<'a>,
        pieces: &'a [(u64, usize)],
        dst: &'a mut [PooledBuf],
        /// Answered as a frame answer (one piece, one bitrot frame).
        frame: bool,
    },
    Append {
        drive: u16,
        writer: Uuid,
        seq: u64,
        data: Bytes,
    },
}

/// A failed transfer on one connection; `clean` when the connection is still in step (every
/// answer was read to its end), so it can be reused.
struct ConnFailure {
    error: DataPlaneError,
    clean: bool,
}

impl ConnFailure {
    fn broken(error: DataPlaneError) -> ConnFailure {
        ConnFailure {
            error,
            clean: false,
        }
    }
}

/// Requests of one read written at once on a data connection before their answers are read.
const PIPELINE: usize = 16;

/// One authenticated data connection, used by one transfer at a time.
struct DataConn {
    stream: InternodeStream,
    sealer: Sealer,
    opener: Opener,
    bulk: BulkReceiver,
    bulk_tx: BulkSender,
    next_id: u64,
    max_frame: u32,
    /// Whether any byte of an answer arrived during the current transfer.
    received_any: bool,
    /// Counts the connection as open in its peer's metrics while it lives.
    open: Option<OpenGuard>,
}

/// Counts one open connection in its peer's metrics (`active`) while it lives.
struct OpenGuard(Arc<PeerCounters>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

impl DataConn {
    /// Asks for every piece at once, then reads the answers (in whatever order the peer sends them)
    /// straight into `dst[i]` for piece `i`.
    async fn read(
        &mut self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        pieces: &[(u64, usize)],
        dst: &mut [PooledBuf],
        frame: bool,
    ) -> Result<(), ConnFailure> {
        self.received_any = false;
        // A bounded window of requests at a time: the peer stops reading a connection while its
        // requests in flight are at their bound, and its answers wait for us to read them, so an
        // unbounded burst of requests could fill both directions' socket buffers at once.
        for (p, d) in pieces.chunks(PIPELINE).zip(dst.chunks_mut(PIPELINE)) {
            self.read_batch(peer, drive, range, p, d, frame).await?;
        }
        Ok(())
    }

    async fn read_batch(
        &mut self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        pieces: &[(u64, usize)],
        dst: &mut [PooledBuf],
        frame: bool,
    ) -> Result<(), ConnFailure> {
        let lost = |source| {
            ConnFailure::broken(DataPlaneError::ConnectionLost {
                peer: peer.to_owned(),
                source,
            })
        };
        let protocol = |reason: String| {
            ConnFailure::broken(DataPlaneError::Protocol {
                peer: peer.to_owned(),
                reason,
            })
        };
        let first = self.next_id;
        self.next_id += pieces.len() as u64;
        let mut out = BytesMut::with_capacity(pieces.len() * 160);
        for (i, &(offset, len)) in pieces.iter().enumerate() {
            let req = Request::ReadShardData {
                bucket: range.bucket.to_owned(),
                key: range.key.to_owned(),
                data_dir: range.data_dir,
                part: range.part,
                offset,
                len: len as u64,
            };
            let (method, payload) = drive_proto::encode_request(drive, &req);
            let request = Frame {
                kind: FrameKind::Request,
                flags: if frame {
                    wire::FLAG_BULK | wire::FLAG_BULK_FRAME
                } else {
                    wire::FLAG_BULK
                },
                request_id: first + i as u64,
                method,
                payload,
            };
            self.sealer
                .seal_into(&request, &mut out)
                .map_err(|source| {
                    ConnFailure::broken(DataPlaneError::Wire {
                        peer: peer.to_owned(),
                        source,
                    })
                })?;
        }
        self.stream.write_all(&out).await.map_err(lost)?;

        let mut done = vec![false; pieces.len()];
        let mut first_error: Option<DataPlaneError> = None;
        for _ in 0..pieces.len() {
            let answer = self.read_control(peer).await?;
            let i = answer
                .request_id
                .checked_sub(first)
                .map(|i| i as usize)
                .filter(|&i| i < pieces.len() && !done[i])
                .ok_or_else(|| {
                    protocol(format!(
                        "answer to request {} which is not outstanding",
                        answer.request_id
                    ))
                })?;
            done[i] = true;
            match answer.kind {
                FrameKind::Error => {
                    let (code, message) =
                        wire::decode_error(&answer.payload).map_err(|source| {
                            ConnFailure::broken(DataPlaneError::Wire {
                                peer: peer.to_owned(),
                                source,
                            })
                        })?;
                    first_error.get_or_insert(DataPlaneError::Remote {
                        peer: peer.to_owned(),
                        code,
                        message,
                    });
                }
                FrameKind::Response if answer.flags & wire::FLAG_BULK != 0 => {
                    let announced = wire::decode_bulk_len(&answer.payload)
                        .ok_or_else(|| protocol("bulk answer header is not 8 bytes".into()))?;
                    let want = pieces[i].1;
                    if announced != want as u64 {
                        return Err(protocol(format!(
                            "asked for {want} bytes, the peer announces {announced}"
                        )));
                    }
                    self.bulk
                        .recv_as(
                            &mut self.stream,
                            answer.request_id,
                            want,
                            &mut dst[i],
                            frame,
                        )
                        .await
                        .map_err(|e| match e {
                            DataError::Io(source) => lost(source),
                            source => ConnFailure::broken(DataPlaneError::Bulk {
                                peer: peer.to_owned(),
                                source,
                            }),
                        })?;
                }
                other => {
                    return Err(protocol(format!(
                        "unexpected {other:?} frame (flags {:#06x}) on a data connection",
                        answer.flags
                    )))
                }
            }
        }
        match first_error {
            None => Ok(()),
            Some(error) => Err(ConnFailure { error, clean: true }),
        }
    }

    /// Sends one append: the request (flag [`wire::FLAG_BULK_BODY`], payload: the append's
    /// prefix) and the bytes as a bulk frame written from `data` itself, then reads the answer.
    async fn append(
        &mut self,
        peer: &str,
        drive: u16,
        writer: Uuid,
        seq: u64,
        data: &Bytes,
    ) -> Result<(), ConnFailure> {
        self.received_any = false;
        let broken = |error| ConnFailure::broken(error);
        let len = u32::try_from(data.len()).map_err(|_| {
            broken(DataPlaneError::TooLarge {
                len: data.len(),
                reason: "an append is at most 4 GiB".into(),
            })
        })?;
        let id = self.next_id;
        self.next_id += 1;
        let (method, payload) = drive_proto::encode_shard_append_prefix(drive, writer, seq, len);
        let frame = Frame {
            kind: FrameKind::Request,
            flags: wire::FLAG_BULK_BODY,
            request_id: id,
            method,
            payload,
        };
        let mut out = BytesMut::with_capacity(160);
        self.sealer.seal_into(&frame, &mut out).map_err(|source| {
            broken(DataPlaneError::Wire {
                peer: peer.to_owned(),
                source,
            })
        })?;
        let (header, tag) = self.bulk_tx.seal(id, data).map_err(|source| {
            broken(DataPlaneError::Bulk {
                peer: peer.to_owned(),
                source,
            })
        })?;
        out.extend_from_slice(&header);
        let lost = |source| {
            broken(DataPlaneError::ConnectionLost {
                peer: peer.to_owned(),
                source,
            })
        };
        self.stream.write_all(&out).await.map_err(lost)?;
        self.stream.write_all(data).await.map_err(lost)?;
        self.stream.write_all(&tag).await.map_err(lost)?;
        let answer = self.read_control(peer).await?;
        if answer.request_id != id {
            return Err(broken(DataPlaneError::Protocol {
                peer: peer.to_owned(),
                reason: format!("answer to request {} instead of {id}", answer.request_id),
            }));
        }
        match answer.kind {
            FrameKind::Error => {
                let (code, message) = wire::decode_error(&answer.payload).map_err(|source| {
                    broken(DataPlaneError::Wire {
                        peer: peer.to_owned(),
                        source,
                    })
                })?;
                Err(ConnFailure {
                    error: DataPlaneError::Remote {
                        peer: peer.to_owned(),
                        code,
                        message,
                    },
                    clean: true,
                })
            }
            FrameKind::Response if answer.flags == 0 => {
                match drive_proto::decode_response(answer.payload) {
                    Ok(drive_proto::Response::Unit) => Ok(()),
                    Ok(other) => Err(ConnFailure {
                        error: DataPlaneError::Protocol {
                            peer: peer.to_owned(),
                            reason: format!("unexpected answer to an append: {other:?}")
                                .chars()
                                .take(120)
                                .collect(),
                        },
                        clean: true,
                    }),
                    Err(e) => Err(ConnFailure {
                        error: DataPlaneError::Protocol {
                            peer: peer.to_owned(),
                            reason: format!("malformed answer to an append: {e}"),
                        },
                        clean: true,
                    }),
                }
            }
            other => Err(broken(DataPlaneError::Protocol {
                peer: peer.to_owned(),
                reason: format!(
                    "unexpected {other:?} frame (flags {:#06x}) on a data connection",
                    answer.flags
                ),
            })),
        }
    }

    /// Reads exactly one control frame (no read-ahead: the bytes after it stay in the socket).
    async fn read_control(&mut self, peer: &str) -> Result<Frame, ConnFailure> {
        let wire_err = |source| {
            ConnFailure::broken(DataPlaneError::Wire {
                peer: peer.to_owned(),
                source,
            })
        };
        let mut head = [0u8; wire::HEADER_LEN];
        self.stream.read_exact(&mut head).await.map_err(|source| {
            ConnFailure::broken(DataPlaneError::ConnectionLost {
                peer: peer.to_owned(),
                source,
            })
        })?;
        self.received_any = true;
        let h = Header::decode(&head, self.max_frame).map_err(wire_err)?;
        let mut buf = vec![0u8; h.frame_len()];
        buf[..wire::HEADER_LEN].copy_from_slice(&head);
        self.stream
            .read_exact(&mut buf[wire::HEADER_LEN..])
            .await
            .map_err(|source| {
                ConnFailure::broken(DataPlaneError::ConnectionLost {
                    peer: peer.to_owned(),
                    source,
                })
            })?;
        self.opener.open_exact(&buf).map_err(wire_err)
    }
}
