//! The modes: set up the clients and the bucket, prepare objects, run the workers until the
//! duration or the object count is reached, clean up, and turn the recorders into a report.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    StalledStreamProtectionConfig,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier, ServerSideEncryption,
};
use aws_sdk_s3::Client;

use crate::payload::{mix, Payloads, Verifier};
use crate::stats::{Live, Recorder, Report, RunInfo};
use crate::BenchArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Put,
    Get,
    Mixed,
    List,
    Delete,
    Multipart,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Put => "put",
            Mode::Get => "get",
            Mode::Mixed => "mixed",
            Mode::List => "list",
            Mode::Delete => "delete",
            Mode::Multipart => "multipart",
        }
    }

    /// Whether the mode runs on objects uploaded before the clock starts.
    fn prepares(self) -> bool {
        matches!(self, Mode::Get | Mode::Mixed | Mode::List | Mode::Delete)
    }
}

/// Objects to prepare, or the most a run creates.
const DEFAULT_PREPARED: u64 = 2500;
const DEFAULT_CREATED: u64 = 100_000;

/// The state of one prepared object: its generation (bumped by each overwrite), whether it
/// exists, and whether a worker holds it. In mixed mode a worker claims an object for the whole
/// operation, so a GET always knows which bytes to expect.
struct Obj {
    generation: AtomicU64,
    present: AtomicBool,
    busy: AtomicBool,
}

/// Everything the workers share.
struct Shared {
    mode: Mode,
    clients: Vec<Client>,
    bucket: String,
    prefix: String,
    payloads: Payloads,
    objs: Vec<Obj>,
    /// The next object index to create (put, multipart) or delete (delete).
    next: AtomicU64,
    cap: u64,
    stop: AtomicBool,
    live: Live,
    parts: u32,
    batch: usize,
    /// `x-amz-server-side-encryption` of every object written (`--sse`).
    sse: Option<ServerSideEncryption>,
    /// `--rdma`: each worker's connection and registered buffer.
    rdma: Vec<tokio::sync::Mutex<RdmaWorker>>,
}

/// One worker's S3-over-RDMA connection and the buffer its GETs land in and PUTs come from.
struct RdmaWorker {
    client: quarry_rdma_client::RdmaClient,
    buf: quarry_rdma_client::RegisteredBuf,
}

/// One connection and buffer per worker (`--rdma`), to the worker's host.
async fn rdma_workers(
    args: &BenchArgs,
    size: usize,
) -> anyhow::Result<Vec<tokio::sync::Mutex<RdmaWorker>>> {
    let mut out = Vec::with_capacity(args.concurrent);
    for w in 0..args.concurrent {
        let host = &args.host[w % args.host.len()];
        let scheme = if args.tls { "https" } else { "http" };
        let mut config = quarry_rdma_client::ClientConfig::new(
            &format!("{scheme}://{host}"),
            &args.access_key,
            &args.secret_key,
        )
        .region(&args.region);
        if let Some(d) = &args.rdma_device {
            config = config.device(d);
        }
        let client = quarry_rdma_client::RdmaClient::connect(config)
            .await
            .with_context(|| format!("--rdma: cannot connect worker {w} to {host}"))?;
        let buf = client.register(size.max(1))?;
        out.push(tokio::sync::Mutex::new(RdmaWorker { client, buf }));
    }
    Ok(out)
}

impl Shared {
    fn key(&self, obj: u64) -> String {
        format!("{}/{obj:08}", self.prefix)
    }

    fn client(&self, worker: usize) -> &Client {
        &self.clients[worker % self.clients.len()]
    }
}

fn client_for(
    host: &str,
    args: &BenchArgs,
    http: Option<aws_smithy_runtime_api::client::http::SharedHttpClient>,
) -> Client {
    let scheme = if args.tls { "https" } else { "http" };
    let creds = Credentials::new(
        &args.access_key,
        &args.secret_key,
        None,
        None,
        "quarry-bench",
    );
    let mut cfg = aws_sdk_s3::Config::builder();
    if let Some(http) = http {
        cfg = cfg.http_client(http);
    }
    let cfg = cfg
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(args.region.clone()))
        .credentials_provider(creds)
        .endpoint_url(format!("{scheme}://{host}"))
        .force_path_style(true)
        // A benchmark reports failures; it does not hide them behind retries.
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(10))
                .build(),
        )
        // No client-side CRCs or stall watchdog: the client must not be what is measured.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
        .build();
    Client::from_conf(cfg)
}

fn sdk_error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    e: &aws_sdk_s3::error::SdkError<E, R>,
) -> String {
    match e.code() {
        Some(code) => format!("{code}: {}", e.message().unwrap_or("")),
        None => DisplayErrorContext(e).to_string(),
    }
}

/// Runs one benchmark and returns its report.
pub async fn run(mode: Mode, args: &BenchArgs) -> anyhow::Result<Report> {
    if args.host.is_empty() {
        bail!("--host names no endpoint");
    }
    if args.concurrent == 0 {
        bail!("--concurrent must be at least 1");
    }
    if (args.insecure || args.cacert.is_some()) && !args.tls {
        bail!("--insecure and --cacert apply to --tls");
    }
    if args.insecure && args.cacert.is_some() {
        bail!("--insecure and --cacert exclude each other: accept any certificate, or check it against the CA");
    }
    if !(1..=1000).contains(&args.batch) {
        bail!("--batch must be 1 to 1000");
    }
    let size = if mode == Mode::Multipart {
        args.part_size
    } else {
        args.obj_size
    };
    if mode == Mode::Multipart && args.parts > 1 && args.part_size < 5 << 20 {
        bail!("every part but the last must be at least 5MiB: raise --part.size or use --parts 1");
    }
    let size = usize::try_from(size).context("--obj.size is too large for this machine")?;
    if args.rdma && !matches!(mode, Mode::Put | Mode::Get) {
        bail!("--rdma measures put and get");
    }
    if args.rdma && args.sse != crate::Sse::None {
        bail!("--rdma and --sse: measure encryption over HTTP");
    }
    if size > 5 << 30 {
        bail!("objects (and parts) of more than 5 GiB cannot be sent in one request");
    }
    let objects = args.objects.unwrap_or(if mode.prepares() {
        DEFAULT_PREPARED
    } else {
        DEFAULT_CREATED
    });
    if objects == 0 {
        bail!("--objects must be at least 1");
    }
    let seed = mix(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id()));
    let http = if !args.tls {
        None
    } else if args.insecure {
        Some(crate::tls::insecure()?)
    } else if let Some(ca) = &args.cacert {
        Some(crate::tls::trusting(ca)?)
    } else {
        None
    };
    let clients: Vec<Client> = args
        .host
        .iter()
        .map(|h| client_for(h, args, http.clone()))
        .collect();
    ensure_bucket(&clients[0], &args.bucket).await?;
    let rdma = if args.rdma {
        rdma_workers(args, size).await?
    } else {
        Vec::new()
    };
    let prepared = if mode.prepares() { objects } else { 0 };
    let shared = Arc::new(Shared {
        mode,
        clients,
        bucket: args.bucket.clone(),
        prefix: format!("quarry-bench-{:08x}", seed as u32),
        payloads: Payloads::new(size, args.obj_randsize, seed),
        objs: (0..prepared)
            .map(|_| Obj {
                generation: AtomicU64::new(0),
                present: AtomicBool::new(false),
                busy: AtomicBool::new(false),
            })
            .collect(),
        next: AtomicU64::new(0),
        cap: objects,
        stop: AtomicBool::new(false),
        live: Live::default(),
        parts: args.parts.max(1),
        batch: args.batch,
        sse: match args.sse {
            crate::Sse::None => None,
            crate::Sse::S3 => Some(ServerSideEncryption::Aes256),
            crate::Sse::Kms => Some(ServerSideEncryption::AwsKms),
        },
        rdma,
    });
    let tty = std::io::stderr().is_terminal();

    let result = async {
        if mode.prepares() {
            prepare(&shared, args.concurrent, tty).await?;
        }
        measure(&shared, args, tty).await
    }
    .await;

    if !args.noclear {
        if let Err(e) = cleanup(&shared).await {
            eprintln!(
                "quarry-bench: cleanup of {}/{} failed: {e:#}",
                shared.bucket, shared.prefix
            );
        }
    }
    let (rec, elapsed) = result?;
    let info = RunInfo {
        mode: mode.name().to_owned(),
        hosts: args.host.clone(),
        bucket: args.bucket.clone(),
        concurrent: args.concurrent,
        obj_size: size as u64,
        randsize: args.obj_randsize,
        objects,
    };
    Ok(Report::new(info, &rec, elapsed))
}

async fn ensure_bucket(client: &Client, bucket: &str) -> anyhow::Result<()> {
    match client.create_bucket().bucket(bucket).send().await {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.code(),
                Some("BucketAlreadyOwnedByYou" | "BucketAlreadyExists")
            ) =>
        {
            Ok(())
        }
        Err(e) => bail!("cannot create bucket {bucket}: {}", sdk_error(&e)),
    }
}

/// Uploads the prepared objects, `concurrent` at a time. Any failure stops the run.
async fn prepare(shared: &Arc<Shared>, concurrent: usize, tty: bool) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..concurrent {
        let (shared, next, done) = (shared.clone(), next.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= shared.objs.len() as u64 {
                    return Ok::<(), anyhow::Error>(());
                }
                shared
                    .client(w)
                    .put_object()
                    .bucket(&shared.bucket)
                    .key(shared.key(i))
                    .set_server_side_encryption(shared.sse.clone())
                    .body(ByteStream::from(shared.payloads.body(i, 0)))
                    .customize()
                    .disable_payload_signing()
                    .send()
                    .await
                    .map_err(|e| anyhow::anyhow!("preparing object {i}: {}", sdk_error(&e)))?;
                shared.objs[i as usize]
                    .present
                    .store(true, Ordering::Release);
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let total = shared.objs.len();
    let ticker = tty.then(|| {
        let done = done.clone();
        tokio::spawn(async move {
            loop {
                eprint!(
                    "\rpreparing {}/{total} objects",
                    done.load(Ordering::Relaxed)
                );
                let _ = std::io::stderr().flush();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    });
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(anyhow::anyhow!("a preparing task failed: {e}"));
            }
        }
    }
    if let Some(t) = ticker {
        t.abort();
        eprintln!(
            "\rpreparing {}/{total} objects",
            done.load(Ordering::Relaxed)
        );
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The measured phase: workers until the stop flag, a ticker for progress, time and autoterm.
async fn measure(
    shared: &Arc<Shared>,
    args: &BenchArgs,
    tty: bool,
) -> anyhow::Result<(Recorder, Duration)> {
    let start = Instant::now();
    let mut workers = Vec::with_capacity(args.concurrent);
    for w in 0..args.concurrent {
        let shared = shared.clone();
        workers.push(tokio::spawn(async move { worker(shared, w).await }));
    }
    let ticker = {
        let shared = shared.clone();
        let (duration, autoterm) = (args.duration, args.autoterm);
        let (at_dur, at_pct) = (args.autoterm_dur, args.autoterm_pct);
        tokio::spawn(async move {
            let tick = Duration::from_millis(250);
            let window = (at_dur.as_millis() / tick.as_millis()).max(2) as usize;
            let mut samples: Vec<u64> = Vec::new();
            let (mut last_ops, mut last_bytes) = (0u64, 0u64);
            let mut next_print = Instant::now();
            while !shared.stop.load(Ordering::Relaxed) {
                tokio::time::sleep(tick).await;
                let elapsed = start.elapsed();
                let ops = shared.live.ops.load(Ordering::Relaxed);
                let bytes = shared.live.bytes.load(Ordering::Relaxed);
                let errors = shared.live.errors.load(Ordering::Relaxed);
                // Bytes for the modes that move data, operations for the others.
                samples.push(if bytes > 0 {
                    bytes - last_bytes
                } else {
                    ops - last_ops
                });
                (last_ops, last_bytes) = (ops, bytes);
                if tty && Instant::now() >= next_print {
                    next_print += Duration::from_secs(1);
                    let secs = elapsed.as_secs_f64().max(1e-9);
                    eprint!(
                        "\r{} {:>6.1}s  ops {ops}  {:.1} ops/s  {:.2} MiB/s  errors {errors}   ",
                        shared.mode.name(),
                        secs,
                        ops as f64 / secs,
                        bytes as f64 / (1024.0 * 1024.0) / secs
                    );
                    let _ = std::io::stderr().flush();
                }
                if elapsed >= duration || (autoterm && stable(&samples, window, at_pct)) {
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
            if tty {
                eprintln!();
            }
        })
    };
    let mut rec = Recorder::default();
    let mut failure = None;
    for w in workers {
        match w.await {
            Ok(r) => rec.merge(r),
            Err(e) => failure = Some(e),
        }
    }
    let elapsed = start.elapsed();
    shared.stop.store(true, Ordering::Relaxed);
    let _ = ticker.await;
    if let Some(e) = failure {
        bail!("a worker failed: {e}");
    }
    Ok((rec, elapsed))
}

/// Whether the two halves of the last `window` samples agree within `pct` percent.
fn stable(samples: &[u64], window: usize, pct: f64) -> bool {
    if samples.len() < window {
        return false;
    }
    let last = &samples[samples.len() - window..];
    let (a, b) = last.split_at(window / 2);
    let mean = |s: &[u64]| s.iter().sum::<u64>() as f64 / s.len().max(1) as f64;
    let (ma, mb) = (mean(a), mean(b));
    ma > 0.0 && ((mb - ma).abs() / ma) * 100.0 <= pct
}

async fn worker(shared: Arc<Shared>, w: usize) -> Recorder {
    let mut rec = Recorder::default();
    let mut rng = mix(w as u64 ^ 0xA5A5_5A5A);
    while !shared.stop.load(Ordering::Relaxed) {
        rng = mix(rng);
        let more = match shared.mode {
            Mode::Put => op_put_new(&shared, w, &mut rec).await,
            Mode::Get => {
                let obj = rng % shared.objs.len() as u64;
                op_get(&shared, w, obj, &mut rec).await;
                true
            }
            Mode::Mixed => op_mixed(&shared, w, rng, &mut rec).await,
            Mode::List => {
                op_list(&shared, w, &mut rec).await;
                true
            }
            Mode::Delete => op_delete_batch(&shared, w, &mut rec).await,
            Mode::Multipart => op_multipart(&shared, w, &mut rec).await,
        };
        if !more {
            // The object count is reached: the run is over for everyone.
            shared.stop.store(true, Ordering::Relaxed);
        }
    }
    rec
}

/// PUT of object `obj` at `generation`; true when it succeeded.
async fn put(shared: &Shared, w: usize, obj: u64, generation: u64, rec: &mut Recorder) -> bool {
    let body = shared.payloads.body(obj, generation);
    let len = body.len() as u64;
    if let Some(rdma) = shared.rdma.get(w) {
        let mut r = rdma.lock().await;
        // The bytes are in registered memory before the clock starts, as in an application
        // that produces them there.
        let RdmaWorker { client, buf } = &mut *r;
        buf.as_mut_slice()[..body.len()].copy_from_slice(&body);
        let t0 = Instant::now();
        return match client
            .put_from(buf, body.len(), &shared.bucket, &shared.key(obj))
            .await
        {
            Ok(_) => {
                rec.ok(&shared.live, "PUT", len, t0.elapsed(), None);
                true
            }
            Err(e) => {
                rec.err(&shared.live, "PUT", false, e.to_string());
                false
            }
        };
    }
    let t0 = Instant::now();
    let r = shared
        .client(w)
        .put_object()
        .bucket(&shared.bucket)
        .key(shared.key(obj))
        .set_server_side_encryption(shared.sse.clone())
        .body(ByteStream::from(body))
        .customize()
        .disable_payload_signing()
        .send()
        .await;
    match r {
        Ok(_) => {
            rec.ok(&shared.live, "PUT", len, t0.elapsed(), None);
            true
        }
        Err(e) => {
            rec.err(&shared.live, "PUT", false, sdk_error(&e));
            false
        }
    }
}

async fn op_put_new(shared: &Shared, w: usize, rec: &mut Recorder) -> bool {
    let i = shared.next.fetch_add(1, Ordering::Relaxed);
    if i >= shared.cap {
        return false;
    }
    put(shared, w, i, 0, rec).await;
    true
}

/// GET of a prepared object, its body checked against the bytes written.
async fn op_get(shared: &Shared, w: usize, obj: u64, rec: &mut Recorder) {
    let generation = shared.objs[obj as usize].generation.load(Ordering::Acquire);
    let expected = shared.payloads.body(obj, generation);
    if let Some(rdma) = shared.rdma.get(w) {
        let mut r = rdma.lock().await;
        let RdmaWorker { client, buf } = &mut *r;
        let t0 = Instant::now();
        let got = match client
            .get_into(buf, &shared.bucket, &shared.key(obj), None)
            .await
        {
            Ok(got) => got,
            Err(e) => return rec.err(&shared.live, "GET", false, e.to_string()),
        };
        let latency = t0.elapsed();
        let mut verifier = Verifier::new(expected);
        verifier.feed(&buf.as_slice()[..got.len as usize]);
        return match verifier.finish() {
            Ok(()) => rec.ok(&shared.live, "GET", got.len, latency, Some(latency)),
            Err(e) => rec.err(
                &shared.live,
                "GET",
                true,
                format!("{}: {e}", shared.key(obj)),
            ),
        };
    }
    let t0 = Instant::now();
    let out = match shared
        .client(w)
        .get_object()
        .bucket(&shared.bucket)
        .key(shared.key(obj))
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) => return rec.err(&shared.live, "GET", false, sdk_error(&e)),
    };
    let mut body = out.body;
    let mut verifier = Verifier::new(expected);
    let mut ttfb = None;
    let mut received = 0u64;
    loop {
        match body.next().await {
            Some(Ok(chunk)) => {
                ttfb.get_or_insert_with(|| t0.elapsed());
                received += chunk.len() as u64;
                verifier.feed(&chunk);
            }
            Some(Err(e)) => {
                let msg = format!(
                    "{}: body failed after {received} bytes: {e}",
                    shared.key(obj)
                );
                return rec.err(&shared.live, "GET", false, msg);
            }
            None => break,
        }
    }
    let latency = t0.elapsed();
    match verifier.finish() {
        Ok(()) => rec.ok(
            &shared.live,
            "GET",
            received,
            latency,
            ttfb.or(Some(latency)),
        ),
        Err(e) => rec.err(
            &shared.live,
            "GET",
            true,
            format!("{}: {e}", shared.key(obj)),
        ),
    }
}

/// HEAD of a prepared object; a wrong size is a verification error.
async fn op_stat(shared: &Shared, w: usize, obj: u64, rec: &mut Recorder) {
    let generation = shared.objs[obj as usize].generation.load(Ordering::Acquire);
    let want = shared.payloads.size_of(obj, generation) as i64;
    let t0 = Instant::now();
    match shared
        .client(w)
        .head_object()
        .bucket(&shared.bucket)
        .key(shared.key(obj))
        .send()
        .await
    {
        Ok(out) if out.content_length() == Some(want) => {
            rec.ok(&shared.live, "STAT", 0, t0.elapsed(), None)
        }
        Ok(out) => rec.err(
            &shared.live,
            "STAT",
            true,
            format!(
                "{}: size {:?}, {want} written",
                shared.key(obj),
                out.content_length()
            ),
        ),
        Err(e) => rec.err(&shared.live, "STAT", false, sdk_error(&e)),
    }
}

/// Claims a random object that exists (or any, when `present` is `None`) for one operation.
fn claim(shared: &Shared, rng: &mut u64, present: Option<bool>) -> Option<u64> {
    for _ in 0..64 {
        *rng = mix(*rng);
        let i = *rng % shared.objs.len() as u64;
        let o = &shared.objs[i as usize];
        if present.is_some_and(|p| o.present.load(Ordering::Acquire) != p) {
            continue;
        }
        if o.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            if present.is_some_and(|p| o.present.load(Ordering::Acquire) != p) {
                o.busy.store(false, Ordering::Release);
                continue;
            }
            return Some(i);
        }
    }
    None
}

/// One operation of warp's mix: 45% GET, 30% STAT, 15% PUT, 10% DELETE. An object whose PUT or
/// DELETE failed is in an unknown state and stays claimed (unused) for the rest of the run.
async fn op_mixed(shared: &Shared, w: usize, rng: u64, rec: &mut Recorder) -> bool {
    let mut r = rng;
    let roll = r % 100;
    let want_present = if roll < 85 { Some(true) } else { None };
    let Some(obj) = claim(shared, &mut r, want_present) else {
        // Every object is gone or busy: recreate one.
        if let Some(obj) = claim(shared, &mut r, Some(false)) {
            mixed_put(shared, w, obj, rec).await;
        } else {
            tokio::task::yield_now().await;
        }
        return true;
    };
    let o = &shared.objs[obj as usize];
    match roll {
        0..45 => op_get(shared, w, obj, rec).await,
        45..75 => op_stat(shared, w, obj, rec).await,
        75..90 => return mixed_put(shared, w, obj, rec).await,
        _ => {
            if !o.present.load(Ordering::Acquire) {
                return mixed_put(shared, w, obj, rec).await;
            }
            let t0 = Instant::now();
            match shared
                .client(w)
                .delete_object()
                .bucket(&shared.bucket)
                .key(shared.key(obj))
                .send()
                .await
            {
                Ok(_) => {
                    rec.ok(&shared.live, "DELETE", 0, t0.elapsed(), None);
                    o.present.store(false, Ordering::Release);
                }
                Err(e) => {
                    rec.err(&shared.live, "DELETE", false, sdk_error(&e));
                    return true; // stays claimed
                }
            }
        }
    }
    o.busy.store(false, Ordering::Release);
    true
}

/// PUT of the next generation of a claimed object; releases it when the PUT succeeded.
async fn mixed_put(shared: &Shared, w: usize, obj: u64, rec: &mut Recorder) -> bool {
    let o = &shared.objs[obj as usize];
    let generation = o.generation.load(Ordering::Acquire) + 1;
    if put(shared, w, obj, generation, rec).await {
        o.generation.store(generation, Ordering::Release);
        o.present.store(true, Ordering::Release);
        o.busy.store(false, Ordering::Release);
    }
    true
}

/// Lists every prepared object (all pages); a wrong count is a verification error.
async fn op_list(shared: &Shared, w: usize, rec: &mut Recorder) {
    let t0 = Instant::now();
    let mut ttfb = None;
    let mut token: Option<String> = None;
    let mut seen = 0u64;
    loop {
        let r = shared
            .client(w)
            .list_objects_v2()
            .bucket(&shared.bucket)
            .prefix(format!("{}/", shared.prefix))
            .max_keys(1000)
            .set_continuation_token(token.take())
            .send()
            .await;
        let out = match r {
            Ok(out) => out,
            Err(e) => return rec.err(&shared.live, "LIST", false, sdk_error(&e)),
        };
        ttfb.get_or_insert_with(|| t0.elapsed());
        seen += out.contents().len() as u64;
        match (out.is_truncated(), out.next_continuation_token()) {
            (Some(true), Some(t)) => token = Some(t.to_owned()),
            _ => break,
        }
    }
    let want = shared.objs.len() as u64;
    if seen == want {
        rec.ok(&shared.live, "LIST", 0, t0.elapsed(), ttfb);
    } else {
        rec.err(
            &shared.live,
            "LIST",
            true,
            format!("listed {seen} objects, {want} exist"),
        );
    }
}

/// Deletes the next `batch` prepared objects with one DeleteObjects; false when none are left.
async fn op_delete_batch(shared: &Shared, w: usize, rec: &mut Recorder) -> bool {
    let n = shared.objs.len() as u64;
    let first = shared
        .next
        .fetch_add(shared.batch as u64, Ordering::Relaxed);
    if first >= n {
        return false;
    }
    let last = (first + shared.batch as u64).min(n);
    let ids: Result<Vec<ObjectIdentifier>, _> = (first..last)
        .map(|i| ObjectIdentifier::builder().key(shared.key(i)).build())
        .collect();
    let delete = ids.and_then(|ids| Delete::builder().set_objects(Some(ids)).quiet(true).build());
    let delete = match delete {
        Ok(d) => d,
        Err(e) => {
            rec.err(
                &shared.live,
                "DELETE",
                false,
                format!("cannot build the request: {e}"),
            );
            return false;
        }
    };
    let t0 = Instant::now();
    match shared
        .client(w)
        .delete_objects()
        .bucket(&shared.bucket)
        .delete(delete)
        .send()
        .await
    {
        Ok(out) if out.errors().is_empty() => {
            rec.ok(&shared.live, "DELETE", 0, t0.elapsed(), None);
            for i in first..last {
                shared.objs[i as usize]
                    .present
                    .store(false, Ordering::Release);
            }
        }
        Ok(out) => {
            let e = &out.errors()[0];
            rec.err(
                &shared.live,
                "DELETE",
                false,
                format!(
                    "{} of {} keys not deleted, first {:?}: {:?}",
                    out.errors().len(),
                    last - first,
                    e.key(),
                    e.code()
                ),
            );
        }
        Err(e) => rec.err(&shared.live, "DELETE", false, sdk_error(&e)),
    }
    last < n
}

/// One whole multipart upload: create, `parts` parts, complete. Failures abort the upload.
async fn op_multipart(shared: &Shared, w: usize, rec: &mut Recorder) -> bool {
    let obj = shared.next.fetch_add(1, Ordering::Relaxed);
    if obj >= shared.cap {
        return false;
    }
    let (client, key) = (shared.client(w), shared.key(obj));
    let t0 = Instant::now();
    let upload_id = match client
        .create_multipart_upload()
        .bucket(&shared.bucket)
        .key(&key)
        .set_server_side_encryption(shared.sse.clone())
        .send()
        .await
    {
        Ok(out) => match out.upload_id() {
            Some(id) => id.to_owned(),
            None => {
                rec.err(
                    &shared.live,
                    "CREATE",
                    false,
                    "no UploadId in the answer".into(),
                );
                return true;
            }
        },
        Err(e) => {
            rec.err(&shared.live, "CREATE", false, sdk_error(&e));
            return true;
        }
    };
    rec.ok(&shared.live, "CREATE", 0, t0.elapsed(), None);
    let mut done = Vec::with_capacity(shared.parts as usize);
    for n in 1..=shared.parts {
        let body = shared.payloads.body(obj * 10_000 + u64::from(n), 0);
        let len = body.len() as u64;
        let t0 = Instant::now();
        match client
            .upload_part()
            .bucket(&shared.bucket)
            .key(&key)
            .upload_id(&upload_id)
            .part_number(n as i32)
            .body(ByteStream::from(body))
            .customize()
            .disable_payload_signing()
            .send()
            .await
        {
            Ok(out) => {
                rec.ok(&shared.live, "PART", len, t0.elapsed(), None);
                done.push(
                    CompletedPart::builder()
                        .part_number(n as i32)
                        .set_e_tag(out.e_tag().map(str::to_owned))
                        .build(),
                );
            }
            Err(e) => {
                rec.err(&shared.live, "PART", false, sdk_error(&e));
                abort(client, &shared.bucket, &key, &upload_id).await;
                return true;
            }
        }
    }
    let t0 = Instant::now();
    let r = client
        .complete_multipart_upload()
        .bucket(&shared.bucket)
        .key(&key)
        .upload_id(&upload_id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await;
    match r {
        Ok(_) => rec.ok(&shared.live, "COMPLETE", 0, t0.elapsed(), None),
        Err(e) => {
            rec.err(&shared.live, "COMPLETE", false, sdk_error(&e));
            abort(client, &shared.bucket, &key, &upload_id).await;
        }
    }
    true
}

async fn abort(client: &Client, bucket: &str, key: &str, upload_id: &str) {
    let _ = client
        .abort_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(upload_id)
        .send()
        .await;
}

/// Removes every object (and unfinished upload) under the run's prefix.
async fn cleanup(shared: &Shared) -> anyhow::Result<()> {
    let client = &shared.clients[0];
    let prefix = format!("{}/", shared.prefix);
    if shared.mode == Mode::Multipart {
        let out = client
            .list_multipart_uploads()
            .bucket(&shared.bucket)
            .prefix(&prefix)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("listing uploads: {}", sdk_error(&e)))?;
        for u in out.uploads() {
            if let (Some(k), Some(id)) = (u.key(), u.upload_id()) {
                abort(client, &shared.bucket, k, id).await;
            }
        }
    }
    loop {
        // Always the first page: each pass deletes what it lists.
        let out = client
            .list_objects_v2()
            .bucket(&shared.bucket)
            .prefix(&prefix)
            .max_keys(1000)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("listing: {}", sdk_error(&e)))?;
        let ids: Vec<ObjectIdentifier> = out
            .contents()
            .iter()
            .filter_map(|o| o.key())
            .filter_map(|k| ObjectIdentifier::builder().key(k).build().ok())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let n = ids.len();
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()?;
        let out = client
            .delete_objects()
            .bucket(&shared.bucket)
            .delete(delete)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("deleting: {}", sdk_error(&e)))?;
        if out.errors().len() == n {
            bail!("no object could be deleted");
        }
    }
}
