//! The S3 HTTP front end: routing, SigV4, XML and S3 errors. It calls the
//! [`quarry_object::ObjectLayer`] trait and knows nothing about drives or erasure coding.
//!
//! Where things are:
//! - [`server`]: the listener, request ids, the per-request log line, authentication, dispatch.
//! - [`router`]: method + path + query + headers -> one [`router::Endpoint`], carrying the
//!   operation's bucket, key and parsed query parameters.
//! - `bucket`, `list`, `put`, `get`, `copy`, `delete`, `multipart`, `acl`: one file per family of
//!   operations; `headers`: the request-header checks and metadata headers they share.
//! - `api_error`: the error a handler returns, and the mapping of every object-layer error to
//!   its S3 code; `body`: request and response bodies (byte counts, the per-request log line).
//! - `cors`: bucket CORS configuration, the unauthenticated preflight, CORS response headers.
//! - `post_object`: browser form uploads, authenticated by their signed POST policy.
//! - [`admin`]: the admin API under `/quarry/admin/v1/` (heal, heal status, info, drives), root
//!   user only, JSON.
//! - `metrics`: request counters and latency histograms, served as `/metrics` (Prometheus text).
//! - [`xml`]: the documents S3 sends and receives; [`error`]: S3 error codes and the error document.
//! - [`signature`]: SigV4 (headers, presigned URLs, streaming chunks, checksums).
//! - [`authz`]: the IAM action and resource of every endpoint, and the one authorization
//!   decision per request (made in `server`, before the handler).

mod acl;
pub mod acl_config;
mod acl_eval;
pub mod admin;
mod api_error;
mod attributes;
pub mod authz;
mod body;
mod bucket;
pub mod bucket_policy;
mod config_cache;
mod copy;
mod cors;
mod delete;
pub mod error;
mod get;
mod headers;
pub mod iam;
pub mod kms_rotate;
mod lifecycle;
pub mod lifecycle_worker;
mod list;
mod metrics;
pub mod metrics_history;
mod multipart;
mod object_lock;
mod post_object;
mod put;
pub mod rdma;
pub mod router;
pub mod server;
pub mod signature;
pub mod sse;
mod tagging;
mod versioning;
pub mod xml;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;

pub use acl_config::ObjectOwnership;
pub use body::BodyTimeouts;
pub use metrics::MetricsAccess;
pub use server::{
    app, app_with_timeouts, serve, serve_router, serve_tls, serve_with_limits, AlwaysReady,
    ReadinessProbe, ReadinessReport, S3Config, ServeLimits, TlsConfigSource,
};
pub use signature::Credentials;
