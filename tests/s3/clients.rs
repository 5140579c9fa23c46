//! S3 behaviour that real clients with their default settings rely on (tests/python/test_s3cmd.py,
//! test_rclone.py and test_awscli.py run the clients themselves):
//! - the ACL calls (`s3cmd info` reads them; `s3cmd setacl --acl-private` writes them): every ACL
//!   is the owner's FULL_CONTROL on a bucket with ACLs off (BucketOwnerEnforced, the default),
//!   where only `private` can be set;
//! - a request signed for another region names the right one in `<Region>` (s3cmd's default
//!   `bucket_location = US` signs for region "US", then retries with the region S3 names).

use std::time::SystemTime;

use quarry_integration::*;

/// A SigV4 header-signed request for `region` (the harness signs for us-east-1 only).
async fn signed_for_region(
    s: &TestServer,
    method: &str,
    path: &str,
    region: &str,
) -> reqwest::Response {
    use aws_sigv4::http_request::{
        sign, PayloadChecksumKind, SignableBody, SignableRequest, SigningSettings,
    };
    use aws_sigv4::sign::v4;

    let url = format!("{}{path}", s.endpoint());
    let creds =
        aws_credential_types::Credentials::new(s.access_key(), s.secret_key(), None, None, "test");
    let identity = creds.into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let req = SignableRequest::new(method, &url, std::iter::empty(), SignableBody::Bytes(b""))
        .expect("signable request");
    let (instructions, _) = sign(req, &params).expect("sign").into_parts();
    let headers: Vec<(String, String)> = instructions
        .headers()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    send_raw(method, &url, &headers, Vec::new()).await
}

#[tokio::test]
async fn wrong_region_names_the_right_one() {
    let s = TestServer::start(4).await;
    s.create_bucket("regions").await;
    for path in ["/", "/regions", "/regions/some-key"] {
        let body = expect_raw_error(
            signed_for_region(&s, "GET", path, "US").await,
            400,
            "AuthorizationHeaderMalformed",
        )
        .await;
        assert_eq!(
            xml_text(&body, "Region").as_deref(),
            Some("us-east-1"),
            "{body}"
        );
        let message = xml_unescape(&xml_text(&body, "Message").unwrap_or_default());
        assert!(message.contains("the region 'US' is wrong"), "{body}");
    }
    // The retry a client makes with the region it was told: accepted.
    let resp = signed_for_region(&s, "GET", "/regions", "us-east-1").await;
    assert_eq!(resp.status(), 200);
    // Other errors carry no <Region>.
    let body = expect_raw_error(
        s.signed("GET", "/no-such-bucket-here", &[], Vec::new())
            .await,
        404,
        "NoSuchBucket",
    )
    .await;
    assert_eq!(xml_text(&body, "Region"), None, "{body}");
}

#[tokio::test]
async fn acls_are_the_owners_full_control() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("acls").await;
    c.put_object()
        .bucket("acls")
        .key("k")
        .body(b"data".to_vec().into())
        .send()
        .await
        .expect("put");

    let bucket_acl = c
        .get_bucket_acl()
        .bucket("acls")
        .send()
        .await
        .expect("bucket acl");
    let object_acl = c
        .get_object_acl()
        .bucket("acls")
        .key("k")
        .send()
        .await
        .expect("object acl");
    for (owner, grants) in [
        (bucket_acl.owner(), bucket_acl.grants()),
        (object_acl.owner(), object_acl.grants()),
    ] {
        let owner_id = owner.and_then(|o| o.id()).expect("owner id");
        assert_eq!(grants.len(), 1, "{grants:?}");
        let grantee = grants[0].grantee().expect("grantee");
        assert_eq!(grantee.id(), Some(owner_id));
        assert_eq!(grantee.r#type(), &aws_sdk_s3::types::Type::CanonicalUser);
        assert_eq!(
            grants[0].permission(),
            Some(&aws_sdk_s3::types::Permission::FullControl)
        );
    }

    // `private` is what everything already is: accepted, by header or as the policy read back.
    c.put_object_acl()
        .bucket("acls")
        .key("k")
        .acl(aws_sdk_s3::types::ObjectCannedAcl::Private)
        .send()
        .await
        .expect("put object acl private");
    c.put_bucket_acl()
        .bucket("acls")
        .acl(aws_sdk_s3::types::BucketCannedAcl::Private)
        .send()
        .await
        .expect("put bucket acl private");
    let policy = s.signed("GET", "/acls/k?acl", &[], Vec::new()).await;
    assert_eq!(policy.status(), 200);
    let policy = policy.bytes().await.expect("acl body").to_vec();
    let resp = s.signed("PUT", "/acls/k?acl", &[], policy.clone()).await;
    assert_eq!(
        resp.status(),
        200,
        "{}",
        resp.text().await.unwrap_or_default()
    );

    // Anything else is refused, not ignored: the bucket has ACLs off (BucketOwnerEnforced, the
    // default), as AWS answers.
    assert_s3_error(
        c.put_object_acl()
            .bucket("acls")
            .key("k")
            .acl(aws_sdk_s3::types::ObjectCannedAcl::PublicRead)
            .send()
            .await,
        400,
        "AccessControlListNotSupported",
    );
    assert_s3_error(
        c.put_bucket_acl()
            .bucket("acls")
            .grant_read("uri=http://acs.amazonaws.com/groups/global/AllUsers")
            .send()
            .await,
        400,
        "AccessControlListNotSupported",
    );
    let public = String::from_utf8(policy)
        .expect("utf-8")
        .replace(
            "</AccessControlList>",
            "<Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"Group\"><URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee><Permission>READ</Permission></Grant></AccessControlList>",
        );
    expect_raw_error(
        s.signed("PUT", "/acls?acl", &[], public.into_bytes()).await,
        400,
        "AccessControlListNotSupported",
    )
    .await;

    // What is not there has no ACL.
    assert_s3_error(
        c.get_object_acl()
            .bucket("acls")
            .key("missing")
            .send()
            .await,
        404,
        "NoSuchKey",
    );
    assert_s3_error(
        c.get_bucket_acl().bucket("no-such-acls").send().await,
        404,
        "NoSuchBucket",
    );
    assert_s3_error(
        c.put_object_acl()
            .bucket("acls")
            .key("missing")
            .acl(aws_sdk_s3::types::ObjectCannedAcl::Private)
            .send()
            .await,
        404,
        "NoSuchKey",
    );
    // The object is untouched by all of this.
    let got = c
        .get_object()
        .bucket("acls")
        .key("k")
        .send()
        .await
        .expect("get");
    let data = got.body.collect().await.expect("body").into_bytes();
    assert_bytes_eq(&data, b"data", "object after ACL calls");
}
