//! The object layer over drives that fail: a randomized test of PUT / GET / ranged GET / DELETE /
//! LIST / multipart / heal against a model, with faults drawn from a seed (see `faults`).
//!
//! Runs `QUARRY_FAULT_SEEDS` seeds (default 30 per set shape) of `QUARRY_FAULT_OPS` operations
//! (default 60); `QUARRY_FAULT_SEED=<n>` runs that one seed only (to replay a failure). The
//! invariants are those of the shared model (`faults/model.rs`):
//! - a read returns the bytes of a version the model allows (the last acknowledged write, or a
//!   later write that failed: never a mix, never garbage) or an error, never wrong bytes;
//! - with no drive faulty, nothing fails (except as S3 says: a missing key is NoSuchKey);
//! - listings never show a key the model says is absent, and with no drive faulty, show exactly
//!   the keys that are present;
//! - once faults stop and every key is healed, every key reads back as one allowed version, the
//!   same on every read, and the listing agrees;
//! - no panic, and every call finishes within its timeout.

mod faults;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use faults::model::{body, cfg, env, run_many, run_seed, temp_dir, Injector, Run, Shape};
use faults::model::{format_seeded, BLOCK, BUCKET, TIMEOUT};
use faults::{FaultConfig, FaultStats, FaultyDrive, StepRuntime};
use quarry_disk::Drive;
use quarry_object::*;

/// The drives of a local set, each a [`FaultyDrive`] with [`FaultConfig::chaos`] when faulty.
struct LocalFaults {
    drives: Vec<FaultyDrive>,
}

impl Injector for LocalFaults {
    fn drives(&self) -> usize {
        self.drives.len()
    }

    fn set_faulty(&self, which: &[usize]) {
        for (i, d) in self.drives.iter().enumerate() {
            d.set_faults(which.contains(&i).then(FaultConfig::chaos));
        }
    }

    fn any_faulty(&self) -> bool {
        self.drives.iter().any(|d| d.faulty())
    }

    fn set_step(&self, step: u64) {
        for d in &self.drives {
            d.set_step(step);
        }
    }
}

/// A set of `drives` local drives in a temp dir, each wrapped in a [`FaultyDrive`] seeded with
/// `seed`, the layer on a [`StepRuntime`] of the seed (so the seed replays exactly); returns the
/// run and the drives (to switch faults by hand).
async fn local_run(
    seed: u64,
    drives: usize,
    stats: Arc<FaultStats>,
    log: Arc<Mutex<Vec<String>>>,
) -> (Run, Vec<FaultyDrive>) {
    let dir = temp_dir();
    let paths: Vec<PathBuf> = (1..=drives)
        .map(|i| dir.path().join(format!("d{i}")))
        .collect();
    let mut locals = Vec::with_capacity(paths.len());
    for p in paths {
        locals.push(quarry_disk::LocalDrive::open(p).await.unwrap());
    }
    let deployment = format_seeded(&locals, seed).await;
    let faulty: Vec<FaultyDrive> = locals
        .into_iter()
        .enumerate()
        .map(|(i, d)| FaultyDrive::new(Arc::new(d), seed, i as u64, stats.clone()))
        .collect();
    let dyns: Vec<Arc<dyn Drive>> = faulty
        .iter()
        .map(|d| Arc::new(d.clone()) as Arc<dyn Drive>)
        .collect();
    let runtime = StepRuntime::new(seed);
    let layer = ErasureServer::open(
        deployment,
        dyns,
        ObjectConfig {
            runtime: RuntimeHandle::new(runtime.clone()),
            ..cfg()
        },
    )
    .unwrap();
    let injector = LocalFaults {
        drives: faulty.clone(),
    };
    let run = Run::new(seed, layer, Box::new(injector), Box::new(dir), log)
        .await
        .with_stepped_runtime(runtime);
    (run, faulty)
}

/// Runs the seeds of the `drives`-drive shape, in a versioned bucket with `versioned` (the
/// versioned model, `faults/model/versioned.rs`).
async fn local_many(drives: usize, versioned: bool) {
    let stats = Arc::new(FaultStats::default());
    let kind = if versioned { ", versioned" } else { "" };
    let (name, label) = (
        format!("{drives}-drive set{kind}"),
        format!("fault injection, {drives} drives{kind}"),
    );
    let shape = Shape {
        name: &name,
        label: &label,
        replay: "cargo test -p quarry-object --test fault_injection",
        base_seed: 1000 * drives as u64 + if versioned { 500 } else { 0 },
        seeds: 30,
        max_faulty: None,
    };
    let setup = |seed, log| {
        let stats = stats.clone();
        async move {
            let run = local_run(seed, drives, stats, log).await.0;
            if versioned {
                run.versioned().await
            } else {
                run
            }
        }
    };
    run_many(&shape, setup, || stats.summary()).await;
}

/// The log of a run with the temp dir's random name (`.tmpXXXXXX`) made the same in every run,
/// for the few errors that name a file.
fn normalized(log: &[String]) -> Vec<String> {
    log.iter()
        .map(|l| {
            let mut out = String::with_capacity(l.len());
            let mut rest = l.as_str();
            while let Some(i) = rest.find(".tmp") {
                out.push_str(&rest[..i + 4]);
                rest = &rest[i + 4..];
                let n = rest
                    .char_indices()
                    .take_while(|(_, c)| c.is_ascii_alphanumeric())
                    .count();
                out.push_str("XXXXXX");
                rest = &rest[n..];
            }
            out.push_str(rest);
            out
        })
        .collect()
}

/// A seed replays exactly: two runs of one seed (ids, times and background heals from the
/// seed's [`StepRuntime`]) make the same drive calls, inject the same faults and log the same
/// operations with the same outcomes. Before the runtime was injectable, the heal worker's
/// timing and random upload ids moved a seed's drive calls by up to 1% from run to run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_replays_exactly() {
    let seed = env("QUARRY_FAULT_SEED", 4004);
    let ops = env("QUARRY_FAULT_OPS", 60);
    let mut runs = Vec::new();
    for _ in 0..2 {
        let stats = Arc::new(FaultStats::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (run, _) = local_run(seed, 4, stats.clone(), log.clone()).await;
        let totals = run_seed(async { run }, ops, None).await;
        let log = normalized(&log.lock().unwrap());
        assert!(
            totals.is_ok(),
            "seed {seed}: {totals:?}\n{}",
            log.join("\n")
        );
        runs.push((stats.summary(), log));
    }
    let (a, b) = (&runs[0], &runs[1]);
    assert!(a.1.len() > ops as usize, "the run logged its operations");
    assert_eq!(a.0, b.0, "the drive calls and faults differ");
    if let Some(i) = (0..a.1.len().min(b.1.len())).find(|&i| a.1[i] != b.1[i]) {
        panic!(
            "the runs differ at log line {i}:\n{}\n---\n{}",
            a.1[i..]
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
            b.1[i..]
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert_eq!(a.1.len(), b.1.len());
    println!("seed {seed} replayed exactly: {}", a.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_faults_four_drives() {
    local_many(4, false).await;
}

/// The versioned model: versions and delete markers under faults; nothing acknowledged lost,
/// no version resurrected or reordered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_faults_versioned_four_drives() {
    local_many(4, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_faults_six_drives() {
    local_many(6, false).await;
}

/// A set whose drives can be switched faulty by hand, with objects written before the faults.
struct Manual {
    run: Run,
    drives: Vec<FaultyDrive>,
}

impl Manual {
    async fn new(drives: usize) -> Manual {
        let stats = Arc::new(FaultStats::default());
        let (run, drives) = local_run(0, drives, stats, Arc::new(Mutex::new(Vec::new()))).await;
        Manual { run, drives }
    }

    fn layer(&self) -> &ErasureServer {
        &self.run.layer
    }

    /// Applies `cfg` to the drives in `which`, and no faults to the others.
    fn faults(&self, which: &[usize], cfg: FaultConfig) {
        for (i, d) in self.drives.iter().enumerate() {
            d.set_faults(which.contains(&i).then(|| cfg.clone()));
        }
    }

    async fn put(&self, key: &str, data: &[u8]) -> Result<ObjectInfo> {
        tokio::time::timeout(
            TIMEOUT,
            self.layer().put_object(
                BUCKET,
                key,
                body(data, 5000),
                PutOptions {
                    size: Some(data.len() as u64),
                    ..Default::default()
                },
            ),
        )
        .await
        .expect("PUT hangs")
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.run.get(key, None).await.expect("GET hangs")
    }

    async fn part(&self, key: &str, id: &str, n: u32, data: &[u8]) -> Result<UploadedPart> {
        tokio::time::timeout(
            TIMEOUT,
            self.layer().put_object_part(
                BUCKET,
                key,
                id,
                n,
                body(data, 5000),
                PartOptions {
                    size: Some(data.len() as u64),
                    ..Default::default()
                },
            ),
        )
        .await
        .expect("UploadPart hangs")
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
        .collect()
}

fn is_quorum_error(e: &Error) -> bool {
    matches!(e, Error::ReadQuorum { .. } | Error::WriteQuorum { .. })
}

/// More drives fail than parity covers: every operation fails with a quorum error (never wrong
/// bytes, never "not found"), and once the drives are back and healed everything is intact.
#[tokio::test]
async fn faults_beyond_parity_fail_with_quorum_errors() {
    let m = Manual::new(4).await;
    let small = pattern(1000, 3);
    let big = pattern(5 * BLOCK + 77, 5);
    m.put("small", &small).await.unwrap();
    m.put("big", &big).await.unwrap();
    let up = m
        .layer()
        .new_multipart_upload(BUCKET, "mp", Default::default())
        .await
        .unwrap();
    let p1 = m
        .part("mp", &up.upload_id, 1, &pattern(3000, 7))
        .await
        .unwrap();

    // Three of four drives dead (parity is 2).
    m.faults(&[0, 2, 3], FaultConfig::dead());
    for key in ["small", "big", "absent"] {
        let e = m.get(key).await.unwrap_err();
        assert!(is_quorum_error(&e), "GET {key}: {e:?}");
        let e = m.layer().heal_object(BUCKET, key).await.unwrap_err();
        assert!(is_quorum_error(&e), "heal {key}: {e:?}");
    }
    let e = m.put("small", &pattern(10, 9)).await.unwrap_err();
    assert!(is_quorum_error(&e), "PUT: {e:?}");
    let e = m.put("new", &pattern(100_000, 9)).await.unwrap_err();
    assert!(is_quorum_error(&e), "PUT: {e:?}");
    let e = m.layer().delete_object(BUCKET, "big").await.unwrap_err();
    assert!(is_quorum_error(&e), "DELETE: {e:?}");
    let e = m
        .layer()
        .list_objects(
            BUCKET,
            ListOptions {
                max_keys: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "LIST: {e:?}");
    let e = m
        .layer()
        .new_multipart_upload(BUCKET, "mp2", Default::default())
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "CreateMultipartUpload: {e:?}");
    let e = m
        .part("mp", &up.upload_id, 2, &pattern(3000, 8))
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "UploadPart: {e:?}");
    let complete = vec![CompletePart {
        number: 1,
        etag: p1.etag.clone(),
        checksum: None,
    }];
    let e = m
        .layer()
        .complete_multipart_upload(
            BUCKET,
            "mp",
            &up.upload_id,
            complete.clone(),
            Default::default(),
        )
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "CompleteMultipartUpload: {e:?}");
    let e = m
        .layer()
        .abort_multipart_upload(BUCKET, "mp", &up.upload_id)
        .await
        .unwrap_err();
    assert!(is_quorum_error(&e), "AbortMultipartUpload: {e:?}");

    // Back, healed: everything acknowledged is intact, nothing failed is visible.
    m.faults(&[], FaultConfig::default());
    for key in ["small", "big", "new"] {
        m.layer().heal_object(BUCKET, key).await.unwrap();
    }
    assert_eq!(m.get("small").await.unwrap(), small);
    assert_eq!(m.get("big").await.unwrap(), big);
    assert!(matches!(m.get("new").await, Err(Error::ObjectNotFound)));
    let done = m
        .layer()
        .complete_multipart_upload(BUCKET, "mp", &up.upload_id, complete, Default::default())
        .await
        .unwrap();
    assert_eq!(done.size, 3000);
    assert_eq!(m.get("mp").await.unwrap(), pattern(3000, 7));
}

/// Exactly parity drives down on a 2+2 set: reads work, writes (which need 3) fail cleanly.
#[tokio::test]
async fn parity_drives_down_reads_work_writes_fail() {
    let m = Manual::new(4).await;
    let big = pattern(3 * BLOCK + 1, 11);
    m.put("big", &big).await.unwrap();
    m.faults(&[1, 2], FaultConfig::dead());
    assert_eq!(m.get("big").await.unwrap(), big);
    assert!(matches!(m.get("absent").await, Err(Error::ObjectNotFound)));
    let e = m.put("big", &pattern(100, 1)).await.unwrap_err();
    assert!(
        matches!(e, Error::WriteQuorum { have: 2, need: 3 }),
        "{e:?}"
    );
    assert_eq!(m.get("big").await.unwrap(), big);
}

/// Randomized, with up to every drive faulty: errors are allowed, wrong bytes are not, and once
/// the faults stop and every key is healed, everything acknowledged is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_faults_beyond_parity() {
    let stats = Arc::new(FaultStats::default());
    let seeds = env("QUARRY_FAULT_SEEDS", 30) / 3;
    let ops = env("QUARRY_FAULT_OPS", 60);
    let base = env("QUARRY_FAULT_BASE_SEED", 90_000);
    let (mut checks, mut failed) = (0, 0);
    for seed in base..base + seeds {
        let log = Arc::new(Mutex::new(Vec::new()));
        let setup = local_run(seed, 4, stats.clone(), log.clone());
        let task = tokio::spawn(run_seed(async move { setup.await.0 }, ops, Some(4)));
        match task.await {
            Ok(Ok(t)) => {
                checks += t.checks;
                failed += t.op_errors;
            }
            Ok(Err(why)) => panic!(
                "seed {seed} failed: {why}\n{}\nreplay: QUARRY_FAULT_BASE_SEED={seed} QUARRY_FAULT_SEEDS=3",
                log.lock().unwrap().join("\n")
            ),
            Err(e) => panic!("seed {seed} panicked: {e}\n{}", log.lock().unwrap().join("\n")),
        }
    }
    println!(
        "fault injection beyond parity, 4 drives: {seeds} seeds x {ops} operations, {checks} invariant checks, \
         {failed} operations failed (allowed); {}",
        stats.summary()
    );
}

/// Full drives: within parity writes go on; beyond it every write fails with `StorageFull`
/// (the S3 layer's `XQuarryStorageFull`, 507), existing objects stay untouched, reads and deletes
/// keep working, and writes resume once there is space again.
#[tokio::test]
async fn disk_full() {
    let m = Manual::new(4).await;
    let small = pattern(500, 1);
    let big = pattern(4 * BLOCK + 3, 2);
    m.put("small", &small).await.unwrap();
    m.put("big", &big).await.unwrap();
    let up = m
        .layer()
        .new_multipart_upload(BUCKET, "mp", Default::default())
        .await
        .unwrap();

    // One full drive of four: parity covers it.
    m.faults(&[3], FaultConfig::full_disk());
    let one = pattern(2 * BLOCK, 4);
    m.put("one", &one).await.unwrap();
    assert_eq!(m.get("one").await.unwrap(), one);

    // Two full drives: a write needs three.
    m.faults(&[1, 3], FaultConfig::full_disk());
    for (key, data) in [
        ("small", pattern(700, 5)),
        ("big", pattern(3 * BLOCK, 6)),
        ("new", pattern(10, 7)),
    ] {
        let e = m.put(key, &data).await.unwrap_err();
        assert!(
            matches!(e, Error::StorageFull { have: 2, need: 3 }),
            "PUT {key}: {e:?}"
        );
    }
    let e = m
        .part("mp", &up.upload_id, 1, &pattern(BLOCK * 2, 8))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::StorageFull { .. }), "UploadPart: {e:?}");
    let e = m
        .layer()
        .new_multipart_upload(BUCKET, "mp2", Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { .. }),
        "CreateMultipartUpload: {e:?}"
    );
    // Existing objects are untouched and readable; the failed writes left nothing.
    assert_eq!(m.get("small").await.unwrap(), small);
    assert_eq!(m.get("big").await.unwrap(), big);
    assert_eq!(m.get("one").await.unwrap(), one);
    assert!(matches!(m.get("new").await, Err(Error::ObjectNotFound)));
    // Deleting frees space, and works on a full drive.
    m.layer().delete_object(BUCKET, "one").await.unwrap();
    assert!(matches!(m.get("one").await, Err(Error::ObjectNotFound)));

    // Every drive full.
    m.faults(&[0, 1, 2, 3], FaultConfig::full_disk());
    let e = m.put("new", &pattern(10, 9)).await.unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { have: 0, need: 3 }),
        "{e:?}"
    );
    let e = m.put("big", &pattern(5 * BLOCK, 9)).await.unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { have: 0, need: 3 }),
        "{e:?}"
    );
    assert_eq!(m.get("small").await.unwrap(), small);
    assert_eq!(m.get("big").await.unwrap(), big);

    // Space again: writes resume.
    m.faults(&[], FaultConfig::default());
    let new = pattern(3 * BLOCK + 5, 10);
    m.put("new", &new).await.unwrap();
    assert_eq!(m.get("new").await.unwrap(), new);
    let p = m
        .part("mp", &up.upload_id, 1, &pattern(1000, 11))
        .await
        .unwrap();
    let done = m
        .layer()
        .complete_multipart_upload(
            BUCKET,
            "mp",
            &up.upload_id,
            vec![CompletePart {
                number: 1,
                etag: p.etag,
                checksum: None,
            }],
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.size, 1000);
}

/// Drives that fill up during a write (their free space looked fine): the write fails with
/// `StorageFull` as its shards are refused, before it commits anything.
#[tokio::test]
async fn disk_fills_during_write() {
    let m = Manual::new(4).await;
    let big = pattern(4 * BLOCK + 3, 2);
    m.put("big", &big).await.unwrap();
    let up = m
        .layer()
        .new_multipart_upload(BUCKET, "mp", Default::default())
        .await
        .unwrap();
    m.faults(&[0, 2], FaultConfig::filling_disk());
    let e = m.put("big", &pattern(3 * BLOCK, 6)).await.unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { have: 2, need: 3 }),
        "PUT: {e:?}"
    );
    let e = m
        .part("mp", &up.upload_id, 1, &pattern(BLOCK * 2, 8))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::StorageFull { have: 2, need: 3 }),
        "UploadPart: {e:?}"
    );
    assert_eq!(m.get("big").await.unwrap(), big);
    m.faults(&[], FaultConfig::default());
    assert_eq!(m.get("big").await.unwrap(), big);
}

/// An acknowledged object whose write missed one drive is not reported missing when other
/// drives fail to answer: the read fails with a quorum error instead of NoSuchKey.
#[tokio::test]
async fn acknowledged_object_is_never_not_found() {
    let m = Manual::new(4).await;
    m.faults(&[3], FaultConfig::dead());
    let data = pattern(3000, 12);
    m.put("x", &data).await.unwrap(); // on drives 0, 1, 2
    m.faults(&[1, 2], FaultConfig::dead());
    // Drive 0 holds it, drive 3 never saw it: one "absent" answer proves nothing.
    let e = m.get("x").await.unwrap_err();
    assert!(matches!(e, Error::ReadQuorum { .. }), "{e:?}");
    let e = m.layer().object_info(BUCKET, "x").await.unwrap_err();
    assert!(matches!(e, Error::ReadQuorum { .. }), "{e:?}");
    m.faults(&[], FaultConfig::default());
    assert_eq!(m.get("x").await.unwrap(), data);
}

/// The GET copy counter counts exactly the shard bytes that did not land in the buffer the GET
/// gave the drive: none from drives that read in place, none for inline objects (slices of their
/// metadata), every chunk once the drives hand back buffers of their own.
#[tokio::test]
async fn get_copy_counter_counts_bytes_that_do_not_land_in_place() {
    let m = Manual::new(4).await;
    let copied = || async { m.layer().stats().await.get_copied_bytes_total };
    let small = pattern(1000, 7);
    let big = pattern(3 * BLOCK + 5, 9);
    m.put("small", &small).await.unwrap();
    m.put("big", &big).await.unwrap();

    // Inline: no shard is read into a buffer, whatever the drives do.
    for d in &m.drives {
        d.set_reads_elsewhere(true);
    }
    assert_eq!(m.get("small").await.unwrap(), small);
    assert_eq!(copied().await, 0, "an inline GET copied");

    // Shard files read in place: the chunks are the stripe buffer.
    for d in &m.drives {
        d.set_reads_elsewhere(false);
    }
    assert_eq!(m.get("big").await.unwrap(), big);
    assert_eq!(copied().await, 0, "an in-place GET copied");

    // Drives that hand back their own buffers: every data chunk (at least the object's bytes,
    // with their hashes) is counted.
    for d in &m.drives {
        d.set_reads_elsewhere(true);
    }
    assert_eq!(m.get("big").await.unwrap(), big);
    let n = copied().await;
    assert!(
        n >= big.len() as u64,
        "{n} bytes counted for a {}-byte GET of chunks not in place",
        big.len()
    );
}
