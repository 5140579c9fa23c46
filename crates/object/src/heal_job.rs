//! Heal jobs: a heal of the deployment, a bucket or a prefix that runs in the background
//! ([`crate::ErasureServer::start_heal_job`]) and that callers follow by its id.
//!
//! A job goes through four phases:
//! 1. counting: it lists what it will walk, so that its progress has a total and an ETA;
//! 2. healing: each bucket's own state ([`ErasureSet::heal_bucket`]), then each object, counting
//!    objects, bytes, heals and failures (with their reasons); an object is read and verified
//!    without its lock, and locked only to be repaired ([`ErasureSet::heal_object_if_needed`]);
//! 3. verifying: every bucket again (and the system configuration, for a deployment-wide job),
//!    and every object the healing phase rewrote (all of them again when it rewrote more than
//!    [`VERIFY_LIST_LIMIT`]), checked once more. What this second
//!    look still has to rewrite is counted as `verify_missing`: a job that ends with 0 there and
//!    no failure has *measured* that nothing it walked is missing a shard, rather than assumed it;
//! 4. done (or failed, when it could not even start, e.g. no quorum to list the buckets).
//!
//! Jobs live in memory on the node that runs them; the last [`KEPT_JOBS`] are kept for status.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tracing::info;

use crate::api::{HealReport, HealResult};
use crate::error::{Error, Result};
use crate::heal_queue::{verdict, Verdict};
use crate::scanner::Cursor;
use crate::set::{now_ns, ErasureSet};

/// Jobs kept for status, finished or not (the oldest finished go first).
pub const KEPT_JOBS: usize = 32;

/// The objects a job's healing phase rewrote that its verification re-checks one by one; beyond
/// this it walks everything again.
pub const VERIFY_LIST_LIMIT: usize = 100_000;

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealJobPhase {
    Counting,
    Healing,
    Verifying,
    Done,
    Failed,
}

impl HealJobPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            HealJobPhase::Counting => "counting",
            HealJobPhase::Healing => "healing",
            HealJobPhase::Verifying => "verifying",
            HealJobPhase::Done => "done",
            HealJobPhase::Failed => "failed",
        }
    }

    pub fn finished(self) -> bool {
        matches!(self, HealJobPhase::Done | HealJobPhase::Failed)
    }
}

/// A job's state, as its status call shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct HealJobStatus {
    pub id: String,
    /// `None`: every bucket.
    pub bucket: Option<String>,
    pub prefix: String,
    pub phase: HealJobPhase,
    /// Why the job failed (phase `Failed`).
    pub error: Option<String>,
    pub started_ns: i64,
    pub finished_ns: Option<i64>,
    /// Seconds since the start (to the end, once finished).
    pub elapsed_secs: f64,
    /// Objects the walk will check, once counted.
    pub total_objects: Option<u64>,
    /// Bytes of those objects' latest versions, once counted.
    pub total_bytes: Option<u64>,
    /// Bytes of the objects checked so far (latest versions).
    pub bytes_scanned: u64,
    /// Bytes of the objects rewritten on some drive (latest versions).
    pub bytes_healed: u64,
    /// What the healing phase did (objects checked, healed, failed, with the first failures and
    /// their reasons; bucket state healed).
    pub report: HealReport,
    /// Objects (and buckets) the verification looked at again.
    pub verify_checked: u64,
    /// What the verification still had to rewrite: objects plus bucket items. 0 at the end of a
    /// job with no failure: nothing it walked is missing.
    pub verify_missing: u64,
    /// Objects (and buckets) the verification could not check.
    pub verify_failed: u64,
}

impl HealJobStatus {
    /// Objects checked per second so far.
    pub fn rate(&self) -> f64 {
        if self.elapsed_secs > 0.0 {
            self.report.scanned as f64 / self.elapsed_secs
        } else {
            0.0
        }
    }

    /// Seconds left in the healing phase at the current rate, once the total is known.
    pub fn eta_secs(&self) -> Option<f64> {
        let total = self.total_objects?;
        if self.phase != HealJobPhase::Healing {
            return Some(0.0);
        }
        let rate = self.rate();
        (rate > 0.0).then(|| total.saturating_sub(self.report.scanned) as f64 / rate)
    }
}

/// One job: its status, updated as it goes.
#[derive(Debug)]
pub(crate) struct HealJob {
    started: Instant,
    status: Mutex<HealJobStatus>,
}

impl HealJob {
    fn update(&self, f: impl FnOnce(&mut HealJobStatus)) {
        let mut s = self.status.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
        if s.finished_ns.is_none() {
            s.elapsed_secs = self.started.elapsed().as_secs_f64();
        }
    }

    pub(crate) fn snapshot(&self) -> HealJobStatus {
        let mut s = self
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if s.finished_ns.is_none() {
            s.elapsed_secs = self.started.elapsed().as_secs_f64();
        }
        s
    }
}

/// The jobs of one server, and the totals of every job since start (for metrics).
#[derive(Debug, Default)]
pub(crate) struct HealJobs {
    jobs: Mutex<VecDeque<Arc<HealJob>>>,
    seq: AtomicU64,
    pub started_total: AtomicU64,
    pub objects_scanned_total: AtomicU64,
    pub objects_healed_total: AtomicU64,
    pub objects_failed_total: AtomicU64,
    pub bytes_scanned_total: AtomicU64,
    pub bytes_healed_total: AtomicU64,
    pub verify_missing_total: AtomicU64,
}

/// Heal job figures for [`crate::LayerStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealJobStats {
    pub running: u64,
    pub started_total: u64,
    pub objects_scanned_total: u64,
    pub objects_healed_total: u64,
    pub objects_failed_total: u64,
    pub bytes_scanned_total: u64,
    pub bytes_healed_total: u64,
    pub verify_missing_total: u64,
}

impl HealJobs {
    pub(crate) fn get(&self, id: &str) -> Option<HealJobStatus> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.iter().map(|j| j.snapshot()).find(|s| s.id == id)
    }

    pub(crate) fn list(&self) -> Vec<HealJobStatus> {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.iter().map(|j| j.snapshot()).collect()
    }

    pub(crate) fn stats(&self) -> HealJobStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HealJobStats {
            running: self.list().iter().filter(|s| !s.phase.finished()).count() as u64,
            started_total: l(&self.started_total),
            objects_scanned_total: l(&self.objects_scanned_total),
            objects_healed_total: l(&self.objects_healed_total),
            objects_failed_total: l(&self.objects_failed_total),
            bytes_scanned_total: l(&self.bytes_scanned_total),
            bytes_healed_total: l(&self.bytes_healed_total),
            verify_missing_total: l(&self.verify_missing_total),
        }
    }

    /// Registers a new job (dropping the oldest finished one beyond [`KEPT_JOBS`]).
    fn add(&self, bucket: Option<&str>, prefix: &str) -> Arc<HealJob> {
        let n = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let started_ns = now_ns();
        let job = Arc::new(HealJob {
            started: Instant::now(),
            status: Mutex::new(HealJobStatus {
                id: format!("heal-{started_ns:x}-{n}"),
                bucket: bucket.map(str::to_owned),
                prefix: prefix.to_owned(),
                phase: HealJobPhase::Counting,
                error: None,
                started_ns,
                finished_ns: None,
                elapsed_secs: 0.0,
                total_objects: None,
                total_bytes: None,
                bytes_scanned: 0,
                bytes_healed: 0,
                report: HealReport::default(),
                verify_checked: 0,
                verify_missing: 0,
                verify_failed: 0,
            }),
        });
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        while jobs.len() >= KEPT_JOBS {
            match jobs.iter().position(|j| j.snapshot().phase.finished()) {
                Some(i) => {
                    jobs.remove(i);
                }
                None => break,
            }
        }
        jobs.push_back(job.clone());
        self.started_total.fetch_add(1, Ordering::Relaxed);
        job
    }
}

/// Starts a job over `sets`; returns its first status (with its id).
pub(crate) fn start(
    jobs: &Arc<HealJobs>,
    sets: &[Arc<ErasureSet>],
    bucket: Option<&str>,
    prefix: &str,
) -> Result<HealJobStatus> {
    let Some(runtime) = sets.first().map(|s| s.cfg.runtime.clone()) else {
        return Err(Error::Internal("no erasure set to heal".into()));
    };
    let job = jobs.add(bucket, prefix);
    let first = job.snapshot();
    let (sets, jobs2) = (sets.to_vec(), jobs.clone());
    let (bucket, prefix) = (bucket.map(str::to_owned), prefix.to_owned());
    runtime.spawn(Box::pin(async move {
        let r = run(&job, &jobs2, &sets, bucket.as_deref(), &prefix).await;
        job.update(|s| {
            match r {
                Ok(()) => s.phase = HealJobPhase::Done,
                Err(e) => {
                    s.phase = HealJobPhase::Failed;
                    s.error = Some(e.to_string());
                }
            }
            s.finished_ns = Some(now_ns());
        });
        let s = job.snapshot();
        info!(
            job = s.id,
            phase = s.phase.as_str(),
            scanned = s.report.scanned,
            healed = s.report.healed,
            failed = s.report.failed,
            bucket_items_healed = s.report.bucket_items_healed,
            verify_checked = s.verify_checked,
            verify_missing = s.verify_missing,
            verify_failed = s.verify_failed,
            secs = s.elapsed_secs,
            "heal job finished"
        );
    }));
    Ok(first)
}

async fn run(
    job: &HealJob,
    jobs: &HealJobs,
    sets: &[Arc<ErasureSet>],
    bucket: Option<&str>,
    prefix: &str,
) -> Result<()> {
    // 1. Count.
    let (mut total, mut total_bytes) = (0u64, 0u64);
    for set in sets {
        let mut cursor = Cursor::new(set, bucket, prefix).await?;
        while let Some(item) = cursor.next_sized(set).await {
            if let Ok((_, _, size)) = item {
                total += 1;
                total_bytes += size;
            }
        }
    }
    job.update(|s| {
        s.total_objects = Some(total);
        s.total_bytes = Some(total_bytes);
        s.phase = HealJobPhase::Healing;
    });

    // 2. Heal, within the I/O budget of the server's heal rate settings.
    let mut budget = match sets.first() {
        Some(s) => crate::drive_heal::IoBudget::new(s.cfg.heal_rate, s.cfg.heal_bytes_rate),
        None => crate::drive_heal::IoBudget::new(0, 0),
    };
    let mut rewritten: Vec<(usize, String, String)> = Vec::new();
    let mut overflow = false;
    for (i, set) in sets.iter().enumerate() {
        let mut cursor = Cursor::new(set, bucket, prefix).await?;
        job.update(|s| {
            s.report.buckets = s.report.buckets.max(cursor.buckets().len() as u64);
        });
        if bucket.is_none() {
            let r = Ok(set.heal_system_configs().await);
            job.update(|s| s.report.record_bucket(quarry_disk::SYSTEM_CONFIG, &r));
        }
        for b in cursor.buckets() {
            let r = set.heal_bucket(&b).await;
            job.update(|s| s.report.record_bucket(&b, &r));
        }
        while let Some(item) = cursor.next_sized(set).await {
            match item {
                Ok((b, k, size)) => {
                    let r = set.heal_object_if_needed(&b, &k).await;
                    let healed = matches!(&r, Ok(r) if !r.healed.is_empty());
                    let failed = verdict(&r) != Verdict::Done;
                    if healed {
                        if rewritten.len() < VERIFY_LIST_LIMIT {
                            rewritten.push((i, b.clone(), k.clone()));
                        } else {
                            overflow = true;
                        }
                    }
                    let add = |a: &AtomicU64, n: u64| {
                        a.fetch_add(n, Ordering::Relaxed);
                    };
                    add(&jobs.objects_scanned_total, 1);
                    add(&jobs.bytes_scanned_total, size);
                    add(&jobs.objects_healed_total, healed as u64);
                    add(&jobs.bytes_healed_total, if healed { size } else { 0 });
                    add(&jobs.objects_failed_total, failed as u64);
                    job.update(|s| {
                        s.report.record(&b, &k, &r);
                        s.bytes_scanned += size;
                        if healed {
                            s.bytes_healed += size;
                        }
                    });
                    budget.spend(size).await;
                }
                Err((b, e)) => job.update(|s| {
                    s.report
                        .fail(&b, "", format!("listing the bucket failed: {e}"))
                }),
            }
        }
    }

    // 3. Verify: a second look finds nothing to rewrite, or says how much it found.
    job.update(|s| s.phase = HealJobPhase::Verifying);
    let note = |r: &Result<HealResult>| {
        let missing = match r {
            Ok(r) => r.healed.len() as u64,
            Err(_) => 0,
        };
        let failed = (verdict(r) != Verdict::Done) as u64;
        jobs.verify_missing_total
            .fetch_add(missing, Ordering::Relaxed);
        job.update(|s| {
            s.verify_checked += 1;
            s.verify_missing += missing;
            s.verify_failed += failed;
        });
    };
    for set in sets {
        if bucket.is_none() {
            note(&Ok(set.heal_system_configs().await));
        }
        let cursor = Cursor::new(set, bucket, prefix).await?;
        for b in cursor.buckets() {
            note(&set.heal_bucket(&b).await);
        }
    }
    if overflow {
        for set in sets {
            let mut cursor = Cursor::new(set, bucket, prefix).await?;
            while let Some(item) = cursor.next_sized(set).await {
                match item {
                    Ok((b, k, _)) => note(&set.heal_object_if_needed(&b, &k).await),
                    Err((_, e)) => note(&Err(e)),
                }
            }
        }
    } else {
        for (i, b, k) in rewritten {
            note(&sets[i].heal_object_if_needed(&b, &k).await);
        }
    }
    Ok(())
}
