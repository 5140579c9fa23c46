//! One stream at a time, in plain Rust: the fallback kernel, and the one a lone stream uses.

use crate::consts::{K, MSG, SHIFT};

/// Advances `state` over `blocks`, whose length is a multiple of 64.
pub(crate) fn compress(state: &mut [u32; 4], blocks: &[u8]) {
    debug_assert_eq!(blocks.len() % 64, 0, "whole blocks only");
    for block in blocks.chunks_exact(64) {
        let mut w = [0u32; 16];
        for (word, bytes) in w.iter_mut().zip(block.chunks_exact(4)) {
            *word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        let [mut a, mut b, mut c, mut d] = *state;
        // Four rounds of sixteen steps; the loops have constant bounds and tables, so they
        // unroll into straight-line code.
        for i in 0..16 {
            let f = d ^ (b & (c ^ d));
            step(&mut a, &mut b, &mut c, &mut d, f, w[MSG[i]], i);
        }
        for i in 16..32 {
            let f = c ^ (d & (b ^ c));
            step(&mut a, &mut b, &mut c, &mut d, f, w[MSG[i]], i);
        }
        for i in 32..48 {
            let f = b ^ c ^ d;
            step(&mut a, &mut b, &mut c, &mut d, f, w[MSG[i]], i);
        }
        for i in 48..64 {
            let f = c ^ (b | !d);
            step(&mut a, &mut b, &mut c, &mut d, f, w[MSG[i]], i);
        }
        state[0] = state[0].wrapping_add(a);
        state[1] = state[1].wrapping_add(b);
        state[2] = state[2].wrapping_add(c);
        state[3] = state[3].wrapping_add(d);
    }
}

#[inline(always)]
fn step(a: &mut u32, b: &mut u32, c: &mut u32, d: &mut u32, f: u32, m: u32, i: usize) {
    let t = a
        .wrapping_add(f)
        .wrapping_add(m)
        .wrapping_add(K[i])
        .rotate_left(SHIFT[i]);
    let new_b = b.wrapping_add(t);
    *a = *d;
    *d = *c;
    *c = *b;
    *b = new_b;
}
