//! Forwarding: a browser's S3 call, signed with its session's credentials (SigV4, unsigned
//! payload) and handed to the S3 service in this process. The S3 layer authenticates and
//! authorizes it exactly as it would the same call from any client, so the console can do no
//! more than the signed-in identity may.

use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
    SignatureLocation, SigningSettings, UriPathNormalizationMode,
};
use axum::body::Body;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::session::SessionCredentials;

/// The host name forwarded requests carry: never a bucket's virtual-host domain, so the S3
/// router reads every forwarded path as path style.
pub const INTERNAL_HOST: &str = "console.quarry.invalid";

/// SigV4's unreserved characters; everything else is percent-encoded.
const SIGV4: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Why a request could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("the request path or query is not valid UTF-8 once decoded")]
    Encoding,
    #[error("cannot sign the request: {0}")]
    Sign(String),
}

/// `s` percent-encoded as SigV4 wants it (`/` kept when `keep_slash`).
pub fn encode(s: &str, keep_slash: bool) -> String {
    if keep_slash {
        s.split('/')
            .map(|seg| utf8_percent_encode(seg, SIGV4).to_string())
            .collect::<Vec<_>>()
            .join("/")
    } else {
        utf8_percent_encode(s, SIGV4).to_string()
    }
}

fn decode(s: &str) -> Result<String, SignError> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| SignError::Encoding)
}

/// The path and query of `raw_path?raw_query` as one canonical form: decoded, then encoded with
/// SigV4's rules (`+` in a query is a space, as browsers' form encoding has it).
pub fn canonical_path_and_query(
    raw_path: &str,
    raw_query: Option<&str>,
) -> Result<String, SignError> {
    let path = encode(&decode(raw_path)?, true);
    let Some(q) = raw_query.filter(|q| !q.is_empty()) else {
        return Ok(path);
    };
    let mut pairs = Vec::new();
    for piece in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = piece.split_once('=').unwrap_or((piece, ""));
        let k = decode(&k.replace('+', " "))?;
        let v = decode(&v.replace('+', " "))?;
        pairs.push(format!("{}={}", encode(&k, false), encode(&v, false)));
    }
    Ok(format!("{path}?{}", pairs.join("&")))
}

fn settings() -> SigningSettings {
    let mut s = SigningSettings::default();
    s.percent_encoding_mode = PercentEncodingMode::Single;
    s.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    s.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    s
}

fn identity(c: &SessionCredentials) -> aws_smithy_runtime_api::client::identity::Identity {
    aws_credential_types::Credentials::new(
        c.access_key.clone(),
        c.secret_key.clone(),
        c.session_token.clone(),
        None,
        "quarry-console",
    )
    .into()
}

/// Request headers a browser may send through to S3: the operations' own headers. Signature,
/// date, payload-hash and token headers are the proxy's to set; cookies and the rest stay here.
fn forwarded_header(name: &HeaderName) -> bool {
    let n = name.as_str();
    if let Some(amz) = n.strip_prefix("x-amz-") {
        return !matches!(
            amz,
            "date" | "content-sha256" | "security-token" | "decoded-content-length" | "trailer"
        );
    }
    matches!(
        n,
        "content-type"
            | "content-length"
            | "content-md5"
            | "content-disposition"
            | "content-encoding"
            | "content-language"
            | "cache-control"
            | "expires"
            | "range"
            | "if-match"
            | "if-none-match"
            | "if-modified-since"
            | "if-unmodified-since"
    )
}

/// Headers covered by the signature (the others are sent unsigned, as S3 allows).
fn signed_header(name: &str) -> bool {
    name.starts_with("x-amz-") || name == "content-type" || name == "content-md5"
}

/// The request to the S3 service for `method path_and_query` with the browser's `headers` and
/// `body`, signed as `creds` (payload unsigned, as S3 allows).
pub fn signed_request(
    creds: &SessionCredentials,
    region: &str,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Body,
    now: SystemTime,
) -> Result<Request<Body>, SignError> {
    let mut out = HeaderMap::new();
    for (k, v) in headers {
        if forwarded_header(k) {
            out.append(k.clone(), v.clone());
        }
    }
    sign_into(
        Signing {
            creds,
            region,
            service: "s3",
            now,
        },
        method,
        path_and_query,
        out,
        SignableBody::UnsignedPayload,
        body,
    )
}

/// The IAM query API call `form` (`Action=...&...`, form-encoded), as `POST /` signed as `creds`
/// for service `iam`, the payload hash covering the form as the AWS SDKs sign it.
pub fn signed_iam_form(
    creds: &SessionCredentials,
    region: &str,
    form: bytes::Bytes,
    now: SystemTime,
) -> Result<Request<Body>, SignError> {
    let mut out = HeaderMap::new();
    out.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
    );
    let signable = SignableBody::Bytes(&form);
    sign_into(
        Signing {
            creds,
            region,
            service: "iam",
            now,
        },
        Method::POST,
        "/",
        out,
        signable,
        Body::from(form.clone()),
    )
}

/// Who signs, where and when.
struct Signing<'a> {
    creds: &'a SessionCredentials,
    region: &'a str,
    service: &'a str,
    now: SystemTime,
}

/// `method path_and_query` with `out` (the headers to send, without `Host`) and `body`, signed
/// in headers; `payload` is what the signature says of the body.
fn sign_into(
    signing: Signing<'_>,
    method: Method,
    path_and_query: &str,
    mut out: HeaderMap,
    payload: SignableBody<'_>,
    body: Body,
) -> Result<Request<Body>, SignError> {
    out.insert(http::header::HOST, HeaderValue::from_static(INTERNAL_HOST));
    let url = format!("http://{INTERNAL_HOST}{path_and_query}");
    let to_sign: Vec<(&str, &str)> = out
        .iter()
        .filter(|(k, _)| k == &http::header::HOST || signed_header(k.as_str()))
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
        .collect();
    let id = identity(signing.creds);
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&id)
        .region(signing.region)
        .name(signing.service)
        .time(signing.now)
        .settings(settings())
        .build()
        .map_err(|e| SignError::Sign(e.to_string()))?
        .into();
    let signable =
        SignableRequest::new(method.as_str(), url.as_str(), to_sign.into_iter(), payload)
            .map_err(|e| SignError::Sign(e.to_string()))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| SignError::Sign(e.to_string()))?
        .into_parts();
    let mut req = Request::builder()
        .method(method)
        .uri(path_and_query)
        .body(body)
        .map_err(|e| SignError::Sign(e.to_string()))?;
    *req.headers_mut() = out;
    instructions.apply_to_request_http1x(&mut req);
    Ok(req)
}

/// What a share link names.
#[derive(Debug, Clone, Copy)]
pub struct Presign<'a> {
    /// `scheme://host:port` of the S3 listener.
    pub base: &'a str,
    pub bucket: &'a str,
    pub key: &'a str,
    pub version_id: Option<&'a str>,
    pub expires: Duration,
}

/// A presigned GET URL of the object `p` names, valid for `p.expires`.
pub fn presign_get(
    creds: &SessionCredentials,
    region: &str,
    p: &Presign<'_>,
    now: SystemTime,
) -> Result<String, SignError> {
    let Presign {
        base,
        bucket,
        key,
        version_id,
        expires,
    } = *p;
    let mut url = format!("{base}/{}/{}", encode(bucket, false), encode(key, true));
    if let Some(v) = version_id {
        url = format!("{url}?versionId={}", encode(v, false));
    }
    let host = base
        .split_once("://")
        .map_or(base, |(_, h)| h)
        .trim_end_matches('/');
    let mut s = settings();
    s.signature_location = SignatureLocation::QueryParams;
    s.expires_in = Some(expires);
    s.payload_checksum_kind = PayloadChecksumKind::NoHeader;
    let id = identity(creds);
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&id)
        .region(region)
        .name("s3")
        .time(now)
        .settings(s)
        .build()
        .map_err(|e| SignError::Sign(e.to_string()))?
        .into();
    let signable = SignableRequest::new(
        "GET",
        url.as_str(),
        [("host", host)].into_iter(),
        SignableBody::UnsignedPayload,
    )
    .map_err(|e| SignError::Sign(e.to_string()))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| SignError::Sign(e.to_string()))?
        .into_parts();
    let (_, query) = instructions.into_parts();
    let extra: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k, false), encode(v, false)))
        .collect();
    let sep = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{sep}{}", extra.join("&")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_queries_are_canonical() {
        assert_eq!(
            canonical_path_and_query(
                "/b/a%20b/c+d%2Be",
                Some("prefix=x+y&list-type=2&delimiter=%2F")
            )
            .unwrap(),
            "/b/a%20b/c%2Bd%2Be?prefix=x%20y&list-type=2&delimiter=%2F"
        );
        assert_eq!(
            canonical_path_and_query("/b", Some("uploads")).unwrap(),
            "/b?uploads="
        );
        assert!(canonical_path_and_query("/b/%FF", None).is_err());
    }

    #[test]
    fn browser_headers_cannot_set_the_signature() {
        for h in [
            "authorization",
            "x-amz-date",
            "x-amz-content-sha256",
            "x-amz-security-token",
            "cookie",
            "host",
        ] {
            assert!(!forwarded_header(&HeaderName::from_static(h)), "{h}");
        }
        for h in ["x-amz-meta-a", "content-type", "range", "x-amz-copy-source"] {
            assert!(forwarded_header(&HeaderName::from_static(h)), "{h}");
        }
    }
}
