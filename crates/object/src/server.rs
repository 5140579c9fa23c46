//! `ErasureServer`: the object layer of one node over its erasure set(s). It opens and formats
//! the drives, routes every object to its set, and runs the heal worker.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use quarry_disk::{Drive, FormatV1, LocalDrive};
use tokio::sync::mpsc;
use tracing::{info, warn};
use uuid::Uuid;

use crate::api::HealReport;
use crate::api::*;
use crate::api::{
    CompleteOptions, CompletePart, ListPartsOptions, ListPartsResult, ListUploadsOptions,
    ListUploadsResult, NewUploadOptions, PartOptions, UploadInfo, UploadedPart,
};
use crate::config::ObjectConfig;
use crate::error::{Error, Result};
use crate::heal_queue::{spawn_heal_worker, HealWorker};
use crate::names::{check_bucket_name, check_key};
use crate::scanner::{heal_sets, spawn_scanner};
use crate::set::ErasureSet;
use crate::stats::{DriveState, LayerStats, ScanCounters};

/// A bucket name that cannot be a bucket (`.quarry.sys`, `..`, upper case…) names no bucket:
/// `BucketNotFound`, before any drive is asked (a drive refuses such a volume name, and the
/// refusals, counted as lost drives, read as a lost quorum: 503). Only `make_bucket` says
/// `InvalidBucketName` instead.
fn named_bucket(bucket: &str) -> Result<()> {
    check_bucket_name(bucket).map_err(|_| Error::BucketNotFound)
}

/// Objects waiting for the heal worker; beyond this, heal requests are dropped (the next read of
/// a damaged object queues it again).
const HEAL_QUEUE: usize = 10_000;

/// Whether this node can serve: how many drives answer, and whether that is enough.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    pub drives_online: usize,
    pub drives_total: usize,
    pub read_quorum: bool,
    pub write_quorum: bool,
}

/// The shape of the deployment, for banners and admin answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub deployment_id: Uuid,
    pub drives: usize,
    pub sets: usize,
    pub data: usize,
    pub parity: usize,
}

/// One erasure set to open: its drives in set order, and its per-object locker (`None`: this
/// process's own lock table).
pub type SetSpec = (Vec<Arc<dyn Drive>>, Option<Arc<dyn crate::nslock::Locker>>);

pub struct ErasureServer {
    sets: Vec<Arc<ErasureSet>>,
    deployment_id: Uuid,
    /// The background scanner's counters; `None` when it is off.
    scan: Option<Arc<ScanCounters>>,
    /// The heal jobs started on this node.
    heal_jobs: Arc<crate::heal_job::HealJobs>,
    /// The cluster this server is a node of (set once by `open_cluster`); unset: a single node.
    cluster: std::sync::OnceLock<Arc<dyn crate::api::ClusterView>>,
    /// The drives' states as [`ObjectLayer::stats`] last asked them, and when: a scrape of
    /// `/metrics` must not cost a `disk_info` on every drive of every node each time.
    drive_states: tokio::sync::Mutex<Option<(std::time::Instant, Vec<DriveState>)>>,
    /// Heals of replaced local drives started by [`Self::resume_drive_heals`].
    drive_heals: std::sync::Mutex<Vec<Arc<crate::drive_heal::DriveHeal>>>,
}

/// How long the lifecycle worker's probe of a drive (is it online?) may take.
const SHARE_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long one round of `disk_info` calls serves [`ObjectLayer::stats`].
pub const DRIVE_STATES_TTL: std::time::Duration = std::time::Duration::from_secs(2);

impl std::fmt::Debug for ErasureServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErasureServer")
            .field("deployment_id", &self.deployment_id)
            .field("sets", &self.sets)
            .finish()
    }
}

impl ErasureServer {
    /// Opens the local drives at `paths` (1..=16) as one erasure set, formatting them on first
    /// start. Drives keep the position they were formatted with, whatever order they are given
    /// in; a fresh (replaced) drive takes the position of the missing one.
    pub async fn open_local(paths: Vec<PathBuf>, cfg: ObjectConfig) -> Result<Arc<ErasureServer>> {
        let (deployment_id, drives) = Self::format_local_with(paths, cfg.orphan_sweep).await?;
        let local: Vec<(usize, usize, PathBuf)> = drives
            .iter()
            .enumerate()
            .map(|(p, d)| (0, p, d.root().to_path_buf()))
            .collect();
        let drives = drives
            .into_iter()
            .map(|d| Arc::new(d) as Arc<dyn Drive>)
            .collect();
        let server = Self::open(deployment_id, drives, cfg)?;
        server.resume_drive_heals(&local);
        Ok(server)
    }

    /// Starts (or resumes from its checkpoint) the background heal of every local drive that
    /// carries a `healing.json`: those formatted into the slot of a replaced drive. `local`
    /// names each local drive as `(set, position, root directory)`. Needs the runtime's workers.
    ///
    /// Then watches those drives every [`ObjectConfig::drive_check_interval`]: one replaced
    /// while the server runs is formatted into its slot and healed the same way
    /// ([`crate::drive_watch`]).
    pub fn resume_drive_heals(self: &Arc<Self>, local: &[(usize, usize, PathBuf)]) {
        let Some(first) = self.sets.first() else {
            return;
        };
        if !first.cfg.runtime.workers() {
            return;
        }
        for (s, p, root) in local {
            self.start_drive_heal(*s, *p, root);
        }
        if let Some(every) = first.cfg.drive_check_interval.filter(|d| !d.is_zero()) {
            crate::drive_watch::spawn(self, local, every);
        }
    }

    /// Starts (or resumes) the heal of the local drive at `root`, `(set, position)`, if it
    /// carries a checkpoint; it takes the place of an earlier heal of the same drive in
    /// [`Self::drive_heals`].
    pub(crate) fn start_drive_heal(&self, set: usize, position: usize, root: &Path) {
        let Some(es) = self.sets.get(set) else {
            return;
        };
        if let Some(h) = crate::drive_heal::resume(es, root.to_path_buf(), set, position) {
            let mut heals = self.drive_heals.lock().unwrap_or_else(|p| p.into_inner());
            heals.retain(|old| old.root() != root);
            heals.push(h);
        }
    }

    /// Whether a heal of the local drive at `root` is running.
    pub(crate) fn drive_heal_running(&self, root: &Path) -> bool {
        self.drive_heals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|h| h.root() == root && h.running())
    }

    /// The erasure sets, in order.
    pub(crate) fn sets(&self) -> &[Arc<ErasureSet>] {
        &self.sets
    }

    /// The deployment's id (every drive's `format.json` names it).
    pub(crate) fn deployment_id(&self) -> Uuid {
        self.deployment_id
    }

    /// The heals of replaced drives this node runs (or ran since it started), with their
    /// checkpoints' counters.
    pub fn drive_heals(&self) -> Vec<crate::drive_heal::DriveHealStatus> {
        self.drive_heals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|h| h.status())
            .collect()
    }

    /// Opens and formats (on first start) the local drives at `paths` (1..=16) without serving
    /// them: returns the deployment id and the drives in set order, ready for [`Self::open`].
    /// Tests use it to wrap the drives (e.g. in a fault injector) before the set sees them.
    pub async fn format_local(paths: Vec<PathBuf>) -> Result<(Uuid, Vec<LocalDrive>)> {
        Self::format_local_with(paths, quarry_disk::SweepSchedule::from_env()).await
    }

    /// [`Self::format_local`], each drive's orphan sweep on `sweep`.
    pub async fn format_local_with(
        paths: Vec<PathBuf>,
        sweep: quarry_disk::SweepSchedule,
    ) -> Result<(Uuid, Vec<LocalDrive>)> {
        if paths.is_empty() || paths.len() > 16 {
            return Err(Error::Internal(format!(
                "a single node takes 1 to 16 drives, not {}",
                paths.len()
            )));
        }
        let mut drives = Vec::with_capacity(paths.len());
        for p in &paths {
            let d = LocalDrive::open_with_sweep(p.clone(), sweep)
                .await
                .map_err(|e| Error::Internal(format!("cannot open drive {}: {e}", p.display())))?;
            drives.push(d);
        }
        let mut formats = Vec::with_capacity(drives.len());
        for (d, p) in drives.iter().zip(&paths) {
            let f = d
                .read_format()
                .await
                .map_err(|e| Error::Internal(format!("drive {}: {e}", p.display())))?;
            formats.push(f);
        }
        let (deployment_id, positions) = Self::format_drives(&drives, &paths, &formats).await?;
        let mut slots: Vec<Option<LocalDrive>> = (0..drives.len()).map(|_| None).collect();
        for (d, pos) in drives.into_iter().zip(positions) {
            slots[pos] = Some(d);
        }
        let drives = slots
            .into_iter()
            .map(|d| d.ok_or_else(|| Error::Internal("drive positions are inconsistent".into())))
            .collect::<Result<_>>()?;
        Ok((deployment_id, drives))
    }

    /// Serves one erasure set over `drives`, given in set order and already formatted for
    /// `deployment_id` (see [`Self::format_local`]), and starts the heal worker and the upload
    /// cleaner. Where a drive is (local, remote, wrapped in a test double) does not matter here.
    pub fn open(
        deployment_id: Uuid,
        drives: Vec<Arc<dyn Drive>>,
        cfg: ObjectConfig,
    ) -> Result<Arc<ErasureServer>> {
        Self::open_sets(deployment_id, vec![(drives, None)], cfg)
    }

    /// Serves several erasure sets (a cluster's): each with its drives in set order and its
    /// per-object locker (`None`: this process's own lock table, right when no other process
    /// writes to the set). Objects go to a set by the keyed placement hash.
    pub fn open_sets(
        deployment_id: Uuid,
        sets: Vec<SetSpec>,
        cfg: ObjectConfig,
    ) -> Result<Arc<ErasureServer>> {
        Self::open_sets_with_buffers(deployment_id, sets, cfg, crate::set::default_buffers())
    }

    /// Like [`Self::open_sets`], with GET stripes and PUT chunks in `buffers` (a cluster node's
    /// data-plane pool, registered with the RDMA device when verbs is on).
    pub fn open_sets_with_buffers(
        deployment_id: Uuid,
        sets: Vec<SetSpec>,
        cfg: ObjectConfig,
        buffers: quarry_buf::BufPool,
    ) -> Result<Arc<ErasureServer>> {
        if sets.is_empty() {
            return Err(Error::Internal("no erasure sets".into()));
        }
        let mut out = Vec::with_capacity(sets.len());
        for (drives, locker) in sets {
            let (heal_tx, heal_rx) = mpsc::channel(HEAL_QUEUE);
            let mut set = ErasureSet::new(drives, cfg.clone(), deployment_id, heal_tx)?
                .with_buffers(buffers.clone());
            if let Some(l) = locker {
                set = set.with_locker(l);
            }
            let set = Arc::new(set);
            let worker = HealWorker::new(&set, heal_rx);
            if cfg.runtime.workers() {
                spawn_heal_worker(&set, worker);
                spawn_upload_cleaner(&set);
            } else {
                *set.heal_worker.try_lock().expect("a new set's") = Some(worker);
            }
            out.push(set);
        }
        let sets = out;
        let scan = cfg
            .scan_interval
            .filter(|i| !i.is_zero() && cfg.runtime.workers())
            .map(|interval| {
                let counters = Arc::new(ScanCounters::default());
                let mine: Vec<Arc<ErasureSet>> = sets
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| match cfg.scan_share {
                        Some((me, n)) if n > 0 => i % n == me % n,
                        _ => true,
                    })
                    .map(|(_, s)| s.clone())
                    .collect();
                spawn_scanner(
                    &mine,
                    counters.clone(),
                    interval,
                    cfg.scan_rate,
                    cfg.deep_scan_every,
                );
                counters
            });
        let first = &sets[0];
        info!(
            %deployment_id,
            sets = sets.len(),
            drives_per_set = first.drive_count(),
            data = first.data(),
            parity = first.parity(),
            "object layer ready"
        );
        Ok(Arc::new(ErasureServer {
            sets,
            deployment_id,
            scan,
            heal_jobs: Default::default(),
            cluster: std::sync::OnceLock::new(),
            drive_states: tokio::sync::Mutex::new(None),
            drive_heals: Default::default(),
        }))
    }

    /// Formats fresh drives and checks the others; returns the deployment id and each given
    /// drive's position in the set.
    async fn format_drives(
        drives: &[LocalDrive],
        paths: &[PathBuf],
        formats: &[Option<FormatV1>],
    ) -> Result<(Uuid, Vec<usize>)> {
        let n = drives.len();
        let reference = formats.iter().flatten().next().cloned();
        let Some(reference) = reference else {
            // A new deployment: every drive gets an id, positions follow the given order.
            let deployment_id = Uuid::new_v4();
            let ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
            for (i, d) in drives.iter().enumerate() {
                let f = FormatV1::new(deployment_id, ids[i], vec![ids.clone()]);
                d.write_format(&f).await.map_err(|e| {
                    Error::Internal(format!("cannot format drive {}: {e}", paths[i].display()))
                })?;
            }
            info!(%deployment_id, drives = n, "formatted new deployment");
            return Ok((deployment_id, (0..n).collect()));
        };
        if reference.sets.len() != 1 || reference.sets[0].len() != n {
            return Err(Error::Internal(format!(
                "the drives were formatted as {} set(s) of {} drives, but {n} drives were given",
                reference.sets.len(),
                reference.sets.first().map_or(0, |s| s.len())
            )));
        }
        let layout = &reference.sets[0];
        let mut positions: Vec<Option<usize>> = vec![None; n];
        for (i, f) in formats.iter().enumerate() {
            if let Some(f) = f {
                if !f.same_deployment(&reference) {
                    return Err(Error::Internal(format!(
                        "drive {} belongs to deployment {}, the others to {}: refusing to mix them",
                        paths[i].display(),
                        f.deployment_id,
                        reference.deployment_id
                    )));
                }
                let pos = layout
                    .iter()
                    .position(|id| *id == f.drive_id)
                    .ok_or_else(|| {
                        Error::Internal(format!(
                            "drive {} is not in its own layout",
                            paths[i].display()
                        ))
                    })?;
                if positions.contains(&Some(pos)) {
                    return Err(Error::Internal(format!(
                        "drive {} is a copy of another given drive (same drive id {})",
                        paths[i].display(),
                        f.drive_id
                    )));
                }
                positions[i] = Some(pos);
            }
        }
        // Fresh drives replace the missing positions, in order.
        let free: Vec<usize> = (0..n).filter(|p| !positions.contains(&Some(*p))).collect();
        let mut free = free.into_iter();
        for i in 0..n {
            if positions[i].is_none() {
                let pos = free
                    .next()
                    .ok_or_else(|| Error::Internal("no free drive position".into()))?;
                let f = FormatV1::new(reference.deployment_id, layout[pos], reference.sets.clone());
                // The checkpoint first: a drive is never formatted without it.
                crate::drive_heal::mark_fresh_drive(&paths[i], 0, pos)?;
                drives[i].write_format(&f).await.map_err(|e| {
                    Error::Internal(format!("cannot format drive {}: {e}", paths[i].display()))
                })?;
                warn!(drive = %paths[i].display(), position = pos, "formatted a fresh drive into the deployment; it is healed in the background");
                positions[i] = Some(pos);
            }
        }
        Ok((
            reference.deployment_id,
            positions.into_iter().map(|p| p.unwrap_or(0)).collect(),
        ))
    }

    pub fn layout(&self) -> Layout {
        let s = &self.sets[0];
        Layout {
            deployment_id: self.deployment_id,
            drives: self.sets.iter().map(|s| s.drive_count()).sum(),
            sets: self.sets.len(),
            data: s.data(),
            parity: s.parity(),
        }
    }

    /// Records the cluster this server is a node of, for [`ObjectLayer::info`]. Only the first
    /// call counts.
    pub fn set_cluster_view(&self, view: Arc<dyn crate::api::ClusterView>) {
        let _ = self.cluster.set(view);
    }

    pub async fn readiness(&self) -> Readiness {
        let mut r = Readiness {
            drives_online: 0,
            drives_total: 0,
            read_quorum: true,
            write_quorum: true,
        };
        for set in &self.sets {
            let answers =
                crate::quorum::on_all(&set.drives, |d| async move { d.disk_info().await }).await;
            let online = crate::quorum::count_ok(&answers);
            r.drives_online += online;
            r.drives_total += set.drive_count();
            r.read_quorum &= online >= set.set_read_quorum();
            r.write_quorum &= online >= set.set_write_quorum();
        }
        r
    }

    /// Heals every object of `bucket` (or of every bucket) whose key starts with `prefix`, now
    /// and at full speed, and says what was done and what could not be.
    pub async fn heal(&self, bucket: Option<&str>, prefix: &str) -> Result<HealReport> {
        if let Some(b) = bucket {
            check_bucket_name(b).map_err(|_| Error::BucketNotFound)?;
        }
        heal_sets(&self.sets, bucket, prefix).await
    }

    /// Heals one object now and says what was done.
    /// Does now what the background workers would do: works through each set's heal queue, then
    /// tries each heal waiting for a retry once ([`crate::runtime::Runtime::workers`]: for a
    /// runtime that keeps the workers off, so that a test runs background heals at points of its
    /// choosing). With the workers on, they own the queues and this does nothing.
    pub async fn run_background(&self) {
        for set in &self.sets {
            let mut worker = set.heal_worker.lock().await;
            if let Some(w) = worker.as_mut() {
                w.drain(set).await;
            }
        }
    }

    pub async fn heal_object(&self, bucket: &str, key: &str) -> Result<crate::api::HealResult> {
        self.object_set(bucket, key)?.heal_object(bucket, key).await
    }

    /// The set of `bucket/key`, once both names are known to be valid: `check_key`'s error for a
    /// bad key, `BucketNotFound` for a name that cannot be a bucket ([`named_bucket`]).
    fn object_set(&self, bucket: &str, key: &str) -> Result<&Arc<ErasureSet>> {
        check_key(key)?;
        named_bucket(bucket)?;
        Ok(self.set_of(bucket, key))
    }

    fn set_of(&self, bucket: &str, key: &str) -> &Arc<ErasureSet> {
        let n = self.sets.len();
        if n == 1 {
            return &self.sets[0];
        }
        &self.sets[(self.sets[0].placement_hash(bucket, key) % n as u64) as usize]
    }

    fn only_set(&self) -> &Arc<ErasureSet> {
        &self.sets[0]
    }

    /// Erasure set `share` (a lifecycle share is a set).
    fn share_set(&self, share: usize) -> Result<&Arc<ErasureSet>> {
        self.sets
            .get(share)
            .ok_or_else(|| Error::Internal(format!("no erasure set {share}")))
    }

    /// The bucket's versioning state, from its `versioning` configuration (on the first set,
    /// as every bucket configuration), as a write applies it: from the set's configuration
    /// cache, so a change made through this node applies to its next write, one made through
    /// another node within [`crate::CONFIG_CACHE_TTL`].
    async fn versioning(&self, bucket: &str) -> Result<VersioningState> {
        let stored = self
            .only_set()
            .read_bucket_config_cached(bucket, VERSIONING_CONFIG)
            .await?;
        versioning_state(stored)
    }

    /// The version id a new write gets in a bucket: a fresh one when versioning is enabled,
    /// else the null version.
    async fn new_version_id(&self, bucket: &str) -> Result<Option<Uuid>> {
        Ok(match self.versioning(bucket).await? {
            VersioningState::Enabled => Some(self.only_set().new_id()),
            VersioningState::Unversioned | VersioningState::Suspended => None,
        })
    }
}

/// The bucket configuration blob holding its versioning state.
const VERSIONING_CONFIG: &str = "versioning";

fn versioning_state(stored: Option<Bytes>) -> Result<VersioningState> {
    match stored {
        None => Ok(VersioningState::Unversioned),
        Some(b) => VersioningState::from_stored(&b),
    }
}

/// Removes stale multipart uploads at start-up and then every `multipart_cleanup_interval`.
/// Holds the set weakly: the task ends when the server is dropped.
fn spawn_upload_cleaner(set: &Arc<ErasureSet>) {
    let weak = Arc::downgrade(set);
    let expiry = set.cfg.multipart_expiry;
    let every = set
        .cfg
        .multipart_cleanup_interval
        .max(std::time::Duration::from_millis(100));
    set.cfg.runtime.spawn(Box::pin(async move {
        loop {
            let Some(set) = weak.upgrade() else { return };
            set.remove_stale_uploads(expiry).await;
            drop(set);
            tokio::time::sleep(every).await;
        }
    }));
}

#[async_trait]
impl ObjectLayer for ErasureServer {
    async fn stats(&self) -> LayerStats {
        let mut stats = LayerStats {
            list_cache: quarry_disk::list_cache_figures(),
            retired: quarry_disk::retired_figures(),
            ..LayerStats::default()
        };
        {
            // Concurrent callers wait for one round of calls rather than each making their own.
            let mut cached = self.drive_states.lock().await;
            match &*cached {
                Some((at, states)) if at.elapsed() < DRIVE_STATES_TTL => {
                    stats.drives = states.clone();
                }
                _ => {
                    for set in &self.sets {
                        let answers =
                            crate::quorum::on_all(
                                &set.drives,
                                |d| async move { d.disk_info().await },
                            )
                            .await;
                        for (d, a) in set.drives.iter().zip(&answers) {
                            stats.drives.push(DriveState {
                                endpoint: d.endpoint().to_string(),
                                online: a.is_ok(),
                            });
                        }
                    }
                    *cached = Some((std::time::Instant::now(), stats.drives.clone()));
                }
            }
        }
        for (i, set) in self.sets.iter().enumerate() {
            stats.heal_queue_len += set.heal_queue_len() as u64;
            stats.heal_retry_len += set.heal_retry_len() as u64;
            set.counters.add_to(&mut stats);
            let room = crate::stats::HEAL_QUEUE_SHOWN.saturating_sub(stats.heal_queue.len());
            stats.heal_queue.extend(set.heal_queue_entries(i, room));
        }
        if let Some(scan) = &self.scan {
            stats.scan = scan.snapshot();
        }
        stats.heal_jobs = self.heal_jobs.stats();
        stats.drive_heals = self.drive_heals();
        if let Some(view) = self.cluster.get() {
            let plane = view.data_plane();
            let d = plane.stats;
            stats.data_planes.push(crate::stats::DataPlaneFigures {
                backend: plane.backend.to_string(),
                transfers: d.transfers,
                bytes_in: d.bytes_in,
                bytes_out: d.bytes_out,
                errors: d.errors,
                timeouts: d.timeouts,
            });
            stats.data_peers = plane.peers;
            stats.holder = plane.holder;
            stats.pools = plane.pools;
        } else if let Some(set) = self.sets.first() {
            stats.pools = vec![("data", set.buffers.stats())];
        }
        stats
    }

    async fn start_heal_job(
        &self,
        bucket: Option<&str>,
        prefix: &str,
    ) -> Result<crate::heal_job::HealJobStatus> {
        if let Some(b) = bucket {
            check_bucket_name(b).map_err(|_| Error::BucketNotFound)?;
            self.only_set().require_bucket(b).await?;
        }
        crate::heal_job::start(&self.heal_jobs, &self.sets, bucket, prefix)
    }

    async fn heal_job(&self, id: &str) -> Result<Option<crate::heal_job::HealJobStatus>> {
        Ok(self.heal_jobs.get(id))
    }

    async fn heal_jobs(&self) -> Result<Vec<crate::heal_job::HealJobStatus>> {
        Ok(self.heal_jobs.list())
    }

    async fn reset_data_plane(&self, peer: Option<&str>) -> Result<usize> {
        match self.cluster.get() {
            Some(view) => Ok(view.reset_data_plane(peer)),
            None => Err(Error::NotImplemented(
                "data-plane reset (a single node has no data plane)",
            )),
        }
    }

    async fn heal(&self, bucket: Option<&str>, prefix: &str) -> Result<HealReport> {
        ErasureServer::heal(self, bucket, prefix).await
    }

    async fn info(&self) -> Result<crate::api::ClusterInfo> {
        Ok(crate::info::gather(
            &self.sets,
            self.deployment_id,
            self.cluster.get().map(|c| c.as_ref()),
        )
        .await)
    }

    async fn make_bucket(&self, bucket: &str) -> Result<()> {
        check_bucket_name(bucket)?;
        for s in &self.sets {
            s.make_bucket(bucket).await?;
        }
        Ok(())
    }

    async fn bucket_info(&self, bucket: &str) -> Result<BucketInfo> {
        named_bucket(bucket)?;
        self.only_set().bucket_info(bucket).await
    }

    async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        self.only_set().list_buckets().await
    }

    async fn delete_bucket(&self, bucket: &str) -> Result<()> {
        named_bucket(bucket)?;
        // Any version, a delete marker or an old version too, keeps a bucket (as in S3).
        let page = self
            .list_object_versions(
                bucket,
                ListVersionsOptions {
                    max_keys: 1,
                    ..Default::default()
                },
            )
            .await?;
        if !page.versions.is_empty() || !page.common_prefixes.is_empty() {
            return Err(Error::BucketNotEmpty);
        }
        for s in &self.sets {
            s.delete_bucket(bucket).await?;
        }
        // Unfinished uploads go with the bucket (a bucket made again later starts empty).
        for s in &self.sets {
            s.remove_bucket_uploads(bucket).await;
        }
        Ok(())
    }

    async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: ByteStream,
        opts: PutOptions,
    ) -> Result<ObjectInfo> {
        let set = self.object_set(bucket, key)?;
        let version_id = self.new_version_id(bucket).await?;
        set.put_object(bucket, key, body, opts, version_id).await
    }

    async fn get_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<HttpRange>,
    ) -> Result<GetObjectReader> {
        self.object_set(bucket, key)?
            .get_object(bucket, key, range)
            .await
    }

    async fn object_info(&self, bucket: &str, key: &str) -> Result<ObjectInfo> {
        self.object_set(bucket, key)?.object_info(bucket, key).await
    }

    async fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        self.delete_object_version(bucket, key, None)
            .await
            .map(|_| ())
    }

    async fn get_bucket_versioning_cached(&self, bucket: &str) -> Result<VersioningState> {
        named_bucket(bucket)?;
        self.versioning(bucket).await
    }

    async fn get_bucket_versioning(&self, bucket: &str) -> Result<VersioningState> {
        named_bucket(bucket)?;
        versioning_state(
            self.only_set()
                .read_bucket_config(bucket, VERSIONING_CONFIG)
                .await?,
        )
    }

    async fn put_bucket_versioning(&self, bucket: &str, state: VersioningState) -> Result<()> {
        named_bucket(bucket)?;
        if state == VersioningState::Unversioned {
            return Err(Error::Internal(
                "a bucket cannot return to unversioned; suspend versioning instead".into(),
            ));
        }
        self.only_set()
            .write_bucket_config(bucket, VERSIONING_CONFIG, Bytes::from(state.as_str()))
            .await
    }

    async fn get_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        range: Option<HttpRange>,
    ) -> Result<GetObjectReader> {
        self.object_set(bucket, key)?
            .get_object_version(bucket, key, version, range)
            .await
    }

    async fn get_object_decrypted(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        range: Option<HttpRange>,
        opener: KeyOpener,
    ) -> Result<GetObjectReader> {
        self.object_set(bucket, key)?
            .get_object_decrypted(bucket, key, version, range, Some(&opener))
            .await
    }

    async fn object_version_info(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<ObjectInfo> {
        self.object_set(bucket, key)?
            .object_version_info(bucket, key, version)
            .await
    }

    async fn delete_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<DeleteResult> {
        self.delete_object_version_with(bucket, key, version, DeleteOptions::default())
            .await
    }

    async fn delete_object_version_with(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        opts: DeleteOptions,
    ) -> Result<DeleteResult> {
        let set = self.object_set(bucket, key)?;
        if let Some(v) = version {
            return set.delete_version(bucket, key, v, &opts).await;
        }
        let precondition = opts.precondition.as_ref();
        match self.versioning(bucket).await? {
            VersioningState::Unversioned => set
                .delete_object_if(bucket, key, precondition)
                .await
                .map(|()| DeleteResult::default()),
            VersioningState::Enabled => {
                set.add_delete_marker(bucket, key, Some(set.new_id()), precondition)
                    .await
            }
            // A null delete marker replaces the null version; other versions stay.
            VersioningState::Suspended => {
                set.add_delete_marker(bucket, key, None, precondition).await
            }
        }
    }

    async fn update_object_headers(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        update: HeadersUpdate,
    ) -> Result<ObjectInfo> {
        self.object_set(bucket, key)?
            .update_headers(bucket, key, version, &update)
            .await
    }

    fn drive_heals(&self) -> Vec<crate::drive_heal::DriveHealStatus> {
        ErasureServer::drive_heals(self)
    }

    async fn update_upload_headers(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        update: UploadHeadersUpdate,
    ) -> Result<()> {
        self.object_set(bucket, key)?
            .update_upload_headers(bucket, key, upload_id, &update)
            .await
    }

    async fn list_object_versions(
        &self,
        bucket: &str,
        opts: ListVersionsOptions,
    ) -> Result<ListVersionsResult> {
        named_bucket(bucket)?;
        if self.sets.len() == 1 {
            return self.only_set().list_object_versions(bucket, opts).await;
        }
        let max = opts.max_keys;
        let pages = futures::future::join_all(
            self.sets
                .iter()
                .map(|s| s.list_object_versions(bucket, opts.clone())),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
        Ok(crate::versions::merge_versions_pages(pages, max))
    }

    async fn lifecycle_shares(&self) -> Vec<usize> {
        let Some(view) = self.cluster.get() else {
            return (0..self.sets.len()).collect();
        };
        let topology = view.topology();
        let local = view.local_node();
        let mut out = Vec::new();
        for (i, set) in self.sets.iter().enumerate() {
            let Some(members) = topology.sets.get(i) else {
                continue;
            };
            // The first drive of the set that answers decides; its node runs the set's rules.
            for (d, &index) in set.drives.iter().zip(members) {
                let online = matches!(
                    tokio::time::timeout(SHARE_PROBE_TIMEOUT, d.disk_info()).await,
                    Ok(Ok(_))
                );
                if online {
                    if topology.drives.get(index).map(|e| e.node) == Some(local) {
                        out.push(i);
                    }
                    break;
                }
            }
        }
        out
    }

    async fn list_share_versions(
        &self,
        share: usize,
        bucket: &str,
        opts: ListVersionsOptions,
    ) -> Result<ListVersionsResult> {
        named_bucket(bucket)?;
        self.share_set(share)?
            .list_object_versions(bucket, opts)
            .await
    }

    async fn list_share_uploads(
        &self,
        share: usize,
        bucket: &str,
        opts: ListUploadsOptions,
    ) -> Result<ListUploadsResult> {
        named_bucket(bucket)?;
        self.share_set(share)?
            .list_multipart_uploads(bucket, opts)
            .await
    }

    async fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        opts: CopyOptions,
    ) -> Result<ObjectInfo> {
        check_key(src_key)?;
        check_key(dst_key)?;
        named_bucket(src_bucket)?;
        named_bucket(dst_bucket)?;
        // In place only in a bucket without versioning: a versioned copy onto itself is a new
        // version (with its own data), and a copy of an older version is a new latest.
        let onto_itself = src_bucket == dst_bucket
            && src_key == dst_key
            && opts.source_version_id.is_none()
            && self.versioning(dst_bucket).await? == VersioningState::Unversioned;
        if let (true, Some(metadata)) = (onto_itself, &opts.metadata) {
            let set = self.set_of(dst_bucket, dst_key);
            let replaced = set
                .replace_metadata(dst_bucket, dst_key, &opts, metadata)
                .await?;
            if let Some(info) = replaced {
                return Ok(info);
            }
        }
        crate::copy::stream_copy(self, src_bucket, src_key, dst_bucket, dst_key, opts).await
    }

    async fn list_objects(&self, bucket: &str, opts: ListOptions) -> Result<ListResult> {
        named_bucket(bucket)?;
        if self.sets.len() == 1 {
            return self.only_set().list_objects(bucket, opts).await;
        }
        crate::merge::list_across(self.sets.len(), &opts, |i, o| {
            self.sets[i].list_objects(bucket, o)
        })
        .await
    }

    async fn new_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        opts: NewUploadOptions,
    ) -> Result<UploadInfo> {
        self.object_set(bucket, key)?
            .new_multipart_upload(bucket, key, opts)
            .await
    }

    async fn put_object_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        body: ByteStream,
        opts: PartOptions,
    ) -> Result<UploadedPart> {
        self.object_set(bucket, key)?
            .put_object_part(bucket, key, upload_id, part_number, body, opts)
            .await
    }

    async fn list_object_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        opts: ListPartsOptions,
    ) -> Result<ListPartsResult> {
        self.object_set(bucket, key)?
            .list_object_parts(bucket, key, upload_id, opts)
            .await
    }

    async fn complete_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletePart>,
        opts: CompleteOptions,
    ) -> Result<ObjectInfo> {
        let set = self.object_set(bucket, key)?;
        let version_id = self.new_version_id(bucket).await?;
        set.complete_multipart_upload(bucket, key, upload_id, parts, opts, version_id)
            .await
    }

    async fn abort_multipart_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        self.object_set(bucket, key)?
            .abort_multipart_upload(bucket, key, upload_id)
            .await
    }

    async fn list_multipart_uploads(
        &self,
        bucket: &str,
        opts: ListUploadsOptions,
    ) -> Result<ListUploadsResult> {
        named_bucket(bucket)?;
        if self.sets.len() == 1 {
            return self.only_set().list_multipart_uploads(bucket, opts).await;
        }
        let max = opts.max_uploads;
        let pages = futures::future::join_all(
            self.sets
                .iter()
                .map(|s| s.list_multipart_uploads(bucket, opts.clone())),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
        Ok(crate::merge::merge_upload_pages(pages, max))
    }

    async fn get_object_part(
        &self,
        bucket: &str,
        key: &str,
        part_number: u32,
    ) -> Result<GetObjectReader> {
        self.object_set(bucket, key)?
            .get_object_part(bucket, key, part_number, None)
            .await
    }

    async fn get_object_part_decrypted(
        &self,
        bucket: &str,
        key: &str,
        part_number: u32,
        opener: KeyOpener,
    ) -> Result<GetObjectReader> {
        self.object_set(bucket, key)?
            .get_object_part(bucket, key, part_number, Some(&opener))
            .await
    }

    async fn object_parts(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<(ObjectInfo, Vec<ObjectPart>)> {
        self.object_set(bucket, key)?
            .object_parts(bucket, key, version)
            .await
    }

    async fn get_bucket_config(&self, bucket: &str, name: &str) -> Result<Option<Bytes>> {
        check_bucket_name(bucket).map_err(|_| Error::BucketNotFound)?;
        // Bucket configuration lives on the first set (every set has every bucket).
        self.only_set().read_bucket_config(bucket, name).await
    }

    async fn get_bucket_config_cached(&self, bucket: &str, name: &str) -> Result<Option<Bytes>> {
        check_bucket_name(bucket).map_err(|_| Error::BucketNotFound)?;
        self.only_set()
            .read_bucket_config_cached(bucket, name)
            .await
    }

    async fn put_bucket_config(&self, bucket: &str, name: &str, data: Bytes) -> Result<()> {
        check_bucket_name(bucket).map_err(|_| Error::BucketNotFound)?;
        self.only_set()
            .write_bucket_config(bucket, name, data)
            .await
    }

    async fn delete_bucket_config(&self, bucket: &str, name: &str) -> Result<()> {
        check_bucket_name(bucket).map_err(|_| Error::BucketNotFound)?;
        self.only_set().delete_bucket_config(bucket, name).await
    }

    async fn get_system_config(&self, name: &str) -> Result<Option<Bytes>> {
        self.only_set()
            .read_bucket_config(quarry_disk::SYSTEM_CONFIG, name)
            .await
    }

    async fn put_system_config(&self, name: &str, data: Bytes) -> Result<()> {
        self.only_set()
            .write_bucket_config(quarry_disk::SYSTEM_CONFIG, name, data)
            .await
    }
}
