//! Control-plane frames: pure encode/decode, no IO, no async (quinn-proto style).
//!
//! Every frame on an established connection is
//!
//! ```text
//! offset size
//!      0    4  magic "QRPC"
//!      4    1  protocol version (1)
//!      5    1  frame kind (FrameKind)
//!      6    2  flags (u16 BE; [`FLAG_BULK`], [`FLAG_BULK_FRAME`] and [`FLAG_BULK_BODY`], any
//!                other set bit is refused)
//!      8    8  request id (u64 BE; a response carries the id of its request)
//!     16    2  method (u16 BE; the request's method, echoed in its response)
//!     18    4  payload length (u32 BE; checked against the configured maximum before anything is read)
//!     22    n  payload
//!   22+n   32  tag = HMAC-SHA256(direction key, sequence (u64 BE) || header || payload)
//! ```
//!
//! The key is the per-connection, per-direction session key agreed by the handshake ([`crate::auth`]);
//! the sequence number is implicit (frames sent so far in that direction, starting at 0), so a frame
//! cannot be replayed, dropped, reordered or reflected back to its sender without the tag failing.
//! A [`Sealer`] produces frames and an [`Opener`] checks them; both are plain state machines over byte
//! buffers, so they can be driven in memory, fuzzed and property-tested.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::codec::{BufExt, BufMutExt};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// First four bytes of every control frame.
pub const MAGIC: [u8; 4] = *b"QRPC";
/// The control-frame version this code speaks.
pub const VERSION: u8 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 22;
/// Bytes of the trailing authentication tag.
pub const TAG_LEN: usize = 32;
/// On a request: "send the answer's bytes as a bulk frame" ([`crate::data`]). On a response: the
/// payload is the answer's length (u64 BE) and a bulk frame carrying the answer follows at once
/// on the same connection (the data plane's TCP backend, [`crate::dataplane`]; [`encode_bulk_len`]).
pub const FLAG_BULK: u16 = 0x0100;
/// On a request: a bulk frame ([`crate::data`]) with the request id as transfer id follows at once
/// on the same connection and carries the rest of the request's payload, which the server reads
/// straight into a pooled buffer (the data plane's shard appends).
pub const FLAG_BULK_BODY: u16 = 0x0200;
/// Flag bits defined by this version: any other bit is an error, never ignored.
/// With [`FLAG_BULK`], on a request: "the answer is one bitrot frame `[hash | chunk]`: tag only
/// its hash" (a frame answer, [`crate::data`]); the caller checks the chunk against the hash. On
/// the response header: the bulk frame that follows is such an answer.
pub const FLAG_BULK_FRAME: u16 = 0x0400;
pub const KNOWN_FLAGS: u16 = FLAG_BULK | FLAG_BULK_BODY | FLAG_BULK_FRAME;
/// Default bound on one frame's payload: the control plane carries metadata, not shard data.
pub const DEFAULT_MAX_PAYLOAD: u32 = 4 << 20;
/// Longest error message carried by an error frame; longer messages are cut at a char boundary.
pub const MAX_ERROR_MESSAGE: usize = 1024;

type HmacSha256 = Hmac<Sha256>;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A call: `method` says what to do, the payload is its argument.
    Request = 1,
    /// The successful answer to the request with the same id.
    Response = 2,
    /// The failed answer to the request with the same id; payload per [`encode_error`].
    Error = 3,
    /// Liveness probe, answered by the server itself with a [`FrameKind::Pong`].
    Ping = 4,
    /// Answer to a [`FrameKind::Ping`].
    Pong = 5,
}

impl FrameKind {
    fn from_u8(b: u8) -> Result<FrameKind, WireError> {
        Ok(match b {
            1 => FrameKind::Request,
            2 => FrameKind::Response,
            3 => FrameKind::Error,
            4 => FrameKind::Ping,
            5 => FrameKind::Pong,
            other => return Err(WireError::UnknownKind(other)),
        })
    }
}

/// Every way a frame can be wrong. Each one closes the connection it arrived on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("bad frame magic {0:02x?}: not a Quarry internode frame")]
    BadMagic([u8; 4]),
    #[error("unsupported frame version {got} (this node speaks version {VERSION})")]
    UnsupportedVersion { got: u8 },
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("unknown frame flags {0:#06x}")]
    UnknownFlags(u16),
    #[error("frame payload of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge { len: u64, max: u32 },
    #[error("frame authentication failed (bad MAC): corrupted, replayed or forged")]
    BadMac,
    #[error("truncated frame: {have} of {need} bytes")]
    Truncated { need: usize, have: usize },
    #[error("{0} unexpected bytes after the frame")]
    TrailingBytes(usize),
    #[error("malformed error-frame payload")]
    MalformedError,
}

/// The fixed header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameKind,
    pub flags: u16,
    pub request_id: u64,
    pub method: u16,
    pub payload_len: u32,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.kind as u8;
        out[6..8].copy_from_slice(&self.flags.to_be_bytes());
        out[8..16].copy_from_slice(&self.request_id.to_be_bytes());
        out[16..18].copy_from_slice(&self.method.to_be_bytes());
        out[18..22].copy_from_slice(&self.payload_len.to_be_bytes());
        out
    }

    /// Parses and checks a header from the first [`HEADER_LEN`] bytes of `buf`. Every field is
    /// checked (magic first, so garbage is named as such), and the length against `max_payload`, so
    /// a reader can size its buffer from the result without trusting the peer.
    pub fn decode(buf: &[u8], max_payload: u32) -> Result<Header, WireError> {
        if buf.len() < 4 {
            // Check what magic bytes there are, so garbage is refused as early as possible.
            if !MAGIC.starts_with(buf) {
                let mut got = [0u8; 4];
                got[..buf.len()].copy_from_slice(buf);
                return Err(WireError::BadMagic(got));
            }
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        let mut magic = [0u8; 4];
        magic.copy_from_slice(&buf[0..4]);
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        if buf.len() < HEADER_LEN {
            if buf.len() > 4 && buf[4] != VERSION {
                return Err(WireError::UnsupportedVersion { got: buf[4] });
            }
            return Err(WireError::Truncated {
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        let mut b = &buf[4..HEADER_LEN];
        let version = b.get_u8();
        if version != VERSION {
            return Err(WireError::UnsupportedVersion { got: version });
        }
        let kind = FrameKind::from_u8(b.get_u8())?;
        let flags = b.get_u16();
        if flags & !KNOWN_FLAGS != 0 {
            return Err(WireError::UnknownFlags(flags));
        }
        let request_id = b.get_u64();
        let method = b.get_u16();
        let payload_len = b.get_u32();
        if payload_len > max_payload {
            return Err(WireError::TooLarge {
                len: payload_len as u64,
                max: max_payload,
            });
        }
        Ok(Header {
            kind,
            flags,
            request_id,
            method,
            payload_len,
        })
    }

    /// Bytes of the whole frame this header starts.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.payload_len as usize + TAG_LEN
    }
}

/// One decoded, authenticated frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameKind,
    pub flags: u16,
    pub request_id: u64,
    pub method: u16,
    pub payload: Bytes,
}

impl Frame {
    pub fn request(request_id: u64, method: u16, payload: Bytes) -> Frame {
        Frame {
            kind: FrameKind::Request,
            flags: 0,
            request_id,
            method,
            payload,
        }
    }

    pub fn response(request_id: u64, method: u16, payload: Bytes) -> Frame {
        Frame {
            kind: FrameKind::Response,
            flags: 0,
            request_id,
            method,
            payload,
        }
    }

    /// An error answer carrying `code` and `message` (see [`encode_error`]).
    pub fn error(request_id: u64, method: u16, code: u16, message: &str) -> Frame {
        Frame {
            kind: FrameKind::Error,
            flags: 0,
            request_id,
            method,
            payload: encode_error(code, message),
        }
    }

    pub fn ping(request_id: u64) -> Frame {
        Frame {
            kind: FrameKind::Ping,
            flags: 0,
            request_id,
            method: 0,
            payload: Bytes::new(),
        }
    }

    pub fn pong(request_id: u64) -> Frame {
        Frame {
            kind: FrameKind::Pong,
            flags: 0,
            request_id,
            method: 0,
            payload: Bytes::new(),
        }
    }
}

fn keyed(key: &[u8; 32]) -> HmacSha256 {
    // HMAC takes keys of any length: this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(key).expect("HMAC accepts any key length")
}

/// The sending half of a connection's framing: numbers and authenticates outgoing frames.
pub struct Sealer {
    mac: HmacSha256,
    seq: u64,
    max_payload: u32,
}

impl Sealer {
    pub fn new(key: &[u8; 32], max_payload: u32) -> Sealer {
        Sealer {
            mac: keyed(key),
            seq: 0,
            max_payload,
        }
    }

    /// Header and tag of `frame`, to be written as `header || payload || tag` (the payload itself is
    /// not copied). Advances the sequence number.
    pub fn seal(&mut self, frame: &Frame) -> Result<([u8; HEADER_LEN], [u8; TAG_LEN]), WireError> {
        let len = frame.payload.len();
        if len as u64 > self.max_payload as u64 {
            return Err(WireError::TooLarge {
                len: len as u64,
                max: self.max_payload,
            });
        }
        if frame.flags & !KNOWN_FLAGS != 0 {
            return Err(WireError::UnknownFlags(frame.flags));
        }
        let header = Header {
            kind: frame.kind,
            flags: frame.flags,
            request_id: frame.request_id,
            method: frame.method,
            payload_len: len as u32,
        }
        .encode();
        let mut mac = self.mac.clone();
        mac.update(&self.seq.to_be_bytes());
        mac.update(&header);
        mac.update(&frame.payload);
        let tag: [u8; TAG_LEN] = mac.finalize().into_bytes().into();
        self.seq += 1;
        Ok((header, tag))
    }

    /// Appends the whole sealed frame to `out`.
    pub fn seal_into(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), WireError> {
        let (header, tag) = self.seal(frame)?;
        out.reserve(HEADER_LEN + frame.payload.len() + TAG_LEN);
        out.put_slice(&header);
        out.put_slice(&frame.payload);
        out.put_slice(&tag);
        Ok(())
    }
}

/// Result of offering buffered bytes to an [`Opener`].
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A complete, authenticated frame (its bytes were taken from the buffer).
    Frame(Frame),
    /// The buffer must hold at least this many bytes before the next frame can be decoded. The number
    /// is bounded by the maximum frame size: the header was checked before it was computed.
    Need(usize),
}

/// The receiving half of a connection's framing: checks and authenticates incoming frames.
pub struct Opener {
    mac: HmacSha256,
    seq: u64,
    max_payload: u32,
}

impl Opener {
    pub fn new(key: &[u8; 32], max_payload: u32) -> Opener {
        Opener {
            mac: keyed(key),
            seq: 0,
            max_payload,
        }
    }

    /// Checks the frame at the start of `buf`: `Ok(None)` when `buf` is a valid prefix that is too
    /// short, `Ok(Some((header, frame_len)))` when a whole frame is there and its tag is right.
    fn check(&self, buf: &[u8]) -> Result<Option<(Header, usize)>, WireError> {
        let header = match Header::decode(buf, self.max_payload) {
            Ok(h) => h,
            Err(WireError::Truncated { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let total = header.frame_len();
        if buf.len() < total {
            return Ok(None);
        }
        let body_end = HEADER_LEN + header.payload_len as usize;
        let mut mac = self.mac.clone();
        mac.update(&self.seq.to_be_bytes());
        mac.update(&buf[..body_end]);
        mac.verify_slice(&buf[body_end..total])
            .map_err(|_| WireError::BadMac)?;
        Ok(Some((header, total)))
    }

    fn need(&self, buf: &[u8]) -> usize {
        match Header::decode(buf, self.max_payload) {
            Ok(h) => h.frame_len(),
            Err(_) => HEADER_LEN,
        }
    }

    /// Decodes the frame at the start of `buf`, taking its bytes (no copy: the payload shares the
    /// buffer's allocation). Never allocates.
    pub fn open(&mut self, buf: &mut BytesMut) -> Result<Decoded, WireError> {
        match self.check(buf)? {
            None => Ok(Decoded::Need(self.need(buf))),
            Some((h, total)) => {
                self.seq += 1;
                let mut frame = buf.split_to(total);
                frame.advance(HEADER_LEN);
                frame.truncate(h.payload_len as usize);
                Ok(Decoded::Frame(Frame {
                    kind: h.kind,
                    flags: h.flags,
                    request_id: h.request_id,
                    method: h.method,
                    payload: frame.freeze(),
                }))
            }
        }
    }

    /// Decodes `buf` as exactly one frame: a short buffer is [`WireError::Truncated`], a long one
    /// [`WireError::TrailingBytes`]. The only allocation is the payload, at most the maximum.
    pub fn open_exact(&mut self, buf: &[u8]) -> Result<Frame, WireError> {
        match self.check(buf)? {
            None => Err(WireError::Truncated {
                need: self.need(buf),
                have: buf.len(),
            }),
            Some((_, total)) if total != buf.len() => {
                Err(WireError::TrailingBytes(buf.len() - total))
            }
            Some((h, total)) => {
                self.seq += 1;
                Ok(Frame {
                    kind: h.kind,
                    flags: h.flags,
                    request_id: h.request_id,
                    method: h.method,
                    payload: Bytes::copy_from_slice(&buf[HEADER_LEN..total - TAG_LEN]),
                })
            }
        }
    }
}

/// Payload of an error frame, in the internode codec ([`crate::codec`]):
/// `code (u16) | message (string: u32 length, UTF-8, at most MAX_ERROR_MESSAGE bytes)`.
pub fn encode_error(code: u16, message: &str) -> Bytes {
    let mut end = message.len().min(MAX_ERROR_MESSAGE);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = BytesMut::with_capacity(2 + 4 + end);
    out.put_value(&code);
    crate::codec::put_bytes(&mut out, &message.as_bytes()[..end]);
    out.freeze()
}

/// Inverse of [`encode_error`]. The message comes from the peer and ends up in logs and error
/// texts: its control characters (newlines, escape sequences) come out escaped (`\n`,
/// `\u{1b}`), so it cannot forge or garble a log line.
pub fn decode_error(payload: &[u8]) -> Result<(u16, String), WireError> {
    if payload.len() > 2 + 4 + MAX_ERROR_MESSAGE {
        return Err(WireError::MalformedError);
    }
    let (code, message): (u16, String) = {
        let mut b = payload;
        let code = b.get_value().map_err(|_| WireError::MalformedError)?;
        let message = crate::codec::from_bytes(b).map_err(|_| WireError::MalformedError)?;
        (code, message)
    };
    let mut out = String::with_capacity(message.len());
    for c in message.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Ok((code, out))
}

/// Payload of the response announcing a bulk answer ([`FLAG_BULK`]): the answer's length.
pub fn encode_bulk_len(len: u64) -> Bytes {
    crate::codec::to_bytes(&len)
}

/// Inverse of [`encode_bulk_len`].
pub fn decode_bulk_len(payload: &[u8]) -> Option<u64> {
    crate::codec::from_bytes(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: [u8; 32] = [7u8; 32];

    fn sealed(frame: &Frame) -> BytesMut {
        let mut out = BytesMut::new();
        Sealer::new(&KEY, DEFAULT_MAX_PAYLOAD)
            .seal_into(frame, &mut out)
            .unwrap();
        out
    }

    fn kind() -> impl Strategy<Value = FrameKind> {
        prop_oneof![
            Just(FrameKind::Request),
            Just(FrameKind::Response),
            Just(FrameKind::Error),
            Just(FrameKind::Ping),
            Just(FrameKind::Pong),
        ]
    }

    fn frame() -> impl Strategy<Value = Frame> {
        (
            kind(),
            any::<u64>(),
            any::<u16>(),
            proptest::collection::vec(any::<u8>(), 0..2048),
        )
            .prop_map(|(kind, request_id, method, payload)| Frame {
                kind,
                flags: 0,
                request_id,
                method,
                payload: Bytes::from(payload),
            })
    }

    #[test]
    fn header_layout_is_stable() {
        let f = Frame::request(0x0102030405060708, 0x0a0b, Bytes::from_static(b"xy"));
        let b = sealed(&f);
        assert_eq!(&b[..4], b"QRPC");
        assert_eq!(b[4], 1);
        assert_eq!(b[5], 1);
        assert_eq!(&b[6..8], &[0, 0]);
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[16..18], &[0x0a, 0x0b]);
        assert_eq!(&b[18..22], &[0, 0, 0, 2]);
        assert_eq!(&b[22..24], b"xy");
        assert_eq!(b.len(), HEADER_LEN + 2 + TAG_LEN);
    }

    #[test]
    fn each_defect_has_its_error() {
        let f = Frame::request(1, 2, Bytes::from_static(b"hello"));
        let good = sealed(&f);
        let open = |b: &[u8]| Opener::new(&KEY, DEFAULT_MAX_PAYLOAD).open_exact(b);
        assert_eq!(open(&good).unwrap(), f);

        let mut b = good.to_vec();
        b[0] = b'X';
        assert!(matches!(open(&b), Err(WireError::BadMagic(_))));
        let mut b = good.to_vec();
        b[4] = 2;
        assert_eq!(open(&b), Err(WireError::UnsupportedVersion { got: 2 }));
        let mut b = good.to_vec();
        b[5] = 9;
        assert_eq!(open(&b), Err(WireError::UnknownKind(9)));
        let mut b = good.to_vec();
        b[7] = 1;
        assert_eq!(open(&b), Err(WireError::UnknownFlags(1)));
        let mut b = good.to_vec();
        b[22] ^= 1;
        assert_eq!(open(&b), Err(WireError::BadMac));
        let mut b = good.to_vec();
        let last = b.len() - 1;
        b[last] ^= 1;
        assert_eq!(open(&b), Err(WireError::BadMac));
        assert!(matches!(
            open(&good[..good.len() - 1]),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(open(&good[..3]), Err(WireError::Truncated { .. })));
        let mut b = good.to_vec();
        b.push(0);
        assert_eq!(open(&b), Err(WireError::TrailingBytes(1)));
        // Another key: forged.
        assert_eq!(
            Opener::new(&[8u8; 32], DEFAULT_MAX_PAYLOAD).open_exact(&good),
            Err(WireError::BadMac)
        );
    }

    #[test]
    fn a_header_claiming_4_gib_is_refused_from_the_header_alone() {
        let h = Header {
            kind: FrameKind::Request,
            flags: 0,
            request_id: 1,
            method: 1,
            payload_len: u32::MAX,
        };
        let bytes = h.encode();
        assert_eq!(
            Header::decode(&bytes, 1 << 20),
            Err(WireError::TooLarge {
                len: u32::MAX as u64,
                max: 1 << 20
            })
        );
        let mut buf = BytesMut::from(&bytes[..]);
        assert!(matches!(
            Opener::new(&KEY, 1 << 20).open(&mut buf),
            Err(WireError::TooLarge { .. })
        ));
        // And the sender refuses to produce one.
        let f = Frame::request(1, 1, Bytes::from(vec![0u8; 1025]));
        assert!(matches!(
            Sealer::new(&KEY, 1024).seal(&f),
            Err(WireError::TooLarge {
                len: 1025,
                max: 1024
            })
        ));
    }

    #[test]
    fn replayed_or_reordered_frames_fail() {
        let mut s = Sealer::new(&KEY, DEFAULT_MAX_PAYLOAD);
        let mut a = BytesMut::new();
        let mut b = BytesMut::new();
        s.seal_into(&Frame::request(1, 1, Bytes::from_static(b"a")), &mut a)
            .unwrap();
        s.seal_into(&Frame::request(2, 1, Bytes::from_static(b"b")), &mut b)
            .unwrap();
        let mut o = Opener::new(&KEY, DEFAULT_MAX_PAYLOAD);
        assert!(o.open_exact(&a).is_ok());
        assert_eq!(o.open_exact(&a), Err(WireError::BadMac), "replay");
        let mut o = Opener::new(&KEY, DEFAULT_MAX_PAYLOAD);
        assert_eq!(o.open_exact(&b), Err(WireError::BadMac), "reorder");
    }

    #[test]
    fn streaming_open_reports_what_it_needs() {
        let f = Frame::response(5, 3, Bytes::from_static(b"payload"));
        let all = sealed(&f);
        let mut o = Opener::new(&KEY, DEFAULT_MAX_PAYLOAD);
        let mut buf = BytesMut::new();
        assert_eq!(o.open(&mut buf).unwrap(), Decoded::Need(HEADER_LEN));
        buf.extend_from_slice(&all[..10]);
        assert_eq!(o.open(&mut buf).unwrap(), Decoded::Need(HEADER_LEN));
        buf.extend_from_slice(&all[10..30]);
        assert_eq!(o.open(&mut buf).unwrap(), Decoded::Need(all.len()));
        buf.extend_from_slice(&all[30..]);
        buf.extend_from_slice(b"QR");
        assert_eq!(o.open(&mut buf).unwrap(), Decoded::Frame(f));
        assert_eq!(&buf[..], b"QR");
    }

    #[test]
    fn error_payloads() {
        let p = encode_error(42, "drive offline");
        assert_eq!(decode_error(&p).unwrap(), (42, "drive offline".to_string()));
        let long = "é".repeat(MAX_ERROR_MESSAGE);
        let (_, m) = decode_error(&encode_error(1, &long)).unwrap();
        assert!(m.len() <= MAX_ERROR_MESSAGE && long.starts_with(&m));
        // A peer's newlines and escape sequences come out escaped.
        let (_, m) =
            decode_error(&encode_error(1, "no such key a\nERROR forged\u{1b}[2J")).unwrap();
        assert_eq!(m, "no such key a\\nERROR forged\\u{1b}[2J");
        assert_eq!(decode_error(&[1]), Err(WireError::MalformedError));
        assert_eq!(
            decode_error(&[0, 1, 0, 0, 0, 1, 0xff]),
            Err(WireError::MalformedError)
        );
        // The layout: code, then the message as a codec string.
        assert_eq!(
            &encode_error(0x0102, "ab")[..],
            &[1, 2, 0, 0, 0, 2, b'a', b'b']
        );
        assert_eq!(decode_bulk_len(&encode_bulk_len(1 << 40)), Some(1 << 40));
        assert_eq!(decode_bulk_len(&[0; 7]), None);
    }

    proptest! {
        #[test]
        fn round_trip(frames in proptest::collection::vec(frame(), 1..8), split in any::<prop::sample::Index>()) {
            let mut s = Sealer::new(&KEY, DEFAULT_MAX_PAYLOAD);
            let mut wire = BytesMut::new();
            for f in &frames {
                s.seal_into(f, &mut wire).unwrap();
            }
            // Feed the stream in two pieces at an arbitrary point.
            let at = split.index(wire.len() + 1);
            let mut buf = BytesMut::from(&wire[..at]);
            let mut o = Opener::new(&KEY, DEFAULT_MAX_PAYLOAD);
            let mut got = Vec::new();
            loop {
                match o.open(&mut buf).unwrap() {
                    Decoded::Frame(f) => got.push(f),
                    Decoded::Need(n) => {
                        prop_assert!(n > buf.len());
                        prop_assert!(n <= HEADER_LEN + DEFAULT_MAX_PAYLOAD as usize + TAG_LEN);
                        break;
                    }
                }
            }
            buf.extend_from_slice(&wire[at..]);
            while let Decoded::Frame(f) = o.open(&mut buf).unwrap() {
                got.push(f);
            }
            prop_assert_eq!(got, frames);
            prop_assert!(buf.is_empty());
        }

        #[test]
        fn any_flipped_bit_is_refused(f in frame(), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut b = sealed(&f).to_vec();
            let i = pos.index(b.len());
            b[i] ^= 1 << bit;
            prop_assert!(Opener::new(&KEY, DEFAULT_MAX_PAYLOAD).open_exact(&b).is_err());
            let mut buf = BytesMut::from(&b[..]);
            let streamed = Opener::new(&KEY, DEFAULT_MAX_PAYLOAD).open(&mut buf);
            prop_assert!(!matches!(streamed, Ok(Decoded::Frame(_))), "corrupted frame accepted");
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let max = 256u32;
            let mut o = Opener::new(&KEY, max);
            if let Ok(f) = o.open_exact(&bytes) {
                prop_assert!(f.payload.len() <= max as usize);
            }
            let mut buf = BytesMut::from(&bytes[..]);
            match Opener::new(&KEY, max).open(&mut buf) {
                Ok(Decoded::Need(n)) => prop_assert!(n <= HEADER_LEN + max as usize + TAG_LEN),
                Ok(Decoded::Frame(f)) => prop_assert!(f.payload.len() <= max as usize),
                Err(_) => {}
            }
            let _ = decode_error(&bytes);
        }

        #[test]
        fn valid_header_with_arbitrary_rest_never_panics(
            kind in 0u8..8, flags in any::<u16>(), len in any::<u32>(),
            rest in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let max = 200u32;
            let mut b = Vec::new();
            b.extend_from_slice(&MAGIC);
            b.push(VERSION);
            b.push(kind);
            b.extend_from_slice(&flags.to_be_bytes());
            b.extend_from_slice(&9u64.to_be_bytes());
            b.extend_from_slice(&1u16.to_be_bytes());
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&rest);
            let mut buf = BytesMut::from(&b[..]);
            match Opener::new(&KEY, max).open(&mut buf) {
                Ok(Decoded::Need(n)) => prop_assert!(n <= HEADER_LEN + max as usize + TAG_LEN),
                Ok(Decoded::Frame(_)) => prop_assert!(false, "forged frame accepted"),
                Err(e) => {
                    let expected = matches!(e, WireError::TooLarge { .. } | WireError::UnknownKind(_) | WireError::UnknownFlags(_));
                    prop_assert!(len <= max || expected, "unexpected error {:?}", e);
                }
            }
        }
    }
}
