//! The model-checking run shared by the randomized fault tests: operations (PUT / GET / ranged
//! GET / DELETE / LIST / multipart / heal) drawn from a seed against an erasure set whose drives
//! fail, checked against a model of what each key may hold.
//!
//! Where the faults come from is not this module's business: a test hands [`Run::new`] its set
//! (an [`ErasureServer`]) and an [`Injector`] that turns faults on for some drives of it
//! ([`super::FaultyDrive`]s over local drives, or a [`super::dataplane::FaultyDataPlane`] under
//! remote drives). Invariants checked:
//! - a read returns the bytes of a version the model allows (the last acknowledged write, or a
//!   later write that failed: never a mix, never garbage) or an error, never wrong bytes;
//! - with no drive faulty, nothing fails (except as S3 says: a missing key is NoSuchKey);
//! - listings never show a key the model says is absent, and with no drive faulty, show exactly
//!   the keys that are present;
//! - once faults stop and every key is healed, every key reads back as one allowed version, the
//!   same on every read, and the listing agrees;
//! - no panic, and every call finishes within its timeout ([`Run::timeout`]).

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use quarry_disk::{FormatV1, LocalDrive};
use quarry_object::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

mod versioned;

/// Turns faults on and off for the drives of one set, by position in the set.
#[async_trait::async_trait]
pub trait Injector: Send + Sync {
    /// Drives in the set.
    fn drives(&self) -> usize;
    /// Makes the drives at positions `which` faulty (with the injector's chaos settings) and
    /// every other drive healthy (a fault period in progress on it ends).
    fn set_faulty(&self, which: &[usize]);
    fn any_faulty(&self) -> bool;
    /// Starts operation number `step` (faults are drawn per step: see `faults/mod.rs`).
    fn set_step(&self, step: u64);
    /// Checks, once the faults stopped and every key was healed, that the faults left nothing
    /// behind that the model cannot see (e.g. buffers or writers that were never released).
    /// Answers how many checks it made.
    async fn check_quiet(&self) -> std::result::Result<u64, String> {
        Ok(0)
    }
}

pub const BLOCK: usize = 16 * 1024;
/// Default bound on every call of the model run (see [`Run::timeout`]).
pub const TIMEOUT: Duration = Duration::from_secs(10);
pub const BUCKET: &str = "bkt";
pub const KEYS: &[&str] = &["a", "b", "c/d", "c/e", "f/", "g"];

/// The layer settings of the randomized runs: small blocks, so objects of a few blocks stay cheap.
pub fn cfg() -> ObjectConfig {
    ObjectConfig {
        parity: None,
        block_size: BLOCK,
        inline_limit: 2 * 1024,
        ..Default::default()
    }
}

/// A temp dir on tmpfs when there is one: the drives fsync every commit, and on a real disk
/// that, not the code under test, would be most of the run time.
pub fn temp_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn body(data: &[u8], piece: usize) -> ByteStream {
    let pieces: Vec<std::io::Result<Bytes>> = data
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(pieces))
}

pub fn md5_hex(data: &[u8]) -> String {
    use md5::Digest;
    hex::encode(md5::Md5::digest(data))
}

/// Totals over all seeds, for the summary line.
#[derive(Default, Debug)]
pub struct Totals {
    pub seeds: u64,
    pub ops: u64,
    pub checks: u64,
    pub op_errors: u64,
    /// Reads that returned another allowed version than the previous read of the key, with no
    /// write of the key in between (a failed write that reached exactly a read quorum).
    pub flips: u64,
    /// Acknowledged objects missing from a listing taken while some drive was faulty.
    pub list_omissions: u64,
}

/// A multipart upload as the model knows it.
#[derive(Debug)]
struct Upload {
    key: String,
    id: String,
    /// Part number to (data, etag) of the last attempt to upload it.
    parts: BTreeMap<u32, (Arc<Vec<u8>>, String)>,
}

pub struct Run {
    rng: StdRng,
    /// What the set runs on (temp dirs, servers): dropped with the run.
    _fixture: Box<dyn Any + Send + Sync>,
    pub layer: Arc<ErasureServer>,
    /// Turns the faults of the set's drives on and off.
    faults: Box<dyn Injector>,
    /// Bound on every call of the run: a call that takes longer is a hang, and fails the run.
    pub timeout: Duration,
    parity: usize,
    /// Per key, the versions a read may return (`None`: absent). One entry after an
    /// acknowledged write; a failed write adds its version to the old ones.
    model: BTreeMap<String, Vec<Option<Arc<Vec<u8>>>>>,
    /// Per key, the index into `model[key]` the last read returned.
    last_seen: BTreeMap<String, usize>,
    uploads: Vec<Upload>,
    log: Arc<Mutex<Vec<String>>>,
    step: u64,
    totals: Totals,
    /// The layer's runtime when the run drives its background work (see
    /// [`super::StepRuntime`]): after each operation, before the next step.
    stepped: Option<Arc<super::StepRuntime>>,
    /// A versioned bucket's model (see [`Run::versioned`]); `None`: an unversioned bucket,
    /// checked by `model`.
    versions: Option<versioned::Model>,
}

pub type Check = std::result::Result<(), String>;

impl Run {
    /// A run seeded with `seed` over `layer`, whose drives' faults `faults` controls (all off
    /// at first). `fixture` is kept alive as long as the run. Makes the test bucket.
    pub async fn new(
        seed: u64,
        layer: Arc<ErasureServer>,
        faults: Box<dyn Injector>,
        fixture: Box<dyn Any + Send + Sync>,
        log: Arc<Mutex<Vec<String>>>,
    ) -> Run {
        layer.make_bucket(BUCKET).await.unwrap();
        let parity = layer.layout().parity;
        Run {
            rng: StdRng::seed_from_u64(seed),
            _fixture: fixture,
            layer,
            faults,
            timeout: TIMEOUT,
            parity,
            model: KEYS.iter().map(|k| (k.to_string(), vec![None])).collect(),
            last_seen: BTreeMap::new(),
            uploads: Vec::new(),
            log,
            step: 0,
            totals: Totals::default(),
            stepped: None,
            versions: None,
        }
    }

    /// The run drives the background work of `runtime`, the layer's (its workers are off): after
    /// each operation, within the operation's step.
    pub fn with_stepped_runtime(mut self, runtime: Arc<super::StepRuntime>) -> Run {
        self.stepped = Some(runtime);
        self
    }

    /// Runs what the layer left for the background (see [`Run::with_stepped_runtime`]).
    async fn background(&mut self) -> Check {
        let Some(rt) = self.stepped.clone() else {
            return Ok(());
        };
        let layer = self.layer.clone();
        self.timed("background work", async move {
            rt.run_queued().await;
            layer.run_background().await;
            rt.run_queued().await;
        })
        .await
    }

    fn log(&self, line: String) {
        self.log
            .lock()
            .unwrap()
            .push(format!("[{}] {line}", self.step));
    }

    fn any_faulty(&self) -> bool {
        self.faults.any_faulty()
    }

    /// Picks which drives are faulty (at most `max` of them).
    fn choose_faulty(&mut self, max: usize) {
        let n = self.faults.drives();
        let count = self.rng.gen_range(0..=max);
        let mut order: Vec<usize> = (0..n).collect();
        for i in 0..n {
            let j = self.rng.gen_range(i..n);
            order.swap(i, j);
        }
        let chosen: Vec<usize> = order[..count].to_vec();
        self.faults.set_faulty(&chosen);
        self.log(format!("faulty drives: {chosen:?}"));
    }

    fn all_clean(&self) {
        self.faults.set_faulty(&[]);
    }

    fn data(&mut self) -> Arc<Vec<u8>> {
        let len = match self.rng.gen_range(0..10) {
            0 => 0,
            1..=3 => self.rng.gen_range(1..2 * 1024),
            4..=7 => self.rng.gen_range(2 * 1024..3 * BLOCK),
            _ => self.rng.gen_range(3 * BLOCK..6 * BLOCK),
        };
        Arc::new((0..len).map(|_| self.rng.gen()).collect())
    }

    /// An error is allowed while some drive is faulty; with none, only `allowed` errors are.
    fn error_ok(&mut self, what: &str, e: &Error) -> Check {
        self.totals.op_errors += 1;
        if self.any_faulty() {
            return Ok(());
        }
        Err(format!("{what} failed with no faulty drive: {e} ({e:?})"))
    }

    /// Checks a read of `key` (`Ok(bytes)`, or the error) against the model.
    fn check_read(&mut self, key: &str, got: Result<Vec<u8>>, range: Option<(u64, u64)>) -> Check {
        self.totals.checks += 1;
        let allowed = self.model[key].clone();
        match got {
            Ok(bytes) => {
                let idx = allowed.iter().position(|v| match (v, range) {
                    (Some(d), None) => **d == bytes,
                    (Some(d), Some((off, len))) => {
                        let off = off as usize;
                        off < d.len() && d[off..(off + len as usize).min(d.len())] == bytes[..]
                    }
                    (None, _) => false,
                });
                let Some(idx) = idx else {
                    return Err(format!(
                        "GET {key} range {range:?} returned {} bytes (md5 {}) that match no allowed version: {:?}",
                        bytes.len(),
                        md5_hex(&bytes),
                        allowed.iter().map(|v| v.as_ref().map(|d| (d.len(), md5_hex(d)))).collect::<Vec<_>>()
                    ));
                };
                self.seen(key, idx);
                Ok(())
            }
            Err(Error::ObjectNotFound) => match allowed.iter().position(|v| v.is_none()) {
                Some(idx) => {
                    self.seen(key, idx);
                    Ok(())
                }
                None => Err(format!(
                    "GET {key}: NoSuchKey, but the object was acknowledged"
                )),
            },
            Err(Error::InvalidRange { size }) => {
                if allowed.iter().flatten().any(|d| d.len() as u64 == size) {
                    Ok(())
                } else {
                    Err(format!(
                        "GET {key}: InvalidRange with size {size}, no allowed version has it"
                    ))
                }
            }
            Err(e) => self.error_ok(&format!("GET {key}"), &e),
        }
    }

    fn seen(&mut self, key: &str, idx: usize) {
        if let Some(prev) = self.last_seen.insert(key.to_string(), idx) {
            if prev != idx {
                self.totals.flips += 1;
                self.log(format!(
                    "note: {key} flipped from version {prev} to {idx} without a write"
                ));
            }
        }
    }

    /// A write of `key` to `version` was acknowledged (`ok`) or failed.
    fn wrote(&mut self, key: &str, version: Option<Arc<Vec<u8>>>, ok: bool) {
        let m = self.model.get_mut(key).unwrap();
        if ok {
            *m = vec![version];
        } else if !m.contains(&version) {
            m.push(version);
        }
        self.last_seen.remove(key);
    }

    pub async fn get(
        &self,
        key: &str,
        range: Option<HttpRange>,
    ) -> std::result::Result<Result<Vec<u8>>, String> {
        let layer = self.layer.clone();
        let key2 = key.to_string();
        let fut = async move {
            let r = layer.get_object(BUCKET, &key2, range).await?;
            let mut out = Vec::new();
            let mut s = r.body;
            while let Some(b) = s.next().await {
                out.extend_from_slice(&b?);
            }
            if out.len() as u64 != r.range.1 {
                return Err(Error::Internal(format!(
                    "body has {} bytes, range says {}",
                    out.len(),
                    r.range.1
                )));
            }
            Ok(out)
        };
        let timeout = self.timeout;
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| format!("GET {key} did not finish within {timeout:?}"))
    }

    async fn timed<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = T>,
    ) -> std::result::Result<T, String> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| format!("{what} did not finish within {timeout:?}"))
    }

    async fn verify_key(&mut self, key: &str) -> Check {
        let r = self.get(key, None).await?;
        self.check_read(key, r, None)
    }

    async fn check_list(&mut self) -> Check {
        self.totals.checks += 1;
        let r = self
            .timed(
                "LIST",
                self.layer.list_objects(
                    BUCKET,
                    ListOptions {
                        max_keys: 1000,
                        ..Default::default()
                    },
                ),
            )
            .await?;
        let page = match r {
            Ok(p) => p,
            Err(e) => return self.error_ok("LIST", &e),
        };
        let listed: BTreeMap<String, u64> = page
            .objects
            .iter()
            .map(|o| (o.key.clone(), o.size))
            .collect();
        for (key, size) in &listed {
            let allowed = &self.model[key];
            if !allowed.iter().flatten().any(|d| d.len() as u64 == *size) {
                return Err(format!(
                    "LIST shows {key} ({size} bytes), which the model has as {:?}",
                    allowed
                        .iter()
                        .map(|v| v.as_ref().map(|d| d.len()))
                        .collect::<Vec<_>>()
                ));
            }
        }
        for (key, allowed) in &self.model {
            let present = allowed.iter().all(|v| v.is_some());
            if present && !listed.contains_key(key) {
                if self.any_faulty() {
                    self.totals.list_omissions += 1;
                } else {
                    return Err(format!(
                        "LIST with no faulty drive omits acknowledged {key}"
                    ));
                }
            }
        }
        self.log(format!("LIST -> {:?}", listed.keys().collect::<Vec<_>>()));
        Ok(())
    }

    async fn op(&mut self) -> Check {
        let key = KEYS[self.rng.gen_range(0..KEYS.len())].to_string();
        let pick = self.rng.gen_range(0..100);
        match pick {
            0..=27 => {
                let data = self.data();
                let piece = self.rng.gen_range(1..20_000);
                self.log(format!(
                    "PUT {key} {} bytes (md5 {})",
                    data.len(),
                    md5_hex(&data)
                ));
                let r = self
                    .timed(
                        "PUT",
                        self.layer.put_object(
                            BUCKET,
                            &key,
                            body(&data, piece),
                            PutOptions {
                                size: Some(data.len() as u64),
                                ..Default::default()
                            },
                        ),
                    )
                    .await?;
                self.log(format!("  -> {:?}", r.as_ref().map(|i| &i.etag)));
                match r {
                    Ok(info) => {
                        self.totals.checks += 1;
                        if info.etag != md5_hex(&data) || info.size != data.len() as u64 {
                            return Err(format!("PUT {key}: wrong ObjectInfo {info:?}"));
                        }
                        self.wrote(&key, Some(data), true);
                    }
                    Err(e) => {
                        self.wrote(&key, Some(data), false);
                        self.error_ok(&format!("PUT {key}"), &e)?;
                    }
                }
                self.verify_key(&key).await
            }
            28..=45 => {
                self.log(format!("GET {key}"));
                let r = self.get(&key, None).await?;
                self.log(format!(
                    "  -> {:?}",
                    r.as_ref().map(|b| (b.len(), md5_hex(b)))
                ));
                self.check_read(&key, r, None)
            }
            46..=55 => {
                let first = self.rng.gen_range(0..6 * BLOCK as u64);
                let len = self.rng.gen_range(1..3 * BLOCK as u64);
                self.log(format!("GET {key} bytes={first}-{}", first + len - 1));
                let r = self
                    .get(&key, Some(HttpRange::FromTo(first, first + len - 1)))
                    .await?;
                self.log(format!("  -> {:?}", r.as_ref().map(|b| b.len())));
                self.check_read(&key, r, Some((first, len)))
            }
            56..=63 => {
                self.log(format!("DELETE {key}"));
                let r = self
                    .timed("DELETE", self.layer.delete_object(BUCKET, &key))
                    .await?;
                self.log(format!("  -> {r:?}"));
                match r {
                    Ok(()) => self.wrote(&key, None, true),
                    Err(e) => {
                        self.wrote(&key, None, false);
                        self.error_ok(&format!("DELETE {key}"), &e)?;
                    }
                }
                self.verify_key(&key).await
            }
            64..=69 => self.check_list().await,
            70..=74 => {
                self.log(format!("CREATE UPLOAD {key}"));
                let r = self
                    .timed(
                        "CreateMultipartUpload",
                        self.layer
                            .new_multipart_upload(BUCKET, &key, Default::default()),
                    )
                    .await?;
                self.log(format!("  -> {:?}", r.as_ref().map(|u| &u.upload_id)));
                match r {
                    Ok(u) => self.uploads.push(Upload {
                        key,
                        id: u.upload_id,
                        parts: BTreeMap::new(),
                    }),
                    Err(e) => self.error_ok("CreateMultipartUpload", &e)?,
                }
                Ok(())
            }
            75..=82 => {
                if self.uploads.is_empty() {
                    return Ok(());
                }
                let u = self.rng.gen_range(0..self.uploads.len());
                let number = self.rng.gen_range(1..=4u32);
                // Parts but the last must be 5 MiB: make a few of them that big.
                let data = if self.rng.gen_range(0..16) == 0 {
                    let len = MIN_PART_SIZE as usize + self.rng.gen_range(0..1000);
                    let b: u8 = self.rng.gen();
                    Arc::new((0..len).map(|i| (i as u8).wrapping_mul(31) ^ b).collect())
                } else {
                    self.data()
                };
                let (key, id) = (self.uploads[u].key.clone(), self.uploads[u].id.clone());
                self.log(format!(
                    "UPLOAD PART {key} {id} #{number} {} bytes",
                    data.len()
                ));
                let r = self
                    .timed(
                        "UploadPart",
                        self.layer.put_object_part(
                            BUCKET,
                            &key,
                            &id,
                            number,
                            body(&data, 64 * 1024),
                            PartOptions {
                                size: Some(data.len() as u64),
                                ..Default::default()
                            },
                        ),
                    )
                    .await?;
                self.log(format!("  -> {:?}", r.as_ref().map(|p| &p.etag)));
                let etag = md5_hex(&data);
                match r {
                    Ok(p) => {
                        self.totals.checks += 1;
                        if p.etag != etag {
                            return Err(format!(
                                "UploadPart: etag {} for data with md5 {etag}",
                                p.etag
                            ));
                        }
                        self.uploads[u].parts.insert(number, (data, etag));
                    }
                    Err(Error::NoSuchUpload) => {
                        // Only after a failed complete or abort (the model drops acknowledged ones).
                        self.totals.op_errors += 1;
                    }
                    Err(e) => {
                        self.uploads[u].parts.insert(number, (data, etag));
                        self.error_ok("UploadPart", &e)?;
                    }
                }
                Ok(())
            }
            83..=88 => {
                if self.uploads.is_empty() {
                    return Ok(());
                }
                let u = self.rng.gen_range(0..self.uploads.len());
                // Every big part in order, then maybe one small one after them.
                let mut chosen: Vec<(u32, Arc<Vec<u8>>, String)> = Vec::new();
                let parts: Vec<_> = self.uploads[u]
                    .parts
                    .iter()
                    .map(|(n, (d, e))| (*n, d.clone(), e.clone()))
                    .collect();
                for (n, d, e) in parts {
                    if d.len() as u64 >= MIN_PART_SIZE || self.rng.gen_bool(0.5) {
                        let last_small = chosen
                            .last()
                            .is_some_and(|(_, d, _)| (d.len() as u64) < MIN_PART_SIZE);
                        if !last_small {
                            chosen.push((n, d, e));
                        }
                    }
                }
                if chosen.is_empty() {
                    return Ok(());
                }
                let (key, id) = (self.uploads[u].key.clone(), self.uploads[u].id.clone());
                let whole: Vec<u8> = chosen
                    .iter()
                    .flat_map(|(_, d, _)| d.iter().copied())
                    .collect();
                let whole = Arc::new(whole);
                self.log(format!(
                    "COMPLETE {key} {id} parts {:?} = {} bytes (md5 {})",
                    chosen.iter().map(|c| c.0).collect::<Vec<_>>(),
                    whole.len(),
                    md5_hex(&whole)
                ));
                let list = chosen
                    .iter()
                    .map(|(n, _, e)| CompletePart {
                        number: *n,
                        etag: e.clone(),
                        checksum: None,
                    })
                    .collect();
                let r = self
                    .timed(
                        "CompleteMultipartUpload",
                        self.layer.complete_multipart_upload(
                            BUCKET,
                            &key,
                            &id,
                            list,
                            Default::default(),
                        ),
                    )
                    .await?;
                self.log(format!("  -> {:?}", r.as_ref().map(|i| &i.etag)));
                match r {
                    Ok(info) => {
                        self.totals.checks += 1;
                        if info.size != whole.len() as u64 {
                            return Err(format!(
                                "Complete: size {} for {} bytes",
                                info.size,
                                whole.len()
                            ));
                        }
                        self.uploads.remove(u);
                        self.wrote(&key, Some(whole), true);
                    }
                    Err(Error::NoSuchUpload | Error::InvalidPart(_)) => {
                        // The upload (or a part) may be gone after a failed complete, abort or
                        // part upload; nothing was written.
                        self.totals.op_errors += 1;
                    }
                    Err(e) => {
                        self.wrote(&key, Some(whole), false);
                        self.error_ok("CompleteMultipartUpload", &e)?;
                    }
                }
                self.verify_key(&key).await
            }
            89..=92 => {
                if self.uploads.is_empty() {
                    return Ok(());
                }
                let u = self.rng.gen_range(0..self.uploads.len());
                let (key, id) = (self.uploads[u].key.clone(), self.uploads[u].id.clone());
                self.log(format!("ABORT {key} {id}"));
                let r = self
                    .timed(
                        "AbortMultipartUpload",
                        self.layer.abort_multipart_upload(BUCKET, &key, &id),
                    )
                    .await?;
                self.log(format!("  -> {r:?}"));
                match r {
                    Ok(()) => {
                        self.uploads.remove(u);
                        // Gone for good: its parts cannot be listed any more.
                        self.totals.checks += 1;
                        let r = self
                            .timed(
                                "ListParts",
                                self.layer.list_object_parts(
                                    BUCKET,
                                    &key,
                                    &id,
                                    ListPartsOptions {
                                        max_parts: 1000,
                                        ..Default::default()
                                    },
                                ),
                            )
                            .await?;
                        match r {
                            Err(Error::NoSuchUpload) => {}
                            Ok(p) => {
                                return Err(format!(
                                    "ListParts of aborted upload {id} of {key} answers: {} parts",
                                    p.parts.len()
                                ))
                            }
                            Err(e) => self.error_ok("ListParts after abort", &e)?,
                        }
                    }
                    Err(Error::NoSuchUpload) => self.totals.op_errors += 1,
                    Err(e) => self.error_ok("AbortMultipartUpload", &e)?,
                }
                Ok(())
            }
            _ => {
                self.log(format!("HEAL {key}"));
                let r = self
                    .timed("heal_object", self.layer.heal_object(BUCKET, &key))
                    .await?;
                self.log(format!("  -> {r:?}"));
                if let Err(e) = r {
                    self.error_ok(&format!("HEAL {key}"), &e)?;
                }
                self.verify_key(&key).await
            }
        }
    }

    fn set_step(&mut self, step: u64) {
        self.step = step;
        self.faults.set_step(step);
    }

    /// Faults off, heal everything, then every key must read back as one allowed version,
    /// twice the same, and the listing must agree.
    async fn settle(&mut self) -> Check {
        self.all_clean();
        self.set_step(u64::MAX / 2);
        self.log("faults off; healing every key".into());
        self.background().await?;
        let keys: Vec<String> = self.model.keys().cloned().collect();
        for key in &keys {
            let r = self
                .timed("heal_object", self.layer.heal_object(BUCKET, key))
                .await?;
            if let Err(e) = r {
                return Err(format!("heal of {key} after the faults stopped: {e}"));
            }
        }
        for key in &keys {
            self.last_seen.remove(key);
            let first = self.get(key, None).await?;
            self.check_read(key, first, None)?;
            let second = self.get(key, None).await?;
            self.check_read(key, second, None)?;
            // Stable from now on: collapse the model to what is there.
            if let Some(&idx) = self.last_seen.get(key) {
                let v = self.model[key][idx].clone();
                self.model.insert(key.clone(), vec![v]);
            }
        }
        self.check_list().await?;
        self.totals.checks += self
            .timed(
                "the check that the faults left nothing behind",
                self.faults.check_quiet(),
            )
            .await??;
        // The layer is quiet: nothing was counted as a flip here.
        Ok(())
    }
}

/// Bound on building a set (formatting drives, starting servers): a hang there fails the seed too.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs one seed over the set that `setup` builds; the error carries the reason (the log is in
/// the run's log). At most `max_faulty` drives (default: the set's parity) are faulty at once.
pub async fn run_seed(
    setup: impl Future<Output = Run>,
    ops: u64,
    max_faulty: Option<usize>,
) -> std::result::Result<Totals, String> {
    let mut run = tokio::time::timeout(SETUP_TIMEOUT, setup)
        .await
        .map_err(|_| format!("setting up the set did not finish within {SETUP_TIMEOUT:?}"))?;
    let max_faulty = max_faulty.unwrap_or(run.parity);
    for step in 0..ops {
        run.set_step(step);
        if step % 8 == 0 {
            run.choose_faulty(max_faulty);
            // set_faults happened after set_step: let this step's offline draw happen now.
            run.set_step(step);
        }
        run.totals.ops += 1;
        if run.versions.is_some() {
            run.op_versioned().await?;
        } else {
            run.op().await?;
        }
        run.background().await?;
    }
    if run.versions.is_some() {
        run.settle_versioned().await?;
    } else {
        run.settle().await?;
    }
    run.totals.seeds = 1;
    Ok(run.totals)
}

/// One set shape of [`run_many`]: how it is named in messages, and its default seeds.
pub struct Shape<'a> {
    /// Names the set in a failure, e.g. `4-drive set`.
    pub name: &'a str,
    /// Starts the summary line, e.g. `fault injection, 4 drives`.
    pub label: &'a str,
    /// The command that replays a seed (after `QUARRY_FAULT_SEED=<seed> `).
    pub replay: &'a str,
    /// First seed and number of seeds unless `QUARRY_FAULT_BASE_SEED` / `QUARRY_FAULT_SEEDS` say.
    pub base_seed: u64,
    pub seeds: u64,
    /// Drives faulty at once, at most (default: the set's parity).
    pub max_faulty: Option<usize>,
}

/// Runs the seeds of one set shape, each in its own task so a panic is reported with its seed;
/// `setup(seed, log)` builds the run of a seed, `summary` describes the faults injected (it is
/// appended to the summary line). Panics with the seed, the reason and the log on the first
/// failing seed.
pub async fn run_many<S, F>(shape: &Shape<'_>, setup: S, summary: impl Fn() -> String) -> Totals
where
    S: Fn(u64, Arc<Mutex<Vec<String>>>) -> F,
    F: Future<Output = Run> + Send + 'static,
{
    let seeds: Vec<u64> = match std::env::var("QUARRY_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => {
            let base = env("QUARRY_FAULT_BASE_SEED", shape.base_seed);
            (base..base + env("QUARRY_FAULT_SEEDS", shape.seeds)).collect()
        }
    };
    let ops = env("QUARRY_FAULT_OPS", 60);
    let mut total = Totals::default();
    for seed in seeds {
        let log = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(run_seed(setup(seed, log.clone()), ops, shape.max_faulty));
        let failure = match task.await {
            Ok(Ok(t)) => {
                if std::env::var_os("QUARRY_FAULT_TRACE").is_some() {
                    println!("seed {seed}:\n{}", log.lock().unwrap().join("\n"));
                }
                total.seeds += t.seeds;
                total.ops += t.ops;
                total.checks += t.checks;
                total.op_errors += t.op_errors;
                total.flips += t.flips;
                total.list_omissions += t.list_omissions;
                None
            }
            Ok(Err(why)) => Some(why),
            Err(e) => Some(format!("panicked: {e}")),
        };
        if let Some(why) = failure {
            let log = log.lock().unwrap().join("\n");
            panic!(
                "{}, seed {seed} failed: {why}\noperation log:\n{log}\n\
                 replay with QUARRY_FAULT_SEED={seed} {}",
                shape.name, shape.replay
            );
        }
    }
    println!(
        "{}: {} seeds, {} operations, {} invariant checks, {} operations failed (allowed), \
         {} version flips without a write, {} listing omissions under faults; {}",
        shape.label,
        total.seeds,
        total.ops,
        total.checks,
        total.op_errors,
        total.flips,
        total.list_omissions,
        summary()
    );
    total
}

/// Formats `drives` as one set of a deployment whose ids derive from `seed`: the placement of
/// shards on drives (a rotation keyed by the deployment id) is then the same in every run of the
/// seed, and so are the bytes each drive is sent, which name its appends' fates.
pub async fn format_seeded(drives: &[LocalDrive], seed: u64) -> Uuid {
    let deployment = Uuid::from_u64_pair(0x0c1a_5732_f4a1_7500, seed);
    let ids: Vec<Uuid> = (0..drives.len() as u64)
        .map(|i| Uuid::from_u64_pair(seed, i))
        .collect();
    for (d, id) in drives.iter().zip(&ids) {
        d.write_format(&FormatV1::new(deployment, *id, vec![ids.clone()]))
            .await
            .unwrap();
    }
    deployment
}
