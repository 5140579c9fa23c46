//! `/metrics`: the server's counters in the Prometheus text exposition format (version 0.0.4).
//!
//! Per S3 operation: requests by HTTP status, requests the client abandoned before the answer,
//! bytes received and sent, and a latency histogram (whole request, body streaming included).
//! From the object layer ([`quarry_object::ObjectLayer::stats`]): drives online and offline, the
//! heal queue, healed objects, and the bytes the GET path copies.
//!
//! Recording is lock-free: each operation's counters are atomics in a slot found by a short scan
//! of a fixed table; a slot is claimed once, the first time its operation is seen (operations are
//! named by the router, so new endpoints need no change here).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::StatusCode;
use quarry_object::LayerStats;

/// Who may read `/metrics`. It names every drive path and peer and its figures describe the
/// load, so by default nobody may: access is a bearer token (as MinIO's Prometheus endpoint
/// takes one) or, as an explicit choice, anyone.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum MetricsAccess {
    /// Refused (403) with a message naming the two settings that open it.
    #[default]
    Closed,
    /// Requests with `Authorization: Bearer <token>`; compared in constant time.
    Bearer(String),
    /// Anyone who can reach the port (`--metrics-public`).
    Public,
}

impl std::fmt::Debug for MetricsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MetricsAccess::Closed => "Closed",
            MetricsAccess::Bearer(_) => "Bearer(<redacted>)",
            MetricsAccess::Public => "Public",
        })
    }
}

impl MetricsAccess {
    /// Whether a request with these headers may read the metrics; the refusal otherwise.
    pub(crate) fn check(&self, headers: &http::HeaderMap) -> Result<(), crate::error::S3Error> {
        use crate::error::{S3Error, S3ErrorCode};
        use subtle::ConstantTimeEq as _;
        let token = match self {
            MetricsAccess::Public => return Ok(()),
            MetricsAccess::Closed => {
                return Err(S3Error::new(
                    S3ErrorCode::AccessDenied,
                    "Metrics are not open on this server: start it with --metrics-token                      (QUARRY_METRICS_TOKEN) and send Authorization: Bearer <token>, or with                      --metrics-public (QUARRY_METRICS_PUBLIC=true) for anonymous access.",
                ))
            }
            MetricsAccess::Bearer(token) => token,
        };
        let sent = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer"))
            .map(|t| t.trim_ascii())
            .filter(|t| !t.is_empty());
        match sent {
            Some(sent) if bool::from(sent.ct_eq(token.as_bytes())) => Ok(()),
            Some(_) => Err(S3Error::new(
                S3ErrorCode::AccessDenied,
                "The metrics bearer token is not valid.",
            )),
            None => Err(S3Error::new(
                S3ErrorCode::AccessDenied,
                "Metrics need Authorization: Bearer <token> (the server's --metrics-token).",
            )),
        }
    }
}

/// A series: name, type, help, and how to read it from one item's figures.
type Series<T> = (&'static str, &'static str, &'static str, fn(&T) -> u64);

/// Distinct operation names tracked; later ones are counted as `Other`.
const MAX_OPS: usize = 96;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// HTTP statuses 100..=599, one counter each.
const STATUS_MIN: u16 = 100;
const STATUSES: usize = 500;

/// The operation of a request that never got as far as routing (a malformed URI, say).
pub(crate) const UNROUTED: &str = "Unrouted";

struct OpCounters {
    name: String,
    by_status: Box<[AtomicU64]>,
    unanswered: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// Not cumulative: `buckets[i]` counts requests in `(BUCKETS[i-1], BUCKETS[i]]`; the last
    /// one counts those above every bound.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    duration_us: AtomicU64,
    count: AtomicU64,
}

impl OpCounters {
    fn new(name: &str) -> OpCounters {
        OpCounters {
            name: name.to_owned(),
            by_status: (0..STATUSES).map(|_| AtomicU64::new(0)).collect(),
            unanswered: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            buckets: Default::default(),
            duration_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

/// The front end's request counters.
pub struct Metrics {
    /// The lifecycle worker's counters.
    pub(crate) lifecycle: Arc<crate::lifecycle_worker::LifecycleCounters>,
    /// The charted series of the last minutes (admin `metrics/history`).
    pub(crate) history: crate::metrics_history::MetricsHistory,
    ops: Box<[OnceLock<OpCounters>]>,
    other: OpCounters,
    start: Instant,
    /// S3 over RDMA, when the node serves it.
    pub(crate) client_rdma: OnceLock<Arc<dyn crate::rdma::ClientRdma>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            lifecycle: Arc::default(),
            history: Default::default(),
            ops: (0..MAX_OPS).map(|_| OnceLock::new()).collect(),
            other: OpCounters::new("Other"),
            start: Instant::now(),
            client_rdma: OnceLock::new(),
        }
    }
}

/// One finished request, as the metrics see it.
pub(crate) struct Observation<'a> {
    pub operation: &'a str,
    /// `None` when the client went away before the response was given.
    pub status: Option<StatusCode>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration: Duration,
}

impl Metrics {
    fn op(&self, name: &str) -> &OpCounters {
        let name = if name.is_empty() { UNROUTED } else { name };
        for slot in self.ops.iter() {
            let c = slot.get_or_init(|| OpCounters::new(name));
            if c.name == name {
                return c;
            }
        }
        &self.other
    }

    /// Records a finished request.
    pub(crate) fn observe(&self, o: Observation<'_>) {
        let c = self.op(o.operation);
        match o.status {
            Some(s) => {
                let i = usize::from(s.as_u16().saturating_sub(STATUS_MIN));
                if let Some(n) = c.by_status.get(i) {
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                c.unanswered.fetch_add(1, Ordering::Relaxed);
            }
        }
        c.bytes_in.fetch_add(o.bytes_in, Ordering::Relaxed);
        c.bytes_out.fetch_add(o.bytes_out, Ordering::Relaxed);
        let secs = o.duration.as_secs_f64();
        let b = BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(BUCKETS.len());
        c.buckets[b].fetch_add(1, Ordering::Relaxed);
        let us = o.duration.as_micros().min(u128::from(u64::MAX)) as u64;
        c.duration_us.fetch_add(us, Ordering::Relaxed);
        c.count.fetch_add(1, Ordering::Relaxed);
    }

    fn seen(&self) -> impl Iterator<Item = &OpCounters> {
        self.ops
            .iter()
            .filter_map(|s| s.get())
            .chain(std::iter::once(&self.other))
            .filter(|c| c.count.load(Ordering::Relaxed) > 0)
    }

    /// The exposition text: these counters and the object layer's `layer` figures.
    pub fn render(&self, layer: &LayerStats) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);

        header(
            &mut out,
            "quarry_build_info",
            "gauge",
            "The running Quarry version (always 1).",
        );
        let _ = writeln!(
            out,
            "quarry_build_info{{version=\"{}\"}} 1",
            escape(env!("CARGO_PKG_VERSION"))
        );
        header(
            &mut out,
            "quarry_uptime_seconds",
            "gauge",
            "Seconds since the S3 front end started.",
        );
        let _ = writeln!(
            out,
            "quarry_uptime_seconds {:.3}",
            self.start.elapsed().as_secs_f64()
        );

        header(
            &mut out,
            "quarry_s3_requests_total",
            "counter",
            "S3 requests answered, by operation and HTTP status code.",
        );
        for c in self.seen() {
            for (i, n) in c.by_status.iter().enumerate() {
                let n = load(n);
                if n > 0 {
                    let code = STATUS_MIN as usize + i;
                    let _ = writeln!(
                        out,
                        "quarry_s3_requests_total{{op=\"{}\",code=\"{code}\"}} {n}",
                        escape(&c.name)
                    );
                }
            }
        }
        header(
            &mut out,
            "quarry_s3_requests_unanswered_total",
            "counter",
            "S3 requests whose client went away before the response, by operation.",
        );
        for c in self.seen() {
            let _ = writeln!(
                out,
                "quarry_s3_requests_unanswered_total{{op=\"{}\"}} {}",
                escape(&c.name),
                load(&c.unanswered)
            );
        }
        header(
            &mut out,
            "quarry_s3_received_bytes_total",
            "counter",
            "Request body bytes received, by operation.",
        );
        for c in self.seen() {
            let _ = writeln!(
                out,
                "quarry_s3_received_bytes_total{{op=\"{}\"}} {}",
                escape(&c.name),
                load(&c.bytes_in)
            );
        }
        header(
            &mut out,
            "quarry_s3_sent_bytes_total",
            "counter",
            "Response body bytes sent, by operation.",
        );
        for c in self.seen() {
            let _ = writeln!(
                out,
                "quarry_s3_sent_bytes_total{{op=\"{}\"}} {}",
                escape(&c.name),
                load(&c.bytes_out)
            );
        }
        header(
            &mut out,
            "quarry_s3_request_duration_seconds",
            "histogram",
            "Time from the request's arrival to the end of its response body, by operation.",
        );
        for c in self.seen() {
            let op = escape(&c.name);
            let mut cumulative = 0u64;
            for (i, le) in BUCKETS.iter().enumerate() {
                cumulative += load(&c.buckets[i]);
                let _ = writeln!(
                    out,
                    "quarry_s3_request_duration_seconds_bucket{{op=\"{op}\",le=\"{le}\"}} {cumulative}"
                );
            }
            cumulative += load(&c.buckets[BUCKETS.len()]);
            let _ = writeln!(
                out,
                "quarry_s3_request_duration_seconds_bucket{{op=\"{op}\",le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "quarry_s3_request_duration_seconds_sum{{op=\"{op}\"}} {:.6}",
                load(&c.duration_us) as f64 / 1e6
            );
            // The count is the +Inf bucket, read once, so the two always agree in one scrape.
            let _ = writeln!(
                out,
                "quarry_s3_request_duration_seconds_count{{op=\"{op}\"}} {cumulative}"
            );
        }

        if !layer.data_planes.is_empty() {
            let series: [Series<quarry_object::DataPlaneFigures>; 5] = [
                (
                    "quarry_dataplane_transfers_total",
                    "counter",
                    "Shard transfers this node started, by data-plane backend.",
                    |d| d.transfers,
                ),
                (
                    "quarry_dataplane_received_bytes_total",
                    "counter",
                    "Shard bytes received into pooled buffers, by backend.",
                    |d| d.bytes_in,
                ),
                (
                    "quarry_dataplane_sent_bytes_total",
                    "counter",
                    "Shard bytes sent, by backend.",
                    |d| d.bytes_out,
                ),
                (
                    "quarry_dataplane_errors_total",
                    "counter",
                    "Shard transfers that failed (timeouts included), by backend.",
                    |d| d.errors,
                ),
                (
                    "quarry_dataplane_timeouts_total",
                    "counter",
                    "Shard transfers that timed out, by backend.",
                    |d| d.timeouts,
                ),
            ];
            for (name, kind, help, get) in series {
                header(&mut out, name, kind, help);
                for d in &layer.data_planes {
                    let _ = writeln!(
                        out,
                        "{name}{{backend=\"{}\"}} {}",
                        escape(&d.backend),
                        get(d)
                    );
                }
            }
        }

        render_peers(&mut out, layer);
        render_pools(&mut out, layer);
        render_list_cache(&mut out, &layer.list_cache);
        render_retired(&mut out, &layer.retired);

        let online = layer.drives.iter().filter(|d| d.online).count();
        header(
            &mut out,
            "quarry_drives",
            "gauge",
            "Drives of this node by state.",
        );
        let _ = writeln!(out, "quarry_drives{{state=\"online\"}} {online}");
        let _ = writeln!(
            out,
            "quarry_drives{{state=\"offline\"}} {}",
            layer.drives.len() - online
        );
        header(
            &mut out,
            "quarry_drive_online",
            "gauge",
            "1 when the drive answered just now, 0 when it did not.",
        );
        for d in &layer.drives {
            let _ = writeln!(
                out,
                "quarry_drive_online{{drive=\"{}\"}} {}",
                escape(&d.endpoint),
                u8::from(d.online)
            );
        }
        let jobs = &layer.heal_jobs;
        let gauges: [(&str, &str, &str, u64); 24] = [
            (
                "quarry_heal_queue_length",
                "gauge",
                "Objects waiting for the heal worker.",
                layer.heal_queue_len,
            ),
            (
                "quarry_heal_queued_total",
                "counter",
                "Objects put on the heal queue.",
                layer.heal_queued_total,
            ),
            (
                "quarry_heal_dropped_total",
                "counter",
                "Heal requests dropped because the queue was full (queued again on a later read).",
                layer.heal_dropped_total,
            ),
            (
                "quarry_healed_objects_total",
                "counter",
                "Objects the heal worker rewrote on at least one drive.",
                layer.healed_objects_total,
            ),
            (
                "quarry_heal_failed_total",
                "counter",
                "Heals that failed or left a drive unhealed.",
                layer.heal_failed_total,
            ),
            (
                "quarry_heal_retry_length",
                "gauge",
                "Heals waiting for a retry because a drive could not be reached.",
                layer.heal_retry_len,
            ),
            (
                "quarry_heal_retried_total",
                "counter",
                "Failed heal attempts put on the retry list.",
                layer.heal_retried_total,
            ),
            (
                "quarry_heal_retry_dropped_total",
                "counter",
                "Heals dropped because the retry list was full (the scanner finds them later).",
                layer.heal_retry_dropped_total,
            ),
            (
                "quarry_heal_given_up_total",
                "counter",
                "Heals given up after their last attempt.",
                layer.heal_given_up_total,
            ),
            (
                "quarry_scanner_objects_total",
                "counter",
                "Objects the background scanner checked.",
                layer.scan.objects_total,
            ),
            (
                "quarry_scanner_healed_total",
                "counter",
                "Objects the background scanner rewrote on at least one drive.",
                layer.scan.healed_total,
            ),
            (
                "quarry_scanner_failed_total",
                "counter",
                "Objects the background scanner could not check or heal on every drive.",
                layer.scan.failed_total,
            ),
            (
                "quarry_scanner_passes_total",
                "counter",
                "Full passes of the background scanner.",
                layer.scan.passes_total,
            ),
            (
                "quarry_heal_jobs_running",
                "gauge",
                "Heal jobs of this node not yet finished.",
                jobs.running,
            ),
            (
                "quarry_heal_jobs_started_total",
                "counter",
                "Heal jobs started on this node.",
                jobs.started_total,
            ),
            (
                "quarry_heal_job_objects_scanned_total",
                "counter",
                "Objects heal jobs checked.",
                jobs.objects_scanned_total,
            ),
            (
                "quarry_heal_job_objects_healed_total",
                "counter",
                "Objects heal jobs rewrote on at least one drive.",
                jobs.objects_healed_total,
            ),
            (
                "quarry_heal_job_objects_failed_total",
                "counter",
                "Objects heal jobs could not check or heal on every drive.",
                jobs.objects_failed_total,
            ),
            (
                "quarry_heal_job_bytes_scanned_total",
                "counter",
                "Bytes of the objects heal jobs checked (latest versions).",
                jobs.bytes_scanned_total,
            ),
            (
                "quarry_heal_job_bytes_healed_total",
                "counter",
                "Bytes of the objects heal jobs rewrote (latest versions).",
                jobs.bytes_healed_total,
            ),
            (
                "quarry_heal_job_verify_missing_total",
                "counter",
                "Drive copies a heal job's verification still had to rewrite after its healing pass (0 when heals complete).",
                jobs.verify_missing_total,
            ),
            (
                "quarry_get_copied_bytes_total",
                "counter",
                "Shard bytes a GET got back in a buffer other than the one it read them into (copied); zero on the zero-copy path.",
                layer.get_copied_bytes_total,
            ),
            (
                "quarry_get_decoded_bytes_total",
                "counter",
                "Bytes of data chunks degraded GETs rebuilt from parity (decoded in place, not copied).",
                layer.get_decoded_bytes_total,
            ),
            (
                "quarry_shard_frame_rereads_total",
                "counter",
                "Shard frames from another node read again, every byte authenticated, after failing their bitrot check (bytes changed on the network, or a damaged copy).",
                layer.frame_rereads_total,
            ),
        ];
        for (name, kind, help, value) in gauges {
            header(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        render_drive_heals(&mut out, layer);
        self.render_lifecycle(&mut out);
        if let Some(plane) = self.client_rdma.get() {
            render_client_rdma(&mut out, &plane.figures());
        }
        out
    }

    /// The lifecycle worker's counters (this node's share).
    fn render_lifecycle(&self, out: &mut String) {
        let lc = &self.lifecycle;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        let figures: [(&str, &str, &str, String); 10] = [
            ("quarry_lifecycle_objects_expired_total", "counter", "Current versions the lifecycle rules expired (a delete marker added, or deleted in an unversioned bucket).", load(&lc.objects_expired)),
            ("quarry_lifecycle_versions_expired_total", "counter", "Noncurrent versions the lifecycle rules removed.", load(&lc.versions_expired)),
            ("quarry_lifecycle_delete_markers_removed_total", "counter", "Delete markers the lifecycle rules removed.", load(&lc.markers_removed)),
            ("quarry_lifecycle_uploads_aborted_total", "counter", "Incomplete multipart uploads the lifecycle rules aborted.", load(&lc.uploads_aborted)),
            ("quarry_lifecycle_bytes_freed_total", "counter", "Bytes of the versions the lifecycle rules removed.", load(&lc.bytes_freed)),
            ("quarry_lifecycle_locked_skipped_total", "counter", "Versions due under a lifecycle rule that object lock (retention, legal hold) kept.", load(&lc.skipped_locked)),
            ("quarry_lifecycle_errors_total", "counter", "Lifecycle actions or listings that failed (retried on the next pass).", load(&lc.errors)),
            ("quarry_lifecycle_passes_total", "counter", "Lifecycle passes completed on this node.", load(&lc.passes)),
            ("quarry_lifecycle_last_pass_timestamp_seconds", "gauge", "When the last lifecycle pass ended (Unix time; 0: none yet).", load(&lc.last_pass_end_secs)),
            ("quarry_lifecycle_last_pass_duration_seconds", "gauge", "How long the last lifecycle pass took.", format!("{:.3}", lc.last_pass_millis.load(Ordering::Relaxed) as f64 / 1000.0)),
        ];
        for (name, kind, help, value) in figures {
            header(out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
    }
}

/// Heals of replaced drives of this node: the phase (one series per phase, 1 for the current
/// one) and the checkpoint's figures, per drive.
fn render_drive_heals(out: &mut String, layer: &LayerStats) {
    use quarry_object::drive_heal::{DriveHealPhase, DriveHealStatus};
    if layer.drive_heals.is_empty() {
        return;
    }
    let l = |h: &DriveHealStatus| format!("drive=\"{}\"", escape(&h.endpoint));
    header(
        out,
        "quarry_drive_heal_phase",
        "gauge",
        "A replaced drive's heal, by phase (healing: first walk; verifying: the walk that must find nothing; done): 1 for the phase it is in.",
    );
    for h in &layer.drive_heals {
        for (name, phase) in [
            ("healing", DriveHealPhase::Healing),
            ("verifying", DriveHealPhase::Verifying),
            ("done", DriveHealPhase::Done),
        ] {
            let _ = writeln!(
                out,
                "quarry_drive_heal_phase{{{},phase=\"{name}\"}} {}",
                l(h),
                u8::from(h.mark.phase == phase)
            );
        }
    }
    let series: [Series<DriveHealStatus>; 8] = [
        ("quarry_drive_heal_objects_scanned", "gauge", "Objects a replaced drive's heal checked (healing phase, across restarts).", |h| h.mark.scanned),
        ("quarry_drive_heal_objects_healed", "gauge", "Objects a replaced drive's heal rewrote.", |h| h.mark.healed),
        ("quarry_drive_heal_objects_failed", "gauge", "Objects a replaced drive's heal could not rewrite (retried by its verify pass).", |h| h.mark.failed),
        ("quarry_drive_heal_bytes_scanned", "gauge", "Bytes of the latest versions a replaced drive's heal checked.", |h| h.mark.bytes),
        ("quarry_drive_heal_buckets_done", "gauge", "Buckets a replaced drive's heal finished in its current phase.", |h| h.mark.buckets_done.len() as u64),
        ("quarry_drive_heal_resumes", "gauge", "Times a replaced drive's heal resumed from its checkpoint after a restart.", |h| h.mark.resumes),
        ("quarry_drive_heal_verify_missing", "gauge", "Drive copies the last verify pass of a replaced drive's heal still had to rewrite (0 when it is done).", |h| h.mark.verify_missing),
        ("quarry_drive_heal_updated_timestamp_seconds", "gauge", "When a replaced drive's heal last moved (Unix time).", |h| (h.mark.updated_ns.max(0) / 1_000_000_000) as u64),
    ];
    for (name, kind, help, get) in series {
        header(out, name, kind, help);
        for h in &layer.drive_heals {
            let _ = writeln!(out, "{name}{{{}}} {}", l(h), get(h));
        }
    }
}

/// Per backend and peer: transfers, bytes, errors by kind, latency, connections.
fn render_peers(out: &mut String, layer: &LayerStats) {
    let peers = &layer.data_peers;
    if peers.is_empty() {
        return;
    }
    let l = |p: &quarry_object::PeerSnapshot| {
        format!(
            "backend=\"{}\",peer=\"{}\"",
            escape(p.backend),
            escape(&p.peer)
        )
    };
    header(
        out,
        "quarry_dataplane_peer_transfers_total",
        "counter",
        "Shard transfers completed with a peer, by backend and operation (read: a GET chunk received; append: a PUT chunk sent).",
    );
    for p in peers {
        let _ = writeln!(
            out,
            "quarry_dataplane_peer_transfers_total{{{},op=\"read\"}} {}",
            l(p),
            p.reads
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_peer_transfers_total{{{},op=\"append\"}} {}",
            l(p),
            p.appends
        );
    }
    header(
        out,
        "quarry_dataplane_peer_bytes_total",
        "counter",
        "Shard payload bytes moved with a peer, by backend and direction.",
    );
    for p in peers {
        let _ = writeln!(
            out,
            "quarry_dataplane_peer_bytes_total{{{},direction=\"received\"}} {}",
            l(p),
            p.read_bytes
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_peer_bytes_total{{{},direction=\"sent\"}} {}",
            l(p),
            p.append_bytes
        );
    }
    header(
        out,
        "quarry_dataplane_peer_errors_total",
        "counter",
        "Failed shard transfers with a peer, by backend and kind of error.",
    );
    for p in peers {
        for (kind, n) in &p.errors {
            let _ = writeln!(
                out,
                "quarry_dataplane_peer_errors_total{{{},kind=\"{}\"}} {n}",
                l(p),
                escape(kind)
            );
        }
    }
    header(
        out,
        "quarry_dataplane_peer_transfer_duration_seconds",
        "histogram",
        "Time of completed shard transfers with a peer, by backend.",
    );
    for p in peers {
        for (bound, count) in quarry_object::LATENCY_BUCKETS
            .iter()
            .zip(&p.latency_buckets)
        {
            let _ = writeln!(out, "quarry_dataplane_peer_transfer_duration_seconds_bucket{{{},le=\"{bound}\"}} {count}", l(p));
        }
        let total = p.latency_buckets.last().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "quarry_dataplane_peer_transfer_duration_seconds_bucket{{{},le=\"+Inf\"}} {total}",
            l(p)
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_peer_transfer_duration_seconds_sum{{{}}} {:.6}",
            l(p),
            p.latency_sum_seconds
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_peer_transfer_duration_seconds_count{{{}}} {total}",
            l(p)
        );
    }
    let gauges: [Series<quarry_object::PeerSnapshot>; 5] = [
        (
            "quarry_dataplane_peer_connections",
            "gauge",
            "Data connections (queue pairs, for verbs) open to a peer now.",
            |p| p.active_connections,
        ),
        (
            "quarry_dataplane_peer_connects_total",
            "counter",
            "Data connections (queue pairs) made to a peer.",
            |p| p.connects,
        ),
        (
            "quarry_dataplane_peer_reconnects_total",
            "counter",
            "Queue pairs to a peer rebuilt after one failed (verbs).",
            |p| p.reconnects,
        ),
        (
            "quarry_dataplane_peer_fallbacks_total",
            "counter",
            "Times a peer was switched from verbs to TCP (QUARRY_RDMA=auto).",
            |p| p.fallbacks,
        ),
        (
            "quarry_dataplane_peer_shed_total",
            "counter",
            "Transfers a busy peer (no registered buffer free) shed from verbs to TCP.",
            |p| p.shed,
        ),
    ];
    for (name, kind, help, get) in gauges {
        header(out, name, kind, help);
        for p in peers {
            let _ = writeln!(out, "{name}{{{}}} {}", l(p), get(p));
        }
    }
}

/// The data path's buffer pools, and what this node's verbs holder side served.
fn render_pools(out: &mut String, layer: &LayerStats) {
    if !layer.pools.is_empty() {
        header(
            out,
            "quarry_buffer_pool_buffers",
            "gauge",
            "Buffers of a data-path pool, by state (capacity, in_use).",
        );
        for (name, p) in &layer.pools {
            let _ = writeln!(
                out,
                "quarry_buffer_pool_buffers{{pool=\"{name}\",state=\"capacity\"}} {}",
                p.capacity
            );
            let _ = writeln!(
                out,
                "quarry_buffer_pool_buffers{{pool=\"{name}\",state=\"in_use\"}} {}",
                p.in_use
            );
        }
        let series: [Series<quarry_object::BufPoolStats>; 3] = [
            (
                "quarry_buffer_pool_registered_bytes",
                "gauge",
                "Bytes of a pool registered (pinned) with the RDMA device; 0 without verbs.",
                |p| p.registered_bytes,
            ),
            (
                "quarry_buffer_pool_heap_fallbacks_total",
                "counter",
                "Buffers taken from the heap because the pool was empty (not registered: such transfers go over TCP).",
                |p| p.heap_fallbacks,
            ),
            (
                "quarry_buffer_pool_waits_total",
                "counter",
                "Requests for a buffer that waited for one to come back.",
                |p| p.waits,
            ),
        ];
        for (name, kind, help, get) in series {
            header(out, name, kind, help);
            for (pool, p) in &layer.pools {
                let _ = writeln!(out, "{name}{{pool=\"{pool}\"}} {}", get(p));
            }
        }
    }
    if !layer.data_planes.is_empty() {
        let (answers, bytes) = quarry_buf::figures::sendfile_answers();
        header(
            out,
            "quarry_dataplane_holder_sendfile_total",
            "counter",
            "Peers' GET frame reads this node's holder side answered from the page cache with sendfile (TCP data plane without TLS; the others are read into a buffer first).",
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_holder_sendfile_total{{backend=\"tcp\"}} {answers}"
        );
        header(
            out,
            "quarry_dataplane_holder_sendfile_bytes_total",
            "counter",
            "Bytes of the frame reads answered with sendfile.",
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_holder_sendfile_bytes_total{{backend=\"tcp\"}} {bytes}"
        );
    }
    if let Some(h) = &layer.holder {
        header(
            out,
            "quarry_dataplane_holder_bytes_total",
            "counter",
            "Shard bytes this node's verbs holder side moved for its peers (written: GET chunks RDMA-WRITTEN to them; read: PUT chunks RDMA-READ from them).",
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_holder_bytes_total{{backend=\"verbs\",direction=\"written\"}} {}",
            h.bytes_out
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_holder_bytes_total{{backend=\"verbs\",direction=\"read\"}} {}",
            h.bytes_in
        );
        header(
            out,
            "quarry_dataplane_holder_connections_total",
            "counter",
            "Verbs connections this node accepted from peers.",
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_holder_connections_total{{backend=\"verbs\"}} {}",
            h.connects
        );
        header(
            out,
            "quarry_dataplane_holder_errors_total",
            "counter",
            "Peers' verbs requests this node's holder side failed.",
        );
        let _ = writeln!(
            out,
            "quarry_dataplane_holder_errors_total{{backend=\"verbs\"}} {}",
            h.errors
        );
    }
}

/// The client RDMA plane's figures: object bytes and operations over RDMA (the HTTP ones are
/// `quarry_s3_sent_bytes_total` and `quarry_s3_received_bytes_total`).
fn render_client_rdma(out: &mut String, f: &crate::rdma::ClientRdmaFigures) {
    let series = [
        ("quarry_s3_rdma_connections", "gauge", "Client RDMA connections open.", f.connections),
        ("quarry_s3_rdma_connects_total", "counter", "Client RDMA connections made.", f.connects_total),
        ("quarry_s3_rdma_get_requests_total", "counter", "GETs whose bytes went over RDMA into a client's buffer.", f.gets_total),
        ("quarry_s3_rdma_put_requests_total", "counter", "PUTs and part uploads whose bytes were RDMA-read from a client's buffer.", f.puts_total),
        ("quarry_s3_rdma_sent_bytes_total", "counter", "Object bytes RDMA-written into clients' buffers.", f.bytes_out),
        ("quarry_s3_rdma_received_bytes_total", "counter", "Object bytes RDMA-read from clients' buffers.", f.bytes_in),
        ("quarry_s3_rdma_copied_bytes_total", "counter", "GET bytes copied into a registered staging buffer before their write (not in registered memory already).", f.copied_bytes),
        ("quarry_s3_rdma_errors_total", "counter", "Client RDMA transfers that failed (queue pair errors, timeouts, clients gone).", f.errors_total),
    ];
    render_series(out, &series);
}

/// The data of replaced and deleted versions kept for GETs under way (`quarry_disk`'s retired
/// data dirs).
fn render_retired(out: &mut String, f: &quarry_object::RetiredFigures) {
    let series = [
        (
            "quarry_retired_data_kept_dirs",
            "gauge",
            "Data dirs of replaced or deleted versions kept on this node's drives for GETs under way.",
            f.kept,
        ),
        (
            "quarry_retired_data_kept_bytes",
            "gauge",
            "Bytes of those data dirs (an estimate).",
            f.bytes,
        ),
        (
            "quarry_retired_data_dirs_total",
            "counter",
            "Data dirs of replaced or deleted versions kept for the grace instead of removed at once.",
            f.retired,
        ),
        (
            "quarry_retired_data_over_budget_total",
            "counter",
            "Data dirs of replaced or deleted versions removed before their grace because the drive's budget for them was full (a GET still reading one breaks off).",
            f.over_budget,
        ),
    ];
    render_series(out, &series);
}

/// The kept sorted listings of large directories and objects' metadata (`quarry_disk`'s list
/// caches).
fn render_list_cache(out: &mut String, f: &quarry_object::ListCacheFigures) {
    let series = [
        (
            "quarry_list_cache_hits_total",
            "counter",
            "Listing pages that found a large directory's sorted listing kept.",
            f.hits,
        ),
        (
            "quarry_list_cache_misses_total",
            "counter",
            "Reads and sorts of a large directory (not kept, or changed since).",
            f.misses,
        ),
        (
            "quarry_list_cache_listings",
            "gauge",
            "Sorted listings of large directories kept.",
            f.listings,
        ),
        (
            "quarry_list_cache_bytes",
            "gauge",
            "Bytes of the kept listings.",
            f.bytes,
        ),
        (
            "quarry_list_meta_cache_hits_total",
            "counter",
            "Objects whose metadata a listing found kept (their directory unchanged).",
            f.meta_hits,
        ),
        (
            "quarry_list_meta_cache_unchecked_total",
            "counter",
            "Of the hits, those taken without a stat of the object's directory (no change made to the key since it was last checked).",
            f.meta_unchecked,
        ),
        (
            "quarry_list_meta_cache_misses_total",
            "counter",
            "Objects whose metadata a listing read from its file (not kept, or changed since).",
            f.meta_misses,
        ),
        (
            "quarry_list_meta_cache_entries",
            "gauge",
            "Objects' metadata kept for listings.",
            f.metas,
        ),
        (
            "quarry_list_meta_cache_bytes",
            "gauge",
            "Bytes of the kept metadata (an estimate of their heap).",
            f.meta_bytes,
        ),
    ];
    render_series(out, &series);
}

/// Unlabelled series, each with its header: `(name, type, help, value)`.
fn render_series(out: &mut String, series: &[(&str, &str, &str, u64)]) {
    for (name, kind, help, value) in series {
        header(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value with `\`, `"` and newlines escaped, as the format requires.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The `/metrics` response.
pub(crate) fn response(text: String) -> Response {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_object::DriveState;

    fn obs(op: &str, status: Option<u16>, ms: u64) -> Observation<'_> {
        Observation {
            operation: op,
            status: status.map(|s| StatusCode::from_u16(s).unwrap()),
            bytes_in: 10,
            bytes_out: 20,
            duration: Duration::from_millis(ms),
        }
    }

    #[test]
    fn counters_histograms_and_layer_figures_render() {
        let m = Metrics::default();
        m.observe(obs("GetObject", Some(200), 3));
        m.observe(obs("GetObject", Some(200), 700));
        m.observe(obs("GetObject", Some(404), 100_000));
        m.observe(obs("PutObject", None, 1));
        m.observe(obs("", Some(400), 1));
        m.observe(obs("Weird\"Op\\", Some(501), 1));
        let layer = LayerStats {
            drives: vec![
                DriveState {
                    endpoint: "/d1".into(),
                    online: true,
                },
                DriveState {
                    endpoint: "/d2".into(),
                    online: false,
                },
            ],
            heal_queue_len: 3,
            healed_objects_total: 7,
            get_copied_bytes_total: 4096,
            frame_rereads_total: 2,
            data_peers: vec![quarry_object::PeerSnapshot {
                backend: "verbs",
                peer: "10.0.0.2:9000".into(),
                reads: 3,
                read_bytes: 3 << 20,
                appends: 1,
                append_bytes: 1 << 20,
                connects: 2,
                reconnects: 1,
                fallbacks: 0,
                shed: 0,
                active_connections: 2,
                errors: vec![("verbs", 1)],
                latency_buckets: {
                    let mut b = vec![0u64; quarry_object::LATENCY_BUCKETS.len() + 1];
                    for (i, v) in b.iter_mut().enumerate() {
                        *v = if i >= 5 { 4 } else { 0 };
                    }
                    b
                },
                latency_sum_seconds: 0.01,
            }],
            pools: vec![(
                "data",
                quarry_object::BufPoolStats {
                    capacity: 192,
                    in_use: 5,
                    registered_bytes: 192 << 20,
                    ..Default::default()
                },
            )],
            holder: Some(quarry_object::DataPlaneStats {
                bytes_out: 77,
                bytes_in: 55,
                connects: 3,
                ..Default::default()
            }),
            drive_heals: vec![quarry_object::drive_heal::DriveHealStatus {
                endpoint: "/d2".into(),
                mark: quarry_object::drive_heal::HealingMark {
                    scanned: 40,
                    healed: 39,
                    failed: 1,
                    ..quarry_object::drive_heal::HealingMark::new(0, 1)
                },
            }],
            retired: quarry_object::RetiredFigures {
                kept: 2,
                bytes: 3 << 20,
                retired: 9,
                over_budget: 1,
            },
            ..Default::default()
        };
        let text = m.render(&layer);
        for want in [
            "quarry_s3_requests_total{op=\"GetObject\",code=\"200\"} 2",
            "quarry_s3_requests_total{op=\"GetObject\",code=\"404\"} 1",
            "quarry_s3_requests_total{op=\"Unrouted\",code=\"400\"} 1",
            "quarry_s3_requests_total{op=\"Weird\\\"Op\\\\\",code=\"501\"} 1",
            "quarry_s3_requests_unanswered_total{op=\"PutObject\"} 1",
            "quarry_s3_received_bytes_total{op=\"GetObject\"} 30",
            "quarry_s3_sent_bytes_total{op=\"GetObject\"} 60",
            "quarry_s3_request_duration_seconds_bucket{op=\"GetObject\",le=\"0.005\"} 1",
            "quarry_s3_request_duration_seconds_bucket{op=\"GetObject\",le=\"1\"} 2",
            "quarry_s3_request_duration_seconds_bucket{op=\"GetObject\",le=\"60\"} 2",
            "quarry_s3_request_duration_seconds_bucket{op=\"GetObject\",le=\"+Inf\"} 3",
            "quarry_s3_request_duration_seconds_count{op=\"GetObject\"} 3",
            "quarry_s3_request_duration_seconds_sum{op=\"GetObject\"} 100.703000",
            "quarry_drives{state=\"online\"} 1",
            "quarry_drives{state=\"offline\"} 1",
            "quarry_drive_online{drive=\"/d2\"} 0",
            "quarry_heal_queue_length 3",
            "quarry_drive_heal_phase{drive=\"/d2\",phase=\"healing\"} 1",
            "quarry_drive_heal_phase{drive=\"/d2\",phase=\"done\"} 0",
            "quarry_drive_heal_objects_scanned{drive=\"/d2\"} 40",
            "quarry_drive_heal_objects_failed{drive=\"/d2\"} 1",
            "quarry_healed_objects_total 7",
            "quarry_get_copied_bytes_total 4096",
            "quarry_shard_frame_rereads_total 2",
            "quarry_dataplane_peer_transfers_total{backend=\"verbs\",peer=\"10.0.0.2:9000\",op=\"read\"} 3",
            "quarry_dataplane_peer_bytes_total{backend=\"verbs\",peer=\"10.0.0.2:9000\",direction=\"sent\"} 1048576",
            "quarry_dataplane_peer_errors_total{backend=\"verbs\",peer=\"10.0.0.2:9000\",kind=\"verbs\"} 1",
            "quarry_dataplane_peer_transfer_duration_seconds_bucket{backend=\"verbs\",peer=\"10.0.0.2:9000\",le=\"+Inf\"} 4",
            "quarry_dataplane_peer_transfer_duration_seconds_count{backend=\"verbs\",peer=\"10.0.0.2:9000\"} 4",
            "quarry_dataplane_peer_connections{backend=\"verbs\",peer=\"10.0.0.2:9000\"} 2",
            "quarry_dataplane_peer_reconnects_total{backend=\"verbs\",peer=\"10.0.0.2:9000\"} 1",
            "quarry_buffer_pool_buffers{pool=\"data\",state=\"in_use\"} 5",
            "quarry_buffer_pool_registered_bytes{pool=\"data\"} 201326592",
            "quarry_dataplane_holder_bytes_total{backend=\"verbs\",direction=\"written\"} 77",
            "quarry_dataplane_holder_bytes_total{backend=\"verbs\",direction=\"read\"} 55",
            "quarry_retired_data_kept_dirs 2",
            "quarry_retired_data_kept_bytes 3145728",
            "quarry_retired_data_dirs_total 9",
            "quarry_retired_data_over_budget_total 1",
        ] {
            assert!(
                text.lines().any(|l| l == want),
                "missing {want:?} in\n{text}"
            );
        }
        // Every TYPE is declared once, before its samples.
        let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
        let mut dedup = types.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(types.len(), dedup.len());
    }

    #[test]
    fn operations_beyond_the_table_go_to_other() {
        let m = Metrics::default();
        for i in 0..MAX_OPS + 5 {
            m.observe(obs(&format!("Op{i}"), Some(200), 1));
        }
        let text = m.render(&LayerStats::default());
        assert!(text.contains("quarry_s3_requests_total{op=\"Op0\",code=\"200\"} 1"));
        assert!(text.contains("quarry_s3_requests_total{op=\"Other\",code=\"200\"} 5"));
    }
}
