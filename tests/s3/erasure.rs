//! Erasure coding and healing on 4 drives (2 data + 2 parity): lose or corrupt up to two shards
//! and still read exact bytes, see the damaged shards healed, and get a clear error (never wrong
//! bytes) when three are gone.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use quarry_integration::*;

const MIB: usize = 1 << 20;
const HEAL_WAIT: Duration = Duration::from_secs(10);

/// What one drive holds for an object, captured while healthy.
struct Shard {
    drive: usize,
    /// 1-based shard index (1..=2 are data on 2+2).
    index: u64,
    meta: serde_json::Value,
    /// `part.1` path and bytes (large objects).
    part: Option<(PathBuf, Vec<u8>)>,
    /// Decoded inline bytes (small objects).
    inline: Option<Vec<u8>>,
}

fn capture(s: &TestServer, bucket: &str, key: &str) -> Vec<Shard> {
    let mut out = Vec::new();
    for d in 0..s.drive_count() {
        let meta = read_meta(s.drive_path(d), bucket, key)
            .unwrap_or_else(|| panic!("drive {d}: no readable quarry.meta for {bucket}/{key}"));
        let e = &meta["erasure"];
        assert_eq!(
            e["data"].as_u64(),
            Some(2),
            "drive {d}: 2 data shards on 4 drives: {e}"
        );
        assert_eq!(
            e["parity"].as_u64(),
            Some(2),
            "drive {d}: 2 parity shards on 4 drives: {e}"
        );
        let index = e["index"].as_u64().expect("erasure.index");
        let part = part_path(s.drive_path(d), bucket, key)
            .filter(|p| p.is_file())
            .map(|p| {
                let bytes = fs::read(&p).expect("read part");
                (p, bytes)
            });
        let inline = read_inline(s.drive_path(d), bucket, key);
        out.push(Shard {
            drive: d,
            index,
            meta,
            part,
            inline,
        });
    }
    let mut idx: Vec<u64> = out.iter().map(|s| s.index).collect();
    idx.sort();
    assert_eq!(idx, [1, 2, 3, 4], "each drive holds a distinct shard");
    out
}

/// Shards sorted by index: [data 1, data 2, parity 3, parity 4].
fn by_index(shards: &[Shard]) -> Vec<&Shard> {
    let mut v: Vec<&Shard> = shards.iter().collect();
    v.sort_by_key(|s| s.index);
    v
}

async fn put_large(s: &TestServer, key: &str, size: usize) -> (Vec<u8>, Vec<Shard>) {
    let data = random_bytes(size);
    put_bytes(&s.client(), "ecb", key, &data).await;
    let shards = capture(s, "ecb", key);
    let sizes: Vec<usize> = shards
        .iter()
        .map(|sh| {
            sh.part
                .as_ref()
                .map(|p| p.1.len())
                .unwrap_or_else(|| panic!("drive {}: {size}-byte object has no part.1", sh.drive))
        })
        .collect();
    assert!(
        sizes.iter().all(|&n| n == sizes[0]),
        "all shard files have the same size: {sizes:?}"
    );
    // Per block of 1 MiB: 2 chunks of 512 KiB, each framed by a 32-byte hash.
    let blocks = size.div_ceil(MIB);
    let last = size - (blocks - 1) * MIB;
    let want = (blocks - 1) * (32 + MIB / 2) + 32 + last.div_ceil(2);
    assert_eq!(
        sizes[0], want,
        "shard file size for {size} bytes: [blake3 32 B | chunk] per block"
    );
    for sh in &shards {
        assert!(
            sh.inline.is_none(),
            "drive {}: a large object is not inline",
            sh.drive
        );
    }
    (data, shards)
}

async fn put_small(s: &TestServer, key: &str, size: usize) -> (Vec<u8>, Vec<Shard>) {
    let data = random_bytes(size);
    put_bytes(&s.client(), "ecb", key, &data).await;
    let shards = capture(s, "ecb", key);
    for sh in &shards {
        assert!(
            sh.part.is_none(),
            "drive {}: a {size}-byte object has no part file",
            sh.drive
        );
        let inline = sh
            .inline
            .as_ref()
            .unwrap_or_else(|| panic!("drive {}: inline shard missing", sh.drive));
        assert_eq!(
            inline.len(),
            32 + size.div_ceil(2),
            "drive {}: inline shard is [blake3 | chunk]",
            sh.drive
        );
    }
    (data, shards)
}

/// Waits until every drive's part file is back, byte-identical to the healthy capture.
async fn expect_parts_healed(s: &TestServer, key: &str, shards: &[Shard]) {
    for sh in shards {
        let (_, want) = sh.part.as_ref().expect("captured part");
        let healed = wait_until(HEAL_WAIT, || {
            part_path(s.drive_path(sh.drive), "ecb", key)
                .and_then(|p| fs::read(p).ok())
                .is_some_and(|b| &b == want)
        })
        .await;
        let now = part_path(s.drive_path(sh.drive), "ecb", key).and_then(|p| fs::read(p).ok());
        assert!(
            healed,
            "drive {} (shard {}): part.1 not healed within {HEAL_WAIT:?}: now {:?} bytes, want {} bytes identical to before the damage",
            sh.drive,
            sh.index,
            now.map(|b| b.len()),
            want.len()
        );
        let meta =
            read_meta(s.drive_path(sh.drive), "ecb", key).expect("quarry.meta present after heal");
        assert_eq!(
            meta["etag"], sh.meta["etag"],
            "drive {}: metadata intact",
            sh.drive
        );
        assert_eq!(
            meta["erasure"], sh.meta["erasure"],
            "drive {}: erasure info intact",
            sh.drive
        );
    }
}

/// Waits until every drive's metadata is back with its original inline shard.
async fn expect_inline_healed(s: &TestServer, key: &str, shards: &[Shard]) {
    for sh in shards {
        let want = sh.inline.as_ref().expect("captured inline");
        let healed = wait_until(HEAL_WAIT, || {
            read_inline(s.drive_path(sh.drive), "ecb", key).is_some_and(|b| &b == want)
        })
        .await;
        assert!(
            healed,
            "drive {} (shard {}): inline shard not healed within {HEAL_WAIT:?}",
            sh.drive, sh.index
        );
        let meta = read_meta(s.drive_path(sh.drive), "ecb", key).expect("meta");
        for field in ["size", "etag", "erasure"] {
            assert_eq!(
                meta[field], sh.meta[field],
                "drive {}: {field} after heal",
                sh.drive
            );
        }
    }
}

async fn assert_reads_exact(s: &TestServer, key: &str, data: &[u8], what: &str) {
    let got = get_bytes(&s.client(), "ecb", key).await;
    assert_bytes_eq(&got, data, what);
}

/// How a GET of an unreadable object may fail.
#[derive(Clone, Copy, PartialEq)]
enum Failure {
    /// Shards are missing, which the server sees before it answers: a 5xx S3 error, nothing else.
    Clear5xx,
    /// Bit rot found while streaming: a 5xx, or a response cut short (connection closed) so the
    /// client knows the body is bad. Never a complete response.
    Cut,
}

/// A GET that must fail as `how` says; never returning a complete body.
async fn assert_read_fails(s: &TestServer, key: &str, data: &[u8], how: Failure) {
    match s.client().get_object().bucket("ecb").key(key).send().await {
        Err(e) => {
            let st = error_status(&e).unwrap_or(0);
            let clear = (500..600).contains(&st) && error_code(&e).is_some();
            assert!(
                clear || (how == Failure::Cut && st == 0),
                "GET of an unreadable object: want a 5xx S3 error, got {}",
                describe(&e)
            );
        }
        Ok(out) => {
            assert!(
                how == Failure::Cut,
                "GET with 3 of 4 shards missing answered {:?} bytes with a success status instead of a 5xx",
                out.content_length()
            );
            match out.body.collect().await {
                Err(_) => {} // the stream was cut: the client knows the body is bad
                Ok(b) => {
                    let b = b.into_bytes();
                    panic!(
                        "GET of an unreadable object succeeded with {} bytes ({}identical to the object)",
                        b.len(),
                        if b.as_ref() == data { "" } else { "NOT " }
                    );
                }
            }
        }
    }
}

async fn server() -> TestServer {
    let s = TestServer::start(4).await;
    s.create_bucket("ecb").await;
    s
}

#[tokio::test]
async fn large_object_survives_losing_both_data_shards_and_heals() {
    let s = server().await;
    let (data, shards) = put_large(&s, "big", 3 * MIB + 5).await;
    for sh in &by_index(&shards)[..2] {
        fs::remove_file(&sh.part.as_ref().expect("part").0).expect("delete data shard");
    }
    assert_reads_exact(&s, "big", &data, "GET with both data shards deleted").await;
    expect_parts_healed(&s, "big", &shards).await;
    assert_reads_exact(&s, "big", &data, "GET after heal").await;
}

#[tokio::test]
async fn large_object_survives_corrupted_shards_and_heals() {
    let s = server().await;
    let (data, shards) = put_large(&s, "big", 4 * MIB + 1234).await;
    let order = by_index(&shards);
    // Flip bytes inside the first chunk of data shard 1 and inside the last block of parity shard 3.
    let p1 = &order[0].part.as_ref().expect("part").0;
    flip_bytes(p1, 32 + 1000, 16);
    let p3 = order[2].part.as_ref().expect("part");
    flip_bytes(&p3.0, p3.1.len() as u64 - 10, 4);
    assert_reads_exact(&s, "big", &data, "GET with two corrupted shards").await;
    // A range in the damaged first block too.
    let r = s
        .client()
        .get_object()
        .bucket("ecb")
        .key("big")
        .range("bytes=1000-2999")
        .send()
        .await
        .expect("range GET");
    assert_bytes_eq(
        &r.body.collect().await.expect("body").into_bytes(),
        &data[1000..3000],
        "ranged GET on corrupted shard",
    );
    expect_parts_healed(&s, "big", &shards).await;
}

#[tokio::test]
async fn large_object_one_deleted_one_corrupted_data_shard() {
    let s = server().await;
    let (data, shards) = put_large(&s, "big", 3 * MIB + 77).await;
    let order = by_index(&shards);
    fs::remove_file(&order[1].part.as_ref().expect("part").0).expect("delete shard 2");
    // Corrupt every block's hash of data shard 1.
    let p1 = &order[0].part.as_ref().expect("part").0;
    for block in 0..4u64 {
        flip_bytes(p1, block * (32 + MIB as u64 / 2), 1);
    }
    // A range across the block boundary and the whole object.
    let r = s
        .client()
        .get_object()
        .bucket("ecb")
        .key("big")
        .range(format!("bytes={}-{}", MIB - 100, MIB + 100))
        .send()
        .await
        .expect("degraded range GET");
    assert_bytes_eq(
        &r.body.collect().await.expect("body").into_bytes(),
        &data[MIB - 100..=MIB + 100],
        "degraded range across blocks",
    );
    assert_reads_exact(
        &s,
        "big",
        &data,
        "GET with one deleted and one corrupted data shard",
    )
    .await;
    expect_parts_healed(&s, "big", &shards).await;
}

#[tokio::test]
async fn large_object_whole_data_dirs_and_metadata_lost() {
    // A drive that lost the object entirely (metadata and data dir) and one that lost only data.
    let s = server().await;
    let (data, shards) = put_large(&s, "big", 3 * MIB).await;
    let order = by_index(&shards);
    fs::remove_dir_all(object_dir(s.drive_path(order[0].drive), "ecb", "big"))
        .expect("remove object dir");
    let p4 = &order[3].part.as_ref().expect("part").0;
    fs::remove_dir_all(p4.parent().expect("data dir")).expect("remove data dir");
    assert_reads_exact(
        &s,
        "big",
        &data,
        "GET with one object dir and one data dir gone",
    )
    .await;
    expect_parts_healed(&s, "big", &shards).await;
}

#[tokio::test]
async fn large_object_three_shards_lost_is_an_error_not_wrong_bytes() {
    let s = server().await;
    let (data, shards) = put_large(&s, "big", 3 * MIB + 1).await;
    for sh in &by_index(&shards)[..3] {
        fs::remove_file(&sh.part.as_ref().expect("part").0).expect("delete shard");
    }
    assert_read_fails(&s, "big", &data, Failure::Clear5xx).await;
    // Other objects are unaffected, and the server is still up.
    let (other, _) = put_large(&s, "other", 2 * MIB + 3).await;
    assert_reads_exact(&s, "other", &other, "another object").await;
}

#[tokio::test]
async fn large_object_three_shards_corrupted_is_an_error_not_wrong_bytes() {
    let s = server().await;
    let (data, shards) = put_large(&s, "big", 3 * MIB + 1).await;
    for sh in &by_index(&shards)[..3] {
        let (p, bytes) = sh.part.as_ref().expect("part");
        // One bad byte in the middle of every block's chunk.
        let mut off = 32 + 100u64;
        while off < bytes.len() as u64 {
            flip_bytes(p, off, 1);
            off += 32 + MIB as u64 / 2;
        }
    }
    assert_read_fails(&s, "big", &data, Failure::Cut).await;
}

#[tokio::test]
async fn inline_object_survives_two_corrupted_shards_and_heals() {
    let s = server().await;
    let (data, shards) = put_small(&s, "small", 10_000).await;
    let order = by_index(&shards);
    for sh in &order[..2] {
        let mut bad = sh.inline.clone().expect("inline");
        let n = bad.len();
        bad[n / 2] ^= 0x55;
        bad[40] ^= 0x01;
        write_inline(s.drive_path(sh.drive), "ecb", "small", &bad);
    }
    assert_reads_exact(&s, "small", &data, "GET with two corrupted inline shards").await;
    expect_inline_healed(&s, "small", &shards).await;
}

#[tokio::test]
async fn inline_object_survives_two_lost_metadata_files_and_heals() {
    let s = server().await;
    let (data, shards) = put_small(&s, "small", 64 * 1024).await;
    let order = by_index(&shards);
    fs::remove_file(meta_path(s.drive_path(order[0].drive), "ecb", "small")).expect("rm meta");
    fs::remove_file(meta_path(s.drive_path(order[3].drive), "ecb", "small")).expect("rm meta");
    assert_reads_exact(&s, "small", &data, "GET with two metadata files gone").await;
    let h = s
        .client()
        .head_object()
        .bucket("ecb")
        .key("small")
        .send()
        .await
        .expect("HEAD degraded");
    assert_eq!(h.e_tag(), Some(etag_of(&data).as_str()));
    expect_inline_healed(&s, "small", &shards).await;
}

#[tokio::test]
async fn inline_object_three_corrupted_is_an_error() {
    let s = server().await;
    let (data, shards) = put_small(&s, "small", 5000).await;
    for sh in &by_index(&shards)[..3] {
        let mut bad = sh.inline.clone().expect("inline");
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        write_inline(s.drive_path(sh.drive), "ecb", "small", &bad);
    }
    assert_read_fails(&s, "small", &data, Failure::Cut).await;
}

#[tokio::test]
async fn inline_object_three_metadata_lost_is_not_found_or_error() {
    let s = server().await;
    let (_data, shards) = put_small(&s, "small", 5000).await;
    for sh in &by_index(&shards)[..3] {
        fs::remove_file(meta_path(s.drive_path(sh.drive), "ecb", "small")).expect("rm meta");
    }
    match s
        .client()
        .get_object()
        .bucket("ecb")
        .key("small")
        .send()
        .await
    {
        Ok(_) => panic!("GET succeeded with 1 of 4 metadata files"),
        Err(e) => {
            let st = error_status(&e).unwrap_or(0);
            let code = error_code(&e);
            assert!(
                (st == 404 && code.as_deref() == Some("NoSuchKey"))
                    || ((500..600).contains(&st) && code.is_some()),
                "1 of 4 metadata files: want 404 NoSuchKey or a 5xx S3 error, got {}",
                describe(&e)
            );
        }
    }
}

#[tokio::test]
async fn boundary_object_sizes_place_data_as_specified() {
    // Per-drive shard <= 128 KiB is inline: on 2+2 that is objects up to 256 KiB.
    let s = server().await;
    let (inline_max, _) = put_small(&s, "inline-max", 256 * 1024 - 64).await;
    let (not_inline, _) = put_large(&s, "just-over", 256 * 1024 + 4096).await;
    assert_reads_exact(&s, "inline-max", &inline_max, "largest inline").await;
    assert_reads_exact(&s, "just-over", &not_inline, "smallest non-inline").await;
}

async fn ready_status(s: &TestServer) -> u16 {
    reqwest::get(format!("{}/health/ready", s.endpoint()))
        .await
        .expect("GET /health/ready")
        .status()
        .as_u16()
}

/// Polls `/health/ready` for up to 5 s (the server may cache drive state briefly) until it
/// answers `want`; returns the last status seen.
async fn ready_becomes(s: &TestServer, want: u16) -> u16 {
    let mut last = 0;
    for _ in 0..50 {
        last = ready_status(s).await;
        if last == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    last
}

#[tokio::test]
async fn drives_going_offline_quorum_and_readiness() {
    let s = server().await;
    let c = s.client();
    let (big, _) = put_large(&s, "big", 2 * MIB + 1).await;
    put_bytes(&c, "ecb", "small", b"small object").await;
    assert_eq!(ready_status(&s).await, 200, "ready with 4 of 4 drives");

    let away = |i: usize| s.root().join(format!("away{i}"));
    // Two drives gone: read quorum (2) holds; write quorum (3 when data == parity) does not.
    for i in [1, 2] {
        fs::rename(s.drive_path(i), away(i)).expect("take drive away");
    }
    assert_eq!(
        ready_status(&s).await,
        200,
        "ready with 2 of 4 drives (read quorum)"
    );
    assert_reads_exact(&s, "big", &big, "GET with 2 of 4 drives offline").await;
    assert_eq!(get_bytes(&c, "ecb", "small").await, b"small object");
    let res = c
        .put_object()
        .bucket("ecb")
        .key("new")
        .body(b"no quorum".to_vec().into())
        .send()
        .await;
    match res {
        Ok(_) => panic!("PUT succeeded with 2 of 4 drives: below write quorum"),
        Err(e) => {
            let st = error_status(&e).unwrap_or(0);
            assert!(
                (500..600).contains(&st) && error_code(&e).is_some(),
                "PUT below write quorum: want a 5xx S3 error, got {}",
                describe(&e)
            );
        }
    }

    // A vanished drive (an unmounted disk) is not re-created by the write path: that would put
    // data on the wrong filesystem and make the drive look online again.
    for i in [1, 2] {
        assert!(
            !s.drive_path(i).exists(),
            "drive {i} was re-created by the server after it vanished: {:?}",
            list_files(s.drive_path(i))
        );
    }
    assert_eq!(
        ready_becomes(&s, 200).await,
        200,
        "still ready with 2 of 4 drives"
    );

    // Three gone: no read quorum.
    fs::rename(s.drive_path(3), away(3)).expect("take drive away");
    assert_eq!(
        ready_becomes(&s, 503).await,
        503,
        "not ready with 1 of 4 drives"
    );
    assert_read_fails(&s, "big", &big, Failure::Clear5xx).await;

    // All back: ready, and everything readable again.
    for i in [1, 2, 3] {
        fs::rename(away(i), s.drive_path(i)).expect("bring drive back");
    }
    assert_eq!(
        ready_becomes(&s, 200).await,
        200,
        "ready again once the drives are back"
    );
    assert_reads_exact(&s, "big", &big, "GET once the drives are back").await;
    assert_s3_error(
        c.get_object().bucket("ecb").key("new").send().await,
        404,
        "NoSuchKey",
    );
}
