//! Requests through the whole front end (routing, SigV4, handlers, error rendering), signed by the
//! `aws-sigv4` crate, against an in-memory object layer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use axum::body::Body;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use md5::{Digest, Md5};
use quarry_object::{
    BucketInfo, ByteStream, Error, GetObjectReader, HttpRange, ListOptions, ListResult, ObjectInfo,
    ObjectLayer, PutOptions, Result,
};
use tower::ServiceExt;

use crate::server::{app, ReadinessProbe, ReadinessReport, S3Config};
use crate::signature::Credentials;

const AK: &str = "AKTEST";
const SK: &str = "secret/+key";

/// One bucket's objects and their bytes.
type Objects = BTreeMap<String, (ObjectInfo, Bytes)>;

/// Buckets of objects in memory: just enough semantics to exercise the front end.
#[derive(Default)]
struct MemLayer {
    buckets: Mutex<BTreeMap<String, Objects>>,
    /// Bucket configuration documents by (bucket, name).
    configs: Mutex<BTreeMap<(String, String), Bytes>>,
}

impl MemLayer {
    fn with_bucket(name: &str) -> Arc<MemLayer> {
        let layer = MemLayer::default();
        layer
            .buckets
            .lock()
            .unwrap()
            .insert(name.to_owned(), BTreeMap::new());
        Arc::new(layer)
    }

    fn object(&self, bucket: &str, key: &str) -> Result<(ObjectInfo, Bytes)> {
        let buckets = self.buckets.lock().unwrap();
        let objects = buckets.get(bucket).ok_or(Error::BucketNotFound)?;
        objects.get(key).cloned().ok_or(Error::ObjectNotFound)
    }
}

#[async_trait]
impl ObjectLayer for MemLayer {
    async fn get_bucket_config(&self, bucket: &str, name: &str) -> Result<Option<Bytes>> {
        self.bucket_info(bucket).await?;
        let configs = self.configs.lock().unwrap();
        Ok(configs.get(&(bucket.to_owned(), name.to_owned())).cloned())
    }

    async fn put_bucket_config(&self, bucket: &str, name: &str, data: Bytes) -> Result<()> {
        self.bucket_info(bucket).await?;
        let mut configs = self.configs.lock().unwrap();
        configs.insert((bucket.to_owned(), name.to_owned()), data);
        Ok(())
    }

    async fn delete_bucket_config(&self, bucket: &str, name: &str) -> Result<()> {
        self.bucket_info(bucket).await?;
        let mut configs = self.configs.lock().unwrap();
        configs.remove(&(bucket.to_owned(), name.to_owned()));
        Ok(())
    }

    async fn make_bucket(&self, bucket: &str) -> Result<()> {
        if bucket.len() < 3 {
            return Err(Error::InvalidBucketName(bucket.into()));
        }
        let mut buckets = self.buckets.lock().unwrap();
        if buckets.contains_key(bucket) {
            return Err(Error::BucketExists);
        }
        buckets.insert(bucket.to_owned(), BTreeMap::new());
        Ok(())
    }

    async fn bucket_info(&self, bucket: &str) -> Result<BucketInfo> {
        let buckets = self.buckets.lock().unwrap();
        buckets.get(bucket).ok_or(Error::BucketNotFound)?;
        Ok(BucketInfo {
            name: bucket.to_owned(),
            created_ns: 0,
        })
    }

    async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let buckets = self.buckets.lock().unwrap();
        Ok(buckets
            .keys()
            .map(|name| BucketInfo {
                name: name.clone(),
                created_ns: 0,
            })
            .collect())
    }

    async fn delete_bucket(&self, bucket: &str) -> Result<()> {
        let mut buckets = self.buckets.lock().unwrap();
        match buckets.get(bucket) {
            None => Err(Error::BucketNotFound),
            Some(objects) if !objects.is_empty() => Err(Error::BucketNotEmpty),
            Some(_) => {
                buckets.remove(bucket);
                Ok(())
            }
        }
    }

    async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: ByteStream,
        opts: PutOptions,
    ) -> Result<ObjectInfo> {
        self.bucket_info(bucket).await?;
        let chunks: Vec<Bytes> = body.try_collect().await.map_err(Error::Body)?;
        let data = Bytes::from(chunks.concat());
        let digest: [u8; 16] = Md5::digest(&data).into();
        if opts.content_md5.is_some_and(|want| want != digest) {
            return Err(Error::BadDigest);
        }
        let mut checksums = opts.checksums;
        if let Some(late) = &opts.late_checksums {
            checksums.extend((late.0)());
        }
        let info = ObjectInfo {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            size: data.len() as u64,
            mod_time_ns: 1_795_947_072_000_000_000,
            etag: hex::encode(digest),
            headers: opts.headers,
            user_meta: opts.user_meta,
            checksums,
            parts: 1,
            ..Default::default()
        };
        let mut buckets = self.buckets.lock().unwrap();
        let objects = buckets.get_mut(bucket).ok_or(Error::BucketNotFound)?;
        objects.insert(key.to_owned(), (info.clone(), data));
        Ok(info)
    }

    async fn get_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<HttpRange>,
    ) -> Result<GetObjectReader> {
        let (info, data) = self.object(bucket, key)?;
        let (offset, len) = match range {
            Some(r) => r.resolve(info.size)?,
            None => (0, info.size),
        };
        let part = data.slice(offset as usize..(offset + len) as usize);
        // Two chunks, to show the body streams in pieces.
        let mid = part.len() / 2;
        let chunks = vec![Ok(part.slice(..mid)), Ok(part.slice(mid..))];
        Ok(GetObjectReader {
            info,
            range: (offset, len),
            body: futures::stream::iter(chunks).boxed(),
        })
    }

    async fn object_info(&self, bucket: &str, key: &str) -> Result<ObjectInfo> {
        Ok(self.object(bucket, key)?.0)
    }

    async fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        let mut buckets = self.buckets.lock().unwrap();
        buckets
            .get_mut(bucket)
            .ok_or(Error::BucketNotFound)?
            .remove(key);
        Ok(())
    }

    async fn list_objects(&self, bucket: &str, opts: ListOptions) -> Result<ListResult> {
        let buckets = self.buckets.lock().unwrap();
        let objects = buckets.get(bucket).ok_or(Error::BucketNotFound)?;
        let mut result = ListResult::default();
        for (key, (info, _)) in objects.range(opts.prefix.clone()..) {
            if !key.starts_with(&opts.prefix) {
                break;
            }
            let entry = match &opts.delimiter {
                Some(d) => match key[opts.prefix.len()..].find(d.as_str()) {
                    Some(i) => Err(key[..opts.prefix.len() + i + d.len()].to_owned()),
                    None => Ok(info),
                },
                None => Ok(info),
            };
            let name = match &entry {
                Ok(info) => info.key.clone(),
                Err(prefix) => prefix.clone(),
            };
            if opts.marker.as_ref().is_some_and(|m| name <= *m)
                || result.common_prefixes.last() == Some(&name)
            {
                continue;
            }
            if result.objects.len() + result.common_prefixes.len() == opts.max_keys {
                result.is_truncated = true;
                break;
            }
            result.next_marker = Some(name);
            match entry {
                Ok(info) => result.objects.push(info.clone()),
                Err(prefix) => result.common_prefixes.push(prefix),
            }
        }
        if !result.is_truncated {
            result.next_marker = None;
        }
        Ok(result)
    }
}

struct Probe(bool);

#[async_trait]
impl ReadinessProbe for Probe {
    async fn check(&self) -> ReadinessReport {
        ReadinessReport {
            ready: self.0,
            detail: format!("ready={}", self.0),
        }
    }
}

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The `<Code>` of an error document.
    fn code(&self) -> &str {
        self.body
            .split_once("<Code>")
            .and_then(|(_, rest)| rest.split_once("</Code>"))
            .map_or("", |(c, _)| c)
    }
}

struct Harness {
    router: axum::Router,
}

impl Harness {
    fn new(layer: Arc<MemLayer>, ready: bool) -> Harness {
        let cfg = S3Config {
            region: "us-east-1".into(),
            credentials: vec![Credentials::new(AK, SK)],
            domains: vec!["s3.quarry.test".into()],
            metrics: Default::default(),
            sse: Default::default(),
            lifecycle: Default::default(),
            default_object_ownership: Default::default(),
            client_rdma: Default::default(),
        };
        Harness {
            router: app(layer, Arc::new(Probe(ready)), cfg),
        }
    }

    async fn send(&self, req: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(req).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// Sends an unsigned request.
    async fn anonymous(&self, method: &str, uri: &str) -> Reply {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "localhost")
            .body(Body::empty())
            .unwrap();
        self.send(req).await
    }

    /// Sends a request signed with SigV4 (body hash signed, as the SDKs do over plain HTTP).
    async fn signed(
        &self,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        self.send(signed_request(
            method,
            uri,
            headers,
            body,
            SignableBody::Bytes(body),
        ))
        .await
    }
}

fn signed_request(
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    signable: SignableBody<'_>,
) -> Request<Body> {
    signed_request_as((AK, SK), method, uri, headers, body, signable)
}

/// A request to `localhost` signed with SigV4 by `aws-sigv4` as the key pair `(ak, sk)`; a `PUT`
/// gets its `Content-Length`.
pub(crate) fn signed_request_as(
    (ak, sk): (&str, &str),
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    signable: SignableBody<'_>,
) -> Request<Body> {
    let identity = aws_credential_types::Credentials::new(ak, sk, None, None, "test").into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let length = body.len().to_string();
    let mut all: Vec<(&str, &str)> = vec![("host", "localhost")];
    if method == "PUT" && !headers.iter().any(|(k, _)| *k == "content-length") {
        all.push(("content-length", &length));
    }
    all.extend_from_slice(headers);
    let url = format!("http://localhost{uri}");
    let signable_req = SignableRequest::new(method, url, all.iter().copied(), signable).unwrap();
    let (instructions, _) = sign(signable_req, &params).unwrap().into_parts();
    let mut builder = Request::builder().method(method).uri(uri);
    for (k, v) in all.iter().copied().chain(instructions.headers()) {
        builder = builder.header(k, v);
    }
    builder.body(Body::from(body.to_vec())).unwrap()
}

#[tokio::test]
async fn health_probes_are_anonymous_and_reflect_readiness() {
    let up = Harness::new(MemLayer::with_bucket("bkt"), true);
    let live = up.anonymous("GET", "/health/live").await;
    assert_eq!(live.status, StatusCode::OK);
    assert_eq!(live.header("server"), "Quarry");
    assert_eq!(live.header("x-amz-request-id").len(), 20);
    assert_eq!(
        up.anonymous("GET", "/health/ready").await.status,
        StatusCode::OK
    );
    let down = Harness::new(MemLayer::with_bucket("bkt"), false);
    let ready = down.anonymous("GET", "/health/ready").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(ready.body, "ready=false\n");
    assert_eq!(
        down.anonymous("GET", "/health/live").await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn authentication_comes_before_routing_errors() {
    let h = Harness::new(MemLayer::with_bucket("bkt"), true);
    for (method, uri) in [
        ("GET", "/bkt?acl"),
        ("PATCH", "/bkt"),
        ("GET", "/bkt/k"),
        ("GET", "/"),
    ] {
        let r = h.anonymous(method, uri).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::FORBIDDEN, "AccessDenied"),
            "{method} {uri}"
        );
        assert!(
            r.body.contains("<RequestId>")
                && r.body.contains(&format!(
                    "<Resource>{}</Resource>",
                    uri.split('?').next().unwrap()
                ))
        );
    }
    let r = h.signed("GET", "/bkt?website", &[], b"").await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::NOT_IMPLEMENTED, "NotImplemented")
    );
    assert!(
        r.body.contains("GetBucketWebsite is not implemented"),
        "{}",
        r.body
    );
    let r = h.signed("PATCH", "/bkt", &[], b"").await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed")
    );
}

#[tokio::test]
async fn put_get_head_range_delete() {
    let layer = MemLayer::with_bucket("bkt");
    let h = Harness::new(layer.clone(), true);
    let data = b"0123456789abcdef";
    let put = h
        .signed(
            "PUT",
            "/bkt/dir/a%20b.txt",
            &[
                ("content-type", "text/plain"),
                ("content-encoding", "gzip"),
                ("x-amz-meta-color", "blue"),
            ],
            data,
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    let etag = format!("\"{}\"", hex::encode(Md5::digest(data)));
    assert_eq!(put.header("etag"), etag);
    let stored = layer.object("bkt", "dir/a b.txt").unwrap().0;
    assert_eq!(
        stored.headers.get("content-encoding").map(String::as_str),
        Some("gzip")
    );

    let get = h.signed("GET", "/bkt/dir/a%20b.txt", &[], b"").await;
    assert_eq!(get.status, StatusCode::OK);
    assert_eq!(get.body.as_bytes(), data);
    assert_eq!(get.header("content-type"), "text/plain");
    assert_eq!(get.header("content-encoding"), "gzip");
    assert_eq!(get.header("content-length"), "16");
    assert_eq!(get.header("x-amz-meta-color"), "blue");
    assert_eq!(get.header("etag"), etag);
    assert_eq!(get.header("last-modified"), "Sun, 29 Nov 2026 10:11:12 GMT");

    let ranged = h
        .signed("GET", "/bkt/dir/a%20b.txt", &[("range", "bytes=2-5")], b"")
        .await;
    assert_eq!(ranged.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(ranged.body, "2345");
    assert_eq!(ranged.header("content-range"), "bytes 2-5/16");
    let multi = h
        .signed(
            "GET",
            "/bkt/dir/a%20b.txt",
            &[("range", "bytes=0-1,4-5")],
            b"",
        )
        .await;
    assert_eq!((multi.status, multi.body.len()), (StatusCode::OK, 16));
    let beyond = h
        .signed("GET", "/bkt/dir/a%20b.txt", &[("range", "bytes=16-")], b"")
        .await;
    assert_eq!(
        (beyond.status, beyond.code()),
        (StatusCode::RANGE_NOT_SATISFIABLE, "InvalidRange")
    );
    assert_eq!(beyond.header("content-range"), "bytes */16");

    let head = h.signed("HEAD", "/bkt/dir/a%20b.txt", &[], b"").await;
    assert_eq!(
        (
            head.status,
            head.header("content-length"),
            head.body.as_str()
        ),
        (StatusCode::OK, "16", "")
    );
    let not_modified = h
        .signed(
            "GET",
            "/bkt/dir/a%20b.txt",
            &[("if-none-match", &etag)],
            b"",
        )
        .await;
    assert_eq!(
        (not_modified.status, not_modified.body.as_str()),
        (StatusCode::NOT_MODIFIED, "")
    );
    let missing = h.signed("HEAD", "/bkt/nope", &[], b"").await;
    assert_eq!(
        (missing.status, missing.body.as_str()),
        (StatusCode::NOT_FOUND, "")
    );
    let missing = h.signed("GET", "/bkt/nope", &[], b"").await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::NOT_FOUND, "NoSuchKey")
    );

    let deleted = h.signed("DELETE", "/bkt/dir/a%20b.txt", &[], b"").await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let again = h.signed("DELETE", "/bkt/dir/a%20b.txt", &[], b"").await;
    assert_eq!(again.status, StatusCode::NO_CONTENT);
    let no_bucket = h.signed("DELETE", "/nobucket/k", &[], b"").await;
    assert_eq!(no_bucket.code(), "NoSuchBucket");
}

#[tokio::test]
async fn body_verification_errors_reach_the_client() {
    let h = Harness::new(MemLayer::with_bucket("bkt"), true);
    // Signed for one body, sent with another: the verifier's own error comes back.
    let mut req = signed_request(
        "PUT",
        "/bkt/k",
        &[("content-length", "5")],
        b"hello",
        SignableBody::Bytes(b"hello"),
    );
    *req.body_mut() = Body::from("jello");
    let r = h.send(req).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::BAD_REQUEST, "XAmzContentSHA256Mismatch"),
        "{}",
        r.body
    );
    let r = h
        .signed(
            "PUT",
            "/bkt/k",
            &[("content-md5", "AAAAAAAAAAAAAAAAAAAAAA==")],
            b"hello",
        )
        .await;
    assert_eq!(r.code(), "BadDigest");
    let r = h
        .signed("PUT", "/bkt/k", &[("content-md5", "nope")], b"hello")
        .await;
    assert_eq!(r.code(), "InvalidDigest");
    let r = h
        .signed(
            "PUT",
            "/bkt/k",
            &[("x-amz-server-side-encryption", "AES256")],
            b"hello",
        )
        .await;
    assert_eq!(r.code(), "NotImplemented");
    let r = h
        .signed("PUT", "/bkt/k", &[("x-amz-copy-source", "/bkt/other")], b"")
        .await;
    assert_eq!(r.code(), "NoSuchKey", "{}", r.body);
}

#[tokio::test]
async fn buckets_and_listing() {
    let h = Harness::new(MemLayer::with_bucket("bkt"), true);
    let cfg = b"<CreateBucketConfiguration><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>";
    let r = h.signed("PUT", "/new", &[], cfg).await;
    assert_eq!(r.code(), "IllegalLocationConstraintException");
    let r = h
        .signed("PUT", "/new", &[], b"<CreateBucketConfiguration>")
        .await;
    assert_eq!(r.code(), "MalformedXML");
    let ok = b"<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>";
    let r = h.signed("PUT", "/new", &[], ok).await;
    assert_eq!((r.status, r.header("location")), (StatusCode::OK, "/new"));
    // Again, in us-east-1: 200 and nothing changes (elsewhere 409 BucketAlreadyOwnedByYou).
    let r = h.signed("PUT", "/new", &[], b"").await;
    assert_eq!((r.status, r.header("location")), (StatusCode::OK, "/new"));
    assert!(crate::bucket::recreate_succeeds("us-east-1"));
    assert!(!crate::bucket::recreate_succeeds("eu-west-1"));
    let r = h.signed("GET", "/", &[], b"").await;
    assert!(
        r.body.contains("<Name>bkt</Name>") && r.body.contains("<Name>new</Name>"),
        "{}",
        r.body
    );
    let r = h.signed("HEAD", "/new", &[], b"").await;
    assert_eq!(
        (r.status, r.header("x-amz-bucket-region")),
        (StatusCode::OK, "us-east-1")
    );
    assert_eq!(
        h.signed("HEAD", "/gone", &[], b"").await.status,
        StatusCode::NOT_FOUND
    );

    for key in ["a/1", "a/2", "b c", "d"] {
        let r = h
            .signed(
                "PUT",
                &format!("/new/{}", key.replace(' ', "%20")),
                &[],
                b"x",
            )
            .await;
        assert_eq!(r.status, StatusCode::OK);
    }
    let r = h.signed("DELETE", "/new", &[], b"").await;
    assert_eq!(r.code(), "BucketNotEmpty");

    let page = h
        .signed(
            "GET",
            "/new?list-type=2&delimiter=%2F&max-keys=2&encoding-type=url",
            &[],
            b"",
        )
        .await;
    assert!(
        page.body
            .contains("<CommonPrefixes><Prefix>a/</Prefix></CommonPrefixes>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("<Key>b%20c</Key>"), "{}", page.body);
    assert!(page.body.contains("<IsTruncated>true</IsTruncated>"));
    let token = page
        .body
        .split_once("<NextContinuationToken>")
        .unwrap()
        .1
        .split_once('<')
        .unwrap()
        .0
        .to_owned();
    let next = h
        .signed(
            "GET",
            &format!("/new?list-type=2&delimiter=%2F&continuation-token={token}"),
            &[],
            b"",
        )
        .await;
    assert!(
        next.body.contains("<Key>d</Key>") && !next.body.contains("<Key>b c</Key>"),
        "{}",
        next.body
    );
    assert!(
        next.body
            .contains("<IsTruncated>false</IsTruncated><Contents>"),
        "{}",
        next.body
    );
    let bad = h
        .signed(
            "GET",
            "/new?list-type=2&continuation-token=%21%21",
            &[],
            b"",
        )
        .await;
    assert_eq!(bad.code(), "InvalidArgument");
    let v1 = h
        .signed("GET", "/new?prefix=a%2F&max-keys=1", &[], b"")
        .await;
    assert!(
        v1.body.contains("<Key>a/1</Key>") && v1.body.contains("<IsTruncated>true</IsTruncated>"),
        "{}",
        v1.body
    );
    let location = h.signed("GET", "/new?location", &[], b"").await;
    assert!(
        location.body.ends_with("></LocationConstraint>"),
        "{}",
        location.body
    );
}

#[tokio::test]
async fn delete_objects_reports_each_key() {
    let layer = MemLayer::with_bucket("bkt");
    let h = Harness::new(layer.clone(), true);
    for key in ["a", "b"] {
        assert_eq!(
            h.signed("PUT", &format!("/bkt/{key}"), &[], b"x")
                .await
                .status,
            StatusCode::OK
        );
    }
    let doc = b"<Delete><Object><Key>a</Key></Object><Object><Key>missing</Key></Object>\
                <Object><Key>b</Key><VersionId>v1</VersionId></Object></Delete>";
    let md5 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, Md5::digest(doc));
    let r = h
        .signed("POST", "/bkt?delete", &[("content-md5", &md5)], doc)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        r.body
            .contains("<Deleted><Key>a</Key></Deleted><Deleted><Key>missing</Key></Deleted>"),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains("<Error><Key>b</Key><VersionId>v1</VersionId><Code>InvalidArgument</Code>"),
        "{}",
        r.body
    );
    assert!(layer.object("bkt", "a").is_err() && layer.object("bkt", "b").is_ok());
    let r = h
        .signed(
            "POST",
            "/bkt?delete",
            &[("content-md5", "AAAAAAAAAAAAAAAAAAAAAA==")],
            doc,
        )
        .await;
    assert_eq!(r.code(), "BadDigest");
    let r = h.signed("POST", "/nobucket?delete", &[], doc).await;
    assert_eq!(r.code(), "NoSuchBucket");
}

#[tokio::test]
async fn browser_endpoints_guard_themselves_without_sigv4() {
    let layer = MemLayer::with_bucket("bkt");
    let h = Harness::new(layer.clone(), true);
    let form = "--XX\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n\
                --XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n\
                data\r\n--XX--\r\n";
    let ctype = ("content-type", "multipart/form-data; boundary=XX");
    // A form without a policy stores nothing, even with a valid Authorization header: the
    // policy is what authenticates a browser upload.
    let r = h.signed("POST", "/bkt", &[ctype], form.as_bytes()).await;
    assert_eq!(r.code(), "AccessDenied", "{}", r.body);
    let anonymous = Request::builder()
        .method("POST")
        .uri("/bkt")
        .header("host", "localhost")
        .header(ctype.0, ctype.1)
        .body(Body::from(form))
        .unwrap();
    let r = h.send(anonymous).await;
    assert_eq!(r.code(), "AccessDenied", "{}", r.body);
    // A body that is not a form at all.
    let broken = Request::builder()
        .method("POST")
        .uri("/bkt")
        .header("host", "localhost")
        .header(ctype.0, ctype.1)
        .body(Body::from("no boundary here"))
        .unwrap();
    let r = h.send(broken).await;
    assert_eq!(r.code(), "MalformedPOSTRequest", "{}", r.body);
    assert!(layer.object("bkt", "k").is_err());

    // A preflight is answered without credentials, from the CORS rules only.
    let r = h.anonymous("OPTIONS", "/bkt/k").await;
    assert_eq!(r.code(), "BadRequest", "{}", r.body);
    let preflight = |origin: &str| {
        Request::builder()
            .method("OPTIONS")
            .uri("/bkt/k")
            .header("host", "localhost")
            .header("origin", origin)
            .header("access-control-request-method", "GET")
            .body(Body::empty())
            .unwrap()
    };
    let r = h.send(preflight("https://a.example")).await;
    assert_eq!(r.code(), "AccessForbidden", "{}", r.body);
    assert!(r.body.contains("CORS is not enabled"), "{}", r.body);
    let doc = b"<CORSConfiguration><CORSRule><AllowedOrigin>https://a.example</AllowedOrigin>\
                <AllowedMethod>GET</AllowedMethod></CORSRule></CORSConfiguration>";
    let r = h.signed("PUT", "/bkt?cors", &[], doc).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = h.send(preflight("https://a.example")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.header("access-control-allow-origin"), "https://a.example");
    assert!(r.body.is_empty());

    // Virtual host: the bucket comes from the Host, and the request still needs a signature
    // (no health probe, no anonymous read under a bucket's host).
    for path in ["/k", "/health/live"] {
        let req = Request::builder()
            .method("GET")
            .uri(path)
            .header("host", "bkt.s3.quarry.test:9000")
            .body(Body::empty())
            .unwrap();
        let r = h.send(req).await;
        assert_eq!(r.code(), "AccessDenied", "{path}: {}", r.body);
    }
}
