//! A 2-node cluster whose shared port is flooded by connections that never authenticate (issue
//! 15, findings 4 and 5): connections that send only the handshake magic, and connections that
//! send one byte of it. Established peers keep serving, a restarted node rejoins during the
//! flood, and the flooded node neither holds a descriptor per flood connection nor spends CPU on
//! them. The figures are printed (`--no-capture`); `QUARRY_FLOOD_RATE` (connections/s, default
//! 500) and `QUARRY_FLOOD_SECS` (default 12) change the first flood.

use std::time::{Duration, Instant};

use quarry_integration::*;

/// The pid of the process serving `port`: the one whose command line has `--address
/// 127.0.0.1:<port>`.
fn server_pid(port: u16) -> Option<u32> {
    let want = format!("--address\u{0}127.0.0.1:{port}\u{0}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        String::from_utf8_lossy(&cmdline)
            .contains(&want)
            .then_some(pid)
    })
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// User + system CPU time of `pid`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the command.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn port_of(s: &TestServer, i: usize) -> u16 {
    s.node_endpoint(i)
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Opens `count` connections to `port`, `rate` per second, each writing `first` and nothing
/// more and held until the server closes it or `hold` passes.
fn flood(
    port: u16,
    first: &'static [u8],
    rate: u32,
    count: u32,
    hold: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut held = tokio::task::JoinSet::new();
        let gap = Duration::from_secs(1) / rate.max(1);
        let start = Instant::now();
        for i in 0..count {
            tokio::time::sleep_until((start + gap * i).into()).await;
            held.spawn(async move {
                let opened = Instant::now();
                let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    return;
                };
                let _ = tokio::io::AsyncWriteExt::write_all(&mut s, first).await;
                let mut buf = [0u8; 256];
                while let Ok(Ok(n)) = tokio::time::timeout_at(
                    (opened + hold).into(),
                    tokio::io::AsyncReadExt::read(&mut s, &mut buf),
                )
                .await
                {
                    if n == 0 {
                        break;
                    }
                }
            });
            while held.try_join_next().is_some() {}
        }
        held.join_all().await;
    })
}

async fn readiness(s: &TestServer, i: usize) -> String {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    match http
        .get(format!("{}/health/ready", s.node_endpoint(i)))
        .send()
        .await
    {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => format!("unreachable: {e}"),
    }
}

/// PUT then GET of `n` objects of 256 KiB through `c`: (median, max) of each round trip.
async fn put_get_latency(c: &aws_sdk_s3::Client, tag: &str, n: usize) -> (Duration, Duration) {
    let body = random_bytes(256 << 10);
    let mut took = Vec::new();
    for i in 0..n {
        let key = format!("{tag}/{i}");
        let t = Instant::now();
        put_bytes(c, "flood", &key, &body).await;
        assert_eq!(get_bytes(c, "flood", &key).await, body, "{key}");
        took.push(t.elapsed());
    }
    took.sort();
    (took[took.len() / 2], took[took.len() - 1])
}

#[tokio::test]
async fn a_flooded_cluster_keeps_serving_and_a_restarted_node_rejoins() {
    // 2 nodes x 2 drives, one 2+2 set: a write needs 3 drives, so both nodes.
    let mut s = TestServer::start_cluster(2, 2, 4).await;
    let c1 = s.node_client(1);
    c1.create_bucket().bucket("flood").send().await.unwrap();
    let before = put_get_latency(&c1, "before", 5).await;
    let port0 = port_of(&s, 0);
    let pid0 = server_pid(port0).expect("pid of node 1");

    // Flood 1: connections that send the handshake magic and then nothing, at node 1.
    let rate = env_u32("QUARRY_FLOOD_RATE", 500);
    let secs = env_u32("QUARRY_FLOOD_SECS", 12);
    let flooding = flood(port0, b"QHSK", rate, rate * secs, Duration::from_secs(6));
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The established peer (node 2) still gets PUT and GET through node 1's drives.
    let during = put_get_latency(&c1, "during", 5).await;
    // Node 2 restarts during the flood: it must reconnect to node 1 and reach write quorum.
    s.kill_node(1);
    s.start_node(1).await;
    let restarted = Instant::now();
    let mut ready = readiness(&s, 1).await;
    while !ready.contains("write quorum yes") && t0.elapsed() < Duration::from_secs(secs as u64) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        ready = readiness(&s, 1).await;
    }
    let rejoined = ready
        .contains("write quorum yes")
        .then(|| restarted.elapsed());
    let c1 = s.node_client(1);
    let after_restart = if rejoined.is_some() {
        Some(put_get_latency(&c1, "restarted", 5).await)
    } else {
        None
    };
    let fds_magic = open_fds(pid0);
    flooding.await.unwrap();
    eprintln!(
        "handshake flood at {rate}/s for {secs} s: PUT+GET 256 KiB via node 2 median/max before {before:?}, during {during:?}; restarted node 2 at write quorum after {rejoined:?} (last readiness: {ready}); PUT+GET after its restart {after_restart:?}; node 1 open fds {fds_magic}"
    );
    assert!(
        rejoined.is_some(),
        "the restarted node did not reach write quorum during the flood: {ready}"
    );

    // Flood 2: 1,500 connections that send one byte of the magic and wait, at 1,500/s.
    let fds0 = open_fds(pid0);
    let cpu0 = cpu_time(pid0);
    let flooding = flood(port0, b"Q", 1500, 1500, Duration::from_secs(4));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let fds_partial = open_fds(pid0);
    let partial = put_get_latency(&c1, "partial", 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu = cpu_time(pid0).saturating_sub(cpu0);
    flooding.await.unwrap();
    eprintln!(
        "one-byte flood (1,500 connections): node 1 open fds {fds0} before, {fds_partial} during; node 1 CPU {cpu:?} over ~2 s; PUT+GET via node 2 median/max {partial:?}"
    );
    assert!(
        fds_partial < fds0 + 600,
        "node 1 held {fds_partial} descriptors (from {fds0}) for 1,500 one-byte connections"
    );
    assert!(
        cpu < Duration::from_millis(700),
        "node 1 spent {cpu:?} of CPU on 1,500 idle one-byte connections"
    );
    let ready = readiness(&s, 0).await;
    assert!(ready.contains("write quorum yes"), "{ready}");
}
