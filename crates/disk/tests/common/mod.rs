//! Helpers shared by the drive tests.
#![allow(dead_code)]

use std::time::Duration;

use quarry_disk::{
    Drive, ErasureInfo, LocalDrive, ObjectMeta, PartInfo, SweepSchedule, META_VERSION,
};
use uuid::Uuid;

/// A fresh drive in a temp dir (on tmpfs when there is one: the tests fsync a lot), whose
/// replaced and deleted data goes at once.
pub async fn drive() -> (tempfile::TempDir, LocalDrive) {
    drive_with_grace(Duration::ZERO).await
}

/// [`drive`] whose replaced and deleted data dirs stay `grace` after their last read.
pub async fn drive_with_grace(grace: Duration) -> (tempfile::TempDir, LocalDrive) {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let schedule = SweepSchedule {
        retired_grace: grace,
        ..SweepSchedule::from_env()
    };
    let d = LocalDrive::open_with_sweep(dir.path().join("drive"), schedule)
        .await
        .unwrap();
    (dir, d)
}

/// Metadata whose etag is the key, so a test can check which object's metadata came back.
pub fn meta(key: &str, size: u64, data_dir: Option<Uuid>, inline: Option<Vec<u8>>) -> ObjectMeta {
    ObjectMeta {
        version: META_VERSION,
        version_id: None,
        delete_marker: false,
        size,
        mod_time_ns: 1_700_000_000_000_000_000,
        etag: key.to_owned(),
        headers: Default::default(),
        user_meta: Default::default(),
        checksums: Default::default(),
        erasure: ErasureInfo {
            codec: "rs-vandermonde-gf8".into(),
            bitrot: "blake3-256".into(),
            data: 2,
            parity: 2,
            block_size: 1 << 20,
            index: 1,
            distribution: vec![1, 2, 3, 4],
        },
        data_dir,
        parts: vec![PartInfo {
            number: 1,
            size,
            etag: key.to_owned(),
        }],
        inline: inline.map(Into::into),
    }
}

/// Commits an inline object.
pub async fn put_inline(d: &LocalDrive, bucket: &str, key: &str) {
    let m = meta(key, 3, None, Some(b"abc".to_vec()));
    d.rename_data(Uuid::new_v4(), bucket, key, &m)
        .await
        .unwrap();
}

/// Writes `data` as part 1 of a new data dir and commits it; returns the metadata.
pub async fn put_data(d: &LocalDrive, bucket: &str, key: &str, data: &[u8]) -> ObjectMeta {
    let tmp = Uuid::new_v4();
    let dd = Uuid::new_v4();
    let mut w = d.create_shard_writer(tmp, dd, 1).await.unwrap();
    w.write(data).await.unwrap();
    w.finish().await.unwrap();
    let m = meta(key, data.len() as u64, Some(dd), None);
    d.rename_data(tmp, bucket, key, &m).await.unwrap();
    m
}
