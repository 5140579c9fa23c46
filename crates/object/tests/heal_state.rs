//! Healing what lives on a drive besides objects: the bucket directory, its configuration blobs
//! (whatever their name), multipart uploads in progress (upload metadata and part shard files),
//! and leftovers no quorum holds (a configuration value, an upload).
//!
//! A drive of a 4-drive set (2+2) is wiped; a heal puts back every file byte for byte as the
//! other drives imply it, the uploads then complete with their parts read back, and a second heal
//! finds nothing to do.
//!
//! A drive emptied while the server runs (`format.json` and all) is found by the server's drive
//! check, formatted into its slot and healed in the background with no restart, twice in a row.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use quarry_object::drive_heal::DriveHealPhase;
use quarry_object::*;

const BUCKET: &str = "bkt";
/// How long a drive heal may take here.
const WAIT: Duration = Duration::from_secs(30);

fn cfg() -> ObjectConfig {
    ObjectConfig {
        block_size: 64 * 1024,
        inline_limit: 1024,
        scan_interval: None,
        leftover_min_age: Duration::ZERO,
        ..Default::default()
    }
}

fn body(data: Vec<u8>) -> ByteStream {
    Box::pin(futures::stream::iter(vec![Ok(Bytes::from(data))]))
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// Every file under `dir` (relative path -> bytes).
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

fn configs(drive: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files(&drive.join(".quarry.sys/buckets"))
}

/// The upload files of a drive; `upload.meta` differs per drive only by its shard index, so it
/// is compared without it.
fn uploads(drive: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    files(&drive.join(".quarry.sys/multipart"))
        .into_iter()
        .map(|(p, b)| {
            let name = p.file_name().unwrap().to_str().unwrap();
            if name == "upload.meta" {
                let mut v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                v["erasure"]["index"] = 0.into();
                (p, serde_json::to_vec(&v).unwrap())
            } else {
                (p, b)
            }
        })
        .collect()
}

/// Part shard files differ per drive (each holds its own shard): the drive's relative paths,
/// with the part files' sizes.
fn shape(m: &BTreeMap<PathBuf, Vec<u8>>) -> BTreeMap<PathBuf, usize> {
    m.iter().map(|(p, b)| (p.clone(), b.len())).collect()
}

fn envelope(ts: i64, payload: &'static [u8]) -> Bytes {
    ConfigEnvelope {
        updated_ns: ts,
        payload: Bytes::from_static(payload),
    }
    .encode()
}

#[tokio::test]
async fn a_wiped_drive_gets_its_buckets_configs_and_uploads_back() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("d{i}"))).collect();
    let layer: Arc<ErasureServer> = ErasureServer::open_local(paths.clone(), cfg())
        .await
        .unwrap();
    layer.make_bucket(BUCKET).await.unwrap();
    layer.make_bucket("other").await.unwrap();
    layer
        .put_bucket_config(BUCKET, "cors", Bytes::from_static(b"<CORSConfiguration/>"))
        .await
        .unwrap();
    layer
        .put_bucket_versioning(BUCKET, VersioningState::Enabled)
        .await
        .unwrap();
    // The deployment's own configuration (IAM state), in the system namespace.
    layer
        .put_system_config("iam-users", Bytes::from_static(b"{\"users\":[]}"))
        .await
        .unwrap();
    // A name no feature of this build uses: healed all the same.
    layer
        .put_bucket_config("other", "future-feature", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    // Three uploads in progress, with parts of several blocks, one empty part, one inline-sized.
    let mut ups = Vec::new();
    for (i, key) in ["a/one", "b/two", "three"].iter().enumerate() {
        let u = layer
            .new_multipart_upload(BUCKET, key, NewUploadOptions::default())
            .await
            .unwrap();
        let sizes: &[usize] = match i {
            0 => &[5 * 1024 * 1024 + 3, 70_001],
            1 => &[0],
            _ => &[100],
        };
        let mut parts = Vec::new();
        for (n, &size) in sizes.iter().enumerate() {
            let data = pattern(size, (i * 7 + n) as u8);
            let p = layer
                .put_object_part(
                    BUCKET,
                    key,
                    &u.upload_id,
                    n as u32 + 1,
                    body(data.clone()),
                    PartOptions::default(),
                )
                .await
                .unwrap();
            parts.push((p, data));
        }
        ups.push((key.to_string(), u.upload_id, parts));
    }
    let before_configs = configs(&paths[0]);
    let before_uploads = uploads(&paths[3]);
    assert_eq!(before_configs.len(), 4, "{:?}", before_configs.keys());

    // Leftovers on d1 only: a configuration value and an upload no quorum holds, and a stale
    // value of a configuration that the others have newer.
    let d1 = quarry_disk::LocalDrive::open_without_sweep(&paths[1])
        .await
        .unwrap();
    use quarry_disk::Drive;
    d1.write_bucket_config(BUCKET, "lifecycle", &envelope(1, b"<old/>"))
        .await
        .unwrap();
    d1.write_bucket_config("other", "future-feature", &envelope(1, b"stale"))
        .await
        .unwrap();
    let dead = layer
        .new_multipart_upload(BUCKET, "dead", NewUploadOptions::default())
        .await
        .unwrap();
    let dead_meta = d1
        .read_upload(BUCKET, "dead", &dead.upload_id)
        .await
        .unwrap();
    layer
        .abort_multipart_upload(BUCKET, "dead", &dead.upload_id)
        .await
        .unwrap();
    d1.create_upload(&dead_meta).await.unwrap();

    // Wipe d3 entirely but its format (a replaced drive is formatted into its slot at start).
    let d3 = &paths[3];
    for e in std::fs::read_dir(d3).unwrap().flatten() {
        if e.file_name() != ".quarry.sys" {
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
    for sub in ["buckets", "multipart"] {
        let _ = std::fs::remove_dir_all(d3.join(".quarry.sys").join(sub));
    }
    assert!(configs(d3).is_empty() && uploads(d3).is_empty());

    let report = layer.heal(None, "").await.unwrap();
    assert_eq!(report.failed, 0, "{report:?}");
    // On d3: 2 buckets, 4 configuration blobs (one of them the system's), 3 upload metas and 4
    // parts; on d1: 3 leftovers (a config value, a stale value, an upload).
    assert!(
        report.bucket_items_healed >= 2 + 3 + 3 + 4 + 3,
        "{report:?}"
    );

    // Every configuration blob on the wiped drive is the others' byte for byte, and d1's
    // leftovers are gone.
    assert_eq!(configs(d3), before_configs);
    assert_eq!(configs(&paths[1]), before_configs);
    assert!(matches!(
        d1.read_upload(BUCKET, "dead", &dead.upload_id).await,
        Err(quarry_disk::DriveError::FileNotFound)
    ));
    // Upload metadata the same (but the shard index), part files where the others have them,
    // each of its length; and each rebuilt shard is the one the others imply: the uploads
    // complete from every drive, and read back whole with any two drives (d3 among them) gone.
    let after = uploads(d3);
    assert_eq!(shape(&after), shape(&before_uploads));
    for (p, b) in &after {
        if p.file_name().unwrap().to_str().unwrap().ends_with(".meta") {
            assert_eq!(b, &before_uploads[p], "{}", p.display());
        }
    }
    let again = layer.heal(None, "").await.unwrap();
    assert_eq!(
        (again.bucket_items_healed, again.healed, again.failed),
        (0, 0, 0),
        "{again:?}"
    );

    // Configurations read back from d3 with another drive: take two drives away.
    for p in [&paths[0], &paths[1]] {
        std::fs::rename(p, p.with_extension("away")).unwrap();
    }
    assert_eq!(
        layer.get_bucket_config(BUCKET, "cors").await.unwrap(),
        Some(Bytes::from_static(b"<CORSConfiguration/>"))
    );
    for p in [&paths[0], &paths[1]] {
        std::fs::rename(p.with_extension("away"), p).unwrap();
    }

    // Each upload completes; its object, read with d3 and one other drive only, is its parts.
    for (key, upload_id, parts) in &ups {
        let list = parts
            .iter()
            .map(|(p, _)| CompletePart {
                number: p.number,
                etag: p.etag.clone(),
                checksum: None,
            })
            .collect();
        layer
            .complete_multipart_upload(BUCKET, key, upload_id, list, CompleteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("complete {key}: {e}"));
        let want: Vec<u8> = parts.iter().flat_map(|(_, d)| d.clone()).collect();
        for away in [&paths[0], &paths[1]] {
            std::fs::rename(away, away.with_extension("away")).unwrap();
        }
        let mut r = layer.get_object(BUCKET, key, None).await.unwrap();
        let mut got = Vec::new();
        while let Some(c) = r.body.next().await {
            got.extend_from_slice(&c.unwrap());
        }
        for away in [&paths[0], &paths[1]] {
            std::fs::rename(away.with_extension("away"), away).unwrap();
        }
        assert!(got == want, "{key}: read back differs");
    }
}

#[tokio::test]
async fn a_heal_job_counts_heals_and_verifies_then_a_second_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("d{i}"))).collect();
    let layer: Arc<ErasureServer> = ErasureServer::open_local(paths.clone(), cfg())
        .await
        .unwrap();
    layer.make_bucket(BUCKET).await.unwrap();
    let mut bytes = 0u64;
    for i in 0..12usize {
        let data = pattern(i * 9_000, i as u8);
        bytes += data.len() as u64;
        layer
            .put_object(BUCKET, &format!("k{i}"), body(data), PutOptions::default())
            .await
            .unwrap();
    }
    std::fs::remove_dir_all(paths[2].join(BUCKET)).unwrap();

    async fn run(layer: &ErasureServer) -> HealJobStatus {
        let first = layer.start_heal_job(None, "").await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let s = layer.heal_job(&first.id).await.unwrap().expect("the job");
            if s.phase.finished() {
                return s;
            }
            assert!(std::time::Instant::now() < deadline, "{s:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let s = run(&layer).await;
    assert_eq!(s.phase, HealJobPhase::Done, "{s:?}");
    assert_eq!(
        (s.total_objects, s.total_bytes, s.bytes_scanned),
        (Some(12), Some(bytes), bytes)
    );
    assert_eq!(
        (s.report.scanned, s.report.healed, s.report.failed),
        (12, 12, 0)
    );
    assert_eq!(s.bytes_healed, bytes);
    assert!(s.report.bucket_items_healed >= 1, "{s:?}");
    // The verification looked again at the system configuration, the bucket and the 12
    // objects, and found nothing.
    assert_eq!(
        (s.verify_checked, s.verify_missing, s.verify_failed),
        (14, 0, 0)
    );

    let again = run(&layer).await;
    assert_eq!(
        (
            again.report.healed,
            again.report.bucket_items_healed,
            again.verify_checked
        ),
        (0, 0, 2),
        "{again:?}"
    );
    let stats = layer.stats().await;
    assert_eq!(stats.heal_jobs.started_total, 2);
    assert_eq!(stats.heal_jobs.objects_healed_total, 12);
    assert_eq!(stats.heal_jobs.running, 0);
    assert_eq!(layer.heal_jobs().await.unwrap().len(), 2);
    assert!(layer.heal_job("heal-none").await.unwrap().is_none());
    assert!(matches!(
        layer.start_heal_job(Some("absent"), "").await,
        Err(Error::BucketNotFound)
    ));
}

/// What a drive heal is responsible for, byte for byte: the bucket's objects, the
/// configuration blobs (the system namespace's included) and the uploads in progress.
fn drive_files(drive: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for sub in [BUCKET, ".quarry.sys/buckets", ".quarry.sys/multipart"] {
        out.extend(
            files(&drive.join(sub))
                .into_iter()
                .map(|(p, b)| (Path::new(sub).join(p), b)),
        );
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
