use http::{HeaderMap, HeaderValue, Method};

use super::*;
use crate::router::{parse, Query};

/// The needs of a request as the router parses it.
fn needs_of(method: &str, target: &str, headers: &[(&str, &str)]) -> Vec<(String, String)> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut map = HeaderMap::new();
    map.insert(
        "authorization",
        HeaderValue::from_static("AWS4-HMAC-SHA256 x"),
    );
    for (k, v) in headers {
        map.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    let method = Method::from_bytes(method.as_bytes()).unwrap();
    let query = Query::parse(Some(query)).unwrap();
    let endpoint = parse(&method, path, &query, &map, None).unwrap();
    needs(&endpoint, &map)
        .unwrap()
        .into_iter()
        .map(|n| (n.action.to_owned(), n.resource))
        .collect()
}

fn one(action: &str, resource: &str) -> Vec<(String, String)> {
    vec![(action.to_owned(), resource.to_owned())]
}

#[test]
fn every_endpoint_maps_to_its_action() {
    let bkt = "arn:aws:s3:::bkt";
    let obj = "arn:aws:s3:::bkt/a/b.txt";
    let copy = [("x-amz-copy-source", "src/k%20y")];
    let copy_v = [("x-amz-copy-source", "src/k?versionId=null")];
    for (method, target, headers, want) in [
        (
            "GET",
            "/",
            &[][..],
            one("s3:ListAllMyBuckets", "arn:aws:s3:::*"),
        ),
        ("PUT", "/bkt", &[], one("s3:CreateBucket", bkt)),
        ("HEAD", "/bkt", &[], one("s3:ListBucket", bkt)),
        ("DELETE", "/bkt", &[], one("s3:DeleteBucket", bkt)),
        (
            "GET",
            "/bkt?location",
            &[],
            one("s3:GetBucketLocation", bkt),
        ),
        ("GET", "/bkt", &[], one("s3:ListBucket", bkt)),
        (
            "GET",
            "/bkt?list-type=2&prefix=a",
            &[],
            one("s3:ListBucket", bkt),
        ),
        (
            "GET",
            "/bkt?versions",
            &[],
            one("s3:ListBucketVersions", bkt),
        ),
        (
            "GET",
            "/bkt?versioning",
            &[],
            one("s3:GetBucketVersioning", bkt),
        ),
        (
            "PUT",
            "/bkt?versioning",
            &[],
            one("s3:PutBucketVersioning", bkt),
        ),
        ("GET", "/bkt?cors", &[], one("s3:GetBucketCORS", bkt)),
        ("PUT", "/bkt?cors", &[], one("s3:PutBucketCORS", bkt)),
        ("DELETE", "/bkt?cors", &[], one("s3:PutBucketCORS", bkt)),
        (
            "GET",
            "/bkt?uploads",
            &[],
            one("s3:ListBucketMultipartUploads", bkt),
        ),
        ("GET", "/bkt?acl", &[], one("s3:GetBucketAcl", bkt)),
        ("PUT", "/bkt?acl", &[], one("s3:PutBucketAcl", bkt)),
        ("POST", "/bkt?delete", &[], vec![]),
        ("PUT", "/bkt/a/b.txt", &[], one("s3:PutObject", obj)),
        ("GET", "/bkt/a/b.txt", &[], one("s3:GetObject", obj)),
        (
            "GET",
            "/bkt/a/b.txt?partNumber=1",
            &[],
            one("s3:GetObject", obj),
        ),
        ("HEAD", "/bkt/a/b.txt", &[], one("s3:GetObject", obj)),
        (
            "GET",
            "/bkt/a/b.txt?versionId=null",
            &[],
            one("s3:GetObjectVersion", obj),
        ),
        (
            "HEAD",
            "/bkt/a/b.txt?versionId=null",
            &[],
            one("s3:GetObjectVersion", obj),
        ),
        (
            "GET",
            "/bkt/a/b.txt?attributes",
            &[],
            one("s3:GetObjectAttributes", obj),
        ),
        (
            "GET",
            "/bkt/a/b.txt?attributes&versionId=null",
            &[],
            one("s3:GetObjectVersionAttributes", obj),
        ),
        ("DELETE", "/bkt/a/b.txt", &[], one("s3:DeleteObject", obj)),
        (
            "DELETE",
            "/bkt/a/b.txt?versionId=null",
            &[],
            one("s3:DeleteObjectVersion", obj),
        ),
        (
            "POST",
            "/bkt/a/b.txt?uploads",
            &[],
            one("s3:PutObject", obj),
        ),
        (
            "PUT",
            "/bkt/a/b.txt?partNumber=1&uploadId=u",
            &[],
            one("s3:PutObject", obj),
        ),
        (
            "POST",
            "/bkt/a/b.txt?uploadId=u",
            &[],
            one("s3:PutObject", obj),
        ),
        (
            "DELETE",
            "/bkt/a/b.txt?uploadId=u",
            &[],
            one("s3:AbortMultipartUpload", obj),
        ),
        (
            "GET",
            "/bkt/a/b.txt?uploadId=u",
            &[],
            one("s3:ListMultipartUploadParts", obj),
        ),
        ("GET", "/bkt/a/b.txt?acl", &[], one("s3:GetObjectAcl", obj)),
        ("PUT", "/bkt/a/b.txt?acl", &[], one("s3:PutObjectAcl", obj)),
        (
            "GET",
            "/bkt/a/b.txt?acl&versionId=null",
            &[],
            one("s3:GetObjectVersionAcl", obj),
        ),
        (
            "DELETE",
            "/bkt?ownershipControls",
            &[],
            one("s3:PutBucketOwnershipControls", bkt),
        ),
        (
            "GET",
            "/bkt?publicAccessBlock",
            &[],
            one("s3:GetBucketPublicAccessBlock", bkt),
        ),
        (
            "GET",
            "/bkt?tagging",
            &[],
            one("s3:GetBucketTagging", "arn:aws:s3:::bkt"),
        ),
        (
            "GET",
            "/bkt?lifecycle",
            &[],
            one("s3:GetLifecycleConfiguration", "arn:aws:s3:::bkt"),
        ),
        (
            "DELETE",
            "/bkt?lifecycle",
            &[],
            one("s3:PutLifecycleConfiguration", "arn:aws:s3:::bkt"),
        ),
        ("GET", "/bkt?website", &[], one("s3:Unsupported", "*")),
        (
            "PUT",
            "/bkt/a/b.txt",
            &copy,
            vec![
                ("s3:PutObject".into(), obj.into()),
                ("s3:GetObject".into(), "arn:aws:s3:::src/k y".into()),
            ],
        ),
        (
            "PUT",
            "/bkt/a/b.txt?partNumber=2&uploadId=u",
            &copy_v,
            vec![
                ("s3:PutObject".into(), obj.into()),
                ("s3:GetObjectVersion".into(), "arn:aws:s3:::src/k".into()),
            ],
        ),
    ] {
        let got = needs_of(method, target, headers);
        assert_eq!(got, want, "{method} {target}");
        for (action, _) in got {
            assert!(
                action == "s3:Unsupported" || S3_ACTIONS.contains(&action.as_str()),
                "{action}"
            );
        }
    }
}

#[test]
fn the_action_list_is_sorted_and_covers_deletes() {
    let mut sorted = S3_ACTIONS.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, S3_ACTIONS);
    for a in [DELETE_OBJECTS_KEY_ACTIONS.0, DELETE_OBJECTS_KEY_ACTIONS.1] {
        assert!(S3_ACTIONS.contains(&a));
    }
}

#[test]
fn a_bad_copy_source_is_the_requests_error() {
    let mut map = HeaderMap::new();
    map.insert("x-amz-copy-source", HeaderValue::from_static("nokey"));
    let endpoint = Endpoint::CopyObject {
        bucket: "b".into(),
        key: "k".into(),
    };
    assert_eq!(
        needs(&endpoint, &map).unwrap_err().code,
        S3ErrorCode::InvalidArgument
    );
}

#[test]
fn bucket_policy_and_encryption_endpoints_map_to_their_actions() {
    let bkt = "arn:aws:s3:::bkt";
    for (method, target, action) in [
        ("GET", "/bkt?policy", "s3:GetBucketPolicy"),
        ("PUT", "/bkt?policy", "s3:PutBucketPolicy"),
        ("DELETE", "/bkt?policy", "s3:DeleteBucketPolicy"),
        ("GET", "/bkt?policyStatus", "s3:GetBucketPolicyStatus"),
        ("GET", "/bkt?encryption", "s3:GetEncryptionConfiguration"),
        ("PUT", "/bkt?encryption", "s3:PutEncryptionConfiguration"),
        ("DELETE", "/bkt?encryption", "s3:PutEncryptionConfiguration"),
    ] {
        assert_eq!(
            needs_of(method, target, &[]),
            one(action, bkt),
            "{method} {target}"
        );
        assert!(S3_ACTIONS.contains(&action));
    }
}

fn user(name: &str, policies: &[&str]) -> Identity {
    Identity {
        user: name.to_owned(),
        user_id: format!("AID{name}"),
        arn: format!("arn:aws:iam::{ACCOUNT_ID}:user/{name}"),
        access_key: format!("AK{name}"),
        policies: policies
            .iter()
            .map(|p| Arc::new(Policy::parse_identity(p).unwrap()))
            .collect(),
        narrowing: Vec::new(),
        service_account: false,
    }
}

fn need(action: &'static str, resource: &str) -> Need {
    Need {
        action,
        resource: resource.to_owned(),
    }
}

#[test]
fn bucket_policies_join_the_decision() {
    let ctx = Context::default();
    let bp = Arc::new(
        Policy::parse_resource(
            r#"{"Version":"2012-10-17","Statement":[
            {"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::pub/*"},
            {"Effect":"Deny","Principal":{"AWS":"arn:aws:iam::000000000000:user/eve"},"Action":"s3:*","Resource":"arn:aws:s3:::pub/*"}]}"#,
        )
        .unwrap(),
    );
    let policies: BucketPolicies = vec![("pub".into(), Some(bp)), ("priv".into(), None)];
    let get_pub = [need("s3:GetObject", "arn:aws:s3:::pub/k")];
    let get_priv = [need("s3:GetObject", "arn:aws:s3:::priv/k")];
    // Anonymous: what the policy grants "*", nothing else, and nothing without the policy.
    assert!(authorize(&Caller::Anonymous, &get_pub, &ctx, &policies).is_ok());
    let e = authorize(&Caller::Anonymous, &get_priv, &ctx, &policies).unwrap_err();
    assert_eq!(e.code, S3ErrorCode::AccessDenied);
    assert!(
        !e.message.contains("priv"),
        "tells an anonymous caller nothing"
    );
    assert!(authorize(&Caller::Anonymous, &get_pub, &ctx, &vec![]).is_err());
    let put_pub = [need("s3:PutObject", "arn:aws:s3:::pub/k")];
    assert!(authorize(&Caller::Anonymous, &put_pub, &ctx, &policies).is_err());
    // A user allowed everything by their own policy is still refused by the bucket's Deny.
    let all = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#;
    let eve = Caller::User(Arc::new(user("eve", &[all])));
    let ann = Caller::User(Arc::new(user("ann", &[all])));
    assert!(authorize(&eve, &get_pub, &ctx, &policies).is_err());
    assert!(authorize(&eve, &get_priv, &ctx, &policies).is_ok());
    assert!(authorize(&ann, &get_pub, &ctx, &policies).is_ok());
    // A copy is decided per bucket: the source's policy for the source.
    let copy = [
        need("s3:PutObject", "arn:aws:s3:::priv/k"),
        need("s3:GetObject", "arn:aws:s3:::pub/k"),
    ];
    assert!(authorize(&eve, &copy, &ctx, &policies).is_err());
    assert!(authorize(&ann, &copy, &ctx, &policies).is_ok());
    assert_eq!(buckets_of(&copy), vec!["priv".to_owned(), "pub".to_owned()]);
    // The root user is never refused.
    assert!(authorize(&Caller::Root, &get_pub, &ctx, &policies).is_ok());
}
