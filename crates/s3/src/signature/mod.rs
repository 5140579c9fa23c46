//! Request authentication (AWS Signature Version 4, and Version 2 for older clients) and payload
//! verification.
//!
//! Two steps, in the order a handler needs them:
//! 1. [`verify_request`] checks the signature of the request line and headers, carried either in the
//!    `Authorization` header or in a presigned URL's query, and says how the body is to be checked
//!    ([`PayloadCheck`]).
//! 2. [`verified_body`] wraps the raw body into the stream of object bytes, de-chunking
//!    `aws-chunked` bodies and verifying chunk signatures, the signed SHA-256 and any
//!    `x-amz-checksum-*` value. A mismatch is an error item that comes before the end of the stream,
//!    so a consumer that commits only at end-of-stream never commits unverified data.
//!
//! Files: `v4` (canonical request, signing), `presign` (query authentication), `streaming`
//! (the aws-chunked decoder, no IO), [`checksum`] (CRC32/CRC32C/CRC64NVME/SHA1/SHA256), `body`
//! (the stream adapter), `v2` (SigV2 header and presigned query; the body is not signed).
//!
//! `post` checks the SigV4 signature of a browser POST form's policy; the policy's conditions are
//! checked by the handler (`crate::post_object`).
//!
//! Not here: anonymous access, SigV4a, and Content-MD5 (its MD5 is computed with the ETag by the
//! handler). Session tokens (STS) are opened by the server before verification
//! (`crate::server::session`), which then checks the signature against the session's key only.

mod body;
pub mod checksum;
mod key_cache;
mod post;
mod presign;
mod streaming;
mod v2;
mod v4;

pub(crate) use post::{verify_post_signature, verify_post_signature_v2};
pub use streaming::ChunkSigner;

use bytes::Bytes;
use http::request::Parts;

use crate::error::{S3Error, S3ErrorCode};

/// The region Quarry answers for unless configured otherwise.
pub const DEFAULT_REGION: &str = "us-east-1";

/// An access key and its secret. `Debug` does not print the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl Credentials {
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Self {
        Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// Access keys beyond the configured ones (IAM users, service accounts, temporary
/// credentials), looked up per request.
pub trait KeyStore: Send + Sync + std::fmt::Debug {
    /// The credentials of an access key that may sign now; `None` when it does not exist, is
    /// inactive, belongs to a disabled user or has expired.
    fn lookup(&self, access_key: &str) -> Option<Credentials>;
}

/// Who may sign requests, and the region they must sign for.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// The root user's credentials (and any other keys configured with the same powers).
    pub credentials: Vec<Credentials>,
    /// Every other access key.
    pub keys: Option<std::sync::Arc<dyn KeyStore>>,
    /// The region in the credential scope; requests signed for another region are refused.
    pub region: String,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            credentials: Vec::new(),
            keys: None,
            region: DEFAULT_REGION.to_string(),
        }
    }
}

impl AuthConfig {
    /// The credentials with the default region.
    pub fn new(credentials: Vec<Credentials>) -> Self {
        AuthConfig {
            credentials,
            ..AuthConfig::default()
        }
    }

    /// The credentials of an access key: a configured one, else one of the key store's.
    pub fn find(&self, access_key: &str) -> Option<Credentials> {
        if let Some(c) = self.credentials.iter().find(|c| c.access_key == access_key) {
            return Some(c.clone());
        }
        self.keys.as_ref()?.lookup(access_key)
    }
}

/// How the body of an authenticated request must be verified (from `x-amz-content-sha256`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadCheck {
    /// `UNSIGNED-PAYLOAD`, or a presigned URL: only an `x-amz-checksum-*` header, if any, is checked.
    Unsigned,
    /// The body must hash to this SHA-256.
    Sha256([u8; 32]),
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: aws-chunked, every chunk signature verified.
    StreamingSigned { signer: ChunkSigner },
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks and a signed trailer.
    StreamingSignedTrailer { signer: ChunkSigner },
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: aws-chunked without signatures; checksum in the trailer.
    StreamingUnsignedTrailer {},
}

impl PayloadCheck {
    /// Whether the body is aws-chunked.
    pub fn is_chunked(&self) -> bool {
        !matches!(self, PayloadCheck::Unsigned | PayloadCheck::Sha256(_))
    }
}

/// A request whose signature checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub access_key: String,
    /// The service the request was signed for: `s3`, or `iam` / `sts` for the query APIs
    /// (SigV2 is always `s3`).
    pub service: &'static str,
    pub payload: PayloadCheck,
}

const ONE_MECHANISM: &str = "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, \
                             Signature query string parameter or the Authorization header should be specified";

/// Verifies the Authorization header (AWS4-HMAC-SHA256) or the presigned query (X-Amz-Algorithm,
/// X-Amz-Credential, X-Amz-Date, X-Amz-Expires (max 7 days), X-Amz-SignedHeaders, X-Amz-Signature),
/// or their SigV2 forms (`Authorization: AWS AccessKeyId:Signature`; `AWSAccessKeyId`, `Expires`,
/// `Signature` in the query) for a path-style request.
/// Requests with none -> AccessDenied (no anonymous access yet). `now` is passed in for testability.
pub fn verify_request(
    parts: &Parts,
    cfg: &AuthConfig,
    now: std::time::SystemTime,
) -> Result<Authenticated, S3Error> {
    verify(parts, cfg, now, None)
}

/// [`verify_request`] for a virtual-hosted-style request whose `Host` names `bucket`: SigV2 signs
/// the resource as `/bucket/path`, so it must know the bucket (SigV4 signs the Host header itself).
pub fn verify_virtual_host_request(
    parts: &Parts,
    cfg: &AuthConfig,
    now: std::time::SystemTime,
    bucket: &str,
) -> Result<Authenticated, S3Error> {
    verify(parts, cfg, now, Some(bucket))
}

fn verify(
    parts: &Parts,
    cfg: &AuthConfig,
    now: std::time::SystemTime,
    host_bucket: Option<&str>,
) -> Result<Authenticated, S3Error> {
    let query = v4::parse_query(parts.uri.query().unwrap_or(""));
    let presigned = presign::is_presigned_v4(&query);
    let presigned_v2 = v2::is_presigned(&query);
    match parts.headers.get(http::header::AUTHORIZATION) {
        Some(_) if presigned || presigned_v2 => {
            Err(S3Error::new(S3ErrorCode::InvalidArgument, ONE_MECHANISM))
        }
        Some(value) => {
            let value = value.to_str().map_err(|_| {
                S3Error::new(
                    S3ErrorCode::AuthorizationHeaderMalformed,
                    "The authorization header is malformed; it is not valid ASCII.",
                )
            })?;
            let value = value.trim();
            if value.starts_with(v4::ALGORITHM) {
                v4::verify_header_auth(parts, cfg, now, value)
            } else if value.starts_with(v2::SCHEME) {
                v2::verify_header(parts, cfg, now, value, host_bucket)
            } else if value.starts_with("AWS4-ECDSA-P256-SHA256") {
                Err(S3Error::new(
                    S3ErrorCode::NotImplemented,
                    "Signature Version 4A (AWS4-ECDSA-P256-SHA256) is not supported.",
                ))
            } else {
                Err(S3Error::new(S3ErrorCode::InvalidArgument, "Unsupported Authorization Type"))
            }
        }
        None if presigned && presigned_v2 => {
            Err(S3Error::new(S3ErrorCode::InvalidArgument, ONE_MECHANISM))
        }
        None if presigned => presign::verify_presigned(parts, cfg, now, &query),
        None if presigned_v2 => v2::verify_presigned(parts, cfg, now, host_bucket),
        None => Err(S3Error::new(
            S3ErrorCode::AccessDenied,
            "Access Denied. Anonymous requests are not supported; sign the request with AWS Signature Version 4 or 2.",
        )),
    }
}

/// Wraps the raw request body into the stream of object bytes: de-chunks aws-chunked bodies,
/// verifies each chunk signature (and the trailer signature), verifies the signed sha256 at end of
/// stream, verifies x-amz-checksum-{crc32,crc32c,crc64nvme,sha1,sha256} given as a header or as a
/// trailer (x-amz-trailer names it). On any mismatch the stream yields
/// `Err(std::io::Error::other(S3Error{..}))` BEFORE yielding end-of-stream (and ends after it).
/// Memory is bounded: data is passed through as it arrives; framing lines are at most 4 KiB and
/// chunks at most 16 MiB.
///
/// Errors here (before any byte is read) are bad or inconsistent headers: several checksums,
/// an undecodable checksum value, a trailer without a trailer payload mode, a chunked body without
/// `x-amz-decoded-content-length`.
pub fn verified_body<S>(
    parts: &Parts,
    auth: &Authenticated,
    body: S,
) -> Result<impl futures::Stream<Item = std::io::Result<Bytes>> + Send + 'static, S3Error>
where
    S: futures::Stream<Item = std::io::Result<Bytes>> + Send + 'static,
{
    body::new(parts, auth, body, ChecksumSlot::default())
}

/// [`verified_body`], and a slot that holds the verified `x-amz-checksum-*` value (from a header
/// or a trailer) once the stream has ended without error.
pub fn verified_body_with_checksum<S>(
    parts: &Parts,
    auth: &Authenticated,
    body: S,
) -> Result<
    (
        impl futures::Stream<Item = std::io::Result<Bytes>> + Send + 'static,
        ChecksumSlot,
    ),
    S3Error,
>
where
    S: futures::Stream<Item = std::io::Result<Bytes>> + Send + 'static,
{
    let slot = ChecksumSlot::default();
    Ok((body::new(parts, auth, body, slot.clone())?, slot))
}

/// The checksum a body verifier checked: empty until the body has ended and the value matched.
#[derive(Debug, Clone, Default)]
pub struct ChecksumSlot(
    std::sync::Arc<std::sync::Mutex<Option<(checksum::ChecksumAlgorithm, String)>>>,
);

impl ChecksumSlot {
    /// The algorithm and its value as S3 shows it (base64), once verified.
    pub fn get(&self) -> Option<(checksum::ChecksumAlgorithm, String)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, algorithm: checksum::ChecksumAlgorithm, digest: &[u8]) {
        use base64::Engine as _;
        let value = base64::engine::general_purpose::STANDARD.encode(digest);
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((algorithm, value));
    }
}

/// The object size the client declared: x-amz-decoded-content-length for aws-chunked bodies (a
/// `STREAMING-*` x-amz-content-sha256, the one thing that makes the body chunk-framed), else
/// Content-Length. `None` when the client did not say (`Transfer-Encoding: chunked`).
pub fn declared_size(parts: &Parts) -> Option<u64> {
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let chunked = header("x-amz-content-sha256").is_some_and(|v| v.starts_with("STREAMING-"));
    let name = if chunked {
        "x-amz-decoded-content-length"
    } else {
        "content-length"
    };
    header(name)?.parse().ok()
}

/// Recovers an S3Error from an io::Error produced by verified_body (downcast), if it is one.
pub fn s3_error_of(e: &std::io::Error) -> Option<S3Error> {
    e.get_ref()?.downcast_ref::<S3Error>().cloned()
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
