//! Bucket operations: ListBuckets, CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation.

use axum::body::Body;
use axum::response::Response;
use http::header::{HeaderValue, LOCATION};
use http::StatusCode;
use quarry_object::BucketInfo;

use crate::api_error::{ApiError, ApiResult};
use crate::error::S3ErrorCode;
use crate::list::{decode_token, encode_token};
use crate::router::Query;
use crate::server::ReqCtx;
use crate::xml::{iso8601, parse_create_bucket_configuration, xml_response, XmlWriter};

/// The largest `max-buckets` S3 accepts.
const MAX_BUCKETS: usize = 10_000;

/// The parameters of a paginated ListBuckets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListBucketsParams {
    pub prefix: Option<String>,
    pub max_buckets: Option<usize>,
    pub continuation_token: Option<String>,
    pub bucket_region: Option<String>,
}

impl ListBucketsParams {
    pub fn from_query(q: &Query) -> ApiResult<Self> {
        let max_buckets = match q.get("max-buckets") {
            None => None,
            Some(s) => match s.parse::<usize>() {
                Ok(n) if (1..=MAX_BUCKETS).contains(&n) => Some(n),
                _ => {
                    return Err(ApiError::new(
                        S3ErrorCode::InvalidArgument,
                        format!("max-buckets must be an integer between 1 and {MAX_BUCKETS}."),
                    ))
                }
            },
        };
        let non_empty = |name: &str| q.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(ListBucketsParams {
            prefix: non_empty("prefix"),
            max_buckets,
            continuation_token: non_empty("continuation-token"),
            bucket_region: non_empty("bucket-region"),
        })
    }
}

pub async fn list_buckets(ctx: &ReqCtx, params: &ListBucketsParams) -> ApiResult<Response> {
    let buckets = ctx.layer().list_buckets().await?;
    Ok(xml_response(render_list_buckets(
        buckets,
        params,
        ctx.region(),
    )?))
}

/// The `ListAllMyBucketsResult` for one page of `buckets`.
pub fn render_list_buckets(
    mut buckets: Vec<BucketInfo>,
    params: &ListBucketsParams,
    region: &str,
) -> ApiResult<String> {
    buckets.sort_by(|a, b| a.name.cmp(&b.name));
    let after = params
        .continuation_token
        .as_deref()
        .map(decode_token)
        .transpose()?;
    let in_region = params.bucket_region.as_deref().is_none_or(|r| r == region);
    let mut selected = buckets.into_iter().filter(|b| {
        in_region
            && params
                .prefix
                .as_deref()
                .is_none_or(|p| b.name.starts_with(p))
            && after.as_deref().is_none_or(|a| b.name.as_str() > a)
    });
    let limit = params.max_buckets.unwrap_or(usize::MAX);
    let page: Vec<BucketInfo> = selected.by_ref().take(limit).collect();
    let more = selected.next().is_some();

    let root = "ListAllMyBucketsResult";
    let mut w = XmlWriter::new(root);
    w.owner().open("Buckets");
    for b in &page {
        w.open("Bucket")
            .elem("Name", &b.name)
            .elem("CreationDate", &iso8601(b.created_ns))
            .elem("BucketRegion", region)
            .close("Bucket");
    }
    w.close("Buckets");
    if more {
        if let Some(last) = page.last() {
            w.elem("ContinuationToken", &encode_token(&last.name));
        }
    }
    w.elem_opt("Prefix", params.prefix.as_deref());
    Ok(w.finish(root))
}

pub async fn create_bucket(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let headers = &ctx.parts.headers;
    let (ownership, acl) = crate::acl_config::new_bucket_settings(&ctx.state, headers)?;
    let body = ctx.small_body().await?;
    check_location_constraint(parse_create_bucket_configuration(&body)?, ctx.region())?;
    match ctx.layer().make_bucket(bucket).await {
        Ok(()) => {
            crate::acl_config::store_new_bucket_settings(ctx, bucket, ownership, acl.as_ref())
                .await?
        }
        // The one user owns every bucket, so an existing one is the caller's own.
        Err(quarry_object::Error::BucketExists) if recreate_succeeds(ctx.region()) => {}
        Err(e) => return Err(e.into()),
    }
    if header_is(headers, "x-amz-bucket-object-lock-enabled", "true") {
        crate::object_lock::enable_on_new_bucket(ctx, bucket).await?;
    }
    let mut response = Response::new(Body::empty());
    if let Ok(location) = HeaderValue::from_str(&format!("/{bucket}")) {
        response.headers_mut().insert(LOCATION, location);
    }
    Ok(response)
}

/// Whether creating a bucket the caller already owns answers 200 and changes nothing. S3 does so
/// in us-east-1 only, "for legacy compatibility"; every other region answers 409
/// `BucketAlreadyOwnedByYou` (CreateBucket, Errors).
pub fn recreate_succeeds(region: &str) -> bool {
    region == "us-east-1"
}

/// A bucket can only be created in the region this server answers for.
pub fn check_location_constraint(constraint: Option<String>, region: &str) -> ApiResult<()> {
    match constraint {
        Some(c) if c != region => Err(ApiError::new(
            S3ErrorCode::IllegalLocationConstraintException,
            format!(
                "The location constraint {c:?} does not match this server's region {region:?}."
            ),
        )),
        _ => Ok(()),
    }
}

fn header_is(headers: &http::HeaderMap, name: &str, value: &str) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(value))
}

pub async fn head_bucket(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    let mut response = Response::new(Body::empty());
    if let Ok(region) = HeaderValue::from_str(ctx.region()) {
        response.headers_mut().insert("x-amz-bucket-region", region);
    }
    Ok(response)
}

pub async fn delete_bucket(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().delete_bucket(bucket).await?;
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    Ok(response)
}

pub async fn get_bucket_location(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    Ok(xml_response(render_location(ctx.region())))
}

/// `<LocationConstraint>`: empty for us-east-1, as S3 answers.
pub fn render_location(region: &str) -> String {
    let root = "LocationConstraint";
    let mut w = XmlWriter::new(root);
    if region != "us-east-1" {
        w.text(region);
    }
    w.finish(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> BucketInfo {
        BucketInfo {
            name: name.into(),
            created_ns: 1_795_947_072_000_000_000,
        }
    }

    fn params(q: &str) -> ListBucketsParams {
        ListBucketsParams::from_query(&Query::parse(Some(q)).unwrap()).unwrap()
    }

    #[test]
    fn list_all_my_buckets_document() {
        let doc = render_list_buckets(vec![info("zeta"), info("alpha")], &params(""), "us-east-1")
            .unwrap();
        assert_eq!(
            doc,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <ListAllMyBucketsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <Owner><ID>71756172727900000000000000000000000000000000000000000000000000a1</ID>\
             <DisplayName>quarry</DisplayName></Owner><Buckets>\
             <Bucket><Name>alpha</Name><CreationDate>2026-11-29T10:11:12.000Z</CreationDate><BucketRegion>us-east-1</BucketRegion></Bucket>\
             <Bucket><Name>zeta</Name><CreationDate>2026-11-29T10:11:12.000Z</CreationDate><BucketRegion>us-east-1</BucketRegion></Bucket>\
             </Buckets></ListAllMyBucketsResult>"
        );
    }

    #[test]
    fn list_buckets_paginates() {
        let all = || vec![info("a1"), info("a2"), info("a3"), info("b1")];
        let first = render_list_buckets(all(), &params("max-buckets=2&prefix=a"), "r").unwrap();
        assert!(first.contains("<Name>a1</Name>") && first.contains("<Name>a2</Name>"));
        assert!(!first.contains("<Name>a3</Name>"));
        let token = encode_token("a2");
        assert!(
            first.contains(&format!(
                "<ContinuationToken>{token}</ContinuationToken><Prefix>a</Prefix>"
            )),
            "{first}"
        );
        let second = render_list_buckets(
            all(),
            &params(&format!(
                "max-buckets=2&prefix=a&continuation-token={token}"
            )),
            "r",
        )
        .unwrap();
        assert!(second.contains("<Name>a3</Name>") && !second.contains("<Name>b1</Name>"));
        assert!(!second.contains("ContinuationToken"));
        let other_region =
            render_list_buckets(all(), &params("bucket-region=elsewhere"), "r").unwrap();
        assert!(!other_region.contains("<Bucket>"));
        for bad in ["max-buckets=0", "max-buckets=10001", "max-buckets=x"] {
            let err = ListBucketsParams::from_query(&Query::parse(Some(bad)).unwrap()).unwrap_err();
            assert_eq!(err.code(), S3ErrorCode::InvalidArgument);
        }
    }

    #[test]
    fn location_constraint() {
        assert!(check_location_constraint(None, "us-east-1").is_ok());
        assert!(check_location_constraint(Some("eu-1".into()), "eu-1").is_ok());
        let err = check_location_constraint(Some("eu-1".into()), "us-east-1").unwrap_err();
        assert_eq!(err.code(), S3ErrorCode::IllegalLocationConstraintException);
        assert!(render_location("us-east-1").ends_with("<LocationConstraint xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"></LocationConstraint>"));
        assert!(render_location("eu-1").ends_with("\">eu-1</LocationConstraint>"));
    }
}
