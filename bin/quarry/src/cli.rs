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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve S3 from local drive directories (one erasure set).
    Server(ServerArgs),
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Drive directories, 1 to 16; created if missing. Default: ./data/d1 ... ./data/d4.
    #[arg(value_name = "DIRS")]
    pub dirs: Vec<PathBuf>,

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
    pub dirs: Vec<PathBuf>,
    pub address: String,
    /// `(access key, secret key)` when given on the command line or in the environment.
    pub root: Option<(String, String)>,
    pub region: String,
    /// Virtual-host domains, lower-case, without a trailing dot.
    pub domains: Vec<String>,
    pub log_format: LogFormat,
    pub multipart_expiry: Duration,
}

impl ServerArgs {
    /// Applies defaults; a bad combination exits with a usage error, as clap does.
    pub fn settings(self) -> Settings {
        let dirs = if self.dirs.is_empty() {
            DEFAULT_DRIVES.iter().map(PathBuf::from).collect()
        } else {
            self.dirs
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
        Settings {
            dirs,
            domains,
            address: self.address,
            root: self.root_user.zip(self.root_password),
            region: self.region,
            log_format: self.log_format,
            multipart_expiry: self.multipart_expiry,
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

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("quarry").chain(args.iter().copied()))
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_and_flags() {
        let Command::Server(args) = parse(&["server"]).unwrap().command;
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
        .command;
        assert_eq!(args.dirs, vec![PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(args.address, "0.0.0.0:9100");
        assert_eq!(args.log_format, LogFormat::Json);
        assert!(args.domains.is_empty());
        let Command::Server(args) = parse(&["server", "--domain", "s3.example.com,S3.Local."])
            .unwrap()
            .command;
        let settings = args.settings();
        assert_eq!(settings.domains, ["s3.example.com", "s3.local"]);
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
        let Command::Server(args) = parse(&["server"]).unwrap().command;
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
