//! Fuzz-style robustness of every internode decoder a peer's bytes reach: the RPC frame header and
//! [`Opener`] (crates/net wire), the handshake messages (auth), the bulk-frame header (data), the
//! payloads of error frames, the drive protocol's `decode_request` / `decode_response`, the verbs
//! data plane's messages, and the internode codec's values themselves. Arbitrary and structured-random
//! inputs; the properties: no panic, and no allocation larger than [`ALLOC_LIMIT`] whatever a
//! length or count field claims (a 4-byte length claiming 4 GiB is refused before allocating).
//!
//! This binary installs a counting global allocator that records the largest single allocation
//! request, so "bounded allocation" is measured, not assumed.
//!
//! Cases per property: [`DEFAULT_CASES`]; run longer by hand with `PROPTEST_CASES=100000`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use quarry_net::auth::{decode_message, HS_MAGIC, HS_VERSION};
use quarry_net::codec::{self, Codec};
use quarry_net::data::{BulkHeader, BULK_HEADER_LEN};
use quarry_net::drive_proto::{decode_request, decode_response, DRIVE_PROTO_VERSION};
use quarry_net::verbs_dataplane::{
    decode_append, decode_connect, decode_connected, decode_read, decode_read_answer,
    PROTOCOL_VERSION as VERBS_VERSION,
};
use quarry_net::wire::{
    Decoded, Header, Opener, DEFAULT_MAX_PAYLOAD, HEADER_LEN, MAGIC, TAG_LEN, VERSION,
};

/// Records the largest allocation request made by this test binary.
struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// No decoder may allocate more than this for any input (inputs here are at most a few
/// hundred KiB; the largest legitimate frame is `DEFAULT_MAX_PAYLOAD` = 4 MiB).
const ALLOC_LIMIT: usize = 16 << 20;

const DEFAULT_CASES: u32 = 2000;

fn cases() -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[track_caller]
fn assert_alloc_bounded(what: &str) {
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest <= ALLOC_LIMIT,
        "{what}: an allocation of {largest} bytes (limit {ALLOC_LIMIT})"
    );
}

const KEY: [u8; 32] = [7; 32];

/// A frame header with chosen fields (the rest valid).
fn header_bytes(kind: u8, flags: u16, method: u16, payload_len: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN);
    b.extend_from_slice(&MAGIC);
    b.put_u8(VERSION);
    b.put_u8(kind);
    b.put_u16(flags);
    b.put_u64(42);
    b.put_u16(method);
    b.put_u32(payload_len);
    b
}

#[test]
fn a_frame_claiming_4_gib_is_refused_before_allocating() {
    for kind in 0u8..8 {
        let h = header_bytes(kind, 0, 1, u32::MAX);
        assert!(Header::decode(&h, DEFAULT_MAX_PAYLOAD).is_err());
        let mut o = Opener::new(&KEY, DEFAULT_MAX_PAYLOAD);
        let mut buf = BytesMut::from(&h[..]);
        match o.open(&mut buf) {
            Err(_) => {}
            Ok(Decoded::Need(n)) => panic!("kind {kind}: 4 GiB header asks for {n} more bytes"),
            Ok(Decoded::Frame(f)) => panic!("kind {kind}: 4 GiB header gave a frame: {f:?}"),
        }
        // Just over the limit is refused too; at the limit is a bounded Need.
        let h = header_bytes(kind, 0, 1, DEFAULT_MAX_PAYLOAD + 1);
        assert!(Header::decode(&h, DEFAULT_MAX_PAYLOAD).is_err());
    }
    let h = header_bytes(1, 0, 1, DEFAULT_MAX_PAYLOAD);
    if let Ok(Decoded::Need(n)) =
        Opener::new(&KEY, DEFAULT_MAX_PAYLOAD).open(&mut BytesMut::from(&h[..]))
    {
        assert_eq!(n, HEADER_LEN + DEFAULT_MAX_PAYLOAD as usize + TAG_LEN);
    }
    assert_alloc_bounded("4 GiB frame header");
}

/// A drive-protocol list whose count claims as many items as the payload could hold at the
/// minimum item size: the decoder must fail on the first bad item without reserving room for
/// millions of in-memory items (each far larger than its minimum wire size).
#[test]
fn drive_proto_counts_do_not_amplify_allocation() {
    // Response tags with a count (Volumes 2, Walk 8, Parts 10, Uploads 11); a 4 MiB payload.
    let payload_len = DEFAULT_MAX_PAYLOAD as usize;
    // Minimum wire sizes per item, as the decoder checks them (`count(min_item)`).
    for (tag, min_item) in [(2u8, 12usize), (8, 5), (10, 4), (11, 4)] {
        let mut b = BytesMut::with_capacity(payload_len);
        b.put_u8(DRIVE_PROTO_VERSION);
        b.put_u8(tag);
        b.put_u32(u32::MAX);
        b.resize(payload_len, 0xee);
        let _ = decode_response(b.freeze());
        // Smaller count that the remaining bytes can "hold" at the minimum item size.
        let mut b = BytesMut::with_capacity(payload_len);
        b.put_u8(DRIVE_PROTO_VERSION);
        b.put_u8(tag);
        b.put_u32(((payload_len - 6) / min_item) as u32);
        b.resize(payload_len, 0xee);
        let _ = decode_response(b.freeze());
        assert_alloc_bounded(&format!("response tag {tag} with a huge count"));
    }
    // Requests with lists (every method, same idea).
    // StageParts: three strings (empty: a zero length each), then the part count.
    for method in 0u16..64 {
        for count_at in [3usize, 7, 11, 15] {
            let mut b = BytesMut::with_capacity(payload_len);
            b.put_u8(DRIVE_PROTO_VERSION);
            b.put_u16(0);
            b.resize(count_at, 0);
            b.put_u32(((payload_len - count_at - 4) / 4) as u32);
            b.resize(payload_len, 0);
            let _ = decode_request(method, b.freeze());
        }
    }
    assert_alloc_bounded("requests with huge counts");
}

#[test]
fn drive_proto_blob_claiming_4_gib_is_refused() {
    let mut b = BytesMut::new();
    b.put_u8(DRIVE_PROTO_VERSION);
    b.put_u8(6); // Response::Data(blob)
    b.put_u32(u32::MAX);
    b.extend_from_slice(&[1, 2, 3]);
    assert!(decode_response(b.freeze()).is_err());
    assert_alloc_bounded("4 GiB blob");
}

proptest! {
    #![proptest_config(cases())]

    /// Arbitrary bytes fed to the frame opener in arbitrary pieces: errors or bounded Needs,
    /// never a panic, never a Need beyond the maximum frame.
    #[test]
    fn frames_from_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        valid_prefix in any::<bool>(),
        kind in 0u8..6,
        len in any::<u32>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut input = if valid_prefix { header_bytes(kind, 0, 3, len) } else { Vec::new() };
        input.extend_from_slice(&bytes);
        let _ = Header::decode(&input, DEFAULT_MAX_PAYLOAD);
        let mut o = Opener::new(&KEY, DEFAULT_MAX_PAYLOAD);
        let _ = o.open_exact(&input);
        let at = cut.index(input.len() + 1);
        let mut buf = BytesMut::from(&input[..at]);
        for more in [&input[at..], &[][..]] {
            match o.open(&mut buf) {
                Ok(Decoded::Need(n)) => {
                    prop_assert!(n <= HEADER_LEN + DEFAULT_MAX_PAYLOAD as usize + TAG_LEN, "Need({n})");
                }
                // A frame from random bytes would need a forged HMAC.
                Ok(Decoded::Frame(f)) => prop_assert!(false, "random bytes authenticated: {f:?}"),
                Err(_) => break,
            }
            buf.extend_from_slice(more);
        }
        assert_alloc_bounded("frames");
    }

    #[test]
    fn handshake_messages_from_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        t in any::<u8>(),
        len in any::<u16>(),
    ) {
        let _ = decode_message(&bytes);
        // A valid header in front of arbitrary bodies, with any claimed length.
        let mut m = HS_MAGIC.to_vec();
        m.extend_from_slice(&[HS_VERSION, t]);
        m.extend_from_slice(&len.to_be_bytes());
        m.extend_from_slice(&bytes);
        let _ = decode_message(&m);
        assert_alloc_bounded("handshake");
    }

    #[test]
    fn bulk_headers_from_arbitrary_bytes(b in any::<[u8; BULK_HEADER_LEN]>(), valid in any::<bool>()) {
        let mut b = b;
        if valid {
            b[..4].copy_from_slice(b"QBLK");
            b[4] = 1;
            b[5..8].fill(0);
        }
        if let Ok(h) = BulkHeader::decode(&b) {
            prop_assert_eq!(BulkHeader::decode(&h.encode()).ok(), Some(h));
        }
    }

    /// Drive-protocol requests: a valid version and drive, then arbitrary bytes with
    /// length-like words sprinkled in (so counts and blob lengths get large values).
    #[test]
    fn drive_requests_from_structured_garbage(
        method in 0u16..64,
        drive in any::<u16>(),
        words in proptest::collection::vec((any::<u32>(), proptest::collection::vec(any::<u8>(), 0..24)), 0..12),
    ) {
        let mut b = BytesMut::new();
        b.put_u8(DRIVE_PROTO_VERSION);
        b.put_u16(drive);
        for (w, tail) in &words {
            b.put_u32(*w);
            b.extend_from_slice(tail);
        }
        let _ = decode_request(method, b.freeze());
        assert_alloc_bounded("drive requests");
    }

    #[test]
    fn drive_responses_from_structured_garbage(
        tag in 0u8..20,
        words in proptest::collection::vec((any::<u32>(), proptest::collection::vec(any::<u8>(), 0..24)), 0..12),
    ) {
        let mut b = BytesMut::new();
        b.put_u8(DRIVE_PROTO_VERSION);
        b.put_u8(tag);
        for (w, tail) in &words {
            b.put_u32(*w);
            b.extend_from_slice(tail);
        }
        let _ = decode_response(b.freeze());
        let _ = decode_response(Bytes::from(words.iter().flat_map(|(_, t)| t.clone()).collect::<Vec<u8>>()));
        assert_alloc_bounded("drive responses");
    }

    /// The verbs data plane's messages: a valid version, then length-like words and bytes.
    #[test]
    fn verbs_messages_from_structured_garbage(
        words in proptest::collection::vec((any::<u32>(), proptest::collection::vec(any::<u8>(), 0..40)), 0..8),
        versioned in any::<bool>(),
    ) {
        let mut b = BytesMut::new();
        if versioned {
            b.put_u8(VERBS_VERSION);
        }
        for (w, tail) in &words {
            b.put_u32(*w);
            b.extend_from_slice(tail);
        }
        let _ = decode_connect(&b);
        let _ = decode_connected(&b);
        let _ = decode_read(&b);
        let _ = decode_append(&b);
        let _ = decode_read_answer(&b);
        assert_alloc_bounded("verbs messages");
    }

    /// The codec's own values (nested lists, options, strings, byte strings) and the error-frame
    /// payload from arbitrary bytes: errors, never panics, bounded allocation; whatever decodes
    /// encodes back to the bytes it came from.
    #[test]
    fn codec_values_from_arbitrary_bytes(
        words in proptest::collection::vec((any::<u32>(), proptest::collection::vec(any::<u8>(), 0..24)), 0..12),
    ) {
        let mut b = BytesMut::new();
        for (w, tail) in &words {
            b.put_u32(*w);
            b.extend_from_slice(tail);
        }
        let b = b.freeze();
        fn canonical<T: Codec>(b: &Bytes) -> Result<(), TestCaseError> {
            if let Ok(v) = codec::from_bytes::<T, _>(b.clone()) {
                prop_assert_eq!(&codec::to_bytes(&v)[..], &b[..]);
            }
            Ok(())
        }
        canonical::<Vec<Vec<String>>>(&b)?;
        canonical::<Vec<Option<Bytes>>>(&b)?;
        canonical::<Vec<u64>>(&b)?;
        let _ = quarry_net::wire::decode_error(&b);
        assert_alloc_bounded("codec values");
    }
}
