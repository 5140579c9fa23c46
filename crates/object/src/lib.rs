//! The object layer: erasure sets over [`quarry_disk::Drive`]s, streaming PUT and GET, quorum,
//! listing as a sorted merge across drives, buckets, and heal on read.
//!
//! The S3 front end calls it through the [`ObjectLayer`] trait and never sees a drive. This crate
//! does no HTTP and knows nothing of where a drive is: a local directory or a peer are the same.
//! It is not the place for S3 wire details (headers, XML, signatures): those stay in crates/s3.

mod api;
mod bucket_config;
mod config;
mod config_cache;
mod copy;
pub mod drive_heal;
mod drive_watch;
mod error;
mod get;
mod heal;
mod heal_bucket;
mod heal_job;
mod heal_queue;
pub mod info;
mod list;
mod merge;
mod meta_update;
mod multipart;
mod names;
mod nslock;
mod put;
mod quorum;
pub mod runtime;
mod scanner;
mod server;
mod set;
mod sse;
mod stats;
pub mod topology;
mod versions;

pub use api::*;
pub use bucket_config::{ConfigEnvelope, CONFIG_FORMAT_VERSION};
pub use config::{
    ObjectConfig, DEFAULT_DEEP_SCAN_EVERY, DEFAULT_DRIVE_CHECK_INTERVAL, DEFAULT_HEAL_RATE,
    DEFAULT_LEFTOVER_MIN_AGE, DEFAULT_MULTIPART_EXPIRY, DEFAULT_SCAN_INTERVAL, DEFAULT_SCAN_RATE,
    SCAN_FIRST_DELAY,
};
pub use config_cache::CONFIG_CACHE_TTL;
pub use error::{Error, Result};
pub use heal_job::{HealJobPhase, HealJobStats, HealJobStatus, KEPT_JOBS, VERIFY_LIST_LIMIT};
pub use names::{check_bucket_name, check_key, MAX_KEY_LEN};
pub use nslock::{LockGuard, Locker, NsGuard, NsLock};
/// The data path's figures as [`LayerStats`] carries them.
pub use quarry_buf::{BufPoolStats, DataPlaneStats, PeerSnapshot, LATENCY_BUCKETS};
/// The drives' kept listings' figures as [`LayerStats`] carries them.
pub use quarry_disk::{ListCacheFigures, RetiredFigures};
pub use runtime::{Runtime, RuntimeHandle, TokioRuntime};
pub use server::{ErasureServer, Layout, Readiness};
pub use set::ErasureSet;
pub use stats::{
    DataPlaneFigures, DriveState, HealEntryState, HealQueueEntry, LayerStats, ScanStats,
    HEAL_QUEUE_SHOWN,
};
