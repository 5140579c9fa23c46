//! The last minutes of the metrics the console's charts draw, kept in memory so the cluster page
//! opens with history instead of an empty chart (admin call `metrics/history`).
//!
//! A task renders the metrics every [`EVERY`] and keeps the charted series of the last
//! [`KEEP`] samples: requests, bytes, data-plane traffic, GET copies, buffer pools, and the
//! request-duration histogram summed over operations (the charts draw all operations' p50/p99),
//! which keeps a sample to a few KiB. The task holds the service weakly and ends with it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use serde::Serialize;

/// How often a sample is taken.
pub const EVERY: Duration = Duration::from_secs(10);
/// Samples kept: ten minutes.
pub const KEEP: usize = 60;

/// The series kept, by metric name.
const CHARTED: &[&str] = &[
    "quarry_s3_requests_total",
    "quarry_s3_received_bytes_total",
    "quarry_s3_sent_bytes_total",
    "quarry_dataplane_received_bytes_total",
    "quarry_dataplane_sent_bytes_total",
    "quarry_get_copied_bytes_total",
    "quarry_get_decoded_bytes_total",
    "quarry_buffer_pool_buffers",
];
/// Kept summed over every label but `le`.
const HISTOGRAM: &str = "quarry_s3_request_duration_seconds_bucket";

/// One sample: when (Unix ms) and its series in Prometheus text format.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    pub t: i64,
    pub text: String,
}

#[derive(Debug, Default)]
pub struct MetricsHistory {
    samples: Mutex<VecDeque<Sample>>,
}

impl MetricsHistory {
    /// Keeps the charted series of `rendered` (the full metrics text) as the sample at `t`.
    pub fn record(&self, t: i64, rendered: &str) {
        let sample = Sample {
            t,
            text: charted(rendered),
        };
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.push_back(sample);
        while samples.len() > KEEP {
            samples.pop_front();
        }
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> Vec<Sample> {
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.iter().cloned().collect()
    }
}

/// The series of `rendered` that the charts draw; the duration histogram summed by `le`.
pub fn charted(rendered: &str) -> String {
    let mut out = String::new();
    let mut buckets: BTreeMap<u64, (String, f64)> = BTreeMap::new();
    for line in rendered.lines() {
        if line.starts_with('#') {
            continue;
        }
        let name = line.split(['{', ' ']).next().unwrap_or("");
        if CHARTED.contains(&name) {
            out.push_str(line);
            out.push('\n');
        } else if name == HISTOGRAM {
            let Some((le, value)) = bucket_of(line) else {
                continue;
            };
            // `+Inf` parses as infinity; non-negative floats order as their bits do.
            let bound: f64 = le.parse().unwrap_or(f64::INFINITY);
            let entry = buckets
                .entry(bound.to_bits())
                .or_insert_with(|| (le.to_owned(), 0.0));
            entry.1 += value;
        }
    }
    for (le, n) in buckets.values() {
        out.push_str(&format!("{HISTOGRAM}{{le=\"{le}\"}} {n}\n"));
    }
    out
}

/// The `le` label and the value of a histogram bucket line.
fn bucket_of(line: &str) -> Option<(&str, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let le = series.split("le=\"").nth(1)?.split('"').next()?;
    Some((le, value.parse().ok()?))
}

/// Samples the service's metrics every [`EVERY`] until the service is dropped.
pub(crate) fn spawn(state: Weak<crate::server::AppState>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + EVERY, EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(state) = state.upgrade() else { return };
            let layer = state.layer.stats().await;
            let rendered = state.metrics.render(&layer);
            let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
            state.metrics.history.record(now as i64, &rendered);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENDERED: &str = "\
# HELP quarry_s3_requests_total Requests.
# TYPE quarry_s3_requests_total counter
quarry_s3_requests_total{op=\"GetObject\",code=\"200\"} 7
quarry_uptime_seconds 12
quarry_s3_request_duration_seconds_bucket{op=\"GetObject\",le=\"0.005\"} 3
quarry_s3_request_duration_seconds_bucket{op=\"GetObject\",le=\"+Inf\"} 7
quarry_s3_request_duration_seconds_bucket{op=\"PutObject\",le=\"0.005\"} 1
quarry_s3_request_duration_seconds_bucket{op=\"PutObject\",le=\"+Inf\"} 2
quarry_s3_request_duration_seconds_sum{op=\"GetObject\"} 0.1
quarry_buffer_pool_buffers{pool=\"data\",state=\"in_use\"} 4
";

    #[test]
    fn a_sample_keeps_the_charted_series_and_sums_the_histogram_by_bound() {
        assert_eq!(
            charted(RENDERED),
            "quarry_s3_requests_total{op=\"GetObject\",code=\"200\"} 7\n\
             quarry_buffer_pool_buffers{pool=\"data\",state=\"in_use\"} 4\n\
             quarry_s3_request_duration_seconds_bucket{le=\"0.005\"} 4\n\
             quarry_s3_request_duration_seconds_bucket{le=\"+Inf\"} 9\n"
        );
    }

    #[test]
    fn the_history_keeps_the_last_samples_in_order() {
        let h = MetricsHistory::default();
        for t in 0..(KEEP as i64 + 5) {
            h.record(t, RENDERED);
        }
        let s = h.samples();
        assert_eq!(s.len(), KEEP);
        assert_eq!((s[0].t, s[KEEP - 1].t), (5, KEEP as i64 + 4));
    }
}
