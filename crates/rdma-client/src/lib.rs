//! S3 over RDMA, the client's side (DESIGN.md, "S3 over RDMA to clients").
//!
//! A client connects one RC queue pair to a Quarry node through a signed S3 request (its QPN,
//! GID, PSN and MTU out, the node's back, with a connection id and a token key), registers its
//! buffers once, and then makes ordinary SigV4-signed S3 requests that carry a token naming a
//! buffer ([`token`]): the node RDMA-WRITEs a GET's bytes into it, RDMA-READs a PUT's bytes out
//! of it, and answers the HTTP request with headers only.
//!
//! ```no_run
//! # async fn demo() -> Result<(), quarry_rdma_client::ClientError> {
//! use quarry_rdma_client::{ClientConfig, RdmaClient};
//! let client = RdmaClient::connect(ClientConfig::new(
//!     "http://10.55.0.1:9000", "ACCESS", "SECRET",
//! ).local_addr("10.55.0.9".parse().unwrap())).await?;
//! let mut buf = client.register(8 << 20)?;
//! let got = client.get_into(&mut buf, "bucket", "key", None).await?;
//! let bytes = &buf.as_slice()[..got.len as usize];
//! # let _ = bytes;
//! # Ok(()) }
//! ```
//!
//! Without the `client` feature only [`token`] is built: the format the server shares.

pub mod token;

#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
pub use client::*;
