//! Command line: flags, their `QUARRY_*` environment fallbacks, and defaults.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

/// The most drives one node serves.
pub const MAX_DRIVES: usize = 16;
/// Drive directories used when none are given.
pub const DEFAULT_DRIVES: [&str; 4] = ["./data/d1", "./data/d2", "./data/d3", "./data/d4"];

#[derive(Debug, Parser)]
#[command(
    name = "quarry",
    version,
    about = "Quarry: an S3-compatible, erasure-coded object store."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start-up and matched once: the size of the server variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve S3: from local drive directories (one node), or as one node of a cluster when the
    /// drives are given as URLs (`http://HOST:PORT/PATH`, with `{1...4}` ellipses).
    Server(ServerArgs),
    /// Administer a running server: heal, heal status, users, policies, groups, service accounts.
    Admin(crate::admin::AdminArgs),
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Drive directories, 1 to 16, created if missing (default: ./data/d1 ... ./data/d4); or,
    /// for a cluster, every drive of every node as http://HOST:PORT/PATH with ellipses, e.g.
    /// `http://node{1...4}:9000/srv/d{1...4}`, the same on every node.
    #[arg(value_name = "DRIVES")]
    pub dirs: Vec<String>,

    /// A TOML file with any of the settings below (see config/*.toml). Flags and QUARRY_*
    /// variables override it.
    #[arg(long, env = "QUARRY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Drives per erasure set in a cluster (2 to 16, dividing the number of drives). Default:
    /// the largest such size. Must be the same on every node.
    #[arg(long, env = "QUARRY_SET_SIZE", value_name = "N")]
    pub set_size: Option<usize>,

    /// Address to listen on.
    #[arg(
        long,
        env = "QUARRY_ADDRESS",
        default_value = "127.0.0.1:9000",
        value_name = "HOST:PORT"
    )]
    pub address: String,

    /// Access key of the root user. Default: stored on the drives, or generated on first start.
    #[arg(
        long,
        env = "QUARRY_ROOT_USER",
        requires = "root_password",
        value_name = "U"
    )]
    pub root_user: Option<String>,

    /// Secret key of the root user.
    #[arg(
        long,
        env = "QUARRY_ROOT_PASSWORD",
        requires = "root_user",
        value_name = "P",
        hide_env_values = true
    )]
    pub root_password: Option<String>,

    /// The secret nodes of a cluster prove to each other (at least 16 bytes, the same on every
    /// node; e.g. `openssl rand -hex 32`). Prefer --cluster-secret-file or the environment to
    /// this flag, which other users can see in the process list. Without either, the secret is
    /// derived from the root credentials, as before (deprecated: said in the log at start-up).
    #[arg(
        long,
        env = "QUARRY_CLUSTER_SECRET",
        value_name = "SECRET",
        hide_env_values = true,
        conflicts_with = "cluster_secret_file"
    )]
    pub cluster_secret: Option<String>,

    /// A file holding the cluster secret (see --cluster-secret); surrounding whitespace is
    /// ignored. It should be readable by the server's user only.
    #[arg(long, env = "QUARRY_CLUSTER_SECRET_FILE", value_name = "FILE")]
    pub cluster_secret_file: Option<PathBuf>,

    /// Region this server answers for (SigV4 scope, bucket location).
    #[arg(
        long,
        env = "QUARRY_REGION",
        default_value = "us-east-1",
        value_name = "R"
    )]
    pub region: String,

    /// Domains for virtual-host-style requests (`<bucket>.<domain>`), comma-separated.
    /// Path-style requests keep working on every host.
    #[arg(
        long = "domain",
        env = "QUARRY_DOMAIN",
        value_delimiter = ',',
        value_name = "DOMAIN"
    )]
    pub domains: Vec<String>,

    /// Log line format. The level comes from QUARRY_LOG or RUST_LOG (default: info).
    #[arg(long, env = "QUARRY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Unfinished multipart uploads older than this are removed: a number with a unit
    /// (s, m, h, d), e.g. 24h, 90m; a bare number is seconds.
    #[arg(
        long,
        env = "QUARRY_MULTIPART_EXPIRY",
        default_value = "24h",
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub multipart_expiry: Duration,

    /// The ObjectOwnership of buckets created without `x-amz-object-ownership`:
    /// BucketOwnerEnforced (ACLs off, AWS's default), BucketOwnerPreferred or ObjectWriter.
    #[arg(
        long,
        env = "QUARRY_DEFAULT_OBJECT_OWNERSHIP",
        default_value = "BucketOwnerEnforced",
        value_parser = parse_object_ownership,
        value_name = "OWNERSHIP"
    )]
    pub default_object_ownership: quarry_s3::ObjectOwnership,

    /// Time between passes of the background scanner, which finds and heals objects with
    /// missing or corrupt shards: a duration (e.g. 1h, 30m), or 0 to turn it off.
    #[arg(
        long,
        env = "QUARRY_SCAN_INTERVAL",
        default_value = "1h",
        value_parser = parse_interval,
        value_name = "DURATION"
    )]
    pub scan_interval: Duration,

    /// Objects per second the scanner checks at most (0: no limit).
    #[arg(long, env = "QUARRY_SCAN_RATE", default_value_t = 50, value_name = "N")]
    pub scan_rate: u32,

    /// One scanner pass in this many is deep: it reads every object and verifies its bitrot
    /// hashes (the others check metadata and shard sizes only). 1: every pass; 0: never.
    #[arg(long, env = "QUARRY_DEEP_SCAN_EVERY", default_value_t = quarry_object::DEFAULT_DEEP_SCAN_EVERY, value_name = "N")]
    pub deep_scan_every: u32,

    /// Objects per second a heal job, and the heal of a replaced drive, check at most (0: no
    /// limit).
    #[arg(long, env = "QUARRY_HEAL_RATE", default_value_t = quarry_object::DEFAULT_HEAL_RATE, value_name = "N")]
    pub heal_rate: u32,

    /// Bytes of object data per second they check at most, e.g. 64MiB (0: no limit).
    #[arg(long, env = "QUARRY_HEAL_BYTES_RATE", default_value = "0", value_parser = parse_bytes, value_name = "BYTES")]
    pub heal_bytes_rate: u64,

    /// The bound of the sorted listings of large directories (1000 keys or more under one
    /// prefix on a drive) this node keeps between listing pages, e.g. 512MiB (0: none kept).
    #[arg(long, env = "QUARRY_LIST_CACHE_BYTES", default_value = "256MiB", value_parser = parse_bytes, value_name = "BYTES")]
    pub list_cache_bytes: u64,

    /// How often this node checks its drives for one replaced while it runs (format.json gone),
    /// which it then formats into its slot and heals: a duration, or 0 for start-up only.
    #[arg(
        long,
        env = "QUARRY_DRIVE_CHECK_INTERVAL",
        default_value = "10s",
        value_parser = parse_interval,
        value_name = "DURATION"
    )]
    pub drive_check_interval: Duration,

    /// The orphan sweep removes what killed writes left on a drive once it is older than this:
    /// a duration (e.g. 15m; a bare number is seconds).
    #[arg(
        long,
        env = "QUARRY_ORPHAN_MIN_AGE",
        default_value = "15m",
        value_parser = parse_interval,
        value_name = "DURATION"
    )]
    pub orphan_min_age: Duration,

    /// Time between passes of the orphan sweep (it also runs at start-up and one minimum age
    /// later): a duration, or 0 for the start-up passes only.
    #[arg(
        long,
        env = "QUARRY_ORPHAN_SWEEP_INTERVAL",
        default_value = "1h",
        value_parser = parse_interval,
        value_name = "DURATION"
    )]
    pub orphan_sweep_interval: Duration,

    /// How long the data of an overwritten or deleted object stays on its drives after the last
    /// read of it, so that GETs that began before the change send the whole body: a duration, or
    /// 0 to remove it at once. It is also kept under a sixteenth of each drive's free space.
    #[arg(
        long,
        env = "QUARRY_RETIRED_GRACE",
        default_value = "30s",
        value_parser = parse_interval,
        value_name = "DURATION"
    )]
    pub retired_grace: Duration,

    /// How long an S3 client may take to send a request's headers (from connecting or from the
    /// end of its previous request) before it is disconnected: a duration such as 30s.
    #[arg(
        long,
        env = "QUARRY_HEADER_TIMEOUT",
        default_value = "30s",
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub header_timeout: Duration,

    /// How long a request body may stall before the request is cut off with RequestTimeout:
    /// the longest wait for its next byte, and the grace before it must average 1 KiB/s.
    #[arg(
        long,
        env = "QUARRY_BODY_TIMEOUT",
        default_value = "30s",
        value_parser = parse_duration,
        value_name = "DURATION"
    )]
    pub body_timeout: Duration,

    /// A bearer token that opens `/metrics` (`Authorization: Bearer <token>`); without it (or
    /// --metrics-public) `/metrics` answers 403. At least 16 characters.
    #[arg(
        long,
        env = "QUARRY_METRICS_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub metrics_token: Option<String>,

    /// Serve `/metrics` to anyone who can reach the port (it names drive paths and peers).
    #[arg(long, env = "QUARRY_METRICS_PUBLIC")]
    pub metrics_public: bool,

    /// S3 connections open at once (in a cluster: with those whose protocol is not known yet);
    /// more are closed at once. Lowered at start-up to what the descriptor limit allows.
    #[arg(
        long,
        env = "QUARRY_MAX_CONNECTIONS",
        default_value_t = 4096,
        value_name = "N"
    )]
    pub max_connections: usize,

    /// The TLS certificate directory (MinIO's layout): `public.crt` and `private.key` turn on
    /// HTTPS; one subdirectory per extra domain holds another pair, chosen by SNI; `CAs/` holds
    /// trusted CA certificates. Default: `certs` beside the --config file, else ~/.quarry/certs.
    /// Without a certificate there the server speaks plain HTTP; a directory given here must
    /// hold one.
    #[arg(long, env = "QUARRY_CERTS_DIR", value_name = "DIR")]
    pub certs_dir: Option<PathBuf>,

    /// How often the certificate files are checked for changes (a changed certificate is used
    /// from the next connection on; SIGHUP reloads at once): a duration, or 0 to check only on
    /// SIGHUP.
    #[arg(
        long,
        env = "QUARRY_CERTS_CHECK_INTERVAL",
        default_value = "10s",
        value_parser = parse_interval,
        value_name = "DURATION"
    )]
    pub certs_check_interval: Duration,

    /// Address of the web console (HTTPS when the S3 port is), or `off`. When the default
    /// address is taken the server starts without the console and says so; an address given
    /// here that cannot be bound stops the start.
    #[arg(
        long,
        env = "QUARRY_CONSOLE_ADDRESS",
        default_value = DEFAULT_CONSOLE_ADDRESS,
        value_name = "HOST:PORT|off"
    )]
    pub console_address: String,

    /// RDMA data plane between nodes: off (never touch verbs), on (refuse to start unless verbs
    /// works) or auto (verbs when a usable device is found, else TCP).
    #[arg(
        long,
        env = "QUARRY_RDMA",
        default_value = "auto",
        value_name = "off|on|auto"
    )]
    pub rdma: quarry_net::rdma::RdmaMode,

    /// RDMA device to use (default: the first one), e.g. rxe0 or mlx5_0.
    #[arg(long, env = "QUARRY_RDMA_DEVICE", value_name = "NAME")]
    pub rdma_device: Option<String>,

    /// GID table index of port 1 to use (default: the RoCE v2 GID of --address).
    #[arg(long, env = "QUARRY_RDMA_GID_INDEX", value_name = "INDEX", value_parser = quarry_net::rdma::parse_gid_index)]
    pub rdma_gid_index: Option<u32>,

    /// RC queue pairs to each peer (1-256).
    #[arg(long, env = "QUARRY_RDMA_QP_PER_PEER", value_name = "N",
          default_value_t = quarry_net::rdma::DEFAULT_QP_PER_PEER,
          value_parser = quarry_net::rdma::parse_qp_per_peer)]
    pub rdma_qp_per_peer: usize,

    /// Registered (pinned) memory for the data pools: a power of two of at least 16MiB.
    #[arg(long, env = "QUARRY_RDMA_POOL_BYTES", value_name = "BYTES",
          default_value = "256MiB", value_parser = quarry_net::rdma::parse_pool_bytes)]
    pub rdma_pool_bytes: u64,

    /// Verbs connections accepted from peers at once (1-1000).
    #[arg(long, env = "QUARRY_RDMA_MAX_CONNECTIONS", value_name = "N",
          default_value_t = quarry_net::rdma::DEFAULT_MAX_CONNECTIONS,
          value_parser = quarry_net::rdma::parse_max_connections)]
    pub rdma_max_connections: usize,

    /// How long an S3-over-RDMA client's connection may go unused before the node closes it
    /// (a client that died between transfers is noticed no other way): a duration such as 10m.
    #[arg(long, env = "QUARRY_RDMA_CLIENT_IDLE", value_name = "DURATION", default_value = "10m",
          value_parser = parse_rdma_client_idle)]
    pub rdma_client_idle: Duration,
}

/// `QUARRY_RDMA_CLIENT_IDLE`: a duration as [`parse_duration`], above zero.
pub fn parse_rdma_client_idle(s: &str) -> Result<Duration, String> {
    parse_duration(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("QUARRY_RDMA_CLIENT_IDLE={s:?}: a duration above zero, such as 10m"))
}

/// A duration as [`parse_duration`], or `0` / `off` for none (zero).
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    match s.trim() {
        "0" | "off" => Ok(Duration::ZERO),
        other => parse_duration(other),
    }
}

/// `--default-object-ownership`: one of S3's ObjectOwnership names.
fn parse_object_ownership(s: &str) -> Result<quarry_s3::ObjectOwnership, String> {
    s.parse()
}

/// Parses a byte count: `1048576`, `512KiB`, `64MiB`, `1GiB` ([`quarry_net::rdma::parse_size`]).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    quarry_net::rdma::parse_size(s)
        .ok_or_else(|| format!("{s:?} is not a size such as 1048576, 512KiB, 64MiB or 1GiB"))
}

/// Parses `90`, `90s`, `30m`, `24h`, `7d` into a duration of at least one second.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 90s, 30m, 24h or 7d"))?;
    let secs = match unit {
        "" | "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => return Err(format!("unknown unit {unit:?} in {s:?}: use s, m, h or d")),
    }
    .ok_or_else(|| format!("{s:?} is too long"))?;
    if secs == 0 {
        return Err("the duration must be at least one second".into());
    }
    Ok(Duration::from_secs(secs))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The server settings after defaults are applied and the arguments are checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Local drive directories (single node), empty in a cluster.
    pub dirs: Vec<PathBuf>,
    /// The cluster's topology, when the drives were given as URLs.
    pub cluster: Option<quarry_object::topology::Topology>,
    pub address: String,
    /// `(access key, secret key)` when given on the command line or in the environment.
    pub root: Option<(String, String)>,
    pub region: String,
    /// Virtual-host domains, lower-case, without a trailing dot.
    pub domains: Vec<String>,
    pub log_format: LogFormat,
    pub multipart_expiry: Duration,
    pub default_object_ownership: quarry_s3::ObjectOwnership,
    pub scan_interval: Option<Duration>,
    pub scan_rate: u32,
    pub deep_scan_every: u32,
    pub heal_rate: u32,
    pub heal_bytes_rate: u64,
    pub list_cache_bytes: u64,
    pub drive_check_interval: Option<Duration>,
    pub orphan_sweep: quarry_disk::SweepSchedule,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub metrics: quarry_s3::MetricsAccess,
    pub max_connections: usize,
    pub rdma: quarry_net::rdma::RdmaSettings,
    /// Where the cluster secret comes from, when it is set.
    pub cluster_secret: Option<SecretSource>,
    /// The certificate directory, and whether it was given (then it must hold a certificate).
    pub certs_dir: Option<(PathBuf, bool)>,
    /// How often the certificates are checked for changes (`None`: only on SIGHUP).
    pub certs_check_interval: Option<Duration>,
    /// The console's address, or `None` when it is off.
    pub console: Option<ConsoleAddress>,
}

impl Settings {
    /// The object layer's settings these make (the runtime and the rest at their defaults).
    pub fn object_config(&self) -> quarry_object::ObjectConfig {
        quarry_object::ObjectConfig {
            multipart_expiry: self.multipart_expiry,
            scan_interval: self.scan_interval,
            scan_rate: self.scan_rate,
            deep_scan_every: self.deep_scan_every,
            heal_rate: self.heal_rate,
            heal_bytes_rate: self.heal_bytes_rate,
            drive_check_interval: self.drive_check_interval,
            orphan_sweep: self.orphan_sweep,
            ..quarry_object::ObjectConfig::default()
        }
    }
}

/// The web console's default address (MinIO's console port).
pub const DEFAULT_CONSOLE_ADDRESS: &str = "127.0.0.1:9001";

/// Where the web console listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleAddress {
    pub address: String,
    /// Whether it is the default (then a taken port is a warning, not an error).
    pub default: bool,
}

/// Where a secret setting comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretSource {
    Value(String),
    File(PathBuf),
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Value(_) => f.write_str("Value(<redacted>)"),
            SecretSource::File(p) => f.debug_tuple("File").field(p).finish(),
        }
    }
}

/// A size in the settings file: bytes, or text with a unit (`"256MiB"`).
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
pub enum FileSize {
    Bytes(u64),
    Text(String),
}

impl FileSize {
    /// The size as text for the flag's own parser.
    fn text(self) -> String {
        match self {
            FileSize::Bytes(n) => n.to_string(),
            FileSize::Text(t) => t,
        }
    }
}

/// The settings file (`--config`): every field optional, unknown fields refused.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Format version of the file; only 1 exists.
    pub version: u32,
    pub address: Option<String>,
    pub drives: Option<Vec<String>>,
    pub set_size: Option<usize>,
    pub region: Option<String>,
    pub domains: Option<Vec<String>>,
    pub log_format: Option<String>,
    pub multipart_expiry: Option<String>,
    pub root_user: Option<String>,
    pub root_password: Option<String>,
    pub scan_interval: Option<String>,
    pub scan_rate: Option<u32>,
    pub deep_scan_every: Option<u32>,
    pub heal_rate: Option<u32>,
    pub heal_bytes_rate: Option<FileSize>,
    pub list_cache_bytes: Option<FileSize>,
    pub drive_check_interval: Option<String>,
    pub orphan_min_age: Option<String>,
    pub orphan_sweep_interval: Option<String>,
    pub retired_grace: Option<String>,
    pub rdma: Option<String>,
    pub rdma_device: Option<String>,
    pub rdma_gid_index: Option<u32>,
    pub rdma_qp_per_peer: Option<usize>,
    pub rdma_pool_bytes: Option<FileSize>,
    pub rdma_max_connections: Option<usize>,
    pub rdma_client_idle: Option<String>,
    pub cluster_secret: Option<String>,
    pub cluster_secret_file: Option<String>,
    pub certs_dir: Option<String>,
    pub certs_check_interval: Option<String>,
    pub console_address: Option<String>,
}

/// The settings file format this build reads.
pub const CONFIG_VERSION: u32 = 1;

/// Reads and checks a settings file.
pub fn load_config(path: &std::path::Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    let f: FileConfig =
        toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))?;
    if f.version != CONFIG_VERSION {
        return Err(format!(
            "config file {}: version {} is not supported (this build reads version {CONFIG_VERSION}); add `version = 1`",
            path.display(),
            f.version
        ));
    }
    Ok(f)
}

impl ServerArgs {
    /// Fills every setting not given by a flag or a QUARRY_* variable from the config file
    /// (`matches` tells where each value came from).
    fn apply_config(&mut self, f: FileConfig, matches: Option<&clap::ArgMatches>) {
        use clap::parser::ValueSource;
        let unset = |id: &str| {
            matches.is_none_or(|m| {
                matches!(m.value_source(id), None | Some(ValueSource::DefaultValue))
            })
        };
        if let Some(v) = f.address.filter(|_| unset("address")) {
            self.address = v;
        }
        if let Some(v) = f.drives.filter(|_| unset("dirs")) {
            self.dirs = v;
        }
        if let Some(v) = f.set_size.filter(|_| unset("set_size")) {
            self.set_size = Some(v);
        }
        if let Some(v) = f.region.filter(|_| unset("region")) {
            self.region = v;
        }
        if let Some(v) = f.domains.filter(|_| unset("domains")) {
            self.domains = v;
        }
        if let Some(v) = f.log_format.filter(|_| unset("log_format")) {
            self.log_format = match v.as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                other => usage_error(format!("config: log_format {other:?} is not text or json")),
            };
        }
        if let Some(v) = f.multipart_expiry.filter(|_| unset("multipart_expiry")) {
            self.multipart_expiry = parse_duration(&v)
                .unwrap_or_else(|e| usage_error(format!("config: multipart_expiry: {e}")));
        }
        if let Some(v) = f.scan_interval.filter(|_| unset("scan_interval")) {
            self.scan_interval = parse_interval(&v)
                .unwrap_or_else(|e| usage_error(format!("config: scan_interval: {e}")));
        }
        if let Some(v) = f.scan_rate.filter(|_| unset("scan_rate")) {
            self.scan_rate = v;
        }
        if let Some(v) = f.deep_scan_every.filter(|_| unset("deep_scan_every")) {
            self.deep_scan_every = v;
        }
        if let Some(v) = f.heal_rate.filter(|_| unset("heal_rate")) {
            self.heal_rate = v;
        }
        if let Some(v) = f.heal_bytes_rate.filter(|_| unset("heal_bytes_rate")) {
            self.heal_bytes_rate = parse_bytes(&v.text())
                .unwrap_or_else(|e| usage_error(format!("config: heal_bytes_rate: {e}")));
        }
        if let Some(v) = f.list_cache_bytes.filter(|_| unset("list_cache_bytes")) {
            self.list_cache_bytes = parse_bytes(&v.text())
                .unwrap_or_else(|e| usage_error(format!("config: list_cache_bytes: {e}")));
        }
        if let Some(v) = f
            .drive_check_interval
            .filter(|_| unset("drive_check_interval"))
        {
            self.drive_check_interval = parse_interval(&v)
                .unwrap_or_else(|e| usage_error(format!("config: drive_check_interval: {e}")));
        }
        if let Some(v) = f.orphan_min_age.filter(|_| unset("orphan_min_age")) {
            self.orphan_min_age = parse_interval(&v)
                .unwrap_or_else(|e| usage_error(format!("config: orphan_min_age: {e}")));
        }
        if let Some(v) = f
            .orphan_sweep_interval
            .filter(|_| unset("orphan_sweep_interval"))
        {
            self.orphan_sweep_interval = parse_interval(&v)
                .unwrap_or_else(|e| usage_error(format!("config: orphan_sweep_interval: {e}")));
        }
        if let Some(v) = f.retired_grace.filter(|_| unset("retired_grace")) {
            self.retired_grace = parse_interval(&v)
                .unwrap_or_else(|e| usage_error(format!("config: retired_grace: {e}")));
        }
        if let Some(v) = f.rdma.filter(|_| unset("rdma")) {
            self.rdma = v
                .parse()
                .unwrap_or_else(|e| usage_error(format!("config: rdma: {e}")));
        }
        if let Some(v) = f.rdma_device.filter(|_| unset("rdma_device")) {
            self.rdma_device = Some(v);
        }
        use quarry_net::rdma as r;
        if let Some(v) = f.rdma_gid_index.filter(|_| unset("rdma_gid_index")) {
            self.rdma_gid_index = Some(
                r::parse_gid_index(&v.to_string())
                    .unwrap_or_else(|e| usage_error(format!("config: rdma_gid_index: {e}"))),
            );
        }
        if let Some(v) = f.rdma_qp_per_peer.filter(|_| unset("rdma_qp_per_peer")) {
            self.rdma_qp_per_peer = r::parse_qp_per_peer(&v.to_string())
                .unwrap_or_else(|e| usage_error(format!("config: rdma_qp_per_peer: {e}")));
        }
        if let Some(v) = f.rdma_pool_bytes.filter(|_| unset("rdma_pool_bytes")) {
            self.rdma_pool_bytes = r::parse_pool_bytes(&v.text())
                .unwrap_or_else(|e| usage_error(format!("config: rdma_pool_bytes: {e}")));
        }
        if let Some(v) = f
            .rdma_max_connections
            .filter(|_| unset("rdma_max_connections"))
        {
            self.rdma_max_connections = r::parse_max_connections(&v.to_string())
                .unwrap_or_else(|e| usage_error(format!("config: rdma_max_connections: {e}")));
        }
        if let Some(v) = f.rdma_client_idle.filter(|_| unset("rdma_client_idle")) {
            self.rdma_client_idle = parse_rdma_client_idle(&v)
                .unwrap_or_else(|e| usage_error(format!("config: rdma_client_idle: {e}")));
        }
        if let Some(v) = f.certs_dir.filter(|_| unset("certs_dir")) {
            self.certs_dir = Some(PathBuf::from(v));
        }
        if let Some(v) = f
            .certs_check_interval
            .filter(|_| unset("certs_check_interval"))
        {
            self.certs_check_interval = parse_interval(&v)
                .unwrap_or_else(|e| usage_error(format!("config: certs_check_interval: {e}")));
        }
        if let Some(v) = f.console_address.filter(|_| unset("console_address")) {
            self.console_address = v;
        }
        if unset("cluster_secret") && unset("cluster_secret_file") {
            match (f.cluster_secret, f.cluster_secret_file) {
                (Some(_), Some(_)) => {
                    usage_error("config: cluster_secret and cluster_secret_file exclude each other")
                }
                (Some(v), None) => self.cluster_secret = Some(v),
                (None, Some(v)) => self.cluster_secret_file = Some(PathBuf::from(v)),
                (None, None) => {}
            }
        }
        if unset("root_user") && unset("root_password") {
            match (f.root_user, f.root_password) {
                (Some(u), Some(p)) => {
                    self.root_user = Some(u);
                    self.root_password = Some(p);
                }
                (None, None) => {}
                _ => usage_error("config: root_user and root_password go together"),
            }
        }
    }

    /// Applies the config file (if any) and defaults; a bad combination exits with a usage
    /// error, as clap does. `matches` are the `server` subcommand's, to know which values the
    /// command line or environment set (they win over the file).
    pub fn settings_with(mut self, matches: Option<&clap::ArgMatches>) -> Settings {
        if let Some(path) = self.config.clone() {
            match load_config(&path) {
                Ok(f) => self.apply_config(f, matches),
                Err(e) => usage_error(e),
            }
        }
        self.settings()
    }

    /// Applies defaults; a bad combination exits with a usage error, as clap does.
    pub fn settings(self) -> Settings {
        let mut cluster = None;
        let dirs: Vec<PathBuf> = if self.dirs.is_empty() {
            DEFAULT_DRIVES.iter().map(PathBuf::from).collect()
        } else if quarry_object::topology::is_cluster_args(&self.dirs) {
            match quarry_object::topology::Topology::from_args(&self.dirs, self.set_size) {
                Ok(t) => cluster = Some(t),
                Err(e) => usage_error(e),
            }
            Vec::new()
        } else {
            if self.set_size.is_some() {
                usage_error("--set-size applies to a cluster (drives given as http:// URLs); a single node has one set of all its drives");
            }
            self.dirs.iter().map(PathBuf::from).collect()
        };
        if dirs.len() > MAX_DRIVES {
            usage_error(format!(
                "a node serves 1 to {MAX_DRIVES} drives; {} were given",
                dirs.len()
            ));
        }
        if let Some(user) = &self.root_user {
            if user.len() < 3 || user.chars().any(|c| c.is_control() || c == '/' || c == ':') {
                usage_error("--root-user must be at least 3 characters, without '/', ':' or control characters");
            }
        }
        if self.root_password.as_ref().is_some_and(|p| p.len() < 8) {
            usage_error("--root-password must be at least 8 characters");
        }
        if self.region.is_empty()
            || !self
                .region
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            usage_error("--region must be letters, digits and '-' (e.g. us-east-1)");
        }
        let mut domains = Vec::new();
        for d in &self.domains {
            let d = d.trim().trim_end_matches('.').to_ascii_lowercase();
            if d.is_empty() {
                continue;
            }
            if d.contains(':') || d.contains('/') || d.starts_with('.') || d.contains("..") {
                usage_error(format!(
                    "--domain {d:?} must be a host name without port or scheme (e.g. s3.example.com)"
                ));
            }
            domains.push(d);
        }
        let metrics = match (self.metrics_token, self.metrics_public) {
            (Some(_), true) => usage_error(
                "--metrics-token and --metrics-public exclude each other: a token or anyone",
            ),
            (Some(t), false) if t.trim().len() < 16 || t.chars().any(|c| c.is_control()) => {
                usage_error(
                    "--metrics-token must be at least 16 characters, without control characters",
                )
            }
            (Some(t), false) => quarry_s3::MetricsAccess::Bearer(t.trim().to_owned()),
            (None, true) => quarry_s3::MetricsAccess::Public,
            (None, false) => quarry_s3::MetricsAccess::Closed,
        };
        // The certificates: the directory given, or `certs` beside the config file, or
        // ~/.quarry/certs (MinIO's ~/.minio/certs).
        let certs_dir = match (&self.certs_dir, &self.config) {
            (Some(d), _) => Some((d.clone(), true)),
            (None, Some(c)) => Some((
                c.parent()
                    .map_or_else(|| PathBuf::from("."), PathBuf::from)
                    .join("certs"),
                false,
            )),
            (None, None) => std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| (PathBuf::from(h).join(".quarry").join("certs"), false)),
        };
        let console = match self.console_address.trim() {
            "off" | "" => None,
            a if a.parse::<std::net::SocketAddr>().is_err() && !a.contains(':') => usage_error(
                format!("--console-address {a:?}: give HOST:PORT (e.g. 127.0.0.1:9001) or off"),
            ),
            a => Some(ConsoleAddress {
                default: a == DEFAULT_CONSOLE_ADDRESS,
                address: a.to_owned(),
            }),
        };
        Settings {
            console,
            certs_dir,
            certs_check_interval: Some(self.certs_check_interval).filter(|d| !d.is_zero()),
            dirs,
            cluster,
            metrics,
            body_timeout: self.body_timeout,
            domains,
            address: self.address,
            root: self.root_user.zip(self.root_password),
            region: self.region,
            log_format: self.log_format,
            multipart_expiry: self.multipart_expiry,
            default_object_ownership: self.default_object_ownership,
            scan_interval: Some(self.scan_interval).filter(|d| !d.is_zero()),
            scan_rate: self.scan_rate,
            deep_scan_every: self.deep_scan_every,
            heal_rate: self.heal_rate,
            heal_bytes_rate: self.heal_bytes_rate,
            list_cache_bytes: self.list_cache_bytes,
            drive_check_interval: Some(self.drive_check_interval).filter(|d| !d.is_zero()),
            orphan_sweep: quarry_disk::SweepSchedule {
                min_age: self.orphan_min_age,
                every: Some(self.orphan_sweep_interval).filter(|d| !d.is_zero()),
                retired_grace: self.retired_grace,
            },
            header_timeout: self.header_timeout,
            max_connections: self.max_connections,
            rdma: quarry_net::rdma::RdmaSettings {
                mode: self.rdma,
                device: self.rdma_device.filter(|d| !d.is_empty()),
                gid_index: self.rdma_gid_index,
                qp_per_peer: self.rdma_qp_per_peer,
                pool_bytes: self.rdma_pool_bytes,
                max_connections: self.rdma_max_connections,
                client_idle: self.rdma_client_idle,
            },
            cluster_secret: match (self.cluster_secret, self.cluster_secret_file) {
                (Some(v), _) => Some(SecretSource::Value(v)),
                (None, Some(p)) => Some(SecretSource::File(p)),
                (None, None) => None,
            },
        }
    }
}

/// Exits with a usage error of `quarry server`, as clap reports its own.
fn usage_error(message: impl std::fmt::Display) -> ! {
    let mut cli = Cli::command();
    let mut server = cli
        .find_subcommand_mut("server")
        .cloned()
        .unwrap_or_else(Cli::command)
        .bin_name("quarry server");
    server
        .error(clap::error::ErrorKind::ValueValidation, message)
        .exit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;
    use std::path::Path;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("quarry").chain(args.iter().copied()))
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_and_flags() {
        let Command::Server(args) = parse(&["server"]).unwrap().command else {
            panic!("not `server`")
        };
        assert!(args.dirs.is_empty());
        let Command::Server(args) = parse(&[
            "server",
            "/a",
            "/b",
            "--address",
            "0.0.0.0:9100",
            "--log-format",
            "json",
        ])
        .unwrap()
        .command
        else {
            panic!("not `server`")
        };
        assert_eq!(args.dirs, vec!["/a", "/b"]);
        assert_eq!(args.address, "0.0.0.0:9100");
        assert_eq!(args.log_format, LogFormat::Json);
        assert!(args.domains.is_empty());
        let Command::Server(args) = parse(&["server", "--domain", "s3.example.com,S3.Local."])
            .unwrap()
            .command
        else {
            panic!("not `server`")
        };
        let settings = args.settings();
        assert_eq!(settings.domains, ["s3.example.com", "s3.local"]);
    }

    fn settings_of(args: &[&str]) -> Settings {
        let m = Cli::command()
            .try_get_matches_from(std::iter::once("quarry").chain(args.iter().copied()))
            .unwrap();
        let Command::Server(a) = Cli::from_arg_matches(&m).unwrap().command else {
            panic!("not server")
        };
        a.settings_with(m.subcommand_matches("server"))
    }

    #[test]
    fn console_address_default_off_given_and_from_the_file() {
        if std::env::var_os("QUARRY_CONSOLE_ADDRESS").is_some() {
            return; // the environment decides here
        }
        let s = settings_of(&["server", "/d"]);
        assert_eq!(
            s.console,
            Some(ConsoleAddress {
                address: DEFAULT_CONSOLE_ADDRESS.into(),
                default: true
            })
        );
        let s = settings_of(&["server", "/d", "--console-address", "off"]);
        assert_eq!(s.console, None);
        let s = settings_of(&["server", "/d", "--console-address", "0.0.0.0:9443"]);
        assert_eq!(
            s.console,
            Some(ConsoleAddress {
                address: "0.0.0.0:9443".into(),
                default: false
            })
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("q.toml");
        std::fs::write(&f, "version = 1\nconsole_address = \"off\"\n").unwrap();
        let s = settings_of(&["server", "/d", "--config", f.to_str().unwrap()]);
        assert_eq!(s.console, None);
    }

    #[test]
    fn config_file_fills_what_flags_do_not_set() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("q.toml");
        std::fs::write(
            &f,
            "version = 1\naddress = \"127.0.0.1:9100\"\nregion = \"eu-west-1\"\ndrives = [\"/x/a\", \"/x/b\"]\nmultipart_expiry = \"2h\"\n",
        )
        .unwrap();
        let path = f.to_str().unwrap();
        let s = settings_of(&["server", "--config", path]);
        assert_eq!(s.address, "127.0.0.1:9100");
        assert_eq!(s.region, "eu-west-1");
        assert_eq!(s.dirs, vec![PathBuf::from("/x/a"), PathBuf::from("/x/b")]);
        assert_eq!(s.multipart_expiry, Duration::from_secs(7200));
        // A flag wins over the file.
        let s = settings_of(&["server", "--config", path, "--region", "us-east-1", "/y"]);
        assert_eq!(s.region, "us-east-1");
        assert_eq!(s.dirs, vec![PathBuf::from("/y")]);
        assert_eq!(s.address, "127.0.0.1:9100");
        // The example configs parse.
        for example in [
            "single-node.toml",
            "cluster-4-node.toml",
            "cluster-rdma.toml",
        ] {
            let p = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../config")
                .join(example);
            load_config(&p).unwrap_or_else(|e| panic!("{example}: {e}"));
        }
        // Unknown keys and versions are refused with a clear message.
        std::fs::write(&f, "version = 1\nadress = \"x\"\n").unwrap();
        assert!(load_config(&f).unwrap_err().contains("adress"));
        std::fs::write(&f, "version = 2\n").unwrap();
        assert!(load_config(&f).unwrap_err().contains("version 2"));
    }

    #[test]
    fn heal_settings_come_from_flags_or_the_file() {
        for v in [
            "QUARRY_DEEP_SCAN_EVERY",
            "QUARRY_HEAL_RATE",
            "QUARRY_HEAL_BYTES_RATE",
            "QUARRY_DRIVE_CHECK_INTERVAL",
        ] {
            if std::env::var_os(v).is_some() {
                return; // the environment decides here
            }
        }
        let s = settings_of(&["server"]);
        let o = s.object_config();
        assert_eq!(
            (o.deep_scan_every, o.heal_rate, o.heal_bytes_rate),
            (quarry_object::DEFAULT_DEEP_SCAN_EVERY, 0, 0)
        );
        assert_eq!(
            o.drive_check_interval,
            Some(quarry_object::DEFAULT_DRIVE_CHECK_INTERVAL)
        );
        let s = settings_of(&[
            "server",
            "--deep-scan-every",
            "3",
            "--heal-rate",
            "40",
            "--heal-bytes-rate",
            "64MiB",
            "--drive-check-interval",
            "0",
        ]);
        let o = s.object_config();
        assert_eq!(
            (o.deep_scan_every, o.heal_rate, o.heal_bytes_rate),
            (3, 40, 64 << 20)
        );
        assert_eq!(o.drive_check_interval, None);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("q.toml");
        std::fs::write(
            &f,
            "version = 1\ndeep_scan_every = 5\nheal_rate = 7\nheal_bytes_rate = \"1GiB\"\ndrive_check_interval = \"30s\"\n",
        )
        .unwrap();
        let path = f.to_str().unwrap();
        let o = settings_of(&["server", "--config", path]).object_config();
        assert_eq!(
            (o.deep_scan_every, o.heal_rate, o.heal_bytes_rate),
            (5, 7, 1 << 30)
        );
        assert_eq!(o.drive_check_interval, Some(Duration::from_secs(30)));
        // A flag wins over the file.
        let o = settings_of(&["server", "--config", path, "--heal-rate", "9"]).object_config();
        assert_eq!(o.heal_rate, 9);
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("-1").is_err());
        assert_eq!(parse_bytes("512k"), Ok(512 << 10));
    }

    #[test]
    fn the_list_cache_bound_comes_from_the_flag_or_the_file() {
        if std::env::var_os("QUARRY_LIST_CACHE_BYTES").is_some() {
            return; // the environment decides here
        }
        let bytes = |args: &[&str]| settings_of(args).list_cache_bytes;
        assert_eq!(
            bytes(&["server"]),
            quarry_disk::DEFAULT_LIST_CACHE_BUDGET as u64
        );
        assert_eq!(bytes(&["server", "--list-cache-bytes", "0"]), 0);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("q.toml");
        std::fs::write(&f, "version = 1\nlist_cache_bytes = \"1GiB\"\n").unwrap();
        let path = f.to_str().unwrap();
        assert_eq!(bytes(&["server", "--config", path]), 1 << 30);
        assert_eq!(
            bytes(&["server", "--config", path, "--list-cache-bytes", "64MiB"]),
            64 << 20
        );
    }

    #[test]
    fn rdma_settings_come_from_flags_or_the_file_and_bad_ones_are_refused() {
        let s = settings_of(&["server"]);
        assert_eq!(s.rdma, quarry_net::rdma::RdmaSettings::default());
        let s = settings_of(&[
            "server",
            "--rdma",
            "on",
            "--rdma-device",
            "rxe0",
            "--rdma-gid-index",
            "3",
            "--rdma-qp-per-peer",
            "8",
            "--rdma-pool-bytes",
            "64MiB",
            "--rdma-max-connections",
            "1000",
            "--rdma-client-idle",
            "90s",
        ]);
        assert_eq!(
            s.rdma,
            quarry_net::rdma::RdmaSettings {
                mode: quarry_net::rdma::RdmaMode::On,
                device: Some("rxe0".into()),
                gid_index: Some(3),
                qp_per_peer: 8,
                pool_bytes: 64 << 20,
                max_connections: 1000,
                client_idle: Duration::from_secs(90),
            }
        );
        for bad in [
            &["server", "--rdma-qp-per-peer", "0"][..],
            &["server", "--rdma-qp-per-peer", "257"],
            &["server", "--rdma-pool-bytes", "100MiB"],
            &["server", "--rdma-pool-bytes", "1MiB"],
            &["server", "--rdma-max-connections", "1001"],
            &["server", "--rdma-gid-index", "x"],
            &["server", "--rdma-client-idle", "0"],
        ] {
            let e = Cli::command()
                .try_get_matches_from(std::iter::once("quarry").chain(bad.iter().copied()))
                .unwrap_err()
                .to_string();
            assert!(e.contains("QUARRY_RDMA_"), "{bad:?}: {e}");
        }
        // The file: sizes as text or as a number; a flag wins.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("q.toml");
        std::fs::write(
            &f,
            "version = 1\nrdma_pool_bytes = \"32MiB\"\nrdma_qp_per_peer = 4\nrdma_gid_index = 1\nrdma_max_connections = 9\nrdma_client_idle = \"1h\"\n",
        )
        .unwrap();
        let path = f.to_str().unwrap();
        let s = settings_of(&["server", "--config", path]);
        assert_eq!(
            (
                s.rdma.pool_bytes,
                s.rdma.qp_per_peer,
                s.rdma.gid_index,
                s.rdma.max_connections,
                s.rdma.client_idle
            ),
            (32 << 20, 4, Some(1), 9, Duration::from_secs(3600))
        );
        std::fs::write(&f, "version = 1\nrdma_pool_bytes = 33554432\n").unwrap();
        let s = settings_of(&["server", "--config", path, "--rdma-qp-per-peer", "3"]);
        assert_eq!((s.rdma.pool_bytes, s.rdma.qp_per_peer), (32 << 20, 3));
    }

    #[test]
    fn the_cluster_secret_comes_from_a_flag_a_file_or_the_config_and_is_never_printed() {
        assert_eq!(settings_of(&["server"]).cluster_secret, None);
        let s = settings_of(&["server", "--cluster-secret", "0123456789abcdef-xyz"]);
        assert_eq!(
            s.cluster_secret,
            Some(SecretSource::Value("0123456789abcdef-xyz".into()))
        );
        assert!(!format!("{s:?}").contains("0123456789abcdef-xyz"));
        let s = settings_of(&["server", "--cluster-secret-file", "/etc/q/secret"]);
        assert_eq!(
            s.cluster_secret,
            Some(SecretSource::File(PathBuf::from("/etc/q/secret")))
        );
        assert!(parse(&[
            "server",
            "--cluster-secret",
            "a",
            "--cluster-secret-file",
            "b"
        ])
        .is_err());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("q.toml");
        std::fs::write(&f, "version = 1\ncluster_secret_file = \"/srv/secret\"\n").unwrap();
        let path = f.to_str().unwrap();
        let s = settings_of(&["server", "--config", path]);
        assert_eq!(
            s.cluster_secret,
            Some(SecretSource::File(PathBuf::from("/srv/secret")))
        );
        // A flag wins over the file.
        let s = settings_of(&[
            "server",
            "--config",
            path,
            "--cluster-secret",
            "from-the-flag-123",
        ]);
        assert_eq!(
            s.cluster_secret,
            Some(SecretSource::Value("from-the-flag-123".into()))
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        for bad in ["", "h", "0", "5w", "-1h", "1.5h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let Command::Server(args) = parse(&["server"]).unwrap().command else {
            panic!("not `server`")
        };
        assert_eq!(args.multipart_expiry, Duration::from_secs(86_400));
    }

    #[test]
    fn root_user_and_password_go_together() {
        assert!(parse(&["server", "--root-user", "admin"]).is_err());
        assert!(parse(&[
            "server",
            "--root-user",
            "admin",
            "--root-password",
            "secret123"
        ])
        .is_ok());
        assert!(parse(&["server", "--log-format", "xml"]).is_err());
    }
}
