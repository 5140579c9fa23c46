//! Listing a bucket in key order straight from the directory tree.
//!
//! A directory whose key prefix is `P` ("" for the bucket, else ending in '/') holds:
//! - `.quarry.dir/` — the object whose key is `P` itself (a folder marker), sorting first;
//! - for each child directory `n`: the object `P n` (if `n/quarry.meta` exists) and the keys
//!   below `P n /`. These two sort apart: `a` < `a-c` < `a/…` because '-' < '/'. So each child
//!   becomes two candidates, `n` and `n/`, and the candidates are sorted together. No key of
//!   another child can fall inside the range of `n/` (child names hold no '/'), so visiting the
//!   sorted candidates, and descending at each `n/`, yields keys in order.
//!
//! Only directories whose range can hold keys under the prefix and after the marker are read: the
//! walk starts at the directory named by the prefix's complete segments, and a subtree whose
//! whole range sorts before the marker is skipped without being opened.
//!
//! Every object directory is also the range of keys below it, which costs a directory read per
//! object. Where the filesystem keeps a directory's link count at 2 + its subdirectories
//! (ext2/3/4, XFS, tmpfs: checked at open), one `stat` shows that an object has no children and
//! the read is skipped.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use tracing::warn;
use uuid::Uuid;

use super::{is_not_found, read_meta_header};
use crate::drive::{WalkEntry, WalkOptions};
use crate::meta::ObjectMeta;
use crate::path::{is_key_segment, prefix_dir_rel_path, FOLDER_DIR, META_FILE};

/// Walks the bucket at `bucket_dir` (which exists). Also returns how many directories were
/// read, which tests use to check that listing reads only what it must.
pub(super) fn walk(
    bucket_dir: &Path,
    opts: &WalkOptions,
    leaf_opt: bool,
) -> io::Result<(Vec<WalkEntry>, usize)> {
    let mut w = Walker {
        opts,
        leaf_opt,
        out: Vec::new(),
        dirs_read: 0,
        key: String::new(),
        buf: Vec::new(),
    };
    if opts.limit == 0 {
        return Ok((w.out, 0));
    }
    let Some(rel) = prefix_dir_rel_path(&opts.prefix) else {
        return Ok((w.out, 0)); // no valid key can start with this prefix
    };
    let start = match opts.prefix.rfind('/') {
        Some(i) => &opts.prefix[..=i],
        None => "",
    };
    if !start.is_empty() && w.before_marker(start) {
        return Ok((w.out, 0));
    }
    w.visit(&bucket_dir.join(rel), start, None)?;
    Ok((w.out, w.dirs_read))
}

struct Walker<'a> {
    opts: &'a WalkOptions,
    /// Whether directory link counts are 2 + number of subdirectories on this filesystem.
    leaf_opt: bool,
    out: Vec<WalkEntry>,
    dirs_read: usize,
    /// Scratch space for building candidate keys.
    key: String,
    /// Scratch space for reading metadata.
    buf: Vec<u8>,
}

/// What a directory holds that matters to a walk.
struct Children {
    /// Child directories that may be key segments, unsorted.
    names: Vec<String>,
    /// Whether `.quarry.dir` exists (the folder-marker object may be there).
    folder: bool,
}

/// One sort candidate: child `idx` as an object (`n`) or as a directory (`n/`).
#[derive(Clone, Copy)]
struct Cand {
    idx: usize,
    dir: bool,
}

impl Walker<'_> {
    fn full(&self) -> bool {
        self.out.len() >= self.opts.limit
    }

    fn after_marker(&self, s: &str) -> bool {
        self.opts.marker.as_deref().is_none_or(|m| s > m)
    }

    /// Whether every string beginning with `range` sorts at or before the marker.
    fn before_marker(&self, range: &str) -> bool {
        self.opts
            .marker
            .as_deref()
            .is_some_and(|m| m > range && !m.starts_with(range))
    }

    /// Whether `dir` certainly has no subdirectory but `data_dir` (if given), judged from its
    /// link count without reading it. `false` means "unknown".
    fn certainly_leaf(&self, dir: &Path, data_dir: Option<Uuid>) -> bool {
        self.leaf_opt
            && fs::symlink_metadata(dir)
                .is_ok_and(|md| md.is_dir() && md.nlink() == 2 + u64::from(data_dir.is_some()))
    }

    fn read_children(&mut self, dir: &Path, skip: Option<Uuid>) -> io::Result<Children> {
        self.dirs_read += 1;
        read_children(dir, skip)
    }

    /// Visits the directory `dir` whose key prefix is `p`; `skip` is the data dir of the object
    /// stored in `dir`, when known. Returns whether the limit was reached.
    fn visit(&mut self, dir: &Path, p: &str, skip: Option<Uuid>) -> io::Result<bool> {
        let children = match self.read_children(dir, skip) {
            Ok(c) => c,
            Err(e) if is_not_found(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        let prefix = self.opts.prefix.as_str();

        if children.folder && !p.is_empty() && p.starts_with(prefix) && self.after_marker(p) {
            let meta_dir = dir.join(FOLDER_DIR);
            if let Some(meta) = read_meta(&meta_dir, &mut self.buf)? {
                self.out.push(WalkEntry::Object {
                    key: p.to_owned(),
                    meta,
                });
                if self.full() {
                    return Ok(true);
                }
            }
        }

        let names = &children.names;
        let mut cands: Vec<Cand> = Vec::with_capacity(names.len() * 2);
        for idx in 0..names.len() {
            cands.push(Cand { idx, dir: false });
            cands.push(Cand { idx, dir: true });
        }
        let sort_bytes = |c: &Cand| {
            names[c.idx]
                .as_bytes()
                .iter()
                .copied()
                .chain(c.dir.then_some(b'/'))
        };
        cands.sort_unstable_by(|a, b| sort_bytes(a).cmp(sort_bytes(b)));

        // Data dirs learned from the objects' metadata, to skip when descending.
        let mut data_dirs: Vec<Option<Uuid>> = vec![None; names.len()];
        for c in cands {
            let name = names[c.idx].as_str();
            let mut key = std::mem::take(&mut self.key);
            key.clear();
            key.push_str(p);
            key.push_str(name);
            if c.dir {
                key.push('/');
            }
            let r = self.visit_candidate(dir, name, &key, c.dir, &mut data_dirs[c.idx]);
            self.key = key;
            if r? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// One candidate of `visit`: the object `key` (= P n) or the range `key` (= P n /).
    fn visit_candidate(
        &mut self,
        dir: &Path,
        name: &str,
        key: &str,
        is_dir: bool,
        data_dir: &mut Option<Uuid>,
    ) -> io::Result<bool> {
        let prefix = self.opts.prefix.as_str();
        if !is_dir {
            if !key.starts_with(prefix) || !self.after_marker(key) {
                return Ok(false);
            }
            if let Some(meta) = read_meta(&dir.join(name), &mut self.buf)? {
                *data_dir = meta.data_dir;
                self.out.push(WalkEntry::Object {
                    key: key.to_owned(),
                    meta,
                });
                return Ok(self.full());
            }
            return Ok(false);
        }
        if self.before_marker(key) {
            return Ok(false);
        }
        // Descend when the prefix goes deeper than `key`, or when the whole range is under the
        // prefix and the walk is not delimited; when delimited, `key` is a common prefix.
        let descend = prefix.starts_with(key) || (key.starts_with(prefix) && !self.opts.delimited);
        let common_prefix = !descend && key.starts_with(prefix) && self.after_marker(key);
        if !descend && !common_prefix {
            return Ok(false);
        }
        let child = dir.join(name);
        if self.certainly_leaf(&child, *data_dir) {
            return Ok(false);
        }
        if descend {
            return self.visit(&child, key, *data_dir);
        }
        if self.has_object_below(&child, *data_dir)? {
            self.out.push(WalkEntry::Prefix(key.to_owned()));
            return Ok(self.full());
        }
        Ok(false)
    }

    /// Whether any object lies strictly below `dir` (depth first, stopping at the first found).
    fn has_object_below(&mut self, dir: &Path, skip: Option<Uuid>) -> io::Result<bool> {
        let children = match self.read_children(dir, skip) {
            Ok(c) => c,
            Err(e) if is_not_found(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        if children.folder && is_file(&dir.join(FOLDER_DIR).join(META_FILE))? {
            return Ok(true);
        }
        for n in &children.names {
            if is_file(&dir.join(n).join(META_FILE))? {
                return Ok(true);
            }
        }
        for n in &children.names {
            if self.has_object_below(&dir.join(n), None)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn read_children(dir: &Path, skip: Option<Uuid>) -> io::Result<Children> {
    let skip = skip.map(|u| u.to_string());
    let mut c = Children {
        names: Vec::new(),
        folder: false,
    };
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        // Keys are directories; files (metadata, parts, temp files) and symlinks are not.
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name == FOLDER_DIR {
            c.folder = true;
        } else if is_key_segment(&name) && skip.as_deref() != Some(name.as_str()) {
            c.names.push(name);
        }
    }
    Ok(c)
}

/// Reads the metadata in `obj_dir` for a listing: `None` if there is none (not an object) or it
/// cannot be decoded (logged).
fn read_meta(obj_dir: &Path, buf: &mut Vec<u8>) -> io::Result<Option<ObjectMeta>> {
    let path = obj_dir.join(META_FILE);
    match read_meta_header(&path, buf) {
        Ok(Ok(m)) => Ok(Some(m)),
        Ok(Err(e)) => {
            warn!(path = %path.display(), error = %e, "skipping object with unreadable metadata");
            Ok(None)
        }
        Err(e) if is_not_found(&e) || e.kind() == io::ErrorKind::IsADirectory => Ok(None),
        Err(e) => Err(e),
    }
}

fn is_file(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(md) => Ok(md.is_file()),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive::Drive;
    use crate::local::LocalDrive;
    use crate::meta::{ErasureInfo, META_VERSION};

    fn meta(key: &str) -> ObjectMeta {
        ObjectMeta {
            version: META_VERSION,
            version_id: None,
            delete_marker: false,
            size: 1,
            mod_time_ns: 0,
            etag: key.to_owned(),
            headers: Default::default(),
            user_meta: Default::default(),
            checksums: Default::default(),
            erasure: ErasureInfo {
                codec: "rs-vandermonde-gf8".into(),
                bitrot: "blake3-256".into(),
                data: 1,
                parity: 1,
                block_size: 1 << 20,
                index: 1,
                distribution: vec![1, 2],
            },
            data_dir: None,
            parts: vec![],
            inline: Some(bytes::Bytes::from_static(&[0])),
        }
    }

    /// Listing reads only the directories that can hold keys under the prefix and after the
    /// marker.
    #[tokio::test]
    async fn reads_only_what_it_must() {
        let t = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let d = LocalDrive::open(t.path()).await.unwrap();
        d.make_volume("b").await.unwrap();
        for x in 0..20 {
            for k in 0..5 {
                let key = format!("x{x:02}/k{k}");
                d.rename_data(Uuid::new_v4(), "b", &key, &meta(&key))
                    .await
                    .unwrap();
            }
        }
        let bucket = d.root().join("b");
        let run = |prefix: &str, marker: Option<&str>, delimited: bool, leaf_opt: bool| {
            let o = WalkOptions {
                prefix: prefix.into(),
                marker: marker.map(Into::into),
                delimited,
                limit: 1000,
            };
            let (entries, dirs) = walk(&bucket, &o, leaf_opt).unwrap();
            (entries.len(), dirs)
        };
        let full = |p, m, dl| run(p, m, dl, false);
        // Everything: the bucket, 20 prefixes, 100 object directories.
        assert_eq!(full("", None, false), (100, 121));
        // Under a prefix: that directory and its objects' directories only.
        assert_eq!(full("x05/", None, false), (5, 6));
        assert_eq!(full("x05/", None, true), (5, 6));
        assert_eq!(full("x05/k", None, true), (5, 6));
        assert_eq!(full("x05/k3", None, false), (1, 2));
        // After a deep marker: the path to it, then what follows.
        assert_eq!(full("", Some("x17/k3"), false), (11, 1 + 3 + 2 * 6));
        assert_eq!(full("x05/", Some("x05/k3"), false), (1, 3));
        // Delimited from the top, after a marker: only the prefixes after it are probed.
        assert_eq!(full("", Some("x17/"), true), (2, 1 + 2));
        // A marker past everything under the prefix reads nothing.
        assert_eq!(full("x05/", Some("x06"), false), (0, 0));

        // Where link counts tell leaves apart, object directories are not read at all.
        if d.leaf_opt {
            let leaf = |p, m, dl| run(p, m, dl, true);
            assert_eq!(leaf("", None, false), (100, 21));
            assert_eq!(leaf("x05/", None, true), (5, 1));
            assert_eq!(leaf("", Some("x17/k3"), false), (11, 1 + 1 + 2));
        }
    }

    /// Both ways of walking agree on a tree with every kind of directory in it.
    #[tokio::test]
    async fn leaf_shortcut_agrees_with_reading_everything() {
        let t = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let d = LocalDrive::open(t.path()).await.unwrap();
        if !d.leaf_opt {
            return; // the shortcut cannot be exercised on this filesystem
        }
        d.make_volume("b").await.unwrap();
        let keys = [
            "a", "a/", "a/b", "a-c", "d", "d/e/f", "g/", "h", "i/j/", "a-c/x",
        ];
        for (i, key) in keys.iter().enumerate() {
            let mut m = meta(key);
            let tmp = Uuid::new_v4();
            if i % 2 == 0 {
                let dd = Uuid::new_v4();
                let mut w = d.create_shard_writer(tmp, dd, 1).await.unwrap();
                w.write(b"x").await.unwrap();
                w.finish().await.unwrap();
                m.data_dir = Some(dd);
                m.inline = None;
            }
            d.rename_data(tmp, "b", key, &m).await.unwrap();
        }
        // Stray directories: empty, under an object, under a data dir.
        for p in ["b/h/stray", "b/z/y", "b/d/e/f/orphan/x"] {
            fs::create_dir_all(d.root().join(p)).unwrap();
        }
        let bucket = d.root().join("b");
        for prefix in ["", "a", "a/", "d/", "d/e/", "h", "h/", "i/"] {
            for marker in [None, Some("a"), Some("a/"), Some("d/e"), Some("h")] {
                for delimited in [false, true] {
                    let o = WalkOptions {
                        prefix: prefix.into(),
                        marker: marker.map(Into::into),
                        delimited,
                        limit: 1000,
                    };
                    let slow = walk(&bucket, &o, false).unwrap();
                    let fast = walk(&bucket, &o, true).unwrap();
                    assert_eq!(slow.0, fast.0, "{o:?}");
                    assert!(fast.1 <= slow.1, "{o:?}");
                }
            }
        }
        let all = WalkOptions {
            limit: 1000,
            ..Default::default()
        };
        let names: Vec<String> = walk(&bucket, &all, true)
            .unwrap()
            .0
            .iter()
            .map(|e| e.name().to_owned())
            .collect();
        assert_eq!(
            names,
            ["a", "a-c", "a-c/x", "a/", "a/b", "d", "d/e/f", "g/", "h", "i/j/"]
        );
    }
}
