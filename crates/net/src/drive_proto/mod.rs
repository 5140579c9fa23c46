//! The messages of the `Drive` trait's remote side: one RPC method per trait method, generated
//! from one table ([`drive_protocol!`] below), with the request and response payloads encoded by
//! the internode codec ([`crate::codec`]; pure, no IO, no async).
//!
//! Every request payload is
//!
//! ```text
//! offset size
//!      0    1  drive protocol version (3)
//!      1    2  drive index on the serving node (u16 BE)
//!      3    n  the method's arguments, in the order of its table entry's fields
//! ```
//!
//! and every successful response payload is `version (3) | kind (u8) | body`. Fields use the
//! codec's one layout (big-endian integers; strings, byte strings and lists with a u32 length).
//! [`ObjectMeta`] travels in the codec's layout, field by field (its inline shard bytes as a
//! byte string, a slice of the message on the receiving side); upload and part metadata and
//! `format.json` in their own versioned file formats, each as a byte string; shard data is always
//! raw bytes (a slice of the frame's payload on the receiving side, never copied or
//! base64-encoded).
//!
//! # Adding a `Drive` method
//!
//! One entry in the table: its id (never reuse or renumber one), its arguments, its answer's
//! type, the names the server validates, and how the server calls the drive. The entry generates
//! the [`Method`] id, the [`Request`] variant, its encoding and decoding, the validation and the
//! server's dispatch ([`Request::call`]). What is left is the method's two implementations:
//! `LocalDrive` (crates/disk) and [`crate::RemoteDrive`]. The few methods without a `call` are
//! answered by the drive server itself (shard writers, data-plane reads).
//!
//! A failed call answers with an error frame whose code names the exact [`DriveError`] variant
//! (see [`encode_drive_error`]): the object layer's quorum logic tells `FileNotFound` from
//! `VolumeNotFound` from `Unusable`, so none of them may be merged on the way.
//!
//! Decoding never trusts a length (see [`crate::codec`]): any garbage is a [`CodecError`], never a
//! panic.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use quarry_disk::multipart::validate_upload_id;
use quarry_disk::path::{validate_bucket, validate_key};
use quarry_disk::{
    validate_config_name, DiskInfo, Drive, DriveError, ErasureInfo, FormatV1, ObjectMeta, PartInfo,
    PartMeta, UploadMeta, VolInfo, WalkEntry, WalkOptions,
};
use uuid::Uuid;

use crate::codec::{self, BufExt, BufMutExt, Codec, CodecError};

/// The drive protocol version this build speaks (2: the one internode codec; 3: object
/// metadata in the codec's layout instead of its JSON file format; 4: walk answers, a key's
/// versions and a drive's uploads bounded in bytes, in pages).
pub const DRIVE_PROTO_VERSION: u8 = 4;

/// First method id of the drive protocol (see the registry, [`crate::methods`]).
pub const METHOD_BASE: u16 = crate::methods::DRIVE_BASE;

/// What [`Request::call`] did with a request.
pub enum Dispatch {
    /// The drive answered (or failed).
    Done(Result<Response, DriveError>),
    /// A method the drive server answers itself (no `call` in the table): here it is back.
    Server(Request),
}

/// The table of the drive protocol. Each entry:
///
/// ```text
/// Name = id { field: Type, ... } -> AnswerType
///     [, check <expr over the fields: Result<(), DriveError>>]
///     [, call |d| <async body over the fields and d: &dyn Drive, giving Result<AnswerType, DriveError>>]
///     ;
/// ```
macro_rules! drive_protocol {
    ($(
        $(#[$doc:meta])*
        $name:ident = $n:literal { $($f:ident : $t:ty),* $(,)? } -> $resp:ty
        $(, check $check:expr)?
        $(, call |$d:ident| $call:expr)?
        ;
    )*) => {
        /// One RPC method per `Drive` trait method (the shard writer takes four).
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

        /// A call on one drive, with its arguments.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Request {
            $($(#[$doc])* $name { $($f: $t),* },)*
        }

        impl Request {
            pub fn method(&self) -> Method {
                match self {
                    $(Request::$name { .. } => Method::$name,)*
                }
            }

            /// The request's arguments, in its table entry's order.
            fn encode_args<B: BufMut>(&self, buf: &mut B) {
                match self {
                    $(Request::$name { $($f),* } => { $(buf.put_value($f);)* })*
                }
            }

            /// The arguments of a `method` request.
            fn decode_args<B: Buf>(method: Method, buf: &mut B) -> Result<Request, CodecError> {
                Ok(match method {
                    $(Method::$name => Request::$name { $($f: buf.get_value()?,)* },)*
                })
            }

            /// Checks every name the request carries (bucket, key, upload id, configuration
            /// name) before a drive sees it: [`DriveError::InvalidName`].
            #[allow(unused_variables)]
            pub fn validate(&self) -> Result<(), DriveError> {
                match self {
                    $(Request::$name { $($f),* } => drive_protocol!(@check $($check)?),)*
                }
            }

            /// Runs the request on `drive`, after [`Request::validate`]; the methods without a
            /// `call` in the table come back as [`Dispatch::Server`].
            pub async fn call(self, drive: &dyn Drive) -> Dispatch {
                if let Err(e) = self.validate() {
                    return Dispatch::Done(Err(e));
                }
                match self {
                    $(Request::$name { $($f),* } =>
                        drive_protocol!(@call drive, $name, $resp, [$($f),*] $(, $d, $call)?),)*
                }
            }
        }
    };
    (@check) => { Ok(()) };
    (@check $check:expr) => { $check };
    (@call $drive:ident, $name:ident, $resp:ty, [$($f:ident),*]) => {
        Dispatch::Server(Request::$name { $($f),* })
    };
    (@call $drive:ident, $name:ident, $resp:ty, [$($f:ident),*], $d:ident, $call:expr) => {{
        let $d: &dyn Drive = $drive;
        let r: Result<$resp, DriveError> = async move { $call }.await;
        Dispatch::Done(r.map(Response::from))
    }};
}

fn names_bk(bucket: &str, key: &str) -> Result<(), DriveError> {
    validate_bucket(bucket).and_then(|_| validate_key(key))
}

fn names_upload(bucket: &str, key: &str, upload_id: &str) -> Result<(), DriveError> {
    names_bk(bucket, key).and_then(|_| validate_upload_id(upload_id))
}

fn names_config(bucket: &str, name: &str) -> Result<(), DriveError> {
    validate_bucket(bucket).and_then(|_| validate_config_name(name))
}

/// A length from the wire as this platform's `usize`.
fn platform_len(len: u64) -> Result<usize, DriveError> {
    usize::try_from(len).map_err(|_| {
        DriveError::Io(std::io::Error::other(format!(
            "a read of {len} bytes does not fit this platform"
        )))
    })
}

drive_protocol! {
    DiskInfo = 0 {} -> DiskInfo, call |d| d.disk_info().await;
    MakeVolume = 1 { bucket: String } -> (),
        check validate_bucket(bucket),
        call |d| d.make_volume(&bucket).await;
    ListVolumes = 2 {} -> Vec<VolInfo>, call |d| d.list_volumes().await;
    StatVolume = 3 { bucket: String } -> VolInfo,
        check validate_bucket(bucket),
        call |d| d.stat_volume(&bucket).await;
    DeleteVolume = 4 { bucket: String, force: bool } -> (),
        check validate_bucket(bucket),
        call |d| d.delete_volume(&bucket, force).await;
    ReadMeta = 5 { bucket: String, key: String } -> ObjectMeta,
        check names_bk(bucket, key),
        call |d| d.read_meta(&bucket, &key).await;
    WriteMeta = 6 { bucket: String, key: String, meta: ObjectMeta } -> (),
        check names_bk(bucket, key),
        call |d| d.write_meta(&bucket, &key, &meta).await;
    /// Opens a shard writer; answered with [`Response::Writer`].
    ShardOpen = 7 { tmp_id: Uuid, data_dir: Uuid, part: u32 } -> Uuid;
    /// Appends the `seq`-th chunk (0-based) to an open writer. Appends may arrive out of order;
    /// the server writes them in `seq` order.
    ShardAppend = 8 { writer: Uuid, seq: u64, data: Bytes } -> ();
    /// Flushes and fsyncs the writer after exactly `appends` chunks, and closes it.
    ShardFinish = 9 { writer: Uuid, appends: u64 } -> ();
    /// Closes a writer without finishing it (its tmp data is left to `delete_tmp` or the sweep).
    ShardAbort = 10 { writer: Uuid } -> ();
    ReadShard = 11 {
        bucket: String, key: String, data_dir: Uuid, part: u32, offset: u64, len: u64,
    } -> Bytes,
        check names_bk(bucket, key),
        call |d| d.read_shard(&bucket, &key, data_dir, part, offset, platform_len(len)?).await;
    StatShard = 12 { bucket: String, key: String, data_dir: Uuid, part: u32 } -> u64,
        check names_bk(bucket, key),
        call |d| d.stat_shard(&bucket, &key, data_dir, part).await;
    RenameData = 13 { tmp_id: Uuid, bucket: String, key: String, meta: ObjectMeta } -> (),
        check names_bk(bucket, key),
        call |d| d.rename_data(tmp_id, &bucket, &key, &meta).await;
    DeleteObject = 14 { bucket: String, key: String } -> (),
        check names_bk(bucket, key),
        call |d| d.delete_object(&bucket, &key).await;
    DeleteTmp = 15 { tmp_id: Uuid } -> (), call |d| d.delete_tmp(tmp_id).await;
    /// At most `opts.limit` entries, and no more than fit in `max_bytes` encoded (at least
    /// one): objects of thousands of parts would not fit a frame by the hundred.
    Walk = 16 { bucket: String, opts: WalkOptions, max_bytes: u64 } -> WalkPage,
        check validate_bucket(bucket),
        call |d| walk_fitting(d, &bucket, opts, max_bytes).await;
    ReadBucketConfig = 17 { bucket: String, name: String } -> Bytes,
        check names_config(bucket, name),
        call |d| d.read_bucket_config(&bucket, &name).await;
    WriteBucketConfig = 18 { bucket: String, name: String, data: Bytes } -> (),
        check names_config(bucket, name),
        call |d| d.write_bucket_config(&bucket, &name, &data).await;
    DeleteBucketConfig = 19 { bucket: String, name: String } -> (),
        check names_config(bucket, name),
        call |d| d.delete_bucket_config(&bucket, &name).await;
    CreateUpload = 20 { meta: UploadMeta } -> (),
        check names_upload(&meta.bucket, &meta.key, &meta.upload_id),
        call |d| d.create_upload(&meta).await;
    ReadUpload = 21 { bucket: String, key: String, upload_id: String } -> UploadMeta,
        check names_upload(bucket, key, upload_id),
        call |d| d.read_upload(&bucket, &key, &upload_id).await;
    CommitPart = 22 {
        tmp_id: Uuid, bucket: String, key: String, upload_id: String, part: PartMeta,
    } -> (),
        check names_upload(bucket, key, upload_id),
        call |d| d.commit_part(tmp_id, &bucket, &key, &upload_id, &part).await;
    ListParts = 23 { bucket: String, key: String, upload_id: String } -> Vec<PartMeta>,
        check names_upload(bucket, key, upload_id),
        call |d| d.list_parts(&bucket, &key, &upload_id).await;
    StageParts = 24 {
        bucket: String, key: String, upload_id: String, parts: Vec<PartMeta>, tmp_id: Uuid,
        data_dir: Uuid,
    } -> (),
        check names_upload(bucket, key, upload_id),
        call |d| d.stage_parts(&bucket, &key, &upload_id, &parts, tmp_id, data_dir).await;
    DeleteUpload = 25 { bucket: String, key: String, upload_id: String } -> (),
        check names_upload(bucket, key, upload_id),
        call |d| d.delete_upload(&bucket, &key, &upload_id).await;
    /// Uploads (of `bucket`, or of every bucket) in (bucket, key, upload id) order after
    /// `after` (empty, or those three), as many as fit in `max_bytes` encoded (at least one):
    /// a drive may hold thousands, stale ones above all.
    ListUploads = 26 { bucket: Option<String>, after: Vec<String>, max_bytes: u64 } -> UploadsPage,
        check bucket.as_deref().map_or(Ok(()), validate_bucket),
        call |d| d.list_uploads(bucket.as_deref()).await.map(|u| UploadsPage::fit(u, &after, max_bytes));
    ReadFormat = 27 {} -> Option<FormatV1>, call |d| d.read_format().await;
    WriteFormat = 28 { format: FormatV1 } -> (), call |d| d.write_format(&format).await;
    /// `read_shard` on the data plane: the same arguments as [`Request::ReadShard`], but the
    /// answer is the raw shard bytes, sent as a bulk frame ([`crate::wire::FLAG_BULK`]) that the
    /// caller reads straight into a pooled buffer; not a [`Response`].
    ReadShardData = 29 {
        bucket: String, key: String, data_dir: Uuid, part: u32, offset: u64, len: u64,
    } -> Bytes,
        check names_bk(bucket, key);
    /// One version of a key (`version_id` `None`: the `null` version).
    ReadVersion = 30 { bucket: String, key: String, version_id: Option<Uuid> } -> ObjectMeta,
        check names_bk(bucket, key),
        call |d| d.read_version(&bucket, &key, version_id).await;
    /// The versions of a key after the first `skip`, newest first, without inline data: as
    /// many as fit in `max_bytes` encoded (at least one). A key of hundreds of versions of
    /// thousands of parts each would not fit a frame.
    ReadVersions = 31 { bucket: String, key: String, skip: u64, max_bytes: u64 } -> VersionsPage,
        check names_bk(bucket, key),
        call |d| d.read_versions(&bucket, &key).await.map(|v| VersionsPage::fit(v, skip, max_bytes));
    DeleteVersion = 32 { bucket: String, key: String, version_id: Option<Uuid> } -> (),
        check names_bk(bucket, key),
        call |d| d.delete_version(&bucket, &key, version_id).await;
    /// The names of a bucket's configuration blobs (what a heal compares).
    ListBucketConfigs = 33 { bucket: String } -> Vec<String>,
        check validate_bucket(bucket),
        call |d| d.list_bucket_configs(&bucket).await;
    /// A range of a multipart upload's part shard file (what a heal rebuilds a copy from).
    ReadPartShard = 34 {
        bucket: String, key: String, upload_id: String, data_dir: Uuid, part: u32, offset: u64,
        len: u64,
    } -> Bytes,
        check names_upload(bucket, key, upload_id),
        call |d| d.read_part_shard((&bucket, &key, &upload_id), data_dir, part, offset,
            platform_len(len)?).await;
}

/// A successful answer. Each method has exactly one kind of answer (its table entry's type).
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
    Walk(WalkPage),
    Upload(UploadMeta),
    Parts(Vec<PartMeta>),
    Uploads(UploadsPage),
    /// A drive's `format.json`, if it has one.
    Format(Option<FormatV1>),
    /// Some of the versions of a key, newest first.
    Versions(VersionsPage),
    /// Names (of a bucket's configuration blobs).
    Names(Vec<String>),
}

impl From<()> for Response {
    fn from(_: ()) -> Response {
        Response::Unit
    }
}

macro_rules! response_from {
    ($($t:ty => $v:ident,)*) => {$(
        impl From<$t> for Response {
            fn from(v: $t) -> Response {
                Response::$v(v)
            }
        }
    )*};
}

response_from! {
    DiskInfo => DiskInfo,
    Vec<VolInfo> => Volumes,
    VolInfo => Volume,
    ObjectMeta => Meta,
    Uuid => Writer,
    Bytes => Data,
    u64 => Len,
    WalkPage => Walk,
    UploadMeta => Upload,
    Vec<PartMeta> => Parts,
    UploadsPage => Uploads,
    Option<FormatV1> => Format,
    VersionsPage => Versions,
    Vec<String> => Names,
}

impl Codec for Response {
    fn encode<B: BufMut>(&self, b: &mut B) {
        match self {
            Response::Unit => b.put_u8(0),
            Response::DiskInfo(d) => tagged(b, 1, d),
            Response::Volumes(v) => tagged(b, 2, v),
            Response::Volume(v) => tagged(b, 3, v),
            Response::Meta(m) => tagged(b, 4, m),
            Response::Writer(id) => tagged(b, 5, id),
            Response::Data(d) => tagged(b, 6, d),
            Response::Len(n) => tagged(b, 7, n),
            Response::Walk(w) => tagged(b, 8, w),
            Response::Upload(u) => tagged(b, 9, u),
            Response::Parts(p) => tagged(b, 10, p),
            Response::Uploads(u) => tagged(b, 11, u),
            Response::Format(f) => tagged(b, 12, f),
            Response::Versions(m) => tagged(b, 13, m),
            Response::Names(n) => tagged(b, 14, n),
        }
    }

    fn decode<B: Buf>(b: &mut B) -> Result<Response, CodecError> {
        Ok(match b.get_value::<u8>()? {
            0 => Response::Unit,
            1 => Response::DiskInfo(b.get_value()?),
            2 => Response::Volumes(b.get_value()?),
            3 => Response::Volume(b.get_value()?),
            4 => Response::Meta(b.get_value()?),
            5 => Response::Writer(b.get_value()?),
            6 => Response::Data(b.get_value()?),
            7 => Response::Len(b.get_value()?),
            8 => Response::Walk(b.get_value()?),
            9 => Response::Upload(b.get_value()?),
            10 => Response::Parts(b.get_value()?),
            11 => Response::Uploads(b.get_value()?),
            12 => Response::Format(b.get_value()?),
            13 => Response::Versions(b.get_value()?),
            14 => Response::Names(b.get_value()?),
            kind => {
                return Err(CodecError::Unknown {
                    what: "drive response kind",
                    value: kind.into(),
                })
            }
        })
    }
}

/// A response's kind byte and body.
fn tagged<B: BufMut, T: Codec>(b: &mut B, kind: u8, body: &T) {
    b.put_u8(kind);
    body.encode(b);
}

// ---- the drive's types on the wire ----

crate::codec_struct!(DiskInfo {
    endpoint,
    id,
    total,
    free
});
crate::codec_struct!(VolInfo { name, created_ns });

impl Codec for WalkOptions {
    fn encode<B: BufMut>(&self, b: &mut B) {
        b.put_value(&self.prefix);
        b.put_value(&self.marker);
        b.put_value(&self.delimited);
        b.put_value(&(self.limit as u64));
    }

    fn decode<B: Buf>(b: &mut B) -> Result<WalkOptions, CodecError> {
        let prefix = b.get_value()?;
        let marker = b.get_value()?;
        let delimited = b.get_value()?;
        let limit: u64 = b.get_value()?;
        let limit = usize::try_from(limit).map_err(|_| CodecError::OutOfRange {
            what: "walk limit",
            value: limit,
            min: 0,
            max: usize::MAX as u64,
        })?;
        Ok(WalkOptions {
            prefix,
            marker,
            delimited,
            limit,
        })
    }
}

/// A walk's answer: its entries, and whether more were walked than fit in the answer (then the
/// caller goes on after the last one, though fewer than it asked for came).
#[derive(Debug, Clone, PartialEq)]
pub struct WalkPage {
    pub entries: Vec<WalkEntry>,
    pub more: bool,
}

crate::codec_struct!(WalkPage { entries, more });

/// A walk of `drive` as a drive server answers it: up to `opts.limit` entries, and no more
/// than fit in `max_bytes` encoded (at least one). The drive stops walking at about that many
/// bytes, so that objects of thousands of parts are not read by the hundred to send a few.
async fn walk_fitting(
    drive: &dyn Drive,
    bucket: &str,
    opts: WalkOptions,
    max_bytes: u64,
) -> Result<WalkPage, DriveError> {
    let budget = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    let (mut entries, stopped) = drive.walk_bounded(bucket, &opts, budget).await?;
    // The estimates are never under the encoding: within the budget by them, the answer fits
    // without encoding every entry once more to measure it.
    let estimate = entries
        .iter()
        .fold(0usize, |n, e| n.saturating_add(e.wire_estimate()));
    let mut more = stopped;
    if estimate > budget {
        let fit = fitting(&entries, max_bytes);
        more |= fit < entries.len();
        entries.truncate(fit);
    }
    Ok(WalkPage { entries, more })
}

/// How many of the first `items` fit in `max_bytes` encoded: at least one, if there is one.
fn fitting<T: Codec>(items: &[T], max_bytes: u64) -> usize {
    let mut scratch = BytesMut::new();
    let mut total = 0u64;
    for (i, e) in items.iter().enumerate() {
        scratch.clear();
        e.encode(&mut scratch);
        total += scratch.len() as u64;
        if total > max_bytes && i > 0 {
            return i;
        }
    }
    items.len()
}

/// A page of a drive's uploads, in (bucket, key, upload id) order, and whether more follow.
#[derive(Debug, Clone, PartialEq)]
pub struct UploadsPage {
    pub uploads: Vec<UploadMeta>,
    pub more: bool,
}

crate::codec_struct!(UploadsPage { uploads, more });

impl UploadsPage {
    /// What an upload is ordered and paged by.
    pub fn order(u: &UploadMeta) -> [&str; 3] {
        [&u.bucket, &u.key, &u.upload_id]
    }

    /// The uploads of `all` after `after` (empty, or an upload's [`UploadsPage::order`]) in
    /// that order, as many as fit in `max_bytes` encoded.
    pub fn fit(mut all: Vec<UploadMeta>, after: &[String], max_bytes: u64) -> UploadsPage {
        all.retain(|u| {
            after.is_empty()
                || Self::order(u)
                    .iter()
                    .copied()
                    .gt(after.iter().map(String::as_str))
        });
        all.sort_unstable_by(|a, b| Self::order(a).cmp(&Self::order(b)));
        let fit = fitting(&all, max_bytes);
        let more = fit < all.len();
        all.truncate(fit);
        UploadsPage { uploads: all, more }
    }
}

/// A page of a key's versions: those after the first `skip` that fit, with how many the key has
/// and a digest of which they are, so that a caller reading it in pages sees whether the key
/// changed between two of them.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionsPage {
    pub metas: Vec<ObjectMeta>,
    /// How many versions the key has.
    pub total: u64,
    /// FNV-1a of every version's id and time, in order.
    pub digest: u64,
}

crate::codec_struct!(VersionsPage {
    metas,
    total,
    digest
});

impl VersionsPage {
    /// The versions of `all` after the first `skip` that fit in `max_bytes` encoded.
    pub fn fit(all: Vec<ObjectMeta>, skip: u64, max_bytes: u64) -> VersionsPage {
        const FNV_PRIME: u64 = 0x0100_0000_01b3;
        let mut digest = 0xcbf2_9ce4_8422_2325u64;
        for v in &all {
            let id = v.version_id.map_or([0; 16], |u| *u.as_bytes());
            for b in id.iter().chain(&v.mod_time_ns.to_be_bytes()) {
                digest = (digest ^ u64::from(*b)).wrapping_mul(FNV_PRIME);
            }
        }
        let total = all.len() as u64;
        let skip = usize::try_from(skip).unwrap_or(usize::MAX).min(all.len());
        let mut metas = all;
        metas.drain(..skip);
        metas.truncate(fitting(&metas, max_bytes));
        VersionsPage {
            metas,
            total,
            digest,
        }
    }
}

impl Codec for WalkEntry {
    const MIN_LEN: usize = 5;

    fn encode<B: BufMut>(&self, b: &mut B) {
        match self {
            WalkEntry::Prefix(p) => {
                b.put_u8(0);
                b.put_value(p);
            }
            WalkEntry::Object { key, meta } => {
                b.put_u8(1);
                b.put_value(key);
                b.put_value(&**meta);
            }
        }
    }

    fn decode<B: Buf>(b: &mut B) -> Result<WalkEntry, CodecError> {
        match b.get_value::<u8>()? {
            0 => Ok(WalkEntry::Prefix(b.get_value()?)),
            1 => Ok(WalkEntry::Object {
                key: b.get_value()?,
                meta: std::sync::Arc::new(b.get_value()?),
            }),
            tag => Err(CodecError::Unknown {
                what: "walk entry tag",
                value: tag.into(),
            }),
        }
    }
}

/// A format of its own (versioned by itself), embedded as a byte string.
macro_rules! embedded_format {
    ($($t:ty, $what:literal, |$b:ident| $decode:expr;)*) => {$(
        impl Codec for $t {
            const MIN_LEN: usize = 4;

            fn encode<B: BufMut>(&self, b: &mut B) {
                codec::put_bytes(b, &self.to_bytes());
            }

            fn decode<B: Buf>(b: &mut B) -> Result<$t, CodecError> {
                let $b: Bytes = b.get_value()?;
                $decode.map_err(|e| CodecError::Invalid { what: $what, why: e.to_string() })
            }
        }
    )*};
}

embedded_format! {
    UploadMeta, "embedded upload metadata", |bytes| UploadMeta::from_bytes(&bytes);
    PartMeta, "embedded part metadata", |bytes| PartMeta::from_bytes(&bytes);
    FormatV1, "embedded format.json", |bytes| FormatV1::from_bytes(&bytes);
}

// Object metadata in the codec's own layout, field by field: every GET reads it from each drive
// of a set and a listing page from each for every key, and decoding its JSON file format cost
// more than the rest of the message. Its inline data is a slice of the message, not a copy.
crate::codec_struct!(PartInfo { number, size, etag });
crate::codec_struct!(ErasureInfo {
    codec,
    bitrot,
    data,
    parity,
    block_size,
    index,
    distribution,
});

impl Codec for ObjectMeta {
    const MIN_LEN: usize = 4;

    fn encode<B: BufMut>(&self, b: &mut B) {
        let ObjectMeta {
            version,
            version_id,
            delete_marker,
            size,
            mod_time_ns,
            etag,
            headers,
            user_meta,
            checksums,
            erasure,
            data_dir,
            parts,
            inline,
        } = self;
        b.put_value(version);
        b.put_value(version_id);
        b.put_value(delete_marker);
        b.put_value(size);
        b.put_value(mod_time_ns);
        b.put_value(etag);
        b.put_value(headers);
        b.put_value(user_meta);
        b.put_value(checksums);
        b.put_value(erasure);
        b.put_value(data_dir);
        b.put_value(parts);
        b.put_value(inline);
    }

    fn decode<B: Buf>(b: &mut B) -> Result<ObjectMeta, CodecError> {
        let version: u32 = b.get_value()?;
        if !(quarry_disk::META_VERSION_MIN..=quarry_disk::META_VERSION).contains(&version) {
            return Err(CodecError::OutOfRange {
                what: "object metadata format version",
                value: version.into(),
                min: quarry_disk::META_VERSION_MIN.into(),
                max: quarry_disk::META_VERSION.into(),
            });
        }
        Ok(ObjectMeta {
            version,
            version_id: b.get_value()?,
            delete_marker: b.get_value()?,
            size: b.get_value()?,
            mod_time_ns: b.get_value()?,
            etag: b.get_value()?,
            headers: b.get_value()?,
            user_meta: b.get_value()?,
            checksums: b.get_value()?,
            erasure: b.get_value()?,
            data_dir: b.get_value()?,
            parts: b.get_value()?,
            inline: b.get_value()?,
        })
    }
}

// ---- messages ----

/// Bytes to reserve for a request's payload: its bulk fields plus room for the rest.
fn request_capacity(req: &Request) -> usize {
    match req {
        Request::ShardAppend { data, .. } => 64 + data.len(),
        Request::WriteBucketConfig { data, .. } => 256 + data.len(),
        Request::WriteMeta { meta, .. } | Request::RenameData { meta, .. } => {
            1024 + meta.inline.as_ref().map_or(0, |i| i.len())
        }
        _ => 128,
    }
}

/// Encodes a request to drive `drive`: `(method, payload)`.
pub fn encode_request(drive: u16, req: &Request) -> (u16, Bytes) {
    let mut b = BytesMut::with_capacity(request_capacity(req));
    codec::put_version(&mut b, DRIVE_PROTO_VERSION);
    b.put_value(&drive);
    req.encode_args(&mut b);
    (req.method() as u16, b.freeze())
}

/// The payload of a [`Request::ShardAppend`] of `len` bytes without the bytes themselves: the
/// data plane sends this as the control payload and the bytes as a bulk frame that the server
/// reads in after it ([`crate::wire::FLAG_BULK_BODY`]), so that prefix and bytes together are
/// exactly `encode_request(drive, ShardAppend { writer, seq, data })`.
pub fn encode_shard_append_prefix(drive: u16, writer: Uuid, seq: u64, len: u32) -> (u16, Bytes) {
    let mut b = BytesMut::with_capacity(40);
    codec::put_version(&mut b, DRIVE_PROTO_VERSION);
    b.put_value(&drive);
    b.put_value(&writer);
    b.put_value(&seq);
    codec::put_bytes_len(&mut b, len);
    (Method::ShardAppend as u16, b.freeze())
}

/// Decodes a request: `(drive index, request)`. Byte-string fields (shard data, configuration
/// blobs, inline object data) are slices of `payload`, not copies.
pub fn decode_request(method: u16, mut payload: Bytes) -> Result<(u16, Request), CodecError> {
    let m = Method::from_u16(method).ok_or(CodecError::Unknown {
        what: "drive method",
        value: method.into(),
    })?;
    codec::get_version(&mut payload, "drive protocol", DRIVE_PROTO_VERSION)?;
    let drive = payload.get_value()?;
    let req = Request::decode_args(m, &mut payload)?;
    codec::finish(&payload)?;
    Ok((drive, req))
}

/// Encodes a successful answer.
pub fn encode_response(resp: &Response) -> Bytes {
    let mut b = BytesMut::with_capacity(match resp {
        Response::Data(d) => 2 + 4 + d.len(),
        Response::Meta(m) => 1024 + m.inline.as_ref().map_or(0, |i| i.len()),
        Response::Walk(w) => 64 + 512 * w.entries.len(),
        _ => 128,
    });
    codec::put_version(&mut b, DRIVE_PROTO_VERSION);
    b.put_value(resp);
    b.freeze()
}

/// Decodes a successful answer. A `Data` body is a slice of `payload`, not a copy.
pub fn decode_response(mut payload: Bytes) -> Result<Response, CodecError> {
    codec::get_version(&mut payload, "drive protocol", DRIVE_PROTO_VERSION)?;
    let resp = payload.get_value()?;
    codec::finish(&payload)?;
    Ok(resp)
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
