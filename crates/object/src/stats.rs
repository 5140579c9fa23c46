//! Counters of the object layer, for the `/metrics` endpoint: heals queued, done and failed,
//! and the bytes the GET path copies. Plain atomics, bumped where the work happens; read with
//! [`crate::ObjectLayer::stats`].

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one erasure set.
#[derive(Debug, Default)]
pub(crate) struct SetCounters {
    pub heal_queued: AtomicU64,
    pub heal_dropped: AtomicU64,
    pub healed_objects: AtomicU64,
    pub heal_failed: AtomicU64,
    pub get_copied_bytes: AtomicU64,
}

impl SetCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Adds this set's counters into `stats`.
    pub fn add_to(&self, stats: &mut LayerStats) {
        stats.heal_queued_total += Self::get(&self.heal_queued);
        stats.heal_dropped_total += Self::get(&self.heal_dropped);
        stats.healed_objects_total += Self::get(&self.healed_objects);
        stats.heal_failed_total += Self::get(&self.heal_failed);
        stats.get_copied_bytes_total += Self::get(&self.get_copied_bytes);
    }
}

/// One drive as the object layer sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveState {
    /// The drive's endpoint (a path, or `node/path` for a remote drive).
    pub endpoint: String,
    /// Whether it answered a `disk_info` call just now.
    pub online: bool,
}

/// A snapshot of the object layer's state and counters (totals since start).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerStats {
    pub drives: Vec<DriveState>,
    /// Objects waiting for the heal worker.
    pub heal_queue_len: u64,
    /// Objects put on the heal queue.
    pub heal_queued_total: u64,
    /// Heal requests dropped because the queue was full (the next read queues them again).
    pub heal_dropped_total: u64,
    /// Objects the heal worker rewrote on at least one drive.
    pub healed_objects_total: u64,
    /// Heals that failed or left a drive unhealed.
    pub heal_failed_total: u64,
    /// Bytes the GET path copied from one buffer to another (shard chunks out of their framed
    /// reads, inline shards out of the metadata, data chunks joined into a block). Bytes decoded
    /// from parity are computed, not copied, and are not counted.
    pub get_copied_bytes_total: u64,
}
