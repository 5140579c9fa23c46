//! [`DriveServer`]: the serving side of [`crate::RemoteDrive`], a [`Handler`] that answers the
//! drive protocol ([`crate::drive_proto`]) from this node's own drives.
//!
//! Each request names a drive by its index in the list the server was built with; an index out of
//! range is refused. Every bucket, key, upload id and configuration name is validated here,
//! before the drive is called (the drive validates them again before it builds a path), so a peer
//! can never make this node read or write outside its drives.
//!
//! Shard writers opened by peers live in a table keyed by a random writer id. Appends may arrive
//! out of order (requests run concurrently, over several connections); the server keeps those
//! that are ahead, at most [`DriveServerConfig::append_window`] per writer, and writes them in
//! sequence order. A writer idle for [`DriveServerConfig::writer_idle_timeout`] is dropped (its
//! tmp data is then left to `delete_tmp` or the start-up sweep, as with a local writer dropped
//! without `finish`), and at most [`DriveServerConfig::max_writers`] are open at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_disk::{Drive, DriveError, ShardWriter};
use uuid::Uuid;

use crate::drive_proto::{self, codes, Dispatch, Method, Request, Response};
use crate::lock;
use crate::rpc::{Handler, Region, RpcError};
use quarry_buf::{BufPool, BufPoolConfig, PooledBuf};

/// Limits of a [`DriveServer`].
#[derive(Debug, Clone)]
pub struct DriveServerConfig {
    /// Shard writers open at once (all peers together); opening one more fails.
    pub max_writers: usize,
    /// A writer that received nothing for this long is dropped.
    pub writer_idle_timeout: Duration,
    /// Appends a writer keeps while waiting for an earlier one (out-of-order arrivals).
    pub append_window: u64,
    /// Data-plane shard reads ([`Request::ReadShardData`]) running at once (all peers together);
    /// more wait their turn, which bounds the memory held by reads in progress.
    pub max_data_reads: usize,
    /// Largest data-plane shard read accepted, in bytes.
    pub max_data_read: u64,
    /// Buffers of the pool that data-plane reads are read into from the drive and sent from
    /// (a read larger than one buffer is read into its own allocation instead).
    pub data_buffers: usize,
    /// Bytes of each of those buffers (a multiple of 4096).
    pub data_buf_size: usize,
}

impl Default for DriveServerConfig {
    fn default() -> DriveServerConfig {
        DriveServerConfig {
            max_writers: 4096,
            writer_idle_timeout: Duration::from_secs(60),
            append_window: 16,
            max_data_reads: 64,
            max_data_read: 64 << 20,
            data_buffers: 64,
            data_buf_size: quarry_buf::DEFAULT_BUF_SIZE,
        }
    }
}

/// Serves this node's drives to its peers. Wrap it in an `Arc` and give it to
/// [`crate::RpcServer::bind`].
pub struct DriveServer {
    drives: Vec<Arc<dyn Drive>>,
    writers: Mutex<HashMap<Uuid, Arc<OpenWriter>>>,
    data_reads: Arc<tokio::sync::Semaphore>,
    /// Where data-plane reads land (`None` if the configured shape is invalid).
    pool: Option<BufPool>,
    config: DriveServerConfig,
    /// The holder side of the verbs GET ([`DriveServer::with_verbs`]).
    #[cfg(feature = "verbs")]
    verbs: Option<Arc<crate::verbs_dataplane::VerbsResponder>>,
}

impl std::fmt::Debug for DriveServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriveServer")
            .field("drives", &self.drives)
            .field("open_writers", &self.open_writers())
            .finish()
    }
}

struct OpenWriter {
    drive: u16,
    last_used: Mutex<Instant>,
    state: tokio::sync::Mutex<WriterState>,
    /// Which appends have their bytes here (written, or waiting in `ahead`), kept apart from
    /// `state` so a verbs append can learn its turn while an earlier one is being written.
    arrived: Mutex<Arrived>,
    /// Woken whenever an append arrives or the writer breaks.
    turn: tokio::sync::Notify,
}

/// The appends of a writer whose bytes arrived: every one below `upto`, and those in `beyond`.
#[derive(Default)]
struct Arrived {
    upto: u64,
    beyond: std::collections::BTreeSet<u64>,
    /// The writer broke (a verbs fetch failed): no later append can ever be written.
    broken: Option<(u16, String)>,
}

impl OpenWriter {
    fn arrive(&self, seq: u64) {
        {
            let mut a = lock(&self.arrived);
            a.beyond.insert(seq);
            loop {
                let next = a.upto;
                if !a.beyond.remove(&next) {
                    break;
                }
                a.upto += 1;
            }
            debug_assert!(
                a.beyond.iter().all(|&s| s > a.upto),
                "appends not yet in sequence are all ahead of the next one"
            );
        }
        self.turn.notify_waiters();
    }

    fn break_with(&self, code: u16, message: String) {
        lock(&self.arrived).broken.get_or_insert((code, message));
        self.turn.notify_waiters();
    }
}

struct WriterState {
    /// `None` once finished.
    writer: Option<Box<dyn ShardWriter>>,
    /// The sequence number of the next append to write.
    next_seq: u64,
    /// Appends that arrived ahead of `next_seq`.
    ahead: BTreeMap<u64, Bytes>,
    /// The error that broke the writer: every later call fails with it.
    failed: Option<(u16, String)>,
}

fn remote(code: u16, message: impl Into<String>) -> RpcError {
    RpcError::remote(code, message)
}

fn drive_error(e: &DriveError) -> RpcError {
    let (code, message) = drive_proto::encode_drive_error(e);
    RpcError::remote(code, message)
}

impl DriveServer {
    /// Serves `drives`; a request for drive `i` goes to `drives[i]`.
    pub fn new(drives: Vec<Arc<dyn Drive>>) -> DriveServer {
        DriveServer::with_config(drives, DriveServerConfig::default())
    }

    pub fn with_config(drives: Vec<Arc<dyn Drive>>, config: DriveServerConfig) -> DriveServer {
        let pool = match BufPool::new(BufPoolConfig::new(
            config.data_buf_size,
            config.data_buffers,
        )) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(error = %e, "drive server: no buffer pool for data-plane reads; reading into plain allocations");
                None
            }
        };
        DriveServer {
            drives,
            writers: Mutex::new(HashMap::new()),
            data_reads: Arc::new(tokio::sync::Semaphore::new(config.max_data_reads.max(1))),
            pool,
            config,
            #[cfg(feature = "verbs")]
            verbs: None,
        }
    }

    /// Also serves the holder side of the verbs GET ([`crate::verbs_dataplane`]); without it the
    /// verbs methods are unknown and requesters in `auto` mode use TCP.
    #[cfg(feature = "verbs")]
    pub fn with_verbs(mut self, responder: Arc<crate::verbs_dataplane::VerbsResponder>) -> Self {
        self.verbs = Some(responder);
        self
    }

    /// Reads data-plane shard ranges into `pool` (e.g. one registered with the RDMA device, shared
    /// with the verbs holder) instead of a pool of its own.
    pub fn with_pool(mut self, pool: BufPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Shard writers currently open on behalf of peers.
    pub fn open_writers(&self) -> usize {
        lock(&self.writers).len()
    }

    fn drive(&self, index: u16) -> Result<&Arc<dyn Drive>, RpcError> {
        self.drives.get(index as usize).ok_or_else(|| {
            remote(
                codes::NO_SUCH_DRIVE,
                format!(
                    "this node serves {} drive(s); there is no drive {index}",
                    self.drives.len()
                ),
            )
        })
    }

    fn writer(&self, id: Uuid, drive: u16) -> Result<Arc<OpenWriter>, RpcError> {
        let w = lock(&self.writers).get(&id).cloned();
        match w {
            Some(w) if w.drive == drive => {
                *lock(&w.last_used) = Instant::now();
                Ok(w)
            }
            _ => Err(remote(
                codes::NO_SUCH_WRITER,
                format!("no shard writer {id} is open on drive {drive} of this node"),
            )),
        }
    }

    /// Drops writers that idled past the timeout.
    fn reap_idle(&self) {
        let timeout = self.config.writer_idle_timeout;
        let mut writers = lock(&self.writers);
        writers.retain(|id, w| {
            let keep = lock(&w.last_used).elapsed() < timeout;
            if !keep {
                tracing::warn!(writer = %id, drive = w.drive, "dropping an idle remote shard writer");
            }
            keep
        });
    }

    async fn shard_open(
        &self,
        drive: u16,
        tmp_id: Uuid,
        data_dir: Uuid,
        part: u32,
    ) -> Result<Response, RpcError> {
        let d = self.drive(drive)?;
        self.reap_idle();
        if self.open_writers() >= self.config.max_writers {
            return Err(drive_error(&DriveError::Io(std::io::Error::other(
                format!(
                    "{} shard writers are open on this node, the limit",
                    self.config.max_writers
                ),
            ))));
        }
        let w = d
            .create_shard_writer(tmp_id, data_dir, part)
            .await
            .map_err(|e| drive_error(&e))?;
        let id = Uuid::new_v4();
        let open = Arc::new(OpenWriter {
            drive,
            last_used: Mutex::new(Instant::now()),
            state: tokio::sync::Mutex::new(WriterState {
                writer: Some(w),
                next_seq: 0,
                ahead: BTreeMap::new(),
                failed: None,
            }),
            arrived: Mutex::new(Arrived::default()),
            turn: tokio::sync::Notify::new(),
        });
        lock(&self.writers).insert(id, open);
        Ok(Response::Writer(id))
    }

    async fn shard_append(
        &self,
        drive: u16,
        id: Uuid,
        seq: u64,
        data: Bytes,
    ) -> Result<Response, RpcError> {
        let w = self.writer(id, drive)?;
        let mut st = w.state.lock().await;
        if let Some((code, message)) = &st.failed {
            return Err(remote(*code, message.clone()));
        }
        if seq < st.next_seq || st.ahead.contains_key(&seq) {
            return Err(remote(
                codes::BAD_REQUEST,
                format!("append {seq} of shard writer {id} arrived twice"),
            ));
        }
        if seq - st.next_seq >= self.config.append_window {
            return Err(remote(
                codes::BAD_REQUEST,
                format!(
                    "append {seq} of shard writer {id} is more than {} ahead of append {}",
                    self.config.append_window, st.next_seq
                ),
            ));
        }
        st.ahead.insert(seq, data);
        w.arrive(seq);
        loop {
            let next = st.next_seq;
            let Some(chunk) = st.ahead.remove(&next) else {
                break;
            };
            let Some(writer) = st.writer.as_mut() else {
                break;
            };
            if let Err(e) = writer.write(&chunk).await {
                let (code, message) = drive_proto::encode_drive_error(&e);
                st.failed = Some((code, message.clone()));
                st.ahead.clear();
                st.writer = None;
                return Err(remote(code, message));
            }
            st.next_seq += 1;
        }
        Ok(Response::Unit)
    }

    async fn shard_finish(&self, drive: u16, id: Uuid, appends: u64) -> Result<Response, RpcError> {
        let w = self.writer(id, drive)?;
        // Whatever happens now, the writer is closed.
        lock(&self.writers).remove(&id);
        let mut st = w.state.lock().await;
        if let Some((code, message)) = &st.failed {
            return Err(remote(*code, message.clone()));
        }
        if st.next_seq != appends || !st.ahead.is_empty() {
            return Err(drive_error(&DriveError::Io(std::io::Error::other(format!(
                "shard writer {id} was finished after {appends} appends, but only {} arrived in order",
                st.next_seq
            )))));
        }
        let writer = st.writer.take().ok_or_else(|| {
            remote(
                codes::NO_SUCH_WRITER,
                format!("shard writer {id} is already finished"),
            )
        })?;
        writer.finish().await.map_err(|e| drive_error(&e))?;
        Ok(Response::Unit)
    }

    /// The pool data-plane reads land in (the pool the verbs backend will register, so a holder
    /// RDMA-WRITEs from the buffer the drive read into).
    pub fn data_pool(&self) -> Option<&BufPool> {
        self.pool.as_ref()
    }

    /// A data-plane shard read: the raw bytes, which the RPC server sends as a bulk frame. At most
    /// `max_data_reads` run at once. A range that fits a pooled buffer is read by the drive
    /// straight into one ([`Drive::read_shard_into`]) and sent from it; the buffer returns to the
    /// pool once written to the socket, so the pool also bounds the bytes waiting to be sent.
    async fn read_data(&self, drive: u16, req: Request) -> Result<Bytes, RpcError> {
        let r = self.data_read(drive, req)?;
        let _permit = self.data_read_permit().await?;
        // Either way the buffer the drive read into goes to the socket as it is: no copy here.
        let read = match &self.pool {
            Some(pool) if r.len <= pool.buf_size() => {
                let mut buf = pool.get().await;
                buf.set_len(r.len);
                r.drive
                    .read_shard_into(&r.bucket, &r.key, r.data_dir, r.part, r.offset, buf)
                    .await
                    .map(PooledBuf::into_bytes)
            }
            _ => {
                r.drive
                    .read_shard(&r.bucket, &r.key, r.data_dir, r.part, r.offset, r.len)
                    .await
            }
        };
        read.map_err(|e| drive_error(&e))
    }

    /// A data-plane frame read answered from the drive's file, if it can be
    /// ([`Drive::frame_region`]): the frame's hash read, its chunk sent by the RPC server with
    /// `sendfile`. The read counts against `max_data_reads` until the chunk is sent.
    async fn read_region(&self, method: u16, payload: Bytes) -> Result<Option<Region>, RpcError> {
        if Method::from_u16(method).is_none() {
            return Ok(None);
        }
        // Anything else, or a request that does not decode, is [`Handler::handle`]'s to answer.
        let Ok((drive, req @ Request::ReadShardData { .. })) =
            drive_proto::decode_request(method, payload)
        else {
            return Ok(None);
        };
        let r = self.data_read(drive, req)?;
        let permit = self.data_read_permit().await?;
        let region = r
            .drive
            .frame_region(&r.bucket, &r.key, r.data_dir, r.part, r.offset, r.len)
            .await
            .map_err(|e| drive_error(&e))?;
        // None for a range shorter than a hash too: `handle` refuses it.
        Ok(region.map(|r| Region {
            hash: r.hash,
            file: r.file,
            offset: r.offset,
            len: r.len,
            permit: Some(permit),
        }))
    }

    /// A data-plane read request, checked against this node's limits.
    fn data_read(&self, drive: u16, req: Request) -> Result<DataRead, RpcError> {
        req.validate().map_err(|e| drive_error(&e))?;
        let Request::ReadShardData {
            bucket,
            key,
            data_dir,
            part,
            offset,
            len,
        } = req
        else {
            return Err(remote(codes::BAD_REQUEST, "misrouted data-plane read"));
        };
        let d = self.drive(drive)?.clone();
        if len > self.config.max_data_read {
            return Err(remote(
                codes::BAD_REQUEST,
                format!(
                    "a data-plane read of {len} bytes exceeds this node's limit of {} bytes",
                    self.config.max_data_read
                ),
            ));
        }
        let len = usize::try_from(len).map_err(|_| {
            remote(
                codes::BAD_REQUEST,
                format!("a read of {len} bytes does not fit this platform"),
            )
        })?;
        Ok(DataRead {
            drive: d,
            bucket,
            key,
            data_dir,
            part,
            offset,
            len,
        })
    }

    /// One of the `max_data_reads` data-plane reads that may run at once.
    async fn data_read_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, RpcError> {
        // The semaphore is never closed.
        self.data_reads
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| remote(codes::BAD_REQUEST, "data-plane reads are shut down"))
    }

    async fn dispatch(&self, drive: u16, req: Request) -> Result<Response, RpcError> {
        let d = self.drive(drive)?.clone();
        let req = match req.call(d.as_ref()).await {
            Dispatch::Done(r) => return r.map_err(|e| drive_error(&e)),
            Dispatch::Server(req) => req,
        };
        // Writer calls are keyed by writer id; the drive index must match the one it was opened on.
        match req {
            Request::ShardOpen {
                tmp_id,
                data_dir,
                part,
            } => self.shard_open(drive, tmp_id, data_dir, part).await,
            Request::ShardAppend { writer, seq, data } => {
                self.shard_append(drive, writer, seq, data).await
            }
            Request::ShardFinish { writer, appends } => {
                self.shard_finish(drive, writer, appends).await
            }
            Request::ShardAbort { writer } => {
                let removed = {
                    let mut writers = lock(&self.writers);
                    match writers.get(&writer) {
                        Some(w) if w.drive == drive => writers.remove(&writer),
                        _ => None,
                    }
                };
                drop(removed);
                Ok(Response::Unit)
            }
            // Answered by `read_data`; never reaches here.
            _ => Err(remote(codes::BAD_REQUEST, "misrouted drive server call")),
        }
    }
}

#[cfg(feature = "verbs")]
impl DriveServer {
    /// A verbs append: waits until every earlier append of the writer has its bytes here, has the
    /// holder RDMA-READ this one's bytes from the requester into a registered buffer, and writes
    /// them like a TCP append. Fetching in order means a writer never holds a buffer while it
    /// waits for an earlier append that still needs one.
    async fn verbs_append(
        &self,
        v: &crate::verbs_dataplane::VerbsResponder,
        payload: &[u8],
    ) -> Result<Bytes, RpcError> {
        let req = crate::verbs_dataplane::decode_append(payload)
            .map_err(|e| remote(codes::BAD_REQUEST, e.to_string()))?;
        let w = self.writer(req.writer, req.drive)?;
        self.fetch_turn(&w, req.writer, req.seq).await?;
        let data = match v.fetch(&req).await {
            Ok(d) => d,
            // Busy: nothing was fetched and the requester sends this append over TCP instead.
            Err(e) if e.code() == Some(crate::verbs_dataplane::CODE_BUSY) => return Err(e),
            Err(e) => {
                let (code, message) = match &e {
                    RpcError::Remote { code, message } => (*code, message.clone()),
                    other => (codes::IO, other.to_string()),
                };
                w.break_with(
                    code,
                    format!(
                        "append {} of shard writer {} could not be fetched: {message}",
                        req.seq, req.writer
                    ),
                );
                return Err(e);
            }
        };
        let resp = self
            .shard_append(req.drive, req.writer, req.seq, data)
            .await?;
        Ok(drive_proto::encode_response(&resp))
    }

    /// Waits (at most the writer idle timeout) until every append of `w` before `seq` arrived.
    async fn fetch_turn(&self, w: &OpenWriter, id: Uuid, seq: u64) -> Result<(), RpcError> {
        let deadline = tokio::time::Instant::now() + self.config.writer_idle_timeout;
        loop {
            let notified = w.turn.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let a = lock(&w.arrived);
                if let Some((code, message)) = &a.broken {
                    return Err(remote(*code, message.clone()));
                }
                if seq < a.upto || a.beyond.contains(&seq) {
                    return Err(remote(
                        codes::BAD_REQUEST,
                        format!("append {seq} of shard writer {id} arrived twice"),
                    ));
                }
                if seq == a.upto {
                    return Ok(());
                }
                if seq - a.upto >= self.config.append_window {
                    return Err(remote(
                        codes::BAD_REQUEST,
                        format!(
                            "append {seq} of shard writer {id} is more than {} ahead of append {}",
                            self.config.append_window, a.upto
                        ),
                    ));
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(remote(
                    codes::IO,
                    format!(
                        "append {seq} of shard writer {id} waited {:?} for append {}",
                        self.config.writer_idle_timeout,
                        lock(&w.arrived).upto
                    ),
                ));
            }
        }
    }
}

/// A checked data-plane read ([`DriveServer::data_read`]).
struct DataRead {
    drive: Arc<dyn Drive>,
    bucket: String,
    key: String,
    data_dir: Uuid,
    part: u32,
    offset: u64,
    len: usize,
}

impl Handler for DriveServer {
    async fn handle_region(&self, method: u16, payload: Bytes) -> Result<Option<Region>, RpcError> {
        self.read_region(method, payload).await
    }

    async fn handle(&self, method: u16, payload: Bytes) -> Result<Bytes, RpcError> {
        #[cfg(feature = "verbs")]
        if crate::verbs_dataplane::VerbsResponder::handles(method) {
            return match &self.verbs {
                Some(v) if method == crate::verbs_dataplane::METHOD_APPEND => {
                    self.verbs_append(v, &payload).await
                }
                Some(v) => v.handle(method, payload, &self.drives).await,
                None => Err(RpcError::unknown_method(method)),
            };
        }
        if Method::from_u16(method).is_none() {
            return Err(RpcError::unknown_method(method));
        }
        let (drive, req) = drive_proto::decode_request(method, payload)
            .map_err(|e| remote(codes::BAD_REQUEST, e.to_string()))?;
        if matches!(req, Request::ReadShardData { .. }) {
            return self.read_data(drive, req).await;
        }
        let resp = self.dispatch(drive, req).await?;
        Ok(drive_proto::encode_response(&resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_disk::{ErasureInfo, ObjectMeta, PartMeta, UploadMeta, WalkOptions};

    fn erasure() -> ErasureInfo {
        ErasureInfo {
            codec: "rs-vandermonde-gf8".into(),
            bitrot: "blake3-256".into(),
            data: 1,
            parity: 1,
            block_size: 1 << 20,
            index: 1,
            distribution: vec![1, 2],
        }
    }

    fn meta() -> ObjectMeta {
        ObjectMeta {
            version: 1,
            version_id: None,
            delete_marker: false,
            size: 0,
            mod_time_ns: 0,
            etag: String::new(),
            headers: Default::default(),
            user_meta: Default::default(),
            checksums: Default::default(),
            erasure: erasure(),
            data_dir: None,
            parts: vec![],
            inline: None,
        }
    }

    fn part() -> PartMeta {
        PartMeta {
            version: 1,
            number: 1,
            size: 0,
            etag: String::new(),
            checksum: None,
            mod_time_ns: 0,
            data_dir: Uuid::nil(),
        }
    }

    /// Every request that carries a name, with the given names.
    fn named(b: &str, k: &str, u: &str, n: &str) -> Vec<Request> {
        let (b, k, u, n) = (b.to_owned(), k.to_owned(), u.to_owned(), n.to_owned());
        let id = Uuid::nil();
        vec![
            Request::MakeVolume { bucket: b.clone() },
            Request::StatVolume { bucket: b.clone() },
            Request::DeleteVolume {
                bucket: b.clone(),
                force: true,
            },
            Request::Walk {
                bucket: b.clone(),
                opts: WalkOptions::default(),
                max_bytes: 1 << 20,
            },
            Request::ReadMeta {
                bucket: b.clone(),
                key: k.clone(),
            },
            Request::WriteMeta {
                bucket: b.clone(),
                key: k.clone(),
                meta: meta(),
            },
            Request::ReadShard {
                bucket: b.clone(),
                key: k.clone(),
                data_dir: id,
                part: 1,
                offset: 0,
                len: 1,
            },
            Request::StatShard {
                bucket: b.clone(),
                key: k.clone(),
                data_dir: id,
                part: 1,
            },
            Request::RenameData {
                tmp_id: id,
                bucket: b.clone(),
                key: k.clone(),
                meta: meta(),
            },
            Request::DeleteObject {
                bucket: b.clone(),
                key: k.clone(),
            },
            Request::ReadBucketConfig {
                bucket: b.clone(),
                name: n.clone(),
            },
            Request::WriteBucketConfig {
                bucket: b.clone(),
                name: n.clone(),
                data: Bytes::new(),
            },
            Request::DeleteBucketConfig {
                bucket: b.clone(),
                name: n,
            },
            Request::CreateUpload {
                meta: UploadMeta {
                    version: 1,
                    bucket: b.clone(),
                    key: k.clone(),
                    upload_id: u.clone(),
                    initiated_ns: 0,
                    headers: Default::default(),
                    user_meta: Default::default(),
                    checksum_algorithm: None,
                    erasure: erasure(),
                },
            },
            Request::ReadUpload {
                bucket: b.clone(),
                key: k.clone(),
                upload_id: u.clone(),
            },
            Request::CommitPart {
                tmp_id: id,
                bucket: b.clone(),
                key: k.clone(),
                upload_id: u.clone(),
                part: part(),
            },
            Request::ListParts {
                bucket: b.clone(),
                key: k.clone(),
                upload_id: u.clone(),
            },
            Request::StageParts {
                bucket: b.clone(),
                key: k.clone(),
                upload_id: u.clone(),
                parts: vec![part()],
                tmp_id: id,
                data_dir: id,
            },
            Request::DeleteUpload {
                bucket: b.clone(),
                key: k,
                upload_id: u,
            },
            Request::ListUploads {
                bucket: Some(b),
                after: vec![],
                max_bytes: 1 << 20,
            },
        ]
    }

    #[test]
    fn every_name_is_validated_before_a_drive_is_called() {
        let good = Uuid::new_v4().to_string();
        for r in named("b", "a/k", &good, "cors") {
            assert!(r.validate().is_ok(), "{r:?}");
        }
        let bad_bucket = named("..", "a/k", &good, "cors");
        let bad_key = named("b", "../../etc", &good, "cors");
        let bad_upload = named("b", "a/k", "../x", "cors");
        let bad_name = named("b", "a/k", &good, "../x");
        for (i, r) in bad_bucket.iter().enumerate() {
            assert!(
                matches!(r.validate(), Err(DriveError::InvalidName(_))),
                "{r:?}"
            );
            // Each request is refused for each of the names it carries.
            for other in [&bad_key[i], &bad_upload[i], &bad_name[i]] {
                if format!("{other:?}") != format!("{:?}", named("b", "a/k", &good, "cors")[i]) {
                    assert!(
                        matches!(other.validate(), Err(DriveError::InvalidName(_))),
                        "{other:?}"
                    );
                }
            }
        }
    }
}
