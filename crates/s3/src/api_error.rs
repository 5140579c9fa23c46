//! The error a handler returns: an [`S3Error`] plus the few response headers some errors carry
//! (`Content-Range` on 416), and the mapping from object-layer errors to S3 codes.

use http::{HeaderName, HeaderValue};
use quarry_object::Error as ObjectError;

use crate::error::{S3Error, S3ErrorCode};
use crate::signature;

/// An S3 error on its way out of a handler.
#[derive(Debug)]
pub struct ApiError {
    pub error: S3Error,
    /// Extra response headers, e.g. `Content-Range: bytes */size` for `InvalidRange`.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: S3ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            error: S3Error::new(code, message),
            headers: Vec::new(),
        }
    }

    pub fn code(&self) -> S3ErrorCode {
        self.error.code
    }

    /// `InvalidArgument`: a header or parameter value S3 would refuse.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        ApiError::new(S3ErrorCode::InvalidArgument, message)
    }

    /// `NotImplemented` for a feature (`what`) Quarry refuses rather than ignores.
    pub fn not_implemented(what: &str) -> Self {
        ApiError::new(
            S3ErrorCode::NotImplemented,
            format!("{what} is not implemented by Quarry."),
        )
    }
}

impl From<S3Error> for ApiError {
    fn from(error: S3Error) -> Self {
        ApiError {
            error,
            headers: Vec::new(),
        }
    }
}

impl From<S3ErrorCode> for ApiError {
    fn from(code: S3ErrorCode) -> Self {
        S3Error::from_code(code).into()
    }
}

impl From<ObjectError> for ApiError {
    fn from(e: ObjectError) -> Self {
        object_error(e)
    }
}

/// `code` with `x-amz-delete-marker: true` and the marker's `x-amz-version-id`.
fn delete_marker_error(code: S3ErrorCode, version: quarry_object::VersionId) -> ApiError {
    let mut err = ApiError::from(code);
    err.headers.push((
        HeaderName::from_static("x-amz-delete-marker"),
        HeaderValue::from_static("true"),
    ));
    if let Ok(v) = HeaderValue::from_str(&version.to_string()) {
        err.headers
            .push((HeaderName::from_static("x-amz-version-id"), v));
    }
    err
}

/// Maps an object-layer error to the S3 error a client sees. Errors that are the server's fault
/// are logged here, once, with their cause; the client gets the generic message.
///
/// The match names every variant (no catch-all): a new object error does not compile until it is
/// given its S3 code here.
pub fn object_error(e: ObjectError) -> ApiError {
    use S3ErrorCode as C;
    match e {
        ObjectError::BucketNotFound => C::NoSuchBucket.into(),
        ObjectError::BucketExists => C::BucketAlreadyOwnedByYou.into(),
        ObjectError::BucketNotEmpty => C::BucketNotEmpty.into(),
        ObjectError::InvalidBucketName(why) => ApiError::new(
            C::InvalidBucketName,
            format!("{} ({why})", C::InvalidBucketName.default_message()),
        ),
        ObjectError::ObjectNotFound => C::NoSuchKey.into(),
        ObjectError::NoSuchVersion => C::NoSuchVersion.into(),
        ObjectError::InvalidVersionId(_) => {
            ApiError::new(C::InvalidArgument, "Invalid version id specified")
        }
        // S3 answers both with the marker's headers: what is there is a delete marker.
        ObjectError::ObjectLocked(why) => {
            ApiError::new(C::AccessDenied, format!("Access Denied because object protected by object lock: {why}."))
        }
        ObjectError::LatestIsDeleteMarker(v) => delete_marker_error(C::NoSuchKey, v),
        ObjectError::VersionIsDeleteMarker(v) => delete_marker_error(C::MethodNotAllowed, v),
        ObjectError::InvalidKey(why) => ApiError::new(
            C::InvalidArgument,
            format!("The object key is not valid: {why}."),
        ),
        ObjectError::KeyTooLong => C::KeyTooLongError.into(),
        ObjectError::InvalidRange { size } => {
            let mut err = ApiError::from(C::InvalidRange);
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                err.headers.push((http::header::CONTENT_RANGE, v));
            }
            err
        }
        ObjectError::BadDigest => C::BadDigest.into(),
        ObjectError::PreconditionFailed => C::PreconditionFailed.into(),
        ObjectError::IncompleteBody { expected, got } => ApiError::new(
            C::IncompleteBody,
            format!("The request body ended after {got} of the {expected} bytes declared."),
        ),
        ObjectError::EntityTooLarge { limit } => ApiError::new(
            C::EntityTooLarge,
            format!(
                "{} The limit is {limit} bytes.",
                C::EntityTooLarge.default_message()
            ),
        ),
        ObjectError::Body(io) => body_error(&io),
        ObjectError::ReadQuorum { have, need } => {
            tracing::warn!(have, need, "read quorum lost");
            ApiError::new(
                C::ServiceUnavailable,
                format!("Not enough drives are online to read this object ({have} of the {need} needed)."),
            )
        }
        ObjectError::WriteQuorum { have, need } => {
            tracing::warn!(have, need, "write quorum lost");
            ApiError::new(
                C::ServiceUnavailable,
                format!("Not enough drives accepted the write ({have} of the {need} needed)."),
            )
        }
        ObjectError::StorageFull { have, need } => {
            tracing::warn!(have, need, "write refused: drives are full");
            ApiError::new(
                C::XQuarryStorageFull,
                format!(
                    "The storage is full: only {have} of the {need} drives a write needs have free \
                     space. Delete objects or add capacity, then retry."
                ),
            )
        }
        ObjectError::NoSuchUpload => C::NoSuchUpload.into(),
        ObjectError::InvalidPart(why) => ApiError::new(
            C::InvalidPart,
            format!("{} ({why})", C::InvalidPart.default_message()),
        ),
        ObjectError::InvalidPartOrder => C::InvalidPartOrder.into(),
        ObjectError::EntityTooSmall { part, size, min } => ApiError::new(
            C::EntityTooSmall,
            format!(
                "{} Part {part} is {size} bytes; every part but the last must be at least {min} bytes.",
                C::EntityTooSmall.default_message()
            ),
        ),
        // S3 answers a part number beyond the object's parts with 400 InvalidPart (what
        // ceph/s3-tests checks against AWS), not 416 InvalidPartNumber.
        ObjectError::InvalidPartNumber { part, parts } => ApiError::new(
            C::InvalidPart,
            format!("Part {part} was asked for, but the object has {parts} part(s)."),
        ),
        ObjectError::LockTimeout {
            resource,
            waited,
            granted,
            need,
            nodes,
            unreachable,
        } => {
            tracing::warn!(%resource, ?waited, granted, need, nodes, unreachable, "lock not granted");
            if nodes - unreachable.min(nodes) < need {
                ApiError::new(
                    C::ServiceUnavailable,
                    format!(
                        "Too few nodes answer to lock this object ({} of the {need} needed); retry later.",
                        nodes - unreachable.min(nodes)
                    ),
                )
            } else {
                ApiError::new(
                    C::SlowDown,
                    format!(
                        "The object is locked by another request (waited {}s for it); retry later.",
                        waited.as_secs()
                    ),
                )
            }
        }
        ObjectError::KeyRequired => ApiError::new(
            C::InvalidRequest,
            "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object.",
        ),
        ObjectError::WrongKey => ApiError::new(
            C::InvalidArgument,
            "The provided encryption key does not match the key the object was stored with.",
        ),
        ObjectError::NotImplemented(what) => ApiError::new(
            C::NotImplemented,
            format!("{what} is not implemented by this server."),
        ),
        // The server's fault: logged with the cause, the client gets the generic message.
        ObjectError::Corrupt(_) | ObjectError::Drive(_) | ObjectError::Internal(_) => {
            tracing::error!(error = %e, "object layer error");
            C::InternalError.into()
        }
    }
}

/// The S3 error behind a failed request body: the verifier's own error (bad chunk signature,
/// checksum mismatch, ...) if it raised one, else the body was cut short.
pub fn body_error(io: &std::io::Error) -> ApiError {
    if let Some(e) = signature::s3_error_of(io) {
        return e.into();
    }
    match io.kind() {
        std::io::ErrorKind::UnexpectedEof
        | std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::ConnectionAborted
        | std::io::ErrorKind::BrokenPipe => ApiError::new(
            S3ErrorCode::IncompleteBody,
            format!("The request body could not be read completely: {io}."),
        ),
        _ => {
            tracing::warn!(error = %io, "reading the request body failed");
            ApiError::new(
                S3ErrorCode::IncompleteBody,
                format!("The request body could not be read: {io}."),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_errors_map_to_s3_codes() {
        use S3ErrorCode as C;
        let cases: Vec<(ObjectError, C)> = vec![
            (ObjectError::BucketNotFound, C::NoSuchBucket),
            (ObjectError::BucketExists, C::BucketAlreadyOwnedByYou),
            (ObjectError::BucketNotEmpty, C::BucketNotEmpty),
            (
                ObjectError::InvalidBucketName("x".into()),
                C::InvalidBucketName,
            ),
            (ObjectError::ObjectNotFound, C::NoSuchKey),
            (ObjectError::InvalidKey("..".into()), C::InvalidArgument),
            (ObjectError::KeyTooLong, C::KeyTooLongError),
            (ObjectError::BadDigest, C::BadDigest),
            (ObjectError::PreconditionFailed, C::PreconditionFailed),
            (
                ObjectError::IncompleteBody {
                    expected: 2,
                    got: 1,
                },
                C::IncompleteBody,
            ),
            (ObjectError::EntityTooLarge { limit: 1 }, C::EntityTooLarge),
            (
                ObjectError::ReadQuorum { have: 1, need: 2 },
                C::ServiceUnavailable,
            ),
            (
                ObjectError::WriteQuorum { have: 1, need: 3 },
                C::ServiceUnavailable,
            ),
            (
                ObjectError::StorageFull { have: 2, need: 3 },
                C::XQuarryStorageFull,
            ),
            (ObjectError::Corrupt("x".into()), C::InternalError),
            (ObjectError::NoSuchUpload, C::NoSuchUpload),
            (ObjectError::InvalidPart("x".into()), C::InvalidPart),
            (ObjectError::InvalidPartOrder, C::InvalidPartOrder),
            (
                ObjectError::EntityTooSmall {
                    part: 1,
                    size: 1,
                    min: 5,
                },
                C::EntityTooSmall,
            ),
            (
                ObjectError::InvalidPartNumber { part: 3, parts: 2 },
                C::InvalidPart,
            ),
            (
                ObjectError::LockTimeout {
                    resource: "b/k".into(),
                    waited: std::time::Duration::from_secs(30),
                    granted: 1,
                    need: 2,
                    nodes: 3,
                    unreachable: 0,
                },
                C::SlowDown,
            ),
            (
                ObjectError::LockTimeout {
                    resource: "b/k".into(),
                    waited: std::time::Duration::from_secs(30),
                    granted: 1,
                    need: 2,
                    nodes: 3,
                    unreachable: 2,
                },
                C::ServiceUnavailable,
            ),
            (ObjectError::NotImplemented("x"), C::NotImplemented),
            (ObjectError::Internal("x".into()), C::InternalError),
            (
                ObjectError::Body(std::io::ErrorKind::UnexpectedEof.into()),
                C::IncompleteBody,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(object_error(e).code(), code);
        }
    }

    #[test]
    fn storage_full_is_507_with_a_clear_message() {
        let e = object_error(ObjectError::StorageFull { have: 2, need: 3 });
        assert_eq!(e.code(), S3ErrorCode::XQuarryStorageFull);
        assert_eq!(e.code().code(), "XQuarryStorageFull");
        assert_eq!(e.error.code.status().as_u16(), 507);
        assert!(
            e.error.message.contains("2 of the 3 drives") && e.error.message.contains("full"),
            "{}",
            e.error.message
        );
    }

    #[test]
    fn invalid_range_carries_content_range() {
        let e = object_error(ObjectError::InvalidRange { size: 42 });
        assert_eq!(e.code(), S3ErrorCode::InvalidRange);
        assert_eq!(
            e.error.code.status(),
            http::StatusCode::RANGE_NOT_SATISFIABLE
        );
        assert_eq!(
            e.headers,
            vec![(
                http::header::CONTENT_RANGE,
                HeaderValue::from_static("bytes */42")
            )]
        );
    }
}
