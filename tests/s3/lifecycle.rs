//! Bucket lifecycle with aws-sdk-s3: the configuration's round trip and AWS's refusals, the
//! `x-amz-expiration` header, and the background worker (with a debug day of a few seconds)
//! expiring current objects, noncurrent versions (NewerNoncurrentVersions kept), lone delete
//! markers and incomplete uploads; object lock keeping a version; a cluster with a node down.

use std::time::{Duration, Instant};

use quarry_integration::aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, BucketVersioningStatus,
    ExpirationStatus, LifecycleExpiration, LifecycleRule, LifecycleRuleAndOperator,
    LifecycleRuleFilter, NoncurrentVersionExpiration, ObjectLockLegalHold,
    ObjectLockLegalHoldStatus, Tag, VersioningConfiguration,
};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;

/// The debug day the worker tests run with, and the pass interval.
const DAY_SECS: &str = "2";
const PASS_SECS: &str = "1";
/// How long a test waits for the worker at most (a loaded machine is slow).
const PATIENCE: Duration = Duration::from_secs(60);

/// A server whose lifecycle worker counts a day as [`DAY_SECS`] seconds.
async fn debug_day_server(s: &mut TestServer) {
    s.set_env("QUARRY_LC_DEBUG_DAY_SECS", DAY_SECS);
    s.set_env("QUARRY_LC_INTERVAL", PASS_SECS);
    s.restart().await;
}

async fn put_lifecycle_xml(s: &TestServer, bucket: &str, rules: &str) -> reqwest::Response {
    let body = format!("<LifecycleConfiguration>{rules}</LifecycleConfiguration>");
    s.signed(
        "PUT",
        &format!("/{bucket}?lifecycle"),
        &[],
        body.into_bytes(),
    )
    .await
}

async fn versioned(c: &Client, bucket: &str) {
    c.create_bucket().bucket(bucket).send().await.unwrap();
    c.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
}

async fn put(c: &Client, bucket: &str, key: &str, body: &[u8]) -> Option<String> {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(body.to_vec().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT {key}: {}", describe(&e)))
        .version_id
}

/// (version ids, delete marker ids) of `key`, newest first.
async fn versions_of(c: &Client, bucket: &str, key: &str) -> (Vec<String>, Vec<String>) {
    let r = c
        .list_object_versions()
        .bucket(bucket)
        .prefix(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("ListObjectVersions: {}", describe(&e)));
    let v = r
        .versions()
        .iter()
        .filter(|v| v.key() == Some(key))
        .map(|v| v.version_id().unwrap_or("null").to_owned())
        .collect();
    let m = r
        .delete_markers()
        .iter()
        .filter(|v| v.key() == Some(key))
        .map(|v| v.version_id().unwrap_or("null").to_owned())
        .collect();
    (v, m)
}

/// Polls `cond` until it holds or [`PATIENCE`] runs out; `false` then.
async fn eventually<F, Fut>(mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

async fn metric(s: &TestServer, node: usize, name: &str) -> u64 {
    let text = metrics_get(&format!("{}/metrics", s.node_endpoint(node)))
        .await
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics")) as u64
}

const OK_RULE: &str = "<Rule><ID>r</ID><Filter><Prefix>a/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule>";

#[tokio::test]
async fn the_configuration_round_trips_and_bad_ones_are_refused_as_aws() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("lcy").await;

    // None yet.
    let err = c
        .get_bucket_lifecycle_configuration()
        .bucket("lcy")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        error_code(&err).as_deref(),
        Some("NoSuchLifecycleConfiguration")
    );

    let tag = |k: &str, v: &str| Tag::builder().key(k).value(v).build().unwrap();
    let config = BucketLifecycleConfiguration::builder()
        .rules(
            LifecycleRule::builder()
                .id("logs")
                .status(ExpirationStatus::Enabled)
                .filter(LifecycleRuleFilter::builder().prefix("logs/").build())
                .expiration(LifecycleExpiration::builder().days(30).build())
                .abort_incomplete_multipart_upload(
                    AbortIncompleteMultipartUpload::builder()
                        .days_after_initiation(2)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .rules(
            LifecycleRule::builder()
                .id("old-versions")
                .status(ExpirationStatus::Disabled)
                .filter(
                    LifecycleRuleFilter::builder()
                        .and(
                            LifecycleRuleAndOperator::builder()
                                .prefix("data/")
                                .tags(tag("tier", "cold"))
                                .object_size_greater_than(1024)
                                .build(),
                        )
                        .build(),
                )
                .noncurrent_version_expiration(
                    NoncurrentVersionExpiration::builder()
                        .noncurrent_days(7)
                        .newer_noncurrent_versions(3)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .rules(
            LifecycleRule::builder()
                .id("markers")
                .status(ExpirationStatus::Enabled)
                .filter(LifecycleRuleFilter::builder().prefix("m/").build())
                .expiration(
                    LifecycleExpiration::builder()
                        .expired_object_delete_marker(true)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    c.put_bucket_lifecycle_configuration()
        .bucket("lcy")
        .lifecycle_configuration(config.clone())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutBucketLifecycleConfiguration: {}", describe(&e)));
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("lcy")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules(), config.rules());

    // A rule without an ID gets one.
    let resp = put_lifecycle_xml(
        &s,
        "lcy",
        "<Rule><Prefix>x/</Prefix><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>",
    )
    .await;
    assert_eq!(resp.status(), 200);
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("lcy")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules().len(), 1);
    assert!(!got.rules()[0].id().unwrap_or("").is_empty());
    // Given back in the legacy form it was written in.
    let raw = s.signed("GET", "/lcy?lifecycle", &[], Vec::new()).await;
    assert_eq!(raw.status(), 200);
    let raw = raw.text().await.unwrap();
    assert!(
        raw.contains("<Prefix>x/</Prefix>") && !raw.contains("<Filter>"),
        "{raw}"
    );

    // Each refusal beside the control it differs from.
    assert_eq!(put_lifecycle_xml(&s, "lcy", OK_RULE).await.status(), 200);
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "MalformedXML"),
        (OK_RULE.replace("Enabled", "enabled"), "MalformedXML"),
        (OK_RULE.replace("<Days>3</Days>", "<Days>0</Days>"), "InvalidArgument"),
        (
            OK_RULE.replace("<Days>3</Days>", "<Days>3</Days><Date>2030-01-01T00:00:00Z</Date>"),
            "MalformedXML",
        ),
        (
            OK_RULE.replace("<Days>3</Days>", "<Date>2030-01-01T12:00:00Z</Date>"),
            "InvalidArgument",
        ),
        (format!("{OK_RULE}{OK_RULE}"), "InvalidArgument"),
        (
            OK_RULE.replace("<ID>r</ID>", &format!("<ID>{}</ID>", "i".repeat(256))),
            "InvalidArgument",
        ),
        (
            (0..1001)
                .map(|i| OK_RULE.replace("<ID>r</ID>", &format!("<ID>r{i}</ID>")))
                .collect(),
            "InvalidArgument",
        ),
        (
            OK_RULE.replace(
                "</Rule>",
                "<Transition><Days>30</Days><StorageClass>GLACIER</StorageClass></Transition></Rule>",
            ),
            "InvalidStorageClass",
        ),
        (
            OK_RULE.replace(
                "<Prefix>a/</Prefix>",
                "<Tag><Key>k</Key><Value>v</Value></Tag>",
            )
            .replace(
                "<Days>3</Days>",
                "<ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker>",
            ),
            "InvalidArgument",
        ),
        (OK_RULE.replace("<Filter><Prefix>a/</Prefix></Filter>", ""), "MalformedXML"),
    ];
    for (rules, code) in cases {
        let body = expect_raw_error(put_lifecycle_xml(&s, "lcy", &rules).await, 400, code).await;
        assert!(body.contains("<Message>"), "{body}");
    }
    // The refusals left the control in place; 1000 rules are fine.
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("lcy")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules()[0].id(), Some("r"));
    let thousand: String = (0..1000)
        .map(|i| OK_RULE.replace("<ID>r</ID>", &format!("<ID>r{i}</ID>")))
        .collect();
    assert_eq!(put_lifecycle_xml(&s, "lcy", &thousand).await.status(), 200);

    // Delete: 204, then none (and deleting none is 204 too).
    for _ in 0..2 {
        c.delete_bucket_lifecycle()
            .bucket("lcy")
            .send()
            .await
            .unwrap();
    }
    let err = c
        .get_bucket_lifecycle_configuration()
        .bucket("lcy")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        error_code(&err).as_deref(),
        Some("NoSuchLifecycleConfiguration")
    );
    // No such bucket.
    let err = c
        .get_bucket_lifecycle_configuration()
        .bucket("nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&err).as_deref(), Some("NoSuchBucket"));
}

#[tokio::test]
async fn the_expiration_header_names_the_rule_and_the_next_midnight() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("hdr").await;
    let rules = "<Rule><ID>week</ID><Filter><Prefix>tmp/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>7</Days></Expiration></Rule>\
                 <Rule><ID>tagged</ID><Filter><Tag><Key>t</Key><Value>1</Value></Tag></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>";
    assert_eq!(put_lifecycle_xml(&s, "hdr", rules).await.status(), 200);

    let put = c
        .put_object()
        .bucket("hdr")
        .key("tmp/a")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    let header = put
        .expiration()
        .expect("x-amz-expiration on PUT")
        .to_owned();
    assert!(header.ends_with("rule-id=\"week\""), "{header}");
    assert!(header.contains("00:00:00 GMT"), "midnight: {header}");
    let head = c
        .head_object()
        .bucket("hdr")
        .key("tmp/a")
        .send()
        .await
        .unwrap();
    assert_eq!(head.expiration(), Some(header.as_str()));
    let get = c
        .get_object()
        .bucket("hdr")
        .key("tmp/a")
        .send()
        .await
        .unwrap();
    assert_eq!(get.expiration(), Some(header.as_str()));

    // Outside every rule: no header; a tag brings it in, with the earlier rule.
    let other = c
        .put_object()
        .bucket("hdr")
        .key("keep/a")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(other.expiration(), None);
    let tagged = c
        .put_object()
        .bucket("hdr")
        .key("tmp/b")
        .tagging("t=1")
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    assert!(
        tagged.expiration().unwrap().ends_with("rule-id=\"tagged\""),
        "{:?}",
        tagged.expiration()
    );
}

#[tokio::test]
async fn the_worker_expires_objects_versions_markers_and_uploads() {
    let mut s = TestServer::start(4).await;
    debug_day_server(&mut s).await;
    let c = s.client();

    // Unversioned: old/ expires after a day, keep/ never.
    s.create_bucket("plain").await;
    put(&c, "plain", "old/a", b"12345").await;
    put(&c, "plain", "keep/a", b"12345").await;
    let rules = "<Rule><ID>old</ID><Filter><Prefix>old/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>\
                 <Rule><ID>off</ID><Filter><Prefix>keep/</Prefix></Filter><Status>Disabled</Status><Expiration><Days>1</Days></Expiration></Rule>\
                 <Rule><ID>mpu</ID><Filter><Prefix>up/</Prefix></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>";
    assert_eq!(put_lifecycle_xml(&s, "plain", rules).await.status(), 200);
    for key in ["up/a", "other/a"] {
        c.create_multipart_upload()
            .bucket("plain")
            .key(key)
            .send()
            .await
            .unwrap();
    }

    // Versioned: four versions of k (NoncurrentDays 1, the newest noncurrent one kept); a
    // current version under a marker; another key's expiry makes a marker.
    versioned(&c, "ver").await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            put(&c, "ver", "nc/k", format!("v{i}").as_bytes())
                .await
                .unwrap(),
        );
    }
    put(&c, "ver", "dm/k", b"gone soon").await;
    c.delete_object()
        .bucket("ver")
        .key("dm/k")
        .send()
        .await
        .unwrap();
    put(&c, "ver", "cur/k", b"current").await;
    let rules = "<Rule><ID>nc</ID><Filter><Prefix>nc/</Prefix></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays><NewerNoncurrentVersions>1</NewerNoncurrentVersions></NoncurrentVersionExpiration></Rule>\
                 <Rule><ID>dm</ID><Filter><Prefix>dm/</Prefix></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration></Rule>\
                 <Rule><ID>dm2</ID><Filter><Prefix>dm/</Prefix></Filter><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>\
                 <Rule><ID>cur</ID><Filter><Prefix>cur/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>";
    assert_eq!(put_lifecycle_xml(&s, "ver", rules).await.status(), 200);

    assert!(
        eventually(|| async {
            c.head_object()
                .bucket("plain")
                .key("old/a")
                .send()
                .await
                .is_err()
        })
        .await,
        "old/a never expired"
    );
    assert!(
        eventually(|| async {
            let r = c
                .list_multipart_uploads()
                .bucket("plain")
                .send()
                .await
                .unwrap();
            r.uploads().len() == 1
        })
        .await,
        "the upload under up/ was never aborted"
    );
    let uploads = c
        .list_multipart_uploads()
        .bucket("plain")
        .send()
        .await
        .unwrap();
    assert_eq!(uploads.uploads()[0].key(), Some("other/a"));
    assert!(
        eventually(|| async { versions_of(&c, "ver", "nc/k").await.0.len() == 2 }).await,
        "noncurrent versions never expired: {:?}",
        versions_of(&c, "ver", "nc/k").await
    );
    // The current version and the newest noncurrent one stay.
    assert_eq!(
        versions_of(&c, "ver", "nc/k").await.0,
        vec![ids[3].clone(), ids[2].clone()]
    );
    assert!(
        eventually(|| async { versions_of(&c, "ver", "dm/k").await == (vec![], vec![]) }).await,
        "the lone marker never went: {:?}",
        versions_of(&c, "ver", "dm/k").await
    );
    assert!(
        eventually(|| async {
            let (v, m) = versions_of(&c, "ver", "cur/k").await;
            v.len() == 1 && m.len() == 1
        })
        .await,
        "cur/k never got its delete marker: {:?}",
        versions_of(&c, "ver", "cur/k").await
    );
    // Controls: outside the rules, and under a disabled one, nothing moved.
    c.head_object()
        .bucket("plain")
        .key("keep/a")
        .send()
        .await
        .unwrap();
    // A later pass does nothing more (idempotent): still one marker over one version.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (v, m) = versions_of(&c, "ver", "cur/k").await;
    assert_eq!((v.len(), m.len()), (1, 1));

    assert!(metric(&s, 0, "quarry_lifecycle_objects_expired_total").await >= 2);
    assert!(metric(&s, 0, "quarry_lifecycle_versions_expired_total").await >= 3);
    assert!(metric(&s, 0, "quarry_lifecycle_delete_markers_removed_total").await >= 1);
    assert!(metric(&s, 0, "quarry_lifecycle_uploads_aborted_total").await >= 1);
    assert!(metric(&s, 0, "quarry_lifecycle_bytes_freed_total").await >= 5);
    assert!(metric(&s, 0, "quarry_lifecycle_passes_total").await >= 1);
}

#[tokio::test]
async fn a_legal_hold_keeps_a_version_lifecycle_would_remove() {
    let mut s = TestServer::start(4).await;
    debug_day_server(&mut s).await;
    let c = s.client();
    c.create_bucket()
        .bucket("held")
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    let held = put(&c, "held", "hold", b"keep me").await.unwrap();
    c.put_object_legal_hold()
        .bucket("held")
        .key("hold")
        .version_id(&held)
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::On)
                .build(),
        )
        .send()
        .await
        .unwrap();
    put(&c, "held", "hold", b"newer").await;
    // The control: the same, without a hold.
    let free = put(&c, "held", "free", b"old").await.unwrap();
    put(&c, "held", "free", b"newer").await;
    let rules = "<Rule><ID>nc</ID><Filter></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration></Rule>";
    assert_eq!(put_lifecycle_xml(&s, "held", rules).await.status(), 200);

    assert!(
        eventually(|| async { versions_of(&c, "held", "free").await.0.len() == 1 }).await,
        "the unheld noncurrent version never expired"
    );
    assert!(!versions_of(&c, "held", "free").await.0.contains(&free));
    assert!(
        eventually(|| async { metric(&s, 0, "quarry_lifecycle_locked_skipped_total").await >= 1 })
            .await
    );
    let (v, _) = versions_of(&c, "held", "hold").await;
    assert_eq!(v.len(), 2, "the held version stays");
    assert!(v.contains(&held));
}

#[tokio::test]
async fn a_cluster_with_a_node_down_still_expires_noncurrent_versions() {
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    debug_day_server(&mut s).await;
    let c = s.node_client(1);
    versioned(&c, "clu").await;
    let rules = "<Rule><ID>nc</ID><Filter><Prefix>k</Prefix></Filter><Status>Enabled</Status><NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration></Rule>";
    let resp = s
        .signed_node(
            1,
            "PUT",
            "/clu?lifecycle",
            &[],
            format!("<LifecycleConfiguration>{rules}</LifecycleConfiguration>").into_bytes(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    // Node 0 holds the first drive of the only set: the set's worker while it is up.
    s.kill_node(0);
    let keys = ["k1", "k2", "k3", "other"];
    for key in keys {
        for i in 0..3 {
            put(&c, "clu", key, format!("{key}{i}").as_bytes()).await;
        }
    }
    for key in ["k1", "k2", "k3"] {
        assert!(
            eventually(|| async { versions_of(&c, "clu", key).await.0.len() == 1 }).await,
            "{key}: noncurrent versions never expired with node 0 down: {:?}",
            versions_of(&c, "clu", key).await
        );
    }
    // Outside the rule's prefix: all three stay.
    assert_eq!(versions_of(&c, "clu", "other").await.0.len(), 3);
    let total: u64 = {
        let mut t = 0;
        for node in 1..4 {
            t += metric(&s, node, "quarry_lifecycle_versions_expired_total").await;
        }
        t
    };
    assert!(total >= 6, "{total} versions expired by the live nodes");
}
