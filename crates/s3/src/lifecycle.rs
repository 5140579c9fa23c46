//! Bucket lifecycle: the `lifecycle` configuration (Put/Get/DeleteBucketLifecycleConfiguration),
//! the rules' matching and due times, and the `x-amz-expiration` header of PUT, GET and HEAD.
//! The background worker that applies the rules is `lifecycle_worker.rs`.
//!
//! The configuration is stored (a bucket configuration document, name `lifecycle`, healed with the
//! others) as the normalized `LifecycleConfiguration` XML GetBucketLifecycleConfiguration returns,
//! with an ID given to every rule that had none. Parsed configurations are cached per bucket for a
//! few seconds ([`LifecycleCache`]): GET, HEAD and PUT consult them for `x-amz-expiration`.
//!
//! Transitions (`Transition`, `NoncurrentVersionTransition`) are refused with
//! `InvalidStorageClass`: Quarry has one storage class, and accepting a rule that would never move
//! anything would tell the caller that data moved when it did not.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use md5::{Digest, Md5};
use quarry_object::ObjectInfo;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::api_error::{ApiError, ApiResult};
use crate::config_cache::{CachedConfig, ConfigCache};
use crate::error::{S3Error, S3ErrorCode};
use crate::headers::set_header;
use crate::server::ReqCtx;
use crate::tagging::TagSet;
use crate::xml::{self, Element, XmlWriter};

/// The name of the bucket configuration document.
pub(crate) const CONFIG_NAME: &str = "lifecycle";
/// The most rules one configuration may have (AWS's limit).
pub const MAX_RULES: usize = 1000;
/// The longest rule ID, in characters.
pub const MAX_ID_LEN: usize = 255;
/// The largest configuration accepted, in bytes (1000 rules of a few hundred bytes each).
const MAX_CONFIG_BYTES: usize = 1024 * 1024;
/// How long a parsed configuration is used before it is read again.
const CACHE_TTL: Duration = Duration::from_secs(5);
/// A day, in seconds.
pub const DAY_SECS: i64 = 86_400;
const NS: i64 = 1_000_000_000;

/// What a rule applies to. Every part given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub prefix: String,
    pub tags: Vec<(String, String)>,
    pub size_greater_than: Option<u64>,
    pub size_less_than: Option<u64>,
}

/// How the rule's filter was written, so GetBucketLifecycleConfiguration gives it back the same
/// way (the legacy top-level `Prefix`, a `Filter` with one condition, or `Filter/And`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterForm {
    /// `<Prefix>` directly in the rule (the 2006 schema).
    Legacy,
    /// `<Filter>` with at most one condition.
    Single,
    /// `<Filter><And>...</And></Filter>`.
    And,
}

/// The rule's `Expiration`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expiration {
    pub days: Option<u32>,
    /// Midnight UTC of the date, nanoseconds since the Unix epoch.
    pub date_ns: Option<i64>,
    pub expired_object_delete_marker: Option<bool>,
}

/// The rule's `NoncurrentVersionExpiration`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoncurrentExpiration {
    pub days: u32,
    /// The newest this many noncurrent versions are kept whatever their age.
    pub newer_noncurrent_versions: Option<u32>,
}

/// One `Rule`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub id: String,
    pub enabled: bool,
    pub filter: Filter,
    pub form: FilterForm,
    pub expiration: Option<Expiration>,
    pub noncurrent: Option<NoncurrentExpiration>,
    /// `AbortIncompleteMultipartUpload/DaysAfterInitiation`.
    pub abort_days: Option<u32>,
}

/// A bucket's `LifecycleConfiguration`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleConfig {
    pub rules: Vec<Rule>,
}

fn malformed(detail: impl std::fmt::Display) -> S3Error {
    S3Error::new(
        S3ErrorCode::MalformedXML,
        format!("{} ({detail})", S3ErrorCode::MalformedXML.default_message()),
    )
}

fn invalid(message: impl Into<String>) -> S3Error {
    S3Error::new(S3ErrorCode::InvalidArgument, message)
}

/// The text of an element that may hold only text.
fn leaf(e: &Element) -> Result<&str, S3Error> {
    if !e.children.is_empty() {
        return Err(malformed(format!("<{}> may only hold text", e.name)));
    }
    Ok(e.text.trim())
}

/// A whole number of days (or versions) as the schema has it.
fn number(e: &Element) -> Result<u32, S3Error> {
    let t = leaf(e)?;
    t.parse::<u32>()
        .map_err(|_| malformed(format!("<{}> {t:?} is not a whole number", e.name)))
}

fn parse_bool(e: &Element) -> Result<bool, S3Error> {
    match leaf(e)? {
        "true" => Ok(true),
        "false" => Ok(false),
        t => Err(malformed(format!(
            "<{}> {t:?} is neither true nor false",
            e.name
        ))),
    }
}

/// One child at most: `Some` when present.
fn single<'a>(e: &'a Element, name: &str) -> Result<Option<&'a Element>, S3Error> {
    let mut found = e.children.iter().filter(|c| c.name == name);
    let first = found.next();
    if found.next().is_some() {
        return Err(malformed(format!("more than one <{name}> in <{}>", e.name)));
    }
    Ok(first)
}

/// `Date`: ISO 8601 at midnight UTC (`2030-01-01T00:00:00Z`, or the bare date a few clients send).
fn parse_date(e: &Element) -> Result<i64, S3Error> {
    let t = leaf(e)?;
    let parsed = if t.len() == 10 {
        OffsetDateTime::parse(&format!("{t}T00:00:00Z"), &Rfc3339)
    } else {
        OffsetDateTime::parse(t, &Rfc3339)
    };
    let Ok(when) = parsed else {
        return Err(invalid(format!(
            "'Date' {t:?} is not an ISO 8601 date (e.g. 2030-01-01T00:00:00Z)."
        )));
    };
    let ns = i64::try_from(when.unix_timestamp_nanos()).unwrap_or(i64::MAX);
    if ns.rem_euclid(DAY_SECS * NS) != 0 {
        return Err(invalid("'Date' must be at midnight GMT"));
    }
    Ok(ns)
}

fn parse_tag(e: &Element) -> Result<(String, String), S3Error> {
    let key = single(e, "Key")?.ok_or_else(|| malformed("a <Tag> needs a <Key>"))?;
    let value = single(e, "Value")?;
    for c in &e.children {
        if c.name != "Key" && c.name != "Value" {
            return Err(malformed(format!("unexpected <{}> in <Tag>", c.name)));
        }
    }
    let key = leaf(key)?.to_owned();
    let value = value.map(leaf).transpose()?.unwrap_or("").to_owned();
    crate::tagging::validate(&[(key.clone(), value.clone())], 1)?;
    Ok((key, value))
}

/// The conditions of a `Filter` or of its `And`, into `f`.
fn parse_conditions(e: &Element, f: &mut Filter, in_and: bool) -> Result<usize, S3Error> {
    let mut count = 0;
    for c in &e.children {
        match c.name.as_str() {
            "Prefix" => f.prefix = leaf(c)?.to_owned(),
            "Tag" => f.tags.push(parse_tag(c)?),
            "ObjectSizeGreaterThan" => {
                let t = leaf(c)?;
                f.size_greater_than = Some(t.parse().map_err(|_| {
                    malformed(format!("ObjectSizeGreaterThan {t:?} is not a whole number"))
                })?);
            }
            "ObjectSizeLessThan" => {
                let t = leaf(c)?;
                f.size_less_than = Some(t.parse().map_err(|_| {
                    malformed(format!("ObjectSizeLessThan {t:?} is not a whole number"))
                })?);
            }
            "And" if !in_and => continue,
            other => return Err(malformed(format!("unexpected <{other}> in <{}>", e.name))),
        }
        count += 1;
    }
    Ok(count)
}

fn parse_filter(e: &Element) -> Result<(Filter, FilterForm), S3Error> {
    let mut f = Filter::default();
    let and = single(e, "And")?;
    let count = parse_conditions(e, &mut f, false)?;
    match and {
        Some(and) => {
            if count > 0 {
                return Err(malformed(
                    "a <Filter> holds either one condition or an <And>, not both",
                ));
            }
            parse_conditions(and, &mut f, true)?;
            Ok((f, FilterForm::And))
        }
        None => {
            if count > 1 {
                return Err(malformed(
                    "a <Filter> with more than one condition needs <And>",
                ));
            }
            Ok((f, FilterForm::Single))
        }
    }
}

fn parse_expiration(e: &Element) -> Result<Expiration, S3Error> {
    let mut x = Expiration::default();
    for c in &e.children {
        match c.name.as_str() {
            "Days" => {
                let d = number(c)?;
                if d == 0 {
                    return Err(invalid(
                        "'Days' for Expiration action must be a positive integer",
                    ));
                }
                x.days = Some(d);
            }
            "Date" => x.date_ns = Some(parse_date(c)?),
            "ExpiredObjectDeleteMarker" => x.expired_object_delete_marker = Some(parse_bool(c)?),
            other => return Err(malformed(format!("unexpected <{other}> in <Expiration>"))),
        }
    }
    let given = [
        x.days.is_some(),
        x.date_ns.is_some(),
        x.expired_object_delete_marker.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if given != 1 {
        return Err(malformed(
            "an <Expiration> has exactly one of Days, Date and ExpiredObjectDeleteMarker",
        ));
    }
    Ok(x)
}

fn parse_noncurrent(e: &Element) -> Result<NoncurrentExpiration, S3Error> {
    let days = single(e, "NoncurrentDays")?
        .ok_or_else(|| malformed("a <NoncurrentVersionExpiration> needs <NoncurrentDays>"))?;
    let days = number(days)?;
    if days == 0 {
        return Err(invalid(
            "'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer",
        ));
    }
    let newer = single(e, "NewerNoncurrentVersions")?
        .map(number)
        .transpose()?;
    if let Some(n) = newer {
        if n == 0 || n > 100 {
            return Err(invalid(
                "'NewerNoncurrentVersions' must be an integer from 1 to 100",
            ));
        }
    }
    for c in &e.children {
        if c.name != "NoncurrentDays" && c.name != "NewerNoncurrentVersions" {
            return Err(malformed(format!(
                "unexpected <{}> in <NoncurrentVersionExpiration>",
                c.name
            )));
        }
    }
    Ok(NoncurrentExpiration {
        days,
        newer_noncurrent_versions: newer,
    })
}

fn parse_rule(e: &Element) -> Result<Rule, S3Error> {
    let mut id = None;
    let mut status = None;
    let mut legacy_prefix = None;
    let mut filter = None;
    let mut expiration = None;
    let mut noncurrent = None;
    let mut abort_days = None;
    for c in &e.children {
        match c.name.as_str() {
            "ID" => {
                if id.is_some() {
                    return Err(malformed("more than one <ID> in a Rule"));
                }
                id = Some(leaf(c)?.to_owned());
            }
            "Status" => status = Some(leaf(c)?.to_owned()),
            "Prefix" => legacy_prefix = Some(leaf(c)?.to_owned()),
            "Filter" => {
                if filter.is_some() {
                    return Err(malformed("more than one <Filter> in a Rule"));
                }
                filter = Some(parse_filter(c)?);
            }
            "Expiration" => {
                if expiration.is_some() {
                    return Err(malformed("more than one <Expiration> in a Rule"));
                }
                expiration = Some(parse_expiration(c)?);
            }
            "NoncurrentVersionExpiration" => {
                if noncurrent.is_some() {
                    return Err(malformed(
                        "more than one <NoncurrentVersionExpiration> in a Rule",
                    ));
                }
                noncurrent = Some(parse_noncurrent(c)?);
            }
            "AbortIncompleteMultipartUpload" => {
                let d = single(c, "DaysAfterInitiation")?.ok_or_else(|| {
                    malformed("<AbortIncompleteMultipartUpload> needs <DaysAfterInitiation>")
                })?;
                let d = number(d)?;
                if d == 0 {
                    return Err(invalid(
                        "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer",
                    ));
                }
                abort_days = Some(d);
            }
            "Transition"
            | "NoncurrentVersionTransition"
            | "Transitions"
            | "NoncurrentVersionTransitions" => {
                return Err(S3Error::new(
                    S3ErrorCode::InvalidStorageClass,
                    format!(
                        "<{}> is not supported: this store has one storage class (STANDARD), so \
                         there is nothing to transition to. Remove the transition from the rule.",
                        c.name
                    ),
                ));
            }
            other => return Err(malformed(format!("unexpected <{other}> in a Rule"))),
        }
    }
    let enabled = match status.as_deref() {
        Some("Enabled") => true,
        Some("Disabled") => false,
        Some(s) => {
            return Err(malformed(format!(
                "Status {s:?} is neither Enabled nor Disabled"
            )))
        }
        None => return Err(malformed("a Rule needs a <Status>")),
    };
    let id = match id {
        Some(id) if id.chars().count() > MAX_ID_LEN => {
            return Err(invalid(format!(
                "ID length should not exceed allowed limit of {MAX_ID_LEN}"
            )))
        }
        Some(id) if !id.is_empty() => id,
        // AWS names a rule that has no ID.
        _ => generated_id(),
    };
    let (filter, form) = match (legacy_prefix, filter) {
        (Some(_), Some(_)) => {
            return Err(malformed(
                "a Rule has either a <Prefix> or a <Filter>, not both",
            ))
        }
        (Some(p), None) => (
            Filter {
                prefix: p,
                ..Filter::default()
            },
            FilterForm::Legacy,
        ),
        (None, Some(f)) => f,
        (None, None) => return Err(malformed("a Rule needs a <Filter> or a <Prefix>")),
    };
    if expiration.is_none() && noncurrent.is_none() && abort_days.is_none() {
        return Err(invalid(
            "At least one action needs to be specified in a rule",
        ));
    }
    if !filter.tags.is_empty() {
        if expiration
            .as_ref()
            .is_some_and(|x| x.expired_object_delete_marker.is_some())
        {
            return Err(invalid(
                "ExpiredObjectDeleteMarker cannot be specified with tags",
            ));
        }
        if abort_days.is_some() {
            return Err(invalid(
                "AbortIncompleteMultipartUpload cannot be specified with tags",
            ));
        }
    }
    if let (Some(gt), Some(lt)) = (filter.size_greater_than, filter.size_less_than) {
        if gt >= lt {
            return Err(invalid(
                "ObjectSizeGreaterThan must be less than ObjectSizeLessThan",
            ));
        }
    }
    let mut keys: Vec<&str> = filter.tags.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(invalid("Duplicate Tag Keys are not allowed."));
    }
    Ok(Rule {
        id,
        enabled,
        filter,
        form,
        expiration,
        noncurrent,
        abort_days,
    })
}

/// A rule ID for a rule given without one: 20 random base32-like characters.
fn generated_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    (0..20)
        .map(|_| ALPHABET[rand::random::<usize>() % ALPHABET.len()] as char)
        .collect()
}

impl LifecycleConfig {
    /// Parses and validates a `LifecycleConfiguration` as AWS does: `MalformedXML` for a
    /// document outside the schema (no rule, an unknown element, a bad Status, an Expiration with
    /// two actions), `InvalidArgument` for values AWS refuses (a long or repeated ID, zero days,
    /// a date not at midnight, more than 1000 rules, tags with actions that do not take them).
    pub fn parse(body: &[u8]) -> Result<LifecycleConfig, S3Error> {
        if body.len() > MAX_CONFIG_BYTES {
            return Err(invalid(format!(
                "The lifecycle configuration is larger than the {MAX_CONFIG_BYTES} bytes allowed."
            )));
        }
        let root = xml::parse_document(body)?;
        if root.name != "LifecycleConfiguration" {
            return Err(malformed(format!(
                "expected a LifecycleConfiguration document, found <{}>",
                root.name
            )));
        }
        let mut rules = Vec::new();
        for child in &root.children {
            if child.name != "Rule" {
                return Err(malformed(format!(
                    "unexpected <{}> in LifecycleConfiguration",
                    child.name
                )));
            }
            if rules.len() == MAX_RULES {
                return Err(invalid(format!(
                    "The lifecycle configuration has more than the {MAX_RULES} rules allowed."
                )));
            }
            rules.push(parse_rule(child)?);
        }
        if rules.is_empty() {
            return Err(malformed(
                "a LifecycleConfiguration needs at least one Rule",
            ));
        }
        let mut ids: Vec<&str> = rules.iter().map(|r| r.id.as_str()).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(format!(
                "Rule ID must be unique. Found same ID for more than one rule: {}",
                w[0]
            )));
        }
        Ok(LifecycleConfig { rules })
    }

    /// The document GetBucketLifecycleConfiguration returns (and the form it is stored in).
    pub fn to_xml(&self) -> String {
        let mut w = XmlWriter::new("LifecycleConfiguration");
        for r in &self.rules {
            w.open("Rule");
            w.elem("ID", &r.id);
            write_filter(&mut w, &r.filter, r.form);
            w.elem("Status", if r.enabled { "Enabled" } else { "Disabled" });
            if let Some(x) = &r.expiration {
                w.open("Expiration");
                if let Some(d) = x.days {
                    w.elem_display("Days", d);
                }
                if let Some(ns) = x.date_ns {
                    w.elem("Date", &xml::iso8601(ns));
                }
                if let Some(b) = x.expired_object_delete_marker {
                    w.elem_display("ExpiredObjectDeleteMarker", b);
                }
                w.close("Expiration");
            }
            if let Some(n) = &r.noncurrent {
                w.open("NoncurrentVersionExpiration");
                w.elem_display("NoncurrentDays", n.days);
                if let Some(k) = n.newer_noncurrent_versions {
                    w.elem_display("NewerNoncurrentVersions", k);
                }
                w.close("NoncurrentVersionExpiration");
            }
            if let Some(d) = r.abort_days {
                w.open("AbortIncompleteMultipartUpload");
                w.elem_display("DaysAfterInitiation", d);
                w.close("AbortIncompleteMultipartUpload");
            }
            w.close("Rule");
        }
        w.finish("LifecycleConfiguration")
    }
}

fn write_filter(w: &mut XmlWriter, f: &Filter, form: FilterForm) {
    let conditions = |w: &mut XmlWriter| {
        if !f.prefix.is_empty() {
            w.elem("Prefix", &f.prefix);
        }
        for (k, v) in &f.tags {
            w.open("Tag");
            w.elem("Key", k);
            w.elem("Value", v);
            w.close("Tag");
        }
        if let Some(n) = f.size_greater_than {
            w.elem_display("ObjectSizeGreaterThan", n);
        }
        if let Some(n) = f.size_less_than {
            w.elem_display("ObjectSizeLessThan", n);
        }
    };
    match form {
        FilterForm::Legacy => {
            w.elem("Prefix", &f.prefix);
        }
        FilterForm::Single => {
            w.open("Filter");
            conditions(w);
            w.close("Filter");
        }
        FilterForm::And => {
            w.open("Filter");
            w.open("And");
            conditions(w);
            w.close("And");
            w.close("Filter");
        }
    }
}

impl Filter {
    /// Whether an object (or version) of `key`, `size` bytes and tags `tags` is in the rule's scope.
    pub fn matches(&self, key: &str, size: u64, tags: &TagSet) -> bool {
        key.starts_with(&self.prefix)
            && self.size_greater_than.is_none_or(|n| size > n)
            && self.size_less_than.is_none_or(|n| size < n)
            && self
                .tags
                .iter()
                .all(|(k, v)| tags.get(k).is_some_and(|t| t == v))
    }
}

impl Filter {
    /// Whether an upload in progress of `key` is in the rule's scope (uploads have no tags or
    /// size yet: a rule with tags never applies to them; size bounds are not checked).
    pub fn matches_upload(&self, key: &str) -> bool {
        self.tags.is_empty() && key.starts_with(&self.prefix)
    }
}

/// Lengths of time as the worker counts them: a day is 86400 s (the due time then rounded up to
/// the next midnight UTC, as AWS does), or a debug day of a few seconds, not rounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    pub day_secs: i64,
}

impl Default for Clock {
    fn default() -> Self {
        Clock { day_secs: DAY_SECS }
    }
}

impl Clock {
    /// When something that started at `from_ns` is `days` days old, by the rule's reckoning.
    pub fn due(&self, from_ns: i64, days: u32) -> i64 {
        let span = i64::from(days)
            .saturating_mul(self.day_secs)
            .saturating_mul(NS);
        let at = from_ns.saturating_add(span);
        if self.day_secs == DAY_SECS {
            next_midnight(at)
        } else {
            at
        }
    }
}

/// The first midnight UTC at or after `ns` (AWS: "rounded to the next midnight UTC").
fn next_midnight(ns: i64) -> i64 {
    let day = DAY_SECS * NS;
    let rem = ns.rem_euclid(day);
    if rem == 0 {
        ns
    } else {
        (ns - rem).saturating_add(day)
    }
}

impl LifecycleConfig {
    /// The earliest expiration (time, rule ID) of a current version `info` (not a delete marker)
    /// among the enabled rules that match it.
    pub fn current_expiry(&self, info: &ObjectInfo, clock: Clock) -> Option<(i64, &str)> {
        let tags = crate::tagging::object_tags(info);
        self.rules
            .iter()
            .filter(|r| r.enabled && r.filter.matches(&info.key, info.size, &tags))
            .filter_map(|r| {
                let x = r.expiration.as_ref()?;
                let at = match (x.days, x.date_ns) {
                    (Some(d), _) => clock.due(info.mod_time_ns, d),
                    (None, Some(date)) => date,
                    (None, None) => return None,
                };
                Some((at, r.id.as_str()))
            })
            .min_by_key(|(at, _)| *at)
    }
}

/// Parsed lifecycle configurations by bucket ([`crate::config_cache`]).
pub(crate) type LifecycleCache = ConfigCache<LifecycleConfig>;

impl CachedConfig for LifecycleConfig {
    const NAME: &'static str = CONFIG_NAME;
    const TTL: Duration = CACHE_TTL;
    const WHAT: &'static str = "lifecycle configuration";
    fn parse(_bucket: &str, raw: &[u8]) -> Result<Self, S3Error> {
        LifecycleConfig::parse(raw)
    }
}

/// `x-amz-expiration: expiry-date="<HTTP date>", rule-id="<id>"` on the answer about the current
/// version `info` when a rule will expire it. Always counted in real days (midnight-rounded), as
/// AWS states it, whatever debug day the worker uses. A configuration that cannot be read leaves
/// the header out rather than failing the request.
pub(crate) async fn expiration_header(
    ctx: &ReqCtx,
    bucket: &str,
    out: &mut HeaderMap,
    info: &ObjectInfo,
) {
    if info.delete_marker {
        return;
    }
    let config = match ctx.state.lifecycle.get(ctx.layer(), bucket).await {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(bucket, error = %e, "lifecycle configuration unreadable; no x-amz-expiration");
            return;
        }
    };
    if let Some((at, id)) = config.current_expiry(info, Clock::default()) {
        let id = id.replace('"', "%22");
        set_header(
            out,
            "x-amz-expiration",
            &format!("expiry-date=\"{}\", rule-id=\"{id}\"", xml::http_date(at)),
        );
    }
}

pub async fn put_bucket_lifecycle(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let expected_md5 = crate::headers::content_md5(&ctx.parts.headers)?;
    let body = ctx.small_body().await?;
    if let Some(md5) = expected_md5 {
        if Md5::digest(&body)[..] != md5[..] {
            return Err(S3ErrorCode::BadDigest.into());
        }
    }
    let config = LifecycleConfig::parse(&body)?;
    ctx.layer()
        .put_bucket_config(bucket, CONFIG_NAME, Bytes::from(config.to_xml()))
        .await?;
    ctx.state.lifecycle.invalidate(bucket);
    Ok(Response::new(Body::empty()))
}

pub async fn get_bucket_lifecycle(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    match ctx.layer().get_bucket_config(bucket, CONFIG_NAME).await? {
        Some(raw) => {
            let config = LifecycleConfig::parse(&raw).map_err(|e| {
                tracing::error!(bucket, error = %e, "stored lifecycle configuration does not parse");
                ApiError::from(S3ErrorCode::InternalError)
            })?;
            Ok(xml::xml_response(config.to_xml()))
        }
        None => Err(S3ErrorCode::NoSuchLifecycleConfiguration.into()),
    }
}

pub async fn delete_bucket_lifecycle(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer()
        .delete_bucket_config(bucket, CONFIG_NAME)
        .await?;
    ctx.state.lifecycle.invalidate(bucket);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(rules: &str) -> String {
        format!("<LifecycleConfiguration>{rules}</LifecycleConfiguration>")
    }

    fn code(body: &str) -> S3ErrorCode {
        LifecycleConfig::parse(body.as_bytes()).unwrap_err().code
    }

    #[test]
    fn round_trips_every_form() {
        let body = doc(concat!(
            "<Rule><ID>a</ID><Prefix>logs/</Prefix><Status>Enabled</Status>",
            "<Expiration><Days>3</Days></Expiration></Rule>",
            "<Rule><ID>b</ID><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>",
            "<Status>Disabled</Status><Expiration><Date>2030-01-01T00:00:00.000Z</Date></Expiration></Rule>",
            "<Rule><ID>c</ID><Filter><And><Prefix>p/</Prefix><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan>",
            "<ObjectSizeLessThan>100</ObjectSizeLessThan></And></Filter><Status>Enabled</Status>",
            "<NoncurrentVersionExpiration><NoncurrentDays>2</NoncurrentDays>",
            "<NewerNoncurrentVersions>3</NewerNoncurrentVersions></NoncurrentVersionExpiration>",
            "<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>",
            "</AbortIncompleteMultipartUpload></Rule>",
            "<Rule><ID>d</ID><Filter></Filter><Status>Enabled</Status>",
            "<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule>",
        ));
        let c = LifecycleConfig::parse(body.as_bytes()).unwrap();
        assert_eq!(c.rules.len(), 4);
        assert_eq!(c.rules[0].form, FilterForm::Legacy);
        assert_eq!(c.rules[2].filter.size_greater_than, Some(10));
        let again = LifecycleConfig::parse(c.to_xml().as_bytes()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn refusals_are_as_aws() {
        let ok = "<Rule><ID>a</ID><Prefix></Prefix><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>";
        assert!(LifecycleConfig::parse(doc(ok).as_bytes()).is_ok());
        assert_eq!(code(&doc("")), S3ErrorCode::MalformedXML);
        assert_eq!(
            code(&doc(&ok.replace("Enabled", "enabled"))),
            S3ErrorCode::MalformedXML
        );
        assert_eq!(
            code(&doc(&ok.replace(">1<", ">0<"))),
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(&doc(&format!("{ok}{ok}"))),
            S3ErrorCode::InvalidArgument
        );
        let long = ok.replace("<ID>a</ID>", &format!("<ID>{}</ID>", "a".repeat(256)));
        assert_eq!(code(&doc(&long)), S3ErrorCode::InvalidArgument);
        let date = ok.replace("<Days>1</Days>", "<Date>2030-01-01T10:00:00Z</Date>");
        assert_eq!(code(&doc(&date)), S3ErrorCode::InvalidArgument);
        let trans = ok.replace(
            "</Rule>",
            "<Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition></Rule>",
        );
        assert_eq!(code(&doc(&trans)), S3ErrorCode::InvalidStorageClass);
        let many: String = (0..1001)
            .map(|i| ok.replace("<ID>a</ID>", &format!("<ID>r{i}</ID>")))
            .collect();
        assert_eq!(code(&doc(&many)), S3ErrorCode::InvalidArgument);
        let no_action = "<Rule><ID>a</ID><Prefix></Prefix><Status>Enabled</Status></Rule>";
        assert_eq!(code(&doc(no_action)), S3ErrorCode::InvalidArgument);
    }

    #[test]
    fn days_round_to_the_next_midnight() {
        let c = Clock::default();
        let day = DAY_SECS * NS;
        assert_eq!(c.due(10 * day + 5, 1), 12 * day);
        assert_eq!(c.due(10 * day, 1), 11 * day);
        let debug = Clock { day_secs: 10 };
        assert_eq!(debug.due(5, 2), 5 + 20 * NS);
    }
}
