//! Multi-buffer MD5: several independent streams hashed at once, one per SIMD lane.
//!
//! MD5 is a chain of dependent 32-bit steps, so one stream cannot use a wide register; sixteen
//! streams can, each in its own lane of an AVX-512 register (eight with AVX2). This crate is
//! for hashing many concurrent byte streams (the ETags of concurrent uploads) faster than one
//! core can hash them one by one:
//! - [`digest_many`]: the MD5 of each of several whole messages, batched through the widest
//!   kernel the CPU has;
//! - [`Md5Server`] and [`StreamHasher`]: streams hand their data to a hashing thread that runs
//!   the blocks of every stream in flight through the lanes together, while the caller goes on
//!   with its own work (so one stream's MD5 also overlaps its other processing);
//! - [`Md5`]: one stream, incrementally, in plain Rust.
//!
//! The kernel is chosen at run time ([`Kernel::detect`]): AVX-512F, else AVX2, else the
//! portable one. Results are plain MD5 (RFC 1321), equal to the `md-5` crate's; the tests check
//! that on random lengths and mixes of streams.
//!
//! It is not for: anything where MD5's collision weakness matters (it is an S3 ETag and
//! Content-MD5 check, not a security boundary), or other hash functions.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod consts;
mod scalar;
mod server;

use std::sync::OnceLock;

pub use server::{Md5Server, StreamHasher};

/// Bytes in one MD5 block.
pub const BLOCK_LEN: usize = 64;

/// The compression kernel in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// One stream at a time, plain Rust.
    Scalar,
    /// Eight streams in AVX2 registers.
    Avx2,
    /// Sixteen streams in AVX-512 registers.
    Avx512,
}

impl Kernel {
    /// The widest kernel this CPU runs (detected once). `QUARRY_MD5X_KERNEL=scalar|avx2`
    /// caps it, to compare kernels on one machine.
    pub fn detect() -> Kernel {
        static KERNEL: OnceLock<Kernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            let best = Kernel::best_supported();
            match std::env::var("QUARRY_MD5X_KERNEL").as_deref() {
                Ok("scalar") => Kernel::Scalar,
                Ok("avx2") if best != Kernel::Scalar => Kernel::Avx2,
                _ => best,
            }
        })
    }

    fn best_supported() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Kernel::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Kernel::Avx2;
            }
        }
        Kernel::Scalar
    }

    /// Whether this CPU can run the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Streams hashed at once.
    pub fn lanes(self) -> usize {
        match self {
            Kernel::Scalar => 1,
            Kernel::Avx2 => 8,
            Kernel::Avx512 => 16,
        }
    }

    /// Fewest streams worth a SIMD pass: below it, hashing them one by one is as fast (a pass
    /// costs the same whatever number of its lanes carry data). Measured with the md5 bench: a
    /// 16-lane AVX-512 pass costs about one scalar stream, an 8-lane AVX2 pass about two.
    fn min_lanes(self) -> usize {
        match self {
            Kernel::Scalar => usize::MAX,
            Kernel::Avx2 => 3,
            Kernel::Avx512 => 2,
        }
    }
}

/// One MD5 stream, incrementally, with the portable kernel.
#[derive(Clone, Debug)]
pub struct Md5 {
    state: [u32; 4],
    /// Bytes hashed so far (mod 2^64, as MD5 defines it).
    len: u64,
    /// The start of a block not yet complete.
    buf: [u8; BLOCK_LEN],
    buf_len: usize,
}

impl Default for Md5 {
    fn default() -> Self {
        Md5::new()
    }
}

impl Md5 {
    /// An empty stream.
    pub fn new() -> Md5 {
        Md5 {
            state: consts::INIT,
            len: 0,
            buf: [0; BLOCK_LEN],
            buf_len: 0,
        }
    }

    /// Hashes `data` after what came before.
    pub fn update(&mut self, mut data: &[u8]) {
        self.len = self.len.wrapping_add(data.len() as u64);
        if self.buf_len > 0 {
            let take = (BLOCK_LEN - self.buf_len).min(data.len());
            self.buf[self.buf_len..self.buf_len + take].copy_from_slice(&data[..take]);
            self.buf_len += take;
            data = &data[take..];
            if self.buf_len < BLOCK_LEN {
                return;
            }
            scalar::compress(&mut self.state, &self.buf);
            self.buf_len = 0;
        }
        let whole = data.len() - data.len() % BLOCK_LEN;
        scalar::compress(&mut self.state, &data[..whole]);
        let rest = &data[whole..];
        self.buf[..rest.len()].copy_from_slice(rest);
        self.buf_len = rest.len();
    }

    /// The digest of everything hashed.
    pub fn finalize(mut self) -> [u8; 16] {
        let bits = self.len.wrapping_mul(8);
        let mut pad = [0u8; 2 * BLOCK_LEN];
        pad[0] = 0x80;
        // 0x80, zeros up to 56 mod 64, then the length in bits, little-endian.
        let zeros = (BLOCK_LEN + 55 - self.buf_len) % BLOCK_LEN;
        let end = 1 + zeros;
        pad[end..end + 8].copy_from_slice(&bits.to_le_bytes());
        let len = self.len;
        self.update(&pad[..end + 8]);
        debug_assert_eq!(self.buf_len, 0, "padding ends on a block boundary");
        self.len = len;
        digest_of(&self.state)
    }
}

fn digest_of(state: &[u32; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The MD5 of each message, the whole blocks of all of them hashed together through the
/// widest kernel the CPU has.
pub fn digest_many(messages: &[&[u8]]) -> Vec<[u8; 16]> {
    digest_many_with(Kernel::detect(), messages)
}

/// [`digest_many`] with a given kernel (the portable one if the CPU lacks it).
pub fn digest_many_with(kernel: Kernel, messages: &[&[u8]]) -> Vec<[u8; 16]> {
    let kernel = if kernel.is_supported() {
        kernel
    } else {
        Kernel::Scalar
    };
    let mut states = vec![consts::INIT; messages.len()];
    let whole: Vec<&[u8]> = messages
        .iter()
        .map(|m| &m[..m.len() - m.len() % BLOCK_LEN])
        .collect();
    compress_many(kernel, &mut states, &whole);
    messages
        .iter()
        .zip(states)
        .map(|(m, state)| {
            let whole = m.len() - m.len() % BLOCK_LEN;
            let mut h = Md5 {
                state,
                len: whole as u64,
                buf: [0; BLOCK_LEN],
                buf_len: 0,
            };
            h.update(&m[whole..]);
            h.len = m.len() as u64;
            h.finalize()
        })
        .collect()
}

/// Advances `states[i]` over `data[i]` (whole blocks: each length a multiple of 64) for every
/// `i`, as many streams at once as the kernel has lanes.
pub(crate) fn compress_many(kernel: Kernel, states: &mut [[u32; 4]], data: &[&[u8]]) {
    assert_eq!(states.len(), data.len(), "one state per stream");
    assert!(
        data.iter().all(|d| d.len() % BLOCK_LEN == 0),
        "whole blocks only"
    );
    let mut done = vec![0usize; data.len()];
    loop {
        let live: Vec<usize> = (0..data.len())
            .filter(|&i| done[i] < data[i].len())
            .collect();
        if live.is_empty() {
            return;
        }
        if live.len() < kernel.min_lanes() {
            for i in live {
                scalar::compress(&mut states[i], &data[i][done[i]..]);
            }
            return;
        }
        for group in live.chunks(kernel.lanes()) {
            if group.len() < kernel.min_lanes() {
                continue; // left for the next pass, with the others that remain
            }
            let blocks = group
                .iter()
                .map(|&i| (data[i].len() - done[i]) / BLOCK_LEN)
                .min()
                .unwrap_or(0);
            let slices: Vec<&[u8]> = group.iter().map(|&i| &data[i][done[i]..]).collect();
            let mut group_states: Vec<[u32; 4]> = group.iter().map(|&i| states[i]).collect();
            simd_pass(kernel, &mut group_states, &slices, blocks);
            for (&i, s) in group.iter().zip(group_states) {
                states[i] = s;
                done[i] += blocks * BLOCK_LEN;
            }
        }
    }
}

/// Runs `blocks` blocks of each stream (up to the kernel's lanes, each with at least that
/// many blocks) through the kernel.
fn simd_pass(kernel: Kernel, states: &mut [[u32; 4]], data: &[&[u8]], blocks: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        fn run<const L: usize>(
            states: &mut [[u32; 4]],
            data: &[&[u8]],
            f: impl FnOnce(&mut [[u32; L]; 4], &[&[u8]; L]),
        ) {
            // Unused lanes repeat the first stream; their results are dropped.
            let lanes: [&[u8]; L] =
                std::array::from_fn(|l| data.get(l).copied().unwrap_or(data[0]));
            let mut soa = [[0u32; L]; 4];
            for (l, s) in states.iter().enumerate() {
                for w in 0..4 {
                    soa[w][l] = s[w];
                }
            }
            f(&mut soa, &lanes);
            for (l, s) in states.iter_mut().enumerate() {
                for w in 0..4 {
                    s[w] = soa[w][l];
                }
            }
        }
        match kernel {
            Kernel::Avx512 => {
                return run::<{ avx512::LANES }>(states, data, |s, l| {
                    // SAFETY: Kernel::Avx512 is only used when the CPU has AVX-512F
                    // (`Kernel::detect` / `is_supported`).
                    unsafe { avx512::compress(s, l, blocks) }
                });
            }
            Kernel::Avx2 => {
                return run::<{ avx2::LANES }>(states, data, |s, l| {
                    // SAFETY: Kernel::Avx2 is only used when the CPU has AVX2.
                    unsafe { avx2::compress(s, l, blocks) }
                });
            }
            Kernel::Scalar => {}
        }
    }
    for (s, d) in states.iter_mut().zip(data) {
        scalar::compress(s, &d[..blocks * BLOCK_LEN]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::Digest;

    fn reference(data: &[u8]) -> [u8; 16] {
        md5::Md5::digest(data).into()
    }

    #[test]
    fn known_answers() {
        // RFC 1321, appendix A.5.
        let cases: [(&[u8], &str); 4] = [
            (b"", "d41d8cd98f00b204e9800998ecf8427e"),
            (b"abc", "900150983cd24fb0d6963f7d28e17f72"),
            (b"message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (input, want) in cases {
            let mut h = Md5::new();
            h.update(input);
            let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn every_kernel_matches_md5_on_every_length_near_block_edges() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for kernel in [Kernel::Scalar, Kernel::Avx2, Kernel::Avx512] {
            if !kernel.is_supported() {
                continue;
            }
            // Seventeen messages of different lengths (more than any kernel's lanes).
            for base in [0usize, 55, 56, 63, 64, 119, 120, 128, 500] {
                let msgs: Vec<&[u8]> = (0..17).map(|i| &data[..base + i * 29]).collect();
                let got = digest_many_with(kernel, &msgs);
                for (m, g) in msgs.iter().zip(got) {
                    assert_eq!(g, reference(m), "{kernel:?}, length {}", m.len());
                }
            }
        }
    }
}
