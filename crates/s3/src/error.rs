//! S3 errors: the code, HTTP status and message a client sees, rendered as S3 XML.

use http::StatusCode;

/// The S3 error codes Quarry returns. `code()` is the exact string of the `<Code>` element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3ErrorCode {
    AccessDenied,
    /// A CORS preflight the bucket's CORS configuration does not allow (403).
    AccessForbidden,
    /// An ACL other than the owner's full control on a bucket whose ObjectOwnership is
    /// BucketOwnerEnforced (ACLs are off there).
    AccessControlListNotSupported,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    BadDigest,
    /// A request S3 cannot make sense of, e.g. a CORS preflight without an `Origin` (400).
    BadRequest,
    BucketAlreadyExists,
    BucketAlreadyOwnedByYou,
    BucketNotEmpty,
    EntityTooLarge,
    EntityTooSmall,
    ExpiredToken,
    IllegalLocationConstraintException,
    IncompleteBody,
    /// A browser POST upload without exactly one `file` field.
    IncorrectNumberOfFilesInPostRequest,
    InternalError,
    InvalidAccessKeyId,
    InvalidArgument,
    /// CreateBucket with a non-private ACL and ObjectOwnership BucketOwnerEnforced.
    InvalidBucketAclWithObjectOwnership,
    InvalidBucketName,
    InvalidBucketState,
    InvalidDigest,
    InvalidPart,
    InvalidPartNumber,
    InvalidPartOrder,
    /// The `policy` of a browser POST upload is not a valid policy document.
    InvalidPolicyDocument,
    InvalidRange,
    InvalidRequest,
    InvalidRetentionPeriod,
    InvalidStorageClass,
    InvalidTag,
    InvalidToken,
    InvalidURI,
    KeyTooLongError,
    /// The body of a browser POST upload is not well-formed multipart/form-data.
    MalformedPOSTRequest,
    /// A bucket policy that does not parse or does not fit its bucket.
    MalformedPolicy,
    MalformedXML,
    /// The fields before the file of a browser POST upload are too large.
    MaxPostPreDataLengthExceededError,
    MetadataTooLarge,
    MethodNotAllowed,
    MissingContentLength,
    MissingSecurityHeader,
    NoSuchBucket,
    NoSuchBucketPolicy,
    NoSuchCORSConfiguration,
    NoSuchKey,
    NoSuchLifecycleConfiguration,
    NoSuchObjectLockConfiguration,
    NoSuchPublicAccessBlockConfiguration,
    NoSuchTagSet,
    NoSuchUpload,
    NoSuchVersion,
    NotImplemented,
    NotModified,
    ObjectLockConfigurationNotFoundError,
    OwnershipControlsNotFoundError,
    PreconditionFailed,
    /// A request body stalled: nothing, or too little, arrived within the body timeout.
    RequestTimeout,
    RequestTimeTooSkewed,
    /// GetBucketEncryption of a bucket without a default encryption rule.
    ServerSideEncryptionConfigurationNotFoundError,
    ServiceUnavailable,
    SignatureDoesNotMatch,
    SlowDown,
    /// An ACL grant by e-mail address (AWS resolves none any more).
    UnresolvableGrantByEmailAddress,
    XAmzContentSHA256Mismatch,
    /// Quarry's own (AWS has no such error; MinIO sends `XMinioStorageFull`): a write lost its
    /// quorum because drives are full. 507 Insufficient Storage.
    XQuarryStorageFull,
}

impl S3ErrorCode {
    pub fn code(self) -> &'static str {
        use S3ErrorCode::*;
        match self {
            AccessDenied => "AccessDenied",
            AccessForbidden => "AccessForbidden",
            AccessControlListNotSupported => "AccessControlListNotSupported",
            InvalidBucketAclWithObjectOwnership => "InvalidBucketAclWithObjectOwnership",
            NoSuchPublicAccessBlockConfiguration => "NoSuchPublicAccessBlockConfiguration",
            OwnershipControlsNotFoundError => "OwnershipControlsNotFoundError",
            UnresolvableGrantByEmailAddress => "UnresolvableGrantByEmailAddress",
            AuthorizationHeaderMalformed => "AuthorizationHeaderMalformed",
            AuthorizationQueryParametersError => "AuthorizationQueryParametersError",
            BadDigest => "BadDigest",
            BadRequest => "BadRequest",
            BucketAlreadyExists => "BucketAlreadyExists",
            BucketAlreadyOwnedByYou => "BucketAlreadyOwnedByYou",
            BucketNotEmpty => "BucketNotEmpty",
            EntityTooLarge => "EntityTooLarge",
            EntityTooSmall => "EntityTooSmall",
            ExpiredToken => "ExpiredToken",
            IllegalLocationConstraintException => "IllegalLocationConstraintException",
            IncompleteBody => "IncompleteBody",
            IncorrectNumberOfFilesInPostRequest => "IncorrectNumberOfFilesInPostRequest",
            InternalError => "InternalError",
            InvalidAccessKeyId => "InvalidAccessKeyId",
            InvalidArgument => "InvalidArgument",
            InvalidBucketName => "InvalidBucketName",
            InvalidBucketState => "InvalidBucketState",
            InvalidDigest => "InvalidDigest",
            InvalidPart => "InvalidPart",
            InvalidPartNumber => "InvalidPartNumber",
            InvalidPartOrder => "InvalidPartOrder",
            InvalidPolicyDocument => "InvalidPolicyDocument",
            InvalidRange => "InvalidRange",
            InvalidRequest => "InvalidRequest",
            InvalidRetentionPeriod => "InvalidRetentionPeriod",
            InvalidStorageClass => "InvalidStorageClass",
            InvalidTag => "InvalidTag",
            InvalidToken => "InvalidToken",
            InvalidURI => "InvalidURI",
            KeyTooLongError => "KeyTooLongError",
            MalformedPOSTRequest => "MalformedPOSTRequest",
            MalformedPolicy => "MalformedPolicy",
            MalformedXML => "MalformedXML",
            MaxPostPreDataLengthExceededError => "MaxPostPreDataLengthExceededError",
            MetadataTooLarge => "MetadataTooLarge",
            MethodNotAllowed => "MethodNotAllowed",
            MissingContentLength => "MissingContentLength",
            MissingSecurityHeader => "MissingSecurityHeader",
            NoSuchBucket => "NoSuchBucket",
            NoSuchBucketPolicy => "NoSuchBucketPolicy",
            NoSuchCORSConfiguration => "NoSuchCORSConfiguration",
            ServerSideEncryptionConfigurationNotFoundError => {
                "ServerSideEncryptionConfigurationNotFoundError"
            }
            NoSuchKey => "NoSuchKey",
            NoSuchLifecycleConfiguration => "NoSuchLifecycleConfiguration",
            NoSuchObjectLockConfiguration => "NoSuchObjectLockConfiguration",
            NoSuchTagSet => "NoSuchTagSet",
            NoSuchUpload => "NoSuchUpload",
            NoSuchVersion => "NoSuchVersion",
            NotImplemented => "NotImplemented",
            NotModified => "NotModified",
            ObjectLockConfigurationNotFoundError => "ObjectLockConfigurationNotFoundError",
            PreconditionFailed => "PreconditionFailed",
            RequestTimeout => "RequestTimeout",
            RequestTimeTooSkewed => "RequestTimeTooSkewed",
            ServiceUnavailable => "ServiceUnavailable",
            SignatureDoesNotMatch => "SignatureDoesNotMatch",
            SlowDown => "SlowDown",
            XAmzContentSHA256Mismatch => "XAmzContentSHA256Mismatch",
            XQuarryStorageFull => "XQuarryStorageFull",
        }
    }

    pub fn status(self) -> StatusCode {
        use S3ErrorCode::*;
        match self {
            AccessDenied
            | AccessForbidden
            | InvalidAccessKeyId
            | SignatureDoesNotMatch
            | RequestTimeTooSkewed => StatusCode::FORBIDDEN,
            ExpiredToken | InvalidToken => StatusCode::BAD_REQUEST,
            BucketAlreadyExists | BucketAlreadyOwnedByYou | BucketNotEmpty | InvalidBucketState => {
                StatusCode::CONFLICT
            }
            NoSuchBucket
            | NoSuchBucketPolicy
            | NoSuchCORSConfiguration
            | NoSuchKey
            | NoSuchLifecycleConfiguration
            | NoSuchObjectLockConfiguration
            | ObjectLockConfigurationNotFoundError
            | NoSuchPublicAccessBlockConfiguration
            | OwnershipControlsNotFoundError
            | NoSuchTagSet
            | NoSuchUpload
            | NoSuchVersion
            | ServerSideEncryptionConfigurationNotFoundError => StatusCode::NOT_FOUND,
            InvalidRange | InvalidPartNumber => StatusCode::RANGE_NOT_SATISFIABLE,
            MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            MissingContentLength => StatusCode::LENGTH_REQUIRED,
            NotImplemented => StatusCode::NOT_IMPLEMENTED,
            NotModified => StatusCode::NOT_MODIFIED,
            PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            ServiceUnavailable | SlowDown => StatusCode::SERVICE_UNAVAILABLE,
            XQuarryStorageFull => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The message S3 sends for this code when there is nothing more specific to say.
    pub fn default_message(self) -> &'static str {
        use S3ErrorCode::*;
        match self {
            AccessDenied => "Access Denied.",
            AccessForbidden => "CORSResponse: This CORS request is not allowed.",
            AccessControlListNotSupported => "The bucket does not allow ACLs",
            InvalidBucketAclWithObjectOwnership => {
                "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"
            }
            NoSuchPublicAccessBlockConfiguration => {
                "The public access block configuration was not found"
            }
            OwnershipControlsNotFoundError => "The bucket ownership controls were not found",
            UnresolvableGrantByEmailAddress => {
                "The e-mail address you provided does not match any account on record."
            }
            AuthorizationHeaderMalformed => "The authorization header is malformed.",
            AuthorizationQueryParametersError => "The authorization query parameters are malformed.",
            BadDigest => "The Content-MD5 you specified did not match what we received.",
            BadRequest => "Bad request.",
            BucketAlreadyExists => "The requested bucket name is not available.",
            BucketAlreadyOwnedByYou => {
                "Your previous request to create the named bucket succeeded and you already own it."
            }
            BucketNotEmpty => "The bucket you tried to delete is not empty.",
            EntityTooLarge => "Your proposed upload exceeds the maximum allowed object size.",
            EntityTooSmall => "Your proposed upload is smaller than the minimum allowed object size.",
            ExpiredToken => "The provided token has expired.",
            IllegalLocationConstraintException => {
                "The location constraint is incompatible with the region of this endpoint."
            }
            IncompleteBody => "You did not provide the number of bytes specified by the Content-Length HTTP header.",
            IncorrectNumberOfFilesInPostRequest => "POST requires exactly one file upload per request.",
            InternalError => "We encountered an internal error. Please try again.",
            InvalidAccessKeyId => "The AWS access key ID you provided does not exist in our records.",
            InvalidArgument => "Invalid argument.",
            InvalidBucketName => "The specified bucket is not valid.",
            InvalidBucketState => "The request is not valid with the current state of the bucket.",
            InvalidDigest => "The Content-MD5 you specified is not valid.",
            InvalidPart => "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
            InvalidPartNumber => "The requested partnumber is not satisfiable.",
            InvalidPartOrder => "The list of parts was not in ascending order. The parts list must be specified in order by part number.",
            InvalidPolicyDocument => "The content of the form does not meet the conditions specified in the policy document.",
            InvalidRange => "The requested range is not satisfiable.",
            InvalidRequest => "Invalid request.",
            InvalidRetentionPeriod => "The retention period is not valid.",
            InvalidStorageClass => "The storage class you specified is not valid.",
            InvalidTag => "The tag provided was not a valid tag.",
            InvalidToken => "The provided token is malformed or otherwise invalid.",
            InvalidURI => "Couldn't parse the specified URI.",
            KeyTooLongError => "Your key is too long.",
            MetadataTooLarge => {
                "Your metadata headers exceed the maximum allowed metadata size (2 KB)."
            }
            MalformedPolicy => "Policies must be valid JSON and the first byte must be '{'",
            MalformedPOSTRequest => "The body of your POST request is not well-formed multipart/form-data.",
            MaxPostPreDataLengthExceededError => "Your POST request fields preceding the upload file were too large.",
            MalformedXML => "The XML you provided was not well-formed or did not validate against our published schema.",
            MethodNotAllowed => "The specified method is not allowed against this resource.",
            MissingContentLength => "You must provide the Content-Length HTTP header.",
            MissingSecurityHeader => "Your request is missing a required header.",
            NoSuchBucket => "The specified bucket does not exist.",
            NoSuchBucketPolicy => "The bucket policy does not exist",
            NoSuchCORSConfiguration => "The CORS configuration does not exist",
            ServerSideEncryptionConfigurationNotFoundError => {
                "The server side encryption configuration was not found"
            }
            NoSuchKey => "The specified key does not exist.",
            NoSuchLifecycleConfiguration => "The lifecycle configuration does not exist.",
            NoSuchObjectLockConfiguration => "The specified object does not have a ObjectLock configuration.",
            NoSuchTagSet => "The TagSet does not exist.",
            NoSuchUpload => "The specified multipart upload does not exist. The upload ID might not be valid, or the multipart upload might have been aborted or completed.",
            NoSuchVersion => "The specified version does not exist.",
            NotImplemented => "A header or query you provided implies functionality that is not implemented.",
            NotModified => "Not Modified.",
            ObjectLockConfigurationNotFoundError => "Object Lock configuration does not exist for this bucket.",
            PreconditionFailed => "At least one of the preconditions you specified did not hold.",
            RequestTimeout => "Your socket connection to the server was not read from or written to within the timeout period.",
            RequestTimeTooSkewed => "The difference between the request time and the server's time is too large.",
            ServiceUnavailable => "Reduce your request rate.",
            SignatureDoesNotMatch => "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
            SlowDown => "Reduce your request rate.",
            XAmzContentSHA256Mismatch => "The provided 'x-amz-content-sha256' header does not match what was computed.",
            XQuarryStorageFull => "The storage is full: not enough drives have free space for this write. Delete objects or add capacity.",
        }
    }
}

/// An S3 error on its way to the client. The request id and resource are filled in by the
/// front end when it renders the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Error {
    pub code: S3ErrorCode,
    pub message: String,
    /// The region the request should have been signed for, sent as `<Region>` when a signature's
    /// credential scope names another one (as S3 does; clients such as s3cmd read it and retry).
    pub region: Option<String>,
    /// The `x-amz-*` header a signature left uncovered, sent as `<HeadersNotSigned>` with
    /// AccessDenied (as S3 does).
    pub headers_not_signed: Option<String>,
}

impl S3Error {
    pub fn new(code: S3ErrorCode, message: impl Into<String>) -> Self {
        S3Error {
            code,
            message: message.into(),
            region: None,
            headers_not_signed: None,
        }
    }

    /// The error with a `<Region>` element naming the region the request must be signed for.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// The error with a `<HeadersNotSigned>` element naming a header the signature did not cover.
    pub fn with_headers_not_signed(mut self, name: impl Into<String>) -> Self {
        self.headers_not_signed = Some(name.into());
        self
    }

    /// The error with S3's standard message for its code.
    pub fn from_code(code: S3ErrorCode) -> Self {
        S3Error {
            code,
            message: code.default_message().to_string(),
            region: None,
            headers_not_signed: None,
        }
    }
}

impl From<S3ErrorCode> for S3Error {
    fn from(code: S3ErrorCode) -> Self {
        S3Error::from_code(code)
    }
}

impl std::fmt::Display for S3Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.code(), self.message)
    }
}

impl std::error::Error for S3Error {}

/// Renders the S3 XML error document.
pub fn error_xml(err: &S3Error, resource: &str, request_id: &str) -> String {
    let region = err
        .region
        .as_deref()
        .map(|r| format!("<Region>{}</Region>", xml_escape(r)))
        .unwrap_or_default();
    let not_signed = err
        .headers_not_signed
        .as_deref()
        .map(|h| format!("<HeadersNotSigned>{}</HeadersNotSigned>", xml_escape(h)))
        .unwrap_or_default();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message>{region}{not_signed}<Resource>{}</Resource><RequestId>{}</RequestId></Error>",
        err.code.code(),
        xml_escape(&err.message),
        xml_escape(resource),
        xml_escape(request_id)
    )
}

/// Escapes text for an XML element or attribute.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}
