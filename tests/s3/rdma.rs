//! `QUARRY_RDMA` at cluster start-up, on a machine without an RDMA device (these machines' kernels
//! have no RDMA support): `auto` (the default) logs one line and serves over TCP, `on` refuses to
//! start with a message that says why, a bad value is a usage error. The same without libibverbs
//! (`QUARRY_LIBIBVERBS` pointed at a missing file): `auto` says so and serves, `on` says what to
//! install. The verbs path itself runs in
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
                lines[0].contains("RDMA: no device") && lines[0].contains("data plane over TCP"),
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
    put_bytes(&c, "rdma-auto", "k", &body).await;
    assert_bytes_eq(
        &quarry_integration::get_bytes(&c, "rdma-auto", "k").await,
        &body,
        "GET over TCP",
    );
}

/// A file that does not exist, for `QUARRY_LIBIBVERBS`: as on a host without rdma-core.
const MISSING_LIB: &str = "/nonexistent/quarry-test/libibverbs.so.1";

#[tokio::test]
async fn auto_without_libibverbs_says_so_in_one_line_and_serves() {
    let mut s = TestServer::start_cluster(2, 2, 4).await;
    s.kill_node(1);
    s.set_env("QUARRY_LIBIBVERBS", MISSING_LIB);
    s.start_node(1).await;
    let log = s.node_log_tail(1, 400);
    // The log holds both starts of node 1: the last RDMA line is the one without the library.
    let line = log
        .lines()
        .rfind(|l| l.contains("RDMA:"))
        .unwrap_or_else(|| panic!("no RDMA line: {log}"));
    assert!(
        line.contains(&format!(
            "RDMA: {MISSING_LIB} not found; data plane over TCP"
        )),
        "{line}"
    );
    assert!(line.contains("INFO"), "an info line, not a warning: {line}");
    // The node without the library serves, and its peer reads what it wrote (once the front
    // node sees it again: its calls to the node while it was down put it in back-off).
    create_bucket_after_restart(&s, "no-verbs-lib").await;
    let body = random_bytes((1 << 20) + 1);
    // Through the node without the library; read back through its peer.
    put_bytes(&s.node_client(1), "no-verbs-lib", "k", &body).await;
    let got = quarry_integration::get_bytes(&s.node_client(0), "no-verbs-lib", "k").await;
    assert_bytes_eq(&got, &body, "GET through the other node");
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

    // Without libibverbs: the message says which library is missing and what to install.
    let (code, out) = run_bounded(
        node("on", None).env("QUARRY_LIBIBVERBS", MISSING_LIB),
        Duration::from_secs(60),
    );
    assert!(
        code.is_some_and(|c| c != 0),
        "must exit with an error: {out}"
    );
    assert!(
        out.contains("QUARRY_RDMA=on but RDMA cannot be used")
            && out.contains(&format!("{MISSING_LIB} not found"))
            && out.contains("apt install libibverbs1 ibverbs-providers"),
        "the error must say what to install: {out}"
    );
    // A library that is not (or too old a) libibverbs: the same refusal, saying it is too old.
    let (code, out) = run_bounded(
        node("on", None).env("QUARRY_LIBIBVERBS", "libc.so.6"),
        Duration::from_secs(60),
    );
    assert!(
        code.is_some_and(|c| c != 0),
        "must exit with an error: {out}"
    );
    assert!(
        out.contains("libc.so.6 is too old") && out.contains("rdma-core v32 or later"),
        "{out}"
    );

    let (code, out) = run_bounded(&mut node("maybe", None), Duration::from_secs(60));
    assert_eq!(code, Some(2), "a usage error: {out}");
    assert!(out.contains("off, on or auto"), "{out}");

    // The same node with the default (auto) starts and the cluster serves.
    s.start_node(1).await;
    create_bucket_after_restart(&s, "rdma-on").await;
}

/// Creates `bucket` through node 0 right after node 1 restarted, retrying a 503 for up to 20 s as
/// an SDK would (node 0 may still hold node 1 in back-off from its calls while it was down).
async fn create_bucket_after_restart(s: &TestServer, bucket: &str) {
    let client = s.client();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.create_bucket().bucket(bucket).send().await {
            Ok(_) => return,
            Err(e) if Instant::now() < deadline => {
                eprintln!("create bucket {bucket} after the restart: {e:?}; again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create bucket {bucket} 20 s after node 1 restarted: {e:?}"),
        }
    }
}

/// Node `i`'s metrics, parsed.
async fn scrape_node(s: &TestServer, i: usize) -> Vec<crate::metrics::Sample> {
    let text = metrics_get(&format!("{}/metrics", s.node_endpoint(i)))
        .await
        .text()
        .await
        .expect("metrics body");
    crate::metrics::parse(&text)
}

/// The sum of every sample `name` whose labels include `labels`.
fn sum(samples: &[crate::metrics::Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
        .sum()
}

/// A client for node `i` with the SDK's default retries: under TCG the test's own client is slow
/// enough that a pooled connection can idle past the server's keep-alive and be closed as it is
/// reused, which real clients retry (the harness's clients do not retry, to see every 5xx).
fn client(s: &TestServer, i: usize) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .endpoint_url(s.node_endpoint(i))
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
    aws_sdk_s3::Client::from_conf(conf)
}

async fn get_bytes(c: &aws_sdk_s3::Client, key: &str) -> Result<Vec<u8>, String> {
    let out = c
        .get_object()
        .bucket("verbs")
        .key(key)
        .send()
        .await
        .map_err(|e| describe(&e))?;
    out.body
        .collect()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| e.to_string())
}

/// Inside the Soft-RoCE VM only (scripts/vm/cluster-verbs-tests.sh runs it with
/// QUARRY_VERBS_TEST=1 and QUARRY_RDMA=on for the node processes): a 4-node cluster whose shard
/// reads and writes go over verbs (every node on 127.0.0.1, all sharing rxe0 through its RoCE v2
/// GID). PUT and GET byte-exact through every node; the metrics say the shard bytes went over
/// verbs both ways and the GET path copied nothing; a forced QP error (the admin reset) is
/// followed by reconnects and exact reads; a node killed mid-transfer leaves no hang, clear
/// answers, and every object intact once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
    let t0 = std::time::Instant::now();
    let mut s = TestServer::start_cluster(4, 1, 4).await;
    for i in 0..4 {
        let log = s.node_log_tail(i, 400);
        assert!(log.contains("RDMA: using device"), "node {i}: {log}");
    }
    s.create_bucket("verbs").await;
    let sizes = [0usize, 1, 100 * 1024, (1 << 20) + 1, 8 << 20];
    // Each node writes its objects (and reads each back through the next node) while the others
    // do theirs: four streams at once, as a cluster is used.
    let logs = |s: &TestServer| -> String {
        (0..4)
            .map(|i| format!("--- node {i}:\n{}", s.node_log_tail(i, 40)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let s_ref = &s;
    let writers = (0..4).map(|node| {
        let (c, next) = (client(&s, node), client(&s, (node + 1) % 4));
        async move {
            let mut mine = Vec::new();
            for (j, &size) in sizes.iter().enumerate() {
                let key = format!("n{node}-{j}");
                let body = random_bytes(size);
                let started = std::time::Instant::now();
                c.put_object()
                    .bucket("verbs")
                    .key(&key)
                    .body(ByteStream::from(body.clone()))
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("PUT {key}: {}\n{}", describe(&e), logs(s_ref)));
                let got = get_bytes(&next, &key)
                    .await
                    .unwrap_or_else(|e| panic!("GET {key}: {e}\n{}", logs(s_ref)));
                assert_bytes_eq(&got, &body, &key);
                eprintln!("{key} ({size} B): PUT+GET {:?}", started.elapsed());
                mine.push((key, body));
            }
            mine
        }
    });
    let mut objects: Vec<(String, Vec<u8>)> = futures::future::join_all(writers)
        .await
        .into_iter()
        .flatten()
        .collect();
    eprintln!("PUT+GET through every node: {:?}", t0.elapsed());
    // The metrics of every node: shard bytes went over verbs both ways (GET chunks received,
    // PUT chunks sent, and the holders' side of both), from registered pools, and the GET path
    // copied nothing.
    let (mut received, mut sent, mut written, mut read, mut registered) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut tcp, mut copied) = (0.0, 0.0);
    for i in 0..4 {
        let m = scrape_node(&s, i).await;
        copied += crate::metrics::value(&m, "quarry_get_copied_bytes_total", &[]);
        let peer = "quarry_dataplane_peer_bytes_total";
        received += sum(&m, peer, &[("backend", "verbs"), ("direction", "received")]);
        sent += sum(&m, peer, &[("backend", "verbs"), ("direction", "sent")]);
        tcp += sum(&m, peer, &[("backend", "tcp")]);
        let holder = "quarry_dataplane_holder_bytes_total";
        written += sum(&m, holder, &[("direction", "written")]);
        read += sum(&m, holder, &[("direction", "read")]);
        registered += sum(&m, "quarry_buffer_pool_registered_bytes", &[]);
    }
    eprintln!(
        "FIGURES: verbs received {received} sent {sent}; holders wrote {written} read {read}; \
         tcp data-plane bytes {tcp}; registered {registered}"
    );
    // Every chunk was the stripe slot its holder wrote into (inline shards are slices of their
    // metadata): the GET path copied nothing.
    assert_eq!(copied, 0.0, "the GET path copied bytes");
    assert!(received > 0.0 && sent > 0.0, "shards over verbs both ways");
    assert!(
        written >= received && read >= sent,
        "the holders' side of it"
    );
    assert!(registered > 0.0, "registered pools");
    let info = s
        .signed_node(0, "GET", "/quarry/admin/v1/info", &[], Vec::new())
        .await
        .text()
        .await
        .expect("info");
    let v: serde_json::Value = serde_json::from_str(&info).expect("info JSON");
    assert_eq!(v["data_plane"][0]["backend"], "verbs", "{info}");

    // A forced QP error: node 0's queue pairs go to the error state; reads through it go on
    // (byte-exact) over new ones.
    let before = sum(
        &scrape_node(&s, 0).await,
        "quarry_dataplane_peer_reconnects_total",
        &[("backend", "verbs")],
    );
    let r = s
        .signed_node(
            0,
            "POST",
            "/quarry/admin/v1/data-plane/reset",
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert!(
        v["reset"].as_u64().unwrap_or(0) >= 1,
        "queue pairs to break: {v}"
    );
    // (Soft-RoCE under TCG moves ~20 MB/s: the later phases read a sample of the objects, one
    // writer node's five sizes, and every object written while a node was down.)
    let sample = |k: &str| k.starts_with("n3-") || k.starts_with("during-");
    let c0 = client(&s, 0);
    for (key, body) in objects.iter().filter(|(k, _)| sample(k)) {
        let got = get_bytes(&c0, key)
            .await
            .unwrap_or_else(|e| panic!("GET {key} after the reset: {e}"));
        assert_bytes_eq(&got, body, key);
    }
    eprintln!("after the reset: {:?}", t0.elapsed());
    let after = sum(
        &scrape_node(&s, 0).await,
        "quarry_dataplane_peer_reconnects_total",
        &[("backend", "verbs")],
    );
    eprintln!("reconnects on node 0: {before} -> {after}");
    assert!(after > before, "the broken queue pairs were rebuilt");

    // A node killed while transfers run: every request ends in bounded time, with its bytes or
    // a clear error; the cluster serves on; the node comes back and everything is intact.
    let big = random_bytes(4 << 20);
    let get = {
        let c = client(&s, 0);
        let want = objects.iter().find(|(k, _)| k == "n3-4").unwrap().1.clone();
        tokio::spawn(async move {
            tokio::time::timeout(Duration::from_secs(90), get_bytes(&c, "n3-4"))
                .await
                .map(|r| r.map(|b| b == want))
        })
    };
    let put = {
        let c = client(&s, 1);
        let body = big.clone();
        tokio::spawn(async move {
            tokio::time::timeout(
                Duration::from_secs(90),
                c.put_object()
                    .bucket("verbs")
                    .key("during-kill")
                    .body(ByteStream::from(body))
                    .send(),
            )
            .await
            .map(|r| r.map(|_| ()).map_err(|e| describe(&e)))
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.kill_node(2);
    let get = get.await.unwrap().expect("the GET hung past 90 s");
    let put = put.await.unwrap().expect("the PUT hung past 90 s");
    eprintln!("mid-transfer kill: GET {get:?}, PUT {put:?}");
    assert!(
        get.as_ref().map_or(true, |same| *same),
        "a GET that succeeded is exact"
    );
    if put.is_ok() {
        objects.push(("during-kill".into(), big.clone()));
    }
    // Node 2 down: writes (3 of 4 nodes) and reads go on.
    let c3 = client(&s, 3);
    let outage = random_bytes((1 << 20) + 3);
    c3.put_object()
        .bucket("verbs")
        .key("during-outage")
        .body(ByteStream::from(outage.clone()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT with a node down: {}", describe(&e)));
    objects.push(("during-outage".into(), outage));
    let c1 = client(&s, 1);
    for (key, body) in objects.iter().filter(|(k, _)| sample(k)) {
        let got = get_bytes(&c1, key)
            .await
            .unwrap_or_else(|e| panic!("GET {key} with a node down: {e}"));
        assert_bytes_eq(&got, body, key);
    }
    eprintln!("node 2 down: {:?}", t0.elapsed());
    s.start_node(2).await;
    assert!(s.node_log_tail(2, 400).contains("RDMA: using device"));
    // Heal what node 2 missed, then read it (and the sample) through node 2.
    let r = s
        .signed_node(
            0,
            "POST",
            "/quarry/admin/v1/heal?bucket=verbs&prefix=during-",
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(r.status(), 200, "heal");
    let c2 = client(&s, 2);
    for (key, body) in objects.iter().filter(|(k, _)| sample(k)) {
        let got = get_bytes(&c2, key)
            .await
            .unwrap_or_else(|e| panic!("GET {key} through the restarted node: {e}"));
        assert_bytes_eq(&got, body, key);
    }
    eprintln!("the whole cluster test: {:?}", t0.elapsed());
}

/// The RDMA libraries `ldd` lists for the ELF file at `path`.
fn rdma_libraries_linked(path: &std::path::Path) -> Vec<String> {
    let out = Command::new("ldd")
        .arg(path)
        .output()
        .expect("run ldd (Debian's libc-bin)");
    assert!(
        out.status.success(),
        "ldd {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("libibverbs") || l.starts_with("librdmacm"))
        .map(String::from)
        .collect()
}

/// libibverbs is loaded at run time (crates/verbs), never linked: the binary starts on a host
/// without rdma-core. (librdmacm is not used at all.)
#[test]
fn quarry_binary_links_no_rdma_library() {
    // The control: a library that does link libibverbs is seen to (where rdma-core is installed).
    let rdmacm = std::path::Path::new("/usr/lib/x86_64-linux-gnu/librdmacm.so.1");
    if rdmacm.exists() {
        let linked = rdma_libraries_linked(rdmacm);
        assert!(
            linked.iter().any(|l| l.starts_with("libibverbs.so.1")),
            "the check must see a linked libibverbs: {linked:?}"
        );
    }
    let bin = quarry_bin();
    let linked = rdma_libraries_linked(&bin);
    assert!(
        linked.is_empty(),
        "{} links RDMA libraries: {linked:?}",
        bin.display()
    );
}

// ---------------------------------------------------------------------------------------------
// S3 over RDMA to clients (crates/rdma-client, crates/s3/src/rdma.rs)
// ---------------------------------------------------------------------------------------------

use quarry_rdma_client::token::{RemoteSpan, Request as TokenRequest, Token, TOKEN_HEADER};
use quarry_rdma_client::{ClientConfig, ClientError, RdmaClient};

/// A token that parses and would name a buffer: what a client sends to a node without RDMA.
fn some_token(method: &str, path: &str) -> String {
    let span = RemoteSpan {
        addr: 0x1000,
        rkey: 7,
        len: 64,
    };
    let req = TokenRequest {
        method,
        path,
        query: "",
        range: "",
    };
    Token::sign(&[1; 32], 1, span, unix_secs() + 60, &req)
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// On a node without an RDMA device (these machines), S3 over RDMA is refused clearly, never
/// served over TCP instead: the connection request and a GET or PUT with a token answer 501
/// NotImplemented, while the same GET without the token is served. The client crate says the
/// device is missing rather than failing obscurely. Unsigned connection requests are refused.
#[tokio::test]
async fn a_node_without_rdma_refuses_tokens_with_not_implemented() {
    let s = TestServer::start(4).await;
    s.create_bucket("rdma-none").await;
    let c = s.client();
    put_bytes(&c, "rdma-none", "k", b"hello").await;

    let r = s
        .signed(
            "POST",
            "/quarry/rdma/v1/connections",
            &[],
            br#"{"version":1,"endpoint":"00"}"#.to_vec(),
        )
        .await;
    let body = expect_raw_error(r, 501, "NotImplemented").await;
    assert!(body.contains("no RDMA device"), "{body}");
    let token = some_token("GET", "/rdma-none/k");
    let r = s
        .signed("GET", "/rdma-none/k", &[(TOKEN_HEADER, &token)], Vec::new())
        .await;
    expect_raw_error(r, 501, "NotImplemented").await;
    let token = some_token("PUT", "/rdma-none/k2");
    let r = s
        .signed(
            "PUT",
            "/rdma-none/k2",
            &[(TOKEN_HEADER, &token)],
            Vec::new(),
        )
        .await;
    expect_raw_error(r, 501, "NotImplemented").await;
    // Nothing was written by the refused PUT; the plain GET (the control) is served.
    let r = s.signed("GET", "/rdma-none/k2", &[], Vec::new()).await;
    assert_eq!(r.status(), 404);
    let r = s.signed("GET", "/rdma-none/k", &[], Vec::new()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(&r.bytes().await.unwrap()[..], b"hello");
    // Unsigned: refused before anything else.
    let r = send_raw(
        "POST",
        &format!("{}/quarry/rdma/v1/connections", s.endpoint()),
        &[],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(r.status(), 403);

    if !rdma_device_here() {
        let e = RdmaClient::connect(ClientConfig::new(
            &s.endpoint(),
            s.access_key(),
            s.secret_key(),
        ))
        .await
        .expect_err("no device here");
        match &e {
            ClientError::Verbs(v) => assert!(v.is_no_device(), "{e}"),
            other => panic!("expected a missing device, got {other}"),
        }
    }
}

const CLIENT_BUCKET: &str = "rdma-clients";
/// The nodes' `QUARRY_RDMA_CLIENT_IDLE` in the client test.
const CLIENT_IDLE: &str = "45s";

/// The client process that [`vm_cluster_serves_s3_over_rdma_to_clients`] starts and kills
/// mid-transfer (`QUARRY_RDMA_CHILD=get|put`): GETs of `o-8m` into one registered buffer, or
/// PUTs of 8 MiB from it to `killed-put-<n>`, one after the other, each announced before it is
/// sent and after it returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a client process started (and killed) by vm_cluster_serves_s3_over_rdma_to_clients"]
async fn client_child() {
    let Ok(mode) = std::env::var("QUARRY_RDMA_CHILD") else {
        return;
    };
    let endpoint = std::env::var("QUARRY_RDMA_CHILD_ENDPOINT").expect("endpoint");
    let rc = RdmaClient::connect(ClientConfig::new(&endpoint, ACCESS_KEY, SECRET_KEY))
        .await
        .expect("connect");
    let mut buf = rc.register(8 << 20).expect("register");
    buf.as_mut_slice().fill(0x5a);
    eprintln!("CONNECTED");
    for n in 0.. {
        eprintln!("START {n}");
        match mode.as_str() {
            "get" => {
                rc.get_into(&mut buf, CLIENT_BUCKET, "o-8m", None)
                    .await
                    .expect("GET");
            }
            _ => {
                rc.put_from(&buf, 8 << 20, CLIENT_BUCKET, &format!("killed-put-{n}"))
                    .await
                    .expect("PUT");
            }
        }
        eprintln!("DONE {n}");
    }
}

/// Starts [`client_child`] in `mode` against node 1 and kills it once node 1 has begun its
/// first transfer (its count of RDMA GETs or PUTs went up: an 8 MiB transfer then has hundreds
/// of milliseconds to go under TCG); returns the child's log (`START n` / `DONE n` lines).
async fn kill_client_mid_transfer(s: &TestServer, mode: &str) -> String {
    let metric = if mode == "get" {
        "quarry_s3_rdma_get_requests_total"
    } else {
        "quarry_s3_rdma_put_requests_total"
    };
    let count = |m: &[crate::metrics::Sample]| crate::metrics::value(m, metric, &[]);
    let before = count(&scrape_node(s, 1).await);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("child.log");
    let f = std::fs::File::create(&path).expect("log");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "rdma::client_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("QUARRY_RDMA_CHILD", mode)
        .env("QUARRY_RDMA_CHILD_ENDPOINT", s.node_endpoint(1))
        .stdin(Stdio::null())
        .stdout(f.try_clone().expect("clone"))
        .stderr(f)
        .spawn()
        .expect("spawn the client process");
    let log = || std::fs::read_to_string(&path).unwrap_or_default();
    let t0 = Instant::now();
    while count(&scrape_node(s, 1).await) == before {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the client process started no transfer: {}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.kill().expect("kill");
    let _ = child.wait();
    log()
}

/// Inside the Soft-RoCE VM only (scripts/vm/cluster-verbs-tests.sh): S3 over RDMA to a client
/// of a 4-node cluster over verbs. GETs of 0 B, 1 B, 1 MiB+1 and 8 MiB land byte-exact in a
/// registered buffer, whole and in ranges, and a healthy GET copies nothing on the node (its
/// stripe buffers are written as they are); a PUT from registered memory reads back exactly over
/// HTTP from another node; a wrong MAC, an expired token, another key's connection and a buffer
/// one byte too small are each refused with their error beside a passing request; a client
/// killed mid-GET and mid-PUT leaves nothing partial and other clients unaffected; a read with
/// a node down is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an RDMA device: run scripts/vm/cluster-verbs-tests.sh (Soft-RoCE VM)"]
async fn vm_cluster_serves_s3_over_rdma_to_clients() {
    if std::env::var_os("QUARRY_VERBS_TEST").is_none() {
        eprintln!("SKIPPED vm_cluster_serves_s3_over_rdma_to_clients: run scripts/vm/cluster-verbs-tests.sh");
        return;
    }
    let t0 = Instant::now();
    // Client connections unused for 45 s are closed: how the node finds a client that died
    // between two transfers (the kills below may land just after one).
    let mut s =
        TestServer::start_cluster_with_env(4, 1, 4, &[("QUARRY_RDMA_CLIENT_IDLE", CLIENT_IDLE)])
            .await;
    s.create_bucket(CLIENT_BUCKET).await;
    let http = client(&s, 0);
    let sizes = [
        ("o-0", 0usize),
        ("o-1", 1),
        ("o-1m1", (1 << 20) + 1),
        ("o-8m", 8 << 20),
    ];
    let mut bodies = std::collections::HashMap::new();
    for (key, size) in sizes {
        let body = random_bytes(size);
        http.put_object()
            .bucket(CLIENT_BUCKET)
            .key(key)
            .body(ByteStream::from(body.clone()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("PUT {key}: {}", describe(&e)));
        bodies.insert(key, body);
    }
    let config = || ClientConfig::new(&s.node_endpoint(1), ACCESS_KEY, SECRET_KEY);
    let rc = RdmaClient::connect(config()).await.expect("connect");
    let mut buf = rc.register((8 << 20) + 4096).expect("register");
    let node1 = |m: &[crate::metrics::Sample], name: &str| crate::metrics::value(m, name, &[]);
    let before = scrape_node(&s, 1).await;

    // Whole objects.
    for (key, size) in sizes {
        buf.as_mut_slice().fill(0xee);
        let got = rc
            .get_into(&mut buf, CLIENT_BUCKET, key, None)
            .await
            .unwrap_or_else(|e| panic!("RDMA GET {key}: {e}"));
        assert_eq!(got.status, 200, "{key}");
        assert_eq!(got.len, size as u64, "{key}");
        assert_bytes_eq(&buf.as_slice()[..size], &bodies[key], key);
        assert_eq!(
            got.etag.as_deref(),
            Some(etag_of(&bodies[key]).as_str()),
            "{key}"
        );
    }
    // Ranges (end exclusive here, inclusive on the wire).
    for (key, range) in [
        ("o-1m1", 1000u64..(1 << 20) + 1),
        ("o-8m", (3 << 20) + 5..5 << 20),
        ("o-8m", 0..1),
    ] {
        let got = rc
            .get_into(&mut buf, CLIENT_BUCKET, key, Some(range.clone()))
            .await
            .unwrap_or_else(|e| panic!("RDMA GET {key} {range:?}: {e}"));
        assert_eq!(got.status, 206);
        let (a, b) = (range.start as usize, range.end as usize);
        assert_eq!(got.len as usize, b - a);
        assert_bytes_eq(&buf.as_slice()[..b - a], &bodies[key][a..b], key);
    }
    let after = scrape_node(&s, 1).await;
    let sent = node1(&after, "quarry_s3_rdma_sent_bytes_total")
        - node1(&before, "quarry_s3_rdma_sent_bytes_total");
    let copied = node1(&after, "quarry_s3_rdma_copied_bytes_total")
        - node1(&before, "quarry_s3_rdma_copied_bytes_total");
    eprintln!("FIGURES: client GETs: {sent} bytes over RDMA, {copied} copied into staging");
    assert!(
        sent >= (9 << 20) as f64,
        "object bytes went over RDMA: {sent}"
    );
    // Only the inline 1-byte object (a slice of its metadata) is not in registered memory.
    assert!(copied <= 1.0, "a healthy GET copied {copied} bytes");

    // PUT from registered memory, read back over HTTP from another node.
    let put_body = random_bytes((3 << 20) + 7);
    buf.as_mut_slice()[..put_body.len()].copy_from_slice(&put_body);
    let out = rc
        .put_from(&buf, put_body.len(), CLIENT_BUCKET, "from-rdma")
        .await
        .expect("RDMA PUT");
    assert_eq!(out.etag.as_deref(), Some(etag_of(&put_body).as_str()));
    assert_eq!(out.len, put_body.len() as u64);
    let got = quarry_integration::get_bytes(&client(&s, 2), CLIENT_BUCKET, "from-rdma").await;
    assert_bytes_eq(&got, &put_body, "PUT over RDMA, GET over HTTP");
    let out = rc
        .put_from(&buf, 0, CLIENT_BUCKET, "empty-from-rdma")
        .await
        .expect("empty RDMA PUT");
    assert_eq!(out.len, 0);
    assert!(
        quarry_integration::get_bytes(&http, CLIENT_BUCKET, "empty-from-rdma")
            .await
            .is_empty()
    );

    // Refusals, each beside the passing request above.
    let path = format!("/{CLIENT_BUCKET}/o-1m1");
    let req = TokenRequest {
        method: "GET",
        path: &path,
        query: "",
        range: "",
    };
    let good = rc.token(buf.span(), &req);
    let mut wrong = good.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == '0' { '1' } else { '0' });
    let e = rc
        .get_with_token(&path, "", &wrong)
        .await
        .expect_err("wrong MAC");
    assert_eq!(e.code(), Some("InvalidToken"), "{e}");
    let expired = Token::sign(
        rc.token_key(),
        rc.connection_id(),
        buf.span(),
        unix_secs() - 5,
        &req,
    );
    let e = rc
        .get_with_token(&path, "", &expired)
        .await
        .expect_err("expired");
    assert_eq!(e.code(), Some("ExpiredToken"), "{e}");
    // A token for another request (the MAC covers the path).
    let e = rc
        .get_with_token(&format!("/{CLIENT_BUCKET}/o-8m"), "", &good)
        .await
        .expect_err("another path");
    assert_eq!(e.code(), Some("InvalidToken"), "{e}");
    // Another key's connection: bob (allowed to read) names root's connection.
    let (bob_key, bob_secret) = crate::iam::user_with_key(&s, "bob").await;
    crate::iam::ok(
        &crate::iam::call(
            &s,
            0,
            crate::iam::ROOT,
            "iam",
            &[
                ("Action", "PutUserPolicy"),
                ("UserName", "bob"),
                ("PolicyName", "read"),
                (
                    "PolicyDocument",
                    r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::*"}]}"#,
                ),
            ],
        )
        .await,
    );
    // (Node 1 learns bob's key from the drives within a second.)
    let mut bob = None;
    for _ in 0..40 {
        match RdmaClient::connect(ClientConfig::new(
            &s.node_endpoint(1),
            &bob_key,
            &bob_secret,
        ))
        .await
        {
            Ok(c) => {
                bob = Some(c);
                break;
            }
            Err(e) if e.code() == Some("InvalidAccessKeyId") => {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            Err(e) => panic!("bob connects: {e}"),
        }
    }
    let bob = bob.expect("node 1 knows bob's key");
    let mut bob_buf = bob.register(2 << 20).expect("register");
    // Bob reads on his own connection once node 1 has his policy too (IAM changes reach the
    // other nodes within their cache's bound): the control beside the refusal below.
    let mut got = None;
    for _ in 0..40 {
        match bob
            .get_into(&mut bob_buf, CLIENT_BUCKET, "o-1m1", None)
            .await
        {
            Ok(g) => {
                got = Some(g);
                break;
            }
            Err(e) if e.code() == Some("AccessDenied") => {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            Err(e) => panic!("bob on his own connection: {e}"),
        }
    }
    let got = got.expect("bob on his own connection, once node 1 has his policy");
    assert_bytes_eq(
        &bob_buf.as_slice()[..got.len as usize],
        &bodies["o-1m1"],
        "bob",
    );
    // Bob, allowed to read, names root's connection: refused.
    let theirs = Token::sign(
        bob.token_key(),
        rc.connection_id(),
        bob_buf.span(),
        unix_secs() + 60,
        &req,
    );
    let e = bob
        .get_with_token(&path, "", &theirs)
        .await
        .expect_err("root's connection");
    assert_eq!(e.code(), Some("AccessDenied"), "{e}");
    // A buffer one byte too small: refused before a byte moves.
    let mut small = rc.register(1 << 20).expect("register");
    let e = rc
        .get_into(&mut small, CLIENT_BUCKET, "o-1m1", None)
        .await
        .expect_err("1 byte too small");
    assert_eq!(e.code(), Some("InvalidRequest"), "{e}");
    match &e {
        ClientError::S3 { rdma_bytes, .. } => assert_eq!(*rdma_bytes, Some(0)),
        other => panic!("{other}"),
    }
    // The connection still serves after every refusal.
    rc.get_into(&mut buf, CLIENT_BUCKET, "o-1m1", None)
        .await
        .expect("after the refusals");
    eprintln!("refusals done: {:?}", t0.elapsed());

    // Clients killed mid-GET and mid-PUT: the node notices (the transfer cut off fails, or
    // the connection of a client that died just after one goes idle), drops their
    // connections, and nothing partial is visible; this client goes on meanwhile.
    let errors_before = node1(&scrape_node(&s, 1).await, "quarry_s3_rdma_errors_total");
    let conns_before = node1(&scrape_node(&s, 1).await, "quarry_s3_rdma_connections");
    let get_log = kill_client_mid_transfer(&s, "get").await;
    rc.get_into(&mut buf, CLIENT_BUCKET, "o-1m1", None)
        .await
        .expect("this client between the kills");
    let put_log = kill_client_mid_transfer(&s, "put").await;
    eprintln!("killed clients:\n{get_log}\n{put_log}");
    let cleaned = {
        let mut ok = false;
        let t = Instant::now();
        // The idle bound, the reaper's 10 s tick, and time to spare under TCG.
        while t.elapsed() < Duration::from_secs(150) {
            let m = scrape_node(&s, 1).await;
            if node1(&m, "quarry_s3_rdma_connections") <= conns_before {
                ok = true;
                break;
            }
            let got = rc
                .get_into(&mut buf, CLIENT_BUCKET, "o-1m1", None)
                .await
                .expect("this client while the killed ones are cleaned up");
            assert_eq!(got.len, bodies["o-1m1"].len() as u64);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        ok
    };
    eprintln!(
        "killed clients cleaned up: {cleaned}; transfers failed meanwhile: {}",
        node1(&scrape_node(&s, 1).await, "quarry_s3_rdma_errors_total") - errors_before
    );
    if !cleaned {
        let m = scrape_node(&s, 1).await;
        panic!(
            "the node did not drop the killed clients' connections: connections {} (before {conns_before}), errors {} (before {errors_before})\n{}",
            node1(&m, "quarry_s3_rdma_connections"),
            node1(&m, "quarry_s3_rdma_errors_total"),
            s.node_log_tail(1, 60)
        );
    }
    for n in 0.. {
        if !put_log.contains(&format!("START {n}\n")) {
            break;
        }
        let key = format!("killed-put-{n}");
        let head = http
            .head_object()
            .bucket(CLIENT_BUCKET)
            .key(&key)
            .send()
            .await;
        if put_log.contains(&format!("DONE {n}\n")) {
            assert_eq!(
                head.expect("a finished PUT").content_length(),
                Some(8 << 20)
            );
        } else {
            assert_eq!(
                head.as_ref().err().and_then(error_status),
                Some(404),
                "{key}: a PUT cut off mid-transfer left nothing visible"
            );
        }
    }
    let got = rc
        .get_into(&mut buf, CLIENT_BUCKET, "o-8m", None)
        .await
        .expect("this client after the kills");
    assert_bytes_eq(
        &buf.as_slice()[..got.len as usize],
        &bodies["o-8m"],
        "after kills",
    );

    // A degraded read: one node down, the object decoded, delivered exact.
    s.kill_node(3);
    buf.as_mut_slice().fill(0);
    let got = rc
        .get_into(&mut buf, CLIENT_BUCKET, "o-8m", None)
        .await
        .expect("degraded RDMA GET");
    assert_bytes_eq(
        &buf.as_slice()[..got.len as usize],
        &bodies["o-8m"],
        "degraded",
    );
    rc.close().await.expect("close");
    let m = scrape_node(&s, 1).await;
    eprintln!(
        "FIGURES: node 1 rdma connects {} gets {} puts {} sent {} received {} copied {} errors {}; total {:?}",
        node1(&m, "quarry_s3_rdma_connects_total"),
        node1(&m, "quarry_s3_rdma_get_requests_total"),
        node1(&m, "quarry_s3_rdma_put_requests_total"),
        node1(&m, "quarry_s3_rdma_sent_bytes_total"),
        node1(&m, "quarry_s3_rdma_received_bytes_total"),
        node1(&m, "quarry_s3_rdma_copied_bytes_total"),
        node1(&m, "quarry_s3_rdma_errors_total"),
        t0.elapsed()
    );
}
