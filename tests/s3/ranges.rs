//! Range GETs: single byte, open, suffix, across 1 MiB blocks, clamped, unsatisfiable.

use quarry_integration::*;

const MIB: usize = 1 << 20;

/// GETs `range` and checks status 206, Content-Range and the bytes against `data[start..=end]`.
async fn check_range(
    c: &aws_sdk_s3::Client,
    key: &str,
    data: &[u8],
    range: &str,
    start: usize,
    end: usize,
) {
    let out = c
        .get_object()
        .bucket("rng")
        .key(key)
        .range(range)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {key} Range: {range}: {}", describe(&e)));
    let total = data.len();
    assert_eq!(
        out.content_range(),
        Some(format!("bytes {start}-{end}/{total}").as_str()),
        "Content-Range for {range} on {total} bytes"
    );
    assert_eq!(
        out.content_length(),
        Some((end - start + 1) as i64),
        "Content-Length for {range}"
    );
    let got = out.body.collect().await.expect("range body").into_bytes();
    assert_bytes_eq(
        &got,
        &data[start..=end],
        &format!("{range} on {total} bytes"),
    );
}

async fn status_of_range(s: &TestServer, key: &str, range: &str) -> (u16, String) {
    let r = s
        .signed(
            "GET",
            &format!("/rng/{key}"),
            &[("range", range)],
            Vec::new(),
        )
        .await;
    let st = r.status().as_u16();
    (st, r.text().await.unwrap_or_default())
}

#[tokio::test]
async fn ranges_on_large_and_inline_objects() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("rng").await;
    let large = random_bytes(3 * MIB + 123);
    let small = random_bytes(1000);
    put_bytes(&c, "rng", "large", &large).await;
    put_bytes(&c, "rng", "small", &small).await;

    for (key, data) in [("large", &large), ("small", &small)] {
        let n = data.len();
        check_range(&c, key, data, "bytes=0-0", 0, 0).await;
        check_range(&c, key, data, "bytes=5-", 5, n - 1).await;
        check_range(&c, key, data, "bytes=-5", n - 5, n - 1).await;
        check_range(&c, key, data, "bytes=10-19", 10, 19).await;
        check_range(
            &c,
            key,
            data,
            &format!("bytes={}-{}", n - 1, n - 1),
            n - 1,
            n - 1,
        )
        .await;
        // Last byte past the end: clamped to the object.
        check_range(
            &c,
            key,
            data,
            &format!("bytes={}-{}", n - 10, n + 100),
            n - 10,
            n - 1,
        )
        .await;
        // Suffix longer than the object: the whole object.
        check_range(&c, key, data, &format!("bytes=-{}", n + 10), 0, n - 1).await;
        // Start at or past the end: 416 InvalidRange.
        for range in [format!("bytes={n}-"), format!("bytes={}-{}", n + 5, n + 10)] {
            assert_s3_error(
                c.get_object()
                    .bucket("rng")
                    .key(key)
                    .range(range.as_str())
                    .send()
                    .await,
                416,
                "InvalidRange",
            );
        }
    }

    // Across block boundaries of the large object.
    check_range(
        &c,
        "large",
        &large,
        "bytes=1048570-1048590",
        MIB - 6,
        MIB + 14,
    )
    .await;
    check_range(
        &c,
        "large",
        &large,
        &format!("bytes={}-{}", MIB - 10, 2 * MIB + 10),
        MIB - 10,
        2 * MIB + 10,
    )
    .await;
    check_range(
        &c,
        "large",
        &large,
        &format!("bytes={}-{}", MIB, 2 * MIB - 1),
        MIB,
        2 * MIB - 1,
    )
    .await;
    check_range(
        &c,
        "large",
        &large,
        &format!("bytes={}-", 3 * MIB - 1),
        3 * MIB - 1,
        large.len() - 1,
    )
    .await;
    // Inside one chunk of a data shard that is not the first (2+2: each block is 2 x 512 KiB).
    check_range(
        &c,
        "large",
        &large,
        &format!("bytes={}-{}", MIB + MIB / 2 + 3, MIB + MIB / 2 + 9),
        MIB + MIB / 2 + 3,
        MIB + MIB / 2 + 9,
    )
    .await;
}

#[tokio::test]
async fn awkward_range_headers() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("rng").await;
    let data = random_bytes(2000);
    put_bytes(&c, "rng", "obj", &data).await;
    put_bytes(&c, "rng", "empty", b"").await;

    // A syntactically invalid Range is ignored (RFC 9110, S3): 200 with the whole object.
    for range in ["bytes=abc", "items=0-5", "bytes=1-2-3"] {
        let r = s
            .signed("GET", "/rng/obj", &[("range", range)], Vec::new())
            .await;
        let st = r.status().as_u16();
        let body = r.bytes().await.expect("body");
        assert_eq!(st, 200, "Range: {range} is ignored");
        assert_bytes_eq(&body, &data, &format!("Range: {range}"));
    }
    // Last before first: S3 and MinIO differ (whole object or 416); either, but never a slice.
    let r = s
        .signed("GET", "/rng/obj", &[("range", "bytes=5-2")], Vec::new())
        .await;
    let st = r.status().as_u16();
    let body = r.bytes().await.expect("body");
    match st {
        200 => assert_bytes_eq(&body, &data, "Range: bytes=5-2"),
        416 => assert_eq!(
            parse_s3_error(&String::from_utf8_lossy(&body))
                .map(|e| e.0)
                .as_deref(),
            Some("InvalidRange")
        ),
        other => panic!("Range: bytes=5-2: want 200 or 416, got {other}"),
    }
    // Any range of an empty object is unsatisfiable.
    let (st, body) = status_of_range(&s, "empty", "bytes=0-0").await;
    assert_eq!(st, 416, "bytes=0-0 of an empty object: {body}");
    assert_eq!(
        parse_s3_error(&body).map(|e| e.0).as_deref(),
        Some("InvalidRange")
    );
    // The raw 206 carries Content-Range and Accept-Ranges.
    let r = s
        .signed("GET", "/rng/obj", &[("range", "bytes=100-199")], Vec::new())
        .await;
    assert_eq!(r.status().as_u16(), 206);
    let hv = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(hv("content-range").as_deref(), Some("bytes 100-199/2000"));
    assert_eq!(hv("content-length").as_deref(), Some("100"));
    let body = r.bytes().await.expect("body");
    assert_bytes_eq(&body, &data[100..200], "raw 206 body");
}
