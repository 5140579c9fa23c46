//! `FaultyDataPlane`: a [`DataPlane`] that wraps a real one (the [`quarry_net::TcpDataPlane`] of
//! a test cluster) and injects network faults into the shard transfers it passes on, drawn from a
//! seed exactly as `FaultyDrive` draws drive faults.
//!
//! Faults, per call of a drive that is faulty:
//! - **drop**: the call fails before anything is sent: nothing reaches the peer. The error is one
//!   the real backend gives when the peer is out of reach (`ConnectionLost` on a broken pipe,
//!   `Connect` refused, `PeerDown`);
//! - **lost answer**: the inner call runs to its end (a read was served, an append was written
//!   on the peer) and the caller gets an error anyway: `ConnectionLost`, or for a read `Bulk`
//!   with a bad tag (a corrupted answer, refused by its tag);
//! - **short delay**: 1..=`slow_ms` ms before the call;
//! - **stall**: the call is held for 0.5..1.5 times the caller's timeout (the inner backend's
//!   transfer timeout), within that timeout: it either completes late, or is cut when the timeout
//!   passes (the inner transfer is dropped, mid-transfer if it had started) and fails with the
//!   real `Timeout`. A stall stands for a network that stops moving bytes: the real backend would
//!   time out just the same, and the `DataPlane` contract (every transfer bounded in time) holds
//!   for this wrapper too;
//! - **reset**: the inner transfer starts and its future is dropped part-way, which drops the
//!   real TCP data connection with the transfer on it, and the caller gets `ConnectionLost`. The
//!   cut comes after 1..=`reset_max_polls` polls of the transfer (each poll after the first is a
//!   step it made on the wire: the request went out, an answer header or part of the payload
//!   arrived) or after 1..=`reset_max_ms` ms, whichever is first: on loopback a whole transfer
//!   often takes less than the timer's 1 ms resolution, so time alone would rarely cut one
//!   mid-way. If the transfer finished before the cut, the reset took its answer with it
//!   (counted apart: `resets_mid_transfer` counts only the real cuts);
//! - **partition**: at each step a faulty drive may become unreachable on the data plane for
//!   1..=`partition_steps` steps: every call to it fails with `PeerDown`, while its control plane
//!   (metadata, renames, locks) still works.
//!
//! # Reproducibility
//! As for `FaultyDrive` (see `faults/mod.rs`): the fate of a call is a pure function of
//! `(seed, node, drive, step, call, n)`. `node` is the index the test gave the peer's address
//! ([`FaultyDataPlane::add_peer`]), never its port, which changes from run to run; `call` names
//! the call by method and arguments: a read by bucket, key, part, offset and length (not the data
//! dir, which is random), an append by sequence number, length and a hash of its bytes (not the
//! writer id, which is random; the bytes are those of the seeded objects, as long as the
//! placement is the same, i.e. the deployment id: the cluster test derives it from the seed).
//! `n` counts the calls of that name to that drive within the step. Partitions are a function of
//! `(seed, node, drive, step)`. What still varies is what the object layer does in the
//! background (heals, the shard check after a GET), as described there, and how far a reset's
//! inner transfer got before its cut, which depends on timing.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use quarry_buf::{BufPool, BufPoolStats, PooledBuf};
use quarry_net::data::DataError;
use quarry_net::{DataPlane, DataPlaneError, DataPlaneStats, PeerSnapshot, ShardData, ShardRange};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

use crate::faults::mix;

/// Probabilities (0.0..=1.0) of each fault, per call (partitions: per step).
#[derive(Debug, Clone, Default)]
pub struct DataPlaneFaults {
    pub drop: f64,
    pub lost_answer: f64,
    pub slow: f64,
    pub slow_ms: u64,
    pub stall: f64,
    pub reset: f64,
    pub reset_max_polls: u32,
    pub reset_max_ms: u64,
    pub partition: f64,
    pub partition_steps: u64,
}

impl DataPlaneFaults {
    /// Everything a little, for the randomized test. Stalls are rare: each costs up to the
    /// transfer timeout of wall time.
    pub fn chaos() -> DataPlaneFaults {
        DataPlaneFaults {
            drop: 0.05,
            lost_answer: 0.05,
            slow: 0.08,
            slow_ms: 4,
            stall: 0.01,
            reset: 0.08,
            reset_max_polls: 3,
            reset_max_ms: 3,
            partition: 0.05,
            partition_steps: 3,
        }
    }
}

/// Counts of the calls seen and the faults injected, over all drives.
#[derive(Debug, Default)]
pub struct DataPlaneFaultStats {
    pub calls: AtomicU64,
    /// Calls to a drive whose faults were on.
    pub faulty_calls: AtomicU64,
    pub reads: AtomicU64,
    pub appends: AtomicU64,
    pub drops: AtomicU64,
    pub lost_answers: AtomicU64,
    pub slow: AtomicU64,
    pub stalls: AtomicU64,
    /// Stalls that ran past the timeout (the caller got `Timeout`).
    pub stall_timeouts: AtomicU64,
    pub resets: AtomicU64,
    /// Resets that dropped the inner transfer while it was still in progress.
    pub resets_mid_transfer: AtomicU64,
    pub partitioned_calls: AtomicU64,
    pub partitions: AtomicU64,
}

impl DataPlaneFaultStats {
    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    pub fn injected(&self) -> u64 {
        [
            &self.drops,
            &self.lost_answers,
            &self.slow,
            &self.stalls,
            &self.resets,
            &self.partitioned_calls,
        ]
        .iter()
        .map(|c| Self::get(c))
        .sum()
    }

    pub fn summary(&self) -> String {
        let g = Self::get;
        format!(
            "{} data-plane calls ({} reads, {} appends; {} to faulty drives), {} faults injected: \
             {} drops before sending, \
             {} lost answers, {} short delays, {} stalls ({} past the timeout), {} resets \
             ({} cut mid-transfer), {} calls while partitioned ({} partitions)",
            g(&self.calls),
            g(&self.reads),
            g(&self.appends),
            g(&self.faulty_calls),
            self.injected(),
            g(&self.drops),
            g(&self.lost_answers),
            g(&self.slow),
            g(&self.stalls),
            g(&self.stall_timeouts),
            g(&self.resets),
            g(&self.resets_mid_transfer),
            g(&self.partitioned_calls),
            g(&self.partitions),
        )
    }

    /// Fault kinds that were never injected, by name (to check that a run exercised them all).
    /// Not among them: stalls that ran past the timeout, which are rare enough (about half of
    /// the rare stalls) that a short run may have none; `each_fault_kind_does_what_it_says`
    /// makes some.
    pub fn missing_kinds(&self) -> Vec<&'static str> {
        [
            ("drop", &self.drops),
            ("lost answer", &self.lost_answers),
            ("short delay", &self.slow),
            ("stall", &self.stalls),
            ("reset", &self.resets),
            ("reset mid-transfer", &self.resets_mid_transfer),
            ("partition", &self.partitions),
        ]
        .into_iter()
        .filter(|(_, c)| Self::get(c) == 0)
        .map(|(name, _)| name)
        .collect()
    }
}

/// What a call is: the two directions fail differently (only a read answer has a tag to fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Append,
}

/// What happens to one call, besides its delays.
#[derive(Debug, Clone, Copy)]
enum Action {
    Pass,
    /// Fails before sending, with error variant number `.0`.
    Drop(u8),
    /// Runs, then fails with error variant number `.0`.
    Lose(u8),
    /// Starts, and is cut after this long.
    Reset {
        polls: u32,
        after: Duration,
    },
    /// Every call fails: the drive is partitioned away.
    Partitioned,
}

#[derive(Debug)]
struct Decision {
    delay: Duration,
    /// Held this long in all, bounded by the timeout.
    stall: Option<Duration>,
    action: Action,
}

impl Decision {
    fn pass() -> Decision {
        Decision {
            delay: Duration::ZERO,
            stall: None,
            action: Action::Pass,
        }
    }
}

/// The fault state of one drive of one peer.
#[derive(Debug, Default)]
struct Target {
    cfg: Option<DataPlaneFaults>,
    /// Partitioned until (excluding) this step.
    partitioned_until: u64,
}

/// A data plane that injects faults into the transfers it passes to `inner`.
#[derive(Debug)]
pub struct FaultyDataPlane {
    inner: Arc<dyn DataPlane>,
    seed: u64,
    /// The caller's bound on a transfer (the inner backend's transfer timeout): stalls end there.
    timeout: Duration,
    /// Peer address to node index (what the fate is keyed by).
    peers: Mutex<HashMap<String, u64>>,
    targets: Mutex<BTreeMap<(u64, u16), Target>>,
    step: AtomicU64,
    /// Per (node, drive, call fingerprint), how often it was made in the current step.
    seen: Mutex<HashMap<(u64, u16, u64), u64>>,
    stats: Arc<DataPlaneFaultStats>,
}

/// 64 bits of the BLAKE3 hash of `data`: names a call (or the bytes of an append) in a fate.
fn fingerprint(data: &[u8]) -> u64 {
    let h = blake3::hash(data);
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    u64::from_le_bytes(b)
}

fn io(kind: std::io::ErrorKind, what: &str) -> std::io::Error {
    std::io::Error::new(kind, format!("injected: {what}"))
}

impl FaultyDataPlane {
    /// Wraps `inner`, whose transfers are bounded by `timeout`, for a test seeded with `seed`.
    /// Faults start disabled everywhere.
    pub fn new(
        inner: Arc<dyn DataPlane>,
        seed: u64,
        timeout: Duration,
        stats: Arc<DataPlaneFaultStats>,
    ) -> FaultyDataPlane {
        FaultyDataPlane {
            inner,
            seed,
            timeout,
            peers: Mutex::new(HashMap::new()),
            targets: Mutex::new(BTreeMap::new()),
            step: AtomicU64::new(0),
            seen: Mutex::new(HashMap::new()),
            stats,
        }
    }

    /// Names the peer at `addr` node number `node` (its faults are keyed by that number).
    pub fn add_peer(&self, addr: &str, node: u64) {
        self.peers.lock().unwrap().insert(addr.to_owned(), node);
    }

    /// Turns faults on with `cfg` for drive `drive` of node `node`, or off (`None`; a partition
    /// in progress ends too).
    pub fn set_faults(&self, node: u64, drive: u16, cfg: Option<DataPlaneFaults>) {
        let mut targets = self.targets.lock().unwrap();
        let t = targets.entry((node, drive)).or_default();
        if cfg.is_none() {
            t.partitioned_until = 0;
        }
        t.cfg = cfg;
    }

    pub fn faulty(&self, node: u64, drive: u16) -> bool {
        self.targets
            .lock()
            .unwrap()
            .get(&(node, drive))
            .is_some_and(|t| t.cfg.is_some())
    }

    pub fn stats(&self) -> &DataPlaneFaultStats {
        &self.stats
    }

    fn rng(&self, node: u64, drive: u16, step: u64, fp: u64, n: u64) -> StdRng {
        StdRng::seed_from_u64(mix(
            self.seed ^ mix(node ^ mix(u64::from(drive) ^ mix(step ^ mix(fp ^ mix(n)))))
        ))
    }

    /// Starts step `step`: resets the call counters and maybe partitions faulty drives away.
    pub fn set_step(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
        self.seen.lock().unwrap().clear();
        let mut targets = self.targets.lock().unwrap();
        for (&(node, drive), t) in targets.iter_mut() {
            let Some(cfg) = &t.cfg else { continue };
            if step < t.partitioned_until || cfg.partition <= 0.0 {
                continue;
            }
            let mut rng = self.rng(node, drive, step, u64::MAX, u64::MAX);
            if rng.gen_bool(cfg.partition) {
                let len = rng.gen_range(1..=cfg.partition_steps.max(1));
                t.partitioned_until = step + len;
                self.stats.partitions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn node_of(&self, peer: &str) -> u64 {
        // An unknown peer gets a number from its address: faults still apply, but do not replay.
        match self.peers.lock().unwrap().get(peer) {
            Some(&n) => n,
            None => fingerprint(peer.as_bytes()),
        }
    }

    /// Decides the fate of one call, named by `call` (see the module docs).
    fn decide(&self, peer: &str, drive: u16, kind: Kind, call: &str) -> Decision {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        match kind {
            Kind::Read => self.stats.reads.fetch_add(1, Ordering::Relaxed),
            Kind::Append => self.stats.appends.fetch_add(1, Ordering::Relaxed),
        };
        let node = self.node_of(peer);
        let step = self.step.load(Ordering::Relaxed);
        let cfg = {
            let targets = self.targets.lock().unwrap();
            let Some(t) = targets.get(&(node, drive)) else {
                return Decision::pass();
            };
            let Some(cfg) = t.cfg.clone() else {
                return Decision::pass();
            };
            self.stats.faulty_calls.fetch_add(1, Ordering::Relaxed);
            if step < t.partitioned_until {
                self.stats.partitioned_calls.fetch_add(1, Ordering::Relaxed);
                return Decision {
                    action: Action::Partitioned,
                    ..Decision::pass()
                };
            }
            cfg
        };
        let fp = fingerprint(call.as_bytes());
        let n = {
            let mut seen = self.seen.lock().unwrap();
            let c = seen.entry((node, drive, fp)).or_insert(0);
            *c += 1;
            *c
        };
        let mut rng = self.rng(node, drive, step, fp, n);
        // Draw every number in a fixed order so one decision never shifts another.
        let (slow, slow_ms) = (
            rng.gen_bool(cfg.slow),
            rng.gen_range(1..=cfg.slow_ms.max(1)),
        );
        let (stall, stall_frac) = (rng.gen_bool(cfg.stall), rng.gen_range(0.5..1.5));
        let (drop, drop_how) = (rng.gen_bool(cfg.drop), rng.gen_range(0..3u8));
        let (lost, lost_how) = (rng.gen_bool(cfg.lost_answer), rng.gen_range(0..2u8));
        let (reset, reset_polls, reset_ms) = (
            rng.gen_bool(cfg.reset),
            rng.gen_range(1..=cfg.reset_max_polls.max(1)),
            rng.gen_range(1..=cfg.reset_max_ms.max(1)),
        );
        let mut d = Decision::pass();
        if slow {
            self.stats.slow.fetch_add(1, Ordering::Relaxed);
            d.delay = Duration::from_millis(slow_ms);
        }
        if stall {
            self.stats.stalls.fetch_add(1, Ordering::Relaxed);
            d.stall = Some(self.timeout.mul_f64(stall_frac));
        }
        d.action = if drop {
            self.stats.drops.fetch_add(1, Ordering::Relaxed);
            Action::Drop(drop_how)
        } else if reset {
            self.stats.resets.fetch_add(1, Ordering::Relaxed);
            Action::Reset {
                polls: reset_polls,
                after: Duration::from_millis(reset_ms),
            }
        } else if lost {
            self.stats.lost_answers.fetch_add(1, Ordering::Relaxed);
            // Only a read answer carries a tag that corruption would fail.
            Action::Lose(if kind == Kind::Read { lost_how } else { 0 })
        } else {
            Action::Pass
        };
        d
    }

    /// Runs `inner` (one transfer to `peer`) under decision `d`.
    async fn apply<T>(
        &self,
        peer: &str,
        d: Decision,
        inner: impl Future<Output = Result<T, DataPlaneError>> + Send,
    ) -> Result<T, DataPlaneError> {
        let lost = |source| DataPlaneError::ConnectionLost {
            peer: peer.to_owned(),
            source,
        };
        let body = async {
            if !d.delay.is_zero() {
                tokio::time::sleep(d.delay).await;
            }
            match d.action {
                Action::Pass => inner.await,
                Action::Drop(how) => Err(match how {
                    0 => lost(io(
                        std::io::ErrorKind::BrokenPipe,
                        "request dropped before it was sent",
                    )),
                    1 => DataPlaneError::Connect {
                        peer: peer.to_owned(),
                        source: io(std::io::ErrorKind::ConnectionRefused, "connection refused"),
                    },
                    _ => DataPlaneError::PeerDown {
                        peer: peer.to_owned(),
                        retry_in: Duration::from_millis(100),
                        last_error: "injected: peer unreachable".into(),
                    },
                }),
                Action::Partitioned => Err(DataPlaneError::PeerDown {
                    peer: peer.to_owned(),
                    retry_in: Duration::from_millis(100),
                    last_error: "injected: partitioned from the peer".into(),
                }),
                Action::Lose(how) => {
                    // The peer does the work; only its answer is lost.
                    let _ = inner.await;
                    Err(match how {
                        0 => lost(io(
                            std::io::ErrorKind::UnexpectedEof,
                            "connection closed before the answer arrived",
                        )),
                        _ => DataPlaneError::Bulk {
                            peer: peer.to_owned(),
                            source: DataError::BadTag,
                        },
                    })
                }
                Action::Reset { polls, after } => {
                    // Dropping the future drops the transfer's TCP connection with it.
                    if Cut::new(inner, polls, after).await.is_none() {
                        self.stats
                            .resets_mid_transfer
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(lost(io(
                        std::io::ErrorKind::ConnectionReset,
                        "connection reset mid-transfer",
                    )))
                }
            }
        };
        let Some(stall) = d.stall else {
            return body.await;
        };
        let held = async {
            tokio::time::sleep(stall.saturating_sub(d.delay)).await;
            body.await
        };
        match tokio::time::timeout(self.timeout, held).await {
            Ok(r) => r,
            Err(_) => {
                self.stats.stall_timeouts.fetch_add(1, Ordering::Relaxed);
                Err(DataPlaneError::Timeout {
                    peer: peer.to_owned(),
                    after: self.timeout,
                })
            }
        }
    }
}

/// Runs a future until it finishes (`Some`) or until it has been polled `polls` times without
/// finishing or `after` passed (`None`), and then drops it where it stands.
struct Cut<'a, T> {
    inner: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
    polls: u32,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl<'a, T> Cut<'a, T> {
    fn new(inner: impl Future<Output = T> + Send + 'a, polls: u32, after: Duration) -> Self {
        Cut {
            inner: Box::pin(inner),
            polls: polls.max(1),
            timer: Box::pin(tokio::time::sleep(after)),
        }
    }
}

impl<T> Future for Cut<'_, T> {
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Poll::Ready(v) = self.inner.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        self.polls -= 1;
        if self.polls == 0 || self.timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    }
}

fn read_call(what: &str, drive: u16, r: &ShardRange<'_>) -> String {
    format!(
        "{what} {drive} {} {} {} {} {}",
        r.bucket, r.key, r.part, r.offset, r.len
    )
}

/// Every method of the trait is forwarded here, in this one impl, the ones with a default body
/// too (a default would answer for this wrapper, not for the backend under it): a method the
/// trait gains later must be added here, and given its faults if it moves shard bytes.
#[async_trait]
impl DataPlane for FaultyDataPlane {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn pool(&self) -> &BufPool {
        self.inner.pool()
    }

    fn stats(&self) -> DataPlaneStats {
        self.inner.stats()
    }

    fn peer_stats(&self) -> Vec<PeerSnapshot> {
        self.inner.peer_stats()
    }

    fn reset(&self, peer: Option<&str>) -> usize {
        self.inner.reset(peer)
    }

    fn pools(&self) -> Vec<(&'static str, BufPoolStats)> {
        self.inner.pools()
    }

    fn holder_stats(&self) -> Option<DataPlaneStats> {
        self.inner.holder_stats()
    }

    async fn read_shard(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
    ) -> Result<ShardData, DataPlaneError> {
        let d = self.decide(peer, drive, Kind::Read, &read_call("read", drive, range));
        self.apply(peer, d, self.inner.read_shard(peer, drive, range))
            .await
    }

    async fn read_shard_into(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: Vec<PooledBuf>,
    ) -> Result<ShardData, DataPlaneError> {
        let d = self.decide(
            peer,
            drive,
            Kind::Read,
            &read_call("read_into", drive, range),
        );
        // A dropped call drops `dst` too: its buffers go back to the pool, as when a real
        // transfer fails before it starts.
        self.apply(peer, d, self.inner.read_shard_into(peer, drive, range, dst))
            .await
    }

    /// Named as `read_shard_into` is, so a seed draws the same fates as before frame reads.
    async fn read_frame_into(
        &self,
        peer: &str,
        drive: u16,
        range: &ShardRange<'_>,
        dst: PooledBuf,
    ) -> Result<ShardData, DataPlaneError> {
        let d = self.decide(
            peer,
            drive,
            Kind::Read,
            &read_call("read_into", drive, range),
        );
        self.apply(peer, d, self.inner.read_frame_into(peer, drive, range, dst))
            .await
    }

    async fn append_shard(
        &self,
        peer: &str,
        drive: u16,
        writer: Uuid,
        seq: u64,
        data: Bytes,
    ) -> Result<(), DataPlaneError> {
        let call = format!("append {drive} {seq} {} {}", data.len(), fingerprint(&data));
        let d = self.decide(peer, drive, Kind::Append, &call);
        self.apply(
            peer,
            d,
            self.inner.append_shard(peer, drive, writer, seq, data),
        )
        .await
    }
}
