//! Server-side encryption in the front end: which key a write gets and how a read opens it.
//!
//! - SSE-C (`x-amz-server-side-encryption-customer-{algorithm,key,key-MD5}`): the object gets
//!   a random key sealed under the customer's key ([`quarry_crypt::CustomerKey`]); the customer
//!   key is never stored, and a wrong one fails to unseal. Refused over plain HTTP unless the
//!   operator allows it ([`SseConfig::allow_http_sse_c`], `QUARRY_SSE_C_ALLOW_HTTP=1`).
//! - SSE-S3 (`x-amz-server-side-encryption: AES256`) and SSE-KMS (`aws:kms`, a key id, an
//!   encryption context): a data key from the key service ([`quarry_crypt::Kms`]) sealed under
//!   the named master key (the default for SSE-S3).
//! - Bucket default encryption (the `encryption` bucket configuration): a write without SSE
//!   headers gets the bucket's rule.
//!
//! Every sealed key is bound to the bucket and key (and the SSE-KMS context), so metadata moved
//! to another object does not open. The object layer seals and opens the data
//! (`quarry_object::Encryption`, `KeyOpener`).

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::HeaderMap;
use quarry_crypt::keys::{context, CUSTOMER_KEY_ID};
use quarry_crypt::{CryptError, CustomerKey, Kms, SealedKey};
use quarry_object::{Encryption, KeyOpener, ObjectInfo, PartKeyOpener};

use crate::api_error::{ApiError, ApiResult};
use crate::error::S3ErrorCode;
use crate::headers::set_header;

/// How the front end encrypts: the key service, and whether SSE-C may travel over plain HTTP.
#[derive(Clone, Default)]
pub struct SseConfig {
    /// The key service for SSE-S3 and SSE-KMS; `None`: those are refused (SSE-C still works).
    pub kms: Option<Arc<dyn Kms>>,
    /// Accept SSE-C keys over plain HTTP (AWS refuses them; for local tests only).
    pub allow_http_sse_c: bool,
}

impl std::fmt::Debug for SseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseConfig")
            .field("kms_keys", &self.kms.as_ref().map(|k| k.key_ids()))
            .field("allow_http_sse_c", &self.allow_http_sse_c)
            .finish()
    }
}

impl SseConfig {
    /// The configuration from the environment (`var` reads a variable):
    /// - `QUARRY_KMS_SECRET_KEY`: master keys, `name:base64-of-32-bytes`, several separated by
    ///   commas (MinIO's `MINIO_KMS_SECRET_KEY` form);
    /// - `QUARRY_KMS_KEY_FILE`: a file of such entries, one per line (mode 0600);
    /// - `QUARRY_KMS_DEFAULT_KEY`: the key SSE-S3 and SSE-KMS without a key id use (default:
    ///   the first);
    /// - `QUARRY_SSE_C_ALLOW_HTTP=1`: accept SSE-C keys over plain HTTP (local tests only).
    ///
    /// No key given: no key service (SSE-S3 and SSE-KMS are refused, SSE-C works). Errors say
    /// what is wrong without any key bytes.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<SseConfig, String> {
        let default = var("QUARRY_KMS_DEFAULT_KEY").filter(|v| !v.is_empty());
        let inline = var("QUARRY_KMS_SECRET_KEY").filter(|v| !v.is_empty());
        let file = var("QUARRY_KMS_KEY_FILE").filter(|v| !v.is_empty());
        let kms: Option<Arc<dyn Kms>> = match (inline, file) {
            (Some(_), Some(_)) => {
                return Err("give QUARRY_KMS_SECRET_KEY or QUARRY_KMS_KEY_FILE, not both".into())
            }
            (Some(text), None) => Some(Arc::new(
                quarry_crypt::LocalKms::parse(&text, default.as_deref())
                    .map_err(|e| format!("QUARRY_KMS_SECRET_KEY: {e}"))?,
            )),
            (None, Some(path)) => Some(Arc::new(
                quarry_crypt::LocalKms::from_file(std::path::Path::new(&path), default.as_deref())
                    .map_err(|e| format!("QUARRY_KMS_KEY_FILE: {e}"))?,
            )),
            (None, None) => None,
        };
        let allow_http_sse_c = match var("QUARRY_SSE_C_ALLOW_HTTP").as_deref() {
            None | Some("") | Some("0") | Some("false") => false,
            Some("1") | Some("true") => true,
            Some(other) => {
                return Err(format!(
                    "QUARRY_SSE_C_ALLOW_HTTP={other:?}: expected 1 or 0"
                ))
            }
        };
        Ok(SseConfig {
            kms,
            allow_http_sse_c,
        })
    }
}

/// The name of the bucket configuration document holding the default encryption rule.
pub const BUCKET_ENCRYPTION: &str = "encryption";

const SSE: &str = "x-amz-server-side-encryption";
const KMS_KEY_ID: &str = "x-amz-server-side-encryption-aws-kms-key-id";
const KMS_CONTEXT: &str = "x-amz-server-side-encryption-context";
const BUCKET_KEY: &str = "x-amz-server-side-encryption-bucket-key-enabled";
/// The SSE-C headers of the object a request reads or writes.
pub const CUSTOMER: &str = "x-amz-server-side-encryption-customer-";
/// The SSE-C headers of a copy's source.
pub const COPY_SOURCE_CUSTOMER: &str = "x-amz-copy-source-server-side-encryption-customer-";

/// Record entries (see `quarry_object::Encryption::record`).
pub(crate) const KIND: &str = "kind";
pub(crate) const SEALED: &str = "sealed-key";
pub(crate) const KEY_ID: &str = "kms-key-id";
pub(crate) const CONTEXT: &str = "kms-context";
const BUCKET_KEY_ENABLED: &str = "bucket-key";

/// The kinds, as recorded and as sent in `x-amz-server-side-encryption`.
const AES256: &str = "AES256";
const AWS_KMS: &str = "aws:kms";
pub(crate) const SSE_C: &str = "SSE-C";

/// What a write asks for.
#[derive(Debug)]
pub(crate) enum SseRequest {
    S3,
    Kms {
        key_id: Option<String>,
        /// The encryption context as sent (base64 of a JSON object).
        context: Option<String>,
    },
    C(CustomerKey),
}

fn text<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).map(|v| v.to_str().unwrap_or("").trim())
}

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(S3ErrorCode::InvalidArgument, msg)
}

/// The SSE-C key of `prefix`'s headers (`CUSTOMER` or `COPY_SOURCE_CUSTOMER`), checked as AWS
/// does: algorithm AES256, a 256-bit key, its MD5. `None` when none of them is sent.
pub(crate) fn customer_key(
    h: &HeaderMap,
    prefix: &str,
    secure: bool,
    allow_http: bool,
) -> ApiResult<Option<CustomerKey>> {
    let alg = text(h, &format!("{prefix}algorithm"));
    let key = text(h, &format!("{prefix}key"));
    let md5 = text(h, &format!("{prefix}key-md5"));
    if alg.is_none() && key.is_none() && md5.is_none() {
        return Ok(None);
    }
    if !secure && !allow_http {
        return Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "Requests specifying Server Side Encryption with Customer provided keys must be made over a secure connection.",
        ));
    }
    match alg {
        None => {
            return Err(invalid(
                "Requests specifying Server Side Encryption with Customer provided keys must provide a valid encryption algorithm.",
            ))
        }
        Some(AES256) => {}
        Some(_) => {
            return Err(invalid(
                "The encryption algorithm specified is not valid: the valid value is AES256.",
            ))
        }
    }
    let Some(key) = key.filter(|k| !k.is_empty()) else {
        return Err(invalid(
            "Requests specifying Server Side Encryption with Customer provided keys must provide an appropriate secret key.",
        ));
    };
    let Some(md5) = md5.filter(|m| !m.is_empty()) else {
        return Err(invalid(
            "Requests specifying Server Side Encryption with Customer provided keys must provide the client calculated MD5 of the secret key.",
        ));
    };
    CustomerKey::from_headers(key, md5)
        .map(Some)
        .map_err(|e| match e {
            CryptError::BadCustomerKey(why) if why.contains("MD5 does not match") => invalid(
                "The calculated MD5 hash of the key did not match the hash that was provided.",
            ),
            _ => invalid("The secret key was invalid for the specified algorithm."),
        })
}

/// GET and HEAD take only the SSE-C headers: asking for SSE-S3 or SSE-KMS there is an error,
/// as in AWS.
pub(crate) fn refuse_write_headers_on_read(h: &HeaderMap) -> ApiResult<()> {
    for name in [SSE, KMS_KEY_ID, KMS_CONTEXT] {
        if h.contains_key(name) {
            return Err(invalid(format!(
                "The {name} header is not supported for this operation."
            )));
        }
    }
    Ok(())
}

/// The SSE a write's headers ask for (`None`: no header; the bucket default may apply).
pub(crate) fn write_request(
    h: &HeaderMap,
    secure: bool,
    cfg: &SseConfig,
) -> ApiResult<Option<SseRequest>> {
    let customer = customer_key(h, CUSTOMER, secure, cfg.allow_http_sse_c)?;
    let sse = text(h, SSE);
    let key_id = text(h, KMS_KEY_ID).filter(|k| !k.is_empty());
    let ctx = text(h, KMS_CONTEXT).filter(|k| !k.is_empty());
    if let Some(c) = customer {
        if sse.is_some() || key_id.is_some() {
            return Err(invalid(
                "Server Side Encryption with Customer provided key is incompatible with the encryption method specified",
            ));
        }
        return Ok(Some(SseRequest::C(c)));
    }
    match sse {
        None => {
            if key_id.is_some() || ctx.is_some() {
                return Err(invalid(
                    "Server Side Encryption with AWS KMS managed key requires HTTP header x-amz-server-side-encryption : aws:kms",
                ));
            }
            Ok(None)
        }
        Some(AES256) => {
            if key_id.is_some() || ctx.is_some() {
                return Err(invalid(
                    "A KMS key id or context is only valid with x-amz-server-side-encryption: aws:kms",
                ));
            }
            Ok(Some(SseRequest::S3))
        }
        Some(AWS_KMS) => {
            if let Some(c) = ctx {
                let json = STANDARD
                    .decode(c)
                    .map_err(|_| invalid("The encryption context is not valid base64."))?;
                let ok = serde_json::from_slice::<BTreeMap<String, String>>(&json).is_ok();
                if !ok {
                    return Err(invalid(
                        "The encryption context must be a JSON object of string values.",
                    ));
                }
            }
            Ok(Some(SseRequest::Kms {
                key_id: key_id.map(str::to_string),
                context: ctx.map(str::to_string),
            }))
        }
        Some(other) => Err(invalid(format!(
            "The encryption method {other:?} is not supported (AES256 or aws:kms)."
        ))),
    }
}

/// `arn:aws:kms:...:key/NAME` or `NAME`: the key service's name.
fn key_name(id: &str) -> &str {
    id.rsplit_once(":key/").map_or(id, |(_, n)| n)
}

pub(crate) fn kms(cfg: &SseConfig) -> ApiResult<&Arc<dyn Kms>> {
    cfg.kms.as_ref().ok_or_else(|| {
        ApiError::new(
            S3ErrorCode::NotImplemented,
            "Server-side encryption with server-managed keys needs a key service: start the server with QUARRY_KMS_SECRET_KEY (name:base64 of 32 bytes) or QUARRY_KMS_KEY_FILE.",
        )
    })
}

fn kms_error(e: CryptError) -> ApiError {
    match e {
        CryptError::NoSuchKey(name) => ApiError::new(
            S3ErrorCode::InvalidArgument,
            format!("The KMS key {name:?} does not exist."),
        ),
        // Never a key's bytes: the messages name keys only.
        e => {
            tracing::error!(error = %e, "key service failure");
            ApiError::new(S3ErrorCode::InternalError, "The key service failed.")
        }
    }
}

/// The binding of an object's sealed key: bucket, key, and the SSE-KMS context.
pub(crate) fn binding(bucket: &str, key: &str, kms_context: Option<&str>) -> Vec<u8> {
    match kms_context {
        Some(c) => context(bucket, key, &[("kms-context", c)]),
        None => context(bucket, key, &[]),
    }
}

/// The encryption of a new object at `bucket`/`key` for `req` (a new random object key,
/// sealed).
pub(crate) fn new_encryption(
    cfg: &SseConfig,
    bucket: &str,
    key: &str,
    req: &SseRequest,
    bucket_key: bool,
) -> ApiResult<Encryption> {
    let mut record = BTreeMap::new();
    let (object_key, etag_is_md5) = match req {
        SseRequest::C(ck) => {
            let ok = quarry_crypt::ObjectKey::random().map_err(kms_error)?;
            let sealed = ok
                .seal(CUSTOMER_KEY_ID, ck.secret(), &binding(bucket, key, None))
                .map_err(kms_error)?;
            record.insert(KIND.to_string(), SSE_C.to_string());
            record.insert(SEALED.to_string(), sealed.encode());
            (ok, false)
        }
        SseRequest::S3 => {
            let kms = kms(cfg)?;
            let id = kms.default_key_id().to_string();
            let (ok, sealed) = kms
                .generate(&id, &binding(bucket, key, None))
                .map_err(kms_error)?;
            record.insert(KIND.to_string(), AES256.to_string());
            record.insert(SEALED.to_string(), sealed.encode());
            (ok, true)
        }
        SseRequest::Kms { key_id, context } => {
            let kms = kms(cfg)?;
            let id = key_id
                .as_deref()
                .map(key_name)
                .unwrap_or(kms.default_key_id())
                .to_string();
            if !kms.has_key(&id) {
                return Err(kms_error(CryptError::NoSuchKey(id)));
            }
            let (ok, sealed) = kms
                .generate(&id, &binding(bucket, key, context.as_deref()))
                .map_err(kms_error)?;
            record.insert(KIND.to_string(), AWS_KMS.to_string());
            record.insert(SEALED.to_string(), sealed.encode());
            record.insert(KEY_ID.to_string(), id);
            if let Some(c) = context {
                record.insert(CONTEXT.to_string(), c.clone());
            }
            (ok, false)
        }
    };
    if bucket_key {
        record.insert(BUCKET_KEY_ENABLED.to_string(), "true".to_string());
    }
    Ok(Encryption {
        key: object_key,
        record,
        etag_is_md5,
    })
}

/// Whether the request asks for an S3 bucket key (accepted and echoed; every object has its
/// own data key here anyway).
pub(crate) fn bucket_key_requested(h: &HeaderMap) -> bool {
    text(h, BUCKET_KEY).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn is_sse_c(info: &ObjectInfo) -> bool {
    info.encryption.get(KIND).map(String::as_str) == Some(SSE_C)
}

/// Checks a read's SSE-C headers against the object, as AWS does: an SSE-C object needs its
/// key; SSE-C headers on another object are refused.
pub(crate) fn check_read_headers(
    info: &ObjectInfo,
    customer: Option<&CustomerKey>,
) -> ApiResult<()> {
    match (is_sse_c(info), customer) {
        (true, None) => Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object.",
        )),
        (false, Some(_)) => Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "The encryption parameters are not applicable to this object.",
        )),
        _ => Ok(()),
    }
}

/// Opens the object key of `info` (checks an SSE-C key without reading data: HEAD).
pub(crate) fn open_key(
    cfg: &SseConfig,
    info: &ObjectInfo,
    customer: Option<&CustomerKey>,
) -> ApiResult<quarry_crypt::ObjectKey> {
    check_read_headers(info, customer)?;
    let sealed = info
        .encryption
        .get(SEALED)
        .ok_or_else(|| ApiError::new(S3ErrorCode::InternalError, "The object's sealed key is missing."))
        .and_then(|s| {
            SealedKey::decode(s).map_err(|e| {
                tracing::error!(bucket = %info.bucket, key = %info.key, error = %e, "unreadable sealed key");
                ApiError::new(S3ErrorCode::InternalError, "The object's sealed key is unreadable.")
            })
        })?;
    match customer {
        Some(ck) => sealed
            .unseal(ck.secret(), &binding(&info.bucket, &info.key, None))
            .map_err(|_| {
                ApiError::new(
                    S3ErrorCode::InvalidArgument,
                    "The provided encryption key does not match the key the object was stored with.",
                )
            }),
        None => {
            let ctx = info.encryption.get(CONTEXT).map(String::as_str);
            kms(cfg)?
                .unseal(&sealed, &binding(&info.bucket, &info.key, ctx))
                .map_err(kms_error)
        }
    }
}

/// What a read's opener refused, kept for the handler to answer with (the object layer only
/// sees that the key did not open).
pub(crate) type Refusal = Arc<std::sync::Mutex<Option<ApiError>>>;

/// A [`KeyOpener`] for a GET: [`open_key`] with the request's SSE-C key. Its refusal is put in
/// the returned slot; see [`refusal_or`].
pub(crate) fn opener(cfg: &SseConfig, customer: Option<CustomerKey>) -> (KeyOpener, Refusal) {
    let cfg = cfg.clone();
    let slot: Refusal = Arc::default();
    let put = slot.clone();
    let opener: KeyOpener = Arc::new(move |info: &ObjectInfo| {
        open_key(&cfg, info, customer.as_ref()).map_err(|e| {
            *put.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            quarry_object::Error::WrongKey
        })
    });
    (opener, slot)
}

/// The opener's own refusal if it made one, else `e` as the object layer gave it.
pub(crate) fn refusal_or(slot: &Refusal, e: quarry_object::Error) -> ApiError {
    slot.lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
        .unwrap_or_else(|| e.into())
}

/// A [`PartKeyOpener`] for UploadPart and UploadPartCopy: checks the part's SSE-C key against
/// its upload as AWS does (an SSE-C upload needs the key on every part, the same key; SSE-C
/// headers on another upload are refused) and opens an encrypted upload's key. Its refusal is
/// put in the returned slot (see [`refusal_or`]), the upload's record in the other (for the
/// response headers).
pub(crate) fn part_opener(
    cfg: &SseConfig,
    customer: Option<CustomerKey>,
) -> (PartKeyOpener, Refusal, UploadRecord) {
    let cfg = cfg.clone();
    let slot: Refusal = Arc::default();
    let record: UploadRecord = Arc::default();
    let (put, put_record) = (slot.clone(), record.clone());
    let opener = PartKeyOpener(Arc::new(move |info: &ObjectInfo| {
        *put_record.lock().unwrap_or_else(|p| p.into_inner()) = info.encryption.clone();
        let refuse = |e: ApiError| {
            *put.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            quarry_object::Error::WrongKey
        };
        match (is_sse_c(info), customer.as_ref()) {
            (true, None) => {
                return Err(refuse(ApiError::new(
                    S3ErrorCode::InvalidRequest,
                    "The multipart upload initiate requested encryption. Subsequent part requests must include the appropriate encryption parameters.",
                )))
            }
            (false, Some(_)) => {
                return Err(refuse(ApiError::new(
                    S3ErrorCode::InvalidRequest,
                    "The multipart upload initiate did not request encryption with a customer key: the encryption parameters are not applicable to its parts.",
                )))
            }
            _ => {}
        }
        if !info.is_encrypted() {
            return Ok(None);
        }
        open_key(&cfg, info, customer.as_ref())
            .map(Some)
            .map_err(|e| {
                if customer.is_some() {
                    refuse(ApiError::new(
                    S3ErrorCode::InvalidArgument,
                    "The provided encryption parameters did not match the ones used originally.",
                ))
                } else {
                    refuse(e)
                }
            })
    }));
    (opener, slot, record)
}

/// The encryption record of the upload a part was written to (see [`part_opener`]).
pub(crate) type UploadRecord = Arc<std::sync::Mutex<BTreeMap<String, String>>>;

/// The SSE response headers of an object (PUT, GET, HEAD, copies, multipart).
pub(crate) fn response_headers(out: &mut HeaderMap, info: &ObjectInfo, customer_md5: Option<&str>) {
    record_headers(out, &info.encryption, customer_md5);
}

/// The SSE response headers of an encryption record (an object's or an upload's).
pub(crate) fn record_headers(
    out: &mut HeaderMap,
    rec: &BTreeMap<String, String>,
    customer_md5: Option<&str>,
) {
    match rec.get(KIND).map(String::as_str) {
        Some(SSE_C) => {
            set_header(out, &format!("{CUSTOMER}algorithm"), AES256);
            if let Some(md5) = customer_md5 {
                set_header(out, &format!("{CUSTOMER}key-MD5"), md5);
            }
        }
        Some(AES256) => set_header(out, SSE, AES256),
        Some(AWS_KMS) => {
            set_header(out, SSE, AWS_KMS);
            if let Some(id) = rec.get(KEY_ID) {
                set_header(out, KMS_KEY_ID, id);
            }
            if let Some(c) = rec.get(CONTEXT) {
                set_header(out, KMS_CONTEXT, c);
            }
        }
        _ => {}
    }
    if rec.get(BUCKET_KEY_ENABLED).is_some_and(|v| v == "true") {
        set_header(out, BUCKET_KEY, "true");
    }
}

// ---- bucket default encryption (PutBucketEncryption, GetBucketEncryption, DeleteBucketEncryption) ----

/// A bucket's default encryption rule, as stored (JSON, versioned) in its `encryption`
/// configuration document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct BucketRule {
    /// Format of this document.
    v: u32,
    /// `AES256` or `aws:kms`.
    algorithm: String,
    kms_key_id: Option<String>,
    bucket_key: bool,
}

const RULE_VERSION: u32 = 1;

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SseConfigurationXml {
    #[serde(default, rename = "Rule")]
    rules: Vec<RuleXml>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RuleXml {
    apply_server_side_encryption_by_default: Option<DefaultXml>,
    bucket_key_enabled: Option<bool>,
}

#[derive(Debug, serde::Deserialize)]
struct DefaultXml {
    #[serde(rename = "SSEAlgorithm")]
    algorithm: String,
    #[serde(rename = "KMSMasterKeyID")]
    kms_key_id: Option<String>,
}

fn malformed(msg: &str) -> ApiError {
    ApiError::new(S3ErrorCode::MalformedXML, msg)
}

/// Parses a `ServerSideEncryptionConfiguration` into the rule to store, checking a KMS key
/// exists.
fn parse_rule(body: &[u8], cfg: &SseConfig) -> ApiResult<BucketRule> {
    let text = std::str::from_utf8(body).map_err(|_| malformed("The document is not UTF-8."))?;
    let doc: SseConfigurationXml = quick_xml::de::from_str(text)
        .map_err(|_| malformed("The XML you provided was not well-formed or did not validate against our published schema."))?;
    let [rule] = &doc.rules[..] else {
        return Err(malformed(
            "A ServerSideEncryptionConfiguration holds exactly one Rule.",
        ));
    };
    let Some(def) = &rule.apply_server_side_encryption_by_default else {
        return Err(malformed(
            "The Rule needs ApplyServerSideEncryptionByDefault.",
        ));
    };
    let algorithm = def.algorithm.trim();
    let kms_key_id = def
        .kms_key_id
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| key_name(k).to_string());
    match algorithm {
        AES256 if kms_key_id.is_some() => {
            return Err(invalid(
                "KMSMasterKeyID is only valid with SSEAlgorithm aws:kms.",
            ))
        }
        AES256 => {
            kms(cfg)?;
        }
        AWS_KMS => {
            let k = kms(cfg)?;
            if let Some(id) = &kms_key_id {
                if !k.has_key(id) {
                    return Err(kms_error(CryptError::NoSuchKey(id.clone())));
                }
            }
        }
        other => {
            return Err(malformed(&format!(
                "SSEAlgorithm {other:?} is not supported (AES256 or aws:kms)."
            )))
        }
    }
    Ok(BucketRule {
        v: RULE_VERSION,
        algorithm: algorithm.to_string(),
        kms_key_id,
        bucket_key: rule.bucket_key_enabled.unwrap_or(false),
    })
}

fn rule_xml(rule: &BucketRule) -> String {
    let mut inner = format!("<SSEAlgorithm>{}</SSEAlgorithm>", rule.algorithm);
    if let Some(id) = &rule.kms_key_id {
        inner.push_str(&format!(
            "<KMSMasterKeyID>{}</KMSMasterKeyID>",
            crate::error::xml_escape(id)
        ));
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ServerSideEncryptionConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Rule><ApplyServerSideEncryptionByDefault>{inner}</ApplyServerSideEncryptionByDefault><BucketKeyEnabled>{}</BucketKeyEnabled></Rule></ServerSideEncryptionConfiguration>",
        rule.bucket_key
    )
}

async fn stored_rule(
    layer: &dyn quarry_object::ObjectLayer,
    bucket: &str,
) -> ApiResult<Option<BucketRule>> {
    parse_stored_rule(
        bucket,
        layer.get_bucket_config(bucket, BUCKET_ENCRYPTION).await?,
    )
}

fn parse_stored_rule(bucket: &str, stored: Option<bytes::Bytes>) -> ApiResult<Option<BucketRule>> {
    let Some(raw) = stored else {
        return Ok(None);
    };
    match serde_json::from_slice::<BucketRule>(&raw) {
        Ok(r) if r.v == RULE_VERSION => Ok(Some(r)),
        Ok(r) => {
            tracing::error!(
                bucket,
                version = r.v,
                "bucket encryption rule of an unknown format"
            );
            Err(ApiError::new(
                S3ErrorCode::InternalError,
                "The bucket's encryption rule is of an unknown format.",
            ))
        }
        Err(e) => {
            tracing::error!(bucket, error = %e, "stored bucket encryption rule does not parse");
            Err(ApiError::new(
                S3ErrorCode::InternalError,
                "The bucket's encryption rule is unreadable.",
            ))
        }
    }
}

/// The bucket's default encryption for a write that sent no SSE header, from the node's
/// configuration cache (a change through this node at once, through another within
/// `quarry_object::CONFIG_CACHE_TTL`).
pub(crate) async fn bucket_default(
    ctx: &crate::server::ReqCtx,
    bucket: &str,
) -> ApiResult<Option<SseRequest>> {
    bucket_default_rule(ctx.layer(), bucket).await
}

/// [`bucket_default`] outside a request context (browser POST uploads).
pub(crate) async fn bucket_default_rule(
    layer: &dyn quarry_object::ObjectLayer,
    bucket: &str,
) -> ApiResult<Option<SseRequest>> {
    let stored = layer
        .get_bucket_config_cached(bucket, BUCKET_ENCRYPTION)
        .await?;
    Ok(
        parse_stored_rule(bucket, stored)?.map(|r| match r.algorithm.as_str() {
            AWS_KMS => SseRequest::Kms {
                key_id: r.kms_key_id,
                context: None,
            },
            _ => SseRequest::S3,
        }),
    )
}

/// The encryption a new object (a PUT, a copy, a multipart upload) gets from its request's
/// headers, else from the bucket's default rule, and the SSE-C key MD5 its answers echo.
pub(crate) async fn for_new_object(
    ctx: &crate::server::ReqCtx,
    bucket: &str,
    key: &str,
) -> ApiResult<(Option<Encryption>, Option<String>)> {
    let (headers, cfg) = (&ctx.parts.headers, &ctx.state.sse);
    encryption_for(headers, ctx.secure(), cfg, ctx.layer(), bucket, key).await
}

/// [`for_new_object`] of a write's SSE headers `headers` (a browser form's fields).
pub(crate) async fn encryption_for(
    headers: &HeaderMap,
    secure: bool,
    cfg: &SseConfig,
    layer: &dyn quarry_object::ObjectLayer,
    bucket: &str,
    key: &str,
) -> ApiResult<(Option<Encryption>, Option<String>)> {
    let sse = match write_request(headers, secure, cfg)? {
        Some(r) => Some(r),
        None => bucket_default_rule(layer, bucket).await?,
    };
    let encryption = sse
        .as_ref()
        .map(|r| new_encryption(cfg, bucket, key, r, bucket_key_requested(headers)))
        .transpose()?;
    let customer_md5 = match &sse {
        Some(SseRequest::C(c)) => Some(c.md5_b64()),
        _ => None,
    };
    Ok((encryption, customer_md5))
}

pub(crate) async fn put_bucket_encryption(
    ctx: &crate::server::ReqCtx,
    bucket: &str,
) -> ApiResult<axum::response::Response> {
    let expected_md5 = crate::headers::content_md5(&ctx.parts.headers)?;
    let body = ctx.small_body().await?;
    if let Some(md5) = expected_md5 {
        use md5::Digest;
        if md5::Md5::digest(&body)[..] != md5[..] {
            return Err(S3ErrorCode::BadDigest.into());
        }
    }
    let rule = parse_rule(&body, &ctx.state.sse)?;
    let doc = serde_json::to_vec(&rule)
        .map_err(|e| ApiError::new(S3ErrorCode::InternalError, e.to_string()))?;
    ctx.layer()
        .put_bucket_config(bucket, BUCKET_ENCRYPTION, bytes::Bytes::from(doc))
        .await?;
    Ok(axum::response::Response::new(axum::body::Body::empty()))
}

pub(crate) async fn get_bucket_encryption(
    ctx: &crate::server::ReqCtx,
    bucket: &str,
) -> ApiResult<axum::response::Response> {
    match stored_rule(ctx.layer(), bucket).await? {
        Some(rule) => Ok(crate::xml::xml_response(rule_xml(&rule))),
        None => Err(S3ErrorCode::ServerSideEncryptionConfigurationNotFoundError.into()),
    }
}

pub(crate) async fn delete_bucket_encryption(
    ctx: &crate::server::ReqCtx,
    bucket: &str,
) -> ApiResult<axum::response::Response> {
    ctx.layer()
        .delete_bucket_config(bucket, BUCKET_ENCRYPTION)
        .await?;
    let mut response = axum::response::Response::new(axum::body::Body::empty());
    *response.status_mut() = http::StatusCode::NO_CONTENT;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const KEY: &str = "pO3upElrwuEXSoFwCfnZPdSsmt/xWeFa0N9KgDijwVs=";
    const MD5: &str = "DWygnHRtgiJ77HCm+1rvHw==";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn code(r: ApiResult<Option<SseRequest>>) -> S3ErrorCode {
        r.unwrap_err().error.code
    }

    #[test]
    fn sse_c_headers_are_checked_as_aws_does() {
        let cfg = SseConfig {
            kms: None,
            allow_http_sse_c: true,
        };
        let alg = ("x-amz-server-side-encryption-customer-algorithm", "AES256");
        let key = ("x-amz-server-side-encryption-customer-key", KEY);
        let md5 = ("x-amz-server-side-encryption-customer-key-md5", MD5);
        assert!(matches!(
            write_request(&headers(&[alg, key, md5]), false, &cfg),
            Ok(Some(SseRequest::C(_)))
        ));
        for bad in [
            vec![alg],
            vec![alg, key],
            vec![key, md5],
            vec![
                alg,
                key,
                (
                    "x-amz-server-side-encryption-customer-key-md5",
                    "AAAAAAAAAAAAAAAAAAAAAA==",
                ),
            ],
            vec![
                ("x-amz-server-side-encryption-customer-algorithm", "AES128"),
                key,
                md5,
            ],
            vec![
                alg,
                ("x-amz-server-side-encryption-customer-key", "c2hvcnQ="),
                md5,
            ],
            vec![alg, key, md5, ("x-amz-server-side-encryption", "AES256")],
        ] {
            assert_eq!(
                code(write_request(&headers(&bad), true, &cfg)),
                S3ErrorCode::InvalidArgument,
                "{bad:?}"
            );
        }
        // Over plain HTTP unless allowed.
        let strict = SseConfig::default();
        assert_eq!(
            code(write_request(&headers(&[alg, key, md5]), false, &strict)),
            S3ErrorCode::InvalidRequest
        );
        assert!(write_request(&headers(&[alg, key, md5]), true, &strict).is_ok());
    }

    #[test]
    fn bucket_rules_parse_and_render() {
        let kms: Arc<dyn Kms> = Arc::new(
            quarry_crypt::LocalKms::parse(
                &format!("testkey-1:{}", STANDARD.encode([1u8; 32])),
                None,
            )
            .unwrap(),
        );
        let cfg = SseConfig {
            kms: Some(kms),
            allow_http_sse_c: false,
        };
        let doc = |inner: &str| {
            format!("<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault>{inner}</ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>")
        };
        let r = parse_rule(doc("<SSEAlgorithm>AES256</SSEAlgorithm>").as_bytes(), &cfg).unwrap();
        assert_eq!(r.algorithm, "AES256");
        assert!(rule_xml(&r).contains("<SSEAlgorithm>AES256</SSEAlgorithm>"));
        let r = parse_rule(
            doc("<SSEAlgorithm>aws:kms</SSEAlgorithm><KMSMasterKeyID>testkey-1</KMSMasterKeyID>")
                .as_bytes(),
            &cfg,
        )
        .unwrap();
        assert_eq!(r.kms_key_id.as_deref(), Some("testkey-1"));
        for bad in [
            doc("<SSEAlgorithm>DES</SSEAlgorithm>"),
            doc("<SSEAlgorithm>aws:kms</SSEAlgorithm><KMSMasterKeyID>nope</KMSMasterKeyID>"),
            doc("<SSEAlgorithm>AES256</SSEAlgorithm><KMSMasterKeyID>testkey-1</KMSMasterKeyID>"),
            "<ServerSideEncryptionConfiguration></ServerSideEncryptionConfiguration>".to_string(),
            "<nope".to_string(),
        ] {
            assert!(parse_rule(bad.as_bytes(), &cfg).is_err(), "{bad}");
        }
        // Without a key service no rule can be set.
        assert!(parse_rule(
            doc("<SSEAlgorithm>AES256</SSEAlgorithm>").as_bytes(),
            &SseConfig::default()
        )
        .is_err());
    }

    #[test]
    fn sse_s3_and_kms_headers() {
        let cfg = SseConfig::default();
        assert!(matches!(
            write_request(
                &headers(&[("x-amz-server-side-encryption", "AES256")]),
                false,
                &cfg
            ),
            Ok(Some(SseRequest::S3))
        ));
        assert!(matches!(
            write_request(
                &headers(&[
                    ("x-amz-server-side-encryption", "aws:kms"),
                    ("x-amz-server-side-encryption-aws-kms-key-id", "testkey-1")
                ]),
                false,
                &cfg
            ),
            Ok(Some(SseRequest::Kms {
                key_id: Some(_),
                ..
            }))
        ));
        for bad in [
            vec![("x-amz-server-side-encryption", "AES512")],
            vec![("x-amz-server-side-encryption-aws-kms-key-id", "testkey-2")],
            vec![
                ("x-amz-server-side-encryption", "aws:kms"),
                ("x-amz-server-side-encryption-context", "!!"),
            ],
        ] {
            assert_eq!(
                code(write_request(&headers(&bad), false, &cfg)),
                S3ErrorCode::InvalidArgument,
                "{bad:?}"
            );
        }
        assert!(write_request(&HeaderMap::new(), false, &cfg)
            .unwrap()
            .is_none());
        assert_eq!(
            key_name("arn:aws:kms:us-east-1:1234:key/testkey-1"),
            "testkey-1"
        );
    }
}
