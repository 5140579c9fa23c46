//! `quarry`: the Quarry server.
//!
//! ```text
//! quarry server [DIRS...] [--address HOST:PORT] [--root-user U] [--root-password P]
//!               [--region R] [--domain D[,D...]] [--log-format text|json]
//! ```
//!
//! The binary only wires the library crates together; each step is one function:
//! [`cli`] (flags and environment), [`logging`], [`credentials`] (given, stored, or generated),
//! and [`server`] (open the drives, bind, serve until a signal).

mod admin;
mod cli;
mod cluster;
mod credentials;
mod logging;
mod server;

use clap::{CommandFactory, FromArgMatches};

fn main() -> std::process::ExitCode {
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
