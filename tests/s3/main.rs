//! S3 integration tests against a real `quarry` process. One binary, one module per area; every
//! test starts its own server (see `quarry_integration::TestServer`), so they run in parallel.
//!
//! Run `cargo build -p quarry` first, then `cargo nextest run -p quarry-integration` (or `cargo test`).

mod acl;
mod admin;
mod auth;
mod auth_matrix;
mod bench;
mod bitrot;
mod browser;
mod bucket_policy;
mod buckets;
mod clients;
mod cluster;
mod conditional;
mod console;
mod copy;
mod crash;
mod descriptors;
mod erasure;
mod heal;
mod iam;
mod lifecycle;
mod limits;
mod listing;
mod metrics;
mod multipart;
mod object_lock;
mod objects;
mod ops;
mod port_flood;
mod ranges;
mod rdma;
mod restart;
mod secrets;
mod sigv2;
mod sse;
mod sts;
mod tagging;
mod tls;
mod topology;
mod versioning;
