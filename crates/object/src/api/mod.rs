//! The interface the S3 front end calls, [`ObjectLayer`], and every type it carries (the
//! implementation modules import them from here, never the other way).

use std::collections::BTreeMap;
use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

use crate::error::Result;

mod cluster;
mod heal;
mod multipart;
mod protect;
mod versioning;

pub use cluster::*;
pub use heal::*;
pub use multipart::*;
pub use protect::*;
pub use versioning::*;

/// A request body as it arrives: chunks of bytes, or an I/O error from the front end's decoder
/// (signature checks, checksum trailers). An error aborts the write; nothing is committed.
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// An object body on its way out. An error mid-stream aborts the response.
pub type ObjectStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketInfo {
    pub name: String,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectInfo {
    pub bucket: String,
    pub key: String,
    pub size: u64,
    /// Nanoseconds since the Unix epoch.
    pub mod_time_ns: i64,
    /// Hex, without quotes.
    pub etag: String,
    /// Lower-case standard header names (content-type, cache-control, ...) to values.
    pub headers: BTreeMap<String, String>,
    /// User metadata without the `x-amz-meta-` prefix.
    pub user_meta: BTreeMap<String, String>,
    pub checksums: BTreeMap<String, String>,
    pub parts: usize,
    /// The version this is (`Null` in a bucket that never had versioning).
    pub version_id: VersionId,
    /// A delete marker (only ListObjectVersions and DELETE report these).
    pub delete_marker: bool,
    /// The key's latest version (set by ListObjectVersions; true elsewhere).
    pub is_latest: bool,
    /// How the data is encrypted at rest: the front end's record (see [`Encryption::record`]);
    /// empty for an object stored in clear. `size` is the plaintext size either way.
    pub encryption: BTreeMap<String, String>,
}

impl ObjectInfo {
    /// Whether the object's data is encrypted at rest.
    pub fn is_encrypted(&self) -> bool {
        !self.encryption.is_empty()
    }
}

/// Encryption at rest of a new object (see `crate::sse`): its data is sealed in packages
/// (crates/crypt) before erasure coding, so shards and bitrot hashes cover ciphertext.
#[derive(Clone)]
pub struct Encryption {
    /// The object's own key; its parts' packages are sealed with keys derived from it.
    pub key: quarry_crypt::ObjectKey,
    /// What the front end needs to open `key` again (the sealed key, the kind of encryption,
    /// the key id...): names of `[a-z0-9-]`, stored with the version as reserved entries and
    /// given back in [`ObjectInfo::encryption`]. Never the key itself.
    pub record: BTreeMap<String, String>,
    /// The ETag is the MD5 of the plaintext (SSE-S3, as AWS); otherwise a value derived from
    /// that MD5 and the object key, which says nothing about the plaintext (SSE-C, SSE-KMS).
    pub etag_is_md5: bool,
}

impl std::fmt::Debug for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encryption")
            .field("record", &self.record)
            .field("etag_is_md5", &self.etag_is_md5)
            .finish_non_exhaustive()
    }
}

/// Opens the key of an encrypted object for a read, from its info (its
/// [`ObjectInfo::encryption`] record): the front end's policy (an SSE-C key from the request,
/// the key service for SSE-S3 and SSE-KMS). Its error is the read's answer.
pub type KeyOpener =
    std::sync::Arc<dyn Fn(&ObjectInfo) -> Result<quarry_crypt::ObjectKey> + Send + Sync>;

/// One part of a stored object: its number and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectPart {
    pub number: u32,
    pub size: u64,
}

/// A byte range as the client asked for it (HTTP `Range: bytes=...`), before it is resolved
/// against the object's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpRange {
    /// `bytes=first-last`, inclusive.
    FromTo(u64, u64),
    /// `bytes=first-`.
    From(u64),
    /// `bytes=-n`: the last n bytes.
    Suffix(u64),
}

impl HttpRange {
    /// Resolves the range against an object of `size` bytes into `(offset, length)`, as S3 does:
    /// a last byte past the end is clamped; a first byte at or past the end, or an empty suffix,
    /// is not satisfiable.
    pub fn resolve(self, size: u64) -> Result<(u64, u64)> {
        use crate::Error::InvalidRange;
        match self {
            HttpRange::FromTo(first, last) => {
                if first >= size || last < first {
                    return Err(InvalidRange { size });
                }
                let last = last.min(size - 1);
                Ok((first, last - first + 1))
            }
            HttpRange::From(first) => {
                if first >= size {
                    return Err(InvalidRange { size });
                }
                Ok((first, size - first))
            }
            HttpRange::Suffix(n) => {
                if n == 0 || size == 0 {
                    return Err(InvalidRange { size });
                }
                let n = n.min(size);
                Ok((size - n, n))
            }
        }
    }
}

/// A condition on the current state of the key, checked atomically with a write's commit
/// (`If-None-Match: *` and `If-Match: <etag>` on PutObject and CompleteMultipartUpload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WritePrecondition {
    /// Write only if no object exists under the key.
    IfNoneMatchAny,
    /// Write only if no object exists under the key or its ETag matches none of these (the
    /// header's value, as sent: a comma-separated list of ETags, or `*`).
    IfNoneMatch(String),
    /// Write only if the current object's ETag matches (the header's value, as sent).
    IfMatch(String),
}

/// Options of a PUT.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// The declared body length, when known (Content-Length or x-amz-decoded-content-length).
    pub size: Option<u64>,
    /// Content-MD5 sent by the client; the write fails with `BadDigest` if the body differs.
    pub content_md5: Option<[u8; 16]>,
    pub headers: BTreeMap<String, String>,
    pub user_meta: BTreeMap<String, String>,
    pub checksums: BTreeMap<String, String>,
    /// Fail with `PreconditionFailed` (or `ObjectNotFound` for `IfMatch` on a missing key)
    /// unless this holds when the write commits.
    pub precondition: Option<WritePrecondition>,
    /// Checksums only known once the body has ended (an aws-chunked trailer): called after the
    /// last body byte was read and before the commit; its entries are added to `checksums`.
    pub late_checksums: Option<LateChecksums>,
    /// Encrypt the data at rest; `None` stores it in clear. `size` stays the plaintext's.
    pub encryption: Option<Encryption>,
}

/// A source of checksums filled in while a body streams (see [`PutOptions::late_checksums`]):
/// algorithm name (e.g. `crc32c`) to value, as stored in [`ObjectInfo::checksums`].
#[derive(Clone)]
pub struct LateChecksums(pub std::sync::Arc<dyn Fn() -> BTreeMap<String, String> + Send + Sync>);

impl std::fmt::Debug for LateChecksums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LateChecksums(..)")
    }
}

/// The metadata a copy gets instead of its source's (`x-amz-metadata-directive: REPLACE`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaceMetadata {
    /// Lower-case standard header names to values, as in [`PutOptions::headers`].
    pub headers: BTreeMap<String, String>,
    /// User metadata without the `x-amz-meta-` prefix.
    pub user_meta: BTreeMap<String, String>,
}

/// Options of a server-side copy.
#[derive(Debug, Clone, Default)]
pub struct CopyOptions {
    /// `None` keeps the source's headers and user metadata; `Some` replaces them.
    pub metadata: Option<ReplaceMetadata>,
    /// Copy only if the source is still this version, `(etag, mod_time_ns)`, when the copy opens
    /// it; else `PreconditionFailed`. Lets the caller check conditions on the source's metadata
    /// first without racing a concurrent overwrite.
    pub source_version: Option<(String, i64)>,
    /// A condition on the destination key, as for a PUT.
    pub precondition: Option<WritePrecondition>,
    /// The source version to copy (`x-amz-copy-source` with `?versionId=`); `None`: the latest.
    pub source_version_id: Option<VersionId>,
    /// New checksums for the copy, computed from its bytes as they stream by; they replace the
    /// source's. `None` keeps the source's full-object checksums.
    pub checksums: Option<CopyChecksums>,
    /// The copy's tags, encoded as [`TAGS_HEADER`] holds them (empty: none). `None` keeps the
    /// source's.
    pub tags: Option<String>,
    /// The copy's object lock entries (see `api/protect.rs`); a source's retention and legal
    /// hold are never copied.
    pub lock: BTreeMap<String, String>,
    /// The copy's ACL entry ([`ACL_HEADER`]); `None`: private. The source's is never copied.
    pub acl: Option<String>,
}

/// A function that sees every byte of a stream, in order.
pub type ByteTap = std::sync::Arc<dyn Fn(&[u8]) + Send + Sync>;

/// Checksums computed during a streamed copy: `tap` sees every byte in order, then `result`
/// gives the values to store (see [`CopyOptions::checksums`]).
#[derive(Clone)]
pub struct CopyChecksums {
    pub tap: ByteTap,
    pub result: LateChecksums,
}

impl std::fmt::Debug for CopyChecksums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CopyChecksums(..)")
    }
}

/// The answer to a GET: what the object is, which bytes follow, and the bytes.
pub struct GetObjectReader {
    pub info: ObjectInfo,
    /// `(offset, length)` of the bytes in `body`; `(0, size)` without a range.
    pub range: (u64, u64),
    pub body: ObjectStream,
}

impl std::fmt::Debug for GetObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetObjectReader")
            .field("info", &self.info)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

/// A listing request, one page.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub prefix: String,
    /// Exclusive: return entries strictly after this key or common prefix.
    pub marker: Option<String>,
    pub delimiter: Option<String>,
    /// 1..=1000 (the front end clamps); 0 returns an empty, non-truncated page.
    pub max_keys: usize,
}

#[derive(Debug, Clone, Default)]
pub struct ListResult {
    /// What a listing shows of each object: key, size, ETag, time, version id and delete
    /// marker. Drives walk only a listing view of the metadata, so the stored headers, user
    /// metadata, checksums and encryption record are not here (empty, but for an encrypted
    /// version's format entry); `object_info` has them.
    pub objects: Vec<ObjectInfo>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    /// When truncated: the last key or common prefix of this page (the next marker).
    pub next_marker: Option<String>,
}

/// Everything the S3 front end needs from the storage below it.
#[async_trait]
pub trait ObjectLayer: Send + Sync + 'static {
    async fn make_bucket(&self, bucket: &str) -> Result<()>;
    async fn bucket_info(&self, bucket: &str) -> Result<BucketInfo>;
    async fn list_buckets(&self) -> Result<Vec<BucketInfo>>;
    /// Fails with `BucketNotEmpty` if any object remains.
    async fn delete_bucket(&self, bucket: &str) -> Result<()>;

    /// Streams `body` into the object, replacing any previous version once committed on a
    /// write quorum. Memory use is bounded by a few blocks, whatever the object size.
    async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: ByteStream,
        opts: PutOptions,
    ) -> Result<ObjectInfo>;

    async fn get_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<HttpRange>,
    ) -> Result<GetObjectReader>;

    async fn object_info(&self, bucket: &str, key: &str) -> Result<ObjectInfo>;

    /// Deleting a key that does not exist succeeds (as in S3).
    async fn delete_object(&self, bucket: &str, key: &str) -> Result<()>;

    async fn list_objects(&self, bucket: &str, opts: ListOptions) -> Result<ListResult>;

    // ---- multipart uploads (types in `api/multipart.rs`) ----
    // Defaults answer `NotImplemented`, for layers (test doubles) without multipart support.

    /// CreateMultipartUpload.
    async fn new_multipart_upload(
        &self,
        _bucket: &str,
        _key: &str,
        _opts: NewUploadOptions,
    ) -> Result<UploadInfo> {
        Err(crate::Error::NotImplemented("multipart upload"))
    }

    /// UploadPart: streams `body` into part `part_number` (1..=10000), replacing an earlier part
    /// of that number once committed. Memory use is bounded as for a PUT.
    async fn put_object_part(
        &self,
        _bucket: &str,
        _key: &str,
        _upload_id: &str,
        _part_number: u32,
        _body: ByteStream,
        _opts: PartOptions,
    ) -> Result<UploadedPart> {
        Err(crate::Error::NotImplemented("multipart upload"))
    }

    /// ListParts: one page of an upload's parts.
    async fn list_object_parts(
        &self,
        _bucket: &str,
        _key: &str,
        _upload_id: &str,
        _opts: ListPartsOptions,
    ) -> Result<ListPartsResult> {
        Err(crate::Error::NotImplemented("multipart upload"))
    }

    /// CompleteMultipartUpload: commits the listed parts (ascending, each but the last at least
    /// 5 MiB) as the object, atomically like a PUT, and removes the upload.
    async fn complete_multipart_upload(
        &self,
        _bucket: &str,
        _key: &str,
        _upload_id: &str,
        _parts: Vec<CompletePart>,
        _opts: CompleteOptions,
    ) -> Result<ObjectInfo> {
        Err(crate::Error::NotImplemented("multipart upload"))
    }

    /// AbortMultipartUpload: `NoSuchUpload` when there is no such upload.
    async fn abort_multipart_upload(
        &self,
        _bucket: &str,
        _key: &str,
        _upload_id: &str,
    ) -> Result<()> {
        Err(crate::Error::NotImplemented("multipart upload"))
    }

    /// Heals of this node's replaced drives, running or finished since start (none for a layer
    /// without drives of its own).
    fn drive_heals(&self) -> Vec<crate::drive_heal::DriveHealStatus> {
        Vec::new()
    }

    /// Changes the stored headers of an upload in progress in place (master-key rotation
    /// re-seals the object key its parts are sealed with), under the upload's lock, on a write
    /// quorum of the drives that hold it, with an update stamp so a copy that missed the change
    /// never wins a read. Its parts do not change. `NoSuchUpload` when there is no such upload,
    /// or the update's own refusal (then nothing is written).
    async fn update_upload_headers(
        &self,
        _bucket: &str,
        _key: &str,
        _upload_id: &str,
        _update: UploadHeadersUpdate,
    ) -> Result<()> {
        Err(crate::Error::NotImplemented(
            "in-place upload metadata updates",
        ))
    }

    /// ListMultipartUploads: one page of a bucket's uploads in progress.
    async fn list_multipart_uploads(
        &self,
        _bucket: &str,
        _opts: ListUploadsOptions,
    ) -> Result<ListUploadsResult> {
        Err(crate::Error::NotImplemented("multipart upload"))
    }

    /// An object's info and its parts, in order (one for an object not made by a multipart
    /// upload), for GetObjectAttributes.
    async fn object_parts(
        &self,
        _bucket: &str,
        _key: &str,
        _version: Option<VersionId>,
    ) -> Result<(ObjectInfo, Vec<ObjectPart>)> {
        Err(crate::Error::NotImplemented("the parts of an object"))
    }

    /// GetObject of one part (`partNumber`, 1..=parts) of an object; `range` is the part's span.
    async fn get_object_part(
        &self,
        _bucket: &str,
        _key: &str,
        _part_number: u32,
    ) -> Result<GetObjectReader> {
        Err(crate::Error::NotImplemented("GetObject with partNumber"))
    }

    /// [`ObjectLayer::get_object_part`] of an object that may be encrypted, opening its key with
    /// `opener`.
    async fn get_object_part_decrypted(
        &self,
        _bucket: &str,
        _key: &str,
        _part_number: u32,
        _opener: KeyOpener,
    ) -> Result<GetObjectReader> {
        Err(crate::Error::NotImplemented("GetObject with partNumber"))
    }

    /// Copies an object, streaming its bytes (never holding the whole object in memory); the
    /// destination may be the source itself. The copy's ETag is the MD5 of its bytes (the
    /// source's ETag unless the source is multipart), its checksums the source's full-object
    /// ones. The default reads with [`ObjectLayer::get_object`] and writes with
    /// [`ObjectLayer::put_object`].
    async fn copy_object(
        &self,
        src_bucket: &str,
        src_key: &str,
        dst_bucket: &str,
        dst_key: &str,
        opts: CopyOptions,
    ) -> Result<ObjectInfo> {
        crate::copy::stream_copy(self, src_bucket, src_key, dst_bucket, dst_key, opts).await
    }

    // ---- versioning (types in `api/versioning.rs`) ----
    // Defaults: a layer without versioning, whose buckets are all unversioned.

    /// The bucket's versioning state. `BucketNotFound` when the bucket does not exist.
    async fn get_bucket_versioning(&self, bucket: &str) -> Result<VersioningState> {
        self.bucket_info(bucket).await?;
        Ok(VersioningState::Unversioned)
    }

    /// [`Self::get_bucket_versioning`] for what a read of an object answers (whether it names
    /// a null version): may answer from the per-node configuration cache, as
    /// [`Self::get_bucket_config_cached`]. The default reads afresh.
    async fn get_bucket_versioning_cached(&self, bucket: &str) -> Result<VersioningState> {
        self.get_bucket_versioning(bucket).await
    }

    /// Sets the bucket's versioning to `Enabled` or `Suspended` (`Unversioned` is refused: a
    /// bucket never returns to it).
    async fn put_bucket_versioning(&self, _bucket: &str, _state: VersioningState) -> Result<()> {
        Err(crate::Error::NotImplemented("bucket versioning"))
    }

    /// GET of one version (`None`: the latest). The latest being a delete marker is
    /// `LatestIsDeleteMarker`; a version id naming a marker is `VersionIsDeleteMarker`; an id
    /// naming nothing is `NoSuchVersion`.
    async fn get_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        range: Option<HttpRange>,
    ) -> Result<GetObjectReader> {
        match version {
            None => self.get_object(bucket, key, range).await,
            Some(_) => Err(crate::Error::NotImplemented("versions")),
        }
    }

    /// GET of one version that opens an encrypted object's data with `opener` (a plain object
    /// reads as with [`ObjectLayer::get_object_version`]). `range` is of the plaintext; only
    /// the packages holding it are read and opened. A package that fails authentication is an
    /// error, never plaintext. (`get_object_version` refuses encrypted objects with
    /// `KeyRequired`: their bytes never leave in ciphertext.)
    async fn get_object_decrypted(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        range: Option<HttpRange>,
        opener: KeyOpener,
    ) -> Result<GetObjectReader> {
        let _ = opener;
        self.get_object_version(bucket, key, version, range).await
    }

    /// HEAD of one version; errors as [`ObjectLayer::get_object_version`].
    async fn object_version_info(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<ObjectInfo> {
        match version {
            None => self.object_info(bucket, key).await,
            Some(_) => Err(crate::Error::NotImplemented("versions")),
        }
    }

    /// DELETE of one version (`Some`), or of the key (`None`): in a versioned bucket that adds a
    /// delete marker (a `null` one when suspended, replacing the null version). Deleting a
    /// version that does not exist succeeds (as in S3).
    async fn delete_object_version(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
    ) -> Result<DeleteResult> {
        match version {
            None => self
                .delete_object(bucket, key)
                .await
                .map(|()| DeleteResult::default()),
            Some(_) => Err(crate::Error::NotImplemented("versions")),
        }
    }

    /// Changes the stored headers of one version (`None`: the latest) in place, under the
    /// object's lock, on a write quorum of its drives; its data, ETag and modification time stay.
    /// Errors as [`ObjectLayer::get_object_version`], or the update's own refusal.
    async fn update_object_headers(
        &self,
        _bucket: &str,
        _key: &str,
        _version: Option<VersionId>,
        _update: HeadersUpdate,
    ) -> Result<ObjectInfo> {
        Err(crate::Error::NotImplemented("in-place metadata updates"))
    }

    /// DELETE of one version or of the key, as [`ObjectLayer::delete_object_version`], with
    /// options: a version under object lock is refused (`ObjectLocked`) unless its GOVERNANCE
    /// retention may be bypassed.
    async fn delete_object_version_with(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        _opts: DeleteOptions,
    ) -> Result<DeleteResult> {
        self.delete_object_version(bucket, key, version).await
    }

    /// ListObjectVersions.
    async fn list_object_versions(
        &self,
        _bucket: &str,
        _opts: ListVersionsOptions,
    ) -> Result<ListVersionsResult> {
        Err(crate::Error::NotImplemented("ListObjectVersions"))
    }

    // ---- the lifecycle worker's share of the keys ----
    // Defaults: one share holding every key (a single node).

    /// The shares (erasure sets, by index) whose keys this node's background lifecycle worker
    /// handles: on a cluster, the sets whose first online drive is on this node, so that each
    /// set has one worker while its nodes agree on which drives answer (a pass is idempotent:
    /// two workers in a set for a moment do the same thing twice, harmlessly).
    async fn lifecycle_shares(&self) -> Vec<usize> {
        vec![0]
    }

    /// ListObjectVersions over the keys of share `share` only.
    async fn list_share_versions(
        &self,
        share: usize,
        bucket: &str,
        opts: ListVersionsOptions,
    ) -> Result<ListVersionsResult> {
        let _ = share;
        self.list_object_versions(bucket, opts).await
    }

    /// ListMultipartUploads over the uploads of share `share` only.
    async fn list_share_uploads(
        &self,
        share: usize,
        bucket: &str,
        opts: ListUploadsOptions,
    ) -> Result<ListUploadsResult> {
        let _ = share;
        self.list_multipart_uploads(bucket, opts).await
    }

    /// The bucket configuration document `name` (e.g. `cors`), as stored; `None` when not set.
    /// `BucketNotFound` when the bucket does not exist. Names are 1 to 64 bytes of `[a-z0-9._-]`.
    async fn get_bucket_config(&self, bucket: &str, name: &str) -> Result<Option<Bytes>>;

    /// [`Self::get_bucket_config`] for a write that applies the document (versioning, object
    /// lock, default encryption): may answer from a per-node cache, which sees a change made
    /// through this node at once and one made through another node within
    /// [`crate::CONFIG_CACHE_TTL`]. The default reads afresh.
    async fn get_bucket_config_cached(&self, bucket: &str, name: &str) -> Result<Option<Bytes>> {
        self.get_bucket_config(bucket, name).await
    }

    /// Replaces the bucket configuration document `name` once a write quorum has it.
    async fn put_bucket_config(&self, bucket: &str, name: &str, data: Bytes) -> Result<()>;

    /// Removes the bucket configuration document `name`; one that is not set is not an error.
    async fn delete_bucket_config(&self, bucket: &str, name: &str) -> Result<()>;

    /// The deployment's own configuration document `name` (e.g. `iam`), stored like a bucket's
    /// (quorum of the first set, in the drives' system namespace); `None` when not set.
    async fn get_system_config(&self, name: &str) -> Result<Option<Bytes>> {
        let _ = name;
        Err(crate::Error::NotImplemented("system configuration"))
    }

    /// Replaces the deployment's configuration document `name` once a write quorum has it.
    async fn put_system_config(&self, name: &str, data: Bytes) -> Result<()> {
        let _ = (name, data);
        Err(crate::Error::NotImplemented("system configuration"))
    }

    /// The drives' state now and the layer's counters, for metrics. The default knows nothing.
    async fn stats(&self) -> crate::stats::LayerStats {
        crate::stats::LayerStats::default()
    }

    /// The deployment as this node sees it now (nodes, sets, drives with their space, internode
    /// counters), for the admin API. The default answers `NotImplemented`.
    async fn info(&self) -> Result<ClusterInfo> {
        Err(crate::Error::NotImplemented("cluster info"))
    }

    /// Starts a heal of `bucket` (or every bucket) under `prefix` in the background, as a job
    /// followed by its id ([`ObjectLayer::heal_job`]): counted, healed, then verified (see
    /// `heal_job.rs`). `BucketNotFound` when `bucket` does not exist. The default answers
    /// `NotImplemented`.
    async fn start_heal_job(
        &self,
        _bucket: Option<&str>,
        _prefix: &str,
    ) -> Result<crate::HealJobStatus> {
        Err(crate::Error::NotImplemented("heal jobs"))
    }

    /// The status of heal job `id` started on this node; `None` when this node has no such job
    /// (kept in memory: the last [`crate::KEPT_JOBS`]).
    async fn heal_job(&self, _id: &str) -> Result<Option<crate::HealJobStatus>> {
        Err(crate::Error::NotImplemented("heal jobs"))
    }

    /// Every heal job this node keeps, oldest first.
    async fn heal_jobs(&self) -> Result<Vec<crate::HealJobStatus>> {
        Err(crate::Error::NotImplemented("heal jobs"))
    }

    /// Heals every object of `bucket` (or of every bucket) whose key starts with `prefix`: reads
    /// and verifies every shard, rewrites the copies that are missing, outdated or corrupt, and
    /// reports what it did and what it could not. `BucketNotFound` when `bucket` does not exist.
    /// The default answers `NotImplemented` (layers without drives to heal).
    async fn heal(&self, _bucket: Option<&str>, _prefix: &str) -> Result<HealReport> {
        Err(crate::Error::NotImplemented("heal"))
    }

    /// Drops this node's data-plane connections to `peer` (to every peer with `None`), as a
    /// failure would: transfers on them fail and are retried or served otherwise, the next one
    /// reconnects (for verbs: the queue pairs go to the error state and are rebuilt). Returns how
    /// many were dropped. The default has no data plane: `NotImplemented`.
    async fn reset_data_plane(&self, _peer: Option<&str>) -> Result<usize> {
        Err(crate::Error::NotImplemented("data-plane reset"))
    }
}
