//! CopyObject: metadata directives, copies across buckets and onto itself, odd keys in the copy
//! source, copy-source conditions, checksums, and the errors S3 gives.

use std::time::{Duration, SystemTime};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use quarry_integration::aws_sdk_s3::primitives::DateTime;
use quarry_integration::aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, MetadataDirective};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;

/// What a client encodes in `x-amz-copy-source`: everything but unreserved characters and `/`.
const COPY_SOURCE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

fn source(bucket: &str, key: &str) -> String {
    format!("{bucket}/{}", utf8_percent_encode(key, COPY_SOURCE))
}

async fn put_with_meta(c: &Client, bucket: &str, key: &str, data: &[u8]) -> String {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .content_type("text/x-source")
        .cache_control("max-age=60")
        .metadata("color", "blue")
        .body(data.to_vec().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT {bucket}/{key}: {}", describe(&e)))
        .e_tag
        .unwrap_or_default()
}

#[tokio::test]
async fn copy_keeps_or_replaces_metadata_across_buckets() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("src").await;
    s.create_bucket("dst").await;
    // Small (inline) and multi-block objects, and an empty one.
    for (i, size) in [0usize, 5_000, 3 * 1024 * 1024 + 11]
        .into_iter()
        .enumerate()
    {
        let data = random_bytes(size);
        let key = format!("obj-{i}");
        let etag = put_with_meta(&c, "src", &key, &data).await;

        // COPY (the default): the source's metadata, into another bucket.
        let out = c
            .copy_object()
            .bucket("dst")
            .key(&key)
            .copy_source(source("src", &key))
            .send()
            .await
            .unwrap_or_else(|e| panic!("copy {key}: {}", describe(&e)));
        let result = out.copy_object_result().expect("CopyObjectResult");
        assert_eq!(
            result.e_tag(),
            Some(etag.as_str()),
            "a copy keeps the MD5 ETag"
        );
        assert!(result.last_modified().is_some());
        assert_bytes_eq(&get_bytes(&c, "dst", &key).await, &data, "copied bytes");
        let head = c
            .head_object()
            .bucket("dst")
            .key(&key)
            .send()
            .await
            .expect("head copy");
        assert_eq!(head.content_type(), Some("text/x-source"));
        assert_eq!(head.cache_control(), Some("max-age=60"));
        assert_eq!(
            head.metadata()
                .and_then(|m| m.get("color"))
                .map(String::as_str),
            Some("blue")
        );
        assert_eq!(head.content_length(), Some(size as i64));
        assert_eq!(head.e_tag(), Some(etag.as_str()));

        // REPLACE: the request's metadata, in the same bucket; the source is untouched.
        let copy = format!("{key}-replaced");
        c.copy_object()
            .bucket("src")
            .key(&copy)
            .copy_source(source("src", &key))
            .metadata_directive(MetadataDirective::Replace)
            .content_type("application/x-new")
            .metadata("shape", "round")
            .send()
            .await
            .unwrap_or_else(|e| panic!("copy REPLACE {key}: {}", describe(&e)));
        let head = c
            .head_object()
            .bucket("src")
            .key(&copy)
            .send()
            .await
            .expect("head replaced");
        assert_eq!(head.content_type(), Some("application/x-new"));
        assert_eq!(head.cache_control(), None);
        let meta = head.metadata().cloned().unwrap_or_default();
        assert_eq!(meta.get("shape").map(String::as_str), Some("round"));
        assert!(!meta.contains_key("color"), "{meta:?}");
        assert_bytes_eq(
            &get_bytes(&c, "src", &copy).await,
            &data,
            "replaced copy bytes",
        );
        let head = c
            .head_object()
            .bucket("src")
            .key(&key)
            .send()
            .await
            .expect("head source");
        assert_eq!(head.content_type(), Some("text/x-source"));
    }
    // Overwriting an existing destination.
    put_bytes(&c, "dst", "obj-1", b"old").await;
    c.copy_object()
        .bucket("dst")
        .key("obj-1")
        .copy_source(source("src", "obj-2"))
        .send()
        .await
        .expect("copy over an existing key");
    assert_eq!(
        get_bytes(&c, "dst", "obj-1").await.len(),
        3 * 1024 * 1024 + 11
    );
}

#[tokio::test]
async fn copy_onto_itself_needs_replace() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("self").await;
    let inline_of = |key: &str| -> Vec<Option<Vec<u8>>> {
        (0..s.drive_count())
            .map(|i| read_inline(s.drive_path(i), "self", key))
            .collect()
    };
    let mut inline_before = Vec::new();
    for (key, size) in [("small", 1_000usize), ("large", 2 * 1024 * 1024 + 5)] {
        let data = random_bytes(size);
        let etag = put_with_meta(&c, "self", key, &data).await;
        inline_before.push(inline_of(key));
        let before = c
            .head_object()
            .bucket("self")
            .key(key)
            .send()
            .await
            .expect("head");

        let same = c
            .copy_object()
            .bucket("self")
            .key(key)
            .copy_source(source("self", key))
            .send()
            .await;
        match same {
            Ok(v) => panic!("a copy onto itself without changes succeeded: {v:?}"),
            Err(e) => {
                assert_eq!(
                    (error_status(&e), error_code(&e).as_deref()),
                    (Some(400), Some("InvalidRequest")),
                    "{}",
                    describe(&e)
                );
                assert!(describe(&e).contains("This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."), "{}", describe(&e));
            }
        }

        tokio::time::sleep(Duration::from_millis(1100)).await;
        let out = c
            .copy_object()
            .bucket("self")
            .key(key)
            .copy_source(source("self", key))
            .metadata_directive(MetadataDirective::Replace)
            .content_type("text/x-changed")
            .metadata("color", "green")
            .send()
            .await
            .unwrap_or_else(|e| panic!("self copy with REPLACE: {}", describe(&e)));
        assert_eq!(
            out.copy_object_result().and_then(|r| r.e_tag()),
            Some(etag.as_str())
        );
        let after = c
            .head_object()
            .bucket("self")
            .key(key)
            .send()
            .await
            .expect("head after");
        assert_eq!(after.content_type(), Some("text/x-changed"));
        assert_eq!(
            after
                .metadata()
                .and_then(|m| m.get("color"))
                .map(String::as_str),
            Some("green")
        );
        assert_eq!(after.cache_control(), None);
        assert_eq!(after.e_tag(), Some(etag.as_str()));
        assert!(
            after.last_modified() > before.last_modified(),
            "a metadata change is a new modification"
        );
        assert_bytes_eq(
            &get_bytes(&c, "self", key).await,
            &data,
            "data after a metadata change",
        );
    }
    // Every drive has the new metadata, and keeps its own inline shard (each drive's differs).
    for i in 0..s.drive_count() {
        let meta = read_meta(s.drive_path(i), "self", "small").expect("meta on every drive");
        assert_eq!(meta["user_meta"]["color"], "green", "drive {i}: {meta}");
    }
    let small = &inline_before[0];
    assert!(
        small.iter().all(Option::is_some),
        "the small object is inline"
    );
    assert_eq!(&inline_of("small"), small, "inline shards unchanged");
    assert_ne!(small[0], small[1], "drives hold different shards");
    assert!(inline_of("large").iter().all(Option::is_none));
}

#[tokio::test]
async fn copy_source_keys_are_url_decoded() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("odd").await;
    let keys = [
        "with space",
        "plus+sign",
        "per%cent",
        "ünï/cødé €",
        "amp&q?x=1",
        "tilde~",
    ];
    for key in keys {
        let data = format!("data of {key}").into_bytes();
        put_bytes(&c, "odd", key, &data).await;
        let to = format!("copy/{key}");
        c.copy_object()
            .bucket("odd")
            .key(&to)
            .copy_source(source("odd", key))
            .send()
            .await
            .unwrap_or_else(|e| panic!("copy {key:?}: {}", describe(&e)));
        assert_eq!(get_bytes(&c, "odd", &to).await, data, "{key:?}");
    }
    // A leading slash and versionId=null are accepted; a malformed version id is not.
    let r = s
        .signed(
            "PUT",
            "/odd/slash",
            &[("x-amz-copy-source", "/odd/with%20space?versionId=null")],
            vec![],
        )
        .await;
    let status = r.status().as_u16();
    let body = r.text().await.unwrap_or_default();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("<CopyObjectResult") && body.contains("<ETag>&quot;"),
        "{body}"
    );
    let r = s
        .signed(
            "PUT",
            "/odd/v",
            &[(
                "x-amz-copy-source",
                "/odd/with%20space?versionId=3HL4kqtJlcpXroDTDmJ",
            )],
            vec![],
        )
        .await;
    // Not a version id this store issues (the versions tests copy real ones).
    expect_raw_error(r, 400, "InvalidArgument").await;
    for bad in ["odd", "/odd/", "nobucketkey"] {
        let r = s
            .signed("PUT", "/odd/x", &[("x-amz-copy-source", bad)], vec![])
            .await;
        expect_raw_error(r, 400, "InvalidArgument").await;
    }
    let r = s
        .signed(
            "PUT",
            "/odd/x",
            &[
                ("x-amz-copy-source", "/odd/with%20space"),
                ("x-amz-metadata-directive", "MOVE"),
            ],
            vec![],
        )
        .await;
    expect_raw_error(r, 400, "InvalidArgument").await;
}

#[tokio::test]
async fn copy_source_conditions() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("ccond").await;
    let etag = put_bytes(&c, "ccond", "src", b"conditional source").await;
    let lm = c
        .head_object()
        .bucket("ccond")
        .key("src")
        .send()
        .await
        .expect("head")
        .last_modified()
        .cloned()
        .expect("last-modified");
    let lm = SystemTime::try_from(lm).expect("system time");
    let before = DateTime::from(lm - Duration::from_secs(1));
    let at = DateTime::from(lm);
    let wrong = "\"00000000000000000000000000000000\"";

    let copy = || {
        c.copy_object()
            .bucket("ccond")
            .key("dst")
            .copy_source("ccond/src")
    };
    let ok = |r: Result<_, _>, what: &str| {
        if let Err(e) = r {
            panic!("{what}: {}", describe::<_, _>(&e));
        }
    };
    ok(
        copy().copy_source_if_match(&etag).send().await.map(|_| ()),
        "if-match right",
    );
    ok(
        copy()
            .copy_source_if_none_match(wrong)
            .send()
            .await
            .map(|_| ()),
        "if-none-match other",
    );
    ok(
        copy()
            .copy_source_if_unmodified_since(at)
            .send()
            .await
            .map(|_| ()),
        "if-unmodified-since lm",
    );
    ok(
        copy()
            .copy_source_if_modified_since(before)
            .send()
            .await
            .map(|_| ()),
        "if-modified-since before",
    );
    // if-match true + if-unmodified-since false: copies.
    ok(
        copy()
            .copy_source_if_match(&etag)
            .copy_source_if_unmodified_since(before)
            .send()
            .await
            .map(|_| ()),
        "if-match true, if-unmodified-since false",
    );

    assert_s3_error(
        copy().copy_source_if_match(wrong).send().await,
        412,
        "PreconditionFailed",
    );
    assert_s3_error(
        copy().copy_source_if_none_match(&etag).send().await,
        412,
        "PreconditionFailed",
    );
    assert_s3_error(
        copy().copy_source_if_unmodified_since(before).send().await,
        412,
        "PreconditionFailed",
    );
    assert_s3_error(
        copy().copy_source_if_modified_since(at).send().await,
        412,
        "PreconditionFailed",
    );
    // if-none-match false + if-modified-since true: 412.
    assert_s3_error(
        copy()
            .copy_source_if_none_match(&etag)
            .copy_source_if_modified_since(before)
            .send()
            .await,
        412,
        "PreconditionFailed",
    );

    // Errors about the source and the destination.
    assert_s3_error(
        c.copy_object()
            .bucket("ccond")
            .key("d")
            .copy_source("ccond/missing")
            .send()
            .await,
        404,
        "NoSuchKey",
    );
    assert_s3_error(
        c.copy_object()
            .bucket("ccond")
            .key("d")
            .copy_source("nobucket/src")
            .send()
            .await,
        404,
        "NoSuchBucket",
    );
    assert_s3_error(
        c.copy_object()
            .bucket("nobucket")
            .key("d")
            .copy_source("ccond/src")
            .send()
            .await,
        404,
        "NoSuchBucket",
    );
    // A conditional destination, as for PutObject.
    let r = s
        .signed(
            "PUT",
            "/ccond/dst",
            &[("x-amz-copy-source", "ccond/src"), ("if-none-match", "*")],
            vec![],
        )
        .await;
    expect_raw_error(r, 412, "PreconditionFailed").await;
}

#[tokio::test]
async fn copies_keep_checksums() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("cksum").await;
    let data = random_bytes(70_000);
    let put = c
        .put_object()
        .bucket("cksum")
        .key("src")
        .checksum_algorithm(ChecksumAlgorithm::Crc32C)
        .body(data.clone().into())
        .send()
        .await
        .expect("put");
    let want = put
        .checksum_crc32_c()
        .expect("PutObject returns the checksum")
        .to_owned();
    let out = c
        .copy_object()
        .bucket("cksum")
        .key("dst")
        .copy_source("cksum/src")
        .send()
        .await
        .expect("copy");
    assert_eq!(
        out.copy_object_result().and_then(|r| r.checksum_crc32_c()),
        Some(want.as_str())
    );
    let get = c
        .get_object()
        .bucket("cksum")
        .key("dst")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("get copy");
    assert_eq!(get.checksum_crc32_c(), Some(want.as_str()));
    assert_bytes_eq(
        &get.body.collect().await.expect("body").into_bytes(),
        &data,
        "copy with checksum",
    );
    // Asking for the algorithm the source has keeps it.
    let out = c
        .copy_object()
        .bucket("cksum")
        .key("dst2")
        .copy_source("cksum/src")
        .checksum_algorithm(ChecksumAlgorithm::Crc32C)
        .send()
        .await
        .expect("copy asking for the stored algorithm");
    assert_eq!(
        out.copy_object_result().and_then(|r| r.checksum_crc32_c()),
        Some(want.as_str())
    );
    // Another algorithm is computed from the bytes and replaces the source's.
    let sha1 = {
        use base64::Engine;
        use sha1::Digest;
        base64::engine::general_purpose::STANDARD.encode(sha1::Sha1::digest(&data))
    };
    let out = c
        .copy_object()
        .bucket("cksum")
        .key("dst3")
        .copy_source("cksum/src")
        .checksum_algorithm(ChecksumAlgorithm::Sha1)
        .send()
        .await
        .unwrap_or_else(|e| panic!("copy with a new algorithm: {}", describe(&e)));
    let result = out.copy_object_result().expect("result");
    assert_eq!(result.checksum_sha1(), Some(sha1.as_str()));
    assert_eq!(result.checksum_crc32_c(), None);
    let head = c
        .head_object()
        .bucket("cksum")
        .key("dst3")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("head");
    assert_eq!(head.checksum_sha1(), Some(sha1.as_str()));
    assert_eq!(head.checksum_crc32_c(), None);
    // Onto itself, a new checksum algorithm is a change: allowed without REPLACE.
    c.copy_object()
        .bucket("cksum")
        .key("src")
        .copy_source("cksum/src")
        .checksum_algorithm(ChecksumAlgorithm::Sha1)
        .send()
        .await
        .unwrap_or_else(|e| panic!("self copy with a new algorithm: {}", describe(&e)));
    let head = c
        .head_object()
        .bucket("cksum")
        .key("src")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .expect("head");
    assert_eq!(head.checksum_sha1(), Some(sha1.as_str()));
    assert_bytes_eq(&get_bytes(&c, "cksum", "src").await, &data, "self copy");
}

/// A multipart object copied with CopyObject gets a single-part ETag (the MD5 of its bytes), as in
/// S3; its composite checksum describes parts the copy does not have, so the copy gets S3's
/// default full-object CRC64NVME instead.
#[tokio::test]
async fn copy_of_a_multipart_object_gets_a_single_part_etag() {
    use quarry_integration::aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("mpcopy").await;
    let part = 5 * 1024 * 1024;
    let data = random_bytes(2 * part + 1000);
    let id = c
        .create_multipart_upload()
        .bucket("mpcopy")
        .key("mp")
        .content_type("text/x-multipart")
        .send()
        .await
        .unwrap_or_else(|e| panic!("create upload: {}", describe(&e)))
        .upload_id
        .expect("upload id");
    let mut parts = Vec::new();
    for (i, chunk) in data.chunks(part).enumerate() {
        let n = i as i32 + 1;
        let out = c
            .upload_part()
            .bucket("mpcopy")
            .key("mp")
            .upload_id(&id)
            .part_number(n)
            .body(chunk.to_vec().into())
            .send()
            .await
            .unwrap_or_else(|e| panic!("upload part {n}: {}", describe(&e)));
        parts.push(
            CompletedPart::builder()
                .part_number(n)
                .set_e_tag(out.e_tag)
                .set_checksum_crc32(out.checksum_crc32)
                .build(),
        );
    }
    let done = c
        .complete_multipart_upload()
        .bucket("mpcopy")
        .key("mp")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    assert!(
        done.e_tag().is_some_and(|e| e.ends_with("-3\"")),
        "{done:?}"
    );

    let whole = etag_of(&data);
    let out = c
        .copy_object()
        .bucket("mpcopy")
        .key("copy")
        .copy_source("mpcopy/mp")
        .send()
        .await
        .unwrap_or_else(|e| panic!("copy: {}", describe(&e)));
    let result = out.copy_object_result().expect("result");
    assert_eq!(result.e_tag(), Some(whole.as_str()));
    assert_eq!(result.checksum_crc32(), None, "{result:?}");
    let crc64 = {
        use base64::Engine;
        let v = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &data);
        base64::engine::general_purpose::STANDARD.encode(v.to_be_bytes())
    };
    assert_eq!(result.checksum_crc64_nvme(), Some(crc64.as_str()));
    let head = c
        .head_object()
        .bucket("mpcopy")
        .key("copy")
        .send()
        .await
        .expect("head copy");
    assert_eq!(head.e_tag(), Some(whole.as_str()));
    assert_eq!(head.content_type(), Some("text/x-multipart"));
    assert_bytes_eq(
        &get_bytes(&c, "mpcopy", "copy").await,
        &data,
        "copy of multipart",
    );

    // Onto itself with REPLACE: the same, since S3 rewrites the object.
    c.copy_object()
        .bucket("mpcopy")
        .key("mp")
        .copy_source("mpcopy/mp")
        .metadata_directive(MetadataDirective::Replace)
        .metadata("k", "v")
        .send()
        .await
        .unwrap_or_else(|e| panic!("self copy: {}", describe(&e)));
    let head = c
        .head_object()
        .bucket("mpcopy")
        .key("mp")
        .send()
        .await
        .expect("head");
    assert_eq!(head.e_tag(), Some(whole.as_str()));
    assert_eq!(
        head.metadata().and_then(|m| m.get("k")).map(String::as_str),
        Some("v")
    );
    assert_bytes_eq(
        &get_bytes(&c, "mpcopy", "mp").await,
        &data,
        "self copy of multipart",
    );
}
