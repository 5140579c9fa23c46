//! ACL grants as one more source of Allow in authorization, as AWS evaluates them: a request the
//! policies refused is looked at again only when no policy denied it explicitly; then each need
//! the policies did not allow must be granted by the ACL of its bucket or object. A bucket with
//! ACLs off (BucketOwnerEnforced) grants nothing by ACL; IgnorePublicAcls skips the grants to
//! AllUsers and AuthenticatedUsers; RestrictPublicBuckets refuses anonymous callers what a
//! public bucket policy would give them.
//!
//! Called by `server::dispatch` right after [`crate::authz::authorize`], so the policies' fast
//! path (the root user, a user whose policy allows) reads no ACL at all.
//!
//! What each ACL permission allows (AWS's "ACL permission to access policy permission mapping"):
//! on a bucket, READ lists it (ListBucket, ListBucketVersions, ListBucketMultipartUploads),
//! WRITE creates, overwrites and deletes its objects (PutObject, DeleteObject,
//! DeleteObjectVersion, AbortMultipartUpload), READ_ACP / WRITE_ACP read and write its ACL; on
//! an object, READ reads it (GetObject, GetObjectVersion), READ_ACP / WRITE_ACP its ACL.

use http::request::Parts;
use quarry_object::VersionId;
use quarry_policy::{Context, Decision};

use crate::acl::{bucket_acl, Acl, Permission};
use crate::acl_config::{
    ownership, public_access_block, restricted_public_bucket, ObjectOwnership,
};
use crate::api_error::ApiResult;
use crate::authz::{decide, denied_for, BucketPolicies, Caller, Need};
use crate::router::Endpoint;
use crate::server::AppState;

/// Where the ACL that decides an action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    Bucket,
    Object,
}

/// The ACL permission that allows `action`, and whose ACL holds it.
fn acl_permission(action: &str) -> Option<(Permission, On)> {
    Some(match action {
        "s3:ListBucket" | "s3:ListBucketVersions" | "s3:ListBucketMultipartUploads" => {
            (Permission::Read, On::Bucket)
        }
        "s3:PutObject"
        | "s3:DeleteObject"
        | "s3:DeleteObjectVersion"
        | "s3:AbortMultipartUpload" => (Permission::Write, On::Bucket),
        "s3:GetBucketAcl" => (Permission::ReadAcp, On::Bucket),
        "s3:PutBucketAcl" => (Permission::WriteAcp, On::Bucket),
        "s3:GetObject" | "s3:GetObjectVersion" => (Permission::Read, On::Object),
        "s3:GetObjectAcl" | "s3:GetObjectVersionAcl" => (Permission::ReadAcp, On::Object),
        "s3:PutObjectAcl" | "s3:PutObjectVersionAcl" => (Permission::WriteAcp, On::Object),
        _ => return None,
    })
}

/// The bucket and key of an S3 resource ARN (no key for a bucket).
fn split_arn(arn: &str) -> Option<(&str, Option<&str>)> {
    let rest = arn.strip_prefix("arn:aws:s3:::")?;
    Some(match rest.split_once('/') {
        Some((b, k)) => (b, Some(k)),
        None => (rest, None),
    })
}

/// The version an object need is about: the copy source's for a copy's read, else the
/// endpoint's own.
fn version_of(endpoint: &Endpoint, parts: &Parts, need: &Need) -> Option<VersionId> {
    use Endpoint as E;
    match endpoint {
        E::CopyObject { .. } | E::UploadPartCopy { .. }
            if need.action.starts_with("s3:GetObject") =>
        {
            let raw = parts
                .headers
                .get("x-amz-copy-source")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            crate::copy::parse_copy_source(raw)
                .ok()
                .and_then(|s| s.version)
        }
        E::GetObject { version, .. }
        | E::HeadObject { version, .. }
        | E::GetObjectAcl { version, .. }
        | E::PutObjectAcl { version, .. } => *version,
        _ => None,
    }
}

/// Whether a policy allows `need`, or, where none denies it, an ACL grants it (`version`: the
/// object version an object need is about).
async fn allowed(
    state: &AppState,
    caller: &Caller,
    need: &Need,
    version: Option<VersionId>,
    ctx: &Context,
    bucket_policies: &BucketPolicies,
) -> ApiResult<bool> {
    Ok(match decide(caller, need, ctx, bucket_policies) {
        Decision::Allow => true,
        Decision::ExplicitDeny => false,
        Decision::ImplicitDeny => granted(state, caller, need, version).await?,
    })
}

/// Whether `caller` may list `bucket` (`s3:ListBucket`).
async fn may_list(
    state: &AppState,
    caller: &Caller,
    bucket: &str,
    ctx: &Context,
    bucket_policies: &BucketPolicies,
) -> ApiResult<bool> {
    let list = Need {
        action: "s3:ListBucket",
        resource: crate::authz::bucket_arn(bucket),
    };
    allowed(state, caller, &list, None, ctx, bucket_policies).await
}

/// A GET or HEAD that authorization allowed found no object (`answer` is `NoSuchKey`): S3 says
/// so only to a caller who may list the bucket, and `AccessDenied` to any other, so that
/// `s3:GetObject` alone does not tell which keys exist.
pub(crate) async fn missing_object(
    ctx: &crate::server::ReqCtx,
    bucket: &str,
    key: &str,
    answer: ApiResult<http::Response<axum::body::Body>>,
) -> ApiResult<http::Response<axum::body::Body>> {
    let Err(e) = &answer else { return answer };
    if e.code() != crate::error::S3ErrorCode::NoSuchKey || ctx.caller.is_root() {
        return answer;
    }
    if may_list(
        &ctx.state,
        &ctx.caller,
        bucket,
        &ctx.policy_ctx,
        &ctx.bucket_policies,
    )
    .await?
    {
        return answer;
    }
    Err(denied_for(
        &ctx.caller,
        "s3:GetObject",
        &crate::authz::object_arn(bucket, key),
    )
    .into())
}

/// Whether an ACL grants `caller` what `need` asks.
async fn granted(
    state: &AppState,
    caller: &Caller,
    need: &Need,
    version: Option<VersionId>,
) -> ApiResult<bool> {
    let (Some((permission, on)), Some((bucket, key))) =
        (acl_permission(need.action), split_arn(&need.resource))
    else {
        return Ok(false);
    };
    if ownership(state, bucket).await? == ObjectOwnership::BucketOwnerEnforced {
        return Ok(false);
    }
    let ignore_public = public_access_block(state, bucket)
        .await?
        .is_some_and(|p| p.ignore_public_acls);
    let acl = match (on, key) {
        (On::Bucket, _) => bucket_acl(state, bucket).await?,
        (On::Object, Some(key)) => {
            match state.layer.object_version_info(bucket, key, version).await {
                Ok(info) => Acl::of_object(&info.headers),
                // Nothing there grants nothing: the caller learns no more than AccessDenied.
                Err(_) => return Ok(false),
            }
        }
        (On::Object, None) => return Ok(false),
    };
    Ok(acl.allows(caller, permission, ignore_public))
}

/// After the policies refused a request (`refused`): allows it when no policy denies any of its
/// needs explicitly and an ACL grants each need the policies did not allow.
async fn allow_by_acl(
    state: &AppState,
    caller: &Caller,
    endpoint: &Endpoint,
    parts: &Parts,
    needs: &[Need],
    ctx: &Context,
    bucket_policies: &BucketPolicies,
) -> ApiResult<()> {
    for need in needs {
        let version = version_of(endpoint, parts, need);
        if !allowed(state, caller, need, version, ctx, bucket_policies).await? {
            return Err(
                refusal(state, caller, endpoint, need, version, ctx, bucket_policies).await?,
            );
        }
    }
    Ok(())
}

/// What a refused request is told, as S3 does: `NoSuchBucket` when the bucket does not exist
/// (whoever asks); for a GET or HEAD of an object that does not exist and that no policy
/// denies, `NoSuchKey` to a caller who may list the bucket (who could learn that anyway) and
/// `AccessDenied` to any other (AWS, GetObject: "if you don't have the s3:ListBucket
/// permission, Amazon S3 returns ... 403"). Nothing is read on the allowed path.
async fn refusal(
    state: &AppState,
    caller: &Caller,
    endpoint: &Endpoint,
    need: &Need,
    version: Option<VersionId>,
    ctx: &Context,
    bucket_policies: &BucketPolicies,
) -> ApiResult<crate::api_error::ApiError> {
    let denied = || Ok(denied_for(caller, need.action, &need.resource).into());
    let Some((bucket, key)) = split_arn(&need.resource) else {
        return denied();
    };
    if endpoint.bucket() != Some(bucket) {
        return denied();
    }
    if let Err(e @ quarry_object::Error::BucketNotFound) = state.layer.bucket_info(bucket).await {
        return Ok(e.into());
    }
    let (Endpoint::GetObject { .. } | Endpoint::HeadObject { .. }, Some(key)) = (endpoint, key)
    else {
        return denied();
    };
    if !need.action.starts_with("s3:GetObject")
        || decide(caller, need, ctx, bucket_policies) == Decision::ExplicitDeny
    {
        return denied();
    }
    let missing = match state.layer.object_version_info(bucket, key, version).await {
        Err(e @ quarry_object::Error::ObjectNotFound) => e,
        _ => return denied(),
    };
    if may_list(state, caller, bucket, ctx, bucket_policies).await? {
        Ok(missing.into())
    } else {
        denied()
    }
}

/// The one authorization decision with ACLs: [`crate::authz::authorize`] (the policies), then
/// RestrictPublicBuckets when they allowed an anonymous caller, or the ACL grants when they
/// refused.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn authorize_with_acls(
    state: &AppState,
    caller: &Caller,
    endpoint: &Endpoint,
    parts: &Parts,
    needs: &[Need],
    ctx: &Context,
    bucket_policies: &BucketPolicies,
) -> ApiResult<()> {
    match crate::authz::authorize(caller, needs, ctx, bucket_policies) {
        Ok(()) => check_restrict_public(state, caller, needs, bucket_policies).await,
        // ACL grants: one more source of Allow where no policy denies explicitly.
        Err(_) => allow_by_acl(state, caller, endpoint, parts, needs, ctx, bucket_policies).await,
    }
}

/// After the policies allowed an anonymous request: RestrictPublicBuckets takes back what a
/// public bucket policy gave.
async fn check_restrict_public(
    state: &AppState,
    caller: &Caller,
    needs: &[Need],
    bucket_policies: &BucketPolicies,
) -> ApiResult<()> {
    if matches!(caller, Caller::Anonymous)
        && restricted_public_bucket(state, bucket_policies).await?
    {
        let need = needs.first();
        return Err(denied_for(
            caller,
            need.map_or("", |n| n.action),
            need.map_or("", |n| n.resource.as_str()),
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_map_to_acl_permissions() {
        assert_eq!(
            acl_permission("s3:GetObject"),
            Some((Permission::Read, On::Object))
        );
        assert_eq!(
            acl_permission("s3:PutObject"),
            Some((Permission::Write, On::Bucket))
        );
        assert_eq!(
            acl_permission("s3:ListBucket"),
            Some((Permission::Read, On::Bucket))
        );
        assert_eq!(acl_permission("s3:PutBucketPolicy"), None);
        assert_eq!(split_arn("arn:aws:s3:::b/k/x"), Some(("b", Some("k/x"))));
        assert_eq!(split_arn("arn:aws:s3:::b"), Some(("b", None)));
    }
}
