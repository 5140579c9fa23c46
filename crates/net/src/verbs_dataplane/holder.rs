//! The holder side: [`VerbsResponder`] answers connects and reads for the drive server (RDMA
//! WRITE of drive reads into the requester's slots) and fetches appends (RDMA READ).

use super::*;

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
        crate::methods::Service::of(method) == Some(crate::methods::Service::Verbs)
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
        // The drive reads straight into the registered buffer and gives it back, ready to post.
        let buf = d
            .read_shard_into(&r.bucket, &r.key, r.data_dir, r.part, r.offset, buf)
            .await
            .map_err(|e| {
                let (code, message) = drive_proto::encode_drive_error(&e);
                rpc_err(code, message)
            })?;
        if !buf.is_registered() {
            return Err(rpc_err(
                codes::INTERNAL,
                "the drive read into a buffer that is not registered",
            ));
        }
        let n = buf.len();
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
        Ok(encode_read_answer(len as u32))
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
