//! The bucket settings around ACLs: ObjectOwnership (Put/Get/DeleteBucketOwnershipControls,
//! `x-amz-object-ownership` on CreateBucket) and the public access block
//! (Put/Get/DeletePublicAccessBlock), with the per-node caches authorization reads them through.
//!
//! Both are bucket configuration documents holding the XML S3 defines for them (re-rendered
//! from what was parsed): `ownership` and `public-access-block`. A bucket without an
//! `ownership` document (made before Quarry had one, or whose controls were deleted) is
//! `ObjectWriter`, as AWS treats buckets older than its BucketOwnerEnforced default; a new
//! bucket gets the header's setting or the server's default
//! (`--default-object-ownership` / `QUARRY_DEFAULT_OBJECT_OWNERSHIP`, BucketOwnerEnforced
//! unless set).

use std::str::FromStr;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;

use crate::acl::Acl;
use crate::api_error::{ApiError, ApiResult};
use crate::config_cache::{CachedConfig, ConfigCache};
use crate::error::{S3Error, S3ErrorCode};
use crate::server::{AppState, ReqCtx};
use crate::xml::{parse_document, xml_response, Element, XmlWriter};

const OWNERSHIP_DOC: &str = "ownership";
const PUBLIC_ACCESS_BLOCK_DOC: &str = "public-access-block";
const CACHE_TTL: Duration = Duration::from_secs(1);

/// A bucket's ObjectOwnership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectOwnership {
    /// ACLs are off: the bucket owner owns everything; only its full control may be set.
    BucketOwnerEnforced,
    /// ACLs on; objects written with `bucket-owner-full-control` belong to the bucket owner.
    BucketOwnerPreferred,
    /// ACLs on; the writer owns what it writes.
    ObjectWriter,
}

impl ObjectOwnership {
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectOwnership::BucketOwnerEnforced => "BucketOwnerEnforced",
            ObjectOwnership::BucketOwnerPreferred => "BucketOwnerPreferred",
            ObjectOwnership::ObjectWriter => "ObjectWriter",
        }
    }
}

impl FromStr for ObjectOwnership {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.trim() {
            "BucketOwnerEnforced" => ObjectOwnership::BucketOwnerEnforced,
            "BucketOwnerPreferred" => ObjectOwnership::BucketOwnerPreferred,
            "ObjectWriter" => ObjectOwnership::ObjectWriter,
            other => {
                return Err(format!(
                    "{other:?} is not an object ownership: BucketOwnerEnforced, BucketOwnerPreferred or ObjectWriter"
                ))
            }
        })
    }
}

impl Default for ObjectOwnership {
    /// AWS's default for new buckets.
    fn default() -> Self {
        ObjectOwnership::BucketOwnerEnforced
    }
}

/// A bucket's public access block configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublicAccessBlock {
    pub block_public_acls: bool,
    pub ignore_public_acls: bool,
    pub block_public_policy: bool,
    pub restrict_public_buckets: bool,
}

const PAB_FIELDS: [&str; 4] = [
    "BlockPublicAcls",
    "IgnorePublicAcls",
    "BlockPublicPolicy",
    "RestrictPublicBuckets",
];

impl PublicAccessBlock {
    fn fields(&self) -> [bool; 4] {
        [
            self.block_public_acls,
            self.ignore_public_acls,
            self.block_public_policy,
            self.restrict_public_buckets,
        ]
    }

    fn parse(body: &[u8]) -> Result<Self, S3Error> {
        let doc = parse_document(body)?;
        if doc.name != "PublicAccessBlockConfiguration" {
            return Err(malformed(
                "the root element must be PublicAccessBlockConfiguration",
            ));
        }
        let flag = |name: &str| -> Result<bool, S3Error> {
            match doc.child(name).map(|e| e.text.trim()) {
                None => Ok(false),
                Some("true") => Ok(true),
                Some("false") => Ok(false),
                Some(_) => Err(malformed(&format!("{name} must be true or false"))),
            }
        };
        Ok(PublicAccessBlock {
            block_public_acls: flag(PAB_FIELDS[0])?,
            ignore_public_acls: flag(PAB_FIELDS[1])?,
            block_public_policy: flag(PAB_FIELDS[2])?,
            restrict_public_buckets: flag(PAB_FIELDS[3])?,
        })
    }

    fn render(&self) -> String {
        let root = "PublicAccessBlockConfiguration";
        let mut w = XmlWriter::new(root);
        for (name, value) in PAB_FIELDS.iter().zip(self.fields()) {
            w.elem(name, if value { "true" } else { "false" });
        }
        w.finish(root)
    }
}

fn malformed(detail: &str) -> S3Error {
    S3Error::new(
        S3ErrorCode::MalformedXML,
        format!("{} ({detail})", S3ErrorCode::MalformedXML.default_message()),
    )
}

/// The stored ownership of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership(pub ObjectOwnership);

impl Ownership {
    fn parse(body: &[u8]) -> Result<Self, S3Error> {
        let doc = parse_document(body)?;
        if doc.name != "OwnershipControls" {
            return Err(malformed("the root element must be OwnershipControls"));
        }
        let rules: Vec<&Element> = doc.children.iter().filter(|r| r.name == "Rule").collect();
        let [rule] = rules.as_slice() else {
            return Err(malformed("OwnershipControls holds exactly one Rule"));
        };
        let value = rule
            .child("ObjectOwnership")
            .ok_or_else(|| malformed("a Rule needs an ObjectOwnership"))?;
        value
            .text
            .parse()
            .map(Ownership)
            .map_err(|e: String| malformed(&e))
    }

    fn render(&self) -> String {
        let root = "OwnershipControls";
        let mut w = XmlWriter::new(root);
        w.open("Rule")
            .elem("ObjectOwnership", self.0.as_str())
            .close("Rule");
        w.finish(root)
    }
}

impl CachedConfig for Ownership {
    const NAME: &'static str = OWNERSHIP_DOC;
    const TTL: Duration = CACHE_TTL;
    const WHAT: &'static str = "bucket ownership controls";
    fn parse(_bucket: &str, raw: &[u8]) -> Result<Self, S3Error> {
        Ownership::parse(raw)
    }
}

impl CachedConfig for PublicAccessBlock {
    const NAME: &'static str = PUBLIC_ACCESS_BLOCK_DOC;
    const TTL: Duration = CACHE_TTL;
    const WHAT: &'static str = "public access block";
    fn parse(_bucket: &str, raw: &[u8]) -> Result<Self, S3Error> {
        PublicAccessBlock::parse(raw)
    }
}

/// The ACL-related state of a server: the default ownership of new buckets and the caches of
/// the three bucket documents authorization consults.
#[derive(Default)]
pub(crate) struct AclState {
    pub default_ownership: ObjectOwnership,
    pub ownership: ConfigCache<Ownership>,
    pub public_access_blocks: ConfigCache<PublicAccessBlock>,
    pub bucket_acls: ConfigCache<Acl>,
}

impl AclState {
    pub(crate) fn new(default_ownership: ObjectOwnership) -> Self {
        AclState {
            default_ownership,
            ..Default::default()
        }
    }

    /// Forgets a bucket's documents (it was deleted).
    pub(crate) fn invalidate(&self, bucket: &str) {
        self.ownership.invalidate(bucket);
        self.public_access_blocks.invalidate(bucket);
        self.bucket_acls.invalidate(bucket);
    }
}

/// A bucket's ObjectOwnership (ObjectWriter without controls).
pub(crate) async fn ownership(
    state: &AppState,
    bucket: &str,
) -> Result<ObjectOwnership, quarry_object::Error> {
    Ok(state
        .acl
        .ownership
        .get(&*state.layer, bucket)
        .await?
        .map_or(ObjectOwnership::ObjectWriter, |o| o.0))
}

/// A bucket's public access block, if it has one.
pub(crate) async fn public_access_block(
    state: &AppState,
    bucket: &str,
) -> Result<Option<PublicAccessBlock>, quarry_object::Error> {
    Ok(state
        .acl
        .public_access_blocks
        .get(&*state.layer, bucket)
        .await?
        .map(|p| *p))
}

/// CreateBucket's ObjectOwnership and ACL, checked before the bucket is made: the
/// `x-amz-object-ownership` header or the server's default, and the request's ACL, which must
/// be the owner's full control when ACLs are off. The ownership is `None` (no controls stored)
/// when the bucket gets the default and that is ObjectWriter, which is what a bucket without
/// controls is (RGW's behaviour, where such a bucket has no OwnershipControls).
pub(crate) fn new_bucket_settings(
    state: &AppState,
    headers: &http::HeaderMap,
) -> ApiResult<(Option<ObjectOwnership>, Option<Acl>)> {
    let ownership = match headers.get("x-amz-object-ownership") {
        None => Some(state.acl.default_ownership).filter(|o| *o != ObjectOwnership::ObjectWriter),
        Some(v) => Some(
            std::str::from_utf8(v.as_bytes())
                .map_err(|_| ApiError::invalid_argument("x-amz-object-ownership is not ASCII."))?
                .parse()
                .map_err(ApiError::invalid_argument)?,
        ),
    };
    let acl = Acl::of_headers(headers, crate::acl::Target::Bucket)?;
    if ownership == Some(ObjectOwnership::BucketOwnerEnforced)
        && acl.as_ref().is_some_and(|a| !a.is_owner_only())
    {
        return Err(S3ErrorCode::InvalidBucketAclWithObjectOwnership.into());
    }
    Ok((ownership, acl))
}

/// Stores a new bucket's settings (see [`new_bucket_settings`]).
pub(crate) async fn store_new_bucket_settings(
    ctx: &ReqCtx,
    bucket: &str,
    ownership: Option<ObjectOwnership>,
    acl: Option<&Acl>,
) -> ApiResult<()> {
    if let Some(ownership) = ownership {
        put_doc(ctx, bucket, OWNERSHIP_DOC, Ownership(ownership).render()).await?;
    }
    if let Some(acl) = acl {
        crate::acl::store_bucket_acl(ctx, bucket, acl).await?;
    }
    ctx.state.acl.invalidate(bucket);
    Ok(())
}

async fn put_doc(ctx: &ReqCtx, bucket: &str, name: &str, doc: String) -> ApiResult<()> {
    ctx.layer()
        .put_bucket_config(bucket, name, Bytes::from(doc))
        .await?;
    Ok(())
}

fn no_content() -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    r
}

/// `GET /bucket?ownershipControls`.
pub(crate) async fn get_ownership_controls(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    match ctx
        .state
        .acl
        .ownership
        .get(&*ctx.state.layer, bucket)
        .await?
    {
        Some(o) => Ok(xml_response(o.render())),
        None => Err(S3ErrorCode::OwnershipControlsNotFoundError.into()),
    }
}

/// `PUT /bucket?ownershipControls`.
pub(crate) async fn put_ownership_controls(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let body = ctx.small_body().await?;
    let ownership = Ownership::parse(&body)?;
    ctx.layer().bucket_info(bucket).await?;
    // ACLs cannot be turned off while the bucket's own ACL grants more than its owner's full
    // control (AWS's check; object ACLs simply stop counting).
    if ownership.0 == ObjectOwnership::BucketOwnerEnforced
        && !crate::acl::bucket_acl(&ctx.state, bucket)
            .await?
            .is_owner_only()
    {
        return Err(S3ErrorCode::InvalidBucketAclWithObjectOwnership.into());
    }
    put_doc(ctx, bucket, OWNERSHIP_DOC, ownership.render()).await?;
    ctx.state.acl.ownership.invalidate(bucket);
    Ok(Response::new(Body::empty()))
}

/// `DELETE /bucket?ownershipControls`: 204; the bucket is ObjectWriter from now on.
pub(crate) async fn delete_ownership_controls(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    ctx.layer()
        .delete_bucket_config(bucket, OWNERSHIP_DOC)
        .await?;
    ctx.state.acl.ownership.invalidate(bucket);
    Ok(no_content())
}

/// `GET /bucket?publicAccessBlock`.
pub(crate) async fn get_public_access_block(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    match public_access_block(&ctx.state, bucket).await? {
        Some(p) => Ok(xml_response(p.render())),
        None => Err(S3ErrorCode::NoSuchPublicAccessBlockConfiguration.into()),
    }
}

/// `PUT /bucket?publicAccessBlock`.
pub(crate) async fn put_public_access_block(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let body = ctx.small_body().await?;
    let pab = PublicAccessBlock::parse(&body)?;
    ctx.layer().bucket_info(bucket).await?;
    put_doc(ctx, bucket, PUBLIC_ACCESS_BLOCK_DOC, pab.render()).await?;
    ctx.state.acl.public_access_blocks.invalidate(bucket);
    Ok(Response::new(Body::empty()))
}

/// `DELETE /bucket?publicAccessBlock`: 204.
pub(crate) async fn delete_public_access_block(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    ctx.layer()
        .delete_bucket_config(bucket, PUBLIC_ACCESS_BLOCK_DOC)
        .await?;
    ctx.state.acl.public_access_blocks.invalidate(bucket);
    Ok(no_content())
}

/// PutBucketPolicy under BlockPublicPolicy: a public policy is refused.
pub(crate) async fn check_policy_allowed(
    ctx: &ReqCtx,
    bucket: &str,
    policy: &quarry_policy::Policy,
) -> ApiResult<()> {
    if crate::bucket_policy::is_public(policy)
        && public_access_block(&ctx.state, bucket)
            .await?
            .is_some_and(|p| p.block_public_policy)
    {
        return Err(ApiError::new(
            S3ErrorCode::AccessDenied,
            "The bucket's public access block (BlockPublicPolicy) refuses public policies.",
        ));
    }
    Ok(())
}

/// Whether a request allowed by a public bucket policy is refused by RestrictPublicBuckets
/// (only the account's own principals may use a public policy there): for anonymous callers.
pub(crate) async fn restricted_public_bucket(
    state: &AppState,
    bucket_policies: &crate::authz::BucketPolicies,
) -> Result<bool, quarry_object::Error> {
    for (bucket, policy) in bucket_policies {
        if policy
            .as_deref()
            .is_some_and(crate::bucket_policy::is_public)
            && public_access_block(state, bucket)
                .await?
                .is_some_and(|p| p.restrict_public_buckets)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_controls_documents() {
        for o in [
            ObjectOwnership::BucketOwnerEnforced,
            ObjectOwnership::BucketOwnerPreferred,
            ObjectOwnership::ObjectWriter,
        ] {
            let doc = Ownership(o).render();
            assert_eq!(
                Ownership::parse(doc.as_bytes()).unwrap(),
                Ownership(o),
                "{doc}"
            );
        }
        let bad = |b: &str| Ownership::parse(b.as_bytes()).unwrap_err().code;
        assert_eq!(
            bad("<OwnershipControls><Rule><ObjectOwnership>Mine</ObjectOwnership></Rule></OwnershipControls>"),
            S3ErrorCode::MalformedXML
        );
        assert_eq!(
            bad("<OwnershipControls></OwnershipControls>"),
            S3ErrorCode::MalformedXML
        );
        assert_eq!(
            ObjectOwnership::default(),
            ObjectOwnership::BucketOwnerEnforced
        );
    }

    #[test]
    fn public_access_block_documents() {
        let p = PublicAccessBlock {
            block_public_acls: true,
            restrict_public_buckets: true,
            ..Default::default()
        };
        assert_eq!(PublicAccessBlock::parse(p.render().as_bytes()).unwrap(), p);
        let partial = b"<PublicAccessBlockConfiguration><IgnorePublicAcls>true</IgnorePublicAcls></PublicAccessBlockConfiguration>";
        assert!(
            PublicAccessBlock::parse(partial)
                .unwrap()
                .ignore_public_acls
        );
        let bad = b"<PublicAccessBlockConfiguration><BlockPublicAcls>yes</BlockPublicAcls></PublicAccessBlockConfiguration>";
        assert_eq!(
            PublicAccessBlock::parse(bad).unwrap_err().code,
            S3ErrorCode::MalformedXML
        );
    }
}
