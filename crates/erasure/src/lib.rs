//! Reed–Solomon erasure coding, block/stripe arithmetic and bitrot framing for Quarry.
//!
//! An object is cut into blocks of [`Erasure::block_size`] bytes (1 MiB by default; the last
//! block may be shorter). Each block of `L` bytes is split into `k` data chunks of
//! `ceil(L / k)` bytes (the last one zero padded) and `m` parity chunks of the same length are
//! computed from them. Chunk `i` of every block goes, one after the other, to shard file `i`
//! on drive `i` of the set, each chunk framed as `[blake3-256 (32 B) | chunk]` (see [`bitrot`]).
//! Any `k` of the `k + m` chunks of a block give the block back.
//!
//! This crate is for:
//! - the math of that layout: chunk lengths, shard file sizes, where block `i` sits in a shard
//!   file ([`Erasure::shard_offset`]), so readers can seek without reading metadata per block;
//! - encoding a block into chunks, rebuilding missing chunks, joining data chunks back;
//! - framing chunks with their bitrot hash and checking them;
//! - the names of the code and the hash ([`CODEC_RS_VANDERMONDE`], [`BITROT_BLAKE3`]) that object
//!   metadata records, so old data is never read with a new guess ([`Erasure::with_names`]).
//!
//! It is not for: IO of any kind (no files, no sockets, no async), choosing drives or quorums,
//! metadata formats, or deciding what to heal. It knows nothing about drives; the object layer
//! hands it bytes and gets bytes back. The Galois-field kernel sits behind a small internal
//! trait so a faster one can replace reed-solomon-erasure without changing this API or the
//! bytes on disk.

use std::fmt;
use std::sync::Arc;

pub mod bitrot;
mod codec;
mod gfni;

use codec::Codec;
pub use codec::GfKernel;

/// Name of the erasure code, recorded in object metadata: systematic Reed–Solomon over GF(2^8)
/// built from a Vandermonde matrix (the construction of reed-solomon-erasure / Backblaze).
pub const CODEC_RS_VANDERMONDE: &str = "rs-vandermonde-gf8";
/// Name of the bitrot hash, recorded in object metadata.
pub const BITROT_BLAKE3: &str = "blake3-256";
/// Default block size: 1 MiB.
pub const DEFAULT_BLOCK_SIZE: usize = 1 << 20;
/// Bytes of bitrot hash in front of every chunk on disk.
pub const BITROT_LEN: usize = bitrot::HASH_LEN;

/// Most shards a GF(2^8) code can have.
const MAX_TOTAL_SHARDS: usize = 256;

/// What went wrong, precisely enough to become an S3 error message.
#[derive(Debug, thiserror::Error)]
pub enum ErasureError {
    /// Parameters or arguments that no call could satisfy (k == 0, m > k, k + m > 256,
    /// block size 0, a block larger than the block size, the wrong number of shard slots).
    #[error("invalid erasure parameters: {0}")]
    InvalidParams(String),
    /// More than m chunks of a block are missing or corrupt: the block cannot be rebuilt.
    #[error("too few shards to rebuild the block: have {have}, need {need}")]
    TooFewShards { have: usize, need: usize },
    /// A shard does not have the length the others (or the block length) say it must.
    #[error("shard {index} is {got} bytes, expected {expected}")]
    ShardLength {
        index: usize,
        expected: usize,
        got: usize,
    },
    /// Metadata names an erasure code this build does not implement.
    #[error("unknown erasure codec {0:?} (this build knows {CODEC_RS_VANDERMONDE:?})")]
    UnknownCodec(String),
    /// Metadata names a bitrot hash this build does not implement.
    #[error("unknown bitrot algorithm {0:?} (this build knows {BITROT_BLAKE3:?})")]
    UnknownBitrot(String),
}

/// Parity for a set of `set_drive_count` drives, as MinIO chooses it:
/// 1 drive -> 0, 2–3 -> 1, 4–5 -> 2, 6–7 -> 3, 8 and more -> 4.
pub fn default_parity(set_drive_count: usize) -> usize {
    match set_drive_count {
        0 | 1 => 0,
        2 | 3 => 1,
        4 | 5 => 2,
        6 | 7 => 3,
        _ => 4,
    }
}

/// A configured erasure code: `k` data shards, `m` parity shards, a block size.
///
/// Cheap to clone (an `Arc` inside), `Send + Sync`; one value can serve many requests at once.
#[derive(Clone)]
pub struct Erasure {
    inner: Arc<Inner>,
}

struct Inner {
    data: usize,
    parity: usize,
    block_size: usize,
    codec: Arc<dyn Codec>,
}

impl fmt::Debug for Erasure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Erasure")
            .field("data", &self.inner.data)
            .field("parity", &self.inner.parity)
            .field("block_size", &self.inner.block_size)
            .field("codec", &self.inner.codec)
            .finish()
    }
}

impl Erasure {
    /// `data` + `parity` shards over blocks of `block_size` bytes, with this build's codec
    /// ([`CODEC_RS_VANDERMONDE`]) and bitrot hash ([`BITROT_BLAKE3`]).
    ///
    /// `parity == 0` is allowed (a single drive: the codec is the identity). Refuses
    /// `data == 0`, `parity > data`, `data + parity > 256` and `block_size == 0`.
    pub fn new(data: usize, parity: usize, block_size: usize) -> Result<Erasure, ErasureError> {
        Erasure::with_kernel(data, parity, block_size, GfKernel::detect())
    }

    /// Same as [`Erasure::new`] with a given Galois-field kernel (the table kernel if the CPU
    /// lacks it). Every kernel computes the same bytes; this is for comparing them.
    pub fn with_kernel(
        data: usize,
        parity: usize,
        block_size: usize,
        kernel: GfKernel,
    ) -> Result<Erasure, ErasureError> {
        if data == 0 {
            return Err(ErasureError::InvalidParams(
                "at least one data shard is required".into(),
            ));
        }
        if parity > data {
            return Err(ErasureError::InvalidParams(format!(
                "{parity} parity shards exceed {data} data shards"
            )));
        }
        if data + parity > MAX_TOTAL_SHARDS {
            return Err(ErasureError::InvalidParams(format!(
                "{data}+{parity} shards exceed the {MAX_TOTAL_SHARDS} a GF(2^8) code allows"
            )));
        }
        if block_size == 0 {
            return Err(ErasureError::InvalidParams(
                "block size must be at least one byte".into(),
            ));
        }
        let codec = codec::shared(data, parity, kernel)
            .map_err(|e| ErasureError::InvalidParams(e.to_string()))?;
        Ok(Erasure {
            inner: Arc::new(Inner {
                data,
                parity,
                block_size,
                codec,
            }),
        })
    }

    /// Same as [`Erasure::new`], but first refuses codec and bitrot names this build does not
    /// know. Use it with the names read from object metadata.
    pub fn with_names(
        codec: &str,
        bitrot: &str,
        data: usize,
        parity: usize,
        block_size: usize,
    ) -> Result<Erasure, ErasureError> {
        if codec != CODEC_RS_VANDERMONDE {
            return Err(ErasureError::UnknownCodec(codec.to_owned()));
        }
        if bitrot != BITROT_BLAKE3 {
            return Err(ErasureError::UnknownBitrot(bitrot.to_owned()));
        }
        Erasure::new(data, parity, block_size)
    }

    /// The codec name to record in metadata for data written with this value.
    pub fn codec_name(&self) -> &'static str {
        CODEC_RS_VANDERMONDE
    }

    /// The bitrot hash name to record in metadata for data written with this value.
    pub fn bitrot_name(&self) -> &'static str {
        BITROT_BLAKE3
    }

    /// k.
    pub fn data_shards(&self) -> usize {
        self.inner.data
    }

    /// m.
    pub fn parity_shards(&self) -> usize {
        self.inner.parity
    }

    /// k + m.
    pub fn total_shards(&self) -> usize {
        self.inner.data + self.inner.parity
    }

    /// Bytes per block (all blocks of an object but the last are this long).
    pub fn block_size(&self) -> usize {
        self.inner.block_size
    }

    /// Length of each of the k + m chunks of a block of `block_len` bytes: `ceil(block_len / k)`.
    pub fn chunk_len(&self, block_len: usize) -> usize {
        let chunk = block_len.div_ceil(self.inner.data);
        // Stripe geometry: the k chunks hold the block, with less than one chunk of padding.
        debug_assert!(
            chunk * self.inner.data >= block_len
                && chunk * self.inner.data < block_len + self.inner.data
        );
        chunk
    }

    /// Length on disk of one chunk of a block of `block_len` bytes, bitrot hash included.
    pub fn framed_len(&self, block_len: usize) -> usize {
        BITROT_LEN + self.chunk_len(block_len)
    }

    /// Number of blocks of an object of `object_size` bytes: `ceil(size / block_size)`.
    pub fn block_count(&self, object_size: u64) -> u64 {
        object_size.div_ceil(self.block_size_u64())
    }

    /// Length of block `block` of an object of `object_size` bytes: the block size for all but
    /// the last, the remainder for the last, 0 past the end.
    pub fn block_len(&self, object_size: u64, block: u64) -> usize {
        let start = block.saturating_mul(self.block_size_u64());
        let len = object_size.saturating_sub(start).min(self.block_size_u64());
        // `len <= block_size`, which is a usize.
        usize::try_from(len).unwrap_or(self.inner.block_size)
    }

    /// Size of each shard file of an object of `object_size` bytes: the sum of
    /// [`Erasure::framed_len`] over its blocks. 0 for an empty object.
    pub fn shard_file_size(&self, object_size: u64) -> u64 {
        let bs = self.block_size_u64();
        let full = object_size / bs;
        let tail = object_size % bs;
        let mut size = full.saturating_mul(self.framed_len_u64(self.inner.block_size));
        if tail > 0 {
            // `tail < block_size`, which is a usize.
            let tail = usize::try_from(tail).unwrap_or(self.inner.block_size);
            size = size.saturating_add(self.framed_len_u64(tail));
        }
        size
    }

    /// Offset in a shard file where block `block`'s framed chunk starts (every block before it
    /// is a full block).
    pub fn shard_offset(&self, block: u64) -> u64 {
        block.saturating_mul(self.framed_len_u64(self.inner.block_size))
    }

    /// Encodes one block (`block.len() <= block_size`) into k + m chunks.
    ///
    /// `shards` is resized to k + m vectors of [`Erasure::chunk_len`]`(block.len())` bytes each;
    /// their allocations are reused from call to call. Data chunks hold the block in order, the
    /// last zero padded; parity chunks follow.
    pub fn encode(&self, block: &[u8], shards: &mut Vec<Vec<u8>>) -> Result<(), ErasureError> {
        if block.len() > self.inner.block_size {
            return Err(ErasureError::InvalidParams(format!(
                "block of {} bytes exceeds the block size of {}",
                block.len(),
                self.inner.block_size
            )));
        }
        let k = self.inner.data;
        let chunk_len = self.chunk_len(block.len());
        shards.resize_with(self.total_shards(), Vec::new);

        let (data, parity) = shards.split_at_mut(k);
        let mut pieces = block.chunks(chunk_len.max(1));
        for shard in data.iter_mut() {
            shard.clear();
            if let Some(piece) = pieces.next() {
                shard.extend_from_slice(piece);
            }
            shard.resize(chunk_len, 0);
        }
        debug_assert!(pieces.next().is_none(), "a block fits its k chunks");
        for shard in parity.iter_mut() {
            // The codec overwrites parity: only the length matters, so avoid re-zeroing.
            shard.truncate(chunk_len);
            shard.resize(chunk_len, 0);
        }
        if chunk_len == 0 || parity.is_empty() {
            return Ok(());
        }
        self.inner
            .codec
            .encode(data, parity)
            .map_err(|e| ErasureError::InvalidParams(e.to_string()))
    }

    /// Encodes one block (`block.len() <= block_size`) straight into its k + m framed chunks:
    /// `framed[i]` is the `[hash | chunk]` of chunk `i`, [`Erasure::framed_len`]`(block.len())`
    /// bytes, written in place (data chunks copied from `block`, the last zero padded; parity
    /// computed into its slots; each hash over its chunk). The slots can be anywhere, e.g. pieces
    /// of registered buffers that are then sent as they are.
    pub fn encode_framed(
        &self,
        block: &[u8],
        framed: &mut [&mut [u8]],
    ) -> Result<(), ErasureError> {
        if block.len() > self.inner.block_size {
            return Err(ErasureError::InvalidParams(format!(
                "block of {} bytes exceeds the block size of {}",
                block.len(),
                self.inner.block_size
            )));
        }
        let total = self.total_shards();
        if framed.len() != total {
            return Err(ErasureError::InvalidParams(format!(
                "expected {total} framed chunk slots, got {}",
                framed.len()
            )));
        }
        let chunk_len = self.chunk_len(block.len());
        let want = BITROT_LEN + chunk_len;
        if let Some((index, f)) = framed.iter().enumerate().find(|(_, f)| f.len() != want) {
            return Err(ErasureError::ShardLength {
                index,
                expected: want,
                got: f.len(),
            });
        }
        let k = self.inner.data;
        let mut pieces = block.chunks(chunk_len.max(1));
        for f in framed[..k].iter_mut() {
            let chunk = &mut f[BITROT_LEN..];
            let piece = pieces.next().unwrap_or(&[]);
            chunk[..piece.len()].copy_from_slice(piece);
            chunk[piece.len()..].fill(0);
        }
        debug_assert!(pieces.next().is_none(), "a block fits its k chunks");
        if chunk_len > 0 && self.inner.parity > 0 {
            let (data, parity) = framed.split_at_mut(k);
            let data: Vec<&[u8]> = data.iter().map(|f| &f[BITROT_LEN..]).collect();
            let mut parity: Vec<&mut [u8]> =
                parity.iter_mut().map(|f| &mut f[BITROT_LEN..]).collect();
            self.inner
                .codec
                .encode_slices(&data, &mut parity)
                .map_err(|e| ErasureError::InvalidParams(e.to_string()))?;
        }
        for f in framed.iter_mut() {
            bitrot::frame_in_place(f);
        }
        Ok(())
    }

    /// Computes the chunks `out` asks for (`(slot index, destination)`, data or parity) from the
    /// chunks present in `shards` (the k + m slots of one block, `None` = missing), which are
    /// only read: a degraded read decodes from the buffers its chunks landed in, copying nothing.
    ///
    /// Fails with [`ErasureError::TooFewShards`] when fewer than k chunks are present,
    /// [`ErasureError::ShardLength`] when present chunks or destinations differ in length, and
    /// [`ErasureError::InvalidParams`] for an index out of range, present, or named twice.
    pub fn reconstruct_into(
        &self,
        shards: &[Option<&[u8]>],
        out: &mut [(usize, &mut [u8])],
    ) -> Result<(), ErasureError> {
        let total = self.total_shards();
        let chunk_len = self.present_chunk_len(shards.iter().map(|s| s.map(<[u8]>::len)))?;
        let mut named = vec![false; total];
        for (index, dst) in out.iter() {
            let i = *index;
            if i >= total || shards[i].is_some() || named[i] {
                return Err(ErasureError::InvalidParams(format!(
                    "cannot rebuild slot {i}: out of range, present, or asked for twice"
                )));
            }
            named[i] = true;
            if dst.len() != chunk_len {
                return Err(ErasureError::ShardLength {
                    index: i,
                    expected: chunk_len,
                    got: dst.len(),
                });
            }
        }
        if chunk_len == 0 || out.is_empty() {
            return Ok(());
        }
        self.inner
            .codec
            .reconstruct_slices(shards, out)
            .map_err(|e| ErasureError::InvalidParams(e.to_string()))
    }

    /// Given the k + m chunk slots of one block (`None` = missing or failed bitrot), fills the
    /// missing data chunks. Missing parity slots stay `None`.
    ///
    /// Fails with [`ErasureError::TooFewShards`] when fewer than k chunks are present, and
    /// [`ErasureError::ShardLength`] when present chunks differ in length; `shards` is left
    /// untouched on error.
    pub fn reconstruct_data(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), ErasureError> {
        self.reconstruct_inner(shards, true)
    }

    /// Same as [`Erasure::reconstruct_data`], but fills every missing chunk, parity included
    /// (for healing).
    pub fn reconstruct(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), ErasureError> {
        self.reconstruct_inner(shards, false)
    }

    fn reconstruct_inner(
        &self,
        shards: &mut [Option<Vec<u8>>],
        data_only: bool,
    ) -> Result<(), ErasureError> {
        let k = self.inner.data;
        let chunk_len = self.present_chunk_len(shards.iter().map(|s| s.as_ref().map(Vec::len)))?;
        let wanted = if data_only { &shards[..k] } else { &shards[..] };
        if wanted.iter().all(Option::is_some) {
            return Ok(());
        }
        if chunk_len == 0 {
            // An empty block: every chunk is empty, no math needed (and the codec refuses it).
            let wanted = if data_only { &mut shards[..k] } else { shards };
            for shard in wanted.iter_mut().filter(|s| s.is_none()) {
                *shard = Some(Vec::new());
            }
            return Ok(());
        }
        self.inner
            .codec
            .reconstruct(shards, data_only)
            .map_err(|e| ErasureError::InvalidParams(e.to_string()))
    }

    /// Appends the first `block_len` bytes of the concatenated data chunks to `out`.
    ///
    /// `shards` holds at least the k data slots (normally all k + m); every data slot must be
    /// `Some` and [`Erasure::chunk_len`]`(block_len)` bytes long.
    pub fn join(
        &self,
        shards: &[Option<Vec<u8>>],
        block_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), ErasureError> {
        let k = self.inner.data;
        if shards.len() < k {
            return Err(ErasureError::InvalidParams(format!(
                "expected at least {k} data shard slots, got {}",
                shards.len()
            )));
        }
        if block_len > self.inner.block_size {
            return Err(ErasureError::InvalidParams(format!(
                "block of {block_len} bytes exceeds the block size of {}",
                self.inner.block_size
            )));
        }
        let data = &shards[..k];
        let have = data.iter().filter(|s| s.is_some()).count();
        if have < k {
            return Err(ErasureError::TooFewShards { have, need: k });
        }
        let chunk_len = self.chunk_len(block_len);
        for (index, shard) in data.iter().enumerate() {
            let got = shard.as_ref().map_or(0, Vec::len);
            if got != chunk_len {
                return Err(ErasureError::ShardLength {
                    index,
                    expected: chunk_len,
                    got,
                });
            }
        }
        out.reserve(block_len);
        let mut left = block_len;
        for shard in data.iter().flatten() {
            let take = left.min(shard.len());
            out.extend_from_slice(&shard[..take]);
            left -= take;
            if left == 0 {
                break;
            }
        }
        debug_assert_eq!(left, 0, "k chunks of chunk_len(block_len) hold the block");
        Ok(())
    }

    /// Checks the k + m slots of a block (given as the lengths of the present chunks) and
    /// returns the length the present chunks share: [`ErasureError::InvalidParams`] for the wrong
    /// number of slots, [`ErasureError::ShardLength`] when present chunks differ, and
    /// [`ErasureError::TooFewShards`] when fewer than k are present.
    fn present_chunk_len(
        &self,
        lens: impl ExactSizeIterator<Item = Option<usize>>,
    ) -> Result<usize, ErasureError> {
        let k = self.inner.data;
        let total = self.total_shards();
        if lens.len() != total {
            return Err(ErasureError::InvalidParams(format!(
                "expected {total} shard slots ({k}+{}), got {}",
                self.inner.parity,
                lens.len()
            )));
        }
        let mut present = 0;
        let mut chunk_len = None;
        for (index, len) in lens.enumerate() {
            let Some(len) = len else { continue };
            present += 1;
            match chunk_len {
                None => chunk_len = Some(len),
                Some(expected) if expected != len => {
                    return Err(ErasureError::ShardLength {
                        index,
                        expected,
                        got: len,
                    })
                }
                Some(_) => {}
            }
        }
        if present < k {
            return Err(ErasureError::TooFewShards {
                have: present,
                need: k,
            });
        }
        // `present >= k >= 1`, so some chunk set the length.
        Ok(chunk_len.unwrap_or(0))
    }

    fn block_size_u64(&self) -> u64 {
        // usize is at most 64 bits on every target Rust supports.
        self.inner.block_size as u64
    }

    fn framed_len_u64(&self, block_len: usize) -> u64 {
        self.framed_len(block_len) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB4: usize = 4096;

    fn e(k: usize, m: usize, bs: usize) -> Erasure {
        Erasure::new(k, m, bs).unwrap()
    }

    #[test]
    fn erasure_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + fmt::Debug>() {}
        check::<Erasure>();
        let dbg = format!("{:?}", e(4, 2, KIB4));
        assert!(
            dbg.contains("data: 4") && dbg.contains("parity: 2"),
            "{dbg}"
        );
    }

    #[test]
    fn codecs_are_shared_per_layout() {
        let a = e(8, 4, KIB4);
        let b = e(8, 4, DEFAULT_BLOCK_SIZE);
        let c = e(8, 3, KIB4);
        assert!(Arc::ptr_eq(&a.inner.codec, &b.inner.codec));
        assert!(!Arc::ptr_eq(&a.inner.codec, &c.inner.codec));
    }

    #[test]
    fn default_parity_follows_minio() {
        let expect = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 1),
            (4, 2),
            (5, 2),
            (6, 3),
            (7, 3),
            (8, 4),
            (12, 4),
            (16, 4),
        ];
        for (n, m) in expect {
            assert_eq!(default_parity(n), m, "{n} drives");
        }
    }

    #[test]
    fn parameters_are_validated() {
        let bad = [(0, 0, KIB4), (2, 3, KIB4), (200, 57, KIB4), (4, 2, 0)];
        for (k, m, bs) in bad {
            assert!(
                matches!(Erasure::new(k, m, bs), Err(ErasureError::InvalidParams(_))),
                "{k}+{m} bs={bs}"
            );
        }
        for (k, m) in [(1, 0), (1, 1), (2, 0), (2, 2), (8, 4), (16, 16), (128, 128)] {
            let er = e(k, m, KIB4);
            assert_eq!(
                (er.data_shards(), er.parity_shards(), er.total_shards()),
                (k, m, k + m)
            );
            assert_eq!(er.block_size(), KIB4);
        }
    }

    #[test]
    fn names_are_checked() {
        let ok = Erasure::with_names(CODEC_RS_VANDERMONDE, BITROT_BLAKE3, 4, 2, KIB4).unwrap();
        assert_eq!(ok.codec_name(), CODEC_RS_VANDERMONDE);
        assert_eq!(ok.bitrot_name(), BITROT_BLAKE3);
        assert!(matches!(
            Erasure::with_names("rs-cauchy", BITROT_BLAKE3, 4, 2, KIB4),
            Err(ErasureError::UnknownCodec(c)) if c == "rs-cauchy"
        ));
        assert!(matches!(
            Erasure::with_names(CODEC_RS_VANDERMONDE, "highwayhash256", 4, 2, KIB4),
            Err(ErasureError::UnknownBitrot(b)) if b == "highwayhash256"
        ));
        assert!(matches!(
            Erasure::with_names(CODEC_RS_VANDERMONDE, BITROT_BLAKE3, 0, 2, KIB4),
            Err(ErasureError::InvalidParams(_))
        ));
    }

    #[test]
    fn chunk_and_framed_len() {
        let er = e(4, 2, KIB4);
        assert_eq!(er.chunk_len(0), 0);
        assert_eq!(er.chunk_len(1), 1);
        assert_eq!(er.chunk_len(4), 1);
        assert_eq!(er.chunk_len(5), 2);
        assert_eq!(er.chunk_len(KIB4), 1024);
        assert_eq!(er.chunk_len(KIB4 - 1), 1024);
        assert_eq!(er.framed_len(0), 32);
        assert_eq!(er.framed_len(KIB4), 32 + 1024);
        let er = e(12, 4, DEFAULT_BLOCK_SIZE);
        assert_eq!(er.chunk_len(DEFAULT_BLOCK_SIZE), 87382); // ceil(1048576 / 12)
        let er = e(1, 0, KIB4);
        assert_eq!(er.chunk_len(KIB4), KIB4);
    }

    #[test]
    fn block_count_and_len() {
        let er = e(4, 2, KIB4);
        let bs = KIB4 as u64;
        assert_eq!(er.block_count(0), 0);
        assert_eq!(er.block_count(1), 1);
        assert_eq!(er.block_count(bs - 1), 1);
        assert_eq!(er.block_count(bs), 1);
        assert_eq!(er.block_count(bs + 1), 2);
        assert_eq!(er.block_count(3 * bs), 3);

        assert_eq!(er.block_len(0, 0), 0);
        assert_eq!(er.block_len(1, 0), 1);
        assert_eq!(er.block_len(bs, 0), KIB4);
        assert_eq!(er.block_len(bs + 1, 0), KIB4);
        assert_eq!(er.block_len(bs + 1, 1), 1);
        assert_eq!(er.block_len(bs + 1, 2), 0);
        assert_eq!(er.block_len(3 * bs, 2), KIB4);
        assert_eq!(er.block_len(u64::MAX, u64::MAX), 0);
    }

    #[test]
    fn shard_file_size_and_offsets() {
        let er = e(4, 2, KIB4);
        let bs = KIB4 as u64;
        let full = 32 + 1024;
        assert_eq!(er.shard_file_size(0), 0);
        assert_eq!(er.shard_file_size(1), 32 + 1);
        assert_eq!(er.shard_file_size(5), 32 + 2);
        assert_eq!(er.shard_file_size(bs - 1), full);
        assert_eq!(er.shard_file_size(bs), full);
        assert_eq!(er.shard_file_size(bs + 1), full + 33);
        assert_eq!(er.shard_file_size(3 * bs + 7), 3 * full + 34);

        assert_eq!(er.shard_offset(0), 0);
        assert_eq!(er.shard_offset(1), full);
        assert_eq!(er.shard_offset(3), 3 * full);

        // Offsets and sizes agree: the last block starts at shard_offset(n-1) and ends the file.
        for size in [1, bs - 1, bs, bs + 1, 5 * bs + 3] {
            let n = er.block_count(size);
            let last = er.block_len(size, n - 1);
            assert_eq!(
                er.shard_offset(n - 1) + er.framed_len(last) as u64,
                er.shard_file_size(size),
                "size {size}"
            );
        }

        let er = e(12, 4, DEFAULT_BLOCK_SIZE);
        let full = 32 + 87382;
        assert_eq!(er.shard_offset(2), 2 * full);
        assert_eq!(
            er.shard_file_size(2 * DEFAULT_BLOCK_SIZE as u64 + 12),
            2 * full + 33
        );
    }

    #[test]
    fn encode_lays_out_data_then_parity() {
        let er = e(4, 2, KIB4);
        let block: Vec<u8> = (1..=10).collect();
        let mut shards = Vec::new();
        er.encode(&block, &mut shards).unwrap();
        assert_eq!(shards.len(), 6);
        assert_eq!(shards[0], [1, 2, 3]);
        assert_eq!(shards[1], [4, 5, 6]);
        assert_eq!(shards[2], [7, 8, 9]);
        assert_eq!(shards[3], [10, 0, 0]);
        assert!(shards.iter().all(|s| s.len() == 3));
    }

    #[test]
    fn encode_reuses_and_resizes_buffers() {
        let er = e(4, 2, KIB4);
        let big = vec![0xEE; KIB4];
        let small = vec![7u8; 5];
        let mut shards = vec![Vec::new(); 9]; // too many slots: trimmed
        er.encode(&big, &mut shards).unwrap();
        let ptr = shards[0].as_ptr();
        er.encode(&small, &mut shards).unwrap();
        assert_eq!(shards.len(), 6);
        assert_eq!(shards[0].as_ptr(), ptr, "allocation reused");
        assert_eq!(shards[0], [7, 7]);
        assert_eq!(shards[2], [7, 0]);
        assert_eq!(shards[3], [0, 0]);
        // Parity equals a fresh encode's parity despite the stale bytes left in the buffers.
        let mut fresh = Vec::new();
        er.encode(&small, &mut fresh).unwrap();
        assert_eq!(shards, fresh);
    }

    #[test]
    fn encode_refuses_oversized_block() {
        let er = e(2, 1, 16);
        let mut shards = Vec::new();
        assert!(matches!(
            er.encode(&[0; 17], &mut shards),
            Err(ErasureError::InvalidParams(_))
        ));
    }

    #[test]
    fn empty_block_round_trips() {
        let er = e(4, 2, KIB4);
        let mut shards = Vec::new();
        er.encode(&[], &mut shards).unwrap();
        assert_eq!(shards, vec![Vec::<u8>::new(); 6]);
        let mut slots: Vec<Option<Vec<u8>>> = shards.into_iter().map(Some).collect();
        slots[0] = None;
        slots[5] = None;
        er.reconstruct(&mut slots).unwrap();
        assert!(slots.iter().all(|s| s.as_deref() == Some(&[][..])));
        let mut out = Vec::new();
        er.join(&slots, 0, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn reconstruct_data_leaves_parity_missing() {
        let er = e(4, 2, KIB4);
        let block: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut shards = Vec::new();
        er.encode(&block, &mut shards).unwrap();
        let mut slots: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
        slots[1] = None;
        slots[4] = None;
        er.reconstruct_data(&mut slots).unwrap();
        assert_eq!(slots[1].as_ref(), Some(&shards[1]));
        assert!(slots[4].is_none());
        er.reconstruct(&mut slots).unwrap();
        assert_eq!(slots[4].as_ref(), Some(&shards[4]));
    }

    #[test]
    fn bad_slot_counts_and_lengths_are_refused() {
        let er = e(2, 1, KIB4);
        let mut shards = Vec::new();
        er.encode(&[1, 2, 3, 4], &mut shards).unwrap();
        let mut two: Vec<Option<Vec<u8>>> = shards[..2].iter().cloned().map(Some).collect();
        assert!(matches!(
            er.reconstruct(&mut two),
            Err(ErasureError::InvalidParams(_))
        ));
        let mut slots = vec![Some(shards[0].clone()), None, Some(vec![9; 3])];
        assert!(matches!(
            er.reconstruct_data(&mut slots),
            Err(ErasureError::ShardLength {
                index: 2,
                expected: 2,
                got: 3
            })
        ));
        assert!(slots[1].is_none(), "untouched on error");

        let full: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
        let mut out = Vec::new();
        assert!(matches!(
            er.join(&full, 5, &mut out),
            Err(ErasureError::ShardLength {
                index: 0,
                expected: 3,
                got: 2
            })
        ));
        assert!(matches!(
            er.join(&full[..1], 4, &mut out),
            Err(ErasureError::InvalidParams(_))
        ));
        let holed = vec![Some(shards[0].clone()), None, Some(shards[2].clone())];
        assert!(matches!(
            er.join(&holed, 4, &mut out),
            Err(ErasureError::TooFewShards { have: 1, need: 2 })
        ));
        assert!(out.is_empty());
        er.join(&full[..2], 4, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
    }

    #[test]
    fn single_drive_is_identity() {
        let er = e(1, 0, KIB4);
        let block = b"hello, single drive".to_vec();
        let mut shards = Vec::new();
        er.encode(&block, &mut shards).unwrap();
        assert_eq!(shards, vec![block.clone()]);
        let mut slots = vec![Some(shards[0].clone())];
        er.reconstruct(&mut slots).unwrap();
        let mut out = Vec::new();
        er.join(&slots, block.len(), &mut out).unwrap();
        assert_eq!(out, block);
        let mut lost = vec![None];
        assert!(matches!(
            er.reconstruct_data(&mut lost),
            Err(ErasureError::TooFewShards { have: 0, need: 1 })
        ));
    }

    /// The parity bytes are part of the on-disk format. If this changes, data written by an
    /// older build cannot be rebuilt by this one: a new codec needs a new name, not new bytes.
    /// The figures come from an independent scalar implementation of the construction named by
    /// [`CODEC_RS_VANDERMONDE`] (Vandermonde `V[r][c] = r^c` over GF(2^8) mod 0x11d, times the
    /// inverse of its top k rows), checked byte for byte against this crate's output.
    #[test]
    fn parity_known_answer() {
        let block: Vec<u8> = (0..KIB4 as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for (k, m, first_bytes, all_parity) in [
            (
                2,
                2,
                "d88042769ace1167",
                "b308190231154dfe99ea306a02e21cf1beedb5adb7cda0a81160931835f7986c",
            ),
            (
                4,
                2,
                "248b0c4b6e33c6fd",
                "bed4bbf247cfc93a6df8945dc3b91747d36c8b7f9cfde0debee8ce78e90f376f",
            ),
            (
                8,
                4,
                "67a29a5d0d038137",
                "b23cfd90b1b92f0659168531a9b6540e9738ae819e99fc1a19df1cc39aa667b1",
            ),
        ] {
            let er = e(k, m, KIB4);
            let mut shards = Vec::new();
            er.encode(&block, &mut shards).unwrap();
            let head: String = shards[k][..8].iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(head, first_bytes, "{k}+{m}");
            let mut hasher = blake3::Hasher::new();
            for p in &shards[k..] {
                hasher.update(p);
            }
            assert_eq!(hasher.finalize().to_hex().as_str(), all_parity, "{k}+{m}");
        }
    }

    /// Every erasure pattern of up to m chunks (data and parity), decoded from read-only inputs,
    /// matches the library's own reconstruction (and so the encoded chunks).
    #[test]
    fn reconstruct_into_matches_the_library_on_every_pattern() {
        for (k, m) in [
            (1, 1),
            (2, 1),
            (2, 2),
            (3, 1),
            (4, 2),
            (5, 3),
            (8, 4),
            (12, 4),
        ] {
            let er = e(k, m, KIB4);
            let n = k + m;
            let block: Vec<u8> = (0..KIB4 - 3).map(|i| (i * 31 + k * 7 + m) as u8).collect();
            let mut shards = Vec::new();
            er.encode(&block, &mut shards).unwrap();
            let chunk = shards[0].len();
            for mask in 0u32..(1 << n) {
                let missing: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
                if missing.is_empty() || missing.len() > m {
                    continue;
                }
                let present: Vec<Option<&[u8]>> = (0..n)
                    .map(|i| (!missing.contains(&i)).then(|| &shards[i][..]))
                    .collect();
                let mut bufs = vec![vec![0xEEu8; chunk]; missing.len()];
                let mut out: Vec<(usize, &mut [u8])> = missing
                    .iter()
                    .copied()
                    .zip(bufs.iter_mut().map(|b| &mut b[..]))
                    .collect();
                er.reconstruct_into(&present, &mut out).unwrap();
                for (i, b) in missing.iter().zip(&bufs) {
                    assert_eq!(b, &shards[*i], "{k}+{m}, lost {missing:?}, slot {i}");
                }
                // The library agrees on the same pattern.
                let mut owned: Vec<Option<Vec<u8>>> =
                    present.iter().map(|p| p.map(<[u8]>::to_vec)).collect();
                er.reconstruct(&mut owned).unwrap();
                for (i, b) in missing.iter().zip(&bufs) {
                    assert_eq!(owned[*i].as_ref(), Some(b));
                }
            }
        }
    }

    #[test]
    fn reconstruct_into_validates_its_arguments() {
        let er = e(4, 2, KIB4);
        let mut shards = Vec::new();
        er.encode(&[7u8; 1000], &mut shards).unwrap();
        let mut slots: Vec<Option<&[u8]>> = shards.iter().map(|s| Some(&s[..])).collect();
        slots[0] = None;
        slots[1] = None;
        let mut a = vec![0u8; 250];
        let mut short = [0u8; 10];
        // A present slot, a slot named twice, out of range.
        for bad in [&[2usize][..], &[0, 0], &[6]] {
            let mut bufs = vec![vec![0u8; 250]; bad.len()];
            let mut out: Vec<(usize, &mut [u8])> = bad
                .iter()
                .copied()
                .zip(bufs.iter_mut().map(|b| &mut b[..]))
                .collect();
            assert!(matches!(
                er.reconstruct_into(&slots, &mut out),
                Err(ErasureError::InvalidParams(_))
            ));
        }
        assert!(matches!(
            er.reconstruct_into(&slots, &mut [(0, &mut short[..])]),
            Err(ErasureError::ShardLength { index: 0, .. })
        ));
        slots[2] = None;
        slots[3] = None;
        assert!(matches!(
            er.reconstruct_into(&slots, &mut [(0, &mut a[..])]),
            Err(ErasureError::TooFewShards { have: 2, need: 4 })
        ));
        assert!(matches!(
            er.reconstruct_into(&slots[..5], &mut []),
            Err(ErasureError::InvalidParams(_))
        ));
        // No parity: nothing can be rebuilt, but nothing missing is fine.
        let one = e(1, 0, KIB4);
        let c = [1u8, 2, 3];
        one.reconstruct_into(&[Some(&c[..])], &mut []).unwrap();
    }

    #[test]
    fn encode_framed_writes_what_encode_and_frame_into_write() {
        for (k, m) in [(1, 0), (1, 1), (2, 2), (4, 2), (8, 4)] {
            let er = e(k, m, KIB4);
            for len in [0usize, 1, 7, KIB4 - 1, KIB4] {
                let block: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
                let mut shards = Vec::new();
                er.encode(&block, &mut shards).unwrap();
                let fl = er.framed_len(len);
                let mut bufs = vec![vec![0xA5u8; fl]; k + m];
                let mut slots: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
                er.encode_framed(&block, &mut slots).unwrap();
                for (i, (b, s)) in bufs.iter().zip(&shards).enumerate() {
                    let mut want = Vec::new();
                    bitrot::frame_into(s, &mut want);
                    assert_eq!(b, &want, "{k}+{m} len {len} chunk {i}");
                }
            }
            let mut wrong = vec![vec![0u8; 3]; k + m];
            let mut slots: Vec<&mut [u8]> = wrong.iter_mut().map(|b| &mut b[..]).collect();
            assert!(matches!(
                er.encode_framed(&[1, 2, 3], &mut slots),
                Err(ErasureError::ShardLength { .. })
            ));
            assert!(er.encode_framed(&vec![0; KIB4 + 1], &mut []).is_err());
        }
    }
}
