//! Test harness for Quarry's integration tests: starts a real `quarry` process on temporary drive
//! directories and hands out S3 clients for it, plus the small helpers the tests share (random data,
//! MD5 ETags, S3 error XML, hand-signed SigV4 requests and the on-disk layout of a drive).
//!
//! The harness builds nothing: it runs the binary at `$QUARRY_BIN`, or `<workspace>/target/debug/quarry`.
//! Run `cargo build -p quarry` first (scripts/test does).
//!
//! Every test starts its own server on its own port and temporary directories, so tests run in
//! parallel. The process is killed and reaped when the [`TestServer`] is dropped.

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::Client;
use md5::{Digest as _, Md5};
use rand::RngCore;
use sha2::Sha256;

pub use aws_sdk_s3;

/// Access key the harness gives every server it starts (unless told to let the server generate one).
pub const ACCESS_KEY: &str = "quarrytestadmin";
/// Secret key matching [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "quarry-test-secret-key-0123456789";
/// The only region Quarry serves.
pub const REGION: &str = "us-east-1";
/// The virtual-host domain every test server is started with (`QUARRY_DOMAIN`): a request whose
/// Host is `<bucket>.s3.quarry.test[:port]` addresses that bucket. Any other host is path style.
pub const VHOST_DOMAIN: &str = "s3.quarry.test";

/// The bearer token that opens `/metrics` on every server the harness starts
/// (`QUARRY_METRICS_TOKEN`; `/metrics` is closed by default). See [`metrics_get`].
pub const METRICS_TOKEN: &str = "quarry-test-metrics-token-0123456789";

/// `GET url` (a `/metrics` URL) with the harness's metrics bearer token.
pub async fn metrics_get(url: &str) -> reqwest::Response {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
        .get(url)
        .bearer_auth(METRICS_TOKEN)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// How long to wait for `/health/live` after spawning the process.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How credentials reach the server.
#[derive(Debug, Clone)]
pub enum CredentialMode {
    /// `QUARRY_ROOT_USER` / `QUARRY_ROOT_PASSWORD` set to [`ACCESS_KEY`] / [`SECRET_KEY`].
    Fixed,
    /// No credential env: the server generates (or reloads) its own and prints them on stdout.
    Generated,
}

/// A running `quarry server` on temporary drives: one process, or the nodes of a cluster.
///
/// With `QUARRY_TEST_CLUSTER=1` in the environment, [`TestServer::start`] with 2 to 4 drives
/// starts a cluster instead: one node process per drive, every node on its own port, the drives
/// forming one erasure set that spans the nodes. Requests go through one "front" node, chosen
/// round-robin across servers, so the suite reaches every node; the data moves between nodes.
/// That is how the whole S3 suite runs against a cluster.
pub struct TestServer {
    procs: Vec<Proc>,
    /// The node requests go to.
    front: usize,
    root: tempfile::TempDir,
    /// Every drive; in a cluster, node `i`'s drives are `dirs[i * per_node..(i + 1) * per_node]`.
    dirs: Vec<PathBuf>,
    mode: CredentialMode,
    access_key: String,
    secret_key: String,
    starts: u32,
    /// `--set-size` of a cluster (`None`: single node).
    set_size: Option<usize>,
    /// Extra environment of every process (see [`TestServer::set_env`]).
    env: Vec<(String, String)>,
    /// HTTPS: the test CA whose certificate every node serves (see [`TestServer::start_https`]).
    tls: Option<TestTls>,
    /// The drive URLs are `https://`: internode mutual TLS (see [`TestServer::start_cluster_tls`]).
    internode_tls: bool,
    /// Certificate directories of single nodes, instead of [`TestTls::dir`].
    node_certs: Vec<(usize, PathBuf)>,
}

/// The TLS set-up of an HTTPS test server: a CA of its own, and the certificate directory
/// (`<root>/certs`, in the server's layout) every node is started with (`QUARRY_CERTS_DIR`).
pub struct TestTls {
    pub ca: quarry_tls::generate::Ca,
    pub dir: PathBuf,
}

impl TestTls {
    /// A new CA, and a certificate for `127.0.0.1` and `localhost` signed by it in `dir`.
    pub fn create(dir: &Path) -> TestTls {
        use quarry_tls::generate::{write_certs_dir, Ca, Validity};
        let ca = Ca::new("Quarry test CA", Validity::days(30)).expect("make a test CA");
        let leaf = ca
            .issue(
                &["127.0.0.1".to_string(), "localhost".to_string()],
                Validity::days(30),
            )
            .expect("issue a test certificate");
        write_certs_dir(dir, &leaf, &ca.pem().cert).expect("write the test certificates");
        TestTls {
            ca,
            dir: dir.to_path_buf(),
        }
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca.pem().cert
    }

    /// A reqwest client that trusts the test CA (and nothing else).
    pub fn reqwest(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .use_preconfigured_tls(
                quarry_tls::client_config_trusting(self.ca_pem().as_bytes()).expect("CA config"),
            )
            .timeout(Duration::from_secs(20))
            .build()
            .expect("https client")
    }
}

/// One `quarry server` process.
struct Proc {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

/// Whether the suite runs against clusters (`QUARRY_TEST_CLUSTER=1`).
pub fn cluster_mode() -> bool {
    std::env::var("QUARRY_TEST_CLUSTER").is_ok_and(|v| v == "1")
}

/// The path of the quarry binary the tests run.
pub fn quarry_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("QUARRY_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
        });
    target.join("debug").join("quarry")
}

/// A port that was free a moment ago and that this process has not handed out before: the kernel
/// may give the port it just released to the next bind, and two nodes of one cluster on the same
/// port would make one node of two drives (seen once: "every node must have the same number of
/// drives"). Nor has another test process in the last [`PORT_CLAIM_AGE`] ([`claim_port`]):
/// under nextest every test is a process. Other programs may still take it: callers retry on
/// "in use".
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
        let port = l
            .local_addr()
            .expect("local_addr of a bound listener")
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) && claim_port(port) {
            return port;
        }
    }
}

/// How long a port handed out by one test process is not handed out by another.
const PORT_CLAIM_AGE: Duration = Duration::from_secs(15 * 60);

/// Claims `port` for this process among the test processes of this machine: a file named after
/// it in `$TMPDIR/quarry-test-ports`, made with `create_new`. A claim older than
/// [`PORT_CLAIM_AGE`] is stale and taken over. `true` where claims cannot be kept (the directory
/// cannot be made): the in-process memory and the callers' retries remain.
fn claim_port(port: u16) -> bool {
    let dir = std::env::temp_dir().join("quarry-test-ports");
    if fs::create_dir_all(&dir).is_err() {
        return true;
    }
    let path = dir.join(port.to_string());
    let create = || {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
    };
    match create() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let stale = fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > PORT_CLAIM_AGE);
            // Of two processes taking over one stale claim, one makes the file again.
            stale && fs::remove_file(&path).is_ok() && create().is_ok()
        }
        Err(_) => true,
    }
}

/// Whether process `pid` holds a socket listening on TCP `port`, read from `/proc` (the
/// listening sockets of the port, and the process's descriptors). `true` where `/proc` cannot
/// say.
fn listens_on(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    let mut sockets = BTreeSet::new();
    let mut read_any = false;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = fs::read_to_string(table) else {
            continue;
        };
        read_any = true;
        // sl local_address rem_address st ... inode: the state 0A is LISTEN.
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[1].ends_with(&want) && f[3] == "0A" {
                sockets.insert(format!("socket:[{}]", f[9]));
            }
        }
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return !read_any;
    };
    fds.flatten().any(|e| {
        fs::read_link(e.path()).is_ok_and(|l| sockets.contains(l.to_string_lossy().as_ref()))
    })
}

/// Spreads the front node of cluster test servers over the nodes.
static NEXT_FRONT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The master keys every test server's key service has: `testkey-1` (the default) and
/// `testkey-2`.
pub const KMS_TEST_KEYS: &str = "testkey-1:MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE=,testkey-2:MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI=";

impl TestServer {
    /// Starts a server on `drives` fresh temporary drive directories, with the fixed test
    /// credentials (a cluster of `drives` nodes in cluster mode, see [`TestServer`]).
    pub async fn start(drives: usize) -> TestServer {
        Self::start_with(drives, CredentialMode::Fixed).await
    }

    /// Starts a server on `drives` fresh temporary drive directories with the given credential
    /// mode. A cluster needs given credentials: with `Generated` it is always one process.
    pub async fn start_with(drives: usize, mode: CredentialMode) -> TestServer {
        if cluster_mode() && (2..=4).contains(&drives) && matches!(mode, CredentialMode::Fixed) {
            return Self::start_cluster(drives, 1, drives).await;
        }
        Self::launch(1, drives, None, mode).await
    }

    /// [`TestServer::start`] with environment variables set for every process from the start
    /// ([`TestServer::set_env`]).
    pub async fn start_with_env(drives: usize, env: &[(&str, &str)]) -> TestServer {
        let mut s = if cluster_mode() && (2..=4).contains(&drives) {
            Self::prepare(drives, 1, Some(drives), CredentialMode::Fixed, false)
        } else {
            Self::prepare(1, drives, None, CredentialMode::Fixed, false)
        };
        for (k, v) in env {
            s.set_env(k, v);
        }
        s.launch_prepared().await
    }

    /// Sets an environment variable for the processes started from now on (restarts included),
    /// e.g. a setting a test needs that others must not get.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.to_string()));
    }

    /// Starts a single-node server whatever the mode (for tests of single-node behaviour).
    pub async fn start_single(drives: usize) -> TestServer {
        Self::launch(1, drives, None, CredentialMode::Fixed).await
    }

    /// Starts a cluster of `nodes` processes with `per_node` drives each, in erasure sets of
    /// `set_size` drives.
    pub async fn start_cluster(nodes: usize, per_node: usize, set_size: usize) -> TestServer {
        Self::launch(nodes, per_node, Some(set_size), CredentialMode::Fixed).await
    }

    /// Starts a cluster as [`TestServer::start_cluster`] with environment variables set for
    /// every node from the start ([`TestServer::set_env`]).
    pub async fn start_cluster_with_env(
        nodes: usize,
        per_node: usize,
        set_size: usize,
        env: &[(&str, &str)],
    ) -> TestServer {
        let mut s = Self::prepare(
            nodes,
            per_node,
            Some(set_size),
            CredentialMode::Fixed,
            false,
        );
        for (k, v) in env {
            s.set_env(k, v);
        }
        s.launch_prepared().await
    }

    /// Starts a single node serving HTTPS with a certificate of a test CA of its own
    /// ([`TestServer::tls`]).
    pub async fn start_https(drives: usize) -> TestServer {
        Self::launch_with(1, drives, None, CredentialMode::Fixed, true).await
    }

    /// Starts a cluster whose nodes serve S3 over HTTPS (one test CA, one certificate for
    /// 127.0.0.1 shared by the nodes).
    pub async fn start_cluster_https(nodes: usize, per_node: usize, set_size: usize) -> TestServer {
        Self::launch_with(nodes, per_node, Some(set_size), CredentialMode::Fixed, true).await
    }

    /// Starts a cluster over `https://` drive URLs: S3 over HTTPS and internode mutual TLS, every
    /// node with a certificate for 127.0.0.1 of one test CA (also in their `CAs/`).
    pub async fn start_cluster_tls(nodes: usize, per_node: usize, set_size: usize) -> TestServer {
        let mut s = Self::prepare(nodes, per_node, Some(set_size), CredentialMode::Fixed, true);
        s.internode_tls = true;
        s.launch_prepared().await
    }

    /// Starts node `i` from now on with the certificate directory `dir` instead of the test
    /// CA's (e.g. a certificate of another CA).
    pub fn set_node_certs(&mut self, i: usize, dir: &Path) {
        self.node_certs.retain(|(n, _)| *n != i);
        self.node_certs.push((i, dir.to_path_buf()));
    }

    async fn launch(
        nodes: usize,
        per_node: usize,
        set_size: Option<usize>,
        mode: CredentialMode,
    ) -> TestServer {
        Self::launch_with(nodes, per_node, set_size, mode, false).await
    }

    async fn launch_with(
        nodes: usize,
        per_node: usize,
        set_size: Option<usize>,
        mode: CredentialMode,
        https: bool,
    ) -> TestServer {
        Self::prepare(nodes, per_node, set_size, mode, https)
            .launch_prepared()
            .await
    }

    fn prepare(
        nodes: usize,
        per_node: usize,
        set_size: Option<usize>,
        mode: CredentialMode,
        https: bool,
    ) -> TestServer {
        let root = tempfile::Builder::new()
            .prefix("quarry-it-")
            .tempdir()
            .expect("create temp dir");
        let dirs: Vec<PathBuf> = if set_size.is_some() {
            (1..=nodes)
                .flat_map(|n| (1..=per_node).map(move |d| (n, d)))
                .map(|(n, d)| root.path().join(format!("n{n}")).join(format!("d{d}")))
                .collect()
        } else {
            (1..=per_node)
                .map(|i| root.path().join(format!("d{i}")))
                .collect()
        };
        for d in &dirs {
            fs::create_dir_all(d).expect("create drive dir");
        }
        let procs = (0..nodes)
            .map(|i| Proc {
                child: None,
                port: 0,
                log: if nodes == 1 {
                    root.path().join("quarry.log")
                } else {
                    root.path().join(format!("node{}.log", i + 1))
                },
            })
            .collect();
        let front = if nodes > 1 {
            // Under nextest every test is a process of its own, where the counter always starts
            // at 0: the test's name (its thread's) spreads those over the nodes too.
            let name = std::thread::current().name().map(str::to_owned);
            let spread = name.map_or(0, |n| {
                n.bytes()
                    .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()))
            });
            NEXT_FRONT
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .wrapping_add(spread)
                % nodes
        } else {
            0
        };
        let mut s = TestServer {
            procs,
            front,
            root,
            dirs,
            mode,
            access_key: String::new(),
            secret_key: String::new(),
            starts: 0,
            set_size,
            env: Vec::new(),
            tls: None,
            internode_tls: false,
            node_certs: Vec::new(),
        };
        if https {
            s.tls = Some(TestTls::create(&s.root.path().join("certs")));
        }
        s
    }

    async fn launch_prepared(mut self) -> TestServer {
        // Another test may take a port between our probe and the server's bind: retry on new ones.
        for attempt in 0..3 {
            for p in &mut self.procs {
                p.port = free_port();
            }
            match self.spawn_and_wait().await {
                Ok(()) => return self,
                Err(e) if attempt < 2 && e.contains("in use") => {
                    self.kill();
                    continue;
                }
                Err(e) => panic!("{e}"),
            }
        }
        unreachable!("the loop above returns or panics")
    }

    /// The drive arguments of a cluster node: every drive of every node as a URL.
    fn cluster_args(&self) -> Vec<String> {
        let per_node = self.dirs.len() / self.procs.len();
        self.dirs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                format!(
                    "{}://127.0.0.1:{}{}",
                    if self.internode_tls { "https" } else { "http" },
                    self.procs[i / per_node].port,
                    d.display()
                )
            })
            .collect()
    }

    fn spawn(&mut self, node: usize) -> Child {
        let bin = quarry_bin();
        assert!(
            bin.exists(),
            "quarry binary not found at {} (set QUARRY_BIN, or run `cargo build -p quarry` first)",
            bin.display()
        );
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.procs[node].log)
            .expect("open server log");
        let log2 = log.try_clone().expect("clone log handle");
        let mut cmd = Command::new(&bin);
        cmd.arg("server");
        match self.set_size {
            Some(size) => {
                cmd.args(self.cluster_args())
                    .arg("--set-size")
                    .arg(size.to_string());
            }
            None => {
                cmd.args(&self.dirs);
            }
        }
        cmd.arg("--address")
            .arg(format!("127.0.0.1:{}", self.procs[node].port))
            .current_dir(self.root.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        match self.mode {
            CredentialMode::Fixed => {
                cmd.env("QUARRY_ROOT_USER", ACCESS_KEY)
                    .env("QUARRY_ROOT_PASSWORD", SECRET_KEY);
            }
            CredentialMode::Generated => {
                cmd.env_remove("QUARRY_ROOT_USER")
                    .env_remove("QUARRY_ROOT_PASSWORD");
            }
        }
        cmd.env("QUARRY_DOMAIN", VHOST_DOMAIN);
        // Certificates only where a test asks for HTTPS: HOME is the test's own directory, so
        // the default ~/.quarry/certs of whoever runs the tests never turns TLS on.
        cmd.env("HOME", self.root.path());
        cmd.env_remove("QUARRY_CERTS_DIR");
        if let Some(t) = &self.tls {
            let dir = self
                .node_certs
                .iter()
                .find(|(n, _)| *n == node)
                .map_or(&t.dir, |(_, d)| d);
            cmd.env("QUARRY_CERTS_DIR", dir);
        }
        cmd.env("QUARRY_METRICS_TOKEN", METRICS_TOKEN);
        // No web console: its default port would be shared by every test server.
        cmd.env("QUARRY_CONSOLE_ADDRESS", "off");
        // The built-in key service with the key ids ceph/s3-tests asks for (SSE-S3, SSE-KMS).
        cmd.env("QUARRY_KMS_SECRET_KEY", KMS_TEST_KEYS);
        // A variable set empty with `set_env` is removed instead (to test a default).
        for (k, v) in &self.env {
            if v.is_empty() {
                cmd.env_remove(k);
            } else {
                cmd.env(k, v);
            }
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        cmd.spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()))
    }

    /// Starts every process that is not running and waits until each answers.
    async fn spawn_and_wait(&mut self) -> Result<(), String> {
        self.starts += 1;
        let log_start = fs::metadata(&self.procs[self.front].log)
            .map(|m| m.len())
            .unwrap_or(0);
        for i in 0..self.procs.len() {
            if self.procs[i].child.is_none() {
                let child = self.spawn(i);
                self.procs[i].child = Some(child);
            }
        }
        for i in 0..self.procs.len() {
            self.wait_live(i).await?;
        }
        match self.mode {
            CredentialMode::Fixed => {
                self.access_key = ACCESS_KEY.to_string();
                self.secret_key = SECRET_KEY.to_string();
            }
            CredentialMode::Generated => {
                let text = fs::read_to_string(&self.procs[self.front].log).unwrap_or_default();
                let this_run = text.get(log_start as usize..).unwrap_or("");
                let find = |label: &str| {
                    this_run.lines().rev().find_map(|l| {
                        let (_, v) = l.split_once(label)?;
                        v.split_whitespace().next().map(str::to_string)
                    })
                };
                match (find("AccessKey:"), find("SecretKey:")) {
                    (Some(a), Some(s)) if !a.is_empty() && !s.is_empty() => {
                        self.access_key = a;
                        self.secret_key = s;
                    }
                    // A restart that reloads stored keys may not print them again: keep the
                    // ones printed before (the caller's requests then prove they still work).
                    _ if !self.access_key.is_empty() => {}
                    _ => {
                        return Err(format!(
                            "quarry started without credential env but printed no `AccessKey:`/`SecretKey:` lines; log tail:\n{}",
                            self.log_tail(40)
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits until process `i` answers 200 on `/health/live`.
    async fn wait_live(&mut self, i: usize) -> Result<(), String> {
        let http = match &self.tls {
            Some(t) => t.reqwest(),
            None => reqwest::Client::new(),
        };
        let url = format!("{}/health/live", self.node_endpoint(i));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.procs[i].child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.procs[i].child = None;
                    return Err(format!(
                        "quarry (node {}) exited during start-up ({status}); log tail:\n{}",
                        i + 1,
                        self.node_log_tail(i, 40)
                    ));
                }
            }
            if let Ok(r) = http.get(&url).send().await {
                if r.status().as_u16() == 200 {
                    let port = self.procs[i].port;
                    let pid = self.procs[i].child.as_ref().map(Child::id);
                    if pid.is_some_and(|pid| !listens_on(pid, port)) {
                        // Another process took the port first (a server of another test: under
                        // nextest each test is a process, and free_port's memory is per
                        // process). Ours cannot bind it: start again on other ports.
                        let tail = self.node_log_tail(i, 10);
                        self.kill();
                        return Err(format!(
                            "port {port} of node {} is in use by another process, which answered {url}; log tail:\n{tail}",
                            i + 1
                        ));
                    }
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                let tail = self.node_log_tail(i, 40);
                self.kill();
                return Err(format!(
                    "quarry (node {}) did not answer 200 on {url} within {START_TIMEOUT:?}; log tail:\n{tail}",
                    i + 1
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn kill(&mut self) {
        for i in 0..self.procs.len() {
            self.kill_node(i);
        }
    }

    /// Kills node `i` (SIGKILL, like a crash). A single-node server is node 0.
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut child) = self.procs[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again (same drives and port) and waits until it answers.
    pub async fn start_node(&mut self, i: usize) {
        if self.procs[i].child.is_none() {
            let child = self.spawn(i);
            self.procs[i].child = Some(child);
        }
        if let Err(e) = self.wait_live(i).await {
            panic!("{e}");
        }
    }

    /// Stops every process (SIGKILL, like a crash) and starts them again on the same dirs and
    /// ports.
    pub async fn restart(&mut self) {
        self.kill();
        // The old listener is gone with the process; the same port is normally free at once.
        let mut last = String::new();
        for _ in 0..3 {
            match self.spawn_and_wait().await {
                Ok(()) => return self.wait_peers_reachable().await,
                Err(e) => {
                    last = e;
                    self.kill();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
        panic!("restart failed: {last}");
    }

    /// After a cluster restart, until every node reaches every drive (its `/metrics` counts no
    /// drive offline), for at most 10 s. Each node comes up on its own: one that called a peer
    /// before that peer listened marks it down for a back-off of some tens of milliseconds, and
    /// a write in that window finds too few drives (a CI run saw UploadPart answer 503 right
    /// after `restart`). A test that keeps a drive offline on purpose goes on after the wait.
    async fn wait_peers_reachable(&self) {
        if self.procs.len() < 2 {
            return;
        }
        let http = match &self.tls {
            Some(t) => t.reqwest(),
            None => reqwest::Client::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for i in 0..self.procs.len() {
            let url = format!("{}/metrics", self.node_endpoint(i));
            while Instant::now() < deadline {
                let text = match http.get(&url).bearer_auth(METRICS_TOKEN).send().await {
                    Ok(r) => r.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                if text
                    .lines()
                    .any(|l| l == "quarry_drives{state=\"offline\"} 0")
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// The index of the node `i` places after the front node (0: the front node itself), so a
    /// test that reaches "another node" does so whichever node fronts it.
    pub fn node_from_front(&self, i: usize) -> usize {
        (self.front + i) % self.procs.len()
    }

    /// `http://127.0.0.1:PORT` of the front node.
    pub fn endpoint(&self) -> String {
        self.node_endpoint(self.front)
    }

    /// `http://127.0.0.1:PORT` (`https://` for an HTTPS server) of node `i`.
    pub fn node_endpoint(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.procs[i].port)
    }

    /// The TLS set-up of an HTTPS server.
    pub fn tls(&self) -> Option<&TestTls> {
        self.tls.as_ref()
    }

    /// The process id of node `i`, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.procs[i].child.as_ref().map(|c| c.id())
    }

    /// The port of node `i`.
    pub fn node_port(&self, i: usize) -> u16 {
        self.procs[i].port
    }

    pub fn port(&self) -> u16 {
        self.procs[self.front].port
    }

    /// Processes of this server (1 unless a cluster).
    pub fn node_count(&self) -> usize {
        self.procs.len()
    }

    /// Whether this server is a cluster.
    pub fn is_cluster(&self) -> bool {
        self.set_size.is_some()
    }

    /// The drive arguments every node of a cluster runs with (for tests that start a node
    /// with other arguments).
    pub fn drive_args(&self) -> Vec<String> {
        self.cluster_args()
    }

    /// The credentials the server accepts (fixed, or the generated ones it printed).
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// Drive directory `i` (0-based).
    pub fn drive_path(&self, i: usize) -> &Path {
        &self.dirs[i]
    }

    pub fn drive_count(&self) -> usize {
        self.dirs.len()
    }

    /// The temporary directory holding the drives and the log.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// What the temporary root holds when nothing but the server's own files are there: the
    /// drive directories (or a cluster's node directories) and the logs, sorted.
    pub fn root_entries(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .dirs
            .iter()
            .filter_map(|d| d.strip_prefix(self.root.path()).ok())
            .filter_map(|r| r.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .chain(
                self.procs
                    .iter()
                    .filter_map(|p| p.log.file_name().map(|n| n.to_string_lossy().into_owned())),
            )
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// How many times the server was started (1 after start, +1 per restart).
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The last `n` lines of the front node's log (stdout and stderr).
    pub fn log_tail(&self, n: usize) -> String {
        self.node_log_tail(self.front, n)
    }

    /// The last `n` lines of node `i`'s log.
    pub fn node_log_tail(&self, i: usize, n: usize) -> String {
        let text = fs::read_to_string(&self.procs[i].log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// An S3 client for this server with its credentials.
    pub fn client(&self) -> Client {
        self.client_with(&self.access_key, &self.secret_key)
    }

    /// An S3 client for this server with the given credentials (for auth failure tests).
    pub fn client_with(&self, access_key: &str, secret_key: &str) -> Client {
        match &self.tls {
            Some(t) => sdk_client_tls(&self.endpoint(), access_key, secret_key, t.ca_pem()),
            None => sdk_client(&self.endpoint(), access_key, secret_key),
        }
    }

    /// An S3 client for node `i` of a cluster (node 0 of a single server), with the server's
    /// credentials.
    pub fn node_client(&self, i: usize) -> Client {
        match &self.tls {
            Some(t) => sdk_client_tls(
                &self.node_endpoint(i),
                &self.access_key,
                &self.secret_key,
                t.ca_pem(),
            ),
            None => sdk_client(&self.node_endpoint(i), &self.access_key, &self.secret_key),
        }
    }

    /// Sends a request signed with this server's credentials (payload hash of `body`).
    /// `path_and_query` must already be percent-encoded, e.g. `/bucket/key?acl`.
    pub async fn signed(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> reqwest::Response {
        self.signed_node(self.front, method, path_and_query, headers, body)
            .await
    }

    /// [`TestServer::signed`], sent to node `i`.
    pub async fn signed_node(
        &self,
        i: usize,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> reqwest::Response {
        let url = format!("{}{}", self.node_endpoint(i), path_and_query);
        let signed = sign_headers(
            method,
            &url,
            headers,
            PayloadHash::Bytes(&body),
            &self.access_key,
            &self.secret_key,
            SystemTime::now(),
        );
        send_raw(method, &url, &signed.headers, body).await
    }

    /// Creates a bucket, panicking with the server's answer if it fails.
    pub async fn create_bucket(&self, bucket: &str) {
        if let Err(e) = self.client().create_bucket().bucket(bucket).send().await {
            panic!("create bucket {bucket}: {}", describe(&e));
        }
    }
}

/// An SDK client for an `https://` endpoint that trusts the CA certificates `ca_pem` (PEM) and
/// no others, otherwise as [`sdk_client`].
pub fn sdk_client_tls(endpoint: &str, access_key: &str, secret_key: &str, ca_pem: &str) -> Client {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(
            TlsContext::builder()
                .with_trust_store(TrustStore::empty().with_pem_certificate(ca_pem.as_bytes()))
                .build()
                .expect("TLS context"),
        )
        .build_https();
    let conf = sdk_config(endpoint, access_key, secret_key)
        .http_client(http)
        .build();
    Client::from_conf(conf)
}

/// An SDK client for `endpoint` (path style, the test region, no retries hiding a 5xx).
pub fn sdk_client(endpoint: &str, access_key: &str, secret_key: &str) -> Client {
    Client::from_conf(sdk_config(endpoint, access_key, secret_key).build())
}

fn sdk_config(endpoint: &str, access_key: &str, secret_key: &str) -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .force_path_style(true)
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(
            access_key,
            secret_key,
            None,
            None,
            "quarry-test",
        ))
        // Surface every server error as it is: no retries hiding a 5xx.
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(120))
                .build(),
        )
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        // A failing test shows what the server said (nextest and cargo test print a failing
        // test's stderr).
        if std::thread::panicking() {
            for (i, p) in self.procs.iter().enumerate() {
                eprintln!(
                    "---- quarry log ({}), last 60 lines ----\n{}\n---- end of quarry log ----",
                    p.log.display(),
                    self.node_log_tail(i, 60)
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Data and digests
// ---------------------------------------------------------------------------------------------

/// `n` random bytes.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut v);
    v
}

/// Lower-case hex MD5.
pub fn md5_hex(data: &[u8]) -> String {
    hex::encode(Md5::digest(data))
}

/// Base64 MD5, as sent in `Content-MD5`.
pub fn md5_b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(Md5::digest(data))
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The S3 ETag of a single-part object: the quoted hex MD5.
pub fn etag_of(data: &[u8]) -> String {
    format!("\"{}\"", md5_hex(data))
}

/// Asserts two byte strings are equal without printing megabytes on failure.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first_diff = got.iter().zip(want).position(|(a, b)| a != b);
    panic!(
        "{what}: bodies differ: got {} bytes, want {} bytes, first differing offset {:?}",
        got.len(),
        want.len(),
        first_diff
    );
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// `<Code>` and `<Message>` of an S3 XML error body.
pub fn parse_s3_error(body: &str) -> Option<(String, String)> {
    let code = xml_text(body, "Code")?;
    let msg = xml_text(body, "Message").unwrap_or_default();
    Some((code, msg))
}

/// The text of the first `<tag>...</tag>` in `body` (no unescaping).
pub fn xml_text(body: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = body.find(&open)? + open.len();
    let end = body[start..].find(&close)? + start;
    Some(body[start..end].to_string())
}

/// All texts of `<tag>...</tag>` in `body`, in order.
pub fn xml_texts(body: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(after[..j].to_string());
        rest = &after[j + close.len()..];
    }
    out
}

/// Undoes the five XML entity escapes.
pub fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The S3 error code of a failed SDK call, if the server sent one.
pub fn error_code<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Option<String> {
    match err {
        SdkError::ServiceError(se) => se.err().code().map(str::to_string),
        _ => None,
    }
}

/// The HTTP status of a failed SDK call, if a response came back.
pub fn error_status<E, R: HasStatus>(err: &SdkError<E, R>) -> Option<u16> {
    err.raw_response().map(HasStatus::status_u16)
}

/// Response types whose HTTP status the harness can read.
pub trait HasStatus {
    fn status_u16(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_u16(&self) -> u16 {
        self.status().as_u16()
    }
}

/// One line describing a failed SDK call: status, code, message, or the transport error.
pub fn describe<
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: HasStatus + std::fmt::Debug,
>(
    err: &SdkError<E, R>,
) -> String {
    match err {
        SdkError::ServiceError(se) => format!(
            "HTTP {} {} ({})",
            se.raw().status_u16(),
            se.err().code().unwrap_or("<no code>"),
            se.err().message().unwrap_or("<no message>")
        ),
        other => format!("{other:?}"),
    }
}

/// Asserts that an SDK call failed with the given HTTP status and S3 error code.
#[track_caller]
pub fn assert_s3_error<T: std::fmt::Debug, E, R>(
    res: Result<T, SdkError<E, R>>,
    status: u16,
    code: &str,
) where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: HasStatus + std::fmt::Debug,
{
    match res {
        Ok(v) => panic!("expected {status} {code}, got success: {v:?}"),
        Err(e) => {
            let got_status = error_status(&e);
            let got_code = error_code(&e);
            assert!(
                got_status == Some(status) && got_code.as_deref() == Some(code),
                "expected HTTP {status} {code}, got {}",
                describe(&e)
            );
        }
    }
}

/// Asserts a raw response is an S3 error with `status` and `code`; returns the body.
pub async fn expect_raw_error(resp: reqwest::Response, status: u16, code: &str) -> String {
    let got = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    let parsed = parse_s3_error(&body);
    assert!(
        got == status && parsed.as_ref().map(|(c, _)| c.as_str()) == Some(code),
        "expected HTTP {status} {code}, got HTTP {got} with body: {body}"
    );
    body
}

// ---------------------------------------------------------------------------------------------
// Hand-signed SigV4 requests (for cases an SDK cannot produce)
// ---------------------------------------------------------------------------------------------

/// What goes into the `x-amz-content-sha256` header and the canonical request.
pub enum PayloadHash<'a> {
    /// SHA-256 of these bytes.
    Bytes(&'a [u8]),
    /// A literal value such as `UNSIGNED-PAYLOAD` or `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`.
    Literal(&'a str),
}

/// The result of signing: headers to add, and the seed signature (for chunk signing).
pub struct Signed {
    pub headers: Vec<(String, String)>,
    pub signature: String,
    /// `YYYYMMDDTHHMMSSZ` as signed.
    pub amz_date: String,
    /// `YYYYMMDD/us-east-1/s3/aws4_request`
    pub scope: String,
    pub time: SystemTime,
}

/// Signs a request with SigV4 in headers. `headers` are extra headers that must be signed
/// (they are also returned, so send exactly `Signed::headers`). `url` must be fully encoded.
pub fn sign_headers(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    payload: PayloadHash<'_>,
    access_key: &str,
    secret_key: &str,
    time: SystemTime,
) -> Signed {
    use aws_sigv4::http_request::{
        sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
        SigningSettings, UriPathNormalizationMode,
    };
    use aws_sigv4::sign::v4;

    let creds = aws_credential_types::Credentials::new(access_key, secret_key, None, None, "test");
    let identity = creds.into();
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(REGION)
        .name("s3")
        .time(time)
        .settings(settings)
        .build()
        .expect("signing params")
        .into();
    let body = match payload {
        PayloadHash::Bytes(b) => SignableBody::Bytes(b),
        PayloadHash::Literal(s) => SignableBody::Precomputed(s.to_string()),
    };
    let req =
        SignableRequest::new(method, url, headers.iter().copied(), body).expect("signable request");
    let (instructions, signature) = sign(req, &params).expect("sign").into_parts();
    let mut out: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut amz_date = String::new();
    for (k, v) in instructions.headers() {
        if k.eq_ignore_ascii_case("x-amz-date") {
            amz_date = v.to_string();
        }
        out.push((k.to_string(), v.to_string()));
    }
    let scope = format!("{}/{REGION}/s3/aws4_request", &amz_date[..8]);
    Signed {
        headers: out,
        signature,
        amz_date,
        scope,
        time,
    }
}

/// Builds an `aws-chunked` body signed chunk by chunk (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`),
/// chained from the seed signature in `signed`. `tamper` flips a byte in chunk `i` after signing.
pub fn signed_chunked_body(
    data: &[u8],
    chunk_size: usize,
    signed: &Signed,
    secret_key: &str,
    tamper: Option<usize>,
) -> Vec<u8> {
    let key = aws_sigv4::sign::v4::generate_signing_key(secret_key, signed.time, REGION, "s3");
    let empty_hash = sha256_hex(b"");
    let mut prev = signed.signature.clone();
    let mut out = Vec::with_capacity(data.len() + 256);
    let mut chunks: Vec<&[u8]> = data.chunks(chunk_size).collect();
    chunks.push(&[]);
    for (i, chunk) in chunks.iter().enumerate() {
        let sts = format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{}\n{}\n{}",
            signed.amz_date,
            signed.scope,
            prev,
            empty_hash,
            sha256_hex(chunk)
        );
        let sig = aws_sigv4::sign::v4::calculate_signature(key.as_ref(), sts.as_bytes());
        out.extend_from_slice(format!("{:x};chunk-signature={}\r\n", chunk.len(), sig).as_bytes());
        let start = out.len();
        out.extend_from_slice(chunk);
        if tamper == Some(i) && !chunk.is_empty() {
            out[start] ^= 0xff;
        }
        out.extend_from_slice(b"\r\n");
        prev = sig;
    }
    out
}

/// Builds an unsigned `aws-chunked` body with trailers (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`).
pub fn unsigned_trailer_body(data: &[u8], chunk_size: usize, trailers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 256);
    for chunk in data.chunks(chunk_size) {
        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    for (k, v) in trailers {
        out.extend_from_slice(format!("{k}:{v}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Base64 of the big-endian CRC32 (ISO-HDLC, as in `x-amz-checksum-crc32`).
pub fn crc32_b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(crc_fast::crc32_iso_hdlc(data).to_be_bytes())
}

/// Sends a request with the given headers and body using reqwest.
pub async fn send_raw(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> reqwest::Response {
    let http = reqwest::Client::new();
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("valid method");
    let mut rb = http.request(m, url);
    for (k, v) in headers {
        // reqwest sets Host and Content-Length itself from the URL and body.
        if k.eq_ignore_ascii_case("host") || k.eq_ignore_ascii_case("content-length") {
            continue;
        }
        rb = rb.header(k.as_str(), v.as_str());
    }
    rb.body(body).send().await.expect("send raw request")
}

// ---------------------------------------------------------------------------------------------
// On-disk layout
// ---------------------------------------------------------------------------------------------

/// `<drive>/<bucket>/<key>`: the object directory on one drive.
pub fn object_dir(drive: &Path, bucket: &str, key: &str) -> PathBuf {
    drive.join(bucket).join(key)
}

/// `<drive>/<bucket>/<key>/quarry.meta`
pub fn meta_path(drive: &Path, bucket: &str, key: &str) -> PathBuf {
    object_dir(drive, bucket, key).join("quarry.meta")
}

/// Splits a `quarry.meta` file into its JSON header and inline shard bytes.
///
/// Format (crates/disk, version 1): the JSON header, then, when the header has `"inline_len": N`,
/// a `\n` and N raw bytes. A header with a base64 `"inline"` field is read too.
fn split_meta(bytes: &[u8]) -> Option<(serde_json::Value, Option<Vec<u8>>)> {
    use base64::Engine;
    let header_len = bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(bytes.len());
    let header: serde_json::Value = serde_json::from_slice(&bytes[..header_len]).ok()?;
    let inline = if let Some(n) = header.get("inline_len").and_then(|v| v.as_u64()) {
        let data = bytes.get(header_len + 1..)?;
        (data.len() as u64 == n).then(|| data.to_vec())
    } else if let Some(b64) = header.get("inline").and_then(|v| v.as_str()) {
        base64::engine::general_purpose::STANDARD.decode(b64).ok()
    } else {
        None
    };
    Some((header, inline))
}

/// Reads and parses the JSON header of `quarry.meta`, if present and readable.
pub fn read_meta(drive: &Path, bucket: &str, key: &str) -> Option<serde_json::Value> {
    let bytes = fs::read(meta_path(drive, bucket, key)).ok()?;
    split_meta(&bytes).map(|(h, _)| h)
}

/// The inline shard bytes (framed: `[blake3 32 B | chunk]`) stored in a drive's `quarry.meta`.
pub fn read_inline(drive: &Path, bucket: &str, key: &str) -> Option<Vec<u8>> {
    let bytes = fs::read(meta_path(drive, bucket, key)).ok()?;
    split_meta(&bytes).and_then(|(_, inline)| inline)
}

/// The `part.1` shard file of an object on one drive: found through the data dir named in the
/// drive's metadata, else (metadata gone) through any sub-directory of the object dir holding one.
pub fn part_path(drive: &Path, bucket: &str, key: &str) -> Option<PathBuf> {
    let dir = object_dir(drive, bucket, key);
    if let Some(meta) = read_meta(drive, bucket, key) {
        if let Some(dd) = meta.get("data_dir").and_then(|v| v.as_str()) {
            return Some(dir.join(dd).join("part.1"));
        }
    }
    for e in fs::read_dir(&dir).ok()?.flatten() {
        let p = e.path().join("part.1");
        if p.is_file() {
            return Some(p);
        }
    }
    None
}

/// Replaces the inline shard bytes of a drive's `quarry.meta` with `new` (same length: the
/// header is kept byte for byte, so only the shard changes, as bit rot would change it).
pub fn write_inline(drive: &Path, bucket: &str, key: &str, new: &[u8]) {
    use base64::Engine;
    let path = meta_path(drive, bucket, key);
    let bytes = fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let (mut header, old) = split_meta(&bytes).expect("a readable quarry.meta");
    let old = old.expect("an inline object");
    assert_eq!(old.len(), new.len(), "write_inline keeps the length");
    let out = if header.get("inline_len").is_some() {
        let header_len = bytes.len() - old.len() - 1;
        let mut out = bytes[..header_len + 1].to_vec();
        out.extend_from_slice(new);
        out
    } else {
        header["inline"] =
            serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(new));
        serde_json::to_vec(&header).expect("serialize meta")
    };
    fs::write(&path, out).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Flips (XOR 0xff) `len` bytes of a file at `offset` in place.
pub fn flip_bytes(path: &Path, offset: u64, len: usize) {
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut buf = vec![0u8; len];
    f.seek(SeekFrom::Start(offset)).expect("seek");
    f.read_exact(&mut buf).expect("read bytes to flip");
    for b in &mut buf {
        *b ^= 0xff;
    }
    f.seek(SeekFrom::Start(offset)).expect("seek");
    std::io::Write::write_all(&mut f, &buf).expect("write flipped bytes");
    f.sync_all().expect("sync");
}

/// Lists every file under `dir`, relative to it, sorted.
pub fn list_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else if let Ok(rel) = p.strip_prefix(base) {
                out.push(rel.to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Polls `cond` every 50 ms until it holds or `timeout` passes; returns whether it held.
pub async fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads a whole GetObject body.
pub async fn get_bytes(client: &Client, bucket: &str, key: &str) -> Vec<u8> {
    match client.get_object().bucket(bucket).key(key).send().await {
        Ok(out) => out
            .body
            .collect()
            .await
            .unwrap_or_else(|e| panic!("read body of {bucket}/{key}: {e}"))
            .into_bytes()
            .to_vec(),
        Err(e) => panic!("GET {bucket}/{key}: {}", describe(&e)),
    }
}

/// PutObject of `data`; panics with the server's answer on failure. Returns the ETag.
pub async fn put_bytes(client: &Client, bucket: &str, key: &str, data: &[u8]) -> String {
    match client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(data.to_vec().into())
        .send()
        .await
    {
        Ok(out) => out.e_tag.unwrap_or_default(),
        Err(e) => panic!(
            "PUT {bucket}/{key} ({} bytes): {}",
            data.len(),
            describe(&e)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_claimed_by_one_test_process_is_not_claimed_again_until_stale() {
        let port = free_port();
        assert!(!claim_port(port), "claimed already, by free_port");
        let path = std::env::temp_dir()
            .join("quarry-test-ports")
            .join(port.to_string());
        let old = SystemTime::now() - PORT_CLAIM_AGE - Duration::from_secs(60);
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert!(claim_port(port), "a stale claim is taken over");
        assert!(!claim_port(port));
    }

    #[test]
    fn listens_on_tells_which_process_holds_a_port() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listens_on(std::process::id(), port), "this process");
        let mut other = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(!listens_on(other.id(), port), "another process");
        other.kill().unwrap();
        other.wait().unwrap();
        drop(l);
        assert!(!listens_on(std::process::id(), port), "closed");
    }
}
