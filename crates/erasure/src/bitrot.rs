//! Bitrot framing: every chunk is stored as `[blake3-256 of chunk (32 B) | chunk]`.
//!
//! A chunk whose hash does not match is treated by the reader as a missing shard: it is rebuilt
//! from the others and queued for healing. The hash is part of the on-disk format, recorded as
//! [`crate::BITROT_BLAKE3`] in object metadata.

/// Length of the hash in front of every chunk.
pub const HASH_LEN: usize = 32;

/// Why a framed chunk was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BitrotError {
    /// Fewer bytes than the hash itself.
    #[error("framed chunk is {got} bytes, shorter than its {HASH_LEN}-byte bitrot hash")]
    Truncated { got: usize },
    /// The chunk's blake3 hash is not the one stored before it.
    #[error("bitrot hash mismatch: chunk does not match its stored blake3-256 hash")]
    Mismatch,
}

/// blake3-256 of `chunk`.
pub fn hash(chunk: &[u8]) -> [u8; HASH_LEN] {
    blake3::hash(chunk).into()
}

/// Appends `[hash | chunk]` to `out`.
pub fn frame_into(chunk: &[u8], out: &mut Vec<u8>) {
    out.reserve(HASH_LEN + chunk.len());
    out.extend_from_slice(&hash(chunk));
    out.extend_from_slice(chunk);
}

/// Frames a chunk in place: `framed` is `[room for the hash | chunk]`; the hash of the chunk is
/// written into its first [`HASH_LEN`] bytes. Does nothing to a slice shorter than that.
pub fn frame_in_place(framed: &mut [u8]) {
    if let Some((head, chunk)) = framed.split_first_chunk_mut::<HASH_LEN>() {
        *head = hash(chunk);
    }
}

/// Checks a framed chunk and returns the chunk bytes (everything after the hash).
pub fn verify(framed: &[u8]) -> Result<&[u8], BitrotError> {
    let Some((stored, chunk)) = framed.split_first_chunk::<HASH_LEN>() else {
        return Err(BitrotError::Truncated { got: framed.len() });
    };
    // `blake3::Hash` compares in constant time; not needed here, but free.
    if blake3::hash(chunk) == blake3::Hash::from(*stored) {
        Ok(chunk)
    } else {
        Err(BitrotError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_then_verify_round_trips() {
        let chunk: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut out = vec![0xAA]; // frame_into appends
        frame_into(&chunk, &mut out);
        assert_eq!(out.len(), 1 + HASH_LEN + chunk.len());
        assert_eq!(verify(&out[1..]).unwrap(), &chunk[..]);
        assert_eq!(&out[1..1 + HASH_LEN], &hash(&chunk));
    }

    #[test]
    fn empty_chunk_is_just_a_hash() {
        let mut out = Vec::new();
        frame_into(&[], &mut out);
        assert_eq!(out.len(), HASH_LEN);
        assert_eq!(verify(&out).unwrap(), &[] as &[u8]);
    }

    #[test]
    fn known_hash_of_empty_input() {
        // blake3("") from the BLAKE3 reference test vectors: pins the algorithm.
        assert_eq!(
            blake3::Hash::from(hash(b"")).to_hex().as_str(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn every_flipped_byte_is_caught() {
        let chunk = b"the quick brown fox jumps over the lazy dog";
        let mut framed = Vec::new();
        frame_into(chunk, &mut framed);
        for i in 0..framed.len() {
            let mut bad = framed.clone();
            bad[i] ^= 0x01;
            assert_eq!(verify(&bad), Err(BitrotError::Mismatch), "byte {i}");
        }
    }

    #[test]
    fn short_input_is_truncated_and_a_cut_chunk_mismatches() {
        assert_eq!(verify(&[0; 31]), Err(BitrotError::Truncated { got: 31 }));
        assert_eq!(verify(&[]), Err(BitrotError::Truncated { got: 0 }));
        let mut framed = Vec::new();
        frame_into(b"abcdef", &mut framed);
        assert_eq!(
            verify(&framed[..framed.len() - 1]),
            Err(BitrotError::Mismatch)
        );
    }
}
