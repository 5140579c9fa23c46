//! SigV4 (and SigV2) request verification on arbitrary input: the bytes are split at NUL into a
//! request target (path and query, so presigned parameters are reached), an Authorization header
//! and the values of the headers verification reads. No panic; nothing is accepted.
#![no_main]

use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;
use quarry_s3::signature::{verify_request, AuthConfig};
use quarry_s3::Credentials;

const HEADERS: [&str; 6] = [
    "authorization",
    "x-amz-date",
    "x-amz-content-sha256",
    "date",
    "content-encoding",
    "x-amz-decoded-content-length",
];

fuzz_target!(|data: &[u8]| {
    let mut fields = data.split(|&b| b == 0);
    let target = fields.next().unwrap_or_default();
    let Ok(target) = std::str::from_utf8(target) else {
        return;
    };
    let mut b = http::Request::builder()
        .method("PUT")
        .uri(format!("/{target}"));
    for (name, value) in HEADERS.iter().zip(fields) {
        if let Ok(v) = http::HeaderValue::from_bytes(value) {
            b = b.header(*name, v);
        }
    }
    let Ok(req) = b.body(()) else { return };
    let (parts, ()) = req.into_parts();
    let cfg = AuthConfig::new(vec![Credentials::new("AKIAIOSFODNN7EXAMPLE", "secret")]);
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600);
    assert!(verify_request(&parts, &cfg, now).is_err());
});
