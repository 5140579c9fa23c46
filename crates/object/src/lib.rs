//! The object layer: erasure sets over [`quarry_disk::Drive`]s, streaming PUT and GET, quorum,
//! listing as a sorted merge across drives, buckets, and heal on read.
//!
//! The S3 front end calls it through the [`ObjectLayer`] trait and never sees a drive. This crate
//! does no HTTP and knows nothing of where a drive is: a local directory or a peer are the same.
//! It is not the place for S3 wire details (headers, XML, signatures): those stay in crates/s3.

mod api;
mod config;
mod error;
mod get;
mod heal;
mod list;
mod names;
mod nslock;
mod put;
mod quorum;
mod server;
mod set;

pub use api::*;
pub use config::ObjectConfig;
pub use error::{Error, Result};
pub use heal::HealResult;
pub use names::{check_bucket_name, check_key, MAX_KEY_LEN};
pub use server::{ErasureServer, Layout, Readiness};
pub use set::ErasureSet;
