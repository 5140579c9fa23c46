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

use crate::gfni;

/// The Galois-field kernel a codec runs. All of them compute the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GfKernel {
    /// `vgf2p8affineqb` on 512-bit registers (AVX-512F and GFNI).
    GfniAvx512,
    /// `vgf2p8affineqb` on 256-bit registers (AVX2 and GFNI).
    GfniAvx2,
    /// reed-solomon-erasure's kernel (lookup tables; its AVX2 C code with `simd-accel`).
    Table,
}

impl GfKernel {
    /// The fastest kernel this CPU runs (detected once). `QUARRY_RS_KERNEL=table|gfni-avx2`
    /// caps it, to compare kernels on one machine or to step around one.
    pub fn detect() -> GfKernel {
        static KERNEL: OnceLock<GfKernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            let best = match gfni::Width::detect() {
                Some(gfni::Width::Zmm) => GfKernel::GfniAvx512,
                Some(gfni::Width::Ymm) => GfKernel::GfniAvx2,
                None => GfKernel::Table,
            };
            match std::env::var("QUARRY_RS_KERNEL").as_deref() {
                Ok("table") => GfKernel::Table,
                Ok("gfni-avx2") if GfKernel::GfniAvx2.is_supported() => GfKernel::GfniAvx2,
                _ => best,
            }
        })
    }

    /// Whether this CPU runs the kernel.
    pub fn is_supported(self) -> bool {
        self.width().is_none_or(gfni::Width::is_supported)
    }

    fn width(self) -> Option<gfni::Width> {
        match self {
            GfKernel::GfniAvx512 => Some(gfni::Width::Zmm),
            GfKernel::GfniAvx2 => Some(gfni::Width::Ymm),
            GfKernel::Table => None,
        }
    }
}

/// The codec for `data` + `parity` shards on `kernel`, built once per process and shared.
///
/// Building a Reed–Solomon codec inverts a k×k matrix (about 0.2 ms for 8+4, seconds near
/// k = 255), and the object layer builds an [`crate::Erasure`] from metadata on every read, so
/// codecs are memoised per (k, m, kernel). Sharing also shares reed-solomon-erasure's cache of
/// decode matrices. At most a few distinct layouts exist in one deployment.
pub(crate) fn shared(
    data: usize,
    parity: usize,
    kernel: GfKernel,
) -> Result<Arc<dyn Codec>, CodecError> {
    if parity == 0 {
        return Ok(Arc::new(IdentityCodec));
    }
    let kernel = if kernel.is_supported() {
        kernel
    } else {
        GfKernel::Table
    };
    type Codecs = HashMap<(usize, usize, GfKernel), Arc<dyn Codec>>;
    static CODECS: OnceLock<Mutex<Codecs>> = OnceLock::new();
    let codecs = CODECS.get_or_init(Default::default);
    // The map is only ever inserted into, so a panic elsewhere cannot leave it inconsistent.
    if let Some(codec) = codecs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&(data, parity, kernel))
    {
        return Ok(Arc::clone(codec));
    }
    // Build without holding the lock: other layouts need not wait for this one.
    let built: Arc<dyn Codec> = Arc::new(ReedSolomonCodec::new(data, parity, kernel)?);
    let mut map = codecs.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(Arc::clone(
        map.entry((data, parity, kernel)).or_insert(built),
    ))
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
///
/// With a GFNI kernel ([`GfKernel::GfniAvx512`] / [`GfKernel::GfniAvx2`], chosen at run time),
/// every product goes through `vgf2p8affineqb` instead, over the same parity rows and decode
/// matrices (see `crate::gfni`): the bytes are the same, the tests compare the two on every
/// layout from 2+2 to 12+4 and every loss pattern.
pub(crate) struct ReedSolomonCodec {
    inner: ReedSolomon,
    data: usize,
    /// Row `i` holds the coefficients of parity chunk `i` over the `k` data chunks.
    parity_rows: Vec<Vec<u8>>,
    /// With a GFNI kernel: its width, and the bit matrices of `parity_rows`. Every product
    /// then goes through it; without, through the library's tables.
    gfni: Option<(gfni::Width, Vec<Vec<u64>>)>,
    /// Decode matrices by the set of chunks used as inputs (a bit mask over the k + m slots).
    decode: Mutex<HashMap<Vec<u64>, Arc<Matrix>>>,
}

/// A square matrix over GF(2^8), by rows.
type Matrix = Vec<Vec<u8>>;

/// Decode matrices kept per codec; a set has at most C(n, k) erasure patterns and only a few
/// occur, but the cache is bounded anyway.
const DECODE_CACHE: usize = 1024;

impl ReedSolomonCodec {
    /// Requires `data >= 1`, `parity >= 1`, `data + parity <= 256`, and a `kernel` the CPU
    /// runs.
    pub(crate) fn new(data: usize, parity: usize, kernel: GfKernel) -> Result<Self, CodecError> {
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
        let gfni = kernel.width().map(|width| (width, matrices(&parity_rows)));
        Ok(ReedSolomonCodec {
            inner,
            data,
            parity_rows,
            gfni,
            decode: Mutex::new(HashMap::new()),
        })
    }

    /// The combination of the inputs (those `inv`, their decode matrix, was built for) that
    /// gives chunk `index`.
    fn coefficients(&self, index: usize, inv: &Matrix) -> Result<Vec<u8>, CodecError> {
        use reed_solomon_erasure::galois_8::mul;
        let k = self.data;
        if index < k {
            return Ok(inv[index].clone());
        }
        let row = self
            .parity_rows
            .get(index - k)
            .ok_or_else(|| CodecError(format!("no shard {index}")))?;
        Ok((0..k)
            .map(|j| (0..k).fold(0u8, |acc, c| acc ^ mul(row[c], inv[c][j])))
            .collect())
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

/// The GFNI bit matrix of every coefficient.
fn matrices(rows: &[Vec<u8>]) -> Vec<Vec<u64>> {
    rows.iter()
        .map(|row| row.iter().map(|&c| gfni::matrix(c)).collect())
        .collect()
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
            .field("gfni", &self.gfni.as_ref().map(|(width, _)| width))
            .finish()
    }
}

impl Codec for ReedSolomonCodec {
    fn encode(&self, data: &[Vec<u8>], parity: &mut [Vec<u8>]) -> Result<(), CodecError> {
        if self.gfni.is_some() {
            let data: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            let mut parity: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
            return self.encode_slices(&data, &mut parity);
        }
        self.inner
            .encode_sep(data, parity)
            .map_err(|e| CodecError(e.to_string()))
    }

    fn reconstruct(
        &self,
        shards: &mut [Option<Vec<u8>>],
        data_only: bool,
    ) -> Result<(), CodecError> {
        if self.gfni.is_some() {
            // Rebuild into new chunks from the ones present, then put them in their slots.
            let len = shards.iter().flatten().map(Vec::len).next().unwrap_or(0);
            let end = if data_only { self.data } else { shards.len() };
            let missing: Vec<usize> = (0..end).filter(|&i| shards[i].is_none()).collect();
            let mut rebuilt = vec![vec![0u8; len]; missing.len()];
            {
                let present: Vec<Option<&[u8]>> = shards.iter().map(|s| s.as_deref()).collect();
                let mut out: Vec<(usize, &mut [u8])> = missing
                    .iter()
                    .copied()
                    .zip(rebuilt.iter_mut().map(|r| &mut r[..]))
                    .collect();
                self.reconstruct_slices(&present, &mut out)?;
            }
            for (i, chunk) in missing.into_iter().zip(rebuilt) {
                shards[i] = Some(chunk);
            }
            return Ok(());
        }
        let result = if data_only {
            self.inner.reconstruct_data(shards)
        } else {
            self.inner.reconstruct(shards)
        };
        result.map_err(|e| CodecError(e.to_string()))
    }

    fn encode_slices(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CodecError> {
        if let Some((width, parity_matrices)) = &self.gfni {
            if data.len() != self.data || parity.len() != self.parity_rows.len() {
                return Err(CodecError(format!(
                    "{} data and {} parity chunks given for a {}+{} code",
                    data.len(),
                    parity.len(),
                    self.data,
                    self.parity_rows.len()
                )));
            }
            gfni::mul_rows(*width, &self.parity_rows, parity_matrices, data, parity);
            return Ok(());
        }
        self.inner
            .encode_sep(data, parity)
            .map_err(|e| CodecError(e.to_string()))
    }

    fn reconstruct_slices(
        &self,
        shards: &[Option<&[u8]>],
        out: &mut [(usize, &mut [u8])],
    ) -> Result<(), CodecError> {
        use reed_solomon_erasure::galois_8::{mul_slice, mul_slice_xor};
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
        if let Some((width, _)) = &self.gfni {
            let mut rows = Vec::with_capacity(out.len());
            for (index, _) in out.iter() {
                rows.push(self.coefficients(*index, &inv)?);
            }
            let mats = matrices(&rows);
            let mut dsts: Vec<&mut [u8]> = out.iter_mut().map(|(_, d)| &mut **d).collect();
            gfni::mul_rows(*width, &rows, &mats, &sources, &mut dsts);
            return Ok(());
        }
        for (index, dst) in out.iter_mut() {
            let coefficients = self.coefficients(*index, &inv)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes from a seed (xorshift).
    fn random(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Every subset of `0..n` with `1..=most` members.
    fn losses(n: usize, most: usize) -> Vec<Vec<usize>> {
        (1u32..1 << n)
            .filter(|mask| (mask.count_ones() as usize) <= most)
            .map(|mask| (0..n).filter(|i| mask >> i & 1 == 1).collect())
            .collect()
    }

    /// Every GFNI form this CPU runs gives the table kernel's parity bytes on random data for
    /// every layout from 2+2 to 12+4, and rebuilds every chunk of every loss pattern (up to m
    /// chunks) both ways (into owned chunks and into caller slices).
    #[test]
    fn gfni_matches_the_table_kernel_on_every_layout_and_loss_pattern() {
        let forms: Vec<GfKernel> = [GfKernel::GfniAvx512, GfKernel::GfniAvx2]
            .into_iter()
            .filter(|k| k.is_supported())
            .collect();
        if forms.is_empty() {
            eprintln!("no GFNI on this CPU: nothing to compare");
            return;
        }
        for k in 2..=12 {
            for m in 2..=4.min(k) {
                let table = ReedSolomonCodec::new(k, m, GfKernel::Table).unwrap();
                // 150 bytes: two 64-byte steps and a tail; 20: a tail alone.
                for len in [150usize, 20] {
                    let data: Vec<Vec<u8>> = (0..k)
                        .map(|i| random((k * 100 + m * 10 + i) as u64 ^ len as u64, len))
                        .collect();
                    let mut want = vec![vec![0u8; len]; m];
                    table.encode(&data, &mut want).unwrap();
                    let all: Vec<Vec<u8>> = data.iter().chain(&want).cloned().collect();
                    for &form in &forms {
                        let codec = ReedSolomonCodec::new(k, m, form).unwrap();
                        let mut got = vec![vec![0xA5u8; len]; m];
                        codec.encode(&data, &mut got).unwrap();
                        assert_eq!(got, want, "{form:?} {k}+{m} len {len}: parity differs");
                        for lost in losses(k + m, m) {
                            let mut owned: Vec<Option<Vec<u8>>> = all
                                .iter()
                                .enumerate()
                                .map(|(i, c)| (!lost.contains(&i)).then(|| c.clone()))
                                .collect();
                            codec.reconstruct(&mut owned, false).unwrap();
                            for (i, c) in owned.iter().enumerate() {
                                assert_eq!(
                                    c.as_ref(),
                                    Some(&all[i]),
                                    "{form:?} {k}+{m} lost {lost:?}: chunk {i}"
                                );
                            }
                            let present: Vec<Option<&[u8]>> = all
                                .iter()
                                .enumerate()
                                .map(|(i, c)| (!lost.contains(&i)).then_some(&c[..]))
                                .collect();
                            let mut bufs = vec![vec![0u8; len]; lost.len()];
                            let mut out: Vec<(usize, &mut [u8])> = lost
                                .iter()
                                .copied()
                                .zip(bufs.iter_mut().map(|b| &mut b[..]))
                                .collect();
                            codec.reconstruct_slices(&present, &mut out).unwrap();
                            for (&i, b) in lost.iter().zip(&bufs) {
                                assert_eq!(b, &all[i], "{form:?} {k}+{m} lost {lost:?}: slice {i}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn data_only_reconstruction_leaves_lost_parity_empty() {
        let Some(form) = [GfKernel::GfniAvx512, GfKernel::GfniAvx2]
            .into_iter()
            .find(|k| k.is_supported())
        else {
            return;
        };
        let codec = ReedSolomonCodec::new(4, 2, form).unwrap();
        let data: Vec<Vec<u8>> = (0..4).map(|i| random(i, 100)).collect();
        let mut parity = vec![vec![0u8; 100]; 2];
        codec.encode(&data, &mut parity).unwrap();
        let mut shards: Vec<Option<Vec<u8>>> =
            data.iter().chain(&parity).cloned().map(Some).collect();
        shards[1] = None;
        shards[5] = None;
        codec.reconstruct(&mut shards, true).unwrap();
        assert_eq!(shards[1].as_ref(), Some(&data[1]));
        assert!(shards[5].is_none());
    }
}
