//! Listing: a sorted merge of the walks of every drive of a set. A key is listed when a read
//! quorum of drives agrees on one version of it; keys held only by a minority (debris of a
//! write that never reached quorum) are not.

use std::collections::BTreeMap;
use std::sync::Arc;

use quarry_disk::{DriveError, ObjectMeta, WalkEntry, WalkOptions};

use crate::api::{ListOptions, ListResult};
use crate::error::{Error, Result};
use crate::quorum::{on_all, pick_version};
use crate::set::{object_info, ErasureSet};

/// One listed name: an object or a common prefix.
enum Item {
    Object(crate::api::ObjectInfo),
    Prefix(String),
}

impl ErasureSet {
    pub async fn list_objects(
        self: &Arc<Self>,
        bucket: &str,
        opts: ListOptions,
    ) -> Result<ListResult> {
        self.list_objects_with(bucket, opts, false).await
    }

    /// Lists keys whose latest version has a read quorum; with `with_deleted`, keys whose latest
    /// version is a delete marker too (ListObjectVersions lists those), else not (ListObjects).
    pub(crate) async fn list_objects_with(
        self: &Arc<Self>,
        bucket: &str,
        opts: ListOptions,
        with_deleted: bool,
    ) -> Result<ListResult> {
        let mut result = ListResult::default();
        if opts.max_keys == 0 {
            self.require_bucket(bucket).await?;
            return Ok(result);
        }
        // No separate check that the bucket exists: a drive without it fails its walk with
        // `VolumeNotFound`, and the walks below answer `BucketNotFound` exactly when that check
        // would (fewer than a read quorum have it, and some drive says it is missing). It cost
        // a round trip to every drive of the set per page.
        let delimiter = opts.delimiter.clone().filter(|d| !d.is_empty());
        // Drives group by '/' themselves (without reading below it); other delimiters are
        // applied here over a full walk.
        let delimited = delimiter.as_deref() == Some("/");
        let limit = opts.max_keys + 1;
        let quorum = self.set_read_quorum();
        let mut marker = opts.marker.clone();
        let mut items: Vec<Item> = Vec::new();

        loop {
            let walk = WalkOptions {
                prefix: opts.prefix.clone(),
                marker: marker.clone(),
                delimited,
                limit,
            };
            let answers = on_all(&self.drives, |d| {
                let (b, w) = (bucket.to_string(), walk.clone());
                async move { d.walk(&b, &w).await }
            })
            .await;
            let ok: Vec<&Vec<WalkEntry>> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
            if ok.len() < quorum {
                if answers
                    .iter()
                    .any(|a| matches!(a, Err(DriveError::VolumeNotFound)))
                {
                    return Err(Error::BucketNotFound);
                }
                return Err(Error::ReadQuorum {
                    have: ok.len(),
                    need: quorum,
                });
            }
            // Entries up to `bound` are complete on every drive that answered: a drive that
            // returned a full page may hold more after its last entry.
            let bound: Option<String> = ok
                .iter()
                .filter(|e| e.len() >= limit)
                .filter_map(|e| e.last().map(|l| l.name().to_string()))
                .min();
            let answered = ok.len();
            // The drives' entries are moved into the merge, not cloned.
            let mut merged: BTreeMap<String, (usize, Vec<Arc<ObjectMeta>>)> = BTreeMap::new();
            for entries in answers.into_iter().filter_map(|a| a.ok()) {
                for e in entries {
                    if let Some(b) = &bound {
                        if e.name() > b.as_str() {
                            break;
                        }
                    }
                    let (name, meta) = match e {
                        WalkEntry::Object { key, meta } => (key, Some(meta)),
                        WalkEntry::Prefix(p) => (p, None),
                    };
                    let slot = merged.entry(name).or_default();
                    slot.0 += 1;
                    slot.1.extend(meta);
                }
            }
            let mut last_name = None;
            for (name, (count, metas)) in merged {
                last_name = Some(name.clone());
                if name.ends_with('/') && metas.is_empty() {
                    // A common prefix from a delimited walk.
                    if count >= quorum {
                        items.push(Item::Prefix(name));
                    }
                    continue;
                }
                let mut copies: Vec<std::result::Result<Arc<ObjectMeta>, DriveError>> =
                    metas.into_iter().map(Ok).collect();
                copies.resize_with(answered, || Err(DriveError::FileNotFound));
                // Listed only when a read quorum agrees on its latest version (what pick_meta
                // would find), taken out of the copies rather than cloned.
                let picked = pick_version(&copies)
                    .and_then(|(i, _)| copies.swap_remove(i).ok())
                    .filter(|meta| with_deleted || !meta.delete_marker);
                if let Some(meta) = picked {
                    match delimiter.as_deref().filter(|_| !delimited) {
                        Some(d) => {
                            let rest = &name[opts.prefix.len()..];
                            match rest.find(d) {
                                Some(i) => {
                                    let cp = name[..opts.prefix.len() + i + d.len()].to_string();
                                    let seen =
                                        matches!(items.last(), Some(Item::Prefix(p)) if *p == cp);
                                    let before_marker =
                                        opts.marker.as_deref().is_some_and(|m| cp.as_str() <= m);
                                    if !seen && !before_marker {
                                        items.push(Item::Prefix(cp));
                                    }
                                }
                                None => items.push(Item::Object(object_info(bucket, &name, &meta))),
                            }
                        }
                        None => items.push(Item::Object(object_info(bucket, &name, &meta))),
                    }
                }
                if items.len() > opts.max_keys {
                    break;
                }
            }
            if items.len() > opts.max_keys || bound.is_none() {
                break;
            }
            // More may follow on the drives that filled their page: continue after what is known.
            marker = bound.or(last_name);
        }

        result.is_truncated = items.len() > opts.max_keys;
        items.truncate(opts.max_keys);
        if result.is_truncated {
            result.next_marker = items.last().map(|i| match i {
                Item::Object(o) => o.key.clone(),
                Item::Prefix(p) => p.clone(),
            });
        }
        for i in items {
            match i {
                Item::Object(o) => result.objects.push(o),
                Item::Prefix(p) => result.common_prefixes.push(p),
            }
        }
        Ok(result)
    }
}
