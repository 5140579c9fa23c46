//! On-disk metadata decoding: `quarry.meta`, `format.json`, multipart upload and part records.
//! No panic; whatever decodes re-encodes to the same value; slicing and copying decode alike.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_disk::{FormatV1, ObjectMeta, PartMeta, UploadMeta};

fuzz_target!(|data: &[u8]| {
    let decoded = ObjectMeta::from_bytes(data);
    // Slicing the inline data (what drives do) decodes the same as copying it.
    assert_eq!(
        ObjectMeta::from_shared(bytes::Bytes::copy_from_slice(data)).ok().as_ref(),
        decoded.as_ref().ok()
    );
    if let Ok(m) = decoded {
        assert_eq!(ObjectMeta::from_bytes(&m.to_bytes()).ok(), Some(m));
    }
    let _ = ObjectMeta::from_bytes_without_inline(data);
    let _ = FormatV1::from_bytes(data);
    let _ = UploadMeta::from_bytes(data);
    let _ = PartMeta::from_bytes(data);
});
