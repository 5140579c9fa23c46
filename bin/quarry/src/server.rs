//! `quarry server`: open the drives, settle the credentials, bind, print the banner, and serve
//! S3 until SIGINT or SIGTERM.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use quarry_object::ErasureServer;
use quarry_s3::{Credentials, ReadinessProbe, ReadinessReport, S3Config};
use quarry_tls::CertStore;
use tokio::sync::Notify;

use crate::cli::Settings;
use crate::credentials::{self, Source};

/// How long requests in flight may run after a shutdown signal before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

pub async fn run(mut settings: Settings) -> anyhow::Result<()> {
    let fds = crate::fdlimit::raise();
    if fds.soft > fds.was {
        tracing::info!(
            "open-file limit raised from {} to {} (the hard limit)",
            fds.was,
            fds.soft
        );
    }
    quarry_disk::set_list_cache_budget(
        usize::try_from(settings.list_cache_bytes).unwrap_or(usize::MAX),
    );
    if settings.cluster.is_some() {
        return run_cluster(settings, fds.soft).await;
    }
    let reserve = crate::fdlimit::reserve(settings.dirs.len(), 0);
    settings.max_connections = connection_limit(&settings, fds.soft, reserve)?;
    for dir in &settings.dirs {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create drive directory {}", dir.display()))?;
    }
    let cfg = settings.object_config();
    let layer = ErasureServer::open_local(settings.dirs.clone(), cfg)
        .await
        .context("cannot open the drives")?;
    let ((access_key, secret_key), source) =
        credentials::resolve(settings.root.clone(), &settings.dirs)
            .context("cannot set up the root credentials")?;
    if source != credentials::Source::Given {
        // Drives replaced while the server runs get the stored keys back too.
        let (dirs, keys) = (
            settings.dirs.clone(),
            (access_key.clone(), secret_key.clone()),
        );
        let every = settings
            .drive_check_interval
            .unwrap_or(quarry_object::DEFAULT_DRIVE_CHECK_INTERVAL);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let (dirs, keys) = (dirs.clone(), keys.clone());
                let r =
                    tokio::task::spawn_blocking(move || credentials::restore_missing(&dirs, &keys))
                        .await;
                if let Ok(Err(e)) = r {
                    tracing::warn!(error = %format!("{e:#}"), "cannot store the root credentials on a replaced drive");
                }
            }
        });
    }
    let tls = open_certs(&settings)?;
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
    println!("Endpoint:  {}://{local}", scheme(&tls));
    println!("Region:    {}", settings.region);
    println!("AccessKey: {access_key}");
    // The secret key is shown once, when it is made: a log must not hand out root.
    match source {
        Source::Given => println!("(secret key as given; not shown)"),
        Source::Stored => println!(
            "(credentials read from the drives' .quarry.sys/credentials.json; secret key not shown)"
        ),
        Source::Generated => {
            println!("SecretKey: {secret_key}");
            println!(
                "(credentials generated and stored in each drive's .quarry.sys/credentials.json; the secret key is not shown again)"
            )
        }
    }

    let cfg = S3Config {
        region: settings.region.clone(),
        credentials: vec![Credentials {
            access_key,
            secret_key,
        }],
        domains: settings.domains.clone(),
        metrics: settings.metrics.clone(),
        sse: sse_config()?,
        lifecycle: quarry_s3::lifecycle_worker::LifecycleSettings::from_env()
            .map_err(anyhow::Error::msg)?,
        default_object_ownership: settings.default_object_ownership,
        client_rdma: Default::default(),
    };
    serve_s3(listener, layer, cfg, limits(&settings), tls, &settings).await
}

/// One node of a cluster: the drives are URLs, the credentials must be given (every node needs
/// the same ones).
async fn run_cluster(mut settings: Settings, soft_fds: u64) -> anyhow::Result<()> {
    let Some(topology) = settings.cluster.clone() else {
        anyhow::bail!("no cluster topology");
    };
    let Some((access_key, secret_key)) = settings.root.clone() else {
        anyhow::bail!(
            "a cluster needs the same root credentials on every node: set QUARRY_ROOT_USER and QUARRY_ROOT_PASSWORD (or --root-user and --root-password)"
        );
    };
    let cfg = settings.object_config();
    let (secret, origin) = crate::cluster::cluster_secret(
        settings.cluster_secret.as_ref(),
        (&access_key, &secret_key),
    )?;
    if origin == crate::cluster::SecretOrigin::Legacy {
        tracing::warn!(
            "no cluster secret is set: internode connections are authenticated with a key derived from the root credentials, so whoever holds them can act as a node. Set the same --cluster-secret-file (QUARRY_CLUSTER_SECRET_FILE) or QUARRY_CLUSTER_SECRET on every node and restart them (see the README)"
        );
    }
    // The port's connections: S3's, those whose protocol is not known yet (a sixteenth of
    // --max-connections, 8 to 256), and the internode server's, which has its own bounds.
    let rpc = quarry_net::RpcConfig::default();
    let nodes = topology.nodes.len().max(1);
    let per_node = topology.drives.len().div_ceil(nodes);
    let internode = (rpc.max_connections + rpc.max_handshakes + 16 * nodes) as u64;
    let reserve = crate::fdlimit::reserve(per_node, internode);
    let port = connection_limit(&settings, soft_fds, reserve)?;
    let tls = open_certs(&settings)?;
    let internode_tls = crate::cluster::internode_tls(
        &topology,
        tls.as_ref(),
        settings.certs_dir.as_ref().map(|(d, _)| d.as_path()),
    )?;
    let sniff_slots = (port / 16).clamp(8, 256);
    settings.max_connections = port.saturating_sub(sniff_slots).max(1);
    let node = crate::cluster::start(
        topology.clone(),
        &settings.address,
        secret,
        cfg,
        &settings.rdma,
        sniff_slots,
        internode_tls,
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
    println!("Endpoint:  {}://{}", scheme(&tls), node.local);
    println!("Region:    {}", settings.region);
    println!("AccessKey: {access_key}");
    println!("(secret key as given; not shown)");
    let cfg = S3Config {
        region: settings.region.clone(),
        credentials: vec![Credentials {
            access_key,
            secret_key,
        }],
        domains: settings.domains.clone(),
        metrics: settings.metrics.clone(),
        sse: sse_config()?,
        lifecycle: quarry_s3::lifecycle_worker::LifecycleSettings::from_env()
            .map_err(anyhow::Error::msg)?,
        default_object_ownership: settings.default_object_ownership,
        client_rdma: node.client_rdma.clone(),
    };
    let crate::cluster::Node {
        layer, http, _rpc, ..
    } = node;
    let result = serve_s3(http, layer, cfg, limits(&settings), tls, &settings).await;
    drop(_rpc);
    result
}

/// `--max-connections`, or less when the open-file limit does not leave room for it beside
/// `reserve` (said in the log).
fn connection_limit(settings: &Settings, soft_fds: u64, reserve: u64) -> anyhow::Result<usize> {
    let limit = crate::fdlimit::connection_limit(settings.max_connections, soft_fds, reserve)
        .map_err(anyhow::Error::msg)?;
    if limit < settings.max_connections {
        tracing::warn!(
            "--max-connections {} does not fit the open-file limit of {soft_fds} ({reserve} kept for the drives and the node itself): serving at most {limit} connections; raise the limit (ulimit -n, LimitNOFILE=) for more",
            settings.max_connections
        );
    }
    Ok(limit)
}

/// Serves S3 on `listener` until SIGINT or SIGTERM (and the requests in flight, for a while).
fn limits(settings: &Settings) -> quarry_s3::ServeLimits {
    quarry_s3::ServeLimits {
        max_connections: settings.max_connections,
        header_read_timeout: settings.header_timeout,
        body: quarry_s3::BodyTimeouts {
            idle: settings.body_timeout,
            ..quarry_s3::BodyTimeouts::default()
        },
    }
}

/// `https` with certificates, else `http`.
fn scheme(tls: &Option<Arc<CertStore>>) -> &'static str {
    if tls.is_some() {
        "https"
    } else {
        "http"
    }
}

/// The certificate directory's certificates, checked (a bad one stops the start with the
/// reason), or `None` for plain HTTP.
fn open_certs(settings: &Settings) -> anyhow::Result<Option<Arc<CertStore>>> {
    let Some((dir, given)) = &settings.certs_dir else {
        tracing::info!(
            "TLS: no certificate directory (no HOME and no --certs-dir): serving plain HTTP"
        );
        return Ok(None);
    };
    let store = CertStore::open(dir).with_context(|| {
        format!(
            "TLS: the certificates in {} cannot be used (fix or remove them, or set --certs-dir)",
            dir.display()
        )
    })?;
    match store {
        Some(store) => {
            tracing::info!(
                dir = %dir.display(),
                "TLS: serving HTTPS (TLS 1.3 and 1.2) with {}",
                quarry_tls::store::describe(&store.current().certs)
            );
            Ok(Some(store))
        }
        None if *given => Err(quarry_tls::TlsError::NoCertificates {
            dir: dir.clone(),
            what: "--certs-dir (QUARRY_CERTS_DIR)".into(),
        })
        .context("TLS: cannot serve HTTPS"),
        None => {
            tracing::info!(dir = %dir.display(), "TLS: no certificate in {}: serving plain HTTP", dir.display());
            Ok(None)
        }
    }
}

/// Reloads the certificates on SIGHUP and, every `--certs-check-interval`, when the files
/// changed. Lives as long as the server.
fn watch_certs(store: &Arc<CertStore>, settings: &Settings) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(every) = settings.certs_check_interval {
        tasks.push(store.watch(every));
    }
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(mut hup) => {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    let store = store.clone();
                    let _ =
                        tokio::task::spawn_blocking(move || store.reload_and_log("SIGHUP")).await;
                }
            }));
        }
        Err(e) => {
            tracing::warn!(error = %e, "TLS: cannot listen for SIGHUP: certificates reload only when their files change")
        }
    }
    tasks
}

async fn serve_s3<L>(
    listener: L,
    layer: Arc<ErasureServer>,
    cfg: S3Config,
    limits: quarry_s3::ServeLimits,
    tls: Option<Arc<CertStore>>,
    settings: &Settings,
) -> anyhow::Result<()>
where
    L: axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr>,
{
    let local = listener
        .local_addr()
        .context("cannot read the listening address")?;
    let probe: Arc<dyn ReadinessProbe> = Arc::new(Probe(layer.clone()));
    let signalled = Arc::new(Notify::new());
    // Stops the console's listener with the S3 one.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let shutdown = {
        let signalled = signalled.clone();
        async move {
            shutdown_signal().await;
            signalled.notify_one();
            let _ = stop.send(true);
        }
    };
    let _watchers = tls.as_ref().map(|t| watch_certs(t, settings));
    let tls_source =
        tls.map(|store| -> quarry_s3::TlsConfigSource { Arc::new(move || store.s3_config()) });
    // One S3 service for the S3 listener and the console, so they share its state (metrics).
    let region = cfg.region.clone();
    let app = quarry_s3::app_with_timeouts(layer, probe, cfg, limits.body);
    let _console = start_console(
        settings,
        &app,
        region,
        local,
        limits,
        tls_source.clone(),
        stopped,
    )
    .await?;
    tracing::info!(address = %local, tls = tls_source.is_some(), "serving S3");
    let serve = quarry_s3::serve_router(listener, app, limits, tls_source, shutdown);
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

/// Binds and serves the web console (crates/console) in front of `app`, unless it is off. A
/// taken default port is a warning; a given address that cannot be bound stops the start.
async fn start_console(
    settings: &Settings,
    app: &axum::Router,
    region: String,
    s3: std::net::SocketAddr,
    limits: quarry_s3::ServeLimits,
    tls: Option<quarry_s3::TlsConfigSource>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(console) = &settings.console else {
        tracing::info!("console: off (--console-address off)");
        return Ok(None);
    };
    let listener = match tokio::net::TcpListener::bind(&console.address).await {
        Ok(l) => l,
        Err(e) if console.default => {
            tracing::warn!(
                address = %console.address,
                error = %e,
                "console: cannot listen on the default address; starting without the console (set --console-address HOST:PORT, or off)"
            );
            return Ok(None);
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot listen on --console-address {}", console.address))
        }
    };
    let local = listener
        .local_addr()
        .context("cannot read the console's address")?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("Console:   {scheme}://{local}");
    let router = quarry_console::router(
        app.clone(),
        quarry_console::ConsoleConfig {
            region,
            s3: quarry_console::S3Address { scheme, bound: s3 },
            https: tls.is_some(),
            session_ttl: quarry_console::SESSION_TTL,
        },
    );
    let limits = quarry_s3::ServeLimits {
        max_connections: limits.max_connections.clamp(16, 512),
        ..limits
    };
    tracing::info!(address = %local, tls = tls.is_some(), "serving the console");
    Ok(Some(tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        if let Err(e) = quarry_s3::serve_router(listener, router, limits, tls, shutdown).await {
            tracing::error!(error = %e, "the console server failed");
        }
    })))
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

/// Server-side encryption from the environment (see `quarry_s3::sse::SseConfig::from_env`).
fn sse_config() -> anyhow::Result<quarry_s3::sse::SseConfig> {
    let cfg = quarry_s3::sse::SseConfig::from_env(|k| std::env::var(k).ok())
        .map_err(|e| anyhow::anyhow!("server-side encryption: {e}"))?;
    match &cfg.kms {
        Some(k) => {
            tracing::info!(keys = ?k.key_ids(), default = k.default_key_id(), "key service: built-in, master keys loaded")
        }
        None => tracing::info!(
            "no key service configured (QUARRY_KMS_SECRET_KEY): SSE-S3 and SSE-KMS are refused"
        ),
    }
    if cfg.allow_http_sse_c {
        tracing::warn!("QUARRY_SSE_C_ALLOW_HTTP=1: SSE-C keys are accepted over plain HTTP");
    }
    Ok(cfg)
}
