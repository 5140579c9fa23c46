//! The object layer over drives that fail: a randomized test of PUT / GET / ranged GET / DELETE /
//! LIST / multipart / heal against a model, with faults drawn from a seed (see `faults`).
//!
//! Runs `QUARRY_FAULT_SEEDS` seeds (default 30 per set shape) of `QUARRY_FAULT_OPS` operations
//! (default 60); `QUARRY_FAULT_SEED=<n>` runs that one seed only (to replay a failure). Invariants:
//! - a read returns the bytes of a version the model allows (the last acknowledged write, or a
//!   later write that failed: never a mix, never garbage) or an error, never wrong bytes;
//! - with no drive faulty, nothing fails (except as S3 says: a missing key is NoSuchKey);
//! - listings never show a key the model says is absent, and with no drive faulty, show exactly
//!   the keys that are present;
//! - once faults stop and every key is healed, every key reads back as one allowed version, the
//!   same on every read, and the listing agrees;
//! - no panic, and every call finishes within its timeout.

mod faults;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use faults::{FaultConfig, FaultStats, FaultyDrive};
use futures::StreamExt;
use quarry_disk::Drive;
use quarry_object::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BLOCK: usize = 16 * 1024;
const TIMEOUT: Duration = Duration::from_secs(10);
const BUCKET: &str = "bkt";
const KEYS: &[&str] = &["a", "b", "c/d", "c/e", "f/", "g"];

fn cfg() -> ObjectConfig {
    ObjectConfig {
        parity: None,
        block_size: BLOCK,
        inline_limit: 2 * 1024,
        ..Default::default()
    }
}

/// A temp dir on tmpfs when there is one: the drives fsync every commit, and on a real disk
/// that, not the code under test, would be most of the run time.
fn temp_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn body(data: &[u8], piece: usize) -> ByteStream {
    let pieces: Vec<std::io::Result<Bytes>> = data
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(pieces))
}

fn md5_hex(data: &[u8]) -> String {
    use md5::Digest;
    hex::encode(md5::Md5::digest(data))
}

/// Totals over all seeds, for the summary line.
#[derive(Default, Debug)]
struct Totals {
    seeds: u64,
    ops: u64,
    checks: u64,
    op_errors: u64,
    /// Reads that returned another allowed version than the previous read of the key, with no
    /// write of the key in between (a failed write that reached exactly a read quorum).
    flips: u64,
    /// Acknowledged objects missing from a listing taken while some drive was faulty.
    list_omissions: u64,
}

/// A multipart upload as the model knows it.
#[derive(Debug)]
struct Upload {
    key: String,
    id: String,
    /// Part number to (data, etag) of the last attempt to upload it.
    parts: BTreeMap<u32, (Arc<Vec<u8>>, String)>,
}

struct Run {
    rng: StdRng,
    _dir: tempfile::TempDir,
    layer: Arc<ErasureServer>,
    drives: Vec<FaultyDrive>,
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
}

type Check = std::result::Result<(), String>;

impl Run {
    async fn new(
        seed: u64,
        drives: usize,
        stats: Arc<FaultStats>,
        log: Arc<Mutex<Vec<String>>>,
    ) -> Run {
        let dir = temp_dir();
        let paths: Vec<PathBuf> = (1..=drives)
            .map(|i| dir.path().join(format!("d{i}")))
            .collect();
        let (deployment, locals) = ErasureServer::format_local(paths).await.unwrap();
        let faulty: Vec<FaultyDrive> = locals
            .into_iter()
            .enumerate()
            .map(|(i, d)| FaultyDrive::new(Arc::new(d), seed, i as u64, stats.clone()))
            .collect();
        let dyns: Vec<Arc<dyn Drive>> = faulty
            .iter()
            .map(|d| Arc::new(d.clone()) as Arc<dyn Drive>)
            .collect();
        let layer = ErasureServer::open(deployment, dyns, cfg()).unwrap();
        layer.make_bucket(BUCKET).await.unwrap();
        let parity = layer.layout().parity;
        Run {
            rng: StdRng::seed_from_u64(seed),
            _dir: dir,
            layer,
            drives: faulty,
            parity,
            model: KEYS.iter().map(|k| (k.to_string(), vec![None])).collect(),
            last_seen: BTreeMap::new(),
            uploads: Vec::new(),
            log,
            step: 0,
            totals: Totals::default(),
        }
    }

    fn log(&self, line: String) {
        self.log
            .lock()
            .unwrap()
            .push(format!("[{}] {line}", self.step));
    }

    fn any_faulty(&self) -> bool {
        self.drives.iter().any(|d| d.faulty())
    }

    /// Picks which drives are faulty (at most `max` of them).
    fn choose_faulty(&mut self, max: usize) {
        let n = self.drives.len();
        let count = self.rng.gen_range(0..=max);
        let mut order: Vec<usize> = (0..n).collect();
        for i in 0..n {
            let j = self.rng.gen_range(i..n);
            order.swap(i, j);
        }
        let chosen: Vec<usize> = order[..count].to_vec();
        for (i, d) in self.drives.iter().enumerate() {
            d.set_faults(chosen.contains(&i).then(FaultConfig::chaos));
        }
        self.log(format!("faulty drives: {chosen:?}"));
    }

    fn all_clean(&self) {
        for d in &self.drives {
            d.set_faults(None);
        }
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

    async fn get(
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
        tokio::time::timeout(TIMEOUT, fut)
            .await
            .map_err(|_| format!("GET {key} did not finish within {TIMEOUT:?}"))
    }

    async fn timed<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = T>,
    ) -> std::result::Result<T, String> {
        tokio::time::timeout(TIMEOUT, fut)
            .await
            .map_err(|_| format!("{what} did not finish within {TIMEOUT:?}"))
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
        for d in &self.drives {
            d.set_step(step);
        }
    }

    /// Faults off, heal everything, then every key must read back as one allowed version,
    /// twice the same, and the listing must agree.
    async fn settle(&mut self) -> Check {
        self.all_clean();
        self.set_step(u64::MAX / 2);
        self.log("faults off; healing every key".into());
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
        // The layer is quiet: nothing was counted as a flip here.
        Ok(())
    }
}

/// Runs one seed; the error carries the reason (the log is in `log`).
async fn run_seed(
    seed: u64,
    drives: usize,
    ops: u64,
    max_faulty: Option<usize>,
    stats: Arc<FaultStats>,
    log: Arc<Mutex<Vec<String>>>,
) -> std::result::Result<Totals, String> {
    let mut run = Run::new(seed, drives, stats, log).await;
    let max_faulty = max_faulty.unwrap_or(run.parity);
    for step in 0..ops {
        run.set_step(step);
        if step % 8 == 0 {
            run.choose_faulty(max_faulty);
            // set_faults happened after set_step: let this step's offline draw happen now.
            run.set_step(step);
        }
        run.totals.ops += 1;
        run.op().await?;
    }
    run.settle().await?;
    run.totals.seeds = 1;
    Ok(run.totals)
}

/// Runs the seeds of one set shape, each in its own task so a panic is reported with its seed.
async fn run_many(drives: usize) {
    let seeds: Vec<u64> = match std::env::var("QUARRY_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => {
            let base = env("QUARRY_FAULT_BASE_SEED", 1000 * drives as u64);
            (base..base + env("QUARRY_FAULT_SEEDS", 30)).collect()
        }
    };
    let ops = env("QUARRY_FAULT_OPS", 60);
    let stats = Arc::new(FaultStats::default());
    let mut total = Totals::default();
    for seed in seeds {
        let log = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(run_seed(
            seed,
            drives,
            ops,
            None,
            stats.clone(),
            log.clone(),
        ));
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
                "{drives}-drive set, seed {seed} failed: {why}\noperation log:\n{log}\n\
                 replay with QUARRY_FAULT_SEED={seed} cargo test -p quarry-object --test fault_injection"
            );
        }
    }
    println!(
        "fault injection, {drives} drives: {} seeds, {} operations, {} invariant checks, {} operations failed (allowed), \
         {} version flips without a write, {} listing omissions under faults; {}",
        total.seeds,
        total.ops,
        total.checks,
        total.op_errors,
        total.flips,
        total.list_omissions,
        stats.summary()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_faults_four_drives() {
    run_many(4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_faults_six_drives() {
    run_many(6).await;
}

/// A set whose drives can be switched faulty by hand, with objects written before the faults.
struct Manual {
    run: Run,
}

impl Manual {
    async fn new(drives: usize) -> Manual {
        let stats = Arc::new(FaultStats::default());
        let run = Run::new(0, drives, stats, Arc::new(Mutex::new(Vec::new()))).await;
        Manual { run }
    }

    fn layer(&self) -> &ErasureServer {
        &self.run.layer
    }

    /// Applies `cfg` to the drives in `which`, and no faults to the others.
    fn faults(&self, which: &[usize], cfg: FaultConfig) {
        for (i, d) in self.run.drives.iter().enumerate() {
            d.set_faults(which.contains(&i).then(|| cfg.clone()));
        }
    }

    async fn put(&self, key: &str, data: &[u8]) -> Result<ObjectInfo> {
        tokio::time::timeout(
            TIMEOUT,
            self.layer().put_object(
                BUCKET,
                key,
                body(data, 5000),
                PutOptions {
                    size: Some(data.len() as u64),
                    ..Default::default()
                },
            ),
        )
        .await
        .expect("PUT hangs")
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.run.get(key, None).await.expect("GET hangs")
    }

    async fn part(&self, key: &str, id: &str, n: u32, data: &[u8]) -> Result<UploadedPart> {
        tokio::time::timeout(
            TIMEOUT,
            self.layer().put_object_part(
                BUCKET,
                key,
                id,
                n,
                body(data, 5000),
                PartOptions {
                    size: Some(data.len() as u64),
                    ..Default::default()
                },
            ),
        )
        .await
        .expect("UploadPart hangs")
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect()
}

fn is_quorum_error(e: &Error) -> bool {
    matches!(e, Error::ReadQuorum { .. } | Error::WriteQuorum { .. })
}

/// More drives fail than parity covers: every operation fails with a quorum error (never wrong
/// bytes, never "not found"), and once the drives are back and healed everything is intact.
#[tokio::test]
async fn faults_beyond_parity_fail_with_quorum_errors() {
    let m = Manual::new(4).await;
    let small = pattern(1000, 3);
    let big = pattern(5 * BLOCK + 77, 5);
    m.put("small", &small).await.unwrap();
    m.put("big", &big).await.unwrap();
    let up = m
        .layer()
        .new_multipart_upload(BUCKET, "mp", Default::default())
        .await
        .unwrap();
    let p1 = m
        .part("mp", &up.upload_id, 1, &pattern(3000, 7))
        .await
        .unwrap();

    // Three of four drives dead (parity is 2).
    m.faults(&[0, 2, 3], FaultConfig::dead());
    for key in ["small", "big", "absent"] {
        let e = m.get(key).await.unwrap_err();
        assert!(is_quorum_error(&e), "GET {key}: {e:?}");
        let e = m.layer().heal_object(BUCKET, key).await.unwrap_err();
        assert!(is_quorum_error(&e), "heal {key}: {e:?}");
    }
    let e = m.put("small", &pattern(10, 9)).await.unwrap_err();
    assert!(is_quorum_error(&e), "PUT: {e:?}");
    let e = m.put("new", &pattern(100_000, 9)).await.unwrap_err();
    assert!(is_quorum_error(&e), "PUT: {e:?}");
    let e = m.layer().delete_object(BUCKET, "big").await.unwrap_err();
    assert!(is_quorum_error(&e), "DELETE: {e:?}");
    let e = m
        .layer()
        .list_objects(
            BUCKET,
            ListOptions {
                max_keys: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "LIST: {e:?}");
    let e = m
        .layer()
        .new_multipart_upload(BUCKET, "mp2", Default::default())
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "CreateMultipartUpload: {e:?}");
    let e = m
        .part("mp", &up.upload_id, 2, &pattern(3000, 8))
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "UploadPart: {e:?}");
    let complete = vec![CompletePart {
        number: 1,
        etag: p1.etag.clone(),
        checksum: None,
    }];
    let e = m
        .layer()
        .complete_multipart_upload(
            BUCKET,
            "mp",
            &up.upload_id,
            complete.clone(),
            Default::default(),
        )
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "CompleteMultipartUpload: {e:?}");
    let e = m
        .layer()
        .abort_multipart_upload(BUCKET, "mp", &up.upload_id)
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "AbortMultipartUpload: {e:?}");

    // Back, healed: everything acknowledged is intact, nothing failed is visible.
    m.faults(&[], FaultConfig::default());
    for key in ["small", "big", "new"] {
        m.layer().heal_object(BUCKET, key).await.unwrap();
    }
    assert_eq!(m.get("small").await.unwrap(), small);
    assert_eq!(m.get("big").await.unwrap(), big);
    assert!(matches!(m.get("new").await, Err(Error::ObjectNotFound)));
    let done = m
        .layer()
        .complete_multipart_upload(BUCKET, "mp", &up.upload_id, complete, Default::default())
        .await
        .unwrap();
    assert_eq!(done.size, 3000);
    assert_eq!(m.get("mp").await.unwrap(), pattern(3000, 7));
}

/// Exactly parity drives down on a 2+2 set: reads work, writes (which need 3) fail cleanly.
#[tokio::test]
async fn parity_drives_down_reads_work_writes_fail() {
    let m = Manual::new(4).await;
    let big = pattern(3 * BLOCK + 1, 11);
    m.put("big", &big).await.unwrap();
    m.faults(&[1, 2], FaultConfig::dead());
    assert_eq!(m.get("big").await.unwrap(), big);
    assert!(matches!(m.get("absent").await, Err(Error::ObjectNotFound)));
    let e = m.put("big", &pattern(100, 1)).await.unwrap_err();
    assert!(
        matches!(e, Error::WriteQuorum { have: 2, need: 3 }),
        "{e:?}"
    );
    assert_eq!(m.get("big").await.unwrap(), big);
}

/// Randomized, with up to every drive faulty: errors are allowed, wrong bytes are not, and once
/// the faults stop and every key is healed, everything acknowledged is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_faults_beyond_parity() {
    let stats = Arc::new(FaultStats::default());
    let seeds = env("QUARRY_FAULT_SEEDS", 30) / 3;
    let ops = env("QUARRY_FAULT_OPS", 60);
    let base = env("QUARRY_FAULT_BASE_SEED", 90_000);
    let (mut checks, mut failed) = (0, 0);
    for seed in base..base + seeds {
        let log = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(run_seed(seed, 4, ops, Some(4), stats.clone(), log.clone()));
        match task.await {
            Ok(Ok(t)) => {
                checks += t.checks;
                failed += t.op_errors;
            }
            Ok(Err(why)) => panic!(
                "seed {seed} failed: {why}\n{}\nreplay: QUARRY_FAULT_BASE_SEED={seed} QUARRY_FAULT_SEEDS=3",
                log.lock().unwrap().join("\n")
            ),
            Err(e) => panic!("seed {seed} panicked: {e}\n{}", log.lock().unwrap().join("\n")),
        }
    }
    println!(
        "fault injection beyond parity, 4 drives: {seeds} seeds x {ops} operations, {checks} invariant checks, \
         {failed} operations failed (allowed); {}",
        stats.summary()
    );
}

/// Full drives: within parity writes go on; beyond it every write fails with `StorageFull`
/// (the S3 layer's `XQuarryStorageFull`, 507), existing objects stay untouched, reads and deletes
/// keep working, and writes resume once there is space again.
#[tokio::test]
async fn disk_full() {
    let m = Manual::new(4).await;
    let small = pattern(500, 1);
    let big = pattern(4 * BLOCK + 3, 2);
    m.put("small", &small).await.unwrap();
    m.put("big", &big).await.unwrap();
    let up = m
        .layer()
        .new_multipart_upload(BUCKET, "mp", Default::default())
        .await
        .unwrap();

    // One full drive of four: parity covers it.
    m.faults(&[3], FaultConfig::full_disk());
    let one = pattern(2 * BLOCK, 4);
    m.put("one", &one).await.unwrap();
    assert_eq!(m.get("one").await.unwrap(), one);

    // Two full drives: a write needs three.
    m.faults(&[1, 3], FaultConfig::full_disk());
    for (key, data) in [
        ("small", pattern(700, 5)),
        ("big", pattern(3 * BLOCK, 6)),
        ("new", pattern(10, 7)),
    ] {
        let e = m.put(key, &data).await.unwrap_err();
        assert!(
            matches!(e, Error::StorageFull { have: 2, need: 3 }),
            "PUT {key}: {e:?}"
        );
    }
    let e = m
        .part("mp", &up.upload_id, 1, &pattern(BLOCK * 2, 8))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::StorageFull { .. }), "UploadPart: {e:?}");
    let e = m
        .layer()
        .new_multipart_upload(BUCKET, "mp2", Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { .. }),
        "CreateMultipartUpload: {e:?}"
    );
    // Existing objects are untouched and readable; the failed writes left nothing.
    assert_eq!(m.get("small").await.unwrap(), small);
    assert_eq!(m.get("big").await.unwrap(), big);
    assert_eq!(m.get("one").await.unwrap(), one);
    assert!(matches!(m.get("new").await, Err(Error::ObjectNotFound)));
    // Deleting frees space, and works on a full drive.
    m.layer().delete_object(BUCKET, "one").await.unwrap();
    assert!(matches!(m.get("one").await, Err(Error::ObjectNotFound)));

    // Every drive full.
    m.faults(&[0, 1, 2, 3], FaultConfig::full_disk());
    let e = m.put("new", &pattern(10, 9)).await.unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { have: 0, need: 3 }),
        "{e:?}"
    );
    let e = m.put("big", &pattern(5 * BLOCK, 9)).await.unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { have: 0, need: 3 }),
        "{e:?}"
    );
    assert_eq!(m.get("small").await.unwrap(), small);
    assert_eq!(m.get("big").await.unwrap(), big);

    // Space again: writes resume.
    m.faults(&[], FaultConfig::default());
    let new = pattern(3 * BLOCK + 5, 10);
    m.put("new", &new).await.unwrap();
    assert_eq!(m.get("new").await.unwrap(), new);
    let p = m
        .part("mp", &up.upload_id, 1, &pattern(1000, 11))
        .await
        .unwrap();
    let done = m
        .layer()
        .complete_multipart_upload(
            BUCKET,
            "mp",
            &up.upload_id,
            vec![CompletePart {
                number: 1,
                etag: p.etag,
                checksum: None,
            }],
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.size, 1000);
}

/// Drives that fill up during a write (their free space looked fine): the write fails with
/// `StorageFull` as its shards are refused, before it commits anything.
#[tokio::test]
async fn disk_fills_during_write() {
    let m = Manual::new(4).await;
    let big = pattern(4 * BLOCK + 3, 2);
    m.put("big", &big).await.unwrap();
    let up = m
        .layer()
        .new_multipart_upload(BUCKET, "mp", Default::default())
        .await
        .unwrap();
    m.faults(&[0, 2], FaultConfig::filling_disk());
    let e = m.put("big", &pattern(3 * BLOCK, 6)).await.unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { have: 2, need: 3 }),
        "PUT: {e:?}"
    );
    let e = m
        .part("mp", &up.upload_id, 1, &pattern(BLOCK * 2, 8))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { have: 2, need: 3 }),
        "UploadPart: {e:?}"
    );
    assert_eq!(m.get("big").await.unwrap(), big);
    m.faults(&[], FaultConfig::default());
    assert_eq!(m.get("big").await.unwrap(), big);
}

/// An acknowledged object whose write missed one drive is not reported missing when other
/// drives fail to answer: the read fails with a quorum error instead of NoSuchKey.
#[tokio::test]
async fn acknowledged_object_is_never_not_found() {
    let m = Manual::new(4).await;
    m.faults(&[3], FaultConfig::dead());
    let data = pattern(3000, 12);
    m.put("x", &data).await.unwrap(); // on drives 0, 1, 2
    m.faults(&[1, 2], FaultConfig::dead());
    // Drive 0 holds it, drive 3 never saw it: one "absent" answer proves nothing.
    let e = m.get("x").await.unwrap_err();
    assert!(matches!(e, Error::ReadQuorum { .. }), "{e:?}");
    let e = m.layer().object_info(BUCKET, "x").await.unwrap_err();
    assert!(matches!(e, Error::ReadQuorum { .. }), "{e:?}");
    m.faults(&[], FaultConfig::default());
    assert_eq!(m.get("x").await.unwrap(), data);
}
