//! Request and response bodies: the request body as a counted byte stream, the bounded read of
//! the small XML bodies, and the response body that writes the request's single log line when it
//! is done (so the line has the bytes actually sent and the full duration, streaming included).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt, TryStreamExt};
use http::{Method, StatusCode};
use http_body::{Frame, SizeHint};

use crate::api_error::{body_error, ApiError};
use crate::error::S3ErrorCode;

/// The largest XML request body Quarry reads (`CreateBucketConfiguration`).
pub const MAX_XML_BODY: usize = 1024 * 1024;

/// The request body as a stream of byte chunks, counting the bytes received into `counter`.
pub fn counted_stream(
    body: Body,
    counter: Arc<AtomicU64>,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static {
    body.into_data_stream().map(move |chunk| match chunk {
        Ok(bytes) => {
            counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            Ok(bytes)
        }
        Err(e) => Err(io::Error::other(e)),
    })
}

/// How long a request body may keep the server waiting. A client that declares a body and then
/// sends nothing, or drips it (a byte every few seconds holds a connection as well as a gigabyte
/// does), is cut off with `RequestTimeout`. Only the time the server spends waiting for the
/// client counts: a handler that is slow to read (a slow drive) never makes the client late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimeouts {
    /// The longest wait for the next byte.
    pub idle: std::time::Duration,
    /// After `idle` of waiting in all, the body must have come at this average rate (bytes per
    /// second of waiting) or better. Zero: no rate bound, only the idle one.
    pub min_rate: u64,
}

impl Default for BodyTimeouts {
    fn default() -> Self {
        BodyTimeouts {
            idle: std::time::Duration::from_secs(30),
            min_rate: 1024,
        }
    }
}

/// `stream` with the [`BodyTimeouts`]: a stall ends it with an `io::Error` carrying S3's
/// `RequestTimeout` (then nothing more).
pub fn timed_stream<S>(
    stream: S,
    limits: BodyTimeouts,
) -> impl Stream<Item = io::Result<Bytes>> + Send + 'static
where
    S: Stream<Item = io::Result<Bytes>> + Send + 'static,
{
    TimedStream {
        inner: Box::pin(stream),
        limits,
        received: 0,
        waited: std::time::Duration::ZERO,
        waiting_since: None,
        timer: Box::pin(tokio::time::sleep(limits.idle)),
        done: false,
    }
}

struct TimedStream {
    inner: Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>,
    limits: BodyTimeouts,
    received: u64,
    /// Time spent waiting for the client, before the current wait.
    waited: std::time::Duration,
    /// When the current wait began (the consumer asked and nothing was there).
    waiting_since: Option<tokio::time::Instant>,
    timer: Pin<Box<tokio::time::Sleep>>,
    done: bool,
}

impl TimedStream {
    /// How much more waiting the body is allowed, from the start of the current wait.
    fn allowance(&self) -> std::time::Duration {
        let idle = self.limits.idle;
        if self.limits.min_rate == 0 {
            return idle;
        }
        // In all, `idle` of grace plus one second per `min_rate` bytes received.
        let earned =
            std::time::Duration::from_secs_f64(self.received as f64 / self.limits.min_rate as f64);
        let total = idle.saturating_add(earned);
        total.saturating_sub(self.waited).min(idle)
    }
}

impl Stream for TimedStream {
    type Item = io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(item) => {
                if let Some(since) = this.waiting_since.take() {
                    this.waited += since.elapsed();
                }
                match &item {
                    Some(Ok(bytes)) => this.received += bytes.len() as u64,
                    Some(Err(_)) | None => this.done = true,
                }
                Poll::Ready(item)
            }
            Poll::Pending => {
                if this.waiting_since.is_none() {
                    let now = tokio::time::Instant::now();
                    this.waiting_since = Some(now);
                    let allowance = this.allowance();
                    this.timer.as_mut().reset(now + allowance);
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(()) => {
                        this.done = true;
                        tracing::debug!(received = this.received, "request body stalled: cut off");
                        Poll::Ready(Some(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            crate::error::S3Error::from_code(S3ErrorCode::RequestTimeout),
                        ))))
                    }
                }
            }
        }
    }
}

/// Reads a small body completely, failing with `MalformedXML` beyond `limit` bytes.
pub async fn read_small<S>(stream: S, limit: usize) -> Result<Bytes, ApiError>
where
    S: Stream<Item = io::Result<Bytes>> + Send,
{
    let mut stream = std::pin::pin!(stream);
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.try_next().await.map_err(|e| body_error(&e))? {
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::new(
                S3ErrorCode::MalformedXML,
                format!("The XML body is larger than the {limit} bytes accepted."),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// The `tracing` target of the per-request lines (filter with e.g. `quarry_s3::access=off`).
pub const ACCESS_LOG_TARGET: &str = "quarry_s3::access";

/// What the log line of one request says. Created when the request arrives; the line is written
/// when this is dropped: after the response body is sent, or when the client goes away first.
pub struct RequestLog {
    pub request_id: String,
    pub method: Method,
    pub path: String,
    pub operation: String,
    pub status: Option<StatusCode>,
    pub error_code: Option<&'static str>,
    pub bytes_in: Arc<AtomicU64>,
    pub bytes_out: u64,
    /// The `Content-Length` of the response body, when it has one.
    pub expected_out: Option<u64>,
    /// Whether the response body ran to its end.
    pub complete: bool,
    pub start: Instant,
    /// Where the request is counted when it ends (`/metrics`).
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl RequestLog {
    pub fn new(request_id: String, method: Method, path: String) -> Self {
        RequestLog {
            request_id,
            method,
            path,
            operation: String::new(),
            status: None,
            error_code: None,
            bytes_in: Arc::new(AtomicU64::new(0)),
            bytes_out: 0,
            expected_out: None,
            complete: false,
            start: Instant::now(),
            metrics: None,
        }
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        if let Some(metrics) = &self.metrics {
            metrics.observe(crate::metrics::Observation {
                operation: &self.operation,
                status: self.status,
                bytes_in: self.bytes_in.load(Ordering::Relaxed),
                bytes_out: self.bytes_out,
                duration: self.start.elapsed(),
            });
        }
        let status = self.status.map_or(0, |s| s.as_u16());
        let outcome = match (self.status, self.complete) {
            (None, _) => "client went away before the response",
            (Some(_), false) => "response body cut short",
            (Some(_), true) => "ok",
        };
        tracing::info!(
            target: ACCESS_LOG_TARGET,
            request_id = %self.request_id,
            method = %self.method,
            path = %self.path,
            op = %self.operation,
            status,
            error = self.error_code.unwrap_or(""),
            bytes_in = self.bytes_in.load(Ordering::Relaxed),
            bytes_out = self.bytes_out,
            duration_ms = %format_args!("{:.3}", self.start.elapsed().as_secs_f64() * 1000.0),
            outcome,
            "request"
        );
    }
}

/// A response body that counts the bytes it sends and finishes the request's log line.
pub struct LoggedBody {
    inner: Body,
    log: RequestLog,
}

impl LoggedBody {
    pub fn new(inner: Body, log: RequestLog) -> Self {
        LoggedBody { inner, log }
    }

    /// Whether the whole body went out.
    fn finished(&self) -> bool {
        // hyper also stops once it has written `Content-Length` bytes, without asking for more.
        self.log.complete
            || http_body::Body::is_end_stream(&self.inner)
            || self
                .log
                .expected_out
                .is_some_and(|n| self.log.bytes_out >= n)
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        // hyper stops polling once `is_end_stream` says so (and never polls an empty body), so a
        // body that reached its end is recognised here rather than by a final `None`.
        self.log.complete = self.finished();
    }
}

impl http_body::Body for LoggedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.log.bytes_out += data.len() as u64;
                }
            }
            Poll::Ready(Some(Err(e))) => {
                tracing::warn!(request_id = %this.log.request_id, error = %e, "response body failed");
            }
            Poll::Ready(None) => this.log.complete = true,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn small_bodies_are_capped() {
        let chunks = || futures::stream::iter([b"abc", b"def"].map(|c| Ok(Bytes::from_static(c))));
        let got = read_small(chunks(), 6).await.unwrap();
        assert_eq!(&got[..], b"abcdef");
        let err = read_small(chunks(), 5).await.unwrap_err();
        assert_eq!(err.code(), S3ErrorCode::MalformedXML);
    }

    #[tokio::test]
    async fn request_bytes_are_counted() {
        let counter = Arc::new(AtomicU64::new(0));
        let body = Body::from("hello world");
        let got = read_small(counted_stream(body, counter.clone()), 100)
            .await
            .unwrap();
        assert_eq!(&got[..], b"hello world");
        assert_eq!(counter.load(Ordering::Relaxed), 11);
    }

    #[tokio::test]
    async fn response_bytes_are_counted() {
        use http_body_util::BodyExt;
        let log = RequestLog::new("id".into(), Method::GET, "/".into());
        let mut body = LoggedBody::new(Body::from("12345"), log);
        assert!(!body.log.complete);
        while let Some(frame) = body.frame().await {
            frame.unwrap();
        }
        assert_eq!(body.log.bytes_out, 5);
        assert!(body.log.complete);
        // hyper never polls a body that is already at its end: it still counts as sent.
        let log = RequestLog::new("id".into(), Method::HEAD, "/".into());
        let body = LoggedBody::new(Body::empty(), log);
        assert!(body.finished());
        let log = RequestLog::new("id".into(), Method::GET, "/".into());
        let body = LoggedBody::new(Body::from("unsent"), log);
        assert!(!body.finished());
        // A streamed body whose declared length went out is complete, even if never polled to its end.
        let mut log = RequestLog::new("id".into(), Method::GET, "/".into());
        log.expected_out = Some(3);
        let stream = futures::stream::iter([Ok::<_, io::Error>(Bytes::from_static(b"abc"))]);
        let mut body = LoggedBody::new(Body::from_stream(stream), log);
        assert!(!body.finished());
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "abc");
        assert!(body.finished());
    }
}
