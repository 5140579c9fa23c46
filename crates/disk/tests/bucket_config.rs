//! LocalDrive: per-bucket configuration blobs under `.quarry.sys/buckets/<bucket>/<name>`.

mod common;

use common::{drive, put_inline};
use quarry_disk::{Drive, DriveError};

#[tokio::test]
async fn write_read_replace_delete() {
    let (_dir, d) = drive().await;
    d.make_volume("bkt").await.unwrap();
    assert!(matches!(
        d.read_bucket_config("bkt", "cors").await,
        Err(DriveError::FileNotFound)
    ));
    d.write_bucket_config("bkt", "cors", b"one").await.unwrap();
    assert_eq!(
        &d.read_bucket_config("bkt", "cors").await.unwrap()[..],
        b"one"
    );
    d.write_bucket_config("bkt", "cors", b"two").await.unwrap();
    assert_eq!(
        &d.read_bucket_config("bkt", "cors").await.unwrap()[..],
        b"two"
    );
    let file = d.root().join(".quarry.sys/buckets/bkt/cors");
    assert_eq!(std::fs::read(&file).unwrap(), b"two");
    // No temp file is left next to it.
    let names: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("cors")]);

    d.delete_bucket_config("bkt", "cors").await.unwrap();
    assert!(matches!(
        d.read_bucket_config("bkt", "cors").await,
        Err(DriveError::FileNotFound)
    ));
    // Deleting what is not set is fine.
    d.delete_bucket_config("bkt", "cors").await.unwrap();
}

#[tokio::test]
async fn needs_the_bucket_and_valid_names() {
    let (_dir, d) = drive().await;
    assert!(matches!(
        d.write_bucket_config("nope", "cors", b"x").await,
        Err(DriveError::VolumeNotFound)
    ));
    assert!(matches!(
        d.read_bucket_config("nope", "cors").await,
        Err(DriveError::VolumeNotFound)
    ));
    d.make_volume("bkt").await.unwrap();
    for bad in ["", ".hidden", "a/b", "..", "UPPER", &"x".repeat(65)] {
        assert!(
            matches!(
                d.write_bucket_config("bkt", bad, b"x").await,
                Err(DriveError::InvalidName(_))
            ),
            "{bad:?}"
        );
    }
    assert!(matches!(
        d.write_bucket_config("../etc", "cors", b"x").await,
        Err(DriveError::InvalidName(_))
    ));
}

#[tokio::test]
async fn removed_with_the_bucket() {
    let (_dir, d) = drive().await;
    d.make_volume("bkt").await.unwrap();
    d.write_bucket_config("bkt", "cors", b"x").await.unwrap();
    d.delete_volume("bkt", false).await.unwrap();
    assert!(!d.root().join(".quarry.sys/buckets/bkt").exists());
    d.make_volume("bkt").await.unwrap();
    assert!(matches!(
        d.read_bucket_config("bkt", "cors").await,
        Err(DriveError::FileNotFound)
    ));

    // Forced delete of a bucket with objects, too.
    put_inline(&d, "bkt", "k").await;
    d.write_bucket_config("bkt", "cors", b"x").await.unwrap();
    d.delete_volume("bkt", true).await.unwrap();
    assert!(!d.root().join(".quarry.sys/buckets/bkt").exists());

    // A stale directory (crash between the two removals) is cleared when the bucket is created.
    let stale = d.root().join(".quarry.sys/buckets/bkt");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("cors"), b"stale").unwrap();
    d.make_volume("bkt").await.unwrap();
    assert!(matches!(
        d.read_bucket_config("bkt", "cors").await,
        Err(DriveError::FileNotFound)
    ));
}

#[tokio::test]
async fn not_an_object() {
    let (_dir, d) = drive().await;
    d.make_volume("bkt").await.unwrap();
    d.write_bucket_config("bkt", "cors", b"x").await.unwrap();
    let entries = d
        .walk(
            "bkt",
            &quarry_disk::WalkOptions {
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(entries.is_empty());
    assert_eq!(d.list_volumes().await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_system_namespace_needs_no_bucket() {
    let (_dir, d) = drive().await;
    let sys = quarry_disk::SYSTEM_CONFIG;
    assert!(matches!(
        d.read_bucket_config(sys, "iam").await,
        Err(DriveError::FileNotFound)
    ));
    d.write_bucket_config(sys, "iam", b"state").await.unwrap();
    assert_eq!(
        &d.read_bucket_config(sys, "iam").await.unwrap()[..],
        b"state"
    );
    assert_eq!(
        std::fs::read(d.root().join(".quarry.sys/buckets/_system/iam")).unwrap(),
        b"state"
    );
    // It is no bucket: nothing in the key space, and an ordinary name still needs its bucket.
    assert!(!d.root().join("_system").exists());
    assert!(matches!(
        d.write_bucket_config("nobucket", "iam", b"x").await,
        Err(DriveError::VolumeNotFound)
    ));
    d.delete_bucket_config(sys, "iam").await.unwrap();
    assert!(matches!(
        d.read_bucket_config(sys, "iam").await,
        Err(DriveError::FileNotFound)
    ));
}
