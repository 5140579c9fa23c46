//! DeleteObject and DeleteObjects. Deleting a key that does not exist succeeds, as in S3; a
//! missing bucket does not.

use axum::response::Response;
use futures::StreamExt;
use md5::{Digest, Md5};
use quarry_object::{DeleteOptions, DeleteResult, VersionId};

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
    let opts = DeleteOptions {
        bypass_governance: crate::object_lock::bypass_governance(ctx),
    };
    let result = ctx
        .layer()
        .delete_object_version_with(bucket, key, version, opts)
        .await?;
    Ok(crate::versioning::delete_response(&result))
}

/// One object named in a `<Delete>` document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteTarget {
    pub key: String,
    pub version_id: Option<String>,
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
        objects.push(DeleteTarget {
            key: key.text.clone(),
            version_id: object.child("VersionId").map(|v| v.text.trim().to_owned()),
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
    let outcomes: Vec<DeleteOutcome> = futures::stream::iter(request.objects)
        .map(|target| delete_one(ctx, bucket, target))
        .buffered(DELETE_CONCURRENCY)
        .collect()
        .await;
    Ok(xml_response(render_delete_result(request.quiet, &outcomes)))
}

async fn delete_one(ctx: &ReqCtx, bucket: &str, target: DeleteTarget) -> DeleteOutcome {
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
    if !ctx.allows(action, resource) {
        return DeleteOutcome::Failed {
            target,
            code: S3ErrorCode::AccessDenied,
            message: "Access Denied".to_owned(),
        };
    }
    let opts = DeleteOptions {
        bypass_governance: crate::object_lock::bypass_governance(ctx),
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
                    version_id: Some("null".into())
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
