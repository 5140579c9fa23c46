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
//!
//! A directory's candidates are opened and stat'ed by name in the directory (`openat`, `statx`
//! on its descriptor, opened once per visit), not by their whole path from the root: the
//! kernel's lookup of a drive path's every component was a sixth of a listing's CPU.
//!
//! An object's metadata comes from [`MetaCache`] while its directory's stamp (from the `statx`
//! that also gives the link count) is what it was when the metadata was read: a warm page then
//! costs one `statx` per key and drive instead of four calls. While no change to the key was
//! made through this process since that stamp was last checked (its change epoch, see
//! [`super::meta_cache::Epochs`]), the kept entry is taken without the `statx`, found by the
//! inode number the directory listing gave: a page whose keys are kept then makes no call per
//! key at all, which keeps it fast when the kernel's caches of inodes are cold.
//!
//! A directory's sorted candidates come from [`DirCache`]: a large directory that has not
//! changed since it was last read is not read and sorted again, and a page starts at its first
//! candidate after the marker and the prefix by binary search. A page of a million-key prefix
//! then costs its own keys, not the million.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags};

use tracing::warn;
use uuid::Uuid;

use super::dir_cache::{key_dirs, DirCache, KeyDir, Stamp};
use super::meta_cache::{key_hash, Epochs, MetaCache};
use super::{is_not_found, read_meta_header, read_meta_header_from};
use crate::drive::{WalkEntry, WalkOptions};
use crate::meta::ObjectMeta;
use crate::path::{prefix_dir_rel_path, FOLDER_DIR, META_FILE};

/// What a walk read from the drive: tests check that listing reads only what it must.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Reads {
    /// Directories listed.
    pub dirs: usize,
    /// Metadata files read (not found kept).
    pub metas: usize,
    /// Object directories stat'ed to check or read their metadata.
    pub stats: usize,
}

/// Walks the bucket at `bucket_dir` (which exists), unbounded: what the tests call.
#[cfg(test)]
pub(super) fn walk(
    bucket_dir: &Path,
    epochs: &Epochs,
    opts: &WalkOptions,
    leaf_opt: bool,
) -> io::Result<(Vec<WalkEntry>, Reads)> {
    let bucket = bucket_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a bucket's name");
    walk_bounded(bucket_dir, bucket, epochs, opts, leaf_opt, usize::MAX).map(|(e, r, _)| (e, r))
}

/// [`walk`] of bucket `bucket` (the name change epochs know its keys by), stopping once the
/// entries walked are estimated to take `max_bytes` on the wire
/// ([`WalkEntry::wire_estimate`]), with at least one; the `bool` says it stopped so (more may
/// follow: the bound may be reached with the last entry there is).
pub(super) fn walk_bounded(
    bucket_dir: &Path,
    bucket: &str,
    epochs: &Epochs,
    opts: &WalkOptions,
    leaf_opt: bool,
    max_bytes: usize,
) -> io::Result<(Vec<WalkEntry>, Reads, bool)> {
    let mut w = Walker {
        bucket,
        epochs,
        opts,
        leaf_opt,
        out: Vec::new(),
        bytes: 0,
        max_bytes,
        reads: Reads::default(),
        key: String::new(),
        buf: Vec::new(),
        key_meta: String::new(),
        started: SystemTime::now(),
    };
    if opts.limit == 0 {
        return Ok((w.out, w.reads, false));
    }
    let Some(rel) = prefix_dir_rel_path(&opts.prefix) else {
        return Ok((w.out, w.reads, false)); // no valid key can start with this prefix
    };
    let start = match opts.prefix.rfind('/') {
        Some(i) => &opts.prefix[..=i],
        None => "",
    };
    if !start.is_empty() && w.before_marker(start) {
        return Ok((w.out, w.reads, false));
    }
    w.visit(&bucket_dir.join(rel), start, None)?;
    let stopped = w.bytes >= w.max_bytes && w.out.len() < opts.limit;
    Ok((w.out, w.reads, stopped))
}

/// What a visit learned of a child directory as an object, for when it comes to the range of
/// keys below it.
#[derive(Default, Clone, Copy)]
struct Seen {
    /// The object's data dir, not a key segment.
    data_dir: Option<Uuid>,
    /// The directory's link count, from the `statx` made to read the object.
    nlink: Option<u32>,
}

struct Walker<'a> {
    /// The bucket's name, which change epochs know keys by.
    bucket: &'a str,
    /// The drive's change epochs.
    epochs: &'a Epochs,
    opts: &'a WalkOptions,
    /// Whether directory link counts are 2 + number of subdirectories on this filesystem.
    leaf_opt: bool,
    out: Vec<WalkEntry>,
    /// The estimated wire size of `out`, and where the walk stops.
    bytes: usize,
    max_bytes: usize,
    reads: Reads,
    /// Scratch space for building candidate keys.
    key: String,
    /// Scratch space for reading metadata.
    buf: Vec<u8>,
    /// Scratch space for a metadata file's path in its directory's directory.
    key_meta: String,
    /// When the walk began: before every `statx` it makes, so what it reads of a directory
    /// settled before then can be kept (see [`Stamp::settled`]).
    started: SystemTime,
}

impl Walker<'_> {
    fn full(&self) -> bool {
        self.out.len() >= self.opts.limit || self.bytes >= self.max_bytes
    }

    fn push(&mut self, e: WalkEntry) {
        self.bytes = self.bytes.saturating_add(e.wire_estimate());
        self.out.push(e);
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

    /// Whether directory `name` of `dir` certainly has no subdirectory but its data dir (if
    /// known), judged from its link count without reading it. `false` means "unknown".
    fn certainly_leaf(&self, dir: &mut DirFd, name: &str, seen: Seen) -> bool {
        if !self.leaf_opt {
            return false;
        }
        let nlink = match seen.nlink {
            Some(n) => n,
            None => match stat_in(dir, name, StatxFlags::TYPE | StatxFlags::NLINK) {
                Ok(st) if is_dir(&st) => st.stx_nlink,
                _ => return false,
            },
        };
        u64::from(nlink) == 2 + u64::from(seen.data_dir.is_some())
    }

    /// The object `key` in directory `name` of `dir` (inode `ino` by the directory listing),
    /// if any: kept from an earlier walk while the directory is unchanged, else read (and kept
    /// once the directory has settled). Notes the directory's link count in `seen`.
    fn object_meta(
        &mut self,
        dir: &mut DirFd,
        name: &str,
        key: &str,
        ino: u64,
        seen: &mut Seen,
    ) -> io::Result<Option<Arc<ObjectMeta>>> {
        let cache = MetaCache::global();
        let hash = key_hash(self.bucket, key);
        if let Some((kept, nlink)) = cache.unchanged((dir.dev, ino), hash, self.epochs) {
            seen.nlink = Some(nlink);
            return Ok(kept);
        }
        // Read before the stat: a change made after it bumps it, and the entry is checked again.
        let epoch = self.epochs.epoch(hash);
        self.reads.stats += 1;
        let (stamp, nlink) = match stat_in(dir, name, StatxFlags::BASIC_STATS) {
            Ok(st) if is_dir(&st) => {
                seen.nlink = Some(st.stx_nlink);
                (Stamp::of_statx(&st), st.stx_nlink)
            }
            Ok(_) => return Ok(None), // not a directory (any more): no object
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        if let Some(kept) = cache.kept(&stamp, nlink, hash, epoch) {
            return Ok(kept);
        }
        self.reads.metas += 1;
        let path = &mut self.key_meta;
        path.clear();
        path.push_str(name);
        path.push('/');
        path.push_str(META_FILE);
        let read = dir.get().and_then(|fd| {
            let file = rustix::fs::openat(
                fd,
                path.as_str(),
                OFlags::RDONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            read_meta_header_from(File::from(file), &mut self.buf)
        });
        // Kept: what was found, or that nothing is there; not metadata that cannot be read
        // (logged at every walk, as it should be mended).
        let keep = !matches!(read, Ok(Err(_))) && stamp.settled(self.started);
        let meta = meta_or_skip(read, || dir.path.join(name).join(META_FILE))?.map(Arc::new);
        if keep {
            cache.keep(stamp, nlink, hash, epoch, meta.as_ref());
        }
        Ok(meta)
    }

    /// Whether every key of candidate `key` (an object, or with `dir` the range of keys below
    /// it) sorts before what this walk lists: at or before the marker, or before the prefix.
    /// False, then true along a directory's walk order: its candidates' ranges are disjoint.
    fn entirely_before(&self, key: &str, dir: bool) -> bool {
        let prefix = self.opts.prefix.as_str();
        if dir {
            self.before_marker(key) || (key < prefix && !prefix.starts_with(key))
        } else {
            !self.after_marker(key) || key < prefix
        }
    }

    /// Whether every key of candidate `key` sorts after the keys under the prefix.
    fn entirely_after_prefix(&self, key: &str) -> bool {
        let prefix = self.opts.prefix.as_str();
        key > prefix && !key.starts_with(prefix) && !prefix.starts_with(key)
    }

    /// Visits the directory `dir` whose key prefix is `p`; `skip` is the data dir of the object
    /// stored in `dir`, when known. Returns whether the limit was reached.
    fn visit(&mut self, dir: &Path, p: &str, skip: Option<Uuid>) -> io::Result<bool> {
        let children = match DirCache::global().listing(dir) {
            Ok((c, read)) => {
                self.reads.dirs += usize::from(read);
                c
            }
            Err(e) if is_not_found(&e) => return Ok(false),
            Err(e) => return Err(e),
        };
        let prefix = self.opts.prefix.as_str();

        if children.folder && !p.is_empty() && p.starts_with(prefix) && self.after_marker(p) {
            let meta_dir = dir.join(FOLDER_DIR);
            if let Some(meta) = read_meta(&meta_dir, &mut self.buf)? {
                self.push(WalkEntry::Object {
                    key: p.to_owned(),
                    meta: Arc::new(meta),
                });
                if self.full() {
                    return Ok(true);
                }
            }
        }

        let skip = skip.map(|u| u.to_string());
        let mut key = std::mem::take(&mut self.key);
        let candidate_key = |key: &mut String, name: &str, dir: bool| {
            key.clear();
            key.push_str(p);
            key.push_str(name);
            if dir {
                key.push('/');
            }
        };
        // Straight to the first candidate at or after the marker and the prefix: a page of a
        // large directory costs its page, not the directory.
        let first = children.partition_point(|name, dir| {
            candidate_key(&mut key, name, dir);
            self.entirely_before(&key, dir)
        });
        // What reading the objects learned of their directories, for their ranges.
        let mut seen: HashMap<usize, Seen> = HashMap::new();
        let mut dir_fd = DirFd {
            path: dir,
            dev: children.dev,
            fd: None,
        };
        let mut r = Ok(false);
        for i in first..children.len() {
            let (idx, name, is_dir) = children.get(i);
            if skip.as_deref() == Some(name) {
                continue;
            }
            candidate_key(&mut key, name, is_dir);
            if self.entirely_after_prefix(&key) {
                break;
            }
            let mut child = seen.get(&idx).copied().unwrap_or_default();
            let ino = children.ino(idx);
            r = self.visit_candidate(&mut dir_fd, name, ino, &key, is_dir, &mut child);
            if !is_dir && (child.data_dir.is_some() || child.nlink.is_some()) {
                seen.insert(idx, child);
            }
            if !matches!(r, Ok(false)) {
                break;
            }
        }
        self.key = key;
        r
    }

    /// One candidate of `visit`: the object `key` (= P n) or the range `key` (= P n /), of child
    /// `name` (inode `ino`) of `dir`.
    fn visit_candidate(
        &mut self,
        dir: &mut DirFd,
        name: &str,
        ino: u64,
        key: &str,
        is_dir: bool,
        seen: &mut Seen,
    ) -> io::Result<bool> {
        let prefix = self.opts.prefix.as_str();
        if !is_dir {
            if !key.starts_with(prefix) || !self.after_marker(key) {
                return Ok(false);
            }
            if let Some(meta) = self.object_meta(dir, name, key, ino, seen)? {
                seen.data_dir = meta.data_dir;
                self.push(WalkEntry::Object {
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
        if self.certainly_leaf(dir, name, *seen) {
            return Ok(false);
        }
        let child = dir.path.join(name);
        if descend {
            return self.visit(&child, key, seen.data_dir);
        }
        if self.has_object_below(&child, seen.data_dir)? {
            self.push(WalkEntry::Prefix(key.to_owned()));
            return Ok(self.full());
        }
        Ok(false)
    }

    /// Whether any object lies strictly below `dir`: first its children's own metadata, then
    /// depth first below them. A large directory's listing comes from the cache, so a delimited
    /// page over large common prefixes reads each of them once, not once per page; a small one
    /// is read only up to its first object (a prefix's first entry nearly always is one).
    fn has_object_below(&mut self, dir: &Path, skip: Option<Uuid>) -> io::Result<bool> {
        let entries: Box<dyn Iterator<Item = io::Result<KeyDir>>> =
            match DirCache::global().listing_if_large(dir) {
                Ok(Some((children, read))) => {
                    self.reads.dirs += usize::from(read);
                    Box::new(children.key_dirs())
                }
                Ok(None) => {
                    self.reads.dirs += 1;
                    match key_dirs(dir) {
                        Ok(e) => Box::new(e),
                        Err(e) if is_not_found(&e) => return Ok(false),
                        Err(e) => return Err(e),
                    }
                }
                Err(e) if is_not_found(&e) => return Ok(false),
                Err(e) => return Err(e),
            };
        let skip = skip.map(|u| u.to_string());
        let mut names = Vec::new();
        for entry in entries {
            match entry? {
                KeyDir::Folder => {
                    if is_file(&dir.join(FOLDER_DIR).join(META_FILE))? {
                        return Ok(true);
                    }
                }
                KeyDir::Key(n, _) if skip.as_deref() != Some(n.as_str()) => {
                    if is_file(&dir.join(&n).join(META_FILE))? {
                        return Ok(true);
                    }
                    names.push(n);
                }
                KeyDir::Key(..) => {}
            }
        }
        for n in &names {
            if self.has_object_below(&dir.join(n), None)? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Reads the metadata in `obj_dir` for a listing: `None` if there is none (not an object) or it
/// cannot be decoded (logged).
fn read_meta(obj_dir: &Path, buf: &mut Vec<u8>) -> io::Result<Option<ObjectMeta>> {
    let path = obj_dir.join(META_FILE);
    meta_or_skip(read_meta_header(&path, buf), || path.clone())
}

/// What a walk makes of reading the metadata at `path`: the object (its
/// [`ObjectMeta::listing_view`]), nothing (no metadata there; unreadable metadata, logged), or
/// an I/O error.
fn meta_or_skip(
    read: io::Result<crate::drive::Result<ObjectMeta>>,
    path: impl FnOnce() -> std::path::PathBuf,
) -> io::Result<Option<ObjectMeta>> {
    match read {
        Ok(Ok(m)) => Ok(Some(m.listing_view())),
        Ok(Err(e)) => {
            warn!(path = %path().display(), error = %e, "skipping object with unreadable metadata");
            Ok(None)
        }
        Err(e) if is_not_found(&e) || e.kind() == io::ErrorKind::IsADirectory => Ok(None),
        Err(e) => Err(e),
    }
}

/// A directory a visit reads its candidates in, opened on first use.
struct DirFd<'p> {
    path: &'p Path,
    /// Its device, which its children's inode numbers are of.
    dev: u64,
    fd: Option<OwnedFd>,
}

impl DirFd<'_> {
    fn get(&mut self) -> io::Result<&OwnedFd> {
        if self.fd.is_none() {
            self.fd = Some(rustix::fs::open(
                self.path,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?);
        }
        Ok(self.fd.as_ref().expect("opened above"))
    }
}

/// `statx` of `name` in `dir`, not following a symlink.
fn stat_in(dir: &mut DirFd, name: &str, mask: StatxFlags) -> io::Result<rustix::fs::Statx> {
    let fd = dir.get()?;
    Ok(rustix::fs::statx(
        fd,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        mask,
    )?)
}

fn is_dir(st: &rustix::fs::Statx) -> bool {
    FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Directory
}

fn is_file(path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(md) => Ok(md.is_file()),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::drive::Drive;
    use crate::local::LocalDrive;
    use crate::meta::{ErasureInfo, META_VERSION};

    /// Metadata of a one-byte inline object whose ETag is `key`.
    pub(in crate::local) fn meta(key: &str) -> ObjectMeta {
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

    /// A drive in a temporary directory, on tmpfs where there is one.
    async fn drive() -> (tempfile::TempDir, LocalDrive) {
        let t = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let d = LocalDrive::open(t.path()).await.unwrap();
        (t, d)
    }

    /// Listing reads only the directories that can hold keys under the prefix and after the
    /// marker.
    #[tokio::test]
    async fn reads_only_what_it_must() {
        let (_t, d) = drive().await;
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
            let (entries, reads) = walk(&bucket, &d.epochs, &o, leaf_opt).unwrap();
            (entries.len(), reads.dirs)
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
        let (_t, d) = drive().await;
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
            std::fs::create_dir_all(d.root().join(p)).unwrap();
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
                    let slow = walk(&bucket, &d.epochs, &o, false).unwrap();
                    let fast = walk(&bucket, &d.epochs, &o, true).unwrap();
                    assert_eq!(slow.0, fast.0, "{o:?}");
                    assert!(fast.1.dirs <= slow.1.dirs, "{o:?}");
                }
            }
        }
        let all = WalkOptions {
            limit: 1000,
            ..Default::default()
        };
        // Where link counts count subdirectories, the objects without any are not read.
        if super::super::link_count_counts_subdirs(&bucket) {
            let (slow, fast) = (
                walk(&bucket, &d.epochs, &all, false).unwrap().1.dirs,
                walk(&bucket, &d.epochs, &all, true).unwrap().1.dirs,
            );
            assert!(
                fast < slow,
                "{fast} directories read, {slow} without link counts"
            );
        }
        let names: Vec<String> = walk(&bucket, &d.epochs, &all, true)
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

    /// An object's metadata kept between walks is used only while its directory is unchanged:
    /// an object replaced, deleted, or deleted and written again is read again at once. While
    /// the drive changed nothing of a key, its kept metadata is taken without a `statx`; each
    /// call that changes a key makes the next walk check it (and the keys its directory is
    /// below) again.
    #[tokio::test]
    async fn kept_metadata_is_used_only_while_the_object_is_unchanged() {
        use super::super::dir_cache::SETTLE;
        use super::super::meta_cache::epoch_slot_index;
        let (_t, d) = drive().await;
        d.make_volume("b").await.unwrap();
        let keys: Vec<String> = (0..40)
            .map(|i| format!("k{i:02}"))
            .chain((0..10).map(|i| format!("k05/below{i}")))
            .collect();
        for key in &keys {
            d.rename_data(Uuid::new_v4(), "b", key, &meta(key))
                .await
                .unwrap();
        }
        let bucket = d.root().join("b");
        let all = WalkOptions {
            limit: 1000,
            ..Default::default()
        };
        // (key, ETag) of every listed object; metadata files read; directories stat'ed.
        let listed = |leaf_opt: bool| {
            let (entries, reads) = walk(&bucket, &d.epochs, &all, leaf_opt).unwrap();
            let etags: Vec<(String, String)> = entries
                .iter()
                .map(|e| match e {
                    WalkEntry::Object { key, meta } => (key.clone(), meta.etag.clone()),
                    WalkEntry::Prefix(p) => panic!("{p}: not delimited"),
                })
                .collect();
            (etags, reads.metas, reads.stats)
        };
        let (first, metas, stats) = listed(d.leaf_opt);
        assert_eq!(first.len(), 50);
        assert_eq!((metas, stats), (50, 50));
        assert_eq!(listed(d.leaf_opt).1, 50, "just written: read again");
        tokio::time::sleep(SETTLE + std::time::Duration::from_millis(100)).await;
        assert_eq!(listed(d.leaf_opt), (first.clone(), 50, 50), "read and kept");
        assert_eq!(listed(d.leaf_opt), (first.clone(), 0, 0), "kept, unchanged");
        assert_eq!(
            listed(false),
            (first.clone(), 0, 0),
            "kept, read without link counts"
        );

        // Replaced; deleted; deleted and written again; metadata rewritten in place of its
        // version (as a tagging or retention change does); the only version deleted; a key made
        // below an object that had none (its link count changes, its metadata does not).
        d.rename_data(Uuid::new_v4(), "b", "k03", &meta("new"))
            .await
            .unwrap();
        d.delete_object("b", "k04").await.unwrap();
        d.delete_object("b", "k05").await.unwrap();
        d.rename_data(Uuid::new_v4(), "b", "k05", &meta("again"))
            .await
            .unwrap();
        let mut updated = meta("k07");
        updated.etag = "rewritten".into();
        d.write_meta("b", "k07", &updated).await.unwrap();
        d.delete_version("b", "k08", None).await.unwrap();
        d.rename_data(Uuid::new_v4(), "b", "k10/new", &meta("k10/new"))
            .await
            .unwrap();
        let mut expected: Vec<(String, String)> = first
            .iter()
            .filter(|(k, _)| k != "k04" && k != "k08")
            .map(|(k, e)| {
                let e = match k.as_str() {
                    "k03" => "new",
                    "k05" => "again",
                    "k07" => "rewritten",
                    _ => e,
                };
                (k.clone(), e.to_string())
            })
            .collect();
        expected.push(("k10/new".into(), "k10/new".into()));
        expected.sort();
        // Checked again: the changed keys, k10 (a key was made below it), and any other key
        // whose epoch slot one of theirs shares.
        let bumped: Vec<usize> = ["k03", "k04", "k05", "k07", "k08", "k10", "k10/new"]
            .iter()
            .map(|k| epoch_slot_index(key_hash("b", k)))
            .collect();
        let checked = expected
            .iter()
            .filter(|(k, _)| bumped.contains(&epoch_slot_index(key_hash("b", k))))
            .count();
        // Read again: the three changed, k10 (its directory changed) and the new key.
        assert_eq!(
            listed(d.leaf_opt),
            (expected.clone(), 5, checked),
            "the changed read"
        );
        assert_eq!(
            listed(false),
            (expected.clone(), 5, checked),
            "not settled: read again"
        );
        tokio::time::sleep(SETTLE + std::time::Duration::from_millis(100)).await;
        assert_eq!(listed(d.leaf_opt), (expected.clone(), 5, checked));
        assert_eq!(listed(d.leaf_opt), (expected.clone(), 0, 0), "kept again");

        // The bucket removed and made again with the same keys: read again, not taken from the
        // old bucket's entries, whatever inode numbers the new directories have.
        d.delete_volume("b", true).await.unwrap();
        d.make_volume("b").await.unwrap();
        for key in &keys {
            d.rename_data(Uuid::new_v4(), "b", key, &meta("v2"))
                .await
                .unwrap();
        }
        let (again, metas, _) = listed(d.leaf_opt);
        assert_eq!(again.len(), 50);
        assert!(again.iter().all(|(_, e)| e == "v2"), "{again:?}");
        assert_eq!(metas, 50);
    }

    /// A walk bounded in bytes stops once its entries' estimated wire size reaches the bound,
    /// with at least one entry, and says so; a walk that reaches its limit or the end does not.
    #[tokio::test]
    async fn a_walk_bounded_in_bytes_stops_at_its_bound() {
        let (_t, d) = drive().await;
        d.make_volume("b").await.unwrap();
        for i in 0..10 {
            let key = format!("k{i}");
            d.rename_data(Uuid::new_v4(), "b", &key, &meta(&key))
                .await
                .unwrap();
        }
        let bucket = d.root().join("b");
        let run = |limit: usize, max_bytes: usize| {
            let o = WalkOptions {
                limit,
                ..Default::default()
            };
            let (e, _, stopped) =
                walk_bounded(&bucket, "b", &d.epochs, &o, d.leaf_opt, max_bytes).unwrap();
            (e.len(), stopped)
        };
        let one = walk(
            &bucket,
            &d.epochs,
            &WalkOptions {
                limit: 1,
                ..Default::default()
            },
            d.leaf_opt,
        )
        .unwrap()
        .0[0]
            .wire_estimate();
        assert!(one > 100, "{one}");
        assert_eq!(run(100, usize::MAX), (10, false));
        assert_eq!(run(100, 1), (1, true), "at least one");
        assert_eq!(run(100, 3 * one), (3, true));
        assert_eq!(run(100, 3 * one - 1), (3, true));
        assert_eq!(run(3, 3 * one), (3, false), "the limit came first");
        assert_eq!(run(100, 10 * one + 1), (10, false), "the end came first");
        assert_eq!(
            run(100, 10 * one),
            (10, true),
            "the bound reached with the last: more may follow (a next walk finds none)"
        );
    }

    /// Pages of a large directory kept sorted between walks are those of reading it each time,
    /// for every prefix, marker and delimiter, and a key added between pages is seen.
    #[tokio::test]
    async fn pages_of_a_kept_listing_agree_with_reading_it() {
        use super::super::dir_cache::{MIN_ENTRIES, SETTLE};
        let (_t, d) = drive().await;
        d.make_volume("b").await.unwrap();
        let mut keys: Vec<String> = (0..MIN_ENTRIES + 500).map(|i| format!("k{i:04}")).collect();
        keys.extend(
            [
                "k0100/a",
                "k0100/b/c",
                "k0200-x",
                "k0300/",
                "k0300/z",
                "k0400.y/q",
                "l",
                "j/",
            ]
            .map(String::from),
        );
        // A large common prefix: found to hold an object through its kept listing.
        keys.extend((0..MIN_ENTRIES).map(|i| format!("big/o{i:04}")));
        for key in &keys {
            d.rename_data(Uuid::new_v4(), "b", key, &meta(key))
                .await
                .unwrap();
        }
        let bucket = d.root().join("b");
        // Every page of every walk: (prefix, marker, delimited), pages of 100.
        let cases: Vec<(&str, Option<&str>, bool)> = vec![
            ("", None, false),
            ("", None, true),
            ("k", None, true),
            ("k01", None, true),
            ("k01", None, false),
            ("k0100", None, true),
            ("k0100/", None, false),
            ("k03", Some("k0300"), false),
            ("k03", Some("k0300/"), true),
            ("", Some("k0200"), true),
            ("k04", Some("k0400.y/"), false),
            ("k1", Some("k1499"), false),
            ("k9", None, false),
            ("", Some("k2"), false),
        ];
        let walk_all = |leaf_opt: bool| -> (Vec<Vec<String>>, usize) {
            let mut dirs = 0;
            let mut out = Vec::new();
            for (prefix, marker, delimited) in &cases {
                let mut names = Vec::new();
                let mut marker = marker.map(String::from);
                loop {
                    let o = WalkOptions {
                        prefix: (*prefix).into(),
                        marker: marker.clone(),
                        delimited: *delimited,
                        limit: 100,
                    };
                    let (page, n) = walk(&bucket, &d.epochs, &o, leaf_opt).unwrap();
                    dirs += n.dirs;
                    names.extend(page.iter().map(|e| e.name().to_owned()));
                    match page.last() {
                        Some(e) if page.len() == 100 => marker = Some(e.name().to_owned()),
                        _ => break,
                    }
                }
                out.push(names);
            }
            (out, dirs)
        };
        // Just written: the bucket directory is read for every page.
        let (read, read_dirs) = walk_all(d.leaf_opt);
        let mut all = keys.clone();
        all.sort();
        assert_eq!(read[0], all);
        assert_eq!(read[12], Vec::<String>::new());
        let common: Vec<&String> = read[1].iter().filter(|n| n.ends_with('/')).collect();
        assert_eq!(common, ["big/", "j/", "k0100/", "k0300/", "k0400.y/"]);
        assert_eq!(read[2].len(), MIN_ENTRIES + 500 + 4, "{:?}", &read[2][..5]);

        tokio::time::sleep(SETTLE + std::time::Duration::from_millis(100)).await;
        let (kept, kept_dirs) = walk_all(d.leaf_opt);
        assert_eq!(kept, read);
        assert!(kept_dirs < read_dirs, "{kept_dirs} < {read_dirs}");

        // A key added (and one removed) between two pages of a walk is seen by the next.
        let o = |marker: &str| WalkOptions {
            prefix: "".into(),
            marker: Some(marker.into()),
            delimited: true,
            limit: 3,
        };
        let names = |o: &WalkOptions| -> Vec<String> {
            walk(&bucket, &d.epochs, o, d.leaf_opt)
                .unwrap()
                .0
                .iter()
                .map(|e| e.name().to_owned())
                .collect()
        };
        assert_eq!(names(&o("k0500")), ["k0501", "k0502", "k0503"]);
        d.rename_data(Uuid::new_v4(), "b", "k0501a", &meta("k0501a"))
            .await
            .unwrap();
        d.delete_object("b", "k0502").await.unwrap();
        assert_eq!(names(&o("k0500")), ["k0501", "k0501a", "k0503"]);
    }
}
