//! Which S3 operation a request is: one [`Endpoint`], parsed once from the method, the path, the
//! query keywords and a few headers (`x-amz-copy-source`, a form's `Content-Type`). Each variant
//! carries its bucket, key and query parameters, parsed and validated here (upload id, part
//! number, list markers and limits, `response-*` overrides), so handlers never look at the
//! method, path or query again. A bad parameter is the request's S3 error (`InvalidArgument`,
//! mostly), answered after authentication like every routing error.
//!
//! Addressing: path style (`/bucket/key`), or virtual-host style, where the server passes the
//! bucket taken from the `Host` header (`<bucket>.<domain>`) as `host_bucket` and the whole path
//! is the key.
//!
//! Operations Quarry does not implement still get a name here ([`Endpoint::Unsupported`]) and
//! answer `NotImplemented`: a request for `?lifecycle`, `?policy`, a part of a specific version and
//! the like never falls through to a plain GET or PUT and succeeds silently.
//!
//! Health probes (`/health/live`, `/health/ready`) are anonymous `GET`/`HEAD` requests. Anonymous
//! S3 access exists only where a bucket policy grants it, and no bucket named `health` or
//! `metrics` can be reached anonymously under those paths; the same path with credentials is an
//! ordinary S3 request.

use http::{HeaderMap, Method};
use percent_encoding::percent_decode_str;

use crate::api_error::ApiResult;
use crate::bucket::ListBucketsParams;
use crate::error::{S3Error, S3ErrorCode};
use crate::get::ObjectRead;
use crate::list::ListParams;
use crate::multipart::{self, ListPartsParams, ListUploadsParams};
use crate::versioning::{version_param, ListVersionsParams};
use quarry_object::VersionId;

/// The S3 operations, with the bucket and key they act on and their parsed query parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET /health/live`, anonymous: the process is up.
    HealthLive,
    /// `GET /health/ready`, anonymous: the object layer has read quorum.
    HealthReady,
    /// `GET /metrics`, anonymous: Prometheus text exposition (see `metrics.rs`).
    Metrics,
    ListBuckets {
        params: ListBucketsParams,
    },
    CreateBucket {
        bucket: String,
    },
    HeadBucket {
        bucket: String,
    },
    DeleteBucket {
        bucket: String,
    },
    GetBucketLocation {
        bucket: String,
    },
    ListObjects {
        bucket: String,
        params: ListParams,
    },
    ListObjectsV2 {
        bucket: String,
        params: ListParams,
    },
    PutObject {
        bucket: String,
        key: String,
    },
    /// `PUT` with `x-amz-copy-source`: the source is named by that header.
    CopyObject {
        bucket: String,
        key: String,
    },
    /// `GET /bucket/key`, or with `?partNumber=N` that part of a completed multipart object;
    /// with `?versionId=` that version.
    GetObject {
        bucket: String,
        key: String,
        read: ObjectRead,
        version: Option<VersionId>,
    },
    HeadObject {
        bucket: String,
        key: String,
        read: ObjectRead,
        version: Option<VersionId>,
    },
    /// `GET /bucket/key?attributes[&versionId=]`: what `x-amz-object-attributes` asks for.
    GetObjectAttributes {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    /// With `?versionId=` that version; without, in a versioned bucket, a delete marker.
    DeleteObject {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    /// `GET|PUT|DELETE /bucket/key?tagging[&versionId=]`.
    GetObjectTagging {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    PutObjectTagging {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    DeleteObjectTagging {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    GetBucketTagging {
        bucket: String,
    },
    /// `GET|PUT /bucket?object-lock`.
    GetObjectLockConfiguration {
        bucket: String,
    },
    PutObjectLockConfiguration {
        bucket: String,
    },
    /// `GET|PUT /bucket/key?retention[&versionId=]`.
    GetObjectRetention {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    PutObjectRetention {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    /// `GET|PUT /bucket/key?legal-hold[&versionId=]`.
    GetObjectLegalHold {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    PutObjectLegalHold {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    PutBucketTagging {
        bucket: String,
    },
    DeleteBucketTagging {
        bucket: String,
    },
    GetBucketVersioning {
        bucket: String,
    },
    PutBucketVersioning {
        bucket: String,
    },
    /// `GET /bucket?versions`.
    ListObjectVersions {
        bucket: String,
        params: ListVersionsParams,
    },
    /// `POST /bucket?delete`: several keys in one request.
    DeleteObjects {
        bucket: String,
    },
    GetBucketEncryption {
        bucket: String,
    },
    PutBucketEncryption {
        bucket: String,
    },
    DeleteBucketEncryption {
        bucket: String,
    },
    GetBucketLifecycle {
        bucket: String,
    },
    PutBucketLifecycle {
        bucket: String,
    },
    DeleteBucketLifecycle {
        bucket: String,
    },
    GetBucketCors {
        bucket: String,
    },
    PutBucketCors {
        bucket: String,
    },
    DeleteBucketCors {
        bucket: String,
    },
    GetBucketPolicy {
        bucket: String,
    },
    PutBucketPolicy {
        bucket: String,
    },
    DeleteBucketPolicy {
        bucket: String,
    },
    GetBucketPolicyStatus {
        bucket: String,
    },
    /// `OPTIONS /bucket[/key]`: a CORS preflight, answered from the bucket's CORS configuration
    /// without authentication (browsers send no credentials with a preflight).
    CorsPreflight {
        bucket: String,
        key: String,
    },
    /// `POST /bucket` with a `multipart/form-data` body: a browser upload. It carries no
    /// Authorization header; its signed policy, checked by the handler, is its authentication.
    PostObject {
        bucket: String,
    },
    /// `GET /bucket?uploads`.
    ListMultipartUploads {
        bucket: String,
        params: ListUploadsParams,
    },
    /// `POST /bucket/key?uploads`.
    CreateMultipartUpload {
        bucket: String,
        key: String,
    },
    /// `PUT /bucket/key?partNumber=N&uploadId=X`.
    UploadPart {
        bucket: String,
        key: String,
        upload_id: String,
        part_number: u32,
    },
    /// `PUT /bucket/key?partNumber=N&uploadId=X` with `x-amz-copy-source`.
    UploadPartCopy {
        bucket: String,
        key: String,
        upload_id: String,
        part_number: u32,
    },
    /// `POST /bucket/key?uploadId=X`.
    CompleteMultipartUpload {
        bucket: String,
        key: String,
        upload_id: String,
    },
    /// `DELETE /bucket/key?uploadId=X`.
    AbortMultipartUpload {
        bucket: String,
        key: String,
        upload_id: String,
    },
    /// `GET /bucket/key?uploadId=X`.
    ListParts {
        bucket: String,
        key: String,
        upload_id: String,
        params: ListPartsParams,
    },
    /// `GET /bucket?acl`: always the owner's `FULL_CONTROL` (see `acl.rs`).
    GetBucketAcl {
        bucket: String,
    },
    /// `PUT /bucket?acl`.
    PutBucketAcl {
        bucket: String,
    },
    /// `GET /bucket/key?acl[&versionId=]`.
    GetObjectAcl {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    /// `PUT /bucket/key?acl[&versionId=]`.
    PutObjectAcl {
        bucket: String,
        key: String,
        version: Option<VersionId>,
    },
    GetBucketOwnershipControls {
        bucket: String,
    },
    PutBucketOwnershipControls {
        bucket: String,
    },
    DeleteBucketOwnershipControls {
        bucket: String,
    },
    GetPublicAccessBlock {
        bucket: String,
    },
    PutPublicAccessBlock {
        bucket: String,
    },
    DeletePublicAccessBlock {
        bucket: String,
    },
    /// `POST /quarry/rdma/v1/connections`, path style: an RDMA connection for S3 over RDMA
    /// (`rdma.rs`), any signed caller.
    RdmaConnect,
    /// `DELETE /quarry/rdma/v1/connections/<id>`: closes one of the caller's connections.
    RdmaDisconnect {
        id: String,
    },
    /// `/quarry/admin/v1/...`, path style: the admin API (`admin.rs`), root user only.
    Admin {
        op: crate::admin::AdminOp,
    },
    /// `POST /` (path style): the AWS IAM or STS query API, its action in the form body, signed
    /// for service `iam` or `sts` (see `iam/query.rs`).
    IamQuery,
    /// A known S3 operation Quarry does not implement; answered with `NotImplemented`.
    Unsupported {
        operation: String,
    },
}

impl Endpoint {
    /// Whether the request must carry a valid signature. Anonymous: the health probes and
    /// `/metrics`, CORS preflights, and browser uploads (authenticated by their signed policy).
    pub fn needs_auth(&self) -> bool {
        !matches!(
            self,
            Endpoint::HealthLive
                | Endpoint::HealthReady
                | Endpoint::Metrics
                | Endpoint::CorsPreflight { .. }
                | Endpoint::PostObject { .. }
        )
    }

    /// The bucket the request addresses, if any.
    pub fn bucket(&self) -> Option<&str> {
        use Endpoint as E;
        match self {
            E::HealthLive
            | E::HealthReady
            | E::Metrics
            | E::ListBuckets { .. }
            | E::Admin { .. }
            | E::RdmaConnect
            | E::RdmaDisconnect { .. }
            | E::IamQuery
            | E::Unsupported { .. } => None,
            E::CreateBucket { bucket }
            | E::HeadBucket { bucket }
            | E::DeleteBucket { bucket }
            | E::GetBucketLocation { bucket }
            | E::ListObjects { bucket, .. }
            | E::ListObjectsV2 { bucket, .. }
            | E::PutObject { bucket, .. }
            | E::CopyObject { bucket, .. }
            | E::GetObject { bucket, .. }
            | E::HeadObject { bucket, .. }
            | E::GetObjectAttributes { bucket, .. }
            | E::DeleteObject { bucket, .. }
            | E::DeleteObjects { bucket }
            | E::GetObjectTagging { bucket, .. }
            | E::PutObjectTagging { bucket, .. }
            | E::DeleteObjectTagging { bucket, .. }
            | E::GetBucketTagging { bucket }
            | E::GetObjectLockConfiguration { bucket }
            | E::PutObjectLockConfiguration { bucket }
            | E::GetObjectRetention { bucket, .. }
            | E::PutObjectRetention { bucket, .. }
            | E::GetObjectLegalHold { bucket, .. }
            | E::PutObjectLegalHold { bucket, .. }
            | E::PutBucketTagging { bucket }
            | E::DeleteBucketTagging { bucket }
            | E::GetBucketVersioning { bucket }
            | E::PutBucketVersioning { bucket }
            | E::ListObjectVersions { bucket, .. }
            | E::GetBucketEncryption { bucket }
            | E::PutBucketEncryption { bucket }
            | E::DeleteBucketEncryption { bucket }
            | E::GetBucketLifecycle { bucket }
            | E::PutBucketLifecycle { bucket }
            | E::DeleteBucketLifecycle { bucket }
            | E::GetBucketCors { bucket }
            | E::PutBucketCors { bucket }
            | E::DeleteBucketCors { bucket }
            | E::GetBucketPolicy { bucket }
            | E::PutBucketPolicy { bucket }
            | E::DeleteBucketPolicy { bucket }
            | E::GetBucketPolicyStatus { bucket }
            | E::CorsPreflight { bucket, .. }
            | E::PostObject { bucket }
            | E::ListMultipartUploads { bucket, .. }
            | E::CreateMultipartUpload { bucket, .. }
            | E::UploadPart { bucket, .. }
            | E::UploadPartCopy { bucket, .. }
            | E::CompleteMultipartUpload { bucket, .. }
            | E::AbortMultipartUpload { bucket, .. }
            | E::ListParts { bucket, .. }
            | E::GetBucketAcl { bucket }
            | E::PutBucketAcl { bucket }
            | E::GetObjectAcl { bucket, .. }
            | E::PutObjectAcl { bucket, .. }
            | E::GetBucketOwnershipControls { bucket }
            | E::PutBucketOwnershipControls { bucket }
            | E::DeleteBucketOwnershipControls { bucket }
            | E::GetPublicAccessBlock { bucket }
            | E::PutPublicAccessBlock { bucket }
            | E::DeletePublicAccessBlock { bucket } => Some(bucket),
        }
    }

    /// The S3 name of the operation, for logs.
    pub fn name(&self) -> &str {
        match self {
            Endpoint::HealthLive => "HealthLive",
            Endpoint::HealthReady => "HealthReady",
            Endpoint::Metrics => "Metrics",
            Endpoint::ListBuckets { .. } => "ListBuckets",
            Endpoint::CreateBucket { .. } => "CreateBucket",
            Endpoint::HeadBucket { .. } => "HeadBucket",
            Endpoint::DeleteBucket { .. } => "DeleteBucket",
            Endpoint::GetBucketLocation { .. } => "GetBucketLocation",
            Endpoint::ListObjects { .. } => "ListObjects",
            Endpoint::ListObjectsV2 { .. } => "ListObjectsV2",
            Endpoint::PutObject { .. } => "PutObject",
            Endpoint::CopyObject { .. } => "CopyObject",
            Endpoint::GetObject { .. } => "GetObject",
            Endpoint::HeadObject { .. } => "HeadObject",
            Endpoint::GetObjectAttributes { .. } => "GetObjectAttributes",
            Endpoint::DeleteObject { .. } => "DeleteObject",
            Endpoint::DeleteObjects { .. } => "DeleteObjects",
            Endpoint::GetObjectTagging { .. } => "GetObjectTagging",
            Endpoint::PutObjectTagging { .. } => "PutObjectTagging",
            Endpoint::DeleteObjectTagging { .. } => "DeleteObjectTagging",
            Endpoint::GetBucketTagging { .. } => "GetBucketTagging",
            Endpoint::GetObjectLockConfiguration { .. } => "GetObjectLockConfiguration",
            Endpoint::PutObjectLockConfiguration { .. } => "PutObjectLockConfiguration",
            Endpoint::GetObjectRetention { .. } => "GetObjectRetention",
            Endpoint::PutObjectRetention { .. } => "PutObjectRetention",
            Endpoint::GetObjectLegalHold { .. } => "GetObjectLegalHold",
            Endpoint::PutObjectLegalHold { .. } => "PutObjectLegalHold",
            Endpoint::PutBucketTagging { .. } => "PutBucketTagging",
            Endpoint::DeleteBucketTagging { .. } => "DeleteBucketTagging",
            Endpoint::GetBucketVersioning { .. } => "GetBucketVersioning",
            Endpoint::PutBucketVersioning { .. } => "PutBucketVersioning",
            Endpoint::ListObjectVersions { .. } => "ListObjectVersions",
            Endpoint::GetBucketEncryption { .. } => "GetBucketEncryption",
            Endpoint::PutBucketEncryption { .. } => "PutBucketEncryption",
            Endpoint::DeleteBucketEncryption { .. } => "DeleteBucketEncryption",
            Endpoint::GetBucketLifecycle { .. } => "GetBucketLifecycleConfiguration",
            Endpoint::PutBucketLifecycle { .. } => "PutBucketLifecycleConfiguration",
            Endpoint::DeleteBucketLifecycle { .. } => "DeleteBucketLifecycle",
            Endpoint::GetBucketCors { .. } => "GetBucketCors",
            Endpoint::PutBucketCors { .. } => "PutBucketCors",
            Endpoint::DeleteBucketCors { .. } => "DeleteBucketCors",
            Endpoint::GetBucketPolicy { .. } => "GetBucketPolicy",
            Endpoint::PutBucketPolicy { .. } => "PutBucketPolicy",
            Endpoint::DeleteBucketPolicy { .. } => "DeleteBucketPolicy",
            Endpoint::GetBucketPolicyStatus { .. } => "GetBucketPolicyStatus",
            Endpoint::CorsPreflight { .. } => "PreflightRequest",
            Endpoint::PostObject { .. } => "PostObject",
            Endpoint::ListMultipartUploads { .. } => "ListMultipartUploads",
            Endpoint::CreateMultipartUpload { .. } => "CreateMultipartUpload",
            Endpoint::UploadPart { .. } => "UploadPart",
            Endpoint::UploadPartCopy { .. } => "UploadPartCopy",
            Endpoint::CompleteMultipartUpload { .. } => "CompleteMultipartUpload",
            Endpoint::AbortMultipartUpload { .. } => "AbortMultipartUpload",
            Endpoint::ListParts { .. } => "ListParts",
            Endpoint::GetBucketAcl { .. } => "GetBucketAcl",
            Endpoint::PutBucketAcl { .. } => "PutBucketAcl",
            Endpoint::GetObjectAcl { .. } => "GetObjectAcl",
            Endpoint::PutObjectAcl { .. } => "PutObjectAcl",
            Endpoint::GetBucketOwnershipControls { .. } => "GetBucketOwnershipControls",
            Endpoint::PutBucketOwnershipControls { .. } => "PutBucketOwnershipControls",
            Endpoint::DeleteBucketOwnershipControls { .. } => "DeleteBucketOwnershipControls",
            Endpoint::GetPublicAccessBlock { .. } => "GetPublicAccessBlock",
            Endpoint::PutPublicAccessBlock { .. } => "PutPublicAccessBlock",
            Endpoint::DeletePublicAccessBlock { .. } => "DeletePublicAccessBlock",
            Endpoint::Admin { op } => op.name(),
            Endpoint::RdmaConnect => "RdmaConnect",
            Endpoint::RdmaDisconnect { .. } => "RdmaDisconnect",
            Endpoint::IamQuery => "IamQuery",
            Endpoint::Unsupported { operation } => operation,
        }
    }
}

/// The decoded query string, in order. `+` decodes to a space, as in a form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses a raw query string (without `?`). Bytes that do not decode to UTF-8 are `InvalidURI`.
    pub fn parse(raw: Option<&str>) -> Result<Query, S3Error> {
        let mut pairs = Vec::new();
        for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            pairs.push((form_decode(k)?, form_decode(v)?));
        }
        Ok(Query { pairs })
    }

    /// The value of the first parameter named `name` (case-sensitive, as S3).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

fn form_decode(s: &str) -> Result<String, S3Error> {
    let s = s.replace('+', " ");
    percent_decode_str(&s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| invalid_uri())
}

fn invalid_uri() -> S3Error {
    S3Error::new(
        S3ErrorCode::InvalidURI,
        "The request URI is not valid UTF-8 after percent-decoding.",
    )
}

/// Why a request has no endpoint: its S3 error and, when only a parameter of a known operation
/// was bad, that operation and its bucket (the request is logged, counted and given CORS headers
/// as that operation).
#[derive(Debug, Clone)]
pub struct RouteError {
    pub operation: Option<&'static str>,
    pub bucket: Option<String>,
    pub error: S3Error,
}

impl From<S3Error> for RouteError {
    fn from(error: S3Error) -> Self {
        RouteError {
            operation: None,
            bucket: None,
            error,
        }
    }
}

/// Bucket sub-resources S3 defines. Each selects an operation other than the plain one.
pub(crate) const BUCKET_SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "delete",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "lifecycle",
    "location",
    "logging",
    "metadataConfiguration",
    "metadataTable",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "session",
    "tagging",
    "uploads",
    "versioning",
    "versions",
    "website",
];

/// Object sub-resources S3 defines.
pub(crate) const OBJECT_SUBRESOURCES: &[&str] = &[
    "acl",
    "attributes",
    "legal-hold",
    "partNumber",
    "renameObject",
    "restore",
    "retention",
    "select",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
];

/// Ordinary parameters of the operations Quarry implements (they do not select an operation).
const ORDINARY_PARAMS: &[&str] = &[
    // ListBuckets
    "bucket-region",
    "max-buckets",
    // ListObjects and ListObjectsV2
    "continuation-token",
    "delimiter",
    "encoding-type",
    "fetch-owner",
    "list-type",
    "marker",
    "max-keys",
    "prefix",
    "start-after",
    // GetObject
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "versionId",
    // added by SDKs to name the operation
    "x-id",
];

/// Parses the operation of a request.
///
/// `path` is the raw, still percent-encoded path; `host_bucket` the bucket named by the `Host`
/// header in virtual-host style (`None` for path style).
pub fn parse(
    method: &Method,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
    host_bucket: Option<&str>,
) -> Result<Endpoint, RouteError> {
    if host_bucket.is_none()
        && (method == Method::GET || method == Method::HEAD)
        && is_anonymous(headers, query)
    {
        match path {
            "/health/live" => return Ok(Endpoint::HealthLive),
            "/health/ready" => return Ok(Endpoint::HealthReady),
            "/metrics" => return Ok(Endpoint::Metrics),
            _ => {}
        }
    }
    // A bearer token is not an S3 credential: it can only be for the metrics.
    if host_bucket.is_none()
        && path == "/metrics"
        && (method == Method::GET || method == Method::HEAD)
        && headers
            .get(http::header::AUTHORIZATION)
            .is_some_and(|v| v.as_bytes().starts_with(b"Bearer ") || v.as_bytes() == b"Bearer")
    {
        return Ok(Endpoint::Metrics);
    }

    if host_bucket.is_none() {
        if let Some(op) = crate::admin::parse(method, path, query) {
            return Ok(Endpoint::Admin { op });
        }
        if let Some(route) = crate::rdma::parse_route(method, path) {
            return Ok(match route {
                None => Endpoint::RdmaConnect,
                Some(id) => Endpoint::RdmaDisconnect { id },
            });
        }
    }

    let path = path.strip_prefix('/').ok_or_else(invalid_uri)?;
    let (bucket, key) = match host_bucket {
        Some(bucket) => (bucket.to_owned(), decode_key(path)?),
        None => {
            let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
            (decode_path(bucket)?, decode_key(key)?)
        }
    };

    if method == Method::OPTIONS {
        if bucket.is_empty() {
            return Err(method_not_allowed(method, "the service"));
        }
        return Ok(Endpoint::CorsPreflight { bucket, key });
    }
    if bucket.is_empty() {
        if !key.is_empty() {
            return Err(
                S3Error::new(S3ErrorCode::InvalidBucketName, "The bucket name is empty.").into(),
            );
        }
        return service_endpoint(method, query);
    }
    let named = bucket.clone();
    let routed = if key.is_empty() {
        if method == Method::POST && keyword(query, BUCKET_SUBRESOURCES).is_none() {
            return post_object_endpoint(headers, bucket);
        }
        bucket_endpoint(method, query, bucket)
    } else {
        object_endpoint(method, query, headers, bucket, key)
    };
    routed.map_err(|mut e| {
        if e.operation.is_some() {
            e.bucket = Some(named);
        }
        e
    })
}

/// A request with neither an `Authorization` header nor presigned query parameters.
pub(crate) fn is_anonymous(headers: &HeaderMap, query: &Query) -> bool {
    !headers.contains_key(http::header::AUTHORIZATION)
        && !query.iter().any(|(k, _)| {
            k.eq_ignore_ascii_case("X-Amz-Signature")
                || k.eq_ignore_ascii_case("X-Amz-Credential")
                || k == "Signature"
                || k == "AWSAccessKeyId"
        })
}

/// An object key from the path. A key holding a C1 control character (U+0080 to U+009F: what
/// Latin-1 bytes read as UTF-8 by mistake become) is refused as S3 refuses it, with 400
/// `InvalidURI` "Couldn't parse the specified URI.", rather than looked up or stored.
fn decode_key(s: &str) -> Result<String, S3Error> {
    let key = decode_path(s)?;
    if key.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)) {
        return Err(S3Error::from_code(S3ErrorCode::InvalidURI));
    }
    Ok(key)
}

fn decode_path(s: &str) -> Result<String, S3Error> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| invalid_uri())
}

fn unsupported(operation: impl Into<String>) -> Endpoint {
    Endpoint::Unsupported {
        operation: operation.into(),
    }
}

fn method_not_allowed(method: &Method, what: &str) -> RouteError {
    RouteError::from(S3Error::new(
        S3ErrorCode::MethodNotAllowed,
        format!("The method {method} is not allowed against {what}."),
    ))
}

/// A parameter of `operation`, parsed by its handler's module: its error is the request's.
fn param<T>(operation: &'static str, parsed: ApiResult<T>) -> Result<T, RouteError> {
    parsed.map_err(|e| RouteError {
        operation: Some(operation),
        bucket: None,
        error: e.error,
    })
}

fn service_endpoint(method: &Method, query: &Query) -> Result<Endpoint, RouteError> {
    match *method {
        Method::GET => Ok(Endpoint::ListBuckets {
            params: param("ListBuckets", ListBucketsParams::from_query(query))?,
        }),
        Method::POST => Ok(Endpoint::IamQuery),
        _ => Err(method_not_allowed(method, "the service")),
    }
}

/// The sub-resource keyword of a request: a known sub-resource, or any parameter that is neither
/// an ordinary parameter nor a presigned-URL parameter and has no value (`?foo`).
fn keyword<'q>(query: &'q Query, known: &[&str]) -> Option<&'q str> {
    query
        .iter()
        .map(|(k, _)| k)
        .find(|k| known.contains(k))
        .or_else(|| {
            query
                .iter()
                .find(|(k, v)| {
                    v.is_empty()
                        && !ORDINARY_PARAMS.contains(k)
                        && !k.to_ascii_lowercase().starts_with("x-amz-")
                })
                .map(|(k, _)| k)
        })
}

/// `GetBucketAcl`, `PutBucketVersioning`, ... from the method and the sub-resource.
fn bucket_operation_name(method: &Method, sub: &str) -> String {
    match (method.as_str(), sub) {
        ("GET", "uploads") => "ListMultipartUploads".into(),
        ("GET", "versions") => "ListObjectVersions".into(),
        ("GET", "session") => "CreateSession".into(),
        _ => format!("{}Bucket{}", verb(method), camel(sub)),
    }
}

fn verb(method: &Method) -> String {
    camel(&method.as_str().to_ascii_lowercase())
}

/// `object-lock` -> `ObjectLock`, `acl` -> `Acl`.
fn camel(s: &str) -> String {
    s.split('-')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(first) => first.to_uppercase().chain(c).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}

fn bucket_endpoint(method: &Method, query: &Query, bucket: String) -> Result<Endpoint, RouteError> {
    let sub = keyword(query, BUCKET_SUBRESOURCES);
    match (method.clone(), sub) {
        (Method::GET, Some("location")) => Ok(Endpoint::GetBucketLocation { bucket }),
        (Method::POST, Some("delete")) => Ok(Endpoint::DeleteObjects { bucket }),
        (Method::GET, Some("encryption")) => Ok(Endpoint::GetBucketEncryption { bucket }),
        (Method::PUT, Some("encryption")) => Ok(Endpoint::PutBucketEncryption { bucket }),
        (Method::DELETE, Some("encryption")) => Ok(Endpoint::DeleteBucketEncryption { bucket }),
        (Method::GET, Some("lifecycle")) => Ok(Endpoint::GetBucketLifecycle { bucket }),
        (Method::PUT, Some("lifecycle")) => Ok(Endpoint::PutBucketLifecycle { bucket }),
        (Method::DELETE, Some("lifecycle")) => Ok(Endpoint::DeleteBucketLifecycle { bucket }),
        (Method::GET, Some("cors")) => Ok(Endpoint::GetBucketCors { bucket }),
        (Method::PUT, Some("cors")) => Ok(Endpoint::PutBucketCors { bucket }),
        (Method::DELETE, Some("cors")) => Ok(Endpoint::DeleteBucketCors { bucket }),
        (Method::GET, Some("policy")) => Ok(Endpoint::GetBucketPolicy { bucket }),
        (Method::PUT, Some("policy")) => Ok(Endpoint::PutBucketPolicy { bucket }),
        (Method::DELETE, Some("policy")) => Ok(Endpoint::DeleteBucketPolicy { bucket }),
        (Method::GET, Some("policyStatus")) => Ok(Endpoint::GetBucketPolicyStatus { bucket }),
        (Method::GET, Some("uploads")) => Ok(Endpoint::ListMultipartUploads {
            bucket,
            params: param("ListMultipartUploads", ListUploadsParams::from_query(query))?,
        }),
        (Method::GET, Some("tagging")) => Ok(Endpoint::GetBucketTagging { bucket }),
        (Method::GET, Some("object-lock")) => Ok(Endpoint::GetObjectLockConfiguration { bucket }),
        (Method::PUT, Some("object-lock")) => Ok(Endpoint::PutObjectLockConfiguration { bucket }),
        (Method::PUT, Some("tagging")) => Ok(Endpoint::PutBucketTagging { bucket }),
        (Method::DELETE, Some("tagging")) => Ok(Endpoint::DeleteBucketTagging { bucket }),
        (Method::GET, Some("versioning")) => Ok(Endpoint::GetBucketVersioning { bucket }),
        (Method::PUT, Some("versioning")) => Ok(Endpoint::PutBucketVersioning { bucket }),
        (Method::GET, Some("versions")) => Ok(Endpoint::ListObjectVersions {
            bucket,
            params: param("ListObjectVersions", ListVersionsParams::from_query(query))?,
        }),
        (Method::GET, Some("acl")) => Ok(Endpoint::GetBucketAcl { bucket }),
        (Method::PUT, Some("acl")) => Ok(Endpoint::PutBucketAcl { bucket }),
        (Method::GET, Some("ownershipControls")) => {
            Ok(Endpoint::GetBucketOwnershipControls { bucket })
        }
        (Method::PUT, Some("ownershipControls")) => {
            Ok(Endpoint::PutBucketOwnershipControls { bucket })
        }
        (Method::DELETE, Some("ownershipControls")) => {
            Ok(Endpoint::DeleteBucketOwnershipControls { bucket })
        }
        (Method::GET, Some("publicAccessBlock")) => Ok(Endpoint::GetPublicAccessBlock { bucket }),
        (Method::PUT, Some("publicAccessBlock")) => Ok(Endpoint::PutPublicAccessBlock { bucket }),
        (Method::DELETE, Some("publicAccessBlock")) => {
            Ok(Endpoint::DeletePublicAccessBlock { bucket })
        }
        (Method::GET | Method::PUT | Method::DELETE | Method::POST | Method::HEAD, Some(sub)) => {
            Ok(unsupported(bucket_operation_name(method, sub)))
        }
        (Method::GET, None) => match query.get("list-type") {
            None => Ok(Endpoint::ListObjects {
                bucket,
                params: param("ListObjects", ListParams::from_query(query))?,
            }),
            Some("2") => Ok(Endpoint::ListObjectsV2 {
                bucket,
                params: param("ListObjectsV2", ListParams::from_query(query))?,
            }),
            Some(other) => Err(S3Error::new(
                S3ErrorCode::InvalidArgument,
                format!("Invalid list-type {other:?}: only 2 is defined."),
            )
            .into()),
        },
        (Method::PUT, None) => Ok(Endpoint::CreateBucket { bucket }),
        (Method::HEAD, None) => Ok(Endpoint::HeadBucket { bucket }),
        (Method::DELETE, None) => Ok(Endpoint::DeleteBucket { bucket }),
        _ => Err(method_not_allowed(method, "a bucket")),
    }
}

/// `POST /bucket` without a sub-resource is a browser upload, which must be a form.
fn post_object_endpoint(headers: &HeaderMap, bucket: String) -> Result<Endpoint, RouteError> {
    let multipart = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("multipart/form-data"));
    if multipart {
        Ok(Endpoint::PostObject { bucket })
    } else {
        Err(S3Error::new(
            S3ErrorCode::PreconditionFailed,
            "Bucket POST must be of the enclosure-type multipart/form-data",
        )
        .into())
    }
}

fn object_endpoint(
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
    bucket: String,
    key: String,
) -> Result<Endpoint, RouteError> {
    let copy = headers.contains_key("x-amz-copy-source");
    let sub = keyword(query, OBJECT_SUBRESOURCES);
    // An explicit version other than "null" (the only version of an unversioned object).
    let versioned = query.get("versionId").is_some_and(|v| v != "null");
    let read = |op| param(op, ObjectRead::from_query(query));
    let upload_id = |op| param(op, multipart::upload_id(query));
    let version = |op| param(op, version_param(query));
    let op = match (method.clone(), sub) {
        // A part of a specific version is not served (the part read follows the latest).
        (Method::GET, None) | (Method::GET, Some("partNumber")) if sub.is_none() || !versioned => {
            let read = read("GetObject")?;
            let version = version("GetObject")?;
            return Ok(Endpoint::GetObject {
                bucket,
                key,
                read,
                version,
            });
        }
        (Method::HEAD, None) | (Method::HEAD, Some("partNumber"))
            if sub.is_none() || !versioned =>
        {
            let read = read("HeadObject")?;
            let version = version("HeadObject")?;
            return Ok(Endpoint::HeadObject {
                bucket,
                key,
                read,
                version,
            });
        }
        (Method::DELETE, None) => {
            let version = version("DeleteObject")?;
            return Ok(Endpoint::DeleteObject {
                bucket,
                key,
                version,
            });
        }
        (Method::GET, Some("attributes")) => {
            let version = version("GetObjectAttributes")?;
            return Ok(Endpoint::GetObjectAttributes {
                bucket,
                key,
                version,
            });
        }
        (Method::PUT, None) if copy => return Ok(Endpoint::CopyObject { bucket, key }),
        (Method::PUT, None) => return Ok(Endpoint::PutObject { bucket, key }),
        (Method::POST, Some("uploads")) => {
            return Ok(Endpoint::CreateMultipartUpload { bucket, key })
        }
        (Method::POST, Some("uploadId")) => {
            let upload_id = upload_id("CompleteMultipartUpload")?;
            return Ok(Endpoint::CompleteMultipartUpload {
                bucket,
                key,
                upload_id,
            });
        }
        (Method::PUT, Some("uploadId" | "partNumber")) => {
            let op = if copy { "UploadPartCopy" } else { "UploadPart" };
            let part_number = param(op, multipart::part_number(query.get("partNumber")))?;
            let upload_id = upload_id(op)?;
            return Ok(if copy {
                Endpoint::UploadPartCopy {
                    bucket,
                    key,
                    upload_id,
                    part_number,
                }
            } else {
                Endpoint::UploadPart {
                    bucket,
                    key,
                    upload_id,
                    part_number,
                }
            });
        }
        (Method::GET, Some("uploadId")) => {
            let upload_id = upload_id("ListParts")?;
            let params = param("ListParts", ListPartsParams::from_query(query))?;
            return Ok(Endpoint::ListParts {
                bucket,
                key,
                upload_id,
                params,
            });
        }
        (Method::DELETE, Some("uploadId")) => {
            let upload_id = upload_id("AbortMultipartUpload")?;
            return Ok(Endpoint::AbortMultipartUpload {
                bucket,
                key,
                upload_id,
            });
        }
        (Method::GET | Method::HEAD, Some("partNumber")) => {
            format!("{} of a specific object version", verb(method))
        }
        (Method::GET, Some("acl")) => {
            let version = version("GetObjectAcl")?;
            return Ok(Endpoint::GetObjectAcl {
                bucket,
                key,
                version,
            });
        }
        (Method::PUT, Some("acl")) => {
            let version = version("PutObjectAcl")?;
            return Ok(Endpoint::PutObjectAcl {
                bucket,
                key,
                version,
            });
        }
        (Method::GET, Some("tagging")) => {
            let version = version("GetObjectTagging")?;
            return Ok(Endpoint::GetObjectTagging {
                bucket,
                key,
                version,
            });
        }
        (Method::PUT, Some("tagging")) => {
            let version = version("PutObjectTagging")?;
            return Ok(Endpoint::PutObjectTagging {
                bucket,
                key,
                version,
            });
        }
        (Method::DELETE, Some("tagging")) => {
            let version = version("DeleteObjectTagging")?;
            return Ok(Endpoint::DeleteObjectTagging {
                bucket,
                key,
                version,
            });
        }
        (Method::GET | Method::PUT, Some(sub @ ("retention" | "legal-hold"))) => {
            let get = method == Method::GET;
            let name = match (get, sub) {
                (true, "retention") => "GetObjectRetention",
                (false, "retention") => "PutObjectRetention",
                (true, _) => "GetObjectLegalHold",
                (false, _) => "PutObjectLegalHold",
            };
            let version = version(name)?;
            return Ok(match (get, sub) {
                (true, "retention") => Endpoint::GetObjectRetention {
                    bucket,
                    key,
                    version,
                },
                (false, "retention") => Endpoint::PutObjectRetention {
                    bucket,
                    key,
                    version,
                },
                (true, _) => Endpoint::GetObjectLegalHold {
                    bucket,
                    key,
                    version,
                },
                (false, _) => Endpoint::PutObjectLegalHold {
                    bucket,
                    key,
                    version,
                },
            });
        }
        (Method::POST, Some("restore")) => "RestoreObject".to_owned(),
        (Method::POST, Some("select")) => "SelectObjectContent".to_owned(),
        (Method::GET | Method::PUT | Method::DELETE | Method::HEAD, Some(sub)) => {
            format!("{}Object{}", verb(method), camel(sub))
        }
        _ => return Err(method_not_allowed(method, "an object")),
    };
    Ok(unsupported(op))
}

#[cfg(test)]
mod tests;
