//! Server-side encryption with aws-sdk-s3: SSE-S3, SSE-KMS and SSE-C round trips with their
//! response headers, AWS's refusals (missing, wrong or mismatched SSE-C keys, SSE-C over plain
//! HTTP, unknown KMS keys), bucket default encryption, ranges across package boundaries, no
//! plaintext on the drives, and damage beyond parity read as an error. Every test server has
//! the key service `KMS_TEST_KEYS` (testkey-1, testkey-2).

use std::path::{Path, PathBuf};

use base64::Engine;
use quarry_integration::aws_sdk_s3::types::{
    CompletedMultipartUpload, CompletedPart, ServerSideEncryption, ServerSideEncryptionByDefault,
    ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;

const B: &str = "sse";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// An SSE-C key and its MD5 header, from one byte.
fn customer(seed: u8) -> (String, String) {
    let k = [seed; 32];
    (b64(&k), md5_b64(&k))
}

async fn get_all(c: &Client, key: &str) -> Vec<u8> {
    c.get_object()
        .bucket(B)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {key}: {}", describe(&e)))
        .body
        .collect()
        .await
        .unwrap()
        .to_vec()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn drive_files(s: &TestServer) -> Vec<PathBuf> {
    (0..s.drive_count())
        .flat_map(|i| files(s.drive_path(i)))
        .collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn sse_s3_and_sse_kms_round_trip_with_their_headers() {
    let s = TestServer::start(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let data = random_bytes(300_000);

    let put = c
        .put_object()
        .bucket(B)
        .key("s3")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(data.clone().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT: {}", describe(&e)));
    assert_eq!(
        put.server_side_encryption,
        Some(ServerSideEncryption::Aes256)
    );
    // SSE-S3: the ETag is the MD5 of the data, as AWS gives it.
    assert_eq!(put.e_tag.as_deref(), Some(etag_of(&data).as_str()));
    let got = c.get_object().bucket(B).key("s3").send().await.unwrap();
    assert_eq!(
        got.server_side_encryption,
        Some(ServerSideEncryption::Aes256)
    );
    assert_eq!(got.content_length, Some(data.len() as i64));
    assert_bytes_eq(
        &got.body.collect().await.unwrap().to_vec(),
        &data,
        "SSE-S3 GET",
    );
    let head = c.head_object().bucket(B).key("s3").send().await.unwrap();
    assert_eq!(head.content_length, Some(data.len() as i64));
    assert_eq!(
        head.server_side_encryption,
        Some(ServerSideEncryption::Aes256)
    );

    // A range across the first package boundary (64 KiB) and one inside a later package.
    for (a, z) in [
        (65_530u64, 65_545u64),
        (200_000, 200_009),
        (0, 299_999),
        (299_990, 299_999),
    ] {
        let r = c
            .get_object()
            .bucket(B)
            .key("s3")
            .range(format!("bytes={a}-{z}"))
            .send()
            .await
            .unwrap();
        let body = r.body.collect().await.unwrap().to_vec();
        assert_bytes_eq(&body, &data[a as usize..=z as usize], "SSE-S3 range");
    }

    let ctx = b64(br#"{"project":"quarry"}"#);
    let put = c
        .put_object()
        .bucket(B)
        .key("kms")
        .server_side_encryption(ServerSideEncryption::AwsKms)
        .ssekms_key_id("testkey-2")
        .ssekms_encryption_context(&ctx)
        .body(data.clone().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT kms: {}", describe(&e)));
    assert_eq!(
        put.server_side_encryption,
        Some(ServerSideEncryption::AwsKms)
    );
    assert_eq!(put.ssekms_key_id.as_deref(), Some("testkey-2"));
    let got = c.get_object().bucket(B).key("kms").send().await.unwrap();
    assert_eq!(got.ssekms_key_id.as_deref(), Some("testkey-2"));
    assert_bytes_eq(
        &got.body.collect().await.unwrap().to_vec(),
        &data,
        "SSE-KMS GET",
    );

    // Refusals beside the passing calls above.
    assert_s3_error(
        c.put_object()
            .bucket(B)
            .key("nokey")
            .server_side_encryption(ServerSideEncryption::AwsKms)
            .ssekms_key_id("no-such-key")
            .body(b"x".to_vec().into())
            .send()
            .await,
        400,
        "InvalidArgument",
    );
    let r = s
        .signed(
            "PUT",
            &format!("/{B}/bad"),
            &[("x-amz-server-side-encryption-aws-kms-key-id", "testkey-2")],
            b"x".to_vec(),
        )
        .await;
    expect_raw_error(r, 400, "InvalidArgument").await;

    // Listings show plaintext sizes.
    let list = c.list_objects_v2().bucket(B).send().await.unwrap();
    for o in list.contents() {
        assert_eq!(o.size, Some(data.len() as i64), "{:?}", o.key);
    }
}

#[tokio::test]
async fn sse_c_over_https_needs_its_key() {
    let s = TestServer::start_https(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let data = random_bytes(200_000);
    let (key, md5) = customer(7);
    let (other, other_md5) = customer(8);

    let put = c
        .put_object()
        .bucket(B)
        .key("c")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key)
        .sse_customer_key_md5(&md5)
        .body(data.clone().into())
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT: {}", describe(&e)));
    assert_eq!(put.sse_customer_algorithm.as_deref(), Some("AES256"));
    assert_eq!(put.sse_customer_key_md5.as_deref(), Some(md5.as_str()));
    // Not the MD5 of the data (AWS: SSE-C ETags are not).
    assert_ne!(put.e_tag.as_deref(), Some(etag_of(&data).as_str()));

    let got = c
        .get_object()
        .bucket(B)
        .key("c")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key)
        .sse_customer_key_md5(&md5)
        .range("bytes=65000-140000")
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET: {}", describe(&e)));
    assert_eq!(got.sse_customer_algorithm.as_deref(), Some("AES256"));
    assert_bytes_eq(
        &got.body.collect().await.unwrap().to_vec(),
        &data[65_000..=140_000],
        "SSE-C range",
    );
    let head = c
        .head_object()
        .bucket(B)
        .key("c")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&key)
        .sse_customer_key_md5(&md5)
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length, Some(data.len() as i64));

    // No key, another key, a key whose MD5 is not its own.
    assert_s3_error(
        c.get_object().bucket(B).key("c").send().await,
        400,
        "InvalidRequest",
    );
    let head = c.head_object().bucket(B).key("c").send().await;
    assert_eq!(head.as_ref().err().and_then(error_status), Some(400));
    assert_s3_error(
        c.get_object()
            .bucket(B)
            .key("c")
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&other)
            .sse_customer_key_md5(&other_md5)
            .send()
            .await,
        400,
        "InvalidArgument",
    );
    let head = c
        .head_object()
        .bucket(B)
        .key("c")
        .sse_customer_algorithm("AES256")
        .sse_customer_key(&other)
        .sse_customer_key_md5(&other_md5)
        .send()
        .await;
    assert_eq!(head.as_ref().err().and_then(error_status), Some(400));
    assert_s3_error(
        c.put_object()
            .bucket(B)
            .key("c2")
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key)
            .sse_customer_key_md5(&other_md5)
            .body(b"x".to_vec().into())
            .send()
            .await,
        400,
        "InvalidArgument",
    );
    // SSE-C headers for an object that is not SSE-C.
    c.put_object()
        .bucket(B)
        .key("plain")
        .body(b"plain".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_s3_error(
        c.get_object()
            .bucket(B)
            .key("plain")
            .sse_customer_algorithm("AES256")
            .sse_customer_key(&key)
            .sse_customer_key_md5(&md5)
            .send()
            .await,
        400,
        "InvalidRequest",
    );
}

#[tokio::test]
async fn sse_c_is_refused_over_plain_http_unless_allowed() {
    let mut s = TestServer::start_single(4).await;
    s.create_bucket(B).await;
    let (key, md5) = customer(3);
    let put = |c: Client| {
        let (key, md5) = (key.clone(), md5.clone());
        async move {
            c.put_object()
                .bucket(B)
                .key("c")
                .sse_customer_algorithm("AES256")
                .sse_customer_key(key)
                .sse_customer_key_md5(md5)
                .body(b"secret".to_vec().into())
                .send()
                .await
        }
    };
    assert_s3_error(put(s.client()).await, 400, "InvalidRequest");
    s.set_env("QUARRY_SSE_C_ALLOW_HTTP", "1");
    s.restart().await;
    put(s.client())
        .await
        .unwrap_or_else(|e| panic!("PUT allowed over HTTP: {}", describe(&e)));
}

#[tokio::test]
async fn bucket_default_encryption_applies_to_writes_without_headers() {
    let s = TestServer::start(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let missing = c.get_bucket_encryption().bucket(B).send().await;
    assert_s3_error(
        missing,
        404,
        "ServerSideEncryptionConfigurationNotFoundError",
    );
    let rule = |alg: ServerSideEncryption, key: Option<&str>| {
        ServerSideEncryptionConfiguration::builder()
            .rules(
                ServerSideEncryptionRule::builder()
                    .apply_server_side_encryption_by_default(
                        ServerSideEncryptionByDefault::builder()
                            .sse_algorithm(alg)
                            .set_kms_master_key_id(key.map(str::to_string))
                            .build()
                            .unwrap(),
                    )
                    .build(),
            )
            .build()
            .unwrap()
    };
    c.put_bucket_encryption()
        .bucket(B)
        .server_side_encryption_configuration(rule(ServerSideEncryption::AwsKms, Some("testkey-2")))
        .send()
        .await
        .unwrap_or_else(|e| panic!("PutBucketEncryption: {}", describe(&e)));
    let got = c.get_bucket_encryption().bucket(B).send().await.unwrap();
    let conf = got.server_side_encryption_configuration.unwrap();
    let r = &conf.rules()[0];
    let d = r.apply_server_side_encryption_by_default().unwrap();
    assert_eq!(d.sse_algorithm(), &ServerSideEncryption::AwsKms);
    assert_eq!(d.kms_master_key_id(), Some("testkey-2"));

    let put = c
        .put_object()
        .bucket(B)
        .key("by-default")
        .body(b"hello".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(
        put.server_side_encryption,
        Some(ServerSideEncryption::AwsKms)
    );
    assert_eq!(put.ssekms_key_id.as_deref(), Some("testkey-2"));
    assert_eq!(get_all(&c, "by-default").await, b"hello");
    // An unknown key is refused when the rule is set.
    assert_s3_error(
        c.put_bucket_encryption()
            .bucket(B)
            .server_side_encryption_configuration(rule(ServerSideEncryption::AwsKms, Some("nope")))
            .send()
            .await,
        400,
        "InvalidArgument",
    );

    c.delete_bucket_encryption().bucket(B).send().await.unwrap();
    let put = c
        .put_object()
        .bucket(B)
        .key("after")
        .body(b"clear".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(put.server_side_encryption, None);
    let head = c
        .head_object()
        .bucket(B)
        .key("by-default")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.server_side_encryption,
        Some(ServerSideEncryption::AwsKms)
    );
}

#[tokio::test]
async fn the_drives_hold_no_plaintext_and_damage_is_an_error() {
    let s = TestServer::start(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let marker = b"QUARRY-SSE-MARKER-91c2d";
    let mut data = Vec::new();
    while data.len() < 3 << 20 {
        data.extend_from_slice(marker);
    }
    for (key, len) in [("big", data.len()), ("small", 1000)] {
        c.put_object()
            .bucket(B)
            .key(key)
            .server_side_encryption(ServerSideEncryption::Aes256)
            .body(data[..len].to_vec().into())
            .send()
            .await
            .unwrap();
    }
    let all = drive_files(&s);
    assert!(!all.is_empty());
    for p in &all {
        let b = std::fs::read(p).unwrap_or_default();
        assert!(!contains(&b, marker), "plaintext in {}", p.display());
    }
    // Control: the same bytes in clear are found.
    c.put_object()
        .bucket(B)
        .key("clear")
        .body(data[..1000].to_vec().into())
        .send()
        .await
        .unwrap();
    assert!(drive_files(&s)
        .iter()
        .any(|p| contains(&std::fs::read(p).unwrap_or_default(), marker)));

    // The same byte flipped in every shard file of "big": beyond parity, so the GET fails
    // (bitrot or authentication), never answering wrong plaintext.
    let shards: Vec<PathBuf> = drive_files(&s)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/big/") && p.ends_with("part.1"))
        .collect();
    assert_eq!(shards.len(), 4, "{shards:?}");
    for p in &shards {
        let mut b = std::fs::read(p).unwrap();
        b[40] ^= 0x01;
        std::fs::write(p, b).unwrap();
    }
    match c.get_object().bucket(B).key("big").send().await {
        Err(_) => {}
        Ok(r) => match r.body.collect().await {
            Err(_) => {}
            Ok(b) => panic!("a damaged object read back {} bytes", b.to_vec().len()),
        },
    }
    // An undamaged neighbour still reads.
    assert_eq!(get_all(&c, "small").await, &data[..1000]);
}

/// How an object is (to be) encrypted in the copy test.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Plain,
    S3,
    Kms,
    C(u8),
}

#[tokio::test]
async fn copy_between_sse_c_sse_s3_sse_kms_and_plain() {
    let s = TestServer::start_https(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let data = random_bytes(100_000);
    let sources = [Mode::Plain, Mode::S3, Mode::Kms, Mode::C(1)];
    let dests = [Mode::Plain, Mode::S3, Mode::Kms, Mode::C(2)];
    for (i, src) in sources.iter().enumerate() {
        let skey = format!("src{i}");
        let mut put = c
            .put_object()
            .bucket(B)
            .key(&skey)
            .body(data.clone().into());
        put = match *src {
            Mode::Plain => put,
            Mode::S3 => put.server_side_encryption(ServerSideEncryption::Aes256),
            Mode::Kms => put
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id("testkey-1"),
            Mode::C(seed) => {
                let (k, m) = customer(seed);
                put.sse_customer_algorithm("AES256")
                    .sse_customer_key(k)
                    .sse_customer_key_md5(m)
            }
        };
        put.send()
            .await
            .unwrap_or_else(|e| panic!("PUT {src:?}: {}", describe(&e)));
        for (j, dst) in dests.iter().enumerate() {
            let dkey = format!("dst{i}{j}");
            let mut cp = c
                .copy_object()
                .bucket(B)
                .key(&dkey)
                .copy_source(format!("{B}/{skey}"));
            if let Mode::C(seed) = *src {
                let (k, m) = customer(seed);
                cp = cp
                    .copy_source_sse_customer_algorithm("AES256")
                    .copy_source_sse_customer_key(k)
                    .copy_source_sse_customer_key_md5(m);
            }
            cp = match *dst {
                Mode::Plain => cp,
                Mode::S3 => cp.server_side_encryption(ServerSideEncryption::Aes256),
                Mode::Kms => cp
                    .server_side_encryption(ServerSideEncryption::AwsKms)
                    .ssekms_key_id("testkey-2"),
                Mode::C(seed) => {
                    let (k, m) = customer(seed);
                    cp.sse_customer_algorithm("AES256")
                        .sse_customer_key(k)
                        .sse_customer_key_md5(m)
                }
            };
            let out = cp
                .send()
                .await
                .unwrap_or_else(|e| panic!("COPY {src:?} -> {dst:?}: {}", describe(&e)));
            let mut get = c.get_object().bucket(B).key(&dkey);
            if let Mode::C(seed) = *dst {
                let (k, m) = customer(seed);
                get = get
                    .sse_customer_algorithm("AES256")
                    .sse_customer_key(k)
                    .sse_customer_key_md5(m);
            }
            let got = get
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET copy {src:?} -> {dst:?}: {}", describe(&e)));
            match *dst {
                Mode::Plain => assert_eq!(got.server_side_encryption, None),
                Mode::S3 => {
                    assert_eq!(
                        out.server_side_encryption,
                        Some(ServerSideEncryption::Aes256)
                    );
                    assert_eq!(
                        got.server_side_encryption,
                        Some(ServerSideEncryption::Aes256)
                    );
                }
                Mode::Kms => {
                    assert_eq!(out.ssekms_key_id.as_deref(), Some("testkey-2"));
                    assert_eq!(got.ssekms_key_id.as_deref(), Some("testkey-2"));
                }
                Mode::C(_) => {
                    assert_eq!(out.sse_customer_algorithm.as_deref(), Some("AES256"));
                    assert_eq!(got.sse_customer_algorithm.as_deref(), Some("AES256"));
                }
            }
            let body = got.body.collect().await.unwrap().to_vec();
            assert_bytes_eq(&body, &data, &format!("copy {src:?} -> {dst:?}"));
        }
    }
    // An SSE-C source without its key, or with another key: refused.
    assert_s3_error(
        c.copy_object()
            .bucket(B)
            .key("x")
            .copy_source(format!("{B}/src3"))
            .send()
            .await,
        400,
        "InvalidRequest",
    );
    let (k, m) = customer(9);
    assert_s3_error(
        c.copy_object()
            .bucket(B)
            .key("x")
            .copy_source(format!("{B}/src3"))
            .copy_source_sse_customer_algorithm("AES256")
            .copy_source_sse_customer_key(k)
            .copy_source_sse_customer_key_md5(m)
            .send()
            .await,
        400,
        "InvalidArgument",
    );
}

impl Mode {
    fn key(self) -> Option<(String, String)> {
        match self {
            Mode::C(seed) => Some(customer(seed)),
            _ => None,
        }
    }
}

/// The SSE headers of a write request in `mode` (the fluent builders have no common trait).
macro_rules! with_sse {
    ($req:expr, $mode:expr) => {{
        let req = $req;
        match $mode {
            Mode::Plain => req,
            Mode::S3 => req.server_side_encryption(ServerSideEncryption::Aes256),
            Mode::Kms => req
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id("testkey-1"),
            Mode::C(seed) => {
                let (k, m) = customer(seed);
                req.sse_customer_algorithm("AES256")
                    .sse_customer_key(k)
                    .sse_customer_key_md5(m)
            }
        }
    }};
}

/// The SSE-C key headers of a request (parts and reads), when `mode` is SSE-C.
macro_rules! with_key {
    ($req:expr, $mode:expr) => {{
        let req = $req;
        match Mode::key($mode) {
            Some((k, m)) => req
                .sse_customer_algorithm("AES256")
                .sse_customer_key(k)
                .sse_customer_key_md5(m),
            None => req,
        }
    }};
}

async fn upload_part(
    c: &Client,
    key: &str,
    id: &str,
    n: i32,
    data: &[u8],
    mode: Mode,
) -> Result<String, String> {
    with_key!(
        c.upload_part()
            .bucket(B)
            .key(key)
            .upload_id(id)
            .part_number(n)
            .body(data.to_vec().into()),
        mode
    )
    .send()
    .await
    .map(|r| {
        if let Mode::C(_) = mode {
            assert_eq!(r.sse_customer_algorithm.as_deref(), Some("AES256"));
            assert_eq!(r.sse_customer_key_md5, mode.key().map(|k| k.1));
        }
        r.e_tag.expect("a part ETag")
    })
    .map_err(|e| describe(&e))
}

fn completed(parts: &[(i32, &str)]) -> CompletedMultipartUpload {
    CompletedMultipartUpload::builder()
        .set_parts(Some(
            parts
                .iter()
                .map(|(n, e)| CompletedPart::builder().part_number(*n).e_tag(*e).build())
                .collect(),
        ))
        .build()
}

async fn read(
    c: &Client,
    key: &str,
    mode: Mode,
    range: Option<String>,
    part: Option<i32>,
) -> Vec<u8> {
    with_key!(
        c.get_object()
            .bucket(B)
            .key(key)
            .set_range(range.clone())
            .set_part_number(part),
        mode
    )
    .send()
    .await
    .unwrap_or_else(|e| {
        panic!(
            "GET {key} {mode:?} {range:?} part {part:?}: {}",
            describe(&e)
        )
    })
    .body
    .collect()
    .await
    .unwrap()
    .to_vec()
}

/// Multipart uploads in SSE-S3, SSE-KMS and SSE-C: every part sealed on its own (a part
/// uploaded again included), the response headers of each call, reads whole, by range across
/// part and package boundaries and by part number, plaintext sizes in ListParts and HEAD, and
/// no shard holding the plaintext.
#[tokio::test]
async fn multipart_uploads_encrypt_every_part() {
    let s = TestServer::start_https(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let marker = b"QUARRY-SSE-MP-MARKER-7e1a";
    let mut p1 = Vec::new();
    while p1.len() < (5 << 20) + 1000 {
        p1.extend_from_slice(marker);
    }
    let p3 = random_bytes(200_000);
    let whole = [p1.clone(), p3.clone()].concat();
    for (i, mode) in [Mode::S3, Mode::Kms, Mode::C(5)].into_iter().enumerate() {
        let key = format!("mp{i}");
        let created = with_sse!(c.create_multipart_upload().bucket(B).key(&key), mode)
            .send()
            .await
            .unwrap_or_else(|e| panic!("create {mode:?}: {}", describe(&e)));
        match mode {
            Mode::S3 => assert_eq!(
                created.server_side_encryption,
                Some(ServerSideEncryption::Aes256)
            ),
            Mode::Kms => assert_eq!(created.ssekms_key_id.as_deref(), Some("testkey-1")),
            _ => assert_eq!(created.sse_customer_algorithm.as_deref(), Some("AES256")),
        }
        let id = created.upload_id.unwrap();
        // Part 1 twice (the second upload replaces the first under a key of its own), part 3
        // after a gap: the stored parts are renumbered, their keys are not.
        upload_part(&c, &key, &id, 1, &random_bytes(1000), mode)
            .await
            .unwrap();
        let e1 = upload_part(&c, &key, &id, 1, &p1, mode).await.unwrap();
        let e3 = upload_part(&c, &key, &id, 3, &p3, mode).await.unwrap();
        if let Mode::S3 = mode {
            assert_eq!(e1, etag_of(&p1), "SSE-S3 part ETags are MD5s, as AWS");
        } else {
            assert_ne!(
                e1,
                etag_of(&p1),
                "SSE-KMS/C part ETags do not reveal the MD5"
            );
        }
        let listed = c
            .list_parts()
            .bucket(B)
            .key(&key)
            .upload_id(&id)
            .send()
            .await
            .unwrap();
        let sizes: Vec<i64> = listed.parts().iter().map(|p| p.size.unwrap()).collect();
        assert_eq!(
            sizes,
            vec![p1.len() as i64, p3.len() as i64],
            "plaintext sizes"
        );
        let done = c
            .complete_multipart_upload()
            .bucket(B)
            .key(&key)
            .upload_id(&id)
            .multipart_upload(completed(&[(1, &e1), (3, &e3)]))
            .send()
            .await
            .unwrap_or_else(|e| panic!("complete {mode:?}: {}", describe(&e)));
        match mode {
            Mode::S3 => assert_eq!(
                done.server_side_encryption,
                Some(ServerSideEncryption::Aes256)
            ),
            Mode::Kms => assert_eq!(done.ssekms_key_id.as_deref(), Some("testkey-1")),
            _ => {}
        }
        let head = with_key!(c.head_object().bucket(B).key(&key), mode)
            .send()
            .await
            .unwrap();
        assert_eq!(head.content_length, Some(whole.len() as i64));
        assert_bytes_eq(&read(&c, &key, mode, None, None).await, &whole, "whole");
        let edge = p1.len();
        for (a, z) in [
            (edge - 10, edge + 10),             // across the part boundary
            (65_530, 65_545),                   // across a package boundary of part 1
            (edge + 65_530, edge + 65_545),     // and of part 3
            (whole.len() - 5, whole.len() - 1), // the last bytes
        ] {
            let got = read(&c, &key, mode, Some(format!("bytes={a}-{z}")), None).await;
            assert_bytes_eq(&got, &whole[a..=z], &format!("{mode:?} {a}-{z}"));
        }
        assert_bytes_eq(&read(&c, &key, mode, None, Some(2)).await, &p3, "part 2");
        assert_bytes_eq(&read(&c, &key, mode, None, Some(1)).await, &p1, "part 1");
    }
    // Listings show each its plaintext size: the sum of its parts', which the drives' listing
    // view of the metadata keeps.
    let list = c.list_objects_v2().bucket(B).send().await.unwrap();
    assert!(!list.contents().is_empty());
    for o in list.contents() {
        assert_eq!(o.size, Some(whole.len() as i64), "{:?}", o.key);
    }
    // No shard of any of them holds the plaintext.
    for p in drive_files(&s) {
        let b = std::fs::read(&p).unwrap_or_default();
        assert!(!contains(&b, marker), "plaintext in {}", p.display());
    }
    // Control: the same parts in clear are found.
    let id = c
        .create_multipart_upload()
        .bucket(B)
        .key("clear")
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let e = upload_part(&c, "clear", &id, 1, &p1, Mode::Plain)
        .await
        .unwrap();
    c.complete_multipart_upload()
        .bucket(B)
        .key("clear")
        .upload_id(&id)
        .multipart_upload(completed(&[(1, &e)]))
        .send()
        .await
        .unwrap();
    assert!(drive_files(&s)
        .iter()
        .any(|p| contains(&std::fs::read(p).unwrap_or_default(), marker)));
}

/// AWS's refusals of parts of an SSE-C upload, each beside the request that passes: a part
/// without the key, with another key, with a key MD5 that is not the key's; an SSE-C key on
/// a part of an upload that did not ask for one; a part of another upload at complete.
#[tokio::test]
async fn multipart_sse_c_parts_need_the_upload_key() {
    let s = TestServer::start_https(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let mode = Mode::C(7);
    let data = random_bytes(100_000);
    let id = with_sse!(c.create_multipart_upload().bucket(B).key("c"), mode)
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let missing = upload_part(&c, "c", &id, 1, &data, Mode::Plain).await;
    assert!(missing.unwrap_err().contains("InvalidRequest"));
    let wrong = upload_part(&c, "c", &id, 1, &data, Mode::C(8)).await;
    assert!(wrong.unwrap_err().contains("InvalidArgument"));
    let (k, _) = customer(7);
    let bad_md5 = c
        .upload_part()
        .bucket(B)
        .key("c")
        .upload_id(&id)
        .part_number(1)
        .sse_customer_algorithm("AES256")
        .sse_customer_key(k)
        .sse_customer_key_md5(customer(8).1)
        .body(data.clone().into())
        .send()
        .await;
    assert_s3_error(bad_md5, 400, "InvalidArgument");
    // Control: the upload's key passes.
    let e1 = upload_part(&c, "c", &id, 1, &data, mode).await.unwrap();

    // An SSE-C key on a part of an SSE-S3 upload, beside its part without one.
    let other = with_sse!(c.create_multipart_upload().bucket(B).key("s"), Mode::S3)
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    let refused = upload_part(&c, "s", &other, 1, &data, mode).await;
    assert!(refused.unwrap_err().contains("InvalidRequest"));
    let e_other = upload_part(&c, "s", &other, 1, &data, Mode::S3)
        .await
        .unwrap();

    // A part of the other upload (its ETag) does not complete this one; its own part does.
    let complete = |etag: String| {
        let c = c.clone();
        let id = id.clone();
        async move {
            c.complete_multipart_upload()
                .bucket(B)
                .key("c")
                .upload_id(id)
                .multipart_upload(completed(&[(1, &etag)]))
                .send()
                .await
        }
    };
    assert_s3_error(complete(e_other).await, 400, "InvalidPart");
    complete(e1).await.unwrap();
    assert_bytes_eq(
        &read(&c, "c", mode, None, None).await,
        &data,
        "SSE-C upload",
    );
    // The completed object answers only to its key.
    assert_s3_error(
        c.get_object().bucket(B).key("c").send().await,
        400,
        "InvalidRequest",
    );
}

/// A bucket's default encryption applies to multipart uploads; UploadPartCopy reads an SSE-C
/// source with the copy-source key into an upload of another encryption.
#[tokio::test]
async fn multipart_default_encryption_and_part_copies() {
    let s = TestServer::start_https(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    c.put_bucket_encryption()
        .bucket(B)
        .server_side_encryption_configuration(
            ServerSideEncryptionConfiguration::builder()
                .rules(
                    ServerSideEncryptionRule::builder()
                        .apply_server_side_encryption_by_default(
                            ServerSideEncryptionByDefault::builder()
                                .sse_algorithm(ServerSideEncryption::Aes256)
                                .build()
                                .unwrap(),
                        )
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let src = random_bytes(300_000);
    let src_mode = Mode::C(3);
    with_sse!(
        c.put_object().bucket(B).key("src").body(src.clone().into()),
        src_mode
    )
    .send()
    .await
    .unwrap();
    let created = c
        .create_multipart_upload()
        .bucket(B)
        .key("dst")
        .send()
        .await
        .unwrap();
    assert_eq!(
        created.server_side_encryption,
        Some(ServerSideEncryption::Aes256),
        "the bucket default applies"
    );
    let id = created.upload_id.unwrap();
    let copy = |with_key: bool| {
        let c = c.clone();
        let id = id.clone();
        async move {
            let mut req = c
                .upload_part_copy()
                .bucket(B)
                .key("dst")
                .upload_id(id)
                .part_number(1)
                .copy_source(format!("{B}/src"))
                .copy_source_range("bytes=1000-250999");
            if with_key {
                let (k, m) = customer(3);
                req = req
                    .copy_source_sse_customer_algorithm("AES256")
                    .copy_source_sse_customer_key(k)
                    .copy_source_sse_customer_key_md5(m);
            }
            req.send().await
        }
    };
    // Without the source's key: refused; with it: copied.
    assert_s3_error(copy(false).await, 400, "InvalidRequest");
    let out = copy(true)
        .await
        .unwrap_or_else(|e| panic!("UploadPartCopy: {}", describe(&e)));
    assert_eq!(
        out.server_side_encryption,
        Some(ServerSideEncryption::Aes256)
    );
    let etag = out.copy_part_result.unwrap().e_tag.unwrap();
    c.complete_multipart_upload()
        .bucket(B)
        .key("dst")
        .upload_id(&id)
        .multipart_upload(completed(&[(1, &etag)]))
        .send()
        .await
        .unwrap();
    let got = c.get_object().bucket(B).key("dst").send().await.unwrap();
    assert_eq!(
        got.server_side_encryption,
        Some(ServerSideEncryption::Aes256)
    );
    let body = got.body.collect().await.unwrap().to_vec();
    assert_bytes_eq(&body, &src[1000..251_000], "part copy of an SSE-C source");
}

// ---- master-key rotation (`quarry admin kms rotate`) ----

/// `quarry admin <args...>` as root against `s`; returns (status ok, stdout, stderr).
async fn admin_cli(s: &TestServer, args: &[&str]) -> (bool, String, String) {
    let endpoint = s.endpoint();
    let out = tokio::process::Command::new(quarry_bin())
        .arg("admin")
        .args(args)
        .args([
            "--endpoint",
            &endpoint,
            "--access-key",
            s.access_key(),
            "--secret-key",
            s.secret_key(),
        ])
        .env_remove("QUARRY_ROOT_USER")
        .env_remove("QUARRY_ROOT_PASSWORD")
        .env_remove("QUARRY_ENDPOINT")
        .kill_on_drop(true)
        .output()
        .await
        .expect("run quarry admin");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every shard file (`part.N`) on the drives with its modification time and bytes.
fn shard_files(s: &TestServer) -> Vec<(PathBuf, std::time::SystemTime, Vec<u8>)> {
    let mut out: Vec<_> = drive_files(s)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("part.") && !n.ends_with(".meta"))
        })
        .map(|p| {
            let m = std::fs::metadata(&p).unwrap().modified().unwrap();
            let b = std::fs::read(&p).unwrap();
            (p, m, b)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every metadata file on the drives and its bytes.
fn meta_files(s: &TestServer) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<_> = drive_files(s)
        .into_iter()
        .filter(|p| p.file_name().and_then(|n| n.to_str()) == Some("quarry.meta"))
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    out.sort();
    out
}

/// SSE-S3 and SSE-KMS objects (two versions of one, a multi-block one) and an SSE-KMS upload in
/// progress under `testkey-1` are re-sealed under `testkey-2` by `quarry admin kms rotate`; the
/// server restarted with only `testkey-2` reads every one back byte for byte and completes the
/// upload, while an object the rotation was not given (another prefix) no longer opens. No shard
/// file is rewritten: their bytes and modification times are those from before the rotation.
#[tokio::test]
async fn kms_rotation_reseals_keys_without_rewriting_data() {
    let mut s = TestServer::start(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    c.put_bucket_versioning()
        .bucket(B)
        .versioning_configuration(
            quarry_integration::aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(quarry_integration::aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let ctx = b64(br#"{"project":"rotation"}"#);
    let (v1, v2, kms_data, big, plain, left) = (
        random_bytes(400_000),
        random_bytes(500_000),
        random_bytes(600_000),
        random_bytes(2_500_000),
        random_bytes(300_000),
        random_bytes(300_000),
    );
    let mut first_version = None;
    for data in [&v1, &v2] {
        let put = c
            .put_object()
            .bucket(B)
            .key("data/s3")
            .server_side_encryption(ServerSideEncryption::Aes256)
            .body(data.clone().into())
            .send()
            .await
            .unwrap();
        first_version.get_or_insert(put.version_id.unwrap());
    }
    let first_version = first_version.unwrap();
    c.put_object()
        .bucket(B)
        .key("data/kms")
        .server_side_encryption(ServerSideEncryption::AwsKms)
        .ssekms_key_id("testkey-1")
        .ssekms_encryption_context(&ctx)
        .body(kms_data.clone().into())
        .send()
        .await
        .unwrap();
    c.put_object()
        .bucket(B)
        .key("data/big")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(big.clone().into())
        .send()
        .await
        .unwrap();
    c.put_object()
        .bucket(B)
        .key("data/plain")
        .body(plain.clone().into())
        .send()
        .await
        .unwrap();
    c.put_object()
        .bucket(B)
        .key("other/s3")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(left.clone().into())
        .send()
        .await
        .unwrap();
    let up = c
        .create_multipart_upload()
        .bucket(B)
        .key("data/mp")
        .server_side_encryption(ServerSideEncryption::AwsKms)
        .ssekms_key_id("testkey-1")
        .send()
        .await
        .unwrap();
    let upload_id = up.upload_id.unwrap();
    let (p1, p2) = (random_bytes(5 << 20), random_bytes(1_000_000));
    let e1 = upload_part(&c, "data/mp", &upload_id, 1, &p1, Mode::Plain)
        .await
        .unwrap();

    let (ok, out, err) = admin_cli(&s, &["kms", "keys", "--json"]).await;
    assert!(ok, "{err}");
    let keys: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(keys["default"], "testkey-1");
    assert_eq!(keys["keys"][1]["id"], "testkey-2");
    assert!(!out.contains("MTEx"), "key bytes in the listing: {out}");

    let shards = shard_files(&s);
    assert!(
        shards.len() >= 8,
        "the objects have shard files: {shards:?}"
    );
    let (ok, out, err) = admin_cli(
        &s,
        &[
            "kms",
            "rotate",
            "--from",
            "testkey-1",
            "--to",
            "testkey-2",
            "--bucket",
            B,
            "--prefix",
            "data/",
            "--json",
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    // data/s3 (2 versions), data/kms, data/big, the upload; data/plain skipped.
    assert_eq!(r["resealed"], 5, "{out}");
    assert_eq!(r["scanned"], 6, "{out}");
    assert_eq!(r["skipped_reasons"]["not_encrypted"], 1, "{out}");
    assert_eq!(r["failed"], 0, "{out}");
    assert!(
        shards == shard_files(&s),
        "a shard file changed (bytes or mtime) in the rotation"
    );
    // Run again: nothing is left under the old key.
    let (ok, out, _) = admin_cli(
        &s,
        &[
            "kms",
            "rotate",
            "--from",
            "testkey-1",
            "--to",
            "testkey-2",
            "--bucket",
            B,
            "--prefix",
            "data/",
        ],
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("0 re-sealed"), "{out}");

    // Only the new key from now on.
    s.set_env(
        "QUARRY_KMS_SECRET_KEY",
        KMS_TEST_KEYS.split(',').nth(1).unwrap(),
    );
    s.restart().await;
    let c = s.client();
    assert_bytes_eq(&get_all(&c, "data/s3").await, &v2, "data/s3 after rotation");
    let old = c
        .get_object()
        .bucket(B)
        .key("data/s3")
        .version_id(&first_version)
        .send()
        .await
        .unwrap();
    assert_bytes_eq(
        &old.body.collect().await.unwrap().to_vec(),
        &v1,
        "data/s3's first version after rotation",
    );
    let got = c
        .get_object()
        .bucket(B)
        .key("data/kms")
        .send()
        .await
        .unwrap();
    assert_eq!(got.ssekms_key_id.as_deref(), Some("testkey-2"));
    assert_eq!(
        got.server_side_encryption,
        Some(ServerSideEncryption::AwsKms)
    );
    assert_bytes_eq(
        &got.body.collect().await.unwrap().to_vec(),
        &kms_data,
        "data/kms after rotation",
    );
    assert_bytes_eq(
        &get_all(&c, "data/big").await,
        &big,
        "data/big after rotation",
    );
    assert_bytes_eq(&get_all(&c, "data/plain").await, &plain, "data/plain");
    // The upload goes on under the new key.
    let e2 = upload_part(&c, "data/mp", &upload_id, 2, &p2, Mode::Plain)
        .await
        .unwrap();
    c.complete_multipart_upload()
        .bucket(B)
        .key("data/mp")
        .upload_id(&upload_id)
        .multipart_upload(completed(&[(1, &e1), (2, &e2)]))
        .send()
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    let mut whole = p1.clone();
    whole.extend_from_slice(&p2);
    assert_bytes_eq(&get_all(&c, "data/mp").await, &whole, "the rotated upload");
    // Not given to the rotation: still under the removed key, so it does not open.
    let e = c
        .get_object()
        .bucket(B)
        .key("other/s3")
        .send()
        .await
        .expect_err("an object under a removed master key opened");
    assert!(
        describe(&e).contains("InvalidArgument") || describe(&e).contains("does not exist"),
        "{}",
        describe(&e)
    );
}

/// The rotation is the root user's: an IAM user allowed every S3 action (its GET passes) is
/// refused the admin call, and the root user's call to an unknown key is a clear error that
/// changes no metadata file.
#[tokio::test]
async fn kms_rotation_is_refused_to_others_and_to_unknown_keys() {
    let s = TestServer::start(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let data = random_bytes(300_000);
    c.put_object()
        .bucket(B)
        .key("k")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .body(data.clone().into())
        .send()
        .await
        .unwrap();
    let (ak, sk) = crate::iam::user_with_key(&s, "rotator").await;
    crate::iam::ok(
        &crate::iam::call(
            &s,
            0,
            crate::iam::ROOT,
            "iam",
            &[
                ("Action", "PutUserPolicy"),
                ("UserName", "rotator"),
                ("PolicyName", "all"),
                (
                    "PolicyDocument",
                    r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#,
                ),
            ],
        )
        .await,
    );
    let user = s.client_with(&ak, &sk);
    // Control: the user's keys work.
    crate::iam::get(&user, B, "k").await.unwrap();
    let before = meta_files(&s);
    let path = format!("/quarry/admin/v1/kms/rotate?bucket={B}&from=testkey-1&to=testkey-2");
    let url = format!("{}{path}", s.endpoint());
    let signed = sign_headers(
        "POST",
        &url,
        &[],
        PayloadHash::Bytes(b""),
        &ak,
        &sk,
        std::time::SystemTime::now(),
    );
    let r = send_raw("POST", &url, &signed.headers, Vec::new()).await;
    assert_eq!(r.status().as_u16(), 403);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("<Code>AccessDenied</Code>"));
    let keys = format!("{}/quarry/admin/v1/kms/keys", s.endpoint());
    let signed = sign_headers(
        "GET",
        &keys,
        &[],
        PayloadHash::Bytes(b""),
        &ak,
        &sk,
        std::time::SystemTime::now(),
    );
    assert_eq!(
        send_raw("GET", &keys, &signed.headers, Vec::new())
            .await
            .status()
            .as_u16(),
        403
    );

    // Root, to a key the service does not have: refused before anything is read.
    let (ok, out, err) = admin_cli(
        &s,
        &[
            "kms",
            "rotate",
            "--from",
            "testkey-1",
            "--to",
            "no-such-key",
        ],
    )
    .await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("InvalidArgument") && err.contains("no-such-key"),
        "{err}"
    );
    let (ok, _, err) = admin_cli(
        &s,
        &["kms", "rotate", "--from", "testkey-1", "--to", "testkey-1"],
    )
    .await;
    assert!(!ok && err.contains("InvalidArgument"), "{err}");
    assert!(
        before == meta_files(&s),
        "a refused rotation changed metadata"
    );
    // The same call by root with a real key passes (and does change the metadata).
    let r = s.signed("POST", &path, &[], Vec::new()).await;
    assert_eq!(r.status().as_u16(), 200);
    let report: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(report["resealed"], 1, "{report}");
    assert!(before != meta_files(&s));
    assert_bytes_eq(&get_all(&c, "k").await, &data, "k after rotation");
}

/// UploadPartCopy into an SSE-C upload, as AWS documents it: the destination upload's key in
/// the `x-amz-server-side-encryption-customer-*` headers, the source's in the
/// `x-amz-copy-source-server-side-encryption-customer-*` ones. An SSE-C source under another key
/// and a plain source are copied; the wrong destination key, or none, is refused and writes no
/// part; the completed object reads with the destination key only.
#[tokio::test]
async fn upload_part_copy_into_an_sse_c_upload() {
    let s = TestServer::start_https(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let (src_c, src_plain) = (random_bytes(5 << 20), random_bytes(300_000));
    with_sse!(
        c.put_object()
            .bucket(B)
            .key("src-c")
            .body(src_c.clone().into()),
        Mode::C(5)
    )
    .send()
    .await
    .unwrap();
    c.put_object()
        .bucket(B)
        .key("src-plain")
        .body(src_plain.clone().into())
        .send()
        .await
        .unwrap();
    let dst = Mode::C(6);
    let id = with_sse!(c.create_multipart_upload().bucket(B).key("dst"), dst)
        .send()
        .await
        .unwrap()
        .upload_id
        .unwrap();
    // dest: the destination key's seed (None: no destination key); source_key: the SSE-C
    // source's seed.
    let copy = |n: i32, src: &'static str, dest: Option<u8>, source_key: Option<u8>| {
        let (c, id) = (c.clone(), id.clone());
        async move {
            let mut req = c
                .upload_part_copy()
                .bucket(B)
                .key("dst")
                .upload_id(id)
                .part_number(n)
                .copy_source(format!("{B}/{src}"));
            if let Some(seed) = dest {
                let (k, m) = customer(seed);
                req = req
                    .sse_customer_algorithm("AES256")
                    .sse_customer_key(k)
                    .sse_customer_key_md5(m);
            }
            if let Some(seed) = source_key {
                let (k, m) = customer(seed);
                req = req
                    .copy_source_sse_customer_algorithm("AES256")
                    .copy_source_sse_customer_key(k)
                    .copy_source_sse_customer_key_md5(m);
            }
            req.send().await
        }
    };
    // Refused: the wrong destination key, no destination key, the wrong source key.
    assert_s3_error(
        copy(1, "src-c", Some(7), Some(5)).await,
        400,
        "InvalidArgument",
    );
    assert_s3_error(copy(1, "src-c", None, Some(5)).await, 400, "InvalidRequest");
    assert_s3_error(
        copy(1, "src-c", Some(6), Some(7)).await,
        400,
        "InvalidArgument",
    );
    let parts = with_key!(c.list_parts().bucket(B).key("dst").upload_id(&id), dst)
        .send()
        .await
        .unwrap();
    assert!(parts.parts().is_empty(), "a refused copy wrote a part");

    // SSE-C source (key 5) -> SSE-C upload (key 6), then a plain source.
    let out = copy(1, "src-c", Some(6), Some(5))
        .await
        .unwrap_or_else(|e| panic!("UploadPartCopy from SSE-C: {}", describe(&e)));
    assert_eq!(out.sse_customer_algorithm.as_deref(), Some("AES256"));
    assert_eq!(out.sse_customer_key_md5, dst.key().map(|k| k.1));
    let e1 = out.copy_part_result.unwrap().e_tag.unwrap();
    let out = copy(2, "src-plain", Some(6), None)
        .await
        .unwrap_or_else(|e| panic!("UploadPartCopy from plain: {}", describe(&e)));
    assert_eq!(out.sse_customer_algorithm.as_deref(), Some("AES256"));
    let e2 = out.copy_part_result.unwrap().e_tag.unwrap();
    with_key!(
        c.complete_multipart_upload()
            .bucket(B)
            .key("dst")
            .upload_id(&id)
            .multipart_upload(completed(&[(1, &e1), (2, &e2)])),
        dst
    )
    .send()
    .await
    .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    let mut whole = src_c.clone();
    whole.extend_from_slice(&src_plain);
    assert_bytes_eq(&read(&c, "dst", dst, None, None).await, &whole, "dst");
    // A range across the part boundary.
    let a = src_c.len() - 10;
    assert_bytes_eq(
        &read(&c, "dst", dst, Some(format!("bytes={a}-{}", a + 19)), None).await,
        &whole[a..a + 20],
        "dst across parts",
    );
    // Only the destination key opens it.
    assert_s3_error(
        with_key!(c.get_object().bucket(B).key("dst"), Mode::C(5))
            .send()
            .await,
        400,
        "InvalidArgument",
    );
    assert_s3_error(
        c.get_object().bucket(B).key("dst").send().await,
        400,
        "InvalidRequest",
    );
}

/// A multipart upload in SSE-KMS with a key id and an encryption context: every call answers
/// the key id (and Create the context), the object reads back whole and by part, and HEAD
/// answers aws:kms, the key id and the context; the parts are sealed (no plaintext on the drives).
#[tokio::test]
async fn multipart_upload_with_sse_kms_key_and_context() {
    let s = TestServer::start(4).await;
    s.create_bucket(B).await;
    let c = s.client();
    let ctx = b64(br#"{"department":"finance"}"#);
    let marker = b"QUARRY-SSE-KMS-MP-MARKER-51c0";
    let mut p1 = random_bytes(5 << 20);
    p1[1_000_000..1_000_000 + marker.len()].copy_from_slice(marker);
    let p2 = random_bytes(700_000);
    let created = c
        .create_multipart_upload()
        .bucket(B)
        .key("mp-kms")
        .server_side_encryption(ServerSideEncryption::AwsKms)
        .ssekms_key_id("testkey-2")
        .ssekms_encryption_context(&ctx)
        .send()
        .await
        .unwrap_or_else(|e| panic!("create: {}", describe(&e)));
    assert_eq!(
        created.server_side_encryption,
        Some(ServerSideEncryption::AwsKms)
    );
    assert_eq!(created.ssekms_key_id.as_deref(), Some("testkey-2"));
    assert_eq!(
        created.ssekms_encryption_context.as_deref(),
        Some(ctx.as_str())
    );
    let id = created.upload_id.unwrap();
    let mut etags = Vec::new();
    for (n, data) in [(1, &p1), (2, &p2)] {
        let r = c
            .upload_part()
            .bucket(B)
            .key("mp-kms")
            .upload_id(&id)
            .part_number(n)
            .body(data.clone().into())
            .send()
            .await
            .unwrap_or_else(|e| panic!("part {n}: {}", describe(&e)));
        assert_eq!(r.server_side_encryption, Some(ServerSideEncryption::AwsKms));
        assert_eq!(r.ssekms_key_id.as_deref(), Some("testkey-2"));
        // SSE-KMS part ETags are not the plaintext's MD5 (as AWS).
        assert_ne!(r.e_tag.as_deref(), Some(etag_of(data).as_str()));
        etags.push(r.e_tag.unwrap());
    }
    let done = c
        .complete_multipart_upload()
        .bucket(B)
        .key("mp-kms")
        .upload_id(&id)
        .multipart_upload(completed(&[(1, &etags[0]), (2, &etags[1])]))
        .send()
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    assert_eq!(
        done.server_side_encryption,
        Some(ServerSideEncryption::AwsKms)
    );
    assert_eq!(done.ssekms_key_id.as_deref(), Some("testkey-2"));
    let mut whole = p1.clone();
    whole.extend_from_slice(&p2);
    let head = c
        .head_object()
        .bucket(B)
        .key("mp-kms")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.server_side_encryption,
        Some(ServerSideEncryption::AwsKms)
    );
    assert_eq!(head.ssekms_key_id.as_deref(), Some("testkey-2"));
    assert_eq!(head.content_length, Some(whole.len() as i64));
    assert!(
        head.e_tag.as_deref().is_some_and(|e| e.ends_with("-2\"")),
        "{:?}",
        head.e_tag
    );
    assert_bytes_eq(&get_all(&c, "mp-kms").await, &whole, "SSE-KMS multipart");
    assert_bytes_eq(
        &read(&c, "mp-kms", Mode::Kms, None, Some(2)).await,
        &p2,
        "part 2",
    );
    for f in drive_files(&s) {
        let bytes = std::fs::read(&f).unwrap();
        assert!(!contains(&bytes, marker), "plaintext in {}", f.display());
    }
}
