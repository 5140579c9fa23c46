//! HTTPS: the S3 listener with certificates from `--certs-dir` (a test CA of its own), what
//! clients refuse, what the server refuses to start with, and certificate rotation under load.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use quarry_integration::*;
use quarry_tls::generate::{write, write_certs_dir, Ca, Pem, Validity};
use quarry_tls::rustls::pki_types::{CertificateDer, ServerName};

/// The certificate a new TLS connection to `port` is served (its DER), verified against `ca_pem`.
async fn served_certificate(port: u16, ca_pem: &str) -> Result<Vec<u8>, String> {
    let config =
        quarry_tls::client_config_trusting(ca_pem.as_bytes()).map_err(|e| e.to_string())?;
    let connector = quarry_tls::tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").expect("a name");
    let tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| "handshake timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let certs = tls
        .get_ref()
        .1
        .peer_certificates()
        .ok_or("no certificate")?;
    Ok(certs[0].as_ref().to_vec())
}

fn der_of(pem: &str) -> Vec<u8> {
    use quarry_tls::rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM certificate")
        .as_ref()
        .to_vec()
}

fn issue(ca: &Ca, names: &[&str], validity: Validity) -> Pem {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    ca.issue(&names, validity).expect("issue")
}

/// Replaces the certificate directory's pair (each file by rename; the key last).
fn install(dir: &Path, pem: &Pem) {
    write(&dir.join("public.crt"), pem.cert.as_bytes(), false).unwrap();
    write(&dir.join("private.key"), pem.key.as_bytes(), true).unwrap();
}

#[tokio::test]
async fn https_serves_s3_and_untrusting_or_plain_clients_get_nothing() {
    let s = TestServer::start_https(4).await;
    let tls = s.tls().expect("an HTTPS server");
    assert!(s.endpoint().starts_with("https://"), "{}", s.endpoint());
    assert!(
        s.log_tail(200)
            .contains(&format!("Endpoint:  https://127.0.0.1:{}", s.port())),
        "{}",
        s.log_tail(50)
    );
    let c = s.client();
    s.create_bucket("tls").await;
    let small = random_bytes(1000);
    let big = random_bytes(3 << 20);
    put_bytes(&c, "tls", "small", &small).await;
    put_bytes(&c, "tls", "big", &big).await;
    assert_eq!(get_bytes(&c, "tls", "small").await, small);
    assert_eq!(get_bytes(&c, "tls", "big").await, big);

    // A client that does not trust the test CA (the system's roots) is refused by its own TLS.
    let untrusting = sdk_client(&s.endpoint(), s.access_key(), s.secret_key());
    let e = untrusting
        .list_buckets()
        .send()
        .await
        .expect_err("an untrusted certificate must be refused");
    let msg = format!("{:?}", e);
    assert!(
        msg.contains("UnknownIssuer") || msg.to_lowercase().contains("certificate"),
        "{msg}"
    );

    // Plain HTTP on the HTTPS port gets no HTTP answer.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(format!("http://127.0.0.1:{}/health/live", s.port()))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP was answered: {plain:?}");

    // The trusted one, through reqwest too (health and metrics over HTTPS).
    let ok = tls
        .reqwest()
        .get(format!("{}/health/ready", s.endpoint()))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);

    // ALPN: the server speaks HTTP/1.1 only, and says so.
    let mut config = quarry_tls::client_config_trusting(tls.ca_pem().as_bytes()).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let connector = quarry_tls::tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", s.port()))
        .await
        .unwrap();
    let conn = connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(conn.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(
        conn.get_ref().1.protocol_version(),
        Some(quarry_tls::rustls::ProtocolVersion::TLSv1_3)
    );
}

fn sighup(s: &TestServer) {
    let pid = s.pid(0).expect("the server runs");
    let st = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .expect("kill -HUP");
    assert!(st.success());
}

/// Waits until new connections are served `want` (DER), or panics with the log.
async fn wait_served(s: &TestServer, ca_pem: &str, want: &[u8], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if served_certificate(s.port(), ca_pem).await.ok().as_deref() == Some(want) {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "{what}: new connections never got the new certificate; log:\n{}",
                s.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn sighup_reloads_and_a_bad_reload_keeps_the_certificate_in_use() {
    let mut s = TestServer::start_https(1).await;
    // Only SIGHUP reloads here.
    s.set_env("QUARRY_CERTS_CHECK_INTERVAL", "0");
    s.restart().await;
    let tls = s.tls().unwrap();
    let (dir, ca_pem) = (tls.dir.clone(), tls.ca_pem().to_owned());
    let first = served_certificate(s.port(), &ca_pem).await.unwrap();

    // An expired certificate is refused: the log says why and the old one stays.
    let now = SystemTime::now();
    let expired = issue(
        &tls.ca,
        &["127.0.0.1"],
        Validity {
            not_before: now - Duration::from_secs(5 * 86_400),
            not_after: now - Duration::from_secs(86_400),
        },
    );
    install(&dir, &expired);
    sighup(&s);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s
        .log_tail(usize::MAX)
        .contains("cannot reload the certificates")
    {
        assert!(
            Instant::now() < deadline,
            "no refusal logged:\n{}",
            s.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        s.log_tail(usize::MAX).contains("expired on"),
        "{}",
        s.log_tail(30)
    );
    assert_eq!(served_certificate(s.port(), &ca_pem).await.unwrap(), first);
    s.create_bucket("still").await;

    // A certificate for another name is loaded (it is valid), and clients refuse it.
    let other = issue(&tls.ca, &["other.example"], Validity::days(3));
    install(&dir, &other);
    sighup(&s);
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = loop {
        match served_certificate(s.port(), &ca_pem).await {
            Err(e) => break e,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Ok(_) => panic!(
                "the other certificate was never served:\n{}",
                s.log_tail(30)
            ),
        }
    };
    assert!(
        e.contains("NotValidForName") || e.contains("not valid for"),
        "{e}"
    );
    let refused = s.client().list_buckets().send().await;
    assert!(
        refused.is_err(),
        "a certificate for another name was accepted"
    );
    assert!(
        s.log_tail(usize::MAX)
            .contains("TLS: certificates reloaded"),
        "{}",
        s.log_tail(30)
    );

    // And back to a good one.
    let good = issue(&tls.ca, &["127.0.0.1"], Validity::days(3));
    install(&dir, &good);
    sighup(&s);
    wait_served(&s, &ca_pem, &der_of(&good.cert), "SIGHUP").await;
    s.client().list_buckets().send().await.unwrap();
}

#[tokio::test]
async fn rotation_under_load_keeps_requests_succeeding() {
    let mut s = TestServer::start_https(4).await;
    s.set_env("QUARRY_CERTS_CHECK_INTERVAL", "1s");
    s.restart().await;
    let tls = s.tls().unwrap();
    let (dir, ca_pem) = (tls.dir.clone(), tls.ca_pem().to_owned());
    s.create_bucket("rot").await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..4 {
        // A new client per round trip for two of them (new connections, new handshakes), one
        // client kept for the others (connections opened before the rotation).
        let (stop, done) = (stop.clone(), done.clone());
        let kept = s.client();
        let endpoint = s.endpoint();
        let ca = ca_pem.clone();
        workers.push(tokio::spawn(async move {
            let data = random_bytes(200_000 + w * 1000);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let c = if w % 2 == 0 {
                    kept.clone()
                } else {
                    sdk_client_tls(&endpoint, ACCESS_KEY, SECRET_KEY, &ca)
                };
                let key = format!("w{w}/{n}");
                put_bytes(&c, "rot", &key, &data).await;
                assert_eq!(get_bytes(&c, "rot", &key).await, data);
                n += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut served = Vec::new();
    for round in 0..2 {
        let next = issue(&tls.ca, &["127.0.0.1", "localhost"], Validity::days(3));
        install(&dir, &next);
        wait_served(
            &s,
            &ca_pem,
            &der_of(&next.cert),
            &format!("rotation {round}"),
        )
        .await;
        served.push(der_of(&next.cert));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        // A failed request panics its worker: the join fails and so does the test.
        let n = w.await.expect("a request failed during the rotation");
        assert!(n > 0);
    }
    assert_ne!(served[0], served[1]);
    assert!(done.load(Ordering::Relaxed) >= 8);
    // The whole log: the access lines of the load can push the reload lines far up.
    assert!(
        s.log_tail(usize::MAX).contains("the files changed"),
        "{}",
        s.log_tail(30)
    );
}

/// Runs `quarry server` on one fresh drive with `QUARRY_CERTS_DIR=certs`, and returns what it
/// printed when it exited (it must exit: every case here is a start-up error).
fn start_failure(certs: &Path) -> String {
    let root = certs.parent().unwrap();
    let mut child = Command::new(quarry_bin())
        .arg("server")
        .arg(root.join("d1"))
        .arg("--address")
        .arg(format!("127.0.0.1:{}", free_port()))
        .env("QUARRY_ROOT_USER", ACCESS_KEY)
        .env("QUARRY_ROOT_PASSWORD", SECRET_KEY)
        .env("HOME", root)
        .env("QUARRY_CERTS_DIR", certs)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn quarry");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success());
            let out = child.wait_with_output().unwrap();
            return format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "quarry started with bad certificates in {}",
                certs.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bad_certificates_stop_the_start_with_the_reason() {
    let root = tempfile::tempdir().unwrap();
    let certs = root.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let ca = Ca::new("start-up CA", Validity::days(3)).unwrap();
    let good = issue(&ca, &["127.0.0.1"], Validity::days(3));

    // A given directory without a certificate.
    let out = start_failure(&certs);
    assert!(out.contains("no certificate in"), "{out}");
    // A certificate without its key.
    write(&certs.join("public.crt"), good.cert.as_bytes(), false).unwrap();
    let out = start_failure(&certs);
    assert!(out.contains("private.key is missing"), "{out}");
    // Another certificate's key.
    let other = issue(&ca, &["127.0.0.1"], Validity::days(3));
    write(&certs.join("private.key"), other.key.as_bytes(), true).unwrap();
    let out = start_failure(&certs);
    assert!(
        out.contains("is not the private key of the certificate"),
        "{out}"
    );
    // Expired.
    let now = SystemTime::now();
    let expired = issue(
        &ca,
        &["127.0.0.1"],
        Validity {
            not_before: now - Duration::from_secs(3 * 86_400),
            not_after: now - Duration::from_secs(3600),
        },
    );
    write_certs_dir(&certs, &expired, &ca.pem().cert).unwrap();
    let out = start_failure(&certs);
    assert!(out.contains("the certificate expired on"), "{out}");
    // Unreadable.
    std::fs::remove_file(certs.join("public.crt")).unwrap();
    std::fs::create_dir(certs.join("public.crt")).unwrap();
    let out = start_failure(&certs);
    assert!(out.contains("cannot read"), "{out}");
}

#[tokio::test]
async fn a_cluster_serves_https_on_every_node() {
    let s = TestServer::start_cluster_https(2, 2, 4).await;
    s.create_bucket("ctls").await;
    let data = random_bytes(1 << 20);
    put_bytes(&s.node_client(0), "ctls", "k", &data).await;
    assert_eq!(get_bytes(&s.node_client(1), "ctls", "k").await, data);
}

#[tokio::test]
async fn a_client_that_stalls_in_its_handshake_is_dropped_at_the_header_timeout() {
    use tokio::io::AsyncReadExt;
    let mut s = TestServer::start_https(1).await;
    s.set_env("QUARRY_HEADER_TIMEOUT", "2s");
    s.restart().await;
    let started = Instant::now();
    let mut silent = tokio::net::TcpStream::connect(("127.0.0.1", s.port()))
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(15), silent.read(&mut buf))
        .await
        .expect("the server kept a silent connection open")
        .unwrap_or(0);
    assert_eq!(n, 0, "the server sent bytes to a client that said nothing");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500),
        "closed after {waited:?}"
    );
    // Control: a client that completes its handshake is served.
    s.client().list_buckets().send().await.unwrap();
}

/// Runs `cmd` for at most `limit` (then kills it): its exit code (`None`: killed) and output.
fn run_for(cmd: &mut Command, limit: Duration) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("out");
    let f = std::fs::File::create(&path).expect("output file");
    let mut child = cmd
        .stdin(std::process::Stdio::null())
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
    (code, std::fs::read_to_string(&path).unwrap_or_default())
}

/// Waits up to `limit` for `check`; how long it took.
async fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if check() {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Whether the node log of `s`'s node `i` holds a line with every one of `words`.
fn logged(s: &TestServer, i: usize, words: &[&str]) -> bool {
    s.node_log_tail(i, 2000)
        .lines()
        .any(|l| words.iter().all(|w| l.contains(w)))
}

/// Four nodes over `https://` drive URLs: S3 and every internode byte over TLS. Objects go in
/// and out through different nodes, a node is killed and comes back and is healed over TLS, and
/// a plain client speaking the internode protocol gets nothing.
#[tokio::test]
async fn a_cluster_over_https_urls_serves_heals_and_refuses_plain_peers() {
    if cluster_mode() {
        // It starts its own cluster: the cluster stage of scripts/test would only repeat it.
        return;
    }
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // 4 nodes x 1 drive: one 2+2 set spanning them, so every object crosses nodes.
    let mut s = TestServer::start_cluster_tls(4, 1, 4).await;
    assert!(s.drive_args().iter().all(|a| a.starts_with("https://")));
    for i in 0..4 {
        assert!(
            logged(&s, i, &["joining the cluster", "internode_tls=true"]),
            "node {i} did not say it runs internode TLS:\n{}",
            s.node_log_tail(i, 30)
        );
    }
    s.create_bucket("itls").await;
    let big = random_bytes(3 << 20);
    put_bytes(&s.node_client(0), "itls", "big", &big).await;
    put_bytes(&s.node_client(1), "itls", "small", b"small body").await;
    assert_eq!(get_bytes(&s.node_client(2), "itls", "big").await, big);
    assert_eq!(
        get_bytes(&s.node_client(3), "itls", "small").await,
        b"small body"
    );
    let listed = s
        .node_client(3)
        .list_objects_v2()
        .bucket("itls")
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["big", "small"]);

    // A plain client on the internode protocol: the connection is closed, nothing answered.
    let mut plain = tokio::net::TcpStream::connect(("127.0.0.1", s.node_port(2)))
        .await
        .unwrap();
    // The node may close (even reset) the connection before all of it is written.
    let _ = plain.write_all(b"QHSK\x02\x01\x00\x10").await;
    let _ = plain.write_all(&[0u8; 16]).await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut got)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a plain internode client got {got:02x?} ({read:?})"
    );
    wait_until(Duration::from_secs(5), || {
        logged(&s, 2, &["internode connection refused", "https://"])
    })
    .await
    .unwrap_or_else(|| panic!("no refusal logged:\n{}", s.node_log_tail(2, 20)));

    // Node 4 goes down; writes go on through the others; it comes back and is healed over TLS.
    s.kill_node(3);
    let mut missed = Vec::new();
    for i in 0..6 {
        let key = format!("during/{i}");
        let body = random_bytes(if i % 2 == 0 { 300 << 10 } else { 100 });
        put_bytes(&s.node_client(i % 3), "itls", &key, &body).await;
        missed.push((key, body));
    }
    let down = s.drive_path(3).to_path_buf();
    assert!(read_meta(&down, "itls", "during/0").is_none());
    s.start_node(3).await;
    let took = wait_until(Duration::from_secs(90), || {
        missed
            .iter()
            .all(|(k, _)| read_meta(&down, "itls", k).is_some())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the returned node was not healed within 90 s; its log:\n{}",
            s.node_log_tail(3, 40)
        )
    });
    eprintln!("healed {} objects over TLS in {took:?}", missed.len());
    // The healed drive serves: with two other nodes down, reads need it.
    s.kill_node(1);
    s.kill_node(2);
    for (k, body) in &missed {
        assert_eq!(&get_bytes(&s.node_client(0), "itls", k).await, body, "{k}");
    }
}

/// A node whose certificate another CA signed gets nothing from its peers: they refuse it at the
/// TLS handshake and say why, it says why it cannot reach them, and the cluster goes on serving.
#[tokio::test]
async fn a_node_with_a_certificate_of_another_ca_is_refused_by_its_peers() {
    if cluster_mode() {
        // It starts its own cluster: the cluster stage of scripts/test would only repeat it.
        return;
    }
    // 2 nodes x 2 drives, one set of 4: either node alone keeps read quorum.
    let mut s = TestServer::start_cluster_tls(2, 2, 4).await;
    s.create_bucket("foreign").await;
    put_bytes(&s.node_client(0), "foreign", "k", b"before").await;
    s.kill_node(1);
    let other = Ca::new("another CA", Validity::days(2)).unwrap();
    let dir = s.root().join("foreign-certs");
    let leaf = issue(&other, &["127.0.0.1", "localhost"], Validity::days(2));
    // It even trusts the cluster's CA: what it lacks is a certificate the cluster trusts.
    write_certs_dir(&dir, &leaf, s.tls().unwrap().ca_pem()).unwrap();
    let port = s.node_port(1);
    let (code, out) = run_for(
        Command::new(quarry_bin())
            .arg("server")
            .args(s.drive_args())
            .args(["--set-size", "4", "--address"])
            .arg(format!("127.0.0.1:{port}"))
            .env("QUARRY_ROOT_USER", ACCESS_KEY)
            .env("QUARRY_ROOT_PASSWORD", SECRET_KEY)
            .env("QUARRY_CERTS_DIR", &dir)
            .env("HOME", s.root())
            .env("RUST_LOG", "info"),
        Duration::from_secs(6),
    );
    assert_eq!(code, None, "it runs on, without its peers:\n{out}");
    assert!(
        out.contains("TLS with") && out.contains("refused this node's certificate"),
        "the refused node must say TLS is why it cannot reach its peers:\n{out}"
    );
    assert!(
        logged(
            &s,
            0,
            &["internode handshake refused", "not signed by a CA"]
        ),
        "node 1 must say why it refused:\n{}",
        s.node_log_tail(0, 30)
    );
    // The cluster still serves, and the node comes back with its own certificate.
    assert_eq!(
        get_bytes(&s.node_client(0), "foreign", "k").await,
        b"before"
    );
    s.start_node(1).await;
    assert_eq!(
        get_bytes(&s.node_client(1), "foreign", "k").await,
        b"before"
    );
}

/// `https://` drive URLs without the cluster's CA in the certificate directory stop the start
/// with the reason; mixed schemes too.
#[test]
fn https_urls_need_a_ca_and_one_scheme() {
    if cluster_mode() {
        // It starts its own cluster: the cluster stage of scripts/test would only repeat it.
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let ca = Ca::new("cluster CA", Validity::days(2)).unwrap();
    let certs = root.path().join("certs");
    write_certs_dir(
        &certs,
        &issue(&ca, &["127.0.0.1"], Validity::days(2)),
        &ca.pem().cert,
    )
    .unwrap();
    std::fs::remove_dir_all(certs.join("CAs")).unwrap();
    let port = free_port();
    let drives = |scheme2: &str| {
        vec![
            format!("https://127.0.0.1:{port}{}/d1", root.path().display()),
            format!(
                "{scheme2}://127.0.0.1:{}{}/d2",
                free_port(),
                root.path().display()
            ),
        ]
    };
    let start = |args: Vec<String>, certs: &Path| {
        run_for(
            Command::new(quarry_bin())
                .arg("server")
                .args(args)
                .arg("--address")
                .arg(format!("127.0.0.1:{port}"))
                .env("QUARRY_ROOT_USER", ACCESS_KEY)
                .env("QUARRY_ROOT_PASSWORD", SECRET_KEY)
                .env("QUARRY_CERTS_DIR", certs)
                .env("HOME", root.path()),
            Duration::from_secs(20),
        )
    };
    let (code, out) = start(drives("https"), &certs);
    assert!(code.is_some_and(|c| c != 0), "{out}");
    assert!(
        out.contains("internode TLS") && out.contains("CAs"),
        "{out}"
    );
    let (code, out) = start(drives("http"), &certs);
    assert!(code.is_some_and(|c| c != 0), "{out}");
    assert!(out.contains("mix http:// and https://"), "{out}");
    let empty = root.path().join("no-certs");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, out) = start(drives("https"), &empty);
    assert!(code.is_some_and(|c| c != 0), "{out}");
    assert!(out.contains("no certificate in"), "{out}");
}
