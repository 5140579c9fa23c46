//! Object checksums S3 clients send with an upload: `x-amz-checksum-{crc32,crc32c,crc64nvme,sha1,sha256}`,
//! either as a request header or as an aws-chunked trailer. Values are the base64 of the big-endian
//! digest, as AWS defines them.
//!
//! This module only computes and compares; where the expected value comes from is decided in
//! `signature::body`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use crc_fast::CrcAlgorithm;
use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use crate::error::{S3Error, S3ErrorCode};

/// An additional checksum algorithm S3 supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumAlgorithm {
    Crc32,
    Crc32c,
    Crc64Nvme,
    Sha1,
    Sha256,
}

impl ChecksumAlgorithm {
    pub const ALL: [ChecksumAlgorithm; 5] = [
        ChecksumAlgorithm::Crc32,
        ChecksumAlgorithm::Crc32c,
        ChecksumAlgorithm::Crc64Nvme,
        ChecksumAlgorithm::Sha1,
        ChecksumAlgorithm::Sha256,
    ];

    /// The name S3 uses in `x-amz-checksum-algorithm` / `x-amz-sdk-checksum-algorithm` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc32 => "CRC32",
            ChecksumAlgorithm::Crc32c => "CRC32C",
            ChecksumAlgorithm::Crc64Nvme => "CRC64NVME",
            ChecksumAlgorithm::Sha1 => "SHA1",
            ChecksumAlgorithm::Sha256 => "SHA256",
        }
    }

    /// The header (or trailer) carrying the value, e.g. `x-amz-checksum-crc32`.
    pub fn header_name(self) -> &'static str {
        match self {
            ChecksumAlgorithm::Crc32 => "x-amz-checksum-crc32",
            ChecksumAlgorithm::Crc32c => "x-amz-checksum-crc32c",
            ChecksumAlgorithm::Crc64Nvme => "x-amz-checksum-crc64nvme",
            ChecksumAlgorithm::Sha1 => "x-amz-checksum-sha1",
            ChecksumAlgorithm::Sha256 => "x-amz-checksum-sha256",
        }
    }

    /// Parses an algorithm name (`CRC32`, `crc64nvme`, ...), case-insensitively.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Parses a header or trailer name (`x-amz-checksum-crc32c`), case-insensitively.
    pub fn from_header_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|a| a.header_name().eq_ignore_ascii_case(name.trim()))
    }

    /// The length of the raw digest in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            ChecksumAlgorithm::Crc32 | ChecksumAlgorithm::Crc32c => 4,
            ChecksumAlgorithm::Crc64Nvme => 8,
            ChecksumAlgorithm::Sha1 => 20,
            ChecksumAlgorithm::Sha256 => 32,
        }
    }

    /// Decodes a base64 checksum value as sent by a client; `None` if it is not valid base64 of
    /// the right length.
    pub fn decode_value(self, value: &str) -> Option<Vec<u8>> {
        let raw = BASE64.decode(value.trim()).ok()?;
        (raw.len() == self.digest_len()).then_some(raw)
    }

    /// The BadDigest error S3 returns when the data does not match.
    pub(crate) fn mismatch_error(self) -> S3Error {
        S3Error::new(
            S3ErrorCode::BadDigest,
            format!(
                "The {} you specified did not match the calculated checksum.",
                self.name()
            ),
        )
    }
}

impl std::fmt::Display for ChecksumAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An incremental checksum computation.
#[derive(Clone)]
pub struct Checksummer {
    state: State,
}

#[derive(Clone)]
enum State {
    Crc(ChecksumAlgorithm, crc_fast::Digest),
    Sha1(Sha1),
    Sha256(Sha256),
}

impl Checksummer {
    pub fn new(algorithm: ChecksumAlgorithm) -> Self {
        let state = match algorithm {
            ChecksumAlgorithm::Crc32 => {
                State::Crc(algorithm, crc_fast::Digest::new(CrcAlgorithm::Crc32IsoHdlc))
            }
            ChecksumAlgorithm::Crc32c => {
                State::Crc(algorithm, crc_fast::Digest::new(CrcAlgorithm::Crc32Iscsi))
            }
            ChecksumAlgorithm::Crc64Nvme => {
                State::Crc(algorithm, crc_fast::Digest::new(CrcAlgorithm::Crc64Nvme))
            }
            ChecksumAlgorithm::Sha1 => State::Sha1(Sha1::new()),
            ChecksumAlgorithm::Sha256 => State::Sha256(Sha256::new()),
        };
        Checksummer { state }
    }

    pub fn algorithm(&self) -> ChecksumAlgorithm {
        match &self.state {
            State::Crc(a, _) => *a,
            State::Sha1(_) => ChecksumAlgorithm::Sha1,
            State::Sha256(_) => ChecksumAlgorithm::Sha256,
        }
    }

    pub fn update(&mut self, data: &[u8]) {
        match &mut self.state {
            State::Crc(_, d) => d.update(data),
            State::Sha1(h) => h.update(data),
            State::Sha256(h) => h.update(data),
        }
    }

    /// The raw big-endian digest.
    pub fn finalize(self) -> Vec<u8> {
        match self.state {
            State::Crc(ChecksumAlgorithm::Crc64Nvme, d) => d.finalize().to_be_bytes().to_vec(),
            // CRC-32 variants: the value sits in the low 32 bits.
            State::Crc(_, d) => (d.finalize() as u32).to_be_bytes().to_vec(),
            State::Sha1(h) => h.finalize().to_vec(),
            State::Sha256(h) => h.finalize().to_vec(),
        }
    }

    /// The digest as S3 shows it: base64 of the big-endian bytes.
    pub fn finalize_base64(self) -> String {
        BASE64.encode(self.finalize())
    }
}

impl std::fmt::Debug for Checksummer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checksummer")
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

/// A checksum value the client declared, to be compared with the data at the end of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExpectedChecksum {
    pub algorithm: ChecksumAlgorithm,
    pub digest: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(alg: ChecksumAlgorithm, data: &[u8]) -> String {
        let mut c = Checksummer::new(alg);
        c.update(data);
        c.finalize_base64()
    }

    #[test]
    fn known_values() {
        // Standard check values over "123456789".
        let check = |alg, expected: &[u8]| {
            let mut c = Checksummer::new(alg);
            c.update(b"1234");
            c.update(b"56789");
            assert_eq!(c.finalize(), expected, "{alg}");
        };
        check(ChecksumAlgorithm::Crc32, &0xCBF4_3926u32.to_be_bytes());
        check(ChecksumAlgorithm::Crc32c, &0xE306_9283u32.to_be_bytes());
        check(
            ChecksumAlgorithm::Crc64Nvme,
            &0xAE8B_1486_0A79_9888u64.to_be_bytes(),
        );
        // AWS examples: CRC32 of "hello world", CRC32C of the 66560 'a' bytes of the chunked example.
        assert_eq!(b64(ChecksumAlgorithm::Crc32, b"hello world"), "DUoRhQ==");
        assert_eq!(
            b64(ChecksumAlgorithm::Crc32c, &vec![b'a'; 66560]),
            "sOO8/Q=="
        );
        assert_eq!(
            b64(ChecksumAlgorithm::Sha256, b""),
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
        );
        assert_eq!(
            b64(ChecksumAlgorithm::Sha1, b""),
            "2jmj7l5rSw0yVb/vlWAYkK/YBwk="
        );
    }

    #[test]
    fn names_round_trip() {
        for alg in ChecksumAlgorithm::ALL {
            assert_eq!(ChecksumAlgorithm::from_name(alg.name()), Some(alg));
            assert_eq!(
                ChecksumAlgorithm::from_header_name(&alg.header_name().to_uppercase()),
                Some(alg)
            );
            assert_eq!(Checksummer::new(alg).finalize().len(), alg.digest_len());
        }
        assert_eq!(ChecksumAlgorithm::from_name("md5"), None);
        assert_eq!(
            ChecksumAlgorithm::from_header_name("x-amz-checksum-md5"),
            None
        );
    }

    #[test]
    fn decode_value_checks_length() {
        assert_eq!(
            ChecksumAlgorithm::Crc32.decode_value("DUoRhQ=="),
            Some(vec![0x0d, 0x4a, 0x11, 0x85])
        );
        assert_eq!(ChecksumAlgorithm::Crc64Nvme.decode_value("DUoRhQ=="), None);
        assert_eq!(ChecksumAlgorithm::Crc32.decode_value("not base64!"), None);
        let e = ChecksumAlgorithm::Crc32.mismatch_error();
        assert_eq!(e.code, S3ErrorCode::BadDigest);
        assert_eq!(
            e.message,
            "The CRC32 you specified did not match the calculated checksum."
        );
    }
}
