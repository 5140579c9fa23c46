//! `quarry admin` against a real server: the real binary heals a shard file deleted on disk and
//! says so, reports the heal status, and fails clearly (non-zero exit) on wrong credentials, a
//! missing bucket or an unreachable server. Unsigned calls to the admin API are refused.

use std::process::Output;
use std::time::Duration;

use quarry_integration::*;

const MIB: usize = 1 << 20;
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `quarry admin <args...>` with no credentials from the environment.
pub(crate) async fn quarry_admin(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.arg("admin")
        .args(args)
        .env_remove("QUARRY_ROOT_USER")
        .env_remove("QUARRY_ROOT_PASSWORD")
        .env_remove("QUARRY_ENDPOINT")
        .env_remove("QUARRY_REGION")
        .kill_on_drop(true);
    tokio::time::timeout(CLI_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("quarry admin {args:?} did not finish in {CLI_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("run quarry admin {args:?}: {e}"))
}

/// `quarry admin <command> --endpoint .. --access-key .. --secret-key .. <rest...>`.
pub(crate) async fn as_root(s: &TestServer, command: &str, rest: &[&str]) -> Output {
    let endpoint = s.endpoint();
    let mut args = vec![
        command,
        "--endpoint",
        &endpoint,
        "--access-key",
        s.access_key(),
        "--secret-key",
        s.secret_key(),
    ];
    args.extend_from_slice(rest);
    quarry_admin(&args).await
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[tokio::test]
async fn admin_heal_restores_a_deleted_shard_file() {
    let s = TestServer::start(4).await;
    s.create_bucket("healme").await;
    let client = s.client();
    let data = random_bytes(MIB + 4321);
    put_bytes(&client, "healme", "dir/big", &data).await;
    put_bytes(&client, "healme", "small", b"tiny").await;

    let drive = s.drive_path(1).to_path_buf();
    let part = part_path(&drive, "healme", "dir/big").expect("a shard file for dir/big");
    let before = std::fs::read(&part).expect("read the shard file");
    std::fs::remove_file(&part).unwrap();

    // Nothing read the object since: only the admin heal can bring the file back.
    let out = as_root(&s, "heal", &["--wait", "healme"]).await;
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {stderr}\nserver log:\n{}",
        out.status,
        s.log_tail(30)
    );
    assert!(
        stdout
            .contains("2 objects checked in 1 bucket, 1 healed (1 drive copy rewritten), 0 failed"),
        "{stdout}"
    );
    // The drive is named by its path (a cluster names a peer's drive by URL, ending in it).
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("healed  healme/dir/big  on ")
                && l.trim_end().ends_with(&drive.display().to_string())),
        "{stdout}"
    );
    // The job checked again what it rewrote (the bucket, and dir/big) and found nothing.
    assert!(
        stdout.contains(
            "Verified: 2 re-checked, 0 missing, 0 could not be checked; 0 missing shards"
        ),
        "{stdout}"
    );
    let after = std::fs::read(&part).expect("the shard file is back");
    assert!(
        after == before,
        "the healed shard file differs from the lost one"
    );
    assert_bytes_eq(
        &get_bytes(&client, "healme", "dir/big").await,
        &data,
        "dir/big",
    );

    // Again, by prefix, as JSON: nothing left to do.
    let out = as_root(&s, "heal", &["--wait", "--json", "healme", "dir/"]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
    assert_eq!(
        (
            v["report"]["scanned"].as_u64(),
            v["report"]["healed"].as_u64(),
            v["report"]["failed"].as_u64(),
            v["total_objects"].as_u64(),
            v["verify_missing"].as_u64(),
            v["phase"].as_str(),
        ),
        (Some(1), Some(0), Some(0), Some(1), Some(0), Some("done")),
        "{v}"
    );

    // Every bucket, in the background: the job id, then its status by id.
    let out = as_root(&s, "heal", &[]).await;
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    let id = stdout
        .strip_prefix("Heal job ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no job id in {stdout}"))
        .to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = as_root(&s, "heal-status", &[&id]).await;
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        if stdout.contains("0 missing shards") {
            assert!(
                stdout.contains("Heal of every bucket: 2 objects checked"),
                "{stdout}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{stdout}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let out = as_root(&s, "heal-status", &[]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Heal queue:  0 objects waiting"),
        "{stdout}"
    );
    assert!(stdout.contains("Retry list:  0 heals waiting"), "{stdout}");
    assert!(stdout.contains("Drives:      4 of 4 online"), "{stdout}");
    assert!(stdout.contains("Scanner:     idle"), "{stdout}");
    assert!(
        stdout.contains(&format!("Heal job:    {id}  done")),
        "{stdout}"
    );
    let out = as_root(&s, "heal-status", &["heal-0-0"]).await;
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No heal job heal-0-0"), "{stderr}");
    let metrics = metrics_get(&format!("{}/metrics", s.endpoint()))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("quarry_heal_jobs_started_total 3")
            && metrics.contains("quarry_heal_job_objects_healed_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn admin_calls_fail_clearly() {
    let s = TestServer::start(4).await;
    s.create_bucket("bkt").await;
    let endpoint = s.endpoint();

    let fails = |o: &Output, want: &str| {
        let (stdout, stderr) = text(o);
        assert_eq!(
            o.status.code(),
            Some(1),
            "stdout: {stdout}\nstderr: {stderr}"
        );
        assert!(stderr.contains(want), "want {want:?} in stderr: {stderr}");
    };
    // Wrong secret, no credentials, no such bucket, no server.
    let out = quarry_admin(&[
        "heal",
        "--endpoint",
        &endpoint,
        "--access-key",
        s.access_key(),
        "--secret-key",
        "not-the-secret",
    ])
    .await;
    fails(&out, "SignatureDoesNotMatch");
    let out = quarry_admin(&["heal-status", "--endpoint", &endpoint]).await;
    fails(&out, "no credentials");
    let out = as_root(&s, "heal", &["absent"]).await;
    fails(&out, "NoSuchBucket");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let out = quarry_admin(&[
        "heal-status",
        "--endpoint",
        &closed,
        "--access-key",
        "k",
        "--secret-key",
        "s",
    ])
    .await;
    fails(&out, "cannot connect");

    // Credentials from the environment, as documented.
    let out = tokio::process::Command::new(quarry_bin())
        .args(["admin", "heal-status", "--endpoint", &endpoint])
        .env("QUARRY_ROOT_USER", s.access_key())
        .env("QUARRY_ROOT_PASSWORD", s.secret_key())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));

    // Unsigned calls never reach the admin API.
    let http = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::POST, "/quarry/admin/v1/heal?bucket=bkt"),
        (reqwest::Method::GET, "/quarry/admin/v1/heal/status"),
        (reqwest::Method::GET, "/quarry/admin/v1/metrics"),
        (reqwest::Method::GET, "/quarry/admin/v1/metrics/history"),
        (
            reqwest::Method::POST,
            "/quarry/admin/v1/heal/jobs?bucket=bkt",
        ),
        (reqwest::Method::GET, "/quarry/admin/v1/heal/jobs"),
    ] {
        let resp = http
            .request(method, format!("{endpoint}{path}"))
            .send()
            .await
            .unwrap();
        expect_raw_error(resp, 403, "AccessDenied").await;
    }
}

/// `GET /quarry/admin/v1/metrics` (the web console's charts): this node's Prometheus text for the
/// signed root user, whatever `--metrics-token` says; another key is refused.
#[tokio::test]
async fn admin_metrics_answers_signed_root_calls() {
    let s = TestServer::start(4).await;
    s.create_bucket("metered").await;
    let resp = s
        .signed("GET", "/quarry/admin/v1/metrics", &[], vec![])
        .await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let body = resp.text().await.unwrap();
    assert!(
        body.contains("quarry_s3_requests_total{op=\"CreateBucket\",code=\"200\"} 1"),
        "{body}"
    );
    let url = format!("{}/quarry/admin/v1/metrics", s.endpoint());
    let signed = sign_headers(
        "GET",
        &url,
        &[],
        PayloadHash::Bytes(b""),
        s.access_key(),
        "not-the-secret",
        std::time::SystemTime::now(),
    );
    let resp = send_raw("GET", &url, &signed.headers, vec![]).await;
    expect_raw_error(resp, 403, "SignatureDoesNotMatch").await;

    // The console's charts open with the last minutes: a sample every 10 s, the charted series
    // only, the latency histogram summed over operations.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let history = loop {
        let resp = s
            .signed("GET", "/quarry/admin/v1/metrics/history", &[], vec![])
            .await;
        assert_eq!(resp.status(), 200);
        let v: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        if !v["samples"].as_array().unwrap().is_empty() {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "no sample in 30 s");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert_eq!(history["every_seconds"], 10);
    let sample = &history["samples"][0];
    assert!(
        sample["t"].as_i64().unwrap() > 1_700_000_000_000,
        "{sample}"
    );
    let text = sample["text"].as_str().unwrap();
    assert!(
        text.contains("quarry_s3_requests_total{op=\"CreateBucket\",code=\"200\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("quarry_s3_request_duration_seconds_bucket{le=\"+Inf\"}"),
        "{text}"
    );
    assert!(!text.contains("quarry_uptime_seconds"), "{text}");
}

/// `quarry admin reset-connections` drops a node's data-plane connections; transfers go on over
/// new ones. A single node has no data plane and says so.
#[tokio::test]
async fn admin_reset_connections_drops_data_connections_and_transfers_go_on() {
    let s = TestServer::start_cluster(2, 2, 4).await;
    s.create_bucket("rst").await;
    let c = s.client();
    let data = random_bytes(3 * MIB + 5);
    c.put_object()
        .bucket("rst")
        .key("k")
        .body(aws_sdk_s3::primitives::ByteStream::from(data.clone()))
        .send()
        .await
        .expect("PUT");
    let get = || async {
        c.get_object()
            .bucket("rst")
            .key("k")
            .send()
            .await
            .expect("GET")
            .body
            .collect()
            .await
            .expect("body")
            .to_vec()
    };
    assert_bytes_eq(&get().await, &data, "before the reset");
    let connects = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("quarry_dataplane_peer_connects_total{backend=\"tcp\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let metrics = || async {
        metrics_get(&format!("{}/metrics", s.endpoint()))
            .await
            .text()
            .await
            .expect("metrics body")
    };
    let before = connects(&metrics().await);
    assert!(before >= 1.0, "data connections were made");
    let out = as_root(&s, "reset-connections", &[]).await;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.starts_with("Dropped ") && stdout.contains("every peer"),
        "{stdout}"
    );
    let n: u64 = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(n >= 1, "idle data connections to drop: {stdout}");
    assert_bytes_eq(&get().await, &data, "after the reset");
    assert!(connects(&metrics().await) > before, "reconnected");

    let single = TestServer::start_single(2).await;
    let out = as_root(&single, "reset-connections", &["127.0.0.1:1"]).await;
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stderr.contains("NotImplemented"), "{stderr}");
}
