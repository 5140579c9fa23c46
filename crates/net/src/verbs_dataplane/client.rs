//! [`ClientPlane`]: S3 over RDMA to clients, the node's side (DESIGN.md, "S3 over RDMA to
//! clients"). A client connects an RC queue pair to the node through a signed S3 request; each
//! GET's bytes are then RDMA-WRITTEN into the client's registered buffer and each PUT's
//! RDMA-READ out of it, while the HTTP exchange carries headers only. quarry-s3 decides who may
//! do what (the token, the authorization); this module moves bytes and keeps the connections.
//!
//! # GET: from where the bytes are
//!
//! A healthy GET's body is `Bytes` cut from the node's data pool (the stripe buffers shard reads
//! landed in), which is registered with the device: such a piece is posted as it is
//! ([`BufPool::held`], `QueuePair::post_write_held`) and stays referenced until its completion.
//! Anything else (decoded or decrypted bytes, heap fallbacks) is copied into a registered
//! staging buffer first, and counted in [`ClientRdmaFigures::copied_bytes`].
//!
//! # PUT: read into staging, copied out
//!
//! A PUT reads the client's buffer block by block into staging buffers (up to
//! [`ClientPlaneConfig::window`] bytes in flight) and hands each block on as heap `Bytes`, so a
//! slow write path never holds registered memory (the staging pool cannot be exhausted by
//! consumers waiting for their next block).
//!
//! # One transfer at a time, bounded, cancel-safe
//!
//! A connection carries one transfer at a time (a client opens several connections for
//! parallel transfers, up to [`ClientPlaneConfig::per_owner`]). Every wait for a completion has
//! a timeout. A transfer that fails, times out or is dropped (the client closed its HTTP
//! connection) breaks its connection: the QP is moved to the error state and a task polls its
//! completion queue until every posted request has come back (flushed), returning staging
//! buffers to their pool; only then is the QP destroyed. Connections idle for
//! [`ClientPlaneConfig::idle`] are closed.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;

use futures::{Stream, StreamExt};
use quarry_verbs::{Completion, PostError};
use tokio::sync::{mpsc, Mutex as AsyncMutex, OwnedMutexGuard};

use super::*;

/// Bytes of a connection's token key.
pub const CLIENT_KEY_LEN: usize = 32;

/// Limits of the client plane.
#[derive(Debug, Clone)]
pub struct ClientPlaneConfig {
    /// Client connections open at once on this node.
    pub max_connections: usize,
    /// Connections one access key may hold.
    pub per_owner: usize,
    /// Bytes one transfer may have in flight (posted, not completed).
    pub window: usize,
    /// Work requests one transfer may have in flight.
    pub max_requests: usize,
    /// How long a connection may stay unused before it is closed.
    pub idle: Duration,
    /// How long any one completion may be waited for.
    pub op_timeout: Duration,
}

impl Default for ClientPlaneConfig {
    fn default() -> Self {
        ClientPlaneConfig {
            max_connections: 256,
            per_owner: 64,
            window: 4 << 20,
            max_requests: 32,
            idle: Duration::from_secs(600),
            op_timeout: Duration::from_secs(30),
        }
    }
}

pub use crate::rdma::CLIENT_STAGING_BYTES;

pub use quarry_buf::ClientRdmaFigures;

/// Why a connection or transfer was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClientPlaneError {
    #[error("no such RDMA connection (closed, idle too long, or broken by an error)")]
    UnknownConnection,
    #[error("the RDMA connection belongs to another access key")]
    NotOwner,
    #[error("{0}")]
    TooMany(String),
    #[error("{0}")]
    BadEndpoint(String),
    #[error("{0}")]
    Device(String),
}

/// A connection as made for a client.
pub struct ClientConnection {
    pub id: u64,
    pub endpoint: [u8; ENDPOINT_LEN],
    pub key: [u8; CLIENT_KEY_LEN],
}

/// What a GET transfer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Bytes in the client's buffer, from its start.
    pub written: u64,
    pub error: Option<String>,
}

/// The client side of RDMA for one node (cheap to clone).
#[derive(Clone)]
pub struct ClientPlane {
    inner: Arc<PlaneInner>,
}

struct PlaneInner {
    dev: VerbsDevice,
    /// The node's data pool: GET bodies cut from it are written without a copy.
    data: BufPool,
    /// Registered staging buffers (LOCAL_WRITE): GET copies and PUT reads.
    staging: BufPool,
    config: ClientPlaneConfig,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    connects: AtomicU64,
    gets: AtomicU64,
    puts: AtomicU64,
    bytes_out: AtomicU64,
    bytes_in: AtomicU64,
    copied: AtomicU64,
    errors: AtomicU64,
}

struct Conn {
    id: u64,
    owner: String,
    key: [u8; CLIENT_KEY_LEN],
    qp: QueuePair,
    cq: AsyncCompletionQueue,
    /// Held by the transfer in progress.
    busy: Arc<AsyncMutex<()>>,
    last_used: Mutex<Instant>,
}

impl ClientPlane {
    /// The plane on `dev`, sending GET bodies found in `data` (the node's registered data pool)
    /// as they are, with `staging` (registered with `dev`'s protection domain, LOCAL_WRITE) for
    /// the rest and for PUT reads. Starts the idle reaper (call inside a tokio runtime).
    pub fn new(
        dev: VerbsDevice,
        data: BufPool,
        staging: BufPool,
        config: ClientPlaneConfig,
    ) -> ClientPlane {
        let plane = ClientPlane {
            inner: Arc::new(PlaneInner {
                dev,
                data,
                staging,
                config,
                conns: Mutex::new(HashMap::new()),
                connects: AtomicU64::new(0),
                gets: AtomicU64::new(0),
                puts: AtomicU64::new(0),
                bytes_out: AtomicU64::new(0),
                bytes_in: AtomicU64::new(0),
                copied: AtomicU64::new(0),
                errors: AtomicU64::new(0),
            }),
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            let weak = Arc::downgrade(&plane.inner);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(10));
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { return };
                    inner.close_idle();
                }
            });
        }
        plane
    }

    /// A connection for `owner` to the client's QP endpoint (`client`, encoded).
    pub fn connect(
        &self,
        owner: &str,
        client: &[u8],
    ) -> Result<ClientConnection, ClientPlaneError> {
        let theirs = QpEndpoint::decode(client)
            .map_err(|e| ClientPlaneError::BadEndpoint(format!("the client's QP endpoint: {e}")))?;
        let inner = &self.inner;
        {
            let conns = lock(&inner.conns);
            if conns.len() >= inner.config.max_connections {
                return Err(ClientPlaneError::TooMany(format!(
                    "this node has {} client RDMA connections, its limit; close one or retry later",
                    conns.len()
                )));
            }
            let mine = conns.values().filter(|c| c.owner == owner).count();
            if mine >= inner.config.per_owner {
                return Err(ClientPlaneError::TooMany(format!(
                    "this access key holds {mine} RDMA connections, the most one key may hold"
                )));
            }
        }
        let depth = (inner.config.max_requests as u32) * 2;
        let (cq, prepared) = inner
            .dev
            .qp(depth)
            .map_err(|e| ClientPlaneError::Device(format!("cannot create a queue pair: {e}")))?;
        let endpoint = prepared.endpoint().encode();
        let qp = prepared
            .connect(&theirs, &ConnectOptions::default())
            .map_err(|e| {
                ClientPlaneError::BadEndpoint(format!(
                    "cannot connect to the client's queue pair: {e}"
                ))
            })?;
        let mut key = [0u8; CLIENT_KEY_LEN];
        rand::Rng::fill(&mut rand::thread_rng(), &mut key[..]);
        let mut conns = lock(&inner.conns);
        let id = loop {
            let id: u64 = rand::random();
            if id != 0 && !conns.contains_key(&id) {
                break id;
            }
        };
        conns.insert(
            id,
            Arc::new(Conn {
                id,
                owner: owner.to_owned(),
                key,
                qp,
                cq,
                busy: Arc::new(AsyncMutex::new(())),
                last_used: Mutex::new(Instant::now()),
            }),
        );
        inner.connects.fetch_add(1, Ordering::Relaxed);
        Ok(ClientConnection { id, endpoint, key })
    }

    /// Closes connection `id` of `owner`.
    pub fn disconnect(&self, owner: &str, id: u64) -> Result<(), ClientPlaneError> {
        let mut conns = lock(&self.inner.conns);
        match conns.get(&id) {
            None => Err(ClientPlaneError::UnknownConnection),
            Some(c) if c.owner != owner => Err(ClientPlaneError::NotOwner),
            Some(_) => {
                if let Some(c) = conns.remove(&id) {
                    drop(conns);
                    drain_later(c, Vec::new());
                }
                Ok(())
            }
        }
    }

    /// Owner and token key of connection `id`.
    pub fn connection(&self, id: u64) -> Option<(String, [u8; CLIENT_KEY_LEN])> {
        lock(&self.inner.conns)
            .get(&id)
            .map(|c| (c.owner.clone(), c.key))
    }

    pub fn figures(&self) -> ClientRdmaFigures {
        let i = &self.inner;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ClientRdmaFigures {
            connections: lock(&i.conns).len() as u64,
            connects_total: load(&i.connects),
            gets_total: load(&i.gets),
            puts_total: load(&i.puts),
            bytes_out: load(&i.bytes_out),
            bytes_in: load(&i.bytes_in),
            copied_bytes: load(&i.copied),
            errors_total: load(&i.errors),
        }
    }

    /// Takes connection `id` for one transfer (waits while another transfer uses it).
    async fn take(&self, id: u64) -> Result<(Arc<Conn>, OwnedMutexGuard<()>), String> {
        let conn = lock(&self.inner.conns)
            .get(&id)
            .cloned()
            .ok_or_else(|| ClientPlaneError::UnknownConnection.to_string())?;
        let guard =
            tokio::time::timeout(self.inner.config.op_timeout, conn.busy.clone().lock_owned())
                .await
                .map_err(|_| "the connection stayed busy with another transfer".to_string())?;
        // Closed while this transfer waited for it.
        if !lock(&self.inner.conns).contains_key(&id) {
            return Err(ClientPlaneError::UnknownConnection.to_string());
        }
        *lock(&conn.last_used) = Instant::now();
        Ok((conn, guard))
    }

    /// Writes `data` into `to` from its start; answers when every write completed, or what was
    /// done when one failed. A failure breaks the connection.
    pub async fn write<S>(&self, id: u64, to: RemoteBuf, data: S) -> WriteOutcome
    where
        S: Stream<Item = io::Result<Bytes>> + Send,
    {
        let inner = &self.inner;
        inner.gets.fetch_add(1, Ordering::Relaxed);
        let (conn, _busy) = match self.take(id).await {
            Ok(c) => c,
            Err(e) => {
                inner.errors.fetch_add(1, Ordering::Relaxed);
                return WriteOutcome {
                    written: 0,
                    error: Some(e),
                };
            }
        };
        let mut t = InFlightSet::new(conn, inner.clone());
        let result = t.write_all(to, data).await;
        let written = t.done_bytes;
        inner.bytes_out.fetch_add(written, Ordering::Relaxed);
        match result {
            Ok(()) => {
                t.finish();
                WriteOutcome {
                    written,
                    error: None,
                }
            }
            Err(e) => {
                inner.errors.fetch_add(1, Ordering::Relaxed);
                t.counted = true;
                // The object's stream failed, not the connection: wait for what is posted and
                // keep the connection. Otherwise `t` drops: the connection is broken and drained.
                if t.failed.is_none() && t.drain().await.is_ok() {
                    t.finish();
                }
                WriteOutcome {
                    written,
                    error: Some(e),
                }
            }
        }
    }

    /// The `from.len` bytes of `from`, RDMA-READ block by block as the stream is polled.
    pub fn read(
        &self,
        id: u64,
        from: RemoteBuf,
    ) -> Result<Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>, ClientPlaneError> {
        if !lock(&self.inner.conns).contains_key(&id) {
            return Err(ClientPlaneError::UnknownConnection);
        }
        self.inner.puts.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(2);
        let plane = self.clone();
        tokio::spawn(async move {
            let (conn, _busy) = match plane.take(id).await {
                Ok(c) => c,
                Err(e) => {
                    plane.inner.errors.fetch_add(1, Ordering::Relaxed);
                    let _ = tx.send(Err(io::Error::other(e))).await;
                    return;
                }
            };
            let mut t = InFlightSet::new(conn, plane.inner.clone());
            match t.read_all(from, &tx).await {
                Ok(()) => t.finish(),
                // The request went away (refused before or while reading its body): the
                // connection is fine once what is posted has completed.
                Err(_) if tx.is_closed() && t.failed.is_none() => {
                    if t.drain().await.is_ok() {
                        t.finish();
                    }
                }
                Err(e) => {
                    plane.inner.errors.fetch_add(1, Ordering::Relaxed);
                    t.counted = true;
                    let _ = tx.send(Err(io::Error::other(e))).await;
                }
            }
        });
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })))
    }
}

impl PlaneInner {
    fn close_idle(self: &Arc<Self>) {
        let now = Instant::now();
        let idle: Vec<Arc<Conn>> = {
            let mut conns = lock(&self.conns);
            let ids: Vec<u64> = conns
                .values()
                .filter(|c| {
                    now.duration_since(*lock(&c.last_used)) > self.config.idle
                        && c.busy.try_lock().is_ok()
                })
                .map(|c| c.id)
                .collect();
            ids.iter().filter_map(|id| conns.remove(id)).collect()
        };
        for c in idle {
            tracing::info!(connection = %format_args!("{:016x}", c.id), "RDMA: idle client connection closed");
            drain_later(c, Vec::new());
        }
    }

    /// Removes a broken connection (it is drained by whoever holds its requests).
    fn forget(&self, id: u64) {
        lock(&self.conns).remove(&id);
    }
}

/// One posted request of a transfer, in posting order.
struct Posted1 {
    wr: WrId,
    len: u64,
    /// The staging buffer it used, to restore from the completion.
    staging: Option<quarry_buf::Posted>,
    /// Completed (successfully); its bytes count once every earlier one has too.
    done: bool,
    /// A read's landed block.
    landed: Option<PooledBuf>,
}

/// The requests a transfer has in flight on its connection; dropped unfinished, it breaks the
/// connection and hands its requests to a drain task.
struct InFlightSet {
    conn: Option<Arc<Conn>>,
    plane: Arc<PlaneInner>,
    posted: VecDeque<Posted1>,
    bytes_in_flight: usize,
    /// Bytes of the completed prefix.
    done_bytes: u64,
    failed: Option<String>,
    /// Whether the transfer's failure was counted already (in `errors`).
    counted: bool,
    out: Vec<Completion>,
}

impl InFlightSet {
    fn new(conn: Arc<Conn>, plane: Arc<PlaneInner>) -> Self {
        InFlightSet {
            conn: Some(conn),
            plane,
            posted: VecDeque::new(),
            bytes_in_flight: 0,
            done_bytes: 0,
            failed: None,
            counted: false,
            out: Vec::new(),
        }
    }

    fn conn(&self) -> &Arc<Conn> {
        self.conn
            .as_ref()
            .expect("the connection is there until finish or drop")
    }

    /// The transfer ended with nothing in flight: the connection stays usable.
    fn finish(mut self) {
        if self.posted.is_empty() && self.failed.is_none() {
            if let Some(c) = self.conn.take() {
                *lock(&c.last_used) = Instant::now();
            }
        }
    }

    fn full(&self, next: usize) -> bool {
        !self.posted.is_empty()
            && (self.bytes_in_flight + next > self.plane.config.window
                || self.posted.len() >= self.plane.config.max_requests)
    }

    /// Waits for at least one completion and applies them.
    async fn complete_some(&mut self) -> Result<(), String> {
        let timeout = self.plane.config.op_timeout;
        let conn = self.conn().clone();
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        match tokio::time::timeout(timeout, conn.cq.next(&mut out, 16)).await {
            Err(_) => return Err(format!("no completion within {timeout:?}")),
            Ok(Err(e)) => return Err(format!("polling the completion queue: {e}")),
            Ok(Ok(_)) => {}
        }
        for c in out.drain(..) {
            self.apply(c);
        }
        self.out = out;
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn apply(&mut self, c: Completion) {
        let Some(p) = self.posted.iter_mut().find(|p| p.wr == c.wr_id) else {
            return;
        };
        let buf = match (p.staging.take(), c.buf) {
            (Some(ticket), Some(mem)) => Some(ticket.restore(mem)),
            _ => None,
        };
        if let Err(e) = &c.status {
            if self.failed.is_none() {
                self.failed = Some(format!("RDMA {:?} failed: {e}", c.opcode));
            }
        } else {
            p.done = true;
            if c.opcode == Opcode::RdmaRead {
                p.landed = buf.map(|mut b| {
                    b.set_len(p.len as usize);
                    b
                });
            }
        }
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(p.len as usize);
    }

    /// Pops the completed prefix, counting its bytes; read blocks come back in order.
    fn pop_done(&mut self) -> Vec<PooledBuf> {
        let mut landed = Vec::new();
        while self.posted.front().is_some_and(|p| p.done) {
            let p = self.posted.pop_front().expect("front exists");
            self.done_bytes += p.len;
            landed.extend(p.landed);
        }
        landed
    }

    fn record_post(
        &mut self,
        r: Result<WrId, PostError>,
        len: usize,
        staging: Option<quarry_buf::Posted>,
    ) -> Result<(), String> {
        match r {
            Ok(wr) => {
                self.bytes_in_flight += len;
                self.posted.push_back(Posted1 {
                    wr,
                    len: len as u64,
                    staging,
                    done: false,
                    landed: None,
                });
                Ok(())
            }
            Err(e) => {
                // The memory came back with the error: the staging buffer goes home.
                if let (Some(ticket), Some(mem)) = (staging, e.buf) {
                    drop(ticket.restore(mem));
                }
                let m = format!("posting an RDMA request: {}", e.error);
                self.failed = Some(m.clone());
                Err(m)
            }
        }
    }

    /// Waits until nothing is in flight (the completed blocks of a read are dropped).
    async fn drain(&mut self) -> Result<(), String> {
        while !self.posted.is_empty() {
            self.complete_some().await?;
            self.pop_done();
        }
        Ok(())
    }

    /// A staging buffer, without ever waiting on the pool while this transfer holds some.
    async fn staging_buf(&mut self) -> Result<PooledBuf, String> {
        loop {
            if let Some(b) = self.plane.staging.try_get() {
                return Ok(b);
            }
            if self.posted.is_empty() {
                return Ok(self.plane.staging.get().await);
            }
            self.complete_some().await?;
            self.pop_done();
        }
    }

    async fn write_all<S>(&mut self, to: RemoteBuf, data: S) -> Result<(), String>
    where
        S: Stream<Item = io::Result<Bytes>> + Send,
    {
        let mut data = std::pin::pin!(data);
        let block = self.plane.staging.buf_size();
        let mut offset = 0u64;
        while let Some(chunk) = data.next().await {
            let mut chunk = chunk.map_err(|e| format!("reading the object: {e}"))?;
            while !chunk.is_empty() {
                let piece = chunk.split_to(chunk.len().min(block));
                let len = piece.len();
                let remote = to
                    .slice(offset, len as u64)
                    .ok_or_else(|| "the object is larger than the client's buffer".to_string())?;
                while self.full(len) {
                    self.complete_some().await?;
                    self.pop_done();
                }
                let conn = self.conn().clone();
                match self.plane.data.held(piece) {
                    Ok(held) => {
                        let r = conn.qp.post_write_held(held, len, remote, None);
                        self.record_post(r, len, None)?;
                    }
                    Err(piece) => {
                        let mut buf = self.staging_buf().await?;
                        buf.extend_from_slice(&piece);
                        let Ok((mem, ticket)) = buf.into_posted() else {
                            return Err("the staging pool is not registered".into());
                        };
                        self.plane.copied.fetch_add(len as u64, Ordering::Relaxed);
                        let r = conn.qp.post_write(mem, len, remote, None);
                        self.record_post(r, len, Some(ticket))?;
                    }
                }
                offset += len as u64;
            }
        }
        self.drain().await
    }

    async fn read_all(
        &mut self,
        from: RemoteBuf,
        tx: &mpsc::Sender<io::Result<Bytes>>,
    ) -> Result<(), String> {
        let block = self.plane.staging.buf_size() as u64;
        let mut offset = 0u64;
        loop {
            // Post reads while the window allows.
            while offset < from.len {
                let len = (from.len - offset).min(block) as usize;
                if self.full(len) {
                    break;
                }
                let remote = from
                    .slice(offset, len as u64)
                    .ok_or_else(|| "read beyond the client's buffer".to_string())?;
                let buf = self.staging_buf().await?;
                let Ok((mem, ticket)) = buf.into_posted() else {
                    return Err("the staging pool is not registered".into());
                };
                let conn = self.conn().clone();
                let r = conn.qp.post_read(mem, len, remote);
                self.record_post(r, len, Some(ticket))?;
                offset += len as u64;
            }
            if self.posted.is_empty() {
                return Ok(());
            }
            self.complete_some().await?;
            for block in self.pop_done() {
                // Copied out, so the staging buffer is free again at once.
                let bytes = Bytes::copy_from_slice(&block);
                drop(block);
                self.plane
                    .bytes_in
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                if tx.send(Ok(bytes)).await.is_err() {
                    return Err("the request was dropped".into());
                }
            }
        }
    }
}

impl Drop for InFlightSet {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        // Unfinished (failed, timed out, or dropped with its request): an error, and the
        // connection cannot be trusted (or reused) any more.
        if !self.counted {
            self.plane.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.plane.forget(conn.id);
        let staging: Vec<(WrId, quarry_buf::Posted)> = self
            .posted
            .drain(..)
            .filter_map(|p| p.staging.map(|t| (p.wr, t)))
            .collect();
        drain_later(conn, staging);
    }
}

/// Moves the connection's QP to the error state and, in a task, polls its completions until
/// none is in flight (each flushed request hands its buffer back, which goes home with its
/// ticket), so no staging buffer is lost; then drops the connection, destroying the QP.
fn drain_later(conn: Arc<Conn>, mut staging: Vec<(WrId, quarry_buf::Posted)>) {
    if let Err(e) = conn.qp.set_error() {
        tracing::warn!(error = %e, "RDMA: cannot move a client queue pair to the error state");
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut out = Vec::new();
        while conn.qp.in_flight() > 0 && Instant::now() < deadline {
            out.clear();
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, conn.cq.next(&mut out, 16)).await {
                Ok(Ok(_)) => {}
                _ => break,
            }
            for c in out.drain(..) {
                if let Some(i) = staging.iter().position(|(wr, _)| *wr == c.wr_id) {
                    let (_, ticket) = staging.swap_remove(i);
                    if let Some(mem) = c.buf {
                        drop(ticket.restore(mem));
                    }
                }
            }
        }
        if conn.qp.in_flight() > 0 {
            tracing::warn!(
                connection = %format_args!("{:016x}", conn.id),
                in_flight = conn.qp.in_flight(),
                "RDMA: a client queue pair did not flush; its buffers are released when it is destroyed"
            );
        }
        drop(conn);
    });
}
