//! `quarry`: the Quarry server and its admin CLI. `quarry server --help` and `quarry admin --help`
//! list every flag; the README says how to run one node or a cluster.
//!
//! The binary only wires the library crates together, one module a step:
//! - [`cli`]: flags over `QUARRY_*` environment over the TOML file over defaults, validated;
//! - [`logging`]: `tracing` to stderr, text or JSON;
//! - [`credentials`]: the root credentials, given, stored under `.quarry.sys`, or generated once;
//! - [`server`]: opens the drives and serves S3 until a signal, on one node or, through
//!   [`cluster`], as a node of a cluster: the port shared by S3 and the internode RPC, the data
//!   plane (verbs or TCP), and joining the deployment (`quarry-node`);
//! - [`admin`]: `quarry admin`, signed calls to a server's admin API.

mod admin;
mod cli;
mod cluster;
mod credentials;
mod fdlimit;
mod identities;
mod logging;
mod server;

use clap::{CommandFactory, FromArgMatches};

fn main() -> std::process::ExitCode {
    // The process's TLS provider (aws-lc-rs), for the HTTPS clients that take the default one
    // (`quarry admin`); every configuration quarry-tls makes names it anyway.
    let _ = quarry_tls::rustls::crypto::aws_lc_rs::default_provider().install_default();
    let matches = cli::Cli::command().get_matches();
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        cli::Command::Admin(args) => admin::main(args),
        cli::Command::Server(args) => {
            let settings = args.settings_with(matches.subcommand_matches("server"));
            if let Err(e) = logging::init(settings.log_format) {
                eprintln!("quarry: {e:#}");
                return std::process::ExitCode::FAILURE;
            }
            let result = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(server::run(settings)));
            match result {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("quarry: {e:#}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
    }
}
