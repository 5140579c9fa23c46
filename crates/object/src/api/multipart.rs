//! The types of the multipart-upload calls of [`crate::ObjectLayer`].

use std::collections::BTreeMap;
use std::sync::Arc;

use quarry_disk::multipart::MAX_PART_NUMBER;

use super::{Encryption, ObjectInfo, WritePrecondition};

/// The smallest size of every part but the last (5 MiB), as S3.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
/// The largest part (5 GiB), as S3.
pub const MAX_PART_SIZE: u64 = 5 * 1024 * 1024 * 1024;
/// The highest part number, as S3.
pub const MAX_PARTS: u32 = MAX_PART_NUMBER;

/// Options of CreateMultipartUpload: what the object will carry once completed.
#[derive(Debug, Clone, Default)]
pub struct NewUploadOptions {
    /// Standard headers, lower-case names (as [`crate::PutOptions::headers`]).
    pub headers: BTreeMap<String, String>,
    pub user_meta: BTreeMap<String, String>,
    /// The additional checksum algorithm every part carries, lower-case (e.g. "crc32").
    pub checksum_algorithm: Option<String>,
    /// Encrypt the object at rest: its record is kept with the upload (the key itself is not;
    /// every part opens it again with [`PartOptions::key`]). Each part is sealed with its own
    /// key derived from the object key (see `crate::sse`).
    pub encryption: Option<Encryption>,
}

/// Checks a part's request against its upload, given as an [`ObjectInfo`] of the upload's
/// bucket, key and encryption record (empty: the upload is not encrypted), and opens an
/// encrypted upload's object key. Its error is the part's answer.
#[derive(Clone)]
pub struct PartKeyOpener(pub Arc<OpenPartKey>);

/// See [`PartKeyOpener`].
pub type OpenPartKey =
    dyn Fn(&ObjectInfo) -> crate::Result<Option<quarry_crypt::ObjectKey>> + Send + Sync;

impl std::fmt::Debug for PartKeyOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PartKeyOpener(..)")
    }
}

/// An incremental checksum of a part's bytes, in one algorithm.
pub trait PartHasher: Send {
    fn update(&mut self, data: &[u8]);
    /// The checksum as S3 shows it (base64 of the big-endian digest).
    fn finish(self: Box<Self>) -> String;
}

/// Makes the [`PartHasher`] of an algorithm named as in [`NewUploadOptions::checksum_algorithm`];
/// `None` for an algorithm it does not know. The front end provides it: this layer knows which
/// algorithm an upload uses, the front end knows the algorithms.
#[derive(Clone)]
pub struct ChecksumHashers(pub Arc<MakeHasher>);

/// See [`ChecksumHashers`].
pub type MakeHasher = dyn Fn(&str) -> Option<Box<dyn PartHasher>> + Send + Sync;

impl std::fmt::Debug for ChecksumHashers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChecksumHashers(..)")
    }
}

/// Options of UploadPart.
#[derive(Debug, Clone, Default)]
pub struct PartOptions {
    /// The declared body length, when known.
    pub size: Option<u64>,
    /// Content-MD5 sent by the client; the part fails with `BadDigest` if the body differs.
    pub content_md5: Option<[u8; 16]>,
    /// Computes the part's checksum when the upload has a checksum algorithm (required then).
    pub hashers: Option<ChecksumHashers>,
    /// Opens the key of an encrypted upload (required for one: `KeyRequired` without it).
    pub key: Option<PartKeyOpener>,
}

/// A committed part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedPart {
    pub number: u32,
    pub size: u64,
    /// Hex MD5 of the part, without quotes.
    pub etag: String,
    /// Base64 checksum in the upload's algorithm, if it has one.
    pub checksum: Option<String>,
    /// The upload's checksum algorithm (as [`NewUploadOptions::checksum_algorithm`]).
    pub checksum_algorithm: Option<String>,
    pub mod_time_ns: i64,
}

/// One entry of a CompleteMultipartUpload request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletePart {
    pub number: u32,
    /// The part's ETag as the client sent it (quotes are ignored).
    pub etag: String,
    /// When given, the part's stored checksum must be this value.
    pub checksum: Option<String>,
}

/// Options of CompleteMultipartUpload.
#[derive(Debug, Clone, Default)]
pub struct CompleteOptions {
    /// Checksums of the whole object to store, by algorithm (e.g. the composite "crc32").
    pub checksums: BTreeMap<String, String>,
    /// `If-None-Match: *` / `If-Match`, evaluated under the object's lock at the commit.
    pub precondition: Option<WritePrecondition>,
    /// The bucket's default retention as of the completion (the entries of
    /// [`super::set_retention`]): the object takes them when its upload named no retention.
    pub lock_defaults: BTreeMap<String, String>,
}

/// An upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadInfo {
    pub bucket: String,
    pub key: String,
    pub upload_id: String,
    pub initiated_ns: i64,
    pub checksum_algorithm: Option<String>,
}

/// One page of ListParts.
#[derive(Debug, Clone, Default)]
pub struct ListPartsOptions {
    /// Exclusive: parts with a number above this one.
    pub part_number_marker: u32,
    /// 0 returns an empty page.
    pub max_parts: usize,
}

#[derive(Debug, Clone)]
pub struct ListPartsResult {
    pub upload: UploadInfo,
    pub parts: Vec<UploadedPart>,
    pub is_truncated: bool,
    /// The last part number of this page.
    pub next_part_number_marker: Option<u32>,
}

/// One page of ListMultipartUploads.
#[derive(Debug, Clone, Default)]
pub struct ListUploadsOptions {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub key_marker: Option<String>,
    /// Only with `key_marker`: uploads of that key after this one.
    pub upload_id_marker: Option<String>,
    /// 0 returns an empty page.
    pub max_uploads: usize,
}

#[derive(Debug, Clone, Default)]
pub struct ListUploadsResult {
    /// By key, then by initiation time.
    pub uploads: Vec<UploadInfo>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    pub next_key_marker: Option<String>,
    pub next_upload_id_marker: Option<String>,
}
