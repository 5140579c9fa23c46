//! Healing many objects: the on-demand heal of everything, a bucket or a prefix
//! ([`crate::ErasureServer::heal`]), and the background scanner that walks every object of every
//! set, paced to `scan_rate` objects per second, once per `scan_interval`.
//!
//! Both walk a set's listing one page at a time (never the whole listing in memory) and call
//! [`ErasureSet::heal_object`] on each object, which reads and verifies every shard and rewrites
//! the copies that are missing, outdated or corrupt. What they did is a [`HealReport`] (counts,
//! and the first [`REPORT_DETAILS`] objects healed and failed) or the scanner's counters.
//!
//! The scanner's passes are cheap by default ([`ErasureSet::looks_whole`]: versions agree, shard
//! files present with their sizes, no data read, no lock) and heal only what fails that check;
//! every `deep_scan_every`-th pass is deep: every object is read and its bitrot verified, with no
//! lock held while it reads ([`ErasureSet::heal_object_if_needed`]).
//!
//! Before the objects of a bucket, both heal the bucket's own state on the set
//! ([`ErasureSet::heal_bucket`]: its directory, configuration blobs and uploads in progress).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::api::HealResult;
use crate::api::{FailedObject, HealReport, HealedObject, ListOptions, REPORT_DETAILS};
use crate::config::SCAN_FIRST_DELAY;
use crate::error::{Error, Result};
use crate::heal_queue::{verdict, Verdict};
use crate::set::{now_ns, ErasureSet};
use crate::stats::ScanCounters;

/// Objects listed per page while walking a set.
const PAGE: usize = 1000;

impl HealReport {
    /// Adds the outcome of one bucket's own heal ([`ErasureSet::heal_bucket`]).
    pub(crate) fn record_bucket(&mut self, bucket: &str, r: &Result<HealResult>) {
        match r {
            Ok(r) => {
                self.bucket_items_healed += r.healed.len() as u64;
                if !r.failed.is_empty() {
                    let reason = r
                        .failed
                        .iter()
                        .map(|(d, why)| match d.is_empty() {
                            true => why.clone(),
                            false => format!("{d}: {why}"),
                        })
                        .collect::<Vec<_>>()
                        .join("; ");
                    self.fail(bucket, "", reason);
                }
            }
            Err(e) => self.fail(bucket, "", format!("healing the bucket failed: {e}")),
        }
    }

    /// Adds the outcome of one object's heal.
    pub(crate) fn record(&mut self, bucket: &str, key: &str, r: &Result<HealResult>) {
        self.scanned += 1;
        if let Ok(r) = r {
            if !r.healed.is_empty() {
                self.healed += 1;
                self.healed_drives += r.healed.len() as u64;
                if self.healed_objects.len() < REPORT_DETAILS {
                    self.healed_objects.push(HealedObject {
                        bucket: bucket.to_string(),
                        key: key.to_string(),
                        drives: r.healed.clone(),
                    });
                } else {
                    self.truncated = true;
                }
            }
        }
        if verdict(r) != Verdict::Done {
            let reason = match r {
                Ok(r) => r
                    .failed
                    .iter()
                    .map(|(d, e)| format!("{d}: {e}"))
                    .collect::<Vec<_>>()
                    .join("; "),
                Err(e) => e.to_string(),
            };
            self.fail(bucket, key, reason);
        }
    }

    pub(crate) fn fail(&mut self, bucket: &str, key: &str, reason: String) {
        self.failed += 1;
        if self.failed_objects.len() < REPORT_DETAILS {
            self.failed_objects.push(FailedObject {
                bucket: bucket.to_string(),
                key: key.to_string(),
                reason,
            });
        } else {
            self.truncated = true;
        }
    }
}

/// The keys of one listing page, with their latest version's size.
type PageKeys = VecDeque<(String, u64)>;

/// A walk over the objects of one set: its buckets (or one), each listed a page at a time.
pub(crate) struct Cursor {
    buckets: VecDeque<String>,
    prefix: String,
    /// The bucket being listed, the marker of its next page, and the keys of this page with
    /// their latest version's size.
    current: Option<(String, Option<String>, PageKeys)>,
}

impl Cursor {
    /// Starts a walk of `bucket` (which must exist), or of every bucket of `set`.
    pub(crate) async fn new(
        set: &Arc<ErasureSet>,
        bucket: Option<&str>,
        prefix: &str,
    ) -> Result<Cursor> {
        let buckets = match bucket {
            Some(b) => {
                set.require_bucket(b).await?;
                VecDeque::from([b.to_string()])
            }
            None => set
                .list_buckets()
                .await?
                .into_iter()
                .map(|b| b.name)
                .collect(),
        };
        Ok(Cursor {
            buckets,
            prefix: prefix.to_string(),
            current: None,
        })
    }

    /// Starts the walk of the next bucket after `key` (a walk resumed from a checkpoint).
    pub(crate) fn start_after(&mut self, key: &str) {
        if self.current.is_none() {
            if let Some(b) = self.buckets.pop_front() {
                self.current = Some((b, Some(key.to_string()), VecDeque::new()));
            }
        }
    }

    /// Buckets not yet started.
    fn buckets_left(&self) -> usize {
        self.buckets.len()
    }

    /// The buckets of the walk not yet started.
    pub(crate) fn buckets(&self) -> Vec<String> {
        self.buckets.iter().cloned().collect()
    }

    /// The next object as `(bucket, key)`; `Err((bucket, error))` when a bucket's listing fails
    /// (the walk goes on with the next bucket); `None` at the end.
    async fn next(
        &mut self,
        set: &Arc<ErasureSet>,
    ) -> Option<std::result::Result<(String, String), (String, Error)>> {
        Some(self.next_sized(set).await?.map(|(b, k, _)| (b, k)))
    }

    /// [`Cursor::next`] with the size of the object's latest version (0 for a delete marker).
    pub(crate) async fn next_sized(
        &mut self,
        set: &Arc<ErasureSet>,
    ) -> Option<std::result::Result<(String, String, u64), (String, Error)>> {
        loop {
            if self.current.is_none() {
                let b = self.buckets.pop_front()?;
                self.current = Some((b, None, VecDeque::new()));
            }
            let (bucket, marker, keys) = self.current.as_mut()?;
            if let Some((key, size)) = keys.pop_front() {
                return Some(Ok((bucket.clone(), key, size)));
            }
            if marker.as_deref() == Some("") {
                // The last page was read.
                self.current = None;
                continue;
            }
            let opts = ListOptions {
                prefix: self.prefix.clone(),
                marker: marker.clone(),
                delimiter: None,
                max_keys: PAGE,
            };
            // Keys whose latest version is a delete marker have versions to heal too.
            match set.list_objects_with(bucket, opts, true).await {
                Ok(page) => {
                    keys.extend(page.objects.into_iter().map(|o| (o.key, o.size)));
                    *marker = match (page.is_truncated, page.next_marker) {
                        (true, Some(m)) => Some(m),
                        // Done after these keys; an empty marker says so.
                        _ => Some(String::new()),
                    };
                }
                Err(Error::BucketNotFound) => {
                    // Deleted since the walk started: nothing to heal in it.
                    self.current = None;
                }
                Err(e) => {
                    let b = bucket.clone();
                    self.current = None;
                    return Some(Err((b, e)));
                }
            }
        }
    }
}

/// Heals every object of `sets` in `bucket` (or every bucket) under `prefix`, at full speed.
pub(crate) async fn heal_sets(
    sets: &[Arc<ErasureSet>],
    bucket: Option<&str>,
    prefix: &str,
) -> Result<HealReport> {
    let mut report = HealReport::default();
    for set in sets {
        let mut cursor = Cursor::new(set, bucket, prefix).await?;
        report.buckets = report.buckets.max(cursor.buckets_left() as u64);
        if bucket.is_none() {
            let r = set.heal_system_configs().await;
            report.record_bucket(quarry_disk::SYSTEM_CONFIG, &Ok(r));
        }
        for b in cursor.buckets() {
            let r = set.heal_bucket(&b).await;
            report.record_bucket(&b, &r);
        }
        while let Some(item) = cursor.next(set).await {
            match item {
                Ok((b, k)) => {
                    let r = set.heal_object(&b, &k).await;
                    report.record(&b, &k, &r);
                }
                Err((b, e)) => report.fail(&b, "", format!("listing the bucket failed: {e}")),
            }
        }
    }
    info!(
        bucket = bucket.unwrap_or("*"),
        prefix,
        scanned = report.scanned,
        healed = report.healed,
        failed = report.failed,
        "heal done"
    );
    Ok(report)
}

/// Spaces out events to at most `rate` per second (no limit when `rate` is 0), without bursts.
#[derive(Debug)]
struct Pacer {
    every: Option<Duration>,
    next: Option<Instant>,
}

impl Pacer {
    fn new(rate: u32) -> Pacer {
        Pacer {
            every: (rate > 0).then(|| Duration::from_secs(1) / rate),
            next: None,
        }
    }

    async fn wait(&mut self) {
        let Some(every) = self.every else { return };
        if let Some(t) = self.next {
            tokio::time::sleep_until(t).await;
        }
        // From now, not from the last due time: time spent healing is not made up for by a burst.
        self.next = Some(Instant::now() + every);
    }
}

/// Starts the background scanner over `sets`: a pass over every object, then a pause of
/// `interval`, and again. Holds the sets weakly: it ends when the server is dropped.
pub(crate) fn spawn_scanner(
    sets: &[Arc<ErasureSet>],
    counters: Arc<ScanCounters>,
    interval: Duration,
    rate: u32,
    deep_every: u32,
) {
    let Some(runtime) = sets.first().map(|s| s.cfg.runtime.clone()) else {
        return;
    };
    let sets: Vec<Weak<ErasureSet>> = sets.iter().map(Arc::downgrade).collect();
    runtime.spawn(Box::pin(async move {
        tokio::time::sleep(interval.min(SCAN_FIRST_DELAY)).await;
        let mut pass = 0u64;
        loop {
            pass += 1;
            let deep = deep_every > 0 && pass.is_multiple_of(u64::from(deep_every));
            if !scan_pass(&sets, &counters, rate, deep).await {
                return;
            }
            tokio::time::sleep(interval).await;
        }
    }));
}

/// One pass of the scanner. `false` when the sets are gone.
async fn scan_pass(sets: &[Weak<ErasureSet>], c: &ScanCounters, rate: u32, deep: bool) -> bool {
    let started = Instant::now();
    c.last_start_ns.store(now_ns(), Ordering::Relaxed);
    c.running.store(true, Ordering::Relaxed);
    let (mut scanned, mut healed, mut failed) = (0u64, 0u64, 0u64);
    let mut pacer = Pacer::new(rate);
    let mut alive = true;
    'sets: for weak in sets {
        let Some(set) = weak.upgrade() else {
            alive = false;
            break;
        };
        let mut cursor = match Cursor::new(&set, None, "").await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "scanner: cannot list the buckets; skipping this set");
                continue;
            }
        };
        let r = set.heal_system_configs().await;
        if !r.failed.is_empty() {
            debug!(result = ?r, "scanner: could not heal the system configuration");
        }
        for b in cursor.buckets() {
            pacer.wait().await;
            match set.heal_bucket(&b).await {
                Ok(r) if r.failed.is_empty() => {}
                r => debug!(bucket = b, result = ?r, "scanner: could not heal the bucket"),
            }
        }
        drop(set);
        loop {
            pacer.wait().await;
            let Some(set) = weak.upgrade() else {
                alive = false;
                break 'sets;
            };
            match cursor.next(&set).await {
                None => break,
                Some(Ok((b, k))) => {
                    let r = if deep {
                        set.heal_object_if_needed(&b, &k).await
                    } else if !set.looks_whole(&b, &k).await {
                        set.heal_object(&b, &k).await
                    } else {
                        Ok(HealResult::default())
                    };
                    scanned += 1;
                    c.objects.fetch_add(1, Ordering::Relaxed);
                    if matches!(&r, Ok(r) if !r.healed.is_empty()) {
                        healed += 1;
                        c.healed.fetch_add(1, Ordering::Relaxed);
                    }
                    if verdict(&r) != Verdict::Done {
                        failed += 1;
                        c.failed.fetch_add(1, Ordering::Relaxed);
                        debug!(bucket = b, key = k, result = ?r, "scanner: could not heal");
                    }
                }
                Some(Err((b, e))) => {
                    warn!(bucket = b, error = %e, "scanner: listing failed; skipping the bucket")
                }
            }
        }
    }
    c.running.store(false, Ordering::Relaxed);
    if !alive {
        return false;
    }
    c.last_end_ns.store(now_ns(), Ordering::Relaxed);
    c.passes.fetch_add(1, Ordering::Relaxed);
    info!(
        scanned,
        healed,
        failed,
        deep,
        took = ?started.elapsed(),
        "scanner pass done"
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pacer_spaces_events() {
        let mut p = Pacer::new(50); // 20 ms apart
        let t0 = Instant::now();
        for _ in 0..6 {
            p.wait().await;
        }
        assert!(
            t0.elapsed() >= Duration::from_millis(100),
            "{:?}",
            t0.elapsed()
        );
        let mut unlimited = Pacer::new(0);
        let t0 = Instant::now();
        for _ in 0..1000 {
            unlimited.wait().await;
        }
        assert!(t0.elapsed() < Duration::from_millis(100));
    }

    #[test]
    fn reports_are_bounded() {
        let mut r = HealReport::default();
        for i in 0..(REPORT_DETAILS + 5) {
            let healed = Ok(HealResult {
                healed: vec!["d1".into(), "d2".into()],
                failed: vec![],
            });
            r.record("b", &format!("h{i}"), &healed);
            r.record(
                "b",
                &format!("f{i}"),
                &Err(Error::ReadQuorum { have: 1, need: 2 }),
            );
            r.record("b", &format!("ok{i}"), &Ok(HealResult::default()));
        }
        let n = (REPORT_DETAILS + 5) as u64;
        assert_eq!(r.scanned, 3 * n);
        assert_eq!(r.healed, n);
        assert_eq!(r.healed_drives, 2 * n);
        assert_eq!(r.failed, n);
        assert_eq!(r.healed_objects.len(), REPORT_DETAILS);
        assert_eq!(r.failed_objects.len(), REPORT_DETAILS);
        assert!(r.truncated);
        assert!(r.failed_objects[0].reason.contains("have 1, need 2"));
    }
}
