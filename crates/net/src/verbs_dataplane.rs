//! The verbs (RDMA) backend of the [`DataPlane`]: [`VerbsDataPlane`] on the node that serves an
//! S3 request (the *requester*), [`VerbsResponder`] on the node whose drive holds the shard (the
//! *holder*, served by [`crate::DriveServer`]).
//!
//! # Memory: registered pools
//!
//! Both sides work on [`BufPool`]s whose slabs were registered once with the device
//! ([`BufPool::registered`]): the requester's pool is the node's data pool (the TCP backend and the
//! object layer use the same one: GET stripes land in it, PUT chunks are encoded into it), the
//! holder's is its drive server's pool. Nothing is registered per I/O.
//!
//! # GET (server push, DESIGN.md "Data plane")
//!
//! 1. **Connect** (once per queue pair, again after an error): the requester creates an RC QP,
//!    pre-posts one empty receive per credit ([`VerbsConfig::credits`]) and calls the holder's
//!    [`METHOD_CONNECT`] over the control RPC with `(protocol version, QpEndpoint)` (QPN, PSN,
//!    GID and the requester's port MTU). The holder creates its QP, connects it (path MTU: the
//!    smaller of both) and answers `(version, connection id, its QpEndpoint)`; the requester
//!    connects its side. A peer gets [`VerbsConfig::qp_per_peer`] such connections, used in turn.
//! 2. **Read**: the object layer cuts one pooled buffer into the k chunk slots of a block (the
//!    stripe buffer) and hands each slot to a shard read. The requester takes a credit, records
//!    `tag -> (slot, credit)` in the connection's pending table and calls [`METHOD_READ`] with
//!    `(connection id, tag, address, rkey, length, shard range)` — the address of that slot in the
//!    stripe. The holder reads the range from its drive straight into one of its registered
//!    buffers and RDMA-WRITEs it WITH IMMEDIATE `tag` to that exact place; it answers the call
//!    only after its write completed (an error only if it did not write, or its write failed).
//! 3. **Completion**: the immediate consumes one of the pre-posted receives; the requester's
//!    completion task reposts a receive, takes `tag` out of the pending table and hands the slot
//!    to the waiting read (RC ordering puts the bytes in place before the immediate). The slot
//!    becomes the chunk's `Bytes` without a copy, and the HTTP body is those `Bytes`.
//!
//! # PUT: the holder reads (RDMA READ), the requester never sends
//!
//! The PUT path encodes every block straight into pooled (registered) buffers: parity computed
//! into place, hashes in front of each chunk. For an append, the requester looks the chunk's
//! `Bytes` up in its pool ([`BufPool::remote_of`]) and calls [`METHOD_APPEND`] with `(connection
//! id, tag, writer, sequence number, address, rkey, length)`, keeping the `Bytes` (and so the
//! buffer) in the pending table. The holder waits for the append's turn (every earlier append of
//! that writer is there), takes a registered buffer, RDMA-READs the chunk into it, hands it to the
//! shard writer (which writes appends in sequence order, as for TCP) and answers. The answer ends
//! the requester's hold on the bytes.
//!
//! Why RDMA READ rather than SEND into pre-posted receives: a SEND needs a receive buffer big
//! enough for a whole chunk posted ahead at the holder for every credit of every connection
//! (16 credits x 1 MiB x every peer connection, pinned, mostly idle), and the sender cannot know
//! which of the holder's writers will take it; with READ the holder spends a buffer only when it is
//! ready to write, reads at the pace of its disk, and the bytes go straight from the buffer they
//! were encoded into to the buffer the drive writes from. It costs the holder one round trip
//! (the READ request) per chunk, which for 1 MiB chunks is small next to the transfer itself.
//! The SEND variant was measured against it in the VM (see the note of the change that added this).
//!
//! The holder fetches the appends of one writer in order (append `s` only after `s - 1` has its
//! bytes), so a writer never holds a buffer while it waits for an earlier append that needs one:
//! holders of buffers are always reading or writing, never waiting on each other, whatever the
//! pool size.
//!
//! Why the control RPC carries the requests rather than SENDs on the QP: they are small, the RPC
//! is authenticated, has timeouts and carries the holder's drive errors with their codes, and the
//! holder needs no receive buffers or credits in that direction. The bulk bytes are the part that
//! must avoid copies, and they go by RDMA WRITE and READ.
//!
//! # Credits, bounds, cancellation
//!
//! A credit is one pre-posted receive; a read holds one from before its request leaves until its
//! immediate arrived (the credit lives in the pending entry, not in the read's future), so more
//! WRITE WITH IMMEDIATE than posted receives can never be in flight: no RNR. Appends hold one of
//! as many append permits per connection. Both bound the transfers in flight per peer.
//!
//! Memory lent to a peer (a slot it may write, bytes it may read) is owned by the pending table
//! until the transfer is known to be over — its immediate arrived, or the holder answered — or the
//! QP is known dead: a dropped or timed-out transfer leaves it there. A timeout moves the QP to the
//! error state; the completion task then sees every posted receive flushed (the QP is drained: no
//! more remote access through it) and only then releases what is pending and fails the waiting
//! transfers with [`DataPlaneError::Verbs`]. Buffers the holder posts are protected by
//! `quarry-verbs` itself (they live in the CQ's in-flight table until their completion) and go
//! back to the holder's pool from the completion ([`crate::bufpool::Posted::restore`]).
//!
//! # Failure, back-off and fallback
//!
//! A completion error or timeout breaks the connection (counted in `qp_errors`); the next transfer
//! reconnects (`reconnects`). A peer whose connection cannot be set up is retried with a jittered,
//! doubling back-off ([`VerbsConfig::backoff_initial`] .. [`VerbsConfig::backoff_max`]), failing
//! fast meanwhile. With [`VerbsConfig::fallback`] (`QUARRY_RDMA=auto`) a read that failed on verbs
//! (reads are idempotent), or a peer that cannot be connected, is served by the TCP backend instead
//! and the peer stays on TCP for [`VerbsConfig::fallback_for`] (logged, counted in `fallbacks`);
//! without it (`on`) the error is returned. An append moves to TCP only if no byte of it can have
//! moved (no connection, memory not registered, the holder did not know the connection); one that
//! failed later fails (its shard writer fails, and the PUT goes on if its quorum holds). Drive
//! errors of the holder are returned as they are either way.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use quarry_disk::path::{validate_bucket, validate_key};
use quarry_disk::Drive;
use quarry_verbs::{
    Access, AsyncCompletionQueue, ConnectOptions, Context, GidEntry, Opcode, ProtectionDomain,
    QpCaps, QpEndpoint, QueuePair, RemoteBuf, WrId, ENDPOINT_LEN,
};
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::backoff::PeerBackoff;
use crate::bufpool::{BufPool, PooledBuf, Posted};
use crate::dataplane::{
    DataPlane, DataPlaneError, DataPlaneStats, PeerMetrics, PeerSnapshot, ShardData, ShardRange,
    Transfer,
};
use crate::drive_proto::{self, METHOD_BASE};
use crate::rdma::RDMA_PORT;
use crate::rpc::{codes, RpcClient, RpcError};

/// Control-RPC method: set up an RC connection (in the drive server's range).
pub const METHOD_CONNECT: u16 = METHOD_BASE + 90;
/// Control-RPC method: read a shard range and RDMA-WRITE it into the requester's buffer.
pub const METHOD_READ: u16 = METHOD_BASE + 91;
/// Control-RPC method: RDMA-READ an append's bytes from the requester and write them to a shard
/// writer.
pub const METHOD_APPEND: u16 = METHOD_BASE + 92;
/// Version of the messages above (2: appends).
pub const PROTOCOL_VERSION: u8 = 2;
/// Error code of a holder whose RDMA transfer failed (its connection is gone).
pub const CODE_VERBS_FAILED: u16 = codes::APPLICATION_BASE + 900;
/// Error code of a holder that does not know the connection id (restarted, or dropped it).
pub const CODE_NO_CONNECTION: u16 = codes::APPLICATION_BASE + 901;
/// Error code of a holder with no registered buffer free for the transfer right now: it touched
/// nothing, and the requester moves these bytes over TCP instead (load shedding, not a failure:
/// the connection stays).
pub const CODE_BUSY: u16 = codes::APPLICATION_BASE + 902;

/// How long a holder waits for a free registered buffer before it answers [`CODE_BUSY`]: long
/// enough to ride out a burst, short next to the requester's timeout.
pub const BUSY_WAIT: Duration = Duration::from_millis(250);

/// Access the requester's pool is registered with: holders RDMA-WRITE GET chunks into it and
/// RDMA-READ PUT chunks from it.
pub fn requester_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

/// Access the holder's pool is registered with: drive reads land in it and are RDMA-WRITTEN
/// from it; RDMA READs of appends land in it.
pub fn holder_access() -> Access {
    Access::LOCAL_WRITE
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// Messages (pure encode/decode)

/// A malformed verbs message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("verbs message truncated")]
    Truncated,
    #[error("verbs protocol version {0} (this build speaks {PROTOCOL_VERSION})")]
    Version(u8),
    #[error("{0}")]
    Endpoint(String),
    #[error("verbs message: {0} is not UTF-8")]
    Utf8(&'static str),
    #[error("verbs message: {0} trailing bytes")]
    Trailing(usize),
}

fn need(b: &[u8], n: usize) -> Result<(), MessageError> {
    if b.remaining() < n {
        Err(MessageError::Truncated)
    } else {
        Ok(())
    }
}

fn version(b: &mut &[u8]) -> Result<(), MessageError> {
    need(b, 1)?;
    match b.get_u8() {
        PROTOCOL_VERSION => Ok(()),
        v => Err(MessageError::Version(v)),
    }
}

fn endpoint(b: &mut &[u8]) -> Result<QpEndpoint, MessageError> {
    need(b, ENDPOINT_LEN)?;
    let e = QpEndpoint::decode(&b[..ENDPOINT_LEN])
        .map_err(|e| MessageError::Endpoint(e.to_string()))?;
    b.advance(ENDPOINT_LEN);
    Ok(e)
}

fn done(b: &[u8]) -> Result<(), MessageError> {
    if b.is_empty() {
        Ok(())
    } else {
        Err(MessageError::Trailing(b.len()))
    }
}

/// Requester -> holder: connect to this endpoint (which carries the requester's MTU), replacing
/// connection `replaces` of the same requester (0: none), which the holder then drops.
pub fn encode_connect(ep: &QpEndpoint, replaces: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(9 + ENDPOINT_LEN);
    b.put_u8(PROTOCOL_VERSION);
    b.put_slice(&ep.encode());
    b.put_u64_le(replaces);
    b.freeze()
}

pub fn decode_connect(mut b: &[u8]) -> Result<(QpEndpoint, u64), MessageError> {
    version(&mut b)?;
    let e = endpoint(&mut b)?;
    need(b, 8)?;
    let replaces = b.get_u64_le();
    done(b)?;
    Ok((e, replaces))
}

/// Holder -> requester: the connection id to name in reads, and the holder's endpoint.
pub fn encode_connected(conn: u64, ep: &QpEndpoint) -> Bytes {
    let mut b = BytesMut::with_capacity(9 + ENDPOINT_LEN);
    b.put_u8(PROTOCOL_VERSION);
    b.put_u64_le(conn);
    b.put_slice(&ep.encode());
    b.freeze()
}

pub fn decode_connected(mut b: &[u8]) -> Result<(u64, QpEndpoint), MessageError> {
    version(&mut b)?;
    need(b, 8)?;
    let conn = b.get_u64_le();
    let e = endpoint(&mut b)?;
    done(b)?;
    Ok((conn, e))
}

/// A read request: where to write (`remote`, immediate `tag`) and what (drive and shard range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub conn: u64,
    pub tag: u32,
    pub remote: RemoteBuf,
    pub drive: u16,
    pub bucket: String,
    pub key: String,
    pub data_dir: Uuid,
    pub part: u32,
    pub offset: u64,
    pub len: u32,
}

pub fn encode_read(r: &ReadRequest) -> Bytes {
    let mut b = BytesMut::with_capacity(80 + r.bucket.len() + r.key.len());
    b.put_u8(PROTOCOL_VERSION);
    b.put_u64_le(r.conn);
    b.put_u32_le(r.tag);
    b.put_u64_le(r.remote.addr);
    b.put_u32_le(r.remote.rkey);
    b.put_u64_le(r.remote.len);
    b.put_u16_le(r.drive);
    b.put_slice(r.data_dir.as_bytes());
    b.put_u32_le(r.part);
    b.put_u64_le(r.offset);
    b.put_u32_le(r.len);
    for s in [&r.bucket, &r.key] {
        b.put_u16_le(u16::try_from(s.len()).unwrap_or(u16::MAX));
        b.put_slice(&s.as_bytes()[..s.len().min(u16::MAX as usize)]);
    }
    b.freeze()
}

pub fn decode_read(mut b: &[u8]) -> Result<ReadRequest, MessageError> {
    version(&mut b)?;
    need(b, 8 + 4 + 8 + 4 + 8 + 2 + 16 + 4 + 8 + 4)?;
    let conn = b.get_u64_le();
    let tag = b.get_u32_le();
    let remote = RemoteBuf {
        addr: b.get_u64_le(),
        rkey: b.get_u32_le(),
        len: b.get_u64_le(),
    };
    let drive = b.get_u16_le();
    let mut id = [0u8; 16];
    b.copy_to_slice(&mut id);
    let part = b.get_u32_le();
    let offset = b.get_u64_le();
    let len = b.get_u32_le();
    let mut strs = Vec::with_capacity(2);
    for what in ["bucket", "key"] {
        need(b, 2)?;
        let n = b.get_u16_le() as usize;
        need(b, n)?;
        let s = std::str::from_utf8(&b[..n]).map_err(|_| MessageError::Utf8(what))?;
        strs.push(s.to_owned());
        b.advance(n);
    }
    done(b)?;
    let key = strs.pop().unwrap_or_default();
    let bucket = strs.pop().unwrap_or_default();
    Ok(ReadRequest {
        conn,
        tag,
        remote,
        drive,
        bucket,
        key,
        data_dir: Uuid::from_bytes(id),
        part,
        offset,
        len,
    })
}

/// An append: RDMA-READ `remote` (the requester's bytes) and write them as append `seq` of
/// shard writer `writer` on drive `drive`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendRequest {
    pub conn: u64,
    pub drive: u16,
    pub writer: Uuid,
    pub seq: u64,
    pub remote: RemoteBuf,
}

pub fn encode_append(r: &AppendRequest) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_u8(PROTOCOL_VERSION);
    b.put_u64_le(r.conn);
    b.put_u16_le(r.drive);
    b.put_slice(r.writer.as_bytes());
    b.put_u64_le(r.seq);
    b.put_u64_le(r.remote.addr);
    b.put_u32_le(r.remote.rkey);
    b.put_u64_le(r.remote.len);
    b.freeze()
}

pub fn decode_append(mut b: &[u8]) -> Result<AppendRequest, MessageError> {
    version(&mut b)?;
    need(b, 8 + 2 + 16 + 8 + 8 + 4 + 8)?;
    let conn = b.get_u64_le();
    let drive = b.get_u16_le();
    let mut id = [0u8; 16];
    b.copy_to_slice(&mut id);
    let seq = b.get_u64_le();
    let remote = RemoteBuf {
        addr: b.get_u64_le(),
        rkey: b.get_u32_le(),
        len: b.get_u64_le(),
    };
    done(b)?;
    Ok(AppendRequest {
        conn,
        drive,
        writer: Uuid::from_bytes(id),
        seq,
        remote,
    })
}

// ---------------------------------------------------------------------------------------------
// Device

/// One node's open device: context, protection domain and the GID its queue pairs use.
#[derive(Debug, Clone)]
pub struct VerbsDevice {
    ctx: Context,
    pd: ProtectionDomain,
    gid: GidEntry,
}

impl VerbsDevice {
    /// Opens `device` (or the first one) and takes GID `gid_index` of port 1 when given (it must
    /// be filled), else the RoCE v2 GID of `addr` (any RoCE v2 GID when `addr` is `None`).
    pub fn open(
        device: Option<&str>,
        addr: Option<IpAddr>,
        gid_index: Option<u32>,
    ) -> quarry_verbs::Result<VerbsDevice> {
        let ctx = Context::open(device)?;
        ctx.active_port(RDMA_PORT)?;
        let gid = match gid_index {
            Some(i) => ctx.query_gid(RDMA_PORT, i)?.ok_or_else(|| {
                quarry_verbs::Error::InvalidArgument(format!(
                    "GID index {i} of {} port {RDMA_PORT} is empty",
                    ctx.name()
                ))
            })?,
            None => ctx.select_roce_v2_gid(RDMA_PORT, addr)?,
        };
        let pd = ctx.alloc_pd()?;
        Ok(VerbsDevice { ctx, pd, gid })
    }

    pub fn name(&self) -> &str {
        self.ctx.name()
    }

    /// The protection domain every pool of this node is registered with.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The GID (index, address, type) this node's queue pairs use.
    pub fn gid(&self) -> &GidEntry {
        &self.gid
    }

    /// A CQ (registered with tokio) and a prepared RC QP on it.
    fn qp(
        &self,
        depth: u32,
    ) -> quarry_verbs::Result<(AsyncCompletionQueue, quarry_verbs::PreparedQp)> {
        let cq = self.ctx.create_cq(depth * 2 + 8)?;
        let caps = QpCaps {
            max_send_wr: depth + 4,
            max_recv_wr: depth + 4,
        };
        let qp = self.pd.create_rc_qp(&cq, &cq, RDMA_PORT, &self.gid, caps)?;
        Ok((AsyncCompletionQueue::new(cq)?, qp))
    }
}

// ---------------------------------------------------------------------------------------------
// Holder side

/// Settings of a [`VerbsResponder`].
#[derive(Debug, Clone)]
pub struct ResponderConfig {
    /// Connections kept at most (`QUARRY_RDMA_MAX_CONNECTIONS`); the oldest go first.
    pub max_connections: usize,
    /// Work requests per connection (at least the requesters' credits and append permits).
    pub depth: u32,
    /// Bound on one RDMA WRITE or READ, from post to completion, and on waiting for a buffer.
    pub op_timeout: Duration,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            max_connections: 256,
            depth: 64,
            op_timeout: Duration::from_secs(10),
        }
    }
}

/// A posted work request of the holder: who waits, and the ticket that makes its buffer a
/// pooled buffer again.
struct Waiter {
    tx: oneshot::Sender<(Result<(), String>, Option<PooledBuf>)>,
    posted: Posted,
}

type Waiters = Arc<Mutex<HashMap<WrId, Waiter>>>;

/// One connection of the holder: its QP and the waiters of its posted WRITEs and READs.
struct HolderConn {
    qp: QueuePair,
    waiters: Waiters,
    /// Set when the connection is dropped: its completion task drains the QP and ends.
    closed: watch::Sender<bool>,
    created: Instant,
}

impl Drop for HolderConn {
    fn drop(&mut self) {
        // Flushes whatever is posted; the completion task gives the buffers back to the pool
        // from the flush completions, then ends (it holds the QP until it is drained).
        let _ = self.qp.set_error();
        let _ = self.closed.send(true);
    }
}

/// What a holder posts.
enum HolderOp {
    /// RDMA WRITE WITH IMMEDIATE of the first `len` bytes into `remote`.
    Write {
        len: usize,
        remote: RemoteBuf,
        imm: u32,
    },
    /// RDMA READ of `len` bytes from `remote`.
    Read { len: usize, remote: RemoteBuf },
}

#[derive(Default)]
struct HolderCounters {
    writes: AtomicU64,
    written_bytes: AtomicU64,
    fetches: AtomicU64,
    fetched_bytes: AtomicU64,
    errors: AtomicU64,
    connections_total: AtomicU64,
    /// Transfers answered [`CODE_BUSY`] (no registered buffer free).
    busy: AtomicU64,
}

/// The holder side of the verbs data plane: answers [`METHOD_CONNECT`] and [`METHOD_READ`] for a
/// [`crate::DriveServer`] (see [`crate::DriveServer::with_verbs`]) and fetches the bytes of
/// [`METHOD_APPEND`] for it ([`VerbsResponder::fetch`]).
pub struct VerbsResponder {
    dev: VerbsDevice,
    pool: BufPool,
    config: ResponderConfig,
    conns: Mutex<HashMap<u64, Arc<HolderConn>>>,
    next_conn: AtomicU64,
    counters: HolderCounters,
}

impl fmt::Debug for VerbsResponder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsResponder")
            .field("device", &self.dev.name())
            .field("connections", &lock(&self.conns).len())
            .finish()
    }
}

fn rpc_err(code: u16, m: impl Into<String>) -> RpcError {
    RpcError::remote(code, m)
}

/// The holder's drive read target: the drive fills the pooled buffer, then the `Bytes` it makes
/// of it are dropped and the buffer comes back through the slot, ready to post (no copy).
struct Landing {
    buf: Option<PooledBuf>,
    slot: Arc<Mutex<Option<PooledBuf>>>,
}

/// The owner behind the `Bytes` a [`Landing`] becomes.
struct Landed {
    buf: Option<PooledBuf>,
    slot: Arc<Mutex<Option<PooledBuf>>>,
}

impl AsRef<[u8]> for Landed {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or(&[])
    }
}

impl Drop for Landed {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            *lock(&self.slot) = Some(b);
        }
    }
}

impl quarry_disk::ShardBuf for Landing {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Some(b) => b,
            None => &mut [],
        }
    }

    fn into_bytes(mut self: Box<Self>) -> Bytes {
        Bytes::from_owner(Landed {
            buf: self.buf.take(),
            slot: self.slot.clone(),
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            *lock(&self.slot) = Some(b);
        }
    }
}

impl VerbsResponder {
    /// A holder on `dev` whose drive reads and fetched appends land in `pool`, which must be
    /// registered with `dev`'s protection domain ([`BufPool::registered`], [`holder_access`]).
    pub fn new(
        dev: VerbsDevice,
        pool: BufPool,
        config: ResponderConfig,
    ) -> Result<VerbsResponder, String> {
        if !pool.is_registered() {
            return Err("the verbs holder needs a registered buffer pool".into());
        }
        Ok(VerbsResponder {
            dev,
            pool,
            config,
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(rand::random::<u32>() as u64 + 1),
            counters: HolderCounters::default(),
        })
    }

    /// Whether `method` is one of the verbs data plane's.
    pub fn handles(method: u16) -> bool {
        matches!(method, METHOD_CONNECT | METHOD_READ | METHOD_APPEND)
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        lock(&self.conns).len()
    }

    /// Payload bytes RDMA-WRITTEN to requesters (GET).
    pub fn served_bytes(&self) -> u64 {
        self.counters.written_bytes.load(Ordering::Relaxed)
    }

    /// Payload bytes RDMA-READ from requesters (PUT appends).
    pub fn fetched_bytes(&self) -> u64 {
        self.counters.fetched_bytes.load(Ordering::Relaxed)
    }

    /// The registered pool drive reads and fetched appends land in.
    pub fn pool(&self) -> &BufPool {
        &self.pool
    }

    /// The holder's figures, in the data plane's shape (bytes out: GET chunks written; bytes in:
    /// PUT chunks read).
    pub fn stats(&self) -> DataPlaneStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DataPlaneStats {
            transfers: g(&c.writes) + g(&c.fetches),
            bytes_in: g(&c.fetched_bytes),
            bytes_out: g(&c.written_bytes),
            errors: g(&c.errors),
            connects: g(&c.connections_total),
            ..DataPlaneStats::default()
        }
    }

    /// Answers [`METHOD_CONNECT`] and [`METHOD_READ`] (appends go through
    /// [`VerbsResponder::fetch`], called by the drive server that owns the shard writers).
    pub async fn handle(
        &self,
        method: u16,
        payload: Bytes,
        drives: &[Arc<dyn Drive>],
    ) -> Result<Bytes, RpcError> {
        let r = match method {
            METHOD_CONNECT => self.connect(&payload),
            METHOD_READ => self.read(&payload, drives).await,
            m => Err(RpcError::unknown_method(m)),
        };
        if r.as_ref().is_err_and(|e| e.code() != Some(CODE_BUSY)) {
            self.counters.errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn connect(&self, payload: &[u8]) -> Result<Bytes, RpcError> {
        let (theirs, replaces) =
            decode_connect(payload).map_err(|e| rpc_err(codes::BAD_REQUEST, e.to_string()))?;
        let fail =
            |e: quarry_verbs::Error| rpc_err(CODE_VERBS_FAILED, format!("verbs connect: {e}"));
        let (cq, prepared) = self.dev.qp(self.config.depth).map_err(fail)?;
        let mine = prepared.endpoint();
        let qp = prepared
            .connect(&theirs, &ConnectOptions::default())
            .map_err(fail)?;
        let waiters: Waiters = Arc::default();
        let (closed, closed_rx) = watch::channel(false);
        tokio::spawn(holder_completions(
            cq,
            qp.clone(),
            waiters.clone(),
            closed_rx,
        ));
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let dropped: Vec<Arc<HolderConn>> = {
            let mut conns = lock(&self.conns);
            // The requester's previous connection is dead on its side: drop ours (its QP goes to
            // error and its completion task drains it).
            let mut dropped: Vec<Arc<HolderConn>> = conns.remove(&replaces).into_iter().collect();
            while conns.len() >= self.config.max_connections.max(1) {
                let oldest = conns.iter().min_by_key(|(_, c)| c.created).map(|(k, _)| *k);
                match oldest.and_then(|k| conns.remove(&k)) {
                    Some(c) => dropped.push(c),
                    None => break,
                }
            }
            conns.insert(
                id,
                Arc::new(HolderConn {
                    qp,
                    waiters,
                    closed,
                    created: Instant::now(),
                }),
            );
            dropped
        };
        drop(dropped);
        self.counters
            .connections_total
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(conn = id, remote = %theirs, "verbs: accepted a connection");
        Ok(encode_connected(id, &mine))
    }

    fn conn(&self, id: u64) -> Result<Arc<HolderConn>, RpcError> {
        lock(&self.conns)
            .get(&id)
            .cloned()
            .ok_or_else(|| rpc_err(CODE_NO_CONNECTION, format!("no verbs connection {id}")))
    }

    fn drop_conn(&self, id: u64) {
        let c = lock(&self.conns).remove(&id);
        drop(c);
    }

    /// A free registered buffer, or [`CODE_BUSY`] after [`BUSY_WAIT`]: a holder never makes a
    /// requester wait out its timeout for memory (the requester sends those bytes over TCP).
    async fn buffer(&self) -> Result<PooledBuf, RpcError> {
        if let Some(b) = self.pool.try_get() {
            return Ok(b);
        }
        tokio::time::timeout(BUSY_WAIT, self.pool.get())
            .await
            .map_err(|_| {
                self.counters.busy.fetch_add(1, Ordering::Relaxed);
                rpc_err(
                    CODE_BUSY,
                    format!("no registered buffer free within {BUSY_WAIT:?}"),
                )
            })
    }

    async fn read(&self, payload: &[u8], drives: &[Arc<dyn Drive>]) -> Result<Bytes, RpcError> {
        let r = decode_read(payload).map_err(|e| rpc_err(codes::BAD_REQUEST, e.to_string()))?;
        validate_bucket(&r.bucket)
            .and_then(|_| validate_key(&r.key))
            .map_err(|e| {
                let (code, message) = drive_proto::encode_drive_error(&e);
                rpc_err(code, message)
            })?;
        let conn = self.conn(r.conn)?;
        let d = drives.get(r.drive as usize).cloned().ok_or_else(|| {
            rpc_err(
                drive_proto::codes::NO_SUCH_DRIVE,
                format!("no drive {}", r.drive),
            )
        })?;
        let len = r.len as usize;
        if len > self.pool.buf_size() || r.remote.len < u64::from(r.len) {
            return Err(rpc_err(
                codes::BAD_REQUEST,
                format!(
                    "a verbs read of {len} bytes into {} does not fit",
                    r.remote.len
                ),
            ));
        }
        let mut buf = self.buffer().await?;
        buf.set_len(len);
        // The drive reads straight into the registered buffer.
        let slot = Arc::new(Mutex::new(None));
        let target = Landing {
            buf: Some(buf),
            slot: slot.clone(),
        };
        let read = d
            .read_shard_into(
                &r.bucket,
                &r.key,
                r.data_dir,
                r.part,
                r.offset,
                Box::new(target),
            )
            .await
            .map(|bytes| bytes.len());
        let buf = lock(&slot).take();
        let n = read.map_err(|e| {
            let (code, message) = drive_proto::encode_drive_error(&e);
            rpc_err(code, message)
        })?;
        let Some(buf) = buf else {
            return Err(rpc_err(codes::INTERNAL, "the drive kept the read buffer"));
        };
        if n != len {
            return Err(rpc_err(
                codes::INTERNAL,
                format!("the drive read {n} of {len} bytes"),
            ));
        }
        let op = HolderOp::Write {
            len,
            remote: r.remote,
            imm: r.tag,
        };
        drop(self.post(&conn, r.conn, buf, op).await?);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .written_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        Ok(Bytes::copy_from_slice(&(len as u32).to_le_bytes()))
    }

    /// The bytes of an append, RDMA-READ from the requester into a registered buffer of this
    /// node's pool, as `Bytes` over that buffer. The caller (the drive server) has waited for the
    /// append's turn.
    pub async fn fetch(&self, req: &AppendRequest) -> Result<Bytes, RpcError> {
        let conn = self.conn(req.conn)?;
        let len = usize::try_from(req.remote.len)
            .ok()
            .filter(|&n| n <= self.pool.buf_size())
            .ok_or_else(|| {
                rpc_err(
                    codes::BAD_REQUEST,
                    format!(
                        "a verbs append of {} bytes exceeds the {}-byte buffers",
                        req.remote.len,
                        self.pool.buf_size()
                    ),
                )
            })?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        let buf = self.buffer().await?;
        let op = HolderOp::Read {
            len,
            remote: req.remote,
        };
        let r = self.post(&conn, req.conn, buf, op).await;
        let mut buf = match r {
            Ok(b) => b,
            Err(e) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
        buf.set_len(len);
        self.counters.fetches.fetch_add(1, Ordering::Relaxed);
        self.counters
            .fetched_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        Ok(buf.into_bytes())
    }

    /// Posts `op` from / into `buf` on `conn` and waits for its completion; the buffer comes back
    /// from it. Any failure drops the connection (its QP goes to error; the buffer returns to the
    /// pool from the flush).
    async fn post(
        &self,
        conn: &HolderConn,
        id: u64,
        buf: PooledBuf,
        op: HolderOp,
    ) -> Result<PooledBuf, RpcError> {
        let (mr, posted) = buf
            .into_posted()
            .map_err(|_| rpc_err(codes::INTERNAL, "a holder buffer is not registered"))?;
        let (tx, rx) = oneshot::channel();
        {
            // Post and register under one lock, so the completion task cannot miss the waiter.
            let mut waiters = lock(&conn.waiters);
            let r = match op {
                HolderOp::Write { len, remote, imm } => {
                    conn.qp.post_write(mr, len, remote, Some(imm))
                }
                HolderOp::Read { len, remote } => conn.qp.post_read(mr, len, remote),
            };
            match r {
                Ok(wr) => {
                    waiters.insert(wr, Waiter { tx, posted });
                }
                Err(e) => {
                    drop(waiters);
                    if let Some(mr) = e.buf {
                        drop(posted.restore(mr));
                    }
                    self.drop_conn(id);
                    return Err(rpc_err(
                        CODE_VERBS_FAILED,
                        format!("post RDMA request: {}", e.error),
                    ));
                }
            }
        }
        let timeout = self.config.op_timeout;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok((Ok(()), Some(buf)))) => Ok(buf),
            Ok(Ok((Err(e), _))) => {
                self.drop_conn(id);
                Err(rpc_err(
                    CODE_VERBS_FAILED,
                    format!("RDMA request failed: {e}"),
                ))
            }
            Ok(Ok((Ok(()), None))) | Ok(Err(_)) => {
                self.drop_conn(id);
                Err(rpc_err(
                    CODE_VERBS_FAILED,
                    "the connection closed under the RDMA request",
                ))
            }
            Err(_) => {
                // The buffer stays in the CQ table until the flush gives it back to the pool.
                self.drop_conn(id);
                Err(rpc_err(
                    CODE_VERBS_FAILED,
                    format!("RDMA request not completed within {timeout:?}"),
                ))
            }
        }
    }
}

/// The holder's completion loop: each completion goes to its waiter with its buffer (made a
/// pooled buffer again), or back to the pool when nobody waits. Ends once the connection is
/// closed or failed and every posted request has come back.
async fn holder_completions(
    cq: AsyncCompletionQueue,
    qp: QueuePair,
    waiters: Waiters,
    mut closed: watch::Receiver<bool>,
) {
    let mut out = Vec::new();
    let mut failed = false;
    loop {
        if (failed || *closed.borrow()) && qp.in_flight() == 0 {
            break;
        }
        out.clear();
        let open = !*closed.borrow();
        tokio::select! {
            r = cq.next(&mut out, 32) => {
                if let Err(e) = r {
                    // Nothing more can be polled: the buffers still posted are freed with the
                    // QP (after ibv_destroy_qp), and counted as lost by their tickets.
                    tracing::error!(error = %e, "verbs holder: polling the CQ failed");
                    let _ = qp.set_error();
                    break;
                }
            }
            _ = closed.changed(), if open => continue,
        }
        for mut c in out.drain(..) {
            failed |= !c.is_ok();
            let status = c.result().map_err(|e| e.to_string());
            let w = lock(&waiters).remove(&c.wr_id);
            match (w, c.buf.take()) {
                (Some(w), Some(mr)) => {
                    let buf = w.posted.restore(mr);
                    // A waiter that gave up drops the buffer: it goes back to the pool.
                    let _ = w.tx.send((status, Some(buf)));
                }
                (Some(w), None) => {
                    let _ = w.tx.send((status, None));
                }
                (None, _) => {
                    tracing::error!(wr = c.wr_id.0, "verbs holder: a completion nobody posted");
                }
            }
        }
        if failed {
            let _ = qp.set_error();
        }
    }
    // Waiters left (none, unless polling failed) learn that their request is gone.
    lock(&waiters).clear();
}

// ---------------------------------------------------------------------------------------------
// Requester side

/// Settings of a [`VerbsDataPlane`].
#[derive(Debug, Clone)]
pub struct VerbsConfig {
    /// Receives pre-posted per connection: the bound on reads in flight per connection (and as
    /// many appends).
    pub credits: u32,
    /// RC connections kept to each peer, used in turn (`QUARRY_RDMA_QP_PER_PEER`).
    pub qp_per_peer: usize,
    /// Bound on one transfer: waiting for a credit, the request, the completion.
    pub transfer_timeout: Duration,
    /// `QUARRY_RDMA=auto`: on a verbs failure move to TCP and keep the peer on TCP for
    /// `fallback_for`; `false` (`on`): return the error.
    pub fallback: bool,
    pub fallback_for: Duration,
    /// Back-off between attempts to connect a peer whose connection set-up failed.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            credits: 16,
            qp_per_peer: 2,
            transfer_timeout: Duration::from_secs(10),
            fallback: true,
            fallback_for: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// Counters of the verbs backend (the requester side).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerbsStats {
    /// Reads completed over verbs, and their payload bytes.
    pub reads: u64,
    pub bytes: u64,
    /// Appends completed over verbs (the holder RDMA-READ them), and their payload bytes.
    pub appends: u64,
    pub append_bytes: u64,
    /// Reads and appends served by the TCP backend instead (fallback, or memory that is not
    /// registered).
    pub tcp_reads: u64,
    pub tcp_appends: u64,
    /// Connections made (the first per queue pair and every reconnect).
    pub connects: u64,
    pub reconnects: u64,
    /// Transfers that failed on the verbs path (QP in error, completion error, timeout, failed
    /// request); each breaks its connection.
    pub qp_errors: u64,
    /// Times a peer was switched to TCP.
    pub fallbacks: u64,
    pub errors: u64,
    pub timeouts: u64,
    /// Transfers refused at once because the peer's connection set-up is backing off.
    pub fast_failures: u64,
    /// Transfers the holder answered busy (no registered buffer free), moved over TCP instead.
    pub busy: u64,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    bytes: AtomicU64,
    appends: AtomicU64,
    append_bytes: AtomicU64,
    tcp_reads: AtomicU64,
    tcp_appends: AtomicU64,
    connects: AtomicU64,
    reconnects: AtomicU64,
    qp_errors: AtomicU64,
    fallbacks: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    fast_failures: AtomicU64,
    busy: AtomicU64,
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// What a read's completion delivers: its slot and the bytes written, or why the QP failed.
type Delivery = Result<(PooledBuf, u32), String>;

/// Memory lent to the peer for one transfer.
enum Lent {
    /// A slot the holder RDMA-WRITEs into, with the read's credit.
    Slot {
        buf: PooledBuf,
        _credit: OwnedSemaphorePermit,
        tx: oneshot::Sender<Delivery>,
    },
    /// Bytes the holder RDMA-READs (an append), with its permit.
    Source {
        _data: Bytes,
        _permit: OwnedSemaphorePermit,
    },
}

/// What a connection has lent to its peer, by tag (the immediate data of the peer's WRITE, or the
/// key of an append), until it is settled or the QP is known drained. Pure bookkeeping, no verbs:
/// the invariants below are unit-tested.
///
/// - A tag is never given to two loans at once (tags wrap after 2^32 loans; one still lent is
///   skipped), so an immediate always settles the loan it was meant for.
/// - Once [`LendTable::drain`] ran (the QP is dead and drained), nothing can be lent any more, so
///   no loan can be left behind a drain.
/// - Whatever a loan holds (a slot and its credit, or an append's bytes and its permit) is held
///   until it is settled or drained, not until the future that lent it ends.
struct LendTable<T> {
    /// Set once the QP is dead: nothing may be added any more.
    broken: bool,
    map: HashMap<u32, T>,
    next_tag: u32,
}

impl<T> LendTable<T> {
    fn new() -> Self {
        LendTable {
            broken: false,
            map: HashMap::new(),
            next_tag: 1,
        }
    }

    /// Lends `item` under a tag no other loan has; `Err(item)` once drained.
    fn lend(&mut self, item: T) -> Result<u32, T> {
        if self.broken {
            return Err(item);
        }
        // At most `map.len()` tags are taken, so this finds a free one within that many steps.
        let mut tag = self.next_tag;
        while self.map.contains_key(&tag) {
            tag = tag.wrapping_add(1);
        }
        self.next_tag = tag.wrapping_add(1);
        self.map.insert(tag, item);
        Ok(tag)
    }

    fn settle(&mut self, tag: u32) -> Option<T> {
        self.map.remove(&tag)
    }

    fn is_lent(&self, tag: u32) -> bool {
        self.map.contains_key(&tag)
    }

    /// Everything still lent; nothing can be lent from now on.
    fn drain(&mut self) -> Vec<T> {
        self.broken = true;
        self.map.drain().map(|(_, v)| v).collect()
    }
}

type PendingTable = LendTable<Lent>;

/// One requester connection (RC queue pair) to a peer.
struct Conn {
    id: u64,
    qp: QueuePair,
    credits: Arc<Semaphore>,
    appends: Arc<Semaphore>,
    pending: Arc<Mutex<PendingTable>>,
    dead: Arc<AtomicBool>,
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Moves the QP to error; the completion task drains it and releases what is pending.
    fn break_qp(&self) {
        let _ = self.qp.set_error();
    }

    /// Lends `lent` to the peer under a fresh tag; `None` if the QP is already dead.
    fn lend(&self, lent: Lent) -> Option<u32> {
        lock(&self.pending).lend(lent).ok()
    }

    /// Takes back what was lent under `tag`: the peer is known to be done with it.
    fn settle(&self, tag: u32) -> Option<Lent> {
        lock(&self.pending).settle(tag)
    }
}

/// A transfer whose memory is lent to the peer: if dropped before it is settled (its future was
/// cancelled), the QP is moved to error so the memory comes back only after the drain.
struct Unsettled<'a> {
    conn: &'a Conn,
    tag: u32,
    armed: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if self.armed && lock(&self.conn.pending).is_lent(self.tag) {
            self.conn.break_qp();
        }
    }
}

/// One queue pair slot of a peer.
#[derive(Default)]
struct QpSlot {
    conn: Option<Arc<Conn>>,
    /// Id (at the holder) of the slot's last connection, replaced by the next one.
    last_conn: u64,
    connected_before: bool,
}

#[derive(Default)]
struct Health {
    /// While set and in the future, the peer is served over TCP (auto).
    tcp_until: Option<Instant>,
    /// Failed connection set-ups in a row, and when the next attempt may be made.
    backoff: PeerBackoff,
}

/// Everything the requester keeps about one peer.
struct Peer {
    slots: Vec<tokio::sync::Mutex<QpSlot>>,
    next: AtomicUsize,
    health: Mutex<Health>,
    metrics: Arc<crate::dataplane::PeerCounters>,
}

/// Why an append over verbs did not happen.
enum AppendFailure {
    /// No byte can have moved: the append may go over TCP.
    NothingMoved(DataPlaneError),
    /// The holder refused it (a drive error): as it is.
    Refused(DataPlaneError),
    /// The holder had no registered buffer free: nothing moved, the connection is fine; these
    /// bytes go over TCP.
    Busy,
    /// The connection failed under it: its bytes may have moved; it fails.
    Broken(DataPlaneError),
}

/// The verbs backend of [`DataPlane`] (see the module docs).
pub struct VerbsDataPlane {
    dev: VerbsDevice,
    rpc: RpcClient,
    tcp: Arc<dyn DataPlane>,
    pool: BufPool,
    config: VerbsConfig,
    peers: Mutex<HashMap<String, Arc<Peer>>>,
    counters: Counters,
    metrics: PeerMetrics,
    /// This node's holder side, for its figures ([`DataPlane::holder_stats`]).
    holder: std::sync::OnceLock<Arc<VerbsResponder>>,
}

impl fmt::Debug for VerbsDataPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerbsDataPlane")
            .field("device", &self.dev.name())
            .field("pool", &self.pool)
            .field("stats", &self.verbs_stats())
            .finish()
    }
}

fn verr(peer: &str, reason: impl Into<String>) -> DataPlaneError {
    DataPlaneError::Verbs {
        peer: peer.to_owned(),
        reason: reason.into(),
    }
}

impl VerbsDataPlane {
    /// A verbs data plane on `dev`, calling peers over `rpc`, with `tcp` for fallback and for
    /// memory that is not registered. `pool` is the node's data pool, registered with `dev`'s
    /// protection domain ([`requester_access`]); `tcp` should read into the same pool.
    pub fn new(
        dev: VerbsDevice,
        rpc: RpcClient,
        tcp: Arc<dyn DataPlane>,
        pool: BufPool,
        config: VerbsConfig,
    ) -> Result<VerbsDataPlane, String> {
        if !pool.is_registered() {
            return Err("the verbs data plane needs a registered buffer pool".into());
        }
        Ok(VerbsDataPlane {
            dev,
            rpc,
            tcp,
            pool,
            config,
            peers: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            metrics: PeerMetrics::new("verbs"),
            holder: std::sync::OnceLock::new(),
        })
    }

    /// Reports `holder` (this node's holder side) with this data plane's figures.
    pub fn with_holder(self, holder: Arc<VerbsResponder>) -> Self {
        let _ = self.holder.set(holder);
        self
    }

    pub fn verbs_stats(&self) -> VerbsStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        VerbsStats {
            reads: g(&c.reads),
            bytes: g(&c.bytes),
            appends: g(&c.appends),
            append_bytes: g(&c.append_bytes),
            tcp_reads: g(&c.tcp_reads),
            tcp_appends: g(&c.tcp_appends),
            connects: g(&c.connects),
            reconnects: g(&c.reconnects),
            qp_errors: g(&c.qp_errors),
            fallbacks: g(&c.fallbacks),
            errors: g(&c.errors),
            timeouts: g(&c.timeouts),
            fast_failures: g(&c.fast_failures),
            busy: g(&c.busy),
        }
    }

    pub fn config(&self) -> &VerbsConfig {
        &self.config
    }

    /// Moves the QPs to `peer` to the error state, as a completion error would (fault injection
    /// for tests): transfers in flight fail with [`DataPlaneError::Verbs`], the next transfer
    /// reconnects (or falls back to TCP). `false` if there is no connection.
    pub fn inject_qp_error(&self, peer: &str) -> bool {
        self.break_peer(Some(peer)) > 0
    }

    /// Moves the live QPs of `peer` (of every peer with `None`) to error; how many.
    fn break_peer(&self, peer: Option<&str>) -> usize {
        let peers: Vec<Arc<Peer>> = lock(&self.peers)
            .iter()
            .filter(|(k, _)| peer.is_none_or(|p| p == k.as_str()))
            .map(|(_, v)| v.clone())
            .collect();
        let mut n = 0;
        for p in peers {
            for slot in &p.slots {
                // A slot being connected right now is skipped: its connection is new anyway.
                if let Ok(s) = slot.try_lock() {
                    if let Some(c) = s.conn.as_ref().filter(|c| !c.is_dead()) {
                        if c.qp.set_error().is_ok() {
                            n += 1;
                        }
                    }
                }
            }
        }
        n
    }

    fn peer(&self, peer: &str) -> Arc<Peer> {
        lock(&self.peers)
            .entry(peer.to_owned())
            .or_insert_with(|| {
                Arc::new(Peer {
                    slots: (0..self.config.qp_per_peer.max(1))
                        .map(|_| tokio::sync::Mutex::new(QpSlot::default()))
                        .collect(),
                    next: AtomicUsize::new(0),
                    health: Mutex::new(Health::default()),
                    metrics: self.metrics.peer(peer),
                })
            })
            .clone()
    }

    /// A live connection to `peer` (the next of its slots, connected if needed); `Ok(None)`: use
    /// TCP for now.
    async fn conn(&self, peer: &str, p: &Peer) -> Result<Option<Arc<Conn>>, DataPlaneError> {
        {
            let mut h = lock(&p.health);
            let now = Instant::now();
            if let Some(until) = h.tcp_until {
                if now < until {
                    return Ok(None);
                }
                h.tcp_until = None;
            }
            if let Some(d) = h.backoff.down(now) {
                bump(&self.counters.fast_failures);
                return Err(DataPlaneError::PeerDown {
                    peer: peer.to_owned(),
                    retry_in: d.retry_in,
                    last_error: format!(
                        "verbs connection set-up failed {} time(s) in a row: {}",
                        d.failures, d.last_error
                    ),
                });
            }
        }
        let i = p.next.fetch_add(1, Ordering::Relaxed) % p.slots.len();
        let mut s = p.slots[i].lock().await;
        if let Some(c) = &s.conn {
            if !c.is_dead() {
                return Ok(Some(c.clone()));
            }
        }
        s.conn = None;
        let replaces = s.last_conn;
        let made = match tokio::time::timeout(
            self.config.transfer_timeout,
            self.connect(peer, replaces, &p.metrics),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(verr(peer, "connecting timed out")),
        };
        match made {
            Ok(c) => {
                s.last_conn = c.id;
                bump(&self.counters.connects);
                bump(&p.metrics.connects);
                if s.connected_before {
                    bump(&self.counters.reconnects);
                    bump(&p.metrics.reconnects);
                }
                s.connected_before = true;
                s.conn = Some(c.clone());
                lock(&p.health).backoff.succeeded();
                Ok(Some(c))
            }
            Err(e) => {
                drop(s);
                p.metrics.error(e.kind());
                let mut h = lock(&p.health);
                let delay =
                    h.backoff
                        .failed(self.config.backoff_initial, self.config.backoff_max, &e);
                if self.config.fallback {
                    self.fall_back(peer, p, &mut h, &e);
                    Ok(None)
                } else {
                    tracing::warn!(peer, failures = h.backoff.failures(), retry_in = ?delay, error = %e, "RDMA: cannot connect to this peer over verbs");
                    Err(e)
                }
            }
        }
    }

    /// Serves `peer` over TCP for a while (auto), saying so once per switch.
    fn fall_back(&self, peer: &str, p: &Peer, h: &mut Health, why: &DataPlaneError) {
        if h.tcp_until.is_none() {
            bump(&self.counters.fallbacks);
            bump(&p.metrics.fallbacks);
            tracing::warn!(peer, error = %why, "RDMA: verbs failed with this peer; using TCP for {:?}", self.config.fallback_for);
        }
        h.tcp_until = Some(Instant::now() + self.config.fallback_for);
    }

    async fn connect(
        &self,
        peer: &str,
        replaces: u64,
        metrics: &Arc<crate::dataplane::PeerCounters>,
    ) -> Result<Arc<Conn>, DataPlaneError> {
        let credits = self.config.credits.max(1);
        let (cq, prepared) = self
            .dev
            .qp(credits * 2)
            .map_err(|e| verr(peer, format!("create QP: {e}")))?;
        for _ in 0..credits {
            prepared
                .post_recv_empty()
                .map_err(|e| verr(peer, format!("post receive: {}", e.error)))?;
        }
        let answer = self
            .rpc
            .call_with_timeout(
                peer,
                METHOD_CONNECT,
                encode_connect(&prepared.endpoint(), replaces),
                self.config.transfer_timeout,
            )
            .await
            .map_err(|e| rpc_to_dp(peer, e))?;
        let (id, theirs) =
            decode_connected(&answer).map_err(|e| verr(peer, format!("connect answer: {e}")))?;
        let qp = prepared
            .connect(&theirs, &ConnectOptions::default())
            .map_err(|e| verr(peer, format!("connect QP: {e}")))?;
        let pending = Arc::new(Mutex::new(PendingTable::new()));
        let dead = Arc::new(AtomicBool::new(false));
        let conn = Arc::new(Conn {
            id,
            qp: qp.clone(),
            credits: Arc::new(Semaphore::new(credits as usize)),
            appends: Arc::new(Semaphore::new(credits as usize)),
            pending: pending.clone(),
            dead: dead.clone(),
        });
        metrics.active.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(requester_completions(
            cq,
            qp,
            pending,
            dead,
            peer.to_owned(),
            metrics.clone(),
        ));
        tracing::debug!(peer, conn = id, remote = %theirs, "verbs: connected");
        Ok(conn)
    }

    /// One piece (one registered buffer) over verbs: the holder writes `range` into `buf`.
    async fn read_piece(
        &self,
        peer: &str,
        conn: &Conn,
        drive: u16,
        range: &ShardRange<'_>,
        buf: PooledBuf,
    ) -> Result<PooledBuf, DataPlaneError> {
        let credit = conn
            .credits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| verr(peer, "connection closed"))?;
        let len = range.len;
        let remote = buf.remote(0..len).ok_or_else(|| DataPlaneError::TooLarge {
            len,
            reason: "larger than its registered buffer".into(),
        })?;
        let (tx, rx) = oneshot::channel();
        let tag = conn
            .lend(Lent::Slot {
                buf,
                _credit: credit,
                tx,
            })
            .ok_or_else(|| verr(peer, "the queue pair is in error"))?;
        // From here until the read is settled, dropping this future (cancellation) gives up the
        // QP: the holder may still write into the lent slot, so it is released only after the
        // drain.
        let mut guard = Unsettled {
            conn,
            tag,
            armed: true,
        };
        let req = ReadRequest {
            conn: conn.id,
            tag,
            remote,
            drive,
            bucket: range.bucket.to_owned(),
            key: range.key.to_owned(),
            data_dir: range.data_dir,
            part: range.part,
            offset: range.offset,
            len: len as u32,
        };
        let call = self.rpc.call_with_timeout(
            peer,
            METHOD_READ,
            encode_read(&req),
            self.config.transfer_timeout,
        );
        tokio::pin!(call);
        let mut rx = rx;
        // The immediate may arrive before the holder's answer (the bytes are final then), and a
        // QP in error fails the read at once, without waiting for the holder to notice.
        let answer = tokio::select! {
            a = &mut call => a,
            d = &mut rx => {
                guard.armed = false;
                return delivered(peer, d, len);
            }
        };
        match answer {
            Ok(_) => {}
            Err(RpcError::Remote { code, message })
                if code != CODE_VERBS_FAILED && code != CODE_NO_CONNECTION =>
            {
                // The holder did not write: the slot and credit are free again.
                guard.armed = false;
                drop(conn.settle(tag));
                if code == CODE_BUSY {
                    return Err(DataPlaneError::Busy {
                        peer: peer.to_owned(),
                        reason: message,
                    });
                }
                if code == codes::UNKNOWN_METHOD {
                    return Err(verr(
                        peer,
                        format!("peer does not serve verbs reads: {message}"),
                    ));
                }
                return Err(DataPlaneError::Remote {
                    peer: peer.to_owned(),
                    code,
                    message,
                });
            }
            Err(e) => {
                // The holder may or may not have written: the QP is given up (drained, then the
                // slot is released).
                conn.break_qp();
                return Err(verr(peer, format!("read request: {e}")));
            }
        }
        match tokio::time::timeout(self.config.transfer_timeout, rx).await {
            Ok(d) => {
                guard.armed = false;
                delivered(peer, d, len)
            }
            Err(_) => {
                conn.break_qp();
                bump(&self.counters.timeouts);
                Err(verr(peer, "no completion in time"))
            }
        }
    }

    /// Reads `range` into the registered buffers `dst` over `conn` (one piece per buffer).
    async fn read_verbs(
        &self,
        peer: &str,
        conn: &Conn,
        drive: u16,
        range: &ShardRange<'_>,
        mut dst: Vec<PooledBuf>,
    ) -> Result<Vec<PooledBuf>, DataPlaneError> {
        let plan = crate::dataplane::plan_pieces(range, &dst)?;
        dst.truncate(plan.len());
        let reads = plan.iter().zip(dst).map(|(&(offset, len), buf)| {
            let piece = ShardRange {
                offset,
                len,
                ..*range
            };
            async move { self.read_piece(peer, conn, drive, &piece, buf).await }
        });
        let after = self.config.transfer_timeout * 2;
        let got = tokio::time::timeout(after, futures::future::join_all(reads))
            .await
            .map_err(|_| DataPlaneError::Timeout {
                peer: peer.to_owned(),
                after,
            })?;
        got.into_iter().collect()
    }

    /// One append over verbs: the holder RDMA-READs `data` (at `remote`) and writes it.
    async fn append_verbs(
        &self,
        peer: &str,
        conn: &Conn,
        req: AppendRequest,
        data: Bytes,
    ) -> Result<(), AppendFailure> {
        let permit = conn
            .appends
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| AppendFailure::NothingMoved(verr(peer, "connection closed")))?;
        let tag = conn
            .lend(Lent::Source {
                _data: data,
                _permit: permit,
            })
            .ok_or_else(|| AppendFailure::NothingMoved(verr(peer, "the queue pair is in error")))?;
        let mut guard = Unsettled {
            conn,
            tag,
            armed: true,
        };
        let req = AppendRequest {
            conn: conn.id,
            ..req
        };
        let answer = self
            .rpc
            .call_with_timeout(
                peer,
                METHOD_APPEND,
                encode_append(&req),
                self.config.transfer_timeout,
            )
            .await;
        match answer {
            Ok(_) => {
                guard.armed = false;
                drop(conn.settle(tag));
                Ok(())
            }
            Err(RpcError::Remote { code, .. }) if code == CODE_BUSY => {
                guard.armed = false;
                drop(conn.settle(tag));
                Err(AppendFailure::Busy)
            }
            Err(RpcError::Remote { code, message })
                if code == CODE_NO_CONNECTION || code == codes::UNKNOWN_METHOD =>
            {
                // The holder did not touch the bytes: it does not know the connection (it
                // restarted), or does not serve verbs appends.
                guard.armed = false;
                drop(conn.settle(tag));
                if code == CODE_NO_CONNECTION {
                    conn.break_qp();
                }
                Err(AppendFailure::NothingMoved(verr(
                    peer,
                    format!("append refused ({code}): {message}"),
                )))
            }
            Err(RpcError::Remote { code, message }) if code != CODE_VERBS_FAILED => {
                // A drive or writer error: the holder answered after it was done with the bytes.
                guard.armed = false;
                drop(conn.settle(tag));
                Err(AppendFailure::Refused(DataPlaneError::Remote {
                    peer: peer.to_owned(),
                    code,
                    message,
                }))
            }
            Err(e) => {
                // The holder may still be reading: the QP is given up and the bytes stay lent
                // until it is drained.
                conn.break_qp();
                Err(AppendFailure::Broken(verr(peer, format!("append: {e}"))))
            }
        }
    }

    /// Counts a failed verbs transfer; it breaks its connection and, in auto mode, moves the peer
    /// to TCP for a while.
    fn transfer_failed(&self, peer: &str, p: &Peer, conn: &Conn, e: &DataPlaneError) {
        bump(&self.counters.errors);
        bump(&self.counters.qp_errors);
        p.metrics.error(e.kind());
        conn.break_qp();
        if self.config.fallback {
            self.fall_back(peer, p, &mut lock(&p.health), e);
        }
    }

    async fn tcp_read(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: Option<Vec<PooledBuf>>,
    ) -> Result<ShardData, DataPlaneError> {
        bump(&self.counters.tcp_reads);
        // Without the caller's buffers (they are still lent over a broken QP), fresh ones that
        // never wait on the pool: a read served instead of a failed one must not queue behind
        // the stripes that wait for it.
        let dst = dst.unwrap_or_else(|| self.pool.get_or_alloc_for(range.len));
        self.tcp.read_shard_into(peer, drive, range, dst).await
    }
}

fn rpc_to_dp(peer: &str, e: RpcError) -> DataPlaneError {
    match e {
        RpcError::Remote { code, message } => {
            verr(peer, format!("peer refused ({code}): {message}"))
        }
        RpcError::Timeout { after, .. } => DataPlaneError::Timeout {
            peer: peer.to_owned(),
            after,
        },
        // The peer cannot be reached at all: unreachable, as for TCP (its drives are offline).
        other if other.is_unreachable() => DataPlaneError::Connect {
            peer: peer.to_owned(),
            source: std::io::Error::other(other.to_string()),
        },
        other => verr(peer, other.to_string()),
    }
}

/// What the completion task delivered for one read: its slot, filled, or why the QP failed.
fn delivered(
    peer: &str,
    d: Result<Delivery, oneshot::error::RecvError>,
    len: usize,
) -> Result<PooledBuf, DataPlaneError> {
    match d {
        Ok(Ok((mut buf, n))) if n as usize == len => {
            buf.set_len(len);
            Ok(buf)
        }
        Ok(Ok((_, n))) => Err(verr(peer, format!("{n} bytes written, {len} expected"))),
        Ok(Err(reason)) => Err(verr(peer, reason)),
        Err(_) => Err(verr(peer, "connection closed")),
    }
}

/// The requester's completion loop: each immediate hands its slot to the waiting read (after
/// reposting the receive). A failed completion (a flush after `set_error`, or a real error) marks
/// the connection dead; once every posted receive is flushed (the QP is drained and can no longer
/// be reached through), what is lent goes back and the transfers waiting on it fail.
async fn requester_completions(
    cq: AsyncCompletionQueue,
    qp: QueuePair,
    pending: Arc<Mutex<PendingTable>>,
    dead: Arc<AtomicBool>,
    peer: String,
    metrics: Arc<crate::dataplane::PeerCounters>,
) {
    let mut out = Vec::new();
    let mut error: Option<String> = None;
    loop {
        out.clear();
        if let Err(e) = cq.next(&mut out, 32).await {
            error.get_or_insert(format!("polling the CQ: {e}"));
            let _ = qp.set_error();
            break;
        }
        for c in out.drain(..) {
            match (&c.status, c.opcode, c.imm) {
                (Ok(()), Opcode::RecvRdmaWithImm, Some(tag)) if error.is_none() => {
                    if let Err(e) = qp.post_recv_empty() {
                        error.get_or_insert(format!("repost receive: {}", e.error));
                        let _ = qp.set_error();
                    }
                    let lent = lock(&pending).settle(tag);
                    if let Some(Lent::Slot { buf, tx, .. }) = lent {
                        // A read that gave up drops the slot: it goes home.
                        let _ = tx.send(Ok((buf, c.byte_len)));
                    }
                }
                (Err(e), ..) => {
                    if error.is_none() && !e.is_flush() {
                        tracing::warn!(peer, error = %e, "verbs: completion error; the connection is dropped");
                    }
                    error.get_or_insert(format!("completion error: {e}"));
                    dead.store(true, Ordering::Release);
                    let _ = qp.set_error();
                }
                _ => {}
            }
        }
        if error.is_some() && qp.in_flight() == 0 {
            break;
        }
    }
    dead.store(true, Ordering::Release);
    metrics.active.fetch_sub(1, Ordering::Relaxed);
    let reason = format!(
        "the queue pair is in error ({})",
        error.unwrap_or_else(|| "closed".into())
    );
    let drained: Vec<Lent> = lock(&pending).drain();
    for lent in drained {
        if let Lent::Slot { tx, .. } = lent {
            let _ = tx.send(Err(reason.clone()));
        }
    }
}

#[async_trait]
impl DataPlane for VerbsDataPlane {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn pool(&self) -> &BufPool {
        &self.pool
    }

    fn stats(&self) -> DataPlaneStats {
        let mut s = self.tcp.stats();
        let v = self.verbs_stats();
        s.transfers += v.reads + v.appends;
        s.bytes_in += v.bytes;
        s.bytes_out += v.append_bytes;
        s.errors += v.errors;
        s.timeouts += v.timeouts;
        s.connects += v.connects;
        s.fast_failures += v.fast_failures;
        s
    }

    fn peer_stats(&self) -> Vec<PeerSnapshot> {
        let mut out = self.metrics.snapshot();
        out.extend(self.tcp.peer_stats());
        out
    }

    fn reset(&self, peer: Option<&str>) -> usize {
        self.break_peer(peer) + self.tcp.reset(peer)
    }

    fn pools(&self) -> Vec<(&'static str, crate::bufpool::BufPoolStats)> {
        let mut out = vec![("data", self.pool.stats())];
        if let Some(h) = self.holder.get() {
            out.push(("holder", h.pool().stats()));
        }
        out
    }

    fn holder_stats(&self) -> Option<DataPlaneStats> {
        self.holder.get().map(|h| h.stats())
    }

    async fn read_shard(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
    ) -> Result<ShardData, DataPlaneError> {
        // Buffers that never wait on the pool (a fresh one is not registered: that read goes
        // over TCP, into it).
        let dst = self.pool.get_or_alloc_for(range.len);
        self.read_shard_into(peer, drive, range, dst).await
    }

    async fn read_shard_into(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: Vec<PooledBuf>,
    ) -> Result<ShardData, DataPlaneError> {
        if dst.is_empty() || dst.iter().any(|b| !b.is_registered()) {
            // Memory the peer cannot write into (the pool was empty): TCP reads straight into it.
            return self.tcp_read(peer, drive, range, Some(dst)).await;
        }
        let started = Instant::now();
        let p = self.peer(peer);
        let conn = match self.conn(peer, &p).await {
            Ok(Some(c)) => c,
            Ok(None) => return self.tcp_read(peer, drive, range, Some(dst)).await,
            Err(e) => {
                bump(&self.counters.errors);
                return Err(e);
            }
        };
        match self.read_verbs(peer, &conn, drive, range, dst).await {
            Ok(bufs) => {
                bump(&self.counters.reads);
                self.counters
                    .bytes
                    .fetch_add(range.len as u64, Ordering::Relaxed);
                p.metrics
                    .record(Transfer::Read, range.len, started.elapsed());
                Ok(ShardData::from_buffers(bufs, range.len))
            }
            Err(e @ DataPlaneError::Remote { .. }) => {
                bump(&self.counters.errors);
                p.metrics.error(e.kind());
                Err(e)
            }
            Err(DataPlaneError::Busy { .. }) => {
                // The holder had no buffer free and wrote nothing: this read goes over TCP.
                bump(&self.counters.busy);
                bump(&p.metrics.shed);
                self.tcp_read(peer, drive, range, None).await
            }
            Err(e) => {
                if matches!(e, DataPlaneError::Timeout { .. }) {
                    bump(&self.counters.timeouts);
                }
                self.transfer_failed(peer, &p, &conn, &e);
                if self.config.fallback {
                    // Reads are idempotent: read the range again over TCP, into buffers of its
                    // own (the slots lent over verbs come back only once the QP is drained).
                    return self.tcp_read(peer, drive, range, None).await;
                }
                Err(e)
            }
        }
    }

    async fn append_shard(
        &self,
        peer: &str,
        drive: u16,
        writer: Uuid,
        seq: u64,
        data: Bytes,
    ) -> Result<(), DataPlaneError> {
        let remote = match self.pool.remote_of(&data) {
            Some(r) if !data.is_empty() => r,
            // Bytes outside the registered pool (a fresh allocation, inline data): TCP.
            _ => {
                bump(&self.counters.tcp_appends);
                return self.tcp.append_shard(peer, drive, writer, seq, data).await;
            }
        };
        let started = Instant::now();
        let p = self.peer(peer);
        let conn = match self.conn(peer, &p).await {
            Ok(Some(c)) => c,
            Ok(None) => {
                bump(&self.counters.tcp_appends);
                return self.tcp.append_shard(peer, drive, writer, seq, data).await;
            }
            Err(e) => {
                bump(&self.counters.errors);
                return Err(e);
            }
        };
        let len = data.len();
        let req = AppendRequest {
            conn: conn.id,
            drive,
            writer,
            seq,
            remote,
        };
        match self.append_verbs(peer, &conn, req, data.clone()).await {
            Ok(()) => {
                bump(&self.counters.appends);
                self.counters
                    .append_bytes
                    .fetch_add(len as u64, Ordering::Relaxed);
                p.metrics.record(Transfer::Append, len, started.elapsed());
                Ok(())
            }
            Err(AppendFailure::Busy) => {
                bump(&self.counters.busy);
                bump(&p.metrics.shed);
                bump(&self.counters.tcp_appends);
                self.tcp.append_shard(peer, drive, writer, seq, data).await
            }
            Err(AppendFailure::Refused(e)) => {
                bump(&self.counters.errors);
                p.metrics.error(e.kind());
                Err(e)
            }
            Err(AppendFailure::NothingMoved(e)) => {
                self.transfer_failed(peer, &p, &conn, &e);
                if self.config.fallback {
                    bump(&self.counters.tcp_appends);
                    return self.tcp.append_shard(peer, drive, writer, seq, data).await;
                }
                Err(e)
            }
            Err(AppendFailure::Broken(e)) => {
                self.transfer_failed(peer, &p, &conn, &e);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_verbs::{Gid, Mtu};

    fn ep() -> QpEndpoint {
        QpEndpoint {
            qpn: 0x12_3456,
            psn: 0x65_4321,
            gid: Gid::from_ip("10.55.0.2".parse().unwrap()),
            lid: 0,
            mtu: Mtu::from_code(3).unwrap(),
        }
    }

    #[test]
    fn connect_messages_round_trip_and_reject_garbage() {
        let e = ep();
        assert_eq!(decode_connect(&encode_connect(&e, 3)).unwrap(), (e, 3));
        assert_eq!(
            decode_connected(&encode_connected(77, &e)).unwrap(),
            (77, e)
        );
        let mut bad = encode_connect(&e, 0).to_vec();
        bad[0] = 9;
        assert_eq!(decode_connect(&bad), Err(MessageError::Version(9)));
        let good = encode_connect(&e, 0);
        for n in 0..good.len() {
            assert!(decode_connect(&good[..n]).is_err(), "{n}");
        }
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(decode_connect(&long), Err(MessageError::Trailing(1)));
    }

    #[test]
    fn a_tag_is_never_lent_twice_even_when_tags_wrap() {
        let mut t: LendTable<&str> = LendTable::new();
        t.next_tag = u32::MAX - 1;
        let a = t.lend("a").unwrap();
        let b = t.lend("b").unwrap();
        let c = t.lend("c").unwrap();
        assert_eq!((a, b, c), (u32::MAX - 1, u32::MAX, 0));
        // Around again, past loans still out: their tags are skipped.
        t.next_tag = u32::MAX - 1;
        let d = t.lend("d").unwrap();
        assert_eq!(d, 1, "the first free tag after the three lent ones");
        assert_eq!(t.settle(b), Some("b"));
        assert_eq!(t.settle(b), None, "settled once");
        t.next_tag = u32::MAX - 1;
        assert_eq!(
            t.lend("e").unwrap(),
            u32::MAX,
            "a settled tag is free again"
        );
        assert!(t.is_lent(a) && t.is_lent(c) && t.is_lent(d));
    }

    #[test]
    fn nothing_is_lent_after_a_drain_and_the_drain_returns_everything() {
        let mut t: LendTable<u8> = LendTable::new();
        let tags: Vec<u32> = (0..5).map(|i| t.lend(i).unwrap()).collect();
        assert_eq!(t.settle(tags[2]), Some(2));
        let mut left = t.drain();
        left.sort();
        assert_eq!(left, vec![0, 1, 3, 4]);
        assert_eq!(t.lend(9), Err(9), "a dead QP takes no new loan");
        assert!(!t.is_lent(tags[0]));
        assert!(t.drain().is_empty());
    }

    /// A credit is held by its loan, not by the future that lent it: at most `credits` reads
    /// can be out at once, a settled or drained loan gives its credit back, a dropped future
    /// does not.
    #[tokio::test]
    async fn credits_bound_the_loans_and_come_back_only_with_them() {
        let credits = Arc::new(Semaphore::new(3));
        let mut t: LendTable<OwnedSemaphorePermit> = LendTable::new();
        let mut tags = Vec::new();
        for _ in 0..3 {
            let p = credits.clone().try_acquire_owned().unwrap();
            tags.push(t.lend(p).unwrap());
        }
        assert!(
            credits.clone().try_acquire_owned().is_err(),
            "no fourth read while three are out"
        );
        // The future of a read that lent one is dropped: its loan (and credit) stays.
        let waiting = credits.clone().acquire_owned();
        drop(waiting);
        assert_eq!(credits.available_permits(), 0);
        drop(t.settle(tags[0]));
        assert_eq!(
            credits.available_permits(),
            1,
            "settled: the credit is back"
        );
        drop(t.drain());
        assert_eq!(
            credits.available_permits(),
            3,
            "drained: every credit is back"
        );
    }

    #[test]
    fn append_messages_round_trip_and_reject_garbage() {
        let r = AppendRequest {
            conn: 77,
            drive: 2,
            writer: Uuid::new_v4(),
            seq: 41,
            remote: RemoteBuf {
                addr: 0x7f00_1234_0000,
                rkey: 0xbeef,
                len: (1 << 20) + 32,
            },
        };
        let enc = encode_append(&r);
        assert_eq!(decode_append(&enc).unwrap(), r);
        for n in 0..enc.len() {
            assert!(decode_append(&enc[..n]).is_err(), "{n}");
        }
        let mut long = enc.to_vec();
        long.push(1);
        assert_eq!(decode_append(&long), Err(MessageError::Trailing(1)));
        let mut old = enc.to_vec();
        old[0] = 1;
        assert_eq!(decode_append(&old), Err(MessageError::Version(1)));
    }

    #[test]
    fn read_messages_round_trip_and_reject_garbage() {
        let r = ReadRequest {
            conn: 5,
            tag: 9,
            remote: RemoteBuf {
                addr: 0xdead_0000,
                rkey: 0x1234,
                len: 4096,
            },
            drive: 3,
            bucket: "b".into(),
            key: "dir/k\u{e9}".into(),
            data_dir: Uuid::new_v4(),
            part: 1,
            offset: 1 << 40,
            len: 4000,
        };
        let enc = encode_read(&r);
        assert_eq!(decode_read(&enc).unwrap(), r);
        for n in 0..enc.len() {
            assert!(decode_read(&enc[..n]).is_err(), "{n}");
        }
        let mut bad = enc.to_vec();
        let at = bad.len() - 1;
        bad[at] = 0xff;
        assert_eq!(decode_read(&bad), Err(MessageError::Utf8("key")));
    }
}
