//! Access control lists: GetBucketAcl, GetObjectAcl, PutBucketAcl, PutObjectAcl.
//!
//! Quarry has one user, the root, who owns every bucket and object; there are no grants. So the
//! ACL of anything is the one S3 calls `private`: the owner has `FULL_CONTROL`, nobody else has
//! anything. The GET operations say exactly that. The PUT operations accept only what changes
//! nothing: the canned ACL `private` (`x-amz-acl: private`, or no header and no body), or an
//! `AccessControlPolicy` body that grants `FULL_CONTROL` to the owner and nothing else (what a
//! client that read the ACL and writes it back sends, e.g. `s3cmd setacl --acl-private`). Any
//! other ACL is refused with `NotImplemented`, never accepted and ignored: a client that asked for
//! `public-read` must not believe its object is public.

use axum::body::Body;
use axum::response::Response;

use crate::api_error::{ApiError, ApiResult};
use crate::error::S3ErrorCode;
use crate::headers::check_acl_headers;
use crate::server::ReqCtx;
use crate::xml::{parse_document, xml_response, Element, XmlWriter, OWNER_ID};

const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

pub async fn get_bucket_acl(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    ctx.layer().bucket_info(bucket).await?;
    Ok(xml_response(render_private_acl()))
}

pub async fn get_object_acl(ctx: &ReqCtx, bucket: &str, key: &str) -> ApiResult<Response> {
    ctx.layer().object_info(bucket, key).await?;
    Ok(xml_response(render_private_acl()))
}

pub async fn put_bucket_acl(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let body = ctx.small_body().await?;
    check_put_acl(&ctx.parts.headers, &body)?;
    ctx.layer().bucket_info(bucket).await?;
    Ok(Response::new(Body::empty()))
}

pub async fn put_object_acl(ctx: &ReqCtx, bucket: &str, key: &str) -> ApiResult<Response> {
    let body = ctx.small_body().await?;
    check_put_acl(&ctx.parts.headers, &body)?;
    ctx.layer().object_info(bucket, key).await?;
    Ok(Response::new(Body::empty()))
}

/// The `AccessControlPolicy` of everything in Quarry: the owner has `FULL_CONTROL`.
pub fn render_private_acl() -> String {
    let root = "AccessControlPolicy";
    let mut w = XmlWriter::new(root);
    w.owner().open("AccessControlList").open("Grant");
    // The element name is a trusted constant; the attributes are S3's exact `Grantee` shape.
    w.open(&format!(
        "Grantee xmlns:xsi=\"{XSI}\" xsi:type=\"CanonicalUser\""
    ));
    w.elem("ID", OWNER_ID)
        .elem("DisplayName", crate::xml::OWNER_DISPLAY_NAME)
        .close("Grantee")
        .elem("Permission", "FULL_CONTROL")
        .close("Grant")
        .close("AccessControlList");
    w.finish(root)
}

/// Accepts a PutBucketAcl/PutObjectAcl request that leaves the ACL `private`. Any other ACL is
/// `NotImplemented`; a body that is not an `AccessControlPolicy` document is `MalformedXML`.
pub fn check_put_acl(headers: &http::HeaderMap, body: &[u8]) -> ApiResult<()> {
    check_acl_headers(headers)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    if headers.contains_key("x-amz-acl") {
        return Err(ApiError::new(
            S3ErrorCode::InvalidRequest,
            "Specify an ACL either with the x-amz-acl header or in the request body, not both.",
        ));
    }
    let doc = parse_document(body)?;
    if doc.name != "AccessControlPolicy" {
        return Err(ApiError::new(
            S3ErrorCode::MalformedXML,
            format!(
                "{} (the root element must be AccessControlPolicy)",
                S3ErrorCode::MalformedXML.default_message()
            ),
        ));
    }
    if let Some(id) = doc.child("Owner").and_then(|o| o.child("ID")) {
        if id.text.trim() != OWNER_ID {
            return Err(ApiError::new(
                S3ErrorCode::AccessDenied,
                "The owner of a bucket or object cannot be changed.",
            ));
        }
    }
    let grants: Vec<&Element> = doc
        .child("AccessControlList")
        .map(|l| l.children.iter().filter(|g| g.name == "Grant").collect())
        .unwrap_or_default();
    let owner_full_control = |g: &&Element| {
        let grantee = g.child("Grantee");
        let id = grantee.and_then(|e| e.child("ID")).map(|e| e.text.trim());
        let other_kind =
            grantee.is_some_and(|e| e.child("URI").is_some() || e.child("EmailAddress").is_some());
        let permission = g.child("Permission").map(|e| e.text.trim());
        id == Some(OWNER_ID) && !other_kind && permission == Some("FULL_CONTROL")
    };
    if grants.len() == 1 && grants.iter().all(owner_full_control) {
        Ok(())
    } else {
        Err(ApiError::new(
            S3ErrorCode::NotImplemented,
            "Quarry supports only the private ACL (FULL_CONTROL for the owner, no other grant).",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn policy(grants: &str) -> String {
        format!(
            "<AccessControlPolicy xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>{OWNER_ID}</ID></Owner><AccessControlList>{grants}</AccessControlList></AccessControlPolicy>"
        )
    }

    fn grant(grantee: &str, permission: &str) -> String {
        format!("<Grant><Grantee xmlns:xsi=\"{XSI}\" xsi:type=\"CanonicalUser\">{grantee}</Grantee><Permission>{permission}</Permission></Grant>")
    }

    #[test]
    fn the_rendered_acl_is_accepted_back() {
        let doc = render_private_acl();
        assert!(
            doc.contains("<Permission>FULL_CONTROL</Permission>"),
            "{doc}"
        );
        assert!(doc.contains("xsi:type=\"CanonicalUser\""), "{doc}");
        assert!(check_put_acl(&HeaderMap::new(), doc.as_bytes()).is_ok());
    }

    #[test]
    fn only_private_is_accepted() {
        let owner = format!("<ID>{OWNER_ID}</ID>");
        assert!(check_put_acl(&HeaderMap::new(), b"").is_ok());
        assert!(check_put_acl(&headers(&[("x-amz-acl", "private")]), b"").is_ok());
        let ok = policy(&grant(&owner, "FULL_CONTROL"));
        assert!(check_put_acl(&HeaderMap::new(), ok.as_bytes()).is_ok());

        let code =
            |h: &HeaderMap, body: &str| check_put_acl(h, body.as_bytes()).unwrap_err().code();
        let none = HeaderMap::new();
        assert_eq!(
            code(&headers(&[("x-amz-acl", "public-read")]), ""),
            S3ErrorCode::NotImplemented
        );
        assert_eq!(
            code(&headers(&[("x-amz-grant-read", "id=x")]), ""),
            S3ErrorCode::NotImplemented
        );
        assert_eq!(
            code(&headers(&[("x-amz-acl", "private")]), &ok),
            S3ErrorCode::InvalidRequest
        );
        let public = grant(
            "<URI>http://acs.amazonaws.com/groups/global/AllUsers</URI>",
            "READ",
        );
        for body in [
            policy(&format!("{}{public}", grant(&owner, "FULL_CONTROL"))),
            policy(&grant(&owner, "READ")),
            policy(&grant("<ID>someone-else</ID>", "FULL_CONTROL")),
            policy(""),
        ] {
            assert_eq!(code(&none, &body), S3ErrorCode::NotImplemented, "{body}");
        }
        assert_eq!(code(&none, "<Nope/>"), S3ErrorCode::MalformedXML);
        assert_eq!(
            code(&none, "<AccessControlPolicy>"),
            S3ErrorCode::MalformedXML
        );
        let other_owner = ok.replace(&format!("<Owner><ID>{OWNER_ID}"), "<Owner><ID>x");
        assert_eq!(code(&none, &other_owner), S3ErrorCode::AccessDenied);
    }
}
