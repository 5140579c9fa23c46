//! `quarry-tls`: TLS for Quarry, on rustls with the aws-lc-rs provider.
//!
//! What it is for:
//! - [`certs`]: a certificate directory in MinIO's layout (`public.crt`, `private.key`, one
//!   subdirectory per extra SNI domain, `CAs/`), read and checked with precise errors;
//! - [`store`]: the certificates a running server uses, reloaded when the files change or when
//!   asked (SIGHUP), and the rustls configuration of the S3 listener (TLS 1.3 and 1.2, ALPN
//!   http/1.1);
//! - [`internode`]: the configurations of internode mutual TLS (TLS 1.3, ALPN
//!   [`ALPN_INTERNODE`], peers verified against the cluster's CA both ways);
//! - [`generate`]: a self-signed CA and a certificate signed by it, for trials
//!   (`quarry admin cert generate`);
//! - [`insecure`]: a client verifier that accepts any certificate, for tools that are told to
//!   (`quarry-bench --insecure`), never used otherwise.
//!
//! What it is not: it opens no socket and serves nothing; the S3 server, quarry-net and the binary wrap
//! their own connections with the configurations made here.
#![forbid(unsafe_code)]

pub mod certs;
pub mod generate;
pub mod insecure;
pub mod internode;
pub mod store;

pub use certs::{CertSet, TlsError};
pub use internode::{InternodeConfigs, ALPN_INTERNODE};
pub use rustls;
pub use rustls_pki_types;
pub use store::{client_config_trusting, CertStore, Configs, ALPN_HTTP1};
pub use tokio_rustls;
