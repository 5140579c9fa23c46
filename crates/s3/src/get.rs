//! GetObject and HeadObject: the `Range` header, conditional requests (`If-Match`,
//! `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since`), `response-*` header overrides,
//! one part of a multipart object (`?partNumber=N`), and the response headers of an object. The
//! body streams from the object layer to the socket.

use std::time::SystemTime;

use axum::body::Body;
use axum::response::Response;
use futures::TryStreamExt;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use quarry_object::{HttpRange, ObjectInfo, VersionId};

use crate::api_error::{ApiError, ApiResult};
use crate::error::S3ErrorCode;
use crate::headers::{checksum_headers, set_header, STORED_HEADERS};
use crate::multipart::part_number;
use crate::router::Query;
use crate::server::ReqCtx;
use crate::versioning::version_header;
use crate::xml::{http_date, system_time};

/// What S3 sends as `Content-Type` for an object stored without one.
pub const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// `response-*` query parameters and the header each overrides.
const RESPONSE_OVERRIDES: &[(&str, HeaderName)] = &[
    ("response-cache-control", header::CACHE_CONTROL),
    ("response-content-disposition", header::CONTENT_DISPOSITION),
    ("response-content-encoding", header::CONTENT_ENCODING),
    ("response-content-language", header::CONTENT_LANGUAGE),
    ("response-content-type", header::CONTENT_TYPE),
    ("response-expires", header::EXPIRES),
];

/// Parses a `Range` header as S3 does: a single `bytes=` range is used; a header S3 would not
/// understand (another unit, several ranges, garbage) is ignored and the whole object is sent;
/// a range whose first byte is after its last is `InvalidRange`.
pub fn parse_range(value: &str) -> ApiResult<Option<HttpRange>> {
    let value = value.trim();
    let Some(unit_end) = value.find('=') else {
        return Ok(None);
    };
    if !value[..unit_end].trim().eq_ignore_ascii_case("bytes") {
        return Ok(None);
    }
    let spec = value[unit_end + 1..].trim();
    if spec.contains(',') {
        return Ok(None);
    }
    let Some((first, last)) = spec.split_once('-') else {
        return Ok(None);
    };
    let (first, last) = (first.trim(), last.trim());
    let number = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let range = match (first.is_empty(), last.is_empty()) {
        (true, true) => None,
        (true, false) => number(last).map(HttpRange::Suffix),
        (false, true) => number(first).map(HttpRange::From),
        (false, false) => match (number(first), number(last)) {
            (Some(a), Some(b)) if a > b => {
                return Err(ApiError::new(
                    S3ErrorCode::InvalidRange,
                    format!("The range {value:?} ends before it starts."),
                ))
            }
            (Some(a), Some(b)) => Some(HttpRange::FromTo(a, b)),
            _ => None,
        },
    };
    Ok(range)
}

/// The outcome of the conditional headers against an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    Proceed,
    NotModified,
    Failed,
}

/// Evaluates conditional headers in the order RFC 9110 (and S3) give them: `If-Match`, else
/// `If-Unmodified-Since`; then `If-None-Match`, else `If-Modified-Since`. Dates compare at
/// one-second resolution, the resolution of `Last-Modified`.
pub fn evaluate_preconditions(headers: &HeaderMap, etag: &str, mod_time_ns: i64) -> Precondition {
    let text = |name: HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let date = |name: HeaderName| text(name).and_then(|v| httpdate::parse_http_date(v).ok());
    let modified_secs = secs(system_time(mod_time_ns));
    if let Some(if_match) = text(header::IF_MATCH) {
        if !etag_list_matches(if_match, etag) {
            return Precondition::Failed;
        }
    } else if let Some(since) = date(header::IF_UNMODIFIED_SINCE) {
        if modified_secs > secs(since) {
            return Precondition::Failed;
        }
    }
    if let Some(if_none_match) = text(header::IF_NONE_MATCH) {
        if etag_list_matches(if_none_match, etag) {
            return Precondition::NotModified;
        }
    } else if let Some(since) = date(header::IF_MODIFIED_SINCE) {
        if modified_secs <= secs(since) {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether a comma-separated entity-tag list (`*`, `"abc"`, `W/"abc"`, or bare `abc`) names `etag`.
pub(crate) fn etag_list_matches(list: &str, etag: &str) -> bool {
    list.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.trim_start_matches("W/").trim_matches('"') == etag
    })
}

/// What a GetObject or HeadObject reads, from its query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectRead {
    /// The object, or the bytes its `Range` header names, with the `response-*` overrides.
    Whole {
        overrides: Vec<(HeaderName, HeaderValue)>,
    },
    /// `?partNumber=N`: that part of an object uploaded in parts (a whole object is part 1).
    Part { number: u32 },
}

impl ObjectRead {
    pub(crate) fn from_query(q: &Query) -> ApiResult<ObjectRead> {
        match q.get("partNumber") {
            Some(n) => Ok(ObjectRead::Part {
                number: part_number(Some(n))?,
            }),
            None => Ok(ObjectRead::Whole {
                overrides: response_overrides(q)?,
            }),
        }
    }
}

pub async fn get_object(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    read: ObjectRead,
    version: Option<VersionId>,
    head: bool,
) -> ApiResult<Response> {
    let overrides = match read {
        ObjectRead::Whole { overrides } => overrides,
        ObjectRead::Part { number } => {
            return get_object_part(ctx, bucket, key, number, head).await
        }
    };
    let headers = &ctx.parts.headers;
    let (customer, customer_md5) = read_customer_key(ctx)?;
    let range = match headers.get(header::RANGE) {
        Some(v) => parse_range(&String::from_utf8_lossy(v.as_bytes()))?,
        None => None,
    };
    let conditional = [
        header::IF_MATCH,
        header::IF_NONE_MATCH,
        header::IF_MODIFIED_SINCE,
        header::IF_UNMODIFIED_SINCE,
    ]
    .iter()
    .any(|h| headers.contains_key(h));
    let checksum_mode = headers
        .get("x-amz-checksum-mode")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"ENABLED"));

    if head {
        let info = ctx
            .layer()
            .object_version_info(bucket, key, version)
            .await?;
        check_customer_key(ctx, &info, customer.as_ref())?;
        check_preconditions(headers, &info)?;
        let span = match range {
            Some(r) => r.resolve(info.size)?,
            None => (0, info.size),
        };
        let mut response = object_response(
            Body::empty(),
            &info,
            span,
            range.is_some(),
            checksum_mode,
            overrides,
        );
        crate::sse::response_headers(response.headers_mut(), &info, customer_md5.as_deref());
        version_header(ctx, bucket, response.headers_mut(), &info).await?;
        if version.is_none() {
            crate::lifecycle::expiration_header(ctx, bucket, response.headers_mut(), &info).await;
        }
        return Ok(response);
    }
    // A conditional GET checks the metadata before it opens the body.
    if conditional {
        let info = ctx
            .layer()
            .object_version_info(bucket, key, version)
            .await?;
        check_preconditions(headers, &info)?;
    }
    let (opener, refusal) = crate::sse::opener(&ctx.state.sse, customer.clone());
    let reader = ctx
        .layer()
        .get_object_decrypted(bucket, key, version, range, opener)
        .await
        .map_err(|e| crate::sse::refusal_or(&refusal, e))?;
    if customer.is_some() && !reader.info.is_encrypted() {
        crate::sse::check_read_headers(&reader.info, customer.as_ref())?;
    }
    let stream = reader
        .body
        .inspect_err(|e| tracing::error!(error = %e, "object body stream failed"));
    let mut response = object_response(
        Body::from_stream(stream),
        &reader.info,
        reader.range,
        range.is_some(),
        checksum_mode,
        overrides,
    );
    crate::sse::response_headers(
        response.headers_mut(),
        &reader.info,
        customer_md5.as_deref(),
    );
    version_header(ctx, bucket, response.headers_mut(), &reader.info).await?;
    if version.is_none() {
        crate::lifecycle::expiration_header(ctx, bucket, response.headers_mut(), &reader.info)
            .await;
    }
    Ok(response)
}

/// An SSE-C object answers only to its key; a key sent for an object that has none is refused.
/// Checked from the metadata, without reading data (HEAD, GetObjectAttributes).
pub(crate) fn check_customer_key(
    ctx: &ReqCtx,
    info: &ObjectInfo,
    customer: Option<&quarry_crypt::CustomerKey>,
) -> ApiResult<()> {
    if info.is_encrypted() || customer.is_some() {
        crate::sse::check_read_headers(info, customer)?;
        if customer.is_some() {
            crate::sse::open_key(&ctx.state.sse, info, customer)?;
        }
    }
    Ok(())
}

/// A read's SSE-C key (and the MD5 its answer echoes); SSE-S3 and SSE-KMS headers are refused
/// on reads, as in AWS.
pub(crate) fn read_customer_key(
    ctx: &ReqCtx,
) -> ApiResult<(Option<quarry_crypt::CustomerKey>, Option<String>)> {
    let headers = &ctx.parts.headers;
    let customer = crate::sse::customer_key(
        headers,
        crate::sse::CUSTOMER,
        ctx.secure(),
        ctx.state.sse.allow_http_sse_c,
    )?;
    crate::sse::refuse_write_headers_on_read(headers)?;
    let md5 = customer.as_ref().map(|c| c.md5_b64());
    Ok((customer, md5))
}

/// GetObject and HeadObject with `partNumber`: that part's bytes of a completed object, as a 206
/// with `Content-Range` and `x-amz-mp-parts-count`.
async fn get_object_part(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    number: u32,
    head: bool,
) -> ApiResult<Response> {
    let headers = &ctx.parts.headers;
    if headers.contains_key(header::RANGE) {
        return Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter",
        ));
    }
    let (customer, customer_md5) = read_customer_key(ctx)?;
    let (opener, refusal) = crate::sse::opener(&ctx.state.sse, customer.clone());
    let reader = ctx
        .layer()
        .get_object_part_decrypted(bucket, key, number, opener)
        .await
        .map_err(|e| crate::sse::refusal_or(&refusal, e))?;
    if customer.is_some() && !reader.info.is_encrypted() {
        crate::sse::check_read_headers(&reader.info, customer.as_ref())?;
    }
    check_preconditions(headers, &reader.info)?;
    let body = if head {
        Body::empty()
    } else {
        Body::from_stream(
            reader
                .body
                .inspect_err(|e| tracing::error!(error = %e, "object part stream failed")),
        )
    };
    let (_, len) = reader.range;
    let mut response =
        object_response(body, &reader.info, reader.range, len > 0, false, Vec::new());
    // Only objects uploaded in parts (ETag `<md5>-N`) say how many parts they have.
    if reader.info.etag.contains('-') {
        set_header(
            response.headers_mut(),
            "x-amz-mp-parts-count",
            &reader.info.parts.to_string(),
        );
    }
    crate::sse::response_headers(
        response.headers_mut(),
        &reader.info,
        customer_md5.as_deref(),
    );
    version_header(ctx, bucket, response.headers_mut(), &reader.info).await?;
    Ok(response)
}

/// A 200 (or 206 for a range) with the object's headers around `body`.
fn object_response(
    body: Body,
    info: &ObjectInfo,
    (offset, length): (u64, u64),
    ranged: bool,
    checksum_mode: bool,
    overrides: Vec<(HeaderName, HeaderValue)>,
) -> Response {
    let mut response = Response::new(body);
    let out = response.headers_mut();
    // Checksums describe the whole object: only sent with it.
    object_headers(out, info, checksum_mode && !ranged);
    set_header(out, header::CONTENT_LENGTH.as_str(), &length.to_string());
    if ranged {
        let end = (offset + length).saturating_sub(1);
        set_header(
            out,
            header::CONTENT_RANGE.as_str(),
            &format!("bytes {offset}-{end}/{}", info.size),
        );
    }
    for (name, value) in overrides {
        out.insert(name, value);
    }
    if ranged {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    response
}

fn check_preconditions(headers: &HeaderMap, info: &ObjectInfo) -> ApiResult<()> {
    match evaluate_preconditions(headers, &info.etag, info.mod_time_ns) {
        Precondition::Proceed => Ok(()),
        Precondition::Failed => Err(S3ErrorCode::PreconditionFailed.into()),
        Precondition::NotModified => {
            let mut err = ApiError::from(S3ErrorCode::NotModified);
            if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", info.etag)) {
                err.headers.push((header::ETAG, v));
            }
            if let Ok(v) = HeaderValue::from_str(&http_date(info.mod_time_ns)) {
                err.headers.push((header::LAST_MODIFIED, v));
            }
            Err(err)
        }
    }
}

/// The `response-*` overrides of a GET, validated as header values.
fn response_overrides(query: &Query) -> ApiResult<Vec<(HeaderName, HeaderValue)>> {
    let mut out = Vec::new();
    for (param, name) in RESPONSE_OVERRIDES {
        if let Some(value) = query.get(param) {
            let value = HeaderValue::from_str(value).map_err(|_| {
                ApiError::new(
                    S3ErrorCode::InvalidArgument,
                    format!("The value of {param} is not a valid header value."),
                )
            })?;
            out.push((name.clone(), value));
        }
    }
    Ok(out)
}

/// A user metadata value as S3 returns it: as stored when it is printable US-ASCII, else as one
/// RFC 2047 encoded word, `=?UTF-8?B?<base64>?=` ("encoded as per RFC 2047 to make them
/// mail-safe before returning", S3 User Guide, object metadata). Raw UTF-8 in a header is read as
/// Latin-1 by some clients and refused by others.
pub fn meta_header_text(value: &str) -> std::borrow::Cow<'_, str> {
    use base64::Engine as _;
    if value
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return value.into();
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
    format!("=?UTF-8?B?{b64}?=").into()
}

/// The headers describing an object: type, tag, date, stored headers and user metadata.
pub fn object_headers(out: &mut HeaderMap, info: &ObjectInfo, with_checksums: bool) {
    set_header(out, header::ETAG.as_str(), &format!("\"{}\"", info.etag));
    set_header(
        out,
        header::LAST_MODIFIED.as_str(),
        &http_date(info.mod_time_ns),
    );
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    for &name in STORED_HEADERS {
        if let Some(value) = info.headers.get(name) {
            set_header(out, name, value);
        }
    }
    if !out.contains_key(header::CONTENT_TYPE) {
        out.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(DEFAULT_CONTENT_TYPE),
        );
    }
    for (name, value) in &info.user_meta {
        if let Ok(name) = HeaderName::from_bytes(format!("x-amz-meta-{name}").as_bytes()) {
            // As AWS answers: printable US-ASCII as it is, anything else RFC 2047 encoded. A
            // value stored from bytes that were not UTF-8 (see `headers::meta_value_text`) is
            // read as Latin-1, HTTP's historical charset, before it is encoded.
            let raw = crate::headers::meta_value_bytes(value);
            let text = match std::str::from_utf8(&raw) {
                Ok(t) => std::borrow::Cow::Borrowed(t),
                Err(_) => std::borrow::Cow::Owned(raw.iter().map(|&b| char::from(b)).collect()),
            };
            let header = HeaderValue::from_str(&meta_header_text(&text));
            match header {
                Ok(v) => {
                    out.append(name, v);
                }
                Err(_) => {
                    tracing::warn!(key = %info.key, meta = %name, "stored metadata is not a valid header")
                }
            }
        }
    }
    if with_checksums {
        checksum_headers(out, info);
    }
    crate::tagging::tagging_count_header(out, info);
    crate::object_lock::lock_response_headers(out, info);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_ascii_metadata_is_rfc2047_encoded() {
        assert_eq!(meta_header_text("plain value\t!~"), "plain value\t!~");
        // "Hello Worldé" in UTF-8, base64.
        assert_eq!(
            meta_header_text("Hello World\u{e9}"),
            "=?UTF-8?B?SGVsbG8gV29ybGTDqQ==?="
        );
        assert_eq!(meta_header_text("a\nb"), "=?UTF-8?B?YQpi?=");
    }

    #[test]
    fn range_headers() {
        let ok = |s: &str| parse_range(s).unwrap();
        assert_eq!(ok("bytes=0-9"), Some(HttpRange::FromTo(0, 9)));
        assert_eq!(ok("bytes=5-"), Some(HttpRange::From(5)));
        assert_eq!(ok("bytes=-3"), Some(HttpRange::Suffix(3)));
        assert_eq!(ok("bytes=-0"), Some(HttpRange::Suffix(0)));
        assert_eq!(ok("Bytes = 1 - 2"), Some(HttpRange::FromTo(1, 2)));
        assert_eq!(ok("bytes=3-3"), Some(HttpRange::FromTo(3, 3)));
        // Ignored: the whole object is sent, as S3 does.
        for ignored in [
            "bytes=0-1,4-5",
            "items=0-1",
            "bytes=",
            "bytes=-",
            "bytes=a-b",
            "bytes=1",
            "0-5",
            "bytes=+1-2",
            "bytes=99999999999999999999999-",
        ] {
            assert_eq!(ok(ignored), None, "{ignored}");
        }
        assert_eq!(
            parse_range("bytes=5-2").unwrap_err().code(),
            S3ErrorCode::InvalidRange
        );
    }

    #[test]
    fn ranges_resolve_as_s3() {
        // Resolution against the size lives in the object layer; check the cases the front end relies on.
        assert_eq!(HttpRange::FromTo(0, 99).resolve(10).unwrap(), (0, 10));
        assert_eq!(HttpRange::Suffix(3).resolve(10).unwrap(), (7, 3));
        assert!(HttpRange::From(10).resolve(10).is_err());
    }

    fn h(pairs: &[(HeaderName, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), HeaderValue::from_str(v).unwrap()))
            .collect()
    }

    #[test]
    fn preconditions() {
        let etag = "abc";
        let t = 1_795_947_072_500_000_000; // 10:11:12.5
        let at = "Sun, 29 Nov 2026 10:11:12 GMT";
        let before = "Sun, 29 Nov 2026 10:11:11 GMT";
        use Precondition::*;
        let cases: Vec<(Vec<(HeaderName, &str)>, Precondition)> = vec![
            (vec![], Proceed),
            (vec![(header::IF_MATCH, "\"abc\"")], Proceed),
            (vec![(header::IF_MATCH, "\"x\", \"abc\"")], Proceed),
            (vec![(header::IF_MATCH, "*")], Proceed),
            (vec![(header::IF_MATCH, "\"x\"")], Failed),
            (vec![(header::IF_NONE_MATCH, "\"abc\"")], NotModified),
            (vec![(header::IF_NONE_MATCH, "W/\"abc\"")], NotModified),
            (vec![(header::IF_NONE_MATCH, "\"x\"")], Proceed),
            (vec![(header::IF_MODIFIED_SINCE, at)], NotModified),
            (vec![(header::IF_MODIFIED_SINCE, before)], Proceed),
            (vec![(header::IF_UNMODIFIED_SINCE, at)], Proceed),
            (vec![(header::IF_UNMODIFIED_SINCE, before)], Failed),
            (vec![(header::IF_MODIFIED_SINCE, "garbage")], Proceed),
            // If-Match wins over If-Unmodified-Since; If-None-Match over If-Modified-Since.
            (
                vec![
                    (header::IF_MATCH, "\"abc\""),
                    (header::IF_UNMODIFIED_SINCE, before),
                ],
                Proceed,
            ),
            (
                vec![
                    (header::IF_NONE_MATCH, "\"x\""),
                    (header::IF_MODIFIED_SINCE, at),
                ],
                Proceed,
            ),
            (
                vec![
                    (header::IF_MATCH, "\"x\""),
                    (header::IF_NONE_MATCH, "\"abc\""),
                ],
                Failed,
            ),
        ];
        for (headers, want) in cases {
            assert_eq!(
                evaluate_preconditions(&h(&headers), etag, t),
                want,
                "{headers:?}"
            );
        }
    }

    #[test]
    fn object_headers_include_metadata_and_defaults() {
        let mut info = ObjectInfo {
            bucket: "b".into(),
            key: "k".into(),
            size: 0,
            mod_time_ns: 1_795_947_072_000_000_000,
            etag: "abc".into(),
            headers: Default::default(),
            user_meta: Default::default(),
            checksums: Default::default(),
            parts: 1,
            ..Default::default()
        };
        info.user_meta.insert("color".into(), "blue".into());
        info.checksums.insert("crc32".into(), "AAAAAA==".into());
        info.headers
            .insert("cache-control".into(), "no-cache".into());
        let mut out = HeaderMap::new();
        object_headers(&mut out, &info, false);
        assert_eq!(out[header::ETAG], "\"abc\"");
        assert_eq!(out[header::LAST_MODIFIED], "Sun, 29 Nov 2026 10:11:12 GMT");
        assert_eq!(out[header::CONTENT_TYPE], DEFAULT_CONTENT_TYPE);
        assert_eq!(out[header::CACHE_CONTROL], "no-cache");
        assert_eq!(out["x-amz-meta-color"], "blue");
        assert_eq!(out[header::ACCEPT_RANGES], "bytes");
        assert!(!out.contains_key("x-amz-checksum-crc32"));
        object_headers(&mut out, &info, true);
        assert_eq!(out["x-amz-checksum-crc32"], "AAAAAA==");
        assert_eq!(out["x-amz-checksum-type"], "FULL_OBJECT");
    }

    #[test]
    fn response_overrides_are_validated() {
        let q = Query::parse(Some("response-content-type=text%2Fhtml&response-expires=x")).unwrap();
        let o = response_overrides(&q).unwrap();
        assert!(o.contains(&(header::CONTENT_TYPE, HeaderValue::from_static("text/html"))));
        assert_eq!(o.len(), 2);
        let bad = Query::parse(Some("response-content-type=a%0Ab")).unwrap();
        assert_eq!(
            response_overrides(&bad).unwrap_err().code(),
            S3ErrorCode::InvalidArgument
        );
    }
}
