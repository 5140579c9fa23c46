//! Control RPC over TCP (or TLS over it, [`crate::transport`]): [`RpcClient`] (pooled, multiplexed, timed-out, backed-off calls to peers)
//! and [`RpcServer`] (handshake, then dispatch of each request to a [`Handler`]).
//!
//! A call is `(method: u16, payload: Bytes) -> Result<Bytes, RpcError>`; payloads are opaque here (the
//! Drive messages are defined on top). Each connection is authenticated by [`crate::auth`] before a
//! single request is read, and every frame on it is sealed per [`crate::wire`].
//!
//! Error codes that travel in error frames are in [`codes`]; an application (e.g. the remote side of
//! `Drive`) uses codes from [`codes::APPLICATION_BASE`] up and maps them to its own errors.
//!
//! Bulk bytes: a request flagged [`wire::FLAG_BULK`] is answered with a short header frame and the
//! handler's bytes as a bulk frame ([`crate::data`]); a request flagged [`wire::FLAG_BULK_BODY`] is
//! followed by a bulk frame carrying the rest of its payload, which the server reads into a pooled
//! buffer before calling the handler. The handler sees neither: it gets a payload and returns
//! bytes as always. [`RpcClient`] never uses them; the data plane ([`crate::dataplane`]) does, on
//! its own connections to the same server.
//!
//! A frame read ([`wire::FLAG_BULK_FRAME`]) on a plain TCP connection may be answered from a file
//! instead ([`Handler::handle_region`]): the writer sends the frame's hash from memory and the
//! chunk with `sendfile`, from the page cache to the socket without copying it through this
//! process. The bytes on the wire are the same; the tag covers the hash only either way.

mod client;
mod preauth;
mod server;

use std::fs::File;
use std::future::Future;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, OwnedSemaphorePermit};

pub use client::{ClientStats, PeerStatus, RpcClient};
pub use preauth::{LogThrottle, PreAuth, PreAuthSlot};
pub use server::{RpcServer, ServerStats};

use crate::auth::AuthError;
use crate::data::BulkSender;
use crate::transport::InternodeTls;
use crate::wire::{self, Decoded, Frame, Opener, Sealer, WireError};

/// Error codes carried by error frames.
pub mod codes {
    /// The server has no such method.
    pub const UNKNOWN_METHOD: u16 = 1;
    /// The request's payload is invalid for its method.
    pub const BAD_REQUEST: u16 = 2;
    /// The handler failed in a way it did not classify.
    pub const INTERNAL: u16 = 3;
    /// The handler's response is larger than a frame may be.
    pub const RESPONSE_TOO_LARGE: u16 = 4;
    /// First code free for applications built on this RPC.
    pub const APPLICATION_BASE: u16 = 1000;
}

/// Settings of both ends. Defaults suit a LAN cluster.
#[derive(Debug, Clone)]
pub struct RpcConfig {
    /// Bound on every call, from its start (including connecting) to its response.
    pub call_timeout: Duration,
    /// Bound on establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Bound on the handshake of a connection this node opens.
    pub handshake_timeout: Duration,
    /// Bound on the handshake of a connection a server accepted, from its accept to the client's
    /// proof. Much shorter than `handshake_timeout`: a peer on the LAN proves itself within a
    /// round trip or two, and until it does its connection holds one of `max_handshakes` slots.
    pub preauth_timeout: Duration,
    /// Accepted connections a server lets handshake at once. When all are taken, the one that
    /// has waited longest is closed to make room (see [`PreAuth`]): connections that never
    /// prove anything cannot lock real peers out. They do not count against `max_connections`.
    pub max_handshakes: usize,
    /// Allowed difference between two nodes' clocks in the handshake.
    pub max_clock_skew: Duration,
    /// Connections a client keeps to each peer; calls are spread over them round-robin.
    pub connections_per_peer: usize,
    /// Largest frame payload sent or accepted.
    pub max_frame: u32,
    /// First delay after a failed connection attempt; doubles per failure, jittered.
    pub backoff_initial: Duration,
    /// Largest delay between connection attempts.
    pub backoff_max: Duration,
    /// Requests a server runs at once per connection; beyond that it stops reading the connection.
    /// A server holds at most `max_connections * max_in_flight_per_connection` request payloads of
    /// at most `max_frame` bytes each.
    pub max_in_flight_per_connection: usize,
    /// Authenticated connections a server serves at once; beyond that a new one is closed as
    /// soon as its handshake is done.
    pub max_connections: usize,
    /// Buffers of the pool a server reads request bodies sent as bulk frames into
    /// ([`wire::FLAG_BULK_BODY`]: the data plane's shard appends).
    pub bulk_buffers: usize,
    /// Bytes of each of those buffers (a multiple of 4096); also the largest such body accepted
    /// (or `max_frame`, if larger).
    pub bulk_buf_size: usize,
    /// Internode mutual TLS ([`crate::transport`]): with it, a client connects only over TLS and
    /// a server accepts only TLS connections carrying a certificate of the cluster's CA.
    pub tls: Option<InternodeTls>,
    /// A server answers frame reads on plain TCP connections from files with `sendfile` when its
    /// handler can ([`Handler::handle_region`]). Off: every answer is read into memory first.
    pub sendfile: bool,
}

impl Default for RpcConfig {
    fn default() -> RpcConfig {
        RpcConfig {
            call_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_secs(5),
            preauth_timeout: Duration::from_secs(1),
            max_handshakes: 64,
            max_clock_skew: crate::auth::DEFAULT_MAX_SKEW,
            connections_per_peer: 2,
            max_frame: wire::DEFAULT_MAX_PAYLOAD,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            max_in_flight_per_connection: 64,
            max_connections: 256,
            bulk_buffers: 64,
            bulk_buf_size: quarry_buf::DEFAULT_BUF_SIZE,
            tls: None,
            sendfile: true,
        }
    }
}

/// Every way a call can fail.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("call to {peer} timed out after {after:?}")]
    Timeout { peer: String, after: Duration },
    #[error("peer {peer} is marked down (next attempt in {retry_in:?}); last error: {last_error}")]
    PeerDown {
        peer: String,
        retry_in: Duration,
        last_error: String,
    },
    #[error("cannot connect to {peer}: {source}")]
    Connect {
        peer: String,
        source: std::io::Error,
    },
    #[error("handshake with {peer} failed: {source}")]
    Handshake { peer: String, source: AuthError },
    /// The TLS handshake failed: the peer's certificate is not of the cluster's CA or does not
    /// cover its address, or it refused ours.
    #[error("TLS with {peer} failed: {reason}")]
    Tls { peer: String, reason: String },
    #[error("connection to {peer} closed: {reason}")]
    ConnectionClosed { peer: String, reason: String },
    #[error("request payload of {len} bytes exceeds the maximum frame payload of {max} bytes")]
    TooLarge { len: usize, max: u32 },
    #[error("protocol error: {0}")]
    Wire(#[from] WireError),
    /// An error answered by the peer (or returned by a [`Handler`]), see [`codes`].
    #[error("remote error {code}: {message}")]
    Remote { code: u16, message: String },
}

impl RpcError {
    /// An error to send back as an error frame.
    pub fn remote(code: u16, message: impl Into<String>) -> RpcError {
        RpcError::Remote {
            code,
            message: message.into(),
        }
    }

    pub fn unknown_method(method: u16) -> RpcError {
        RpcError::remote(codes::UNKNOWN_METHOD, format!("unknown method {method}"))
    }

    /// The code of a remote error.
    pub fn code(&self) -> Option<u16> {
        match self {
            RpcError::Remote { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the peer cannot be reached (as opposed to having answered with an error).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            RpcError::Timeout { .. }
                | RpcError::PeerDown { .. }
                | RpcError::Connect { .. }
                | RpcError::Tls { .. }
                | RpcError::ConnectionClosed { .. }
        )
    }
}

/// The server side of the RPC: one call per request, run concurrently.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request. An `Err` travels back as an error frame: [`RpcError::Remote`] keeps its
    /// code and message, any other error becomes [`codes::INTERNAL`] with its text.
    fn handle(
        &self,
        method: u16,
        payload: Bytes,
    ) -> impl Future<Output = Result<Bytes, RpcError>> + Send;

    /// Answers a frame read (a request flagged [`wire::FLAG_BULK_FRAME`], on a connection that
    /// can send files) with the frame left in a file.
    /// `Ok(None)`: answer it with [`Handler::handle`] instead. The default always says so.
    fn handle_region(
        &self,
        method: u16,
        payload: Bytes,
    ) -> impl Future<Output = Result<Option<Region>, RpcError>> + Send {
        let _ = (method, payload);
        async { Ok(None) }
    }
}

/// A frame answer left in a file ([`Handler::handle_region`]): the frame's hash from memory, then
/// its chunk, `len` bytes at `offset` of `file`, sent with `sendfile`.
#[derive(Debug)]
pub struct Region {
    pub hash: [u8; crate::data::FRAME_HASH_LEN],
    pub file: File,
    pub offset: u64,
    pub len: usize,
    /// Held until the region is sent (e.g. a bound on the files open for sending).
    pub permit: Option<OwnedSemaphorePermit>,
}

/// Why reading a connection stopped.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    /// The peer sent something that is not a valid frame: the connection is closed.
    #[error("{0}")]
    Wire(#[from] WireError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads the next frame: `Ok(None)` at a clean end of stream.
async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    opener: &mut Opener,
    buf: &mut BytesMut,
) -> Result<Option<Frame>, ReadError> {
    loop {
        match opener.open(buf)? {
            Decoded::Frame(f) => return Ok(Some(f)),
            Decoded::Need(n) => {
                // `n` is bounded by the maximum frame: the header was checked first.
                buf.reserve(n - buf.len());
                let got = match r.read_buf(buf).await {
                    // A TLS peer that closes without close_notify (it crashed or was killed):
                    // the same as a TCP peer closing between frames.
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && buf.is_empty() => 0,
                    other => other?,
                };
                if got == 0 {
                    if buf.is_empty() {
                        return Ok(None);
                    }
                    return Err(WireError::Truncated {
                        need: n,
                        have: buf.len(),
                    }
                    .into());
                }
            }
        }
    }
}

/// What a connection's writer sends.
pub(crate) enum Outgoing {
    Frame(Frame),
    /// A response header frame (flag [`wire::FLAG_BULK`]) immediately followed by a bulk frame
    /// carrying `payload`, with the header's request id as transfer id; a frame answer (its tag
    /// over the frame's hash only) when `frame`.
    Bulk {
        head: Frame,
        payload: Bytes,
        frame: bool,
    },
    /// A frame answer from a file: the response header frame, then the bulk frame with the
    /// region's hash and its chunk sent with `sendfile` (only on a writer given the socket).
    Region {
        head: Frame,
        region: Region,
    },
}

/// The socket of a plain TCP connection, for `sendfile` beside the writer's stream: a second
/// descriptor of the same socket, registered with the runtime on its own.
pub(crate) type SendfileSocket = tokio::net::TcpStream;

/// A descriptor of `stream`'s socket for [`write_loop`]'s `sendfile`; `None` under TLS (the
/// bytes must go through the TLS stream) or when it cannot be had (then regions are not used).
pub(crate) fn sendfile_socket(
    stream: &crate::transport::InternodeStream,
) -> Option<SendfileSocket> {
    use std::os::fd::AsFd;
    let crate::transport::InternodeStream::Tcp(tcp) = stream else {
        return None;
    };
    let fd = tcp.as_fd().try_clone_to_owned().ok()?;
    // Already non-blocking: the descriptors share the socket's flags.
    tokio::net::TcpStream::from_std(std::net::TcpStream::from(fd)).ok()
}

/// At most this much per `sendfile` call.
const SENDFILE_MAX: usize = 1 << 20;

/// Sends `len` bytes at `offset` of `file` to `socket` with `sendfile`, waiting for the socket to
/// take them. The file must be at least that long: what was announced cannot be taken back, so
/// a file that ends early is an error (the connection is then closed).
async fn send_file(
    socket: &SendfileSocket,
    file: &File,
    mut offset: u64,
    len: usize,
) -> std::io::Result<()> {
    let end = offset + len as u64;
    while offset < end {
        let want = usize::try_from(end - offset).map_or(SENDFILE_MAX, |n| n.min(SENDFILE_MAX));
        socket.writable().await?;
        let sent = socket.try_io(tokio::io::Interest::WRITABLE, || {
            rustix::fs::sendfile(socket, file, Some(&mut offset), want)
                .map_err(std::io::Error::from)
        });
        match sent {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "a file answer's file ended {} bytes before the region it announced",
                        end - offset
                    ),
                ))
            }
            Ok(_) => {}
            // Not writable after all: readiness cleared, wait again.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Seals and writes frames from `rx` until it closes or a write fails, batching whatever is queued
/// into one flush. Bulk payloads are written from their own buffer (a write larger than the
/// `BufWriter` goes straight to the socket), never copied into a frame.
///
/// `socket` is the connection's socket when it is plain TCP ([`sendfile_socket`]): file regions
/// are sent to it with `sendfile`, after the buffered bytes before them are flushed.
async fn write_loop<W: AsyncWrite + Unpin>(
    w: W,
    mut sealer: Sealer,
    mut bulk: BulkSender,
    mut rx: mpsc::Receiver<Outgoing>,
    socket: Option<SendfileSocket>,
) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(64 << 10, w);
    let socket = socket.as_ref();
    while let Some(out) = rx.recv().await {
        write_out(&mut w, &mut sealer, &mut bulk, &out, socket).await?;
        while let Ok(out) = rx.try_recv() {
            write_out(&mut w, &mut sealer, &mut bulk, &out, socket).await?;
        }
        w.flush().await?;
    }
    w.shutdown().await
}

async fn write_out<W: AsyncWrite + Unpin>(
    w: &mut W,
    sealer: &mut Sealer,
    bulk: &mut BulkSender,
    out: &Outgoing,
    socket: Option<&SendfileSocket>,
) -> std::io::Result<()> {
    match out {
        Outgoing::Region { head, region } => {
            let Some(socket) = socket else {
                return Err(std::io::Error::other(
                    "a file answer on a connection that cannot send files",
                ));
            };
            let (header, tag) = bulk
                .seal_frame(head.request_id, &region.hash, region.len)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            write_sealed(w, sealer, head).await?;
            w.write_all(&header).await?;
            w.write_all(&region.hash).await?;
            w.flush().await?;
            send_file(socket, &region.file, region.offset, region.len).await?;
            w.write_all(&tag).await
        }
        Outgoing::Frame(frame) => write_sealed(w, sealer, frame).await,
        Outgoing::Bulk {
            head,
            payload,
            frame,
        } => {
            let (header, tag) = bulk
                .seal_as(head.request_id, payload, *frame)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            write_sealed(w, sealer, head).await?;
            w.write_all(&header).await?;
            w.write_all(payload).await?;
            w.write_all(&tag).await
        }
    }
}

async fn write_sealed<W: AsyncWrite + Unpin>(
    w: &mut W,
    sealer: &mut Sealer,
    frame: &Frame,
) -> std::io::Result<()> {
    let (header, tag) = sealer
        .seal(frame)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    w.write_all(&header).await?;
    w.write_all(&frame.payload).await?;
    w.write_all(&tag).await
}
