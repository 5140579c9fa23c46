//! GF(2^8) multiply-accumulate with the GFNI instruction `vgf2p8affineqb`, on 512-bit (AVX-512)
//! or 256-bit (AVX2/VEX) registers.
//!
//! Multiplying by a constant `c` in GF(2^8) is linear over GF(2): it is an 8x8 bit matrix, and
//! `vgf2p8affineqb` applies such a matrix to every byte of a register in one instruction. The
//! matrix is built from the field's own multiplication ([`reed_solomon_erasure::galois_8::mul`],
//! polynomial 0x11D), not GFNI's fixed AES field, so products, and therefore parity bytes, are the
//! same as the table kernel's. Every output chunk is `Σ_j coefficient[j] · input[j]`: encoding
//! uses the parity rows as coefficients, rebuilding uses rows of the decode matrix.

use reed_solomon_erasure::galois_8::{mul, mul_slice, mul_slice_xor};

/// Which GFNI form runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    /// 64 bytes a step (AVX-512F + GFNI).
    Zmm,
    /// 32 bytes a step (AVX2 + GFNI).
    Ymm,
}

impl Width {
    /// The widest form this CPU runs, if any.
    pub(crate) fn detect() -> Option<Width> {
        #[cfg(target_arch = "x86_64")]
        {
            if !std::arch::is_x86_feature_detected!("gfni") {
                return None;
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Some(Width::Zmm);
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Some(Width::Ymm);
            }
        }
        None
    }

    /// Whether this CPU runs the form.
    pub(crate) fn is_supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("gfni")
                && match self {
                    Width::Zmm => std::arch::is_x86_feature_detected!("avx512f"),
                    Width::Ymm => std::arch::is_x86_feature_detected!("avx2"),
                }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = self;
            false
        }
    }
}

/// The bit matrix of `x -> c * x`, laid out as `vgf2p8affineqb` reads it: bit `i` of the result
/// is the parity of `x AND byte[7 - i]` of the matrix.
pub(crate) fn matrix(c: u8) -> u64 {
    let mut m = 0u64;
    for j in 0..8 {
        let column = mul(c, 1 << j); // c * x_j, where x_j is input bit j alone
        for i in 0..8 {
            if column >> i & 1 == 1 {
                m |= 1u64 << (8 * (7 - i) + j);
            }
        }
    }
    m
}

/// Output chunks computed at once (accumulators kept in registers).
const GROUP: usize = 4;

/// `outputs[r] = Σ_j coefficients[r][j] · inputs[j]`, with the matrices `matrices[r][j]` of
/// those coefficients. Every input and output has the same length; `coefficients[r]` and
/// `matrices[r]` have one entry per input.
pub(crate) fn mul_rows(
    width: Width,
    coefficients: &[Vec<u8>],
    matrices: &[Vec<u64>],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
) {
    let Some(len) = inputs.first().map(|i| i.len()) else {
        return;
    };
    assert!(
        inputs.iter().all(|i| i.len() == len) && outputs.iter().all(|o| o.len() == len),
        "equal lengths"
    );
    assert!(coefficients.len() == outputs.len() && matrices.len() == outputs.len());
    let step = match width {
        Width::Zmm => 64,
        Width::Ymm => 32,
    };
    let body = len - len % step;
    for ((outs, coefs), mats) in outputs
        .chunks_mut(GROUP)
        .zip(coefficients.chunks(GROUP))
        .zip(matrices.chunks(GROUP))
    {
        if body > 0 {
            simd_group(width, mats, inputs, outs, body);
        }
        if body == len {
            continue;
        }
        // The tail (under one register) with the table kernel (which refuses empty slices).
        for (out, row) in outs.iter_mut().zip(coefs) {
            let out = &mut out[body..];
            for (j, (input, &c)) in inputs.iter().zip(row).enumerate() {
                if j == 0 {
                    mul_slice(c, &input[body..], out);
                } else {
                    mul_slice_xor(c, &input[body..], out);
                }
            }
        }
    }
}

fn simd_group(
    width: Width,
    mats: &[Vec<u64>],
    inputs: &[&[u8]],
    outs: &mut [&mut [u8]],
    body: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! dispatch {
            ($f:ident) => {
                match outs.len() {
                    // SAFETY (each arm): `Width` values reach here only when the CPU has the form
                    // (`Width::detect` / `is_supported` checked by the codec's constructor).
                    1 => unsafe { $f::<1>(mats, inputs, outs, body) },
                    2 => unsafe { $f::<2>(mats, inputs, outs, body) },
                    3 => unsafe { $f::<3>(mats, inputs, outs, body) },
                    _ => unsafe { $f::<GROUP>(mats, inputs, outs, body) },
                }
            };
        }
        match width {
            Width::Zmm => dispatch!(group_zmm),
            Width::Ymm => dispatch!(group_ymm),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (width, mats, inputs, outs, body);
        unreachable!("no GFNI form is detected off x86-64");
    }
}

/// `N` outputs (`outs.len() == N`) over the first `body` bytes (a multiple of 64).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,gfni")]
fn group_zmm<const N: usize>(
    mats: &[Vec<u64>],
    inputs: &[&[u8]],
    outs: &mut [&mut [u8]],
    body: usize,
) {
    use std::arch::x86_64::*;
    assert!(outs.len() == N && mats.len() == N);
    for at in (0..body).step_by(64) {
        let mut acc = [_mm512_setzero_si512(); N];
        for (j, input) in inputs.iter().enumerate() {
            let src: &[u8] = &input[at..at + 64];
            // SAFETY: `src` is a 64-byte slice (bounds checked above): one unaligned load.
            let d = unsafe { _mm512_loadu_si512(src.as_ptr().cast()) };
            for (a, m) in acc.iter_mut().zip(mats) {
                let p = _mm512_gf2p8affine_epi64_epi8::<0>(d, _mm512_set1_epi64(m[j] as i64));
                *a = _mm512_xor_si512(*a, p);
            }
        }
        for (out, a) in outs.iter_mut().zip(acc) {
            let dst: &mut [u8] = &mut out[at..at + 64];
            // SAFETY: `dst` is a 64-byte slice we hold mutably: one unaligned store.
            unsafe { _mm512_storeu_si512(dst.as_mut_ptr().cast(), a) };
        }
    }
}

/// `N` outputs over the first `body` bytes (a multiple of 32), 32 bytes a step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,gfni")]
fn group_ymm<const N: usize>(
    mats: &[Vec<u64>],
    inputs: &[&[u8]],
    outs: &mut [&mut [u8]],
    body: usize,
) {
    use std::arch::x86_64::*;
    assert!(outs.len() == N && mats.len() == N);
    for at in (0..body).step_by(32) {
        let mut acc = [_mm256_setzero_si256(); N];
        for (j, input) in inputs.iter().enumerate() {
            let src: &[u8] = &input[at..at + 32];
            // SAFETY: `src` is a 32-byte slice (bounds checked above): one unaligned load.
            let d = unsafe { _mm256_loadu_si256(src.as_ptr().cast()) };
            for (a, m) in acc.iter_mut().zip(mats) {
                let p = _mm256_gf2p8affine_epi64_epi8::<0>(d, _mm256_set1_epi64x(m[j] as i64));
                *a = _mm256_xor_si256(*a, p);
            }
        }
        for (out, a) in outs.iter_mut().zip(acc) {
            let dst: &mut [u8] = &mut out[at..at + 32];
            // SAFETY: `dst` is a 32-byte slice we hold mutably: one unaligned store.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr().cast(), a) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_multiplies_like_the_field() {
        // Applied bit by bit (the instruction's definition), the matrix of c gives c * x for
        // every c and x.
        for c in 0..=255u8 {
            let m = matrix(c);
            for x in 0..=255u8 {
                let mut y = 0u8;
                for i in 0..8 {
                    let row = (m >> (8 * (7 - i))) as u8;
                    y |= (((row & x).count_ones() & 1) as u8) << i;
                }
                assert_eq!(y, mul(c, x), "{c} * {x}");
            }
        }
    }
}
