//! ListObjects (v1) and ListObjectsV2: parameters, one page from the object layer, and the
//! `ListBucketResult` document.
//!
//! Continuation tokens are opaque to clients: the base64 (URL-safe, unpadded) of the key or common
//! prefix the next page starts after.

use axum::response::Response;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use quarry_object::{ListOptions, ListResult, ObjectInfo};

use crate::api_error::{ApiError, ApiResult};
use crate::router::Query;
use crate::server::ReqCtx;
use crate::xml::{iso8601, url_encode, xml_response, XmlWriter};

/// The largest page S3 returns; larger `max-keys` are clamped to it.
pub const MAX_KEYS: usize = 1000;

/// The parameters of a listing request, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListParams {
    pub prefix: String,
    pub delimiter: Option<String>,
    pub max_keys: usize,
    pub encoding_url: bool,
    /// v1 `marker`.
    pub marker: Option<String>,
    /// v2 `continuation-token`, as sent (still encoded); echoed even when empty, as S3 does.
    pub continuation_token: Option<String>,
    /// v2 `start-after`.
    pub start_after: Option<String>,
    /// v2 `fetch-owner`.
    pub fetch_owner: bool,
}

impl ListParams {
    pub fn from_query(q: &Query) -> ApiResult<ListParams> {
        let max_keys = match q.get("max-keys") {
            None => MAX_KEYS,
            Some(s) => match s.trim().parse::<i64>() {
                Ok(n) if n >= 0 => usize::try_from(n).unwrap_or(MAX_KEYS).min(MAX_KEYS),
                _ => {
                    return Err(ApiError::invalid_argument(
                        "Argument max-keys must be an integer between 0 and 2147483647.",
                    ))
                }
            },
        };
        let encoding_url = match q.get("encoding-type") {
            None => false,
            Some(e) if e.eq_ignore_ascii_case("url") => true,
            Some(_) => {
                return Err(ApiError::invalid_argument(
                    "Invalid Encoding Method specified in Request: only \"url\" is supported.",
                ))
            }
        };
        let fetch_owner = match q.get("fetch-owner") {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") || v.is_empty() => false,
            Some(_) => {
                return Err(ApiError::invalid_argument(
                    "fetch-owner must be true or false.",
                ))
            }
        };
        let non_empty = |name: &str| q.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(ListParams {
            prefix: q.get("prefix").unwrap_or("").to_owned(),
            delimiter: non_empty("delimiter"),
            max_keys,
            encoding_url,
            marker: non_empty("marker"),
            continuation_token: q.get("continuation-token").map(str::to_owned),
            start_after: non_empty("start-after"),
            fetch_owner,
        })
    }

    /// Encodes a value for the response when `encoding-type=url` was asked for.
    fn enc(&self, s: &str) -> String {
        if self.encoding_url {
            url_encode(s)
        } else {
            s.to_owned()
        }
    }

    fn enc_opt(&self, s: Option<&str>) -> Option<String> {
        s.map(|s| self.enc(s))
    }
}

/// The opaque continuation token for a page that starts after `marker`.
pub fn encode_token(marker: &str) -> String {
    URL_SAFE_NO_PAD.encode(marker.as_bytes())
}

/// The marker a continuation token stands for.
pub fn decode_token(token: &str) -> ApiResult<String> {
    URL_SAFE_NO_PAD
        .decode(token.as_bytes())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| ApiError::invalid_argument("The continuation token provided is incorrect."))
}

/// The key the next page should start after, when the layer did not name one.
fn last_entry(page: &ListResult) -> Option<String> {
    let last_key = page.objects.last().map(|o| o.key.as_str());
    let last_prefix = page.common_prefixes.last().map(String::as_str);
    last_key.max(last_prefix).map(str::to_owned)
}

pub async fn list_objects_v2(
    ctx: &ReqCtx,
    bucket: &str,
    params: &ListParams,
) -> ApiResult<Response> {
    // An empty token is no token (S3 lists from the start, or from start-after, and echoes it).
    let marker = match params
        .continuation_token
        .as_deref()
        .filter(|t| !t.is_empty())
    {
        Some(token) => Some(decode_token(token)?),
        None => params.start_after.clone(),
    };
    let page = list_page(ctx, bucket, params, marker).await?;
    Ok(xml_response(render_v2(bucket, params, &page)))
}

pub async fn list_objects_v1(
    ctx: &ReqCtx,
    bucket: &str,
    params: &ListParams,
) -> ApiResult<Response> {
    let page = list_page(ctx, bucket, params, params.marker.clone()).await?;
    Ok(xml_response(render_v1(bucket, params, &page)))
}

async fn list_page(
    ctx: &ReqCtx,
    bucket: &str,
    params: &ListParams,
    marker: Option<String>,
) -> ApiResult<ListResult> {
    let opts = ListOptions {
        prefix: params.prefix.clone(),
        marker,
        delimiter: params.delimiter.clone(),
        max_keys: params.max_keys,
    };
    Ok(ctx.layer().list_objects(bucket, opts).await?)
}

fn write_contents(w: &mut XmlWriter, params: &ListParams, o: &ObjectInfo, owner: bool) {
    w.open("Contents")
        .elem("Key", &params.enc(&o.key))
        .elem("LastModified", &iso8601(o.mod_time_ns))
        .elem("ETag", &format!("\"{}\"", o.etag))
        .elem_display("Size", o.size);
    if owner {
        w.owner();
    }
    w.elem("StorageClass", "STANDARD").close("Contents");
}

fn write_common_prefixes(w: &mut XmlWriter, params: &ListParams, page: &ListResult) {
    for p in &page.common_prefixes {
        w.open("CommonPrefixes")
            .elem("Prefix", &params.enc(p))
            .close("CommonPrefixes");
    }
}

/// The ListObjectsV2 `ListBucketResult`.
pub fn render_v2(bucket: &str, params: &ListParams, page: &ListResult) -> String {
    let root = "ListBucketResult";
    let mut w = XmlWriter::new(root);
    w.elem("Name", bucket)
        .elem("Prefix", &params.enc(&params.prefix))
        .elem_opt(
            "Delimiter",
            params.enc_opt(params.delimiter.as_deref()).as_deref(),
        )
        .elem_display("MaxKeys", params.max_keys)
        .elem_opt("EncodingType", params.encoding_url.then_some("url"))
        .elem_display("KeyCount", page.objects.len() + page.common_prefixes.len())
        .elem_opt("ContinuationToken", params.continuation_token.as_deref())
        .elem_opt(
            "StartAfter",
            params.enc_opt(params.start_after.as_deref()).as_deref(),
        );
    if page.is_truncated {
        if let Some(next) = page.next_marker.clone().or_else(|| last_entry(page)) {
            w.elem("NextContinuationToken", &encode_token(&next));
        }
    }
    w.elem_display("IsTruncated", page.is_truncated);
    for o in &page.objects {
        write_contents(&mut w, params, o, params.fetch_owner);
    }
    write_common_prefixes(&mut w, params, page);
    w.finish(root)
}

/// The ListObjects (v1) `ListBucketResult`. As S3, `NextMarker` is sent only for a truncated
/// page of a listing with a delimiter; without one, clients continue from the last key. The v1
/// `Prefix` is echoed as sent even with `encoding-type=url` (S3 encodes only the marker,
/// delimiter and keys there, and the SDKs decode only those).
pub fn render_v1(bucket: &str, params: &ListParams, page: &ListResult) -> String {
    let root = "ListBucketResult";
    let mut w = XmlWriter::new(root);
    w.elem("Name", bucket)
        .elem("Prefix", &params.prefix)
        .elem(
            "Marker",
            &params.enc(params.marker.as_deref().unwrap_or("")),
        )
        .elem_display("MaxKeys", params.max_keys)
        .elem_opt(
            "Delimiter",
            params.enc_opt(params.delimiter.as_deref()).as_deref(),
        )
        .elem_opt("EncodingType", params.encoding_url.then_some("url"));
    if page.is_truncated && params.delimiter.is_some() {
        if let Some(next) = page.next_marker.clone().or_else(|| last_entry(page)) {
            w.elem("NextMarker", &params.enc(&next));
        }
    }
    w.elem_display("IsTruncated", page.is_truncated);
    for o in &page.objects {
        write_contents(&mut w, params, o, true);
    }
    write_common_prefixes(&mut w, params, page);
    w.finish(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::S3ErrorCode;

    fn obj(key: &str, size: u64) -> ObjectInfo {
        ObjectInfo {
            bucket: "bkt".into(),
            key: key.into(),
            size,
            mod_time_ns: 1_795_947_072_000_000_000,
            etag: "d41d8cd98f00b204e9800998ecf8427e".into(),
            headers: Default::default(),
            user_meta: Default::default(),
            checksums: Default::default(),
            parts: 1,
            ..Default::default()
        }
    }

    fn params(query: &str) -> ListParams {
        ListParams::from_query(&Query::parse(Some(query)).unwrap()).unwrap()
    }

    const HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
        <ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";

    #[test]
    fn params_are_validated_and_clamped() {
        let p = params("list-type=2&max-keys=5000&prefix=a%2F&delimiter=%2F&fetch-owner=true");
        assert_eq!(p.max_keys, 1000);
        assert_eq!(p.prefix, "a/");
        assert_eq!(p.delimiter.as_deref(), Some("/"));
        assert!(p.fetch_owner);
        assert_eq!(params("").max_keys, 1000);
        assert_eq!(params("max-keys=0").max_keys, 0);
        assert_eq!(params("delimiter=").delimiter, None);
        for bad in [
            "max-keys=-1",
            "max-keys=ten",
            "encoding-type=base64",
            "fetch-owner=maybe",
        ] {
            let err = ListParams::from_query(&Query::parse(Some(bad)).unwrap()).unwrap_err();
            assert_eq!(err.code(), S3ErrorCode::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn continuation_tokens_round_trip_and_reject_garbage() {
        for marker in ["a", "dir/é/x y", ""] {
            assert_eq!(decode_token(&encode_token(marker)).unwrap(), marker);
        }
        assert_eq!(
            decode_token("!!!").unwrap_err().code(),
            S3ErrorCode::InvalidArgument
        );
        assert_eq!(
            decode_token(&URL_SAFE_NO_PAD.encode([0xff, 0xfe]))
                .unwrap_err()
                .code(),
            S3ErrorCode::InvalidArgument
        );
    }

    #[test]
    fn v2_document() {
        let page = ListResult {
            objects: vec![obj("a.txt", 3)],
            common_prefixes: vec!["dir/".into()],
            is_truncated: true,
            next_marker: Some("dir/".into()),
        };
        let doc = render_v2("bkt", &params("list-type=2&delimiter=/&max-keys=2"), &page);
        assert_eq!(
            doc,
            format!(
                "{HEAD}<Name>bkt</Name><Prefix></Prefix><Delimiter>/</Delimiter><MaxKeys>2</MaxKeys>\
                 <KeyCount>2</KeyCount><NextContinuationToken>{}</NextContinuationToken><IsTruncated>true</IsTruncated>\
                 <Contents><Key>a.txt</Key><LastModified>2026-11-29T10:11:12.000Z</LastModified>\
                 <ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>3</Size>\
                 <StorageClass>STANDARD</StorageClass></Contents>\
                 <CommonPrefixes><Prefix>dir/</Prefix></CommonPrefixes></ListBucketResult>",
                encode_token("dir/")
            )
        );
    }

    #[test]
    fn v2_with_owner_token_and_url_encoding() {
        let page = ListResult {
            objects: vec![obj("a b/c+d&é", 0)],
            common_prefixes: vec!["x y/".into()],
            is_truncated: false,
            next_marker: None,
        };
        let p = params("list-type=2&encoding-type=url&prefix=a+b&delimiter=/&start-after=a%20a&continuation-token=YQ&fetch-owner=true");
        let doc = render_v2("bkt", &p, &page);
        assert!(doc.contains("<Prefix>a%20b</Prefix>"), "{doc}");
        assert!(doc.contains("<EncodingType>url</EncodingType>"));
        assert!(doc.contains("<ContinuationToken>YQ</ContinuationToken>"));
        assert!(doc.contains("<StartAfter>a%20a</StartAfter>"));
        assert!(doc.contains("<Key>a%20b/c%2Bd%26%C3%A9</Key>"), "{doc}");
        assert!(doc.contains("<CommonPrefixes><Prefix>x%20y/</Prefix></CommonPrefixes>"));
        assert!(doc.contains("<Owner><ID>"), "{doc}");
        assert!(doc.contains("<DisplayName>quarry</DisplayName></Owner><StorageClass>"));
        assert!(!doc.contains("NextContinuationToken"));
        assert!(doc.contains("<IsTruncated>false</IsTruncated>"));
    }

    #[test]
    fn v1_next_marker_only_with_delimiter() {
        let page = ListResult {
            objects: vec![obj("a", 1), obj("b", 1)],
            common_prefixes: vec![],
            is_truncated: true,
            next_marker: Some("b".into()),
        };
        let without = render_v1("bkt", &params("marker=0&max-keys=2"), &page);
        assert!(without.starts_with(&format!(
            "{HEAD}<Name>bkt</Name><Prefix></Prefix><Marker>0</Marker><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>"
        )), "{without}");
        assert!(!without.contains("NextMarker"));
        assert!(without.contains("<Owner>"), "v1 always lists owners");
        let with = render_v1("bkt", &params("delimiter=/&max-keys=2"), &page);
        let encoded = render_v1("bkt", &params("prefix=%0A&encoding-type=url"), &page);
        assert!(encoded.contains("<Prefix>\n</Prefix>"), "{encoded}");
        let empty_token = render_v2("bkt", &params("list-type=2&continuation-token="), &page);
        assert!(
            empty_token.contains("<ContinuationToken></ContinuationToken>"),
            "{empty_token}"
        );
        assert!(
            with.contains(
                "<Delimiter>/</Delimiter><NextMarker>b</NextMarker><IsTruncated>true</IsTruncated>"
            ),
            "{with}"
        );
    }
}
