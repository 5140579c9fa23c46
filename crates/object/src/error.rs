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
    /// A conditional write's condition did not hold.
    #[error("at least one of the preconditions you specified did not hold")]
    PreconditionFailed,
    #[error("not enough drives agree to read (have {have}, need {need})")]
    ReadQuorum { have: usize, need: usize },
    #[error("not enough drives accepted the write (have {have}, need {need})")]
    WriteQuorum { have: usize, need: usize },
    #[error("data is corrupt beyond what parity can repair: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Drive(#[from] DriveError),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
