//! The request headers the write operations share (PutObject, CopyObject, the multipart
//! operations, browser uploads, CreateBucket, the ACL and CORS calls): the checks S3 makes before a
//! byte of the body is read, the headers stored as object metadata, write preconditions, and the
//! checksum headers of a response.
//!
//! Headers asking for something Quarry does not do (server-side encryption,
//! ACL grants, website redirects) are refused with `NotImplemented` rather than ignored: a client
//! that asked for encryption must not believe it got it.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use quarry_object::{ObjectInfo, WritePrecondition};

use crate::api_error::{ApiError, ApiResult};
use crate::error::S3ErrorCode;

/// The most user metadata (`x-amz-meta-*` names and values, in bytes) an object may carry.
pub const MAX_USER_META: usize = 2 * 1024;

/// Standard headers stored with the object and sent back on GET and HEAD.
pub const STORED_HEADERS: &[&str] = &[
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-type",
    "expires",
];

/// Header prefixes and names that request features Quarry does not implement.
const UNSUPPORTED_HEADERS: &[(&str, &str)] = &[
    ("x-amz-server-side-encryption", "Server-side encryption"),
    ("x-amz-website-redirect-location", "Website redirects"),
    ("x-amz-write-offset-bytes", "Appends"),
];

/// `x-amz-checksum-<algorithm>` for each stored checksum and, when there is one,
/// `x-amz-checksum-type` (a single-part object's checksum always covers the full object).
pub fn checksum_headers(out: &mut HeaderMap, info: &ObjectInfo) {
    for (name, value) in &info.checksums {
        set_header(out, &format!("x-amz-checksum-{name}"), value);
    }
    if !info.checksums.is_empty() && !out.contains_key("x-amz-checksum-type") {
        let kind = crate::xml::checksum_type(info.checksums.values());
        out.insert("x-amz-checksum-type", HeaderValue::from_static(kind));
    }
}

/// Sets a response header. A name or value that is not a valid header (it came from stored
/// metadata, say) is logged and not sent.
pub(crate) fn set_header(out: &mut HeaderMap, name: &str, value: &str) {
    match (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        (Ok(n), Ok(v)) => {
            out.insert(n, v);
        }
        _ => tracing::warn!(header = name, "value is not a valid header; not sent"),
    }
}

/// Refuses headers of features not implemented (NotImplemented). Every caller implements
/// server-side encryption: its SSE headers are checked by [`crate::sse`].
pub(crate) fn check_unsupported_headers_but_sse(headers: &HeaderMap) -> ApiResult<()> {
    check_unsupported(headers, true)
}

fn check_unsupported(headers: &HeaderMap, sse: bool) -> ApiResult<()> {
    for name in headers.keys() {
        let name = name.as_str();
        if sse && name.starts_with("x-amz-server-side-encryption") {
            continue;
        }
        if let Some((_, what)) = UNSUPPORTED_HEADERS
            .iter()
            .find(|(prefix, _)| name.starts_with(prefix))
        {
            return Err(ApiError::not_implemented(what));
        }
    }
    Ok(())
}

/// The `x-amz-acl` / `x-amz-grant-*` headers of an object write, checked for form (a canned ACL
/// S3 defines, grants that parse); whether the bucket takes them is `acl::object_acl_entry`'s.
pub fn check_acl_headers(headers: &HeaderMap) -> ApiResult<()> {
    crate::acl::Acl::of_headers(headers, crate::acl::Target::Object).map(|_| ())
}

pub(crate) fn check_storage_class(headers: &HeaderMap) -> ApiResult<()> {
    match headers.get("x-amz-storage-class") {
        None => Ok(()),
        Some(v) if v.as_bytes() == b"STANDARD" => Ok(()),
        Some(v) => Err(ApiError::new(
            S3ErrorCode::InvalidStorageClass,
            format!(
                "The storage class {:?} is not valid: Quarry stores every object as STANDARD.",
                String::from_utf8_lossy(v.as_bytes())
            ),
        )),
    }
}

/// `Content-MD5`: the base64 of 16 bytes, or `InvalidDigest`.
pub fn content_md5(headers: &HeaderMap) -> ApiResult<Option<[u8; 16]>> {
    let Some(value) = headers.get("content-md5") else {
        return Ok(None);
    };
    STANDARD
        .decode(value.as_bytes())
        .ok()
        .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok())
        .map(Some)
        .ok_or_else(|| ApiError::from(S3ErrorCode::InvalidDigest))
}

/// The standard headers to store, lower-case names to values. `aws-chunked` is a transfer detail
/// of the upload and is dropped from `Content-Encoding`.
pub fn stored_headers(headers: &HeaderMap) -> ApiResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for &name in STORED_HEADERS {
        let Some(value) = headers.get(name) else {
            continue;
        };
        let value = header_text(name, value)?;
        let value = if name == "content-encoding" {
            value
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            value
        };
        if !value.is_empty() || name != "content-encoding" {
            out.insert(name.to_owned(), value);
        }
    }
    Ok(out)
}

/// `x-amz-meta-*` headers, prefix removed, names lower-case; at most 2 KiB in all.
pub fn user_metadata(headers: &HeaderMap) -> ApiResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut total = 0;
    for (name, value) in headers {
        let Some(meta) = name.as_str().strip_prefix("x-amz-meta-") else {
            continue;
        };
        let value = meta_value_text(value.as_bytes());
        total += meta.len() + meta_value_bytes(&value).len();
        if total > MAX_USER_META {
            return Err(ApiError::new(
                S3ErrorCode::MetadataTooLarge,
                format!("User metadata is limited to {MAX_USER_META} bytes of names and values."),
            ));
        }
        // Repeated headers are joined as S3 does.
        out.entry(meta.to_owned())
            .and_modify(|v: &mut String| {
                v.push(',');
                v.push_str(&value);
            })
            .or_insert(value);
    }
    Ok(out)
}

/// Marks a stored user metadata value that arrived as bytes that are not UTF-8 (e.g. Latin-1
/// `0xE9` from a client that encodes header values as Latin-1): the rest of the value holds each
/// byte as the character of that number. A header value cannot contain this control character, so
/// no value stored before (always UTF-8 text) starts with it.
const RAW_META: char = '\u{1}';

/// A user metadata value as stored: the header's bytes as they are when UTF-8 (as always), else
/// [`RAW_META`] and one character per byte, so that they are sent back byte for byte.
pub fn meta_value_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => std::iter::once(RAW_META)
            .chain(bytes.iter().map(|&b| char::from(b)))
            .collect(),
    }
}

/// The header bytes of a stored user metadata value (see [`meta_value_text`]).
pub fn meta_value_bytes(stored: &str) -> std::borrow::Cow<'_, [u8]> {
    match stored.strip_prefix(RAW_META) {
        Some(raw) if raw.chars().all(|c| (c as u32) < 256) => {
            raw.chars().map(|c| c as u8).collect::<Vec<u8>>().into()
        }
        _ => stored.as_bytes().into(),
    }
}

fn header_text(name: &str, value: &HeaderValue) -> ApiResult<String> {
    String::from_utf8(value.as_bytes().to_vec()).map_err(|_| {
        ApiError::new(
            S3ErrorCode::InvalidArgument,
            format!("The value of header {name} is not UTF-8."),
        )
    })
}

/// `If-None-Match: *` (create only), `If-None-Match: <etag>` (replace anything but that
/// version) and `If-Match: <etag>` on a write; both together are refused rather than guessed at.
pub fn write_precondition(headers: &HeaderMap) -> ApiResult<Option<WritePrecondition>> {
    let text = |name: http::header::HeaderName| -> ApiResult<Option<String>> {
        headers
            .get(&name)
            .map(|v| {
                v.to_str().map(|s| s.trim().to_string()).map_err(|_| {
                    ApiError::new(
                        S3ErrorCode::InvalidArgument,
                        format!("{name} is not valid text."),
                    )
                })
            })
            .transpose()
    };
    let none_match = text(http::header::IF_NONE_MATCH)?;
    let if_match = text(http::header::IF_MATCH)?;
    match (none_match, if_match) {
        (Some(_), Some(_)) => Err(ApiError::new(
            S3ErrorCode::NotImplemented,
            "If-Match and If-None-Match together on a write are not supported.",
        )),
        (Some(v), None) if v == "*" => Ok(Some(WritePrecondition::IfNoneMatchAny)),
        (Some(v), None) => Ok(Some(WritePrecondition::IfNoneMatch(v))),
        (None, Some(v)) => Ok(Some(WritePrecondition::IfMatch(v))),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn content_md5_is_checked_for_shape() {
        assert_eq!(content_md5(&headers(&[])).unwrap(), None);
        let md5 = content_md5(&headers(&[("content-md5", "1B2M2Y8AsgTpgAmY7PhCfg==")])).unwrap();
        assert_eq!(
            md5.map(hex::encode).as_deref(),
            Some("d41d8cd98f00b204e9800998ecf8427e")
        );
        for bad in ["not base64!", "AAAA", ""] {
            let err = content_md5(&headers(&[("content-md5", bad)])).unwrap_err();
            assert_eq!(err.code(), S3ErrorCode::InvalidDigest, "{bad}");
        }
    }

    #[test]
    fn stored_headers_drop_aws_chunked() {
        let h = headers(&[
            ("content-type", "text/plain"),
            ("content-encoding", "aws-chunked,gzip"),
            ("cache-control", "no-cache"),
            ("x-other", "x"),
        ]);
        let stored = stored_headers(&h).unwrap();
        assert_eq!(
            stored.get("content-encoding").map(String::as_str),
            Some("gzip")
        );
        assert_eq!(
            stored.get("content-type").map(String::as_str),
            Some("text/plain")
        );
        assert_eq!(
            stored.get("cache-control").map(String::as_str),
            Some("no-cache")
        );
        assert_eq!(stored.len(), 3);
        let only_chunked =
            stored_headers(&headers(&[("content-encoding", "aws-chunked")])).unwrap();
        assert!(only_chunked.is_empty());
    }

    #[test]
    fn user_metadata_is_collected_and_limited() {
        let h = headers(&[
            ("x-amz-meta-Color", "blue"),
            ("x-amz-meta-empty", ""),
            ("x-amz-metadata", "no"),
        ]);
        let meta = user_metadata(&h).unwrap();
        assert_eq!(meta.get("color").map(String::as_str), Some("blue"));
        assert_eq!(meta.get("empty").map(String::as_str), Some(""));
        assert_eq!(meta.len(), 2);
        let big = "x".repeat(MAX_USER_META);
        let err = user_metadata(&headers(&[("x-amz-meta-a", &big)])).unwrap_err();
        assert_eq!(err.code(), S3ErrorCode::MetadataTooLarge);
    }

    #[test]
    fn metadata_values_round_trip_byte_for_byte() {
        for bytes in [
            &b"Hello World\xe9"[..],
            "Hello World\u{e9}".as_bytes(),
            b"plain",
        ] {
            let stored = meta_value_text(bytes);
            assert_eq!(&*meta_value_bytes(&stored), bytes);
        }
        // UTF-8 is stored as the text it is (as before), so old values read the same.
        assert_eq!(meta_value_text("Worldé".as_bytes()), "Worldé");
        assert_eq!(&*meta_value_bytes("Worldé"), "Worldé".as_bytes());
    }

    #[test]
    fn unsupported_features_are_refused() {
        // Where a call does not implement SSE, its headers are refused, not ignored.
        let h = headers(&[("x-amz-server-side-encryption", "AES256")]);
        let err = check_unsupported(&h, false).unwrap_err();
        assert_eq!(err.code(), S3ErrorCode::NotImplemented);
        assert!(check_unsupported(&h, true).is_ok());
        assert!(check_acl_headers(&headers(&[("x-amz-acl", "private")])).is_ok());
        assert!(check_acl_headers(&headers(&[("x-amz-acl", "public-read")])).is_ok());
        assert!(check_acl_headers(&headers(&[("x-amz-grant-read", "id=x")])).is_ok());
        // Not a canned ACL at all: 400.
        let err = check_acl_headers(&headers(&[("x-amz-acl", "public-ready")])).unwrap_err();
        assert_eq!(err.code(), S3ErrorCode::InvalidArgument);
        assert!(check_storage_class(&headers(&[("x-amz-storage-class", "STANDARD")])).is_ok());
        let err = check_storage_class(&headers(&[("x-amz-storage-class", "GLACIER")])).unwrap_err();
        assert_eq!(err.code(), S3ErrorCode::InvalidStorageClass);
    }

    #[test]
    fn checksum_response_headers() {
        let mut info = ObjectInfo {
            bucket: "b".into(),
            key: "k".into(),
            size: 0,
            mod_time_ns: 0,
            etag: "e".into(),
            headers: BTreeMap::new(),
            user_meta: BTreeMap::new(),
            checksums: BTreeMap::new(),
            parts: 1,
            ..Default::default()
        };
        let mut out = HeaderMap::new();
        checksum_headers(&mut out, &info);
        assert!(out.is_empty());
        info.checksums.insert("crc32".into(), "AAAAAA==".into());
        checksum_headers(&mut out, &info);
        assert_eq!(out["x-amz-checksum-crc32"], "AAAAAA==");
        assert_eq!(out["x-amz-checksum-type"], "FULL_OBJECT");
    }
}
