//! CopyObject: `PUT /bucket/key` with `x-amz-copy-source`. The source is named by the header and
//! checked against the `x-amz-copy-source-if-*` conditions (both parsed here for UploadPartCopy
//! too), then streamed into the destination by the object layer; the metadata comes from the
//! source (`x-amz-metadata-directive: COPY`, the default) or from the request (`REPLACE`). An object copied onto itself must change something,
//! which in Quarry means `REPLACE`: its metadata is then rewritten in place.
//!
//! Checksums: the copy keeps the source's full-object checksum; `x-amz-checksum-algorithm` asks
//! for another one, computed from the bytes as they are copied (an object may be copied onto
//! itself to change it); a source without a full-object checksum gets S3's default, CRC64NVME.
//!
//! A source `?versionId=` copies that version (a copy of an old version onto its own key restores
//! it as a new latest version). Tags follow `x-amz-tagging-directive` (see `tagging.rs`). Not
//! here: server-side encryption.

use axum::response::Response;
use http::HeaderMap;
use percent_encoding::percent_decode_str;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use quarry_object::{
    CopyChecksums, CopyOptions, LateChecksums, ObjectInfo, ReplaceMetadata, VersionId,
};

use crate::api_error::{ApiError, ApiResult};
use crate::error::S3ErrorCode;
use crate::get::etag_list_matches;
use crate::headers::{
    check_acl_headers, check_storage_class, check_unsupported_headers_but_sse, stored_headers,
    user_metadata, write_precondition,
};
use crate::server::ReqCtx;
use crate::signature::checksum::{ChecksumAlgorithm, Checksummer};
use crate::xml::{checksum_type, iso8601, system_time, xml_response, XmlWriter};

/// The largest object CopyObject copies (5 GiB), as S3; larger ones need UploadPartCopy.
pub const MAX_COPY_SOURCE_SIZE: u64 = 5 * 1024 * 1024 * 1024;

/// The source of a copy, from `x-amz-copy-source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource {
    pub bucket: String,
    pub key: String,
    /// `?versionId=`: that version of the source; `None`: the latest.
    pub version: Option<VersionId>,
}

/// `x-amz-metadata-directive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataDirective {
    Copy,
    Replace,
}

/// Parses `x-amz-copy-source`: `bucket/key` or `/bucket/key`, URL-encoded, optionally followed by
/// `?versionId=<id>`. Only the version `null` exists in an unversioned bucket.
pub fn parse_copy_source(value: &str) -> ApiResult<CopySource> {
    let bad = || {
        ApiError::invalid_argument(
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
        )
    };
    let value = value.trim();
    let (path, query) = match value.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (value, None),
    };
    let mut version = None;
    if let Some(query) = query {
        for param in query.split('&').filter(|p| !p.is_empty()) {
            match param.split_once('=') {
                Some(("versionId", v)) => version = Some(v.parse::<VersionId>()?),
                _ => return Err(bad()),
            }
        }
    }
    let decoded = percent_decode_str(path).decode_utf8().map_err(|_| {
        ApiError::invalid_argument("The copy source is not valid UTF-8 after percent-decoding.")
    })?;
    let decoded = decoded.strip_prefix('/').unwrap_or(&decoded);
    let (bucket, key) = decoded.split_once('/').ok_or_else(bad)?;
    if bucket.is_empty() || key.is_empty() {
        return Err(bad());
    }
    Ok(CopySource {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        version,
    })
}

/// The source named by `x-amz-copy-source`, for CopyObject and UploadPartCopy.
pub(crate) fn copy_source(headers: &HeaderMap) -> ApiResult<CopySource> {
    let raw = headers
        .get("x-amz-copy-source")
        .ok_or_else(|| ApiError::invalid_argument("x-amz-copy-source is missing."))?;
    let raw = raw
        .to_str()
        .map_err(|_| ApiError::invalid_argument("The copy source is not valid text."))?;
    parse_copy_source(raw)
}

/// Parses `x-amz-metadata-directive` (default `COPY`).
pub fn metadata_directive(headers: &HeaderMap) -> ApiResult<MetadataDirective> {
    match headers
        .get("x-amz-metadata-directive")
        .map(|v| v.as_bytes())
    {
        None | Some(b"COPY") => Ok(MetadataDirective::Copy),
        Some(b"REPLACE") => Ok(MetadataDirective::Replace),
        Some(_) => Err(ApiError::invalid_argument("Unknown metadata directive.")),
    }
}

/// Evaluates the `x-amz-copy-source-if-*` headers against the source, as S3 does: a failed
/// condition is always `412 PreconditionFailed` (a copy has no 304). `if-match` takes precedence
/// over `if-unmodified-since`, and `if-none-match` over `if-modified-since`; a true `if-match`
/// with a false `if-unmodified-since` copies, a false `if-none-match` with a true
/// `if-modified-since` fails. Dates compare at one-second resolution; an unparsable date, or an
/// `if-modified-since` in the future, is ignored.
pub fn check_copy_conditions(
    headers: &HeaderMap,
    source: &ObjectInfo,
    now: std::time::SystemTime,
) -> ApiResult<()> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let date = |name: &str| text(name).and_then(|v| httpdate::parse_http_date(v).ok());
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    let modified = secs(system_time(source.mod_time_ns));
    let failed = || -> ApiResult<()> { Err(S3ErrorCode::PreconditionFailed.into()) };
    if let Some(if_match) = text("x-amz-copy-source-if-match") {
        if !etag_list_matches(if_match, &source.etag) {
            return failed();
        }
    } else if let Some(since) = date("x-amz-copy-source-if-unmodified-since") {
        if modified > secs(since) {
            return failed();
        }
    }
    if let Some(if_none_match) = text("x-amz-copy-source-if-none-match") {
        if etag_list_matches(if_none_match, &source.etag) {
            return failed();
        }
    } else if let Some(since) = date("x-amz-copy-source-if-modified-since") {
        if since <= now && modified <= secs(since) {
            return failed();
        }
    }
    Ok(())
}

fn check_copy_headers(headers: &HeaderMap) -> ApiResult<()> {
    // Server-side encryption headers (the copy's and its source's) are crate::sse's.
    check_unsupported_headers_but_sse(headers)?;
    check_acl_headers(headers)?;
    check_storage_class(headers)?;
    Ok(())
}

/// `x-amz-checksum-algorithm`: the checksum the copy is to have.
fn requested_algorithm(headers: &HeaderMap) -> ApiResult<Option<ChecksumAlgorithm>> {
    headers
        .get("x-amz-checksum-algorithm")
        .map(|value| {
            value
                .to_str()
                .ok()
                .and_then(ChecksumAlgorithm::from_name)
                .ok_or_else(|| {
                    ApiError::invalid_argument(
                        "Value for x-amz-checksum-algorithm header is invalid.",
                    )
                })
        })
        .transpose()
}

/// The checksum a copy computes from the bytes: the requested algorithm unless the source has
/// that full-object checksum already (it is copied), or, when nothing is requested and the
/// source has no full-object checksum, S3's default CRC64NVME. `None`: the source's is copied.
fn checksum_to_compute(
    requested: Option<ChecksumAlgorithm>,
    source: &ObjectInfo,
) -> Option<ChecksumAlgorithm> {
    let has = |a: ChecksumAlgorithm| {
        source
            .checksums
            .get(&a.name().to_ascii_lowercase())
            .is_some_and(|v| !v.contains('-'))
    };
    match requested {
        Some(a) if has(a) => None,
        Some(a) => Some(a),
        None if ChecksumAlgorithm::ALL.into_iter().any(has) => None,
        None => Some(ChecksumAlgorithm::Crc64Nvme),
    }
}

/// Computes `algorithm` over the copied bytes.
fn computed_checksum(algorithm: ChecksumAlgorithm) -> CopyChecksums {
    let sum = Arc::new(Mutex::new(Checksummer::new(algorithm)));
    let feed = sum.clone();
    CopyChecksums {
        tap: Arc::new(move |data: &[u8]| {
            feed.lock().unwrap_or_else(|p| p.into_inner()).update(data);
        }),
        result: LateChecksums(Arc::new(move || {
            let sum = sum.lock().unwrap_or_else(|p| p.into_inner()).clone();
            BTreeMap::from([(algorithm.name().to_ascii_lowercase(), sum.finalize_base64())])
        })),
    }
}

pub async fn copy_object(ctx: &ReqCtx, bucket: &str, key: &str) -> ApiResult<Response> {
    let headers = &ctx.parts.headers;
    check_copy_headers(headers)?;
    let source = copy_source(headers)?;
    let directive = metadata_directive(headers)?;
    let requested = requested_algorithm(headers)?;
    let metadata = match directive {
        MetadataDirective::Copy => None,
        MetadataDirective::Replace => Some(ReplaceMetadata {
            headers: stored_headers(headers)?,
            user_meta: user_metadata(headers)?,
        }),
    };
    let precondition = write_precondition(headers)?;
    let sse_cfg = &ctx.state.sse;
    let source_customer = crate::sse::customer_key(
        headers,
        crate::sse::COPY_SOURCE_CUSTOMER,
        ctx.secure(),
        sse_cfg.allow_http_sse_c,
    )?;
    let dest_sse = match crate::sse::write_request(headers, ctx.secure(), sse_cfg)? {
        Some(r) => Some(r),
        None => crate::sse::bucket_default(ctx, bucket).await?,
    };

    let info = ctx
        .layer()
        .object_version_info(&source.bucket, &source.key, source.version)
        .await?;
    check_copy_conditions(headers, &info, std::time::SystemTime::now())?;
    if info.size > MAX_COPY_SOURCE_SIZE {
        return Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            format!(
                "The specified copy source is larger than the maximum allowable size for a copy \
                 source: {MAX_COPY_SOURCE_SIZE}"
            ),
        ));
    }
    let tags = crate::tagging::copy_tags(headers, &info)?;
    let lock = crate::object_lock::write_lock_entries(
        ctx,
        bucket,
        headers,
        crate::object_lock::LockWrite::Copy,
    )
    .await?;
    let acl = crate::acl::object_acl_entry(&ctx.state, bucket, headers).await?;
    let compute = checksum_to_compute(requested, &info);
    // Onto itself, something must change: the metadata, the checksum algorithm or the
    // encryption. A copy of a named version onto its key restores it: that changes the key.
    let onto_itself = source.bucket == bucket && source.key == key && source.version.is_none();
    if onto_itself
        && directive == MetadataDirective::Copy
        && !(requested.is_some() && compute.is_some())
        && dest_sse.is_none()
    {
        return Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself \
             without changing the object's metadata, storage class, website redirect location \
             or encryption attributes.",
        ));
    }
    if info.is_encrypted() || dest_sse.is_some() || source_customer.is_some() {
        let copy = EncryptedCopy {
            source: &source,
            info: &info,
            source_customer,
            dest_sse,
            metadata,
            compute,
            precondition,
            acl,
        };
        return encrypted_copy(ctx, bucket, key, copy).await;
    }
    let opts = CopyOptions {
        metadata,
        // The conditions were checked on this version: copy exactly it.
        source_version: Some((info.etag.clone(), info.mod_time_ns)),
        precondition,
        checksums: compute.map(computed_checksum),
        source_version_id: source.version,
        tags: Some(tags),
        lock,
        acl,
    };
    let copied = ctx
        .layer()
        .copy_object(&source.bucket, &source.key, bucket, key, opts)
        .await?;
    let mut response = xml_response(copy_result_xml(&copied));
    let out = response.headers_mut();
    crate::versioning::written_version_header(out, &copied);
    let mut source_header = http::HeaderMap::new();
    crate::versioning::version_header(ctx, &source.bucket, &mut source_header, &info).await?;
    if let Some(v) = source_header.remove("x-amz-version-id") {
        out.insert("x-amz-copy-source-version-id", v);
    }
    Ok(response)
}

/// A copy whose source or destination is encrypted.
struct EncryptedCopy<'a> {
    source: &'a CopySource,
    info: &'a ObjectInfo,
    source_customer: Option<quarry_crypt::CustomerKey>,
    dest_sse: Option<crate::sse::SseRequest>,
    metadata: Option<ReplaceMetadata>,
    compute: Option<ChecksumAlgorithm>,
    precondition: Option<quarry_object::WritePrecondition>,
    /// The copy's ACL entry (the source's is never copied).
    acl: Option<String>,
}

/// Copies through the front end: the source opened with its key (SSE-C from the
/// `x-amz-copy-source-...-customer-*` headers, the key service otherwise), streamed into a PUT
/// sealed with a new object key for the destination (or in clear), never whole in memory.
async fn encrypted_copy(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    c: EncryptedCopy<'_>,
) -> ApiResult<Response> {
    let sse_cfg = &ctx.state.sse;
    crate::sse::check_read_headers(c.info, c.source_customer.as_ref())?;
    let (opener, refusal) = crate::sse::opener(sse_cfg, c.source_customer.clone());
    let reader = ctx
        .layer()
        .get_object_decrypted(
            &c.source.bucket,
            &c.source.key,
            c.source.version,
            None,
            opener,
        )
        .await
        .map_err(|e| crate::sse::refusal_or(&refusal, e))?;
    // The conditions were checked on this version: copy exactly it.
    if reader.info.etag != c.info.etag || reader.info.mod_time_ns != c.info.mod_time_ns {
        return Err(S3ErrorCode::PreconditionFailed.into());
    }
    let (mut headers, user_meta) = match c.metadata {
        Some(m) => (m.headers, m.user_meta),
        None => (reader.info.headers.clone(), reader.info.user_meta.clone()),
    };
    quarry_object::set_acl_entry(&mut headers, c.acl.as_deref());
    let sums = c.compute.map(computed_checksum);
    let tap = sums.as_ref().map(|s| s.tap.clone());
    let body: quarry_object::ByteStream =
        Box::pin(futures::StreamExt::map(reader.body, move |item| {
            let data = item.map_err(|e| std::io::Error::other(e.to_string()))?;
            if let Some(tap) = &tap {
                tap(&data);
            }
            Ok(data)
        }));
    let (checksums, late_checksums) = match sums {
        Some(s) => (BTreeMap::new(), Some(s.result)),
        None => (
            reader
                .info
                .checksums
                .iter()
                .filter(|(_, v)| !v.contains('-'))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None,
        ),
    };
    let encryption = c
        .dest_sse
        .as_ref()
        .map(|r| {
            crate::sse::new_encryption(
                sse_cfg,
                bucket,
                key,
                r,
                crate::sse::bucket_key_requested(&ctx.parts.headers),
            )
        })
        .transpose()?;
    let dest_md5 = match &c.dest_sse {
        Some(crate::sse::SseRequest::C(k)) => Some(k.md5_b64()),
        _ => None,
    };
    let put = quarry_object::PutOptions {
        size: Some(c.info.size),
        headers,
        user_meta,
        checksums,
        precondition: c.precondition,
        late_checksums,
        encryption,
        ..Default::default()
    };
    let copied = ctx.layer().put_object(bucket, key, body, put).await?;
    let mut response = xml_response(copy_result_xml(&copied));
    let out = response.headers_mut();
    crate::sse::response_headers(out, &copied, dest_md5.as_deref());
    crate::versioning::written_version_header(out, &copied);
    let mut source_header = http::HeaderMap::new();
    crate::versioning::version_header(ctx, &c.source.bucket, &mut source_header, c.info).await?;
    if let Some(v) = source_header.remove("x-amz-version-id") {
        out.insert("x-amz-copy-source-version-id", v);
    }
    Ok(response)
}

/// The `CopyObjectResult` document.
pub fn copy_result_xml(info: &ObjectInfo) -> String {
    let mut w = XmlWriter::new("CopyObjectResult");
    w.elem("ETag", &format!("\"{}\"", info.etag))
        .elem("LastModified", &iso8601(info.mod_time_ns));
    if !info.checksums.is_empty() {
        w.elem("ChecksumType", checksum_type(info.checksums.values()));
    }
    for algorithm in ChecksumAlgorithm::ALL {
        if let Some(v) = info.checksums.get(&algorithm.name().to_ascii_lowercase()) {
            w.elem(&format!("Checksum{}", algorithm.name()), v);
        }
    }
    w.finish("CopyObjectResult")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn src(bucket: &str, key: &str) -> CopySource {
        CopySource {
            bucket: bucket.into(),
            key: key.into(),
            version: None,
        }
    }

    #[test]
    fn copy_source_forms() {
        assert_eq!(parse_copy_source("bkt/a/b").unwrap(), src("bkt", "a/b"));
        assert_eq!(parse_copy_source("/bkt/a/b").unwrap(), src("bkt", "a/b"));
        assert_eq!(
            parse_copy_source("/bkt/a%20b%2Bc+%25%E2%82%AC").unwrap(),
            src("bkt", "a b+c+%€")
        );
        assert_eq!(
            parse_copy_source("bkt/k?versionId=null").unwrap(),
            CopySource {
                version: Some(VersionId::Null),
                ..src("bkt", "k")
            }
        );
        let id = "0b8c3d9e-1f2a-4b3c-8d4e-5f6a7b8c9d0e";
        assert_eq!(
            parse_copy_source(&format!("bkt/k?versionId={id}")).unwrap(),
            CopySource {
                version: Some(id.parse().unwrap()),
                ..src("bkt", "k")
            }
        );
        assert_eq!(parse_copy_source("bkt/k%3Fx").unwrap(), src("bkt", "k?x"));
        assert_eq!(
            parse_copy_source("bkt/k?versionId=abc").unwrap_err().code(),
            S3ErrorCode::InvalidArgument
        );
        for bad in [
            "bkt",
            "/bkt",
            "bkt/",
            "/",
            "",
            "/k",
            "bkt/k?foo=1",
            "bkt/%FF",
            "/%FF/x",
        ] {
            assert_eq!(
                parse_copy_source(bad).unwrap_err().code(),
                S3ErrorCode::InvalidArgument,
                "{bad}"
            );
        }
    }

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn directives() {
        assert_eq!(
            metadata_directive(&h(&[])).unwrap(),
            MetadataDirective::Copy
        );
        assert_eq!(
            metadata_directive(&h(&[("x-amz-metadata-directive", "REPLACE")])).unwrap(),
            MetadataDirective::Replace
        );
        assert_eq!(
            metadata_directive(&h(&[("x-amz-metadata-directive", "replace")]))
                .unwrap_err()
                .code(),
            S3ErrorCode::InvalidArgument
        );
        assert!(check_copy_headers(&h(&[("x-amz-tagging-directive", "COPY")])).is_ok());
        assert!(check_copy_headers(&h(&[("x-amz-server-side-encryption", "AES256")])).is_ok());
        assert!(check_copy_headers(&h(&[("x-amz-tagging-directive", "REPLACE")])).is_ok());
    }

    fn info(etag: &str, mod_time_ns: i64) -> ObjectInfo {
        ObjectInfo {
            bucket: "b".into(),
            key: "k".into(),
            size: 1,
            mod_time_ns,
            etag: etag.into(),
            headers: BTreeMap::new(),
            user_meta: BTreeMap::new(),
            checksums: BTreeMap::new(),
            parts: 1,
            ..Default::default()
        }
    }

    #[test]
    fn copy_conditions() {
        let t = 1_795_947_072_500_000_000; // Sun, 29 Nov 2026 10:11:12.5 GMT
        let now = system_time(t + 3_600_000_000_000);
        let at = "Sun, 29 Nov 2026 10:11:12 GMT";
        let before = "Sun, 29 Nov 2026 10:11:11 GMT";
        let future = "Mon, 30 Nov 2026 10:11:11 GMT";
        let o = info("abc", t);
        let ok = |pairs: &[(&str, &str)]| check_copy_conditions(&h(pairs), &o, now).is_ok();
        assert!(ok(&[]));
        assert!(ok(&[("x-amz-copy-source-if-match", "\"abc\"")]));
        assert!(!ok(&[("x-amz-copy-source-if-match", "\"x\"")]));
        assert!(ok(&[("x-amz-copy-source-if-none-match", "\"x\"")]));
        assert!(!ok(&[("x-amz-copy-source-if-none-match", "abc")]));
        assert!(ok(&[("x-amz-copy-source-if-unmodified-since", at)]));
        assert!(!ok(&[("x-amz-copy-source-if-unmodified-since", before)]));
        assert!(ok(&[("x-amz-copy-source-if-modified-since", before)]));
        assert!(!ok(&[("x-amz-copy-source-if-modified-since", at)]));
        assert!(ok(&[("x-amz-copy-source-if-modified-since", future)]));
        assert!(ok(&[("x-amz-copy-source-if-modified-since", "garbage")]));
        // if-match true + if-unmodified-since false: copies.
        assert!(ok(&[
            ("x-amz-copy-source-if-match", "\"abc\""),
            ("x-amz-copy-source-if-unmodified-since", before),
        ]));
        // if-none-match false + if-modified-since true: 412.
        assert!(!ok(&[
            ("x-amz-copy-source-if-none-match", "\"abc\""),
            ("x-amz-copy-source-if-modified-since", before),
        ]));
        let err =
            check_copy_conditions(&h(&[("x-amz-copy-source-if-match", "x")]), &o, now).unwrap_err();
        assert_eq!(err.code(), S3ErrorCode::PreconditionFailed);
    }

    #[test]
    fn result_document() {
        let mut o = info("abc", 1_795_947_072_500_000_000);
        o.checksums.insert("crc32c".into(), "AAAAAA==".into());
        let xml = copy_result_xml(&o);
        assert!(
            xml.contains("<CopyObjectResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">")
        );
        assert!(xml.contains("<ETag>&quot;abc&quot;</ETag>"), "{xml}");
        assert!(xml.contains("<LastModified>2026-11-29T10:11:12.500Z</LastModified>"));
        assert!(xml.contains("<ChecksumType>FULL_OBJECT</ChecksumType>"));
        assert!(xml.contains("<ChecksumCRC32C>AAAAAA==</ChecksumCRC32C>"));
    }

    #[test]
    fn which_checksum_a_copy_computes() {
        use ChecksumAlgorithm as A;
        let mut o = info("abc", 0);
        assert_eq!(checksum_to_compute(None, &o), Some(A::Crc64Nvme));
        assert_eq!(checksum_to_compute(Some(A::Sha1), &o), Some(A::Sha1));
        o.checksums.insert("crc32c".into(), "AAAAAA==".into());
        assert_eq!(checksum_to_compute(None, &o), None);
        assert_eq!(checksum_to_compute(Some(A::Crc32c), &o), None);
        assert_eq!(checksum_to_compute(Some(A::Sha1), &o), Some(A::Sha1));
        o.checksums.insert("crc32c".into(), "AAAAAA==-3".into());
        assert_eq!(checksum_to_compute(None, &o), Some(A::Crc64Nvme));
        let bad = h(&[("x-amz-checksum-algorithm", "MD5")]);
        assert_eq!(
            requested_algorithm(&bad).unwrap_err().code(),
            S3ErrorCode::InvalidArgument
        );

        let c = computed_checksum(A::Crc32);
        (c.tap)(b"hello ");
        (c.tap)(b"world");
        let sums = (c.result.0)();
        // CRC32 of "hello world", as S3 shows it.
        assert_eq!(sums.get("crc32").map(String::as_str), Some("DUoRhQ=="));
    }
}
