//! What browsers need: virtual-host-style addressing, bucket CORS configuration with preflight
//! and response headers, and form uploads (POST with a signed policy).

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use aws_smithy_runtime_api::client::dns::{DnsFuture, ResolveDns};
use base64::Engine as _;
use quarry_integration::aws_sdk_s3::config::retry::RetryConfig;
use quarry_integration::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use quarry_integration::aws_sdk_s3::primitives::{ByteStream, DateTime, DateTimeFormat};
use quarry_integration::aws_sdk_s3::types::{CorsConfiguration, CorsRule};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;

// ---------------------------------------------------------------------------------------------
// Virtual-host style
// ---------------------------------------------------------------------------------------------

/// Resolves every name to 127.0.0.1, so `<bucket>.s3.quarry.test` reaches the test server
/// with that exact Host header.
#[derive(Debug, Clone)]
struct Loopback;

impl ResolveDns for Loopback {
    fn resolve_dns<'a>(&'a self, _name: &'a str) -> DnsFuture<'a> {
        DnsFuture::ready(Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]))
    }
}

/// An SDK client that addresses buckets by host name (`force_path_style(false)`), or by path
/// on the bare domain.
fn domain_client(s: &TestServer, path_style: bool) -> Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
        .build_with_resolver(Loopback);
    let conf = quarry_integration::aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(format!("http://{VHOST_DOMAIN}:{}", s.port()))
        .force_path_style(path_style)
        .http_client(http)
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(
            s.access_key(),
            s.secret_key(),
            None,
            None,
            "quarry-test",
        ))
        .retry_config(RetryConfig::disabled())
        .build();
    Client::from_conf(conf)
}

#[tokio::test]
async fn virtual_host_style_with_the_sdk() {
    let s = TestServer::start(4).await;
    let vhost = domain_client(&s, false);
    // CreateBucket, PutObject, GetObject, HeadObject, ListObjectsV2, DeleteObject: every
    // request names the bucket in its Host only.
    vhost
        .create_bucket()
        .bucket("vbkt")
        .send()
        .await
        .unwrap_or_else(|e| panic!("create bucket: {}", describe(&e)));
    let data = random_bytes(300 * 1024);
    for key in ["plain", "dir/sub/a b+c%d.txt", "ünïcödé/ключ"] {
        vhost
            .put_object()
            .bucket("vbkt")
            .key(key)
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("put {key}: {}", describe(&e)));
        let got = vhost
            .get_object()
            .bucket("vbkt")
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("get {key}: {}", describe(&e)));
        let body = got.body.collect().await.expect("body").into_bytes();
        assert_bytes_eq(&body, &data, key);
        let head = vhost
            .head_object()
            .bucket("vbkt")
            .key(key)
            .send()
            .await
            .expect("head");
        assert_eq!(head.content_length(), Some(data.len() as i64));
    }
    let list = vhost
        .list_objects_v2()
        .bucket("vbkt")
        .prefix("dir/")
        .send()
        .await
        .expect("list");
    let keys: Vec<_> = list.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["dir/sub/a b+c%d.txt"]);

    // A presigned URL for a virtual host: the signature covers the path as sent, without the
    // bucket, and the Host.
    let presigned = vhost
        .get_object()
        .bucket("vbkt")
        .key("dir/sub/a b+c%d.txt")
        .presigned(
            quarry_integration::aws_sdk_s3::presigning::PresigningConfig::expires_in(
                Duration::from_secs(300),
            )
            .expect("presigning config"),
        )
        .await
        .expect("presign");
    let url = presigned.uri().to_string();
    assert!(
        url.starts_with(&format!("http://vbkt.{VHOST_DOMAIN}:")),
        "{url}"
    );
    let http = reqwest::Client::builder()
        .resolve(
            &format!("vbkt.{VHOST_DOMAIN}"),
            std::net::SocketAddr::from(([127, 0, 0, 1], s.port())),
        )
        .build()
        .expect("client");
    let r = http.get(&url).send().await.expect("presigned get");
    assert_eq!(r.status().as_u16(), 200);
    assert_bytes_eq(&r.bytes().await.expect("body"), &data, "presigned vhost");
    // The same URL sent to another bucket's host does not verify.
    let other = url.replace("http://vbkt.", "http://other.");
    let http = reqwest::Client::builder()
        .resolve(
            &format!("other.{VHOST_DOMAIN}"),
            std::net::SocketAddr::from(([127, 0, 0, 1], s.port())),
        )
        .build()
        .expect("client");
    let r = http.get(&other).send().await.expect("presigned get");
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;

    // The same objects path style: on 127.0.0.1 and on the bare domain.
    assert_eq!(get_bytes(&s.client(), "vbkt", "plain").await, data);
    let bare = domain_client(&s, true);
    let got = bare
        .get_object()
        .bucket("vbkt")
        .key("plain")
        .send()
        .await
        .expect("path style on the bare domain");
    assert_bytes_eq(
        &got.body.collect().await.expect("body").into_bytes(),
        &data,
        "bare domain",
    );
    let buckets = bare.list_buckets().send().await.expect("list buckets");
    assert!(buckets.buckets().iter().any(|b| b.name() == Some("vbkt")));

    vhost
        .delete_object()
        .bucket("vbkt")
        .key("plain")
        .send()
        .await
        .expect("delete");
    assert_s3_error(
        s.client()
            .get_object()
            .bucket("vbkt")
            .key("plain")
            .send()
            .await,
        404,
        "NoSuchKey",
    );
    // A bucket that does not exist, by host.
    assert_s3_error(
        vhost.get_object().bucket("nosuch").key("k").send().await,
        404,
        "NoSuchBucket",
    );
}

// ---------------------------------------------------------------------------------------------
// CORS
// ---------------------------------------------------------------------------------------------

fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
    let mut b = CorsRule::builder();
    for o in origins {
        b = b.allowed_origins(*o);
    }
    for m in methods {
        b = b.allowed_methods(*m);
    }
    for h in headers {
        b = b.allowed_headers(*h);
    }
    b.build().expect("rule")
}

#[tokio::test]
async fn cors_configuration_round_trip_and_validation() {
    let s = TestServer::start(4).await;
    s.create_bucket("corsb").await;
    let c = s.client();
    assert_s3_error(
        c.get_bucket_cors().bucket("corsb").send().await,
        404,
        "NoSuchCORSConfiguration",
    );
    let mut first = rule(&["https://*.example.com"], &["GET", "PUT"], &["x-amz-*"]);
    first.id = Some("web".into());
    first.expose_headers = Some(vec!["ETag".into(), "x-amz-request-id".into()]);
    first.max_age_seconds = Some(600);
    let second = rule(&["*"], &["GET"], &[]);
    c.put_bucket_cors()
        .bucket("corsb")
        .cors_configuration(
            CorsConfiguration::builder()
                .cors_rules(first)
                .cors_rules(second)
                .build()
                .expect("config"),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("put cors: {}", describe(&e)));
    let got = c
        .get_bucket_cors()
        .bucket("corsb")
        .send()
        .await
        .expect("get cors");
    let rules = got.cors_rules();
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].id(), Some("web"));
    assert_eq!(rules[0].allowed_origins(), ["https://*.example.com"]);
    assert_eq!(rules[0].allowed_methods(), ["GET", "PUT"]);
    assert_eq!(rules[0].allowed_headers(), ["x-amz-*"]);
    assert_eq!(rules[0].expose_headers(), ["ETag", "x-amz-request-id"]);
    assert_eq!(rules[0].max_age_seconds(), Some(600));
    assert_eq!(rules[1].allowed_origins(), ["*"]);

    // Refused documents, with S3's codes; the stored configuration is unchanged.
    let wrap = |r: &str| format!("<CORSConfiguration>{r}</CORSConfiguration>");
    for (doc, code) in [
        ("<CORSConfiguration/>".to_string(), "MalformedXML"),
        ("<CORSConfiguration><CORSRule>".to_string(), "MalformedXML"),
        (wrap("<CORSRule><AllowedMethod>GET</AllowedMethod></CORSRule>"), "MalformedXML"),
        (
            wrap("<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod></CORSRule>"),
            "InvalidRequest",
        ),
        (
            wrap("<CORSRule><AllowedOrigin>http://*.*.com</AllowedOrigin><AllowedMethod>GET</AllowedMethod></CORSRule>"),
            "InvalidRequest",
        ),
    ] {
        let body = doc.clone().into_bytes();
        let md5 = md5_b64(&body);
        let r = s
            .signed("PUT", "/corsb?cors", &[("content-md5", md5.as_str())], body)
            .await;
        expect_raw_error(r, 400, code).await;
    }
    let got = c
        .get_bucket_cors()
        .bucket("corsb")
        .send()
        .await
        .expect("get cors");
    assert_eq!(got.cors_rules().len(), 2);

    // Not a bucket: NoSuchBucket.
    assert_s3_error(
        c.get_bucket_cors().bucket("nosuchbucket").send().await,
        404,
        "NoSuchBucket",
    );

    c.delete_bucket_cors()
        .bucket("corsb")
        .send()
        .await
        .expect("delete cors");
    assert_s3_error(
        c.get_bucket_cors().bucket("corsb").send().await,
        404,
        "NoSuchCORSConfiguration",
    );
    // Deleting the bucket deletes its configuration: a new bucket of that name has none.
    c.put_bucket_cors()
        .bucket("corsb")
        .cors_configuration(
            CorsConfiguration::builder()
                .cors_rules(rule(&["*"], &["GET"], &[]))
                .build()
                .expect("config"),
        )
        .send()
        .await
        .expect("put cors");
    c.delete_bucket()
        .bucket("corsb")
        .send()
        .await
        .expect("delete bucket");
    s.create_bucket("corsb").await;
    assert_s3_error(
        c.get_bucket_cors().bucket("corsb").send().await,
        404,
        "NoSuchCORSConfiguration",
    );
}

async fn preflight(
    s: &TestServer,
    path: &str,
    origin: Option<&str>,
    method: &str,
    headers: Option<&str>,
) -> reqwest::Response {
    let http = reqwest::Client::new();
    let mut rb = http.request(reqwest::Method::OPTIONS, format!("{}{path}", s.endpoint()));
    if let Some(o) = origin {
        rb = rb.header("origin", o);
    }
    if !method.is_empty() {
        rb = rb.header("access-control-request-method", method);
    }
    if let Some(h) = headers {
        rb = rb.header("access-control-request-headers", h);
    }
    rb.send().await.expect("send preflight")
}

fn header<'r>(r: &'r reqwest::Response, name: &str) -> Option<&'r str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn preflight_and_response_headers() {
    let s = TestServer::start(4).await;
    s.create_bucket("web").await;
    put_bytes(&s.client(), "web", "page.html", b"<html/>").await;

    // No configuration yet: every preflight is refused.
    let r = preflight(
        &s,
        "/web/page.html",
        Some("https://app.example.com"),
        "GET",
        None,
    )
    .await;
    let body = expect_raw_error(r, 403, "AccessForbidden").await;
    assert!(body.contains("CORSResponse"), "{body}");

    let mut r1 = rule(
        &["https://*.example.com"],
        &["GET", "PUT"],
        &["x-amz-*", "content-type"],
    );
    r1.expose_headers = Some(vec!["ETag".into()]);
    r1.max_age_seconds = Some(3000);
    s.client()
        .put_bucket_cors()
        .bucket("web")
        .cors_configuration(
            CorsConfiguration::builder()
                .cors_rules(r1)
                .cors_rules(rule(&["*"], &["GET"], &[]))
                .build()
                .expect("config"),
        )
        .send()
        .await
        .expect("put cors");

    // Allowed: no credentials needed, the answer names what is allowed.
    let r = preflight(
        &s,
        "/web/page.html",
        Some("https://app.example.com"),
        "PUT",
        Some("X-Amz-Date, Content-Type"),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(header(&r, "access-control-allow-methods"), Some("GET, PUT"));
    assert_eq!(
        header(&r, "access-control-allow-headers"),
        Some("x-amz-date, content-type")
    );
    assert_eq!(header(&r, "access-control-max-age"), Some("3000"));
    assert_eq!(header(&r, "access-control-expose-headers"), Some("ETag"));
    assert_eq!(header(&r, "access-control-allow-credentials"), Some("true"));

    // Any origin may GET through the second rule, answered with `*`.
    let r = preflight(
        &s,
        "/web/page.html",
        Some("https://elsewhere.org"),
        "GET",
        None,
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
    assert_eq!(header(&r, "access-control-allow-credentials"), None);

    // Refused: a method, a header or an origin no rule allows.
    for (origin, method, headers) in [
        ("https://elsewhere.org", "PUT", None),
        ("https://app.example.com", "DELETE", None),
        ("https://app.example.com", "PUT", Some("authorization")),
        ("http://app.example.com", "PUT", None),
    ] {
        let r = preflight(&s, "/web/page.html", Some(origin), method, headers).await;
        let body = expect_raw_error(r, 403, "AccessForbidden").await;
        assert!(
            body.contains("CORSResponse: This CORS request is not allowed."),
            "{body}"
        );
    }
    // Malformed preflights.
    let r = preflight(&s, "/web/page.html", None, "GET", None).await;
    expect_raw_error(r, 400, "BadRequest").await;
    let r = preflight(
        &s,
        "/web/page.html",
        Some("https://a.example.com"),
        "",
        None,
    )
    .await;
    expect_raw_error(r, 400, "BadRequest").await;
    let r = preflight(
        &s,
        "/nosuchbucket/k",
        Some("https://a.example.com"),
        "GET",
        None,
    )
    .await;
    expect_raw_error(r, 404, "NoSuchBucket").await;

    // Actual requests: an Origin that a rule allows gets the headers, with Vary.
    let r = s
        .signed(
            "GET",
            "/web/page.html",
            &[("origin", "https://app.example.com")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("https://app.example.com")
    );
    assert_eq!(header(&r, "access-control-expose-headers"), Some("ETag"));
    assert_eq!(header(&r, "access-control-allow-credentials"), Some("true"));
    assert!(header(&r, "vary").is_some_and(|v| v.contains("Origin")));
    assert_eq!(r.bytes().await.expect("body").as_ref(), b"<html/>");
    // DELETE is allowed to no origin: no CORS headers (the request itself is still served).
    let r = s
        .signed(
            "DELETE",
            "/web/other",
            &[("origin", "https://app.example.com")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    // No Origin, no CORS headers.
    let r = s.signed("GET", "/web/page.html", &[], Vec::new()).await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    assert_eq!(header(&r, "vary"), None);

    // After DeleteBucketCors (on this node: no stale cache) preflights are refused again.
    s.client()
        .delete_bucket_cors()
        .bucket("web")
        .send()
        .await
        .expect("delete cors");
    let r = preflight(
        &s,
        "/web/page.html",
        Some("https://app.example.com"),
        "GET",
        None,
    )
    .await;
    expect_raw_error(r, 403, "AccessForbidden").await;
}

// ---------------------------------------------------------------------------------------------
// Browser form uploads
// ---------------------------------------------------------------------------------------------

/// A signed POST policy and the form fields that go with it.
struct PostForm {
    fields: Vec<(String, String)>,
}

/// `2026-11-29T10:11:12Z` and `20261129T101112Z` for `t`.
fn dates(t: SystemTime) -> (String, String) {
    let iso = DateTime::from(t)
        .fmt(DateTimeFormat::DateTime)
        .expect("format date");
    let iso = match iso.split_once('.') {
        Some((secs, _)) => format!("{secs}Z"),
        None => iso,
    };
    let amz: String = iso.chars().filter(|c| *c != '-' && *c != ':').collect();
    (iso, amz)
}

/// Builds the policy (expiring `expires_in` from now, negative for the past) with `conditions`
/// plus the signature-field conditions, and the signed fields. `fields` are the other fields
/// of the form (key, Content-Type, ...), which come before the signature fields.
fn post_form(
    s: &TestServer,
    bucket: &str,
    conditions: &[serde_json::Value],
    fields: &[(&str, &str)],
    expires_in: i64,
    secret: &str,
) -> PostForm {
    let now = SystemTime::now();
    let expiration = if expires_in >= 0 {
        now + Duration::from_secs(expires_in as u64)
    } else {
        now - Duration::from_secs((-expires_in) as u64)
    };
    let (_, amz_date) = dates(now);
    let (expiration, _) = dates(expiration);
    let credential = format!(
        "{}/{}/{REGION}/s3/aws4_request",
        s.access_key(),
        &amz_date[..8]
    );
    let mut all = vec![
        serde_json::json!({ "bucket": bucket }),
        serde_json::json!({ "x-amz-algorithm": "AWS4-HMAC-SHA256" }),
        serde_json::json!({ "x-amz-credential": credential }),
        serde_json::json!({ "x-amz-date": amz_date }),
    ];
    all.extend(conditions.iter().cloned());
    let policy = serde_json::json!({ "expiration": expiration, "conditions": all });
    let policy_b64 = base64::engine::general_purpose::STANDARD.encode(policy.to_string());
    let key = aws_sigv4::sign::v4::generate_signing_key(secret, now, REGION, "s3");
    let signature = aws_sigv4::sign::v4::calculate_signature(key, policy_b64.as_bytes());
    let mut out: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.extend([
        (
            "x-amz-algorithm".to_string(),
            "AWS4-HMAC-SHA256".to_string(),
        ),
        ("x-amz-credential".to_string(), credential),
        ("x-amz-date".to_string(), amz_date),
        ("policy".to_string(), policy_b64),
        ("x-amz-signature".to_string(), signature),
    ]);
    PostForm { fields: out }
}

/// POSTs the form to `/bucket` with `data` as the file (named `filename`, typed `file_type`).
async fn post_upload(
    s: &TestServer,
    bucket: &str,
    form: &PostForm,
    filename: &str,
    file_type: &str,
    data: Vec<u8>,
) -> reqwest::Response {
    let mut multipart = reqwest::multipart::Form::new();
    for (k, v) in &form.fields {
        multipart = multipart.text(k.clone(), v.clone());
    }
    let part = reqwest::multipart::Part::bytes(data)
        .file_name(filename.to_string())
        .mime_str(file_type)
        .expect("mime");
    multipart = multipart.part("file", part);
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
        .post(format!("{}/{bucket}", s.endpoint()))
        .multipart(multipart)
        .send()
        .await
        .expect("send form")
}

#[tokio::test]
async fn browser_post_uploads() {
    let s = TestServer::start(4).await;
    s.create_bucket("upl").await;
    let c = s.client();

    // A default upload: 204, with ${filename} in the key, metadata and Content-Type.
    let data = random_bytes(2 * 1024 * 1024 + 17);
    let form = post_form(
        &s,
        "upl",
        &[
            serde_json::json!(["starts-with", "$key", "user/"]),
            serde_json::json!(["eq", "$Content-Type", "image/png"]),
            serde_json::json!(["starts-with", "$x-amz-meta-owner", ""]),
            serde_json::json!(["content-length-range", 1, 10 * 1024 * 1024]),
        ],
        &[
            ("key", "user/${filename}"),
            ("Content-Type", "image/png"),
            ("x-amz-meta-owner", "eric"),
        ],
        600,
        s.secret_key(),
    );
    let r = post_upload(
        &s,
        "upl",
        &form,
        "photo.png",
        "application/octet-stream",
        data.clone(),
    )
    .await;
    assert_eq!(r.status().as_u16(), 204, "{:?}", r.text().await);
    let got = c
        .get_object()
        .bucket("upl")
        .key("user/photo.png")
        .send()
        .await
        .unwrap_or_else(|e| panic!("get: {}", describe(&e)));
    assert_eq!(got.content_type(), Some("image/png"));
    assert_eq!(
        got.metadata()
            .and_then(|m| m.get("owner"))
            .map(String::as_str),
        Some("eric")
    );
    assert_eq!(got.e_tag(), Some(etag_of(&data).as_str()));
    assert_bytes_eq(
        &got.body.collect().await.expect("body").into_bytes(),
        &data,
        "posted object",
    );

    // success_action_status 201: a PostResponse document.
    let form = post_form(
        &s,
        "upl",
        &[
            serde_json::json!({ "key": "doc.txt" }),
            serde_json::json!({ "success_action_status": "201" }),
        ],
        &[("key", "doc.txt"), ("success_action_status", "201")],
        600,
        s.secret_key(),
    );
    let r = post_upload(&s, "upl", &form, "x.txt", "text/plain", b"hello".to_vec()).await;
    assert_eq!(r.status().as_u16(), 201);
    let body = r.text().await.expect("body");
    assert_eq!(xml_text(&body, "Bucket").as_deref(), Some("upl"));
    assert_eq!(xml_text(&body, "Key").as_deref(), Some("doc.txt"));
    assert_eq!(
        xml_text(&body, "ETag").map(|e| xml_unescape(&e)),
        Some(etag_of(b"hello"))
    );
    assert_eq!(get_bytes(&c, "upl", "doc.txt").await, b"hello");

    // success_action_redirect: 303 to the URL with bucket, key and etag.
    let form = post_form(
        &s,
        "upl",
        &[
            serde_json::json!(["starts-with", "$key", ""]),
            serde_json::json!({ "success_action_redirect": "https://app.example.com/done?x=1" }),
        ],
        &[
            ("key", "r/ok"),
            (
                "success_action_redirect",
                "https://app.example.com/done?x=1",
            ),
        ],
        600,
        s.secret_key(),
    );
    let r = post_upload(&s, "upl", &form, "f", "text/plain", b"redirected".to_vec()).await;
    assert_eq!(r.status().as_u16(), 303);
    let location = header(&r, "location").expect("location").to_string();
    assert!(
        location.starts_with("https://app.example.com/done?x=1&bucket=upl&key=r%2Fok&etag=")
            || location.starts_with("https://app.example.com/done?x=1&bucket=upl&key=r/ok&etag="),
        "{location}"
    );
    assert_eq!(get_bytes(&c, "upl", "r/ok").await, b"redirected");
}

#[tokio::test]
async fn browser_post_refusals() {
    let s = TestServer::start(4).await;
    s.create_bucket("upl").await;
    let c = s.client();
    let base = [
        serde_json::json!(["starts-with", "$key", "user/"]),
        serde_json::json!(["eq", "$Content-Type", "image/png"]),
        serde_json::json!(["content-length-range", 10, 100]),
    ];
    let fields = [("key", "user/a"), ("Content-Type", "image/png")];
    let ok = vec![7u8; 50];

    // Too large and too small for content-length-range: nothing is stored.
    let form = post_form(&s, "upl", &base, &fields, 600, s.secret_key());
    let r = post_upload(&s, "upl", &form, "a", "image/png", vec![1u8; 101]).await;
    expect_raw_error(r, 400, "EntityTooLarge").await;
    let r = post_upload(&s, "upl", &form, "a", "image/png", vec![1u8; 9]).await;
    expect_raw_error(r, 400, "EntityTooSmall").await;
    assert_s3_error(
        c.get_object().bucket("upl").key("user/a").send().await,
        404,
        "NoSuchKey",
    );

    // A key outside the allowed prefix; a Content-Type other than the one allowed.
    let form = post_form(
        &s,
        "upl",
        &base,
        &[("key", "admin/a"), ("Content-Type", "image/png")],
        600,
        s.secret_key(),
    );
    let r = post_upload(&s, "upl", &form, "a", "image/png", ok.clone()).await;
    let body = expect_raw_error(r, 403, "AccessDenied").await;
    assert!(
        body.contains("Invalid according to Policy: Policy Condition failed"),
        "{body}"
    );
    let form = post_form(
        &s,
        "upl",
        &base,
        &[("key", "user/a"), ("Content-Type", "text/html")],
        600,
        s.secret_key(),
    );
    let r = post_upload(&s, "upl", &form, "a", "text/html", ok.clone()).await;
    expect_raw_error(r, 403, "AccessDenied").await;

    // A field the policy does not mention.
    let form = post_form(
        &s,
        "upl",
        &base,
        &[
            ("key", "user/a"),
            ("Content-Type", "image/png"),
            ("x-amz-meta-sneaky", "1"),
        ],
        600,
        s.secret_key(),
    );
    let r = post_upload(&s, "upl", &form, "a", "image/png", ok.clone()).await;
    let body = expect_raw_error(r, 403, "AccessDenied").await;
    assert!(body.contains("Extra input fields"), "{body}");

    // Expired policy.
    let form = post_form(&s, "upl", &base, &fields, -60, s.secret_key());
    let r = post_upload(&s, "upl", &form, "a", "image/png", ok.clone()).await;
    let body = expect_raw_error(r, 403, "AccessDenied").await;
    assert!(body.contains("Policy expired"), "{body}");

    // Signed with the wrong secret; a policy changed after signing.
    let form = post_form(&s, "upl", &base, &fields, 600, "not-the-secret-key");
    let r = post_upload(&s, "upl", &form, "a", "image/png", ok.clone()).await;
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;
    let mut form = post_form(&s, "upl", &base, &fields, 600, s.secret_key());
    let other = post_form(&s, "upl", &[], &fields, 600, s.secret_key());
    let policy_of = |f: &PostForm| {
        f.fields
            .iter()
            .find(|(k, _)| k == "policy")
            .map(|(_, v)| v.clone())
            .expect("policy")
    };
    let swapped = policy_of(&other);
    for (k, v) in form.fields.iter_mut() {
        if k == "policy" {
            *v = swapped.clone();
        }
    }
    let r = post_upload(&s, "upl", &form, "a", "image/png", ok.clone()).await;
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;

    // A policy for another bucket.
    let form = post_form(&s, "other", &base, &fields, 600, s.secret_key());
    let r = post_upload(&s, "upl", &form, "a", "image/png", ok.clone()).await;
    expect_raw_error(r, 403, "AccessDenied").await;

    // No policy at all: an anonymous upload.
    let anon = PostForm {
        fields: vec![("key".into(), "user/a".into())],
    };
    let r = post_upload(&s, "upl", &anon, "a", "image/png", ok.clone()).await;
    expect_raw_error(r, 403, "AccessDenied").await;

    // Fields before the file larger than S3 allows; a form without a file.
    let big = "x".repeat(70 * 1024);
    let form = post_form(
        &s,
        "upl",
        &[serde_json::json!(["starts-with", "$x-ignore-pad", ""])],
        &[("key", "user/a"), ("x-ignore-pad", big.as_str())],
        600,
        s.secret_key(),
    );
    let r = post_upload(&s, "upl", &form, "a", "image/png", ok.clone()).await;
    expect_raw_error(r, 400, "MaxPostPreDataLengthExceededError").await;
    let form = post_form(&s, "upl", &base, &fields, 600, s.secret_key());
    let mut no_file = reqwest::multipart::Form::new();
    for (k, v) in &form.fields {
        no_file = no_file.text(k.clone(), v.clone());
    }
    let r = reqwest::Client::new()
        .post(format!("{}/upl", s.endpoint()))
        .multipart(no_file)
        .send()
        .await
        .expect("send");
    expect_raw_error(r, 400, "IncorrectNumberOfFilesInPostRequest").await;

    // Nothing above stored anything.
    assert_s3_error(
        c.get_object().bucket("upl").key("user/a").send().await,
        404,
        "NoSuchKey",
    );
    // The same form, correct, works.
    let form = post_form(&s, "upl", &base, &fields, 600, s.secret_key());
    let r = post_upload(&s, "upl", &form, "a", "image/png", ok.clone()).await;
    assert_eq!(r.status().as_u16(), 204, "{:?}", r.text().await);
    assert_eq!(get_bytes(&c, "upl", "user/a").await, ok);

    // A (signed) POST to a bucket that is not a form; unsigned, it is just AccessDenied.
    let r = s.signed("POST", "/upl", &[], b"x".to_vec()).await;
    expect_raw_error(r, 412, "PreconditionFailed").await;
    let r = reqwest::Client::new()
        .post(format!("{}/upl", s.endpoint()))
        .body("x")
        .send()
        .await
        .expect("send");
    expect_raw_error(r, 403, "AccessDenied").await;
}

/// A preflight to a name that cannot be a bucket (the system volume, a dot segment) is about a
/// bucket that does not exist: 404 NoSuchBucket, as for any missing bucket, not 503 with "read
/// quorum lost" in the log (the drives refuse such a volume name, which read as lost drives).
/// Control: the same preflight to a missing but valid name.
#[tokio::test]
async fn preflight_to_names_that_cannot_be_buckets() {
    let s = TestServer::start(4).await;
    let control = preflight(&s, "/no-such-bucket/k", Some("https://a.test"), "GET", None).await;
    let control_status = control.status().as_u16();
    let control_body = control.text().await.unwrap_or_default();
    assert_eq!(control_status, 404, "{control_body}");
    for path in [
        "/.quarry.sys/k",
        "/%2e%2e/k",
        "/%2E%2E/format.json",
        "/.quarry.sys/tmp/x",
    ] {
        let r = preflight(&s, path, Some("https://a.test"), "GET", None).await;
        expect_raw_error(r, 404, "NoSuchBucket").await;
    }
    let log = s.log_tail(200);
    assert!(!log.contains("quorum lost"), "{log}");
}

/// A form signed with SigV2 (`AWSAccessKeyId`, `signature` = base64 HMAC-SHA1 of the policy), as
/// older pages and the ceph/s3-tests post tests send it.
fn post_form_v2(
    bucket: &str,
    conditions: &[serde_json::Value],
    fields: &[(&str, &str)],
    access_key: &str,
    secret: &str,
) -> PostForm {
    use hmac::Mac;
    let (expiration, _) = dates(SystemTime::now() + Duration::from_secs(600));
    let mut all = vec![serde_json::json!({ "bucket": bucket })];
    all.extend(conditions.iter().cloned());
    let policy = serde_json::json!({ "expiration": expiration, "conditions": all });
    let policy_b64 = base64::engine::general_purpose::STANDARD.encode(policy.to_string());
    let mut mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(policy_b64.as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    let mut out: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.extend([
        ("AWSAccessKeyId".to_string(), access_key.to_string()),
        ("policy".to_string(), policy_b64),
        ("signature".to_string(), signature),
    ]);
    PostForm { fields: out }
}

#[tokio::test]
async fn browser_post_with_a_sigv2_policy() {
    let s = TestServer::start(4).await;
    s.create_bucket("v2post").await;
    let c = s.client();
    let conditions = [
        serde_json::json!(["starts-with", "$key", "up/"]),
        serde_json::json!(["eq", "$Content-Type", "text/plain"]),
    ];
    let fields = [("key", "up/${filename}"), ("Content-Type", "text/plain")];
    let form = post_form_v2(
        "v2post",
        &conditions,
        &fields,
        s.access_key(),
        s.secret_key(),
    );
    let r = post_upload(
        &s,
        "v2post",
        &form,
        "a.txt",
        "text/plain",
        b"hello v2".to_vec(),
    )
    .await;
    assert_eq!(
        r.status().as_u16(),
        204,
        "{}",
        r.text().await.unwrap_or_default()
    );
    assert_eq!(get_bytes(&c, "v2post", "up/a.txt").await, b"hello v2");

    // Refusals beside it: the wrong secret, an unknown key, a field the policy does not cover.
    let bad = post_form_v2(
        "v2post",
        &conditions,
        &fields,
        s.access_key(),
        "not-the-secret-key",
    );
    let r = post_upload(&s, "v2post", &bad, "b.txt", "text/plain", b"x".to_vec()).await;
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;
    let mut unknown = post_form_v2(
        "v2post",
        &conditions,
        &fields,
        s.access_key(),
        s.secret_key(),
    );
    for (k, v) in unknown.fields.iter_mut() {
        if k == "AWSAccessKeyId" {
            *v = "NOBODY".into();
        }
    }
    let r = post_upload(&s, "v2post", &unknown, "b.txt", "text/plain", b"x".to_vec()).await;
    expect_raw_error(r, 403, "InvalidAccessKeyId").await;
    let extra = [
        ("key", "up/${filename}"),
        ("Content-Type", "text/plain"),
        ("x-amz-meta-extra", "1"),
    ];
    let uncovered = post_form_v2(
        "v2post",
        &conditions,
        &extra,
        s.access_key(),
        s.secret_key(),
    );
    let r = post_upload(
        &s,
        "v2post",
        &uncovered,
        "b.txt",
        "text/plain",
        b"x".to_vec(),
    )
    .await;
    expect_raw_error(r, 403, "AccessDenied").await;
    let head = c
        .head_object()
        .bucket("v2post")
        .key("up/b.txt")
        .send()
        .await;
    assert_eq!(head.err().and_then(|e| error_status(&e)), Some(404));
}
