//! Control RPC over loopback (127.0.0.1 only): a real server, real clients, real sockets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use quarry_net::auth::{self, AuthError, RejectReason};
use quarry_net::rpc::{codes, PeerStatus};
use quarry_net::wire::{Frame, FrameKind, Header};
use quarry_net::{ClusterSecret, Handler, Identity, RpcClient, RpcConfig, RpcError, RpcServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use uuid::Uuid;

const ECHO: u16 = 1;
/// Echo after sleeping the number of milliseconds in the payload's first 8 bytes.
const SLOW_ECHO: u16 = 2;
const FAIL: u16 = 3;
/// Answers with as many bytes as the payload's first 8 bytes say.
const BIG: u16 = 4;
const PANIC: u16 = 5;

const SECRET: &[u8] = b"test-cluster-secret-0123";

#[derive(Default)]
struct TestHandler {
    calls: AtomicU64,
    in_flight: AtomicU64,
    peak: AtomicU64,
}

impl Handler for TestHandler {
    async fn handle(&self, method: u16, payload: Bytes) -> Result<Bytes, RpcError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let arg = || {
            payload
                .get(..8)
                .map(|b| u64::from_be_bytes(b.try_into().unwrap()))
                .unwrap_or(0)
        };
        match method {
            ECHO => Ok(payload),
            SLOW_ECHO => {
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(arg())).await;
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(payload)
            }
            FAIL => Err(RpcError::remote(
                codes::APPLICATION_BASE + 7,
                "drive 3 is offline",
            )),
            BIG => Ok(Bytes::from(vec![7u8; arg() as usize])),
            PANIC => panic!("handler bug"),
            other => Err(RpcError::unknown_method(other)),
        }
    }
}

fn identity(node: &str, secret: &[u8]) -> Identity {
    Identity {
        deployment_id: Uuid::from_u128(0xfeed),
        node_id: node.into(),
        secret: ClusterSecret::new(secret).unwrap(),
    }
}

fn config() -> RpcConfig {
    RpcConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(1),
        handshake_timeout: Duration::from_secs(1),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        ..RpcConfig::default()
    }
}

async fn server_with(config: RpcConfig) -> (RpcServer, Arc<TestHandler>, String) {
    let handler = Arc::new(TestHandler::default());
    let server = RpcServer::bind(
        "127.0.0.1:0",
        identity("server", SECRET),
        config,
        handler.clone(),
    )
    .await
    .unwrap();
    let addr = server.local_addr().to_string();
    (server, handler, addr)
}

async fn server() -> (RpcServer, Arc<TestHandler>, String) {
    server_with(config()).await
}

fn client() -> RpcClient {
    RpcClient::new(identity("client", SECRET), config())
}

fn arg(n: u64, tail: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u64(n);
    b.put_slice(tail);
    b.freeze()
}

/// Whether the server closed `s` (EOF or reset) within a second.
async fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 256];
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // e.g. a handshake reject message
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn round_trip_errors_and_ping() {
    let (server, _h, addr) = server().await;
    let c = client();
    assert_eq!(c.peer_status(&addr), PeerStatus::Unknown);
    let got = c
        .call(&addr, ECHO, Bytes::from_static(b"hello"))
        .await
        .unwrap();
    assert_eq!(&got[..], b"hello");
    assert_eq!(&c.call(&addr, ECHO, Bytes::new()).await.unwrap()[..], b"");
    assert_eq!(c.peer_status(&addr), PeerStatus::Up);

    match c.call(&addr, FAIL, Bytes::new()).await {
        Err(RpcError::Remote { code, message }) => {
            assert_eq!(code, codes::APPLICATION_BASE + 7);
            assert_eq!(message, "drive 3 is offline");
        }
        other => panic!("{other:?}"),
    }
    let e = c.call(&addr, PANIC, Bytes::new()).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::INTERNAL), "{e}");
    let e = c.call(&addr, 999, Bytes::new()).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::UNKNOWN_METHOD), "{e}");
    assert!(c.ping(&addr).await.unwrap() < Duration::from_secs(1));
    // A response of 1 MiB comes back whole.
    let big = c.call(&addr, BIG, arg(1 << 20, b"")).await.unwrap();
    assert_eq!(big.len(), 1 << 20);
    assert!(big.iter().all(|b| *b == 7));
    // Errors did not break the connection: everything went over the pool's connections.
    assert!(c.stats().connects <= 2);
    assert_eq!(server.stats().protocol_errors, 0);
}

#[tokio::test]
async fn many_concurrent_calls_are_multiplexed_over_few_connections() {
    let (server, handler, addr) = server().await;
    let c = client();
    let mut calls = Vec::new();
    for i in 0..300u64 {
        let c = c.clone();
        let addr = addr.clone();
        calls.push(tokio::spawn(async move {
            // Later calls sleep less, so responses come back out of order.
            let ms = (300 - i) % 17;
            let payload = arg(ms, format!("call {i}").as_bytes());
            let got = c.call(&addr, SLOW_ECHO, payload.clone()).await.unwrap();
            assert_eq!(got, payload, "call {i} got another call's response");
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    assert_eq!(handler.calls.load(Ordering::Relaxed), 300);
    let stats = c.stats();
    assert_eq!(stats.calls, 300);
    assert_eq!(stats.connects, 2, "connections_per_peer = 2, reused");
    assert_eq!(server.stats().connections_accepted, 2);
}

#[tokio::test]
async fn a_call_that_times_out_fails_typed_and_its_late_response_is_discarded() {
    let (_server, _h, addr) = server().await;
    let c = RpcClient::new(
        identity("client", SECRET),
        RpcConfig {
            connections_per_peer: 1,
            ..config()
        },
    );
    c.call(&addr, ECHO, Bytes::new()).await.unwrap();
    // Other answers keep arriving on the connection while the slow call waits, so the connection is
    // known alive and kept (a silent one is dropped: see the next test).
    let chatter = {
        let c = c.clone();
        let addr = addr.clone();
        tokio::spawn(async move {
            for _ in 0..40 {
                c.ping(&addr).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let start = Instant::now();
    let e = c
        .call_with_timeout(
            &addr,
            SLOW_ECHO,
            arg(500, b"slow"),
            Duration::from_millis(150),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, RpcError::Timeout { after, .. } if after == Duration::from_millis(150)),
        "{e}"
    );
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "did not wait for the answer"
    );
    assert_eq!(c.stats().timeouts, 1);
    // Calls on the same connection get their own answers, not the late one.
    for i in 0..10u64 {
        let p = arg(0, format!("fast {i}").as_bytes());
        assert_eq!(c.call(&addr, SLOW_ECHO, p.clone()).await.unwrap(), p);
    }
    chatter.await.unwrap();
    tokio::time::sleep(Duration::from_millis(600).saturating_sub(start.elapsed())).await;
    assert_eq!(c.stats().late_responses, 1);
    assert_eq!(
        &c.call(&addr, ECHO, Bytes::from_static(b"after"))
            .await
            .unwrap()[..],
        b"after"
    );
    assert_eq!(
        c.stats().connects,
        1,
        "the timeout did not cost the connection"
    );
}

#[tokio::test]
async fn a_silent_connection_is_dropped_after_a_timeout_and_replaced() {
    // A peer that completes the handshake, then never answers (a hung process, a vanished host).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicU64::new(0));
    let count = accepted.clone();
    let black_hole = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            let id = identity("black-hole", SECRET);
            if auth::server_handshake(&mut s, &id, Duration::from_secs(60))
                .await
                .is_ok()
            {
                held.push(s);
            }
        }
    });
    let c = RpcClient::new(
        identity("client", SECRET),
        RpcConfig {
            connections_per_peer: 1,
            ..config()
        },
    );
    for _ in 0..2 {
        let e = c
            .call_with_timeout(&addr, ECHO, Bytes::new(), Duration::from_millis(250))
            .await
            .unwrap_err();
        assert!(matches!(e, RpcError::Timeout { .. }), "{e}");
    }
    // The first timed-out call gave up its silent connection, so the second one opened a new one.
    assert_eq!(c.stats().connects, 2);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    black_hole.abort();
}

#[tokio::test]
async fn peer_down_fails_fast_then_backs_off_then_recovers() {
    let (server, _h, addr) = server().await;
    let c = client();
    c.call(&addr, ECHO, Bytes::new()).await.unwrap();
    server.shutdown().await;

    // The open connections die, then connecting fails and the peer is marked down.
    let mut saw_connect_error = false;
    for _ in 0..4 {
        match c.call(&addr, ECHO, Bytes::new()).await {
            Err(RpcError::ConnectionClosed { .. }) => {}
            Err(RpcError::Connect { .. }) => {
                saw_connect_error = true;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(saw_connect_error);
    assert!(matches!(
        c.peer_status(&addr),
        PeerStatus::Down {
            consecutive_failures: 1,
            ..
        }
    ));

    // While down, calls fail at once without touching the network.
    let start = Instant::now();
    let e = c.call(&addr, ECHO, Bytes::new()).await.unwrap_err();
    assert!(matches!(e, RpcError::PeerDown { .. }), "{e}");
    assert!(e.is_unreachable());
    assert!(
        start.elapsed() < Duration::from_millis(200),
        "no connection attempt"
    );
    assert!(c.stats().fast_failures >= 1);

    // Still down after the first delay: the next attempt fails and the delay grows.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(matches!(
        c.call(&addr, ECHO, Bytes::new()).await,
        Err(RpcError::Connect { .. })
    ));
    assert!(matches!(
        c.peer_status(&addr),
        PeerStatus::Down {
            consecutive_failures: 2,
            ..
        }
    ));

    // The server comes back on the same port: a call succeeds once the back-off allows.
    let handler = Arc::new(TestHandler::default());
    let _server = RpcServer::bind(addr.as_str(), identity("server", SECRET), config(), handler)
        .await
        .unwrap();
    let start = Instant::now();
    loop {
        match c.call(&addr, ECHO, Bytes::from_static(b"back")).await {
            Ok(b) => {
                assert_eq!(&b[..], b"back");
                break;
            }
            Err(RpcError::PeerDown { retry_in, .. }) => {
                assert!(retry_in <= Duration::from_millis(200), "back-off is capped");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(start.elapsed() < Duration::from_secs(2), "never recovered");
    }
    assert_eq!(c.peer_status(&addr), PeerStatus::Up);
}

#[tokio::test]
async fn wrong_secret_or_deployment_is_refused_and_nothing_is_served() {
    let (server, handler, addr) = server().await;
    let c = RpcClient::new(identity("intruder", b"some-other-secret-value"), config());
    match c.call(&addr, ECHO, Bytes::new()).await {
        Err(RpcError::Handshake {
            source: AuthError::Rejected(RejectReason::BadProof),
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let mut other = identity("other-cluster", SECRET);
    other.deployment_id = Uuid::from_u128(1);
    let c = RpcClient::new(other, config());
    match c.call(&addr, ECHO, Bytes::new()).await {
        Err(RpcError::Handshake {
            source: AuthError::Rejected(RejectReason::DeploymentMismatch),
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(handler.calls.load(Ordering::Relaxed), 0);
    assert_eq!(server.stats().handshake_failures, 2);

    // A request frame sent without a handshake is not served either.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let mut frame = BytesMut::new();
    quarry_net::wire::Sealer::new(&[0; 32], 1024)
        .seal_into(
            &Frame::request(1, ECHO, Bytes::from_static(b"x")),
            &mut frame,
        )
        .unwrap();
    s.write_all(&frame).await.unwrap();
    assert!(closed_by_server(&mut s).await);
    assert_eq!(handler.calls.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn oversized_frames_are_refused() {
    // The client refuses to send more than its own maximum.
    let (server, _h, addr) = server_with(RpcConfig {
        max_frame: 64 << 10,
        ..config()
    })
    .await;
    let small = RpcClient::new(
        identity("client", SECRET),
        RpcConfig {
            max_frame: 1024,
            ..config()
        },
    );
    assert!(matches!(
        small.call(&addr, ECHO, Bytes::from(vec![0u8; 1025])).await,
        Err(RpcError::TooLarge {
            len: 1025,
            max: 1024
        })
    ));

    // A peer sending more than the server's maximum is disconnected; the client sees the close.
    let big = RpcClient::new(
        identity("client", SECRET),
        RpcConfig {
            max_frame: 4 << 20,
            connections_per_peer: 1,
            ..config()
        },
    );
    let e = big
        .call(&addr, ECHO, Bytes::from(vec![0u8; 100 << 10]))
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::ConnectionClosed { .. }), "{e}");
    assert_eq!(server.stats().protocol_errors, 1);
    // And a handler's response larger than the maximum becomes a typed error.
    let e = big.call(&addr, BIG, arg(65 << 10, b"")).await.unwrap_err();
    assert_eq!(e.code(), Some(codes::RESPONSE_TOO_LARGE), "{e}");

    // An authenticated peer whose header claims 4 GiB is cut off from the header alone.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let session = auth::client_handshake(&mut s, &identity("raw", SECRET), Duration::from_secs(60))
        .await
        .unwrap();
    let header = Header {
        kind: FrameKind::Request,
        flags: 0,
        request_id: 1,
        method: ECHO,
        payload_len: u32::MAX,
    };
    s.write_all(&header.encode()).await.unwrap();
    assert!(closed_by_server(&mut s).await);
    assert_eq!(server.stats().protocol_errors, 2);
    drop(session);
    // The server still serves.
    assert_eq!(
        &big.call(&addr, ECHO, Bytes::from_static(b"ok"))
            .await
            .unwrap()[..],
        b"ok"
    );
}

#[tokio::test]
async fn a_peer_sending_garbage_is_disconnected_without_affecting_others() {
    let (server, _h, addr) = server_with(RpcConfig {
        preauth_timeout: Duration::from_millis(300),
        ..config()
    })
    .await;
    let c = client();
    c.call(&addr, ECHO, Bytes::new()).await.unwrap();

    // A steady stream of calls from a good client while bad peers come and go.
    let good = {
        let c = c.clone();
        let addr = addr.clone();
        tokio::spawn(async move {
            for i in 0..100u64 {
                let p = arg(1, format!("good {i}").as_bytes());
                assert_eq!(c.call(&addr, SLOW_ECHO, p.clone()).await.unwrap(), p);
            }
        })
    };

    // Garbage instead of a handshake.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: quarry\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_by_server(&mut s).await);

    // Garbage after a good handshake.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let _session =
        auth::client_handshake(&mut s, &identity("bad", SECRET), Duration::from_secs(60))
            .await
            .unwrap();
    s.write_all(&[0x5a; 64]).await.unwrap();
    assert!(closed_by_server(&mut s).await);

    // A well-formed frame with a bad MAC after a good handshake.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    let _session =
        auth::client_handshake(&mut s, &identity("forger", SECRET), Duration::from_secs(60))
            .await
            .unwrap();
    let mut frame = BytesMut::new();
    quarry_net::wire::Sealer::new(&[1; 32], 1024)
        .seal_into(
            &Frame::request(1, ECHO, Bytes::from_static(b"x")),
            &mut frame,
        )
        .unwrap();
    s.write_all(&frame).await.unwrap();
    assert!(closed_by_server(&mut s).await);

    // A peer that connects and says nothing is dropped after the pre-auth timeout.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    assert!(closed_by_server(&mut s).await);

    good.await.unwrap();
    let stats = server.stats();
    assert_eq!(stats.protocol_errors, 2);
    assert_eq!(stats.handshake_failures, 2);
    assert!(
        c.stats().connects <= 2,
        "the good client's connections were never disturbed"
    );
}

#[tokio::test]
async fn connections_beyond_the_bound_are_closed_at_once() {
    let (server, _h, addr) = server_with(RpcConfig {
        max_connections: 1,
        max_handshakes: 2,
        preauth_timeout: Duration::from_millis(500),
        ..config()
    })
    .await;
    let one = RpcConfig {
        connections_per_peer: 1,
        ..config()
    };
    let c = RpcClient::new(identity("client", SECRET), one.clone());
    c.call(&addr, ECHO, Bytes::new()).await.unwrap();
    // A second authenticated peer is closed as soon as its handshake is done.
    let other = RpcClient::new(identity("other", SECRET), one);
    let e = other.call(&addr, ECHO, Bytes::new()).await.unwrap_err();
    assert!(e.is_unreachable(), "{e}");
    assert_eq!(server.stats().connections_refused, 1);
    // Connections that have not authenticated have their own few slots: a third one closes
    // the oldest waiting, and none of them touches the served connection.
    let mut a = TcpStream::connect(&addr).await.unwrap();
    let mut b = TcpStream::connect(&addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _c = TcpStream::connect(&addr).await.unwrap();
    assert!(closed_by_server(&mut a).await);
    assert_eq!(server.stats().handshakes_cut, 1);
    assert!(
        closed_by_server(&mut b).await,
        "and the rest after the timeout"
    );
    c.call(&addr, ECHO, Bytes::new()).await.unwrap();
}

#[tokio::test]
async fn requests_in_flight_per_connection_are_bounded() {
    let (_server, handler, addr) = server_with(RpcConfig {
        max_in_flight_per_connection: 2,
        ..config()
    })
    .await;
    let c = RpcClient::new(
        identity("client", SECRET),
        RpcConfig {
            connections_per_peer: 1,
            ..config()
        },
    );
    let start = Instant::now();
    let calls: Vec<_> = (0..6u64)
        .map(|i| {
            let c = c.clone();
            let addr = addr.clone();
            tokio::spawn(async move {
                let p = arg(50, &i.to_be_bytes());
                assert_eq!(c.call(&addr, SLOW_ECHO, p.clone()).await.unwrap(), p);
            })
        })
        .collect();
    for call in calls {
        call.await.unwrap();
    }
    assert_eq!(handler.peak.load(Ordering::SeqCst), 2);
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "three waves of two"
    );
}

/// Log lines written while a [`tracing`] default is set (the tests' runtime is single-threaded,
/// so the server's tasks log into it too).
#[derive(Clone, Default)]
struct LogCapture(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        let me = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || me.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Opens `count` connections to `addr`, `rate` per second, each sending the handshake magic and
/// nothing more, as a flooder without the secret would; each is held until the server closes it
/// or `hold` passes. Returns how long the server kept each one (`hold` if it did not close it).
async fn preauth_flood(addr: String, rate: u32, count: u32, hold: Duration) -> Vec<Duration> {
    let mut held = tokio::task::JoinSet::new();
    let gap = Duration::from_secs(1) / rate;
    let start = Instant::now();
    for i in 0..count {
        tokio::time::sleep_until((start + gap * i).into()).await;
        let addr = addr.clone();
        held.spawn(async move {
            let opened = Instant::now();
            let Ok(mut s) = TcpStream::connect(&addr).await else {
                return Duration::ZERO;
            };
            let _ = s.write_all(&auth::HS_MAGIC).await;
            let mut buf = [0u8; 64];
            loop {
                match tokio::time::timeout_at((opened + hold).into(), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Ok(Err(_)) => return opened.elapsed(),
                    Ok(Ok(_)) => continue,
                    Err(_) => return hold,
                }
            }
        });
    }
    held.join_all().await
}

#[tokio::test]
async fn a_flood_of_unauthenticated_connections_neither_stops_peers_nor_keeps_new_ones_out() {
    let logs = LogCapture::default();
    let _guard = logs.install();
    // Defaults but for a small bound, as a node that was just restarted meets it.
    let (server, _h, addr) = server_with(RpcConfig {
        max_connections: 16,
        handshake_timeout: Duration::from_secs(5),
        ..config()
    })
    .await;
    let established = client();
    for _ in 0..4 {
        established.call(&addr, ECHO, Bytes::new()).await.unwrap();
    }

    // 300 connections/s for 2 s (600 in all), each holding on for up to 4 s.
    let flood = tokio::spawn(preauth_flood(
        addr.clone(),
        300,
        600,
        Duration::from_secs(4),
    ));
    tokio::time::sleep(Duration::from_millis(700)).await;

    // An established peer keeps working, at its usual pace.
    let mut slowest = Duration::ZERO;
    for i in 0..50u64 {
        let t = Instant::now();
        let p = arg(0, format!("during the flood {i}").as_bytes());
        assert_eq!(established.call(&addr, ECHO, p.clone()).await.unwrap(), p);
        slowest = slowest.max(t.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(500),
        "an established peer's call took {slowest:?} during the flood"
    );
    // And a peer that connects now (a node just restarted) gets in at its first attempt.
    for n in 0..3 {
        let newcomer = RpcClient::new(identity(&format!("newcomer-{n}"), SECRET), config());
        let got = newcomer.call(&addr, ECHO, Bytes::from_static(b"hi")).await;
        assert_eq!(
            got.map(|b| b.to_vec()).map_err(|e| e.to_string()),
            Ok(b"hi".to_vec()),
            "a new peer during the flood"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let held = flood.await.unwrap();
    let mut sorted = held.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    eprintln!(
        "pre-auth flood: {} connections, server kept them for median {median:?}, max {:?}; established peer's slowest call {slowest:?}",
        held.len(),
        sorted[sorted.len() - 1]
    );
    // A connection that does not authenticate is let go well before the 5 s handshake timeout.
    assert!(
        median <= Duration::from_millis(1500),
        "unauthenticated connections were held for a median of {median:?}"
    );
    // Refusals are logged, but not one line each.
    let text = logs.text();
    let warn_lines = text.lines().filter(|l| l.contains("WARN")).count();
    assert!(
        (1..=5).contains(&warn_lines),
        "{warn_lines} WARN lines for 600 refused connections:\n{}",
        &text[..text.len().min(2000)]
    );
    let stats = server.stats();
    assert!(stats.handshakes_cut > 0, "{stats:?}");
    assert_eq!(stats.connections_refused, 0, "{stats:?}");
}

#[tokio::test]
async fn a_peer_supplied_node_id_cannot_forge_log_lines() {
    let logs = LogCapture::default();
    let _guard = logs.install();
    let (server, handler, addr) = server().await;
    // Another deployment's hello whose node id carries a newline and a fake log line.
    let forged = "evil\n2031-01-01T00:00:00.000000Z  INFO quarry: FORGED root login accepted";
    let hello = auth::encode_message(&auth::Message::Hello(auth::Hello {
        role: auth::Role::Client,
        deployment_id: Uuid::from_u128(0xbad),
        nonce: [7; 32],
        timestamp_ms: auth::now_ms(),
        node_id: forged.into(),
    }));
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    assert!(closed_by_server(&mut s).await);
    // Control: the refusal was logged, so a forged line would have shown.
    let text = logs.text();
    assert!(text.contains("internode handshake refused"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("2031-01-01")),
        "a peer forged a log line:\n{text}"
    );
    assert!(!text.contains("FORGED root login"), "{text}");
    assert_eq!(handler.calls.load(Ordering::Relaxed), 0);
    // A good peer is served as ever.
    client().call(&addr, ECHO, Bytes::new()).await.unwrap();
    assert_eq!(server.stats().handshake_failures, 1);
}

/// A node of the last protocol version (1: before the one internode codec) is refused at the
/// handshake, before anything of it is decoded: it reads a refusal in a header of our version (so
/// it names that version), the server logs which version it spoke, and a peer of this version is
/// served as ever (control). The other way round, a server of version 1 answers our hello with a
/// version-1 refusal, and our client names that version.
#[tokio::test]
async fn a_peer_of_another_protocol_version_is_refused_at_the_handshake() {
    let logs = LogCapture::default();
    let _guard = logs.install();
    let (server, handler, addr) = server().await;
    let mut hello = auth::encode_message(&auth::Message::Hello(auth::Hello {
        role: auth::Role::Client,
        deployment_id: Uuid::from_u128(0x1234),
        nonce: [7; 32],
        timestamp_ms: auth::now_ms(),
        node_id: "old-node".into(),
    }));
    assert_eq!(hello[4], auth::HS_VERSION);
    hello[4] = 1;
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&hello).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    // magic | version (ours) | type 3 (reject) | length 1 | reason 5 (unsupported version)
    assert_eq!(&answer[..4], &auth::HS_MAGIC);
    assert_eq!(answer[4], auth::HS_VERSION);
    assert_eq!(
        &answer[5..],
        &[3, 0, 1, RejectReason::UnsupportedVersion as u8]
    );
    let text = logs.text();
    assert!(
        text.contains("internode handshake refused")
            && text.contains(&format!(
                "internode protocol version 1, this node version {}",
                auth::HS_VERSION
            )),
        "{text}"
    );
    assert_eq!(handler.calls.load(Ordering::Relaxed), 0);
    assert_eq!(server.stats().handshake_failures, 1);
    // Control: a peer of this version is served.
    client().call(&addr, ECHO, Bytes::new()).await.unwrap();

    // An old server: it refuses our hello in its own version's header.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let old = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut head = [0u8; auth::HS_HEADER_LEN];
        s.read_exact(&mut head).await.unwrap();
        let mut body = vec![0u8; u16::from_be_bytes([head[6], head[7]]) as usize];
        s.read_exact(&mut body).await.unwrap();
        let mut reject = auth::encode_message(&auth::Message::Reject(RejectReason::Malformed));
        reject[4] = 1;
        s.write_all(&reject).await.unwrap();
    });
    match client().call(&old, ECHO, Bytes::new()).await {
        Err(RpcError::Handshake {
            source: AuthError::UnsupportedVersion { got: 1 },
            ..
        }) => {}
        other => panic!("expected a version refusal, got {other:?}"),
    }
}
