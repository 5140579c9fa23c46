//! The S3 HTTP front end: routing, SigV4, XML and S3 errors. It calls the
//! [`quarry_object::ObjectLayer`] trait and knows nothing about drives or erasure coding.
//!
//! Where things are:
//! - [`server`]: the listener, request ids, the per-request log line, authentication, dispatch.
//! - [`router`]: method + path + query + headers -> one [`router::Endpoint`].
//! - `bucket`, `list`, `put`, `get`, `delete`: one file per family of operations.
//! - [`xml`]: the documents S3 sends and receives; [`error`]: S3 error codes and the error document.
//! - [`signature`]: SigV4 (headers, presigned URLs, streaming chunks, checksums).

mod api_error;
mod body;
mod bucket;
mod delete;
pub mod error;
mod get;
mod list;
mod put;
pub mod router;
pub mod server;
pub mod signature;
pub mod xml;

#[cfg(test)]
mod tests;

pub use server::{app, serve, AlwaysReady, ReadinessProbe, ReadinessReport, S3Config};
pub use signature::Credentials;
