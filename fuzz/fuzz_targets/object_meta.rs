//! On-disk metadata decoding: `quarry.meta`, `format.json`, multipart upload and part records.
//! No panic; whatever decodes re-encodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_disk::{FormatV1, ObjectMeta, PartMeta, UploadMeta};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = ObjectMeta::from_bytes(data) {
        assert_eq!(ObjectMeta::from_bytes(&m.to_bytes()).ok(), Some(m));
    }
    let _ = ObjectMeta::from_bytes_without_inline(data);
    let _ = FormatV1::from_bytes(data);
    let _ = UploadMeta::from_bytes(data);
    let _ = PartMeta::from_bytes(data);
});
