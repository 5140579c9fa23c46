//! The certificates a running server uses, and their reloading.
//!
//! A [`CertStore`] holds the rustls configurations built from the certificate directory's
//! current contents. Each new connection takes the configuration current when it arrives
//! ([`CertStore::s3_config`]); a reload ([`CertStore::reload`], on SIGHUP or when
//! [`CertStore::watch`] sees the files change) reads and checks the directory again and swaps in
//! new configurations at once. Connections already open keep the certificate they started with.
//! A reload that fails (a half-written file, an expired certificate) changes nothing: the server
//! goes on with the certificates it had, and says why in the log.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::version::{TLS12, TLS13};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::ServerName;

use crate::certs::{self, show_time, CertKey, CertSet, TlsError};
use crate::internode::{self, InternodeConfigs};

/// ALPN of HTTP/1.1, the only HTTP version the S3 server speaks.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// A certificate that expires sooner than this is warned about at every (re)load.
const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

/// The rustls configurations of one version of the certificate directory.
pub struct Configs {
    pub certs: Arc<CertSet>,
    /// The S3 listener: TLS 1.3 and 1.2, ALPN http/1.1, SNI choosing among the certificates.
    pub s3: Arc<ServerConfig>,
    /// Internode mutual TLS ([`crate::internode`]), when `CAs/` holds a CA certificate.
    pub internode: Option<InternodeConfigs>,
}

/// The certificate directory of a running server (see the module doc).
pub struct CertStore {
    dir: PathBuf,
    current: RwLock<Arc<Configs>>,
    /// [`certs::fingerprint`] of the files when they were last read.
    seen: Mutex<[u8; 32]>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore").field("dir", &self.dir).finish()
    }
}

impl CertStore {
    /// Reads `dir`; `Ok(None)` when it holds no certificate (plain HTTP).
    pub fn open(dir: &Path) -> Result<Option<Arc<CertStore>>, TlsError> {
        let seen = certs::fingerprint(dir);
        let Some(set) = certs::load_dir(dir, SystemTime::now())? else {
            return Ok(None);
        };
        let configs = build(set)?;
        warn_if_expiring(&configs.certs);
        Ok(Some(Arc::new(CertStore {
            dir: dir.to_path_buf(),
            current: RwLock::new(Arc::new(configs)),
            seen: Mutex::new(seen),
        })))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configurations in use now.
    pub fn current(&self) -> Arc<Configs> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The S3 listener's configuration for a connection arriving now.
    pub fn s3_config(&self) -> Arc<ServerConfig> {
        self.current().s3.clone()
    }

    /// The internode configurations for a connection made or accepted now; [`TlsError::NoCas`]
    /// when the directory trusts no CA (internode TLS cannot verify peers then).
    pub fn internode(&self) -> Result<InternodeConfigs, TlsError> {
        let c = self.current();
        c.internode.clone().ok_or_else(|| TlsError::NoCas {
            dir: c.certs.dir.join(certs::CAS_DIR),
        })
    }

    /// Reads the directory again and, if it holds a valid set of certificates, uses it from the
    /// next connection on. On error nothing changes (and the watcher waits for the next change).
    /// A directory that trusted a CA (internode TLS) must still trust one.
    pub fn reload(&self) -> Result<(), TlsError> {
        let seen = certs::fingerprint(&self.dir);
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = seen;
        let set = certs::load_dir(&self.dir, SystemTime::now())?.ok_or_else(|| {
            TlsError::NoCertificates {
                dir: self.dir.clone(),
                what: "a server started with TLS".into(),
            }
        })?;
        let configs = build(set)?;
        if configs.internode.is_none() && self.current().internode.is_some() {
            return Err(TlsError::NoCas {
                dir: self.dir.join(certs::CAS_DIR),
            });
        }
        warn_if_expiring(&configs.certs);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(configs);
        Ok(())
    }

    /// [`CertStore::reload`] with its log line: what is served now, or why nothing changed.
    /// `why` says what asked (e.g. `SIGHUP`).
    pub fn reload_and_log(&self, why: &str) {
        match self.reload() {
            Ok(()) => {
                let c = self.current();
                tracing::info!(
                    dir = %self.dir.display(),
                    trigger = why,
                    "TLS: certificates reloaded: {}",
                    describe(&c.certs)
                );
            }
            Err(e) => tracing::error!(
                dir = %self.dir.display(),
                trigger = why,
                "TLS: cannot reload the certificates ({e}); still serving the previous ones"
            ),
        }
    }

    /// Whether the files differ from when they were last read.
    pub fn changed_on_disk(&self) -> bool {
        certs::fingerprint(&self.dir) != *self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks the files every `interval` and reloads them when they changed (with a log line).
    /// The task ends when the store is dropped elsewhere.
    pub fn watch(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(store) = weak.upgrade() else { return };
                let changed = tokio::task::spawn_blocking({
                    let store = store.clone();
                    move || {
                        if store.changed_on_disk() {
                            store.reload_and_log("the files changed");
                        }
                    }
                })
                .await;
                if let Err(e) = changed {
                    tracing::error!(error = %e, "TLS: the certificate check failed");
                }
            }
        })
    }
}

/// One line about a set of certificates, for the log.
pub fn describe(c: &CertSet) -> String {
    let mut s = format!(
        "{} ({}; names {}; valid until {})",
        c.default.path.display(),
        c.default.subject,
        if c.default.names.is_empty() {
            "none".to_owned()
        } else {
            c.default.names.join(", ")
        },
        show_time(c.default.not_after)
    );
    for (name, ck) in &c.domains {
        s.push_str(&format!(
            "; SNI {name}: {} (valid until {})",
            ck.names.join(", "),
            show_time(ck.not_after)
        ));
    }
    if !c.cas.is_empty() {
        s.push_str(&format!("; {} trusted CA certificate(s)", c.cas.len()));
    }
    s
}

fn warn_if_expiring(c: &CertSet) {
    let soon = SystemTime::now() + EXPIRY_WARNING;
    let all = std::iter::once(&c.default).chain(c.domains.iter().map(|(_, k)| k));
    for k in all {
        if k.not_after < soon {
            tracing::warn!(
                file = %k.path.display(),
                "TLS: the certificate expires on {}: replace it (the server reloads it without a restart)",
                show_time(k.not_after)
            );
        }
    }
}

fn build(set: CertSet) -> Result<Configs, TlsError> {
    let certs = Arc::new(set);
    let resolver = Arc::new(SniResolver {
        certs: certs.clone(),
    });
    let mut s3 = ServerConfig::builder_with_provider(certs::provider())
        .with_protocol_versions(&[&TLS13, &TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    s3.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    // Resumption by ticket (TLS 1.3 and 1.2): a client's next connections skip the full handshake.
    s3.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;
    let internode = if certs.cas.is_empty() {
        None
    } else {
        Some(internode::configs(&certs)?)
    };
    Ok(Configs {
        certs,
        s3: Arc::new(s3),
        internode,
    })
}

/// Chooses the certificate for a connection: the first SNI certificate that covers the name the
/// client asked for (checked as a client would check it, wildcards included), else the default.
#[derive(Debug)]
struct SniResolver {
    certs: Arc<CertSet>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = hello.server_name() {
            if let Some(k) = covering(&self.certs.domains, name) {
                return Some(k.certified.clone());
            }
        }
        Some(self.certs.default.certified.clone())
    }
}

fn covering<'a>(domains: &'a [(String, CertKey)], name: &str) -> Option<&'a CertKey> {
    let server_name = ServerName::try_from(name).ok()?;
    domains.iter().map(|(_, k)| k).find(|k| {
        k.certified
            .end_entity_cert()
            .ok()
            .and_then(|der| webpki::EndEntityCert::try_from(der).ok())
            .is_some_and(|ee| ee.verify_is_valid_for_subject_name(&server_name).is_ok())
    })
}

/// A client configuration that trusts the given CA certificates (PEM file contents) and no
/// others: how a test or a tool talks to a server with a private CA.
pub fn client_config_trusting(pem: &[u8]) -> Result<ClientConfig, TlsError> {
    use rustls_pki_types::pem::PemObject;
    let certs = rustls_pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Config(format!("CA certificate: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::Config("no CA certificate (PEM) given".into()));
    }
    client_config_with_roots(certs)
}

/// A client configuration that trusts `roots` and no others.
pub fn client_config_with_roots(
    roots: impl IntoIterator<Item = rustls_pki_types::CertificateDer<'static>>,
) -> Result<ClientConfig, TlsError> {
    let mut store = RootCertStore::empty();
    for c in roots {
        store.add(c)?;
    }
    Ok(ClientConfig::builder_with_provider(certs::provider())
        .with_protocol_versions(&[&TLS13, &TLS12])?
        .with_root_certificates(store)
        .with_no_client_auth())
}
