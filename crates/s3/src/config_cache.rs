//! A per-node cache of parsed bucket configuration documents (CORS rules, bucket policies), so
//! that the requests that consult one on every call do not each make a quorum read.
//!
//! Each bucket's entry is used for its kind's [`CachedConfig::TTL`]: a change made on this node is
//! seen at once (the writer calls [`ConfigCache::invalidate`]), a change made through another
//! node within that time. `None` remembers "no document" (or no such bucket) just as long. A
//! read that fails (no quorum) is the caller's error and is not cached.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quarry_object::ObjectLayer;

use crate::error::S3Error;

/// Buckets remembered at most; beyond, the cache starts over.
const CACHE_ENTRIES: usize = 4096;

/// A bucket configuration document kind that is cached parsed.
pub(crate) trait CachedConfig: Send + Sync + Sized + 'static {
    /// The bucket configuration document's name in the object layer.
    const NAME: &'static str;
    /// How long a parsed document is used before it is read again.
    const TTL: Duration;
    /// What the document is, for the log line when a stored one no longer parses.
    const WHAT: &'static str;
    /// Parses a stored document of `bucket`.
    fn parse(bucket: &str, raw: &[u8]) -> Result<Self, S3Error>;
}

/// When the document was read, and what it was (`None`: none, or no bucket).
type CacheEntry<T> = (Instant, Option<Arc<T>>);

/// Parsed documents of one kind, by bucket.
pub(crate) struct ConfigCache<T> {
    entries: Mutex<HashMap<String, CacheEntry<T>>>,
    /// Counts invalidations: a read that began before one (and may have read the old document)
    /// does not fill the cache with what it read.
    generation: AtomicU64,
}

impl<T> Default for ConfigCache<T> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            generation: AtomicU64::new(0),
        }
    }
}

impl<T: CachedConfig> ConfigCache<T> {
    /// The bucket's document, from the cache or read and parsed now. A stored document that no
    /// longer parses (written by another version) counts as none, with a warning.
    pub(crate) async fn get(
        &self,
        layer: &dyn ObjectLayer,
        bucket: &str,
    ) -> Result<Option<Arc<T>>, quarry_object::Error> {
        if let Some(hit) = self.lookup(bucket) {
            return Ok(hit);
        }
        let generation = self.generation.load(Ordering::Acquire);
        let value = match layer.get_bucket_config(bucket, T::NAME).await {
            Ok(Some(raw)) => match T::parse(bucket, &raw) {
                Ok(v) => Some(Arc::new(v)),
                Err(e) => {
                    tracing::warn!(bucket, error = %e.message, "stored {} does not parse", T::WHAT);
                    None
                }
            },
            Ok(None) | Err(quarry_object::Error::BucketNotFound) => None,
            Err(e) => return Err(e),
        };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // Checked under the lock `invalidate` bumps it under: no invalidation slips between.
        if self.generation.load(Ordering::Acquire) == generation {
            if entries.len() >= CACHE_ENTRIES {
                entries.clear();
            }
            entries.insert(bucket.to_owned(), (Instant::now(), value.clone()));
        }
        Ok(value)
    }

    fn lookup(&self, bucket: &str) -> Option<Option<Arc<T>>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(bucket)
            .filter(|(at, _)| at.elapsed() < T::TTL)
            .map(|(_, v)| v.clone())
    }

    /// Forgets a bucket (its document just changed on this node, or the bucket was deleted).
    pub(crate) fn invalidate(&self, bucket: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        entries.remove(bucket);
    }
}
