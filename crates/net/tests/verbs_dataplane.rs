//! The verbs data plane on Soft-RoCE inside the VM: `scripts/vm/net-verbs-tests.sh` builds this
//! binary on the host, boots the VM (rxe0 on eth0 with 10.55.0.1-.4) and runs it there with
//! `--include-ignored` and QUARRY_VERBS_TEST=1. Elsewhere the tests are reported as ignored, with
//! the reason; run with `--include-ignored` but without the variable, each says it skipped.
//!
//! One process plays two nodes, as two node processes sharing rxe0 would: the holder (a
//! DriveServer over a LocalDrive, with a VerbsResponder on the GID of 10.55.0.2 and a registered
//! holder pool, behind an RpcServer bound to 10.55.0.2) and the requester (a VerbsDataPlane on
//! the GID of 10.55.0.1, with a registered data pool that its TCP fallback reads into too).

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_buf::{BufPool, BufPoolConfig, DEFAULT_BUF_SIZE};
use quarry_disk::{Drive, LocalDrive};
use quarry_net::verbs_dataplane::{holder_access, requester_access, ResponderConfig, VerbsStats};
use quarry_net::{
    ClusterSecret, DataPlane, DataPlaneError, DriveServer, Identity, RemoteDrive,
    RemoteDriveConfig, RpcClient, RpcConfig, RpcServer, ShardRange, TcpDataPlane,
    TcpDataPlaneConfig, VerbsConfig, VerbsDataPlane, VerbsDevice, VerbsResponder,
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
    server: Option<RpcServer>,
    responder: Arc<VerbsResponder>,
    local: LocalDrive,
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
        let dev = VerbsDevice::open(Some(&device_name()), Some(b), None).expect("holder device");
        let pool = BufPool::registered(
            BufPoolConfig::new(DEFAULT_BUF_SIZE, 8),
            dev.pd(),
            holder_access(),
        )
        .expect("holder pool");
        let responder = Arc::new(
            VerbsResponder::new(dev, pool.clone(), ResponderConfig::default())
                .expect("holder responder"),
        );
        let drives: Vec<Arc<dyn Drive>> = vec![Arc::new(local.clone())];
        let handler = Arc::new(
            DriveServer::new(drives)
                .with_pool(pool)
                .with_verbs(responder.clone()),
        );
        let server = RpcServer::bind(&format!("{b}:0"), identity("holder"), rpc_config(), handler)
            .await
            .expect("bind the holder");
        let addr = server.local_addr().to_string();
        Holder {
            _dir: dir,
            server: Some(server),
            responder,
            local,
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

struct Requester {
    dp: Arc<VerbsDataPlane>,
    tcp: Arc<TcpDataPlane>,
    pool: BufPool,
    rpc: RpcClient,
}

fn requester(fallback: bool, qp_per_peer: usize) -> Requester {
    let (a, _) = addrs();
    let rpc = RpcClient::new(identity("requester"), rpc_config());
    let dev = VerbsDevice::open(Some(&device_name()), Some(a), None).expect("requester device");
    let pool = BufPool::registered(
        BufPoolConfig::new(DEFAULT_BUF_SIZE, 24),
        dev.pd(),
        requester_access(),
    )
    .expect("requester pool");
    let tcp = Arc::new(TcpDataPlane::with_pool(
        identity("requester"),
        TcpDataPlaneConfig::from_rpc(&rpc_config()),
        pool.clone(),
    ));
    let config = VerbsConfig {
        credits: 8,
        qp_per_peer,
        fallback,
        fallback_for: Duration::from_secs(60),
        transfer_timeout: Duration::from_secs(20),
        ..VerbsConfig::default()
    };
    let dp = VerbsDataPlane::new(dev, rpc.clone(), tcp.clone(), pool.clone(), config)
        .expect("verbs data plane");
    Requester {
        dp: Arc::new(dp),
        tcp,
        pool,
        rpc,
    }
}

/// Waits until `pool` has `in_use` buffers out (buffers come back after a drain, asynchronously).
async fn settles(pool: &BufPool, in_use: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while pool.stats().in_use != in_use && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        pool.stats().in_use,
        in_use,
        "no buffer lost: {:?}",
        pool.stats()
    );
    assert_eq!(pool.stats().lost, 0);
}

#[tokio::test]
#[ignore = "needs an RDMA device: run scripts/vm/net-verbs-tests.sh (Soft-RoCE VM)"]
async fn reads_are_byte_exact_over_verbs() {
    if !enabled("reads_are_byte_exact_over_verbs") {
        return;
    }
    let h = Holder::start().await;
    let Requester { dp, tcp, pool, .. } = requester(false, 2);
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
        let bytes = got.into_bytes();
        assert!(
            len == 0 || pool.contains(&bytes),
            "landed in the registered pool"
        );
        assert_eq!(
            &bytes[..],
            &h.data[off as usize..off as usize + len],
            "{off}+{len}"
        );
        total += len as u64;
        drop(bytes);
        assert_eq!(pool.stats().in_use, 0, "the buffer went back to the pool");
    }
    let v = dp.verbs_stats();
    eprintln!("verbs stats: {v:?}");
    assert_eq!(v.reads, cases.len() as u64);
    assert_eq!(v.bytes, total, "every byte went over verbs");
    assert_eq!((v.tcp_reads, v.fallbacks), (0, 0));
    assert!(
        v.connects >= 1 && v.connects <= 2,
        "one per queue pair used: {v:?}"
    );
    assert_eq!(tcp.stats().bytes_in, 0, "nothing over TCP");
    assert_eq!(h.responder.served_bytes(), total);
    assert_eq!(dp.stats().bytes_in, total);

    // A stripe: one registered buffer cut into three slots, each written in place by the holder.
    let slot = 300 * 1024 + 32;
    let stripe = pool.try_get().unwrap();
    let base = stripe.addr();
    let pieces = stripe.split_even(slot, 3).unwrap();
    let h_ref = &h;
    let reads = pieces.into_iter().enumerate().map(|(i, piece)| {
        let dp = dp.clone();
        async move {
            let range = h_ref.range(i as u64 * 200_000, slot);
            dp.read_shard_into(&h_ref.addr, 0, &range, vec![piece])
                .await
        }
    });
    let got = t(futures::future::join_all(reads)).await;
    for (i, g) in got.into_iter().enumerate() {
        let b = g.expect("stripe read").into_bytes();
        assert_eq!(
            b.as_ptr() as usize,
            base + i * slot,
            "slot {i} written in place"
        );
        let off = i * 200_000;
        assert_eq!(&b[..], &h.data[off..off + slot], "slot {i}");
    }
    assert_eq!(
        pool.stats().in_use,
        0,
        "the stripe went home with its last slot"
    );
    // A range over two registered buffers: two pieces, each written in place.
    let two = vec![pool.try_get().unwrap(), pool.try_get().unwrap()];
    let d = t(dp.read_shard_into(&h.addr, 0, &h.range(3, SHARD - 3), two))
        .await
        .unwrap();
    assert_eq!(d.buffers().len(), 2);
    assert_eq!(&d.into_bytes()[..], &h.data[3..]);

    // A drive error of the holder comes back as it is (typed), and the connection stays.
    let missing = ShardRange {
        data_dir: Uuid::new_v4(),
        ..h.range(0, 10)
    };
    match t(dp.read_shard(&h.addr, 0, &missing)).await {
        Err(DataPlaneError::Remote { .. }) => {}
        other => panic!("expected the holder's drive error, got {other:?}"),
    }
    settles(&pool, 0).await;
    // Concurrent reads, more than the credits: bounded, all exact.
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
    assert!(dp.verbs_stats().connects <= 2, "{:?}", dp.verbs_stats());
    let peers = dp.peer_stats();
    let p = peers
        .iter()
        .find(|p| p.backend == "verbs" && p.peer == h.addr)
        .expect("per-peer verbs figures");
    assert!(p.reads >= 24 && p.read_bytes >= total, "{p:?}");
    assert_eq!(p.latency_buckets.last().copied(), Some(p.reads), "{p:?}");

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

/// A registered pooled buffer holding `data`, as `Bytes` (what the PUT path hands a writer).
fn registered_bytes(pool: &BufPool, data: &[u8]) -> Bytes {
    let mut b = pool.try_get().expect("a free buffer");
    assert_eq!(b.extend_from_slice(data), data.len());
    b.into_bytes()
}

fn remote_drive(r: &Requester, h: &Holder) -> RemoteDrive {
    let mut config = RemoteDriveConfig::for_client(&r.rpc);
    config.appends_in_flight = 4;
    RemoteDrive::with_data_plane(
        r.rpc.clone(),
        h.addr.clone(),
        0,
        format!("verbs://{}/d0", h.addr),
        config,
        r.dp.clone(),
    )
}

#[tokio::test]
#[ignore = "needs an RDMA device: run scripts/vm/net-verbs-tests.sh (Soft-RoCE VM)"]
async fn appends_are_fetched_by_the_holder_in_order_byte_exact() {
    if !enabled("appends_are_fetched_by_the_holder_in_order_byte_exact") {
        return;
    }
    let h = Holder::start().await;
    let r = requester(false, 2);
    let drive = remote_drive(&r, &h);
    let (tmp, dd) = (Uuid::new_v4(), Uuid::new_v4());
    let mut w = t(drive.create_shard_writer(tmp, dd, 1)).await.unwrap();
    // Chunks from registered memory (RDMA READ by the holder), with one from plain memory in the
    // middle (it goes over TCP) and one gathered by `write`: the holder writes them in order.
    let chunks: Vec<Vec<u8>> = (0..12u8)
        .map(|i| pattern(if i == 5 { 4000 } else { 300 * 1024 + 32 }, i))
        .collect();
    let mut want = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        want.extend_from_slice(c);
        match i {
            5 => t(w.write_bytes(Bytes::from(c.clone()))).await.unwrap(),
            9 => t(w.write(c)).await.unwrap(),
            _ => t(w.write_bytes(registered_bytes(&r.pool, c)))
                .await
                .unwrap(),
        }
    }
    t(w.finish()).await.expect("finish");
    let file = h
        .local
        .root()
        .join(".quarry.sys/tmp")
        .join(tmp.to_string())
        .join(dd.to_string())
        .join("part.1");
    let got = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert!(got == want, "the shard file holds the appends in order");
    let v = r.dp.verbs_stats();
    eprintln!(
        "after the appends: {v:?}, holder fetched {}",
        h.responder.fetched_bytes()
    );
    assert_eq!(v.appends, 10, "registered chunks went over verbs: {v:?}");
    assert_eq!(
        v.tcp_appends, 2,
        "plain and gathered memory went over TCP: {v:?}"
    );
    assert_eq!(h.responder.fetched_bytes(), 10 * (300 * 1024 + 32));
    assert_eq!(v.append_bytes, h.responder.fetched_bytes());
    settles(&r.pool, 0).await;
    settles(h.responder.pool(), 0).await;

    // A QP error under appends in flight: they fail typed, no buffer is lost on either side,
    // and the writer is broken for good (its finish fails) while a new one works.
    let (tmp, dd) = (Uuid::new_v4(), Uuid::new_v4());
    let mut w = t(drive.create_shard_writer(tmp, dd, 1)).await.unwrap();
    let big = pattern(1 << 20, 9);
    let mut failed = false;
    for i in 0..16 {
        if i == 3 {
            r.dp.inject_qp_error(&h.addr);
        }
        if t(w.write_bytes(registered_bytes(&r.pool, &big)))
            .await
            .is_err()
        {
            failed = true;
            break;
        }
    }
    let finished = t(w.finish()).await;
    assert!(
        failed || finished.is_err(),
        "appends across a QP error do not all succeed"
    );
    settles(&r.pool, 0).await;
    settles(h.responder.pool(), 0).await;
    let mut w = t(drive.create_shard_writer(Uuid::new_v4(), dd, 1))
        .await
        .unwrap();
    t(w.write_bytes(registered_bytes(&r.pool, &big)))
        .await
        .expect("after a reconnect");
    t(w.finish()).await.expect("finish after a reconnect");
    let v = r.dp.verbs_stats();
    assert!(v.reconnects >= 1 && v.qp_errors >= 1, "{v:?}");

    // Appends over verbs vs TCP inside the VM (ratios only: Soft-RoCE under TCG is emulated).
    let chunk = pattern(512 * 1024 + 32, 4);
    let n = 16;
    let mut times = Vec::new();
    for via_tcp in [false, true] {
        let plane: Arc<dyn DataPlane> = if via_tcp { r.tcp.clone() } else { r.dp.clone() };
        let d = RemoteDrive::with_data_plane(
            r.rpc.clone(),
            h.addr.clone(),
            0,
            "x",
            RemoteDriveConfig::for_client(&r.rpc),
            plane,
        );
        let mut w = t(d.create_shard_writer(Uuid::new_v4(), dd, 1))
            .await
            .unwrap();
        let t0 = Instant::now();
        for _ in 0..n {
            t(w.write_bytes(registered_bytes(&r.pool, &chunk)))
                .await
                .unwrap();
        }
        t(w.finish()).await.unwrap();
        times.push(t0.elapsed());
    }
    eprintln!(
        "FIGURES: {n} appends of 512 KiB: verbs {:?}, tcp {:?}, tcp/verbs time ratio {:.2}",
        times[0],
        times[1],
        times[1].as_secs_f64() / times[0].as_secs_f64()
    );
}

async fn qp_error_case(fallback: bool) -> (VerbsStats, Vec<Result<(), DataPlaneError>>) {
    let h = Holder::start().await;
    // One queue pair, so the injected error hits every read in flight.
    let Requester { dp, pool, .. } = requester(fallback, 1);
    // Connected and working.
    let d = t(dp.read_shard(&h.addr, 0, &h.range(0, 10))).await.unwrap();
    assert_eq!(&d.into_bytes()[..], &h.data[..10]);

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
    // No buffer lost, on either side: every pending one came back once the QPs were drained
    // (the holder's writes into the broken QP fail after the transport's retries).
    settles(&pool, 0).await;
    settles(h.responder.pool(), 0).await;
    // The next read works: reconnected (on) or over TCP (auto).
    let d = t(dp.read_shard(&h.addr, 0, &h.range(5, 100 * 1024)))
        .await
        .expect("the read after the QP error");
    assert_eq!(&d.into_bytes()[..], &h.data[5..5 + 100 * 1024]);
    assert!(
        h.responder.connections() <= 2,
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
    assert_eq!(v.fallbacks, 0, "no fallback with on: {v:?}");
    assert_eq!(
        v.tcp_reads, v.busy,
        "over TCP only what a busy holder shed: {v:?}"
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
    let Requester { dp, pool, .. } = requester(false, 1);
    let d = t(dp.read_shard(&h.addr, 0, &h.range(0, 10))).await.unwrap();
    drop(d);
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
        settles(&pool, 0).await;
        let d = t(dp.read_shard(&h.addr, 0, &h.range(3, 50_000)))
            .await
            .expect("the next read works");
        assert_eq!(&d.into_bytes()[..], &h.data[3..50_003]);
    }
    settles(h.responder.pool(), 0).await;
    let v = dp.verbs_stats();
    eprintln!("cancelled {cancelled} of 5: {v:?}");
    assert!(cancelled > 0, "at least one read was cancelled in flight");
}

#[tokio::test]
#[ignore = "needs an RDMA device: run scripts/vm/net-verbs-tests.sh (Soft-RoCE VM)"]
async fn an_unreachable_holder_is_retried_with_back_off_and_fails_fast_meanwhile() {
    if !enabled("an_unreachable_holder_is_retried_with_back_off_and_fails_fast_meanwhile") {
        return;
    }
    let mut h = Holder::start().await;
    let Requester { dp, pool, .. } = requester(false, 1);
    let d = t(dp.read_shard(&h.addr, 0, &h.range(0, 10))).await.unwrap();
    drop(d);
    // The holder goes away: its connections die, new ones cannot be made.
    h.server.take();
    dp.inject_qp_error(&h.addr);
    settles(&pool, 0).await;
    let mut fast = 0;
    let t0 = Instant::now();
    for _ in 0..6 {
        match t(dp.read_shard(&h.addr, 0, &h.range(0, 10))).await {
            Err(DataPlaneError::PeerDown { last_error, .. }) => {
                assert!(
                    last_error.contains("verbs connection set-up failed"),
                    "{last_error}"
                );
                fast += 1
            }
            Err(_) => {}
            Ok(_) => panic!("read from a holder that is gone"),
        }
    }
    let v = dp.verbs_stats();
    eprintln!(
        "holder gone: {fast} fast failures in {:?}: {v:?}",
        t0.elapsed()
    );
    assert!(
        fast >= 1 && v.fast_failures >= 1,
        "back-off fails fast: {v:?}"
    );
    assert_eq!(v.fallbacks, 0, "on never falls back: {v:?}");
}

/// S3 over RDMA to clients, the node's side ([`ClientPlane`]) against a client queue pair made
/// here with quarry-verbs (the client crate does the same): a GET body written from where it is
/// when it lies in the registered data pool and through a staging copy when it does not (the
/// figures say which), byte-exact; a PUT body read block by block; a write cancelled mid-way
/// breaks its connection and hands every staging buffer back (none lost); a connection is its
/// owner's only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an RDMA device: run scripts/vm/net-verbs-tests.sh (Soft-RoCE VM)"]
async fn client_plane_writes_in_place_reads_blocks_and_drains_on_cancel() {
    use futures::StreamExt;
    use quarry_net::verbs_dataplane::{ClientPlane, ClientPlaneConfig, ClientPlaneError};
    use quarry_verbs::{Access, ConnectOptions, Context, QpCaps, QpEndpoint, RemoteBuf};

    if !enabled("client_plane_writes_in_place_reads_blocks_and_drains_on_cancel") {
        return;
    }
    let (a, b) = addrs();
    let dev = VerbsDevice::open(Some(&device_name()), Some(a), None).expect("node device");
    let data = BufPool::registered(
        BufPoolConfig::new(DEFAULT_BUF_SIZE, 8),
        dev.pd(),
        requester_access(),
    )
    .expect("data pool");
    let staging = BufPool::registered(
        BufPoolConfig::new(DEFAULT_BUF_SIZE, 4),
        dev.pd(),
        Access::LOCAL_WRITE,
    )
    .expect("staging pool");
    let plane = ClientPlane::new(
        dev,
        data.clone(),
        staging.clone(),
        ClientPlaneConfig {
            window: 2 << 20,
            op_timeout: Duration::from_secs(10),
            ..ClientPlaneConfig::default()
        },
    );

    // The client: its own context, queue pair and registered buffer.
    let ctx = Context::open(Some(&device_name())).expect("client device");
    let gid = ctx.select_roce_v2_gid(1, Some(b)).expect("client gid");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(16).expect("cq");
    let qp = pd
        .create_rc_qp(&cq, &cq, 1, &gid, QpCaps::default())
        .expect("qp");
    let conn = plane
        .connect("alice", &qp.endpoint().encode())
        .expect("connect");
    let _qp = qp
        .connect(
            &QpEndpoint::decode(&conn.endpoint).unwrap(),
            &ConnectOptions::default(),
        )
        .expect("client connects");
    let mut region = pd
        .alloc_region(
            8 << 20,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .expect("client region")
        .into_buf();
    let remote = region.remote();

    // GET: two pieces from the data pool (sent where they are), one from the heap (copied).
    let mut pieces = Vec::new();
    let mut want = Vec::new();
    for seed in 0..2u8 {
        let mut p = data.get().await;
        let bytes = pattern(DEFAULT_BUF_SIZE - 4096 + seed as usize, seed);
        p.extend_from_slice(&bytes);
        want.extend_from_slice(&bytes);
        pieces.push(p.into_bytes());
    }
    let heap = Bytes::from(pattern(300 * 1024 + 3, 9));
    want.extend_from_slice(&heap);
    pieces.push(heap.clone());
    let stream = futures::stream::iter(pieces.into_iter().map(Ok));
    let out = plane.write(conn.id, remote, stream).await;
    assert_eq!(out.error, None);
    assert_eq!(out.written, want.len() as u64);
    assert_eq!(&region.as_slice()[..want.len()], &want[..], "GET bytes");
    let f = plane.figures();
    assert_eq!(
        f.copied_bytes,
        heap.len() as u64,
        "only the heap piece was copied"
    );
    assert_eq!(f.bytes_out, want.len() as u64);
    settles(&data, 0).await;
    settles(&staging, 0).await;

    // A body larger than the named buffer stops at its end, and says so; the connection stays.
    let small = RemoteBuf {
        len: 1000,
        ..remote
    };
    let out = plane
        .write(
            conn.id,
            small,
            futures::stream::iter([Ok(Bytes::from(vec![1u8; 1001]))]),
        )
        .await;
    assert!(out.error.is_some(), "{out:?}");
    assert!(
        plane.connection(conn.id).is_some(),
        "not a connection failure"
    );

    // PUT: the client's bytes read in blocks.
    let put = pattern((3 << 20) + 5, 4);
    region.as_mut_slice()[..put.len()].copy_from_slice(&put);
    let from = RemoteBuf {
        len: put.len() as u64,
        ..remote
    };
    let got: Vec<Bytes> = plane
        .read(conn.id, from)
        .expect("read")
        .map(|r| r.expect("block"))
        .collect()
        .await;
    assert!(got.iter().all(|b| b.len() <= DEFAULT_BUF_SIZE));
    assert_eq!(got.concat(), put, "PUT bytes");
    assert_eq!(plane.figures().bytes_in, put.len() as u64);
    settles(&staging, 0).await;

    // Only the owner may close it.
    assert!(matches!(
        plane.disconnect("bob", conn.id),
        Err(ClientPlaneError::NotOwner)
    ));

    // A write cancelled mid-way: staging buffers posted, then the future dropped.
    let endless = futures::stream::iter((0..3).map(|i| Ok(Bytes::from(pattern(1 << 20, i)))))
        .chain(futures::stream::pending());
    let cancelled = tokio::time::timeout(
        Duration::from_millis(500),
        plane.write(conn.id, remote, endless),
    )
    .await;
    assert!(cancelled.is_err(), "the write waits for more bytes");
    assert!(
        plane.connection(conn.id).is_none(),
        "a cancelled transfer breaks its connection"
    );
    settles(&staging, 0).await;
    assert_eq!(staging.stats().lost, 0, "{:?}", staging.stats());
    let out = plane
        .write(conn.id, remote, futures::stream::iter([Ok(Bytes::new())]))
        .await;
    assert!(out.error.is_some(), "the broken connection is gone");
}
