//! Eight streams at once in the 32-bit lanes of AVX2 registers (no ternary logic or rotate
//! instruction here: the round functions are two or three instructions, the rotation three).

use std::arch::x86_64::*;

use crate::consts::{K, MSG, SHIFT};

/// Lanes of one register.
pub(crate) const LANES: usize = 8;

/// Advances each lane's state (`state[word][lane]`) over `blocks` blocks of that lane's data.
///
/// Panics if a lane holds fewer than `blocks * 64` bytes (callers check first).
#[target_feature(enable = "avx2")]
pub(crate) fn compress(state: &mut [[u32; LANES]; 4], lanes: &[&[u8]; LANES], blocks: usize) {
    // SAFETY: each `state[i]` is 8 initialised u32 (32 bytes); loadu has no alignment need.
    let mut s: [__m256i; 4] =
        std::array::from_fn(|i| unsafe { _mm256_loadu_si256(state[i].as_ptr().cast()) });
    let ones = _mm256_set1_epi32(-1);
    for block in 0..blocks {
        let at = block * 64;
        // Message words 0..8 and 8..16 of each lane, as two 8x8 matrices.
        let lo: [__m256i; LANES] = std::array::from_fn(|l| {
            let row: &[u8] = &lanes[l][at..at + 32];
            // SAFETY: `row` is a 32-byte slice (checked by the slicing): one 256-bit load.
            unsafe { _mm256_loadu_si256(row.as_ptr().cast()) }
        });
        let hi: [__m256i; LANES] = std::array::from_fn(|l| {
            let row: &[u8] = &lanes[l][at + 32..at + 64];
            // SAFETY: as above.
            unsafe { _mm256_loadu_si256(row.as_ptr().cast()) }
        });
        let wl = transpose(lo);
        let wh = transpose(hi);
        let w: [__m256i; 16] = std::array::from_fn(|i| if i < 8 { wl[i] } else { wh[i - 8] });
        let [mut a, mut b, mut c, mut d] = s;
        macro_rules! steps {
            ($range:expr, |$b:ident, $c:ident, $d:ident| $f:expr) => {
                for i in $range {
                    let ($b, $c, $d) = (b, c, d);
                    let f = $f;
                    let t = _mm256_add_epi32(
                        _mm256_add_epi32(a, f),
                        _mm256_add_epi32(w[MSG[i]], _mm256_set1_epi32(K[i] as i32)),
                    );
                    let t = _mm256_or_si256(
                        _mm256_sll_epi32(t, _mm_cvtsi32_si128(SHIFT[i] as i32)),
                        _mm256_srl_epi32(t, _mm_cvtsi32_si128(32 - SHIFT[i] as i32)),
                    );
                    let nb = _mm256_add_epi32(b, t);
                    a = d;
                    d = c;
                    c = b;
                    b = nb;
                }
            };
        }
        steps!(0..16, |x, y, z| _mm256_xor_si256(
            z,
            _mm256_and_si256(x, _mm256_xor_si256(y, z))
        ));
        steps!(16..32, |x, y, z| _mm256_xor_si256(
            y,
            _mm256_and_si256(z, _mm256_xor_si256(x, y))
        ));
        steps!(32..48, |x, y, z| _mm256_xor_si256(
            _mm256_xor_si256(x, y),
            z
        ));
        steps!(48..64, |x, y, z| _mm256_xor_si256(
            y,
            _mm256_or_si256(x, _mm256_xor_si256(z, ones))
        ));
        s[0] = _mm256_add_epi32(s[0], a);
        s[1] = _mm256_add_epi32(s[1], b);
        s[2] = _mm256_add_epi32(s[2], c);
        s[3] = _mm256_add_epi32(s[3], d);
    }
    for (out, v) in state.iter_mut().zip(s) {
        // SAFETY: `out` is 8 u32 (32 bytes) we hold mutably; storeu has no alignment need.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
    }
}

/// An 8x8 matrix of u32 transposed: rows (lanes) into columns (words).
#[target_feature(enable = "avx2")]
fn transpose(r: [__m256i; LANES]) -> [__m256i; LANES] {
    let t0 = _mm256_unpacklo_epi32(r[0], r[1]);
    let t1 = _mm256_unpackhi_epi32(r[0], r[1]);
    let t2 = _mm256_unpacklo_epi32(r[2], r[3]);
    let t3 = _mm256_unpackhi_epi32(r[2], r[3]);
    let t4 = _mm256_unpacklo_epi32(r[4], r[5]);
    let t5 = _mm256_unpackhi_epi32(r[4], r[5]);
    let t6 = _mm256_unpacklo_epi32(r[6], r[7]);
    let t7 = _mm256_unpackhi_epi32(r[6], r[7]);
    // In each 128-bit half h, u_c holds rows 0..4 (u0..u3) or 4..8 (u4..u7) of column 4h + c.
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    [
        _mm256_permute2x128_si256::<0x20>(u0, u4),
        _mm256_permute2x128_si256::<0x20>(u1, u5),
        _mm256_permute2x128_si256::<0x20>(u2, u6),
        _mm256_permute2x128_si256::<0x20>(u3, u7),
        _mm256_permute2x128_si256::<0x31>(u0, u4),
        _mm256_permute2x128_si256::<0x31>(u1, u5),
        _mm256_permute2x128_si256::<0x31>(u2, u6),
        _mm256_permute2x128_si256::<0x31>(u3, u7),
    ]
}
