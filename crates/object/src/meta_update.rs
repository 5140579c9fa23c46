//! In-place changes of one version's metadata (tags, retention, legal hold, a re-sealed object
//! key): read the version
//! with its own quorum under the object's lock, change its stored headers, and write each drive's
//! copy back (its own shard index and inline data kept) on a write quorum. The version's data,
//! ETag and modification time do not change; a stamp ([`META_UPDATED_HEADER`]) tells the new
//! copies from those that missed the change.
//!
//! An upload in progress is changed the same way (its headers hold the sealed object key of an
//! encrypted upload): under the upload's lock, each drive's copy rewritten on a write quorum
//! with the stamp, which [`ErasureSet::upload_quorum`] prefers among copies that agree.

use std::collections::BTreeMap;

use quarry_disk::{DriveError, ObjectMeta};

use crate::api::{
    meta_updated_ns, HeadersUpdate, ObjectInfo, UploadHeadersUpdate, VersionId, META_UPDATED_HEADER,
};
use crate::error::Result;
use crate::quorum::check_write_quorum;
use crate::set::{object_info, ErasureSet};

impl ErasureSet {
    /// Stamps `headers`, the changed copy of `old`, with the time of the change: strictly after
    /// the stamp it replaces, so the new copies win wherever both are seen.
    fn stamp(&self, old: &BTreeMap<String, String>, headers: &mut BTreeMap<String, String>) {
        let stamp = self.now_ns().max(meta_updated_ns(old).saturating_add(1));
        headers.insert(META_UPDATED_HEADER.to_owned(), stamp.to_string());
    }

    /// Applies `update` to the stored headers of one version (`None`: the latest).
    pub(crate) async fn update_headers(
        &self,
        bucket: &str,
        key: &str,
        version: Option<VersionId>,
        update: &HeadersUpdate,
    ) -> Result<ObjectInfo> {
        let _guard = self.locks.lock(&format!("{bucket}/{key}")).await?;
        let (current, metas) = self.resolve_version(bucket, key, version).await?;
        let mut headers: BTreeMap<String, String> = current.headers.clone();
        update(&object_info(bucket, key, &current), &mut headers)?;
        self.stamp(&current.headers, &mut headers);
        let rewrite = |mut m: ObjectMeta| {
            m.headers = headers.clone();
            m
        };
        let jobs = self.drives.iter().zip(metas).map(|(d, m)| {
            let d = d.clone();
            let m = m.map(rewrite);
            async move {
                match m {
                    Some(m) => d.write_meta(bucket, key, &m).await,
                    // A drive without this copy gets it from heal.
                    None => Err(DriveError::FileNotFound),
                }
            }
        });
        let answers = futures::future::join_all(jobs).await;
        let ok = check_write_quorum(&answers, &current.erasure)?;
        if ok < self.drives.len() {
            self.queue_heal(bucket, key);
        }
        Ok(object_info(bucket, key, &rewrite(current)))
    }

    /// Applies `update` to the stored headers of an upload in progress.
    pub(crate) async fn update_upload_headers(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        update: &UploadHeadersUpdate,
    ) -> Result<()> {
        let _guard = self
            .locks
            .lock(&Self::upload_lock(bucket, key, upload_id))
            .await?;
        let (current, metas) = self.upload_quorum(bucket, key, upload_id).await?;
        let mut headers = current.headers.clone();
        update(&mut headers)?;
        self.stamp(&current.headers, &mut headers);
        let jobs = self.drives.iter().zip(metas).map(|(d, m)| {
            let d = d.clone();
            // Each drive keeps its own copy (its shard index); only the headers change.
            let m = m.map(|mut m| {
                m.headers = headers.clone();
                m
            });
            async move {
                match m {
                    Some(m) => d.create_upload(&m).await,
                    // A drive without this copy is not given one here (heal rebuilds uploads).
                    None => Err(DriveError::FileNotFound),
                }
            }
        });
        let answers = futures::future::join_all(jobs).await;
        check_write_quorum(&answers, &current.erasure)?;
        Ok(())
    }
}
