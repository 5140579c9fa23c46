//! The admin API, for `quarry admin` and operators' scripts. Path style only, under
//! `/quarry/admin/v1/`, signed like any S3 request (SigV4 or V2) and answered only for the root
//! user, the first of [`crate::S3Config::credentials`]; any other key, or no signature, gets
//! `AccessDenied`. Answers are JSON; errors are S3 XML, as everywhere else.
//!
//! - `POST /quarry/admin/v1/heal[?bucket=B[&prefix=P]]`: heals every object of the bucket (or of
//!   every bucket) under the prefix now, and answers what was done ([`HealReportJson`]).
//! - `GET /quarry/admin/v1/heal/status`: the heal queue, the retry list (their lengths and
//!   their first entries) and the background scanner ([`HealStatusJson`]).
//! - `POST /quarry/admin/v1/heal/jobs[?bucket=B[&prefix=P]]`: starts a heal job in the
//!   background and answers its first status, with its id ([`HealJobJson`]).
//! - `GET /quarry/admin/v1/heal/jobs/<id>`: one job's status; `GET /quarry/admin/v1/heal/jobs`:
//!   every job this node keeps (`{"jobs": [...]}`).
//! - `GET /quarry/admin/v1/info`: the deployment as this node sees it now: nodes (and whether
//!   each answers), sets, drives with their space, totals, internode traffic ([`InfoJson`]).
//! - `GET /quarry/admin/v1/drives`: every drive with its set, node, state and space, and the
//!   totals ([`DrivesJson`]); the same probe as `info` without the nodes and traffic.
//! - `GET /quarry/admin/v1/metrics`: this node's `/metrics` text (Prometheus), for signed
//!   callers (the web console's charts) whatever `--metrics-token` / `--metrics-public` say.
//! - `GET /quarry/admin/v1/metrics/history`: the charted series of the last ten minutes, one
//!   sample every ten seconds (`{"every_seconds": 10, "samples": [{"t": ms, "text": "..."}]}`,
//!   see `crate::metrics_history`).
//!
//! - `POST /quarry/admin/v1/users/enable?user=U`, `POST .../users/disable?user=U`: a disabled
//!   user's keys, service accounts and sessions are refused from the next request on.
//! - `POST /quarry/admin/v1/service-accounts?parent=U[&name=N][&expires=RFC3339]`, the body an
//!   optional policy that narrows the parent's: answers the new keys, the secret only here.
//!   `GET .../service-accounts[?parent=U]`, `GET .../service-accounts/<key>`,
//!   `DELETE .../service-accounts/<key>` (see `crate::iam::admin`).
//!
//! - `GET /quarry/admin/v1/kms/keys`: the key service's master key names and which is the
//!   default (`{"default": "a", "keys": [{"id": "a", "default": true}, ...]}`); never key bytes.
//! - `POST /quarry/admin/v1/kms/rotate?from=OLD&to=NEW[&bucket=B][&prefix=P]`: re-seals the
//!   object keys of every version and upload in progress sealed under master key OLD under NEW,
//!   in place, without touching data; answers the counts ([`crate::kms_rotate::RotateReport`]).
//!
//! Because these paths are taken before S3 routing, a bucket named `quarry` cannot be reached
//! path style under `admin/` (virtual-host style still reaches it).

use axum::body::Body;
use axum::response::Response;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::Method;
use quarry_object::{ClusterInfo, HealReport, LayerStats};
use serde::Serialize;

use crate::api_error::{ApiError, ApiResult};
use crate::error::{S3Error, S3ErrorCode};
use crate::router::Query;
use crate::server::ReqCtx;

/// Every admin path starts with this.
pub const PREFIX: &str = "/quarry/admin/";

/// The version of the admin API, in its paths.
pub const V1: &str = "/quarry/admin/v1/";

/// One admin call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminOp {
    /// `POST /quarry/admin/v1/heal[?bucket=B[&prefix=P]]`: every bucket, one bucket, or the keys
    /// of a bucket under a prefix.
    Heal {
        bucket: Option<String>,
        prefix: String,
    },
    /// `GET /quarry/admin/v1/heal/status`.
    HealStatus,
    /// `POST /quarry/admin/v1/heal/jobs[?bucket=B[&prefix=P]]`.
    StartHealJob {
        bucket: Option<String>,
        prefix: String,
    },
    /// `GET /quarry/admin/v1/heal/jobs/<id>` (`None`: `GET .../heal/jobs`, every job).
    HealJob { id: Option<String> },
    /// `GET /quarry/admin/v1/info`.
    Info,
    /// `GET /quarry/admin/v1/drives`.
    Drives,
    /// `GET /quarry/admin/v1/metrics`.
    Metrics,
    /// `GET /quarry/admin/v1/metrics/history`: the charted series of the last minutes.
    MetricsHistory,
    /// `POST /quarry/admin/v1/data-plane/reset` (`?peer=host:port`, else every peer).
    ResetDataPlane { peer: Option<String> },
    /// `POST /quarry/admin/v1/users/enable?user=U` (or `users/disable`).
    SetUserEnabled { user: String, enabled: bool },
    /// `POST /quarry/admin/v1/service-accounts?parent=U[&name=N][&expires=T]`, body: a policy.
    AddServiceAccount {
        parent: String,
        name: Option<String>,
        expires: Option<String>,
    },
    /// `GET /quarry/admin/v1/service-accounts[?parent=U]`.
    ServiceAccounts { parent: Option<String> },
    /// `GET /quarry/admin/v1/service-accounts/<key>`.
    ServiceAccount { access_key: String },
    /// `DELETE /quarry/admin/v1/service-accounts/<key>`.
    RemoveServiceAccount { access_key: String },
    /// `GET /quarry/admin/v1/kms/keys`.
    KmsKeys,
    /// `POST /quarry/admin/v1/kms/rotate?from=OLD&to=NEW[&bucket=B][&prefix=P]`.
    KmsRotate {
        from: String,
        to: String,
        bucket: Option<String>,
        prefix: String,
    },
    /// An unknown call, version or method: this error, but only for the root user (others are
    /// told nothing about the admin API).
    Invalid { code: S3ErrorCode, message: String },
}

impl AdminOp {
    /// The operation's name in logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            AdminOp::Heal { .. } => "AdminHeal",
            AdminOp::HealStatus => "AdminHealStatus",
            AdminOp::StartHealJob { .. } => "AdminStartHealJob",
            AdminOp::HealJob { .. } => "AdminHealJob",
            AdminOp::Info => "AdminInfo",
            AdminOp::Drives => "AdminDrives",
            AdminOp::Metrics => "AdminMetrics",
            AdminOp::MetricsHistory => "AdminMetricsHistory",
            AdminOp::ResetDataPlane { .. } => "AdminResetDataPlane",
            AdminOp::SetUserEnabled { .. } => "AdminSetUserEnabled",
            AdminOp::AddServiceAccount { .. } => "AdminAddServiceAccount",
            AdminOp::ServiceAccounts { .. } => "AdminServiceAccounts",
            AdminOp::ServiceAccount { .. } => "AdminServiceAccount",
            AdminOp::RemoveServiceAccount { .. } => "AdminRemoveServiceAccount",
            AdminOp::KmsKeys => "AdminKmsKeys",
            AdminOp::KmsRotate { .. } => "AdminKmsRotate",
            AdminOp::Invalid { .. } => "Admin",
        }
    }
}

/// The admin call a path-style request names: `None` when the path is not under [`PREFIX`] (an
/// S3 request); [`AdminOp::Invalid`] for an unknown call or method.
pub(crate) fn parse(method: &Method, path: &str, query: &Query) -> Option<AdminOp> {
    if !path.starts_with(PREFIX) {
        return None;
    }
    Some(
        parse_call(method, path, query).unwrap_or_else(|e| AdminOp::Invalid {
            code: e.code,
            message: e.message,
        }),
    )
}

fn parse_call(method: &Method, path: &str, query: &Query) -> Result<AdminOp, S3Error> {
    let non_empty = |name: &str| query.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
    let Some(call) = path.strip_prefix(V1) else {
        return Err(S3Error::new(
            S3ErrorCode::InvalidRequest,
            format!("Unknown admin API version in {path}; this server speaks {V1}."),
        ));
    };
    let (op, allowed) = match call.trim_end_matches('/') {
        "heal" => (
            AdminOp::Heal {
                bucket: non_empty("bucket"),
                prefix: query.get("prefix").unwrap_or("").to_owned(),
            },
            Method::POST,
        ),
        "heal/status" => (AdminOp::HealStatus, Method::GET),
        "heal/jobs" if *method == Method::POST => (
            AdminOp::StartHealJob {
                bucket: non_empty("bucket"),
                prefix: query.get("prefix").unwrap_or("").to_owned(),
            },
            Method::POST,
        ),
        "heal/jobs" => (AdminOp::HealJob { id: None }, Method::GET),
        job if job.starts_with("heal/jobs/") && !job["heal/jobs/".len()..].contains('/') => (
            AdminOp::HealJob {
                id: Some(job["heal/jobs/".len()..].to_owned()),
            },
            Method::GET,
        ),
        "info" => (AdminOp::Info, Method::GET),
        "drives" => (AdminOp::Drives, Method::GET),
        "metrics" => (AdminOp::Metrics, Method::GET),
        "metrics/history" => (AdminOp::MetricsHistory, Method::GET),
        state @ ("users/enable" | "users/disable") => (
            AdminOp::SetUserEnabled {
                user: non_empty("user").ok_or_else(|| {
                    S3Error::new(S3ErrorCode::InvalidArgument, "Give the user: ?user=NAME.")
                })?,
                enabled: state == "users/enable",
            },
            Method::POST,
        ),
        "service-accounts" if *method == Method::POST => (
            AdminOp::AddServiceAccount {
                parent: non_empty("parent").ok_or_else(|| {
                    S3Error::new(
                        S3ErrorCode::InvalidArgument,
                        "Give the parent user: ?parent=NAME.",
                    )
                })?,
                name: non_empty("name"),
                expires: non_empty("expires"),
            },
            Method::POST,
        ),
        "service-accounts" => (
            AdminOp::ServiceAccounts {
                parent: non_empty("parent"),
            },
            Method::GET,
        ),
        sa if sa.starts_with("service-accounts/")
            && !sa["service-accounts/".len()..].contains('/') =>
        {
            let access_key = sa["service-accounts/".len()..].to_owned();
            if *method == Method::DELETE {
                (AdminOp::RemoveServiceAccount { access_key }, Method::DELETE)
            } else {
                (AdminOp::ServiceAccount { access_key }, Method::GET)
            }
        }
        "kms/keys" => (AdminOp::KmsKeys, Method::GET),
        "kms/rotate" => {
            let need = |name: &str| {
                non_empty(name).ok_or_else(|| {
                    S3Error::new(
                        S3ErrorCode::InvalidArgument,
                        format!("Give the master key ids: ?from=OLD&to=NEW ({name} is missing)."),
                    )
                })
            };
            (
                AdminOp::KmsRotate {
                    from: need("from")?,
                    to: need("to")?,
                    bucket: non_empty("bucket"),
                    prefix: query.get("prefix").unwrap_or("").to_owned(),
                },
                Method::POST,
            )
        }
        "data-plane/reset" => (
            AdminOp::ResetDataPlane {
                peer: non_empty("peer"),
            },
            Method::POST,
        ),
        _ => {
            return Err(S3Error::new(
                S3ErrorCode::InvalidRequest,
                format!("Unknown admin API call {path}."),
            ))
        }
    };
    if *method != allowed {
        return Err(S3Error::new(
            S3ErrorCode::MethodNotAllowed,
            format!("The method {method} is not allowed against {path}; use {allowed}."),
        ));
    }
    Ok(op)
}

/// Runs an authenticated admin call.
pub(crate) async fn handle(ctx: &ReqCtx, op: AdminOp) -> ApiResult<Response> {
    let root = ctx.state.auth.credentials.first();
    if root.is_none_or(|c| c.access_key != ctx.auth.access_key) {
        return Err(ApiError::new(
            S3ErrorCode::AccessDenied,
            "Access Denied. The admin API answers the root user only.",
        ));
    }
    match op {
        AdminOp::Heal { bucket, prefix } => heal(ctx, bucket.as_deref(), &prefix).await,
        AdminOp::HealStatus => {
            let stats = ctx.layer().stats().await;
            json(&HealStatusJson::from(&stats))
        }
        AdminOp::StartHealJob { bucket, prefix } => {
            if bucket.is_none() && !prefix.is_empty() {
                return Err(ApiError::new(
                    S3ErrorCode::InvalidArgument,
                    "A heal by prefix needs a bucket (`bucket=`).",
                ));
            }
            let s = ctx
                .layer()
                .start_heal_job(bucket.as_deref(), &prefix)
                .await?;
            tracing::info!(job = s.id, bucket = bucket.as_deref().unwrap_or("*"), prefix,
                user = %ctx.auth.access_key, "admin heal job started");
            json(&HealJobJson::from(&s))
        }
        AdminOp::HealJob { id: Some(id) } => match ctx.layer().heal_job(&id).await? {
            Some(s) => json(&HealJobJson::from(&s)),
            None => Err(ApiError::new(
                S3ErrorCode::InvalidArgument,
                format!(
                    "No heal job {id} on this node: jobs are kept in memory by the node that runs them (the last {}), so ask the node it was started on.",
                    quarry_object::KEPT_JOBS
                ),
            )),
        },
        AdminOp::HealJob { id: None } => {
            let jobs: Vec<HealJobJson> = ctx
                .layer()
                .heal_jobs()
                .await?
                .iter()
                .map(HealJobJson::from)
                .collect();
            json(&serde_json::json!({ "jobs": jobs }))
        }
        AdminOp::Info => {
            let info = ctx.layer().info().await?;
            let mut out = InfoJson::from(&info);
            out.drive_heals = ctx
                .layer()
                .drive_heals()
                .iter()
                .map(DriveHealJson::from)
                .collect();
            json(&out)
        }
        AdminOp::Drives => {
            let info = ctx.layer().info().await?;
            json(&DrivesJson::from(&info))
        }
        AdminOp::Metrics => {
            let layer = ctx.layer().stats().await;
            Ok(crate::metrics::response(ctx.state.metrics.render(&layer)))
        }
        AdminOp::MetricsHistory => json(&serde_json::json!({
            "every_seconds": crate::metrics_history::EVERY.as_secs(),
            "samples": ctx.state.metrics.history.samples(),
        })),
        AdminOp::ResetDataPlane { peer } => {
            let peer = peer.as_deref();
            let reset = ctx.layer().reset_data_plane(peer).await?;
            tracing::info!(
                peer = peer.unwrap_or("*"),
                reset,
                user = %ctx.auth.access_key,
                "admin data-plane reset"
            );
            json(&serde_json::json!({ "peer": peer, "reset": reset }))
        }
        AdminOp::SetUserEnabled { user, enabled } => {
            let out = iam_of(ctx)?
                .set_user_enabled(&user, enabled)
                .await
                .map_err(iam_error)?;
            tracing::info!(user, enabled, "admin: user enabled or disabled");
            json(&out)
        }
        AdminOp::AddServiceAccount {
            parent,
            name,
            expires,
        } => {
            let body = ctx.small_body().await?;
            let policy = if body.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(String::from_utf8(body.to_vec()).map_err(|_| {
                    ApiError::new(S3ErrorCode::InvalidArgument, "The policy is not UTF-8.")
                })?)
            };
            let out = iam_of(ctx)?
                .add_service_account(&parent, name, policy, expires)
                .await
                .map_err(iam_error)?;
            tracing::info!(parent, access_key = %out.access_key, "admin: service account added");
            json(&out)
        }
        AdminOp::ServiceAccounts { parent } => json(&serde_json::json!({
            "serviceAccounts": iam_of(ctx)?.service_accounts(parent.as_deref())
        })),
        AdminOp::ServiceAccount { access_key } => {
            json(&iam_of(ctx)?.service_account(&access_key).map_err(iam_error)?)
        }
        AdminOp::RemoveServiceAccount { access_key } => {
            iam_of(ctx)?
                .remove_service_account(&access_key)
                .await
                .map_err(iam_error)?;
            tracing::info!(access_key, "admin: service account removed");
            json(&serde_json::json!({ "removed": access_key }))
        }
        AdminOp::KmsKeys => {
            let kms = crate::sse::kms(&ctx.state.sse)?;
            let default = kms.default_key_id().to_string();
            let keys: Vec<serde_json::Value> = kms
                .key_ids()
                .into_iter()
                .map(|id| serde_json::json!({ "default": id == default, "id": id }))
                .collect();
            json(&serde_json::json!({ "default": default, "keys": keys }))
        }
        AdminOp::KmsRotate {
            from,
            to,
            bucket,
            prefix,
        } => kms_rotate(ctx, from, to, bucket, prefix).await,
        AdminOp::Invalid { code, message } => Err(ApiError::new(code, message)),
    }
}

async fn kms_rotate(
    ctx: &ReqCtx,
    from: String,
    to: String,
    bucket: Option<String>,
    prefix: String,
) -> ApiResult<Response> {
    let kms = crate::sse::kms(&ctx.state.sse)?.clone();
    // Refused before anything is read: a rotation that cannot complete changes nothing.
    for (role, id) in [("to", &to), ("from", &from)] {
        if !kms.has_key(id) {
            return Err(ApiError::new(
                S3ErrorCode::InvalidArgument,
                format!(
                    "The key service has no master key {id:?} ({role}); its keys are: {}. Both keys must be configured while rotating.",
                    kms.key_ids().join(", ")
                ),
            ));
        }
    }
    if from == to {
        return Err(ApiError::new(
            S3ErrorCode::InvalidArgument,
            "Rotating a master key to itself changes nothing: give another key as `to`.",
        ));
    }
    tracing::info!(
        from,
        to,
        bucket = bucket.as_deref().unwrap_or("*"),
        prefix,
        user = %ctx.auth.access_key,
        "admin kms rotate"
    );
    // In its own task, as a heal: a client that goes away does not stop the walk between the
    // drives of one object.
    let layer = ctx.state.layer.clone();
    let task = tokio::spawn(crate::kms_rotate::rotate(
        layer, kms, from, to, bucket, prefix,
    ));
    let report = task.await.map_err(|e| {
        tracing::error!(error = %e, "the rotation task failed");
        ApiError::from(S3ErrorCode::InternalError)
    })??;
    json(&report)
}

fn iam_of(ctx: &ReqCtx) -> ApiResult<&crate::iam::Iam> {
    ctx.state.iam.as_deref().ok_or_else(|| {
        ApiError::new(
            S3ErrorCode::NotImplemented,
            "This server keeps no identities (no IAM store).",
        )
    })
}

/// An IAM failure as an admin API error: the IAM code leads the message.
fn iam_error(e: crate::iam::IamError) -> ApiError {
    let (code, status) = e.code();
    let s3 = match status {
        503 => S3ErrorCode::ServiceUnavailable,
        500 => S3ErrorCode::InternalError,
        _ => S3ErrorCode::InvalidArgument,
    };
    ApiError::new(s3, format!("{code}: {e}"))
}

async fn heal(ctx: &ReqCtx, bucket: Option<&str>, prefix: &str) -> ApiResult<Response> {
    if bucket.is_none() && !prefix.is_empty() {
        return Err(ApiError::new(
            S3ErrorCode::InvalidArgument,
            "A heal by prefix needs a bucket (`bucket=`).",
        ));
    }
    tracing::info!(
        bucket = bucket.unwrap_or("*"),
        prefix,
        user = %ctx.auth.access_key,
        "admin heal"
    );
    // In its own task: a client that goes away (or times out) does not stop the heal between
    // two drives of an object; it runs to the end and is logged.
    let layer = ctx.state.layer.clone();
    let (b, p) = (bucket.map(str::to_owned), prefix.to_owned());
    let task = tokio::spawn(async move { layer.heal(b.as_deref(), &p).await });
    let report = task.await.map_err(|e| {
        tracing::error!(error = %e, "the heal task failed");
        ApiError::from(S3ErrorCode::InternalError)
    })??;
    json(&HealReportJson::from(&report))
}

fn json<T: Serialize>(value: &T) -> ApiResult<Response> {
    let body = serde_json::to_vec_pretty(value).map_err(|e| {
        tracing::error!(error = %e, "cannot encode an admin answer");
        ApiError::from(S3ErrorCode::InternalError)
    })?;
    let mut response = Response::new(Body::from(body));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// A heal job's status, as JSON.
#[derive(Debug, Serialize)]
pub struct HealJobJson {
    pub id: String,
    pub bucket: Option<String>,
    pub prefix: String,
    /// counting, healing, verifying, done or failed.
    pub phase: &'static str,
    pub error: Option<String>,
    pub started_ns: i64,
    pub finished_ns: Option<i64>,
    pub elapsed_secs: f64,
    pub total_objects: Option<u64>,
    pub total_bytes: Option<u64>,
    pub bytes_scanned: u64,
    pub bytes_healed: u64,
    /// Objects checked per second so far.
    pub rate: f64,
    /// Seconds left in the healing phase, once the total is known and the rate is not 0.
    pub eta_secs: Option<f64>,
    pub verify_checked: u64,
    pub verify_missing: u64,
    pub verify_failed: u64,
    pub bucket_items_healed: u64,
    /// What the healing phase did, as the synchronous heal answers it.
    pub report: HealReportJson,
}

impl From<&quarry_object::HealJobStatus> for HealJobJson {
    fn from(s: &quarry_object::HealJobStatus) -> Self {
        HealJobJson {
            id: s.id.clone(),
            bucket: s.bucket.clone(),
            prefix: s.prefix.clone(),
            phase: s.phase.as_str(),
            error: s.error.clone(),
            started_ns: s.started_ns,
            finished_ns: s.finished_ns,
            elapsed_secs: s.elapsed_secs,
            total_objects: s.total_objects,
            total_bytes: s.total_bytes,
            bytes_scanned: s.bytes_scanned,
            bytes_healed: s.bytes_healed,
            rate: s.rate(),
            eta_secs: s.eta_secs(),
            verify_checked: s.verify_checked,
            verify_missing: s.verify_missing,
            verify_failed: s.verify_failed,
            bucket_items_healed: s.report.bucket_items_healed,
            report: HealReportJson::from(&s.report),
        }
    }
}

/// The answer to a heal: what [`HealReport`] says, as JSON.
#[derive(Debug, Serialize)]
pub struct HealReportJson {
    pub buckets: u64,
    pub scanned: u64,
    pub healed: u64,
    pub healed_drives: u64,
    pub failed: u64,
    /// More objects were healed or failed than are listed.
    pub truncated: bool,
    pub healed_objects: Vec<HealedJson>,
    pub failed_objects: Vec<FailedJson>,
}

#[derive(Debug, Serialize)]
pub struct HealedJson {
    pub bucket: String,
    pub key: String,
    pub drives: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct FailedJson {
    pub bucket: String,
    /// Empty when the bucket's listing failed.
    pub key: String,
    pub reason: String,
}

impl From<&HealReport> for HealReportJson {
    fn from(r: &HealReport) -> Self {
        HealReportJson {
            buckets: r.buckets,
            scanned: r.scanned,
            healed: r.healed,
            healed_drives: r.healed_drives,
            failed: r.failed,
            truncated: r.truncated,
            healed_objects: r
                .healed_objects
                .iter()
                .map(|h| HealedJson {
                    bucket: h.bucket.clone(),
                    key: h.key.clone(),
                    drives: h.drives.clone(),
                })
                .collect(),
            failed_objects: r
                .failed_objects
                .iter()
                .map(|f| FailedJson {
                    bucket: f.bucket.clone(),
                    key: f.key.clone(),
                    reason: f.reason.clone(),
                })
                .collect(),
        }
    }
}

/// The answer to `heal/status`.
#[derive(Debug, Serialize)]
pub struct HealStatusJson {
    /// Objects waiting on the heal queue.
    pub queue_len: u64,
    /// Heals waiting for a retry (a drive was offline).
    pub retry_len: u64,
    pub queued_total: u64,
    /// Heal requests dropped because the queue was full.
    pub queue_dropped_total: u64,
    pub healed_objects_total: u64,
    pub failed_total: u64,
    pub retried_total: u64,
    /// Heals dropped because the retry list was full.
    pub retry_dropped_total: u64,
    pub given_up_total: u64,
    pub drives: Vec<DriveJson>,
    pub scanner: ScannerJson,
    /// Heals of this node's replaced drives, running or finished since start.
    pub drive_heals: Vec<DriveHealJson>,
    /// What the heal workers hold: objects being healed, a sample of those queued, then the
    /// first retries due (at most `quarry_object::HEAL_QUEUE_SHOWN`).
    pub queue: Vec<HealQueueJson>,
}

/// One object on a heal worker's list.
#[derive(Debug, Serialize)]
pub struct HealQueueJson {
    /// The erasure set, 0-based.
    pub set: usize,
    pub bucket: String,
    pub key: String,
    /// `healing`, `queued` or `retry`.
    pub state: &'static str,
    /// Failed attempts so far.
    pub attempts: u32,
    /// For a retry: seconds until it is tried again.
    pub due_in_seconds: Option<f64>,
}

impl From<&quarry_object::HealQueueEntry> for HealQueueJson {
    fn from(e: &quarry_object::HealQueueEntry) -> Self {
        use quarry_object::HealEntryState as S;
        HealQueueJson {
            set: e.set,
            bucket: e.bucket.clone(),
            key: e.key.clone(),
            state: match e.state {
                S::Healing => "healing",
                S::Queued => "queued",
                S::Retry => "retry",
            },
            attempts: e.attempts,
            due_in_seconds: e.due_in.map(|d| (d.as_secs_f64() * 10.0).round() / 10.0),
        }
    }
}

/// A replaced drive's heal, as its checkpoint says.
#[derive(Debug, Serialize)]
pub struct DriveHealJson {
    pub endpoint: String,
    pub job_id: String,
    /// `healing`, `verifying` or `done`.
    pub phase: quarry_object::drive_heal::DriveHealPhase,
    pub started: Option<String>,
    pub updated: Option<String>,
    /// The bucket being walked and the last key of it healed (`null` between buckets).
    pub bucket: Option<String>,
    pub last_key: Option<String>,
    pub buckets_done: usize,
    pub scanned: u64,
    pub healed: u64,
    pub failed: u64,
    pub bytes: u64,
    pub bucket_items_healed: u64,
    pub resumes: u64,
    pub verify_rounds: u64,
    pub verify_missing: u64,
    pub verify_failed: u64,
}

#[derive(Debug, Serialize)]
pub struct DriveJson {
    pub endpoint: String,
    pub online: bool,
}

#[derive(Debug, Serialize)]
pub struct ScannerJson {
    pub enabled: bool,
    pub running: bool,
    pub objects_total: u64,
    pub healed_total: u64,
    pub failed_total: u64,
    pub passes_total: u64,
    /// RFC 3339, UTC; `null` before the first pass.
    pub last_pass_start: Option<String>,
    pub last_pass_end: Option<String>,
}

fn rfc3339(ns: Option<i64>) -> Option<String> {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ns?)).ok()?;
    t.format(&time::format_description::well_known::Rfc3339)
        .ok()
}

impl From<&LayerStats> for HealStatusJson {
    fn from(s: &LayerStats) -> Self {
        HealStatusJson {
            queue_len: s.heal_queue_len,
            retry_len: s.heal_retry_len,
            queued_total: s.heal_queued_total,
            queue_dropped_total: s.heal_dropped_total,
            healed_objects_total: s.healed_objects_total,
            failed_total: s.heal_failed_total,
            retried_total: s.heal_retried_total,
            retry_dropped_total: s.heal_retry_dropped_total,
            given_up_total: s.heal_given_up_total,
            drives: s
                .drives
                .iter()
                .map(|d| DriveJson {
                    endpoint: d.endpoint.clone(),
                    online: d.online,
                })
                .collect(),
            scanner: ScannerJson {
                enabled: s.scan.enabled,
                running: s.scan.running,
                objects_total: s.scan.objects_total,
                healed_total: s.scan.healed_total,
                failed_total: s.scan.failed_total,
                passes_total: s.scan.passes_total,
                last_pass_start: rfc3339(s.scan.last_pass_start_ns),
                last_pass_end: rfc3339(s.scan.last_pass_end_ns),
            },
            drive_heals: s.drive_heals.iter().map(DriveHealJson::from).collect(),
            queue: s.heal_queue.iter().map(HealQueueJson::from).collect(),
        }
    }
}

impl From<&quarry_object::drive_heal::DriveHealStatus> for DriveHealJson {
    fn from(h: &quarry_object::drive_heal::DriveHealStatus) -> Self {
        let m = &h.mark;
        DriveHealJson {
            endpoint: h.endpoint.clone(),
            job_id: m.job_id.clone(),
            phase: m.phase,
            started: rfc3339(Some(m.started_ns)),
            updated: rfc3339(Some(m.updated_ns)),
            bucket: m.bucket.clone(),
            last_key: m.last_key.clone(),
            buckets_done: m.buckets_done.len(),
            scanned: m.scanned,
            healed: m.healed,
            failed: m.failed,
            bytes: m.bytes,
            bucket_items_healed: m.bucket_items_healed,
            resumes: m.resumes,
            verify_rounds: m.verify_rounds,
            verify_missing: m.verify_missing,
            verify_failed: m.verify_failed,
        }
    }
}

/// The answer to `info`.
#[derive(Debug, Serialize)]
pub struct InfoJson {
    pub deployment_id: String,
    /// `single` (one process) or `cluster`.
    pub mode: &'static str,
    /// `host:port` of the node that answered; `null` for a single node.
    pub this_node: Option<String>,
    pub nodes: Vec<NodeJson>,
    pub sets: Vec<SetJson>,
    pub totals: TotalsJson,
    /// Internode data-plane counters of this node, one entry per backend.
    pub data_plane: Vec<DataPlaneJson>,
    /// Counters of this node's control-RPC client; `null` for a single node.
    pub rpc: Option<RpcJson>,
    /// Heals of this node's replaced drives (see `heal/status`).
    pub drive_heals: Vec<DriveHealJson>,
}

#[derive(Debug, Serialize)]
pub struct NodeJson {
    pub address: String,
    pub local: bool,
    pub online: bool,
    pub rtt_us: Option<u64>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SetJson {
    pub index: usize,
    pub data: usize,
    pub parity: usize,
    pub read_quorum: usize,
    pub write_quorum: usize,
    pub drives_online: usize,
    pub drives: Vec<DriveInfoJson>,
}

#[derive(Debug, Serialize)]
pub struct DriveInfoJson {
    pub set: usize,
    pub position: usize,
    pub endpoint: String,
    pub node: Option<String>,
    pub online: bool,
    pub id: Option<String>,
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub error: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct TotalsJson {
    pub nodes: usize,
    pub nodes_online: usize,
    pub nodes_offline: usize,
    pub sets: usize,
    /// Sets with a read quorum of drives online, and a write quorum.
    pub sets_readable: usize,
    pub sets_writable: usize,
    pub drives: usize,
    pub drives_online: usize,
    pub drives_offline: usize,
    /// Over the drives online.
    pub total_bytes: u64,
    pub free_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct DataPlaneJson {
    pub backend: String,
    pub transfers: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub connects: u64,
    pub connect_failures: u64,
    pub fast_failures: u64,
    pub retries: u64,
}

#[derive(Debug, Serialize)]
pub struct RpcJson {
    pub calls: u64,
    pub timeouts: u64,
    pub connects: u64,
    pub connect_failures: u64,
    pub fast_failures: u64,
}

/// The answer to `drives`.
#[derive(Debug, Serialize)]
pub struct DrivesJson {
    pub drives: Vec<DriveInfoJson>,
    pub totals: TotalsJson,
}

fn sets_json(info: &ClusterInfo) -> Vec<SetJson> {
    info.sets
        .iter()
        .map(|s| SetJson {
            index: s.index,
            data: s.data,
            parity: s.parity,
            read_quorum: s.read_quorum,
            write_quorum: s.write_quorum,
            drives_online: s.drives.iter().filter(|d| d.online).count(),
            drives: s
                .drives
                .iter()
                .map(|d| DriveInfoJson {
                    set: s.index,
                    position: d.position,
                    endpoint: d.endpoint.clone(),
                    node: d.node.clone(),
                    online: d.online,
                    id: d.id.map(|id| id.to_string()),
                    total_bytes: d.total_bytes,
                    free_bytes: d.free_bytes,
                    error: d.error.clone(),
                })
                .collect(),
        })
        .collect()
}

fn totals(info: &ClusterInfo, sets: &[SetJson]) -> TotalsJson {
    let nodes_online = info.nodes.iter().filter(|n| n.online).count();
    let mut t = TotalsJson {
        nodes: info.nodes.len(),
        nodes_online,
        nodes_offline: info.nodes.len() - nodes_online,
        sets: sets.len(),
        ..TotalsJson::default()
    };
    for s in sets {
        t.sets_readable += usize::from(s.drives_online >= s.read_quorum);
        t.sets_writable += usize::from(s.drives_online >= s.write_quorum);
        for d in s.drives.iter() {
            t.drives += 1;
            if d.online {
                t.drives_online += 1;
                t.total_bytes += d.total_bytes;
                t.free_bytes += d.free_bytes;
            } else {
                t.drives_offline += 1;
            }
        }
    }
    t
}

impl From<&ClusterInfo> for InfoJson {
    fn from(info: &ClusterInfo) -> Self {
        let sets = sets_json(info);
        let totals = totals(info, &sets);
        InfoJson {
            deployment_id: info.deployment_id.to_string(),
            mode: if info.this_node.is_some() {
                "cluster"
            } else {
                "single"
            },
            this_node: info.this_node.clone(),
            nodes: info
                .nodes
                .iter()
                .map(|n| NodeJson {
                    address: n.address.clone(),
                    local: n.local,
                    online: n.online,
                    rtt_us: n.rtt_us,
                    error: n.error.clone(),
                })
                .collect(),
            sets,
            totals,
            data_plane: info
                .data_planes
                .iter()
                .map(|p| DataPlaneJson {
                    backend: p.backend.clone(),
                    transfers: p.stats.transfers,
                    bytes_in: p.stats.bytes_in,
                    bytes_out: p.stats.bytes_out,
                    errors: p.stats.errors,
                    timeouts: p.stats.timeouts,
                    connects: p.stats.connects,
                    connect_failures: p.stats.connect_failures,
                    fast_failures: p.stats.fast_failures,
                    retries: p.stats.retries,
                })
                .collect(),
            rpc: info.rpc.map(|r| RpcJson {
                calls: r.calls,
                timeouts: r.timeouts,
                connects: r.connects,
                connect_failures: r.connect_failures,
                fast_failures: r.fast_failures,
            }),
            drive_heals: Vec::new(),
        }
    }
}

impl From<&ClusterInfo> for DrivesJson {
    fn from(info: &ClusterInfo) -> Self {
        let sets = sets_json(info);
        let totals = totals(info, &sets);
        DrivesJson {
            drives: sets.into_iter().flat_map(|s| s.drives).collect(),
            totals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods() {
        let p = |m: Method, path: &str| {
            let (path, query) = path.split_once('?').unwrap_or((path, ""));
            parse(&m, path, &Query::parse(Some(query)).unwrap()).map(|op| match op {
                AdminOp::Invalid { code, .. } => Err(code),
                op => Ok(op),
            })
        };
        assert_eq!(
            p(Method::POST, "/quarry/admin/v1/heal"),
            Some(Ok(AdminOp::Heal {
                bucket: None,
                prefix: String::new()
            }))
        );
        assert_eq!(
            p(Method::POST, "/quarry/admin/v1/heal?bucket=b&prefix=a%2F"),
            Some(Ok(AdminOp::Heal {
                bucket: Some("b".into()),
                prefix: "a/".into()
            }))
        );
        assert_eq!(
            p(Method::GET, "/quarry/admin/v1/heal/status"),
            Some(Ok(AdminOp::HealStatus))
        );
        assert_eq!(
            p(Method::GET, "/quarry/admin/v1/heal"),
            Some(Err(S3ErrorCode::MethodNotAllowed))
        );
        assert_eq!(
            p(Method::POST, "/quarry/admin/v1/heal/jobs?bucket=b&prefix=x"),
            Some(Ok(AdminOp::StartHealJob {
                bucket: Some("b".into()),
                prefix: "x".into()
            }))
        );
        assert_eq!(
            p(Method::GET, "/quarry/admin/v1/heal/jobs"),
            Some(Ok(AdminOp::HealJob { id: None }))
        );
        assert_eq!(
            p(Method::GET, "/quarry/admin/v1/heal/jobs/heal-1a-2"),
            Some(Ok(AdminOp::HealJob {
                id: Some("heal-1a-2".into())
            }))
        );
        assert_eq!(
            p(Method::DELETE, "/quarry/admin/v1/heal/jobs/heal-1a-2"),
            Some(Err(S3ErrorCode::MethodNotAllowed))
        );
        assert_eq!(
            p(Method::GET, "/quarry/admin/v1/heal/jobs/a/b"),
            Some(Err(S3ErrorCode::InvalidRequest))
        );
        assert_eq!(
            p(Method::GET, "/quarry/admin/v1/info"),
            Some(Ok(AdminOp::Info))
        );
        assert_eq!(
            p(Method::POST, "/quarry/admin/v1/data-plane/reset"),
            Some(Ok(AdminOp::ResetDataPlane { peer: None }))
        );
        assert_eq!(
            p(
                Method::POST,
                "/quarry/admin/v1/data-plane/reset?peer=127.0.0.1:9001"
            ),
            Some(Ok(AdminOp::ResetDataPlane {
                peer: Some("127.0.0.1:9001".into())
            }))
        );
        assert_eq!(
            p(Method::GET, "/quarry/admin/v1/data-plane/reset"),
            Some(Err(S3ErrorCode::MethodNotAllowed))
        );
        assert_eq!(
            p(Method::GET, "/quarry/admin/v1/drives/"),
            Some(Ok(AdminOp::Drives))
        );
        assert_eq!(
            p(Method::POST, "/quarry/admin/v1/info"),
            Some(Err(S3ErrorCode::MethodNotAllowed))
        );
        assert_eq!(
            p(Method::POST, "/quarry/admin/v1/nope"),
            Some(Err(S3ErrorCode::InvalidRequest))
        );
        assert_eq!(
            p(Method::POST, "/quarry/admin/v9/heal"),
            Some(Err(S3ErrorCode::InvalidRequest))
        );
        // S3 requests, including a bucket named `quarry` outside `admin/`.
        assert_eq!(p(Method::GET, "/quarry/key"), None);
        assert_eq!(p(Method::GET, "/quarry/adminx"), None);
        assert_eq!(p(Method::GET, "/bucket/quarry/admin/v1/heal"), None);
    }

    #[test]
    fn info_totals_count_what_answered() {
        use quarry_object::{ClusterInfo, DriveInfo, NodeInfo, SetInfo};
        let drive = |p: usize, node: &str, online: bool| DriveInfo {
            endpoint: format!("http://{node}/d{p}"),
            node: Some(node.to_owned()),
            position: p,
            online,
            id: None,
            total_bytes: if online { 100 } else { 0 },
            free_bytes: if online { 40 } else { 0 },
            error: (!online).then(|| "connection refused".to_owned()),
        };
        let node = |a: &str, online: bool| NodeInfo {
            address: a.to_owned(),
            local: a == "n1:9000",
            online,
            rtt_us: None,
            error: None,
        };
        let info = ClusterInfo {
            deployment_id: uuid::Uuid::nil(),
            this_node: Some("n1:9000".into()),
            nodes: vec![
                node("n1:9000", true),
                node("n2:9000", true),
                node("n3:9000", false),
                node("n4:9000", false),
            ],
            sets: vec![SetInfo {
                index: 0,
                data: 2,
                parity: 2,
                read_quorum: 2,
                write_quorum: 3,
                drives: vec![
                    drive(0, "n1:9000", true),
                    drive(1, "n2:9000", true),
                    drive(2, "n3:9000", false),
                    drive(3, "n4:9000", false),
                ],
            }],
            data_planes: Vec::new(),
            rpc: None,
        };
        let j = InfoJson::from(&info);
        assert_eq!(j.mode, "cluster");
        let t = &j.totals;
        assert_eq!((t.nodes, t.nodes_online, t.nodes_offline), (4, 2, 2));
        assert_eq!((t.drives, t.drives_online, t.drives_offline), (4, 2, 2));
        assert_eq!((t.sets, t.sets_readable, t.sets_writable), (1, 1, 0));
        assert_eq!((t.total_bytes, t.free_bytes), (200, 80));
        assert_eq!(j.sets[0].drives_online, 2);
        let d = DrivesJson::from(&info);
        assert_eq!(d.drives.len(), 4);
        assert_eq!(d.drives[3].node.as_deref(), Some("n4:9000"));
        assert!(!d.drives[3].online);
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(
            rfc3339(Some(1_700_000_000_123_000_000)).as_deref(),
            Some("2023-11-14T22:13:20.123Z")
        );
        assert_eq!(rfc3339(None), None);
    }

    /// The admin routes through the whole front end, against a stub layer.
    mod routes {
        use std::sync::{Arc, Mutex};

        use async_trait::async_trait;
        use aws_sigv4::http_request::SignableBody;
        use axum::body::Body;
        use bytes::Bytes;
        use http::{Request, StatusCode};
        use http_body_util::BodyExt;
        use quarry_object::{
            BucketInfo, ByteStream, Error, GetObjectReader, HealReport, HealedObject, HttpRange,
            LayerStats, ListOptions, ListResult, ObjectInfo, ObjectLayer, PutOptions, Result,
        };
        use tower::ServiceExt;

        use crate::server::{app, AlwaysReady, S3Config};
        use crate::signature::Credentials;

        const ROOT: (&str, &str) = ("rootkey", "root-secret");
        const USER: (&str, &str) = ("userkey", "user-secret");

        /// Answers heals and stats; everything else is not there.
        #[derive(Default)]
        struct Stub {
            heals: Mutex<Vec<(Option<String>, String)>>,
        }

        fn none<T>() -> Result<T> {
            Err(Error::NotImplemented("stub"))
        }

        #[async_trait]
        impl ObjectLayer for Stub {
            async fn make_bucket(&self, _: &str) -> Result<()> {
                none()
            }
            async fn bucket_info(&self, _: &str) -> Result<BucketInfo> {
                none()
            }
            async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
                none()
            }
            async fn delete_bucket(&self, _: &str) -> Result<()> {
                none()
            }
            async fn put_object(
                &self,
                _: &str,
                _: &str,
                _: ByteStream,
                _: PutOptions,
            ) -> Result<ObjectInfo> {
                none()
            }
            async fn get_object(
                &self,
                _: &str,
                _: &str,
                _: Option<HttpRange>,
            ) -> Result<GetObjectReader> {
                none()
            }
            async fn object_info(&self, _: &str, _: &str) -> Result<ObjectInfo> {
                none()
            }
            async fn delete_object(&self, _: &str, _: &str) -> Result<()> {
                none()
            }
            async fn list_objects(&self, _: &str, _: ListOptions) -> Result<ListResult> {
                none()
            }
            async fn get_bucket_config(&self, _: &str, _: &str) -> Result<Option<Bytes>> {
                none()
            }
            async fn put_bucket_config(&self, _: &str, _: &str, _: Bytes) -> Result<()> {
                none()
            }
            async fn delete_bucket_config(&self, _: &str, _: &str) -> Result<()> {
                none()
            }
            async fn stats(&self) -> LayerStats {
                LayerStats {
                    heal_queue_len: 3,
                    heal_retry_len: 2,
                    ..Default::default()
                }
            }
            async fn heal(&self, bucket: Option<&str>, prefix: &str) -> Result<HealReport> {
                if bucket == Some("absent") {
                    return Err(Error::BucketNotFound);
                }
                self.heals
                    .lock()
                    .unwrap()
                    .push((bucket.map(str::to_owned), prefix.to_owned()));
                Ok(HealReport {
                    buckets: 1,
                    scanned: 4,
                    healed: 1,
                    healed_drives: 2,
                    healed_objects: vec![HealedObject {
                        bucket: "b".into(),
                        key: "k".into(),
                        drives: vec!["/d1".into(), "/d2".into()],
                    }],
                    ..Default::default()
                })
            }
        }

        fn request(method: &str, uri: &str, who: Option<(&str, &str)>) -> Request<Body> {
            match who {
                Some(who) => crate::tests::signed_request_as(
                    who,
                    method,
                    uri,
                    &[],
                    b"",
                    SignableBody::Bytes(b""),
                ),
                None => Request::builder()
                    .method(method)
                    .uri(uri)
                    .header("host", "localhost")
                    .body(Body::empty())
                    .unwrap(),
            }
        }

        async fn send(layer: Arc<Stub>, req: Request<Body>) -> (StatusCode, String) {
            let cfg = S3Config {
                region: "us-east-1".into(),
                credentials: vec![
                    Credentials::new(ROOT.0, ROOT.1),
                    Credentials::new(USER.0, USER.1),
                ],
                domains: vec![],
                metrics: Default::default(),
                sse: Default::default(),
                lifecycle: Default::default(),
                default_object_ownership: Default::default(),
                client_rdma: Default::default(),
            };
            let response = app(layer, Arc::new(AlwaysReady), cfg)
                .oneshot(req)
                .await
                .unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }

        #[tokio::test]
        async fn root_heals_and_reads_the_status() {
            let layer = Arc::new(Stub::default());
            let uri = "/quarry/admin/v1/heal?bucket=b&prefix=a%2Fb%20c";
            let (status, body) = send(layer.clone(), request("POST", uri, Some(ROOT))).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["scanned"], 4);
            assert_eq!(v["healed"], 1);
            assert_eq!(v["healed_objects"][0]["drives"][1], "/d2");
            assert_eq!(
                *layer.heals.lock().unwrap(),
                [(Some("b".to_owned()), "a/b c".to_owned())]
            );

            let (status, body) = send(
                layer.clone(),
                request("POST", "/quarry/admin/v1/heal", Some(ROOT)),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(layer.heals.lock().unwrap()[1], (None, String::new()));

            let uri = "/quarry/admin/v1/heal/status";
            let (status, body) = send(layer.clone(), request("GET", uri, Some(ROOT))).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                (v["queue_len"].as_u64(), v["retry_len"].as_u64()),
                (Some(3), Some(2))
            );
            assert_eq!(v["scanner"]["last_pass_start"], serde_json::Value::Null);
        }

        #[tokio::test]
        async fn only_the_root_user_gets_in() {
            let layer = Arc::new(Stub::default());
            for (method, uri) in [
                ("POST", "/quarry/admin/v1/heal"),
                ("GET", "/quarry/admin/v1/heal/status"),
                // Routing errors are not revealed before authentication.
                ("GET", "/quarry/admin/v1/nope"),
            ] {
                for who in [None, Some(USER), Some((ROOT.0, "wrong-secret"))] {
                    let (status, body) = send(layer.clone(), request(method, uri, who)).await;
                    assert_eq!(
                        status,
                        StatusCode::FORBIDDEN,
                        "{method} {uri} {who:?}: {body}"
                    );
                    assert!(body.contains("<Code>"), "S3 XML: {body}");
                    if who.is_none() || who == Some(USER) {
                        assert!(body.contains("<Code>AccessDenied</Code>"), "{body}");
                    }
                }
            }
            assert!(layer.heals.lock().unwrap().is_empty());
        }

        #[tokio::test]
        async fn bad_calls_are_s3_errors() {
            let layer = Arc::new(Stub::default());
            let cases = [
                (
                    "POST",
                    "/quarry/admin/v1/heal?bucket=absent",
                    404,
                    "NoSuchBucket",
                ),
                (
                    "POST",
                    "/quarry/admin/v1/heal?prefix=x",
                    400,
                    "InvalidArgument",
                ),
                ("GET", "/quarry/admin/v1/heal", 405, "MethodNotAllowed"),
                ("GET", "/quarry/admin/v1/nope", 400, "InvalidRequest"),
            ];
            for (method, uri, status, code) in cases {
                let (got, body) = send(layer.clone(), request(method, uri, Some(ROOT))).await;
                assert_eq!(got.as_u16(), status, "{method} {uri}: {body}");
                assert!(body.contains(&format!("<Code>{code}</Code>")), "{body}");
            }
        }
    }
}
