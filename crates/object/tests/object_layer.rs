//! The object layer over real local drives in temp dirs: round trips, ranges, damage and heal,
//! listing against a reference, restart.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use quarry_object::*;
use rand::{Rng, SeedableRng};

const BLOCK: usize = 64 * 1024;

struct Fixture {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    layer: Arc<ErasureServer>,
}

fn cfg() -> ObjectConfig {
    ObjectConfig {
        parity: None,
        block_size: BLOCK,
        inline_limit: 4 * 1024,
        ..Default::default()
    }
}

async fn fixture(drives: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (1..=drives)
        .map(|i| dir.path().join(format!("d{i}")))
        .collect();
    let layer = ErasureServer::open_local(paths.clone(), cfg())
        .await
        .unwrap();
    layer.make_bucket("bkt").await.unwrap();
    Fixture {
        _dir: dir,
        paths,
        layer,
    }
}

fn body(data: &[u8], piece: usize) -> ByteStream {
    let pieces: Vec<std::io::Result<Bytes>> = data
        .chunks(piece.max(1))
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(pieces))
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

async fn put(l: &ErasureServer, key: &str, data: &[u8]) -> ObjectInfo {
    l.put_object(
        "bkt",
        key,
        body(data, 7777),
        PutOptions {
            size: Some(data.len() as u64),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

async fn get(l: &ErasureServer, key: &str, range: Option<HttpRange>) -> Result<Vec<u8>> {
    let r = l.get_object("bkt", key, range).await?;
    let mut out = Vec::new();
    let mut s = r.body;
    while let Some(b) = s.next().await {
        out.extend_from_slice(&b?);
    }
    assert_eq!(out.len() as u64, r.range.1);
    Ok(out)
}

fn md5_hex(data: &[u8]) -> String {
    use md5::Digest;
    hex::encode(md5::Md5::digest(data))
}

/// Paths of the files holding `key`'s shards, per drive: part.1 if any, else quarry.meta.
fn shard_files(f: &Fixture, key: &str) -> Vec<PathBuf> {
    f.paths
        .iter()
        .map(|p| {
            let obj = p.join("bkt").join(key);
            for e in std::fs::read_dir(&obj).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    let part = e.path().join("part.1");
                    if part.exists() {
                        return part;
                    }
                }
            }
            obj.join("quarry.meta")
        })
        .collect()
}

#[tokio::test]
async fn round_trip_sizes_and_layouts() {
    for drives in [1usize, 2, 4, 6] {
        let f = fixture(drives).await;
        for (i, size) in [
            0usize,
            1,
            100,
            4095,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            3 * BLOCK + 17,
        ]
        .into_iter()
        .enumerate()
        {
            let data = random(size, i as u64);
            let key = format!("obj-{size}");
            let info = put(&f.layer, &key, &data).await;
            assert_eq!(info.size, size as u64);
            assert_eq!(info.etag, md5_hex(&data));
            assert_eq!(
                get(&f.layer, &key, None).await.unwrap(),
                data,
                "{drives} drives, size {size}"
            );
            let head = f.layer.object_info("bkt", &key).await.unwrap();
            assert_eq!(head.etag, info.etag);
        }
    }
}

#[tokio::test]
async fn ranges_match_slices() {
    let f = fixture(4).await;
    let data = random(3 * BLOCK + 5, 9);
    put(&f.layer, "r", &data).await;
    let n = data.len() as u64;
    let cases = [
        (HttpRange::FromTo(0, 0), 0, 1),
        (
            HttpRange::FromTo(BLOCK as u64 - 3, BLOCK as u64 + 3),
            BLOCK as u64 - 3,
            7,
        ),
        (HttpRange::From(n - 10), n - 10, 10),
        (HttpRange::Suffix(5), n - 5, 5),
        (HttpRange::FromTo(5, n + 100), 5, n - 5),
        (HttpRange::Suffix(n + 100), 0, n),
    ];
    for (r, off, len) in cases {
        let got = get(&f.layer, "r", Some(r)).await.unwrap();
        assert_eq!(got, &data[off as usize..(off + len) as usize], "{r:?}");
    }
    assert!(matches!(
        get(&f.layer, "r", Some(HttpRange::From(n))).await,
        Err(Error::InvalidRange { .. })
    ));
}

#[tokio::test]
async fn content_md5_and_length_are_checked() {
    let f = fixture(4).await;
    let data = random(10_000, 1);
    let bad = f
        .layer
        .put_object(
            "bkt",
            "k",
            body(&data, 999),
            PutOptions {
                size: Some(data.len() as u64),
                content_md5: Some([0; 16]),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(bad, Err(Error::BadDigest)));
    let short = f
        .layer
        .put_object(
            "bkt",
            "k",
            body(&data, 999),
            PutOptions {
                size: Some(data.len() as u64 + 1),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(short, Err(Error::IncompleteBody { .. })));
    assert!(matches!(
        f.layer.object_info("bkt", "k").await,
        Err(Error::ObjectNotFound)
    ));
    // Nothing is left in tmp once the aborted writes are cleaned.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for p in &f.paths {
        let tmp = p.join(".quarry.sys/tmp");
        assert_eq!(
            std::fs::read_dir(&tmp).unwrap().count(),
            0,
            "{}",
            tmp.display()
        );
    }
}

/// Waits until every file has its original bytes back (the heal worker runs in the background).
async fn wait_restored(files: &[(PathBuf, Vec<u8>)]) {
    for _ in 0..200 {
        if files
            .iter()
            .all(|(p, want)| std::fs::read(p).map(|b| b == *want).unwrap_or(false))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let state: Vec<_> = files
        .iter()
        .map(|(p, want)| (p, std::fs::read(p).map(|b| b == *want)))
        .collect();
    panic!("shards were not healed: {state:?}");
}

/// Drive positions ordered by the 1-based shard index they hold for `key`.
fn positions_by_shard(f: &Fixture, key: &str) -> Vec<usize> {
    let mut v: Vec<(u8, usize)> = f
        .paths
        .iter()
        .enumerate()
        .map(|(pos, p)| {
            let b = std::fs::read(p.join("bkt").join(key).join("quarry.meta")).unwrap();
            (
                quarry_disk::ObjectMeta::from_bytes(&b)
                    .unwrap()
                    .erasure
                    .index,
                pos,
            )
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, pos)| pos).collect()
}

#[tokio::test]
async fn damaged_shards_are_read_around_and_healed_on_read() {
    let f = fixture(4).await;
    for (key, size) in [("big", 3 * BLOCK + 100), ("small", 1000)] {
        let data = random(size, 3);
        put(&f.layer, key, &data).await;
        let files = shard_files(&f, key);
        let originals: Vec<(PathBuf, Vec<u8>)> = files
            .iter()
            .map(|p| (p.clone(), std::fs::read(p).unwrap()))
            .collect();
        let by_shard = positions_by_shard(&f, key);
        let (d1, d2, p1) = (by_shard[0], by_shard[1], by_shard[2]);

        // Both data shards damaged (m = 2): one lost, one with flipped bits.
        std::fs::remove_file(&files[d1]).unwrap();
        let mut b = std::fs::read(&files[d2]).unwrap();
        let n = b.len();
        b[n - 5] ^= 0x01;
        if key == "big" {
            b[40] ^= 0xff;
        }
        std::fs::write(&files[d2], b).unwrap();
        assert_eq!(get(&f.layer, key, None).await.unwrap(), data, "{key}");
        wait_restored(&originals).await;

        // A lost parity shard is not needed by a GET, yet the GET notices and heals it.
        if key == "big" {
            std::fs::remove_file(&files[p1]).unwrap();
            assert_eq!(get(&f.layer, key, None).await.unwrap(), data);
            wait_restored(&originals).await;
        }
        let again = f.layer.heal_object("bkt", key).await.unwrap();
        assert!(
            again.healed.is_empty() && again.failed.is_empty(),
            "{key}: {again:?}"
        );

        // The healed shards are good: read with the two others gone.
        if key == "big" {
            std::fs::remove_file(&files[by_shard[2]]).unwrap();
            std::fs::remove_file(&files[by_shard[3]]).unwrap();
            assert_eq!(
                get(&f.layer, key, None).await.unwrap(),
                data,
                "{key} from healed shards"
            );
        }
    }
}

#[tokio::test]
async fn losing_more_than_parity_is_an_error_not_garbage() {
    let f = fixture(4).await;
    let data = random(2 * BLOCK, 4);
    put(&f.layer, "x", &data).await;
    let files = shard_files(&f, "x");
    for p in &files[..3] {
        std::fs::write(p, b"garbage that is not a shard").unwrap();
    }
    let r = get(&f.layer, "x", None).await;
    assert!(matches!(r, Err(Error::Corrupt(_))), "{r:?}");
}

#[tokio::test]
async fn listing_matches_a_reference() {
    let f = fixture(4).await;
    let keys = [
        "a",
        "a-c",
        "a/b",
        "a/c/d",
        "a/c/e",
        "a/",
        "b",
        "b/x/y",
        "c d",
        "ü/1",
        "z+%",
        "photos/2024/1.jpg",
        "photos/2024/2.jpg",
        "photos/2025/1.jpg",
        "photos/x",
    ];
    for k in keys {
        put(&f.layer, k, k.as_bytes()).await;
    }
    let mut sorted: Vec<&str> = keys.to_vec();
    sorted.sort();
    for prefix in ["", "a", "a/", "photos/", "photos/2024/", "zz"] {
        for delimiter in [None, Some("/"), Some("-")] {
            // Reference: S3 semantics over the sorted key list.
            let mut want: Vec<String> = Vec::new();
            for k in &sorted {
                if !k.starts_with(prefix) {
                    continue;
                }
                let entry = match delimiter {
                    Some(d) => match k[prefix.len()..].find(d) {
                        Some(i) => k[..prefix.len() + i + d.len()].to_string(),
                        None => k.to_string(),
                    },
                    None => k.to_string(),
                };
                if want.last() != Some(&entry) {
                    want.push(entry);
                }
            }
            for max_keys in [1usize, 2, 3, 1000] {
                let mut got = Vec::new();
                let mut marker = None;
                loop {
                    let page = f
                        .layer
                        .list_objects(
                            "bkt",
                            ListOptions {
                                prefix: prefix.into(),
                                marker: marker.clone(),
                                delimiter: delimiter.map(String::from),
                                max_keys,
                            },
                        )
                        .await
                        .unwrap();
                    assert!(page.objects.len() + page.common_prefixes.len() <= max_keys);
                    let mut names: Vec<String> =
                        page.objects.iter().map(|o| o.key.clone()).collect();
                    names.extend(page.common_prefixes.iter().cloned());
                    names.sort();
                    got.extend(names);
                    if !page.is_truncated {
                        break;
                    }
                    marker = page.next_marker.clone();
                    assert!(marker.is_some());
                }
                assert_eq!(
                    got, want,
                    "prefix {prefix:?} delimiter {delimiter:?} max {max_keys}"
                );
            }
        }
    }
}

#[tokio::test]
async fn buckets_and_deletes() {
    let f = fixture(4).await;
    assert!(matches!(
        f.layer.make_bucket("bkt").await,
        Err(Error::BucketExists)
    ));
    assert!(matches!(
        f.layer.make_bucket("Bad_Name").await,
        Err(Error::InvalidBucketName(_))
    ));
    put(&f.layer, "k", b"v").await;
    assert!(matches!(
        f.layer.delete_bucket("bkt").await,
        Err(Error::BucketNotEmpty)
    ));
    f.layer.delete_object("bkt", "k").await.unwrap();
    f.layer.delete_object("bkt", "k").await.unwrap(); // absent: still fine
    assert!(matches!(
        f.layer.object_info("bkt", "k").await,
        Err(Error::ObjectNotFound)
    ));
    assert!(matches!(
        f.layer.object_info("nope", "k").await,
        Err(Error::BucketNotFound)
    ));
    f.layer.delete_bucket("bkt").await.unwrap();
    assert!(f.layer.list_buckets().await.unwrap().is_empty());
}

/// A listing tells a missing bucket from its walks alone, as the bucket check it no longer
/// makes would: the bucket on a read quorum of drives lists (also with `max-keys` 0); on fewer,
/// with the others saying it is missing, it is `BucketNotFound`; a bucket that never existed
/// too.
#[tokio::test]
async fn listing_finds_a_missing_bucket_from_its_walks() {
    let f = fixture(4).await;
    put(&f.layer, "k", b"v").await;
    let list_in = |bucket, max_keys| {
        f.layer.list_objects(
            bucket,
            ListOptions {
                max_keys,
                ..Default::default()
            },
        )
    };
    let list = |max_keys| list_in("bkt", max_keys);
    assert!(matches!(
        list_in("nope", 1000).await,
        Err(Error::BucketNotFound)
    ));
    assert!(matches!(
        list_in("nope", 0).await,
        Err(Error::BucketNotFound)
    ));
    // Gone from two drives of four (2+2): a read quorum still has it.
    for p in &f.paths[..2] {
        std::fs::remove_dir_all(p.join("bkt")).unwrap();
    }
    let page = list(1000).await.unwrap();
    assert_eq!(page.objects.len(), 1, "{page:?}");
    assert!(list(0).await.unwrap().objects.is_empty());
    // Gone from a third: fewer than a read quorum have it.
    std::fs::remove_dir_all(f.paths[2].join("bkt")).unwrap();
    assert!(matches!(list(1000).await, Err(Error::BucketNotFound)));
    assert!(matches!(list(0).await, Err(Error::BucketNotFound)));
}

/// Names that cannot be buckets (the system volume, dot segments, upper case) are
/// `BucketNotFound` from every call that takes a bucket, before a drive is asked: a drive refuses
/// such a volume name, and those refusals used to read as a lost quorum (503, "read quorum lost").
/// The control: the same calls on a real bucket succeed.
#[tokio::test]
async fn names_that_cannot_be_buckets_are_not_found() {
    let f = fixture(4).await;
    put(&f.layer, "k", b"v").await;
    f.layer.bucket_info("bkt").await.unwrap();
    f.layer.object_info("bkt", "k").await.unwrap();
    f.layer
        .list_objects("bkt", ListOptions::default())
        .await
        .unwrap();
    for bad in [".quarry.sys", "..", ".", "Bad_Name", "a", ".quarry.sys/tmp"] {
        let not_found = |r: Result<()>, what: &str| {
            assert!(
                matches!(r, Err(Error::BucketNotFound)),
                "{what} on {bad:?}: {r:?}"
            )
        };
        not_found(f.layer.bucket_info(bad).await.map(drop), "bucket_info");
        not_found(f.layer.object_info(bad, "k").await.map(drop), "object_info");
        not_found(
            f.layer
                .list_objects(bad, ListOptions::default())
                .await
                .map(drop),
            "list_objects",
        );
        not_found(f.layer.delete_object(bad, "k").await, "delete_object");
        not_found(f.layer.delete_bucket(bad).await, "delete_bucket");
        not_found(
            f.layer
                .put_object(bad, "k", body(b"x", 1), PutOptions::default())
                .await
                .map(drop),
            "put_object",
        );
    }
}

#[tokio::test]
async fn reopen_keeps_objects_and_drive_order() {
    let f = fixture(4).await;
    let data = random(BLOCK * 2 + 1, 5);
    put(&f.layer, "keep", &data).await;
    drop(f.layer);
    // Drives given in another order keep their formatted positions.
    let mut paths = f.paths.clone();
    paths.reverse();
    let layer = ErasureServer::open_local(paths, cfg()).await.unwrap();
    assert_eq!(get(&layer, "keep", None).await.unwrap(), data);
}

#[tokio::test]
async fn concurrent_writers_of_one_key_never_mix() {
    let f = fixture(4).await;
    let a = random(2 * BLOCK, 10);
    let b = random(2 * BLOCK, 11);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let l = f.layer.clone();
        let d = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move { put(&l, "same", &d).await }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = get(&f.layer, "same", None).await.unwrap();
    assert!(got == a || got == b);
}

#[tokio::test]
async fn conditional_writes_are_atomic() {
    let f = fixture(4).await;
    let opts = |p: WritePrecondition| PutOptions {
        size: Some(3),
        precondition: Some(p),
        ..Default::default()
    };
    // Of many concurrent create-only writers, exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..8u8 {
        let l = f.layer.clone();
        let o = opts(WritePrecondition::IfNoneMatchAny);
        tasks.push(tokio::spawn(async move {
            l.put_object("bkt", "once", body(&[i, i, i], 1), o).await
        }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(Error::PreconditionFailed) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(won, 1);
    let etag = f.layer.object_info("bkt", "once").await.unwrap().etag;
    // If-Match: only with the current ETag (quoted or bare); absent key is NoSuchKey.
    let bad = f
        .layer
        .put_object(
            "bkt",
            "once",
            body(b"new", 3),
            opts(WritePrecondition::IfMatch("\"nope\"".into())),
        )
        .await;
    assert!(matches!(bad, Err(Error::PreconditionFailed)));
    f.layer
        .put_object(
            "bkt",
            "once",
            body(b"new", 3),
            opts(WritePrecondition::IfMatch(format!("\"{etag}\""))),
        )
        .await
        .unwrap();
    assert_eq!(get(&f.layer, "once", None).await.unwrap(), b"new");
    let missing = f
        .layer
        .put_object(
            "bkt",
            "absent",
            body(b"new", 3),
            opts(WritePrecondition::IfMatch("*".into())),
        )
        .await;
    assert!(matches!(missing, Err(Error::ObjectNotFound)));
}

#[tokio::test]
async fn healthy_objects_need_no_heal_whatever_their_size() {
    let f = fixture(4).await;
    for size in [0usize, 1, BLOCK, BLOCK + 1] {
        let key = format!("h{size}");
        put(&f.layer, &key, &random(size, size as u64)).await;
        let r = f.layer.heal_object("bkt", &key).await.unwrap();
        assert!(r.healed.is_empty() && r.failed.is_empty(), "{size}: {r:?}");
    }
}
