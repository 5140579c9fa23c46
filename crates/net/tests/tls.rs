//! Internode mutual TLS on 127.0.0.1: the control RPC and the TCP data plane between a real
//! server and real clients, every one with a certificate directory as a node has (a test CA in
//! `CAs/`). Beside each passing connection, the ones a TLS cluster must refuse: a plain client, a
//! client without a certificate, a node whose certificate another CA signed, a node that trusts
//! another CA.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use quarry_disk::{Drive, LocalDrive};
use quarry_net::{
    ClusterSecret, DataPlane, DataPlaneError, DriveServer, Identity, InternodeTls, RemoteDrive,
    RemoteDriveConfig, RpcClient, RpcConfig, RpcError, RpcServer, ShardRange, TcpDataPlane,
    TcpDataPlaneConfig,
};
use quarry_tls::generate::{write_certs_dir, Ca, Validity};
use quarry_tls::{certs, internode, ALPN_INTERNODE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

const SECRET: &[u8] = b"internode-tls-test-secret";
const BUF: usize = 64 << 10;

fn identity(node: &str) -> Identity {
    Identity {
        deployment_id: Uuid::from_u128(0x7150),
        node_id: node.into(),
        secret: ClusterSecret::new(SECRET).unwrap(),
    }
}

/// A node's TLS: a certificate for 127.0.0.1 signed by `issuer`, trusting `trusted`.
fn node_tls(issuer: &Ca, trusted: &Ca) -> InternodeTls {
    let dir = tempfile::tempdir().unwrap();
    let leaf = issuer
        .issue(&["127.0.0.1".to_string()], Validity::days(2))
        .unwrap();
    write_certs_dir(dir.path(), &leaf, &trusted.pem().cert).unwrap();
    let set = certs::load_dir(dir.path(), SystemTime::now())
        .unwrap()
        .unwrap();
    InternodeTls::fixed(internode::configs(&set).unwrap())
}

fn config(tls: Option<InternodeTls>) -> RpcConfig {
    RpcConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(1),
        handshake_timeout: Duration::from_secs(2),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(50),
        tls,
        ..RpcConfig::default()
    }
}

async fn t<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("test step hung")
}

/// A node serving one local drive with one shard file `b/k/<dd>/part.1`, over TLS.
struct Node {
    _dir: tempfile::TempDir,
    local: LocalDrive,
    server: RpcServer,
    addr: String,
    dd: Uuid,
    data: Vec<u8>,
}

async fn node(tls: InternodeTls) -> Node {
    let dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let local = LocalDrive::open(dir.path().join("d0")).await.unwrap();
    local.make_volume("b").await.unwrap();
    let dd = Uuid::new_v4();
    let data: Vec<u8> = (0..3 * BUF + 5).map(|i| (i * 7 + i / 251) as u8).collect();
    let shard_dir = local.root().join("b/k").join(dd.to_string());
    std::fs::create_dir_all(&shard_dir).unwrap();
    std::fs::write(shard_dir.join("part.1"), &data).unwrap();
    let drives: Vec<Arc<dyn Drive>> = vec![Arc::new(local.clone())];
    let server = RpcServer::bind(
        "127.0.0.1:0",
        identity("server"),
        config(Some(tls)),
        Arc::new(DriveServer::new(drives)),
    )
    .await
    .unwrap();
    let addr = server.local_addr().to_string();
    Node {
        _dir: dir,
        local,
        server,
        addr,
        dd,
        data,
    }
}

fn remote(client: &RpcClient, addr: &str) -> (RemoteDrive, Arc<TcpDataPlane>) {
    let dp = Arc::new(
        TcpDataPlane::new(
            client.identity().clone(),
            TcpDataPlaneConfig {
                buf_size: BUF,
                buffers: 32,
                ..TcpDataPlaneConfig::from_rpc(client.config())
            },
        )
        .unwrap(),
    );
    let r = RemoteDrive::with_data_plane(
        client.clone(),
        addr.to_owned(),
        0,
        "https://x/d0",
        RemoteDriveConfig {
            append_chunk: BUF,
            ..RemoteDriveConfig::for_client(client)
        },
        dp.clone(),
    );
    (r, dp)
}

#[tokio::test]
async fn control_rpc_and_data_plane_run_over_mutual_tls() {
    let ca = Ca::new("cluster CA", Validity::days(2)).unwrap();
    let n = node(node_tls(&ca, &ca)).await;
    let client = RpcClient::new(identity("client"), config(Some(node_tls(&ca, &ca))));
    let (r, dp) = remote(&client, &n.addr);

    // Control RPC: a metadata call.
    t(r.make_volume("c")).await.unwrap();
    assert!(n.local.root().join("c").is_dir());
    // Data plane, GET direction: a range across buffers, byte exact.
    let range = ShardRange {
        bucket: "b",
        key: "k",
        data_dir: n.dd,
        part: 1,
        offset: 3,
        len: 2 * BUF + 1,
    };
    let got = t(dp.read_shard(&n.addr, 0, &range))
        .await
        .unwrap()
        .into_bytes();
    assert!(got[..] == n.data[3..3 + 2 * BUF + 1], "bytes differ");
    // A frame read: through the TLS stream, never `sendfile` beside it (the bytes would leave
    // unencrypted).
    let mut dst = dp.pool().get().await;
    dst.set_len(1000);
    let frame = ShardRange {
        offset: 7,
        len: 1000,
        ..range
    };
    let got = t(dp.read_frame_into(&n.addr, 0, &frame, dst))
        .await
        .unwrap()
        .into_bytes();
    assert!(got[..] == n.data[7..1007], "frame bytes differ");
    assert_eq!(n.server.stats().file_answers, 0);
    // Data plane, PUT direction: appends land on the drive.
    let (tmp, dd) = (Uuid::new_v4(), Uuid::new_v4());
    let body: Vec<u8> = (0..2 * BUF + 9).map(|i| (i % 253) as u8).collect();
    let mut w = t(r.create_shard_writer(tmp, dd, 1)).await.unwrap();
    t(w.write(&body)).await.unwrap();
    t(w.finish()).await.unwrap();
    let on_disk = std::fs::read(
        n.local
            .root()
            .join(".quarry.sys/tmp")
            .join(tmp.to_string())
            .join(dd.to_string())
            .join("part.1"),
    )
    .unwrap();
    assert!(on_disk == body, "appended bytes differ");
    assert_eq!(dp.stats().errors, 0);
    assert_eq!(n.server.stats().handshake_failures, 0);
}

#[tokio::test]
async fn plain_anonymous_and_foreign_peers_get_nothing() {
    let ca = Ca::new("cluster CA", Validity::days(2)).unwrap();
    let other = Ca::new("another CA", Validity::days(2)).unwrap();
    let n = node(node_tls(&ca, &ca)).await;

    // Control: a node of the cluster's CA is served.
    let good = RpcClient::new(identity("good"), config(Some(node_tls(&ca, &ca))));
    t(good.ping(&n.addr)).await.unwrap();
    let failures = || n.server.stats().handshake_failures;
    assert_eq!(failures(), 0);

    // A plain client speaking the internode protocol: its handshake never gets an answer.
    let plain = RpcClient::new(identity("plain"), config(None));
    let e = t(plain.ping(&n.addr)).await.unwrap_err();
    assert!(matches!(e, RpcError::Handshake { .. }), "{e:?}");
    let plain_dp = TcpDataPlane::new(
        identity("plain"),
        TcpDataPlaneConfig::from_rpc(&config(None)),
    )
    .unwrap();
    let range = ShardRange {
        bucket: "b",
        key: "k",
        data_dir: n.dd,
        part: 1,
        offset: 0,
        len: 10,
    };
    let e = t(plain_dp.read_shard(&n.addr, 0, &range))
        .await
        .unwrap_err();
    assert!(matches!(e, DataPlaneError::Handshake { .. }), "{e:?}");
    // What the plain client got back is no internode byte: at most a TLS alert record.
    let mut raw = tokio::net::TcpStream::connect(&n.addr).await.unwrap();
    let hello = quarry_net::auth::HS_MAGIC;
    raw.write_all(&hello).await.unwrap();
    raw.write_all(&[0u8; 60]).await.unwrap();
    let mut got = Vec::new();
    let _ = t(raw.read_to_end(&mut got)).await;
    assert!(
        got.is_empty() || got[0] == 0x15,
        "a plain client got {got:02x?}"
    );

    // A TLS client without a certificate.
    let mut anonymous = quarry_tls::client_config_trusting(ca.pem().cert.as_bytes()).unwrap();
    anonymous.alpn_protocols = vec![ALPN_INTERNODE.to_vec()];
    let tcp = tokio::net::TcpStream::connect(&n.addr).await.unwrap();
    let name = quarry_tls::rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let connected = quarry_tls::tokio_rustls::TlsConnector::from(Arc::new(anonymous))
        .connect(name, tcp)
        .await;
    // TLS 1.3: the client may finish its side before the server's refusal arrives; then the
    // refusal shows on the first read.
    if let Ok(mut s) = connected {
        let _ = s.write_all(&hello).await;
        let mut b = [0u8; 8];
        assert!(
            t(s.read(&mut b)).await.map(|n| n == 0).unwrap_or(true),
            "a client without a certificate was answered"
        );
    }

    // A node whose certificate another CA signed.
    let foreign = RpcClient::new(identity("foreign"), config(Some(node_tls(&other, &ca))));
    let e = t(foreign.ping(&n.addr)).await.unwrap_err();
    assert!(
        matches!(e, RpcError::Tls { .. } | RpcError::Handshake { .. }),
        "{e:?}"
    );
    // A node that trusts another CA refuses the server's certificate itself.
    let distrustful = RpcClient::new(identity("other"), config(Some(node_tls(&ca, &other))));
    let e = t(distrustful.ping(&n.addr)).await.unwrap_err();
    match &e {
        RpcError::Tls { reason, .. } => assert!(reason.contains("UnknownIssuer"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let dp = TcpDataPlane::new(
        identity("other"),
        TcpDataPlaneConfig::from_rpc(&config(Some(node_tls(&ca, &other)))),
    )
    .unwrap();
    let e = t(dp.read_shard(&n.addr, 0, &range)).await.unwrap_err();
    assert!(matches!(e, DataPlaneError::Tls { .. }), "{e:?}");

    // Every refusal was the server's too (the distrustful client's end included).
    assert!(failures() >= 6, "{} handshake failures", failures());
    // And the cluster's own node is still served.
    t(good.ping(&n.addr)).await.unwrap();
}
