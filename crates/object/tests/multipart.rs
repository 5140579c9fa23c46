//! Multipart uploads in the object layer over local drives: quorum with a drive that lost the
//! upload, empty parts, checksums computed through the hasher hook, and the expiry of stale uploads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use quarry_object::*;

const MIB: usize = 1 << 20;

fn cfg(expiry: Duration) -> ObjectConfig {
    ObjectConfig {
        parity: None,
        block_size: 64 * 1024,
        inline_limit: 4 * 1024,
        multipart_expiry: expiry,
        multipart_cleanup_interval: Duration::from_millis(100),
        ..Default::default()
    }
}

async fn open(paths: &[PathBuf], expiry: Duration) -> Arc<ErasureServer> {
    ErasureServer::open_local(paths.to_vec(), cfg(expiry))
        .await
        .unwrap()
}

fn drives(dir: &Path, n: usize) -> Vec<PathBuf> {
    (1..=n).map(|i| dir.join(format!("d{i}"))).collect()
}

fn body(data: &[u8]) -> ByteStream {
    let pieces: Vec<std::io::Result<Bytes>> = data
        .chunks(50_000)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(pieces))
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn part(l: &ErasureServer, key: &str, id: &str, n: u32, d: &[u8]) -> UploadedPart {
    l.put_object_part(
        "bkt",
        key,
        id,
        n,
        body(d),
        PartOptions {
            size: Some(d.len() as u64),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

async fn read_all(l: &ErasureServer, key: &str) -> Vec<u8> {
    let r = l.get_object("bkt", key, None).await.unwrap();
    let mut out = Vec::new();
    let mut s = r.body;
    while let Some(b) = s.next().await {
        out.extend_from_slice(&b.unwrap());
    }
    out
}

fn multipart_dir(drive: &Path) -> PathBuf {
    drive.join(".quarry.sys/multipart")
}

fn count_uploads(drive: &Path) -> usize {
    std::fs::read_dir(multipart_dir(drive))
        .map(|rd| {
            rd.flatten()
                .map(|h| std::fs::read_dir(h.path()).map_or(0, |r| r.count()))
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_drive_that_lost_the_upload_does_not_stop_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = drives(dir.path(), 4);
    let l = open(&paths, DEFAULT_MULTIPART_EXPIRY).await;
    l.make_bucket("bkt").await.unwrap();
    let up = l
        .new_multipart_upload("bkt", "k", NewUploadOptions::default())
        .await
        .unwrap();
    let p1 = data(5 * MIB, 1);
    let p2 = data(0, 2);
    let a = part(&l, "k", &up.upload_id, 1, &p1).await;
    // Drive 4 loses the upload (a wiped drive): 3 of 4 still hold it, above the write quorum.
    std::fs::remove_dir_all(multipart_dir(&paths[3])).unwrap();
    let b = part(&l, "k", &up.upload_id, 2, &p2).await;
    assert_eq!(b.size, 0);
    let listed = l
        .list_object_parts(
            "bkt",
            "k",
            &up.upload_id,
            ListPartsOptions {
                part_number_marker: 0,
                max_parts: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.parts, vec![a.clone(), b.clone()]);
    let info = l
        .complete_multipart_upload(
            "bkt",
            "k",
            &up.upload_id,
            vec![
                CompletePart {
                    number: 1,
                    etag: format!("\"{}\"", a.etag),
                    checksum: None,
                },
                CompletePart {
                    number: 2,
                    etag: b.etag.clone(),
                    checksum: None,
                },
            ],
            CompleteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(info.size, p1.len() as u64);
    assert!(info.etag.ends_with("-2"));
    assert_eq!(read_all(&l, "k").await, p1);
    // The object is healed onto drive 4 in the background.
    let meta = paths[3].join("bkt/k/quarry.meta");
    for _ in 0..100 {
        if meta.is_file() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(meta.is_file(), "the missing drive was not healed");
    for p in &paths {
        assert_eq!(count_uploads(p), 0, "{}", p.display());
    }
}

/// A part for an upload found on `removed` of 4 drives no more, after a control part taken while
/// it was on all: what `put_object_part` answers.
async fn part_after_the_upload_left(removed: usize) -> Result<UploadedPart> {
    let dir = tempfile::tempdir().unwrap();
    let paths = drives(dir.path(), 4);
    let l = open(&paths, DEFAULT_MULTIPART_EXPIRY).await;
    l.make_bucket("bkt").await.unwrap();
    let up = l
        .new_multipart_upload("bkt", "k", NewUploadOptions::default())
        .await
        .unwrap();
    part(&l, "k", &up.upload_id, 1, b"x").await;
    for p in &paths[..removed] {
        std::fs::remove_dir_all(multipart_dir(p)).unwrap();
    }
    l.put_object_part(
        "bkt",
        "k",
        &up.upload_id,
        2,
        body(b"y"),
        PartOptions::default(),
    )
    .await
}

#[tokio::test]
async fn too_few_drives_with_the_upload_is_no_such_upload() {
    let r = part_after_the_upload_left(3).await;
    assert!(matches!(r, Err(Error::NoSuchUpload)), "{r:?}");
}

/// An upload an abort has removed from half the drives so far (found on a read quorum, held by
/// fewer than a write needs): a part for it is refused as no such upload, which a client does not
/// retry, not as a 503 it would retry in vain.
#[tokio::test]
async fn a_part_for_an_upload_half_removed_is_no_such_upload() {
    let r = part_after_the_upload_left(2).await;
    assert!(matches!(r, Err(Error::NoSuchUpload)), "{r:?}");
}

struct Sum(u64);

impl PartHasher for Sum {
    fn update(&mut self, d: &[u8]) {
        self.0 += d.iter().map(|&b| b as u64).sum::<u64>();
    }
    fn finish(self: Box<Self>) -> String {
        self.0.to_string()
    }
}

#[tokio::test]
async fn part_checksums_come_from_the_hasher_of_the_uploads_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let paths = drives(dir.path(), 4);
    let l = open(&paths, DEFAULT_MULTIPART_EXPIRY).await;
    l.make_bucket("bkt").await.unwrap();
    let up = l
        .new_multipart_upload(
            "bkt",
            "k",
            NewUploadOptions {
                checksum_algorithm: Some("sum".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let asked2 = asked.clone();
    let hashers = ChecksumHashers(Arc::new(move |alg: &str| {
        asked2.lock().unwrap().push(alg.to_owned());
        (alg == "sum").then(|| Box::new(Sum(0)) as Box<dyn PartHasher>)
    }));
    let d = vec![2u8; 1000];
    let p = l
        .put_object_part(
            "bkt",
            "k",
            &up.upload_id,
            1,
            body(&d),
            PartOptions {
                size: Some(1000),
                content_md5: None,
                hashers: Some(hashers),
                key: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(p.checksum.as_deref(), Some("2000"));
    assert_eq!(p.checksum_algorithm.as_deref(), Some("sum"));
    assert_eq!(*asked.lock().unwrap(), ["sum"]);
    // Without hashers, an upload that needs checksums refuses the part.
    let r = l
        .put_object_part(
            "bkt",
            "k",
            &up.upload_id,
            2,
            body(&d),
            PartOptions::default(),
        )
        .await;
    assert!(r.is_err());
    // Complete checks the checksum the front end says it used.
    let r = l
        .complete_multipart_upload(
            "bkt",
            "k",
            &up.upload_id,
            vec![CompletePart {
                number: 1,
                etag: p.etag.clone(),
                checksum: Some("1999".into()),
            }],
            CompleteOptions::default(),
        )
        .await;
    assert!(matches!(r, Err(Error::InvalidPart(_))), "{r:?}");
}

#[tokio::test]
async fn stale_uploads_expire_in_the_background_and_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let paths = drives(dir.path(), 4);
    {
        let l = open(&paths, DEFAULT_MULTIPART_EXPIRY).await;
        l.make_bucket("bkt").await.unwrap();
        let up = l
            .new_multipart_upload("bkt", "old", NewUploadOptions::default())
            .await
            .unwrap();
        part(&l, "old", &up.upload_id, 1, &data(1000, 3)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A day of expiry: nothing goes.
        assert!(paths.iter().all(|p| count_uploads(p) == 1));
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Reopened with a one-second expiry: the start-up sweep removes it.
    let l = open(&paths, Duration::from_secs(1)).await;
    let mut gone = false;
    for _ in 0..40 {
        if paths.iter().all(|p| count_uploads(p) == 0) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the stale upload was not removed at start-up");
    // A new upload lives until it is older than the expiry, then goes too.
    let up = l
        .new_multipart_upload("bkt", "new", NewUploadOptions::default())
        .await
        .unwrap();
    assert!(paths.iter().all(|p| count_uploads(p) == 1));
    let mut gone = false;
    for _ in 0..60 {
        if paths.iter().all(|p| count_uploads(p) == 0) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the upload did not expire");
    let r = l.abort_multipart_upload("bkt", "new", &up.upload_id).await;
    assert!(matches!(r, Err(Error::NoSuchUpload)), "{r:?}");
}

#[tokio::test]
async fn uploads_go_with_their_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let paths = drives(dir.path(), 4);
    let l = open(&paths, DEFAULT_MULTIPART_EXPIRY).await;
    l.make_bucket("bkt").await.unwrap();
    let up = l
        .new_multipart_upload("bkt", "k", NewUploadOptions::default())
        .await
        .unwrap();
    part(&l, "k", &up.upload_id, 1, &data(10, 1)).await;
    let listed = l
        .list_multipart_uploads(
            "bkt",
            ListUploadsOptions {
                max_uploads: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.uploads, vec![up]);
    // An unfinished upload does not keep the bucket from being deleted, and goes with it.
    l.delete_bucket("bkt").await.unwrap();
    assert!(paths.iter().all(|p| count_uploads(p) == 0));
    l.make_bucket("bkt").await.unwrap();
    let listed = l
        .list_multipart_uploads(
            "bkt",
            ListUploadsOptions {
                max_uploads: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(listed.uploads.is_empty());
    assert!(matches!(
        l.list_multipart_uploads("nobucket", ListUploadsOptions::default())
            .await,
        Err(Error::BucketNotFound)
    ));
}
