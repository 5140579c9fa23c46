//! The verbs data plane on Soft-RoCE inside the VM: `scripts/vm/net-verbs-tests.sh` builds this
//! binary on the host, boots the VM (rxe0 on eth0 with 10.55.0.1-.4) and runs it there with
//! `--include-ignored` and QUARRY_VERBS_TEST=1. Elsewhere the tests are reported as ignored, with
//! the reason; run with `--include-ignored` but without the variable, each says it skipped.
//!
//! One process plays two nodes, as two node processes sharing rxe0 would: the holder (a
//! DriveServer over a LocalDrive, with a VerbsResponder on the GID of 10.55.0.2, behind an
//! RpcServer bound to 10.55.0.2) and the requester (a VerbsDataPlane on the GID of 10.55.0.1).

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry_disk::{Drive, LocalDrive};
use quarry_net::verbs_dataplane::{ResponderConfig, VerbsStats};
use quarry_net::{
    ClusterSecret, DataPlane, DataPlaneError, DriveServer, Identity, RpcClient, RpcConfig,
    RpcServer, ShardRange, TcpDataPlane, TcpDataPlaneConfig, VerbsConfig, VerbsDataPlane,
    VerbsDevice, VerbsResponder,
};
use uuid::Uuid;

const SHARD: usize = (1 << 20) + 200 * 1024;

fn enabled(test: &str) -> bool {
    if std::env::var_os("QUARRY_VERBS_TEST").is_some() {
        return true;
    }
    eprintln!(
        "SKIPPED {test}: no RDMA device here; run scripts/vm/net-verbs-tests.sh \
         (runs these tests in the Soft-RoCE VM with QUARRY_VERBS_TEST=1)"
    );
    false
}

fn addrs() -> (IpAddr, IpAddr) {
    let list = std::env::var("QUARRY_VM_ADDRS").unwrap_or_else(|_| "10.55.0.1 10.55.0.2".into());
    let mut it = list
        .split_whitespace()
        .map(|a| a.parse::<IpAddr>().expect("address"));
    let a = it.next().expect("first address");
    let b = it.next().unwrap_or(a);
    (a, b)
}

fn device_name() -> String {
    std::env::var("QUARRY_VERBS_DEVICE").unwrap_or_else(|_| "rxe0".into())
}

fn identity(node: &str) -> Identity {
    Identity {
        deployment_id: Uuid::from_u128(0x7e7b5),
        node_id: node.into(),
        secret: ClusterSecret::new(&b"verbs-data-plane-test-secret"[..]).unwrap(),
    }
}

fn rpc_config() -> RpcConfig {
    RpcConfig {
        call_timeout: Duration::from_secs(20),
        ..RpcConfig::default()
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(131)
                .wrapping_add(seed ^ (i >> 16) as u8)
        })
        .collect()
}

async fn t<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("test step hung")
}

/// The holder node: one LocalDrive with `b/k/<dd>/part.1`, served with verbs.
struct Holder {
    _dir: tempfile::TempDir,
    _server: RpcServer,
    responder: Arc<VerbsResponder>,
    addr: String,
    dd: Uuid,
    data: Vec<u8>,
}

impl Holder {
    async fn start() -> Holder {
        // The host's / is read-only in the VM; /run is a tmpfs there.
        let base = ["/run", "/dev/shm"]
            .into_iter()
            .find(|p| Path::new(p).is_dir() && tempfile::tempdir_in(p).is_ok())
            .map(Path::new);
        let dir = match base {
            Some(b) => tempfile::tempdir_in(b).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        let local = LocalDrive::open(dir.path().join("d0")).await.unwrap();
        local.make_volume("b").await.unwrap();
        let dd = Uuid::new_v4();
        let data = pattern(SHARD, 5);
        let shard_dir = local.root().join("b/k").join(dd.to_string());
        std::fs::create_dir_all(&shard_dir).unwrap();
        std::fs::write(shard_dir.join("part.1"), &data).unwrap();
        let (_, b) = addrs();
        let dev = VerbsDevice::open(Some(&device_name()), Some(b)).expect("holder device");
        let responder = Arc::new(
            VerbsResponder::new(dev, ResponderConfig::default()).expect("holder responder"),
        );
        let drives: Vec<Arc<dyn Drive>> = vec![Arc::new(local)];
        let handler = Arc::new(DriveServer::new(drives).with_verbs(responder.clone()));
        let server = RpcServer::bind(&format!("{b}:0"), identity("holder"), rpc_config(), handler)
            .await
            .expect("bind the holder");
        let addr = server.local_addr().to_string();
        Holder {
            _dir: dir,
            _server: server,
            responder,
            addr,
            dd,
            data,
        }
    }

    fn range(&self, offset: u64, len: usize) -> ShardRange<'_> {
        ShardRange {
            bucket: "b",
            key: "k",
            data_dir: self.dd,
            part: 1,
            offset,
            len,
        }
    }
}

fn requester(fallback: bool) -> (VerbsDataPlane, Arc<TcpDataPlane>) {
    let (a, _) = addrs();
    let rpc = RpcClient::new(identity("requester"), rpc_config());
    let tcp = Arc::new(
        TcpDataPlane::new(
            identity("requester"),
            TcpDataPlaneConfig::from_rpc(&rpc_config()),
        )
        .unwrap(),
    );
    let dev = VerbsDevice::open(Some(&device_name()), Some(a)).expect("requester device");
    let config = VerbsConfig {
        buffers: 16,
        credits: 8,
        fallback,
        fallback_for: Duration::from_secs(60),
        transfer_timeout: Duration::from_secs(20),
        ..VerbsConfig::default()
    };
    let dp = VerbsDataPlane::new(dev, rpc, tcp.clone(), config).expect("verbs data plane");
    (dp, tcp)
}

#[tokio::test]
#[ignore = "needs an RDMA device: run scripts/vm/net-verbs-tests.sh (Soft-RoCE VM)"]
async fn reads_are_byte_exact_over_verbs() {
    if !enabled("reads_are_byte_exact_over_verbs") {
        return;
    }
    let h = Holder::start().await;
    let (dp, tcp) = requester(false);
    let free = dp.registered().free();
    let cases = [
        (0u64, 0usize),
        (7, 1),
        (1000, 100 * 1024),
        (0, (1 << 20) + 1),
        (SHARD as u64 - 10, 10),
    ];
    let mut total = 0u64;
    for (off, len) in cases {
        let got = t(dp.read_shard(&h.addr, 0, &h.range(off, len)))
            .await
            .unwrap_or_else(|e| panic!("{off}+{len}: {e}"));
        assert_eq!(got.len(), len);
        assert!(
            got.buffers().is_empty(),
            "verbs bytes are not pooled TCP buffers"
        );
        let bytes = got.into_bytes();
        assert_eq!(
            &bytes[..],
            &h.data[off as usize..off as usize + len],
            "{off}+{len}"
        );
        total += len as u64;
        drop(bytes);
        assert_eq!(
            dp.registered().free(),
            free,
            "the buffer went back to the free list"
        );
    }
    let v = dp.verbs_stats();
    eprintln!("verbs stats: {v:?}");
    assert_eq!(v.reads, cases.len() as u64);
    assert_eq!(v.bytes, total, "every byte went over verbs");
    assert_eq!((v.tcp_reads, v.fallbacks, v.connects), (0, 0, 1));
    assert_eq!(tcp.stats().bytes_in, 0, "nothing over TCP");
    assert_eq!(h.responder.served_bytes(), total);
    assert_eq!(dp.stats().bytes_in, total);

    // A drive error of the holder comes back as it is (typed), and the connection stays.
    let missing = ShardRange {
        data_dir: Uuid::new_v4(),
        ..h.range(0, 10)
    };
    match t(dp.read_shard(&h.addr, 0, &missing)).await {
        Err(DataPlaneError::Remote { .. }) => {}
        other => panic!("expected the holder's drive error, got {other:?}"),
    }
    assert_eq!(dp.registered().free(), free);
    // Concurrent reads, more than the credits: bounded, all exact.
    let dp = Arc::new(dp);
    let mut tasks = Vec::new();
    for i in 0..24u64 {
        let dp = dp.clone();
        let addr = h.addr.clone();
        let dd = h.dd;
        tasks.push(tokio::spawn(async move {
            let off = i * 40_000;
            let r = ShardRange {
                bucket: "b",
                key: "k",
                data_dir: dd,
                part: 1,
                offset: off,
                len: 64 * 1024,
            };
            (
                off,
                dp.read_shard(&addr, 0, &r).await.map(|d| d.into_bytes()),
            )
        }));
    }
    for task in tasks {
        let (off, got) = t(task).await.unwrap();
        let got = got.unwrap();
        assert_eq!(&got[..], &h.data[off as usize..off as usize + 64 * 1024]);
    }
    assert_eq!(dp.verbs_stats().connects, 1);

    // TCP vs verbs inside the VM (ratios only: Soft-RoCE under TCG is emulated).
    let n = 20;
    let len = 1 << 20;
    let t0 = Instant::now();
    for _ in 0..n {
        let d = t(dp.read_shard(&h.addr, 0, &h.range(0, len)))
            .await
            .unwrap();
        assert_eq!(d.len(), len);
    }
    let verbs = t0.elapsed();
    let t0 = Instant::now();
    for _ in 0..n {
        let d = t(tcp.read_shard(&h.addr, 0, &h.range(0, len)))
            .await
            .unwrap();
        assert_eq!(d.len(), len);
    }
    let tcp_time = t0.elapsed();
    eprintln!(
        "FIGURES: {n} sequential 1 MiB reads: verbs {verbs:?}, tcp {tcp_time:?}, tcp/verbs time ratio {:.2}",
        tcp_time.as_secs_f64() / verbs.as_secs_f64()
    );
}

async fn qp_error_case(fallback: bool) -> (VerbsStats, Vec<Result<(), DataPlaneError>>) {
    let h = Holder::start().await;
    let (dp, _tcp) = requester(fallback);
    let dp = Arc::new(dp);
    // Connected and working.
    let d = t(dp.read_shard(&h.addr, 0, &h.range(0, 10))).await.unwrap();
    assert_eq!(&d.into_bytes()[..], &h.data[..10]);
    let free = dp.registered().free();

    // Reads in flight, then the injected QP error.
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let dp = dp.clone();
        let addr = h.addr.clone();
        let dd = h.dd;
        let want = h.data[(i as usize * 1000)..(i as usize * 1000 + (1 << 20))].to_vec();
        tasks.push(tokio::spawn(async move {
            let r = ShardRange {
                bucket: "b",
                key: "k",
                data_dir: dd,
                part: 1,
                offset: i * 1000,
                len: 1 << 20,
            };
            dp.read_shard(&addr, 0, &r).await.map(|d| {
                assert_eq!(d.into_bytes()[..], want[..], "bytes exact when it succeeds");
            })
        }));
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert!(dp.inject_qp_error(&h.addr), "a connection to break");
    let mut results = Vec::new();
    for task in tasks {
        results.push(t(task).await.unwrap());
    }
    // No buffer lost: every pending one came back once the QP was drained.
    let deadline = Instant::now() + Duration::from_secs(10);
    while dp.registered().free() != free && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dp.registered().free(), free, "buffers back after the drain");
    // The next read works: reconnected (on) or over TCP (auto).
    let d = t(dp.read_shard(&h.addr, 0, &h.range(5, 100 * 1024)))
        .await
        .expect("the read after the QP error");
    assert_eq!(&d.into_bytes()[..], &h.data[5..5 + 100 * 1024]);
    assert!(
        h.responder.connections() <= 1,
        "a reconnect replaces the holder's old connection"
    );
    (dp.verbs_stats(), results)
}

#[tokio::test]
#[ignore = "needs an RDMA device: run scripts/vm/net-verbs-tests.sh (Soft-RoCE VM)"]
async fn qp_error_fails_in_flight_reads_typed_and_reconnects() {
    if !enabled("qp_error_fails_in_flight_reads_typed_and_reconnects") {
        return;
    }
    let (v, results) = qp_error_case(false).await;
    eprintln!("after the QP error (on): {v:?}; results: {results:?}");
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert!(
        failed > 0,
        "some reads were in flight when the QP went to error"
    );
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, DataPlaneError::Verbs { .. }), "typed: {e:?}");
        }
    }
    assert!(v.reconnects >= 1 && v.connects >= 2, "{v:?}");
    assert_eq!(
        (v.tcp_reads, v.fallbacks),
        (0, 0),
        "no fallback with on: {v:?}"
    );
}

#[tokio::test]
#[ignore = "needs an RDMA device: run scripts/vm/net-verbs-tests.sh (Soft-RoCE VM)"]
async fn qp_error_falls_back_to_tcp_in_auto() {
    if !enabled("qp_error_falls_back_to_tcp_in_auto") {
        return;
    }
    let (v, results) = qp_error_case(true).await;
    eprintln!("after the QP error (auto): {v:?}; results: {results:?}");
    assert!(
        results.iter().all(|r| r.is_ok()),
        "auto serves every read: {results:?}"
    );
    assert!(v.fallbacks >= 1 && v.tcp_reads >= 1, "{v:?}");
}

#[tokio::test]
#[ignore = "needs an RDMA device: run scripts/vm/net-verbs-tests.sh (Soft-RoCE VM)"]
async fn a_cancelled_read_loses_no_buffer_and_the_next_read_works() {
    if !enabled("a_cancelled_read_loses_no_buffer_and_the_next_read_works") {
        return;
    }
    let h = Holder::start().await;
    let (dp, _tcp) = requester(false);
    let d = t(dp.read_shard(&h.addr, 0, &h.range(0, 10))).await.unwrap();
    drop(d);
    let free = dp.registered().free();
    // Dropped while the holder may still be writing into the lent buffer.
    let mut cancelled = 0;
    for _ in 0..5 {
        let r = tokio::time::timeout(
            Duration::from_micros(300),
            dp.read_shard(&h.addr, 0, &h.range(0, 1 << 20)),
        )
        .await;
        if r.is_err() {
            cancelled += 1;
        }
        // Whatever happened, the buffer comes back (after the drain, if the QP was given up).
        let deadline = Instant::now() + Duration::from_secs(20);
        while dp.registered().free() != free && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(dp.registered().free(), free, "no buffer lost");
        let d = t(dp.read_shard(&h.addr, 0, &h.range(3, 50_000)))
            .await
            .expect("the next read works");
        assert_eq!(&d.into_bytes()[..], &h.data[3..50_003]);
    }
    let v = dp.verbs_stats();
    eprintln!("cancelled {cancelled} of 5: {v:?}");
    assert!(cancelled > 0, "at least one read was cancelled in flight");
}
