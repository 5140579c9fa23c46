//! LocalDrive: the data of a replaced or deleted version stays for reads that resolved it before
//! the change, is invisible to everything else, and goes after the grace.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{drive_with_grace, meta, put_data, put_inline};
use quarry_disk::{Drive, DriveError, LocalDrive, WalkEntry, WalkOptions};
use uuid::Uuid;

async fn read_all(d: &LocalDrive, key: &str, data_dir: Uuid, len: usize) -> Vec<u8> {
    d.read_shard("b", key, data_dir, 1, 0, len)
        .await
        .unwrap()
        .to_vec()
}

async fn names(d: &LocalDrive, prefix: &str, delimited: bool) -> Vec<String> {
    let opts = WalkOptions {
        prefix: prefix.into(),
        delimited,
        limit: 100,
        ..Default::default()
    };
    d.walk("b", &opts)
        .await
        .unwrap()
        .iter()
        .map(|e| match e {
            WalkEntry::Object { key, .. } => key.clone(),
            WalkEntry::Prefix(p) => p.clone(),
        })
        .collect()
}

fn has_data_dir(d: &LocalDrive, key: &str, data_dir: Uuid) -> bool {
    d.root()
        .join("b")
        .join(key)
        .join(data_dir.to_string())
        .join("part.1")
        .is_file()
}

/// Waits until `cond` holds, for at most `limit`.
async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

#[tokio::test]
async fn a_read_that_resolved_a_version_finishes_across_its_overwrite_and_delete() {
    let (_t, d) = drive_with_grace(Duration::from_secs(600)).await;
    d.make_volume("b").await.unwrap();
    put_inline(&d, "b", "p/neighbour").await;
    let one = put_data(&d, "b", "p/k", b"version one").await;

    // An overwrite: the read of the version it resolved still gets that version's bytes, and
    // everything that resolves now gets the new one.
    let two = put_data(&d, "b", "p/k", b"version two!").await;
    assert_eq!(
        read_all(&d, "p/k", one.data_dir.unwrap(), 11).await,
        b"version one"
    );
    assert_eq!(
        d.read_meta("b", "p/k").await.unwrap().data_dir,
        two.data_dir
    );

    // A delete: the same, and the key is gone for everything else.
    d.delete_object("b", "p/k").await.unwrap();
    assert_eq!(
        read_all(&d, "p/k", two.data_dir.unwrap(), 12).await,
        b"version two!"
    );
    assert!(matches!(
        d.read_meta("b", "p/k").await,
        Err(DriveError::FileNotFound)
    ));
    assert_eq!(names(&d, "", false).await, ["p/neighbour"]);
    assert_eq!(names(&d, "p/", false).await, ["p/neighbour"]);
    assert_eq!(names(&d, "p/", true).await, ["p/neighbour"]);

    // A key deleted with nothing beside it is no common prefix while its data waits.
    put_data(&d, "b", "q/r/k", b"alone").await;
    d.delete_object("b", "q/r/k").await.unwrap();
    assert_eq!(names(&d, "", true).await, ["p/"]);
    assert_eq!(names(&d, "q/", true).await, Vec::<String>::new());

    // The key can be written again meanwhile, beside the retired data.
    let three = put_data(&d, "b", "p/k", b"three").await;
    assert_eq!(
        read_all(&d, "p/k", three.data_dir.unwrap(), 5).await,
        b"three"
    );
    assert!(has_data_dir(&d, "p/k", one.data_dir.unwrap()));
    assert_eq!(names(&d, "p/", false).await, ["p/k", "p/neighbour"]);

    // A bucket that holds only retired data is empty.
    d.delete_object("b", "p/k").await.unwrap();
    d.delete_object("b", "p/neighbour").await.unwrap();
    d.delete_volume("b", false).await.unwrap();
}

#[tokio::test]
async fn a_deleted_version_of_a_versioned_key_is_retired_too() {
    let (_t, d) = drive_with_grace(Duration::from_secs(600)).await;
    d.make_volume("b").await.unwrap();
    let mut metas = Vec::new();
    for body in [&b"first"[..], b"second"] {
        let (tmp, dd) = (Uuid::new_v4(), Uuid::new_v4());
        let mut w = d.create_shard_writer(tmp, dd, 1).await.unwrap();
        w.write(body).await.unwrap();
        w.finish().await.unwrap();
        let mut m = meta("k", body.len() as u64, Some(dd), None);
        m.version_id = Some(Uuid::new_v4());
        d.rename_data(tmp, "b", "k", &m).await.unwrap();
        metas.push(m);
    }
    d.delete_version("b", "k", metas[0].version_id)
        .await
        .unwrap();
    assert_eq!(
        read_all(&d, "k", metas[0].data_dir.unwrap(), 5).await,
        b"first"
    );
    assert_eq!(d.read_versions("b", "k").await.unwrap().len(), 1);
}

#[tokio::test]
async fn retired_data_goes_after_the_grace_and_not_before_and_the_sweep_leaves_it() {
    let grace = Duration::from_secs(2);
    let (_t, d) = drive_with_grace(grace).await;
    d.make_volume("b").await.unwrap();
    let one = put_data(&d, "b", "a/k", b"one").await;
    let two = put_data(&d, "b", "a/k", b"two").await;
    let three = put_data(&d, "b", "x/y/gone", b"three").await;
    let start = Instant::now();
    d.delete_object("b", "x/y/gone").await.unwrap();

    // Not an orphan while it is kept, however old.
    let swept = d.sweep_orphans(Duration::ZERO);
    assert_eq!(swept.data_dirs, 0, "{swept:?}");
    assert!(has_data_dir(&d, "a/k", one.data_dir.unwrap()));
    assert!(has_data_dir(&d, "x/y/gone", three.data_dir.unwrap()));

    // Reads keep the first one past the grace; the deleted key's goes, with its directories.
    let root = d.root().join("b");
    let gone = eventually(Duration::from_secs(10), || !root.join("x").exists()).await;
    assert!(gone, "the deleted key's data and directories went");
    assert!(start.elapsed() >= grace);
    // (The first one was read by nobody: it went at the same time.)
    assert!(!has_data_dir(&d, "a/k", one.data_dir.unwrap()));
    assert!(has_data_dir(&d, "a/k", two.data_dir.unwrap()));

    // A read under way holds the data of a deleted version past its grace.
    d.delete_object("b", "a/k").await.unwrap();
    let deleted = Instant::now();
    while deleted.elapsed() < grace * 2 {
        assert_eq!(read_all(&d, "a/k", two.data_dir.unwrap(), 3).await, b"two");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone = eventually(Duration::from_secs(10), || !root.join("a").exists()).await;
    assert!(gone, "the data went once the reads stopped");
    assert_eq!(tree_len(&root), 0);
}

fn tree_len(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |rd| rd.count())
}
