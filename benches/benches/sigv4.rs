//! SigV4 verification cost: a header-signed request (empty body hash), a header-signed PUT with a
//! payload hash, and a presigned GET, each verified by `quarry_s3::signature::verify_request` as
//! the front end does per request; beside a baseline of one HMAC-SHA256 over the same string to
//! sign length (the floor: SigV4 needs five HMACs for the key plus one for the signature, and a
//! SHA-256 of the canonical request).
//!
//! Run: `cargo bench -p quarry-benches --bench sigv4`. Read the figures as ratios to the baseline.

use std::time::{Duration, SystemTime};

use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
    SignatureLocation, SigningSettings, UriPathNormalizationMode,
};
use aws_sigv4::sign::v4::SigningParams;
use criterion::{criterion_group, criterion_main, Criterion};
use hmac::{Hmac, Mac};
use quarry_s3::signature::{verify_request, AuthConfig, Credentials};
use sha2::Sha256;

const AK: &str = "AKQUARRYBENCH";
const SK: &str = "bench/secret+key-0123456789";
const REGION: &str = "us-east-1";

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_547_200)
}

/// Signs a request with aws-sigv4 and returns it as the server sees it.
fn signed(
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: SignableBody<'_>,
    presign: bool,
) -> http::request::Parts {
    let identity = aws_credential_types::Credentials::new(AK, SK, None, None, "bench").into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    if presign {
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(Duration::from_secs(600));
    }
    let params = SigningParams::builder()
        .identity(&identity)
        .region(REGION)
        .name("s3")
        .time(now())
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let url = format!("http://localhost:9000{path_and_query}");
    let req = SignableRequest::new(method, url, headers.iter().copied(), body).expect("signable");
    let (instructions, _) = sign(req, &params).expect("sign").into_parts();
    let mut uri = path_and_query.to_string();
    for (k, v) in instructions.params() {
        uri.push(if uri.contains('?') { '&' } else { '?' });
        uri.push_str(
            &percent_encoding::utf8_percent_encode(k, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
        );
        uri.push('=');
        uri.push_str(
            &percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
        );
    }
    let mut b = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost:9000");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    for (k, v) in instructions.headers() {
        b = b.header(k, v);
    }
    b.body(()).expect("request").into_parts().0
}

fn sigv4(c: &mut Criterion) {
    let cfg = AuthConfig {
        credentials: vec![Credentials::new(AK, SK)],
        keys: None,
        region: REGION.into(),
    };
    let body = vec![7u8; 4096];
    let cases = [
        (
            "get_header_signed",
            signed(
                "GET",
                "/bucket/some/key.txt",
                &[],
                SignableBody::Bytes(b""),
                false,
            ),
        ),
        (
            "put_header_signed_payload_hash",
            signed(
                "PUT",
                "/bucket/some/key.txt",
                &[
                    ("content-type", "application/octet-stream"),
                    ("x-amz-meta-owner", "bench"),
                ],
                SignableBody::Bytes(&body),
                false,
            ),
        ),
        (
            "get_presigned",
            signed(
                "GET",
                "/bucket/some/key.txt",
                &[],
                SignableBody::UnsignedPayload,
                true,
            ),
        ),
    ];
    let mut g = c.benchmark_group("sigv4_verify");
    for (name, parts) in &cases {
        verify_request(parts, &cfg, now()).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        g.bench_function(*name, |b| {
            b.iter(|| verify_request(std::hint::black_box(parts), &cfg, now()).is_ok())
        });
    }
    // Baseline: one HMAC-SHA256 of a string-to-sign-sized message.
    let msg = vec![b'a'; 180];
    g.bench_function("baseline_one_hmac_sha256", |b| {
        b.iter(|| {
            let mut m = Hmac::<Sha256>::new_from_slice(SK.as_bytes()).expect("hmac key");
            m.update(std::hint::black_box(&msg));
            m.finalize().into_bytes()
        })
    });
    g.finish();
}

criterion_group!(benches, sigv4);
criterion_main!(benches);
