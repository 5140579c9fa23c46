//! Tests of the public API: AWS's published examples, requests signed by the `aws-sigv4` crate,
//! and the failure cases a client or an attacker can produce.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::{executor::block_on, StreamExt as _};

use super::streaming::tests::{example_body, SEED, SIGS, TRAILER_SEED, TRAILER_SIG, TRAILER_SIGS};
use super::*;

const AK: &str = "AKIAIOSFODNN7EXAMPLE";
const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const HOST: &str = "examplebucket.s3.amazonaws.com";
const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn cfg() -> AuthConfig {
    AuthConfig::new(vec![
        Credentials::new("other", "x"),
        Credentials::new(AK, SK),
    ])
}

/// 2013-05-24T00:00:00Z, the time of every AWS example, plus `secs`.
fn at(secs: i64) -> SystemTime {
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600);
    if secs >= 0 {
        base + Duration::from_secs(secs as u64)
    } else {
        base - Duration::from_secs(secs.unsigned_abs())
    }
}

fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut b = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

fn authz(signed_headers: &str, sig: &str) -> String {
    format!("AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed_headers},Signature={sig}")
}

fn code(r: Result<Authenticated, S3Error>) -> S3ErrorCode {
    r.expect_err("request accepted").code
}

/// Collects a verified body; the error, if any, must be the last item.
fn collect<S>(s: S) -> Result<Vec<u8>, S3Error>
where
    S: futures::Stream<Item = std::io::Result<Bytes>>,
{
    block_on(async {
        let items: Vec<_> = s.collect().await;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item {
                Ok(b) => out.extend_from_slice(b),
                Err(e) => {
                    assert_eq!(i, items.len() - 1, "an error must end the stream");
                    return Err(s3_error_of(e).expect("an S3Error"));
                }
            }
        }
        Ok(out)
    })
}

/// The body as a stream of `pieces` network reads.
fn stream_of(
    body: Vec<u8>,
    piece: usize,
) -> impl futures::Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    let pieces: Vec<std::io::Result<Bytes>> = body
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    futures::stream::iter(pieces)
}

fn body_of(
    parts: &Parts,
    auth: &Authenticated,
    body: Vec<u8>,
    piece: usize,
) -> Result<Vec<u8>, S3Error> {
    collect(verified_body(parts, auth, stream_of(body, piece))?)
}

fn get_example(sig: &str) -> Parts {
    let a = authz("host;range;x-amz-content-sha256;x-amz-date", sig);
    parts(
        "GET",
        "/test.txt",
        &[
            ("host", HOST),
            ("range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY),
            ("x-amz-date", "20130524T000000Z"),
            ("authorization", &a),
        ],
    )
}

const GET_SIG: &str = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";

#[test]
fn aws_example_get_object() {
    let auth = verify_request(&get_example(GET_SIG), &cfg(), at(0)).unwrap();
    assert_eq!(auth.access_key, AK);
    let mut empty = [0u8; 32];
    hex::decode_to_slice(EMPTY, &mut empty).unwrap();
    assert_eq!(auth.payload, PayloadCheck::Sha256(empty));
    assert_eq!(
        body_of(&get_example(GET_SIG), &auth, Vec::new(), 1).unwrap(),
        b""
    );
}

#[test]
fn aws_example_put_object() {
    let a = authz(
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
    );
    for path in ["/test$file.text", "/test%24file.text"] {
        let p = parts(
            "PUT",
            path,
            &[
                ("host", HOST),
                ("date", "Fri, 24 May 2013 00:00:00 GMT"),
                ("x-amz-date", "20130524T000000Z"),
                ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
                (
                    "x-amz-content-sha256",
                    "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
                ),
                ("content-length", "21"),
                ("authorization", &a),
            ],
        );
        let auth = verify_request(&p, &cfg(), at(0)).unwrap();
        assert_eq!(
            body_of(&p, &auth, b"Welcome to Amazon S3.".to_vec(), 4).unwrap(),
            b"Welcome to Amazon S3."
        );
        let e = body_of(&p, &auth, b"Welcome to Amazon S3!".to_vec(), 4).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::XAmzContentSHA256Mismatch);
        let e = body_of(&p, &auth, b"Welcome to Amazon S3".to_vec(), 4).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::IncompleteBody);
    }
}

#[test]
fn aws_example_queries() {
    for (uri, sig) in [
        (
            "/?lifecycle",
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
        ),
        (
            "/?max-keys=2&prefix=J",
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
        ),
        (
            "/?prefix=J&max-keys=2",
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
        ),
    ] {
        let a = authz("host;x-amz-content-sha256;x-amz-date", sig);
        let p = parts(
            "GET",
            uri,
            &[
                ("host", HOST),
                ("x-amz-content-sha256", EMPTY),
                ("x-amz-date", "20130524T000000Z"),
                ("authorization", &a),
            ],
        );
        verify_request(&p, &cfg(), at(0)).unwrap_or_else(|e| panic!("{uri}: {e}"));
    }
}

#[test]
fn header_auth_failures() {
    let c = cfg();
    // Tampered request line, header, signature.
    let mut p = get_example(GET_SIG);
    p.uri = "/test.txu".parse().unwrap();
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::SignatureDoesNotMatch
    );
    let mut p = get_example(GET_SIG);
    p.headers.insert("range", "bytes=0-10".parse().unwrap());
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::SignatureDoesNotMatch
    );
    let bad = format!("{}0", &GET_SIG[..63]);
    assert_eq!(
        code(verify_request(&get_example(&bad), &c, at(0))),
        S3ErrorCode::SignatureDoesNotMatch
    );
    // A different secret for the same key.
    let wrong = AuthConfig::new(vec![Credentials::new(AK, "not the secret")]);
    assert_eq!(
        code(verify_request(&get_example(GET_SIG), &wrong, at(0))),
        S3ErrorCode::SignatureDoesNotMatch
    );
    // Unknown key.
    let other = AuthConfig::new(vec![Credentials::new("someone", SK)]);
    assert_eq!(
        code(verify_request(&get_example(GET_SIG), &other, at(0))),
        S3ErrorCode::InvalidAccessKeyId
    );
    // Clock skew: 15 minutes either way is fine, more is not.
    verify_request(&get_example(GET_SIG), &c, at(900)).unwrap();
    verify_request(&get_example(GET_SIG), &c, at(-900)).unwrap();
    for skew in [901, -901, 86_400] {
        let e = verify_request(&get_example(GET_SIG), &c, at(skew)).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::RequestTimeTooSkewed, "{skew}");
        assert!(e.message.contains("RequestTime: 20130524T000000Z"), "{e}");
    }
    // Region, service, date in the credential scope.
    let eu = AuthConfig {
        region: "eu-west-1".into(),
        ..cfg()
    };
    let e = verify_request(&get_example(GET_SIG), &eu, at(0)).unwrap_err();
    assert_eq!(e.code, S3ErrorCode::AuthorizationHeaderMalformed);
    assert!(e.message.contains("expecting 'eu-west-1'"), "{e}");
    for credential in [
        format!("{AK}/20130524/us-east-1/sqs/aws4_request"),
        format!("{AK}/20130525/us-east-1/s3/aws4_request"),
        format!("{AK}/20130524/us-east-1/s3/aws5_request"),
        format!("{AK}/20130524/us-east-1/s3"),
    ] {
        let mut p = get_example(GET_SIG);
        let a = format!("AWS4-HMAC-SHA256 Credential={credential},SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature={GET_SIG}");
        p.headers.insert("authorization", a.parse().unwrap());
        assert_eq!(
            code(verify_request(&p, &c, at(0))),
            S3ErrorCode::AuthorizationHeaderMalformed,
            "{credential}"
        );
    }
    // host must be signed.
    let a = authz("range;x-amz-content-sha256;x-amz-date", GET_SIG);
    let mut p = get_example(GET_SIG);
    p.headers.insert("authorization", a.parse().unwrap());
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::AuthorizationHeaderMalformed
    );
    // A signed header that is absent.
    let mut p = get_example(GET_SIG);
    p.headers.remove("range");
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::SignatureDoesNotMatch
    );
    // x-amz-content-sha256 is required; the date too.
    let mut p = get_example(GET_SIG);
    p.headers.remove("x-amz-content-sha256");
    let e = verify_request(&p, &c, at(0)).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            S3ErrorCode::InvalidRequest,
            "Missing required header for this request: x-amz-content-sha256"
        )
    );
    let mut p = get_example(GET_SIG);
    p.headers.remove("x-amz-date");
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::AccessDenied
    );
    let mut p = get_example(GET_SIG);
    p.headers
        .insert("x-amz-date", "2013-05-24T00:00:00Z".parse().unwrap());
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::AccessDenied
    );
}

#[test]
fn other_authorization_schemes() {
    let c = cfg();
    let p = parts(
        "GET",
        "/b/k",
        &[
            ("host", HOST),
            (
                "authorization",
                "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=",
            ),
        ],
    );
    // SigV2 is verified by `v2` (its own tests); this one has no Date.
    let e = verify_request(&p, &c, at(0)).unwrap_err();
    assert_eq!(e.code, S3ErrorCode::AccessDenied);
    assert!(e.message.contains("Date"), "{e}");
    let p = parts(
        "GET",
        "/b/k?AWSAccessKeyId=AK&Expires=1&Signature=x",
        &[("host", HOST)],
    );
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::InvalidAccessKeyId
    );
    let p = parts("GET", "/b/k", &[("host", HOST)]);
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::AccessDenied
    );
    let p = parts(
        "GET",
        "/b/k",
        &[("host", HOST), ("authorization", "Bearer x")],
    );
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::InvalidArgument
    );
    let p = parts(
        "GET",
        "/b/k",
        &[
            ("host", HOST),
            ("authorization", "AWS4-ECDSA-P256-SHA256 Credential=x"),
        ],
    );
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::NotImplemented
    );
    let p = parts(
        "GET",
        "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256",
        &[("host", HOST), ("authorization", &authz("host", GET_SIG))],
    );
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::InvalidArgument
    );
}

const PRESIGNED: &str = "/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";

#[test]
fn aws_example_presigned() {
    let c = cfg();
    let p = parts("GET", PRESIGNED, &[("host", HOST)]);
    let auth = verify_request(&p, &c, at(3600)).unwrap();
    assert_eq!(
        auth,
        Authenticated {
            access_key: AK.into(),
            service: "s3",
            payload: PayloadCheck::Unsigned
        }
    );
    // Valid from 15 minutes before X-Amz-Date until X-Amz-Expires after it.
    verify_request(&p, &c, at(-900)).unwrap();
    verify_request(&p, &c, at(86_400)).unwrap();
    let e = verify_request(&p, &c, at(86_401)).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (S3ErrorCode::AccessDenied, "Request has expired")
    );
    let e = verify_request(&p, &c, at(-901)).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (S3ErrorCode::AccessDenied, "Request is not valid yet")
    );
    // Tampering with any signed part.
    for (from, to) in [
        ("X-Amz-Expires=86400", "X-Amz-Expires=86401"),
        ("/test.txt", "/test.tx"),
        ("aeeed9bb", "aeeed9bc"),
        ("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=host&x=1"),
    ] {
        let p = parts("GET", &PRESIGNED.replace(from, to), &[("host", HOST)]);
        assert_eq!(
            code(verify_request(&p, &c, at(0))),
            S3ErrorCode::SignatureDoesNotMatch,
            "{to}"
        );
    }
    let p = parts("GET", PRESIGNED, &[("host", "evil.example.com")]);
    assert_eq!(
        code(verify_request(&p, &c, at(0))),
        S3ErrorCode::SignatureDoesNotMatch
    );
}

/// An `x-amz-*` header outside the signed list is refused, for header auth and presigned URLs,
/// with S3's error and the header's name; the same requests without it pass (the AWS examples).
#[test]
fn unsigned_amz_headers_are_refused() {
    let c = cfg();
    let not_signed = |p: &Parts, now| {
        let e = verify_request(p, &c, now).expect_err("an unsigned x-amz-* header was accepted");
        (e.code, e.message, e.headers_not_signed)
    };
    let refusal = |name: &str| {
        (
            S3ErrorCode::AccessDenied,
            "There were headers present in the request which were not signed".to_string(),
            Some(name.to_string()),
        )
    };
    // Header auth: the control passes, the same request with an added header does not.
    verify_request(&get_example(GET_SIG), &c, at(0)).unwrap();
    for (name, value) in [
        ("x-amz-copy-source", "/other-bucket/private"),
        ("x-amz-meta-owner", "mallory"),
        ("X-Amz-Acl", "public-read"),
    ] {
        let mut p = get_example(GET_SIG);
        p.headers.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
        assert_eq!(not_signed(&p, at(0)), refusal(&name.to_ascii_lowercase()));
    }
    // Not x-amz-*: AWS's trace header, and headers S3 does not require signed.
    let mut p = get_example(GET_SIG);
    p.headers
        .insert("x-amzn-trace-id", "Root=1-abc".parse().unwrap());
    p.headers.insert("user-agent", "test".parse().unwrap());
    verify_request(&p, &c, at(0)).unwrap();
    // AWS's trailer example signs x-amz-trailer and x-amz-decoded-content-length: it passes.
    verify_request(&trailer_example(), &c, at(0)).unwrap();

    // Presigned: the control passes; an added header is refused.
    let get = |extra: &[(&str, &str)]| {
        let mut h = vec![("host", HOST)];
        h.extend_from_slice(extra);
        parts("GET", PRESIGNED, &h)
    };
    verify_request(&get(&[]), &c, at(3600)).unwrap();
    assert_eq!(
        not_signed(&get(&[("x-amz-copy-source", "/b/private")]), at(3600)),
        refusal("x-amz-copy-source")
    );
    assert_eq!(
        not_signed(&get(&[("x-amz-date", "20130524T000000Z")]), at(3600)),
        refusal("x-amz-date")
    );
    // x-amz-content-sha256 repeating the payload hash the URL binds is harmless; another value
    // (which would select another body verifier) is not.
    verify_request(
        &get(&[("x-amz-content-sha256", "UNSIGNED-PAYLOAD")]),
        &c,
        at(3600),
    )
    .unwrap();
    assert_eq!(
        not_signed(
            &get(&[("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")]),
            at(3600)
        ),
        refusal("x-amz-content-sha256")
    );
    // A bad signature is still SignatureDoesNotMatch, not a hint about headers.
    let p = parts(
        "GET",
        &PRESIGNED.replace("aeeed9bb", "aeeed9bc"),
        &[("host", HOST), ("x-amz-copy-source", "/b/private")],
    );
    assert_eq!(
        code(verify_request(&p, &c, at(3600))),
        S3ErrorCode::SignatureDoesNotMatch
    );
    let xml = crate::error::error_xml(&refusal_error(), "/b/k", "id");
    assert!(
        xml.contains("<HeadersNotSigned>x-amz-copy-source</HeadersNotSigned>"),
        "{xml}"
    );
}

fn refusal_error() -> S3Error {
    super::v4::headers_not_signed("x-amz-copy-source")
}

#[test]
fn presigned_failures() {
    let c = cfg();
    let check = |uri: String, expected: S3ErrorCode| {
        let p = parts("GET", &uri, &[("host", HOST)]);
        assert_eq!(code(verify_request(&p, &c, at(0))), expected, "{uri}");
    };
    check(
        PRESIGNED.replace("X-Amz-Expires=86400", "X-Amz-Expires=604801"),
        S3ErrorCode::AuthorizationQueryParametersError,
    );
    check(
        PRESIGNED.replace("X-Amz-Expires=86400", "X-Amz-Expires=soon"),
        S3ErrorCode::AuthorizationQueryParametersError,
    );
    // A negative lifetime is an expired URL (403), not a malformed one.
    check(
        PRESIGNED.replace("X-Amz-Expires=86400", "X-Amz-Expires=-1"),
        S3ErrorCode::AccessDenied,
    );
    check(
        PRESIGNED.replace("&X-Amz-SignedHeaders=host", ""),
        S3ErrorCode::AuthorizationQueryParametersError,
    );
    check(
        PRESIGNED.replace(
            "X-Amz-Algorithm=AWS4-HMAC-SHA256",
            "X-Amz-Algorithm=AWS4-HMAC-SHA1",
        ),
        S3ErrorCode::AuthorizationQueryParametersError,
    );
    check(
        PRESIGNED.replace("20130524T000000Z", "2013-05-24"),
        S3ErrorCode::AuthorizationQueryParametersError,
    );
    check(
        PRESIGNED.replace("us-east-1", "us-west-2"),
        S3ErrorCode::AuthorizationQueryParametersError,
    );
    // A far-future date overflows nothing.
    check(
        PRESIGNED
            .replace("20130524T000000Z", "99991231T235959Z")
            .replace("20130524", "99991231"),
        S3ErrorCode::AccessDenied,
    );
    check(
        PRESIGNED.replace("AKIAIOSFODNN7EXAMPLE", "UNKNOWNKEY"),
        S3ErrorCode::InvalidAccessKeyId,
    );
    let p = parts(
        "GET",
        &PRESIGNED.replace("us-east-1", "us-west-2"),
        &[("host", HOST)],
    );
    let e = verify_request(&p, &c, at(0)).unwrap_err();
    assert!(
        e.message
            .contains("the region 'us-west-2' is wrong; expecting 'us-east-1'"),
        "{e}"
    );
}

#[test]
fn aws_example_streaming_signed() {
    let a = authz(
        "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class",
        SEED,
    );
    let p = parts(
        "PUT",
        "/examplebucket/chunkObject.txt",
        &[
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ("x-amz-content-sha256", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("content-length", "66824"),
            ("authorization", &a),
        ],
    );
    let auth = verify_request(&p, &cfg(), at(0)).unwrap();
    let PayloadCheck::StreamingSigned { signer } = &auth.payload else {
        panic!("{:?}", auth.payload)
    };
    assert_eq!(hex::encode(signer.seed_signature()), SEED);
    assert_eq!(declared_size(&p), Some(66560));
    let body = example_body(SIGS, "\r\n");
    assert_eq!(body.len(), 66824);
    for piece in [1 << 20, 8192, 1000, 77] {
        assert_eq!(
            body_of(&p, &auth, body.clone(), piece).unwrap(),
            vec![b'a'; 66560]
        );
    }
    // Tampered data, truncated body.
    let mut bad = body.clone();
    bad[66_000] ^= 1;
    assert_eq!(
        body_of(&p, &auth, bad, 4096).unwrap_err().code,
        S3ErrorCode::SignatureDoesNotMatch
    );
    assert_eq!(
        body_of(&p, &auth, body[..body.len() - 90].to_vec(), 4096)
            .unwrap_err()
            .code,
        S3ErrorCode::IncompleteBody
    );
    // A trailer is not allowed with this payload mode.
    let mut q = p.clone();
    q.headers
        .insert("x-amz-trailer", "x-amz-checksum-crc32".parse().unwrap());
    assert!(verified_body(&q, &auth, stream_of(Vec::new(), 1)).is_err());
    // Without the decoded length the chunks say how long the body is (the handler bounds it).
    let mut q = p.clone();
    q.headers.remove("x-amz-decoded-content-length");
    assert_eq!(declared_size(&q), None);
    assert_eq!(
        body_of(&q, &auth, body.clone(), 4096).unwrap(),
        vec![b'a'; 66560]
    );
    assert_eq!(
        body_of(&q, &auth, body[..body.len() - 90].to_vec(), 4096)
            .unwrap_err()
            .code,
        S3ErrorCode::IncompleteBody
    );
}

fn trailer_example() -> Parts {
    let a = authz(
        "content-encoding;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer",
        TRAILER_SEED,
    );
    parts(
        "PUT",
        "/examplebucket/chunkObject.txt",
        &[
            ("host", "s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            (
                "x-amz-content-sha256",
                "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
            ),
            ("content-encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", "66560"),
            ("x-amz-trailer", "x-amz-checksum-crc32c"),
            ("authorization", &a),
        ],
    )
}

#[test]
fn aws_example_streaming_signed_trailer() {
    let p = trailer_example();
    let auth = verify_request(&p, &cfg(), at(0)).unwrap();
    assert!(matches!(
        auth.payload,
        PayloadCheck::StreamingSignedTrailer { .. }
    ));
    let tail =
        format!("x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:{TRAILER_SIG}\r\n\r\n");
    let body = example_body(TRAILER_SIGS, &tail);
    assert_eq!(
        body_of(&p, &auth, body.clone(), 5000).unwrap(),
        vec![b'a'; 66560]
    );
    // The trailer names a different checksum than x-amz-trailer declared.
    let mut q = p.clone();
    q.headers
        .insert("x-amz-trailer", "x-amz-checksum-crc32".parse().unwrap());
    assert_eq!(
        body_of(&q, &auth, body, 5000).unwrap_err().code,
        S3ErrorCode::InvalidRequest
    );
}

/// An aws-chunked body without signatures.
fn unsigned_chunked(data: &[u8], chunk: usize, trailer: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for c in data.chunks(chunk) {
        body.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        body.extend_from_slice(c);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n");
    body.extend_from_slice(trailer.as_bytes());
    body.extend_from_slice(b"\r\n");
    body
}

fn unsigned_trailer_parts(extra: &[(&str, &str)]) -> Parts {
    let mut h = vec![
        ("host", HOST),
        ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
        ("content-encoding", "aws-chunked"),
        ("x-amz-decoded-content-length", "11"),
    ];
    h.extend_from_slice(extra);
    parts("PUT", "/b/k", &h)
}

const UNSIGNED_TRAILER: Authenticated = Authenticated {
    access_key: String::new(),
    service: "s3",
    payload: PayloadCheck::StreamingUnsignedTrailer {},
};

#[test]
fn unsigned_trailer_checksums() {
    let p = unsigned_trailer_parts(&[
        ("x-amz-trailer", "x-amz-checksum-crc32"),
        ("x-amz-sdk-checksum-algorithm", "CRC32"),
    ]);
    let ok = unsigned_chunked(b"hello world", 4, "x-amz-checksum-crc32:DUoRhQ==\r\n");
    assert_eq!(
        body_of(&p, &UNSIGNED_TRAILER, ok, 3).unwrap(),
        b"hello world"
    );
    let bad = unsigned_chunked(b"hello world", 4, "x-amz-checksum-crc32:DUoRhA==\r\n");
    let e = body_of(&p, &UNSIGNED_TRAILER, bad, 3).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            S3ErrorCode::BadDigest,
            "The CRC32 you specified did not match the calculated checksum."
        )
    );
    let garbage = unsigned_chunked(b"hello world", 4, "x-amz-checksum-crc32:zz\r\n");
    assert_eq!(
        body_of(&p, &UNSIGNED_TRAILER, garbage, 3).unwrap_err().code,
        S3ErrorCode::InvalidRequest
    );
    let missing = unsigned_chunked(b"hello world", 4, "");
    assert_eq!(
        body_of(&p, &UNSIGNED_TRAILER, missing, 3).unwrap_err().code,
        S3ErrorCode::InvalidRequest
    );
    let tampered = unsigned_chunked(b"hellO world", 4, "x-amz-checksum-crc32:DUoRhQ==\r\n");
    assert_eq!(
        body_of(&p, &UNSIGNED_TRAILER, tampered, 3)
            .unwrap_err()
            .code,
        S3ErrorCode::BadDigest
    );
    // An undeclared trailer.
    let p = unsigned_trailer_parts(&[]);
    let ok = unsigned_chunked(b"hello world", 4, "x-amz-checksum-crc32:DUoRhQ==\r\n");
    assert_eq!(
        body_of(&p, &UNSIGNED_TRAILER, ok, 3).unwrap_err().code,
        S3ErrorCode::InvalidRequest
    );
    let none = unsigned_chunked(b"hello world", 4, "");
    assert_eq!(
        body_of(&p, &UNSIGNED_TRAILER, none, 3).unwrap(),
        b"hello world"
    );
}

#[test]
fn header_checksums() {
    let unsigned = Authenticated {
        access_key: AK.into(),
        service: "s3",
        payload: PayloadCheck::Unsigned,
    };
    let hello = b"hello world".to_vec();
    let mk = |h: &[(&str, &str)]| {
        let mut all = vec![("host", HOST), ("content-length", "11")];
        all.extend_from_slice(h);
        parts("PUT", "/b/k", &all)
    };
    let cases: Vec<(&str, String)> = checksum::ChecksumAlgorithm::ALL
        .into_iter()
        .map(|alg| {
            let mut c = checksum::Checksummer::new(alg);
            c.update(&hello);
            (alg.header_name(), c.finalize_base64())
        })
        .collect();
    for (name, value) in &cases {
        let p = mk(&[(name, value)]);
        assert_eq!(
            body_of(&p, &unsigned, hello.clone(), 2).unwrap(),
            hello,
            "{name}"
        );
        let e = body_of(&p, &unsigned, b"hello World".to_vec(), 2).unwrap_err();
        assert_eq!(e.code, S3ErrorCode::BadDigest, "{name}");
        assert!(
            e.message
                .contains(&name["x-amz-checksum-".len()..].to_uppercase()),
            "{e}"
        );
    }
    let err = |h: &[(&str, &str)]| {
        verified_body(&mk(h), &unsigned, stream_of(Vec::new(), 1))
            .err()
            .map(|e| e.code)
    };
    assert_eq!(
        err(&[
            ("x-amz-checksum-crc32", "DUoRhQ=="),
            ("x-amz-checksum-crc32c", "DUoRhQ==")
        ]),
        Some(S3ErrorCode::InvalidRequest)
    );
    // A value that is no digest of its algorithm (4 bytes for a CRC64) cannot match: BadDigest.
    assert_eq!(
        err(&[("x-amz-checksum-crc64nvme", "DUoRhQ==")]),
        Some(S3ErrorCode::BadDigest)
    );
    assert_eq!(
        err(&[("x-amz-checksum-sha256", "bad")]),
        Some(S3ErrorCode::BadDigest)
    );
    assert_eq!(
        err(&[
            ("x-amz-checksum-crc32", "DUoRhQ=="),
            ("x-amz-sdk-checksum-algorithm", "SHA256")
        ]),
        Some(S3ErrorCode::InvalidRequest)
    );
    assert_eq!(
        err(&[("x-amz-sdk-checksum-algorithm", "CRC32")]),
        Some(S3ErrorCode::InvalidRequest)
    );
    assert_eq!(
        err(&[("x-amz-trailer", "x-amz-checksum-crc32")]),
        Some(S3ErrorCode::InvalidRequest)
    );
    // x-amz-checksum-algorithm (CreateMultipartUpload) and -type are not checksum values.
    assert_eq!(
        err(&[
            ("x-amz-checksum-algorithm", "CRC32"),
            ("x-amz-checksum-type", "COMPOSITE")
        ]),
        None
    );
}

#[test]
fn transport_errors_pass_through() {
    let unsigned = Authenticated {
        access_key: AK.into(),
        service: "s3",
        payload: PayloadCheck::Unsigned,
    };
    let p = parts("PUT", "/b/k", &[("host", HOST)]);
    let items: Vec<std::io::Result<Bytes>> = vec![
        Ok(Bytes::from_static(b"abc")),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        )),
    ];
    let s = verified_body(&p, &unsigned, futures::stream::iter(items)).unwrap();
    let out: Vec<_> = block_on(s.collect());
    assert_eq!(out.len(), 2);
    let e = out[1].as_ref().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    assert!(s3_error_of(e).is_none());
}

#[test]
fn declared_sizes() {
    assert_eq!(
        declared_size(&parts("PUT", "/b/k", &[("content-length", "42")])),
        Some(42)
    );
    assert_eq!(declared_size(&parts("PUT", "/b/k", &[])), None);
    assert_eq!(
        declared_size(&parts(
            "PUT",
            "/b/k",
            &[
                ("content-length", "100"),
                ("content-encoding", "gzip, aws-chunked"),
                ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
                ("x-amz-decoded-content-length", "7")
            ]
        )),
        Some(7)
    );
    // `aws-chunked` in Content-Encoding without a STREAMING payload is a label, not a framing:
    // the body is plain and Content-Length is its size.
    assert_eq!(
        declared_size(&parts(
            "PUT",
            "/b/k",
            &[
                ("content-length", "100"),
                ("content-encoding", "aws-chunked"),
                ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
                ("x-amz-decoded-content-length", "7")
            ]
        )),
        Some(100)
    );
    assert_eq!(
        declared_size(&parts(
            "PUT",
            "/b/k",
            &[
                ("content-length", "100"),
                ("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
            ]
        )),
        None
    );
}

#[test]
fn secrets_stay_out_of_debug() {
    let shown = format!("{:?}", cfg());
    assert!(shown.contains(AK) && !shown.contains(SK), "{shown}");
    let auth = verify_request(&trailer_example(), &cfg(), at(0)).unwrap();
    let shown = format!("{auth:?}");
    assert!(shown.contains("redacted"), "{shown}");
    let PayloadCheck::StreamingSignedTrailer { signer } = &auth.payload else {
        panic!()
    };
    let key = super::v4::signing_key(SK, "20130524", "us-east-1", "s3");
    assert!(
        !shown.contains(&format!("{:?}", key[0..4].to_vec())) && !shown.contains(&hex::encode(key)),
        "{signer:?}"
    );
}

/// Requests signed by the `aws-sigv4` crate (the AWS Rust SDK's signer) verify, including keys and
/// queries that need encoding, presigned URLs, and chunk and trailer signatures.
mod aws_sigv4_signer {
    use super::*;
    use aws_sigv4::http_request::{
        sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
        SignatureLocation, SigningSettings, UriPathNormalizationMode,
    };
    use aws_smithy_runtime_api::client::identity::Identity;

    const REGION: &str = "eu-central-1";

    fn identity() -> Identity {
        aws_credential_types::Credentials::new("AKQUARRY", "s3cr3t/+key", None, None, "test").into()
    }

    fn config() -> AuthConfig {
        AuthConfig {
            credentials: vec![Credentials::new("AKQUARRY", "s3cr3t/+key")],
            keys: None,
            region: REGION.into(),
        }
    }

    fn settings(presign: bool) -> SigningSettings {
        let mut s = SigningSettings::default();
        s.percent_encoding_mode = PercentEncodingMode::Single;
        s.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        s.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        if presign {
            s.signature_location = SignatureLocation::QueryParams;
            s.expires_in = Some(Duration::from_secs(600));
        }
        s
    }

    /// Signs and returns the request as the server sees it.
    fn signed(
        method: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: SignableBody<'_>,
        presign: bool,
    ) -> Parts {
        let identity = identity();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(REGION)
            .name("s3")
            .time(at(0))
            .settings(settings(presign))
            .build()
            .unwrap()
            .into();
        let url = format!("http://localhost:9000{path_and_query}");
        let req = SignableRequest::new(method, url, headers.iter().copied(), body).unwrap();
        let (instructions, _) = sign(req, &params).unwrap().into_parts();
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
        let mut all: Vec<(&str, &str)> = vec![("host", "localhost:9000")];
        all.extend_from_slice(headers);
        all.extend(instructions.headers());
        parts(method, &uri, &all)
    }

    #[test]
    fn header_signed_requests_with_awkward_keys() {
        let data = b"some object bytes";
        let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(data));
        for path in [
            "/bucket/plain.txt",
            "/bucket/with%20space/and%2Bplus/%E2%82%AC%21%27%28%29%2A",
            "/bucket/a//b/./c/../d~e_f-g.h",
            "/bucket/?list-type=2&prefix=a%20b%2Fc&delimiter=%2F&start-after=%3D%26",
            "/bucket/key?uploads",
            "/bucket/key?partNumber=3&uploadId=a%2Bb",
        ] {
            let p = signed(
                "PUT",
                path,
                &[
                    ("x-amz-meta-note", "  two   spaces "),
                    ("content-type", "text/plain"),
                ],
                SignableBody::Bytes(data),
                false,
            );
            let auth =
                verify_request(&p, &config(), at(60)).unwrap_or_else(|e| panic!("{path}: {e}"));
            let mut expected = [0u8; 32];
            hex::decode_to_slice(&hash, &mut expected).unwrap();
            assert_eq!(auth.payload, PayloadCheck::Sha256(expected));
            assert_eq!(body_of(&p, &auth, data.to_vec(), 5).unwrap(), data);
            // Any change to a signed header breaks it.
            let mut q = p.clone();
            q.headers
                .insert("x-amz-meta-note", "changed".parse().unwrap());
            assert_eq!(
                code(verify_request(&q, &config(), at(60))),
                S3ErrorCode::SignatureDoesNotMatch,
                "{path}"
            );
        }
    }

    #[test]
    fn presigned_urls() {
        for path in ["/bucket/k%20ey%2B1", "/bucket/k?versionId=abc%3D"] {
            let p = signed("GET", path, &[], SignableBody::UnsignedPayload, true);
            assert!(
                p.uri.query().unwrap().contains("X%2DAmz%2DSignature="),
                "{:?}",
                p.uri
            );
            let auth =
                verify_request(&p, &config(), at(599)).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(auth.payload, PayloadCheck::Unsigned);
            assert_eq!(
                code(verify_request(&p, &config(), at(601))),
                S3ErrorCode::AccessDenied
            );
        }
    }

    /// Builds a signed aws-chunked body with `aws_sigv4::sign::v4::sign_chunk` / `sign_trailer`.
    fn chunked_body(
        seed: &str,
        data: &[u8],
        chunk: usize,
        trailer: Option<(&'static str, String)>,
    ) -> Vec<u8> {
        let identity = identity();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(REGION)
            .name("s3")
            .time(at(0))
            .settings(())
            .build()
            .unwrap();
        let mut prev = seed.to_string();
        let mut body = Vec::new();
        for c in data.chunks(chunk).chain(std::iter::once(&[][..])) {
            let sig = aws_sigv4::sign::v4::sign_chunk(&Bytes::copy_from_slice(c), &prev, &params)
                .unwrap()
                .signature()
                .to_string();
            body.extend_from_slice(format!("{:x};chunk-signature={sig}\r\n", c.len()).as_bytes());
            body.extend_from_slice(c);
            if !c.is_empty() {
                body.extend_from_slice(b"\r\n");
            }
            prev = sig;
        }
        match trailer {
            None => body.extend_from_slice(b"\r\n"),
            Some((name, value)) => {
                let mut headers = aws_smithy_runtime_api::http::Headers::new();
                headers.insert(name, value.clone());
                let sig = aws_sigv4::sign::v4::sign_trailer(&headers, &prev, &params)
                    .unwrap()
                    .signature()
                    .to_string();
                body.extend_from_slice(
                    format!("{name}:{value}\r\nx-amz-trailer-signature:{sig}\r\n\r\n").as_bytes(),
                );
            }
        }
        body
    }

    #[test]
    fn chunk_and_trailer_signatures() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let len = data.len().to_string();
        let mut crc = checksum::Checksummer::new(checksum::ChecksumAlgorithm::Crc64Nvme);
        crc.update(&data);
        let crc = crc.finalize_base64();
        for trailer in [false, true] {
            let mut headers = vec![
                ("content-encoding", "aws-chunked"),
                ("x-amz-decoded-content-length", len.as_str()),
            ];
            let body = if trailer {
                headers.push(("x-amz-trailer", "x-amz-checksum-crc64nvme"));
                SignableBody::StreamingSignedPayloadTrailer
            } else {
                SignableBody::Precomputed("STREAMING-AWS4-HMAC-SHA256-PAYLOAD".into())
            };
            let p = signed("PUT", "/bucket/big%20object", &headers, body, false);
            let auth = verify_request(&p, &config(), at(0)).unwrap();
            let seed = match &auth.payload {
                PayloadCheck::StreamingSigned { signer }
                | PayloadCheck::StreamingSignedTrailer { signer } => {
                    hex::encode(signer.seed_signature())
                }
                other => panic!("{other:?}"),
            };
            let wire = chunked_body(
                &seed,
                &data,
                65_536,
                trailer.then(|| ("x-amz-checksum-crc64nvme", crc.clone())),
            );
            assert_eq!(
                body_of(&p, &auth, wire.clone(), 10_000).unwrap(),
                data,
                "trailer={trailer}"
            );
            if trailer {
                // A wrong checksum, correctly signed: BadDigest.
                let wire = chunked_body(
                    &seed,
                    &data,
                    65_536,
                    Some(("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=".into())),
                );
                let e = body_of(&p, &auth, wire, 10_000).unwrap_err();
                assert_eq!(e.code, S3ErrorCode::BadDigest, "{e}");
            }
        }
    }
}

/// Signing keys are cached per scope: a secret changed under the same access key never verifies
/// with the old secret's key (refused), while the old secret still verifies (control).
#[test]
fn a_changed_secret_never_meets_a_cached_key() {
    let example = get_example(GET_SIG);
    assert!(verify_request(&example, &cfg(), at(0)).is_ok());
    let rotated = AuthConfig::new(vec![Credentials::new(AK, "a-new-secret-key")]);
    assert_eq!(
        code(verify_request(&example, &rotated, at(0))),
        S3ErrorCode::SignatureDoesNotMatch
    );
    assert!(verify_request(&example, &cfg(), at(0)).is_ok());
}

#[test]
fn an_empty_region_is_accepted_for_iam_and_sts_only() {
    // boto3 clients made with region_name='' (as ceph/s3-tests makes its IAM and STS clients)
    // sign with an empty region; S3 requests must still name the server's region.
    let c = cfg();
    for (scope, ok) in [
        ("AK/20130524//iam/aws4_request", true),
        ("AK/20130524//sts/aws4_request", true),
        ("AK/20130524/us-east-1/iam/aws4_request", true),
        ("AK/20130524//s3/aws4_request", false),
        ("AK/20130524/eu-west-1/iam/aws4_request", false),
        ("AK/20130524/us-east-1/s3/aws4_request", true),
    ] {
        let r = v4::Credential::parse(scope, v4::AuthKind::Header)
            .and_then(|cr| cr.check(v4::AuthKind::Header, &c, "20130524T000000Z"));
        assert_eq!(r.is_ok(), ok, "{scope}: {r:?}");
    }
}

#[test]
fn iam_and_sts_signed_as_us_east_1_are_accepted_by_a_server_of_another_region() {
    // AWS signs its global IAM and STS endpoints as us-east-1: a client of a server in another
    // region does the same for those services, and names the server's region for S3.
    let c = AuthConfig {
        region: "eu-west-3".into(),
        ..cfg()
    };
    for (scope, ok) in [
        ("AK/20130524/us-east-1/iam/aws4_request", true),
        ("AK/20130524/us-east-1/sts/aws4_request", true),
        ("AK/20130524/eu-west-3/iam/aws4_request", true),
        ("AK/20130524/eu-west-3/s3/aws4_request", true),
        ("AK/20130524/us-east-1/s3/aws4_request", false),
        ("AK/20130524/ap-south-1/iam/aws4_request", false),
    ] {
        let r = v4::Credential::parse(scope, v4::AuthKind::Header)
            .and_then(|cr| cr.check(v4::AuthKind::Header, &c, "20130524T000000Z"));
        assert_eq!(r.is_ok(), ok, "{scope}: {r:?}");
    }
}
