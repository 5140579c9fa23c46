use quarry_disk::DriveError;

/// Errors of the object layer. Each maps to exactly one S3 error code in the front end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the specified bucket does not exist")]
    BucketNotFound,
    #[error("the bucket already exists")]
    BucketExists,
    #[error("the bucket is not empty")]
    BucketNotEmpty,
    #[error("invalid bucket name: {0}")]
    InvalidBucketName(String),
    #[error("the specified key does not exist")]
    ObjectNotFound,
    /// A version id that names no version of the key.
    #[error("the specified version does not exist")]
    NoSuchVersion,
    /// A version id that is neither `null` nor one this store issues.
    #[error("invalid version id specified: {0:?}")]
    InvalidVersionId(String),
    /// The key's latest version is a delete marker (a GET or HEAD without version id): the key
    /// reads as absent, and the marker's id is shown.
    #[error("the specified key does not exist (its latest version is a delete marker)")]
    LatestIsDeleteMarker(crate::api::VersionId),
    /// The version named is a delete marker, which has no data to GET or HEAD.
    #[error("the specified version is a delete marker")]
    VersionIsDeleteMarker(crate::api::VersionId),
    #[error("invalid object key: {0}")]
    InvalidKey(String),
    #[error("object key is longer than 1024 bytes")]
    KeyTooLong,
    /// The requested range does not overlap the object.
    #[error("the requested range is not satisfiable (object size {size})")]
    InvalidRange { size: u64 },
    /// The body's MD5 is not the Content-MD5 the client sent.
    #[error("the Content-MD5 you specified did not match what we received")]
    BadDigest,
    /// The body ended before the declared Content-Length.
    #[error("the body ended after {got} of {expected} bytes")]
    IncompleteBody { expected: u64, got: u64 },
    /// The body is larger than the declared Content-Length, or than the size limit.
    #[error("the body is larger than {limit} bytes")]
    EntityTooLarge { limit: u64 },
    /// The request body stream failed; the inner error is what the front end's body reader
    /// raised (it may carry a typed error of its own, e.g. a bad chunk signature).
    #[error("reading the request body failed: {0}")]
    Body(std::io::Error),
    /// Object lock forbids the operation (a retained or legally held version, a retention that
    /// may not be shortened).
    #[error("object lock: {0}")]
    ObjectLocked(String),
    /// A conditional write's condition did not hold.
    #[error("at least one of the preconditions you specified did not hold")]
    PreconditionFailed,
    #[error("not enough drives agree to read (have {have}, need {need})")]
    ReadQuorum { have: usize, need: usize },
    #[error("not enough drives accepted the write (have {have}, need {need})")]
    WriteQuorum { have: usize, need: usize },
    /// A write lost its quorum because drives are full: it would have reached `need` drives had
    /// they had space.
    #[error("not enough drives have free space for the write (have {have}, need {need})")]
    StorageFull { have: usize, need: usize },
    #[error("data is corrupt beyond what parity can repair: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Drive(#[from] DriveError),
    /// The multipart upload id names no upload of this key (never created, completed or aborted).
    #[error("the specified multipart upload does not exist")]
    NoSuchUpload,
    /// A part named in CompleteMultipartUpload was not uploaded, or its ETag (or checksum) differs.
    #[error("invalid part: {0}")]
    InvalidPart(String),
    /// The parts of CompleteMultipartUpload are not in ascending order of part number.
    #[error("the list of parts was not in ascending order")]
    InvalidPartOrder,
    /// A part other than the last is smaller than the minimum part size.
    #[error("part {part} is {size} bytes, smaller than the minimum of {min} bytes")]
    EntityTooSmall { part: u32, size: u64, min: u64 },
    /// A part number outside the object's parts (1..=parts) or outside 1..=10000.
    #[error("part number {part} is not valid (the object has {parts} parts)")]
    InvalidPartNumber { part: u32, parts: usize },
    /// The lock on an object (or upload, or part) was not granted in time: another request
    /// holds it, or fewer than `need` of the set's `nodes` answered.
    #[error(
        "could not lock {resource} within {waited:?}: the last attempt got {granted} of the {need} \
         grants needed from {nodes} nodes ({unreachable} unreachable)"
    )]
    LockTimeout {
        resource: String,
        waited: std::time::Duration,
        /// Grants of the last attempt.
        granted: usize,
        need: usize,
        nodes: usize,
        /// Nodes that did not answer the last attempt (down, or timed out).
        unreachable: usize,
    },
    /// The object is encrypted and the read gave no way to open its key (a plain GET of an
    /// encrypted object; an SSE-C object read without its key).
    #[error("the object is encrypted; its key must be given to read it")]
    KeyRequired,
    /// The key given does not open the object's sealed key (a wrong SSE-C key).
    #[error("the key given does not open this object")]
    WrongKey,
    /// The operation is not implemented by this object layer.
    #[error("{0} is not implemented")]
    NotImplemented(&'static str),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
