//! LocalDrive: multipart uploads (create, commit parts, replace a part, stage, delete, list).

mod common;

use common::{drive, meta};
use quarry_disk::multipart::new_upload_id;
use quarry_disk::{Drive, DriveError, LocalDrive, PartMeta, UploadMeta, UPLOAD_META_VERSION};
use uuid::Uuid;

fn upload(bucket: &str, key: &str) -> UploadMeta {
    UploadMeta {
        version: UPLOAD_META_VERSION,
        bucket: bucket.into(),
        key: key.into(),
        upload_id: new_upload_id(),
        initiated_ns: 1_700_000_000_000_000_000,
        headers: [("content-type".to_string(), "text/plain".to_string())].into(),
        user_meta: Default::default(),
        checksum_algorithm: Some("crc32".into()),
        erasure: meta("x", 0, None, None).erasure,
    }
}

/// Writes `data` as the shard of part `n` under tmp and commits it into the upload.
async fn put_part(d: &LocalDrive, u: &UploadMeta, n: u32, data: &[u8]) -> PartMeta {
    let tmp = Uuid::new_v4();
    let dd = Uuid::new_v4();
    let mut w = d.create_shard_writer(tmp, dd, n).await.unwrap();
    w.write(data).await.unwrap();
    w.finish().await.unwrap();
    let p = PartMeta {
        version: UPLOAD_META_VERSION,
        number: n,
        size: data.len() as u64,
        etag: format!("etag-{n}-{}", data.len()),
        checksum: None,
        mod_time_ns: 1,
        data_dir: dd,
    };
    d.commit_part(tmp, &u.bucket, &u.key, &u.upload_id, &p)
        .await
        .unwrap();
    assert!(!d
        .root()
        .join(".quarry.sys/tmp")
        .join(tmp.to_string())
        .exists());
    p
}

#[tokio::test]
async fn upload_life_cycle() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let u = upload("b", "dir/obj");
    d.create_upload(&u).await.unwrap();
    assert_eq!(
        d.read_upload("b", "dir/obj", &u.upload_id).await.unwrap(),
        u
    );
    assert!(d
        .list_parts("b", "dir/obj", &u.upload_id)
        .await
        .unwrap()
        .is_empty());

    let p2 = put_part(&d, &u, 2, b"second").await;
    let p1 = put_part(&d, &u, 1, b"first").await;
    let parts = d.list_parts("b", "dir/obj", &u.upload_id).await.unwrap();
    assert_eq!(parts, vec![p1.clone(), p2.clone()]);

    // Uploading part 2 again replaces it and removes the old data.
    let p2b = put_part(&d, &u, 2, b"second, again").await;
    let parts = d.list_parts("b", "dir/obj", &u.upload_id).await.unwrap();
    assert_eq!(parts, vec![p1.clone(), p2b.clone()]);
    let up_dir = d
        .root()
        .join(".quarry.sys/multipart")
        .join(quarry_disk::multipart::upload_hash("b", "dir/obj"))
        .join(&u.upload_id);
    assert!(!up_dir.join(p2.data_dir.to_string()).exists());
    assert!(up_dir
        .join(p2b.data_dir.to_string())
        .join("part.2")
        .is_file());

    // Stage parts 2 then 1 as part.1 and part.2 of a new data dir, then commit as an object.
    let tmp = Uuid::new_v4();
    let dd = Uuid::new_v4();
    d.stage_parts(
        "b",
        "dir/obj",
        &u.upload_id,
        &[p2b.clone(), p1.clone()],
        tmp,
        dd,
    )
    .await
    .unwrap();
    let m = meta("dir/obj", 18, Some(dd), None);
    d.rename_data(tmp, "b", "dir/obj", &m).await.unwrap();
    assert_eq!(
        &d.read_shard("b", "dir/obj", dd, 1, 0, 13).await.unwrap()[..],
        b"second, again"
    );
    assert_eq!(
        &d.read_shard("b", "dir/obj", dd, 2, 0, 5).await.unwrap()[..],
        b"first"
    );
    // The upload is untouched by the staging.
    assert_eq!(
        d.list_parts("b", "dir/obj", &u.upload_id)
            .await
            .unwrap()
            .len(),
        2
    );

    let all = d.list_uploads(None).await.unwrap();
    assert_eq!(all, vec![u.clone()]);
    assert!(d.list_uploads(Some("other")).await.unwrap().is_empty());

    d.delete_upload("b", "dir/obj", &u.upload_id).await.unwrap();
    assert!(!up_dir.exists());
    assert!(!up_dir.parent().unwrap().exists(), "empty key dir removed");
    // The committed object keeps its data (hard links, not moves of shared files).
    assert_eq!(
        &d.read_shard("b", "dir/obj", dd, 2, 0, 5).await.unwrap()[..],
        b"first"
    );
    assert!(matches!(
        d.delete_upload("b", "dir/obj", &u.upload_id).await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.read_upload("b", "dir/obj", &u.upload_id).await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.list_parts("b", "dir/obj", &u.upload_id).await,
        Err(DriveError::FileNotFound)
    ));
    assert!(d.list_uploads(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn parts_of_a_missing_upload_are_refused() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let u = upload("b", "k");
    // Never created: a part commit must not create the upload.
    let tmp = Uuid::new_v4();
    let dd = Uuid::new_v4();
    let mut w = d.create_shard_writer(tmp, dd, 1).await.unwrap();
    w.write(b"x").await.unwrap();
    w.finish().await.unwrap();
    let p = PartMeta {
        version: UPLOAD_META_VERSION,
        number: 1,
        size: 1,
        etag: "e".into(),
        checksum: None,
        mod_time_ns: 1,
        data_dir: dd,
    };
    assert!(matches!(
        d.commit_part(tmp, "b", "k", &u.upload_id, &p).await,
        Err(DriveError::FileNotFound)
    ));
    assert!(d.list_uploads(None).await.unwrap().is_empty());
    // Staging a part whose shard is gone.
    d.create_upload(&u).await.unwrap();
    assert!(matches!(
        d.stage_parts("b", "k", &u.upload_id, &[p], Uuid::new_v4(), Uuid::new_v4())
            .await,
        Err(DriveError::FileNotFound)
    ));
    // Uploads of a bucket that does not exist.
    let mut nb = upload("nobucket", "k");
    nb.upload_id = new_upload_id();
    assert!(matches!(
        d.create_upload(&nb).await,
        Err(DriveError::VolumeNotFound)
    ));
}

#[tokio::test]
async fn names_are_validated_before_paths() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    for id in ["../../etc", "x", "", "a/b"] {
        assert!(
            matches!(
                d.read_upload("b", "k", id).await,
                Err(DriveError::InvalidName(_))
            ),
            "{id:?}"
        );
        assert!(matches!(
            d.delete_upload("b", "k", id).await,
            Err(DriveError::InvalidName(_))
        ));
    }
    let id = new_upload_id();
    assert!(matches!(
        d.read_upload("b", "../k", &id).await,
        Err(DriveError::InvalidName(_))
    ));
    assert!(matches!(
        d.read_upload(".quarry.sys", "k", &id).await,
        Err(DriveError::InvalidName(_))
    ));
    let mut u = upload("b", "k");
    u.upload_id = "../../../x".into();
    assert!(matches!(
        d.create_upload(&u).await,
        Err(DriveError::InvalidName(_))
    ));
}

#[tokio::test]
async fn unknown_versions_are_refused() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let u = upload("b", "k");
    d.create_upload(&u).await.unwrap();
    let path = d
        .root()
        .join(".quarry.sys/multipart")
        .join(quarry_disk::multipart::upload_hash("b", "k"))
        .join(&u.upload_id)
        .join("upload.meta");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["version"] = 2.into();
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(matches!(
        d.read_upload("b", "k", &u.upload_id).await,
        Err(DriveError::UnsupportedVersion { found: 2, .. })
    ));
    // A listing skips it rather than failing.
    assert!(d.list_uploads(Some("b")).await.unwrap().is_empty());
}

/// Uploads of one key created while others of the same key are removed: the last removal
/// takes the key's uploads directory with it, under a creation that found it there. None is
/// lost, and each reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_created_while_others_of_the_key_are_removed_are_kept() {
    const ROUNDS: usize = 300;
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let d = d.clone();
        tasks.push(tokio::spawn(async move {
            let mut last = None;
            for round in 0..ROUNDS {
                let u = upload("b", "k");
                d.create_upload(&u).await.unwrap();
                if round < ROUNDS - 1 {
                    d.delete_upload("b", "k", &u.upload_id).await.unwrap();
                } else {
                    last = Some(u);
                }
            }
            last.unwrap()
        }));
    }
    for t in tasks {
        let u = t.await.unwrap();
        assert_eq!(d.read_upload("b", "k", &u.upload_id).await.unwrap(), u);
    }
    assert_eq!(d.list_uploads(Some("b")).await.unwrap().len(), 6);
}
