//! AWS Signature Version 2 (HMAC-SHA1), for the clients that still send it: boto3's default
//! presigned URLs (`?AWSAccessKeyId=…&Expires=…&Signature=…`) and s3cmd's `Authorization: AWS
//! AccessKeyId:Signature` header.
//!
//! ```text
//! StringToSign = VERB \n Content-MD5 \n Content-Type \n Date-or-Expires \n
//!                CanonicalizedAmzHeaders CanonicalizedResource
//! Signature    = base64(HMAC-SHA1(secret, StringToSign))
//! ```
//!
//! As AWS's "Signing and authenticating REST requests" defines it:
//! - The date position is the `Date` header, or empty when `x-amz-date` is present (which is then
//!   signed as one of the amz headers); presigned URLs put `Expires` there. The header form must be
//!   within 15 minutes of our clock; a presigned URL is valid until `Expires` (epoch seconds).
//! - CanonicalizedAmzHeaders: every `x-amz-*` header, names lower-cased and sorted, values trimmed,
//!   repeated headers joined with `,`, each as `name:value\n`.
//! - CanonicalizedResource: `/bucket` for virtual-hosted requests, then the path exactly as sent
//!   (still percent-encoded), then the signed sub-resources of the query sorted by name, with their
//!   values decoded as the handlers decode them (`+` is a space), e.g. `?acl` or
//!   `?partNumber=1&uploadId=x`. All other query parameters are unsigned.
//!
//! The body is not signed: the payload is [`PayloadCheck::Unsigned`] (Content-MD5 and any
//! `x-amz-checksum-*` are still checked downstream). One exception: an `x-amz-content-sha256`
//! header is an amz header, hence signed, so a SHA-256 value in it is verified like in SigV4;
//! `aws-chunked` bodies (`STREAMING-*`) need SigV4 and are refused.
//!
//! Lenient where clients differ, and only in ways that are functions of the request as sent (no
//! way to make one signature cover a different request): `Date`/`x-amz-date` accept the
//! RFC 1123 (`GMT` or `+0000`), RFC 850, asctime and ISO 8601 basic formats; a presigned URL may
//! carry `Content-Type`, `Content-MD5` and `x-amz-*` in its query (botocore moves them there), used
//! when the request does not send that header.

use std::collections::BTreeMap;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::request::Parts;
use percent_encoding::{percent_decode, percent_decode_str};
use sha1::Sha1;
use subtle::ConstantTimeEq;
use time::format_description::well_known::Rfc2822;
use time::OffsetDateTime;

use super::v4::{format_amz_date, parse_amz_date, ContentSha256, MAX_SKEW};
use super::{AuthConfig, Authenticated, Credentials, PayloadCheck};
use crate::error::{S3Error, S3ErrorCode};

/// The `Authorization` scheme: `AWS AccessKeyId:Signature`.
pub(crate) const SCHEME: &str = "AWS ";
const AWS_ACCESS_KEY_ID: &str = "AWSAccessKeyId";
const SIGNATURE: &str = "Signature";
const EXPIRES: &str = "Expires";

/// The query parameters that are part of the CanonicalizedResource, sorted (bytewise).
///
/// AWS's list (acl, lifecycle, location, logging, notification, partNumber, policy,
/// requestPayment, torrent, uploadId, uploads, versionId, versioning, versions, website, delete and
/// the `response-*` overrides), plus the ones botocore, s3cmd and MinIO sign for newer
/// sub-resources, plus every keyword the router uses to pick an operation (a test checks this).
/// Signing a superset fails closed: a client that leaves one of these out of its signature is
/// refused, rather than an unsigned parameter turning a captured request into another operation
/// on the same resource (the body of a SigV2 request is not signed).
pub(crate) const SIGNED_SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "attributes",
    "cors",
    "defaultObjectAcl",
    "delete",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "location",
    "logging",
    "metadataConfiguration",
    "metadataTable",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "partNumber",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "renameObject",
    "replication",
    "requestPayment",
    "response-cache-control",
    "response-content-disposition",
    "response-content-encoding",
    "response-content-language",
    "response-content-type",
    "response-expires",
    "restore",
    "retention",
    "select",
    "select-type",
    "session",
    "storageClass",
    "tagging",
    "torrent",
    "uploadId",
    "uploads",
    "versionId",
    "versioning",
    "versions",
    "website",
];

type HmacSha1 = Hmac<Sha1>;

/// `HMAC-SHA1(secret, string_to_sign)`.
pub(crate) fn hmac_sha1(key: &[u8], data: &[u8]) -> [u8; 20] {
    let mut mac = match HmacSha1::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC-SHA1 accepts keys of any length"),
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Compares a computed signature with the base64 one a client sent, in constant time.
pub(crate) fn signature_matches(computed: &[u8; 20], provided_b64: &str) -> bool {
    let Ok(provided) = base64::engine::general_purpose::STANDARD.decode(provided_b64.trim()) else {
        return false;
    };
    provided.len() == computed.len() && bool::from(computed[..].ct_eq(&provided[..]))
}

/// One query parameter: name and value decoded as the handlers decode them (`%XX`, and `+` as a
/// space), so what is signed is what is acted on; `value` is `None` when there was no `=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Param {
    pub name: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

fn form_decode(s: &str) -> Vec<u8> {
    let spaced: Vec<u8> = s
        .bytes()
        .map(|b| if b == b'+' { b' ' } else { b })
        .collect();
    percent_decode(&spaced).collect()
}

pub(crate) fn parse_query(raw: &str) -> Vec<Param> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => Param {
                name: form_decode(k),
                value: Some(form_decode(v)),
            },
            None => Param {
                name: form_decode(p),
                value: None,
            },
        })
        .collect()
}

/// The first `Signature` parameter, `%XX`-decoded only: base64 never holds a space, so a raw `+`
/// (from a client that did not escape it) is a `+`.
fn raw_signature_param(raw: &str) -> Option<Vec<u8>> {
    raw.split('&').find_map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (form_decode(k) == SIGNATURE.as_bytes()).then(|| percent_decode_str(v).collect())
    })
}

fn param<'q>(query: &'q [Param], name: &str) -> Option<&'q [u8]> {
    query
        .iter()
        .find(|p| p.name == name.as_bytes())
        .map(|p| p.value.as_deref().unwrap_or_default())
}

/// Whether the query carries SigV2 presigned parameters (either one of them: a URL with only one
/// is a malformed presigned URL, not an anonymous request).
pub(crate) fn is_presigned(query: &[(Vec<u8>, Vec<u8>)]) -> bool {
    query.iter().any(|(k, _)| {
        k.as_slice() == AWS_ACCESS_KEY_ID.as_bytes() || k.as_slice() == SIGNATURE.as_bytes()
    })
}

fn is_signed_subresource(name: &[u8]) -> bool {
    SIGNED_SUBRESOURCES
        .binary_search_by(|s| s.as_bytes().cmp(name))
        .is_ok()
}

/// The CanonicalizedResource: `[/host_bucket]` + the raw path + the signed sub-resources.
/// A sub-resource with an empty value is signed as its bare name (`?acl=` as `?acl`).
pub(crate) fn canonical_resource(
    raw_path: &str,
    query: &[Param],
    host_bucket: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw_path.len() + 32);
    if let Some(bucket) = host_bucket {
        out.push(b'/');
        out.extend_from_slice(bucket.as_bytes());
    }
    out.extend_from_slice(if raw_path.is_empty() { "/" } else { raw_path }.as_bytes());
    let mut subs: Vec<&Param> = query
        .iter()
        .filter(|p| is_signed_subresource(&p.name))
        .collect();
    // Stable: repeated names keep the order they were sent in.
    subs.sort_by(|a, b| a.name.cmp(&b.name));
    for (i, p) in subs.iter().enumerate() {
        out.push(if i == 0 { b'?' } else { b'&' });
        out.extend_from_slice(&p.name);
        if let Some(v) = p.value.as_deref().filter(|v| !v.is_empty()) {
            out.push(b'=');
            out.extend_from_slice(v);
        }
    }
    out
}

fn trim(value: &[u8]) -> &[u8] {
    value.trim_ascii()
}

/// The value of a positional header (`Content-MD5`, `Content-Type`); for presigned URLs a query
/// parameter of the same name stands in for an absent header.
fn positional<'a>(parts: &'a Parts, name: &str, query: Option<&'a [Param]>) -> &'a [u8] {
    if let Some(v) = parts.headers.get(name) {
        return trim(v.as_bytes());
    }
    query
        .and_then(|q| {
            q.iter()
                .find(|p| p.name.eq_ignore_ascii_case(name.as_bytes()))
        })
        .and_then(|p| p.value.as_deref())
        .map(trim)
        .unwrap_or_default()
}

/// CanonicalizedAmzHeaders: `name:value\n` for every `x-amz-*` header, sorted by lower-cased name,
/// values trimmed and repeated headers joined with `,`. For presigned URLs, `x-amz-*` query
/// parameters are added for names the request does not send as headers.
pub(crate) fn canonical_amz_headers(parts: &Parts, query: Option<&[Param]>) -> Vec<u8> {
    let mut headers: BTreeMap<Vec<u8>, Vec<&[u8]>> = BTreeMap::new();
    for name in parts.headers.keys() {
        // `HeaderName`s are lower-case already.
        if name.as_str().starts_with("x-amz-") {
            let values = parts
                .headers
                .get_all(name)
                .iter()
                .map(|v| trim(v.as_bytes()))
                .collect();
            headers.insert(name.as_str().as_bytes().to_vec(), values);
        }
    }
    for p in query.unwrap_or_default() {
        let name = p.name.to_ascii_lowercase();
        let sent_as_header =
            std::str::from_utf8(&name).is_ok_and(|n| parts.headers.contains_key(n));
        if name.starts_with(b"x-amz-") && !sent_as_header {
            headers
                .entry(name)
                .or_default()
                .push(trim(p.value.as_deref().unwrap_or_default()));
        }
    }
    let mut out = Vec::new();
    for (name, values) in headers {
        out.extend_from_slice(&name);
        out.push(b':');
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(v);
        }
        out.push(b'\n');
    }
    out
}

/// The StringToSign. `date` is the Date header (header form; empty when x-amz-date is sent) or
/// the Expires parameter (presigned form); `query` is `Some` for presigned URLs.
pub(crate) fn string_to_sign(
    parts: &Parts,
    date: &[u8],
    resource: &[u8],
    query: Option<&[Param]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + resource.len());
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(positional(parts, "content-md5", query));
    out.push(b'\n');
    out.extend_from_slice(positional(parts, "content-type", query));
    out.push(b'\n');
    out.extend_from_slice(date);
    out.push(b'\n');
    out.extend(canonical_amz_headers(parts, query));
    out.extend_from_slice(resource);
    out
}

/// Parses a `Date` or `x-amz-date` value: RFC 1123 with `GMT` or a numeric zone (what the AWS
/// examples and s3cmd send), RFC 850, asctime, or ISO 8601 basic (`20130524T000000Z`).
pub(crate) fn parse_date(s: &str) -> Option<OffsetDateTime> {
    let s = s.trim();
    if let Ok(t) = httpdate::parse_http_date(s) {
        return Some(OffsetDateTime::from(t));
    }
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc2822) {
        return Some(t);
    }
    parse_amz_date(s)
}

/// How the body is checked: unsigned, unless a signed `x-amz-content-sha256` names its SHA-256.
fn payload_check(parts: &Parts) -> Result<PayloadCheck, S3Error> {
    let chunked = parts
        .headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| e.trim().eq_ignore_ascii_case("aws-chunked"));
    let streaming = || {
        S3Error::new(
            S3ErrorCode::InvalidRequest,
            "aws-chunked payloads (STREAMING-*) require AWS Signature Version 4.",
        )
    };
    if chunked {
        return Err(streaming());
    }
    let Some(value) = parts.headers.get("x-amz-content-sha256") else {
        return Ok(PayloadCheck::Unsigned);
    };
    let value = value.to_str().map_err(|_| {
        S3Error::new(
            S3ErrorCode::InvalidArgument,
            "x-amz-content-sha256 is not valid ASCII.",
        )
    })?;
    match ContentSha256::parse(value.trim())? {
        ContentSha256::Unsigned => Ok(PayloadCheck::Unsigned),
        ContentSha256::Sha256(d) => Ok(PayloadCheck::Sha256(d)),
        ContentSha256::StreamingSigned
        | ContentSha256::StreamingSignedTrailer
        | ContentSha256::StreamingUnsignedTrailer => Err(streaming()),
    }
}

/// Runs `check` over the CanonicalizedResource. A path-style request for a bucket itself
/// (`/bucket`, no key) is also accepted signed over `/bucket/`, the form botocore signs (and
/// virtual-host requests for the bucket have): both name the same resource. The first error is
/// the answer.
fn check_resource_forms(
    raw_path: &str,
    query: &[Param],
    host_bucket: Option<&str>,
    check: impl Fn(&[u8]) -> Result<(), S3Error>,
) -> Result<(), S3Error> {
    let first = check(&canonical_resource(raw_path, query, host_bucket));
    let bare_bucket = host_bucket.is_none()
        && raw_path.len() > 1
        && !raw_path[1..].contains('/')
        && raw_path.starts_with('/');
    match first {
        Err(e) if bare_bucket && e.code == S3ErrorCode::SignatureDoesNotMatch => {
            let with_slash = format!("{raw_path}/");
            check(&canonical_resource(&with_slash, query, None)).map_err(|_| e)
        }
        r => r,
    }
}

/// Checks the signature over `sts`; the mismatch error carries the StringToSign, as AWS's
/// `<StringToSign>` element does (it holds nothing the client did not send).
fn check_signature(credentials: &Credentials, sts: &[u8], provided: &str) -> Result<(), S3Error> {
    let computed = hmac_sha1(credentials.secret_key.as_bytes(), sts);
    if signature_matches(&computed, provided) {
        return Ok(());
    }
    let sts = String::from_utf8_lossy(sts);
    tracing::debug!(
        access_key = %credentials.access_key,
        string_to_sign = %sts,
        "SigV2 signature mismatch"
    );
    Err(S3Error::new(
        S3ErrorCode::SignatureDoesNotMatch,
        format!(
            "{} StringToSign: \"{}\"",
            S3ErrorCode::SignatureDoesNotMatch.default_message(),
            sts.escape_debug()
        ),
    ))
}

/// Verifies `Authorization: AWS AccessKeyId:Signature`.
pub(crate) fn verify_header(
    parts: &Parts,
    cfg: &AuthConfig,
    now: std::time::SystemTime,
    authorization: &str,
    host_bucket: Option<&str>,
) -> Result<Authenticated, S3Error> {
    let invalid = || {
        S3Error::new(
            S3ErrorCode::InvalidArgument,
            "AWS authorization header is invalid.  Expected AwsAccessKeyId:signature",
        )
    };
    let (access_key, signature) = authorization
        .trim()
        .strip_prefix(SCHEME)
        .and_then(|rest| rest.trim().rsplit_once(':'))
        .filter(|(ak, sig)| !ak.is_empty() && !sig.is_empty())
        .ok_or_else(invalid)?;
    let payload = payload_check(parts)?;

    // x-amz-date wins over Date; it is then signed among the amz headers and the Date position
    // is empty.
    let denied = || {
        S3Error::new(
            S3ErrorCode::AccessDenied,
            "AWS authentication requires a valid Date or x-amz-date header",
        )
    };
    let (time_value, date_field) = match parts.headers.get("x-amz-date") {
        Some(v) => (v, &b""[..]),
        None => {
            let v = parts.headers.get(http::header::DATE).ok_or_else(denied)?;
            (v, trim(v.as_bytes()))
        }
    };
    let time_str = time_value.to_str().map_err(|_| denied())?.trim();
    let date = parse_date(time_str).ok_or_else(denied)?;

    let credentials = cfg
        .find(access_key)
        .ok_or_else(|| S3Error::from_code(S3ErrorCode::InvalidAccessKeyId))?;
    let now = OffsetDateTime::from(now);
    if (now - date).abs() > MAX_SKEW {
        return Err(S3Error::new(
            S3ErrorCode::RequestTimeTooSkewed,
            format!(
                "The difference between the request time and the server's time is too large. \
                 RequestTime: {time_str}, ServerTime: {}",
                format_amz_date(now)
            ),
        ));
    }

    let query = parse_query(parts.uri.query().unwrap_or(""));
    check_resource_forms(parts.uri.path(), &query, host_bucket, |resource| {
        let sts = string_to_sign(parts, date_field, resource, None);
        check_signature(&credentials, &sts, signature)
    })?;
    Ok(Authenticated {
        access_key: credentials.access_key.clone(),
        service: super::v4::SERVICE,
        payload,
    })
}

/// Verifies a presigned URL: `AWSAccessKeyId`, `Expires` (epoch seconds) and `Signature`.
pub(crate) fn verify_presigned(
    parts: &Parts,
    cfg: &AuthConfig,
    now: std::time::SystemTime,
    host_bucket: Option<&str>,
) -> Result<Authenticated, S3Error> {
    let raw_query = parts.uri.query().unwrap_or("");
    let query = parse_query(raw_query);
    let missing = || {
        S3Error::new(
            S3ErrorCode::AccessDenied,
            "Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters",
        )
    };
    let required = |name: &str| -> Result<&str, S3Error> {
        let v = param(&query, name)
            .filter(|v| !v.is_empty())
            .ok_or_else(missing)?;
        std::str::from_utf8(v).map_err(|_| missing())
    };
    let access_key = required(AWS_ACCESS_KEY_ID)?;
    required(SIGNATURE)?;
    let signature = raw_signature_param(raw_query).ok_or_else(missing)?;
    let signature = std::str::from_utf8(&signature).map_err(|_| missing())?;
    let expires_str = required(EXPIRES)?;
    let expires: i64 = Some(expires_str)
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::AccessDenied,
                format!("Invalid date (should be seconds since epoch): {expires_str}"),
            )
        })?;
    let payload = payload_check(parts)?;

    let credentials = cfg
        .find(access_key)
        .ok_or_else(|| S3Error::from_code(S3ErrorCode::InvalidAccessKeyId))?;
    if OffsetDateTime::from(now).unix_timestamp() > expires {
        return Err(S3Error::new(
            S3ErrorCode::AccessDenied,
            "Request has expired",
        ));
    }

    check_resource_forms(parts.uri.path(), &query, host_bucket, |resource| {
        let sts = string_to_sign(parts, expires_str.as_bytes(), resource, Some(&query));
        check_signature(&credentials, &sts, signature)
    })?;
    Ok(Authenticated {
        access_key: credentials.access_key.clone(),
        service: super::v4::SERVICE,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::signature::verify_request;
    use crate::signature::verify_virtual_host_request;

    const AK: &str = "AKIAIOSFODNN7EXAMPLE";
    const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    fn cfg() -> AuthConfig {
        AuthConfig::new(vec![
            Credentials::new("other", "x"),
            Credentials::new(AK, SK),
        ])
    }

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn time_of(date: &str) -> SystemTime {
        parse_date(date).expect("date").into()
    }

    fn epoch(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn sign(sts: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(hmac_sha1(SK.as_bytes(), sts.as_bytes()))
    }

    fn authz(sig: &str) -> String {
        format!("AWS {AK}:{sig}")
    }

    fn code(r: Result<Authenticated, S3Error>) -> S3ErrorCode {
        r.expect_err("request accepted").code
    }

    /// The examples of AWS's "Signing and authenticating REST requests". The published signatures
    /// were computed for the bucket `johnsmith` (the page later renamed it to `awsexamplebucket1`
    /// in the requests without recomputing them), except the first one, recomputed on the
    /// current page for `awsexamplebucket1`.
    #[test]
    fn aws_documentation_examples() {
        let c = cfg();
        // (virtual-host bucket, method, uri, headers, signature)
        type Case<'a> = (
            Option<&'a str>,
            &'a str,
            &'a str,
            &'a [(&'a str, &'a str)],
            &'a str,
        );
        let cases: &[Case] = &[
            (
                Some("awsexamplebucket1"),
                "GET",
                "/photos/puppy.jpg",
                &[("date", "Tue, 27 Mar 2007 19:36:42 +0000")],
                "qgk2+6Sv9/oM7G3qLEjTH1a1l1g=",
            ),
            (
                Some("johnsmith"),
                "GET",
                "/photos/puppy.jpg",
                &[("date", "Tue, 27 Mar 2007 19:36:42 +0000")],
                "bWq2s1WEIj+Ydj0vQ697zp+IXMU=",
            ),
            (
                Some("johnsmith"),
                "PUT",
                "/photos/puppy.jpg",
                &[
                    ("content-type", "image/jpeg"),
                    ("content-length", "94328"),
                    ("date", "Tue, 27 Mar 2007 21:15:45 +0000"),
                ],
                "MyyxeRY7whkBe+bq8fHCL/2kKUg=",
            ),
            (
                Some("johnsmith"),
                "GET",
                "/?prefix=photos&max-keys=50&marker=puppy",
                &[
                    ("user-agent", "Mozilla/5.0"),
                    ("date", "Tue, 27 Mar 2007 19:42:41 +0000"),
                ],
                "htDYFYduRNen8P9ZfE/s9SuKy0U=",
            ),
            (
                Some("johnsmith"),
                "GET",
                "/?acl",
                &[("date", "Tue, 27 Mar 2007 19:44:46 +0000")],
                "c2WLPFtWHVgbEmeEG93a4cG37dM=",
            ),
            (
                Some("static.johnsmith.net"),
                "PUT",
                "/db-backup.dat.gz",
                &[
                    ("user-agent", "curl/7.15.5"),
                    ("date", "Tue, 27 Mar 2007 21:06:08 +0000"),
                    ("x-amz-acl", "public-read"),
                    ("content-type", "application/x-download"),
                    ("content-md5", "4gJE4saaMU4BqNR0kLY+lw=="),
                    ("X-Amz-Meta-ReviewedBy", "joe@johnsmith.net"),
                    ("X-Amz-Meta-ReviewedBy", "jane@johnsmith.net"),
                    ("X-Amz-Meta-FileChecksum", "0x02661779"),
                    ("X-Amz-Meta-ChecksumAlgorithm", "crc32"),
                    ("content-disposition", "attachment; filename=database.dat"),
                    ("content-encoding", "gzip"),
                    ("content-length", "5913339"),
                ],
                "ilyl83RwaSoYIEdixDQcA4OnAnc=",
            ),
            (
                None,
                "GET",
                "/",
                &[("date", "Wed, 28 Mar 2007 01:29:59 +0000")],
                "qGdzdERIC03wnaRNKh6OqZehG9s=",
            ),
            (
                None,
                "GET",
                "/dictionary/fran%C3%A7ais/pr%c3%a9f%c3%a8re",
                &[("date", "Wed, 28 Mar 2007 01:49:49 +0000")],
                "DNEZGsoieTZ92F3bUfSPQcbGmlM=",
            ),
        ];
        for &(bucket, method, uri, headers, sig) in cases {
            let auth = authz(sig);
            let mut all = headers.to_vec();
            all.push(("authorization", &auth));
            let p = parts(method, uri, &all);
            let date = p.headers["date"].to_str().unwrap().to_owned();
            let now = time_of(&date);
            let r = match bucket {
                Some(b) => verify_virtual_host_request(&p, &c, now, b),
                None => verify_request(&p, &c, now),
            };
            let a = r.unwrap_or_else(|e| panic!("{method} {uri}: {e}"));
            assert_eq!(a.access_key, AK);
            assert_eq!(a.payload, PayloadCheck::Unsigned);
            // The same request with a one-bit different signature is refused.
            let mut bad = sig.as_bytes().to_vec();
            bad[0] ^= 1;
            let auth = authz(std::str::from_utf8(&bad).unwrap());
            let mut all = headers.to_vec();
            all.push(("authorization", &auth));
            let p = parts(method, uri, &all);
            let r = match bucket {
                Some(b) => verify_virtual_host_request(&p, &c, now, b),
                None => verify_request(&p, &c, now),
            };
            assert_eq!(code(r), S3ErrorCode::SignatureDoesNotMatch, "{uri}");
        }
    }

    #[test]
    fn aws_documentation_string_to_sign() {
        let p = parts(
            "PUT",
            "/db-backup.dat.gz",
            &[
                ("date", "Tue, 27 Mar 2007 21:06:08 +0000"),
                ("x-amz-acl", "public-read"),
                ("content-type", "application/x-download"),
                ("content-md5", "4gJE4saaMU4BqNR0kLY+lw=="),
                ("X-Amz-Meta-ReviewedBy", "joe@johnsmith.net"),
                ("X-Amz-Meta-ReviewedBy", "  jane@johnsmith.net "),
                ("X-Amz-Meta-FileChecksum", "0x02661779"),
                ("X-Amz-Meta-ChecksumAlgorithm", "crc32"),
            ],
        );
        let resource = canonical_resource(p.uri.path(), &[], Some("static.johnsmith.net"));
        let sts = string_to_sign(&p, b"Tue, 27 Mar 2007 21:06:08 +0000", &resource, None);
        assert_eq!(
            String::from_utf8(sts).unwrap(),
            "PUT\n4gJE4saaMU4BqNR0kLY+lw==\napplication/x-download\nTue, 27 Mar 2007 21:06:08 +0000\n\
             x-amz-acl:public-read\nx-amz-meta-checksumalgorithm:crc32\nx-amz-meta-filechecksum:0x02661779\n\
             x-amz-meta-reviewedby:joe@johnsmith.net,jane@johnsmith.net\n/static.johnsmith.net/db-backup.dat.gz"
        );
    }

    #[test]
    fn aws_documentation_presigned_example() {
        let c = cfg();
        let uri = "/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620";
        let p = parts("GET", uri, &[("host", "johnsmith.s3.amazonaws.com")]);
        let a = verify_virtual_host_request(&p, &c, epoch(1_175_139_000), "johnsmith").unwrap();
        assert_eq!(a.access_key, AK);
        assert_eq!(a.payload, PayloadCheck::Unsigned);
        // Valid up to and including the Expires second, refused after.
        assert!(verify_virtual_host_request(&p, &c, epoch(1_175_139_620), "johnsmith").is_ok());
        let e = verify_virtual_host_request(&p, &c, epoch(1_175_139_621), "johnsmith").unwrap_err();
        assert_eq!(e.code, S3ErrorCode::AccessDenied);
        assert_eq!(e.message, "Request has expired");
        // Another bucket, another path, another expiry: all change the StringToSign.
        for (bucket, uri) in [
            ("johnsmith2", uri.to_owned()),
            ("johnsmith", uri.replace("puppy", "kitten")),
            ("johnsmith", uri.replace("1175139620", "1175139621")),
            ("johnsmith", format!("{uri}&versionId=1")),
        ] {
            let p = parts("GET", &uri, &[]);
            assert_eq!(
                code(verify_virtual_host_request(
                    &p,
                    &c,
                    epoch(1_175_139_000),
                    bucket
                )),
                S3ErrorCode::SignatureDoesNotMatch,
                "{bucket} {uri}"
            );
        }
        // Query parameters that are not sub-resources are not signed.
        let p = parts("GET", &format!("{uri}&x-id=GetObject&foo=bar"), &[]);
        assert!(verify_virtual_host_request(&p, &c, epoch(1_175_139_000), "johnsmith").is_ok());
        // A literal '+' in the signature is a '+', not a space.
        let p = parts("GET", &uri.replace("%2B", "+"), &[]);
        assert!(verify_virtual_host_request(&p, &c, epoch(1_175_139_000), "johnsmith").is_ok());
    }

    #[test]
    fn canonical_resource_sub_resources() {
        let q = parse_query(
            "versionId=3&prefix=a&acl&uploadId=u%2Bx+y&partNumber=2&response-content-type=text%2Fplain&x-id=Get&uploads=",
        );
        assert_eq!(
            String::from_utf8(canonical_resource("/b/k%20y", &q, None)).unwrap(),
            "/b/k%20y?acl&partNumber=2&response-content-type=text/plain&uploadId=u+x y&uploads&versionId=3"
        );
        assert_eq!(canonical_resource("/", &[], Some("b")), b"/b/");
        assert_eq!(canonical_resource("", &[], None), b"/");
        assert_eq!(
            canonical_resource("/k", &parse_query("delete&tagging="), Some("b")),
            b"/b/k?delete&tagging"
        );
        // Names are case-sensitive: `ACL` is not the acl sub-resource.
        assert_eq!(canonical_resource("/b", &parse_query("ACL"), None), b"/b");
    }

    #[test]
    fn subresource_list_is_sorted_and_complete() {
        assert!(SIGNED_SUBRESOURCES.windows(2).all(|w| w[0] < w[1]));
        for name in [
            "acl",
            "cors",
            "delete",
            "lifecycle",
            "location",
            "logging",
            "notification",
            "partNumber",
            "policy",
            "requestPayment",
            "response-cache-control",
            "response-content-disposition",
            "response-content-encoding",
            "response-content-language",
            "response-content-type",
            "response-expires",
            "tagging",
            "torrent",
            "uploadId",
            "uploads",
            "versionId",
            "versioning",
            "versions",
            "website",
        ] {
            assert!(is_signed_subresource(name.as_bytes()), "{name}");
        }
        // Every query keyword that selects an operation is signed.
        for name in crate::router::BUCKET_SUBRESOURCES
            .iter()
            .chain(crate::router::OBJECT_SUBRESOURCES)
        {
            assert!(
                is_signed_subresource(name.as_bytes()),
                "router keyword {name}"
            );
        }
        assert!(!is_signed_subresource(b"prefix"));
        assert!(!is_signed_subresource(b"list-type"));
    }

    /// botocore signs a path-style request for a bucket (`PUT /bucket`) over `/bucket/`; the
    /// bare path is accepted too. Neither form covers another resource.
    #[test]
    fn a_bucket_is_signed_with_or_without_its_slash() {
        let c = cfg();
        let date = "Wed, 02 Dec 2026 05:00:19 GMT";
        let now = time_of(date);
        for signed in ["/v2bucket/", "/v2bucket"] {
            let auth = authz(&sign(&format!("PUT\n\n\n{date}\n{signed}")));
            let p = parts(
                "PUT",
                "/v2bucket",
                &[("date", date), ("authorization", &auth)],
            );
            verify_request(&p, &c, now).unwrap_or_else(|e| panic!("{signed}: {e}"));
        }
        // Refusals beside them: another bucket, an object of the bucket, the key signed as the
        // bucket.
        let auth = authz(&sign(&format!("PUT\n\n\n{date}\n/v2bucket/")));
        for uri in ["/other", "/v2bucket/k", "/v2bucket/"] {
            let p = parts("PUT", uri, &[("date", date), ("authorization", &auth)]);
            if uri == "/v2bucket/" {
                verify_request(&p, &c, now).expect("the exact path");
                continue;
            }
            assert_eq!(
                code(verify_request(&p, &c, now)),
                S3ErrorCode::SignatureDoesNotMatch,
                "{uri}"
            );
        }
        let auth = authz(&sign(&format!("PUT\n\n\n{date}\n/v2bucket/k/")));
        let p = parts(
            "PUT",
            "/v2bucket/k",
            &[("date", date), ("authorization", &auth)],
        );
        assert_eq!(
            code(verify_request(&p, &c, now)),
            S3ErrorCode::SignatureDoesNotMatch
        );
    }

    #[test]
    fn x_amz_date_takes_the_place_of_date() {
        let c = cfg();
        let amz_date = "Tue, 27 Mar 2007 21:20:26 +0000";
        let now = time_of(amz_date);
        let sts = format!("DELETE\n\n\n\nx-amz-date:{amz_date}\n/johnsmith/photos/puppy.jpg");
        let auth = authz(&sign(&sts));
        // A stale or absent Date is ignored when x-amz-date is sent.
        for date in [None, Some("Mon, 01 Jan 2001 00:00:00 GMT")] {
            let mut h = vec![("x-amz-date", amz_date), ("authorization", auth.as_str())];
            if let Some(d) = date {
                h.push(("date", d));
            }
            let p = parts("DELETE", "/johnsmith/photos/puppy.jpg", &h);
            verify_request(&p, &c, now).unwrap();
        }
        // x-amz-date is the time that is checked.
        let p = parts(
            "DELETE",
            "/johnsmith/photos/puppy.jpg",
            &[
                ("x-amz-date", amz_date),
                ("date", amz_date),
                ("authorization", &auth),
            ],
        );
        assert_eq!(
            code(verify_request(&p, &c, now + Duration::from_secs(16 * 60))),
            S3ErrorCode::RequestTimeTooSkewed
        );
        // Signing the Date position with x-amz-date present is not what AWS specifies.
        let sts =
            format!("DELETE\n\n\n{amz_date}\nx-amz-date:{amz_date}\n/johnsmith/photos/puppy.jpg");
        let auth = authz(&sign(&sts));
        let p = parts(
            "DELETE",
            "/johnsmith/photos/puppy.jpg",
            &[
                ("x-amz-date", amz_date),
                ("date", amz_date),
                ("authorization", &auth),
            ],
        );
        assert_eq!(
            code(verify_request(&p, &c, now)),
            S3ErrorCode::SignatureDoesNotMatch
        );
    }

    #[test]
    fn clock_skew_and_dates() {
        let c = cfg();
        let date = "Wed, 28 Mar 2007 01:29:59 +0000";
        let p = parts(
            "GET",
            "/",
            &[
                ("date", date),
                ("authorization", &authz("qGdzdERIC03wnaRNKh6OqZehG9s=")),
            ],
        );
        let t = time_of(date);
        for ok in [
            t - Duration::from_secs(14 * 60),
            t + Duration::from_secs(15 * 60),
        ] {
            verify_request(&p, &c, ok).unwrap();
        }
        for bad in [
            t - Duration::from_secs(16 * 60),
            t + Duration::from_secs(16 * 60),
        ] {
            let e = verify_request(&p, &c, bad).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::RequestTimeTooSkewed);
            assert!(e.message.contains(date), "{e}");
        }
        // No date, or one that does not parse.
        for headers in [
            vec![],
            vec![("date", "yesterday")],
            vec![("x-amz-date", "2007-03-28")],
        ] {
            let auth = authz("qGdzdERIC03wnaRNKh6OqZehG9s=");
            let mut h = headers.clone();
            h.push(("authorization", &auth));
            let p = parts("GET", "/", &h);
            assert_eq!(
                code(verify_request(&p, &c, t)),
                S3ErrorCode::AccessDenied,
                "{headers:?}"
            );
        }
    }

    #[test]
    fn date_formats() {
        let t = 1_175_024_202; // Tue, 27 Mar 2007 19:36:42 UTC
        for s in [
            "Tue, 27 Mar 2007 19:36:42 +0000",
            "Tue, 27 Mar 2007 19:36:42 GMT",
            "Tue, 27 Mar 2007 21:36:42 +0200",
            "Tuesday, 27-Mar-07 19:36:42 GMT",
            "Tue Mar 27 19:36:42 2007",
            "20070327T193642Z",
            " Tue, 27 Mar 2007 19:36:42 GMT ",
        ] {
            assert_eq!(parse_date(s).map(|d| d.unix_timestamp()), Some(t), "{s}");
        }
        for s in [
            "",
            "27 Mar 2007",
            "Tue, 32 Mar 2007 19:36:42 GMT",
            "1175045802",
        ] {
            assert!(parse_date(s).is_none(), "{s}");
        }
    }

    #[test]
    fn credentials_and_header_syntax() {
        let c = cfg();
        let date = "Wed, 28 Mar 2007 01:29:59 +0000";
        let t = time_of(date);
        let with = |auth: &str| parts("GET", "/", &[("date", date), ("authorization", auth)]);
        // Unknown key.
        assert_eq!(
            code(verify_request(
                &with("AWS NOSUCHKEY:qGdzdERIC03wnaRNKh6OqZehG9s="),
                &c,
                t
            )),
            S3ErrorCode::InvalidAccessKeyId
        );
        // Wrong secret: the message names the StringToSign.
        let wrong = AuthConfig::new(vec![Credentials::new(AK, "not the secret")]);
        let e =
            verify_request(&with(&authz("qGdzdERIC03wnaRNKh6OqZehG9s=")), &wrong, t).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::SignatureDoesNotMatch);
        assert!(
            e.message
                .contains(r#"StringToSign: "GET\n\n\nWed, 28 Mar 2007 01:29:59 +0000\n/""#),
            "{e}"
        );
        // Signatures that are not base64 of 20 bytes.
        for sig in [
            "qGdzdERIC03wnaRNKh6OqZehG9s",
            "qGdzdERIC03wnaRNKh6OqZehG9s=AA==",
            "!!!!",
            "AAAA",
        ] {
            assert_eq!(
                code(verify_request(&with(&authz(sig)), &c, t)),
                S3ErrorCode::SignatureDoesNotMatch,
                "{sig}"
            );
        }
        // Malformed headers.
        for auth in [
            "AWS ",
            "AWS AKIAIOSFODNN7EXAMPLE",
            "AWS :qGdzdERIC03wnaRNKh6OqZehG9s=",
            "AWS AKIAIOSFODNN7EXAMPLE:",
        ] {
            assert_eq!(
                code(verify_request(&with(auth), &c, t)),
                S3ErrorCode::InvalidArgument,
                "{auth}"
            );
        }
        // Extra spaces around the credentials are tolerated.
        verify_request(
            &with("AWS  AKIAIOSFODNN7EXAMPLE:qGdzdERIC03wnaRNKh6OqZehG9s= "),
            &c,
            t,
        )
        .unwrap();
    }

    #[test]
    fn everything_signed_is_bound() {
        let c = cfg();
        let date = "Tue, 27 Mar 2007 21:15:45 +0000";
        let t = time_of(date);
        let sts = "PUT\nXrY7u+Ae7tCTyyK7j1rNww==\ntext/plain\nTue, 27 Mar 2007 21:15:45 +0000\n\
                   x-amz-meta-a:1\n/b/k?tagging";
        let auth = authz(&sign(sts));
        let base: Vec<(&str, &str)> = vec![
            ("date", date),
            ("content-md5", "XrY7u+Ae7tCTyyK7j1rNww=="),
            ("content-type", "text/plain"),
            ("x-amz-meta-a", "1"),
            ("authorization", &auth),
        ];
        verify_request(&parts("PUT", "/b/k?tagging", &base), &c, t).unwrap();
        // Unsigned query parameters and non-amz headers may change.
        let mut more = base.clone();
        more.push(("user-agent", "x"));
        verify_request(
            &parts("PUT", "/b/k?tagging&x-id=PutObjectTagging", &more),
            &c,
            t,
        )
        .unwrap();
        let replace = |name: &'static str, value: Option<&'static str>| {
            let mut h: Vec<(&str, &str)> =
                base.iter().copied().filter(|(k, _)| *k != name).collect();
            if let Some(v) = value {
                h.push((name, v));
            }
            h
        };
        for (uri, headers) in [
            ("/b/k2?tagging", base.clone()),
            ("/b/k", base.clone()),
            ("/b/k?tagging&acl", base.clone()),
            ("/b/k?tagging", replace("content-md5", None)),
            ("/b/k?tagging", replace("content-type", Some("text/html"))),
            ("/b/k?tagging", replace("x-amz-meta-a", Some("2"))),
            ("/b/k?tagging", replace("x-amz-meta-a", None)),
        ] {
            let mut h = headers.clone();
            if uri == "/b/k?tagging" && headers.len() == base.len() {
                h.push(("x-amz-meta-b", "added"));
            }
            assert_eq!(
                code(verify_request(&parts("PUT", uri, &h), &c, t)),
                S3ErrorCode::SignatureDoesNotMatch,
                "{uri} {h:?}"
            );
        }
        // Another method.
        assert_eq!(
            code(verify_request(&parts("POST", "/b/k?tagging", &base), &c, t)),
            S3ErrorCode::SignatureDoesNotMatch
        );
    }

    #[test]
    fn payload_is_unsigned_unless_a_sha256_is_signed() {
        let c = cfg();
        let date = "Tue, 27 Mar 2007 21:15:45 +0000";
        let t = time_of(date);
        let sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let sts = format!("PUT\n\n\n{date}\nx-amz-content-sha256:{sha}\n/b/k");
        let auth = authz(&sign(&sts));
        let p = parts(
            "PUT",
            "/b/k",
            &[
                ("date", date),
                ("x-amz-content-sha256", sha),
                ("authorization", &auth),
            ],
        );
        let a = verify_request(&p, &c, t).unwrap();
        assert!(matches!(a.payload, PayloadCheck::Sha256(_)));
        for (name, value) in [
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
            ("content-encoding", "aws-chunked"),
        ] {
            let p = parts(
                "PUT",
                "/b/k",
                &[("date", date), (name, value), ("authorization", &auth)],
            );
            assert_eq!(
                code(verify_request(&p, &c, t)),
                S3ErrorCode::InvalidRequest,
                "{value}"
            );
        }
    }

    #[test]
    fn presigned_parameters() {
        let c = cfg();
        let now = epoch(1_175_139_000);
        // Missing or empty parameters; a non-numeric Expires.
        for q in [
            "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1175139620",
            "Signature=abc&Expires=1175139620",
            "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=abc",
            "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=&Expires=1175139620",
            "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=abc&Expires=-1",
            "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=abc&Expires=1e9",
            "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=abc&Expires=99999999999999999999",
        ] {
            let p = parts("GET", &format!("/b/k?{q}"), &[]);
            assert_eq!(
                code(verify_request(&p, &c, now)),
                S3ErrorCode::AccessDenied,
                "{q}"
            );
        }
        let q = "AWSAccessKeyId=NOSUCHKEY&Signature=abc&Expires=1175139620";
        let p = parts("GET", &format!("/b/k?{q}"), &[]);
        assert_eq!(
            code(verify_request(&p, &c, now)),
            S3ErrorCode::InvalidAccessKeyId
        );
        // Only one mechanism.
        let q = "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Signature=abc&Expires=1175139620";
        let p = parts("GET", &format!("/b/k?{q}"), &[("authorization", "AWS a:b")]);
        assert_eq!(
            code(verify_request(&p, &c, now)),
            S3ErrorCode::InvalidArgument
        );
        let p = parts(
            "GET",
            &format!("/b/k?{q}&X-Amz-Algorithm=AWS4-HMAC-SHA256"),
            &[],
        );
        assert_eq!(
            code(verify_request(&p, &c, now)),
            S3ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn presigned_headers_may_travel_in_the_query() {
        // botocore moves Content-Type, Content-MD5 and x-amz-* it signed into the query.
        let c = cfg();
        let now = epoch(1_175_139_000);
        let sts = "PUT\n\ntext/plain\n1175139620\nx-amz-acl:private\n/b/k";
        let sig = sign(sts);
        let enc: String =
            percent_encoding::utf8_percent_encode(&sig, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        let uri = format!(
            "/b/k?AWSAccessKeyId={AK}&Signature={enc}&Expires=1175139620&content-type=text%2Fplain&x-amz-acl=private"
        );
        // In the query only, or also as headers with the same values.
        verify_request(&parts("PUT", &uri, &[]), &c, now).unwrap();
        verify_request(
            &parts(
                "PUT",
                &uri,
                &[("content-type", "text/plain"), ("x-amz-acl", "private")],
            ),
            &c,
            now,
        )
        .unwrap();
        // A header takes precedence over the query: a different value is not what was signed.
        assert_eq!(
            code(verify_request(
                &parts("PUT", &uri, &[("content-type", "text/html")]),
                &c,
                now
            )),
            S3ErrorCode::SignatureDoesNotMatch
        );
        assert_eq!(
            code(verify_request(
                &parts("PUT", &uri, &[("x-amz-acl", "public-read")]),
                &c,
                now
            )),
            S3ErrorCode::SignatureDoesNotMatch
        );
        // Date headers play no part in a presigned request.
        verify_request(
            &parts("PUT", &uri, &[("date", "Mon, 01 Jan 2001 00:00:00 GMT")]),
            &c,
            now,
        )
        .unwrap();
    }

    #[test]
    fn signature_comparison() {
        let sig = hmac_sha1(b"k", b"d");
        let b64 = base64::engine::general_purpose::STANDARD.encode(sig);
        assert!(signature_matches(&sig, &b64));
        assert!(signature_matches(&sig, &format!(" {b64} ")));
        assert!(!signature_matches(&sig, &b64.to_lowercase()));
        assert!(!signature_matches(&sig, &b64[..b64.len() - 1]));
        assert!(!signature_matches(&sig, ""));
    }
}
