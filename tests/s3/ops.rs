//! What operators see, on real processes: the health probes of a 4-node cluster as its nodes go
//! down one by one, `quarry admin info` and `quarry admin drives` (cluster and single node), the
//! metrics of a cluster node after a kill, and `--log-format json`.
//!
//! Readiness is read quorum (DESIGN.md, "Front end"; `quarry server`'s probe): a node answers 200
//! on `/health/ready` while every erasure set has at least `data` drives answering. With sets of
//! 4 drives (2+2) spread over 4 nodes, one drive per node, that is 2 nodes: one or two nodes down
//! keep the others ready (reads work, writes need 3 and fail), a third makes the last one 503.

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use quarry_integration::*;

use crate::metrics::{parse, value};

const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a probe may take to notice a node is gone.
const NOTICE: Duration = Duration::from_secs(15);

/// `(status, body)` of `GET <endpoint><path>`.
async fn get(endpoint: &str, path: &str) -> (u16, String) {
    let resp = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
        .get(format!("{endpoint}{path}"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {endpoint}{path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// Polls `/health/ready` of node `i` until it answers `want`, up to [`NOTICE`]; returns the
/// last answer.
async fn ready_becomes(s: &TestServer, i: usize, want: u16) -> (u16, String) {
    let t0 = Instant::now();
    loop {
        let got = get(&s.node_endpoint(i), "/health/ready").await;
        if got.0 == want || t0.elapsed() > NOTICE {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks that every node in `up` is live and ready (read quorum holds), and stays so for a
/// moment (a probe that flickers is a bug too).
async fn all_ready(s: &TestServer, up: &[usize], what: &str) {
    for _ in 0..3 {
        for &i in up {
            let (status, body) = get(&s.node_endpoint(i), "/health/ready").await;
            assert_eq!(
                status,
                200,
                "{what}: node {} not ready: {body}\nlog:\n{}",
                i + 1,
                s.node_log_tail(i, 20)
            );
            assert!(body.contains("read quorum yes"), "{what}: {body}");
            let (status, body) = get(&s.node_endpoint(i), "/health/live").await;
            assert_eq!((status, body.as_str()), (200, "live\n"), "{what}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Runs `quarry admin <command> --endpoint E --access-key .. --secret-key .. <rest>`.
async fn admin(s: &TestServer, endpoint: &str, command: &str, rest: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["admin", command, "--endpoint", endpoint])
        .args([
            "--access-key",
            s.access_key(),
            "--secret-key",
            s.secret_key(),
        ])
        .args(rest)
        .env_remove("QUARRY_ROOT_USER")
        .env_remove("QUARRY_ROOT_PASSWORD")
        .env_remove("QUARRY_ENDPOINT")
        .kill_on_drop(true);
    let out = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("quarry admin {command} did not finish in {CLI_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("run quarry admin {command}: {e}"));
    assert!(
        out.status.success(),
        "quarry admin {command} {rest:?}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

async fn admin_json(s: &TestServer, endpoint: &str, command: &str) -> serde_json::Value {
    let out = admin(s, endpoint, command, &["--json"]).await;
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "quarry admin {command} --json is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

async fn admin_text(s: &TestServer, endpoint: &str, command: &str) -> String {
    let out = admin(s, endpoint, command, &[]).await;
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn addr(s: &TestServer, i: usize) -> String {
    s.node_endpoint(i).trim_start_matches("http://").to_owned()
}

/// The `online` flag of every node in an info answer, by address.
fn nodes_online(info: &serde_json::Value) -> Vec<(String, bool)> {
    info["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["address"].as_str().unwrap().to_owned(),
                n["online"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Polls `metric` until it is `want` (drive states are cached for 2 s) or 10 s have passed;
/// returns the last value.
async fn metric_settles(endpoint: &str, name: &str, labels: &[(&str, &str)], want: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = metric(endpoint, name, labels).await;
        if got == want || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn metric(endpoint: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let resp = metrics_get(&format!("{endpoint}/metrics")).await;
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 200, "{text}");
    value(&parse(&text), name, labels)
}

#[tokio::test]
async fn ops_health_admin_info_and_metrics_as_nodes_go_down() {
    // 4 nodes x 2 drives, sets of 4: two sets, each with one drive on every node (2+2).
    let mut s = TestServer::start_cluster(4, 2, 4).await;
    let e0 = s.node_endpoint(0);
    all_ready(&s, &[0, 1, 2, 3], "all nodes up").await;
    // An object large enough to go through the data plane (shards past the inline limit).
    s.create_bucket("ops").await;
    let client = s.client();
    let data = random_bytes(3 << 20);
    put_bytes(&client, "ops", "big", &data).await;
    assert_bytes_eq(&get_bytes(&client, "ops", "big").await, &data, "ops/big");

    // Info from node 1: 4 nodes online, 2 sets of 2+2, 8 drives online with space.
    let info = admin_json(&s, &e0, "info").await;
    assert_eq!(info["mode"], "cluster", "{info}");
    assert_eq!(info["this_node"].as_str(), Some(addr(&s, 0).as_str()));
    let want: Vec<(String, bool)> = (0..4).map(|i| (addr(&s, i), true)).collect();
    assert_eq!(nodes_online(&info), want, "{info}");
    let sets = info["sets"].as_array().unwrap();
    assert_eq!(sets.len(), 2, "{info}");
    for set in sets {
        assert_eq!(
            (set["data"].as_u64(), set["parity"].as_u64()),
            (Some(2), Some(2))
        );
        let nodes: Vec<&str> = set["drives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["node"].as_str().unwrap())
            .collect();
        let mut distinct = nodes.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "a set spans the 4 nodes: {nodes:?}");
    }
    let t = &info["totals"];
    assert_eq!(
        (t["drives"].as_u64(), t["drives_online"].as_u64()),
        (Some(8), Some(8)),
        "{info}"
    );
    assert!(t["free_bytes"].as_u64().unwrap() > 0, "{info}");
    assert!(t["total_bytes"].as_u64().unwrap() >= t["free_bytes"].as_u64().unwrap());
    assert_eq!(info["data_plane"][0]["backend"], "tcp", "{info}");
    // The node that served the PUT and GET moved shard bytes to and from its peers.
    let front = admin_json(&s, &s.endpoint(), "info").await;
    let plane = &front["data_plane"][0];
    assert!(plane["transfers"].as_u64().unwrap() > 0, "{front}");
    assert!(
        plane["bytes_in"].as_u64().unwrap() + plane["bytes_out"].as_u64().unwrap() > 1 << 20,
        "{front}"
    );
    assert!(info["rpc"]["calls"].as_u64().unwrap() > 0, "{info}");
    // The same traffic in the front node's metrics, per backend.
    let moved = metric(
        &s.endpoint(),
        "quarry_dataplane_received_bytes_total",
        &[("backend", "tcp")],
    )
    .await
        + metric(
            &s.endpoint(),
            "quarry_dataplane_sent_bytes_total",
            &[("backend", "tcp")],
        )
        .await;
    assert!(
        moved > (1 << 20) as f64,
        "data-plane bytes in /metrics: {moved}"
    );
    // The GET's remote shards were sent by their holders from the page cache (the object was
    // just written), not read into a buffer first.
    let mut sent = 0.0;
    for i in 0..4 {
        sent += metric(
            &s.node_endpoint(i),
            "quarry_dataplane_holder_sendfile_bytes_total",
            &[("backend", "tcp")],
        )
        .await;
    }
    assert!(
        sent > (256 << 10) as f64,
        "bytes sent with sendfile: {sent}"
    );
    let text = admin_text(&s, &e0, "info").await;
    assert!(text.contains("Nodes:       4 of 4 online"), "{text}");
    assert!(
        text.contains("Sets:        2 sets of 4 drives (erasure 2+2); 2 readable, 2 writable"),
        "{text}"
    );
    assert!(text.contains("Drives:      8 of 8 online"), "{text}");
    assert!(!text.contains("OFFLINE"), "{text}");
    assert_eq!(
        metric(&e0, "quarry_drives", &[("state", "offline")]).await,
        0.0
    );

    // Node 4 down: the others stay ready; info and metrics say what is gone.
    s.kill_node(3);
    all_ready(&s, &[0, 1, 2], "node 4 down").await;
    let info = admin_json(&s, &e0, "info").await;
    let mut want: Vec<(String, bool)> = (0..4).map(|i| (addr(&s, i), i != 3)).collect();
    assert_eq!(nodes_online(&info), want, "{info}");
    let t = &info["totals"];
    assert_eq!(
        (
            t["nodes_offline"].as_u64(),
            t["drives_online"].as_u64(),
            t["drives_offline"].as_u64(),
            t["sets_writable"].as_u64()
        ),
        (Some(1), Some(6), Some(2), Some(2)),
        "{info}"
    );
    for d in info["sets"][0]["drives"].as_array().unwrap() {
        let on_dead = d["node"].as_str() == Some(addr(&s, 3).as_str());
        assert_eq!(d["online"].as_bool(), Some(!on_dead), "{d}");
        assert_eq!(d["error"].is_string(), on_dead, "{d}");
    }
    let text = admin_text(&s, &e0, "info").await;
    assert!(text.contains("Nodes:       3 of 4 online"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(&addr(&s, 3)) && l.contains("OFFLINE")),
        "{text}"
    );
    let text = admin_text(&s, &s.node_endpoint(1), "drives").await;
    assert!(text.starts_with("Drives:      6 of 8 online"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("OFFLINE")).count(),
        2,
        "{text}"
    );
    let drives = admin_json(&s, &s.node_endpoint(2), "drives").await;
    assert_eq!(drives["drives"].as_array().unwrap().len(), 8, "{drives}");
    assert_eq!(drives["totals"]["drives_offline"].as_u64(), Some(2));
    assert_eq!(
        metric_settles(&e0, "quarry_drives", &[("state", "offline")], 2.0).await,
        2.0
    );
    assert_eq!(
        metric_settles(&e0, "quarry_drives", &[("state", "online")], 6.0).await,
        6.0
    );

    // Nodes 3 and 4 down: 2 of 4 drives per set is still a read quorum (not a write quorum).
    s.kill_node(2);
    all_ready(&s, &[0, 1], "nodes 3 and 4 down").await;
    let (_, body) = get(&e0, "/health/ready").await;
    assert!(body.contains("drives online 4/8"), "{body}");
    assert!(body.contains("write quorum no"), "{body}");
    let info = admin_json(&s, &e0, "info").await;
    want[2].1 = false;
    assert_eq!(nodes_online(&info), want, "{info}");
    let t = &info["totals"];
    assert_eq!(
        (t["sets_readable"].as_u64(), t["sets_writable"].as_u64()),
        (Some(2), Some(0)),
        "{info}"
    );

    // A third node down: below read quorum, the last node is not ready, and says why; it is
    // still live, and its admin API still answers.
    s.kill_node(1);
    let (status, body) = ready_becomes(&s, 0, 503).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("drives online 2/8"), "{body}");
    assert!(body.contains("read quorum no"), "{body}");
    assert_eq!(get(&e0, "/health/live").await, (200, "live\n".to_owned()));
    let text = admin_text(&s, &e0, "info").await;
    assert!(text.contains("Nodes:       1 of 4 online"), "{text}");
    assert!(text.contains("0 readable, 0 writable"), "{text}");
    assert_eq!(
        metric_settles(&e0, "quarry_drives", &[("state", "offline")], 6.0).await,
        6.0
    );

    // Nodes come back: ready again.
    s.start_node(1).await;
    let (status, body) = ready_becomes(&s, 0, 200).await;
    assert_eq!(status, 200, "{body}");
    all_ready(&s, &[0, 1], "node 2 back").await;
}

#[tokio::test]
async fn ops_admin_info_on_a_single_node() {
    let s = TestServer::start_single(4).await;
    let info = admin_json(&s, &s.endpoint(), "info").await;
    assert_eq!(info["mode"], "single", "{info}");
    assert!(info["this_node"].is_null(), "{info}");
    assert_eq!(info["nodes"].as_array().map(Vec::len), Some(0), "{info}");
    assert_eq!(info["sets"].as_array().map(Vec::len), Some(1), "{info}");
    assert_eq!(info["totals"]["drives_online"].as_u64(), Some(4), "{info}");
    assert!(info["rpc"].is_null(), "{info}");
    let ids: Vec<&str> = info["sets"][0]["drives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().expect("a formatted drive has an id"))
        .collect();
    assert_eq!(ids.len(), 4);

    let text = admin_text(&s, &s.endpoint(), "info").await;
    assert!(text.contains("Mode:        single node"), "{text}");
    assert!(
        text.contains("Sets:        1 set of 4 drives (erasure 2+2); 1 readable, 1 writable"),
        "{text}"
    );
    assert!(!text.contains("Nodes:"), "{text}");
    let text = admin_text(&s, &s.endpoint(), "drives").await;
    assert!(text.starts_with("Drives:      4 of 4 online"), "{text}");
    for i in 0..4 {
        let path = s.drive_path(i).display().to_string();
        assert!(
            text.lines()
                .any(|l| l.contains("online") && l.ends_with(&path)),
            "{path} in {text}"
        );
    }

    // Root only, and never unsigned.
    let http = reqwest::Client::new();
    for path in ["/quarry/admin/v1/info", "/quarry/admin/v1/drives"] {
        let resp = http
            .get(format!("{}{path}", s.endpoint()))
            .send()
            .await
            .unwrap();
        expect_raw_error(resp, 403, "AccessDenied").await;
    }
}

/// Kills the server when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn ops_log_format_json_writes_one_json_object_per_line() {
    let root = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = (1..=4).map(|i| root.path().join(format!("d{i}"))).collect();
    let port = free_port();
    let stderr = std::fs::File::create(root.path().join("stderr.log")).unwrap();
    let stdout = std::fs::File::create(root.path().join("stdout.log")).unwrap();
    let child = std::process::Command::new(quarry_bin())
        .arg("server")
        .args(&dirs)
        .args(["--address", &format!("127.0.0.1:{port}")])
        .args(["--log-format", "json"])
        .env("QUARRY_ROOT_USER", ACCESS_KEY)
        .env("QUARRY_ROOT_PASSWORD", SECRET_KEY)
        .env_remove("QUARRY_LOG")
        .env("RUST_LOG", "debug")
        .current_dir(root.path())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("spawn quarry");
    let _child = Killed(child);
    let endpoint = format!("http://127.0.0.1:{port}");
    let t0 = Instant::now();
    loop {
        if let Ok(r) = reqwest::get(format!("{endpoint}/health/live")).await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "quarry did not start: {}",
            std::fs::read_to_string(root.path().join("stderr.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A failing S3 request, so that a request is logged too.
    let (status, _) = get(&endpoint, "/no-such-bucket/key").await;
    assert_eq!(status, 404, "NoSuchBucket, to anyone, as S3 answers");
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Logs go to stderr, one JSON object a line; stdout carries only the banner.
    let logs = std::fs::read_to_string(root.path().join("stderr.log")).unwrap();
    let mut count = 0;
    let mut messages = Vec::new();
    for line in logs.lines().filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line:?}"));
        assert!(v.is_object(), "{line}");
        let level = v["level"]
            .as_str()
            .unwrap_or_else(|| panic!("level: {line}"));
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level),
            "{line}"
        );
        assert!(
            v["target"].as_str().is_some_and(|t| !t.is_empty()),
            "target: {line}"
        );
        assert!(v["fields"].is_object(), "fields: {line}");
        assert!(v["timestamp"].is_string(), "timestamp: {line}");
        if let Some(m) = v["fields"]["message"].as_str() {
            messages.push(m.to_owned());
        }
        count += 1;
    }
    assert!(count >= 2, "too few log lines: {logs}");
    assert!(
        messages.iter().any(|m| m == "serving S3"),
        "no `serving S3` line in {messages:?}"
    );
    let banner = std::fs::read_to_string(root.path().join("stdout.log")).unwrap();
    assert!(banner.contains("Endpoint:  http://127.0.0.1:"), "{banner}");
    assert!(
        !banner.lines().any(|l| l.starts_with('{')),
        "log lines on stdout: {banner}"
    );
}
