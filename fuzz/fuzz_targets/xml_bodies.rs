//! The XML request bodies parsed from clients: CompleteMultipartUpload and
//! CreateBucketConfiguration. (DeleteObjects' parser is crate-private: its proptest is in
//! crates/s3/src/fuzz_tests.rs.) No panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_s3::xml::{parse_complete_multipart_upload, parse_create_bucket_configuration};

fuzz_target!(|data: &[u8]| {
    if let Ok(parts) = parse_complete_multipart_upload(data) {
        assert!(parts.iter().all(|p| p.part_number >= 1));
    }
    let _ = parse_create_bucket_configuration(data);
});
