//! The verbs (RDMA) backend of the [`DataPlane`] for GET reads: [`VerbsDataPlane`] on the
//! requesting node, [`VerbsResponder`] on the shard holder (served by [`crate::DriveServer`]).
//!
//! # GET protocol (server push, DESIGN.md "Data plane")
//!
//! 1. **Connect** (once per peer, again after an error): the requester creates an RC QP, pre-posts
//!    one empty receive per credit ([`VerbsConfig::credits`]) and calls the holder's
//!    [`METHOD_CONNECT`] over the control RPC with `(protocol version, QpEndpoint)` (the endpoint
//!    carries QPN, PSN, GID and the requester's port MTU). The holder creates its QP, connects it
//!    (path MTU: the smaller of both) and answers `(version, connection id, its QpEndpoint)`; the
//!    requester connects its side.
//! 2. **Read**: the requester takes a credit and a registered buffer from its free list
//!    ([`MrPool`], one memory region allocated once, carved into `MrBuf`s), records
//!    `tag -> (buffer, credit)` in the connection's pending table and calls [`METHOD_READ`] with
//!    `(connection id, tag, address, rkey, shard range)`. The holder reads the range from its drive
//!    straight into one of its own registered buffers and RDMA-WRITEs it WITH IMMEDIATE `tag` to
//!    that address; it answers the call only after its write completed, with an error only if it
//!    did not write (drive error) or its write failed.
//! 3. **Completion**: the WRITE's immediate consumes one of the pre-posted receives; the
//!    requester's completion task reposts a receive, takes the entry of `tag` out of the pending
//!    table and hands the buffer to the waiting read, which returns it as `Bytes` without copying
//!    (`Bytes::from_owner`: the buffer goes back to the free list when the last clone drops). RC
//!    ordering puts the bytes in place before the immediate.
//!
//! Why the control RPC for the request rather than a SEND on the QP: the request is small, the
//! RPC is authenticated, has timeouts and carries the holder's drive errors with their codes, and
//! the holder needs no receive buffers or credits in that direction. The bulk bytes are the part
//! that must avoid copies, and they go by RDMA WRITE.
//!
//! # Credits, bounds, cancellation
//!
//! A credit is one pre-posted receive; a read holds one from before its request leaves until its
//! immediate arrived (the credit lives in the pending entry, not in the read's future), so more
//! WRITE WITH IMMEDIATE than posted receives can never be in flight: no RNR. Credits also bound
//! the reads in flight per peer.
//!
//! A buffer handed to a peer for remote write is owned by the pending table until its immediate
//! arrived or the QP is known dead: a dropped or timed-out read leaves it there. A timeout moves
//! the QP to the error state; the completion task then sees every posted receive flushed (the QP
//! is drained: no more remote writes through it), and only then releases the pending buffers to
//! the free list and fails the waiting reads with [`DataPlaneError::Verbs`]. Buffers the holder
//! posts are protected by `quarry-verbs` itself (they live in the CQ's in-flight table until their
//! completion).
//!
//! # Failure and fallback
//!
//! A completion error or timeout breaks the connection (counted in `qp_errors`); the next read to
//! that peer reconnects (`reconnects`). With [`VerbsConfig::fallback`] (`QUARRY_RDMA=auto`) a
//! read that failed on verbs, or a peer that cannot be connected, is served by the TCP backend
//! instead and the peer stays on TCP for [`VerbsConfig::fallback_for`] (logged, counted in
//! `fallbacks`); without it (`on`) the error is returned. Drive errors of the holder are returned
//! as they are either way. Ranges larger than one registered buffer are read in pieces, one buffer
//! each, and joined (a copy); `read_shard_into` and `append_shard` go to the TCP backend.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use quarry_disk::Drive;
use quarry_verbs::{
    Access, AsyncCompletionQueue, Completion, ConnectOptions, Context, GidEntry, MrBuf, Opcode,
    ProtectionDomain, QpCaps, QpEndpoint, QueuePair, RemoteBuf, WrId, ENDPOINT_LEN,
};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use crate::bufpool::{BufPool, PooledBuf};
use crate::dataplane::{DataPlane, DataPlaneError, DataPlaneStats, ShardData, ShardRange};
use crate::drive_proto::{self, METHOD_BASE};
use crate::rdma::RDMA_PORT;
use crate::rpc::{codes, RpcClient, RpcError};

/// Control-RPC method: set up an RC connection (in the drive server's range).
pub const METHOD_CONNECT: u16 = METHOD_BASE + 90;
/// Control-RPC method: read a shard range and RDMA-WRITE it into the requester's buffer.
pub const METHOD_READ: u16 = METHOD_BASE + 91;
/// Version of the two messages above.
pub const PROTOCOL_VERSION: u8 = 1;
/// Error code of a holder whose RDMA WRITE failed (its connection is gone).
pub const CODE_VERBS_FAILED: u16 = codes::APPLICATION_BASE + 900;
/// Error code of a holder that does not know the connection id (restarted, or dropped it).
pub const CODE_NO_CONNECTION: u16 = codes::APPLICATION_BASE + 901;

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

// ---------------------------------------------------------------------------------------------
// Device and registered buffers

/// One node's open device: context, protection domain and the RoCE v2 GID of its address.
#[derive(Debug, Clone)]
pub struct VerbsDevice {
    ctx: Context,
    pd: ProtectionDomain,
    gid: GidEntry,
}

impl VerbsDevice {
    /// Opens `device` (or the first) and picks the RoCE v2 GID of `addr` (any, if `None`).
    pub fn open(device: Option<&str>, addr: Option<IpAddr>) -> quarry_verbs::Result<VerbsDevice> {
        let ctx = Context::open(device)?;
        ctx.active_port(RDMA_PORT)?;
        let gid = ctx.select_roce_v2_gid(RDMA_PORT, addr)?;
        let pd = ctx.alloc_pd()?;
        Ok(VerbsDevice { ctx, pd, gid })
    }

    pub fn name(&self) -> &str {
        self.ctx.name()
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

/// Registered buffers carved from one memory region, allocated once: a free list with a
/// semaphore. Cheap to clone.
#[derive(Clone)]
pub struct MrPool {
    inner: Arc<MrPoolInner>,
}

struct MrPoolInner {
    free: Mutex<Vec<MrBuf>>,
    available: Semaphore,
    buf_size: usize,
    count: usize,
}

impl fmt::Debug for MrPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrPool")
            .field("buf_size", &self.inner.buf_size)
            .field("count", &self.inner.count)
            .field("free", &self.free())
            .finish()
    }
}

impl MrPool {
    /// `count` buffers of `buf_size` bytes in one region registered with `access`.
    pub fn new(
        dev: &VerbsDevice,
        buf_size: usize,
        count: usize,
        access: Access,
    ) -> quarry_verbs::Result<MrPool> {
        let total = buf_size
            .checked_mul(count)
            .filter(|&t| t > 0)
            .ok_or_else(|| {
                quarry_verbs::Error::InvalidArgument(format!(
                    "a pool of {count} x {buf_size} bytes"
                ))
            })?;
        let bufs = dev.pd.alloc_region(total, access)?.into_bufs(buf_size)?;
        let count = bufs.len();
        Ok(MrPool {
            inner: Arc::new(MrPoolInner {
                free: Mutex::new(bufs),
                available: Semaphore::new(count),
                buf_size,
                count,
            }),
        })
    }

    pub fn buf_size(&self) -> usize {
        self.inner.buf_size
    }

    /// Buffers in the free list now.
    pub fn free(&self) -> usize {
        lock(&self.inner.free).len()
    }

    pub fn count(&self) -> usize {
        self.inner.count
    }

    /// Waits for a free buffer.
    async fn get(&self) -> Option<MrBuf> {
        let permit = self.inner.available.acquire().await.ok()?;
        permit.forget();
        let b = lock(&self.inner.free).pop();
        if b.is_none() {
            // Cannot happen (a permit per free buffer); keep the count right anyway.
            self.inner.available.add_permits(1);
        }
        b
    }

    fn put(&self, buf: MrBuf) {
        lock(&self.inner.free).push(buf);
        self.inner.available.add_permits(1);
    }
}

/// Where a [`Lease`]'s buffer goes when the `Bytes` over it is dropped.
enum Home {
    Pool(MrPool),
    Slot(Arc<Mutex<Option<MrBuf>>>),
}

/// The owner behind a `Bytes` over the first `len` bytes of a registered buffer.
struct Lease {
    buf: Option<MrBuf>,
    len: usize,
    home: Home,
}

impl AsRef<[u8]> for Lease {
    fn as_ref(&self) -> &[u8] {
        match &self.buf {
            Some(b) => &b.as_slice()[..self.len.min(b.len())],
            None => &[],
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            match &self.home {
                Home::Pool(p) => p.put(b),
                Home::Slot(s) => *lock(s) = Some(b),
            }
        }
    }
}

/// The holder's buffer as a drive read target: the drive fills it, then its `Bytes` is dropped and
/// the buffer comes back through the slot, ready to post (no copy).
struct DriveTarget {
    buf: Option<MrBuf>,
    len: usize,
    slot: Arc<Mutex<Option<MrBuf>>>,
}

impl quarry_disk::ShardBuf for DriveTarget {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Some(b) => {
                let n = self.len.min(b.len());
                &mut b.as_mut_slice()[..n]
            }
            None => &mut [],
        }
    }

    fn into_bytes(mut self: Box<Self>) -> Bytes {
        Bytes::from_owner(Lease {
            buf: self.buf.take(),
            len: self.len,
            home: Home::Slot(self.slot.clone()),
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

impl Drop for DriveTarget {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            *lock(&self.slot) = Some(b);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Holder side

/// Settings of a [`VerbsResponder`].
#[derive(Debug, Clone)]
pub struct ResponderConfig {
    pub buf_size: usize,
    /// Registered source buffers (also the bound on reads being served at once).
    pub buffers: usize,
    /// Connections kept at most; older ones are dropped first.
    pub max_connections: usize,
    /// Work requests per connection (at least the requesters' credits).
    pub depth: u32,
    /// Bound on the RDMA WRITE of one read, from post to completion.
    pub write_timeout: Duration,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        ResponderConfig {
            buf_size: crate::dataplane::DEFAULT_BUF_SIZE,
            buffers: 16,
            max_connections: 256,
            depth: 64,
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// One connection of the holder: its QP and the waiters of its posted WRITEs.
struct HolderConn {
    qp: QueuePair,
    waiters: Arc<Mutex<HashMap<WrId, oneshot::Sender<Completion>>>>,
    task: tokio::task::JoinHandle<()>,
    created: Instant,
}

impl Drop for HolderConn {
    fn drop(&mut self) {
        let _ = self.qp.set_error();
        // The task drains the flushed WRITEs (their buffers go back to the pool) and ends; it is
        // not aborted, so no buffer stays in the CQ table longer than the QP.
        let _ = &self.task;
    }
}

/// The holder side of the verbs GET: answers [`METHOD_CONNECT`] and [`METHOD_READ`] for a
/// [`crate::DriveServer`] (see [`crate::DriveServer::with_verbs`]).
pub struct VerbsResponder {
    dev: VerbsDevice,
    pool: MrPool,
    config: ResponderConfig,
    conns: Mutex<HashMap<u64, Arc<HolderConn>>>,
    next_conn: AtomicU64,
    pub(crate) served_bytes: AtomicU64,
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

impl VerbsResponder {
    pub fn new(dev: VerbsDevice, config: ResponderConfig) -> quarry_verbs::Result<VerbsResponder> {
        let pool = MrPool::new(
            &dev,
            config.buf_size,
            config.buffers.max(1),
            Access::LOCAL_READ,
        )?;
        Ok(VerbsResponder {
            dev,
            pool,
            config,
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(rand::random::<u32>() as u64 + 1),
            served_bytes: AtomicU64::new(0),
        })
    }

    /// Whether `method` is one of this responder's.
    pub fn handles(method: u16) -> bool {
        method == METHOD_CONNECT || method == METHOD_READ
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        lock(&self.conns).len()
    }

    /// Payload bytes written to requesters.
    pub fn served_bytes(&self) -> u64 {
        self.served_bytes.load(Ordering::Relaxed)
    }

    pub async fn handle(
        &self,
        method: u16,
        payload: Bytes,
        drives: &[Arc<dyn Drive>],
    ) -> Result<Bytes, RpcError> {
        match method {
            METHOD_CONNECT => self.connect(&payload),
            METHOD_READ => self.read(&payload, drives).await,
            m => Err(RpcError::unknown_method(m)),
        }
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
        let waiters: Arc<Mutex<HashMap<WrId, oneshot::Sender<Completion>>>> = Arc::default();
        let task = tokio::spawn(holder_completions(cq, waiters.clone(), self.pool.clone()));
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let mut conns = lock(&self.conns);
        // The requester's previous connection is dead on its side: drop ours (its QP goes to
        // error and its completion task drains it).
        conns.remove(&replaces);
        while conns.len() >= self.config.max_connections.max(1) {
            let oldest = conns.iter().min_by_key(|(_, c)| c.created).map(|(k, _)| *k);
            match oldest {
                Some(k) => conns.remove(&k),
                None => break,
            };
        }
        conns.insert(
            id,
            Arc::new(HolderConn {
                qp,
                waiters,
                task,
                created: Instant::now(),
            }),
        );
        tracing::debug!(conn = id, remote = %theirs, "verbs: accepted a connection");
        Ok(encode_connected(id, &mine))
    }

    async fn read(&self, payload: &[u8], drives: &[Arc<dyn Drive>]) -> Result<Bytes, RpcError> {
        let r = decode_read(payload).map_err(|e| rpc_err(codes::BAD_REQUEST, e.to_string()))?;
        let conn = lock(&self.conns).get(&r.conn).cloned().ok_or_else(|| {
            rpc_err(
                CODE_NO_CONNECTION,
                format!("no verbs connection {}", r.conn),
            )
        })?;
        let d = drives
            .get(r.drive as usize)
            .cloned()
            .ok_or_else(|| rpc_err(codes::BAD_REQUEST, format!("no drive {}", r.drive)))?;
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
        let timeout = self.config.write_timeout;
        let buf = tokio::time::timeout(timeout, self.pool.get())
            .await
            .ok()
            .flatten()
            .ok_or_else(|| rpc_err(CODE_VERBS_FAILED, "no registered buffer free in time"))?;
        // The drive reads straight into the registered buffer.
        let slot = Arc::new(Mutex::new(None));
        let target = DriveTarget {
            buf: Some(buf),
            len,
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
            .await;
        let got = match read {
            Ok(bytes) => {
                let n = bytes.len();
                drop(bytes);
                Ok(n)
            }
            Err(e) => Err(e),
        };
        let buf = lock(&slot).take();
        let Some(buf) = buf else {
            return Err(rpc_err(codes::INTERNAL, "the drive kept the read buffer"));
        };
        let n = match got {
            Ok(n) => n,
            Err(e) => {
                self.pool.put(buf);
                let (code, message) = drive_proto::encode_drive_error(&e);
                return Err(rpc_err(code, message));
            }
        };
        if n != len {
            self.pool.put(buf);
            return Err(rpc_err(
                codes::INTERNAL,
                format!("the drive read {n} of {len} bytes"),
            ));
        }
        let (tx, rx) = oneshot::channel();
        {
            // Post and register under one lock, so the completion task cannot miss the waiter.
            let mut waiters = lock(&conn.waiters);
            match conn.qp.post_write(buf, len, r.remote, Some(r.tag)) {
                Ok(id) => {
                    waiters.insert(id, tx);
                }
                Err(e) => {
                    if let Some(b) = e.buf {
                        self.pool.put(b);
                    }
                    drop(waiters);
                    self.drop_conn(r.conn);
                    return Err(rpc_err(
                        CODE_VERBS_FAILED,
                        format!("post RDMA WRITE: {}", e.error),
                    ));
                }
            }
        }
        let c = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(c)) => c,
            _ => {
                // The buffer stays in the CQ table until the flush returns it (to the pool).
                self.drop_conn(r.conn);
                return Err(rpc_err(
                    CODE_VERBS_FAILED,
                    format!("RDMA WRITE not completed within {timeout:?}"),
                ));
            }
        };
        let status = c.result();
        if let Some(b) = c.buf {
            self.pool.put(b);
        }
        if let Err(e) = status {
            self.drop_conn(r.conn);
            return Err(rpc_err(
                CODE_VERBS_FAILED,
                format!("RDMA WRITE failed: {e}"),
            ));
        }
        self.served_bytes.fetch_add(len as u64, Ordering::Relaxed);
        Ok(Bytes::copy_from_slice(&(len as u32).to_le_bytes()))
    }

    fn drop_conn(&self, id: u64) {
        lock(&self.conns).remove(&id);
    }
}

/// The holder's completion loop: each WRITE completion goes to its waiter, or its buffer back to
/// the pool when nobody waits (timed out, flushed). Ends once the QP is gone and drained.
async fn holder_completions(
    cq: AsyncCompletionQueue,
    waiters: Arc<Mutex<HashMap<WrId, oneshot::Sender<Completion>>>>,
    pool: MrPool,
) {
    let mut out = Vec::new();
    loop {
        out.clear();
        if cq.next(&mut out, 32).await.is_err() {
            break;
        }
        let mut failed = false;
        for mut c in out.drain(..) {
            failed |= !c.is_ok();
            let w = lock(&waiters).remove(&c.wr_id);
            match w {
                Some(tx) => {
                    if let Err(mut c) = tx.send(c) {
                        if let Some(b) = c.buf.take() {
                            pool.put(b);
                        }
                    }
                }
                None => {
                    if let Some(b) = c.buf.take() {
                        pool.put(b);
                    }
                }
            }
        }
        if failed && cq.cq().in_flight() == 0 {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Requester side

/// Settings of a [`VerbsDataPlane`].
#[derive(Debug, Clone)]
pub struct VerbsConfig {
    /// Bytes of one registered buffer (a read of more goes in pieces).
    pub buf_size: usize,
    /// Registered buffers (one region).
    pub buffers: usize,
    /// Receives pre-posted per connection: the bound on reads in flight per peer.
    pub credits: u32,
    /// Bound on one read: waiting for a credit and a buffer, the request, the completion.
    pub transfer_timeout: Duration,
    /// `QUARRY_RDMA=auto`: on a verbs failure read over TCP and keep the peer on TCP for
    /// `fallback_for`; `false` (`on`): return the error.
    pub fallback: bool,
    pub fallback_for: Duration,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            buf_size: crate::dataplane::DEFAULT_BUF_SIZE,
            buffers: 32,
            credits: 16,
            transfer_timeout: Duration::from_secs(10),
            fallback: true,
            fallback_for: Duration::from_secs(30),
        }
    }
}

/// Counters of the verbs backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerbsStats {
    /// Reads completed over verbs, and their payload bytes.
    pub reads: u64,
    pub bytes: u64,
    /// Reads served by the TCP backend instead (fallback).
    pub tcp_reads: u64,
    /// Connections made (the first per peer and every reconnect).
    pub connects: u64,
    pub reconnects: u64,
    /// Reads that failed on the verbs path (QP in error, completion error, timeout, failed
    /// request); each breaks its connection.
    pub qp_errors: u64,
    /// Times a peer was switched to TCP.
    pub fallbacks: u64,
    pub errors: u64,
    pub timeouts: u64,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    bytes: AtomicU64,
    tcp_reads: AtomicU64,
    connects: AtomicU64,
    reconnects: AtomicU64,
    qp_errors: AtomicU64,
    fallbacks: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
}

type Delivery = Result<(MrBuf, u32), String>;

/// A buffer lent to the peer for one WRITE WITH IMMEDIATE, with its credit.
struct Pending {
    buf: MrBuf,
    _credit: OwnedSemaphorePermit,
    tx: oneshot::Sender<Delivery>,
}

struct PendingTable {
    /// Set (under the lock) once the QP is dead: nothing may be added any more.
    broken: bool,
    map: HashMap<u32, Pending>,
}

/// One requester connection to a peer.
struct Conn {
    id: u64,
    qp: QueuePair,
    credits: Arc<Semaphore>,
    pending: Arc<Mutex<PendingTable>>,
    next_tag: AtomicU32,
    dead: Arc<AtomicBool>,
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Moves the QP to error; the completion task drains it and fails what is pending.
    fn break_qp(&self) {
        let _ = self.qp.set_error();
    }
}

/// A read whose buffer is lent to the peer: if dropped before it is settled (its future was
/// cancelled), the QP is moved to error so the buffer comes back only after the drain.
struct Unsettled<'a> {
    conn: &'a Conn,
    tag: u32,
    armed: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if self.armed && lock(&self.conn.pending).map.contains_key(&self.tag) {
            self.conn.break_qp();
        }
    }
}

#[derive(Default)]
struct PeerState {
    conn: Option<Arc<Conn>>,
    tcp_until: Option<Instant>,
    connected_before: bool,
    /// Id (at the holder) of the last connection, replaced by the next one.
    last_conn: u64,
}

/// The verbs backend of [`DataPlane`] (GET reads; see the module docs).
pub struct VerbsDataPlane {
    dev: VerbsDevice,
    rpc: RpcClient,
    tcp: Arc<dyn DataPlane>,
    pool: MrPool,
    config: VerbsConfig,
    peers: Mutex<HashMap<String, Arc<tokio::sync::Mutex<PeerState>>>>,
    counters: Counters,
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
    /// A verbs data plane on `dev`, calling peers over `rpc`, with `tcp` for fallback, for
    /// `read_shard_into` and for appends.
    pub fn new(
        dev: VerbsDevice,
        rpc: RpcClient,
        tcp: Arc<dyn DataPlane>,
        config: VerbsConfig,
    ) -> quarry_verbs::Result<VerbsDataPlane> {
        let pool = MrPool::new(
            &dev,
            config.buf_size,
            config.buffers.max(1),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )?;
        Ok(VerbsDataPlane {
            dev,
            rpc,
            tcp,
            pool,
            config,
            peers: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        })
    }

    pub fn verbs_stats(&self) -> VerbsStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        VerbsStats {
            reads: g(&c.reads),
            bytes: g(&c.bytes),
            tcp_reads: g(&c.tcp_reads),
            connects: g(&c.connects),
            reconnects: g(&c.reconnects),
            qp_errors: g(&c.qp_errors),
            fallbacks: g(&c.fallbacks),
            errors: g(&c.errors),
            timeouts: g(&c.timeouts),
        }
    }

    /// The registered buffers.
    pub fn registered(&self) -> &MrPool {
        &self.pool
    }

    /// Moves the QP to `peer` to the error state, as a completion error would (fault injection
    /// for tests and operators): reads in flight fail with [`DataPlaneError::Verbs`], the next
    /// read reconnects (or falls back to TCP). `false` if there is no connection.
    pub fn inject_qp_error(&self, peer: &str) -> bool {
        let state = lock(&self.peers).get(peer).cloned();
        let Some(state) = state else { return false };
        let Ok(s) = state.try_lock() else {
            return false;
        };
        match &s.conn {
            Some(c) => c.qp.set_error().is_ok(),
            None => false,
        }
    }

    fn peer(&self, peer: &str) -> Arc<tokio::sync::Mutex<PeerState>> {
        lock(&self.peers)
            .entry(peer.to_owned())
            .or_default()
            .clone()
    }

    /// The live connection to `peer`, made if needed; `Ok(None)`: use TCP for now.
    async fn conn(&self, peer: &str) -> Result<Option<Arc<Conn>>, DataPlaneError> {
        let state = self.peer(peer);
        let mut s = state.lock().await;
        if let Some(until) = s.tcp_until {
            if Instant::now() < until {
                return Ok(None);
            }
            s.tcp_until = None;
        }
        if let Some(c) = &s.conn {
            if !c.is_dead() {
                return Ok(Some(c.clone()));
            }
        }
        s.conn = None;
        let replaces = s.last_conn;
        match tokio::time::timeout(self.config.transfer_timeout, self.connect(peer, replaces)).await
        {
            Ok(Ok(c)) => {
                s.last_conn = c.id;
                self.counters.connects.fetch_add(1, Ordering::Relaxed);
                if s.connected_before {
                    self.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                s.connected_before = true;
                s.conn = Some(c.clone());
                Ok(Some(c))
            }
            Ok(Err(e)) => self.fail_peer(&mut s, peer, e),
            Err(_) => self.fail_peer(&mut s, peer, verr(peer, "connecting timed out")),
        }
    }

    fn fail_peer(
        &self,
        s: &mut PeerState,
        peer: &str,
        e: DataPlaneError,
    ) -> Result<Option<Arc<Conn>>, DataPlaneError> {
        if self.config.fallback {
            self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
            s.tcp_until = Some(Instant::now() + self.config.fallback_for);
            tracing::warn!(peer, error = %e, "RDMA: verbs unusable to this peer; using TCP for {:?}", self.config.fallback_for);
            Ok(None)
        } else {
            Err(e)
        }
    }

    async fn connect(&self, peer: &str, replaces: u64) -> Result<Arc<Conn>, DataPlaneError> {
        let credits = self.config.credits.max(1);
        let (cq, prepared) = self
            .dev
            .qp(credits)
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
        let pending = Arc::new(Mutex::new(PendingTable {
            broken: false,
            map: HashMap::new(),
        }));
        let dead = Arc::new(AtomicBool::new(false));
        let conn = Arc::new(Conn {
            id,
            qp: qp.clone(),
            credits: Arc::new(Semaphore::new(credits as usize)),
            pending: pending.clone(),
            next_tag: AtomicU32::new(1),
            dead: dead.clone(),
        });
        tokio::spawn(requester_completions(
            cq,
            qp,
            pending,
            dead,
            self.pool.clone(),
            peer.to_owned(),
        ));
        tracing::debug!(peer, conn = id, remote = %theirs, "verbs: connected");
        Ok(conn)
    }

    /// One piece (at most one buffer) over verbs.
    async fn read_piece(
        &self,
        peer: &str,
        conn: &Conn,
        drive: u16,
        range: &ShardRange<'_>,
    ) -> Result<Bytes, DataPlaneError> {
        let credit = conn
            .credits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| verr(peer, "connection closed"))?;
        let buf = self
            .pool
            .get()
            .await
            .ok_or_else(|| verr(peer, "registered pool closed"))?;
        let len = range.len;
        let Some(remote) = buf.remote_range(0..len) else {
            self.pool.put(buf);
            return Err(DataPlaneError::TooLarge {
                len,
                reason: "larger than a registered buffer".into(),
            });
        };
        let tag = conn.next_tag.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&conn.pending);
            if p.broken {
                drop(p);
                self.pool.put(buf);
                return Err(verr(peer, "the queue pair is in error"));
            }
            p.map.insert(
                tag,
                Pending {
                    buf,
                    _credit: credit,
                    tx,
                },
            );
        }
        // From here until the read is settled, dropping this future (cancellation) gives up the
        // QP: the holder may still write into the lent buffer, so it is released only after the
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
                return self.delivered(peer, d, len);
            }
        };
        match answer {
            Ok(_) => {}
            Err(RpcError::Remote { code, message })
                if code != CODE_VERBS_FAILED && code != CODE_NO_CONNECTION =>
            {
                // The holder did not write: the buffer and credit are free again.
                guard.armed = false;
                let p = lock(&conn.pending).map.remove(&tag);
                if let Some(p) = p {
                    self.pool.put(p.buf);
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
                // buffer is released).
                conn.break_qp();
                return Err(verr(peer, format!("read request: {e}")));
            }
        }
        match tokio::time::timeout(self.config.transfer_timeout, rx).await {
            Ok(d) => {
                guard.armed = false;
                self.delivered(peer, d, len)
            }
            Err(_) => {
                conn.break_qp();
                self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(verr(peer, "no completion in time"))
            }
        }
    }

    /// What the completion task delivered for one read: its buffer as `Bytes` (no copy), or why
    /// the QP failed.
    fn delivered(
        &self,
        peer: &str,
        d: Result<Delivery, oneshot::error::RecvError>,
        len: usize,
    ) -> Result<Bytes, DataPlaneError> {
        match d {
            Ok(Ok((buf, n))) if n as usize == len => Ok(Bytes::from_owner(Lease {
                buf: Some(buf),
                len,
                home: Home::Pool(self.pool.clone()),
            })),
            Ok(Ok((buf, n))) => {
                self.pool.put(buf);
                Err(verr(peer, format!("{n} bytes written, {len} expected")))
            }
            Ok(Err(reason)) => Err(verr(peer, reason)),
            Err(_) => Err(verr(peer, "connection closed")),
        }
    }

    async fn read_verbs(
        &self,
        peer: &str,
        conn: &Conn,
        drive: u16,
        range: &ShardRange<'_>,
    ) -> Result<Vec<Bytes>, DataPlaneError> {
        let size = self.pool.buf_size();
        let mut pieces = Vec::new();
        let mut at = 0usize;
        loop {
            let n = (range.len - at).min(size);
            let offset =
                range
                    .offset
                    .checked_add(at as u64)
                    .ok_or_else(|| DataPlaneError::TooLarge {
                        len: range.len,
                        reason: "offset overflows".into(),
                    })?;
            pieces.push(ShardRange {
                offset,
                len: n,
                ..*range
            });
            at += n;
            if at >= range.len {
                break;
            }
        }
        let reads = pieces.iter().map(|p| self.read_piece(peer, conn, drive, p));
        let got = tokio::time::timeout(
            self.config.transfer_timeout * 2,
            futures::future::join_all(reads),
        )
        .await
        .map_err(|_| DataPlaneError::Timeout {
            peer: peer.to_owned(),
            after: self.config.transfer_timeout * 2,
        })?;
        got.into_iter().collect()
    }

    async fn tcp_read(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
    ) -> Result<ShardData, DataPlaneError> {
        self.counters.tcp_reads.fetch_add(1, Ordering::Relaxed);
        self.tcp.read_shard(peer, drive, range).await
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
        other => verr(peer, other.to_string()),
    }
}

/// The requester's completion loop: each immediate hands its buffer to the waiting read (after
/// reposting the receive). A failed completion (a flush after `set_error`, or a real error) marks
/// the connection dead; once every posted receive is flushed (the QP is drained and can no longer
/// be written through), the pending buffers go back to the pool and their reads fail.
async fn requester_completions(
    cq: AsyncCompletionQueue,
    qp: QueuePair,
    pending: Arc<Mutex<PendingTable>>,
    dead: Arc<AtomicBool>,
    pool: MrPool,
    peer: String,
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
                    let p = lock(&pending).map.remove(&tag);
                    if let Some(p) = p {
                        if let Err(Ok((buf, _))) = p.tx.send(Ok((p.buf, c.byte_len))) {
                            pool.put(buf);
                        }
                    }
                }
                (Err(e), ..) => {
                    if error.is_none() {
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
    let reason = format!(
        "the queue pair is in error ({})",
        error.unwrap_or_else(|| "closed".into())
    );
    let drained: Vec<Pending> = {
        let mut p = lock(&pending);
        p.broken = true;
        p.map.drain().map(|(_, v)| v).collect()
    };
    for p in drained {
        pool.put(p.buf);
        let _ = p.tx.send(Err(reason.clone()));
    }
}

#[async_trait]
impl DataPlane for VerbsDataPlane {
    fn name(&self) -> &'static str {
        "verbs"
    }

    fn pool(&self) -> &BufPool {
        self.tcp.pool()
    }

    fn stats(&self) -> DataPlaneStats {
        let mut s = self.tcp.stats();
        let v = self.verbs_stats();
        s.transfers += v.reads;
        s.bytes_in += v.bytes;
        s.errors += v.errors;
        s.timeouts += v.timeouts;
        s.connects += v.connects;
        s
    }

    async fn read_shard(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
    ) -> Result<ShardData, DataPlaneError> {
        let conn = match self.conn(peer).await? {
            Some(c) => c,
            None => return self.tcp_read(peer, drive, range).await,
        };
        match self.read_verbs(peer, &conn, drive, range).await {
            Ok(pieces) => {
                self.counters.reads.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes
                    .fetch_add(range.len as u64, Ordering::Relaxed);
                Ok(ShardData::from_bytes(pieces, range.len))
            }
            Err(e @ DataPlaneError::Remote { .. }) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            Err(e) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                self.counters.qp_errors.fetch_add(1, Ordering::Relaxed);
                conn.break_qp();
                if self.config.fallback {
                    let state = self.peer(peer);
                    let mut s = state.lock().await;
                    if s.tcp_until.is_none() {
                        self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(peer, error = %e, "RDMA: verbs read failed; using TCP for {:?}", self.config.fallback_for);
                    }
                    s.tcp_until = Some(Instant::now() + self.config.fallback_for);
                    drop(s);
                    return self.tcp_read(peer, drive, range).await;
                }
                Err(e)
            }
        }
    }

    async fn read_shard_into(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: Vec<PooledBuf>,
    ) -> Result<ShardData, DataPlaneError> {
        // The caller's buffers are not registered: TCP reads straight into them.
        self.tcp.read_shard_into(peer, drive, range, dst).await
    }

    async fn append_shard(
        &self,
        peer: &str,
        drive: u16,
        writer: Uuid,
        seq: u64,
        data: Bytes,
    ) -> Result<(), DataPlaneError> {
        self.tcp.append_shard(peer, drive, writer, seq, data).await
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
