//! The authentication matrix: every way a request can fail to authenticate, each refused with
//! the S3 error AWS gives, and each next to a control proving the same request passes when it is
//! signed correctly (so a refusal is about the flaw, not about a broken request).
//!
//! Covered in auth.rs and not repeated here: no credentials (`unsigned_requests_are_access_denied`),
//! unknown key and wrong secret (`wrong_credentials`), clock skew and a signed header changed
//! after signing (`hand_signed_requests_and_clock_skew`), a changed body with a signed payload hash
//! (`payload_hash_mismatch_and_unsigned_payload`), an expired presigned URL and a presigned URL
//! used for another key or method (`presigned_urls`), a tampered aws-chunked chunk
//! (`streaming_signed_chunks`).

use std::time::{Duration, SystemTime};

use quarry_integration::aws_sdk_s3::presigning::PresigningConfig;
use quarry_integration::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Signs like `sign_headers`, but for any region and service (for scope tests).
fn sign_scoped(
    method: &str,
    url: &str,
    region: &str,
    service: &str,
    body: &[u8],
    time: SystemTime,
) -> Vec<(String, String)> {
    use aws_sigv4::http_request::{
        sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
        SigningSettings, UriPathNormalizationMode,
    };
    use aws_sigv4::sign::v4;
    let creds = aws_credential_types::Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "t");
    let identity = creds.into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let req = SignableRequest::new(
        method,
        url,
        std::iter::empty::<(&str, &str)>(),
        SignableBody::Bytes(body),
    )
    .expect("signable request");
    let (instructions, _) = sign(req, &params).expect("sign").into_parts();
    instructions
        .headers()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A header edit: given a header, `Some(replacement)` or `None` to keep it.
type HeaderEdit<'a> = &'a dyn Fn(&str, &str) -> Option<(String, String)>;

/// `hs` with every header the edit returns a replacement for replaced.
fn with(hs: &[(String, String)], f: HeaderEdit<'_>) -> Vec<(String, String)> {
    hs.iter()
        .map(|(k, v)| f(k, v).unwrap_or_else(|| (k.clone(), v.clone())))
        .collect()
}

#[track_caller]
fn status_ok(st: u16, body: &str, what: &str) {
    assert!(
        (200..300).contains(&st),
        "control ({what}) should pass, got HTTP {st}: {body}"
    );
}

async fn expect_ok(r: reqwest::Response, what: &str) {
    let st = r.status().as_u16();
    let body = r.text().await.unwrap_or_default();
    status_ok(st, &body, what);
}

/// Sends an HTTP/1.1 request byte for byte (no URL normalisation, header names as given) and
/// returns the status and body.
async fn send_verbatim(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        if k.eq_ignore_ascii_case("host") || k.eq_ignore_ascii_case("content-length") {
            continue;
        }
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    s.write_all(&bytes).await.expect("write request");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_string();
    (status, body)
}

#[track_caller]
fn expect_verbatim_error(got: (u16, String), status: u16, code: &str, what: &str) {
    let parsed = parse_s3_error(&got.1).map(|(c, _)| c);
    assert!(
        got.0 == status && parsed.as_deref() == Some(code),
        "{what}: expected HTTP {status} {code}, got HTTP {} with body: {}",
        got.0,
        got.1
    );
}

#[tokio::test]
async fn auth_wrong_region_and_service_in_scope() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let url = format!("{}/bkt", s.endpoint());
    let now = SystemTime::now();
    let ok = sign_scoped("GET", &url, REGION, "s3", b"", now);
    expect_ok(send_raw("GET", &url, &ok, Vec::new()).await, "us-east-1/s3").await;
    let r = send_raw(
        "GET",
        &url,
        &sign_scoped("GET", &url, "eu-west-1", "s3", b"", now),
        Vec::new(),
    )
    .await;
    expect_raw_error(r, 400, "AuthorizationHeaderMalformed").await;
    for service in ["ec2", "S3", "s3 ", "iam"] {
        let r = send_raw(
            "GET",
            &url,
            &sign_scoped("GET", &url, REGION, service, b"", now),
            Vec::new(),
        )
        .await;
        expect_raw_error(r, 400, "AuthorizationHeaderMalformed").await;
    }
}

#[tokio::test]
async fn auth_future_dated_presigned_url() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("pre").await;
    put_bytes(&c, "pre", "k", b"data").await;
    let http = reqwest::Client::new();
    let presign = |start: SystemTime| {
        let c = c.clone();
        async move {
            c.get_object()
                .bucket("pre")
                .key("k")
                .presigned(
                    PresigningConfig::builder()
                        .start_time(start)
                        .expires_in(Duration::from_secs(3600))
                        .build()
                        .expect("config"),
                )
                .await
                .expect("presign")
                .uri()
                .to_string()
        }
    };
    // Control: valid from now.
    let ok = presign(SystemTime::now()).await;
    expect_ok(http.get(&ok).send().await.expect("send"), "presigned now").await;
    // A few minutes ahead is clock skew, tolerated; an hour ahead is not valid yet.
    let slight = presign(SystemTime::now() + Duration::from_secs(60)).await;
    expect_ok(
        http.get(&slight).send().await.expect("send"),
        "presigned 1 min ahead",
    )
    .await;
    let future = presign(SystemTime::now() + Duration::from_secs(3600)).await;
    let r = http.get(&future).send().await.expect("send");
    expect_raw_error(r, 403, "AccessDenied").await;
    // Expires beyond 7 days is malformed.
    let week = ok.replace("X-Amz-Expires=3600", "X-Amz-Expires=604801");
    assert_ne!(week, ok);
    let r = http.get(&week).send().await.expect("send");
    expect_raw_error(r, 400, "AuthorizationQueryParametersError").await;

    // The valid URL, altered: another signature, an unknown key, another region in the scope,
    // another date in the scope than X-Amz-Date, and an Authorization header on top of it.
    let sig_at = ok.find("X-Amz-Signature=").expect("signature param") + "X-Amz-Signature=".len();
    let mut bad_sig = ok.clone().into_bytes();
    bad_sig[sig_at] = if bad_sig[sig_at] == b'0' { b'1' } else { b'0' };
    let bad_sig = String::from_utf8(bad_sig).expect("ascii");
    let r = http.get(&bad_sig).send().await.expect("send");
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;
    let unknown = ok.replace(
        &format!("X-Amz-Credential={ACCESS_KEY}"),
        "X-Amz-Credential=NOSUCHKEY",
    );
    assert_ne!(unknown, ok);
    let r = http.get(&unknown).send().await.expect("send");
    expect_raw_error(r, 403, "InvalidAccessKeyId").await;
    let region = ok.replace("%2Fus-east-1%2F", "%2Feu-west-1%2F");
    assert_ne!(region, ok);
    let r = http.get(&region).send().await.expect("send");
    expect_raw_error(r, 400, "AuthorizationQueryParametersError").await;
    let cred_date = |u: &str| {
        let i = u
            .find(&format!("X-Amz-Credential={ACCESS_KEY}%2F"))
            .expect("credential")
            + format!("X-Amz-Credential={ACCESS_KEY}%2F").len();
        (i, u[i..i + 8].to_string())
    };
    let (i, d) = cred_date(&ok);
    let other_day = if d.ends_with('1') {
        "19990102"
    } else {
        "19990101"
    };
    let scope_date = format!("{}{other_day}{}", &ok[..i], &ok[i + 8..]);
    let r = http.get(&scope_date).send().await.expect("send");
    expect_raw_error(r, 400, "AuthorizationQueryParametersError").await;
    let both = http
        .get(&ok)
        .header("authorization", "AWS4-HMAC-SHA256 Credential=x/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00")
        .send()
        .await
        .expect("send");
    expect_raw_error(both, 400, "InvalidArgument").await;
    // And the unaltered URL still works.
    expect_ok(
        http.get(&ok).send().await.expect("send"),
        "presigned now, again",
    )
    .await;
}

fn chunked_headers(len: usize) -> [(&'static str, String); 2] {
    [
        ("content-encoding", "aws-chunked".to_string()),
        ("x-amz-decoded-content-length", len.to_string()),
    ]
}

/// Splits an aws-chunked body into its framed chunks (header line, data and CRLF each).
fn split_chunks(body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk header")
            + 2;
        let line = std::str::from_utf8(&rest[..line_end]).expect("ascii header");
        let size =
            usize::from_str_radix(line.split(';').next().unwrap_or("0"), 16).expect("hex size");
        let end = line_end + size + 2;
        out.push(rest[..end].to_vec());
        rest = &rest[end..];
    }
    out
}

#[tokio::test]
async fn auth_replayed_chunk_signatures() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let data = random_bytes(200_000);
    let put = |key: &str, time: SystemTime| {
        let url = format!("{}/bkt/{key}", s.endpoint());
        let h = chunked_headers(data.len());
        let hs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let sig = sign_headers(
            "PUT",
            &url,
            &hs,
            PayloadHash::Literal("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ACCESS_KEY,
            SECRET_KEY,
            time,
        );
        (url, sig)
    };
    let t0 = SystemTime::now();
    // Control.
    let (url, sig) = put("ok", t0);
    let body = signed_chunked_body(&data, 64 * 1024, &sig, SECRET_KEY, None);
    expect_ok(
        send_raw("PUT", &url, &sig.headers, body.clone()).await,
        "chunked PUT",
    )
    .await;
    assert_bytes_eq(
        &get_bytes(&s.client(), "bkt", "ok").await,
        &data,
        "chunked control",
    );

    // The chunks of that request (valid signatures) replayed under another request's seed.
    let (url2, sig2) = put("replay", t0 + Duration::from_secs(1));
    let r = send_raw("PUT", &url2, &sig2.headers, body.clone()).await;
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;

    // Within one request: chunk 1 repeated in place of chunk 2 (same sizes, valid signature once).
    let (url3, sig3) = put("dup", t0);
    let chunks = split_chunks(&signed_chunked_body(
        &data,
        64 * 1024,
        &sig3,
        SECRET_KEY,
        None,
    ));
    assert!(chunks.len() >= 4);
    let mut dup = chunks.clone();
    dup[2] = chunks[1].clone();
    let r = send_raw("PUT", &url3, &sig3.headers, dup.concat()).await;
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;
    // Two chunks swapped.
    let mut swapped = chunks.clone();
    swapped.swap(0, 1);
    let r = send_raw("PUT", &url3, &sig3.headers, swapped.concat()).await;
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;
    // The final (empty) chunk dropped: the body is incomplete, nothing is stored.
    let r = send_raw(
        "PUT",
        &url3,
        &sig3.headers,
        chunks[..chunks.len() - 1].concat(),
    )
    .await;
    assert!(
        !r.status().is_success(),
        "a body without its final chunk was accepted"
    );
    for key in ["replay", "dup"] {
        assert_s3_error(
            s.client().get_object().bucket("bkt").key(key).send().await,
            404,
            "NoSuchKey",
        );
    }
}

#[tokio::test]
async fn auth_header_case_and_whitespace_tricks() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let url = format!("{}/bkt/k", s.endpoint());
    let path = "/bkt/k";
    let body = b"hello".to_vec();
    let sign = |v: &str| {
        sign_headers(
            "PUT",
            &url,
            &[("x-amz-meta-note", v)],
            PayloadHash::Bytes(&body),
            ACCESS_KEY,
            SECRET_KEY,
            SystemTime::now(),
        )
        .headers
    };
    let port = s.port();
    // Control: sent as signed, and with the header name in other case (names are
    // case-insensitive), and with extra outer and inner whitespace in the value (SigV4 trims and
    // collapses runs of spaces).
    let hs = sign("a b");
    expect_ok(send_raw("PUT", &url, &hs, body.clone()).await, "as signed").await;
    let upper = with(&hs, &|k, v| {
        (k == "x-amz-meta-note").then(|| ("X-AMZ-META-NOTE".into(), v.into()))
    });
    let got = send_verbatim(port, "PUT", path, &upper, &body).await;
    status_ok(got.0, &got.1, "upper-case header name");
    let spaced = with(&hs, &|k, _| {
        (k == "x-amz-meta-note").then(|| (k.into(), "  a    b  ".into()))
    });
    let got = send_verbatim(port, "PUT", path, &spaced, &body).await;
    status_ok(got.0, &got.1, "extra whitespace in a signed value");
    let auth_case = with(&hs, &|k, v| {
        (k == "authorization").then(|| ("AUTHORIZATION".into(), v.into()))
    });
    let got = send_verbatim(port, "PUT", path, &auth_case, &body).await;
    status_ok(got.0, &got.1, "upper-case Authorization name");

    // Refused: the value's case changed, a space inserted inside a word, the header sent twice
    // (the canonical value becomes "a b,x"), a signed header dropped.
    let cased = with(&hs, &|k, _| {
        (k == "x-amz-meta-note").then(|| (k.into(), "A B".into()))
    });
    expect_verbatim_error(
        send_verbatim(port, "PUT", path, &cased, &body).await,
        403,
        "SignatureDoesNotMatch",
        "value case",
    );
    let split = with(&hs, &|k, _| {
        (k == "x-amz-meta-note").then(|| (k.into(), "a  b x".into()))
    });
    expect_verbatim_error(
        send_verbatim(port, "PUT", path, &split, &body).await,
        403,
        "SignatureDoesNotMatch",
        "value changed",
    );
    let mut twice = hs.clone();
    twice.push(("x-amz-meta-note".into(), "x".into()));
    expect_verbatim_error(
        send_verbatim(port, "PUT", path, &twice, &body).await,
        403,
        "SignatureDoesNotMatch",
        "header sent twice",
    );
    let dropped: Vec<_> = hs
        .iter()
        .filter(|(k, _)| k != "x-amz-meta-note")
        .cloned()
        .collect();
    expect_verbatim_error(
        send_verbatim(port, "PUT", path, &dropped, &body).await,
        403,
        "SignatureDoesNotMatch",
        "signed header dropped",
    );
    // Folded header value (obsolete line folding) is not a way around the signature.
    let folded = with(&hs, &|k, _| {
        (k == "x-amz-meta-note").then(|| (k.into(), "a\r\n b".into()))
    });
    let got = send_verbatim(port, "PUT", path, &folded, &body).await;
    assert!(
        got.0 == 400 || got.0 == 403,
        "folded header: got HTTP {}: {}",
        got.0,
        got.1
    );
}

#[tokio::test]
async fn auth_path_and_query_encoding_tricks() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let port = s.port();
    let ep = s.endpoint();
    let body = b"x".to_vec();
    let signed = |path: &str| {
        sign_headers(
            "PUT",
            &format!("{ep}{path}"),
            &[],
            PayloadHash::Bytes(&body),
            ACCESS_KEY,
            SECRET_KEY,
            SystemTime::now(),
        )
        .headers
    };
    // Control.
    let hs = signed("/bkt/a%20b");
    let got = send_verbatim(port, "PUT", "/bkt/a%20b", &hs, &body).await;
    status_ok(got.0, &got.1, "a%20b as signed");
    // The same signature on another spelling of the path: refused.
    for other in [
        "/bkt/a+b",
        "/bkt/a%2520b",
        "/bkt/A%20b",
        "/bkt//a%20b",
        "/bkt/a%20b/",
    ] {
        let got = send_verbatim(port, "PUT", other, &hs, &body).await;
        expect_verbatim_error(got, 403, "SignatureDoesNotMatch", other);
    }
    // A slash encoded after signing a real slash (and the reverse).
    let hs = signed("/bkt/d/e");
    status_ok(
        send_verbatim(port, "PUT", "/bkt/d/e", &hs, &body).await.0,
        "",
        "d/e as signed",
    );
    expect_verbatim_error(
        send_verbatim(port, "PUT", "/bkt/d%2Fe", &hs, &body).await,
        403,
        "SignatureDoesNotMatch",
        "d%2Fe",
    );

    // Query: parameter order does not matter (canonical order); an added or changed one does.
    let q = "/bkt?list-type=2&prefix=a";
    let hs = sign_headers(
        "GET",
        &format!("{ep}{q}"),
        &[],
        PayloadHash::Bytes(b""),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    )
    .headers;
    let got = send_verbatim(port, "GET", q, &hs, b"").await;
    status_ok(got.0, &got.1, "query as signed");
    let got = send_verbatim(port, "GET", "/bkt?prefix=a&list-type=2", &hs, b"").await;
    status_ok(got.0, &got.1, "query reordered");
    for other in [
        "/bkt?list-type=2&prefix=a&max-keys=1",
        "/bkt?list-type=2&prefix=b",
        "/bkt?list-type=2",
        "/bkt?list-type=2&prefix=a&prefix=a",
    ] {
        expect_verbatim_error(
            send_verbatim(port, "GET", other, &hs, b"").await,
            403,
            "SignatureDoesNotMatch",
            other,
        );
    }
}

#[tokio::test]
async fn auth_dot_dot_in_keys() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    s.create_bucket("other").await;
    put_bytes(&s.client(), "other", "secret", b"s3cr3t").await;
    let port = s.port();
    let ep = s.endpoint();
    let body = b"x".to_vec();
    let try_put = |path: &str| {
        let hs = sign_headers(
            "PUT",
            &format!("{ep}{path}"),
            &[],
            PayloadHash::Bytes(&body),
            ACCESS_KEY,
            SECRET_KEY,
            SystemTime::now(),
        )
        .headers;
        let path = path.to_string();
        let body = body.clone();
        async move { send_verbatim(port, "PUT", &path, &hs, &body).await }
    };
    // Controls: dots that are not a whole segment are ordinary key characters.
    for ok in ["/bkt/a..b", "/bkt/..a", "/bkt/a/b..", "/bkt/.../x"] {
        let got = try_put(ok).await;
        status_ok(got.0, &got.1, ok);
    }
    // Correctly signed, still refused: `..` (or `.`) as a segment, plain or encoded.
    for bad in [
        "/bkt/a/../b",
        "/bkt/..",
        "/bkt/../other/secret",
        "/bkt/a/%2E%2E/b",
        "/bkt/%2e%2e/other/x",
        "/bkt/a/./b",
        "/bkt/a/..",
    ] {
        let got = try_put(bad).await;
        expect_verbatim_error(got, 400, "InvalidArgument", bad);
    }
    // And the same for GET: nothing outside the bucket is readable.
    let hs = sign_headers(
        "GET",
        &format!("{ep}/bkt/../other/secret"),
        &[],
        PayloadHash::Bytes(b""),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    )
    .headers;
    let got = send_verbatim(port, "GET", "/bkt/../other/secret", &hs, b"").await;
    assert!(
        got.0 == 400 && !got.1.contains("s3cr3t"),
        "GET via ..: HTTP {}: {}",
        got.0,
        got.1
    );
    assert_eq!(get_bytes(&s.client(), "other", "secret").await, b"s3cr3t");
    for i in 0..s.drive_count() {
        let files = list_files(s.drive_path(i));
        assert!(
            !files.iter().any(|f| f.to_string_lossy().contains("/../")
                || f.ends_with("x") && !f.starts_with("bkt")),
            "drive {i}: a write escaped its bucket: {files:?}"
        );
    }
}

#[tokio::test]
async fn auth_signed_payload_hash_with_control() {
    // auth.rs refuses a changed body; here the very same signed headers pass with the signed
    // body, and a body cut short or extended by one byte is refused too.
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let url = format!("{}/bkt/k", s.endpoint());
    let data = random_bytes(300_000);
    let sig = sign_headers(
        "PUT",
        &url,
        &[],
        PayloadHash::Bytes(&data),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    );
    let mut longer = data.clone();
    longer.push(0);
    let mut flipped = data.clone();
    flipped[150_000] ^= 1;
    for (what, body) in [
        ("one bit flipped", flipped),
        ("cut short", data[..data.len() - 1].to_vec()),
        ("one byte longer", longer),
    ] {
        let r = send_raw("PUT", &url, &sig.headers, body).await;
        let st = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        assert!(
            st == 400
                && parse_s3_error(&text).map(|(c, _)| c).as_deref()
                    == Some("XAmzContentSHA256Mismatch"),
            "{what}: expected 400 XAmzContentSHA256Mismatch, got HTTP {st}: {text}"
        );
        assert_s3_error(
            s.client().get_object().bucket("bkt").key("k").send().await,
            404,
            "NoSuchKey",
        );
    }
    expect_ok(
        send_raw("PUT", &url, &sig.headers, data.clone()).await,
        "signed body",
    )
    .await;
    assert_bytes_eq(
        &get_bytes(&s.client(), "bkt", "k").await,
        &data,
        "signed body",
    );
}

/// An `x-amz-*` header the signature does not cover is refused (403 AccessDenied, "There were
/// headers present in the request which were not signed", `<HeadersNotSigned>`), for header
/// auth and presigned SigV4 alike: the holder of a presigned PUT URL must not turn it into a copy
/// of an object it may not read (`x-amz-copy-source`), nor store metadata the signer did not
/// choose. SigV2 signs every `x-amz-*` header, so an added one breaks the signature. Each next to
/// the control that passes.
#[tokio::test]
async fn auth_unsigned_amz_headers_are_refused() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("umh").await;
    s.create_bucket("umh-private").await;
    put_bytes(&c, "umh-private", "secret", b"private bytes").await;
    let http = reqwest::Client::new();
    let stored = |key: &'static str| {
        let c = c.clone();
        async move {
            match c.get_object().bucket("umh").key(key).send().await {
                Ok(o) => Some(o.body.collect().await.expect("body").into_bytes().to_vec()),
                Err(_) => None,
            }
        }
    };
    let refused = |got: (u16, String), header: &str, what: &str| {
        expect_verbatim_error(got.clone(), 403, "AccessDenied", what);
        assert!(
            got.1
                .contains(&format!("<HeadersNotSigned>{header}</HeadersNotSigned>")),
            "{what}: {}",
            got.1
        );
    };
    let send = |req: reqwest::RequestBuilder| async move {
        let r = req.send().await.expect("send");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    };

    // Presigned SigV4 PUT for um/slot.
    let url = c
        .put_object()
        .bucket("umh")
        .key("slot")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).expect("config"))
        .await
        .expect("presign")
        .uri()
        .to_string();
    for (name, value) in [
        ("x-amz-copy-source", "/umh-private/secret"),
        ("x-amz-meta-owner", "mallory"),
        ("x-amz-acl", "public-read"),
        ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
    ] {
        let got = send(http.put(&url).header(name, value).body("")).await;
        refused(got, name, &format!("presigned PUT with unsigned {name}"));
    }
    assert_eq!(stored("slot").await, None, "a refused PUT stored nothing");
    // Control: the URL as signed; x-amz-content-sha256 repeating the URL's UNSIGNED-PAYLOAD too.
    let (st, body) = send(http.put(&url).body("mine")).await;
    status_ok(st, &body, "presigned PUT");
    let (st, body) = send(
        http.put(&url)
            .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
            .body("mine"),
    )
    .await;
    status_ok(
        st,
        &body,
        "presigned PUT with x-amz-content-sha256: UNSIGNED-PAYLOAD",
    );
    assert_eq!(stored("slot").await.as_deref(), Some(&b"mine"[..]));

    // Header auth: a PUT signed without the header it then carries.
    let url = format!("{}/umh/hdr", s.endpoint());
    let signed = |body: &[u8]| {
        sign_headers(
            "PUT",
            &url,
            &[],
            PayloadHash::Bytes(body),
            ACCESS_KEY,
            SECRET_KEY,
            SystemTime::now(),
        )
        .headers
    };
    let put = |headers: Vec<(String, String)>, body: &'static [u8]| {
        let mut req = http.put(&url).body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req
    };
    for (name, value) in [
        ("x-amz-copy-source", "/umh-private/secret"),
        ("x-amz-meta-owner", "mallory"),
        ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
    ] {
        let mut hs = signed(b"");
        hs.push((name.to_string(), value.to_string()));
        refused(
            send(put(hs, b"")).await,
            name,
            &format!("header-signed PUT with unsigned {name}"),
        );
    }
    assert_eq!(stored("hdr").await, None, "a refused PUT stored nothing");
    // Control: the same request as signed; and x-amzn-trace-id (not x-amz-*) unsigned.
    let (st, body) = send(put(signed(b"hdr"), b"hdr")).await;
    status_ok(st, &body, "header-signed PUT");
    let mut hs = signed(b"hdr");
    hs.push(("x-amzn-trace-id".into(), "Root=1-0-0".into()));
    let (st, body) = send(put(hs, b"hdr")).await;
    status_ok(st, &body, "header-signed PUT with x-amzn-trace-id");
    // Signed, the copy source is honoured (it is the signer's choice).
    let copy_url = format!("{}/umh/copied", s.endpoint());
    let hs = sign_headers(
        "PUT",
        &copy_url,
        &[("x-amz-copy-source", "/umh-private/secret")],
        PayloadHash::Bytes(b""),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    )
    .headers;
    let mut req = http.put(&copy_url);
    for (k, v) in hs {
        req = req.header(k, v);
    }
    let (st, body) = send(req).await;
    status_ok(st, &body, "signed CopyObject");

    // SigV2, header: an x-amz-* header added after signing breaks the signature.
    let v2 = |extra: &[(&str, &str)]| {
        crate::sigv2::signed_v2(
            "PUT",
            "/umh/v2",
            extra,
            ACCESS_KEY,
            SECRET_KEY,
            SystemTime::now(),
        )
    };
    let url = format!("{}/umh/v2", s.endpoint());
    let put_v2 = |headers: Vec<(String, String)>| {
        let mut req = http.put(&url).body("v2");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req
    };
    let mut hs = v2(&[]);
    hs.push(("x-amz-copy-source".into(), "/umh-private/secret".into()));
    expect_verbatim_error(
        send(put_v2(hs)).await,
        403,
        "SignatureDoesNotMatch",
        "SigV2 PUT with an added x-amz-copy-source",
    );
    let (st, body) = send(put_v2(v2(&[]))).await;
    status_ok(st, &body, "SigV2 PUT");
    // SigV2, presigned.
    let expires = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    let url = crate::sigv2::presigned_v2(&s, "GET", "/umh/v2", "/umh/v2", "", SECRET_KEY, expires);
    expect_verbatim_error(
        send(http.get(&url).header("x-amz-meta-owner", "mallory")).await,
        403,
        "SignatureDoesNotMatch",
        "SigV2 presigned GET with an added x-amz-meta-owner",
    );
    let (st, body) = send(http.get(&url)).await;
    status_ok(st, &body, "SigV2 presigned GET");
    assert_eq!(body, "v2");
}
