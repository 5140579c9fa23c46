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

mod cli;
mod credentials;
mod logging;
mod server;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Server(args) => {
            let settings = args.settings();
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
