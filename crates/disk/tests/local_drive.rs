//! LocalDrive: layout, volumes, commit, shards, deletes, path safety.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{drive, meta, put_data, put_inline};
use quarry_disk::{Drive, DriveError, FormatV1, LocalDrive, ObjectMeta, WalkEntry, WalkOptions};
use uuid::Uuid;

/// Every path under `root`, relative to it.
fn tree(root: &Path) -> BTreeSet<PathBuf> {
    fn rec(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let p = e.unwrap().path();
            out.insert(p.strip_prefix(root).unwrap().to_path_buf());
            if p.is_dir() {
                rec(root, &p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    rec(root, root, &mut out);
    out
}

fn paths(v: &[&str]) -> BTreeSet<PathBuf> {
    v.iter().map(PathBuf::from).collect()
}

#[tokio::test]
async fn open_creates_layout_and_sweeps_tmp() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("d");
    let d = LocalDrive::open(&root).await.unwrap();
    assert!(root.join(".quarry.sys/tmp").is_dir());
    assert_eq!(d.endpoint(), root.display().to_string());

    // An aborted write and a stray file are left in tmp; a bucket is not touched.
    let mut w = d
        .create_shard_writer(Uuid::new_v4(), Uuid::new_v4(), 1)
        .await
        .unwrap();
    w.write(b"half a shard").await.unwrap();
    drop(w);
    std::fs::write(root.join(".quarry.sys/tmp/stray"), b"x").unwrap();
    d.make_volume("b").await.unwrap();
    put_inline(&d, "b", "k").await;
    assert_eq!(
        std::fs::read_dir(root.join(".quarry.sys/tmp"))
            .unwrap()
            .count(),
        2
    );

    let d = LocalDrive::open(&root).await.unwrap();
    assert_eq!(
        std::fs::read_dir(root.join(".quarry.sys/tmp"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(d.read_meta("b", "k").await.unwrap().etag, "k");
}

#[tokio::test]
async fn format_and_disk_info() {
    let (_t, d) = drive().await;
    assert_eq!(d.read_format().await.unwrap(), None);
    // Unformatted: not online.
    assert!(matches!(d.disk_info().await, Err(DriveError::Unusable(_))));

    let me = Uuid::new_v4();
    let f = FormatV1::new(Uuid::new_v4(), me, vec![vec![me, Uuid::new_v4()]]);
    d.write_format(&f).await.unwrap();
    assert_eq!(d.read_format().await.unwrap(), Some(f.clone()));
    let info = d.disk_info().await.unwrap();
    assert_eq!(info.id, Some(me));
    assert!(info.total > 0 && info.free <= info.total, "{info:?}");
    // Rewriting replaces it whole, and leaves no temp file behind.
    let f2 = FormatV1::new(f.deployment_id, me, vec![vec![me]]);
    d.write_format(&f2).await.unwrap();
    assert_eq!(d.read_format().await.unwrap(), Some(f2));
    assert_eq!(
        tree(&d.root().join(".quarry.sys")),
        paths(&["format.json", "tmp"])
    );

    std::fs::write(d.root().join(".quarry.sys/format.json"), b"{\"version\":9}").unwrap();
    assert!(matches!(
        d.read_format().await,
        Err(DriveError::UnsupportedVersion { found: 9, .. })
    ));
}

#[tokio::test]
async fn a_removed_drive_is_not_recreated_by_writes() {
    let (_t, d) = drive().await;
    let me = Uuid::new_v4();
    d.write_format(&FormatV1::new(Uuid::new_v4(), me, vec![vec![me]]))
        .await
        .unwrap();
    let moved = d.root().with_extension("unmounted");
    std::fs::rename(d.root(), &moved).unwrap();
    assert!(matches!(
        d.create_shard_writer(Uuid::new_v4(), Uuid::new_v4(), 1)
            .await,
        Err(DriveError::Unusable(_))
    ));
    assert!(d.make_volume("bucket").await.is_err());
    assert!(d.disk_info().await.is_err());
    // A missing drive is offline, not a drive that says "no such bucket".
    assert!(matches!(
        d.stat_volume("bucket").await,
        Err(DriveError::Unusable(_))
    ));
    assert!(matches!(
        d.read_meta("bucket", "k").await,
        Err(DriveError::Unusable(_))
    ));
    assert!(!d.root().exists(), "the drive root was re-created");
}

#[tokio::test]
async fn volumes() {
    let (_t, d) = drive().await;
    d.make_volume("b2").await.unwrap();
    d.make_volume("b1").await.unwrap();
    assert!(matches!(
        d.make_volume("b1").await,
        Err(DriveError::VolumeExists)
    ));
    let names: Vec<String> = d
        .list_volumes()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(names, ["b1", "b2"]);
    let v = d.stat_volume("b1").await.unwrap();
    assert_eq!(v.name, "b1");
    assert!(v.created_ns > 1_600_000_000_000_000_000, "{v:?}");
    assert!(matches!(
        d.stat_volume("nope").await,
        Err(DriveError::VolumeNotFound)
    ));
    assert!(matches!(
        d.delete_volume("nope", false).await,
        Err(DriveError::VolumeNotFound)
    ));

    // Not empty while an object remains, even deep down.
    put_inline(&d, "b1", "x/y/z").await;
    assert!(matches!(
        d.delete_volume("b1", false).await,
        Err(DriveError::VolumeNotEmpty)
    ));
    assert!(d.read_meta("b1", "x/y/z").await.is_ok());
    // Stray empty directories and a leftover temp file do not make it non-empty.
    d.delete_object("b1", "x/y/z").await.unwrap();
    std::fs::create_dir_all(d.root().join("b1/p/q/r")).unwrap();
    std::fs::write(d.root().join("b1/p/.quarry.tmp.1"), b"x").unwrap();
    d.delete_volume("b1", false).await.unwrap();
    assert!(!d.root().join("b1").exists());

    // Forced: goes with everything in it.
    put_data(&d, "b2", "k", b"data").await;
    put_inline(&d, "b2", "a/b").await;
    d.delete_volume("b2", true).await.unwrap();
    assert!(d.list_volumes().await.unwrap().is_empty());
    assert_eq!(tree(d.root()), paths(&[".quarry.sys", ".quarry.sys/tmp"]));
}

#[tokio::test]
async fn write_commit_read() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let tmp = Uuid::new_v4();
    let dd = Uuid::new_v4();
    // Two parts; part 1 in many small writes and one large one.
    let mut w = d.create_shard_writer(tmp, dd, 1).await.unwrap();
    let mut expect = Vec::new();
    for i in 0..1000u32 {
        let chunk = i.to_le_bytes();
        w.write(&chunk).await.unwrap();
        expect.extend_from_slice(&chunk);
    }
    let big: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
    w.write(&big).await.unwrap();
    expect.extend_from_slice(&big);
    w.finish().await.unwrap();
    let mut w2 = d.create_shard_writer(tmp, dd, 2).await.unwrap();
    w2.write(b"second part").await.unwrap();
    w2.finish().await.unwrap();

    let m = meta("obj", expect.len() as u64, Some(dd), None);
    d.rename_data(tmp, "b", "dir/obj", &m).await.unwrap();

    assert_eq!(d.read_meta("b", "dir/obj").await.unwrap(), m);
    let all = d
        .read_shard("b", "dir/obj", dd, 1, 0, expect.len())
        .await
        .unwrap();
    assert_eq!(&all[..], &expect[..]);
    let mid = d
        .read_shard("b", "dir/obj", dd, 1, 3999, 5000)
        .await
        .unwrap();
    assert_eq!(&mid[..], &expect[3999..8999]);
    let p2 = d.read_shard("b", "dir/obj", dd, 2, 7, 4).await.unwrap();
    assert_eq!(&p2[..], b"part");
    assert!(d
        .read_shard("b", "dir/obj", dd, 2, 11, 0)
        .await
        .unwrap()
        .is_empty());

    match d.read_shard("b", "dir/obj", dd, 2, 5, 7).await {
        Err(DriveError::Truncated {
            offset: 5,
            wanted: 7,
            len: 11,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        d.read_shard("b", "dir/obj", dd, 2, u64::MAX, 1).await,
        Err(DriveError::Truncated { .. })
    ));
    assert!(matches!(
        d.read_shard("b", "dir/obj", dd, 3, 0, 1).await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.read_shard("b", "dir/obj", Uuid::new_v4(), 1, 0, 1).await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.read_shard("b", "nope", dd, 1, 0, 1).await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.read_shard("nob", "dir/obj", dd, 1, 0, 1).await,
        Err(DriveError::VolumeNotFound)
    ));

    // Layout: meta and data dir in place, tmp cleaned up.
    let dds = dd.to_string();
    assert_eq!(
        tree(&d.root().join("b")),
        paths(&[
            "dir",
            "dir/obj",
            "dir/obj/quarry.meta",
            &format!("dir/obj/{dds}"),
            &format!("dir/obj/{dds}/part.1"),
            &format!("dir/obj/{dds}/part.2"),
        ])
    );
    assert_eq!(
        std::fs::read_dir(d.root().join(".quarry.sys/tmp"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn not_found_errors() {
    let (_t, d) = drive().await;
    assert!(matches!(
        d.read_meta("b", "k").await,
        Err(DriveError::VolumeNotFound)
    ));
    let m = meta("k", 1, None, Some(vec![1]));
    assert!(matches!(
        d.rename_data(Uuid::new_v4(), "b", "k", &m).await,
        Err(DriveError::VolumeNotFound)
    ));
    assert!(
        !d.root().join("b").exists(),
        "commit must not create the bucket"
    );
    d.make_volume("b").await.unwrap();
    assert!(matches!(
        d.read_meta("b", "k").await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.delete_object("b", "k").await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.write_meta("b", "k", &m).await,
        Err(DriveError::FileNotFound)
    ));
    // A data dir that was never written cannot be committed.
    let m = meta("k", 1, Some(Uuid::new_v4()), None);
    assert!(matches!(
        d.rename_data(Uuid::new_v4(), "b", "k", &m).await,
        Err(DriveError::FileNotFound)
    ));
    assert!(matches!(
        d.read_meta("b", "k").await,
        Err(DriveError::FileNotFound)
    ));
    // A path through an object's data dir or metadata file is just not found.
    let m = put_data(&d, "b", "o", b"x").await;
    let through = format!("o/{}/part.1", m.data_dir.unwrap());
    assert!(matches!(
        d.read_meta("b", &through).await,
        Err(DriveError::FileNotFound)
    ));
    d.delete_tmp(Uuid::new_v4()).await.unwrap();
}

#[tokio::test]
async fn overwrite_replaces_data_dir() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let m1 = put_data(&d, "b", "k", b"first").await;
    let old = d.root().join("b/k").join(m1.data_dir.unwrap().to_string());
    assert!(old.is_dir());
    let m2 = put_data(&d, "b", "k", b"second!").await;
    assert!(!old.exists(), "old data dir must go");
    assert_eq!(d.read_meta("b", "k").await.unwrap(), m2);
    let got = d
        .read_shard("b", "k", m2.data_dir.unwrap(), 1, 0, 7)
        .await
        .unwrap();
    assert_eq!(&got[..], b"second!");
    // Inline over data: the data dir goes too; the directory holds only the metadata.
    put_inline(&d, "b", "k").await;
    assert_eq!(tree(&d.root().join("b/k")), paths(&["quarry.meta"]));
    assert_eq!(
        d.read_meta("b", "k").await.unwrap().inline.as_deref(),
        Some(&b"abc"[..])
    );
}

#[tokio::test]
async fn recommit_of_the_same_data_dir_replaces_it() {
    // What a heal does: rewrite the shards of the version it repairs, same data dir.
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let m = put_data(&d, "b", "k", b"damaged").await;
    let dd = m.data_dir.unwrap();
    for content in [&b"healed!"[..], b"again!!"] {
        let tmp = Uuid::new_v4();
        let mut w = d.create_shard_writer(tmp, dd, 1).await.unwrap();
        w.write(content).await.unwrap();
        w.finish().await.unwrap();
        d.rename_data(tmp, "b", "k", &m).await.unwrap();
        assert_eq!(
            &d.read_shard("b", "k", dd, 1, 0, 7).await.unwrap()[..],
            content
        );
        assert_eq!(d.read_meta("b", "k").await.unwrap(), m);
        assert_eq!(
            std::fs::read_dir(d.root().join(".quarry.sys/tmp"))
                .unwrap()
                .count(),
            0
        );
    }
    // Also when the old data dir lost its part file but is still there (empty).
    std::fs::remove_file(d.root().join(format!("b/k/{dd}/part.1"))).unwrap();
    let tmp = Uuid::new_v4();
    let mut w = d.create_shard_writer(tmp, dd, 1).await.unwrap();
    w.write(b"thrice!").await.unwrap();
    w.finish().await.unwrap();
    d.rename_data(tmp, "b", "k", &m).await.unwrap();
    assert_eq!(
        &d.read_shard("b", "k", dd, 1, 0, 7).await.unwrap()[..],
        b"thrice!"
    );
}

#[tokio::test]
async fn write_meta_replaces_metadata() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let mut m = put_data(&d, "b", "k", b"data").await;
    m.user_meta.insert("color".into(), "blue".into());
    d.write_meta("b", "k", &m).await.unwrap();
    assert_eq!(d.read_meta("b", "k").await.unwrap(), m);
    let dd = m.data_dir.unwrap().to_string();
    assert_eq!(
        tree(&d.root().join("b/k")),
        paths(&["quarry.meta", &dd, &format!("{dd}/part.1")])
    );
}

#[tokio::test]
async fn delete_prunes_empty_parents() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    put_data(&d, "b", "a/b/c/d", b"x").await;
    put_inline(&d, "b", "a/b").await;
    put_inline(&d, "b", "a/x").await;

    d.delete_object("b", "a/b/c/d").await.unwrap();
    // a/b/c went; a/b is an object and stays.
    assert_eq!(
        tree(&d.root().join("b")),
        paths(&["a", "a/b", "a/b/quarry.meta", "a/x", "a/x/quarry.meta"])
    );
    d.delete_object("b", "a/b").await.unwrap();
    d.delete_object("b", "a/x").await.unwrap();
    assert_eq!(tree(&d.root().join("b")), paths(&[]));
    assert!(d.root().join("b").is_dir(), "the bucket itself stays");
    assert!(matches!(
        d.delete_object("b", "a/x").await,
        Err(DriveError::FileNotFound)
    ));

    // An object with children: deleting it keeps the children and their directories.
    put_data(&d, "b", "p", b"x").await;
    put_inline(&d, "b", "p/q").await;
    d.delete_object("b", "p").await.unwrap();
    assert_eq!(
        tree(&d.root().join("b")),
        paths(&["p", "p/q", "p/q/quarry.meta"])
    );
    assert!(d.read_meta("b", "p/q").await.is_ok());
}

/// Commits of keys whose directories deletes of their neighbours keep pruning: a commit whose
/// new directories vanish before its metadata is in them creates them again, and none is lost
/// or leaves a temp file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commits_racing_pruning_deletes_lose_nothing() {
    const ROUNDS: usize = 300;
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..6 {
        let d = d.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let key = format!("s/t/w{w}");
                if (w + round) % 2 == 0 {
                    put_data(&d, "b", &key, key.as_bytes()).await;
                } else {
                    put_inline(&d, "b", &key).await;
                }
                if round < ROUNDS - 1 {
                    // The last delete of s/t's keys prunes s/t and s, under the others' commits.
                    d.delete_object("b", &key).await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for w in 0..6 {
        let key = format!("s/t/w{w}");
        let m = d.read_meta("b", &key).await.unwrap();
        assert_eq!(m.etag, key);
        if let Some(dd) = m.data_dir {
            let data = d.read_shard("b", &key, dd, 1, 0, key.len()).await.unwrap();
            assert_eq!(&data[..], key.as_bytes());
        }
    }
    let mut expect = vec!["s".to_owned(), "s/t".to_owned()];
    for w in 0..6 {
        let m = d.read_meta("b", &format!("s/t/w{w}")).await.unwrap();
        expect.push(format!("s/t/w{w}"));
        expect.push(format!("s/t/w{w}/quarry.meta"));
        if let Some(dd) = m.data_dir {
            expect.push(format!("s/t/w{w}/{dd}"));
            expect.push(format!("s/t/w{w}/{dd}/part.1"));
        }
    }
    let expect: Vec<&str> = expect.iter().map(String::as_str).collect();
    assert_eq!(tree(&d.root().join("b")), paths(&expect));
    assert_eq!(
        std::fs::read_dir(d.root().join(".quarry.sys/tmp"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn folder_marker_keys() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    put_inline(&d, "b", "dir/").await;
    put_inline(&d, "b", "dir").await;
    put_inline(&d, "b", "dir/file").await;
    assert_eq!(d.read_meta("b", "dir/").await.unwrap().etag, "dir/");
    assert_eq!(d.read_meta("b", "dir").await.unwrap().etag, "dir");
    let opts = WalkOptions {
        limit: 100,
        ..Default::default()
    };
    let keys: Vec<String> = d
        .walk("b", &opts)
        .await
        .unwrap()
        .iter()
        .map(|e| e.name().to_owned())
        .collect();
    assert_eq!(keys, ["dir", "dir/", "dir/file"]);
    d.delete_object("b", "dir/").await.unwrap();
    assert!(matches!(
        d.read_meta("b", "dir/").await,
        Err(DriveError::FileNotFound)
    ));
    assert_eq!(d.read_meta("b", "dir/file").await.unwrap().etag, "dir/file");
    d.delete_object("b", "dir/file").await.unwrap();
    d.delete_object("b", "dir").await.unwrap();
    assert_eq!(tree(&d.root().join("b")), paths(&[]));
}

#[tokio::test]
async fn corrupt_metadata() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    put_inline(&d, "b", "bad").await;
    put_inline(&d, "b", "good").await;
    put_inline(&d, "b", "newer").await;
    std::fs::write(d.root().join("b/bad/quarry.meta"), b"{\"version\":1,").unwrap();
    let newer = std::fs::read(d.root().join("b/newer/quarry.meta")).unwrap();
    let header_len = newer.iter().position(|&c| c == b'\n').unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&newer[..header_len]).unwrap();
    v["version"] = (quarry_disk::META_VERSION + 1).into();
    std::fs::write(
        d.root().join("b/newer/quarry.meta"),
        serde_json::to_vec(&v).unwrap(),
    )
    .unwrap();

    assert!(matches!(
        d.read_meta("b", "bad").await,
        Err(DriveError::CorruptMeta(_))
    ));
    assert!(matches!(
        d.read_meta("b", "newer").await,
        Err(DriveError::UnsupportedVersion { found, supported })
            if found == quarry_disk::META_VERSION + 1 && supported == quarry_disk::META_VERSION
    ));
    let opts = WalkOptions {
        limit: 10,
        ..Default::default()
    };
    let entries = d.walk("b", &opts).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert!(
        matches!(&entries[0], WalkEntry::Object { key, meta } if key == "good" && meta.inline.is_none())
    );
    // A corrupt object can still be deleted.
    d.delete_object("b", "bad").await.unwrap();
    assert!(!d.root().join("b/bad").exists());
}

#[tokio::test]
async fn path_traversal_touches_nothing_outside_the_root() {
    let base = tempfile::tempdir().unwrap();
    let outside = base.path().join("outside");
    std::fs::create_dir_all(outside.join("victim")).unwrap();
    std::fs::write(outside.join("victim/quarry.meta"), b"precious").unwrap();
    std::fs::write(outside.join("file"), b"precious").unwrap();
    let root = base.path().join("drive");
    let d = LocalDrive::open(&root).await.unwrap();
    d.make_volume("b").await.unwrap();
    let before = tree(base.path());

    let bad_buckets = ["..", "../outside", ".", "", "a/b", ".quarry.sys", "/abs"];
    let bad_keys = [
        "../../outside/victim",
        "../outside/file",
        "..",
        "/abs",
        "a/../../..",
        "a//b",
        "a/./b",
        "./x",
        ".quarry.sys/tmp",
        "x/quarry.meta",
        "nul\0",
    ];
    let m = meta("x", 1, None, Some(vec![1]));
    let invalid = |r: Result<(), DriveError>, what: &str| match r {
        Err(DriveError::InvalidName(why)) => assert!(!why.is_empty()),
        other => panic!("{what}: {other:?}"),
    };
    for b in bad_buckets {
        invalid(d.make_volume(b).await, b);
        invalid(d.delete_volume(b, true).await, b);
        invalid(d.stat_volume(b).await.map(drop), b);
        invalid(d.rename_data(Uuid::new_v4(), b, "k", &m).await, b);
        invalid(d.walk(b, &WalkOptions::default()).await.map(drop), b);
    }
    for k in bad_keys {
        invalid(d.rename_data(Uuid::new_v4(), "b", k, &m).await, k);
        invalid(d.read_meta("b", k).await.map(drop), k);
        invalid(d.write_meta("b", k, &m).await, k);
        invalid(d.delete_object("b", k).await, k);
        invalid(
            d.read_shard("b", k, Uuid::new_v4(), 1, 0, 1)
                .await
                .map(drop),
            k,
        );
    }
    // Listing with a prefix no key can have is empty, not an escape.
    for p in ["../", "../../outside/", "/", "a//", "./"] {
        let opts = WalkOptions {
            prefix: p.into(),
            limit: 100,
            ..Default::default()
        };
        assert!(d.walk("b", &opts).await.unwrap().is_empty(), "{p}");
    }
    assert_eq!(tree(base.path()), before);
    assert_eq!(std::fs::read(outside.join("file")).unwrap(), b"precious");
}

#[tokio::test]
async fn unicode_and_odd_keys_round_trip() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    let seg = "s".repeat(255);
    let long = format!("{seg}/{seg}/{seg}/{}/u", "t".repeat(254));
    let keys = [
        "ünïcødé/日本語/🦀",
        "with space",
        "a+b=c&d",
        "100%",
        "...",
        ".hidden/x",
        long.as_str(),
    ];
    for k in keys {
        put_inline(&d, "b", k).await;
        let got: ObjectMeta = d.read_meta("b", k).await.unwrap();
        assert_eq!(got.etag, k);
    }
    let mut sorted: Vec<&str> = keys.to_vec();
    sorted.sort();
    let opts = WalkOptions {
        limit: 100,
        ..Default::default()
    };
    let listed: Vec<String> = d
        .walk("b", &opts)
        .await
        .unwrap()
        .iter()
        .map(|e| e.name().to_owned())
        .collect();
    assert_eq!(listed, sorted);
    let too_long = format!("{long}x");
    assert!(matches!(
        d.read_meta("b", &too_long).await,
        Err(DriveError::InvalidName(_))
    ));
}

#[tokio::test]
async fn large_headers_and_inline_data() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    // A header longer than the first read of a listing, and inline data of 200 KiB.
    let mut m = meta(
        "big",
        200 << 10,
        None,
        Some((0..200u32 << 10).map(|i| i as u8).collect()),
    );
    for i in 0..100 {
        m.user_meta.insert(format!("key-{i}"), "v".repeat(100));
    }
    d.rename_data(Uuid::new_v4(), "b", "big", &m).await.unwrap();
    put_data(&d, "b", "big2", b"x").await;
    let mut m2 = d.read_meta("b", "big2").await.unwrap();
    m2.user_meta = m.user_meta.clone();
    d.write_meta("b", "big2", &m2).await.unwrap();

    assert_eq!(d.read_meta("b", "big").await.unwrap(), m);
    let opts = WalkOptions {
        limit: 10,
        ..Default::default()
    };
    // The walk read past its first read of each file, and returns the listing view.
    let entries = d.walk("b", &opts).await.unwrap();
    assert_eq!(
        entries,
        [
            WalkEntry::Object {
                key: "big".into(),
                meta: m.clone().listing_view().into()
            },
            WalkEntry::Object {
                key: "big2".into(),
                meta: m2.clone().listing_view().into()
            }
        ]
    );
    // Delete finds the data dir named in the long header.
    d.delete_object("b", "big2").await.unwrap();
    assert!(!d.root().join("b/big2").exists());
}

/// Deletes of an inline object and of an object below it at once: the lower one's delete prunes
/// the upper one's directory as soon as its metadata is gone, under the upper delete's own
/// fsync of it. Both deletes succeed, every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletes_of_nested_objects_at_once_both_succeed() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    for _ in 0..300 {
        put_inline(&d, "b", "u/v").await;
        put_inline(&d, "b", "u/v/w").await;
        let (upper, lower) = tokio::join!(
            tokio::spawn({
                let d = d.clone();
                async move { d.delete_object("b", "u/v").await }
            }),
            tokio::spawn({
                let d = d.clone();
                async move { d.delete_object("b", "u/v/w").await }
            }),
        );
        upper.unwrap().unwrap();
        lower.unwrap().unwrap();
        assert_eq!(tree(&d.root().join("b")), paths(&[]));
    }
}

/// Walks while keys below a shared prefix are written and deleted (their directories made and
/// pruned under the walk): every walk succeeds and returns only keys that were written, and the
/// key that stays all along is in every walk.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn walks_under_commits_and_pruning_deletes_succeed() {
    let (_t, d) = drive().await;
    d.make_volume("b").await.unwrap();
    put_inline(&d, "b", "s/stay").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let d = d.clone();
        writers.push(tokio::spawn(async move {
            for round in 0..200 {
                let key = format!("s/t{w}/u/k{}", round % 3);
                put_inline(&d, "b", &key).await;
                d.delete_object("b", &key).await.unwrap();
            }
        }));
    }
    let mut walkers = Vec::new();
    for delimited in [false, true] {
        let (d, stop) = (d.clone(), stop.clone());
        walkers.push(tokio::spawn(async move {
            let mut walks = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let o = WalkOptions {
                    prefix: "s/".into(),
                    delimited,
                    limit: 1000,
                    ..Default::default()
                };
                let entries = d.walk("b", &o).await.unwrap();
                let names: Vec<&str> = entries.iter().map(|e| e.name()).collect();
                assert!(names.contains(&"s/stay"), "{names:?}");
                for n in names {
                    assert!(
                        n == "s/stay" || n.starts_with("s/t"),
                        "a name no write made: {n}"
                    );
                }
                walks += 1;
            }
            walks
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in walkers {
        assert!(w.await.unwrap() > 0);
    }
}
