//! Fuzz-style robustness of the on-disk metadata decoders (`quarry.meta`, `format.json`, the
//! multipart upload and part records): arbitrary bytes, and valid encodings with bytes flipped,
//! inserted or cut, never panic; a header whose `inline_len` claims 4 GiB is refused without
//! allocating it. A counting global allocator records the largest allocation of this binary.
//!
//! Cases per property: [`DEFAULT_CASES`]; run longer by hand with `PROPTEST_CASES=100000`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use quarry_disk::{
    ErasureInfo, FormatV1, ObjectMeta, PartInfo, PartMeta, UploadMeta, META_VERSION,
};
use uuid::Uuid;

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

/// Inputs here are at most ~200 KiB: nothing may allocate more than this.
const ALLOC_LIMIT: usize = 8 << 20;

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

fn sample(inline: Option<Vec<u8>>) -> ObjectMeta {
    ObjectMeta {
        version: META_VERSION,
        version_id: None,
        delete_marker: false,
        size: 12345,
        mod_time_ns: 1_700_000_000_123_456_789,
        etag: "9e107d9d372bb6826bd81d3542a419d6".into(),
        headers: [("content-type".to_string(), "text/plain".to_string())].into(),
        user_meta: [("owner".to_string(), "x \"y\"".to_string())].into(),
        checksums: [("crc32c".to_string(), "AAAAAA==".to_string())].into(),
        erasure: ErasureInfo {
            codec: "rs-vandermonde-gf8".into(),
            bitrot: "blake3-256".into(),
            data: 2,
            parity: 2,
            block_size: 1 << 20,
            index: 3,
            distribution: vec![3, 4, 1, 2],
        },
        data_dir: if inline.is_some() {
            None
        } else {
            Some(Uuid::from_u128(7))
        },
        parts: vec![PartInfo {
            number: 1,
            size: 12345,
            etag: "9e107d9d372bb6826bd81d3542a419d6".into(),
        }],
        inline: inline.map(Into::into),
    }
}

fn decode_all(b: &[u8]) {
    let decoded = ObjectMeta::from_bytes(b);
    // Slicing the inline data instead of copying it decodes the same, or fails the same.
    assert_eq!(
        ObjectMeta::from_shared(bytes::Bytes::copy_from_slice(b)).map_err(|e| e.to_string()),
        decoded.as_ref().map_err(|e| e.to_string()).cloned()
    );
    if let Ok(m) = decoded {
        // Whatever decodes re-encodes to something that decodes to the same value.
        assert_eq!(ObjectMeta::from_bytes(&m.to_bytes()).ok(), Some(m));
    }
    let _ = ObjectMeta::from_bytes_without_inline(b);
    let _ = FormatV1::from_bytes(b);
    let _ = UploadMeta::from_bytes(b);
    let _ = PartMeta::from_bytes(b);
}

#[test]
fn inline_len_claiming_4_gib_is_refused_without_allocating() {
    let m = sample(Some(vec![1, 2, 3]));
    let text = String::from_utf8_lossy(&m.to_bytes()).into_owned();
    for claim in ["4294967295", "4294967296", "18446744073709551615"] {
        let forged = text.replacen("\"inline_len\":3", &format!("\"inline_len\":{claim}"), 1);
        assert_ne!(forged, text, "the forged header took effect");
        assert!(
            ObjectMeta::from_bytes(forged.as_bytes()).is_err(),
            "inline_len {claim}"
        );
        // A listing reads only the header: fine, and still no allocation of the claim.
        let _ = ObjectMeta::from_bytes_without_inline(forged.as_bytes());
    }
    assert_alloc_bounded("inline_len 4 GiB");
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        decode_all(&bytes);
        assert_alloc_bounded("arbitrary bytes");
    }

    /// A valid encoding (inline or not) with a few bytes replaced, inserted or cut.
    #[test]
    fn mutated_valid_meta(
        inline_len in proptest::option::of(0usize..200_000),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let inline = inline_len.map(|n| (0..n).map(|i| i as u8).collect());
        let mut b = sample(inline).to_bytes();
        for (at, byte, how) in edits {
            let i = at.index(b.len());
            match how {
                0 => b[i] = byte,
                1 => b.insert(i, byte),
                _ => { b.remove(i); }
            }
        }
        if let Some(c) = cut {
            b.truncate(c.index(b.len() + 1));
        }
        decode_all(&b);
        assert_alloc_bounded("mutated meta");
    }

    /// JSON-shaped garbage: valid version, arbitrary values for the fields.
    #[test]
    fn structured_headers(
        size in any::<u64>(),
        inline_len in any::<u64>(),
        data in any::<u8>(),
        parity in any::<u8>(),
        index in any::<u8>(),
        block in any::<u32>(),
        dist in proptest::collection::vec(any::<u8>(), 0..20),
        tail in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let h = format!(
            r#"{{"version":{META_VERSION},"size":{size},"mod_time_ns":0,"etag":"","headers":{{}},"user_meta":{{}},"checksums":{{}},"erasure":{{"codec":"rs-vandermonde-gf8","bitrot":"blake3-256","data":{data},"parity":{parity},"block_size":{block},"index":{index},"distribution":{dist:?}}},"data_dir":null,"parts":[],"inline_len":{inline_len}}}"#
        );
        let mut b = h.into_bytes();
        b.push(b'\n');
        b.extend_from_slice(&tail);
        decode_all(&b);
        assert_alloc_bounded("structured headers");
    }
}
