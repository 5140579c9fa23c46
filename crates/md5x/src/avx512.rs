//! Sixteen streams at once in the 32-bit lanes of AVX-512 registers.
//!
//! Each step of MD5 is done for all sixteen lanes by one instruction: `vpternlogd` computes the
//! round function, `vprolvd` the rotation. Each block's message words are loaded as sixteen rows
//! (one per lane) and transposed into sixteen registers (one per word) in registers.

use std::arch::x86_64::*;

use crate::consts::{K, MSG, SHIFT};

/// Lanes of one register.
pub(crate) const LANES: usize = 16;

/// Advances each lane's state (`state[word][lane]`) over `blocks` blocks of that lane's data.
///
/// Panics if a lane holds fewer than `blocks * 64` bytes (callers check first).
#[target_feature(enable = "avx512f")]
pub(crate) fn compress(state: &mut [[u32; LANES]; 4], lanes: &[&[u8]; LANES], blocks: usize) {
    // SAFETY: each `state[i]` is 16 initialised u32 (64 bytes); loadu has no alignment need.
    let mut s: [__m512i; 4] =
        std::array::from_fn(|i| unsafe { _mm512_loadu_si512(state[i].as_ptr().cast()) });
    for block in 0..blocks {
        let at = block * 64;
        let rows: [__m512i; LANES] = std::array::from_fn(|l| {
            let row: &[u8] = &lanes[l][at..at + 64];
            // SAFETY: `row` is a 64-byte slice (the slicing above checked it), exactly one
            // unaligned 512-bit load.
            unsafe { _mm512_loadu_si512(row.as_ptr().cast()) }
        });
        let w = transpose(rows);
        let [mut a, mut b, mut c, mut d] = s;
        macro_rules! steps {
            ($range:expr, $imm:literal) => {
                for i in $range {
                    let f = _mm512_ternarylogic_epi32::<$imm>(b, c, d);
                    let t = _mm512_add_epi32(
                        _mm512_add_epi32(a, f),
                        _mm512_add_epi32(w[MSG[i]], _mm512_set1_epi32(K[i] as i32)),
                    );
                    let t = _mm512_rolv_epi32(t, _mm512_set1_epi32(SHIFT[i] as i32));
                    let nb = _mm512_add_epi32(b, t);
                    a = d;
                    d = c;
                    c = b;
                    b = nb;
                }
            };
        }
        // Truth tables over (b, c, d) = (0xF0, 0xCC, 0xAA):
        // F = d ^ (b & (c ^ d)) = 0xCA, G = c ^ (d & (b ^ c)) = 0xE4, H = b ^ c ^ d = 0x96,
        // I = c ^ (b | !d) = 0x39.
        steps!(0..16, 0xCA);
        steps!(16..32, 0xE4);
        steps!(32..48, 0x96);
        steps!(48..64, 0x39);
        s[0] = _mm512_add_epi32(s[0], a);
        s[1] = _mm512_add_epi32(s[1], b);
        s[2] = _mm512_add_epi32(s[2], c);
        s[3] = _mm512_add_epi32(s[3], d);
    }
    for (out, v) in state.iter_mut().zip(s) {
        // SAFETY: `out` is 16 u32 (64 bytes) we hold mutably; storeu has no alignment need.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), v) };
    }
}

/// Rows (lane `l`: its sixteen message words) into columns (word `i`: its value in each lane).
#[target_feature(enable = "avx512f")]
fn transpose(r: [__m512i; LANES]) -> [__m512i; LANES] {
    // Pairs of rows interleaved by 32-bit word, then by 64-bit pair: in each 128-bit quarter q,
    // u[g][c] holds rows 4g..4g+3 of column 4q + c.
    let mut u = [[_mm512_setzero_si512(); 4]; 4];
    for g in 0..4 {
        let (r0, r1, r2, r3) = (r[4 * g], r[4 * g + 1], r[4 * g + 2], r[4 * g + 3]);
        let t0 = _mm512_unpacklo_epi32(r0, r1);
        let t1 = _mm512_unpackhi_epi32(r0, r1);
        let t2 = _mm512_unpacklo_epi32(r2, r3);
        let t3 = _mm512_unpackhi_epi32(r2, r3);
        u[g][0] = _mm512_unpacklo_epi64(t0, t2);
        u[g][1] = _mm512_unpackhi_epi64(t0, t2);
        u[g][2] = _mm512_unpacklo_epi64(t1, t3);
        u[g][3] = _mm512_unpackhi_epi64(t1, t3);
    }
    // Then the 4x4 matrix of 128-bit quarters of u[0..4][c] is transposed.
    let mut w = [_mm512_setzero_si512(); LANES];
    for c in 0..4 {
        let v0 = _mm512_shuffle_i32x4::<0x44>(u[0][c], u[1][c]);
        let v1 = _mm512_shuffle_i32x4::<0xEE>(u[0][c], u[1][c]);
        let v2 = _mm512_shuffle_i32x4::<0x44>(u[2][c], u[3][c]);
        let v3 = _mm512_shuffle_i32x4::<0xEE>(u[2][c], u[3][c]);
        w[c] = _mm512_shuffle_i32x4::<0x88>(v0, v2);
        w[4 + c] = _mm512_shuffle_i32x4::<0xDD>(v0, v2);
        w[8 + c] = _mm512_shuffle_i32x4::<0x88>(v1, v3);
        w[12 + c] = _mm512_shuffle_i32x4::<0xDD>(v1, v3);
    }
    w
}
