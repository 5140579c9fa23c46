//! S3 over RDMA to clients: a GET's bytes RDMA-WRITten straight into the client's registered
//! buffer, a PUT's RDMA-READ out of it, the HTTP exchange carrying headers only. The wire
//! exchange and the token are specified in DESIGN.md ("S3 over RDMA to clients").
//!
//! - `POST /quarry/rdma/v1/connections`, signed like any S3 request, body
//!   `{"version":1,"endpoint":"<hex of the client's QP endpoint>"}`: the node creates an RC queue
//!   pair for the client, connects it, and answers `{"version":1,"connection":"<16 hex>",
//!   "endpoint":"<hex>","key":"<64 hex>","max_transfer":N}`. The connection belongs to the
//!   access key that signed; `key` is the connection's token key, known to the client and this
//!   node only (it travels over TLS when the listener has certificates).
//! - `DELETE /quarry/rdma/v1/connections/<id>`: closes one of the caller's connections.
//! - A GetObject, PutObject or UploadPart with `x-amz-rdma-token` (see [`Token`]): authorized as
//!   the same request without it (the token grants nothing by itself), then the bytes move over
//!   the connection; the answer carries `x-amz-rdma-bytes` (bytes written to the buffer, or read
//!   from it) and no body.
//!
//! The verbs side is a [`ClientRdma`] (implemented by quarry-net over the node's device and
//! registered pool, wired by bin/quarry); a node without one answers every token and connection
//! request `NotImplemented`, never silently over TCP.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::request::Parts;
use http::{HeaderValue, Method, StatusCode};
use quarry_object::ByteStream;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::api_error::{ApiError, ApiResult};
use crate::error::S3ErrorCode;
use crate::router::Endpoint;
use crate::server::ReqCtx;

pub use quarry_rdma_client::token::{
    RemoteSpan, Token, BYTES_HEADER, KEY_LEN, MAX_TOKEN_LIFETIME_SECS, PROTOCOL_VERSION,
    TOKEN_HEADER,
};

/// A new client connection, as [`ClientRdma::connect`] made it.
#[derive(Clone)]
pub struct RdmaConnection {
    pub id: u64,
    /// The node's QP endpoint, encoded (quarry-verbs' `QpEndpoint`).
    pub endpoint: Vec<u8>,
    /// The connection's token key.
    pub key: [u8; KEY_LEN],
    /// The largest transfer one request may make on it.
    pub max_transfer: u64,
}

impl fmt::Debug for RdmaConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaConnection")
            .field("id", &format_args!("{:016x}", self.id))
            .field("max_transfer", &self.max_transfer)
            .finish_non_exhaustive()
    }
}

/// What a GET's transfer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Bytes known to be in the client's buffer, from its start (writes complete in order).
    pub written: u64,
    /// Why the transfer stopped early, if it did.
    pub error: Option<String>,
}

/// Why a connection request or a transfer was refused.
#[derive(Debug, thiserror::Error)]
pub enum RdmaRefusal {
    /// The connection does not exist (never made, closed, expired or broken).
    #[error("no such RDMA connection (closed, idle too long, or broken by an error)")]
    UnknownConnection,
    /// The connection belongs to another access key.
    #[error("the RDMA connection belongs to another access key")]
    NotOwner,
    /// Too many connections (of this key or of the node).
    #[error("{0}")]
    TooMany(String),
    /// The client's endpoint does not decode or cannot be connected to.
    #[error("{0}")]
    BadEndpoint(String),
    /// The device failed.
    #[error("{0}")]
    Device(String),
}

pub use quarry_buf::ClientRdmaFigures;

/// The node's RDMA endpoint for clients.
#[async_trait]
pub trait ClientRdma: Send + Sync + 'static {
    /// A new connection for `owner` (an access key) to the client's encoded QP endpoint.
    fn connect(&self, owner: &str, client_endpoint: &[u8]) -> Result<RdmaConnection, RdmaRefusal>;
    /// Closes connection `id` of `owner`.
    fn disconnect(&self, owner: &str, id: u64) -> Result<(), RdmaRefusal>;
    /// The owner and token key of connection `id`, if it is open.
    fn connection(&self, id: u64) -> Option<(String, [u8; KEY_LEN])>;
    /// Writes `data` into `to` from its start, in order, and answers once every write is
    /// complete (or what was done when one failed).
    async fn write(&self, id: u64, to: RemoteSpan, data: ByteStream) -> Delivered;
    /// The `from.len` bytes of `from`, read in blocks as the stream is polled; an error item
    /// when a read fails.
    fn read(&self, id: u64, from: RemoteSpan) -> Result<ByteStream, RdmaRefusal>;
    fn figures(&self) -> ClientRdmaFigures;
}

/// The plane, if the node has one (a cheap clone; `Debug` for [`crate::S3Config`]).
#[derive(Clone, Default)]
pub struct ClientRdmaHandle(pub Option<Arc<dyn ClientRdma>>);

impl fmt::Debug for ClientRdmaHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "ClientRdma(on)"
        } else {
            "ClientRdma(off)"
        })
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn plane(ctx: &ReqCtx) -> ApiResult<&Arc<dyn ClientRdma>> {
    ctx.state.client_rdma.0.as_ref().ok_or_else(|| {
        ApiError::new(
            S3ErrorCode::NotImplemented,
            "This node has no RDMA device for clients (S3 over RDMA needs QUARRY_RDMA and a device); send the request without x-amz-rdma-token to use HTTP.",
        )
    })
}

fn refusal(e: RdmaRefusal) -> ApiError {
    match e {
        RdmaRefusal::UnknownConnection => ApiError::new(S3ErrorCode::InvalidToken, e.to_string()),
        RdmaRefusal::NotOwner => ApiError::new(S3ErrorCode::AccessDenied, e.to_string()),
        RdmaRefusal::TooMany(m) => ApiError::new(S3ErrorCode::SlowDown, m),
        RdmaRefusal::BadEndpoint(m) => ApiError::new(S3ErrorCode::InvalidRequest, m),
        RdmaRefusal::Device(m) => ApiError::new(S3ErrorCode::InternalError, m),
    }
}

#[derive(Deserialize)]
struct ConnectBody {
    version: u32,
    endpoint: String,
}

#[derive(Serialize)]
struct ConnectAnswer {
    version: u32,
    connection: String,
    endpoint: String,
    key: String,
    max_transfer: u64,
}

/// `POST /quarry/rdma/v1/connections`.
pub(crate) async fn connect(ctx: &ReqCtx) -> ApiResult<Response> {
    let plane = plane(ctx)?.clone();
    let body = ctx.small_body().await?;
    let req: ConnectBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            S3ErrorCode::InvalidRequest,
            format!("the connection request is not {{\"version\":1,\"endpoint\":\"<hex>\"}}: {e}"),
        )
    })?;
    if req.version != PROTOCOL_VERSION {
        return Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            format!(
                "RDMA protocol version {} is not spoken here (this node speaks {PROTOCOL_VERSION})",
                req.version
            ),
        ));
    }
    let endpoint = hex::decode(req.endpoint.trim()).map_err(|_| {
        ApiError::new(
            S3ErrorCode::InvalidRequest,
            "the QP endpoint is not hexadecimal",
        )
    })?;
    let c = plane
        .connect(&ctx.auth.access_key, &endpoint)
        .map_err(refusal)?;
    tracing::info!(
        connection = %format_args!("{:016x}", c.id),
        access_key = %ctx.auth.access_key,
        "RDMA: client connected"
    );
    let answer = ConnectAnswer {
        version: PROTOCOL_VERSION,
        connection: format!("{:016x}", c.id),
        endpoint: hex::encode(&c.endpoint),
        key: hex::encode(c.key),
        max_transfer: c.max_transfer,
    };
    let body = serde_json::to_vec(&answer).map_err(|_| S3ErrorCode::InternalError)?;
    let mut response = Response::new(Body::from(body));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// `DELETE /quarry/rdma/v1/connections/<id>`.
pub(crate) async fn disconnect(ctx: &ReqCtx, id: &str) -> ApiResult<Response> {
    let plane = plane(ctx)?;
    let id = (id.len() == 16)
        .then(|| u64::from_str_radix(id, 16).ok())
        .flatten()
        .ok_or_else(|| {
            ApiError::new(
                S3ErrorCode::InvalidRequest,
                "a connection id is 16 hexadecimal digits",
            )
        })?;
    plane
        .disconnect(&ctx.auth.access_key, id)
        .map_err(refusal)?;
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// A request's verified token: the transfer it may make.
pub(crate) struct Transfer {
    /// A GetObject (else a PutObject or UploadPart).
    get: bool,
    plane: Arc<dyn ClientRdma>,
    connection: u64,
    span: RemoteSpan,
}

/// The token of a request, if it has one, verified against the request and the caller: the
/// connection exists and belongs to the access key that signed, the MAC matches, the token has
/// not expired, and the operation is one that moves object bytes. Called after authorization.
pub(crate) fn verify(
    ctx: &ReqCtx,
    endpoint: &Endpoint,
    parts: &Parts,
) -> ApiResult<Option<Transfer>> {
    let Some(raw) = parts.headers.get(TOKEN_HEADER) else {
        return Ok(None);
    };
    let plane = plane(ctx)?.clone();
    if !matches!(
        endpoint,
        Endpoint::GetObject { .. } | Endpoint::PutObject { .. } | Endpoint::UploadPart { .. }
    ) {
        return Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "x-amz-rdma-token applies to GetObject, PutObject and UploadPart only",
        ));
    }
    let bad = |m: &str| ApiError::new(S3ErrorCode::InvalidToken, m.to_owned());
    let token = raw.to_str().ok().and_then(Token::parse).ok_or_else(|| {
        bad("x-amz-rdma-token is not v1:<connection>:<address>:<rkey>:<length>:<expires>:<mac>")
    })?;
    let (owner, key) = plane
        .connection(token.connection)
        .ok_or_else(|| refusal(RdmaRefusal::UnknownConnection))?;
    if !bool::from(owner.as_bytes().ct_eq(ctx.auth.access_key.as_bytes())) {
        return Err(refusal(RdmaRefusal::NotOwner));
    }
    let range = parts
        .headers
        .get(http::header::RANGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let want = Token::mac(
        &key,
        token.connection,
        &token.span,
        token.expires,
        &quarry_rdma_client::token::Request {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query().unwrap_or(""),
            range,
        },
    );
    if !bool::from(want.ct_eq(&token.mac)) {
        return Err(bad(
            "the token's MAC does not match this request under the connection's key",
        ));
    }
    let now = unix_now();
    if token.expires < now {
        return Err(ApiError::new(
            S3ErrorCode::ExpiredToken,
            format!("the RDMA token expired {} s ago", now - token.expires),
        ));
    }
    if token.expires > now + MAX_TOKEN_LIFETIME_SECS {
        return Err(bad("the RDMA token expires more than 24 hours ahead"));
    }
    Ok(Some(Transfer {
        get: matches!(endpoint, Endpoint::GetObject { .. }),
        plane,
        connection: token.connection,
        span: token.span,
    }))
}

/// A PUT's body from the client's buffer: the request's body must be empty, and its declared
/// length becomes the token's, so the write path (signature payload hash, Content-MD5,
/// checksums, encryption) checks the bytes read as it checks a body.
pub(crate) fn put_body(transfer: &Transfer, parts: &mut Parts) -> ApiResult<Body> {
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let streaming = parts
        .headers
        .get("x-amz-content-sha256")
        .is_some_and(|v| v.as_bytes().starts_with(b"STREAMING-"));
    let declared_body = parts.headers.contains_key(CONTENT_LENGTH) && declared != Some(0);
    if declared_body || streaming || parts.headers.contains_key("transfer-encoding") {
        return Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "a PUT with x-amz-rdma-token has no body (Content-Length: 0 or none, not aws-chunked): its bytes are read from the registered buffer",
        ));
    }
    let stream = transfer
        .plane
        .read(transfer.connection, transfer.span)
        .map_err(refusal)?;
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(transfer.span.len));
    Ok(Body::from_stream(stream))
}

/// The answer of a request with a token, once its handler answered: a GET's body delivered
/// into the buffer ([`deliver_get`]); a PUT's answer saying how many bytes were read.
pub(crate) async fn finish(transfer: Transfer, mut response: Response) -> ApiResult<Response> {
    if transfer.get {
        return deliver_get(transfer, response).await;
    }
    if response.status().is_success() {
        response
            .headers_mut()
            .insert(BYTES_HEADER, HeaderValue::from(transfer.span.len));
    }
    Ok(response)
}

/// A GET's answer delivered into the client's buffer: the body RDMA-written from its start,
/// then the same headers without a body and `x-amz-rdma-bytes`. Answers without a body (304,
/// 412) go as they are. A body larger than the buffer is refused before a byte moves; a
/// transfer that fails says in `x-amz-rdma-bytes` how many bytes of the buffer are valid.
async fn deliver_get(transfer: Transfer, response: Response) -> ApiResult<Response> {
    if !matches!(
        response.status(),
        StatusCode::OK | StatusCode::PARTIAL_CONTENT
    ) {
        return Ok(response);
    }
    let (mut parts, body) = response.into_parts();
    let length = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            tracing::error!("a GET answer without Content-Length cannot go over RDMA");
            ApiError::from(S3ErrorCode::InternalError)
        })?;
    if length > transfer.span.len {
        let mut e = ApiError::new(
            S3ErrorCode::InvalidRequest,
            format!(
                "the registered buffer holds {} bytes; the answer has {length}",
                transfer.span.len
            ),
        );
        e.headers
            .push((http::HeaderName::from_static(BYTES_HEADER), 0u64.into()));
        return Err(e);
    }
    let stream: ByteStream = Box::pin(
        body.into_data_stream()
            .map(|r| r.map_err(std::io::Error::other)),
    );
    let span = RemoteSpan {
        len: length,
        ..transfer.span
    };
    let done = transfer
        .plane
        .write(transfer.connection, span, stream)
        .await;
    if done.error.is_some() || done.written != length {
        let why = done
            .error
            .unwrap_or_else(|| "the object ended early".into());
        tracing::warn!(
            connection = %format_args!("{:016x}", transfer.connection),
            written = done.written,
            length,
            error = %why,
            "RDMA: GET transfer failed"
        );
        let mut e = ApiError::new(
            S3ErrorCode::InternalError,
            format!(
                "the RDMA transfer stopped after {} of {length} bytes: {why}",
                done.written
            ),
        );
        e.headers.push((
            http::HeaderName::from_static(BYTES_HEADER),
            done.written.into(),
        ));
        return Err(e);
    }
    parts
        .headers
        .insert(CONTENT_LENGTH, HeaderValue::from(0u64));
    parts
        .headers
        .insert(BYTES_HEADER, HeaderValue::from(done.written));
    Ok(Response::from_parts(parts, Body::empty()))
}

/// Whether `method path` is a connection request: `Some(None)` to connect, `Some(Some(id))`
/// to close one.
pub(crate) fn parse_route(method: &Method, path: &str) -> Option<Option<String>> {
    let rest = path.strip_prefix(quarry_rdma_client::token::CONNECTIONS_PATH)?;
    match (method, rest) {
        (&Method::POST, "" | "/") => Some(None),
        (&Method::DELETE, id) if id.len() > 1 && id.starts_with('/') => {
            Some(Some(id[1..].to_owned()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_routes() {
        assert_eq!(
            parse_route(&Method::POST, "/quarry/rdma/v1/connections"),
            Some(None)
        );
        assert_eq!(
            parse_route(
                &Method::DELETE,
                "/quarry/rdma/v1/connections/00000000000000ff"
            ),
            Some(Some("00000000000000ff".into()))
        );
        assert_eq!(
            parse_route(&Method::GET, "/quarry/rdma/v1/connections"),
            None
        );
        assert_eq!(
            parse_route(&Method::DELETE, "/quarry/rdma/v1/connections/"),
            None
        );
        assert_eq!(
            parse_route(&Method::POST, "/quarry/rdma/v2/connections"),
            None
        );
    }
}
