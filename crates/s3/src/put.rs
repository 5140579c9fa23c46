//! PutObject: the checks S3 makes before it reads a byte of the body (see [`crate::headers`]),
//! and the streaming hand-off of the verified body to the object layer. A body sent without a
//! checksum of its own gets S3's default CRC64NVME, computed as it streams by.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;
use http::header::{HeaderValue, ETAG};
use http::HeaderMap;
use quarry_object::{ByteStream, LateChecksums, PutOptions};

use crate::api_error::{ApiError, ApiResult};
use crate::error::S3ErrorCode;
use crate::headers::{
    check_acl_headers, check_storage_class, check_unsupported_headers_but_sse, checksum_headers,
    content_md5, stored_headers, user_metadata, write_precondition,
};
use crate::server::ReqCtx;
use crate::signature;
use crate::signature::checksum::{ChecksumAlgorithm, Checksummer};

/// The largest object a single PUT may create (5 GiB), as S3.
pub const MAX_PUT_SIZE: u64 = 5 * 1024 * 1024 * 1024;

pub async fn put_object(ctx: &ReqCtx, bucket: &str, key: &str) -> ApiResult<Response> {
    let headers = &ctx.parts.headers;
    check_unsupported_headers_but_sse(headers)?;
    let (encryption, customer_md5) = crate::sse::for_new_object(ctx, bucket, key).await?;
    check_acl_headers(headers)?;
    check_storage_class(headers)?;
    // No length at all (`Transfer-Encoding: chunked`, or aws-chunked without a decoded length):
    // accepted as S3 does, and cut off past the largest object a PUT may create.
    let size = signature::declared_size(&ctx.parts);
    if let Some(size) = size.filter(|&s| s > MAX_PUT_SIZE) {
        return Err(ApiError::new(
            S3ErrorCode::EntityTooLarge,
            format!(
                "A single PUT may upload at most {MAX_PUT_SIZE} bytes; this one declares {size}."
            ),
        ));
    }
    let (body, verified) = ctx.body_stream_with_checksum()?;
    let body = match size {
        Some(_) => body,
        None => bounded(body, MAX_PUT_SIZE),
    };
    let (body, default) = if declares_checksum(headers) {
        (body, None)
    } else {
        let (body, sum) = default_checksum(body);
        (body, Some(sum))
    };
    let mut stored = stored_headers(headers)?;
    crate::tagging::store_request_tags(headers, &mut stored)?;
    stored.extend(
        crate::object_lock::write_lock_entries(
            ctx,
            bucket,
            headers,
            crate::object_lock::LockWrite::Put,
        )
        .await?,
    );
    crate::acl::store_request_acl(&ctx.state, bucket, headers, &mut stored).await?;
    let opts = PutOptions {
        size,
        content_md5: content_md5(headers)?,
        headers: stored,
        user_meta: user_metadata(headers)?,
        // The checksum (header or trailer) is stored once the body verifier has checked it.
        checksums: BTreeMap::new(),
        precondition: write_precondition(headers)?,
        late_checksums: Some(LateChecksums(Arc::new(move || {
            let computed = default.as_ref().map(|sum| {
                let sum = sum.lock().unwrap_or_else(|p| p.into_inner()).clone();
                (sum.algorithm(), sum.finalize_base64())
            });
            verified
                .get()
                .or(computed)
                .map(|(algorithm, value)| (algorithm.name().to_ascii_lowercase(), value))
                .into_iter()
                .collect()
        }))),
        encryption,
    };
    let info = ctx.layer().put_object(bucket, key, body, opts).await?;

    let mut response = Response::new(Body::empty());
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", info.etag)) {
        response.headers_mut().insert(ETAG, etag);
    }
    checksum_headers(response.headers_mut(), &info);
    crate::sse::response_headers(response.headers_mut(), &info, customer_md5.as_deref());
    crate::versioning::written_version_header(response.headers_mut(), &info);
    crate::lifecycle::expiration_header(ctx, bucket, response.headers_mut(), &info).await;
    Ok(response)
}

/// A body whose length nobody declared: at most `limit` bytes; one more fails the request with
/// `EntityTooLarge` as it streams (nothing is buffered to find out).
fn bounded(body: ByteStream, limit: u64) -> ByteStream {
    let mut seen: u64 = 0;
    Box::pin(body.map(move |chunk| {
        let data = chunk?;
        seen = seen.saturating_add(data.len() as u64);
        if seen > limit {
            return Err(std::io::Error::other(crate::error::S3Error::new(
                S3ErrorCode::EntityTooLarge,
                format!("A single PUT may upload at most {limit} bytes; this body is longer."),
            )));
        }
        Ok(data)
    }))
}

/// Whether the client sends a checksum of its own (a header or a trailer) for the verifier.
fn declares_checksum(headers: &HeaderMap) -> bool {
    headers.contains_key("x-amz-trailer")
        || ChecksumAlgorithm::ALL
            .iter()
            .any(|a| headers.contains_key(a.header_name()))
}

/// S3 stores a CRC64NVME checksum with an object uploaded without a checksum of its own: computed
/// here as the body streams by, and read once the body has ended.
fn default_checksum(body: ByteStream) -> (ByteStream, Arc<Mutex<Checksummer>>) {
    let sum = Arc::new(Mutex::new(Checksummer::new(ChecksumAlgorithm::Crc64Nvme)));
    let feed = sum.clone();
    let body = body.map(move |chunk| {
        if let Ok(data) = &chunk {
            feed.lock().unwrap_or_else(|p| p.into_inner()).update(data);
        }
        chunk
    });
    (Box::pin(body), sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    async fn collect(body: ByteStream) -> Result<Vec<u8>, std::io::Error> {
        let mut out = Vec::new();
        let mut body = body;
        while let Some(chunk) = body.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }

    fn stream(pieces: &[&'static [u8]]) -> ByteStream {
        let items: Vec<Result<Bytes, std::io::Error>> =
            pieces.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Box::pin(futures::stream::iter(items))
    }

    #[tokio::test]
    async fn an_undeclared_body_is_bounded() {
        assert_eq!(
            collect(bounded(stream(&[b"abc", b"de"]), 5)).await.unwrap(),
            b"abcde"
        );
        let err = collect(bounded(stream(&[b"abc", b"def"]), 5))
            .await
            .unwrap_err();
        let e = signature::s3_error_of(&err).expect("an S3 error");
        assert_eq!(e.code, S3ErrorCode::EntityTooLarge);
    }
}
