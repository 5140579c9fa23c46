//! Bucket versioning: Get/PutBucketVersioning and ListObjectVersions, and the `versionId`
//! parameter and `x-amz-version-id` header shared by the object operations.

use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use quarry_object::{
    DeleteResult, ListVersionsOptions, ListVersionsResult, ObjectInfo, VersionId, VersioningState,
};

use crate::api_error::{ApiError, ApiResult};
use crate::error::{S3Error, S3ErrorCode};
use crate::headers::set_header;
use crate::list::MAX_KEYS;
use crate::router::Query;
use crate::server::ReqCtx;
use crate::xml::{iso8601, parse_document, url_encode, xml_response, XmlWriter};

/// The `versionId` query parameter: `None` when absent; an empty or malformed id is
/// `InvalidArgument`, as S3.
pub fn version_param(q: &Query) -> ApiResult<Option<VersionId>> {
    match q.get("versionId") {
        None => Ok(None),
        Some(v) => v.parse::<VersionId>().map(Some).map_err(ApiError::from),
    }
}

/// Sets `x-amz-version-id` for an object of a bucket in `state`: a version id is always shown;
/// the null version only once versioning has been configured on the bucket.
pub fn set_version_header(out: &mut HeaderMap, version: VersionId, state: VersioningState) {
    if matches!(version, VersionId::Id(_)) || state.configured() {
        set_header(out, "x-amz-version-id", &version.to_string());
    }
}

/// `x-amz-version-id` for `info`, reading the bucket's state only when the version is null.
pub async fn version_header(
    ctx: &ReqCtx,
    bucket: &str,
    out: &mut HeaderMap,
    info: &ObjectInfo,
) -> ApiResult<()> {
    let state = match info.version_id {
        VersionId::Id(_) => VersioningState::Enabled,
        // From the node's configuration cache: a quorum read of the bucket's versioning on
        // every GET and HEAD of an unversioned bucket was most of their internode calls. A
        // change made through another node shows here within `CONFIG_CACHE_TTL`.
        VersionId::Null => ctx.layer().get_bucket_versioning_cached(bucket).await?,
    };
    set_version_header(out, info.version_id, state);
    Ok(())
}

/// `x-amz-version-id` on the answer to a write (PutObject, CompleteMultipartUpload, the new copy
/// of CopyObject): the new version's id; none for a null version. A suspended bucket's writes
/// make null versions and answer without the header, as AWS and the suite expect (reads of a
/// null version do name it: [`version_header`]).
pub fn written_version_header(out: &mut HeaderMap, info: &ObjectInfo) {
    if let VersionId::Id(_) = info.version_id {
        set_header(out, "x-amz-version-id", &info.version_id.to_string());
    }
}

/// The headers of a DELETE's outcome: the marker created or the version removed.
pub fn delete_headers(out: &mut HeaderMap, result: &DeleteResult) {
    if let Some(v) = result.version_id {
        set_header(out, "x-amz-version-id", &v.to_string());
    }
    if result.delete_marker {
        set_header(out, "x-amz-delete-marker", "true");
    }
}

/// `GET /bucket?versioning`.
pub async fn get_bucket_versioning(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let state = ctx.layer().get_bucket_versioning(bucket).await?;
    let root = "VersioningConfiguration";
    let mut w = XmlWriter::new(root);
    if state.configured() {
        w.elem("Status", state.as_str());
    }
    Ok(xml_response(w.finish(root)))
}

/// `PUT /bucket?versioning`: `Enabled` or `Suspended`. MFA delete is not supported.
pub async fn put_bucket_versioning(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let body = ctx.small_body().await?;
    let state = parse_versioning_configuration(&body)?;
    ctx.layer().bucket_info(bucket).await?;
    if let Some(state) = state {
        crate::object_lock::check_versioning_change(ctx, bucket, state).await?;
        ctx.layer().put_bucket_versioning(bucket, state).await?;
    }
    Ok(Response::new(Body::empty()))
}

/// The `Status` of a `VersioningConfiguration` document (`None`: no status given, nothing to
/// change). Any other status is `MalformedXML`; `MfaDelete` `Enabled` is `NotImplemented`.
pub fn parse_versioning_configuration(body: &[u8]) -> Result<Option<VersioningState>, S3Error> {
    let root = parse_document(body)?;
    if root.name != "VersioningConfiguration" {
        return Err(S3Error::new(
            S3ErrorCode::MalformedXML,
            format!(
                "expected a VersioningConfiguration document, found <{}>",
                root.name
            ),
        ));
    }
    if let Some(mfa) = root.child("MfaDelete") {
        match mfa.text.trim() {
            "Disabled" => {}
            "Enabled" => {
                return Err(S3Error::new(
                    S3ErrorCode::NotImplemented,
                    "MFA delete is not implemented by Quarry.",
                ))
            }
            other => {
                return Err(S3Error::new(
                    S3ErrorCode::MalformedXML,
                    format!("MfaDelete must be Enabled or Disabled, not {other:?}"),
                ))
            }
        }
    }
    match root.child("Status").map(|s| s.text.trim()) {
        None => Ok(None),
        Some("Enabled") => Ok(Some(VersioningState::Enabled)),
        Some("Suspended") => Ok(Some(VersioningState::Suspended)),
        Some(other) => Err(S3Error::new(
            S3ErrorCode::MalformedXML,
            format!("Status must be Enabled or Suspended, not {other:?}"),
        )),
    }
}

/// The parameters of ListObjectVersions, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListVersionsParams {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub key_marker: Option<String>,
    pub version_id_marker: Option<String>,
    pub max_keys: usize,
    pub encoding_url: bool,
}

impl ListVersionsParams {
    pub fn from_query(q: &Query) -> ApiResult<ListVersionsParams> {
        // The same max-keys and encoding-type rules as ListObjects.
        let list = crate::list::ListParams::from_query(q)?;
        let non_empty = |name: &str| q.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
        let key_marker = non_empty("key-marker");
        let version_id_marker = non_empty("version-id-marker");
        if let Some(v) = &version_id_marker {
            if key_marker.is_none() {
                return Err(ApiError::invalid_argument(
                    "A version-id marker cannot be specified without a key marker.",
                ));
            }
            v.parse::<VersionId>().map_err(ApiError::from)?;
        }
        Ok(ListVersionsParams {
            prefix: list.prefix,
            delimiter: list.delimiter,
            key_marker,
            version_id_marker,
            max_keys: list.max_keys.min(MAX_KEYS),
            encoding_url: list.encoding_url,
        })
    }

    fn enc(&self, s: &str) -> String {
        if self.encoding_url {
            url_encode(s)
        } else {
            s.to_owned()
        }
    }
}

/// `GET /bucket?versions`.
pub async fn list_object_versions(
    ctx: &ReqCtx,
    bucket: &str,
    params: &ListVersionsParams,
) -> ApiResult<Response> {
    let opts = ListVersionsOptions {
        prefix: params.prefix.clone(),
        delimiter: params.delimiter.clone(),
        key_marker: params.key_marker.clone(),
        version_id_marker: params
            .version_id_marker
            .as_deref()
            .map(str::parse)
            .transpose()?,
        max_keys: params.max_keys,
    };
    let page = ctx.layer().list_object_versions(bucket, opts).await?;
    Ok(xml_response(render_versions(bucket, params, &page)))
}

/// The `ListVersionsResult` document.
pub fn render_versions(
    bucket: &str,
    params: &ListVersionsParams,
    page: &ListVersionsResult,
) -> String {
    let root = "ListVersionsResult";
    let mut w = XmlWriter::new(root);
    w.elem("Name", bucket)
        .elem("Prefix", &params.enc(&params.prefix))
        .elem(
            "KeyMarker",
            &params.enc(params.key_marker.as_deref().unwrap_or("")),
        )
        .elem(
            "VersionIdMarker",
            params.version_id_marker.as_deref().unwrap_or(""),
        )
        .elem_display("MaxKeys", params.max_keys);
    if let Some(d) = &params.delimiter {
        w.elem("Delimiter", &params.enc(d));
    }
    if params.encoding_url {
        w.elem("EncodingType", "url");
    }
    w.elem_display("IsTruncated", page.is_truncated);
    if page.is_truncated {
        if let Some(k) = &page.next_key_marker {
            w.elem("NextKeyMarker", &params.enc(k));
        }
        if let Some(v) = page.next_version_id_marker {
            w.elem("NextVersionIdMarker", &v.to_string());
        }
    }
    for v in &page.versions {
        let name = if v.delete_marker {
            "DeleteMarker"
        } else {
            "Version"
        };
        w.open(name)
            .elem("Key", &params.enc(&v.key))
            .elem("VersionId", &v.version_id.to_string())
            .elem_display("IsLatest", v.is_latest)
            .elem("LastModified", &iso8601(v.mod_time_ns));
        if !v.delete_marker {
            w.elem("ETag", &format!("\"{}\"", v.etag))
                .elem_display("Size", v.size)
                .elem("StorageClass", "STANDARD");
        }
        w.owner().close(name);
    }
    for p in &page.common_prefixes {
        w.open("CommonPrefixes")
            .elem("Prefix", &params.enc(p))
            .close("CommonPrefixes");
    }
    w.finish(root)
}

/// A 204 for a DELETE, with its outcome's headers.
pub fn delete_response(result: &DeleteResult) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    delete_headers(response.headers_mut(), result);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioning_documents() {
        let doc = |s: &str| {
            format!(
                "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">{s}</VersioningConfiguration>"
            )
        };
        assert_eq!(
            parse_versioning_configuration(doc("<Status>Enabled</Status>").as_bytes()).unwrap(),
            Some(VersioningState::Enabled)
        );
        assert_eq!(
            parse_versioning_configuration(doc("<Status>Suspended</Status>").as_bytes()).unwrap(),
            Some(VersioningState::Suspended)
        );
        assert_eq!(
            parse_versioning_configuration(doc("").as_bytes()).unwrap(),
            None
        );
        for bad in [
            "<Status>enabled</Status>",
            "<Status></Status>",
            "<Status>Disabled</Status>",
        ] {
            assert_eq!(
                parse_versioning_configuration(doc(bad).as_bytes())
                    .unwrap_err()
                    .code,
                S3ErrorCode::MalformedXML,
                "{bad}"
            );
        }
        assert_eq!(
            parse_versioning_configuration(
                doc("<Status>Enabled</Status><MfaDelete>Enabled</MfaDelete>").as_bytes()
            )
            .unwrap_err()
            .code,
            S3ErrorCode::NotImplemented
        );
        assert_eq!(
            parse_versioning_configuration(b"<Other/>")
                .unwrap_err()
                .code,
            S3ErrorCode::MalformedXML
        );
    }

    #[test]
    fn null_version_header_only_once_versioning_was_configured() {
        let mut h = HeaderMap::new();
        set_version_header(&mut h, VersionId::Null, VersioningState::Unversioned);
        assert!(h.get("x-amz-version-id").is_none());
        set_version_header(&mut h, VersionId::Null, VersioningState::Suspended);
        assert_eq!(h["x-amz-version-id"], "null");
    }
}
