//! Conditional requests and awkward cases: GET/HEAD `If-*` headers (304/412 and their combination
//! rules, as S3), conditional PutObject (`If-None-Match: *`, `If-Match`) including concurrent
//! create-only writers, stored checksums for all five algorithms (header and trailer), a 0-byte
//! object, and an oversized PUT refused before its body is sent.

use std::time::{Duration, SystemTime};

use quarry_integration::aws_sdk_s3::operation::get_object::builders::GetObjectFluentBuilder;
use quarry_integration::aws_sdk_s3::operation::head_object::builders::HeadObjectFluentBuilder;
use quarry_integration::aws_sdk_s3::primitives::DateTime;
use quarry_integration::aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, ChecksumType};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The status of a GET built by `f`: 200 on success, else the error's status.
async fn get_status(
    c: &Client,
    bucket: &str,
    key: &str,
    f: impl FnOnce(GetObjectFluentBuilder) -> GetObjectFluentBuilder,
) -> u16 {
    match f(c.get_object().bucket(bucket).key(key)).send().await {
        Ok(out) => {
            out.body.collect().await.expect("read body");
            200
        }
        Err(e) => error_status(&e).unwrap_or_else(|| panic!("no response: {e:?}")),
    }
}

async fn head_status(
    c: &Client,
    bucket: &str,
    key: &str,
    f: impl FnOnce(HeadObjectFluentBuilder) -> HeadObjectFluentBuilder,
) -> u16 {
    match f(c.head_object().bucket(bucket).key(key)).send().await {
        Ok(_) => 200,
        Err(e) => error_status(&e).unwrap_or_else(|| panic!("no response: {e:?}")),
    }
}

fn secs(t: SystemTime) -> DateTime {
    DateTime::from(t)
}

#[tokio::test]
async fn get_and_head_conditionals_follow_s3() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("cond").await;
    let etag = put_bytes(&c, "cond", "obj", b"conditional body").await;
    let etag = etag.as_str();
    let head = c
        .head_object()
        .bucket("cond")
        .key("obj")
        .send()
        .await
        .expect("head");
    let lm = head.last_modified().expect("last-modified");
    let lm = SystemTime::try_from(*lm).expect("last-modified as SystemTime");
    let before = lm - Duration::from_secs(1);
    let wrong = "\"00000000000000000000000000000000\"";

    // (description, if-match, if-none-match, if-modified-since, if-unmodified-since, status)
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Option<SystemTime>,
        Option<SystemTime>,
        u16,
    );
    let cases: Vec<Case> = vec![
        ("no condition", None, None, None, None, 200),
        ("if-match right", Some(etag), None, None, None, 200),
        ("if-match star", Some("*"), None, None, None, 200),
        ("if-match wrong", Some(wrong), None, None, None, 412),
        ("if-none-match right", None, Some(etag), None, None, 304),
        ("if-none-match wrong", None, Some(wrong), None, None, 200),
        ("if-modified-since lm", None, None, Some(lm), None, 304),
        (
            "if-modified-since before",
            None,
            None,
            Some(before),
            None,
            200,
        ),
        ("if-unmodified-since lm", None, None, None, Some(lm), 200),
        (
            "if-unmodified-since before",
            None,
            None,
            None,
            Some(before),
            412,
        ),
        // If-Match true + If-Unmodified-Since false: 200.
        (
            "if-match true, if-unmodified-since false",
            Some(etag),
            None,
            None,
            Some(before),
            200,
        ),
        // If-None-Match false + If-Modified-Since true: 304.
        (
            "if-none-match false, if-modified-since true",
            None,
            Some(etag),
            Some(before),
            None,
            304,
        ),
        // If-None-Match true + If-Modified-Since false: the ETag decides, 200.
        (
            "if-none-match true, if-modified-since false",
            None,
            Some(wrong),
            Some(lm),
            None,
            200,
        ),
        (
            "if-match false wins over if-none-match",
            Some(wrong),
            Some(etag),
            None,
            None,
            412,
        ),
        (
            "if-match true, if-none-match true",
            Some(etag),
            Some(wrong),
            None,
            None,
            200,
        ),
    ];
    for &(what, im, inm, ims, ius, want) in &cases {
        let got = get_status(&c, "cond", "obj", |mut b| {
            if let Some(v) = im {
                b = b.if_match(v);
            }
            if let Some(v) = inm {
                b = b.if_none_match(v);
            }
            if let Some(t) = ims {
                b = b.if_modified_since(secs(t));
            }
            if let Some(t) = ius {
                b = b.if_unmodified_since(secs(t));
            }
            b
        })
        .await;
        assert_eq!(got, want, "GET {what}");
        let got = head_status(&c, "cond", "obj", |mut b| {
            if let Some(v) = im {
                b = b.if_match(v);
            }
            if let Some(v) = inm {
                b = b.if_none_match(v);
            }
            if let Some(t) = ims {
                b = b.if_modified_since(secs(t));
            }
            if let Some(t) = ius {
                b = b.if_unmodified_since(secs(t));
            }
            b
        })
        .await;
        assert_eq!(got, want, "HEAD {what}");
    }

    // A 304 carries the ETag and Last-Modified and no body; a 412 is S3 XML.
    let r = s
        .signed("GET", "/cond/obj", &[("if-none-match", etag)], vec![])
        .await;
    assert_eq!(r.status().as_u16(), 304);
    assert_eq!(
        r.headers().get("etag").and_then(|v| v.to_str().ok()),
        Some(etag)
    );
    assert!(r.headers().contains_key("last-modified"));
    assert!(r.bytes().await.expect("304 body").is_empty());
    let r = s
        .signed("GET", "/cond/obj", &[("if-match", wrong)], vec![])
        .await;
    expect_raw_error(r, 412, "PreconditionFailed").await;

    // Conditions on a missing key: the key's absence comes first.
    assert_eq!(
        get_status(&c, "cond", "missing", |b| b.if_match(etag)).await,
        404
    );
}

#[tokio::test]
async fn conditional_puts() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("cput").await;

    // Create-only: the first succeeds, the second is refused and changes nothing.
    c.put_object()
        .bucket("cput")
        .key("once")
        .if_none_match("*")
        .body(b"first".to_vec().into())
        .send()
        .await
        .expect("first create");
    let again = c
        .put_object()
        .bucket("cput")
        .key("once")
        .if_none_match("*")
        .body(b"second".to_vec().into())
        .send()
        .await;
    assert_s3_error(again, 412, "PreconditionFailed");
    assert_eq!(get_bytes(&c, "cput", "once").await, b"first");

    // If-Match: wrong ETag 412, right ETag 200, missing key 404 NoSuchKey.
    let etag = etag_of(b"first");
    let wrong = c
        .put_object()
        .bucket("cput")
        .key("once")
        .if_match(etag_of(b"other"))
        .body(b"x".to_vec().into())
        .send()
        .await;
    assert_s3_error(wrong, 412, "PreconditionFailed");
    let out = c
        .put_object()
        .bucket("cput")
        .key("once")
        .if_match(&etag)
        .body(b"replaced".to_vec().into())
        .send()
        .await
        .expect("if-match with the right etag");
    assert_eq!(out.e_tag(), Some(etag_of(b"replaced").as_str()));
    assert_eq!(get_bytes(&c, "cput", "once").await, b"replaced");
    let absent = c
        .put_object()
        .bucket("cput")
        .key("absent")
        .if_match(&etag)
        .body(b"x".to_vec().into())
        .send()
        .await;
    assert_s3_error(absent, 404, "NoSuchKey");
    let head = c.head_object().bucket("cput").key("absent").send().await;
    assert_eq!(head.err().and_then(|e| error_status(&e)), Some(404));

    // If-None-Match with an ETag: refused while that is the current version, accepted otherwise
    // (another ETag, or no object at all).
    let current = etag_of(b"replaced");
    let same = c
        .put_object()
        .bucket("cput")
        .key("once")
        .if_none_match(&current)
        .body(b"x".to_vec().into())
        .send()
        .await;
    assert_s3_error(same, 412, "PreconditionFailed");
    assert_eq!(get_bytes(&c, "cput", "once").await, b"replaced");
    c.put_object()
        .bucket("cput")
        .key("once")
        .if_none_match(etag_of(b"other"))
        .body(b"third".to_vec().into())
        .send()
        .await
        .expect("if-none-match with another etag");
    assert_eq!(get_bytes(&c, "cput", "once").await, b"third");
    c.put_object()
        .bucket("cput")
        .key("fresh")
        .if_none_match(&current)
        .body(b"new".to_vec().into())
        .send()
        .await
        .expect("if-none-match on a missing key");
    assert_eq!(get_bytes(&c, "cput", "fresh").await, b"new");
}

#[tokio::test]
async fn concurrent_create_only_puts_have_one_winner() {
    let s = TestServer::start(4).await;
    s.create_bucket("race").await;
    let mut tasks = Vec::new();
    for i in 0..8u8 {
        let c = s.client();
        tasks.push(tokio::spawn(async move {
            let data = vec![i; 200_000];
            let r = c
                .put_object()
                .bucket("race")
                .key("k")
                .if_none_match("*")
                .body(data.into())
                .send()
                .await;
            (
                i,
                r.map(|_| ())
                    .map_err(|e| (error_status(&e), error_code(&e))),
            )
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (i, r) = t.await.expect("task");
        match r {
            Ok(()) => winners.push(i),
            Err((status, code)) => assert_eq!(
                (status, code.as_deref()),
                (Some(412), Some("PreconditionFailed")),
                "writer {i}"
            ),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one create-only PUT wins: {winners:?}"
    );
    let got = get_bytes(&s.client(), "race", "k").await;
    assert_eq!(
        got,
        vec![winners[0]; 200_000],
        "the stored object is the winner's"
    );
}

/// The local value of an S3 checksum.
fn checksum_of(algorithm: &ChecksumAlgorithm, data: &[u8]) -> String {
    use base64::Engine;
    use crc_fast::CrcAlgorithm;
    use sha2::Digest;
    let raw = match algorithm {
        ChecksumAlgorithm::Crc32 => (crc_fast::checksum(CrcAlgorithm::Crc32IsoHdlc, data) as u32)
            .to_be_bytes()
            .to_vec(),
        ChecksumAlgorithm::Crc32C => (crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, data) as u32)
            .to_be_bytes()
            .to_vec(),
        ChecksumAlgorithm::Crc64Nvme => crc_fast::checksum(CrcAlgorithm::Crc64Nvme, data)
            .to_be_bytes()
            .to_vec(),
        ChecksumAlgorithm::Sha1 => sha1::Sha1::digest(data).to_vec(),
        ChecksumAlgorithm::Sha256 => sha2::Sha256::digest(data).to_vec(),
        other => panic!("unknown algorithm {other:?}"),
    };
    base64::engine::general_purpose::STANDARD.encode(raw)
}

#[tokio::test]
async fn checksums_are_stored_and_returned() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("sums").await;
    let algorithms = [
        ChecksumAlgorithm::Crc32,
        ChecksumAlgorithm::Crc32C,
        ChecksumAlgorithm::Crc64Nvme,
        ChecksumAlgorithm::Sha1,
        ChecksumAlgorithm::Sha256,
    ];
    for (i, algorithm) in algorithms.iter().enumerate() {
        // Small (inline) and multi-block objects, and an empty one.
        for size in [0usize, 1000 + i, 2 * 1024 * 1024 + 7] {
            let key = format!("{}-{size}", algorithm.as_str());
            let data = random_bytes(size);
            let want = checksum_of(algorithm, &data);
            let put = c
                .put_object()
                .bucket("sums")
                .key(&key)
                .checksum_algorithm(algorithm.clone())
                .body(data.clone().into())
                .send()
                .await
                .unwrap_or_else(|e| panic!("PUT {key}: {}", describe(&e)));
            let pick_put = match algorithm {
                ChecksumAlgorithm::Crc32 => put.checksum_crc32(),
                ChecksumAlgorithm::Crc32C => put.checksum_crc32_c(),
                ChecksumAlgorithm::Crc64Nvme => put.checksum_crc64_nvme(),
                ChecksumAlgorithm::Sha1 => put.checksum_sha1(),
                _ => put.checksum_sha256(),
            };
            assert_eq!(pick_put, Some(want.as_str()), "PutObject response of {key}");

            let get = c
                .get_object()
                .bucket("sums")
                .key(&key)
                .checksum_mode(ChecksumMode::Enabled)
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET {key}: {}", describe(&e)));
            let got = match algorithm {
                ChecksumAlgorithm::Crc32 => get.checksum_crc32(),
                ChecksumAlgorithm::Crc32C => get.checksum_crc32_c(),
                ChecksumAlgorithm::Crc64Nvme => get.checksum_crc64_nvme(),
                ChecksumAlgorithm::Sha1 => get.checksum_sha1(),
                _ => get.checksum_sha256(),
            }
            .map(str::to_owned);
            assert_eq!(got.as_deref(), Some(want.as_str()), "GET checksum of {key}");
            assert_eq!(
                get.checksum_type(),
                Some(&ChecksumType::FullObject),
                "{key}"
            );
            let body = get.body.collect().await.expect("body").into_bytes();
            assert_bytes_eq(&body, &data, &key);

            let head = c
                .head_object()
                .bucket("sums")
                .key(&key)
                .checksum_mode(ChecksumMode::Enabled)
                .send()
                .await
                .expect("head");
            let got = match algorithm {
                ChecksumAlgorithm::Crc32 => head.checksum_crc32(),
                ChecksumAlgorithm::Crc32C => head.checksum_crc32_c(),
                ChecksumAlgorithm::Crc64Nvme => head.checksum_crc64_nvme(),
                ChecksumAlgorithm::Sha1 => head.checksum_sha1(),
                _ => head.checksum_sha256(),
            };
            assert_eq!(got, Some(want.as_str()), "HEAD checksum of {key}");
        }
    }

    // Without checksum mode, or for a range, no checksum is sent.
    let key = "SHA256-1004";
    let r = s.signed("HEAD", &format!("/sums/{key}"), &[], vec![]).await;
    assert!(
        !r.headers().contains_key("x-amz-checksum-sha256"),
        "{:?}",
        r.headers()
    );
    let r = s
        .signed(
            "GET",
            &format!("/sums/{key}"),
            &[("x-amz-checksum-mode", "ENABLED"), ("range", "bytes=0-9")],
            vec![],
        )
        .await;
    assert_eq!(r.status().as_u16(), 206);
    assert!(
        !r.headers().contains_key("x-amz-checksum-sha256"),
        "{:?}",
        r.headers()
    );
    let r = s
        .signed(
            "GET",
            &format!("/sums/{key}"),
            &[("x-amz-checksum-mode", "ENABLED")],
            vec![],
        )
        .await;
    assert!(
        r.headers().contains_key("x-amz-checksum-sha256"),
        "{:?}",
        r.headers()
    );
}

/// A checksum sent as an aws-chunked trailer (after the data) is stored too.
#[tokio::test]
async fn trailer_checksum_is_stored() {
    let s = TestServer::start(4).await;
    s.create_bucket("trail").await;
    let data = random_bytes(150_000);
    let crc = crc32_b64(&data);
    let body = unsigned_trailer_body(&data, 64 * 1024, &[("x-amz-checksum-crc32", &crc)]);
    let url = format!("{}/trail/obj", s.endpoint());
    let decoded = data.len().to_string();
    let signed = sign_headers(
        "PUT",
        &url,
        &[
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", &decoded),
            ("x-amz-trailer", "x-amz-checksum-crc32"),
        ],
        PayloadHash::Literal("STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
        s.access_key(),
        s.secret_key(),
        SystemTime::now(),
    );
    let r = send_raw("PUT", &url, &signed.headers, body).await;
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text().await);
    assert_eq!(
        r.headers()
            .get("x-amz-checksum-crc32")
            .and_then(|v| v.to_str().ok()),
        Some(crc.as_str())
    );
    let head = s
        .client()
        .head_object()
        .bucket("trail")
        .key("obj")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("head");
    assert_eq!(head.checksum_crc32(), Some(crc.as_str()));
    assert_bytes_eq(
        &get_bytes(&s.client(), "trail", "obj").await,
        &data,
        "trailer upload",
    );
}

#[tokio::test]
async fn zero_byte_object() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("empty").await;
    let etag = put_bytes(&c, "empty", "nothing", b"").await;
    assert_eq!(etag, "\"d41d8cd98f00b204e9800998ecf8427e\"");
    let head = c
        .head_object()
        .bucket("empty")
        .key("nothing")
        .send()
        .await
        .expect("head");
    assert_eq!(head.content_length(), Some(0));
    assert_eq!(head.e_tag(), Some(etag.as_str()));
    assert!(get_bytes(&c, "empty", "nothing").await.is_empty());
    // Any range of an empty object is unsatisfiable.
    let r = c
        .get_object()
        .bucket("empty")
        .key("nothing")
        .range("bytes=0-0")
        .send()
        .await;
    assert_eq!(r.err().and_then(|e| error_status(&e)), Some(416));
}

/// A PUT that declares more than 5 GiB is refused from its headers: the answer comes before the
/// client sends a byte of the body (the socket here never sends one), and says that the
/// connection closes.
#[tokio::test]
async fn oversized_put_is_refused_before_the_body() {
    let s = TestServer::start(4).await;
    s.create_bucket("big").await;
    let too_big = (5u64 << 30) + 1;
    let url = format!("{}/big/huge", s.endpoint());
    let signed = sign_headers(
        "PUT",
        &url,
        &[],
        PayloadHash::Literal("UNSIGNED-PAYLOAD"),
        s.access_key(),
        s.secret_key(),
        SystemTime::now(),
    );
    let mut head = format!(
        "PUT /big/huge HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-length: {too_big}\r\n",
        s.port()
    );
    for (k, v) in &signed.headers {
        if !k.eq_ignore_ascii_case("host") {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    head.push_str("\r\n");
    let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", s.port()))
        .await
        .expect("connect");
    sock.write_all(head.as_bytes()).await.expect("send head");
    // Read until the end of the error document, without sending any body.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            let n = sock.read(&mut buf).await.expect("read answer");
            answer.extend_from_slice(&buf[..n]);
            if n == 0 || String::from_utf8_lossy(&answer).contains("</Error>") {
                break;
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&answer).to_string();
    assert!(read.is_ok(), "no answer within 10 s; got so far: {text}");
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("<Code>EntityTooLarge</Code>"), "{text}");
    // The body is left unsent, so the connection cannot serve another request: the answer says
    // it closes (a client would otherwise send its next request into the closing socket and
    // see a reset), and it does.
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    let mut rest = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut rest))
        .await
        .expect("the connection stays open");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    // Nothing was created.
    let head = s
        .client()
        .head_object()
        .bucket("big")
        .key("huge")
        .send()
        .await;
    assert_eq!(head.err().and_then(|e| error_status(&e)), Some(404));
}

/// A create-only PUT of an existing key fails before its body is read. The small body arriving
/// just after the headers (as clients that send them in two writes do) is drained, not left in the
/// socket: the client reads the whole 412 (no reset overtakes it) and the connection stays open
/// for its next request.
#[tokio::test]
async fn a_refused_small_put_leaves_the_connection_usable() {
    let s = TestServer::start(4).await;
    s.create_bucket("pre").await;
    put_bytes(&s.client(), "pre", "foo", b"bar").await;
    let url = format!("{}/pre/foo", s.endpoint());
    let request = |extra: &[(&str, &str)], body: &str| {
        let method = if body.is_empty() { "GET" } else { "PUT" };
        let signed = sign_headers(
            method,
            &url,
            extra,
            PayloadHash::Literal("UNSIGNED-PAYLOAD"),
            s.access_key(),
            s.secret_key(),
            SystemTime::now(),
        );
        let mut head = format!(
            "{method} /pre/foo HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-length: {}\r\n",
            s.port(),
            body.len()
        );
        for (k, v) in &signed.headers {
            if !k.eq_ignore_ascii_case("host") {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        head.push_str("\r\n");
        head
    };
    let mut sock = tokio::net::TcpStream::connect(("127.0.0.1", s.port()))
        .await
        .expect("connect");
    sock.write_all(request(&[("if-none-match", "*")], "zar").as_bytes())
        .await
        .expect("send head");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The answer may already be waiting; the body still goes out, as a client's second write does.
    sock.write_all(b"zar").await.expect("send body");
    let first = tokio::time::timeout(Duration::from_secs(10), read_until(&mut sock, "</Error>"))
        .await
        .expect("no answer within 10 s");
    assert!(first.starts_with("HTTP/1.1 412"), "{first}");
    assert!(first.contains("<Code>PreconditionFailed</Code>"), "{first}");
    assert!(
        !first.to_ascii_lowercase().contains("connection: close"),
        "{first}"
    );
    // The same connection answers the next request: the object is unchanged.
    sock.write_all(request(&[], "").as_bytes())
        .await
        .expect("send get");
    let second = tokio::time::timeout(Duration::from_secs(10), read_until(&mut sock, "bar"))
        .await
        .expect("no second answer within 10 s");
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.ends_with("bar"), "{second}");
}

/// Reads from `sock` until `end` appears in what arrived (or the peer closes), as text.
async fn read_until(sock: &mut tokio::net::TcpStream, end: &str) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = sock.read(&mut buf).await.expect("read answer (reset?)");
        answer.extend_from_slice(&buf[..n]);
        if n == 0 || String::from_utf8_lossy(&answer).contains(end) {
            return String::from_utf8_lossy(&answer).to_string();
        }
    }
}

/// An object uploaded without a checksum gets S3's default one, CRC64NVME; one uploaded with a
/// checksum keeps only that one.
#[tokio::test]
async fn default_crc64nvme_checksum() {
    let s = TestServer::start(4).await;
    s.create_bucket("dflt").await;
    for size in [1usize, 10, 1_500_000] {
        let data = random_bytes(size);
        let want = checksum_of(&ChecksumAlgorithm::Crc64Nvme, &data);
        let path = format!("/dflt/plain-{size}");
        let r = s.signed("PUT", &path, &[], data.clone()).await;
        assert_eq!(r.status().as_u16(), 200);
        let header = |r: &reqwest::Response, name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(
            header(&r, "x-amz-checksum-crc64nvme").as_deref(),
            Some(want.as_str())
        );
        assert_eq!(
            header(&r, "x-amz-checksum-type").as_deref(),
            Some("FULL_OBJECT")
        );
        let r = s
            .signed("HEAD", &path, &[("x-amz-checksum-mode", "ENABLED")], vec![])
            .await;
        assert_eq!(
            header(&r, "x-amz-checksum-crc64nvme").as_deref(),
            Some(want.as_str())
        );
    }
    let data = b"with its own checksum".to_vec();
    let crc = crc32_b64(&data);
    let r = s
        .signed("PUT", "/dflt/own", &[("x-amz-checksum-crc32", &crc)], data)
        .await;
    assert_eq!(r.status().as_u16(), 200);
    let r = s
        .signed(
            "HEAD",
            "/dflt/own",
            &[("x-amz-checksum-mode", "ENABLED")],
            vec![],
        )
        .await;
    let names: Vec<&str> = r
        .headers()
        .keys()
        .map(|k| k.as_str())
        .filter(|k| k.starts_with("x-amz-checksum-") && *k != "x-amz-checksum-type")
        .collect();
    assert_eq!(names, ["x-amz-checksum-crc32"]);
}
