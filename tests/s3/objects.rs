//! Object operations: PUT/GET/HEAD/DELETE across sizes, metadata, odd and hostile keys.

use std::time::{Duration, SystemTime};

use quarry_integration::aws_sdk_s3::primitives::ByteStream;
use quarry_integration::*;

const MIB: usize = 1 << 20;

#[tokio::test]
async fn sizes_round_trip_byte_exact() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("sizes").await;
    for size in [0, 1, MIB - 1, MIB, MIB + 1, 5 * MIB + 7] {
        let data = random_bytes(size);
        let key = format!("obj-{size}");
        let etag = put_bytes(&c, "sizes", &key, &data).await;
        assert_eq!(etag, etag_of(&data), "PUT ETag of {size} bytes is the MD5");
        let out = c
            .get_object()
            .bucket("sizes")
            .key(&key)
            .send()
            .await
            .expect("get");
        assert_eq!(
            out.content_length(),
            Some(size as i64),
            "Content-Length of {size}"
        );
        assert_eq!(
            out.e_tag(),
            Some(etag_of(&data).as_str()),
            "GET ETag of {size}"
        );
        let got = out.body.collect().await.expect("body").into_bytes();
        assert_bytes_eq(&got, &data, &format!("GET of {size} bytes"));
    }
}

#[tokio::test]
async fn metadata_and_standard_headers_round_trip() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("meta").await;
    let data = random_bytes(1000);
    c.put_object()
        .bucket("meta")
        .key("doc.json")
        .body(data.clone().into())
        .content_type("application/json; charset=utf-8")
        .cache_control("max-age=60")
        .content_disposition("attachment; filename=\"doc.json\"")
        .content_language("en-GB")
        .metadata("color", "blue")
        .metadata("Mixed-Case", "Value With Spaces")
        .send()
        .await
        .expect("put with metadata");
    let before = SystemTime::now();

    let h = c
        .head_object()
        .bucket("meta")
        .key("doc.json")
        .send()
        .await
        .expect("head");
    assert_eq!(h.content_length(), Some(1000));
    assert_eq!(h.e_tag(), Some(etag_of(&data).as_str()));
    assert_eq!(h.content_type(), Some("application/json; charset=utf-8"));
    assert_eq!(h.cache_control(), Some("max-age=60"));
    assert_eq!(
        h.content_disposition(),
        Some("attachment; filename=\"doc.json\"")
    );
    assert_eq!(h.content_language(), Some("en-GB"));
    let m = h.metadata().expect("user metadata");
    assert_eq!(m.get("color").map(String::as_str), Some("blue"));
    assert_eq!(
        m.get("mixed-case").map(String::as_str),
        Some("Value With Spaces")
    );
    assert_eq!(m.len(), 2, "exactly the metadata sent: {m:?}");
    let lm = h.last_modified().expect("Last-Modified");
    let lm = SystemTime::UNIX_EPOCH + Duration::from_secs(lm.secs() as u64);
    let age = before.duration_since(lm).unwrap_or_default();
    assert!(
        age < Duration::from_secs(120),
        "Last-Modified is recent ({age:?} old)"
    );

    let g = c
        .get_object()
        .bucket("meta")
        .key("doc.json")
        .send()
        .await
        .expect("get");
    assert_eq!(g.content_type(), Some("application/json; charset=utf-8"));
    assert_eq!(g.cache_control(), Some("max-age=60"));
    assert_eq!(
        g.metadata()
            .and_then(|m| m.get("color"))
            .map(String::as_str),
        Some("blue")
    );
    assert_bytes_eq(
        &g.body.collect().await.expect("body").into_bytes(),
        &data,
        "GET",
    );

    // Raw HEAD: the headers a plain HTTP client sees.
    let r = s.signed("HEAD", "/meta/doc.json", &[], Vec::new()).await;
    assert_eq!(r.status().as_u16(), 200);
    let hv = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(hv("content-length").as_deref(), Some("1000"));
    assert_eq!(hv("x-amz-meta-color").as_deref(), Some("blue"));
    assert_eq!(hv("accept-ranges").as_deref(), Some("bytes"));
    assert!(hv("last-modified").is_some(), "Last-Modified header");
    assert!(hv("x-amz-request-id").is_some(), "x-amz-request-id header");
}

#[tokio::test]
async fn overwrite_replaces_data_and_metadata() {
    // The replaced data stays 1 s after its last read (for GETs under way), then goes.
    let s = TestServer::start_with_env(4, &[("QUARRY_RETIRED_GRACE", "1")]).await;
    let c = s.client();
    s.create_bucket("owb").await;
    // large -> small (inline) -> large -> empty
    let versions = [
        random_bytes(3 * MIB + 11),
        random_bytes(100),
        random_bytes(2 * MIB),
        Vec::new(),
    ];
    for (i, data) in versions.iter().enumerate() {
        c.put_object()
            .bucket("owb")
            .key("k")
            .body(data.clone().into())
            .metadata("version", i.to_string())
            .send()
            .await
            .expect("overwrite");
        let g = c
            .get_object()
            .bucket("owb")
            .key("k")
            .send()
            .await
            .expect("get");
        assert_eq!(g.e_tag(), Some(etag_of(data).as_str()), "version {i}");
        let m = g.metadata().cloned().unwrap_or_default();
        assert_eq!(
            m.get("version"),
            Some(&i.to_string()),
            "metadata of version {i}"
        );
        assert_eq!(
            m.len(),
            1,
            "old metadata does not survive an overwrite: {m:?}"
        );
        let got = g.body.collect().await.expect("body").into_bytes();
        assert_bytes_eq(&got, data, &format!("version {i}"));
    }
    let l = c
        .list_objects_v2()
        .bucket("owb")
        .send()
        .await
        .expect("list");
    assert_eq!(l.key_count(), Some(1), "one key after overwrites");
    // No stale data directories are left on the drives: exactly one quarry.meta per drive and
    // (the last version being empty) no shard files.
    for i in 0..s.drive_count() {
        let dir = object_dir(s.drive_path(i), "owb", "k");
        let no_parts = || !list_files(&dir).iter().any(|p| p.ends_with("part.1"));
        let clean = wait_until(Duration::from_secs(5), no_parts).await;
        assert!(
            clean,
            "drive {i}: stale shard files after overwrite: {:?}",
            list_files(&dir)
        );
    }
}

/// GETs take no lock. A GET whose object is overwritten or deleted while its body is under way
/// sends the version it began with, whole, as S3 does: the data of the replaced version stays
/// while reads use it.
#[tokio::test]
async fn a_body_under_way_is_sent_whole_across_an_overwrite_and_a_delete() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("race").await;
    let one = random_bytes(24 * MIB + 3);
    let two = random_bytes(20 * MIB + 5);
    put_bytes(&c, "race", "k", &one).await;

    // The body's first chunk is in; most of the object is not read from the drives yet (the
    // server reads ahead a few blocks, and waits for the client).
    let body_across = |change: &'static str, want: Vec<u8>| {
        let (c, two) = (c.clone(), two.clone());
        async move {
            let mut g = c
                .get_object()
                .bucket("race")
                .key("k")
                .send()
                .await
                .expect("get");
            let mut got = g
                .body
                .next()
                .await
                .expect("a first chunk")
                .expect("the first chunk")
                .to_vec();
            match change {
                "overwrite" => {
                    put_bytes(&c, "race", "k", &two).await;
                }
                _ => {
                    c.delete_object()
                        .bucket("race")
                        .key("k")
                        .send()
                        .await
                        .expect("delete");
                }
            }
            let rest = g
                .body
                .collect()
                .await
                .unwrap_or_else(|e| panic!("the body across the {change} broke off: {e}"));
            got.extend_from_slice(&rest.into_bytes());
            assert_bytes_eq(&got, &want, &format!("GET across the {change}"));
        }
    };
    body_across("overwrite", one.clone()).await;
    body_across("delete", two.clone()).await;
    // This node's drive kept the data of both versions for a while.
    let text = metrics_get(&format!("{}/metrics", s.endpoint()))
        .await
        .text()
        .await
        .expect("metrics");
    let retired: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("quarry_retired_data_dirs_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("quarry_retired_data_dirs_total in the metrics");
    assert!(retired >= 2.0, "retired data dirs: {retired}");
    // What starts after the delete does not find the key.
    let err = c
        .get_object()
        .bucket("race")
        .key("k")
        .send()
        .await
        .expect_err("the key is deleted");
    assert!(err.into_service_error().is_no_such_key());
}

#[tokio::test]
async fn delete_and_missing_keys() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("del").await;
    put_bytes(&c, "del", "small", b"hello").await;
    put_bytes(&c, "del", "large", &random_bytes(2 * MIB + 1)).await;
    for k in ["small", "large"] {
        c.delete_object()
            .bucket("del")
            .key(k)
            .send()
            .await
            .expect("delete");
        assert_s3_error(
            c.get_object().bucket("del").key(k).send().await,
            404,
            "NoSuchKey",
        );
        let err = c
            .head_object()
            .bucket("del")
            .key(k)
            .send()
            .await
            .expect_err("head deleted");
        assert_eq!(error_status(&err), Some(404), "{}", describe(&err));
        for i in 0..s.drive_count() {
            assert!(
                !meta_path(s.drive_path(i), "del", k).exists(),
                "drive {i}: quarry.meta of deleted {k} is gone"
            );
        }
    }
    // Deleting an absent key is a 204 success, as in S3.
    let r = s
        .signed("DELETE", "/del/never-existed", &[], Vec::new())
        .await;
    assert_eq!(r.status().as_u16(), 204, "DELETE of an absent key");
    c.delete_object()
        .bucket("del")
        .key("never-existed")
        .send()
        .await
        .expect("sdk delete absent");
    assert_s3_error(
        c.get_object().bucket("del").key("nope").send().await,
        404,
        "NoSuchKey",
    );
    let l = c
        .list_objects_v2()
        .bucket("del")
        .send()
        .await
        .expect("list");
    assert_eq!(l.key_count(), Some(0));
}

#[tokio::test]
async fn odd_keys_round_trip() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("odd").await;
    let keys = [
        "with space.txt",
        "  leading and trailing  ",
        "ünïcødé/日本語/🚀.bin",
        "plus+sign",
        "percent%41%zz",
        "100%",
        "amp&ersand",
        "quote'\"s",
        "semi;colon=eq,comma",
        "hash#tag",
        "question?mark",
        "tilde~star*paren()",
        "brackets[]{}<>",
        "back\\slash",
        "dots...in.middle",
        "x/.hidden",
    ];
    for (i, k) in keys.iter().enumerate() {
        let data = format!("value {i}").into_bytes();
        put_bytes(&c, "odd", k, &data).await;
        assert_eq!(get_bytes(&c, "odd", k).await, data, "key {k:?}");
        c.head_object()
            .bucket("odd")
            .key(*k)
            .send()
            .await
            .expect("head odd key");
    }
    let mut want: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    want.sort();
    let got: Vec<String> = c
        .list_objects_v2()
        .bucket("odd")
        .send()
        .await
        .expect("list")
        .contents()
        .iter()
        .map(|o| o.key().unwrap_or_default().to_string())
        .collect();
    assert_eq!(got, want, "listing returns the exact keys, sorted");
}

#[tokio::test]
async fn key_length_limit() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("long").await;
    // 1024 bytes in segments a filesystem accepts (each <= 255 bytes).
    let seg = "s".repeat(200);
    let mut k1024 = [seg.as_str(); 5].join("/"); // 1004 bytes
    k1024.push('/');
    k1024.push_str(&"t".repeat(1024 - k1024.len()));
    assert_eq!(k1024.len(), 1024);
    put_bytes(&c, "long", &k1024, b"max").await;
    assert_eq!(get_bytes(&c, "long", &k1024).await, b"max");
    let listed = c
        .list_objects_v2()
        .bucket("long")
        .send()
        .await
        .expect("list");
    assert_eq!(listed.contents()[0].key(), Some(k1024.as_str()));

    let k1025 = format!("{k1024}u");
    assert_s3_error(
        c.put_object()
            .bucket("long")
            .key(&k1025)
            .body(b"x".to_vec().into())
            .send()
            .await,
        400,
        "KeyTooLongError",
    );
    // Multi-byte characters count as bytes: 342 x 3-byte chars = 1026 bytes.
    let wide = "語".repeat(342);
    assert_s3_error(
        c.put_object()
            .bucket("long")
            .key(&wide)
            .body(b"x".to_vec().into())
            .send()
            .await,
        400,
        "KeyTooLongError",
    );
}

#[tokio::test]
async fn hostile_keys_are_refused_and_stay_inside_the_drives() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("safe").await;
    let hostile = [
        "../../etc/passwd",
        "../escape",
        "a/../../../b",
        "a//b",
        "a/./b",
        "./a",
        "a/.",
        "..",
        ".",
        "/leading-slash",
    ];
    for k in hostile {
        let res = c
            .put_object()
            .bucket("safe")
            .key(k)
            .body(b"owned".to_vec().into())
            .send()
            .await;
        match res {
            Ok(_) => panic!("PUT of hostile key {k:?} was accepted"),
            Err(e) => {
                let st = error_status(&e).unwrap_or(0);
                assert!(
                    (400..500).contains(&st) && error_code(&e).is_some(),
                    "PUT {k:?}: expected a 4xx S3 error, got {}",
                    describe(&e)
                );
            }
        }
        let res = c.get_object().bucket("safe").key(k).send().await;
        assert!(res.is_err(), "GET of hostile key {k:?} succeeded");
    }
    // Nothing outside the drives: the temp root holds only the drives and the log.
    let mut top: Vec<String> = std::fs::read_dir(s.root())
        .expect("read root")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, s.root_entries(), "files appeared beside the drives");
    // Nothing inside them either: the bucket holds no object, on any drive.
    for i in 0..s.drive_count() {
        let files = list_files(&s.drive_path(i).join("safe"));
        assert!(
            files.is_empty(),
            "drive {i}: files written for hostile keys: {files:?}"
        );
        let mut entries: Vec<String> = std::fs::read_dir(s.drive_path(i))
            .expect("read drive")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".quarry.sys")
            .collect();
        entries.sort();
        assert_eq!(
            entries,
            ["safe"],
            "drive {i}: only the bucket beside .quarry.sys"
        );
    }
    let l = c
        .list_objects_v2()
        .bucket("safe")
        .send()
        .await
        .expect("list");
    assert_eq!(l.key_count(), Some(0));
}

#[tokio::test]
async fn folder_markers_and_nested_keys() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("dirs").await;
    put_bytes(&c, "dirs", "dir/", b"").await;
    put_bytes(&c, "dirs", "dir/file", b"inside").await;
    // An object and a "directory" of the same name coexist.
    put_bytes(&c, "dirs", "a", b"object a").await;
    put_bytes(&c, "dirs", "a/b", b"object a/b").await;

    let h = c
        .head_object()
        .bucket("dirs")
        .key("dir/")
        .send()
        .await
        .expect("head marker");
    assert_eq!(h.content_length(), Some(0));
    assert_eq!(get_bytes(&c, "dirs", "dir/").await, b"");
    assert_eq!(get_bytes(&c, "dirs", "a").await, b"object a");
    assert_eq!(get_bytes(&c, "dirs", "a/b").await, b"object a/b");
    // "dir" (no slash) is a different key and does not exist.
    assert_s3_error(
        c.get_object().bucket("dirs").key("dir").send().await,
        404,
        "NoSuchKey",
    );

    let l = c
        .list_objects_v2()
        .bucket("dirs")
        .prefix("dir/")
        .send()
        .await
        .expect("list dir/");
    let keys: Vec<_> = l
        .contents()
        .iter()
        .map(|o| o.key().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["dir/", "dir/file"]);

    c.delete_object()
        .bucket("dirs")
        .key("dir/")
        .send()
        .await
        .expect("delete marker");
    c.delete_object()
        .bucket("dirs")
        .key("a")
        .send()
        .await
        .expect("delete a");
    assert_eq!(
        get_bytes(&c, "dirs", "dir/file").await,
        b"inside",
        "child survives its marker"
    );
    assert_eq!(
        get_bytes(&c, "dirs", "a/b").await,
        b"object a/b",
        "a/b survives deleting a"
    );
    let l = c
        .list_objects_v2()
        .bucket("dirs")
        .send()
        .await
        .expect("list");
    let keys: Vec<_> = l
        .contents()
        .iter()
        .map(|o| o.key().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["a/b", "dir/file"]);
}

#[tokio::test]
async fn content_md5_and_streaming_body() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("md5").await;
    let data = random_bytes(300_000);
    c.put_object()
        .bucket("md5")
        .key("good")
        .content_md5(md5_b64(&data))
        .body(data.clone().into())
        .send()
        .await
        .expect("put with correct Content-MD5");
    assert_bytes_eq(
        &get_bytes(&c, "md5", "good").await,
        &data,
        "Content-MD5 PUT",
    );

    // A body from a file: the SDK streams it rather than holding it in memory.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("upload.bin");
    let big = random_bytes(4 * MIB + 3);
    std::fs::write(&path, &big).expect("write upload file");
    let body = ByteStream::from_path(&path)
        .await
        .expect("bytestream from file");
    let out = c
        .put_object()
        .bucket("md5")
        .key("from-file")
        .body(body)
        .send()
        .await
        .expect("put from file");
    assert_eq!(out.e_tag(), Some(etag_of(&big).as_str()));
    assert_bytes_eq(
        &get_bytes(&c, "md5", "from-file").await,
        &big,
        "file upload",
    );
}

#[tokio::test]
async fn delete_objects_multi() {
    use aws_sdk_s3::types::{Delete, ObjectIdentifier};
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("multi").await;
    for k in ["a", "b", "dir/c", "keep", "big"] {
        let data = if k == "big" {
            random_bytes(2 * MIB)
        } else {
            k.as_bytes().to_vec()
        };
        put_bytes(&c, "multi", k, &data).await;
    }
    let ids = ["a", "dir/c", "big", "never-existed"]
        .iter()
        .map(|k| {
            ObjectIdentifier::builder()
                .key(*k)
                .build()
                .expect("identifier")
        })
        .collect::<Vec<_>>();
    let out = c
        .delete_objects()
        .bucket("multi")
        .delete(
            Delete::builder()
                .set_objects(Some(ids))
                .build()
                .expect("delete"),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("DeleteObjects: {}", describe(&e)));
    let mut deleted: Vec<&str> = out.deleted().iter().filter_map(|d| d.key()).collect();
    deleted.sort();
    // S3 reports an absent key as deleted too.
    assert_eq!(deleted, ["a", "big", "dir/c", "never-existed"]);
    assert!(out.errors().is_empty(), "errors: {:?}", out.errors());
    let l = c
        .list_objects_v2()
        .bucket("multi")
        .send()
        .await
        .expect("list");
    let keys: Vec<_> = l
        .contents()
        .iter()
        .map(|o| o.key().unwrap_or_default())
        .collect();
    assert_eq!(keys, ["b", "keep"]);

    // Quiet mode reports only errors.
    let out = c
        .delete_objects()
        .bucket("multi")
        .delete(
            Delete::builder()
                .quiet(true)
                .objects(
                    ObjectIdentifier::builder()
                        .key("b")
                        .build()
                        .expect("identifier"),
                )
                .build()
                .expect("delete"),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("quiet DeleteObjects: {}", describe(&e)));
    assert!(
        out.deleted().is_empty(),
        "quiet mode lists nothing: {:?}",
        out.deleted()
    );
    assert_s3_error(
        c.get_object().bucket("multi").key("b").send().await,
        404,
        "NoSuchKey",
    );

    // Not XML.
    let body = b"<Delete><Object><Key>keep".to_vec();
    let md5 = md5_b64(&body);
    let r = s
        .signed(
            "POST",
            "/multi?delete",
            &[("content-md5", md5.as_str())],
            body,
        )
        .await;
    expect_raw_error(r, 400, "MalformedXML").await;
    assert_eq!(get_bytes(&c, "multi", "keep").await, b"keep");
}

/// Sends a signed PUT whose body has no Content-Length (`Transfer-Encoding: chunked`).
async fn put_streamed(
    url: &str,
    headers: &[(&str, &str)],
    payload: PayloadHash<'_>,
    data: Vec<u8>,
) -> reqwest::Response {
    let signed = sign_headers(
        "PUT",
        url,
        headers,
        payload,
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    );
    let mut rb = reqwest::Client::new().put(url);
    for (k, v) in &signed.headers {
        if !k.eq_ignore_ascii_case("host") && !k.eq_ignore_ascii_case("content-length") {
            rb = rb.header(k.as_str(), v.as_str());
        }
    }
    // Pieces of 64 KiB from a stream: reqwest cannot know the length, so it sends chunks.
    let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
        data.chunks(64 * 1024).map(|c| Ok(c.to_vec())).collect();
    rb.body(reqwest::Body::wrap_stream(futures::stream::iter(pieces)))
        .send()
        .await
        .expect("send streamed PUT")
}

/// S3 accepts uploads whose length the client does not declare (`Transfer-Encoding: chunked`,
/// aws-chunked without x-amz-decoded-content-length); the body is checked as any other.
#[tokio::test]
async fn puts_without_a_declared_length() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("nolen").await;
    for size in [0usize, 3, 300_000, MIB + 5] {
        let data = random_bytes(size);
        let url = format!("{}/nolen/te-{size}", s.endpoint());
        let r = put_streamed(&url, &[], PayloadHash::Bytes(&data), data.clone()).await;
        let st = r.status().as_u16();
        assert_eq!(
            st,
            200,
            "TE chunked {size}: {}",
            r.text().await.unwrap_or_default()
        );
        let got = get_bytes(&c, "nolen", &format!("te-{size}")).await;
        assert_bytes_eq(&got, &data, "TE chunked PUT");
    }
    // The refusal beside it: a body that is not the one signed stores nothing.
    let data = random_bytes(100_000);
    let url = format!("{}/nolen/te-bad", s.endpoint());
    let r = put_streamed(&url, &[], PayloadHash::Bytes(b"other"), data).await;
    assert_eq!(r.status().as_u16(), 400);
    assert!(r
        .text()
        .await
        .unwrap_or_default()
        .contains("XAmzContentSHA256Mismatch"));
    let head = c.head_object().bucket("nolen").key("te-bad").send().await;
    assert_eq!(head.err().and_then(|e| error_status(&e)), Some(404));

    // aws-chunked, signed chunks, no decoded length: the chunks say how long it is.
    let data = random_bytes(200_000);
    let url = format!("{}/nolen/chunked", s.endpoint());
    let sig = sign_headers(
        "PUT",
        &url,
        &[("content-encoding", "aws-chunked")],
        PayloadHash::Literal("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    );
    let body = signed_chunked_body(&data, 64 * 1024, &sig, SECRET_KEY, None);
    let r = send_raw("PUT", &url, &sig.headers, body).await;
    assert_eq!(
        r.status().as_u16(),
        200,
        "{}",
        r.text().await.unwrap_or_default()
    );
    assert_bytes_eq(
        &get_bytes(&c, "nolen", "chunked").await,
        &data,
        "aws-chunked",
    );
    // One chunk changed after signing: refused, nothing stored.
    let url = format!("{}/nolen/chunked-bad", s.endpoint());
    let sig = sign_headers(
        "PUT",
        &url,
        &[("content-encoding", "aws-chunked")],
        PayloadHash::Literal("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
        ACCESS_KEY,
        SECRET_KEY,
        SystemTime::now(),
    );
    let body = signed_chunked_body(&data, 64 * 1024, &sig, SECRET_KEY, Some(1));
    let r = send_raw("PUT", &url, &sig.headers, body).await;
    assert_eq!(r.status().as_u16(), 403);
    let head = c
        .head_object()
        .bucket("nolen")
        .key("chunked-bad")
        .send()
        .await;
    assert_eq!(head.err().and_then(|e| error_status(&e)), Some(404));

    // `aws-chunked` named in Content-Encoding over a plain body is dropped from what is stored.
    for (sent, kept) in [
        ("gzip, aws-chunked", Some("gzip")),
        ("aws-chunked, gzip", Some("gzip")),
        ("aws-chunked", None),
    ] {
        c.put_object()
            .bucket("nolen")
            .key("label")
            .content_encoding(sent)
            .body(ByteStream::from_static(b"x"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("PUT with Content-Encoding {sent}: {}", describe(&e)));
        let head = c
            .head_object()
            .bucket("nolen")
            .key("label")
            .send()
            .await
            .expect("head");
        assert_eq!(head.content_encoding(), kept, "{sent}");
    }
}

/// S3 refuses a key holding a C1 control character (what Latin-1 read as UTF-8 becomes) with 400
/// InvalidURI, on reads and writes; other non-ASCII keys are ordinary.
#[tokio::test]
async fn keys_with_c1_controls_are_invalid_uris() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("uri").await;
    let r = s.signed("GET", "/uri/%C2%AE%C2%8A-", &[], Vec::new()).await;
    expect_raw_error(r, 400, "InvalidURI").await;
    let r = s.signed("PUT", "/uri/a%C2%85b", &[], b"x".to_vec()).await;
    expect_raw_error(r, 400, "InvalidURI").await;
    // The control beside them: U+00AE alone is an ordinary key.
    put_bytes(&c, "uri", "\u{ae}-", b"ok").await;
    assert_eq!(get_bytes(&c, "uri", "\u{ae}-").await, b"ok");
}
