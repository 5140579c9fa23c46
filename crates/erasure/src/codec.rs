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
}

/// reed-solomon-erasure 6 over GF(2^8) (`simd-accel`: its C kernel, AVX2 on x86-64).
pub(crate) struct ReedSolomonCodec {
    inner: ReedSolomon,
}

impl ReedSolomonCodec {
    /// Requires `data >= 1`, `parity >= 1`, `data + parity <= 256`.
    pub(crate) fn new(data: usize, parity: usize) -> Result<Self, CodecError> {
        ReedSolomon::new(data, parity)
            .map(|inner| ReedSolomonCodec { inner })
            .map_err(|e| CodecError(e.to_string()))
    }
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
}
