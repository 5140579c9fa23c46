//! Access control lists, in AWS's model: Get/Put(Bucket|Object)Acl, the canned ACLs and
//! `x-amz-grant-*` headers of the writes that create buckets and objects, and their stored form.
//!
//! Every bucket and object belongs to the account (the root user, [`OWNER_ID`]), as in AWS where
//! IAM users act for their account: the owner always has `FULL_CONTROL`. A grant names a
//! canonical user — the account, or an IAM user by its user id (`AIDA...`, what GetUser answers
//! as `UserId`) — or one of S3's groups (AllUsers, AuthenticatedUsers, LogDelivery). Grants are
//! one more source of Allow in authorization (`acl_eval.rs`); whether a bucket uses them at all
//! is its ObjectOwnership (`acl_config.rs`): under `BucketOwnerEnforced` ACLs are off and only
//! the owner's full control may be set.
//!
//! Stored form (a bucket's `acl` configuration document; an object version's
//! [`quarry_object::ACL_HEADER`] entry): a first line `quarry-acl 1`, then one grant a line,
//! `<PERMISSION> id <canonical id>` or `<PERMISSION> group <AllUsers|AuthenticatedUsers|
//! LogDelivery>`. No document or entry: the owner's full control (`private`), which is what every
//! bucket and object written before ACLs existed has.

use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::HeaderMap;
use quarry_object::{HeadersUpdate, VersionId, ACL_HEADER};

use crate::acl_config::{ownership, public_access_block, ObjectOwnership};
use crate::api_error::{ApiError, ApiResult};
use crate::authz::Caller;
use crate::config_cache::CachedConfig;
use crate::error::{S3Error, S3ErrorCode};
use crate::server::ReqCtx;
use crate::xml::{parse_document, xml_response, Element, XmlWriter, OWNER_DISPLAY_NAME, OWNER_ID};

const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";
const STORED_MAGIC: &str = "quarry-acl 1";
/// The bucket configuration document holding a bucket's ACL.
pub(crate) const BUCKET_ACL_DOC: &str = "acl";
const GROUP_PREFIX_GLOBAL: &str = "http://acs.amazonaws.com/groups/global/";
const GROUP_PREFIX_S3: &str = "http://acs.amazonaws.com/groups/s3/";

/// An ACL permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    FullControl,
    Read,
    Write,
    ReadAcp,
    WriteAcp,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::FullControl => "FULL_CONTROL",
            Permission::Read => "READ",
            Permission::Write => "WRITE",
            Permission::ReadAcp => "READ_ACP",
            Permission::WriteAcp => "WRITE_ACP",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "FULL_CONTROL" => Permission::FullControl,
            "READ" => Permission::Read,
            "WRITE" => Permission::Write,
            "READ_ACP" => Permission::ReadAcp,
            "WRITE_ACP" => Permission::WriteAcp,
            _ => return None,
        })
    }

    /// Whether holding `self` gives `wanted`.
    fn covers(self, wanted: Permission) -> bool {
        self == Permission::FullControl || self == wanted
    }
}

/// Who a grant is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grantee {
    /// A canonical user: the account ([`OWNER_ID`]) or an IAM user's user id.
    Id(String),
    AllUsers,
    AuthenticatedUsers,
    LogDelivery,
}

impl Grantee {
    fn group_name(&self) -> Option<&'static str> {
        match self {
            Grantee::Id(_) => None,
            Grantee::AllUsers => Some("AllUsers"),
            Grantee::AuthenticatedUsers => Some("AuthenticatedUsers"),
            Grantee::LogDelivery => Some("LogDelivery"),
        }
    }

    fn group(name: &str) -> Option<Self> {
        Some(match name {
            "AllUsers" => Grantee::AllUsers,
            "AuthenticatedUsers" => Grantee::AuthenticatedUsers,
            "LogDelivery" => Grantee::LogDelivery,
            _ => return None,
        })
    }

    fn uri(&self) -> Option<String> {
        let name = self.group_name()?;
        let prefix = if *self == Grantee::LogDelivery {
            GROUP_PREFIX_S3
        } else {
            GROUP_PREFIX_GLOBAL
        };
        Some(format!("{prefix}{name}"))
    }

    fn from_uri(uri: &str) -> Option<Self> {
        match uri.trim() {
            "http://acs.amazonaws.com/groups/global/AllUsers" => Some(Grantee::AllUsers),
            "http://acs.amazonaws.com/groups/global/AuthenticatedUsers" => {
                Some(Grantee::AuthenticatedUsers)
            }
            "http://acs.amazonaws.com/groups/s3/LogDelivery" => Some(Grantee::LogDelivery),
            _ => None,
        }
    }

    /// Whether the grantee includes `caller`.
    fn includes(&self, caller: &Caller) -> bool {
        match (self, caller) {
            (Grantee::AllUsers, _) => true,
            (Grantee::AuthenticatedUsers, c) => !matches!(c, Caller::Anonymous),
            (Grantee::Id(id), Caller::Root) => id == OWNER_ID,
            (Grantee::Id(id), Caller::User(u)) => *id == u.user_id,
            _ => false,
        }
    }

    /// AllUsers and AuthenticatedUsers: the grantees that make an ACL public.
    fn is_public(&self) -> bool {
        matches!(self, Grantee::AllUsers | Grantee::AuthenticatedUsers)
    }
}

/// What an ACL is set on: some canned ACLs are for one kind only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Bucket,
    Object,
}

/// An access control list: its grants (the owner is always the account).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub grants: Vec<(Grantee, Permission)>,
}

impl Default for Acl {
    /// `private`: the owner's full control.
    fn default() -> Self {
        Acl {
            grants: vec![owner_full_control()],
        }
    }
}

fn owner_full_control() -> (Grantee, Permission) {
    (Grantee::Id(OWNER_ID.to_owned()), Permission::FullControl)
}

impl Acl {
    /// A canned ACL (`x-amz-acl`).
    pub fn canned(name: &[u8], target: Target) -> ApiResult<Self> {
        let mut acl = Acl::default();
        let mut add = |g: Grantee, p: Permission| acl.grants.push((g, p));
        match name {
            // The bucket owner is the object owner (the account): its full control is all these
            // say.
            b"private" | b"bucket-owner-read" | b"bucket-owner-full-control" => {}
            b"public-read" => add(Grantee::AllUsers, Permission::Read),
            b"public-read-write" => {
                add(Grantee::AllUsers, Permission::Read);
                add(Grantee::AllUsers, Permission::Write);
            }
            b"authenticated-read" => add(Grantee::AuthenticatedUsers, Permission::Read),
            b"log-delivery-write" if target == Target::Bucket => {
                add(Grantee::LogDelivery, Permission::Write);
                add(Grantee::LogDelivery, Permission::ReadAcp);
            }
            b"aws-exec-read" => {
                return Err(ApiError::not_implemented("The canned ACL aws-exec-read"))
            }
            other => {
                return Err(ApiError::invalid_argument(format!(
                    "{:?} is not a canned ACL for {}.",
                    String::from_utf8_lossy(other),
                    if target == Target::Bucket {
                        "a bucket"
                    } else {
                        "an object"
                    }
                )))
            }
        }
        Ok(acl)
    }

    /// The ACL of the `x-amz-grant-*` headers (each `type=value` items, comma-separated).
    fn from_grant_headers(headers: &HeaderMap) -> ApiResult<Option<Self>> {
        let mut grants = Vec::new();
        let mut any = false;
        for (name, permission) in [
            ("x-amz-grant-full-control", Permission::FullControl),
            ("x-amz-grant-read", Permission::Read),
            ("x-amz-grant-write", Permission::Write),
            ("x-amz-grant-read-acp", Permission::ReadAcp),
            ("x-amz-grant-write-acp", Permission::WriteAcp),
        ] {
            for value in headers.get_all(name) {
                any = true;
                let text = value.to_str().map_err(|_| {
                    ApiError::invalid_argument(format!("The value of header {name} is not ASCII."))
                })?;
                for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                    let (kind, v) = item.split_once('=').ok_or_else(|| {
                        ApiError::invalid_argument(format!(
                            "{name}: {item:?} is not type=value (id=, uri= or emailAddress=)."
                        ))
                    })?;
                    let v = v.trim().trim_matches('"');
                    let grantee = match kind.trim().to_ascii_lowercase().as_str() {
                        "id" if !v.is_empty() => Grantee::Id(v.to_owned()),
                        "uri" => Grantee::from_uri(v).ok_or_else(|| {
                            ApiError::invalid_argument(format!("Invalid group uri {v:?}."))
                        })?,
                        "emailaddress" => {
                            return Err(S3ErrorCode::UnresolvableGrantByEmailAddress.into())
                        }
                        _ => {
                            return Err(ApiError::invalid_argument(format!(
                                "{name}: {item:?} is not type=value (id=, uri= or emailAddress=)."
                            )))
                        }
                    };
                    grants.push((grantee, permission));
                }
            }
        }
        Ok(any.then_some(Acl { grants }))
    }

    /// The ACL a request's headers name (`x-amz-acl` or `x-amz-grant-*`; both is an error);
    /// `None` when they name none.
    pub fn of_headers(headers: &HeaderMap, target: Target) -> ApiResult<Option<Self>> {
        let grants = Self::from_grant_headers(headers)?;
        match (headers.get("x-amz-acl"), grants) {
            (Some(_), Some(_)) => Err(ApiError::new(
                S3ErrorCode::InvalidRequest,
                "Specifying both Canned ACLs and Header Grants is not allowed",
            )),
            (Some(v), None) => Self::canned(v.as_bytes(), target).map(Some),
            (None, grants) => Ok(grants),
        }
    }

    /// An `AccessControlPolicy` document. Its `Owner`, when given, must be the owner.
    pub fn from_xml(body: &[u8]) -> ApiResult<Self> {
        let doc = parse_document(body)?;
        if doc.name != "AccessControlPolicy" {
            return Err(malformed_acl(
                "the root element must be AccessControlPolicy",
            ));
        }
        if let Some(id) = doc.child("Owner").and_then(|o| o.child("ID")) {
            if id.text.trim() != OWNER_ID {
                return Err(ApiError::new(
                    S3ErrorCode::AccessDenied,
                    "The owner of a bucket or object cannot be changed.",
                ));
            }
        }
        let mut grants = Vec::new();
        let list = doc.child("AccessControlList");
        for g in list.iter().flat_map(|l| l.children.iter()) {
            if g.name != "Grant" {
                return Err(malformed_acl("AccessControlList holds only Grant elements"));
            }
            grants.push(parse_grant(g)?);
        }
        Ok(Acl { grants })
    }

    /// The `AccessControlPolicy` document of this ACL.
    pub fn render(&self) -> String {
        let root = "AccessControlPolicy";
        let mut w = XmlWriter::new(root);
        w.owner().open("AccessControlList");
        for (grantee, permission) in &self.grants {
            w.open("Grant");
            match grantee {
                Grantee::Id(id) => {
                    // The element name is a trusted constant; the attributes are S3's exact
                    // `Grantee` shape.
                    w.open(&format!(
                        "Grantee xmlns:xsi=\"{XSI}\" xsi:type=\"CanonicalUser\""
                    ));
                    w.elem("ID", id);
                    if id == OWNER_ID {
                        w.elem("DisplayName", OWNER_DISPLAY_NAME);
                    }
                }
                group => {
                    w.open(&format!("Grantee xmlns:xsi=\"{XSI}\" xsi:type=\"Group\""));
                    w.elem("URI", &group.uri().unwrap_or_default());
                }
            }
            w.close("Grantee")
                .elem("Permission", permission.as_str())
                .close("Grant");
        }
        w.close("AccessControlList");
        w.finish(root)
    }

    /// The stored form (see the module's doc).
    pub fn encode(&self) -> String {
        let mut out = String::from(STORED_MAGIC);
        for (grantee, permission) in &self.grants {
            out.push('\n');
            out.push_str(permission.as_str());
            match grantee {
                Grantee::Id(id) => {
                    out.push_str(" id ");
                    out.push_str(id);
                }
                group => {
                    out.push_str(" group ");
                    out.push_str(group.group_name().unwrap_or_default());
                }
            }
        }
        out
    }

    /// Reads the stored form; `None` when it is not one this version knows.
    pub fn decode(stored: &str) -> Option<Self> {
        let mut lines = stored.lines();
        if lines.next()? != STORED_MAGIC {
            return None;
        }
        let mut grants = Vec::new();
        for line in lines {
            let mut parts = line.splitn(3, ' ');
            let permission = Permission::parse(parts.next()?)?;
            let grantee = match (parts.next()?, parts.next()?) {
                ("id", id) => Grantee::Id(id.to_owned()),
                ("group", name) => Grantee::group(name)?,
                _ => return None,
            };
            grants.push((grantee, permission));
        }
        Some(Acl { grants })
    }

    /// Whether the ACL grants AllUsers or AuthenticatedUsers anything.
    pub fn is_public(&self) -> bool {
        self.grants.iter().any(|(g, _)| g.is_public())
    }

    /// Whether the ACL is only the owner's full control (`private`, `bucket-owner-full-control`
    /// or the same written out): the one ACL a bucket with ACLs off accepts.
    pub fn is_owner_only(&self) -> bool {
        !self.grants.is_empty() && self.grants.iter().all(|g| *g == owner_full_control())
    }

    /// Whether the ACL gives `caller` `wanted` (public grants skipped when `ignore_public`).
    pub fn allows(&self, caller: &Caller, wanted: Permission, ignore_public: bool) -> bool {
        self.grants.iter().any(|(g, p)| {
            p.covers(wanted) && !(ignore_public && g.is_public()) && g.includes(caller)
        })
    }

    /// The ACL of an object version's stored headers.
    pub fn of_object(headers: &std::collections::BTreeMap<String, String>) -> Self {
        match headers.get(ACL_HEADER) {
            None => Acl::default(),
            Some(stored) => Acl::decode(stored).unwrap_or_else(|| {
                tracing::warn!("a stored object ACL does not parse; read as private");
                Acl::default()
            }),
        }
    }
}

fn malformed_acl(detail: &str) -> ApiError {
    ApiError::new(
        S3ErrorCode::MalformedXML,
        format!("{} ({detail})", S3ErrorCode::MalformedXML.default_message()),
    )
}

fn parse_grant(g: &Element) -> ApiResult<(Grantee, Permission)> {
    let grantee = g
        .child("Grantee")
        .ok_or_else(|| malformed_acl("a Grant needs a Grantee"))?;
    let text = |name: &str| grantee.child(name).map(|e| e.text.trim());
    let who = if let Some(id) = text("ID") {
        if id.is_empty() {
            return Err(ApiError::invalid_argument("Invalid id: empty."));
        }
        Grantee::Id(id.to_owned())
    } else if let Some(uri) = text("URI") {
        Grantee::from_uri(uri)
            .ok_or_else(|| ApiError::invalid_argument(format!("Invalid group uri {uri:?}.")))?
    } else if text("EmailAddress").is_some() {
        return Err(S3ErrorCode::UnresolvableGrantByEmailAddress.into());
    } else {
        return Err(malformed_acl(
            "a Grantee needs an ID, a URI or an EmailAddress",
        ));
    };
    let permission = g
        .child("Permission")
        .and_then(|p| Permission::parse(p.text.trim()))
        .ok_or_else(|| {
            malformed_acl(
                "a Grant needs a Permission: FULL_CONTROL, READ, WRITE, READ_ACP or WRITE_ACP",
            )
        })?;
    Ok((who, permission))
}

/// A bucket's stored ACL, parsed, for the [`crate::config_cache::ConfigCache`].
impl CachedConfig for Acl {
    const NAME: &'static str = BUCKET_ACL_DOC;
    const TTL: Duration = Duration::from_secs(1);
    const WHAT: &'static str = "bucket ACL";
    fn parse(_bucket: &str, raw: &[u8]) -> Result<Self, S3Error> {
        std::str::from_utf8(raw)
            .ok()
            .and_then(Acl::decode)
            .ok_or_else(|| S3Error::new(S3ErrorCode::InternalError, "stored ACL does not parse"))
    }
}

/// The ACL a Put(Bucket|Object)Acl request sets: its headers or its body (not both); neither is
/// `private`.
fn acl_of_put(headers: &HeaderMap, body: &[u8], target: Target) -> ApiResult<Acl> {
    let from_headers = Acl::of_headers(headers, target)?;
    let has_body = !body.iter().all(u8::is_ascii_whitespace);
    match (from_headers, has_body) {
        (Some(_), true) => Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "Specify an ACL either with headers or in the request body, not both.",
        )),
        (Some(acl), false) => Ok(acl),
        (None, true) => Acl::from_xml(body),
        (None, false) => Ok(Acl::default()),
    }
}

/// Whether the bucket may be given `acl`: its ObjectOwnership (ACLs off: only the owner's full
/// control) and its public access block (BlockPublicAcls: no public grant).
pub(crate) async fn check_acl_allowed(
    state: &crate::server::AppState,
    bucket: &str,
    acl: &Acl,
) -> ApiResult<()> {
    if ownership(state, bucket).await? == ObjectOwnership::BucketOwnerEnforced
        && !acl.is_owner_only()
    {
        return Err(S3ErrorCode::AccessControlListNotSupported.into());
    }
    if acl.is_public()
        && public_access_block(state, bucket)
            .await?
            .is_some_and(|p| p.block_public_acls)
    {
        return Err(ApiError::new(
            S3ErrorCode::AccessDenied,
            "The bucket's public access block (BlockPublicAcls) refuses public ACLs.",
        ));
    }
    Ok(())
}

/// The ACL entry a write that creates an object stores, from its `x-amz-acl` / `x-amz-grant-*`
/// headers, once the bucket allows it; `None` (nothing stored) for `private` or no ACL.
pub(crate) async fn object_acl_entry(
    state: &crate::server::AppState,
    bucket: &str,
    headers: &HeaderMap,
) -> ApiResult<Option<String>> {
    let Some(acl) = Acl::of_headers(headers, Target::Object)? else {
        return Ok(None);
    };
    check_acl_allowed(state, bucket, &acl).await?;
    Ok((!acl.is_owner_only()).then(|| acl.encode()))
}

/// Adds the request's object ACL (if any) to the stored headers of a new object.
pub(crate) async fn store_request_acl(
    state: &crate::server::AppState,
    bucket: &str,
    headers: &HeaderMap,
    stored: &mut std::collections::BTreeMap<String, String>,
) -> ApiResult<()> {
    let entry = object_acl_entry(state, bucket, headers).await?;
    quarry_object::set_acl_entry(stored, entry.as_deref());
    Ok(())
}

/// A bucket's ACL as stored (`private` when none).
pub(crate) async fn bucket_acl(
    state: &crate::server::AppState,
    bucket: &str,
) -> Result<Acl, quarry_object::Error> {
    Ok(state
        .acl
        .bucket_acls
        .get(&*state.layer, bucket)
        .await?
        .map(|a| (*a).clone())
        .unwrap_or_default())
}

/// Stores a bucket's ACL (`private`: the document is removed).
pub(crate) async fn store_bucket_acl(ctx: &ReqCtx, bucket: &str, acl: &Acl) -> ApiResult<()> {
    if acl.is_owner_only() {
        ctx.layer()
            .delete_bucket_config(bucket, BUCKET_ACL_DOC)
            .await?;
    } else {
        ctx.layer()
            .put_bucket_config(bucket, BUCKET_ACL_DOC, Bytes::from(acl.encode()))
            .await?;
    }
    ctx.state.acl.bucket_acls.invalidate(bucket);
    Ok(())
}

/// `GET /bucket?acl`. With ACLs off (BucketOwnerEnforced) the owner's full control, as AWS.
pub async fn get_bucket_acl(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    let acl = if ownership(&ctx.state, bucket).await? == ObjectOwnership::BucketOwnerEnforced {
        Acl::default()
    } else {
        bucket_acl(&ctx.state, bucket).await?
    };
    Ok(xml_response(acl.render()))
}

/// `GET /bucket/key?acl[&versionId=]`.
pub async fn get_object_acl(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let info = ctx
        .layer()
        .object_version_info(bucket, key, version)
        .await?;
    let acl = if ownership(&ctx.state, bucket).await? == ObjectOwnership::BucketOwnerEnforced {
        Acl::default()
    } else {
        Acl::of_object(&info.headers)
    };
    let mut response = xml_response(acl.render());
    crate::versioning::version_header(ctx, bucket, response.headers_mut(), &info).await?;
    Ok(response)
}

/// `PUT /bucket?acl`: the ACL from the headers or an `AccessControlPolicy` body.
pub async fn put_bucket_acl(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let body = ctx.small_body().await?;
    let acl = acl_of_put(&ctx.parts.headers, &body, Target::Bucket)?;
    ctx.layer().bucket_info(bucket).await?;
    check_acl_allowed(&ctx.state, bucket, &acl).await?;
    store_bucket_acl(ctx, bucket, &acl).await?;
    Ok(Response::new(Body::empty()))
}

/// `PUT /bucket/key?acl[&versionId=]`: the version's ACL, changed in place.
pub async fn put_object_acl(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let body = ctx.small_body().await?;
    let acl = acl_of_put(&ctx.parts.headers, &body, Target::Object)?;
    ctx.layer().bucket_info(bucket).await?;
    check_acl_allowed(&ctx.state, bucket, &acl).await?;
    let entry = (!acl.is_owner_only()).then(|| acl.encode());
    let update: HeadersUpdate = std::sync::Arc::new(move |_, headers| {
        quarry_object::set_acl_entry(headers, entry.as_deref());
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn policy(grants: &str) -> String {
        format!(
            "<AccessControlPolicy xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>{OWNER_ID}</ID></Owner><AccessControlList>{grants}</AccessControlList></AccessControlPolicy>"
        )
    }

    fn grant(grantee: &str, permission: &str) -> String {
        format!("<Grant><Grantee xmlns:xsi=\"{XSI}\" xsi:type=\"CanonicalUser\">{grantee}</Grantee><Permission>{permission}</Permission></Grant>")
    }

    fn code<T: std::fmt::Debug>(r: ApiResult<T>) -> S3ErrorCode {
        r.unwrap_err().code()
    }

    #[test]
    fn rendered_acls_parse_back_and_the_stored_form_round_trips() {
        for name in [
            &b"private"[..],
            b"public-read",
            b"public-read-write",
            b"authenticated-read",
            b"log-delivery-write",
        ] {
            let acl = Acl::canned(name, Target::Bucket).unwrap();
            let doc = acl.render();
            assert_eq!(Acl::from_xml(doc.as_bytes()).unwrap(), acl, "{doc}");
            assert_eq!(Acl::decode(&acl.encode()), Some(acl.clone()));
        }
        let private = Acl::default().render();
        assert!(
            private.contains("<Permission>FULL_CONTROL</Permission>"),
            "{private}"
        );
        assert!(private.contains("xsi:type=\"CanonicalUser\""), "{private}");
        assert_eq!(Acl::decode("quarry-acl 9\nREAD group AllUsers"), None);
        assert_eq!(Acl::decode("quarry-acl 1\nREAD group Nobody"), None);
    }

    #[test]
    fn canned_acls_and_grant_headers() {
        let public = Acl::canned(b"public-read", Target::Object).unwrap();
        assert!(public.is_public() && !public.is_owner_only());
        assert!(public.allows(&Caller::Anonymous, Permission::Read, false));
        assert!(!public.allows(&Caller::Anonymous, Permission::Read, true));
        assert!(!public.allows(&Caller::Anonymous, Permission::Write, false));
        assert!(Acl::canned(b"bucket-owner-full-control", Target::Object)
            .unwrap()
            .is_owner_only());
        let auth = Acl::canned(b"authenticated-read", Target::Object).unwrap();
        assert!(!auth.allows(&Caller::Anonymous, Permission::Read, false));
        assert!(auth.allows(&Caller::Root, Permission::Read, false));
        assert_eq!(
            code(Acl::canned(b"log-delivery-write", Target::Object)),
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(
            code(Acl::canned(b"public-ready", Target::Bucket)),
            S3ErrorCode::InvalidArgument
        );

        let h = headers(&[
            (
                "x-amz-grant-read",
                "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\", id=abc",
            ),
            ("x-amz-grant-write-acp", "id=\"def\""),
        ]);
        let acl = Acl::of_headers(&h, Target::Object).unwrap().unwrap();
        assert_eq!(
            acl.grants,
            vec![
                (Grantee::AllUsers, Permission::Read),
                (Grantee::Id("abc".into()), Permission::Read),
                (Grantee::Id("def".into()), Permission::WriteAcp),
            ]
        );
        assert_eq!(
            Acl::of_headers(&HeaderMap::new(), Target::Object).unwrap(),
            None
        );
        assert_eq!(
            code(Acl::of_headers(
                &headers(&[("x-amz-grant-read", "emailAddress=a@b.c")]),
                Target::Object
            )),
            S3ErrorCode::UnresolvableGrantByEmailAddress
        );
        assert_eq!(
            code(Acl::of_headers(
                &headers(&[("x-amz-grant-read", "id=a"), ("x-amz-acl", "private")]),
                Target::Object
            )),
            S3ErrorCode::InvalidRequest
        );
        assert_eq!(
            code(Acl::of_headers(
                &headers(&[("x-amz-grant-read", "nope")]),
                Target::Object
            )),
            S3ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn access_control_policy_documents() {
        let owner = format!("<ID>{OWNER_ID}</ID>");
        let ok = policy(&grant(&owner, "FULL_CONTROL"));
        assert!(Acl::from_xml(ok.as_bytes()).unwrap().is_owner_only());
        let both = acl_of_put(
            &headers(&[("x-amz-acl", "private")]),
            ok.as_bytes(),
            Target::Object,
        );
        assert_eq!(code(both), S3ErrorCode::InvalidRequest);
        assert!(acl_of_put(&HeaderMap::new(), b" ", Target::Object)
            .unwrap()
            .is_owner_only());
        assert_eq!(code(Acl::from_xml(b"<Nope/>")), S3ErrorCode::MalformedXML);
        assert_eq!(
            code(Acl::from_xml(b"<AccessControlPolicy>")),
            S3ErrorCode::MalformedXML
        );
        let other_owner = ok.replace(&format!("<Owner><ID>{OWNER_ID}"), "<Owner><ID>x");
        assert_eq!(
            code(Acl::from_xml(other_owner.as_bytes())),
            S3ErrorCode::AccessDenied
        );
        let email = policy(&grant("<EmailAddress>a@b.c</EmailAddress>", "READ"));
        assert_eq!(
            code(Acl::from_xml(email.as_bytes())),
            S3ErrorCode::UnresolvableGrantByEmailAddress
        );
        let bad_permission = policy(&grant(&owner, "EVERYTHING"));
        assert_eq!(
            code(Acl::from_xml(bad_permission.as_bytes())),
            S3ErrorCode::MalformedXML
        );
        let user = policy(&grant("<ID>AIDAUSER</ID>", "READ"));
        let acl = Acl::from_xml(user.as_bytes()).unwrap();
        assert_eq!(
            acl.grants,
            vec![(Grantee::Id("AIDAUSER".into()), Permission::Read)]
        );
        assert!(!acl.allows(&Caller::Root, Permission::Read, false));
    }
}
