//! One erasure set: a fixed list of drives that together hold every object hashed to the set.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use quarry_buf::{BufPool, BufPoolConfig, PooledBuf, DEFAULT_BUF_SIZE};
use quarry_disk::{Drive, DriveError, ObjectMeta};
use quarry_erasure::Erasure;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::api::{BucketInfo, ObjectInfo};
use crate::config::ObjectConfig;
use crate::error::{Error, Result};
use crate::nslock::{Locker, NsLock};
use crate::quorum::{count_ok, on_all, pick_meta, read_quorum, write_quorum, MetaQuorum};

/// An object to heal: bucket and key.
pub type HealRequest = (String, String);

pub struct ErasureSet {
    pub(crate) drives: Vec<Arc<dyn Drive>>,
    pub(crate) cfg: ObjectConfig,
    /// Key of the placement hash: derived from the deployment id, identical on every node.
    hash_key: [u8; 32],
    /// Per-object locks: in-process by default, granted by a quorum of the set's nodes in a
    /// cluster (see [`ErasureSet::with_locker`]).
    pub(crate) locks: Arc<dyn Locker>,
    heal_tx: mpsc::Sender<HealRequest>,
    /// Objects queued for heal and not yet taken: a burst of reads of one damaged object queues it once.
    heal_pending: Mutex<HashSet<HealRequest>>,
    /// The object the heal worker heals now.
    heal_now: Mutex<Option<HealRequest>>,
    /// Heals waiting for another attempt: worked by the heal worker, read by `heal/status`.
    pub(crate) heal_retry: Arc<Mutex<crate::heal_queue::RetryList>>,
    /// The heal queue, when no worker task took it (a runtime without workers): worked through
    /// by [`crate::ErasureServer::run_background`].
    pub(crate) heal_worker: tokio::sync::Mutex<Option<crate::heal_queue::HealWorker>>,
    /// Heal and GET-path counters, for the metrics.
    pub(crate) counters: crate::stats::SetCounters,
    /// Where GET stripes and PUT chunks live: the data plane's pool in a cluster (registered
    /// with the RDMA device when verbs is on), a plain pool otherwise.
    pub(crate) buffers: BufPool,
    /// Bucket configuration blobs read for the write path (see [`crate::config_cache`]).
    pub(crate) config_cache: crate::config_cache::ConfigCache,
    /// Positions of drives being healed after a replacement, with how far their heal's walk
    /// has come: GET takes no data from them for objects beyond it ([`Self::mask_healing`]).
    healing: std::sync::RwLock<BTreeMap<usize, crate::drive_heal::HealedUpTo>>,
}

/// The pool sets use when none is given: one per process, plain memory, resident only as used.
pub fn default_buffers() -> BufPool {
    static POOL: OnceLock<BufPool> = OnceLock::new();
    POOL.get_or_init(|| {
        BufPool::new(BufPoolConfig::new(DEFAULT_BUF_SIZE, DEFAULT_BUFFERS))
            .expect("the default buffer pool's shape is valid")
    })
    .clone()
}

/// Buffers of the default pool (of [`DEFAULT_BUF_SIZE`] bytes: a block's k framed chunks fit one).
const DEFAULT_BUFFERS: usize = 256;

impl std::fmt::Debug for ErasureSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErasureSet")
            .field(
                "drives",
                &self.drives.iter().map(|d| d.endpoint()).collect::<Vec<_>>(),
            )
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// The system clock, in nanoseconds since the epoch (for figures about the layer itself; the
/// times of objects come from the set's runtime, [`ErasureSet::now_ns`]).
pub(crate) fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl ErasureSet {
    /// The time of the set's runtime (modification, initiation and update times).
    pub(crate) fn now_ns(&self) -> i64 {
        self.cfg.runtime.now_ns()
    }

    /// A fresh id from the set's runtime (tmp dirs, data dirs, upload ids).
    pub(crate) fn new_id(&self) -> uuid::Uuid {
        self.cfg.runtime.new_id()
    }

    /// A set over `drives` (in set order). Heal requests go to `heal_tx`.
    pub fn new(
        drives: Vec<Arc<dyn Drive>>,
        cfg: ObjectConfig,
        deployment_id: uuid::Uuid,
        heal_tx: mpsc::Sender<HealRequest>,
    ) -> Result<Self> {
        let n = drives.len();
        if n == 0 || n > 16 {
            return Err(Error::Internal(format!(
                "an erasure set has 1 to 16 drives, not {n}"
            )));
        }
        let heal_retry = Arc::new(Mutex::new(crate::heal_queue::RetryList::new(
            cfg.heal_retry_min,
            cfg.heal_retry_max,
            cfg.heal_retry_limit,
        )));
        let set = ErasureSet {
            drives,
            cfg,
            hash_key: blake3::derive_key("quarry placement v1", deployment_id.as_bytes()),
            locks: Arc::new(NsLock::default()) as Arc<dyn Locker>,
            heal_tx,
            heal_pending: Mutex::new(HashSet::new()),
            heal_now: Mutex::new(None),
            heal_retry,
            heal_worker: tokio::sync::Mutex::new(None),
            counters: Default::default(),
            buffers: default_buffers(),
            config_cache: Default::default(),
            healing: Default::default(),
        };
        set.new_erasure()?; // validates the parity setting against the set size
        Ok(set)
    }

    /// The same set, taking its per-object locks from `locker` (e.g. a
    /// [`crate::dsync::DistLocker`] over the set's nodes) instead of the in-process table.
    pub fn with_locker(mut self, locker: Arc<dyn Locker>) -> Self {
        self.locks = locker;
        self
    }

    /// Records how far the heal of the drive at `position` has come (`None`: it is not healing).
    pub(crate) fn set_healing(
        &self,
        position: usize,
        up_to: Option<crate::drive_heal::HealedUpTo>,
    ) {
        let mut h = self.healing.write().unwrap_or_else(|p| p.into_inner());
        match up_to {
            Some(u) => {
                h.insert(position, u);
            }
            None => {
                h.remove(&position);
            }
        }
    }

    /// Forgets the copies of `bucket/key` on drives whose heal has not reached it yet: a read
    /// treats them as missing (and rebuilds from the others) rather than trusting them.
    pub(crate) fn mask_healing(&self, bucket: &str, key: &str, metas: &mut [Option<ObjectMeta>]) {
        let h = self.healing.read().unwrap_or_else(|p| p.into_inner());
        for (&pos, up_to) in h.iter() {
            if !up_to.covers(bucket, key) {
                if let Some(m) = metas.get_mut(pos) {
                    *m = None;
                }
            }
        }
    }

    /// The same set, with its stripes and chunks in `pool`'s buffers.
    pub fn with_buffers(mut self, pool: BufPool) -> Self {
        self.buffers = pool;
        self
    }

    /// `count` pieces of `len` bytes, cut from one pooled buffer when they fit (the stripe a
    /// block's chunks land in; see [`crate::put::pieces_of`]).
    pub(crate) fn stripe(&self, count: usize, len: usize) -> Vec<PooledBuf> {
        crate::put::pieces_of(&self.buffers, count, len)
    }

    pub fn drive_count(&self) -> usize {
        self.drives.len()
    }

    pub fn parity(&self) -> usize {
        self.cfg
            .parity
            .unwrap_or_else(|| quarry_erasure::default_parity(self.drives.len()))
    }

    pub fn data(&self) -> usize {
        self.drives.len() - self.parity()
    }

    /// The code new objects are written with.
    pub(crate) fn new_erasure(&self) -> Result<Erasure> {
        let m = self.parity();
        let n = self.drives.len();
        if m >= n || (n > 1 && m > n / 2) {
            return Err(Error::Internal(format!(
                "parity {m} is not possible on a set of {n} drives (at most {})",
                n / 2
            )));
        }
        Erasure::new(n - m, m, self.cfg.block_size).map_err(|e| Error::Internal(e.to_string()))
    }

    /// The code new objects are written with, with another block size (encrypted objects:
    /// a block of sealed packages).
    pub(crate) fn new_erasure_with_block(&self, block_size: usize) -> Result<Erasure> {
        let e = self.new_erasure()?;
        Erasure::new(e.data_shards(), e.parity_shards(), block_size)
            .map_err(|e| Error::Internal(e.to_string()))
    }

    /// Read quorum for set-level answers (buckets, listing): that of new objects.
    pub(crate) fn set_read_quorum(&self) -> usize {
        let q = read_quorum(self.data(), self.parity());
        debug_assert!(
            q >= 1 && q <= self.drives.len(),
            "read quorum {q} of a set of {} drives",
            self.drives.len()
        );
        q
    }

    pub(crate) fn set_write_quorum(&self) -> usize {
        let q = write_quorum(self.data(), self.parity());
        // The property locks and commits rely on: two write quorums of a set share a drive.
        debug_assert!(
            2 * q > self.drives.len() && q <= self.drives.len(),
            "write quorum {q} of a set of {} drives",
            self.drives.len()
        );
        q
    }

    /// The 64-bit placement hash of an object, keyed by the deployment id.
    pub fn placement_hash(&self, bucket: &str, key: &str) -> u64 {
        let mut h = blake3::Hasher::new_keyed(&self.hash_key);
        h.update(bucket.as_bytes());
        h.update(b"/");
        h.update(key.as_bytes());
        let out = h.finalize();
        u64::from_le_bytes(out.as_bytes()[..8].try_into().expect("8 bytes"))
    }

    /// `distribution[i]` is the 1-based shard index drive i holds: a rotation by the key's hash, so
    /// data shards of different objects land on different drives.
    pub(crate) fn distribution(&self, bucket: &str, key: &str) -> Vec<u8> {
        let n = self.drives.len();
        let rot = (self.placement_hash(bucket, key) % n as u64) as usize;
        (0..n).map(|i| (((i + rot) % n) + 1) as u8).collect()
    }

    /// Queues an object for background healing (at most once while pending).
    pub(crate) fn queue_heal(&self, bucket: &str, key: &str) {
        let req = (bucket.to_string(), key.to_string());
        {
            let mut pending = self.heal_pending.lock().unwrap_or_else(|p| p.into_inner());
            if !pending.insert(req.clone()) {
                return;
            }
        }
        debug!(bucket, key, "queued for heal");
        if self.heal_tx.try_send(req.clone()).is_ok() {
            crate::stats::SetCounters::add(&self.counters.heal_queued, 1);
        } else {
            crate::stats::SetCounters::add(&self.counters.heal_dropped, 1);
            warn!(
                bucket,
                key, "heal queue full; the object will be healed on a later read"
            );
            self.heal_done(&req);
        }
    }

    /// Objects queued for heal and not yet taken by the worker.
    pub(crate) fn heal_queue_len(&self) -> usize {
        self.heal_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Records what the heal worker does now (`None` when it is idle).
    pub(crate) fn heal_now(&self, req: Option<&HealRequest>) {
        *self.heal_now.lock().unwrap_or_else(|p| p.into_inner()) = req.cloned();
    }

    /// Heals on the retry list now.
    pub(crate) fn heal_retry_len(&self) -> usize {
        self.heal_retry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Up to `limit` entries of this set's heal lists: the object being healed, a sample of the
    /// queued ones (in no particular order), then the retries by due time.
    pub(crate) fn heal_queue_entries(
        &self,
        set: usize,
        limit: usize,
    ) -> Vec<crate::stats::HealQueueEntry> {
        use crate::stats::{HealEntryState, HealQueueEntry};
        let entry = |(bucket, key): &HealRequest, state, attempts, due_in| HealQueueEntry {
            set,
            bucket: bucket.clone(),
            key: key.clone(),
            state,
            attempts,
            due_in,
        };
        let mut out = Vec::new();
        if let Some(r) = &*self.heal_now.lock().unwrap_or_else(|p| p.into_inner()) {
            out.push(entry(r, HealEntryState::Healing, 0, None));
        }
        let pending = self.heal_pending.lock().unwrap_or_else(|p| p.into_inner());
        let room = limit.saturating_sub(out.len());
        out.extend(
            pending
                .iter()
                .take(room)
                .map(|r| entry(r, HealEntryState::Queued, 0, None)),
        );
        drop(pending);
        let now = tokio::time::Instant::now();
        let retry = self.heal_retry.lock().unwrap_or_else(|p| p.into_inner());
        let room = limit.saturating_sub(out.len());
        out.extend(retry.first(room).map(|(r, attempts, due)| {
            entry(
                r,
                HealEntryState::Retry,
                attempts,
                Some(due.saturating_duration_since(now)),
            )
        }));
        out
    }

    pub(crate) fn heal_done(&self, req: &HealRequest) {
        self.heal_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(req);
    }

    // ---- buckets ----

    pub async fn make_bucket(&self, bucket: &str) -> Result<()> {
        let answers = on_all(&self.drives, |d| {
            let b = bucket.to_string();
            async move { d.make_volume(&b).await }
        })
        .await;
        // A bucket made again starts without the configuration of the one before.
        self.config_cache.invalidate(bucket);
        let exists = answers
            .iter()
            .filter(|a| matches!(a, Err(DriveError::VolumeExists)))
            .count();
        let ok = count_ok(&answers);
        if exists >= self.set_read_quorum() {
            return Err(Error::BucketExists);
        }
        if ok + exists < self.set_write_quorum() {
            return Err(Error::WriteQuorum {
                have: ok + exists,
                need: self.set_write_quorum(),
            });
        }
        Ok(())
    }

    pub async fn bucket_info(&self, bucket: &str) -> Result<BucketInfo> {
        let answers = on_all(&self.drives, |d| {
            let b = bucket.to_string();
            async move { d.stat_volume(&b).await }
        })
        .await;
        let found: Vec<_> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
        if found.len() >= self.set_read_quorum() {
            let created_ns = found.iter().map(|v| v.created_ns).min().unwrap_or(0);
            return Ok(BucketInfo {
                name: bucket.to_string(),
                created_ns,
            });
        }
        let missing = answers
            .iter()
            .filter(|a| matches!(a, Err(DriveError::VolumeNotFound)))
            .count();
        if missing > 0 {
            return Err(Error::BucketNotFound);
        }
        Err(Error::ReadQuorum {
            have: found.len(),
            need: self.set_read_quorum(),
        })
    }

    pub async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let answers = on_all(&self.drives, |d| async move { d.list_volumes().await }).await;
        let ok = count_ok(&answers);
        if ok < self.set_read_quorum() {
            return Err(Error::ReadQuorum {
                have: ok,
                need: self.set_read_quorum(),
            });
        }
        let mut counts: std::collections::BTreeMap<String, (usize, i64)> = Default::default();
        for vols in answers.into_iter().flatten() {
            for v in vols {
                let e = counts.entry(v.name).or_insert((0, i64::MAX));
                e.0 += 1;
                e.1 = e.1.min(v.created_ns);
            }
        }
        Ok(counts
            .into_iter()
            .filter(|(_, (c, _))| *c >= self.set_read_quorum())
            .map(|(name, (_, created_ns))| BucketInfo { name, created_ns })
            .collect())
    }

    /// Removes the bucket from every drive. The caller has checked it holds no object.
    pub async fn delete_bucket(&self, bucket: &str) -> Result<()> {
        let answers = on_all(&self.drives, |d| {
            let b = bucket.to_string();
            async move {
                match d.delete_volume(&b, false).await {
                    // Only debris of writes that never reached quorum is left on this drive:
                    // listing found no object, so it can go.
                    Err(DriveError::VolumeNotEmpty) => d.delete_volume(&b, true).await,
                    other => other,
                }
            }
        })
        .await;
        self.config_cache.invalidate(bucket);
        let gone = answers
            .iter()
            .filter(|a| matches!(a, Ok(()) | Err(DriveError::VolumeNotFound)))
            .count();
        if answers
            .iter()
            .all(|a| matches!(a, Err(DriveError::VolumeNotFound)))
        {
            return Err(Error::BucketNotFound);
        }
        if gone < self.set_write_quorum() {
            return Err(Error::WriteQuorum {
                have: gone,
                need: self.set_write_quorum(),
            });
        }
        Ok(())
    }

    /// Fails unless a write quorum of drives is online and has the bucket. Checked before a
    /// write reads its body, so a write that cannot commit fails at once; a drive that dies
    /// after this check is caught by the commit's own quorum count.
    pub(crate) async fn require_bucket_for_write(&self, bucket: &str) -> Result<()> {
        let answers = on_all(&self.drives, |d| {
            let b = bucket.to_string();
            async move { d.stat_volume(&b).await }
        })
        .await;
        let have = count_ok(&answers);
        if have >= self.set_write_quorum() {
            return Ok(());
        }
        let missing = answers
            .iter()
            .filter(|a| matches!(a, Err(DriveError::VolumeNotFound)))
            .count();
        if have < self.set_read_quorum() && missing > 0 {
            return Err(Error::BucketNotFound);
        }
        Err(Error::WriteQuorum {
            have,
            need: self.set_write_quorum(),
        })
    }

    /// Fails with `BucketNotFound` unless a read quorum of drives has the bucket.
    pub(crate) async fn require_bucket(&self, bucket: &str) -> Result<()> {
        self.bucket_info(bucket).await.map(|_| ())
    }

    // ---- objects ----

    /// Reads every drive's metadata of an object and picks the version a read quorum agrees on.
    pub(crate) async fn read_meta_quorum(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(
        ObjectMeta,
        Vec<Option<ObjectMeta>>,
        Vec<std::result::Result<ObjectMeta, DriveError>>,
    )> {
        let answers = on_all(&self.drives, |d| {
            let (b, k) = (bucket.to_string(), key.to_string());
            async move { d.read_meta(&b, &k).await }
        })
        .await;
        match pick_meta(&answers, self.set_write_quorum()) {
            MetaQuorum::Found { meta, metas } => Ok((*meta, metas, answers)),
            MetaQuorum::NotFound => {
                // NoSuchBucket and NoSuchKey are different answers in S3.
                self.require_bucket(bucket).await?;
                Err(Error::ObjectNotFound)
            }
            MetaQuorum::NoQuorum { have, need } => Err(Error::ReadQuorum { have, need }),
        }
    }

    pub async fn object_info(&self, bucket: &str, key: &str) -> Result<ObjectInfo> {
        self.object_version_info(bucket, key, None).await
    }

    /// HEAD of one version (`None`: the latest); see [`ErasureSet::resolve_version`].
    pub async fn object_version_info(
        &self,
        bucket: &str,
        key: &str,
        version: Option<crate::api::VersionId>,
    ) -> Result<ObjectInfo> {
        let (meta, metas) = self.resolve_version(bucket, key, version).await?;
        if metas.iter().any(|m| m.is_none()) {
            // Some drive is missing this version: heal it in the background.
            self.queue_heal(bucket, key);
        }
        Ok(object_info(bucket, key, &meta))
    }

    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        self.delete_object_if(bucket, key, None).await
    }

    /// Deletes the key (an unversioned bucket's), if `precondition` holds for it.
    pub(crate) async fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        precondition: Option<&crate::api::DeletePrecondition>,
    ) -> Result<()> {
        let _guard = self.locks.lock(&format!("{bucket}/{key}")).await?;
        if let Some(p) = precondition {
            let target = self.latest_for_delete(bucket, key).await?;
            if p.check(target.as_ref()) == crate::api::DeleteCheck::Refuse {
                return Err(Error::PreconditionFailed);
            }
        }
        let answers = on_all(&self.drives, |d| {
            let (b, k) = (bucket.to_string(), key.to_string());
            async move { d.delete_object(&b, &k).await }
        })
        .await;
        if answers
            .iter()
            .all(|a| matches!(a, Err(DriveError::VolumeNotFound)))
        {
            return Err(Error::BucketNotFound);
        }
        let done = answers
            .iter()
            .filter(|a| matches!(a, Ok(()) | Err(DriveError::FileNotFound)))
            .count();
        if done < self.set_write_quorum() {
            if answers
                .iter()
                .filter(|a| matches!(a, Err(DriveError::VolumeNotFound)))
                .count()
                >= self.set_read_quorum()
            {
                return Err(Error::BucketNotFound);
            }
            return Err(Error::WriteQuorum {
                have: done,
                need: self.set_write_quorum(),
            });
        }
        Ok(())
    }
}

/// The S3-facing description of an object from its metadata.
/// An encrypted version shows its plaintext size and its encryption record (never the
/// reserved entries as headers).
pub(crate) fn object_info(bucket: &str, key: &str, meta: &ObjectMeta) -> ObjectInfo {
    let (headers, encryption, size) = if crate::sse::is_encrypted(meta) {
        let (headers, record) = crate::sse::split(&meta.headers);
        (headers, record, crate::sse::plain_size(meta))
    } else {
        (meta.headers.clone(), BTreeMap::new(), meta.size)
    };
    ObjectInfo {
        bucket: bucket.to_string(),
        key: key.to_string(),
        size,
        mod_time_ns: meta.mod_time_ns,
        etag: meta.etag.clone(),
        headers,
        encryption,
        user_meta: meta.user_meta.clone(),
        checksums: meta.checksums.clone(),
        parts: meta.parts.len(),
        version_id: crate::api::VersionId::from_stored(meta.version_id),
        delete_marker: meta.delete_marker,
        is_latest: true,
    }
}
