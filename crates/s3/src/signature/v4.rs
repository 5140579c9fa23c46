//! AWS Signature Version 4 as S3 applies it: canonical request, string to sign, signing key,
//! and verification of the `Authorization: AWS4-HMAC-SHA256 ...` header.
//!
//! S3 specifics (unlike most AWS services): the canonical URI is the path as sent, each segment
//! URI-encoded once and never normalized (`//` and `..` are part of object keys). To accept clients
//! that escape different characters, the path is decoded and re-encoded with AWS's unreserved set;
//! if that does not match, the path exactly as sent is tried (what signers in "single encoding"
//! mode sign). Both are functions of the raw path, so neither lets a different key through.
//! The canonical query treats `+` as a space (as `form_urlencoded`, the AWS Rust SDK and Go's
//! `url.Query` do); the handlers must parse query values the same way.

use hmac::{Hmac, Mac};
use http::request::Parts;
use percent_encoding::{percent_decode, percent_encode, AsciiSet, NON_ALPHANUMERIC};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;
use time::{Duration, OffsetDateTime, PrimitiveDateTime};

use super::streaming::ChunkSigner;
use super::{AuthConfig, Authenticated, Credentials, PayloadCheck};
use crate::error::{S3Error, S3ErrorCode};

pub(crate) const ALGORITHM: &str = "AWS4-HMAC-SHA256";
pub(crate) const SERVICE: &str = "s3";

/// The services a credential scope may name: S3, and the IAM and STS query APIs that this
/// endpoint also answers (`POST /`).
pub(crate) fn service_name(service: &str) -> Option<&'static str> {
    match service {
        "s3" => Some("s3"),
        "iam" => Some("iam"),
        "sts" => Some("sts"),
        _ => None,
    }
}
pub(crate) const TERMINAL: &str = "aws4_request";
pub(crate) const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
pub(crate) const STREAMING_SIGNED: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
pub(crate) const STREAMING_SIGNED_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
pub(crate) const STREAMING_UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
/// Hex SHA-256 of the empty string.
pub(crate) const EMPTY_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// Allowed difference between the request time and ours.
pub(crate) const MAX_SKEW: Duration = Duration::minutes(15);

/// Characters AWS leaves unencoded: `A-Z a-z 0-9 - . _ ~`.
const AWS_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

type HmacSha256 = Hmac<Sha256>;

pub(crate) fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha256::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC-SHA256 accepts keys of any length"),
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The signing key of a scope, derived once and then kept (see `key_cache`).
pub(crate) fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    super::key_cache::signing_key(secret, date, region, service, derive_signing_key)
}

/// `kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")`.
pub(crate) fn derive_signing_key(
    secret: &str,
    date: &str,
    region: &str,
    service: &str,
) -> [u8; 32] {
    let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac_sha256(&k_date, region.as_bytes());
    let k_service = hmac_sha256(&k_region, service.as_bytes());
    hmac_sha256(&k_service, TERMINAL.as_bytes())
}

/// Compares a computed signature with the hex one a client sent, in constant time.
pub(crate) fn signature_matches(computed: &[u8; 32], provided_hex: &str) -> bool {
    let mut provided = [0u8; 32];
    if hex::decode_to_slice(provided_hex.trim(), &mut provided).is_err() {
        return false;
    }
    computed.ct_eq(&provided).into()
}

/// URI-encodes bytes the way SigV4 does (upper-case hex), optionally leaving `/` alone.
fn aws_encode_into(out: &mut String, bytes: &[u8], keep_slash: bool) {
    if keep_slash {
        let mut first = true;
        for segment in bytes.split(|&b| b == b'/') {
            if !first {
                out.push('/');
            }
            first = false;
            out.extend(percent_encode(segment, AWS_ENCODE));
        }
    } else {
        out.extend(percent_encode(bytes, AWS_ENCODE));
    }
}

/// The canonical URI: every segment of the raw path decoded then encoded once with AWS's set.
/// No normalization (S3 keys may contain `//`, `.` and `..`).
pub(crate) fn canonical_uri(raw_path: &str) -> String {
    if raw_path.is_empty() {
        return "/".to_string();
    }
    let mut out = String::with_capacity(raw_path.len() + 16);
    let mut first = true;
    for segment in raw_path.split('/') {
        if !first {
            out.push('/');
        }
        first = false;
        let decoded: Vec<u8> = percent_decode(segment.as_bytes()).collect();
        aws_encode_into(&mut out, &decoded, false);
    }
    out
}

/// Decodes an `application/x-www-form-urlencoded`-style component: `%XX` escapes and `+` as space.
fn decode_query_component(raw: &str) -> Vec<u8> {
    let plus_as_space: Vec<u8> = raw
        .bytes()
        .map(|b| if b == b'+' { b' ' } else { b })
        .collect();
    percent_decode(&plus_as_space).collect()
}

/// The query as decoded `(name, value)` pairs, in the order sent. A parameter without `=` has an
/// empty value.
pub(crate) fn parse_query(raw_query: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    raw_query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode_query_component(k), decode_query_component(v)),
            None => (decode_query_component(p), Vec::new()),
        })
        .collect()
}

/// The canonical query string: pairs encoded with AWS's set, sorted by name then value, joined with
/// `&`. `skip` names a parameter to leave out (`X-Amz-Signature` for presigned URLs).
pub(crate) fn canonical_query(pairs: &[(Vec<u8>, Vec<u8>)], skip: Option<&str>) -> String {
    let mut encoded: Vec<(String, String)> = pairs
        .iter()
        .filter(|(k, _)| skip.is_none_or(|s| k.as_slice() != s.as_bytes()))
        .map(|(k, v)| {
            let mut ek = String::with_capacity(k.len());
            aws_encode_into(&mut ek, k, false);
            let mut ev = String::with_capacity(v.len());
            aws_encode_into(&mut ev, v, false);
            (ek, ev)
        })
        .collect();
    encoded.sort();
    let mut out = String::new();
    for (i, (k, v)) in encoded.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}

/// Trims spaces at both ends and collapses runs of spaces, as S3 does (only ' ', not other whitespace).
fn push_trimmed_value(out: &mut Vec<u8>, value: &[u8]) {
    let start = value.iter().position(|&b| b != b' ').unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |e| e + 1);
    let mut prev_space = false;
    for &b in &value[start..end] {
        if b == b' ' {
            if prev_space {
                continue;
            }
            prev_space = true;
        } else {
            prev_space = false;
        }
        out.push(b);
    }
}

/// The canonical headers block: `name:value\n` for each signed header, in the order given (the
/// client's `SignedHeaders` list, which AWS requires sorted). Several values of one header are joined
/// with `,`. `host` falls back to the URI authority (HTTP/2).
pub(crate) fn canonical_headers(parts: &Parts, signed: &[&str]) -> Result<Vec<u8>, S3Error> {
    let mut out = Vec::with_capacity(256);
    for &name in signed {
        let lname = name.to_ascii_lowercase();
        out.extend_from_slice(lname.as_bytes());
        out.push(b':');
        let mut values = parts.headers.get_all(lname.as_str()).iter().peekable();
        if values.peek().is_none() {
            match (lname.as_str(), parts.uri.authority()) {
                ("host", Some(authority)) => {
                    push_trimmed_value(&mut out, authority.as_str().as_bytes())
                }
                _ => {
                    return Err(S3Error::new(
                        S3ErrorCode::SignatureDoesNotMatch,
                        format!("The signed header '{lname}' is not present in the request."),
                    ))
                }
            }
        }
        for (i, value) in values.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_trimmed_value(&mut out, value.as_bytes());
        }
        out.push(b'\n');
    }
    Ok(out)
}

/// The canonical request, byte for byte as AWS defines it.
pub(crate) fn canonical_request(
    method: &str,
    canonical_uri: &str,
    canonical_query: &str,
    canonical_headers: &[u8],
    signed_headers: &str,
    payload_hash: &str,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        method.len()
            + canonical_uri.len()
            + canonical_query.len()
            + canonical_headers.len()
            + signed_headers.len()
            + payload_hash.len()
            + 8,
    );
    for part in [
        method.as_bytes(),
        canonical_uri.as_bytes(),
        canonical_query.as_bytes(),
    ] {
        out.extend_from_slice(part);
        out.push(b'\n');
    }
    out.extend_from_slice(canonical_headers);
    out.push(b'\n');
    out.extend_from_slice(signed_headers.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(payload_hash.as_bytes());
    out
}

pub(crate) fn string_to_sign(amz_date: &str, scope: &str, canonical_request: &[u8]) -> String {
    format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical_request)
    )
}

/// Parses an ISO 8601 basic timestamp, `20130524T000000Z`.
pub(crate) fn parse_amz_date(s: &str) -> Option<OffsetDateTime> {
    if s.len() != 16 || !s.is_ascii() {
        return None;
    }
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    PrimitiveDateTime::parse(s, &format)
        .ok()
        .map(PrimitiveDateTime::assume_utc)
}

/// Formats a time as an ISO 8601 basic timestamp, `20130524T000000Z`.
pub(crate) fn format_amz_date(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Which way the request carried its signature; decides the error codes and message prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthKind {
    Header,
    Presigned,
}

impl AuthKind {
    pub(crate) fn malformed(self, detail: impl std::fmt::Display) -> S3Error {
        match self {
            AuthKind::Header => S3Error::new(
                S3ErrorCode::AuthorizationHeaderMalformed,
                format!("The authorization header is malformed; {detail}"),
            ),
            AuthKind::Presigned => S3Error::new(
                S3ErrorCode::AuthorizationQueryParametersError,
                format!("Error parsing the X-Amz-Credential parameter; {detail}"),
            ),
        }
    }
}

/// `AKID/20130524/us-east-1/s3/aws4_request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credential<'a> {
    pub access_key: &'a str,
    pub date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    pub terminal: &'a str,
}

impl<'a> Credential<'a> {
    pub(crate) fn parse(s: &'a str, kind: AuthKind) -> Result<Self, S3Error> {
        let malformed = || {
            kind.malformed(
                "the Credential is mal-formed; expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".",
            )
        };
        let mut it = s.trim().rsplitn(5, '/');
        let terminal = it.next().ok_or_else(malformed)?;
        let service = it.next().ok_or_else(malformed)?;
        let region = it.next().ok_or_else(malformed)?;
        let date = it.next().ok_or_else(malformed)?;
        let access_key = it.next().ok_or_else(malformed)?;
        // An empty region is how boto3 signs IAM and STS calls made with `region_name=''`
        // (ceph/s3-tests does); `check` accepts it for those two services only.
        if access_key.is_empty() || (region.is_empty() && !matches!(service, "iam" | "sts")) {
            return Err(malformed());
        }
        Ok(Credential {
            access_key,
            date,
            region,
            service,
            terminal,
        })
    }

    /// The scope string: `20130524/us-east-1/s3/aws4_request`.
    pub(crate) fn scope(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.date, self.region, self.service, self.terminal
        )
    }

    /// Checks service, terminal, region and that the date is the day of `amz_date`.
    pub(crate) fn check(
        &self,
        kind: AuthKind,
        cfg: &AuthConfig,
        amz_date: &str,
    ) -> Result<(), S3Error> {
        if service_name(self.service).is_none() {
            return Err(kind.malformed(format_args!(
                "incorrect service \"{}\". This endpoint belongs to \"{SERVICE}\" (and \"iam\", \"sts\" for POST /).",
                self.service
            )));
        }
        if self.terminal != TERMINAL {
            return Err(kind.malformed(format_args!(
                "incorrect terminal \"{}\". This endpoint uses \"{TERMINAL}\".",
                self.terminal
            )));
        }
        // IAM and STS are global in AWS: their endpoint signs as us-east-1 (and boto3 clients
        // made with region_name='' sign with an empty region), whatever region S3 answers for.
        let global =
            matches!(self.region, "" | "us-east-1") && matches!(self.service, "iam" | "sts");
        if self.region != cfg.region && !global {
            return Err(kind
                .malformed(format_args!(
                    "the region '{}' is wrong; expecting '{}'",
                    self.region, cfg.region
                ))
                .with_region(&cfg.region));
        }
        if amz_date.get(..8) != Some(self.date) {
            return Err(kind.malformed(format_args!(
                "Invalid credential date \"{}\". This date is not the same as X-Amz-Date: \"{}\".",
                self.date,
                amz_date.get(..8).unwrap_or(amz_date)
            )));
        }
        Ok(())
    }
}

/// Everything needed to check one SigV4 signature, whichever way it was carried.
pub(crate) struct SignatureInput<'a> {
    pub kind: AuthKind,
    pub credential: Credential<'a>,
    pub amz_date: &'a str,
    pub signed_headers: &'a str,
    pub signature: &'a str,
    pub payload_hash: &'a str,
    /// The decoded query, and the parameter to leave out of the canonical query.
    pub query: &'a [(Vec<u8>, Vec<u8>)],
    pub skip_param: Option<&'a str>,
}

/// The first `x-amz-*` header of the request that the signature does not cover, if any.
///
/// A header outside `SignedHeaders` could be added by whoever holds a signed request or a
/// presigned URL, and `x-amz-*` headers steer what a request does (`x-amz-copy-source` turns a
/// PUT into a copy, `x-amz-meta-*`, `x-amz-acl`, `x-amz-tagging`… are stored), so S3 refuses them
/// (AccessDenied, "There were headers present in the request which were not signed"), for header
/// auth and presigned URLs alike. The one exception is `x-amz-content-sha256` when its value is the
/// payload hash the signature binds (always so for header auth, where the canonical request
/// carries it; for a presigned URL, when it repeats `UNSIGNED-PAYLOAD` or the signed
/// `X-Amz-Content-Sha256` parameter). The headers that announce a trailer or an aws-chunked length
/// (`x-amz-trailer`, `x-amz-decoded-content-length`) are not exempt: AWS's own examples sign them
/// and every SDK does. Trailing headers arrive after the body, in the (signed or checksummed)
/// trailer chunk, and are not request headers. `x-amzn-*` (AWS tracing) is not `x-amz-*`.
pub(crate) fn unsigned_amz_header<'p>(
    parts: &'p Parts,
    signed: &[&str],
    payload_hash: &str,
) -> Option<&'p str> {
    parts.headers.iter().find_map(|(name, value)| {
        let name = name.as_str(); // http lower-cases header names
        if !name.starts_with("x-amz-") || signed.iter().any(|s| s.trim().eq_ignore_ascii_case(name))
        {
            return None;
        }
        let bound_payload_hash = name == "x-amz-content-sha256"
            && value.to_str().is_ok_and(|v| v.trim() == payload_hash);
        (!bound_payload_hash).then_some(name)
    })
}

/// S3's refusal of a request that carries an `x-amz-*` header its signature does not cover.
pub(crate) fn headers_not_signed(name: &str) -> S3Error {
    S3Error::new(
        S3ErrorCode::AccessDenied,
        "There were headers present in the request which were not signed",
    )
    .with_headers_not_signed(name)
}

/// A verified signature: who signed, and the key and signature a chunked body continues from.
pub(crate) struct Verified {
    pub credentials: Credentials,
    /// The service of the credential scope (`s3`, `iam` or `sts`).
    pub service: &'static str,
    pub signing_key: [u8; 32],
    pub signature: [u8; 32],
    pub scope: String,
}

/// Checks scope, key and signature. Time checks are the caller's (they differ per kind).
pub(crate) fn verify_signature(
    parts: &Parts,
    cfg: &AuthConfig,
    input: &SignatureInput<'_>,
) -> Result<Verified, S3Error> {
    input.credential.check(input.kind, cfg, input.amz_date)?;
    let signed: Vec<&str> = input.signed_headers.split(';').collect();
    if signed.iter().any(|h| h.trim().is_empty()) {
        return Err(match input.kind {
            AuthKind::Header => input
                .kind
                .malformed("the SignedHeaders list is empty or malformed."),
            AuthKind::Presigned => S3Error::new(
                S3ErrorCode::AuthorizationQueryParametersError,
                "X-Amz-SignedHeaders is empty or malformed.",
            ),
        });
    }
    if !signed.iter().any(|h| h.eq_ignore_ascii_case("host")) {
        return Err(S3Error::new(
            match input.kind {
                AuthKind::Header => S3ErrorCode::AuthorizationHeaderMalformed,
                AuthKind::Presigned => S3ErrorCode::AuthorizationQueryParametersError,
            },
            "The host header must be included in the signed headers.",
        ));
    }
    let credentials = cfg
        .find(input.credential.access_key)
        .ok_or_else(|| S3Error::from_code(S3ErrorCode::InvalidAccessKeyId))?;

    let headers = canonical_headers(parts, &signed)?;
    let query = canonical_query(input.query, input.skip_param);
    let scope = input.credential.scope();
    let key = signing_key(
        &credentials.secret_key,
        input.credential.date,
        input.credential.region,
        input.credential.service,
    );
    let method = parts.method.as_str();
    let raw_path = parts.uri.path();
    let encoded_uri = canonical_uri(raw_path);

    let attempt = |uri: &str| {
        let creq = canonical_request(
            method,
            uri,
            &query,
            &headers,
            input.signed_headers,
            input.payload_hash,
        );
        let sts = string_to_sign(input.amz_date, &scope, &creq);
        let sig = hmac_sha256(&key, sts.as_bytes());
        (signature_matches(&sig, input.signature), sig, creq, sts)
    };
    let (mut ok, mut sig, creq, sts) = attempt(&encoded_uri);
    if !ok && encoded_uri != raw_path && !raw_path.is_empty() {
        (ok, sig, _, _) = attempt(raw_path);
    }
    if !ok {
        tracing::debug!(
            access_key = %credentials.access_key,
            canonical_request = %String::from_utf8_lossy(&creq),
            string_to_sign = %sts,
            "SigV4 signature mismatch"
        );
        return Err(S3Error::from_code(S3ErrorCode::SignatureDoesNotMatch));
    }
    if let Some(name) = unsigned_amz_header(parts, &signed, input.payload_hash) {
        return Err(headers_not_signed(name));
    }
    Ok(Verified {
        service: service_name(input.credential.service).unwrap_or(SERVICE),
        credentials,
        signing_key: key,
        signature: sig,
        scope,
    })
}

/// The parsed `Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct AuthorizationHeader<'a> {
    pub credential: Credential<'a>,
    pub signed_headers: &'a str,
    pub signature: &'a str,
}

impl<'a> AuthorizationHeader<'a> {
    pub(crate) fn parse(value: &'a str) -> Result<Self, S3Error> {
        let kind = AuthKind::Header;
        let rest = value
            .trim()
            .strip_prefix(ALGORITHM)
            .filter(|r| r.starts_with([' ', '\t']))
            .ok_or_else(|| kind.malformed("the algorithm must be AWS4-HMAC-SHA256."))?;
        let (mut credential, mut signed_headers, mut signature) = (None, None, None);
        for field in rest.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            let (name, val) = field.split_once('=').ok_or_else(|| {
                kind.malformed(format_args!(
                    "the field \"{field}\" is not of the form name=value."
                ))
            })?;
            let slot = match name.trim() {
                "Credential" => &mut credential,
                "SignedHeaders" => &mut signed_headers,
                "Signature" => &mut signature,
                other => return Err(kind.malformed(format_args!("unknown field \"{other}\"."))),
            };
            if slot.replace(val.trim()).is_some() {
                return Err(
                    kind.malformed(format_args!("the field \"{}\" appears twice.", name.trim()))
                );
            }
        }
        let missing = |what: &str| kind.malformed(format_args!("missing {what}."));
        let credential = Credential::parse(credential.ok_or_else(|| missing("Credential"))?, kind)?;
        Ok(AuthorizationHeader {
            credential,
            signed_headers: signed_headers.ok_or_else(|| missing("SignedHeaders"))?,
            signature: signature.ok_or_else(|| missing("Signature"))?,
        })
    }
}

/// What the `x-amz-content-sha256` header announces about the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContentSha256 {
    Unsigned,
    Sha256([u8; 32]),
    StreamingSigned,
    StreamingSignedTrailer,
    StreamingUnsignedTrailer,
}

impl ContentSha256 {
    pub(crate) fn parse(value: &str) -> Result<Self, S3Error> {
        Ok(match value {
            UNSIGNED_PAYLOAD => ContentSha256::Unsigned,
            STREAMING_SIGNED => ContentSha256::StreamingSigned,
            STREAMING_SIGNED_TRAILER => ContentSha256::StreamingSignedTrailer,
            STREAMING_UNSIGNED_TRAILER => ContentSha256::StreamingUnsignedTrailer,
            v if v.starts_with("STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD") => {
                return Err(S3Error::new(
                    S3ErrorCode::NotImplemented,
                    "SigV4a (STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD) is not supported.",
                ))
            }
            v => {
                let mut digest = [0u8; 32];
                if v.len() != 64 || hex::decode_to_slice(v, &mut digest).is_err() {
                    return Err(S3Error::new(
                        S3ErrorCode::InvalidArgument,
                        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, \
                         STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER \
                         or a valid sha256 value.",
                    ));
                }
                ContentSha256::Sha256(digest)
            }
        })
    }
}

/// The request time for header auth: `x-amz-date`, else `Date`. Returns the ISO basic string that
/// goes in the string to sign, and the time.
fn request_time(parts: &Parts) -> Result<(String, OffsetDateTime), S3Error> {
    let denied = || {
        S3Error::new(
            S3ErrorCode::AccessDenied,
            "AWS authentication requires a valid Date or x-amz-date header",
        )
    };
    if let Some(v) = parts.headers.get("x-amz-date") {
        let s = v.to_str().map_err(|_| denied())?.trim();
        let t = parse_amz_date(s).ok_or_else(denied)?;
        return Ok((s.to_string(), t));
    }
    // RFC 1123 with `GMT`, or with a numeric zone: botocore signs with `Date: ... -0000` when a
    // caller set a Date header.
    let v = parts.headers.get(http::header::DATE).ok_or_else(denied)?;
    let t = super::v2::parse_date(v.to_str().map_err(|_| denied())?).ok_or_else(denied)?;
    Ok((format_amz_date(t), t))
}

/// Verifies a request signed with the `Authorization` header.
pub(crate) fn verify_header_auth(
    parts: &Parts,
    cfg: &AuthConfig,
    now: std::time::SystemTime,
    authorization: &str,
) -> Result<Authenticated, S3Error> {
    let header = AuthorizationHeader::parse(authorization)?;
    let content_sha256 = parts
        .headers
        .get("x-amz-content-sha256")
        .ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::InvalidRequest,
                "Missing required header for this request: x-amz-content-sha256",
            )
        })?
        .to_str()
        .map_err(|_| {
            S3Error::new(
                S3ErrorCode::InvalidArgument,
                "x-amz-content-sha256 is not valid ASCII.",
            )
        })?
        .trim();
    let payload = ContentSha256::parse(content_sha256)?;
    let (amz_date, date) = request_time(parts)?;
    header.credential.check(AuthKind::Header, cfg, &amz_date)?;
    if cfg.find(header.credential.access_key).is_none() {
        return Err(S3Error::from_code(S3ErrorCode::InvalidAccessKeyId));
    }
    let now = OffsetDateTime::from(now);
    if (now - date).abs() > MAX_SKEW {
        return Err(S3Error::new(
            S3ErrorCode::RequestTimeTooSkewed,
            format!(
                "The difference between the request time and the server's time is too large. \
                 RequestTime: {amz_date}, ServerTime: {}",
                format_amz_date(now)
            ),
        ));
    }
    let query = parse_query(parts.uri.query().unwrap_or(""));
    let input = SignatureInput {
        kind: AuthKind::Header,
        credential: header.credential.clone(),
        amz_date: &amz_date,
        signed_headers: header.signed_headers,
        signature: header.signature,
        payload_hash: content_sha256,
        query: &query,
        skip_param: None,
    };
    let verified = verify_signature(parts, cfg, &input)?;
    let signer = || {
        ChunkSigner::new(
            verified.signing_key,
            amz_date.clone(),
            verified.scope.clone(),
            verified.signature,
        )
    };
    let payload = match payload {
        ContentSha256::Unsigned => PayloadCheck::Unsigned,
        ContentSha256::Sha256(d) => PayloadCheck::Sha256(d),
        ContentSha256::StreamingSigned => PayloadCheck::StreamingSigned { signer: signer() },
        ContentSha256::StreamingSignedTrailer => {
            PayloadCheck::StreamingSignedTrailer { signer: signer() }
        }
        ContentSha256::StreamingUnsignedTrailer => PayloadCheck::StreamingUnsignedTrailer {},
    };
    Ok(Authenticated {
        access_key: verified.credentials.access_key.clone(),
        service: verified.service,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_headers(pairs: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().method("PUT").uri("/b/k");
        for (k, v) in pairs {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn request_time_from_x_amz_date_or_date() {
        let want = "20261202T044036Z";
        // botocore signs with `Date: ... -0000` (and no x-amz-date) when the caller set a Date.
        for date in [
            "Wed, 02 Dec 2026 04:40:36 GMT",
            "Wed, 02 Dec 2026 04:40:36 -0000",
            "Wed, 02 Dec 2026 04:40:36 +0000",
        ] {
            let (iso, _) = request_time(&with_headers(&[("date", date)])).unwrap();
            assert_eq!(iso, want, "{date}");
        }
        // x-amz-date wins over Date.
        let (iso, _) = request_time(&with_headers(&[
            ("date", "Thu, 03 Dec 2026 00:00:00 GMT"),
            ("x-amz-date", want),
        ]))
        .unwrap();
        assert_eq!(iso, want);
        for bad in [
            vec![],
            vec![("date", "yesterday")],
            vec![("x-amz-date", "Wed, 02 Dec 2026 04:40:36 GMT")],
        ] {
            let e = request_time(&with_headers(&bad)).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::AccessDenied, "{bad:?}");
        }
    }

    #[test]
    fn uri_encoding() {
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(canonical_uri("/"), "/");
        assert_eq!(canonical_uri("/test$file.text"), "/test%24file.text");
        assert_eq!(canonical_uri("/test%24file.text"), "/test%24file.text");
        // Lower-case escapes and unnecessary escapes are normalized; no path normalization.
        assert_eq!(canonical_uri("/b/a%2fb/%7e%41"), "/b/a%2Fb/~A");
        assert_eq!(canonical_uri("/b//./../k"), "/b//./../k");
        assert_eq!(canonical_uri("/b/a+b c"), "/b/a%2Bb%20c");
        assert_eq!(canonical_uri("/b/%E2%82%AC"), "/b/%E2%82%AC");
        assert_eq!(canonical_uri("/b/%zz"), "/b/%25zz");
    }

    #[test]
    fn query_canonicalization() {
        let q = parse_query("prefix=a+b*~&b=2&a=2&a=1&acl&&%C3%A4=1");
        assert_eq!(
            canonical_query(&q, None),
            "%C3%A4=1&a=1&a=2&acl=&b=2&prefix=a%20b%2A~"
        );
        let q = parse_query("X-Amz-Signature=abc&x=1");
        assert_eq!(canonical_query(&q, Some("X-Amz-Signature")), "x=1");
        assert_eq!(canonical_query(&[], None), "");
    }

    #[test]
    fn header_values_are_trimmed_and_collapsed() {
        let req = http::Request::builder()
            .uri("/")
            .header("host", "h")
            .header("x-amz-meta-a", "  a   b  c ")
            .header("x-amz-meta-b", "one")
            .header("x-amz-meta-b", " two ")
            .body(())
            .unwrap();
        let (parts, _) = req.into_parts();
        let out = canonical_headers(&parts, &["host", "x-amz-meta-a", "x-amz-meta-b"]).unwrap();
        assert_eq!(out, b"host:h\nx-amz-meta-a:a b c\nx-amz-meta-b:one,two\n");
        let err = canonical_headers(&parts, &["host", "x-amz-meta-missing"]).unwrap_err();
        assert_eq!(err.code, S3ErrorCode::SignatureDoesNotMatch);
    }

    #[test]
    fn amz_dates() {
        let t = parse_amz_date("20130524T000000Z").unwrap();
        assert_eq!(t.unix_timestamp(), 1_369_353_600);
        assert_eq!(format_amz_date(t), "20130524T000000Z");
        for bad in [
            "20130524T000000",
            "2013-05-24T00:00:00Z",
            "20131324T000000Z",
            "+0130524T000000Z",
            "",
        ] {
            assert!(parse_amz_date(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn signing_key_matches_aws_sigv4() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_369_353_600);
        let theirs = aws_sigv4::sign::v4::generate_signing_key("secret", t, "us-east-1", "s3");
        assert_eq!(
            &signing_key("secret", "20130524", "us-east-1", "s3")[..],
            theirs.as_ref()
        );
    }

    #[test]
    fn authorization_header_parsing() {
        let h = AuthorizationHeader::parse(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-date,Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024",
        )
        .unwrap();
        assert_eq!(h.credential.access_key, "AKIAIOSFODNN7EXAMPLE");
        assert_eq!(h.credential.scope(), "20130524/us-east-1/s3/aws4_request");
        assert_eq!(h.signed_headers, "host;range;x-amz-date");
        for bad in [
            "AWS4-HMAC-SHA256",
            "AWS4-HMAC-SHA256Credential=a/b/c/d/e",
            "AWS4-HMAC-SHA256 Credential=a/20130524/us-east-1/s3/aws4_request, Signature=00",
            "AWS4-HMAC-SHA256 Credential=20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00, Signature=00",
            "AWS4-HMAC-SHA256 Credential=a/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature",
            "AWS4-HMAC-SHA256 Credential=a/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00, Foo=1",
        ] {
            let e = AuthorizationHeader::parse(bad).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::AuthorizationHeaderMalformed, "{bad}");
        }
    }

    #[test]
    fn content_sha256_values() {
        assert_eq!(
            ContentSha256::parse("UNSIGNED-PAYLOAD").unwrap(),
            ContentSha256::Unsigned
        );
        assert_eq!(
            ContentSha256::parse(EMPTY_SHA256).unwrap(),
            ContentSha256::Sha256(Sha256::digest(b"").into())
        );
        assert_eq!(
            ContentSha256::parse("STREAMING-UNSIGNED-PAYLOAD-TRAILER").unwrap(),
            ContentSha256::StreamingUnsignedTrailer
        );
        assert_eq!(
            ContentSha256::parse("abc").unwrap_err().code,
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(
            ContentSha256::parse("STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD")
                .unwrap_err()
                .code,
            S3ErrorCode::NotImplemented
        );
    }

    #[test]
    fn signature_comparison() {
        let sig = [0xabu8; 32];
        assert!(signature_matches(&sig, &"ab".repeat(32)));
        assert!(signature_matches(&sig, &"AB".repeat(32)));
        assert!(!signature_matches(&sig, &"ab".repeat(31)));
        assert!(!signature_matches(&sig, &format!("{}ac", "ab".repeat(31))));
        assert!(!signature_matches(&sig, ""));
    }
}
