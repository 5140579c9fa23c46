//! The lifecycle worker: a background task of its own that, once per interval, applies every
//! bucket's lifecycle rules (`lifecycle.rs`) to this node's share of the keys
//! ([`ObjectLayer::lifecycle_shares`]: on a cluster, the erasure sets whose first online drive is
//! local).
//!
//! A pass walks each share's versions with ListObjectVersions, one key at a time (all its
//! versions, newest first), and:
//! - expires the current version when a rule's `Expiration` (Days or Date) is due: a delete marker
//!   in a versioned (or suspended) bucket, a delete in an unversioned one;
//! - removes noncurrent versions `NoncurrentDays` after they became noncurrent (the time their
//!   successor was written), keeping the `NewerNoncurrentVersions` newest;
//! - removes a delete marker left with no version behind it (`ExpiredObjectDeleteMarker`, or an
//!   `Expiration` in Days that the marker has reached);
//! - aborts multipart uploads `DaysAfterInitiation` after they began.
//!
//! Object lock always wins: a version under retention or legal hold is never removed (the delete
//! is refused below, and counted as skipped). A pass is idempotent: what it did is what the rules
//! say, so running it twice, or on two nodes for a moment, does nothing more.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use quarry_object::{
    DeleteOptions, ListUploadsOptions, ListVersionsOptions, ObjectInfo, ObjectLayer, VersionId,
    VersioningState,
};

use crate::lifecycle::{Clock, LifecycleConfig, CONFIG_NAME};

/// Versions listed per page.
const PAGE: usize = 1000;
/// The pass interval when none is set: AWS applies rules once a day; an hour keeps due times
/// close without walking the keys often.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(3600);
/// The first pass starts this long after start-up at most.
const FIRST_DELAY: Duration = Duration::from_secs(60);

/// When and how the worker runs. The default: no worker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LifecycleSettings {
    /// Time between passes; `None`: no worker (tests of the front end alone).
    pub interval: Option<Duration>,
    /// How long a day is for the rules.
    pub clock: Clock,
}

impl LifecycleSettings {
    /// The server's settings from the environment:
    /// - `QUARRY_LC_INTERVAL`: seconds between passes (default 3600; 0 turns the worker off);
    /// - `QUARRY_LC_DEBUG_DAY_SECS`: a "day" of that many seconds, for tests (off by default;
    ///   ceph/s3-tests expects 10). Due times are then not rounded to midnight, and the default
    ///   interval becomes a fifth of that day (at least 1 s).
    pub fn from_env() -> Result<LifecycleSettings, String> {
        let read = |name: &str| -> Result<Option<u64>, String> {
            match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => v
                    .trim()
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| format!("{name}={v:?} is not a whole number of seconds")),
                _ => Ok(None),
            }
        };
        let day = read("QUARRY_LC_DEBUG_DAY_SECS")?;
        let interval = read("QUARRY_LC_INTERVAL")?;
        let clock = match day {
            Some(0) => return Err("QUARRY_LC_DEBUG_DAY_SECS must be at least 1".into()),
            Some(d) => Clock {
                day_secs: i64::try_from(d).unwrap_or(i64::MAX),
            },
            None => Clock::default(),
        };
        let interval = match (interval, day) {
            (Some(0), _) => None,
            (Some(s), _) => Some(Duration::from_secs(s)),
            (None, Some(d)) => Some(Duration::from_secs((d / 5).max(1))),
            (None, None) => Some(DEFAULT_INTERVAL),
        };
        Ok(LifecycleSettings { interval, clock })
    }
}

/// What the worker did, for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct LifecycleCounters {
    /// Current versions expired (a delete marker added, or deleted in an unversioned bucket).
    pub objects_expired: AtomicU64,
    /// Noncurrent versions removed.
    pub versions_expired: AtomicU64,
    /// Delete markers removed (expired markers, noncurrent markers).
    pub markers_removed: AtomicU64,
    pub uploads_aborted: AtomicU64,
    /// Bytes of the versions removed (logical object sizes).
    pub bytes_freed: AtomicU64,
    /// Versions a rule made due that object lock (retention, legal hold) kept.
    pub skipped_locked: AtomicU64,
    /// Actions that failed (retried on the next pass).
    pub errors: AtomicU64,
    pub passes: AtomicU64,
    /// When the last pass ended, seconds since the Unix epoch (0: none yet).
    pub last_pass_end_secs: AtomicU64,
    /// How long the last pass took, milliseconds.
    pub last_pass_millis: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Starts the worker on the current runtime (none: not started). It holds the layer weakly and
/// ends when the layer is dropped.
pub(crate) fn spawn(
    layer: &Arc<dyn ObjectLayer>,
    counters: Arc<LifecycleCounters>,
    settings: LifecycleSettings,
) {
    let Some(interval) = settings.interval else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let weak: Weak<dyn ObjectLayer> = Arc::downgrade(layer);
    runtime.spawn(async move {
        tokio::time::sleep(interval.min(FIRST_DELAY)).await;
        let mut seen = SeenConfigs::default();
        loop {
            let Some(layer) = weak.upgrade() else { return };
            run_pass(layer.as_ref(), &counters, settings.clock, &mut seen).await;
            drop(layer);
            tokio::time::sleep(interval).await;
        }
    });
}

/// The lifecycle configurations this node's worker has seen, by bucket (a hash of the stored
/// document). A new or changed configuration is applied from the pass after the one that first
/// saw it: rules take effect about an interval after they are set, never in the moment the PUT
/// returns (AWS: "there is usually some lag before a new or updated lifecycle configuration is
/// fully propagated"; clients, and ceph/s3-tests' lifecycle tests, list a bucket right after
/// setting its rules and expect nothing expired yet). The first pass after start-up applies what
/// it finds: those configurations were set before this process began.
#[derive(Debug, Default)]
pub(crate) struct SeenConfigs {
    by_bucket: HashMap<String, u64>,
    /// A pass has run since start-up.
    started: bool,
}

impl SeenConfigs {
    /// Records `raw` as `bucket`'s configuration in this pass (into `next`); whether it is
    /// settled (to be applied now).
    fn settled(&self, next: &mut HashMap<String, u64>, bucket: &str, raw: &[u8]) -> bool {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        raw.hash(&mut h);
        let h = h.finish();
        next.insert(bucket.to_owned(), h);
        match self.by_bucket.get(bucket) {
            Some(prev) => *prev == h,
            None => !self.started,
        }
    }
}

/// One pass over every bucket with a lifecycle configuration, on this node's shares.
pub(crate) async fn run_pass(
    layer: &dyn ObjectLayer,
    c: &LifecycleCounters,
    clock: Clock,
    seen: &mut SeenConfigs,
) {
    let started = Instant::now();
    let buckets = match layer.list_buckets().await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "lifecycle: cannot list the buckets; pass skipped");
            add(&c.errors, 1);
            return;
        }
    };
    let shares = layer.lifecycle_shares().await;
    let mut next_seen = HashMap::new();
    if !shares.is_empty() {
        for b in &buckets {
            let config = match layer.get_bucket_config(&b.name, CONFIG_NAME).await {
                Ok(Some(raw)) if !seen.settled(&mut next_seen, &b.name, &raw) => {
                    tracing::debug!(
                        bucket = b.name,
                        "lifecycle: a new configuration, applied from the next pass"
                    );
                    continue;
                }
                Ok(Some(raw)) => match LifecycleConfig::parse(&raw) {
                    Ok(cfg) => cfg,
                    Err(e) => {
                        tracing::warn!(bucket = b.name, error = %e.message, "lifecycle: stored configuration does not parse");
                        continue;
                    }
                },
                Ok(None) | Err(quarry_object::Error::BucketNotFound) => continue,
                Err(e) => {
                    tracing::warn!(bucket = b.name, error = %e, "lifecycle: configuration unreadable; bucket skipped");
                    add(&c.errors, 1);
                    continue;
                }
            };
            if !config.rules.iter().any(|r| r.enabled) {
                continue;
            }
            let versioning = match layer.get_bucket_versioning(&b.name).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(bucket = b.name, error = %e, "lifecycle: versioning state unreadable; bucket skipped");
                    add(&c.errors, 1);
                    continue;
                }
            };
            let bucket = BucketPass {
                layer,
                bucket: &b.name,
                config: &config,
                versioning,
                clock,
                c,
            };
            for &share in &shares {
                bucket.versions(share).await;
                bucket.uploads(share).await;
            }
        }
    }
    seen.by_bucket = next_seen;
    seen.started = true;
    let took = started.elapsed();
    add(&c.passes, 1);
    c.last_pass_millis.store(
        u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    c.last_pass_end_secs.store(
        u64::try_from(now_ns() / 1_000_000_000).unwrap_or(0),
        Ordering::Relaxed,
    );
    tracing::debug!(took_ms = took.as_millis() as u64, "lifecycle pass done");
}

/// One bucket's rules over one share.
struct BucketPass<'a> {
    layer: &'a dyn ObjectLayer,
    bucket: &'a str,
    config: &'a LifecycleConfig,
    versioning: VersioningState,
    clock: Clock,
    c: &'a LifecycleCounters,
}

impl BucketPass<'_> {
    fn any_rule(&self, f: impl Fn(&crate::lifecycle::Rule) -> bool) -> bool {
        self.config.rules.iter().any(|r| r.enabled && f(r))
    }

    /// Walks the share's versions, one key (all its versions) at a time.
    async fn versions(&self, share: usize) {
        if !self.any_rule(|r| r.expiration.is_some() || r.noncurrent.is_some()) {
            return;
        }
        let mut opts = ListVersionsOptions {
            max_keys: PAGE,
            ..Default::default()
        };
        let mut key_versions: Vec<ObjectInfo> = Vec::new();
        loop {
            let page = match self
                .layer
                .list_share_versions(share, self.bucket, opts.clone())
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(bucket = self.bucket, error = %e, "lifecycle: listing versions failed; the rest of the bucket waits for the next pass");
                    add(&self.c.errors, 1);
                    return;
                }
            };
            for v in page.versions {
                if key_versions.first().is_some_and(|k| k.key != v.key) {
                    let done = std::mem::take(&mut key_versions);
                    self.key(done).await;
                }
                key_versions.push(v);
            }
            if !page.is_truncated {
                break;
            }
            opts.key_marker = page.next_key_marker;
            opts.version_id_marker = page.next_version_id_marker;
            if opts.key_marker.is_none() {
                break;
            }
        }
        if !key_versions.is_empty() {
            self.key(key_versions).await;
        }
    }

    /// Applies the rules to one key's versions, newest first.
    async fn key(&self, versions: Vec<ObjectInfo>) {
        let now = now_ns();
        let Some(latest) = versions.first() else {
            return;
        };
        // The current version, when due: expired (the rest of the key waits for the next pass,
        // which sees the version it made noncurrent with its new successor).
        if !latest.delete_marker && latest.is_latest {
            if let Some((at, _)) = self.config.current_expiry(latest, self.clock) {
                if at <= now {
                    self.expire_current(latest).await;
                    return;
                }
            }
        }
        let mut remaining = versions.len() - 1;
        if self.any_rule(|r| r.noncurrent.is_some()) {
            for (rank, pair) in versions.windows(2).enumerate() {
                let (successor, v) = (&pair[0], &pair[1]);
                if self.noncurrent_due(v, successor.mod_time_ns, rank, now)
                    && self.remove_version(v).await
                {
                    remaining -= 1;
                }
            }
        }
        if latest.delete_marker && remaining == 0 && self.marker_due(latest, now) {
            self.remove_version(latest).await;
        }
    }

    /// Whether noncurrent version `v`, noncurrent since `since_ns` and `rank`-th newest of the
    /// noncurrent versions (from 0), is due under some rule.
    fn noncurrent_due(&self, v: &ObjectInfo, since_ns: i64, rank: usize, now: i64) -> bool {
        let tags = crate::tagging::object_tags(v);
        self.config.rules.iter().any(|r| {
            let Some(n) = &r.noncurrent else {
                return false;
            };
            r.enabled
                && r.filter.matches(&v.key, v.size, &tags)
                && rank >= n.newer_noncurrent_versions.unwrap_or(0) as usize
                && self.clock.due(since_ns, n.days) <= now
        })
    }

    /// Whether the delete marker `m`, the key's only version left, may go.
    fn marker_due(&self, m: &ObjectInfo, now: i64) -> bool {
        let no_tags = crate::tagging::TagSet::new();
        self.config.rules.iter().any(|r| {
            let Some(x) = &r.expiration else { return false };
            r.enabled
                && r.filter.matches(&m.key, 0, &no_tags)
                && (x.expired_object_delete_marker == Some(true)
                    || x.days
                        .is_some_and(|d| self.clock.due(m.mod_time_ns, d) <= now))
        })
    }

    /// Expires the current version `v`, unless the key changed since it was listed.
    async fn expire_current(&self, v: &ObjectInfo) {
        match self
            .layer
            .object_version_info(self.bucket, &v.key, None)
            .await
        {
            Ok(now) if now.version_id == v.version_id && now.mod_time_ns == v.mod_time_ns => {}
            Ok(_) => return,
            Err(e) => {
                tracing::debug!(bucket = self.bucket, key = v.key, error = %e, "lifecycle: the current version is gone or unreadable");
                return;
            }
        }
        let r = self
            .layer
            .delete_object_version_with(self.bucket, &v.key, None, DeleteOptions::default())
            .await;
        match r {
            Ok(_) => {
                add(&self.c.objects_expired, 1);
                if self.versioning == VersioningState::Unversioned {
                    add(&self.c.bytes_freed, v.size);
                }
                tracing::debug!(bucket = self.bucket, key = v.key, "lifecycle: expired");
            }
            Err(e) => self.failed(v, &e),
        }
    }

    /// Removes one version (or marker) for good; `true` when it is gone.
    async fn remove_version(&self, v: &ObjectInfo) -> bool {
        let id: VersionId = v.version_id;
        let r = self
            .layer
            .delete_object_version_with(self.bucket, &v.key, Some(id), DeleteOptions::default())
            .await;
        match r {
            Ok(_) => {
                if v.delete_marker {
                    add(&self.c.markers_removed, 1);
                } else {
                    add(&self.c.versions_expired, 1);
                    add(&self.c.bytes_freed, v.size);
                }
                tracing::debug!(bucket = self.bucket, key = v.key, version = %id, "lifecycle: removed");
                true
            }
            Err(e) => {
                self.failed(v, &e);
                false
            }
        }
    }

    fn failed(&self, v: &ObjectInfo, e: &quarry_object::Error) {
        if matches!(e, quarry_object::Error::ObjectLocked(_)) {
            add(&self.c.skipped_locked, 1);
            tracing::debug!(bucket = self.bucket, key = v.key, version = %v.version_id, "lifecycle: due, but kept by object lock");
        } else {
            add(&self.c.errors, 1);
            tracing::warn!(bucket = self.bucket, key = v.key, version = %v.version_id, error = %e, "lifecycle: could not expire");
        }
    }

    /// Aborts the share's uploads that a rule's `AbortIncompleteMultipartUpload` made due.
    async fn uploads(&self, share: usize) {
        if !self.any_rule(|r| r.abort_days.is_some()) {
            return;
        }
        let now = now_ns();
        let mut opts = ListUploadsOptions {
            max_uploads: PAGE,
            ..Default::default()
        };
        loop {
            let page = match self
                .layer
                .list_share_uploads(share, self.bucket, opts.clone())
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(bucket = self.bucket, error = %e, "lifecycle: listing uploads failed");
                    add(&self.c.errors, 1);
                    return;
                }
            };
            for u in &page.uploads {
                let due = self.config.rules.iter().any(|r| {
                    r.enabled
                        && r.filter.matches_upload(&u.key)
                        && r.abort_days
                            .is_some_and(|d| self.clock.due(u.initiated_ns, d) <= now)
                });
                if !due {
                    continue;
                }
                match self
                    .layer
                    .abort_multipart_upload(self.bucket, &u.key, &u.upload_id)
                    .await
                {
                    Ok(()) => add(&self.c.uploads_aborted, 1),
                    // Completed or aborted since it was listed.
                    Err(quarry_object::Error::NoSuchUpload) => {}
                    Err(e) => {
                        add(&self.c.errors, 1);
                        tracing::warn!(bucket = self.bucket, key = u.key, error = %e, "lifecycle: could not abort the upload");
                    }
                }
            }
            if !page.is_truncated {
                break;
            }
            opts.key_marker = page.next_key_marker;
            opts.upload_id_marker = page.next_upload_id_marker;
            if opts.key_marker.is_none() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One pass's look at `configs` (bucket, document): which are applied in it.
    fn pass(seen: &mut SeenConfigs, configs: &[(&str, &[u8])]) -> Vec<String> {
        let mut next = HashMap::new();
        let applied = configs
            .iter()
            .filter(|(b, raw)| seen.settled(&mut next, b, raw))
            .map(|(b, _)| b.to_string())
            .collect();
        seen.by_bucket = next;
        seen.started = true;
        applied
    }

    #[test]
    fn a_new_or_changed_configuration_waits_one_pass_and_the_first_pass_applies_all() {
        let mut seen = SeenConfigs::default();
        // Start-up: what is there was set before this process began.
        assert_eq!(pass(&mut seen, &[("a", b"rules-1")]), ["a"]);
        // A bucket's rules set since: not in the pass that first sees them, in the next.
        assert_eq!(
            pass(&mut seen, &[("a", b"rules-1"), ("b", b"rules-1")]),
            ["a"]
        );
        assert_eq!(
            pass(&mut seen, &[("a", b"rules-1"), ("b", b"rules-1")]),
            ["a", "b"]
        );
        // Changed rules wait one pass too; the others go on.
        assert_eq!(
            pass(&mut seen, &[("a", b"rules-2"), ("b", b"rules-1")]),
            ["b"]
        );
        assert_eq!(
            pass(&mut seen, &[("a", b"rules-2"), ("b", b"rules-1")]),
            ["a", "b"]
        );
        // Deleted and set again: new again.
        assert_eq!(pass(&mut seen, &[("b", b"rules-1")]), ["b"]);
        assert_eq!(
            pass(&mut seen, &[("a", b"rules-2"), ("b", b"rules-1")]),
            ["b"]
        );
    }
}
