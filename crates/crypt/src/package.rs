//! The package format (format 1), modelled on MinIO's DARE:
//!
//! ```text
//! part = package 0 | package 1 | ... | package n-1          (n = max(1, ceil(plain / 64 KiB)))
//! package i = AES-256-GCM(part key, nonce_i, aad, plaintext_i) | tag (16 B)
//! nonce_i  = i as u64 big-endian | final flag (1 if i == n-1, else 0) | 0 0 0
//! aad      = "quarry/package/v1"
//! ```
//!
//! Every package holds [`PACKAGE_SIZE`] plaintext bytes except the last, which holds 1 to
//! [`PACKAGE_SIZE`] (an empty part is one empty final package, so even it is authenticated).
//! The part key is derived from the object's own random key and the part number
//! ([`crate::ObjectKey::part_key`]), so:
//! - a package moved to another position fails (its sequence number is in the nonce);
//! - a stream cut after a whole package fails (that package was not sealed as final), and so
//!   does one with a package dropped from the middle (the sequence numbers shift);
//! - a package from another object or another part fails (another key);
//! - a flipped bit anywhere fails (GCM's tag).
//!
//! No package is ever opened without its tag being checked first: a [`Decryptor`] hands out
//! plaintext only of packages that authenticated.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce};
use bytes::BytesMut;

use crate::keys::PartKey;
use crate::{CryptError, Result};

/// Plaintext bytes per package.
pub const PACKAGE_SIZE: usize = 64 * 1024;
/// The GCM tag after each package's ciphertext.
pub const TAG_LEN: usize = 16;
/// A whole package as stored.
pub const SEALED_PACKAGE_SIZE: usize = PACKAGE_SIZE + TAG_LEN;
/// The name recorded in object metadata for this format.
pub const ALGORITHM: &str = "AES-256-GCM/P64K/1";

const AAD: &[u8] = b"quarry/package/v1";

/// How many packages a part of `plain` bytes is sealed in.
pub fn packages(plain: u64) -> u64 {
    plain.div_ceil(PACKAGE_SIZE as u64).max(1)
}

/// The stored size of a part of `plain` plaintext bytes.
pub fn encrypted_size(plain: u64) -> u64 {
    plain + packages(plain) * TAG_LEN as u64
}

/// The plaintext size of a part stored in `enc` bytes; `BadSize` for a size no part has.
pub fn decrypted_size(enc: u64) -> Result<u64> {
    let sealed = SEALED_PACKAGE_SIZE as u64;
    let (full, rest) = (enc / sealed, enc % sealed);
    let plain = match (full, rest) {
        (0, r) if r >= TAG_LEN as u64 => r - TAG_LEN as u64,
        (f, 0) if f > 0 => f * PACKAGE_SIZE as u64,
        (f, r) if r > TAG_LEN as u64 => f * PACKAGE_SIZE as u64 + r - TAG_LEN as u64,
        _ => return Err(CryptError::BadSize(enc)),
    };
    debug_assert_eq!(encrypted_size(plain), enc);
    Ok(plain)
}

fn nonce(seq: u64, last: bool) -> Nonce {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&seq.to_be_bytes());
    n[8] = u8::from(last);
    Nonce::assume_unique_for_key(n)
}

/// Seals a part's plaintext, block by block, into packages.
pub struct Encryptor {
    key: LessSafeKey,
    seq: u64,
    done: bool,
}

impl Encryptor {
    pub fn new(key: &PartKey) -> Self {
        Encryptor {
            key: key.aead(),
            seq: 0,
            done: false,
        }
    }

    /// The stored length of a block of `plain` bytes sealed with [`Encryptor::seal`].
    pub fn sealed_len(plain: usize, last: bool) -> usize {
        let whole = plain / PACKAGE_SIZE;
        let rest = plain % PACKAGE_SIZE;
        let n = whole + usize::from(rest > 0 || (last && plain == 0));
        plain + n * TAG_LEN
    }

    /// Seals `plain` and appends its packages to `out`. Every block but the `last` must be a
    /// whole number of packages; the last is sealed with its final package flagged, and an
    /// empty last block of a part that sealed nothing yet is one empty final package.
    pub fn seal(&mut self, plain: &[u8], last: bool, out: &mut BytesMut) -> Result<()> {
        if self.done {
            return Err(CryptError::Misuse("sealing after the final package"));
        }
        if !last && !plain.len().is_multiple_of(PACKAGE_SIZE) {
            return Err(CryptError::Misuse(
                "a block before the last is not whole packages",
            ));
        }
        if last && plain.is_empty() && self.seq > 0 {
            return Err(CryptError::Misuse(
                "the final package must hold the last bytes",
            ));
        }
        out.reserve(Self::sealed_len(plain.len(), last));
        let mut chunks: Vec<&[u8]> = plain.chunks(PACKAGE_SIZE).collect();
        if chunks.is_empty() && last {
            chunks.push(&[]);
        }
        let n = chunks.len();
        for (i, chunk) in chunks.into_iter().enumerate() {
            let fin = last && i + 1 == n;
            let start = out.len();
            out.extend_from_slice(chunk);
            let tag = self
                .key
                .seal_in_place_separate_tag(nonce(self.seq, fin), Aad::from(AAD), &mut out[start..])
                .map_err(|_| CryptError::Backend)?;
            out.extend_from_slice(tag.as_ref());
            self.seq += 1;
        }
        self.done = last;
        Ok(())
    }
}

/// Where a plaintext range of a part lies among its packages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackageRange {
    /// The first package the range needs.
    pub first: u64,
    /// Offset of that package in the stored part.
    pub enc_offset: u64,
    /// Stored bytes to read from `enc_offset`: whole packages.
    pub enc_len: u64,
    /// Plaintext bytes of the first package before the range starts.
    pub skip: usize,
    /// Plaintext bytes the range holds.
    pub len: u64,
}

impl PackageRange {
    /// The packages holding plaintext bytes `offset..offset+len` of a part of `plain_size`
    /// bytes (the caller has clamped the range to the part). An empty range of an empty part
    /// is its one empty package (read, so it is authenticated).
    pub fn new(plain_size: u64, offset: u64, len: u64) -> Self {
        debug_assert!(offset + len <= plain_size, "range within the part");
        let p = PACKAGE_SIZE as u64;
        if len == 0 {
            let first = offset / p;
            let enc_len = if plain_size == 0 { TAG_LEN as u64 } else { 0 };
            return PackageRange {
                first,
                enc_offset: first * SEALED_PACKAGE_SIZE as u64,
                enc_len,
                skip: 0,
                len: 0,
            };
        }
        let first = offset / p;
        let last = (offset + len - 1) / p;
        let enc_offset = first * SEALED_PACKAGE_SIZE as u64;
        let enc_end = ((last + 1) * SEALED_PACKAGE_SIZE as u64).min(encrypted_size(plain_size));
        PackageRange {
            first,
            enc_offset,
            enc_len: enc_end - enc_offset,
            skip: (offset - first * p) as usize,
            len,
        }
    }
}

/// Opens the packages of a [`PackageRange`] as their stored bytes arrive, in pieces of any
/// size, and hands out exactly the range's plaintext.
pub struct Decryptor {
    key: LessSafeKey,
    /// The next package to open.
    seq: u64,
    /// The part's final package and its plaintext length.
    last_seq: u64,
    last_len: usize,
    /// Stored bytes of a package not complete yet.
    pending: Vec<u8>,
    skip: usize,
    /// Plaintext bytes still to hand out.
    remaining: u64,
    /// Stored bytes still expected.
    enc_remaining: u64,
}

impl Decryptor {
    /// A decryptor for `range` of a part of `plain_size` plaintext bytes.
    pub fn new(key: &PartKey, plain_size: u64, range: &PackageRange) -> Self {
        let n = packages(plain_size);
        let last_len = (plain_size - (n - 1) * PACKAGE_SIZE as u64) as usize;
        Decryptor {
            key: key.aead(),
            seq: range.first,
            last_seq: n - 1,
            last_len,
            pending: Vec::new(),
            skip: range.skip,
            remaining: range.len,
            enc_remaining: range.enc_len,
        }
    }

    /// Stored bytes still expected.
    pub fn stored_remaining(&self) -> u64 {
        self.enc_remaining
    }

    /// Plaintext bytes not handed out yet.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    fn package_len(&self) -> usize {
        if self.seq == self.last_seq {
            self.last_len + TAG_LEN
        } else {
            SEALED_PACKAGE_SIZE
        }
    }

    /// Takes the next stored bytes; appends the plaintext of every package they complete to
    /// `out` (only the bytes within the range). A package that fails authentication is an
    /// error and nothing of it is appended.
    pub fn push(&mut self, mut data: &[u8], out: &mut BytesMut) -> Result<()> {
        if data.len() as u64 > self.enc_remaining {
            return Err(CryptError::TooLong);
        }
        self.enc_remaining -= data.len() as u64;
        while !data.is_empty() {
            let want = self.package_len();
            if self.pending.is_empty() && data.len() >= want {
                let (pkg, rest) = data.split_at(want);
                self.open(pkg, out)?;
                data = rest;
            } else {
                let take = (want - self.pending.len()).min(data.len());
                self.pending.extend_from_slice(&data[..take]);
                data = &data[take..];
                if self.pending.len() == want {
                    let pkg = std::mem::take(&mut self.pending);
                    self.open(&pkg, out)?;
                    self.pending = pkg;
                    self.pending.clear();
                }
            }
        }
        Ok(())
    }

    /// Opens one whole stored package and appends its plaintext within the range.
    fn open(&mut self, pkg: &[u8], out: &mut BytesMut) -> Result<()> {
        let (ct, tag) = pkg.split_at(pkg.len() - TAG_LEN);
        let seq = self.seq;
        let fin = seq == self.last_seq;
        let start = out.len();
        out.resize(start + ct.len(), 0);
        if self
            .key
            .open_separate_gather(nonce(seq, fin), Aad::from(AAD), ct, tag, &mut out[start..])
            .is_err()
        {
            out.truncate(start);
            return Err(CryptError::Tampered { seq });
        }
        self.seq += 1;
        // Trim to the range: the first package's leading bytes, the last one's trailing bytes.
        let skip = std::mem::take(&mut self.skip).min(ct.len());
        if skip > 0 {
            out.copy_within(start + skip.., start);
            out.truncate(out.len() - skip);
        }
        let got = (out.len() - start) as u64;
        let keep = got.min(self.remaining);
        out.truncate(start + keep as usize);
        self.remaining -= keep;
        Ok(())
    }

    /// Says whether the range was delivered whole; call when the stored bytes end.
    pub fn finish(&self) -> Result<()> {
        if self.enc_remaining > 0 || !self.pending.is_empty() {
            return Err(CryptError::Truncated {
                missing: self.enc_remaining.max(1),
            });
        }
        if self.remaining > 0 {
            return Err(CryptError::Truncated {
                missing: self.remaining,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectKey;

    #[test]
    fn sizes_invert() {
        for plain in [
            0u64,
            1,
            15,
            16,
            17,
            65535,
            65536,
            65537,
            131072,
            1 << 20,
            (1 << 20) + 3,
        ] {
            let enc = encrypted_size(plain);
            assert_eq!(decrypted_size(enc), Ok(plain), "plain {plain}");
        }
        for bad in [
            0u64,
            1,
            15,
            SEALED_PACKAGE_SIZE as u64 + 16,
            SEALED_PACKAGE_SIZE as u64 + 3,
        ] {
            assert!(decrypted_size(bad).is_err(), "enc {bad}");
        }
    }

    #[test]
    fn sealed_len_matches_seal() {
        let key = ObjectKey::random().unwrap().part_key(1);
        for (len, last) in [
            (0, true),
            (PACKAGE_SIZE, false),
            (PACKAGE_SIZE * 3, true),
            (10, true),
        ] {
            let mut e = Encryptor::new(&key);
            let mut out = BytesMut::new();
            e.seal(&vec![7u8; len], last, &mut out).unwrap();
            assert_eq!(out.len(), Encryptor::sealed_len(len, last));
        }
    }

    #[test]
    fn misuse_is_refused() {
        let key = ObjectKey::random().unwrap().part_key(1);
        let mut e = Encryptor::new(&key);
        let mut out = BytesMut::new();
        assert!(e.seal(&[1, 2, 3], false, &mut out).is_err());
        e.seal(&vec![0; PACKAGE_SIZE], false, &mut out).unwrap();
        assert!(e.seal(&[], true, &mut out).is_err());
        e.seal(&[1], true, &mut out).unwrap();
        assert!(e.seal(&[1], true, &mut out).is_err());
    }
}
