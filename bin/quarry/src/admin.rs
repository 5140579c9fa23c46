//! `quarry admin`: calls the admin API of a running server (`/quarry/admin/v1/`, see
//! `quarry_s3::admin`), signed with SigV4 by the root user, and prints the answer for people
//! (or as JSON with `--json`).
//!
//! ```text
//! quarry admin heal [--endpoint URL] [--access-key K --secret-key S] [--wait] [BUCKET [PREFIX]]
//! quarry admin heal-status [--endpoint URL] [--access-key K --secret-key S] [JOB]
//! quarry admin info [--endpoint URL] [--access-key K --secret-key S] [--json]
//! quarry admin drives [--endpoint URL] [--access-key K --secret-key S] [--json]
//! quarry admin kms keys [--endpoint URL] [--access-key K --secret-key S] [--json]
//! quarry admin kms rotate --from OLD --to NEW [--bucket B] [--prefix P] [--json] [...]
//! quarry admin cert generate [--out DIR] [--ca-dir DIR] [--days N] [NAMES...]
//! quarry admin user|policy|group|svcacct ...   (identities: see `crate::identities`)
//! ```
//!
//! An `https://` endpoint is verified against the CA certificates of `--ca-cert FILE` (or
//! `QUARRY_CA_CERT`), else against the system's trusted roots.
//!
//! `heal` starts a heal job on the server and prints its id; with `--wait` it follows the job
//! (progress on one line: objects, bytes, rate, ETA) and prints its report, ending with what the
//! job's verification found still missing.
//!
//! Exit status: 0 when the call succeeded (and, for `heal --wait`, every object is whole and the
//! verification found nothing missing), 1 when the call failed (unreachable server, refused
//! credentials, no such bucket...), 3 when a heal ran but could not heal every object (the report
//! says which and why).

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context};
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use clap::{Args, Subcommand};
use serde::Deserialize;

/// How long to wait for a connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a status call may take by default.
const STATUS_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a rotation may take by default (it walks every object it is given).
const ROTATE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// Exit status of a heal that ran but left objects unhealed (and of a rotation that left
/// objects under the old key).
const EXIT_UNHEALED: u8 = 3;

#[derive(Debug, Args)]
pub struct AdminArgs {
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Start a heal job: check every bucket's state and every object of BUCKET (or of every
    /// bucket) under PREFIX, rewrite missing or corrupt copies, then check again what was
    /// rewritten. Prints the job id; with --wait, follows it and prints what was done.
    Heal(HealArgs),
    /// Show the heal queue, the retry list, the background scanner and the heal jobs; with JOB,
    /// that job's progress and report.
    HealStatus(HealStatusArgs),
    /// Show the deployment as the server sees it now: nodes (and whether each answers), erasure
    /// sets, drives with their space, and internode traffic.
    Info(Connection),
    /// Show every drive: its set, node, state and space.
    Drives(Connection),
    /// Drop the node's data-plane connections to PEER (host:port; default: every peer), as a
    /// failure would: transfers on them fail over or are retried, the next ones reconnect (for
    /// RDMA: the queue pairs go to the error state and are rebuilt).
    ResetConnections(ResetArgs),
    /// Users: add, list, info, disable, enable, remove.
    #[command(subcommand)]
    User(crate::identities::UserCommand),
    /// Managed policies: create, list, info, attach, detach, remove.
    #[command(subcommand)]
    Policy(crate::identities::PolicyCommand),
    /// Groups: add, list, info, remove, add-member, remove-member.
    #[command(subcommand)]
    Group(crate::identities::GroupCommand),
    /// Service accounts (keys bound to a user, optionally narrowed and expiring): add, list,
    /// info, remove.
    #[command(subcommand)]
    Svcacct(crate::identities::SvcacctCommand),
    /// The key service of SSE-S3 and SSE-KMS: list its master keys, rotate objects to another.
    #[command(subcommand)]
    Kms(KmsCommand),
    /// TLS certificates for a trial: `quarry admin cert generate`.
    #[command(subcommand)]
    Cert(CertCommand),
}

#[derive(Debug, Subcommand)]
pub enum KmsCommand {
    /// List the master key ids the server's key service holds (names only) and the default.
    Keys(Connection),
    /// Re-seal the object keys of every version and upload in progress sealed under master key
    /// OLD under NEW (SSE-S3 and SSE-KMS; SSE-C objects are the customer's), in place: the data
    /// is not rewritten. Both keys must be configured while it runs; afterwards OLD can be
    /// removed. Exit status 3 when some objects failed (the report says which and why).
    Rotate(RotateArgs),
}

#[derive(Debug, Args)]
pub struct RotateArgs {
    #[command(flatten)]
    pub conn: Connection,

    /// The master key objects are sealed under now.
    #[arg(long, value_name = "OLD")]
    pub from: String,

    /// The master key to re-seal them under.
    #[arg(long, value_name = "NEW")]
    pub to: String,

    /// Only this bucket. Default: every bucket.
    #[arg(long, value_name = "B")]
    pub bucket: Option<String>,

    /// Only keys that start with this.
    #[arg(long, value_name = "P")]
    pub prefix: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Make a certificate for this node, signed by a CA of your own (made on first use), in the
    /// layout `quarry server` reads: OUT/public.crt, OUT/private.key and OUT/CAs/ca.crt. Run it
    /// once per node with the same --ca-dir, and copy each node its directory (see the README).
    /// For trials: a production deployment takes its certificates from its own PKI.
    Generate(GenerateArgs),
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The certificate directory to write (the server's --certs-dir). Default: ~/.quarry/certs.
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,

    /// Where the CA's certificate and key are (ca.crt, ca.key; made if missing). Keep ca.key
    /// private: whoever holds it can make certificates every node trusts. Default: `ca` beside
    /// the certificate directory.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: Option<std::path::PathBuf>,

    /// Days the certificate is valid.
    #[arg(long, default_value_t = 365, value_name = "N")]
    pub days: u32,

    /// Replace a certificate already in the directory.
    #[arg(long)]
    pub force: bool,

    /// Host names and IP addresses clients use to reach this node (the first is also the
    /// certificate's common name). Default: localhost 127.0.0.1 ::1.
    #[arg(value_name = "NAMES")]
    pub names: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    #[command(flatten)]
    pub conn: Connection,

    /// The peer (host:port as in the drive list). Default: every peer.
    #[arg(value_name = "PEER")]
    pub peer: Option<String>,
}

/// Where the server is and who calls it.
#[derive(Debug, Args)]
pub struct Connection {
    /// The server's S3 endpoint.
    #[arg(
        long,
        env = "QUARRY_ENDPOINT",
        default_value = "http://127.0.0.1:9000",
        value_name = "URL"
    )]
    pub endpoint: String,

    /// Access key of the root user.
    #[arg(long, env = "QUARRY_ROOT_USER", value_name = "K")]
    pub access_key: Option<String>,

    /// Secret key of the root user.
    #[arg(
        long,
        env = "QUARRY_ROOT_PASSWORD",
        hide_env_values = true,
        value_name = "S"
    )]
    pub secret_key: Option<String>,

    /// Region the server answers for (the SigV4 scope).
    #[arg(
        long,
        env = "QUARRY_REGION",
        default_value = "us-east-1",
        value_name = "R"
    )]
    pub region: String,

    /// Give up waiting for the answer after this long (e.g. 30s, 10m, 2h); for `heal --wait`,
    /// stop following the job after this long (the job goes on). Default: 30s per call, and no
    /// limit on following a job.
    #[arg(long, value_parser = crate::cli::parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,

    /// Print the server's JSON answer instead of a summary.
    #[arg(long)]
    pub json: bool,

    /// CA certificates (PEM) to verify an https:// endpoint with, instead of the system's.
    #[arg(long, env = "QUARRY_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct HealArgs {
    #[command(flatten)]
    pub conn: Connection,

    /// The bucket to heal. Default: every bucket.
    #[arg(value_name = "BUCKET")]
    pub bucket: Option<String>,

    /// Heal only keys that start with this.
    #[arg(value_name = "PREFIX", requires = "bucket")]
    pub prefix: Option<String>,

    /// Follow the job until it ends (progress on stderr) and print its report.
    #[arg(long)]
    pub wait: bool,
}

#[derive(Debug, Args)]
pub struct HealStatusArgs {
    #[command(flatten)]
    pub conn: Connection,

    /// A heal job's id, as `quarry admin heal` printed it.
    #[arg(value_name = "JOB")]
    pub job: Option<String>,
}

/// Runs `quarry admin ...` and returns the process's exit status.
pub fn main(args: AdminArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("quarry admin: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("quarry admin: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AdminCommand::Cert(CertCommand::Generate(a)) => generate(a),
        AdminCommand::User(c) => crate::identities::user(c).await.map(|()| ExitCode::SUCCESS),
        AdminCommand::Policy(c) => crate::identities::policy(c)
            .await
            .map(|()| ExitCode::SUCCESS),
        AdminCommand::Group(c) => crate::identities::group(c)
            .await
            .map(|()| ExitCode::SUCCESS),
        AdminCommand::Svcacct(c) => crate::identities::svcacct(c)
            .await
            .map(|()| ExitCode::SUCCESS),
        AdminCommand::Heal(a) => {
            let mut query = Vec::new();
            if let Some(b) = &a.bucket {
                query.push(("bucket", b.as_str()));
            }
            if let Some(p) = &a.prefix {
                query.push(("prefix", p.as_str()));
            }
            let body = call(&a.conn, "POST", "heal/jobs", &query, STATUS_TIMEOUT).await?;
            let job: HealJob = serde_json::from_str(&body)
                .with_context(|| format!("the server's answer is not a heal job: {body}"))?;
            if !a.wait {
                if a.conn.json {
                    println!("{body}");
                } else {
                    println!(
                        "Heal job {} started ({}). Follow it with: quarry admin heal-status {}",
                        job.id,
                        job_scope(&job),
                        job.id
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            let (job, body) = follow(&a.conn, &job.id).await?;
            if a.conn.json {
                println!("{body}");
            } else {
                print!("{}", format_job(&job));
            }
            Ok(job_exit(&job))
        }
        AdminCommand::HealStatus(a) => {
            if let Some(id) = &a.job {
                let body = call(
                    &a.conn,
                    "GET",
                    &format!("heal/jobs/{}", encode(id)),
                    &[],
                    STATUS_TIMEOUT,
                )
                .await?;
                if a.conn.json {
                    println!("{body}");
                } else {
                    let job: HealJob = serde_json::from_str(&body).with_context(|| {
                        format!("the server's answer is not a heal job: {body}")
                    })?;
                    print!("{}", format_job(&job));
                }
                return Ok(ExitCode::SUCCESS);
            }
            let body = call(&a.conn, "GET", "heal/status", &[], STATUS_TIMEOUT).await?;
            if a.conn.json {
                println!("{body}");
            } else {
                let status: HealStatus = serde_json::from_str(&body)
                    .with_context(|| format!("the server's answer is not a heal status: {body}"))?;
                print!("{}", format_status(&status));
                let body = call(&a.conn, "GET", "heal/jobs", &[], STATUS_TIMEOUT).await?;
                let jobs: HealJobs = serde_json::from_str(&body)
                    .with_context(|| format!("the server's answer is not a job list: {body}"))?;
                for j in &jobs.jobs {
                    println!("Heal job:    {}  {}", j.id, progress_line(j));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AdminCommand::Info(conn) => {
            let body = call(&conn, "GET", "info", &[], STATUS_TIMEOUT).await?;
            if conn.json {
                println!("{body}");
            } else {
                let info: Info = serde_json::from_str(&body)
                    .with_context(|| format!("the server's answer is not cluster info: {body}"))?;
                print!("{}", format_info(&info));
            }
            Ok(ExitCode::SUCCESS)
        }
        AdminCommand::ResetConnections(a) => {
            let query: Vec<(&str, &str)> = a.peer.iter().map(|p| ("peer", p.as_str())).collect();
            let body = call(&a.conn, "POST", "data-plane/reset", &query, STATUS_TIMEOUT).await?;
            if a.conn.json {
                println!("{body}");
            } else {
                let v: serde_json::Value = serde_json::from_str(&body).with_context(|| {
                    format!("the server's answer is not a reset report: {body}")
                })?;
                let n = v["reset"].as_u64().unwrap_or(0);
                println!(
                    "Dropped {n} data-plane connection{} to {}; the next transfers reconnect.",
                    if n == 1 { "" } else { "s" },
                    a.peer.as_deref().unwrap_or("every peer")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        AdminCommand::Kms(KmsCommand::Keys(conn)) => {
            let body = call(&conn, "GET", "kms/keys", &[], STATUS_TIMEOUT).await?;
            if conn.json {
                println!("{body}");
            } else {
                let keys: KmsKeys = serde_json::from_str(&body)
                    .with_context(|| format!("the server's answer is not a key list: {body}"))?;
                print!("{}", format_keys(&keys));
            }
            Ok(ExitCode::SUCCESS)
        }
        AdminCommand::Kms(KmsCommand::Rotate(a)) => {
            let mut query = vec![("from", a.from.as_str()), ("to", a.to.as_str())];
            if let Some(b) = &a.bucket {
                query.push(("bucket", b.as_str()));
            }
            if let Some(p) = &a.prefix {
                query.push(("prefix", p.as_str()));
            }
            // A walk of every object: no limit unless --timeout gives one.
            let body = call(&a.conn, "POST", "kms/rotate", &query, ROTATE_TIMEOUT).await?;
            let report: RotateReport = serde_json::from_str(&body)
                .with_context(|| format!("the server's answer is not a rotation report: {body}"))?;
            if a.conn.json {
                println!("{body}");
            } else {
                print!("{}", format_rotation(&report));
            }
            Ok(if report.failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_UNHEALED)
            })
        }
        AdminCommand::Drives(conn) => {
            let body = call(&conn, "GET", "drives", &[], STATUS_TIMEOUT).await?;
            if conn.json {
                println!("{body}");
            } else {
                let drives: Drives = serde_json::from_str(&body)
                    .with_context(|| format!("the server's answer is not a drive list: {body}"))?;
                print!("{}", format_drives(&drives));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// An error and its causes, one after the other (reqwest's own message leaves the causes out).
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        out.push_str(": ");
        out.push_str(&c.to_string());
        next = c.source();
    }
    out
}

/// The TLS client of an https:// endpoint: the CA certificates of `ca_cert`, or the system's.
fn tls_config(
    ca_cert: Option<&std::path::Path>,
) -> anyhow::Result<quarry_tls::rustls::ClientConfig> {
    match ca_cert {
        Some(f) => {
            let pem = std::fs::read(f)
                .with_context(|| format!("cannot read --ca-cert {}", f.display()))?;
            quarry_tls::client_config_trusting(&pem)
                .with_context(|| format!("--ca-cert {}", f.display()))
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                bail!("no trusted CA certificates found on this system: give the server's CA with --ca-cert FILE");
            }
            // Roots the provider cannot use are skipped, as browsers do.
            let usable = found.certs.into_iter().filter(|c| {
                quarry_tls::rustls::RootCertStore::empty()
                    .add(c.clone())
                    .is_ok()
            });
            quarry_tls::store::client_config_with_roots(usable)
                .context("the system's CA certificates")
        }
    }
}

/// `quarry admin cert generate`: a CA (made once) and a certificate it signs, written where the
/// server reads them.
fn generate(a: GenerateArgs) -> anyhow::Result<ExitCode> {
    use quarry_tls::generate::{write_certs_dir, Ca, Validity};
    let out = match a.out {
        Some(d) => d,
        None => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| std::path::PathBuf::from(h).join(".quarry").join("certs"))
            .context("no HOME: give the certificate directory with --out")?,
    };
    let ca_dir = a.ca_dir.unwrap_or_else(|| {
        out.parent()
            .map_or_else(|| std::path::PathBuf::from("."), std::path::PathBuf::from)
            .join("ca")
    });
    if a.days == 0 {
        bail!("--days must be at least 1");
    }
    let crt = out.join(quarry_tls::certs::PUBLIC_CRT);
    if crt.exists() && !a.force {
        bail!(
            "{} exists: give --force to replace it (a running server picks up the new one by itself)",
            crt.display()
        );
    }
    let names = if a.names.is_empty() {
        vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ]
    } else {
        a.names
    };
    let (ca, made) = Ca::load_or_create(&ca_dir, Validity::days(3650))
        .with_context(|| format!("the CA in {}", ca_dir.display()))?;
    if made {
        println!(
            "Made a new CA in {} (ca.crt, and ca.key: keep it private)",
            ca_dir.display()
        );
    } else {
        println!("Signed with the CA in {}", ca_dir.display());
    }
    let leaf = ca.issue(&names, Validity::days(a.days))?;
    write_certs_dir(&out, &leaf, &ca.pem().cert)?;
    println!(
        "Wrote {} and {} for {} (valid {} days), and the CA as {}",
        crt.display(),
        out.join(quarry_tls::certs::PRIVATE_KEY).display(),
        names.join(", "),
        a.days,
        out.join(quarry_tls::certs::CAS_DIR)
            .join(quarry_tls::generate::CA_CRT)
            .display()
    );
    println!(
        "Clients trust it with the CA certificate, e.g. `aws --ca-bundle {}`.",
        ca_dir.join(quarry_tls::generate::CA_CRT).display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Percent-encodes a query value as SigV4 does: everything but `A-Z a-z 0-9 - _ . ~` (also
/// what a form body of the IAM query API needs).
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Sends a signed admin call and returns the body of a 200 answer; any other answer is an error
/// naming the S3 error code and message.
async fn call(
    conn: &Connection,
    method: &str,
    call: &str,
    query: &[(&str, &str)],
    default_timeout: Duration,
) -> anyhow::Result<String> {
    let path = format!("{}{call}", quarry_s3::admin::V1);
    send(conn, method, &path, query, Signed::s3(b""), default_timeout).await
}

/// What a request carries and how it is signed.
pub(crate) struct Signed<'a> {
    /// `s3` (the admin API) or `iam` / `sts` (the query APIs at `POST /`).
    pub service: &'a str,
    pub body: &'a [u8],
    pub content_type: Option<&'a str>,
}

impl<'a> Signed<'a> {
    pub(crate) fn s3(body: &'a [u8]) -> Signed<'a> {
        Signed {
            service: "s3",
            body,
            content_type: None,
        }
    }
}

/// Sends a request to `path` signed with the root user's keys for `signed.service`; returns
/// the body of a 2xx answer, else an error naming the error code and message.
pub(crate) async fn send(
    conn: &Connection,
    method: &str,
    path: &str,
    query: &[(&str, &str)],
    signed: Signed<'_>,
    default_timeout: Duration,
) -> anyhow::Result<String> {
    let (Some(access_key), Some(secret_key)) = (&conn.access_key, &conn.secret_key) else {
        bail!(
            "no credentials: give --access-key and --secret-key, or set QUARRY_ROOT_USER and \
             QUARRY_ROOT_PASSWORD (the root user's, as printed by `quarry server`)"
        );
    };
    let endpoint = conn.endpoint.trim_end_matches('/');
    let base = reqwest::Url::parse(endpoint)
        .with_context(|| format!("--endpoint {endpoint:?} is not a URL"))?;
    if base.scheme() != "http" && base.scheme() != "https" {
        bail!("--endpoint {endpoint:?}: give an http:// or https:// URL");
    }
    let host = match (base.host_str(), base.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => bail!("--endpoint {endpoint:?} has no host"),
    };
    let mut url = format!("{endpoint}{path}");
    if !query.is_empty() {
        let q: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        url = format!("{url}?{}", q.join("&"));
    }

    let identity =
        aws_credential_types::Credentials::new(access_key, secret_key, None, None, "quarry-admin")
            .into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&conn.region)
        .name(signed.service)
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .context("cannot set up SigV4 signing")?
        .into();
    let mut headers = vec![("host", host.as_str())];
    if let Some(ct) = signed.content_type {
        headers.push(("content-type", ct));
    }
    let signable = SignableRequest::new(
        method,
        url.as_str(),
        headers.iter().copied(),
        SignableBody::Bytes(signed.body),
    )
    .context("cannot sign the request")?;
    let (instructions, _) = sign(signable, &params)
        .context("cannot sign the request")?
        .into_parts();

    let mut client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(conn.timeout.unwrap_or(default_timeout));
    if base.scheme() == "https" {
        client = client.use_preconfigured_tls(tls_config(conn.ca_cert.as_deref())?);
    }
    let client = client.build().context("cannot set up the HTTP client")?;
    let method = reqwest::Method::from_bytes(method.as_bytes())?;
    let mut request = client
        .request(method, &url)
        .header("host", &host)
        .body(signed.body.to_vec());
    if let Some(ct) = signed.content_type {
        request = request.header("content-type", ct);
    }
    for (k, v) in instructions.headers() {
        request = request.header(k, v);
    }
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            anyhow!("{url}: no answer within the timeout (see --timeout)")
        } else if e.is_connect() && causes(&e).contains("certificate") {
            anyhow!(
                "{endpoint}: the server's TLS certificate is not trusted ({}): give its CA with --ca-cert FILE",
                causes(&e)
            )
        } else if e.is_connect() {
            anyhow!("cannot connect to {endpoint}: is the server running? ({})", causes(&e))
        } else {
            anyhow!("{url}: {e}")
        }
    })?;
    let status = response.status();
    let body = response
        .text()
        .await
        .with_context(|| format!("{url}: reading the answer failed"))?;
    if status.is_success() {
        return Ok(body);
    }
    let tag = |t: &str| {
        body.split_once(&format!("<{t}>"))
            .and_then(|(_, rest)| rest.split_once(&format!("</{t}>")))
            .map(|(v, _)| v.to_string())
    };
    match (tag("Code"), tag("Message")) {
        (Some(code), Some(message)) => bail!("the server refused: {status} {code}: {message}"),
        _ => bail!("the server answered {status}: {}", body.trim()),
    }
}

/// How often `heal --wait` asks for the job's status.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Polls job `id` until it ends, showing its progress on stderr (one line rewritten in place on
/// a terminal, a line every 10 s otherwise). Returns the last status and its JSON.
async fn follow(conn: &Connection, id: &str) -> anyhow::Result<(HealJob, String)> {
    use std::io::{IsTerminal, Write};
    let tty = std::io::stderr().is_terminal();
    let mut last_line = std::time::Instant::now();
    let deadline = conn.timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let path = format!("heal/jobs/{}", encode(id));
        let body = call(conn, "GET", &path, &[], STATUS_TIMEOUT).await?;
        let job: HealJob = serde_json::from_str(&body)
            .with_context(|| format!("the server's answer is not a heal job: {body}"))?;
        let finished = job.phase == "done" || job.phase == "failed";
        if tty {
            eprint!("\r\x1b[2K{}", progress_line(&job));
            if finished {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        } else if finished || last_line.elapsed() >= Duration::from_secs(10) {
            eprintln!("{}", progress_line(&job));
            last_line = std::time::Instant::now();
        }
        if finished {
            return Ok((job, body));
        }
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            bail!(
                "heal job {id} still {} after --timeout; it goes on: quarry admin heal-status {id}",
                job.phase
            );
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

#[derive(Debug, Deserialize)]
struct HealJobs {
    jobs: Vec<HealJob>,
}

#[derive(Debug, Deserialize)]
struct HealJob {
    id: String,
    bucket: Option<String>,
    prefix: String,
    phase: String,
    error: Option<String>,
    elapsed_secs: f64,
    total_objects: Option<u64>,
    bytes_scanned: u64,
    rate: f64,
    eta_secs: Option<f64>,
    verify_checked: u64,
    verify_missing: u64,
    verify_failed: u64,
    bucket_items_healed: u64,
    report: HealReport,
}

fn job_scope(j: &HealJob) -> String {
    match (&j.bucket, j.prefix.as_str()) {
        (None, _) => "every bucket".to_string(),
        (Some(b), "") => format!("bucket {b}"),
        (Some(b), p) => format!("bucket {b}, prefix {p:?}"),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `healing  120/500 objects (24%), 3 healed, 0 failed, 12.0 MiB, 40.0 obj/s, 1.2 MiB/s, ETA 10s`.
fn progress_line(j: &HealJob) -> String {
    let r = &j.report;
    let done = match j.total_objects {
        Some(t) if t > 0 => format!(
            "{}/{t} objects ({}%)",
            r.scanned,
            (r.scanned * 100 / t).min(100)
        ),
        Some(_) => "0/0 objects".to_string(),
        None => format!("{} objects", r.scanned),
    };
    let mib_s = if j.elapsed_secs > 0.0 {
        j.bytes_scanned as f64 / j.elapsed_secs / (1024.0 * 1024.0)
    } else {
        0.0
    };
    let mut line = format!(
        "{:<9} {done}, {} healed, {} failed, {}, {:.1} obj/s, {mib_s:.1} MiB/s",
        j.phase,
        r.healed,
        r.failed,
        mib(j.bytes_scanned),
        j.rate,
    );
    match (j.phase.as_str(), j.eta_secs) {
        ("healing", Some(eta)) => line.push_str(&format!(", ETA {}s", eta.ceil() as u64)),
        ("verifying", _) => line.push_str(&format!(", re-checked {}", j.verify_checked)),
        _ => {}
    }
    line
}

fn format_job(j: &HealJob) -> String {
    let mut out = format!(
        "Heal job {} ({}): {}\n",
        j.id,
        job_scope(j),
        progress_line(j)
    );
    out.push_str(&format_report(&job_scope(j), &j.report));
    out.push_str(&format!(
        "Bucket state: {} rewritten or removed (directories, configurations, uploads)\n",
        j.bucket_items_healed
    ));
    if let Some(e) = &j.error {
        out.push_str(&format!("FAILED: {e}\n"));
    }
    match j.phase.as_str() {
        "done" => out.push_str(&format!(
            "Verified: {} re-checked, {} missing, {} could not be checked; {}\n",
            j.verify_checked,
            j.verify_missing,
            j.verify_failed,
            if j.verify_missing == 0 && j.verify_failed == 0 && j.report.failed == 0 {
                "0 missing shards"
            } else {
                "NOT everything is whole"
            }
        )),
        "failed" => {}
        _ => out.push_str("Not finished yet.\n"),
    }
    out
}

/// 0 when the job healed everything and its verification found nothing; else 3 (1 for a job
/// that failed as a whole).
fn job_exit(j: &HealJob) -> ExitCode {
    if j.phase == "failed" {
        ExitCode::FAILURE
    } else if j.report.failed > 0 || j.verify_missing > 0 || j.verify_failed > 0 {
        ExitCode::from(EXIT_UNHEALED)
    } else {
        ExitCode::SUCCESS
    }
}

#[derive(Debug, Deserialize)]
struct HealReport {
    buckets: u64,
    scanned: u64,
    healed: u64,
    healed_drives: u64,
    failed: u64,
    truncated: bool,
    healed_objects: Vec<Healed>,
    failed_objects: Vec<Failed>,
}

#[derive(Debug, Deserialize)]
struct Healed {
    bucket: String,
    key: String,
    drives: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Failed {
    bucket: String,
    key: String,
    reason: String,
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn format_report(what: &str, r: &HealReport) -> String {
    let mut out = format!(
        "Heal of {what}: {} checked in {}, {} healed ({} rewritten), {} failed.\n",
        plural(r.scanned, "object", "objects"),
        plural(r.buckets, "bucket", "buckets"),
        r.healed,
        plural(r.healed_drives, "drive copy", "drive copies"),
        r.failed,
    );
    for h in &r.healed_objects {
        out.push_str(&format!(
            "  healed  {}/{}  on {}\n",
            h.bucket,
            h.key,
            h.drives.join(", ")
        ));
    }
    for f in &r.failed_objects {
        if f.key.is_empty() {
            out.push_str(&format!("  FAILED  bucket {}: {}\n", f.bucket, f.reason));
        } else {
            out.push_str(&format!("  FAILED  {}/{}: {}\n", f.bucket, f.key, f.reason));
        }
    }
    if r.truncated {
        let shown = (r.healed_objects.len() + r.failed_objects.len()) as u64;
        out.push_str(&format!(
            "  ... and {} more not listed\n",
            (r.healed + r.failed).saturating_sub(shown)
        ));
    }
    out
}

#[derive(Debug, Deserialize)]
struct KmsKeys {
    default: String,
    keys: Vec<KmsKey>,
}

#[derive(Debug, Deserialize)]
struct KmsKey {
    id: String,
}

fn format_keys(k: &KmsKeys) -> String {
    let mut out = String::new();
    for key in &k.keys {
        let mark = if key.id == k.default {
            "  (default)"
        } else {
            ""
        };
        out.push_str(&format!("{}{mark}\n", key.id));
    }
    out
}

#[derive(Debug, Deserialize)]
struct RotateReport {
    from: String,
    to: String,
    buckets: u64,
    scanned: u64,
    resealed: u64,
    skipped: u64,
    skipped_reasons: RotateSkipped,
    failed: u64,
    truncated: bool,
    failures: Vec<RotateFailure>,
}

#[derive(Debug, Deserialize)]
struct RotateSkipped {
    not_encrypted: u64,
    sse_c: u64,
    other_key: u64,
}

#[derive(Debug, Deserialize)]
struct RotateFailure {
    bucket: String,
    key: String,
    version_id: Option<String>,
    upload_id: Option<String>,
    reason: String,
}

fn format_rotation(r: &RotateReport) -> String {
    let mut out = format!(
        "Rotation {} -> {}: {} looked at in {}, {} re-sealed, {} skipped ({} not encrypted, {} SSE-C, {} under another key), {} failed.\n",
        r.from,
        r.to,
        plural(r.scanned, "version or upload", "versions and uploads"),
        plural(r.buckets, "bucket", "buckets"),
        r.resealed,
        r.skipped,
        r.skipped_reasons.not_encrypted,
        r.skipped_reasons.sse_c,
        r.skipped_reasons.other_key,
        r.failed,
    );
    for f in &r.failures {
        let what = match (&f.version_id, &f.upload_id) {
            _ if f.key.is_empty() => format!("bucket {}", f.bucket),
            (Some(v), _) => format!("{}/{} (version {v})", f.bucket, f.key),
            (_, Some(u)) => format!("{}/{} (upload {u})", f.bucket, f.key),
            _ => format!("{}/{}", f.bucket, f.key),
        };
        out.push_str(&format!("  FAILED  {what}: {}\n", f.reason));
    }
    if r.truncated {
        out.push_str(&format!(
            "  ... and {} more not listed\n",
            r.failed.saturating_sub(r.failures.len() as u64)
        ));
    }
    out
}

#[derive(Debug, Deserialize)]
struct HealStatus {
    queue_len: u64,
    retry_len: u64,
    queued_total: u64,
    queue_dropped_total: u64,
    healed_objects_total: u64,
    failed_total: u64,
    retried_total: u64,
    retry_dropped_total: u64,
    given_up_total: u64,
    drives: Vec<Drive>,
    scanner: Scanner,
    /// Absent from servers older than this CLI.
    #[serde(default)]
    drive_heals: Vec<DriveHealRow>,
    /// Absent from servers older than this CLI.
    #[serde(default)]
    queue: Vec<QueueRow>,
}

/// One object on a heal worker's list.
#[derive(Debug, Deserialize)]
struct QueueRow {
    set: usize,
    bucket: String,
    key: String,
    state: String,
    attempts: u32,
    due_in_seconds: Option<f64>,
}

/// One line per object the heal workers hold (a sample when the lists are long).
fn format_queue(rows: &[QueueRow], waiting: u64) -> String {
    let mut out = String::new();
    for r in rows {
        let tried = if r.attempts > 0 {
            format!(
                ", {} failed",
                plural(u64::from(r.attempts), "attempt", "attempts")
            )
        } else {
            String::new()
        };
        let due = r
            .due_in_seconds
            .map(|d| format!(", next try in {d:.1} s"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {:<7}  {}/{} (set {}{tried}{due})\n",
            r.state.to_uppercase(),
            r.bucket,
            r.key,
            r.set + 1
        ));
    }
    // `waiting` counts the queue and the retry list; the object being healed is on neither.
    let listed = rows.iter().filter(|r| r.state != "healing").count() as u64;
    if waiting > listed {
        out.push_str(&format!("  ... {} more not listed\n", waiting - listed));
    }
    out
}

#[derive(Debug, Deserialize)]
struct DriveHealRow {
    endpoint: String,
    phase: String,
    bucket: Option<String>,
    last_key: Option<String>,
    buckets_done: usize,
    scanned: u64,
    healed: u64,
    failed: u64,
    bytes: u64,
    resumes: u64,
    verify_missing: u64,
}

#[derive(Debug, Deserialize)]
struct Drive {
    endpoint: String,
    online: bool,
}

#[derive(Debug, Deserialize)]
struct Scanner {
    enabled: bool,
    running: bool,
    objects_total: u64,
    healed_total: u64,
    failed_total: u64,
    passes_total: u64,
    last_pass_start: Option<String>,
    last_pass_end: Option<String>,
}

/// One line per heal of a replaced drive (heal-status and info).
fn format_drive_heals(heals: &[DriveHealRow]) -> String {
    let mut out = String::new();
    for h in heals {
        let at = match (&h.bucket, &h.last_key) {
            (Some(b), Some(k)) => format!(", at {b}/{k}"),
            (Some(b), None) => format!(", at bucket {b}"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  {}  {}: {} checked ({} bytes), {} healed, {} failed, {} done{at}{}{}\n",
            h.phase.to_uppercase(),
            h.endpoint,
            plural(h.scanned, "object", "objects"),
            h.bytes,
            h.healed,
            h.failed,
            plural(h.buckets_done as u64, "bucket", "buckets"),
            if h.resumes > 0 {
                format!(
                    "; resumed {} after restarts",
                    plural(h.resumes, "time", "times")
                )
            } else {
                String::new()
            },
            if h.phase == "done" {
                format!("; verified: {} missing", h.verify_missing)
            } else {
                String::new()
            },
        ));
    }
    out
}

fn format_status(s: &HealStatus) -> String {
    let online = s.drives.iter().filter(|d| d.online).count();
    let mut out = String::new();
    out.push_str(&format!(
        "Heal queue:  {} waiting\n",
        plural(s.queue_len, "object", "objects")
    ));
    out.push_str(&format!(
        "Retry list:  {} waiting for a drive to return\n",
        plural(s.retry_len, "heal", "heals")
    ));
    out.push_str(&format_queue(&s.queue, s.queue_len + s.retry_len));
    out.push_str(&format!(
        "Since start: {} queued, {} healed, {} failed attempts, {} retried, {} given up; \
         dropped: {} (queue full), {} (retry list full)\n",
        s.queued_total,
        s.healed_objects_total,
        s.failed_total,
        s.retried_total,
        s.given_up_total,
        s.queue_dropped_total,
        s.retry_dropped_total,
    ));
    out.push_str(&format!(
        "Drives:      {online} of {} online\n",
        s.drives.len()
    ));
    for d in s.drives.iter().filter(|d| !d.online) {
        out.push_str(&format!("  OFFLINE  {}\n", d.endpoint));
    }
    out.push_str(&format_drive_heals(&s.drive_heals));
    let sc = &s.scanner;
    if !sc.enabled {
        out.push_str("Scanner:     off\n");
    } else {
        out.push_str(&format!(
            "Scanner:     {}; {} done, {} checked, {} healed, {} failed\n",
            if sc.running { "running" } else { "idle" },
            plural(sc.passes_total, "pass", "passes"),
            plural(sc.objects_total, "object", "objects"),
            sc.healed_total,
            sc.failed_total,
        ));
        let last = |t: &Option<String>| t.clone().unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "  last pass: started {}, ended {}\n",
            last(&sc.last_pass_start),
            last(&sc.last_pass_end)
        ));
    }
    out
}

#[derive(Debug, Deserialize)]
struct Info {
    deployment_id: String,
    mode: String,
    this_node: Option<String>,
    nodes: Vec<NodeRow>,
    sets: Vec<SetRow>,
    totals: Totals,
    data_plane: Vec<DataPlaneRow>,
    rpc: Option<RpcRow>,
    /// Absent from servers older than this CLI.
    #[serde(default)]
    drive_heals: Vec<DriveHealRow>,
}

#[derive(Debug, Deserialize)]
struct NodeRow {
    address: String,
    local: bool,
    online: bool,
    rtt_us: Option<u64>,
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SetRow {
    data: usize,
    parity: usize,
    drives: Vec<DriveRow>,
}

#[derive(Debug, Deserialize)]
struct DriveRow {
    set: usize,
    position: usize,
    endpoint: String,
    node: Option<String>,
    online: bool,
    total_bytes: u64,
    free_bytes: u64,
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Totals {
    nodes: usize,
    nodes_online: usize,
    sets: usize,
    sets_readable: usize,
    sets_writable: usize,
    drives: usize,
    drives_online: usize,
    total_bytes: u64,
    free_bytes: u64,
}

#[derive(Debug, Deserialize)]
struct DataPlaneRow {
    backend: String,
    transfers: u64,
    bytes_in: u64,
    bytes_out: u64,
    errors: u64,
    timeouts: u64,
    retries: u64,
}

#[derive(Debug, Deserialize)]
struct RpcRow {
    calls: u64,
    timeouts: u64,
    connects: u64,
    connect_failures: u64,
    fast_failures: u64,
}

#[derive(Debug, Deserialize)]
struct Drives {
    drives: Vec<DriveRow>,
    totals: Totals,
}

/// Bytes in binary units, one decimal: `512 B`, `1.5 KiB`, `2.0 TiB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Left-aligned columns, two spaces apart, each row indented by two; the last column is not
/// padded.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            out.push(' ');
            if i + 1 == cells.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$} ", w = widths[i]));
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

fn drive_table(drives: &[DriveRow]) -> String {
    let rows: Vec<Vec<String>> = drives
        .iter()
        .map(|d| {
            vec![
                d.set.to_string(),
                d.position.to_string(),
                d.node.clone().unwrap_or_else(|| "-".into()),
                if d.online { "online" } else { "OFFLINE" }.to_string(),
                if d.online {
                    bytes(d.free_bytes)
                } else {
                    "-".into()
                },
                if d.online {
                    bytes(d.total_bytes)
                } else {
                    "-".into()
                },
                match &d.error {
                    Some(e) if !d.online => format!("{}  ({e})", d.endpoint),
                    _ => d.endpoint.clone(),
                },
            ]
        })
        .collect();
    table(
        &["SET", "POS", "NODE", "STATE", "FREE", "TOTAL", "DRIVE"],
        &rows,
    )
}

fn drive_totals(t: &Totals) -> String {
    format!(
        "Drives:      {} of {} online; {} free of {}\n",
        t.drives_online,
        t.drives,
        bytes(t.free_bytes),
        bytes(t.total_bytes)
    )
}

fn format_info(i: &Info) -> String {
    let mut out = format!("Deployment:  {}\n", i.deployment_id);
    match &i.this_node {
        Some(n) => out.push_str(&format!("Mode:        {}, answered by {n}\n", i.mode)),
        None => out.push_str(&format!("Mode:        {} node\n", i.mode)),
    }
    if !i.nodes.is_empty() {
        out.push_str(&format!(
            "Nodes:       {} of {} online\n",
            i.totals.nodes_online, i.totals.nodes
        ));
        let rows: Vec<Vec<String>> = i
            .nodes
            .iter()
            .map(|n| {
                let state = if n.online { "online" } else { "OFFLINE" };
                let note = if n.local {
                    "this node".to_string()
                } else if let Some(rtt) = n.rtt_us {
                    format!("ping {:.1} ms", rtt as f64 / 1000.0)
                } else {
                    n.error.clone().unwrap_or_default()
                };
                vec![n.address.clone(), state.to_string(), note]
            })
            .collect();
        out.push_str(&table(&["NODE", "STATE", ""], &rows));
    }
    let shape = match i.sets.first() {
        Some(s) => format!(
            "{} of {} drives (erasure {}+{})",
            plural(i.totals.sets as u64, "set", "sets"),
            s.drives.len(),
            s.data,
            s.parity
        ),
        None => "none".to_string(),
    };
    out.push_str(&format!(
        "Sets:        {shape}; {} readable, {} writable\n",
        i.totals.sets_readable, i.totals.sets_writable
    ));
    out.push_str(&drive_totals(&i.totals));
    let drives: Vec<DriveRow> = i
        .sets
        .iter()
        .flat_map(|s| s.drives.iter())
        .map(|d| DriveRow {
            set: d.set,
            position: d.position,
            endpoint: d.endpoint.clone(),
            node: d.node.clone(),
            online: d.online,
            total_bytes: d.total_bytes,
            free_bytes: d.free_bytes,
            error: d.error.clone(),
        })
        .collect();
    out.push_str(&drive_table(&drives));
    if !i.drive_heals.is_empty() {
        out.push_str("Drive heals (this node):\n");
        out.push_str(&format_drive_heals(&i.drive_heals));
    }
    for p in &i.data_plane {
        out.push_str(&format!(
            "Data plane:  {}: {} transfers, {} in, {} out, {} errors ({} timeouts), {} retries\n",
            p.backend,
            p.transfers,
            bytes(p.bytes_in),
            bytes(p.bytes_out),
            p.errors,
            p.timeouts,
            p.retries
        ));
    }
    if let Some(r) = &i.rpc {
        out.push_str(&format!(
            "RPC:         {} calls, {} timeouts, {} connects ({} failed), {} fast failures\n",
            r.calls, r.timeouts, r.connects, r.connect_failures, r.fast_failures
        ));
    }
    out
}

fn format_drives(d: &Drives) -> String {
    let mut out = drive_totals(&d.totals);
    out.push_str(&drive_table(&d.drives));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 40), "3.0 TiB");
    }

    #[test]
    fn the_heal_queue_reads_well() {
        let rows: Vec<QueueRow> = serde_json::from_str(
            r#"[{"set":0,"bucket":"b","key":"k/1","state":"healing","attempts":0,"due_in_seconds":null},
                {"set":1,"bucket":"b","key":"k/2","state":"retry","attempts":3,"due_in_seconds":4.31}]"#,
        )
        .unwrap();
        assert_eq!(
            format_queue(&rows, 5),
            "  HEALING  b/k/1 (set 1)\n  RETRY    b/k/2 (set 2, 3 attempts failed, next try in 4.3 s)\n  ... 4 more not listed\n"
        );
        assert_eq!(format_queue(&[], 0), "");
    }

    #[test]
    fn info_reads_well() {
        let i: Info = serde_json::from_str(
            r#"{"deployment_id":"d-1","mode":"cluster","this_node":"n1:9000",
                "nodes":[{"address":"n1:9000","local":true,"online":true,"rtt_us":null,"error":null},
                         {"address":"n2:9000","local":false,"online":false,"rtt_us":null,
                          "error":"connection refused"}],
                "sets":[{"index":0,"data":1,"parity":1,"read_quorum":1,"write_quorum":2,
                         "drives_online":1,"drives":[
                  {"set":0,"position":0,"endpoint":"http://n1:9000/d1","node":"n1:9000",
                   "online":true,"id":null,"total_bytes":2048,"free_bytes":1024,"error":null},
                  {"set":0,"position":1,"endpoint":"http://n2:9000/d1","node":"n2:9000",
                   "online":false,"id":null,"total_bytes":0,"free_bytes":0,"error":"refused"}]}],
                "totals":{"nodes":2,"nodes_online":1,"nodes_offline":1,"sets":1,"sets_readable":1,
                          "sets_writable":0,"drives":2,"drives_online":1,"drives_offline":1,
                          "total_bytes":2048,"free_bytes":1024},
                "data_plane":[{"backend":"tcp","transfers":3,"bytes_in":10,"bytes_out":0,"errors":0,
                               "timeouts":0,"connects":1,"connect_failures":0,"fast_failures":0,
                               "retries":0}],
                "rpc":{"calls":5,"timeouts":0,"connects":1,"connect_failures":2,"fast_failures":1}}"#,
        )
        .unwrap();
        let text = format_info(&i);
        assert!(text.contains("Nodes:       1 of 2 online\n"), "{text}");
        assert!(
            text.contains("  n2:9000  OFFLINE  connection refused\n"),
            "{text}"
        );
        assert!(
            text.contains("Sets:        1 set of 2 drives (erasure 1+1); 1 readable, 0 writable\n"),
            "{text}"
        );
        assert!(
            text.contains("Drives:      1 of 2 online; 1.0 KiB free of 2.0 KiB\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "  0    1    n2:9000  OFFLINE  -        -        http://n2:9000/d1  (refused)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("Data plane:  tcp: 3 transfers, 10 B in"),
            "{text}"
        );
    }

    #[test]
    fn query_values_are_sigv4_encoded() {
        assert_eq!(encode("a/b c~d.e_f-g"), "a%2Fb%20c~d.e_f-g");
        assert_eq!(encode("é+&="), "%C3%A9%2B%26%3D");
    }

    #[test]
    fn reports_read_well() {
        let r: HealReport = serde_json::from_str(
            r#"{"buckets":1,"scanned":3,"healed":1,"healed_drives":2,"failed":1,"truncated":false,
                "healed_objects":[{"bucket":"b","key":"k","drives":["/d1","/d2"]}],
                "failed_objects":[{"bucket":"b","key":"x","reason":"/d3: offline"}]}"#,
        )
        .unwrap();
        let text = format_report("bucket b", &r);
        assert!(text.starts_with(
            "Heal of bucket b: 3 objects checked in 1 bucket, 1 healed (2 drive copies rewritten), 1 failed."
        ), "{text}");
        assert!(text.contains("  healed  b/k  on /d1, /d2\n"), "{text}");
        assert!(text.contains("  FAILED  b/x: /d3: offline\n"), "{text}");
    }

    #[test]
    fn rotations_and_keys_read_well() {
        let r: RotateReport = serde_json::from_str(
            r#"{"from":"a","to":"b","buckets":2,"scanned":5,"resealed":2,"skipped":2,
                "skipped_reasons":{"not_encrypted":1,"sse_c":1,"other_key":0},"failed":1,
                "truncated":false,"failures":[{"bucket":"x","key":"k","version_id":"null",
                "upload_id":null,"reason":"write quorum"}]}"#,
        )
        .unwrap();
        let text = format_rotation(&r);
        assert!(text.starts_with(
            "Rotation a -> b: 5 versions and uploads looked at in 2 buckets, 2 re-sealed, 2 skipped (1 not encrypted, 1 SSE-C, 0 under another key), 1 failed."
        ), "{text}");
        assert!(
            text.contains("  FAILED  x/k (version null): write quorum\n"),
            "{text}"
        );
        let k: KmsKeys = serde_json::from_str(
            r#"{"default":"b","keys":[{"id":"a","default":false},{"id":"b","default":true}]}"#,
        )
        .unwrap();
        assert_eq!(format_keys(&k), "a\nb  (default)\n");
    }
}
