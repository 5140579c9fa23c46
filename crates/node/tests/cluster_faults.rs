//! The object layer over a cluster-shaped erasure set whose drives are remote, with faults in the
//! data plane: the randomized model run of `fault_injection.rs` (`faults/model.rs`), with every
//! drive a `RemoteDrive` of an in-process node (its own `RpcServer` and `DriveServer` over local
//! drives on tmpfs, on 127.0.0.1), and the shard transfers (reads and appends) going through a
//! `FaultyDataPlane` over the real `TcpDataPlane`: drops, lost answers, delays, stalls past the
//! timeout, resets that cut the TCP data connection mid-transfer, partitions (see
//! `faults/dataplane.rs`). The control plane (metadata, renames, listings, locks) is not faulted.
//! Locks are granted by the nodes, as in a cluster (`DistLocker`).
//!
//! Shapes: 4 nodes x 1 drive (2+2), with small pooled buffers and appends, so every shard read
//! is a pipelined read of several buffers and a shard many appends; 3 nodes x 2 drives
//! (3+3), with one buffer per read, where one node's faults touch two drives of the set; and the
//! 4-node shape again with up to every drive faulty (beyond parity).
//!
//! Runs `QUARRY_FAULT_SEEDS` seeds (default 8 per shape, 4 beyond parity) of
//! `QUARRY_FAULT_OPS` operations (default 60); `QUARRY_FAULT_SEED=<n>` runs that one seed only
//! (to replay a failure), `QUARRY_FAULT_BASE_SEED` moves the first seed. The invariants are the
//! model's, plus, once the faults stop: every pooled buffer of the data plane is back in its pool
//! and no shard writer is left open on any node.

// The drive faults and the randomized model run are shared with quarry-object's fault tests.
#[path = "../../object/tests/faults/mod.rs"]
mod faults;
mod faulty_dataplane;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use faults::model::{cfg, format_seeded, run_many, temp_dir, Injector, Run, Shape, Totals};
use faulty_dataplane::{DataPlaneFaultStats, DataPlaneFaults, FaultyDataPlane};
use quarry_disk::{Drive, LocalDrive};
use quarry_net::{
    ClusterSecret, DataPlane, DriveServer, Handler, Identity, RemoteDrive, RemoteDriveConfig,
    RpcClient, RpcConfig, RpcError, RpcServer, TcpDataPlane, TcpDataPlaneConfig,
};
use quarry_node::dsync::{DistLocker, DistLockerConfig, LockServer};
use quarry_object::{ErasureServer, Locker, ObjectConfig, RuntimeHandle};
use uuid::Uuid;

const SECRET: &[u8] = b"cluster-faults-test-secret";

/// Bound on one data-plane transfer, and so on a stall: long enough that a clean transfer on a
/// busy machine never reaches it (a spurious timeout would fail the "nothing fails with no
/// faulty drive" invariant), short enough that the stalls stay cheap.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(1);

/// Bound on every operation of the run: a few stalls in a row fit in it.
const OP_TIMEOUT: Duration = Duration::from_secs(20);

fn identity(node: &str) -> Identity {
    Identity {
        deployment_id: Uuid::from_u128(0xc105_7e12),
        node_id: node.into(),
        secret: ClusterSecret::new(SECRET).unwrap(),
    }
}

fn rpc_config() -> RpcConfig {
    RpcConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(1),
        handshake_timeout: Duration::from_secs(2),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        ..RpcConfig::default()
    }
}

/// A cluster shape.
#[derive(Debug, Clone, Copy)]
struct ClusterShape {
    nodes: usize,
    drives_per_node: usize,
    /// Bytes of each pooled buffer of the client's data plane.
    buf_size: usize,
    buffers: usize,
    /// Bytes per shard append of gathered writes (heals and part uploads write their shards so;
    /// a PUT sends each framed chunk as its own append).
    append_chunk: usize,
}

impl ClusterShape {
    fn drives(&self) -> usize {
        self.nodes * self.drives_per_node
    }

    /// Node and drive index on it of set position `p`: positions go round-robin over the nodes,
    /// as a cluster's sets span its nodes.
    fn position(&self, p: usize) -> (usize, usize) {
        (p % self.nodes, p / self.nodes)
    }
}

/// 2+2 over four nodes; a 16 KiB block's 8 KiB chunk spans three 4 KiB buffers, and healed and
/// uploaded parts go in 4 KiB appends (a 5 MiB part in hundreds per drive).
const FOUR_NODES: ClusterShape = ClusterShape {
    nodes: 4,
    drives_per_node: 1,
    buf_size: 4096,
    buffers: 512,
    append_chunk: 4096,
};

/// 3+3 over three nodes of two drives; one buffer per shard read, 64 KiB appends.
const THREE_NODES_SIX_DRIVES: ClusterShape = ClusterShape {
    nodes: 3,
    drives_per_node: 2,
    buf_size: 64 << 10,
    buffers: 128,
    append_chunk: 64 << 10,
};

/// What a node answers its peers: drive calls and lock calls (as `cluster::NodeService` does,
/// without its node-info call, which needs a topology of fixed addresses).
struct NodeHandler {
    drives: Arc<DriveServer>,
    locks: Arc<LockServer>,
}

impl Handler for NodeHandler {
    async fn handle(&self, method: u16, payload: bytes::Bytes) -> Result<bytes::Bytes, RpcError> {
        if quarry_net::methods::Service::of(method) == Some(quarry_net::methods::Service::Lock) {
            self.locks.handle(method, payload).await
        } else {
            self.drives.handle(method, payload).await
        }
    }
}

/// What a run's set runs on: dropped (servers stopped, temp dirs removed) with the run.
struct Cluster {
    _dir: tempfile::TempDir,
    _servers: Vec<RpcServer>,
}

/// The faults of the set's drives, in the data plane.
struct NetFaults {
    plane: Arc<FaultyDataPlane>,
    /// Per set position, the node and the drive index on it.
    positions: Vec<(u64, u16)>,
    drive_servers: Vec<Arc<DriveServer>>,
}

#[async_trait::async_trait]
impl Injector for NetFaults {
    fn drives(&self) -> usize {
        self.positions.len()
    }

    fn set_faulty(&self, which: &[usize]) {
        for (i, &(node, drive)) in self.positions.iter().enumerate() {
            self.plane
                .set_faults(node, drive, which.contains(&i).then(DataPlaneFaults::chaos));
        }
    }

    fn any_faulty(&self) -> bool {
        self.positions
            .iter()
            .any(|&(node, drive)| self.plane.faulty(node, drive))
    }

    fn set_step(&self, step: u64) {
        self.plane.set_step(step);
    }

    /// Every pooled buffer is back in the client's pool (a transfer cut by a reset, a stall or
    /// a lost answer gave its buffers back), and no node still holds a shard writer open (every
    /// failed write closed its remote writers). Background work of the last operations (the
    /// shard check after a GET, aborts sent in the background) may still run for a moment.
    async fn check_quiet(&self) -> Result<u64, String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let in_use = self.plane.pool().stats().in_use;
            let writers: Vec<usize> = self
                .drive_servers
                .iter()
                .map(|d| d.open_writers())
                .collect();
            if in_use == 0 && writers.iter().all(|&w| w == 0) {
                return Ok(2);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "after the faults stopped, {in_use} pooled buffers are still in use and the \
                     nodes hold {writers:?} shard writers open"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Starts the nodes of `shape`, a client whose data plane is a `FaultyDataPlane` seeded with
/// `seed` over a `TcpDataPlane`, and the set over the client's `RemoteDrive`s.
async fn cluster_run(
    seed: u64,
    shape: ClusterShape,
    stats: Arc<DataPlaneFaultStats>,
    log: Arc<Mutex<Vec<String>>>,
) -> Run {
    let dir = temp_dir();
    // The set's drives in set order, each on its node's tmp dir.
    let mut locals = Vec::with_capacity(shape.drives());
    for p in 0..shape.drives() {
        let (node, index) = shape.position(p);
        let path: PathBuf = dir.path().join(format!("node{node}/d{index}"));
        locals.push(LocalDrive::open(path).await.unwrap());
    }
    let deployment = format_seeded(&locals, seed).await;

    let mut servers = Vec::with_capacity(shape.nodes);
    let mut drive_servers = Vec::with_capacity(shape.nodes);
    let mut addrs = Vec::with_capacity(shape.nodes);
    for node in 0..shape.nodes {
        let mine: Vec<Arc<dyn Drive>> = (0..shape.drives_per_node)
            .map(|index| {
                let p = index * shape.nodes + node;
                assert_eq!(shape.position(p), (node, index));
                Arc::new(locals[p].clone()) as Arc<dyn Drive>
            })
            .collect();
        let drives = Arc::new(DriveServer::new(mine));
        let handler = Arc::new(NodeHandler {
            drives: drives.clone(),
            locks: Arc::new(LockServer::default()),
        });
        let server = RpcServer::bind(
            "127.0.0.1:0",
            identity(&format!("node{node}")),
            rpc_config(),
            handler,
        )
        .await
        .unwrap();
        addrs.push(server.local_addr().to_string());
        servers.push(server);
        drive_servers.push(drives);
    }

    let client = RpcClient::new(identity("client"), rpc_config());
    let tcp = TcpDataPlane::new(
        identity("client"),
        TcpDataPlaneConfig {
            transfer_timeout: TRANSFER_TIMEOUT,
            buf_size: shape.buf_size,
            buffers: shape.buffers,
            ..TcpDataPlaneConfig::from_rpc(&rpc_config())
        },
    )
    .unwrap();
    let plane = Arc::new(FaultyDataPlane::new(
        Arc::new(tcp),
        seed,
        TRANSFER_TIMEOUT,
        stats,
    ));
    for (node, addr) in addrs.iter().enumerate() {
        plane.add_peer(addr, node as u64);
    }
    if client.set_data_plane(plane.clone()).is_err() {
        panic!("the client's data plane was set already");
    }
    let drive_config = RemoteDriveConfig {
        append_chunk: shape.append_chunk,
        ..RemoteDriveConfig::for_client(&client)
    };
    let mut drives: Vec<Arc<dyn Drive>> = Vec::with_capacity(shape.drives());
    let mut positions = Vec::with_capacity(shape.drives());
    for p in 0..shape.drives() {
        let (node, index) = shape.position(p);
        let remote = RemoteDrive::with_config(
            client.clone(),
            addrs[node].clone(),
            index as u16,
            format!("http://{}/d{index}", addrs[node]),
            drive_config.clone(),
        );
        assert_eq!(remote.data_plane().name(), "tcp");
        drives.push(Arc::new(remote));
        positions.push((node as u64, index as u16));
    }
    let locker = DistLocker::new(
        addrs.iter().cloned(),
        Arc::new(client.clone()),
        DistLockerConfig::default(),
    )
    .unwrap();
    // Ids, times and background heals from the seed (see faults::StepRuntime).
    let runtime = faults::StepRuntime::new(seed);
    let layer = ErasureServer::open_sets(
        deployment,
        vec![(drives, Some(Arc::new(locker) as Arc<dyn Locker>))],
        ObjectConfig {
            runtime: RuntimeHandle::new(runtime.clone()),
            ..cfg()
        },
    )
    .unwrap();
    let faults = NetFaults {
        plane,
        positions,
        drive_servers,
    };
    let cluster = Cluster {
        _dir: dir,
        _servers: servers,
    };
    let mut run = Run::new(seed, layer, Box::new(faults), Box::new(cluster), log)
        .await
        .with_stepped_runtime(runtime);
    run.timeout = OP_TIMEOUT;
    run
}

/// Runs the seeds of one cluster shape, with at most `max_faulty` drives faulty at once (default:
/// the set's parity), and checks that the faults were injected. Returns the seeds' totals.
async fn cluster_many(
    shape: ClusterShape,
    max_faulty: Option<usize>,
    default_seeds: u64,
    base_seed: u64,
    test: &str,
) -> Totals {
    let stats = Arc::new(DataPlaneFaultStats::default());
    let drives = if shape.drives_per_node == 1 {
        "drive"
    } else {
        "drives"
    };
    let beyond = if max_faulty.is_some() {
        ", beyond parity"
    } else {
        ""
    };
    let name = format!(
        "{}-node x {}-{drives} cluster{beyond}",
        shape.nodes, shape.drives_per_node
    );
    let label = format!(
        "data-plane fault injection, {} nodes x {} {drives}{beyond}",
        shape.nodes, shape.drives_per_node
    );
    let replay = format!("cargo test -p quarry-node --test cluster_faults {test}");
    let shape_of_run = Shape {
        name: &name,
        label: &label,
        replay: &replay,
        base_seed,
        seeds: default_seeds,
        max_faulty,
    };
    let setup = |seed, log| cluster_run(seed, shape, stats.clone(), log);
    let started = Instant::now();
    let totals = run_many(&shape_of_run, setup, || stats.summary()).await;
    println!(
        "{label}: {} seeds in {:.1} s",
        totals.seeds,
        started.elapsed().as_secs_f64()
    );
    // A run that injected no fault of a kind tested nothing of it. Over the default seeds (and
    // more) every kind occurs many times; a replayed seed, or a few, may lack some.
    if std::env::var_os("QUARRY_FAULT_SEED").is_none() && totals.seeds >= default_seeds {
        let missing = stats.missing_kinds();
        assert!(
            missing.is_empty(),
            "{name}: no {missing:?} injected in {} seeds: {}",
            totals.seeds,
            stats.summary()
        );
    }
    totals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_data_plane_faults_four_nodes() {
    let test = "randomized_data_plane_faults_four_nodes";
    cluster_many(FOUR_NODES, None, 8, 74_000, test).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_data_plane_faults_three_nodes_six_drives() {
    let test = "randomized_data_plane_faults_three_nodes_six_drives";
    cluster_many(THREE_NODES_SIX_DRIVES, None, 8, 76_000, test).await;
}

/// Up to every drive faulty: writes and reads fail often (and writes fail part-way, on some
/// drives only); wrong bytes are still never allowed, and once the faults stop and every key is
/// healed everything acknowledged is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_data_plane_faults_beyond_parity() {
    let test = "randomized_data_plane_faults_beyond_parity";
    let totals = cluster_many(FOUR_NODES, Some(4), 4, 94_000, test).await;
    assert!(
        totals.op_errors > 0 || totals.seeds < 4,
        "no operation failed in {} seeds with up to every drive faulty",
        totals.seeds
    );
}

/// One node serving one local drive that holds the shard file `b/k/<dd>/part.1`, and a client
/// data plane to it: a `FaultyDataPlane` over a `TcpDataPlane` (kept, to look at its connections).
struct OneNode {
    _dir: tempfile::TempDir,
    server: RpcServer,
    addr: String,
    client: RpcClient,
    tcp: Arc<TcpDataPlane>,
    plane: Arc<FaultyDataPlane>,
    stats: Arc<DataPlaneFaultStats>,
    dd: Uuid,
    data: Vec<u8>,
}

/// Bound on each step of the direct tests.
async fn t<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .expect("test step hung")
}

impl OneNode {
    async fn new(seed: u64, timeout: Duration) -> OneNode {
        use quarry_disk::Drive as _;
        let dir = temp_dir();
        let local = LocalDrive::open(dir.path().join("d0")).await.unwrap();
        local.make_volume("b").await.unwrap();
        let dd = Uuid::new_v4();
        let data: Vec<u8> = (0..64 << 10).map(|i| (i * 7 + i / 251) as u8).collect();
        let shard_dir = local.root().join("b/k").join(dd.to_string());
        std::fs::create_dir_all(&shard_dir).unwrap();
        std::fs::write(shard_dir.join("part.1"), &data).unwrap();
        let handler = Arc::new(DriveServer::new(vec![Arc::new(local) as Arc<dyn Drive>]));
        let server = RpcServer::bind("127.0.0.1:0", identity("node0"), rpc_config(), handler)
            .await
            .unwrap();
        let addr = server.local_addr().to_string();
        let tcp = Arc::new(
            TcpDataPlane::new(
                identity("client"),
                TcpDataPlaneConfig {
                    buf_size: 4096,
                    buffers: 64,
                    ..TcpDataPlaneConfig::from_rpc(&rpc_config())
                },
            )
            .unwrap(),
        );
        let stats = Arc::new(DataPlaneFaultStats::default());
        let plane = Arc::new(FaultyDataPlane::new(
            tcp.clone(),
            seed,
            timeout,
            stats.clone(),
        ));
        plane.add_peer(&addr, 0);
        OneNode {
            _dir: dir,
            server,
            addr,
            client: RpcClient::new(identity("client"), rpc_config()),
            tcp,
            plane,
            stats,
            dd,
            data,
        }
    }

    fn faults(&self, cfg: Option<DataPlaneFaults>) {
        self.plane.set_faults(0, 0, cfg);
    }

    fn range(&self, offset: u64, len: usize) -> quarry_net::ShardRange<'_> {
        quarry_net::ShardRange {
            bucket: "b",
            key: "k",
            data_dir: self.dd,
            part: 1,
            offset,
            len,
        }
    }

    async fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, quarry_net::DataPlaneError> {
        let d = t(self
            .plane
            .read_shard(&self.addr, 0, &self.range(offset, len)))
        .await?;
        Ok(d.into_bytes().to_vec())
    }

    /// Requests the node has received, over all its connections.
    fn requests(&self) -> u64 {
        self.server.stats().requests
    }

    /// Opens a shard writer on the node over the control RPC (as `RemoteDrive` does).
    async fn open_writer(&self) -> Uuid {
        use quarry_net::drive_proto::{self, Request, Response};
        let (method, payload) = drive_proto::encode_request(
            0,
            &Request::ShardOpen {
                tmp_id: Uuid::new_v4(),
                data_dir: Uuid::new_v4(),
                part: 1,
            },
        );
        let answer = t(self.client.call(&self.addr, method, payload))
            .await
            .unwrap();
        match drive_proto::decode_response(answer).unwrap() {
            Response::Writer(id) => id,
            other => panic!("ShardOpen answered {other:?}"),
        }
    }

    /// Finishes writer `id` after `appends` appends: fails unless they all arrived, in order.
    async fn finish_writer(&self, id: Uuid, appends: u64) -> Result<(), RpcError> {
        use quarry_net::drive_proto::{self, Request};
        let (method, payload) = drive_proto::encode_request(
            0,
            &Request::ShardFinish {
                writer: id,
                appends,
            },
        );
        t(self.client.call(&self.addr, method, payload))
            .await
            .map(|_| ())
    }
}

fn only(f: impl FnOnce(&mut DataPlaneFaults)) -> Option<DataPlaneFaults> {
    let mut cfg = DataPlaneFaults::default();
    f(&mut cfg);
    Some(cfg)
}

/// Each kind of fault does what the randomized test counts it as: a drop sends nothing, a lost
/// answer lets the call take effect (an append is written), a reset cuts the real TCP connection
/// mid-transfer, a stall ends at the timeout with the real `Timeout`, a partition sends nothing;
/// every one is a typed error, and with the faults off the same calls work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_kind_does_what_it_says() {
    use quarry_net::DataPlaneError as E;
    let n = OneNode::new(1, Duration::from_millis(300)).await;
    let want = n.data[100..100 + 9000].to_vec();
    assert_eq!(n.read(100, 9000).await.unwrap(), want);
    assert_eq!(n.tcp.idle_connections(&n.addr), 1);

    // Drop: an error, and the node saw no request.
    n.faults(only(|c| c.drop = 1.0));
    let before = n.requests();
    for i in 0..6 {
        let e = n.read(i, 100).await.unwrap_err();
        assert!(e.is_unreachable(), "{e:?}");
    }
    assert_eq!(n.requests(), before);
    assert_eq!(n.stats.drops.load(std::sync::atomic::Ordering::Relaxed), 6);

    // Lost answer of an append: the caller gets an error, but the append was written: the next
    // one, sent cleanly, completes the writer.
    let w = n.open_writer().await;
    n.faults(only(|c| c.lost_answer = 1.0));
    let e = t(n
        .plane
        .append_shard(&n.addr, 0, w, 0, bytes::Bytes::from_static(b"first")))
    .await
    .unwrap_err();
    assert!(matches!(e, E::ConnectionLost { .. }), "{e:?}");
    n.faults(None);
    t(n.plane
        .append_shard(&n.addr, 0, w, 1, bytes::Bytes::from_static(b"second")))
    .await
    .unwrap();
    n.finish_writer(w, 2).await.unwrap();
    // A dropped append, by contrast, never arrives: the writer cannot be finished.
    let w = n.open_writer().await;
    n.faults(only(|c| c.drop = 1.0));
    t(n.plane
        .append_shard(&n.addr, 0, w, 0, bytes::Bytes::from_static(b"first")))
    .await
    .unwrap_err();
    n.faults(None);
    t(n.plane
        .append_shard(&n.addr, 0, w, 1, bytes::Bytes::from_static(b"second")))
    .await
    .unwrap();
    assert!(n.finish_writer(w, 2).await.is_err());

    // Reset at once: the transfer started (the request went out) and was cut before its
    // answer; its connection is gone, not back in the idle set.
    assert_eq!(n.read(0, 100).await.unwrap(), n.data[..100]);
    // Every call so far ran one at a time: they shared one connection.
    assert_eq!(n.tcp.idle_connections(&n.addr), 1);
    let connects = n.tcp.stats().connects;
    // Cut after the first poll (the request went out). A loaded machine can still let the whole
    // answer arrive within that poll (the thread was descheduled between its write and its read):
    // then the reset took only the answer and the connection went back idle, so it is tried again.
    n.faults(only(|c| {
        c.reset = 1.0;
        c.reset_max_polls = 1;
        c.reset_max_ms = 1_000;
    }));
    let mid = || {
        n.stats
            .resets_mid_transfer
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    for _ in 0..5 {
        let e = n.read(0, 20_000).await.unwrap_err();
        assert!(matches!(e, E::ConnectionLost { .. }), "{e:?}");
        if mid() > 0 {
            break;
        }
    }
    assert_eq!(mid(), 1);
    assert_eq!(n.tcp.idle_connections(&n.addr), 0);
    // Nothing leaked: the cut transfer's buffers are back, and the next read is exact.
    assert_eq!(n.tcp.pool().stats().in_use, 0);
    n.faults(None);
    assert_eq!(n.read(7, 20_000).await.unwrap(), n.data[7..20_007]);
    // On a new connection: the cut one was not reused.
    assert_eq!(n.tcp.stats().connects, connects + 1);

    // Stalls: each call ends by the timeout (300 ms), late but right, or with `Timeout`.
    n.faults(only(|c| c.stall = 1.0));
    let (mut late, mut timed_out) = (0, 0);
    for i in 0..8u64 {
        let start = Instant::now();
        match n.read(i, 5000).await {
            Ok(b) => {
                assert_eq!(b, n.data[i as usize..i as usize + 5000]);
                late += 1;
            }
            Err(E::Timeout { after, .. }) => {
                assert_eq!(after, Duration::from_millis(300));
                timed_out += 1;
            }
            Err(e) => panic!("a stall failed with {e:?}"),
        }
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(140) && took < Duration::from_millis(1000),
            "a stall took {took:?}"
        );
    }
    assert!(
        late > 0 && timed_out > 0,
        "{late} late, {timed_out} timed out"
    );
    assert_eq!(n.tcp.pool().stats().in_use, 0);

    // Partition: from the next step on, every call fails and nothing is sent.
    n.faults(only(|c| {
        c.partition = 1.0;
        c.partition_steps = 2
    }));
    n.plane.set_step(1);
    let before = n.requests();
    for i in 0..4 {
        let e = n.read(i, 100).await.unwrap_err();
        assert!(matches!(e, E::PeerDown { .. }), "{e:?}");
    }
    assert_eq!(n.requests(), before);
    n.faults(None);
    assert_eq!(n.read(0, 100).await.unwrap(), n.data[..100]);
}

/// The fate of a call depends on the seed, the node's number (not its port), the step and the
/// call, not on when it is made: two planes with the same seed, to two nodes on different ports,
/// inject the same faults into the same calls; another seed injects others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fates_replay_from_the_seed_not_the_port() {
    async fn outcomes(seed: u64) -> Vec<String> {
        let n = OneNode::new(seed, Duration::from_millis(200)).await;
        n.faults(Some(DataPlaneFaults {
            stall: 0.0,
            ..DataPlaneFaults::chaos()
        }));
        let mut out = Vec::new();
        for step in 0..4 {
            n.plane.set_step(step);
            for i in 0..25u64 {
                out.push(match n.read(i * 13, 3000).await {
                    Ok(b) => {
                        assert_eq!(b, n.data[(i * 13) as usize..(i * 13) as usize + 3000]);
                        "ok".to_string()
                    }
                    Err(e) => e.kind().to_string(),
                });
            }
        }
        out
    }
    let a = outcomes(42).await;
    let b = outcomes(42).await;
    let c = outcomes(43).await;
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(
        a.iter().any(|o| o == "ok") && a.iter().any(|o| o != "ok"),
        "{a:?}"
    );
}
