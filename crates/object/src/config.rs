//! Settings of the object layer.

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
}

impl Default for ObjectConfig {
    fn default() -> Self {
        ObjectConfig {
            parity: None,
            block_size: quarry_erasure::DEFAULT_BLOCK_SIZE,
            inline_limit: 128 * 1024,
        }
    }
}
