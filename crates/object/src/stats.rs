//! Counters of the object layer, for the `/metrics` endpoint: heals queued, done and failed,
//! and the bytes the GET path copies. Plain atomics, bumped where the work happens; read with
//! [`crate::ObjectLayer::stats`].

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// Counters of one erasure set.
#[derive(Debug, Default)]
pub(crate) struct SetCounters {
    pub heal_queued: AtomicU64,
    pub heal_dropped: AtomicU64,
    pub healed_objects: AtomicU64,
    pub heal_failed: AtomicU64,
    /// See [`LayerStats::get_copied_bytes_total`].
    pub get_copied_bytes: AtomicU64,
    /// Bytes of data chunks the GET path rebuilt from parity (degraded reads).
    pub get_decoded_bytes: AtomicU64,
    /// See [`LayerStats::frame_rereads_total`].
    pub frame_rereads: AtomicU64,
    /// Heals put on the retry list (each failed attempt counts once).
    pub heal_retried: AtomicU64,
    /// Heals dropped because the retry list was full.
    pub heal_retry_dropped: AtomicU64,
    /// Heals given up after their last attempt (damage that no retry can mend).
    pub heal_given_up: AtomicU64,
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
        stats.frame_rereads_total += Self::get(&self.frame_rereads);
        stats.get_decoded_bytes_total += Self::get(&self.get_decoded_bytes);
        stats.heal_retried_total += Self::get(&self.heal_retried);
        stats.heal_retry_dropped_total += Self::get(&self.heal_retry_dropped);
        stats.heal_given_up_total += Self::get(&self.heal_given_up);
    }
}

/// Counters of the background scanner of one server (all its sets).
#[derive(Debug, Default)]
pub(crate) struct ScanCounters {
    pub objects: AtomicU64,
    pub healed: AtomicU64,
    pub failed: AtomicU64,
    pub passes: AtomicU64,
    /// Start and end of the last pass, ns since the Unix epoch; 0 when none yet.
    pub last_start_ns: AtomicI64,
    pub last_end_ns: AtomicI64,
    pub running: AtomicBool,
}

impl ScanCounters {
    pub fn snapshot(&self) -> ScanStats {
        let ns = |a: &AtomicI64| Some(a.load(Ordering::Relaxed)).filter(|n| *n != 0);
        ScanStats {
            enabled: true,
            running: self.running.load(Ordering::Relaxed),
            objects_total: self.objects.load(Ordering::Relaxed),
            healed_total: self.healed.load(Ordering::Relaxed),
            failed_total: self.failed.load(Ordering::Relaxed),
            passes_total: self.passes.load(Ordering::Relaxed),
            last_pass_start_ns: ns(&self.last_start_ns),
            last_pass_end_ns: ns(&self.last_end_ns),
        }
    }
}

/// What the background scanner has done since start-up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Whether the scanner runs at all (`scan_interval` set).
    pub enabled: bool,
    /// Whether a pass is running now.
    pub running: bool,
    /// Objects checked.
    pub objects_total: u64,
    /// Objects rewritten on at least one drive.
    pub healed_total: u64,
    /// Objects that could not be checked or healed on every drive.
    pub failed_total: u64,
    /// Passes completed.
    pub passes_total: u64,
    /// Start of the last (or current) pass, ns since the Unix epoch.
    pub last_pass_start_ns: Option<i64>,
    /// End of the last completed pass, ns since the Unix epoch.
    pub last_pass_end_ns: Option<i64>,
}

/// One drive as the object layer sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriveState {
    /// The drive's endpoint (a path, or `node/path` for a remote drive).
    pub endpoint: String,
    /// Whether it answered a `disk_info` call just now.
    pub online: bool,
}

/// How many heal queue entries [`LayerStats::heal_queue`] lists.
pub const HEAL_QUEUE_SHOWN: usize = 50;

/// Where an object on a heal worker's list stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealEntryState {
    /// The worker is healing it now.
    Healing,
    /// Waiting on the queue.
    Queued,
    /// A heal failed (a drive was out of reach): tried again when due.
    Retry,
}

/// One object on a heal worker's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealQueueEntry {
    /// The erasure set (0-based) whose worker holds it.
    pub set: usize,
    pub bucket: String,
    pub key: String,
    pub state: HealEntryState,
    /// Failed attempts so far.
    pub attempts: u32,
    /// For a retry: how long until it is due (zero when overdue).
    pub due_in: Option<std::time::Duration>,
}

/// A snapshot of the object layer's state and counters (totals since start).
#[derive(Debug, Clone, Default, PartialEq)]
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
    /// Shard bytes a GET got back anywhere but in the buffer it read them into: a copy
    /// happened on the way (a data plane that gathered pieces, a drive that cannot read in
    /// place). Inline shards are slices of their metadata and chunks are slices of their framed
    /// reads: neither is copied. Bytes decoded from parity are computed, not copied, and are not
    /// counted.
    pub get_copied_bytes_total: u64,
    /// Bytes of data chunks rebuilt from parity by degraded GETs.
    pub get_decoded_bytes_total: u64,
    /// Shard frames read again with every byte authenticated because they failed their bitrot
    /// check after a read that authenticated only their hash on the way (a remote drive's):
    /// bytes changed on the network, or a damaged copy (then the second read fails too).
    pub frame_rereads_total: u64,
    /// Heals waiting on the retry list (their drives were offline), now.
    pub heal_retry_len: u64,
    /// Failed heal attempts put on the retry list.
    pub heal_retried_total: u64,
    /// Heals dropped because the retry list was full (the scanner finds them later).
    pub heal_retry_dropped_total: u64,
    /// Heals given up after their last attempt.
    pub heal_given_up_total: u64,
    /// What the heal workers are doing: the objects being healed, then a sample of those
    /// queued, then the first retries due, at most [`HEAL_QUEUE_SHOWN`] in all.
    pub heal_queue: Vec<HealQueueEntry>,
    /// The background scanner.
    pub scan: ScanStats,
    /// The heal jobs of this node ([`crate::ErasureServer::start_heal_job`]).
    pub heal_jobs: crate::heal_job::HealJobStats,
    /// Heals of replaced drives of this node ([`crate::drive_heal`]), running or finished since
    /// start: where each is and what it has done.
    pub drive_heals: Vec<crate::drive_heal::DriveHealStatus>,
    /// Shard traffic per data-plane backend of this node (empty on a single node).
    pub data_planes: Vec<DataPlaneFigures>,
    /// Shard traffic per backend and peer (empty on a single node).
    pub data_peers: Vec<quarry_buf::PeerSnapshot>,
    /// What this node's holder side moved for its peers (verbs only).
    pub holder: Option<quarry_buf::DataPlaneStats>,
    /// The buffer pools of the data path, by name (`data`; `holder` with verbs).
    pub pools: Vec<(&'static str, quarry_buf::BufPoolStats)>,
    /// The kept sorted listings of this node's large directories.
    pub list_cache: quarry_disk::ListCacheFigures,
    /// The data of replaced and deleted versions this node's drives keep for reads under way.
    pub retired: quarry_disk::RetiredFigures,
}

/// What one data-plane backend moved, for the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataPlaneFigures {
    /// `tcp` or `verbs`.
    pub backend: String,
    pub transfers: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub errors: u64,
    pub timeouts: u64,
}
