//! What a run measured: per operation, counts, bytes, and HDR histograms of latency and time to
//! first byte. Each worker records into its own [`Recorder`] (no shared lock on the request path);
//! the recorders are merged when the run ends. [`Live`] holds the few atomic counters the progress
//! line reads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The version of the JSON report; `compare` refuses others.
pub const REPORT_FORMAT: u32 = 1;

/// At most this many error messages are kept as samples for the report.
const ERROR_SAMPLES: usize = 10;

/// Counters shared by all workers, for the live progress line and the stop conditions.
#[derive(Default)]
pub struct Live {
    pub ops: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
}

/// One operation's figures in one worker.
pub struct OpStats {
    pub count: u64,
    pub errors: u64,
    pub verify_errors: u64,
    pub bytes: u64,
    /// Microseconds, whole request (body included).
    pub latency: Histogram<u64>,
    /// Microseconds from sending the request to the first byte of the response body.
    pub ttfb: Histogram<u64>,
}

impl OpStats {
    fn new() -> OpStats {
        OpStats {
            count: 0,
            errors: 0,
            verify_errors: 0,
            bytes: 0,
            latency: histogram(),
            ttfb: histogram(),
        }
    }
}

fn histogram() -> Histogram<u64> {
    // Three significant digits, auto-resizing: fixed memory per worker and operation.
    Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits is a valid precision"))
}

/// Records in microseconds; the histogram grows to the values it sees (memory follows the range
/// actually measured, not a preset maximum).
fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = (d.as_micros().min(u128::from(u64::MAX >> 2)) as u64).max(1);
    if h.record(us).is_err() {
        h.saturating_record(us);
    }
}

/// A worker's measurements.
#[derive(Default)]
pub struct Recorder {
    pub ops: BTreeMap<&'static str, OpStats>,
    pub error_samples: Vec<String>,
}

impl Recorder {
    /// A successful operation that moved `bytes` of object data.
    pub fn ok(
        &mut self,
        live: &Live,
        op: &'static str,
        bytes: u64,
        latency: Duration,
        ttfb: Option<Duration>,
    ) {
        let s = self.ops.entry(op).or_insert_with(OpStats::new);
        s.count += 1;
        s.bytes += bytes;
        record(&mut s.latency, latency);
        if let Some(t) = ttfb {
            record(&mut s.ttfb, t);
        }
        live.ops.fetch_add(1, Ordering::Relaxed);
        live.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A failed operation; `verify` when the body came back wrong.
    pub fn err(&mut self, live: &Live, op: &'static str, verify: bool, message: String) {
        let s = self.ops.entry(op).or_insert_with(OpStats::new);
        s.errors += 1;
        if verify {
            s.verify_errors += 1;
        }
        live.errors.fetch_add(1, Ordering::Relaxed);
        if self.error_samples.len() < ERROR_SAMPLES {
            self.error_samples.push(format!("{op}: {message}"));
        }
    }

    pub fn merge(&mut self, other: Recorder) {
        for (op, o) in other.ops {
            let s = self.ops.entry(op).or_insert_with(OpStats::new);
            s.count += o.count;
            s.errors += o.errors;
            s.verify_errors += o.verify_errors;
            s.bytes += o.bytes;
            // Both auto-resize, so adding cannot fail on range; keep going if it somehow does.
            let _ = s.latency.add(&o.latency);
            let _ = s.ttfb.add(&o.ttfb);
        }
        for e in other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES {
                self.error_samples.push(e);
            }
        }
    }
}

/// Latency figures in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Option<Percentiles> {
        if h.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(Percentiles {
            mean: h.mean() / 1000.0,
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        })
    }
}

/// One operation in the report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpReport {
    pub op: String,
    pub count: u64,
    pub errors: u64,
    pub verify_errors: u64,
    pub bytes: u64,
    pub ops_per_sec: f64,
    pub mib_per_sec: f64,
    pub latency_ms: Option<Percentiles>,
    pub ttfb_ms: Option<Percentiles>,
}

/// The result of a run, as printed by `--json` and read by `compare`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    pub tool: String,
    pub mode: String,
    pub hosts: Vec<String>,
    pub bucket: String,
    pub concurrent: usize,
    pub obj_size: u64,
    pub randsize: bool,
    pub objects: u64,
    /// Seconds the measured phase ran.
    pub duration_s: f64,
    pub total_ops: u64,
    pub total_bytes: u64,
    pub ops_per_sec: f64,
    pub mib_per_sec: f64,
    pub errors: u64,
    pub verify_errors: u64,
    pub error_samples: Vec<String>,
    pub operations: Vec<OpReport>,
}

/// The run's settings a report repeats.
pub struct RunInfo {
    pub mode: String,
    pub hosts: Vec<String>,
    pub bucket: String,
    pub concurrent: usize,
    pub obj_size: u64,
    pub randsize: bool,
    pub objects: u64,
}

const MIB: f64 = 1024.0 * 1024.0;

impl Report {
    pub fn new(info: RunInfo, rec: &Recorder, elapsed: Duration) -> Report {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let operations: Vec<OpReport> = rec
            .ops
            .iter()
            .map(|(op, s)| OpReport {
                op: (*op).to_owned(),
                count: s.count,
                errors: s.errors,
                verify_errors: s.verify_errors,
                bytes: s.bytes,
                ops_per_sec: s.count as f64 / secs,
                mib_per_sec: s.bytes as f64 / MIB / secs,
                latency_ms: Percentiles::of(&s.latency),
                ttfb_ms: Percentiles::of(&s.ttfb),
            })
            .collect();
        let total_ops: u64 = operations.iter().map(|o| o.count).sum();
        let total_bytes: u64 = operations.iter().map(|o| o.bytes).sum();
        Report {
            format: REPORT_FORMAT,
            tool: "quarry-bench".to_owned(),
            mode: info.mode,
            hosts: info.hosts,
            bucket: info.bucket,
            concurrent: info.concurrent,
            obj_size: info.obj_size,
            randsize: info.randsize,
            objects: info.objects,
            duration_s: secs,
            total_ops,
            total_bytes,
            ops_per_sec: total_ops as f64 / secs,
            mib_per_sec: total_bytes as f64 / MIB / secs,
            errors: operations.iter().map(|o| o.errors).sum(),
            verify_errors: operations.iter().map(|o| o.verify_errors).sum(),
            error_samples: rec.error_samples.clone(),
            operations,
        }
    }

    /// The table for humans.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "quarry-bench {}: {} concurrent, objects {}{}, {} hosts, {:.1}s",
            self.mode,
            self.concurrent,
            crate::units::format_size(self.obj_size),
            if self.randsize { " (random sizes)" } else { "" },
            self.hosts.len(),
            self.duration_s
        );
        let _ =
            writeln!(
            out,
            "{:<10} {:>9} {:>7} {:>10} {:>9} | {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} {:>8}",
            "op", "count", "errors", "ops/s", "MiB/s", "p50 ms", "p90", "p99", "max",
            "ttfb p50", "p90", "p99", "max"
        );
        let p = |x: Option<Percentiles>| match x {
            Some(p) => format!(
                "{:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                p.p50, p.p90, p.p99, p.max
            ),
            None => format!("{:>8} {:>8} {:>8} {:>8}", "-", "-", "-", "-"),
        };
        for o in &self.operations {
            let _ = writeln!(
                out,
                "{:<10} {:>9} {:>7} {:>10.1} {:>9.2} | {} | {}",
                o.op,
                o.count,
                o.errors,
                o.ops_per_sec,
                o.mib_per_sec,
                p(o.latency_ms),
                p(o.ttfb_ms)
            );
        }
        let _ = writeln!(
            out,
            "{:<10} {:>9} {:>7} {:>10.1} {:>9.2}",
            "total", self.total_ops, self.errors, self.ops_per_sec, self.mib_per_sec
        );
        if self.verify_errors > 0 {
            let _ = writeln!(out, "VERIFICATION ERRORS: {}", self.verify_errors);
        }
        for e in &self.error_samples {
            let _ = writeln!(out, "error: {e}");
        }
        out
    }
}

/// `compare a.json b.json`: the ratio b / a of every figure both runs have.
pub fn compare(a: &Report, b: &Report) -> Result<String, String> {
    use std::fmt::Write;
    for r in [a, b] {
        if r.format != REPORT_FORMAT {
            return Err(format!(
                "report format {} is not {REPORT_FORMAT}, the one this quarry-bench reads",
                r.format
            ));
        }
    }
    let ratio = |x: f64, y: f64| {
        if x > 0.0 {
            format!("{:>8.3}x", y / x)
        } else {
            format!("{:>9}", "-")
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ratios b/a (a: {} {}, b: {} {}); above 1 means b is higher (faster for ops/s and MiB/s, slower for latencies)",
        a.mode,
        crate::units::format_size(a.obj_size),
        b.mode,
        crate::units::format_size(b.obj_size)
    );
    let _ = writeln!(
        out,
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "op", "ops/s", "MiB/s", "p50", "p90", "p99", "ttfb p50"
    );
    let mut any = false;
    for oa in &a.operations {
        let Some(ob) = b.operations.iter().find(|o| o.op == oa.op) else {
            continue;
        };
        any = true;
        let la = oa.latency_ms.unwrap_or_default();
        let lb = ob.latency_ms.unwrap_or_default();
        let ta = oa.ttfb_ms.unwrap_or_default();
        let tb = ob.ttfb_ms.unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<10} {} {} {} {} {} {}",
            oa.op,
            ratio(oa.ops_per_sec, ob.ops_per_sec),
            ratio(oa.mib_per_sec, ob.mib_per_sec),
            ratio(la.p50, lb.p50),
            ratio(la.p90, lb.p90),
            ratio(la.p99, lb.p99),
            ratio(ta.p50, tb.p50)
        );
    }
    if !any {
        return Err("the two reports have no operation in common".into());
    }
    let _ = writeln!(
        out,
        "{:<10} {} {}",
        "total",
        ratio(a.ops_per_sec, b.ops_per_sec),
        ratio(a.mib_per_sec, b.mib_per_sec)
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> RunInfo {
        RunInfo {
            mode: "get".into(),
            hosts: vec!["h:1".into()],
            bucket: "b".into(),
            concurrent: 2,
            obj_size: 4096,
            randsize: false,
            objects: 10,
        }
    }

    #[test]
    fn merge_report_and_compare() {
        let live = Live::default();
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        for i in 1..=100u64 {
            a.ok(
                &live,
                "GET",
                4096,
                Duration::from_micros(i * 10),
                Some(Duration::from_micros(i)),
            );
        }
        b.ok(&live, "GET", 4096, Duration::from_millis(5), None);
        b.err(&live, "GET", true, "wrong byte at offset 3".into());
        a.merge(b);
        let r = Report::new(info(), &a, Duration::from_secs(2));
        assert_eq!(r.total_ops, 101);
        assert_eq!(r.errors, 1);
        assert_eq!(r.verify_errors, 1);
        let get = &r.operations[0];
        assert!((get.ops_per_sec - 50.5).abs() < 1e-9);
        let lat = get.latency_ms.unwrap();
        assert!((lat.max - 5.0).abs() < 0.01, "{lat:?}");
        assert!((lat.p50 - 0.5).abs() < 0.02, "{lat:?}");
        assert!(r.table().contains("VERIFICATION ERRORS: 1"));

        let json = serde_json::to_string(&r).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        let mut faster = back.clone();
        faster.duration_s /= 2.0;
        faster.operations[0].ops_per_sec *= 2.0;
        faster.ops_per_sec *= 2.0;
        let text = compare(&back, &faster).unwrap();
        assert!(text.contains("2.000x"), "{text}");
        let mut other = back.clone();
        other.format = 99;
        assert!(compare(&back, &other).is_err());
    }
}
