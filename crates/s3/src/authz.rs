//! Authorization: the IAM action and resource every endpoint needs, and the one place where a
//! request is allowed or refused — [`authorize`], called once per request by
//! `server::dispatch`, after the signature checked out and before the handler runs.
//!
//! The action map follows AWS's names (the "Actions defined by Amazon S3" table): a HEAD is the
//! GET of the same thing, a read or delete of a specific version is the `...Version` action,
//! every multipart step but abort and listing is `s3:PutObject`, a copy needs `s3:PutObject` on
//! the target and `s3:GetObject` (or `s3:GetObjectVersion`) on the source. DeleteObjects is
//! decided per key by its handler through the same evaluation ([`DELETE_OBJECTS_KEY_ACTIONS`]).

use std::sync::Arc;

use http::request::Parts;
use http::HeaderMap;
use quarry_object::VersionId;
use quarry_policy::{evaluate, Context, Policy, Principal, Request};

use crate::iam::state::{Identity, ACCOUNT_ID};

use crate::copy::parse_copy_source;
use crate::error::{S3Error, S3ErrorCode};
use crate::router::Endpoint;

/// One permission a request needs: an IAM action on a resource ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub action: &'static str,
    pub resource: String,
}

/// The resource ARN of a bucket.
pub fn bucket_arn(bucket: &str) -> String {
    format!("arn:aws:s3:::{bucket}")
}

/// The resource ARN of an object.
pub fn object_arn(bucket: &str, key: &str) -> String {
    format!("arn:aws:s3:::{bucket}/{key}")
}

/// The resource of actions on no bucket (`s3:ListAllMyBuckets`): matched by `*` and by
/// `arn:aws:s3:::*`.
pub const ALL_BUCKETS: &str = "arn:aws:s3:::*";

/// What DeleteObjects needs for each key it deletes (without and with a version id).
pub const DELETE_OBJECTS_KEY_ACTIONS: (&str, &str) = ("s3:DeleteObject", "s3:DeleteObjectVersion");

/// Every S3 action an endpoint of this server maps to (bucket policies naming another `s3:`
/// action are still accepted when a wildcard covers one of these; see the bucket policy checks).
pub const S3_ACTIONS: &[&str] = &[
    "s3:AbortMultipartUpload",
    "s3:CreateBucket",
    "s3:DeleteBucket",
    "s3:DeleteBucketPolicy",
    "s3:DeleteObject",
    "s3:DeleteObjectTagging",
    "s3:DeleteObjectVersion",
    "s3:DeleteObjectVersionTagging",
    "s3:GetBucketAcl",
    "s3:GetBucketCORS",
    "s3:GetBucketLocation",
    "s3:GetBucketObjectLockConfiguration",
    "s3:GetBucketOwnershipControls",
    "s3:GetBucketPolicy",
    "s3:GetBucketPolicyStatus",
    "s3:GetBucketPublicAccessBlock",
    "s3:GetBucketTagging",
    "s3:GetBucketVersioning",
    "s3:GetEncryptionConfiguration",
    "s3:GetLifecycleConfiguration",
    "s3:GetObject",
    "s3:GetObjectAcl",
    "s3:GetObjectAttributes",
    "s3:GetObjectLegalHold",
    "s3:GetObjectRetention",
    "s3:GetObjectTagging",
    "s3:GetObjectVersion",
    "s3:GetObjectVersionAcl",
    "s3:GetObjectVersionAttributes",
    "s3:GetObjectVersionTagging",
    "s3:ListAllMyBuckets",
    "s3:ListBucket",
    "s3:ListBucketMultipartUploads",
    "s3:ListBucketVersions",
    "s3:ListMultipartUploadParts",
    "s3:PutBucketAcl",
    "s3:PutBucketCORS",
    "s3:PutBucketObjectLockConfiguration",
    "s3:PutBucketOwnershipControls",
    "s3:PutBucketPolicy",
    "s3:PutBucketPublicAccessBlock",
    "s3:PutBucketTagging",
    "s3:PutBucketVersioning",
    "s3:PutEncryptionConfiguration",
    "s3:PutLifecycleConfiguration",
    "s3:PutObject",
    "s3:PutObjectAcl",
    "s3:PutObjectLegalHold",
    "s3:PutObjectRetention",
    "s3:PutObjectTagging",
    "s3:PutObjectVersionAcl",
    "s3:PutObjectVersionTagging",
];

/// The permissions `endpoint` needs; empty for the anonymous endpoints (health, metrics,
/// preflight), which are answered before authentication, and for the admin API, which is the
/// root user's alone (see [`authorize`]). A copy source that does not parse is the request's
/// error here, as it would be in the handler.
pub fn needs(endpoint: &Endpoint, headers: &HeaderMap) -> Result<Vec<Need>, S3Error> {
    use Endpoint as E;
    let b = |action, bucket: &str| Need {
        action,
        resource: bucket_arn(bucket),
    };
    let o = |action, bucket: &str, key: &str| Need {
        action,
        resource: object_arn(bucket, key),
    };
    let versioned = |plain, of_version, version: &Option<quarry_object::VersionId>| {
        if version.is_some() {
            of_version
        } else {
            plain
        }
    };
    let copy_source = || -> Result<Need, S3Error> {
        let raw = headers
            .get("x-amz-copy-source")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let src = parse_copy_source(raw).map_err(|e| e.error)?;
        let action = if src.version.is_some() {
            "s3:GetObjectVersion"
        } else {
            "s3:GetObject"
        };
        Ok(o(action, &src.bucket, &src.key))
    };
    Ok(match endpoint {
        // The admin API is the root user's (checked by its handler); the query API's calls are
        // authorized by `iam::query::serve` from the form's action. An RDMA connection is any
        // signed caller's: it grants nothing (each request over it is authorized as without).
        E::HealthLive
        | E::HealthReady
        | E::Metrics
        | E::CorsPreflight { .. }
        | E::Admin { .. }
        | E::RdmaConnect
        | E::RdmaDisconnect { .. }
        | E::IamQuery => vec![],
        E::ListBuckets { .. } => vec![Need {
            action: "s3:ListAllMyBuckets",
            resource: ALL_BUCKETS.to_owned(),
        }],
        E::CreateBucket { bucket } => vec![b("s3:CreateBucket", bucket)],
        E::HeadBucket { bucket } => vec![b("s3:ListBucket", bucket)],
        E::DeleteBucket { bucket } => vec![b("s3:DeleteBucket", bucket)],
        E::GetBucketLocation { bucket } => vec![b("s3:GetBucketLocation", bucket)],
        E::ListObjects { bucket, .. } | E::ListObjectsV2 { bucket, .. } => {
            vec![b("s3:ListBucket", bucket)]
        }
        E::PutObject { bucket, key }
        | E::CreateMultipartUpload { bucket, key }
        | E::UploadPart { bucket, key, .. }
        | E::CompleteMultipartUpload { bucket, key, .. } => vec![o("s3:PutObject", bucket, key)],
        // Authorized by its handler as the PutObject of the form's key, once the signed form
        // has named it.
        E::PostObject { .. } => vec![],
        E::CopyObject { bucket, key } | E::UploadPartCopy { bucket, key, .. } => {
            vec![o("s3:PutObject", bucket, key), copy_source()?]
        }
        E::GetObject {
            bucket,
            key,
            version,
            ..
        }
        | E::HeadObject {
            bucket,
            key,
            version,
            ..
        } => vec![o(
            versioned("s3:GetObject", "s3:GetObjectVersion", version),
            bucket,
            key,
        )],
        E::GetObjectAttributes {
            bucket,
            key,
            version,
        } => vec![o(
            versioned(
                "s3:GetObjectAttributes",
                "s3:GetObjectVersionAttributes",
                version,
            ),
            bucket,
            key,
        )],
        E::DeleteObject {
            bucket,
            key,
            version,
        } => vec![o(
            versioned("s3:DeleteObject", "s3:DeleteObjectVersion", version),
            bucket,
            key,
        )],
        // Decided per key by the handler.
        E::DeleteObjects { .. } => vec![],
        E::GetObjectTagging {
            bucket,
            key,
            version,
        } => vec![o(
            versioned("s3:GetObjectTagging", "s3:GetObjectVersionTagging", version),
            bucket,
            key,
        )],
        E::PutObjectTagging {
            bucket,
            key,
            version,
        } => vec![o(
            versioned("s3:PutObjectTagging", "s3:PutObjectVersionTagging", version),
            bucket,
            key,
        )],
        E::DeleteObjectTagging {
            bucket,
            key,
            version,
        } => vec![o(
            versioned(
                "s3:DeleteObjectTagging",
                "s3:DeleteObjectVersionTagging",
                version,
            ),
            bucket,
            key,
        )],
        E::GetBucketTagging { bucket } => vec![b("s3:GetBucketTagging", bucket)],
        // AWS has no DeleteBucketTagging action: deleting the tag set is putting none.
        E::PutBucketTagging { bucket } | E::DeleteBucketTagging { bucket } => {
            vec![b("s3:PutBucketTagging", bucket)]
        }
        E::GetObjectLockConfiguration { bucket } => {
            vec![b("s3:GetBucketObjectLockConfiguration", bucket)]
        }
        E::PutObjectLockConfiguration { bucket } => {
            vec![b("s3:PutBucketObjectLockConfiguration", bucket)]
        }
        E::GetObjectRetention { bucket, key, .. } => vec![o("s3:GetObjectRetention", bucket, key)],
        E::PutObjectRetention { bucket, key, .. } => vec![o("s3:PutObjectRetention", bucket, key)],
        E::GetObjectLegalHold { bucket, key, .. } => vec![o("s3:GetObjectLegalHold", bucket, key)],
        E::PutObjectLegalHold { bucket, key, .. } => vec![o("s3:PutObjectLegalHold", bucket, key)],
        E::GetBucketVersioning { bucket } => vec![b("s3:GetBucketVersioning", bucket)],
        E::PutBucketVersioning { bucket } => vec![b("s3:PutBucketVersioning", bucket)],
        E::ListObjectVersions { bucket, .. } => vec![b("s3:ListBucketVersions", bucket)],
        E::GetBucketEncryption { bucket } => vec![b("s3:GetEncryptionConfiguration", bucket)],
        // AWS has no DeleteBucketEncryption action: deleting the rule is putting none.
        E::PutBucketEncryption { bucket } | E::DeleteBucketEncryption { bucket } => {
            vec![b("s3:PutEncryptionConfiguration", bucket)]
        }
        E::GetBucketLifecycle { bucket } => vec![b("s3:GetLifecycleConfiguration", bucket)],
        // AWS has no DeleteLifecycleConfiguration action: deleting it is putting none.
        E::PutBucketLifecycle { bucket } | E::DeleteBucketLifecycle { bucket } => {
            vec![b("s3:PutLifecycleConfiguration", bucket)]
        }
        E::GetBucketCors { bucket } => vec![b("s3:GetBucketCORS", bucket)],
        // AWS has no DeleteBucketCORS action: deleting the configuration is putting none.
        E::PutBucketCors { bucket } | E::DeleteBucketCors { bucket } => {
            vec![b("s3:PutBucketCORS", bucket)]
        }
        E::GetBucketPolicy { bucket } => vec![b("s3:GetBucketPolicy", bucket)],
        E::PutBucketPolicy { bucket } => vec![b("s3:PutBucketPolicy", bucket)],
        E::DeleteBucketPolicy { bucket } => vec![b("s3:DeleteBucketPolicy", bucket)],
        E::GetBucketPolicyStatus { bucket } => vec![b("s3:GetBucketPolicyStatus", bucket)],
        E::ListMultipartUploads { bucket, .. } => vec![b("s3:ListBucketMultipartUploads", bucket)],
        E::AbortMultipartUpload { bucket, key, .. } => {
            vec![o("s3:AbortMultipartUpload", bucket, key)]
        }
        E::ListParts { bucket, key, .. } => vec![o("s3:ListMultipartUploadParts", bucket, key)],
        E::GetBucketAcl { bucket } => vec![b("s3:GetBucketAcl", bucket)],
        E::PutBucketAcl { bucket } => vec![b("s3:PutBucketAcl", bucket)],
        E::GetObjectAcl {
            bucket,
            key,
            version,
        } => vec![o(
            versioned("s3:GetObjectAcl", "s3:GetObjectVersionAcl", version),
            bucket,
            key,
        )],
        E::PutObjectAcl {
            bucket,
            key,
            version,
        } => vec![o(
            versioned("s3:PutObjectAcl", "s3:PutObjectVersionAcl", version),
            bucket,
            key,
        )],
        E::GetBucketOwnershipControls { bucket } => {
            vec![b("s3:GetBucketOwnershipControls", bucket)]
        }
        // AWS has no DeleteBucketOwnershipControls action: it is the Put's.
        E::PutBucketOwnershipControls { bucket } | E::DeleteBucketOwnershipControls { bucket } => {
            vec![b("s3:PutBucketOwnershipControls", bucket)]
        }
        E::GetPublicAccessBlock { bucket } => vec![b("s3:GetBucketPublicAccessBlock", bucket)],
        // AWS has no DeleteBucketPublicAccessBlock action: it is the Put's.
        E::PutPublicAccessBlock { bucket } | E::DeletePublicAccessBlock { bucket } => {
            vec![b("s3:PutBucketPublicAccessBlock", bucket)]
        }
        // Not implemented: answered NotImplemented once authorized. Its action is not in
        // `S3_ACTIONS`, so only a wildcard or the root user gets that far.
        E::Unsupported { .. } => vec![Need {
            action: "s3:Unsupported",
            resource: "*".to_owned(),
        }],
    })
}

/// Who signed a request, as far as authorization cares.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The root user (the server's own credentials): allowed everything, as the account owner
    /// (MinIO's root; AWS's root user may be locked out of a bucket by its policy, Quarry's is not
    /// so that a bad bucket policy can always be removed).
    Root,
    /// An IAM user, or a service account acting as its parent user.
    User(Arc<Identity>),
    /// An unsigned request: allowed only what a bucket policy grants `Principal: "*"`.
    Anonymous,
}

impl Caller {
    pub fn is_root(&self) -> bool {
        matches!(self, Caller::Root)
    }
}

/// The connection a request came on, as a request extension (set by the listener).
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    pub peer: std::net::SocketAddr,
    pub secure: bool,
}

/// The condition context of a request: the global `aws:` keys and the `s3:` keys of its
/// endpoint and headers (see the README's table).
pub fn context(endpoint: &Endpoint, parts: &Parts, caller: &Caller) -> Context {
    let mut ctx = Context::default();
    let now = time::OffsetDateTime::now_utc();
    if let Ok(t) = now.format(&time::format_description::well_known::Rfc3339) {
        ctx.set("aws:CurrentTime", t);
    }
    ctx.set("aws:EpochTime", now.unix_timestamp().to_string());
    let conn = parts.extensions.get::<ConnInfo>();
    if let Some(c) = conn {
        ctx.set("aws:SourceIp", c.peer.ip().to_string());
    }
    ctx.set(
        "aws:SecureTransport",
        if conn.is_some_and(|c| c.secure) {
            "true"
        } else {
            "false"
        },
    );
    match caller {
        Caller::Root => {
            ctx.set("aws:PrincipalType", "Account");
            ctx.set(
                "aws:PrincipalArn",
                format!("arn:aws:iam::{ACCOUNT_ID}:root"),
            );
        }
        Caller::User(id) => {
            ctx.set("aws:username", id.user.clone());
            ctx.set("aws:userid", id.user_id.clone());
            ctx.set("aws:PrincipalArn", id.arn.clone());
            ctx.set("aws:PrincipalType", "User");
        }
        Caller::Anonymous => ctx.set("aws:PrincipalType", "Anonymous"),
    }
    if !matches!(caller, Caller::Anonymous) {
        ctx.set("aws:PrincipalAccount", ACCOUNT_ID);
    }
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    for (key, name) in [("aws:UserAgent", "user-agent"), ("aws:Referer", "referer")] {
        if let Some(v) = header(name) {
            ctx.set(key, v);
        }
    }
    for name in [
        "x-amz-acl",
        "x-amz-copy-source",
        "x-amz-metadata-directive",
        "x-amz-server-side-encryption",
        "x-amz-storage-class",
        "x-amz-content-sha256",
        "x-amz-grant-read",
        "x-amz-grant-write",
        "x-amz-grant-read-acp",
        "x-amz-grant-write-acp",
        "x-amz-grant-full-control",
    ] {
        if let Some(v) = header(name) {
            ctx.set(&format!("s3:{name}"), v);
        }
    }
    if let Some(tags) = header("x-amz-tagging") {
        if let Ok(q) = crate::router::Query::parse(Some(tags)) {
            for (k, v) in q.iter() {
                ctx.set(&format!("s3:RequestObjectTag/{k}"), v);
                ctx.insert("s3:RequestObjectTagKeys", k);
            }
        }
    }
    let v2 = header("authorization").is_some_and(|v| v.starts_with("AWS "))
        || parts
            .uri
            .query()
            .is_some_and(|q| q.contains("AWSAccessKeyId="));
    if !matches!(caller, Caller::Anonymous) {
        ctx.set(
            "s3:signatureversion",
            if v2 { "AWS" } else { "AWS4-HMAC-SHA256" },
        );
    }
    if !matches!(caller, Caller::Anonymous) {
        ctx.set(
            "s3:authType",
            if parts.headers.contains_key(http::header::AUTHORIZATION) {
                "REST-HEADER"
            } else {
                "REST-QUERY-STRING"
            },
        );
    }
    let mut list = |prefix: &str, delimiter: &Option<String>, max_keys: usize| {
        ctx.set("s3:prefix", prefix);
        if let Some(d) = delimiter {
            ctx.set("s3:delimiter", d.clone());
        }
        ctx.set("s3:max-keys", max_keys.to_string());
    };
    match endpoint {
        Endpoint::ListObjects { params, .. } | Endpoint::ListObjectsV2 { params, .. } => {
            list(&params.prefix, &params.delimiter, params.max_keys)
        }
        Endpoint::ListObjectVersions { params, .. } => {
            list(&params.prefix, &params.delimiter, params.max_keys)
        }
        Endpoint::GetObject {
            version: Some(v), ..
        }
        | Endpoint::HeadObject {
            version: Some(v), ..
        }
        | Endpoint::DeleteObject {
            version: Some(v), ..
        } => {
            ctx.set("s3:VersionId", v.to_string());
        }
        _ => {}
    }
    ctx
}

/// The condition keys of an object's existing tags (`s3:ExistingObjectTag/<key>`).
pub const EXISTING_OBJECT_TAG: &str = "s3:ExistingObjectTag/";

/// The object version whose tags `s3:ExistingObjectTag/<key>` describes, for the requests AWS
/// gives that key to: reading the object (GetObject, HeadObject), its ACL or its tags, and
/// writing its ACL or its tags (each of a version too). `None` for every other request.
pub fn existing_tag_target(endpoint: &Endpoint) -> Option<(&str, &str, Option<VersionId>)> {
    use Endpoint as E;
    match endpoint {
        E::GetObject {
            bucket,
            key,
            version,
            ..
        }
        | E::HeadObject {
            bucket,
            key,
            version,
            ..
        }
        | E::GetObjectAcl {
            bucket,
            key,
            version,
        }
        | E::PutObjectAcl {
            bucket,
            key,
            version,
        }
        | E::GetObjectTagging {
            bucket,
            key,
            version,
        }
        | E::PutObjectTagging {
            bucket,
            key,
            version,
        }
        | E::DeleteObjectTagging {
            bucket,
            key,
            version,
        } => Some((bucket, key, *version)),
        _ => None,
    }
}

/// Whether a policy that decides this caller's requests reads `s3:ExistingObjectTag/...`: its
/// identity policies, the narrowing ones, or a bucket policy of the request. Only then is the
/// object's metadata read before the decision.
pub fn wants_existing_object_tags(caller: &Caller, bucket_policies: &BucketPolicies) -> bool {
    let uses = |p: &Policy| p.uses_condition_key_prefix(EXISTING_OBJECT_TAG);
    let identity = match caller {
        Caller::Root => return false,
        Caller::User(id) => id.policies.iter().chain(&id.narrowing).any(|p| uses(p)),
        Caller::Anonymous => false,
    };
    identity
        || bucket_policies
            .iter()
            .any(|(_, p)| p.as_deref().is_some_and(uses))
}

/// The bucket policies in force for a request: each bucket its needs name, with its policy
/// (if it has one). Loaded by the server before [`authorize`] (see `bucket_policy::PolicyCache`).
pub type BucketPolicies = Vec<(String, Option<Arc<Policy>>)>;

/// The buckets whose policies `needs` may be decided by, in order, without repeats.
pub fn buckets_of(needs: &[Need]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for need in needs {
        if let Some(b) = bucket_of_arn(&need.resource) {
            if !out.iter().any(|o| o == b) {
                out.push(b.to_owned());
            }
        }
    }
    out
}

/// The bucket of an S3 resource ARN (`arn:aws:s3:::bucket` or `arn:aws:s3:::bucket/key`).
fn bucket_of_arn(arn: &str) -> Option<&str> {
    let rest = arn.strip_prefix("arn:aws:s3:::")?;
    let bucket = rest.split('/').next().unwrap_or("");
    (!bucket.is_empty() && bucket != "*").then_some(bucket)
}

/// Allows or refuses a request: the one authorization decision, made from the endpoint's
/// needs and the policies of the buckets they name. A refusal is `AccessDenied` naming the
/// action and resource (never the policy).
///
/// As AWS decides within one account: an explicit `Deny` in the caller's policies or the
/// bucket's policy wins; else an `Allow` in either allows; else the request is denied. The root
/// user is allowed everything (so it can always repair a bucket policy); an anonymous caller
/// only what the bucket policy grants `Principal: "*"`.
pub fn authorize(
    caller: &Caller,
    needs: &[Need],
    ctx: &Context,
    bucket_policies: &BucketPolicies,
) -> Result<(), S3Error> {
    let principal = match caller {
        Caller::Root => return Ok(()),
        Caller::User(id) => Principal {
            anonymous: false,
            ids: vec![id.arn.clone()],
        },
        Caller::Anonymous => Principal {
            anonymous: true,
            ids: vec![],
        },
    };
    for need in needs {
        let bucket_policy = bucket_of_arn(&need.resource).and_then(|b| {
            bucket_policies
                .iter()
                .find(|(name, _)| name == b)
                .and_then(|(_, p)| p.as_deref())
        });
        let ok = match caller {
            Caller::Root => true,
            Caller::User(id) => allowed_with(
                id,
                &principal,
                need.action,
                &need.resource,
                ctx,
                bucket_policy,
            ),
            Caller::Anonymous => bucket_policy.is_some_and(|p| {
                let req = Request {
                    action: need.action,
                    resource: &need.resource,
                    principal: &principal,
                    context: ctx,
                };
                evaluate(&[], &[p], &req).is_allowed()
            }),
        };
        if !ok {
            return Err(denied_for(caller, need.action, &need.resource));
        }
    }
    Ok(())
}

/// The policies' decision on one need, for the ACL evaluation that follows a refusal
/// (`acl_eval.rs`): an explicit deny stays a refusal, an implicit one may still be allowed by an
/// ACL grant. The root user is always allowed.
pub fn decide(
    caller: &Caller,
    need: &Need,
    ctx: &Context,
    bucket_policies: &BucketPolicies,
) -> quarry_policy::Decision {
    let bucket_policy = bucket_of_arn(&need.resource).and_then(|b| {
        bucket_policies
            .iter()
            .find(|(name, _)| name == b)
            .and_then(|(_, p)| p.as_deref())
    });
    let resource_policies: Vec<&Policy> = bucket_policy.into_iter().collect();
    let (principal, identity, narrowing) = match caller {
        Caller::Root => return quarry_policy::Decision::Allow,
        Caller::User(id) => (
            Principal {
                anonymous: false,
                ids: vec![id.arn.clone()],
            },
            id.policies.iter().map(|p| p.as_ref()).collect(),
            id.narrowing.iter().map(|p| p.as_ref()).collect(),
        ),
        Caller::Anonymous => (
            Principal {
                anonymous: true,
                ids: vec![],
            },
            Vec::new(),
            Vec::new(),
        ),
    };
    let req = Request {
        action: need.action,
        resource: &need.resource,
        principal: &principal,
        context: ctx,
    };
    let decision = evaluate(&identity, &resource_policies, &req);
    if !decision.is_allowed() {
        return decision;
    }
    // A session's or service account's own policies narrow: each must allow it too.
    let narrowing: Vec<&Policy> = narrowing;
    narrowing
        .iter()
        .map(|p| evaluate(&[*p], &resource_policies, &req))
        .find(|d| !d.is_allowed())
        .unwrap_or(decision)
}

/// [`allowed`], with the bucket's policy beside the identity's: an explicit deny in either
/// refuses; an allow in either allows. A service account's own policy must allow it too.
pub fn allowed_with(
    id: &Identity,
    principal: &Principal,
    action: &str,
    resource: &str,
    ctx: &Context,
    bucket_policy: Option<&Policy>,
) -> bool {
    let req = Request {
        action,
        resource,
        principal,
        context: ctx,
    };
    let policies: Vec<&Policy> = id.policies.iter().map(|p| p.as_ref()).collect();
    let resource_policies: Vec<&Policy> = bucket_policy.into_iter().collect();
    if !evaluate(&policies, &resource_policies, &req).is_allowed() {
        return false;
    }
    id.narrowing
        .iter()
        .all(|p| evaluate(&[p.as_ref()], &resource_policies, &req).is_allowed())
}

/// Whether an identity may perform `action` on `resource`: its policies allow it and none
/// denies it; a service account's own policy must allow it too.
pub fn allowed(
    id: &Identity,
    principal: &Principal,
    action: &str,
    resource: &str,
    ctx: &Context,
) -> bool {
    allowed_with(id, principal, action, resource, ctx, None)
}

/// `AccessDenied` naming who, the action and the resource, as AWS words it (an anonymous caller
/// gets AWS's plain "Access Denied": it is told nothing about the bucket).
pub fn denied_for(caller: &Caller, action: &str, resource: &str) -> S3Error {
    let who = match caller {
        Caller::Root => format!("arn:aws:iam::{ACCOUNT_ID}:root"),
        Caller::User(id) => id.arn.clone(),
        Caller::Anonymous => return S3Error::from_code(S3ErrorCode::AccessDenied),
    };
    S3Error::new(
        S3ErrorCode::AccessDenied,
        format!("User: {who} is not authorized to perform: {action} on resource: \"{resource}\""),
    )
}

#[cfg(test)]
mod tests;
