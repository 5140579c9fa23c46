//! The messages of the `Drive` trait's remote side: one RPC method per trait method, and the
//! request and response payloads as pure encode/decode functions (no IO, no async).
//!
//! Every request payload is
//!
//! ```text
//! offset size
//!      0    1  drive protocol version (1)
//!      1    2  drive index on the serving node (u16 BE)
//!      3    n  the method's arguments, in the order of its `Request` variant's fields
//! ```
//!
//! and every successful response payload is `version (1) | kind (u8) | body`. Fields are encoded
//! compactly: integers big-endian; strings and blobs as a u32 BE length then the bytes; `Option`
//! as a 0/1 byte then the value; lists as a u32 BE count then the items; UUIDs as 16 raw bytes.
//! [`ObjectMeta`] travels in its own versioned file format ([`ObjectMeta::to_bytes`]: JSON header,
//! then the inline shard bytes raw), upload and part metadata in theirs; shard data is always raw
//! bytes (a slice of the frame's payload on the receiving side, never copied or base64-encoded).
//!
//! A failed call answers with an error frame whose code names the exact [`DriveError`] variant
//! (see [`encode_drive_error`]): the object layer's quorum logic tells `FileNotFound` from
//! `VolumeNotFound` from `Unusable`, so none of them may be merged on the way.
//!
//! Decoding never trusts a length: every length and count is checked against the bytes that are
//! actually there before anything is allocated, and any garbage is a [`ProtoError`], never a panic.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use quarry_disk::{
    DiskInfo, DriveError, FormatV1, ObjectMeta, PartMeta, UploadMeta, VolInfo, WalkEntry,
    WalkOptions,
};
use uuid::Uuid;

/// The drive protocol version this build speaks.
pub const DRIVE_PROTO_VERSION: u8 = 1;

/// At most this many items are reserved up front when decoding a list: a count is checked only
/// against the minimum wire size of an item, and an in-memory item is far larger (a walk entry
/// ~300 bytes for 5 on the wire), so reserving `count` would let a 4 MiB frame reserve ~240 MB.
const PREALLOC_ITEMS: usize = 1024;

/// First method id of the drive protocol (see the registry, [`crate::methods`]).
pub const METHOD_BASE: u16 = crate::methods::DRIVE_BASE;

macro_rules! methods {
    ($($name:ident = $n:expr,)*) => {
        /// One RPC method per `Drive` trait method (the shard writer takes three).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Method { $($name = METHOD_BASE + $n,)* }

        impl Method {
            pub const ALL: &'static [Method] = &[$(Method::$name,)*];

            pub fn from_u16(m: u16) -> Option<Method> {
                match m {
                    $(x if x == METHOD_BASE + $n => Some(Method::$name),)*
                    _ => None,
                }
            }
        }
    };
}

methods! {
    DiskInfo = 0,
    MakeVolume = 1,
    ListVolumes = 2,
    StatVolume = 3,
    DeleteVolume = 4,
    ReadMeta = 5,
    WriteMeta = 6,
    ShardOpen = 7,
    ShardAppend = 8,
    ShardFinish = 9,
    ShardAbort = 10,
    ReadShard = 11,
    StatShard = 12,
    RenameData = 13,
    DeleteObject = 14,
    DeleteTmp = 15,
    Walk = 16,
    ReadBucketConfig = 17,
    WriteBucketConfig = 18,
    DeleteBucketConfig = 19,
    CreateUpload = 20,
    ReadUpload = 21,
    CommitPart = 22,
    ListParts = 23,
    StageParts = 24,
    DeleteUpload = 25,
    ListUploads = 26,
    ReadFormat = 27,
    WriteFormat = 28,
    ReadShardData = 29,
}

/// A call on one drive, with its arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    DiskInfo,
    MakeVolume {
        bucket: String,
    },
    ListVolumes,
    StatVolume {
        bucket: String,
    },
    DeleteVolume {
        bucket: String,
        force: bool,
    },
    ReadMeta {
        bucket: String,
        key: String,
    },
    WriteMeta {
        bucket: String,
        key: String,
        meta: ObjectMeta,
    },
    /// Opens a shard writer; answered with [`Response::Writer`].
    ShardOpen {
        tmp_id: Uuid,
        data_dir: Uuid,
        part: u32,
    },
    /// Appends the `seq`-th chunk (0-based) to an open writer. Appends may arrive out of order;
    /// the server writes them in `seq` order.
    ShardAppend {
        writer: Uuid,
        seq: u64,
        data: Bytes,
    },
    /// Flushes and fsyncs the writer after exactly `appends` chunks, and closes it.
    ShardFinish {
        writer: Uuid,
        appends: u64,
    },
    /// Closes a writer without finishing it (its tmp data is left to `delete_tmp` or the sweep).
    ShardAbort {
        writer: Uuid,
    },
    ReadShard {
        bucket: String,
        key: String,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: u64,
    },
    StatShard {
        bucket: String,
        key: String,
        data_dir: Uuid,
        part: u32,
    },
    RenameData {
        tmp_id: Uuid,
        bucket: String,
        key: String,
        meta: ObjectMeta,
    },
    DeleteObject {
        bucket: String,
        key: String,
    },
    DeleteTmp {
        tmp_id: Uuid,
    },
    Walk {
        bucket: String,
        opts: WalkOptions,
    },
    ReadBucketConfig {
        bucket: String,
        name: String,
    },
    WriteBucketConfig {
        bucket: String,
        name: String,
        data: Bytes,
    },
    DeleteBucketConfig {
        bucket: String,
        name: String,
    },
    CreateUpload {
        meta: UploadMeta,
    },
    ReadUpload {
        bucket: String,
        key: String,
        upload_id: String,
    },
    CommitPart {
        tmp_id: Uuid,
        bucket: String,
        key: String,
        upload_id: String,
        part: PartMeta,
    },
    ListParts {
        bucket: String,
        key: String,
        upload_id: String,
    },
    StageParts {
        bucket: String,
        key: String,
        upload_id: String,
        parts: Vec<PartMeta>,
        tmp_id: Uuid,
        data_dir: Uuid,
    },
    DeleteUpload {
        bucket: String,
        key: String,
        upload_id: String,
    },
    ListUploads {
        bucket: Option<String>,
    },
    ReadFormat,
    WriteFormat {
        format: FormatV1,
    },
    /// `read_shard` on the data plane: the same arguments as [`Request::ReadShard`], but the
    /// answer is the raw shard bytes, sent as a bulk frame ([`crate::wire::FLAG_BULK`]) that the
    /// caller reads straight into a pooled buffer; not a [`Response`].
    ReadShardData {
        bucket: String,
        key: String,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: u64,
    },
}

impl Request {
    pub fn method(&self) -> Method {
        match self {
            Request::DiskInfo => Method::DiskInfo,
            Request::MakeVolume { .. } => Method::MakeVolume,
            Request::ListVolumes => Method::ListVolumes,
            Request::StatVolume { .. } => Method::StatVolume,
            Request::DeleteVolume { .. } => Method::DeleteVolume,
            Request::ReadMeta { .. } => Method::ReadMeta,
            Request::WriteMeta { .. } => Method::WriteMeta,
            Request::ShardOpen { .. } => Method::ShardOpen,
            Request::ShardAppend { .. } => Method::ShardAppend,
            Request::ShardFinish { .. } => Method::ShardFinish,
            Request::ShardAbort { .. } => Method::ShardAbort,
            Request::ReadShard { .. } => Method::ReadShard,
            Request::StatShard { .. } => Method::StatShard,
            Request::RenameData { .. } => Method::RenameData,
            Request::DeleteObject { .. } => Method::DeleteObject,
            Request::DeleteTmp { .. } => Method::DeleteTmp,
            Request::Walk { .. } => Method::Walk,
            Request::ReadBucketConfig { .. } => Method::ReadBucketConfig,
            Request::WriteBucketConfig { .. } => Method::WriteBucketConfig,
            Request::DeleteBucketConfig { .. } => Method::DeleteBucketConfig,
            Request::CreateUpload { .. } => Method::CreateUpload,
            Request::ReadUpload { .. } => Method::ReadUpload,
            Request::CommitPart { .. } => Method::CommitPart,
            Request::ListParts { .. } => Method::ListParts,
            Request::StageParts { .. } => Method::StageParts,
            Request::DeleteUpload { .. } => Method::DeleteUpload,
            Request::ListUploads { .. } => Method::ListUploads,
            Request::ReadFormat => Method::ReadFormat,
            Request::WriteFormat { .. } => Method::WriteFormat,
            Request::ReadShardData { .. } => Method::ReadShardData,
        }
    }
}

/// A successful answer. Each method has exactly one kind of answer.
// Metadata answers are the common ones: boxing them would add an allocation to each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    Unit,
    DiskInfo(DiskInfo),
    Volumes(Vec<VolInfo>),
    Volume(VolInfo),
    Meta(ObjectMeta),
    Writer(Uuid),
    /// Shard bytes or a configuration blob.
    Data(Bytes),
    Len(u64),
    Walk(Vec<WalkEntry>),
    Upload(UploadMeta),
    Parts(Vec<PartMeta>),
    Uploads(Vec<UploadMeta>),
    /// A drive's `format.json`, if it has one.
    Format(Option<FormatV1>),
}

impl Response {
    fn kind(&self) -> u8 {
        match self {
            Response::Unit => 0,
            Response::DiskInfo(_) => 1,
            Response::Volumes(_) => 2,
            Response::Volume(_) => 3,
            Response::Meta(_) => 4,
            Response::Writer(_) => 5,
            Response::Data(_) => 6,
            Response::Len(_) => 7,
            Response::Walk(_) => 8,
            Response::Upload(_) => 9,
            Response::Parts(_) => 10,
            Response::Uploads(_) => 11,
            Response::Format(_) => 12,
        }
    }
}

/// Every way a drive message can be malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("drive message is truncated: {need} more bytes needed, {have} left")]
    Truncated { need: usize, have: usize },
    #[error(
        "unsupported drive protocol version {got} (this node speaks version {DRIVE_PROTO_VERSION})"
    )]
    UnsupportedVersion { got: u8 },
    #[error("unknown drive method {0}")]
    UnknownMethod(u16),
    #[error("unknown drive response kind {0}")]
    UnknownKind(u8),
    #[error("invalid {what} tag {tag}")]
    BadTag { what: &'static str, tag: u8 },
    #[error("a string field is not UTF-8")]
    BadUtf8,
    #[error("{0} bytes after the end of the drive message")]
    Trailing(usize),
    #[error("embedded metadata: {0}")]
    Meta(String),
    #[error("a {what} field of {len} does not fit this platform")]
    TooLong { what: &'static str, len: u64 },
}

// ---- encoding ----

fn put_str(b: &mut BytesMut, s: &str) {
    put_blob(b, s.as_bytes());
}

fn put_blob(b: &mut BytesMut, v: &[u8]) {
    // A frame payload is far below 4 GiB, so every field length fits a u32.
    b.put_u32(v.len() as u32);
    b.put_slice(v);
}

fn put_opt_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        None => b.put_u8(0),
        Some(s) => {
            b.put_u8(1);
            put_str(b, s);
        }
    }
}

fn put_uuid(b: &mut BytesMut, u: &Uuid) {
    b.put_slice(u.as_bytes());
}

fn put_bool(b: &mut BytesMut, v: bool) {
    b.put_u8(v as u8);
}

fn put_count(b: &mut BytesMut, n: usize) {
    b.put_u32(n as u32);
}

/// Encodes a request to drive `drive`: `(method, payload)`.
pub fn encode_request(drive: u16, req: &Request) -> (u16, Bytes) {
    let mut b = BytesMut::with_capacity(match req {
        Request::ShardAppend { data, .. } => 64 + data.len(),
        Request::WriteBucketConfig { data, .. } => 256 + data.len(),
        Request::WriteMeta { meta, .. } | Request::RenameData { meta, .. } => {
            1024 + meta.inline.as_ref().map_or(0, |i| i.len())
        }
        _ => 128,
    });
    b.put_u8(DRIVE_PROTO_VERSION);
    b.put_u16(drive);
    match req {
        Request::DiskInfo | Request::ListVolumes | Request::ReadFormat => {}
        Request::WriteFormat { format } => put_blob(&mut b, &format.to_bytes()),
        Request::MakeVolume { bucket } | Request::StatVolume { bucket } => put_str(&mut b, bucket),
        Request::DeleteVolume { bucket, force } => {
            put_str(&mut b, bucket);
            put_bool(&mut b, *force);
        }
        Request::ReadMeta { bucket, key } | Request::DeleteObject { bucket, key } => {
            put_str(&mut b, bucket);
            put_str(&mut b, key);
        }
        Request::WriteMeta { bucket, key, meta } => {
            put_str(&mut b, bucket);
            put_str(&mut b, key);
            put_blob(&mut b, &meta.to_bytes());
        }
        Request::ShardOpen {
            tmp_id,
            data_dir,
            part,
        } => {
            put_uuid(&mut b, tmp_id);
            put_uuid(&mut b, data_dir);
            b.put_u32(*part);
        }
        Request::ShardAppend { writer, seq, data } => {
            put_uuid(&mut b, writer);
            b.put_u64(*seq);
            put_blob(&mut b, data);
        }
        Request::ShardFinish { writer, appends } => {
            put_uuid(&mut b, writer);
            b.put_u64(*appends);
        }
        Request::ShardAbort { writer } => put_uuid(&mut b, writer),
        Request::ReadShard {
            bucket,
            key,
            data_dir,
            part,
            offset,
            len,
        }
        | Request::ReadShardData {
            bucket,
            key,
            data_dir,
            part,
            offset,
            len,
        } => {
            put_str(&mut b, bucket);
            put_str(&mut b, key);
            put_uuid(&mut b, data_dir);
            b.put_u32(*part);
            b.put_u64(*offset);
            b.put_u64(*len);
        }
        Request::StatShard {
            bucket,
            key,
            data_dir,
            part,
        } => {
            put_str(&mut b, bucket);
            put_str(&mut b, key);
            put_uuid(&mut b, data_dir);
            b.put_u32(*part);
        }
        Request::RenameData {
            tmp_id,
            bucket,
            key,
            meta,
        } => {
            put_uuid(&mut b, tmp_id);
            put_str(&mut b, bucket);
            put_str(&mut b, key);
            put_blob(&mut b, &meta.to_bytes());
        }
        Request::DeleteTmp { tmp_id } => put_uuid(&mut b, tmp_id),
        Request::Walk { bucket, opts } => {
            put_str(&mut b, bucket);
            put_str(&mut b, &opts.prefix);
            put_opt_str(&mut b, opts.marker.as_deref());
            put_bool(&mut b, opts.delimited);
            b.put_u64(opts.limit as u64);
        }
        Request::ReadBucketConfig { bucket, name }
        | Request::DeleteBucketConfig { bucket, name } => {
            put_str(&mut b, bucket);
            put_str(&mut b, name);
        }
        Request::WriteBucketConfig { bucket, name, data } => {
            put_str(&mut b, bucket);
            put_str(&mut b, name);
            put_blob(&mut b, data);
        }
        Request::CreateUpload { meta } => put_blob(&mut b, &meta.to_bytes()),
        Request::ReadUpload {
            bucket,
            key,
            upload_id,
        }
        | Request::ListParts {
            bucket,
            key,
            upload_id,
        }
        | Request::DeleteUpload {
            bucket,
            key,
            upload_id,
        } => {
            put_str(&mut b, bucket);
            put_str(&mut b, key);
            put_str(&mut b, upload_id);
        }
        Request::CommitPart {
            tmp_id,
            bucket,
            key,
            upload_id,
            part,
        } => {
            put_uuid(&mut b, tmp_id);
            put_str(&mut b, bucket);
            put_str(&mut b, key);
            put_str(&mut b, upload_id);
            put_blob(&mut b, &part.to_bytes());
        }
        Request::StageParts {
            bucket,
            key,
            upload_id,
            parts,
            tmp_id,
            data_dir,
        } => {
            put_str(&mut b, bucket);
            put_str(&mut b, key);
            put_str(&mut b, upload_id);
            put_count(&mut b, parts.len());
            for p in parts {
                put_blob(&mut b, &p.to_bytes());
            }
            put_uuid(&mut b, tmp_id);
            put_uuid(&mut b, data_dir);
        }
        Request::ListUploads { bucket } => put_opt_str(&mut b, bucket.as_deref()),
    }
    (req.method() as u16, b.freeze())
}

/// Encodes a successful answer.
pub fn encode_response(resp: &Response) -> Bytes {
    let mut b = BytesMut::with_capacity(match resp {
        Response::Data(d) => 2 + 4 + d.len(),
        Response::Meta(m) => 1024 + m.inline.as_ref().map_or(0, |i| i.len()),
        Response::Walk(w) => 64 + 512 * w.len(),
        _ => 128,
    });
    b.put_u8(DRIVE_PROTO_VERSION);
    b.put_u8(resp.kind());
    match resp {
        Response::Unit => {}
        Response::DiskInfo(d) => {
            put_str(&mut b, &d.endpoint);
            match &d.id {
                None => b.put_u8(0),
                Some(id) => {
                    b.put_u8(1);
                    put_uuid(&mut b, id);
                }
            }
            b.put_u64(d.total);
            b.put_u64(d.free);
        }
        Response::Volumes(v) => {
            put_count(&mut b, v.len());
            for vol in v {
                put_vol(&mut b, vol);
            }
        }
        Response::Volume(vol) => put_vol(&mut b, vol),
        Response::Meta(m) => put_blob(&mut b, &m.to_bytes()),
        Response::Writer(id) => put_uuid(&mut b, id),
        Response::Data(d) => put_blob(&mut b, d),
        Response::Len(n) => b.put_u64(*n),
        Response::Walk(entries) => {
            put_count(&mut b, entries.len());
            for e in entries {
                match e {
                    WalkEntry::Prefix(p) => {
                        b.put_u8(0);
                        put_str(&mut b, p);
                    }
                    WalkEntry::Object { key, meta } => {
                        b.put_u8(1);
                        put_str(&mut b, key);
                        put_blob(&mut b, &meta.to_bytes());
                    }
                }
            }
        }
        Response::Upload(u) => put_blob(&mut b, &u.to_bytes()),
        Response::Parts(parts) => {
            put_count(&mut b, parts.len());
            for p in parts {
                put_blob(&mut b, &p.to_bytes());
            }
        }
        Response::Uploads(ups) => {
            put_count(&mut b, ups.len());
            for u in ups {
                put_blob(&mut b, &u.to_bytes());
            }
        }
        Response::Format(None) => b.put_u8(0),
        Response::Format(Some(f)) => {
            b.put_u8(1);
            put_blob(&mut b, &f.to_bytes());
        }
    }
    b.freeze()
}

/// Decodes an embedded `format.json` (its own versioned format).
fn format(b: &[u8]) -> Result<FormatV1, ProtoError> {
    FormatV1::from_bytes(b).map_err(|e| ProtoError::Meta(e.to_string()))
}

fn put_vol(b: &mut BytesMut, v: &VolInfo) {
    put_str(b, &v.name);
    b.put_i64(v.created_ns);
}

// ---- decoding ----

/// A checked reader over a payload; blobs are zero-copy slices of it.
struct Reader {
    b: Bytes,
}

impl Reader {
    fn need(&self, n: usize) -> Result<(), ProtoError> {
        if self.b.remaining() < n {
            return Err(ProtoError::Truncated {
                need: n,
                have: self.b.remaining(),
            });
        }
        Ok(())
    }

    fn u8(&mut self) -> Result<u8, ProtoError> {
        self.need(1)?;
        Ok(self.b.get_u8())
    }

    fn u16(&mut self) -> Result<u16, ProtoError> {
        self.need(2)?;
        Ok(self.b.get_u16())
    }

    fn u32(&mut self) -> Result<u32, ProtoError> {
        self.need(4)?;
        Ok(self.b.get_u32())
    }

    fn u64(&mut self) -> Result<u64, ProtoError> {
        self.need(8)?;
        Ok(self.b.get_u64())
    }

    fn i64(&mut self) -> Result<i64, ProtoError> {
        self.need(8)?;
        Ok(self.b.get_i64())
    }

    fn bool(&mut self) -> Result<bool, ProtoError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(ProtoError::BadTag { what: "bool", tag }),
        }
    }

    fn uuid(&mut self) -> Result<Uuid, ProtoError> {
        self.need(16)?;
        let mut u = [0u8; 16];
        self.b.copy_to_slice(&mut u);
        Ok(Uuid::from_bytes(u))
    }

    fn blob(&mut self) -> Result<Bytes, ProtoError> {
        let n = self.u32()? as usize;
        self.need(n)?;
        Ok(self.b.split_to(n))
    }

    fn string(&mut self) -> Result<String, ProtoError> {
        let b = self.blob()?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::BadUtf8)
    }

    fn opt_string(&mut self) -> Result<Option<String>, ProtoError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.string().map(Some),
            tag => Err(ProtoError::BadTag {
                what: "option",
                tag,
            }),
        }
    }

    /// A list count, checked against the bytes left (every item takes at least `min_item`).
    fn count(&mut self, min_item: usize) -> Result<usize, ProtoError> {
        let n = self.u32()? as usize;
        self.need(n.saturating_mul(min_item))?;
        Ok(n)
    }

    /// A counted list of items of at least `min_item` bytes each, read by `item`. The count is
    /// checked against the bytes left and the preallocation capped, so a lying count can neither
    /// read past the message nor reserve more than [`PREALLOC_ITEMS`] slots up front.
    fn list<T>(
        &mut self,
        min_item: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, ProtoError>,
    ) -> Result<Vec<T>, ProtoError> {
        let n = self.count(min_item)?;
        let mut v = Vec::with_capacity(n.min(PREALLOC_ITEMS));
        for _ in 0..n {
            v.push(item(self)?);
        }
        Ok(v)
    }

    fn meta(&mut self) -> Result<ObjectMeta, ProtoError> {
        let b = self.blob()?;
        ObjectMeta::from_shared(b).map_err(|e| ProtoError::Meta(e.to_string()))
    }

    fn upload(&mut self) -> Result<UploadMeta, ProtoError> {
        let b = self.blob()?;
        UploadMeta::from_bytes(&b).map_err(|e| ProtoError::Meta(e.to_string()))
    }

    fn part(&mut self) -> Result<PartMeta, ProtoError> {
        let b = self.blob()?;
        PartMeta::from_bytes(&b).map_err(|e| ProtoError::Meta(e.to_string()))
    }

    fn end(self) -> Result<(), ProtoError> {
        match self.b.remaining() {
            0 => Ok(()),
            n => Err(ProtoError::Trailing(n)),
        }
    }

    fn version(&mut self) -> Result<(), ProtoError> {
        match self.u8()? {
            DRIVE_PROTO_VERSION => Ok(()),
            got => Err(ProtoError::UnsupportedVersion { got }),
        }
    }
}

/// The payload of a [`Request::ShardAppend`] of `len` bytes without the bytes themselves: the
/// data plane sends this as the control payload and the bytes as a bulk frame that the server
/// reads in after it ([`crate::wire::FLAG_BULK_BODY`]), so that prefix and bytes together are
/// exactly `encode_request(drive, ShardAppend { writer, seq, data })`.
pub fn encode_shard_append_prefix(drive: u16, writer: Uuid, seq: u64, len: u32) -> (u16, Bytes) {
    let mut b = BytesMut::with_capacity(40);
    b.put_u8(DRIVE_PROTO_VERSION);
    b.put_u16(drive);
    put_uuid(&mut b, &writer);
    b.put_u64(seq);
    b.put_u32(len);
    (Method::ShardAppend as u16, b.freeze())
}

/// Decodes a request: `(drive index, request)`. Blob fields (shard data, configuration blobs)
/// are slices of `payload`, not copies.
pub fn decode_request(method: u16, payload: Bytes) -> Result<(u16, Request), ProtoError> {
    let m = Method::from_u16(method).ok_or(ProtoError::UnknownMethod(method))?;
    let mut r = Reader { b: payload };
    r.version()?;
    let drive = r.u16()?;
    let req = match m {
        Method::DiskInfo => Request::DiskInfo,
        Method::ReadFormat => Request::ReadFormat,
        Method::WriteFormat => Request::WriteFormat {
            format: format(&r.blob()?)?,
        },
        Method::MakeVolume => Request::MakeVolume {
            bucket: r.string()?,
        },
        Method::ListVolumes => Request::ListVolumes,
        Method::StatVolume => Request::StatVolume {
            bucket: r.string()?,
        },
        Method::DeleteVolume => Request::DeleteVolume {
            bucket: r.string()?,
            force: r.bool()?,
        },
        Method::ReadMeta => Request::ReadMeta {
            bucket: r.string()?,
            key: r.string()?,
        },
        Method::WriteMeta => Request::WriteMeta {
            bucket: r.string()?,
            key: r.string()?,
            meta: r.meta()?,
        },
        Method::ShardOpen => Request::ShardOpen {
            tmp_id: r.uuid()?,
            data_dir: r.uuid()?,
            part: r.u32()?,
        },
        Method::ShardAppend => Request::ShardAppend {
            writer: r.uuid()?,
            seq: r.u64()?,
            data: r.blob()?,
        },
        Method::ShardFinish => Request::ShardFinish {
            writer: r.uuid()?,
            appends: r.u64()?,
        },
        Method::ShardAbort => Request::ShardAbort { writer: r.uuid()? },
        Method::ReadShard => Request::ReadShard {
            bucket: r.string()?,
            key: r.string()?,
            data_dir: r.uuid()?,
            part: r.u32()?,
            offset: r.u64()?,
            len: r.u64()?,
        },
        Method::ReadShardData => Request::ReadShardData {
            bucket: r.string()?,
            key: r.string()?,
            data_dir: r.uuid()?,
            part: r.u32()?,
            offset: r.u64()?,
            len: r.u64()?,
        },
        Method::StatShard => Request::StatShard {
            bucket: r.string()?,
            key: r.string()?,
            data_dir: r.uuid()?,
            part: r.u32()?,
        },
        Method::RenameData => Request::RenameData {
            tmp_id: r.uuid()?,
            bucket: r.string()?,
            key: r.string()?,
            meta: r.meta()?,
        },
        Method::DeleteObject => Request::DeleteObject {
            bucket: r.string()?,
            key: r.string()?,
        },
        Method::DeleteTmp => Request::DeleteTmp { tmp_id: r.uuid()? },
        Method::Walk => {
            let bucket = r.string()?;
            let prefix = r.string()?;
            let marker = r.opt_string()?;
            let delimited = r.bool()?;
            let limit = r.u64()?;
            let limit = usize::try_from(limit).map_err(|_| ProtoError::TooLong {
                what: "walk limit",
                len: limit,
            })?;
            Request::Walk {
                bucket,
                opts: WalkOptions {
                    prefix,
                    marker,
                    delimited,
                    limit,
                },
            }
        }
        Method::ReadBucketConfig => Request::ReadBucketConfig {
            bucket: r.string()?,
            name: r.string()?,
        },
        Method::WriteBucketConfig => Request::WriteBucketConfig {
            bucket: r.string()?,
            name: r.string()?,
            data: r.blob()?,
        },
        Method::DeleteBucketConfig => Request::DeleteBucketConfig {
            bucket: r.string()?,
            name: r.string()?,
        },
        Method::CreateUpload => Request::CreateUpload { meta: r.upload()? },
        Method::ReadUpload => Request::ReadUpload {
            bucket: r.string()?,
            key: r.string()?,
            upload_id: r.string()?,
        },
        Method::CommitPart => Request::CommitPart {
            tmp_id: r.uuid()?,
            bucket: r.string()?,
            key: r.string()?,
            upload_id: r.string()?,
            part: r.part()?,
        },
        Method::ListParts => Request::ListParts {
            bucket: r.string()?,
            key: r.string()?,
            upload_id: r.string()?,
        },
        Method::StageParts => {
            let bucket = r.string()?;
            let key = r.string()?;
            let upload_id = r.string()?;
            let parts = r.list(4, |r| r.part())?;
            Request::StageParts {
                bucket,
                key,
                upload_id,
                parts,
                tmp_id: r.uuid()?,
                data_dir: r.uuid()?,
            }
        }
        Method::DeleteUpload => Request::DeleteUpload {
            bucket: r.string()?,
            key: r.string()?,
            upload_id: r.string()?,
        },
        Method::ListUploads => Request::ListUploads {
            bucket: r.opt_string()?,
        },
    };
    r.end()?;
    Ok((drive, req))
}

/// Decodes a successful answer. A `Data` body is a slice of `payload`, not a copy.
pub fn decode_response(payload: Bytes) -> Result<Response, ProtoError> {
    let mut r = Reader { b: payload };
    r.version()?;
    let resp = match r.u8()? {
        0 => Response::Unit,
        1 => {
            let endpoint = r.string()?;
            let id = match r.u8()? {
                0 => None,
                1 => Some(r.uuid()?),
                tag => {
                    return Err(ProtoError::BadTag {
                        what: "option",
                        tag,
                    })
                }
            };
            Response::DiskInfo(DiskInfo {
                endpoint,
                id,
                total: r.u64()?,
                free: r.u64()?,
            })
        }
        2 => Response::Volumes(r.list(12, vol)?),
        3 => Response::Volume(vol(&mut r)?),
        4 => Response::Meta(r.meta()?),
        5 => Response::Writer(r.uuid()?),
        6 => Response::Data(r.blob()?),
        7 => Response::Len(r.u64()?),
        8 => Response::Walk(r.list(5, |r| match r.u8()? {
            0 => Ok(WalkEntry::Prefix(r.string()?)),
            1 => Ok(WalkEntry::Object {
                key: r.string()?,
                meta: r.meta()?,
            }),
            tag => Err(ProtoError::BadTag {
                what: "walk entry",
                tag,
            }),
        })?),
        9 => Response::Upload(r.upload()?),
        10 => Response::Parts(r.list(4, |r| r.part())?),
        11 => Response::Uploads(r.list(4, |r| r.upload())?),
        12 => Response::Format(match r.u8()? {
            0 => None,
            1 => Some(format(&r.blob()?)?),
            tag => {
                return Err(ProtoError::BadTag {
                    what: "format",
                    tag,
                })
            }
        }),
        kind => return Err(ProtoError::UnknownKind(kind)),
    };
    r.end()?;
    Ok(resp)
}

fn vol(r: &mut Reader) -> Result<VolInfo, ProtoError> {
    Ok(VolInfo {
        name: r.string()?,
        created_ns: r.i64()?,
    })
}

// ---- errors ----

/// Error-frame codes of the drive protocol (declared in the registry, [`crate::methods`]).
pub use crate::methods::drive_codes as codes;

/// The error frame `(code, message)` that carries `e`.
pub fn encode_drive_error(e: &DriveError) -> (u16, String) {
    match e {
        DriveError::VolumeNotFound => (codes::VOLUME_NOT_FOUND, String::new()),
        DriveError::VolumeExists => (codes::VOLUME_EXISTS, String::new()),
        DriveError::VolumeNotEmpty => (codes::VOLUME_NOT_EMPTY, String::new()),
        DriveError::FileNotFound => (codes::FILE_NOT_FOUND, String::new()),
        DriveError::Truncated {
            offset,
            wanted,
            len,
        } => (codes::TRUNCATED, format!("{offset} {wanted} {len}")),
        DriveError::CorruptMeta(m) => (codes::CORRUPT_META, m.clone()),
        DriveError::UnsupportedVersion { found, supported } => {
            (codes::UNSUPPORTED_VERSION, format!("{found} {supported}"))
        }
        DriveError::InvalidName(m) => (codes::INVALID_NAME, m.clone()),
        DriveError::Unusable(m) => (codes::UNUSABLE, m.clone()),
        DriveError::DiskFull => (codes::DISK_FULL, String::new()),
        DriveError::Io(e) => (codes::IO, e.to_string()),
    }
}

/// The [`DriveError`] an error frame carries, or `None` when `code` is not a drive error code.
/// A structured message that does not parse becomes an `Io` error that says so.
pub fn decode_drive_error(code: u16, message: &str) -> Option<DriveError> {
    let numbers = |n: usize| -> Option<Vec<u64>> {
        let v: Vec<u64> = message
            .split(' ')
            .map(|s| s.parse().ok())
            .collect::<Option<_>>()?;
        (v.len() == n).then_some(v)
    };
    let malformed = || {
        DriveError::Io(std::io::Error::other(format!(
            "peer sent drive error {code} with a malformed message {message:?}"
        )))
    };
    Some(match code {
        codes::VOLUME_NOT_FOUND => DriveError::VolumeNotFound,
        codes::VOLUME_EXISTS => DriveError::VolumeExists,
        codes::VOLUME_NOT_EMPTY => DriveError::VolumeNotEmpty,
        codes::FILE_NOT_FOUND => DriveError::FileNotFound,
        codes::TRUNCATED => match numbers(3) {
            Some(v) => match usize::try_from(v[1]) {
                Ok(wanted) => DriveError::Truncated {
                    offset: v[0],
                    wanted,
                    len: v[2],
                },
                Err(_) => malformed(),
            },
            None => malformed(),
        },
        codes::CORRUPT_META => DriveError::CorruptMeta(message.to_owned()),
        codes::UNSUPPORTED_VERSION => match numbers(2) {
            Some(v) => match (u32::try_from(v[0]), u32::try_from(v[1])) {
                (Ok(found), Ok(supported)) => DriveError::UnsupportedVersion { found, supported },
                _ => malformed(),
            },
            None => malformed(),
        },
        codes::INVALID_NAME => DriveError::InvalidName(message.to_owned()),
        codes::UNUSABLE => DriveError::Unusable(message.to_owned()),
        codes::DISK_FULL => DriveError::DiskFull,
        codes::IO => DriveError::Io(std::io::Error::other(message.to_owned())),
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
