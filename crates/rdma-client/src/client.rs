//! [`RdmaClient`]: one RC connection to one Quarry node, and the S3 requests that use it.

use std::net::IpAddr;
use std::ops::Range;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use quarry_verbs::{
    Access, ConnectOptions, Context, MrBuf, ProtectionDomain, QpCaps, QpEndpoint, QueuePair,
};
use serde::{Deserialize, Serialize};

use crate::token::{
    RemoteSpan, Request, Token, BYTES_HEADER, CONNECTIONS_PATH, KEY_LEN, PROTOCOL_VERSION,
    TOKEN_HEADER,
};

/// The port the client's queue pair uses.
const PORT: u8 = 1;
/// How long a token is valid after it is made.
const TOKEN_LIFETIME: Duration = Duration::from_secs(300);

/// Where and as whom to connect.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `http://host:port` (or `https://`) of the node's S3 listener.
    pub endpoint: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    /// The RDMA device (default: the first).
    pub device: Option<String>,
    /// The GID index of port 1 (default: the RoCE v2 GID of `local_addr`).
    pub gid_index: Option<u32>,
    /// This host's address on the RDMA network, to pick its GID.
    pub local_addr: Option<IpAddr>,
    /// How long one HTTP request may take.
    pub timeout: Duration,
}

impl ClientConfig {
    pub fn new(endpoint: &str, access_key: &str, secret_key: &str) -> ClientConfig {
        ClientConfig {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            access_key: access_key.to_owned(),
            secret_key: secret_key.to_owned(),
            region: "us-east-1".to_owned(),
            device: None,
            gid_index: None,
            local_addr: None,
            timeout: Duration::from_secs(60),
        }
    }

    pub fn region(mut self, region: &str) -> Self {
        region.clone_into(&mut self.region);
        self
    }

    pub fn device(mut self, device: &str) -> Self {
        self.device = Some(device.to_owned());
        self
    }

    pub fn gid_index(mut self, index: u32) -> Self {
        self.gid_index = Some(index);
        self
    }

    pub fn local_addr(mut self, addr: IpAddr) -> Self {
        self.local_addr = Some(addr);
        self
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("RDMA: {0}")]
    Verbs(#[from] quarry_verbs::Error),
    #[error("HTTP: {0}")]
    Http(#[from] reqwest::Error),
    /// The node answered an S3 error. `rdma_bytes`: on a failed GET, how many bytes at the
    /// start of the buffer are valid (the node's `x-amz-rdma-bytes`).
    #[error("{status} {code}: {message}")]
    S3 {
        status: u16,
        code: String,
        message: String,
        rdma_bytes: Option<u64>,
    },
    #[error("{0}")]
    Protocol(String),
}

impl ClientError {
    /// The S3 error code, if the node answered one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::S3 { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Memory registered with the client's device, which the node may write (GET) and read (PUT).
/// Register once, use for many requests.
///
/// While a request that names the buffer is in flight, the node's device may write into it:
/// read its bytes only after the request returned. A request future dropped before it returned
/// (a timeout, a cancelled task) may leave the node writing into the buffer for a while; do not
/// trust its content then until another request on it has returned.
pub struct RegisteredBuf {
    buf: MrBuf,
}

impl RegisteredBuf {
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_slice()
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// The whole buffer as the node's requests name it.
    pub fn span(&self) -> RemoteSpan {
        let r = self.buf.remote();
        RemoteSpan {
            addr: r.addr,
            rkey: r.rkey,
            len: r.len,
        }
    }
}

/// A GET delivered into a buffer.
#[derive(Debug, Clone)]
pub struct GetOutput {
    /// 200 or 206.
    pub status: u16,
    /// Bytes written at the start of the buffer.
    pub len: u64,
    pub etag: Option<String>,
    pub content_range: Option<String>,
    /// Every header of the answer.
    pub headers: Vec<(String, String)>,
}

/// A PUT read from a buffer.
#[derive(Debug, Clone)]
pub struct PutOutput {
    pub etag: Option<String>,
    pub version_id: Option<String>,
    /// Bytes the node read.
    pub len: u64,
}

#[derive(Serialize)]
struct ConnectBody<'a> {
    version: u32,
    endpoint: &'a str,
}

#[derive(Deserialize)]
struct ConnectAnswer {
    version: u32,
    connection: String,
    endpoint: String,
    key: String,
}

/// One RC connection to one node.
pub struct RdmaClient {
    config: ClientConfig,
    http: reqwest::Client,
    host: String,
    pd: ProtectionDomain,
    // Kept for the connection's life: the node writes and reads through it.
    _qp: QueuePair,
    connection: u64,
    key: [u8; KEY_LEN],
}

impl std::fmt::Debug for RdmaClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaClient")
            .field("endpoint", &self.config.endpoint)
            .field("connection", &format_args!("{:016x}", self.connection))
            .finish_non_exhaustive()
    }
}

/// What S3 path encoding leaves as it is, besides alphanumerics.
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn object_path(bucket: &str, key: &str) -> String {
    format!(
        "/{}/{}",
        utf8_percent_encode(bucket, PATH),
        utf8_percent_encode(key, PATH)
    )
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl RdmaClient {
    /// Opens the device, creates a queue pair, exchanges endpoints with the node through a
    /// signed `POST /quarry/rdma/v1/connections`, and connects.
    pub async fn connect(config: ClientConfig) -> Result<RdmaClient, ClientError> {
        let url = reqwest::Url::parse(&config.endpoint)
            .map_err(|e| ClientError::Protocol(format!("endpoint {:?}: {e}", config.endpoint)))?;
        let host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            _ => {
                return Err(ClientError::Protocol(format!(
                    "endpoint {:?} has no host",
                    config.endpoint
                )))
            }
        };
        let ctx = Context::open(config.device.as_deref())?;
        ctx.active_port(PORT)?;
        let gid = match config.gid_index {
            Some(i) => ctx.query_gid(PORT, i)?.ok_or_else(|| {
                ClientError::Protocol(format!("GID index {i} of {} is empty", ctx.name()))
            })?,
            None => ctx.select_roce_v2_gid(PORT, config.local_addr)?,
        };
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(64)?;
        let prepared = pd.create_rc_qp(&cq, &cq, PORT, &gid, QpCaps::default())?;
        let mine = hex::encode(prepared.endpoint().encode());
        let http = reqwest::Client::builder().timeout(config.timeout).build()?;
        let body = serde_json::to_vec(&ConnectBody {
            version: PROTOCOL_VERSION,
            endpoint: &mine,
        })
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let answer = send(
            &config,
            &http,
            &host,
            "POST",
            CONNECTIONS_PATH,
            "",
            &[("content-type", "application/json")],
            body,
        )
        .await?;
        let answer: ConnectAnswer = serde_json::from_slice(&answer.body)
            .map_err(|e| ClientError::Protocol(format!("the node's connection answer: {e}")))?;
        if answer.version != PROTOCOL_VERSION {
            return Err(ClientError::Protocol(format!(
                "the node speaks RDMA protocol version {}, this client {PROTOCOL_VERSION}",
                answer.version
            )));
        }
        let bad = |what: &str| ClientError::Protocol(format!("the node's {what} is malformed"));
        let theirs = hex::decode(&answer.endpoint).map_err(|_| bad("endpoint"))?;
        let theirs = QpEndpoint::decode(&theirs).map_err(|_| bad("endpoint"))?;
        let connection =
            u64::from_str_radix(&answer.connection, 16).map_err(|_| bad("connection id"))?;
        let mut key = [0u8; KEY_LEN];
        hex::decode_to_slice(&answer.key, &mut key).map_err(|_| bad("key"))?;
        let qp = prepared.connect(&theirs, &ConnectOptions::default())?;
        Ok(RdmaClient {
            config,
            http,
            host,
            pd,
            _qp: qp,
            connection,
            key,
        })
    }

    /// `len` bytes (at least 1) of registered memory the node may write and read.
    pub fn register(&self, len: usize) -> Result<RegisteredBuf, ClientError> {
        let region = self.pd.alloc_region(
            len.max(1),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )?;
        Ok(RegisteredBuf {
            buf: region.into_buf(),
        })
    }

    pub fn connection_id(&self) -> u64 {
        self.connection
    }

    /// The connection's token key (to make tokens by hand with [`Token::sign`]).
    pub fn token_key(&self) -> &[u8; KEY_LEN] {
        &self.key
    }

    /// A token for `span` and `req`, valid for five minutes.
    pub fn token(&self, span: RemoteSpan, req: &Request<'_>) -> String {
        let expires = unix_now() + TOKEN_LIFETIME.as_secs();
        Token::sign(&self.key, self.connection, span, expires, req)
    }

    /// GET `bucket/key` (bytes `range`, end exclusive, if given) into `buf` from its start.
    pub async fn get_into(
        &self,
        buf: &mut RegisteredBuf,
        bucket: &str,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<GetOutput, ClientError> {
        let path = object_path(bucket, key);
        let range = match range {
            Some(r) if r.end > r.start => format!("bytes={}-{}", r.start, r.end - 1),
            Some(_) => {
                return Err(ClientError::Protocol(
                    "an empty range cannot be asked for".into(),
                ))
            }
            None => String::new(),
        };
        let token = self.token(
            buf.span(),
            &Request {
                method: "GET",
                path: &path,
                query: "",
                range: &range,
            },
        );
        self.get_with_token(&path, &range, &token).await
    }

    /// A GET of `path` (as sent, percent-encoded) with `range` (`""` for none) and this token
    /// as it is: for tools and tests that make their own tokens.
    pub async fn get_with_token(
        &self,
        path: &str,
        range: &str,
        token: &str,
    ) -> Result<GetOutput, ClientError> {
        let mut headers = vec![(TOKEN_HEADER, token)];
        if !range.is_empty() {
            headers.push(("range", range));
        }
        let a = send(
            &self.config,
            &self.http,
            &self.host,
            "GET",
            path,
            "",
            &headers,
            Vec::new(),
        )
        .await?;
        let len = a
            .header(BYTES_HEADER)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                ClientError::Protocol(format!("the answer has no {BYTES_HEADER} header"))
            })?;
        Ok(GetOutput {
            status: a.status,
            len,
            etag: a.header("etag").map(str::to_owned),
            content_range: a.header("content-range").map(str::to_owned),
            headers: a.headers,
        })
    }

    /// PUT the first `len` bytes of `buf` as `bucket/key`: the node reads them from the buffer.
    pub async fn put_from(
        &self,
        buf: &RegisteredBuf,
        len: usize,
        bucket: &str,
        key: &str,
    ) -> Result<PutOutput, ClientError> {
        if len > buf.len() {
            return Err(ClientError::Protocol(format!(
                "{len} bytes asked for from a buffer of {}",
                buf.len()
            )));
        }
        let path = object_path(bucket, key);
        let span = RemoteSpan {
            len: len as u64,
            ..buf.span()
        };
        let token = self.token(
            span,
            &Request {
                method: "PUT",
                path: &path,
                query: "",
                range: "",
            },
        );
        let a = send(
            &self.config,
            &self.http,
            &self.host,
            "PUT",
            &path,
            "",
            &[(TOKEN_HEADER, token.as_str())],
            Vec::new(),
        )
        .await?;
        Ok(PutOutput {
            etag: a.header("etag").map(str::to_owned),
            version_id: a.header("x-amz-version-id").map(str::to_owned),
            len: a
                .header(BYTES_HEADER)
                .and_then(|v| v.parse().ok())
                .unwrap_or(len as u64),
        })
    }

    /// Closes the connection on the node (it also closes by itself when idle or broken).
    pub async fn close(self) -> Result<(), ClientError> {
        let path = format!("{CONNECTIONS_PATH}/{:016x}", self.connection);
        send(
            &self.config,
            &self.http,
            &self.host,
            "DELETE",
            &path,
            "",
            &[],
            Vec::new(),
        )
        .await
        .map(|_| ())
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A SigV4-signed request (payload unsigned, as S3 allows), its answer, or the S3 error in it.
#[allow(clippy::too_many_arguments)]
async fn send(
    config: &ClientConfig,
    http: &reqwest::Client,
    host: &str,
    method: &str,
    path: &str,
    query: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Answer, ClientError> {
    let url = if query.is_empty() {
        format!("{}{path}", config.endpoint)
    } else {
        format!("{}{path}?{query}", config.endpoint)
    };
    let identity = aws_credential_types::Credentials::new(
        &config.access_key,
        &config.secret_key,
        None,
        None,
        "quarry-rdma-client",
    )
    .into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&config.region)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| ClientError::Protocol(format!("signing: {e}")))?
        .into();
    let mut to_sign = vec![("host", host)];
    to_sign.extend(headers.iter().copied());
    let signable = SignableRequest::new(
        method,
        url.as_str(),
        to_sign.iter().copied(),
        SignableBody::UnsignedPayload,
    )
    .map_err(|e| ClientError::Protocol(format!("signing: {e}")))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| ClientError::Protocol(format!("signing: {e}")))?
        .into_parts();
    let method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    let mut req = http.request(method, &url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    for (k, v) in instructions.headers() {
        req = req.header(k, v);
    }
    let res = req.body(body).send().await?;
    let status = res.status().as_u16();
    let headers: Vec<(String, String)> = res
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let body = res.bytes().await?.to_vec();
    let answer = Answer {
        status,
        headers,
        body,
    };
    if (200..300).contains(&status) {
        return Ok(answer);
    }
    let text = String::from_utf8_lossy(&answer.body);
    let field = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&format!("</{name}>"))? + start;
        Some(text[start..end].to_owned())
    };
    Err(ClientError::S3 {
        status,
        code: field("Code").unwrap_or_else(|| format!("HTTP {status}")),
        message: field("Message").unwrap_or_default(),
        rdma_bytes: answer.header(BYTES_HEADER).and_then(|v| v.parse().ok()),
    })
}
