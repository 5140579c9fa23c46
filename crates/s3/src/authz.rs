//! Authorization: the IAM action and resource every endpoint needs, and the one place where a
//! request is allowed or refused — [`authorize`], called once per request by
//! `server::dispatch`, after the signature checked out and before the handler runs.
//!
//! The action map follows AWS's names (the "Actions defined by Amazon S3" table): a HEAD is the
//! GET of the same thing, a read or delete of a specific version is the `...Version` action,
//! every multipart step but abort and listing is `s3:PutObject`, a copy needs `s3:PutObject` on
//! the target and `s3:GetObject` (or `s3:GetObjectVersion`) on the source. DeleteObjects is
//! decided per key by its handler through the same evaluation ([`DELETE_OBJECTS_KEY_ACTIONS`]).

use http::HeaderMap;

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
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:GetBucketAcl",
    "s3:GetBucketCORS",
    "s3:GetBucketLocation",
    "s3:GetBucketVersioning",
    "s3:GetObject",
    "s3:GetObjectAcl",
    "s3:GetObjectAttributes",
    "s3:GetObjectVersion",
    "s3:GetObjectVersionAcl",
    "s3:GetObjectVersionAttributes",
    "s3:ListAllMyBuckets",
    "s3:ListBucket",
    "s3:ListBucketMultipartUploads",
    "s3:ListBucketVersions",
    "s3:ListMultipartUploadParts",
    "s3:PutBucketAcl",
    "s3:PutBucketCORS",
    "s3:PutBucketVersioning",
    "s3:PutObject",
    "s3:PutObjectAcl",
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
        E::HealthLive | E::HealthReady | E::Metrics | E::CorsPreflight { .. } | E::Admin { .. } => {
            vec![]
        }
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
        E::PostObject { bucket } => vec![b("s3:PutObject", bucket)],
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
        E::GetObjectAttributes { bucket, key } => vec![o("s3:GetObjectAttributes", bucket, key)],
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
        E::GetBucketVersioning { bucket } => vec![b("s3:GetBucketVersioning", bucket)],
        E::PutBucketVersioning { bucket } => vec![b("s3:PutBucketVersioning", bucket)],
        E::ListObjectVersions { bucket, .. } => vec![b("s3:ListBucketVersions", bucket)],
        E::GetBucketCors { bucket } => vec![b("s3:GetBucketCORS", bucket)],
        // AWS has no DeleteBucketCORS action: deleting the configuration is putting none.
        E::PutBucketCors { bucket } | E::DeleteBucketCors { bucket } => {
            vec![b("s3:PutBucketCORS", bucket)]
        }
        E::ListMultipartUploads { bucket, .. } => vec![b("s3:ListBucketMultipartUploads", bucket)],
        E::AbortMultipartUpload { bucket, key, .. } => {
            vec![o("s3:AbortMultipartUpload", bucket, key)]
        }
        E::ListParts { bucket, key, .. } => vec![o("s3:ListMultipartUploadParts", bucket, key)],
        E::GetBucketAcl { bucket } => vec![b("s3:GetBucketAcl", bucket)],
        E::PutBucketAcl { bucket } => vec![b("s3:PutBucketAcl", bucket)],
        E::GetObjectAcl { bucket, key } => vec![o("s3:GetObjectAcl", bucket, key)],
        E::PutObjectAcl { bucket, key } => vec![o("s3:PutObjectAcl", bucket, key)],
        // Not implemented: answered NotImplemented once authorized. Its action is not in
        // `S3_ACTIONS`, so only a wildcard or the root user gets that far.
        E::Unsupported { .. } => vec![Need {
            action: "s3:Unsupported",
            resource: "*".to_owned(),
        }],
    })
}

/// Who signed a request, as far as authorization cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The root user (the server's own credentials): allowed everything, as the account owner
    /// (MinIO's root; AWS's root user may be locked out of a bucket by its policy, Quarry's is not
    /// so that a bad bucket policy can always be removed).
    Root,
}

/// Allows or refuses a request: the one authorization decision, made from the endpoint's
/// needs. A refusal is `AccessDenied` naming the action and resource (never the policy).
pub fn authorize(caller: &Caller, needs: &[Need]) -> Result<(), S3Error> {
    match caller {
        Caller::Root => {
            let _ = needs;
            Ok(())
        }
    }
}

/// `AccessDenied` for an action on a resource.
pub fn denied(action: &str, resource: &str) -> S3Error {
    S3Error::new(
        S3ErrorCode::AccessDenied,
        format!("Access Denied: not authorized to perform {action} on {resource}."),
    )
}

#[cfg(test)]
mod tests;
