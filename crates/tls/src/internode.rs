//! The rustls configurations of internode mutual TLS (a cluster started with `https://` drive
//! URLs).
//!
//! Both ends are Quarry nodes, so both configurations are strict: TLS 1.3 only, the one ALPN
//! protocol [`ALPN_INTERNODE`], and the cluster's own CA certificates (`<certs-dir>/CAs/`) as the
//! only roots, both ways:
//! - the server side *requires* a client certificate that chains to one of those CAs (a client
//!   without one, or with one from another CA, fails the handshake and never reaches the
//!   internode protocol);
//! - the client side verifies the peer's certificate against the same CAs and the host name or
//!   IP address of the peer's drive URLs, and presents the node's own certificate.
//!
//! A node uses its default certificate (`public.crt`, `private.key`) for both, so that
//! certificate must cover the node's host name (or IP address) as written in the drive URLs
//! and allow client authentication (`quarry admin cert generate` makes such certificates).
//! The HMAC handshake of the internode protocol still runs inside the TLS connection: TLS keeps
//! the bytes private and proves the peer holds a certificate of the cluster's CA; the HMAC
//! handshake proves it knows the cluster secret and belongs to this deployment.

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::sign::SingleCertAndKey;
use rustls::version::TLS13;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::certs::{self, CertSet, TlsError, CAS_DIR};

/// The ALPN protocol id of Quarry's internode protocol over TLS (its version is the handshake's,
/// `quarry_net::auth::HS_VERSION`). A node's shared port sends a TLS connection that offers it
/// to the internode server and every other one to S3.
pub const ALPN_INTERNODE: &[u8] = b"quarry-internode/2";

/// Both ends of internode mutual TLS, made from one version of the certificate directory.
#[derive(Clone)]
pub struct InternodeConfigs {
    /// Accepting peers: client certificates required and verified against `CAs/`.
    pub server: Arc<ServerConfig>,
    /// Connecting to peers: their certificates verified against `CAs/`; ours presented.
    pub client: Arc<ClientConfig>,
}

impl std::fmt::Debug for InternodeConfigs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InternodeConfigs")
    }
}

/// The internode configurations of `set`; [`TlsError::NoCas`] when it trusts no CA (internode
/// TLS has nothing to verify peers against then).
pub fn configs(set: &CertSet) -> Result<InternodeConfigs, TlsError> {
    if set.cas.is_empty() {
        return Err(TlsError::NoCas {
            dir: set.dir.join(CAS_DIR),
        });
    }
    let mut roots = RootCertStore::empty();
    for ca in &set.cas {
        roots.add(ca.clone())?;
    }
    let roots = Arc::new(roots);
    let provider = certs::provider();
    let me = Arc::new(SingleCertAndKey::from(set.default.certified.clone()));

    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| TlsError::Config(format!("internode client verifier: {e}")))?;
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&TLS13])?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(me.clone());
    server.alpn_protocols = vec![ALPN_INTERNODE.to_vec()];
    // A node's connections to a peer last; a restarted peer's reconnects may resume.
    server.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()?;

    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&TLS13])?
        .with_root_certificates(roots)
        .with_client_cert_resolver(me);
    client.alpn_protocols = vec![ALPN_INTERNODE.to_vec()];
    Ok(InternodeConfigs {
        server: Arc::new(server),
        client: Arc::new(client),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{write_certs_dir, Ca, Validity};
    use rustls_pki_types::ServerName;
    use std::time::SystemTime;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A certificate directory for `names`, issued by `ca`, trusting `trusted`.
    fn node(ca: &Ca, names: &[&str], trusted: &Ca) -> (tempfile::TempDir, InternodeConfigs) {
        let dir = tempfile::tempdir().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let leaf = ca.issue(&names, Validity::days(2)).unwrap();
        write_certs_dir(dir.path(), &leaf, &trusted.pem().cert).unwrap();
        let set = certs::load_dir(dir.path(), SystemTime::now())
            .unwrap()
            .unwrap();
        (dir, configs(&set).unwrap())
    }

    /// Runs a handshake over an in-memory pipe and one byte each way: `Ok` when both ends agree.
    async fn connect(
        client: Arc<ClientConfig>,
        server: Arc<ServerConfig>,
        name: &str,
    ) -> Result<(), String> {
        let (a, b) = tokio::io::duplex(64 << 10);
        let name = ServerName::try_from(name.to_owned()).unwrap();
        let c = async move {
            let mut s = tokio_rustls::TlsConnector::from(client)
                .connect(name, a)
                .await
                .map_err(|e| format!("client: {e}"))?;
            s.write_all(b"x")
                .await
                .map_err(|e| format!("client: {e}"))?;
            s.flush().await.map_err(|e| format!("client: {e}"))?;
            let mut one = [0u8; 1];
            s.read_exact(&mut one)
                .await
                .map_err(|e| format!("client read: {e}"))?;
            Ok::<_, String>(())
        };
        let s = async move {
            let mut s = tokio_rustls::TlsAcceptor::from(server)
                .accept(b)
                .await
                .map_err(|e| format!("server: {e}"))?;
            if s.get_ref().1.alpn_protocol() != Some(ALPN_INTERNODE) {
                return Err("server: no internode ALPN".to_owned());
            }
            let mut one = [0u8; 1];
            s.read_exact(&mut one)
                .await
                .map_err(|e| format!("server read: {e}"))?;
            s.write_all(b"y")
                .await
                .map_err(|e| format!("server: {e}"))?;
            s.flush().await.map_err(|e| format!("server: {e}"))?;
            Ok::<_, String>(())
        };
        match tokio::join!(c, s) {
            (Ok(()), Ok(())) => Ok(()),
            (c, s) => Err(format!("{:?} / {:?}", c.err(), s.err())),
        }
    }

    #[tokio::test]
    async fn peers_of_one_ca_connect_and_others_are_refused_both_ways() {
        let ca = Ca::new("cluster CA", Validity::days(2)).unwrap();
        let other = Ca::new("another CA", Validity::days(2)).unwrap();
        let (_d1, n1) = node(&ca, &["127.0.0.1"], &ca);
        let (_d2, n2) = node(&ca, &["127.0.0.1"], &ca);
        // Control: two nodes of the cluster's CA.
        connect(n1.client.clone(), n2.server.clone(), "127.0.0.1")
            .await
            .unwrap();

        // A node whose certificate another CA signed (it trusts the cluster's CA): refused by
        // the server, whichever way it connects.
        let (_d3, stranger) = node(&other, &["127.0.0.1"], &ca);
        let e = connect(stranger.client.clone(), n1.server.clone(), "127.0.0.1")
            .await
            .unwrap_err();
        assert!(e.contains("server: "), "{e}");
        let e = connect(n1.client.clone(), stranger.server.clone(), "127.0.0.1")
            .await
            .unwrap_err();
        assert!(e.to_lowercase().contains("unknownissuer"), "{e}");

        // A client without any certificate: refused.
        let mut anonymous = crate::client_config_trusting(ca.pem().cert.as_bytes()).unwrap();
        anonymous.alpn_protocols = vec![ALPN_INTERNODE.to_vec()];
        let e = connect(Arc::new(anonymous), n1.server.clone(), "127.0.0.1")
            .await
            .unwrap_err();
        assert!(e.contains("server"), "{e}");

        // A peer whose certificate does not cover the name in the drive URLs: refused.
        let (_d4, named) = node(&ca, &["node7.example"], &ca);
        let e = connect(n1.client.clone(), named.server.clone(), "127.0.0.1")
            .await
            .unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
    }

    #[test]
    fn no_trusted_ca_is_a_clear_error() {
        let ca = Ca::new("cluster CA", Validity::days(2)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let leaf = ca.issue(&["127.0.0.1".into()], Validity::days(2)).unwrap();
        write_certs_dir(dir.path(), &leaf, &ca.pem().cert).unwrap();
        std::fs::remove_dir_all(dir.path().join(CAS_DIR)).unwrap();
        let set = certs::load_dir(dir.path(), SystemTime::now())
            .unwrap()
            .unwrap();
        let e = configs(&set).unwrap_err();
        assert!(matches!(e, TlsError::NoCas { .. }), "{e}");
        assert!(e.to_string().contains("CAs"), "{e}");
    }
}
