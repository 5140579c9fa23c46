//! A per-set cache of bucket configuration blobs for the write path, so that a PUT does not
//! make a quorum read for each of its bucket's versioning, object lock and encryption
//! configuration.
//!
//! Staleness bound: an entry is used for [`CONFIG_CACHE_TTL`] after the quorum read that filled
//! it began. A change made through this set (a write or delete of a blob, a bucket made or
//! removed) drops the bucket's entries once it returns, and a read that was under way meanwhile
//! does not fill the cache (a generation counter), so every later read on this node sees the
//! change at once; a change made through another node is seen within [`CONFIG_CACHE_TTL`].
//! Only successful reads are cached (a value or "not set"); errors (no quorum, no bucket) are
//! the caller's, every time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;

/// How long a blob read for the write path is used before it is read again.
pub const CONFIG_CACHE_TTL: Duration = Duration::from_secs(1);

/// Blobs remembered at most; beyond, the cache starts over.
const CACHE_ENTRIES: usize = 4096;

/// When the read began, and what it found (`None`: not set).
type Entry = (Instant, Option<Bytes>);

#[derive(Default)]
struct Inner {
    /// By (bucket, blob name).
    entries: HashMap<(String, String), Entry>,
    /// Bumped by every invalidation: a read that began before one does not fill the cache.
    generation: u64,
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct ConfigCache {
    inner: Mutex<Inner>,
}

/// What [`ConfigCache::lookup`] hands to the reader on a miss, to give back to
/// [`ConfigCache::fill`].
pub(crate) struct Miss {
    generation: u64,
    started: Instant,
}

impl ConfigCache {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached blob, or on a miss the token to fill it with after reading.
    pub(crate) fn lookup(&self, bucket: &str, name: &str) -> Result<Option<Bytes>, Miss> {
        let inner = self.inner();
        let key = (bucket.to_owned(), name.to_owned());
        match inner.entries.get(&key) {
            Some((at, v)) if at.elapsed() < CONFIG_CACHE_TTL => Ok(v.clone()),
            _ => Err(Miss {
                generation: inner.generation,
                started: Instant::now(),
            }),
        }
    }

    /// Remembers what a read that missed found, unless the bucket's configuration changed
    /// through this node since the read began.
    pub(crate) fn fill(&self, miss: Miss, bucket: &str, name: &str, value: Option<Bytes>) {
        let mut inner = self.inner();
        if inner.generation != miss.generation {
            return;
        }
        if inner.entries.len() >= CACHE_ENTRIES {
            inner.entries.clear();
        }
        inner
            .entries
            .insert((bucket.to_owned(), name.to_owned()), (miss.started, value));
    }

    /// Forgets every blob of `bucket` (one just changed, or the bucket came or went).
    pub(crate) fn invalidate(&self, bucket: &str) {
        let mut inner = self.inner();
        inner.generation = inner.generation.wrapping_add(1);
        inner.entries.retain(|(b, _), _| b != bucket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_after_fill_and_miss_after_invalidate() {
        let c = ConfigCache::default();
        let miss = c.lookup("b", "versioning").unwrap_err();
        c.fill(
            miss,
            "b",
            "versioning",
            Some(Bytes::from_static(b"Enabled")),
        );
        assert_eq!(
            c.lookup("b", "versioning").ok(),
            Some(Some(Bytes::from_static(b"Enabled")))
        );
        // Another bucket's change leaves this one cached.
        c.invalidate("other");
        assert!(c.lookup("b", "versioning").is_ok());
        c.invalidate("b");
        assert!(c.lookup("b", "versioning").is_err());
    }

    #[test]
    fn a_read_under_way_during_a_change_does_not_fill() {
        let c = ConfigCache::default();
        let miss = c.lookup("b", "versioning").unwrap_err();
        // The write lands and invalidates while the (older) read is still under way.
        c.invalidate("b");
        c.fill(miss, "b", "versioning", None);
        assert!(c.lookup("b", "versioning").is_err());
        // A read begun after the change fills it.
        let miss = c.lookup("b", "versioning").unwrap_err();
        c.fill(miss, "b", "versioning", None);
        assert_eq!(c.lookup("b", "versioning").ok(), Some(None));
    }
}
