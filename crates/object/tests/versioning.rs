//! S3 versioning in the object layer, over real local drives (behind fault injectors where a
//! drive must go away): versions and delete markers, AWS's rules for the null version,
//! ListObjectVersions paging, copy and multipart making versions, and heal bringing back every
//! version and marker a drive missed without resurrecting deleted ones.

mod faults;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use faults::{FaultConfig, FaultStats, FaultyDrive};
use futures::StreamExt;
use quarry_disk::Drive;
use quarry_object::*;

const BLOCK: usize = 16 * 1024;
const B: &str = "bkt";

fn cfg() -> ObjectConfig {
    ObjectConfig {
        parity: None,
        block_size: BLOCK,
        inline_limit: 2 * 1024,
        scan_interval: None,
        ..Default::default()
    }
}

async fn server() -> (tempfile::TempDir, Arc<ErasureServer>, Vec<FaultyDrive>) {
    let dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let paths: Vec<_> = (0..4)
        .map(|i| {
            let p = dir.path().join(format!("d{i}"));
            std::fs::create_dir_all(&p).unwrap();
            p
        })
        .collect();
    let (deployment, locals) = ErasureServer::format_local(paths).await.unwrap();
    let stats = Arc::new(FaultStats::default());
    let faulty: Vec<FaultyDrive> = locals
        .into_iter()
        .enumerate()
        .map(|(i, d)| FaultyDrive::new(Arc::new(d), 1, i as u64, stats.clone()))
        .collect();
    let dyns = faulty
        .iter()
        .map(|d| Arc::new(d.clone()) as Arc<dyn Drive>)
        .collect();
    let layer = ErasureServer::open(deployment, dyns, cfg()).unwrap();
    layer.make_bucket(B).await.unwrap();
    (dir, layer, faulty)
}

async fn put(l: &ErasureServer, key: &str, data: &[u8]) -> ObjectInfo {
    let body: ByteStream = Box::pin(futures::stream::iter(vec![Ok(Bytes::copy_from_slice(
        data,
    ))]));
    l.put_object(B, key, body, PutOptions::default())
        .await
        .unwrap_or_else(|e| panic!("PUT {key}: {e}"))
}

async fn get(l: &ErasureServer, key: &str, v: Option<VersionId>) -> Result<Vec<u8>> {
    let r = l.get_object_version(B, key, v, None).await?;
    let mut out = Vec::new();
    let mut s = r.body;
    while let Some(c) = s.next().await {
        out.extend_from_slice(&c?);
    }
    Ok(out)
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// Every version of the bucket, (key, version, is_latest, delete_marker), one page.
async fn all_versions(l: &ErasureServer) -> Vec<(String, VersionId, bool, bool)> {
    let page = l
        .list_object_versions(
            B,
            ListVersionsOptions {
                max_keys: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!page.is_truncated);
    page.versions
        .into_iter()
        .map(|v| (v.key, v.version_id, v.is_latest, v.delete_marker))
        .collect()
}

#[tokio::test]
async fn versions_and_delete_markers() {
    let (_d, l, _) = server().await;
    assert_eq!(
        l.get_bucket_versioning(B).await.unwrap(),
        VersioningState::Unversioned
    );
    l.put_bucket_versioning(B, VersioningState::Enabled)
        .await
        .unwrap();
    assert_eq!(
        l.get_bucket_versioning(B).await.unwrap(),
        VersioningState::Enabled
    );
    let (d1, d2) = (data(5000, 1), data(300, 2));
    let v1 = put(&l, "k", &d1).await.version_id;
    let v2 = put(&l, "k", &d2).await.version_id;
    assert!(matches!(v1, VersionId::Id(_)) && v1 != v2);
    assert_eq!(get(&l, "k", None).await.unwrap(), d2);
    assert_eq!(get(&l, "k", Some(v1)).await.unwrap(), d1);
    assert_eq!(get(&l, "k", Some(v2)).await.unwrap(), d2);
    assert_eq!(
        l.object_version_info(B, "k", Some(v1)).await.unwrap().size,
        5000
    );

    // DELETE without a version adds a marker; the versions stay.
    let del = l.delete_object_version(B, "k", None).await.unwrap();
    assert!(del.delete_marker);
    let marker = del.version_id.unwrap();
    assert!(matches!(
        get(&l, "k", None).await,
        Err(Error::LatestIsDeleteMarker(m)) if m == marker
    ));
    assert!(matches!(
        l.object_version_info(B, "k", None).await,
        Err(Error::LatestIsDeleteMarker(_))
    ));
    assert!(matches!(
        get(&l, "k", Some(marker)).await,
        Err(Error::VersionIsDeleteMarker(m)) if m == marker
    ));
    assert_eq!(get(&l, "k", Some(v1)).await.unwrap(), d1);
    // Listing hides the key; ListObjectVersions shows all three, the marker latest.
    let listed = l
        .list_objects(
            B,
            ListOptions {
                max_keys: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(listed.objects.is_empty(), "{listed:?}");
    assert_eq!(
        all_versions(&l).await,
        vec![
            ("k".to_string(), marker, true, true),
            ("k".to_string(), v2, false, false),
            ("k".to_string(), v1, false, false),
        ]
    );
    // A bucket holding only old versions and markers is not empty.
    assert!(matches!(
        l.delete_bucket(B).await,
        Err(Error::BucketNotEmpty)
    ));

    // Deleting the marker by id brings the object back.
    let del = l.delete_object_version(B, "k", Some(marker)).await.unwrap();
    assert_eq!(
        del,
        DeleteResult {
            version_id: Some(marker),
            delete_marker: true
        }
    );
    assert_eq!(get(&l, "k", None).await.unwrap(), d2);
    // Deleting a version by id removes it only.
    l.delete_object_version(B, "k", Some(v2)).await.unwrap();
    assert_eq!(get(&l, "k", None).await.unwrap(), d1);
    assert!(matches!(
        get(&l, "k", Some(v2)).await,
        Err(Error::NoSuchVersion)
    ));
    // A version that does not exist deletes fine (as in S3).
    let ghost = VersionId::Id(uuid::Uuid::new_v4());
    l.delete_object_version(B, "k", Some(ghost)).await.unwrap();
    assert!(matches!(
        get(&l, "nokey", Some(ghost)).await,
        Err(Error::NoSuchVersion)
    ));

    // Never back to unversioned.
    assert!(l
        .put_bucket_versioning(B, VersioningState::Unversioned)
        .await
        .is_err());
    l.delete_object_version(B, "k", Some(v1)).await.unwrap();
    assert!(all_versions(&l).await.is_empty());
    l.delete_bucket(B).await.unwrap();
}

#[tokio::test]
async fn the_null_version_follows_aws_rules() {
    let (_d, l, _) = server().await;
    // Written before versioning: the null version.
    let null1 = data(100, 1);
    assert_eq!(put(&l, "k", &null1).await.version_id, VersionId::Null);
    l.put_bucket_versioning(B, VersioningState::Enabled)
        .await
        .unwrap();
    let v1 = put(&l, "k", &data(4000, 2)).await.version_id;
    assert_eq!(get(&l, "k", Some(VersionId::Null)).await.unwrap(), null1);

    // Suspended: a PUT writes the null version, replacing the old null; v1 stays.
    l.put_bucket_versioning(B, VersioningState::Suspended)
        .await
        .unwrap();
    let null2 = data(3000, 3);
    assert_eq!(put(&l, "k", &null2).await.version_id, VersionId::Null);
    assert_eq!(get(&l, "k", None).await.unwrap(), null2);
    assert_eq!(get(&l, "k", Some(VersionId::Null)).await.unwrap(), null2);
    assert_eq!(get(&l, "k", Some(v1)).await.unwrap(), data(4000, 2));
    assert_eq!(
        all_versions(&l).await,
        vec![
            ("k".to_string(), VersionId::Null, true, false),
            ("k".to_string(), v1, false, false),
        ]
    );

    // Suspended DELETE: a null marker replaces the null version.
    let del = l.delete_object_version(B, "k", None).await.unwrap();
    assert_eq!(
        del,
        DeleteResult {
            version_id: Some(VersionId::Null),
            delete_marker: true
        }
    );
    assert_eq!(
        all_versions(&l).await,
        vec![
            ("k".to_string(), VersionId::Null, true, true),
            ("k".to_string(), v1, false, false),
        ]
    );
    // Re-enabled: new versions get ids again, the null marker stays below them.
    l.put_bucket_versioning(B, VersioningState::Enabled)
        .await
        .unwrap();
    let v3 = put(&l, "k", &data(10, 4)).await.version_id;
    assert!(matches!(v3, VersionId::Id(_)));
    assert_eq!(all_versions(&l).await.len(), 3);

    // Unversioned buckets keep one null version per key, and DELETE removes it.
    l.make_bucket("plain").await.unwrap();
    let body = |d: &[u8]| -> ByteStream {
        Box::pin(futures::stream::iter(vec![Ok(Bytes::copy_from_slice(d))]))
    };
    l.put_object("plain", "x", body(b"one"), PutOptions::default())
        .await
        .unwrap();
    l.put_object("plain", "x", body(b"two"), PutOptions::default())
        .await
        .unwrap();
    let page = l
        .list_object_versions(
            "plain",
            ListVersionsOptions {
                max_keys: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.versions.len(), 1);
    assert_eq!(
        l.delete_object_version("plain", "x", None).await.unwrap(),
        DeleteResult::default()
    );
    l.delete_bucket("plain").await.unwrap();
}

#[tokio::test]
async fn list_versions_pages_one_by_one_with_prefixes() {
    let (_d, l, _) = server().await;
    l.put_bucket_versioning(B, VersioningState::Enabled)
        .await
        .unwrap();
    for (key, n) in [("a", 3), ("b/x", 2), ("b/y", 1), ("c", 4)] {
        for i in 0..n {
            put(&l, key, &data(10 + i, i as u8)).await;
        }
    }
    l.delete_object_version(B, "c", None).await.unwrap();
    let full = all_versions(&l).await;
    assert_eq!(full.len(), 11);
    for max in [1, 2, 3, 5] {
        let mut got = Vec::new();
        let (mut km, mut vm) = (None, None);
        loop {
            let page = l
                .list_object_versions(
                    B,
                    ListVersionsOptions {
                        key_marker: km.clone(),
                        version_id_marker: vm,
                        max_keys: max,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            assert!(page.versions.len() <= max);
            got.extend(
                page.versions
                    .into_iter()
                    .map(|v| (v.key, v.version_id, v.is_latest, v.delete_marker)),
            );
            if !page.is_truncated {
                break;
            }
            km = page.next_key_marker;
            vm = page.next_version_id_marker;
        }
        assert_eq!(got, full, "pages of {max}");
    }
    // A delimiter groups keys; a prefix selects.
    let page = l
        .list_object_versions(
            B,
            ListVersionsOptions {
                delimiter: Some("/".into()),
                max_keys: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.common_prefixes, vec!["b/".to_string()]);
    assert_eq!(page.versions.len(), 8);
    let page = l
        .list_object_versions(
            B,
            ListVersionsOptions {
                prefix: "b/".into(),
                max_keys: 100,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.versions.len(), 3);
}

#[tokio::test]
async fn copy_from_a_version_and_multipart_make_versions() {
    let (_d, l, _) = server().await;
    l.put_bucket_versioning(B, VersioningState::Enabled)
        .await
        .unwrap();
    let old = data(6000, 7);
    let v1 = put(&l, "k", &old).await.version_id;
    put(&l, "k", &data(10, 8)).await;
    // Copy an old version onto its own key: a new latest version holding the old bytes.
    let copied = l
        .copy_object(
            B,
            "k",
            B,
            "k",
            CopyOptions {
                source_version_id: Some(v1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(matches!(copied.version_id, VersionId::Id(_)) && copied.version_id != v1);
    assert_eq!(get(&l, "k", None).await.unwrap(), old);
    assert_eq!(all_versions(&l).await.len(), 3);
    // Copy onto itself with new metadata in a versioned bucket: a new version too.
    let meta = l
        .copy_object(
            B,
            "k",
            B,
            "k",
            CopyOptions {
                metadata: Some(ReplaceMetadata {
                    user_meta: [("a".to_string(), "b".to_string())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_ne!(meta.version_id, copied.version_id);
    assert_eq!(all_versions(&l).await.len(), 4);
    assert_eq!(
        l.object_version_info(B, "k", Some(copied.version_id))
            .await
            .unwrap()
            .user_meta
            .len(),
        0
    );

    // A completed multipart upload is a new version.
    let up = l
        .new_multipart_upload(B, "k", NewUploadOptions::default())
        .await
        .unwrap();
    let body: ByteStream = Box::pin(futures::stream::iter(vec![Ok(Bytes::from(data(100, 9)))]));
    let part = l
        .put_object_part(B, "k", &up.upload_id, 1, body, PartOptions::default())
        .await
        .unwrap();
    let done = l
        .complete_multipart_upload(
            B,
            "k",
            &up.upload_id,
            vec![CompletePart {
                number: 1,
                etag: part.etag.clone(),
                checksum: None,
            }],
            CompleteOptions::default(),
        )
        .await
        .unwrap();
    assert!(matches!(done.version_id, VersionId::Id(_)));
    assert_eq!(all_versions(&l).await.len(), 5);
    assert_eq!(get(&l, "k", Some(v1)).await.unwrap(), old);
}

/// A drive that was away while versions, a marker and a version delete happened gets every
/// version and marker back from heal, and the deleted version does not come back.
#[tokio::test]
async fn heal_brings_back_every_version_and_marker() {
    let (_d, l, drives) = server().await;
    l.put_bucket_versioning(B, VersioningState::Enabled)
        .await
        .unwrap();
    let gone = put(&l, "k", &data(5000, 1)).await.version_id;
    drives[3].set_faults(Some(FaultConfig::dead()));
    let v2 = put(&l, "k", &data(7000, 2)).await.version_id;
    let v3 = put(&l, "k", &data(100, 3)).await.version_id;
    let marker = l
        .delete_object_version(B, "k", None)
        .await
        .unwrap()
        .version_id
        .unwrap();
    l.delete_object_version(B, "k", Some(gone)).await.unwrap();
    drives[3].set_faults(None);

    let ids = |vs: Vec<quarry_disk::ObjectMeta>| -> Vec<VersionId> {
        vs.into_iter()
            .map(|m| VersionId::from_stored(m.version_id))
            .collect()
    };
    // Before: the returning drive holds only the deleted version.
    assert_eq!(
        ids(drives[3].read_versions(B, "k").await.unwrap()),
        vec![gone]
    );
    let r = l.heal_object(B, "k").await.unwrap();
    assert!(r.failed.is_empty(), "{r:?}");
    for d in &drives {
        assert_eq!(
            ids(d.read_versions(B, "k").await.unwrap()),
            vec![marker, v3, v2],
            "{}",
            d.endpoint()
        );
    }
    // Read from the healed drive and one other only.
    drives[0].set_faults(Some(FaultConfig::dead()));
    drives[1].set_faults(Some(FaultConfig::dead()));
    assert_eq!(get(&l, "k", Some(v2)).await.unwrap(), data(7000, 2));
    assert_eq!(get(&l, "k", Some(v3)).await.unwrap(), data(100, 3));
    assert!(matches!(
        get(&l, "k", None).await,
        Err(Error::LatestIsDeleteMarker(m)) if m == marker
    ));
    drives[0].set_faults(None);
    drives[1].set_faults(None);
    // A second heal finds nothing to do.
    let r = l.heal_object(B, "k").await.unwrap();
    assert!(r.healed.is_empty() && r.failed.is_empty(), "{r:?}");
}

/// What GET and HEAD read to name a null version: from the node's configuration cache, which
/// a change made through this node leaves at once.
#[tokio::test]
async fn the_cached_versioning_state_follows_this_nodes_changes_at_once() {
    let (_dir, l, _drives) = server().await;
    let state = || l.get_bucket_versioning_cached(B);
    assert_eq!(state().await.unwrap(), VersioningState::Unversioned);
    assert_eq!(state().await.unwrap(), VersioningState::Unversioned);
    l.put_bucket_versioning(B, VersioningState::Enabled)
        .await
        .unwrap();
    assert_eq!(state().await.unwrap(), VersioningState::Enabled);
    l.put_bucket_versioning(B, VersioningState::Suspended)
        .await
        .unwrap();
    assert_eq!(state().await.unwrap(), VersioningState::Suspended);
    assert!(matches!(
        l.get_bucket_versioning_cached("no-such-bucket").await,
        Err(Error::BucketNotFound)
    ));
}
