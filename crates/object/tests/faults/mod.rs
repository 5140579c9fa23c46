//! Test support for the randomized fault tests (`fault_injection.rs`, `cluster_faults.rs`).
//!
//! - `FaultyDrive` (here): a [`Drive`] that wraps a real drive and injects faults drawn from a
//!   seed;
//! - `FaultyDataPlane` (crates/node/tests/faulty_dataplane/mod.rs): the same for the network, a
//!   `DataPlane` that wraps the real TCP data plane under remote drives;
//! - [`model`]: the randomized run the tests share (operations against a model, invariants,
//!   the summary line).
//!
//! # `FaultyDrive`
//!
//! Faults: I/O errors (before the call, or after it took effect: a lost acknowledgement), slow
//! calls, torn shard writes (a prefix is written, then the write fails), a full disk (on calls
//! that write), one flipped bit in the bytes a read returns (shard files and inline shards), and
//! the drive going offline for a few steps (every call fails).
//!
//! # Reproducibility
//! The test harness numbers its operations ("steps") and calls [`FaultyDrive::set_step`] before
//! each one. The fate of a call is a pure function of `(seed, drive index, step, call, n)`, where
//! `call` names the call by method and arguments (bucket, key, part, offset, length; never a
//! random id such as a tmp dir or an upload id) and `n` counts the calls of that name to this
//! drive within the step. Offline periods are a function of `(seed, drive, step)` alone. So the
//! order in which concurrent calls arrive does not matter: a step replays the same faults as long
//! as it makes the same calls. The layer runs on a [`StepRuntime`] of the seed: object times and
//! ids (tmp dirs, data dirs, upload ids) come from the seed, and the background work the layer
//! would run on its own (the heal worker, the shard check after a GET) runs after each operation,
//! within its step, one task at a time; so every call happens in the same step in every run.
//! Both tests also format their drives with ids derived from the seed (`model::format_seeded`):
//! the deployment id keys the placement, so which drive holds which shard of an object is the
//! same in every run of a seed. `a_seed_replays_exactly` (fault_injection.rs) checks that two
//! runs of a seed make the same calls, inject the same faults and log the same outcomes.

#![allow(dead_code)]

pub mod model;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use quarry_buf::PooledBuf;
use quarry_disk::{
    DiskInfo, Drive, DriveError, ObjectMeta, PartMeta, ShardWriter, UploadMeta, VolInfo, WalkEntry,
    WalkOptions,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

/// Probabilities (0.0..=1.0) of each fault, per call where it applies.
#[derive(Debug, Clone, Default)]
pub struct FaultConfig {
    /// Any call fails with an I/O error; for calls that change the drive, half of these fail
    /// after the change took effect (the answer is lost, not the write).
    pub error: f64,
    /// Any call is delayed by 1..=`slow_ms` milliseconds first.
    pub slow: f64,
    pub slow_ms: u64,
    /// A `ShardWriter::write` writes a prefix of its buffer, then fails.
    pub torn_write: f64,
    /// A call that writes fails with `DiskFull` (reads and deletes still work, as on a full disk).
    pub disk_full: f64,
    /// A `read_shard` (or the inline shard of a `read_meta`) returns its bytes with one bit flipped.
    pub bit_flip: f64,
    /// At each step, the drive goes offline for 1..=`offline_steps` steps.
    pub offline: f64,
    pub offline_steps: u64,
    /// The drive is down: every call fails before it reaches the drive.
    pub down: bool,
    /// `disk_info` reports no free space (a full disk does; one that fills up during a write
    /// has not yet).
    pub reports_full: bool,
}

impl FaultConfig {
    /// Everything a little, for the randomized test.
    pub fn chaos() -> FaultConfig {
        FaultConfig {
            error: 0.08,
            slow: 0.05,
            slow_ms: 3,
            torn_write: 0.08,
            disk_full: 0.02,
            bit_flip: 0.08,
            offline: 0.05,
            offline_steps: 3,
            down: false,
            reports_full: false,
        }
    }

    /// A full disk: every write fails with `DiskFull`, and `disk_info` says so.
    pub fn full_disk() -> FaultConfig {
        FaultConfig {
            disk_full: 1.0,
            reports_full: true,
            ..Default::default()
        }
    }

    /// A disk that fills up during a write: `disk_info` still shows space, every write fails
    /// with `DiskFull`.
    pub fn filling_disk() -> FaultConfig {
        FaultConfig {
            disk_full: 1.0,
            ..Default::default()
        }
    }

    /// Every call fails, without effect.
    pub fn dead() -> FaultConfig {
        FaultConfig {
            down: true,
            ..Default::default()
        }
    }
}

/// Counts of the faults injected, summed over drives.
#[derive(Debug, Default)]
pub struct FaultStats {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub lost_acks: AtomicU64,
    pub slow: AtomicU64,
    pub torn_writes: AtomicU64,
    pub disk_full: AtomicU64,
    pub bit_flips: AtomicU64,
    pub offline_calls: AtomicU64,
    pub offline_periods: AtomicU64,
}

impl FaultStats {
    pub fn injected(&self) -> u64 {
        [
            &self.errors,
            &self.lost_acks,
            &self.slow,
            &self.torn_writes,
            &self.disk_full,
            &self.bit_flips,
            &self.offline_calls,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    pub fn summary(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{} drive calls, {} faults injected: {} I/O errors, {} lost acks, {} slow calls, \
             {} torn shard writes, {} disk-full, {} bit flips, {} calls while offline \
             ({} offline periods)",
            g(&self.calls),
            self.injected(),
            g(&self.errors),
            g(&self.lost_acks),
            g(&self.slow),
            g(&self.torn_writes),
            g(&self.disk_full),
            g(&self.bit_flips),
            g(&self.offline_calls),
            g(&self.offline_periods),
        )
    }
}

/// What a call is, for deciding which faults apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Reads only.
    Read,
    /// Writes new data (can hit a full disk).
    Write,
    /// Removes data (works on a full disk).
    Delete,
}

/// What to do with one call.
#[derive(Debug, Default)]
struct Decision {
    delay_ms: u64,
    fail_before: Option<DriveError>,
    fail_after: bool,
    torn: Option<f64>,
    flip: Option<u64>,
}

/// The mutable fault state of one drive, shared with its shard writers.
#[derive(Debug)]
struct State {
    seed: u64,
    index: u64,
    enabled: AtomicBool,
    cfg: Mutex<FaultConfig>,
    step: AtomicU64,
    /// Per call fingerprint, how often it was made in the current step.
    seen: Mutex<HashMap<u64, u64>>,
    /// The drive is offline until (excluding) this step.
    offline_until: AtomicU64,
    /// `read_shard_into` returns the bytes of a `read_shard` instead of filling the caller's
    /// buffer (a drive that cannot read in place).
    reads_elsewhere: AtomicBool,
    /// Shard reads fail as through a broken connection to the drive's node.
    shard_reads_unreachable: AtomicBool,
    /// Frame reads authenticate only the frame's hash, as a remote drive's do, and a chunk byte
    /// of each changes on the way (not on the drive: `read_shard_into` reads it whole).
    frames_changed_on_the_way: AtomicBool,
    /// While set, shard reads wait for a permit of this gate before they reach the drive.
    shard_read_gate: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    /// Shard reads that waited at the gate (counted as they arrive).
    gated_reads: AtomicU64,
    stats: Arc<FaultStats>,
}

pub(crate) fn mix(mut x: u64) -> u64 {
    // splitmix64 finalizer
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn injected(what: &str) -> DriveError {
    DriveError::Io(std::io::Error::other(format!("injected: {what}")))
}

impl State {
    fn rng(&self, step: u64, n: u64, salt: u64) -> StdRng {
        StdRng::seed_from_u64(mix(
            self.seed ^ mix(self.index ^ mix(step ^ mix(n ^ mix(salt))))
        ))
    }

    /// Decides the fate of one call. `call` names it by method and arguments (never by a
    /// random id such as a tmp dir), so its fate does not depend on the order of other calls.
    fn decide(&self, kind: Kind, call: &str) -> Decision {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        if !self.enabled.load(Ordering::Relaxed) {
            return Decision::default();
        }
        let step = self.step.load(Ordering::Relaxed);
        let cfg = self.cfg.lock().unwrap().clone();
        if cfg.down || step < self.offline_until.load(Ordering::Relaxed) {
            self.stats.offline_calls.fetch_add(1, Ordering::Relaxed);
            return Decision {
                fail_before: Some(injected("drive offline")),
                ..Default::default()
            };
        }
        let fp = u64::from_le_bytes(
            blake3::hash(call.as_bytes()).as_bytes()[..8]
                .try_into()
                .unwrap(),
        );
        let n = {
            let mut seen = self.seen.lock().unwrap();
            let c = seen.entry(fp).or_insert(0);
            *c += 1;
            *c
        };
        let mut rng = self.rng(step, fp, n);
        // Draw every number in a fixed order so one decision never shifts another.
        let (slow, slow_ms) = (
            rng.gen_bool(cfg.slow),
            rng.gen_range(1..=cfg.slow_ms.max(1)),
        );
        let (error, after) = (rng.gen_bool(cfg.error), rng.gen_bool(0.5));
        let full = rng.gen_bool(cfg.disk_full);
        let (torn, torn_at) = (rng.gen_bool(cfg.torn_write), rng.gen::<f64>());
        let (flip, flip_at) = (rng.gen_bool(cfg.bit_flip), rng.gen::<u64>());
        let mut d = Decision::default();
        if slow {
            self.stats.slow.fetch_add(1, Ordering::Relaxed);
            d.delay_ms = slow_ms;
        }
        if kind == Kind::Write && full {
            self.stats.disk_full.fetch_add(1, Ordering::Relaxed);
            d.fail_before = Some(DriveError::DiskFull);
        } else if error {
            if after && kind != Kind::Read {
                self.stats.lost_acks.fetch_add(1, Ordering::Relaxed);
                d.fail_after = true;
            } else {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                d.fail_before = Some(injected("I/O error"));
            }
        }
        if torn {
            d.torn = Some(torn_at);
        }
        if flip {
            d.flip = Some(flip_at);
        }
        d
    }

    /// Starts step `step`: resets the call counter and maybe takes the drive offline.
    fn set_step(&self, step: u64) {
        self.step.store(step, Ordering::Relaxed);
        self.seen.lock().unwrap().clear();
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let cfg = self.cfg.lock().unwrap().clone();
        if step < self.offline_until.load(Ordering::Relaxed) || cfg.offline <= 0.0 {
            return;
        }
        let mut rng = self.rng(step, u64::MAX, u64::MAX);
        if rng.gen_bool(cfg.offline) {
            let len = rng.gen_range(1..=cfg.offline_steps.max(1));
            self.offline_until.store(step + len, Ordering::Relaxed);
            self.stats.offline_periods.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A drive that injects faults into the calls it passes to `inner`.
#[derive(Debug, Clone)]
pub struct FaultyDrive {
    inner: Arc<dyn Drive>,
    state: Arc<State>,
}

impl FaultyDrive {
    /// Wraps `inner` as drive number `index` of a test seeded with `seed`. Faults start disabled.
    pub fn new(inner: Arc<dyn Drive>, seed: u64, index: u64, stats: Arc<FaultStats>) -> Self {
        FaultyDrive {
            inner,
            state: Arc::new(State {
                seed,
                index,
                enabled: AtomicBool::new(false),
                cfg: Mutex::new(FaultConfig::default()),
                step: AtomicU64::new(0),
                seen: Mutex::new(HashMap::new()),
                offline_until: AtomicU64::new(0),
                reads_elsewhere: AtomicBool::new(false),
                shard_reads_unreachable: AtomicBool::new(false),
                frames_changed_on_the_way: AtomicBool::new(false),
                shard_read_gate: Mutex::new(None),
                gated_reads: AtomicU64::new(0),
                stats,
            }),
        }
    }

    /// Turns faults on with `cfg`, or off (`None`; an offline period ends too).
    pub fn set_faults(&self, cfg: Option<FaultConfig>) {
        match cfg {
            Some(c) => {
                *self.state.cfg.lock().unwrap() = c;
                self.state.enabled.store(true, Ordering::Relaxed);
            }
            None => {
                self.state.enabled.store(false, Ordering::Relaxed);
                self.state.offline_until.store(0, Ordering::Relaxed);
            }
        }
    }

    /// With `true`, shard reads into a caller's buffer come back in a buffer of their own, as
    /// from a drive that cannot read in place (no fault: the bytes are right).
    pub fn set_reads_elsewhere(&self, on: bool) {
        self.state.reads_elsewhere.store(on, Ordering::Relaxed);
    }

    /// With `true`, shard reads fail with [`DriveError::Unusable`], as a remote drive's do when
    /// the connection to its node breaks: nothing is known of the shard (no fault otherwise,
    /// and not counted: faults are off).
    pub fn set_shard_reads_unreachable(&self, on: bool) {
        self.state
            .shard_reads_unreachable
            .store(on, Ordering::Relaxed);
    }

    /// With `true`, a frame read is one that authenticates only its hash on the way, as a
    /// remote drive's over TCP, and the first byte of its chunk arrives changed, as if on the
    /// network; whole reads (`read_shard_into`) are right (no fault otherwise, and not counted).
    pub fn set_frames_changed_on_the_way(&self, on: bool) {
        self.state
            .frames_changed_on_the_way
            .store(on, Ordering::Relaxed);
    }

    /// With a gate, shard reads wait for one of its permits before they reach the drive (the
    /// permit is used up), so a test can change the drive while a read waits; `None` lets them
    /// through. Reads already waiting keep waiting for their gate.
    pub fn set_shard_read_gate(&self, gate: Option<Arc<tokio::sync::Semaphore>>) {
        *self.state.shard_read_gate.lock().unwrap() = gate;
    }

    /// How many shard reads have come to a gate so far.
    pub fn gated_reads(&self) -> u64 {
        self.state.gated_reads.load(Ordering::Relaxed)
    }

    async fn pass_gate(&self) {
        let gate = self.state.shard_read_gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            self.state.gated_reads.fetch_add(1, Ordering::Relaxed);
            if let Ok(permit) = gate.acquire().await {
                permit.forget();
            }
        }
    }

    fn unreachable(&self) -> Result<(), DriveError> {
        if self.state.shard_reads_unreachable.load(Ordering::Relaxed) {
            return Err(DriveError::Unusable(
                "injected: data connection broke: early eof".into(),
            ));
        }
        Ok(())
    }

    pub fn faulty(&self) -> bool {
        self.state.enabled.load(Ordering::Relaxed)
    }

    /// Starts operation number `step` of the test (see the module doc).
    pub fn set_step(&self, step: u64) {
        self.state.set_step(step);
    }

    async fn before(&self, kind: Kind, call: &str) -> Result<Decision, DriveError> {
        let mut d = self.state.decide(kind, call);
        if d.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(d.delay_ms)).await;
        }
        match d.fail_before.take() {
            Some(e) => Err(e),
            None => Ok(d),
        }
    }

    /// The fate of a shard read: one name for `read_shard` and `read_shard_into`, so a read has
    /// the same faults whichever the layer calls.
    async fn before_read_shard(
        &self,
        bucket: &str,
        key: &str,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Decision, DriveError> {
        let call = format!("read_shard {bucket} {key} {part} {offset} {len}");
        self.before(Kind::Read, &call).await
    }

    fn after<T>(&self, d: &Decision, r: Result<T, DriveError>) -> Result<T, DriveError> {
        if d.fail_after && r.is_ok() {
            return Err(injected("answer lost after the change took effect"));
        }
        r
    }

    /// [`FaultyDrive::flip`] in the buffer the bytes were read into.
    fn flip_in_place(&self, d: &Decision, bytes: &mut [u8]) {
        if let Some(at) = d.flip.filter(|_| !bytes.is_empty()) {
            self.state.stats.bit_flips.fetch_add(1, Ordering::Relaxed);
            let bit = at % (bytes.len() as u64 * 8);
            bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
    }

    fn flip(&self, d: &Decision, bytes: Bytes) -> Bytes {
        match d.flip {
            Some(at) if !bytes.is_empty() => {
                self.state.stats.bit_flips.fetch_add(1, Ordering::Relaxed);
                let mut v = bytes.to_vec();
                let bit = at % (v.len() as u64 * 8);
                v[(bit / 8) as usize] ^= 1 << (bit % 8);
                Bytes::from(v)
            }
            _ => bytes,
        }
    }
}

/// Wraps a shard writer of a [`FaultyDrive`]: each write may be torn or fail.
struct FaultyWriter {
    inner: Box<dyn ShardWriter>,
    drive: FaultyDrive,
    /// Names this writer's calls: the part it writes, and how many writes came before.
    part: u32,
    writes: u64,
}

#[async_trait]
impl ShardWriter for FaultyWriter {
    async fn write(&mut self, buf: &[u8]) -> Result<(), DriveError> {
        self.writes += 1;
        let call = format!("shard write part {} #{}", self.part, self.writes);
        let d = self.drive.before(Kind::Write, &call).await?;
        if let Some(frac) = d.torn {
            self.drive
                .state
                .stats
                .torn_writes
                .fetch_add(1, Ordering::Relaxed);
            let cut = ((buf.len() as f64) * frac) as usize;
            self.inner.write(&buf[..cut.min(buf.len())]).await?;
            return Err(injected("torn write"));
        }
        self.inner.write(buf).await
    }

    async fn finish(self: Box<Self>) -> Result<(), DriveError> {
        let call = format!("shard finish part {}", self.part);
        let d = self.drive.before(Kind::Write, &call).await?;
        let r = self.inner.finish().await;
        self.drive.after(&d, r)
    }
}

#[async_trait]
impl Drive for FaultyDrive {
    fn endpoint(&self) -> &str {
        self.inner.endpoint()
    }

    async fn disk_info(&self) -> Result<DiskInfo, DriveError> {
        self.before(Kind::Read, "disk_info").await?;
        let mut info = self.inner.disk_info().await?;
        // A drive that refuses every write is full, and says so.
        if self.faulty() && self.state.cfg.lock().unwrap().reports_full {
            info.free = 0;
        }
        Ok(info)
    }

    async fn read_format(&self) -> Result<Option<quarry_disk::FormatV1>, DriveError> {
        self.before(Kind::Read, "read_format").await?;
        self.inner.read_format().await
    }

    async fn write_format(&self, format: &quarry_disk::FormatV1) -> Result<(), DriveError> {
        let d = self.before(Kind::Write, "write_format").await?;
        let r = self.inner.write_format(format).await;
        self.after(&d, r)
    }

    async fn make_volume(&self, bucket: &str) -> Result<(), DriveError> {
        let d = self
            .before(Kind::Write, &format!("make_volume {}", bucket))
            .await?;
        let r = self.inner.make_volume(bucket).await;
        self.after(&d, r)
    }

    async fn list_volumes(&self) -> Result<Vec<VolInfo>, DriveError> {
        self.before(Kind::Read, "list_volumes").await?;
        self.inner.list_volumes().await
    }

    async fn stat_volume(&self, bucket: &str) -> Result<VolInfo, DriveError> {
        self.before(Kind::Read, &format!("stat_volume {}", bucket))
            .await?;
        self.inner.stat_volume(bucket).await
    }

    async fn delete_volume(&self, bucket: &str, force: bool) -> Result<(), DriveError> {
        let d = self
            .before(Kind::Delete, &format!("delete_volume {} {}", bucket, force))
            .await?;
        let r = self.inner.delete_volume(bucket, force).await;
        self.after(&d, r)
    }

    async fn read_meta(&self, bucket: &str, key: &str) -> Result<ObjectMeta, DriveError> {
        let d = self
            .before(Kind::Read, &format!("read_meta {} {}", bucket, key))
            .await?;
        let mut m = self.inner.read_meta(bucket, key).await?;
        if let Some(inline) = m.inline.take() {
            m.inline = Some(self.flip(&d, inline));
        }
        Ok(m)
    }

    async fn read_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<Uuid>,
    ) -> Result<ObjectMeta, DriveError> {
        let d = self
            .before(Kind::Read, &format!("read_version {} {}", bucket, key))
            .await?;
        let mut m = self.inner.read_version(bucket, key, version_id).await?;
        if let Some(inline) = m.inline.take() {
            m.inline = Some(self.flip(&d, inline));
        }
        Ok(m)
    }

    async fn read_versions(&self, bucket: &str, key: &str) -> Result<Vec<ObjectMeta>, DriveError> {
        self.before(Kind::Read, &format!("read_versions {} {}", bucket, key))
            .await?;
        self.inner.read_versions(bucket, key).await
    }

    async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<Uuid>,
    ) -> Result<(), DriveError> {
        let d = self
            .before(Kind::Delete, &format!("delete_version {} {}", bucket, key))
            .await?;
        let r = self.inner.delete_version(bucket, key, version_id).await;
        self.after(&d, r)
    }

    async fn write_meta(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<(), DriveError> {
        let d = self
            .before(Kind::Write, &format!("write_meta {} {}", bucket, key))
            .await?;
        let r = self.inner.write_meta(bucket, key, meta).await;
        self.after(&d, r)
    }

    async fn create_shard_writer(
        &self,
        tmp_id: Uuid,
        data_dir: Uuid,
        part: u32,
    ) -> Result<Box<dyn ShardWriter>, DriveError> {
        self.before(Kind::Write, &format!("create_shard_writer {}", part))
            .await?;
        let inner = self
            .inner
            .create_shard_writer(tmp_id, data_dir, part)
            .await?;
        Ok(Box::new(FaultyWriter {
            inner,
            drive: self.clone(),
            part,
            writes: 0,
        }))
    }

    async fn read_shard(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes, DriveError> {
        self.unreachable()?;
        let d = self
            .before_read_shard(bucket, key, part, offset, len)
            .await?;
        let b = self
            .inner
            .read_shard(bucket, key, data_dir, part, offset, len)
            .await?;
        Ok(self.flip(&d, b))
    }

    /// Reads in place through the inner drive, or elsewhere (see
    /// [`FaultyDrive::set_reads_elsewhere`]).
    async fn read_shard_into(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        buf: PooledBuf,
    ) -> Result<PooledBuf, DriveError> {
        self.pass_gate().await;
        self.unreachable()?;
        let len = buf.len();
        if self.state.reads_elsewhere.load(Ordering::Relaxed) {
            let b = self
                .read_shard(bucket, key, data_dir, part, offset, len)
                .await?;
            let mut elsewhere = PooledBuf::heap(b.len());
            elsewhere.extend_from_slice(&b);
            return Ok(elsewhere);
        }
        let d = self
            .before_read_shard(bucket, key, part, offset, len)
            .await?;
        let mut b = self
            .inner
            .read_shard_into(bucket, key, data_dir, part, offset, buf)
            .await?;
        self.flip_in_place(&d, &mut b);
        Ok(b)
    }

    async fn read_frame_into(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        buf: PooledBuf,
    ) -> Result<PooledBuf, DriveError> {
        let mut b = self
            .read_shard_into(bucket, key, data_dir, part, offset, buf)
            .await?;
        if self.frame_reads_check_hash_only() && b.len() > quarry_disk::FRAME_HASH_LEN {
            b[quarry_disk::FRAME_HASH_LEN] ^= 0x80;
        }
        Ok(b)
    }

    fn frame_reads_check_hash_only(&self) -> bool {
        self.state.frames_changed_on_the_way.load(Ordering::Relaxed)
    }

    async fn stat_shard(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
    ) -> Result<u64, DriveError> {
        self.before(
            Kind::Read,
            &format!("stat_shard {} {} {}", bucket, key, part),
        )
        .await?;
        self.inner.stat_shard(bucket, key, data_dir, part).await
    }

    async fn rename_data(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<(), DriveError> {
        let d = self
            .before(Kind::Write, &format!("rename_data {} {}", bucket, key))
            .await?;
        let r = self.inner.rename_data(tmp_id, bucket, key, meta).await;
        self.after(&d, r)
    }

    async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), DriveError> {
        let d = self
            .before(Kind::Delete, &format!("delete_object {} {}", bucket, key))
            .await?;
        let r = self.inner.delete_object(bucket, key).await;
        self.after(&d, r)
    }

    async fn delete_tmp(&self, tmp_id: Uuid) -> Result<(), DriveError> {
        let d = self.before(Kind::Delete, "delete_tmp").await?;
        let r = self.inner.delete_tmp(tmp_id).await;
        self.after(&d, r)
    }

    async fn walk(&self, bucket: &str, opts: &WalkOptions) -> Result<Vec<WalkEntry>, DriveError> {
        self.before(Kind::Read, &format!("walk {} {:?}", bucket, opts))
            .await?;
        self.inner.walk(bucket, opts).await
    }

    async fn read_bucket_config(&self, bucket: &str, name: &str) -> Result<Bytes, DriveError> {
        self.before(
            Kind::Read,
            &format!("read_bucket_config {} {}", bucket, name),
        )
        .await?;
        self.inner.read_bucket_config(bucket, name).await
    }

    async fn write_bucket_config(
        &self,
        bucket: &str,
        name: &str,
        data: &[u8],
    ) -> Result<(), DriveError> {
        let d = self
            .before(
                Kind::Write,
                &format!("write_bucket_config {} {}", bucket, name),
            )
            .await?;
        let r = self.inner.write_bucket_config(bucket, name, data).await;
        self.after(&d, r)
    }

    async fn delete_bucket_config(&self, bucket: &str, name: &str) -> Result<(), DriveError> {
        let d = self
            .before(
                Kind::Delete,
                &format!("delete_bucket_config {} {}", bucket, name),
            )
            .await?;
        let r = self.inner.delete_bucket_config(bucket, name).await;
        self.after(&d, r)
    }

    async fn read_part_shard(
        &self,
        upload: (&str, &str, &str),
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes, DriveError> {
        self.before(
            Kind::Read,
            &format!(
                "read_part_shard {} {} {} {}",
                upload.0, upload.1, upload.2, part
            ),
        )
        .await?;
        self.inner
            .read_part_shard(upload, data_dir, part, offset, len)
            .await
    }

    async fn list_bucket_configs(&self, bucket: &str) -> Result<Vec<String>, DriveError> {
        self.before(Kind::Read, &format!("list_bucket_configs {}", bucket))
            .await?;
        self.inner.list_bucket_configs(bucket).await
    }

    async fn create_upload(&self, meta: &UploadMeta) -> Result<(), DriveError> {
        let d = self
            .before(
                Kind::Write,
                &format!("create_upload {} {}", meta.bucket, meta.key),
            )
            .await?;
        let r = self.inner.create_upload(meta).await;
        self.after(&d, r)
    }

    async fn read_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<UploadMeta, DriveError> {
        self.before(Kind::Read, &format!("read_upload {} {}", bucket, key))
            .await?;
        self.inner.read_upload(bucket, key, upload_id).await
    }

    async fn commit_part(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part: &PartMeta,
    ) -> Result<(), DriveError> {
        let d = self
            .before(
                Kind::Write,
                &format!("commit_part {} {} {}", bucket, key, part.number),
            )
            .await?;
        let r = self
            .inner
            .commit_part(tmp_id, bucket, key, upload_id, part)
            .await;
        self.after(&d, r)
    }

    async fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<PartMeta>, DriveError> {
        self.before(Kind::Read, &format!("list_parts {} {}", bucket, key))
            .await?;
        self.inner.list_parts(bucket, key, upload_id).await
    }

    async fn stage_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[PartMeta],
        tmp_id: Uuid,
        data_dir: Uuid,
    ) -> Result<(), DriveError> {
        let d = self
            .before(
                Kind::Write,
                &format!("stage_parts {} {} {}", bucket, key, parts.len()),
            )
            .await?;
        let r = self
            .inner
            .stage_parts(bucket, key, upload_id, parts, tmp_id, data_dir)
            .await;
        self.after(&d, r)
    }

    async fn delete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), DriveError> {
        let d = self
            .before(Kind::Delete, &format!("delete_upload {} {}", bucket, key))
            .await?;
        let r = self.inner.delete_upload(bucket, key, upload_id).await;
        self.after(&d, r)
    }

    async fn list_uploads(&self, bucket: Option<&str>) -> Result<Vec<UploadMeta>, DriveError> {
        self.before(Kind::Read, &format!("list_uploads {:?}", bucket))
            .await?;
        self.inner.list_uploads(bucket).await
    }
}

/// A [`Runtime`] whose clock and ids come from a seed and whose background work runs only when
/// the test says ([`StepRuntime::run_queued`], then [`ErasureServer::run_background`]): with it a
/// seed's run makes the same drive calls in the same steps every time, so its faults replay
/// exactly (`a_seed_replays_exactly` in fault_injection.rs shows it).
///
/// - the clock starts at a fixed time and moves 1 µs per reading, so versions are ordered as
///   they were written and no two share a time;
/// - ids (tmp dirs, data dirs, upload ids) are random UUIDs drawn from the seed;
/// - one-off tasks (a GET's check of the shards it did not read) wait in a queue;
/// - the workers (heal worker, scanner, multipart cleanup) do not start.
pub struct StepRuntime {
    ids: Mutex<StdRng>,
    clock: std::sync::atomic::AtomicI64,
    queued: Mutex<Vec<futures::future::BoxFuture<'static, ()>>>,
}

impl std::fmt::Debug for StepRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepRuntime")
            .field("clock", &self.clock)
            .field("queued", &self.queued.lock().unwrap().len())
            .finish()
    }
}

impl StepRuntime {
    pub fn new(seed: u64) -> Arc<StepRuntime> {
        Arc::new(StepRuntime {
            ids: Mutex::new(StdRng::seed_from_u64(mix(seed ^ 0x1d5))),
            // 2027-01-15, in ns since the epoch.
            clock: std::sync::atomic::AtomicI64::new(1_800_000_000_000_000_000),
            queued: Mutex::new(Vec::new()),
        })
    }

    /// Runs the queued tasks one after the other, in the order they were spawned, and those they
    /// spawn, until none is left.
    pub async fn run_queued(&self) {
        loop {
            let tasks = std::mem::take(&mut *self.queued.lock().unwrap());
            if tasks.is_empty() {
                return;
            }
            for t in tasks {
                t.await;
            }
        }
    }
}

impl quarry_object::Runtime for StepRuntime {
    fn now_ns(&self) -> i64 {
        self.clock.fetch_add(1_000, Ordering::SeqCst) + 1_000
    }

    fn new_id(&self) -> Uuid {
        uuid::Builder::from_random_bytes(self.ids.lock().unwrap().gen()).into_uuid()
    }

    fn spawn(&self, task: futures::future::BoxFuture<'static, ()>) {
        self.queued.lock().unwrap().push(task);
    }

    fn workers(&self) -> bool {
        false
    }
}
