//! Authentication: SigV4 headers, presigned URLs, streaming signed chunks, unsigned payloads with
//! checksum trailers, and every way a request can fail to authenticate or verify.

use std::time::{Duration, SystemTime};

use quarry_integration::aws_sdk_s3::presigning::PresigningConfig;
use quarry_integration::*;

async fn assert_absent(s: &TestServer, bucket: &str, key: &str) {
    assert_s3_error(
        s.client().get_object().bucket(bucket).key(key).send().await,
        404,
        "NoSuchKey",
    );
}

#[tokio::test]
async fn unsigned_requests_are_access_denied() {
    let s = TestServer::start(4).await;
    s.create_bucket("priv").await;
    put_bytes(&s.client(), "priv", "secret", b"s3cr3t").await;
    let http = reqwest::Client::new();
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/priv"),
        ("GET", "/priv/secret"),
        ("PUT", "/priv/new"),
        ("DELETE", "/priv/secret"),
    ] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let r = http
            .request(m, format!("{}{path}", s.endpoint()))
            .body("x")
            .send()
            .await
            .expect("send");
        expect_raw_error(r, 403, "AccessDenied").await;
    }
    // Nothing changed.
    assert_eq!(get_bytes(&s.client(), "priv", "secret").await, b"s3cr3t");
    assert_absent(&s, "priv", "new").await;
}

#[tokio::test]
async fn wrong_credentials() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let wrong_secret = s.client_with(ACCESS_KEY, "not-the-secret-key-at-all");
    assert_s3_error(
        wrong_secret.list_buckets().send().await,
        403,
        "SignatureDoesNotMatch",
    );
    assert_s3_error(
        wrong_secret
            .put_object()
            .bucket("bkt")
            .key("k")
            .body(b"x".to_vec().into())
            .send()
            .await,
        403,
        "SignatureDoesNotMatch",
    );
    let unknown = s.client_with("NOSUCHACCESSKEY", SECRET_KEY);
    assert_s3_error(
        unknown.list_buckets().send().await,
        403,
        "InvalidAccessKeyId",
    );
    assert_s3_error(
        unknown.list_objects_v2().bucket("bkt").send().await,
        403,
        "InvalidAccessKeyId",
    );
    assert_absent(&s, "bkt", "k").await;
}

#[tokio::test]
async fn hand_signed_requests_and_clock_skew() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let url = format!("{}/bkt", s.endpoint());
    let now = SystemTime::now();
    // Sanity: the hand signer produces requests the server accepts.
    let ok = sign_headers(
        "GET",
        &url,
        &[],
        PayloadHash::Bytes(b""),
        ACCESS_KEY,
        SECRET_KEY,
        now,
    );
    let r = send_raw("GET", &url, &ok.headers, Vec::new()).await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "hand-signed ListObjects: {}",
        r.text().await.unwrap_or_default()
    );
    // A few minutes off is fine; 20 minutes either way is refused.
    let slightly = sign_headers(
        "GET",
        &url,
        &[],
        PayloadHash::Bytes(b""),
        ACCESS_KEY,
        SECRET_KEY,
        now - Duration::from_secs(4 * 60),
    );
    let r = send_raw("GET", &url, &slightly.headers, Vec::new()).await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "4 minutes of skew is within the 15-minute window"
    );
    for t in [
        now - Duration::from_secs(20 * 60),
        now + Duration::from_secs(20 * 60),
    ] {
        let skewed = sign_headers(
            "GET",
            &url,
            &[],
            PayloadHash::Bytes(b""),
            ACCESS_KEY,
            SECRET_KEY,
            t,
        );
        let r = send_raw("GET", &url, &skewed.headers, Vec::new()).await;
        expect_raw_error(r, 403, "RequestTimeTooSkewed").await;
    }
    // A signed header changed after signing.
    let mut tampered = sign_headers(
        "GET",
        &url,
        &[("x-amz-meta-a", "1")],
        PayloadHash::Bytes(b""),
        ACCESS_KEY,
        SECRET_KEY,
        now,
    );
    for h in &mut tampered.headers {
        if h.0 == "x-amz-meta-a" {
            h.1 = "2".into();
        }
    }
    let r = send_raw("GET", &url, &tampered.headers, Vec::new()).await;
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;
    // A malformed Authorization header.
    let r = send_raw(
        "GET",
        &url,
        &[
            ("authorization".into(), "AWS4-HMAC-SHA256 garbage".into()),
            ("x-amz-content-sha256".into(), "UNSIGNED-PAYLOAD".into()),
        ],
        Vec::new(),
    )
    .await;
    let st = r.status().as_u16();
    let body = r.text().await.unwrap_or_default();
    assert!(
        (st == 400 || st == 403) && parse_s3_error(&body).is_some(),
        "malformed Authorization: want a 400/403 S3 error, got {st}: {body}"
    );
}

#[tokio::test]
async fn payload_hash_mismatch_and_unsigned_payload() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let url = format!("{}/bkt/tampered", s.endpoint());
    let signed_body = b"the body that was signed".to_vec();
    let sent_body = b"the body that was sent!!".to_vec();
    let sig = sign_headers(
        "PUT",
        &url,
        &[],
        PayloadHash::Bytes(&signed_body),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    );
    let r = send_raw("PUT", &url, &sig.headers, sent_body).await;
    expect_raw_error(r, 400, "XAmzContentSHA256Mismatch").await;
    assert_absent(&s, "bkt", "tampered").await;

    // UNSIGNED-PAYLOAD: signed headers, body not hashed.
    let url = format!("{}/bkt/unsigned", s.endpoint());
    let data = random_bytes(200_000);
    let sig = sign_headers(
        "PUT",
        &url,
        &[],
        PayloadHash::Literal("UNSIGNED-PAYLOAD"),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    );
    let r = send_raw("PUT", &url, &sig.headers, data.clone()).await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "UNSIGNED-PAYLOAD PUT: {}",
        r.text().await.unwrap_or_default()
    );
    assert_bytes_eq(
        &get_bytes(&s.client(), "bkt", "unsigned").await,
        &data,
        "UNSIGNED-PAYLOAD",
    );
}

#[tokio::test]
async fn content_md5_mismatch_is_bad_digest() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("bkt").await;
    let data = random_bytes(5000);
    assert_s3_error(
        c.put_object()
            .bucket("bkt")
            .key("k")
            .content_md5(md5_b64(b"something else"))
            .body(data.clone().into())
            .send()
            .await,
        400,
        "BadDigest",
    );
    assert_absent(&s, "bkt", "k").await;
    // Large (not inline) too.
    let big = random_bytes(2 << 20);
    assert_s3_error(
        c.put_object()
            .bucket("bkt")
            .key("big")
            .content_md5(md5_b64(&data))
            .body(big.into())
            .send()
            .await,
        400,
        "BadDigest",
    );
    assert_absent(&s, "bkt", "big").await;
    // Not an MD5 at all.
    let r = s
        .signed(
            "PUT",
            "/bkt/k2",
            &[("content-md5", "not-base64!!")],
            data.clone(),
        )
        .await;
    expect_raw_error(r, 400, "InvalidDigest").await;
    assert_absent(&s, "bkt", "k2").await;
    // No partial data left on the drives.
    for i in 0..s.drive_count() {
        let files = list_files(&s.drive_path(i).join("bkt"));
        assert!(
            files.is_empty(),
            "drive {i}: leftovers of refused PUTs: {files:?}"
        );
    }
}

#[tokio::test]
async fn presigned_urls() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("pre").await;
    let data = random_bytes(70_000);
    put_bytes(&c, "pre", "file name.bin", &data).await;
    let http = reqwest::Client::new();

    let get = c
        .get_object()
        .bucket("pre")
        .key("file name.bin")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).expect("config"))
        .await
        .expect("presign GET");
    let r = http.get(get.uri()).send().await.expect("presigned GET");
    assert_eq!(r.status().as_u16(), 200, "presigned GET {}", get.uri());
    assert_bytes_eq(&r.bytes().await.expect("body"), &data, "presigned GET");

    // Presigned GET with a Range header sent alongside (unsigned headers are allowed).
    let r = http
        .get(get.uri())
        .header("range", "bytes=10-19")
        .send()
        .await
        .expect("ranged");
    assert_eq!(r.status().as_u16(), 206);
    assert_bytes_eq(
        &r.bytes().await.expect("body"),
        &data[10..20],
        "presigned ranged GET",
    );

    // Presigned PUT.
    let up = random_bytes(1 << 20);
    let put = c
        .put_object()
        .bucket("pre")
        .key("uploaded")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).expect("config"))
        .await
        .expect("presign PUT");
    let mut rb = http.put(put.uri()).body(up.clone());
    for (k, v) in put.headers() {
        rb = rb.header(k, v);
    }
    let r = rb.send().await.expect("presigned PUT");
    assert_eq!(
        r.status().as_u16(),
        200,
        "presigned PUT: {}",
        r.text().await.unwrap_or_default()
    );
    assert_bytes_eq(
        &get_bytes(&c, "pre", "uploaded").await,
        &up,
        "presigned PUT",
    );

    // Expired: valid for 60 s from 2 minutes ago.
    let expired = c
        .get_object()
        .bucket("pre")
        .key("file name.bin")
        .presigned(
            PresigningConfig::builder()
                .start_time(SystemTime::now() - Duration::from_secs(120))
                .expires_in(Duration::from_secs(60))
                .build()
                .expect("config"),
        )
        .await
        .expect("presign expired");
    let r = http.get(expired.uri()).send().await.expect("expired GET");
    expect_raw_error(r, 403, "AccessDenied").await;

    // Signed for one key, used for another.
    let other = get.uri().replace("file%20name.bin", "uploaded");
    assert_ne!(other, get.uri(), "URI rewrite took effect");
    let r = http.get(&other).send().await.expect("tampered GET");
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;

    // A presigned GET URL does not authorise a DELETE.
    let r = http
        .delete(get.uri())
        .send()
        .await
        .expect("DELETE with GET URL");
    let st = r.status().as_u16();
    assert_eq!(
        st,
        403,
        "DELETE with a presigned GET URL: {}",
        r.text().await.unwrap_or_default()
    );
    assert_eq!(get_bytes(&c, "pre", "file name.bin").await, data);
}

#[tokio::test]
async fn streaming_signed_chunks() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    for (key, size, chunk) in [
        ("stream-small", 100_000usize, 64 * 1024),
        ("stream-large", 3 * (1 << 20) + 17, 1 << 20),
        ("stream-empty", 0, 64 * 1024),
    ] {
        let data = random_bytes(size);
        let url = format!("{}/bkt/{key}", s.endpoint());
        let len = size.to_string();
        let headers = [
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", len.as_str()),
        ];
        let sig = sign_headers(
            "PUT",
            &url,
            &headers,
            PayloadHash::Literal("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ACCESS_KEY,
            SECRET_KEY,
            SystemTime::now(),
        );
        let body = signed_chunked_body(&data, chunk, &sig, SECRET_KEY, None);
        let r = send_raw("PUT", &url, &sig.headers, body).await;
        let st = r.status().as_u16();
        let etag = r
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        assert_eq!(
            st,
            200,
            "streaming PUT {key}: {}",
            r.text().await.unwrap_or_default()
        );
        assert_eq!(
            etag,
            Some(etag_of(&data)),
            "ETag of streamed {key} is the MD5 of the decoded data"
        );
        assert_bytes_eq(&get_bytes(&s.client(), "bkt", key).await, &data, key);
    }

    // One chunk changed after signing: the chain breaks.
    let data = random_bytes(200_000);
    let url = format!("{}/bkt/stream-tampered", s.endpoint());
    let len = data.len().to_string();
    let headers = [
        ("content-encoding", "aws-chunked"),
        ("x-amz-decoded-content-length", len.as_str()),
    ];
    let sig = sign_headers(
        "PUT",
        &url,
        &headers,
        PayloadHash::Literal("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    );
    let body = signed_chunked_body(&data, 64 * 1024, &sig, SECRET_KEY, Some(2));
    let r = send_raw("PUT", &url, &sig.headers, body).await;
    expect_raw_error(r, 403, "SignatureDoesNotMatch").await;
    assert_absent(&s, "bkt", "stream-tampered").await;
}

#[tokio::test]
async fn unsigned_payload_with_checksum_trailer() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let put = |key: &'static str, data: Vec<u8>, crc: String| {
        let url = format!("{}/bkt/{key}", s.endpoint());
        async move {
            let len = data.len().to_string();
            let headers = [
                ("content-encoding", "aws-chunked"),
                ("x-amz-decoded-content-length", len.as_str()),
                ("x-amz-trailer", "x-amz-checksum-crc32"),
            ];
            let sig = sign_headers(
                "PUT",
                &url,
                &headers,
                PayloadHash::Literal("STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
                ACCESS_KEY,
                SECRET_KEY,
                SystemTime::now(),
            );
            let body = unsigned_trailer_body(&data, 64 * 1024, &[("x-amz-checksum-crc32", &crc)]);
            send_raw("PUT", &url, &sig.headers, body).await
        }
    };
    for (key, size) in [
        ("trailer-small", 1000usize),
        ("trailer-large", 2 * (1 << 20) + 5),
    ] {
        let data = random_bytes(size);
        let r = put(key, data.clone(), crc32_b64(&data)).await;
        let st = r.status().as_u16();
        assert_eq!(
            st,
            200,
            "trailer PUT {key}: {}",
            r.text().await.unwrap_or_default()
        );
        assert_bytes_eq(&get_bytes(&s.client(), "bkt", key).await, &data, key);
    }
    let data = random_bytes(5000);
    let r = put("trailer-bad", data, crc32_b64(b"other data")).await;
    expect_raw_error(r, 400, "BadDigest").await;
    assert_absent(&s, "bkt", "trailer-bad").await;
}

#[tokio::test]
async fn sdk_default_checksums_work() {
    // The SDK's defaults (CRC32 request checksums, response validation) against the server,
    // with an explicit algorithm as well.
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("bkt").await;
    let data = random_bytes(1 << 20);
    c.put_object()
        .bucket("bkt")
        .key("crc32c")
        .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32C)
        .body(data.clone().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT with CRC32C: {}", describe(&e)));
    assert_bytes_eq(&get_bytes(&c, "bkt", "crc32c").await, &data, "CRC32C PUT");
}
