//! The TCP data plane on loopback: shard reads of 1 MiB from a peer's drive into pooled buffers,
//! beside a memcpy of the same size.
//!
//! - `dataplane/tcp-read-1MiB`: one `TcpDataPlane::read_shard` of 1 MiB from a real `RpcServer` +
//!   `DriveServer` over a `LocalDrive` on 127.0.0.1 (tmpfs when there is one, so the file is in
//!   the page cache): request frame, the peer's read from the drive into its pooled buffer, the
//!   bulk frame with its keyed-BLAKE3 tag, and the read straight into the requester's pooled
//!   buffer, tag checked. One transfer at a time.
//! - `dataplane/tcp-read-1MiB-x4`: four such reads at once (the default connections per peer).
//! - `dataplane/tls-read-1MiB`, `dataplane/tls-read-1MiB-x4`: the same over internode mutual TLS
//!   (TLS 1.3, AES-GCM from aws-lc-rs; `https://` drive URLs) from a second server, beside them:
//!   what TLS costs the TCP data plane (one TLS encryption at the holder, one decryption and a
//!   copy out of rustls's buffer at the requester).
//! - `dataplane/control-rpc-read-1MiB`: the same read as a control-plane call (`ReadShard` in a
//!   control frame, HMAC-SHA256, read into the connection's buffer), which is how shard bytes
//!   travelled before the data plane: the baseline.
//! - `dataplane/memcpy-1MiB`: copying 1 MiB once, the floor.
//!
//! Throughput is payload bytes per second. Run: `cargo bench -p quarry-benches --bench dataplane`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quarry_disk::{Drive, LocalDrive};
use quarry_net::drive_proto::{self, Request};
use quarry_net::{
    ClusterSecret, DataPlane, DriveServer, Identity, InternodeTls, RpcClient, RpcConfig, RpcServer,
    ShardRange, TcpDataPlane, TcpDataPlaneConfig,
};
use quarry_tls::generate::{write_certs_dir, Ca, Validity};
use uuid::Uuid;

const LEN: usize = 1 << 20;

fn identity(node: &str) -> Identity {
    Identity {
        deployment_id: Uuid::from_u128(0xbe4c),
        node_id: node.into(),
        secret: ClusterSecret::new(b"dataplane-bench-secret").expect("secret"),
    }
}

fn dataplane(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .expect("tempdir");
    let dd = Uuid::new_v4();
    let data: Vec<u8> = (0..LEN).map(|i| (i as u8).wrapping_mul(167)).collect();
    let tls = {
        let ca = Ca::new("bench CA", Validity::days(2)).expect("CA");
        let leaf = ca
            .issue(&["127.0.0.1".to_string()], Validity::days(2))
            .expect("certificate");
        write_certs_dir(&dir.path().join("certs"), &leaf, &ca.pem().cert).expect("certs");
        let set = quarry_tls::certs::load_dir(&dir.path().join("certs"), SystemTime::now())
            .expect("read certs")
            .expect("a certificate");
        InternodeTls::fixed(quarry_tls::internode::configs(&set).expect("internode TLS"))
    };
    let (server, dp, tls_server, tls_dp) = rt.block_on(async {
        let local = LocalDrive::open(dir.path().join("d0"))
            .await
            .expect("drive");
        local.make_volume("b").await.expect("bucket");
        let shard_dir = local.root().join("b/k").join(dd.to_string());
        std::fs::create_dir_all(&shard_dir).expect("dir");
        std::fs::write(shard_dir.join("part.1"), &data).expect("shard");
        let drives: Vec<Arc<dyn Drive>> = vec![Arc::new(local)];
        let handler = Arc::new(DriveServer::new(drives));
        let server = RpcServer::bind(
            "127.0.0.1:0",
            identity("server"),
            RpcConfig::default(),
            handler.clone(),
        )
        .await
        .expect("server");
        let config = TcpDataPlaneConfig::from_rpc(&RpcConfig::default());
        let dp = Arc::new(TcpDataPlane::new(identity("client"), config).expect("plane"));
        let tls_config = RpcConfig {
            tls: Some(tls.clone()),
            ..RpcConfig::default()
        };
        let tls_server = RpcServer::bind(
            "127.0.0.1:0",
            identity("server"),
            tls_config.clone(),
            handler,
        )
        .await
        .expect("TLS server");
        let config = TcpDataPlaneConfig::from_rpc(&tls_config);
        let tls_dp = Arc::new(TcpDataPlane::new(identity("client"), config).expect("plane"));
        (server, dp, tls_server, tls_dp)
    });
    let tls_addr = tls_server.local_addr().to_string();
    let addr = server.local_addr().to_string();
    let range = ShardRange {
        bucket: "b",
        key: "k",
        data_dir: dd,
        part: 1,
        offset: 0,
        len: LEN,
    };
    // Check once that the bytes are right, outside the measurement.
    let got = rt.block_on(dp.read_shard(&addr, 0, &range)).expect("read");
    assert!(got.into_bytes()[..] == data[..]);
    let got = rt
        .block_on(tls_dp.read_shard(&tls_addr, 0, &range))
        .expect("read over TLS");
    assert!(got.into_bytes()[..] == data[..]);

    let mut group = c.benchmark_group("dataplane");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Bytes(LEN as u64));
    group.bench_function("tcp-read-1MiB", |b| {
        b.iter(|| {
            let d = rt.block_on(dp.read_shard(&addr, 0, &range)).expect("read");
            black_box(d.len());
        })
    });
    group.throughput(Throughput::Bytes(4 * LEN as u64));
    group.bench_function("tcp-read-1MiB-x4", |b| {
        b.iter(|| {
            rt.block_on(async {
                let reads = (0..4).map(|_| dp.read_shard(&addr, 0, &range));
                for r in futures_join(reads).await {
                    black_box(r.expect("read").len());
                }
            })
        })
    });
    group.throughput(Throughput::Bytes(LEN as u64));
    group.bench_function("tls-read-1MiB", |b| {
        b.iter(|| {
            let d = rt
                .block_on(tls_dp.read_shard(&tls_addr, 0, &range))
                .expect("read");
            black_box(d.len());
        })
    });
    group.throughput(Throughput::Bytes(4 * LEN as u64));
    group.bench_function("tls-read-1MiB-x4", |b| {
        b.iter(|| {
            rt.block_on(async {
                let reads = (0..4).map(|_| tls_dp.read_shard(&tls_addr, 0, &range));
                for r in futures_join(reads).await {
                    black_box(r.expect("read").len());
                }
            })
        })
    });
    group.throughput(Throughput::Bytes(LEN as u64));
    let client = RpcClient::new(identity("client"), RpcConfig::default());
    let (method, payload) = drive_proto::encode_request(
        0,
        &Request::ReadShard {
            bucket: "b".into(),
            key: "k".into(),
            data_dir: dd,
            part: 1,
            offset: 0,
            len: LEN as u64,
        },
    );
    group.bench_function("control-rpc-read-1MiB", |b| {
        b.iter(|| {
            let answer = rt
                .block_on(client.call(&addr, method, payload.clone()))
                .expect("call");
            black_box(answer.len());
        })
    });
    let src = data.clone();
    let mut dst = vec![0u8; LEN];
    group.bench_function("memcpy-1MiB", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        })
    });
    group.finish();
    drop(server);
    drop(tls_server);
}

/// Runs the futures concurrently on the current task (no extra dependency for join_all).
async fn futures_join<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in futs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

criterion_group!(benches, dataplane);
criterion_main!(benches);
