//! AWS Signature Version 2: `Authorization: AWS AccessKeyId:Signature` (s3cmd) and presigned
//! `?AWSAccessKeyId=…&Expires=…&Signature=…` URLs (boto3's default), signed by hand here from
//! AWS's definition so each test states exactly what is signed:
//! `base64(HMAC-SHA1(secret, VERB\nContent-MD5\nContent-Type\nDate\nAmzHeaders Resource))`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use quarry_integration::*;
use sha1::Sha1;

fn hmac_sha1_b64(secret: &str, sts: &str) -> String {
    let mut mac = Hmac::<Sha1>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(sts.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

/// The headers of a header-signed request: `headers`, a `Date` (unless `x-amz-date` is among them,
/// which then leaves the Date position empty) and the Authorization. `resource` is the
/// CanonicalizedResource, spelled out by the caller.
pub(crate) fn signed_v2(
    method: &str,
    resource: &str,
    headers: &[(&str, &str)],
    key: &str,
    secret: &str,
    at: SystemTime,
) -> Vec<(String, String)> {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map_or("", |(_, v)| v.trim())
    };
    let mut amz: Vec<(String, String)> = headers
        .iter()
        .filter(|(k, _)| k.to_ascii_lowercase().starts_with("x-amz-"))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    amz.sort();
    let amz: String = amz.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let date = httpdate::fmt_http_date(at);
    let date_field = if get("x-amz-date").is_empty() {
        date.as_str()
    } else {
        ""
    };
    let sts = format!(
        "{method}\n{}\n{}\n{date_field}\n{amz}{resource}",
        get("content-md5"),
        get("content-type")
    );
    let mut out: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if date_field.is_empty() {
        // x-amz-date carries the time; a Date header, if any, plays no part.
    } else {
        out.push(("date".into(), date));
    }
    out.push((
        "authorization".into(),
        format!("AWS {key}:{}", hmac_sha1_b64(secret, &sts)),
    ));
    out
}

/// A presigned URL for `path` (as sent, percent-encoded) plus `query` (unsigned parameters and
/// sub-resources, as sent); `resource` is what is signed.
pub(crate) fn presigned_v2(
    s: &TestServer,
    method: &str,
    path_and_query: &str,
    resource: &str,
    content_type: &str,
    secret: &str,
    expires: u64,
) -> String {
    let sts = format!("{method}\n\n{content_type}\n{expires}\n{resource}");
    let sig = hmac_sha1_b64(secret, &sts);
    let sep = if path_and_query.contains('?') {
        '&'
    } else {
        '?'
    };
    format!(
        "{}{path_and_query}{sep}AWSAccessKeyId={}&Expires={expires}&Signature={}",
        s.endpoint(),
        enc(ACCESS_KEY),
        enc(&sig)
    )
}

fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).expect("after 1970").as_secs()
}

fn header<'r>(r: &'r reqwest::Response, name: &str) -> &'r str {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

#[tokio::test]
async fn header_signed_put_get_list_and_delete() {
    let s = TestServer::start(4).await;
    s.create_bucket("v2bkt").await;
    let now = SystemTime::now();
    let ep = s.endpoint();
    let data = random_bytes(70_000);
    let md5 = md5_b64(&data);

    // PUT with Content-MD5, Content-Type and metadata, all signed; the key is sent encoded.
    let h = signed_v2(
        "PUT",
        "/v2bkt/dir/hello%20world.txt",
        &[
            ("content-md5", &md5),
            ("content-type", "text/plain"),
            ("x-amz-meta-color", "blue"),
        ],
        ACCESS_KEY,
        SECRET_KEY,
        now,
    );
    let r = send_raw(
        "PUT",
        &format!("{ep}/v2bkt/dir/hello%20world.txt"),
        &h,
        data.clone(),
    )
    .await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.text().await.unwrap_or_default()
    );
    assert_eq!(header(&r, "etag"), etag_of(&data));
    // The SDK (SigV4) sees the same object.
    assert_bytes_eq(
        &get_bytes(&s.client(), "v2bkt", "dir/hello world.txt").await,
        &data,
        "SigV4 read",
    );

    // GET with response overrides: signed sub-resources, with their values decoded.
    let h = signed_v2(
        "GET",
        "/v2bkt/dir/hello%20world.txt?response-content-disposition=attachment; filename=x.txt&response-content-type=application/x-test",
        &[],
        ACCESS_KEY,
        SECRET_KEY,
        now,
    );
    let url = format!(
        "{ep}/v2bkt/dir/hello%20world.txt?response-content-type={}&response-content-disposition={}",
        enc("application/x-test"),
        enc("attachment; filename=x.txt")
    );
    let r = send_raw("GET", &url, &h, Vec::new()).await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-type"), "application/x-test");
    assert_eq!(
        header(&r, "content-disposition"),
        "attachment; filename=x.txt"
    );
    assert_eq!(header(&r, "x-amz-meta-color"), "blue");
    assert_bytes_eq(&r.bytes().await.expect("body"), &data, "SigV2 GET");

    // HEAD, with x-amz-date instead of Date.
    let amz_date = httpdate::fmt_http_date(now);
    let h = signed_v2(
        "HEAD",
        "/v2bkt/dir/hello%20world.txt",
        &[("x-amz-date", &amz_date)],
        ACCESS_KEY,
        SECRET_KEY,
        now,
    );
    let r = send_raw(
        "HEAD",
        &format!("{ep}/v2bkt/dir/hello%20world.txt"),
        &h,
        Vec::new(),
    )
    .await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-length"), data.len().to_string());

    // GetBucketLocation: the `location` sub-resource is signed.
    let h = signed_v2("GET", "/v2bkt?location", &[], ACCESS_KEY, SECRET_KEY, now);
    let r = send_raw("GET", &format!("{ep}/v2bkt?location"), &h, Vec::new()).await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(r
        .text()
        .await
        .unwrap_or_default()
        .contains("LocationConstraint"));

    // Listing parameters are not sub-resources: the resource is the bucket alone.
    for query in ["list-type=2&prefix=dir%2F", "prefix=dir%2F&max-keys=10"] {
        let h = signed_v2("GET", "/v2bkt", &[], ACCESS_KEY, SECRET_KEY, now);
        let r = send_raw("GET", &format!("{ep}/v2bkt?{query}"), &h, Vec::new()).await;
        assert_eq!(r.status().as_u16(), 200, "{query}");
        let body = r.text().await.unwrap_or_default();
        assert_eq!(
            xml_texts(&body, "Key"),
            vec!["dir/hello world.txt".to_string()],
            "{body}"
        );
    }
    // ListBuckets.
    let h = signed_v2("GET", "/", &[], ACCESS_KEY, SECRET_KEY, now);
    let r = send_raw("GET", &format!("{ep}/"), &h, Vec::new()).await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(xml_texts(&r.text().await.unwrap_or_default(), "Name").contains(&"v2bkt".to_string()));

    // DeleteObjects: POST ?delete with a signed Content-MD5.
    let xml =
        b"<Delete><Object><Key>dir/hello world.txt</Key></Object><Quiet>true</Quiet></Delete>"
            .to_vec();
    let md5 = md5_b64(&xml);
    let h = signed_v2(
        "POST",
        "/v2bkt?delete",
        &[("content-md5", &md5), ("content-type", "application/xml")],
        ACCESS_KEY,
        SECRET_KEY,
        now,
    );
    let r = send_raw("POST", &format!("{ep}/v2bkt?delete"), &h, xml).await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.text().await.unwrap_or_default()
    );
    assert_s3_error(
        s.client()
            .get_object()
            .bucket("v2bkt")
            .key("dir/hello world.txt")
            .send()
            .await,
        404,
        "NoSuchKey",
    );

    // DeleteObject.
    put_bytes(&s.client(), "v2bkt", "gone", b"x").await;
    let h = signed_v2("DELETE", "/v2bkt/gone", &[], ACCESS_KEY, SECRET_KEY, now);
    let r = send_raw("DELETE", &format!("{ep}/v2bkt/gone"), &h, Vec::new()).await;
    assert_eq!(r.status().as_u16(), 204);
    assert_s3_error(
        s.client()
            .get_object()
            .bucket("v2bkt")
            .key("gone")
            .send()
            .await,
        404,
        "NoSuchKey",
    );
}

#[tokio::test]
async fn header_signed_failures() {
    let s = TestServer::start(4).await;
    s.create_bucket("v2bkt").await;
    let now = SystemTime::now();
    let ep = s.endpoint();
    let url = format!("{ep}/v2bkt/k");

    // Wrong secret: SignatureDoesNotMatch, and the message shows the StringToSign.
    let h = signed_v2("PUT", "/v2bkt/k", &[], ACCESS_KEY, "not-the-secret", now);
    let body = expect_raw_error(
        send_raw("PUT", &url, &h, b"x".to_vec()).await,
        403,
        "SignatureDoesNotMatch",
    )
    .await;
    assert!(body.contains("StringToSign"), "{body}");
    // Unknown access key.
    let h = signed_v2("PUT", "/v2bkt/k", &[], "NOSUCHACCESSKEY", SECRET_KEY, now);
    expect_raw_error(
        send_raw("PUT", &url, &h, b"x".to_vec()).await,
        403,
        "InvalidAccessKeyId",
    )
    .await;
    // 20 minutes of skew either way.
    for t in [
        now - Duration::from_secs(20 * 60),
        now + Duration::from_secs(20 * 60),
    ] {
        let h = signed_v2("PUT", "/v2bkt/k", &[], ACCESS_KEY, SECRET_KEY, t);
        expect_raw_error(
            send_raw("PUT", &url, &h, b"x".to_vec()).await,
            403,
            "RequestTimeTooSkewed",
        )
        .await;
    }
    // Signed for another key, or without the sub-resource that is sent.
    let h = signed_v2("PUT", "/v2bkt/other", &[], ACCESS_KEY, SECRET_KEY, now);
    expect_raw_error(
        send_raw("PUT", &url, &h, b"x".to_vec()).await,
        403,
        "SignatureDoesNotMatch",
    )
    .await;
    let h = signed_v2("GET", "/v2bkt", &[], ACCESS_KEY, SECRET_KEY, now);
    expect_raw_error(
        send_raw("GET", &format!("{ep}/v2bkt?location"), &h, Vec::new()).await,
        403,
        "SignatureDoesNotMatch",
    )
    .await;
    // A signed metadata header changed in transit.
    let mut h = signed_v2(
        "PUT",
        "/v2bkt/k",
        &[("x-amz-meta-a", "1")],
        ACCESS_KEY,
        SECRET_KEY,
        now,
    );
    h[0].1 = "2".into();
    expect_raw_error(
        send_raw("PUT", &url, &h, b"x".to_vec()).await,
        403,
        "SignatureDoesNotMatch",
    )
    .await;
    // The body is not signed, but a signed Content-MD5 that does not match it is still refused.
    let wrong_md5 = md5_b64(b"something else");
    let h = signed_v2(
        "PUT",
        "/v2bkt/k",
        &[("content-md5", &wrong_md5)],
        ACCESS_KEY,
        SECRET_KEY,
        now,
    );
    expect_raw_error(
        send_raw("PUT", &url, &h, b"x".to_vec()).await,
        400,
        "BadDigest",
    )
    .await;
    // A malformed header.
    let h = vec![
        ("date".to_string(), httpdate::fmt_http_date(now)),
        ("authorization".to_string(), format!("AWS {ACCESS_KEY}")),
    ];
    expect_raw_error(
        send_raw("PUT", &url, &h, b"x".to_vec()).await,
        400,
        "InvalidArgument",
    )
    .await;
    // None of these wrote anything.
    assert_s3_error(
        s.client()
            .get_object()
            .bucket("v2bkt")
            .key("k")
            .send()
            .await,
        404,
        "NoSuchKey",
    );
}

#[tokio::test]
async fn presigned_urls() {
    let s = TestServer::start(4).await;
    s.create_bucket("v2bkt").await;
    let data = random_bytes(200_000);
    put_bytes(&s.client(), "v2bkt", "photos/a b+c.jpg", &data).await;
    let http = reqwest::Client::new();
    let now = SystemTime::now();
    let exp = epoch_secs(now) + 300;
    let path = "/v2bkt/photos/a%20b%2Bc.jpg";

    // GET, byte-exact.
    let url = presigned_v2(&s, "GET", path, path, "", SECRET_KEY, exp);
    let r = http.get(&url).send().await.expect("send");
    assert_eq!(r.status().as_u16(), 200, "{url}");
    assert_bytes_eq(&r.bytes().await.expect("body"), &data, "presigned GET");

    // With a signed response override.
    let url = presigned_v2(
        &s,
        "GET",
        &format!("{path}?response-content-type={}", enc("image/jpeg")),
        &format!("{path}?response-content-type=image/jpeg"),
        "",
        SECRET_KEY,
        exp,
    );
    let r = http.get(&url).send().await.expect("send");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(header(&r, "content-type"), "image/jpeg");

    // Expired.
    let url = presigned_v2(&s, "GET", path, path, "", SECRET_KEY, epoch_secs(now) - 10);
    let body = expect_raw_error(
        http.get(&url).send().await.expect("send"),
        403,
        "AccessDenied",
    )
    .await;
    assert!(body.contains("Request has expired"), "{body}");
    // Wrong secret; Expires changed after signing; another key than signed.
    let url = presigned_v2(&s, "GET", path, path, "", "not-the-secret", exp);
    expect_raw_error(
        http.get(&url).send().await.expect("send"),
        403,
        "SignatureDoesNotMatch",
    )
    .await;
    let url = presigned_v2(&s, "GET", path, path, "", SECRET_KEY, exp).replace(
        &format!("Expires={exp}"),
        &format!("Expires={}", exp + 3600),
    );
    expect_raw_error(
        http.get(&url).send().await.expect("send"),
        403,
        "SignatureDoesNotMatch",
    )
    .await;
    let url = presigned_v2(&s, "GET", "/v2bkt/photos/other", path, "", SECRET_KEY, exp);
    expect_raw_error(
        http.get(&url).send().await.expect("send"),
        403,
        "SignatureDoesNotMatch",
    )
    .await;
    // Missing Signature.
    let url = format!(
        "{}{path}?AWSAccessKeyId={ACCESS_KEY}&Expires={exp}",
        s.endpoint()
    );
    expect_raw_error(
        http.get(&url).send().await.expect("send"),
        403,
        "AccessDenied",
    )
    .await;

    // PUT with a signed Content-Type.
    let url = presigned_v2(
        &s,
        "PUT",
        "/v2bkt/up",
        "/v2bkt/up",
        "text/plain",
        SECRET_KEY,
        exp,
    );
    let r = http
        .put(&url)
        .header("content-type", "text/plain")
        .body(b"uploaded".to_vec())
        .send()
        .await
        .expect("send");
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.text().await.unwrap_or_default()
    );
    let got = s
        .client()
        .get_object()
        .bucket("v2bkt")
        .key("up")
        .send()
        .await
        .expect("get");
    assert_eq!(got.content_type(), Some("text/plain"));
    // The same URL with another Content-Type is not what was signed.
    let r = http
        .put(&url)
        .header("content-type", "text/html")
        .body(b"other".to_vec())
        .send()
        .await
        .expect("send");
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;
    assert_eq!(get_bytes(&s.client(), "v2bkt", "up").await, b"uploaded");
}

/// Virtual-hosted style: the bucket comes from the Host header and is signed as `/bucket` before
/// the path.
#[tokio::test]
async fn virtual_host_style() {
    let s = TestServer::start(4).await;
    s.create_bucket("v2bkt").await;
    let data = random_bytes(5000);
    put_bytes(&s.client(), "v2bkt", "dir/obj", &data).await;
    let host = format!("v2bkt.{VHOST_DOMAIN}:{}", s.port());
    let url = format!("http://127.0.0.1:{}/dir/obj", s.port());
    let http = reqwest::Client::new();
    let now = SystemTime::now();
    let send = |headers: Vec<(String, String)>, url: String| {
        let mut rb = http.get(url).header("host", host.as_str());
        for (k, v) in headers {
            rb = rb.header(k, v);
        }
        rb.send()
    };

    let h = signed_v2("GET", "/v2bkt/dir/obj", &[], ACCESS_KEY, SECRET_KEY, now);
    let r = send(h, url.clone()).await.expect("send");
    assert_eq!(r.status().as_u16(), 200);
    assert_bytes_eq(&r.bytes().await.expect("body"), &data, "virtual-host GET");
    // The path alone is not the resource.
    let h = signed_v2("GET", "/dir/obj", &[], ACCESS_KEY, SECRET_KEY, now);
    expect_raw_error(
        send(h, url.clone()).await.expect("send"),
        403,
        "SignatureDoesNotMatch",
    )
    .await;

    // Presigned, signed for /bucket/key and sent to the bucket's host.
    let exp = epoch_secs(now) + 300;
    let sig = hmac_sha1_b64(SECRET_KEY, &format!("GET\n\n\n{exp}\n/v2bkt/dir/obj"));
    let presigned = format!(
        "{url}?AWSAccessKeyId={}&Expires={exp}&Signature={}",
        enc(ACCESS_KEY),
        enc(&sig)
    );
    let r = send(Vec::new(), presigned).await.expect("send");
    assert_eq!(r.status().as_u16(), 200);
    assert_bytes_eq(
        &r.bytes().await.expect("body"),
        &data,
        "virtual-host presigned GET",
    );
}
