//! The Quarry web console: a browser UI for buckets, objects and the cluster's health, served
//! on its own listener (`quarry server --console-address`).
//!
//! What it is: embedded static assets ([`assets`]: HTML, CSS and ES modules, no build step), a
//! sign-in that opens a server-side session ([`session`]), and a proxy ([`proxy`]) that signs
//! each of the page's S3 and admin calls with that session's credentials and hands it to the
//! S3 service in this process. What it is not: a second API. It decides nothing about access;
//! the S3 layer authenticates and authorizes every forwarded call as it does any client's.
//!
//! Why a session cookie rather than SigV4 in the browser: the secret (or a signing key derived
//! from it, which is as good as the secret for a day) never has to live in page memory where an
//! injected script could read it; WebCrypto is missing on plain-HTTP origins other than
//! localhost, so in-browser signing would fail on a LAN address; and the page needs no CORS
//! rules on the S3 port. The cost: the console process holds the credentials in memory for the
//! session's life (one hour by default, or until sign-out).
//!
//! Routes:
//! - `GET /`: the page. `GET /static/<build>/<file>`: assets, cached by content hash.
//! - `POST /api/login` `{accessKey, secretKey, sessionToken?}`: checks the keys with a signed
//!   ListBuckets (an `AccessDenied` answer still proves the keys) and sets the cookie.
//! - `GET /api/session`, `POST /api/logout`.
//! - `ANY /api/s3/<path>?<query>`: the S3 (or admin) call `<path>?<query>`, signed and
//!   forwarded; the S3 answer comes back as is, with headers that stop a browser from rendering
//!   it as a page of the console's origin.
//! - `POST /api/iam` with a form body (`Action=ListUsers&...`): the IAM query API call, signed
//!   for service `iam` and forwarded as `POST /`; the IAM answer comes back as is.
//! - `POST /api/presign` `{bucket, key, versionId?, expires}`: a share link on the S3 port,
//!   made only after a HEAD of the object succeeds as the signed-in user.
//!
//! CSRF: the cookie is `SameSite=Strict`; every state-changing call must carry the session's
//! CSRF token in `X-Quarry-Csrf`, and a cross-site `Origin` or `Sec-Fetch-Site` is refused.

// Handlers return the `Response` they refuse with as their error: that is the point of them.
#![allow(clippy::result_large_err)]

pub mod assets;
pub mod proxy;
pub mod session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::header::{HeaderValue, CONTENT_TYPE, SET_COOKIE};
use http::{HeaderMap, Method, StatusCode};
use serde::Deserialize;
use tower::ServiceExt;

use session::{SessionCredentials, Sessions};

/// How long a session lasts by default.
pub const SESSION_TTL: Duration = Duration::from_secs(3600);

/// Sessions open at once, at most.
pub const MAX_SESSIONS: usize = 4096;

/// Where share links point: the S3 listener.
#[derive(Debug, Clone)]
pub struct S3Address {
    /// `http` or `https`.
    pub scheme: &'static str,
    /// The S3 listener's bound address. When it is a wildcard (0.0.0.0, ::), links use the host
    /// name the browser used for the console, with this port.
    pub bound: SocketAddr,
}

/// The console's settings.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// The region S3 requests are signed for (the server's `--region`).
    pub region: String,
    pub s3: S3Address,
    /// Whether the console itself is served over HTTPS (cookies get `Secure`).
    pub https: bool,
    pub session_ttl: Duration,
}

struct Console {
    s3: axum::Router,
    cfg: ConsoleConfig,
    sessions: Sessions,
}

/// The console as an axum `Router` in front of `s3`, the S3 service of this process (the same
/// one the S3 listener serves: [`quarry_s3`'s `app_with_timeouts`]).
pub fn router(s3: axum::Router, cfg: ConsoleConfig) -> axum::Router {
    let console = Arc::new(Console {
        s3,
        sessions: Sessions::new(cfg.session_ttl, MAX_SESSIONS),
        cfg,
    });
    axum::Router::new().fallback(move |req: Request| {
        let console = console.clone();
        async move {
            let mut r = handle(&console, req).await;
            security_headers(r.headers_mut());
            r
        }
    })
}

/// The headers every console response carries.
fn security_headers(h: &mut HeaderMap) {
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        if !h.contains_key(k) {
            h.insert(k, HeaderValue::from_static(v));
        }
    };
    set(
        h,
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
         connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; \
         base-uri 'none'",
    );
    set(h, "x-content-type-options", "nosniff");
    set(h, "x-frame-options", "DENY");
    set(h, "referrer-policy", "no-referrer");
    set(h, "cross-origin-opener-policy", "same-origin");
    set(h, "cross-origin-resource-policy", "same-origin");
    set(
        h,
        "permissions-policy",
        "camera=(), microphone=(), geolocation=(), payment=()",
    );
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response {
    let mut r = Response::new(Body::from(value.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    r
}

/// A JSON error: `{code, message}`, the S3 error code where there is one.
fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    json_response(
        status,
        &serde_json::json!({ "code": code, "message": message.into() }),
    )
}

async fn handle(console: &Console, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    if path == "/" || path == "/index.html" {
        return match method {
            Method::GET | Method::HEAD => assets::index(),
            _ => error(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "Use GET.",
            ),
        };
    }
    if let Some(rest) = path.strip_prefix("/static/") {
        let (build, name) = rest.split_once('/').unwrap_or((rest, ""));
        return assets::asset(build, name);
    }
    if path == "/favicon.ico" {
        return assets::asset(assets::build_id(), "favicon.svg");
    }
    let Some(api) = path.strip_prefix("/api/") else {
        return error(StatusCode::NOT_FOUND, "NotFound", "No such page.");
    };
    if let Err(r) = same_origin(req.headers(), &method) {
        return r;
    }
    match (api, &method) {
        ("login", &Method::POST) => login(console, req).await,
        ("logout", &Method::POST) => {
            if let Some(id) = session::cookie_id(req.headers()) {
                if let Some(s) = console.sessions.get(&id) {
                    if !csrf_ok(req.headers(), &s) {
                        return csrf_refused();
                    }
                }
                console.sessions.close(&id);
            }
            let mut r = json_response(StatusCode::OK, &serde_json::json!({ "signedOut": true }));
            set_cookie(&mut r, None, console);
            r
        }
        ("session", &Method::GET) => match current(console, req.headers()) {
            Ok(s) => session_json(console, &s),
            Err(r) => r,
        },
        ("presign", &Method::POST) => presign(console, req).await,
        ("iam", &Method::POST) => iam(console, req).await,
        _ if api == "s3" || api.starts_with("s3/") => forward(console, req, &api[2..]).await,
        _ => error(StatusCode::NOT_FOUND, "NotFound", "No such console call."),
    }
}

/// Refuses a state-changing request from another site: a browser says where a request comes
/// from in `Origin` and `Sec-Fetch-Site`.
fn same_origin(headers: &HeaderMap, method: &Method) -> Result<(), Response> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let refused = || {
        error(
            StatusCode::FORBIDDEN,
            "CrossOriginRefused",
            "The console accepts changes only from its own pages.",
        )
    };
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site != "same-origin" && site != "none" {
            return Err(refused());
        }
    }
    if let Some(origin) = headers
        .get(http::header::ORIGIN)
        .and_then(|v| v.to_str().ok())
    {
        let host = headers
            .get(http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let authority = origin.split_once("://").map_or("", |(_, a)| a);
        if host.is_empty() || !authority.eq_ignore_ascii_case(host) {
            return Err(refused());
        }
    }
    Ok(())
}

fn csrf_ok(headers: &HeaderMap, s: &session::Session) -> bool {
    headers
        .get("x-quarry-csrf")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| s.csrf_matches(t))
}

fn csrf_refused() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "InvalidCsrfToken",
        "The request lacks this session's CSRF token: reload the page.",
    )
}

/// The request's live session, or the 401 that tells the page to sign in again.
fn current(console: &Console, headers: &HeaderMap) -> Result<session::Session, Response> {
    session::cookie_id(headers)
        .and_then(|id| console.sessions.get(&id))
        .ok_or_else(|| {
            error(
                StatusCode::UNAUTHORIZED,
                "SessionExpired",
                "Not signed in, or the session expired: sign in again.",
            )
        })
}

fn session_json(console: &Console, s: &session::Session) -> Response {
    let left = s
        .expires
        .saturating_duration_since(std::time::Instant::now());
    json_response(
        StatusCode::OK,
        &serde_json::json!({
            "accessKey": s.credentials.access_key,
            "csrf": s.csrf,
            "expiresIn": left.as_secs(),
            "region": console.cfg.region,
        }),
    )
}

fn set_cookie(r: &mut Response, id: Option<&str>, console: &Console) {
    let v = session::set_cookie(id, console.sessions.ttl(), console.cfg.https);
    if let Ok(v) = HeaderValue::from_str(&v) {
        r.headers_mut().append(SET_COOKIE, v);
    }
}

/// Reads a small JSON body (a form), refusing more than 16 KiB.
async fn small_json<T: for<'de> Deserialize<'de>>(req: Request) -> Result<T, Response> {
    let is_json = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return Err(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "InvalidRequest",
            "Send application/json.",
        ));
    }
    let bytes = axum::body::to_bytes(req.into_body(), 16 * 1024)
        .await
        .map_err(|_| {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "InvalidRequest",
                "The form is too large.",
            )
        })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        error(
            StatusCode::BAD_REQUEST,
            "InvalidRequest",
            format!("Bad form: {e}"),
        )
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoginForm {
    access_key: String,
    secret_key: String,
    #[serde(default)]
    session_token: Option<String>,
}

/// The S3 error code and message of an error document (empty when there is none).
fn s3_error(body: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(body);
    let tag = |t: &str| {
        let open = format!("<{t}>");
        let close = format!("</{t}>");
        text.split_once(&open)
            .and_then(|(_, r)| r.split_once(&close))
            .map(|(v, _)| v.to_owned())
            .unwrap_or_default()
    };
    (tag("Code"), tag("Message"))
}

async fn login(console: &Console, req: Request) -> Response {
    let form: LoginForm = match small_json(req).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    let creds = SessionCredentials {
        access_key: form.access_key.trim().to_owned(),
        secret_key: form.secret_key,
        session_token: form.session_token.filter(|t| !t.is_empty()),
    };
    if creds.access_key.is_empty() || creds.secret_key.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidRequest",
            "Enter an access key and a secret key.",
        );
    }
    if creds.access_key.len() > 256 || creds.secret_key.len() > 1024 {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidRequest",
            "The keys are too long.",
        );
    }
    // ListBuckets as this identity: a valid signature is all sign-in needs; what the identity
    // may do is decided call by call. AccessDenied proves the keys as well as a listing does.
    let answer = call(console, &creds, Method::GET, "/", Body::empty()).await;
    let (status, body) = match answer {
        Ok(r) => {
            let status = r.status();
            let body = axum::body::to_bytes(r.into_body(), 1 << 20)
                .await
                .unwrap_or_default();
            (status, body)
        }
        Err(r) => return r,
    };
    let (code, message) = s3_error(&body);
    if !(status.is_success() || code == "AccessDenied") {
        tracing::info!(access_key = %creds.access_key, code = %code, "console sign-in refused");
        let message = match code.as_str() {
            "InvalidAccessKeyId" | "SignatureDoesNotMatch" => {
                "The access key or the secret key is wrong.".to_owned()
            }
            _ if message.is_empty() => format!("Sign-in failed ({status})."),
            _ => message,
        };
        return error(StatusCode::UNAUTHORIZED, &code, message);
    }
    let (id, s) = match console.sessions.open(creds) {
        Ok(x) => x,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, "SlowDown", e.to_string()),
    };
    tracing::info!(access_key = %s.credentials.access_key, "console sign-in");
    let mut r = session_json(console, &s);
    set_cookie(&mut r, Some(&id), console);
    r
}

/// One signed call to the S3 service as `creds`.
async fn call(
    console: &Console,
    creds: &SessionCredentials,
    method: Method,
    path_and_query: &str,
    body: Body,
) -> Result<Response, Response> {
    call_with(
        console,
        creds,
        method,
        path_and_query,
        &HeaderMap::new(),
        body,
    )
    .await
}

async fn call_with(
    console: &Console,
    creds: &SessionCredentials,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Response> {
    let req = proxy::signed_request(
        creds,
        &console.cfg.region,
        method,
        path_and_query,
        headers,
        body,
        SystemTime::now(),
    )
    .map_err(|e| error(StatusCode::BAD_REQUEST, "InvalidRequest", e.to_string()))?;
    match console.s3.clone().oneshot(req).await {
        Ok(r) => Ok(r),
        Err(e) => match e {},
    }
}

async fn forward(console: &Console, req: Request, s3_path: &str) -> Response {
    let s = match current(console, req.headers()) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if !matches!(*req.method(), Method::GET | Method::HEAD) && !csrf_ok(req.headers(), &s) {
        return csrf_refused();
    }
    let path = if s3_path.is_empty() { "/" } else { s3_path };
    let target = match proxy::canonical_path_and_query(path, req.uri().query()) {
        Ok(t) => t,
        Err(e) => return error(StatusCode::BAD_REQUEST, "InvalidURI", e.to_string()),
    };
    let (parts, body) = req.into_parts();
    let mut r = match call_with(
        console,
        &s.credentials,
        parts.method,
        &target,
        &parts.headers,
        body,
    )
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    as_data(&mut r);
    r
}

/// Marks a forwarded answer as data, never a page of this origin: no script runs in it, and a
/// browser that navigates to it saves it.
fn as_data(r: &mut Response) {
    let h = r.headers_mut();
    h.remove(SET_COOKIE);
    h.insert(
        "content-security-policy",
        HeaderValue::from_static("default-src 'none'; sandbox"),
    );
    let attachment = h
        .get(http::header::CONTENT_DISPOSITION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("attachment")
        });
    if !attachment {
        h.insert(
            http::header::CONTENT_DISPOSITION,
            HeaderValue::from_static("attachment"),
        );
    }
    h.insert(
        "cache-control",
        HeaderValue::from_static("private, no-store"),
    );
}

/// The largest IAM form forwarded (policy documents travel in it; the S3 side allows as much).
const MAX_IAM_FORM: usize = 64 * 1024;

/// One IAM query API call from the identity pages, signed for service `iam` as the session's
/// user: the S3 side authorizes it as any IAM client's call.
async fn iam(console: &Console, req: Request) -> Response {
    let s = match current(console, req.headers()) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if !csrf_ok(req.headers(), &s) {
        return csrf_refused();
    }
    let form = match axum::body::to_bytes(req.into_body(), MAX_IAM_FORM).await {
        Ok(b) => b,
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "EntityTooLarge",
                "The form is larger than 64 KiB.",
            )
        }
    };
    let req = match proxy::signed_iam_form(
        &s.credentials,
        &console.cfg.region,
        form,
        SystemTime::now(),
    ) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, "InvalidRequest", e.to_string()),
    };
    let mut r = match console.s3.clone().oneshot(req).await {
        Ok(r) => r,
        Err(e) => match e {},
    };
    as_data(&mut r);
    r
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PresignForm {
    bucket: String,
    key: String,
    #[serde(default)]
    version_id: Option<String>,
    /// Seconds, 1 to 7 days (SigV4's limit).
    expires: u64,
}

/// SigV4's longest presigned validity: 7 days.
const MAX_PRESIGN: u64 = 7 * 24 * 3600;

async fn presign(console: &Console, req: Request) -> Response {
    let s = match current(console, req.headers()) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if !csrf_ok(req.headers(), &s) {
        return csrf_refused();
    }
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let form: PresignForm = match small_json(req).await {
        Ok(f) => f,
        Err(r) => return r,
    };
    if form.expires == 0 || form.expires > MAX_PRESIGN {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "A share link lasts from 1 second to 7 days.",
        );
    }
    if form.bucket.is_empty() || form.key.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "Name an object.",
        );
    }
    // The link is only as good as the identity's own right to read the object: check it now
    // rather than hand out a link that answers AccessDenied.
    let mut head = format!(
        "/{}/{}",
        proxy::encode(&form.bucket, false),
        proxy::encode(&form.key, true)
    );
    if let Some(v) = &form.version_id {
        head = format!("{head}?versionId={}", proxy::encode(v, false));
    }
    match call(console, &s.credentials, Method::HEAD, &head, Body::empty()).await {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => {
            let status = r.status();
            let (code, message) = match status {
                StatusCode::NOT_FOUND => ("NoSuchKey", "The object does not exist.".to_owned()),
                StatusCode::FORBIDDEN => (
                    "AccessDenied",
                    "You may not read this object, so a link made with your keys would not work either."
                        .to_owned(),
                ),
                _ => ("InvalidRequest", format!("The object cannot be read ({status}).")),
            };
            return error(status, code, message);
        }
        Err(r) => return r,
    }
    let base = share_base(&console.cfg.s3, &host);
    let link = proxy::Presign {
        base: &base,
        bucket: &form.bucket,
        key: &form.key,
        version_id: form.version_id.as_deref(),
        expires: Duration::from_secs(form.expires),
    };
    match proxy::presign_get(
        &s.credentials,
        &console.cfg.region,
        &link,
        SystemTime::now(),
    ) {
        Ok(url) => json_response(
            StatusCode::OK,
            &serde_json::json!({ "url": url, "expires": form.expires }),
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            e.to_string(),
        ),
    }
}

/// `scheme://host:port` of the S3 listener as the browser can reach it.
fn share_base(s3: &S3Address, console_host: &str) -> String {
    let port = s3.bound.port();
    let host = if s3.bound.ip().is_unspecified() {
        // The name the browser used for the console, without its port.
        let h = console_host.trim();
        let name = if let Some(rest) = h.strip_prefix('[') {
            rest.split_once(']').map_or(rest, |(n, _)| n).to_owned()
        } else {
            h.rsplit_once(':').map_or(h, |(n, _)| n).to_owned()
        };
        let name = if name.is_empty() {
            "127.0.0.1".to_owned()
        } else {
            name
        };
        if name.contains(':') {
            format!("[{name}]")
        } else {
            name
        }
    } else {
        match s3.bound.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        }
    };
    format!("{}://{host}:{port}", s3.scheme)
}

#[cfg(test)]
mod tests;
