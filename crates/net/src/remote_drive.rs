//! [`RemoteDrive`]: the [`Drive`] trait on a drive of a peer, over the control RPC.
//!
//! Every trait method is one call (or a few: long walks and large reads are paged) of the drive
//! protocol ([`crate::drive_proto`]) to the peer's [`crate::DriveServer`], each bounded by a
//! timeout. How a failure is reported matters to the object layer's quorum logic:
//! - a peer that cannot be reached (connection refused, timed out, marked down by the client's
//!   back-off, handshake refused) is [`DriveError::Unusable`]: the drive counts as offline, never
//!   as a drive that positively said "not found";
//! - an error the peer's drive reported arrives as the same [`DriveError`] variant, with its
//!   fields (`FileNotFound`, `VolumeNotFound`, `Truncated { .. }`, ...);
//! - anything else (a malformed answer, a call the peer could not decode) is `Io`.
//!
//! A shard writer ([`Drive::create_shard_writer`]) opens a writer on the peer, then streams the
//! bytes in appends of [`RemoteDriveConfig::append_chunk`] bytes, at most
//! [`RemoteDriveConfig::appends_in_flight`] at once (the peer writes them in order whatever order
//! they arrive in). That bound is a sliding window over the sequence numbers, not only a count:
//! the peer answers an append that arrives ahead of the next one it can write at once (it keeps
//! it), and refuses one more than its append window ahead, so while one append is slow the
//! writer must not send the appends after it. `finish` waits for every append, then asks the
//! peer to flush and fsync, as a local writer does. Dropping it without `finish` asks the peer to close the writer (best
//! effort; a peer also drops writers that idle) and leaves the tmp data to `delete_tmp` or the
//! peer's start-up sweep.
//!
//! [`Drive::read_shard`] goes through the [`DataPlane`] given at construction (by default the
//! client's [`TcpDataPlane`](crate::TcpDataPlane), see [`RpcClient::data_plane`]): the bytes land in
//! a pooled buffer and are handed to the caller as that buffer ([`ShardData::into_bytes`]), without
//! a copy when the range fits one buffer, which a shard chunk of one block always does. Errors of
//! the data plane map as above: the peer's drive errors keep their variant, an unreachable peer or a
//! transfer that broke is `Unusable`. Writer appends go through it too
//! ([`DataPlane::append_shard`]); opening, finishing and aborting a writer are control calls.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use quarry_disk::{
    DiskInfo, Drive, DriveError, FormatV1, ObjectMeta, PartMeta, ShardWriter, UploadMeta, VolInfo,
    WalkEntry, WalkOptions,
};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::dataplane::{DataPlane, DataPlaneError, ShardData, ShardRange};
use crate::drive_proto::{self, codes, Request, Response, UploadsPage, WalkPage};
use crate::rpc::{RpcClient, RpcError};
use quarry_buf::PooledBuf;

type Result<T, E = DriveError> = std::result::Result<T, E>;

/// Settings of a [`RemoteDrive`].
#[derive(Debug, Clone)]
pub struct RemoteDriveConfig {
    /// Bound on each call.
    pub call_timeout: Duration,
    /// Bound on calls that may scan or move a lot on the peer: walks, deleting a bucket with
    /// `force`, staging parts, listing uploads, and the fsync of a finished shard.
    pub slow_call_timeout: Duration,
    /// Bytes per append of a shard writer (writes are gathered up to this size).
    pub append_chunk: usize,
    /// Appends of one shard writer in flight at once, and so how far an append may be ahead of
    /// the oldest one still unanswered. At most the peer's append window
    /// ([`crate::DriveServerConfig::append_window`], 16 by default), which refuses appends further
    /// ahead.
    pub appends_in_flight: usize,
    /// Entries asked for per walk call; a longer walk is paged by marker.
    pub walk_page: usize,
    /// Bytes a paged answer may hold: a walk's entries, a key's versions, a drive's uploads.
    /// The peer answers fewer (and says more follow) where they would not fit.
    pub page_bytes: usize,
}

impl RemoteDriveConfig {
    /// Defaults that fit `client`'s timeout and frame size.
    pub fn for_client(client: &RpcClient) -> RemoteDriveConfig {
        let c = client.config();
        // Leave room for the message's own fields in a frame.
        let frame = (c.max_frame as usize).saturating_sub(64 << 10).max(4096);
        RemoteDriveConfig {
            call_timeout: c.call_timeout,
            slow_call_timeout: c.call_timeout * 6,
            append_chunk: frame.min(1 << 20),
            appends_in_flight: 4,
            walk_page: 1000,
            page_bytes: frame,
        }
    }
}

/// A drive of a peer. Cheap to clone (shared).
#[derive(Clone)]
pub struct RemoteDrive {
    inner: Arc<Inner>,
}

struct Inner {
    client: RpcClient,
    /// `host:port` of the peer's control RPC.
    peer: String,
    /// The drive's index on the peer.
    drive: u16,
    endpoint: String,
    config: RemoteDriveConfig,
    /// Where shard reads go.
    data: Arc<dyn DataPlane>,
}

impl std::fmt::Debug for RemoteDrive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteDrive")
            .field("endpoint", &self.inner.endpoint)
            .field("peer", &self.inner.peer)
            .field("drive", &self.inner.drive)
            .field("data_plane", &self.inner.data.name())
            .finish()
    }
}

impl RemoteDrive {
    /// Drive `drive` of the peer whose control RPC listens on `peer` (`host:port`); `endpoint`
    /// names it in logs and errors (e.g. `http://node2:9000/srv/d1`).
    pub fn new(
        client: RpcClient,
        peer: impl Into<String>,
        drive: u16,
        endpoint: impl Into<String>,
    ) -> RemoteDrive {
        let config = RemoteDriveConfig::for_client(&client);
        RemoteDrive::with_config(client, peer, drive, endpoint, config)
    }

    /// With explicit settings, and the client's data plane ([`RpcClient::data_plane`]).
    pub fn with_config(
        client: RpcClient,
        peer: impl Into<String>,
        drive: u16,
        endpoint: impl Into<String>,
        config: RemoteDriveConfig,
    ) -> RemoteDrive {
        let data = client.data_plane();
        RemoteDrive::with_data_plane(client, peer, drive, endpoint, config, data)
    }

    /// With explicit settings and the data plane its shard reads go through (e.g. a verbs backend,
    /// or a TCP one shaped differently from the client's default).
    pub fn with_data_plane(
        client: RpcClient,
        peer: impl Into<String>,
        drive: u16,
        endpoint: impl Into<String>,
        config: RemoteDriveConfig,
        data: Arc<dyn DataPlane>,
    ) -> RemoteDrive {
        RemoteDrive {
            inner: Arc::new(Inner {
                client,
                peer: peer.into(),
                drive,
                endpoint: endpoint.into(),
                config,
                data,
            }),
        }
    }

    /// The data plane this drive's shard reads go through.
    pub fn data_plane(&self) -> &Arc<dyn DataPlane> {
        &self.inner.data
    }

    pub fn peer(&self) -> &str {
        &self.inner.peer
    }

    async fn call(&self, req: Request) -> Result<Response> {
        self.inner.call(req, self.inner.config.call_timeout).await
    }

    async fn slow_call(&self, req: Request) -> Result<Response> {
        self.inner
            .call(req, self.inner.config.slow_call_timeout)
            .await
    }

    async fn unit(&self, req: Request) -> Result<()> {
        match self.call(req).await? {
            Response::Unit => Ok(()),
            other => Err(self.inner.unexpected(&other)),
        }
    }
}

impl Inner {
    async fn call(&self, req: Request, timeout: Duration) -> Result<Response> {
        let (method, payload) = drive_proto::encode_request(self.drive, &req);
        match self
            .client
            .call_with_timeout(&self.peer, method, payload, timeout)
            .await
        {
            Ok(answer) => drive_proto::decode_response(answer)
                .map_err(|e| self.io(format!("malformed answer from {}: {e}", self.peer))),
            Err(e) => Err(self.rpc_error(e)),
        }
    }

    fn io(&self, msg: String) -> DriveError {
        DriveError::Io(std::io::Error::other(format!("{}: {msg}", self.endpoint)))
    }

    fn unexpected(&self, resp: &Response) -> DriveError {
        let kind = format!("{resp:?}");
        self.io(format!(
            "unexpected answer from {}: {}",
            self.peer,
            kind.chars().take(64).collect::<String>()
        ))
    }

    /// Maps a failed call to the error the object layer counts (see the module docs).
    fn rpc_error(&self, e: RpcError) -> DriveError {
        let unusable = |e: &dyn std::fmt::Display| {
            DriveError::Unusable(format!("{} (via {}): {e}", self.endpoint, self.peer))
        };
        match e {
            RpcError::Remote { code, message } => {
                if let Some(d) = drive_proto::decode_drive_error(code, &message) {
                    return d;
                }
                match code {
                    // The peer has no such drive, or does not speak this protocol (version).
                    codes::NO_SUCH_DRIVE | crate::rpc::codes::UNKNOWN_METHOD => unusable(&message),
                    _ => self.io(format!(
                        "peer {} refused the call ({code}): {message}",
                        self.peer
                    )),
                }
            }
            RpcError::TooLarge { .. } => self.io(e.to_string()),
            // Unreachable, timed out, handshake refused, or the connection broke: offline.
            e => unusable(&e),
        }
    }

    /// What a data-plane read of `len` bytes at `offset` gives the caller: the bytes as the buffer
    /// they landed in, or the error as a drive error.
    fn shard_result(
        &self,
        got: Result<ShardData, DataPlaneError>,
        offset: u64,
        len: usize,
    ) -> Result<ShardData> {
        match got {
            Ok(data) if data.len() == len => Ok(data),
            Ok(data) => Err(self.io(format!(
                "asked for {len} bytes of a shard, the data plane delivered {}",
                data.len()
            ))),
            // A range read in pieces reports the piece that ran past the end: report the range.
            Err(DataPlaneError::Remote { code, message, .. }) if code == codes::TRUNCATED => {
                match drive_proto::decode_drive_error(code, &message) {
                    Some(DriveError::Truncated { len: file_len, .. }) => {
                        Err(DriveError::Truncated {
                            offset,
                            wanted: len,
                            len: file_len,
                        })
                    }
                    _ => Err(self.rpc_error(RpcError::Remote { code, message })),
                }
            }
            Err(e) => Err(self.data_error(e)),
        }
    }

    /// Maps a failed data-plane transfer like [`Inner::rpc_error`] maps a failed call.
    fn data_error(&self, e: DataPlaneError) -> DriveError {
        match e {
            DataPlaneError::Remote { code, message, .. } => {
                self.rpc_error(RpcError::Remote { code, message })
            }
            e if e.is_unreachable() => DriveError::Unusable(format!(
                "{} (via {}, data plane {}): {e}",
                self.endpoint,
                self.peer,
                self.data.name()
            )),
            e => self.io(format!("data plane {}: {e}", self.data.name())),
        }
    }
}

impl RemoteDrive {
    /// `range` into `dst` over the data plane: every byte tagged, or as a frame answer (`frame`).
    async fn read_into(
        &self,
        range: &ShardRange<'_>,
        dst: PooledBuf,
        frame: bool,
    ) -> Result<PooledBuf> {
        let (peer, drive) = (&self.inner.peer, self.inner.drive);
        let got = if frame {
            self.inner
                .data
                .read_frame_into(peer, drive, range, dst)
                .await
        } else {
            self.inner
                .data
                .read_shard_into(peer, drive, range, vec![dst])
                .await
        };
        self.inner
            .shard_result(got, range.offset, range.len)
            .map(ShardData::into_buf)
    }
}

#[async_trait]
impl Drive for RemoteDrive {
    fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    async fn disk_info(&self) -> Result<DiskInfo> {
        match self.call(Request::DiskInfo {}).await? {
            Response::DiskInfo(mut d) => {
                d.endpoint = self.inner.endpoint.clone();
                Ok(d)
            }
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn read_format(&self) -> Result<Option<FormatV1>> {
        match self.call(Request::ReadFormat {}).await? {
            Response::Format(f) => Ok(f),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn write_format(&self, format: &FormatV1) -> Result<()> {
        self.unit(Request::WriteFormat {
            format: format.clone(),
        })
        .await
    }

    async fn make_volume(&self, bucket: &str) -> Result<()> {
        self.unit(Request::MakeVolume {
            bucket: bucket.to_owned(),
        })
        .await
    }

    async fn list_volumes(&self) -> Result<Vec<VolInfo>> {
        match self.call(Request::ListVolumes {}).await? {
            Response::Volumes(v) => Ok(v),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn stat_volume(&self, bucket: &str) -> Result<VolInfo> {
        let req = Request::StatVolume {
            bucket: bucket.to_owned(),
        };
        match self.call(req).await? {
            Response::Volume(v) => Ok(v),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn delete_volume(&self, bucket: &str, force: bool) -> Result<()> {
        let req = Request::DeleteVolume {
            bucket: bucket.to_owned(),
            force,
        };
        match self.slow_call(req).await? {
            Response::Unit => Ok(()),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn read_meta(&self, bucket: &str, key: &str) -> Result<ObjectMeta> {
        let req = Request::ReadMeta {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        };
        match self.call(req).await? {
            Response::Meta(m) => Ok(m),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn read_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<Uuid>,
    ) -> Result<ObjectMeta> {
        let req = Request::ReadVersion {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            version_id,
        };
        match self.call(req).await? {
            Response::Meta(m) => Ok(m),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn read_versions(&self, bucket: &str, key: &str) -> Result<Vec<ObjectMeta>> {
        // In pages bounded in bytes (a version of 10,000 parts is about 500 KB on the wire),
        // read again from the start if the key changed between two of them.
        for _ in 0..3 {
            let mut out: Vec<ObjectMeta> = Vec::new();
            let mut first: Option<(u64, u64)> = None;
            let changed = loop {
                let req = Request::ReadVersions {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                    skip: out.len() as u64,
                    max_bytes: self.inner.config.page_bytes as u64,
                };
                let page = match self.call(req).await? {
                    Response::Versions(p) => p,
                    other => return Err(self.inner.unexpected(&other)),
                };
                if *first.get_or_insert((page.total, page.digest)) != (page.total, page.digest) {
                    break true;
                }
                if page.metas.is_empty() && (out.len() as u64) < page.total {
                    return Err(self
                        .inner
                        .io("the peer sent no versions where more were due".into()));
                }
                out.extend(page.metas);
                if out.len() as u64 >= page.total {
                    break false;
                }
            };
            if !changed {
                return Ok(out);
            }
        }
        Err(self.inner.io(format!(
            "the versions of {bucket}/{key} changed under every read of them"
        )))
    }

    async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<Uuid>,
    ) -> Result<()> {
        self.unit(Request::DeleteVersion {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            version_id,
        })
        .await
    }

    async fn write_meta(&self, bucket: &str, key: &str, meta: &ObjectMeta) -> Result<()> {
        self.unit(Request::WriteMeta {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            meta: meta.clone(),
        })
        .await
    }

    async fn create_shard_writer(
        &self,
        tmp_id: Uuid,
        data_dir: Uuid,
        part: u32,
    ) -> Result<Box<dyn ShardWriter>> {
        let req = Request::ShardOpen {
            tmp_id,
            data_dir,
            part,
        };
        let id = match self.call(req).await? {
            Response::Writer(id) => id,
            other => return Err(self.inner.unexpected(&other)),
        };
        let chunk = self.inner.config.append_chunk.max(1);
        Ok(Box::new(RemoteShardWriter {
            inner: self.inner.clone(),
            id,
            buf: BytesMut::with_capacity(chunk),
            chunk,
            seq: 0,
            in_flight: JoinSet::new(),
            pending: BTreeSet::new(),
            done: false,
        }))
    }

    async fn read_shard(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes> {
        let range = ShardRange {
            bucket,
            key,
            data_dir,
            part,
            offset,
            len,
        };
        let got = self
            .inner
            .data
            .read_shard(&self.inner.peer, self.inner.drive, &range)
            .await;
        self.inner
            .shard_result(got, offset, len)
            .map(ShardData::into_bytes)
    }

    /// The data plane reads straight into the pooled buffer (a piece of the GET's stripe
    /// buffer): over TCP by exact reads, over verbs by the holder's RDMA WRITE into the registered
    /// buffer.
    async fn read_shard_into(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        dst: PooledBuf,
    ) -> Result<PooledBuf> {
        let range = ShardRange {
            bucket,
            key,
            data_dir,
            part,
            offset,
            len: dst.len(),
        };
        self.read_into(&range, dst, false).await
    }

    /// Over the TCP data plane a frame answer: the holder tags only the frame's hash, and the
    /// caller's bitrot check is the one pass over the frame's bytes.
    async fn read_frame_into(
        &self,
        bucket: &str,
        key: &str,
        data_dir: Uuid,
        part: u32,
        offset: u64,
        dst: PooledBuf,
    ) -> Result<PooledBuf> {
        let range = ShardRange {
            bucket,
            key,
            data_dir,
            part,
            offset,
            len: dst.len(),
        };
        self.read_into(&range, dst, true).await
    }

    fn frame_reads_check_hash_only(&self) -> bool {
        true
    }

    async fn stat_shard(&self, bucket: &str, key: &str, data_dir: Uuid, part: u32) -> Result<u64> {
        let req = Request::StatShard {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            data_dir,
            part,
        };
        match self.call(req).await? {
            Response::Len(n) => Ok(n),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn rename_data(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<()> {
        self.unit(Request::RenameData {
            tmp_id,
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            meta: meta.clone(),
        })
        .await
    }

    async fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        self.unit(Request::DeleteObject {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
        .await
    }

    async fn delete_tmp(&self, tmp_id: Uuid) -> Result<()> {
        self.unit(Request::DeleteTmp { tmp_id }).await
    }

    async fn walk(&self, bucket: &str, opts: &WalkOptions) -> Result<Vec<WalkEntry>> {
        // Paged by marker, and each answer bounded in bytes, so that it fits a frame whatever
        // the limit and however large the entries (an object of 10,000 parts lists its part
        // sizes: about 130 KB).
        let page = self.inner.config.walk_page.max(1);
        let mut out: Vec<WalkEntry> = Vec::new();
        let mut marker = opts.marker.clone();
        loop {
            let want = (opts.limit - out.len()).min(page);
            let req = Request::Walk {
                bucket: bucket.to_owned(),
                opts: WalkOptions {
                    prefix: opts.prefix.clone(),
                    marker: marker.clone(),
                    delimited: opts.delimited,
                    limit: want,
                },
                max_bytes: self.inner.config.page_bytes as u64,
            };
            let WalkPage { entries, more } = match self.slow_call(req).await? {
                Response::Walk(p) => p,
                other => return Err(self.inner.unexpected(&other)),
            };
            if more && entries.is_empty() {
                return Err(self
                    .inner
                    .io("the peer's walk said more follow and sent nothing".into()));
            }
            if entries.len() > want {
                return Err(self.inner.io(format!(
                    "asked for at most {want} walk entries, the peer sent {}",
                    entries.len()
                )));
            }
            let full = more || entries.len() == want;
            if let Some(last) = entries.last() {
                // Pages must follow each other in order, or the walk would never end.
                if marker.as_deref().is_some_and(|m| last.name() <= m) {
                    return Err(self.inner.io("the peer's walk went backwards".into()));
                }
                marker = Some(last.name().to_owned());
            }
            out.extend(entries);
            if !full || want == 0 || out.len() >= opts.limit {
                return Ok(out);
            }
        }
    }

    async fn read_bucket_config(&self, bucket: &str, name: &str) -> Result<Bytes> {
        let req = Request::ReadBucketConfig {
            bucket: bucket.to_owned(),
            name: name.to_owned(),
        };
        match self.call(req).await? {
            Response::Data(b) => Ok(b),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn write_bucket_config(&self, bucket: &str, name: &str, data: &[u8]) -> Result<()> {
        self.unit(Request::WriteBucketConfig {
            bucket: bucket.to_owned(),
            name: name.to_owned(),
            data: Bytes::copy_from_slice(data),
        })
        .await
    }

    async fn delete_bucket_config(&self, bucket: &str, name: &str) -> Result<()> {
        self.unit(Request::DeleteBucketConfig {
            bucket: bucket.to_owned(),
            name: name.to_owned(),
        })
        .await
    }

    async fn read_part_shard(
        &self,
        upload: (&str, &str, &str),
        data_dir: Uuid,
        part: u32,
        offset: u64,
        len: usize,
    ) -> Result<Bytes> {
        let req = Request::ReadPartShard {
            bucket: upload.0.to_owned(),
            key: upload.1.to_owned(),
            upload_id: upload.2.to_owned(),
            data_dir,
            part,
            offset,
            len: len as u64,
        };
        match self.slow_call(req).await? {
            Response::Data(b) if b.len() == len => Ok(b),
            Response::Data(b) => Err(self.inner.io(format!(
                "asked for {len} bytes of a part shard, the peer sent {}",
                b.len()
            ))),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn list_bucket_configs(&self, bucket: &str) -> Result<Vec<String>> {
        let req = Request::ListBucketConfigs {
            bucket: bucket.to_owned(),
        };
        match self.call(req).await? {
            Response::Names(n) => Ok(n),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn create_upload(&self, meta: &UploadMeta) -> Result<()> {
        self.unit(Request::CreateUpload { meta: meta.clone() })
            .await
    }

    async fn read_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<UploadMeta> {
        let req = Request::ReadUpload {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            upload_id: upload_id.to_owned(),
        };
        match self.call(req).await? {
            Response::Upload(u) => Ok(u),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn commit_part(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part: &PartMeta,
    ) -> Result<()> {
        self.unit(Request::CommitPart {
            tmp_id,
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            upload_id: upload_id.to_owned(),
            part: part.clone(),
        })
        .await
    }

    async fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> Result<Vec<PartMeta>> {
        let req = Request::ListParts {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            upload_id: upload_id.to_owned(),
        };
        match self.call(req).await? {
            Response::Parts(p) => Ok(p),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn stage_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[PartMeta],
        tmp_id: Uuid,
        data_dir: Uuid,
    ) -> Result<()> {
        let req = Request::StageParts {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            upload_id: upload_id.to_owned(),
            parts: parts.to_vec(),
            tmp_id,
            data_dir,
        };
        match self.slow_call(req).await? {
            Response::Unit => Ok(()),
            other => Err(self.inner.unexpected(&other)),
        }
    }

    async fn delete_upload(&self, bucket: &str, key: &str, upload_id: &str) -> Result<()> {
        self.unit(Request::DeleteUpload {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            upload_id: upload_id.to_owned(),
        })
        .await
    }

    async fn list_uploads(&self, bucket: Option<&str>) -> Result<Vec<UploadMeta>> {
        // In pages bounded in bytes, each after the last upload of the one before.
        let mut out: Vec<UploadMeta> = Vec::new();
        loop {
            let after = out.last().map_or_else(Vec::new, |u| {
                UploadsPage::order(u).map(str::to_owned).to_vec()
            });
            let req = Request::ListUploads {
                bucket: bucket.map(str::to_owned),
                after,
                max_bytes: self.inner.config.page_bytes as u64,
            };
            let page = match self.slow_call(req).await? {
                Response::Uploads(p) => p,
                other => return Err(self.inner.unexpected(&other)),
            };
            if page.more && page.uploads.is_empty() {
                return Err(self
                    .inner
                    .io("the peer's uploads said more follow and sent nothing".into()));
            }
            out.extend(page.uploads);
            if !page.more {
                return Ok(out);
            }
        }
    }
}

/// A shard writer on a peer: appends stream in order-numbered chunks, a few in flight at once.
struct RemoteShardWriter {
    inner: Arc<Inner>,
    id: Uuid,
    /// Bytes not sent yet (less than `chunk`).
    buf: BytesMut,
    chunk: usize,
    /// Appends sent so far.
    seq: u64,
    /// The appends in flight, each answering with its sequence number.
    in_flight: JoinSet<(u64, Result<()>)>,
    /// Sequence numbers of the appends in flight.
    pending: BTreeSet<u64>,
    /// Finished, failed, or aborted: nothing more is sent.
    done: bool,
}

impl RemoteShardWriter {
    /// Waits for one append to complete.
    async fn reap_one(&mut self) -> Result<()> {
        match self.in_flight.join_next().await {
            None => Ok(()),
            Some(Ok((seq, r))) => {
                self.pending.remove(&seq);
                r
            }
            Some(Err(e)) => Err(self.inner.io(format!("shard append task failed: {e}"))),
        }
    }

    async fn send(&mut self, data: Bytes) -> Result<()> {
        let max = self.inner.config.appends_in_flight.max(1) as u64;
        // Bounded by the distance to the oldest append in flight (which also bounds how many
        // are in flight): the peer refuses appends too far ahead of the next one it can write.
        while self
            .pending
            .first()
            .is_some_and(|&oldest| self.seq - oldest >= max)
        {
            self.reap_one().await?;
        }
        let (inner, writer, seq) = (self.inner.clone(), self.id, self.seq);
        self.seq += 1;
        self.pending.insert(seq);
        self.in_flight.spawn(async move {
            let r = inner
                .data
                .append_shard(&inner.peer, inner.drive, writer, seq, data)
                .await
                .map_err(|e| inner.data_error(e));
            (seq, r)
        });
        Ok(())
    }

    async fn write_inner(&mut self, data: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(data);
        while self.buf.len() >= self.chunk {
            let piece = self.buf.split_to(self.chunk).freeze();
            self.send(piece).await?;
        }
        Ok(())
    }

    async fn finish_inner(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            let rest = self.buf.split().freeze();
            self.send(rest).await?;
        }
        while !self.in_flight.is_empty() {
            self.reap_one().await?;
        }
        let req = Request::ShardFinish {
            writer: self.id,
            appends: self.seq,
        };
        self.done = true;
        match self
            .inner
            .call(req, self.inner.config.slow_call_timeout)
            .await?
        {
            Response::Unit => Ok(()),
            other => Err(self.inner.unexpected(&other)),
        }
    }
}

/// Largest append sent as the caller's own `Bytes` (a framed chunk of a 1 MiB block fits): what a
/// peer's data plane reads into one pooled buffer, its request prefix included.
const MAX_DIRECT_APPEND: usize = quarry_buf::DEFAULT_BUF_SIZE - 1024;

#[async_trait]
impl ShardWriter for RemoteShardWriter {
    /// A whole framed chunk goes out as one append of the caller's `Bytes`, without a copy (over
    /// verbs the peer RDMA-READs it from the pooled buffer it was encoded into). Anything else is
    /// gathered like [`ShardWriter::write`] does.
    async fn write_bytes(&mut self, data: Bytes) -> Result<()> {
        if self.done {
            return Err(self.inner.io("shard writer failed earlier".into()));
        }
        let r = async {
            if data.is_empty() || data.len() > MAX_DIRECT_APPEND {
                return self.write_inner(&data).await;
            }
            // Bytes gathered by earlier `write`s go first, as their own append.
            if !self.buf.is_empty() {
                let gathered = self.buf.split().freeze();
                self.send(gathered).await?;
            }
            self.send(data).await
        }
        .await;
        if r.is_err() {
            self.done = true;
            self.abort();
        }
        r
    }

    async fn write(&mut self, data: &[u8]) -> Result<()> {
        if self.done {
            return Err(self.inner.io("shard writer failed earlier".into()));
        }
        let r = self.write_inner(data).await;
        if r.is_err() {
            self.done = true;
            self.abort();
        }
        r
    }

    async fn finish(mut self: Box<Self>) -> Result<()> {
        if self.done {
            return Err(self.inner.io("shard writer failed earlier".into()));
        }
        let r = self.finish_inner().await;
        if r.is_err() {
            self.done = true;
            self.abort();
        }
        r
    }
}

impl RemoteShardWriter {
    /// Asks the peer to close the writer, in the background (best effort).
    fn abort(&mut self) {
        self.in_flight.abort_all();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, writer) = (self.inner.clone(), self.id);
        rt.spawn(async move {
            let _ = inner
                .call(Request::ShardAbort { writer }, inner.config.call_timeout)
                .await;
        });
    }
}

impl Drop for RemoteShardWriter {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            self.abort();
        }
    }
}
