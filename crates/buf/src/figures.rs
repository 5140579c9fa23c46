//! The plain figures of the data path, as every layer reports them: what a data-plane backend
//! moved (in total and per peer) through pooled buffers. The data planes (`quarry-net`) count them;
//! the object layer passes them on and the front end renders them, neither knowing the network.

use std::sync::atomic::{AtomicU64, Ordering};

/// Peers' frame reads this process's holder side answered from the page cache with `sendfile`
/// (TCP data plane), and their bytes: process-wide, as the front end renders them.
static SENDFILE_ANSWERS: AtomicU64 = AtomicU64::new(0);
static SENDFILE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Counts one frame read answered with `sendfile`, of `bytes` bytes.
pub fn note_sendfile_answer(bytes: u64) {
    SENDFILE_ANSWERS.fetch_add(1, Ordering::Relaxed);
    SENDFILE_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Frame reads answered with `sendfile` so far, and their bytes.
pub fn sendfile_answers() -> (u64, u64) {
    (
        SENDFILE_ANSWERS.load(Ordering::Relaxed),
        SENDFILE_BYTES.load(Ordering::Relaxed),
    )
}

/// Counters of one data-plane backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataPlaneStats {
    /// Transfers attempted.
    pub transfers: u64,
    /// Payload bytes received into pooled buffers.
    pub bytes_in: u64,
    /// Payload bytes sent.
    pub bytes_out: u64,
    /// Transfers that failed, for any reason (timeouts included).
    pub errors: u64,
    pub timeouts: u64,
    /// Data connections established (handshake done).
    pub connects: u64,
    pub connect_failures: u64,
    /// Transfers refused at once because their peer was marked down.
    pub fast_failures: u64,
    /// Transfers retried on a fresh connection after a reused one turned out dead.
    pub retries: u64,
}

/// Upper bounds (seconds) of the transfer latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0,
];

/// One backend's figures for one peer (a data plane's `peer_stats`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerSnapshot {
    pub backend: &'static str,
    pub peer: String,
    /// Shard reads that completed, and their bytes (received).
    pub reads: u64,
    pub read_bytes: u64,
    /// Appends that completed, and their bytes (sent).
    pub appends: u64,
    pub append_bytes: u64,
    pub connects: u64,
    pub reconnects: u64,
    pub fallbacks: u64,
    /// Transfers the peer shed (busy) to TCP.
    pub shed: u64,
    pub active_connections: u64,
    /// Failed transfers by error kind.
    pub errors: Vec<(&'static str, u64)>,
    /// Cumulative counts per [`LATENCY_BUCKETS`] bound, then the `+Inf` count (= all transfers).
    pub latency_buckets: Vec<u64>,
    pub latency_sum_seconds: f64,
}

/// Counters of S3 over RDMA to clients: counted by the node's client plane (`quarry-net`),
/// rendered by the front end (`quarry_s3_rdma_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientRdmaFigures {
    /// Connections open now.
    pub connections: u64,
    pub connects_total: u64,
    pub gets_total: u64,
    pub puts_total: u64,
    /// Bytes RDMA-written into clients' buffers.
    pub bytes_out: u64,
    /// Bytes RDMA-read from clients' buffers.
    pub bytes_in: u64,
    /// GET bytes copied into a staging buffer first (not in registered memory).
    pub copied_bytes: u64,
    /// Transfers that failed (queue pair errors, timeouts, clients gone).
    pub errors_total: u64,
}
