//! The `aws-chunked` body encoding, decoded without IO: bytes go in as they arrive from the network,
//! object bytes come out as slices of the same buffers (no copy).
//!
//! Signed (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`):
//! ```text
//! <hex-size>;chunk-signature=<64 hex>\r\n <data> \r\n  ...  0;chunk-signature=<sig>\r\n
//! ```
//! then `\r\n` (no trailer), or the trailer lines and `x-amz-trailer-signature:<sig>\r\n`, `\r\n`.
//! Each chunk is signed over `AWS4-HMAC-SHA256-PAYLOAD\n<date>\n<scope>\n<previous signature>\n
//! <sha256("")>\n<sha256(data)>`, starting from the seed (the request's own signature); the trailer
//! over `AWS4-HMAC-SHA256-TRAILER\n<date>\n<scope>\n<last chunk signature>\n<sha256(trailers)>`.
//!
//! Unsigned (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`): `<hex-size>\r\n <data> \r\n` (extensions ignored),
//! `0\r\n`, trailer lines, `\r\n`.
//!
//! Framing seen in the wild differs on one point: some signers put an empty line between the final
//! chunk and the trailers, some end without the last empty line. Both are accepted.
//!
//! Memory is bounded: a line may be at most [`MAX_LINE`] bytes, a chunk at most [`MAX_CHUNK`] bytes
//! (its data is passed through, never buffered), and there are at most [`MAX_TRAILERS`] trailers.

use bytes::{Bytes, BytesMut};
use sha2::{Digest as _, Sha256};

use super::v4::{hmac_sha256, sha256_hex, EMPTY_SHA256};
use crate::error::{S3Error, S3ErrorCode};

/// Longest chunk header or trailer line accepted, CRLF included.
pub(crate) const MAX_LINE: usize = 4096;
/// Largest chunk accepted. The AWS SDKs send 64 KiB chunks.
pub(crate) const MAX_CHUNK: u64 = 16 * 1024 * 1024;
/// Most trailer lines accepted (the signature line included).
pub(crate) const MAX_TRAILERS: usize = 16;

const PAYLOAD_ALGORITHM: &str = "AWS4-HMAC-SHA256-PAYLOAD";
const TRAILER_ALGORITHM: &str = "AWS4-HMAC-SHA256-TRAILER";
const TRAILER_SIGNATURE: &str = "x-amz-trailer-signature";

/// Trailers as `(lower-case name, trimmed value)`, in the order sent.
pub(crate) type Trailers = Vec<(String, String)>;

/// What continues the request's signature into a signed chunked body: the signing key, the
/// timestamp and scope of the request, and its signature (the seed).
#[derive(Clone, PartialEq, Eq)]
pub struct ChunkSigner {
    key: [u8; 32],
    amz_date: String,
    scope: String,
    seed: [u8; 32],
}

impl ChunkSigner {
    pub(crate) fn new(key: [u8; 32], amz_date: String, scope: String, seed: [u8; 32]) -> Self {
        ChunkSigner {
            key,
            amz_date,
            scope,
            seed,
        }
    }

    /// The signature of the request itself, which the first chunk signature chains from.
    pub fn seed_signature(&self) -> [u8; 32] {
        self.seed
    }

    /// The signature of a chunk whose data hashes to `data_sha256`, following `previous`.
    pub(crate) fn chunk_signature(&self, previous: &[u8; 32], data_sha256: &[u8; 32]) -> [u8; 32] {
        let sts = format!(
            "{PAYLOAD_ALGORITHM}\n{}\n{}\n{}\n{EMPTY_SHA256}\n{}",
            self.amz_date,
            self.scope,
            hex::encode(previous),
            hex::encode(data_sha256)
        );
        hmac_sha256(&self.key, sts.as_bytes())
    }

    /// The signature of the trailer block (canonical form: `name:value\n` per trailer, sorted).
    pub(crate) fn trailer_signature(
        &self,
        previous: &[u8; 32],
        canonical_trailers: &[u8],
    ) -> [u8; 32] {
        let sts = format!(
            "{TRAILER_ALGORITHM}\n{}\n{}\n{}\n{}",
            self.amz_date,
            self.scope,
            hex::encode(previous),
            sha256_hex(canonical_trailers)
        );
        hmac_sha256(&self.key, sts.as_bytes())
    }
}

impl std::fmt::Debug for ChunkSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkSigner")
            .field("key", &"<redacted>")
            .field("amz_date", &self.amz_date)
            .field("scope", &self.scope)
            .field("seed", &hex::encode(self.seed))
            .finish()
    }
}

/// How the chunks and the trailer of a body are authenticated.
#[derive(Debug, Clone)]
pub(crate) enum ChunkMode {
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: signed chunks, no trailer.
    Signed(ChunkSigner),
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks and a signed trailer.
    SignedTrailer(ChunkSigner),
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: plain chunks and an unsigned trailer.
    UnsignedTrailer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting `<hex-size>[;extensions]\r\n`.
    ChunkHeader,
    /// Inside a chunk's data.
    ChunkData,
    /// Expecting the `\r\n` after a chunk's data.
    ChunkEnd,
    /// After the final chunk: trailer lines up to an empty line. `blank` is set once an empty
    /// line was seen before any trailer (the variant with a separator line).
    Trailers {
        blank: bool,
    },
    Done,
}

struct Signing {
    signer: ChunkSigner,
    previous: [u8; 32],
    /// The signature the current chunk claims.
    claimed: [u8; 32],
    hasher: Sha256,
}

/// The decoder. Feed it with [`AwsChunkedDecoder::decode`] as bytes arrive; call
/// [`AwsChunkedDecoder::finish`] at end of input.
pub(crate) struct AwsChunkedDecoder {
    state: State,
    signing: Option<Signing>,
    trailer_allowed: bool,
    /// A line being assembled across input buffers.
    line: BytesMut,
    chunk_remaining: u64,
    chunk_index: u64,
    decoded: u64,
    /// `x-amz-decoded-content-length`, when the client sent one.
    expected_decoded: Option<u64>,
    trailers: Trailers,
    trailer_signature: Option<String>,
}

fn malformed(detail: impl std::fmt::Display) -> S3Error {
    S3Error::new(
        S3ErrorCode::InvalidRequest,
        format!("Malformed aws-chunked body: {detail}"),
    )
}

fn incomplete(detail: impl std::fmt::Display) -> S3Error {
    S3Error::new(S3ErrorCode::IncompleteBody, detail.to_string())
}

impl AwsChunkedDecoder {
    /// `expected_decoded` is `x-amz-decoded-content-length`.
    #[cfg(test)]
    pub(crate) fn new(mode: ChunkMode, expected_decoded: u64) -> Self {
        Self::with_length(mode, Some(expected_decoded))
    }

    /// A decoder for a body of `expected_decoded` object bytes, or of any length when the client
    /// did not say (the caller bounds it then).
    pub(crate) fn with_length(mode: ChunkMode, expected_decoded: Option<u64>) -> Self {
        let (signing, trailer_allowed) = match mode {
            ChunkMode::Signed(signer) => (Some(signer), false),
            ChunkMode::SignedTrailer(signer) => (Some(signer), true),
            ChunkMode::UnsignedTrailer => (None, true),
        };
        AwsChunkedDecoder {
            state: State::ChunkHeader,
            signing: signing.map(|signer| Signing {
                previous: signer.seed,
                signer,
                claimed: [0; 32],
                hasher: Sha256::new(),
            }),
            trailer_allowed,
            line: BytesMut::new(),
            chunk_remaining: 0,
            chunk_index: 0,
            decoded: 0,
            expected_decoded,
            trailers: Vec::new(),
            trailer_signature: None,
        }
    }

    /// Whether the final chunk and the trailer have been read and verified.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Object bytes decoded so far.
    pub(crate) fn decoded(&self) -> u64 {
        self.decoded
    }

    /// Consumes framing from the front of `input` up to the next piece of object data, and returns
    /// that piece (a slice of `input`). `Ok(None)`: `input` is used up (or the body is complete).
    /// Call again until it returns `Ok(None)` before feeding the next buffer.
    pub(crate) fn decode(&mut self, input: &mut Bytes) -> Result<Option<Bytes>, S3Error> {
        loop {
            match self.state {
                State::ChunkHeader => {
                    let Some(line) = self.read_line(input)? else {
                        return Ok(None);
                    };
                    self.chunk_header(&line)?;
                }
                State::ChunkData => {
                    if input.is_empty() {
                        return Ok(None);
                    }
                    let n = usize::try_from(self.chunk_remaining)
                        .map_or(input.len(), |r| r.min(input.len()));
                    let data = input.split_to(n);
                    self.chunk_remaining -= n as u64;
                    self.decoded += n as u64;
                    if let Some(s) = &mut self.signing {
                        s.hasher.update(&data);
                    }
                    if self.chunk_remaining == 0 {
                        self.verify_chunk()?;
                        self.state = State::ChunkEnd;
                    }
                    return Ok(Some(data));
                }
                State::ChunkEnd => {
                    let Some(line) = self.read_line(input)? else {
                        return Ok(None);
                    };
                    if !line.is_empty() {
                        return Err(malformed(format_args!(
                            "chunk {} is longer than its declared size",
                            self.chunk_index
                        )));
                    }
                    self.chunk_index += 1;
                    self.state = State::ChunkHeader;
                }
                State::Trailers { blank } => {
                    let Some(line) = self.read_line(input)? else {
                        return Ok(None);
                    };
                    if line.is_empty() {
                        if self.trailer_allowed
                            && !blank
                            && self.trailers.is_empty()
                            && self.trailer_signature.is_none()
                        {
                            self.state = State::Trailers { blank: true };
                        } else {
                            self.complete()?;
                        }
                    } else {
                        self.trailer_line(&line)?;
                    }
                }
                State::Done => {
                    if !input.is_empty() {
                        return Err(malformed("data after the end of the body"));
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Ends the input. Returns the trailers (lower-case names, trimmed values; the trailer
    /// signature excluded, it has been verified).
    pub(crate) fn finish(&mut self) -> Result<Trailers, S3Error> {
        match self.state {
            State::Done => {}
            State::Trailers { .. } => {
                // Tolerate a missing final empty line, and a last trailer line without CRLF.
                if !self.line.is_empty() {
                    let line = self.line.split().freeze();
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    if !line.is_empty() {
                        self.trailer_line(line)?;
                    }
                }
                self.complete()?;
            }
            State::ChunkHeader | State::ChunkData | State::ChunkEnd => {
                return Err(incomplete(format_args!(
                    "The aws-chunked body ended inside chunk {} after {} bytes.",
                    self.chunk_index, self.decoded
                )));
            }
        }
        Ok(std::mem::take(&mut self.trailers))
    }

    /// Reads one CRLF-terminated line (without the CRLF), or `None` if `input` ran out first.
    fn read_line(&mut self, input: &mut Bytes) -> Result<Option<Bytes>, S3Error> {
        let Some(pos) = input.iter().position(|&b| b == b'\n') else {
            if self.line.len() + input.len() > MAX_LINE {
                return Err(malformed(format_args!(
                    "a line is longer than {MAX_LINE} bytes"
                )));
            }
            self.line.extend_from_slice(input);
            input.clear();
            return Ok(None);
        };
        if self.line.len() + pos + 1 > MAX_LINE {
            return Err(malformed(format_args!(
                "a line is longer than {MAX_LINE} bytes"
            )));
        }
        let piece = input.split_to(pos + 1);
        let line = if self.line.is_empty() {
            piece
        } else {
            self.line.extend_from_slice(&piece);
            self.line.split().freeze()
        };
        match line.strip_suffix(b"\r\n") {
            Some(content) => Ok(Some(line.slice_ref(content))),
            None => Err(malformed("a line does not end with CRLF")),
        }
    }

    fn chunk_header(&mut self, line: &[u8]) -> Result<(), S3Error> {
        let line =
            std::str::from_utf8(line).map_err(|_| malformed("a chunk header is not ASCII"))?;
        let mut fields = line.split(';');
        let size_hex = fields.next().unwrap_or("").trim();
        if size_hex.is_empty()
            || size_hex.len() > 16
            || !size_hex.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(malformed(format_args!("invalid chunk size \"{size_hex}\"")));
        }
        let size =
            u64::from_str_radix(size_hex, 16).map_err(|_| malformed("invalid chunk size"))?;
        if size > MAX_CHUNK {
            return Err(malformed(format_args!(
                "chunk {} has {size} bytes, more than the {MAX_CHUNK} allowed",
                self.chunk_index
            )));
        }
        if let Some(expected) = self.expected_decoded.filter(|&e| self.decoded + size > e) {
            return Err(S3Error::new(
                S3ErrorCode::InvalidRequest,
                format!(
                    "The aws-chunked body holds more than the {expected} bytes given in x-amz-decoded-content-length."
                ),
            ));
        }
        if let Some(s) = &mut self.signing {
            let sig = fields
                .find_map(|f| f.trim().strip_prefix("chunk-signature="))
                .ok_or_else(|| {
                    S3Error::new(
                        S3ErrorCode::SignatureDoesNotMatch,
                        format!("Chunk {} carries no chunk-signature.", self.chunk_index),
                    )
                })?;
            if hex::decode_to_slice(sig.trim(), &mut s.claimed).is_err() {
                return Err(malformed(format_args!(
                    "the signature of chunk {} is not 64 hex digits",
                    self.chunk_index
                )));
            }
            s.hasher = Sha256::new();
        }
        self.chunk_remaining = size;
        if size == 0 {
            self.verify_chunk()?;
            self.state = State::Trailers { blank: false };
        } else {
            self.state = State::ChunkData;
        }
        Ok(())
    }

    /// Checks the signature of the chunk whose data has just been read.
    fn verify_chunk(&mut self) -> Result<(), S3Error> {
        let Some(s) = &mut self.signing else {
            return Ok(());
        };
        let digest: [u8; 32] = std::mem::take(&mut s.hasher).finalize().into();
        let expected = s.signer.chunk_signature(&s.previous, &digest);
        if !bool::from(subtle::ConstantTimeEq::ct_eq(&expected[..], &s.claimed[..])) {
            return Err(S3Error::new(
                S3ErrorCode::SignatureDoesNotMatch,
                format!(
                    "The chunk signature we calculated does not match the one you provided (chunk {}).",
                    self.chunk_index
                ),
            ));
        }
        s.previous = expected;
        Ok(())
    }

    fn trailer_line(&mut self, line: &[u8]) -> Result<(), S3Error> {
        if !self.trailer_allowed {
            return Err(malformed(
                "trailer after the final chunk, but x-amz-content-sha256 does not announce one",
            ));
        }
        if self.trailers.len() + usize::from(self.trailer_signature.is_some()) >= MAX_TRAILERS {
            return Err(malformed(format_args!("more than {MAX_TRAILERS} trailers")));
        }
        let line =
            std::str::from_utf8(line).map_err(|_| malformed("a trailer is not valid UTF-8"))?;
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| malformed(format_args!("trailer \"{line}\" has no ':'")))?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim().to_string();
        if name == TRAILER_SIGNATURE {
            if self.trailer_signature.replace(value).is_some() {
                return Err(malformed("x-amz-trailer-signature appears twice"));
            }
        } else {
            if self.trailers.iter().any(|(n, _)| *n == name) {
                return Err(malformed(format_args!("trailer {name} appears twice")));
            }
            self.trailers.push((name, value));
        }
        Ok(())
    }

    /// The body is complete: check the length and the trailer signature.
    fn complete(&mut self) -> Result<(), S3Error> {
        if let Some(expected) = self.expected_decoded.filter(|&e| e != self.decoded) {
            return Err(incomplete(format_args!(
                "The aws-chunked body holds {} bytes, but x-amz-decoded-content-length is {expected}.",
                self.decoded
            )));
        }
        if let (Some(s), true) = (&self.signing, self.trailer_allowed) {
            let claimed = self.trailer_signature.as_deref().ok_or_else(|| {
                S3Error::new(
                    S3ErrorCode::SignatureDoesNotMatch,
                    "The trailer carries no x-amz-trailer-signature.",
                )
            })?;
            let mut sorted: Vec<&(String, String)> = self.trailers.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            let mut canonical = Vec::new();
            for (name, value) in sorted {
                canonical.extend_from_slice(name.as_bytes());
                canonical.push(b':');
                canonical.extend_from_slice(value.as_bytes());
                canonical.push(b'\n');
            }
            let expected = s.signer.trailer_signature(&s.previous, &canonical);
            if !super::v4::signature_matches(&expected, claimed) {
                return Err(S3Error::new(
                    S3ErrorCode::SignatureDoesNotMatch,
                    "The trailer signature we calculated does not match the one you provided.",
                ));
            }
        } else if self.trailer_signature.is_some() {
            return Err(malformed("x-amz-trailer-signature in an unsigned body"));
        }
        self.state = State::Done;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::signature::v4::signing_key;

    /// The AWS documentation's example: secret, date and scope of the `examplebucket` uploads.
    pub(crate) fn example_signer(seed_hex: &str) -> ChunkSigner {
        let mut seed = [0u8; 32];
        hex::decode_to_slice(seed_hex, &mut seed).unwrap();
        ChunkSigner::new(
            signing_key(
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "20130524",
                "us-east-1",
                "s3",
            ),
            "20130524T000000Z".into(),
            "20130524/us-east-1/s3/aws4_request".into(),
            seed,
        )
    }

    pub(crate) const SEED: &str =
        "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
    pub(crate) const SIGS: [&str; 3] = [
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
    ];
    pub(crate) const TRAILER_SEED: &str =
        "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";
    pub(crate) const TRAILER_SIGS: [&str; 3] = [
        "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
        "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
        "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
    ];
    pub(crate) const TRAILER_SIG: &str =
        "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435";

    /// The example body: 65536 + 1024 bytes of 'a' in chunks signed with `sigs`, then `tail`.
    pub(crate) fn example_body(sigs: [&str; 3], tail: &str) -> Vec<u8> {
        let mut body = format!("10000;chunk-signature={}\r\n", sigs[0]).into_bytes();
        body.extend(std::iter::repeat_n(b'a', 65536));
        body.extend_from_slice(format!("\r\n400;chunk-signature={}\r\n", sigs[1]).as_bytes());
        body.extend(std::iter::repeat_n(b'a', 1024));
        body.extend_from_slice(format!("\r\n0;chunk-signature={}\r\n", sigs[2]).as_bytes());
        body.extend_from_slice(tail.as_bytes());
        body
    }

    /// Runs the decoder over `pieces`; returns the data and the trailers.
    fn run(mut d: AwsChunkedDecoder, pieces: &[&[u8]]) -> Result<(Vec<u8>, Trailers), S3Error> {
        let mut out = Vec::new();
        for p in pieces {
            let mut b = Bytes::copy_from_slice(p);
            while let Some(data) = d.decode(&mut b)? {
                out.extend_from_slice(&data);
            }
            assert!(b.is_empty());
        }
        let trailers = d.finish()?;
        Ok((out, trailers))
    }

    fn signed(seed: &str) -> AwsChunkedDecoder {
        AwsChunkedDecoder::new(ChunkMode::Signed(example_signer(seed)), 66560)
    }

    fn signed_trailer() -> AwsChunkedDecoder {
        AwsChunkedDecoder::new(
            ChunkMode::SignedTrailer(example_signer(TRAILER_SEED)),
            66560,
        )
    }

    #[test]
    fn aws_example_chunk_signatures() {
        let s = example_signer(SEED);
        let mut prev = s.seed_signature();
        for (data_len, sig) in [(65536, SIGS[0]), (1024, SIGS[1]), (0, SIGS[2])] {
            let digest: [u8; 32] = Sha256::digest(vec![b'a'; data_len]).into();
            prev = s.chunk_signature(&prev, &digest);
            assert_eq!(hex::encode(prev), sig);
        }
    }

    #[test]
    fn aws_example_decodes() {
        let body = example_body(SIGS, "\r\n");
        let (data, trailers) = run(signed(SEED), &[&body]).unwrap();
        assert_eq!(data, vec![b'a'; 66560]);
        assert!(trailers.is_empty());
        // The final CRLF may be missing.
        let body = example_body(SIGS, "");
        assert_eq!(run(signed(SEED), &[&body]).unwrap().0.len(), 66560);
    }

    #[test]
    fn aws_example_with_signed_trailer_both_framings() {
        for tail in [
            format!(
                "x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{TRAILER_SIG}\r\n\r\n"
            ),
            format!(
                "\r\nx-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{TRAILER_SIG}\r\n"
            ),
            format!("x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{TRAILER_SIG}"),
        ] {
            let body = example_body(TRAILER_SIGS, &tail);
            let (data, trailers) = run(signed_trailer(), &[&body]).unwrap();
            assert_eq!(data.len(), 66560);
            assert_eq!(
                trailers,
                vec![("x-amz-checksum-crc32c".to_string(), "sOO8/Q==".to_string())]
            );
        }
    }

    #[test]
    fn tampered_trailer_is_rejected() {
        let tail = format!(
            "x-amz-checksum-crc32c:AAAAAA==\r\nx-amz-trailer-signature:{TRAILER_SIG}\r\n\r\n"
        );
        let body = example_body(TRAILER_SIGS, &tail);
        let e = run(signed_trailer(), &[&body]).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::SignatureDoesNotMatch);
        // Missing trailer signature.
        let body = example_body(TRAILER_SIGS, "x-amz-checksum-crc32c:sOO8/Q==\r\n\r\n");
        assert_eq!(
            run(signed_trailer(), &[&body]).unwrap_err().code,
            S3ErrorCode::SignatureDoesNotMatch
        );
    }

    #[test]
    fn tampered_chunk_is_rejected_before_its_last_byte_is_released() {
        let mut body = example_body(SIGS, "\r\n");
        body[100] = b'b';
        let mut d = signed(SEED);
        let mut input = Bytes::from(body);
        let mut released = 0;
        let err = loop {
            match d.decode(&mut input) {
                Ok(Some(data)) => released += data.len(),
                Ok(None) => panic!("tampered body accepted"),
                Err(e) => break e,
            }
        };
        assert_eq!(err.code, S3ErrorCode::SignatureDoesNotMatch);
        assert_eq!(
            released, 0,
            "the whole first chunk arrived in one buffer: nothing is released"
        );
    }

    #[test]
    fn wrong_seed_or_signature_is_rejected() {
        let body = example_body(SIGS, "\r\n");
        let e = run(signed(TRAILER_SEED), &[&body]).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::SignatureDoesNotMatch);
        // Chunks swapped signatures.
        let body = example_body([SIGS[1], SIGS[0], SIGS[2]], "\r\n");
        assert_eq!(
            run(signed(SEED), &[&body]).unwrap_err().code,
            S3ErrorCode::SignatureDoesNotMatch
        );
        // Chunk without a signature.
        let body = b"10000\r\n".to_vec();
        assert_eq!(
            run(signed(SEED), &[&body]).unwrap_err().code,
            S3ErrorCode::SignatureDoesNotMatch
        );
    }

    #[test]
    fn truncated_body_is_incomplete() {
        let body = example_body(SIGS, "\r\n");
        for cut in [0, 10, 90, 65536, 65620, 66700, body.len() - 70] {
            let e = run(signed(SEED), &[&body[..cut]]).unwrap_err();
            assert_eq!(e.code, S3ErrorCode::IncompleteBody, "cut at {cut}");
        }
    }

    #[test]
    fn decoded_length_must_match() {
        let body = example_body(SIGS, "\r\n");
        let d = AwsChunkedDecoder::new(ChunkMode::Signed(example_signer(SEED)), 66561);
        assert_eq!(
            run(d, &[&body]).unwrap_err().code,
            S3ErrorCode::IncompleteBody
        );
        let d = AwsChunkedDecoder::new(ChunkMode::Signed(example_signer(SEED)), 1000);
        assert_eq!(
            run(d, &[&body]).unwrap_err().code,
            S3ErrorCode::InvalidRequest
        );
    }

    fn unsigned(len: u64) -> AwsChunkedDecoder {
        AwsChunkedDecoder::new(ChunkMode::UnsignedTrailer, len)
    }

    #[test]
    fn unsigned_trailer() {
        let body = b"b\r\nhello world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";
        let (data, trailers) = run(unsigned(11), &[body]).unwrap();
        assert_eq!(data, b"hello world");
        assert_eq!(
            trailers,
            vec![("x-amz-checksum-crc32".into(), "DUoRhQ==".into())]
        );
        // Extensions are ignored, no trailer at all is fine.
        let body = b"5;foo=bar\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        let (data, trailers) = run(unsigned(11), &[body]).unwrap();
        assert_eq!(data, b"hello world");
        assert!(trailers.is_empty());
        // A trailer signature has no place in an unsigned body.
        let body = b"0\r\nx-amz-trailer-signature:00\r\n\r\n";
        assert_eq!(
            run(unsigned(0), &[body]).unwrap_err().code,
            S3ErrorCode::InvalidRequest
        );
    }

    #[test]
    fn malformed_framing() {
        for (body, len) in [
            (&b"zz\r\nhello\r\n0\r\n\r\n"[..], 5),
            (b"5\r\nhello!\r\n0\r\n\r\n", 5),
            (b"5\nhello\r\n0\r\n\r\n", 5),
            (b"5\r\nhello\r\n0\r\n\r\nmore", 5),
            (b"5\r\nhello\r\n0\r\nno-colon\r\n\r\n", 5),
            (b"-5\r\nhello\r\n0\r\n\r\n", 5),
            (b"10000000000000000\r\n", 5),
        ] {
            let e = run(unsigned(len), &[body]).unwrap_err();
            assert_eq!(
                e.code,
                S3ErrorCode::InvalidRequest,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn limits() {
        // A chunk larger than MAX_CHUNK.
        let body = format!("{:x}\r\n", MAX_CHUNK + 1);
        let e = run(unsigned(u64::MAX), &[body.as_bytes()]).unwrap_err();
        assert!(e.message.contains("allowed"), "{e}");
        // An endless header line fails once it passes MAX_LINE, even fed byte by byte.
        let line = vec![b'1'; MAX_LINE + 1];
        let pieces: Vec<&[u8]> = line.chunks(1).collect();
        let e = run(unsigned(5), &pieces).unwrap_err();
        assert!(e.message.contains("longer than"), "{e}");
        // Too many trailers.
        let mut body = b"0\r\n".to_vec();
        for i in 0..=MAX_TRAILERS {
            body.extend_from_slice(format!("x-t{i}:v\r\n").as_bytes());
        }
        assert!(run(unsigned(0), &[&body])
            .unwrap_err()
            .message
            .contains("trailers"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// However the network splits the body, the decoder yields the same bytes.
        #[test]
        fn any_split_decodes_the_same(cuts in proptest::collection::vec(0usize..66_900, 0..12)) {
            let tail = format!("x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{TRAILER_SIG}\r\n\r\n");
            let body = example_body(TRAILER_SIGS, &tail);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.push(0);
            cuts.push(body.len());
            cuts.sort_unstable();
            let pieces: Vec<&[u8]> = cuts.windows(2).map(|w| &body[w[0]..w[1]]).collect();
            let (data, trailers) = run(signed_trailer(), &pieces).unwrap();
            proptest::prop_assert_eq!(data, vec![b'a'; 66560]);
            proptest::prop_assert_eq!(trailers.len(), 1);
        }

        #[test]
        fn unsigned_any_split(data in proptest::collection::vec(proptest::num::u8::ANY, 0..3000),
                              chunk in 1usize..700, cuts in proptest::collection::vec(0usize..4000, 0..8)) {
            let mut body = Vec::new();
            for c in data.chunks(chunk) {
                body.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                body.extend_from_slice(c);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n");
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.push(0);
            cuts.push(body.len());
            cuts.sort_unstable();
            let pieces: Vec<&[u8]> = cuts.windows(2).map(|w| &body[w[0]..w[1]]).collect();
            let (out, trailers) = run(unsigned(data.len() as u64), &pieces).unwrap();
            proptest::prop_assert_eq!(out, data);
            proptest::prop_assert_eq!(trailers.len(), 1);
        }
    }
}
