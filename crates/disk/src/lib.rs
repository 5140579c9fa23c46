//! One local drive: the on-disk layout, the versioned metadata format, atomic commit and shard files.
//!
//! The object layer sees every drive through the [`Drive`] trait. [`LocalDrive`] implements it on a
//! directory of the local filesystem; `quarry-net`'s `RemoteDrive` implements it on a peer.
//! This crate knows nothing about erasure coding beyond the fields it stores in [`ObjectMeta`]: it moves
//! bytes and metadata, validates every name before it builds a path, and commits atomically.
//!
//! Layout of one drive (see DESIGN.md):
//! ```text
//! <drive>/.quarry.sys/format.json            deployment id, layout, this drive's id and position
//! <drive>/.quarry.sys/tmp/<uuid>/             in-flight writes; swept at start-up
//! <drive>/.quarry.sys/buckets/<bucket>/<name>  bucket configuration blobs (cors, ...)
//! <drive>/.quarry.sys/multipart/<hash>/<upload-id>/   multipart uploads (see [`multipart`])
//! <drive>/<bucket>/<key>/quarry.meta          the key's version journal, newest first (see [`journal`])
//! <drive>/<bucket>/<key>/<data-dir-uuid>/part.<N>   shard file: per block [blake3 (32 B) | chunk];
//!                                             one data dir per version that is not inline
//! <drive>/<bucket>/<prefix>/.quarry.dir/      the object of a key ending in '/' ("folder marker")
//! ```
//!
//! Key segments may not be `quarry.meta` nor begin with `.quarry.` (see [`path`]), so layout
//! names and keys never collide.
//!
//! A process killed mid-commit or mid-delete can leave a data dir no `quarry.meta` names, or a
//! `.quarry.tmp.*` file, in an object directory: [`LocalDrive::sweep_orphans`] removes them once
//! they are older than a minimum age, and [`LocalDrive::open`] starts it in the background, at
//! start-up and then periodically ([`SweepSchedule`]).
//!
//! The data dir of a version an overwrite or a delete replaced is not removed at once: it stays
//! at its path until no read has used it for [`SweepSchedule::retired_grace`], so a GET that
//! resolved that version before the change reads it to the end (`local/retired.rs`).

mod drive;
pub mod format;
pub mod journal;
mod local;
pub mod meta;
pub mod multipart;
pub mod path;

pub use drive::{
    DiskInfo, Drive, DriveError, FrameRegion, ShardWriter, VolInfo, WalkEntry, WalkOptions,
};

/// The bitrot hash (blake3-256) in front of each chunk of a shard file: a frame is
/// `[hash (FRAME_HASH_LEN B) | chunk]` (quarry-erasure's `bitrot`, which frames and checks them).
pub const FRAME_HASH_LEN: usize = 32;
pub use format::FormatV1;
pub use journal::{version_name, MetaJournal};
pub use local::{
    list_cache_figures, prepare_root, retired_figures, set_list_cache_budget, validate_config_name,
    ListCacheFigures, LocalDrive, RetiredFigures, SweepReport, SweepSchedule,
    DEFAULT_LIST_CACHE_BUDGET, DEFAULT_ORPHAN_MIN_AGE, DEFAULT_ORPHAN_SWEEP_INTERVAL,
    DEFAULT_RETIRED_GRACE, MAX_BUCKET_CONFIG, ORPHAN_MIN_AGE_ENV, SYSTEM_CONFIG,
};
pub use meta::{
    ErasureInfo, ObjectMeta, PartInfo, META_UPDATED_HEADER, META_VERSION, META_VERSION_MIN,
    SSE_FORMAT_HEADER,
};
pub use multipart::{PartMeta, UploadMeta, UPLOAD_META_VERSION};
