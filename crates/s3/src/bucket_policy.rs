//! Bucket policies: PutBucketPolicy, GetBucketPolicy, DeleteBucketPolicy and
//! GetBucketPolicyStatus, and the cache through which `server::dispatch` hands a bucket's policy
//! to the one authorization decision (`authz::authorize`).
//!
//! The policy is stored as the document the user sent (GetBucketPolicy returns it byte for byte,
//! as S3 does), through the object layer's bucket configuration documents under the name
//! `policy`, after it parsed as a resource policy and passed S3's own checks: every statement
//! names a `Principal`, its actions are S3 actions, its resources lie in this bucket.
//!
//! Parsed policies are cached per bucket for [`CACHE_TTL`]: a change on this node is seen at once
//! (the cache entry is dropped), a change made through another node within that time.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::StatusCode;
use quarry_policy::{Effect, Policy};

use crate::api_error::{ApiError, ApiResult};
use crate::config_cache::{CachedConfig, ConfigCache};
use crate::error::{S3Error, S3ErrorCode};
use crate::server::ReqCtx;
use crate::xml::{self, XmlWriter};

/// The name of the bucket configuration document.
const CONFIG_NAME: &str = "policy";
/// The largest bucket policy S3 accepts, in bytes.
pub const MAX_BUCKET_POLICY: usize = 20 * 1024;
/// How long a parsed policy is used before it is read again: the most a change made on another
/// node takes to be seen here.
const CACHE_TTL: Duration = Duration::from_secs(1);

/// Condition keys that tie a grant to specific callers or networks: a statement with one of them
/// is not public (AWS's "IsPublic" rules).
const LIMITING_KEYS: &[&str] = &[
    "aws:SourceIp",
    "aws:SourceVpc",
    "aws:SourceVpce",
    "aws:SourceArn",
    "aws:SourceAccount",
    "aws:SourceOwner",
    "aws:PrincipalAccount",
    "aws:PrincipalArn",
    "aws:PrincipalOrgID",
    "aws:userid",
    "aws:username",
    "s3:DataAccessPointArn",
    "s3:DataAccessPointAccount",
];

fn malformed(message: impl Into<String>) -> S3Error {
    S3Error::new(S3ErrorCode::MalformedPolicy, message)
}

/// Parses and checks a bucket policy for `bucket` as PutBucketPolicy does.
pub fn validate(bucket: &str, doc: &[u8]) -> Result<Policy, S3Error> {
    if doc.len() > MAX_BUCKET_POLICY {
        return Err(malformed(format!(
            "Policies must be less than {MAX_BUCKET_POLICY} bytes."
        )));
    }
    let text = std::str::from_utf8(doc).map_err(|_| malformed("Policies must be valid JSON."))?;
    if text.trim().is_empty() {
        return Err(malformed(
            "Policies must be valid JSON and the first byte must be '{'",
        ));
    }
    let policy = Policy::parse_resource(text).map_err(|e| malformed(e.to_string()))?;
    let arn = crate::authz::bucket_arn(bucket);
    for (i, st) in policy.statements.iter().enumerate() {
        let at = match &st.sid {
            Some(sid) => format!("Statement {} (Sid {sid:?})", i + 1),
            None => format!("Statement {}", i + 1),
        };
        for p in &st.action.patterns {
            let a = p.as_str();
            let service = a.split_once(':').map(|(s, _)| s);
            if a != "*" && !service.is_some_and(|s| s.eq_ignore_ascii_case("s3")) {
                return Err(malformed(format!("Policy has invalid action: {at}: {a:?}")));
            }
        }
        let Some(resources) = &st.resource else {
            return Err(malformed(format!("{at}: Missing required field Resource")));
        };
        for p in &resources.patterns {
            let r = p.as_str();
            // In this bucket: its ARN, or an object ARN below it (a pattern may end a prefix
            // with a wildcard). `*` and `arn:aws:s3:::*` cover it too.
            let inside = r == "*"
                || r == "arn:aws:s3:::*"
                || r == arn
                || r.strip_prefix(arn.as_str())
                    .is_some_and(|rest| rest.starts_with('/') || rest == "*");
            if !inside {
                return Err(malformed(format!(
                    "Policy has invalid resource: {at}: {r:?} is not in bucket {bucket:?}"
                )));
            }
        }
    }
    Ok(policy)
}

/// Whether a policy makes its bucket public as AWS judges it: some `Allow` statement grants
/// `Principal: "*"` (or `NotPrincipal`, which grants nearly everyone) without a condition tying
/// it to specific callers or networks.
pub fn is_public(policy: &Policy) -> bool {
    policy.statements.iter().any(|st| {
        st.effect == Effect::Allow
            && st.principal.as_ref().is_some_and(|p| p.any || p.negated)
            && !st
                .conditions
                .iter()
                .any(|c| !c.negated && LIMITING_KEYS.iter().any(|k| k.eq_ignore_ascii_case(&c.key)))
    })
}

/// Parsed bucket policies by bucket ([`crate::config_cache`]).
pub(crate) type PolicyCache = ConfigCache<Policy>;

impl CachedConfig for Policy {
    const NAME: &'static str = CONFIG_NAME;
    const TTL: Duration = CACHE_TTL;
    // Stored only after it validated: a document this version refuses grants nothing rather
    // than everything.
    const WHAT: &'static str = "bucket policy";
    fn parse(bucket: &str, raw: &[u8]) -> Result<Self, S3Error> {
        validate(bucket, raw)
    }
}

pub(crate) async fn put_bucket_policy(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    if signature_size_over(ctx) {
        return Err(malformed(format!(
            "Policies must be less than {MAX_BUCKET_POLICY} bytes."
        ))
        .into());
    }
    let body = ctx.small_body().await?;
    let policy = validate(bucket, &body)?;
    crate::acl_config::check_policy_allowed(ctx, bucket, &policy).await?;
    ctx.layer()
        .put_bucket_config(bucket, CONFIG_NAME, body)
        .await?;
    ctx.state.bucket_policies.invalidate(bucket);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

fn signature_size_over(ctx: &ReqCtx) -> bool {
    crate::signature::declared_size(&ctx.parts).is_some_and(|n| n > MAX_BUCKET_POLICY as u64)
}

async fn stored(ctx: &ReqCtx, bucket: &str) -> ApiResult<Bytes> {
    ctx.layer()
        .get_bucket_config(bucket, CONFIG_NAME)
        .await?
        .ok_or_else(|| S3ErrorCode::NoSuchBucketPolicy.into())
}

pub(crate) async fn get_bucket_policy(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let doc = stored(ctx, bucket).await?;
    let mut response = Response::new(Body::from(doc));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

pub(crate) async fn delete_bucket_policy(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer()
        .delete_bucket_config(bucket, CONFIG_NAME)
        .await?;
    ctx.state.bucket_policies.invalidate(bucket);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

pub(crate) async fn get_bucket_policy_status(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let doc = stored(ctx, bucket).await?;
    let policy = validate(bucket, &doc).map_err(|e| {
        tracing::error!(bucket, error = %e.message, "stored bucket policy does not parse");
        ApiError::from(S3ErrorCode::InternalError)
    })?;
    let mut w = XmlWriter::with_namespace("PolicyStatus", xml::S3_XMLNS);
    w.elem(
        "IsPublic",
        if is_public(&policy) { "true" } else { "false" },
    );
    Ok(xml::xml_response(w.finish("PolicyStatus")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(statement: &str) -> String {
        format!(r#"{{"Version":"2012-10-17","Statement":[{statement}]}}"#)
    }

    #[test]
    fn validates_as_s3() {
        let ok = doc(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#,
        );
        assert!(validate("b", ok.as_bytes()).is_ok());
        let cases = [
            // No principal.
            doc(r#"{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#),
            // Another bucket.
            doc(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::bb/*"}"#,
            ),
            doc(
                r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::other"}"#,
            ),
            // Not an S3 action.
            doc(
                r#"{"Effect":"Allow","Principal":"*","Action":"iam:CreateUser","Resource":"arn:aws:s3:::b"}"#,
            ),
            "not json".to_owned(),
            String::new(),
        ];
        for c in cases {
            let e = validate("b", c.as_bytes()).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::MalformedPolicy, "{c}");
        }
        let big = " ".repeat(MAX_BUCKET_POLICY + 1);
        assert_eq!(
            validate("b", big.as_bytes()).unwrap_err().code,
            S3ErrorCode::MalformedPolicy
        );
    }

    #[test]
    fn public_or_not() {
        let public = |s: &str| is_public(&validate("b", doc(s).as_bytes()).unwrap());
        assert!(public(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#
        ));
        assert!(public(
            r#"{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:*","Resource":"arn:aws:s3:::b"}"#
        ));
        // Tied to a network: not public.
        assert!(!public(
            r#"{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}"#
        ));
        // A named principal, or a deny: not public.
        assert!(!public(
            r#"{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:user/u"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#
        ));
        assert!(!public(
            r#"{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}"#
        ));
    }
}
