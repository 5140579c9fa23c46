//! Server-side copy. Two ways to do it:
//!
//! - [`stream_copy`]: the source's GET body is fed to a PUT of the destination, block by block, so
//!   memory stays at a few blocks whatever the size. The ETag is the MD5 of the bytes, which is the
//!   source's ETag for a single-part object and a fresh single-part ETag for a multipart one (as
//!   S3's CopyObject does).
//! - [`ErasureSet::replace_metadata`]: an object copied onto itself with new metadata keeps its
//!   shards; each drive's `quarry.meta` is rewritten in place (with its own inline shard, if any)
//!   under the object's lock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use quarry_disk::DriveError;

use crate::api::{
    is_lock_header, ByteStream, CopyOptions, ObjectInfo, ObjectLayer, PutOptions, ReplaceMetadata,
    META_UPDATED_HEADER, TAGS_HEADER,
};
use crate::error::{Error, Result};
use crate::quorum::check_write_quorum;
use crate::set::{object_info, ErasureSet};

/// Sets the tags of a copy's headers: `Some` replaces them (empty: none), `None` keeps them.
fn set_tags(headers: &mut BTreeMap<String, String>, tags: Option<&str>) {
    match tags {
        Some("") => {
            headers.remove(TAGS_HEADER);
        }
        Some(t) => {
            headers.insert(TAGS_HEADER.to_owned(), t.to_owned());
        }
        None => {}
    }
}

/// Copies by streaming the source into a PUT of the destination.
pub(crate) async fn stream_copy<L: ObjectLayer + ?Sized>(
    layer: &L,
    src_bucket: &str,
    src_key: &str,
    dst_bucket: &str,
    dst_key: &str,
    opts: CopyOptions,
) -> Result<ObjectInfo> {
    let reader = layer
        .get_object_version(src_bucket, src_key, opts.source_version_id, None)
        .await?;
    let info = reader.info;
    check_source_version(&info, opts.source_version.as_ref())?;

    // A failure reading the source reaches the PUT as a body error; keep the original error so
    // the client sees what really happened (e.g. lost read quorum), not a truncated upload.
    let source_error: Arc<Mutex<Option<Error>>> = Arc::default();
    let slot = source_error.clone();
    let tap = opts.checksums.as_ref().map(|c| c.tap.clone());
    let body: ByteStream = Box::pin(reader.body.map(move |item| match item {
        Ok(data) => {
            if let Some(tap) = &tap {
                tap(&data);
            }
            Ok(data)
        }
        Err(e) => {
            let message = e.to_string();
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            Err(std::io::Error::other(message))
        }
    }));
    let (mut headers, user_meta) = match opts.metadata {
        Some(ReplaceMetadata { headers, user_meta }) => (headers, user_meta),
        None => {
            let mut headers = info.headers.clone();
            headers.remove(crate::multipart::COMPLETED_UPLOAD);
            headers.remove(META_UPDATED_HEADER);
            (headers, info.user_meta.clone())
        }
    };
    set_tags(&mut headers, opts.tags.as_deref());
    headers.retain(|name, _| !is_lock_header(name));
    headers.extend(opts.lock.clone());
    crate::api::set_acl_entry(&mut headers, opts.acl.as_deref());
    let (checksums, late_checksums) = match opts.checksums {
        Some(c) => (BTreeMap::new(), Some(c.result)),
        None => (full_object_checksums(&info.checksums), None),
    };
    let put = PutOptions {
        size: Some(info.size),
        headers,
        user_meta,
        checksums,
        precondition: opts.precondition,
        late_checksums,
        ..Default::default()
    };
    match layer.put_object(dst_bucket, dst_key, body, put).await {
        Err(Error::Body(io)) => {
            let original = source_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            Err(original.unwrap_or(Error::Body(io)))
        }
        other => other,
    }
}

/// `PreconditionFailed` unless the source is the version the caller checked.
fn check_source_version(info: &ObjectInfo, want: Option<&(String, i64)>) -> Result<()> {
    match want {
        Some((etag, mod_time_ns)) if *etag != info.etag || *mod_time_ns != info.mod_time_ns => {
            Err(Error::PreconditionFailed)
        }
        _ => Ok(()),
    }
}

/// The checksums that still describe the copied bytes: full-object ones. A composite checksum
/// of a multipart object (`<base64>-<parts>`) describes its parts, which a copy does not keep.
fn full_object_checksums(checksums: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    checksums
        .iter()
        .filter(|(_, v)| !v.contains('-'))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

impl ErasureSet {
    /// Gives an object new headers and user metadata (and a new modification time) without
    /// touching its data: every drive holding the current version gets its own metadata copy
    /// rewritten, under the object's lock. Returns `None` when that is not how S3 would copy the
    /// object (a multipart object copied onto itself gets a new single-part ETag), or when new
    /// checksums must be computed from the bytes: the caller then streams the copy.
    pub(crate) async fn replace_metadata(
        &self,
        bucket: &str,
        key: &str,
        opts: &CopyOptions,
        metadata: &ReplaceMetadata,
    ) -> Result<Option<ObjectInfo>> {
        let _guard = self.locks.lock(&format!("{bucket}/{key}")).await?;
        let (current, metas, _) = self.read_meta_quorum(bucket, key).await?;
        check_source_version(
            &object_info(bucket, key, &current),
            opts.source_version.as_ref(),
        )?;
        if current.parts.len() > 1 || opts.checksums.is_some() {
            return Ok(None);
        }
        if let Some(p) = &opts.precondition {
            self.check_precondition(bucket, key, p).await?;
        }
        // Strictly newer than the version it replaces, so it wins wherever both are seen.
        let mod_time_ns = self.now_ns().max(current.mod_time_ns.saturating_add(1));
        let rewrite = |mut m: quarry_disk::ObjectMeta| {
            // The reserved entries (how the data is encrypted) describe the data, which stays;
            // the tags stay unless the copy replaces them.
            let kept_tags = m.headers.get(TAGS_HEADER).cloned();
            let mut headers = metadata.headers.clone();
            headers.retain(|k, _| !k.starts_with(crate::sse::PREFIX));
            headers.extend(crate::sse::reserved(&m.headers));
            m.headers = headers;
            set_tags(
                &mut m.headers,
                opts.tags.as_deref().or(kept_tags.as_deref()),
            );
            crate::api::set_acl_entry(&mut m.headers, opts.acl.as_deref());
            m.user_meta = metadata.user_meta.clone();
            m.mod_time_ns = mod_time_ns;
            m
        };
        let jobs = self.drives.iter().zip(metas).map(|(d, m)| {
            let d = d.clone();
            let m = m.map(rewrite);
            async move {
                match m {
                    Some(m) => d.write_meta(bucket, key, &m).await,
                    None => Err(DriveError::FileNotFound),
                }
            }
        });
        let answers = futures::future::join_all(jobs).await;
        let ok = check_write_quorum(&answers, &current.erasure)?;
        if ok < self.drives.len() {
            self.queue_heal(bucket, key);
        }
        Ok(Some(object_info(bucket, key, &rewrite(current))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composite_checksums_are_not_copied() {
        let mut sums = BTreeMap::new();
        sums.insert("crc32".to_string(), "AAAAAA==".to_string());
        sums.insert("sha256".to_string(), "abc=-3".to_string());
        let kept = full_object_checksums(&sums);
        assert_eq!(kept.len(), 1);
        assert!(kept.contains_key("crc32"));
    }

    #[test]
    fn source_version_must_match() {
        let info = ObjectInfo {
            bucket: "b".into(),
            key: "k".into(),
            size: 1,
            mod_time_ns: 5,
            etag: "e".into(),
            headers: BTreeMap::new(),
            user_meta: BTreeMap::new(),
            checksums: BTreeMap::new(),
            parts: 1,
            ..Default::default()
        };
        assert!(check_source_version(&info, None).is_ok());
        assert!(check_source_version(&info, Some(&("e".into(), 5))).is_ok());
        assert!(matches!(
            check_source_version(&info, Some(&("e".into(), 6))),
            Err(Error::PreconditionFailed)
        ));
        assert!(matches!(
            check_source_version(&info, Some(&("x".into(), 5))),
            Err(Error::PreconditionFailed)
        ));
    }
}
