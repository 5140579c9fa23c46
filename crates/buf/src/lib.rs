//! `quarry-buf`, the ground floor of the data path: [`BufPool`], fixed-size, 4 KiB-aligned buffers
//! carved from a few large slabs allocated once; [`PooledBuf`], one of them (or a piece of one);
//! and the plain [`figures`] every layer reports about them.
//!
//! Shard reads land in pooled buffers (a drive's read, a peer's RDMA WRITE or a TCP read), the
//! decoder reads them in place, and HTTP bodies are made of them (DESIGN.md, "Buffers").
//!
//! What it is not: it does no IO and knows nothing of drives, peers or objects; `quarry-disk`,
//! `quarry-net` and `quarry-object` all take their buffers from here. Registering slabs with an
//! RDMA device (feature `verbs`: [`BufPool::registered`], lending and posting registered memory)
//! goes through `quarry-verbs`, the only crate with FFI; without it every pool is plain memory.
#![forbid(unsafe_code)]

pub mod figures;
mod pool;

pub use figures::{ClientRdmaFigures, DataPlaneStats, PeerSnapshot, LATENCY_BUCKETS};
pub use pool::*;
