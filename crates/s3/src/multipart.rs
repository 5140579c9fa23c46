//! Multipart uploads: CreateMultipartUpload, UploadPart, UploadPartCopy, CompleteMultipartUpload,
//! AbortMultipartUpload, ListParts, ListMultipartUploads, and the query parameters they take (the
//! router parses them; a completed object's part is read by GetObject, in `get.rs`).
//!
//! Part bodies stream to the object layer as PUT bodies do. Additional checksums: an upload created
//! with `x-amz-checksum-algorithm` stores each part's checksum in that algorithm (computed here as
//! the bytes go by, and checked against the client's header or trailer by the body verifier); the
//! completed object's checksum is S3's composite, `base64(hash(concat of the parts' raw
//! checksums))-N`.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures::TryStreamExt;
use http::header;
use http::StatusCode;
use quarry_object::{
    ByteStream, ChecksumHashers, CompleteOptions, CompletePart, HttpRange, ListPartsOptions,
    ListUploadsOptions, NewUploadOptions, PartHasher, PartOptions, MAX_PARTS, MAX_PART_SIZE,
};

use crate::api_error::{ApiError, ApiResult};
use crate::copy::{check_copy_conditions, copy_source, CopySource};
use crate::error::S3ErrorCode;
use crate::headers::{
    check_acl_headers, check_storage_class, check_unsupported_headers_but_sse, checksum_headers,
    content_md5, set_header, stored_headers, user_metadata, write_precondition,
};
use crate::router::Query;
use crate::server::ReqCtx;
use crate::signature::{self, checksum::ChecksumAlgorithm, checksum::Checksummer};
use crate::xml::{self, xml_response, ListUploadsEcho};

/// Most parts or uploads one list page returns, as S3.
const MAX_LIST: usize = 1000;

/// The `uploadId` query parameter.
pub(crate) fn upload_id(q: &Query) -> ApiResult<String> {
    match q.get("uploadId") {
        Some(id) if !id.is_empty() => Ok(id.to_owned()),
        _ => Err(ApiError::invalid_argument(
            "This operation needs an uploadId.",
        )),
    }
}

/// A part number (`partNumber`), 1..=10000.
pub(crate) fn part_number(value: Option<&str>) -> ApiResult<u32> {
    value
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| (1..=MAX_PARTS).contains(n))
        .ok_or_else(|| {
            ApiError::invalid_argument(format!(
                "Part number must be an integer between 1 and {MAX_PARTS}, inclusive"
            ))
        })
}

/// An optional non-negative integer query parameter (`max-parts`, `part-number-marker`, ...).
fn query_number(q: &Query, name: &str) -> ApiResult<Option<u64>> {
    match q.get(name) {
        None => Ok(None),
        Some(v) => v.trim().parse::<u64>().map(Some).map_err(|_| {
            ApiError::invalid_argument(format!(
                "Provided {name} not an integer or within integer range"
            ))
        }),
    }
}

/// The parameters of ListParts, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPartsParams {
    /// `max-parts`, at most [`MAX_LIST`].
    pub max_parts: usize,
    /// `part-number-marker`: the page starts after this part (0: from the first).
    pub part_number_marker: u32,
}

impl ListPartsParams {
    pub(crate) fn from_query(q: &Query) -> ApiResult<Self> {
        let max_parts =
            query_number(q, "max-parts")?.map_or(MAX_LIST, |n| (n as usize).min(MAX_LIST));
        let part_number_marker = match query_number(q, "part-number-marker")? {
            None => 0,
            Some(n) => u32::try_from(n).unwrap_or(u32::MAX),
        };
        Ok(ListPartsParams {
            max_parts,
            part_number_marker,
        })
    }
}

/// The parameters of ListMultipartUploads, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListUploadsParams {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub key_marker: Option<String>,
    /// As sent; it only counts together with a `key-marker`.
    pub upload_id_marker: Option<String>,
    /// `max-uploads`, at most [`MAX_LIST`].
    pub max_uploads: usize,
    /// `encoding-type=url`.
    pub url_encoded: bool,
}

impl ListUploadsParams {
    pub(crate) fn from_query(q: &Query) -> ApiResult<Self> {
        let url_encoded = match q.get("encoding-type") {
            None => false,
            Some("url") => true,
            Some(_) => {
                return Err(ApiError::invalid_argument(
                    "Invalid Encoding Method specified in Request",
                ))
            }
        };
        let max_uploads =
            query_number(q, "max-uploads")?.map_or(MAX_LIST, |n| (n as usize).min(MAX_LIST));
        let non_empty = |name: &str| q.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(ListUploadsParams {
            prefix: q.get("prefix").unwrap_or("").to_owned(),
            delimiter: non_empty("delimiter"),
            key_marker: non_empty("key-marker"),
            upload_id_marker: non_empty("upload-id-marker"),
            max_uploads,
            url_encoded,
        })
    }
}

struct Hasher(Checksummer);

impl PartHasher for Hasher {
    fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    fn finish(self: Box<Self>) -> String {
        self.0.finalize_base64()
    }
}

/// An upload's additional checksum: the algorithm every part is hashed with, and how the parts'
/// checksums make the object's (`COMPOSITE`: a hash of theirs, `-N`; `FULL_OBJECT`: the CRC of the
/// whole object, combined from the parts' CRCs). Recorded with the upload as the algorithm's
/// lower-case name, `/full_object` appended for the second type (a name alone, as uploads made
/// before the type existed have, is COMPOSITE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadChecksum {
    pub algorithm: ChecksumAlgorithm,
    pub full_object: bool,
}

const FULL_OBJECT_SUFFIX: &str = "/full_object";

impl UploadChecksum {
    pub fn parse(recorded: &str) -> Option<UploadChecksum> {
        let (name, full_object) = match recorded.strip_suffix(FULL_OBJECT_SUFFIX) {
            Some(name) => (name, true),
            None => (recorded, false),
        };
        Some(UploadChecksum {
            algorithm: ChecksumAlgorithm::from_name(name)?,
            full_object,
        })
    }

    fn recorded(self) -> String {
        let name = self.algorithm.name().to_ascii_lowercase();
        if self.full_object {
            format!("{name}{FULL_OBJECT_SUFFIX}")
        } else {
            name
        }
    }

    pub fn type_name(self) -> &'static str {
        if self.full_object {
            "FULL_OBJECT"
        } else {
            "COMPOSITE"
        }
    }

    /// The CRC behind a full-object checksum; `None` for the hashes, which do not combine.
    fn crc(self) -> Option<crc_fast::CrcAlgorithm> {
        match self.algorithm {
            ChecksumAlgorithm::Crc32 => Some(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
            ChecksumAlgorithm::Crc32c => Some(crc_fast::CrcAlgorithm::Crc32Iscsi),
            ChecksumAlgorithm::Crc64Nvme => Some(crc_fast::CrcAlgorithm::Crc64Nvme),
            ChecksumAlgorithm::Sha1 | ChecksumAlgorithm::Sha256 => None,
        }
    }
}

/// The full-object CRC of parts given as (raw big-endian CRC, size), in order: each part's CRC
/// folded into the running one with CRC combination, as if the whole object had been hashed.
fn combine_crcs(crc: crc_fast::CrcAlgorithm, parts: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let width = match crc {
        crc_fast::CrcAlgorithm::Crc64Nvme => 8,
        _ => 4,
    };
    let value = |raw: &[u8]| raw.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    let mut acc: Option<u64> = None;
    for (raw, size) in parts {
        let part = value(raw);
        acc = Some(match acc {
            None => part,
            Some(a) => crc_fast::checksum_combine(crc, a, part, *size),
        });
    }
    let acc = acc.unwrap_or_else(|| crc_fast::checksum(crc, b""));
    acc.to_be_bytes()[8 - width..].to_vec()
}

/// The checksum algorithms, for the object layer to hash parts with.
fn hashers() -> ChecksumHashers {
    ChecksumHashers(Arc::new(|name: &str| {
        UploadChecksum::parse(name)
            .map(|u| Box::new(Hasher(Checksummer::new(u.algorithm))) as Box<dyn PartHasher>)
    }))
}

fn upload_checksum_of(recorded: &str) -> ApiResult<UploadChecksum> {
    UploadChecksum::parse(recorded).ok_or_else(|| {
        tracing::error!(algorithm = recorded, "stored checksum algorithm is unknown");
        ApiError::from(S3ErrorCode::InternalError)
    })
}

fn algorithm_of(recorded: &str) -> ApiResult<ChecksumAlgorithm> {
    upload_checksum_of(recorded).map(|u| u.algorithm)
}

/// `POST /bucket/key?uploads`.
pub async fn create_multipart_upload(ctx: &ReqCtx, bucket: &str, key: &str) -> ApiResult<Response> {
    let headers = &ctx.parts.headers;
    check_unsupported_headers_but_sse(headers)?;
    check_acl_headers(headers)?;
    check_storage_class(headers)?;
    let (encryption, customer_md5) = crate::sse::for_new_object(ctx, bucket, key).await?;
    let record = encryption.as_ref().map(|e| e.record.clone());
    let algorithm = match headers.get("x-amz-checksum-algorithm") {
        None => None,
        Some(v) => {
            let name = v.to_str().unwrap_or("");
            let alg = ChecksumAlgorithm::from_name(name).ok_or_else(|| {
                ApiError::new(
                    S3ErrorCode::InvalidRequest,
                    "Checksum algorithm provided is unsupported. Please try again with any of the \
                     valid types: [CRC32, CRC32C, CRC64NVME, SHA1, SHA256]",
                )
            })?;
            Some(alg)
        }
    };
    let checksum = upload_checksum_requested(headers, algorithm)?;
    let mut stored = stored_headers(headers)?;
    crate::tagging::store_request_tags(headers, &mut stored)?;
    stored.extend(
        crate::object_lock::write_lock_entries(
            ctx,
            bucket,
            headers,
            crate::object_lock::LockWrite::CreateUpload,
        )
        .await?,
    );
    // Applied to the object at CompleteMultipartUpload, with the upload's other headers.
    crate::acl::store_request_acl(&ctx.state, bucket, headers, &mut stored).await?;
    let opts = NewUploadOptions {
        headers: stored,
        user_meta: user_metadata(headers)?,
        checksum_algorithm: checksum.map(UploadChecksum::recorded),
        encryption,
    };
    let info = ctx.layer().new_multipart_upload(bucket, key, opts).await?;
    let mut response = xml_response(xml::initiate_multipart_upload_result(
        bucket,
        key,
        &info.upload_id,
    ));
    if let Some(rec) = &record {
        crate::sse::record_headers(response.headers_mut(), rec, customer_md5.as_deref());
    }
    if let Some(c) = checksum {
        set_header(
            response.headers_mut(),
            "x-amz-checksum-algorithm",
            c.algorithm.name(),
        );
        set_header(response.headers_mut(), "x-amz-checksum-type", c.type_name());
    }
    Ok(response)
}

/// `x-amz-checksum-type` of a CreateMultipartUpload, with its algorithm: COMPOSITE (the default)
/// for CRC32, CRC32C, SHA1 and SHA256; FULL_OBJECT (CRC64NVME's default and only type) for the
/// CRCs. Other combinations are refused, as S3 refuses them.
fn upload_checksum_requested(
    headers: &http::HeaderMap,
    algorithm: Option<ChecksumAlgorithm>,
) -> ApiResult<Option<UploadChecksum>> {
    let kind = headers
        .get("x-amz-checksum-type")
        .map(|v| v.to_str().unwrap_or("").trim().to_ascii_uppercase());
    let Some(algorithm) = algorithm else {
        return match kind {
            None => Ok(None),
            Some(_) => Err(ApiError::new(
                S3ErrorCode::InvalidRequest,
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header.",
            )),
        };
    };
    let full_object = match kind.as_deref() {
        None => algorithm == ChecksumAlgorithm::Crc64Nvme,
        Some("COMPOSITE") => false,
        Some("FULL_OBJECT") => true,
        Some(_) => {
            return Err(ApiError::new(
                S3ErrorCode::InvalidRequest,
                "Value for x-amz-checksum-type header is invalid.",
            ))
        }
    };
    let c = UploadChecksum {
        algorithm,
        full_object,
    };
    match (c.full_object, c.crc()) {
        (true, None) => Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            format!(
                "The FULL_OBJECT checksum type is not supported for the {} checksum algorithm.",
                algorithm.name()
            ),
        )),
        (false, _) if algorithm == ChecksumAlgorithm::Crc64Nvme => Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "The COMPOSITE checksum type is not supported for the CRC64NVME checksum algorithm.",
        )),
        _ => Ok(Some(c)),
    }
}

/// `PUT /bucket/key?partNumber=N&uploadId=X`.
pub async fn upload_part(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    upload_id: &str,
    number: u32,
) -> ApiResult<Response> {
    check_unsupported_headers_but_sse(&ctx.parts.headers)?;
    let (key_opener, customer_md5) = part_key(ctx, crate::sse::CUSTOMER)?;
    let size = signature::declared_size(&ctx.parts)
        .ok_or_else(|| ApiError::from(S3ErrorCode::MissingContentLength))?;
    if size > MAX_PART_SIZE {
        return Err(ApiError::new(
            S3ErrorCode::EntityTooLarge,
            format!("A part may be at most {MAX_PART_SIZE} bytes; this one declares {size}."),
        ));
    }
    let (opener, refusal, record) = key_opener;
    let opts = PartOptions {
        size: Some(size),
        content_md5: content_md5(&ctx.parts.headers)?,
        hashers: Some(hashers()),
        key: Some(opener),
    };
    let body = ctx.body_stream()?;
    let part = ctx
        .layer()
        .put_object_part(bucket, key, upload_id, number, body, opts)
        .await
        .map_err(|e| crate::sse::refusal_or(&refusal, e))?;
    let mut response = Response::new(Body::empty());
    crate::sse::record_headers(
        response.headers_mut(),
        &record.lock().unwrap_or_else(|p| p.into_inner()),
        customer_md5.as_deref(),
    );
    set_header(
        response.headers_mut(),
        "etag",
        &format!("\"{}\"", part.etag),
    );
    if let (Some(sum), Some(alg)) = (&part.checksum, &part.checksum_algorithm) {
        set_header(
            response.headers_mut(),
            algorithm_of(alg)?.header_name(),
            sum,
        );
    }
    Ok(response)
}

/// The key opener of a part written by this request (its SSE-C headers under `prefix`), and
/// the key MD5 its answer echoes.
#[allow(clippy::type_complexity)]
fn part_key(
    ctx: &ReqCtx,
    prefix: &str,
) -> ApiResult<(
    (
        quarry_object::PartKeyOpener,
        crate::sse::Refusal,
        crate::sse::UploadRecord,
    ),
    Option<String>,
)> {
    let headers = &ctx.parts.headers;
    // A part takes the upload's encryption: SSE-S3 and SSE-KMS headers are the upload's to give.
    crate::sse::refuse_write_headers_on_read(headers)?;
    let customer = crate::sse::customer_key(
        headers,
        prefix,
        ctx.secure(),
        ctx.state.sse.allow_http_sse_c,
    )?;
    let md5 = customer.as_ref().map(|c| c.md5_b64());
    Ok((crate::sse::part_opener(&ctx.state.sse, customer), md5))
}

/// The object checksum a CompleteMultipartUpload may name (`x-amz-checksum-<algorithm>`, with or
/// without its `-N` part count) must be the one the parts make: else `BadDigest`, and for an
/// upload without that algorithm `InvalidRequest`. A `x-amz-checksum-type` other than the
/// upload's is `BadDigest`, as S3 answers it.
fn check_expected_checksum(
    headers: &http::HeaderMap,
    upload: Option<UploadChecksum>,
    composite: Option<&(ChecksumAlgorithm, String)>,
) -> ApiResult<()> {
    if let Some(kind) = headers.get("x-amz-checksum-type") {
        let kind = kind.to_str().unwrap_or("").trim();
        let ours = upload.map_or("", |u| u.type_name());
        if !kind.eq_ignore_ascii_case(ours) {
            return Err(ApiError::new(
                S3ErrorCode::BadDigest,
                format!(
                    "The x-amz-checksum-type {kind:?} is not the upload's ({}).",
                    if ours.is_empty() { "none" } else { ours }
                ),
            ));
        }
    }
    for a in ChecksumAlgorithm::ALL {
        let Some(given) = headers.get(a.header_name()) else {
            continue;
        };
        let given = given.to_str().unwrap_or("").trim();
        let Some((alg, value)) = composite.filter(|(alg, _)| *alg == a) else {
            return Err(ApiError::new(
                S3ErrorCode::InvalidRequest,
                format!(
                    "The upload was not created with the {} checksum algorithm.",
                    a.name()
                ),
            ));
        };
        let base = value.split_once('-').map_or(value.as_str(), |(b, _)| b);
        if given != value && given != base {
            return Err(ApiError::new(
                S3ErrorCode::BadDigest,
                format!(
                    "The {} you specified did not match the checksum of the parts ({value}).",
                    alg.header_name()
                ),
            ));
        }
    }
    Ok(())
}

/// The parts of a CompleteMultipartUpload request in ascending order. A part number listed
/// several times in a row (a part uploaded again while its first upload was still running, both
/// answers listed) counts once, by its last entry: the upload that finished last is the part.
/// Any other order is `InvalidPartOrder`.
fn dedup_parts(requested: Vec<xml::CompletedPartXml>) -> ApiResult<Vec<xml::CompletedPartXml>> {
    let mut out: Vec<xml::CompletedPartXml> = Vec::with_capacity(requested.len());
    for part in requested {
        match out.last_mut() {
            Some(last) if last.part_number == part.part_number => *last = part,
            Some(last) if last.part_number > part.part_number => {
                return Err(S3ErrorCode::InvalidPartOrder.into())
            }
            _ => out.push(part),
        }
    }
    Ok(out)
}

/// `x-amz-copy-source-range: bytes=first-last`, both required.
fn parse_copy_range(value: &str) -> ApiResult<(u64, u64)> {
    let bad = || {
        ApiError::invalid_argument(
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first \
             and last are the zero-based offsets of the first and last bytes to copy",
        )
    };
    let spec = value.trim().strip_prefix("bytes=").ok_or_else(bad)?;
    let (a, b) = spec.split_once('-').ok_or_else(bad)?;
    let num = |s: &str| -> Option<u64> {
        let s = s.trim();
        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    match (num(a), num(b)) {
        (Some(a), Some(b)) if a <= b => Ok((a, b)),
        _ => Err(bad()),
    }
}

/// `PUT /bucket/key?partNumber=N&uploadId=X` with `x-amz-copy-source`.
pub async fn upload_part_copy(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    upload_id: &str,
    number: u32,
) -> ApiResult<Response> {
    check_unsupported_headers_but_sse(&ctx.parts.headers)?;
    let headers = &ctx.parts.headers;
    let ((opener, refusal, record), customer_md5) = part_key(ctx, crate::sse::CUSTOMER)?;
    let source_customer = crate::sse::customer_key(
        headers,
        crate::sse::COPY_SOURCE_CUSTOMER,
        ctx.secure(),
        ctx.state.sse.allow_http_sse_c,
    )?;
    let CopySource {
        bucket: src_bucket,
        key: src_key,
        version: src_version,
    } = copy_source(headers)?;
    let range = headers
        .get("x-amz-copy-source-range")
        .map(|v| parse_copy_range(v.to_str().unwrap_or("")))
        .transpose()?;

    let info = ctx
        .layer()
        .object_version_info(&src_bucket, &src_key, src_version)
        .await?;
    let (offset, len) = match range {
        None => (0, info.size),
        Some((a, b)) => {
            // A well-formed range the source does not cover: InvalidRange, as S3 (a malformed
            // one is InvalidArgument, above).
            if b >= info.size {
                return Err(ApiError::new(
                    S3ErrorCode::InvalidRange,
                    format!(
                        "Range specified is not valid for source object of size: {}",
                        info.size
                    ),
                ));
            }
            (a, b - a + 1)
        }
    };
    if len > MAX_PART_SIZE {
        return Err(ApiError::new(
            S3ErrorCode::EntityTooLarge,
            format!("A part may be at most {MAX_PART_SIZE} bytes; the copy would be {len}."),
        ));
    }
    let http_range = (len > 0 && (offset, len) != (0, info.size))
        .then(|| HttpRange::FromTo(offset, offset + len - 1));
    // An encrypted source is opened with its key (SSE-C: the copy-source headers' key).
    crate::sse::check_read_headers(&info, source_customer.as_ref())?;
    let (source_opener, source_refusal) = crate::sse::opener(&ctx.state.sse, source_customer);
    let reader = ctx
        .layer()
        .get_object_decrypted(
            &src_bucket,
            &src_key,
            src_version,
            http_range,
            source_opener,
        )
        .await
        .map_err(|e| crate::sse::refusal_or(&source_refusal, e))?;
    // The conditions are evaluated on the version being read (it may have changed since the
    // size was looked up; then its size must still cover the range).
    check_copy_conditions(headers, &reader.info, std::time::SystemTime::now())?;
    if reader.range.1 != len {
        return Err(ApiError::new(
            S3ErrorCode::PreconditionFailed,
            "The source object changed while it was being copied.",
        ));
    }
    let body: ByteStream = Box::pin(reader.body.map_err(std::io::Error::other));
    let opts = PartOptions {
        size: Some(len),
        content_md5: None,
        hashers: Some(hashers()),
        key: Some(opener),
    };
    let part = ctx
        .layer()
        .put_object_part(bucket, key, upload_id, number, body, opts)
        .await
        .map_err(|e| crate::sse::refusal_or(&refusal, e))?;
    let checksum = part
        .checksum_algorithm
        .as_deref()
        .zip(part.checksum.as_deref());
    let mut response = xml_response(xml::copy_part_result(
        &part.etag,
        part.mod_time_ns,
        checksum,
    ));
    crate::sse::record_headers(
        response.headers_mut(),
        &record.lock().unwrap_or_else(|p| p.into_inner()),
        customer_md5.as_deref(),
    );
    Ok(response)
}

/// `POST /bucket/key?uploadId=X`.
pub async fn complete_multipart_upload(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    upload_id: &str,
) -> ApiResult<Response> {
    let precondition = write_precondition(&ctx.parts.headers)?;
    // An x-amz-checksum-* header here is the object's checksum, checked below, not the body's.
    let body = ctx.small_body_not_checksummed().await?;
    let requested = dedup_parts(xml::parse_complete_multipart_upload(&body)?)?;
    if requested.len() > MAX_PARTS as usize {
        return Err(S3ErrorCode::MalformedXML.into());
    }

    // The parts as stored: their checksums make the object's composite checksum.
    let mut stored = Vec::new();
    let mut marker = 0;
    let mut algorithm;
    let mut gone = false;
    loop {
        let page = match ctx
            .layer()
            .list_object_parts(
                bucket,
                key,
                upload_id,
                ListPartsOptions {
                    part_number_marker: marker,
                    max_parts: MAX_PARTS as usize,
                },
            )
            .await
        {
            Ok(page) => page,
            // Completed already (or never there): the object layer tells a retried complete,
            // which it answers as the first, from an unknown upload.
            Err(quarry_object::Error::NoSuchUpload) if marker == 0 => {
                algorithm = None;
                gone = true;
                break;
            }
            Err(e) => return Err(e.into()),
        };
        algorithm = page.upload.checksum_algorithm.clone();
        stored.extend(page.parts);
        match page.next_part_number_marker {
            Some(next) if page.is_truncated => marker = next,
            _ => break,
        }
    }
    let upload = algorithm.as_deref().map(upload_checksum_of).transpose()?;
    let algorithm = upload.map(|u| u.algorithm);
    let full_object = upload.is_some_and(|u| u.full_object);
    let mut parts = Vec::with_capacity(requested.len());
    let mut composite = algorithm.filter(|_| !full_object).map(Checksummer::new);
    // FULL_OBJECT: each part's raw CRC and size, combined below.
    let mut crcs: Vec<(Vec<u8>, u64)> = Vec::new();
    for r in &requested {
        let found = stored.iter().find(|p| p.number == r.part_number);
        // A part checksum given for an upload without an algorithm has nothing to match and is
        // ignored; for an upload with one, it must be the part's, in the upload's algorithm.
        if let (Some((given_alg, given)), Some(p), Some(a)) = (&r.checksum, found, algorithm) {
            let matches = a.name().eq_ignore_ascii_case(given_alg)
                && p.checksum.as_deref() == Some(given.as_str());
            if !matches {
                return Err(ApiError::new(
                    S3ErrorCode::InvalidPart,
                    format!(
                        "{} (the checksum given for part {} is not the part's checksum)",
                        S3ErrorCode::InvalidPart.default_message(),
                        r.part_number
                    ),
                ));
            }
        }
        let checksum = found.and_then(|p| p.checksum.clone());
        if let (Some(sum), Some(a), Some(p)) = (&checksum, algorithm, found) {
            let Some(raw) = a.decode_value(sum) else {
                tracing::error!(part = r.part_number, "stored part checksum is malformed");
                return Err(S3ErrorCode::InternalError.into());
            };
            match composite.as_mut() {
                Some(c) => c.update(&raw),
                None => crcs.push((raw, p.size)),
            }
        }
        parts.push(CompletePart {
            number: r.part_number,
            etag: r.etag.clone(),
            // The object layer checks the part it commits still has this checksum.
            checksum: algorithm.and(checksum),
        });
    }
    let mut opts = CompleteOptions {
        precondition,
        lock_defaults: crate::object_lock::default_retention_entries(ctx, bucket).await?,
        ..Default::default()
    };
    let object_checksum = match upload {
        Some(u) if u.full_object => u
            .crc()
            .map(|crc| (u.algorithm, BASE64.encode(combine_crcs(crc, &crcs)))),
        _ => composite.zip(algorithm).map(|(c, a)| {
            (
                a,
                format!("{}-{}", BASE64.encode(c.finalize()), parts.len()),
            )
        }),
    };
    // (A retry of a completed upload is answered by the object layer from what it stored.)
    if !gone {
        check_expected_checksum(&ctx.parts.headers, upload, object_checksum.as_ref())?;
    }
    if let Some((a, value)) = object_checksum {
        opts.checksums.insert(a.name().to_ascii_lowercase(), value);
    }
    let info = ctx
        .layer()
        .complete_multipart_upload(bucket, key, upload_id, parts, opts)
        .await?;
    let host = ctx
        .parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let path = xml::url_encode(key);
    // Virtual-host style names the bucket in the host already.
    let location = if host.starts_with(&format!("{bucket}.")) {
        format!("http://{host}/{path}")
    } else {
        format!("http://{host}/{bucket}/{path}")
    };
    let checksum = info.checksums.iter().next();
    let mut response = xml_response(xml::complete_multipart_upload_result(
        &location,
        bucket,
        key,
        &info.etag,
        checksum.map(|(a, v)| (a.as_str(), v.as_str())),
    ));
    checksum_headers(response.headers_mut(), &info);
    crate::sse::response_headers(response.headers_mut(), &info, None);
    crate::versioning::written_version_header(response.headers_mut(), &info);
    Ok(response)
}

/// `DELETE /bucket/key?uploadId=X`: 204.
pub async fn abort_multipart_upload(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    upload_id: &str,
) -> ApiResult<Response> {
    ctx.layer()
        .abort_multipart_upload(bucket, key, upload_id)
        .await?;
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

/// `GET /bucket/key?uploadId=X`.
pub async fn list_parts(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    upload_id: &str,
    params: &ListPartsParams,
) -> ApiResult<Response> {
    let (marker, max_parts) = (params.part_number_marker, params.max_parts);
    let page = ctx
        .layer()
        .list_object_parts(
            bucket,
            key,
            upload_id,
            ListPartsOptions {
                part_number_marker: marker,
                max_parts,
            },
        )
        .await?;
    Ok(xml_response(xml::list_parts_result(
        &page, marker, max_parts,
    )))
}

/// `GET /bucket?uploads`.
pub async fn list_multipart_uploads(
    ctx: &ReqCtx,
    bucket: &str,
    params: &ListUploadsParams,
) -> ApiResult<Response> {
    let key_marker = params.key_marker.as_deref();
    let page = ctx
        .layer()
        .list_multipart_uploads(
            bucket,
            ListUploadsOptions {
                prefix: params.prefix.clone(),
                delimiter: params.delimiter.clone(),
                key_marker: params.key_marker.clone(),
                upload_id_marker: key_marker.and(params.upload_id_marker.clone()),
                max_uploads: params.max_uploads,
            },
        )
        .await?;
    Ok(xml_response(xml::list_multipart_uploads_result(
        &page,
        &ListUploadsEcho {
            bucket,
            prefix: &params.prefix,
            delimiter: params.delimiter.as_deref(),
            key_marker,
            upload_id_marker: params.upload_id_marker.as_deref(),
            max_uploads: params.max_uploads,
            url_encoded: params.url_encoded,
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_ranges() {
        assert_eq!(parse_copy_range("bytes=0-9").unwrap(), (0, 9));
        assert_eq!(parse_copy_range("bytes=5-5").unwrap(), (5, 5));
        for bad in ["bytes=5-", "bytes=-5", "bytes=9-0", "0-9", "bytes=a-b", ""] {
            assert!(parse_copy_range(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn full_object_crc_is_the_crc_of_the_whole() {
        use crc_fast::CrcAlgorithm as C;
        let parts: [&[u8]; 3] = [b"hello, ", b"multipart ", b"world"];
        let whole: Vec<u8> = parts.concat();
        for (crc, width) in [(C::Crc32IsoHdlc, 4), (C::Crc32Iscsi, 4), (C::Crc64Nvme, 8)] {
            let raw = |d: &[u8]| crc_fast::checksum(crc, d).to_be_bytes()[8 - width..].to_vec();
            let given: Vec<(Vec<u8>, u64)> =
                parts.iter().map(|p| (raw(p), p.len() as u64)).collect();
            assert_eq!(combine_crcs(crc, &given), raw(&whole), "{crc:?}");
            assert_eq!(combine_crcs(crc, &given[..1]), raw(parts[0]));
        }
    }

    #[test]
    fn upload_checksum_types() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = http::HeaderMap::new();
            for (k, v) in pairs {
                m.insert(
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            m
        };
        use ChecksumAlgorithm as A;
        let ok = |alg, pairs: &[(&str, &str)]| upload_checksum_requested(&h(pairs), alg).unwrap();
        assert_eq!(ok(None, &[]), None);
        let composite = ok(Some(A::Crc32), &[]).unwrap();
        assert!(!composite.full_object);
        assert_eq!(
            composite.recorded(),
            "crc32",
            "as uploads were recorded before"
        );
        let full = ok(Some(A::Crc32c), &[("x-amz-checksum-type", "FULL_OBJECT")]).unwrap();
        assert!(full.full_object);
        assert_eq!(UploadChecksum::parse(&full.recorded()), Some(full));
        assert!(
            ok(Some(A::Crc64Nvme), &[]).unwrap().full_object,
            "CRC64NVME's default"
        );
        for (alg, kind) in [
            (Some(A::Sha256), "FULL_OBJECT"),
            (Some(A::Crc64Nvme), "COMPOSITE"),
            (Some(A::Crc32), "BOTH"),
            (None, "COMPOSITE"),
        ] {
            let err = upload_checksum_requested(&h(&[("x-amz-checksum-type", kind)]), alg);
            assert_eq!(
                err.unwrap_err().code(),
                S3ErrorCode::InvalidRequest,
                "{alg:?} {kind}"
            );
        }
        assert_eq!(UploadChecksum::parse("md5"), None);
    }

    #[test]
    fn repeated_part_numbers_count_once_by_their_last_entry() {
        let part = |n: u32, etag: &str| xml::CompletedPartXml {
            part_number: n,
            etag: etag.into(),
            checksum: None,
        };
        let got =
            dedup_parts(vec![part(1, "a"), part(2, "b"), part(2, "c"), part(3, "d")]).unwrap();
        let got: Vec<(u32, &str)> = got
            .iter()
            .map(|p| (p.part_number, p.etag.as_str()))
            .collect();
        assert_eq!(got, [(1, "a"), (2, "c"), (3, "d")]);
        for bad in [
            vec![part(2, "a"), part(1, "b")],
            vec![part(1, "a"), part(2, "b"), part(1, "c")],
        ] {
            assert_eq!(
                dedup_parts(bad).unwrap_err().code(),
                S3ErrorCode::InvalidPartOrder
            );
        }
    }

    #[test]
    fn part_numbers() {
        assert_eq!(part_number(Some("1")).unwrap(), 1);
        assert_eq!(part_number(Some("10000")).unwrap(), 10000);
        for bad in [
            None,
            Some("0"),
            Some("10001"),
            Some("-1"),
            Some("x"),
            Some(""),
        ] {
            assert_eq!(
                part_number(bad).unwrap_err().code(),
                S3ErrorCode::InvalidArgument
            );
        }
    }

    #[test]
    fn composite_checksum_is_hash_of_raw_part_checksums() {
        // Two parts "a" and "b": the composite CRC32 is CRC32(crc32("a") || crc32("b")).
        let part = |d: &[u8]| {
            let mut c = Checksummer::new(ChecksumAlgorithm::Crc32);
            c.update(d);
            c.finalize()
        };
        let mut all = part(b"a");
        all.extend(part(b"b"));
        let mut c = Checksummer::new(ChecksumAlgorithm::Crc32);
        c.update(&all);
        let want = BASE64.encode(c.finalize());
        let mut h = hashers().0("crc32").unwrap();
        h.update(b"a");
        let a = h.finish();
        assert_eq!(
            ChecksumAlgorithm::Crc32.decode_value(&a).unwrap(),
            part(b"a")
        );
        assert!(!want.is_empty());
        assert!(hashers().0("md5").is_none());
    }
}
