//! `quarry-bench`: a warp-style load generator that speaks plain S3, so the same run measures
//! Quarry, MinIO or AWS.
//!
//! ```text
//! quarry-bench get --host 127.0.0.1:9000 --access-key K --secret-key S \
//!     --obj.size 1MiB --concurrent 8 --duration 10s [--objects N] [--json]
//! quarry-bench put --sse s3 ...     (SSE-S3 objects; kms for SSE-KMS)
//! quarry-bench compare before.json after.json
//! ```
//!
//! A run prepares its objects (under a fresh prefix of `--bucket`), drives the mode's operations
//! from `--concurrent` workers until `--duration` ends or the object count is reached, cleans up
//! (unless `--noclear`), and prints a table (or JSON). GET bodies are checked byte for byte; a
//! wrong body is an error, counted and reported. The exit status is 1 when any operation failed.
//!
//! [`units`] parses sizes and durations, [`payload`] makes and verifies bodies, [`stats`] holds
//! the histograms and the report, and [`bench`] runs the modes.

mod bench;
mod payload;
mod stats;
mod tls;
mod units;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "quarry-bench",
    version,
    about = "S3 load generator (warp-style)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Upload new objects for the duration.
    Put(BenchArgs),
    /// Upload `--objects` objects, then download and verify random ones.
    Get(BenchArgs),
    /// warp's mix on prepared objects: 45% GET, 30% STAT, 15% PUT, 10% DELETE.
    Mixed(BenchArgs),
    /// Upload `--objects` objects, then list them all, again and again.
    List(BenchArgs),
    /// Upload `--objects` objects, then delete them in batches of `--batch`.
    Delete(BenchArgs),
    /// Multipart uploads of `--parts` parts of `--part.size` each.
    Multipart(BenchArgs),
    /// Print the ratios b/a of two `--json` reports.
    Compare { a: PathBuf, b: PathBuf },
}

/// The flags every benchmark takes, in warp's spelling.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// S3 endpoint(s) as host:port; repeat or separate with commas to spread the load.
    #[arg(
        long,
        env = "QUARRY_BENCH_HOST",
        value_delimiter = ',',
        default_value = "127.0.0.1:9000"
    )]
    pub host: Vec<String>,
    #[arg(long = "access-key", env = "QUARRY_BENCH_ACCESS_KEY")]
    pub access_key: String,
    #[arg(
        long = "secret-key",
        env = "QUARRY_BENCH_SECRET_KEY",
        hide_env_values = true
    )]
    pub secret_key: String,
    /// Use https.
    #[arg(long)]
    pub tls: bool,
    /// Accept any TLS certificate (with --tls): for a trial server with a self-signed
    /// certificate. Without it the server's certificate is checked.
    #[arg(long)]
    pub insecure: bool,
    /// Check the server's certificate against the CA certificates (PEM) in this file instead of
    /// the system's (with --tls).
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<std::path::PathBuf>,
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// The bucket to use; created if missing. Objects go under a fresh prefix per run.
    #[arg(long, default_value = "quarry-bench")]
    pub bucket: String,
    /// Object size (e.g. 4KiB, 1MiB, 64MiB).
    #[arg(long = "obj.size", default_value = "10MiB", value_parser = units::parse_size)]
    pub obj_size: u64,
    /// Random sizes up to --obj.size, spread over the powers of two.
    #[arg(long = "obj.randsize")]
    pub obj_randsize: bool,
    /// Objects to prepare (get, mixed, list, delete; default 2500), or the most to create (put,
    /// multipart; default 100000).
    #[arg(long)]
    pub objects: Option<u64>,
    /// Operations in flight.
    #[arg(long, default_value_t = 20)]
    pub concurrent: usize,
    /// How long the measured phase runs at most (e.g. 10s, 1m).
    #[arg(long, default_value = "1m", value_parser = units::parse_duration)]
    pub duration: Duration,
    /// Stop early once throughput is stable: the two halves of the last --autoterm.dur agree
    /// within --autoterm.pct percent.
    #[arg(long)]
    pub autoterm: bool,
    #[arg(long = "autoterm.dur", default_value = "10s", value_parser = units::parse_duration)]
    pub autoterm_dur: Duration,
    #[arg(long = "autoterm.pct", default_value_t = 7.5)]
    pub autoterm_pct: f64,
    /// Leave the objects in place after the run.
    #[arg(long)]
    pub noclear: bool,
    /// Print the report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Parts per multipart upload.
    #[arg(long, default_value_t = 4)]
    pub parts: u32,
    /// Size of each part of a multipart upload (at least 5MiB except for single-part uploads).
    #[arg(long = "part.size", default_value = "5MiB", value_parser = units::parse_size)]
    pub part_size: u64,
    /// Objects per DeleteObjects request in delete mode (1 to 1000).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Server-side encryption of the objects written: none, s3 (SSE-S3, AES256) or kms
    /// (SSE-KMS with the server's default key). The server needs a key service for s3 and kms.
    #[arg(long, value_enum, default_value_t = Sse::None)]
    pub sse: Sse,
    /// S3 over RDMA (put and get): each worker connects a queue pair to its host and registers
    /// one buffer of --obj.size; GETs land in it and PUTs are read from it by the server. The
    /// same run without --rdma is the HTTP figure beside it.
    #[arg(long)]
    pub rdma: bool,
    /// The RDMA device (with --rdma; default: the first).
    #[arg(long = "rdma-device")]
    pub rdma_device: Option<String>,
}

/// `--sse`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sse {
    None,
    S3,
    Kms,
}

fn main() -> ExitCode {
    // One process-wide rustls provider (aws-lc-rs, as the SDK's client uses): --rdma's HTTP
    // client is reqwest on rustls, which has none of its own in this build.
    let _ = quarry_tls::rustls::crypto::aws_lc_rs::default_provider().install_default();
    let cli = Cli::parse();
    let (mode, args) = match cli.command {
        Command::Compare { a, b } => return compare(&a, &b),
        Command::Put(a) => (bench::Mode::Put, a),
        Command::Get(a) => (bench::Mode::Get, a),
        Command::Mixed(a) => (bench::Mode::Mixed, a),
        Command::List(a) => (bench::Mode::List, a),
        Command::Delete(a) => (bench::Mode::Delete, a),
        Command::Multipart(a) => (bench::Mode::Multipart, a),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("quarry-bench: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(bench::run(mode, &args)) {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("quarry-bench: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                print!("{}", report.table());
            }
            if report.errors > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("quarry-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn compare(a: &PathBuf, b: &PathBuf) -> ExitCode {
    let read = |p: &PathBuf| -> Result<stats::Report, String> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a quarry-bench report: {e}", p.display()))
    };
    match read(a)
        .and_then(|ra| read(b).map(|rb| (ra, rb)))
        .and_then(|(ra, rb)| stats::compare(&ra, &rb))
    {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("quarry-bench: {e}");
            ExitCode::from(2)
        }
    }
}
