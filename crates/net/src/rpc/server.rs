//! The serving side: accept, handshake, then dispatch each request to the [`Handler`].
//!
//! Nothing is read from a connection as a request before its handshake succeeded. At most
//! `max_connections` connections are served at once (more are closed on accept) and at most
//! `max_in_flight_per_connection` requests run at once per connection: beyond that the server stops
//! reading that connection, so TCP flow control pushes back on the peer. A connection that sends
//! anything that is not a valid frame is closed; other connections are not affected.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use super::{codes, read_frame, write_loop, Handler, RpcConfig, RpcError};
use crate::auth::{self, Identity};
use crate::wire::{Frame, FrameKind};

/// Counters of a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub connections_accepted: u64,
    /// Connections closed at once because `max_connections` were open.
    pub connections_refused: u64,
    pub handshake_failures: u64,
    /// Connections closed because of an invalid frame.
    pub protocol_errors: u64,
    pub requests: u64,
}

#[derive(Default)]
struct Counters {
    connections_accepted: AtomicU64,
    connections_refused: AtomicU64,
    handshake_failures: AtomicU64,
    protocol_errors: AtomicU64,
    requests: AtomicU64,
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
        let counters = Arc::new(Counters::default());
        let ctx = Arc::new(Ctx {
            identity,
            config,
            counters: counters.clone(),
        });
        let (stop, stopped) = oneshot::channel();
        let accept = tokio::spawn(accept_loop(listener, ctx, handler, stopped));
        Ok(RpcServer {
            local_addr,
            accept: Some(accept),
            stop: Some(stop),
            counters,
        })
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
            protocol_errors: c.protocol_errors.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
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

struct Ctx {
    identity: Identity,
    config: RpcConfig,
    counters: Arc<Counters>,
}

async fn accept_loop<H: Handler>(
    listener: TcpListener,
    ctx: Arc<Ctx>,
    handler: Arc<H>,
    mut stop: oneshot::Receiver<()>,
) {
    let limit = Arc::new(Semaphore::new(ctx.config.max_connections.max(1)));
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
                    let Ok(permit) = limit.clone().try_acquire_owned() else {
                        ctx.counters.connections_refused.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%peer, "internode connection refused: too many connections");
                        continue;
                    };
                    ctx.counters.connections_accepted.fetch_add(1, Ordering::Relaxed);
                    conns.spawn(serve(stream, peer, ctx.clone(), handler.clone(), permit));
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

async fn serve<H: Handler>(
    mut stream: TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    handler: Arc<H>,
    _permit: OwnedSemaphorePermit,
) {
    let config = &ctx.config;
    let _ = stream.set_nodelay(true);
    let handshake = auth::server_handshake(&mut stream, &ctx.identity, config.max_clock_skew);
    let session = match tokio::time::timeout(config.handshake_timeout, handshake).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            ctx.counters
                .handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, error = %e, "internode handshake refused");
            return;
        }
        Err(_) => {
            ctx.counters
                .handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, "internode handshake timed out");
            return;
        }
    };
    let node = session.peer_node_id.clone();
    tracing::debug!(%peer, %node, "internode connection authenticated");
    let sealer = session.sealer(config.max_frame);
    let mut opener = session.opener(config.max_frame);
    let (mut rd, wr) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Frame>(256);
    // Handlers and the writer live in this set: they end with the connection.
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let _ = write_loop(wr, sealer, rx).await;
    });
    let in_flight = Arc::new(Semaphore::new(config.max_in_flight_per_connection.max(1)));
    let max_frame = config.max_frame;
    let mut buf = BytesMut::with_capacity(16 << 10);
    loop {
        let frame = match read_frame(&mut rd, &mut opener, &mut buf).await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                if matches!(e, super::ReadError::Wire(_)) {
                    ctx.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                }
                tracing::warn!(%peer, %node, error = %e, "internode connection closed");
                break;
            }
        };
        match frame.kind {
            FrameKind::Request => {
                ctx.counters.requests.fetch_add(1, Ordering::Relaxed);
                // Waiting here stops reading: the bound on concurrent requests per connection.
                let Ok(permit) = in_flight.clone().acquire_owned().await else {
                    break;
                };
                let handler = handler.clone();
                let tx = tx.clone();
                tasks.spawn(async move {
                    let reply = answer(
                        &*handler,
                        frame.request_id,
                        frame.method,
                        frame.payload,
                        max_frame,
                    )
                    .await;
                    let _ = tx.send(reply).await;
                    drop(permit);
                });
            }
            FrameKind::Ping => {
                if tx.send(Frame::pong(frame.request_id)).await.is_err() {
                    break;
                }
            }
            other => {
                ctx.counters.protocol_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, %node, kind = ?other, "internode client sent a non-request frame; closing");
                break;
            }
        }
        // Reap finished handler tasks so the set does not grow.
        while tasks.try_join_next().is_some() {}
    }
    // Dropping `tasks` cancels handlers still running and the writer.
}

async fn answer<H: Handler>(
    handler: &H,
    id: u64,
    method: u16,
    payload: Bytes,
    max_frame: u32,
) -> Frame {
    // A panicking handler must not leave its caller waiting for the timeout.
    let result = AssertUnwindSafe(handler.handle(method, payload))
        .catch_unwind()
        .await;
    match result {
        Ok(Ok(body)) if body.len() as u64 <= max_frame as u64 => Frame::response(id, method, body),
        Ok(Ok(body)) => Frame::error(
            id,
            method,
            codes::RESPONSE_TOO_LARGE,
            &format!(
                "response of {} bytes exceeds the maximum frame payload of {max_frame} bytes",
                body.len()
            ),
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
    }
}
