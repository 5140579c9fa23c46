//! The one codec of every internode message (quinn-proto's `coding::Codec` is the model): a type
//! that crosses the wire implements [`Codec`], and a message is its fields' encodings in order.
//!
//! One byte order, one framing, one error type, for the drive protocol ([`crate::drive_proto`]),
//! the verbs data plane's requests, the lock service and the node info (`quarry-node`), and the
//! payloads of the control frames themselves (error frames, bulk answers' lengths):
//!
//! | type | bytes |
//! |---|---|
//! | `u8`, `u16`, `u32`, `u64`, `i64` | big-endian, fixed width |
//! | `bool` | one byte, 0 or 1 (anything else is an error) |
//! | `Uuid`, `[u8; N]` | the raw bytes, fixed width |
//! | `String`, `Bytes` | length (u32 BE) then the bytes; a `String` must be UTF-8 |
//! | `Option<T>` | 0, or 1 then `T` |
//! | `Vec<T>` | count (u32 BE) then the items |
//! | `BTreeMap<K, V>` | count (u32 BE) then each key and its value, in key order |
//!
//! A message starts with its service's version byte ([`get_version`]), checked before anything
//! else is read. Which version of the whole protocol two nodes speak is settled once, in the
//! handshake ([`crate::auth::HS_VERSION`]): a peer of another version is refused there, so no
//! message of it is ever decoded with the wrong layout.
//!
//! Decoding never trusts a length: every length and count is checked against the bytes that are
//! actually there before anything is allocated (a count also against the smallest encoding of an
//! item, [`Codec::MIN_LEN`], and preallocation is capped), so garbage is a [`CodecError`], never a
//! panic or a large allocation. Decoding from a [`Bytes`] is zero-copy for byte strings
//! ([`Buf::copy_to_bytes`] of `Bytes` is a slice of it).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

/// At most this many items are reserved up front when decoding a list: a count is checked only
/// against the minimum wire size of an item, and an in-memory item can be far larger (a walk
/// entry ~300 bytes for 5 on the wire), so reserving `count` would let a 4 MiB frame reserve
/// hundreds of MB.
pub const PREALLOC_ITEMS: usize = 1024;

/// A value with a wire encoding.
pub trait Codec: Sized {
    /// The fewest bytes any value of the type encodes to (at least 1): a list's count is checked
    /// against `count * MIN_LEN` bytes being there before any item is decoded.
    const MIN_LEN: usize = 1;

    /// Appends the value's bytes.
    fn encode<B: BufMut>(&self, buf: &mut B);

    /// Reads a value from the front of `buf`, advancing it past what was read.
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError>;
}

/// Every way an internode message can be malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("message is truncated: {need} more bytes needed, {have} left")]
    Truncated { need: usize, have: usize },
    #[error("unsupported {what} version {got} (this node speaks version {supported})")]
    UnsupportedVersion {
        what: &'static str,
        got: u8,
        supported: u8,
    },
    #[error("unknown {what} {value}")]
    Unknown { what: &'static str, value: u64 },
    #[error("{what} is not UTF-8")]
    BadUtf8 { what: &'static str },
    #[error("{0} bytes after the end of the message")]
    Trailing(usize),
    #[error("{what} {value} is out of range ({min} to {max})")]
    OutOfRange {
        what: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("{what}: {why}")]
    Invalid { what: &'static str, why: String },
}

/// `buf` holds at least `n` more bytes.
pub fn need<B: Buf>(buf: &B, n: usize) -> Result<(), CodecError> {
    let have = buf.remaining();
    if have < n {
        return Err(CodecError::Truncated { need: n, have });
    }
    Ok(())
}

/// quinn-style reading: `buf.get_value::<T>()`.
pub trait BufExt: Buf + Sized {
    fn get_value<T: Codec>(&mut self) -> Result<T, CodecError> {
        T::decode(self)
    }
}
impl<B: Buf> BufExt for B {}

/// quinn-style writing: `buf.put_value(&value)`.
pub trait BufMutExt: BufMut + Sized {
    fn put_value<T: Codec>(&mut self, value: &T) {
        value.encode(self)
    }
}
impl<B: BufMut> BufMutExt for B {}

/// Writes a service's version byte.
pub fn put_version<B: BufMut>(buf: &mut B, version: u8) {
    buf.put_u8(version);
}

/// Reads a service's version byte: anything but `supported` is
/// [`CodecError::UnsupportedVersion`] naming `what`.
pub fn get_version<B: Buf>(
    buf: &mut B,
    what: &'static str,
    supported: u8,
) -> Result<(), CodecError> {
    match u8::decode(buf)? {
        v if v == supported => Ok(()),
        got => Err(CodecError::UnsupportedVersion {
            what,
            got,
            supported,
        }),
    }
}

/// The end of a message: any byte left is [`CodecError::Trailing`].
pub fn finish<B: Buf>(buf: &B) -> Result<(), CodecError> {
    match buf.remaining() {
        0 => Ok(()),
        n => Err(CodecError::Trailing(n)),
    }
}

/// A message of a service: its version byte, then `value`.
pub fn versioned<T: Codec>(version: u8, value: &T) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    put_version(&mut b, version);
    value.encode(&mut b);
    b.freeze()
}

/// Inverse of [`versioned`]: the version (anything but `supported` is
/// [`CodecError::UnsupportedVersion`] naming `what`), exactly one `T`, nothing after it.
pub fn from_versioned<T: Codec, B: Buf>(
    what: &'static str,
    supported: u8,
    mut buf: B,
) -> Result<T, CodecError> {
    get_version(&mut buf, what, supported)?;
    from_bytes(buf)
}

/// `value` as a message of its own.
pub fn to_bytes<T: Codec>(value: &T) -> Bytes {
    let mut b = BytesMut::new();
    value.encode(&mut b);
    b.freeze()
}

/// `buf` as exactly one `T` (trailing bytes are an error).
pub fn from_bytes<T: Codec, B: Buf>(mut buf: B) -> Result<T, CodecError> {
    let v = T::decode(&mut buf)?;
    finish(&buf)?;
    Ok(v)
}

/// A length or count for the wire. Every message travels in a frame far below 4 GiB
/// ([`crate::wire::DEFAULT_MAX_PAYLOAD`]), so it always fits; a larger one is a bug.
fn wire_len(n: usize) -> u32 {
    debug_assert!(
        u32::try_from(n).is_ok(),
        "a field of {n} bytes in a message"
    );
    n as u32
}

/// A length or count read from the wire, checked against the bytes left (each unit taking at
/// least `unit` bytes).
fn get_len<B: Buf>(buf: &mut B, unit: usize) -> Result<usize, CodecError> {
    let n = u32::decode(buf)? as usize;
    need(buf, n.saturating_mul(unit))?;
    Ok(n)
}

/// Writes the length prefix of a byte string of `len` bytes, without the bytes: for a sender that
/// sends the bytes on their own (a bulk frame after the control frame), so that prefix and bytes
/// together are exactly the encoding of the `Bytes`.
pub fn put_bytes_len<B: BufMut>(buf: &mut B, len: u32) {
    buf.put_u32(len);
}

macro_rules! int_codec {
    ($($t:ty => $put:ident, $get:ident;)*) => {$(
        impl Codec for $t {
            const MIN_LEN: usize = std::mem::size_of::<$t>();
            fn encode<B: BufMut>(&self, buf: &mut B) {
                buf.$put(*self);
            }
            fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
                need(buf, std::mem::size_of::<$t>())?;
                Ok(buf.$get())
            }
        }
    )*};
}

int_codec! {
    u8 => put_u8, get_u8;
    u16 => put_u16, get_u16;
    u32 => put_u32, get_u32;
    u64 => put_u64, get_u64;
    i64 => put_i64, get_i64;
}

impl Codec for bool {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(*self as u8);
    }
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
        match u8::decode(buf)? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(CodecError::Unknown {
                what: "bool value",
                value: tag.into(),
            }),
        }
    }
}

impl<const N: usize> Codec for [u8; N] {
    const MIN_LEN: usize = if N == 0 { 1 } else { N };
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_slice(self);
    }
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
        need(buf, N)?;
        let mut a = [0u8; N];
        buf.copy_to_slice(&mut a);
        Ok(a)
    }
}

impl Codec for Uuid {
    const MIN_LEN: usize = 16;
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_slice(self.as_bytes());
    }
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
        Ok(Uuid::from_bytes(<[u8; 16]>::decode(buf)?))
    }
}

impl Codec for Bytes {
    const MIN_LEN: usize = 4;
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u32(wire_len(self.len()));
        buf.put_slice(self);
    }
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
        let n = get_len(buf, 1)?;
        Ok(buf.copy_to_bytes(n))
    }
}

/// Encodes a byte string from a slice (the same bytes as the `Bytes` holding it).
pub fn put_bytes<B: BufMut>(buf: &mut B, v: &[u8]) {
    buf.put_u32(wire_len(v.len()));
    buf.put_slice(v);
}

impl Codec for String {
    const MIN_LEN: usize = 4;
    fn encode<B: BufMut>(&self, buf: &mut B) {
        put_bytes(buf, self.as_bytes());
    }
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
        let n = get_len(buf, 1)?;
        let mut v = vec![0u8; n];
        buf.copy_to_slice(&mut v);
        String::from_utf8(v).map_err(|_| CodecError::BadUtf8 {
            what: "a string field",
        })
    }
}

impl<T: Codec> Codec for Option<T> {
    fn encode<B: BufMut>(&self, buf: &mut B) {
        match self {
            None => buf.put_u8(0),
            Some(v) => {
                buf.put_u8(1);
                v.encode(buf);
            }
        }
    }
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
        match u8::decode(buf)? {
            0 => Ok(None),
            1 => T::decode(buf).map(Some),
            tag => Err(CodecError::Unknown {
                what: "option tag",
                value: tag.into(),
            }),
        }
    }
}

impl<T: Codec> Codec for Vec<T> {
    const MIN_LEN: usize = 4;
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u32(wire_len(self.len()));
        for v in self {
            v.encode(buf);
        }
    }
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
        let n = get_len(buf, T::MIN_LEN.max(1))?;
        let mut v = Vec::with_capacity(n.min(PREALLOC_ITEMS));
        for _ in 0..n {
            v.push(T::decode(buf)?);
        }
        Ok(v)
    }
}

/// A map as its entry count (u32), then each key and value, in key order.
impl<K: Codec + Ord, V: Codec> Codec for std::collections::BTreeMap<K, V> {
    const MIN_LEN: usize = 4;
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u32(wire_len(self.len()));
        for (k, v) in self {
            k.encode(buf);
            v.encode(buf);
        }
    }
    fn decode<B: Buf>(buf: &mut B) -> Result<Self, CodecError> {
        let n = get_len(buf, K::MIN_LEN.max(1) + V::MIN_LEN.max(1))?;
        let mut m = std::collections::BTreeMap::new();
        for _ in 0..n {
            let k = K::decode(buf)?;
            let v = V::decode(buf)?;
            m.insert(k, v);
        }
        Ok(m)
    }
}

/// Implements [`Codec`] for a struct as its fields in the order given.
#[macro_export]
macro_rules! codec_struct {
    ($t:ty { $($f:ident),+ $(,)? }) => {
        impl $crate::codec::Codec for $t {
            fn encode<B: ::bytes::BufMut>(&self, buf: &mut B) {
                $($crate::codec::Codec::encode(&self.$f, buf);)+
            }
            fn decode<B: ::bytes::Buf>(buf: &mut B) -> Result<Self, $crate::codec::CodecError> {
                Ok(Self { $($f: $crate::codec::Codec::decode(buf)?,)+ })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Sample {
        a: u8,
        b: u16,
        c: u32,
        d: u64,
        e: i64,
        f: bool,
        g: Uuid,
        h: [u8; 32],
        s: String,
        bytes: Bytes,
        o: Option<String>,
        v: Vec<Option<u16>>,
    }
    codec_struct!(Sample {
        a,
        b,
        c,
        d,
        e,
        f,
        g,
        h,
        s,
        bytes,
        o,
        v
    });

    fn sample() -> impl Strategy<Value = Sample> {
        (
            (
                any::<u8>(),
                any::<u16>(),
                any::<u32>(),
                any::<u64>(),
                any::<i64>(),
                any::<bool>(),
            ),
            (any::<u128>(), any::<[u8; 32]>(), ".{0,40}"),
            (
                proptest::collection::vec(any::<u8>(), 0..64),
                proptest::option::of(".{0,8}"),
                proptest::collection::vec(proptest::option::of(any::<u16>()), 0..8),
            ),
        )
            .prop_map(|((a, b, c, d, e, f), (g, h, s), (bytes, o, v))| Sample {
                a,
                b,
                c,
                d,
                e,
                f,
                g: Uuid::from_u128(g),
                h,
                s,
                bytes: Bytes::from(bytes),
                o,
                v,
            })
    }

    #[test]
    fn the_layout_is_big_endian_with_u32_lengths() {
        let mut b = BytesMut::new();
        b.put_value(&0x0102u16);
        b.put_value(&0x03040506u32);
        b.put_value(&"hé".to_string());
        b.put_value(&Some(true));
        b.put_value(&None::<u8>);
        b.put_value(&vec![7u8, 8]);
        b.put_value(&Bytes::from_static(b"xy"));
        assert_eq!(
            &b[..],
            &[
                1, 2, 3, 4, 5, 6, 0, 0, 0, 3, b'h', 0xc3, 0xa9, 1, 1, 0, 0, 0, 0, 2, 7, 8, 0, 0, 0,
                2, b'x', b'y'
            ]
        );
    }

    #[test]
    fn byte_strings_decode_as_slices_of_the_message() {
        let msg = to_bytes(&Bytes::from_static(b"shard bytes"));
        let base = msg.as_ptr() as usize;
        let got: Bytes = from_bytes(msg.clone()).unwrap();
        assert_eq!(&got[..], b"shard bytes");
        assert_eq!(got.as_ptr() as usize, base + 4, "copied");
    }

    #[test]
    fn each_defect_has_its_error() {
        assert_eq!(
            from_bytes::<bool, _>(&[2u8][..]),
            Err(CodecError::Unknown {
                what: "bool value",
                value: 2
            })
        );
        assert_eq!(
            from_bytes::<Option<u8>, _>(&[3u8][..]),
            Err(CodecError::Unknown {
                what: "option tag",
                value: 3
            })
        );
        assert!(matches!(
            from_bytes::<String, _>(&[0u8, 0, 0, 1, 0xff][..]),
            Err(CodecError::BadUtf8 { .. })
        ));
        assert_eq!(
            from_bytes::<u16, _>(&[0u8, 1, 2][..]),
            Err(CodecError::Trailing(1))
        );
        assert_eq!(
            from_bytes::<u32, _>(&[0u8, 1][..]),
            Err(CodecError::Truncated { need: 4, have: 2 })
        );
        let mut v = &[9u8, 1][..];
        assert_eq!(
            get_version(&mut v, "test protocol", 2),
            Err(CodecError::UnsupportedVersion {
                what: "test protocol",
                got: 9,
                supported: 2
            })
        );
        // A length or count larger than what is there is refused before allocating.
        assert_eq!(
            from_bytes::<Bytes, _>(&[0xffu8, 0xff, 0xff, 0xff, 1][..]),
            Err(CodecError::Truncated {
                need: u32::MAX as usize,
                have: 1
            })
        );
        assert_eq!(
            from_bytes::<Vec<u64>, _>(&[0u8, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9][..]),
            Err(CodecError::Truncated { need: 16, have: 9 })
        );
    }

    proptest! {
        #[test]
        fn round_trip(s in sample()) {
            let enc = to_bytes(&s);
            prop_assert_eq!(from_bytes::<Sample, _>(enc.clone()).unwrap(), s.clone());
            // From a slice too (copying), and through a chained buffer.
            prop_assert_eq!(from_bytes::<Sample, _>(&enc[..]).unwrap(), s.clone());
            let (a, b) = enc.split_at(enc.len() / 2);
            prop_assert_eq!(from_bytes::<Sample, _>(a.chain(b)).unwrap(), s);
        }

        #[test]
        fn every_truncation_is_an_error(s in sample()) {
            let enc = to_bytes(&s);
            for n in 0..enc.len() {
                prop_assert!(from_bytes::<Sample, _>(enc.slice(..n)).is_err(), "{}", n);
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = from_bytes::<Sample, _>(&bytes[..]);
            let _ = from_bytes::<Vec<String>, _>(&bytes[..]);
            let _ = from_bytes::<Vec<Option<Bytes>>, _>(Bytes::from(bytes));
        }
    }
}
