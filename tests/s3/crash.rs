//! Crash consistency with real processes: a seeded workload of PUT (0 B to 3 MiB, overwrites),
//! multipart complete and DELETE runs against a single-node server on 4 drives while a timer
//! SIGKILLs the process at a random moment (one round also kills it while a corrupted shard is
//! being healed). After every restart the invariants are checked:
//!
//! - every acknowledged write reads back byte-exact (or its later acknowledged overwrite/delete);
//! - a write in flight at the kill is either wholly the old or wholly the new object (never a mix
//!   or a truncated body), and the ETag matches the body (MD5, or the multipart MD5-of-MD5s);
//! - listings agree with reads (every listed key GETs, every present key is listed, no absent key is);
//! - `.quarry.sys/tmp` is empty after the start-up sweep (the new process may have writes of its
//!   own in flight for a moment, so it is polled);
//! - the server log holds no panic;
//! - the server runs with a 2 s minimum age for its orphan sweep (`QUARRY_ORPHAN_MIN_AGE`, set
//!   for it alone; override it in the environment): no orphaned data dir or metadata temp file is
//!   left in object dirs shortly after the last restart.
//!
//! Odd rounds aim the kill at commit points (a CompleteMultipartUpload and a DELETE fired
//! together, the kill 0 to 30 ms later).
//!
//! Seeds are fixed per test (printed, and named in every failure). Run more by hand:
//! `QUARRY_CRASH_SEED=1234 QUARRY_CRASH_ROUNDS=10 cargo nextest run -p quarry-integration -E 'test(crash)'`
//! (the seed replaces each test's seed, so run one test).
//! Replay is of the operation sequence and the kill delay; where the kill lands in the server's
//! code still depends on timing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use md5::{Digest as _, Md5};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

const MIB: usize = 1 << 20;
const BUCKET: &str = "crash";
const WORKERS: usize = 3;
const KEYS_PER_WORKER: usize = 4;
/// Keys only the heal round touches (never written by the workers).
const HEAL_KEYS: [&str; 2] = ["heal/a", "heal/b"];

/// One version of an object: its bytes and the ETag S3 must report for them.
#[derive(Clone)]
struct Version {
    data: Arc<Vec<u8>>,
    etag: String,
}

impl Version {
    fn single(data: Vec<u8>) -> Version {
        let etag = etag_of(&data);
        Version {
            data: Arc::new(data),
            etag,
        }
    }

    fn multipart(parts: &[Vec<u8>]) -> Version {
        let mut md5s = Md5::new();
        for p in parts {
            md5s.update(Md5::digest(p));
        }
        let etag = format!("\"{}-{}\"", hex::encode(md5s.finalize()), parts.len());
        Version {
            data: Arc::new(parts.concat()),
            etag,
        }
    }
}

/// `None`: the key does not exist.
type ObjState = Option<Version>;

fn describe_state(s: &ObjState) -> String {
    match s {
        None => "absent".into(),
        Some(v) => format!("{} bytes, ETag {}", v.data.len(), v.etag),
    }
}

#[derive(Clone, Default)]
struct KeyState {
    /// What the last acknowledged operation left (or what the last check observed).
    acked: ObjState,
    /// The state an operation that was not acknowledged would leave, had it taken effect.
    in_flight: Option<ObjState>,
}

#[derive(Default)]
struct Counters {
    ops_started: AtomicUsize,
    acked: AtomicUsize,
    in_flight_at_kill: AtomicUsize,
    checks: AtomicUsize,
    /// In-flight writes found applied (new state) / not applied (old state) after a restart.
    resolved_new: AtomicUsize,
    resolved_old: AtomicUsize,
}

type Model = Arc<Mutex<BTreeMap<String, KeyState>>>;

fn lock(m: &Model) -> std::sync::MutexGuard<'_, BTreeMap<String, KeyState>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Random object size: a few empty, many inline-sized, many spanning several 1 MiB blocks.
fn random_size(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..100) {
        0..=5 => 0,
        6..=30 => rng.gen_range(1..4096),
        31..=55 => rng.gen_range(4096..256 * 1024),
        _ => rng.gen_range(256 * 1024..=3 * MIB),
    }
}

fn random_data(rng: &mut StdRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

enum Op {
    Put(Vec<u8>),
    Delete,
    /// Two parts: the first at the 5 MiB minimum, the last smaller.
    Multipart(Vec<Vec<u8>>),
    /// CompleteMultipartUpload of parts already uploaded: `(upload id, parts)`.
    Complete(String, Vec<CompletedPart>),
}

async fn run_op(c: &Client, key: &str, op: &Op) -> Result<(), String> {
    match op {
        Op::Put(data) => c
            .put_object()
            .bucket(BUCKET)
            .key(key)
            .body(data.clone().into())
            .send()
            .await
            .map(|_| ())
            .map_err(|e| format!("PUT: {}", describe(&e))),
        Op::Delete => c
            .delete_object()
            .bucket(BUCKET)
            .key(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| format!("DELETE: {}", describe(&e))),
        Op::Multipart(parts) => {
            let up = c
                .create_multipart_upload()
                .bucket(BUCKET)
                .key(key)
                .send()
                .await
                .map_err(|e| format!("CreateMultipartUpload: {}", describe(&e)))?;
            let id = up.upload_id().unwrap_or_default().to_string();
            let mut done = Vec::new();
            for (i, p) in parts.iter().enumerate() {
                let n = i as i32 + 1;
                let r = c
                    .upload_part()
                    .bucket(BUCKET)
                    .key(key)
                    .upload_id(&id)
                    .part_number(n)
                    .body(p.clone().into())
                    .send()
                    .await
                    .map_err(|e| format!("UploadPart {n}: {}", describe(&e)))?;
                done.push(
                    CompletedPart::builder()
                        .part_number(n)
                        .set_e_tag(r.e_tag().map(str::to_string))
                        .build(),
                );
            }
            c.complete_multipart_upload()
                .bucket(BUCKET)
                .key(key)
                .upload_id(&id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(done))
                        .build(),
                )
                .send()
                .await
                .map(|_| ())
                .map_err(|e| format!("CompleteMultipartUpload: {}", describe(&e)))
        }
        Op::Complete(id, done) => c
            .complete_multipart_upload()
            .bucket(BUCKET)
            .key(key)
            .upload_id(id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(done.clone()))
                    .build(),
            )
            .send()
            .await
            .map(|_| ())
            .map_err(|e| format!("CompleteMultipartUpload: {}", describe(&e))),
    }
}

/// One worker: sequential operations on its own keys (so at most one operation per key is in
/// flight) until the kill flag is up or an operation fails.
async fn worker(
    c: Client,
    keys: Vec<String>,
    mut rng: StdRng,
    model: Model,
    killed: Arc<AtomicBool>,
    counters: Arc<Counters>,
) -> Option<String> {
    while !killed.load(Ordering::SeqCst) {
        let key = keys[rng.gen_range(0..keys.len())].clone();
        let (op, new_state) = match rng.gen_range(0..100) {
            0..=14 => (Op::Delete, None),
            15..=24 => {
                let last = rng.gen_range(1..MIB);
                let parts = vec![random_data(&mut rng, 5 * MIB), random_data(&mut rng, last)];
                let v = Version::multipart(&parts);
                (Op::Multipart(parts), Some(v))
            }
            _ => {
                let n = random_size(&mut rng);
                let data = random_data(&mut rng, n);
                let v = Version::single(data.clone());
                (Op::Put(data), Some(v))
            }
        };
        if let Some(err) = tracked_op(&c, &key, &op, new_state, &model, &killed, &counters).await {
            return err;
        }
    }
    None
}

/// Runs one operation, recording it in flight first and acknowledged on success. `None`: it
/// succeeded; `Some(None)`: it failed after the kill; `Some(Some(e))`: it failed before the kill.
async fn tracked_op(
    c: &Client,
    key: &str,
    op: &Op,
    new_state: ObjState,
    model: &Model,
    killed: &AtomicBool,
    counters: &Counters,
) -> Option<Option<String>> {
    lock(model).entry(key.to_string()).or_default().in_flight = Some(new_state.clone());
    counters.ops_started.fetch_add(1, Ordering::Relaxed);
    match run_op(c, key, op).await {
        Ok(()) => {
            let mut m = lock(model);
            let ks = m.entry(key.to_string()).or_default();
            ks.acked = new_state;
            ks.in_flight = None;
            counters.acked.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(e) => {
            counters.in_flight_at_kill.fetch_add(1, Ordering::Relaxed);
            if killed.load(Ordering::SeqCst) {
                return Some(None);
            }
            // The process was alive: a real failure (the outcome stays in flight).
            Some(Some(format!("{key}: {e} (before the kill)")))
        }
    }
}

/// Uploads the parts of a multipart upload of `key` (not completed); returns the upload id and
/// the completed-part list to complete it with.
async fn upload_parts(
    c: &Client,
    key: &str,
    parts: &[Vec<u8>],
    ctx: &str,
) -> (String, Vec<CompletedPart>) {
    let up = c
        .create_multipart_upload()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{ctx}: CreateMultipartUpload {key}: {}", describe(&e)));
    let id = up.upload_id().unwrap_or_default().to_string();
    let mut done = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let n = i as i32 + 1;
        let r = c
            .upload_part()
            .bucket(BUCKET)
            .key(key)
            .upload_id(&id)
            .part_number(n)
            .body(p.clone().into())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{ctx}: UploadPart {key} {n}: {}", describe(&e)));
        done.push(
            CompletedPart::builder()
                .part_number(n)
                .set_e_tag(r.e_tag().map(str::to_string))
                .build(),
        );
    }
    (id, done)
}

/// GETs a key: `Ok(None)` when absent.
async fn read_obj(c: &Client, key: &str) -> Result<Option<(Vec<u8>, String)>, String> {
    match c.get_object().bucket(BUCKET).key(key).send().await {
        Ok(out) => {
            let etag = out.e_tag().unwrap_or_default().to_string();
            let body = out
                .body
                .collect()
                .await
                .map_err(|e| format!("GET body of {key}: {e}"))?;
            Ok(Some((body.into_bytes().to_vec(), etag)))
        }
        Err(e) if error_code(&e).as_deref() == Some("NoSuchKey") => Ok(None),
        Err(e) => Err(format!("GET {key}: {}", describe(&e))),
    }
}

async fn list_keys(c: &Client) -> Result<BTreeSet<String>, String> {
    let mut out = BTreeSet::new();
    let mut token: Option<String> = None;
    loop {
        let r = c
            .list_objects_v2()
            .bucket(BUCKET)
            .set_continuation_token(token.clone())
            .send()
            .await
            .map_err(|e| format!("ListObjectsV2: {}", describe(&e)))?;
        for o in r.contents() {
            out.insert(o.key().unwrap_or_default().to_string());
        }
        match r.next_continuation_token() {
            Some(t) if r.is_truncated() == Some(true) => token = Some(t.to_string()),
            _ => return Ok(out),
        }
    }
}

fn state_matches(s: &ObjState, got: &Option<(Vec<u8>, String)>) -> bool {
    match (s, got) {
        (None, None) => true,
        (Some(v), Some((data, etag))) => *v.data == *data && v.etag == *etag,
        _ => false,
    }
}

fn describe_got(got: &Option<(Vec<u8>, String)>) -> String {
    match got {
        None => "absent".into(),
        Some((d, e)) => format!("{} bytes, ETag {e} (MD5 of body {})", d.len(), etag_of(d)),
    }
}

/// Checks every invariant after a restart; resolves each in-flight write to the state found.
async fn check_invariants(
    s: &TestServer,
    model: &Model,
    seed: u64,
    round: usize,
    counters: &Counters,
) {
    let c = s.client();
    let ctx = format!("seed {seed}, round {round}");
    let keys: Vec<(String, KeyState)> = lock(model)
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut present = BTreeSet::new();
    let mut must_list = BTreeSet::new();
    let mut must_not_list = BTreeSet::new();
    for (key, ks) in &keys {
        let got = read_obj(&c, key)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        counters.checks.fetch_add(1, Ordering::Relaxed);
        let new_state = if state_matches(&ks.acked, &got) {
            if ks.in_flight.is_some() {
                counters.resolved_old.fetch_add(1, Ordering::Relaxed);
            }
            ks.acked.clone()
        } else if ks
            .in_flight
            .as_ref()
            .is_some_and(|n| state_matches(n, &got))
        {
            counters.resolved_new.fetch_add(1, Ordering::Relaxed);
            ks.in_flight.clone().flatten()
        } else {
            panic!(
                "{ctx}: {key} reads back as {}; acknowledged state: {}; in flight: {}",
                describe_got(&got),
                describe_state(&ks.acked),
                ks.in_flight
                    .as_ref()
                    .map(describe_state)
                    .unwrap_or_else(|| "nothing".into())
            );
        };
        if got.is_some() {
            present.insert(key.clone());
        }
        // Listing expectations: a write that was in flight may be listed or not only if it
        // was still undecided; here every key is decided by the read above.
        if new_state.is_some() {
            must_list.insert(key.clone());
        } else {
            must_not_list.insert(key.clone());
        }
        let mut m = lock(model);
        let e = m.entry(key.clone()).or_default();
        e.acked = new_state;
        e.in_flight = None;
    }
    let listed = list_keys(&c).await.unwrap_or_else(|e| panic!("{ctx}: {e}"));
    counters.checks.fetch_add(1, Ordering::Relaxed);
    for k in &listed {
        let known = keys.iter().any(|(m, _)| m == k) || HEAL_KEYS.contains(&k.as_str());
        assert!(known, "{ctx}: listing shows {k}, a key never written");
        if !HEAL_KEYS.contains(&k.as_str()) {
            assert!(
                present.contains(k),
                "{ctx}: {k} is listed but GET says it is absent"
            );
        }
    }
    for k in &must_list {
        assert!(listed.contains(k), "{ctx}: {k} GETs but is not listed");
    }
    for k in &must_not_list {
        assert!(!listed.contains(k), "{ctx}: {k} is absent but still listed");
    }

    // Delimited listings too: under each worker's prefix exactly the present keys, and no
    // common prefix (the keys have no deeper level; a leftover directory must not show as one).
    for w in 0..WORKERS {
        let prefix = format!("w{w}/");
        let r = c
            .list_objects_v2()
            .bucket(BUCKET)
            .prefix(&prefix)
            .delimiter("/")
            .send()
            .await
            .unwrap_or_else(|e| panic!("{ctx}: delimited ListObjectsV2: {}", describe(&e)));
        counters.checks.fetch_add(1, Ordering::Relaxed);
        let got: BTreeSet<String> = r
            .contents()
            .iter()
            .map(|o| o.key().unwrap_or_default().to_string())
            .collect();
        let want: BTreeSet<String> = present
            .iter()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        assert_eq!(got, want, "{ctx}: delimited listing of {prefix}");
        let prefixes: Vec<&str> = r
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix())
            .collect();
        assert!(
            prefixes.is_empty(),
            "{ctx}: delimited listing of {prefix} shows common prefixes {prefixes:?}"
        );
    }

    // The start-up sweep emptied tmp (poll: the new process may be writing for a moment).
    let tmp_empty = |d: &Path| {
        std::fs::read_dir(d.join(".quarry.sys").join("tmp"))
            .map(|mut rd| rd.next().is_none())
            .unwrap_or(false)
    };
    let all_empty = wait_until(Duration::from_secs(10), || {
        (0..s.drive_count()).all(|i| tmp_empty(s.drive_path(i)))
    })
    .await;
    counters.checks.fetch_add(1, Ordering::Relaxed);
    if !all_empty {
        let left: Vec<String> = (0..s.drive_count())
            .flat_map(|i| {
                list_files(&s.drive_path(i).join(".quarry.sys").join("tmp"))
                    .into_iter()
                    .map(move |p| format!("d{}: {}", i + 1, p.display()))
            })
            .collect();
        panic!("{ctx}: .quarry.sys/tmp not empty 10 s after start-up: {left:?}");
    }
    assert_no_panic(s, &ctx);
}

fn assert_no_panic(s: &TestServer, ctx: &str) {
    let log = std::fs::read_to_string(s.root().join("quarry.log")).unwrap_or_default();
    if let Some(line) = log.lines().find(|l| l.contains("panicked")) {
        panic!("{ctx}: the server panicked: {line}");
    }
}

/// Files a crash may leave inside object directories that nothing refers to: data dirs other
/// than the one `quarry.meta` names, and metadata temp files. SIGKILL between the data-dir rename
/// and the metadata rename leaves such a dir (space, not data, leaks) until the server's orphan
/// sweep removes it: counted, and asserted gone after the last restart.
fn orphans(s: &TestServer) -> Vec<String> {
    let mut n = Vec::new();
    for i in 0..s.drive_count() {
        let drive = s.drive_path(i);
        for f in list_files(&drive.join(BUCKET)) {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
            if name
                .as_deref()
                .is_some_and(|n| n.starts_with(".quarry.tmp."))
            {
                n.push(format!("d{}: {}", i + 1, f.display()));
                continue;
            }
            // <key...>/<data-dir>/part.N
            if name.as_deref().is_some_and(|n| n.starts_with("part.")) {
                let Some(dd) = f.parent() else { continue };
                let Some(obj) = dd.parent() else { continue };
                let key = obj.to_string_lossy();
                let named = read_meta(drive, BUCKET, &key).and_then(|m| {
                    m.get("data_dir")
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                });
                let this = dd.file_name().map(|n| n.to_string_lossy().into_owned());
                if named != this {
                    n.push(format!(
                        "d{}: {} (quarry.meta names data dir {})",
                        i + 1,
                        f.display(),
                        named.as_deref().unwrap_or("none")
                    ));
                }
            }
        }
    }
    n
}

/// Corrupts the first shard file of a heal key on drive 1, reads it (correct bytes, heal
/// queued) and returns: the caller kills the process while the heal runs.
async fn corrupt_and_read(s: &TestServer, key: &str, want: &Version, ctx: &str) {
    let part = part_path(s.drive_path(0), BUCKET, key)
        .unwrap_or_else(|| panic!("{ctx}: {key} has no shard file on drive 1"));
    flip_bytes(&part, 40, 64);
    let got = read_obj(&s.client(), key)
        .await
        .unwrap_or_else(|e| panic!("{ctx}: read of corrupted {key}: {e}"));
    assert!(
        state_matches(&Some(want.clone()), &got),
        "{ctx}: {key} with a corrupted shard reads back as {}",
        describe_got(&got)
    );
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Waits for the workers after a kill: each ends within 30 s, and none failed before it.
async fn join_workers(
    tasks: impl IntoIterator<Item = tokio::task::JoinHandle<Option<String>>>,
    ctx: &str,
) {
    for t in tasks {
        match tokio::time::timeout(Duration::from_secs(30), t).await {
            Ok(Ok(None)) => {}
            Ok(Ok(Some(err))) => panic!("{ctx}: {err}"),
            Ok(Err(e)) => panic!("{ctx}: worker task failed: {e}"),
            Err(_) => panic!("{ctx}: a worker did not finish 30 s after the kill"),
        }
    }
}

async fn crash_rounds(default_seed: u64) {
    let seed = env_u64("QUARRY_CRASH_SEED").unwrap_or(default_seed);
    let rounds = env_u64("QUARRY_CRASH_ROUNDS").unwrap_or(4) as usize;
    eprintln!("crash consistency: seed {seed}, {rounds} rounds");
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut s = TestServer::start_single(4).await;
    // Every restart sweeps orphans older than this many seconds (the default is 15 minutes): the
    // leftovers of the kills must be gone soon after the last start.
    let min_age = env_u64("QUARRY_ORPHAN_MIN_AGE")
        .filter(|&a| a <= 30)
        .unwrap_or(2);
    s.set_env("QUARRY_ORPHAN_MIN_AGE", &min_age.to_string());
    // The data that overwrites and deletes after the last start replaced goes within a second.
    s.set_env("QUARRY_RETIRED_GRACE", "1");
    s.create_bucket(BUCKET).await;

    // Objects for the heal rounds, large enough to have shard files (not inline).
    let mut heal_objs = Vec::new();
    for key in HEAL_KEYS {
        let v = Version::single(random_data(&mut rng, 2 * MIB + 123));
        put_bytes(&s.client(), BUCKET, key, &v.data).await;
        heal_objs.push((key, v));
    }

    let model: Model = Arc::default();
    let counters = Arc::new(Counters::default());
    let mut kills = 0;
    for round in 0..rounds {
        let ctx = format!("seed {seed}, round {round}");
        let killed = Arc::new(AtomicBool::new(false));
        let c = s.client();
        let mut tasks = Vec::new();
        for w in 0..WORKERS {
            let keys = (0..KEYS_PER_WORKER)
                .map(|k| format!("w{w}/key{k}"))
                .collect();
            let wrng = StdRng::seed_from_u64(rng.gen());
            tasks.push(tokio::spawn(worker(
                c.clone(),
                keys,
                wrng,
                model.clone(),
                killed.clone(),
                counters.clone(),
            )));
        }
        // The last round (of 2 or more) kills during a heal; the others at a random moment.
        let heal_round = rounds >= 2 && round == rounds - 1;
        // Odd rounds aim the kill at commit points: a CompleteMultipartUpload and a DELETE
        // fired together, the kill 0-30 ms later.
        let targeted = !heal_round && round % 2 == 1;
        let mut fired = Vec::new();
        if targeted {
            let mp = format!("t/mp{round}");
            let last = rng.gen_range(1..MIB);
            let parts = vec![random_data(&mut rng, 5 * MIB), random_data(&mut rng, last)];
            let (id, done) = upload_parts(&c, &mp, &parts, &ctx).await;
            let del = format!("t/del{round}");
            let n = rng.gen_range(0..600_000);
            let v = Version::single(random_data(&mut rng, n));
            put_bytes(&c, BUCKET, &del, &v.data).await;
            lock(&model).entry(del.clone()).or_default().acked = Some(v);
            for (key, op, new_state) in [
                (mp, Op::Complete(id, done), Some(Version::multipart(&parts))),
                (del, Op::Delete, None),
            ] {
                let (c, model, killed, counters) =
                    (c.clone(), model.clone(), killed.clone(), counters.clone());
                fired.push(tokio::spawn(async move {
                    tracked_op(&c, &key, &op, new_state, &model, &killed, &counters)
                        .await
                        .flatten()
                }));
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..30))).await;
        } else if heal_round {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(100..600))).await;
            let (key, v) = &heal_objs[rng.gen_range(0..heal_objs.len())];
            corrupt_and_read(&s, key, v, &ctx).await;
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..40))).await;
        } else {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(200..2000))).await;
        }
        killed.store(true, Ordering::SeqCst);
        s.kill_node(0);
        kills += 1;
        join_workers(tasks.into_iter().chain(fired), &ctx).await;
        s.restart().await;
        check_invariants(&s, &model, seed, round, &counters).await;
        for (key, v) in &heal_objs {
            let got = read_obj(&s.client(), key)
                .await
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
            counters.checks.fetch_add(1, Ordering::Relaxed);
            assert!(
                state_matches(&Some(v.clone()), &got),
                "{ctx}: heal object {key} reads back as {}",
                describe_got(&got)
            );
        }
    }
    // With the short minimum age of its orphan sweep, the leftovers of every kill must be gone
    // within that age of the last start (the sweep runs at start-up and once more a minimum age
    // later).
    let mut leaks = orphans(&s);
    {
        let deadline = Instant::now() + Duration::from_secs(min_age + 15);
        while !leaks.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
            leaks = orphans(&s);
        }
        assert!(
            leaks.is_empty(),
            "seed {seed}: orphaned files left in object dirs {}s after the last start, with QUARRY_ORPHAN_MIN_AGE={min_age}: {leaks:?}",
            min_age + 15
        );
        assert_no_panic(&s, &format!("seed {seed}"));
    }
    eprintln!(
        "crash consistency: seed {seed}: {kills} kills, {} ops started, {} acknowledged, {} in flight at a kill ({} found applied, {} not), {} invariant checks, {} orphaned files in object dirs {:?}, {:.1}s",
        counters.ops_started.load(Ordering::Relaxed),
        counters.acked.load(Ordering::Relaxed),
        counters.in_flight_at_kill.load(Ordering::Relaxed),
        counters.resolved_new.load(Ordering::Relaxed),
        counters.resolved_old.load(Ordering::Relaxed),
        counters.checks.load(Ordering::Relaxed),
        leaks.len(),
        leaks,
        started.elapsed().as_secs_f64()
    );
    assert!(
        counters.acked.load(Ordering::Relaxed) > 0,
        "seed {seed}: no operation was acknowledged: the workload did not run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_consistency_seed_1() {
    crash_rounds(0x51ed_0001).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_consistency_seed_2() {
    crash_rounds(0x51ed_0002).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_consistency_seed_3() {
    crash_rounds(0x51ed_0003).await;
}

// ---------------------------------------------------------------------------------------------
// Versioned buckets: versions, delete markers and deletes by version id under SIGKILL.
// ---------------------------------------------------------------------------------------------

const VBUCKET: &str = "crash-versions";

/// One acknowledged version of a key: its id and bytes (`None`: a delete marker).
#[derive(Clone, Debug)]
struct VKnown {
    id: String,
    data: Option<Arc<Vec<u8>>>,
}

/// What an operation that was not acknowledged would have left, had it taken effect.
#[derive(Clone, Debug)]
enum VInFlight {
    /// A new version with these bytes.
    Put(Arc<Vec<u8>>),
    /// A new delete marker.
    Marker,
    /// The acknowledged version of this id removed.
    Remove(String),
}

#[derive(Clone, Debug, Default)]
struct VKey {
    /// Oldest first.
    known: Vec<VKnown>,
    /// Versions whose removal was acknowledged: never listed or read again.
    gone: Vec<String>,
    in_flight: Option<VInFlight>,
}

type VModel = Arc<Mutex<BTreeMap<String, VKey>>>;

fn vlock(m: &VModel) -> std::sync::MutexGuard<'_, BTreeMap<String, VKey>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One worker on its own keys of the versioned bucket, until the kill.
async fn vworker(
    c: Client,
    keys: Vec<String>,
    mut rng: StdRng,
    model: VModel,
    killed: Arc<AtomicBool>,
    counters: Arc<Counters>,
) -> Option<String> {
    while !killed.load(Ordering::SeqCst) {
        let key = keys[rng.gen_range(0..keys.len())].clone();
        let known = vlock(&model).entry(key.clone()).or_default().known.clone();
        let pick = rng.gen_range(0..100);
        let op = if pick < 25 && !known.is_empty() {
            VInFlight::Remove(known[rng.gen_range(0..known.len())].id.clone())
        } else if pick < 45 {
            VInFlight::Marker
        } else {
            let n = random_size(&mut rng).min(600 * 1024);
            VInFlight::Put(Arc::new(random_data(&mut rng, n)))
        };
        vlock(&model).get_mut(&key).unwrap().in_flight = Some(op.clone());
        counters.ops_started.fetch_add(1, Ordering::Relaxed);
        let r: Result<Option<VKnown>, String> = match &op {
            VInFlight::Put(data) => c
                .put_object()
                .bucket(VBUCKET)
                .key(&key)
                .body(data.to_vec().into())
                .send()
                .await
                .map(|o| {
                    Some(VKnown {
                        id: o.version_id().unwrap_or_default().to_owned(),
                        data: Some(data.clone()),
                    })
                })
                .map_err(|e| format!("PUT: {}", describe(&e))),
            VInFlight::Marker => c
                .delete_object()
                .bucket(VBUCKET)
                .key(&key)
                .send()
                .await
                .map(|o| {
                    Some(VKnown {
                        id: o.version_id().unwrap_or_default().to_owned(),
                        data: None,
                    })
                })
                .map_err(|e| format!("DELETE: {}", describe(&e))),
            VInFlight::Remove(id) => c
                .delete_object()
                .bucket(VBUCKET)
                .key(&key)
                .version_id(id)
                .send()
                .await
                .map(|_| None)
                .map_err(|e| format!("DELETE version {id}: {}", describe(&e))),
        };
        match r {
            Ok(added) => {
                let mut m = vlock(&model);
                let vk = m.get_mut(&key).unwrap();
                match (added, &op) {
                    (Some(v), _) => {
                        if v.id.is_empty() || v.id == "null" {
                            return Some(format!("{key}: a write answered no version id"));
                        }
                        vk.known.push(v);
                    }
                    (None, VInFlight::Remove(id)) => {
                        vk.known.retain(|k| &k.id != id);
                        vk.gone.push(id.clone());
                    }
                    (None, _) => unreachable!(),
                }
                vk.in_flight = None;
                counters.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                counters.in_flight_at_kill.fetch_add(1, Ordering::Relaxed);
                if killed.load(Ordering::SeqCst) {
                    return None;
                }
                return Some(format!("{key}: {e} (before the kill)"));
            }
        }
    }
    None
}

/// Every version of `key` as ListObjectVersions answers: (id, size, ETag, is marker, is
/// latest); the object versions first, then the markers, each newest first as listed (the SDK
/// hands the two apart, so their order relative to each other is not kept).
async fn list_key_versions(
    c: &Client,
    key: &str,
) -> Result<Vec<(String, i64, String, bool, bool)>, String> {
    let (mut versions, mut markers) = (Vec::new(), Vec::new());
    let (mut km, mut vm): (Option<String>, Option<String>) = (None, None);
    loop {
        let r = c
            .list_object_versions()
            .bucket(VBUCKET)
            .prefix(key)
            .set_key_marker(km.clone())
            .set_version_id_marker(vm.clone())
            .send()
            .await
            .map_err(|e| format!("ListObjectVersions {key}: {}", describe(&e)))?;
        for v in r.versions().iter().filter(|v| v.key() == Some(key)) {
            versions.push((
                v.version_id().unwrap_or_default().to_owned(),
                v.size().unwrap_or_default(),
                v.e_tag().unwrap_or_default().to_owned(),
                false,
                v.is_latest().unwrap_or(false),
            ));
        }
        for m in r.delete_markers().iter().filter(|m| m.key() == Some(key)) {
            markers.push((
                m.version_id().unwrap_or_default().to_owned(),
                0,
                String::new(),
                true,
                m.is_latest().unwrap_or(false),
            ));
        }
        if r.is_truncated() != Some(true) {
            versions.extend(markers);
            return Ok(versions);
        }
        km = r.next_key_marker().map(str::to_owned);
        vm = r.next_version_id_marker().map(str::to_owned);
    }
}

/// After a restart: each key's versions are exactly the acknowledged ones (an in-flight
/// operation either applied whole or not at all), newest first in the order they were
/// acknowledged, each reading back by id byte-exact; a removed version never comes back.
async fn check_versions(s: &TestServer, model: &VModel, ctx: &str, counters: &Counters) {
    let c = s.client();
    let keys: Vec<(String, VKey)> = vlock(model)
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (key, mut vk) in keys {
        let listed = list_key_versions(&c, &key)
            .await
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        counters.checks.fetch_add(1, Ordering::Relaxed);
        let ids: Vec<&str> = listed.iter().map(|l| l.0.as_str()).collect();
        for g in &vk.gone {
            assert!(
                !ids.contains(&g.as_str()),
                "{ctx}: {key} lists version {g}, whose delete was acknowledged: {ids:?}"
            );
        }
        // Resolve what was in flight by what is listed.
        match vk.in_flight.take() {
            Some(VInFlight::Remove(id)) => {
                if !ids.contains(&id.as_str()) {
                    vk.known.retain(|k| k.id != id);
                    vk.gone.push(id);
                    counters.resolved_new.fetch_add(1, Ordering::Relaxed);
                } else {
                    counters.resolved_old.fetch_add(1, Ordering::Relaxed);
                }
            }
            Some(new) => {
                let unknown: Vec<&(String, i64, String, bool, bool)> = listed
                    .iter()
                    .filter(|l| !vk.known.iter().any(|k| k.id == l.0))
                    .collect();
                match (unknown.as_slice(), &new) {
                    ([], _) => {
                        counters.resolved_old.fetch_add(1, Ordering::Relaxed);
                    }
                    ([one], VInFlight::Put(data))
                        if !one.3 && one.1 == data.len() as i64 && one.2 == etag_of(data) =>
                    {
                        vk.known.push(VKnown {
                            id: one.0.clone(),
                            data: Some(data.clone()),
                        });
                        counters.resolved_new.fetch_add(1, Ordering::Relaxed);
                    }
                    ([one], VInFlight::Marker) if one.3 => {
                        vk.known.push(VKnown {
                            id: one.0.clone(),
                            data: None,
                        });
                        counters.resolved_new.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => panic!(
                        "{ctx}: {key} lists versions no acknowledged write made: {unknown:?} (in flight: {new:?})"
                    ),
                }
            }
            None => {}
        }
        // Newest first, in the order they were acknowledged: the object versions among
        // themselves, the markers among themselves; IsLatest on the newest alone.
        let newest_first = |markers: bool| -> Vec<&str> {
            vk.known
                .iter()
                .rev()
                .filter(|k| k.data.is_none() == markers)
                .map(|k| k.id.as_str())
                .collect()
        };
        let listed_of = |markers: bool| -> Vec<&str> {
            listed
                .iter()
                .filter(|l| l.3 == markers)
                .map(|l| l.0.as_str())
                .collect()
        };
        for markers in [false, true] {
            assert_eq!(
                listed_of(markers),
                newest_first(markers),
                "{ctx}: {key}'s {}, newest first, are not the acknowledged ones in order (all listed: {ids:?})",
                if markers { "delete markers" } else { "versions" }
            );
        }
        let latest: Vec<&str> = listed
            .iter()
            .filter(|l| l.4)
            .map(|l| l.0.as_str())
            .collect();
        let want_latest: Vec<&str> = vk.known.last().map(|k| k.id.as_str()).into_iter().collect();
        assert_eq!(latest, want_latest, "{ctx}: {key}'s IsLatest");
        for k in &vk.known {
            counters.checks.fetch_add(1, Ordering::Relaxed);
            let r = c
                .get_object()
                .bucket(VBUCKET)
                .key(&key)
                .version_id(&k.id)
                .send()
                .await;
            match (&k.data, r) {
                (Some(data), Ok(out)) => {
                    let etag = out.e_tag().unwrap_or_default().to_owned();
                    let body = out.body.collect().await.unwrap().into_bytes();
                    assert!(
                        body[..] == data[..] && etag == etag_of(data),
                        "{ctx}: {key} version {} reads back as {} bytes (ETag {etag}), acknowledged as {} bytes",
                        k.id,
                        body.len(),
                        data.len()
                    );
                }
                // GET of a marker by id: 405 MethodNotAllowed, as S3 answers.
                (None, Err(e)) if error_code(&e).as_deref() == Some("MethodNotAllowed") => {}
                (d, r) => panic!(
                    "{ctx}: {key} version {} (marker: {}) answers {:?}",
                    k.id,
                    d.is_none(),
                    r.map(|_| "200").map_err(|e| describe(&e))
                ),
            }
        }
        vlock(model).insert(key, vk);
    }
}

async fn crash_versions_rounds(default_seed: u64) {
    let seed = env_u64("QUARRY_CRASH_SEED").unwrap_or(default_seed);
    let rounds = env_u64("QUARRY_CRASH_ROUNDS").unwrap_or(3) as usize;
    eprintln!("versioned crash consistency: seed {seed}, {rounds} rounds");
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut s = TestServer::start_single(4).await;
    s.create_bucket(VBUCKET).await;
    s.client()
        .put_bucket_versioning()
        .bucket(VBUCKET)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("enable versioning");
    let model: VModel = Arc::default();
    let counters = Arc::new(Counters::default());
    for round in 0..rounds {
        let ctx = format!("versioned, seed {seed}, round {round}");
        let killed = Arc::new(AtomicBool::new(false));
        let c = s.client();
        let tasks: Vec<_> = (0..WORKERS)
            .map(|w| {
                let keys = (0..KEYS_PER_WORKER)
                    .map(|k| format!("v{w}/key{k}"))
                    .collect();
                tokio::spawn(vworker(
                    c.clone(),
                    keys,
                    StdRng::seed_from_u64(rng.gen()),
                    model.clone(),
                    killed.clone(),
                    counters.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..2000))).await;
        killed.store(true, Ordering::SeqCst);
        s.kill_node(0);
        join_workers(tasks, &ctx).await;
        s.restart().await;
        check_versions(&s, &model, &ctx, &counters).await;
    }
    assert_no_panic(&s, &format!("versioned, seed {seed}"));
    let versions: usize = vlock(&model).values().map(|k| k.known.len()).sum();
    eprintln!(
        "versioned crash consistency: seed {seed}: {rounds} kills, {} ops started, {} acknowledged, {} in flight at a kill ({} found applied, {} not), {versions} versions kept, {} checks, {:.1}s",
        counters.ops_started.load(Ordering::Relaxed),
        counters.acked.load(Ordering::Relaxed),
        counters.in_flight_at_kill.load(Ordering::Relaxed),
        counters.resolved_new.load(Ordering::Relaxed),
        counters.resolved_old.load(Ordering::Relaxed),
        counters.checks.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert!(
        counters.acked.load(Ordering::Relaxed) > 0,
        "seed {seed}: no operation was acknowledged: the workload did not run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_consistency_versioned_seed_1() {
    crash_versions_rounds(0x51ed_0101).await;
}
