//! Presigned URLs: SigV4 carried in the query (`X-Amz-Algorithm`, `X-Amz-Credential`, `X-Amz-Date`,
//! `X-Amz-Expires`, `X-Amz-SignedHeaders`, `X-Amz-Signature`).
//!
//! The canonical request is the header one with `X-Amz-Signature` left out of the query and
//! `UNSIGNED-PAYLOAD` as the payload hash (or the value of an `X-Amz-Content-Sha256` query
//! parameter, if the signer put one there).

use http::request::Parts;
use time::{Duration, OffsetDateTime};

use super::v4::{
    parse_amz_date, verify_signature, AuthKind, ContentSha256, Credential, SignatureInput,
    ALGORITHM, MAX_SKEW, UNSIGNED_PAYLOAD,
};
use super::{AuthConfig, Authenticated, PayloadCheck};
use crate::error::{S3Error, S3ErrorCode};

/// The longest validity AWS allows a presigned URL: seven days.
pub(crate) const MAX_EXPIRES_SECS: i64 = 7 * 24 * 3600;

pub(crate) const X_AMZ_ALGORITHM: &str = "X-Amz-Algorithm";
const X_AMZ_CREDENTIAL: &str = "X-Amz-Credential";
const X_AMZ_DATE: &str = "X-Amz-Date";
const X_AMZ_EXPIRES: &str = "X-Amz-Expires";
const X_AMZ_SIGNED_HEADERS: &str = "X-Amz-SignedHeaders";
const X_AMZ_SIGNATURE: &str = "X-Amz-Signature";
const X_AMZ_CONTENT_SHA256: &str = "X-Amz-Content-Sha256";

fn query_error(message: impl Into<String>) -> S3Error {
    S3Error::new(S3ErrorCode::AuthorizationQueryParametersError, message)
}

/// The first value of a query parameter (names are case-sensitive, as AWS treats them).
fn param<'q>(query: &'q [(Vec<u8>, Vec<u8>)], name: &str) -> Option<&'q [u8]> {
    query
        .iter()
        .find(|(k, _)| k.as_slice() == name.as_bytes())
        .map(|(_, v)| v.as_slice())
}

fn required<'q>(query: &'q [(Vec<u8>, Vec<u8>)], name: &str) -> Result<&'q str, S3Error> {
    let missing = || {
        query_error(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, \
             X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.",
        )
    };
    let v = param(query, name).ok_or_else(missing)?;
    let v =
        std::str::from_utf8(v).map_err(|_| query_error(format!("{name} is not valid UTF-8.")))?;
    if v.is_empty() {
        return Err(missing());
    }
    Ok(v)
}

/// Whether the query carries SigV4 presigned parameters.
pub(crate) fn is_presigned_v4(query: &[(Vec<u8>, Vec<u8>)]) -> bool {
    param(query, X_AMZ_ALGORITHM).is_some()
}

pub(crate) fn verify_presigned(
    parts: &Parts,
    cfg: &AuthConfig,
    now: std::time::SystemTime,
    query: &[(Vec<u8>, Vec<u8>)],
) -> Result<Authenticated, S3Error> {
    let algorithm = required(query, X_AMZ_ALGORITHM)?;
    if algorithm != ALGORITHM {
        return Err(query_error(
            "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"",
        ));
    }
    let credential = Credential::parse(required(query, X_AMZ_CREDENTIAL)?, AuthKind::Presigned)?;
    let amz_date = required(query, X_AMZ_DATE)?;
    let expires = required(query, X_AMZ_EXPIRES)?;
    let signed_headers = required(query, X_AMZ_SIGNED_HEADERS)?;
    let signature = required(query, X_AMZ_SIGNATURE)?;

    let date = parse_amz_date(amz_date).ok_or_else(|| {
        query_error("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
    })?;
    let expires: i64 = expires
        .parse()
        .map_err(|_| query_error("X-Amz-Expires should be a number"))?;
    // A negative lifetime ended before the URL was signed: expired (403), as S3 answers it.
    if expires < 0 {
        return Err(S3Error::new(
            S3ErrorCode::AccessDenied,
            "Request has expired",
        ));
    }
    if expires > MAX_EXPIRES_SECS {
        return Err(query_error(
            "X-Amz-Expires must be less than a week (in seconds) that is 604800",
        ));
    }

    credential.check(AuthKind::Presigned, cfg, amz_date)?;
    if cfg.find(credential.access_key).is_none() {
        return Err(S3Error::from_code(S3ErrorCode::InvalidAccessKeyId));
    }
    let now = OffsetDateTime::from(now);
    if date - now > MAX_SKEW {
        return Err(S3Error::new(
            S3ErrorCode::AccessDenied,
            "Request is not valid yet",
        ));
    }
    // `checked_add` fails only near year 9999, which the check above has already refused.
    if date
        .checked_add(Duration::seconds(expires))
        .is_none_or(|end| now > end)
    {
        return Err(S3Error::new(
            S3ErrorCode::AccessDenied,
            "Request has expired",
        ));
    }

    let (payload_hash, payload) = match param(query, X_AMZ_CONTENT_SHA256) {
        None => (UNSIGNED_PAYLOAD, PayloadCheck::Unsigned),
        Some(v) => {
            let v = std::str::from_utf8(v)
                .map_err(|_| query_error("X-Amz-Content-Sha256 is not valid UTF-8."))?;
            match ContentSha256::parse(v)? {
                ContentSha256::Unsigned => (v, PayloadCheck::Unsigned),
                ContentSha256::Sha256(d) => (v, PayloadCheck::Sha256(d)),
                _ => {
                    return Err(query_error(
                        "X-Amz-Content-Sha256 must be UNSIGNED-PAYLOAD or a sha256 value for presigned requests.",
                    ))
                }
            }
        }
    };

    let input = SignatureInput {
        kind: AuthKind::Presigned,
        credential,
        amz_date,
        signed_headers,
        signature,
        payload_hash,
        query,
        skip_param: Some(X_AMZ_SIGNATURE),
    };
    let verified = verify_signature(parts, cfg, &input)?;
    Ok(Authenticated {
        access_key: verified.credentials.access_key.clone(),
        service: verified.service,
        payload,
    })
}
