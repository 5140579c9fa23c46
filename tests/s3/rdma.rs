//! `QUARRY_RDMA` at cluster start-up, on a machine without an RDMA device (these machines' kernels
//! have no RDMA support): `auto` (the default) logs one line and serves over TCP, `on` refuses to
//! start with a message that says why, a bad value is a usage error. The verbs path itself runs in
//! the Soft-RoCE VM (scripts/vm/net-verbs-tests.sh).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use quarry_integration::*;

/// Runs `cmd` to its end (killed after `limit`): `(exit code, stdout + stderr)`.
fn run_bounded(cmd: &mut Command, limit: Duration) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("out");
    let f = std::fs::File::create(&path).expect("create output file");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(f.try_clone().expect("clone"))
        .stderr(f)
        .spawn()
        .expect("spawn quarry");
    let t0 = Instant::now();
    let code = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break st.code();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
    (code, out)
}

fn rdma_device_here() -> bool {
    std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some())
}

#[tokio::test]
async fn auto_is_the_default_and_serves_over_tcp_without_a_device() {
    let s = TestServer::start_cluster(2, 2, 4).await;
    for i in 0..2 {
        let log = s.node_log_tail(i, 400);
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("RDMA:")).collect();
        assert_eq!(lines.len(), 1, "one RDMA line per start: {log}");
        if !rdma_device_here() {
            assert!(
                lines[0].contains("RDMA: no device") && lines[0].contains("using TCP"),
                "{}",
                lines[0]
            );
            assert!(
                !lines[0].contains("ERROR") && !lines[0].contains("WARN"),
                "{}",
                lines[0]
            );
        }
        assert!(
            log.contains("data_plane="),
            "backend in the start-up log: {log}"
        );
    }
    // And it serves, across nodes.
    s.create_bucket("rdma-auto").await;
    let body = random_bytes(300 * 1024);
    let c = s.client();
    c.put_object()
        .bucket("rdma-auto")
        .key("k")
        .body(ByteStream::from(body.clone()))
        .send()
        .await
        .expect("PUT");
    let got = c
        .get_object()
        .bucket("rdma-auto")
        .key("k")
        .send()
        .await
        .expect("GET")
        .body
        .collect()
        .await
        .expect("body")
        .to_vec();
    assert_bytes_eq(&got, &body, "GET over TCP");
}

#[tokio::test]
async fn on_without_a_device_refuses_to_start_and_bad_values_are_refused() {
    if rdma_device_here() {
        eprintln!("SKIPPED: this machine has an RDMA device, so QUARRY_RDMA=on may start");
        return;
    }
    let mut s = TestServer::start_cluster(2, 2, 4).await;
    s.kill_node(1);
    let port = s.node_endpoint(1).rsplit(':').next().unwrap().to_string();
    let node = |mode: &str, device: Option<&str>| {
        let mut cmd = Command::new(quarry_bin());
        cmd.arg("server")
            .args(s.drive_args())
            .args(["--set-size", "4", "--address"])
            .arg(format!("127.0.0.1:{port}"))
            .env("QUARRY_ROOT_USER", ACCESS_KEY)
            .env("QUARRY_ROOT_PASSWORD", SECRET_KEY)
            .env("QUARRY_RDMA", mode)
            .env("RUST_LOG", "info");
        match device {
            Some(d) => cmd.env("QUARRY_RDMA_DEVICE", d),
            None => cmd.env_remove("QUARRY_RDMA_DEVICE"),
        };
        cmd
    };
    let t0 = Instant::now();
    let (code, out) = run_bounded(&mut node("on", None), Duration::from_secs(60));
    assert!(
        code.is_some_and(|c| c != 0),
        "must exit with an error: {out}"
    );
    assert!(
        out.contains("QUARRY_RDMA=on but RDMA cannot be used") && out.contains("no RDMA device"),
        "the error must say why: {out}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "fails fast, before joining"
    );

    let (code, out) = run_bounded(&mut node("on", Some("mlx5_9")), Duration::from_secs(60));
    assert!(
        code.is_some_and(|c| c != 0),
        "must exit with an error: {out}"
    );
    assert!(out.contains("QUARRY_RDMA=on"), "{out}");

    let (code, out) = run_bounded(&mut node("maybe", None), Duration::from_secs(60));
    assert_eq!(code, Some(2), "a usage error: {out}");
    assert!(out.contains("off, on or auto"), "{out}");

    // The same node with the default (auto) starts and the cluster serves.
    s.start_node(1).await;
    s.create_bucket("rdma-on").await;
}

/// Inside the Soft-RoCE VM only (scripts/vm/cluster-verbs-tests.sh runs it with
/// QUARRY_VERBS_TEST=1 and QUARRY_RDMA=on for the node processes): a 4-node cluster whose shard
/// reads go over verbs (every node on 127.0.0.1, all sharing rxe0 through its RoCE v2 GID), PUT
/// and GET byte-exact through every node, the front node's data plane is `verbs` with bytes in.
#[tokio::test]
#[ignore = "needs an RDMA device: run scripts/vm/cluster-verbs-tests.sh (Soft-RoCE VM)"]
async fn vm_cluster_reads_shards_over_verbs() {
    if std::env::var_os("QUARRY_VERBS_TEST").is_none() {
        eprintln!(
            "SKIPPED vm_cluster_reads_shards_over_verbs: run scripts/vm/cluster-verbs-tests.sh"
        );
        return;
    }
    assert_eq!(
        std::env::var("QUARRY_RDMA").as_deref(),
        Ok("on"),
        "the script sets QUARRY_RDMA=on for the nodes"
    );
    let s = TestServer::start_cluster(4, 1, 4).await;
    for i in 0..4 {
        let log = s.node_log_tail(i, 400);
        assert!(log.contains("RDMA: using device"), "node {i}: {log}");
    }
    s.create_bucket("verbs").await;
    let sizes = [0usize, 1, 100 * 1024, (1 << 20) + 1, 8 << 20];
    for node in 0..4 {
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .endpoint_url(s.node_endpoint(node))
            .force_path_style(true)
            .region(aws_sdk_s3::config::Region::new(REGION))
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                ACCESS_KEY,
                SECRET_KEY,
                None,
                None,
                "quarry-test",
            ))
            .build();
        let c = aws_sdk_s3::Client::from_conf(conf);
        for (j, &size) in sizes.iter().enumerate() {
            let key = format!("n{node}-{j}");
            let body = random_bytes(size);
            c.put_object()
                .bucket("verbs")
                .key(&key)
                .body(ByteStream::from(body.clone()))
                .send()
                .await
                .unwrap_or_else(|e| panic!("PUT {key}: {}", describe(&e)));
            // Read back through the next node.
            let other = (node + 1) % 4;
            let c2 = aws_sdk_s3::Client::from_conf(
                c.config()
                    .to_builder()
                    .endpoint_url(s.node_endpoint(other))
                    .build(),
            );
            let got = c2
                .get_object()
                .bucket("verbs")
                .key(&key)
                .send()
                .await
                .unwrap_or_else(|e| panic!("GET {key}: {}", describe(&e)))
                .body
                .collect()
                .await
                .expect("body")
                .to_vec();
            assert_bytes_eq(&got, &body, &key);
        }
    }
    let info = s
        .signed("GET", "/quarry/admin/v1/info", &[], Vec::new())
        .await
        .text()
        .await
        .expect("info");
    let v: serde_json::Value = serde_json::from_str(&info).expect("info JSON");
    let dp = &v["data_plane"][0];
    eprintln!("front node's data plane: {dp}");
    assert_eq!(dp["backend"], "verbs", "{info}");
    assert!(dp["bytes_in"].as_u64().unwrap_or(0) > 0, "{info}");
}
