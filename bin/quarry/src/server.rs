//! `quarry server`: open the drives, settle the credentials, bind, print the banner, and serve
//! S3 until SIGINT or SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use quarry_object::{ErasureServer, ObjectConfig};
use quarry_s3::{Credentials, ReadinessProbe, ReadinessReport, S3Config};
use tokio::sync::Notify;

use crate::cli::Settings;
use crate::credentials::{self, Source};

/// How long requests in flight may run after a shutdown signal before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

pub async fn run(settings: Settings) -> anyhow::Result<()> {
    if settings.cluster.is_some() {
        return run_cluster(settings).await;
    }
    for dir in &settings.dirs {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create drive directory {}", dir.display()))?;
    }
    let cfg = ObjectConfig {
        multipart_expiry: settings.multipart_expiry,
        scan_interval: settings.scan_interval,
        scan_rate: settings.scan_rate,
        ..ObjectConfig::default()
    };
    let layer = ErasureServer::open_local(settings.dirs.clone(), cfg)
        .await
        .context("cannot open the drives")?;
    let ((access_key, secret_key), source) =
        credentials::resolve(settings.root.clone(), &settings.dirs)
            .context("cannot set up the root credentials")?;
    let listener = tokio::net::TcpListener::bind(&settings.address)
        .await
        .with_context(|| format!("cannot listen on {}", settings.address))?;
    let local = listener
        .local_addr()
        .context("cannot read the listening address")?;

    let layout = layer.layout();
    println!(
        "Quarry {}: {} drives, erasure {}+{}",
        env!("CARGO_PKG_VERSION"),
        layout.drives,
        layout.data,
        layout.parity
    );
    println!("Endpoint:  http://{local}");
    println!("Region:    {}", settings.region);
    println!("AccessKey: {access_key}");
    println!("SecretKey: {secret_key}");
    match source {
        Source::Given => {}
        Source::Stored => {
            println!("(credentials read from the drives' .quarry.sys/credentials.json)")
        }
        Source::Generated => println!(
            "(credentials generated and stored in each drive's .quarry.sys/credentials.json)"
        ),
    }

    let cfg = S3Config {
        region: settings.region.clone(),
        credentials: vec![Credentials {
            access_key,
            secret_key,
        }],
        domains: settings.domains.clone(),
    };
    serve_s3(listener, layer, cfg, limits(&settings)).await
}

/// One node of a cluster: the drives are URLs, the credentials must be given (every node needs
/// the same ones).
async fn run_cluster(settings: Settings) -> anyhow::Result<()> {
    let Some(topology) = settings.cluster.clone() else {
        anyhow::bail!("no cluster topology");
    };
    let Some((access_key, secret_key)) = settings.root.clone() else {
        anyhow::bail!(
            "a cluster needs the same root credentials on every node: set QUARRY_ROOT_USER and QUARRY_ROOT_PASSWORD (or --root-user and --root-password)"
        );
    };
    let cfg = ObjectConfig {
        multipart_expiry: settings.multipart_expiry,
        scan_interval: settings.scan_interval,
        scan_rate: settings.scan_rate,
        ..ObjectConfig::default()
    };
    let node = crate::cluster::start(
        topology.clone(),
        &settings.address,
        (&access_key, &secret_key),
        cfg,
        &settings.rdma,
    )
    .await?;
    let layout = node.layer.layout();
    println!(
        "Quarry {}: node {} of {} nodes, {} drives in {} sets of {} (erasure {}+{})",
        env!("CARGO_PKG_VERSION"),
        node.node,
        topology.nodes.len(),
        layout.drives,
        layout.sets,
        topology.set_size(),
        layout.data,
        layout.parity
    );
    println!("Endpoint:  http://{}", node.local);
    println!("Region:    {}", settings.region);
    println!("AccessKey: {access_key}");
    println!("SecretKey: {secret_key}");
    let cfg = S3Config {
        region: settings.region.clone(),
        credentials: vec![Credentials {
            access_key,
            secret_key,
        }],
        domains: settings.domains.clone(),
    };
    let crate::cluster::Node {
        layer, http, _rpc, ..
    } = node;
    let result = serve_s3(http, layer, cfg, limits(&settings)).await;
    drop(_rpc);
    result
}

/// Serves S3 on `listener` until SIGINT or SIGTERM (and the requests in flight, for a while).
fn limits(settings: &Settings) -> quarry_s3::ServeLimits {
    quarry_s3::ServeLimits {
        max_connections: settings.max_connections,
        header_read_timeout: settings.header_timeout,
    }
}

async fn serve_s3<L>(
    listener: L,
    layer: Arc<ErasureServer>,
    cfg: S3Config,
    limits: quarry_s3::ServeLimits,
) -> anyhow::Result<()>
where
    L: axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr>,
{
    let local = listener
        .local_addr()
        .context("cannot read the listening address")?;
    let probe: Arc<dyn ReadinessProbe> = Arc::new(Probe(layer.clone()));
    let signalled = Arc::new(Notify::new());
    let shutdown = {
        let signalled = signalled.clone();
        async move {
            shutdown_signal().await;
            signalled.notify_one();
        }
    };
    tracing::info!(address = %local, "serving S3");
    let serve = quarry_s3::serve_with_limits(listener, layer, probe, cfg, limits, shutdown);
    tokio::select! {
        result = serve => result.context("the S3 server failed")?,
        () = async {
            signalled.notified().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::warn!("requests still running {SHUTDOWN_GRACE:?} after the shutdown signal; exiting"),
    }
    tracing::info!("stopped");
    Ok(())
}

/// `/health/ready`: ready while the drives online reach read quorum.
struct Probe(Arc<ErasureServer>);

#[async_trait]
impl ReadinessProbe for Probe {
    async fn check(&self) -> ReadinessReport {
        let r = self.0.readiness().await;
        ReadinessReport {
            ready: r.read_quorum,
            detail: format!(
                "drives online {}/{}, read quorum {}, write quorum {}",
                r.drives_online,
                r.drives_total,
                yes_no(r.read_quorum),
                yes_no(r.write_quorum)
            ),
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT: shutting down"),
        () = term => tracing::info!("SIGTERM: shutting down"),
    }
}
