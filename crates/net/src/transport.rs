//! How internode connections are opened and accepted: plain TCP, or mutual TLS over it.
//!
//! Every internode connection (control RPC and TCP data plane alike) is an [`InternodeStream`]:
//! the code above reads and writes it without knowing which. With [`InternodeTls`] set (a cluster
//! whose drive URLs are `https://`), a connection is TCP, then a TLS 1.3 handshake with the
//! cluster's CA verified both ways ([`quarry_tls::internode`]), then the internode protocol's own
//! HMAC handshake ([`crate::auth`]) inside it, as without TLS. The TLS configurations are taken
//! per connection, so certificates reloaded from the certificate directory are used from the
//! next connection on.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use quarry_tls::rustls_pki_types::ServerName;
use quarry_tls::tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};
use quarry_tls::{CertStore, InternodeConfigs, TlsError, ALPN_INTERNODE};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Where internode connections take their TLS configurations. Cheap to clone.
#[derive(Clone)]
pub struct InternodeTls(Arc<dyn Fn() -> InternodeConfigs + Send + Sync>);

impl std::fmt::Debug for InternodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InternodeTls")
    }
}

impl InternodeTls {
    /// The same configurations for every connection.
    pub fn fixed(configs: InternodeConfigs) -> InternodeTls {
        InternodeTls(Arc::new(move || configs.clone()))
    }

    /// The configurations of `store` at the time of each connection (reloads included).
    /// [`TlsError::NoCas`] when its directory trusts no CA.
    pub fn from_store(store: Arc<CertStore>) -> Result<InternodeTls, TlsError> {
        let first = store.internode()?;
        // A reload never drops the CAs of a store that had them (see `CertStore::reload`), so
        // the fallback is the configuration the node started with, never "no TLS".
        Ok(InternodeTls(Arc::new(move || {
            store.internode().unwrap_or_else(|_| first.clone())
        })))
    }

    /// The configurations for a connection made or accepted now.
    pub fn configs(&self) -> InternodeConfigs {
        (self.0)()
    }
}

/// One internode connection, plain or TLS.
#[derive(Debug)]
pub enum InternodeStream {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl InternodeStream {
    /// Whether the bytes travel inside TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, InternodeStream::Tls(_))
    }
}

impl AsyncRead for InternodeStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            InternodeStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            InternodeStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for InternodeStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            InternodeStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            InternodeStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            InternodeStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            InternodeStream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            InternodeStream::Tcp(s) => s.is_write_vectored(),
            InternodeStream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            InternodeStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            InternodeStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            InternodeStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            InternodeStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Why opening a connection failed.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// No TCP connection (refused, unreachable, timed out).
    Connect(io::Error),
    /// TCP connected, the TLS handshake failed (e.g. the peer's certificate is not of the
    /// cluster's CA, or it refused ours).
    Tls(String),
}

/// The name a peer's certificate must cover: the host of its `host:port` (a DNS name or an IP
/// address, brackets removed).
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{host:?} cannot be checked against a certificate: {e}"))
}

/// Connects to `addr` (TCP with `TCP_NODELAY`) within `connect_timeout`, then, with `tls`, runs
/// the TLS handshake within `handshake_timeout`.
pub(crate) async fn open(
    addr: &str,
    tls: Option<&InternodeTls>,
    connect_timeout: Duration,
    handshake_timeout: Duration,
) -> Result<InternodeStream, OpenError> {
    let tcp = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(OpenError::Connect(e)),
        Err(_) => {
            return Err(OpenError::Connect(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection within {connect_timeout:?}"),
            )))
        }
    };
    tcp.set_nodelay(true).map_err(OpenError::Connect)?;
    let Some(tls) = tls else {
        return Ok(InternodeStream::Tcp(tcp));
    };
    let name = server_name(addr).map_err(OpenError::Tls)?;
    let connector = TlsConnector::from(tls.configs().client);
    match tokio::time::timeout(handshake_timeout, connector.connect(name, tcp)).await {
        Ok(Ok(s)) => Ok(InternodeStream::Tls(Box::new(TlsStream::Client(s)))),
        Ok(Err(e)) => Err(OpenError::Tls(explain(&e))),
        Err(_) => Err(OpenError::Tls(format!(
            "no TLS handshake within {handshake_timeout:?}"
        ))),
    }
}

/// The server side of a connection accepted on `tcp`: plain without `tls`, else the TLS
/// handshake (a client certificate of the cluster's CA required, ALPN [`ALPN_INTERNODE`]).
/// The caller bounds it in time.
pub(crate) async fn accept(
    tcp: TcpStream,
    tls: Option<&InternodeTls>,
) -> Result<InternodeStream, String> {
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(InternodeStream::Tcp(tcp));
    };
    let s = TlsAcceptor::from(tls.configs().server)
        .accept(tcp)
        .await
        .map_err(|e| format!("TLS handshake: {}", explain(&e)))?;
    // The server offers only the internode protocol, but a client that offers no ALPN at all
    // would still get through: it is not a Quarry node.
    if s.get_ref().1.alpn_protocol() != Some(ALPN_INTERNODE) {
        return Err("TLS client did not ask for the internode protocol (ALPN)".into());
    }
    Ok(InternodeStream::Tls(Box::new(TlsStream::Server(s))))
}

/// When a handshake over TLS failed because of TLS (with TLS 1.3 a client learns that the server
/// refused its certificate only when it reads next, i.e. in the internode handshake): why.
pub(crate) fn tls_failure(e: &crate::auth::AuthError) -> Option<String> {
    match e {
        crate::auth::AuthError::Io(io)
            if io
                .get_ref()
                .is_some_and(|i| i.is::<quarry_tls::rustls::Error>()) =>
        {
            Some(explain(io))
        }
        _ => None,
    }
}

/// A failed TLS handshake in words an operator can act on.
fn explain(e: &io::Error) -> String {
    use quarry_tls::rustls::Error as E;
    match e.get_ref().and_then(|i| i.downcast_ref::<E>()) {
        Some(E::InvalidCertificate(why)) => format!(
            "the peer's certificate is not signed by a CA in this node's CAs/ directory, or not valid ({why:?}): {e}"
        ),
        Some(E::NoCertificatesPresented) => {
            format!("the peer sent no certificate (internode TLS requires one): {e}")
        }
        Some(E::AlertReceived(alert)) => {
            format!("the peer refused this node's certificate or settings (alert {alert:?}): {e}")
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_peer_address() {
        assert_eq!(
            server_name("127.0.0.1:9000").unwrap(),
            ServerName::try_from("127.0.0.1").unwrap()
        );
        assert_eq!(
            server_name("[::1]:9000").unwrap(),
            ServerName::try_from("::1").unwrap()
        );
        assert_eq!(
            server_name("node1.example:9000").unwrap(),
            ServerName::try_from("node1.example").unwrap()
        );
        assert!(server_name("bad name:9000").is_err());
    }
}
