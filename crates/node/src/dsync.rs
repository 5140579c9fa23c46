//! Per-object write locks granted by a quorum of an erasure set's nodes, with a refreshed lease.
//!
//! In a cluster every node serves S3 for every object, so the in-process [`NsLock`] is not enough:
//! two nodes must never commit one key at once. Each node runs a [`LockServer`], a table of
//! `resource -> (owner uid, lease expiry)` answering three RPC methods ([`METHOD_LOCK`],
//! [`METHOD_REFRESH`], [`METHOD_UNLOCK`]); a [`DistLocker`] takes a lock by asking every node of
//! the set and holds it once `n/2 + 1` of them granted it. Two holders would need two majorities of
//! the same nodes, which intersect in a node that granted both, and a node grants a live lease to
//! one owner only.
//!
//! Leases: a grant lasts [`DistLockerConfig::lease`] on the granting node's monotonic clock (no
//! clocks are compared between nodes). While a lock is held a background task refreshes it every
//! `lease / 3`; a holder that dies stops refreshing, its lease runs out on every node and the lock
//! is free again: that is how a lock is released when its holder dies. The price is the usual one
//! of leases: a holder that is cut off from the set for longer than the lease loses its lock while
//! it still runs. It cannot be interrupted (the lock guards an ordinary async section), so the
//! refresh task logs a warning saying so when a refresh falls below quorum.
//!
//! Messages are versioned, in the internode codec (`quarry_net::codec`), encoded and decoded by
//! pure functions:
//!
//! ```text
//! request (all three methods)            reply
//! offset size                             offset size
//!      0    1  version (2)                     0    1  version (2)
//!      1   16  owner uid                       1    1  status: 1 granted/done, 2 held by another
//!     17    4  lease in ms (u32 BE)                       owner, 3 not held by this uid
//!     21    4  resource length (u32 BE)
//!     25    n  resource (UTF-8, 1..=2048 bytes)
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use futures::stream::{FuturesUnordered, StreamExt};
use quarry_net::codec::{self, BufExt, BufMutExt, Codec, CodecError};
use quarry_net::rpc::codes;
use quarry_net::{Handler, RpcClient, RpcError};
use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};
use uuid::Uuid;

use quarry_object::{Error, LockGuard, Locker, NsGuard, NsLock, Result};

/// The lock service's methods and error code (declared in `quarry_net::methods`, the registry).
pub use quarry_net::methods::{
    CODE_LOCK_TABLE_FULL as CODE_TABLE_FULL, LOCK_LOCK as METHOD_LOCK,
    LOCK_REFRESH as METHOD_REFRESH, LOCK_UNLOCK as METHOD_UNLOCK,
};

/// The lock protocol version this build speaks (2: the one internode codec).
pub const LOCK_PROTO_VERSION: u8 = 2;
/// Longest resource name, in bytes.
pub const MAX_RESOURCE_LEN: usize = 2048;
/// Longest lease a request may ask for.
pub const MAX_LEASE: Duration = Duration::from_secs(3600);

/// One request of the lock protocol (the same shape for all three methods; UNLOCK ignores the
/// lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRequest {
    pub resource: String,
    pub uid: Uuid,
    /// At most [`MAX_LEASE`], at least 1 ms, whole milliseconds on the wire.
    pub lease: Duration,
}

/// A lock server's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LockReply {
    /// LOCK: granted (or extended); REFRESH: extended; UNLOCK: released.
    Granted = 1,
    /// LOCK: another uid holds a live lease.
    HeldByOther = 2,
    /// REFRESH or UNLOCK: this uid does not hold the lock (it expired, or was never granted).
    NotHeld = 3,
}

fn check_resource(resource: &str) -> Result<(), CodecError> {
    if resource.is_empty() || resource.len() > MAX_RESOURCE_LEN {
        return Err(CodecError::OutOfRange {
            what: "lock resource name length",
            value: resource.len() as u64,
            min: 1,
            max: MAX_RESOURCE_LEN as u64,
        });
    }
    Ok(())
}

fn check_lease_ms(ms: u128) -> Result<u32, CodecError> {
    let max = MAX_LEASE.as_millis();
    if ms == 0 || ms > max {
        return Err(CodecError::OutOfRange {
            what: "lock lease in ms",
            value: u64::try_from(ms).unwrap_or(u64::MAX),
            min: 1,
            max: max as u64,
        });
    }
    u32::try_from(ms).map_err(|_| CodecError::OutOfRange {
        what: "lock lease in ms",
        value: u64::try_from(ms).unwrap_or(u64::MAX),
        min: 1,
        max: max as u64,
    })
}

impl Codec for LockRequest {
    fn encode<B: BufMut>(&self, b: &mut B) {
        b.put_value(&self.uid);
        // In range: checked by `encode_request` before.
        b.put_value(&(u32::try_from(self.lease.as_millis()).unwrap_or(u32::MAX)));
        b.put_value(&self.resource);
    }

    fn decode<B: Buf>(b: &mut B) -> Result<LockRequest, CodecError> {
        let uid = b.get_value()?;
        let lease_ms: u32 = b.get_value()?;
        check_lease_ms(lease_ms.into())?;
        let resource: String = b.get_value()?;
        check_resource(&resource)?;
        Ok(LockRequest {
            resource,
            uid,
            lease: Duration::from_millis(lease_ms.into()),
        })
    }
}

impl Codec for LockReply {
    fn encode<B: BufMut>(&self, b: &mut B) {
        b.put_u8(*self as u8);
    }

    fn decode<B: Buf>(b: &mut B) -> Result<LockReply, CodecError> {
        match b.get_value::<u8>()? {
            1 => Ok(LockReply::Granted),
            2 => Ok(LockReply::HeldByOther),
            3 => Ok(LockReply::NotHeld),
            s => Err(CodecError::Unknown {
                what: "lock reply status",
                value: s.into(),
            }),
        }
    }
}

/// `value` as a message of the lock protocol: its version, then the value.
fn message<T: Codec>(value: &T) -> Bytes {
    codec::versioned(LOCK_PROTO_VERSION, value)
}

/// Inverse of [`message`].
fn from_message<T: Codec>(buf: &[u8]) -> Result<T, CodecError> {
    codec::from_versioned("lock protocol", LOCK_PROTO_VERSION, buf)
}

/// Encodes a request; fails on a name or lease out of bounds.
pub fn encode_request(req: &LockRequest) -> Result<Bytes, CodecError> {
    check_resource(&req.resource)?;
    check_lease_ms(req.lease.as_millis())?;
    Ok(message(req))
}

/// Decodes a request, checking every length and bound.
pub fn decode_request(buf: &[u8]) -> Result<LockRequest, CodecError> {
    from_message(buf)
}

pub fn encode_reply(reply: LockReply) -> Bytes {
    message(&reply)
}

pub fn decode_reply(buf: &[u8]) -> Result<LockReply, CodecError> {
    from_message(buf)
}

// ---------------------------------------------------------------------------------------------
// The server side
// ---------------------------------------------------------------------------------------------

/// How often, at most, a lock server sweeps expired entries out of its table.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Default bound on a lock server's table.
pub const DEFAULT_MAX_ENTRIES: usize = 1 << 20;

struct Entry {
    uid: Uuid,
    expires: Instant,
}

struct Table {
    entries: HashMap<String, Entry>,
    next_sweep: Instant,
}

impl Table {
    fn sweep(&mut self, now: Instant) {
        self.entries.retain(|_, e| e.expires > now);
        self.next_sweep = now + SWEEP_EVERY;
    }
}

/// The lock table of one node, answering the lock methods of its peers (and its own).
///
/// Give it to the node's RPC handler: every method id of `Service::Lock` (`quarry_net::methods`) goes
/// to [`Handler::handle`], which refuses the ids it does not know. Expiry uses this node's
/// monotonic clock; expired entries count as free at once and are swept from the table at most
/// once per second.
pub struct LockServer {
    table: Mutex<Table>,
    max_entries: usize,
}

impl std::fmt::Debug for LockServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockServer")
            .field("entries", &self.table().entries.len())
            .field("max_entries", &self.max_entries)
            .finish()
    }
}

impl Default for LockServer {
    fn default() -> Self {
        LockServer::new(DEFAULT_MAX_ENTRIES)
    }
}

/// The table has no room for another lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the lock table is full ({0} entries)")]
pub struct TableFull(pub usize);

impl LockServer {
    /// A server holding at most `max_entries` live locks (further LOCKs of new names fail).
    pub fn new(max_entries: usize) -> LockServer {
        LockServer {
            table: Mutex::new(Table {
                entries: HashMap::new(),
                next_sweep: Instant::now() + SWEEP_EVERY,
            }),
            max_entries: max_entries.max(1),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// LOCK: grants if the resource is free, expired, or held by `req.uid` (then the lease is
    /// renewed from now).
    pub fn lock(&self, req: &LockRequest) -> Result<LockReply, TableFull> {
        self.lock_at(req, Instant::now())
    }

    /// REFRESH: renews the lease from now if `req.uid` holds a live lock on the resource.
    pub fn refresh(&self, req: &LockRequest) -> LockReply {
        self.refresh_at(req, Instant::now())
    }

    /// UNLOCK: removes the lock if `req.uid` holds it.
    pub fn unlock(&self, req: &LockRequest) -> LockReply {
        self.unlock_at(req, Instant::now())
    }

    /// Live locks in the table.
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.table()
            .entries
            .values()
            .filter(|e| e.expires > now)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock_at(&self, req: &LockRequest, now: Instant) -> Result<LockReply, TableFull> {
        let mut t = self.table();
        if now >= t.next_sweep {
            t.sweep(now);
        }
        let expires = now + req.lease.min(MAX_LEASE);
        if let Some(e) = t.entries.get_mut(&req.resource) {
            if e.uid == req.uid || e.expires <= now {
                e.uid = req.uid;
                e.expires = expires;
                return Ok(LockReply::Granted);
            }
            return Ok(LockReply::HeldByOther);
        }
        if t.entries.len() >= self.max_entries {
            t.sweep(now);
            if t.entries.len() >= self.max_entries {
                return Err(TableFull(t.entries.len()));
            }
        }
        t.entries.insert(
            req.resource.clone(),
            Entry {
                uid: req.uid,
                expires,
            },
        );
        Ok(LockReply::Granted)
    }

    fn refresh_at(&self, req: &LockRequest, now: Instant) -> LockReply {
        let mut t = self.table();
        match t.entries.get_mut(&req.resource) {
            Some(e) if e.uid == req.uid && e.expires > now => {
                e.expires = now + req.lease.min(MAX_LEASE);
                LockReply::Granted
            }
            _ => LockReply::NotHeld,
        }
    }

    fn unlock_at(&self, req: &LockRequest, now: Instant) -> LockReply {
        let mut t = self.table();
        let held = matches!(t.entries.get(&req.resource), Some(e) if e.uid == req.uid);
        if !held {
            return LockReply::NotHeld;
        }
        t.entries.remove(&req.resource);
        if now >= t.next_sweep {
            t.sweep(now);
        }
        LockReply::Granted
    }
}

impl Handler for LockServer {
    async fn handle(&self, method: u16, payload: Bytes) -> Result<Bytes, RpcError> {
        if !matches!(method, METHOD_LOCK | METHOD_REFRESH | METHOD_UNLOCK) {
            return Err(RpcError::unknown_method(method));
        }
        let req = decode_request(&payload)
            .map_err(|e| RpcError::remote(codes::BAD_REQUEST, e.to_string()))?;
        let reply = match method {
            METHOD_LOCK => self
                .lock(&req)
                .map_err(|e| RpcError::remote(CODE_TABLE_FULL, e.to_string()))?,
            METHOD_REFRESH => self.refresh(&req),
            _ => self.unlock(&req),
        };
        Ok(encode_reply(reply))
    }
}

// ---------------------------------------------------------------------------------------------
// The client side
// ---------------------------------------------------------------------------------------------

/// Settings of a [`DistLocker`].
#[derive(Debug, Clone)]
pub struct DistLockerConfig {
    /// How long a grant lasts on a node without a refresh; the holder refreshes every
    /// `lease / 3`. At least 30 ms, at most [`MAX_LEASE`].
    pub lease: Duration,
    /// How long [`Locker::lock`] tries (waiting for this node's own holders included) before it
    /// fails with [`Error::LockTimeout`].
    pub acquire_timeout: Duration,
    /// Bound on each LOCK, REFRESH and UNLOCK call (a REFRESH also by `lease / 3`).
    pub call_timeout: Duration,
    /// First pause after a failed attempt; doubles per attempt up to `retry_max`, jittered to
    /// 50-100 % so contenders do not retry in lockstep.
    pub retry_initial: Duration,
    pub retry_max: Duration,
}

impl Default for DistLockerConfig {
    fn default() -> Self {
        DistLockerConfig {
            lease: Duration::from_secs(30),
            acquire_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(3),
            retry_initial: Duration::from_millis(10),
            retry_max: Duration::from_millis(500),
        }
    }
}

/// A [`DistLocker`] that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DistLockerError {
    #[error("a distributed locker needs at least one node")]
    NoNodes,
    #[error("lock lease {0:?} is out of range (30 ms to 1 h)")]
    BadLease(Duration),
    #[error("lock {0} must be more than zero")]
    ZeroDuration(&'static str),
}

/// Counters of a [`DistLocker`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DistLockerStats {
    /// Locks acquired.
    pub acquired: u64,
    /// Acquisitions that failed with [`Error::LockTimeout`].
    pub timeouts: u64,
    /// Refresh rounds that fell below quorum while a lock was held.
    pub refresh_lost: u64,
}

#[derive(Default)]
struct Counters {
    acquired: AtomicU64,
    timeouts: AtomicU64,
    refresh_lost: AtomicU64,
}

/// A [`Locker`] whose locks are granted by a quorum (`n/2 + 1`) of the [`LockServer`]s of a set's
/// `n` nodes.
///
/// Every node is called over the RPC client, this node included (its own address is one of the
/// nodes): one code path, and this node's table is the same [`LockServer`] its peers call. Within
/// this process the name is first locked in an in-process [`NsLock`], so a node never contends
/// with itself over the network.
pub struct DistLocker {
    nodes: Arc<[String]>,
    client: Arc<RpcClient>,
    cfg: DistLockerConfig,
    local: NsLock,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for DistLocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistLocker")
            .field("nodes", &self.nodes)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl DistLocker {
    /// A locker over the lock servers at `nodes` (`host:port` of each node's control RPC, this
    /// node's own included; duplicates are removed), called through `client`.
    pub fn new<S: Into<String>>(
        nodes: impl IntoIterator<Item = S>,
        client: Arc<RpcClient>,
        cfg: DistLockerConfig,
    ) -> Result<DistLocker, DistLockerError> {
        let mut list: Vec<String> = Vec::new();
        for n in nodes {
            let n = n.into();
            if !list.contains(&n) {
                list.push(n);
            }
        }
        if list.is_empty() {
            return Err(DistLockerError::NoNodes);
        }
        if cfg.lease < Duration::from_millis(30) || cfg.lease > MAX_LEASE {
            return Err(DistLockerError::BadLease(cfg.lease));
        }
        for (what, d) in [
            ("acquire timeout", cfg.acquire_timeout),
            ("call timeout", cfg.call_timeout),
            ("initial retry delay", cfg.retry_initial),
        ] {
            if d.is_zero() {
                return Err(DistLockerError::ZeroDuration(what));
            }
        }
        Ok(DistLocker {
            nodes: list.into(),
            client,
            cfg,
            local: NsLock::default(),
            counters: Arc::default(),
        })
    }

    /// The lock servers asked, deduplicated.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Grants needed to hold a lock: `n/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    pub fn config(&self) -> &DistLockerConfig {
        &self.cfg
    }

    pub fn stats(&self) -> DistLockerStats {
        DistLockerStats {
            acquired: self.counters.acquired.load(Ordering::Relaxed),
            timeouts: self.counters.timeouts.load(Ordering::Relaxed),
            refresh_lost: self.counters.refresh_lost.load(Ordering::Relaxed),
        }
    }

    fn timeout_error(
        &self,
        name: &str,
        start: Instant,
        granted: usize,
        unreachable: usize,
    ) -> Error {
        self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
        Error::LockTimeout {
            resource: name.to_owned(),
            waited: start.elapsed(),
            granted,
            need: self.quorum(),
            nodes: self.nodes.len(),
            unreachable,
        }
    }

    async fn acquire(&self, name: &str) -> Result<LockGuard> {
        check_resource(name).map_err(|e| Error::Internal(format!("cannot lock {name:?}: {e}")))?;
        let start = Instant::now();
        let deadline = start + self.cfg.acquire_timeout;
        let Ok(local) = tokio::time::timeout_at(deadline, self.local.acquire(name)).await else {
            return Err(self.timeout_error(name, start, 0, 0));
        };
        let quorum = self.quorum();
        let mut backoff = self.cfg.retry_initial;
        loop {
            // A fresh uid per attempt: a late UNLOCK of a failed attempt can never remove a grant
            // of a later one.
            let req = LockRequest {
                resource: name.to_owned(),
                uid: Uuid::new_v4(),
                lease: self.cfg.lease,
            };
            let payload =
                encode_request(&req).map_err(|e| Error::Internal(format!("lock request: {e}")))?;
            let call_timeout = self
                .cfg
                .call_timeout
                .min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1));
            let mut attempt = Attempt {
                locker: self,
                req: Some(req),
            };
            let answers = call_all(
                &self.client,
                &self.nodes,
                METHOD_LOCK,
                &payload,
                call_timeout,
            )
            .await;
            let Some(req) = attempt.req.take() else {
                return Err(Error::Internal("lock attempt lost its request".into()));
            };
            let mut granted = 0;
            let mut unreachable = 0;
            let mut to_release = Vec::new();
            for (node, answer) in self.nodes.iter().zip(&answers) {
                match answer {
                    Ok(LockReply::Granted) => {
                        granted += 1;
                        to_release.push(node.clone());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        debug!(node = %node, resource = name, error = %e, "lock call failed");
                        // A call cut short by this acquisition's own deadline says nothing
                        // about the node; only a full-length timeout or a refused connection does.
                        let clipped = call_timeout < self.cfg.call_timeout
                            && matches!(e, RpcError::Timeout { .. });
                        if e.is_unreachable() && !clipped {
                            unreachable += 1;
                        }
                        // It may still have been granted (a late answer): release it too.
                        to_release.push(node.clone());
                    }
                }
            }
            if granted >= quorum {
                self.counters.acquired.fetch_add(1, Ordering::Relaxed);
                let held = Held {
                    req,
                    nodes: self.nodes.clone(),
                    client: self.client.clone(),
                    call_timeout: self.cfg.call_timeout,
                    quorum,
                };
                let refresh = tokio::spawn(held.clone().refresh_loop(self.counters.clone()));
                return Ok(LockGuard::new(DistGuard {
                    held: Some(held),
                    refresh,
                    local: Some(local),
                }));
            }
            if !to_release.is_empty() {
                tokio::spawn(release(
                    self.client.clone(),
                    to_release,
                    req,
                    self.cfg.call_timeout,
                ));
            }
            let pause = jitter(backoff);
            if Instant::now() + pause >= deadline {
                warn!(
                    resource = name,
                    granted,
                    need = quorum,
                    nodes = self.nodes.len(),
                    unreachable,
                    "giving up on a lock"
                );
                return Err(self.timeout_error(name, start, granted, unreachable));
            }
            tokio::time::sleep(pause).await;
            backoff = (backoff * 2).min(self.cfg.retry_max.max(self.cfg.retry_initial));
        }
    }
}

/// One LOCK round in flight. If the acquiring future is dropped during it (the S3 client went
/// away), the grants it may already have got are released at once instead of blocking the name for
/// a whole lease.
struct Attempt<'a> {
    locker: &'a DistLocker,
    req: Option<LockRequest>,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let Some(req) = self.req.take() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let l = self.locker;
            rt.spawn(release(
                l.client.clone(),
                l.nodes.to_vec(),
                req,
                l.cfg.call_timeout,
            ));
        }
    }
}

#[async_trait::async_trait]
impl Locker for DistLocker {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        self.acquire(name).await
    }
}

/// 50-100 % of `d`.
fn jitter(d: Duration) -> Duration {
    let ms = d.as_millis().max(1) as u64;
    Duration::from_millis(rand::thread_rng().gen_range(ms.div_ceil(2)..=ms))
}

/// Calls `method` on every node at once; the answers in node order.
async fn call_all(
    client: &RpcClient,
    nodes: &[String],
    method: u16,
    payload: &Bytes,
    timeout: Duration,
) -> Vec<Result<LockReply, RpcError>> {
    futures::future::join_all(
        nodes
            .iter()
            .map(|n| call_one(client, n, method, payload.clone(), timeout)),
    )
    .await
}

async fn call_one(
    client: &RpcClient,
    node: &str,
    method: u16,
    payload: Bytes,
    timeout: Duration,
) -> Result<LockReply, RpcError> {
    let answer = client
        .call_with_timeout(node, method, payload, timeout)
        .await?;
    decode_reply(&answer).map_err(|e| RpcError::remote(codes::BAD_REQUEST, e.to_string()))
}

/// Best-effort UNLOCK of `req` on `nodes`.
async fn release(client: Arc<RpcClient>, nodes: Vec<String>, req: LockRequest, timeout: Duration) {
    let Ok(payload) = encode_request(&req) else {
        return;
    };
    let answers = call_all(&client, &nodes, METHOD_UNLOCK, &payload, timeout).await;
    for (node, a) in nodes.iter().zip(answers) {
        if let Err(e) = a {
            debug!(node = %node, resource = %req.resource, error = %e, "unlock failed; the lease will expire");
        }
    }
}

/// A lock held on a quorum.
#[derive(Clone)]
struct Held {
    req: LockRequest,
    nodes: Arc<[String]>,
    client: Arc<RpcClient>,
    call_timeout: Duration,
    quorum: usize,
}

impl Held {
    /// Refreshes the lease every `lease / 3` until aborted (by the guard's drop).
    async fn refresh_loop(self, counters: Arc<Counters>) {
        let every = self.req.lease / 3;
        let Ok(payload) = encode_request(&self.req) else {
            return;
        };
        let timeout = self.call_timeout.min(every).max(Duration::from_millis(1));
        let mut ticker = tokio::time::interval_at(Instant::now() + every, every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lost = false;
        loop {
            ticker.tick().await;
            let answers =
                call_all(&self.client, &self.nodes, METHOD_REFRESH, &payload, timeout).await;
            let ok = answers
                .iter()
                .filter(|a| matches!(a, Ok(LockReply::Granted)))
                .count();
            if ok < self.quorum {
                counters.refresh_lost.fetch_add(1, Ordering::Relaxed);
                if !lost {
                    warn!(
                        resource = %self.req.resource,
                        refreshed = ok,
                        need = self.quorum,
                        nodes = self.nodes.len(),
                        "lock refresh fell below quorum: the lock may expire and be granted to \
                         another node while this holder, which cannot be interrupted, still runs"
                    );
                }
                lost = true;
            } else if lost {
                info!(resource = %self.req.resource, refreshed = ok, "lock refresh has quorum again");
                lost = false;
            }
        }
    }
}

/// The guard of a [`DistLocker`] lock: stops the refresh and releases on drop.
struct DistGuard {
    held: Option<Held>,
    refresh: JoinHandle<()>,
    local: Option<NsGuard>,
}

impl Drop for DistGuard {
    fn drop(&mut self) {
        self.refresh.abort();
        let (Some(held), Some(local)) = (self.held.take(), self.local.take()) else {
            return;
        };
        // Without a runtime (shutting down) nothing can be sent: the leases expire.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let Ok(payload) = encode_request(&held.req) else {
                return;
            };
            let timeout = held.call_timeout;
            let mut pending: FuturesUnordered<_> = held
                .nodes
                .iter()
                .map(|n| {
                    let (client, payload) = (&held.client, payload.clone());
                    async move {
                        let r = call_one(client, n, METHOD_UNLOCK, payload, timeout).await;
                        (n, r)
                    }
                })
                .collect();
            let mut answered = 0;
            let mut local = Some(local);
            while let Some((node, r)) = pending.next().await {
                answered += 1;
                if let Err(e) = r {
                    debug!(node = %node, resource = %held.req.resource, error = %e,
                           "unlock failed; the lease will expire");
                }
                // Once a quorum answered, this node's next waiter may go ahead.
                if answered >= held.quorum {
                    local.take();
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(resource: &str, uid: u128, lease_ms: u64) -> LockRequest {
        LockRequest {
            resource: resource.into(),
            uid: Uuid::from_u128(uid),
            lease: Duration::from_millis(lease_ms),
        }
    }

    /// Bytes of a request before its resource name.
    const REQUEST_HEADER: usize = 1 + 16 + 4 + 4;

    #[test]
    fn request_round_trips() {
        for r in [
            req("b/k", 1, 30_000),
            req("b/k\0upload\0id\0\x31", u128::MAX, 1),
            req(
                &"x".repeat(MAX_RESOURCE_LEN),
                7,
                MAX_LEASE.as_millis() as u64,
            ),
            req("bücket/ключ", 9, 1000),
        ] {
            let enc = encode_request(&r).unwrap();
            assert_eq!(enc[0], LOCK_PROTO_VERSION);
            assert_eq!(decode_request(&enc).unwrap(), r);
        }
    }

    #[test]
    fn encode_refuses_out_of_bounds() {
        assert_eq!(
            encode_request(&req("", 1, 10)),
            Err(CodecError::OutOfRange {
                what: "lock resource name length",
                value: 0,
                min: 1,
                max: MAX_RESOURCE_LEN as u64
            })
        );
        assert_eq!(
            encode_request(&req(&"x".repeat(MAX_RESOURCE_LEN + 1), 1, 10)),
            Err(CodecError::OutOfRange {
                what: "lock resource name length",
                value: MAX_RESOURCE_LEN as u64 + 1,
                min: 1,
                max: MAX_RESOURCE_LEN as u64
            })
        );
        assert_eq!(
            encode_request(&req("a", 1, 0)),
            Err(CodecError::OutOfRange {
                what: "lock lease in ms",
                value: 0,
                min: 1,
                max: MAX_LEASE.as_millis() as u64
            })
        );
        let too_long = MAX_LEASE.as_millis() as u64 + 1;
        assert_eq!(
            encode_request(&req("a", 1, too_long)),
            Err(CodecError::OutOfRange {
                what: "lock lease in ms",
                value: too_long,
                min: 1,
                max: MAX_LEASE.as_millis() as u64
            })
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        let enc = encode_request(&req("bucket/key", 5, 1000)).unwrap();
        for cut in 0..enc.len() {
            let e = decode_request(&enc[..cut]).unwrap_err();
            assert!(matches!(e, CodecError::Truncated { .. }), "{cut}: {e}");
        }
        let mut long = enc.to_vec();
        long.push(0);
        assert_eq!(decode_request(&long), Err(CodecError::Trailing(1)));
    }

    #[test]
    fn corrupt_requests_are_errors() {
        let enc = encode_request(&req("bucket/key", 5, 1000))
            .unwrap()
            .to_vec();
        let mut v = enc.clone();
        // A request of the last version (1) is refused by name.
        v[0] = 1;
        assert_eq!(
            decode_request(&v),
            Err(CodecError::UnsupportedVersion {
                what: "lock protocol",
                got: 1,
                supported: LOCK_PROTO_VERSION
            })
        );
        let mut v = enc.clone();
        v[17..21].copy_from_slice(&0u32.to_be_bytes());
        assert!(matches!(
            decode_request(&v),
            Err(CodecError::OutOfRange {
                what: "lock lease in ms",
                value: 0,
                ..
            })
        ));
        let mut v = enc.clone();
        v[17..21].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode_request(&v),
            Err(CodecError::OutOfRange {
                what: "lock lease in ms",
                ..
            })
        ));
        let mut v = enc.clone();
        v[21..25].copy_from_slice(&0u32.to_be_bytes());
        v.truncate(REQUEST_HEADER);
        assert!(matches!(
            decode_request(&v),
            Err(CodecError::OutOfRange {
                what: "lock resource name length",
                value: 0,
                ..
            })
        ));
        let mut v = enc.clone();
        v.truncate(REQUEST_HEADER);
        v[21..25].copy_from_slice(&(MAX_RESOURCE_LEN as u32 + 1).to_be_bytes());
        v.resize(REQUEST_HEADER + MAX_RESOURCE_LEN + 1, b'x');
        assert!(matches!(
            decode_request(&v),
            Err(CodecError::OutOfRange {
                what: "lock resource name length",
                value: 2049,
                ..
            })
        ));
        // A length beyond the message is refused before anything is read.
        let mut v = enc.clone();
        v[21..25].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode_request(&v),
            Err(CodecError::Truncated { .. })
        ));
        let mut v = enc.clone();
        v[REQUEST_HEADER] = 0xff;
        assert!(matches!(
            decode_request(&v),
            Err(CodecError::BadUtf8 { .. })
        ));
        // Any byte pattern decodes or fails, never panics.
        for len in 0..64 {
            for seed in 0..32u8 {
                let junk: Vec<u8> = (0..len)
                    .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
                    .collect();
                let _ = decode_request(&junk);
                let _ = decode_reply(&junk);
            }
        }
    }

    #[test]
    fn replies_round_trip_and_reject_garbage() {
        for r in [
            LockReply::Granted,
            LockReply::HeldByOther,
            LockReply::NotHeld,
        ] {
            assert_eq!(decode_reply(&encode_reply(r)), Ok(r));
        }
        assert!(matches!(
            decode_reply(&[]),
            Err(CodecError::Truncated { .. })
        ));
        assert!(matches!(
            decode_reply(&[LOCK_PROTO_VERSION]),
            Err(CodecError::Truncated { .. })
        ));
        assert_eq!(
            decode_reply(&[9, 1]),
            Err(CodecError::UnsupportedVersion {
                what: "lock protocol",
                got: 9,
                supported: LOCK_PROTO_VERSION
            })
        );
        assert_eq!(
            decode_reply(&[LOCK_PROTO_VERSION, 0]),
            Err(CodecError::Unknown {
                what: "lock reply status",
                value: 0
            })
        );
        assert_eq!(
            decode_reply(&[LOCK_PROTO_VERSION, 1, 0]),
            Err(CodecError::Trailing(1))
        );
    }

    #[test]
    fn table_grants_one_owner_until_expiry() {
        let s = LockServer::default();
        let t0 = Instant::now();
        let a = req("b/k", 1, 1000);
        let b = req("b/k", 2, 1000);
        assert_eq!(s.lock_at(&a, t0), Ok(LockReply::Granted));
        assert_eq!(s.lock_at(&b, t0), Ok(LockReply::HeldByOther));
        // The same owner may lock again (and extends its lease).
        let t1 = t0 + Duration::from_millis(900);
        assert_eq!(s.lock_at(&a, t1), Ok(LockReply::Granted));
        assert_eq!(
            s.lock_at(&b, t0 + Duration::from_millis(1500)),
            Ok(LockReply::HeldByOther)
        );
        // Expired: anyone may take it, and the old owner learns it lost it.
        let t2 = t1 + Duration::from_millis(1001);
        assert_eq!(s.lock_at(&b, t2), Ok(LockReply::Granted));
        assert_eq!(s.refresh_at(&a, t2), LockReply::NotHeld);
        assert_eq!(s.unlock_at(&a, t2), LockReply::NotHeld);
        assert_eq!(s.lock_at(&a, t2), Ok(LockReply::HeldByOther));
        // Another name is independent.
        assert_eq!(
            s.lock_at(&req("b/other", 1, 10), t2),
            Ok(LockReply::Granted)
        );
    }

    #[test]
    fn refresh_extends_only_for_the_holder() {
        let s = LockServer::default();
        let t0 = Instant::now();
        let a = req("r", 1, 100);
        assert_eq!(s.refresh_at(&a, t0), LockReply::NotHeld);
        assert_eq!(s.lock_at(&a, t0), Ok(LockReply::Granted));
        assert_eq!(s.refresh_at(&req("r", 2, 100), t0), LockReply::NotHeld);
        let t1 = t0 + Duration::from_millis(90);
        assert_eq!(s.refresh_at(&a, t1), LockReply::Granted);
        // Lives to t1 + 100 now, past its first lease.
        let t2 = t0 + Duration::from_millis(150);
        assert_eq!(s.lock_at(&req("r", 2, 100), t2), Ok(LockReply::HeldByOther));
        // An expired lease cannot be revived by a refresh.
        let t3 = t1 + Duration::from_millis(101);
        assert_eq!(s.refresh_at(&a, t3), LockReply::NotHeld);
    }

    #[test]
    fn unlock_only_by_the_holder() {
        let s = LockServer::default();
        let t0 = Instant::now();
        let a = req("r", 1, 1000);
        s.lock_at(&a, t0).unwrap();
        assert_eq!(s.unlock_at(&req("r", 2, 1000), t0), LockReply::NotHeld);
        assert_eq!(
            s.lock_at(&req("r", 2, 1000), t0),
            Ok(LockReply::HeldByOther)
        );
        assert_eq!(s.unlock_at(&a, t0), LockReply::Granted);
        assert_eq!(s.unlock_at(&a, t0), LockReply::NotHeld);
        assert_eq!(s.lock_at(&req("r", 2, 1000), t0), Ok(LockReply::Granted));
    }

    #[test]
    fn a_full_table_sweeps_then_refuses() {
        let s = LockServer::new(2);
        let t0 = Instant::now();
        s.lock_at(&req("a", 1, 10), t0).unwrap();
        s.lock_at(&req("b", 1, 10_000), t0).unwrap();
        assert_eq!(s.lock_at(&req("c", 1, 10), t0), Err(TableFull(2)));
        // A holder may still extend what it has.
        assert_eq!(s.lock_at(&req("b", 1, 10_000), t0), Ok(LockReply::Granted));
        // "a" expires: the full table sweeps it and makes room.
        let t1 = t0 + Duration::from_millis(20);
        assert_eq!(s.lock_at(&req("c", 1, 10), t1), Ok(LockReply::Granted));
        let t = s.table();
        assert!(t.entries.contains_key("b") && t.entries.contains_key("c"));
        assert!(!t.entries.contains_key("a"));
    }

    #[test]
    fn expired_entries_are_swept_periodically() {
        let s = LockServer::new(100);
        let t0 = Instant::now();
        s.lock_at(&req("a", 1, 10), t0).unwrap();
        s.lock_at(&req("b", 1, 10_000), t0).unwrap();
        assert_eq!(s.table().entries.len(), 2);
        let t1 = t0 + SWEEP_EVERY + Duration::from_millis(1);
        s.lock_at(&req("z", 2, 10_000), t1).unwrap();
        let t = s.table();
        assert!(!t.entries.contains_key("a"), "expired entry not swept");
        assert!(t.entries.contains_key("b") && t.entries.contains_key("z"));
    }

    #[tokio::test]
    async fn handler_refuses_unknown_methods_and_bad_payloads() {
        let s = LockServer::default();
        let enc = encode_request(&req("b/k", 1, 1000)).unwrap();
        for m in [0, 199, 203, 209, 299] {
            let e = s.handle(m, enc.clone()).await.unwrap_err();
            assert_eq!(e.code(), Some(codes::UNKNOWN_METHOD), "{m}");
        }
        let e = s
            .handle(METHOD_LOCK, Bytes::from_static(b"\x01short"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(codes::BAD_REQUEST));
        let ok = s.handle(METHOD_LOCK, enc.clone()).await.unwrap();
        assert_eq!(decode_reply(&ok), Ok(LockReply::Granted));
        let ok = s.handle(METHOD_REFRESH, enc.clone()).await.unwrap();
        assert_eq!(decode_reply(&ok), Ok(LockReply::Granted));
        let ok = s.handle(METHOD_UNLOCK, enc.clone()).await.unwrap();
        assert_eq!(decode_reply(&ok), Ok(LockReply::Granted));
        assert!(s.is_empty());
    }

    #[test]
    fn config_is_validated() {
        let client = Arc::new(RpcClient::new(
            quarry_net::Identity {
                deployment_id: Uuid::nil(),
                node_id: "n".into(),
                secret: quarry_net::ClusterSecret::new(b"0123456789abcdef0123").unwrap(),
            },
            Default::default(),
        ));
        let cfg = DistLockerConfig::default();
        assert_eq!(
            DistLocker::new(Vec::<String>::new(), client.clone(), cfg.clone()).unwrap_err(),
            DistLockerError::NoNodes
        );
        let l = DistLocker::new(["a:1", "b:1", "a:1", "c:1"], client.clone(), cfg.clone()).unwrap();
        assert_eq!(l.nodes(), ["a:1", "b:1", "c:1"]);
        assert_eq!(l.quorum(), 2);
        let l = DistLocker::new(["a:1", "b:1", "c:1", "d:1"], client.clone(), cfg.clone()).unwrap();
        assert_eq!(l.quorum(), 3);
        let bad = DistLockerConfig {
            lease: Duration::from_millis(1),
            ..cfg.clone()
        };
        assert!(matches!(
            DistLocker::new(["a:1"], client.clone(), bad),
            Err(DistLockerError::BadLease(_))
        ));
        let bad = DistLockerConfig {
            call_timeout: Duration::ZERO,
            ..cfg
        };
        assert!(matches!(
            DistLocker::new(["a:1"], client, bad),
            Err(DistLockerError::ZeroDuration(_))
        ));
    }
}
