//! GetObjectAttributes (`GET /bucket/key?attributes`): the attributes `x-amz-object-attributes`
//! names (`ETag`, `Checksum`, `ObjectParts`, `StorageClass`, `ObjectSize`), without the object's
//! bytes. `ObjectParts` is answered for objects made by a multipart upload only (S3 leaves it out
//! for others), paged by `x-amz-max-parts` and `x-amz-part-number-marker`; Quarry keeps no
//! per-part checksums of a completed object, so its parts carry their number and size.

use axum::response::Response;
use http::header::LAST_MODIFIED;
use http::HeaderMap;
use quarry_object::{ObjectInfo, ObjectPart, VersionId};

use crate::api_error::{ApiError, ApiResult};
use crate::headers::set_header;
use crate::server::ReqCtx;
use crate::versioning::version_header;
use crate::xml::{checksum_element, checksum_type, http_date, xml_response, XmlWriter};

/// The attributes a request may ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    pub etag: bool,
    pub checksum: bool,
    pub parts: bool,
    pub storage_class: bool,
    pub size: bool,
}

/// The default and largest `x-amz-max-parts`, as ListParts.
const MAX_PARTS: usize = 1000;

/// `x-amz-object-attributes` (comma-separated, possibly repeated): at least one attribute, each
/// one S3 defines, else `InvalidArgument`.
pub fn wanted(headers: &HeaderMap) -> ApiResult<Wanted> {
    let mut w = Wanted::default();
    let mut any = false;
    for value in headers.get_all("x-amz-object-attributes") {
        let value = value
            .to_str()
            .map_err(|_| invalid_attribute("(not text)"))?;
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            any = true;
            match name {
                "ETag" => w.etag = true,
                "Checksum" => w.checksum = true,
                "ObjectParts" => w.parts = true,
                "StorageClass" => w.storage_class = true,
                "ObjectSize" => w.size = true,
                other => return Err(invalid_attribute(other)),
            }
        }
    }
    if !any {
        return Err(ApiError::invalid_argument(
            "The x-amz-object-attributes header specifying the attributes to be retrieved is either missing or empty",
        ));
    }
    Ok(w)
}

fn invalid_attribute(name: &str) -> ApiError {
    ApiError::invalid_argument(format!("Invalid attribute name specified: {name}"))
}

/// `x-amz-max-parts` and `x-amz-part-number-marker`: non-negative integers.
fn paging(headers: &HeaderMap) -> ApiResult<(usize, u32)> {
    let number = |name: &str| -> ApiResult<Option<u64>> {
        headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or_else(|| {
                        ApiError::invalid_argument(format!(
                            "{name} must be a non-negative integer."
                        ))
                    })
            })
            .transpose()
    };
    let max = number("x-amz-max-parts")?.map_or(MAX_PARTS, |n| (n as usize).min(MAX_PARTS));
    let marker = number("x-amz-part-number-marker")?.map_or(0, |n| n.min(u64::from(u32::MAX)));
    Ok((max, marker as u32))
}

/// `version`: `?versionId=`, else the latest version.
pub async fn get_object_attributes(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let headers = &ctx.parts.headers;
    let want = wanted(headers)?;
    let (max_parts, marker) = paging(headers)?;
    let (customer, customer_md5) = crate::get::read_customer_key(ctx)?;
    let (info, parts) = if want.parts {
        ctx.layer().object_parts(bucket, key, version).await?
    } else {
        (
            ctx.layer()
                .object_version_info(bucket, key, version)
                .await?,
            Vec::new(),
        )
    };
    crate::get::check_customer_key(ctx, &info, customer.as_ref())?;
    let mut response = xml_response(render(&info, &parts, want, max_parts, marker));
    crate::sse::response_headers(response.headers_mut(), &info, customer_md5.as_deref());
    version_header(ctx, bucket, response.headers_mut(), &info).await?;
    set_header(
        response.headers_mut(),
        LAST_MODIFIED.as_str(),
        &http_date(info.mod_time_ns),
    );
    Ok(response)
}

/// The `GetObjectAttributesResponse` document.
pub fn render(
    info: &ObjectInfo,
    parts: &[ObjectPart],
    want: Wanted,
    max_parts: usize,
    marker: u32,
) -> String {
    let root = "GetObjectAttributesResponse";
    let mut w = XmlWriter::new(root);
    if want.etag {
        // Without quotes, unlike the ETag header.
        w.elem("ETag", &info.etag);
    }
    if want.checksum && !info.checksums.is_empty() {
        w.open("Checksum");
        for (algorithm, value) in &info.checksums {
            w.elem(&checksum_element(algorithm), value);
        }
        w.elem("ChecksumType", checksum_type(info.checksums.values()));
        w.close("Checksum");
    }
    // A multipart object's ETag is `<md5 of the parts' md5s>-<N>`.
    if want.parts && info.etag.contains('-') {
        let after: Vec<&ObjectPart> = parts.iter().filter(|p| p.number > marker).collect();
        let page = &after[..after.len().min(max_parts)];
        let truncated = after.len() > page.len();
        w.open("ObjectParts")
            .elem_display("PartsCount", info.parts)
            .elem_display("PartNumberMarker", marker)
            .elem_display(
                "NextPartNumberMarker",
                page.last().map_or(marker, |p| p.number),
            )
            .elem_display("MaxParts", max_parts)
            .elem_display("IsTruncated", truncated);
        for p in page {
            w.open("Part")
                .elem_display("PartNumber", p.number)
                .elem_display("Size", p.size)
                .close("Part");
        }
        w.close("ObjectParts");
    }
    if want.storage_class {
        w.elem("StorageClass", "STANDARD");
    }
    if want.size {
        w.elem_display("ObjectSize", info.size);
    }
    w.finish(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::S3ErrorCode;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    fn info(etag: &str, parts: usize) -> ObjectInfo {
        ObjectInfo {
            bucket: "b".into(),
            key: "k".into(),
            size: 12,
            mod_time_ns: 0,
            etag: etag.into(),
            headers: Default::default(),
            user_meta: Default::default(),
            checksums: [("crc32".to_string(), "AAAAAA==-3".to_string())].into(),
            parts,
            ..Default::default()
        }
    }

    #[test]
    fn attributes_are_parsed_and_checked() {
        let w = wanted(&headers(&[
            ("x-amz-object-attributes", "ETag, ObjectSize"),
            ("x-amz-object-attributes", "ObjectParts"),
        ]))
        .unwrap();
        assert!(w.etag && w.size && w.parts && !w.checksum && !w.storage_class);
        for bad in [vec![], vec![("x-amz-object-attributes", "ETag,Color")]] {
            assert_eq!(
                wanted(&headers(&bad)).unwrap_err().code(),
                S3ErrorCode::InvalidArgument
            );
        }
        assert_eq!(
            paging(&headers(&[("x-amz-max-parts", "-1")]))
                .unwrap_err()
                .code(),
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(paging(&headers(&[])).unwrap(), (1000, 0));
    }

    #[test]
    fn parts_are_paged_and_only_for_multipart_objects() {
        let all = Wanted {
            etag: true,
            checksum: true,
            parts: true,
            storage_class: true,
            size: true,
        };
        let parts: Vec<ObjectPart> = (1..=3).map(|n| ObjectPart { number: n, size: 4 }).collect();
        let doc = render(&info("abc-3", 3), &parts, all, 2, 0);
        assert!(doc.contains("<ETag>abc-3</ETag>"), "{doc}");
        assert!(doc.contains(
            "<Checksum><ChecksumCRC32>AAAAAA==-3</ChecksumCRC32><ChecksumType>COMPOSITE</ChecksumType></Checksum>"
        ), "{doc}");
        assert!(
            doc.contains(
                "<ObjectParts><PartsCount>3</PartsCount><PartNumberMarker>0</PartNumberMarker>\
             <NextPartNumberMarker>2</NextPartNumberMarker><MaxParts>2</MaxParts>\
             <IsTruncated>true</IsTruncated><Part><PartNumber>1</PartNumber><Size>4</Size></Part>\
             <Part><PartNumber>2</PartNumber><Size>4</Size></Part></ObjectParts>"
            ),
            "{doc}"
        );
        assert!(doc.contains("<StorageClass>STANDARD</StorageClass><ObjectSize>12</ObjectSize>"));
        let rest = render(&info("abc-3", 3), &parts, all, 2, 2);
        assert!(
            rest.contains("<IsTruncated>false</IsTruncated><Part><PartNumber>3</PartNumber>"),
            "{rest}"
        );
        let single = render(&info("abc", 1), &parts[..1], all, 1000, 0);
        assert!(!single.contains("ObjectParts"), "{single}");
        let only_size = render(
            &info("abc", 1),
            &[],
            Wanted {
                size: true,
                ..Default::default()
            },
            1000,
            0,
        );
        assert!(!only_size.contains("ETag") && only_size.contains("<ObjectSize>12</ObjectSize>"));
    }
}
