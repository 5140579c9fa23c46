//! Secrets at start-up: the root secret key is printed only when it was just generated, and
//! nodes prove the cluster secret to each other, not something derived from the root
//! credentials (issue 15, finding 7).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quarry_integration::*;

fn log_of(path: std::path::PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[tokio::test]
async fn the_root_secret_key_is_printed_only_when_it_was_just_generated() {
    // Given in the environment: never printed.
    let s = TestServer::start_single(2).await;
    s.create_bucket("given").await;
    let log = log_of(s.root().join("quarry.log"));
    assert!(log.contains(&format!("AccessKey: {ACCESS_KEY}")), "{log}");
    assert!(
        !log.contains(SECRET_KEY),
        "the given secret key is in the log:\n{log}"
    );

    // Generated: printed once (the harness reads it from there and signs with it) ...
    let mut g = TestServer::start_with(2, CredentialMode::Generated).await;
    let secret = g.secret_key().to_string();
    g.create_bucket("generated").await;
    // ... and not again when a restart reads it back from the drives.
    g.restart().await;
    g.client()
        .head_bucket()
        .bucket("generated")
        .send()
        .await
        .expect("the generated keys still work after a restart");
    let log = log_of(g.root().join("quarry.log"));
    assert_eq!(
        log.matches(&secret).count(),
        1,
        "the secret key must appear once, at its generation:\n{log}"
    );
}

/// The body of node `i`'s `/health/ready` (e.g. "drives online 3/4, read quorum yes, ...").
async fn readiness(s: &TestServer, i: usize) -> String {
    match reqwest::get(format!("{}/health/ready", s.node_endpoint(i))).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => format!("unreachable: {e}"),
    }
}

async fn wait_readiness(s: &TestServer, i: usize, want: &str, limit: Duration) -> String {
    let t0 = Instant::now();
    loop {
        let r = readiness(s, i).await;
        if r.contains(want) || t0.elapsed() > limit {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn nodes_prove_the_cluster_secret_and_the_root_credentials_alone_do_not_make_a_node() {
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    let c = s.node_client(0);
    c.create_bucket().bucket("secret").send().await.unwrap();
    let body = random_bytes(300 << 10);
    put_bytes(&c, "secret", "k", &body).await;

    // The operator sets a cluster secret (from a file) on every node and restarts them: the
    // cluster goes on with its data.
    let file = s.root().join("cluster.secret");
    std::fs::write(&file, "0123456789abcdef-test-cluster-secret\n").unwrap();
    #[cfg(unix)]
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    s.set_env("QUARRY_CLUSTER_SECRET_FILE", file.to_str().unwrap());
    s.restart().await;
    let r = wait_readiness(&s, 0, "drives online 4/4", Duration::from_secs(30)).await;
    assert!(r.contains("drives online 4/4"), "{r}");
    assert_eq!(get_bytes(&s.node_client(1), "secret", "k").await, body);

    // Node 4 is replaced by a process that has the root credentials but not the cluster
    // secret (as whoever read them could start): its peers refuse it.
    s.kill_node(3);
    let r = wait_readiness(&s, 0, "drives online 3/4", Duration::from_secs(30)).await;
    assert!(r.contains("drives online 3/4"), "{r}");
    let port = s.node_endpoint(3).rsplit(':').next().unwrap().to_string();
    let out = s.root().join("intruder.log");
    let f = std::fs::File::create(&out).unwrap();
    let _intruder = KillOnDrop(
        Command::new(quarry_bin())
            .arg("server")
            .args(s.drive_args())
            .args(["--set-size", "4", "--address"])
            .arg(format!("127.0.0.1:{port}"))
            .env("QUARRY_ROOT_USER", ACCESS_KEY)
            .env("QUARRY_ROOT_PASSWORD", SECRET_KEY)
            .env_remove("QUARRY_CLUSTER_SECRET")
            .env_remove("QUARRY_CLUSTER_SECRET_FILE")
            .env("RUST_LOG", "info")
            .current_dir(s.root())
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("spawn the intruder"),
    );
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(8) {
        let r = readiness(&s, 0).await;
        assert!(
            !r.contains("drives online 4/4"),
            "a node without the cluster secret was taken in: {r}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let said = log_of(out);
    assert!(
        said.contains("refused the handshake") || said.contains("does not know the cluster secret"),
        "the intruder's log must say it was refused:\n{said}"
    );
    assert!(said.contains("no cluster secret is set"), "{said}");
    // The real node 4 comes back with the secret and is taken in.
    drop(_intruder);
    s.start_node(3).await;
    let r = wait_readiness(&s, 0, "drives online 4/4", Duration::from_secs(30)).await;
    assert!(r.contains("drives online 4/4"), "{r}");
}
