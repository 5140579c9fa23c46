//! Object bodies: built once, sliced per object, verified on the way back.
//!
//! One buffer of pseudo-random bytes, `max size + WINDOW` long, is made at start-up. The body of
//! object `i` at generation `g` (bumped by every overwrite) is the slice of it that starts at an
//! offset derived from `(i, g)`, so different objects and generations have different bytes while no
//! request builds or copies a payload (`Bytes::slice` is a reference count). A GET compares each
//! chunk it receives with the same slice: a wrong, missing or extra byte is a verification error.

use bytes::Bytes;

/// Distinct starting offsets for object bodies.
const WINDOW: usize = 64 * 1024;

/// The bodies of a run.
#[derive(Clone)]
pub struct Payloads {
    buf: Bytes,
    max_size: usize,
    randsize: bool,
}

/// A small, fast, deterministic mixer (SplitMix64).
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Payloads {
    /// Bodies of `max_size` bytes, or of random sizes up to it with `randsize`.
    pub fn new(max_size: usize, randsize: bool, seed: u64) -> Payloads {
        let len = max_size + WINDOW;
        let mut v = Vec::with_capacity(len + 8);
        let mut state = seed;
        while v.len() < len {
            state = mix(state);
            v.extend_from_slice(&state.to_le_bytes());
        }
        v.truncate(len);
        Payloads {
            buf: Bytes::from(v),
            max_size,
            randsize,
        }
    }

    /// The size of object `obj` at generation `generation`. Random sizes are spread evenly over
    /// the powers of two up to the maximum (as warp's `--obj.randsize`), at least one byte.
    pub fn size_of(&self, obj: u64, generation: u64) -> usize {
        if !self.randsize || self.max_size <= 1 {
            return self.max_size;
        }
        let r = mix(obj ^ generation.rotate_left(32) ^ 0x5157_4152_5259);
        let bits = usize::BITS - self.max_size.leading_zeros(); // 1..=64
        let exp = (r % u64::from(bits)) as u32; // 0..bits-1
        let lo = 1usize << exp;
        let hi = (lo << 1).min(self.max_size + 1);
        lo + ((r >> 8) as usize) % (hi - lo).max(1)
    }

    /// The body of object `obj` at generation `generation`.
    pub fn body(&self, obj: u64, generation: u64) -> Bytes {
        let size = self.size_of(obj, generation);
        let off = (mix(obj.wrapping_mul(0x1_0000_0001) ^ generation) % WINDOW as u64) as usize;
        self.buf.slice(off..off + size)
    }
}

/// Checks a streamed body against the expected bytes, chunk by chunk, without buffering it.
pub struct Verifier {
    expected: Bytes,
    pos: usize,
    error: Option<String>,
}

impl Verifier {
    pub fn new(expected: Bytes) -> Verifier {
        Verifier {
            expected,
            pos: 0,
            error: None,
        }
    }

    /// Compares the next chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let end = self.pos + chunk.len();
        let Some(want) = self.expected.get(self.pos..end) else {
            self.error = Some(format!(
                "body is longer than the {} bytes written",
                self.expected.len()
            ));
            return;
        };
        if want != chunk {
            let at = want
                .iter()
                .zip(chunk)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            self.error = Some(format!("wrong byte at offset {}", self.pos + at));
            return;
        }
        self.pos = end;
    }

    /// The verdict once the body has ended.
    pub fn finish(self) -> Result<(), String> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.pos != self.expected.len() {
            return Err(format!(
                "body ended after {} of {} bytes",
                self.pos,
                self.expected.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_differ_and_verify() {
        let p = Payloads::new(10_000, false, 7);
        let a = p.body(1, 0);
        let b = p.body(2, 0);
        let a2 = p.body(1, 1);
        assert_eq!(a.len(), 10_000);
        assert_ne!(a, b);
        assert_ne!(a, a2);
        assert_eq!(a, p.body(1, 0), "bodies are deterministic");

        // The right bytes in any chunking pass.
        let mut v = Verifier::new(a.clone());
        for c in a.chunks(333) {
            v.feed(c);
        }
        assert!(v.finish().is_ok());

        // One flipped byte fails, and says where.
        let mut bad = a.to_vec();
        bad[4321] ^= 1;
        let mut v = Verifier::new(a.clone());
        for c in bad.chunks(1000) {
            v.feed(c);
        }
        assert_eq!(v.finish().unwrap_err(), "wrong byte at offset 4321");

        // Short and long bodies fail.
        let mut v = Verifier::new(a.clone());
        v.feed(&a[..9_999]);
        assert!(v.finish().is_err());
        let mut v = Verifier::new(a.clone());
        v.feed(&a);
        v.feed(b"x");
        assert!(v.finish().is_err());

        // Another object's body fails.
        let mut v = Verifier::new(a);
        v.feed(&b);
        assert!(v.finish().is_err());
    }

    #[test]
    fn random_sizes_stay_in_range() {
        let p = Payloads::new(1 << 20, true, 1);
        let sizes: Vec<usize> = (0..1000).map(|i| p.size_of(i, 0)).collect();
        assert!(sizes.iter().all(|&s| (1..=1 << 20).contains(&s)));
        assert!(sizes.iter().any(|&s| s < 1024));
        assert!(sizes.iter().any(|&s| s > 512 * 1024));
        for i in 0..100 {
            assert_eq!(p.body(i, 3).len(), p.size_of(i, 3));
        }
    }
}
