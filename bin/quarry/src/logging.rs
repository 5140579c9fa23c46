//! Logging: one `tracing` subscriber on stderr, text or JSON; level from QUARRY_LOG or RUST_LOG.

use anyhow::Context;
use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

pub fn init(format: LogFormat) -> anyhow::Result<()> {
    let directives = std::env::var("QUARRY_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_owned());
    let filter = EnvFilter::try_new(&directives)
        .with_context(|| format!("invalid log filter {directives:?} (QUARRY_LOG / RUST_LOG)"))?;
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}
