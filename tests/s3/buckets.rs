//! Bucket operations: create, head, list, location, delete, and their errors.

use quarry_integration::*;

#[tokio::test]
async fn bucket_lifecycle() {
    let s = TestServer::start(4).await;
    let c = s.client();

    let before = c.list_buckets().send().await.expect("list buckets");
    assert!(before.buckets().is_empty(), "fresh server lists no buckets");

    for b in ["beta", "alpha", "gamma-1.x"] {
        s.create_bucket(b).await;
    }
    c.head_bucket()
        .bucket("alpha")
        .send()
        .await
        .expect("head existing bucket");

    let names: Vec<String> = c
        .list_buckets()
        .send()
        .await
        .expect("list buckets")
        .buckets()
        .iter()
        .map(|b| b.name().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        names,
        ["alpha", "beta", "gamma-1.x"],
        "ListBuckets is sorted by name"
    );
    for b in c.list_buckets().send().await.expect("list").buckets() {
        assert!(
            b.creation_date().is_some(),
            "bucket {:?} has a CreationDate",
            b.name()
        );
    }

    let loc = c
        .get_bucket_location()
        .bucket("alpha")
        .send()
        .await
        .expect("get bucket location");
    let loc = loc
        .location_constraint()
        .map(|l| l.as_str().to_string())
        .unwrap_or_default();
    assert!(
        loc.is_empty() || loc == "us-east-1",
        "location of a us-east-1 bucket is empty (S3) or us-east-1, got {loc:?}"
    );

    c.delete_bucket()
        .bucket("beta")
        .send()
        .await
        .expect("delete empty bucket");
    let err = c
        .head_bucket()
        .bucket("beta")
        .send()
        .await
        .expect_err("head deleted bucket");
    assert_eq!(
        error_status(&err),
        Some(404),
        "HEAD of a deleted bucket: {}",
        describe(&err)
    );
    let names: Vec<String> = c
        .list_buckets()
        .send()
        .await
        .expect("list")
        .buckets()
        .iter()
        .map(|b| b.name().unwrap_or_default().to_string())
        .collect();
    assert_eq!(names, ["alpha", "gamma-1.x"]);

    // A deleted bucket can be created again and is empty.
    s.create_bucket("beta").await;
    let l = c
        .list_objects_v2()
        .bucket("beta")
        .send()
        .await
        .expect("list recreated");
    assert_eq!(l.key_count(), Some(0));
}

#[tokio::test]
async fn invalid_bucket_names_are_refused() {
    let s = TestServer::start(4).await;
    let c = s.client();
    let long = "a".repeat(64);
    for name in [
        "ab",
        "UPPER",
        "a_b",
        "192.168.1.1",
        "-abc",
        "abc-",
        "a..b",
        long.as_str(),
    ] {
        // Signed by hand: the request must reach the server whatever the SDK thinks of the name.
        let resp = s.signed("PUT", &format!("/{name}"), &[], Vec::new()).await;
        expect_raw_error(resp, 400, "InvalidBucketName").await;
    }
    // The SDK path too, for one of them.
    assert_s3_error(
        c.create_bucket().bucket("a_b").send().await,
        400,
        "InvalidBucketName",
    );
    // Nothing was created on any drive.
    let names = c.list_buckets().send().await.expect("list").buckets().len();
    assert_eq!(names, 0, "no bucket was created by refused names");
    // 63 characters, digits, dots and hyphens are fine.
    let ok63 = format!("a{}", "b".repeat(62));
    for name in [ok63.as_str(), "abc", "a-b.c1", "123"] {
        s.create_bucket(name).await;
    }
}

/// In us-east-1 S3 answers 200 to creating a bucket you already own, and keeps what it holds
/// (other regions answer 409 BucketAlreadyOwnedByYou).
#[tokio::test]
async fn create_twice_succeeds_and_keeps_the_bucket() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("twice").await;
    put_bytes(&c, "twice", "kept", b"still here").await;
    c.create_bucket()
        .bucket("twice")
        .send()
        .await
        .expect("re-create an owned bucket in us-east-1");
    assert_eq!(get_bytes(&c, "twice", "kept").await, b"still here");
    let names = c.list_buckets().send().await.expect("list").buckets().len();
    assert_eq!(names, 1);
    // A bad name is still refused, before the bucket's existence is looked at.
    assert_s3_error(
        c.create_bucket().bucket("Twice").send().await,
        400,
        "InvalidBucketName",
    );
}

#[tokio::test]
async fn delete_non_empty_bucket_is_refused() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("full").await;
    put_bytes(&c, "full", "deep/inside/key", b"x").await;
    assert_s3_error(
        c.delete_bucket().bucket("full").send().await,
        409,
        "BucketNotEmpty",
    );
    // Still there, object intact.
    assert_eq!(get_bytes(&c, "full", "deep/inside/key").await, b"x");
    // Once emptied, it can be deleted.
    c.delete_object()
        .bucket("full")
        .key("deep/inside/key")
        .send()
        .await
        .expect("delete");
    c.delete_bucket()
        .bucket("full")
        .send()
        .await
        .expect("delete emptied bucket");
}

#[tokio::test]
async fn operations_on_a_missing_bucket() {
    let s = TestServer::start(4).await;
    let c = s.client();
    let b = "no-such-bucket";
    assert_s3_error(
        c.list_objects_v2().bucket(b).send().await,
        404,
        "NoSuchBucket",
    );
    assert_s3_error(c.list_objects().bucket(b).send().await, 404, "NoSuchBucket");
    assert_s3_error(
        c.put_object()
            .bucket(b)
            .key("k")
            .body(b"v".to_vec().into())
            .send()
            .await,
        404,
        "NoSuchBucket",
    );
    assert_s3_error(
        c.get_object().bucket(b).key("k").send().await,
        404,
        "NoSuchBucket",
    );
    assert_s3_error(
        c.delete_object().bucket(b).key("k").send().await,
        404,
        "NoSuchBucket",
    );
    assert_s3_error(
        c.delete_bucket().bucket(b).send().await,
        404,
        "NoSuchBucket",
    );
    assert_s3_error(
        c.get_bucket_location().bucket(b).send().await,
        404,
        "NoSuchBucket",
    );
    let err = c
        .head_bucket()
        .bucket(b)
        .send()
        .await
        .expect_err("head missing bucket");
    assert_eq!(error_status(&err), Some(404), "{}", describe(&err));
    let err = c
        .head_object()
        .bucket(b)
        .key("k")
        .send()
        .await
        .expect_err("head object in missing bucket");
    assert_eq!(error_status(&err), Some(404), "{}", describe(&err));
    // Nothing was created as a side effect.
    assert!(c
        .list_buckets()
        .send()
        .await
        .expect("list")
        .buckets()
        .is_empty());
    for i in 0..s.drive_count() {
        assert!(
            !s.drive_path(i).join(b).exists(),
            "no bucket dir on drive {i}"
        );
    }
}

#[tokio::test]
async fn unimplemented_subresources_and_bad_requests() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("sub").await;
    assert_s3_error(
        c.get_bucket_logging().bucket("sub").send().await,
        501,
        "NotImplemented",
    );
    assert_s3_error(
        c.get_bucket_website().bucket("sub").send().await,
        501,
        "NotImplemented",
    );
    let resp = s.signed("GET", "/sub?website", &[], Vec::new()).await;
    expect_raw_error(resp, 501, "NotImplemented").await;

    // A CreateBucketConfiguration that is not XML.
    let resp = s
        .signed(
            "PUT",
            "/badxml",
            &[],
            b"<CreateBucketConfiguration><LocationConstraint>".to_vec(),
        )
        .await;
    expect_raw_error(resp, 400, "MalformedXML").await;
    let err = c
        .head_bucket()
        .bucket("badxml")
        .send()
        .await
        .expect_err("not created");
    assert_eq!(error_status(&err), Some(404));

    // A method S3 has no operation for.
    put_bytes(&c, "sub", "obj", b"1").await;
    let resp = s.signed("PATCH", "/sub/obj", &[], Vec::new()).await;
    expect_raw_error(resp, 405, "MethodNotAllowed").await;
}

#[tokio::test]
async fn health_endpoints() {
    let s = TestServer::start(4).await;
    let http = reqwest::Client::new();
    for path in ["/health/live", "/health/ready"] {
        let r = http
            .get(format!("{}{path}", s.endpoint()))
            .send()
            .await
            .expect("health");
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
}
