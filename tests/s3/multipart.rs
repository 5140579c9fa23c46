//! Multipart uploads through aws-sdk-s3: the whole flow, part replacement, the errors of
//! CompleteMultipartUpload, abort, listing with pagination, GET by part number, UploadPartCopy,
//! composite CRC32 checksums, an upload surviving a restart, and healing a multipart object.

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedMultipartUpload, CompletedPart,
};
use aws_sdk_s3::Client;
use base64::Engine as _;
use md5::{Digest as _, Md5};
use quarry_integration::*;

const MIB: usize = 1 << 20;

async fn create(c: &Client, bucket: &str, key: &str) -> String {
    c.create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .content_type("application/x-test")
        .metadata("color", "blue")
        .send()
        .await
        .unwrap_or_else(|e| panic!("create upload {key}: {}", describe(&e)))
        .upload_id()
        .expect("an upload id")
        .to_owned()
}

async fn upload(c: &Client, bucket: &str, key: &str, id: &str, n: i32, data: &[u8]) -> String {
    c.upload_part()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .part_number(n)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("upload part {n} of {key}: {}", describe(&e)))
        .e_tag()
        .expect("a part ETag")
        .to_owned()
}

fn parts(list: &[(i32, &str)]) -> CompletedMultipartUpload {
    CompletedMultipartUpload::builder()
        .set_parts(Some(
            list.iter()
                .map(|(n, e)| CompletedPart::builder().part_number(*n).e_tag(*e).build())
                .collect(),
        ))
        .build()
}

async fn complete(
    c: &Client,
    bucket: &str,
    key: &str,
    id: &str,
    list: &[(i32, &str)],
) -> Result<
    aws_sdk_s3::operation::complete_multipart_upload::CompleteMultipartUploadOutput,
    aws_sdk_s3::error::SdkError<
        aws_sdk_s3::operation::complete_multipart_upload::CompleteMultipartUploadError,
        aws_sdk_s3::config::http::HttpResponse,
    >,
> {
    c.complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .multipart_upload(parts(list))
        .send()
        .await
}

/// The S3 ETag of a multipart object: hex MD5 of the parts' binary MD5s, then `-N`.
fn multipart_etag(parts: &[&[u8]]) -> String {
    let mut h = Md5::new();
    for p in parts {
        h.update(Md5::digest(p));
    }
    format!("\"{}-{}\"", hex::encode(h.finalize()), parts.len())
}

async fn get_range(c: &Client, bucket: &str, key: &str, range: &str) -> Vec<u8> {
    c.get_object()
        .bucket(bucket)
        .key(key)
        .range(range)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {range}: {}", describe(&e)))
        .body
        .collect()
        .await
        .expect("body")
        .into_bytes()
        .to_vec()
}

#[tokio::test]
async fn three_parts_round_trip_with_ranges_and_part_numbers() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("mpf").await;
    let p1 = random_bytes(5 * MIB);
    let p2_old = random_bytes(5 * MIB);
    let p2 = random_bytes(5 * MIB);
    let p3 = random_bytes(MIB + 7);
    let id = create(&c, "mpf", "big/object.bin").await;
    // Parts arrive in any order; part 2 is uploaded twice and the second upload wins.
    let e3 = upload(&c, "mpf", "big/object.bin", &id, 3, &p3).await;
    let e2_old = upload(&c, "mpf", "big/object.bin", &id, 2, &p2_old).await;
    let e1 = upload(&c, "mpf", "big/object.bin", &id, 1, &p1).await;
    let e2 = upload(&c, "mpf", "big/object.bin", &id, 2, &p2).await;
    assert_eq!(e1, etag_of(&p1));
    assert_eq!(e2_old, etag_of(&p2_old));
    assert_eq!(e2, etag_of(&p2));
    assert_eq!(e3, etag_of(&p3));

    // The ETag of the replaced part is no longer a part of the upload.
    assert_s3_error(
        complete(
            &c,
            "mpf",
            "big/object.bin",
            &id,
            &[(1, &e1), (2, &e2_old), (3, &e3)],
        )
        .await,
        400,
        "InvalidPart",
    );
    let out = complete(
        &c,
        "mpf",
        "big/object.bin",
        &id,
        &[(1, &e1), (2, &e2), (3, &e3)],
    )
    .await
    .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    let want_etag = multipart_etag(&[&p1, &p2, &p3]);
    assert_eq!(out.e_tag(), Some(want_etag.as_str()));
    assert!(want_etag.ends_with("-3\""));
    assert_eq!(out.key(), Some("big/object.bin"));

    let mut all = p1.clone();
    all.extend_from_slice(&p2);
    all.extend_from_slice(&p3);
    assert_bytes_eq(
        &get_bytes(&c, "mpf", "big/object.bin").await,
        &all,
        "whole object",
    );
    let head = c
        .head_object()
        .bucket("mpf")
        .key("big/object.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(all.len() as i64));
    assert_eq!(head.e_tag(), Some(want_etag.as_str()));
    assert_eq!(head.content_type(), Some("application/x-test"));
    assert_eq!(
        head.metadata()
            .and_then(|m| m.get("color"))
            .map(String::as_str),
        Some("blue")
    );

    // Ranges across part boundaries.
    for (a, b) in [
        (5 * MIB - 10, 5 * MIB + 10),
        (10 * MIB - 3, 10 * MIB + 100),
        (0, 11 * MIB + 6),
        (5 * MIB, 5 * MIB),
        (MIB / 2, 10 * MIB + 5),
    ] {
        let got = get_range(&c, "mpf", "big/object.bin", &format!("bytes={a}-{b}")).await;
        assert_bytes_eq(&got, &all[a..=b], &format!("range {a}-{b}"));
    }

    // GET and HEAD by part number.
    let part2 = c
        .get_object()
        .bucket("mpf")
        .key("big/object.bin")
        .part_number(2)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET partNumber=2: {}", describe(&e)));
    assert_eq!(part2.parts_count(), Some(3));
    assert_eq!(part2.content_length(), Some(p2.len() as i64));
    assert_eq!(
        part2.content_range(),
        Some(format!("bytes {}-{}/{}", 5 * MIB, 10 * MIB - 1, all.len()).as_str())
    );
    let body = part2.body.collect().await.unwrap().into_bytes();
    assert_bytes_eq(&body, &p2, "part 2");
    let head3 = c
        .head_object()
        .bucket("mpf")
        .key("big/object.bin")
        .part_number(3)
        .send()
        .await
        .unwrap();
    assert_eq!(head3.content_length(), Some(p3.len() as i64));
    assert_eq!(head3.parts_count(), Some(3));
    let resp = s
        .signed("GET", "/mpf/big/object.bin?partNumber=4", &[], Vec::new())
        .await;
    expect_raw_error(resp, 400, "InvalidPart").await;

    // The upload is gone once completed.
    assert_s3_error(
        c.list_parts()
            .bucket("mpf")
            .key("big/object.bin")
            .upload_id(&id)
            .send()
            .await,
        404,
        "NoSuchUpload",
    );
    for d in 0..s.drive_count() {
        let mp = s.drive_path(d).join(".quarry.sys/multipart");
        assert!(
            list_files(&mp).is_empty(),
            "drive {d}: upload files left: {:?}",
            list_files(&mp)
        );
    }
}

/// SDKs retry a CompleteMultipartUpload whose answer was lost: the retry gets the first answer,
/// and only for the upload and parts that made the object. A part uploaded twice whose answers are
/// both listed counts once, by its last entry.
#[tokio::test]
async fn complete_is_retried_and_resent_parts_count_once() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("mpr").await;
    let a = random_bytes(5 * MIB);
    let b = random_bytes(1000);
    let b2 = random_bytes(900);
    let id = create(&c, "mpr", "k").await;
    let e1 = upload(&c, "mpr", "k", &id, 1, &a).await;
    let first_b = upload(&c, "mpr", "k", &id, 2, &b).await;
    // Part 2 again: this upload finished last, so it is the part.
    let e2 = upload(&c, "mpr", "k", &id, 2, &b2).await;
    // Both answers for part 2 listed, the last one last: accepted, the last upload kept.
    let list = [(1, e1.as_str()), (2, first_b.as_str()), (2, e2.as_str())];
    let done = complete(&c, "mpr", "k", &id, &list)
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    let want = multipart_etag(&[&a, &b2]);
    assert_eq!(done.e_tag(), Some(want.as_str()));
    let mut all = a.clone();
    all.extend_from_slice(&b2);
    assert_bytes_eq(
        &get_bytes(&c, "mpr", "k").await,
        &all,
        "the part uploaded last",
    );

    // The retry answers as the first did.
    let again = complete(&c, "mpr", "k", &id, &list)
        .await
        .unwrap_or_else(|e| panic!("retried complete: {}", describe(&e)));
    assert_eq!(again.e_tag(), Some(want.as_str()));
    assert_eq!(again.key(), Some("k"));
    assert_bytes_eq(
        &get_bytes(&c, "mpr", "k").await,
        &all,
        "unchanged by the retry",
    );

    // Not for other parts, another upload id, or once the object was replaced.
    assert_s3_error(
        complete(&c, "mpr", "k", &id, &[(1, &e1)]).await,
        404,
        "NoSuchUpload",
    );
    let other = create(&c, "mpr", "k2").await;
    c.abort_multipart_upload()
        .bucket("mpr")
        .key("k2")
        .upload_id(&other)
        .send()
        .await
        .expect("abort");
    assert_s3_error(
        complete(&c, "mpr", "k", &other, &list).await,
        404,
        "NoSuchUpload",
    );
    // A copy of the object is not the upload's result.
    c.copy_object()
        .bucket("mpr")
        .key("copy")
        .copy_source("mpr/k")
        .send()
        .await
        .expect("copy");
    assert_s3_error(
        complete(&c, "mpr", "copy", &id, &list).await,
        404,
        "NoSuchUpload",
    );
    put_bytes(&c, "mpr", "k", b"replaced").await;
    assert_s3_error(
        complete(&c, "mpr", "k", &id, &list).await,
        404,
        "NoSuchUpload",
    );
    assert_eq!(get_bytes(&c, "mpr", "k").await, b"replaced");
}

#[tokio::test]
async fn complete_errors_and_abort() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("mpe").await;
    let big = random_bytes(5 * MIB);
    let small = random_bytes(1000);
    let id = create(&c, "mpe", "k").await;
    let e1 = upload(&c, "mpe", "k", &id, 1, &big).await;
    let e2 = upload(&c, "mpe", "k", &id, 2, &small).await;
    let e3 = upload(&c, "mpe", "k", &id, 3, &big).await;

    let wrong = etag_of(b"not the part");
    assert_s3_error(
        complete(&c, "mpe", "k", &id, &[(1, &e1), (2, &wrong)]).await,
        400,
        "InvalidPart",
    );
    assert_s3_error(
        complete(&c, "mpe", "k", &id, &[(1, &e1), (7, &e2)]).await,
        400,
        "InvalidPart",
    );
    assert_s3_error(
        complete(&c, "mpe", "k", &id, &[(2, &e2), (1, &e1)]).await,
        400,
        "InvalidPartOrder",
    );
    assert_s3_error(
        complete(&c, "mpe", "k", &id, &[(1, &e1), (2, &e2), (1, &e1)]).await,
        400,
        "InvalidPartOrder",
    );
    assert_s3_error(
        complete(&c, "mpe", "k", &id, &[(1, &e1), (2, &e2), (3, &e3)]).await,
        400,
        "EntityTooSmall",
    );
    // A malformed or empty part list.
    let resp = s
        .signed(
            "POST",
            &format!("/mpe/k?uploadId={id}"),
            &[],
            b"<CompleteMultipartUpload></CompleteMultipartUpload>".to_vec(),
        )
        .await;
    expect_raw_error(resp, 400, "MalformedXML").await;
    let resp = s
        .signed(
            "POST",
            &format!("/mpe/k?uploadId={id}"),
            &[],
            b"<CompleteMultipartUpload><Part>".to_vec(),
        )
        .await;
    expect_raw_error(resp, 400, "MalformedXML").await;
    // Nothing was committed by the failed attempts.
    assert_s3_error(
        c.head_object().bucket("mpe").key("k").send().await,
        404,
        "NotFound",
    );
    // A body that does not match its Content-MD5 is refused and the part is unchanged.
    assert_s3_error(
        c.upload_part()
            .bucket("mpe")
            .key("k")
            .upload_id(&id)
            .part_number(2)
            .content_md5(md5_b64(b"something else"))
            .body(ByteStream::from(random_bytes(1000)))
            .send()
            .await,
        400,
        "BadDigest",
    );
    // A conditional complete is evaluated at the commit; a failed one keeps the upload.
    put_bytes(&c, "mpe", "k", b"already there").await;
    let conditional = c
        .complete_multipart_upload()
        .bucket("mpe")
        .key("k")
        .upload_id(&id)
        .if_none_match("*")
        .multipart_upload(parts(&[(1, &e1), (2, &e2)]))
        .send()
        .await;
    assert_s3_error(conditional, 412, "PreconditionFailed");
    assert_eq!(get_bytes(&c, "mpe", "k").await, b"already there");
    c.delete_object()
        .bucket("mpe")
        .key("k")
        .send()
        .await
        .unwrap();
    // A small last part is fine.
    let out = complete(&c, "mpe", "k", &id, &[(1, &e1), (2, &e2)])
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    assert_eq!(out.e_tag(), Some(multipart_etag(&[&big, &small]).as_str()));

    // Abort: 204, then the upload is gone for every operation.
    let id = create(&c, "mpe", "aborted").await;
    let e1 = upload(&c, "mpe", "aborted", &id, 1, &small).await;
    c.abort_multipart_upload()
        .bucket("mpe")
        .key("aborted")
        .upload_id(&id)
        .send()
        .await
        .unwrap_or_else(|e| panic!("abort: {}", describe(&e)));
    let resp = s
        .signed(
            "DELETE",
            &format!("/mpe/aborted?uploadId={id}"),
            &[],
            Vec::new(),
        )
        .await;
    expect_raw_error(resp, 404, "NoSuchUpload").await;
    assert_s3_error(
        c.upload_part()
            .bucket("mpe")
            .key("aborted")
            .upload_id(&id)
            .part_number(2)
            .body(ByteStream::from(small.clone()))
            .send()
            .await,
        404,
        "NoSuchUpload",
    );
    assert_s3_error(
        complete(&c, "mpe", "aborted", &id, &[(1, &e1)]).await,
        404,
        "NoSuchUpload",
    );
    assert_s3_error(
        c.list_parts()
            .bucket("mpe")
            .key("aborted")
            .upload_id(&id)
            .send()
            .await,
        404,
        "NoSuchUpload",
    );
    // Ids this server never issued, and ids of another key.
    for bogus in [
        "nope",
        "../../../etc/passwd",
        "00000000-0000-4000-8000-000000000000",
    ] {
        let resp = s
            .signed(
                "GET",
                &format!("/mpe/k?uploadId={}", bogus.replace('/', "%2F")),
                &[],
                Vec::new(),
            )
            .await;
        expect_raw_error(resp, 404, "NoSuchUpload").await;
    }
    let other = create(&c, "mpe", "other").await;
    assert_s3_error(
        c.list_parts()
            .bucket("mpe")
            .key("k")
            .upload_id(&other)
            .send()
            .await,
        404,
        "NoSuchUpload",
    );
    // Part numbers outside 1..=10000.
    for n in [0, 10001] {
        assert_s3_error(
            c.upload_part()
                .bucket("mpe")
                .key("other")
                .upload_id(&other)
                .part_number(n)
                .body(ByteStream::from(small.clone()))
                .send()
                .await,
            400,
            "InvalidArgument",
        );
    }
    // Uploads in a bucket that does not exist.
    assert_s3_error(
        c.create_multipart_upload()
            .bucket("no-such-bucket")
            .key("k")
            .send()
            .await,
        404,
        "NoSuchBucket",
    );
}

#[tokio::test]
async fn list_parts_and_uploads_paginate() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("mpl").await;
    let id = create(&c, "mpl", "parts").await;
    let mut etags = Vec::new();
    for n in 1..=5 {
        etags.push(upload(&c, "mpl", "parts", &id, n, &vec![n as u8; n as usize * 10]).await);
    }
    let mut seen = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let page = c
            .list_parts()
            .bucket("mpl")
            .key("parts")
            .upload_id(&id)
            .max_parts(2)
            .set_part_number_marker(marker.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("list parts: {}", describe(&e)));
        assert_eq!(page.max_parts(), Some(2));
        for p in page.parts() {
            seen.push((
                p.part_number().unwrap(),
                p.e_tag().unwrap().to_owned(),
                p.size().unwrap(),
            ));
        }
        if page.is_truncated() != Some(true) {
            assert!(page.parts().len() <= 2);
            break;
        }
        assert_eq!(page.parts().len(), 2);
        marker = page.next_part_number_marker().map(str::to_owned);
        assert!(marker.is_some());
    }
    let want: Vec<(i32, String, i64)> = (1..=5)
        .map(|n| (n, etags[n as usize - 1].clone(), n as i64 * 10))
        .collect();
    assert_eq!(seen, want);

    // Uploads: two of "a", one each of "dir/x", "dir/y", "z".
    let mut ids = vec![("a".to_string(), id.clone())];
    ids[0].0 = "parts".into();
    for k in ["a", "a", "dir/x", "dir/y", "z"] {
        ids.push((k.to_string(), create(&c, "mpl", k).await));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ids.sort_by(|x, y| x.0.cmp(&y.0));
    let mut seen = Vec::new();
    let (mut km, mut um): (Option<String>, Option<String>) = (None, None);
    loop {
        let page = c
            .list_multipart_uploads()
            .bucket("mpl")
            .max_uploads(2)
            .set_key_marker(km.clone())
            .set_upload_id_marker(um.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("list uploads: {}", describe(&e)));
        for u in page.uploads() {
            seen.push((
                u.key().unwrap().to_owned(),
                u.upload_id().unwrap().to_owned(),
            ));
            assert!(u.initiated().is_some());
        }
        if page.is_truncated() != Some(true) {
            break;
        }
        assert_eq!(page.uploads().len(), 2);
        km = page.next_key_marker().map(str::to_owned);
        um = page.next_upload_id_marker().map(str::to_owned);
    }
    let keys: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "a", "dir/x", "dir/y", "parts", "z"]);
    let mut got_ids: Vec<String> = seen.iter().map(|(_, u)| u.clone()).collect();
    let mut want_ids: Vec<String> = ids.iter().map(|(_, u)| u.clone()).collect();
    got_ids.sort();
    want_ids.sort();
    assert_eq!(got_ids, want_ids, "every upload exactly once");

    // Delimiter and prefix.
    let page = c
        .list_multipart_uploads()
        .bucket("mpl")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = page
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, ["dir/"]);
    let keys: Vec<&str> = page.uploads().iter().filter_map(|u| u.key()).collect();
    assert_eq!(keys, ["a", "a", "parts", "z"]);
    let page = c
        .list_multipart_uploads()
        .bucket("mpl")
        .prefix("dir/")
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = page.uploads().iter().filter_map(|u| u.key()).collect();
    assert_eq!(keys, ["dir/x", "dir/y"]);
    // Completed and aborted uploads leave the list.
    let a_id = &seen[0].1;
    c.abort_multipart_upload()
        .bucket("mpl")
        .key("a")
        .upload_id(a_id)
        .send()
        .await
        .unwrap();
    let page = c
        .list_multipart_uploads()
        .bucket("mpl")
        .send()
        .await
        .unwrap();
    assert_eq!(page.uploads().len(), 5);
    assert!(page.uploads().iter().all(|u| u.upload_id() != Some(a_id)));
}

#[tokio::test]
async fn upload_part_copy_with_range_and_conditions() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("src").await;
    s.create_bucket("dst").await;
    let source = random_bytes(7 * MIB + 3);
    let src_etag = put_bytes(&c, "src", "source object", &source).await;
    let tail = random_bytes(1234);
    let id = create(&c, "dst", "copied").await;

    let copy = c
        .upload_part_copy()
        .bucket("dst")
        .key("copied")
        .upload_id(&id)
        .part_number(1)
        .copy_source("src/source%20object")
        .copy_source_range(format!("bytes={}-{}", MIB, 6 * MIB + 9))
        .copy_source_if_match(&src_etag)
        .send()
        .await
        .unwrap_or_else(|e| panic!("upload part copy: {}", describe(&e)));
    let range = &source[MIB..=6 * MIB + 9];
    let e1 = copy
        .copy_part_result()
        .and_then(|r| r.e_tag())
        .unwrap()
        .to_owned();
    assert_eq!(e1, etag_of(range));
    let e2 = upload(&c, "dst", "copied", &id, 2, &tail).await;
    // A whole-object copy as part 3 is allowed as well (then it is the last part).
    let failed = c
        .upload_part_copy()
        .bucket("dst")
        .key("copied")
        .upload_id(&id)
        .part_number(3)
        .copy_source("src/source%20object")
        .copy_source_if_none_match(&src_etag)
        .send()
        .await;
    assert_s3_error(failed, 412, "PreconditionFailed");
    let failed = c
        .upload_part_copy()
        .bucket("dst")
        .key("copied")
        .upload_id(&id)
        .part_number(3)
        .copy_source("src/source%20object")
        .copy_source_range(format!("bytes=0-{}", source.len()))
        .send()
        .await;
    assert_s3_error(failed, 416, "InvalidRange");
    let failed = c
        .upload_part_copy()
        .bucket("dst")
        .key("copied")
        .upload_id(&id)
        .part_number(3)
        .copy_source("src/source%20object")
        .copy_source_range("bytes=5-")
        .send()
        .await;
    assert_s3_error(failed, 400, "InvalidArgument");
    let failed = c
        .upload_part_copy()
        .bucket("dst")
        .key("copied")
        .upload_id(&id)
        .part_number(3)
        .copy_source("src/missing")
        .send()
        .await;
    assert_s3_error(failed, 404, "NoSuchKey");

    complete(&c, "dst", "copied", &id, &[(1, &e1), (2, &e2)])
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    let mut want = range.to_vec();
    want.extend_from_slice(&tail);
    assert_bytes_eq(
        &get_bytes(&c, "dst", "copied").await,
        &want,
        "copied object",
    );
}

fn crc32_raw(data: &[u8]) -> [u8; 4] {
    crc_fast::crc32_iso_hdlc(data).to_be_bytes()
}

/// FULL_OBJECT checksums: the object's CRC is the CRC of all its bytes (combined from the parts'),
/// for CRC32C when asked and for CRC64NVME by default; the type shows on every answer.
#[tokio::test]
async fn full_object_crc_checksums() {
    use crc_fast::CrcAlgorithm as C;
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("fullck").await;
    let p1 = random_bytes(5 * MIB + 3);
    let p2 = random_bytes(MIB + 1);
    let mut all = p1.clone();
    all.extend_from_slice(&p2);
    let b64 = |raw: &[u8]| base64::engine::general_purpose::STANDARD.encode(raw);
    for (algorithm, crc, width, kind) in [
        (
            ChecksumAlgorithm::Crc32C,
            C::Crc32Iscsi,
            4,
            Some(ChecksumType::FullObject),
        ),
        (ChecksumAlgorithm::Crc64Nvme, C::Crc64Nvme, 8, None),
    ] {
        let raw = |d: &[u8]| crc_fast::checksum(crc, d).to_be_bytes()[8 - width..].to_vec();
        let key = format!("full-{}", algorithm.as_str());
        let mut create = c
            .create_multipart_upload()
            .bucket("fullck")
            .key(&key)
            .checksum_algorithm(algorithm.clone());
        if let Some(k) = &kind {
            create = create.checksum_type(k.clone());
        }
        let created = create
            .send()
            .await
            .unwrap_or_else(|e| panic!("create {key}: {}", describe(&e)));
        assert_eq!(
            created.checksum_type(),
            Some(&ChecksumType::FullObject),
            "{key}"
        );
        let id = created.upload_id().unwrap().to_owned();
        let mut completed = Vec::new();
        for (n, data) in [(1, &p1), (2, &p2)] {
            let out = c
                .upload_part()
                .bucket("fullck")
                .key(&key)
                .upload_id(&id)
                .part_number(n)
                .checksum_algorithm(algorithm.clone())
                .body(ByteStream::from(data.clone()))
                .send()
                .await
                .unwrap_or_else(|e| panic!("upload part {n} of {key}: {}", describe(&e)));
            completed.push(
                CompletedPart::builder()
                    .part_number(n)
                    .e_tag(out.e_tag().unwrap())
                    .build(),
            );
        }
        let want = b64(&raw(&all));
        let header = format!("x-amz-checksum-{}", algorithm.as_str().to_ascii_lowercase());
        let complete_with = |value: String| {
            let header = header.clone();
            c.complete_multipart_upload()
                .bucket("fullck")
                .key(&key)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(completed.clone()))
                        .build(),
                )
                .customize()
                .mutate_request(move |r| {
                    r.headers_mut().insert(header.clone(), value.clone());
                })
                .send()
        };
        // The refusal beside it: the CRC of other bytes.
        assert_s3_error(complete_with(b64(&raw(b"other"))).await, 400, "BadDigest");
        let out = complete_with(want.clone())
            .await
            .unwrap_or_else(|e| panic!("complete {key}: {}", describe(&e)));
        assert_eq!(
            out.checksum_type(),
            Some(&ChecksumType::FullObject),
            "{key}"
        );
        let head = c
            .head_object()
            .bucket("fullck")
            .key(&key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .expect("head");
        assert_eq!(
            head.checksum_type(),
            Some(&ChecksumType::FullObject),
            "{key}"
        );
        let got = match algorithm {
            ChecksumAlgorithm::Crc32C => head.checksum_crc32_c(),
            _ => head.checksum_crc64_nvme(),
        };
        assert_eq!(
            got,
            Some(want.as_str()),
            "{key}: the CRC of the whole object"
        );
    }
    // A full-object SHA256 does not exist.
    let r = c
        .create_multipart_upload()
        .bucket("fullck")
        .key("sha")
        .checksum_algorithm(ChecksumAlgorithm::Sha256)
        .checksum_type(ChecksumType::FullObject)
        .send()
        .await;
    assert_s3_error(r, 400, "InvalidRequest");
}

#[tokio::test]
async fn composite_crc32_checksums() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("cks").await;
    let p1 = random_bytes(5 * MIB + 1);
    let p2 = random_bytes(3 * MIB);
    let created = c
        .create_multipart_upload()
        .bucket("cks")
        .key("summed")
        .checksum_algorithm(ChecksumAlgorithm::Crc32)
        .send()
        .await
        .unwrap_or_else(|e| panic!("create: {}", describe(&e)));
    assert_eq!(
        created.checksum_algorithm(),
        Some(&ChecksumAlgorithm::Crc32)
    );
    let id = created.upload_id().unwrap().to_owned();
    let b64 = |raw: &[u8]| base64::engine::general_purpose::STANDARD.encode(raw);
    let mut completed = Vec::new();
    for (n, data) in [(1, &p1), (2, &p2)] {
        let out = c
            .upload_part()
            .bucket("cks")
            .key("summed")
            .upload_id(&id)
            .part_number(n)
            .checksum_algorithm(ChecksumAlgorithm::Crc32)
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("upload part {n}: {}", describe(&e)));
        assert_eq!(out.checksum_crc32(), Some(b64(&crc32_raw(data)).as_str()));
        completed.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(out.e_tag().unwrap())
                .checksum_crc32(out.checksum_crc32().unwrap())
                .build(),
        );
    }
    let listed = c
        .list_parts()
        .bucket("cks")
        .key("summed")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        listed.parts()[1].checksum_crc32(),
        Some(b64(&crc32_raw(&p2)).as_str())
    );
    // A part checksum that is not the stored one is refused.
    let bad = c
        .complete_multipart_upload()
        .bucket("cks")
        .key("summed")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(completed[0].e_tag().unwrap())
                        .checksum_crc32("AAAAAA==")
                        .build(),
                )
                .parts(completed[1].clone())
                .build(),
        )
        .send()
        .await;
    assert_s3_error(bad, 400, "InvalidPart");

    let mut concat = crc32_raw(&p1).to_vec();
    concat.extend_from_slice(&crc32_raw(&p2));
    let composite = format!("{}-2", b64(&crc32_raw(&concat)));
    // The object's checksum may be named on the complete: another value is BadDigest (and
    // completes nothing), another algorithm InvalidRequest, the right one completes.
    let complete_with = |name: &'static str, value: String| {
        c.complete_multipart_upload()
            .bucket("cks")
            .key("summed")
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(completed.clone()))
                    .build(),
            )
            .customize()
            .mutate_request(move |r| {
                r.headers_mut().insert(name, value.clone());
            })
            .send()
    };
    assert_s3_error(
        complete_with("x-amz-checksum-crc32", "AAAAAA==-2".into()).await,
        400,
        "BadDigest",
    );
    assert_s3_error(
        complete_with("x-amz-checksum-crc32c", "AAAAAA==-2".into()).await,
        400,
        "InvalidRequest",
    );
    let out = complete_with("x-amz-checksum-crc32", composite.clone())
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    assert_eq!(out.checksum_crc32(), Some(composite.as_str()));

    let got = c
        .get_object()
        .bucket("cks")
        .key("summed")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET: {}", describe(&e)));
    assert_eq!(got.checksum_crc32(), Some(composite.as_str()));
    assert_eq!(got.checksum_type(), Some(&ChecksumType::Composite));
    let body = got.body.collect().await.unwrap().into_bytes();
    let mut all = p1.clone();
    all.extend_from_slice(&p2);
    assert_bytes_eq(&body, &all, "checksummed object");
    let head = c
        .head_object()
        .bucket("cks")
        .key("summed")
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(head.checksum_crc32(), Some(composite.as_str()));
}

#[tokio::test]
async fn an_upload_survives_a_restart() {
    let mut s = TestServer::start(4).await;
    s.create_bucket("rst").await;
    let p1 = random_bytes(5 * MIB);
    let p2 = random_bytes(100);
    let id = create(&s.client(), "rst", "k").await;
    let e1 = upload(&s.client(), "rst", "k", &id, 1, &p1).await;
    s.restart().await;
    let c = s.client();
    let e2 = upload(&c, "rst", "k", &id, 2, &p2).await;
    let listed = c
        .list_parts()
        .bucket("rst")
        .key("k")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.parts().len(), 2);
    complete(&c, "rst", "k", &id, &[(1, &e1), (2, &e2)])
        .await
        .unwrap_or_else(|e| panic!("complete after restart: {}", describe(&e)));
    let mut all = p1;
    all.extend_from_slice(&p2);
    assert_bytes_eq(&get_bytes(&c, "rst", "k").await, &all, "after restart");
}

#[tokio::test]
async fn a_multipart_object_is_healed() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("heal").await;
    let p1 = random_bytes(5 * MIB);
    let p2 = random_bytes(5 * MIB);
    let p3 = random_bytes(MIB / 2 + 3);
    let id = create(&c, "heal", "obj").await;
    let e1 = upload(&c, "heal", "obj", &id, 1, &p1).await;
    let e2 = upload(&c, "heal", "obj", &id, 2, &p2).await;
    let e3 = upload(&c, "heal", "obj", &id, 3, &p3).await;
    complete(&c, "heal", "obj", &id, &[(1, &e1), (2, &e2), (3, &e3)])
        .await
        .unwrap();
    let meta = read_meta(s.drive_path(0), "heal", "obj").expect("metadata on drive 0");
    assert_eq!(meta["parts"].as_array().map(Vec::len), Some(3));
    let dd = meta["data_dir"].as_str().expect("a data dir").to_owned();
    let part2 = object_dir(s.drive_path(0), "heal", "obj")
        .join(&dd)
        .join("part.2");
    let healthy = std::fs::read(&part2).expect("part.2 on drive 0");
    std::fs::remove_file(&part2).unwrap();

    let mut all = p1;
    all.extend_from_slice(&p2);
    all.extend_from_slice(&p3);
    assert_bytes_eq(
        &get_bytes(&c, "heal", "obj").await,
        &all,
        "with a lost part",
    );
    assert!(
        wait_until(Duration::from_secs(15), || std::fs::read(&part2)
            .is_ok_and(|b| b == healthy))
        .await,
        "part.2 on drive 0 was not healed"
    );
    assert_bytes_eq(&get_bytes(&c, "heal", "obj").await, &all, "after heal");
}

/// GetObjectAttributes: ETag, size, storage class and checksum of any object; the parts (number
/// and size, paged) of a multipart one only.
#[tokio::test]
async fn object_attributes() {
    use aws_sdk_s3::types::ObjectAttributes as A;
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("attrs").await;
    let all = [
        A::Etag,
        A::Checksum,
        A::ObjectParts,
        A::StorageClass,
        A::ObjectSize,
    ];
    put_bytes(&c, "attrs", "single", b"foo").await;
    let out = c
        .get_object_attributes()
        .bucket("attrs")
        .key("single")
        .set_object_attributes(Some(all.to_vec()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("attributes: {}", describe(&e)));
    assert_eq!(out.e_tag(), Some(etag_of(b"foo").trim_matches('"')));
    assert_eq!(out.object_size(), Some(3));
    assert_eq!(out.storage_class().map(|s| s.as_str()), Some("STANDARD"));
    assert!(out.object_parts().is_none(), "no parts for a single PUT");
    // The checksum stored with it (the SDK's own, or CRC64NVME), whole-object.
    let sum = out.checksum().expect("checksum");
    assert!(sum.checksum_crc32().is_some() || sum.checksum_crc64_nvme().is_some());
    assert_eq!(sum.checksum_type(), Some(&ChecksumType::FullObject));
    assert!(out.last_modified().is_some());

    let (p1, p2, p3) = (
        random_bytes(5 * MIB),
        random_bytes(5 * MIB),
        random_bytes(7),
    );
    let id = create(&c, "attrs", "multi").await;
    let e1 = upload(&c, "attrs", "multi", &id, 1, &p1).await;
    let e2 = upload(&c, "attrs", "multi", &id, 2, &p2).await;
    let e3 = upload(&c, "attrs", "multi", &id, 3, &p3).await;
    complete(&c, "attrs", "multi", &id, &[(1, &e1), (2, &e2), (3, &e3)])
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    let page = c
        .get_object_attributes()
        .bucket("attrs")
        .key("multi")
        .set_object_attributes(Some(all.to_vec()))
        .max_parts(2)
        .send()
        .await
        .expect("attributes of a multipart object");
    let parts = page.object_parts().expect("parts");
    assert_eq!(parts.total_parts_count(), Some(3));
    assert_eq!(parts.is_truncated(), Some(true));
    assert_eq!(parts.next_part_number_marker(), Some("2"));
    let got: Vec<(Option<i32>, Option<i64>)> = parts
        .parts()
        .iter()
        .map(|p| (p.part_number(), p.size()))
        .collect();
    assert_eq!(
        got,
        [
            (Some(1), Some(5 * MIB as i64)),
            (Some(2), Some(5 * MIB as i64))
        ]
    );
    let rest = c
        .get_object_attributes()
        .bucket("attrs")
        .key("multi")
        .object_attributes(A::ObjectParts)
        .part_number_marker("2")
        .send()
        .await
        .expect("second page");
    let parts = rest.object_parts().expect("parts");
    assert_eq!(parts.is_truncated(), Some(false));
    assert_eq!(parts.parts().len(), 1);
    assert_eq!(parts.parts()[0].size(), Some(7));
    assert!(rest.e_tag().is_none(), "only what was asked for");

    // Refusals beside them: a missing object, no attribute, an unknown one.
    let missing = c
        .get_object_attributes()
        .bucket("attrs")
        .key("nothing")
        .object_attributes(A::Etag)
        .send()
        .await;
    assert_eq!(missing.err().and_then(|e| error_status(&e)), Some(404));
    let r = s
        .signed("GET", "/attrs/single?attributes", &[], Vec::new())
        .await;
    expect_raw_error(r, 400, "InvalidArgument").await;
    let r = s
        .signed(
            "GET",
            "/attrs/single?attributes",
            &[("x-amz-object-attributes", "ETag,Color")],
            Vec::new(),
        )
        .await;
    expect_raw_error(r, 400, "InvalidArgument").await;
}
