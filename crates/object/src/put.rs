//! Streaming PUT: the body is cut into blocks, each block is erasure coded, and every drive's
//! framed chunk goes to that drive's writer task while the next block is read. Memory stays at a
//! few blocks whatever the object size; nothing is visible until the commit reaches write quorum.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use quarry_buf::{BufPool, PooledBuf};
use quarry_crypt::{Encryptor, PartKey};
use quarry_disk::{
    Drive, DriveError, ErasureInfo, ObjectMeta, PartInfo, ShardWriter, META_VERSION,
};
use quarry_erasure::{bitrot, Erasure};
use quarry_md5x::Md5Server;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;
use uuid::Uuid;

use crate::api::{ByteStream, ObjectInfo, PutOptions, WritePrecondition};
use crate::error::{Error, Result};
use crate::quorum::{count_full, count_ok, on_all, write_failed};
use crate::set::{object_info, ErasureSet};

/// Framed chunks queued per drive before the reader waits: bounds memory per PUT.
const WRITE_QUEUE_BLOCKS: usize = 2;

/// Free space a drive keeps beyond a write's shard (metadata, directories) to count as having
/// room for it.
const SPACE_RESERVE: u64 = 1 << 20;

/// Cuts a byte stream into blocks of exactly `block_size` bytes (the last may be shorter).
pub(crate) struct BlockReader {
    body: ByteStream,
    block_size: usize,
    pending: Bytes,
    eof: bool,
}

impl BlockReader {
    pub(crate) fn new(body: ByteStream, block_size: usize) -> Self {
        BlockReader {
            body,
            block_size,
            pending: Bytes::new(),
            eof: false,
        }
    }

    /// The next block; an empty block means the body has ended.
    pub(crate) async fn next_block(&mut self) -> std::io::Result<Bytes> {
        // Fast path: a network chunk that holds a whole block is sliced, not copied.
        if self.pending.len() >= self.block_size {
            return Ok(self.pending.split_to(self.block_size));
        }
        let mut buf = BytesMut::with_capacity(self.block_size);
        buf.extend_from_slice(&std::mem::take(&mut self.pending));
        while buf.len() < self.block_size && !self.eof {
            match self.body.next().await {
                None => self.eof = true,
                Some(chunk) => {
                    let mut chunk = chunk?;
                    let want = self.block_size - buf.len();
                    if buf.is_empty() && chunk.len() >= self.block_size {
                        self.pending = chunk.split_off(self.block_size);
                        return Ok(chunk);
                    }
                    if chunk.len() > want {
                        self.pending = chunk.split_off(want);
                    }
                    buf.extend_from_slice(&chunk);
                }
            }
        }
        Ok(buf.freeze())
    }
}

/// `count` pieces of `len` bytes each, as many cut from one pooled buffer as fit in it (a fresh
/// allocation when the pool is empty, or for a piece larger than a buffer). The pool is never
/// waited on: a request holding buffers must not wait for more (two such could deadlock).
pub(crate) fn pieces_of(pool: &BufPool, count: usize, len: usize) -> Vec<PooledBuf> {
    if len == 0 || len > pool.buf_size() {
        return (0..count).map(|_| PooledBuf::heap(len)).collect();
    }
    let per = pool.buf_size() / len;
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let here = per.min(count - out.len());
        match pool.get_or_alloc().split_even(len, here) {
            Ok(p) => out.extend(p),
            Err(_) => out.extend((0..here).map(|_| PooledBuf::heap(len))),
        }
    }
    debug_assert!(
        out.len() == count && out.iter().all(|p| p.capacity() >= len),
        "a stripe is {count} pieces of at least {len} bytes"
    );
    out
}

/// One drive's writer: a task that appends framed chunks to the shard file.
struct DriveWriter {
    tx: mpsc::Sender<Bytes>,
    task: JoinHandle<std::result::Result<(), DriveError>>,
    /// Set (before the task ends) when the drive refused a write for lack of space.
    full: Arc<AtomicBool>,
}

impl DriveWriter {
    fn spawn(mut w: Box<dyn ShardWriter>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Bytes>(WRITE_QUEUE_BLOCKS);
        let full = Arc::new(AtomicBool::new(false));
        let flag = full.clone();
        let task = tokio::spawn(async move {
            let r = async {
                while let Some(b) = rx.recv().await {
                    w.write_bytes(b).await?;
                }
                w.finish().await
            }
            .await;
            if matches!(r, Err(DriveError::DiskFull)) {
                flag.store(true, Ordering::SeqCst);
            }
            r
        });
        DriveWriter { tx, task, full }
    }
}

/// Where the framed shards of one object go: held in memory while the object may still be stored
/// inline, then streamed to one shard file per drive.
/// What a body streamed into a [`ShardSink`] must respect.
pub(crate) struct BodyBounds {
    /// More bytes than this fail at once with `EntityTooLarge`.
    pub limit: Option<u64>,
    /// Fewer bytes than this fail at the end with `IncompleteBody`.
    pub declared: Option<u64>,
    /// The `Content-MD5` the client sent: another digest fails with `BadDigest`.
    pub content_md5: Option<[u8; 16]>,
}

/// What [`ShardSink::stream`] wrote.
pub(crate) struct Streamed {
    /// Bytes of the body (the plaintext).
    pub size: u64,
    /// Bytes erasure coded: `size`, or the sealed size when encrypting.
    pub stored: u64,
    /// MD5 of the body.
    pub md5: [u8; 16],
}

/// The metadata's record of the code `erasure` writes with (asked of the codec in use, never
/// assumed), at shard index 0: each drive's copy gets its own index.
pub(crate) fn erasure_info(erasure: &Erasure, distribution: &[u8]) -> ErasureInfo {
    debug_assert_eq!(
        distribution.len(),
        erasure.data_shards() + erasure.parity_shards(),
        "a distribution names every shard of the code"
    );
    ErasureInfo {
        codec: erasure.codec_name().to_string(),
        bitrot: erasure.bitrot_name().to_string(),
        data: erasure.data_shards() as u8,
        parity: erasure.parity_shards() as u8,
        block_size: erasure.block_size() as u32,
        index: 0,
        distribution: distribution.to_vec(),
    }
}

pub(crate) struct ShardSink {
    drives: Vec<Arc<dyn Drive>>,
    /// For each drive position, the 0-based shard index it stores.
    shard_of: Vec<usize>,
    tmp_id: Uuid,
    data_dir: Uuid,
    part: u32,
    inline_limit: usize,
    write_quorum: usize,
    /// Some while every drive's shard is small enough to be inline.
    inline: Option<Vec<Vec<u8>>>,
    writers: Vec<Option<DriveWriter>>,
    /// Drive positions that failed; their error is logged once.
    failed: Vec<bool>,
    /// Drive positions that could not open a shard file because they are full.
    full: Vec<bool>,
    /// Chunks of a block encoded for inline storage (reused from block to block).
    scratch: Vec<Vec<u8>>,
    /// Where the framed chunks of a block are encoded for the writers.
    buffers: BufPool,
}

/// What one drive ended up with.
pub(crate) enum ShardOutcome {
    Inline(Vec<u8>),
    File,
    /// The shard could not be written; `full` when the drive refused it for lack of space.
    Failed {
        full: bool,
    },
}

/// Which shard files a [`ShardSink`] writes: `tmp/<tmp_id>/<data_dir>/part.<part>` on each drive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShardFiles {
    pub tmp_id: Uuid,
    pub data_dir: Uuid,
    pub part: u32,
}

impl ShardSink {
    pub(crate) fn new(
        drives: Vec<Arc<dyn Drive>>,
        distribution: &[u8],
        files: ShardFiles,
        inline_limit: usize,
        write_quorum: usize,
        buffers: BufPool,
    ) -> Self {
        let n = drives.len();
        let ShardFiles {
            tmp_id,
            data_dir,
            part,
        } = files;
        ShardSink {
            shard_of: distribution.iter().map(|&s| s as usize - 1).collect(),
            drives,
            tmp_id,
            data_dir,
            part,
            inline_limit,
            write_quorum,
            inline: Some(vec![Vec::new(); n]),
            writers: (0..n).map(|_| None).collect(),
            failed: vec![false; n],
            full: vec![false; n],
            scratch: Vec::new(),
            buffers,
        }
    }

    fn alive(&self) -> usize {
        self.failed.iter().filter(|f| !**f).count()
    }

    /// Whether drive `pos` failed for lack of space.
    fn is_full(&self, pos: usize) -> bool {
        self.full[pos]
            || self.writers[pos]
                .as_ref()
                .is_some_and(|w| w.full.load(Ordering::SeqCst))
    }

    fn check_quorum(&self) -> Result<()> {
        let alive = self.alive();
        if alive < self.write_quorum {
            let full = (0..self.drives.len())
                .filter(|&pos| self.failed[pos] && self.is_full(pos))
                .count();
            return Err(write_failed(alive, self.write_quorum, full));
        }
        Ok(())
    }

    /// Encodes one block of object data and hands each drive its framed chunk.
    ///
    /// While the object may still be stored inline the chunks are framed into per-drive
    /// buffers. After that, the block is encoded straight into pooled buffers (registered with
    /// the RDMA device when verbs is on): data chunks copied in once, parity computed into its
    /// place, each hash written in front of its chunk. Every writer then gets its framed chunk as
    /// `Bytes` over that buffer, so a remote writer sends it from there without another copy
    /// (over verbs the holder RDMA-READs it in place).
    /// The write pipeline of PUT and UploadPart: reads `body` block by block, hands each block to
    /// `on_block` (the caller's extra hashes) and MD5, and writes its encoded chunks to the
    /// drives. The length is held to `bounds.limit` as it streams and to `bounds.declared` at
    /// the end, the MD5 to `bounds.content_md5`.
    ///
    /// The MD5 runs on the md5x server (batched in SIMD lanes with the other uploads in flight)
    /// while this task encodes and writes the same block: a block costs the slower of the two,
    /// not their sum.
    pub(crate) async fn stream(
        &mut self,
        erasure: &Erasure,
        body: ByteStream,
        bounds: BodyBounds,
        mut on_block: impl FnMut(&[u8]),
        seal: Option<&PartKey>,
    ) -> Result<Streamed> {
        // Encrypting: blocks of whole packages, each sealed into exactly one erasure block.
        // The last block must be known as such before it is sealed (its final package is
        // flagged), so the next block is read before a block is sealed.
        let mut enc = seal.map(Encryptor::new);
        let plain_block = match enc {
            Some(_) => crate::sse::plain_block(erasure.block_size()),
            None => erasure.block_size(),
        };
        debug_assert!(
            enc.is_none() || crate::sse::stored_block(plain_block) == erasure.block_size(),
            "a sealed block is one erasure block"
        );
        let mut reader = BlockReader::new(body, plain_block);
        let mut md5 = Md5Server::global().stream();
        let mut size: u64 = 0;
        let mut stored: u64 = 0;
        let mut ahead: Option<Bytes> = None;
        let mut first = true;
        loop {
            let block = match ahead.take() {
                Some(b) => b,
                None => reader.next_block().await.map_err(Error::Body)?,
            };
            // An empty encrypted object is still one (empty, authenticated) package.
            if block.is_empty() && !(first && enc.is_some()) {
                break;
            }
            first = false;
            size += block.len() as u64;
            if let Some(limit) = bounds.limit.filter(|&l| size > l) {
                return Err(Error::EntityTooLarge { limit });
            }
            // Waits for the previous block's MD5, then hands this one over.
            md5.update(block.clone()).await;
            on_block(&block);
            match &mut enc {
                None => {
                    stored += block.len() as u64;
                    self.write_block(erasure, &block).await?;
                }
                Some(e) => {
                    let next = if block.is_empty() {
                        Bytes::new()
                    } else {
                        reader.next_block().await.map_err(Error::Body)?
                    };
                    let last = next.is_empty();
                    let mut sealed =
                        BytesMut::with_capacity(Encryptor::sealed_len(block.len(), last));
                    e.seal(&block, last, &mut sealed)
                        .map_err(|e| Error::Internal(e.to_string()))?;
                    stored += sealed.len() as u64;
                    self.write_block(erasure, &sealed).await?;
                    if last {
                        break;
                    }
                    ahead = Some(next);
                }
            }
        }
        if let Some(declared) = bounds.declared.filter(|&d| size < d) {
            return Err(Error::IncompleteBody {
                expected: declared,
                got: size,
            });
        }
        let md5 = md5.finalize().await;
        if bounds.content_md5.is_some_and(|want| want != md5) {
            return Err(Error::BadDigest);
        }
        Ok(Streamed { size, stored, md5 })
    }

    pub(crate) async fn write_block(&mut self, erasure: &Erasure, block: &[u8]) -> Result<()> {
        let framed_len = erasure.framed_len(block.len());
        if let Some(bufs) = &self.inline {
            if bufs[0].len() + framed_len <= self.inline_limit {
                let mut shards = std::mem::take(&mut self.scratch);
                let encoded = erasure.encode(block, &mut shards);
                if encoded.is_ok() {
                    if let Some(bufs) = &mut self.inline {
                        for (pos, buf) in bufs.iter_mut().enumerate() {
                            bitrot::frame_into(&shards[self.shard_of[pos]], buf);
                        }
                    }
                }
                self.scratch = shards;
                return encoded.map_err(|e| Error::Internal(e.to_string()));
            }
            self.open_writers().await?;
        }
        let n = erasure.total_shards();
        let mut pieces = pieces_of(&self.buffers, n, framed_len);
        {
            let mut slots: Vec<&mut [u8]> = pieces
                .iter_mut()
                .map(|p| {
                    p.set_len(framed_len);
                    &mut p[..]
                })
                .collect();
            erasure
                .encode_framed(block, &mut slots)
                .map_err(|e| Error::Internal(e.to_string()))?;
        }
        let framed: Vec<Bytes> = pieces.into_iter().map(PooledBuf::into_bytes).collect();
        let mut sends = Vec::with_capacity(self.drives.len());
        for (pos, w) in self.writers.iter().enumerate() {
            if let Some(w) = w {
                sends.push((pos, w.tx.clone(), framed[self.shard_of[pos]].clone()));
            }
        }
        drop(framed);
        let results = futures::future::join_all(
            sends
                .into_iter()
                .map(|(pos, tx, b)| async move { (pos, tx.send(b).await.is_ok()) }),
        )
        .await;
        for (pos, ok) in results {
            if !ok {
                // The writer task ended early: its error is collected in finish().
                self.failed[pos] = true;
            }
        }
        self.check_quorum()
    }

    /// Leaves inline mode: opens a shard file on every drive and writes what was buffered.
    async fn open_writers(&mut self) -> Result<()> {
        let bufs = self.inline.take().unwrap_or_default();
        let (tmp_id, data_dir, part) = (self.tmp_id, self.data_dir, self.part);
        let opened = on_all(&self.drives, |d| async move {
            d.create_shard_writer(tmp_id, data_dir, part).await
        })
        .await;
        for (pos, (w, buf)) in opened.into_iter().zip(bufs).enumerate() {
            match w {
                Ok(w) => {
                    let dw = DriveWriter::spawn(w);
                    if !buf.is_empty() && dw.tx.send(Bytes::from(buf)).await.is_err() {
                        self.failed[pos] = true;
                    }
                    self.writers[pos] = Some(dw);
                }
                Err(e) => {
                    warn!(drive = self.drives[pos].endpoint(), error = %e, "cannot open shard file");
                    self.full[pos] = matches!(e, DriveError::DiskFull);
                    self.failed[pos] = true;
                }
            }
        }
        self.check_quorum()
    }

    /// Flushes and syncs every shard file; says what each drive holds.
    pub(crate) async fn finish(mut self) -> Vec<ShardOutcome> {
        if let Some(bufs) = self.inline.take() {
            return bufs.into_iter().map(ShardOutcome::Inline).collect();
        }
        let mut out = Vec::with_capacity(self.drives.len());
        for (pos, w) in std::mem::take(&mut self.writers).into_iter().enumerate() {
            let outcome = match w {
                None => ShardOutcome::Failed {
                    full: self.full[pos],
                },
                Some(DriveWriter { tx, task, .. }) => {
                    drop(tx);
                    match task.await {
                        Ok(Ok(())) if !self.failed[pos] => ShardOutcome::File,
                        Ok(Ok(())) => ShardOutcome::Failed { full: false },
                        Ok(Err(e)) => {
                            warn!(drive = self.drives[pos].endpoint(), error = %e, "shard write failed");
                            ShardOutcome::Failed {
                                full: matches!(e, DriveError::DiskFull),
                            }
                        }
                        Err(e) => {
                            warn!(drive = self.drives[pos].endpoint(), error = %e, "shard writer task failed");
                            ShardOutcome::Failed { full: false }
                        }
                    }
                }
            };
            out.push(outcome);
        }
        out
    }
}

impl Drop for ShardSink {
    fn drop(&mut self) {
        for w in self.writers.iter().flatten() {
            w.task.abort();
        }
    }
}

/// Removes a write's tmp directory on every drive unless disarmed: covers errors, and a request
/// future dropped mid-upload (client gone).
pub(crate) struct TmpGuard {
    drives: Vec<Arc<dyn Drive>>,
    tmp_id: Uuid,
    armed: bool,
}

impl TmpGuard {
    pub(crate) fn new(drives: Vec<Arc<dyn Drive>>, tmp_id: Uuid) -> Self {
        TmpGuard {
            drives,
            tmp_id,
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for TmpGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let drives = std::mem::take(&mut self.drives);
        let tmp_id = self.tmp_id;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for d in drives {
                    if let Err(e) = d.delete_tmp(tmp_id).await {
                        warn!(drive = d.endpoint(), error = %e, "cannot remove tmp data of an aborted write");
                    }
                }
            });
        }
    }
}

impl ErasureSet {
    /// Writes a new version of the object: `version_id` `None` is the null version (it
    /// replaces the null version, the only one of an unversioned bucket).
    pub async fn put_object(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        body: ByteStream,
        opts: PutOptions,
        version_id: Option<Uuid>,
    ) -> Result<ObjectInfo> {
        self.require_bucket_for_write(bucket).await?;
        if let Some(p) = &opts.precondition {
            self.check_precondition(bucket, key, p).await?;
        }
        let mut opts = opts;
        let encryption = opts.encryption.take();
        let erasure = match &encryption {
            None => self.new_erasure()?,
            Some(_) => {
                self.new_erasure_with_block(crate::sse::stored_block(self.cfg.block_size))?
            }
        };
        let stored_estimate = match (&encryption, opts.size) {
            (Some(_), Some(n)) => quarry_crypt::encrypted_size(n),
            (_, n) => n.unwrap_or(0),
        };
        self.check_space(erasure.shard_file_size(stored_estimate))
            .await?;
        let distribution = self.distribution(bucket, key);
        let tmp_id = self.new_id();
        let data_dir = self.new_id();
        let mut tmp_guard = TmpGuard::new(self.drives.clone(), tmp_id);
        let write_quorum = self.set_write_quorum();

        let mut sink = ShardSink::new(
            self.drives.clone(),
            &distribution,
            ShardFiles {
                tmp_id,
                data_dir,
                part: 1,
            },
            self.cfg.inline_limit,
            write_quorum,
            self.buffers.clone(),
        );
        let part_key = encryption.as_ref().map(|e| e.key.part_key(1));
        let Streamed {
            stored,
            md5: digest,
            ..
        } = sink
            .stream(
                &erasure,
                body,
                BodyBounds {
                    limit: opts.size,
                    declared: opts.size,
                    content_md5: opts.content_md5,
                },
                |_| {},
                part_key.as_ref(),
            )
            .await?;
        let etag = match &encryption {
            Some(e) if !e.etag_is_md5 => crate::sse::keyed_etag(&e.key, &digest),
            _ => hex::encode(digest),
        };
        let mut headers = opts.headers;
        if let Some(e) = &encryption {
            crate::sse::record(&mut headers, e);
        }
        let mut checksums = opts.checksums;
        if let Some(late) = &opts.late_checksums {
            checksums.extend((late.0)());
        }
        let outcomes = sink.finish().await;
        let full = outcomes
            .iter()
            .filter(|o| matches!(o, ShardOutcome::Failed { full: true }))
            .count();

        let inline = outcomes
            .iter()
            .any(|o| matches!(o, ShardOutcome::Inline(_)));
        let base = ObjectMeta {
            version: META_VERSION,
            version_id,
            delete_marker: false,
            size: stored,
            mod_time_ns: self.now_ns(),
            etag: etag.clone(),
            headers,
            user_meta: opts.user_meta,
            checksums,
            erasure: erasure_info(&erasure, &distribution),
            data_dir: if inline { None } else { Some(data_dir) },
            parts: vec![PartInfo {
                number: 1,
                size: stored,
                etag,
            }],
            inline: None,
        };
        let metas: Vec<Option<ObjectMeta>> = outcomes
            .into_iter()
            .enumerate()
            .map(|(pos, o)| {
                let mut m = base.clone();
                m.erasure.index = distribution[pos];
                match o {
                    ShardOutcome::Inline(b) => {
                        m.inline = Some(b.into());
                        Some(m)
                    }
                    ShardOutcome::File => Some(m),
                    ShardOutcome::Failed { .. } => None,
                }
            })
            .collect();
        let written = metas.iter().filter(|m| m.is_some()).count();
        if written < write_quorum {
            return Err(write_failed(written, write_quorum, full));
        }

        let committed = self
            .commit(tmp_id, bucket, key, &metas, opts.precondition.as_ref())
            .await?;
        tmp_guard.disarm();
        let ok = count_ok(&committed);
        if ok < write_quorum {
            if committed
                .iter()
                .filter(|a| matches!(a, Err(DriveError::VolumeNotFound)))
                .count()
                > 0
                && ok == 0
            {
                return Err(Error::BucketNotFound);
            }
            return Err(write_failed(
                ok,
                write_quorum,
                full + count_full(&committed),
            ));
        }
        if ok < self.drives.len() {
            self.queue_heal(bucket, key);
        }
        Ok(object_info(bucket, key, &base))
    }

    /// Fails with `StorageFull` when fewer than a write quorum of drives have `shard_bytes` (plus
    /// a small reserve) free. A write that ran out of space part way would fail too, but only
    /// after its commit replaced the old version on the drives that had room (a minority, yet
    /// possibly a read quorum): refusing up front leaves existing objects untouched, as MinIO's
    /// free-space check does. Drives that do not answer are left to the write's own quorum.
    pub(crate) async fn check_space(&self, shard_bytes: u64) -> Result<()> {
        let infos = on_all(&self.drives, |d| async move { d.disk_info().await }).await;
        let answered = count_ok(&infos);
        let want = shard_bytes.saturating_add(SPACE_RESERVE);
        let roomy = infos
            .iter()
            .filter(|i| matches!(i, Ok(info) if info.free >= want))
            .count();
        let need = self.set_write_quorum();
        if roomy < need && answered >= need {
            warn!(
                have = roomy,
                need, shard_bytes, "refusing a write: too few drives have free space"
            );
            return Err(Error::StorageFull { have: roomy, need });
        }
        Ok(())
    }

    /// Renames the written data into place on every drive that has a metadata copy, under the
    /// object's lock, so two writers of one key never leave a mix of their shards. A write
    /// precondition is evaluated under the same lock, so it is atomic against concurrent writers:
    /// of two `If-None-Match: *` uploads of one key, exactly one commits.
    pub(crate) async fn commit(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        metas: &[Option<ObjectMeta>],
        precondition: Option<&WritePrecondition>,
    ) -> Result<Vec<std::result::Result<(), DriveError>>> {
        let _guard = self.locks.lock(&format!("{bucket}/{key}")).await?;
        if let Some(p) = precondition {
            self.check_precondition(bucket, key, p).await?;
        }
        Ok(self.commit_locked(tmp_id, bucket, key, metas).await)
    }

    /// [`Self::commit`] for a caller that holds the key's lock.
    pub(crate) async fn commit_locked(
        &self,
        tmp_id: Uuid,
        bucket: &str,
        key: &str,
        metas: &[Option<ObjectMeta>],
    ) -> Vec<std::result::Result<(), DriveError>> {
        let jobs = self.drives.iter().zip(metas).map(|(d, m)| {
            let d = d.clone();
            async move {
                match m {
                    Some(m) => d.rename_data(tmp_id, bucket, key, m).await,
                    None => {
                        let _ = d.delete_tmp(tmp_id).await;
                        Err(DriveError::Unusable("shard write failed".into()))
                    }
                }
            }
        });
        futures::future::join_all(jobs).await
    }

    /// Evaluates a conditional write against the object's current version. Also called before
    /// a body is read, so a doomed upload fails before the client sends gigabytes.
    pub(crate) async fn check_precondition(
        &self,
        bucket: &str,
        key: &str,
        p: &WritePrecondition,
    ) -> Result<()> {
        let current = match self.read_meta_quorum(bucket, key).await {
            // A key whose latest version is a delete marker has no current object.
            Ok((meta, _, _)) if meta.delete_marker => None,
            Ok((meta, _, _)) => Some(meta),
            Err(Error::ObjectNotFound) => None,
            Err(e) => return Err(e),
        };
        match (p, current) {
            (WritePrecondition::IfNoneMatchAny, None) => Ok(()),
            (WritePrecondition::IfNoneMatchAny, Some(_)) => Err(Error::PreconditionFailed),
            (WritePrecondition::IfNoneMatch(_), None) => Ok(()),
            (WritePrecondition::IfNoneMatch(etags), Some(m)) => {
                if etag_matches(etags, &m.etag) {
                    Err(Error::PreconditionFailed)
                } else {
                    Ok(())
                }
            }
            (WritePrecondition::IfMatch(_), None) => Err(Error::ObjectNotFound),
            (WritePrecondition::IfMatch(etag), Some(m)) => {
                if etag_matches(etag, &m.etag) {
                    Ok(())
                } else {
                    Err(Error::PreconditionFailed)
                }
            }
        }
    }
}

/// Whether an `If-Match` value names this ETag: `*`, or one of a comma-separated list of
/// (quoted or bare, possibly weak) ETags.
pub(crate) fn etag_matches(condition: &str, etag: &str) -> bool {
    condition.split(',').map(str::trim).any(|c| {
        let c = c.strip_prefix("W/").unwrap_or(c);
        c == "*" || c.trim_matches('"') == etag
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_of(pieces: Vec<Vec<u8>>) -> ByteStream {
        Box::pin(futures::stream::iter(
            pieces.into_iter().map(|p| Ok(Bytes::from(p))),
        ))
    }

    #[tokio::test]
    async fn block_reader_cuts_exact_blocks() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        for split in [1usize, 7, 100, 1024, 3000, 10_000] {
            let pieces: Vec<Vec<u8>> = data.chunks(split).map(|c| c.to_vec()).collect();
            let mut r = BlockReader::new(stream_of(pieces), 1024);
            let mut out = Vec::new();
            loop {
                let b = r.next_block().await.unwrap();
                if b.is_empty() {
                    break;
                }
                assert!(b.len() == 1024 || out.len() + b.len() == data.len());
                out.extend_from_slice(&b);
            }
            assert_eq!(out, data, "split {split}");
        }
    }
}
