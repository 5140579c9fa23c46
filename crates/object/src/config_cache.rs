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
//!
//! Time is the set's runtime clock ([`crate::runtime`]), passed in by the caller: the system
//! clock in a server, the seed's logical clock in a replayed test, where an entry expiring by
//! the wall clock made a loaded run read a blob once more than an idle one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

/// How long a blob read for the write path is used before it is read again.
pub const CONFIG_CACHE_TTL: Duration = Duration::from_secs(1);

/// Blobs remembered at most; beyond, the cache starts over.
const CACHE_ENTRIES: usize = 4096;

/// When the read began (ns on the runtime's clock), and what it found (`None`: not set).
type Entry = (i64, Option<Bytes>);

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
    started_ns: i64,
}

/// Whether an entry read at `at_ns` is still fresh at `now_ns`; a clock that went back is not
/// trusted (the entry is read again).
fn fresh(at_ns: i64, now_ns: i64) -> bool {
    now_ns >= at_ns && ((now_ns - at_ns) as u128) < CONFIG_CACHE_TTL.as_nanos()
}

impl ConfigCache {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached blob at `now_ns`, or on a miss the token to fill it with after reading.
    pub(crate) fn lookup(
        &self,
        bucket: &str,
        name: &str,
        now_ns: i64,
    ) -> Result<Option<Bytes>, Miss> {
        let inner = self.inner();
        let key = (bucket.to_owned(), name.to_owned());
        match inner.entries.get(&key) {
            Some((at, v)) if fresh(*at, now_ns) => Ok(v.clone()),
            _ => Err(Miss {
                generation: inner.generation,
                started_ns: now_ns,
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
        inner.entries.insert(
            (bucket.to_owned(), name.to_owned()),
            (miss.started_ns, value),
        );
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

    const NOW: i64 = 1_700_000_000_000_000_000;

    #[test]
    fn hit_after_fill_and_miss_after_invalidate() {
        let c = ConfigCache::default();
        let miss = c.lookup("b", "versioning", NOW).unwrap_err();
        c.fill(
            miss,
            "b",
            "versioning",
            Some(Bytes::from_static(b"Enabled")),
        );
        assert_eq!(
            c.lookup("b", "versioning", NOW).ok(),
            Some(Some(Bytes::from_static(b"Enabled")))
        );
        // Another bucket's change leaves this one cached.
        c.invalidate("other");
        assert!(c.lookup("b", "versioning", NOW).is_ok());
        c.invalidate("b");
        assert!(c.lookup("b", "versioning", NOW).is_err());
    }

    #[test]
    fn a_read_under_way_during_a_change_does_not_fill() {
        let c = ConfigCache::default();
        let miss = c.lookup("b", "versioning", NOW).unwrap_err();
        // The write lands and invalidates while the (older) read is still under way.
        c.invalidate("b");
        c.fill(miss, "b", "versioning", None);
        assert!(c.lookup("b", "versioning", NOW).is_err());
        // A read begun after the change fills it.
        let miss = c.lookup("b", "versioning", NOW).unwrap_err();
        c.fill(miss, "b", "versioning", None);
        assert_eq!(c.lookup("b", "versioning", NOW).ok(), Some(None));
    }

    #[test]
    fn entries_expire_by_the_clock_given_and_not_when_it_goes_back() {
        let c = ConfigCache::default();
        let miss = c.lookup("b", "lock", NOW).unwrap_err();
        c.fill(miss, "b", "lock", None);
        let ttl = CONFIG_CACHE_TTL.as_nanos() as i64;
        assert!(c.lookup("b", "lock", NOW + ttl - 1).is_ok());
        assert!(c.lookup("b", "lock", NOW + ttl).is_err());
        assert!(c.lookup("b", "lock", NOW - 1).is_err());
    }
}
