//! The XML request bodies parsed from clients: CompleteMultipartUpload and
//! CreateBucketConfiguration. (DeleteObjects' parser is crate-private: its proptest is in
//! crates/s3/src/fuzz_tests.rs.) No panic.
//!
//! Besides the input as given, each input is also tried as a deep and as a wide document: its
//! first byte picks a repeat count (up to ~65,000), its rest is the element (or text) repeated,
//! nested or side by side, so libFuzzer reaches depths and widths its size limit would not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_s3::xml::{parse_complete_multipart_upload, parse_create_bucket_configuration};

fn parse_all(data: &[u8]) {
    if let Ok(parts) = parse_complete_multipart_upload(data) {
        assert!(parts.iter().all(|p| p.part_number >= 1));
    }
    let _ = parse_create_bucket_configuration(data);
}

fuzz_target!(|data: &[u8]| {
    parse_all(data);
    if let Some((&n, piece)) = data.split_first() {
        let times = (usize::from(n) + 1) * 256;
        let piece = String::from_utf8_lossy(piece);
        let name: String = piece
            .chars()
            .filter(|c| c.is_ascii_alphabetic())
            .take(16)
            .collect();
        let name = if name.is_empty() {
            "a".to_string()
        } else {
            name
        };
        let deep = format!(
            "{}{}",
            format!("<{name}>").repeat(times),
            format!("</{name}>").repeat(times)
        );
        parse_all(deep.as_bytes());
        assert!(
            quarry_s3::xml::parse_document(deep.as_bytes()).is_err()
                || times <= quarry_s3::xml::MAX_XML_DEPTH
        );
        let wide = format!(
            "<CompleteMultipartUpload>{}</CompleteMultipartUpload>",
            piece.repeat(times.min(4096))
        );
        parse_all(wide.as_bytes());
    }
});
