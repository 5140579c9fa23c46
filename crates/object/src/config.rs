//! Settings of the object layer.

use std::time::Duration;

/// How long an unfinished multipart upload is kept by default.
pub const DEFAULT_MULTIPART_EXPIRY: Duration = Duration::from_secs(24 * 60 * 60);

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
}

impl Default for ObjectConfig {
    fn default() -> Self {
        ObjectConfig {
            parity: None,
            block_size: quarry_erasure::DEFAULT_BLOCK_SIZE,
            inline_limit: 128 * 1024,
            multipart_expiry: DEFAULT_MULTIPART_EXPIRY,
            multipart_cleanup_interval: Duration::from_secs(5 * 60),
        }
    }
}
