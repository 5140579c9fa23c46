//! Object lock: CreateBucket with `x-amz-bucket-object-lock-enabled`, Put/GetObjectLockConfiguration
//! (a default retention of Days or Years), Put/GetObjectRetention and Put/GetObjectLegalHold per
//! version, the `x-amz-object-lock-*` headers of PutObject, CopyObject and CreateMultipartUpload,
//! and those headers on GET and HEAD.
//!
//! A bucket's lock configuration is its `object-lock` configuration document; a version's
//! retention and legal hold are reserved entries of its stored headers, which the object layer
//! checks before it deletes a version (`quarry_object::deletion_refused`), whoever asks. A
//! COMPLIANCE retention is never shortened, changed or removed; a GOVERNANCE one only with
//! `x-amz-bypass-governance-retention: true` from the root user (the only identity that may,
//! until IAM policies grant `s3:BypassGovernanceRetention`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use md5::{Digest, Md5};
use quarry_object::{
    legal_hold, retention, set_legal_hold, set_retention, Error as ObjectError, HeadersUpdate,
    ObjectInfo, Retention, RetentionMode, VersionId, VersioningState,
};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::api_error::{ApiError, ApiResult};
use crate::error::{S3Error, S3ErrorCode};
use crate::headers::set_header;
use crate::server::ReqCtx;
use crate::xml::{iso8601, parse_document, xml_response, XmlWriter};

/// The bucket configuration document holding a bucket's lock configuration.
pub const BUCKET_CONFIG: &str = "object-lock";

/// The longest default retention, as AWS: 100 years (36,500 days).
const MAX_DEFAULT_DAYS: i64 = 36_500;
const MAX_DEFAULT_YEARS: i64 = 100;

/// A default retention period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Days(i64),
    Years(i64),
}

impl Period {
    /// The period in milliseconds (a year is 365 days, as S3 counts it).
    fn millis(self) -> i64 {
        let days = match self {
            Period::Days(d) => d,
            Period::Years(y) => y * 365,
        };
        days * 86_400_000
    }
}

/// A bucket's object lock configuration: enabled, with perhaps a default retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LockConfig {
    pub default: Option<(RetentionMode, Period)>,
}

fn malformed(why: &str) -> S3Error {
    S3Error::new(
        S3ErrorCode::MalformedXML,
        format!("The XML you provided was not well-formed or did not validate: {why}."),
    )
}

fn invalid_request(message: impl Into<String>) -> ApiError {
    ApiError::new(S3ErrorCode::InvalidRequest, message)
}

fn missing_configuration() -> ApiError {
    invalid_request("Bucket is missing Object Lock Configuration")
}

impl LockConfig {
    /// The default retention for a version created at `now_ms`, if the configuration has one.
    pub fn default_from(&self, now_ms: i64) -> Option<Retention> {
        self.default.map(|(mode, period)| Retention {
            mode,
            until_ms: now_ms.saturating_add(period.millis()),
        })
    }

    /// Parses an `ObjectLockConfiguration` document, with AWS's errors.
    pub fn parse(body: &[u8]) -> Result<LockConfig, S3Error> {
        let root = parse_document(body)?;
        if root.name != "ObjectLockConfiguration" {
            return Err(malformed("the root element is not ObjectLockConfiguration"));
        }
        match root.child("ObjectLockEnabled").map(|e| e.text.trim()) {
            Some("Enabled") => {}
            _ => return Err(malformed("ObjectLockEnabled must be Enabled")),
        }
        let Some(rule) = root.child("Rule") else {
            return Ok(LockConfig::default());
        };
        let d = rule
            .child("DefaultRetention")
            .ok_or_else(|| malformed("a Rule needs a DefaultRetention"))?;
        let mode = d
            .child("Mode")
            .and_then(|m| RetentionMode::parse(m.text.trim()))
            .ok_or_else(|| malformed("Mode must be GOVERNANCE or COMPLIANCE"))?;
        let number = |name: &str| -> Result<Option<i64>, S3Error> {
            match d.child(name) {
                None => Ok(None),
                Some(e) => e.text.trim().parse::<i64>().map(Some).map_err(|_| {
                    S3Error::new(
                        S3ErrorCode::InvalidRetentionPeriod,
                        format!("{name} must be a positive integer."),
                    )
                }),
            }
        };
        let period = match (number("Days")?, number("Years")?) {
            (Some(_), Some(_)) => return Err(malformed("give Days or Years, not both")),
            (None, None) => return Err(malformed("a DefaultRetention needs Days or Years")),
            (Some(d), None) if (1..=MAX_DEFAULT_DAYS).contains(&d) => Period::Days(d),
            (None, Some(y)) if (1..=MAX_DEFAULT_YEARS).contains(&y) => Period::Years(y),
            _ => {
                return Err(S3Error::new(
                    S3ErrorCode::InvalidRetentionPeriod,
                    format!(
                        "The default retention period must be 1 to {MAX_DEFAULT_DAYS} days or \
                         1 to {MAX_DEFAULT_YEARS} years."
                    ),
                ))
            }
        };
        Ok(LockConfig {
            default: Some((mode, period)),
        })
    }

    pub fn to_xml(self) -> String {
        let root = "ObjectLockConfiguration";
        let mut w = XmlWriter::new(root);
        w.elem("ObjectLockEnabled", "Enabled");
        if let Some((mode, period)) = self.default {
            w.open("Rule").open("DefaultRetention");
            w.elem("Mode", mode.as_str());
            match period {
                Period::Days(d) => w.elem_display("Days", d),
                Period::Years(y) => w.elem_display("Years", y),
            };
            w.close("DefaultRetention").close("Rule");
        }
        w.finish(root)
    }
}

/// The bucket's lock configuration; `None` when object lock is not enabled on it.
pub async fn lock_config(ctx: &ReqCtx, bucket: &str) -> ApiResult<Option<LockConfig>> {
    parse_stored(
        bucket,
        ctx.layer().get_bucket_config(bucket, BUCKET_CONFIG).await?,
    )
}

/// [`lock_config`] as a write applies it: from the node's configuration cache (a change through
/// this node at once, through another within `quarry_object::CONFIG_CACHE_TTL`).
async fn lock_config_for_write(ctx: &ReqCtx, bucket: &str) -> ApiResult<Option<LockConfig>> {
    parse_stored(
        bucket,
        ctx.layer()
            .get_bucket_config_cached(bucket, BUCKET_CONFIG)
            .await?,
    )
}

fn parse_stored(bucket: &str, stored: Option<bytes::Bytes>) -> ApiResult<Option<LockConfig>> {
    match stored {
        None => Ok(None),
        Some(raw) => LockConfig::parse(&raw).map(Some).map_err(|e| {
            tracing::error!(bucket, error = %e, "stored object lock configuration does not parse");
            ApiError::from(S3ErrorCode::InternalError)
        }),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Parses a retain-until date (ISO 8601 / RFC 3339) into milliseconds since the epoch.
fn parse_date(s: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(s.trim(), &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Whether `x-amz-bypass-governance-retention: true` comes from a caller allowed to use it: the
/// root user (IAM adds `s3:BypassGovernanceRetention` for others).
pub fn bypass_governance(ctx: &ReqCtx) -> bool {
    let asked = ctx
        .parts
        .headers
        .get("x-amz-bypass-governance-retention")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    asked
        && ctx
            .state
            .auth
            .credentials
            .first()
            .is_some_and(|root| root.access_key == ctx.auth.access_key)
}

/// When a write takes the bucket's default retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockWrite {
    /// PutObject: now, and a retention needs a Content-MD5 or checksum (as AWS requires).
    Put,
    /// CopyObject: now.
    Copy,
    /// CreateMultipartUpload: not now. The version is created at CompleteMultipartUpload, which
    /// takes the default then ([`default_retention_entries`]), so the retain-until date counts
    /// from the object's creation, as for any other write.
    CreateUpload,
}

/// The object lock entries a new version gets from a write's `x-amz-object-lock-*` headers, or
/// from the bucket's default retention (see [`LockWrite`]).
pub async fn write_lock_entries(
    ctx: &ReqCtx,
    bucket: &str,
    headers: &HeaderMap,
    write: LockWrite,
) -> ApiResult<BTreeMap<String, String>> {
    let needs_digest = write == LockWrite::Put;
    let text = |name: &str| -> ApiResult<Option<&str>> {
        headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .map_err(|_| ApiError::invalid_argument(format!("{name} is not valid text.")))
            })
            .transpose()
    };
    let mode = text("x-amz-object-lock-mode")?;
    let until = text("x-amz-object-lock-retain-until-date")?;
    let hold = text("x-amz-object-lock-legal-hold")?;
    let asked = mode.is_some() || until.is_some() || hold.is_some();
    let config = lock_config_for_write(ctx, bucket).await?;
    let Some(config) = config else {
        if asked {
            return Err(missing_configuration());
        }
        return Ok(BTreeMap::new());
    };
    let now = now_ms();
    let explicit = match (mode, until) {
        (None, None) => None,
        (Some(m), Some(u)) => {
            let mode = RetentionMode::parse(m).ok_or_else(|| {
                ApiError::invalid_argument(
                    "Unknown wormMode directive: it is GOVERNANCE or COMPLIANCE.",
                )
            })?;
            let until_ms = parse_date(u).ok_or_else(|| {
                ApiError::invalid_argument(
                    "The retain until date must be provided in ISO 8601 format.",
                )
            })?;
            if until_ms <= now {
                return Err(ApiError::invalid_argument(
                    "The retain until date must be in the future!",
                ));
            }
            Some(Retention { mode, until_ms })
        }
        _ => {
            return Err(ApiError::invalid_argument(
                "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be \
                 supplied.",
            ))
        }
    };
    let retention = match write {
        LockWrite::CreateUpload => explicit,
        LockWrite::Put | LockWrite::Copy => explicit.or_else(|| config.default_from(now)),
    };
    let on = match hold {
        None | Some("OFF") => false,
        Some("ON") => true,
        Some(_) => {
            return Err(ApiError::invalid_argument(
                "x-amz-object-lock-legal-hold must be ON or OFF.",
            ))
        }
    };
    if needs_digest && retention.is_some() && !has_digest(headers) {
        return Err(invalid_request(
            "Content-MD5 OR x-amz-checksum- HTTP header is required for Put Object requests with \
             Object Lock parameters",
        ));
    }
    let mut out = BTreeMap::new();
    set_retention(&mut out, retention);
    set_legal_hold(&mut out, on);
    Ok(out)
}

/// The entries of the bucket's default retention counted from now, for a version created by
/// CompleteMultipartUpload (empty without a default). The object layer applies them only to an
/// upload that named no retention of its own.
pub async fn default_retention_entries(
    ctx: &ReqCtx,
    bucket: &str,
) -> ApiResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    if let Some(config) = lock_config_for_write(ctx, bucket).await? {
        set_retention(&mut out, config.default_from(now_ms()));
    }
    Ok(out)
}

/// Whether a write carries a digest of its body: Content-MD5, a checksum header or trailer.
fn has_digest(headers: &HeaderMap) -> bool {
    headers.contains_key("content-md5")
        || headers.contains_key("x-amz-trailer")
        || headers.contains_key("x-amz-sdk-checksum-algorithm")
        || headers
            .keys()
            .any(|k| k.as_str().starts_with("x-amz-checksum-") && k != "x-amz-checksum-type")
}

/// The lock headers of GET and HEAD.
pub fn lock_response_headers(out: &mut HeaderMap, info: &ObjectInfo) {
    if let Some(r) = retention(&info.headers) {
        set_header(out, "x-amz-object-lock-mode", r.mode.as_str());
        set_header(
            out,
            "x-amz-object-lock-retain-until-date",
            &iso8601(r.until_ms.saturating_mul(1_000_000)),
        );
    }
    if legal_hold(&info.headers) {
        set_header(out, "x-amz-object-lock-legal-hold", "ON");
    }
}

/// `CreateBucket` with `x-amz-bucket-object-lock-enabled: true`: versioning on, lock enabled.
pub async fn enable_on_new_bucket(ctx: &ReqCtx, bucket: &str) -> ApiResult<()> {
    ctx.layer()
        .put_bucket_versioning(bucket, VersioningState::Enabled)
        .await?;
    ctx.layer()
        .put_bucket_config(
            bucket,
            BUCKET_CONFIG,
            Bytes::from(LockConfig::default().to_xml()),
        )
        .await?;
    Ok(())
}

/// Refuses to suspend versioning on a bucket with object lock (409 `InvalidBucketState`).
pub async fn check_versioning_change(
    ctx: &ReqCtx,
    bucket: &str,
    state: VersioningState,
) -> ApiResult<()> {
    if state != VersioningState::Enabled && lock_config(ctx, bucket).await?.is_some() {
        return Err(ApiError::new(
            S3ErrorCode::InvalidBucketState,
            "An Object Lock configuration is present on this bucket, so the versioning state \
             cannot be changed.",
        ));
    }
    Ok(())
}

async fn checked_body(ctx: &ReqCtx) -> ApiResult<Bytes> {
    let expected = crate::headers::content_md5(&ctx.parts.headers)?;
    let body = ctx.small_body().await?;
    if let Some(md5) = expected {
        if Md5::digest(&body)[..] != md5[..] {
            return Err(S3ErrorCode::BadDigest.into());
        }
    }
    Ok(body)
}

/// `PUT /bucket?object-lock`. Enabling lock on an existing bucket needs versioning enabled.
pub async fn put_object_lock_configuration(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let body = checked_body(ctx).await?;
    let config = LockConfig::parse(&body)?;
    if lock_config(ctx, bucket).await?.is_none()
        && ctx.layer().get_bucket_versioning(bucket).await? != VersioningState::Enabled
    {
        return Err(ApiError::new(
            S3ErrorCode::InvalidBucketState,
            "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration",
        ));
    }
    ctx.layer()
        .put_bucket_config(bucket, BUCKET_CONFIG, Bytes::from(config.to_xml()))
        .await?;
    Ok(Response::new(Body::empty()))
}

/// `GET /bucket?object-lock`.
pub async fn get_object_lock_configuration(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    match lock_config(ctx, bucket).await? {
        Some(c) => Ok(xml_response(c.to_xml())),
        None => Err(S3ErrorCode::ObjectLockConfigurationNotFoundError.into()),
    }
}

/// Parses a `Retention` document; `None`: no retention (its removal).
fn parse_retention(body: &[u8]) -> Result<Option<Retention>, S3Error> {
    let root = parse_document(body)?;
    if root.name != "Retention" {
        return Err(malformed("the root element is not Retention"));
    }
    let mode = root.child("Mode").map(|m| m.text.trim().to_owned());
    let until = root
        .child("RetainUntilDate")
        .map(|d| d.text.trim().to_owned());
    match (mode, until) {
        (None, None) => Ok(None),
        (Some(m), Some(u)) => {
            let mode = RetentionMode::parse(&m)
                .ok_or_else(|| malformed("Mode must be GOVERNANCE or COMPLIANCE"))?;
            let until_ms = parse_date(&u)
                .ok_or_else(|| malformed("RetainUntilDate is not an ISO 8601 date"))?;
            Ok(Some(Retention { mode, until_ms }))
        }
        _ => Err(malformed("a Retention needs both Mode and RetainUntilDate")),
    }
}

/// Whether replacing retention `old` by `new` at `now_ms` is allowed: anything once `old` has
/// passed; else COMPLIANCE only lengthened (same mode); GOVERNANCE lengthened in the same mode,
/// any other change only with the bypass.
fn retention_change_allowed(
    old: Option<Retention>,
    new: Option<Retention>,
    now_ms: i64,
    bypass: bool,
) -> Result<(), &'static str> {
    let Some(old) = old.filter(|o| o.active(now_ms)) else {
        return Ok(());
    };
    let lengthened = new.is_some_and(|n| n.mode == old.mode && n.until_ms >= old.until_ms);
    match old.mode {
        _ if lengthened => Ok(()),
        RetentionMode::Compliance => {
            Err("a COMPLIANCE retention cannot be shortened, changed or removed before its date")
        }
        RetentionMode::Governance if bypass => Ok(()),
        RetentionMode::Governance => Err(
            "shortening, changing or removing a GOVERNANCE retention needs \
             x-amz-bypass-governance-retention",
        ),
    }
}

/// `PUT /bucket/key?retention[&versionId=]`.
pub async fn put_object_retention(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let body = checked_body(ctx).await?;
    if lock_config(ctx, bucket).await?.is_none() {
        return Err(missing_configuration());
    }
    let new = parse_retention(&body)?;
    let now = now_ms();
    if new.is_some_and(|n| n.until_ms <= now) {
        return Err(ApiError::invalid_argument(
            "The retain until date must be in the future!",
        ));
    }
    let bypass = bypass_governance(ctx);
    let update: HeadersUpdate = Arc::new(move |_, headers| {
        retention_change_allowed(retention(headers), new, now_ms(), bypass)
            .map_err(|why| ObjectError::ObjectLocked(why.to_owned()))?;
        set_retention(headers, new);
        Ok(())
    });
    let info = ctx
        .layer()
        .update_object_headers(bucket, key, version, update)
        .await?;
    let mut response = Response::new(Body::empty());
    crate::versioning::version_header(ctx, bucket, response.headers_mut(), &info).await?;
    Ok(response)
}

/// `GET /bucket/key?retention[&versionId=]`.
pub async fn get_object_retention(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    if lock_config(ctx, bucket).await?.is_none() {
        return Err(missing_configuration());
    }
    let info = ctx
        .layer()
        .object_version_info(bucket, key, version)
        .await?;
    let Some(r) = retention(&info.headers) else {
        return Err(S3ErrorCode::NoSuchObjectLockConfiguration.into());
    };
    let mut w = XmlWriter::new("Retention");
    w.elem("Mode", r.mode.as_str()).elem(
        "RetainUntilDate",
        &iso8601(r.until_ms.saturating_mul(1_000_000)),
    );
    Ok(xml_response(w.finish("Retention")))
}

/// `PUT /bucket/key?legal-hold[&versionId=]`.
pub async fn put_object_legal_hold(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let body = checked_body(ctx).await?;
    if lock_config(ctx, bucket).await?.is_none() {
        return Err(missing_configuration());
    }
    let root = parse_document(&body)?;
    if root.name != "LegalHold" {
        return Err(malformed("the root element is not LegalHold").into());
    }
    let on = match root.child("Status").map(|s| s.text.trim()) {
        Some("ON") => true,
        Some("OFF") => false,
        _ => return Err(malformed("Status must be ON or OFF").into()),
    };
    let update: HeadersUpdate = Arc::new(move |_, headers| {
        set_legal_hold(headers, on);
        Ok(())
    });
    let info = ctx
        .layer()
        .update_object_headers(bucket, key, version, update)
        .await?;
    let mut response = Response::new(Body::empty());
    crate::versioning::version_header(ctx, bucket, response.headers_mut(), &info).await?;
    Ok(response)
}

/// `GET /bucket/key?legal-hold[&versionId=]`.
pub async fn get_object_legal_hold(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    if lock_config(ctx, bucket).await?.is_none() {
        return Err(missing_configuration());
    }
    let info = ctx
        .layer()
        .object_version_info(bucket, key, version)
        .await?;
    let mut w = XmlWriter::new("LegalHold");
    w.elem(
        "Status",
        if legal_hold(&info.headers) {
            "ON"
        } else {
            "OFF"
        },
    );
    Ok(xml_response(w.finish("LegalHold")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(rule: &str) -> String {
        format!(
            "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled>{rule}\
             </ObjectLockConfiguration>"
        )
    }

    fn code(r: Result<LockConfig, S3Error>) -> S3ErrorCode {
        r.unwrap_err().code
    }

    #[test]
    fn lock_configurations_validate_as_aws() {
        let ok = LockConfig::parse(
            conf("<Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>1</Days></DefaultRetention></Rule>")
                .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            ok.default,
            Some((RetentionMode::Governance, Period::Days(1)))
        );
        assert_eq!(LockConfig::parse(ok.to_xml().as_bytes()).unwrap(), ok);
        assert_eq!(
            LockConfig::parse(conf("").as_bytes()).unwrap().default,
            None
        );
        let rule = |inner: &str| {
            conf(&format!(
                "<Rule><DefaultRetention>{inner}</DefaultRetention></Rule>"
            ))
        };
        for (doc, want) in [
            (rule("<Mode>GOVERNANCE</Mode><Days>1</Days><Years>1</Years>"), S3ErrorCode::MalformedXML),
            (rule("<Mode>GOVERNANCE</Mode><Days>0</Days>"), S3ErrorCode::InvalidRetentionPeriod),
            (rule("<Mode>GOVERNANCE</Mode><Years>-1</Years>"), S3ErrorCode::InvalidRetentionPeriod),
            (rule("<Mode>governance</Mode><Years>1</Years>"), S3ErrorCode::MalformedXML),
            (rule("<Mode>abc</Mode><Years>1</Years>"), S3ErrorCode::MalformedXML),
            (rule("<Mode>COMPLIANCE</Mode>"), S3ErrorCode::MalformedXML),
            (
                "<ObjectLockConfiguration><ObjectLockEnabled>Disabled</ObjectLockEnabled></ObjectLockConfiguration>".to_owned(),
                S3ErrorCode::MalformedXML,
            ),
        ] {
            assert_eq!(code(LockConfig::parse(doc.as_bytes())), want, "{doc}");
        }
    }

    #[test]
    fn compliance_is_never_shortened_and_governance_only_with_bypass() {
        let now = 1_000;
        let r = |mode, until_ms| Some(Retention { mode, until_ms });
        use RetentionMode::*;
        // Lengthening is always allowed; so is anything once the old date has passed.
        assert!(
            retention_change_allowed(r(Compliance, 2_000), r(Compliance, 3_000), now, false)
                .is_ok()
        );
        assert!(retention_change_allowed(r(Compliance, 500), None, now, false).is_ok());
        for new in [r(Compliance, 1_500), r(Governance, 3_000), None] {
            assert!(retention_change_allowed(r(Compliance, 2_000), new, now, true).is_err());
        }
        assert!(
            retention_change_allowed(r(Governance, 2_000), r(Governance, 2_500), now, false)
                .is_ok()
        );
        for new in [r(Governance, 1_500), r(Compliance, 2_000), None] {
            assert!(retention_change_allowed(r(Governance, 2_000), new, now, false).is_err());
            assert!(retention_change_allowed(r(Governance, 2_000), new, now, true).is_ok());
        }
    }

    #[test]
    fn retention_documents_and_dates() {
        let r = parse_retention(
            b"<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>2030-01-01T00:00:00Z</RetainUntilDate></Retention>",
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.until_ms, 1_893_456_000_000);
        assert_eq!(iso8601(r.until_ms * 1_000_000), "2030-01-01T00:00:00.000Z");
        assert_eq!(parse_retention(b"<Retention/>").unwrap(), None);
        for bad in [
            &b"<Retention><Mode>governance</Mode><RetainUntilDate>2030-01-01T00:00:00Z</RetainUntilDate></Retention>"[..],
            b"<Retention><Mode>GOVERNANCE</Mode></Retention>",
            b"<Retention><Mode>GOVERNANCE</Mode><RetainUntilDate>tomorrow</RetainUntilDate></Retention>",
        ] {
            assert_eq!(parse_retention(bad).unwrap_err().code, S3ErrorCode::MalformedXML);
        }
        assert_eq!(
            parse_date("2140-01-01T00:00:00.000Z"),
            Some(5_364_662_400_000)
        );
    }
}
