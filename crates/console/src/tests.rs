//! The console in front of a real S3 service (quarry-s3 over an erasure-coded layer on temp
//! directories), driven in process: sign-in, CSRF and origin refusals beside their passing
//! controls, forwarding under the session's identity, share links.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use http::{Request, StatusCode};
use quarry_object::{ErasureServer, ObjectConfig};
use quarry_s3::{AlwaysReady, Credentials, S3Config};
use tower::ServiceExt;

use super::*;

const AK: &str = "consoleroot";
const SK: &str = "console-root-secret-0123456789";
const HOST: &str = "127.0.0.1:9001";

struct Env {
    console: axum::Router,
    s3: axum::Router,
    _dir: tempfile::TempDir,
}

async fn env_with(ttl: Duration) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let drives: Vec<_> = (0..4).map(|i| dir.path().join(format!("d{i}"))).collect();
    for d in &drives {
        std::fs::create_dir_all(d).unwrap();
    }
    let layer = ErasureServer::open_local(drives, ObjectConfig::default())
        .await
        .unwrap();
    let s3 = quarry_s3::app(
        layer,
        Arc::new(AlwaysReady),
        S3Config {
            region: "us-east-1".into(),
            credentials: vec![Credentials {
                access_key: AK.into(),
                secret_key: SK.into(),
            }],
            domains: vec![],
            metrics: Default::default(),
            sse: Default::default(),
            lifecycle: Default::default(),
            default_object_ownership: Default::default(),
            client_rdma: Default::default(),
        },
    );
    let console = router(
        s3.clone(),
        ConsoleConfig {
            region: "us-east-1".into(),
            s3: S3Address {
                scheme: "http",
                bound: "0.0.0.0:9000".parse::<SocketAddr>().unwrap(),
            },
            https: false,
            session_ttl: ttl,
        },
    );
    Env {
        console,
        s3,
        _dir: dir,
    }
}

async fn env() -> Env {
    env_with(SESSION_TTL).await
}

struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: bytes::Bytes,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(app: &axum::Router, req: Request<Body>) -> Answer {
    let r = app.clone().oneshot(req).await.unwrap();
    let status = r.status();
    let headers = r.headers().clone();
    let body = axum::body::to_bytes(r.into_body(), 64 << 20).await.unwrap();
    Answer {
        status,
        headers,
        body,
    }
}

fn req(method: &str, uri: &str) -> http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("host", HOST)
}

async fn login(e: &Env, ak: &str, sk: &str) -> Answer {
    send(
        &e.console,
        req("POST", "/api/login")
            .header("content-type", "application/json")
            .header("origin", format!("http://{HOST}"))
            .body(Body::from(
                serde_json::json!({ "accessKey": ak, "secretKey": sk }).to_string(),
            ))
            .unwrap(),
    )
    .await
}

/// Signs in as root: (cookie header value, csrf token).
async fn signed_in(e: &Env) -> (String, String) {
    let a = login(e, AK, SK).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text());
    let cookie = a.headers["set-cookie"].to_str().unwrap();
    let pair = cookie.split(';').next().unwrap().to_owned();
    (pair, a.json()["csrf"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn the_page_and_assets_carry_strict_headers_and_content_hash_caching() {
    let e = env().await;
    let page = send(&e.console, req("GET", "/").body(Body::empty()).unwrap()).await;
    assert_eq!(page.status, StatusCode::OK);
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"));
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    assert_eq!(page.headers["cache-control"], "no-cache, no-store");
    let build = assets::build_id();
    assert!(page.text().contains(&format!("/static/{build}/app.js")));
    let js = send(
        &e.console,
        req("GET", &format!("/static/{build}/app.js"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(js.status, StatusCode::OK);
    assert!(js.headers["cache-control"]
        .to_str()
        .unwrap()
        .contains("immutable"));
    assert!(js.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    let old = send(
        &e.console,
        req("GET", "/static/0123/app.js")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(old.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn sign_in_refuses_wrong_keys_and_accepts_right_ones() {
    let e = env().await;
    let wrong = login(&e, AK, "not-the-secret-at-all").await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.json()["code"], "SignatureDoesNotMatch");
    assert!(wrong.headers.get("set-cookie").is_none());
    let unknown = login(&e, "nobody", SK).await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert_eq!(unknown.json()["code"], "InvalidAccessKeyId");
    assert!(!unknown.text().contains(SK));

    let right = login(&e, AK, SK).await;
    assert_eq!(right.status, StatusCode::OK);
    let cookie = right.headers["set-cookie"].to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert_eq!(right.json()["accessKey"], AK);
    assert!(!right.text().contains(SK), "the secret is never sent back");
}

#[tokio::test]
async fn forwarded_calls_need_the_session_and_changes_need_the_csrf_token() {
    let e = env().await;
    // No session: refused.
    let anon = send(
        &e.console,
        req("GET", "/api/s3/").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(anon.status, StatusCode::UNAUTHORIZED);
    let (cookie, csrf) = signed_in(&e).await;

    // A change without the CSRF token: refused, nothing created.
    let no_token = send(
        &e.console,
        req("PUT", "/api/s3/photos")
            .header("cookie", &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(no_token.status, StatusCode::FORBIDDEN);
    assert_eq!(no_token.json()["code"], "InvalidCsrfToken");
    let wrong_token = send(
        &e.console,
        req("PUT", "/api/s3/photos")
            .header("cookie", &cookie)
            .header("x-quarry-csrf", "0".repeat(64))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(wrong_token.status, StatusCode::FORBIDDEN);
    // From another site, even with the token: refused.
    let cross = send(
        &e.console,
        req("PUT", "/api/s3/photos")
            .header("cookie", &cookie)
            .header("x-quarry-csrf", &csrf)
            .header("origin", "https://evil.example")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    assert_eq!(cross.json()["code"], "CrossOriginRefused");
    let listed = send(
        &e.console,
        req("GET", "/api/s3/")
            .header("cookie", &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(listed.status, StatusCode::OK);
    assert!(!listed.text().contains("photos"), "{}", listed.text());

    // The control: same-origin with the token.
    let made = send(
        &e.console,
        req("PUT", "/api/s3/photos")
            .header("cookie", &cookie)
            .header("x-quarry-csrf", &csrf)
            .header("origin", format!("http://{HOST}"))
            .header("sec-fetch-site", "same-origin")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.text());

    // An object with a name that needs encoding, and an HTML body: stored and read back, but
    // never served as a page of the console's origin.
    let put = send(
        &e.console,
        req("PUT", "/api/s3/photos/dir%20a/x%2By.html")
            .header("cookie", &cookie)
            .header("x-quarry-csrf", &csrf)
            .header("content-type", "text/html")
            .header("x-amz-meta-origin", "console")
            .header("content-length", "27")
            .body(Body::from("<script>alert(1)</script>\n\n"))
            .unwrap(),
    )
    .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text());
    let got = send(
        &e.console,
        req("GET", "/api/s3/photos/dir%20a/x%2By.html")
            .header("cookie", &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.text(), "<script>alert(1)</script>\n\n");
    assert_eq!(got.headers["x-amz-meta-origin"], "console");
    assert!(got.headers["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("sandbox"));
    assert!(got.headers["content-disposition"]
        .to_str()
        .unwrap()
        .starts_with("attachment"));
    let list = send(
        &e.console,
        req(
            "GET",
            "/api/s3/photos?list-type=2&prefix=dir+a/&delimiter=/",
        )
        .header("cookie", &cookie)
        .body(Body::empty())
        .unwrap(),
    )
    .await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.text());
    assert!(
        list.text().contains("<Key>dir a/x+y.html</Key>"),
        "{}",
        list.text()
    );

    // Signed out: the cookie no longer works.
    let out = send(
        &e.console,
        req("POST", "/api/logout")
            .header("cookie", &cookie)
            .header("x-quarry-csrf", &csrf)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(out.status, StatusCode::OK);
    assert!(out.headers["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    let after = send(
        &e.console,
        req("GET", "/api/s3/")
            .header("cookie", &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(after.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn sessions_expire() {
    let e = env_with(Duration::from_millis(300)).await;
    let (cookie, _) = signed_in(&e).await;
    let ok = send(
        &e.console,
        req("GET", "/api/session")
            .header("cookie", &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let late = send(
        &e.console,
        req("GET", "/api/s3/")
            .header("cookie", &cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(late.status, StatusCode::UNAUTHORIZED);
    assert_eq!(late.json()["code"], "SessionExpired");
}

#[tokio::test]
async fn share_links_work_without_a_session_and_only_for_readable_objects() {
    let e = env().await;
    let (cookie, csrf) = signed_in(&e).await;
    let put = |uri: &'static str, body: &'static str| {
        req("PUT", uri)
            .header("cookie", &cookie)
            .header("x-quarry-csrf", &csrf)
            .header("content-length", body.len().to_string())
            .body(Body::from(body))
            .unwrap()
    };
    assert_eq!(
        send(&e.console, put("/api/s3/share", "")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&e.console, put("/api/s3/share/a%20b.txt", "shared bytes"))
            .await
            .status,
        StatusCode::OK
    );
    let presign = |key: &str, expires: u64| {
        req("POST", "/api/presign")
            .header("cookie", &cookie)
            .header("x-quarry-csrf", &csrf)
            .header("content-type", "application/json")
            .body(Body::from(
                serde_json::json!({ "bucket": "share", "key": key, "expires": expires })
                    .to_string(),
            ))
            .unwrap()
    };
    let missing = send(&e.console, presign("nope", 60)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let too_long = send(&e.console, presign("a b.txt", 8 * 24 * 3600)).await;
    assert_eq!(too_long.status, StatusCode::BAD_REQUEST);
    let ok = send(&e.console, presign("a b.txt", 600)).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text());
    let url = ok.json()["url"].as_str().unwrap().to_owned();
    // The S3 port was bound to 0.0.0.0: the link uses the console's host name.
    let rest = url.strip_prefix("http://127.0.0.1:9000").expect(&url);
    assert!(
        rest.contains("X-Amz-Signature=") && rest.contains("X-Amz-Expires=600"),
        "{url}"
    );
    let fetched = send(
        &e.s3,
        Request::builder()
            .uri(rest)
            .header("host", "127.0.0.1:9000")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(fetched.status, StatusCode::OK, "{}", fetched.text());
    assert_eq!(fetched.text(), "shared bytes");
    // A tampered link is refused.
    let tampered = rest.replace("a%20b.txt", "other.txt");
    let refused = send(
        &e.s3,
        Request::builder()
            .uri(&tampered)
            .header("host", "127.0.0.1:9000")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
}

#[test]
fn share_links_use_a_specific_bind_address_as_is() {
    let s3 = S3Address {
        scheme: "https",
        bound: "10.1.2.3:9000".parse().unwrap(),
    };
    assert_eq!(
        share_base(&s3, "console.example:9001"),
        "https://10.1.2.3:9000"
    );
    let any = S3Address {
        scheme: "http",
        bound: "[::]:9000".parse().unwrap(),
    };
    assert_eq!(share_base(&any, "[::1]:9001"), "http://[::1]:9000");
    assert_eq!(share_base(&any, "box.lan:9001"), "http://box.lan:9000");
}

/// The identity pages' IAM calls: signed for `iam` as the session's user and answered by the
/// IAM query API; like every change, they need the session and its CSRF token.
#[tokio::test]
async fn iam_calls_need_the_session_and_the_csrf_token() {
    let e = env().await;
    let form = "Action=CreateUser&Version=2010-05-08&UserName=alice";
    let call = |cookie: Option<&str>, csrf: Option<&str>, body: &'static str| {
        let mut r = req("POST", "/api/iam")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", format!("http://{HOST}"));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        if let Some(t) = csrf {
            r = r.header("x-quarry-csrf", t);
        }
        r.body(Body::from(body)).unwrap()
    };
    let anon = send(&e.console, call(None, None, form)).await;
    assert_eq!(anon.status, StatusCode::UNAUTHORIZED);
    let (cookie, csrf) = signed_in(&e).await;
    let no_token = send(&e.console, call(Some(&cookie), None, form)).await;
    assert_eq!(no_token.status, StatusCode::FORBIDDEN);
    assert_eq!(no_token.json()["code"], "InvalidCsrfToken");
    let listed = send(
        &e.console,
        call(
            Some(&cookie),
            Some(&csrf),
            "Action=ListUsers&Version=2010-05-08",
        ),
    )
    .await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text());
    assert!(!listed.text().contains("alice"), "{}", listed.text());
    // The control: with the token, the user is made and listed.
    let made = send(&e.console, call(Some(&cookie), Some(&csrf), form)).await;
    assert_eq!(made.status, StatusCode::OK, "{}", made.text());
    assert!(
        made.text().contains("<UserName>alice</UserName>"),
        "{}",
        made.text()
    );
    let listed = send(
        &e.console,
        call(
            Some(&cookie),
            Some(&csrf),
            "Action=ListUsers&Version=2010-05-08",
        ),
    )
    .await;
    assert!(
        listed.text().contains("<UserName>alice</UserName>"),
        "{}",
        listed.text()
    );
    // A form larger than the IAM API takes is refused here.
    let big: &'static str =
        Box::leak(format!("Action=ListUsers&x={}", "a".repeat(70_000)).into_boxed_str());
    let too_big = send(&e.console, call(Some(&cookie), Some(&csrf), big)).await;
    assert_eq!(too_big.status, StatusCode::PAYLOAD_TOO_LARGE);
}
