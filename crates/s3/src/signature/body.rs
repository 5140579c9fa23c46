//! The verified request body: a stream adapter around the raw body that de-chunks `aws-chunked`
//! bodies, checks the signed SHA-256 and the `x-amz-checksum-*` value, and reports any mismatch as
//! an error item before it would end the stream.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use futures::Stream;
use http::request::Parts;
use sha2::{Digest as _, Sha256};

use super::checksum::{ChecksumAlgorithm, Checksummer, ExpectedChecksum};
use super::streaming::{AwsChunkedDecoder, ChunkMode};
use super::{Authenticated, ChecksumSlot, PayloadCheck};
use crate::error::{S3Error, S3ErrorCode};

fn invalid(message: impl Into<String>) -> S3Error {
    S3Error::new(S3ErrorCode::InvalidRequest, message)
}

fn header_str<'p>(parts: &'p Parts, name: &str) -> Result<Option<&'p str>, S3Error> {
    parts
        .headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::trim)
                .map_err(|_| invalid(format!("Value for {name} header is invalid.")))
        })
        .transpose()
}

/// Where the expected checksum comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChecksumSource {
    None,
    Header(ExpectedChecksum),
    /// Announced by `x-amz-trailer`; the value arrives after the data.
    Trailer(ChecksumAlgorithm),
}

/// Reads `x-amz-checksum-*`, `x-amz-trailer` and `x-amz-sdk-checksum-algorithm`.
pub(crate) fn checksum_source(
    parts: &Parts,
    trailer_allowed: bool,
) -> Result<ChecksumSource, S3Error> {
    let mut found: Option<ExpectedChecksum> = None;
    for alg in ChecksumAlgorithm::ALL {
        let Some(value) = header_str(parts, alg.header_name())? else {
            continue;
        };
        if found.is_some() {
            return Err(invalid(
                "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
            ));
        }
        // A value that is not a digest of this algorithm cannot match the body: BadDigest, as S3
        // answers it (InvalidRequest is for the headers' combination).
        let digest = alg.decode_value(value).ok_or_else(|| {
            S3Error::new(
                S3ErrorCode::BadDigest,
                format!(
                    "The {} you specified is not a {} checksum, so it did not match what we received.",
                    alg.header_name(),
                    alg.name()
                ),
            )
        })?;
        found = Some(ExpectedChecksum {
            algorithm: alg,
            digest,
        });
    }

    let mut trailer = None;
    for value in parts.headers.get_all("x-amz-trailer") {
        let value = value.to_str().map_err(|_| {
            invalid("The value specified in the x-amz-trailer header is not supported")
        })?;
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let alg = ChecksumAlgorithm::from_header_name(name).ok_or_else(|| {
                invalid("The value specified in the x-amz-trailer header is not supported")
            })?;
            if trailer.replace(alg).is_some() || found.is_some() {
                return Err(invalid(
                    "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
                ));
            }
        }
    }
    if trailer.is_some() && !trailer_allowed {
        return Err(invalid(
            "x-amz-trailer requires x-amz-content-sha256 STREAMING-UNSIGNED-PAYLOAD-TRAILER or \
             STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER.",
        ));
    }

    let source = match (found, trailer) {
        (Some(expected), _) => ChecksumSource::Header(expected),
        (None, Some(alg)) => ChecksumSource::Trailer(alg),
        (None, None) => ChecksumSource::None,
    };
    if let Some(sdk) = header_str(parts, "x-amz-sdk-checksum-algorithm")? {
        let alg = ChecksumAlgorithm::from_name(sdk)
            .ok_or_else(|| invalid("Value for x-amz-sdk-checksum-algorithm header is invalid."))?;
        let declared = match &source {
            ChecksumSource::Header(e) => e.algorithm,
            ChecksumSource::Trailer(a) => *a,
            ChecksumSource::None => return Err(invalid(
                "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* \
                     or x-amz-trailer headers were found.",
            )),
        };
        if declared != alg {
            return Err(invalid(
                "Value for x-amz-sdk-checksum-algorithm header is invalid.",
            ));
        }
    }
    Ok(source)
}

enum Framing {
    /// The body is the object: count it, and hash it if its SHA-256 was signed.
    Plain {
        sha256: Option<(Sha256, [u8; 32])>,
        received: u64,
        content_length: Option<u64>,
    },
    Chunked(Box<AwsChunkedDecoder>),
}

/// The stream returned by [`super::verified_body`].
pub(crate) struct VerifiedBody<S> {
    inner: Pin<Box<S>>,
    framing: Framing,
    pending: Bytes,
    checksum: Option<Checksummer>,
    source: ChecksumSource,
    finished: bool,
    /// Receives the checksum once it is verified.
    verified: ChecksumSlot,
}

pub(crate) fn new<S>(
    parts: &Parts,
    auth: &Authenticated,
    body: S,
    verified: ChecksumSlot,
) -> Result<VerifiedBody<S>, S3Error>
where
    S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
{
    let mode = match &auth.payload {
        PayloadCheck::Unsigned | PayloadCheck::Sha256(_) => None,
        PayloadCheck::StreamingSigned { signer } => Some(ChunkMode::Signed(signer.clone())),
        PayloadCheck::StreamingSignedTrailer { signer } => {
            Some(ChunkMode::SignedTrailer(signer.clone()))
        }
        PayloadCheck::StreamingUnsignedTrailer {} => Some(ChunkMode::UnsignedTrailer),
    };
    let trailer_allowed = matches!(
        mode,
        Some(ChunkMode::SignedTrailer(_) | ChunkMode::UnsignedTrailer)
    );
    let source = checksum_source(parts, trailer_allowed)?;
    let framing = match mode {
        None => Framing::Plain {
            sha256: match auth.payload {
                PayloadCheck::Sha256(d) => Some((Sha256::new(), d)),
                _ => None,
            },
            received: 0,
            content_length: header_str(parts, "content-length")?.and_then(|v| v.parse().ok()),
        },
        Some(mode) => {
            // Without x-amz-decoded-content-length the body is as long as its chunks say; the
            // handler bounds it (a PUT by the largest object).
            let decoded = header_str(parts, "x-amz-decoded-content-length")?
                .map(|v| {
                    v.parse::<u64>().map_err(|_| {
                        invalid("Value for x-amz-decoded-content-length header is invalid.")
                    })
                })
                .transpose()?;
            Framing::Chunked(Box::new(AwsChunkedDecoder::with_length(mode, decoded)))
        }
    };
    let checksum = match &source {
        ChecksumSource::None => None,
        ChecksumSource::Header(e) => Some(Checksummer::new(e.algorithm)),
        ChecksumSource::Trailer(a) => Some(Checksummer::new(*a)),
    };
    Ok(VerifiedBody {
        inner: Box::pin(body),
        framing,
        pending: Bytes::new(),
        checksum,
        source,
        finished: false,
        verified,
    })
}

impl<S> VerifiedBody<S> {
    /// Takes the next piece of object data out of `pending`.
    fn next_data(&mut self) -> Result<Option<Bytes>, S3Error> {
        let data = match &mut self.framing {
            Framing::Plain {
                sha256,
                received,
                content_length,
            } => {
                if self.pending.is_empty() {
                    return Ok(None);
                }
                let data = std::mem::take(&mut self.pending);
                *received += data.len() as u64;
                if content_length.is_some_and(|l| *received > l) {
                    return Err(invalid("The body is longer than its Content-Length."));
                }
                if let Some((h, _)) = sha256 {
                    h.update(&data);
                }
                data
            }
            Framing::Chunked(decoder) => match decoder.decode(&mut self.pending)? {
                Some(data) => data,
                None => return Ok(None),
            },
        };
        if let Some(c) = &mut self.checksum {
            c.update(&data);
        }
        Ok(Some(data))
    }

    /// The raw body has ended: run every end-of-body check.
    fn finish(&mut self) -> Result<(), S3Error> {
        let trailers = match &mut self.framing {
            Framing::Plain {
                sha256,
                received,
                content_length,
            } => {
                if let Some(l) = content_length.filter(|l| *received != *l) {
                    return Err(S3Error::new(
                        S3ErrorCode::IncompleteBody,
                        format!("You did not provide the number of bytes specified by the Content-Length HTTP header ({received} of {l})."),
                    ));
                }
                if let Some((h, expected)) = sha256.take() {
                    let got: [u8; 32] = h.finalize().into();
                    if got != expected {
                        return Err(S3Error::from_code(S3ErrorCode::XAmzContentSHA256Mismatch));
                    }
                }
                Vec::new()
            }
            Framing::Chunked(decoder) => {
                let trailers = decoder.finish()?;
                debug_assert!(decoder.is_done());
                tracing::trace!(decoded = decoder.decoded(), "aws-chunked body complete");
                trailers
            }
        };
        let expected = match &self.source {
            ChecksumSource::None => {
                if let Some((name, _)) = trailers.first() {
                    return Err(invalid(format!(
                        "The trailer {name} was not declared in x-amz-trailer."
                    )));
                }
                return Ok(());
            }
            ChecksumSource::Header(e) => {
                if let Some((name, _)) = trailers.first() {
                    return Err(invalid(format!(
                        "The trailer {name} was not declared in x-amz-trailer."
                    )));
                }
                e.digest.clone()
            }
            ChecksumSource::Trailer(alg) => {
                let name = alg.header_name();
                if let Some((other, _)) = trailers.iter().find(|(n, _)| n != name) {
                    return Err(invalid(format!(
                        "The trailer {other} was not declared in x-amz-trailer."
                    )));
                }
                let (_, value) = trailers.iter().find(|(n, _)| n == name).ok_or_else(|| {
                    invalid(format!(
                        "The trailer {name} declared in x-amz-trailer was not sent."
                    ))
                })?;
                alg.decode_value(value).ok_or_else(|| {
                    invalid(format!("Value for {name} trailing header is invalid."))
                })?
            }
        };
        if let Some(c) = self.checksum.take() {
            let alg = c.algorithm();
            let digest = c.finalize();
            if digest != expected {
                return Err(alg.mismatch_error());
            }
            self.verified.set(alg, &digest);
        }
        Ok(())
    }

    fn fail(&mut self, e: S3Error) -> Poll<Option<std::io::Result<Bytes>>> {
        tracing::debug!(code = e.code.code(), message = %e.message, "request body rejected");
        self.finished = true;
        self.pending = Bytes::new();
        Poll::Ready(Some(Err(std::io::Error::other(e))))
    }
}

impl<S> Stream for VerifiedBody<S>
where
    S: Stream<Item = std::io::Result<Bytes>>,
{
    type Item = std::io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // `inner` is boxed, so `VerifiedBody` is `Unpin`.
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        loop {
            match this.next_data() {
                Ok(Some(data)) => return Poll::Ready(Some(Ok(data))),
                Ok(None) => {}
                Err(e) => return this.fail(e),
            }
            match ready!(this.inner.as_mut().poll_next(cx)) {
                Some(Ok(bytes)) => this.pending = bytes,
                Some(Err(e)) => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(e)));
                }
                None => {
                    return match this.finish() {
                        Ok(()) => {
                            this.finished = true;
                            Poll::Ready(None)
                        }
                        Err(e) => this.fail(e),
                    }
                }
            }
        }
    }
}
