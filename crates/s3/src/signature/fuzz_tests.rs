//! Fuzz-style robustness of the SigV4 parsers: the `Authorization` header parser, whole-request
//! verification with arbitrary and structured-random headers and presigned queries, and the
//! aws-chunked decoder fed arbitrary bytes in arbitrary pieces. No panic; nothing random is
//! accepted; the decoder yields at most the bytes it was given and refuses an over-long line or
//! an over-large chunk size before buffering it.
//!
//! Cases per property: `crate::fuzz_tests::DEFAULT_CASES`; more with `PROPTEST_CASES=100000`.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use proptest::prelude::*;

use super::streaming::tests::{example_signer, SEED};
use super::streaming::{AwsChunkedDecoder, ChunkMode, MAX_LINE};
use super::v4::AuthorizationHeader;
use super::*;
use crate::fuzz_tests::cases;

const AK: &str = "AKIAIOSFODNN7EXAMPLE";
const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

fn cfg() -> AuthConfig {
    AuthConfig::new(vec![Credentials::new(AK, SK)])
}

/// 2013-05-24T00:00:00Z (the AWS examples' time).
fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600)
}

/// Builds request parts, or `None` when `http` itself refuses the pieces (not our parser's job).
fn parts(uri: &str, headers: &[(String, Vec<u8>)]) -> Option<Parts> {
    let mut b = http::Request::builder().method("PUT").uri(uri);
    for (k, v) in headers {
        let v = http::HeaderValue::from_bytes(v).ok()?;
        b = b.header(k.as_str(), v);
    }
    b.body(()).ok().map(|r| r.into_parts().0)
}

fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(format!(
            "Credential={AK}/20130524/us-east-1/s3/aws4_request"
        )),
        Just("Credential=/20130524/us-east-1/s3/aws4_request".to_string()),
        Just(format!(
            "Credential={AK}/20130524/eu-west-1/s3/aws4_request"
        )),
        Just(format!(
            "Credential={AK}/20130524/us-east-1/ec2/aws4_request"
        )),
        Just(format!("Credential={AK}//////")),
        Just("SignedHeaders=host;x-amz-content-sha256;x-amz-date".to_string()),
        Just("SignedHeaders=;;".to_string()),
        Just("SignedHeaders=".to_string()),
        Just(format!("Signature={}", "f".repeat(64))),
        Just("Signature=".to_string()),
        Just("Signature=zz".to_string()),
        "[A-Za-z]{0,12}=[\\PC]{0,30}",
        "\\PC{0,20}",
    ]
}

fn authorization() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            Just("AWS4-HMAC-SHA256 "),
            Just("AWS4-HMAC-SHA256\t"),
            Just("AWS4-HMAC-SHA256"),
            Just("AWS "),
            Just("AWS4-ECDSA-P256-SHA256 "),
            Just(""),
        ],
        proptest::collection::vec(field(), 0..5),
        prop_oneof![Just(","), Just(", "), Just(" ,"), Just(",,")],
    )
        .prop_map(|(alg, fields, sep)| format!("{alg}{}", fields.join(sep)))
}

fn query_param() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("X-Amz-Algorithm=AWS4-HMAC-SHA256".to_string()),
        Just("X-Amz-Algorithm=nope".to_string()),
        Just(format!(
            "X-Amz-Credential={AK}%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
        )),
        Just("X-Amz-Credential=%2F%2F%2F%2F".to_string()),
        Just("X-Amz-Date=20130524T000000Z".to_string()),
        Just("X-Amz-Date=99991231T235959Z".to_string()),
        Just("X-Amz-Date=00000101T000000Z".to_string()),
        "X-Amz-Expires=-?[0-9]{0,25}",
        Just("X-Amz-SignedHeaders=host".to_string()),
        Just("X-Amz-SignedHeaders=".to_string()),
        Just(format!("X-Amz-Signature={}", "a".repeat(64))),
        Just("X-Amz-Content-Sha256=UNSIGNED-PAYLOAD".to_string()),
        Just("X-Amz-Content-Sha256=STREAMING-AWS4-HMAC-SHA256-PAYLOAD".to_string()),
        Just("AWSAccessKeyId=x&Expires=1&Signature=y".to_string()),
        "[A-Za-z-]{1,15}=[A-Za-z0-9%]{0,20}",
        "%[0-9A-Fa-f]{0,2}",
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    let h = prop_oneof![
        Just(("x-amz-date".to_string(), b"20130524T000000Z".to_vec())),
        "[0-9TZ]{0,18}".prop_map(|v| ("x-amz-date".to_string(), v.into_bytes())),
        Just((
            "date".to_string(),
            b"Fri, 24 May 2013 00:00:00 GMT".to_vec()
        )),
        Just((
            "x-amz-content-sha256".to_string(),
            b"UNSIGNED-PAYLOAD".to_vec()
        )),
        Just((
            "x-amz-content-sha256".to_string(),
            b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD".to_vec()
        )),
        "[0-9a-f]{60,68}".prop_map(|v| ("x-amz-content-sha256".to_string(), v.into_bytes())),
        Just(("content-encoding".to_string(), b"aws-chunked".to_vec())),
        "[0-9]{0,22}".prop_map(|v| ("x-amz-decoded-content-length".to_string(), v.into_bytes())),
        proptest::collection::vec(any::<u8>(), 0..30).prop_map(|v| ("x-amz-meta-a".to_string(), v)),
    ];
    proptest::collection::vec(h, 0..6)
}

/// Feeds `body` in the given pieces; returns the decoded bytes and whether it ended in an error.
fn feed(mut d: AwsChunkedDecoder, body: &[u8], cuts: &[usize]) -> (usize, bool) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.push(0);
    cuts.push(body.len());
    cuts.sort_unstable();
    let mut out = 0usize;
    for w in cuts.windows(2) {
        let mut b = Bytes::copy_from_slice(&body[w[0]..w[1]]);
        loop {
            match d.decode(&mut b) {
                Ok(Some(data)) => out += data.len(),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, d.finish().is_err())
}

fn chunked_soup() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        "[0-9a-fA-F]{0,18}".prop_map(String::into_bytes),
        Just(b";chunk-signature=".to_vec()),
        "[0-9a-f]{64}".prop_map(String::into_bytes),
        Just(b"\r\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"0\r\n".to_vec()),
        Just(b"x-amz-checksum-crc32:AAAAAA==\r\n".to_vec()),
        Just(b"x-amz-trailer-signature:".to_vec()),
        Just(b":".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    proptest::collection::vec(piece, 0..30).prop_map(|v| v.concat())
}

#[test]
fn long_lines_and_huge_chunk_sizes_are_refused_early() {
    // A chunk-size line that never ends: refused once it is longer than MAX_LINE.
    let endless = vec![b'a'; 1 << 20];
    let mut d = AwsChunkedDecoder::new(ChunkMode::UnsignedTrailer, 10);
    let mut b = Bytes::from(endless);
    let mut refused = false;
    let mut fed = 0usize;
    while !b.is_empty() {
        let mut piece = b.split_to(b.len().min(512));
        fed += piece.len();
        if d.decode(&mut piece).is_err() {
            refused = true;
            break;
        }
    }
    assert!(
        refused && fed <= MAX_LINE + 512,
        "an endless line was buffered ({fed} bytes fed)"
    );
    // Chunk sizes beyond 16 MiB, or beyond u64, are refused at the header.
    for line in [
        &b"ffffffffffffffff\r\n"[..],
        b"10000000000000000000\r\n",
        b"1000001\r\n",
    ] {
        let mut d = AwsChunkedDecoder::new(ChunkMode::UnsignedTrailer, u64::MAX);
        let mut b = Bytes::copy_from_slice(line);
        assert!(
            d.decode(&mut b).is_err(),
            "{}",
            String::from_utf8_lossy(line)
        );
    }
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn authorization_header_parser(s in "\\PC{0,200}", t in authorization()) {
        let _ = AuthorizationHeader::parse(&s);
        let _ = AuthorizationHeader::parse(&t);
    }

    /// Whole-request verification with random Authorization headers and random companions:
    /// never a panic, never accepted (no input here carries a valid signature).
    #[test]
    fn header_auth_requests(auth in authorization(), hs in headers(), raw in proptest::collection::vec(any::<u8>(), 0..80)) {
        let mut all = hs.clone();
        all.push(("authorization".to_string(), auth.into_bytes()));
        if let Some(p) = parts("/bucket/key", &all) {
            prop_assert!(verify_request(&p, &cfg(), now()).is_err());
        }
        let mut all = hs;
        all.push(("authorization".to_string(), raw));
        if let Some(p) = parts("/bucket/key", &all) {
            prop_assert!(verify_request(&p, &cfg(), now()).is_err());
        }
    }

    #[test]
    fn presigned_queries(params in proptest::collection::vec(query_param(), 0..9), hs in headers(), path in "/[a-z%0-9./]{0,20}") {
        let uri = format!("{path}?{}", params.join("&"));
        if let Some(p) = parts(&uri, &hs) {
            prop_assert!(verify_request(&p, &cfg(), now()).is_err());
            let _ = verify_virtual_host_request(&p, &cfg(), now(), "bucket");
        }
    }

    /// The aws-chunked decoder on arbitrary bytes and on chunk-shaped soup, in arbitrary
    /// pieces, in every mode: no panic, and never more bytes out than in.
    #[test]
    fn chunked_decoder(
        random in proptest::collection::vec(any::<u8>(), 0..3000),
        soup in chunked_soup(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
        expected in prop_oneof![Just(0u64), 0u64..5000, Just(u64::MAX)],
        mode in 0u8..3,
    ) {
        for body in [&random, &soup] {
            let m = match mode {
                0 => ChunkMode::UnsignedTrailer,
                1 => ChunkMode::Signed(example_signer(SEED)),
                _ => ChunkMode::SignedTrailer(example_signer(SEED)),
            };
            let (out, _) = feed(AwsChunkedDecoder::new(m, expected), body, &cuts);
            prop_assert!(out <= body.len());
        }
    }
}
