//! The serving side: accept, handshake (TLS first when [`RpcConfig::tls`] is set: then a
//! connection without a certificate of the cluster's CA ends there), then dispatch each request
//! to the [`Handler`].
//!
//! Nothing is read from a connection as a request before its handshake succeeded. A connection
//! that has not authenticated yet holds one of `max_handshakes` slots for at most
//! `preauth_timeout`; when every slot is taken the oldest such connection is closed to make room
//! ([`PreAuth`]), so a flood of connections that never prove anything neither touches the
//! authenticated ones nor keeps a new peer from joining. At most `max_connections` authenticated
//! connections are served at once (more are closed after their handshake) and at most
//! `max_in_flight_per_connection` requests run at once per connection: beyond that the server stops
//! reading that connection, so TCP flow control pushes back on the peer. A connection that sends
//! anything that is not a valid frame is closed; other connections are not affected. Refusals are
//! logged through a [`LogThrottle`] (one line per period, with the count held back).

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::{
    codes, read_frame, write_loop, Handler, LogThrottle, Outgoing, PreAuth, Region, RpcConfig,
    RpcError,
};
use crate::auth::{self, Identity, Session};
use crate::transport::{self, InternodeStream};
use crate::wire::{self, Frame, FrameKind, FLAG_BULK, FLAG_BULK_BODY, FLAG_BULK_FRAME};
use quarry_buf::{BufPool, BufPoolConfig};

/// Counters of a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub connections_accepted: u64,
    /// Authenticated connections closed at once because `max_connections` were open.
    pub connections_refused: u64,
    /// Failed or timed-out handshakes.
    pub handshake_failures: u64,
    /// Connections closed before their handshake was done to make room for newer ones
    /// (`max_handshakes` were waiting).
    pub handshakes_cut: u64,
    /// Connections closed because of an invalid frame.
    pub protocol_errors: u64,
    pub requests: u64,
    /// Frame reads answered from a file with `sendfile` ([`Handler::handle_region`]), and the
    /// bytes so answered.
    pub file_answers: u64,
    pub file_answer_bytes: u64,
}

#[derive(Default)]
struct Counters {
    connections_accepted: AtomicU64,
    connections_refused: AtomicU64,
    handshake_failures: AtomicU64,
    handshakes_cut: AtomicU64,
    protocol_errors: AtomicU64,
    requests: AtomicU64,
    file_answers: AtomicU64,
    file_answer_bytes: AtomicU64,
}

/// A running control-RPC server. Dropping it (or [`RpcServer::shutdown`]) stops accepting and closes
/// every connection, cancelling requests in progress.
pub struct RpcServer {
    local_addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
    stop: Option<oneshot::Sender<()>>,
    counters: Arc<Counters>,
}

impl RpcServer {
    /// Binds `addr` and serves `handler` on it.
    pub async fn bind<H: Handler>(
        addr: impl ToSocketAddrs,
        identity: Identity,
        config: RpcConfig,
        handler: Arc<H>,
    ) -> std::io::Result<RpcServer> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        Ok(Self::start(
            Incoming::Listener(listener),
            local_addr,
            identity,
            config,
            handler,
        ))
    }

    /// Serves `handler` on connections accepted elsewhere and handed over on `incoming`: a node
    /// that shares one port between S3 and the internode RPC accepts there, recognises an
    /// internode connection by its first bytes (the handshake magic, still unread), and passes
    /// it here. `local_addr` is the address those connections were accepted on.
    pub fn serve_incoming<H: Handler>(
        incoming: mpsc::Receiver<(TcpStream, SocketAddr)>,
        local_addr: SocketAddr,
        identity: Identity,
        config: RpcConfig,
        handler: Arc<H>,
    ) -> RpcServer {
        Self::start(
            Incoming::Channel(incoming),
            local_addr,
            identity,
            config,
            handler,
        )
    }

    fn start<H: Handler>(
        listener: Incoming,
        local_addr: SocketAddr,
        identity: Identity,
        config: RpcConfig,
        handler: Arc<H>,
    ) -> RpcServer {
        let counters = Arc::new(Counters::default());
        let ctx = Arc::new(Ctx {
            identity,
            config,
            counters: counters.clone(),
            bulk_pool: std::sync::OnceLock::new(),
            refusals: LogThrottle::new(REFUSAL_LOG_PERIOD),
        });
        let (stop, stopped) = oneshot::channel();
        let accept = tokio::spawn(accept_loop(listener, ctx, handler, stopped));
        RpcServer {
            local_addr,
            accept: Some(accept),
            stop: Some(stop),
            counters,
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops the server and waits until its listener and connections are closed.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
    }

    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        ServerStats {
            connections_accepted: c.connections_accepted.load(Ordering::Relaxed),
            connections_refused: c.connections_refused.load(Ordering::Relaxed),
            handshake_failures: c.handshake_failures.load(Ordering::Relaxed),
            handshakes_cut: c.handshakes_cut.load(Ordering::Relaxed),
            protocol_errors: c.protocol_errors.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            file_answers: c.file_answers.load(Ordering::Relaxed),
            file_answer_bytes: c.file_answer_bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        if let Some(accept) = &self.accept {
            accept.abort();
        }
    }
}

/// At most one log line per this period about refused or cut connections.
const REFUSAL_LOG_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

struct Ctx {
    identity: Identity,
    config: RpcConfig,
    counters: Arc<Counters>,
    /// Throttles the log lines about connections refused before or at their handshake.
    refusals: LogThrottle,
    /// Where bulk request bodies land; made on first use (most servers never see one).
    bulk_pool: std::sync::OnceLock<Option<BufPool>>,
}

impl Ctx {
    fn bulk_pool(&self) -> Option<&BufPool> {
        self.bulk_pool
            .get_or_init(|| {
                let c = &self.config;
                match BufPool::new(BufPoolConfig::new(c.bulk_buf_size, c.bulk_buffers)) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        tracing::warn!(error = %e, "internode server: no buffer pool for bulk request bodies; using plain allocations");
                        None
                    }
                }
            })
            .as_ref()
    }
}

/// Where a server's connections come from.
enum Incoming {
    Listener(TcpListener),
    Channel(mpsc::Receiver<(TcpStream, SocketAddr)>),
}

impl Incoming {
    async fn accept(&mut self) -> std::io::Result<(TcpStream, SocketAddr)> {
        match self {
            Incoming::Listener(l) => l.accept().await,
            Incoming::Channel(rx) => match rx.recv().await {
                Some(c) => Ok(c),
                // The acceptor is gone: no connection will come again.
                None => std::future::pending().await,
            },
        }
    }
}

async fn accept_loop<H: Handler>(
    mut listener: Incoming,
    ctx: Arc<Ctx>,
    handler: Arc<H>,
    mut stop: oneshot::Receiver<()>,
) {
    let limit = Arc::new(Semaphore::new(ctx.config.max_connections.max(1)));
    let preauth = PreAuth::new(ctx.config.max_handshakes);
    // Connection tasks live in this set: when the accept task is aborted, they are aborted with it.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => {
                drop(listener);
                conns.shutdown().await;
                return;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    ctx.counters.connections_accepted.fetch_add(1, Ordering::Relaxed);
                    let (slot, cut) = preauth.admit();
                    if cut {
                        ctx.counters.handshakes_cut.fetch_add(1, Ordering::Relaxed);
                        if let Some(held) = ctx.refusals.allow() {
                            tracing::warn!(
                                held_back = held,
                                "internode: {} connections are waiting to authenticate; closing the oldest",
                                ctx.config.max_handshakes
                            );
                        }
                    }
                    let ctx = ctx.clone();
                    let handler = handler.clone();
                    let limit = limit.clone();
                    conns.spawn(async move {
                        let handshake = slot.run(handshake(stream, peer, &ctx)).await;
                        let Some(Some((stream, session))) = handshake else { return };
                        let Ok(permit) = limit.try_acquire_owned() else {
                            ctx.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
                            if let Some(held) = ctx.refusals.allow() {
                                tracing::warn!(%peer, node = ?session.peer_node_id, held_back = held, "internode connection refused: too many connections");
                            }
                            return;
                        };
                        serve(stream, peer, session, ctx, handler, permit).await
                    });
                }
                Err(e) => {
                    // E.g. out of file descriptors: wait a little instead of spinning.
                    tracing::warn!(error = %e, "internode accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// The server side of the handshakes, TLS (when configured) and then the internode one, each
/// within `preauth_timeout`; failures are counted and logged (throttled).
async fn handshake(
    tcp: TcpStream,
    peer: SocketAddr,
    ctx: &Ctx,
) -> Option<(InternodeStream, Session)> {
    let config = &ctx.config;
    let within = config.preauth_timeout;
    let result = async {
        let mut stream =
            match tokio::time::timeout(within, transport::accept(tcp, config.tls.as_ref())).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(format!("no TLS handshake within {within:?}")),
            };
        let handshake = auth::server_handshake(&mut stream, &ctx.identity, config.max_clock_skew);
        match tokio::time::timeout(within, handshake).await {
            Ok(Ok(s)) => Ok((stream, s)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no handshake within {within:?}")),
        }
    }
    .await;
    let error = match result {
        Ok(ok) => return Some(ok),
        Err(e) => e,
    };
    ctx.counters
        .handshake_failures
        .fetch_add(1, Ordering::Relaxed);
    if let Some(held) = ctx.refusals.allow() {
        tracing::warn!(%peer, %error, held_back = held, "internode handshake refused");
    }
    None
}

async fn serve<H: Handler>(
    stream: InternodeStream,
    peer: SocketAddr,
    session: Session,
    ctx: Arc<Ctx>,
    handler: Arc<H>,
    _permit: OwnedSemaphorePermit,
) {
    let config = &ctx.config;
    // Checked printable by the handshake; quoted all the same (`?`), as every peer-given string.
    let node = session.peer_node_id.clone();
    tracing::debug!(%peer, ?node, "internode connection authenticated");
    let sealer = session.sealer(config.max_frame);
    let bulk = session.bulk_sender();
    let mut bulk_rx = session.bulk_receiver();
    let max_body = config.bulk_buf_size.max(config.max_frame as usize);
    let mut opener = session.opener(config.max_frame);
    let socket = if config.sendfile {
        super::sendfile_socket(&stream)
    } else {
        None
    };
    let regions = socket.is_some();
    let (mut rd, wr) = tokio::io::split(stream);
    let (tx, rx) = mpsc::channel::<Outgoing>(256);
    // Handlers and the writer live in this set: they end with the connection.
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let _ = write_loop(wr, sealer, bulk, rx, socket).await;
    });
    let in_flight = Arc::new(Semaphore::new(config.max_in_flight_per_connection.max(1)));
    let max_frame = config.max_frame;
    let mut buf = BytesMut::with_capacity(16 << 10);
    loop {
        let mut frame = match read_frame(&mut rd, &mut opener, &mut buf).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                if matches!(e, super::ReadError::Wire(_)) {
                    ctx.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                }
                tracing::warn!(%peer, ?node, error = %e, "internode connection closed");
                break;
            }
        };
        if frame.kind == FrameKind::Request && frame.flags & FLAG_BULK_BODY != 0 {
            // The rest of the payload follows as a bulk frame: part of it may already be in
            // `buf` (read ahead), the rest is read from the socket straight into the body's buffer.
            let ahead = buf.split().freeze();
            let mut rest: &[u8] = &ahead;
            let body = {
                let mut src = tokio::io::AsyncReadExt::chain(&mut rest, &mut rd);
                bulk_rx
                    .recv_body(
                        &mut src,
                        frame.request_id,
                        max_body,
                        &frame.payload,
                        ctx.bulk_pool(),
                    )
                    .await
            };
            buf.extend_from_slice(rest);
            match body {
                Ok(b) => frame.payload = b,
                Err(e) => {
                    if !matches!(e, crate::data::DataError::Io(_)) {
                        ctx.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    tracing::warn!(%peer, ?node, error = %e, "internode connection closed: bad request body");
                    break;
                }
            }
        }
        match frame.kind {
            FrameKind::Request => {
                ctx.counters.requests.fetch_add(1, Ordering::Relaxed);
                // Waiting here stops reading: the bound on concurrent requests per connection.
                let Ok(permit) = in_flight.clone().acquire_owned().await else {
                    break;
                };
                let handler = handler.clone();
                let tx = tx.clone();
                let bulk =
                    (frame.flags & FLAG_BULK != 0).then_some(frame.flags & FLAG_BULK_FRAME != 0);
                let counters = ctx.counters.clone();
                tasks.spawn(async move {
                    let reply = answer(
                        &*handler,
                        frame.request_id,
                        frame.method,
                        frame.payload,
                        max_frame,
                        bulk,
                        regions,
                    )
                    .await;
                    if let Outgoing::Region { region, .. } = &reply {
                        let bytes = (region.hash.len() + region.len) as u64;
                        counters.file_answers.fetch_add(1, Ordering::Relaxed);
                        counters
                            .file_answer_bytes
                            .fetch_add(bytes, Ordering::Relaxed);
                        quarry_buf::figures::note_sendfile_answer(bytes);
                    }
                    let _ = tx.send(reply).await;
                    drop(permit);
                });
            }
            FrameKind::Ping => {
                if tx
                    .send(Outgoing::Frame(Frame::pong(frame.request_id)))
                    .await
                    .is_err()
                {
                    break;
                }
            }
            other => {
                ctx.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, ?node, kind = ?other, "internode client sent a non-request frame; closing");
                break;
            }
        }
        // Reap finished handler tasks so the set does not grow.
        while tasks.try_join_next().is_some() {}
    }
    // Dropping `tasks` cancels handlers still running and the writer.
}

/// Runs the handler on one request. A request flagged [`FLAG_BULK`] (`bulk` is `Some`) is answered,
/// on success, with a response header (flag set, payload: the answer's length) and the answer as a
/// bulk frame, so the client can read it straight into a pooled buffer; a frame answer (tag over
/// the frame's hash only) when it is also flagged [`FLAG_BULK_FRAME`] (`Some(true)`), from a file
/// when `regions` (the connection can send files) and the handler has one
/// ([`Handler::handle_region`]). Failures are error frames either way.
async fn answer<H: Handler>(
    handler: &H,
    id: u64,
    method: u16,
    payload: Bytes,
    max_frame: u32,
    bulk: Option<bool>,
    regions: bool,
) -> Outgoing {
    let frame_answer = bulk == Some(true);
    let bulk = bulk.is_some();
    let result = if frame_answer && regions {
        // A panicking handler must not leave its caller waiting for the timeout.
        match AssertUnwindSafe(handler.handle_region(method, payload.clone()))
            .catch_unwind()
            .await
        {
            Ok(Ok(Some(region))) => return region_answer(id, method, region),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => Some(Ok(Err(e))),
            Err(panic) => Some(Err(panic)),
        }
    } else {
        None
    };
    let result = match result {
        Some(r) => r,
        None => {
            AssertUnwindSafe(handler.handle(method, payload))
                .catch_unwind()
                .await
        }
    };
    let frame = match result {
        Ok(Ok(body)) if frame_answer && body.len() < crate::data::FRAME_HASH_LEN => Frame::error(
            id,
            method,
            codes::BAD_REQUEST,
            &format!(
                "a frame answer of {} bytes is shorter than the {}-byte hash its tag covers",
                body.len(),
                crate::data::FRAME_HASH_LEN
            ),
        ),
        Ok(Ok(body)) if bulk && body.len() as u64 <= u32::MAX as u64 => {
            let head = Frame {
                kind: FrameKind::Response,
                flags: if frame_answer {
                    FLAG_BULK | FLAG_BULK_FRAME
                } else {
                    FLAG_BULK
                },
                request_id: id,
                method,
                payload: wire::encode_bulk_len(body.len() as u64),
            };
            return Outgoing::Bulk {
                head,
                payload: body,
                frame: frame_answer,
            };
        }
        Ok(Ok(body)) if !bulk && body.len() as u64 <= max_frame as u64 => {
            Frame::response(id, method, body)
        }
        Ok(Ok(body)) => Frame::error(
            id,
            method,
            codes::RESPONSE_TOO_LARGE,
            &if bulk {
                format!(
                    "response of {} bytes exceeds the maximum bulk payload of {} bytes",
                    body.len(),
                    u32::MAX
                )
            } else {
                format!(
                    "response of {} bytes exceeds the maximum frame payload of {max_frame} bytes",
                    body.len()
                )
            },
        ),
        Ok(Err(RpcError::Remote { code, message })) => Frame::error(id, method, code, &message),
        Ok(Err(other)) => Frame::error(id, method, codes::INTERNAL, &other.to_string()),
        Err(_) => {
            tracing::error!(method, "internode request handler panicked");
            Frame::error(
                id,
                method,
                codes::INTERNAL,
                &format!("handler of method {method} panicked"),
            )
        }
    };
    Outgoing::Frame(frame)
}

/// The answer of a frame read from `region`, which must fit a bulk frame.
fn region_answer(id: u64, method: u16, region: Region) -> Outgoing {
    let len = region.hash.len() as u64 + region.len as u64;
    if len > u32::MAX as u64 {
        return Outgoing::Frame(Frame::error(
            id,
            method,
            codes::RESPONSE_TOO_LARGE,
            &format!(
                "response of {len} bytes exceeds the maximum bulk payload of {} bytes",
                u32::MAX
            ),
        ));
    }
    let head = Frame {
        kind: FrameKind::Response,
        flags: FLAG_BULK | FLAG_BULK_FRAME,
        request_id: id,
        method,
        payload: wire::encode_bulk_len(len),
    };
    Outgoing::Region { head, region }
}
