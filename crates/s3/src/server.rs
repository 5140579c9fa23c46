//! The HTTP server: accepts connections, gives every request an id, authenticates it, routes it to
//! its handler and turns the result (or the S3 error) into a response with the common headers.
//!
//! Order of checks for a request: take the bucket from the `Host` (virtual-host style) if it names
//! one; parse the endpoint; answer the anonymous health probes; hand CORS preflights and browser
//! form uploads to their own handlers (a preflight carries no credentials and reveals only CORS
//! rules; a form upload is authenticated by its signed policy); verify the signature; only then
//! report routing errors (so an unauthenticated client learns nothing about what the server
//! supports) and run the handler. A response to a request with an `Origin` gets the bucket's
//! CORS headers.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, SERVER};
use http::request::Parts;
use http::{Method, StatusCode};
use quarry_object::{ByteStream, ObjectLayer};

use crate::api_error::{ApiError, ApiResult};
use crate::body::{
    counted_stream, read_small, timed_stream, BodyTimeouts, LoggedBody, RequestLog, MAX_XML_BODY,
};
use crate::bucket_policy;
use crate::cors::{self, CorsCache};
use crate::error::{error_xml, S3Error, S3ErrorCode};
use crate::router::{self, Endpoint, Query, RouteError};
use crate::signature::{self, AuthConfig, Authenticated, Credentials};
use crate::{
    acl, attributes, authz, bucket, copy, delete, get, lifecycle, list, multipart, object_lock,
    post_object, put, sse, tagging, versioning,
};

/// What the front end needs to know besides the object layer.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// The region this server answers for: the only accepted `LocationConstraint`, the region of
    /// every bucket, and the region in SigV4 credential scopes.
    pub region: String,
    /// The access keys that may sign requests.
    pub credentials: Vec<Credentials>,
    /// Domains for virtual-host-style requests: a `Host` of `<bucket>.<domain>` (any port)
    /// addresses that bucket. Any other host, the bare domains included, is path style.
    pub domains: Vec<String>,
    /// Who may read `/metrics`.
    pub metrics: crate::metrics::MetricsAccess,
    /// Server-side encryption: the key service, SSE-C over HTTP.
    pub sse: crate::sse::SseConfig,
    /// The background lifecycle worker (default: none).
    pub lifecycle: crate::lifecycle_worker::LifecycleSettings,
    /// The ObjectOwnership of buckets created without `x-amz-object-ownership`.
    pub default_object_ownership: crate::acl_config::ObjectOwnership,
    /// S3 over RDMA to clients (none: token requests answer NotImplemented).
    pub client_rdma: crate::rdma::ClientRdmaHandle,
}

/// The answer of a readiness probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessReport {
    /// Whether the server can serve reads (`/health/ready` answers 200, else 503).
    pub ready: bool,
    /// One line for humans, sent as the probe's body (e.g. `drives online 3/4`).
    pub detail: String,
}

/// Tells `/health/ready` whether the storage below can serve requests.
#[async_trait]
pub trait ReadinessProbe: Send + Sync + 'static {
    async fn check(&self) -> ReadinessReport;
}

/// A probe that is always ready (tests, or a layer with nothing to wait for).
#[derive(Debug, Clone, Copy, Default)]
pub struct AlwaysReady;

#[async_trait]
impl ReadinessProbe for AlwaysReady {
    async fn check(&self) -> ReadinessReport {
        ReadinessReport {
            ready: true,
            detail: "ready".to_owned(),
        }
    }
}

/// Connection limits of the S3 listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// S3 connections open at once; beyond that new connections are closed at once (a client
    /// retries), so a flood of idle or stalled connections cannot exhaust descriptors or memory.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers (from the connection's start or
    /// the end of the previous request): a client that stalls inside its headers (slowloris) or
    /// stays idle longer is disconnected.
    pub header_read_timeout: std::time::Duration,
    /// How long a request body may keep the server waiting (see [`BodyTimeouts`]).
    pub body: BodyTimeouts,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: 4096,
            header_read_timeout: std::time::Duration::from_secs(30),
            body: BodyTimeouts::default(),
        }
    }
}

/// Serves S3 on `listener` until `shutdown` completes, then stops accepting and waits for the
/// requests in flight to finish. Accepted sockets get `TCP_NODELAY` (small responses must not
/// wait for Nagle and delayed ACKs). HTTP/1.1 within the default [`ServeLimits`].
pub async fn serve<L>(
    listener: L,
    layer: Arc<dyn ObjectLayer>,
    probe: Arc<dyn ReadinessProbe>,
    cfg: S3Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    L: axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr>,
{
    serve_with_limits(
        listener,
        layer,
        probe,
        cfg,
        ServeLimits::default(),
        shutdown,
    )
    .await
}

/// [`serve`] within the given limits.
pub async fn serve_with_limits<L>(
    listener: L,
    layer: Arc<dyn ObjectLayer>,
    probe: Arc<dyn ReadinessProbe>,
    cfg: S3Config,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    L: axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr>,
{
    let app = app_with(layer, probe, cfg, limits.body);
    serve_inner(listener, app, limits, None, shutdown).await
}

/// Where an HTTPS listener takes the TLS configuration of each new connection: called once per
/// connection, so a reloaded certificate is used from the next connection on.
pub type TlsConfigSource = Arc<dyn Fn() -> Arc<quarry_tls::rustls::ServerConfig> + Send + Sync>;

/// [`serve_with_limits`] over TLS (HTTPS): every accepted connection first completes a TLS
/// handshake with the configuration `tls` gives at that moment, within the header timeout (a
/// client that stalls in its handshake is dropped like one that stalls in its headers).
pub async fn serve_tls<L>(
    listener: L,
    layer: Arc<dyn ObjectLayer>,
    probe: Arc<dyn ReadinessProbe>,
    cfg: S3Config,
    limits: ServeLimits,
    tls: TlsConfigSource,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    L: axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr>,
{
    let app = app_with(layer, probe, cfg, limits.body);
    serve_inner(listener, app, limits, Some(tls), shutdown).await
}

/// Serves any `app` (the S3 service from [`app_with_timeouts`], or a service in front of it
/// such as the web console) on `listener` as [`serve_with_limits`] and [`serve_tls`] do: the
/// same connection limit, header timeout, `TCP_NODELAY`, optional TLS and graceful shutdown.
pub async fn serve_router<L>(
    listener: L,
    app: axum::Router,
    limits: ServeLimits,
    tls: Option<TlsConfigSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    L: axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr>,
{
    serve_inner(listener, app, limits, tls, shutdown).await
}

async fn serve_inner<L>(
    mut listener: L,
    app: axum::Router,
    limits: ServeLimits,
    tls: Option<TlsConfigSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    L: axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr>,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let max = limits.max_connections.max(1);
    let limit = Arc::new(tokio::sync::Semaphore::new(max));
    let conns = Arc::new(OpenConns::default());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            c = listener.accept() => c,
            () = &mut shutdown => break,
        };
        let permit = match limit.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            // Every slot is taken: the oldest connection that has not authenticated a request
            // makes room, so connections that never authenticate cannot lock out those that do.
            Err(_) if conns.evict_oldest_unauthenticated() => {
                tokio::time::timeout(EVICT_WAIT, limit.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(|p| p.ok())
            }
            Err(_) => None,
        };
        let Some(permit) = permit else {
            tracing::warn!(%peer, "S3 connection refused: {max} connections are open, all of them authenticated");
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let (id, mark) = conns.open();
        let inner = hyper_util::service::TowerToHyperService::new(app.clone());
        let service = {
            let mark = mark.clone();
            let secure = tls.is_some();
            hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnMark(mark.clone()));
                req.extensions_mut()
                    .insert(authz::ConnInfo { peer, secure });
                let (req, unread) = UnreadBody::wrap(req);
                let call = hyper::service::Service::call(&inner, req);
                async move {
                    let mut response = call.await;
                    if !unread.drain_small().await {
                        // hyper closes the connection after this answer (its body's bytes are
                        // still in the socket): the client is told, so it does not send its
                        // next request on a connection about to close.
                        if let Ok(r) = &mut response {
                            r.headers_mut().insert(
                                http::header::CONNECTION,
                                http::HeaderValue::from_static("close"),
                            );
                        }
                    }
                    response
                }
            })
        };
        let builder = {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            b
        };
        let watcher = graceful.watcher();
        let conns = conns.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let serve = async {
                let result = match tls {
                    None => {
                        let conn =
                            builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                        watcher.watch(conn).await
                    }
                    Some(tls) => {
                        let acceptor = quarry_tls::tokio_rustls::TlsAcceptor::from(tls());
                        let handshake = acceptor.accept(stream);
                        let stream = match tokio::time::timeout(
                            limits.header_read_timeout,
                            handshake,
                        )
                        .await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake not done within the header timeout");
                                return;
                            }
                        };
                        let conn =
                            builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                        watcher.watch(conn).await
                    }
                };
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "S3 connection ended with an error");
                }
            };
            tokio::select! {
                () = serve => {}
                () = mark.evict.notified() => {
                    tracing::debug!(%peer, "S3 connection closed to make room: it had not authenticated a request");
                }
            }
            conns.close(id);
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// How long a new connection waits for the slot of a connection closed to make room for it.
const EVICT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One open S3 connection: whether it has authenticated a request, and how to close it.
#[derive(Debug, Default)]
struct ConnState {
    authed: std::sync::atomic::AtomicBool,
    evict: tokio::sync::Notify,
}

/// The connection a request came on, as a request extension: set authenticated by [`handle`]
/// once a request's signature checked out.
#[derive(Debug, Clone)]
struct ConnMark(Arc<ConnState>);

/// The S3 connections open now, in the order they were accepted.
#[derive(Debug, Default)]
struct OpenConns {
    next: AtomicU64,
    open: Mutex<std::collections::BTreeMap<u64, Arc<ConnState>>>,
}

impl OpenConns {
    fn open(&self) -> (u64, Arc<ConnState>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::default());
        lock(&self.open).insert(id, state.clone());
        (id, state)
    }

    fn close(&self, id: u64) {
        lock(&self.open).remove(&id);
    }

    /// Closes the oldest open connection that has not authenticated a request; false if every
    /// open connection has.
    fn evict_oldest_unauthenticated(&self) -> bool {
        let mut open = lock(&self.open);
        let Some(id) = open
            .iter()
            .find(|(_, c)| !c.authed.load(Ordering::Relaxed))
            .map(|(id, _)| *id)
        else {
            return false;
        };
        if let Some(c) = open.remove(&id) {
            // Stored if the connection's task is not waiting yet: it sees it at its next poll.
            c.evict.notify_one();
        }
        true
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The S3 service as an axum `Router`, for callers that run their own server (or tests).
pub fn app(
    layer: Arc<dyn ObjectLayer>,
    probe: Arc<dyn ReadinessProbe>,
    cfg: S3Config,
) -> axum::Router {
    app_with(layer, probe, cfg, BodyTimeouts::default())
}

/// [`app`] with the given body timeouts: one service that both the S3 listener
/// ([`serve_router`]) and an in-process caller (the web console) can share, so they share its
/// state (metrics, CORS cache, request ids).
pub fn app_with_timeouts(
    layer: Arc<dyn ObjectLayer>,
    probe: Arc<dyn ReadinessProbe>,
    cfg: S3Config,
    body_timeouts: BodyTimeouts,
) -> axum::Router {
    app_with(layer, probe, cfg, body_timeouts)
}

fn app_with(
    layer: Arc<dyn ObjectLayer>,
    probe: Arc<dyn ReadinessProbe>,
    cfg: S3Config,
    body_timeouts: BodyTimeouts,
) -> axum::Router {
    // The IAM store: users, groups, policies, service accounts; its keys sign requests too.
    let iam = cfg
        .credentials
        .first()
        .map(|root| crate::iam::Iam::new(layer.clone(), root));
    if let (Some(iam), Ok(_)) = (&iam, tokio::runtime::Handle::try_current()) {
        iam.spawn_poller();
    }
    let metrics: Arc<crate::metrics::Metrics> = Arc::default();
    if let Some(plane) = &cfg.client_rdma.0 {
        let _ = metrics.client_rdma.set(plane.clone());
    }
    crate::lifecycle_worker::spawn(&layer, metrics.lifecycle.clone(), cfg.lifecycle);
    let state = Arc::new(AppState {
        iam: iam.clone(),
        body_timeouts,
        metrics_access: cfg.metrics,
        layer,
        probe,
        auth: AuthConfig {
            credentials: cfg.credentials,
            keys: iam.map(|i| i as Arc<dyn signature::KeyStore>),
            region: cfg.region.clone(),
        },
        region: cfg.region,
        domains: cfg
            .domains
            .iter()
            .map(|d| d.trim().trim_end_matches('.').to_ascii_lowercase())
            .filter(|d| !d.is_empty())
            .collect(),
        cors: CorsCache::default(),
        lifecycle: Default::default(),
        sse: cfg.sse,
        bucket_policies: Default::default(),
        acl: crate::acl_config::AclState::new(cfg.default_object_ownership),
        ids: RequestIds::new(),
        metrics,
        client_rdma: cfg.client_rdma,
    });
    crate::metrics_history::spawn(Arc::downgrade(&state));
    axum::Router::new().fallback(move |req: Request| handle(state.clone(), req))
}

pub(crate) struct AppState {
    pub layer: Arc<dyn ObjectLayer>,
    /// Identities and their policies (`None` without root credentials: nobody can sign).
    pub iam: Option<Arc<crate::iam::Iam>>,
    pub probe: Arc<dyn ReadinessProbe>,
    pub auth: AuthConfig,
    pub region: String,
    /// Virtual-host domains, lower-case, without a trailing dot.
    domains: Vec<String>,
    pub cors: CorsCache,
    /// Parsed lifecycle configurations, for `x-amz-expiration`.
    pub(crate) lifecycle: crate::lifecycle::LifecycleCache,
    pub sse: crate::sse::SseConfig,
    /// Parsed bucket policies, for authorization (see `bucket_policy.rs`).
    pub(crate) bucket_policies: crate::bucket_policy::PolicyCache,
    /// Default ownership and cached ownership controls, public access blocks and bucket ACLs.
    pub(crate) acl: crate::acl_config::AclState,
    ids: RequestIds,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    pub(crate) client_rdma: crate::rdma::ClientRdmaHandle,
    /// How long a request body may stall (every body a handler reads goes through it).
    pub body_timeouts: BodyTimeouts,
    metrics_access: crate::metrics::MetricsAccess,
}

/// Request ids: a random per-process prefix and a counter, 20 upper-case hex digits.
struct RequestIds {
    prefix: u32,
    next: AtomicU64,
}

impl RequestIds {
    fn new() -> Self {
        RequestIds {
            prefix: rand::random(),
            next: AtomicU64::new(0),
        }
    }

    fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed) & 0xFFFF_FFFF_FFFF;
        format!("{:08X}{n:012X}", self.prefix)
    }
}

/// One authenticated request on its way through a handler.
pub(crate) struct ReqCtx {
    pub state: Arc<AppState>,
    pub parts: Parts,
    pub auth: Authenticated,
    /// Who signed, and the request's condition context (for the per-key decisions of
    /// DeleteObjects).
    pub caller: authz::Caller,
    pub policy_ctx: quarry_policy::Context,
    /// The policies of the buckets the request's needs named, as authorized.
    pub bucket_policies: authz::BucketPolicies,
    /// Taken once by the handler that reads it. (A mutex only to make `ReqCtx` `Sync`: handlers
    /// hold `&ReqCtx` across awaits and `Body` is not `Sync`.)
    body: Mutex<Option<Body>>,
    bytes_in: Arc<AtomicU64>,
}

impl ReqCtx {
    pub fn layer(&self) -> &dyn ObjectLayer {
        &*self.state.layer
    }

    /// Whether the caller may perform `action` on `resource` (for the decisions a handler makes
    /// per item, as DeleteObjects per key), by the same evaluation as the request's own: the
    /// policies (identity and the bucket's), then the ACL grants where no policy denies.
    /// `Err`: AccessDenied, or what kept the decision from being made (an unreadable ACL).
    pub async fn authorize_item(
        &self,
        endpoint: &Endpoint,
        action: &'static str,
        resource: String,
    ) -> ApiResult<()> {
        crate::acl_eval::authorize_with_acls(
            &self.state,
            &self.caller,
            endpoint,
            &self.parts,
            &[authz::Need { action, resource }],
            &self.policy_ctx,
            &self.bucket_policies,
        )
        .await
    }

    pub fn region(&self) -> &str {
        &self.state.region
    }

    /// Whether the request came over TLS (HTTPS).
    pub fn secure(&self) -> bool {
        self.parts
            .extensions
            .get::<authz::ConnInfo>()
            .is_some_and(|c| c.secure)
    }

    /// The request body, de-chunked and verified against its signature and checksums. An error
    /// in the stream is an `io::Error` carrying the S3 error (see [`crate::api_error::body_error`]).
    pub fn body_stream(&self) -> ApiResult<ByteStream> {
        self.body_stream_with_checksum().map(|(body, _)| body)
    }

    /// [`ReqCtx::body_stream`], and the slot that holds the verified `x-amz-checksum-*` value
    /// (header or trailer) once the body has ended.
    pub fn body_stream_with_checksum(&self) -> ApiResult<(ByteStream, signature::ChecksumSlot)> {
        let body = self.take_body()?;
        let stream = timed_stream(
            counted_stream(body, self.bytes_in.clone()),
            self.state.body_timeouts,
        );
        let (verified, slot) =
            signature::verified_body_with_checksum(&self.parts, &self.auth, stream)?;
        Ok((Box::pin(verified), slot))
    }

    /// [`ReqCtx::small_body`] of a request whose `x-amz-checksum-*` header is not the body's
    /// checksum but the result's (CompleteMultipartUpload: the object's). The body is verified
    /// as any other (its signature, Content-MD5), only not against that header.
    pub async fn small_body_not_checksummed(&self) -> ApiResult<Bytes> {
        if signature::declared_size(&self.parts).is_some_and(|n| n > MAX_XML_BODY as u64) {
            return Err(ApiError::new(
                S3ErrorCode::MalformedXML,
                format!("The XML body is larger than the {MAX_XML_BODY} bytes accepted."),
            ));
        }
        let mut parts = self.parts.clone();
        for a in signature::checksum::ChecksumAlgorithm::ALL {
            parts.headers.remove(a.header_name());
        }
        let body = self.take_body()?;
        let stream = timed_stream(
            counted_stream(body, self.bytes_in.clone()),
            self.state.body_timeouts,
        );
        let (verified, _) = signature::verified_body_with_checksum(&parts, &self.auth, stream)?;
        read_small(Box::pin(verified), MAX_XML_BODY).await
    }

    fn take_body(&self) -> ApiResult<Body> {
        let taken = self
            .body
            .lock()
            .map(|mut b| b.take())
            .unwrap_or_else(|poisoned| poisoned.into_inner().take());
        taken.ok_or_else(|| {
            tracing::error!("request body taken twice");
            ApiError::from(S3ErrorCode::InternalError)
        })
    }

    /// A small body (XML), read completely and verified; more than 1 MiB is refused.
    pub async fn small_body(&self) -> ApiResult<Bytes> {
        if signature::declared_size(&self.parts).is_some_and(|n| n > MAX_XML_BODY as u64) {
            return Err(ApiError::new(
                S3ErrorCode::MalformedXML,
                format!("The XML body is larger than the {MAX_XML_BODY} bytes accepted."),
            ));
        }
        read_small(self.body_stream()?, MAX_XML_BODY).await
    }
}

async fn handle(state: Arc<AppState>, req: Request) -> Response {
    let request_id = state.ids.next();
    let (parts, body) = req.into_parts();
    let mut log = RequestLog::new(
        request_id.clone(),
        parts.method.clone(),
        parts.uri.path().to_owned(),
    );
    log.metrics = Some(state.metrics.clone());
    let head = parts.method == Method::HEAD;
    let resource = parts.uri.path().to_owned();
    // CORS costs nothing for requests without an Origin (browsers send one cross-origin).
    let cors_request = parts
        .headers
        .get(http::header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| !o.is_empty())
        .map(|origin| (origin.to_owned(), parts.method.clone()));
    let mut cors_bucket = None;

    let mut response = match dispatch(state.clone(), parts, body, &mut log, &mut cors_bucket).await
    {
        Ok(response) => response,
        Err(err) => {
            log.error_code = Some(err.code().code());
            error_response(err, &resource, &request_id, head)
        }
    };
    if let (Some((origin, method)), Some(bucket)) = (&cors_request, &cors_bucket) {
        cors::apply_actual(&state, bucket, origin, method, &mut response).await;
    }
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        headers.insert("x-amz-request-id", v);
    }
    headers.insert(SERVER, HeaderValue::from_static("Quarry"));
    log.status = Some(response.status());
    if !head {
        log.expected_out = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
    }
    response.map(|body| Body::new(LoggedBody::new(body, log)))
}

/// Routes and runs a request. `cors_bucket` is set to the bucket of an actual (non-preflight)
/// request, whose response then gets the bucket's CORS headers if the request has an Origin.
async fn dispatch(
    state: Arc<AppState>,
    parts: Parts,
    body: Body,
    log: &mut RequestLog,
    cors_bucket: &mut Option<String>,
) -> ApiResult<Response> {
    let host_bucket = host_bucket(&parts, &state.domains);
    // A query that does not decode is a routing error like any other.
    let endpoint = Query::parse(parts.uri.query())
        .map_err(RouteError::from)
        .and_then(|q| {
            router::parse(
                &parts.method,
                parts.uri.path(),
                &q,
                &parts.headers,
                host_bucket.as_deref(),
            )
        });
    // A bad parameter of a known operation: logged, counted and given CORS headers as that
    // operation, as its handler's refusal was before the router parsed the parameters.
    if let Err(RouteError {
        operation: Some(operation),
        bucket,
        ..
    }) = &endpoint
    {
        log.operation = (*operation).to_owned();
        if parts.headers.contains_key(http::header::ORIGIN) {
            cors_bucket.clone_from(bucket);
        }
    }
    if let Ok(endpoint) = &endpoint {
        log.operation = endpoint.name().to_owned();
        if parts.headers.contains_key(http::header::ORIGIN)
            && !matches!(endpoint, Endpoint::CorsPreflight { .. })
        {
            *cors_bucket = endpoint.bucket().map(str::to_owned);
        }
        // The requests that carry no signature of SigV4 or SigV2 (see `Endpoint::needs_auth`):
        // each is answered here, by a handler that authenticates it in its own way or serves
        // nothing that needs it. Every other endpoint goes through `verify_request` below.
        match endpoint {
            // A preflight reveals only the bucket's CORS rules, which exist to be read by
            // browsers; it never reaches an object.
            Endpoint::CorsPreflight { bucket, .. } => {
                return cors::preflight(&state, &parts.headers, bucket).await;
            }
            // A browser upload: the form's signed policy is its authentication, checked by
            // `post_object` before a byte of the file is stored.
            Endpoint::PostObject { bucket } => {
                return post_object::post_object(
                    &state,
                    &parts,
                    body,
                    bucket,
                    host_bucket.is_some(),
                    log.bytes_in.clone(),
                )
                .await;
            }
            _ => {}
        }
        match endpoint {
            Endpoint::HealthLive => return Ok(health(StatusCode::OK, "live")),
            Endpoint::HealthReady => {
                let report = state.probe.check().await;
                let status = if report.ready {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                return Ok(health(status, &report.detail));
            }
            Endpoint::Metrics => {
                state.metrics_access.check(&parts.headers)?;
                let layer = state.layer.stats().await;
                return Ok(crate::metrics::response(state.metrics.render(&layer)));
            }
            _ => debug_assert!(endpoint.needs_auth()),
        }
    }

    // The IAM and STS query APIs sign their small form body without x-amz-content-sha256 (as
    // every AWS service but S3 does): read it first, so the signature covers its hash.
    let (parts, body, form) = match &endpoint {
        Ok(Endpoint::IamQuery) => {
            let (parts, bytes) = iam_form(&state, parts, body, log).await?;
            (parts, Body::empty(), Some(bytes))
        }
        _ => (parts, body, None),
    };
    if let Some(iam) = state.iam.as_ref().filter(|i| !i.loaded()) {
        // The first requests after start-up wait for the stored identities once.
        if let Err(e) = iam.refresh().await {
            tracing::warn!(error = %e, "IAM state could not be read");
        }
    }
    // An unsigned request for a bucket or an object is anonymous: allowed only what the
    // bucket's policy grants everyone (decided by `authorize` below like any other request).
    let anonymous = endpoint.as_ref().is_ok_and(|e| e.bucket().is_some())
        && Query::parse(parts.uri.query()).is_ok_and(|q| router::is_anonymous(&parts.headers, &q));
    let (auth, caller) = if anonymous {
        let auth = Authenticated {
            access_key: String::new(),
            service: "s3",
            payload: signature::PayloadCheck::Unsigned,
        };
        (auth, authz::Caller::Anonymous)
    } else {
        // Temporary credentials: the token says which key signs and who it acts as.
        let token = parts
            .headers
            .get("x-amz-security-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| {
                Query::parse(parts.uri.query())
                    .ok()
                    .and_then(|q| q.get("X-Amz-Security-Token").map(str::to_owned))
            });
        let session = session(&state, token.as_deref())?;
        let keys = session.as_ref().map_or(&state.auth, |(keys, _)| keys);
        // Authenticate before anything else is said about the request.
        let auth = match &host_bucket {
            Some(bucket) => {
                signature::verify_virtual_host_request(&parts, keys, SystemTime::now(), bucket)?
            }
            None => signature::verify_request(&parts, keys, SystemTime::now())?,
        };
        // The connection has carried an authenticated request: it is no longer the first to
        // be closed when the server is out of connection slots.
        if let Some(ConnMark(c)) = parts.extensions.get::<ConnMark>() {
            c.authed.store(true, Ordering::Relaxed);
        }
        let caller = match session {
            Some((_, caller)) => caller,
            None => caller_of(&state, &auth.access_key)?,
        };
        (auth, caller)
    };
    let endpoint = endpoint.map_err(|e| e.error)?;
    // The root user is allowed everything: no context to build for it.
    let mut policy_ctx = if caller.is_root() {
        quarry_policy::Context::default()
    } else {
        authz::context(&endpoint, &parts, &caller)
    };
    let query_api = matches!(endpoint, Endpoint::IamQuery);
    if query_api != (auth.service != "s3") {
        return Err(S3Error::new(
            S3ErrorCode::AuthorizationHeaderMalformed,
            if query_api {
                "The IAM and STS APIs (POST /) are signed for service \"iam\" or \"sts\"."
            } else {
                "S3 requests are signed for service \"s3\"."
            },
        )
        .into());
    }
    if let (Some(form), Some(iam)) = (form, &state.iam) {
        let call = crate::iam::query::QueryCall::parse(auth.service, &form)?;
        log.operation = call.action.clone();
        return Ok(crate::iam::query::serve(iam, &caller, &policy_ctx, call).await);
    }
    // Authorization: once, here, from the endpoint, before any handler runs.
    let needs = authz::needs(&endpoint, &parts.headers)?;
    let bucket_policies = bucket_policies(&state, &caller, &needs, endpoint.bucket()).await?;
    // `s3:ExistingObjectTag/<key>`: the object's tags, read only when a policy in force asks.
    if let Some((bucket, key, version)) = authz::existing_tag_target(&endpoint) {
        if authz::wants_existing_object_tags(&caller, &bucket_policies) {
            // No such object: no tags (the handler says NoSuchKey if the request is allowed).
            if let Ok(info) = state.layer.object_version_info(bucket, key, version).await {
                for (k, v) in crate::tagging::object_tags(&info) {
                    policy_ctx.set(&format!("{}{k}", authz::EXISTING_OBJECT_TAG), v);
                }
            }
        }
    }
    crate::acl_eval::authorize_with_acls(
        &state,
        &caller,
        &endpoint,
        &parts,
        &needs,
        &policy_ctx,
        &bucket_policies,
    )
    .await?;
    let mut ctx = ReqCtx {
        caller,
        policy_ctx,
        bucket_policies,
        state,
        parts,
        auth,
        body: Mutex::new(Some(body)),
        bytes_in: log.bytes_in.clone(),
    };
    // S3 over RDMA: the token is checked once the request is authorized as it would be without
    // it; a PUT's body then comes from the client's registered buffer.
    let rdma = crate::rdma::verify(&ctx, &endpoint, &ctx.parts)?;
    if let (Some(transfer), Endpoint::PutObject { .. } | Endpoint::UploadPart { .. }) =
        (&rdma, &endpoint)
    {
        let body = crate::rdma::put_body(transfer, &mut ctx.parts)?;
        ctx.body = Mutex::new(Some(body));
    }
    let answer = dispatch_endpoint(&ctx, endpoint).await;
    match rdma {
        None => answer,
        Some(transfer) => crate::rdma::finish(transfer, answer?).await,
    }
}

/// Runs the handler of an authorized request.
async fn dispatch_endpoint(ctx: &ReqCtx, endpoint: Endpoint) -> ApiResult<Response> {
    use Endpoint as E;
    let head = matches!(endpoint, E::HeadObject { .. });
    match endpoint {
        E::HealthLive | E::HealthReady | E::Metrics => unreachable_health(),
        E::ListBuckets { params } => bucket::list_buckets(ctx, &params).await,
        E::CreateBucket { bucket } => bucket::create_bucket(ctx, &bucket).await,
        E::HeadBucket { bucket } => bucket::head_bucket(ctx, &bucket).await,
        E::DeleteBucket { bucket } => {
            let result = bucket::delete_bucket(ctx, &bucket).await;
            // Its CORS configuration and policy went with it; a new bucket of the name starts
            // without.
            ctx.state.cors.invalidate(&bucket);
            ctx.state.bucket_policies.invalidate(&bucket);
            ctx.state.lifecycle.invalidate(&bucket);
            ctx.state.acl.invalidate(&bucket);
            result
        }
        E::GetBucketLocation { bucket } => bucket::get_bucket_location(ctx, &bucket).await,
        E::ListObjects { bucket, params } => list::list_objects_v1(ctx, &bucket, &params).await,
        E::ListObjectsV2 { bucket, params } => list::list_objects_v2(ctx, &bucket, &params).await,
        E::PutObject { bucket, key } => put::put_object(ctx, &bucket, &key).await,
        E::CopyObject { bucket, key } => copy::copy_object(ctx, &bucket, &key).await,
        E::GetObject {
            bucket,
            key,
            read,
            version,
        }
        | E::HeadObject {
            bucket,
            key,
            read,
            version,
        } => {
            let answer = get::get_object(ctx, &bucket, &key, read, version, head).await;
            crate::acl_eval::missing_object(ctx, &bucket, &key, answer).await
        }
        E::DeleteObject {
            bucket,
            key,
            version,
        } => delete::delete_object(ctx, &bucket, &key, version).await,
        E::GetObjectTagging {
            bucket,
            key,
            version,
        } => tagging::get_object_tagging(ctx, &bucket, &key, version).await,
        E::PutObjectTagging {
            bucket,
            key,
            version,
        } => tagging::put_object_tagging(ctx, &bucket, &key, version).await,
        E::DeleteObjectTagging {
            bucket,
            key,
            version,
        } => tagging::delete_object_tagging(ctx, &bucket, &key, version).await,
        E::GetBucketTagging { bucket } => tagging::get_bucket_tagging(ctx, &bucket).await,
        E::GetObjectLockConfiguration { bucket } => {
            object_lock::get_object_lock_configuration(ctx, &bucket).await
        }
        E::PutObjectLockConfiguration { bucket } => {
            object_lock::put_object_lock_configuration(ctx, &bucket).await
        }
        E::GetObjectRetention {
            bucket,
            key,
            version,
        } => object_lock::get_object_retention(ctx, &bucket, &key, version).await,
        E::PutObjectRetention {
            bucket,
            key,
            version,
        } => object_lock::put_object_retention(ctx, &bucket, &key, version).await,
        E::GetObjectLegalHold {
            bucket,
            key,
            version,
        } => object_lock::get_object_legal_hold(ctx, &bucket, &key, version).await,
        E::PutObjectLegalHold {
            bucket,
            key,
            version,
        } => object_lock::put_object_legal_hold(ctx, &bucket, &key, version).await,
        E::PutBucketTagging { bucket } => tagging::put_bucket_tagging(ctx, &bucket).await,
        E::DeleteBucketTagging { bucket } => tagging::delete_bucket_tagging(ctx, &bucket).await,
        E::GetBucketVersioning { bucket } => versioning::get_bucket_versioning(ctx, &bucket).await,
        E::PutBucketVersioning { bucket } => versioning::put_bucket_versioning(ctx, &bucket).await,
        E::ListObjectVersions { bucket, params } => {
            versioning::list_object_versions(ctx, &bucket, &params).await
        }
        E::GetObjectAttributes {
            bucket,
            key,
            version,
        } => attributes::get_object_attributes(ctx, &bucket, &key, version).await,
        E::DeleteObjects { bucket } => delete::delete_objects(ctx, &bucket).await,
        E::GetBucketEncryption { bucket } => sse::get_bucket_encryption(ctx, &bucket).await,
        E::PutBucketEncryption { bucket } => sse::put_bucket_encryption(ctx, &bucket).await,
        E::DeleteBucketEncryption { bucket } => sse::delete_bucket_encryption(ctx, &bucket).await,
        E::GetBucketLifecycle { bucket } => lifecycle::get_bucket_lifecycle(ctx, &bucket).await,
        E::PutBucketLifecycle { bucket } => lifecycle::put_bucket_lifecycle(ctx, &bucket).await,
        E::DeleteBucketLifecycle { bucket } => {
            lifecycle::delete_bucket_lifecycle(ctx, &bucket).await
        }
        E::GetBucketCors { bucket } => cors::get_bucket_cors(ctx, &bucket).await,
        E::PutBucketCors { bucket } => cors::put_bucket_cors(ctx, &bucket).await,
        E::DeleteBucketCors { bucket } => cors::delete_bucket_cors(ctx, &bucket).await,
        E::GetBucketPolicy { bucket } => bucket_policy::get_bucket_policy(ctx, &bucket).await,
        E::PutBucketPolicy { bucket } => bucket_policy::put_bucket_policy(ctx, &bucket).await,
        E::DeleteBucketPolicy { bucket } => bucket_policy::delete_bucket_policy(ctx, &bucket).await,
        E::GetBucketPolicyStatus { bucket } => {
            bucket_policy::get_bucket_policy_status(ctx, &bucket).await
        }
        E::CorsPreflight { .. } | E::PostObject { .. } => unauthenticated_endpoint(),
        E::IamQuery => Err(S3Error::new(
            S3ErrorCode::NotImplemented,
            "The IAM API needs root credentials configured.",
        )
        .into()),
        E::ListMultipartUploads { bucket, params } => {
            multipart::list_multipart_uploads(ctx, &bucket, &params).await
        }
        E::CreateMultipartUpload { bucket, key } => {
            multipart::create_multipart_upload(ctx, &bucket, &key).await
        }
        E::UploadPart {
            bucket,
            key,
            upload_id,
            part_number,
        } => multipart::upload_part(ctx, &bucket, &key, &upload_id, part_number).await,
        E::UploadPartCopy {
            bucket,
            key,
            upload_id,
            part_number,
        } => multipart::upload_part_copy(ctx, &bucket, &key, &upload_id, part_number).await,
        E::CompleteMultipartUpload {
            bucket,
            key,
            upload_id,
        } => multipart::complete_multipart_upload(ctx, &bucket, &key, &upload_id).await,
        E::AbortMultipartUpload {
            bucket,
            key,
            upload_id,
        } => multipart::abort_multipart_upload(ctx, &bucket, &key, &upload_id).await,
        E::ListParts {
            bucket,
            key,
            upload_id,
            params,
        } => multipart::list_parts(ctx, &bucket, &key, &upload_id, &params).await,
        E::Admin { op } => crate::admin::handle(ctx, op).await,
        E::RdmaConnect => crate::rdma::connect(ctx).await,
        E::RdmaDisconnect { id } => crate::rdma::disconnect(ctx, &id).await,
        E::GetBucketAcl { bucket } => acl::get_bucket_acl(ctx, &bucket).await,
        E::PutBucketAcl { bucket } => acl::put_bucket_acl(ctx, &bucket).await,
        E::GetObjectAcl {
            bucket,
            key,
            version,
        } => acl::get_object_acl(ctx, &bucket, &key, version).await,
        E::PutObjectAcl {
            bucket,
            key,
            version,
        } => acl::put_object_acl(ctx, &bucket, &key, version).await,
        E::GetBucketOwnershipControls { bucket } => {
            crate::acl_config::get_ownership_controls(ctx, &bucket).await
        }
        E::PutBucketOwnershipControls { bucket } => {
            crate::acl_config::put_ownership_controls(ctx, &bucket).await
        }
        E::DeleteBucketOwnershipControls { bucket } => {
            crate::acl_config::delete_ownership_controls(ctx, &bucket).await
        }
        E::GetPublicAccessBlock { bucket } => {
            crate::acl_config::get_public_access_block(ctx, &bucket).await
        }
        E::PutPublicAccessBlock { bucket } => {
            crate::acl_config::put_public_access_block(ctx, &bucket).await
        }
        E::DeletePublicAccessBlock { bucket } => {
            crate::acl_config::delete_public_access_block(ctx, &bucket).await
        }
        E::Unsupported { operation } => Err(ApiError::new(
            S3ErrorCode::NotImplemented,
            format!("{operation} is not implemented by Quarry."),
        )),
    }
}

/// The policies of the buckets a request's needs name and of its endpoint's own bucket (a
/// DeleteObjects has no needs of its own: its handler decides each key against its bucket's
/// policy, through [`ReqCtx::authorize_item`]), for [`authz::authorize`]; none for the root
/// user, who is allowed everything. A policy that cannot be read (no quorum) fails the request.
pub(crate) async fn bucket_policies(
    state: &AppState,
    caller: &authz::Caller,
    needs: &[authz::Need],
    endpoint_bucket: Option<&str>,
) -> ApiResult<authz::BucketPolicies> {
    if caller.is_root() {
        return Ok(Vec::new());
    }
    let mut buckets = authz::buckets_of(needs);
    if let Some(b) = endpoint_bucket.filter(|b| !b.is_empty()) {
        if !buckets.iter().any(|o| o == b) {
            buckets.push(b.to_owned());
        }
    }
    let mut out = Vec::new();
    for bucket in buckets {
        let policy = state.bucket_policies.get(&*state.layer, &bucket).await?;
        out.push((bucket, policy));
    }
    Ok(out)
}

/// The one key a request with a session token may be signed with.
#[derive(Debug)]
struct SessionKey(signature::Credentials);

impl signature::KeyStore for SessionKey {
    fn lookup(&self, access_key: &str) -> Option<signature::Credentials> {
        (self.0.access_key == access_key).then(|| self.0.clone())
    }
}

/// For a request carrying a session token (`x-amz-security-token`, or `X-Amz-Security-Token`
/// in a presigned URL or a POST form): the keys its signature is checked against (only the
/// session's) and who it acts as. `None` without a token. A token that does not open is
/// `InvalidToken`, one past its expiry `ExpiredToken`, one whose parent key or user is gone or
/// disabled `InvalidToken`.
pub(crate) fn session(
    state: &AppState,
    token: Option<&str>,
) -> Result<Option<(signature::AuthConfig, authz::Caller)>, S3Error> {
    let Some(token) = token else { return Ok(None) };
    let iam = state
        .iam
        .as_ref()
        .ok_or_else(|| S3Error::from_code(S3ErrorCode::InvalidToken))?;
    use crate::iam::sts::SessionError;
    let (credentials, identity) = iam.session(token).map_err(|e| {
        let code = match e {
            SessionError::Expired => S3ErrorCode::ExpiredToken,
            SessionError::Malformed | SessionError::Revoked => S3ErrorCode::InvalidToken,
        };
        S3Error::new(code, e.to_string())
    })?;
    let keys = signature::AuthConfig {
        credentials: Vec::new(),
        keys: Some(Arc::new(SessionKey(credentials))),
        region: state.auth.region.clone(),
    };
    Ok(Some((keys, authz::Caller::User(identity))))
}

/// Who signed with `access_key`: the root user (a configured key) or an IAM identity. A key
/// that verified but has no identity any more (deleted or disabled since) is refused.
pub(crate) fn caller_of(state: &AppState, access_key: &str) -> Result<authz::Caller, S3Error> {
    if state
        .auth
        .credentials
        .iter()
        .any(|c| c.access_key == access_key)
    {
        return Ok(authz::Caller::Root);
    }
    state
        .iam
        .as_ref()
        .and_then(|i| i.identity(access_key))
        .map(authz::Caller::User)
        .ok_or_else(|| S3Error::from_code(S3ErrorCode::InvalidAccessKeyId))
}

/// Reads the form body of an IAM/STS call (at most [`crate::iam::query::MAX_FORM`] bytes) and
/// gives the request the `x-amz-content-sha256` of it when the client sent none.
async fn iam_form(
    state: &AppState,
    mut parts: Parts,
    body: Body,
    log: &RequestLog,
) -> ApiResult<(Parts, Bytes)> {
    use sha2::Digest as _;
    let max = crate::iam::query::MAX_FORM;
    let stream = timed_stream(
        counted_stream(body, log.bytes_in.clone()),
        state.body_timeouts,
    );
    let bytes = read_small(Box::pin(stream), max).await?;
    if !parts.headers.contains_key("x-amz-content-sha256") {
        let hash = hex::encode(sha2::Sha256::digest(&bytes));
        if let Ok(v) = HeaderValue::from_str(&hash) {
            parts.headers.insert("x-amz-content-sha256", v);
        }
    }
    Ok((parts, bytes))
}

/// Preflights and browser uploads are answered before SigV4 authentication; reaching the
/// authenticated dispatch with one is a bug.
fn unauthenticated_endpoint() -> ApiResult<Response> {
    tracing::error!("an unauthenticated endpoint reached the authenticated dispatch");
    Err(S3ErrorCode::InternalError.into())
}

/// The bucket named by the `Host` header in virtual-host style: `<bucket>.<domain>`, with or
/// without a port, for one of the configured domains. `None` (path style) for any other host,
/// the bare domain included, and when no domain is configured. HTTP/2 requests carry the host
/// in the URI's authority instead.
pub(crate) fn host_bucket(parts: &Parts, domains: &[String]) -> Option<String> {
    if domains.is_empty() {
        return None;
    }
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()))?;
    bucket_of_host(host, domains)
}

fn bucket_of_host(host: &str, domains: &[String]) -> Option<String> {
    let host = host.trim();
    // Strip the port; an IPv6 literal (`[::1]:9000`) is never a virtual host.
    if host.starts_with('[') {
        return None;
    }
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    domains.iter().find_map(|domain| {
        let bucket = name.strip_suffix(domain.as_str())?.strip_suffix('.')?;
        (!bucket.is_empty()).then(|| bucket.to_owned())
    })
}

/// Health endpoints are answered before authentication; reaching a handler with one is a bug.
fn unreachable_health() -> ApiResult<Response> {
    tracing::error!("health endpoint reached the authenticated dispatch");
    Err(S3ErrorCode::InternalError.into())
}

fn health(status: StatusCode, detail: &str) -> Response {
    let mut response = Response::new(Body::from(format!("{detail}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The S3 XML error response. HEAD responses and 304 carry the status and headers only.
pub(crate) fn error_response(
    err: ApiError,
    resource: &str,
    request_id: &str,
    head: bool,
) -> Response {
    let status = err.error.code.status();
    let bodyless = head || status == StatusCode::NOT_MODIFIED;
    let mut response = if bodyless {
        Response::new(Body::empty())
    } else {
        let xml = error_xml(&err.error, resource, request_id);
        let mut r = Response::new(Body::from(xml));
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
        r
    };
    *response.status_mut() = status;
    if bodyless && status != StatusCode::NOT_MODIFIED {
        response
            .headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
    }
    for (name, value) in err.headers {
        response.headers_mut().insert(name, value);
    }
    response
}

/// A request body the handler may drop unread (an early error: a failed precondition, a refused
/// signature, a missing bucket). hyper then closes the connection with the body's bytes still
/// unread in the socket, and the kernel answers the client with a reset that can overtake the
/// response: the client sees "connection reset" instead of the S3 error, and retries or fails.
/// A small body left unread is drained before the response goes out, so the error arrives and the
/// connection stays usable; a large one (or one the client waits to send, `Expect: 100-continue`)
/// is not, and the connection closes as before.
struct UnreadBody {
    inner: Option<hyper::body::Incoming>,
    left: Arc<Mutex<Option<hyper::body::Incoming>>>,
}

/// What [`UnreadBody`] left behind, drained after the handler answered.
struct LeftBody {
    left: Arc<Mutex<Option<hyper::body::Incoming>>>,
    drain: bool,
}

/// Bodies at most this long are drained when the handler did not read them.
const DRAIN_MAX: u64 = 256 * 1024;
/// How long draining may take before the connection is closed instead.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);

impl UnreadBody {
    fn wrap(req: http::Request<hyper::body::Incoming>) -> (http::Request<UnreadBody>, LeftBody) {
        let left = Arc::new(Mutex::new(None));
        let expects = req.headers().contains_key(http::header::EXPECT);
        let small = http_body::Body::size_hint(req.body())
            .upper()
            .is_some_and(|n| n <= DRAIN_MAX);
        let req = req.map(|b| UnreadBody {
            inner: Some(b),
            left: left.clone(),
        });
        (
            req,
            LeftBody {
                left,
                drain: small && !expects,
            },
        )
    }
}

impl http_body::Body for UnreadBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        match self.get_mut().inner.as_mut() {
            Some(b) => std::pin::Pin::new(b).poll_frame(cx),
            None => std::task::Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| http_body::SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for UnreadBody {
    fn drop(&mut self) {
        if let Some(b) = self.inner.take() {
            if !http_body::Body::is_end_stream(&b) {
                *self.left.lock().unwrap_or_else(|p| p.into_inner()) = Some(b);
            }
        }
    }
}

impl LeftBody {
    /// Drains a small body the handler left unread. Whether the connection stays usable: false
    /// when a body is left in the socket (too large, awaited with `Expect: 100-continue`, broken
    /// off, or not in within [`DRAIN_TIME`]).
    async fn drain_small(self) -> bool {
        let body = self.left.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut body) = body else { return true };
        if !self.drain {
            return false;
        }
        let drain = async {
            while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
                if frame.is_err() {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(DRAIN_TIME, drain)
            .await
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn virtual_host_buckets_come_from_the_host() {
        let domains = vec!["s3.example.com".to_owned(), "localhost".to_owned()];
        let b = |host: &str| bucket_of_host(host, &domains);
        assert_eq!(b("photos.s3.example.com").as_deref(), Some("photos"));
        assert_eq!(b("photos.s3.example.com:9000").as_deref(), Some("photos"));
        assert_eq!(b("Photos.S3.Example.COM.").as_deref(), Some("photos"));
        assert_eq!(
            b("my.dotted.bucket.s3.example.com").as_deref(),
            Some("my.dotted.bucket")
        );
        assert_eq!(b("bkt.localhost:9000").as_deref(), Some("bkt"));
        // The bare domain, other hosts, look-alikes and IP literals are path style.
        for host in [
            "s3.example.com",
            "s3.example.com:9000",
            ".s3.example.com",
            "localhost:9000",
            "127.0.0.1:9000",
            "[::1]:9000",
            "photos.s3.example.com.evil.org",
            "photos-s3.example.com",
            "xs3.example.com",
        ] {
            assert_eq!(b(host), None, "{host}");
        }
        assert_eq!(bucket_of_host("photos.s3.example.com", &[]), None);
    }

    #[test]
    fn request_ids_are_unique_and_fixed_width() {
        let ids = RequestIds::new();
        let a = ids.next();
        let b = ids.next();
        assert_ne!(a, b);
        assert_eq!(a.len(), 20);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
    }

    #[tokio::test]
    async fn error_responses_are_s3_xml() {
        let err = ApiError::from(S3ErrorCode::NoSuchKey);
        let response = error_response(err, "/bkt/a&b", "REQ1", false);
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/xml");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>\
             <Message>The specified key does not exist.</Message><Resource>/bkt/a&amp;b</Resource>\
             <RequestId>REQ1</RequestId></Error>"
        );
    }

    #[tokio::test]
    async fn head_errors_have_no_body() {
        let err = quarry_object::Error::InvalidRange { size: 9 }.into();
        let response = error_response(err, "/b/k", "REQ2", true);
        assert_eq!(response.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(response.headers()["content-range"], "bytes */9");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(body.is_empty());
    }
}
