use super::*;
use http::HeaderValue;

fn route(method: &str, uri: &str, headers: &[(&str, &str)]) -> Result<Endpoint, S3Error> {
    route_or_why(method, uri, headers).map_err(|e| e.error)
}

fn route_or_why(method: &str, uri: &str, headers: &[(&str, &str)]) -> Result<Endpoint, RouteError> {
    let (path, query) = uri
        .split_once('?')
        .map_or((uri, None), |(p, q)| (p, Some(q)));
    let query = Query::parse(query)?;
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    parse(
        &Method::from_bytes(method.as_bytes()).unwrap(),
        path,
        &query,
        &map,
        None,
    )
}

/// Method, URI, headers, and what the request should route to.
type Case<'a, T> = (&'a str, &'a str, &'a [(&'a str, &'a str)], T);

fn b(name: &str) -> String {
    name.to_owned()
}

/// A listing's parameters when the query gives none.
fn lb() -> ListBucketsParams {
    ListBucketsParams::default()
}

fn lp() -> ListParams {
    ListParams {
        prefix: b(""),
        delimiter: None,
        max_keys: crate::list::MAX_KEYS,
        encoding_url: false,
        marker: None,
        continuation_token: None,
        start_after: None,
        fetch_owner: false,
    }
}

fn whole() -> ObjectRead {
    ObjectRead::Whole {
        overrides: Vec::new(),
    }
}

fn uploads() -> ListUploadsParams {
    ListUploadsParams {
        prefix: b(""),
        delimiter: None,
        key_marker: None,
        upload_id_marker: None,
        max_uploads: 1000,
        url_encoded: false,
    }
}

#[test]
fn routing_table() {
    use Endpoint::*;
    let auth = [("authorization", "AWS4-HMAC-SHA256 ...")];
    let cases: Vec<Case<Endpoint>> = vec![
        ("GET", "/", &auth, ListBuckets { params: lb() }),
        (
            "GET",
            "/?x-id=ListBuckets",
            &auth,
            ListBuckets { params: lb() },
        ),
        (
            "GET",
            "/?max-buckets=2&prefix=a",
            &auth,
            ListBuckets {
                params: ListBucketsParams {
                    prefix: Some(b("a")),
                    max_buckets: Some(2),
                    ..lb()
                },
            },
        ),
        ("PUT", "/bkt", &auth, CreateBucket { bucket: b("bkt") }),
        ("PUT", "/bkt/", &auth, CreateBucket { bucket: b("bkt") }),
        ("HEAD", "/bkt", &auth, HeadBucket { bucket: b("bkt") }),
        ("DELETE", "/bkt", &auth, DeleteBucket { bucket: b("bkt") }),
        (
            "GET",
            "/bkt?location",
            &auth,
            GetBucketLocation { bucket: b("bkt") },
        ),
        (
            "GET",
            "/bkt?location=",
            &auth,
            GetBucketLocation { bucket: b("bkt") },
        ),
        (
            "GET",
            "/bkt",
            &auth,
            ListObjects {
                bucket: b("bkt"),
                params: lp(),
            },
        ),
        (
            "GET",
            "/bkt?prefix=a&marker=b&max-keys=3",
            &auth,
            ListObjects {
                bucket: b("bkt"),
                params: ListParams {
                    prefix: b("a"),
                    marker: Some(b("b")),
                    max_keys: 3,
                    ..lp()
                },
            },
        ),
        (
            "GET",
            "/bkt?list-type=2&prefix=",
            &auth,
            ListObjectsV2 {
                bucket: b("bkt"),
                params: lp(),
            },
        ),
        (
            "GET",
            "/bkt?list-type=2&fetch-owner&start-after=x",
            &auth,
            ListObjectsV2 {
                bucket: b("bkt"),
                params: ListParams {
                    start_after: Some(b("x")),
                    ..lp()
                },
            },
        ),
        (
            "PUT",
            "/bkt/a/b.txt",
            &auth,
            PutObject {
                bucket: b("bkt"),
                key: b("a/b.txt"),
            },
        ),
        (
            "PUT",
            "/bkt/a/b.txt?x-id=PutObject",
            &auth,
            PutObject {
                bucket: b("bkt"),
                key: b("a/b.txt"),
            },
        ),
        (
            "GET",
            "/bkt/a%20b%2Bc+d",
            &auth,
            GetObject {
                bucket: b("bkt"),
                key: b("a b+c+d"),
                read: whole(),
                version: None,
            },
        ),
        (
            "GET",
            "/bkt/k?response-content-type=x&versionId=null",
            &auth,
            GetObject {
                bucket: b("bkt"),
                key: b("k"),
                read: ObjectRead::Whole {
                    overrides: vec![(http::header::CONTENT_TYPE, HeaderValue::from_static("x"))],
                },
                version: Some(VersionId::Null),
            },
        ),
        (
            "HEAD",
            "/bkt/k",
            &auth,
            HeadObject {
                bucket: b("bkt"),
                key: b("k"),
                read: whole(),
                version: None,
            },
        ),
        (
            "DELETE",
            "/bkt/k",
            &auth,
            DeleteObject {
                bucket: b("bkt"),
                key: b("k"),
                version: None,
            },
        ),
        (
            "POST",
            "/bkt?delete",
            &auth,
            DeleteObjects { bucket: b("bkt") },
        ),
        (
            "POST",
            "/bkt/?delete=",
            &auth,
            DeleteObjects { bucket: b("bkt") },
        ),
        (
            "GET",
            "/bkt/dir/",
            &auth,
            GetObject {
                bucket: b("bkt"),
                key: b("dir/"),
                read: whole(),
                version: None,
            },
        ),
        // Health: anonymous only; with credentials it is an ordinary object.
        ("GET", "/health/live", &[], HealthLive),
        ("HEAD", "/health/ready", &[], HealthReady),
        ("GET", "/metrics", &[], Metrics),
        (
            "GET",
            "/metrics",
            &auth,
            ListObjects {
                bucket: b("metrics"),
                params: lp(),
            },
        ),
        (
            "GET",
            "/health/live",
            &auth,
            GetObject {
                bucket: b("health"),
                key: b("live"),
                read: whole(),
                version: None,
            },
        ),
        (
            "GET",
            "/health/live?X-Amz-Signature=abc&X-Amz-Credential=x",
            &[],
            GetObject {
                bucket: b("health"),
                key: b("live"),
                read: whole(),
                version: None,
            },
        ),
        (
            "PUT",
            "/health/live",
            &[],
            PutObject {
                bucket: b("health"),
                key: b("live"),
            },
        ),
    ];
    for (method, uri, headers, want) in cases {
        assert_eq!(route(method, uri, headers).unwrap(), want, "{method} {uri}");
    }
}

#[test]
fn multipart_operations_are_routed() {
    use Endpoint::*;
    let auth = [("authorization", "x")];
    let copy = [("authorization", "x"), ("x-amz-copy-source", "/a/b")];
    let (bk, k) = (|| b("bkt"), || b("k"));
    let cases: Vec<Case<Endpoint>> = vec![
        (
            "GET",
            "/bkt?uploads",
            &auth,
            ListMultipartUploads {
                bucket: bk(),
                params: uploads(),
            },
        ),
        (
            "GET",
            "/bkt?uploads&prefix=a&key-marker=x&upload-id-marker=y&max-uploads=3",
            &auth,
            ListMultipartUploads {
                bucket: bk(),
                params: ListUploadsParams {
                    prefix: b("a"),
                    key_marker: Some(b("x")),
                    upload_id_marker: Some(b("y")),
                    max_uploads: 3,
                    ..uploads()
                },
            },
        ),
        (
            "POST",
            "/bkt/k?uploads",
            &auth,
            CreateMultipartUpload {
                bucket: bk(),
                key: k(),
            },
        ),
        (
            "PUT",
            "/bkt/k?partNumber=1&uploadId=u",
            &auth,
            UploadPart {
                bucket: bk(),
                key: k(),
                upload_id: b("u"),
                part_number: 1,
            },
        ),
        (
            "PUT",
            "/bkt/k?partNumber=1&uploadId=u",
            &copy,
            UploadPartCopy {
                bucket: bk(),
                key: k(),
                upload_id: b("u"),
                part_number: 1,
            },
        ),
        (
            "POST",
            "/bkt/k?uploadId=u",
            &auth,
            CompleteMultipartUpload {
                bucket: bk(),
                key: k(),
                upload_id: b("u"),
            },
        ),
        (
            "DELETE",
            "/bkt/k?uploadId=u",
            &auth,
            AbortMultipartUpload {
                bucket: bk(),
                key: k(),
                upload_id: b("u"),
            },
        ),
        (
            "GET",
            "/bkt/k?uploadId=u&max-parts=2&part-number-marker=1",
            &auth,
            ListParts {
                bucket: bk(),
                key: k(),
                upload_id: b("u"),
                params: ListPartsParams {
                    max_parts: 2,
                    part_number_marker: 1,
                },
            },
        ),
        (
            "GET",
            "/bkt/k?partNumber=2",
            &auth,
            GetObject {
                bucket: bk(),
                key: k(),
                read: ObjectRead::Part { number: 2 },
                version: None,
            },
        ),
        (
            "HEAD",
            "/bkt/k?partNumber=2",
            &auth,
            HeadObject {
                bucket: bk(),
                key: k(),
                read: ObjectRead::Part { number: 2 },
                version: None,
            },
        ),
    ];
    for (method, uri, headers, want) in cases {
        let got = route(method, uri, headers).unwrap();
        assert_eq!(got.bucket(), Some("bkt"));
        assert_eq!(got, want, "{method} {uri}");
    }
}

#[test]
fn unsupported_operations_are_named() {
    let auth = [("authorization", "x")];
    let cases: Vec<Case<&str>> = vec![
        ("DELETE", "/bkt?acl", &auth, "DeleteBucketAcl"),
        ("PUT", "/bkt?website", &auth, "PutBucketWebsite"),
        ("DELETE", "/bkt?website", &auth, "DeleteBucketWebsite"),
        (
            "DELETE",
            "/bkt?object-lock",
            &auth,
            "DeleteBucketObjectLock",
        ),
        (
            "GET",
            "/bkt?list-type=2&analytics",
            &auth,
            "GetBucketAnalytics",
        ),
        ("GET", "/bkt?somethingnew", &auth, "GetBucketSomethingnew"),
        ("DELETE", "/bkt/k?retention", &auth, "DeleteObjectRetention"),
        ("POST", "/bkt/k?restore", &auth, "RestoreObject"),
    ];
    for (method, uri, headers, want) in cases {
        let got = route(method, uri, headers).unwrap();
        assert_eq!(
            got,
            Endpoint::Unsupported {
                operation: want.to_owned()
            },
            "{method} {uri}"
        );
        assert!(got.needs_auth());
    }
}

#[test]
fn tagging_endpoints() {
    let auth = [("authorization", "x")];
    let v = "5f0c7b8e-0000-4000-8000-000000000000";
    let id: VersionId = v.parse().unwrap();
    let put_uri = format!("/bkt/k?tagging&versionId={v}");
    let cases: Vec<Case<Endpoint>> = vec![
        (
            "GET",
            "/bkt?tagging",
            &auth,
            Endpoint::GetBucketTagging { bucket: b("bkt") },
        ),
        (
            "PUT",
            "/bkt?tagging",
            &auth,
            Endpoint::PutBucketTagging { bucket: b("bkt") },
        ),
        (
            "DELETE",
            "/bkt?tagging",
            &auth,
            Endpoint::DeleteBucketTagging { bucket: b("bkt") },
        ),
        (
            "GET",
            "/bkt/k?tagging",
            &auth,
            Endpoint::GetObjectTagging {
                bucket: b("bkt"),
                key: b("k"),
                version: None,
            },
        ),
        (
            "PUT",
            &put_uri,
            &auth,
            Endpoint::PutObjectTagging {
                bucket: b("bkt"),
                key: b("k"),
                version: Some(id),
            },
        ),
        (
            "DELETE",
            "/bkt/k?tagging&versionId=null",
            &auth,
            Endpoint::DeleteObjectTagging {
                bucket: b("bkt"),
                key: b("k"),
                version: Some(VersionId::Null),
            },
        ),
    ];
    for (method, uri, headers, want) in cases {
        assert_eq!(route(method, uri, headers).unwrap(), want, "{method} {uri}");
    }
    let err = route_or_why("GET", "/bkt/k?tagging&versionId=bogus", &auth).unwrap_err();
    assert_eq!(err.operation, Some("GetObjectTagging"));
}

#[test]
fn cors_preflight_and_browser_uploads() {
    let auth = [("authorization", "x")];
    let form = [("content-type", "multipart/form-data; boundary=xyz")];
    let cases: Vec<Case<Endpoint>> = vec![
        (
            "GET",
            "/bkt?cors",
            &auth,
            Endpoint::GetBucketCors { bucket: b("bkt") },
        ),
        (
            "PUT",
            "/bkt?cors",
            &auth,
            Endpoint::PutBucketCors { bucket: b("bkt") },
        ),
        (
            "DELETE",
            "/bkt?cors",
            &auth,
            Endpoint::DeleteBucketCors { bucket: b("bkt") },
        ),
        (
            "OPTIONS",
            "/bkt/a/b",
            &[],
            Endpoint::CorsPreflight {
                bucket: b("bkt"),
                key: b("a/b"),
            },
        ),
        (
            "OPTIONS",
            "/bkt",
            &[],
            Endpoint::CorsPreflight {
                bucket: b("bkt"),
                key: b(""),
            },
        ),
        (
            "POST",
            "/bkt",
            &form,
            Endpoint::PostObject { bucket: b("bkt") },
        ),
        (
            "POST",
            "/bkt/",
            &form,
            Endpoint::PostObject { bucket: b("bkt") },
        ),
    ];
    for (method, uri, headers, want) in cases {
        let got = route(method, uri, headers).unwrap();
        assert_eq!(got, want, "{method} {uri}");
        let anonymous = matches!(
            got,
            Endpoint::CorsPreflight { .. } | Endpoint::PostObject { .. }
        );
        assert_eq!(got.needs_auth(), !anonymous);
        assert_eq!(got.bucket(), Some("bkt"));
    }
    // A POST to a bucket that is not a form is refused as S3 does; `?delete` stays itself.
    let err = route("POST", "/bkt", &auth).unwrap_err();
    assert_eq!(err.code, S3ErrorCode::PreconditionFailed);
    assert_eq!(
        route("POST", "/bkt?delete", &form).unwrap(),
        Endpoint::DeleteObjects { bucket: b("bkt") }
    );
    // A form POST to an object key is not a browser upload.
    assert!(route("POST", "/bkt/k", &form).is_err());
    assert_eq!(
        route("OPTIONS", "/", &[]).unwrap_err().code,
        S3ErrorCode::MethodNotAllowed
    );
}

#[test]
fn wrong_methods_and_bad_uris() {
    let auth = [("authorization", "x")];
    for (method, uri, code) in [
        ("PUT", "/", S3ErrorCode::MethodNotAllowed),
        ("DELETE", "/", S3ErrorCode::MethodNotAllowed),
        ("PATCH", "/bkt", S3ErrorCode::MethodNotAllowed),
        ("POST", "/bkt/k", S3ErrorCode::MethodNotAllowed),
        ("PATCH", "/bkt/k", S3ErrorCode::MethodNotAllowed),
        ("GET", "/bkt/%FF", S3ErrorCode::InvalidURI),
        ("GET", "/bkt?prefix=%FF", S3ErrorCode::InvalidURI),
        ("GET", "//key", S3ErrorCode::InvalidBucketName),
        ("GET", "/bkt?list-type=3", S3ErrorCode::InvalidArgument),
        // Parameters are parsed with the route: a bad one is the request's error.
        ("GET", "/bkt?max-keys=x", S3ErrorCode::InvalidArgument),
        (
            "GET",
            "/bkt?uploads&max-uploads=-1",
            S3ErrorCode::InvalidArgument,
        ),
        ("GET", "/?max-buckets=0", S3ErrorCode::InvalidArgument),
        (
            "PUT",
            "/bkt/k?partNumber=0&uploadId=u",
            S3ErrorCode::InvalidArgument,
        ),
        ("PUT", "/bkt/k?partNumber=1", S3ErrorCode::InvalidArgument),
        ("GET", "/bkt/k?uploadId=", S3ErrorCode::InvalidArgument),
        (
            "GET",
            "/bkt/k?uploadId=u&max-parts=x",
            S3ErrorCode::InvalidArgument,
        ),
        ("GET", "/bkt/k?partNumber=x", S3ErrorCode::InvalidArgument),
        (
            "HEAD",
            "/bkt/k?partNumber=10001",
            S3ErrorCode::InvalidArgument,
        ),
        (
            "GET",
            "/bkt/k?response-expires=%0A",
            S3ErrorCode::InvalidArgument,
        ),
    ] {
        let err = route(method, uri, &auth).unwrap_err();
        assert_eq!(err.code, code, "{method} {uri}");
    }
}

#[test]
fn a_bad_parameter_names_its_operation_and_bucket() {
    let auth = [("authorization", "x")];
    let copy = [("authorization", "x"), ("x-amz-copy-source", "/a/b")];
    for (method, uri, headers, op) in [
        (
            "PUT",
            "/bkt/k?partNumber=0&uploadId=u",
            &auth[..],
            "UploadPart",
        ),
        (
            "PUT",
            "/bkt/k?partNumber=0&uploadId=u",
            &copy[..],
            "UploadPartCopy",
        ),
        ("GET", "/bkt/k?partNumber=x", &auth[..], "GetObject"),
        ("GET", "/bkt?max-keys=x", &auth[..], "ListObjects"),
        (
            "DELETE",
            "/bkt/k?uploadId=",
            &auth[..],
            "AbortMultipartUpload",
        ),
    ] {
        let err = route_or_why(method, uri, headers).unwrap_err();
        assert_eq!(err.operation, Some(op), "{method} {uri}");
        assert_eq!(err.bucket.as_deref(), Some("bkt"), "{method} {uri}");
        assert_eq!(err.error.code, S3ErrorCode::InvalidArgument);
    }
    // Errors that leave the operation unknown name none.
    for (method, uri) in [("PATCH", "/bkt/k"), ("GET", "/bkt?list-type=3")] {
        let err = route_or_why(method, uri, &auth).unwrap_err();
        assert_eq!((err.operation, err.bucket), (None, None), "{method} {uri}");
    }
}

#[test]
fn virtual_host_style_takes_the_whole_path_as_key() {
    let q = Query::default();
    let h = HeaderMap::new();
    assert_eq!(
        parse(&Method::GET, "/a/b", &q, &h, Some("bkt")).unwrap(),
        Endpoint::GetObject {
            bucket: b("bkt"),
            key: b("a/b"),
            read: whole(),
            version: None,
        }
    );
    assert_eq!(
        parse(&Method::GET, "/", &q, &h, Some("bkt")).unwrap(),
        Endpoint::ListObjects {
            bucket: b("bkt"),
            params: lp()
        }
    );
}

#[test]
fn query_decoding() {
    let q = Query::parse(Some("prefix=a+b%2Fc&delimiter=%2F&flag&prefix=second")).unwrap();
    assert_eq!(q.get("prefix"), Some("a b/c"));
    assert_eq!(q.get("delimiter"), Some("/"));
    assert_eq!(q.get("flag"), Some(""));
    assert_eq!(q.get("missing"), None);
}

#[test]
fn acl_operations_are_routed() {
    let auth = [("authorization", "x")];
    let (bk, k) = (|| b("bkt"), || b("k"));
    let cases: Vec<Case<Endpoint>> = vec![
        (
            "GET",
            "/bkt?acl",
            &auth,
            Endpoint::GetBucketAcl { bucket: bk() },
        ),
        (
            "PUT",
            "/bkt?acl",
            &auth,
            Endpoint::PutBucketAcl { bucket: bk() },
        ),
        (
            "GET",
            "/bkt/k?acl",
            &auth,
            Endpoint::GetObjectAcl {
                bucket: bk(),
                key: k(),
                version: None,
            },
        ),
        (
            "PUT",
            "/bkt/k?acl=&versionId=null",
            &auth,
            Endpoint::PutObjectAcl {
                bucket: bk(),
                key: k(),
                version: Some(VersionId::Null),
            },
        ),
        (
            "PUT",
            "/bkt?ownershipControls",
            &auth,
            Endpoint::PutBucketOwnershipControls { bucket: bk() },
        ),
        (
            "DELETE",
            "/bkt?publicAccessBlock",
            &auth,
            Endpoint::DeletePublicAccessBlock { bucket: bk() },
        ),
    ];
    for (method, uri, headers, want) in cases {
        let got = route(method, uri, headers).unwrap();
        assert_eq!(got.name(), want.name());
        assert_eq!(got, want, "{method} {uri}");
    }
}

#[test]
fn copy_object_is_a_put_with_copy_source() {
    let copy = [("authorization", "x"), ("x-amz-copy-source", "/a/b")];
    assert_eq!(
        route("PUT", "/bkt/k%20x?x-id=CopyObject", &copy).unwrap(),
        Endpoint::CopyObject {
            bucket: b("bkt"),
            key: b("k x"),
        }
    );
}

#[test]
fn versioning_routes() {
    let auth = [("authorization", "AWS4-HMAC-SHA256 x")];
    let id = "0b8c3d9e-1f2a-4b3c-8d4e-5f6a7b8c9d0e";
    let v = Some(VersionId::Id(id.parse().unwrap()));
    assert_eq!(
        route("PUT", "/bkt?versioning", &auth).unwrap(),
        Endpoint::PutBucketVersioning {
            bucket: "bkt".into()
        }
    );
    assert_eq!(
        route("GET", "/bkt?versioning", &auth).unwrap(),
        Endpoint::GetBucketVersioning {
            bucket: "bkt".into()
        }
    );
    assert!(matches!(
        route("GET", &format!("/bkt?versions&key-marker=k&version-id-marker={id}"), &auth).unwrap(),
        Endpoint::ListObjectVersions { params, .. } if params.key_marker.as_deref() == Some("k")
    ));
    assert!(matches!(
        route("GET", &format!("/bkt/k?versionId={id}"), &auth).unwrap(),
        Endpoint::GetObject { version, .. } if version == v
    ));
    assert!(matches!(
        route("HEAD", &format!("/bkt/k?versionId={id}"), &auth).unwrap(),
        Endpoint::HeadObject { version, .. } if version == v
    ));
    assert!(matches!(
        route("DELETE", "/bkt/k?versionId=null", &auth).unwrap(),
        Endpoint::DeleteObject {
            version: Some(VersionId::Null),
            ..
        }
    ));
    // A malformed id, or a version marker without a key marker, is InvalidArgument.
    for uri in [
        "/bkt/k?versionId=abc",
        "/bkt/k?versionId=",
        "/bkt?versions&version-id-marker=null",
        "/bkt?versions&key-marker=k&version-id-marker=zz",
    ] {
        assert_eq!(
            route("GET", uri, &auth).unwrap_err().code,
            S3ErrorCode::InvalidArgument,
            "{uri}"
        );
    }
}
