//! S3 versioning with aws-sdk-s3: the bucket's versioning state, version ids on every write,
//! reads and deletes by version, delete markers, AWS's rules for the null version, copies of a
//! version, DeleteObjects with versions, and ListObjectVersions paged one version at a time.

use quarry_integration::aws_sdk_s3::types::{
    BucketVersioningStatus, Delete, ObjectIdentifier, VersioningConfiguration,
};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;

async fn set_versioning(c: &Client, bucket: &str, status: BucketVersioningStatus) {
    c.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutBucketVersioning: {}", describe(&e)));
}

/// PUT; returns the version id the response names (None: no header).
async fn put(c: &Client, bucket: &str, key: &str, data: &[u8]) -> Option<String> {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(data.to_vec().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT {key}: {}", describe(&e)))
        .version_id
}

async fn get(c: &Client, bucket: &str, key: &str, version: Option<&str>) -> Vec<u8> {
    let out = c
        .get_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {key} {version:?}: {}", describe(&e)));
    if let Some(v) = version {
        assert_eq!(out.version_id.as_deref(), Some(v));
    }
    out.body.collect().await.unwrap().into_bytes().to_vec()
}

/// Every version of the bucket: (key, version id, is latest, is a delete marker), in order.
async fn versions(c: &Client, bucket: &str) -> Vec<(String, String, bool, bool)> {
    let out = c
        .list_object_versions()
        .bucket(bucket)
        .send()
        .await
        .unwrap_or_else(|e| panic!("ListObjectVersions: {}", describe(&e)));
    assert_eq!(out.is_truncated, Some(false));
    let mut all: Vec<(String, String, bool, bool, i64)> = Vec::new();
    for v in out.versions() {
        all.push((
            v.key().unwrap().to_owned(),
            v.version_id().unwrap().to_owned(),
            v.is_latest().unwrap(),
            false,
            v.last_modified().unwrap().as_nanos() as i64,
        ));
    }
    for m in out.delete_markers() {
        all.push((
            m.key().unwrap().to_owned(),
            m.version_id().unwrap().to_owned(),
            m.is_latest().unwrap(),
            true,
            m.last_modified().unwrap().as_nanos() as i64,
        ));
    }
    // The SDK splits versions and markers; put them back in key order, newest first.
    all.sort_by(|a, b| a.0.cmp(&b.0).then(b.4.cmp(&a.4)));
    all.into_iter()
        .map(|(k, v, l, m, _)| (k, v, l, m))
        .collect()
}

#[tokio::test]
async fn versions_are_kept_and_read_by_id() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("ver").await;
    let status = c
        .get_bucket_versioning()
        .bucket("ver")
        .send()
        .await
        .unwrap();
    assert_eq!(status.status, None);
    // Unversioned: no version id is shown.
    assert_eq!(put(&c, "ver", "k", b"plain").await, None);

    set_versioning(&c, "ver", BucketVersioningStatus::Enabled).await;
    let status = c
        .get_bucket_versioning()
        .bucket("ver")
        .send()
        .await
        .unwrap();
    assert_eq!(status.status, Some(BucketVersioningStatus::Enabled));
    let (d1, d2) = (random_bytes(3 << 20), random_bytes(100));
    let v1 = put(&c, "ver", "k", &d1).await.expect("a version id");
    let v2 = put(&c, "ver", "k", &d2).await.expect("a version id");
    assert_ne!(v1, v2);
    assert_eq!(get(&c, "ver", "k", None).await, d2);
    assert_eq!(get(&c, "ver", "k", Some(&v1)).await, d1);
    assert_eq!(get(&c, "ver", "k", Some("null")).await, b"plain");
    let head = c
        .head_object()
        .bucket("ver")
        .key("k")
        .version_id(&v1)
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length, Some(3 << 20));
    assert_eq!(head.version_id.as_deref(), Some(v1.as_str()));
    let head = c.head_object().bucket("ver").key("k").send().await.unwrap();
    assert_eq!(head.version_id.as_deref(), Some(v2.as_str()));

    // Refusals, each beside the passing request above.
    assert_s3_error(
        c.get_object()
            .bucket("ver")
            .key("k")
            .version_id("not-a-version")
            .send()
            .await,
        400,
        "InvalidArgument",
    );
    assert_s3_error(
        c.get_object()
            .bucket("ver")
            .key("k")
            .version_id("0b8c3d9e-1f2a-4b3c-8d4e-5f6a7b8c9d0e")
            .send()
            .await,
        404,
        "NoSuchVersion",
    );
    let bad = s
        .signed(
            "PUT",
            "/ver?versioning",
            &[],
            b"<VersioningConfiguration><Status>Off</Status></VersioningConfiguration>".to_vec(),
        )
        .await;
    expect_raw_error(bad, 400, "MalformedXML").await;
    let status = c
        .get_bucket_versioning()
        .bucket("ver")
        .send()
        .await
        .unwrap();
    assert_eq!(status.status, Some(BucketVersioningStatus::Enabled));
    assert_s3_error(
        c.get_bucket_versioning().bucket("nobucket").send().await,
        404,
        "NoSuchBucket",
    );
    assert_eq!(versions(&c, "ver").await.len(), 3);
}

#[tokio::test]
async fn delete_markers_hide_and_deleting_one_restores() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("dmk").await;
    set_versioning(&c, "dmk", BucketVersioningStatus::Enabled).await;
    let v1 = put(&c, "dmk", "k", b"data").await.unwrap();
    let del = c
        .delete_object()
        .bucket("dmk")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(del.delete_marker, Some(true));
    let marker = del.version_id.expect("the marker's id");

    // GET/HEAD of the key: 404 with the marker's headers; GET of the marker: 405.
    let r = s.signed("GET", "/dmk/k", &[], Vec::new()).await;
    assert_eq!(r.headers()["x-amz-delete-marker"], "true");
    assert_eq!(r.headers()["x-amz-version-id"], marker.as_str());
    expect_raw_error(r, 404, "NoSuchKey").await;
    assert_s3_error(
        c.head_object().bucket("dmk").key("k").send().await,
        404,
        "NotFound",
    );
    let r = s
        .signed(
            "GET",
            &format!("/dmk/k?versionId={marker}"),
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(r.headers()["x-amz-delete-marker"], "true");
    expect_raw_error(r, 405, "MethodNotAllowed").await;
    // The old version still reads; listings hide the key.
    assert_eq!(get(&c, "dmk", "k", Some(&v1)).await, b"data");
    let listed = c.list_objects_v2().bucket("dmk").send().await.unwrap();
    assert_eq!(listed.key_count, Some(0));
    assert_eq!(
        versions(&c, "dmk").await,
        vec![
            ("k".into(), marker.clone(), true, true),
            ("k".into(), v1.clone(), false, false)
        ]
    );
    // A bucket with versions or markers left is not empty.
    assert_s3_error(
        c.delete_bucket().bucket("dmk").send().await,
        409,
        "BucketNotEmpty",
    );

    // Deleting the marker by id brings the object back.
    let del = c
        .delete_object()
        .bucket("dmk")
        .key("k")
        .version_id(&marker)
        .send()
        .await
        .unwrap();
    assert_eq!(del.delete_marker, Some(true));
    assert_eq!(del.version_id.as_deref(), Some(marker.as_str()));
    assert_eq!(get(&c, "dmk", "k", None).await, b"data");
    // Deleting the last version by id empties the key and then the bucket.
    c.delete_object()
        .bucket("dmk")
        .key("k")
        .version_id(&v1)
        .send()
        .await
        .unwrap();
    assert!(versions(&c, "dmk").await.is_empty());
    c.delete_bucket().bucket("dmk").send().await.unwrap();
}

#[tokio::test]
async fn suspend_then_overwrite_the_null_version() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("sus").await;
    assert_eq!(put(&c, "sus", "k", b"null one").await, None);
    set_versioning(&c, "sus", BucketVersioningStatus::Enabled).await;
    let v1 = put(&c, "sus", "k", b"version one").await.unwrap();
    set_versioning(&c, "sus", BucketVersioningStatus::Suspended).await;
    let status = c
        .get_bucket_versioning()
        .bucket("sus")
        .send()
        .await
        .unwrap();
    assert_eq!(status.status, Some(BucketVersioningStatus::Suspended));

    // A suspended PUT is the null version, replacing the old null; v1 stays. Its answer names
    // no version (reads of it say "null").
    assert_eq!(put(&c, "sus", "k", b"null two").await.as_deref(), None);
    assert_eq!(get(&c, "sus", "k", Some("null")).await, b"null two");
    assert_eq!(get(&c, "sus", "k", Some(&v1)).await, b"version one");
    assert_eq!(
        versions(&c, "sus").await,
        vec![
            ("k".into(), "null".into(), true, false),
            ("k".into(), v1.clone(), false, false)
        ]
    );
    // A suspended DELETE: a null marker in place of the null version.
    let del = c
        .delete_object()
        .bucket("sus")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(del.delete_marker, Some(true));
    assert_eq!(del.version_id.as_deref(), Some("null"));
    assert_eq!(
        versions(&c, "sus").await,
        vec![
            ("k".into(), "null".into(), true, true),
            ("k".into(), v1.clone(), false, false)
        ]
    );
    // Deleting the null marker by id shows v1 again.
    c.delete_object()
        .bucket("sus")
        .key("k")
        .version_id("null")
        .send()
        .await
        .unwrap();
    assert_eq!(get(&c, "sus", "k", None).await, b"version one");
}

#[tokio::test]
async fn copy_a_version_onto_itself_and_delete_objects_with_versions() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("cpy").await;
    set_versioning(&c, "cpy", BucketVersioningStatus::Enabled).await;
    let old = random_bytes(200_000);
    let v1 = put(&c, "cpy", "k", &old).await.unwrap();
    put(&c, "cpy", "k", b"newer").await.unwrap();
    let out = c
        .copy_object()
        .bucket("cpy")
        .key("k")
        .copy_source(format!("cpy/k?versionId={v1}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("copy: {}", describe(&e)));
    assert_eq!(out.copy_source_version_id.as_deref(), Some(v1.as_str()));
    let v3 = out.version_id.expect("the copy is a new version");
    assert!(v3 != v1);
    assert_eq!(get(&c, "cpy", "k", None).await, old);
    assert_eq!(versions(&c, "cpy").await.len(), 3);
    assert_s3_error(
        c.copy_object()
            .bucket("cpy")
            .key("k2")
            .copy_source("cpy/k?versionId=bogus")
            .send()
            .await,
        400,
        "InvalidArgument",
    );

    // DeleteObjects: a version by id, a key without (a marker), per key in the answer.
    let ids = |key: &str, v: Option<&str>| {
        ObjectIdentifier::builder()
            .key(key)
            .set_version_id(v.map(str::to_owned))
            .build()
            .unwrap()
    };
    let out = c
        .delete_objects()
        .bucket("cpy")
        .delete(
            Delete::builder()
                .objects(ids("k", Some(&v1)))
                .objects(ids("other", None))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("DeleteObjects: {}", describe(&e)));
    assert!(out.errors().is_empty(), "{:?}", out.errors());
    let deleted = out.deleted();
    assert_eq!(deleted.len(), 2);
    let by_key = |k: &str| deleted.iter().find(|d| d.key() == Some(k)).unwrap();
    assert_eq!(by_key("k").version_id(), Some(v1.as_str()));
    assert_ne!(by_key("k").delete_marker(), Some(true));
    assert_eq!(by_key("other").delete_marker(), Some(true));
    assert!(by_key("other").delete_marker_version_id().is_some());
    let all = versions(&c, "cpy").await;
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(!all.iter().any(|(_, v, _, _)| *v == v1));
}

/// 1,001 versions of one key (more than a page), listed one version per page with
/// key-marker/version-id-marker: every version once, newest first, only the first latest.
/// Every write and every page of the key reads its whole journal (linear in its versions:
/// about 50 s for the 2,002 requests on a debug build, where agreeing on the versions was
/// quadratic and this took 14 minutes).
#[tokio::test]
async fn list_1001_versions_one_by_one() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("many").await;
    set_versioning(&c, "many", BucketVersioningStatus::Enabled).await;
    let mut written = Vec::new();
    for i in 0..1001u32 {
        written.push(put(&c, "many", "k", &i.to_be_bytes()).await.unwrap());
    }
    written.reverse();
    // A default page stops at 1,000.
    let first = c
        .list_object_versions()
        .bucket("many")
        .send()
        .await
        .unwrap();
    assert_eq!(first.versions().len(), 1000);
    assert_eq!(first.is_truncated, Some(true));

    let (mut km, mut vm): (Option<String>, Option<String>) = (None, None);
    let mut seen = Vec::new();
    loop {
        let page = c
            .list_object_versions()
            .bucket("many")
            .max_keys(1)
            .set_key_marker(km.clone())
            .set_version_id_marker(vm.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("page {}: {}", seen.len(), describe(&e)));
        assert!(page.versions().len() <= 1);
        for v in page.versions() {
            assert_eq!(v.is_latest(), Some(seen.is_empty()));
            seen.push(v.version_id().unwrap().to_owned());
        }
        if page.is_truncated != Some(true) {
            break;
        }
        km = page.next_key_marker.clone();
        vm = page.next_version_id_marker.clone();
        assert!(seen.len() <= 1001, "paging does not end");
    }
    assert_eq!(seen, written);
}

/// The status and error code of a DeleteObject, or 204 and None.
async fn delete_status(
    c: &Client,
    bucket: &str,
    key: &str,
    f: impl FnOnce(
        quarry_integration::aws_sdk_s3::operation::delete_object::builders::DeleteObjectFluentBuilder,
    ) -> quarry_integration::aws_sdk_s3::operation::delete_object::builders::DeleteObjectFluentBuilder,
) -> (u16, Option<String>) {
    match f(c.delete_object().bucket(bucket).key(key)).send().await {
        Ok(_) => (204, None),
        Err(e) => (
            error_status(&e).unwrap_or_else(|| panic!("no response: {e:?}")),
            error_code(&e),
        ),
    }
}

/// Conditional deletes (`If-Match`, `x-amz-if-match-last-modified-time`, `x-amz-if-match-size`,
/// and DeleteObjects' `ETag`): a condition that fails is 412 and deletes nothing; a missing key
/// is not an error and gets no delete marker; a latest delete marker matches only `*`.
#[tokio::test]
async fn conditional_deletes_check_the_version_they_delete() {
    let s = TestServer::start(4).await;
    let c = s.client();
    let failed = (412, Some("PreconditionFailed".to_owned()));
    let ok = (204, None);

    // Unversioned: each refusal beside the request that passes.
    s.create_bucket("cdel").await;
    let etag = put_bytes(&c, "cdel", "k", b"twelve bytes").await;
    let head = c
        .head_object()
        .bucket("cdel")
        .key("k")
        .send()
        .await
        .unwrap();
    let mtime = *head.last_modified().unwrap();
    let old = quarry_integration::aws_sdk_s3::primitives::DateTime::from_secs(1_420_070_400);
    assert_eq!(
        delete_status(&c, "cdel", "k", |d| d.if_match("\"bad\"")).await,
        failed
    );
    assert_eq!(
        delete_status(&c, "cdel", "k", |d| d.if_match_size(9999)).await,
        failed
    );
    assert_eq!(
        delete_status(&c, "cdel", "k", |d| d.if_match_last_modified_time(old)).await,
        failed
    );
    assert_eq!(get_bytes(&c, "cdel", "k").await, b"twelve bytes");
    let both = |d: quarry_integration::aws_sdk_s3::operation::delete_object::builders::DeleteObjectFluentBuilder| {
        d.if_match(&etag).if_match_size(12).if_match_last_modified_time(mtime)
    };
    assert_eq!(delete_status(&c, "cdel", "k", both).await, ok);
    assert!(c
        .head_object()
        .bucket("cdel")
        .key("k")
        .send()
        .await
        .is_err());
    // Gone: no condition can fail on it.
    assert_eq!(
        delete_status(&c, "cdel", "k", |d| d.if_match("\"bad\"")).await,
        ok
    );

    // Versioned: the latest version, a named version, and a delete marker.
    s.create_bucket("cdelv").await;
    set_versioning(&c, "cdelv", BucketVersioningStatus::Enabled).await;
    assert_eq!(
        delete_status(&c, "cdelv", "none", |d| d.if_match("*")).await,
        ok
    );
    let listed = c
        .list_object_versions()
        .bucket("cdelv")
        .send()
        .await
        .unwrap();
    assert!(
        listed.delete_markers().is_empty(),
        "a conditional delete of a missing key adds no marker"
    );
    let v1 = put(&c, "cdelv", "k", b"one").await.unwrap();
    let v2 = put(&c, "cdelv", "k", b"second").await.unwrap();
    let head = c
        .head_object()
        .bucket("cdelv")
        .key("k")
        .version_id(&v1)
        .send()
        .await
        .unwrap();
    let v1_etag = head.e_tag().unwrap().to_owned();
    // v1's ETag is not the latest's.
    assert_eq!(
        delete_status(&c, "cdelv", "k", |d| d.if_match(&v1_etag)).await,
        failed
    );
    assert_eq!(
        delete_status(&c, "cdelv", "k", |d| d.version_id(&v1).if_match_size(6)).await,
        failed
    );
    assert_eq!(
        delete_status(&c, "cdelv", "k", |d| d
            .version_id(&v1)
            .if_match(&v1_etag)
            .if_match_size(3))
        .await,
        ok
    );
    let versions = c
        .list_object_versions()
        .bucket("cdelv")
        .send()
        .await
        .unwrap();
    let ids: Vec<_> = versions
        .versions()
        .iter()
        .filter_map(|v| v.version_id())
        .collect();
    assert_eq!(ids, [v2.as_str()]);
    // The latest is v2 (6 bytes): a marker goes on top.
    let out = c
        .delete_object()
        .bucket("cdelv")
        .key("k")
        .if_match_size(6)
        .send()
        .await
        .unwrap();
    assert_eq!(out.delete_marker(), Some(true));
    // The latest is now a marker: only `*` matches it.
    assert_eq!(
        delete_status(&c, "cdelv", "k", |d| d.if_match("\"x\"")).await,
        failed
    );
    assert_eq!(
        delete_status(&c, "cdelv", "k", |d| d.if_match_size(0)).await,
        failed
    );
    assert_eq!(
        delete_status(&c, "cdelv", "k", |d| d.if_match("*")).await,
        ok
    );

    // DeleteObjects: a failed condition is that key's error entry; the others are deleted.
    put(&c, "cdelv", "a", b"aaa").await;
    let b_etag = c
        .put_object()
        .bucket("cdelv")
        .key("b")
        .body(b"bbb".to_vec().into())
        .send()
        .await
        .unwrap()
        .e_tag
        .unwrap();
    let out = c
        .delete_objects()
        .bucket("cdelv")
        .delete(
            Delete::builder()
                .objects(
                    ObjectIdentifier::builder()
                        .key("a")
                        .e_tag("\"bad\"")
                        .build()
                        .unwrap(),
                )
                .objects(
                    ObjectIdentifier::builder()
                        .key("b")
                        .e_tag(&b_etag)
                        .size(3)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("DeleteObjects: {}", describe(&e)));
    let errors: Vec<_> = out.errors().iter().map(|e| (e.key(), e.code())).collect();
    assert_eq!(errors, [(Some("a"), Some("PreconditionFailed"))]);
    let deleted: Vec<_> = out.deleted().iter().map(|d| d.key()).collect();
    assert_eq!(deleted, [Some("b")]);
    assert_eq!(get_bytes(&c, "cdelv", "a").await, b"aaa");
}

/// GetObjectAttributes reads the version named (and says which), the latest without one; a
/// latest delete marker is 404 with the marker header, a named marker 405.
#[tokio::test]
async fn object_attributes_of_a_version() {
    use quarry_integration::aws_sdk_s3::types::ObjectAttributes;
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("attrv").await;
    set_versioning(&c, "attrv", BucketVersioningStatus::Enabled).await;
    let v1 = put(&c, "attrv", "k", b"foo").await.unwrap();
    let v2 = put(&c, "attrv", "k", b"longer").await.unwrap();
    let attrs = |version: Option<&str>| {
        c.get_object_attributes()
            .bucket("attrv")
            .key("k")
            .set_version_id(version.map(str::to_owned))
            .object_attributes(ObjectAttributes::ObjectSize)
            .object_attributes(ObjectAttributes::Etag)
            .send()
    };
    let old = attrs(Some(&v1)).await.unwrap();
    assert_eq!(
        (old.object_size(), old.version_id()),
        (Some(3), Some(v1.as_str()))
    );
    let latest = attrs(None).await.unwrap();
    assert_eq!(
        (latest.object_size(), latest.version_id()),
        (Some(6), Some(v2.as_str()))
    );
    let marker = c
        .delete_object()
        .bucket("attrv")
        .key("k")
        .send()
        .await
        .unwrap();
    let marker = marker.version_id().unwrap().to_owned();
    let e = attrs(None).await.unwrap_err();
    assert_eq!(error_status(&e), Some(404));
    let raw = e.raw_response().unwrap();
    assert_eq!(raw.headers().get("x-amz-delete-marker"), Some("true"));
    let e = attrs(Some(&marker)).await.unwrap_err();
    assert_eq!(error_status(&e), Some(405));
    // The older version still reads by id.
    assert_eq!(attrs(Some(&v1)).await.unwrap().object_size(), Some(3));
}
