//! Distributed locks over real RPC servers on loopback (127.0.0.1 only): mutual exclusion between
//! nodes, release when a holder dies, and quorum with lock servers down.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quarry_net::rpc::codes;
use quarry_net::{ClusterSecret, Handler, Identity, RpcClient, RpcConfig, RpcError, RpcServer};
use quarry_node::dsync::{
    self, DistLocker, DistLockerConfig, LockServer, METHOD_LOCK, METHOD_UNLOCK,
};
use quarry_object::{Error, Locker};
use uuid::Uuid;

const SECRET: &[u8] = b"dsync-test-cluster-secret";

fn identity(node: &str) -> Identity {
    Identity {
        deployment_id: Uuid::from_u128(0xd5),
        node_id: node.into(),
        secret: ClusterSecret::new(SECRET).unwrap(),
    }
}

fn rpc_config() -> RpcConfig {
    RpcConfig {
        call_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_millis(500),
        handshake_timeout: Duration::from_secs(1),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        ..RpcConfig::default()
    }
}

/// Lock servers on loopback, one per "node".
struct Nodes {
    servers: Vec<Option<RpcServer>>,
    tables: Vec<Arc<LockServer>>,
    addrs: Vec<String>,
}

impl Nodes {
    async fn start(n: usize) -> Nodes {
        let mut servers = Vec::new();
        let mut tables = Vec::new();
        let mut addrs = Vec::new();
        for i in 0..n {
            let table = Arc::new(LockServer::default());
            let server = RpcServer::bind(
                "127.0.0.1:0",
                identity(&format!("node{i}")),
                rpc_config(),
                table.clone(),
            )
            .await
            .unwrap();
            addrs.push(server.local_addr().to_string());
            servers.push(Some(server));
            tables.push(table);
        }
        Nodes {
            servers,
            tables,
            addrs,
        }
    }

    async fn stop(&mut self, i: usize) {
        if let Some(s) = self.servers[i].take() {
            s.shutdown().await;
        }
    }

    /// A locker as node `name` would build it: its own RPC client, every node's address.
    fn locker(&self, name: &str, cfg: DistLockerConfig) -> DistLocker {
        let client = Arc::new(RpcClient::new(identity(name), rpc_config()));
        DistLocker::new(self.addrs.iter().cloned(), client, cfg).unwrap()
    }
}

fn config(lease_ms: u64, acquire_ms: u64) -> DistLockerConfig {
    DistLockerConfig {
        lease: Duration::from_millis(lease_ms),
        acquire_timeout: Duration::from_millis(acquire_ms),
        call_timeout: Duration::from_millis(500),
        retry_initial: Duration::from_millis(5),
        retry_max: Duration::from_millis(50),
    }
}

async fn eventually(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_never_hold_one_lock_at_once() {
    let nodes = Nodes::start(3).await;
    let lockers = [
        Arc::new(nodes.locker("a", config(30_000, 30_000))),
        Arc::new(nodes.locker("b", config(30_000, 30_000))),
    ];
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    const TASKS_PER_NODE: usize = 3;
    const ROUNDS: u64 = 25;
    let mut tasks = Vec::new();
    for locker in &lockers {
        for _ in 0..TASKS_PER_NODE {
            let (locker, inside, counter) = (locker.clone(), inside.clone(), counter.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = locker.lock("bucket/key").await.unwrap();
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two holders inside the critical section"
                    );
                    // A read-modify-write across an await: loses updates if not exclusive.
                    let v = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    counter.store(v + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    drop(guard);
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = (lockers.len() * TASKS_PER_NODE) as u64 * ROUNDS;
    assert_eq!(counter.load(Ordering::SeqCst), total);
    for l in &lockers {
        assert_eq!(l.stats().timeouts, 0);
    }
    assert_eq!(
        lockers.iter().map(|l| l.stats().acquired).sum::<u64>(),
        total
    );
    // Every lock was released on every node.
    for t in &nodes.tables {
        eventually("locks released", Duration::from_secs(5), || t.is_empty()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_names_do_not_block_each_other() {
    let nodes = Nodes::start(3).await;
    let a = nodes.locker("a", config(30_000, 1_000));
    let b = nodes.locker("b", config(30_000, 1_000));
    let _g1 = a.lock("bucket/one").await.unwrap();
    let _g2 = b.lock("bucket/two").await.unwrap();
    let e = b.lock("bucket/one").await.unwrap_err();
    assert!(matches!(e, Error::LockTimeout { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_outlives_its_lease_by_refreshing_and_is_released_on_drop() {
    let nodes = Nodes::start(3).await;
    let a = nodes.locker("a", config(600, 5_000));
    let b = nodes.locker("b", config(600, 1_500));
    let g = a.lock("bucket/key").await.unwrap();
    // More than two leases pass while b tries: a's refreshes keep the lock.
    let start = Instant::now();
    let e = b.lock("bucket/key").await.unwrap_err();
    match e {
        Error::LockTimeout {
            granted,
            need,
            nodes: n,
            unreachable,
            ..
        } => {
            assert_eq!((granted, need, n, unreachable), (0, 2, 3, 0));
        }
        other => panic!("expected a lock timeout, got {other}"),
    }
    assert!(start.elapsed() >= Duration::from_millis(1_200));
    assert_eq!(a.stats().refresh_lost, 0);
    // Dropping the guard unlocks at once (well before a lease would run out).
    drop(g);
    let start = Instant::now();
    let _g = b.lock("bucket/key").await.unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
}

/// A node that dies while it holds a lock never unlocks: its lease runs out and others get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_lock_expires_after_its_lease() {
    let nodes = Nodes::start(3).await;
    let lease = Duration::from_millis(1_000);
    // The dying node runs in its own runtime: its RPC connections and its refresh task live there.
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let addrs = nodes.addrs.clone();
    doomed
        .spawn(async move {
            let client = Arc::new(RpcClient::new(identity("doomed"), rpc_config()));
            let l = DistLocker::new(addrs, client, config(1_000, 5_000)).unwrap();
            let g = l.lock("bucket/key").await.unwrap();
            // The process dies holding the lock: no destructor runs, nothing is unlocked.
            std::mem::forget(g);
            std::mem::forget(l);
        })
        .await
        .unwrap();
    // Let it refresh at least once before it dies (refresh every lease / 3).
    tokio::time::sleep(Duration::from_millis(500)).await;
    doomed.shutdown_background();
    let died = Instant::now();

    let other = nodes.locker("survivor", config(1_000, 200));
    let e = other.lock("bucket/key").await.unwrap_err();
    assert!(matches!(e, Error::LockTimeout { .. }), "{e}");

    let other = nodes.locker("survivor2", config(1_000, 5_000));
    let _g = other.lock("bucket/key").await.unwrap();
    let waited = died.elapsed();
    // The last refresh was at most lease / 3 before the death.
    assert!(waited >= lease / 2, "acquired after only {waited:?}");
    assert!(waited < lease + Duration::from_millis(1_500), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lock_server_of_three_down_still_grants() {
    let mut nodes = Nodes::start(3).await;
    nodes.stop(2).await;
    let a = nodes.locker("a", config(30_000, 5_000));
    let b = nodes.locker("b", config(30_000, 1_000));
    let g = a.lock("bucket/key").await.unwrap();
    // Still exclusive with one node down.
    let e = b.lock("bucket/key").await.unwrap_err();
    match e {
        Error::LockTimeout {
            granted,
            need,
            unreachable,
            ..
        } => assert_eq!((granted, need, unreachable), (0, 2, 1)),
        other => panic!("expected a lock timeout, got {other}"),
    }
    drop(g);
    let _g = b.lock("bucket/other").await.unwrap();
    let _g = tokio::time::timeout(Duration::from_secs(5), b.lock("bucket/key"))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lock_servers_of_three_down_fail_within_the_timeout() {
    let mut nodes = Nodes::start(3).await;
    nodes.stop(0).await;
    nodes.stop(1).await;
    let a = nodes.locker("a", config(30_000, 1_000));
    let start = Instant::now();
    let e = a.lock("bucket/key").await.unwrap_err();
    let took = start.elapsed();
    match &e {
        Error::LockTimeout {
            resource,
            granted,
            need,
            nodes: n,
            unreachable,
            ..
        } => {
            assert_eq!(resource, "bucket/key");
            assert_eq!((*granted, *need, *n, *unreachable), (1, 2, 3, 2));
        }
        other => panic!("expected a lock timeout, got {other}"),
    }
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(2_500),
        "{took:?}"
    );
    assert_eq!(a.stats().timeouts, 1);
    // The partial grant on the surviving node was given back.
    eventually("partial grant released", Duration::from_secs(3), || {
        nodes.tables[2].is_empty()
    })
    .await;
}

/// A refresh that loses quorum is counted (and logged); the holder learns it from the servers'
/// "not held" answers after its lease was taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cut_off_from_the_quorum_notices_at_refresh() {
    let mut nodes = Nodes::start(3).await;
    let a = nodes.locker("a", config(300, 5_000));
    let _g = a.lock("bucket/key").await.unwrap();
    nodes.stop(0).await;
    nodes.stop(1).await;
    eventually("refresh below quorum", Duration::from_secs(3), || {
        a.stats().refresh_lost > 0
    })
    .await;
}

/// A lock server whose answers arrive late (granted at once, answered after `delay`).
struct SlowReplies {
    inner: Arc<LockServer>,
    delay: Duration,
}

impl Handler for SlowReplies {
    async fn handle(&self, method: u16, payload: Bytes) -> Result<Bytes, RpcError> {
        let r = self.inner.handle(method, payload).await;
        if method == METHOD_LOCK {
            tokio::time::sleep(self.delay).await;
        }
        r
    }
}

/// An acquisition abandoned while its grants are on the way back (the S3 client went away) gives
/// them back at once: the name is not blocked for a whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_acquisition_releases_its_grants() {
    let mut tables = Vec::new();
    let mut servers = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..3 {
        let table = Arc::new(LockServer::default());
        let slow = Arc::new(SlowReplies {
            inner: table.clone(),
            delay: Duration::from_millis(300),
        });
        let s = RpcServer::bind(
            "127.0.0.1:0",
            identity(&format!("slow{i}")),
            rpc_config(),
            slow,
        )
        .await
        .unwrap();
        addrs.push(s.local_addr().to_string());
        servers.push(s);
        tables.push(table);
    }
    let client = Arc::new(RpcClient::new(identity("a"), rpc_config()));
    let a = DistLocker::new(addrs.clone(), client, config(30_000, 5_000)).unwrap();
    // Warm the connections so the LOCK requests leave at once.
    let _ = a.lock("warm-up").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = tokio::time::timeout(Duration::from_millis(150), a.lock("bucket/key")).await;
    assert!(r.is_err(), "the lock should still be on its way");
    // The grants were made (the servers answer late), then released well before the lease.
    for t in &tables {
        eventually("abandoned grants released", Duration::from_secs(2), || {
            t.is_empty()
        })
        .await;
    }
    let client = Arc::new(RpcClient::new(identity("b"), rpc_config()));
    let b = DistLocker::new(addrs, client, config(30_000, 3_000)).unwrap();
    let _g = b.lock("bucket/key").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_server_over_rpc_refuses_bad_requests() {
    let nodes = Nodes::start(1).await;
    let client = RpcClient::new(identity("probe"), rpc_config());
    let peer = &nodes.addrs[0];
    let t = Duration::from_secs(2);
    let e = client
        .call_with_timeout(peer, 205, Bytes::new(), t)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(codes::UNKNOWN_METHOD), "{e}");
    let e = client
        .call_with_timeout(peer, METHOD_LOCK, Bytes::from_static(&[1, 2, 3]), t)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(codes::BAD_REQUEST), "{e}");
    let req = dsync::LockRequest {
        resource: "b/k".into(),
        uid: Uuid::new_v4(),
        lease: Duration::from_secs(5),
    };
    let enc = dsync::encode_request(&req).unwrap();
    let r = client
        .call_with_timeout(peer, METHOD_LOCK, enc.clone(), t)
        .await
        .unwrap();
    assert_eq!(dsync::decode_reply(&r), Ok(dsync::LockReply::Granted));
    assert_eq!(nodes.tables[0].len(), 1);
    let r = client
        .call_with_timeout(peer, METHOD_UNLOCK, enc, t)
        .await
        .unwrap();
    assert_eq!(dsync::decode_reply(&r), Ok(dsync::LockReply::Granted));
    assert!(nodes.tables[0].is_empty());
}
