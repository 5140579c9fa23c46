//! Settings of the object layer.

use std::time::Duration;

/// How long an unfinished multipart upload is kept by default.
pub const DEFAULT_MULTIPART_EXPIRY: Duration = Duration::from_secs(24 * 60 * 60);

/// Default pause between two passes of the background scanner.
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(60 * 60);

/// Default scanner speed, in objects per second.
pub const DEFAULT_SCAN_RATE: u32 = 50;

/// The scanner's first pass starts at most this long after start-up (a node that restarts more
/// often than `scan_interval` is still scanned), and not sooner: a node that just started has
/// better things to do.
pub const SCAN_FIRST_DELAY: Duration = Duration::from_secs(5 * 60);

/// Default age below which what looks like a leftover (an upload no quorum holds) is left
/// alone by a heal: a create in flight has reached some drives and not yet the others.
pub const DEFAULT_LEFTOVER_MIN_AGE: Duration = Duration::from_secs(15 * 60);

/// How objects are laid out on an erasure set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectConfig {
    /// Parity shards per object; `None` picks by set size as MinIO does (see
    /// [`quarry_erasure::default_parity`]).
    pub parity: Option<usize>,
    /// Erasure block size in bytes.
    pub block_size: usize,
    /// Objects whose shard on each drive is at most this many bytes are stored inline in the
    /// drive's metadata file instead of a separate shard file.
    pub inline_limit: usize,
    /// Multipart uploads older than this are removed (with their parts) by a background task.
    pub multipart_expiry: Duration,
    /// How often that task looks for stale uploads (it also runs once at start-up).
    pub multipart_cleanup_interval: Duration,
    /// Pause between two passes of the background scanner, which reads every object and heals
    /// missing or corrupt shards; `None` (or zero) turns the scanner off. The first pass starts
    /// after this pause too, but at most [`SCAN_FIRST_DELAY`] after start-up.
    pub scan_interval: Option<Duration>,
    /// Objects the scanner checks per second, at most (each check reads the whole object).
    /// Zero means no limit.
    pub scan_rate: u32,
    /// Every this many scanner passes, one is deep: it reads every object and verifies its
    /// bitrot hashes. The others are cheap (metadata and shard file sizes, no data). 1: every
    /// pass is deep; 0: none is. Default [`DEFAULT_DEEP_SCAN_EVERY`].
    pub deep_scan_every: u32,
    /// In a cluster every node serves every set, and one scanner per set is enough: with
    /// `Some((i, n))` this node scans only the sets whose index modulo `n` is `i` (e.g. its
    /// position among `n` nodes). `None` scans every set.
    pub scan_share: Option<(usize, usize)>,
    /// First wait before a heal that could not reach every drive is tried again; it doubles
    /// with each failed attempt up to [`ObjectConfig::heal_retry_max`].
    pub heal_retry_min: Duration,
    /// Longest wait between two attempts of a heal that keeps failing.
    pub heal_retry_max: Duration,
    /// Heals waiting for a retry, at most; beyond this new ones are dropped (and counted), and
    /// the scanner finds their objects on its next pass.
    pub heal_retry_limit: usize,
    /// A multipart upload that some drives hold but no quorum does is removed from them by a heal
    /// once it is older than this ([`DEFAULT_LEFTOVER_MIN_AGE`]).
    pub leftover_min_age: Duration,
    /// When the orphan sweep of each local drive runs (at open, then periodically) and how old
    /// a leftover of a killed write must be before it goes.
    pub orphan_sweep: quarry_disk::SweepSchedule,
    /// Objects per second a drive heal (after a replacement) and a heal job check at most
    /// (0: no limit). Default [`DEFAULT_HEAL_RATE`].
    pub heal_rate: u32,
    /// Bytes per second of object data they check at most (0: no limit).
    /// Default 0.
    pub heal_bytes_rate: u64,
    /// How often this node checks its own drives for one replaced while it runs (its
    /// `format.json` gone), to format it into its slot and heal it; `None` (or zero): only at
    /// start-up. Default [`DEFAULT_DRIVE_CHECK_INTERVAL`].
    pub drive_check_interval: Option<Duration>,
    /// The clock, id source and task spawner (the system's and tokio's unless a test injects its
    /// own: [`crate::runtime`]).
    pub runtime: crate::runtime::RuntimeHandle,
}

impl Default for ObjectConfig {
    fn default() -> Self {
        ObjectConfig {
            parity: None,
            block_size: quarry_erasure::DEFAULT_BLOCK_SIZE,
            inline_limit: 128 * 1024,
            multipart_expiry: DEFAULT_MULTIPART_EXPIRY,
            multipart_cleanup_interval: Duration::from_secs(5 * 60),
            scan_interval: Some(DEFAULT_SCAN_INTERVAL),
            scan_rate: DEFAULT_SCAN_RATE,
            scan_share: None,
            deep_scan_every: DEFAULT_DEEP_SCAN_EVERY,
            heal_retry_min: Duration::from_secs(1),
            heal_retry_max: Duration::from_secs(60),
            heal_retry_limit: 10_000,
            leftover_min_age: DEFAULT_LEFTOVER_MIN_AGE,
            orphan_sweep: quarry_disk::SweepSchedule::from_env(),
            heal_rate: DEFAULT_HEAL_RATE,
            heal_bytes_rate: 0,
            drive_check_interval: Some(DEFAULT_DRIVE_CHECK_INTERVAL),
            runtime: Default::default(),
        }
    }
}

/// Default cadence of deep scanner passes: one in this many (with the default interval of an
/// hour, a deep pass a day).
pub const DEFAULT_DEEP_SCAN_EVERY: u32 = 24;

/// Default pace of drive heals and heal jobs, in objects per second (0: unlimited).
pub const DEFAULT_HEAL_RATE: u32 = 0;

/// Default pause between two checks of a node's drives for one replaced while it runs.
pub const DEFAULT_DRIVE_CHECK_INTERVAL: Duration = Duration::from_secs(10);
