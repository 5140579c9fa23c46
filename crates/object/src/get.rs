//! Streaming GET: for each block of the requested range, read k framed chunks (data shards
//! first), verify their bitrot hashes, fall back to parity for any that are missing or corrupt,
//! decode, and yield the requested bytes. The next block is read while the current one is sent.
//! Damage seen on the way queues the object for healing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use quarry_buf::PooledBuf;
use quarry_crypt::{Decryptor, PackageRange};
use quarry_disk::{DriveError, ObjectMeta, PartInfo};
use quarry_erasure::{bitrot, Erasure};
use tracing::{debug, warn};
use uuid::Uuid;

use crate::api::{GetObjectReader, HttpRange, KeyOpener, ObjectStream};
use crate::error::{Error, Result};
use crate::set::{object_info, ErasureSet};
use crate::stats::SetCounters;

// A frame's hash as the drives and the data plane know it is the bitrot hash.
const _: () = assert!(quarry_disk::FRAME_HASH_LEN == bitrot::HASH_LEN);

/// Blocks read ahead of the one being sent.
const READ_AHEAD: usize = 2;

/// Opens the erasure code an object was written with, refusing names this build does not know.
pub(crate) fn erasure_of(meta: &ObjectMeta) -> Result<Erasure> {
    let e = &meta.erasure;
    Erasure::with_names(
        &e.codec,
        &e.bitrot,
        e.data as usize,
        e.parity as usize,
        e.block_size as usize,
    )
    .map_err(|err| Error::Corrupt(format!("object metadata names an unusable code: {err}")))
}

/// Why [`ShardReader::check_chunk_into`] has no chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChunkFault {
    /// Missing, truncated, of the wrong length or failing its bitrot hash: the drive's copy is
    /// bad.
    Damaged,
    /// The drive could not be asked (offline, its connection broke): why.
    Unreachable(String),
}

/// Reads the shards of one object version from the drives that hold it.
pub(crate) struct ShardReader {
    pub(crate) set: Arc<ErasureSet>,
    pub(crate) bucket: String,
    pub(crate) key: String,
    pub(crate) erasure: Erasure,
    /// Per drive position: its metadata if it holds this version.
    pub(crate) metas: Vec<Option<ObjectMeta>>,
    /// Drive position of each 0-based shard index (if that drive holds this version).
    pub(crate) holder: Vec<Option<usize>>,
    pub(crate) data_dir: Option<uuid::Uuid>,
    /// Set once a missing or corrupt shard is seen, so the object is queued for heal once.
    pub(crate) damaged: AtomicBool,
}

impl ShardReader {
    pub(crate) fn new(
        set: Arc<ErasureSet>,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
        metas: Vec<Option<ObjectMeta>>,
    ) -> Result<Self> {
        let erasure = erasure_of(meta)?;
        let n = erasure.total_shards();
        if meta.erasure.distribution.len() != n || metas.len() != n {
            return Err(Error::Corrupt(format!(
                "object spreads over {} drives but its set has {}",
                meta.erasure.distribution.len(),
                metas.len()
            )));
        }
        let mut holder = vec![None; n];
        for (pos, &shard) in meta.erasure.distribution.iter().enumerate() {
            let s = shard as usize;
            if s == 0 || s > n {
                return Err(Error::Corrupt(format!("shard index {s} out of range")));
            }
            if metas[pos].is_some() {
                holder[s - 1] = Some(pos);
            }
        }
        let damaged = metas.iter().any(|m| m.is_none());
        Ok(ShardReader {
            set,
            bucket: bucket.to_string(),
            key: key.to_string(),
            erasure,
            metas,
            holder,
            data_dir: meta.data_dir,
            damaged: AtomicBool::new(damaged),
        })
    }

    /// The framed length of each chunk of block `block` of `part`.
    pub(crate) fn framed_len(&self, part: &PartInfo, block: u64) -> usize {
        self.erasure
            .framed_len(self.erasure.block_len(part.size, block))
    }

    /// `count` pieces of `framed_len` bytes to read chunks into (a stripe of the set's pool), or
    /// none when the version is inline: its chunks are slices of the metadata.
    pub(crate) fn stripe(&self, count: usize, framed_len: usize) -> Vec<PooledBuf> {
        if self.data_dir.is_none() {
            Vec::new()
        } else {
            self.set.stripe(count, framed_len)
        }
    }

    fn note_damage(&self) {
        self.damaged.store(true, Ordering::Relaxed);
    }

    /// Queues a heal if anything was found missing or corrupt.
    pub(crate) fn heal_if_damaged(&self) {
        if self.damaged.load(Ordering::Relaxed) {
            self.set.queue_heal(&self.bucket, &self.key);
        }
    }

    /// Checks, without reading them, that the shard files this read did not need are present and
    /// whole; queues a heal otherwise. A GET reads only k shards, so a lost parity shard would
    /// otherwise go unnoticed until the scanner passes.
    pub(crate) async fn check_unread_shards(&self, parts: &[PartInfo]) {
        let Some(data_dir) = self.data_dir else {
            return;
        };
        let k = self.erasure.data_shards();
        for part in parts {
            let want = self.erasure.shard_file_size(part.size);
            let checks = self.holder[k..].iter().flatten().map(|&pos| {
                let drive = self.set.drives[pos].clone();
                async move {
                    drive
                        .stat_shard(&self.bucket, &self.key, data_dir, part.number)
                        .await
                }
            });
            for r in futures::future::join_all(checks).await {
                if !matches!(r, Ok(len) if len == want) {
                    self.note_damage();
                }
            }
        }
    }

    /// Reads and verifies shard `shard` of block `block` of `part` straight into `dst` (a piece
    /// of the block's stripe buffer, at least the framed chunk long; a buffer of its own when
    /// `None`); `None` if it is missing, unreadable or corrupt. The chunk returned is a slice of
    /// `dst`, or for inline shards (which need no `dst`) of the metadata: no copy either way.
    pub(crate) async fn read_chunk_into(
        &self,
        part: &PartInfo,
        block: u64,
        shard: usize,
        dst: Option<PooledBuf>,
    ) -> Option<Bytes> {
        self.check_chunk_into(part, block, shard, dst).await.ok()
    }

    /// [`Self::read_chunk_into`], saying why a chunk is not there: damaged on its drive (a
    /// heal rewrites it) or not read at all because the drive could not be reached (nothing is
    /// known about the chunk: a heal must not rewrite it on that evidence).
    pub(crate) async fn check_chunk_into(
        &self,
        part: &PartInfo,
        block: u64,
        shard: usize,
        dst: Option<PooledBuf>,
    ) -> std::result::Result<Bytes, ChunkFault> {
        let Some(pos) = self.holder[shard] else {
            return Err(ChunkFault::Damaged);
        };
        let framed_len = self.framed_len(part, block);
        let offset = self.erasure.shard_offset(block);
        let Some(meta) = self.metas[pos].as_ref() else {
            return Err(ChunkFault::Damaged);
        };
        let framed: Bytes = match &meta.inline {
            Some(inline) => {
                let start = offset as usize;
                match start
                    .checked_add(framed_len)
                    .filter(|&end| end <= inline.len())
                {
                    // A slice of the metadata's bytes (which are a slice of the file's): no copy.
                    Some(end) => inline.slice(start..end),
                    None => {
                        warn!(bucket = %self.bucket, key = %self.key, shard, "inline shard is truncated");
                        self.note_damage();
                        return Err(ChunkFault::Damaged);
                    }
                }
            }
            None => {
                let Some(data_dir) = self.data_dir else {
                    self.note_damage();
                    return Err(ChunkFault::Damaged);
                };
                let framed = self
                    .read_frame(pos, part.number, data_dir, offset, framed_len, dst, false)
                    .await?;
                if let Ok(chunk) = bitrot::verify(&framed) {
                    // The chunk is a slice of the buffer it was read into: no copy.
                    return Ok(framed.slice_ref(chunk));
                }
                let drive = &self.set.drives[pos];
                if !drive.frame_reads_check_hash_only() {
                    framed
                } else {
                    // Only the frame's hash was authenticated on its way: the chunk may have been
                    // changed there rather than on the drive. Read it again with every byte
                    // authenticated: a damaged copy fails the check below all the same.
                    warn!(drive = drive.endpoint(), bucket = %self.bucket, key = %self.key, block, shard,
                        "a shard frame failed its bitrot check after a read that authenticated only its hash; reading it again");
                    SetCounters::add(&self.set.counters.frame_rereads, 1);
                    self.read_frame(pos, part.number, data_dir, offset, framed_len, None, true)
                        .await?
                }
            }
        };
        match bitrot::verify(&framed) {
            // The chunk is a slice of the buffer it was read into: no copy.
            Ok(chunk) => Ok(framed.slice_ref(chunk)),
            Err(e) => {
                warn!(drive = self.set.drives[pos].endpoint(), bucket = %self.bucket, key = %self.key, block, shard, error = %e, "bitrot detected");
                self.note_damage();
                Err(ChunkFault::Damaged)
            }
        }
    }

    /// Reads the frame (`framed_len` bytes at `offset`) of shard file `part` in `data_dir` on
    /// drive `pos` into `dst` (a buffer of its own when `None` or too small), unchecked: with
    /// [`quarry_disk::Drive::read_frame_into`], or with `read_shard_into` (every byte authenticated
    /// on the way) when `whole`.
    #[allow(clippy::too_many_arguments)]
    async fn read_frame(
        &self,
        pos: usize,
        part: u32,
        data_dir: Uuid,
        offset: u64,
        framed_len: usize,
        dst: Option<PooledBuf>,
        whole: bool,
    ) -> std::result::Result<Bytes, ChunkFault> {
        let mut dst = dst
            .filter(|d| d.capacity() >= framed_len)
            .unwrap_or_else(|| PooledBuf::heap(framed_len));
        dst.set_len(framed_len);
        // Addresses only (compared, never dereferenced).
        let given = dst.as_ptr() as usize..dst.as_ptr() as usize + dst.len();
        let drive = &self.set.drives[pos];
        let read = if whole {
            drive
                .read_shard_into(&self.bucket, &self.key, data_dir, part, offset, dst)
                .await
        } else {
            drive
                .read_frame_into(&self.bucket, &self.key, data_dir, part, offset, dst)
                .await
        };
        match read {
            Ok(b) if b.len() == framed_len => {
                // The chunk should be the buffer it was read into. Bytes that come back anywhere
                // else were moved there by a copy (a data plane that gathered pieces, a drive
                // that cannot read in place): counted.
                let got = b.addr();
                if !(given.start <= got && got + b.len() <= given.end) {
                    SetCounters::add(&self.set.counters.get_copied_bytes, b.len() as u64);
                }
                Ok(b.into_bytes())
            }
            Ok(b) => {
                warn!(drive = drive.endpoint(), bucket = %self.bucket, key = %self.key, got = b.len(), want = framed_len, "shard read returned the wrong length");
                self.note_damage();
                Err(ChunkFault::Damaged)
            }
            Err(e) => {
                if !matches!(e, DriveError::FileNotFound | DriveError::Truncated { .. }) {
                    warn!(drive = drive.endpoint(), bucket = %self.bucket, key = %self.key, error = %e, "shard read failed");
                }
                self.note_damage();
                Err(match e {
                    DriveError::Unusable(_) => ChunkFault::Unreachable(e.to_string()),
                    _ => ChunkFault::Damaged,
                })
            }
        }
    }

    /// Reads the chunks of block `block` of `part` until k of them are good: the data chunks
    /// first, all at once, and a parity chunk for each one that fails. Returns the block's k + m
    /// slots (`None`: not read, missing or corrupt), at least k of them present; fewer is
    /// [`Error::Corrupt`].
    ///
    /// The data chunks land in one stripe buffer (one pooled buffer cut in k pieces, registered
    /// with the RDMA device when verbs is on, so each holder writes its chunk straight to its
    /// place), parity chunks in a second one taken only when needed; inline chunks are slices of
    /// their metadata.
    pub(crate) async fn read_present(
        &self,
        part: &PartInfo,
        block: u64,
    ) -> Result<Vec<Option<Bytes>>> {
        let k = self.erasure.data_shards();
        let n = self.erasure.total_shards();
        let framed_len = self.framed_len(part, block);
        let mut shards: Vec<Option<Bytes>> = vec![None; n];
        let mut data_pieces = self.stripe(k, framed_len).into_iter();
        let mut parity_pieces: Option<std::vec::IntoIter<PooledBuf>> = None;
        let mut piece_for = |s: usize| {
            if s < k {
                data_pieces.next()
            } else {
                parity_pieces
                    .get_or_insert_with(|| self.stripe(n - k, framed_len).into_iter())
                    .next()
            }
        };
        // Data shards first: when they are all good no decoding is needed.
        let mut next = 0usize;
        let read = |s: usize, dst: Option<PooledBuf>| async move {
            (s, self.read_chunk_into(part, block, s, dst).await)
        };
        let mut inflight = FuturesUnordered::new();
        while next < n && inflight.len() < k {
            inflight.push(read(next, piece_for(next)));
            next += 1;
        }
        let mut good = 0usize;
        while let Some((shard, chunk)) = inflight.next().await {
            match chunk {
                Some(c) => {
                    shards[shard] = Some(c);
                    good += 1;
                }
                None => {
                    if next < n {
                        inflight.push(read(next, piece_for(next)));
                        next += 1;
                    }
                }
            }
            if good >= k {
                break;
            }
        }
        drop(inflight);
        if good < k {
            return Err(Error::Corrupt(format!(
                "{}/{}: block {block} of part {} has {good} readable shards, {k} needed",
                self.bucket, self.key, part.number
            )));
        }
        Ok(shards)
    }

    /// Reads block `block` of `part` and returns its data (all of it) as pieces in order.
    ///
    /// The chunks come from [`Self::read_present`]. When the k data chunks are all healthy, the
    /// pieces returned are the chunks themselves: nothing is copied or decoded. When some are
    /// missing or corrupt, the missing data chunks are decoded from the chunks where they landed
    /// (read in place, not copied) into a new buffer.
    pub(crate) async fn read_block(&self, part: &PartInfo, block: u64) -> Result<Vec<Bytes>> {
        let k = self.erasure.data_shards();
        let block_len = self.erasure.block_len(part.size, block);
        let mut shards = self.read_present(part, block).await?;
        let missing: Vec<usize> = (0..k).filter(|&i| shards[i].is_none()).collect();
        if !missing.is_empty() {
            // Degraded: decode the missing data chunks from the k chunks as they lie.
            let chunk_len = self.erasure.chunk_len(block_len);
            let mut decoded = self.set.stripe(missing.len(), chunk_len);
            {
                let present: Vec<Option<&[u8]>> = shards.iter().map(|s| s.as_deref()).collect();
                let mut out: Vec<(usize, &mut [u8])> = missing
                    .iter()
                    .zip(decoded.iter_mut())
                    .map(|(&i, b)| {
                        b.set_len(chunk_len);
                        (i, &mut b[..])
                    })
                    .collect();
                self.erasure
                    .reconstruct_into(&present, &mut out)
                    .map_err(|e| Error::Corrupt(e.to_string()))?;
            }
            SetCounters::add(
                &self.set.counters.get_decoded_bytes,
                (missing.len() * chunk_len) as u64,
            );
            for (&i, b) in missing.iter().zip(decoded) {
                shards[i] = Some(b.into_bytes());
            }
        }
        // The block is the data chunks in order, cut to the block's length (the last chunk
        // carries padding).
        let mut left = block_len;
        let mut out = Vec::with_capacity(k);
        for c in shards.into_iter().take(k).flatten() {
            if left == 0 {
                break;
            }
            let take = c.len().min(left);
            left -= take;
            out.push(c.slice(..take));
        }
        if left != 0 {
            return Err(Error::Corrupt(format!(
                "{}/{}: block {block} of part {} has short chunks",
                self.bucket, self.key, part.number
            )));
        }
        Ok(out)
    }
}

/// What a GET does when the first block of the version it resolved cannot be read (the only
/// failure it can still answer with an S3 error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstBlock {
    /// Queues a heal of the key, as any damage found does.
    Heals,
    /// Only answers `Corrupt`: the caller finds out whether the version went meanwhile (nothing
    /// to heal) or is damaged.
    Told,
}

/// The bytes `[start, end)` of a block given as pieces, as slices of those pieces (no copy).
fn slice_pieces(pieces: Vec<Bytes>, start: usize, end: usize) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(pieces.len());
    let mut at = 0usize;
    for p in pieces {
        let (ps, pe) = (at, at + p.len());
        at = pe;
        let (s, e) = (start.max(ps), end.min(pe));
        if s < e {
            out.push(p.slice(s - ps..e - ps));
        }
    }
    out
}

/// One block to send: which part and block, and which bytes of it.
#[derive(Debug, Clone)]
struct BlockSlice {
    part: PartInfo,
    block: u64,
    start: usize,
    end: usize,
}

/// The blocks covering `[offset, offset+len)` of an object made of `parts`.
fn plan(erasure: &Erasure, parts: &[PartInfo], offset: u64, len: u64) -> Vec<BlockSlice> {
    let bs = erasure.block_size() as u64;
    let mut out = Vec::new();
    let (mut part_start, end) = (0u64, offset + len);
    for p in parts {
        let part_end = part_start + p.size;
        if part_end > offset && part_start < end {
            let from = offset.max(part_start) - part_start;
            let to = end.min(part_end) - part_start;
            for b in from / bs..to.div_ceil(bs) {
                let bstart = b * bs;
                let s = from.max(bstart) - bstart;
                let e = to.min(bstart + bs) - bstart;
                out.push(BlockSlice {
                    part: p.clone(),
                    block: b,
                    start: s as usize,
                    end: e as usize,
                });
            }
        }
        part_start = part_end;
    }
    out
}

impl ErasureSet {
    pub async fn get_object(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        range: Option<HttpRange>,
    ) -> Result<GetObjectReader> {
        self.get_object_version(bucket, key, None, range).await
    }

    /// GET of one version (`None`: the latest); see [`ErasureSet::resolve_version`]. An
    /// encrypted version is refused (`KeyRequired`): see [`ErasureSet::get_object_decrypted`].
    pub async fn get_object_version(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        version: Option<crate::api::VersionId>,
        range: Option<HttpRange>,
    ) -> Result<GetObjectReader> {
        self.get_object_decrypted(bucket, key, version, range, None)
            .await
    }

    /// GET of one version, opening an encrypted one's key with `opener` (`KeyRequired`
    /// without one). A plain version reads as ever: its healthy path copies nothing.
    pub async fn get_object_decrypted(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        version: Option<crate::api::VersionId>,
        range: Option<HttpRange>,
        opener: Option<&KeyOpener>,
    ) -> Result<GetObjectReader> {
        let (meta, metas) = self.resolve_version(bucket, key, version).await?;
        let first = self
            .get_resolved(
                bucket,
                key,
                meta.clone(),
                metas,
                range,
                opener,
                FirstBlock::Told,
            )
            .await;
        let Err(Error::Corrupt(why)) = first else {
            return first;
        };
        // GETs take no lock, so the version may have been replaced or deleted, and its data
        // dir removed, between the reading of its metadata and of its first block. Nothing has
        // been answered yet: the GET answers what the key holds now (a new version, or not
        // found), as if it had come a moment later, and queues no heal (the key is whole). The
        // same version still unreadable is damage, answered as such, and healed.
        match self.resolve_version(bucket, key, version).await {
            // The quorum's own test of one version: an overwrite of the null version keeps its
            // id, not its time or data dir.
            Ok((now, metas)) if !crate::quorum::same_version(&now, &meta) => {
                debug!(bucket, key, error = %why, "the version was replaced while its first block was read; reading the key again");
                self.get_resolved(bucket, key, now, metas, range, opener, FirstBlock::Heals)
                    .await
            }
            Err(
                e @ (Error::ObjectNotFound
                | Error::NoSuchVersion
                | Error::LatestIsDeleteMarker(_)
                | Error::VersionIsDeleteMarker(_)),
            ) => {
                debug!(bucket, key, error = %why, "the version was deleted while its first block was read");
                Err(e)
            }
            _ => {
                self.queue_heal(bucket, key);
                Err(Error::Corrupt(why))
            }
        }
    }

    /// [`ErasureSet::get_object_decrypted`] of the version `meta` (its copies on the drives:
    /// `metas`), as resolved.
    #[allow(clippy::too_many_arguments)]
    async fn get_resolved(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        mut metas: Vec<Option<ObjectMeta>>,
        range: Option<HttpRange>,
        opener: Option<&KeyOpener>,
        first_block: FirstBlock,
    ) -> Result<GetObjectReader> {
        self.mask_healing(bucket, key, &mut metas);
        let info = object_info(bucket, key, &meta);
        if !info.is_encrypted() {
            let (offset, len) = match range {
                Some(r) => r.resolve(meta.size)?,
                None => (0, meta.size),
            };
            return self
                .read_range(bucket, key, meta, metas, info, offset, len, first_block)
                .await;
        }
        crate::sse::check_format(&meta)?;
        let opener = opener.ok_or(Error::KeyRequired)?;
        let object_key = opener(&info)?;
        let (offset, len) = match range {
            Some(r) => r.resolve(info.size)?,
            None => (0, info.size),
        };
        // The packages holding the range, part by part; one stored range covers them all.
        let mut decryptors = Vec::new();
        let (mut from, mut to) = (None, 0u64);
        let (mut plain_at, mut stored_at) = (0u64, 0u64);
        let part_keys = crate::sse::PartKeys::of(&meta)?;
        for (i, p) in meta.parts.iter().enumerate() {
            let plain = crate::sse::part_plain_size(p.size)?;
            let (s, e) = (offset.max(plain_at), (offset + len).min(plain_at + plain));
            // An empty read (an empty object) still opens its first part's empty package.
            if s < e || (len == 0 && decryptors.is_empty()) {
                let (s, e) = if s < e { (s, e) } else { (plain_at, plain_at) };
                let pr = PackageRange::new(plain, s - plain_at, e - s);
                from.get_or_insert(stored_at + pr.enc_offset);
                to = stored_at + pr.enc_offset + pr.enc_len;
                let part_key = part_keys.key(&object_key, i, p.number);
                decryptors.push(Decryptor::new(&part_key, plain, &pr));
            }
            plain_at += plain;
            stored_at += p.size;
        }
        let from = from.unwrap_or(0);
        let stored = self
            .read_range(
                bucket,
                key,
                meta,
                metas,
                info.clone(),
                from,
                to - from,
                first_block,
            )
            .await?;
        let mut body = crate::sse::decrypt_stream(stored.body, decryptors);
        // The first piece is opened before the answer is given, so a key or data that does not
        // authenticate gets an S3 error instead of a 200 whose body breaks off.
        let first = body.next().await;
        let body: ObjectStream = match first {
            None => Box::pin(futures::stream::empty()),
            Some(Err(e)) => return Err(e),
            Some(Ok(b)) => Box::pin(futures::stream::iter([Ok(b)]).chain(body)),
        };
        Ok(GetObjectReader {
            info,
            range: (offset, len),
            body,
        })
    }

    /// The stored bytes `offset..offset+len` of a version, as its GET body.
    #[allow(clippy::too_many_arguments)]
    async fn read_range(
        self: &Arc<Self>,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        metas: Vec<Option<ObjectMeta>>,
        info: crate::api::ObjectInfo,
        offset: u64,
        len: u64,
        first_block: FirstBlock,
    ) -> Result<GetObjectReader> {
        let reader = Arc::new(ShardReader::new(self.clone(), bucket, key, &meta, metas)?);
        let mut blocks = plan(&reader.erasure, &meta.parts, offset, len).into_iter();
        let parts = Arc::new(meta.parts.clone());
        // After the last block (or a failed one), check the shards the read did not touch and
        // heal what is damaged, off the response path: the client has its bytes already.
        let finish = {
            let (reader, parts) = (reader.clone(), parts.clone());
            let runtime = self.cfg.runtime.clone();
            move || {
                let (reader, parts) = (reader.clone(), parts.clone());
                runtime.spawn(Box::pin(async move {
                    reader.check_unread_shards(&parts).await;
                    reader.heal_if_damaged();
                }));
            }
        };
        // The first block is read before the answer is given, so an object that cannot be read
        // gets an S3 error instead of a 200 whose body breaks off.
        let Some(first) = blocks.next() else {
            finish();
            return Ok(GetObjectReader {
                info,
                range: (offset, len),
                body: Box::pin(futures::stream::empty()),
            });
        };
        let first_data = match reader.read_block(&first.part, first.block).await {
            Ok(d) => slice_pieces(d, first.start, first.end),
            Err(e @ Error::Corrupt(_)) if first_block == FirstBlock::Told => return Err(e),
            Err(e) => {
                finish();
                return Err(e);
            }
        };
        let rest: Vec<BlockSlice> = blocks.collect();
        if rest.is_empty() {
            finish();
        }
        let last = rest.len();
        let finish = Arc::new(finish);
        let tail = futures::stream::iter(rest.into_iter().enumerate())
            .map(move |(i, b)| {
                let (reader, finish) = (reader.clone(), finish.clone());
                async move {
                    let data = reader.read_block(&b.part, b.block).await;
                    if i + 1 == last || data.is_err() {
                        finish();
                    }
                    Ok::<_, Error>(slice_pieces(data?, b.start, b.end))
                }
            })
            .buffered(READ_AHEAD)
            .flat_map(|r| match r {
                Ok(pieces) => futures::stream::iter(pieces.into_iter().map(Ok).collect::<Vec<_>>()),
                Err(e) => futures::stream::iter(vec![Err(e)]),
            });
        let body: ObjectStream =
            Box::pin(futures::stream::iter(first_data.into_iter().map(Ok::<_, Error>)).chain(tail));
        Ok(GetObjectReader {
            info,
            range: (offset, len),
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_the_range_exactly() {
        let e = Erasure::new(2, 2, 100).unwrap();
        let parts = vec![
            PartInfo {
                number: 1,
                size: 250,
                etag: String::new(),
            },
            PartInfo {
                number: 2,
                size: 30,
                etag: String::new(),
            },
        ];
        for offset in 0..280u64 {
            for len in [1u64, 2, 50, 99, 100, 101, 250, 280 - offset] {
                if offset + len > 280 || len == 0 {
                    continue;
                }
                let p = plan(&e, &parts, offset, len);
                let total: usize = p.iter().map(|b| b.end - b.start).sum();
                assert_eq!(total as u64, len, "offset {offset} len {len}");
                // first slice starts at the right byte
                let first = &p[0];
                let part_base = if first.part.number == 1 { 0 } else { 250 };
                assert_eq!(part_base + first.block * 100 + first.start as u64, offset);
            }
        }
    }
}
