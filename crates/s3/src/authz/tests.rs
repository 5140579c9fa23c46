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
            "/bkt?tagging",
            &[],
            one("s3:GetBucketTagging", "arn:aws:s3:::bkt"),
        ),
        ("GET", "/bkt?lifecycle", &[], one("s3:Unsupported", "*")),
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
