//! PostObject: browser uploads with an HTML form (`POST /bucket`, `multipart/form-data`).
//!
//! Such a request carries no Authorization header: its authentication is the form's `policy`
//! (base64 JSON: an expiration and conditions on the fields), signed with SigV4
//! (`x-amz-algorithm`, `x-amz-credential`, `x-amz-date`, `x-amz-signature`). The handler reads
//! the fields before `file` (at most [`MAX_FORM_FIELDS`] bytes in all), verifies the signature,
//! the expiration and every condition, and only then streams the `file` part into the object
//! layer, never holding it in memory. `content-length-range` is enforced on the stream: the
//! upload fails before it commits when the file is too large or too small. Fields after `file`
//! are ignored, as S3 does.
//!
//! Answers: 204 by default; `success_action_status` 200 or 201 (201 with a `PostResponse`
//! document); `success_action_redirect` a 303 to that URL with `bucket`, `key` and `etag` added.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use axum::body::Body;
use axum::response::Response;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, ETAG, LOCATION};
use http::request::Parts;
use http::StatusCode;
use quarry_object::PutOptions;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::api_error::{ApiError, ApiResult};
use crate::body::{counted_stream, timed_stream};
use crate::error::{S3Error, S3ErrorCode};
use crate::headers::{check_acl_headers, stored_headers, user_metadata, STORED_HEADERS};
use crate::put::MAX_PUT_SIZE;
use crate::server::AppState;
use crate::signature::{self, AuthConfig};
use crate::xml::{self, XmlWriter};

/// The most bytes of form fields (names and values, plus a fixed cost per field) before `file`.
pub const MAX_FORM_FIELDS: usize = 64 * 1024;
/// What each field costs beyond its name and value, so that many empty fields are bounded too.
const FIELD_OVERHEAD: usize = 64;
/// The largest policy document, decoded.
const MAX_POLICY: usize = 20 * 1024;
/// The most body bytes read before the `file` part starts: the fields, their part headers, and
/// what the parser reads ahead. Bounds the parser's buffer (it holds part headers whole), and so
/// what an unauthenticated client can make the server hold before the policy is checked: the
/// fields themselves, 16 KiB of part headers and one [`PREAMBLE_PIECE`] read ahead.
const MAX_PREAMBLE: u64 = (MAX_FORM_FIELDS + 16 * 1024 + PREAMBLE_PIECE) as u64;
/// The body is handed to the form parser in pieces of at most this size (zero-copy slices), so
/// the preamble count is exact to within one piece whatever size the network reads are.
const PREAMBLE_PIECE: usize = 8 * 1024;

/// One condition of a POST policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `{"field": "value"}` or `["eq", "$field", "value"]`. `field` is lower-case, without `$`.
    Eq { field: String, value: String },
    /// `["starts-with", "$field", "prefix"]`.
    StartsWith { field: String, prefix: String },
    /// `["content-length-range", min, max]`, inclusive.
    ContentLengthRange { min: u64, max: u64 },
}

impl Condition {
    /// The condition as S3 quotes it in its error message.
    fn describe(&self) -> String {
        match self {
            Condition::Eq { field, value } => format!("[\"eq\", \"${field}\", \"{value}\"]"),
            Condition::StartsWith { field, prefix } => {
                format!("[\"starts-with\", \"${field}\", \"{prefix}\"]")
            }
            Condition::ContentLengthRange { min, max } => {
                format!("[\"content-length-range\", {min}, {max}]")
            }
        }
    }
}

/// A decoded POST policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostPolicy {
    pub expiration: OffsetDateTime,
    pub conditions: Vec<Condition>,
}

fn invalid_policy(detail: impl std::fmt::Display) -> S3Error {
    S3Error::new(
        S3ErrorCode::InvalidPolicyDocument,
        format!("Invalid Policy: {detail}"),
    )
}

fn denied(detail: impl std::fmt::Display) -> S3Error {
    S3Error::new(
        S3ErrorCode::AccessDenied,
        format!("Invalid according to Policy: {detail}"),
    )
}

impl PostPolicy {
    /// Decodes the base64 `policy` field and parses the JSON document.
    pub fn parse(policy_b64: &str) -> Result<PostPolicy, S3Error> {
        let raw = STANDARD
            .decode(policy_b64.trim().as_bytes())
            .map_err(|_| invalid_policy("the policy is not valid base64."))?;
        if raw.len() > MAX_POLICY {
            return Err(invalid_policy(format!(
                "the policy is larger than {MAX_POLICY} bytes."
            )));
        }
        let doc: Value = serde_json::from_slice(&raw)
            .map_err(|e| invalid_policy(format!("Invalid JSON: {e}.")))?;
        let obj = doc
            .as_object()
            .ok_or_else(|| invalid_policy("the policy is not a JSON object."))?;
        let expiration = obj
            .get("expiration")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_policy("Policy missing expiration."))?;
        // ISO 8601 as AWS requires it: a `T` between date and time (RFC 3339 would also let a
        // space through, which S3 refuses).
        let iso = expiration.as_bytes().get(10).is_some_and(|b| *b == b'T');
        let expiration = OffsetDateTime::parse(expiration, &Rfc3339)
            .ok()
            .filter(|_| iso)
            .ok_or_else(|| invalid_policy(format!("Invalid 'expiration' value: '{expiration}'")))?;
        let conditions = obj
            .get("conditions")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid_policy("Policy missing conditions."))?;
        let conditions = conditions
            .iter()
            .map(parse_condition)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PostPolicy {
            expiration,
            conditions,
        })
    }

    /// The inclusive size bounds of the file, if the policy sets them.
    fn length_range(&self) -> Option<(u64, u64)> {
        self.conditions.iter().find_map(|c| match c {
            Condition::ContentLengthRange { min, max } => Some((*min, *max)),
            _ => None,
        })
    }

    /// Checks every `eq` and `starts-with` condition against the form, and that every form
    /// field is covered by a condition. `value_of` answers for `bucket`, `key` and the fields.
    fn check(&self, form: &Form, bucket: &str, key: &str) -> Result<(), S3Error> {
        let value_of = |field: &str| -> Option<String> {
            match field {
                "bucket" => Some(bucket.to_owned()),
                "key" => Some(key.to_owned()),
                _ => form.get(field).map(str::to_owned),
            }
        };
        for c in &self.conditions {
            let ok = match c {
                Condition::Eq { field, value } => value_of(field).as_deref() == Some(value),
                Condition::StartsWith { field, prefix } => match value_of(field) {
                    // A Content-Type may list several types; each must match.
                    Some(v) if field == "content-type" => {
                        v.split(',').all(|t| t.trim().starts_with(prefix.as_str()))
                    }
                    Some(v) => v.starts_with(prefix.as_str()),
                    None => false,
                },
                Condition::ContentLengthRange { .. } => true,
            };
            if !ok {
                return Err(denied(format!("Policy Condition failed: {}", c.describe())));
            }
        }
        for (name, _) in &form.fields {
            let exempt = matches!(
                name.as_str(),
                "policy" | "x-amz-signature" | "file" | "awsaccesskeyid" | "signature"
            ) || name.starts_with("x-ignore-");
            let covered = self.conditions.iter().any(|c| match c {
                Condition::Eq { field, .. } | Condition::StartsWith { field, .. } => field == name,
                Condition::ContentLengthRange { .. } => false,
            });
            if !exempt && !covered {
                return Err(denied(format!("Extra input fields: {name}")));
            }
        }
        Ok(())
    }
}

fn parse_condition(v: &Value) -> Result<Condition, S3Error> {
    let bad = || invalid_policy(format!("Invalid Condition: {v}"));
    let field_name = |s: &str| -> Result<String, S3Error> {
        Ok(s.strip_prefix('$').ok_or_else(bad)?.to_ascii_lowercase())
    };
    match v {
        Value::Object(map) if map.len() == 1 => {
            let (field, value) = map.iter().next().ok_or_else(bad)?;
            let value = value.as_str().ok_or_else(bad)?;
            Ok(Condition::Eq {
                field: field.trim_start_matches('$').to_ascii_lowercase(),
                value: value.to_owned(),
            })
        }
        Value::Array(items) if items.len() == 3 => {
            let op = items[0].as_str().ok_or_else(bad)?.to_ascii_lowercase();
            match op.as_str() {
                "eq" | "starts-with" => {
                    let field = field_name(items[1].as_str().ok_or_else(bad)?)?;
                    let value = items[2].as_str().ok_or_else(bad)?.to_owned();
                    Ok(if op == "eq" {
                        Condition::Eq { field, value }
                    } else {
                        Condition::StartsWith {
                            field,
                            prefix: value,
                        }
                    })
                }
                "content-length-range" => {
                    let num = |x: &Value| {
                        x.as_u64()
                            .or_else(|| x.as_str().and_then(|s| s.trim().parse().ok()))
                    };
                    let min = num(&items[1]).ok_or_else(bad)?;
                    let max = num(&items[2]).ok_or_else(bad)?;
                    if min > max {
                        return Err(bad());
                    }
                    Ok(Condition::ContentLengthRange { min, max })
                }
                _ => Err(invalid_policy(format!(
                    "Invalid Condition: unknown operation {:?}.",
                    items[0]
                ))),
            }
        }
        _ => Err(bad()),
    }
}

/// The fields of the form before `file`: names lower-case (S3 matches them without case),
/// values as sent, in order.
#[derive(Debug, Default)]
struct Form {
    fields: Vec<(String, String)>,
}

impl Form {
    fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn require(&self, name: &str) -> Result<&str, S3Error> {
        self.get(name).ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::InvalidArgument,
                format!("Bucket POST must contain a field named '{name}'.  If it is specified, please check the order of the fields."),
            )
        })
    }
}

fn malformed_post(detail: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        S3ErrorCode::MalformedPOSTRequest,
        format!(
            "{} ({detail})",
            S3ErrorCode::MalformedPOSTRequest.default_message()
        ),
    )
}

fn multer_error(e: multer::Error) -> ApiError {
    match e {
        multer::Error::StreamReadFailed(inner) => {
            // Our own limit, raised inside the body stream, comes back through the parser.
            match inner
                .downcast_ref::<io::Error>()
                .and_then(signature::s3_error_of)
            {
                Some(e) => e.into(),
                None => ApiError::new(
                    S3ErrorCode::IncompleteBody,
                    format!("The request body could not be read completely: {inner}."),
                ),
            }
        }
        other => malformed_post(other),
    }
}

/// A body chunk as slices of at most `size` bytes (no copy); an error stays one item.
fn pieces(chunk: io::Result<Bytes>, size: usize) -> Vec<io::Result<Bytes>> {
    match chunk {
        Ok(mut bytes) if bytes.len() > size => {
            let mut out = Vec::with_capacity(bytes.len().div_ceil(size));
            while !bytes.is_empty() {
                out.push(Ok(bytes.split_to(size.min(bytes.len()))));
            }
            out
        }
        other => vec![other],
    }
}

/// Handles `POST /bucket` with a form. Called before any other authentication: nothing is
/// written unless the policy signature, expiration and conditions all check out.
pub(crate) async fn post_object(
    state: &AppState,
    parts: &Parts,
    body: Body,
    bucket: &str,
    virtual_host: bool,
    bytes_in: Arc<AtomicU64>,
) -> ApiResult<Response> {
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let boundary = multer::parse_boundary(content_type).map_err(malformed_post)?;
    // Until the file part starts, at most MAX_PREAMBLE bytes are read.
    let in_preamble = Arc::new(AtomicBool::new(true));
    let flag = in_preamble.clone();
    let mut preamble = 0u64;
    let splitting = in_preamble.clone();
    let body = timed_stream(counted_stream(body, bytes_in.clone()), state.body_timeouts)
        .flat_map(move |chunk| {
            // Only the preamble is cut up; the file's bytes pass as they came.
            let piece = if splitting.load(Ordering::Relaxed) {
                PREAMBLE_PIECE
            } else {
                usize::MAX
            };
            futures::stream::iter(pieces(chunk, piece))
        })
        .map(move |chunk| {
            let chunk = chunk?;
            if flag.load(Ordering::Relaxed) {
                preamble += chunk.len() as u64;
                if preamble > MAX_PREAMBLE {
                    return Err(io::Error::other(S3Error::from_code(
                        S3ErrorCode::MaxPostPreDataLengthExceededError,
                    )));
                }
            }
            Ok(chunk)
        });
    let mut multipart = multer::Multipart::new(body, boundary);
    let result = upload(
        state,
        parts,
        &mut multipart,
        &in_preamble,
        bucket,
        virtual_host,
    )
    .await;
    if result.is_err() {
        drain(&mut multipart, &bytes_in).await;
    }
    result
}

/// The most body bytes read, after a refusal, to reach the end of the form.
const DRAIN_LIMIT: u64 = 8 * 1024 * 1024;
/// How long reading the rest of a refused form may take.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads (and drops) what is left of a refused form, up to [`DRAIN_LIMIT`] bytes and
/// [`DRAIN_TIME`], so that a browser still sending it gets to read the error instead of a reset
/// connection. A larger or slower remainder is cut off.
async fn drain(multipart: &mut multer::Multipart<'static>, bytes_in: &AtomicU64) {
    let start = bytes_in.load(Ordering::Relaxed);
    let work = async {
        while let Ok(Some(mut field)) = multipart.next_field().await {
            while let Ok(Some(_)) = field.chunk().await {
                if bytes_in.load(Ordering::Relaxed).saturating_sub(start) > DRAIN_LIMIT {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, work).await;
}

/// Reads the fields, authenticates the form, checks the policy and stores the file.
async fn upload(
    state: &AppState,
    parts: &Parts,
    multipart: &mut multer::Multipart<'static>,
    in_preamble: &AtomicBool,
    bucket: &str,
    virtual_host: bool,
) -> ApiResult<Response> {
    // The fields before `file`, bounded.
    let mut form = Form::default();
    let mut used = 0usize;
    let file = loop {
        let Some(mut field) = multipart.next_field().await.map_err(multer_error)? else {
            return Err(S3ErrorCode::IncorrectNumberOfFilesInPostRequest.into());
        };
        let name = field.name().unwrap_or("").to_ascii_lowercase();
        if name == "file" {
            in_preamble.store(false, Ordering::Relaxed);
            break field;
        }
        used += FIELD_OVERHEAD + name.len();
        let mut value = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(multer_error)? {
            used += chunk.len();
            if used > MAX_FORM_FIELDS {
                return Err(S3ErrorCode::MaxPostPreDataLengthExceededError.into());
            }
            value.extend_from_slice(&chunk);
        }
        if used > MAX_FORM_FIELDS {
            return Err(S3ErrorCode::MaxPostPreDataLengthExceededError.into());
        }
        let value = String::from_utf8(value)
            .map_err(|_| malformed_post(format!("the value of field {name:?} is not UTF-8")))?;
        if name.is_empty() {
            return Err(malformed_post("a form field has no name"));
        }
        if form.get(&name).is_some() {
            return Err(ApiError::new(
                S3ErrorCode::InvalidArgument,
                format!("The form field {name:?} is given more than once."),
            ));
        }
        form.fields.push((name, value));
    };

    // Authentication: the policy and its signature.
    let session = crate::server::session(state, form.get("x-amz-security-token"))?;
    let keys = session.as_ref().map_or(&state.auth, |(keys, _)| keys);
    let (policy, signer) = authenticate(keys, &form)?;
    if policy.expiration <= OffsetDateTime::from(SystemTime::now()) {
        return Err(denied("Policy expired.").into());
    }
    let filename = file.file_name().unwrap_or("").to_owned();
    let key = form.require("key")?.replace("${filename}", &filename);
    policy.check(&form, bucket, &key)?;
    // Authorized as a PutObject of that key by the form's signer.
    let caller = match session {
        Some((_, caller)) => caller,
        None => crate::server::caller_of(state, &signer)?,
    };
    let endpoint = crate::router::Endpoint::PutObject {
        bucket: bucket.to_owned(),
        key: key.clone(),
    };
    let policy_ctx = crate::authz::context(&endpoint, parts, &caller);
    let needs = crate::authz::needs(&endpoint, &parts.headers)?;
    let bucket_policies = crate::server::bucket_policies(state, &caller, &needs, None).await?;
    crate::acl_eval::authorize_with_acls(
        state,
        &caller,
        &endpoint,
        parts,
        &needs,
        &policy_ctx,
        &bucket_policies,
    )
    .await?;

    // What the object is stored with.
    let file_type = file.content_type().map(|m| m.to_string());
    let headers = form_headers(&form, file_type.as_deref())?;
    check_acl_headers(&headers)?;
    // Server-side encryption: the form's SSE fields, else the bucket's default rule.
    let secure = parts
        .extensions
        .get::<crate::authz::ConnInfo>()
        .is_some_and(|c| c.secure);
    let (encryption, customer_md5) =
        crate::sse::encryption_for(&headers, secure, &state.sse, &*state.layer, bucket, &key)
            .await?;
    let mut stored = stored_headers(&headers)?;
    crate::acl::store_request_acl(state, bucket, &headers, &mut stored).await?;
    // The `tagging` field is a Tagging document (the header form is for PutObject).
    if let Some(doc) = form.get("tagging") {
        let tags = crate::tagging::parse_tagging(doc.as_bytes(), crate::tagging::MAX_OBJECT_TAGS)?;
        if !tags.is_empty() {
            stored.insert(
                quarry_object::TAGS_HEADER.to_owned(),
                crate::tagging::encode(&tags),
            );
        }
    }
    let opts = PutOptions {
        size: None,
        content_md5: None,
        headers: stored,
        user_meta: user_metadata(&headers)?,
        checksums: BTreeMap::new(),
        encryption,
        ..PutOptions::default()
    };
    let (min, max) = policy.length_range().unwrap_or((0, MAX_PUT_SIZE));
    let body = LimitedFile {
        field: file,
        got: 0,
        min,
        max: max.min(MAX_PUT_SIZE),
        done: false,
    };
    let info = state
        .layer
        .put_object(bucket, &key, Box::pin(body), opts)
        .await?;
    let mut response = success_response(&form, parts, bucket, &key, &info.etag, virtual_host);
    crate::sse::response_headers(response.headers_mut(), &info, customer_md5.as_deref());
    Ok(response)
}

/// Checks the signature fields and returns the decoded policy. A form without a policy is an
/// anonymous upload, which Quarry does not accept.
fn authenticate(keys: &AuthConfig, form: &Form) -> Result<(PostPolicy, String), S3Error> {
    let Some(policy_b64) = form.get("policy") else {
        return Err(S3Error::new(
            S3ErrorCode::AccessDenied,
            "Access Denied. Anonymous uploads are not supported; sign the form's policy with AWS Signature Version 4.",
        ));
    };
    // SigV2 (`AWSAccessKeyId` + `signature`), what older forms and browsers' pages send.
    let sigv2 = form.get("awsaccesskeyid").is_some() || form.get("signature").is_some();
    if sigv2 && form.get("x-amz-signature").is_none() {
        let access_key = form.require("awsaccesskeyid")?;
        let signature = form.require("signature")?;
        let signer = signature::verify_post_signature_v2(keys, access_key, policy_b64, signature)?;
        return Ok((PostPolicy::parse(policy_b64)?, signer.access_key));
    }
    let algorithm = form.require("x-amz-algorithm")?;
    if algorithm != "AWS4-HMAC-SHA256" {
        return Err(S3Error::new(
            S3ErrorCode::InvalidArgument,
            format!(
                "Unsupported x-amz-algorithm {algorithm:?}: only AWS4-HMAC-SHA256 is supported."
            ),
        ));
    }
    let credential = form.require("x-amz-credential")?;
    let amz_date = form.require("x-amz-date")?;
    let signature = form.require("x-amz-signature")?;
    let signer =
        signature::verify_post_signature(keys, credential, amz_date, policy_b64, signature)?;
    Ok((PostPolicy::parse(policy_b64)?, signer.access_key))
}

/// Form fields that are also request headers of a PutObject, as a header map, so the PutObject
/// rules for them apply unchanged. The file part's own Content-Type is the default type.
fn form_headers(form: &Form, file_type: Option<&str>) -> ApiResult<HeaderMap> {
    const UNSUPPORTED: &[(&str, &str)] = &[
        ("x-amz-object-lock-", "Object lock"),
        ("x-amz-website-redirect-location", "Website redirects"),
        ("x-amz-checksum-", "Checksums of POST uploads"),
    ];
    let mut headers = HeaderMap::new();
    for (name, value) in &form.fields {
        if let Some((_, what)) = UNSUPPORTED.iter().find(|(p, _)| name.starts_with(p)) {
            return Err(ApiError::new(
                S3ErrorCode::NotImplemented,
                format!("{what} is not implemented by Quarry."),
            ));
        }
        if name == "x-amz-storage-class" && value != "STANDARD" {
            return Err(ApiError::new(
                S3ErrorCode::InvalidStorageClass,
                format!("The storage class {value:?} is not valid: Quarry stores every object as STANDARD."),
            ));
        }
        let header = match name.as_str() {
            "acl" => "x-amz-acl",
            // Checked by crate::sse as a PutObject's headers.
            n if n.starts_with("x-amz-server-side-encryption") => n,
            n if STORED_HEADERS.contains(&n) || n.starts_with("x-amz-meta-") => n,
            _ => continue,
        };
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(header.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) else {
            return Err(ApiError::new(
                S3ErrorCode::InvalidArgument,
                format!("The form field {name:?} is not a valid header name or value."),
            ));
        };
        headers.insert(n, v);
    }
    if !headers.contains_key(CONTENT_TYPE) {
        if let Some(v) = file_type.and_then(|t| HeaderValue::from_str(t).ok()) {
            headers.insert(CONTENT_TYPE, v);
        }
    }
    Ok(headers)
}

fn success_response(
    form: &Form,
    parts: &Parts,
    bucket: &str,
    key: &str,
    etag: &str,
    virtual_host: bool,
) -> Response {
    let quoted = format!("\"{etag}\"");
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost");
    let location = if virtual_host {
        format!("http://{host}/{}", xml::url_encode(key))
    } else {
        format!("http://{host}/{bucket}/{}", xml::url_encode(key))
    };

    let redirect = form
        .get("success_action_redirect")
        .or_else(|| form.get("redirect"))
        .filter(|r| !r.is_empty());
    let mut response = if let Some(url) = redirect {
        let sep = if url.contains('?') { '&' } else { '?' };
        let target = format!(
            "{url}{sep}bucket={}&key={}&etag={}",
            xml::url_encode(bucket),
            xml::url_encode(key),
            xml::url_encode(&quoted)
        );
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::SEE_OTHER;
        if let Ok(v) = HeaderValue::from_str(&target) {
            r.headers_mut().insert(LOCATION, v);
        }
        r
    } else {
        match form.get("success_action_status") {
            Some("200") => Response::new(Body::empty()),
            Some("201") => {
                let mut w = XmlWriter::new("PostResponse");
                w.elem("Location", &location)
                    .elem("Bucket", bucket)
                    .elem("Key", key)
                    .elem("ETag", &quoted);
                let mut r = xml::xml_response(w.finish("PostResponse"));
                *r.status_mut() = StatusCode::CREATED;
                r
            }
            _ => {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = StatusCode::NO_CONTENT;
                r
            }
        }
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&quoted) {
        h.insert(ETAG, v);
    }
    if response.status() != StatusCode::SEE_OTHER {
        if let Ok(v) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(LOCATION, v);
        }
    }
    response
}

/// The `file` part as the object's body, held to the policy's `content-length-range`: more
/// than `max` bytes fails as soon as they arrive, fewer than `min` fails at the end; both before
/// end-of-stream, so the object layer commits nothing.
struct LimitedFile {
    field: multer::Field<'static>,
    got: u64,
    min: u64,
    max: u64,
    done: bool,
}

fn stream_error(e: S3Error) -> io::Error {
    io::Error::other(e)
}

impl Stream for LimitedFile {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        match Pin::new(&mut this.field).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(chunk))) => {
                this.got += chunk.len() as u64;
                if this.got > this.max {
                    this.done = true;
                    return Poll::Ready(Some(Err(stream_error(S3Error::new(
                        S3ErrorCode::EntityTooLarge,
                        format!(
                            "Your proposed upload exceeds the maximum allowed size: at most {} bytes are allowed.",
                            this.max
                        ),
                    )))));
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.done = true;
                let err = match e {
                    multer::Error::StreamReadFailed(inner) => {
                        io::Error::new(io::ErrorKind::UnexpectedEof, inner.to_string())
                    }
                    other => stream_error(S3Error::new(
                        S3ErrorCode::MalformedPOSTRequest,
                        format!(
                            "{} ({other})",
                            S3ErrorCode::MalformedPOSTRequest.default_message()
                        ),
                    )),
                };
                Poll::Ready(Some(Err(err)))
            }
            Poll::Ready(None) => {
                this.done = true;
                if this.got < this.min {
                    return Poll::Ready(Some(Err(stream_error(S3Error::new(
                        S3ErrorCode::EntityTooSmall,
                        format!(
                            "Your proposed upload is smaller than the minimum allowed size: {} of at least {} bytes.",
                            this.got, this.min
                        ),
                    )))));
                }
                Poll::Ready(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(json: &str) -> String {
        STANDARD.encode(json)
    }

    fn form(fields: &[(&str, &str)]) -> Form {
        Form {
            fields: fields
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    const POLICY: &str = r#"{"expiration": "2030-01-01T12:00:00.000Z",
        "conditions": [
          {"bucket": "bkt"},
          ["starts-with", "$key", "user/"],
          {"success_action_status": "201"},
          ["eq", "$Content-Type", "image/png"],
          ["starts-with", "$x-amz-meta-tag", ""],
          ["content-length-range", 1, 1048576],
          {"x-amz-algorithm": "AWS4-HMAC-SHA256"},
          {"x-amz-credential": "AK/20300101/us-east-1/s3/aws4_request"},
          {"x-amz-date": "20300101T000000Z"}
        ]}"#;

    #[test]
    fn parses_policies() {
        let p = PostPolicy::parse(&b64(POLICY)).unwrap();
        assert_eq!(p.expiration.year(), 2030);
        assert_eq!(p.conditions.len(), 9);
        assert_eq!(
            p.conditions[0],
            Condition::Eq {
                field: "bucket".into(),
                value: "bkt".into()
            }
        );
        assert_eq!(
            p.conditions[3],
            Condition::Eq {
                field: "content-type".into(),
                value: "image/png".into()
            }
        );
        assert_eq!(p.length_range(), Some((1, 1048576)));
    }

    #[test]
    fn refuses_bad_policies() {
        for bad in [
            "not base64 !!",
            &b64("not json"),
            &b64(r#"{"conditions": []}"#),
            &b64(r#"{"expiration": "tomorrow", "conditions": []}"#),
            &b64(r#"{"expiration": "2030-01-01 00:00:00+00:00", "conditions": []}"#),
            &b64(r#"{"expiration": "2030-01-01T00:00:00Z"}"#),
            &b64(r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [["eq", "key", "x"]]}"#),
            &b64(r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [["in", "$key", "x"]]}"#),
            &b64(
                r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [["content-length-range", 9, 1]]}"#,
            ),
            &b64(r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [{"a": "1", "b": "2"}]}"#),
            &b64(r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": ["key"]}"#),
        ] {
            let err = PostPolicy::parse(bad).unwrap_err();
            assert_eq!(err.code, S3ErrorCode::InvalidPolicyDocument, "{bad}");
        }
    }

    #[test]
    fn checks_conditions_and_extra_fields() {
        let p = PostPolicy::parse(&b64(POLICY)).unwrap();
        let good = [
            ("key", "user/${filename}"),
            ("success_action_status", "201"),
            ("content-type", "image/png"),
            ("x-amz-meta-tag", "anything"),
            ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
            ("x-amz-credential", "AK/20300101/us-east-1/s3/aws4_request"),
            ("x-amz-date", "20300101T000000Z"),
            ("policy", "..."),
            ("x-amz-signature", "..."),
            ("x-ignore-me", "1"),
        ];
        p.check(&form(&good), "bkt", "user/a.png").unwrap();

        let fail = |f: &[(&str, &str)], bucket: &str, key: &str| {
            let e = p.check(&form(f), bucket, key).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::AccessDenied);
            e.message
        };
        let msg = fail(&good, "other", "user/a.png");
        assert!(msg.contains(r#"["eq", "$bucket", "bkt"]"#), "{msg}");
        let msg = fail(&good, "bkt", "admin/a.png");
        assert!(msg.contains("starts-with"), "{msg}");
        let mut wrong_type = good.to_vec();
        wrong_type[2] = ("content-type", "text/html");
        fail(&wrong_type, "bkt", "user/a.png");
        let mut extra = good.to_vec();
        extra.push(("x-amz-meta-other", "1"));
        let msg = fail(&extra, "bkt", "user/a.png");
        assert!(
            msg.contains("Extra input fields: x-amz-meta-other"),
            "{msg}"
        );
        // A missing field fails its condition.
        let missing: Vec<_> = good
            .iter()
            .filter(|(n, _)| *n != "content-type")
            .copied()
            .collect();
        fail(&missing, "bkt", "user/a.png");
    }

    #[test]
    fn content_type_starts_with_checks_every_type() {
        let p = PostPolicy::parse(&b64(
            r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [["starts-with", "$Content-Type", "image/"]]}"#,
        ))
        .unwrap();
        p.check(&form(&[("content-type", "image/png, image/gif")]), "b", "k")
            .unwrap();
        assert!(p
            .check(&form(&[("content-type", "image/png, text/html")]), "b", "k")
            .is_err());
    }
}
