//! The TCP data plane between real servers on 127.0.0.1: a DriveServer over LocalDrives in temp
//! dirs behind an RpcServer, and a TcpDataPlane reading from it into pooled buffers. Fake peers
//! (raw sockets that do the real handshake, then misbehave) check that a broken, silent or lying
//! peer gives a typed error in bounded time, never a hang or wrong bytes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quarry_disk::{Drive, DriveError, LocalDrive};
use quarry_net::auth;
use quarry_net::data::{BulkHeader, BulkSender};
use quarry_net::drive_proto::{self, codes};
use quarry_net::wire::{self, Frame, FrameKind, Sealer};
use quarry_net::{
    ClusterSecret, DataPlane, DataPlaneError, DriveServer, Identity, RemoteDrive,
    RemoteDriveConfig, RpcClient, RpcConfig, RpcServer, ShardRange, TcpDataPlane,
    TcpDataPlaneConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

const SECRET: &[u8] = b"data-plane-test-secret";
/// Small buffers, so ranges cross buffer boundaries cheaply.
const BUF: usize = 64 << 10;

fn identity(node: &str) -> Identity {
    identity_with(node, SECRET)
}

fn identity_with(node: &str, secret: &[u8]) -> Identity {
    Identity {
        deployment_id: Uuid::from_u128(0xda7a),
        node_id: node.into(),
        secret: ClusterSecret::new(secret).unwrap(),
    }
}

fn rpc_config() -> RpcConfig {
    RpcConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(1),
        handshake_timeout: Duration::from_secs(1),
        backoff_initial: Duration::from_millis(300),
        backoff_max: Duration::from_secs(1),
        ..RpcConfig::default()
    }
}

fn plane_config() -> TcpDataPlaneConfig {
    TcpDataPlaneConfig {
        connections_per_peer: 2,
        buf_size: BUF,
        buffers: 64,
        ..TcpDataPlaneConfig::from_rpc(&rpc_config())
    }
}

fn plane(config: TcpDataPlaneConfig) -> Arc<TcpDataPlane> {
    Arc::new(TcpDataPlane::new(identity("client"), config).unwrap())
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
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("test step hung")
}

/// A node serving one local drive that holds one shard file `b/k/<dd>/part.1`.
struct Node {
    _dir: tempfile::TempDir,
    local: LocalDrive,
    server: Option<RpcServer>,
    handler: Arc<DriveServer>,
    addr: String,
    dd: Uuid,
    data: Vec<u8>,
}

impl Node {
    async fn new(shard_len: usize) -> Node {
        let dir = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let local = LocalDrive::open(dir.path().join("d0")).await.unwrap();
        local.make_volume("b").await.unwrap();
        let dd = Uuid::new_v4();
        let data = pattern(shard_len, 5);
        let shard_dir = local.root().join("b/k").join(dd.to_string());
        std::fs::create_dir_all(&shard_dir).unwrap();
        std::fs::write(shard_dir.join("part.1"), &data).unwrap();
        let drives: Vec<Arc<dyn Drive>> = vec![Arc::new(local.clone())];
        let handler = Arc::new(DriveServer::new(drives));
        let server = RpcServer::bind(
            "127.0.0.1:0",
            identity("server"),
            rpc_config(),
            handler.clone(),
        )
        .await
        .unwrap();
        let addr = server.local_addr().to_string();
        Node {
            _dir: dir,
            local,
            server: Some(server),
            handler,
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

#[tokio::test]
async fn ranges_at_buffer_boundaries_are_byte_exact() {
    let node = Node::new(5 * BUF + 123).await;
    let dp = plane(plane_config());
    let n = node.data.len();
    let cases = [
        (0usize, 0usize),
        (17, 0),
        (n, 0),
        (0, 1),
        (0, BUF - 1),
        (0, BUF),
        (0, BUF + 1),
        (BUF - 1, 2),
        (BUF, BUF),
        (3, 2 * BUF),
        (7, 3 * BUF + 5),
        (0, n),
        (n - 1, 1),
    ];
    for (off, len) in cases {
        let got = t(dp.read_shard(&node.addr, 0, &node.range(off as u64, len)))
            .await
            .unwrap_or_else(|e| panic!("{off}+{len}: {e}"));
        assert_eq!(got.len(), len);
        assert_eq!(got.buffers().len(), len.div_ceil(BUF).max(1), "{off}+{len}");
        for (i, b) in got.buffers().iter().enumerate() {
            let start = off + i * BUF;
            assert!(
                b[..] == node.data[start..start + b.len()],
                "{off}+{len} buf {i}"
            );
        }
        // One buffer: the Bytes is the pooled buffer itself, not a copy.
        let one = got.is_contiguous();
        let addr = got.buffers().first().map(|b| b.addr());
        let bytes = got.into_bytes();
        assert!(bytes[..] == node.data[off..off + len], "{off}+{len}");
        if one && len > 0 {
            assert_eq!(
                Some(bytes.as_ptr() as usize),
                addr,
                "{off}+{len} was copied"
            );
        }
    }
    // Every buffer went back to the pool, and the connections are kept for the next transfers.
    assert_eq!(dp.pool().stats().in_use, 0);
    assert!(dp.idle_connections(&node.addr) >= 1);
    let s = dp.stats();
    assert_eq!(s.transfers, cases.len() as u64);
    assert_eq!(s.errors, 0);
    assert_eq!(s.bytes_in, cases.iter().map(|c| c.1 as u64).sum::<u64>());
    assert_eq!(s.connects, 1, "one connection reused for sequential reads");
    // The serving side read each piece from the drive into one of its pooled buffers, and every
    // one went back once sent.
    let served = node.handler.data_pool().unwrap().stats();
    let pieces: usize = cases.iter().map(|c| c.1.div_ceil(BUF).max(1)).sum();
    assert_eq!(served.gets, pieces as u64);
    assert_eq!(served.in_use, 0);
}

#[tokio::test]
async fn reads_land_in_the_callers_buffers() {
    let node = Node::new(3 * BUF).await;
    let dp = plane(plane_config());
    let dst = vec![
        dp.pool().get().await,
        dp.pool().get().await,
        dp.pool().get().await,
    ];
    let addrs: Vec<usize> = dst.iter().map(|b| b.addr()).collect();
    let got = t(dp.read_shard_into(&node.addr, 0, &node.range(10, BUF + 7), dst))
        .await
        .unwrap();
    // Two buffers needed: they are the caller's first two, in order; the third went back.
    let got_addrs: Vec<usize> = got.buffers().iter().map(|b| b.addr()).collect();
    assert_eq!(got_addrs, addrs[..2]);
    assert_eq!(dp.pool().stats().in_use, 2);
    assert!(got.into_bytes()[..] == node.data[10..10 + BUF + 7]);
    // Buffers that cannot hold the range are refused before anything is sent.
    let small = vec![dp.pool().get().await];
    assert!(matches!(
        t(dp.read_shard_into(&node.addr, 0, &node.range(0, BUF + 1), small)).await,
        Err(DataPlaneError::TooLarge { .. })
    ));
}

#[tokio::test]
async fn many_concurrent_reads_share_a_bounded_set_of_connections() {
    let node = Arc::new(Node::new(8 * BUF).await);
    let dp = plane(plane_config());
    let mut tasks = Vec::new();
    for i in 0..40usize {
        let (node, dp) = (node.clone(), dp.clone());
        tasks.push(tokio::spawn(async move {
            let off = (i * 7919) % (6 * BUF);
            let len = (i * 104_729) % (2 * BUF) + 1;
            let got = dp
                .read_shard(&node.addr, 0, &node.range(off as u64, len))
                .await
                .unwrap();
            assert!(got.into_bytes()[..] == node.data[off..off + len]);
        }));
    }
    for task in tasks {
        t(task).await.unwrap();
    }
    assert!(dp.stats().connects <= 2, "{:?}", dp.stats());
    assert!(dp.idle_connections(&node.addr) <= 2);
    assert_eq!(dp.pool().stats().in_use, 0);
}

#[tokio::test]
async fn drive_errors_come_back_with_their_codes_and_keep_the_connection() {
    let node = Node::new(1000).await;
    let dp = plane(plane_config());
    let code = |r: Result<_, DataPlaneError>| match r {
        Err(DataPlaneError::Remote { code, .. }) => code,
        other => panic!("{other:?}"),
    };
    let missing = ShardRange {
        data_dir: Uuid::new_v4(),
        ..node.range(0, 1)
    };
    assert_eq!(
        code(t(dp.read_shard(&node.addr, 0, &missing)).await),
        codes::FILE_NOT_FOUND
    );
    assert_eq!(
        code(t(dp.read_shard(&node.addr, 0, &node.range(990, 11))).await),
        codes::TRUNCATED
    );
    // Truncated in the second of several pieces: still one clean error.
    assert_eq!(
        code(t(dp.read_shard(&node.addr, 0, &node.range(0, 2 * BUF))).await),
        codes::TRUNCATED
    );
    assert_eq!(
        code(t(dp.read_shard(&node.addr, 3, &node.range(0, 1))).await),
        codes::NO_SUCH_DRIVE
    );
    let bad_name = ShardRange {
        key: "../../etc/passwd",
        ..node.range(0, 1)
    };
    assert_eq!(
        code(t(dp.read_shard(&node.addr, 0, &bad_name)).await),
        codes::INVALID_NAME
    );
    // Every error was a clean answer: the one connection is still in use.
    let got = t(dp.read_shard(&node.addr, 0, &node.range(0, 1000)))
        .await
        .unwrap();
    assert!(got.into_bytes()[..] == node.data[..]);
    assert_eq!(dp.stats().connects, 1);
    assert_eq!(dp.stats().errors, 5);
    assert_eq!(dp.pool().stats().in_use, 0);
}

#[tokio::test]
async fn remote_drive_reads_through_the_data_plane_and_maps_its_errors() {
    let node = Node::new(3 * BUF + 1).await;
    let client = RpcClient::new(identity("client"), rpc_config());
    let dp = plane(plane_config());
    let r = RemoteDrive::with_data_plane(
        client.clone(),
        node.addr.clone(),
        0,
        "http://x/d0",
        RemoteDriveConfig::for_client(&client),
        dp.clone(),
    );
    let b = t(r.read_shard("b", "k", node.dd, 1, 5, BUF)).await.unwrap();
    assert!(b[..] == node.data[5..5 + BUF]);
    // The drive's answer is the pooled buffer the bytes landed in, not a copy of it.
    let p = b.as_ptr() as usize;
    assert!(
        dp.pool()
            .slabs()
            .iter()
            .any(|s| p >= s.addr && p < s.addr + s.len),
        "read_shard copied out of the pool"
    );
    assert_eq!(dp.pool().stats().in_use, 1);
    drop(b);
    assert_eq!(dp.pool().stats().in_use, 0);
    let b = t(r.read_shard("b", "k", node.dd, 1, 0, node.data.len()))
        .await
        .unwrap();
    assert!(b[..] == node.data[..]);
    assert_eq!(dp.stats().transfers, 2);
    // The control RPC carried no shard read.
    assert_eq!(client.stats().calls, 0);
    match t(r.read_shard("b", "k", node.dd, 1, 1, 3 * BUF + 1)).await {
        Err(DriveError::Truncated {
            offset: 1,
            wanted,
            len,
        }) => {
            assert_eq!(wanted, 3 * BUF + 1);
            assert_eq!(len, node.data.len() as u64);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        t(r.read_shard("b", "k", Uuid::new_v4(), 1, 0, 1)).await,
        Err(DriveError::FileNotFound)
    ));
    // The default constructor uses the client's shared data plane.
    let d = RemoteDrive::new(client.clone(), node.addr.clone(), 0, "http://x/d0");
    let b = t(d.read_shard("b", "k", node.dd, 1, 0, 10)).await.unwrap();
    assert_eq!(&b[..], &node.data[..10]);
    assert!(Arc::ptr_eq(d.data_plane(), &client.data_plane()));
    assert_eq!(client.data_plane().stats().transfers, 1);
    drop(node.local.clone());
}

#[tokio::test]
async fn a_dead_peer_fails_fast_and_a_restarted_one_is_reconnected() {
    let mut node = Node::new(1000).await;
    let dp = plane(plane_config());
    t(dp.read_shard(&node.addr, 0, &node.range(0, 10)))
        .await
        .unwrap();
    assert_eq!(dp.idle_connections(&node.addr), 1);
    node.server.take().unwrap().shutdown().await;
    // The idle connection is dead; the retry on a fresh one is refused: unreachable, fast.
    let start = Instant::now();
    let e = t(dp.read_shard(&node.addr, 0, &node.range(0, 10)))
        .await
        .unwrap_err();
    assert!(e.is_unreachable(), "{e:?}");
    assert!(matches!(e, DataPlaneError::Connect { .. }), "{e:?}");
    // Then the back-off answers at once.
    let e = t(dp.read_shard(&node.addr, 0, &node.range(0, 10)))
        .await
        .unwrap_err();
    assert!(matches!(e, DataPlaneError::PeerDown { .. }), "{e:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(dp.stats().retries, 1);

    // The peer comes back on the same address: after the back-off, reads work again.
    let drives: Vec<Arc<dyn Drive>> = vec![Arc::new(node.local.clone())];
    let server = RpcServer::bind(
        node.addr.as_str(),
        identity("server"),
        rpc_config(),
        Arc::new(DriveServer::new(drives)),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let got = t(dp.read_shard(&node.addr, 0, &node.range(3, 10)))
        .await
        .unwrap();
    assert_eq!(&got.into_bytes()[..], &node.data[3..13]);
    drop(server);
}

/// A fake peer: accepts one connection at a time, does the real handshake, reads one request
/// frame, and hands the stream and the request to `behave`.
async fn fake_peer<F, Fut>(behave: F) -> String
where
    F: Fn(TcpStream, Sealer, BulkSender, Frame) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let behave = Arc::new(behave);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let behave = behave.clone();
            tokio::spawn(async move {
                let id = identity("fake");
                let Ok(session) =
                    auth::server_handshake(&mut s, &id, Duration::from_secs(60)).await
                else {
                    return;
                };
                let mut opener = session.opener(1 << 20);
                let mut buf = BytesMut::new();
                let frame = loop {
                    match opener.open(&mut buf).unwrap() {
                        wire::Decoded::Frame(f) => break f,
                        wire::Decoded::Need(_) => {
                            if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                                return;
                            }
                        }
                    }
                };
                behave(s, session.sealer(1 << 20), session.bulk_sender(), frame).await;
            });
        }
    });
    addr
}

fn range(len: usize) -> ShardRange<'static> {
    ShardRange {
        bucket: "b",
        key: "k",
        data_dir: Uuid::nil(),
        part: 1,
        offset: 0,
        len,
    }
}

async fn send_head(s: &mut TcpStream, sealer: &mut Sealer, req: &Frame, len: u64) {
    let head = Frame {
        kind: FrameKind::Response,
        flags: wire::FLAG_BULK,
        request_id: req.request_id,
        method: req.method,
        payload: Bytes::copy_from_slice(&len.to_be_bytes()),
    };
    let mut out = BytesMut::new();
    sealer.seal_into(&head, &mut out).unwrap();
    s.write_all(&out).await.unwrap();
}

#[tokio::test]
async fn a_peer_that_drops_mid_transfer_is_a_typed_error_not_a_hang() {
    let addr = fake_peer(|mut s, mut sealer, _bulk, req| async move {
        // The request is a bulk read of the drive protocol.
        assert_eq!(req.flags, wire::FLAG_BULK);
        assert_eq!(req.method, drive_proto::Method::ReadShardData as u16);
        send_head(&mut s, &mut sealer, &req, 1000).await;
        let h = BulkHeader {
            transfer_id: req.request_id,
            len: 1000,
            frame: false,
        };
        s.write_all(&h.encode()).await.unwrap();
        s.write_all(&[7u8; 400]).await.unwrap();
        // ... and the peer dies.
    })
    .await;
    let dp = plane(plane_config());
    let start = Instant::now();
    let e = t(dp.read_shard(&addr, 0, &range(1000))).await.unwrap_err();
    assert!(matches!(e, DataPlaneError::ConnectionLost { .. }), "{e:?}");
    assert!(e.is_unreachable());
    assert!(start.elapsed() < Duration::from_secs(2));
    // The broken connection is not kept, and the buffer went back.
    assert_eq!(dp.idle_connections(&addr), 0);
    assert_eq!(dp.pool().stats().in_use, 0);
}

#[tokio::test]
async fn a_silent_peer_times_out() {
    let addr = fake_peer(|s, _sealer, _bulk, _req| async move {
        // Holds the connection open and never answers.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    })
    .await;
    let dp = plane(TcpDataPlaneConfig {
        transfer_timeout: Duration::from_millis(300),
        ..plane_config()
    });
    let start = Instant::now();
    let e = t(dp.read_shard(&addr, 0, &range(10))).await.unwrap_err();
    assert!(matches!(e, DataPlaneError::Timeout { .. }), "{e:?}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(dp.stats().timeouts, 1);
    assert_eq!(dp.idle_connections(&addr), 0);
    assert_eq!(dp.pool().stats().in_use, 0);
}

#[tokio::test]
async fn forged_or_lying_answers_are_refused() {
    // A payload tagged with another key.
    let addr = fake_peer(|mut s, mut sealer, _bulk, req| async move {
        send_head(&mut s, &mut sealer, &req, 3).await;
        BulkSender::new([9; 32])
            .send(&mut s, req.request_id, b"abc")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    let dp = plane(plane_config());
    match t(dp.read_shard(&addr, 0, &range(3))).await {
        Err(DataPlaneError::Bulk {
            source: quarry_net::data::DataError::BadTag,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(dp.idle_connections(&addr), 0);

    // A peer announcing more bytes than were asked for: refused before any payload is read.
    let addr = fake_peer(|mut s, mut sealer, mut bulk, req| async move {
        send_head(&mut s, &mut sealer, &req, 1 << 30).await;
        let _ = bulk.send(&mut s, req.request_id, b"x").await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    assert!(matches!(
        t(dp.read_shard(&addr, 0, &range(3))).await,
        Err(DataPlaneError::Protocol { .. })
    ));

    // A bulk frame for another transfer.
    let addr = fake_peer(|mut s, mut sealer, mut bulk, req| async move {
        send_head(&mut s, &mut sealer, &req, 3).await;
        bulk.send(&mut s, req.request_id + 1, b"abc").await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    })
    .await;
    assert!(matches!(
        t(dp.read_shard(&addr, 0, &range(3))).await,
        Err(DataPlaneError::Bulk {
            source: quarry_net::data::DataError::WrongTransfer { .. },
            ..
        })
    ));
    assert_eq!(dp.pool().stats().in_use, 0);
}

#[tokio::test]
async fn a_frame_read_is_answered_with_its_hash_tagged_and_lands_in_place() {
    // Through a real holder: the frame's bytes, in the caller's buffer.
    let node = Node::new(3000).await;
    let dp = plane(plane_config());
    let dst = dp.pool().get().await;
    let addr = dst.addr();
    let mut dst = dst;
    dst.set_len(1000);
    let got = t(dp.read_frame_into(&node.addr, 0, &node.range(100, 1000), dst))
        .await
        .unwrap();
    assert_eq!(got.buffers()[0].addr(), addr);
    assert!(got.into_bytes()[..] == node.data[100..1100]);
    // A drive error comes back as for any read, and the connection stays.
    let mut dst = dp.pool().get().await;
    dst.set_len(10);
    assert!(matches!(
        t(dp.read_frame_into(&node.addr, 0, &node.range(2995, 10), dst)).await,
        Err(DataPlaneError::Remote { .. })
    ));
    assert_eq!(dp.idle_connections(&node.addr), 1);
    // A frame shorter than a hash is refused by the holder (its tag would cover nothing).
    let mut dst = dp.pool().get().await;
    dst.set_len(31);
    assert!(matches!(
        t(dp.read_frame_into(&node.addr, 0, &node.range(0, 31), dst)).await,
        Err(DataPlaneError::Remote { .. })
    ));

    let frame = pattern(1000, 3);
    let fake = |sealed: Vec<u8>, sent: Vec<u8>, as_frame: bool| {
        fake_peer(move |mut s, mut sealer, mut bulk, req| {
            let (sealed, sent) = (sealed.clone(), sent.clone());
            async move {
                // Asked for as a frame answer.
                assert_eq!(req.flags, wire::FLAG_BULK | wire::FLAG_BULK_FRAME);
                send_head(&mut s, &mut sealer, &req, sent.len() as u64).await;
                let (header, tag) = bulk.seal_as(req.request_id, &sealed, as_frame).unwrap();
                s.write_all(&header).await.unwrap();
                s.write_all(&sent).await.unwrap();
                s.write_all(&tag).await.unwrap();
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
    };
    let read = |dp: Arc<TcpDataPlane>, addr: String| async move {
        let mut dst = dp.pool().get().await;
        dst.set_len(1000);
        t(dp.read_frame_into(&addr, 0, &range(1000), dst))
            .await
            .map(|d| d.into_bytes())
    };
    // A chunk changed on the way passes the tag (the caller's bitrot check is what refuses it).
    let mut changed = frame.clone();
    changed[500] ^= 1;
    let addr = fake(frame.clone(), changed.clone(), true).await;
    assert_eq!(read(dp.clone(), addr).await.unwrap()[..], changed[..]);
    // The hash changed on the way: the tag refuses it.
    let mut changed = frame.clone();
    changed[0] ^= 1;
    let addr = fake(frame.clone(), changed, true).await;
    assert!(matches!(
        read(dp.clone(), addr).await,
        Err(DataPlaneError::Bulk {
            source: quarry_net::data::DataError::BadTag,
            ..
        })
    ));
    // An answer of the other kind than asked for is refused.
    let addr = fake(frame.clone(), frame.clone(), false).await;
    assert!(matches!(
        read(dp.clone(), addr).await,
        Err(DataPlaneError::Bulk {
            source: quarry_net::data::DataError::WrongCover { .. },
            ..
        })
    ));
    assert_eq!(dp.pool().stats().in_use, 0);
}

/// Whether `len` bytes at `offset` of `path` are in the page cache, as the holder probes it: a
/// read that may not wait for the disk (`RWF_NOWAIT`), of every page.
fn cached(path: &Path, offset: u64, len: usize) -> bool {
    let f = std::fs::File::open(path).unwrap();
    let mut byte = [0u8; 1];
    (0..len).step_by(4096).chain([len - 1]).all(|at| {
        let mut bufs = [std::io::IoSliceMut::new(&mut byte)];
        rustix::io::preadv2(
            &f,
            &mut bufs,
            offset + at as u64,
            rustix::io::ReadWriteFlags::NOWAIT,
        ) == Ok(1)
    })
}

#[tokio::test]
async fn a_frame_read_is_sent_from_the_page_cache_or_else_read() {
    // On a disk-backed file system (the temp dir), where pages can be dropped from the cache.
    let dir = tempfile::tempdir().unwrap();
    let local = LocalDrive::open(dir.path().join("d0")).await.unwrap();
    local.make_volume("b").await.unwrap();
    let dd = Uuid::new_v4();
    let data = pattern(3 * BUF, 9);
    let part = local.root().join("b/k").join(dd.to_string()).join("part.1");
    std::fs::create_dir_all(part.parent().unwrap()).unwrap();
    std::fs::write(&part, &data).unwrap();
    let drives: Vec<Arc<dyn Drive>> = vec![Arc::new(local.clone())];
    let server = |config: RpcConfig| {
        let drives = drives.clone();
        async move {
            let s = RpcServer::bind(
                "127.0.0.1:0",
                identity("server"),
                config,
                Arc::new(DriveServer::new(drives)),
            )
            .await
            .unwrap();
            let addr = s.local_addr().to_string();
            (s, addr)
        }
    };
    let (srv, addr) = server(rpc_config()).await;
    let dp = plane(plane_config());
    let range = |offset: u64, len: usize| ShardRange {
        bucket: "b",
        key: "k",
        data_dir: dd,
        part: 1,
        offset,
        len,
    };
    let read = |addr: String, offset: u64, len: usize| {
        let dp = dp.clone();
        async move {
            let mut dst = dp.pool().get().await;
            dst.set_len(len);
            // A copy: the pooled buffer goes back to the pool.
            t(dp.read_frame_into(&addr, 0, &range(offset, len), dst))
                .await
                .unwrap()
                .into_bytes()
                .to_vec()
        }
    };

    // Cached (just written): the chunk is sent from the file, byte exact, into the caller's buffer.
    assert!(cached(&part, 0, data.len()));
    for (offset, len) in [(0, BUF), (BUF as u64 + 5, BUF - 5), (17, 32), (100, 33)] {
        let got = read(addr.clone(), offset, len).await;
        assert!(
            got[..] == data[offset as usize..offset as usize + len],
            "{offset}+{len}"
        );
    }
    let stats = srv.stats();
    assert_eq!(stats.file_answers, 4);
    assert_eq!(stats.file_answer_bytes, (BUF + BUF - 5 + 32 + 33) as u64);
    // Requests the file cannot answer are answered as before: the file is too short.
    let mut dst = dp.pool().get().await;
    dst.set_len(100);
    assert!(matches!(
        t(dp.read_frame_into(&addr, 0, &range(3 * BUF as u64 - 50, 100), dst)).await,
        Err(DataPlaneError::Remote { .. })
    ));
    assert_eq!(srv.stats().file_answers, 4);

    // Not in the page cache: read (sending it would wait on the disk in the event loop), which
    // brings it into the cache, so the next read of it is sent from the file again.
    let f = std::fs::File::open(&part).unwrap();
    f.sync_all().unwrap();
    let tail = (2 * BUF) as u64;
    for _ in 0..50 {
        rustix::fs::fadvise(
            &f,
            tail,
            std::num::NonZeroU64::new(BUF as u64),
            rustix::fs::Advice::DontNeed,
        )
        .unwrap();
        if !cached(&part, tail, BUF) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!cached(&part, tail, BUF), "the kernel kept the pages");
    let got = read(addr.clone(), tail, BUF).await;
    assert!(got[..] == data[2 * BUF..], "bytes read");
    assert_eq!(
        srv.stats().file_answers,
        4,
        "sent from a file not in the cache"
    );
    assert!(cached(&part, tail, BUF));
    let got = read(addr.clone(), tail, BUF).await;
    assert!(got[..] == data[2 * BUF..]);
    assert_eq!(srv.stats().file_answers, 5);

    // Off in the configuration: read, byte exact.
    let (srv2, addr2) = server(RpcConfig {
        sendfile: false,
        ..rpc_config()
    })
    .await;
    let got = read(addr2, 0, BUF).await;
    assert!(got[..] == data[..BUF]);
    assert_eq!(srv2.stats().file_answers, 0);
    assert_eq!(dp.stats().errors, 1, "only the read past the end failed");
    assert_eq!(dp.pool().stats().in_use, 0);
}

#[tokio::test]
async fn wrong_secret_and_forged_requests_are_refused_by_the_server() {
    let node = Node::new(1000).await;
    // A data plane that does not know the cluster secret gets nothing.
    let intruder = Arc::new(
        TcpDataPlane::new(
            identity_with("intruder", b"not-the-cluster-secret"),
            plane_config(),
        )
        .unwrap(),
    );
    let e = t(intruder.read_shard(&node.addr, 0, &node.range(0, 10)))
        .await
        .unwrap_err();
    assert!(matches!(e, DataPlaneError::Handshake { .. }), "{e:?}");

    // A request whose tag is not made with the session key: the server closes the connection
    // and serves nothing.
    let server = node.server.as_ref().unwrap();
    let before = server.stats().protocol_errors;
    let mut s = TcpStream::connect(&node.addr).await.unwrap();
    let _session = auth::client_handshake(&mut s, &identity("client"), Duration::from_secs(60))
        .await
        .unwrap();
    let (method, payload) = drive_proto::encode_request(
        0,
        &drive_proto::Request::ReadShardData {
            bucket: "b".into(),
            key: "k".into(),
            data_dir: node.dd,
            part: 1,
            offset: 0,
            len: 10,
        },
    );
    let mut forged = Sealer::new(&[1u8; 32], 1 << 20);
    let mut out = BytesMut::new();
    forged
        .seal_into(
            &Frame {
                kind: FrameKind::Request,
                flags: wire::FLAG_BULK,
                request_id: 1,
                method,
                payload,
            },
            &mut out,
        )
        .unwrap();
    s.write_all(&out).await.unwrap();
    let mut rest = Vec::new();
    let n = t(s.read_to_end(&mut rest)).await.unwrap_or(0);
    assert_eq!(n, 0, "the server answered a forged request");
    assert_eq!(server.stats().protocol_errors, before + 1);
}

#[tokio::test]
async fn shard_appends_go_through_the_data_plane_byte_exact() {
    let node = Node::new(10).await;
    let client = RpcClient::new(identity("client"), rpc_config());
    let dp = plane(plane_config());
    let r = RemoteDrive::with_data_plane(
        client.clone(),
        node.addr.clone(),
        0,
        "http://x/d0",
        RemoteDriveConfig {
            append_chunk: BUF,
            ..RemoteDriveConfig::for_client(&client)
        },
        dp.clone(),
    );
    let (tmp_id, dd) = (Uuid::new_v4(), Uuid::new_v4());
    let data = pattern(5 * BUF + 77, 9);
    let mut w = t(r.create_shard_writer(tmp_id, dd, 1)).await.unwrap();
    for piece in data.chunks(BUF / 3 + 1) {
        t(w.write(piece)).await.unwrap();
    }
    t(w.finish()).await.unwrap();
    let on_disk = std::fs::read(
        node.local
            .root()
            .join(".quarry.sys/tmp")
            .join(tmp_id.to_string())
            .join(dd.to_string())
            .join("part.1"),
    )
    .unwrap();
    assert!(on_disk == data, "shard file differs from what was written");
    let s = dp.stats();
    assert_eq!(s.bytes_out, data.len() as u64);
    assert_eq!(s.transfers, data.len().div_ceil(BUF) as u64);
    assert_eq!(s.errors, 0);
    // Only opening and finishing the writer went over the control RPC.
    assert_eq!(client.stats().calls, 2);
    assert_eq!(node.handler.open_writers(), 0);

    // An append to a writer that does not exist is a clean error: the connection stays.
    let connects = dp.stats().connects;
    match t(dp.append_shard(&node.addr, 0, Uuid::new_v4(), 0, Bytes::from_static(b"x"))).await {
        Err(DataPlaneError::Remote { code, .. }) => assert_eq!(code, codes::NO_SUCH_WRITER),
        other => panic!("{other:?}"),
    }
    assert_eq!(dp.stats().connects, connects);
}

#[tokio::test]
async fn an_oversized_append_is_refused_without_a_hang() {
    let node = Node::new(10).await;
    let dp = plane(plane_config());
    // Larger than the server accepts for a request body (its bulk buffers and its frame size).
    let big = Bytes::from(vec![1u8; 5 << 20]);
    let e = t(dp.append_shard(&node.addr, 0, Uuid::new_v4(), 0, big))
        .await
        .unwrap_err();
    assert!(matches!(e, DataPlaneError::ConnectionLost { .. }), "{e:?}");
    assert_eq!(node.server.as_ref().unwrap().stats().protocol_errors, 1);
    // The node still serves.
    let got = t(dp.read_shard(&node.addr, 0, &node.range(0, 10)))
        .await
        .unwrap();
    assert_eq!(&got.into_bytes()[..], &node.data[..]);
}

#[tokio::test]
async fn a_read_of_many_buffers_is_pipelined_in_windows_and_exact() {
    // 40 pieces: more than one window of requests.
    let node = Node::new(40 * BUF + 3).await;
    let dp = plane(plane_config());
    let got = t(dp.read_shard(&node.addr, 0, &node.range(1, 40 * BUF + 2)))
        .await
        .unwrap();
    assert_eq!(got.buffers().len(), 41);
    assert!(got.into_bytes()[..] == node.data[1..]);
    assert_eq!(dp.stats().connects, 1);
    assert_eq!(dp.pool().stats().in_use, 0);
}

/// Per-peer figures move with reads and appends, pooled pieces of one buffer are read into in
/// place, a whole chunk written with `write_bytes` is one append of the caller's bytes, and a
/// reset drops the idle connections (the next transfer reconnects).
#[tokio::test]
async fn per_peer_figures_stripe_pieces_direct_appends_and_reset() {
    let node = Node::new(3 * BUF).await;
    let client = RpcClient::new(identity("client"), rpc_config());
    let dp = plane(plane_config());
    // A stripe: one pooled buffer cut into two pieces, each the target of one read.
    let stripe = dp.pool().try_get().unwrap();
    let base = stripe.addr();
    let pieces = stripe.split_even(BUF / 2, 2).unwrap();
    let mut got = Vec::new();
    for (i, p) in pieces.into_iter().enumerate() {
        let r = node.range((i * 1000) as u64, BUF / 2);
        got.push(
            t(dp.read_shard_into(&node.addr, 0, &r, vec![p]))
                .await
                .unwrap(),
        );
    }
    for (i, d) in got.into_iter().enumerate() {
        let b = d.into_bytes();
        assert_eq!(
            b.as_ptr() as usize,
            base + i * (BUF / 2),
            "piece {i} read in place"
        );
        assert_eq!(&b[..], &node.data[i * 1000..i * 1000 + BUF / 2]);
    }
    assert_eq!(dp.pool().stats().in_use, 0, "the stripe went home");

    let r = RemoteDrive::with_data_plane(
        client.clone(),
        node.addr.clone(),
        0,
        "http://x/d0",
        RemoteDriveConfig {
            append_chunk: BUF,
            ..RemoteDriveConfig::for_client(&client)
        },
        dp.clone(),
    );
    let (tmp_id, dd) = (Uuid::new_v4(), Uuid::new_v4());
    let mut w = t(r.create_shard_writer(tmp_id, dd, 1)).await.unwrap();
    let chunk = Bytes::from(pattern(BUF - 100, 3));
    t(w.write(b"gathered first")).await.unwrap();
    t(w.write_bytes(chunk.clone())).await.unwrap();
    t(w.finish()).await.unwrap();
    let on_disk = std::fs::read(
        node.local
            .root()
            .join(".quarry.sys/tmp")
            .join(tmp_id.to_string())
            .join(dd.to_string())
            .join("part.1"),
    )
    .unwrap();
    let mut want = b"gathered first".to_vec();
    want.extend_from_slice(&chunk);
    assert!(on_disk == want, "gathered bytes, then the chunk, in order");

    let peers = dp.peer_stats();
    assert_eq!(peers.len(), 1, "{peers:?}");
    let p = &peers[0];
    assert_eq!((p.backend, p.peer.as_str()), ("tcp", node.addr.as_str()));
    assert_eq!((p.reads, p.read_bytes), (2, BUF as u64));
    assert_eq!(p.appends, 2, "the gathered bytes and the chunk: {p:?}");
    assert_eq!(p.append_bytes, want.len() as u64);
    assert_eq!(p.latency_buckets.last().copied(), Some(4));
    assert!(p.active_connections >= 1 && p.connects >= 1, "{p:?}");
    assert!(p.errors.is_empty(), "{p:?}");

    // A reset drops the idle connections; the next read makes a new one.
    assert!(dp.reset(Some(&node.addr)) >= 1);
    assert_eq!(dp.peer_stats()[0].active_connections, 0);
    assert_eq!(dp.reset(Some("127.0.0.1:1")), 0, "no such peer");
    let d = t(dp.read_shard(&node.addr, 0, &node.range(5, 10)))
        .await
        .unwrap();
    assert_eq!(&d.into_bytes()[..], &node.data[5..15]);
    let p = &dp.peer_stats()[0];
    assert_eq!(p.connects, peers[0].connects + 1, "{p:?}");
    // A failed transfer is counted by kind.
    let _ = t(dp.read_shard(
        &node.addr,
        0,
        &ShardRange {
            data_dir: Uuid::new_v4(),
            ..node.range(0, 10)
        },
    ))
    .await
    .unwrap_err();
    assert_eq!(dp.peer_stats()[0].errors, vec![("remote", 1)]);
}

#[tokio::test]
async fn every_idle_connection_to_a_restarted_peer_is_dropped_at_the_first_dead_one() {
    let mut node = Node::new(1000).await;
    let dp = plane(plane_config());
    // Two reads at once leave two idle connections.
    let (r1, r2) = (node.range(0, 10), node.range(10, 10));
    let (a, b) = tokio::join!(
        t(dp.read_shard(&node.addr, 0, &r1)),
        t(dp.read_shard(&node.addr, 0, &r2))
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(dp.idle_connections(&node.addr), 2);
    // The peer restarts on the same address: both idle connections are dead.
    node.server.take().unwrap().shutdown().await;
    let drives: Vec<Arc<dyn Drive>> = vec![Arc::new(node.local.clone())];
    let server = RpcServer::bind(
        node.addr.as_str(),
        identity("server"),
        rpc_config(),
        Arc::new(DriveServer::new(drives)),
    )
    .await
    .unwrap();
    // One retry, and it is on a new connection, not on the second dead one.
    let got = t(dp.read_shard(&node.addr, 0, &node.range(3, 10)))
        .await
        .unwrap();
    assert_eq!(&got.into_bytes()[..], &node.data[3..13]);
    assert_eq!(dp.stats().retries, 1);
    assert_eq!(dp.idle_connections(&node.addr), 1);
    drop(server);
}
