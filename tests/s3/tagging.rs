//! Object and bucket tagging with aws-sdk-s3: tags on PUT, multipart and copy, per version,
//! `x-amz-tagging-count`, AWS's limits, and the bucket's tag set.

use quarry_integration::aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Tag, Tagging,
    TaggingDirective, VersioningConfiguration,
};
use quarry_integration::aws_sdk_s3::Client;
use quarry_integration::*;

fn tagging(tags: &[(&str, &str)]) -> Tagging {
    Tagging::builder()
        .set_tag_set(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build().unwrap())
                .collect(),
        ))
        .build()
        .unwrap()
}

async fn tags_of(
    c: &Client,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Vec<(String, String)> {
    c.get_object_tagging()
        .bucket(bucket)
        .key(key)
        .set_version_id(version.map(str::to_owned))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetObjectTagging {key}: {}", describe(&e)))
        .tag_set()
        .iter()
        .map(|t| (t.key().to_owned(), t.value().to_owned()))
        .collect()
}

fn pairs(tags: &[(&str, &str)]) -> Vec<(String, String)> {
    tags.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn tag_count(c: &Client, bucket: &str, key: &str) -> Option<String> {
    let head = c
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap();
    let get = c.get_object().bucket(bucket).key(key).send().await.unwrap();
    assert_eq!(head.tag_count, get.tag_count, "HEAD and GET agree");
    head.tag_count.map(|n| n.to_string())
}

#[tokio::test]
async fn object_tags_on_put_tagging_calls_multipart_and_copy() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("tagged").await;

    // x-amz-tagging on PUT; GET/HEAD count them.
    c.put_object()
        .bucket("tagged")
        .key("k")
        .tagging("foo=bar&bar&sp%20ace=a%2Bb")
        .body(b"data".to_vec().into())
        .send()
        .await
        .unwrap();
    assert_eq!(
        tags_of(&c, "tagged", "k", None).await,
        pairs(&[("bar", ""), ("foo", "bar"), ("sp ace", "a+b")])
    );
    assert_eq!(tag_count(&c, "tagged", "k").await.as_deref(), Some("3"));

    // PutObjectTagging replaces the set; data, ETag and Last-Modified stay.
    let before = c
        .head_object()
        .bucket("tagged")
        .key("k")
        .send()
        .await
        .unwrap();
    c.put_object_tagging()
        .bucket("tagged")
        .key("k")
        .tagging(tagging(&[("key", "val"), ("key2", "val2")]))
        .send()
        .await
        .unwrap();
    assert_eq!(
        tags_of(&c, "tagged", "k", None).await,
        pairs(&[("key", "val"), ("key2", "val2")])
    );
    let after = c
        .head_object()
        .bucket("tagged")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(before.e_tag, after.e_tag);
    assert_eq!(before.last_modified, after.last_modified);
    let body = c
        .get_object()
        .bucket("tagged")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(
        body.body.collect().await.unwrap().into_bytes().as_ref(),
        b"data"
    );

    // CopyObject: the source's tags by default, the request's with REPLACE.
    c.copy_object()
        .bucket("tagged")
        .key("copy")
        .copy_source("tagged/k")
        .send()
        .await
        .unwrap();
    assert_eq!(
        tags_of(&c, "tagged", "copy", None).await,
        pairs(&[("key", "val"), ("key2", "val2")])
    );
    c.copy_object()
        .bucket("tagged")
        .key("copy2")
        .copy_source("tagged/k")
        .tagging_directive(TaggingDirective::Replace)
        .tagging("x=y")
        .send()
        .await
        .unwrap();
    assert_eq!(
        tags_of(&c, "tagged", "copy2", None).await,
        pairs(&[("x", "y")])
    );
    // Metadata REPLACE keeps the tags (their directive is COPY).
    c.copy_object()
        .bucket("tagged")
        .key("copy3")
        .copy_source("tagged/k")
        .metadata_directive(quarry_integration::aws_sdk_s3::types::MetadataDirective::Replace)
        .content_type("text/x-new")
        .send()
        .await
        .unwrap();
    assert_eq!(tags_of(&c, "tagged", "copy3", None).await.len(), 2);

    // DeleteObjectTagging: 204 and no tags; no count header.
    c.delete_object_tagging()
        .bucket("tagged")
        .key("k")
        .send()
        .await
        .unwrap();
    assert!(tags_of(&c, "tagged", "k", None).await.is_empty());
    assert_eq!(tag_count(&c, "tagged", "k").await, None);

    // CreateMultipartUpload with x-amz-tagging: the completed object has them.
    let up = c
        .create_multipart_upload()
        .bucket("tagged")
        .key("mp")
        .tagging("Hello=World&foo=bar")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = c
        .upload_part()
        .bucket("tagged")
        .key("mp")
        .upload_id(id)
        .part_number(1)
        .body(b"x".to_vec().into())
        .send()
        .await
        .unwrap();
    c.complete_multipart_upload()
        .bucket("tagged")
        .key("mp")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        tags_of(&c, "tagged", "mp", None).await,
        pairs(&[("Hello", "World"), ("foo", "bar")])
    );

    // A missing key is NoSuchKey; a missing bucket NoSuchBucket.
    let e = c
        .get_object_tagging()
        .bucket("tagged")
        .key("nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchKey"));
    let e = c
        .put_object_tagging()
        .bucket("nobucket")
        .key("k")
        .tagging(tagging(&[("a", "b")]))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchBucket"));
}

#[tokio::test]
async fn tag_limits_are_refused_with_invalid_tag() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("tag-limits").await;
    c.put_object()
        .bucket("tag-limits")
        .key("k")
        .body(b"d".to_vec().into())
        .send()
        .await
        .unwrap();
    let ten: Vec<(String, String)> = (0..10).map(|i| (format!("{i}"), "v".repeat(256))).collect();
    let ten_ref: Vec<(&str, &str)> = ten.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // The control: at the limits it passes.
    c.put_object_tagging()
        .bucket("tag-limits")
        .key("k")
        .tagging(tagging(&ten_ref))
        .send()
        .await
        .unwrap();
    assert_eq!(tags_of(&c, "tag-limits", "k", None).await.len(), 10);

    let long_key = "k".repeat(129);
    let long_value = "v".repeat(257);
    let eleven: Vec<(String, String)> = (0..11).map(|i| (format!("{i}"), String::new())).collect();
    let eleven_ref: Vec<(&str, &str)> = eleven
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for bad in [
        eleven_ref,
        vec![(long_key.as_str(), "v")],
        vec![("k", long_value.as_str())],
        vec![("aws:reserved", "v")],
    ] {
        let e = c
            .put_object_tagging()
            .bucket("tag-limits")
            .key("k")
            .tagging(tagging(&bad))
            .send()
            .await
            .unwrap_err();
        assert_eq!(error_code(&e).as_deref(), Some("InvalidTag"), "{bad:?}");
    }
    // Refused tag sets changed nothing.
    assert_eq!(tags_of(&c, "tag-limits", "k", None).await.len(), 10);
    // A bad x-amz-tagging on PUT stores nothing.
    let e = c
        .put_object()
        .bucket("tag-limits")
        .key("k2")
        .tagging("a=1&a=2")
        .body(b"d".to_vec().into())
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("InvalidTag"));
    assert!(c
        .head_object()
        .bucket("tag-limits")
        .key("k2")
        .send()
        .await
        .is_err());
}

#[tokio::test]
async fn tags_belong_to_a_version() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("tag-versions").await;
    c.put_bucket_versioning()
        .bucket("tag-versions")
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let v1 = c
        .put_object()
        .bucket("tag-versions")
        .key("k")
        .tagging("v=1")
        .body(b"one".to_vec().into())
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    let v2 = c
        .put_object()
        .bucket("tag-versions")
        .key("k")
        .body(b"two".to_vec().into())
        .send()
        .await
        .unwrap()
        .version_id
        .unwrap();
    assert_eq!(
        tags_of(&c, "tag-versions", "k", Some(&v1)).await,
        pairs(&[("v", "1")])
    );
    assert!(tags_of(&c, "tag-versions", "k", None).await.is_empty());
    let out = c
        .put_object_tagging()
        .bucket("tag-versions")
        .key("k")
        .version_id(&v1)
        .tagging(tagging(&[("old", "yes")]))
        .send()
        .await
        .unwrap();
    assert_eq!(out.version_id.as_deref(), Some(v1.as_str()));
    assert_eq!(
        tags_of(&c, "tag-versions", "k", Some(&v1)).await,
        pairs(&[("old", "yes")])
    );
    // The latest is untouched, and is still v2.
    assert!(tags_of(&c, "tag-versions", "k", Some(&v2)).await.is_empty());
    let head = c
        .head_object()
        .bucket("tag-versions")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(head.version_id.as_deref(), Some(v2.as_str()));
    // A version that does not exist: NoSuchVersion.
    let e = c
        .get_object_tagging()
        .bucket("tag-versions")
        .key("k")
        .version_id("5f0c7b8e-0000-4000-8000-000000000000")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchVersion"));
}

#[tokio::test]
async fn bucket_tags() {
    let s = TestServer::start(4).await;
    let c = s.client();
    s.create_bucket("bkt-tags").await;
    let e = c
        .get_bucket_tagging()
        .bucket("bkt-tags")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchTagSet"));
    c.put_bucket_tagging()
        .bucket("bkt-tags")
        .tagging(tagging(&[("Hello", "World"), ("team", "storage")]))
        .send()
        .await
        .unwrap();
    let got = c
        .get_bucket_tagging()
        .bucket("bkt-tags")
        .send()
        .await
        .unwrap();
    let got: Vec<(String, String)> = got
        .tag_set()
        .iter()
        .map(|t| (t.key().to_owned(), t.value().to_owned()))
        .collect();
    assert_eq!(got, pairs(&[("Hello", "World"), ("team", "storage")]));
    // 50 tags are allowed on a bucket, 51 are not.
    let many: Vec<(String, String)> = (0..51).map(|i| (format!("k{i}"), String::new())).collect();
    let refs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    c.put_bucket_tagging()
        .bucket("bkt-tags")
        .tagging(tagging(&refs[..50]))
        .send()
        .await
        .unwrap();
    let e = c
        .put_bucket_tagging()
        .bucket("bkt-tags")
        .tagging(tagging(&refs))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("InvalidTag"));
    c.delete_bucket_tagging()
        .bucket("bkt-tags")
        .send()
        .await
        .unwrap();
    let e = c
        .get_bucket_tagging()
        .bucket("bkt-tags")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchTagSet"));
    let e = c
        .get_bucket_tagging()
        .bucket("nobucket")
        .send()
        .await
        .unwrap_err();
    assert_eq!(error_code(&e).as_deref(), Some("NoSuchBucket"));
}
