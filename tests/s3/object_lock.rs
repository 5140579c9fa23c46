//! Object lock with aws-sdk-s3: lock-enabled buckets, default retention, retention and legal
//! hold per version, deletes refused while locked (and the bypass for GOVERNANCE), COMPLIANCE
//! never shortened, and the refusals on buckets without lock.

use quarry_integration::aws_sdk_s3::primitives::DateTime;
use quarry_integration::aws_sdk_s3::types::{
    BucketVersioningStatus, DefaultRetention, Delete, ObjectIdentifier, ObjectLockConfiguration,
    ObjectLockEnabled, ObjectLockLegalHold, ObjectLockLegalHoldStatus, ObjectLockMode,
    ObjectLockRetention, ObjectLockRetentionMode, ObjectLockRule, VersioningConfiguration,
};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;

fn in_days(days: i64) -> DateTime {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    DateTime::from_secs(now + days * 86_400)
}

async fn locked_bucket(c: &Client, bucket: &str) {
    c.create_bucket()
        .bucket(bucket)
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap_or_else(|e| panic!("create {bucket}: {}", describe(&e)));
}

async fn put(c: &Client, bucket: &str, key: &str) -> String {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(b"abc".to_vec().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT {key}: {}", describe(&e)))
        .version_id
        .unwrap()
}

fn retention(mode: ObjectLockRetentionMode, until: DateTime) -> ObjectLockRetention {
    ObjectLockRetention::builder()
        .mode(mode)
        .retain_until_date(until)
        .build()
}

async fn delete_version(
    c: &Client,
    bucket: &str,
    key: &str,
    v: &str,
    bypass: bool,
) -> Option<String> {
    let r = c
        .delete_object()
        .bucket(bucket)
        .key(key)
        .version_id(v)
        .set_bypass_governance_retention(bypass.then_some(true))
        .send()
        .await;
    r.err()
        .map(|e| error_code(&e).unwrap_or_else(|| describe(&e)))
}

#[tokio::test]
async fn lock_enabled_buckets_and_their_configuration() {
    let s = TestServer::start(4).await;
    let c = s.client();
    locked_bucket(&c, "locked").await;
    let v = c
        .get_bucket_versioning()
        .bucket("locked")
        .send()
        .await
        .unwrap();
    assert_eq!(v.status, Some(BucketVersioningStatus::Enabled));
    // Versioning cannot be suspended on it.
    let e = c
        .put_bucket_versioning()
        .bucket("locked")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Suspended)
                .build(),
        )
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("InvalidBucketState"));

    let conf = |days: Option<i32>, years: Option<i32>| {
        ObjectLockConfiguration::builder()
            .object_lock_enabled(ObjectLockEnabled::Enabled)
            .rule(
                ObjectLockRule::builder()
                    .default_retention(
                        DefaultRetention::builder()
                            .mode(ObjectLockRetentionMode::Governance)
                            .set_days(days)
                            .set_years(years)
                            .build(),
                    )
                    .build(),
            )
            .build()
    };
    let got = c
        .get_object_lock_configuration()
        .bucket("locked")
        .send()
        .await
        .unwrap();
    let got = got.object_lock_configuration.unwrap();
    assert_eq!(got.object_lock_enabled, Some(ObjectLockEnabled::Enabled));
    assert!(got.rule.is_none());
    c.put_object_lock_configuration()
        .bucket("locked")
        .object_lock_configuration(conf(Some(1), None))
        .send()
        .await
        .unwrap();
    let got = c
        .get_object_lock_configuration()
        .bucket("locked")
        .send()
        .await
        .unwrap();
    assert_eq!(got.object_lock_configuration, Some(conf(Some(1), None)));
    for (bad, code) in [
        (conf(Some(1), Some(1)), "MalformedXML"),
        (conf(Some(0), None), "InvalidRetentionPeriod"),
        (conf(None, Some(-1)), "InvalidRetentionPeriod"),
    ] {
        let e = c
            .put_object_lock_configuration()
            .bucket("locked")
            .object_lock_configuration(bad)
            .send()
            .await
            .unwrap_err();
        assert_eq!(error_code(&e).as_deref(), Some(code));
    }

    // The default retention applies to new versions.
    let v1 = put(&c, "locked", "k").await;
    let head = c
        .head_object()
        .bucket("locked")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(head.object_lock_mode, Some(ObjectLockMode::Governance));
    let until = head.object_lock_retain_until_date.unwrap().secs();
    let expect = in_days(1).secs();
    assert!((until - expect).abs() < 120, "{until} vs {expect}");
    assert_eq!(
        delete_version(&c, "locked", "k", &v1, false)
            .await
            .as_deref(),
        Some("AccessDenied")
    );
    assert_eq!(delete_version(&c, "locked", "k", &v1, true).await, None);

    // A bucket without lock: lock calls are refused, enabling needs versioning enabled.
    s.create_bucket("plain").await;
    let e = c
        .get_object_lock_configuration()
        .bucket("plain")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        error_code(&e).as_deref(),
        Some("ObjectLockConfigurationNotFoundError")
    );
    let e = c
        .put_object_lock_configuration()
        .bucket("plain")
        .object_lock_configuration(conf(Some(1), None))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("InvalidBucketState"));
    c.put_object()
        .bucket("plain")
        .key("k")
        .body(b"abc".to_vec().into())
        .send()
        .await
        .unwrap();
    let e = c
        .put_object_retention()
        .bucket("plain")
        .key("k")
        .retention(retention(ObjectLockRetentionMode::Governance, in_days(1)))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("InvalidRequest"));
    let e = c
        .put_object()
        .bucket("plain")
        .key("k2")
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("InvalidRequest"));
    c.put_bucket_versioning()
        .bucket("plain")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    c.put_object_lock_configuration()
        .bucket("plain")
        .object_lock_configuration(conf(None, Some(1)))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn retention_and_legal_hold_keep_versions() {
    let s = TestServer::start(4).await;
    let c = s.client();
    locked_bucket(&c, "keep").await;

    // GOVERNANCE: refused without the bypass, lengthened freely, shortened only with it.
    let v = put(&c, "keep", "gov").await;
    // One instant, set and compared (taking the time twice fails across a second boundary).
    let until = in_days(3);
    c.put_object_retention()
        .bucket("keep")
        .key("gov")
        .retention(retention(ObjectLockRetentionMode::Governance, until))
        .send()
        .await
        .unwrap();
    let got = c
        .get_object_retention()
        .bucket("keep")
        .key("gov")
        .send()
        .await
        .unwrap()
        .retention
        .unwrap();
    assert_eq!(got.mode, Some(ObjectLockRetentionMode::Governance));
    assert_eq!(got.retain_until_date.unwrap().secs(), until.secs());
    let shorten = || {
        c.put_object_retention()
            .bucket("keep")
            .key("gov")
            .retention(retention(ObjectLockRetentionMode::Governance, in_days(2)))
    };
    let e = shorten().send().await.unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("AccessDenied"));
    shorten()
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();
    // A delete marker on top is allowed; the version itself is not deletable.
    let marker = c
        .delete_object()
        .bucket("keep")
        .key("gov")
        .send()
        .await
        .unwrap();
    assert_eq!(marker.delete_marker, Some(true));
    assert_eq!(
        delete_version(&c, "keep", "gov", &v, false)
            .await
            .as_deref(),
        Some("AccessDenied")
    );
    // DeleteObjects reports it per key, beside a key it deletes.
    let free = put(&c, "keep", "free").await;
    let out = c
        .delete_objects()
        .bucket("keep")
        .delete(
            Delete::builder()
                .objects(
                    ObjectIdentifier::builder()
                        .key("gov")
                        .version_id(&v)
                        .build()
                        .unwrap(),
                )
                .objects(
                    ObjectIdentifier::builder()
                        .key("free")
                        .version_id(&free)
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(out.deleted().len(), 1);
    assert_eq!(out.deleted()[0].key(), Some("free"));
    assert_eq!(out.errors().len(), 1);
    assert_eq!(out.errors()[0].code(), Some("AccessDenied"));
    assert_eq!(delete_version(&c, "keep", "gov", &v, true).await, None);

    // COMPLIANCE: nobody deletes it or shortens it, with the bypass or not.
    let vc = c
        .put_object()
        .bucket("keep")
        .key("comp")
        .object_lock_mode(ObjectLockMode::Compliance)
        .object_lock_retain_until_date(in_days(2))
        .body(b"abc".to_vec().into())
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    for bypass in [false, true] {
        assert_eq!(
            delete_version(&c, "keep", "comp", &vc, bypass)
                .await
                .as_deref(),
            Some("AccessDenied")
        );
        for r in [
            retention(ObjectLockRetentionMode::Compliance, in_days(1)),
            retention(ObjectLockRetentionMode::Governance, in_days(5)),
        ] {
            let e = c
                .put_object_retention()
                .bucket("keep")
                .key("comp")
                .retention(r)
                .set_bypass_governance_retention(bypass.then_some(true))
                .send()
                .await
                .unwrap_err();
            assert_eq!(error_code(&e).as_deref(), Some("AccessDenied"));
        }
    }
    // Lengthening it is allowed.
    c.put_object_retention()
        .bucket("keep")
        .key("comp")
        .retention(retention(ObjectLockRetentionMode::Compliance, in_days(4)))
        .send()
        .await
        .unwrap();

    // Legal hold: blocks deletion even with the bypass, until it is off.
    let vh = put(&c, "keep", "hold").await;
    let hold = |status| {
        c.put_object_legal_hold()
            .bucket("keep")
            .key("hold")
            .legal_hold(ObjectLockLegalHold::builder().status(status).build())
    };
    hold(ObjectLockLegalHoldStatus::On).send().await.unwrap();
    let got = c
        .get_object_legal_hold()
        .bucket("keep")
        .key("hold")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.legal_hold.unwrap().status,
        Some(ObjectLockLegalHoldStatus::On)
    );
    let head = c
        .head_object()
        .bucket("keep")
        .key("hold")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.object_lock_legal_hold_status,
        Some(ObjectLockLegalHoldStatus::On)
    );
    assert_eq!(
        delete_version(&c, "keep", "hold", &vh, true)
            .await
            .as_deref(),
        Some("AccessDenied")
    );
    hold(ObjectLockLegalHoldStatus::Off).send().await.unwrap();
    assert_eq!(delete_version(&c, "keep", "hold", &vh, false).await, None);

    // A copy does not take its source's lock.
    c.copy_object()
        .bucket("keep")
        .key("comp-copy")
        .copy_source("keep/comp")
        .send()
        .await
        .unwrap();
    let head = c
        .head_object()
        .bucket("keep")
        .key("comp-copy")
        .send()
        .await
        .unwrap();
    assert_eq!(head.object_lock_mode, None);
    assert_eq!(
        delete_version(&c, "keep", "comp-copy", head.version_id().unwrap(), false).await,
        None
    );

    // Multipart with a legal hold.
    let up = c
        .create_multipart_upload()
        .bucket("keep")
        .key("mp")
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = c
        .upload_part()
        .bucket("keep")
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    let done = c
        .complete_multipart_upload()
        .bucket("keep")
        .key("mp")
        .upload_id(id)
        .multipart_upload(
            quarry_integration::aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(
                    quarry_integration::aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        delete_version(&c, "keep", "mp", done.version_id().unwrap(), true)
            .await
            .as_deref(),
        Some("AccessDenied")
    );
}

#[tokio::test]
async fn a_retained_put_needs_a_digest() {
    let s = TestServer::start(4).await;
    let c = s.client();
    locked_bucket(&c, "digest").await;
    let until = "2099-01-01T00:00:00Z";
    let lock = [
        ("x-amz-object-lock-mode", "GOVERNANCE"),
        ("x-amz-object-lock-retain-until-date", until),
    ];
    let r = s.signed("PUT", "/digest/k", &lock, b"abc".to_vec()).await;
    assert_eq!(r.status(), 400);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("<Code>InvalidRequest</Code>"));
    // The control: with Content-MD5 it is stored, retained.
    let md5 = "kAFQmDzST7DWlj99KOF/cg==";
    let mut with = lock.to_vec();
    with.push(("content-md5", md5));
    let r = s.signed("PUT", "/digest/k", &with, b"abc".to_vec()).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let head = c
        .head_object()
        .bucket("digest")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(head.object_lock_mode, Some(ObjectLockMode::Governance));
    // A date in the past is refused.
    let r = s
        .signed(
            "PUT",
            "/digest/k",
            &[
                ("x-amz-object-lock-mode", "GOVERNANCE"),
                (
                    "x-amz-object-lock-retain-until-date",
                    "2001-01-01T00:00:00Z",
                ),
                ("content-md5", md5),
            ],
            b"abc".to_vec(),
        )
        .await;
    assert_eq!(r.status(), 400);
}

/// A multipart object's version is made at CompleteMultipartUpload, so that is when it takes the
/// bucket's default retention (the default then in force, counted from then); a retention named
/// at CreateMultipartUpload is kept as named.
#[tokio::test]
async fn multipart_objects_take_the_default_retention_at_completion() {
    let s = TestServer::start(4).await;
    let c = s.client();
    locked_bucket(&c, "mpdef").await;
    let start = |key: &'static str, explicit: Option<DateTime>| {
        let c = c.clone();
        async move {
            let mut req = c.create_multipart_upload().bucket("mpdef").key(key);
            if let Some(until) = explicit {
                req = req
                    .object_lock_mode(ObjectLockMode::Compliance)
                    .object_lock_retain_until_date(until);
            }
            req.send().await.unwrap().upload_id.unwrap()
        }
    };
    let finish = |key: &'static str, upload: String| {
        let c = c.clone();
        async move {
            let etag = c
                .upload_part()
                .bucket("mpdef")
                .key(key)
                .upload_id(&upload)
                .part_number(1)
                .body(b"abc".to_vec().into())
                .send()
                .await
                .unwrap()
                .e_tag
                .unwrap();
            let parts = quarry_integration::aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(
                    quarry_integration::aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag(etag)
                        .build(),
                )
                .build();
            c.complete_multipart_upload()
                .bucket("mpdef")
                .key(key)
                .upload_id(&upload)
                .multipart_upload(parts)
                .send()
                .await
                .unwrap()
                .version_id
                .unwrap()
        }
    };
    // Both uploads begin while the bucket has no default retention.
    let plain = start("plain", None).await;
    let named_until = in_days(30);
    let named = start("named", Some(named_until)).await;
    c.put_object_lock_configuration()
        .bucket("mpdef")
        .object_lock_configuration(
            ObjectLockConfiguration::builder()
                .object_lock_enabled(ObjectLockEnabled::Enabled)
                .rule(
                    ObjectLockRule::builder()
                        .default_retention(
                            DefaultRetention::builder()
                                .mode(ObjectLockRetentionMode::Governance)
                                .days(2)
                                .build(),
                        )
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let before = in_days(2).secs();
    let plain_version = finish("plain", plain).await;
    let named_version = finish("named", named).await;
    let got = |key: &'static str, version: String| {
        let c = c.clone();
        async move {
            c.get_object_retention()
                .bucket("mpdef")
                .key(key)
                .version_id(version)
                .send()
                .await
                .unwrap_or_else(|e| panic!("GetObjectRetention {key}: {}", describe(&e)))
                .retention
                .unwrap()
        }
    };
    let r = got("plain", plain_version.clone()).await;
    assert_eq!(r.mode, Some(ObjectLockRetentionMode::Governance));
    let until = r.retain_until_date.unwrap().secs();
    assert!(
        (before..before + 60).contains(&until),
        "retain until {until}, completed at about {before} - 2 days"
    );
    let r = got("named", named_version).await;
    assert_eq!(r.mode, Some(ObjectLockRetentionMode::Compliance));
    assert_eq!(r.retain_until_date.unwrap().secs(), named_until.secs());
    // The default holds: the version cannot go without the bypass.
    assert!(delete_version(&c, "mpdef", "plain", &plain_version, false)
        .await
        .is_some());
}
