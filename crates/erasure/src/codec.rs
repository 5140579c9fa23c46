//! The kernel that does the Galois-field arithmetic, behind one small trait.
//!
//! [`crate::Erasure`] validates every argument (shard count, equal non-zero lengths, at least k
//! shards present) before it calls a [`Codec`], so a codec only does the math. Any codec that
//! implements the same code (the systematic Vandermonde matrix over GF(2^8) recorded as
//! [`crate::CODEC_RS_VANDERMONDE`]) may replace [`ReedSolomonCodec`]: the parity bytes it
//! produces are part of the on-disk format, and the known-answer test in this crate pins them.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use reed_solomon_erasure::galois_8::ReedSolomon;

/// The codec for `data` + `parity` shards, built once per process and shared.
///
/// Building a Reed–Solomon codec inverts a k×k matrix (about 0.2 ms for 8+4, seconds near
/// k = 255), and the object layer builds an [`crate::Erasure`] from metadata on every read, so
/// codecs are memoised per (k, m). Sharing also shares reed-solomon-erasure's cache of decode
/// matrices. At most a few distinct layouts exist in one deployment.
pub(crate) fn shared(data: usize, parity: usize) -> Result<Arc<dyn Codec>, CodecError> {
    if parity == 0 {
        return Ok(Arc::new(IdentityCodec));
    }
    type Codecs = HashMap<(usize, usize), Arc<dyn Codec>>;
    static CODECS: OnceLock<Mutex<Codecs>> = OnceLock::new();
    let codecs = CODECS.get_or_init(Default::default);
    // The map is only ever inserted into, so a panic elsewhere cannot leave it inconsistent.
    if let Some(codec) = codecs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&(data, parity))
    {
        return Ok(Arc::clone(codec));
    }
    // Build without holding the lock: other layouts need not wait for this one.
    let built: Arc<dyn Codec> = Arc::new(ReedSolomonCodec::new(data, parity)?);
    let mut map = codecs.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(Arc::clone(map.entry((data, parity)).or_insert(built)))
}

/// An error a codec reports. Arguments are checked before a codec is called, so this only
/// surfaces a disagreement between that check and the kernel's own.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CodecError(pub(crate) String);

/// Galois-field kernel for one (k, m) pair.
pub(crate) trait Codec: Send + Sync + fmt::Debug {
    /// Computes the `m` parity chunks from the `k` data chunks.
    ///
    /// Preconditions (checked by the caller): `data.len() == k`, `parity.len() == m`, every
    /// slice has the same non-zero length. Parity slices are overwritten, whatever they held.
    fn encode(&self, data: &[Vec<u8>], parity: &mut [Vec<u8>]) -> Result<(), CodecError>;

    /// Fills the `None` slots: only data slots when `data_only`, every slot otherwise.
    ///
    /// Preconditions (checked by the caller): `shards.len() == k + m`, at least `k` are `Some`,
    /// every present shard has the same non-zero length.
    fn reconstruct(
        &self,
        shards: &mut [Option<Vec<u8>>],
        data_only: bool,
    ) -> Result<(), CodecError>;

    /// Like [`Codec::encode`], on slices (so parity can be written straight into a caller's
    /// buffers, e.g. registered memory). Same preconditions.
    fn encode_slices(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodecError>;

    /// Computes the chunks `out` names (`(index, destination)`) from the chunks present in
    /// `shards`, which are only read: present chunks stay where they were read to, nothing is
    /// copied.
    ///
    /// Preconditions (checked by the caller): `shards.len() == k + m`, at least `k` are `Some`,
    /// every present chunk and every destination has the same non-zero length, every index in
    /// `out` is a `None` slot and appears once.
    fn reconstruct_slices(
        &self,
        shards: &[Option<&[u8]>],
        out: &mut [(usize, &mut [u8])],
    ) -> Result<(), CodecError>;
}

/// `m == 0`: there is no parity, so encoding is the identity and nothing can be rebuilt.
/// (reed-solomon-erasure refuses zero parity shards.)
#[derive(Debug)]
pub(crate) struct IdentityCodec;

impl Codec for IdentityCodec {
    fn encode(&self, _data: &[Vec<u8>], parity: &mut [Vec<u8>]) -> Result<(), CodecError> {
        if parity.is_empty() {
            Ok(())
        } else {
            Err(CodecError(format!(
                "identity codec asked for {} parity shards",
                parity.len()
            )))
        }
    }

    fn reconstruct(
        &self,
        shards: &mut [Option<Vec<u8>>],
        _data_only: bool,
    ) -> Result<(), CodecError> {
        // With no parity, "at least k present" means "all present": nothing to fill.
        match shards.iter().position(Option::is_none) {
            None => Ok(()),
            Some(index) => Err(CodecError(format!(
                "identity codec cannot rebuild shard {index}"
            ))),
        }
    }

    fn encode_slices(&self, _data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodecError> {
        if parity.is_empty() {
            Ok(())
        } else {
            Err(CodecError(format!(
                "identity codec asked for {} parity shards",
                parity.len()
            )))
        }
    }

    fn reconstruct_slices(
        &self,
        _shards: &[Option<&[u8]>],
        out: &mut [(usize, &mut [u8])],
    ) -> Result<(), CodecError> {
        match out.first() {
            None => Ok(()),
            Some((index, _)) => Err(CodecError(format!(
                "identity codec cannot rebuild shard {index}"
            ))),
        }
    }
}

/// reed-solomon-erasure 6 over GF(2^8) (`simd-accel`: its C kernel, AVX2 on x86-64).
///
/// Encoding and the owned-buffer reconstruction are the library's. Reconstruction from chunks
/// that must not move ([`Codec::reconstruct_slices`]: the library wants every shard mutable, so
/// present chunks would have to be copied into owned buffers first) is done here with the
/// library's own GF(2^8) slice kernels (`galois_8::mul_slice` / `mul_slice_xor`, the same SIMD
/// code its decoder runs) over the library's own encoding matrix: the parity rows are read off
/// the library by encoding unit vectors, so both decoders invert the same code by construction
/// (and the tests check them against each other on every erasure pattern).
pub(crate) struct ReedSolomonCodec {
    inner: ReedSolomon,
    data: usize,
    /// Row `i` holds the coefficients of parity chunk `i` over the `k` data chunks.
    parity_rows: Vec<Vec<u8>>,
    /// Decode matrices by the set of chunks used as inputs (a bit mask over the k + m slots).
    decode: Mutex<HashMap<Vec<u64>, Arc<Matrix>>>,
}

/// A square matrix over GF(2^8), by rows.
type Matrix = Vec<Vec<u8>>;

/// Decode matrices kept per codec; a set has at most C(n, k) erasure patterns and only a few
/// occur, but the cache is bounded anyway.
const DECODE_CACHE: usize = 1024;

impl ReedSolomonCodec {
    /// Requires `data >= 1`, `parity >= 1`, `data + parity <= 256`.
    pub(crate) fn new(data: usize, parity: usize) -> Result<Self, CodecError> {
        let inner = ReedSolomon::new(data, parity).map_err(|e| CodecError(e.to_string()))?;
        // Column j of the parity rows is the parity of the unit vector e_j.
        let mut parity_rows = vec![vec![0u8; data]; parity];
        for j in 0..data {
            let unit: Vec<[u8; 1]> = (0..data).map(|c| [u8::from(c == j)]).collect();
            let mut out = vec![[0u8; 1]; parity];
            inner
                .encode_sep(&unit, &mut out)
                .map_err(|e| CodecError(e.to_string()))?;
            for (row, o) in parity_rows.iter_mut().zip(&out) {
                row[j] = o[0];
            }
        }
        Ok(ReedSolomonCodec {
            inner,
            data,
            parity_rows,
            decode: Mutex::new(HashMap::new()),
        })
    }

    /// The inverse of the k x k matrix whose rows generate the chunks `inputs` (sorted slot
    /// indexes, k of them): row `d` of it gives data chunk `d` as a combination of the inputs.
    fn decode_matrix(&self, inputs: &[usize]) -> Result<Arc<Matrix>, CodecError> {
        let mut mask = vec![0u64; (self.data + self.parity_rows.len()).div_ceil(64)];
        for &i in inputs {
            mask[i / 64] |= 1 << (i % 64);
        }
        if let Some(m) = self
            .decode
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&mask)
        {
            return Ok(Arc::clone(m));
        }
        let k = self.data;
        let rows: Vec<Vec<u8>> = inputs
            .iter()
            .map(|&i| {
                if i < k {
                    (0..k).map(|c| u8::from(c == i)).collect()
                } else {
                    self.parity_rows[i - k].clone()
                }
            })
            .collect();
        let inv = Arc::new(invert(rows)?);
        let mut cache = self.decode.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= DECODE_CACHE {
            cache.clear();
        }
        cache.insert(mask, Arc::clone(&inv));
        Ok(inv)
    }
}

/// Gauss–Jordan inversion over GF(2^8) (addition is XOR).
fn invert(mut a: Matrix) -> Result<Matrix, CodecError> {
    use reed_solomon_erasure::galois_8::{div, mul};
    let n = a.len();
    let mut inv: Vec<Vec<u8>> = (0..n)
        .map(|r| (0..n).map(|c| u8::from(r == c)).collect())
        .collect();
    for col in 0..n {
        let pivot = (col..n)
            .find(|&r| a[r][col] != 0)
            .ok_or_else(|| CodecError("decode matrix is singular".into()))?;
        a.swap(col, pivot);
        inv.swap(col, pivot);
        let p = a[col][col];
        if p != 1 {
            for c in 0..n {
                a[col][c] = div(a[col][c], p);
                inv[col][c] = div(inv[col][c], p);
            }
        }
        for r in 0..n {
            let f = a[r][col];
            if r == col || f == 0 {
                continue;
            }
            for c in 0..n {
                let (x, y) = (mul(f, a[col][c]), mul(f, inv[col][c]));
                a[r][c] ^= x;
                inv[r][c] ^= y;
            }
        }
    }
    Ok(inv)
}

impl fmt::Debug for ReedSolomonCodec {
    // The library's own Debug prints its whole matrix and decode cache.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReedSolomonCodec")
            .field("data", &self.inner.data_shard_count())
            .field("parity", &self.inner.parity_shard_count())
            .finish()
    }
}

impl Codec for ReedSolomonCodec {
    fn encode(&self, data: &[Vec<u8>], parity: &mut [Vec<u8>]) -> Result<(), CodecError> {
        self.inner
            .encode_sep(data, parity)
            .map_err(|e| CodecError(e.to_string()))
    }

    fn reconstruct(
        &self,
        shards: &mut [Option<Vec<u8>>],
        data_only: bool,
    ) -> Result<(), CodecError> {
        let result = if data_only {
            self.inner.reconstruct_data(shards)
        } else {
            self.inner.reconstruct(shards)
        };
        result.map_err(|e| CodecError(e.to_string()))
    }

    fn encode_slices(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodecError> {
        self.inner
            .encode_sep(data, parity)
            .map_err(|e| CodecError(e.to_string()))
    }

    fn reconstruct_slices(
        &self,
        shards: &[Option<&[u8]>],
        out: &mut [(usize, &mut [u8])],
    ) -> Result<(), CodecError> {
        use reed_solomon_erasure::galois_8::{mul, mul_slice, mul_slice_xor};
        if out.is_empty() {
            return Ok(());
        }
        let k = self.data;
        // The first k present chunks (data chunks first, as they come): the cheapest inputs.
        let inputs: Vec<usize> = (0..shards.len())
            .filter(|&i| shards[i].is_some())
            .take(k)
            .collect();
        if inputs.len() < k {
            return Err(CodecError(format!(
                "{} chunks present, {k} needed",
                inputs.len()
            )));
        }
        let inv = self.decode_matrix(&inputs)?;
        let sources: Vec<&[u8]> = inputs.iter().filter_map(|&i| shards[i]).collect();
        for (index, dst) in out.iter_mut() {
            // The combination of the inputs that gives chunk `index`.
            let coefficients: Vec<u8> = if *index < k {
                inv[*index].clone()
            } else {
                let row = self
                    .parity_rows
                    .get(*index - k)
                    .ok_or_else(|| CodecError(format!("no shard {index}")))?;
                (0..k)
                    .map(|j| (0..k).fold(0u8, |acc, c| acc ^ mul(row[c], inv[c][j])))
                    .collect()
            };
            for (j, (src, &c)) in sources.iter().zip(&coefficients).enumerate() {
                if j == 0 {
                    mul_slice(c, src, dst);
                } else if c != 0 {
                    mul_slice_xor(c, src, dst);
                }
            }
        }
        Ok(())
    }
}
