//! Command line: flags, their `QUARRY_*` environment fallbacks, and defaults.

use std::path::PathBuf;

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

    /// Log line format. The level comes from QUARRY_LOG or RUST_LOG (default: info).
    #[arg(long, env = "QUARRY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
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
    pub log_format: LogFormat,
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
        Settings {
            dirs,
            address: self.address,
            root: self.root_user.zip(self.root_password),
            region: self.region,
            log_format: self.log_format,
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
