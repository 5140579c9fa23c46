//! The version journal on a real drive: versions side by side with their data dirs, the null
//! version replaced in place, delete markers, deleting one version, and old (format 1) metadata
//! still read and upgraded by the next write.

mod common;

use std::time::Duration;

use common::{drive, meta};
use quarry_disk::{Drive, DriveError, LocalDrive, MetaJournal, ObjectMeta, META_VERSION};
use uuid::Uuid;

/// Commits a version with its own data dir holding `data` as part 1.
async fn put_version(
    d: &LocalDrive,
    key: &str,
    id: Option<Uuid>,
    t: i64,
    data: &[u8],
) -> ObjectMeta {
    let tmp = Uuid::new_v4();
    let dd = Uuid::new_v4();
    let mut w = d.create_shard_writer(tmp, dd, 1).await.unwrap();
    w.write(data).await.unwrap();
    w.finish().await.unwrap();
    let mut m = meta(key, data.len() as u64, Some(dd), None);
    m.version_id = id;
    m.mod_time_ns = t;
    m.etag = format!("{key}@{t}");
    d.rename_data(tmp, "b", key, &m).await.unwrap();
    m
}

fn marker(id: Option<Uuid>, t: i64) -> ObjectMeta {
    let mut m = meta("marker", 0, None, None);
    m.version_id = id;
    m.mod_time_ns = t;
    m.delete_marker = true;
    m.parts.clear();
    m.erasure = Default::default();
    m
}

fn data_dir_exists(d: &LocalDrive, key: &str, m: &ObjectMeta) -> bool {
    d.root()
        .join("b")
        .join(key)
        .join(m.data_dir.unwrap().to_string())
        .is_dir()
}

async fn part(d: &LocalDrive, key: &str, m: &ObjectMeta) -> Vec<u8> {
    d.read_shard("b", key, m.data_dir.unwrap(), 1, 0, m.size as usize)
        .await
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn versions_keep_their_data_and_the_null_version_is_replaced() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let (a, c) = (Uuid::new_v4(), Uuid::new_v4());
    let null1 = put_version(&d, "k", None, 10, b"null one").await;
    let va = put_version(&d, "k", Some(a), 20, b"version a").await;
    let vc = put_version(&d, "k", Some(c), 30, b"version c").await;

    assert_eq!(d.read_meta("b", "k").await.unwrap(), vc);
    let all = d.read_versions("b", "k").await.unwrap();
    assert_eq!(all, vec![vc.clone(), va.clone(), null1.clone()]);
    assert_eq!(d.read_version("b", "k", Some(a)).await.unwrap(), va);
    assert_eq!(d.read_version("b", "k", None).await.unwrap(), null1);
    assert!(matches!(
        d.read_version("b", "k", Some(Uuid::new_v4())).await,
        Err(DriveError::FileNotFound)
    ));
    for v in [&null1, &va, &vc] {
        assert!(data_dir_exists(&d, "k", v));
    }
    assert_eq!(part(&d, "k", &va).await, b"version a");

    // A new null version (a suspended bucket's write) replaces the old one, its data goes, and it
    // is the latest.
    let null2 = put_version(&d, "k", None, 40, b"null two").await;
    assert!(!data_dir_exists(&d, "k", &null1));
    assert_eq!(d.read_meta("b", "k").await.unwrap(), null2);
    assert_eq!(d.read_versions("b", "k").await.unwrap().len(), 3);
    assert_eq!(part(&d, "k", &va).await, b"version a");

    // A delete marker on top: the latest is the marker; the data stays.
    let m = marker(Some(Uuid::new_v4()), 50);
    d.rename_data(Uuid::new_v4(), "b", "k", &m).await.unwrap();
    let latest = d.read_meta("b", "k").await.unwrap();
    assert!(latest.delete_marker);
    assert_eq!(latest.version_id, m.version_id);
    // Listings see the marker as the key's latest.
    let walked = d
        .walk(
            "b",
            &quarry_disk::WalkOptions {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(&walked[..], [quarry_disk::WalkEntry::Object { meta, .. }] if meta.delete_marker)
    );

    // Deleting the marker by id brings the previous version back as the latest.
    d.delete_version("b", "k", m.version_id).await.unwrap();
    assert_eq!(d.read_meta("b", "k").await.unwrap(), null2);
    assert!(matches!(
        d.delete_version("b", "k", m.version_id).await,
        Err(DriveError::FileNotFound)
    ));

    // Deleting one version removes its data dir only.
    d.delete_version("b", "k", Some(a)).await.unwrap();
    assert!(!data_dir_exists(&d, "k", &va));
    assert!(data_dir_exists(&d, "k", &vc));
    assert_eq!(
        d.read_versions("b", "k").await.unwrap(),
        vec![null2.clone(), vc.clone()]
    );

    // Replacing one version's metadata in place (the object layer's metadata-only copy).
    let mut vc2 = vc.clone();
    vc2.user_meta.insert("x".into(), "y".into());
    d.write_meta("b", "k", &vc2).await.unwrap();
    assert_eq!(d.read_version("b", "k", Some(c)).await.unwrap(), vc2);
    let mut ghost = vc.clone();
    ghost.version_id = Some(Uuid::new_v4());
    assert!(matches!(
        d.write_meta("b", "k", &ghost).await,
        Err(DriveError::FileNotFound)
    ));

    // The last versions go, and the key with them.
    d.delete_version("b", "k", None).await.unwrap();
    d.delete_version("b", "k", Some(c)).await.unwrap();
    assert!(!d.root().join("b/k").exists());
    assert!(matches!(
        d.read_meta("b", "k").await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.read_versions("b", "k").await,
        Err(DriveError::FileNotFound)
    ));
}

#[tokio::test]
async fn delete_object_removes_every_version() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let v1 = put_version(&d, "dir/k", Some(Uuid::new_v4()), 1, b"one").await;
    let v2 = put_version(&d, "dir/k", None, 2, b"two").await;
    d.delete_object("b", "dir/k").await.unwrap();
    for v in [v1, v2] {
        assert!(!d
            .root()
            .join("b/dir/k")
            .join(v.data_dir.unwrap().to_string())
            .exists());
    }
    assert!(!d.root().join("b/dir").exists());
}

#[tokio::test]
async fn orphan_sweep_keeps_every_versions_data() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let versions = [
        put_version(&d, "k", Some(Uuid::new_v4()), 1, b"one").await,
        put_version(&d, "k", Some(Uuid::new_v4()), 2, b"two").await,
        put_version(&d, "k", None, 3, b"three").await,
    ];
    // An orphan data dir beside them (a killed commit).
    let orphan = d.root().join("b/k").join(Uuid::new_v4().to_string());
    std::fs::create_dir(&orphan).unwrap();
    std::fs::write(orphan.join("part.1"), b"x").unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = d.sweep_orphans(Duration::ZERO);
    assert_eq!(report.data_dirs, 1, "{report:?}");
    assert!(!orphan.exists());
    for v in &versions {
        assert!(data_dir_exists(&d, "k", v));
    }
}

/// A `quarry.meta` as the format 1 encoder (before versioning) wrote it: it reads as the null
/// version, and the next commit of a version keeps it and rewrites the file in format 2.
#[tokio::test]
async fn format_1_metadata_reads_and_is_upgraded_by_the_next_write() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let dir = d.root().join("b/old");
    std::fs::create_dir_all(&dir).unwrap();
    let old = br#"{"version":1,"size":5,"mod_time_ns":1700000000000000000,"etag":"5d41402abc4b2a76b9719d911017c592","headers":{"content-type":"text/plain"},"user_meta":{"a":"b"},"checksums":{},"erasure":{"codec":"rs-vandermonde-gf8","bitrot":"blake3-256","data":2,"parity":2,"block_size":1048576,"index":1,"distribution":[1,2,3,4]},"data_dir":null,"parts":[{"number":1,"size":5,"etag":"5d41402abc4b2a76b9719d911017c592"}],"inline_len":3}
abc"#;
    std::fs::write(dir.join("quarry.meta"), old).unwrap();

    let m = d.read_meta("b", "old").await.unwrap();
    assert_eq!(m.version, 1);
    assert_eq!(m.version_id, None);
    assert!(!m.delete_marker);
    assert_eq!(m.etag, "5d41402abc4b2a76b9719d911017c592");
    assert_eq!(m.inline.as_deref(), Some(&b"abc"[..]));
    assert_eq!(d.read_version("b", "old", None).await.unwrap(), m);
    assert_eq!(d.read_versions("b", "old").await.unwrap().len(), 1);

    let id = Uuid::new_v4();
    let newer = put_version(&d, "old", Some(id), 1_800_000_000_000_000_000, b"new").await;
    let file = std::fs::read(dir.join("quarry.meta")).unwrap();
    let j = MetaJournal::from_bytes(&file).unwrap();
    assert_eq!(j.len(), 2);
    assert!(j.versions().iter().all(|v| {
        // Every entry is now written in the current format.
        let b = v.to_bytes();
        let h: serde_json::Value = serde_json::Deserializer::from_slice(&b)
            .into_iter()
            .next()
            .unwrap()
            .unwrap();
        h["version"] == META_VERSION
    }));
    assert_eq!(d.read_meta("b", "old").await.unwrap(), newer);
    let kept = d.read_version("b", "old", None).await.unwrap();
    assert_eq!(kept.inline.as_deref(), Some(&b"abc"[..]));
    assert_eq!(kept.user_meta, m.user_meta);
}

/// Reading the latest version reads only its entry: a journal whose later entries are garbage
/// still answers `read_meta`, while a whole read reports the corruption.
#[tokio::test]
async fn read_meta_reads_only_the_first_entry() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let mut latest = meta("k", 3, None, Some(b"abc".to_vec()));
    latest.version_id = Some(Uuid::new_v4());
    let mut file = latest.to_bytes();
    file.extend_from_slice(br#"{"version":2,"garbage"#);
    std::fs::create_dir_all(d.root().join("b/k")).unwrap();
    std::fs::write(d.root().join("b/k/quarry.meta"), &file).unwrap();
    assert_eq!(d.read_meta("b", "k").await.unwrap(), latest);
    assert!(matches!(
        d.read_versions("b", "k").await,
        Err(DriveError::CorruptMeta(_))
    ));

    // A big first entry (inline data beyond the first read) is read whole.
    let mut big = meta("k", 100_000, None, Some(vec![9u8; 100_000]));
    big.version_id = Some(Uuid::new_v4());
    d.rename_data(Uuid::new_v4(), "b", "big", &big)
        .await
        .unwrap();
    assert_eq!(d.read_meta("b", "big").await.unwrap(), big);
}
