//! A drive replaced while the server runs (its directory emptied, `format.json` and all) is
//! formatted into its slot by the server's drive watch and healed in the background, with no
//! restart: the drive ends byte-identical to what it held, and a second replacement of the same
//! drive is healed again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_object::drive_heal::DriveHealPhase;
use quarry_object::*;

const BUCKET: &str = "bkt";
const WAIT: Duration = Duration::from_secs(30);

fn body(data: Vec<u8>) -> ByteStream {
    Box::pin(futures::stream::iter(vec![Ok(Bytes::from(data))]))
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

/// The files a heal is responsible for: the bucket's objects, the configuration blobs (the
/// system namespace's included) and uploads in progress; not `format.json`, not tmp.
fn drive_files(drive: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![
        drive.join(BUCKET),
        drive.join(".quarry.sys/buckets"),
        drive.join(".quarry.sys/multipart"),
    ];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(drive).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Waits until the server reports a heal of `drive` other than `earlier` (a job id) done, and
/// its checkpoint gone.
async fn wait_healed(
    layer: &ErasureServer,
    drive: &Path,
    earlier: Option<&str>,
) -> quarry_object::drive_heal::DriveHealStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        let heals = layer.drive_heals();
        if let Some(h) = heals.iter().find(|h| {
            h.mark.phase == DriveHealPhase::Done && Some(h.mark.job_id.as_str()) != earlier
        }) {
            if !drive.join(drive_heal::HEALING_FILE).exists() {
                return h.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the drive heal did not end: {heals:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn wipe(drive: &Path) {
    std::fs::remove_dir_all(drive).unwrap();
    std::fs::create_dir_all(drive).unwrap();
}

#[tokio::test]
async fn a_drive_emptied_while_the_server_runs_is_formatted_and_healed_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("d{i}"))).collect();
    for p in &paths {
        std::fs::create_dir_all(p).unwrap();
    }
    let cfg = ObjectConfig {
        block_size: 16 * 1024,
        inline_limit: 2 * 1024,
        scan_interval: None,
        drive_check_interval: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let layer: Arc<ErasureServer> = ErasureServer::open_local(paths.clone(), cfg).await.unwrap();
    layer.make_bucket(BUCKET).await.unwrap();
    // Inline, one block and several blocks.
    let mut data = BTreeMap::new();
    for (i, n) in [0usize, 100, 3000, 40_000, 100_003].into_iter().enumerate() {
        let key = format!("k{i}");
        let bytes = pattern(n, i as u8);
        layer
            .put_object(BUCKET, &key, body(bytes.clone()), PutOptions::default())
            .await
            .unwrap();
        data.insert(key, bytes);
    }
    layer
        .put_bucket_config(BUCKET, "cors", Bytes::from_static(b"<CORSConfiguration/>"))
        .await
        .unwrap();
    layer
        .put_system_config("iam.json", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    layer
        .new_multipart_upload(BUCKET, "up", NewUploadOptions::default())
        .await
        .unwrap();

    let drive = paths[2].clone();
    let before = drive_files(&drive);
    assert!(before.len() >= 8, "{:?}", before.keys());
    assert!(layer.drive_heals().is_empty());

    let mut earlier: Option<String> = None;
    for round in 1..=2u64 {
        wipe(&drive);
        let done = wait_healed(&layer, &drive, earlier.as_deref()).await;
        earlier = Some(done.mark.job_id.clone());
        assert!(drive.join(".quarry.sys/format.json").exists());
        assert_eq!(done.mark.failed, 0, "round {round}: {done:?}");
        assert_eq!(done.mark.verify_missing, 0, "round {round}: {done:?}");
        assert_eq!(
            done.mark.scanned,
            data.len() as u64,
            "round {round}: {done:?}"
        );
        // One entry per drive: a second replacement's heal takes the first one's place.
        assert_eq!(layer.drive_heals().len(), 1, "round {round}");
        let after = drive_files(&drive);
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "round {round}"
        );
        for (p, b) in &before {
            assert!(after[p] == *b, "round {round}: {} differs", p.display());
        }
    }

    // Everything reads back with two of the other drives gone: the healed one carries its share.
    for p in [&paths[0], &paths[3]] {
        std::fs::rename(p, p.with_extension("away")).unwrap();
    }
    for (key, want) in &data {
        use futures::StreamExt;
        let mut r = layer.get_object(BUCKET, key, None).await.unwrap();
        let mut got = Vec::new();
        while let Some(c) = r.body.next().await {
            got.extend_from_slice(&c.unwrap());
        }
        assert!(got == *want, "{key}");
    }
}
