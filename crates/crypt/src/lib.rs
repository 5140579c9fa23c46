//! Encryption at rest: the format objects are stored in and the keys that open them.
//!
//! - [`package`]: the package format. An object (each part of a multipart object on its own) is
//!   cut into packages of [`PACKAGE_SIZE`] plaintext bytes, each sealed with AES-256-GCM under a
//!   key of that part; the nonce is the package's sequence number and a final-package flag, so a
//!   package cannot be reordered, dropped, truncated away or moved to another object or part
//!   without failing authentication. [`Encryptor`] and [`Decryptor`] stream over buffers of any
//!   size (never a whole object); [`PackageRange`] maps a plaintext range to the packages that
//!   hold it.
//! - [`keys`]: an [`ObjectKey`] per object (random), the per-part keys derived from it, and the
//!   sealing of object keys ([`SealedKey`]) under a key-encryption key derived from a master key
//!   or from an SSE-C customer key ([`CustomerKey`]).
//! - [`kms`]: the key service trait ([`Kms`]: generate a sealed data key, unseal it, re-seal it
//!   under another master key) and the built-in one ([`LocalKms`]: named 256-bit master keys from
//!   `QUARRY_KMS_SECRET_KEY` or a key file).
//!
//! Not here: which requests use which key (the S3 front end), where the sealed key is recorded
//! (the object layer's metadata), any IO. The cipher is aws-lc-rs's; nothing here implements a
//! cipher.

pub mod keys;
pub mod kms;
pub mod package;

pub use keys::{CustomerKey, ObjectKey, PartKey, SealedKey};
pub use kms::{Kms, LocalKms};
pub use package::{
    decrypted_size, encrypted_size, Decryptor, Encryptor, PackageRange, ALGORITHM, PACKAGE_SIZE,
    SEALED_PACKAGE_SIZE, TAG_LEN,
};

/// What can go wrong opening or sealing data.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CryptError {
    /// A package failed authentication: the bytes were changed, reordered, truncated or come
    /// from another object or part, or the key is not the one they were sealed with.
    #[error("package {seq} failed authentication (tampered, misplaced or wrong key)")]
    Tampered { seq: u64 },
    /// The encrypted stream ended before the packages the range needs.
    #[error("encrypted data ends early: {missing} bytes missing")]
    Truncated { missing: u64 },
    /// More encrypted bytes arrived than the range holds.
    #[error("encrypted data is longer than expected")]
    TooLong,
    /// A size that no encryption of any plaintext produces.
    #[error("{0} is not the size of an encrypted object")]
    BadSize(u64),
    /// A sealed key could not be opened: wrong key, wrong context, or damaged.
    #[error("the sealed key does not open with key {key_id:?} in this context")]
    Unseal { key_id: String },
    /// A sealed key's encoding is not one this build reads.
    #[error("sealed key: {0}")]
    BadSealedKey(String),
    /// An SSE-C key header that is not 32 bytes of base64, or whose MD5 is not the one given.
    #[error("customer key: {0}")]
    BadCustomerKey(&'static str),
    /// The key service has no master key of this name.
    #[error("no master key named {0:?}")]
    NoSuchKey(String),
    /// The key service configuration is unusable (the message says why; it never holds key bytes).
    #[error("key service: {0}")]
    Config(String),
    /// Data handed over in pieces the format does not allow (a caller's mistake).
    #[error("misuse: {0}")]
    Misuse(&'static str),
    /// The system random generator or the cipher refused (not expected on a working host).
    #[error("crypto backend failure")]
    Backend,
}

pub type Result<T, E = CryptError> = std::result::Result<T, E>;
