//! DeleteObject and DeleteObjects. Deleting a key that does not exist succeeds, as in S3; a
//! missing bucket does not.

use axum::response::Response;
use futures::StreamExt;
use md5::{Digest, Md5};
use quarry_object::{DeleteOptions, DeletePrecondition, DeleteResult, VersionId};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::api_error::{object_error, ApiError, ApiResult};
use crate::error::S3ErrorCode;
use crate::headers::content_md5;
use crate::server::ReqCtx;
use crate::xml::{parse_document, xml_response, XmlWriter};

/// The most keys one DeleteObjects request may name, as S3.
pub const MAX_DELETE_KEYS: usize = 1000;

/// How many deletes of one DeleteObjects request run at a time.
const DELETE_CONCURRENCY: usize = 16;

/// `DELETE /bucket/key[?versionId=]`: in a versioned bucket without a version, a delete marker.
pub async fn delete_object(
    ctx: &ReqCtx,
    bucket: &str,
    key: &str,
    version: Option<VersionId>,
) -> ApiResult<Response> {
    let condition = delete_precondition(&ctx.parts.headers)?;
    let opts = DeleteOptions {
        bypass_governance: crate::object_lock::bypass_governance(ctx),
        precondition: (!condition.is_empty()).then_some(condition),
    };
    let result = ctx
        .layer()
        .delete_object_version_with(bucket, key, version, opts)
        .await?;
    Ok(crate::versioning::delete_response(&result))
}

/// A conditional DeleteObject's headers: `If-Match`, `x-amz-if-match-last-modified-time` (an
/// HTTP date or ISO 8601) and `x-amz-if-match-size`. A value that does not parse is
/// `InvalidArgument`.
fn delete_precondition(headers: &http::HeaderMap) -> ApiResult<DeletePrecondition> {
    let text = |name: &str| -> ApiResult<Option<&str>> {
        headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .map_err(|_| ApiError::invalid_argument(format!("{name} is not valid text.")))
            })
            .transpose()
    };
    const MTIME: &str = "x-amz-if-match-last-modified-time";
    const SIZE: &str = "x-amz-if-match-size";
    Ok(DeletePrecondition {
        etag: text("if-match")?.map(str::to_owned),
        mod_time_s: text(MTIME)?
            .map(|v| {
                timestamp_seconds(v).ok_or_else(|| {
                    ApiError::invalid_argument(format!("{MTIME} is not a valid date."))
                })
            })
            .transpose()?,
        size: text(SIZE)?
            .map(|v| {
                v.trim().parse::<u64>().map_err(|_| {
                    ApiError::invalid_argument(format!("{SIZE} must be a non-negative integer."))
                })
            })
            .transpose()?,
    })
}

/// A time as S3 clients send it in a header (an HTTP date) or in XML (ISO 8601), in whole
/// seconds since the epoch.
fn timestamp_seconds(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(t) = httpdate::parse_http_date(s) {
        return Some(OffsetDateTime::from(t).unix_timestamp());
    }
    OffsetDateTime::parse(s, &Rfc3339)
        .ok()
        .map(OffsetDateTime::unix_timestamp)
}

/// One object named in a `<Delete>` document, with its conditions (`ETag`, `LastModifiedTime`,
/// `Size`), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTarget {
    pub key: String,
    pub version_id: Option<String>,
    pub condition: DeletePrecondition,
}

/// A parsed `<Delete>` request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRequest {
    /// Quiet mode: the result lists only the failures.
    pub quiet: bool,
    pub objects: Vec<DeleteTarget>,
}

/// What happened to one object of a DeleteObjects request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// Deleted, with what the delete did (a marker created or removed).
    Deleted(DeleteTarget, DeleteResult),
    Failed {
        target: DeleteTarget,
        code: S3ErrorCode,
        message: String,
    },
}

fn malformed(detail: &str) -> ApiError {
    ApiError::new(
        S3ErrorCode::MalformedXML,
        format!("{} ({detail})", S3ErrorCode::MalformedXML.default_message()),
    )
}

/// Parses a `<Delete>` document: 1 to 1000 `<Object>`s, each with a `<Key>`, and `<Quiet>`.
pub fn parse_delete(body: &[u8]) -> ApiResult<DeleteRequest> {
    let root = parse_document(body)?;
    if root.name != "Delete" {
        return Err(malformed(&format!(
            "expected a Delete document, found <{}>",
            root.name
        )));
    }
    let quiet = match root.child("Quiet").map(|q| q.text.trim()) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(malformed("Quiet must be true or false")),
    };
    let mut objects = Vec::new();
    for object in root.children.iter().filter(|c| c.name == "Object") {
        let key = object
            .child("Key")
            .ok_or_else(|| malformed("an Object without a Key"))?;
        let condition = DeletePrecondition {
            etag: object.child("ETag").map(|e| e.text.trim().to_owned()),
            mod_time_s: object
                .child("LastModifiedTime")
                .map(|t| {
                    timestamp_seconds(&t.text)
                        .ok_or_else(|| malformed("LastModifiedTime is not an ISO 8601 date"))
                })
                .transpose()?,
            size: object
                .child("Size")
                .map(|n| {
                    n.text
                        .trim()
                        .parse::<u64>()
                        .map_err(|_| malformed("Size is not a non-negative integer"))
                })
                .transpose()?,
        };
        objects.push(DeleteTarget {
            key: key.text.clone(),
            version_id: object.child("VersionId").map(|v| v.text.trim().to_owned()),
            condition,
        });
    }
    if objects.is_empty() || objects.len() > MAX_DELETE_KEYS {
        return Err(malformed(&format!(
            "a Delete request names 1 to {MAX_DELETE_KEYS} objects, not {}",
            objects.len()
        )));
    }
    Ok(DeleteRequest { quiet, objects })
}

/// The `<DeleteResult>` document, in request order.
pub fn render_delete_result(quiet: bool, outcomes: &[DeleteOutcome]) -> String {
    let root = "DeleteResult";
    let mut w = XmlWriter::new(root);
    for outcome in outcomes {
        match outcome {
            DeleteOutcome::Deleted(target, result) => {
                if !quiet {
                    w.open("Deleted")
                        .elem("Key", &target.key)
                        .elem_opt("VersionId", target.version_id.as_deref());
                    if result.delete_marker {
                        w.elem("DeleteMarker", "true");
                        if let Some(v) = result.version_id {
                            w.elem("DeleteMarkerVersionId", &v.to_string());
                        }
                    }
                    w.close("Deleted");
                }
            }
            DeleteOutcome::Failed {
                target,
                code,
                message,
            } => {
                w.open("Error")
                    .elem("Key", &target.key)
                    .elem_opt("VersionId", target.version_id.as_deref())
                    .elem("Code", code.code())
                    .elem("Message", message)
                    .close("Error");
            }
        }
    }
    w.finish(root)
}

/// `POST /bucket?delete`. A `Content-MD5`, when sent, must match the body; `x-amz-checksum-*`
/// values are checked by the body verifier.
pub async fn delete_objects(ctx: &ReqCtx, bucket: &str) -> ApiResult<Response> {
    let expected_md5 = content_md5(&ctx.parts.headers)?;
    let body = ctx.small_body().await?;
    if expected_md5.is_some_and(|md5| md5 != <[u8; 16]>::from(Md5::digest(&body))) {
        return Err(S3ErrorCode::BadDigest.into());
    }
    let request = parse_delete(&body)?;
    ctx.layer().bucket_info(bucket).await?;
    // Each key is decided as this request's own (its endpoint, for the ACL evaluation).
    let endpoint = crate::router::Endpoint::DeleteObjects {
        bucket: bucket.to_owned(),
    };
    let outcomes: Vec<DeleteOutcome> = futures::stream::iter(request.objects)
        .map(|target| delete_one(ctx, bucket, &endpoint, target))
        .buffered(DELETE_CONCURRENCY)
        .collect()
        .await;
    Ok(xml_response(render_delete_result(request.quiet, &outcomes)))
}

async fn delete_one(
    ctx: &ReqCtx,
    bucket: &str,
    endpoint: &crate::router::Endpoint,
    target: DeleteTarget,
) -> DeleteOutcome {
    let version = match target.version_id.as_deref().map(str::parse::<VersionId>) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(e)) => {
            let err = object_error(e);
            return DeleteOutcome::Failed {
                target,
                code: err.error.code,
                message: err.error.message,
            };
        }
    };
    // Each key is authorized on its own, as S3 does: a refused key is an error entry.
    let (plain, of_version) = crate::authz::DELETE_OBJECTS_KEY_ACTIONS;
    let action = if version.is_some() { of_version } else { plain };
    let resource = crate::authz::object_arn(bucket, &target.key);
    if let Err(e) = ctx.authorize_item(endpoint, action, resource).await {
        return DeleteOutcome::Failed {
            target,
            code: e.error.code,
            message: if e.error.code == S3ErrorCode::AccessDenied {
                // Per key, as S3 answers it (the request's own refusal names the action).
                "Access Denied".to_owned()
            } else {
                e.error.message
            },
        };
    }
    let opts = DeleteOptions {
        bypass_governance: crate::object_lock::bypass_governance(ctx),
        precondition: (!target.condition.is_empty()).then(|| target.condition.clone()),
    };
    match ctx
        .layer()
        .delete_object_version_with(bucket, &target.key, version, opts)
        .await
    {
        Ok(result) => DeleteOutcome::Deleted(target, result),
        Err(e) => {
            let err = object_error(e);
            DeleteOutcome::Failed {
                target,
                code: err.error.code,
                message: err.error.message,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(key: &str) -> DeleteTarget {
        DeleteTarget {
            key: key.into(),
            version_id: None,
            condition: DeletePrecondition::default(),
        }
    }

    #[test]
    fn delete_documents_are_parsed() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Object><Key>a b</Key></Object>
  <Object><Key> x&amp;y </Key><VersionId>null</VersionId></Object>
  <Quiet>true</Quiet>
</Delete>"#;
        let req = parse_delete(body).unwrap();
        assert!(req.quiet);
        assert_eq!(
            req.objects,
            vec![
                target("a b"),
                DeleteTarget {
                    key: " x&y ".into(),
                    version_id: Some("null".into()),
                    condition: DeletePrecondition::default(),
                }
            ]
        );
        assert!(
            !parse_delete(b"<Delete><Object><Key>k</Key></Object></Delete>")
                .unwrap()
                .quiet
        );
    }

    #[test]
    fn delete_conditions_are_parsed() {
        let body = br#"<Delete><Object><Key>k</Key><ETag>"e1"</ETag>
            <LastModifiedTime>2015-01-01T00:00:00.000Z</LastModifiedTime><Size>5</Size></Object>
            <Object><Key>j</Key></Object></Delete>"#;
        let req = parse_delete(body).unwrap();
        assert_eq!(
            req.objects[0].condition,
            DeletePrecondition {
                etag: Some("\"e1\"".into()),
                mod_time_s: Some(1_420_070_400),
                size: Some(5),
            }
        );
        assert!(req.objects[1].condition.is_empty());
        for bad in [
            "<Size>-1</Size>",
            "<LastModifiedTime>yesterday</LastModifiedTime>",
        ] {
            let body = format!("<Delete><Object><Key>k</Key>{bad}</Object></Delete>");
            assert_eq!(
                parse_delete(body.as_bytes()).unwrap_err().code(),
                S3ErrorCode::MalformedXML,
                "{bad}"
            );
        }
        let mut headers = http::HeaderMap::new();
        headers.insert("if-match", "\"e2\"".parse().unwrap());
        headers.insert(
            "x-amz-if-match-last-modified-time",
            "Thu, 01 Jan 2015 00:00:00 GMT".parse().unwrap(),
        );
        headers.insert("x-amz-if-match-size", "0".parse().unwrap());
        assert_eq!(
            delete_precondition(&headers).unwrap(),
            DeletePrecondition {
                etag: Some("\"e2\"".into()),
                mod_time_s: Some(1_420_070_400),
                size: Some(0),
            }
        );
        for (name, value) in [
            ("x-amz-if-match-size", "big"),
            ("x-amz-if-match-last-modified-time", "soon"),
        ] {
            let mut h = http::HeaderMap::new();
            h.insert(name, value.parse().unwrap());
            assert_eq!(
                delete_precondition(&h).unwrap_err().code(),
                S3ErrorCode::InvalidArgument,
                "{name}"
            );
        }
    }

    #[test]
    fn bad_delete_documents_are_malformed() {
        let too_many = format!(
            "<Delete>{}</Delete>",
            "<Object><Key>k</Key></Object>".repeat(1001)
        );
        for body in [
            &b"<Delete></Delete>"[..],
            b"<Delete><Object><VersionId>1</VersionId></Object></Delete>",
            b"<Delete><Object><Key>k</Key></Object><Quiet>yes</Quiet></Delete>",
            b"<Other><Object><Key>k</Key></Object></Other>",
            b"<Delete><Object><Key>k</Key></Object>",
            too_many.as_bytes(),
        ] {
            let err = parse_delete(body).unwrap_err();
            assert_eq!(
                err.code(),
                S3ErrorCode::MalformedXML,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn delete_result_document() {
        let outcomes = vec![
            DeleteOutcome::Deleted(target("a"), DeleteResult::default()),
            DeleteOutcome::Failed {
                target: target("b<"),
                code: S3ErrorCode::InternalError,
                message: "boom".into(),
            },
        ];
        let head = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
                    <DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
        let error =
            "<Error><Key>b&lt;</Key><Code>InternalError</Code><Message>boom</Message></Error>";
        assert_eq!(
            render_delete_result(false, &outcomes),
            format!("{head}<Deleted><Key>a</Key></Deleted>{error}</DeleteResult>")
        );
        assert_eq!(
            render_delete_result(true, &outcomes),
            format!("{head}{error}</DeleteResult>")
        );
    }
}
