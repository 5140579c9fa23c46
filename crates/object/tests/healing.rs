//! Healing beyond one object: the heal worker's retry list (a write that missed an offline drive
//! is healed once the drive is back), the background scanner (finds a lost shard file and a
//! flipped byte, at its rate; cheap passes find lost shards without reading data, deep ones
//! bitrot), and the on-demand heal of a bucket or prefix with its report.

mod faults;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use faults::{FaultConfig, FaultStats, FaultyDrive};
use quarry_disk::Drive;
use quarry_object::*;

const BLOCK: usize = 16 * 1024;
const BUCKET: &str = "bkt";
const WAIT: Duration = Duration::from_secs(20);

fn cfg() -> ObjectConfig {
    ObjectConfig {
        parity: None,
        block_size: BLOCK,
        inline_limit: 2 * 1024,
        scan_interval: None,
        heal_retry_min: Duration::from_millis(50),
        heal_retry_max: Duration::from_millis(200),
        ..Default::default()
    }
}

fn temp_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

fn drive_dirs(dir: &tempfile::TempDir, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.path().join(format!("d{i}"));
            std::fs::create_dir_all(&p).unwrap();
            p
        })
        .collect()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn put(layer: &ErasureServer, key: &str, data: &[u8]) {
    let body: ByteStream = Box::pin(futures::stream::iter(vec![Ok(Bytes::copy_from_slice(
        data,
    ))]));
    layer
        .put_object(BUCKET, key, body, PutOptions::default())
        .await
        .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
}

async fn get(layer: &ErasureServer, key: &str) -> Vec<u8> {
    use futures::StreamExt;
    let mut r = layer.get_object(BUCKET, key, None).await.unwrap();
    let mut out = Vec::new();
    while let Some(c) = r.body.next().await {
        out.extend_from_slice(&c.unwrap());
    }
    out
}

fn meta_path(drive: &Path, key: &str) -> PathBuf {
    drive.join(BUCKET).join(key).join("quarry.meta")
}

/// `<drive>/<bucket>/<key>/<data-dir>/part.1`.
fn part_path(drive: &Path, key: &str) -> PathBuf {
    let obj = drive.join(BUCKET).join(key);
    let data_dir = std::fs::read_dir(&obj)
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.file_type().unwrap().is_dir())
        .unwrap_or_else(|| panic!("no data dir in {}", obj.display()));
    data_dir.path().join("part.1")
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_stats(
    layer: &ErasureServer,
    what: &str,
    cond: impl Fn(&LayerStats) -> bool,
) -> LayerStats {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = layer.stats().await;
        if cond(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Four drives behind fault injectors, so one can go offline and come back.
async fn faulty_server(dir: &tempfile::TempDir) -> (Arc<ErasureServer>, Vec<FaultyDrive>) {
    let (layer, drives, _) = faulty_server_with(dir, cfg()).await;
    (layer, drives)
}

async fn faulty_server_with(
    dir: &tempfile::TempDir,
    cfg: ObjectConfig,
) -> (Arc<ErasureServer>, Vec<FaultyDrive>, Arc<FaultStats>) {
    faulty_server_swept(dir, cfg, quarry_disk::SweepSchedule::from_env()).await
}

/// [`faulty_server_with`], the drives' sweep and retired data on `sweep`.
async fn faulty_server_swept(
    dir: &tempfile::TempDir,
    cfg: ObjectConfig,
    sweep: quarry_disk::SweepSchedule,
) -> (Arc<ErasureServer>, Vec<FaultyDrive>, Arc<FaultStats>) {
    let (deployment, locals) = ErasureServer::format_local_with(drive_dirs(dir, 4), sweep)
        .await
        .unwrap();
    let stats = Arc::new(FaultStats::default());
    let faulty: Vec<FaultyDrive> = locals
        .into_iter()
        .enumerate()
        .map(|(i, d)| FaultyDrive::new(Arc::new(d), 1, i as u64, stats.clone()))
        .collect();
    let dyns = faulty
        .iter()
        .map(|d| Arc::new(d.clone()) as Arc<dyn Drive>)
        .collect();
    let layer = ErasureServer::open(deployment, dyns, cfg).unwrap();
    layer.make_bucket(BUCKET).await.unwrap();
    (layer, faulty, stats)
}

#[tokio::test]
async fn writes_that_missed_an_offline_drive_are_healed_when_it_returns() {
    let dir = temp_dir();
    let (layer, drives) = faulty_server(&dir).await;
    let down = PathBuf::from(drives[3].endpoint());
    drives[3].set_faults(Some(FaultConfig::dead()));

    let big = pattern(3 * BLOCK + 123, 1);
    let small = pattern(500, 2);
    put(&layer, "big", &big).await;
    put(&layer, "dir/small", &small).await;
    assert!(!meta_path(&down, "big").exists());

    // The worker tried, could not reach the drive, and keeps the heals for later.
    let s = wait_stats(&layer, "heals on the retry list", |s| {
        s.heal_retry_len == 2 && s.heal_retried_total >= 2
    })
    .await;
    assert_eq!(s.heal_retry_dropped_total, 0);
    // They are retried with back-off while the drive stays down, and still not dropped.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = layer.stats().await;
    assert_eq!(s.heal_retry_len, 2, "{s:?}");
    assert!(s.heal_retried_total >= 4, "retried with back-off: {s:?}");
    // heal/status lists them: which objects wait, how often they failed, when they are due.
    let mut listed: Vec<_> = s
        .heal_queue
        .iter()
        .filter(|e| e.state == HealEntryState::Retry)
        .map(|e| (e.set, e.bucket.as_str(), e.key.as_str()))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [(0, BUCKET, "big"), (0, BUCKET, "dir/small")],
        "{s:?}"
    );
    assert!(
        s.heal_queue
            .iter()
            .all(|e| e.state != HealEntryState::Retry || (e.attempts >= 1 && e.due_in.is_some())),
        "{s:?}"
    );

    // On-demand heal reports what it could not do, and why.
    let report = layer.heal(Some(BUCKET), "").await.unwrap();
    // Two objects, and the bucket's own state (directory, configurations, uploads), not healed.
    assert_eq!((report.scanned, report.healed, report.failed), (2, 0, 3));
    assert_eq!(
        report.failed_objects[0].key, "",
        "the bucket first: {report:?}"
    );
    assert!(
        report.failed_objects[0].reason.contains("offline"),
        "{report:?}"
    );

    // The drive returns: the retry list brings it back in line.
    drives[3].set_faults(None);
    wait_stats(&layer, "retry list to drain", |s| {
        s.heal_retry_len == 0 && s.heal_queue.is_empty()
    })
    .await;
    wait_for("the missed writes on the returned drive", || {
        meta_path(&down, "big").exists() && meta_path(&down, "dir/small").exists()
    })
    .await;
    let s = layer.stats().await;
    assert!(s.healed_objects_total >= 2, "{s:?}");
    for key in ["big", "dir/small"] {
        let r = layer.heal_object(BUCKET, key).await.unwrap();
        assert!(r.healed.is_empty() && r.failed.is_empty(), "{key}: {r:?}");
    }
    // Readable from the healed drive plus one other.
    drives[0].set_faults(Some(FaultConfig::dead()));
    drives[1].set_faults(Some(FaultConfig::dead()));
    assert_eq!(get(&layer, "big").await, big);
    assert_eq!(get(&layer, "dir/small").await, small);
}

/// A shard read that could not reach its drive says nothing of the shard: the heal reports
/// the drive as not checked and rewrites nothing there (it once rewrote a whole object on a
/// drive whose node had just restarted, because the first read met a dead pooled connection).
#[tokio::test]
async fn a_drive_that_cannot_be_read_is_a_failure_not_a_heal() {
    let dir = temp_dir();
    let (layer, drives) = faulty_server(&dir).await;
    let big = pattern(3 * BLOCK + 123, 7);
    put(&layer, "big", &big).await;
    let victim = PathBuf::from(drives[3].endpoint());
    let part = part_path(&victim, "big");
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let (meta_before, part_before) = (
        std::fs::read(meta_path(&victim, "big")).unwrap(),
        inode(&part),
    );

    drives[3].set_shard_reads_unreachable(true);
    let r = layer.heal_object(BUCKET, "big").await.unwrap();
    assert!(r.healed.is_empty(), "nothing is known to be missing: {r:?}");
    assert_eq!(r.failed.len(), 1, "{r:?}");
    assert_eq!(r.failed[0].0, drives[3].endpoint(), "{r:?}");
    assert!(r.failed[0].1.contains("connection broke"), "{r:?}");
    // The drive's copy is the one it had: the part file was not replaced.
    assert_eq!(inode(&part), part_before);
    assert_eq!(
        std::fs::read(meta_path(&victim, "big")).unwrap(),
        meta_before
    );
    // A heal of the prefix counts it as failed, never healed.
    let report = layer.heal(Some(BUCKET), "big").await.unwrap();
    assert_eq!((report.healed, report.failed), (0, 1), "{report:?}");

    // Reachable again: whole, nothing to do.
    drives[3].set_shard_reads_unreachable(false);
    let r = layer.heal_object(BUCKET, "big").await.unwrap();
    assert!(r.healed.is_empty() && r.failed.is_empty(), "{r:?}");
    assert_eq!(inode(&part), part_before);
    assert_eq!(get(&layer, "big").await, big);
}

/// A frame read that authenticates only the frame's hash on its way (a remote drive's, over
/// TCP) and then fails its bitrot check may have been changed on the network: it is read again
/// with every byte authenticated, and only a copy that fails that too is damaged and healed.
#[tokio::test]
async fn a_frame_changed_on_the_way_is_read_again_not_healed() {
    let dir = temp_dir();
    let (layer, drives) = faulty_server(&dir).await;
    let big = pattern(3 * BLOCK + 123, 7);
    put(&layer, "big", &big).await;
    let victim = PathBuf::from(drives[3].endpoint());
    let part = part_path(&victim, "big");
    let original = std::fs::read(&part).unwrap();

    drives[3].set_frames_changed_on_the_way(true);
    let r = layer.heal_object(BUCKET, "big").await.unwrap();
    assert!(r.healed.is_empty() && r.failed.is_empty(), "{r:?}");
    // Each of the object's four blocks has one frame on the drive, each read twice.
    assert_eq!(layer.stats().await.frame_rereads_total, 4);
    assert_eq!(part_path(&victim, "big"), part);
    assert_eq!(std::fs::read(&part).unwrap(), original);
    assert_eq!(get(&layer, "big").await, big);

    // Control: the copy on the drive is damaged as well, so the whole read fails too: healed.
    let mut damaged = original.clone();
    damaged[100] ^= 1;
    std::fs::write(&part, &damaged).unwrap();
    let r = layer.heal_object(BUCKET, "big").await.unwrap();
    assert_eq!(r.healed, vec![drives[3].endpoint().to_string()], "{r:?}");
    assert_eq!(std::fs::read(part_path(&victim, "big")).unwrap(), original);
    assert_eq!(get(&layer, "big").await, big);
}

#[tokio::test]
async fn the_scanner_heals_lost_and_corrupt_shards_at_its_rate() {
    const N: usize = 8;
    const RATE: u32 = 20;
    let dir = temp_dir();
    let paths = drive_dirs(&dir, 4);
    let layer = ErasureServer::open_local(
        paths.clone(),
        ObjectConfig {
            scan_interval: Some(Duration::from_millis(300)),
            scan_rate: RATE,
            deep_scan_every: 1,
            ..cfg()
        },
    )
    .await
    .unwrap();
    layer.make_bucket(BUCKET).await.unwrap();
    for i in 0..N {
        put(&layer, &format!("k{i}"), &pattern(2 * BLOCK + i, i as u8)).await;
    }
    // Damage while nothing reads: only the scanner can find it.
    let lost = part_path(&paths[0], "k0");
    let lost_bytes = std::fs::read(&lost).unwrap();
    std::fs::remove_file(&lost).unwrap();
    let flipped = part_path(&paths[1], "k5");
    let good = std::fs::read(&flipped).unwrap();
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x40;
    std::fs::write(&flipped, &bad).unwrap();

    wait_for("the scanner to restore both shards", || {
        std::fs::read(&lost).is_ok_and(|b| b == lost_bytes)
            && std::fs::read(&flipped).is_ok_and(|b| b == good)
    })
    .await;
    // A whole pass after the damage, to check its pace: N objects take (N-1)/RATE at least.
    let passes = layer.stats().await.scan.passes_total;
    let s = wait_stats(&layer, "a full pass", |s| s.scan.passes_total > passes).await;
    let scan = s.scan.clone();
    assert!(scan.enabled);
    assert!(scan.healed_total >= 2, "{scan:?}");
    assert_eq!(scan.failed_total, 0, "{scan:?}");
    assert!(scan.objects_total >= N as u64, "{scan:?}");
    let (start, end) = (
        scan.last_pass_start_ns.unwrap(),
        scan.last_pass_end_ns.unwrap(),
    );
    let took = Duration::from_nanos((end - start).max(0) as u64);
    let least = Duration::from_secs(N as u64 - 1) / RATE;
    assert!(
        took >= least,
        "a pass of {N} objects took {took:?}, less than {least:?}"
    );
    // No read ever queued a heal: the scanner did the work.
    assert_eq!(s.heal_queued_total, 0, "{s:?}");
    for i in 0..N {
        assert_eq!(
            get(&layer, &format!("k{i}")).await,
            pattern(2 * BLOCK + i, i as u8)
        );
    }
}

#[tokio::test]
async fn background_tasks_stop_when_the_server_is_dropped() {
    let dir = temp_dir();
    let scanning = ObjectConfig {
        scan_interval: Some(Duration::from_millis(10)),
        scan_rate: 0,
        ..cfg()
    };
    let (layer, drives, stats) = faulty_server_with(&dir, scanning).await;
    put(&layer, "k", &pattern(100, 1)).await;
    // A heal that keeps failing stays on the retry list.
    drives[3].set_faults(Some(FaultConfig::dead()));
    put(&layer, "k2", &pattern(100, 2)).await;
    wait_stats(&layer, "a pass and a retry", |s| {
        s.scan.passes_total >= 2 && s.heal_retry_len == 1
    })
    .await;
    let calls = || stats.calls.load(std::sync::atomic::Ordering::Relaxed);
    let before = calls();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(calls() > before, "the scanner and the worker are busy");
    drop(layer);
    // Work in flight finishes; then nothing more reaches the drives.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = calls();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(calls(), after, "a background task outlived its server");
}

#[tokio::test]
async fn heal_of_a_prefix_reports_what_it_did() {
    let dir = temp_dir();
    let paths = drive_dirs(&dir, 4);
    let layer = ErasureServer::open_local(paths.clone(), cfg())
        .await
        .unwrap();
    layer.make_bucket(BUCKET).await.unwrap();
    layer.make_bucket("other").await.unwrap();
    for key in ["a/1", "a/2", "a/3", "b/1"] {
        put(&layer, key, &pattern(3 * BLOCK, 7)).await;
    }
    put(&layer, "a/inline", &pattern(100, 8)).await;

    // Lost: a whole object on one drive, a shard file on another, an inline object's metadata.
    std::fs::remove_dir_all(paths[0].join(BUCKET).join("a/1")).unwrap();
    std::fs::remove_file(part_path(&paths[1], "a/2")).unwrap();
    std::fs::remove_file(meta_path(&paths[2], "a/inline")).unwrap();
    std::fs::remove_file(part_path(&paths[3], "b/1")).unwrap();

    let r = layer.heal(Some(BUCKET), "a/").await.unwrap();
    assert_eq!(r.buckets, 1);
    assert_eq!(r.scanned, 4, "{r:?}");
    assert_eq!((r.healed, r.healed_drives, r.failed), (3, 3, 0), "{r:?}");
    assert!(!r.truncated);
    let mut healed: Vec<(&str, &str)> = r
        .healed_objects
        .iter()
        .map(|h| (h.key.as_str(), h.drives[0].as_str()))
        .collect();
    healed.sort();
    let d = |i: usize| paths[i].to_str().unwrap().to_string();
    assert_eq!(
        healed,
        [
            ("a/1", d(0).as_str()),
            ("a/2", d(1).as_str()),
            ("a/inline", d(2).as_str())
        ]
    );
    assert!(meta_path(&paths[0], "a/1").exists());
    assert!(part_path(&paths[1], "a/2").exists());
    assert!(!part_path(&paths[3], "b/1").exists(), "outside the prefix");

    // Everything: b/1 now, nothing else to do.
    let r = layer.heal(None, "").await.unwrap();
    assert_eq!(
        (r.buckets, r.scanned, r.healed, r.failed),
        (2, 5, 1, 0),
        "{r:?}"
    );
    assert!(part_path(&paths[3], "b/1").exists());
    let r = layer.heal(None, "").await.unwrap();
    assert_eq!((r.scanned, r.healed, r.failed), (5, 0, 0), "{r:?}");

    assert!(matches!(
        layer.heal(Some("absent"), "").await,
        Err(Error::BucketNotFound)
    ));
    assert!(matches!(
        layer.heal(Some("Not A Bucket"), "").await,
        Err(Error::BucketNotFound)
    ));
}

#[tokio::test]
async fn a_node_scans_only_its_share_of_the_sets() {
    let dir = temp_dir();
    let paths = drive_dirs(&dir, 8);
    let (deployment, a) = ErasureServer::format_local(paths[..4].to_vec())
        .await
        .unwrap();
    let (_, b) = ErasureServer::format_local(paths[4..].to_vec())
        .await
        .unwrap();
    let dyns = |v: Vec<quarry_disk::LocalDrive>| -> Vec<Arc<dyn Drive>> {
        v.into_iter()
            .map(|d| Arc::new(d) as Arc<dyn Drive>)
            .collect()
    };
    let layer = ErasureServer::open_sets(
        deployment,
        vec![(dyns(a), None), (dyns(b), None)],
        ObjectConfig {
            scan_interval: Some(Duration::from_secs(1)),
            scan_rate: 0,
            scan_share: Some((1, 2)),
            ..cfg()
        },
    )
    .unwrap();
    layer.make_bucket(BUCKET).await.unwrap();
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    for k in &keys {
        put(&layer, k, &pattern(100, 3)).await;
    }
    let in_second_set = keys
        .iter()
        .filter(|k| meta_path(&paths[4], k).exists())
        .count() as u64;
    assert!(
        in_second_set > 0 && in_second_set < 20,
        "placement spreads keys: {in_second_set}"
    );
    let s = wait_stats(&layer, "one pass", |s| s.scan.passes_total >= 1).await;
    assert_eq!(s.scan.passes_total, 1, "{s:?}");
    assert_eq!(s.scan.objects_total, in_second_set, "{s:?}");
}

#[tokio::test]
async fn cheap_scanner_passes_find_lost_shards_and_only_deep_ones_read_for_bitrot() {
    const N: usize = 4;
    let dir = temp_dir();
    let paths = drive_dirs(&dir, 4);
    let scanning = |deep_scan_every| ObjectConfig {
        scan_interval: Some(Duration::from_millis(100)),
        scan_rate: 0,
        deep_scan_every,
        ..cfg()
    };
    // Cheap passes only.
    let layer = ErasureServer::open_local(paths.clone(), scanning(0))
        .await
        .unwrap();
    layer.make_bucket(BUCKET).await.unwrap();
    for i in 0..N {
        put(&layer, &format!("k{i}"), &pattern(2 * BLOCK + i, i as u8)).await;
    }
    let lost = part_path(&paths[0], "k0");
    let lost_bytes = std::fs::read(&lost).unwrap();
    std::fs::remove_file(&lost).unwrap();
    let flipped = part_path(&paths[1], "k2");
    let good = std::fs::read(&flipped).unwrap();
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x40;
    std::fs::write(&flipped, &bad).unwrap();

    wait_for("a cheap pass to restore the lost shard", || {
        std::fs::read(&lost).is_ok_and(|b| b == lost_bytes)
    })
    .await;
    // Two whole passes more: a cheap pass does not read data, so the flipped byte stays.
    let passes = layer.stats().await.scan.passes_total;
    wait_stats(&layer, "two more passes", |s| {
        s.scan.passes_total >= passes + 2
    })
    .await;
    assert_eq!(
        std::fs::read(&flipped).unwrap(),
        bad,
        "a cheap pass read data"
    );
    let s = layer.stats().await;
    assert!(s.scan.healed_total >= 1, "{:?}", s.scan);
    drop(layer);

    // Every pass deep: the bitrot is found and repaired.
    let layer = ErasureServer::open_local(paths.clone(), scanning(1))
        .await
        .unwrap();
    wait_for("a deep pass to repair the flipped byte", || {
        std::fs::read(&flipped).is_ok_and(|b| b == good)
    })
    .await;
    for i in 0..N {
        assert_eq!(
            get(&layer, &format!("k{i}")).await,
            pattern(2 * BLOCK + i, i as u8)
        );
    }
}

/// The in-process lock table, with a record of every name locked.
#[derive(Debug, Default)]
struct RecordingLocker {
    table: NsLock,
    taken: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Locker for RecordingLocker {
    async fn lock(&self, name: &str) -> Result<LockGuard> {
        self.taken.lock().unwrap().push(name.to_string());
        Ok(LockGuard::new(self.table.acquire(name).await))
    }
}

impl RecordingLocker {
    /// The object locks taken since the last call (`bkt/...` names).
    fn drain_objects(&self) -> Vec<String> {
        let mut taken = std::mem::take(&mut *self.taken.lock().unwrap());
        taken.retain(|n| n.starts_with(&format!("{BUCKET}/k")));
        taken.sort();
        taken.dedup();
        taken
    }
}

/// A set on fresh drives at `paths` whose locks are recorded.
async fn open_with_recording_locker(
    paths: &[PathBuf],
    cfg: ObjectConfig,
) -> (Arc<ErasureServer>, Arc<RecordingLocker>) {
    let (deployment, locals) = ErasureServer::format_local(paths.to_vec()).await.unwrap();
    let drives: Vec<Arc<dyn Drive>> = locals
        .into_iter()
        .map(|d| Arc::new(d) as Arc<dyn Drive>)
        .collect();
    let locker = Arc::new(RecordingLocker::default());
    let layer = ErasureServer::open_sets(
        deployment,
        vec![(drives, Some(locker.clone() as Arc<dyn Locker>))],
        cfg,
    )
    .unwrap();
    (layer, locker)
}

#[tokio::test]
async fn deep_passes_and_heal_jobs_lock_only_what_they_repair() {
    const N: usize = 5;
    let dir = temp_dir();
    let paths = drive_dirs(&dir, 4);
    let (layer, locker) = open_with_recording_locker(
        &paths,
        ObjectConfig {
            scan_interval: Some(Duration::from_millis(100)),
            scan_rate: 0,
            deep_scan_every: 1,
            ..cfg()
        },
    )
    .await;
    layer.make_bucket(BUCKET).await.unwrap();
    // k0 is inline, the others two blocks and more.
    put(&layer, "k0", b"small").await;
    for i in 1..N {
        put(&layer, &format!("k{i}"), &pattern(2 * BLOCK + i, i as u8)).await;
    }
    let passes = layer.stats().await.scan.passes_total;
    wait_stats(&layer, "a deep pass over whole objects", |s| {
        s.scan.passes_total >= passes + 2
    })
    .await;
    let _ = locker.drain_objects(); // the PUTs' commits, and a pass that may have begun before them
    let passes = layer.stats().await.scan.passes_total;
    wait_stats(&layer, "two more deep passes", |s| {
        s.scan.passes_total >= passes + 2
    })
    .await;
    assert_eq!(
        locker.drain_objects(),
        Vec::<String>::new(),
        "a deep pass over whole objects took their locks"
    );

    // One flipped byte: the deep pass finds it, and that object alone is locked to repair it.
    let flipped = part_path(&paths[1], "k2");
    let good = std::fs::read(&flipped).unwrap();
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 0x40;
    std::fs::write(&flipped, &bad).unwrap();
    wait_for("a deep pass to repair the flipped byte", || {
        std::fs::read(&flipped).is_ok_and(|b| b == good)
    })
    .await;
    assert_eq!(locker.drain_objects(), vec![format!("{BUCKET}/k2")]);

    // A heal job over everything whole: it walks and verifies every object, and locks none.
    let passes = layer.stats().await.scan.passes_total;
    wait_stats(&layer, "the pass that repaired to end", |s| {
        s.scan.passes_total > passes
    })
    .await;
    let _ = locker.drain_objects();
    let job = layer.start_heal_job(None, "").await.unwrap();
    let deadline = Instant::now() + WAIT;
    let status = loop {
        let s = layer.heal_job(&job.id).await.unwrap().expect("the job");
        if s.phase.finished() {
            break s;
        }
        assert!(Instant::now() < deadline, "{s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.phase, HealJobPhase::Done, "{status:?}");
    assert_eq!(
        (
            status.report.scanned,
            status.report.healed,
            status.verify_missing
        ),
        (N as u64, 0, 0),
        "{status:?}"
    );
    let taken = locker.drain_objects();
    // The scanner keeps running beside the job; it too locks nothing that is whole.
    assert_eq!(taken, Vec::<String>::new(), "the job locked whole objects");
    for i in 1..N {
        assert_eq!(
            get(&layer, &format!("k{i}")).await,
            pattern(2 * BLOCK + i, i as u8)
        );
    }
}

/// A key's heal takes its lock one version at a time: a PUT to a key being healed waits for
/// the version in hand, not for every version (a PUT to a key with 7,000 versions once waited
/// over a minute for a scanner's heal of it).
#[tokio::test]
async fn a_write_to_a_key_being_healed_waits_for_one_version_not_all() {
    const VERSIONS: usize = 60;
    let dir = temp_dir();
    let paths = drive_dirs(&dir, 4);
    let (layer, locker) = open_with_recording_locker(&paths, cfg()).await;
    layer.make_bucket(BUCKET).await.unwrap();
    layer
        .put_bucket_versioning(BUCKET, VersioningState::Enabled)
        .await
        .unwrap();
    // Versions with data files (over the inline limit), so each one's repair rebuilds shards.
    for i in 0..VERSIONS {
        put(&layer, "k", &pattern(BLOCK + i, i as u8)).await;
    }
    // One drive lost the key: every version is to be healed there.
    std::fs::remove_dir_all(paths[0].join(BUCKET).join("k")).unwrap();
    let _ = locker.taken.lock().unwrap().drain(..);
    let healing = tokio::spawn({
        let layer = layer.clone();
        async move { layer.heal_object(BUCKET, "k").await }
    });
    // Once the heal is in its versions, a PUT of the key.
    wait_for("the heal to reach its second version", || {
        locker.taken.lock().unwrap().len() >= 3
    })
    .await;
    let writing = tokio::spawn({
        let layer = layer.clone();
        async move { put(&layer, "k", b"written during the heal").await }
    });
    let healed = healing.await.unwrap().unwrap();
    assert!(
        writing.is_finished(),
        "the PUT waited for the whole key's heal"
    );
    writing.await.unwrap();
    assert_eq!(healed.healed.len(), 1, "{healed:?}");
    assert!(healed.failed.is_empty(), "{healed:?}");
    // The survey, then each version: the lock was let go in between.
    let taken = locker.taken.lock().unwrap().len();
    assert!(taken > VERSIONS, "{taken} lock acquisitions");
    assert_eq!(get(&layer, "k").await, b"written during the heal");
    // The new version was written while the drive's copy was being rebuilt: a second heal
    // leaves every version whole, and a third finds nothing.
    layer.heal_object(BUCKET, "k").await.unwrap();
    let again = layer.heal_object(BUCKET, "k").await.unwrap();
    assert!(
        again.healed.is_empty() && again.failed.is_empty(),
        "{again:?}"
    );
}

/// Waits until no heal waits in the queue and none was queued for 300 ms (a heal of these
/// small objects, once taken from the queue, ends in milliseconds).
async fn heals_settled(layer: &ErasureServer) {
    let idle = |s: &LayerStats| s.heal_queue_len == 0 && s.heal_retry_len == 0;
    let mut last = wait_stats(layer, "the heal queue to empty", idle).await;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = wait_stats(layer, "the heal queue to empty", idle).await;
        if now.heal_queued_total == last.heal_queued_total {
            return;
        }
        last = now;
    }
}

/// Starts a GET of `key` whose shard reads wait at a gate, runs `change` while the GET holds
/// the metadata it resolved and waits for its first block, then lets the reads go.
async fn get_across(
    layer: &Arc<ErasureServer>,
    drives: &[FaultyDrive],
    key: &str,
    change: impl std::future::Future<Output = ()>,
) -> Result<Vec<u8>> {
    // No heal may be at work (the GET of a version that went queues one of the key): its reads
    // would wait at the gate too, holding the key's lock.
    heals_settled(layer).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let before: u64 = drives.iter().map(|d| d.gated_reads()).sum();
    for d in drives {
        d.set_shard_read_gate(Some(gate.clone()));
    }
    let getter = tokio::spawn({
        let (layer, key) = (layer.clone(), key.to_owned());
        async move {
            use futures::StreamExt;
            let mut r = layer.get_object(BUCKET, &key, None).await?;
            let mut out = Vec::new();
            while let Some(c) = r.body.next().await {
                out.extend_from_slice(&c?);
            }
            Ok(out)
        }
    });
    wait_for("the GET's first shard read at the gate", || {
        drives.iter().map(|d| d.gated_reads()).sum::<u64>() > before
    })
    .await;
    for d in drives {
        d.set_shard_read_gate(None);
    }
    change.await;
    gate.add_permits(64);
    getter.await.unwrap()
}

/// GETs take no lock: an overwrite or a delete may commit between a GET's metadata read and its
/// shard reads. The data of the version it replaced or deleted stays for the grace, so the GET
/// answers the version it resolved, whole, as S3 does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_across_an_overwrite_or_a_delete_answers_the_version_it_resolved() {
    let dir = temp_dir();
    let (layer, drives) = faulty_server(&dir).await;
    let one = pattern(3 * BLOCK + 5, 1);
    let two = pattern(2 * BLOCK + 7, 2);
    put(&layer, "k", &one).await;

    let got = get_across(&layer, &drives, "k", put(&layer, "k", &two)).await;
    assert_eq!(got.expect("GET across an overwrite"), one);
    let got = get_across(&layer, &drives, "k", async {
        layer.delete_object(BUCKET, "k").await.unwrap();
    })
    .await;
    assert_eq!(got.expect("GET across a delete"), two);
    // And what starts after them sees them.
    let got = layer.get_object(BUCKET, "k", None).await.map(|_| ());
    assert!(matches!(got, Err(Error::ObjectNotFound)), "{got:?}");
}

/// When the data a GET resolved is gone before its first block all the same (the drives keep
/// none, or the grace or the budget ran out), nothing has been answered yet: the GET answers
/// what the key holds now (the new object, or not found) instead of a 500 for data "corrupt
/// beyond repair". Damage to the same version still answers as damage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_whose_version_goes_before_its_first_block_answers_what_the_key_holds_now() {
    let dir = temp_dir();
    let sweep = quarry_disk::SweepSchedule {
        retired_grace: Duration::ZERO,
        ..quarry_disk::SweepSchedule::from_env()
    };
    let (layer, drives, _) = faulty_server_swept(&dir, cfg(), sweep).await;
    let old = pattern(3 * BLOCK + 5, 1);
    let new = pattern(2 * BLOCK + 7, 2);
    put(&layer, "k", &old).await;

    let heals = || async { layer.stats().await.heal_queued_total };
    let before = heals().await;

    // Overwritten: the new object, whole.
    let got = get_across(&layer, &drives, "k", put(&layer, "k", &new)).await;
    assert_eq!(got.expect("GET across an overwrite"), new);

    // Deleted: not found.
    let got = get_across(&layer, &drives, "k", async {
        layer.delete_object(BUCKET, "k").await.unwrap();
    })
    .await;
    assert!(matches!(got, Err(Error::ObjectNotFound)), "{got:?}");
    heals_settled(&layer).await;
    assert_eq!(
        heals().await,
        before,
        "a key that is whole was queued for a heal"
    );

    // Control: the same version, its shards gone from three drives meanwhile, is damage, and
    // queued for a heal.
    put(&layer, "k", &old).await;
    let got = get_across(&layer, &drives, "k", async {
        for d in &drives[..3] {
            std::fs::remove_file(part_path(Path::new(d.endpoint()), "k")).unwrap();
        }
    })
    .await;
    assert!(matches!(got, Err(Error::Corrupt(_))), "{got:?}");
    wait_stats(&layer, "the damaged key's heal", |s| {
        s.heal_queued_total > before
    })
    .await;
}
