//! The `Drive` trait: everything the object layer asks of one drive, local or remote.

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;
use quarry_buf::PooledBuf;
use uuid::Uuid;

use crate::meta::ObjectMeta;
use crate::multipart::{PartMeta, UploadMeta};

/// Errors a drive reports. The object layer counts them per drive to decide quorum, so each
/// variant names one exact condition.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("bucket not found on drive")]
    VolumeNotFound,
    #[error("bucket already exists on drive")]
    VolumeExists,
    #[error("bucket is not empty")]
    VolumeNotEmpty,
    #[error("object not found on drive")]
    FileNotFound,
    /// The shard file is shorter than the requested range (truncated or partly written).
    #[error("shard file is truncated: wanted {wanted} bytes at offset {offset}, file has {len}")]
    Truncated {
        offset: u64,
        wanted: usize,
        len: u64,
    },
    /// Metadata that does not parse, or carries a version this build does not know.
    #[error("corrupt metadata: {0}")]
    CorruptMeta(String),
    #[error("unsupported metadata version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    /// A bucket or key that may not become a path (`..`, empty segment, reserved name, too long).
    #[error("invalid name: {0}")]
    InvalidName(String),
    /// The drive is unformatted, formatted for another deployment, or not mounted.
    #[error("drive is not usable: {0}")]
    Unusable(String),
    #[error("drive is full")]
    DiskFull,
    #[error("drive I/O error: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for DriveError {
    /// `ENOSPC` and `EDQUOT` become [`DriveError::DiskFull`]; everything else is `Io`.
    fn from(e: std::io::Error) -> DriveError {
        match e.kind() {
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                DriveError::DiskFull
            }
            _ => DriveError::Io(e),
        }
    }
}

pub type Result<T, E = DriveError> = std::result::Result<T, E>;

/// Space and identity of a drive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskInfo {
    pub endpoint: String,
    pub id: Option<Uuid>,
    pub total: u64,
    pub free: u64,
}

/// A bucket as one drive sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolInfo {
    pub name: String,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: i64,
}

/// What a walk should return: the keys of `bucket` that start with `prefix`, in ascending
/// byte order of the key, strictly after `marker`, at most `limit` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WalkOptions {
    pub prefix: String,
    /// Exclusive lower bound (a key or a common prefix returned earlier).
    pub marker: Option<String>,
    /// When true, do not descend: a directory below the prefix is returned once as
    /// `WalkEntry::Prefix("<prefix up to and including the next '/'>")` (it sorts as that string).
    /// Only meaningful for the delimiter "/".
    pub delimited: bool,
    pub limit: usize,
}

/// One entry of a walk, in key order.
#[derive(Debug, Clone, PartialEq)]
pub enum WalkEntry {
    /// An object and what a listing reads of its metadata ([`ObjectMeta::listing_view`]: no
    /// inline data, user metadata, checksums or other header entries); `read_meta` returns it
    /// whole. Shared: a local drive keeps what it read for the next walk (`meta_cache`) and
    /// hands out the same copy.
    Object {
        key: String,
        meta: std::sync::Arc<ObjectMeta>,
    },
    /// A common prefix, ending in '/'. Only produced when `WalkOptions::delimited` is set.
    Prefix(String),
}

impl WalkEntry {
    /// The string this entry sorts by.
    pub fn name(&self) -> &str {
        match self {
            WalkEntry::Object { key, .. } => key,
            WalkEntry::Prefix(p) => p,
        }
    }

    /// About what the entry takes in the internode codec, and never less (the net crate's
    /// tests hold it to that): a remote walk's answer must fit a frame, a walk serving one stops
    /// at its budget by this, and the server sends an answer within it without measuring it (an
    /// object of 10,000 parts is about 130 KB).
    pub fn wire_estimate(&self) -> usize {
        let map = |m: &std::collections::BTreeMap<String, String>| {
            8 + m.iter().map(|(k, v)| 8 + k.len() + v.len()).sum::<usize>()
        };
        match self {
            WalkEntry::Prefix(p) => 8 + p.len(),
            WalkEntry::Object { key, meta } => {
                160 + key.len()
                    + meta.etag.len()
                    + map(&meta.headers)
                    + map(&meta.user_meta)
                    + map(&meta.checksums)
                    + meta.erasure.codec.len()
                    + meta.erasure.bitrot.len()
                    + meta.erasure.distribution.len()
                    + meta.parts.iter().map(|p| 24 + p.etag.len()).sum::<usize>()
                    + meta.inline.as_ref().map_or(0, |i| i.len())
            }
        }
    }
}

/// Writes one shard file of an in-flight write under the drive's tmp area. Bytes are written in
/// order; `finish` flushes and fsyncs. Dropping without `finish` leaves the tmp data to be
/// removed by `Drive::delete_tmp` or the start-up sweep.
#[async_trait]
pub trait ShardWriter: Send {
    async fn write(&mut self, buf: &[u8]) -> Result<()>;
    /// Writes `data`, taking the `Bytes` as they are (a remote writer sends them without a
    /// copy: over RDMA the peer reads them where they lie). The default writes them with
    /// [`ShardWriter::write`].
    async fn write_bytes(&mut self, data: Bytes) -> Result<()> {
        self.write(&data).await
    }
    async fn finish(self: Box<Self>) -> Result<()>;
}

/// A bitrot frame of a shard, open for sending ([`Drive::frame_region`]): its hash, read, and its
/// chunk, `len` bytes at `offset` of `file`.
#[derive(Debug)]
pub struct FrameRegion {
    pub hash: [u8; crate::FRAME_HASH_LEN],
    pub file: std::fs::File,
    pub offset: u64,
    pub len: usize,
}

/// One drive. Every method validates its bucket and key before building any path.
///
/// All keys are S3 object keys (UTF-8, at most 1024 bytes); a key ending in '/' (a "folder
/// marker") is a valid object distinct from the prefix it names.
#[async_trait]
pub trait Drive: Send + Sync + fmt::Debug + 'static {
    /// Human-readable location, e.g. `/srv/d1` or `http://node2:9000/srv/d1`.
    fn endpoint(&self) -> &str;

    async fn disk_info(&self) -> Result<DiskInfo>;

    /// Reads `.quarry.sys/format.json`; `Ok(None)` when the drive has never been formatted.
    async fn read_format(&self) -> Result<Option<crate::FormatV1>>;

    /// Writes `.quarry.sys/format.json` atomically.
    async fn write_format(&self, format: &crate::FormatV1) -> Result<()>;

    async fn make_volume(&self, bucket: &str) -> Result<()>;
    async fn list_volumes(&self) -> Result<Vec<VolInfo>>;
    async fn stat_volume(&self, bucket: &str) -> Result<VolInfo>;
    /// Removes the bucket directory. Without `force`, fails with `VolumeNotEmpty` if any
    /// object is in it.
    async fn delete_volume(&self, bucket: &str, force: bool) -> Result<()>;

    /// Reads the latest version of `<bucket>/<key>` (perhaps a delete marker) from its
    /// `quarry.meta`, reading only that version's entry (see [`crate::journal`]).
    async fn read_meta(&self, bucket: &str, key: &str) -> Result<ObjectMeta>;
    /// Reads the version `version_id` (`None`: the `null` version) of `<bucket>/<key>`.
    /// `FileNotFound` when the drive has no such version.
    async fn read_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<Uuid>,
    ) -> Result<ObjectMeta>;
    /// Every version of `<bucket>/<key>` (delete markers too), newest first, without inline
    /// data. `FileNotFound` when the key has none on this drive.
    async fn read_versions(&self, bucket: &str, key: &str) -> Result<Vec<ObjectMeta>>;
    /// Replaces one existing version (the one of `meta.version_id`) of the key's journal
    /// atomically (temp file, fsync, rename); `FileNotFound` when there is no such version.
    async fn write_meta(&self, bucket: &str, key: &str, meta: &ObjectMeta) -> Result<()>;
    /// Removes the version `version_id` from the key's journal, and its data dir; the key
    /// itself when it was the last version. `FileNotFound` when there is no such version.
    async fn delete_version(&self, bucket: &str, key: &str, version_id: Option<Uuid>)
        -> Result<()>;

    /// Opens `tmp/<tmp_id>/<data_dir>/part.<part>` for writing (creating directories).
    async fn create_shard_writer(
        &self,
        tmp_id: Uuid,
        data_dir: Uuid,
        part: u32,
    ) -> Result<Box<dyn ShardWriter>>;

    /// Reads exactly `len` bytes at `offset` of `<bucket>/<key>/<data_dir>/part.<part>`.
    async fn read_shard(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes>;

    /// Like [`Drive::read_shard`], reading `buf.len()` bytes (its filled length, set by the
    /// caller) into `buf`, a pooled buffer (a piece of a GET's stripe buffer, perhaps registered
    /// with an RDMA device), and returning the filled buffer. A drive that can read in place
    /// (`LocalDrive`, a remote drive whose data plane lands the bytes in the buffer) returns `buf`
    /// itself; the default reads with `read_shard` and copies into it. A drive may return another
    /// buffer holding the bytes (the caller can tell by its address: a copy happened).
    async fn read_shard_into(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        mut buf: PooledBuf,
    ) -> Result<PooledBuf> {
        let len = buf.len();
        let data = self
            .read_shard(bucket, key, data_dir, part, offset, len)
            .await?;
        if data.len() != len {
            return Err(DriveError::Io(std::io::Error::other(format!(
                "asked for {len} bytes of a shard, read {}",
                data.len()
            ))));
        }
        buf.copy_from_slice(&data);
        Ok(buf)
    }

    /// Reads one bitrot frame of a shard (`[blake3 (FRAME_HASH_LEN B) | chunk]`: `buf.len()`
    /// bytes at `offset`, which are exactly one frame) into `buf`, as
    /// [`Drive::read_shard_into`] does. The chunk is not checked against its hash here: the
    /// caller checks it before using a byte, and must. A drive across the network may
    /// authenticate only the hash on the way (the check binds the chunk to it), so when
    /// [`Drive::frame_reads_check_hash_only`] says so, a frame that fails the check may have been
    /// changed on the way rather than be damaged on the drive: [`Drive::read_shard_into`], which
    /// authenticates every byte, tells them apart. The default is `read_shard_into`.
    async fn read_frame_into(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        buf: PooledBuf,
    ) -> Result<PooledBuf> {
        self.read_shard_into(bucket, key, data_dir, part, offset, buf)
            .await
    }

    /// The bitrot frame of `len` bytes at `offset` of a shard (as [`Drive::read_frame_into`]
    /// reads it), for a holder to send from the page cache without copying it (`sendfile`): its
    /// hash read, its chunk left in the open file. `Ok(None)` when the drive cannot: its shards
    /// are not local files, the range is shorter than a hash, or its chunk is not in the page
    /// cache (sending it would wait on the disk in the sender's event loop); the caller then reads
    /// the frame. Nothing is checked against the hash here: the reader does that. The default
    /// cannot.
    async fn frame_region(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Option<FrameRegion>> {
        let _ = (bucket, key, data_dir, part, offset, len);
        Ok(None)
    }

    /// Whether [`Drive::read_frame_into`] authenticates only a frame's hash on its way (see there).
    fn frame_reads_check_hash_only(&self) -> bool {
        false
    }

    /// The length of `<bucket>/<key>/<data_dir>/part.<part>`, without reading it: a cheap check
    /// that a shard the read path did not need is still there and whole.
    async fn stat_shard(&self, bucket: &str, key: &str, data_dir: Uuid, part: u32) -> Result<u64>;

    /// Commits a version: moves `tmp/<tmp_id>/<meta.data_dir>` (if the object is not inline) to
    /// `<bucket>/<key>/<data_dir>`, then adds `meta` to the key's journal (in its place by
    /// modification time, replacing the version of the same id, e.g. the `null` version) and
    /// writes it atomically, then removes the data dir of the version it replaced and the tmp
    /// dir. A delete marker has no data dir (its tmp dir need not exist). Fails with
    /// `VolumeNotFound` if the bucket does not exist. After it returns Ok the version survives a
    /// crash.
    async fn rename_data(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<()>;

    /// Removes the key: its metadata and every version's data dir, then empty parent directories
    /// up to the bucket.
    async fn delete_object(&self, bucket: &str, key: &str) -> Result<()>;

    /// Removes `tmp/<tmp_id>` and everything in it (an aborted write). Missing is not an error.
    async fn delete_tmp(&self, tmp_id: Uuid) -> Result<()>;

    /// Lists keys in order; see [`WalkOptions`].
    async fn walk(&self, bucket: &str, opts: &WalkOptions) -> Result<Vec<WalkEntry>>;

    /// [`Drive::walk`], stopping early (with at least one entry) once the entries walked take
    /// about `max_bytes` in the internode codec ([`WalkEntry::wire_estimate`]); the `bool`
    /// says it stopped so (more may follow). What a drive server answers a remote walk with.
    async fn walk_bounded(
        &self,
        bucket: &str,
        opts: &WalkOptions,
        max_bytes: usize,
    ) -> Result<(Vec<WalkEntry>, bool)> {
        let _ = max_bytes;
        Ok((self.walk(bucket, opts).await?, false))
    }

    /// Reads the configuration blob `name` of `bucket` (`.quarry.sys/buckets/<bucket>/<name>`).
    /// `FileNotFound` when it is not set, `VolumeNotFound` when the bucket does not exist.
    /// Names are 1 to 64 bytes of `[a-z0-9._-]`, not beginning with '.'.
    async fn read_bucket_config(&self, bucket: &str, name: &str) -> Result<Bytes>;
    /// Replaces the blob atomically (temp file, fsync, rename). `VolumeNotFound` when the bucket
    /// does not exist. Blobs are removed with their bucket.
    async fn write_bucket_config(&self, bucket: &str, name: &str, data: &[u8]) -> Result<()>;
    /// Removes the blob; one that is not set is not an error.
    async fn delete_bucket_config(&self, bucket: &str, name: &str) -> Result<()>;
    /// The names of the blobs set on `bucket`, sorted (what a heal compares across drives).
    /// `VolumeNotFound` when the bucket does not exist.
    async fn list_bucket_configs(&self, bucket: &str) -> Result<Vec<String>>;

    // ---- multipart uploads (layout in [`crate::multipart`]) ----

    /// Creates the directory of upload `meta.upload_id` of `meta.bucket/meta.key` and writes its
    /// `upload.meta` atomically. Fails with `VolumeNotFound` if the bucket does not exist.
    async fn create_upload(&self, meta: &UploadMeta) -> Result<()>;

    /// Reads an upload's `upload.meta`; `FileNotFound` if there is no such upload here.
    async fn read_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<UploadMeta>;

    /// Commits one part: moves `tmp/<tmp_id>/<part.data_dir>` (holding the shard file
    /// `part.<part.number>`) into the upload directory, replaces `part.<N>.meta` atomically, then
    /// removes the data dir of the part it replaced and the tmp dir. `FileNotFound` if the upload
    /// does not exist (never created, completed or aborted): an upload is never re-created.
    async fn commit_part(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part: &PartMeta,
    ) -> Result<()>;

    /// Every committed part of an upload, by ascending part number. `FileNotFound` if the upload
    /// does not exist; unreadable part metadata is skipped (with a warning): that part is
    /// missing on this drive.
    async fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> Result<Vec<PartMeta>>;

    /// Prepares the commit of a completed upload: places the shard files of `parts` (as listed by
    /// `list_parts`) at `tmp/<tmp_id>/<data_dir>/part.1 .. part.K`, in the order given, without
    /// disturbing the upload (hard links where the filesystem has them), so `rename_data` can
    /// commit them and a failed commit leaves the upload whole. `FileNotFound` if a part's shard
    /// file is missing.
    async fn stage_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[PartMeta],
        tmp_id: Uuid,
        data_dir: Uuid,
    ) -> Result<()>;

    /// Reads exactly `len` bytes at `offset` of the shard file of part `part` (data dir
    /// `data_dir`) of upload `(bucket, key, upload_id)`: a heal rebuilds another drive's copy of
    /// the part from these. `FileNotFound` if the upload or the part's file is missing.
    async fn read_part_shard(
        &self,
        upload: (&str, &str, &str),
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes>;

    /// Removes an upload and all its parts. `FileNotFound` if it does not exist.
    async fn delete_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()>;

    /// The uploads on this drive, of `bucket` only when given, in no particular order. Uploads
    /// whose `upload.meta` is missing (being created) or unreadable are skipped.
    async fn list_uploads(&self, bucket: Option<&str>) -> Result<Vec<UploadMeta>>;
}
