//! A heal job on a 4-node cluster (real processes, one drive each, one 2+2 set) brings a wiped
//! drive back to exactly what it held: a mix of objects from 0 B to 20 MiB (inline and not),
//! versions and a delete marker, three multipart uploads in progress, and bucket configurations
//! (CORS, versioning) and IAM state (a user with a key). The checker is the drive's own content before the wipe: erasure coding
//! is deterministic, so every file the other drives imply is byte for byte the one that was lost.
//! 500 objects, most of them small, so the test stays within a minute on a debug build.
//!
//! Drive replacement: a drive wiped entirely (format.json included) is formatted into its slot
//! when its node restarts and healed in the background from a checkpoint on the drive
//! (`.quarry.sys/healing.json`); the node killed midway resumes from it, and the drive ends
//! byte-identical to what it held, with a second heal finding nothing. The same run measures
//! foreground GET latency during the heal beside idle. A drive emptied while its node runs is
//! found by the node's drive check, formatted into its slot and healed the same way, no restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, CorsConfiguration, CorsRule,
    VersioningConfiguration,
};
use futures::StreamExt;
use quarry_integration::*;

const BUCKET: &str = "mix";
const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// Every file of a drive a heal is responsible for: bucket contents, bucket configurations and
/// uploads in progress (not `format.json`, not tmp).
fn drive_files(drive: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    drive_files_of(drive, &[BUCKET])
}

/// [`drive_files`] over the given buckets.
fn drive_files_of(drive: &Path, buckets: &[&str]) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = buckets.iter().map(|b| drive.join(b)).collect();
    stack.extend([
        drive.join(".quarry.sys/buckets"),
        drive.join(".quarry.sys/multipart"),
    ]);
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

/// Every file of `before` is in `after` with the same bytes, and nothing else is.
fn assert_same_files(before: &BTreeMap<PathBuf, Vec<u8>>, after: &BTreeMap<PathBuf, Vec<u8>>) {
    let missing: Vec<_> = before.keys().filter(|p| !after.contains_key(*p)).collect();
    let extra: Vec<_> = after.keys().filter(|p| !before.contains_key(*p)).collect();
    let differ: Vec<_> = before
        .iter()
        .filter(|(p, b)| after.get(*p).is_some_and(|a| a != *b))
        .map(|(p, _)| p)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differ.is_empty(),
        "missing {missing:?}\nextra {extra:?}\ndiffer {differ:?}"
    );
}

/// A heal job run now heals nothing, finds nothing missing, and could check everything (a
/// drive it could not read is a failure, never a heal).
async fn assert_heal_finds_nothing(s: &TestServer) {
    let again = heal_job(s).await;
    assert_eq!(
        (
            again["report"]["healed"].as_u64(),
            again["bucket_items_healed"].as_u64(),
            again["verify_missing"].as_u64(),
            again["report"]["failed"].as_u64(),
            again["verify_failed"].as_u64()
        ),
        (Some(0), Some(0), Some(0), Some(0), Some(0)),
        "{again}"
    );
}

async fn heal_job(s: &TestServer) -> serde_json::Value {
    let endpoint = s.endpoint();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args([
        "admin",
        "heal",
        "--wait",
        "--json",
        "--endpoint",
        &endpoint,
        "--access-key",
        s.access_key(),
        "--secret-key",
        s.secret_key(),
    ])
    .env_remove("QUARRY_ROOT_USER")
    .env_remove("QUARRY_ROOT_PASSWORD")
    .kill_on_drop(true);
    let out: Output = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
        .await
        .expect("the heal job ends")
        .expect("run quarry admin heal");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `quarry admin heal-status` of node `node`: the JSON (`--json`) and the text the CLI prints.
async fn heal_status(s: &TestServer, node: usize) -> (serde_json::Value, String) {
    let endpoint = s.node_endpoint(node);
    let mut out = Vec::new();
    for json in [true, false] {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args([
            "admin",
            "heal-status",
            "--endpoint",
            &endpoint,
            "--access-key",
            s.access_key(),
            "--secret-key",
            s.secret_key(),
        ]);
        if json {
            cmd.arg("--json");
        }
        cmd.env_remove("QUARRY_ROOT_USER")
            .env_remove("QUARRY_ROOT_PASSWORD")
            .kill_on_drop(true);
        let o: Output = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
            .await
            .expect("heal-status answers")
            .expect("run quarry admin heal-status");
        assert!(o.status.success(), "{o:?}");
        out.push(String::from_utf8_lossy(&o.stdout).into_owned());
    }
    let json = serde_json::from_str(&out[0]).unwrap_or_else(|e| panic!("{e}: {}", out[0]));
    (json, out.remove(1))
}

/// The value of the series `name{labels}` in node `node`'s `/metrics`.
async fn metric_of(s: &TestServer, node: usize, series: &str) -> Option<f64> {
    let text = metrics_get(&format!("{}/metrics", s.node_endpoint(node)))
        .await
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
}

#[tokio::test]
async fn a_wiped_drive_is_healed_to_exactly_what_the_others_imply() {
    let s = TestServer::start_cluster(4, 1, 4).await;
    let c = s.client();
    s.create_bucket(BUCKET).await;
    let rule = CorsRule::builder()
        .allowed_origins("https://app.example")
        .allowed_methods("GET")
        .build()
        .unwrap();
    c.put_bucket_cors()
        .bucket(BUCKET)
        .cors_configuration(
            CorsConfiguration::builder()
                .cors_rules(rule)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("put cors");
    c.put_bucket_versioning()
        .bucket(BUCKET)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("versioning");
    let sizes = [
        0usize,
        1,
        100,
        4096,
        65_536,
        200_000,
        300_000,
        1 << 20,
        (1 << 20) + 3,
        3 << 20,
        20 << 20,
    ];
    // 500 objects: the sizes above once each (20 MiB included), twice for all but the largest,
    // and the rest small (inline or a block), eight PUTs at a time.
    const OBJECTS: usize = 500;
    let small = [0usize, 1, 100, 4096, 65_536, 200_000];
    let size_of = |i: usize| match i {
        i if i < sizes.len() => sizes[i],
        i if i < 2 * sizes.len() - 1 => sizes[i - sizes.len()],
        i => small[i % small.len()],
    };
    let puts = futures::stream::iter(0..OBJECTS).map(|i| {
        let c = c.clone();
        async move {
            c.put_object()
                .bucket(BUCKET)
                .key(format!("obj/{i:03}"))
                .body(ByteStream::from(random_bytes(size_of(i))))
                .send()
                .await
                .unwrap_or_else(|e| panic!("PUT obj/{i:03}: {}", describe(&e)));
        }
    });
    puts.buffer_unordered(8).collect::<Vec<()>>().await;
    let objects = OBJECTS as u64;
    for v in 0..3 {
        c.put_object()
            .bucket(BUCKET)
            .key("versioned")
            .body(ByteStream::from(random_bytes(1000 * (v + 1))))
            .send()
            .await
            .expect("PUT version");
    }
    c.delete_object()
        .bucket(BUCKET)
        .key("obj/003")
        .send()
        .await
        .expect("delete marker");
    let mut uploads = Vec::new();
    for (i, size) in [5 << 20, 1000, 0].into_iter().enumerate() {
        let key = format!("upload/{i}");
        let id = c
            .create_multipart_upload()
            .bucket(BUCKET)
            .key(&key)
            .send()
            .await
            .expect("create upload")
            .upload_id
            .unwrap();
        let data = random_bytes(size);
        let etag = c
            .upload_part()
            .bucket(BUCKET)
            .key(&key)
            .upload_id(&id)
            .part_number(1)
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .expect("upload part")
            .e_tag
            .unwrap();
        uploads.push((key, id, etag, data));
    }

    // IAM state (a user and its key) lives in the system namespace and is healed with it.
    let (user_key, user_secret) = crate::iam::user_with_key(&s, "healed-user").await;

    let drive = s.drive_path(3).to_path_buf();
    let before = drive_files(&drive);
    assert!(before.len() > 30, "{:?}", before.keys());
    assert!(
        before
            .keys()
            .any(|p| p.starts_with(".quarry.sys/buckets/_system")),
        "no IAM state on the drive: {:?}",
        before.keys()
    );
    for sub in [
        drive.join(BUCKET),
        drive.join(".quarry.sys/buckets"),
        drive.join(".quarry.sys/multipart"),
    ] {
        std::fs::remove_dir_all(sub).unwrap();
    }
    assert!(drive_files(&drive).is_empty());

    let job = heal_job(&s).await;
    let r = &job["report"];
    println!(
        "heal job: {} objects, {} bytes in {:.2}s ({:.1} objects/s, {:.1} MiB/s); {} objects and {} bucket items rewritten; verified {} again, {} missing",
        r["scanned"], job["bytes_scanned"], job["elapsed_secs"].as_f64().unwrap(),
        job["rate"].as_f64().unwrap(),
        job["bytes_scanned"].as_f64().unwrap() / job["elapsed_secs"].as_f64().unwrap() / 1048576.0,
        r["healed"], job["bucket_items_healed"], job["verify_checked"], job["verify_missing"],
    );
    assert_eq!(job["phase"], "done", "{job}");
    assert_eq!(r["failed"].as_u64(), Some(0), "{job}");
    // The objects and "versioned" (obj/003's latest is a marker: still walked, it has versions).
    assert_eq!(r["scanned"].as_u64(), Some(objects + 1), "{job}");
    assert_eq!(r["healed"].as_u64(), Some(objects + 1), "{job}");
    assert_eq!(job["verify_missing"].as_u64(), Some(0), "{job}");

    // Every file is back, byte for byte.
    let after = drive_files(&drive);
    assert_same_files(&before, &after);

    // A second heal finds nothing.
    assert_heal_finds_nothing(&s).await;

    // The uploads complete, and read back whole.
    for (key, id, etag, data) in &uploads {
        c.complete_multipart_upload()
            .bucket(BUCKET)
            .key(key)
            .upload_id(id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .parts(CompletedPart::builder().part_number(1).e_tag(etag).build())
                    .build(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("complete {key}: {}", describe(&e)));
        assert_bytes_eq(&get_bytes(&c, BUCKET, key).await, data, key);
    }
    // The user's key is known (refused for want of a policy, not as an unknown key).
    let as_user = s.client_with(&user_key, &user_secret);
    crate::iam::denied(crate::iam::get(&as_user, BUCKET, "obj/000").await);
}

async fn get_bytes(c: &aws_sdk_s3::Client, bucket: &str, key: &str) -> Vec<u8> {
    c.get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {key}: {}", describe(&e)))
        .body
        .collect()
        .await
        .expect("body")
        .to_vec()
}

/// The replaced drive's heal checkpoint, if it has one (and it parses).
fn healing_mark(drive: &Path) -> Option<serde_json::Value> {
    let b = std::fs::read(drive.join(".quarry.sys/healing.json")).ok()?;
    serde_json::from_slice(&b).ok()
}

/// Polls `f` every 50 ms until it gives a value, for at most `secs`.
async fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// GETs `keys` one after the other; the 99th percentile of their latencies, in milliseconds.
async fn get_p99_ms(c: &aws_sdk_s3::Client, keys: &[String], rounds: usize) -> f64 {
    let mut ms = Vec::new();
    for _ in 0..rounds {
        for k in keys {
            let t = Instant::now();
            get_bytes(c, BUCKET, k).await;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    ms[(ms.len() * 99 / 100).min(ms.len() - 1)]
}

#[tokio::test]
async fn a_replaced_drive_is_healed_in_the_background_and_resumes_after_a_kill() {
    const SECOND: &str = "second";
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    let c = s.client();
    s.create_bucket(BUCKET).await;
    s.create_bucket(SECOND).await;
    let rule = CorsRule::builder()
        .allowed_origins("https://app.example")
        .allowed_methods("GET")
        .build()
        .unwrap();
    c.put_bucket_cors()
        .bucket(BUCKET)
        .cors_configuration(
            CorsConfiguration::builder()
                .cors_rules(rule)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("put cors");
    // Inline (up to 128 KiB a shard) and not, across two buckets.
    let sizes = [0usize, 100, 4096, 200_000, (1 << 20) + 3];
    let mut data = BTreeMap::new();
    for i in 0..56 {
        let (bucket, key) = if i < 48 {
            (BUCKET, format!("obj/{i:02}"))
        } else {
            (SECOND, format!("k/{i:02}"))
        };
        let body = random_bytes(sizes[i % sizes.len()]);
        c.put_object()
            .bucket(bucket)
            .key(&key)
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("PUT {key}: {}", describe(&e)));
        data.insert((bucket, key), body);
    }
    let objects = data.len() as u64;
    let upload = c
        .create_multipart_upload()
        .bucket(BUCKET)
        .key("upload/0")
        .send()
        .await
        .expect("create upload")
        .upload_id
        .unwrap();
    let part = random_bytes(1000);
    let etag = c
        .upload_part()
        .bucket(BUCKET)
        .key("upload/0")
        .upload_id(&upload)
        .part_number(1)
        .body(ByteStream::from(part.clone()))
        .send()
        .await
        .expect("upload part")
        .e_tag
        .unwrap();

    let small: Vec<String> = (0..48)
        .filter(|i| sizes[i % sizes.len()] == 4096)
        .map(|i| format!("obj/{i:02}"))
        .collect();
    let idle_p99 = get_p99_ms(&c, &small, 10).await;

    // Replace node 3's drive: an empty directory in its slot.
    let drive = s.drive_path(3).to_path_buf();
    let before = drive_files_of(&drive, &[BUCKET, SECOND]);
    assert!(before.len() > 60, "{:?}", before.keys());
    s.kill_node(3);
    std::fs::remove_dir_all(&drive).unwrap();
    std::fs::create_dir_all(&drive).unwrap();
    // Slow enough to kill it midway.
    s.set_env("QUARRY_HEAL_RATE", "8");
    s.start_node(3).await;
    let first = wait_for(60, "a first checkpoint", || {
        healing_mark(&drive).filter(|m| m["scanned"].as_u64() >= Some(16))
    })
    .await;
    assert_eq!(first["phase"], "healing", "{first}");
    assert!(drive.join(".quarry.sys/format.json").exists());
    // The node reports the heal in progress: heal-status (JSON and text) and its metrics.
    let (status, text) = heal_status(&s, 3).await;
    let heals = status["drive_heals"].as_array().expect("drive_heals");
    assert_eq!(heals.len(), 1, "{status}");
    assert_eq!(heals[0]["phase"], "healing", "{status}");
    assert!(heals[0]["scanned"].as_u64() >= Some(16), "{status}");
    assert!(text.contains("HEALING"), "{text}");
    let drive_label = heals[0]["endpoint"].as_str().unwrap().to_owned();
    let series = |name: &str, extra: &str| format!("{name}{{drive=\"{drive_label}\"{extra}}}");
    assert_eq!(
        metric_of(
            &s,
            3,
            &series("quarry_drive_heal_phase", ",phase=\"healing\"")
        )
        .await,
        Some(1.0)
    );
    assert!(metric_of(&s, 3, &series("quarry_drive_heal_objects_scanned", "")).await >= Some(16.0));
    // Reads through the healing node are right, and how long they take beside idle.
    let c3 = s.node_client(3);
    let heal_p99 = get_p99_ms(&c3, &small, 2).await;
    let heal_p99_front = get_p99_ms(&c, &small, 2).await;

    s.kill_node(3);
    let at_kill = healing_mark(&drive).expect("the checkpoint outlives the kill");
    let scanned_at_kill = at_kill["scanned"].as_u64().unwrap();
    assert_eq!(at_kill["phase"], "healing", "killed midway: {at_kill}");
    assert!(scanned_at_kill < objects, "{at_kill}");
    s.start_node(3).await;
    let resumed = wait_for(60, "the resumed checkpoint", || {
        healing_mark(&drive).filter(|m| m["resumes"].as_u64() == Some(1))
    })
    .await;
    assert!(
        resumed["scanned"].as_u64().unwrap() >= scanned_at_kill,
        "the counters go on from the checkpoint: {resumed}"
    );
    assert_eq!(resumed["job_id"], at_kill["job_id"], "{resumed}");
    wait_for(180, "the end of the drive heal", || {
        (!drive.join(".quarry.sys/healing.json").exists()).then_some(())
    })
    .await;
    // The end line is logged just after the checkpoint is removed: a poll can fall between.
    let done = wait_for(10, "the drive heal's end line in the log", || {
        s.node_log_tail(3, 400)
            .lines()
            .rev()
            .find(|l| l.contains("drive heal finished"))
            .map(str::to_owned)
    })
    .await;
    println!("{done}");
    assert!(done.contains("resumes=1"), "{done}");
    assert!(done.contains("failed=0"), "{done}");
    assert!(done.contains("verify_missing=0"), "{done}");
    let scanned: u64 = done
        .split_whitespace()
        .find_map(|w| w.strip_prefix("scanned="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{done}"));
    // Everything once, plus what came after the last checkpoint before the kill: not a
    // second walk from the start.
    assert!(
        scanned >= objects && scanned < objects + scanned_at_kill,
        "scanned {scanned} of {objects} (checkpoint at {scanned_at_kill}): {done}"
    );
    println!(
        "GET p99 idle {idle_p99:.2} ms; during the heal {heal_p99_front:.2} ms through a healthy node ({:.2}x), {heal_p99:.2} ms through the healing node",
        heal_p99_front / idle_p99
    );

    // Done, as the node reports it: the same totals as its log line.
    let (status, text) = heal_status(&s, 3).await;
    let h = &status["drive_heals"][0];
    assert_eq!(h["phase"], "done", "{status}");
    assert_eq!(h["scanned"].as_u64(), Some(scanned), "{status}");
    assert_eq!(h["failed"].as_u64(), Some(0), "{status}");
    assert_eq!(h["resumes"].as_u64(), Some(1), "{status}");
    assert_eq!(h["verify_missing"].as_u64(), Some(0), "{status}");
    assert!(
        text.contains("DONE") && text.contains("0 missing"),
        "{text}"
    );
    let info = tokio::process::Command::new(quarry_bin())
        .args([
            "admin",
            "info",
            "--endpoint",
            &s.node_endpoint(3),
            "--access-key",
            s.access_key(),
            "--secret-key",
            s.secret_key(),
        ])
        .env_remove("QUARRY_ROOT_USER")
        .env_remove("QUARRY_ROOT_PASSWORD")
        .output()
        .await
        .expect("run quarry admin info");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(
        info.contains("Drive heals (this node):") && info.contains(&format!("DONE  {drive_label}")),
        "{info}"
    );
    assert_eq!(
        metric_of(&s, 3, &series("quarry_drive_heal_phase", ",phase=\"done\"")).await,
        Some(1.0)
    );
    assert_eq!(
        metric_of(&s, 3, &series("quarry_drive_heal_objects_scanned", "")).await,
        Some(scanned as f64)
    );

    // Every file is back, byte for byte.
    let after = drive_files_of(&drive, &[BUCKET, SECOND]);
    assert_same_files(&before, &after);

    // A second heal finds nothing.
    assert_heal_finds_nothing(&s).await;
    // The upload completes, and everything reads back through the replaced drive's node.
    c3.complete_multipart_upload()
        .bucket(BUCKET)
        .key("upload/0")
        .upload_id(&upload)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(CompletedPart::builder().part_number(1).e_tag(etag).build())
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("complete: {}", describe(&e)));
    assert_bytes_eq(&get_bytes(&c3, BUCKET, "upload/0").await, &part, "upload/0");
    for ((bucket, key), body) in &data {
        let got = c3
            .get_object()
            .bucket(*bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {key}: {}", describe(&e)))
            .body
            .collect()
            .await
            .expect("body")
            .to_vec();
        assert_bytes_eq(&got, body, key);
    }
}

/// The `key=value` word of a log line, parsed.
fn log_field<T: std::str::FromStr>(line: &str, key: &str) -> Option<T> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.trim_matches('"').parse().ok())
}

#[tokio::test]
async fn a_drive_emptied_while_its_node_runs_is_formatted_and_healed_without_a_restart() {
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    let c = s.client();
    s.create_bucket(BUCKET).await;
    let sizes = [0usize, 100, 4096, 200_000, (1 << 20) + 3];
    let mut data = BTreeMap::new();
    for i in 0..40 {
        let key = format!("obj/{i:02}");
        let body = random_bytes(sizes[i % sizes.len()]);
        put_bytes(&c, BUCKET, &key, &body).await;
        data.insert(key, body);
    }
    // Node 3 checks its drive every second.
    s.set_env("QUARRY_DRIVE_CHECK_INTERVAL", "1");
    s.kill_node(3);
    s.start_node(3).await;
    let drive = s.drive_path(3).to_path_buf();
    let before = drive_files(&drive);
    assert!(before.len() > 40, "{:?}", before.keys());

    // The disk is swapped while the node runs: an empty directory where the drive was.
    std::fs::remove_dir_all(&drive).unwrap();
    std::fs::create_dir_all(&drive).unwrap();
    wait_for(60, "the replaced drive to be formatted", || {
        drive.join(".quarry.sys/format.json").exists().then_some(())
    })
    .await;
    // The heal of the new drive: its "finished" line comes after the format's (a heal that ran
    // when the node restarted may have logged one before, and the new heal's checkpoint may not
    // be written yet when the drive is first seen formatted).
    let done = wait_for(180, "the end of the drive heal", || {
        let log = s.node_log_tail(3, 4000);
        let line = log
            .lines()
            .skip_while(|l| !l.contains("formatted a drive replaced while the server runs"))
            .filter(|l| l.contains("drive heal finished"))
            .last()?
            .to_owned();
        (!drive.join(".quarry.sys/healing.json").exists()).then_some(line)
    })
    .await;
    assert!(
        s.node_log_tail(3, 400)
            .contains("formatted a drive replaced while the server runs"),
        "{}",
        s.node_log_tail(3, 60)
    );
    assert_eq!(log_field::<u64>(&done, "failed"), Some(0), "{done}");
    assert_eq!(log_field::<u64>(&done, "verify_missing"), Some(0), "{done}");
    let scanned: u64 = log_field(&done, "scanned").unwrap_or_else(|| panic!("{done}"));
    assert_eq!(scanned, data.len() as u64, "{done}");
    let (secs, bytes): (f64, f64) = (
        log_field(&done, "secs").unwrap_or_else(|| panic!("{done}")),
        log_field(&done, "bytes").unwrap_or_else(|| panic!("{done}")),
    );
    println!(
        "drive heal while running: {scanned} objects, {bytes} bytes in {secs:.2}s ({:.1} objects/s, {:.1} MiB/s)",
        scanned as f64 / secs,
        bytes / secs / (1 << 20) as f64
    );
    let (status, _) = heal_status(&s, 3).await;
    assert_eq!(status["drive_heals"][0]["phase"], "done", "{status}");

    assert_same_files(&before, &drive_files(&drive));
    assert_heal_finds_nothing(&s).await;
    let c3 = s.node_client(3);
    for (key, body) in &data {
        assert_bytes_eq(&get_bytes(&c3, BUCKET, key).await, body, key);
    }
}
