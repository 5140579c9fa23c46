//! Object and bucket tagging: Put/Get/DeleteObjectTagging (per version), the `x-amz-tagging`
//! header of PutObject, CreateMultipartUpload and CopyObject (`x-amz-tagging-directive`), the
//! `tagging` field of a browser upload, `x-amz-tagging-count` on GET and HEAD, and
//! Put/Get/DeleteBucketTagging.
//!
//! An object's tags are stored with its version (see `quarry_object::TAGS_HEADER`), URL-encoded
//! as the header carries them, keys in ascending order; a bucket's tags are its `tagging`
//! configuration document. AWS's limits: 10 tags on an object, 50 on a bucket, keys of 1 to 128
//! and values of up to 256 Unicode characters, each key once, no key beginning with `aws:`;
//! a tag set outside them is `InvalidTag`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use md5::{Digest, Md5};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use quarry_object::{HeadersUpdate, ObjectInfo, VersionId, TAGS_HEADER};

use crate::api_error::{ApiError, ApiResult};
use crate::error::{S3Error, S3ErrorCode};
use crate::headers::set_header;
use crate::server::ReqCtx;
use crate::xml::{parse_document, xml_response, Element, XmlWriter};

/// The most tags an object carries.
pub const MAX_OBJECT_TAGS: usize = 10;
/// The most tags a bucket carries.
pub const MAX_BUCKET_TAGS: usize = 50;
/// The longest tag key, in Unicode characters.
pub const MAX_TAG_KEY: usize = 128;
/// The longest tag value, in Unicode characters.
pub const MAX_TAG_VALUE: usize = 256;

/// The bucket configuration document holding a bucket's tags (a `Tagging` document).
const BUCKET_CONFIG: &str = "tagging";

/// A tag set: each key once, in ascending order.
pub type TagSet = BTreeMap<String, String>;

/// What the stored form escapes: everything but the unreserved characters of RFC 3986.
const ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn invalid_tag(message: impl Into<String>) -> S3Error {
    S3Error::new(S3ErrorCode::InvalidTag, message)
}

/// Checks a tag set against AWS's limits (`max` tags).
pub fn validate(tags: &[(String, String)], max: usize) -> Result<TagSet, S3Error> {
    if tags.len() > max {
        return Err(invalid_tag(format!(
            "The TagSet has {} tags; at most {max} are allowed.",
            tags.len()
        )));
    }
    let mut set = TagSet::new();
    for (k, v) in tags {
        let klen = k.chars().count();
        if klen == 0 || klen > MAX_TAG_KEY {
            return Err(invalid_tag(format!(
                "The TagKey you have provided is invalid: a key is 1 to {MAX_TAG_KEY} characters, \
                 this one {klen}."
            )));
        }
        if v.chars().count() > MAX_TAG_VALUE {
            return Err(invalid_tag(format!(
                "The TagValue you have provided is invalid: a value is at most {MAX_TAG_VALUE} \
                 characters."
            )));
        }
        if k.starts_with("aws:") {
            return Err(invalid_tag(
                "Your TagKey cannot be prefixed with aws: (reserved for AWS).",
            ));
        }
        if set.insert(k.clone(), v.clone()).is_some() {
            return Err(invalid_tag(
                "Cannot provide multiple Tags with the same key.",
            ));
        }
    }
    Ok(set)
}

/// Parses a `Tagging` document (`<Tagging><TagSet><Tag><Key/><Value/></Tag>...`).
pub fn parse_tagging(body: &[u8], max: usize) -> Result<TagSet, S3Error> {
    let root = parse_document(body)?;
    tagging_element(&root, max)
}

/// The tag set of a parsed `Tagging` element.
pub fn tagging_element(root: &Element, max: usize) -> Result<TagSet, S3Error> {
    let malformed = |why: &str| {
        S3Error::new(
            S3ErrorCode::MalformedXML,
            format!("The XML you provided was not well-formed or did not validate: {why}."),
        )
    };
    if root.name != "Tagging" {
        return Err(malformed("the root element is not Tagging"));
    }
    let set = root
        .child("TagSet")
        .ok_or_else(|| malformed("Tagging has no TagSet"))?;
    let mut tags = Vec::new();
    for tag in &set.children {
        if tag.name != "Tag" {
            return Err(malformed("TagSet holds something other than Tag"));
        }
        let key = tag
            .child("Key")
            .ok_or_else(|| malformed("a Tag has no Key"))?;
        let value = tag
            .child("Value")
            .ok_or_else(|| malformed("a Tag has no Value"))?;
        tags.push((key.text.clone(), value.text.clone()));
    }
    validate(&tags, max)
}

/// Parses a tag set URL-encoded as `x-amz-tagging` carries it (`k1=v1&k2`; a key without `=`
/// has an empty value).
pub fn parse_query(s: &str) -> Result<TagSet, S3Error> {
    let mut tags = Vec::new();
    for part in s.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let decode = |x: &str| {
            percent_decode_str(&x.replace('+', " "))
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| invalid_tag("The tag set is not valid UTF-8 after percent-decoding."))
        };
        tags.push((decode(k)?, decode(v)?));
    }
    validate(&tags, MAX_OBJECT_TAGS)
}

/// The stored form of a tag set (empty for none).
pub fn encode(tags: &TagSet) -> String {
    tags.iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, ENCODE),
                utf8_percent_encode(v, ENCODE)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// An object's tags, from its stored headers. A stored value that does not decode (it never
/// should) reads as what does.
pub fn object_tags(info: &ObjectInfo) -> TagSet {
    let Some(stored) = info.headers.get(TAGS_HEADER) else {
        return TagSet::new();
    };
    let mut set = TagSet::new();
    for part in stored.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let (Ok(k), Ok(v)) = (
            percent_decode_str(k).decode_utf8(),
            percent_decode_str(v).decode_utf8(),
        ) else {
            tracing::warn!(key = %info.key, "stored tags do not decode");
            continue;
        };
        set.insert(k.into_owned(), v.into_owned());
    }
    set
}

/// `x-amz-tagging-count` for an object with tags.
pub fn tagging_count_header(out: &mut HeaderMap, info: &ObjectInfo) {
    let n = object_tags(info).len();
    if n > 0 {
        set_header(out, "x-amz-tagging-count", &n.to_string());
    }
}

/// The tags a write asks for with `x-amz-tagging`, in their stored form; `None` without.
pub fn request_tags(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(v) = headers.get("x-amz-tagging") else {
        return Ok(None);
    };
    let s = v
        .to_str()
        .map_err(|_| ApiError::invalid_argument("x-amz-tagging is not valid text."))?;
    Ok(Some(encode(&parse_query(s)?)))
}

/// Adds the tags of `x-amz-tagging` to the headers a write stores.
pub fn store_request_tags(
    headers: &HeaderMap,
    stored: &mut BTreeMap<String, String>,
) -> ApiResult<()> {
    if let Some(tags) = request_tags(headers)?.filter(|t| !t.is_empty()) {
        stored.insert(TAGS_HEADER.to_owned(), tags);
    }
    Ok(())
}

/// The tags of a copy (`x-amz-tagging-directive`): the source's (`COPY`, the default) or those of
/// `x-amz-tagging` (`REPLACE`; none without the header). In the stored form.
pub fn copy_tags(headers: &HeaderMap, source: &ObjectInfo) -> ApiResult<String> {
    match headers.get("x-amz-tagging-directive").map(|v| v.as_bytes()) {
        None | Some(b"COPY") => Ok(encode(&object_tags(source))),
        Some(b"REPLACE") => Ok(request_tags(headers)?.unwrap_or_default()),
        Some(_) => Err(ApiError::invalid_argument(
            "Unknown tagging directive: it is COPY or REPLACE.",
        )),
    }
}

fn tagging_xml(tags: &TagSet) -> String {
    let mut w = XmlWriter::new("Tagging");
    w.open("TagSet");
    for (k, v) in tags {
        w.open("Tag").elem("Key", k).elem("Value", v).close("Tag");
    }
    w.close("TagSet");
    w.finish("Tagging")
}

/// A small body whose Content-MD5, when sent, must match.
async fn checked_body(ctx: &ReqCtx) -> ApiResult<Bytes> {
    let expected = crate::headers::content_md5(&ctx.parts.headers)?;
    let body = ctx.small_body().await?;
    if let Some(md5) = expected {
        if Md5::digest(&body)[..] != md5[..] {
            return Err(S3ErrorCode::BadDigest.into());
        }
    }
    Ok(body)
}

fn no_content() -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    r
}

/// The version header of a tagging answer: the version the call acted on.
async fn with_version(
    ctx: &ReqCtx,
    bucket: &str,
    mut response: Response,
    info: &ObjectInfo,
) -> ApiResult<Response> {
    crate::versioning::version_header(ctx, bucket, response.headers_mut(), info).await?;
    Ok(response)
}

/// `GET /bucket/key?tagging[&versionId=]`.
pub async fn get_object_tagging(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let info = ctx
        .layer()
        .object_version_info(bucket, key, version)
        .await?;
    let response = xml_response(tagging_xml(&object_tags(&info)));
    with_version(ctx, bucket, response, &info).await
}

/// Sets (or with `None` removes) a version's tags.
async fn set_object_tags(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
    tags: Option<String>,
) -> ApiResult<ObjectInfo> {
    let update: HeadersUpdate = Arc::new(move |_, headers| {
        match &tags {
            Some(t) if !t.is_empty() => {
                headers.insert(TAGS_HEADER.to_owned(), t.clone());
            }
            _ => {
                headers.remove(TAGS_HEADER);
            }
        }
        Ok(())
    });
    Ok(ctx
        .layer()
        .update_object_headers(bucket, key, version, update)
        .await?)
}

/// `PUT /bucket/key?tagging[&versionId=]`: replaces the version's tag set.
pub async fn put_object_tagging(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let body = checked_body(ctx).await?;
    let tags = parse_tagging(&body, MAX_OBJECT_TAGS)?;
    let info = set_object_tags(ctx, bucket, key, version, Some(encode(&tags))).await?;
    with_version(ctx, bucket, Response::new(Body::empty()), &info).await
}

/// `DELETE /bucket/key?tagging[&versionId=]`: 204, the version without tags.
pub async fn delete_object_tagging(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let info = set_object_tags(ctx, bucket, key, version, None).await?;
    with_version(ctx, bucket, no_content(), &info).await
}

/// `GET /bucket?tagging`: `NoSuchTagSet` when the bucket has none.
pub async fn get_bucket_tagging(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    match ctx.layer().get_bucket_config(bucket, BUCKET_CONFIG).await? {
        Some(raw) => {
            let tags = parse_tagging(&raw, MAX_BUCKET_TAGS).map_err(|e| {
                tracing::error!(bucket, error = %e, "stored bucket tags do not parse");
                ApiError::from(S3ErrorCode::InternalError)
            })?;
            Ok(xml_response(tagging_xml(&tags)))
        }
        None => Err(S3ErrorCode::NoSuchTagSet.into()),
    }
}

/// `PUT /bucket?tagging`: replaces the bucket's tag set (an empty one removes it).
pub async fn put_bucket_tagging(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let body = checked_body(ctx).await?;
    let tags = parse_tagging(&body, MAX_BUCKET_TAGS)?;
    ctx.layer().bucket_info(bucket).await?;
    if tags.is_empty() {
        ctx.layer()
            .delete_bucket_config(bucket, BUCKET_CONFIG)
            .await?;
    } else {
        ctx.layer()
            .put_bucket_config(bucket, BUCKET_CONFIG, Bytes::from(tagging_xml(&tags)))
            .await?;
    }
    Ok(no_content())
}

/// `DELETE /bucket?tagging`: 204.
pub async fn delete_bucket_tagging(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    ctx.layer()
        .delete_bucket_config(bucket, BUCKET_CONFIG)
        .await?;
    Ok(no_content())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(tags: &[(&str, &str)]) -> String {
        let mut s = String::from("<Tagging><TagSet>");
        for (k, v) in tags {
            s.push_str(&format!("<Tag><Key>{k}</Key><Value>{v}</Value></Tag>"));
        }
        s.push_str("</TagSet></Tagging>");
        s
    }

    fn code(r: Result<TagSet, S3Error>) -> S3ErrorCode {
        r.unwrap_err().code
    }

    #[test]
    fn tag_sets_parse_within_aws_limits() {
        let ten: Vec<(String, String)> = (0..10).map(|i| (i.to_string(), i.to_string())).collect();
        let ten: Vec<(&str, &str)> = ten.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(parse_tagging(doc(&ten).as_bytes(), 10).unwrap().len(), 10);
        let eleven: Vec<(String, String)> =
            (0..11).map(|i| (i.to_string(), i.to_string())).collect();
        let eleven: Vec<(&str, &str)> = eleven
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            code(parse_tagging(doc(&eleven).as_bytes(), 10)),
            S3ErrorCode::InvalidTag
        );
        assert_eq!(
            parse_tagging(doc(&eleven).as_bytes(), 50).unwrap().len(),
            11
        );

        // 128 and 256 Unicode characters (not bytes) are the limits.
        let k128 = "é".repeat(128);
        let v256 = "ü".repeat(256);
        assert!(parse_tagging(doc(&[(&k128, &v256)]).as_bytes(), 10).is_ok());
        let k129 = "k".repeat(129);
        let v257 = "v".repeat(257);
        for bad in [
            doc(&[(&k129, "v")]),
            doc(&[("k", &v257)]),
            doc(&[("", "v")]),
            doc(&[("a", "1"), ("a", "2")]),
            doc(&[("aws:cloudformation", "x")]),
        ] {
            assert_eq!(
                code(parse_tagging(bad.as_bytes(), 10)),
                S3ErrorCode::InvalidTag,
                "{bad}"
            );
        }
        for bad in [
            "<Tagging/>",
            "<TagSet></TagSet>",
            "<Tagging><TagSet><Tag><Key>a</Key></Tag></TagSet></Tagging>",
            "<Tagging><TagSet><Other/></TagSet></Tagging>",
            "not xml",
        ] {
            assert_eq!(
                code(parse_tagging(bad.as_bytes(), 10)),
                S3ErrorCode::MalformedXML,
                "{bad}"
            );
        }
        // An empty value is a value.
        let t = parse_tagging(doc(&[("k", "")]).as_bytes(), 10).unwrap();
        assert_eq!(t["k"], "");
    }

    #[test]
    fn header_form_round_trips_through_the_stored_form() {
        let t = parse_query("foo=bar&bar&sp%20ace=a+b&%C3%A9=%26%3D").unwrap();
        assert_eq!(t["foo"], "bar");
        assert_eq!(t["bar"], "");
        assert_eq!(t["sp ace"], "a b");
        assert_eq!(t["é"], "&=");
        let stored = encode(&t);
        let info = ObjectInfo {
            headers: [(TAGS_HEADER.to_owned(), stored.clone())].into(),
            ..Default::default()
        };
        assert_eq!(object_tags(&info), t);
        assert_eq!(parse_query(&stored).unwrap(), t);
        let many: String = (0..11)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join("&");
        assert_eq!(code(parse_query(&many)), S3ErrorCode::InvalidTag);
        assert_eq!(code(parse_query("a=1&a=2")), S3ErrorCode::InvalidTag);
        assert!(parse_query("").unwrap().is_empty());
    }

    #[test]
    fn copies_keep_or_replace_tags() {
        let source = ObjectInfo {
            headers: [(TAGS_HEADER.to_owned(), "a=1".to_owned())].into(),
            ..Default::default()
        };
        let mut h = HeaderMap::new();
        assert_eq!(copy_tags(&h, &source).unwrap(), "a=1");
        h.insert("x-amz-tagging-directive", "REPLACE".parse().unwrap());
        assert_eq!(copy_tags(&h, &source).unwrap(), "");
        h.insert("x-amz-tagging", "b=2".parse().unwrap());
        assert_eq!(copy_tags(&h, &source).unwrap(), "b=2");
        h.insert("x-amz-tagging-directive", "MOVE".parse().unwrap());
        assert_eq!(
            copy_tags(&h, &source).unwrap_err().code(),
            S3ErrorCode::InvalidArgument
        );
    }
}
