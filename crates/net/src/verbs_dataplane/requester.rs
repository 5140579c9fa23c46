//! The requester side: [`VerbsDataPlane`], the [`DataPlane`] of the node that serves the S3
//! request: queue pairs per peer, lent slots and bytes ([`LendTable`]), completions, back-off and
//! the TCP fallback.

use super::*;

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

    fn pools(&self) -> Vec<(&'static str, quarry_buf::BufPoolStats)> {
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
}
