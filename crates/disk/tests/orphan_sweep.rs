//! The orphan sweep: leftovers of killed writes go, user data and young files stay.
//!
//! Each leftover is built by hand on a drive in a temp dir, next to objects written through the
//! real `Drive` API; the sweep must remove exactly the old leftovers.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{meta, put_data, put_inline};
use quarry_disk::{Drive, LocalDrive, SweepReport, SweepSchedule};
use uuid::Uuid;

/// The minimum age the tests sweep with; "old" leftovers are made [`AGE_GAP`] before the sweep.
const MIN_AGE: Duration = Duration::from_secs(1);
const AGE_GAP: Duration = Duration::from_millis(1600);

/// A key segment that looks like a data dir name.
const UUID_SEGMENT: &str = "0b8c3d9e-1f2a-4b3c-8d4e-5f6a7b8c9d0e";

async fn drive() -> (tempfile::TempDir, LocalDrive) {
    let dir = if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let d = LocalDrive::open_without_sweep(dir.path().join("drive"))
        .await
        .unwrap();
    d.make_volume("b").await.unwrap();
    (dir, d)
}

/// Every path under `root`, relative to it (symlinks are not followed).
fn tree(root: &Path) -> BTreeSet<PathBuf> {
    fn rec(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.insert(p.strip_prefix(root).unwrap().to_path_buf());
            if e.file_type().unwrap().is_dir() {
                rec(root, &p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    rec(root, root, &mut out);
    out
}

/// Builds `rel` (a directory under the drive root) holding `files` with `len` bytes each.
fn make_dir_with(root: &Path, rel: &str, files: &[&str], len: usize) -> PathBuf {
    let dir = root.join(rel);
    std::fs::create_dir_all(&dir).unwrap();
    for f in files {
        std::fs::write(dir.join(f), vec![7u8; len]).unwrap();
    }
    dir
}

/// A data dir with no metadata naming it, in object directory `obj` (relative to the root).
fn orphan_data_dir(root: &Path, obj: &str, parts: &[&str], len: usize) -> String {
    let rel = format!("{obj}/{}", Uuid::new_v4());
    make_dir_with(root, &rel, parts, len);
    rel
}

fn tmp_file(root: &Path, obj: &str, len: usize) -> String {
    let rel = format!("{obj}/.quarry.tmp.{}", Uuid::new_v4());
    std::fs::create_dir_all(root.join(obj)).unwrap();
    std::fs::write(root.join(&rel), vec![1u8; len]).unwrap();
    rel
}

async fn sweep(d: &LocalDrive, min_age: Duration) -> SweepReport {
    let d = d.clone();
    tokio::task::spawn_blocking(move || d.sweep_orphans(min_age))
        .await
        .unwrap()
}

/// The paths `rels` and everything under them.
fn under(all: &BTreeSet<PathBuf>, rels: &[&str]) -> BTreeSet<PathBuf> {
    all.iter()
        .filter(|p| rels.iter().any(|r| p.starts_with(r)))
        .cloned()
        .collect()
}

#[tokio::test]
async fn removes_exactly_the_old_leftovers() {
    let (_t, d) = drive().await;
    let root = d.root().to_path_buf();

    // Objects written through the Drive API: all must survive with their data.
    let obj = put_data(&d, "b", "obj", b"object data").await;
    let uuid_key = format!("a/{UUID_SEGMENT}/part.1");
    let uuid_obj = put_data(&d, "b", &uuid_key, b"user data under a uuid segment").await;
    put_inline(&d, "b", &format!("a/{UUID_SEGMENT}/part.2")).await;
    put_inline(&d, "b", &format!("i/{UUID_SEGMENT}")).await;
    let bare_uuid = put_data(&d, "b", UUID_SEGMENT, b"a key that is a uuid").await;
    put_inline(&d, "b", "inl").await;
    let folder = put_data(&d, "b", "f/", b"folder marker").await;

    // Leftovers that must go.
    // An overwrite killed before the old data dir was removed: an orphan beside a meta that
    // names another data dir (several parts, as after a multipart upload).
    let beside = orphan_data_dir(&root, "b/obj", &["part.1", "part.2", "part.10"], 100);
    // A PUT killed between the data-dir rename and the meta rename: data dir, temp meta file.
    let half_put = orphan_data_dir(&root, "b/new/key", &["part.1"], 50);
    let half_put_tmp = tmp_file(&root, "b/new/key", 30);
    // A DELETE killed after removing quarry.meta: the data dir alone, deep down.
    let half_delete = orphan_data_dir(&root, "b/x/y/z", &["part.1"], 20);
    // Orphans beside an inline object, beside an object whose key segment is a UUID, and in a
    // folder-marker object.
    let beside_inline = orphan_data_dir(&root, "b/inl", &["part.1"], 10);
    let beside_uuid_key = orphan_data_dir(&root, &format!("b/{UUID_SEGMENT}"), &["part.1"], 10);
    let beside_folder = orphan_data_dir(&root, "b/f/.quarry.dir", &["part.1"], 10);
    let tmp_beside_obj = tmp_file(&root, "b/obj", 40);

    // Leftovers kept: beside metadata that cannot be parsed (garbage, or a newer version).
    make_dir_with(&root, "b/bad", &["quarry.meta"], 5);
    std::fs::write(root.join("b/bad/quarry.meta"), b"{\"version\":1,").unwrap();
    let bad_orphan = orphan_data_dir(&root, "b/bad", &["part.1"], 10);
    let bad_tmp = tmp_file(&root, "b/bad", 10);
    put_inline(&d, "b", "newer").await;
    let m = std::fs::read(root.join("b/newer/quarry.meta")).unwrap();
    let header_len = m.iter().position(|&c| c == b'\n').unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&m[..header_len]).unwrap();
    v["version"] = 2.into();
    std::fs::write(
        root.join("b/newer/quarry.meta"),
        serde_json::to_vec(&v).unwrap(),
    )
    .unwrap();
    let newer_orphan = orphan_data_dir(&root, "b/newer", &["part.1"], 10);

    // Directories that are not data dirs by the rule, with no metadata anywhere: kept.
    let with_other_file = orphan_data_dir(&root, "b/odd", &["part.1", "notes"], 10);
    let upper = format!("b/odd/{}", Uuid::new_v4().to_string().to_uppercase());
    make_dir_with(&root, &upper, &["part.1"], 10);
    let simple = format!("b/odd/{}", Uuid::new_v4().simple());
    make_dir_with(&root, &simple, &["part.1"], 10);
    let empty_uuid = format!("b/odd/{}", Uuid::new_v4());
    make_dir_with(&root, &empty_uuid, &[], 0);
    let padded = orphan_data_dir(&root, "b/odd2", &["part.01"], 10);
    let other_tmp = "b/odd3/quarry.tmp.x";
    make_dir_with(&root, "b/odd3", &["quarry.tmp.x"], 10);
    // A symlink to a data-dir-shaped directory outside the bucket: never followed.
    let outside = orphan_data_dir(&root, "outside", &["part.1"], 10);
    std::fs::create_dir_all(root.join("b/ln")).unwrap();
    let link = format!("b/ln/{}", Uuid::new_v4());
    std::os::unix::fs::symlink(root.join(&outside), root.join(&link)).unwrap();
    // In the system directory: never looked at.
    let sys = orphan_data_dir(&root, ".quarry.sys/multipart/x", &["part.1"], 10);
    let sys_tmp = tmp_file(&root, ".quarry.sys/multipart/x", 10);

    tokio::time::sleep(AGE_GAP).await;
    // Young leftovers: kept.
    let young_dir = orphan_data_dir(&root, "b/young", &["part.1"], 10);
    let young_tmp = tmp_file(&root, "b/obj", 10);
    // A young part file in an old data dir makes the whole data dir young (an upload that wrote
    // for a long time into a directory created long ago).
    let young_part = orphan_data_dir(&root, "b/obj", &["part.1"], 10);
    std::fs::write(root.join(&young_part).join("part.1"), b"rewritten").unwrap();

    let before = tree(&root);
    let r = sweep(&d, MIN_AGE).await;
    let after = tree(&root);

    let gone: Vec<&str> = vec![
        &beside,
        &half_put,
        &half_put_tmp,
        "b/new",
        &half_delete,
        "b/x",
        &beside_inline,
        &beside_uuid_key,
        &beside_folder,
        &tmp_beside_obj,
    ];
    let expected: BTreeSet<PathBuf> = before.difference(&under(&before, &gone)).cloned().collect();
    let unexpected: Vec<_> = after.symmetric_difference(&expected).collect();
    assert!(
        unexpected.is_empty(),
        "wrong paths removed or kept: {unexpected:?}\nreport {r:?}"
    );
    assert_eq!(
        r,
        SweepReport {
            data_dirs: 6,
            part_files: 8,
            tmp_files: 2,
            // b/new/key, b/new, b/x/y/z, b/x/y, b/x
            empty_dirs: 5,
            bytes: 300 + 50 + 30 + 20 + 10 + 10 + 10 + 40,
            young: 3,
            unreadable_meta: 2,
            errors: 0,
        }
    );
    for kept in [
        &bad_orphan,
        &bad_tmp,
        &newer_orphan,
        &with_other_file,
        &upper,
        &simple,
        &empty_uuid,
        &padded,
        other_tmp,
        &link,
        &outside,
        &sys,
        &sys_tmp,
        &young_dir,
        &young_tmp,
        &young_part,
    ] {
        assert!(after.contains(Path::new(kept)), "{kept} was removed");
    }

    // Every object still reads back whole.
    let read = |key: String, m: quarry_disk::ObjectMeta, want: &'static [u8]| {
        let d = d.clone();
        async move {
            assert_eq!(d.read_meta("b", &key).await.unwrap(), m, "{key}");
            let got = d
                .read_shard("b", &key, m.data_dir.unwrap(), 1, 0, want.len())
                .await
                .unwrap();
            assert_eq!(&got[..], want, "{key}");
        }
    };
    read("obj".into(), obj, b"object data").await;
    read(uuid_key, uuid_obj, b"user data under a uuid segment").await;
    read(UUID_SEGMENT.into(), bare_uuid, b"a key that is a uuid").await;
    read("f/".into(), folder, b"folder marker").await;
    for k in [
        format!("a/{UUID_SEGMENT}/part.2"),
        format!("i/{UUID_SEGMENT}"),
        "inl".into(),
    ] {
        assert!(d.read_meta("b", &k).await.unwrap().inline.is_some(), "{k}");
    }

    // A second sweep finds nothing more to remove.
    let again = sweep(&d, MIN_AGE).await;
    assert!(!again.removed_any(), "{again:?}");
    assert_eq!(tree(&root), after);
}

#[tokio::test]
async fn young_leftovers_wait_for_the_minimum_age() {
    let (_t, d) = drive().await;
    let root = d.root().to_path_buf();
    put_data(&d, "b", "k", b"data").await;
    let orphan = orphan_data_dir(&root, "b/k", &["part.1"], 10);
    let tmp = tmp_file(&root, "b/k", 10);

    let before = tree(&root);
    let r = sweep(&d, Duration::from_secs(3600)).await;
    assert_eq!(tree(&root), before);
    assert_eq!(r.young, 2, "{r:?}");
    assert!(!r.removed_any());

    tokio::time::sleep(AGE_GAP).await;
    let r = sweep(&d, MIN_AGE).await;
    assert_eq!((r.data_dirs, r.tmp_files, r.empty_dirs), (1, 1, 0), "{r:?}");
    assert!(!root.join(orphan).exists());
    assert!(!root.join(tmp).exists());
    assert!(root.join("b/k/quarry.meta").exists());
}

/// A commit is a rename of the data dir and then of the metadata: between the two, the data
/// dir is named by nothing, but a rename makes it young, however old its files are.
#[tokio::test]
async fn a_commit_in_progress_is_young() {
    let (_t, d) = drive().await;
    let root = d.root().to_path_buf();
    let tmp_id = Uuid::new_v4();
    let dd = Uuid::new_v4();
    let mut w = d.create_shard_writer(tmp_id, dd, 1).await.unwrap();
    w.write(b"shard").await.unwrap();
    w.finish().await.unwrap();
    put_inline(&d, "b", "k").await;
    tokio::time::sleep(AGE_GAP).await;
    // The first half of rename_data, done by hand.
    let src = root.join(format!(".quarry.sys/tmp/{tmp_id}/{dd}"));
    let dst = root.join(format!("b/k/{dd}"));
    std::fs::rename(&src, &dst).unwrap();

    let r = sweep(&d, MIN_AGE).await;
    assert_eq!(r.data_dirs, 0, "{r:?}");
    assert!(dst.join("part.1").exists());
    // The second half: the metadata now names it, and the sweep keeps it whatever its age.
    let m = meta("k", 5, Some(dd), None);
    d.rename_data(tmp_id, "b", "k", &m).await.unwrap_err(); // tmp already moved: refused
    std::fs::write(root.join("b/k/quarry.meta"), m.to_bytes()).unwrap();
    let r = sweep(&d, Duration::ZERO).await;
    assert_eq!(r.data_dirs, 0, "{r:?}");
    assert_eq!(
        &d.read_shard("b", "k", dd, 1, 0, 5).await.unwrap()[..],
        b"shard"
    );
}

#[tokio::test]
async fn background_sweep_removes_leftovers() {
    let (_t, d) = drive().await;
    let root = d.root().to_path_buf();
    put_inline(&d, "b", "k").await;
    let orphan = orphan_data_dir(&root, "b/k", &["part.1"], 10);
    let lone = orphan_data_dir(&root, "b/gone", &["part.1"], 10);
    // The first pass finds them young; the second, a minimum age later, removes them.
    d.spawn_orphan_sweep(SweepSchedule {
        min_age: Duration::from_millis(300),
        every: None,
        ..SweepSchedule::default()
    })
    .await
    .unwrap();
    assert!(!root.join(orphan).exists());
    assert!(!root.join("b/gone").exists(), "{lone} left");
    assert!(root.join("b/k/quarry.meta").exists());
    assert!(root.join("b").is_dir());
}

#[tokio::test]
async fn the_sweep_runs_again_every_interval() {
    let (_t, d) = drive().await;
    let root = d.root().to_path_buf();
    put_inline(&d, "b", "k").await;
    let task = d.spawn_orphan_sweep(SweepSchedule {
        min_age: Duration::from_millis(200),
        every: Some(Duration::from_millis(200)),
        ..SweepSchedule::default()
    });
    // Left after the two passes at start-up: only a periodic pass removes it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = orphan_data_dir(&root, "b/k", &["part.1"], 10);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while root.join(&later).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{later} still there 10 s later"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!task.is_finished(), "the sweep keeps running");
    assert!(root.join("b/k/quarry.meta").exists());
    task.abort();
}

#[tokio::test]
async fn an_empty_bucket_stays() {
    let (_t, d) = drive().await;
    let root = d.root().to_path_buf();
    orphan_data_dir(&root, "b/k", &["part.1"], 10);
    tokio::time::sleep(AGE_GAP).await;
    let r = sweep(&d, MIN_AGE).await;
    assert_eq!((r.data_dirs, r.empty_dirs), (1, 1), "{r:?}");
    assert!(root.join("b").is_dir());
    assert!(d
        .list_volumes()
        .await
        .unwrap()
        .iter()
        .any(|v| v.name == "b"));
}

#[tokio::test]
async fn a_tmp_file_from_before_the_open_goes_at_once_one_from_after_stays() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("drive");
    let d = LocalDrive::open_without_sweep(&root).await.unwrap();
    d.make_volume("b").await.unwrap();
    put_inline(&d, "b", "k").await;
    // A killed process's metadata write, a moment old: far younger than the minimum age.
    let dead = tmp_file(&root, "b/k", 10);
    drop(d);
    // A restart takes longer than the filesystem clock's tick: the open is in a later one.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let d = LocalDrive::open_with_sweep(
        &root,
        SweepSchedule {
            min_age: Duration::from_secs(3600),
            every: None,
            ..SweepSchedule::default()
        },
    )
    .await
    .unwrap();
    let live = tmp_file(&root, "b/k", 10);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while root.join(&dead).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{dead} still there 10 s after the open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(root.join(&live).exists(), "a write of this process stays");
    assert!(root.join("b/k/quarry.meta").exists());
    drop(d);
}
