//! Encrypted objects over real local drives: round trips of every size and range (across
//! package, block and part boundaries), plaintext sizes in HEAD and listings, no plaintext on
//! the drives, and damage or misplaced data read as an error, never as wrong plaintext.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use quarry_crypt::ObjectKey;
use quarry_object::*;

/// 4 packages of 64 KiB per block.
const BLOCK: usize = 256 * 1024;

struct Fixture {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    layer: Arc<ErasureServer>,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (1..=4).map(|i| dir.path().join(format!("d{i}"))).collect();
    let cfg = ObjectConfig {
        block_size: BLOCK,
        inline_limit: 4 * 1024,
        ..Default::default()
    };
    let layer = ErasureServer::open_local(paths.clone(), cfg).await.unwrap();
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

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}

fn encryption(key: &ObjectKey, etag_is_md5: bool) -> Encryption {
    Encryption {
        key: key.clone(),
        record: [("kind".to_string(), "test".to_string())].into(),
        etag_is_md5,
    }
}

async fn put_enc(l: &ErasureServer, k: &str, d: &[u8], key: &ObjectKey) -> ObjectInfo {
    l.put_object(
        "bkt",
        k,
        body(d, 10_007),
        PutOptions {
            size: Some(d.len() as u64),
            encryption: Some(encryption(key, true)),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

fn opener(key: &ObjectKey) -> KeyOpener {
    let key = key.clone();
    Arc::new(move |_info: &ObjectInfo| Ok(key.clone()))
}

async fn get_dec(
    l: &ErasureServer,
    k: &str,
    range: Option<HttpRange>,
    key: &ObjectKey,
) -> Result<Vec<u8>> {
    let r = l
        .get_object_decrypted("bkt", k, None, range, opener(key))
        .await?;
    let mut out = Vec::new();
    let mut s = r.body;
    while let Some(b) = s.next().await {
        out.extend_from_slice(&b?);
    }
    assert_eq!(out.len() as u64, r.range.1);
    Ok(out)
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(files(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn every_size_and_range_round_trips() {
    let f = fixture().await;
    let key = ObjectKey::random().unwrap();
    let p = 65_536usize;
    for size in [
        0,
        1,
        100,
        p - 1,
        p,
        p + 1,
        BLOCK,
        BLOCK + 1,
        3 * BLOCK + p + 7,
    ] {
        let d = data(size, size as u8);
        let name = format!("o{size}");
        let info = put_enc(&f.layer, &name, &d, &key).await;
        assert_eq!(info.size, size as u64, "PUT answer size");
        assert_eq!(
            info.etag,
            hex::encode(<md5::Md5 as md5::Digest>::digest(&d)),
            "SSE-S3 style ETag"
        );
        assert!(info.is_encrypted());
        let head = f.layer.object_info("bkt", &name).await.unwrap();
        assert_eq!(head.size, size as u64, "HEAD size");
        assert_eq!(
            head.encryption.get("kind").map(String::as_str),
            Some("test")
        );
        assert!(!head
            .headers
            .keys()
            .any(|k| k.starts_with("x-quarry-internal")));
        assert_eq!(
            get_dec(&f.layer, &name, None, &key).await.unwrap(),
            d,
            "size {size}"
        );
        if size == 0 {
            continue;
        }
        let s = size as u64;
        let mut ranges = vec![(0, s - 1), (s - 1, s - 1), (s / 2, s - 1)];
        for b in [p as u64, BLOCK as u64, 2 * BLOCK as u64] {
            if b + 1 < s {
                ranges.push((b - 1, b));
                ranges.push((b, b));
                ranges.push((b - 1, (b + p as u64).min(s - 1)));
            }
        }
        for (a, z) in ranges {
            let got = get_dec(&f.layer, &name, Some(HttpRange::FromTo(a, z)), &key)
                .await
                .unwrap();
            assert_eq!(
                got,
                &d[a as usize..=z as usize],
                "size {size} range {a}-{z}"
            );
        }
        let got = get_dec(&f.layer, &name, Some(HttpRange::Suffix(3)), &key)
            .await
            .unwrap();
        assert_eq!(got, &d[size.saturating_sub(3)..]);
    }
    let list = f
        .layer
        .list_objects(
            "bkt",
            ListOptions {
                max_keys: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for o in list.objects {
        let want: u64 = o.key[1..].parse().unwrap();
        assert_eq!(o.size, want, "listed size of {}", o.key);
    }
}

#[tokio::test]
async fn no_key_or_a_wrong_key_reads_nothing() {
    let f = fixture().await;
    let key = ObjectKey::random().unwrap();
    let d = data(300_000, 1);
    put_enc(&f.layer, "k", &d, &key).await;
    // A plain GET (and a part GET) of an encrypted object: refused, never ciphertext.
    assert!(matches!(
        f.layer.get_object("bkt", "k", None).await,
        Err(Error::KeyRequired)
    ));
    assert!(f.layer.get_object_part("bkt", "k", 1).await.is_err());
    // The opener's refusal is the answer.
    let refuse: KeyOpener = Arc::new(|_: &ObjectInfo| Err(Error::WrongKey));
    assert!(matches!(
        f.layer
            .get_object_decrypted("bkt", "k", None, None, refuse)
            .await,
        Err(Error::WrongKey)
    ));
    // Another key: the first package does not authenticate, so the GET fails before a byte.
    let other = ObjectKey::random().unwrap();
    assert!(matches!(
        get_dec(&f.layer, "k", None, &other).await,
        Err(Error::Corrupt(_))
    ));
    assert!(
        get_dec(&f.layer, "k", Some(HttpRange::From(200_000)), &other)
            .await
            .is_err()
    );
    // Control: the right key.
    assert_eq!(get_dec(&f.layer, "k", None, &key).await.unwrap(), d);
}

#[tokio::test]
async fn the_drives_hold_no_plaintext() {
    let f = fixture().await;
    let key = ObjectKey::random().unwrap();
    let marker = b"QUARRY-PLAINTEXT-MARKER-7f3a";
    let mut d = Vec::new();
    while d.len() < 700_000 {
        d.extend_from_slice(marker);
    }
    put_enc(&f.layer, "big", &d, &key).await;
    put_enc(&f.layer, "small", &d[..1000], &key).await;
    let all: Vec<PathBuf> = f.paths.iter().flat_map(|p| files(p)).collect();
    assert!(all.len() > 8);
    for p in &all {
        let b = std::fs::read(p).unwrap();
        assert!(!contains(&b, marker), "plaintext marker in {}", p.display());
    }
    // Control: the same bytes stored in clear are found (the search works).
    f.layer
        .put_object(
            "bkt",
            "clear",
            body(&d[..1000], 1000),
            PutOptions {
                size: Some(1000),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let found = f
        .paths
        .iter()
        .flat_map(|p| files(p))
        .any(|p| contains(&std::fs::read(p).unwrap(), marker));
    assert!(found, "the clear copy is found on the drives");
}

fn data_dir_part(drive: &Path, key: &str) -> PathBuf {
    let obj = drive.join("bkt").join(key);
    let dd = std::fs::read_dir(&obj)
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_type().unwrap().is_dir())
        .unwrap();
    dd.path().join("part.1")
}

#[tokio::test]
async fn damage_beyond_parity_or_misplaced_data_is_an_error() {
    let f = fixture().await;
    let key = ObjectKey::random().unwrap();
    let a = data(600_000, 2);
    let b = data(600_000, 3);
    put_enc(&f.layer, "a", &a, &key).await;
    put_enc(&f.layer, "b", &b, &key).await;
    put_enc(&f.layer, "c", &a, &ObjectKey::random().unwrap()).await;

    // Another object's shards (of the same size, under another object key), whole and with
    // valid bitrot hashes, put in place of b's on every drive: b's GET must fail, never
    // return c's plaintext.
    for d in &f.paths {
        let from = data_dir_part(d, "c");
        let to = data_dir_part(d, "b");
        std::fs::copy(&from, &to).unwrap();
    }
    let got = get_dec(&f.layer, "b", None, &key).await;
    assert!(got.is_err(), "misplaced data must not read");
    assert!(
        get_dec(&f.layer, "b", Some(HttpRange::FromTo(70_000, 70_010)), &key)
            .await
            .is_err()
    );

    // A byte flipped in every shard file at the same place: beyond what parity repairs.
    for d in &f.paths {
        let p = data_dir_part(d, "a");
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[100] ^= 0x40;
        std::fs::write(&p, bytes).unwrap();
    }
    assert!(get_dec(&f.layer, "a", None, &key).await.is_err());
}
